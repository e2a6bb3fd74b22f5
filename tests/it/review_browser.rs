//! The review web app in a real headless browser: Debian's chromium, driven over
//! WebDriver (`/usr/bin/chromedriver`, installed by `scripts/setup.d/40-chromium.sh`)
//! with the fantoccini client. A reviewer signs in with the link token, scores a sample
//! with the keyboard (autosave), reloads and sees it saved, submits; the other reviewer
//! cannot read it before submitting (403); no session is 401; a cross-site form POST
//! without the CSRF token is refused and changes nothing.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource as _, KeyAction, KeyActions};
use fantoccini::{ClientBuilder, Locator};
use serde_json::json;

use crate::review::{RP, Server, token_of};

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
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
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

    // Sign in with the link; the address bar keeps no token.
    c.goto(&format!("{base}/login?token={}", token_of(&rp.p, "alice"))).await.unwrap();
    let url = c.current_url().await.unwrap();
    assert_eq!(url.path(), "/");
    assert!(url.query().is_none(), "{url}");
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
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = http.get(format!("{base}/login?token={}", token_of(&rp.p, &other))).send().await.unwrap();
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
    let _ = c.close().await;
    drop(srv);
}
