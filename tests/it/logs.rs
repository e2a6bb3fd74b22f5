//! The log track: import (three formats, grouping, malformed records, anonymisation),
//! curation, split, the dependency graph and its review, on fixtures, the real FinMCP
//! files and the demo's IT-operations logs, with the scripted LLM (a test double).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::support::batch_api::{BatchApi, Faults};
use crate::support::scripted_llm::{Answer, ScriptedLlm, Seen};
use crate::support::{Project, repo};
use benchgen::logs::readers::{Item, read_source};
use benchgen::logs::{LogFormat, Session};
use serde_json::{Value, json};

const SECRET: &str = "test-secret-1";

fn read_all(path: &Path, format: LogFormat) -> (Vec<Session>, Vec<(String, String)>, LogFormat) {
    let (mut sessions, mut bad) = (Vec::new(), Vec::new());
    let used = read_source(path, "log", "src", format, &mut |item| {
        match item {
            Item::Session(s) => sessions.push(*s),
            Item::Malformed { location, reason } => bad.push((location, reason)),
        }
        Ok(())
    })
    .unwrap();
    (sessions, bad, used)
}

fn groups(s: &Session) -> Vec<Vec<Vec<String>>> {
    s.turns.iter().map(|t| t.groups.iter().map(|g| g.iter().map(|c| c.tool.clone()).collect()).collect()).collect()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

// ---------------------------------------------------------------------------
// Formats and grouping.

#[test]
fn finmcp_fixture_groups_and_flat_tool_list() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "s.json",
        r#"[
 {"id": 7, "scenery": "A-B-C", "tool_list": [["x", "y"], ["z"]],
  "messages": [{"role": "user", "content": "q"},
   {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "x", "arguments": "{\"a\": 1}"}},
                                         {"id": "c2", "function": {"name": "y", "arguments": "{}"}}]},
   {"role": "tool", "tool_call_id": "c2", "content": "{\"v\": 2}"},
   {"role": "tool", "tool_call_id": "c1", "content": "{\"v\": 1}"},
   {"role": "assistant", "tool_calls": [{"id": "c3", "function": {"name": "z", "arguments": "{\"b\""}}]},
   {"role": "tool", "tool_call_id": "c3", "content": "调用失败"},
   {"role": "assistant", "content": "done"}]},
 {"id": 8, "scenery": "P-Q", "tool_list": ["a", "b"],
  "messages": [{"role": "user", "content": "q1"},
   {"role": "assistant", "content": "", "tool_calls": [{"id": "d1", "function": {"name": "b", "arguments": "{}"}}]},
   {"role": "tool", "tool_call_id": "d1", "content": "{}"},
   {"role": "assistant", "content": "a1"},
   {"role": "user", "content": "q2"},
   {"role": "assistant", "content": "", "tool_calls": [{"id": "d2", "function": {"name": "a", "arguments": "{}"}}]},
   {"role": "tool", "tool_call_id": "d2", "content": "{}"},
   {"role": "assistant", "content": "a2"}]},
 {"id": 9, "messages": "not a list"}
]"#,
    );
    let (s, bad, used) = read_all(&p, LogFormat::Auto);
    assert_eq!(used, LogFormat::Finmcp);
    assert_eq!(s.len(), 2);
    assert_eq!(groups(&s[0]), vec![vec![vec!["x".to_string(), "y".into()], vec!["z".into()]]]);
    assert_eq!(s[0].turns[0].groups[0][0].result.as_deref(), Some("{\"v\": 1}"), "results matched by call id");
    let z = &s[0].turns[0].groups[1][0];
    let codes: Vec<&str> = z.flags.iter().map(|f| f.code.as_str()).collect();
    assert_eq!(codes, ["bad-arguments", "error-result"]);
    assert!(s[0].flags.is_empty(), "a matching grouped tool_list raises no flag: {:?}", s[0].flags);
    assert_eq!(groups(&s[1]), vec![vec![vec!["b".to_string()]], vec![vec!["a".to_string()]]], "two turns");
    assert_eq!(s[1].flags[0].code, "tool-list-flat");
    assert_eq!(bad.len(), 1);
    assert!(bad[0].0.starts_with("log:") && bad[0].0.contains("record 2"), "{bad:?}");
    assert!(bad[0].1.contains("messages"), "{bad:?}");
}

#[test]
fn openai_jsonl_one_group_per_assistant_message() {
    let dir = tempfile::tempdir().unwrap();
    let line = json!({"id": "c1", "feedback": "thumbs_up", "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "t1", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "t2", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "t3", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "3"},
        {"role": "assistant", "content": "answer"}]});
    let p = write(dir.path(), "c.jsonl", &format!("{line}\n\nnot json\n{{\"id\": 2}}\n"));
    let (s, bad, used) = read_all(&p, LogFormat::Auto);
    assert_eq!(used, LogFormat::Openai);
    assert_eq!(s.len(), 1);
    assert_eq!(groups(&s[0]), vec![vec![vec!["t1".to_string(), "t2".into()], vec!["t3".into()]]]);
    assert_eq!(s[0].feedback, Some(true));
    assert_eq!(s[0].turns[0].answer.as_deref(), Some("answer"));
    let locs: Vec<&str> = bad.iter().map(|b| b.0.as_str()).collect();
    assert_eq!(locs, ["log:3", "log:4"], "{bad:?}");
    assert!(bad[0].1.starts_with("not JSON"), "{bad:?}");
    assert!(bad[1].1.contains("`messages`"), "{bad:?}");
}

#[test]
fn events_overlap_rule_explicit_group_turns_and_malformed_lines() {
    let dir = tempfile::tempdir().unwrap();
    let ev = |s: &str, tool: &str, a: Value, b: Value, extra: Value| {
        let mut v = json!({"session": s, "tool": tool, "ts_start": a, "ts_end": b, "arguments": {}, "result": "ok"});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string()
    };
    let lines = [
        // s1: a [0,100) and b [50,150) overlap → one group; c [150,200) touches → next group.
        ev("s1", "a", json!(0), json!(100), json!({"user": "u1"})),
        ev("s2", "x", json!("2026-01-01T00:00:00Z"), json!("2026-01-01T00:00:01Z"), json!({"group": "g1"})),
        ev("s1", "b", json!(50), json!(150), json!({})),
        ev("s1", "c", json!(150), json!(200), json!({})),
        // s1 turn 1: a separate turn, never merged with turn 0.
        ev("s1", "d", json!(160), json!(300), json!({"turn": 1, "user": "u2"})),
        // s2: y does not overlap x in time, but the explicit group wins.
        ev("s2", "y", json!("2026-01-01T00:00:05Z"), json!("2026-01-01T00:00:06Z"), json!({"group": "g1"})),
        ev(
            "s2",
            "z",
            json!("2026-01-01T00:00:07Z"),
            json!("2026-01-01T00:00:08Z"),
            json!({"group": "g2", "error": "boom"}),
        ),
        "{\"session\": \"s3\", \"tool\": \"q\"}".to_string(),
        "{broken".to_string(),
        ev("s3", "q", json!(10), json!(5), json!({})),
        ev("s3", "q", json!("yesterday"), json!(5), json!({})),
    ];
    let p = write(dir.path(), "e.jsonl", &(lines.join("\n") + "\n"));
    let (s, bad, used) = read_all(&p, LogFormat::Auto);
    assert_eq!(used, LogFormat::Events);
    let by: BTreeMap<&str, &Session> = s.iter().map(|x| (x.id.as_str(), x)).collect();
    assert_eq!(by.len(), 2, "s3 has no valid event: {:?}", by.keys());
    assert_eq!(
        groups(by["src:s1"]),
        vec![vec![vec!["a".to_string(), "b".into()], vec!["c".into()]], vec![vec!["d".to_string()]]]
    );
    assert_eq!(by["src:s1"].turns[0].user, "u1");
    assert_eq!(by["src:s1"].turns[1].user, "u2");
    assert_eq!(groups(by["src:s2"]), vec![vec![vec!["x".to_string(), "y".into()], vec!["z".into()]]]);
    assert_eq!(by["src:s2"].turns[0].groups[1][0].error.as_deref(), Some("boom"));
    let got: Vec<(String, &str)> = bad.iter().map(|(l, r)| (l.clone(), r.split(':').next().unwrap())).collect();
    assert_eq!(
        got,
        [
            ("log:8".to_string(), "not an event record"),
            ("log:9".to_string(), "not JSON"),
            ("log:10".to_string(), "`ts_end` is before `ts_start`"),
            ("log:11".to_string(), "`ts_start`"),
        ],
        "{bad:?}"
    );
    assert!(bad[0].1.contains("ts_start"), "names the missing field: {bad:?}");
}

#[test]
fn real_finmcp_samples_import_with_their_groups() {
    let Some(p) = crate::support::shared_data("finmcp/demo_samples.json") else { return };
    let (s, bad, used) = read_all(&p, LogFormat::Auto);
    assert_eq!(used, LogFormat::Finmcp);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(s.len(), 6);
    let raw: Vec<Value> = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    for (sess, r) in s.iter().zip(&raw) {
        let tl = &r["tool_list"];
        let flat_given = tl.as_array().unwrap().iter().all(Value::is_string);
        if flat_given {
            // Multi-turn: a flat sorted list; detected and reported, groups from messages.
            assert_eq!(sess.flags[0].code, "tool-list-flat", "{}", sess.id);
            let mut distinct: Vec<String> = sess.calls().map(|c| c.tool.clone()).collect();
            distinct.sort();
            distinct.dedup();
            let given: Vec<String> = tl.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
            assert_eq!(distinct, given);
            assert!(sess.turns.len() > 1);
        } else {
            let given: Vec<Vec<String>> = serde_json::from_value(tl.clone()).unwrap();
            let derived: Vec<Vec<String>> = groups(sess).into_iter().flatten().collect();
            assert_eq!(derived, given, "{}", sess.id);
            assert!(sess.flags.is_empty(), "{:?}", sess.flags);
        }
    }
}

