//! A role in `mode = "batch"` (`llm::batch_api`, OpenAI batch jobs) through the `benchgen`
//! binary, with the filter's classifier against a loopback stand-in of the files and
//! batches endpoints (`support::batch_api`): delays, failed lines, an expired batch and cut
//! connections end in the same artifacts as a live run, with every exchange once in the
//! ledger and a rerun that asks nothing; a run killed while it polls is followed up by the
//! next one, which submits nothing twice; `llm batch-export` and `batch-import` answer a
//! stage through an offline engine's files with no request at all. Identical requests of a
//! round are paid once; a batch the server lost stops every run until `llm batches
//! --forget`; a server without the files endpoint is warned about and answered live; a lost
//! create is looked for page by page, up to a bound.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::batch_api::{BatchApi, Faults, Pick};
use crate::support::llm_project::{self, Verdict};
use crate::support::scripted_llm::{Answer, Seen, reply};
use benchgen::llm::LlmMode;
use serde_json::{Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The batch knobs of the tests: a short gathering and quick polls.
const BATCH: &str = r#"mode = "batch"
prices = { prompt = 2.0, completion = 8.0, batch_prompt = 1.0, batch_completion = 4.0 }
[llm.roles.c.batch]
gather_ms = 150
poll_s = 0.05
poll_max_s = 0.2
"#;

/// A temp project filtering the demo registry with an `ask` rule on `get_*` tools, decided
/// by role `c` at `base_url`; `role` adds lines to the role (last in the file, so it may
/// open the role's `batch` table).
fn project(base_url: &str, role: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
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
max_concurrency = 1
{role}
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
        .env_remove("BENCHGEN_FAIL_AT")
        .arg("--config")
        .arg("pipeline/t.toml")
        .args(args);
    c
}

/// Run benchgen to its end, at most two minutes (a hang fails the test): success, stdout,
/// stderr.
fn run(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let (out, err) = (dir.join("stdout.txt"), dir.join("stderr.txt"));
    let mut child = benchgen(dir, args)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("benchgen {args:?} did not end in 120 s: {}", std::fs::read_to_string(&err).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    (status.success(), read(&out), read(&err))
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let (success, out, err) = run(dir, args);
    assert!(success, "benchgen {args:?} failed:\n{out}{err}");
    out
}

fn json_of(dir: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&ok(dir, args)).unwrap()
}

/// Every file of a stage folder; manifests without their run-dependent fields.
fn stage_files(dir: &Path, stage: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir.join("artifacts").join(stage)).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let mut bytes = std::fs::read(&p).unwrap();
        if name == "manifest.json" {
            let mut m: Value = serde_json::from_slice(&bytes).unwrap();
            for k in ["run_id", "started_at", "finished_at", "duration_ms"] {
                m.as_object_mut().unwrap().remove(k);
            }
            bytes = serde_json::to_vec_pretty(&m).unwrap();
        }
        out.insert(name, bytes);
    }
    out
}

/// The payloads of the live (not cached) `llm.exchange` events, oldest first.
fn live_exchanges(dir: &Path) -> Vec<Value> {
    let l = benchgen::ledger::Ledger::open(&dir.join("artifacts")).unwrap();
    let mut st = l.connection().prepare("SELECT payload FROM events WHERE kind = 'llm.exchange' ORDER BY id").unwrap();
    st.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|s| serde_json::from_str::<Value>(&s.unwrap()).unwrap())
        .filter(|p| p["cached"] == false)
        .collect()
}

/// Each request hash recorded by exactly one live exchange; their number.
fn each_exchange_once(dir: &Path) -> usize {
    let mut by_hash: BTreeMap<String, usize> = BTreeMap::new();
    for p in live_exchanges(dir) {
        *by_hash.entry(p["request_hash"].as_str().unwrap().to_string()).or_default() += 1;
    }
    assert!(by_hash.values().all(|n| *n == 1), "an exchange recorded twice: {by_hash:#?}");
    by_hash.len()
}

