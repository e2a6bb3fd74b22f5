//! `benchgen eval` on a release made from the hand-made pool of `tests/it/release.rs`
//! (ETOM L1–L5 and FinMCP single-tool, multi-tool and multi-turn samples), with a panel of
//! scripted agents of known ability behind the scripted endpoint (TEST DOUBLE):
//!
//! - `oracle` calls the reference plan, group by group, with the recorded arguments;
//! - `noisy` does the same but drops the last call of four chosen items;
//! - `none` calls no tool.
//!
//! Offered exactly `search_tools` and `call_tool` (the `full` tool space), the two
//! tool-calling agents first search with the user message, then make the same calls through
//! `call_tool`.
//!
//! On `L1-1` (reference `Alpha::x`) the two tool-calling agents were told the right tool is
//! `Beta::u` (its EFS sibling): the planted wrong ground truth, which the item analysis must
//! flag `all-fail` naming `Beta::u`, and no other item. `two_planted_rule` plants a second
//! one, on the L2 item `L2-1`: the agents take its request to mean `Alpha::z`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::support::scripted_llm::{Answer, ScriptedLlm, Seen};
use crate::support::{Project, assert_code, stderr, tree};

const CONFIG: &str = "pipeline/release.toml";

/// User message → the reference plan's groups of (tool id, arguments) that the oracle calls.
fn plans() -> BTreeMap<&'static str, Vec<Vec<(&'static str, Value)>>> {
    let acme = || json!({"symbol": "ACME"});
    BTreeMap::from([
        ("On Alpha, run x.", vec![vec![("Beta::u", json!({}))]]), // planted: the gold says Alpha::x
        ("Do the x thing.", vec![vec![("Alpha::x", json!({}))]]),
        ("x then y.", vec![vec![("Alpha::x", json!({}))], vec![("Alpha::y", json!({}))]]),
        ("z, then v or y with it.", vec![vec![("Alpha::z", json!({}))], vec![("Beta::v", json!({}))]]),
        ("Pause my music.", vec![]),
        ("Quote for ACME?", vec![vec![("get_quote", acme())]]),
        (
            "Quote and news for ACME, then in EUR.",
            vec![vec![("get_quote", acme()), ("get_news", acme())], vec![("get_fx", acme())]],
        ),
        ("Quote ACME.", vec![vec![("get_quote", acme())]]),
        ("And news?", vec![vec![("get_news", acme())]]),
    ])
}

/// The items whose last call the noisy oracle drops.
const NOISY: &[&str] = &["Do the x thing.", "z, then v or y with it.", "Quote for ACME?", "And news?"];

/// The OpenAI function name the agent gives a tool id (`::` → `__`).
fn fname(id: &str) -> String {
    id.replace("::", "__")
}

/// Tool-call messages since the last user message.
fn groups_done(seen: &Seen) -> usize {
    let msgs = seen.body["messages"].as_array().cloned().unwrap_or_default();
    let last_user = msgs.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
    msgs[last_user..].iter().filter(|m| m["role"] == "assistant" && m["tool_calls"].is_array()).count()
}

/// The request offers exactly the `full` space's two tools.
fn full_space(seen: &Seen) -> bool {
    let tools = seen.body["tools"].as_array().cloned().unwrap_or_default();
    let names: BTreeSet<&str> = tools.iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    names == BTreeSet::from(["call_tool", "search_tools"])
}

pub(crate) fn agent_rule(seen: &Seen) -> Answer {
    scripted(seen, &plans(), NOISY)
}

/// The items the noisy oracle damages under [`two_planted_rule`]: those of [`NOISY`] with
/// `L3-1` ("x then y.") in place of the planted `L2-1`, which it answers as the oracle does.
const NOISY_BESIDES_L2: &[&str] = &["x then y.", "z, then v or y with it.", "Quote for ACME?", "And news?"];

/// [`agent_rule`] with a second planted wrong item: on `L2-1` ("Do the x thing.", gold
/// `Alpha::x` or its EFS sibling `Beta::u`) the tool-calling agents were told the request
/// means `Alpha::z`, a tool outside the gold step's EFS set that the `standard` space offers.
fn two_planted_rule(seen: &Seen) -> Answer {
    let mut plans = plans();
    plans.insert("Do the x thing.", vec![vec![("Alpha::z", json!({}))]]);
    scripted(seen, &plans, NOISY_BESIDES_L2)
}

/// [`agent_rule`] with the panel's evidence of each kind `[release] decide_flagged =
/// "evidence"` reads, in the `standard` space (every registry tool offered): on `L1-1`
/// (planted) two agents agree on `Beta::u`, the EFS sibling of its `Alpha::x`; on `L3-1` ("x
/// then y.") the oracle adds `Alpha::z` and the noisy agent calls `Beta::v`, so only the
/// oracle's calls cover the reference; on `L4-1` ("z, then v or y with it.") both call
/// `Alpha::x`, a tool of no reference tool's EFS set.
fn evidence_rule(seen: &Seen) -> Answer {
    let mut plans = plans();
    let unit = |t: &'static str| vec![(t, json!({}))];
    plans.insert("z, then v or y with it.", vec![unit("Alpha::x")]);
    match seen.body["model"].as_str().unwrap_or_default() {
        "oracle" => {
            plans.insert("x then y.", vec![unit("Alpha::x"), unit("Alpha::y"), unit("Alpha::z")]);
        }
        "noisy" => {
            plans.insert("x then y.", vec![unit("Beta::v")]);
        }
        _ => {}
    }
    let noisy: Vec<&str> = NOISY.iter().copied().filter(|q| *q != "z, then v or y with it.").collect();
    scripted(seen, &plans, &noisy)
}

/// The scripted panel: each agent answers the request from `plans` (by its user message),
/// `noisy` dropping the last call of the requests in `noisy`, `none` calling nothing.
fn scripted(seen: &Seen, plans: &BTreeMap<&str, Vec<Vec<(&str, Value)>>>, noisy: &[&str]) -> Answer {
    let model = seen.body["model"].as_str().unwrap_or_default().to_string();
    let user = seen.last_user();
    let Some(plan) = plans.get(user.as_str()).cloned() else {
        return Answer::text(&format!("unknown query: {user}"));
    };
    let plan = match model.as_str() {
        "none" => Vec::new(),
        "noisy" if noisy.contains(&user.as_str()) => {
            let mut p = plan;
            if let Some(last) = p.last_mut() {
                last.pop();
                if last.is_empty() {
                    p.pop();
                }
            }
            p
        }
        _ => plan,
    };
    let done = groups_done(seen);
    if full_space(seen) {
        // A search with the request first (not by `none`, which calls nothing), then each
        // group of the plan through `call_tool`.
        if done == 0 && model != "none" {
            return Answer::ToolCalls(vec![("search_tools".to_string(), json!({"query": user}))]);
        }
        let through = |(t, a): &(&str, Value)| ("call_tool".to_string(), json!({"name": fname(t), "arguments": a}));
        return match plan.get(done.saturating_sub(1)) {
            Some(group) => Answer::ToolCalls(group.iter().map(through).collect()),
            None => Answer::text("Done."),
        };
    }
    match plan.get(done) {
        Some(group) => Answer::ToolCalls(group.iter().map(|(t, a)| (fname(t), a.clone())).collect()),
        None => Answer::text("Done."),
    }
}

fn eval_config(llm: &ScriptedLlm, extra: &str) -> String {
    let mut s = String::new();
    for (role, model) in [("oracle", "oracle"), ("noisy", "noisy"), ("none", "none")] {
        s.push_str(&format!(
            "[llm.roles.{role}]\nprovider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"{model}\"\ntemperature = 0.0\nseed = 1\nbackoff_ms = 20\n\n",
            llm.base_url()
        ));
    }
    s.push_str(&format!("[eval]\nagents = [\"none\", \"noisy\", \"oracle\"]\n{extra}\n"));
    s
}