#[test]
fn real_finmcp_trajectories_in_three_shapes_import() {
    let Some(p) = crate::support::shared_data("finmcp/demo_trajectories.json") else { return };
    let (s, bad, _) = read_all(&p, LogFormat::Finmcp);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(s.len(), 6);
    for sess in &s {
        assert!(sess.call_count() > 0, "{}: tool calls written as Python literals are read", sess.id);
    }
    // The ones with `tool_path` compare it with the call sequence.
    let raw: Vec<Value> = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    for (sess, r) in s.iter().zip(&raw) {
        if let Some(tp) = r.get("tool_path") {
            let path: Vec<String> = serde_json::from_value(tp.clone()).unwrap();
            let calls: Vec<String> = sess.calls().map(|c| c.tool.clone()).collect();
            assert_eq!(calls == path, sess.flags.iter().all(|f| f.code != "tool-list-mismatch"), "{}", sess.id);
        }
    }
}

// ---------------------------------------------------------------------------
// Graph candidates.

#[test]
fn graph_candidates_never_link_one_group_or_cross_turns() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        json!({"session": "s", "tool": "a", "ts_start": 0, "ts_end": 100, "result": {"id": "INC-4242"}}),
        json!({"session": "s", "tool": "b", "ts_start": 10, "ts_end": 90, "result": "x"}),
        json!({"session": "s", "tool": "c", "ts_start": 200, "ts_end": 300, "arguments": {"incident": "INC-4242"}}),
        json!({"session": "s", "tool": "c", "ts_start": 400, "ts_end": 500}),
        json!({"session": "s", "tool": "d", "ts_start": 600, "ts_end": 700, "turn": 1}),
    ];
    let p = write(dir.path(), "e.jsonl", &lines.iter().map(Value::to_string).collect::<Vec<_>>().join("\n"));
    let (s, _, _) = read_all(&p, LogFormat::Events);
    let c = benchgen::graph::candidates(&s);
    let edges: Vec<(&str, &str)> = c.iter().map(|x| (x.from.as_str(), x.to.as_str())).collect();
    assert_eq!(edges, [("a", "c"), ("b", "c")], "no a–b (one group), no c→c, no c→d (next turn)");
    assert_eq!(c[0].value_flow.len(), 1, "INC-4242 flows from a's result into c's argument");
    assert_eq!(c[0].value_flow[0].argument, "incident");
    assert!(c[1].value_flow.is_empty());
}

// ---------------------------------------------------------------------------
// The demo's log track end to end with the scripted LLM.

/// Scripted verdicts: requests marked OFF-TOPIC are not genuine; answers saying "Sorry"
/// are unsatisfactory; an edge is a dependency unless its target is `notify_user`.
fn scripted() -> ScriptedLlm {
    ScriptedLlm::start(|seen| {
        let t = seen.all_text();
        let v = if t.contains("genuine need") {
            json!({"genuine": !t.contains("OFF-TOPIC"), "reason": "scripted need"})
        } else if t.contains("satisfactory") {
            json!({"satisfactory": !t.contains("Sorry"), "reason": "scripted answer"})
        } else if t.contains("must run after it") {
            json!({"dependent": !t.contains("Does `notify_user` depend"), "reason": "scripted edge"})
        } else {
            json!({"scenario": "Monitoring-Alerts"})
        };
        Answer::json(v)
    })
}

struct LogProject {
    p: Project,
    llm: ScriptedLlm,
}

impl LogProject {
    /// The demo config's log sections on the demo logs, the judge pointed at the scripted server.
    fn demo(extra: &str) -> Self {
        Self::demo_with(extra, scripted())
    }

    fn demo_with(extra: &str, llm: ScriptedLlm) -> Self {
        let p = Project::empty();
        for f in ["raw/demo/logs/catalog.json", "raw/demo/logs/events.jsonl", "raw/demo/logs/chats.jsonl"] {
            p.copy_in(f);
        }
        for t in ["logs_need", "logs_answer", "logs_label", "graph_edge"] {
            p.copy_in(&format!("pipeline/prompts/{t}.md"));
        }
        let demo = std::fs::read_to_string(repo().join("pipeline/demo.toml")).unwrap();
        let logs = &demo[demo.find("[[logs.sources]]").expect("demo has a log track")..];
        // Synthesis (after the log track) has its own tests in tests/it/synth.rs.
        let logs = &logs[..logs.find("# Synthesis (FinMCP").unwrap_or(logs.len())];
        let logs = logs.replace("llm_sample = 3\n", "").replace(
            "provider = \"local\"",
            &format!("provider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"scripted\"", llm.base_url()),
        );
        p.write("pipeline/demo.toml", format!("[project]\nseed = 7\n\n{logs}\n{extra}"));
        Self { p, llm }
    }

    fn run(&self, args: &[&str], secret: &str) -> std::process::Output {
        self.p.cmd().env("BENCHGEN_ANON_SECRET", secret).args(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args, SECRET);
        assert!(
            o.status.success(),
            "`{}` failed:\n{}\n{}",
            args.join(" "),
            crate::support::stdout(&o),
            crate::support::stderr(&o)
        );
        crate::support::stdout(&o)
    }

