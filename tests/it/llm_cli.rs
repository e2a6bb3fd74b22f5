//! The LLM layer through the `benchgen` binary: the filter's LLM classifier against the
//! scripted test server, secret redaction, cache hits on rerun, replay misses, Ctrl-C in a
//! stage, and `llm stats` / `llm ping`.

use crate::support::scripted_llm;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::scripted_llm::{Answer, ScriptedLlm};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A temp project filtering the demo registry with an `ask` rule on `get_*` tools, decided
/// by role `c` at `base_url`.
fn project(base_url: &str, role_extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline/prompts")).unwrap();
    for p in ["filter-classify.md", "llm-ping.md"] {
        std::fs::copy(repo().join("pipeline/prompts").join(p), dir.path().join("pipeline/prompts").join(p)).unwrap();
    }
    std::fs::write(
        dir.path().join("pipeline/t.toml"),
        format!(
            r#"[registry]
source = "{}"
[filter]
classifier_role = "c"
[[filter.rules]]
id = "ask-getters"
target = "tool"
class = "custom"
reason = "getters may be trivial"
name = ['^get_']
action = "ask"
[llm.roles.c]
provider = "vllm"
base_url = "{base_url}"
model = "scripted"
temperature = 0.0
seed = 3
backoff_ms = 10
{role_extra}
"#,
            repo().join("raw/demo/registry.json").display()
        ),
    )
    .unwrap();
    dir
}

fn benchgen(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_benchgen"));
    c.current_dir(dir)
        .env("BENCHGEN_NO_PROGRESS", "1")
        .env_remove("BENCHGEN_LLM_MODE")
        .arg("--config")
        .arg("pipeline/t.toml");
    c.args(args);
    c
}