fn keep_or_drop(seen: &Seen) -> Answer {
    if seen.last_user().contains("price") {
        Answer::json(json!({"reason": "live market data", "verdict": "keep"}))
    } else {
        Answer::json(json!({"reason": "not needed", "verdict": "drop"}))
    }
}

/// [`keep_or_drop`], but the first answer about `get_astronomy` is prose, so its re-ask
/// comes in a later round (a later batch).
fn with_a_reask(seen: &Seen) -> Answer {
    let text = seen.all_text();
    if text.contains("`get_astronomy`") && !text.contains("That answer is not valid") {
        return Answer::text("Let me think about the stars first.");
    }
    keep_or_drop(seen)
}

/// The live run every batch run is compared with: its filter artifacts and its requests.
fn live_reference(rule: fn(&Seen) -> Answer) -> (BTreeMap<String, Vec<u8>>, usize) {
    let api = BatchApi::start(rule, Faults::default());
    let p = project(&api.base_url(), "");
    ok(p.path(), &["run", "--until", "filter"]);
    assert!(api.jobs().is_empty() && api.uploads() == 0, "a live role makes no batch");
    (stage_files(p.path(), "filter"), api.chats())
}

#[test]
fn batch_jobs_with_delays_failures_an_expired_batch_and_cut_connections_end_as_a_live_run() {
    let (want, asked) = live_reference(with_a_reask);
    let air: Box<Pick> = Box::new(|s: &Seen| s.all_text().contains("`get_air_quality`"));
    let faults = Faults {
        polls: 2,
        fail: Some((air, 2)),
        expire_first: true,
        cut_first_create: true,
        cut_poll: Some(1),
        hold: false,
        ..Faults::default()
    };
    let api = BatchApi::start(with_a_reask, faults);
    let p = project(&api.base_url(), &format!("{BATCH}resubmits = 1\n"));
    ok(p.path(), &["run", "--until", "filter"]);
    assert_eq!(stage_files(p.path(), "filter"), want, "the artifacts are byte-identical to the live run's");

    let jobs = api.jobs();
    let files: BTreeSet<&str> = jobs.iter().map(|j| j.input_file_id.as_str()).collect();
    assert_eq!(files.len(), jobs.len(), "one batch per file: the create whose answer was cut was adopted");
    assert_eq!(api.uploads(), jobs.len());
    assert_eq!(api.cuts(), 2, "the create and the first poll were cut");
    assert_eq!(jobs[0].status, "expired");
    assert!(jobs.len() >= 2, "the expired half and the re-ask went into later batches: {jobs:#?}");
    assert!(jobs.iter().all(|j| j.status == "completed" || j.id == jobs[0].id), "{jobs:#?}");
    assert_eq!(api.chats(), 1, "the request that failed in two batches (resubmits = 1) went live once");

    // Every exchange once, as many as the live run made; one of them live, after two batches.
    assert_eq!(each_exchange_once(p.path()), asked);
    let exchanges = live_exchanges(p.path());
    let live: Vec<&Value> = exchanges.iter().filter(|e| e.get("batch").is_none()).collect();
    assert_eq!(live.len(), 1, "{live:#?}");
    assert_eq!(live[0]["attempts"], 3, "two batches, then one live call");
    assert!(live[0]["latency_ms"].is_u64());
    for e in exchanges.iter().filter(|e| e.get("batch").is_some()) {
        assert!(e.get("latency_ms").is_none(), "a batched answer has no latency of its own: {e}");
    }

    let rows = json_of(p.path(), &["--json", "llm", "batches"]);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), jobs.len());
    assert_eq!(rows[0]["state"], "expired");
    assert!(rows.iter().all(|r| r["done"] == true), "{rows:#?}");

    // A second run replays every answer from the ledger: not one request.
    let seen = api.requests().len();
    ok(p.path(), &["filter", "--force"]);
    assert_eq!(api.requests().len(), seen, "{:#?}", &api.requests()[seen..]);
    assert_eq!(stage_files(p.path(), "filter"), want);
}