    fn jsonl(&self, rel: &str) -> Vec<Value> {
        self.p.read(rel).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

#[test]
fn demo_log_track_runs_end_to_end_with_the_scripted_llm() {
    let lp = LogProject::demo("");
    let out = lp.ok(&["run"]);
    for st in ["logs-import", "logs-curate", "logs-split", "graph-build"] {
        assert!(out.contains(&format!("{st}: done")), "{out}");
    }
    assert!(!out.contains("catalog:"), "a logs-only config runs no registry stage: {out}");
    let report: Value = serde_json::from_str(&lp.p.read("artifacts/logs-import/report.json")).unwrap();
    assert_eq!(report["sessions"], 300, "{report}");
    assert_eq!(report["malformed"], 3, "{report}");
    assert!(report["parallel_groups"].as_u64().unwrap() > 0);
    assert!(report["flags"]["error-result"].as_u64().unwrap() > 0);
    assert!(report["flags"]["bad-arguments"].as_u64().unwrap() > 0);
    let malformed = lp.jsonl("artifacts/logs-import/malformed.jsonl");
    let locs: Vec<&str> = malformed.iter().map(|m| m["location"].as_str().unwrap()).collect();
    assert!(locs.iter().all(|l| l.starts_with("raw/demo/logs/") && l.contains(".jsonl:")), "{locs:?}");
    for d in ["email", "phone", "ip", "id_cn", "bank_card", "employee_id"] {
        assert!(report["anonymised"][d].as_u64().unwrap_or(0) > 0, "{d}: {}", report["anonymised"]);
    }

    // Curation: every drop has a criterion and a reason; the planted bad sessions go.
    let decisions = lp.jsonl("artifacts/logs-curate/decisions.jsonl");
    assert_eq!(decisions.len(), 300);
    let by: BTreeMap<&str, &Value> = decisions.iter().map(|d| (d["id"].as_str().unwrap(), d)).collect();
    let chats = lp.jsonl("artifacts/logs-import/sessions.jsonl");
    let find = |needle: &str| -> Vec<String> {
        chats.iter().filter(|s| s.to_string().contains(needle)).map(|s| s["id"].as_str().unwrap().to_string()).collect()
    };
    let off_topic = find("OFF-TOPIC");
    assert!(!off_topic.is_empty());
    for id in &off_topic {
        assert_eq!(by[id.as_str()]["dropped_by"], "need", "{id}");
    }
    for id in find("Tell me a joke") {
        assert_eq!(by[id.as_str()]["dropped_by"], "resolved", "{id}");
    }
    for id in find("invalid arguments") {
        assert_eq!(by[id.as_str()]["dropped_by"], "resolved", "{id}: broken arguments never repaired");
    }
    for id in find("upstream timeout") {
        assert_eq!(by[id.as_str()]["dropped_by"], "resolved", "{id}");
    }
    for id in find("503 service unavailable") {
        assert_ne!(by[id.as_str()]["dropped_by"], "resolved", "{id}: repaired by a retry");
    }
    assert!(decisions.iter().any(|d| d["dropped_by"] == "answer" && d["answer"]["by"] == "feedback"));
    for d in &decisions {
        if d["keep"] == false {
            let c = d["dropped_by"].as_str().unwrap();
            assert!(!d[c]["reason"].as_str().unwrap().is_empty(), "{d}");
        }
    }

    // explain log:<id> shows the decision and the exchange behind it.
    let id = &off_topic[0];
    let x = lp.ok(&["explain", &format!("log:{id}")]);
    // explain wraps its text at 100 columns: read it as one line.
    let x = x.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(x.contains("dropped") && x.contains("need: no by llm (scripted need)"), "{x}");
    assert!(x.contains("llm.exchange"), "{x}");

    // Split: every tool and sub-scenario with a single-tool session has a seed example.
    let split: Value = serde_json::from_str(&lp.p.read("artifacts/logs-split/split.json")).unwrap();
    let seed = lp.jsonl("artifacts/logs-split/seed.jsonl");
    let bench = lp.jsonl("artifacts/logs-split/benchmark.jsonl");
    assert!(!seed.is_empty() && !bench.is_empty());
    let singles: Vec<&Value> = seed.iter().chain(&bench).collect();
    let tools_with_single: std::collections::BTreeSet<String> =
        singles.iter().map(|s| s["turns"][0]["groups"][0][0]["tool"].as_str().unwrap().to_string()).collect();
    for t in split["coverage"]["tools_without_seed"].as_array().unwrap() {
        assert!(!tools_with_single.contains(t.as_str().unwrap()), "{t} has single-tool sessions but no seed");
    }
    let gs = lp.jsonl("artifacts/logs-split/graph_source.jsonl");
    assert!(gs.len() > 20, "{}", gs.len());

    // Graph: scripted verdicts decide; no edge into notify_user; never within a group.
    let g: Value = serde_json::from_str(&lp.p.read("artifacts/graph-build/graph.json")).unwrap();
    let edges = g["edges"].as_array().unwrap();
    assert!(!edges.is_empty());
    assert!(edges.iter().all(|e| e["to"] != "notify_user"), "rejected by the scripted LLM");
    let cands: Vec<Value> = serde_json::from_str(&lp.p.read("artifacts/graph-build/candidates.json")).unwrap();
    assert!(cands.iter().any(|c| c["to"] == "notify_user" && c["accepted"] == false && c["reason"] == "scripted edge"));
    let parallel = |a: &str, b: &str| {
        gs.iter().any(|s| {
            s["turns"].as_array().unwrap().iter().any(|t| {
                t["groups"].as_array().unwrap().iter().any(|grp| {
                    let names: Vec<&str> =
                        grp.as_array().unwrap().iter().map(|c| c["tool"].as_str().unwrap()).collect();
                    names.contains(&a) && names.contains(&b)
                })
            })
        })
    };
    assert!(parallel("get_service_status", "get_alerts"), "the demo has parallel groups");
    assert!(
        cands.iter().all(|c| !(c["from"] == "get_service_status" && c["to"] == "get_alerts")),
        "tools of one parallel group are never linked"
    );
    assert!(cands.iter().any(|c| !c["value_flow"].as_array().unwrap().is_empty()), "value flow survives anonymisation");
    for f in ["graph.dot", "graph.svg", "report.md"] {
        assert!(lp.p.path("artifacts/graph-build").join(f).is_file());
    }
    let report = lp.p.read("artifacts/graph-build/report.md");
    assert!(report.contains("| density |") && report.contains("strongly connected"), "{report}");

    // Review round trip: remove one accepted edge, add one rejected; a bad sheet applies nothing.
    lp.ok(&["graph", "review", "export"]);
    let sheet = lp.p.read("reviews/graph/graph_review.csv");
    let e0 = &edges[0];
    let (rf, rt) = (e0["from"].as_str().unwrap(), e0["to"].as_str().unwrap());
    let mut lines: Vec<String> = sheet.lines().map(str::to_string).collect();
    let bad = lines.clone();
    let decide = |l: &str, d: &str| format!("{}{d}", l.strip_suffix(",,,").expect("an undecided row"));
    for l in lines.iter_mut().skip(1) {
        if l.starts_with(&format!("{rf},{rt},")) {
            *l = decide(l, ",remove,ann,");
        } else if l.contains(",notify_user,") && l.contains(",rejected,") {
            *l = decide(l, ",add,ann,=cmd()");
        }
    }
    let mut bad_lines = bad;
    bad_lines[1] = decide(&bad_lines[1], ",maybe,,");
    lp.p.write("reviews/graph/graph_review.csv", bad_lines.join("\n") + "\n");
    let o = lp.run(&["graph", "review", "import"], SECRET);
    assert!(!o.status.success());
    let err = crate::support::stderr(&o);
    assert!(err.contains("graph_review.csv:2") && err.contains("maybe") && err.contains("reviewer"), "{err}");
    assert!(!lp.p.path("artifacts/graph-review-import").exists(), "nothing applied");
    lp.p.write("reviews/graph/graph_review.csv", lines.join("\n") + "\n");
    lp.ok(&["graph", "review", "import"]);
    let rg: Value = serde_json::from_str(&lp.p.read("artifacts/graph-review-import/graph.json")).unwrap();
    let re = rg["edges"].as_array().unwrap();
    assert!(!re.iter().any(|e| e["from"] == rf && e["to"] == rt), "removed");
    assert!(re.iter().any(|e| e["to"] == "notify_user" && e["verdict"] == "added"), "added");

    // A rerun is up to date; a forced rerun in a fresh project is byte-identical.
    let again = lp.ok(&["run"]);
    assert!(again.contains("graph-build: up to date"), "{again}");
    let lp2 = LogProject::demo("");
    lp2.ok(&["run"]);
    let (a, b) = (lp.p.artifacts(), lp2.p.artifacts());
    for (k, v) in &a {
        if k.ends_with("manifest.json") || k.ends_with("ledger.sqlite") || k.starts_with("graph-review-import") {
            continue;
        }
        assert_eq!(Some(v), b.get(k), "{k} differs between two runs");
    }
    let _ = &lp.llm;
}

/// Judgements that fail at item level (an answer that stays invalid after every re-ask) for
/// OFF-TOPIC sessions and for edges into `notify_user`; everything else as [`scripted`].
fn scripted_with_failures() -> ScriptedLlm {
    ScriptedLlm::start(|seen| {
        let t = seen.all_text();
        let refuse = (t.contains("genuine need") && t.contains("OFF-TOPIC"))
            || (t.contains("must run after it") && t.contains("Does `notify_user` depend"));
        if refuse {
            return Answer::text("I would rather not say.");
        }
        let v = if t.contains("genuine need") {
            json!({"genuine": true, "reason": "scripted need"})
        } else if t.contains("satisfactory") {
            json!({"satisfactory": !t.contains("Sorry"), "reason": "scripted answer"})
        } else if t.contains("must run after it") {
            json!({"dependent": true, "reason": "scripted edge"})
        } else {
            json!({"scenario": "Monitoring-Alerts"})
        };
        Answer::json(v)
    })
}

#[test]
fn failed_judgements_fail_the_stage_unless_max_failed_share_allows_them_and_then_are_recorded() {
    // Default share 0: one failed judgement fails curation, naming the key to raise.
    let strict = LogProject::demo_with("", scripted_with_failures());
    let o = strict.run(&["run"], SECRET);
    assert!(!o.status.success());
    let err = crate::support::stderr(&o);
    assert!(err.contains("logs.curate.max_failed_share"), "{err}");
    assert!(!strict.p.root().join("artifacts/logs-curate/manifest.json").exists(), "nothing half-done");

    // Allowed: the failed sessions are dropped with their reason, the failed edges rejected.
    let lenient = LogProject::demo_with("", scripted_with_failures());
    let cfg = lenient.p.read("pipeline/demo.toml");
    let cfg = cfg.replacen("[logs.curate]\n", "[logs.curate]\nmax_failed_share = 0.5\n", 1).replacen(
        "[graph]\n",
        "[graph]\nmax_failed_share = 0.9\n",
        1,
    );
    assert!(cfg.contains("max_failed_share = 0.5") && cfg.contains("max_failed_share = 0.9"), "{cfg}");
    lenient.p.write("pipeline/demo.toml", cfg);
    lenient.ok(&["run"]);
    let decisions = lenient.jsonl("artifacts/logs-curate/decisions.jsonl");
    let failed: Vec<&Value> = decisions.iter().filter(|d| d["dropped_by"] == "llm-failed").collect();
    assert!(!failed.is_empty(), "OFF-TOPIC sessions fail their judgement");
    assert!(failed.iter().all(|d| d["keep"] == false && !d["need"]["reason"].as_str().unwrap().is_empty()));
    let kept = lenient.jsonl("artifacts/logs-curate/curated.jsonl");
    assert_eq!(
        kept.len()
            + failed.len()
            + decisions.iter().filter(|d| d["keep"] == false && d["dropped_by"] != "llm-failed").count(),
        decisions.len()
    );
    let cands: Vec<Value> = serde_json::from_str(&lenient.p.read("artifacts/graph-build/candidates.json")).unwrap();
    let into_notify: Vec<&Value> = cands.iter().filter(|c| c["to"] == "notify_user").collect();
    assert!(!into_notify.is_empty());
    for c in into_notify {
        assert_eq!(c["accepted"], false);
        assert!(c["reason"].as_str().unwrap().starts_with("validation failed:"), "{c}");
    }
}

#[test]
fn seeded_pii_never_reaches_artifacts_or_ledger_and_pseudonyms_are_stable() {
    let pii = [
        "ann.lee@example.com",
        "13812345678",
        "+44 20 7946 0958",
        "11010519491231002X",
        "4111111111111111",
        "GB82WEST12345698765432",
        "192.168.7.21",
        "E654321",
    ];
    // Phone numbers in the national formats of several regions (issue 24): Chinese mobiles
    // as written, a Beijing line, UK mobile and London, US, Japan, Germany, France, India.
    let national = [
        "138 1234 5678",
        "139-8765-4321",
        "010-6552 9988",
        "07700 900789",
        "(020) 7946 0018",
        "(212) 555-0147",
        "03-1234-5678",
        "030 901820",
        "01 42 68 53 00",
        "098765 43210",
    ];
    let session = |id: &str, t: i64| {
        json!({"session": id, "tool": "get_oncall", "ts_start": t, "ts_end": t + 10,
            "user": format!("mail {} or {} / {}; id {} card {} iban {} from {}; my employee id is {}; 电话{}，或者 {}", pii[0], pii[1], pii[2], pii[3], pii[4], pii[5], pii[6], pii[7], national[0], national[1..].join(", ")),
            "arguments": {"email": pii[0], "card": 4111111111111111_u64, "phone": national[3]}, "result": {"ip": pii[6], "phone": pii[1], "backup": national[5], "mobile": 13987654321_u64},
            "answer": format!("sent to {}; call {} or {}", pii[0], national[4], national[6]), "feedback": true, "scenario": "Support-OnCall"})
        .to_string()
    };
    let lp = LogProject::demo("");
    let second = session("p2", 1000);
    lp.p.write("raw/demo/logs/events.jsonl", format!("{}\n{second}\n{second}\n", session("p1", 0)));
    let o = lp.run(&["run"], SECRET);
    assert!(o.status.success(), "{}", crate::support::stderr(&o));
    let mut files = lp.p.artifacts();
    files.insert("ledger".into(), std::fs::read(lp.p.path("artifacts/ledger.sqlite")).unwrap());
    files.insert("stdout".into(), o.stdout.clone());
    files.insert("stderr".into(), o.stderr.clone());
    for (name, bytes) in &files {
        let text = String::from_utf8_lossy(bytes);
        for v in pii.iter().chain(&national).chain(&["13987654321"]) {
            assert!(!text.contains(v), "`{v}` found in {name}");
        }
        // Also as bare digits (a number kept without its spaces).
        for v in national {
            let d: String = v.chars().filter(char::is_ascii_digit).collect();
            assert!(!text.contains(&d), "`{d}` found in {name}");
        }
        assert!(!text.contains(SECRET), "the secret itself leaked into {name}");
    }
    let report: Value = serde_json::from_str(&lp.p.read("artifacts/logs-import/report.json")).unwrap();
    // Two sessions (p2's two events are one session), each at least: 13812345678 twice, +44 …,
    // the ten national numbers of the text, three more in arguments and results, the numeric
    // mobile and two in the answer.
    assert!(report["anonymised"]["phone"].as_u64().unwrap() >= 2 * 18, "{}", report["anonymised"]);
    let sessions = lp.jsonl("artifacts/logs-import/sessions.jsonl");
    let user = |i: usize| sessions[i]["turns"][0]["user"].as_str().unwrap().to_string();
    assert_eq!(user(0), user(1), "same values → same pseudonyms across sessions");
    assert!(user(0).contains("EMAIL_") && user(0).contains("EMPLOYEE_ID_"), "{}", user(0));
    let email_pseudo = user(0).split_whitespace().nth(1).unwrap().to_string();
    assert_eq!(
        sessions[0]["turns"][0]["groups"][0][0]["arguments"]["email"],
        email_pseudo.as_str(),
        "ids survive as one pseudonym"
    );

    // Another run with the same secret: same bytes. A new secret: new pseudonyms.
    let lp2 = LogProject::demo("");
    lp2.p.write("raw/demo/logs/events.jsonl", lp.p.read("raw/demo/logs/events.jsonl"));
    lp2.ok(&["logs", "import"]);
    assert_eq!(lp2.p.read("artifacts/logs-import/sessions.jsonl"), lp.p.read("artifacts/logs-import/sessions.jsonl"));
    let o = lp2.run(&["logs", "import", "--force"], "another-secret");
    assert!(o.status.success(), "{}", crate::support::stderr(&o));
    let other = lp2.jsonl("artifacts/logs-import/sessions.jsonl");
    assert_ne!(other[0]["turns"][0]["user"], sessions[0]["turns"][0]["user"]);
    // No secret: a clear error naming the variable.
    let o = lp2.p.cmd().env_remove("BENCHGEN_ANON_SECRET").args(["logs", "import", "--force"]).output().unwrap();
    assert!(!o.status.success());
    assert!(crate::support::stderr(&o).contains("BENCHGEN_ANON_SECRET"), "{}", crate::support::stderr(&o));
}

#[test]
fn killed_graph_build_resumes_without_repeating_a_verdict() {
    let lp = LogProject::demo("");
    lp.ok(&["logs", "import"]);
    lp.ok(&["logs", "curate"]);
    lp.ok(&["logs", "split"]);
    let before = lp.llm.count();
    let killed =
        lp.p.cmd()
            .env("BENCHGEN_ANON_SECRET", SECRET)
            .env("BENCHGEN_FAIL_AT", "graph_build_edge:3")
            .args(["graph", "build"])
            .output()
            .unwrap();
    assert!(!killed.status.success());
    assert!(!lp.p.path("artifacts/graph-build").exists(), "nothing committed by the killed run");
    let out = lp.ok(&["graph", "build"]);
    assert!(out.contains("(3 verdicts resumed)"), "{out}");
    let edge_asks: Vec<String> =
        lp.llm.requests()[before..].iter().map(|r| r.all_text()).filter(|t| t.contains("must run after it")).collect();
    let mut distinct = edge_asks.clone();
    distinct.sort();
    distinct.dedup();
    let cands: Vec<Value> = serde_json::from_str(&lp.p.read("artifacts/graph-build/candidates.json")).unwrap();
    let asked = cands.iter().filter(|c| !c["reason"].as_str().unwrap().starts_with("support ")).count();
    assert!(asked >= 5, "{asked}");
    assert_eq!(distinct.len(), asked);
    // Concurrency 2: at most the two verdicts in flight at the kill are asked twice.
    assert!(edge_asks.len() <= asked + 2, "{} asks for {asked} candidates", edge_asks.len());
}

// ---------------------------------------------------------------------------
// Fuzzing the readers: never a panic; problems name file:line.

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn check(text: &str, format: LogFormat) {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "f", text);
        let r = read_source(&p, "f", "s", format, &mut |item| {
            if let Item::Malformed { location, reason } = item {
                assert!(location.starts_with("f:"), "{location}");
                assert!(!reason.is_empty());
            }
            Ok(())
        });
        if let Err(e) = r {
            let m = format!("{e:#}");
            assert!(m.contains("`f") || m.contains("f:"), "{m}");
        }
    }