/// A released fixture project with `[eval]` added to its config and its release candidate
/// built (what `eval` evaluates).
pub(crate) fn project(llm: &ScriptedLlm, extra: &str) -> Project {
    let p = crate::release::project("0.1.0");
    let o = crate::release::release(&p, &[]);
    assert_code(&o, 0);
    let cfg = p.read(CONFIG);
    p.write(CONFIG, format!("{cfg}\n{}", eval_config(llm, extra)));
    assert_code(&candidate(&p), 0);
    p
}

fn candidate(p: &Project) -> std::process::Output {
    p.run(&["--config", CONFIG, "release", "candidate"])
}

fn released_ids(p: &Project, version: &str) -> Vec<String> {
    p.read(&format!("release/it-bench-{version}/samples.jsonl"))
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_str().unwrap().to_string())
        .collect()
}

pub(crate) fn eval(p: &Project) -> std::process::Output {
    p.run(&["--config", CONFIG, "eval"])
}

fn leaderboard(p: &Project) -> Vec<Value> {
    serde_json::from_str(&p.read("artifacts/eval/leaderboard.json")).unwrap()
}

fn items(p: &Project) -> Vec<Value> {
    p.read("artifacts/eval/items.jsonl").lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn scripted_agents_rank_by_ability_and_the_planted_wrong_gold_is_flagged() {
    let llm = ScriptedLlm::start(agent_rule);
    let p = project(&llm, "");
    let o = eval(&p);
    assert_code(&o, 0);
    let rows = leaderboard(&p);
    let order: Vec<&str> = rows.iter().map(|r| r["agent"].as_str().unwrap()).collect();
    assert_eq!(order, ["oracle", "noisy", "none"], "{}", stderr(&o));
    let score = |a: &str| rows.iter().find(|r| r["agent"] == a).unwrap()["score"].as_f64().unwrap();
    // 8 released samples (fin-d was rejected): the oracle misses only the planted L1-1,
    // the noisy oracle also the four it damages, `none` solves only the L5 refusal.
    assert_eq!((score("oracle"), score("noisy"), score("none")), (7.0 / 8.0, 3.0 / 8.0, 1.0 / 8.0));
    for r in &rows {
        assert!((0.0..=1.0).contains(&r["score"].as_f64().unwrap()));
        assert_eq!(r["tool_space"], "oracle");
        assert_eq!(r["samples"], 8);
    }
    let oracle = rows.iter().find(|r| r["agent"] == "oracle").unwrap();
    assert_eq!(oracle["by_level"]["L1"]["score"], 0.0);
    for (k, c) in oracle["by_kind"].as_object().unwrap() {
        if k != "L1" {
            assert_eq!(c["score"], 1.0, "the oracle solves every {k} item");
        }
    }
    assert_eq!(oracle["pass_k"].as_f64().unwrap(), 7.0 / 8.0);
    assert!(oracle["tokens"]["prompt"].as_u64().unwrap() > 0);
    // The calls of fin-a/fin-b with the trajectory's arguments met their recordings.
    assert!(oracle["calls"]["recorded"].as_u64().unwrap() >= 4, "{}", oracle["calls"]);
    assert!(oracle["calls"]["generated"].as_u64().unwrap() >= 1, "{}", oracle["calls"]);

    let items = items(&p);
    assert_eq!(items.len(), 8);
    let all_fail: Vec<&Value> =
        items.iter().filter(|i| i["flags"].as_array().unwrap().contains(&json!("all-fail"))).collect();
    assert_eq!(all_fail.len(), 1, "{items:#?}");
    assert_eq!(all_fail[0]["id"], "L1-1");
    assert_eq!(all_fail[0]["solve_rate"], 0.0);
    let ev = &all_fail[0]["evidence"];
    assert_eq!(ev["agreed_tool"], "Beta::u");
    assert_eq!(ev["agreed_by"], json!(["noisy", "oracle"]));
    assert_eq!(ev["called"]["none"], json!([]));
    let l5 = items.iter().find(|i| i["id"] == "L5-1").unwrap();
    assert!(l5["flags"].as_array().unwrap().contains(&json!("all-pass")));
    let l3 = items.iter().find(|i| i["id"] == "L3-1").unwrap();
    assert_eq!(l3["solve_rate"].as_f64().unwrap(), 2.0 / 3.0);
    // The scripted abilities are nested (what `none` solves `noisy` solves, and what `noisy`
    // solves the oracle solves): every agent's total is extreme on the items that vary, so
    // no finite Rasch estimate exists, and none is given.
    assert!(l3.get("rasch").is_none(), "{l3}");
    assert!(l3["discrimination"].as_f64().unwrap() > 0.0, "{l3}");
    let report = p.read("artifacts/eval/report.md");
    assert!(report.contains("| 1 | `oracle` |") && report.contains("`all-fail` 1"), "{report}");
    // Each call says what it got.
    let runs = p.read("artifacts/eval/runs.jsonl");
    assert!(runs.contains("\"answer\":\"recorded\"") && runs.contains("\"answer\":\"generated\""));
}

/// `tool_space = "standard"` (issue 40): each sample's oracle space and every tool of the
/// `distractor_servers` other servers of its track nearest to its request that the oracle
/// space does not draw on. In the fixture only `L3-1` (`Alpha::x`, `Alpha::y`) leaves a
/// server of its track out: with one distractor its agents see Beta's tools too. L1, L2 and
/// L4 draw on both servers, L5 sees its whole track, and the FinMCP tools have no server
/// (one server, drawn on already). The scripted agents call what they called in the oracle
/// space, so the scores stand; a negative count and an unknown space are refused.
#[test]
fn the_standard_tool_space_adds_the_nearest_other_servers_of_the_track() {
    let llm = ScriptedLlm::start(agent_rule);
    let p = project(&llm, "tool_space = \"standard\"\ndistractor_servers = 1\n");
    let o = eval(&p);
    assert_code(&o, 0);
    let rows = leaderboard(&p);
    let scores: Vec<(&str, f64)> =
        rows.iter().map(|r| (r["agent"].as_str().unwrap(), r["score"].as_f64().unwrap())).collect();
    assert_eq!(scores, [("oracle", 7.0 / 8.0), ("noisy", 3.0 / 8.0), ("none", 1.0 / 8.0)], "{}", stderr(&o));
    for r in &rows {
        assert_eq!(r["tool_space"], "standard");
    }
    assert!(p.read("artifacts/eval/report.md").contains("Tool space `standard`"));

    // The functions each request offered, by its user message: the same for every agent,
    // turn and step.
    let mut offered: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for seen in llm.requests() {
        let tools = seen.body["tools"].as_array().cloned().unwrap_or_default();
        let names: BTreeSet<String> =
            tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_string()).collect();
        if let Some(before) = offered.insert(seen.last_user(), names) {
            assert_eq!(before, offered[&seen.last_user()], "{}", seen.last_user());
        }
    }
    let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<String>>();
    let all_etom = ["Alpha__x", "Alpha__y", "Alpha__z", "Beta__u", "Beta__v"];
    // Each request gets the oracle space plus the tools of one more candidate: a server of
    // its track with a tool not offered yet (Alpha or Beta; a server the oracle space draws
    // on offers its other tools), or one log-track tool (they have no server). The fixture's
    // descriptions ("does x") share no word with the requests, so the seeded order decides.
    let want = BTreeMap::from([
        ("x then y.", set(&["Alpha__x", "Alpha__y", "Beta__u", "Beta__v"])),
        ("On Alpha, run x.", set(&["Alpha__x", "Alpha__y", "Alpha__z", "Beta__u"])),
        ("Do the x thing.", set(&["Alpha__x", "Alpha__y", "Alpha__z", "Beta__u"])),
        ("z, then v or y with it.", set(&["Alpha__y", "Alpha__z", "Beta__u", "Beta__v"])),
        ("Pause my music.", set(&all_etom)),
        ("Quote for ACME?", set(&["get_fx", "get_quote"])),
        ("Quote and news for ACME, then in EUR.", set(&["get_fx", "get_news", "get_quote"])),
        ("Quote ACME.", set(&["get_fx", "get_news", "get_quote"])),
        ("And news?", set(&["get_fx", "get_news", "get_quote"])),
    ]);
    let want: BTreeMap<String, _> = want.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    assert_eq!(offered, want);
    for run in p.read("artifacts/eval/runs.jsonl").lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        if run["id"] == "L3-1" {
            assert_eq!(run["tools"], 4, "{run}");
        }
    }

    // Refused before anything runs: a negative count, naming the key; an unknown space,
    // listing the spaces there are.
    let cfg = p.read(CONFIG);
    p.write(CONFIG, cfg.replace("distractor_servers = 1", "distractor_servers = -1"));
    let o = p.run(&["--config", CONFIG, "check"]);
    assert_code(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("eval.distractor_servers") && err.contains("must be 0 or more"), "{err}");
    p.write(CONFIG, cfg.replace("tool_space = \"standard\"", "tool_space = \"everything\""));
    let o = p.run(&["--config", CONFIG, "check"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("unknown variant `everything`, expected one of `oracle`, `standard`, `full`"), "{err}");
}

