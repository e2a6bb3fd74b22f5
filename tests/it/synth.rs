//! Synthesis on the log track: chain sampling, chain acceptance, the recorded-responses
//! sandbox, role-play with the scripted LLM (a test double), validation, kill and resume,
//! `explain sample:<id>`, and a smoke test with the real local models.

use std::collections::{BTreeMap, BTreeSet};

use benchgen::agent::{CallRecord, ChainStep, RunStatus, Trajectory, check_chain};
use benchgen::graph::{Edge, GraphDoc, Support};
use benchgen::logs::{Call, Session, Turn};
use benchgen::mcp::{CallOutcome, ToolOutput};
use benchgen::synth::ChainSettings;
use benchgen::synth::chains::{ChainRecord, sample};
use benchgen::synth::validate::from_chain;
use serde_json::{Value, json};

use crate::support::scripted_llm::{Answer, ScriptedLlm, Seen};
use crate::support::{Project, repo};

// ---------------------------------------------------------------------------
// Chain sampling.

fn session(id: &str, scenario: &str, groups: &[&[&str]]) -> Session {
    let groups = groups
        .iter()
        .map(|g| {
            g.iter()
                .map(|t| Call {
                    tool: t.to_string(),
                    arguments: json!({}),
                    result: Some("{}".into()),
                    error: None,
                    ts_start: None,
                    ts_end: None,
                    flags: vec![],
                })
                .collect()
        })
        .collect();
    Session {
        id: id.into(),
        source: "t".into(),
        format: "events".into(),
        location: "f:1".into(),
        scenario: Some(scenario.into()),
        feedback: None,
        turns: vec![Turn { user: format!("query of {id}"), groups, answer: Some("ok".into()) }],
        flags: vec![],
        meta: Default::default(),
    }
}

fn graph(edges: &[(&str, &str)]) -> GraphDoc {
    GraphDoc {
        nodes: vec![],
        edges: edges
            .iter()
            .map(|(a, b)| Edge {
                from: a.to_string(),
                to: b.to_string(),
                support: Support { sessions: vec![], count: 1, sub_scenarios: vec![] },
                value_flow: vec![],
                verdict: "accepted".into(),
                reason: String::new(),
                exchange: String::new(),
            })
            .collect(),
    }
}

fn chain_cfg(per_sub: usize, lengths: &[(&str, f64)]) -> ChainSettings {
    ChainSettings {
        per_sub_scenario: per_sub,
        lengths: lengths.iter().map(|(k, w)| (k.to_string(), *w)).collect(),
        ..Default::default()
    }
}

#[test]
fn chains_come_from_co_occurring_pairs_follow_edges_are_seeded_and_honour_the_length_mix() {
    // Sub-scenario A-x: sessions use a..e; B-y: only p, q. Graph: a→b→c→d, a→c, b→d, c→e, p→q,
    // and an edge a→p that crosses sub-scenarios (p never co-occurs with a).
    let sessions = vec![
        session("s1", "A-x", &[&["a"], &["b", "e"], &["d"]]),
        session("s2", "A-x", &[&["a"], &["c"], &["d"]]),
        session("s3", "B-y", &[&["p"], &["q"]]),
        session("s4", "B-y", &[&["q"]]),
    ];
    let g = graph(&[("a", "b"), ("b", "c"), ("c", "d"), ("a", "c"), ("b", "d"), ("c", "e"), ("p", "q"), ("a", "p")]);
    let cfg = chain_cfg(4, &[("2", 1.0), ("3", 1.0)]);
    let s = sample(&g, &sessions, &cfg, 7).unwrap();
    let edges: BTreeSet<(String, String)> = g.edges.iter().map(|e| (e.from.clone(), e.to.clone())).collect();
    let pairs_of = |sub: &str| -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        for ses in sessions.iter().filter(|x| x.sub_scenario() == sub) {
            let tools: Vec<String> = ses.calls().map(|c| c.tool.clone()).collect();
            for i in 0..tools.len() {
                for j in i + 1..tools.len() {
                    out.insert((tools[i].clone(), tools[j].clone()));
                }
            }
        }
        out
    };
    assert!(!s.chains.is_empty());
    let mut paths = BTreeSet::new();
    for ch in &s.chains {
        assert!(pairs_of(&ch.sub_scenario).contains(&ch.pair), "{ch:?}: pair does not co-occur in its sub-scenario");
        assert_eq!(ch.tools.first(), Some(&ch.pair.0));
        assert_eq!(ch.tools.last(), Some(&ch.pair.1));
        for w in ch.tools.windows(2) {
            assert!(edges.contains(&(w[0].clone(), w[1].clone())), "{ch:?} leaves the graph at {w:?}");
        }
        assert_eq!(ch.tools.iter().collect::<BTreeSet<_>>().len(), ch.tools.len(), "no tool repeats: {ch:?}");
        assert!(!ch.tools.contains(&"p".to_string()) || ch.sub_scenario == "B-y", "{ch:?}");
        assert!(paths.insert(ch.tools.clone()), "duplicate chain {ch:?}");
    }
    // The mix: A-x asks 2 chains of length 2 and 2 of length 3 and gets them.
    let ax = s.sub_scenarios.iter().find(|r| r.sub_scenario == "A-x").unwrap();
    assert_eq!(ax.requested, BTreeMap::from([(2, 2), (3, 2)]));
    assert_eq!(ax.sampled, ax.requested, "{ax:?}");
    let count =
        |sub: &str, len: usize| s.chains.iter().filter(|c| c.sub_scenario == sub && c.tools.len() == len).count();
    assert_eq!((count("A-x", 2), count("A-x", 3)), (2, 2));
    // B-y has one path (p→q): the shortfall is reported with its reason.
    let by = s.sub_scenarios.iter().find(|r| r.sub_scenario == "B-y").unwrap();
    assert_eq!(by.sampled, BTreeMap::from([(2, 1), (3, 0)]));
    assert!(by.shortfalls.iter().any(|f| f.contains("length 2: 1 of 2")), "{by:?}");

    // Seeded and byte-stable; another seed draws differently somewhere.
    let again = sample(&g, &sessions, &cfg, 7).unwrap();
    assert_eq!(serde_json::to_vec(&s).unwrap(), serde_json::to_vec(&again).unwrap());
    let only3 = sample(&g, &sessions, &chain_cfg(2, &[("2", 0.0), ("3", 1.0)]), 7).unwrap();
    assert!(only3.chains.iter().all(|c| c.tools.len() == 3), "{:?}", only3.chains);
    let draws: BTreeSet<Vec<Vec<String>>> = (0..8u64)
        .map(|seed| {
            sample(&g, &sessions, &chain_cfg(1, &[("3", 1.0)]), seed)
                .unwrap()
                .chains
                .into_iter()
                .map(|c| c.tools)
                .collect()
        })
        .collect();
    assert!(draws.len() > 1, "the seed decides the draw: {draws:?}");
}

// ---------------------------------------------------------------------------
// Chain acceptance.

fn call(index: usize, group: usize, tool: &str, outcome: CallOutcome) -> CallRecord {
    CallRecord {
        index,
        group,
        call_id: format!("c{index}"),
        function: tool.into(),
        tool_id: Some(tool.into()),
        server: Some("sandbox".into()),
        arguments: json!({"id": "X1"}),
        executed: true,
        outcome,
        exchange: None,
        call_hash: String::new(),
    }
}

fn ok(text: &str) -> CallOutcome {
    CallOutcome::Ok { output: ToolOutput::note(text) }
}

fn run(id: &str, tools: &[&str], calls: Vec<CallRecord>) -> (ChainRecord, Trajectory) {
    let chain: Vec<ChainStep> =
        benchgen::synth::chains::chain_steps(&tools.iter().map(|t| t.to_string()).collect::<Vec<_>>());
    let t = Trajectory {
        id: id.into(),
        query: "q".into(),
        status: RunStatus::Answered,
        reason: None,
        answer: Some("here you are".into()),
        messages: vec![],
        groups: calls.iter().map(|c| c.group + 1).max().unwrap_or(0),
        chain_check: Some(check_chain(&chain, &calls)),
        calls,
        chain,
        exchanges: vec![],
        withheld: vec![],
    };
    let rec = ChainRecord {
        id: id.into(),
        sub_scenario: "A-x".into(),
        pair: (tools[0].into(), tools[tools.len() - 1].into()),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        seeds: vec![],
        query: "q".into(),
        exchange: "h".into(),
    };
    (rec, t)
}