fn run(dir: &Path, args: &[&str]) -> Output {
    benchgen(dir, args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn keep_or_drop(seen: &scripted_llm::Seen) -> Answer {
    // Deterministic by prompt: price getters stay, everything else goes.
    if seen.last_user().contains("price") {
        Answer::json(json!({"reason": "live market data", "verdict": "keep"}))
    } else {
        Answer::json(json!({"reason": "not needed", "verdict": "drop"}))
    }
}

fn ledger_payloads(dir: &Path, kind: &str) -> Vec<Value> {
    let l = benchgen::ledger::Ledger::open(&dir.join("artifacts")).unwrap();
    let mut st = l.connection().prepare("SELECT payload FROM events WHERE kind = ?1 ORDER BY id").unwrap();
    st.query_map([kind], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|s| serde_json::from_str(&s.unwrap()).unwrap())
        .collect()
}

#[test]
fn filter_uses_the_llm_and_reruns_come_from_the_ledger() {
    let s = ScriptedLlm::start(keep_or_drop);
    let dir = project(&s.base_url(), "prices = { prompt = 1.5, completion = 4.0 }");
    let o = run(dir.path(), &["run"]);
    assert!(o.status.success(), "{}", text(&o));
    let asked = s.count();
    assert_eq!(asked, 16, "one question per get_* tool of a server that no rule dropped");
    let dropped = std::fs::read_to_string(dir.path().join("artifacts/filter/dropped.csv")).unwrap();
    assert!(dropped.contains("ask-getters") && dropped.contains("LLM classifier: not needed"), "{dropped}");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("artifacts/filter/manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["counts"]["llm_exchanges"], 16);
    let first_counts = manifest["counts"].clone();
    assert!(manifest["prompts"]["pipeline/prompts/filter-classify.md"].is_string(), "{manifest}");
    // Every LLM decision has its exchange as a parent.
    let explain = run(dir.path(), &["explain", "alpha-markets-mcp::get_company_profile"]);
    assert!(text(&explain).contains("llm.exchange"), "{}", text(&explain));

    // A forced rerun asks nothing: every answer is in the ledger.
    let o = run(dir.path(), &["filter", "--force"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(), asked);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("artifacts/filter/manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["counts"], first_counts, "manifest counts are reproduced by a cached rerun");
    assert!(text(&o).contains("16 exchanges (0 live, 16 from the ledger)"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(dir.path().join("artifacts/filter/dropped.csv")).unwrap(), dropped);

    // Replay also works from the ledger; stats add it all up.
    let o = run(dir.path(), &["--llm-mode", "replay", "filter", "--force"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(dir.path(), &["--json", "llm", "stats"]);
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows[0]["stage"], "filter");
    assert_eq!(rows[0]["calls"], 16);
    assert_eq!(rows[0]["cache_hits"], 32);
    assert!(rows[0]["latency_ms_p50"].is_u64());
    let (pt, ct) = (rows[0]["prompt_tokens"].as_f64().unwrap(), rows[0]["completion_tokens"].as_f64().unwrap());
    assert!(pt > 0.0 && ct > 0.0);
    let cost = rows[0]["cost_usd"].as_f64().unwrap();
    assert!((cost - (pt * 1.5 + ct * 4.0) / 1e6).abs() < 1e-12, "{cost}");

    // Changing the prompt makes the stage stale.
    let p = dir.path().join("pipeline/prompts/filter-classify.md");
    std::fs::write(&p, format!("{}\nBe strict.\n", std::fs::read_to_string(&p).unwrap())).unwrap();
    let st = run(dir.path(), &["status"]);
    assert!(text(&st).contains("prompt"), "{}", text(&st));
}

#[test]
fn replay_miss_fails_the_stage_naming_hash_stage_and_item() {
    let s = ScriptedLlm::start(keep_or_drop);
    let dir = project(&s.base_url(), "");
    let o = run(dir.path(), &["--llm-mode", "replay", "run"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("replay mode") && t.contains("sha256:") && t.contains("stage `filter`"), "{t}");
    assert!(t.contains("item `"), "{t}");
    assert_eq!(s.count(), 0);
    assert!(!dir.path().join("artifacts/filter").exists());
}

#[test]
fn the_api_key_appears_nowhere() {
    const KEY: &str = "sk-benchgen-test-0123456789abcdef";
    // A failing endpoint that echoes the Authorization header back in its error body.
    let s = ScriptedLlm::start(|seen| {
        Answer::Status {
        code: 500,
        retry_after: None,
        body: json!({"error": {"message": format!("upstream failed for {}", seen.authorization.clone().unwrap_or_default())}})
            .to_string(),
    }
    });
    let dir = project(&s.base_url(), "api_key_env = \"BENCHGEN_SECRET_TEST_KEY\"\nmax_retries = 1");
    let o = benchgen(dir.path(), &["-vv", "run"]).env("BENCHGEN_SECRET_TEST_KEY", KEY).output().unwrap();
    assert!(!o.status.success(), "the endpoint fails, so the stage fails");
    assert!(s.requests().iter().any(|r| r.authorization.as_deref() == Some(&format!("Bearer {KEY}"))));
    let out = text(&o);
    assert!(out.contains("HTTP 500") && out.contains("[redacted]"), "{out}");
    assert!(!out.contains(KEY), "key in stdout/stderr:\n{out}");
    let o = benchgen(dir.path(), &["llm", "ping"]).env("BENCHGEN_SECRET_TEST_KEY", KEY).output().unwrap();
    assert!(!o.status.success());
    assert!(!text(&o).contains(KEY), "key in ping output: {}", text(&o));
    let mut files = 0;
    for f in walk(&dir.path().join("artifacts")) {
        files += 1;
        let bytes = std::fs::read(&f).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains(KEY), "key in `{}`", f.display());
    }
    assert!(files >= 2, "the ledger (and its WAL) were checked");
    assert!(!ledger_payloads(dir.path(), "llm.failure").is_empty(), "the failure is recorded");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
        }
    }
    out
}

#[test]
fn ctrl_c_stops_the_stage_keeps_finished_exchanges_and_the_rerun_reuses_them() {
    let s = ScriptedLlm::start(|seen| if seen.n < 2 { keep_or_drop(seen) } else { keep_or_drop(seen).after(30_000) });
    let dir = project(&s.base_url(), "max_concurrency = 2");
    assert!(run(dir.path(), &["registry", "import"]).status.success());
    let mut child = benchgen(dir.path(), &["filter"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.count() < 4 {
        assert!(Instant::now() < deadline, "the filter never got going");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "benchgen did not stop after Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success(), "Ctrl-C exits non-zero");
    assert!(text(&o).contains("cancelled"), "{}", text(&o));
    assert_eq!(
        s.count(),
        4,
        "no new requests after Ctrl-C: {:#?}\n{}",
        s.requests()
            .iter()
            .map(|r| (r.n, r.last_user().lines().next().unwrap_or_default().to_string()))
            .collect::<Vec<_>>(),
        text(&o)
    );
    assert_eq!(ledger_payloads(dir.path(), "llm.exchange").len(), 2, "the two finished exchanges are recorded");
    assert!(!dir.path().join("artifacts/filter").exists());

    let fast = ScriptedLlm::start(keep_or_drop);
    let t = dir.path().join("pipeline/t.toml");
    std::fs::write(&t, std::fs::read_to_string(&t).unwrap().replace(&s.base_url(), &fast.base_url())).unwrap();
    let o = run(dir.path(), &["filter"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fast.count(), 16 - 2, "the answers recorded before Ctrl-C are reused");
}

#[test]
fn ping_checks_each_role() {
    let s = ScriptedLlm::start(|seen| {
        // The ping asks for a sum; answer it correctly. The filter's classifier as usual.
        let u = seen.last_user();
        if !u.contains("Put the result in the field `sum`") {
            return keep_or_drop(seen);
        }
        let nums: Vec<i64> = u.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
        Answer::json(json!({"sum": nums[0] + nums[1]}))
    });
    let dir = project(&s.base_url(), "");
    let o = run(dir.path(), &["llm", "ping", "--role", "c"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("17 + 25 = 42"), "{}", text(&o));
    let o = run(dir.path(), &["llm", "ping", "--role", "nope"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("llm.roles.nope"), "{}", text(&o));
    // Timed by the ping alone, the role's time in `check` is a lower bound, and says so; once a
    // stage has timed it, it is the stage's.
    let row = |dir: &Path| {
        let o = run(dir, &["check"]);
        text(&o).lines().find(|l| l.starts_with("filter ")).map(str::to_string).unwrap_or_else(|| text(&o))
    };
    let pinged = row(dir.path());
    assert!(pinged.contains("≥ ") && pinged.contains("from `llm ping` only"), "{pinged}");
    let o = run(dir.path(), &["run", "--until", "filter"]);
    assert!(o.status.success(), "{}", text(&o));
    let timed = row(dir.path());
    assert!(timed.contains("≈ ") && !timed.contains("llm ping"), "{timed}");
}

#[test]
fn a_probe_times_a_stage_sized_exchange_that_check_reckons_with() {
    let s = ScriptedLlm::start(|seen| {
        let u = seen.last_user();
        if u.contains("Which tool should be called first?") {
            assert!(u.contains("get_oncall") && u.len() > 1000, "the probe carries a stage's data: {u}");
            return Answer::json(json!({"tool": "get_oncall", "reason": "The request asks who is on call."}));
        }
        if u.contains("Put the result in the field `sum`") {
            let nums: Vec<i64> = u.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            return Answer::json(json!({"sum": nums[0] + nums[1]}));
        }
        keep_or_drop(seen)
    });
    let dir = project(&s.base_url(), "");
    let o = run(dir.path(), &["llm", "ping", "--probe", "--role", "c"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("17 + 25 = 42") && text(&o).contains("probe (a stage-sized exchange)"), "{}", text(&o));
    let o = run(dir.path(), &["--json", "llm", "stats"]);
    let stats: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(stats.as_array().unwrap().iter().any(|r| r["stage"] == "llm-probe" && r["calls"] == 1), "{stats}");
    // Timed by the probe, `check`'s time is a reckoning (≈), not the ping's lower bound.
    let o = run(dir.path(), &["check"]);
    let row = text(&o).lines().find(|l| l.starts_with("filter ")).map(str::to_string).unwrap_or_else(|| text(&o));
    assert!(row.contains("≈ ") && !row.contains("≥") && row.contains("from `llm ping --probe`"), "{row}");
}

#[test]
fn invalid_verdicts_leave_items_undecided_with_the_error() {
    let s = ScriptedLlm::constant("I would rather not say.");
    let dir = project(&s.base_url(), "reask = 1");
    let o = run(dir.path(), &["run"]);
    assert!(o.status.success(), "an invalid answer is an item-level failure: {}", text(&o));
    assert_eq!(s.count(), 16 * 2, "one question and one re-ask per item");
    let undecided = std::fs::read_to_string(dir.path().join("artifacts/filter/undecided.csv")).unwrap();
    assert_eq!(undecided.lines().count(), 1 + 16, "{undecided}");
    assert!(undecided.contains("LLM classifier gave no valid verdict"), "{undecided}");
    let failures = ledger_payloads(dir.path(), "llm.failure");
    assert_eq!(failures.len(), 16);
    assert_eq!(failures[0]["raw"], "I would rather not say.");
}