/// The `all-fail` flag as evidence of wrong ground truth (issue 40): the three scripted
/// agents on the release in the `standard` space (the default three distractor servers,
/// which in the fixture offer every tool of a sample's track) with two planted wrong items.
/// `L1-1` ("On Alpha, run x.", gold `Alpha::x`): the tool-calling agents take the request
/// to mean `Beta::u`. `L2-1` ("Do the x thing.", gold `Alpha::x` or its EFS sibling
/// `Beta::u`): they take it to mean `Alpha::z`. The oracle solves every other item, the
/// noisy oracle damages four others (not `L2-1`), `none` solves only the L5 refusal: the
/// ranking is oracle > noisy > none, both planted items are flagged `all-fail` with the tool
/// the two agents agree on as evidence (on the L2 item proposed as a possible missing
/// member of its EFS set, in `items.jsonl` and in the review queue), and no other item is.
#[test]
fn in_the_standard_space_two_planted_wrong_items_are_flagged_with_the_tool_the_agents_agree_on() {
    let llm = ScriptedLlm::start(two_planted_rule);
    let p = project(&llm, "tool_space = \"standard\"\n");
    let o = eval(&p);
    assert_code(&o, 0);
    let rows = leaderboard(&p);
    let scores: Vec<(&str, f64)> =
        rows.iter().map(|r| (r["agent"].as_str().unwrap(), r["score"].as_f64().unwrap())).collect();
    assert_eq!(scores, [("oracle", 6.0 / 8.0), ("noisy", 2.0 / 8.0), ("none", 1.0 / 8.0)], "{}", stderr(&o));
    assert!(rows.iter().all(|r| r["tool_space"] == "standard"));
    // `L2-1`'s requests offered the whole registry track: `Alpha::z` was there to call.
    for seen in llm.requests().iter().filter(|s| s.last_user() == "Do the x thing.") {
        let tools = seen.body["tools"].as_array().cloned().unwrap_or_default();
        assert_eq!(tools.len(), 5, "{}", seen.body["tools"]);
    }

    let items = items(&p);
    assert!(items.iter().all(|i| i["tool_space"] == "standard"));
    let all_fail: BTreeMap<&str, &Value> = items
        .iter()
        .filter(|i| i["flags"].as_array().unwrap().contains(&json!("all-fail")))
        .map(|i| (i["id"].as_str().unwrap(), &i["evidence"]))
        .collect();
    assert_eq!(all_fail.keys().copied().collect::<Vec<_>>(), ["L1-1", "L2-1"], "{items:#?}");
    let l1 = all_fail["L1-1"];
    assert_eq!((&l1["agreed_tool"], &l1["agreed_by"]), (&json!("Beta::u"), &json!(["noisy", "oracle"])));
    assert!(l1.get("proposed_efs_member").is_none(), "{l1}");
    assert_eq!(l1["efs_sibling_of"], "Alpha::x", "{l1}");
    let l1_note = "`noisy`, `oracle` called `Beta::u` instead of the reference tools (`Alpha::x`): `Beta::u` is in the EFS set of the reference's `Alpha::x`, which is not among that call's alternatives; the request may not say which server to use";
    assert_eq!(l1["note"], l1_note);
    let l2 = all_fail["L2-1"];
    assert_eq!((&l2["agreed_tool"], &l2["agreed_by"]), (&json!("Alpha::z"), &json!(["noisy", "oracle"])));
    assert_eq!(l2["proposed_efs_member"], "Alpha::z");
    assert_eq!(l2["called"], json!({"noisy": ["Alpha::z"], "none": [], "oracle": ["Alpha::z"]}));
    let proposal = "`Alpha::z` is proposed as a possible missing member of the sample's EFS set";
    assert!(l2["note"].as_str().unwrap().ends_with(proposal), "{l2}");

    // The review queue: the two planted items, each with its evidence, and no other item
    // flagged `all-fail`.
    let sheet = p.read("artifacts/eval/review.csv");
    let failed: Vec<&str> =
        sheet.lines().filter(|l| l.split(',').nth(1).is_some_and(|f| f.contains("all-fail"))).collect();
    assert_eq!(failed.len(), 2, "{sheet}");
    assert!(failed[0].starts_with("L1-1,all-fail") && failed[0].contains(l1_note), "{sheet}");
    assert!(failed[1].starts_with("L2-1,all-fail") && failed[1].contains(proposal), "{sheet}");
    assert!(p.read("artifacts/eval/report.md").contains("`all-fail` 2"));
}