#[test]
fn a_run_killed_while_polling_is_followed_up_by_the_next_without_submitting_twice() {
    let (want, asked) = live_reference(keep_or_drop);
    let api = BatchApi::start(keep_or_drop, Faults { hold: true, ..Faults::default() });
    let p = project(&api.base_url(), BATCH);
    ok(p.path(), &["registry", "import"]);
    let mut child = benchgen(p.path(), &["filter"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.polls() < 2 {
        assert!(child.try_wait().unwrap().is_none(), "benchgen ended before it polled its batch");
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no batch was polled within 60 s: {:#?}", api.requests());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(api.jobs().len(), 1);
    assert!(!p.path().join("artifacts/filter").exists(), "the killed run committed nothing");
    let rows = json_of(p.path(), &["--json", "llm", "batches"]);
    assert_eq!(rows[0]["batch_id"], "batch_1", "the batch was in the ledger before it was polled: {rows:#}");
    assert_eq!(rows[0]["state"], "in_progress");
    assert_eq!(rows[0]["done"], false);

    api.release();
    ok(p.path(), &["filter"]);
    let jobs = api.jobs();
    assert_eq!(jobs.len(), 1, "the rerun followed the batch it found in the ledger: {jobs:#?}");
    assert_eq!(api.uploads(), 1, "and uploaded nothing");
    assert_eq!(api.chats(), 0);
    assert_eq!(jobs[0].custom_ids().len(), asked);
    assert_eq!(stage_files(p.path(), "filter"), want, "the artifacts are byte-identical to the live run's");
    assert_eq!(each_exchange_once(p.path()), asked);

    // Costs at the batch prices: `llm stats` and `llm batches` agree.
    let stats = json_of(p.path(), &["--json", "llm", "stats", "--stage", "filter"]);
    let row = &stats[0];
    assert_eq!((row["calls"].as_u64(), row["batched"].as_u64()), (Some(asked as u64), Some(asked as u64)));
    let (pt, ct) = (row["prompt_tokens"].as_f64().unwrap(), row["completion_tokens"].as_f64().unwrap());
    let cost = row["cost_usd"].as_f64().unwrap();
    assert!((cost - (pt * 1.0 + ct * 4.0) / 1e6).abs() < 1e-12, "{cost}");
    let rows = json_of(p.path(), &["--json", "llm", "batches"]);
    assert_eq!(rows[0]["done"], true);
    assert!((rows[0]["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-12, "{rows:#}");
}

#[test]
fn llm_ping_calls_a_batch_role_live_and_batch_settings_are_checked_at_load() {
    let api = BatchApi::start(|_: &Seen| Answer::json(json!({"sum": 42})), Faults::default());
    let p = project(&api.base_url(), BATCH);
    ok(p.path(), &["llm", "ping"]);
    assert_eq!((api.chats(), api.uploads()), (1, 0), "a ping checks the live path: {:#?}", api.requests());

    let dir = tempfile::tempdir().unwrap();
    let load = |role: &str| {
        let path = dir.path().join("pipeline/t.toml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("[llm.roles.r]\n{role}\n")).unwrap();
        format!("{:#}", benchgen::settings::Settings::load(&path).unwrap_err())
    };
    let e = load("provider = \"local\"\nmode = \"batch\"");
    assert!(e.contains("llm.roles.r") && e.contains("provider `local` has none"), "{e}");
    let e = load(concat!(
        "provider = \"vllm\"\nmodel = \"m\"\nmode = \"batch\"\n",
        "[llm.roles.r.batch]\npoll_s = 0.0\nmax_requests = 0"
    ));
    assert!(e.contains("llm.roles.r.batch") && e.contains("`poll_s`") && e.contains("`max_requests`"), "{e}");
    let e = load("provider = \"vllm\"\nmodel = \"m\"\nmode = \"sometimes\"");
    assert!(e.contains("sometimes"), "{e}");
}

/// An offline engine's run over an export file: every line answered by `rule`, as the
/// scripted server would have answered it live (OpenAI batch output format).
fn answer_offline(input: &Path, output: &Path, rule: fn(&Seen) -> Answer) -> usize {
    let text = std::fs::read_to_string(input).unwrap();
    let mut out = String::new();
    for (n, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!((&v["method"], &v["url"]), (&json!("POST"), &json!("/v1/chat/completions")), "{v}");
        let path = "/v1/chat/completions".to_string();
        let seen = Seen { n, at: Instant::now(), path, authorization: None, body: v["body"].clone() };
        let (code, _, body) = reply(&seen, rule(&seen));
        let body: Value = serde_json::from_str(&body).unwrap();
        let entry = json!({"id": format!("vllm-{n}"), "custom_id": v["custom_id"],
                           "response": {"status_code": code, "request_id": format!("vllm-{n}"), "body": body},
                           "error": null});
        out.push_str(&format!("{entry}\n"));
    }
    std::fs::write(output, out).unwrap();
    text.lines().count()
}

#[test]
fn batch_export_then_import_answers_a_stage_offline_without_a_request() {
    let (want, asked) = live_reference(keep_or_drop);
    let api = BatchApi::start(keep_or_drop, Faults::default());
    let p = project(&api.base_url(), BATCH);
    ok(p.path(), &["registry", "import"]);
    let r = json_of(p.path(), &["--json", "llm", "batch-export", "--stage", "filter", "--out", "in.jsonl"]);
    assert_eq!(r["requests"], asked, "{r:#}");
    assert_eq!(r["roles"]["c"], asked);
    assert!(r["batch_id"].as_str().unwrap().starts_with("export:"), "{r:#}");
    assert!(api.requests().is_empty(), "an export sends nothing: {:#?}", api.requests());
    assert!(!p.path().join("artifacts/filter").exists(), "an export writes no stage artifacts");

    // Bad output files are refused, naming the file, the line and the field.
    std::fs::write(p.path().join("bad.jsonl"), "{\"custom_id\": \"nope\"}\n").unwrap();
    let (success, out, err) = run(p.path(), &["llm", "batch-import", "bad.jsonl"]);
    assert!(!success && err.contains("bad.jsonl") && err.contains("line 1") && err.contains("nope"), "{out}{err}");

    let lines = answer_offline(&p.path().join("in.jsonl"), &p.path().join("out.jsonl"), keep_or_drop);
    assert_eq!(lines, asked);
    let r = json_of(p.path(), &["--json", "llm", "batch-import", "out.jsonl"]);
    assert_eq!((r["answered"].as_u64(), r["failed"].as_array().map(Vec::len)), (Some(asked as u64), Some(0)));

    ok(p.path(), &["filter"]);
    assert!(api.requests().is_empty(), "the stage ran from the ledger: {:#?}", api.requests());
    assert_eq!(stage_files(p.path(), "filter"), want, "the artifacts are byte-identical to the live run's");
    assert_eq!(each_exchange_once(p.path()), asked);
    for e in live_exchanges(p.path()) {
        assert!(e["batch"].as_str().unwrap().starts_with("export:"), "{e}");
    }

    // Nothing is pending any more: an empty file, and the stage done.
    let r = json_of(p.path(), &["--json", "llm", "batch-export", "--stage", "filter", "--out", "again.jsonl"]);
    assert_eq!(r["requests"], 0, "{r:#}");
    assert_eq!(std::fs::read(p.path().join("again.jsonl")).unwrap(), b"");
}

/// `--llm-mode replay` answers from the ledger, and the answers `llm batch-import` stored are
/// in the ledger though no exchange records them yet: the stage replays them with no server
/// at all (none listens at the role's base URL any more), as the live run, and records each
/// as an exchange of the export's batch once.
#[test]
fn replay_takes_the_answers_a_batch_import_stored_with_no_server() {
    let (want, asked) = live_reference(keep_or_drop);
    let api = BatchApi::start(keep_or_drop, Faults::default());
    let p = project(&api.base_url(), BATCH);
    ok(p.path(), &["registry", "import"]);
    ok(p.path(), &["llm", "batch-export", "--stage", "filter", "--out", "in.jsonl"]);
    assert_eq!(answer_offline(&p.path().join("in.jsonl"), &p.path().join("out.jsonl"), keep_or_drop), asked);
    ok(p.path(), &["llm", "batch-import", "out.jsonl"]);
    assert!(api.requests().is_empty(), "{:#?}", api.requests());
    drop(api);

    ok(p.path(), &["--llm-mode", "replay", "filter"]);
    assert_eq!(stage_files(p.path(), "filter"), want, "the artifacts are byte-identical to the live run's");
    assert_eq!(each_exchange_once(p.path()), asked);
    for e in live_exchanges(p.path()) {
        assert!(e["batch"].as_str().unwrap().starts_with("export:"), "{e}");
    }
    // Recorded now: the next replay meets them as exchanges.
    ok(p.path(), &["--llm-mode", "replay", "filter", "--force"]);
    assert_eq!(stage_files(p.path(), "filter"), want);
    assert_eq!(each_exchange_once(p.path()), asked);
}

/// The filter project with `execute` added, its agent role `agent` (`mode` as given, empty
/// for live), against a server and a queries file that `check` never touches.
fn project_with_an_agent(mode: &str) -> tempfile::TempDir {
    let p = project("http://127.0.0.1:9/v1", BATCH);
    let cfg = p.path().join("pipeline/t.toml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!(
        "[llm.roles.agent]\nprovider = \"vllm\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n{mode}\n\
         [mcp.servers.sb]\ncommand = \"true\"\n\
         [execute]\nqueries = \"raw/q.jsonl\"\nrole = \"agent\"\n"
    ));
    std::fs::write(&cfg, text).unwrap();
    p
}

/// A batch role among the turns of an agent loop is slow, not wrong: `check` warns of it,
/// naming the stage, the role and the way out, and passes; a batch role of a stage of one
/// round (the filter's `c`) is not warned of, nor is the agent once it is live, unless
/// `--batch` puts it in batch mode again.
#[test]
fn check_warns_of_a_batch_role_that_runs_an_agent_loop_and_passes() {
    let p = project_with_an_agent("mode = \"batch\"");
    let (success, out, err) = run(p.path(), &["check"]);
    assert!(success, "a warning does not fail the check:\n{out}{err}");
    let warning = "warning: execute.role: stage `execute` sends the requests of role `agent` as batch jobs";
    assert!(err.contains(warning), "{err}");
    assert!(err.contains("each turn waits for a batch (up to its completion window, 24h)"), "{err}");
    assert!(err.contains("set `mode = \"live\"` in `[llm.roles.agent]`, or use `--batch` only"), "{err}");
    assert_eq!(err.matches("warning:").count(), 1, "the filter's batch role runs one round: {err}");
    assert!(out.contains("no problems") && out.contains("1 warning (above)"), "{out}");
    let v = json_of(p.path(), &["--json", "check"]);
    assert_eq!(v["warnings"].as_array().map(Vec::len), Some(1), "{v:#}");
    assert_eq!(v["warnings"][0]["location"], "execute.role", "{v:#}");
    // Both the role's `mode` and `--batch`: both must go.
    let (success, out, err) = run(p.path(), &["--batch", "check"]);
    assert!(success && err.contains("and run `benchgen execute` without `--batch` (either alone keeps"), "{out}{err}");

    let p = project_with_an_agent("");
    let (success, out, err) = run(p.path(), &["check"]);
    assert!(success && !err.contains("warning:") && !out.contains("warning"), "{out}{err}");
    let (success, out, err) = run(p.path(), &["--batch", "check"]);
    assert!(success && err.contains(warning), "{out}{err}");
    // Batch mode from `--batch` alone: the way out is to leave the flag off, not `mode`.
    assert!(err.contains("run `benchgen execute` without `--batch` (`[llm.roles.agent]` is live"), "{err}");
    assert!(!err.contains("set `mode = \"live\"`"), "{err}");
}

/// An agent-loop stage is not exported: its loop would record the export's stop as failed
/// runs and commit them, leaving the stage up to date with every query failed.
#[test]
fn batch_export_of_an_agent_loop_stage_is_refused_before_it_runs() {
    let p = project_with_an_agent("mode = \"batch\"");
    let (success, out, err) = run(p.path(), &["llm", "batch-export", "--stage", "execute", "--out", "in.jsonl"]);
    assert!(!success, "{out}{err}");
    assert!(err.contains("`execute` runs agent loops (role `agent`, `execute.role`)"), "{err}");
    assert!(err.contains("export the single-round stages"), "{err}");
    assert!(!p.path().join("artifacts/execute").exists() && !p.path().join("in.jsonl").exists());
}

/// An export where no role of the stage is a batch role is refused before the stage runs:
/// it would make its requests live, pay for them and write its artifacts.
#[test]
fn batch_export_without_a_batch_role_is_refused_and_sends_nothing() {
    let api = BatchApi::start(keep_or_drop, Faults::default());
    let p = project(&api.base_url(), "");
    ok(p.path(), &["registry", "import"]);
    let (success, out, err) = run(p.path(), &["llm", "batch-export", "--stage", "filter", "--out", "in.jsonl"]);
    assert!(!success, "{out}{err}");
    assert!(err.contains("none of the stage's roles sends its requests as batch jobs (its roles: c)"), "{err}");
    assert!(err.contains("--batch"), "{err}");
    assert!(api.requests().is_empty(), "nothing was asked: {:#?}", api.requests());
    assert!(!p.path().join("artifacts/filter").exists() && !p.path().join("in.jsonl").exists());
}

/// `--batch` puts a live role into batch mode for one command; the answers a batch brought
/// are then taken by the role without batch mode too: turning it off neither loses them nor
/// pays for the requests again.
#[test]
fn answers_a_batch_brought_are_taken_by_the_role_once_batch_mode_is_off() {
    let (want, asked) = live_reference(keep_or_drop);
    let api = BatchApi::start(keep_or_drop, Faults::default());
    let p = project(&api.base_url(), "");
    ok(p.path(), &["registry", "import"]);
    let r = json_of(p.path(), &["--json", "--batch", "llm", "batch-export", "--stage", "filter", "--out", "in.jsonl"]);
    assert_eq!(r["requests"], asked, "{r:#}");
    assert_eq!(answer_offline(&p.path().join("in.jsonl"), &p.path().join("out.jsonl"), keep_or_drop), asked);
    ok(p.path(), &["llm", "batch-import", "out.jsonl"]);
    ok(p.path(), &["filter"]);
    assert!(api.requests().is_empty(), "the live role took the batch's answers: {:#?}", api.requests());
    assert_eq!(stage_files(p.path(), "filter"), want, "the artifacts are byte-identical to the live run's");
    assert_eq!(each_exchange_once(p.path()), asked);
}

/// Identical requests of one round go into the batch once and share its answer: the first
/// call records it as paid, the others as cache hits of that exchange (as a live run records
/// a repeated request), so `llm stats` and the costs count it once.
#[test]
fn identical_requests_of_one_round_are_paid_once() {
    let api = BatchApi::start(|_: &Seen| llm_project::good(), Faults::default());
    let batch = "mode = \"batch\"\n[llm.roles.r.batch]\ngather_ms = 150\npoll_s = 0.05\npoll_max_s = 0.2";
    let p = llm_project::project(&format!("base_url = \"{}\"", api.base_url()), batch);
    let c = llm_project::client(&p, LlmMode::Cached);
    let replies = llm_project::rt().block_on(async {
        let calls: Vec<_> = ["a", "b", "c"]
            .into_iter()
            .map(|item| {
                let c = c.clone();
                tokio::spawn(async move { c.typed::<Verdict>("r", &llm_project::prompt("same"), item).await })
            })
            .collect();
        let mut out = Vec::new();
        for h in calls {
            out.push(h.await.unwrap().unwrap());
        }
        out
    });
    let jobs = api.jobs();
    assert_eq!((jobs.len(), jobs[0].custom_ids().len()), (1, 1), "one request in one batch: {jobs:#?}");
    assert_eq!(api.chats(), 0);
    assert!(replies.iter().all(|r| r.value == replies[0].value));

    let paid: Vec<i64> = replies.iter().filter(|r| !r.cached).map(|r| r.event_id).collect();
    assert_eq!(paid.len(), 1, "one call pays for the answer");
    let exchanges = llm_project::events(&p, "llm.exchange");
    assert_eq!(exchanges.len(), 3);
    let (live, hits): (Vec<&Value>, Vec<&Value>) = exchanges.iter().partition(|e| e["cached"] == false);
    assert_eq!(live.len(), 1, "{exchanges:#?}");
    assert_eq!(live[0]["batch"], "batch_1");
    for h in &hits {
        assert_eq!(h["source_event"], json!(paid[0]), "a hit names the paid exchange: {h}");
        assert_eq!((h["attempts"].as_u64(), h["usage"].clone()), (Some(0), live[0]["usage"].clone()), "{h}");
        assert_eq!(h["batch"], "batch_1", "the card counts the request as a batch job's either way: {h}");
    }
    let counts = c.counts();
    assert_eq!((counts["llm_calls"].as_u64(), counts["llm_cache_hits"].as_u64()), (Some(1), Some(2)));
    let stats = benchgen::llm::stats::collect(&p.settings, None).unwrap();
    assert_eq!(stats.len(), 1, "{stats:#?}");
    assert_eq!((stats[0].calls, stats[0].batched, stats[0].cache_hits), (1, 1, 2), "{stats:#?}");
}

/// A batch the server no longer has (its poll answers 404) stops every run that follows it,
/// saying to forget it; `llm batches --forget` keeps its row as `forgotten`, refuses an
/// unknown id, and the next run submits its requests again.
#[test]
fn a_batch_the_server_lost_stops_every_run_until_it_is_forgotten() {
    let (want, asked) = live_reference(keep_or_drop);
    let api = BatchApi::start(keep_or_drop, Faults { gone_first: true, ..Faults::default() });
    let p = project(&api.base_url(), BATCH);
    for _ in 0..2 {
        let (success, out, err) = run(p.path(), &["run", "--until", "filter"]);
        assert!(!success, "{out}{err}");
        assert!(err.contains("batch batch_1 of role `c` is not on the server"), "{err}");
        assert!(err.contains("HTTP 404") && err.contains("`benchgen llm batches --forget batch_1`"), "{err}");
    }
    assert_eq!(api.jobs().len(), 1, "the rerun followed the lost batch, it submitted nothing");

    let (success, out, err) = run(p.path(), &["llm", "batches", "--forget", "batch_9"]);
    assert!(!success && err.contains("no batch `batch_9` in the ledger"), "{out}{err}");
    let out = ok(p.path(), &["llm", "batches", "--forget", "batch_1"]);
    assert!(out.contains("batch batch_1 (role c, stage filter, was validating) forgotten"), "{out}");
    let (success, out, err) = run(p.path(), &["llm", "batches", "--forget", "batch_1"]);
    assert!(!success && err.contains("state `forgotten`") && err.contains("nothing to forget"), "{out}{err}");

    ok(p.path(), &["run", "--until", "filter"]);
    assert_eq!(stage_files(p.path(), "filter"), want, "the artifacts are byte-identical to the live run's");
    assert_eq!(each_exchange_once(p.path()), asked);
    let jobs = api.jobs();
    assert_eq!(jobs.len(), 2, "{jobs:#?}");
    assert_eq!(jobs[1].custom_ids().len(), asked, "the forgotten batch's requests were submitted again");
    let rows = json_of(p.path(), &["--json", "llm", "batches"]);
    assert_eq!((rows[0]["batch_id"].as_str(), rows[0]["state"].as_str()), (Some("batch_1"), Some("forgotten")));
    assert_eq!((rows[0]["done"].as_bool(), rows[0]["requests"].as_u64()), (Some(true), Some(asked as u64)));
    assert_eq!(rows[1]["state"], "completed", "{rows:#}");
}

/// A server without the files endpoint refuses every batch (404): a warning names the role,
/// the server and its answer and says the requests go live, which they do at once (not into
/// another batch), and `llm batches` lists the refused batch with its requests.
#[test]
fn a_server_without_the_batch_api_is_warned_about_and_answered_live() {
    let (want, asked) = live_reference(keep_or_drop);
    let api = BatchApi::start(keep_or_drop, Faults { no_files: true, ..Faults::default() });
    let p = project(&api.base_url(), BATCH);
    let (success, out, err) = run(p.path(), &["run", "--until", "filter"]);
    assert!(success, "{out}{err}");
    let warning = format!(
        "role `c`: the batch API at {} would not take {asked} requests (uploading the batch file: HTTP 404:",
        api.base_url()
    );
    assert!(err.contains(&warning) && err.contains("they go live"), "{err}");
    assert_eq!(stage_files(p.path(), "filter"), want, "the artifacts are byte-identical to the live run's");
    assert!(api.jobs().is_empty() && api.uploads() == 0);
    let posts = api.requests().iter().filter(|r| r.as_str() == "POST /v1/files").count();
    assert_eq!(posts, 1, "one refusal, then live: {:#?}", api.requests());
    assert_eq!(api.chats(), asked, "every request went live once");
    assert_eq!(each_exchange_once(p.path()), asked);
    let rows = json_of(p.path(), &["--json", "llm", "batches"]);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = (rows[0]["state"].as_str(), rows[0]["requests"].as_u64(), rows[0]["input_file_id"].as_str());
    assert_eq!(row, (Some("refused"), Some(asked as u64), Some("")), "{rows:#?}");
}

/// The `GET /v1/batches` requests benchgen made.
fn listings(api: &BatchApi) -> Vec<String> {
    api.requests().into_iter().filter(|r| r.starts_with("GET /v1/batches?")).collect()
}

/// A create whose answer was cut is looked for page by page (`after` the last batch seen)
/// when others made many batches since. Past 20 pages (2,000 batches) the stage stops,
/// naming the file, instead of creating a second batch; `--forget` of that file lets the
/// next run submit its requests again.
#[test]
fn a_lost_create_is_looked_for_page_by_page_up_to_a_bound() {
    let (want, asked) = live_reference(keep_or_drop);
    let api = BatchApi::start(keep_or_drop, Faults { cut_first_create: true, others: 250, ..Faults::default() });
    let p = project(&api.base_url(), BATCH);
    ok(p.path(), &["run", "--until", "filter"]);
    assert_eq!(stage_files(p.path(), "filter"), want, "the artifacts are byte-identical to the live run's");
    assert_eq!(api.jobs().len(), 1, "the cut create's batch was found on the third page: {:#?}", api.requests());
    let lists = listings(&api);
    assert_eq!(lists.len(), 3, "{lists:#?}");
    assert!(lists[1].ends_with("&after=batch_other_151") && lists[2].ends_with("&after=batch_other_51"), "{lists:#?}");

    let api = BatchApi::start(keep_or_drop, Faults { cut_first_create: true, others: 2_100, ..Faults::default() });
    let p = project(&api.base_url(), BATCH);
    let (success, out, err) = run(p.path(), &["run", "--until", "filter"]);
    assert!(!success, "{out}{err}");
    assert!(err.contains("no batch made from file file-1 among the server's newest 2000 batches"), "{err}");
    assert!(err.contains("`benchgen llm batches --forget file-1`"), "{err}");
    assert_eq!(listings(&api).len(), 20, "the search is bounded");
    assert_eq!(api.jobs().len(), 1, "no second batch was created");

    ok(p.path(), &["llm", "batches", "--forget", "file-1"]);
    ok(p.path(), &["run", "--until", "filter"]);
    assert_eq!(stage_files(p.path(), "filter"), want);
    assert_eq!(each_exchange_once(p.path()), asked);
    assert_eq!(api.jobs().len(), 2, "the forgotten file's requests went into a new batch");
}