#[test]
fn acceptance_rejects_a_swapped_dependency_and_a_failed_call_and_allows_extra_tools() {
    // In order, with an extra tool in between and one in parallel: accepted.
    let (rec, t) = run(
        "good",
        &["a", "b"],
        vec![call(0, 0, "a", ok("1")), call(1, 0, "x", ok("2")), call(2, 1, "y", ok("3")), call(3, 2, "b", ok("4"))],
    );
    let c = from_chain(&rec, Some(&t), "planner");
    assert!(c.reasons.is_empty(), "{:?}", c.reasons);
    assert_eq!(c.sample.author.as_deref(), Some("llm:planner"));
    assert_eq!(c.sample.turns[0].trajectory.len(), 3, "three groups");
    assert_eq!(c.sample.turns[0].reference_plan[3].depends_on, vec![0], "b depends on a");
    let l = benchgen::synth::validate::labels(&c.sample, &c.sub_scenario);
    assert_eq!((l.tool_calls, l.groups, l.parallel_calls), (4, 3, 2));

    // Swapped: b before a. Rejected, and the reason names the step.
    let (rec, t) = run("swap", &["a", "b"], vec![call(0, 0, "b", ok("1")), call(1, 1, "a", ok("2"))]);
    let c = from_chain(&rec, Some(&t), "planner");
    assert!(c.reasons.iter().any(|r| r.contains("chain not kept") && r.contains("`b`")), "{:?}", c.reasons);
    // In the same group (parallel): not strictly after, rejected too.
    let (rec, t) = run("same", &["a", "b"], vec![call(0, 0, "a", ok("1")), call(1, 0, "b", ok("2"))]);
    assert!(!from_chain(&rec, Some(&t), "p").reasons.is_empty());

    // A failed call rejects even when the chain is kept (by a retry), with the call's reason.
    let failed = CallOutcome::ToolError { output: ToolOutput::note("invalid arguments for `a`") };
    let (rec, t) =
        run("failed", &["a", "b"], vec![call(0, 0, "a", failed), call(1, 1, "a", ok("1")), call(2, 2, "b", ok("2"))]);
    let c = from_chain(&rec, Some(&t), "p");
    assert!(t.chain_check.as_ref().unwrap().preserved);
    assert!(
        c.reasons.iter().any(|r| r.contains("`a` did not succeed") && r.contains("invalid arguments")),
        "{:?}",
        c.reasons
    );

    // Not executed, or without a final answer: rejected with that reason.
    let (rec, mut t) = run("noans", &["a", "b"], vec![call(0, 0, "a", ok("1")), call(1, 1, "b", ok("2"))]);
    assert!(from_chain(&rec, None, "p").reasons[0].contains("not executed"));
    t.answer = Some("  ".into());
    assert!(from_chain(&rec, Some(&t), "p").reasons.iter().any(|r| r.contains("no final answer")));
}

// ---------------------------------------------------------------------------
// The recorded-responses sandbox.

#[tokio::test]
async fn recorded_responses_sandbox_answers_logged_results_for_equal_arguments() {
    use benchgen::mcp::McpClient;
    use benchgen::mcp::config::ToolIds;
    let tools: Vec<benchgen::logs::import::LogTool> = serde_json::from_value(json!([
        {"name": "get_host", "description": "a host", "inputSchema": {"type": "object",
          "properties": {"host": {"type": "string"}, "fields": {"type": "object"}}, "required": ["host"]}}
    ]))
    .unwrap();
    let mut s = session("log:1", "A-x", &[&["get_host"]]);
    let c = &mut s.turns[0].groups[0][0];
    c.arguments = json!({"host": "web-01", "fields": {"cpu": true, "mem": false}});
    c.result = Some("{\"host\":\"web-01\",\"cpu\":93}".into());
    let mut failed = session("log:0", "A-x", &[&["get_host"]]);
    failed.turns[0].groups[0][0].arguments = json!({"host": "db-02"});
    failed.turns[0].groups[0][0].error = Some("timeout".into());
    let dir = tempfile::tempdir().unwrap();
    let client: std::sync::Arc<McpClient> = benchgen::sandbox::domain::domain_sandbox(
        &tools,
        &[s, failed],
        3,
        benchgen::mcp::ClientOptions::new(dir.path()),
    )
    .unwrap();
    assert_eq!(client.spec().tool_ids, ToolIds::AsIs);
    let text = |o: CallOutcome| match o {
        CallOutcome::Ok { output } => output.text,
        other => panic!("{other:?}"),
    };
    // Equal arguments in another key order: the logged result.
    let got =
        text(client.call("get_host", &json!({"fields": {"mem": false, "cpu": true}, "host": "web-01"}), None).await);
    assert_eq!(got, "{\"host\":\"web-01\",\"cpu\":93}");
    // Other arguments, or a call the logs only hold a failure for: generated, deterministic.
    let other = text(client.call("get_host", &json!({"host": "web-02"}), None).await);
    assert_ne!(other, got);
    assert_eq!(other, text(client.call("get_host", &json!({"host": "web-02"}), None).await));
    let gen_ = text(client.call("get_host", &json!({"host": "db-02"}), None).await);
    assert!(!gen_.contains("timeout"), "{gen_}");
    client.shutdown().await;
}

// ---------------------------------------------------------------------------
// The log track with synthesis, through the CLI, with the scripted LLM.

/// Required properties of a tool in the request, filled with placeholder values.
fn fill(seen: &Seen, name: &str) -> Value {
    let tool = seen.body["tools"].as_array().into_iter().flatten().find(|t| t["function"]["name"] == name);
    let mut args = serde_json::Map::new();
    if let Some(t) = tool {
        for r in t["function"]["parameters"]["required"].as_array().into_iter().flatten() {
            args.insert(r.as_str().unwrap().to_string(), json!("X-1"));
        }
    }
    Value::Object(args)
}