/// `tool_spaces` (issue 40): every agent runs every sample in each listed space, and one
/// report gives each agent's score, with its interval, per space: `leaderboard.json` holds a
/// row per space and agent (ranked and compared within its space), `report.md` a table of
/// every agent's score per space and each space's sections, `items.jsonl` a record per space
/// and sample, flagged from that space's runs, and the review queue one row per flagged item
/// naming each space that flagged it. The runs of an agent on a sample in two spaces are two
/// items (48 runs), and a rerun gives the same bytes. Both keys at once, or a space listed
/// twice, are refused.
#[test]
fn several_tool_spaces_give_every_agent_a_score_per_space_in_one_report() {
    let llm = ScriptedLlm::start(agent_rule);
    let p = project(&llm, "tool_spaces = [\"oracle\", \"full\"]\n");
    let o = eval(&p);
    assert_code(&o, 0);
    let rows = leaderboard(&p);
    let got: Vec<(&str, &str, u64, f64)> = rows
        .iter()
        .map(|r| {
            let (space, agent) = (r["tool_space"].as_str().unwrap(), r["agent"].as_str().unwrap());
            (space, agent, r["rank"].as_u64().unwrap(), r["score"].as_f64().unwrap())
        })
        .collect();
    let (a, b, c) = (7.0 / 8.0, 3.0 / 8.0, 1.0 / 8.0);
    let want = [
        ("oracle", "oracle", 1, a),
        ("oracle", "noisy", 2, b),
        ("oracle", "none", 3, c),
        ("full", "oracle", 1, a),
        ("full", "noisy", 2, b),
        ("full", "none", 3, c),
    ];
    assert_eq!(got, want, "{}", stderr(&o));
    for r in &rows {
        let (x, ci) = (r["score"].as_f64().unwrap(), &r["score_ci"]);
        assert!(ci[0].as_f64().unwrap() <= x && x <= ci[1].as_f64().unwrap(), "{r}");
    }
    // Pairs are compared within a space: three agents, three pairs in each.
    let pairs: Vec<usize> = rows.iter().map(|r| r["comparisons"].as_array().unwrap().len()).collect();
    assert_eq!(pairs, [2, 1, 0, 2, 1, 0]);
    let said = format!("{}{}", crate::support::stdout(&o), stderr(&o));
    assert!(said.contains("oracle in `full`: score 0.875"), "{said}");

    let report = p.read("artifacts/eval/report.md");
    assert!(report.contains("Tool spaces `oracle`, `full` (every agent runs in each;"), "{report}");
    assert!(report.contains("## Scores per tool space") && report.contains("| agent | model | `oracle` | `full` |"));
    let line = report.lines().find(|l| l.starts_with("| `oracle` | oracle |")).unwrap_or_else(|| panic!("{report}"));
    assert_eq!(line.matches("87.5 [").count(), 2, "{line}");
    assert_eq!(line.matches(", rank 1 |").count(), 2, "{line}");
    for space in ["oracle", "full"] {
        for section in ["Leaderboard", "Comparisons", "Items"] {
            assert!(report.contains(&format!("## {section} in tool space `{space}`")), "{section} {space}: {report}");
        }
    }

    // Each space flags from its own runs: the planted `L1-1` in both.
    let items = items(&p);
    assert_eq!(items.len(), 16);
    let flagged: Vec<(&str, &str)> = items
        .iter()
        .filter(|i| i["flags"].as_array().unwrap().contains(&json!("all-fail")))
        .map(|i| (i["tool_space"].as_str().unwrap(), i["id"].as_str().unwrap()))
        .collect();
    assert_eq!(flagged, [("oracle", "L1-1"), ("full", "L1-1")]);
    let sheet = p.read("artifacts/eval/review.csv");
    let l1: Vec<&str> = sheet.lines().filter(|l| l.starts_with("L1-1,")).collect();
    assert_eq!(l1.len(), 1, "one row per item: {sheet}");
    assert!(l1[0].starts_with("L1-1,all-fail label-mismatch,0.0000,"), "{sheet}");
    for space in ["oracle", "full"] {
        let named = format!("in `{space}`: all-fail label-mismatch: `noisy`, `oracle` called `Beta::u`");
        assert!(l1[0].contains(&named), "{sheet}");
    }

    let runs: Vec<Value> =
        p.read("artifacts/eval/runs.jsonl").lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 48);
    for space in ["oracle", "full"] {
        assert_eq!(runs.iter().filter(|r| r["tool_space"] == space).count(), 24);
        assert!(p.path(&format!("artifacts/eval/predictions/{space}/oracle/1/samples.jsonl")).exists());
    }

    // The same inputs, the same bytes.
    let strip = |mut t: BTreeMap<String, Vec<u8>>| {
        t.remove("manifest.json");
        t
    };
    let before = strip(tree(&p.path("artifacts/eval")));
    assert_code(&p.run(&["--config", CONFIG, "eval", "--force"]), 0);
    let after = strip(tree(&p.path("artifacts/eval")));
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
    for (k, v) in &before {
        assert!(v == &after[k], "`{k}` differs on a rerun");
    }

    let cfg = p.read(CONFIG);
    for (given, key, what) in [
        ("tool_space = \"oracle\"\ntool_spaces = [\"oracle\", \"full\"]", "eval.tool_spaces", "not both"),
        ("tool_spaces = [\"oracle\", \"full\", \"oracle\"]", "eval.tool_spaces[2]", "`oracle` is listed twice"),
    ] {
        p.write(CONFIG, cfg.replace("tool_spaces = [\"oracle\", \"full\"]", given));
        let o = p.run(&["--config", CONFIG, "check"]);
        assert_code(&o, 1);
        assert!(stderr(&o).contains(key) && stderr(&o).contains(what), "{}", stderr(&o));
    }
}

/// `tool_space = "full"` (issue 40): every released tool of the sample's track behind a tool
/// search. Every request offers exactly `search_tools` and `call_tool`; the scripted agents
/// search with the user message, then call the reference plan through `call_tool` (`none`
/// calls nothing). The runs record each `call_tool` call as a call of the tool it names and
/// each search as a search, not a call: so every agent scores what it scores in the oracle
/// space (the oracle's L5 refusal, after its search, is still a refusal).
#[test]
fn the_full_tool_space_searches_the_track_and_scores_the_tools_called_through_it() {
    let llm = ScriptedLlm::start(agent_rule);
    let p = project(&llm, "tool_space = \"full\"\n");
    let o = eval(&p);
    assert_code(&o, 0);
    let rows = leaderboard(&p);
    let scores: Vec<(&str, f64)> =
        rows.iter().map(|r| (r["agent"].as_str().unwrap(), r["score"].as_f64().unwrap())).collect();
    assert_eq!(scores, [("oracle", 7.0 / 8.0), ("noisy", 3.0 / 8.0), ("none", 1.0 / 8.0)], "{}", stderr(&o));
    for r in &rows {
        assert_eq!(r["tool_space"], "full");
    }
    let oracle = rows.iter().find(|r| r["agent"] == "oracle").unwrap();
    // Calls through `call_tool` meet the cassette's recordings as direct calls do.
    assert!(oracle["calls"]["recorded"].as_u64().unwrap() >= 4, "{}", oracle["calls"]);
    assert!(p.read("artifacts/eval/report.md").contains("Tool space `full`"));

    // Every request offered exactly the two tools, and every call in it, the gold history of
    // earlier turns included, is a call of one of them.
    let meta = BTreeSet::from(["call_tool", "search_tools"]);
    let mut gold_through_call_tool = false;
    for seen in llm.requests() {
        let tools = seen.body["tools"].as_array().cloned().unwrap_or_default();
        let names: BTreeSet<&str> = tools.iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, meta, "{}", seen.last_user());
        for c in seen.body["messages"].as_array().unwrap().iter().flat_map(|m| m["tool_calls"].as_array()).flatten() {
            let name = c["function"]["name"].as_str().unwrap();
            assert!(meta.contains(name), "{c}");
            let args: Value = serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
            gold_through_call_tool |= c["id"].as_str().unwrap().starts_with("gold_") && args["name"] == "get_quote";
        }
    }
    assert!(gold_through_call_tool, "the multi-turn sample's second turn shows its first turn's gold call");

    // runs.jsonl: one search per turn of the two tool-calling agents, with the turn's user
    // message, before the calls, which name the tools.
    let samples = p.read("artifacts/release-candidate/samples.jsonl");
    let users: BTreeMap<String, Vec<String>> = samples
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|s| {
            let turns = s["turns"].as_array().unwrap().iter().map(|t| t["user"].as_str().unwrap().to_string());
            (s["id"].as_str().unwrap().to_string(), turns.collect())
        })
        .collect();
    let runs: Vec<Value> =
        p.read("artifacts/eval/runs.jsonl").lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 24);
    for run in &runs {
        let turns = run["turns"].as_array().unwrap();
        let id = run["id"].as_str().unwrap();
        // Behind the search: the whole track (the registry's five tools; the logs' three or more).
        let behind = run["tools"].as_u64().unwrap();
        assert!(if id.starts_with('L') { behind == 5 } else { behind >= 3 }, "{run}");
        if run["agent"] == "none" {
            assert!(run.get("searches").is_none(), "{run}");
            continue;
        }
        assert_eq!(run["searches"].as_u64(), Some(turns.len() as u64), "{run}");
        for (t, user) in turns.iter().zip(&users[id]) {
            let searches = t["searches"].as_array().unwrap();
            assert_eq!(searches.len(), 1, "{run}");
            assert_eq!((&searches[0]["group"], &searches[0]["arguments"]["query"]), (&json!(0), &json!(user)));
            let found = searches[0]["found"].as_array().unwrap();
            assert!(!found.is_empty() && found.len() <= 5, "{run}");
            for c in t["calls"].as_array().unwrap() {
                assert!(c["offered"] == true && !meta.contains(c["tool"].as_str().unwrap()), "{run}");
                assert!(c["group"].as_u64().unwrap() >= 1, "{run}");
            }
        }
        if id == "L3-1" && run["agent"] == "oracle" {
            let calls = turns[0]["calls"].as_array().unwrap();
            let called: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
            assert_eq!(called, ["Alpha::x", "Alpha::y"], "{run}");
        }
    }
    // The predictions name the tools, never the two meta-tools; the L5 refusal stays one.
    let pred = p.read("artifacts/eval/predictions/oracle/1/samples.jsonl");
    assert!(!pred.contains("call_tool") && !pred.contains("search_tools"), "{pred}");
    assert!(pred.contains(&json!({"id": "L5-1", "refusal": true}).to_string()), "{pred}");

    // The config accepts the space (`check` passes).
    assert_code(&p.run(&["--config", CONFIG, "check"]), 0);
}