    fn line() -> impl Strategy<Value = String> {
        prop_oneof![
            ".{0,40}",
            Just("{\"session\": 1, \"tool\": \"t\", \"ts_start\": 5}".to_string()),
            Just("{\"session\": \"a\", \"tool\": \"t\", \"ts_start\": \"2026-01-01T00:00:00Z\", \"ts_end\": 3, \"group\": [1]}".to_string()),
            Just("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": \"[{'function': {'name': 'x', 'arguments': {'a': (1,)}}}]\"}]}".to_string()),
            Just("{\"messages\": [{\"role\": \"tool\", \"content\": 5}]}".to_string()),
            "\\{\"(session|tool|ts_start|messages|role)\": [0-9a-z\\[\\]{}\"',:]{0,20}\\}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn readers_never_panic(lines in proptest::collection::vec(line(), 0..8), fmt in 0..3usize) {
            let text = lines.join("\n");
            let format = [LogFormat::Events, LogFormat::Openai, LogFormat::Finmcp][fmt];
            let text = if format == LogFormat::Finmcp { format!("[{}]", lines.join(",")) } else { text };
            check(&text, format);
            check(&text, LogFormat::Auto);
        }
    }
}

// ---------------------------------------------------------------------------
// The real local model (0.5B) on a few sessions.

#[test]
fn real_small_model_curates_a_few_sessions() {
    let Some((_, model, _one_at_a_time)) = crate::support::local_llm_assets("the real-model smoke test") else {
        return;
    };
    let lp = LogProject::demo("");
    let cfg = lp
        .p
        .read("pipeline/demo.toml")
        .replace(
            &format!("provider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"scripted\"", lp.llm.base_url()),
            // A loaded 2-core machine answers slowly: one long attempt (the demo's
            // `timeout_s`) rather than retries.
            &format!("provider = \"local\"\nmodel_path = \"{}\"\nmax_retries = 1", model.display()),
        )
        .replace("scenarios = \"logs\"", "scenarios = \"logs\"\nllm_sample = 2")
        .replace("[[logs.sources]]\nname = \"chat\"\npath = \"raw/demo/logs/chats.jsonl\"\nformat = \"openai\"\n", "");
    assert!(cfg.contains("provider = \"local\"") && !cfg.contains("chats.jsonl"), "{cfg}");
    lp.p.write("pipeline/demo.toml", cfg);
    let events = lp.p.read("raw/demo/logs/events.jsonl");
    let first: Vec<&str> = events.lines().take(12).collect();
    lp.p.write("raw/demo/logs/events.jsonl", first.join("\n") + "\n");
    let out = lp.ok(&["logs", "import"]);
    assert!(out.contains("sessions"), "{out}");
    let out = lp.ok(&["logs", "curate"]);
    assert!(out.contains("sessions kept"), "{out}");
    let decisions = lp.jsonl("artifacts/logs-curate/decisions.jsonl");
    // Rules first: these sessions' needs are settled by rule, so the model judges what is
    // left (here an answer without feedback).
    let judged = decisions.iter().filter(|d| d["need"]["by"] == "llm" || d["answer"]["by"] == "llm").count();
    assert!((1..=2).contains(&judged), "{decisions:?}");
    for d in decisions.iter().filter(|d| d["need"]["by"] == "llm") {
        assert!(d["need"]["ok"].is_boolean() && !d["need"]["reason"].as_str().unwrap().is_empty());
    }
}

