//! The review web app in a real headless browser: Debian's chromium, driven over
//! WebDriver (`/usr/bin/chromedriver`, installed by `scripts/setup.d/40-chromium.sh`)
//! with the fantoccini client. A reviewer signs in with the single-use link (code in the
//! fragment), after which neither the address, the session history nor the referrer
//! holds the code, the browser's history database holds only the spent code and never
//! the personal token; scores a sample with the keyboard
//! (autosave), reloads and sees it saved, submits; the other reviewer cannot read it
//! before submitting (403); no session is 401; a cross-site form POST without the CSRF
//! token is refused and changes nothing.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_scores_with_the_keyboard_in_chromium_and_access_rules_hold() {
    for bin in [CHROMIUM, CHROMEDRIVER] {
        if !std::path::Path::new(bin).exists() {
            eprintln!("skipped: `{bin}` is absent (scripts/setup.d/40-chromium.sh installs Debian's chromium)");
            return;
        }
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
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": CHROMIUM, "args": [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", format!("--user-data-dir={}", profile.path().display()),
        ]}),
    );
    let c = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&drv.url)
        .await
        .expect("a chromium session");

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
    c.find(Locator::Id("submit")).await.unwrap().click().await.unwrap();
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
