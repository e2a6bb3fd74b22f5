//! Several endpoints per LLM role (`base_urls`), against two scripted test doubles: requests
//! spread by least outstanding requests, a failing endpoint is taken out (and its requests
//! answered by the other), it comes back after the cool-down, a request waits when every
//! endpoint is out, the exchange cache does not depend on which endpoint answered, and the
//! config is checked at load.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::llm_project::{Verdict, client, events, good, load, project, prompt, rt};
use crate::support::scripted_llm::{Answer, ScriptedLlm};
use benchgen::ledger::Ledger;
use benchgen::llm::{LlmClient, LlmError, LlmMode};
use benchgen::settings::Settings;

fn urls(servers: &[&ScriptedLlm]) -> String {
    let list: Vec<String> = servers.iter().map(|s| format!("\"{}\"", s.base_url())).collect();
    format!("base_urls = [{}]", list.join(", "))
}

/// `n` typed calls on distinct prompts, all in flight at once; each must succeed.
fn concurrently(c: &LlmClient, names: Vec<String>) {
    rt().block_on(async {
        let calls: Vec<_> = names
            .into_iter()
            .map(|n| {
                let c = c.clone();
                tokio::spawn(async move { c.typed::<Verdict>("r", &prompt(&n), "x").await })
            })
            .collect();
        for h in calls {
            h.await.unwrap().unwrap();
        }
    });
}

#[test]
fn requests_spread_over_the_endpoints_by_least_outstanding() {
    // The concurrent prompts (`t…`) are held long enough that all eight are outstanding at once.
    let slow = |r: &crate::support::scripted_llm::Seen| {
        if r.last_user().contains("Tool: t") { good().after(1000) } else { good() }
    };
    let (a, b) = (ScriptedLlm::start(slow), ScriptedLlm::start(slow));
    let p = project(&urls(&[&a, &b]), "max_concurrency = 4");
    let c = client(&p, LlmMode::Cached);
    concurrently(&c, (0..8).map(|i| format!("t{i}")).collect());
    // Eight at once over two endpoints of four slots each: four each, none queued.
    assert_eq!((a.count(), b.count()), (4, 4));
    assert!(a.max_in_flight() <= 4 && b.max_in_flight() <= 4);
    // One at a time: the endpoints take turns.
    let r = rt();
    for i in 0..4 {
        r.block_on(c.typed::<Verdict>("r", &prompt(&format!("s{i}")), "x")).unwrap();
    }
    assert_eq!((a.count(), b.count()), (6, 6));
    let ex = events(&p, "llm.exchange");
    assert!(ex.iter().all(|e| e["replica"] == 0 || e["replica"] == 1), "{ex:?}");
}

#[test]
fn a_failing_endpoint_is_taken_out_and_the_other_answers() {
    let bad = ScriptedLlm::start(|_| Answer::status(503));
    let good_one = ScriptedLlm::start(|_| good());
    let p = project(&urls(&[&bad, &good_one]), "failover_after = 2\ncooldown_s = 600\nmax_retries = 3");
    let c = client(&p, LlmMode::Cached);
    let r = rt();
    for i in 0..10 {
        r.block_on(c.typed::<Verdict>("r", &prompt(&format!("t{i}")), "x")).unwrap();
    }
    // Two failures in a row took the bad endpoint out for the cool-down; each failed attempt
    // went on at once to the other endpoint.
    assert_eq!(bad.count(), 2);
    assert_eq!(good_one.count(), 10);
    let ex = events(&p, "llm.exchange");
    assert_eq!(ex.len(), 10);
    assert_eq!(ex.iter().map(|e| e["attempts"].as_u64().unwrap()).collect::<Vec<_>>(), [2, 2, 1, 1, 1, 1, 1, 1, 1, 1]);
    assert!(ex.iter().all(|e| e["replica"] == 1));
    assert_eq!(c.counts()["llm_retries"], 2);
    assert_eq!(c.counts()["llm_failures"], 0);

    // The cache key does not depend on which replica answered nor on the order of the list
    // (nor a trailing `/`): the same servers serve every prompt from the ledger.
    let again = load(p.dir.path(), &urls(&[&good_one, &bad]).replace("\",", "/\","), "").unwrap();
    let run = Ledger::open(&again.artifacts).unwrap().begin_run("test", "", "0").unwrap();
    let same = LlmClient::with_mode(&again, "test", run, LlmMode::Cached).unwrap();
    for i in 0..10 {
        assert!(r.block_on(same.typed::<Verdict>("r", &prompt(&format!("t{i}")), "x")).unwrap().cached);
    }
    assert_eq!((bad.count(), good_one.count()), (2, 10));
    // Another server is another endpoint (it may serve another checkpoint under the same
    // model name): it is asked, never answered with these servers' exchanges.
    let third = ScriptedLlm::start(|_| good());
    let settings = load(p.dir.path(), &format!("base_url = \"{}\"", third.base_url()), "").unwrap();
    let run = Ledger::open(&settings.artifacts).unwrap().begin_run("test", "", "0").unwrap();
    let single = LlmClient::with_mode(&settings, "test", run, LlmMode::Cached).unwrap();
    for i in 0..10 {
        assert!(!r.block_on(single.typed::<Verdict>("r", &prompt(&format!("t{i}")), "x")).unwrap().cached);
    }
    assert_eq!(third.count(), 10);
    // The request hash (how artifacts name an exchange) is the request's alone.
    let hashes: std::collections::BTreeSet<String> =
        events(&p, "llm.exchange").iter().map(|e| e["request_hash"].as_str().unwrap().to_string()).collect();
    assert_eq!(hashes.len(), 10, "one request hash per prompt, whichever endpoint answered");
}

