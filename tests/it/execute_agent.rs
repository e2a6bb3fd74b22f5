//! `benchgen execute` with the scripted LLM test server and a sandbox: a two-group
//! trajectory (parallel, then dependent) recorded in the artifacts and the ledger, the call
//! cap, the answer nudge after a blank turn, a call asked for again with the same arguments
//! (not run again: the nudge, then the run ends), a server crashing mid-run while the run
//! goes on with the other queries, and a killed run resumed with an uninterrupted run's
//! counts.

use crate::support::{assert_code, mcp_assets};

use crate::support::scripted_llm::{Answer, ScriptedLlm, Seen};
use assert_cmd::Command;
use benchgen::ledger::Ledger;
use serde_json::{Value, json};

struct Project {
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
}

fn project(base_url: &str, sandbox_flags: &str, execute: &str) -> Project {
    let dir = tempfile::tempdir().unwrap();
    let catalog = mcp_assets::write_fixture_catalog(dir.path());
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
    let config = dir.path().join("pipeline/t.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[llm.roles.agent]
provider = "vllm"
base_url = "{base_url}"
model = "m"
temperature = 0.0
seed = 1
backoff_ms = 20

[mcp.servers.sb]
command = {bin:?}
args = ["--quiet", "sandbox", "--catalog", {cat:?}{sandbox_flags}]
tool_ids = "as-is"

[execute]
concurrency = 1
{execute}
"#,
            bin = env!("CARGO_BIN_EXE_benchgen"),
            cat = catalog.to_str().unwrap(),
        ),
    )
    .unwrap();
    Project { dir, config }
}

fn write_queries(p: &Project, lines: &[Value]) -> std::path::PathBuf {
    let f = p.dir.path().join("queries.jsonl");
    std::fs::write(&f, lines.iter().map(|l| l.to_string() + "\n").collect::<String>()).unwrap();
    f
}

fn execute(p: &Project, queries: &std::path::Path) -> assert_cmd::assert::Assert {
    Command::cargo_bin("benchgen")
        .unwrap()
        .arg("--config")
        .arg(&p.config)
        .args(["execute", "--queries"])
        .arg(queries)
        .env("BENCHGEN_NO_PROGRESS", "1")
        .assert()
}

fn trajectory(p: &Project, id: &str) -> Value {
    let f = p.dir.path().join(format!("artifacts/execute/trajectories/{id}.json"));
    serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap()
}

/// How many assistant turns with tool calls the conversation already has.
fn turn(r: &Seen) -> usize {
    r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant" && m["tool_calls"].is_array())
        .count()
}

fn query_of(r: &Seen) -> String {
    r.body["messages"].as_array().unwrap().iter().find(|m| m["role"] == "user").unwrap()["content"]
        .as_str()
        .unwrap()
        .into()
}