/// The scripted model of the whole log track plus synthesis (a test double).
fn rule(seen: &Seen) -> Answer {
    let t = seen.all_text();
    if seen.body.get("tools").is_some() {
        // The agent: follow "CHAIN: a > b" in the last user message, one tool per group.
        let msgs = seen.body["messages"].as_array().unwrap();
        let last_user = msgs.iter().rposition(|m| m["role"] == "user").unwrap();
        let user = msgs[last_user]["content"].as_str().unwrap_or_default();
        let chain: Vec<&str> = user
            .split("CHAIN: ")
            .nth(1)
            .map(|c| {
                c.split_whitespace()
                    .filter(|w| *w != ">")
                    .take_while(|w| !w.starts_with("UN") && !w.starts_with('('))
                    .collect()
            })
            .unwrap_or_default();
        let done = msgs[last_user..].iter().filter(|m| m["role"] == "assistant").count();
        return match chain.get(done) {
            Some(tool) => Answer::ToolCalls(vec![(tool.to_string(), fill(seen, tool))]),
            None => Answer::text(&format!("Done: {}", chain.join(", "))),
        };
    }
    let v = if t.contains("genuine need") {
        json!({"genuine": !t.contains("OFF-TOPIC"), "reason": "scripted need"})
    } else if t.contains("satisfactory") {
        json!({"satisfactory": !t.contains("Sorry"), "reason": "scripted answer"})
    } else if t.contains("must run after it") {
        json!({"dependent": true, "reason": "scripted edge"})
    } else if t.contains("Write ONE user request") {
        // The chain's tools, in the order listed ("1. `name`: ...").
        let tools: Vec<&str> = t
            .lines()
            .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()) && l.contains(". `"))
            .filter_map(|l| l.split('`').nth(1))
            .collect();
        // The request asks in words for every call and names the value the calls take.
        json!({"query": format!("CHAIN: {} (for X-1)", tools.join(" > "))})
    } else if t.contains("Write this user's goal") {
        let first = t.lines().find_map(|l| l.strip_prefix("- `")).and_then(|l| l.split('`').next()).unwrap_or("none");
        json!({"goal": format!("use {first}"), "requests": ["Please do the first ask", "Please do the second ask"]})
    } else if t.contains("You play a user") {
        let turn: usize =
            t.split("This is turn ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().parse().unwrap();
        let tool = t.split("Your goal: use ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or("none");
        let brief = t.contains("mood: brief");
        let sloppy = t.contains("mood: sloppy");
        // Each turn asks something new (a turn that repeats an earlier one ends the dialogue).
        let nth = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"][(turn - 1).min(7)];
        match turn {
            2 if sloppy => json!({"message": format!("CHAIN: {tool} UNADDRESSED ({nth} ask, for X-1)"), "done": false}),
            n if brief && n >= 3 => json!({"message": "", "done": true}),
            _ => json!({"message": format!("CHAIN: {tool} ({nth} ask, for X-1)"), "done": false}),
        }
    } else if t.contains("addressed the user's request") {
        let turns: Vec<Value> = t
            .split("\nTurn ")
            .skip(1)
            .map(|block| {
                let n: u32 = block.split_whitespace().next().unwrap().parse().unwrap();
                let bad = block.contains("UNADDRESSED");
                json!({"turn": n, "addressed": !bad, "reason": if bad { "ignored the follow-up" } else { "answered" }})
            })
            .collect();
        json!({"turns": turns})
    } else if t.contains("Does doing what the user asked need this call?") {
        json!({"needed": true, "reason": "scripted need"})
    } else if t.contains("Your earlier reply was wrong") {
        json!({"answer": "Done as asked."})
    } else {
        json!({"scenario": "Monitoring-Alerts"})
    };
    Answer::json(v)
}

pub(crate) struct SynthProject {
    p: Project,
    llm: ScriptedLlm,
}

const SECRET: &str = "synth-test-secret";

/// The demo's log track and synthesis sections, every role on the scripted server; fewer
/// sessions judged; `extra` replaces settings (`old=>new` pairs applied to the config).
pub(crate) fn synth_project(replace: &[(&str, &str)]) -> SynthProject {
    synth_project_with(replace, rule)
}

/// [`synth_project`] with another scripted-LLM rule.
fn synth_project_with(
    replace: &[(&str, &str)],
    rule: impl Fn(&Seen) -> Answer + Send + Sync + 'static,
) -> SynthProject {
    let p = Project::empty();
    for f in ["raw/demo/logs/catalog.json", "raw/demo/logs/events.jsonl", "raw/demo/logs/chats.jsonl"] {
        p.copy_in(f);
    }
    for t in [
        "logs_need",
        "logs_answer",
        "logs_label",
        "graph_edge",
        "synth_chain_query",
        "synth_goal",
        "synth_user",
        "synth_check",
    ] {
        p.copy_in(&format!("pipeline/prompts/{t}.md"));
    }
    p.write("raw/demo/personas.toml", "[attributes]\nage = [\"30\"]\nmood = [\"brief\", \"sloppy\", \"patient\"]\n");
    let llm = ScriptedLlm::start(rule);
    let demo = std::fs::read_to_string(repo().join("pipeline/demo.toml")).unwrap();
    let track = &demo[demo.find("[[logs.sources]]").expect("demo has a log track")..];
    // Review, levels and release (after synthesis) have their own tests.
    let track = &track[..track.find("# Review (FinMCP").unwrap_or(track.len())];
    let mut cfg = track
        .replace("llm_sample = 3\n", "llm_sample = 20\n")
        .replace("min_support = 14", "min_support = 3")
        // The user simulator (the default) is what these tests script; the demo's planned
        // user turns have their own test.
        .replace("user_turns = \"planned\"\n", "")
        .replace("model_path = \"qwen2.5-coder-0.5b-instruct.gguf\"\n", "")
        .replace(
            "provider = \"local\"",
            &format!("provider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"scripted\"", llm.base_url()),
        );
    for (a, b) in replace {
        assert!(cfg.contains(a), "the demo config has no `{a}`");
        cfg = cfg.replace(a, b);
    }
    p.write("pipeline/demo.toml", format!("[project]\nseed = 11\n\n{cfg}"));
    SynthProject { p, llm }
}

impl SynthProject {
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        let mut c = self.p.cmd();
        c.env("BENCHGEN_ANON_SECRET", SECRET);
        for (k, v) in env {
            c.env(k, v);
        }
        c.args(args).output().unwrap()
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args, &[]);
        assert!(
            o.status.success(),
            "`{}` failed:\n{}\n{}",
            args.join(" "),
            crate::support::stdout(&o),
            crate::support::stderr(&o)
        );
        crate::support::stdout(&o)
    }

    /// A file of the project, by its path from the project root.
    pub(crate) fn read(&self, rel: &str) -> String {
        self.p.read(rel)
    }

    fn jsonl(&self, rel: &str) -> Vec<Value> {
        self.p.read(rel).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

#[test]
fn a_looping_chain_query_is_asked_again_and_then_left_out_with_its_reason() {
    const LOOP: &str = "Find the open alerts of inventory then acknowledge them and ";
    let sp = synth_project_with(
        &[("max_chains = 3", "max_chains = 4"), ("lengths = { \"2\" = 1, \"3\" = 1 }", "lengths = { \"2\" = 1 }")],
        |seen| {
            let t = seen.all_text();
            let asked_again = t.contains("three times or more");
            // One sub-scenario's writer loops once, another's every time.
            let looping = t.contains("Write ONE user request")
                && (t.contains("Sub-scenario: IncidentManagement-Triage")
                    || (t.contains("Sub-scenario: Monitoring-Alerts") && !asked_again));
            match looping {
                true => Answer::json(json!({"query": LOOP.repeat(4)})),
                false => rule(seen),
            }
        },
    );
    sp.ok(&["run", "--until", "synth-chains"]);
    let chains = sp.jsonl("artifacts/synth-chains/chains.jsonl");
    let by_scenario = |s: &str| chains.iter().find(|c| c["sub_scenario"] == s);
    assert!(by_scenario("IncidentManagement-Triage").is_none(), "{chains:?}");
    let alerts = by_scenario("Monitoring-Alerts").expect("the re-asked chain is kept");
    assert!(alerts["query"].as_str().unwrap().starts_with("CHAIN: "), "{alerts}");
    assert!(chains.iter().all(|c| benchgen::llm::extract::looped(c["query"].as_str().unwrap()).is_none()));
    let failed: Value = serde_json::from_str(&sp.p.read("artifacts/synth-chains/failed.json")).unwrap();
    let failed = failed.as_array().unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let reason = failed[0]["reason"].as_str().unwrap();
    assert!(reason.contains("repeats \"find the open alerts of inventory\""), "{reason}");
    let report = sp.p.read("artifacts/synth-chains/report.md");
    assert!(
        report.contains(&format!("{} queries written (1 failed; reasons in failed.json).", chains.len())),
        "{report}"
    );
}

#[test]
fn roleplay_plans_from_labelled_sub_scenarios_and_leaves_out_a_looping_user() {
    let sp = synth_project_with(&[("dialogues = 2", "dialogues = 6")], |seen| {
        let t = seen.all_text();
        match t.contains("You play a user") && t.contains("mood: patient") {
            true => {
                Answer::json(json!({"message": "please check the inventory service now ".repeat(5), "done": false}))
            }
            false => rule(seen),
        }
    });
    sp.ok(&["run", "--until", "synth-roleplay"]);
    // The split has sessions without a scenario label, but no dialogue is planned from them.
    let sessions =
        [sp.jsonl("artifacts/logs-split/graph_source.jsonl"), sp.jsonl("artifacts/logs-split/benchmark.jsonl")];
    assert!(sessions.iter().flatten().any(|s| s["scenario"].is_null()), "the demo logs have unlabelled sessions");
    let report = sp.p.read("artifacts/synth-roleplay/report.md");
    let line = report.lines().find(|l| l.starts_with("Sub-scenarios drawn from: ")).expect("the report names them");
    assert!(!line.contains("unlabelled"), "{line}");
    let dialogues = sp.jsonl("artifacts/synth-roleplay/dialogues.jsonl");
    assert!(dialogues.iter().all(|d| d["sub_scenario"] != "unlabelled"), "{dialogues:?}");
    // Every dialogue whose user simulator looped is left out with the reason.
    assert!(dialogues.iter().all(|d| d["persona"]["mood"] != "patient"), "{dialogues:?}");
    let failed: Value = serde_json::from_str(&sp.p.read("artifacts/synth-roleplay/failed.json")).unwrap();
    let failed = failed.as_array().unwrap();
    assert!(!failed.is_empty() && !dialogues.is_empty(), "6 planned: {failed:?} {dialogues:?}");
    assert_eq!(failed.len() + dialogues.len(), 6);
    for f in failed {
        let reason = f["reason"].as_str().unwrap();
        assert!(reason.contains("the message repeats \"please check the inventory service now\""), "{reason}");
    }
}

#[test]
fn log_track_with_synthesis_runs_end_to_end_and_explains_samples() {
    let sp = synth_project(&[
        ("max_chains = 3", "max_chains = 4"),
        ("dialogues = 2", "dialogues = 4"),
        ("turn_cap = 2", "turn_cap = 3"),
    ]);
    let out = sp.ok(&["run"]);
    for st in ["synth-chains", "execute", "synth-roleplay", "validate"] {
        assert!(out.contains(&format!("{st}: done")), "{out}");
    }
    // Chains: queries for execute, each with its chain, and seed examples from the seed pool.
    let chains = sp.jsonl("artifacts/synth-chains/chains.jsonl");
    assert_eq!(chains.len(), 4, "{chains:?}");
    let seeds: BTreeSet<String> =
        sp.jsonl("artifacts/logs-split/seed.jsonl").iter().map(|s| s["id"].as_str().unwrap().to_string()).collect();
    for c in &chains {
        for s in c["seeds"].as_array().unwrap() {
            assert!(seeds.contains(s["session"].as_str().unwrap()), "{s}");
        }
    }
    let queries = sp.jsonl("artifacts/synth-chains/queries.jsonl");
    assert_eq!(queries.len(), 4);
    assert!(queries.iter().all(|q| q["chain"].as_array().unwrap().len() >= 2));
    // Nothing failed: the report does not send anyone to a failed.json that is not there.
    let report = sp.p.read("artifacts/synth-chains/report.md");
    assert!(report.contains("4 chains sampled; 4 queries written.\n"), "{report}");
    assert!(!report.contains("failed.json") && !sp.p.path("artifacts/synth-chains/failed.json").exists());
    // `execute` says what became of its queries.
    assert!(out.contains("4 queries: 4 answered, 0 at the call cap, 0 repeating calls, 0 failed;"), "{out}");
    assert!(out.contains("chain order preserved in 4, broken in 0"), "{out}");
    // It ran them with the role synthesis names (`synth.assistant_role`, the demo's
    // `synth_large`), not its own `execute.role`.
    let ledger = benchgen::ledger::Ledger::open_read_only(&sp.p.path("artifacts")).unwrap().expect("a ledger");
    let roles: BTreeSet<String> = ledger
        .rows_of_kinds(&["llm.exchange"])
        .unwrap()
        .into_iter()
        .filter(|r| r.stage == "execute")
        .map(|r| serde_json::from_str::<Value>(&r.payload).unwrap()["role"].as_str().unwrap_or("?").to_string())
        .collect();
    assert_eq!(roles, BTreeSet::from(["synth_large".to_string()]), "the roles of `execute`'s exchanges");
    drop(ledger);
    // Everything is up to date now: `run` says "running" of no stage.
    let again = sp.run(&["run"], &[]);
    assert!(again.status.success());
    let err = crate::support::stderr(&again);
    assert!(!err.contains("running `"), "{err}");
    assert!(crate::support::stdout(&again).contains("execute: up to date, skipped"));

    // Every chain was executed against the domain sandbox and, the scripted agent following
    // the chain, accepted; real samples and dialogues were validated too.
    let verdicts = sp.jsonl("artifacts/validate/verdicts.jsonl");
    let by_source = |s: &str| verdicts.iter().filter(|v| v["source"] == s).collect::<Vec<_>>();
    assert_eq!(by_source("chain").len(), 4);
    assert!(by_source("chain").iter().all(|v| v["accepted"] == true), "{verdicts:?}");
    assert_eq!(by_source("real").len(), 2, "the demo's real_samples = 2");
    let samples = sp.jsonl("artifacts/validate/samples.jsonl");
    let ids: Vec<&str> = samples.iter().map(|s| s["id"].as_str().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "sorted by id");
    for s in &samples {
        let sample: benchgen::model::Sample = serde_json::from_value(s.clone()).unwrap();
        assert!(sample.turns.iter().all(|t| !t.trajectory.is_empty()), "{s}");
        match sample.id.starts_with("log:") {
            true => assert_eq!(sample.author, None),
            false => assert!(sample.author.as_deref().unwrap().starts_with("llm:synth"), "{s}"),
        }
    }
    // FinMCP's sample format, which its reader (and `benchgen score`) take.
    let fin: Vec<benchgen::formats::finmcp::Sample> =
        serde_json::from_str(&sp.p.read("artifacts/validate/finmcp.json")).unwrap();
    assert_eq!(fin.len(), samples.len());
    for f in &fin {
        let d = f.diff_level.as_ref().unwrap();
        let calls: usize = f.messages.iter().map(|m| m.calls().len()).sum();
        assert_eq!(d.tool_number, Some(calls as u32));
        assert!(f.scenery.is_some() && f.task.is_some() && f.question.is_some());
    }
    let report = sp.p.read("artifacts/validate/report.md");
    assert!(report.contains("Yield funnel") && report.contains("Table 1"), "{report}");

    // Lineage: the chain, its query exchange, the agent's exchanges and MCP calls, the verdict.
    let chain_id = chains[0]["id"].as_str().unwrap();
    let ex = sp.ok(&["explain", &format!("sample:{chain_id}"), "--json"]);
    let x: Value = serde_json::from_str(&ex).unwrap();
    assert_eq!(x["status"], "accepted by `validate`", "{x}");
    let kinds: BTreeSet<&str> = x["lineage"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for k in ["synth.chain", "llm.exchange", "mcp.call", "execute.trajectory", "validate.verdict"] {
        assert!(kinds.contains(k), "`{k}` missing from the lineage: {kinds:?}");
    }
    let out = sp.run(&["explain", "sample:nope"], &[]);
    assert!(!out.status.success());
    assert!(crate::support::stderr(&out).contains("no sample `nope`"));

    // Role-play: the user simulator never saw a tool call or result; the turn cap holds; a
    // dialogue whose follow-up went unaddressed is rejected by the judge.
    let dialogues = sp.jsonl("artifacts/synth-roleplay/dialogues.jsonl");
    assert_eq!(dialogues.len(), 4);
    let results: Vec<String> = dialogues
        .iter()
        .flat_map(|d| d["turns"].as_array().unwrap().iter())
        .flat_map(|t| t["groups"].as_array().unwrap().iter())
        .flat_map(|g| g.as_array().unwrap().iter())
        .map(|c| c["result"].as_str().unwrap().to_string())
        .collect();
    assert!(!results.is_empty());
    let sim: Vec<Seen> = sp.llm.requests().into_iter().filter(|r| r.all_text().contains("You play a user")).collect();
    assert!(!sim.is_empty());
    for r in &sim {
        let msgs = r.body["messages"].as_array().unwrap();
        assert!(msgs.iter().all(|m| m["role"] != "tool" && m.get("tool_calls").is_none()), "{msgs:?}");
        let text = r.all_text();
        for res in &results {
            assert!(!text.contains(res.as_str()), "the simulator saw a tool result: {res}");
        }
        assert!(r.body.get("tools").is_none());
        // It is given its goal's plan and the turn's request from it; past the plan's end
        // (turn 3 of the two-request plans here), that the plan is done.
        assert!(text.contains("Your plan, one request per message:\n1. Please do the first ask\n2. Please"), "{text}");
        let turn: usize =
            text.split("This is turn ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
        let request = text.split("The request for this turn: ").nth(1).and_then(|r| r.lines().next());
        match turn {
            1 => assert_eq!(request, Some("Please do the first ask"), "{text}"),
            2 => assert_eq!(request, Some("Please do the second ask"), "{text}"),
            _ => assert!(request.is_none() && text.contains("Every request of your plan has been made."), "{text}"),
        }
    }
    // Each dialogue keeps its plan.
    assert!(dialogues.iter().all(|d| d["requests"].as_array().is_some_and(|r| r.len() == 2)), "{dialogues:?}");
    let moods: BTreeMap<&str, Vec<&Value>> = dialogues.iter().fold(BTreeMap::new(), |mut m, d| {
        m.entry(d["persona"]["mood"].as_str().unwrap()).or_default().push(d);
        m
    });
    for d in dialogues.iter() {
        let turns = d["turns"].as_array().unwrap().len();
        assert!(turns <= 3, "turn cap 3: {d}");
        match d["persona"]["mood"].as_str().unwrap() {
            "brief" => assert_eq!((turns, d["ended"].as_str().unwrap()), (2, "user")),
            _ => assert_eq!((turns, d["ended"].as_str().unwrap()), (3, "cap")),
        }
    }
    let dv = by_source("dialogue");
    assert_eq!(dv.len(), 4);
    for v in &dv {
        let d = dialogues.iter().find(|d| d["id"] == v["id"]).unwrap();
        if d["persona"]["mood"] == "sloppy" {
            assert_eq!(v["accepted"], false, "{v}");
            assert!(v["reasons"].to_string().contains("turn 2: request not addressed"), "{v}");
        } else {
            assert_eq!(v["accepted"], true, "{v}");
        }
    }
    assert!(moods.len() >= 2, "the seeded draw gives several moods: {moods:?}");
    let stopped = fin.iter().filter(|f| f.task.as_deref() == Some("multi turn")).count();
    assert!(stopped > 0);
    for f in fin.iter().filter(|f| f.task.as_deref() == Some("multi turn")) {
        let d = dialogues.iter().find(|d| d["id"] == f.id.to_string()).unwrap();
        let last = f.messages.last().unwrap();
        assert_eq!(last.text() == "###STOP###", d["ended"] == "user", "{}", f.id);
    }

    // Up to date: nothing runs again.
    let out = sp.ok(&["run"]);
    assert!(!out.contains("synth-chains: done"), "{out}");
}

#[test]
fn killed_synthesis_resumes_without_repeating_a_sample_or_an_exchange() {
    let quiet = [("[synth.chains]\n", "[synth.chains]\nconcurrency = 1\n"), ("dialogues = 2", "dialogues = 0")];
    // An uninterrupted run, for comparison.
    let whole = synth_project(&quiet);
    whole.ok(&["run"]);
    // Killed in `synth chains` after the second chain, then in `execute` after the first
    // query (one at a time, as the demo's `[execute] concurrency = 1` runs them), then run to
    // the end.
    let sp = synth_project(&quiet);
    let cfg: toml::Value = toml::from_str(&sp.p.read("pipeline/demo.toml")).unwrap();
    assert_eq!(cfg["execute"]["concurrency"].as_integer(), Some(1));
    let o = sp.run(&["run"], &[("BENCHGEN_FAIL_AT", "synth_chain:2")]);
    assert!(!o.status.success());
    assert!(!sp.p.path("artifacts/synth-chains/manifest.json").exists());
    let o = sp.run(&["run"], &[("BENCHGEN_FAIL_AT", "execute_query:1")]);
    assert!(!o.status.success(), "{}", crate::support::stderr(&o));
    assert!(sp.p.path("artifacts/synth-chains/manifest.json").exists(), "{}", crate::support::stderr(&o));
    assert!(!sp.p.path("artifacts/execute/manifest.json").exists());
    sp.ok(&["run"]);
    for f in
        ["synth-chains/chains.jsonl", "synth-chains/queries.jsonl", "validate/samples.jsonl", "validate/verdicts.jsonl"]
    {
        assert_eq!(sp.p.read(&format!("artifacts/{f}")), whole.p.read(&format!("artifacts/{f}")), "{f}");
    }
    let n = sp.jsonl("artifacts/synth-chains/chains.jsonl").len();
    assert!(n >= 2);
    // No exchange was sent twice: every chain query prompt and every agent request once.
    let synth: Vec<String> = sp
        .llm
        .requests()
        .into_iter()
        .filter(|r| r.body.get("tools").is_some() || r.all_text().contains("Write ONE user request"))
        .map(|r| r.body["messages"].to_string())
        .collect();
    let distinct: BTreeSet<&String> = synth.iter().collect();
    assert_eq!(distinct.len(), synth.len(), "an exchange was repeated after the kill");
    let asked = synth.iter().filter(|m| m.contains("Write ONE user request")).count();
    assert_eq!(asked, n, "one query exchange per chain");
}

// ---------------------------------------------------------------------------
// The real local models (0.5B writer, 1.5B assistant) on the demo domain.

#[test]
fn real_local_models_produce_an_accepted_chain_sample() {
    let Some((_, small, _one_at_a_time)) = crate::support::local_llm_assets("the real-model smoke test") else {
        return;
    };
    let large = small.with_file_name(benchgen::llm::config::DEFAULT_LOCAL_MODEL);
    if !large.is_file() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "the 1.5B model is missing: run `make setup`");
        eprintln!("skipping the real-model smoke test: the 1.5B model is missing; run `make setup`");
        return;
    }
    // The log track on the scripted judge (its own tests cover it); chain queries and
    // execution on the real 1.5B model and validation on the real 0.5B model, as in the demo
    // (the 0.5B model never completes a chain: docs/synth.md#the-demo); a few short chains,
    // no dialogues.
    let sp = synth_project(&[
        ("max_chains = 3", "max_chains = 4"),
        ("lengths = { \"2\" = 1, \"3\" = 1 }", "lengths = { \"2\" = 1 }"),
        ("dialogues = 2", "dialogues = 0"),
    ]);
    let cfg = sp.p.read("pipeline/demo.toml");
    let scripted = format!("provider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"scripted\"", sp.llm.base_url());
    let local = |cfg: &str, role: &str, model: &std::path::Path| {
        let i = cfg.find(&format!("[llm.roles.{role}]")).unwrap_or_else(|| panic!("the demo has no role `{role}`"));
        let j = i + cfg[i..].find(&scripted).expect("the role points at the scripted server");
        let with = format!("provider = \"local\"\nmodel_path = \"{}\"\nmax_retries = 1", model.display());
        format!("{}{with}{}", &cfg[..j], &cfg[j + scripted.len()..])
    };
    let cfg = local(&local(&cfg, "synth", &small), "synth_large", &large);
    // The 0.5B wrote the chain queries here until `validate` v15: its queries ("get_alerts",
    // "search_incidents, then find open incidents …") left one chain accepted, whose
    // `get_incident` step its query did not need, and the lookup rule rejects that now.
    let planner = "planner_role = \"synth_large\"";
    assert!(cfg.contains(planner) && cfg.contains("assistant_role = \"synth_large\""), "the demo's roles changed");
    sp.p.write("pipeline/demo.toml", cfg);
    // Up to `validate`, whose verdicts are what this test is about: the demo's eval panel
    // is these two real roles too, and running it on the scripted release took a minute
    // of `make test` for nothing this test checks (tests/it/eval.rs runs a real panel).
    sp.ok(&["run", "--until", "validate"]);
    let verdicts = sp.jsonl("artifacts/validate/verdicts.jsonl");
    let accepted: Vec<&Value> = verdicts.iter().filter(|v| v["source"] == "chain" && v["accepted"] == true).collect();
    assert!(
        !accepted.is_empty(),
        "no chain sample accepted; verdicts:\n{}\nqueries:\n{}",
        verdicts.iter().filter(|v| v["source"] == "chain").map(|v| v.to_string()).collect::<Vec<_>>().join("\n"),
        sp.p.read("artifacts/synth-chains/queries.jsonl")
    );
}

// ---------------------------------------------------------------------------
// Ground truth that matches the request (issue 28): the agent's extra calls leave the
// reference plan, with their reasons in the verdicts, the funnel and the lineage.

/// [`rule`], with an agent that does more than it is asked: after the chain it repeats the
/// chain's first call beside a new call (a group of only calls already run would not run
/// again), then claims an acknowledgement. The new call acknowledges an alert (an action
/// no request of the demo's chains asks for unless the chain holds it) or, when the chain
/// acknowledges one (so an acknowledgement would be asked for), is the first call for
/// another value. The needed-call check finds a call whose tool ran before not needed, and
/// a chain step (which it decides too, `validate` v7) needed.
fn rule_with_extra_calls(seen: &Seen) -> Answer {
    let t = seen.all_text();
    if seen.body.get("tools").is_some() {
        let msgs = seen.body["messages"].as_array().unwrap();
        let last_user = msgs.iter().rposition(|m| m["role"] == "user").unwrap();
        let user = msgs[last_user]["content"].as_str().unwrap_or_default();
        let Some(spec) = user.split("CHAIN: ").nth(1) else { return rule(seen) };
        let chain: Vec<&str> =
            spec.split_whitespace().filter(|w| *w != ">").take_while(|w| !w.starts_with('(')).collect();
        let done = msgs[last_user..].iter().filter(|m| m["role"] == "assistant").count();
        let new = if chain.iter().any(|t| t.ends_with("acknowledge_alert")) {
            let mut other = fill(seen, chain[0]);
            if let Value::Object(o) = &mut other {
                o.values_mut().for_each(|v| *v = json!("X-2"));
                // A tool without required arguments (`list_services`) would give `{}` again:
                // a repeat of the chain's first call, which the agent loop does not run.
                o.insert("note".into(), json!("X-2"));
            }
            (chain[0].to_string(), other)
        } else {
            ("acknowledge_alert".to_string(), json!({"alert_id": "X-1"}))
        };
        return match done.checked_sub(chain.len()) {
            None => Answer::ToolCalls(vec![(chain[done].to_string(), fill(seen, chain[done]))]),
            Some(0) => Answer::ToolCalls(vec![(chain[0].to_string(), fill(seen, chain[0])), new]),
            Some(_) => Answer::text(&format!("Done: {}. I also acknowledged the alert.", chain.join(", "))),
        };
    }
    if t.contains("Does doing what the user asked need this call?") {
        // A call whose tool ran before (the repeated read) adds nothing; a chain step,
        // which `validate` judges too (it is needed on evidence only), is needed.
        let before = t.split("The calls made before it:").nth(1).and_then(|r| r.split("The call to judge:").next());
        let judged = t.split("The call to judge:\n").nth(1).and_then(|r| r.split(['(', ' ']).nth(1)).unwrap_or("");
        let again = before.is_some_and(|b| b.contains(&format!(" {judged}(")));
        return Answer::json(match again {
            true => json!({"needed": false, "reason": "scripted: nothing asks for it"}),
            false => json!({"needed": true, "reason": "scripted: the chain asks for it"}),
        });
    }
    rule(seen)
}

#[test]
fn an_agent_s_extra_calls_leave_the_reference_plan_which_equals_the_sampled_chain() {
    let sp = synth_project_with(
        &[("max_chains = 3", "max_chains = 4"), ("dialogues = 2", "dialogues = 0")],
        rule_with_extra_calls,
    );
    sp.ok(&["run"]);
    let chains: BTreeMap<String, Value> = sp
        .jsonl("artifacts/synth-chains/chains.jsonl")
        .into_iter()
        .map(|c| (c["id"].as_str().unwrap().to_string(), c))
        .collect();
    let verdicts = sp.jsonl("artifacts/validate/verdicts.jsonl");
    let samples: BTreeMap<String, Value> = sp
        .jsonl("artifacts/validate/samples.jsonl")
        .into_iter()
        .map(|s| (s["id"].as_str().unwrap().to_string(), s))
        .collect();
    let mut checked = 0;
    for v in verdicts.iter().filter(|v| v["source"] == "chain") {
        let id = v["id"].as_str().unwrap();
        let chain: Vec<&str> = chains[id]["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        let calls = v["calls"].as_array().unwrap();
        // The agent made the chain's calls and two more: both left out, each with its reason.
        assert_eq!(calls.len(), chain.len() + 2, "{v}");
        let left: Vec<&Value> = calls.iter().filter(|c| c["decision"] != "needed").collect();
        assert_eq!(left.len(), 2, "{v}");
        let reasons: Vec<&str> = left.iter().map(|c| c["reason"].as_str().unwrap()).collect();
        assert!(
            reasons.iter().any(|r| r.starts_with("the same call and result as call 1"))
                || reasons.iter().any(|r| r.contains("nothing asks for it")),
            "the repeated read is left out: {reasons:?}"
        );
        if !chain.iter().any(|t| t.ends_with("acknowledge_alert")) {
            assert!(
                reasons
                    .iter()
                    .any(|r| r.contains("`acknowledge_alert` is an action (acknowledge) the request does not ask for")),
                "{reasons:?}"
            );
            // The answer claimed the acknowledgement: asked again, and the new answer kept.
            let notes: Vec<&str> = v["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
            assert!(notes.iter().any(|n| n.contains("the answer was asked again (says `acknowledged`")), "{notes:?}");
        }
        if v["accepted"] == true {
            let s = &samples[id];
            let turn = &s["turns"][0];
            let plan: Vec<&str> = turn["reference_plan"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["alternatives"][0].as_str().unwrap())
                .collect();
            assert_eq!(plan, chain, "the reference plan is the sampled chain: {s}");
            let marked = turn["trajectory"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|g| g.as_array().unwrap())
                .filter(|c| c.get("left_out").is_some())
                .count();
            assert_eq!(marked, 2, "the extra calls stay recorded, marked: {s}");
            if !chain.iter().any(|t| t.ends_with("acknowledge_alert")) {
                assert_eq!(turn["gold_reply"], "Done as asked.", "{s}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 2, "at least two chain samples accepted: {verdicts:?}");
    // The funnel counts them; explain shows them in the verdict's line.
    let report = sp.p.read("artifacts/validate/report.md");
    assert!(report.contains("## Reference calls") && report.contains("| chain |"), "{report}");
    let id = samples.keys().find(|k| !k.starts_with("log:")).unwrap();
    let ex = sp.ok(&["explain", &format!("sample:{id}")]);
    // explain wraps its text at 100 columns: read it as one line.
    let ex = ex.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(ex.contains("calls in the reference plan; left out: turn 1 call"), "{ex}");
}

/// [`rule`], with a user simulator that asks its first request again at turn 2: a brief
/// user keeps repeating it when asked again, the others ask something new.
fn rule_with_a_repeating_user(seen: &Seen) -> Answer {
    let t = seen.all_text();
    if t.contains("You play a user") && !t.contains("This is turn 1") {
        let tool = t.split("Your goal: use ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or("none");
        let new = t.contains("the message repeats turn 1") && !t.contains("mood: brief");
        let nth = if new { "second" } else { "first" };
        return Answer::json(json!({"message": format!("CHAIN: {tool} ({nth} ask, for X-1)"), "done": false}));
    }
    rule(seen)
}

#[test]
fn a_user_turn_that_repeats_an_earlier_one_is_asked_again_then_ends_the_dialogue() {
    let sp = synth_project_with(&[("dialogues = 2", "dialogues = 6")], rule_with_a_repeating_user);
    sp.ok(&["run"]);
    let dialogues = sp.jsonl("artifacts/synth-roleplay/dialogues.jsonl");
    let (mut repeated, mut asked_anew) = (0, 0);
    for d in &dialogues {
        let users: Vec<&str> = d["turns"].as_array().unwrap().iter().map(|t| t["user"].as_str().unwrap()).collect();
        if d["persona"]["mood"] == "brief" {
            assert_eq!(d["ended"], "repeated", "{d}");
            assert_eq!(users.len(), 1, "the repeated turn is not kept: {d}");
            repeated += 1;
        } else {
            assert_eq!(users.len(), 2, "{d}");
            assert!(users[1].contains("second ask"), "asked again with the reason, the user asked anew: {d}");
            asked_anew += 1;
        }
    }
    assert!(repeated > 0 && asked_anew > 0, "both kinds of user occur: {dialogues:?}");
    // The one-turn dialogues are no multi-turn sample; the reason says how they ended.
    let verdicts = sp.jsonl("artifacts/validate/verdicts.jsonl");
    let one_turn: Vec<&Value> = verdicts
        .iter()
        .filter(|v| {
            v["source"] == "dialogue"
                && v["reasons"].to_string().contains("the dialogue has one turn (it ended `repeated`)")
        })
        .collect();
    assert_eq!(one_turn.len(), repeated, "{verdicts:?}");
}

/// [`rule`], with a user simulator that asks at turn 2 for an acknowledgement the assistant
/// does not make (the scripted agent calls only what a `CHAIN:` request lists): asked again
/// with the reason, a brief user asks the same, the others ask for something it can do.
fn rule_with_an_unserved_action(seen: &Seen) -> Answer {
    let t = seen.all_text();
    if t.contains("You play a user") && !t.contains("This is turn 1") {
        let tool = t.split("Your goal: use ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or("none");
        let told = t.contains("asked the assistant to acknowledge something, and it did not");
        let message = if told && !t.contains("mood: brief") {
            format!("CHAIN: {tool} (second ask, for X-1)")
        } else {
            "Please acknowledge alert X-1 right away".to_string()
        };
        return Answer::json(json!({"message": message, "done": false}));
    }
    rule(seen)
}

/// [`rule`], with an assistant whose first answer of a dialogue claims a restart no call
/// made (a test double).
fn rule_with_a_wrong_first_answer(seen: &Seen) -> Answer {
    if seen.body.get("tools").is_some() {
        let msgs = seen.body["messages"].as_array().unwrap();
        let users = msgs.iter().filter(|m| m["role"] == "user").count();
        if let Answer::Content(_) = rule(seen)
            && users == 1
        {
            return Answer::text("I restarted the checkout service for you.");
        }
    }
    rule(seen)
}

#[test]
fn a_turn_answer_claiming_what_its_calls_did_not_do_is_asked_again_before_the_next_turn() {
    let sp = synth_project_with(&[], rule_with_a_wrong_first_answer);
    sp.ok(&["run", "--until", "synth-roleplay"]);
    let dialogues = sp.jsonl("artifacts/synth-roleplay/dialogues.jsonl");
    assert!(!dialogues.is_empty());
    for d in &dialogues {
        let turns = d["turns"].as_array().unwrap();
        // The second answer ("Done as asked.", from the re-ask's prompt) replaced the first.
        assert_eq!(turns[0]["answer"], "Done as asked.", "{d}");
        let why = turns[0]["answer_asked_again"].as_str().unwrap_or_else(|| panic!("no reason: {d}"));
        assert!(why.contains("restarted"), "{why}");
        assert!(turns.iter().skip(1).all(|t| t.get("answer_asked_again").is_none()), "{d}");
    }
    // The next turn was played on the corrected conversation: no agent request after the
    // re-ask shows the wrong answer.
    let requests = sp.llm.requests();
    let reask = requests.iter().position(|r| r.all_text().contains("Your earlier reply was wrong")).unwrap();
    let told = requests[reask].all_text();
    assert!(told.contains("Your earlier reply was wrong, because it") && told.contains("restart"), "{told}");
    let later: Vec<&Seen> = requests
        .iter()
        .filter(|r| r.body.get("tools").is_some())
        .filter(|r| r.body["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "user").count() > 1)
        .collect();
    assert!(!later.is_empty());
    for r in later {
        let text = r.all_text();
        assert!(!text.contains("I restarted") && text.contains("Done as asked."), "{text}");
    }
    let report = sp.read("artifacts/synth-roleplay/report.md");
    assert!(report.contains("## Answers asked again") && report.contains("turn 1: it"), "{report}");
}

#[test]
fn a_user_turn_asking_for_an_action_the_assistant_does_not_take_is_asked_again_then_ends_the_dialogue() {
    let sp = synth_project_with(&[("dialogues = 2", "dialogues = 6")], rule_with_an_unserved_action);
    sp.ok(&["run"]);
    let dialogues = sp.jsonl("artifacts/synth-roleplay/dialogues.jsonl");
    let (mut ended, mut asked_anew) = (0, 0);
    for d in &dialogues {
        let users: Vec<&str> = d["turns"].as_array().unwrap().iter().map(|t| t["user"].as_str().unwrap()).collect();
        if d["persona"]["mood"] == "brief" {
            assert_eq!(d["ended"], "no_action", "{d}");
            assert_eq!(users.len(), 1, "the unserved turn is not kept: {d}");
            ended += 1;
        } else {
            assert_eq!(users.len(), 2, "{d}");
            assert!(users[1].contains("second ask"), "asked again with the reason: {d}");
            asked_anew += 1;
        }
    }
    assert!(ended > 0 && asked_anew > 0, "both kinds of user occur: {dialogues:?}");
}

#[test]
fn a_released_chain_s_lineage_reaches_its_sources_and_records_the_left_out_calls() {
    // The log track with synthesis, an agent that makes extra calls, released unreviewed.
    let sp = synth_project_with(&[("dialogues = 2", "dialogues = 0")], rule_with_extra_calls);
    let cfg = sp.p.read("pipeline/demo.toml");
    sp.p.write(
        "pipeline/demo.toml",
        format!("{cfg}\n[release]\nname = \"it-chains\"\nversion = \"0.1.0\"\nrequire_review = false\n"),
    );
    sp.ok(&["run"]);
    let rel = sp.p.path("release/it-chains-0.1.0");
    let lineage: Vec<Value> = std::fs::read_to_string(rel.join("lineage.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let chains: Vec<&Value> = lineage.iter().filter(|l| l["id"].as_str().unwrap().starts_with("chain-")).collect();
    assert!(!chains.is_empty(), "a chain is released: {lineage:?}");
    for line in chains {
        let stages: BTreeSet<&str> =
            line["events"].as_array().unwrap().iter().filter_map(|e| e["stage"].as_str()).collect();
        for want in [
            "logs-import",
            "logs-curate",
            "logs-split",
            "graph-build",
            "synth-chains",
            "execute",
            "validate",
            "release",
        ] {
            assert!(stages.contains(want), "`{}` lacks `{want}`: {stages:?}", line["id"]);
        }
        let kinds: Vec<&str> = line["events"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
        for want in [
            "logs.session",
            "logs.decision",
            "logs.split",
            "synth.chain",
            "mcp.call",
            "execute.trajectory",
            "validate.verdict",
        ] {
            assert!(kinds.contains(&want), "`{}` lacks a `{want}` event: {kinds:?}", line["id"]);
        }
        // The needed-call check's exchange is a parent of the verdict, so it is in the lineage.
        let validate_exchanges = line["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["stage"] == "validate" && e["kind"] == "llm.exchange")
            .count();
        assert!(validate_exchanges >= 1, "`{}`: {:?}", line["id"], line["events"]);
    }
    // The released sample keeps the left-out calls as recorded responses, marked.
    let samples = std::fs::read_to_string(rel.join("samples.jsonl")).unwrap();
    assert!(samples.contains("\"left_out\":\"unrequested: "), "{samples}");
    let o = sp.run(&["release", "verify", rel.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", crate::support::stderr(&o));
}

/// [`rule`], with a goal of two planned requests: the scripted agent calls a tool for the
/// first at once and answers the second without a call until reminded that it needs a
/// tool, except for a brief user's, which says "never" (the agent then never calls).
fn rule_with_planned_requests(seen: &Seen) -> Answer {
    let t = seen.all_text();
    if t.contains("Write this user's goal") {
        // A sloppy user's plan asks the same thing twice.
        let second = if t.contains("mood: brief") {
            "Please look X-1 up, never mind how"
        } else if t.contains("mood: sloppy") {
            "please find x-1"
        } else {
            "Please look X-1 up"
        };
        return Answer::json(json!({"goal": "look into X-1", "requests": ["Please find X-1", second]}));
    }
    if seen.body.get("tools").is_some() {
        let msgs = seen.body["messages"].as_array().unwrap();
        let last_user = msgs.iter().rposition(|m| m["role"] == "user").unwrap();
        let user = msgs[last_user]["content"].as_str().unwrap_or_default();
        if user.starts_with("Please find X-1") || user.starts_with("Please look X-1 up") {
            let called = msgs[last_user..].iter().any(|m| m["role"] == "tool");
            let tool = "get_alerts".to_string();
            // The first request is looked up at once, and then the assistant goes on to an
            // action nobody asked for: withheld, it is nudged to answer instead.
            if user.starts_with("Please find") && called {
                let nudged = msgs.last().is_some_and(|m| m["role"] == "system");
                return match nudged {
                    false => Answer::ToolCalls(vec![("acknowledge_alert".into(), json!({"alert_id": "X-1"}))]),
                    true => Answer::text("Found X-1."),
                };
            }
            // A brief user's second request gets the same action, withheld on each try.
            if user.contains("never mind") && msgs.last().is_some_and(|m| m["role"] == "user") {
                return Answer::ToolCalls(vec![("acknowledge_alert".into(), json!({"alert_id": "X-1"}))]);
            }
            // The second is done only when reminded.
            let hinted = user.contains(benchgen::synth::roleplay::PLANNED_HINT) && !user.contains("never");
            return match (user.starts_with("Please find") || hinted) && !called {
                true => Answer::ToolCalls(vec![(tool.clone(), fill(seen, &tool))]),
                false => Answer::text("Done."),
            };
        }
    }
    rule(seen)
}

#[test]
fn planned_user_turns_are_the_goal_s_requests_and_an_undone_one_is_retried_with_a_hint() {
    // A turn cap above the plan's length: the plan ends the dialogue before the cap.
    planned_user_turns(3);
}

#[test]
fn a_planned_dialogue_as_long_as_its_turn_cap_ends_by_its_plan() {
    planned_user_turns(2);
}

fn planned_user_turns(turn_cap: usize) {
    let sp = synth_project_with(
        &[
            ("dialogues = 2", "dialogues = 6"),
            ("turn_cap = 2", &format!("turn_cap = {turn_cap}\nuser_turns = \"planned\"")),
        ],
        rule_with_planned_requests,
    );
    sp.ok(&["run", "--until", "synth-roleplay"]);
    // No user simulator: the messages are the plan's.
    assert!(!sp.llm.requests().iter().any(|r| r.all_text().contains("You play a user")));
    let dialogues = sp.jsonl("artifacts/synth-roleplay/dialogues.jsonl");
    let (mut planned, mut undone, mut repeated) = (0, 0, 0);
    for d in &dialogues {
        let requests: Vec<&str> = d["requests"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
        let turns = d["turns"].as_array().unwrap();
        let users: Vec<&str> = turns.iter().map(|t| t["user"].as_str().unwrap()).collect();
        assert_eq!(users[..], requests[..users.len()], "the user's messages are the plan's requests: {d}");
        assert!(turns[0].get("hint").is_none(), "the first request was done at once: {d}");
        // The action the first request did not ask for was withheld: not run, recorded.
        assert_eq!(turns[0]["groups"].as_array().unwrap().len(), 1, "{d}");
        assert_eq!(turns[0]["groups"][0][0]["tool"], "get_alerts", "{d}");
        assert_eq!(turns[0]["answer"], "Found X-1.", "{d}");
        let withheld = turns[0]["withheld"].as_array().expect("the withheld call is recorded");
        assert_eq!(withheld.len(), 1, "{d}");
        assert_eq!(withheld[0]["function"], "acknowledge_alert", "{d}");
        assert_eq!(
            withheld[0]["reason"], "`acknowledge_alert` is an action (acknowledge) the request does not ask for",
            "{d}"
        );
        if d["persona"]["mood"] == "brief" {
            // Not done even when reminded: the dialogue ends before it. The action its tries
            // asked for was withheld each time, and is recorded with the dialogue.
            assert_eq!((users.len(), d["ended"].as_str().unwrap()), (1, "no_action"), "{d}");
            let dropped = d["withheld_in_dropped_tries"].as_array().expect("recorded");
            assert_eq!(dropped.len(), 2, "{d}");
            assert!(dropped.iter().all(|w| w[0] == 2 && w[1]["function"] == "acknowledge_alert"), "{d}");
            undone += 1;
        } else if d["persona"]["mood"] == "sloppy" {
            // A planned request that repeats an earlier turn is not sent.
            assert_eq!((users.len(), d["ended"].as_str().unwrap()), (1, "repeated"), "{d}");
            repeated += 1;
        } else {
            // Done when reminded; the reminder is recorded, not part of the conversation.
            assert_eq!((users.len(), d["ended"].as_str().unwrap()), (2, "plan"), "the plan ends it under the cap: {d}");
            assert_eq!(turns[1]["hint"], benchgen::synth::roleplay::PLANNED_HINT, "{d}");
            assert!(!users[1].contains("needs one of your tools"), "{d}");
            assert_eq!(turns[1]["groups"].as_array().unwrap().len(), 1, "{d}");
            planned += 1;
        }
    }
    assert!(planned > 0 && undone > 0 && repeated > 0, "every kind of user occurs: {dialogues:?}");
    // The hints are in the dialogues' lineage: their `synth.dialogue` events (turn 2 each).
    let events = crate::support::ledger_events(&sp.p.path("artifacts"), "synth.dialogue");
    let hinted: Vec<&Value> = events.iter().filter_map(|e| e.get("hints")).collect();
    assert_eq!(hinted.len(), planned, "one event with hints per hinted dialogue: {events:?}");
    for h in hinted {
        assert_eq!(h, &json!([{"turn": 2, "hint": benchgen::synth::roleplay::PLANNED_HINT}]));
    }
    // So are the withheld calls, which no `mcp.call` event holds.
    for e in &events {
        assert_eq!(e["withheld"][0]["turn"], 1, "{e}");
        assert_eq!(e["withheld"][0]["call"]["function"], "acknowledge_alert", "{e}");
    }
    let dropped: Vec<&Value> = events.iter().filter_map(|e| e.get("withheld_in_dropped_tries")).collect();
    assert_eq!(dropped.len(), undone, "{events:?}");
    assert!(dropped.iter().all(|w| w[1]["turn"] == 2), "{dropped:?}");
    let calls = crate::support::ledger_events(&sp.p.path("artifacts"), "mcp.call");
    assert!(calls.iter().all(|c| !c.to_string().contains("acknowledge_alert")), "{calls:?}");
    // The second request went to the assistant twice: plainly, then with the reminder.
    let agent: Vec<Seen> = sp.llm.requests().into_iter().filter(|r| r.body.get("tools").is_some()).collect();
    let last_user = |r: &Seen| {
        let msgs = r.body["messages"].as_array().unwrap().clone();
        msgs.iter().rev().find(|m| m["role"] == "user").unwrap()["content"].as_str().unwrap().to_string()
    };
    let seconds: Vec<String> = agent.iter().map(last_user).filter(|u| u.starts_with("Please look X-1 up")).collect();
    assert!(seconds.iter().any(|u| !u.contains(benchgen::synth::roleplay::PLANNED_HINT)), "{seconds:?}");
    assert!(seconds.iter().any(|u| u.contains(benchgen::synth::roleplay::PLANNED_HINT)), "{seconds:?}");
}

/// [`rule`], with a judge that finds no call needed: every chain step without evidence is
/// decided by it (the scripted agent's answer quotes no result, and its arguments come from
/// the request).
fn rule_with_a_judge_needing_nothing(seen: &Seen) -> Answer {
    if seen.all_text().contains("Does doing what the user asked need this call?") {
        return Answer::json(json!({"needed": false, "reason": "scripted: the request asks for none of it"}));
    }
    rule(seen)
}

#[test]
fn a_chain_step_the_request_does_not_need_rejects_the_chain() {
    let sp = synth_project_with(&[("dialogues = 2", "dialogues = 0")], rule_with_a_judge_needing_nothing);
    sp.ok(&["run", "--until", "validate"]);
    let verdicts = sp.jsonl("artifacts/validate/verdicts.jsonl");
    let chains: Vec<&Value> = verdicts.iter().filter(|v| v["source"] == "chain").collect();
    assert!(!chains.is_empty());
    for v in chains {
        assert_eq!(v["accepted"], false, "{v}");
        let reasons = v["reasons"].to_string();
        assert!(
            reasons.contains(
                "a step of the sampled chain, is not needed by the request: scripted: the request asks for none of it"
            ),
            "{v}"
        );
        // Decided by the LLM check, and recorded so.
        let calls = v["calls"].as_array().unwrap();
        assert!(calls.iter().any(|c| c["by"] == "llm" && c["decision"] == "unrequested"), "{v}");
    }
}
