//! `benchgen review serve` under load: N concurrent reviewers on loopback (default 200),
//! each signing in, then opening and submitting every sample assigned to it; the server
//! is killed with SIGKILL once `KILL_AT` of the submissions are acknowledged, and started
//! again on the same port; reviewers retry whatever was not acknowledged. Prints p50/p99
//! page and submit latency (successful requests) and checks that every acknowledged
//! submission is in the database with its exact scores ("lost" must be 0), and, after
//! `review import` moved what the kill left in the outbox, in the ledger as a `review`
//! event with those scores, no event twice.
//!
//! Run: `cargo bench --bench review_serve -- [REVIEWERS] [SAMPLES]` (scripts/bench.d/60-review.sh).

mod common;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "bench-review-secret-0123456789";
/// An acknowledged submission: (sample, reviewer, scores).
type Ack = (String, String, BTreeMap<String, u8>);

const DIMS: [&str; 5] = ["relevance", "completeness", "consistency", "reliability", "freshness"];

fn start(dir: &std::path::Path, port: u16) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_benchgen"))
        .current_dir(dir)
        .env("BENCHGEN_REVIEW_SECRET", SECRET)
        .env("BENCHGEN_NO_PROGRESS", "1")
        .args(["review", "serve", "--addr", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("benchgen review serve");
    let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("serving "), "{line:?}");
    // Keep the pipe open (drained) for the server's lifetime.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    c
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)]
}

fn form(pairs: &[(&str, String)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect::<String>()
    };
    pairs.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&")
}