/// The real FinMCP samples re-expressed as OpenAI JSONL and as timed events import with the
/// same groups as their `tool_list`; the samples file itself imports through the CLI with the
/// "current user id" rule.
#[test]
fn real_finmcp_samples_in_every_format_and_through_the_cli() {
    let Some(p) = crate::support::shared_data("finmcp/demo_samples.json") else { return };
    let raw: Vec<Value> = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    let (finmcp, _, _) = read_all(&p, LogFormat::Finmcp);
    let dir = tempfile::tempdir().unwrap();
    let jsonl: Vec<String> =
        raw.iter().map(|r| json!({"id": r["id"], "messages": r["messages"]}).to_string()).collect();
    let oa = write(dir.path(), "oa.jsonl", &(jsonl.join("\n") + "\n"));
    let (openai, bad, used) = read_all(&oa, LogFormat::Auto);
    assert_eq!(used, LogFormat::Openai);
    assert!(bad.is_empty());
    // Events: one span per group (calls of a group overlap), groups one after another.
    let mut lines = Vec::new();
    for s in &finmcp {
        let mut t = 0i64;
        for (ti, turn) in s.turns.iter().enumerate() {
            for g in &turn.groups {
                for (k, c) in g.iter().enumerate() {
                    lines.push(
                        json!({"session": s.id, "tool": c.tool, "ts_start": t + k as i64, "ts_end": t + 100, "turn": ti, "arguments": c.arguments})
                            .to_string(),
                    );
                }
                t += 200;
            }
        }
    }
    let ev = write(dir.path(), "ev.jsonl", &(lines.join("\n") + "\n"));
    let (events, bad, used) = read_all(&ev, LogFormat::Auto);
    assert_eq!(used, LogFormat::Events);
    assert!(bad.is_empty());
    let events: BTreeMap<String, &Session> =
        events.iter().map(|s| (s.id.strip_prefix("src:").unwrap().to_string(), s)).collect();
    for (f, o) in finmcp.iter().zip(&openai) {
        assert_eq!(groups(f), groups(o), "{}", f.id);
        let e = events[&f.id];
        let non_empty: Vec<Vec<Vec<String>>> = groups(f).into_iter().filter(|t| !t.is_empty()).collect();
        assert_eq!(non_empty, groups(e), "{}", f.id);
    }

    // Through the CLI: the FinMCP user-id suffix is pseudonymised by a configured rule.
    let proj = Project::empty();
    proj.write("raw/samples.json", std::fs::read(&p).unwrap());
    // `benchgen check` validates the whole log track on load: its prompts and judge role.
    for t in ["logs_need", "logs_answer"] {
        proj.copy_in(&format!("pipeline/prompts/{t}.md"));
    }
    let llm = scripted();
    proj.write(
        "pipeline/demo.toml",
        format!(
            "[[logs.sources]]\npath = \"raw/samples.json\"\n\n[[logs.anonymise.rules]]\nname = \"user_id\"\npattern = '当前用户id是([0-9a-f]+)'\n\n\
             [llm.roles.judge]\nprovider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"scripted\"\n",
            llm.base_url()
        ),
    );
    let o = proj.cmd().env("BENCHGEN_ANON_SECRET", SECRET).args(["logs", "import"]).output().unwrap();
    assert!(o.status.success(), "{}", crate::support::stderr(&o));
    let report: Value = serde_json::from_str(&proj.read("artifacts/logs-import/report.json")).unwrap();
    assert_eq!(report["sessions"], 6);
    assert_eq!(report["flags"]["tool-list-flat"], 2, "the two multi-turn samples: {report}");
    assert!(report["anonymised"]["user_id"].as_u64().unwrap() > 0, "{report}");
    let text = proj.read("artifacts/logs-import/sessions.jsonl");
    let raw_text = std::fs::read_to_string(&p).unwrap();
    let re = crate::support::regex("当前用户id是([0-9a-f]+)").unwrap();
    for c in re.captures_iter(&raw_text) {
        assert!(!text.contains(&c[1]), "user id {} survived", &c[1]);
    }
}

// ---------------------------------------------------------------------------
// A project with nothing but `[logs]` sources: no catalog, no LLM role, no prompt.

/// `files` under `raw/`, each a `[[logs.sources]]` entry (`(file, format)`), plus `extra` config.
fn sources_only(files: &[(&str, &str, &[u8])], extra: &str) -> Project {
    let p = Project::empty();
    let mut cfg = format!("[project]\nseed = 3\n\n[logs]\n{extra}\n");
    for (name, format, bytes) in files {
        p.write(&format!("raw/{name}"), bytes);
        cfg.push_str(&format!("[[logs.sources]]\npath = \"raw/{name}\"\nformat = \"{format}\"\n\n"));
    }
    p.write("pipeline/demo.toml", cfg);
    p
}

fn event(session: &str, feedback: Value) -> String {
    let mut e = json!({"session": session, "tool": "get_host", "ts_start": 0, "ts_end": 5, "result": "ok"});
    if !feedback.is_null() || session == "null" {
        e["feedback"] = feedback;
    }
    e.to_string() + "\n"
}

#[test]
fn a_stage_command_checks_only_its_stage_and_upstream_while_run_and_check_check_all() {
    let p = sources_only(&[("ops.jsonl", "events", event("s1", json!(true)).as_bytes())], "");
    // No `[llm.roles.judge]` and no prompt: `logs import` needs neither.
    let o = p.run(&["logs", "import"]);
    crate::support::assert_code(&o, 0);
    for args in [&["check"][..], &["run"], &["logs", "curate"]] {
        let o = p.run(args);
        crate::support::assert_code(&o, 1);
        let err = crate::support::stderr(&o);
        assert!(err.contains("logs.curate.judge_role: no `[llm.roles.judge]` is configured"), "{args:?}: {err}");
    }
}