#[test]
fn a_reference_ranking_gives_kendall_tau_against_the_panel() {
    let llm = ScriptedLlm::start(agent_rule);
    // The panel ranks oracle > noisy > none (7/8, 3/8, 1/8): the reference swaps the last two.
    let p = project(&llm, "reference_ranking = { oracle = 60.0, noisy = 40.0, none = 45.0 }");
    let o = eval(&p);
    assert_code(&o, 0);
    let v: Value = serde_json::from_str(&p.read("artifacts/eval/validity.json")).unwrap();
    assert_eq!(v["n"], 3);
    assert_eq!((v["concordant"].as_u64(), v["discordant"].as_u64()), (Some(2), Some(1)));
    assert!((v["tau_b"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-12, "{v}");
    // Exact null distribution of 3 agents: 2 · P(≤ 1 inversion) = 2 · 3/6.
    assert_eq!(v["method"], "exact");
    assert_eq!(v["p_value"].as_f64().unwrap(), 1.0);
    assert_eq!(v["agents"][0], json!({"agent": "noisy", "panel_score": 0.375, "reference_score": 40.0}));
    let report = p.read("artifacts/eval/report.md");
    assert!(report.contains("## Validity") && report.contains("τ-b = 0.333 over 3 agents"), "{report}");
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(said.contains("Kendall's tau-b 0.333"), "{said}");

    // A reference naming an agent that is not on the panel, or only one agent, is refused
    // before anything runs, naming the key.
    for (extra, key, what) in [
        ("reference_ranking = { oracle = 60.0, gpt = 40.0 }", "eval.reference_ranking.gpt", "is not on the panel"),
        ("reference_ranking = { oracle = 60.0 }", "eval.reference_ranking", "at least two agents"),
    ] {
        let q = project(&llm, extra);
        let o = q.run(&["--config", CONFIG, "check"]);
        assert_code(&o, 1);
        assert!(stderr(&o).contains(key) && stderr(&o).contains(what), "{}", stderr(&o));
        assert!(!q.path("artifacts/eval").exists());
    }
}

fn score_json(p: &Project, args: &[&str]) -> Value {
    let mut a = vec!["--json", "score"];
    a.extend_from_slice(args);
    let o = p.run(&a);
    assert_code(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

fn overall(rep: &Value) -> Value {
    let s = rep["sections"].as_array().unwrap().iter().find(|s| s["dimension"] == "overall").unwrap();
    s["rows"][0].clone()
}

#[test]
fn predictions_are_read_by_benchgen_score_in_both_formats_and_agree_with_the_leaderboard() {
    let llm = ScriptedLlm::start(agent_rule);
    let p = project(&llm, "");
    assert_code(&eval(&p), 0);
    let rel = "release/it-bench-0.1.0";
    let levels: Vec<String> = (1..=5).map(|l| format!("{rel}/level_{l}.json")).collect();
    let fins: Vec<String> =
        ["single_tool", "multi_tool", "multi_turn"].iter().map(|k| format!("{rel}/finmcp_{k}.json")).collect();
    for row in leaderboard(&p) {
        let agent = row["agent"].as_str().unwrap();
        let dir = format!("artifacts/eval/predictions/{agent}/1");
        let figures = &row["repeats_scored"][0];
        let check = |rep: &Value, want: &Value, what: &str| {
            assert_eq!(rep["diagnostics"], json!([]), "{agent} {what}");
            let o = overall(rep);
            assert_eq!(o["n"], want["n"], "{agent} {what}");
            assert!((o["em"].as_f64().unwrap() - want["em"].as_f64().unwrap()).abs() < 1e-12, "{agent} {what}");
        };
        let samples = format!("{rel}/samples.jsonl");
        let pred = format!("{dir}/samples.jsonl");
        let rep = score_json(&p, &["--bench", &samples, "--pred", &pred]);
        check(&rep, &figures["corrected"], "corrected");
        assert!((overall(&rep)["em"].as_f64().unwrap() - row["score"].as_f64().unwrap()).abs() < 1e-12);
        let mut a = vec!["--compat", "etom"];
        for l in &levels {
            a.extend(["--bench", l.as_str()]);
        }
        let pred = format!("{dir}/etom.jsonl");
        a.extend(["--pred", pred.as_str()]);
        let rep = score_json(&p, &a);
        assert_eq!(rep["diagnostics"], json!([]), "{agent} compat etom");
        let levels = rep["sections"].as_array().unwrap().iter().find(|s| s["dimension"] == "level").unwrap();
        let got: BTreeMap<String, (u64, f64)> = levels["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["key"].as_str().unwrap().to_string(), (r["n"].as_u64().unwrap(), r["em"].as_f64().unwrap())))
            .collect();
        let want: BTreeMap<String, (u64, f64)> = figures["compat_etom"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, f)| (k.clone(), (f["n"].as_u64().unwrap(), f["em"].as_f64().unwrap())))
            .collect();
        assert_eq!(got, want, "{agent} compat etom");
        assert_eq!(got.len(), 5, "every ETOM level is scored");
        let mut a = vec!["--compat", "finmcp"];
        for f in &fins {
            a.extend(["--bench", f.as_str()]);
        }
        let pred = format!("{dir}/finmcp.json");
        a.extend(["--pred", pred.as_str()]);
        check(&score_json(&p, &a), &figures["compat_finmcp"], "compat finmcp");
    }
}

#[test]
fn a_killed_eval_resumes_without_asking_again_and_gives_the_same_bytes() {
    // One scripted server for both projects: the exchange keys (and so the artifacts that
    // name exchanges) hold the endpoint, which must be the same for the bytes to agree.
    let llm = ScriptedLlm::start(agent_rule);
    let whole = project(&llm, "concurrency = 1\nrepeats = 2\n");
    assert_code(&eval(&whole), 0);
    let whole_n = llm.count();

    let p = project(&llm, "concurrency = 1\nrepeats = 2\n");
    let o = p.cmd().args(["--config", CONFIG, "eval"]).env("BENCHGEN_FAIL_AT", "eval_run:20").output().unwrap();
    assert_ne!(o.status.code(), Some(0), "the fail point stops the first run");
    assert!(!p.path("artifacts/eval/leaderboard.json").exists());
    let before = llm.count() - whole_n;
    assert!(before > 0);
    let o = eval(&p);
    assert_code(&o, 0);
    let said = format!("{}{}", crate::support::stdout(&o), stderr(&o));
    assert!(said.contains("resumed"), "{said}");
    assert_eq!(llm.count() - whole_n, whole_n, "the resumed run asked only what the killed one had not");
    let strip = |mut t: BTreeMap<String, Vec<u8>>| {
        t.remove("manifest.json");
        t
    };
    let (a, b) = (strip(tree(&whole.path("artifacts/eval"))), strip(tree(&p.path("artifacts/eval"))));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, v) in &a {
        assert!(v == &b[k], "`{k}` differs after kill and resume");
    }
    // Repeat 2 asked with its own seed: its requests are not the first repeat's.
    let seeds: BTreeSet<String> = llm.requests().iter().map(|r| r.body["seed"].to_string()).collect();
    assert_eq!(seeds.into_iter().collect::<Vec<_>>(), ["1", "2"]);
}

#[test]
fn the_eval_turn_limit_replaces_each_agents_own_in_every_request_beside_the_repeat_seed() {
    // Every agent role has a limit of its own, which the eval's replaces.
    let with_role_limit = |p: &Project| {
        let cfg = p.read(CONFIG);
        p.write(CONFIG, cfg.replace("seed = 1\n", "seed = 1\nmax_tokens = 300\n"));
    };
    // The `none` agent's every answer stops at the limit: the stage says so, for it alone.
    let cut_for_none = |seen: &Seen| match seen.body["model"].as_str() {
        Some("none") => Answer::Raw(
            json!({"id": "x", "object": "chat.completion", "created": 0, "model": "none",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "I cannot do th"},
                "finish_reason": "length"}], "usage": {"prompt_tokens": 9, "completion_tokens": 64}})
            .to_string(),
        ),
        _ => agent_rule(seen),
    };
    let llm = ScriptedLlm::start(cut_for_none);
    let p = project(&llm, "concurrency = 1\nrepeats = 2\nmax_tokens = 64\n");
    with_role_limit(&p);
    let o = eval(&p);
    assert_code(&o, 0);
    let said = crate::support::stdout(&o);
    let samples = released_ids(&p, "0.1.0").len();
    // Every run of `none` (two repeats of each sample) has a cut turn; a dialogue has several.
    let want = format!(
        "model turn(s) in {} run(s) stopped at the completion-token limit (`[eval] max_tokens` = 64)",
        2 * samples
    );
    assert!(said.lines().any(|l| l.trim_start().starts_with("none: ") && l.contains(&want)), "{said}");
    assert!(!said.lines().any(|l| l.contains("oracle:") && l.contains("completion-token limit")), "{said}");
    let requests = llm.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(r.body["max_tokens"], 64, "{}", r.body);
    }
    let seeds: BTreeSet<String> = requests.iter().map(|r| r.body["seed"].to_string()).collect();
    assert_eq!(seeds.into_iter().collect::<Vec<_>>(), ["1", "2"]);
    // Without it, an agent's turns ask with its role's limit.
    let llm = ScriptedLlm::start(agent_rule);
    let p = project(&llm, "concurrency = 1\n");
    with_role_limit(&p);
    assert_code(&eval(&p), 0);
    assert!(llm.requests().iter().all(|r| r.body["max_tokens"] == 300));
    // A limit of 0 is refused by `check`, naming the key.
    let cfg = p.read(CONFIG);
    p.write(CONFIG, cfg.replace("concurrency = 1\n", "concurrency = 1\nmax_tokens = 0\n"));
    let o = p.run(&["--config", CONFIG, "check"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("eval.max_tokens"), "{}", stderr(&o));
}