fn main() {
    if !common::benching("review_serve") {
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let n_rev: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(200);
    let n_samples: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(500);
    let kill_at: f64 = std::env::var("KILL_AT").ok().and_then(|s| s.parse().ok()).unwrap_or(0.4);

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("pipeline")).unwrap();
    std::fs::create_dir_all(root.join("reviews")).unwrap();
    std::fs::create_dir_all(root.join("raw")).unwrap();
    std::fs::write(
        root.join("pipeline/demo.toml"),
        "[project]\nseed = 1\n\n[review]\nextra_samples = [\"raw/samples.jsonl\"]\n\n[review.serve]\nmax_login_failures = 1000\n",
    )
    .unwrap();
    let mut roster = String::new();
    for i in 0..n_rev {
        roster.push_str(&format!("[[reviewer]]\nid = \"r{i:03}\"\nname = \"Reviewer {i}\"\n\n"));
    }
    std::fs::write(root.join("reviews/reviewers.toml"), roster).unwrap();
    let mut samples = String::new();
    for i in 0..n_samples {
        samples.push_str(
            &serde_json::json!({"id": format!("s{i:05}"), "family": "finmcp", "kind": "multi_tool", "scenario": ["bench"],
                "turns": [{"user": format!("Question {i} about fund F{i}?"),
                    "reference_plan": [{"alternatives": ["fin::nav"], "group": 0}], "gold_reply": "An answer.",
                    "trajectory": [[{"tool": "fin::nav", "arguments": {"fund": i}, "result": "{\"nav\": 1.5}"}]]}],
                "difficulty": "easy"})
            .to_string(),
        );
        samples.push('\n');
    }
    std::fs::write(root.join("raw/samples.jsonl"), samples).unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_benchgen"))
        .current_dir(root)
        .env("BENCHGEN_NO_PROGRESS", "1")
        .args(["-q", "review", "assign"])
        .status()
        .unwrap();
    assert!(st.success());
    let a: benchgen::review::assign::Assignments =
        serde_json::from_slice(&std::fs::read(root.join("artifacts/review-assign/assignments.json")).unwrap()).unwrap();
    let mut work: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for x in &a.samples {
        for r in &x.reviewers {
            work.entry(r.clone()).or_default().push(x.id.clone());
        }
    }
    let total: usize = work.values().map(Vec::len).sum();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = Arc::new(Mutex::new(start(root, port)));
    let base = format!("http://127.0.0.1:{port}");

    let acked = Arc::new(AtomicUsize::new(0));
    let retries = Arc::new(AtomicUsize::new(0));
    let pages = Arc::new(Mutex::new(Vec::new()));
    let submits = Arc::new(Mutex::new(Vec::new()));
    let confirmed: Arc<Mutex<Vec<Ack>>> = Arc::new(Mutex::new(Vec::new()));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let t0 = Instant::now();
    let killed_at = Arc::new(Mutex::new(None::<(Duration, Duration)>));
    rt.block_on(async {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(n_rev)
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        // The killer: SIGKILL once KILL_AT of the submissions are acknowledged, restart.
        let killer = {
            let (acked, server, killed_at) = (acked.clone(), server.clone(), killed_at.clone());
            let root = root.to_path_buf();
            tokio::spawn(async move {
                while (acked.load(Ordering::SeqCst) as f64) < kill_at * total as f64 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let at = t0.elapsed();
                {
                    let mut s = server.lock().unwrap();
                    s.kill().unwrap(); // SIGKILL
                    s.wait().unwrap();
                }
                let r0 = Instant::now();
                let fresh = tokio::task::spawn_blocking(move || start(&root, port)).await.unwrap();
                *server.lock().unwrap() = fresh;
                *killed_at.lock().unwrap() = Some((at, r0.elapsed()));
            })
        };
        let mut tasks = Vec::new();
        for (ri, (rev, ids)) in work.iter().enumerate() {
            let rv = a.reviewer(rev).unwrap();
            let token = benchgen::review::token_for(
                SECRET,
                &benchgen::review::Reviewer {
                    id: rv.id.clone(),
                    name: rv.name.clone(),
                    expertise: vec![],
                    capacity: None,
                    role: rv.role,
                    token_version: rv.token_version,
                },
            );
            let (http, base, ids, rev) = (http.clone(), base.clone(), ids.clone(), rev.clone());
            let (acked, retries, pages, submits, confirmed) =
                (acked.clone(), retries.clone(), pages.clone(), submits.clone(), confirmed.clone());
            tasks.push(tokio::spawn(async move {
                let mut cookie = None::<String>;
                for (si, id) in ids.iter().enumerate() {
                    let scores: BTreeMap<String, u8> =
                        DIMS.iter().enumerate().map(|(d, k)| (k.to_string(), ((ri + si + d) % 5 + 1) as u8)).collect();
                    loop {
                        if cookie.is_none() {
                            let login = http
                                .post(format!("{base}/login"))
                                .header("content-type", "application/x-www-form-urlencoded")
                                .body(form(&[("token", token.clone())]))
                                .send()
                                .await;
                            match login {
                                Ok(r) if r.status() == 303 => {
                                    cookie = r.headers()["set-cookie"]
                                        .to_str()
                                        .ok()
                                        .map(|c| c.split(';').next().unwrap().to_string())
                                }
                                _ => {
                                    retries.fetch_add(1, Ordering::Relaxed);
                                    tokio::time::sleep(Duration::from_millis(50)).await;
                                    continue;
                                }
                            }
                        }
                        let c = cookie.clone().unwrap();
                        let t = Instant::now();
                        let page = match http.get(format!("{base}/s/{id}")).header("cookie", &c).send().await {
                            Ok(r) if r.status() == 200 => r.text().await.ok(),
                            _ => None,
                        };
                        let Some(page) = page else {
                            retries.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        };
                        pages.lock().unwrap().push(t.elapsed().as_secs_f64() * 1000.0);
                        let csrf = page
                            .split("name=\"csrf\" content=\"")
                            .nth(1)
                            .unwrap()
                            .split('"')
                            .next()
                            .unwrap()
                            .to_string();
                        let mut pairs: Vec<(&str, String)> = vec![("csrf", csrf)];
                        for (k, v) in &scores {
                            pairs.push((k.as_str(), v.to_string()));
                        }
                        pairs.push(("note", format!("bench {rev} {id}")));
                        let t = Instant::now();
                        let ok = match http
                            .post(format!("{base}/s/{id}/submit"))
                            .header("cookie", &c)
                            .header("origin", &base)
                            .header("content-type", "application/x-www-form-urlencoded")
                            .body(form(&pairs))
                            .send()
                            .await
                        {
                            Ok(r) => r.status() == 303,
                            Err(_) => false,
                        };
                        if ok {
                            submits.lock().unwrap().push(t.elapsed().as_secs_f64() * 1000.0);
                            confirmed.lock().unwrap().push((id.clone(), rev.clone(), scores.clone()));
                            acked.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        retries.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        killer.await.unwrap();
    });
    let wall = t0.elapsed();
    {
        let mut s = server.lock().unwrap();
        s.kill().unwrap();
        s.wait().unwrap();
    }
    // Every acknowledged submission must be in the database, exactly.
    let db = rusqlite::Connection::open(root.join("reviews/review.sqlite")).unwrap();
    let confirmed = confirmed.lock().unwrap();
    let mut lost = 0;
    for (id, rev, scores) in confirmed.iter() {
        let row: Option<(String, String)> = db
            .query_row("SELECT scores, status FROM scores WHERE sample_id = ?1 AND reviewer = ?2", [id, rev], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .ok();
        match row {
            Some((s, st))
                if st == "submitted"
                    && serde_json::from_str::<BTreeMap<String, u8>>(&s).ok().as_ref() == Some(scores) => {}
            _ => lost += 1,
        }
    }
    // Every acknowledged submission must be a ledger event, once: `review import` first moves
    // what the kill left in the outbox.
    let st = Command::new(env!("CARGO_BIN_EXE_benchgen"))
        .current_dir(root)
        .env("BENCHGEN_NO_PROGRESS", "1")
        .args(["-q", "review", "import"])
        .status()
        .unwrap();
    assert!(st.success());
    let ledger = rusqlite::Connection::open(root.join("artifacts/ledger.sqlite")).unwrap();
    let mut events: Vec<(String, String, String)> = {
        let mut q = ledger
            .prepare(
                "SELECT subject, payload, json_extract(payload, '$.outbox') FROM events
                 WHERE stage = 'review-serve' AND kind = 'review'",
            )
            .unwrap();
        q.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
    };
    let n_events = events.len();
    let keys: std::collections::BTreeSet<String> = events.iter().map(|e| e.2.clone()).collect();
    let duplicated = n_events - keys.len();
    let mut missing = 0;
    for (id, rev, scores) in confirmed.iter() {
        let subject = format!("sample:{id}");
        let found = events.iter().position(|(s, p, _)| {
            let p: serde_json::Value = serde_json::from_str(p).unwrap();
            *s == subject
                && p["reviewer"] == rev.as_str()
                && serde_json::from_value::<BTreeMap<String, u8>>(p["scores"].clone()).ok().as_ref() == Some(scores)
        });
        match found {
            Some(i) => {
                events.swap_remove(i);
            }
            None => missing += 1,
        }
    }
    let (kill, restart) = killed_at.lock().unwrap().expect("the server was killed");
    let mut p = pages.lock().unwrap().clone();
    let mut s = submits.lock().unwrap().clone();
    println!("review serve under load: {n_rev} concurrent reviewers, {} samples, {total} submissions", a.samples.len());
    println!("  page   p50 {:.1} ms  p99 {:.1} ms  ({} requests)", pct(&mut p, 0.5), pct(&mut p, 0.99), p.len());
    println!("  submit p50 {:.1} ms  p99 {:.1} ms  ({} acknowledged)", pct(&mut s, 0.5), pct(&mut s, 0.99), s.len());
    println!(
        "  kill -9 after {:.2} s ({}% acknowledged), restarted in {:.0} ms; {} retried requests; wall {:.2} s",
        kill.as_secs_f64(),
        (kill_at * 100.0) as u32,
        restart.as_secs_f64() * 1000.0,
        retries.load(Ordering::Relaxed),
        wall.as_secs_f64()
    );
    println!("  lost acknowledged submissions: {lost} of {}", confirmed.len());
    println!(
        "  ledger: {n_events} review events from the app; acknowledged submissions without one: {missing}; \
         events recorded twice: {duplicated}"
    );
    assert_eq!(confirmed.len(), total, "every submission was eventually acknowledged");
    assert_eq!(lost, 0, "acknowledged submissions lost after kill -9");
    assert_eq!(missing, 0, "acknowledged submissions without a ledger event after kill -9");
    assert_eq!(duplicated, 0, "ledger events recorded twice");
}