fn calls(list: &[(&str, Value)]) -> Answer {
    Answer::ToolCalls(list.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

#[test]
fn two_group_trajectory_is_recorded_and_the_chain_check_sees_the_order() {
    let llm = ScriptedLlm::start(|r| {
        let q = query_of(r);
        match (q.as_str(), turn(r)) {
            // Parallel: the book and the weather; then dependent: the book's reviews.
            ("plan my reading day", 0) => {
                calls(&[("books__find_book", json!({"title": "Dune"})), ("weather__forecast", json!({"city": "Oslo"}))])
            }
            ("plan my reading day", 1) => calls(&[("books__get_reviews", json!({"isbn": "978-0441013593"}))]),
            // Reviews asked in the same group as the book: the chain is not preserved.
            ("hurried", 0) => calls(&[
                ("books__find_book", json!({"title": "Dune"})),
                ("books__get_reviews", json!({"isbn": "978-0441013593"})),
            ]),
            // Endless calls: three new ones per turn against a cap of four.
            ("greedy", n) => calls(&[
                ("weather__forecast", json!({"city": format!("A{n}")})),
                ("weather__forecast", json!({"city": format!("B{n}")})),
                ("weather__forecast", json!({"city": format!("C{n}")})),
            ]),
            _ => Answer::text("Here is your plan."),
        }
    });
    let p = project(&llm.base_url(), "", "max_calls = 4");
    let chain = json!([{"tool": "books::find_book"}, {"tool": "books::get_reviews", "depends_on": [0]}]);
    let q = write_queries(
        &p,
        &[
            json!({"id": "plan", "query": "plan my reading day", "chain": chain}),
            json!({"id": "hurried", "query": "hurried", "chain": ["books::find_book", "books::get_reviews"]}),
            json!({"id": "greedy", "query": "greedy"}),
        ],
    );
    execute(&p, &q).success();

    let t = trajectory(&p, "plan");
    assert_eq!(t["status"], "answered");
    assert_eq!(t["answer"], "Here is your plan.");
    assert_eq!(t["groups"], 2);
    let c = t["calls"].as_array().unwrap();
    let shape: Vec<(u64, &str, &str)> = c
        .iter()
        .map(|c| (c["group"].as_u64().unwrap(), c["tool_id"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert_eq!(shape, [(0, "books::find_book", "ok"), (0, "weather::forecast", "ok"), (1, "books::get_reviews", "ok")]);
    assert_eq!(c[0]["arguments"], json!({"title": "Dune"}));
    assert!(c[0]["output"]["structured"]["isbn"].is_string(), "output schema shapes the result: {}", c[0]);
    assert_eq!(t["chain_check"]["preserved"], true);
    assert_eq!(t["chain_check"]["groups"], json!([0, 1]));
    // OpenAI-format messages: system, user, assistant(2 calls), 2 tool, assistant(1 call), tool, final.
    let roles: Vec<&str> = t["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]);
    // The model saw safe function names.
    let sent = &llm.requests()[0].body["tools"];
    let names: Vec<&str> = sent.as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["books__find_book", "books__get_reviews", "weather__forecast"]);

    let h = trajectory(&p, "hurried");
    assert_eq!(h["chain_check"]["preserved"], false);
    assert!(h["chain_check"]["problems"][0].as_str().unwrap().contains("books::get_reviews"), "{h}");

    let g = trajectory(&p, "greedy");
    assert_eq!(g["status"], "cap_reached");
    let executed = g["calls"].as_array().unwrap().iter().filter(|c| c["executed"] == true).count();
    assert_eq!(executed, 3, "the second group of 3 would pass the cap of 4 and is not executed");
    assert_eq!(g["calls"].as_array().unwrap().len(), 6);

    // Ledger: each mcp.call links to the LLM exchange that asked for it; the trajectory
    // names both by hash (no event ids, no timings: they differ between reruns).
    let ledger = Ledger::open(&p.dir.path().join("artifacts")).unwrap();
    for k in ["ledger_event", "llm_event", "latency_ms"] {
        assert!(c.iter().all(|c| c.get(k).is_none()), "`{k}` in a trajectory: {t}");
    }
    for k in ["llm_events", "llm_ms", "other_ms"] {
        assert!(t.get(k).is_none(), "`{k}` in a trajectory: {t}");
    }
    let hash = c[2]["call_hash"].as_str().unwrap();
    let ev = ledger.call_event(hash).unwrap().expect("the call's event");
    let ev = ledger.event(ev).unwrap().unwrap();
    assert_eq!(ev.kind, "mcp.call");
    assert_eq!(ev.payload["group"], 1);
    assert_eq!(ev.payload["query"], "plan");
    assert!(ev.payload["latency_ms"].is_number(), "the call's time is in the ledger: {}", ev.payload);
    let parent = ledger.event(ev.parents[0]).unwrap().unwrap();
    assert_eq!(parent.kind, "llm.exchange");
    assert_eq!(parent.payload["request_hash"], c[2]["exchange"]);
    assert_eq!(t["exchanges"][1], c[2]["exchange"], "the second exchange asked for the third call");
    // `explain` resolves both hashes.
    for h in [hash, c[2]["exchange"].as_str().unwrap()] {
        let o = Command::cargo_bin("benchgen")
            .unwrap()
            .arg("--config")
            .arg(&p.config)
            .args(["explain", h, "--json"])
            .env("BENCHGEN_NO_PROGRESS", "1")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let x: Value = serde_json::from_slice(&o.stdout).unwrap();
        let kinds: Vec<&str> = x["lineage"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
        assert!(kinds.contains(&"llm.exchange"), "{x}");
    }
    let trajectory_event = ledger.events_of_kind(ev.run_id, "execute.trajectory").unwrap();
    let plan = trajectory_event.iter().find(|e| e.subject.as_deref() == Some("plan")).unwrap();
    assert!(plan.payload["llm_ms"].is_number() && plan.payload["other_ms"].is_number(), "{}", plan.payload);
    let summary: Value =
        serde_json::from_slice(&std::fs::read(p.dir.path().join("artifacts/execute/summary.json")).unwrap()).unwrap();
    assert_eq!(
        summary["counts"],
        json!({"answered": 2, "calls": 11, "cap_reached": 1, "chain_broken": 1, "chain_preserved": 1})
    );
}

/// Whether the request ends with the answer nudge (a trailing system message).
fn nudged(r: &Seen) -> bool {
    let m = r.body["messages"].as_array().unwrap();
    m.len() > 2 && m.last().unwrap()["role"] == "system"
}

#[test]
fn a_blank_turn_after_tool_calls_gets_one_nudge_and_the_answer_is_kept() {
    let llm = ScriptedLlm::start(|r| match (query_of(r).as_str(), turn(r), nudged(r)) {
        ("silent", _, _) => Answer::text(""),
        // Markup and no words (the demo's 1.5B); nudged, it calls, then answers.
        ("tagged", 0, false) => Answer::text("<tools></tools>"),
        ("tagged", 1.., _) => Answer::text("Oslo: 12 °C and rain."),
        // The same, but blank after the result too: the answer nudge is still there.
        ("shy", 0, false) => Answer::text("<tools></tools>"),
        ("shy", 1.., false) => Answer::text(""),
        ("shy", 1.., true) => Answer::text("Oslo: 12 °C and rain."),
        (_, 0, _) => calls(&[("weather__forecast", json!({"city": "Oslo"}))]),
        // Blank after the result (as the 1.5B local model does), an answer when nudged...
        ("quiet", _, true) => Answer::text("Oslo: 12 °C and rain."),
        // ... or blank both times: no answer.
        _ => Answer::text("\n"),
    });
    let p = project(&llm.base_url(), "", "");
    let q = write_queries(
        &p,
        &[
            json!({"id": "quiet", "query": "quiet"}),
            json!({"id": "mute", "query": "mute"}),
            json!({"id": "silent", "query": "silent"}),
            json!({"id": "tagged", "query": "tagged"}),
            json!({"id": "shy", "query": "shy"}),
        ],
    );
    execute(&p, &q).success();

    let t = trajectory(&p, "quiet");
    assert_eq!(t["status"], "answered");
    assert_eq!(t["answer"], "Oslo: 12 °C and rain.");
    // The trajectory keeps the conversation without the nudge; the ledger has all three exchanges.
    let roles: Vec<&str> = t["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);
    assert_eq!(t["exchanges"].as_array().unwrap().len(), 3);
    let ledger = Ledger::open(&p.dir.path().join("artifacts")).unwrap();
    let last = ledger.exchange_event(t["exchanges"][2].as_str().unwrap()).unwrap().unwrap();
    let last = ledger.event(last).unwrap().unwrap();
    let sent = last.payload["request"]["messages"].as_array().unwrap();
    assert_eq!(sent.last().unwrap()["content"], "Now answer the user in plain words, from the tool results above.");

    // One nudge only: still blank, the answer is empty (validation rejects it: no final answer).
    let m = trajectory(&p, "mute");
    assert_eq!(m["answer"], "");
    let asked = llm.requests().iter().filter(|r| query_of(r) == "mute").count();
    assert_eq!(asked, 3, "the call, the blank turn and one nudge");
    // Before any tool call a blank reply gets the call nudge instead, once: still blank,
    // the answer is empty.
    assert_eq!(trajectory(&p, "silent")["answer"], "");
    let silent = requests_of(&llm, "silent");
    assert_eq!(silent.len(), 2, "the blank reply and one call nudge");
    let last = |r: &Seen| r.body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(last(&silent[1]), CALL_NUDGE);
    // A reply of markup only says nothing either: nudged, the model calls and answers.
    let t = trajectory(&p, "tagged");
    assert_eq!(t["answer"], "Oslo: 12 °C and rain.");
    assert_eq!(t["calls"].as_array().unwrap().len(), 1, "{t}");
    assert_eq!(requests_of(&llm, "tagged").len(), 3, "the markup, the nudged call and the answer");
    // Each nudge once per turn: nudged into its call, then blank, the model is nudged again.
    assert_eq!(trajectory(&p, "shy")["answer"], "Oslo: 12 °C and rain.");
    let shy = requests_of(&llm, "shy");
    assert_eq!(shy.len(), 4, "the markup, the nudged call, the blank reply and the nudged answer");
    assert_eq!(last(&shy[3]), NUDGE);
}

const CALL_NUDGE: &str = "Reply with a tool call for the first step of the user's request, or answer in plain words.";

#[test]
fn the_answer_nudge_can_be_turned_off() {
    let llm = ScriptedLlm::start(|r| match (query_of(r).as_str(), turn(r)) {
        (_, 0) | ("call again", _) => calls(&[("weather__forecast", json!({"city": "Oslo"}))]),
        _ => Answer::text(""),
    });
    let p = project(&llm.base_url(), "", "answer_nudge = \"\"");
    let q = write_queries(&p, &[json!({"id": "a", "query": "call first"}), json!({"id": "b", "query": "call again"})]);
    execute(&p, &q).success();
    assert_eq!(trajectory(&p, "a")["answer"], "");
    let asked = |query: &str| llm.requests().iter().filter(|r| query_of(r) == query).count();
    assert_eq!(asked("call first"), 2, "no nudge: the call and the blank turn");
    // No nudge: the first repeat ends the run.
    assert_eq!(trajectory(&p, "b")["status"], "repeated");
    assert_eq!(asked("call again"), 2, "no nudge: the call and its repeat");
    assert!(llm.requests().iter().all(|r| !nudged(r)));
}

const NUDGE: &str = "Now answer the user in plain words, from the tool results above.";

/// The requests of one query, in the order they came.
fn requests_of(llm: &ScriptedLlm, query: &str) -> Vec<Seen> {
    let mut seen: Vec<Seen> = llm.requests().into_iter().filter(|r| query_of(r) == query).collect();
    seen.sort_by_key(|r| r.n);
    seen
}

#[test]
fn a_call_repeated_with_the_same_arguments_is_not_run_again() {
    let oslo = || calls(&[("weather__forecast", json!({"city": "Oslo"}))]);
    let llm = ScriptedLlm::start(move |r| match (query_of(r).as_str(), turn(r), nudged(r)) {
        (_, 0, _) => oslo(),
        // Asked again for the same call (as the 0.5B local model does); nudged, it answers...
        ("again", _, true) => Answer::text("Oslo: 12 °C and rain."),
        // ... or asks for it once more.
        _ => oslo(),
    });
    let p = project(&llm.base_url(), "", "");
    let q = write_queries(&p, &[json!({"id": "again", "query": "again"}), json!({"id": "stuck", "query": "stuck"})]);
    execute(&p, &q).success();

    // The repeat is not run; the model is nudged once and its answer kept.
    let t = trajectory(&p, "again");
    assert_eq!(t["status"], "answered");
    assert_eq!(t["answer"], "Oslo: 12 °C and rain.");
    assert_eq!(t["calls"].as_array().unwrap().len(), 1, "the call ran once: {t}");
    assert_eq!(t["groups"], 1);
    let seen = requests_of(&llm, "again");
    assert_eq!(seen.len(), 3, "the call, its repeat and the nudge");
    let last = seen[2].body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((&last["role"], &last["content"]), (&json!("system"), &json!(NUDGE)));
    // The repeat's exchange is recorded, its reply is not in the conversation.
    assert_eq!(t["exchanges"].as_array().unwrap().len(), 3);
    let roles: Vec<&str> = t["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant"]);

    // Still the same call after the nudge: the run ends, the repeats not recorded as calls.
    let s = trajectory(&p, "stuck");
    assert_eq!(s["status"], "repeated");
    let reason = s["reason"].as_str().unwrap();
    assert!(reason.contains("call 0 (`weather__forecast`) with the same arguments"), "{reason}");
    assert!(s.get("answer").is_none(), "{s}");
    let c = s["calls"].as_array().unwrap();
    assert_eq!(c.len(), 1, "only the call that ran: {s}");
    assert_eq!((&c[0]["executed"], &c[0]["status"]), (&json!(true), &json!("ok")));
    let seen = requests_of(&llm, "stuck");
    assert_eq!(seen.len(), 3, "the call, its repeat and the nudge");
    assert!(nudged(&seen[2]) && !nudged(&seen[1]));
    assert_eq!(s["exchanges"].as_array().unwrap().len(), 3);
    let summary: Value =
        serde_json::from_slice(&std::fs::read(p.dir.path().join("artifacts/execute/summary.json")).unwrap()).unwrap();
    assert_eq!(summary["counts"], json!({"answered": 1, "calls": 2, "repeated": 1}));
}

#[test]
fn a_call_asked_for_again_with_other_arguments_or_beside_a_new_one_runs() {
    let llm = ScriptedLlm::start(|r| match turn(r) {
        0 => calls(&[("weather__forecast", json!({"city": "Oslo"}))]),
        // The same function, other arguments.
        1 => calls(&[("weather__forecast", json!({"city": "Rome"}))]),
        // A call already run, in a group with a new one: the group runs whole.
        2 => calls(&[("weather__forecast", json!({"city": "Oslo"})), ("books__find_book", json!({"title": "Emma"}))]),
        _ => Answer::text("Oslo, Rome and Emma."),
    });
    let p = project(&llm.base_url(), "", "");
    let q = write_queries(&p, &[json!({"id": "on", "query": "on"})]);
    execute(&p, &q).success();
    let t = trajectory(&p, "on");
    assert_eq!(t["status"], "answered");
    assert_eq!(t["answer"], "Oslo, Rome and Emma.");
    let c = t["calls"].as_array().unwrap();
    let shape: Vec<(u64, &Value, bool)> =
        c.iter().map(|c| (c["group"].as_u64().unwrap(), &c["arguments"], c["executed"] == true)).collect();
    assert_eq!(
        shape,
        [
            (0, &json!({"city": "Oslo"}), true),
            (1, &json!({"city": "Rome"}), true),
            (2, &json!({"city": "Oslo"}), true),
            (2, &json!({"title": "Emma"}), true),
        ]
    );
    assert_eq!(llm.count(), 4, "no nudge");
    assert!(llm.requests().iter().all(|r| !nudged(r)));
}

#[test]
fn a_server_crash_fails_that_query_and_the_run_goes_on() {
    let llm = ScriptedLlm::start(|r| match (query_of(r).as_str(), turn(r)) {
        ("first", 0) => calls(&[("weather__forecast", json!({"city": "Oslo"}))]),
        ("first", 1) => calls(&[("weather__forecast", json!({"city": "Rome"}))]),
        ("second", 0) => calls(&[("books__find_book", json!({"title": "Emma"}))]),
        _ => Answer::text("done"),
    });
    // The sandbox exits on its second call: the second call of the first query.
    let p = project(&llm.base_url(), r#", "--crash-after", "2""#, "");
    let q = write_queries(&p, &[json!({"id": "first", "query": "first"}), json!({"id": "second", "query": "second"})]);
    execute(&p, &q).success().stdout(predicates::str::contains("1 query failed"));

    let first = trajectory(&p, "first");
    assert_eq!(first["status"], "failed");
    let reason = first["reason"].as_str().unwrap();
    assert!(reason.contains("server crashed") && reason.contains("weather__forecast"), "{reason}");
    assert_eq!(first["calls"][1]["failure"]["kind"], "server_crashed");
    assert_eq!(first["calls"][0]["status"], "ok");

    // The next query respawned the server and finished.
    let second = trajectory(&p, "second");
    assert_eq!(second["status"], "answered");
    assert_eq!(second["calls"][0]["status"], "ok");
    let log = std::fs::read_to_string(p.dir.path().join("artifacts/mcp/logs/sb.stderr.log")).unwrap();
    assert!(log.contains("injected crash"), "{log}");
}

#[test]
fn bad_queries_file_names_every_problem() {
    let llm = ScriptedLlm::start(|_| Answer::text("x"));
    let p = project(&llm.base_url(), "", "");
    let f = p.dir.path().join("q.jsonl");
    std::fs::write(&f, "{\"id\": \"a\"}\nnot json\n{\"id\": \"b\", \"query\": \"x\", \"chain\": [{\"tool\": \"t\", \"depends_on\": [0]}]}\n")
        .unwrap();
    execute(&p, &f)
        .code(1)
        .stderr(predicates::str::contains("line 1 (`a`): `query`"))
        .stderr(predicates::str::contains("line 2: not JSON"))
        .stderr(predicates::str::contains("chain[0].depends_on"));
    assert_eq!(llm.count(), 0);
}

// ---------------------------------------------------------------------------------------
// Issue 10, item 9 for `execute`: counts come from the checkpointed queries, not the process.

#[test]
fn a_killed_execute_resumes_with_the_counts_of_an_uninterrupted_run() {
    let project = || {
        let p = crate::pipeline::full_project();
        let q: String = (1..=3).map(|i| format!("{{\"id\": \"q{i}\", \"query\": \"What is rate {i}?\"}}\n")).collect();
        p.write("raw/queries.jsonl", q);
        assert_code(&p.run(&["run", "--until", "filter"]), 0);
        p
    };
    let whole = project();
    assert_code(&whole.run(&["execute"]), 0);

    let p = project();
    let o = p.cmd().arg("execute").env("BENCHGEN_FAIL_AT", "execute_query:2").output().unwrap();
    assert!(!o.status.success(), "the fail point stops the run after two queries");
    assert!(!p.path("artifacts/execute/manifest.json").exists());
    assert_code(&p.run(&["execute"]), 0);

    let manifest = |p: &crate::support::Project| {
        let m: serde_json::Value = serde_json::from_str(&p.read("artifacts/execute/manifest.json")).unwrap();
        m["counts"].clone()
    };
    let (a, b) = (manifest(&whole), manifest(&p));
    assert!(a["llm_exchanges"].as_u64().unwrap() >= 3, "{a}");
    assert_eq!(a, b, "manifest counts after a resume");
    let summary = |p: &crate::support::Project| {
        let s: serde_json::Value = serde_json::from_str(&p.read("artifacts/execute/summary.json")).unwrap();
        s["counts"].clone()
    };
    assert_eq!(summary(&whole), summary(&p));
}