// ---------------------------------------------------------------------------
// The real local 0.5B model as a two-agent panel (two sampling seeds).

#[test]
fn real_local_models_evaluate_a_release_as_a_two_agent_panel() {
    let Some((_, small, _one_at_a_time)) = crate::support::local_llm_assets("the real-model eval test") else {
        return;
    };
    // One sample of each shape an agent meets: one call, dependent steps across servers,
    // parallel then dependent calls, two turns. The whole pool of 8 made this the longest test
    // of `make test` (384 s beside the others at 96 tokens, 2026-12-06).
    let p = crate::release::project_of("0.1.0", &["L1-1", "L4-1", "fin-b", "fin-c"]);
    assert_code(&candidate(&p), 0);
    let mut cfg = p.read(CONFIG);
    // Two agents on the 0.5B model with their own sampling seeds: the 1.5B model took most
    // of this test's minutes on 2 cores, and `make demo` runs the 0.5B/1.5B panel for real.
    // 96 tokens hold a tool call or a short answer; at 200 a rambling turn of the 0.5B at
    // this temperature ran to the cap, and this test was the longest of `make test` (384 s
    // beside the other tests, 2026-12-06; alone 117 s at 200, 90 s at 96). A turn cut short
    // is an answer that scores 0.
    for (role, seed) in [("small", 1), ("small_b", 2)] {
        cfg.push_str(&format!(
            "\n[llm.roles.{role}]\nprovider = \"local\"\nmodel_path = \"{}\"\ntemperature = 0.7\nseed = {seed}\nmax_tokens = 96\nmax_retries = 1\ntimeout_s = 600\n",
            small.display()
        ));
    }
    cfg.push_str(
        "\n[eval]\nagents = [\"small\", \"small_b\"]\ntool_space = \"oracle\"\nmax_calls = 3\nconcurrency = 2\n",
    );
    p.write(CONFIG, cfg);
    let started = std::time::Instant::now();
    let o = eval(&p);
    assert_code(&o, 0);
    eprintln!("eval on the real 0.5B model, two agents: {:.1} s", started.elapsed().as_secs_f64());
    let rows = leaderboard(&p);
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert!((0.0..=1.0).contains(&r["score"].as_f64().unwrap()), "{r}");
        assert_eq!(r["samples"], 4);
        // The model column names the file the local server loads.
        assert_eq!(r["model"].as_str(), small.file_name().and_then(|f| f.to_str()), "{r}");
    }
    assert_eq!(items(&p).len(), 4);
}

