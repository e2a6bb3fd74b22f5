//! The Inspect AI task every release carries (`inspect/benchgen_task.py`, docs/release.md),
//! run by Inspect itself — the venv `make setup` installs (scripts/setup.d/47-inspect-ai.sh),
//! offline but for loopback — on the hand-made release of `tests/it/release.rs`:
//!
//! - with Inspect's mock model (`mockllm/model`), which calls no tool;
//! - with a scripted OpenAI-compatible endpoint (TEST DOUBLE) whose agent calls tools: a
//!   recorded call, generated ones, invalid arguments, an unknown function, parallel calls,
//!   a call past the cap, and a blank answer and a call asked for again (not run) that the
//!   answer nudge follows up.
//!
//! Each time every sample's figures in Inspect's log equal `benchgen score --per-sample` on
//! the predictions the task writes, and every answer is the one benchgen's own sandbox
//! gives (the recording, the generated value, the validation error).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::scripted_llm::{Answer, ScriptedLlm, Seen};
use crate::support::{Project, assert_code};

/// The venv `make setup` installs for these tests; `None` (skip) when it is missing, except
/// under CI.
fn venv() -> Option<PathBuf> {
    let venv = benchgen::llm::config::cache_dir().join("inspect-ai");
    if venv.join("bin/inspect").is_file() && venv.join("tiktoken").is_dir() {
        return Some(venv);
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "Inspect AI is missing: run `make setup`");
    eprintln!("skipping the Inspect AI test: run `make setup` to install `inspect-ai`");
    None
}

/// Run `cmd` to its end within `secs` seconds (else it is killed and the test fails); its
/// output goes through files, so a chatty child never blocks on a full pipe.
fn run_within(mut cmd: Command, secs: u64) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = cmd
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not end within {secs} s:\n{}", std::fs::read_to_string(&err).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output { status, stdout: std::fs::read(&out).unwrap(), stderr: std::fs::read(&err).unwrap() }
}

/// The release of the hand-made pool of `tests/it/release.rs` under `[project] seed`.
fn released(seed: u64) -> (Project, PathBuf) {
    let p = crate::release::project("0.1.0");
    let config = p.read("pipeline/release.toml");
    p.write("pipeline/release.toml", config.replacen("[project]\n", &format!("[project]\nseed = {seed}\n"), 1));
    assert_code(&crate::release::release(&p, &[]), 0);
    let dir = p.path("release/it-bench-0.1.0");
    (p, dir)
}

/// A finished `inspect eval` run: its log (JSON) and where it is.
struct Run {
    _logs: tempfile::TempDir,
    path: PathBuf,
    log: Value,
}

/// `inspect eval inspect/benchgen_task.py` in the release folder `dir` with `model` and
/// `args`, behind a proxy that answers nothing (no download, no endpoint but loopback).
fn inspect_eval(venv: &Path, dir: &Path, model: &str, args: &[&str], base_url: Option<String>) -> Run {
    let logs = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(venv.join("bin/inspect"));
    cmd.current_dir(dir)
        .args(["eval", "inspect/benchgen_task.py", "--model", model, "--display", "plain", "--log-format", "json"])
        .arg("--log-dir")
        .arg(logs.path())
        .args(args)
        .env("TIKTOKEN_CACHE_DIR", venv.join("tiktoken"))
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("OPENAI_BASE_URL")
        .env("OPENAI_API_KEY", "scripted");
    if let Some(url) = base_url {
        cmd.env("OPENAI_BASE_URL", url);
    }
    let o = run_within(cmd, 600);
    let shown = format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "inspect eval failed:\n{shown}");
    let path = std::fs::read_dir(logs.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .unwrap_or_else(|| panic!("no log:\n{shown}"));
    let log: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(log["status"], "success", "{shown}");
    Run { _logs: logs, path, log }
}

