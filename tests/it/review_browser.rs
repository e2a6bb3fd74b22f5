//! The review web app in a real headless browser: Debian's chromium, driven over
//! WebDriver (`/usr/bin/chromedriver`, installed by `scripts/setup.d/40-chromium.sh`)
//! with the fantoccini client. A reviewer signs in with the single-use link (code in the
//! fragment), after which neither the address, the session history nor the referrer
//! holds the code, the browser's history database holds only the spent code and never
//! the personal token; scores a sample with the keyboard
//! (autosave), reloads and sees it saved, submits; the other reviewer cannot read it
//! before submitting (403); no session is 401; a cross-site form POST without the CSRF
//! token is refused and changes nothing. A long multi-turn sample reads turn by turn
//! (descriptions, argument tables, places in the plan, the final answer apart, results
//! in full once opened), looks like a page of text in a screenshot, and the keyboard
//! scores the dimension that has the focus, the only one highlighted; Ctrl+Enter submits.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource as _, KeyAction, KeyActions};
use fantoccini::{ClientBuilder, Locator};
use serde_json::json;

use crate::review::{RP, Server, link_of, sign_in, sign_in_link, token_of};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

struct Driver {
    child: std::process::Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn chromedriver() -> Driver {
    let port = free_port();
    let child = std::process::Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    let d = Driver { child, url };
    let t0 = Instant::now();
    let http = reqwest::Client::new();
    while http.get(format!("{}/status", d.url)).send().await.is_err() {
        assert!(t0.elapsed() < Duration::from_secs(20), "chromedriver did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    d
}

/// A page on another loopback port that posts a score form to the app on load, without
/// a CSRF token (what a malicious site would try).
fn attacker(target: String) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = format!(
                "<!doctype html><html><body><form id=f method=post action=\"{target}\">\
                 <input name=relevance value=1><input name=completeness value=1><input name=consistency value=1>\
                 <input name=reliability value=1><input name=freshness value=1></form>\
                 <script>document.getElementById('f').submit()</script></body></html>"
            );
            let _ = write!(
                s,
                // no-referrer: the forged post carries `Origin: null`, like the app's own forms.
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\nreferrer-policy: no-referrer\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

async fn wait_text(c: &fantoccini::Client, css: &str, want: &str) {
    let t0 = Instant::now();
    loop {
        if let Ok(e) = c.find(Locator::Css(css)).await
            && e.text().await.unwrap_or_default() == want
        {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "`{css}` never showed {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn press(c: &fantoccini::Client, keys: &str) {
    let mut a = KeyActions::new("keyboard".to_string());
    for ch in keys.chars() {
        a = a.then(KeyAction::Down { value: ch }).then(KeyAction::Up { value: ch });
    }
    c.perform_actions(a).await.unwrap();
}

/// Whether Debian's chromium and chromedriver are installed (else the test says it skips).
fn have_chromium() -> bool {
    for bin in [CHROMIUM, CHROMEDRIVER] {
        if !std::path::Path::new(bin).exists() {
            eprintln!("skipped: `{bin}` is absent (scripts/setup.d/40-chromium.sh installs Debian's chromium)");
            return false;
        }
    }
    true
}

/// A headless chromium session with its own profile directory.
async fn browser(drv: &Driver, profile: &std::path::Path) -> fantoccini::Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": CHROMIUM, "args": [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", "--hide-scrollbars", format!("--user-data-dir={}", profile.display()),
        ]}),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&drv.url)
        .await
        .expect("a chromium session")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_scores_with_the_keyboard_in_chromium_and_access_rules_hold() {
    if !have_chromium() {
        return;
    }
    let rp = RP::new(4, "");
    rp.ok(&["review", "assign"]);
    let a = rp.assignments();
    let x = a.samples.iter().find(|x| x.reviewers.contains(&"alice".into())).unwrap().clone();
    let other = x.reviewers.iter().find(|r| *r != "alice").unwrap().clone();
    let srv = Server::start(&rp.p);
    let base = srv.base.clone();
    let drv = chromedriver().await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&drv, profile.path()).await;

    // Sign in with the link as written by `review assign`.
    let token = token_of(&rp.p, "alice");
    let link = link_of(&rp.p, "alice", &base);
    let code = link.split("#link=").nth(1).unwrap().to_string();
    c.goto(&link).await.unwrap();
    let t0 = Instant::now();
    let url = loop {
        let u = c.current_url().await.unwrap();
        if u.path() == "/" {
            break u;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "not signed in: at {u}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    c.wait().for_element(Locator::Id("progress")).await.unwrap();
    // No code in the address, the referrer, or any entry of the session history.
    assert!(url.query().is_none() && url.fragment().is_none(), "{url}");
    let seen = c.execute("return [location.href, document.referrer, String(history.length)]", vec![]).await.unwrap();
    assert!(!seen.to_string().contains(&code), "{seen}");
    assert_eq!(seen[1], "", "no referrer under `Referrer-Policy: no-referrer`");
    let entries: usize = seen[2].as_str().unwrap().parse().unwrap();
    let mut visited = vec![url.to_string()];
    for _ in 1..entries {
        c.back().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        visited.push(c.execute("return location.href", vec![]).await.unwrap().as_str().unwrap_or("").to_string());
    }
    assert!(visited.iter().all(|u| !u.contains(&code) && !u.contains(&token)), "{visited:?}");
    c.goto(&format!("{base}/")).await.unwrap();
    // The header, on the sign-in page and after it.
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = http.get(format!("{base}/login")).send().await.unwrap();
    assert_eq!(r.headers()["referrer-policy"], "no-referrer");
    assert_eq!(sign_in(&http, &base, &token).await.headers()["referrer-policy"], "no-referrer");
    let progress = c.find(Locator::Id("progress")).await.unwrap().text().await.unwrap();
    assert_eq!(progress, format!("0 of {} done", a.reviewer("alice").unwrap().assigned));

    // Score with the keyboard: 5 4 4 5 4, one key per dimension; each change autosaves.
    c.goto(&format!("{base}/s/{}", x.id)).await.unwrap();
    c.wait().for_element(Locator::Css("fieldset.dim.current")).await.unwrap();
    press(&c, "54454").await;
    wait_text(&c, "#status", "Draft saved").await;
    c.refresh().await.unwrap();
    let checked = c
        .execute(
            "return Array.from(document.querySelectorAll('input[type=radio]:checked')).map(r => r.name + '=' + r.value)",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        checked,
        json!(["relevance=5", "completeness=4", "consistency=4", "reliability=5", "freshness=4"]),
        "the draft survived the reload"
    );
    c.find(Locator::Css("textarea[name=note]")).await.unwrap().send_keys("traceable answer").await.unwrap();
    c.find(Locator::Id("submit-review")).await.unwrap().click().await.unwrap();
    if c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("submitted")).await.is_err() {
        panic!("not submitted: {} {}", c.current_url().await.unwrap(), c.source().await.unwrap());
    }
    c.refresh().await.unwrap();
    assert_eq!(c.find(Locator::Id("status")).await.unwrap().text().await.unwrap(), "Submitted");
    assert!(c.find(Locator::Id("progress")).await.unwrap().text().await.unwrap().starts_with("1 of "));

    // A cross-site page posting a form (no CSRF token) is refused and changes nothing.
    c.goto(&attacker(format!("{base}/s/{}/submit", x.id))).await.unwrap();
    let t0 = Instant::now();
    let title = loop {
        let t = c.title().await.unwrap_or_default();
        if t == "Forbidden" || t == "Sign in" {
            break t;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "the forged post was not refused (title {t:?})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(title, "Forbidden", "same-site cookie sent, then refused by the origin/CSRF check");

    // Over plain HTTP: the other reviewer may not read alice's scores yet (403); no session is 401.
    let r = sign_in(&http, &base, &token_of(&rp.p, &other)).await;
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let api = format!("{base}/api/s/{}/scores/alice", x.id);
    assert_eq!(http.get(&api).header("cookie", &cookie).send().await.unwrap().status(), 403);
    assert_eq!(http.get(&api).send().await.unwrap().status(), 401);
    assert_eq!(http.get(format!("{base}/")).send().await.unwrap().status(), 401);
    // Alice's own view (from the browser's session) still shows her scores, untouched.
    c.goto(&api).await.unwrap();
    let body = c.find(Locator::Css("body")).await.unwrap().text().await.unwrap();
    assert!(body.contains("\"relevance\":5") && body.contains("\"submitted\":true"), "{body}");
    // Signed out, the browser gets the sign-in page.
    c.delete_all_cookies().await.unwrap();
    c.goto(&format!("{base}/")).await.unwrap();
    assert_eq!(c.title().await.unwrap(), "Sign in");
    c.close().await.unwrap();
    drop(drv);
    drop(srv);
    // Chromium's own history database (written at exit) keeps the link as it was opened,
    // but its code is spent; the personal token is in no URL at all.
    let urls: Vec<String> = {
        let db = rusqlite::Connection::open_with_flags(
            profile.path().join("Default/History"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("chromium's history database");
        let mut st = db.prepare("SELECT url FROM urls ORDER BY id").unwrap();
        st.query_map([], |r| r.get(0)).unwrap().collect::<rusqlite::Result<_>>().unwrap()
    };
    assert!(urls.iter().any(|u| u.starts_with(&format!("{base}/s/"))), "history recorded the visits: {urls:?}");
    assert!(urls.iter().all(|u| !u.contains(&token) && !u.contains("token=")), "{urls:?}");
    let srv = Server::start(&rp.p);
    for u in urls.iter().filter(|u| u.contains("link=")) {
        let kept = u.split("link=").nth(1).unwrap();
        let r = sign_in_link(&http, &srv.base, kept).await;
        assert_eq!(r.status(), 401, "the code left in history signs nobody in: {u}");
        assert!(r.text().await.unwrap().contains("used already"));
    }
}

/// The long result of the long sample: plain text (shown as it is), ending in a marker.
fn long_report() -> String {
    let mut s = String::from("Growth report for F1 and F2, year to date.\n");
    for m in 1..=40 {
        s.push_str(&format!(
            "month {m:02}: F1 {:+.2} %, F2 {:+.2} %, benchmark {:+.2} % (val {m}…)\n",
            m as f64 * 0.11,
            m as f64 * 0.17,
            m as f64 * 0.09
        ));
    }
    s.push_str("END-OF-LONG-RESULT");
    s
}

/// A three-turn sample with parallel calls, an EFS alternative, dependencies, a missing
/// required argument, an error, long results and a long final answer.
fn long_multi_turn_sample() -> serde_json::Value {
    let news: Vec<serde_json::Value> = (1..=12)
        .map(|i| {
            json!({"title": format!("Fund F2 headline {i}"), "date": format!("2026-11-{i:02}"),
                        "snippet": "The manager raised the equity share and cut the fee for new investors."})
        })
        .collect();
    json!({
        "id": "m001", "family": "finmcp", "kind": "multi_turn", "scenario": ["wealth", "funds"],
        "difficulty": "hard", "provenance_id": "test:m001", "out_of_scope": false,
        "turns": [
            {
                "user": "Compare the latest NAV of funds F1 and F2, and tell me which grew more this year.",
                "reference_plan": [
                    {"alternatives": ["fin::nav", "alt::fund_nav"], "group": 0},
                    {"alternatives": ["fin::nav"], "group": 0},
                    {"alternatives": ["fin::growth"], "group": 1, "depends_on": [0, 1]}
                ],
                "trajectory": [
                    [
                        {"tool": "fin::nav", "arguments": {"fund": "F1"}, "result": "{\"fund\":\"F1\",\"nav\":1.2345,\"date\":\"2026-11-30\"}"},
                        {"tool": "fin::nav", "arguments": {"fund": "F2"}, "result": "{\"fund\":\"F2\",\"nav\":2.5,\"date\":\"2026-11-30\"}"}
                    ],
                    [{"tool": "fin::growth", "arguments": {"funds": ["F1", "F2"], "since": "2026-01-01"}, "result": long_report()}]
                ],
                "gold_reply": "F1's NAV is 1.2345 and F2's is 2.5 (30 November). F2 grew more this year: +6.80 % against +4.40 %."
            },
            {
                "user": "And what does F2 cost me in fees?",
                "reference_plan": [{"alternatives": ["fin::fees"], "group": 0}],
                "trajectory": [[
                    {"tool": "fin::fees", "arguments": {}, "error": "missing required argument `fund`"}
                ], [
                    {"tool": "fin::fees", "arguments": {"fund": "F2", "class": "A"},
                     "result": "{\"fund\":\"F2\",\"management_fee\":0.012,\"custody_fee\":0.002,\"subscription_fee\":0.015,\"redemption\":[{\"held_days\":7,\"fee\":0.015},{\"held_days\":365,\"fee\":0.005},{\"held_days\":730,\"fee\":0}]}"}
                ]],
                "gold_reply": "F2 charges 1.2 % a year for management and 0.2 % for custody; buying costs 1.5 %, selling within 7 days 1.5 %."
            },
            {
                "user": "Is there any news that could affect F2?",
                "reference_plan": [
                    {"alternatives": ["news::search"], "group": 0},
                    {"alternatives": ["news::summarise"], "group": 1, "depends_on": [0]}
                ],
                "trajectory": [
                    [{"tool": "news::search", "arguments": {"query": "fund F2", "days": 30}, "result": serde_json::to_string(&news).unwrap()}],
                    [{"tool": "news::summarise", "arguments": {"items": 12}, "result": "The manager raised the equity share and cut fees for new investors."}]
                ],
                "gold_reply": "Two things in the last 30 days:\n1. The manager raised F2's equity share, so it may swing more.\n2. Fees for new investors were cut.\nNeither changes the figures above; the NAV and growth come from today's data."
            }
        ]
    })
}

/// The tools of the long sample as the filtered catalog holds them (`news::summarise` is
/// not in it, so its call shows that it has no description).
fn long_sample_catalog() -> serde_json::Value {
    let tool = |id: &str, desc: &str, props: serde_json::Value, req: &[&str]| {
        json!({"id": id, "name": id.split("::").nth(1).unwrap(), "description": desc,
               "input_schema": {"type": "object", "properties": props, "required": req}})
    };
    json!({"servers": [
        {"name": "fin", "description": "Fund data", "summary": "", "url": "", "categories": ["finance"], "tools": [
            tool("fin::fees", "Fee schedule of a fund share class.", json!({"fund": {"type": "string", "description": "Fund code"},
                 "class": {"type": "string", "description": "Share class"}}), &["fund"]),
            tool("fin::growth", "Year-to-date growth of several funds, month by month, against their benchmark.",
                 json!({"funds": {"type": "array", "description": "Fund codes"}, "since": {"type": "string", "description": "Start date (ISO 8601)"}}), &["funds"]),
            tool("fin::nav", "Latest net asset value (NAV) of a fund, with its date.",
                 json!({"fund": {"type": "string", "description": "Fund code, e.g. F1"}}), &["fund"]),
        ]},
        {"name": "news", "description": "News search", "summary": "", "url": "", "categories": ["news"], "tools": [
            tool("news::search", "Search recent news articles.", json!({"query": {"type": "string", "description": "What to look for"},
                 "days": {"type": "integer", "description": "How many days back"}}), &["query"]),
        ]}
    ]})
}

/// The state of the score panel: the dimension of the focused element, the highlighted
/// dimensions, and the checked scores. Panics when focus and highlight disagree.
async fn focus_state(c: &fantoccini::Client) -> (Option<String>, Vec<String>) {
    let v = c
        .execute(
            "var a = document.activeElement, f = a && a.closest ? a.closest('fieldset.dim') : null;
             return [f ? f.getAttribute('data-dim') : null,
                     Array.from(document.querySelectorAll('fieldset.dim.current')).map(d => d.getAttribute('data-dim')),
                     Array.from(document.querySelectorAll('input[type=radio]:checked')).map(r => r.name + '=' + r.value)]",
            vec![],
        )
        .await
        .unwrap();
    let focused = v[0].as_str().map(str::to_string);
    let current: Vec<String> = v[1].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
    assert_eq!(current, focused.iter().cloned().collect::<Vec<_>>(), "the highlighted dimension is the focused one");
    let checked = v[2].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
    (focused, checked)
}

async fn chord(c: &fantoccini::Client, modifier: char, key: char) {
    let a = KeyActions::new("keyboard".to_string())
        .then(KeyAction::Down { value: modifier })
        .then(KeyAction::Down { value: key })
        .then(KeyAction::Up { value: key })
        .then(KeyAction::Up { value: modifier });
    c.perform_actions(a).await.unwrap();
}

const TAB: char = '\u{e004}';
const ENTER: char = '\u{e007}';
const CONTROL: char = '\u{e009}';
const UP: char = '\u{e013}';
const DOWN: char = '\u{e015}';

/// Width and height from a PNG's IHDR chunk (after checking the signature).
fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(png.len() > 33 && png.starts_with(b"\x89PNG\r\n\x1a\n") && &png[12..16] == b"IHDR", "not a PNG");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_multi_turn_sample_reads_turn_by_turn_and_the_keyboard_scores_what_has_the_focus() {
    if !have_chromium() {
        return;
    }
    let rp = RP::new(2, "");
    let mut items = vec![long_multi_turn_sample()];
    items.extend((1..3).map(|i| crate::review::sample(i, None)));
    rp.p.write("raw/samples.jsonl", crate::review::jsonl(&items));
    rp.p.write("artifacts/filter/catalog.json", long_sample_catalog().to_string());
    rp.ok(&["review", "assign"]);
    let a = rp.assignments();
    let who = a.sample("m001").expect("the long sample is assigned").reviewers[0].clone();
    let srv = Server::start(&rp.p);
    let base = srv.base.clone();
    let drv = chromedriver().await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&drv, profile.path()).await;
    c.set_window_size(1280, 1000).await.unwrap();
    c.goto(&link_of(&rp.p, &who, &base)).await.unwrap();
    c.wait().for_element(Locator::Id("progress")).await.unwrap();
    c.goto(&format!("{base}/s/m001")).await.unwrap();
    c.wait().for_element(Locator::Css("fieldset.dim.current")).await.unwrap();

    // Turn by turn: every call with its tool's description, arguments, result and place in the plan.
    let text = |css: &'static str| {
        let c = c.clone();
        async move { c.find(Locator::Css(css)).await.unwrap().text().await.unwrap() }
    };
    assert_eq!(c.find_all(Locator::Css("section.turn")).await.unwrap().len(), 3);
    assert_eq!(c.find_all(Locator::Css("article.call")).await.unwrap().len(), 7);
    let first = text("#call-1-1-1").await;
    assert!(first.contains("Latest net asset value (NAV) of a fund"), "{first}");
    assert!(first.contains("plan call #1 · step 1 · EFS alternatives: alt::fund_nav"), "{first}");
    assert!(first.contains("fund") && first.contains("F1") && first.contains("Fund code, e.g. F1"), "{first}");
    let growth = text("#call-1-2-1").await;
    assert!(growth.contains("uses the output of #1 fin::nav, #2 fin::nav"), "{growth}");
    assert!(growth.contains("open for all"), "a long result says it is shortened: {growth}");
    let failed = text("#call-2-1-1").await;
    assert!(failed.contains("missing required argument `fund`") && failed.contains("missing"), "{failed}");
    assert!(text("#call-3-2-1").await.contains("No description of this tool in the catalog"));
    let plan = text("#turn-2 table.plan").await;
    assert!(plan.contains("fin::fees"), "{plan}");
    let fin = text("#final-answer").await;
    assert!(fin.starts_with("Final answer") && fin.contains("2. Fees for new investors were cut."), "{fin}");
    assert!(!text("#turn-3").await.contains("Fees for new investors were cut."), "the final answer stands apart");
    assert!(text("#turn-1").await.contains("Assistant's reply to turn 1"));
    let rubric = text("aside.panel").await;
    for d in benchgen::review::default_dimensions() {
        assert!(rubric.contains(&d.name) && rubric.contains(&d.description), "rubric of {}: {rubric}", d.id);
    }
    assert!(rubric.contains("at least 4"), "{rubric}");

    // Screenshot of the whole page as the reviewer first sees it (long results closed).
    let h = c.execute("return document.documentElement.scrollHeight", vec![]).await.unwrap().as_u64().unwrap();
    assert!(h > 1500, "a long page: {h}px");
    c.set_window_size(1280, h.min(7000) as u32 + 40).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let view = c.execute("return [innerWidth, innerHeight, devicePixelRatio]", vec![]).await.unwrap();
    let png = c.screenshot().await.unwrap();
    if let Ok(p) = std::env::var("BENCHGEN_REVIEW_SCREENSHOT") {
        std::fs::write(p, &png).unwrap(); // to look at it
    }
    let (w, hh) = png_size(&png);
    let dpr = view[2].as_f64().unwrap();
    assert_eq!(w as f64, (view[0].as_f64().unwrap() * dpr).round(), "{view}");
    assert_eq!(hh as f64, (view[1].as_f64().unwrap() * dpr).round(), "{view}");
    assert!(png.len() > 20_000, "a page of text is no tiny PNG: {} bytes", png.len());
    c.set_window_size(1280, 1000).await.unwrap();

    // The long result: closed, with a preview; open, in full.
    let long = long_report();
    let details = c.find(Locator::Css("#call-1-2-1 details.result")).await.unwrap();
    let full = details.find(Locator::Css("pre.full")).await.unwrap();
    assert!(!full.is_displayed().await.unwrap());
    let visible = c.find(Locator::Css("body")).await.unwrap().text().await.unwrap();
    assert!(visible.contains("month 01") && !visible.contains("END-OF-LONG-RESULT"), "preview only");
    details.find(Locator::Css("summary")).await.unwrap().click().await.unwrap();
    assert!(full.is_displayed().await.unwrap());
    let shown = c.execute("return arguments[0].textContent", vec![serde_json::to_value(&full).unwrap()]).await.unwrap();
    assert_eq!(shown.as_str().unwrap(), long, "the whole result, nothing cut");
    assert!(full.text().await.unwrap().ends_with("END-OF-LONG-RESULT"));
    // "Open every result" opens the others too.
    c.find(Locator::Id("expand-all")).await.unwrap().click().await.unwrap();
    let closed =
        c.execute("return document.querySelectorAll('details.result:not([open])').length", vec![]).await.unwrap();
    assert_eq!(closed, json!(0));

    // Keys score the dimension that has the focus; the highlight follows the focus.
    c.execute("window.scrollTo(0, 0); document.querySelector('fieldset.dim input').focus()", vec![]).await.unwrap();
    assert_eq!(focus_state(&c).await.0.as_deref(), Some("relevance"));
    press(&c, &TAB.to_string()).await; // Tab: the next dimension (a radio group is one stop)
    let (f, checked) = focus_state(&c).await;
    assert_eq!(f.as_deref(), Some("completeness"));
    assert!(checked.is_empty(), "{checked:?}");
    press(&c, "3").await;
    let (f, checked) = focus_state(&c).await;
    assert_eq!(checked, vec!["completeness=3"], "the focused dimension was scored, not the first");
    assert_eq!(f.as_deref(), Some("consistency"), "and the focus moved on");
    // A click on a dimension's rubric text gives it the focus.
    c.find(Locator::Css("fieldset.dim[data-dim=freshness] p.rubric")).await.unwrap().click().await.unwrap();
    assert_eq!(focus_state(&c).await.0.as_deref(), Some("freshness"));
    press(&c, "2").await;
    let (f, checked) = focus_state(&c).await;
    assert_eq!(checked, vec!["completeness=3", "freshness=2"]);
    assert_eq!(f.as_deref(), Some("freshness"), "the last dimension keeps the focus");
    // In the note, digits are text and no dimension is highlighted.
    c.find(Locator::Css("textarea[name=note]")).await.unwrap().click().await.unwrap();
    assert_eq!(focus_state(&c).await.0, None);
    press(&c, "5").await;
    let (_, checked) = focus_state(&c).await;
    assert_eq!(checked, vec!["completeness=3", "freshness=2"]);
    let note = c.find(Locator::Css("textarea[name=note]")).await.unwrap().prop("value").await.unwrap();
    assert_eq!(note.as_deref(), Some("5"));
    // Focus nowhere (a click on the sample's text): digits do nothing; `j` brings the
    // focus back to the dimension last worked on.
    c.find(Locator::Css("#final-answer .text")).await.unwrap().click().await.unwrap();
    assert_eq!(focus_state(&c).await.0, None);
    press(&c, "4").await;
    assert_eq!(focus_state(&c).await.1, vec!["completeness=3", "freshness=2"]);
    press(&c, "j").await;
    assert_eq!(focus_state(&c).await.0.as_deref(), Some("freshness"));
    press(&c, &[UP, UP, UP, UP].iter().collect::<String>()).await;
    assert_eq!(focus_state(&c).await.0.as_deref(), Some("relevance"));
    press(&c, "5").await;
    press(&c, &DOWN.to_string()).await;
    let (f, checked) = focus_state(&c).await;
    assert_eq!(f.as_deref(), Some("consistency"));
    assert_eq!(checked, vec!["relevance=5", "completeness=3", "freshness=2"]);
    // Ctrl+Enter with a dimension unscored: refused in the page, the focus on what is missing.
    chord(&c, CONTROL, ENTER).await;
    wait_text(
        &c,
        "#form-problem",
        "Score every dimension first (missing: Tool-chain logical consistency, Answer reliability and traceability)",
    )
    .await;
    assert_eq!(focus_state(&c).await.0.as_deref(), Some("consistency"));
    assert!(c.find(Locator::Id("submitted")).await.is_err());
    press(&c, "44").await;
    let (_, checked) = focus_state(&c).await;
    assert_eq!(checked, vec!["relevance=5", "completeness=3", "consistency=4", "reliability=4", "freshness=2"]);
    // Ctrl+Enter submits (form.requestSubmit: no `TypeError`, the button no longer shadows it).
    chord(&c, CONTROL, ENTER).await;
    if c.wait().at_most(Duration::from_secs(10)).for_element(Locator::Id("submitted")).await.is_err() {
        panic!("Ctrl+Enter did not submit: {}", c.current_url().await.unwrap());
    }
    assert_eq!(c.find(Locator::Id("status")).await.unwrap().text().await.unwrap(), "Submitted");
    c.goto(&format!("{base}/api/s/m001/scores/{who}")).await.unwrap();
    let body: serde_json::Value =
        serde_json::from_str(&c.find(Locator::Css("body")).await.unwrap().text().await.unwrap()).unwrap();
    assert_eq!(body["submitted"], true);
    assert_eq!(
        body["scores"],
        json!({"completeness": 3, "consistency": 4, "freshness": 2, "relevance": 5, "reliability": 4})
    );
    assert_eq!(body["note"], "5");

    // The screenshot, decoded by the browser's own PNG decoder: a page of text and
    // colour from top to bottom, not a blank or uniform image.
    c.goto("about:blank").await.unwrap();
    let stats = c
        .execute_async(
            "var done = arguments[arguments.length - 1];
             var img = new Image();
             img.onerror = function () { done({error: 'not a decodable PNG'}); };
             img.onload = function () {
               var cv = document.createElement('canvas'); cv.width = img.width; cv.height = img.height;
               var g = cv.getContext('2d'); g.drawImage(img, 0, 0);
               var d = g.getImageData(0, 0, img.width, img.height).data;
               var colours = new Set(), ink = 0, n = 0, bands = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
               for (var y = 0; y < img.height; y += 2) for (var x = 0; x < img.width; x += 2) {
                 var i = (y * img.width + x) * 4, r = d[i], gg = d[i + 1], b = d[i + 2];
                 n++; colours.add(((r >> 3) << 10) | ((gg >> 3) << 5) | (b >> 3));
                 if (r + gg + b < 450) { ink++; bands[Math.floor(y * 10 / img.height)]++; }
               }
               done({w: img.width, h: img.height, colours: colours.size, ink: ink / n,
                     bands: bands.filter(function (b) { return b > 0; }).length});
             };
             img.src = URL.createObjectURL(new Blob([new Uint8Array(arguments[0])], {type: 'image/png'}));",
            vec![json!(png)],
        )
        .await
        .unwrap();
    assert_eq!((stats["w"].as_u64(), stats["h"].as_u64()), (Some(w as u64), Some(hh as u64)), "{stats}");
    assert!(stats["colours"].as_u64().unwrap() >= 16, "more than a few flat colours: {stats}");
    let ink = stats["ink"].as_f64().unwrap();
    assert!((0.003..0.5).contains(&ink), "text on a light page, neither blank nor black: {stats}");
    assert!(stats["bands"].as_u64().unwrap() >= 8, "content from top to bottom: {stats}");
    c.close().await.unwrap();
}