#[test]
fn flagged_items_go_to_a_review_queue_and_the_next_version_leaves_out_those_marked() {
    let llm = ScriptedLlm::start(agent_rule);
    let p = project(&llm, "");
    let o = eval(&p);
    assert_code(&o, 0);
    // The queue: every flagged item with its evidence, the decision left to the adjudicator.
    let sheet = p.read("artifacts/eval/review.csv");
    let mut lines = sheet.lines();
    assert_eq!(lines.next(), Some("id,flags,solve_rate,evidence,decision,note"));
    let rows: Vec<&str> = lines.collect();
    assert!(rows.iter().any(|r| r.starts_with("L1-1,all-fail label-mismatch,0.0000,") && r.ends_with(",,")), "{sheet}");
    assert!(rows.iter().any(|r| r.starts_with("L5-1,") && r.contains("all-pass")), "{sheet}");
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(said.contains("flagged item(s) in `artifacts/eval/review.csv`"), "{said}");

    // The adjudicator leaves the wrong-gold item out and keeps the easy one.
    let decided: String = sheet
        .lines()
        .map(|l| {
            if l.starts_with("L1-1,") {
                format!("{},leave out,the gold names a tool the request does not need", l.strip_suffix(",,").unwrap())
            } else if l.starts_with("L5-1,") {
                format!("{},keep,", l.strip_suffix(",,").unwrap())
            } else {
                l.to_string()
            }
        })
        .map(|l| l + "\n")
        .collect();
    p.write("reviews/eval/review.csv", &decided);
    let cfg =
        p.read(CONFIG).replace("version = \"0.1.0\"", "version = \"0.2.0\"\neval_review = \"reviews/eval/review.csv\"");
    p.write(CONFIG, &cfg);
    let o = crate::release::release(&p, &[]);
    assert_code(&o, 0);
    let rel = p.path("release/it-bench-0.2.0");
    let log = std::fs::read_to_string(rel.join("CHANGELOG.md")).unwrap();
    assert!(
        log.contains("- `L1-1`: left out after evaluation: all-fail label-mismatch: the gold names a tool the request does not need"),
        "{log}"
    );
    assert!(
        log.contains("### Decided after evaluation (2)") && log.contains("- `L5-1`: kept after evaluation: all-pass"),
        "{log}"
    );
    let ids: Vec<String> = std::fs::read_to_string(rel.join("samples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_str().unwrap().to_string())
        .collect();
    assert!(!ids.contains(&"L1-1".to_string()) && ids.contains(&"L5-1".to_string()), "{ids:?}");

    // A decision that is neither is refused, naming file, line and field; nothing is published.
    p.write("reviews/eval/review.csv", decided.replace("leave out,", "drop,"));
    p.write(CONFIG, cfg.replace("0.2.0", "0.3.0"));
    let o = crate::release::release(&p, &[]);
    assert_code(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("reviews/eval/review.csv:") && err.contains("(decision)") && err.contains("`drop`"), "{err}");
    assert!(!p.path("release/it-bench-0.3.0").exists());
}

/// Two panel agents whose roles cannot be told apart (same endpoint, model and sampling
/// settings) would share every answer: `check` refuses them, naming both.
#[test]
fn indistinguishable_panel_agents_are_refused() {
    let llm = ScriptedLlm::start(agent_rule);
    let p = project(&llm, "");
    let cfg = p.read(CONFIG);
    let twin = format!(
        "[llm.roles.twin]\nprovider = \"vllm\"\nbase_url = \"{}/\"\nmodel = \"oracle\"\ntemperature = 0.0\nseed = 1\n",
        llm.base_url()
    );
    p.write(
        CONFIG,
        format!(
            "{}\n{twin}",
            cfg.replace("agents = [\"none\", \"noisy\", \"oracle\"]", "agents = [\"oracle\", \"twin\"]")
        ),
    );
    let o = p.run(&["--config", CONFIG, "check"]);
    assert_code(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("eval.agents[1]") && err.contains("`twin` cannot be told apart from `oracle`"), "{err}");
    // Another seed makes it another agent.
    let fixed = p.read(CONFIG).replace(&twin, &twin.replace("seed = 1", "seed = 2"));
    p.write(CONFIG, fixed);
    assert_code(&p.run(&["--config", CONFIG, "check"]), 0);
    // Unless repeats reach it: repeat 2 of `oracle` (seed 1) asks with seed 2, `twin`'s first.
    let cfg = p.read(CONFIG);
    let eval_at = cfg.find("[eval]").unwrap();
    let with_repeats = format!("{}[eval]\nrepeats = 2\n{}", &cfg[..eval_at], &cfg[eval_at + "[eval]\n".len()..]);
    p.write(CONFIG, with_repeats.clone());
    let o = p.run(&["--config", CONFIG, "check"]);
    assert_code(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("eval.agents[1]") && err.contains("give their seeds at least 2 apart"), "{err}");
    p.write(CONFIG, with_repeats.replace("seed = 2\n", "seed = 3\n"));
    assert_code(&p.run(&["--config", CONFIG, "check"]), 0);
}

/// With repeats, every leaderboard figure carries its 95 % bootstrap interval over the
/// samples, the same inputs give the same bytes, and each pair of agents is compared on the
/// same resamples: the oracle (7/8) against `none` (1/8) is resolved; `noisy` (3/8) against
/// `none`, two samples of eight apart, is not (a tenth of the resamples hold neither).
#[test]
fn leaderboard_figures_carry_bootstrap_intervals_and_pairs_say_whether_they_are_resolved() {
    let llm = ScriptedLlm::start(agent_rule);
    let p = project(&llm, "repeats = 2\n");
    assert_code(&eval(&p), 0);
    let rows = leaderboard(&p);
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r["repeats"], 2);
        for (figure, ci) in [("score", "score_ci"), ("pass_k", "pass_k_ci")] {
            let x = r[figure].as_f64().unwrap();
            let (lo, hi) = (r[ci][0].as_f64().unwrap(), r[ci][1].as_f64().unwrap());
            assert!(lo <= x && x <= hi, "{figure} {r}");
        }
    }
    // The scripted agents answer alike in both repeats: nothing flips.
    for it in items(&p) {
        assert_eq!(it["flip_rate"], 0.0, "{it}");
        assert!(!it["flags"].as_array().unwrap().contains(&json!("unstable")), "{it}");
    }
    // Every pair once, in the better-ranked agent's row.
    let n_pairs: Vec<usize> = rows.iter().map(|r| r["comparisons"].as_array().unwrap().len()).collect();
    assert_eq!(n_pairs, [2, 1, 0]);
    let pair = |a: &str, b: &str| -> Value {
        let row = rows.iter().find(|r| r["agent"] == a).unwrap();
        let found = row["comparisons"].as_array().unwrap().iter().find(|c| c["agent"] == b).cloned();
        found.unwrap_or_else(|| panic!("no `{a}` − `{b}` in {row}"))
    };
    let on = pair("oracle", "none");
    assert_eq!(on["difference"].as_f64().unwrap(), 6.0 / 8.0);
    assert_eq!(on["resolved"], true, "{on}");
    assert!(on["difference_ci"][0].as_f64().unwrap() > 0.0, "{on}");
    let nn = pair("noisy", "none");
    assert_eq!(nn["difference"].as_f64().unwrap(), 2.0 / 8.0);
    assert_eq!(nn["resolved"], false, "{nn}");
    assert!(nn["difference_ci"][0].as_f64().unwrap() <= 0.0, "{nn}");
    assert!(nn["half_width"].as_f64().unwrap() > 0.0, "{nn}");
    let report = p.read("artifacts/eval/report.md");
    assert!(report.contains("**pass@1**") && report.contains("**pass^2**"), "{report}");
    assert!(report.contains("| `noisy` − `none` |") && report.contains("| not resolved |"), "{report}");
    assert!(report.contains("Smallest difference this release resolves"), "{report}");

    // A fresh project on the same scripted server (the exchange keys hold the endpoint).
    let q = project(&llm, "repeats = 2\n");
    assert_code(&eval(&q), 0);
    assert!(
        p.read("artifacts/eval/leaderboard.json") == q.read("artifacts/eval/leaderboard.json"),
        "the same inputs give the same leaderboard bytes"
    );
}

/// Audit before publishing (issue 38): the panel runs on the release candidate, and the
/// item every agent failed (`L1-1`, the planted wrong gold) stays out of the published
/// version, counted on the card and listed in the CHANGELOG, until a person decides; after
/// `keep` the next version publishes it with the decision's reason.
#[test]
fn an_item_every_agent_failed_is_held_back_until_a_person_keeps_it() {
    let llm = ScriptedLlm::start(agent_rule);
    let p = crate::release::project("0.1.0");
    let cfg = p.read(CONFIG);
    p.write(CONFIG, format!("{cfg}\n{}", eval_config(&llm, "")));
    // `run` orders the three: candidate, eval, release.
    let o = p.run(&["--config", CONFIG, "stages"]);
    let listed = String::from_utf8_lossy(&o.stdout).to_string();
    // Each stage's line starts with its name.
    let at = |name: &str| {
        let line = listed.lines().position(|l| l.split_whitespace().next() == Some(name));
        line.unwrap_or_else(|| panic!("no line of `{name}` in {listed}"))
    };
    assert!(at("release-candidate") < at("eval") && at("eval") < at("release"), "{listed}");

    assert_code(&candidate(&p), 0);
    assert!(!p.path("release/it-bench-0.1.0").exists(), "a candidate publishes nothing");
    assert_code(&eval(&p), 0);
    let o = crate::release::release(&p, &[]);
    assert_code(&o, 0);
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(said.contains("1 item(s) that no eval panel agent solved (`all-fail`) were held back"), "{said}");
    let ids = released_ids(&p, "0.1.0");
    assert_eq!(ids.len(), 7, "{ids:?}");
    assert!(!ids.contains(&"L1-1".to_string()), "{ids:?}");
    let card = p.read("release/it-bench-0.1.0/README.md");
    assert!(card.contains("1 item(s) that no eval panel agent solved (`all-fail`) are held back"), "{card}");
    let log = p.read("release/it-bench-0.1.0/CHANGELOG.md");
    assert!(log.contains("### Held back after evaluation (1)"), "{log}");
    assert!(log.contains("- `L1-1`: flagged `all-fail` by the eval panel (solve rate 0.0000; "), "{log}");

    // A person keeps it, with a reason; the next version publishes it and says why.
    let sheet = p.read("artifacts/eval/review.csv");
    let decided: String = sheet
        .lines()
        .map(|l| match l.strip_prefix("L1-1,") {
            Some(_) => format!("{},keep,Alpha::x is what the request names\n", l.strip_suffix(",,").unwrap()),
            None => format!("{l}\n"),
        })
        .collect();
    p.write("reviews/eval/review.csv", &decided);
    let cfg =
        p.read(CONFIG).replace("version = \"0.1.0\"", "version = \"0.2.0\"\neval_review = \"reviews/eval/review.csv\"");
    p.write(CONFIG, &cfg);
    for o in [candidate(&p), eval(&p), crate::release::release(&p, &[])] {
        assert_code(&o, 0);
    }
    assert!(released_ids(&p, "0.2.0").contains(&"L1-1".to_string()));
    // Its lineage says who kept it and why.
    let lineage = p.read("release/it-bench-0.2.0/lineage.jsonl");
    let l1: Value =
        lineage.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|l| l["id"] == "L1-1").unwrap();
    assert_eq!(l1["eval_audit"]["decided_by"], "person", "{l1}");
    assert!(l1["eval_audit"]["reason"].as_str().unwrap().contains("Alpha::x is what the request names"), "{l1}");
    let log = p.read("release/it-bench-0.2.0/CHANGELOG.md");
    assert!(
        log.contains("- `L1-1`: kept after evaluation: all-fail label-mismatch: Alpha::x is what the request names"),
        "{log}"
    );
    assert!(!log.contains("Held back"), "{log}");
    assert!(!p.read("release/it-bench-0.2.0/README.md").contains("held back"));
}