/// The predictions the task wrote (`python inspect/benchgen_task.py predictions LOG`),
/// scored by `benchgen score --per-sample`: each sample's record, without its `reasons`.
fn benchgen_scores(p: &Project, venv: &Path, dir: &Path, run: &Run) -> BTreeMap<String, Value> {
    let mut cmd = Command::new(venv.join("bin/python"));
    cmd.current_dir(dir).arg("inspect/benchgen_task.py").arg("predictions").arg(&run.path);
    let o = run_within(cmd, 120);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let preds = p.path("predictions.jsonl");
    std::fs::write(&preds, &o.stdout).unwrap();
    let per = p.path("per-sample.jsonl");
    let [bench, pred, out] = [dir.join("samples.jsonl"), preds, per.clone()].map(|f| f.display().to_string());
    assert_code(&p.run(&["score", "--bench", &bench, "--pred", &pred, "--per-sample", &out]), 0);
    std::fs::read_to_string(&per)
        .unwrap()
        .lines()
        .map(|l| {
            let mut r: Value = serde_json::from_str(l).unwrap();
            r.as_object_mut().unwrap().remove("reasons");
            (r["id"].as_str().unwrap().to_string(), r)
        })
        .collect()
}

/// Every sample's `benchgen` score in the log equals `benchgen score`'s record, and the
/// log's `em` is their mean; returns each sample's exact match.
fn same_scores(run: &Run, want: &BTreeMap<String, Value>) -> BTreeMap<String, bool> {
    let samples = run.log["samples"].as_array().unwrap();
    assert_eq!(samples.len(), want.len(), "every released sample ran");
    let mut em = BTreeMap::new();
    for s in samples {
        let id = s["id"].as_str().unwrap();
        let score = &s["scores"]["benchgen"];
        assert_eq!(score["metadata"]["score"], want[id], "{id}: the task's figures differ from benchgen score's");
        let solved = want[id]["em"].as_bool().unwrap();
        assert_eq!(score["value"]["em"], json!(if solved { 1.0 } else { 0.0 }), "{id}");
        assert_eq!(score["value"]["f1"], want[id]["calls"]["f1"], "{id}");
        em.insert(id.to_string(), solved);
    }
    let scores = run.log["results"]["scores"].as_array().unwrap();
    let mean = scores.iter().find(|s| s["name"] == "em").unwrap()["metrics"]["mean"]["value"].as_f64().unwrap();
    assert_eq!(mean, em.values().filter(|e| **e).count() as f64 / em.len() as f64);
    em
}

#[test]
fn the_release_task_runs_with_the_mock_model_offline() {
    let Some(venv) = venv() else { return };
    let (p, dir) = released(0);
    let run = inspect_eval(&venv, &dir, "mockllm/model", &[], None);
    let em = same_scores(&run, &benchgen_scores(&p, &venv, &dir, &run));
    // The mock model answers in text: only the out-of-scope request is right.
    let solved: Vec<&str> = em.iter().filter(|(_, e)| **e).map(|(id, _)| id.as_str()).collect();
    assert_eq!(solved, ["L5-1"]);
    for s in run.log["samples"].as_array().unwrap() {
        assert_eq!(s["scores"]["benchgen"]["metadata"]["prediction"], json!({"id": s["id"], "refusal": true}));
    }
    // The release folder is as it was published.
    let o = p.run(&["release", "verify", &dir.display().to_string()]);
    assert_code(&o, 0);
}

/// The scripted agent's calls, group by group, for each user message (function names).
fn plan(user: &str) -> Vec<Vec<(String, Value)>> {
    let call = |f: &str, a: Value| (f.to_string(), a);
    let acme = || json!({"symbol": "ACME"});
    match user {
        // Both members of the EFS set at once: L1 wants exactly one call.
        "On Alpha, run x." => vec![vec![call("Alpha__x", json!({})), call("Beta__u", json!({}))]],
        "Do the x thing." => vec![vec![call("Beta__u", json!({}))]],
        // Then a blank answer: the answer nudge asks once more.
        "x then y." => vec![vec![call("Alpha__x", json!({}))], vec![call("Alpha__y", json!({}))]],
        // y in z's step: placed before its dependency.
        "z, then v or y with it." => vec![vec![call("Alpha__z", json!({})), call("Alpha__y", json!({}))]],
        // After a first reply of markup alone, the call nudge (see `agent`).
        "Pause my music." => vec![vec![call("Nope__x", json!({}))]],
        // Then the same call again: not run, the answer nudge asks once more.
        "Quote for ACME?" => vec![vec![call("get_quote", acme())], vec![call("get_quote", acme())]],
        // A symbol that is not a string (a tool error), then the right call, past the cap of 3.
        "Quote and news for ACME, then in EUR." => vec![
            vec![call("get_quote", acme()), call("get_news", acme())],
            vec![call("get_fx", json!({"symbol": 3}))],
            vec![call("get_fx", acme())],
        ],
        // Arguments no recording of the sample holds: generated answers.
        "Quote ACME." => vec![vec![call("get_quote", json!({"symbol": "XYZ"}))]],
        "And news?" => vec![vec![call("get_news", acme())]],
        _ => Vec::new(),
    }
}