#[test]
fn an_endpoint_comes_back_after_its_cool_down() {
    let healthy = Arc::new(AtomicBool::new(false));
    let h = healthy.clone();
    let flaky = ScriptedLlm::start(move |_| if h.load(Ordering::SeqCst) { good() } else { Answer::status(500) });
    let steady = ScriptedLlm::start(|_| good());
    let p = project(&urls(&[&flaky, &steady]), "failover_after = 1\ncooldown_s = 2.0");
    let c = client(&p, LlmMode::Cached);
    let r = rt();
    r.block_on(c.typed::<Verdict>("r", &prompt("a"), "x")).unwrap();
    assert_eq!((flaky.count(), steady.count()), (1, 1));
    healthy.store(true, Ordering::SeqCst);
    // While it is out, the steady endpoint takes everything.
    r.block_on(c.typed::<Verdict>("r", &prompt("b"), "x")).unwrap();
    assert_eq!((flaky.count(), steady.count()), (1, 2));
    std::thread::sleep(Duration::from_millis(2300));
    for i in 0..4 {
        r.block_on(c.typed::<Verdict>("r", &prompt(&format!("c{i}")), "x")).unwrap();
    }
    assert!(flaky.count() >= 3, "back in turn after the cool-down: {} requests", flaky.count());
}

#[test]
fn with_every_endpoint_out_a_request_waits_then_fails_with_the_last_status() {
    let (a, b) = (ScriptedLlm::start(|_| Answer::status(503)), ScriptedLlm::start(|_| Answer::status(502)));
    let p = project(&urls(&[&a, &b]), "failover_after = 1\ncooldown_s = 0.2\nmax_retries = 3");
    let c = client(&p, LlmMode::Cached);
    let err = rt().block_on(c.typed::<Verdict>("r", &prompt("a"), "srv::t")).unwrap_err();
    assert!(matches!(err, LlmError::Transport { attempts: 4, .. }), "{err:?}");
    assert!(err.to_string().contains("HTTP 50"), "{err}");
    // Both were out after their first failure; the request waited for their cool-downs.
    assert_eq!(a.count() + b.count(), 4);
    assert!(a.count() >= 1 && b.count() >= 1);
}

#[test]
fn endpoint_lists_are_checked_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let err = |endpoints: &str, extra: &str| format!("{:#}", load(dir.path(), endpoints, extra).unwrap_err());
    let e = err("base_url = \"http://a/v1\"\nbase_urls = [\"http://b/v1\"]", "");
    assert!(e.contains("either `base_url` or `base_urls`"), "{e}");
    let e = err("base_urls = []", "");
    assert!(e.contains("at least one URL"), "{e}");
    let e = err("base_urls = [\"http://a/v1\", \"http://a/v1/\", \"ftp://b\"]", "failover_after = 0\ncooldown_s = -1");
    assert!(e.contains("lists `http://a/v1/` twice") && e.contains("must start with http://"), "{e}");
    assert!(e.contains("`failover_after` must be at least 1") && e.contains("`cooldown_s`"), "{e}");
    let e = err("base_urls = [\"http://key:secret@a/v1\"]", "");
    assert!(e.contains("user or password") && !e.contains("secret@"), "{e}");
    let p = dir.path().join("pipeline/local.toml");
    std::fs::write(&p, "[llm.roles.r]\nprovider = \"local\"\nbase_urls = [\"http://a/v1\"]\n").unwrap();
    let e = format!("{:#}", Settings::load(&p).unwrap_err());
    assert!(e.contains("chosen by benchgen"), "{e}");
}