/// With no person to adjudicate (`[release] decide_flagged = "evidence"`, the demo's
/// setting; issue 38), a rule decides each `all-fail` item the panel's evidence can decide,
/// and the release says so: `L1-1`, on which two agents agree on its reference tool's EFS
/// sibling, is held back for a person; `L3-1`, whose reference calls the oracle made (with
/// one more), is kept, its lineage naming the rule; `L4-1`, on which two agents agree on a
/// tool outside its reference, is left out.
#[test]
fn with_no_person_a_rule_decides_the_all_fail_items_the_panels_evidence_can_decide() {
    let llm = ScriptedLlm::start(evidence_rule);
    let p = crate::release::project("0.1.0");
    let cfg = p.read(CONFIG).replace("version = \"0.1.0\"", "version = \"0.1.0\"\ndecide_flagged = \"evidence\"");
    p.write(CONFIG, format!("{cfg}\n{}", eval_config(&llm, "tool_space = \"standard\"\n")));
    assert_code(&candidate(&p), 0);
    assert_code(&eval(&p), 0);
    let items = items(&p);
    let flagged: Vec<&str> = items
        .iter()
        .filter(|i| i["flags"].as_array().unwrap().contains(&json!("all-fail")))
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(flagged, ["L1-1", "L3-1", "L4-1"], "{items:#?}");
    let l3 = items.iter().find(|i| i["id"] == "L3-1").unwrap();
    assert_eq!(l3["evidence"]["covered_by"], json!(["oracle"]), "{l3}");
    let o = crate::release::release(&p, &[]);
    assert_code(&o, 0);
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(
        said.contains("2 item(s) that no eval panel agent solved (`all-fail`) were decided by rule from the panel's evidence, standing in for a person: 1 kept, 1 left out"),
        "{said}"
    );
    assert!(said.contains("1 item(s) that no eval panel agent solved (`all-fail`) were held back"), "{said}");
    let ids = released_ids(&p, "0.1.0");
    assert!(ids.contains(&"L3-1".to_string()), "{ids:?}");
    assert!(!ids.contains(&"L1-1".to_string()) && !ids.contains(&"L4-1".to_string()), "{ids:?}");
    let card = p.read("release/it-bench-0.1.0/README.md");
    assert!(
        card.contains("2 item(s) that no eval panel agent solved (`all-fail`) were decided by rule from the panel's evidence, standing in for a person (`[release] decide_flagged = \"evidence\"`): 1 kept"),
        "{card}"
    );
    assert!(card.contains("1 item(s) that no eval panel agent solved (`all-fail`) are held back"), "{card}");
    let log = p.read("release/it-bench-0.1.0/CHANGELOG.md");
    // `L1-1`'s agents chose its reference tool's EFS sibling: a person decides.
    assert!(log.contains("### Held back after evaluation (1)\n\n- `L1-1`: "), "{log}");
    assert!(log.contains("### Decided after evaluation (2)"), "{log}");
    assert!(log.contains("- `L4-1`: left out after evaluation by rule from the panel's evidence"), "{log}");
    assert!(log.contains("- `L3-1`: kept after evaluation by rule from the panel's evidence"), "{log}");
    assert!(log.contains("the panel's calls cover the reference's"), "{log}");
    let lineage = p.read("release/it-bench-0.1.0/lineage.jsonl");
    let line = |id: &str| lineage.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|l| l["id"] == id);
    let l3 = line("L3-1").unwrap();
    assert_eq!((&l3["eval_audit"]["decision"], &l3["eval_audit"]["decided_by"]), (&json!("keep"), &json!("rule")));
}

/// A panel that solves nothing (every agent calls a tool that does not exist, so even an L5
/// request, which needs no call, fails) flags every item `all-fail`: `release` holds them
/// all back and waits for a person (exit 3, not an error), and `status` says the same (it
/// said nothing when the review had accepted samples: issue 39).
#[test]
fn when_the_panel_fails_every_item_release_and_status_wait_for_a_person() {
    let llm = ScriptedLlm::start(|_: &Seen| Answer::ToolCalls(vec![("no_such_tool".into(), json!({}))]));
    let p = crate::release::project("0.1.0");
    let cfg = p.read(CONFIG);
    p.write(CONFIG, format!("{cfg}\n{}", eval_config(&llm, "")));
    assert_code(&candidate(&p), 0);
    assert_code(&eval(&p), 0);
    let o = crate::release::release(&p, &[]);
    assert_code(&o, 3);
    let err = stderr(&o);
    assert!(!err.contains("error:"), "waiting is not failing: {err}");
    assert!(err.contains("waiting for people: ") && err.contains("held back after evaluation"), "{err}");
    assert!(!p.path("release/it-bench-0.1.0").exists(), "nothing published");
    let o = p.run(&["--config", CONFIG, "status"]);
    assert_code(&o, 0);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(out.contains("waiting for people: ") && out.contains("held back after evaluation"), "{out}");
    assert!(out.contains("artifacts/eval/review.csv"), "{out}");
    // Once a person keeps the items, nothing waits.
    let mut r = csv::Reader::from_path(p.path("artifacts/eval/review.csv")).unwrap();
    let header = r.headers().unwrap().clone();
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header).unwrap();
    for rec in r.records() {
        let row: Vec<String> = header
            .iter()
            .zip(rec.unwrap().iter())
            .map(|(h, v)| match h {
                "decision" => "keep".to_string(),
                "note" => "a person read it".to_string(),
                _ => v.to_string(),
            })
            .collect();
        w.write_record(&row).unwrap();
    }
    p.write("reviews/eval/review.csv", String::from_utf8(w.into_inner().unwrap()).unwrap());
    p.write(
        CONFIG,
        p.read(CONFIG).replace("version = \"0.1.0\"", "version = \"0.1.0\"\neval_review = \"reviews/eval/review.csv\""),
    );
    let o = p.run(&["--config", CONFIG, "status"]);
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("waiting for people"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}