/// The scripted agent: the plan of the request's user message, a group per reply, then an
/// answer (blank for "x then y.", until the nudge).
fn agent(seen: &Seen) -> Answer {
    let msgs = seen.body["messages"].as_array().cloned().unwrap_or_default();
    let last = msgs.last().cloned().unwrap_or_default();
    let instruction = matches!(last["role"].as_str(), Some("system" | "developer"));
    if instruction && last["content"].as_str().is_some_and(|c| c.starts_with("Now answer")) {
        return Answer::text("Done after the nudge.");
    }
    let nudged_to_call =
        instruction && last["content"].as_str().is_some_and(|c| c.starts_with("Reply with a tool call"));
    let user = seen.last_user();
    let from = msgs.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
    let done = msgs[from..].iter().filter(|m| m["role"] == "assistant" && m["tool_calls"].is_array()).count();
    match plan(&user).get(done) {
        Some(_) if user == "Pause my music." && done == 0 && !nudged_to_call => Answer::text("<tools></tools>"),
        Some(calls) => Answer::ToolCalls(calls.clone()),
        None if user == "x then y." => Answer::text(""),
        None => Answer::text("Done."),
    }
}

/// Every call of the run got what benchgen's sandbox gives it: the sample's recording, the
/// generated value of `seed`, or the validation error; returns the kinds of answer seen.
fn answers_as_benchgen_gives_them(run: &Run, dir: &Path, seed: u64) -> BTreeSet<String> {
    let tools: Value = serde_json::from_slice(&std::fs::read(dir.join("inspect/tools.json")).unwrap()).unwrap();
    assert_eq!(tools["seed"], seed);
    let listed: Vec<Value> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(
            |t| json!({"id": t["tool_id"], "name": t["tool_id"], "description": "", "input_schema": t["input_schema"]}),
        )
        .collect();
    let catalog: benchgen::model::Catalog = serde_json::from_value(json!({"servers": [
        {"name": "all", "description": "", "summary": "", "url": "", "categories": [], "tools": listed}]}))
    .unwrap();
    let sandbox = benchgen::sandbox::Sandbox::new(&catalog, benchgen::sandbox::SandboxOptions::default()).unwrap();
    let cassettes =
        benchgen::release::cassettes::read(&std::fs::read(dir.join("cassettes.jsonl")).unwrap(), "cassettes").unwrap();
    let mut kinds = BTreeSet::new();
    for s in run.log["samples"].as_array().unwrap() {
        let id = s["id"].as_str().unwrap();
        let turns = s["scores"]["benchgen"]["metadata"]["turns"].as_array().unwrap();
        for call in turns.iter().flat_map(|t| t["calls"].as_array().unwrap()) {
            let (tool, args, answer) =
                (call["tool"].as_str().unwrap(), &call["arguments"], call["answer"].as_str().unwrap());
            let got = call["result"].as_str().unwrap();
            let want = match answer {
                "recorded" => cassettes[id].get(tool, args).unwrap().to_string(),
                "generated" => benchgen::sandbox::generate::output(seed, tool, args, None).to_string(),
                "tool_error" => sandbox.validate(tool, args).unwrap_err(),
                "unknown_tool" => format!("unknown tool `{tool}`; use one of the listed tools"),
                "over_cap" => "not executed: the call cap of 3 was reached".to_string(),
                other => panic!("{id}: `{tool}` got an unexpected answer `{other}`"),
            };
            assert_eq!(got, want, "{id}: `{tool}` {args} ({answer})");
            if answer == "generated" {
                assert!(
                    cassettes[id].get(tool, args).is_none() && sandbox.validate(tool, args).is_ok(),
                    "{id}: {call}"
                );
            }
            kinds.insert(answer.to_string());
        }
    }
    kinds
}