#[test]
fn feedback_values_follow_the_documented_mapping_and_unrecognised_ones_are_counted() {
    let lines = [
        event("up", json!("👍")),
        event("tone", json!("👎🏽")),
        event("null", Value::Null),
        event("rating", json!({"rating": 4})),
        event("down", json!(" Thumbs_Down ")),
        event("meh", json!("meh")),
        event("num", json!(0)),
        event("none", Value::Null),
    ]
    .concat();
    let p = sources_only(&[("ops.jsonl", "events", lines.as_bytes())], "");
    let o = p.run(&["logs", "import"]);
    crate::support::assert_code(&o, 0);
    assert!(crate::support::stdout(&o).contains("2 sessions with a `feedback` value that is no recognised signal"));
    let report: Value = serde_json::from_str(&p.read("artifacts/logs-import/report.json")).unwrap();
    assert_eq!(report["unrecognised_feedback"], 2, "{report}");
    assert_eq!(report["flags"]["unrecognised-feedback"], 2, "{report}");
    let sessions: BTreeMap<String, Value> = p
        .read("artifacts/logs-import/sessions.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|s| (s["id"].as_str().unwrap().trim_start_matches("ops:").to_string(), s))
        .collect();
    let fb = |id: &str| sessions[id]["feedback"].clone();
    assert_eq!((fb("up"), fb("tone"), fb("down"), fb("num")), (json!(true), json!(false), json!(false), json!(false)));
    for id in ["null", "rating", "meh", "none"] {
        assert!(fb(id).is_null(), "{id}: {}", sessions[id]);
    }
    let flagged: Vec<&str> = sessions
        .iter()
        .filter(|(_, s)| s["flags"].to_string().contains("unrecognised-feedback"))
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(flagged, ["meh", "rating"]);
    // The flag names the kind of value, never the value (it could be personal data).
    assert!(sessions["rating"]["flags"].to_string().contains("`feedback` object value"), "{}", sessions["rating"]);
    assert!(!sessions["meh"]["flags"].to_string().contains("meh"));
}

#[test]
fn a_source_without_a_readable_record_or_too_many_malformed_ones_fails_naming_file_and_encoding() {
    let good = [event("a", Value::Null), event("b", Value::Null), event("c", Value::Null)].concat();
    let utf16 = |bom: bool| {
        let mut b: Vec<u8> = if bom { vec![0xff, 0xfe] } else { Vec::new() };
        b.extend(good.encode_utf16().flat_map(u16::to_le_bytes));
        b
    };
    let err_of = |p: &Project| {
        let o = p.run(&["logs", "import"]);
        crate::support::assert_code(&o, 1);
        assert!(!p.path("artifacts/logs-import/manifest.json").exists(), "nothing imported");
        crate::support::stderr(&o)
    };
    // UTF-16 with a byte-order mark: named as such, whatever `format` says.
    for format in ["events", "auto"] {
        let p = sources_only(&[("u16.jsonl", format, &utf16(true))], "");
        let err = err_of(&p);
        assert!(err.contains("`raw/u16.jsonl` is UTF-16 LE text") && err.contains("iconv -f UTF-16"), "{err}");
    }
    // Without one: no readable record (the three lines and the NUL after the last line
    // end), NUL bytes pointed at.
    let p = sources_only(&[("u16.jsonl", "events", &utf16(false))], "");
    let err = err_of(&p);
    assert!(err.contains("`raw/u16.jsonl` has no readable record (4 malformed)"), "{err}");
    assert!(err.contains("raw/u16.jsonl:1: not JSON") && err.contains("NUL bytes"), "{err}");
    // Not one line of the format: the file is named, not silently gone.
    let p = sources_only(&[("ops.jsonl", "events", good.as_bytes()), ("chat.jsonl", "openai", good.as_bytes())], "");
    let err = err_of(&p);
    assert!(err.contains("`raw/chat.jsonl` has no readable record (3 malformed)"), "{err}");
    assert!(err.contains("no `messages` field") && err.contains("(read as `openai`)"), "{err}");

    // 2 of 5 records malformed: above a limit of 0.3, within the default (0.5).
    let mixed = format!("{good}not json\n{{\"session\": \"d\"}}\n");
    let p = sources_only(&[("ops.jsonl", "events", mixed.as_bytes())], "max_malformed_share = 0.3");
    let err = err_of(&p);
    assert!(
        err.contains("`raw/ops.jsonl`: 2 of 5 records are malformed (40%, above `logs.max_malformed_share` = 0.3)"),
        "{err}"
    );
    let p = sources_only(&[("ops.jsonl", "events", mixed.as_bytes())], "");
    crate::support::assert_code(&p.run(&["logs", "import"]), 0);
    assert_eq!(p.read("artifacts/logs-import/malformed.jsonl").lines().count(), 2);
    let report: Value = serde_json::from_str(&p.read("artifacts/logs-import/report.json")).unwrap();
    assert_eq!(report["sources"]["ops"], json!({"format": "events", "sessions": 3, "records": 5, "malformed": 2}));
    // A limit outside 0..=1 is a config problem.
    let p = sources_only(&[("ops.jsonl", "events", good.as_bytes())], "max_malformed_share = 1.5");
    let o = p.run(&["check"]);
    assert!(
        crate::support::stderr(&o).contains("logs.max_malformed_share: must be between 0 and 1"),
        "{}",
        crate::support::stderr(&o)
    );
    // A UTF-8 byte-order mark is read past.
    let p = sources_only(&[("ops.jsonl", "auto", format!("\u{feff}{good}").as_bytes())], "");
    crate::support::assert_code(&p.run(&["logs", "import"]), 0);
    assert_eq!(p.read("artifacts/logs-import/sessions.jsonl").lines().count(), 3);
}

#[test]
fn docs_state_the_sub_scenario_separator_and_the_code_agrees() {
    // The table under "### Scenario labels" in docs/logs.md: label → sub-scenario.
    let doc = std::fs::read_to_string(repo().join("docs/logs.md")).unwrap();
    let at = doc.find("### Scenario labels").expect("docs/logs.md has a `### Scenario labels` section");
    let rows: Vec<(String, String)> = doc[at..]
        .lines()
        .skip_while(|l| !l.starts_with("| label"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(|c| c.trim().trim_matches('`')).collect();
            (cells[1].to_string(), cells[2].to_string())
        })
        .collect();
    assert!(rows.len() >= 3, "{rows:?}");
    for (label, sub) in rows {
        let mut s: Session = serde_json::from_value(json!({"id": "x", "source": "x", "format": "events",
            "location": "x:1", "turns": []}))
        .unwrap();
        s.scenario = (label != "(none)").then(|| label.clone());
        assert_eq!(s.sub_scenario(), sub, "label {label:?}");
    }
}

// ---------------------------------------------------------------------------
// Curation: rules first, the LLM only where they cannot tell, and a drop by the LLM only on
// two agreeing verdicts (issue 38, item 5).

/// One logged call (event format) making a single-call session with an answer.
fn logged_call(session: &str, tool: &str, arguments: Value, user: &str, feedback: Option<&str>) -> String {
    let mut e = json!({"session": session, "tool": tool, "ts_start": 0, "ts_end": 5, "arguments": arguments,
        "result": {"ok": true}, "user": user, "answer": "Here is what I found."});
    if let Some(f) = feedback {
        e["feedback"] = json!(f);
    }
    e.to_string() + "\n"
}

/// A project whose only log source is `lines` (events), its judge (`seed = 41`) on `llm`;
/// imported and curated.
fn judged_project(lines: &[String], llm: &ScriptedLlm) -> Project {
    judged_project_in(Project::empty(), lines, &llm.base_url(), ["", ""])
}

/// [`judged_project`] in a project that may hold files already, its judge at `base_url`,
/// with `extra` configuration after `[logs.curate]`'s keys (which `extra` may go on with,
/// then open other tables) and `role` at the end of the judge role's table (which it may go
/// on with, then open the role's `batch` table).
fn judged_project_in(p: Project, lines: &[String], base_url: &str, [extra, role]: [&str; 2]) -> Project {
    for t in ["logs_need", "logs_answer"] {
        p.copy_in(&format!("pipeline/prompts/{t}.md"));
    }
    p.write("raw/ops.jsonl", lines.concat());
    p.write(
        "pipeline/demo.toml",
        format!(
            "[project]\nseed = 5\n\n[logs]\n\n[[logs.sources]]\npath = \"raw/ops.jsonl\"\nformat = \"events\"\n\n\
             [logs.curate]\njudge_role = \"judge\"\ndomain = \"energy prices and IT operations\"\n{extra}\n\
             [llm.roles.judge]\nprovider = \"vllm\"\nbase_url = \"{base_url}\"\nmodel = \"scripted\"\nseed = 41\n\
             {role}",
        ),
    );
    for args in [&["logs", "import"][..], &["logs", "curate"]] {
        let o = p.run(args);
        assert!(o.status.success(), "{args:?}: {}\n{}", crate::support::stdout(&o), crate::support::stderr(&o));
    }
    p
}

/// `decisions.jsonl` by session id.
fn decisions_of(p: &Project) -> BTreeMap<String, Value> {
    p.read("artifacts/logs-curate/decisions.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|d| (d["id"].as_str().unwrap().to_string(), d))
        .collect()
}

#[test]
fn a_session_whose_called_tool_plainly_answers_its_request_is_kept_by_rule_without_asking_the_llm() {
    use benchgen::logs::curate::need_by_rule;
    // The rule alone, on sessions without feedback.
    let session = |user: &str, tool: &str, arguments: Value| -> Session {
        serde_json::from_value(json!({"id": "x", "source": "x", "format": "events", "location": "x:1",
            "turns": [{"user": user, "groups": [[{"tool": tool, "arguments": arguments, "result": "ok"}]]}]}))
        .unwrap()
    };
    let none = BTreeMap::new();
    let named = need_by_rule(&session("What are the grid prices for tomorrow?", "get_grid_prices", json!({})), &none)
        .expect("the request names the tool");
    assert!(named.ok && named.by == "rule" && named.reason.contains("`get_grid_prices`"), "{named:?}");
    let folded = session("Show me the electricity price of the grid", "get_grid_prices", json!({}));
    assert!(need_by_rule(&folded, &none).is_some(), "plural and singular fold");
    let oncall = session("Who is on call for network?", "get_oncall", json!({}));
    assert!(need_by_rule(&oncall, &none).is_some(), "`on call` names `get_oncall`");
    let host = session("Reboot web-42 please, it hangs", "restart_machine", json!({"host": "web-42"}));
    let by_argument = need_by_rule(&host, &none).expect("the request contains an argument value");
    assert!(by_argument.reason.contains("`host`") && by_argument.reason.contains("web-42"), "{by_argument:?}");
    let poem = session("OFF-TOPIC: write a poem about my cat", "get_runbook", json!({"topic": "cats"}));
    assert!(need_by_rule(&poem, &none).is_none(), "neither the tool nor an argument is asked for: the LLM judges");
    // A request that says what the tool's catalog description says (the session `logs
    // curate` had dropped on the 0.5B judge's word), but not one that shares the
    // description's words without the name's, or one word only.
    let about: BTreeMap<String, String> =
        [("get_grid_prices".to_string(), "Electricity prices on the grid, per hour and region.".to_string())].into();
    let electricity = session("What are electricity prices in Texas today?", "get_grid_prices", json!({}));
    assert!(need_by_rule(&electricity, &none).is_none(), "without the description the rules cannot tell");
    let described = need_by_rule(&electricity, &about).expect("the request says what the description says");
    assert_eq!(
        described.reason,
        "the request says what `get_grid_prices` does, by its description (price, electricity), with a successful call"
    );
    let region = session("Which region has the most electricity outages?", "get_grid_prices", json!({}));
    assert!(need_by_rule(&region, &about).is_none(), "no word of the tool's name: {region:?}");
    let price = session("What is the price of a poem?", "get_grid_prices", json!({}));
    assert!(need_by_rule(&price, &about).is_none(), "one shared word only");
    let babysitter = session("What's the price per hour for a babysitter?", "get_grid_prices", json!({}));
    assert!(need_by_rule(&babysitter, &about).is_none(), "`hour` is an everyday word, no sign of the tool");
    let mut failed = session("What are the grid prices for tomorrow?", "get_grid_prices", json!({}));
    failed.turns[0].groups[0][0].error = Some("upstream timeout".into());
    assert!(need_by_rule(&failed, &none).is_none(), "a failed call settles nothing");

    // Through the stage, with a judge that says "not needed" to whatever it is asked.
    let llm = never_needed_judge();
    let p = judged_project(
        &[
            logged_call(
                "grid",
                "get_grid_prices",
                json!({"day": "2026-03-02"}),
                "What are the grid prices for tomorrow?",
                Some("thumbs_up"),
            ),
            logged_call("host", "restart_machine", json!({"host": "web-42"}), "Reboot web-42 please, it hangs", None),
            logged_call("chat", "get_grid_prices", json!({"day": "2026-03-02"}), "Tell me something nice", None),
        ],
        &llm,
    );
    let d = decisions_of(&p);
    for id in ["ops:grid", "ops:host"] {
        assert_eq!(d[id]["keep"], true, "{}", d[id]);
        assert_eq!((&d[id]["need"]["ok"], &d[id]["need"]["by"]), (&json!(true), &json!("rule")), "{}", d[id]);
    }
    assert!(d["ops:grid"]["need"]["reason"].as_str().unwrap().contains("`get_grid_prices`"), "{}", d["ops:grid"]);
    assert!(d["ops:host"]["need"]["reason"].as_str().unwrap().contains("web-42"), "{}", d["ops:host"]);
    // No exchange at all about the grid session (its feedback settles the answer); none
    // about the host session's need (its answer, without feedback, is judged).
    let asked: Vec<String> = llm.requests().iter().map(|r| r.all_text()).collect();
    assert!(asked.iter().all(|t| !t.contains("grid prices for tomorrow")), "{asked:?}");
    let need_asks: Vec<&String> = asked.iter().filter(|t| t.contains("genuine need")).collect();
    assert_eq!(need_asks.len(), 2, "two verdicts, on the one session the rules cannot tell about: {need_asks:?}");
    assert!(need_asks.iter().all(|t| t.contains("Tell me something nice")), "{need_asks:?}");
    assert_eq!(d["ops:chat"]["dropped_by"], "need", "{}", d["ops:chat"]);
    assert_eq!(d["ops:chat"]["need"]["second"]["ok"], false, "{}", d["ops:chat"]);
    let x = p.run(&["explain", "log:ops:grid"]);
    let x = crate::support::stdout(&x).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(x.contains("need: yes by rule") && !x.contains("llm.exchange"), "{x}");
    // The report: who decided the need, and who dropped what.
    let report: Value = serde_json::from_str(&p.read("artifacts/logs-curate/report.json")).unwrap();
    assert_eq!(report["decided_by"]["need"]["rule"], 2, "{report}");
    assert_eq!(report["decided_by"]["need"]["llm-agreed"], 1, "{report}");
    let drops = report["dropped"].as_array().unwrap();
    assert_eq!(drops.len(), 1, "{report}");
    assert_eq!((&drops[0]["criterion"], &drops[0]["by"]), (&json!("need"), &json!("llm-agreed")), "{report}");
    assert_eq!(drops[0]["examples"][0]["id"], "ops:chat", "{report}");
    let m: Value = serde_json::from_str(&p.read("artifacts/logs-curate/manifest.json")).unwrap();
    assert_eq!(m["counts"]["need_by_rule"], 2, "{m}");
}

/// A scripted judge that says "not needed" to every need it is asked about and
/// "satisfactory" to every answer.
fn never_needed_judge() -> ScriptedLlm {
    ScriptedLlm::start(|seen| {
        let v = if seen.all_text().contains("genuine need") {
            json!({"genuine": false, "reason": "not a typical use case for the tool"})
        } else {
            json!({"satisfactory": true, "reason": "scripted answer"})
        };
        Answer::json(v)
    })
}

/// The grid session of the similarity tests: a request no word rule ties to the tool.
const POWER_COST: &str = "What will electricity cost per hour tomorrow in my region?";
const GRID_ABOUT: &str = "Electricity prices on the grid, per hour and region.";

#[test]
fn a_request_near_its_called_tool_is_kept_by_similarity_and_the_embedder_sees_only_open_sessions() {
    use benchgen::logs::curate::{Near, nearest_tools, need_by_rule, need_by_similarity};
    let session = |id: &str, user: &str, tool: &str, error: Option<&str>| -> Session {
        let mut s: Session = serde_json::from_value(json!({"id": id, "source": "x", "format": "events",
            "location": "x:1", "turns": [{"user": user, "groups": [[{"tool": tool, "arguments": {}, "result": "ok"}]]}]}))
        .unwrap();
        s.turns[0].groups[0][0].error = error.map(str::to_string);
        s
    };
    let about: BTreeMap<String, String> = [("get_grid_prices".to_string(), GRID_ABOUT.to_string())].into();
    let power = session("power", POWER_COST, "get_grid_prices", None);
    assert!(need_by_rule(&power, &about).is_none(), "no word rule ties it to the tool");
    // Two turns, the second the one near the tool: each request is weighed on its own.
    let later: Session = serde_json::from_value(json!({"id": "later", "source": "x", "format": "events",
        "location": "x:2", "turns": [{"user": "Hello there", "groups": []},
        {"user": POWER_COST, "groups": [[{"tool": "get_grid_prices", "arguments": {}, "result": "ok"}]]}]}))
    .unwrap();
    let sessions = vec![
        power,
        session("named", "What are the grid prices for tomorrow?", "get_grid_prices", None),
        session("failed", POWER_COST, "get_grid_prices", Some("timeout")),
        later,
    ];
    // A test double of the embedding model: the request along one axis, the tool's text
    // 0.8 along it, anything else across.
    let mut seen: Vec<Vec<String>> = Vec::new();
    let mut fake_embedder = |texts: &[String]| -> anyhow::Result<Vec<Vec<f32>>> {
        seen.push(texts.to_vec());
        Ok(texts
            .iter()
            .map(|t| match t.as_str() {
                POWER_COST => vec![2.0, 0.0],
                t if t.starts_with("Tool: get_grid_prices") => vec![0.8, 0.6],
                _ => vec![0.0, 1.0],
            })
            .collect())
    };
    let near = nearest_tools(&mut fake_embedder, &sessions, &about).unwrap();
    let want = Near { tool: "get_grid_prices".into(), similarity: 0.8 };
    let open = BTreeMap::from([("later".to_string(), want.clone()), ("power".to_string(), want.clone())]);
    assert_eq!(near, open, "only the sessions the rules leave open; `later` by its second request");
    let tool_text = format!("Tool: get_grid_prices\nDescription: {GRID_ABOUT}");
    let texts = [POWER_COST, "Hello there", POWER_COST, tool_text.as_str()].map(String::from).to_vec();
    assert_eq!(seen, [texts], "one call, every open request on its own and the tools");
    let kept = need_by_similarity(Some(&want), Some(0.5)).expect("0.8 is at least 0.5");
    assert_eq!((kept.ok, kept.by.as_str()), (true, "similarity"));
    assert_eq!(
        kept.reason,
        "the request is near what `get_grid_prices` does (similarity 0.800, at least 0.5), with a successful call"
    );
    assert!(need_by_similarity(Some(&want), Some(0.9)).is_none(), "below the threshold the judge decides");
    assert!(need_by_similarity(Some(&want), None).is_none(), "off unless configured");
    // Nothing open: the model is not asked (nor loaded).
    let mut calls = 0;
    let none = nearest_tools(
        &mut |_: &[String]| -> anyhow::Result<Vec<Vec<f32>>> {
            calls += 1;
            Ok(vec![])
        },
        &sessions[1..3],
        &about,
    )
    .unwrap();
    assert!(none.is_empty() && calls == 0);
}

#[test]
fn with_keep_similarity_the_stage_keeps_a_near_session_without_the_judge_and_records_every_similarity() {
    if !crate::efs_flow::assets_or_skip() {
        return;
    }
    let llm = never_needed_judge();
    let tools = json!({"tools": [{"name": "get_grid_prices", "description": GRID_ABOUT,
        "inputSchema": {"type": "object", "properties": {"day": {"type": "string"}}}}]});
    let lines = [
        logged_call("power", "get_grid_prices", json!({"day": "2026-03-02"}), POWER_COST, None),
        logged_call("chat", "get_grid_prices", json!({"day": "2026-03-02"}), "Tell me something nice", None),
    ];
    let extra = "keep_similarity = 0.45\n\n[logs.catalog]\npath = \"raw/tools.json\"\n";
    let p = Project::empty();
    p.write("raw/tools.json", tools.to_string());
    let p = judged_project_in(p, &lines, &llm.base_url(), [extra, ""]);
    let d = decisions_of(&p);
    let (power, chat) = (&d["ops:power"], &d["ops:chat"]);
    let sim = |x: &Value| x["near"]["similarity"].as_f64().unwrap();
    assert!(sim(power) >= 0.45 && sim(chat) < 0.45, "power {} chat {}", power["near"], chat["near"]);
    assert_eq!((&power["keep"], &power["need"]["by"]), (&json!(true), &json!("similarity")), "{power}");
    assert_eq!(power["near"]["tool"], "get_grid_prices");
    assert_eq!((&chat["dropped_by"], &chat["need"]["by"]), (&json!("need"), &json!("llm")), "{chat}");
    let asked: Vec<String> = llm.requests().iter().map(|r| r.all_text()).collect();
    assert!(asked.iter().filter(|t| t.contains("genuine need")).all(|t| !t.contains(POWER_COST)), "{asked:?}");
    let m: Value = serde_json::from_str(&p.read("artifacts/logs-curate/manifest.json")).unwrap();
    assert_eq!(m["counts"]["need_by_similarity"], 1, "{m}");
    // Without the model's files, `check` says so before anything runs.
    let empty = tempfile::tempdir().unwrap();
    let o = p.cmd().args(["check"]).env("BENCHGEN_CACHE", empty.path()).output().unwrap();
    assert!(!o.status.success());
    let err = crate::support::stderr(&o);
    assert!(err.contains("logs.curate.keep_similarity: needs the `[embed]` model, whose files are missing"), "{err}");
    // A threshold outside 0–1 is refused before anything runs.
    let cfg = p.read("pipeline/demo.toml").replace("keep_similarity = 0.45", "keep_similarity = 1.5");
    p.write("pipeline/demo.toml", cfg);
    let o = p.run(&["check"]);
    assert!(!o.status.success());
    assert!(crate::support::stderr(&o).contains("logs.curate.keep_similarity"), "{}", crate::support::stderr(&o));
}

/// The scripted judge of the two-verdict tests: "last night" is genuine on the second seed
/// only (42: the judge's 41 + 1); the song never; every session's answer is satisfactory.
fn two_verdict_judge(seen: &Seen) -> Answer {
    let t = seen.all_text();
    let v = if t.contains("genuine need") {
        let genuine = t.contains("last night") && seen.body["seed"] == 42;
        json!({"genuine": genuine, "reason": format!("scripted need, seed {}", seen.body["seed"])})
    } else {
        json!({"satisfactory": true, "reason": "scripted answer"})
    };
    Answer::json(v)
}

/// A judge in batch mode (OpenAI batch jobs) records what each request sent, as a live one
/// does: the second verdict's own seed and temperature, not the role's.
#[test]
fn a_batch_judge_records_the_seed_and_temperature_each_request_sent() {
    let api = BatchApi::start(two_verdict_judge, Faults::default());
    let role = "mode = \"batch\"\n[llm.roles.judge.batch]\ngather_ms = 150\npoll_s = 0.05\npoll_max_s = 0.2\n";
    let lines = [
        logged_call("maybe", "get_grid_prices", json!({"day": "2026-03-01"}), "What happened last night?", None),
        logged_call("song", "get_grid_prices", json!({"day": "2026-03-01"}), "Sing me a song about the sea", None),
    ];
    let p = judged_project_in(Project::empty(), &lines, &api.base_url(), ["", role]);
    assert!(!api.jobs().is_empty(), "the judge's requests went in batches");
    let need: Vec<Value> = crate::support::ledger_events(&p.path("artifacts"), "llm.exchange")
        .into_iter()
        .filter(|e| e["cached"] == false && e["request"].to_string().contains("genuine need"))
        .collect();
    assert!(need.iter().all(|e| e["batch"].is_string()), "{need:?}");
    for e in &need {
        let (params, sent) = (&e["params"], &e["request"]);
        assert_eq!((&params["seed"], &params["temperature"]), (&sent["seed"], &sent["temperature"]), "{e}");
    }
    // Both kinds are there: the first verdicts at the role's seed, the second at its own.
    let seeds: BTreeSet<u64> = need.iter().map(|e| e["params"]["seed"].as_u64().unwrap()).collect();
    assert_eq!(seeds, BTreeSet::from([41, 42]));
    assert!(need.iter().any(|e| e["params"]["temperature"] == json!(0.7)));
    assert_eq!(decisions_of(&p)["ops:maybe"]["need"]["second"]["seed"], 42);
}

#[test]
fn a_drop_by_the_llm_needs_two_agreeing_verdicts_asked_with_the_judge_seed_and_the_next() {
    let llm = ScriptedLlm::start(two_verdict_judge);
    let p = judged_project(
        &[
            logged_call("maybe", "get_grid_prices", json!({"day": "2026-03-01"}), "What happened last night?", None),
            logged_call("song", "get_grid_prices", json!({"day": "2026-03-01"}), "Sing me a song about the sea", None),
        ],
        &llm,
    );
    let seeds = |needle: &str| -> Vec<u64> {
        let mut s: Vec<u64> = llm
            .requests()
            .iter()
            .filter(|r| r.all_text().contains("genuine need") && r.all_text().contains(needle))
            .map(|r| r.body["seed"].as_u64().unwrap())
            .collect();
        s.sort();
        s
    };
    assert_eq!(seeds("last night"), [41, 42]);
    assert_eq!(seeds("Sing me a song"), [41, 42]);
    // The second is asked at `second_temperature` (greedy decoding would only repeat the
    // first); the first at the role's own.
    for r in llm.requests().iter().filter(|r| r.all_text().contains("genuine need")) {
        let second = r.body["seed"] == 42;
        assert_eq!(r.body["temperature"] == json!(0.7), second, "{}", r.body);
    }
    // The ledger records what each request sent, not the role's own seed and temperature.
    let need_exchanges: Vec<Value> = crate::support::ledger_events(&p.path("artifacts"), "llm.exchange")
        .into_iter()
        .filter(|e| e["request"].to_string().contains("genuine need"))
        .collect();
    assert!(!need_exchanges.is_empty());
    for e in &need_exchanges {
        let (params, sent) = (&e["params"], &e["request"]);
        assert_eq!((&params["seed"], &params["temperature"]), (&sent["seed"], &sent["temperature"]), "{e}");
    }
    assert!(need_exchanges.iter().any(|e| e["params"]["temperature"] == json!(0.7)));
    let d = decisions_of(&p);

    // The verdicts disagree: kept, and marked for review.
    let maybe = &d["ops:maybe"];
    assert_eq!(maybe["keep"], true, "{maybe}");
    assert_eq!((&maybe["need"]["ok"], &maybe["need"]["by"]), (&json!(true), &json!("llm")), "{maybe}");
    assert_eq!(maybe["need"]["second"]["ok"], true, "{maybe}");
    assert_eq!(maybe["need"]["second"]["seed"], 42, "{maybe}");
    assert!(maybe["review"].as_str().unwrap().contains("disagree"), "{maybe}");

    // Both say no: dropped, with both verdicts in the decision and both exchanges its parents.
    let song = &d["ops:song"];
    assert_eq!((&song["keep"], &song["dropped_by"]), (&json!(false), &json!("need")), "{song}");
    assert_eq!(song["need"]["reason"], "scripted need, seed 41", "{song}");
    assert_eq!(
        song["need"]["second"],
        json!({"ok": false, "reason": "scripted need, seed 42", "role": "judge", "seed": 42, "temperature": 0.7}),
        "{song}"
    );
    assert!(song.get("review").is_none(), "{song}");
    let o = p.run(&["--json", "explain", "log:ops:song"]);
    assert!(o.status.success(), "{}", crate::support::stderr(&o));
    let x: Value = serde_json::from_slice(&o.stdout).unwrap();
    let exchanges = x["lineage"].as_array().unwrap().iter().filter(|e| e["kind"] == "llm.exchange").count();
    assert_eq!(exchanges, 2, "{x}");

    // The report and the counts.
    let report: Value = serde_json::from_str(&p.read("artifacts/logs-curate/report.json")).unwrap();
    assert_eq!(report["kept_verdicts_disagree"]["sessions"], 1, "{report}");
    assert_eq!(report["kept_verdicts_disagree"]["examples"][0]["id"], "ops:maybe", "{report}");
    assert_eq!(
        report["dropped"],
        json!([{"criterion": "need", "by": "llm-agreed", "sessions": 1, "share": 0.5,
            "examples": [{"id": "ops:song", "reason": "scripted need, seed 41"}]}]),
        "{report}"
    );
    let m: Value = serde_json::from_str(&p.read("artifacts/logs-curate/manifest.json")).unwrap();
    assert_eq!(m["counts"]["dropped_need_by_llm-agreed"], 1, "{m}");
    assert_eq!(m["counts"]["kept_verdicts_disagree"], 1, "{m}");

    // A second temperature no server takes is refused before anything runs.
    let cfg = p.read("pipeline/demo.toml");
    p.write("pipeline/demo.toml", cfg.replace("[logs.curate]\n", "[logs.curate]\nsecond_temperature = 3.0\n"));
    let o = p.run(&["check"]);
    crate::support::assert_code(&o, 1);
    let err = crate::support::stderr(&o);
    assert!(err.contains("logs.curate.second_temperature: is 3; a sampling temperature is between 0 and 2"), "{err}");
}

// ---------------------------------------------------------------------------
// `[logs] sample = N`: a seeded subset of the sessions for a first look (issue 39, item 4).

/// The demo's log track with `[logs] sample = n` and `[project] seed = seed` (its config has
/// no `[logs]` table of its own: one goes before the first source).
fn sampled(n: usize, seed: u64) -> LogProject {
    let lp = LogProject::demo("");
    let cfg = lp.p.read("pipeline/demo.toml");
    let cfg = cfg.replacen("seed = 7\n", &format!("seed = {seed}\n"), 1).replacen(
        "[[logs.sources]]",
        &format!("[logs]\nsample = {n}\n\n[[logs.sources]]"),
        1,
    );
    lp.p.write("pipeline/demo.toml", cfg);
    lp
}

/// The ids of `logs-import/sessions.jsonl`, sorted.
fn imported_ids(lp: &LogProject) -> Vec<String> {
    let sessions = lp.jsonl("artifacts/logs-import/sessions.jsonl");
    let mut ids: Vec<String> = sessions.iter().map(|s| s["id"].as_str().unwrap().to_string()).collect();
    ids.sort();
    ids
}

/// Replace `from` by `to` in the project's config (once).
fn edit_config(lp: &LogProject, from: &str, to: &str) {
    let cfg = lp.p.read("pipeline/demo.toml");
    assert!(cfg.contains(from), "{from:?} not in {cfg}");
    lp.p.write("pipeline/demo.toml", cfg.replacen(from, to, 1));
}

#[test]
fn logs_sample_imports_a_seeded_subset_and_records_every_session_left_out() {
    // The whole demo log, for the totals and the ids.
    let full = LogProject::demo("");
    full.ok(&["logs", "import"]);
    let all = imported_ids(&full);
    let total = all.len() as u64;
    assert!(total > 20, "{total}");

    let lp = sampled(20, 7);
    let out = lp.ok(&["logs", "import"]);
    assert!(out.contains(&format!("sampled 20 of {total} sessions (`[logs] sample = 20`)")), "{out}");
    let ids = imported_ids(&lp);
    assert_eq!(ids.len(), 20, "{ids:?}");
    let report: Value = serde_json::from_str(&lp.p.read("artifacts/logs-import/report.json")).unwrap();
    assert_eq!(report["sessions"], 20, "{report}");
    assert_eq!(report["sample"]["sample"], 20, "{report}");
    assert_eq!(report["sample"]["read"], total, "{report}");
    assert_eq!(report["sample"]["not_sampled"], total - 20, "{report}");
    // Never silently dropped: each session is imported or listed as left out, with the id a
    // full import gives it.
    let left_out: Vec<String> = serde_json::from_value(report["sample"]["not_sampled_ids"].clone()).unwrap();
    assert!(left_out.windows(2).all(|w| w[0] < w[1]), "listed sorted: {left_out:?}");
    let mut every: Vec<String> = ids.iter().chain(&left_out).cloned().collect();
    every.sort();
    assert_eq!(every, all, "imported + not sampled = the whole log");
    let m: Value = serde_json::from_str(&lp.p.read("artifacts/logs-import/manifest.json")).unwrap();
    assert_eq!(m["counts"]["sessions"], 20, "{m}");
    assert_eq!(m["counts"]["not_sampled"], total - 20, "{m}");

    // Curation judges the sampled sessions and no other.
    lp.ok(&["logs", "curate"]);
    let judged: Vec<String> = decisions_of(&lp.p).into_keys().collect();
    assert_eq!(judged, ids);
    let curated: Value = serde_json::from_str(&lp.p.read("artifacts/logs-curate/report.json")).unwrap();
    assert_eq!(curated["sessions"], 20, "{curated}");

    // The same seed picks the same sessions, in the same bytes.
    let again = sampled(20, 7);
    again.ok(&["logs", "import"]);
    assert_eq!(imported_ids(&again), ids, "same seed, same sample");
    let bytes = |p: &LogProject| p.p.read("artifacts/logs-import/sessions.jsonl");
    assert_eq!(bytes(&again), bytes(&lp));

    // The seed and the size are part of the config hash: another seed makes the import
    // stale and picks other sessions.
    edit_config(&again, "seed = 7\n", "seed = 8\n");
    let out = again.ok(&["logs", "import"]);
    assert!(out.contains("logs-import: done"), "a new seed makes the import stale: {out}");
    let other = imported_ids(&again);
    assert_eq!(other.len(), 20, "{other:?}");
    assert_ne!(other, ids, "another seed, another sample");

    // A sample at least as large as the log keeps it all: the bytes of a full import.
    edit_config(&again, "sample = 20\n", "sample = 100000\n");
    let out = again.ok(&["logs", "import"]);
    assert!(out.contains(&format!("sampled {total} of {total} sessions")), "{out}");
    assert_eq!(bytes(&again), bytes(&full));
    let report: Value = serde_json::from_str(&again.p.read("artifacts/logs-import/report.json")).unwrap();
    assert_eq!(report["sample"]["not_sampled"], 0, "{report}");

    // `sample = 0` is a config error naming the key.
    edit_config(&again, "sample = 100000\n", "sample = 0\n");
    let o = again.run(&["logs", "import"], SECRET);
    assert!(!o.status.success());
    let err = crate::support::stderr(&o);
    assert!(err.contains("logs.sample: must be at least 1"), "{err}");
}