#[test]
fn the_release_task_scores_a_scripted_agent_as_benchgen_score_does() {
    let Some(venv) = venv() else { return };
    let (p, dir) = released(7);
    let llm = ScriptedLlm::start(agent);
    // An unknown model name goes to the Responses API in Inspect: an OpenAI-compatible
    // endpoint takes chat completions.
    // A cap of 2, raised to 3 on the 3-call `fin-b` as `benchgen eval` raises it (a cap below
    // the reference's calls would make it unsolvable): its third call, a tool error, runs,
    // and only the fourth is over the cap ("the call cap of 3").
    let args = ["-M", "responses_api=false", "-T", "max_calls=2"];
    let run = inspect_eval(&venv, &dir, "openai/scripted-agent", &args, Some(llm.base_url()));
    let em = same_scores(&run, &benchgen_scores(&p, &venv, &dir, &run));
    let want = [
        ("L1-1", false),
        ("L2-1", true),
        ("L3-1", true),
        ("L4-1", false),
        ("L5-1", false),
        ("fin-a", true),
        ("fin-b", true),
        ("fin-c", true),
    ];
    assert_eq!(em, want.iter().map(|(id, e)| (id.to_string(), *e)).collect::<BTreeMap<_, _>>());
    let kinds = answers_as_benchgen_gives_them(&run, &dir, 7);
    let all = ["generated", "over_cap", "recorded", "tool_error", "unknown_tool"];
    assert_eq!(kinds, all.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>());

    // Each sample was offered its oracle tools (the EFS set's other member; every registry
    // tool for the out-of-scope request), with their schemas.
    let offered = |user: &str| -> Vec<Value> {
        let seen = llm.requests().into_iter().find(|s| s.last_user() == user).unwrap();
        seen.body["tools"].as_array().unwrap().iter().map(|t| t["function"].clone()).collect()
    };
    let names =
        |user: &str| -> Vec<String> { offered(user).iter().map(|f| f["name"].as_str().unwrap().to_string()).collect() };
    assert_eq!(names("On Alpha, run x."), ["Alpha__x", "Beta__u"]);
    assert_eq!(names("Pause my music."), ["Alpha__x", "Alpha__y", "Alpha__z", "Beta__u", "Beta__v"]);
    let fx = offered("Quote and news for ACME, then in EUR.").into_iter().find(|f| f["name"] == "get_fx").unwrap();
    assert_eq!(fx["parameters"]["properties"]["symbol"], json!({"type": "string"}));
    assert_eq!(fx["parameters"]["required"], json!(["symbol"]));
    // The second turn of the dialogue starts from the gold conversation of the first.
    let seen = llm.requests().into_iter().find(|s| s.last_user() == "And news?").unwrap();
    let msgs = seen.body["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles[1..], ["user", "assistant", "tool", "assistant", "user"], "{}", seen.body);
    assert_eq!(msgs[2]["tool_calls"][0]["function"]["name"], "get_quote", "the reference plan's call");
    assert_eq!((&msgs[1]["content"], &msgs[4]["content"]), (&json!("Quote ACME."), &json!("10.")));
    let l3 = run.log["samples"].as_array().unwrap().iter().find(|s| s["id"] == "L3-1").unwrap();
    assert_eq!(l3["scores"]["benchgen"]["metadata"]["turns"][0]["answer"], "Done after the nudge.");
    // The L5's first reply was markup alone: the call nudge asked once more, and its call ran.
    let music: Vec<Seen> = llm.requests().into_iter().filter(|s| s.last_user() == "Pause my music.").collect();
    let last_of = |s: &Seen| s.body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert!(music.iter().any(|s| last_of(s) == json!(benchgen::agent::ExecuteSettings::default().call_nudge)));
    let l5 = run.log["samples"].as_array().unwrap().iter().find(|s| s["id"] == "L5-1").unwrap();
    let turn = &l5["scores"]["benchgen"]["metadata"]["turns"][0];
    assert_eq!(turn["calls"][0]["tool"], "Nope__x", "{turn}");
    // fin-a asked for its call again: the repeat was not run nor predicted, the nudge answered.
    let fin_a = run.log["samples"].as_array().unwrap().iter().find(|s| s["id"] == "fin-a").unwrap();
    let turn = &fin_a["scores"]["benchgen"]["metadata"]["turns"][0];
    assert_eq!(turn["calls"].as_array().unwrap().len(), 1, "{turn}");
    assert_eq!((&turn["status"], &turn["answer"]), (&json!("answered"), &json!("Done after the nudge.")));
}
