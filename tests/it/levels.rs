//! ETOM's five levels (issue 13) on the demo catalog, with the real MiniLM embedding model
//! and the scripted LLM test double standing in for the model. The script answers each
//! prompt from what the prompt shows (platform from the server name, output schemas that
//! make data-flow chains, a forward and a cyclic dependency annotation, a quality-control
//! failure before a pass, an unknown tool in one scenario, gaps that survive or fall to the
//! red team), so the tests check what the pipeline does with answers, not what a model
//! believes. Also: each ETOM defect we fix, ETOM's rule and ours side by side on the same
//! input; a kill inside every level stage resumes with no exchange repeated; byte-identical
//! reruns.
//!
//! Needs the embedding assets from `make setup` (skipped with the reason printed when they
//! are missing, failed under `CI=true`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Output;

use crate::support::scripted_llm::{Answer, ScriptedLlm, Seen};
use assert_cmd::Command;
use serde_json::{Value, json};

use benchgen::levels;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn assets_or_skip() -> bool {
    let cache = std::env::var_os("BENCHGEN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/benchgen"));
    let need = [
        cache.join("embed/all-MiniLM-L6-v2-int8/model.onnx"),
        cache.join("embed/onnxruntime-1.24.4/libonnxruntime.so.1.24.4"),
    ];
    if let Some(missing) = need.iter().find(|p| !p.exists()) {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("embedding asset `{}` is missing: run make setup", missing.display());
        }
        eprintln!("skipping: embedding asset `{}` is missing (run `make setup`)", missing.display());
        return false;
    }
    true
}

// ---------------------------------------------------------------------------------------
// The scripted model.

/// A tool's name as a user says it: `server::create_issue` → "create issue" (a query
/// that names the function is refused as not a request).
fn words(tool: &str) -> String {
    tool.rsplit("::").next().unwrap_or(tool).replace(['_', '-'], " ")
}

/// The demo README's equivalence groups (the EFS stages' verifier answers from these).
const GROUPS: &[&[&str]] = &[
    &["alpha-markets-mcp::get_stock_quote", "yfinance-mcp::stock_price"],
    &["alpha-markets-mcp::get_daily_prices", "yfinance-mcp::price_history"],
    &["ecb-exchange-mcp::currency_conversion", "fx-rates-mcp::convert_currency"],
    &["brave-search-mcp::web_search", "tavily-search-mcp::search"],
    &["openweather-mcp::get_current_weather", "weatherapi-mcp::current_conditions"],
    &["github-mcp::create_issue", "gitlab-mcp::create_new_issue"],
];

const PLATFORMLESS: &[&str] =
    &["filesystem-mcp", "calculator-mcp", "memory-bank-mcp", "sequential-thinking-mcp", "mcp-server-template"];

fn group_of(id: &str) -> Option<usize> {
    GROUPS.iter().position(|g| g.contains(&id))
}

fn cap(re: &str, text: &str) -> String {
    crate::support::regex(re).unwrap().captures(text).map(|c| c[1].to_string()).unwrap_or_default()
}

fn github_schema() -> Value {
    let p: serde_json::Map<String, Value> = ["owner", "repo", "issue_number", "body", "title", "labels", "assignees", "state", "per_page", "head", "base", "draft", "query", "sort"]
        .iter()
        .map(|k| (k.to_string(), json!({"type": if *k == "issue_number" || *k == "per_page" { "integer" } else if *k == "draft" { "boolean" } else if *k == "labels" || *k == "assignees" { "array" } else { "string" }})))
        .collect();
    json!({"type": "object", "properties": p})
}

/// What the plan check's prompt that asks the writer again says (`levels_query_again`).
const ASKED_AGAIN: &str = "does not need enough of them for its level";

/// The platform an L3 query prompt (or the prompt that asks again) gives, if any, as a
/// suffix that names it where to look (" on github"); empty without one.
fn on_platform(text: &str) -> String {
    let platform = cap(r"(?m)^Platform: (.+)$", text);
    if platform.is_empty() { String::new() } else { format!(" on {platform}") }
}

/// The invented entity an L3 query prompt (or the prompt that asks again) gives the writer
/// (issue 38: the query must name it); "acme-widgets" without one.
fn entity(text: &str) -> String {
    let e = cap(r"(?m)^Entity: (.+)$", text);
    if e.is_empty() { "acme-widgets".into() } else { e }
}

pub(crate) fn answer(req: &Seen) -> Answer {
    let text = req.all_text();
    // --- levels ---
    if text.contains("Which user-facing platform") {
        let server = cap(r"Server: (\S+)", &text);
        let platform = if PLATFORMLESS.contains(&server.as_str()) {
            "N/A".to_string()
        } else {
            server.trim_end_matches("-mcp").to_string()
        };
        return Answer::json(json!({"platform": platform, "reason": "scripted"}));
    }
    if text.contains("Tool profile. Platform:") {
        let tool = cap(r"Tool `([^`]+)`", &text);
        let server = cap(r"\(server ([^)]+)\)", &text);
        let middleware = tool.starts_with("list_supported");
        let system = server == "postgres-mcp";
        let tight = tool.contains("issue") || tool.contains("pull_request") || tool.contains("merge_request");
        return Answer::json(json!({
            "task_type": if middleware { "middleware" } else { "final_goal" }, "task_type_reason": "scripted",
            "facing": if system { "system_facing" } else { "user_facing" }, "facing_reason": "scripted",
            "coupling": if tight { "tightly_coupled" } else { "generic_concept" }, "coupling_reason": "scripted",
        }));
    }
    if text.contains("Infer the most likely output") {
        let server = cap(r"\(server ([^)]+)\)", &text);
        let tool = cap(r"Tool `([^`]+)`", &text);
        // github: every tool feeds every other (long chains); list_merge_requests feeds
        // get_pipeline_status (a two-step chain from `list`); get_current_weather feeds
        // get_air_quality. Untyped properties: compatible with any input type.
        let schema = match (server.as_str(), tool.as_str()) {
            ("github-mcp", _) => github_schema(),
            (_, "list_merge_requests") => {
                json!({"type": "object", "properties": {"project_id": {}, "pipeline_id": {}, "ref": {}}})
            }
            (_, "get_current_weather") => {
                json!({"type": "object", "properties": {"lat": {}, "lon": {}, "temperature": {"type": "number"}}})
            }
            _ => json!({"type": "object", "properties": {"result": {"type": "string"}}}),
        };
        return Answer::json(json!({"output_schema": schema}));
    }
    if text.contains("direct-command requests") {
        let platform = cap(r"Platform: (.+)", &text);
        // The task in words, not the function's name (a query naming it is refused); as
        // many drafts as asked for (the schema allows no more).
        let tool = words(&cap(r"Tool `([^`]+)`", &text));
        let n: usize = cap(r"Write (\d+) direct-command requests", &text).parse().unwrap_or(2);
        let queries: Vec<String> = (1..=n).map(|i| format!("On {platform}, {tool} for variant {i}")).collect();
        return Answer::json(json!({"queries": queries}));
    }
    if text.contains("Check this request written for the tool") {
        let ok = !text.contains("variant 2");
        return Answer::json(
            json!({"intent_matches": ok, "platform_rule_obeyed": true, "self_contained": true, "no_meta_language": true, "reason": "scripted"}),
        );
    }
    if text.contains("natural requests that") {
        let must = cap(r#"MUST mention the platform "([^"]+)""#, &text);
        let tools: Vec<String> =
            crate::support::regex(r"Tool `([^`]+)`").unwrap().captures_iter(&text).map(|c| c[1].to_string()).collect();
        let tools: Vec<String> = tools.iter().map(|t| words(t)).collect();
        let q = if must.is_empty() {
            // A few of the set's tools: one request (at most 500 characters, as a grammar
            // server decodes it), not a list of every member of a large scripted set.
            format!("Help me with {}", tools.iter().take(3).cloned().collect::<Vec<_>>().join(" or "))
        } else {
            format!("On {must}, help me with {}", tools[0])
        };
        return Answer::json(json!({"queries": [q]}));
    }
    if text.contains("Check this implicit request") {
        return Answer::json(
            json!({"intent_matches": true, "platform_rule_obeyed": true, "self_contained": true, "no_meta_language": true, "reason": "scripted"}),
        );
    }
    if text.contains("Is this chain of tools") {
        let first = cap(r"- Step 1 \(([^)]+)\)", &text);
        let ok = first != "get_current_weather";
        return Answer::json(json!({"judgement": if ok { "LOGICAL" } else { "ILLOGICAL" }, "reason": "scripted"}));
    }
    if text.contains(ASKED_AGAIN) {
        // The plan check asks again (issue 38): a request that names every listed step.
        let steps: Vec<String> = crate::support::regex(r"- Step \d+ \(([^)]+)\)")
            .unwrap()
            .captures_iter(&text)
            .map(|c| words(&c[1]))
            .collect();
        let query = format!("Asked again: {} for {}{}", steps.join(", then "), entity(&text), on_platform(&text));
        return Answer::json(json!({"query": query, "chain_of_thought": "scripted"}));
    }
    if text.contains("Write one request that needs every step") {
        let steps: Vec<String> = crate::support::regex(r"- Step \d+ \(([^)]+)\)")
            .unwrap()
            .captures_iter(&text)
            .map(|c| words(&c[1]))
            .collect();
        // The platform where the prompt gives one (issue 38: an L3 query names it).
        let query = format!("For repo {}{}: {}", entity(&text), on_platform(&text), steps.join(" then "));
        return Answer::json(json!({"query": query, "chain_of_thought": "scripted"}));
    }
    if text.contains("Answer `dependency_graph`") {
        let tools: Vec<String> = crate::support::regex(r"(?m)^- (\d+) \(([^)]+)\)")
            .unwrap()
            .captures_iter(&text)
            .map(|c| c[2].to_string())
            .collect();
        let n = tools.len();
        // A re-ask (issue 24: the schema allows earlier steps only, an answer that names a
        // later one is re-asked with the reason) gets the linear graph.
        let reasked = text.contains("That answer is not valid");
        let deps = |k: usize| -> Vec<usize> {
            // Two-step chains from `list_*`: a cycle. Three or more: step 1 names step 2 (a
            // forward reference). Otherwise linear.
            if reasked {
                if k > 1 { vec![k - 1] } else { vec![] }
            } else if n == 2 && tools[0].starts_with("list") {
                vec![if k == 1 { 2 } else { 1 }]
            } else if n >= 3 && k == 1 {
                vec![2]
            } else if n >= 3 && k == 2 {
                vec![]
            } else if k > 1 {
                vec![k - 1]
            } else {
                vec![]
            }
        };
        let g: Vec<Value> = tools
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"id": i + 1, "tool_name": t, "dependencies": deps(i + 1)}))
            .collect();
        return Answer::json(json!({"dependency_graph": g}));
    }
    if text.contains("Is there a realistic, common user scenario") {
        return Answer::json(json!({"is_feasible": !text.contains("sequential-thinking"), "reason": "scripted"}));
    }
    if text.contains("Design one task that needs tools") {
        let mut firsts: Vec<String> = Vec::new();
        let mut open = false;
        for line in text.lines() {
            if line.starts_with("Service #") {
                open = true;
            } else if open && line.starts_with("- `") {
                firsts.push(cap(r"- `([^`]+)`", line));
                open = false;
            }
        }
        let mut steps: Vec<Value> = firsts
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"tool_id": t, "dependencies": if i == 0 { vec![] } else { vec![i - 1] }}))
            .collect();
        // A tool that is not listed, until the re-ask says so (issue 24).
        if firsts.iter().any(|t| t.starts_with("slack-mcp")) && !text.contains("That answer is not valid") {
            steps.push(json!({"tool_id": "slack-mcp::post_everywhere", "dependencies": [0]}));
        }
        // A step the query does not name but shares a word with ("table"), which the plan
        // check's rules leave open: its judge prunes it (issue 38).
        if firsts.iter().any(|t| t == "postgres-mcp::describe_table") && !firsts.iter().any(|t| t.contains("list")) {
            steps.push(json!({"tool_id": "postgres-mcp::list_tables", "dependencies": []}));
        }
        let revised = text.contains("rejected by quality control");
        return Answer::json(
            json!({"query": format!("{} task over {}", if revised { "Revised" } else { "First" }, firsts.iter().map(|t| words(t)).collect::<Vec<_>>().join(", ")), "steps": steps}),
        );
    }
    if text.contains("Score from 1 to 10") {
        let s = if text.contains("Task: First") { 5 } else { 8 };
        return Answer::json(
            json!({"solvability_score": s, "utility_score": 9, "solvability_feedback": "scripted", "utility_feedback": "scripted"}),
        );
    }
    if text.contains("name in 2–6 words the capability") {
        let d = cap(r"(?m)^- (.+)$", &text);
        let words: Vec<&str> = d.split_whitespace().take(3).collect();
        return Answer::json(json!({"label": words.join(" ")}));
    }
    if text.contains("Three proposed labels") {
        return Answer::json(json!({"consensus_label": cap(r"(?m)^- (.+)$", &text)}));
    }
    if text.contains("distinct categories of everyday digital tasks") {
        return Answer::json(
            json!({"universal_tasks": ["controlling smart home devices", "booking a restaurant table", "checking stock prices"]}),
        );
    }
    if text.contains("Can the assistant fully perform tasks") {
        let yes = cap(r"Task category: (.+)", &text).contains("stock");
        return Answer::json(json!({"answer": if yes { "YES" } else { "NO" }, "reason": "scripted"}));
    }
    if text.contains("skeptical engineer") {
        return Answer::json(json!({"is_challenge_valid": text.contains("restaurant"), "reasoning": "scripted"}));
    }
    if text.contains("natural requests in the category") {
        let persona = cap(r"As a ([^,]+),", &text);
        let gap = cap(r#"category "([^"]+)""#, &text);
        return Answer::json(json!({"queries": [format!("As a {persona}, I need help with {gap} tonight")]}));
    }
    if text.contains("look for a tool that solves it directly") {
        return Answer::json(json!({"analysis": "scripted", "final_verdict": "Out-of-Scope"}));
    }
    if text.contains("Write a plan that serves the request") {
        return Answer::json(json!({"plan": "IMPOSSIBLE"}));
    }
    // --- EFS stages (as in efs_flow.rs) ---
    if text.contains("Tool A: `") {
        let id = |label: &str| -> String {
            let re = crate::support::regex(&format!(r"Tool {label}: `([^`]+)` \(server: ([^)]+)\)")).unwrap();
            let c = re.captures(&text).expect("tool in the verify prompt");
            format!("{}::{}", &c[2], &c[1])
        };
        let (a, b) = (id("A"), id("B"));
        let same = group_of(&a).is_some() && group_of(&a) == group_of(&b);
        return Answer::json(json!({"equivalent": same, "reason": "scripted"}));
    }
    if text.contains("diverse, realistic and specific user requests") {
        let re = crate::support::regex(r"- `([^`]+)` \(server: ([^)]+)\): (.*)").unwrap();
        let c = re.captures(&text).expect("a tool in the requests prompt");
        let id = format!("{}::{}", &c[2], &c[1]);
        return Answer::json(json!({"requests": [format!("{} [for {id}]", &c[3])]}));
    }
    if text.contains("need a call to this step's tool?") {
        // The plan check's judge on a step its rules leave open says "needed" to every one,
        // as the demo's small judges did: the planted `list_tables` too, which no part of
        // the query is its own, so the rule overrules it (issue 38).
        return Answer::json(json!({"needed": true, "reason": "scripted: needed = true"}));
    }
    if text.contains("User request:") {
        let id = cap(r"\[for ([^\]]+)\]", &text);
        let cand = crate::support::regex(r"(?m)^- `([^`]+)`:").unwrap();
        let selected: Vec<String> = cand
            .captures_iter(&text)
            .map(|c| c[1].to_string())
            .filter(|c| *c == id || (group_of(c).is_some() && group_of(c) == group_of(&id)))
            .collect();
        return Answer::json(json!({"selected": selected}));
    }
    Answer::status(400)
}

pub(crate) fn is_levels_request(s: &Seen) -> bool {
    let t = s.all_text();
    !(t.contains("Tool A: `")
        || t.contains("diverse, realistic and specific user requests")
        || t.contains("User request:"))
}

// ---------------------------------------------------------------------------------------
// The project.

pub(crate) struct Project {
    dir: tempfile::TempDir,
    config: PathBuf,
}

/// A temporary project on the demo registry; `concurrency` items (and requests) in flight.
pub(crate) fn project(llm: &ScriptedLlm, concurrency: usize) -> Project {
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("pipeline/prompts");
    std::fs::create_dir_all(&prompts).unwrap();
    for e in std::fs::read_dir(repo().join("pipeline/prompts")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, prompts.join(p.file_name().unwrap())).unwrap();
    }
    let role = |t: f64| {
        format!(
            "provider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"scripted\"\ntemperature = {t}\nseed = 1\nbackoff_ms = 20\nmax_retries = 1\n",
            llm.base_url()
        )
    };
    let config = dir.path().join("pipeline/levels.toml");
    std::fs::write(
        &config,
        format!(
            r#"[project]
seed = 7

[registry]
source = "{}"

[efs.verify]
concurrency = 1
# The planted groups are answered pair by pair (tests/it/efs_flow.rs covers listwise).
mode = "pairwise"

[levels]
writer_role = "generator"
judge_role = "judge"
concurrency = {}

[levels.l4]
attempts = 8

[levels.l5]
min_cluster_size = 3
universal_tasks = 3
personas = ["student", "casual user"]
queries_per_persona = 1

[llm.roles.verifier]
{}
[llm.roles.generator]
{}
[llm.roles.judge]
{}"#,
            repo().join("raw/demo/registry.json").display(),
            concurrency,
            role(0.0),
            role(0.7),
            role(0.0)
        ),
    )
    .unwrap();
    Project { dir, config }
}

impl Project {
    fn cmd(&self, args: &[&str], fail_at: Option<&str>) -> Output {
        let mut c = Command::cargo_bin("benchgen").unwrap();
        c.current_dir(self.dir.path()).env("BENCHGEN_NO_PROGRESS", "1").env_remove("BENCHGEN_FAIL_AT");
        if let Some(f) = fail_at {
            c.env("BENCHGEN_FAIL_AT", f);
        }
        c.arg("--config").arg(&self.config).args(args).output().unwrap()
    }

    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args, None);
        assert!(
            o.status.success(),
            "`benchgen {}` failed:\n{}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn json(&self, rel: &str) -> Value {
        serde_json::from_slice(&std::fs::read(self.path(rel)).unwrap()).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// Every file of the level stages (manifests without run id and times).
    fn level_files(&self) -> BTreeMap<String, Vec<u8>> {
        let mut out = BTreeMap::new();
        let root = self.path("artifacts");
        for e in std::fs::read_dir(&root).unwrap() {
            let d = e.unwrap().path();
            let name = d.file_name().unwrap().to_string_lossy().into_owned();
            if !name.starts_with("levels-") {
                continue;
            }
            for f in std::fs::read_dir(&d).unwrap() {
                let p = f.unwrap().path();
                let mut bytes = std::fs::read(&p).unwrap();
                let rel = format!("{name}/{}", p.file_name().unwrap().to_string_lossy());
                if rel.ends_with("manifest.json") {
                    let mut m: Value = serde_json::from_slice(&bytes).unwrap();
                    for k in ["run_id", "started_at", "finished_at", "duration_ms"] {
                        m.as_object_mut().unwrap().remove(k);
                    }
                    bytes = serde_json::to_vec_pretty(&m).unwrap();
                }
                out.insert(rel, bytes);
            }
        }
        out
    }
}

const LEVEL_STAGES: &[&str] =
    &["levels-profiles", "levels-schemas", "levels-l1", "levels-l2", "levels-l3", "levels-l4", "levels-l5"];

fn level_file(p: &Project, n: u8) -> Vec<Value> {
    p.json(&format!("artifacts/levels-export/level_{n}.json")).as_array().unwrap().clone()
}

/// An oracle in ETOM's prediction format: the first option of every step, in order.
fn etom_oracle(p: &Project) -> String {
    let mut lines = String::new();
    for n in 1..=5u8 {
        for q in level_file(p, n) {
            let pred: Vec<Value> = match n {
                2 => vec![q["ground_truth_tools"][0][0].clone()],
                4 => q["ground_truth_tools"].as_array().unwrap().iter().map(|row| row[0].clone()).collect(),
                _ => q["ground_truth_tools"].as_array().unwrap().clone(),
            };
            let pred: Vec<Value> =
                pred.iter().map(|t| json!({"server_name": t["server_name"], "tool_name": t["tool_name"]})).collect();
            lines.push_str(&json!({"id": format!("L{n}-{}", q["query_id"]), "prediction": pred}).to_string());
            lines.push('\n');
        }
    }
    lines
}

/// An oracle in the unified prediction format from the samples: the first alternative of
/// every call, grouped as the reference plan groups them; L5 refuses.
fn unified_oracle(p: &Project) -> String {
    let text = std::fs::read_to_string(p.path("artifacts/levels-export/samples.jsonl")).unwrap();
    let mut lines = String::new();
    for l in text.lines() {
        let s: Value = serde_json::from_str(l).unwrap();
        let rec = if s["out_of_scope"] == true {
            json!({"id": s["id"], "refusal": true})
        } else {
            let calls: Vec<Value> = s["turns"][0]["reference_plan"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| json!({"tool": c["alternatives"][0], "group": c["group"]}))
                .collect();
            json!({"id": s["id"], "turns": [{"calls": calls}]})
        };
        lines.push_str(&rec.to_string());
        lines.push('\n');
    }
    lines
}

fn score_all_em(p: &Project, benches: &[PathBuf], pred: &str) -> Value {
    let pred_path = p.path(&format!("pred-{}.jsonl", benches.len()));
    std::fs::write(&pred_path, pred).unwrap();
    let mut c = Command::cargo_bin("benchgen").unwrap();
    c.arg("--json").arg("score");
    for b in benches {
        c.arg("--bench").arg(b);
    }
    let o = c.arg("--pred").arg(&pred_path).output().unwrap();
    assert!(o.status.success(), "score failed: {}", String::from_utf8_lossy(&o.stderr));
    let rep: Value = serde_json::from_slice(&o.stdout).unwrap();
    for s in rep["sections"].as_array().unwrap() {
        for r in s["rows"].as_array().unwrap() {
            assert_eq!(r["em"], 1.0, "{} {}: {rep}", s["dimension"], r["key"]);
        }
    }
    assert_eq!(rep["diagnostics"], json!([]), "{rep}");
    rep
}

fn tool_ids(gt: &Value) -> Vec<String> {
    gt.as_array()
        .unwrap()
        .iter()
        .map(|t| format!("{}::{}", t["server_name"].as_str().unwrap(), t["tool_name"].as_str().unwrap()))
        .collect()
}

#[test]
fn five_levels_on_the_demo_catalog_load_in_score_and_keep_their_promises() {
    if !assets_or_skip() {
        return;
    }
    let llm = ScriptedLlm::start(answer);
    let p = project(&llm, 4);
    p.ok(&["run"]);
    let catalog: BTreeSet<String> = p.json("artifacts/filter/catalog.json")["servers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| {
            s["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |t| format!("{}::{}", s["name"].as_str().unwrap(), t["name"].as_str().unwrap()))
        })
        .collect();

    // Every level has queries, numbered from 1 without gaps.
    for n in 1..=5u8 {
        let qs = level_file(&p, n);
        assert!(!qs.is_empty(), "level {n} is empty");
        let ids: Vec<u64> = qs.iter().map(|q| q["query_id"].as_u64().unwrap()).collect();
        assert_eq!(ids, (1..=qs.len() as u64).collect::<Vec<_>>(), "level {n}");
        for q in &qs {
            assert_eq!(
                q["ground_truth_tools_count"].as_u64().unwrap() as usize,
                q["ground_truth_tools"].as_array().unwrap().len()
            );
        }
    }

    // L1: one query per verified tool, naming the platform; excluded tools never appear.
    let profiles = p.json("artifacts/levels-profiles/profiles.json");
    for q in level_file(&p, 1) {
        let t = &q["ground_truth_tools"][0];
        let id = format!("{}::{}", t["server_name"].as_str().unwrap(), t["tool_name"].as_str().unwrap());
        assert!(profiles["tools"][&id]["excluded"].is_null(), "{id} is excluded but has an L1 query");
        assert!(q["query"].as_str().unwrap().contains("variant 1"), "the seeded choice is among verified drafts only");
    }
    assert_eq!(
        profiles["tools"]["postgres-mcp::run_sql_query"]["excluded"].as_str().unwrap().split(':').next(),
        Some("system-facing")
    );
    assert_eq!(
        profiles["tools"]["fx-rates-mcp::list_supported_currencies"]["excluded"].as_str().unwrap().split(':').next(),
        Some("middleware")
    );
    assert!(profiles["tools"]["filesystem-mcp::read_file"]["excluded"].as_str().unwrap().starts_with("no platform"));

    // L2: ground truth of a set query equals a final EFS set, every row holding all of it;
    // every final set with an eligible member has its query.
    let finals: BTreeSet<Vec<String>> = p.json("artifacts/efs-finalize/final.json")["sets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let mut m: Vec<String> =
                s["members"].as_array().unwrap().iter().map(|m| m["tool_id"].as_str().unwrap().to_string()).collect();
            m.sort();
            m
        })
        .collect();
    assert_eq!(finals.len(), GROUPS.len());
    let mut merged = BTreeSet::new();
    for q in level_file(&p, 2) {
        let rows = q["ground_truth_tools"].as_array().unwrap();
        let mut first: Vec<String> = tool_ids(&rows[0]);
        first.sort();
        for row in rows {
            let mut r = tool_ids(row);
            r.sort();
            assert_eq!(r, first, "rows are symmetric: {q}");
        }
        assert_eq!(rows.len(), first.len());
        if rows.len() > 1 {
            assert!(finals.contains(&first), "{first:?} is not a final set");
            merged.insert(first);
        } else {
            assert!(
                !finals.iter().any(|f| f.contains(&first[0])),
                "{} is in a set but got a singleton query",
                first[0]
            );
        }
    }
    assert_eq!(merged, finals, "every final set (each has an eligible member here) has one merged query");

    // L3: backward dependencies only; the forward and the cyclic annotation were re-asked
    // with the reason (the schema allows earlier steps only), then answered linearly.
    let l3 = level_file(&p, 3);
    for q in &l3 {
        for (i, t) in q["ground_truth_tools"].as_array().unwrap().iter().enumerate() {
            for d in t["dependencies"].as_array().unwrap() {
                assert!((d.as_u64().unwrap() as usize) < i, "L3 dependency not backward: {q}");
            }
        }
        assert!(q["dependency_visualization"].is_string());
    }
    let funnel3 = p.json("artifacts/levels-l3/queries.json")["funnel"]["rejected"].clone();
    let reasons3: Vec<String> =
        funnel3.as_array().unwrap().iter().map(|r| r["reason"].as_str().unwrap().to_string()).collect();
    assert!(!reasons3.iter().any(|r| r.starts_with("dependencies rejected")), "{reasons3:?}");
    let reasked = |what: &str| {
        llm.requests()
            .iter()
            .filter(|s| s.all_text().contains(what) && s.last_user().starts_with("That answer is not valid: "))
            .count()
    };
    assert!(reasked("Answer `dependency_graph`") >= 2, "the forward and the cyclic annotations are re-asked");
    assert!(reasons3.iter().any(|r| r.starts_with("illogical")), "{reasons3:?}");
    assert!(
        l3.iter().any(|q| q["ground_truth_tools"].as_array().unwrap().len() >= 3),
        "a re-asked 3-step chain is kept"
    );

    // L4: every tool exists, 2–4 servers, backward dependencies, alternatives from the EFS.
    for q in level_file(&p, 4) {
        let mut servers = BTreeSet::new();
        for (i, row) in q["ground_truth_tools"].as_array().unwrap().iter().enumerate() {
            let ids = tool_ids(row);
            for id in &ids {
                assert!(catalog.contains(id), "L4 tool {id} not in the catalog");
            }
            servers.insert(row[0]["server_name"].as_str().unwrap().to_string());
            let deps = &row[0]["dependencies"];
            for t in row.as_array().unwrap() {
                assert_eq!(&t["dependencies"], deps, "alternatives share the step's dependencies");
                for d in t["dependencies"].as_array().unwrap() {
                    assert!((d.as_u64().unwrap() as usize) < i, "L4 dependency not backward: {q}");
                }
            }
            if let Some(g) = group_of(&ids[0]) {
                let mut want: Vec<String> = GROUPS[g].iter().map(|s| s.to_string()).collect();
                let mut got = ids.clone();
                want.sort();
                got.sort();
                assert_eq!(got, want, "step {} lists its EFS alternatives", ids[0]);
            } else {
                assert_eq!(ids.len(), 1);
            }
        }
        assert!((2..=4).contains(&servers.len()), "{q}");
        assert!(q["query"].as_str().unwrap().starts_with("Revised"), "QC failed the first draft: {q}");
    }
    // A scenario naming a tool that is not listed is re-asked with the reason (issue 24: the
    // schema lists the sampled services' tools), never rejected after quality control.
    let l4 = p.json("artifacts/levels-l4/queries.json");
    let attempts = p.json("artifacts/levels-l4/attempts.json");
    let mut slack_seen = false;
    for (key, a) in attempts.as_object().unwrap() {
        if a["passed"] == true && a["servers"].as_array().unwrap().iter().any(|s| s == "slack-mcp") {
            slack_seen = true;
            let rejected = l4["funnel"]["rejected"].as_array().unwrap().iter().find(|r| r["item"] == key.as_str());
            assert!(rejected.is_none(), "{key} rejected after the call: {rejected:?}");
            assert!(!a.to_string().contains("post_everywhere"), "the re-asked scenario is kept: {a}");
        }
    }
    assert!(slack_seen, "seed 7 samples slack-mcp in a passed scenario: {attempts}");
    assert!(reasked("Design one task that needs tools") >= 1, "the unlisted tool is re-asked");

    // L5: every query carries its gap; the red team's win and the covered task are rejections.
    let l5 = level_file(&p, 5);
    for q in &l5 {
        assert_eq!(q["ground_truth_tools"], json!([]));
        assert_eq!(q["category"], "controlling smart home devices", "{q}");
    }
    let reasons5 = p.json("artifacts/levels-l5/queries.json")["funnel"]["rejected"].to_string();
    assert!(reasons5.contains("challenged") && reasons5.contains("covered"), "{reasons5}");

    // Every kept L1–L4 plan step has the plan check's decision (issue 38), in the level's
    // `queries.json` and in the exported sample's lineage event.
    for n in 1..=4 {
        let out = p.json(&format!("artifacts/levels-l{n}/queries.json"));
        for q in out["queries"].as_array().unwrap() {
            let key = q["key"].as_str().unwrap();
            let decisions =
                out["plan_checks"][key]["decisions"].as_array().unwrap_or_else(|| panic!("L{n} {key}: {out}"));
            let kept = decisions.iter().filter(|d| d["decision"] == "kept" && d.get("dependency").is_none()).count();
            assert_eq!(
                kept,
                q["steps"].as_array().unwrap().len(),
                "L{n} {key}: one kept decision per step: {decisions:?}"
            );
            assert!(decisions.iter().all(|d| !d["reason"].as_str().unwrap().is_empty()));
            // Only the judge's decisions are by `llm`, each with its exchange.
            for d in decisions.iter().filter(|d| d["by"] != "rule") {
                assert_eq!(d["by"], "llm", "{d}");
                assert!(d["exchange"].as_str().is_some_and(|e| e.starts_with("sha256:")), "{d}");
            }
        }
    }
    // The planted `list_tables` step: open to the rules, called needed by the judge, pruned
    // by the rule (`describe_table` says every word of the query `list_tables` says, and is
    // nearer), recorded with the judge's exchange, and counted in the L4 funnel.
    let l4 = p.json("artifacts/levels-l4/queries.json");
    let judged: Vec<&Value> = l4["plan_checks"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|r| r["decisions"].as_array().unwrap())
        .filter(|d| d["tool"] == "postgres-mcp::list_tables")
        .collect();
    assert!(!judged.is_empty(), "{l4}");
    for d in &judged {
        assert_eq!((d["decision"].as_str(), d["by"].as_str()), (Some("unrequested"), Some("rule")), "{d}");
        let reason = d["reason"].as_str().unwrap();
        assert!(reason.starts_with("needed, says the judge: scripted"), "{d}");
        assert!(reason.contains("; but no part of the request is this step's alone"), "{d}");
        assert!(d["exchange"].as_str().is_some_and(|e| e.starts_with("sha256:")), "{d}");
    }
    for q in l4["queries"].as_array().unwrap() {
        assert!(!q["steps"].to_string().contains("list_tables"), "{q}");
    }
    let funnel = l4["funnel"]["steps"].to_string();
    assert!(funnel.contains("[\"plan check: steps the judge pruned\",0]"), "{funnel}");
    let overruled = format!("[\"plan check: judge's needed without a part of its own\",{}]", judged.len());
    assert!(funnel.contains(&overruled), "{funnel}");
    let payloads = crate::support::ledger_events(&p.path("artifacts"), "levels.sample");
    assert!(!payloads.is_empty());
    for ev in &payloads {
        let level5 = ev["id"].as_str().unwrap().starts_with("L5-");
        let steps = ev["tools"].as_array().unwrap().len();
        match ev["plan_check"].as_array() {
            Some(d) => {
                assert!(d.iter().filter(|d| d["decision"] == "kept").count() >= steps, "{ev}");
                // Every level with steps weighs each one's embedding similarity (L1 and L2 too).
                let on_steps = d.iter().filter(|d| d.get("dependency").is_none());
                assert!(on_steps.clone().all(|d| d["similarity"].is_number()), "{ev}");
                assert_eq!(level5, d.is_empty(), "{ev}");
            }
            None => panic!("a level sample without its plan check in the lineage: {ev}"),
        }
    }

    // The files load in `benchgen score` and an oracle scores 100 % (corrected mode).
    let benches: Vec<PathBuf> = (1..=5).map(|n| p.path(&format!("artifacts/levels-export/level_{n}.json"))).collect();
    score_all_em(&p, &benches, &etom_oracle(&p));
    // ETOM's own evaluator (reproduced by `--compat etom`) reads the files unchanged.
    let o = Command::cargo_bin("benchgen")
        .unwrap()
        .args(["--json", "score", "--compat", "etom"])
        .args(benches.iter().flat_map(|b| ["--bench".as_ref(), b.as_os_str()]))
        .arg("--pred")
        .arg(p.path("pred-5.jsonl"))
        .output()
        .unwrap();
    assert!(o.status.success(), "compat etom: {}", String::from_utf8_lossy(&o.stderr));
    let rep: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rep["data_defects"], json!([]), "{rep}");
    let samples = p.path("artifacts/levels-export/samples.jsonl");
    let rep = score_all_em(&p, &[samples], &unified_oracle(&p));
    let total: usize = (1..=5).map(|n| level_file(&p, n).len()).sum();
    assert_eq!(rep["samples"].as_u64().unwrap() as usize, total);
    let text = std::fs::read_to_string(p.path("artifacts/levels-export/samples.jsonl")).unwrap();
    for l in text.lines() {
        let s: Value = serde_json::from_str(l).unwrap();
        assert_eq!(s["family"], "etom");
        assert_eq!(s["author"], "llm:generator");
    }
    let report = std::fs::read_to_string(p.path("artifacts/levels-export/report.md")).unwrap();
    assert!(
        report.contains("| level | queries | tools per query |") && report.contains("rejected because"),
        "{report}"
    );

    // A forced rerun asks nothing and gives the same bytes.
    let before = p.level_files();
    let calls = llm.count();
    p.ok(&["run", "--force"]);
    assert_eq!(llm.count(), calls, "a rerun makes zero LLM calls");
    assert_eq!(p.level_files(), before, "byte-identical rerun");
}

#[test]
fn a_kill_inside_each_level_resumes_without_repeating_an_exchange() {
    if !assets_or_skip() {
        return;
    }
    // One scripted server for both projects: exchange keys (named in the level files) hold
    // the endpoint, which must be the same for the bytes to agree.
    let llm = ScriptedLlm::start(answer);
    // One request in flight: when the kill lands every sent request has its answer
    // recorded, so "asked again" can only mean a repeated exchange.
    let a = project(&llm, 1);
    a.ok(&["run"]);
    let want_requests = llm.requests().iter().filter(|s| is_levels_request(s)).count();

    let b = project(&llm, 1);
    b.ok(&["run", "--until", "efs-finalize"]);
    for stage in LEVEL_STAGES {
        let words: Vec<&str> = stage.splitn(2, '-').collect();
        let killed = b.cmd(&[words[0], words[1]], Some("llm_batch_item:2"));
        assert!(!killed.status.success(), "`{stage}` was not killed: {}", String::from_utf8_lossy(&killed.stderr));
        assert!(b.path(&format!("artifacts/.work/{stage}/items.jsonl")).exists(), "{stage} left no checkpoint");
        b.ok(&[words[0], words[1]]);
    }
    b.ok(&["levels", "export"]);
    let got_requests = llm.requests().iter().filter(|s| is_levels_request(s)).count() - want_requests;
    assert_eq!(got_requests, want_requests, "the resumed runs asked exactly what one uninterrupted run asks");
    assert_eq!(b.level_files(), a.level_files(), "resumed artifacts are byte-identical");
}

// ---------------------------------------------------------------------------------------
// Asking again (issue 38): a query that needs fewer tools than its level is asked again
// once with the reason, then kept or rejected.

/// The released `L4-1`'s query: one company profile, for a plan over four servers.
const L4_1_QUERY: &str = "Get the company profile for ticker: TSLA";

/// The released `L4-1`'s servers, each alone in its main category.
const L4_1_SERVERS: &[&str] = &["slack-mcp", "postgres-mcp", "alpha-markets-mcp", "tavily-search-mcp"];

/// The scripted model with the released `L4-1` planted: the scenario asks for one company
/// profile and lists eight steps over the four servers, the first three repeated; the
/// judge finds only the company profile needed; asked again, the writer answers `again`
/// (`None`: [`answer`]'s request naming every step).
fn l4_1_answer(seen: &Seen, again: Option<&str>) -> Answer {
    let text = seen.all_text();
    if text.contains("Design one task that needs tools") {
        let steps: Vec<Value> = [
            "slack-mcp::get_channel_history",
            "postgres-mcp::describe_table",
            "alpha-markets-mcp::get_company_profile",
            "tavily-search-mcp::extract",
            "tavily-search-mcp::search",
            "slack-mcp::get_channel_history",
            "postgres-mcp::describe_table",
            "alpha-markets-mcp::get_company_profile",
        ]
        .iter()
        .map(|t| json!({"tool_id": t, "dependencies": []}))
        .collect();
        return Answer::json(json!({"query": L4_1_QUERY, "steps": steps}));
    }
    if text.contains("need a call to this step's tool?") {
        let step = text.rsplit("The step to judge:").next().unwrap_or_default();
        let needed = step.contains("::get_company_profile");
        return Answer::json(json!({"needed": needed, "reason": format!("scripted: needed = {needed}")}));
    }
    match again {
        Some(q) if text.contains(ASKED_AGAIN) => Answer::json(json!({"query": q, "chain_of_thought": "scripted"})),
        _ => answer(seen),
    }
}

/// The demo registry cut to the servers named `keep` (totals recounted), written to the
/// project's `registry.json`; returns the project's config text naming that file in place of
/// the demo's (the caller writes it back with its own changes).
fn with_demo_registry_cut_to(p: &Project, keep: &[&str]) -> String {
    let demo = repo().join("raw/demo/registry.json");
    let mut reg: Value = serde_json::from_slice(&std::fs::read(&demo).unwrap()).unwrap();
    let servers: Vec<Value> = reg["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| keep.contains(&s["server_name"].as_str().unwrap()))
        .cloned()
        .collect();
    assert_eq!(servers.len(), keep.len());
    let tools: usize = servers.iter().map(|s| s["tools"].as_array().unwrap().len()).sum();
    reg["total_servers"] = json!(servers.len());
    reg["total_tools"] = json!(tools);
    reg["servers"] = json!(servers);
    let registry = p.path("registry.json");
    std::fs::write(&registry, serde_json::to_vec_pretty(&reg).unwrap()).unwrap();
    let cfg = std::fs::read_to_string(&p.config).unwrap();
    cfg.replace(&demo.display().to_string(), &registry.display().to_string())
}

/// A project on the demo registry cut to the `L4-1` servers, with one L4 attempt that
/// draws all four; `registry import`, `filter` and `levels l4` run. Returns the L4's
/// `queries.json` and the texts of the prompts that asked the writer again.
fn l4_1_run(llm: &ScriptedLlm) -> (Value, Vec<String>) {
    let p = project(llm, 1);
    let cfg = with_demo_registry_cut_to(&p, L4_1_SERVERS);
    assert!(cfg.contains("[levels.l4]\nattempts = 8\n"), "{cfg}");
    let cfg =
        cfg.replace("[levels.l4]\nattempts = 8\n", "[levels.l4]\nattempts = 1\nmin_servers = 4\nmax_servers = 4\n");
    std::fs::write(&p.config, cfg).unwrap();
    for args in [&["registry", "import"][..], &["filter"], &["levels", "l4"]] {
        p.ok(args);
    }
    let asked: Vec<String> = llm.requests().iter().map(Seen::all_text).filter(|t| t.contains(ASKED_AGAIN)).collect();
    let mut out = p.json("artifacts/levels-l4/queries.json");
    out["attempts"] = p.json("artifacts/levels-l4/attempts.json");
    (out, asked)
}

/// The first query's plan, pruned to `get_company_profile`, uses one server.
const ONE_SERVER: &str = "needs two or more servers, uses 1 (alpha-markets-mcp)";

/// A level's funnel (`out["funnel"]`) holds `step` with `n`.
fn funnel_has(out: &Value, step: &str, n: u64) -> bool {
    out["funnel"]["steps"].as_array().unwrap().iter().any(|s| s[0] == step && s[1] == n)
}

#[test]
fn an_l4_whose_query_needs_one_server_is_asked_again_and_kept_when_the_new_query_needs_another() {
    let llm = ScriptedLlm::start(|seen: &Seen| l4_1_answer(seen, None));
    let (out, asked) = l4_1_run(&llm);
    let rec = &out["plan_checks"]["attempt:0000"];
    let again = &rec["asked_again"];
    assert_eq!(again["query"], L4_1_QUERY, "{out}");
    let reason = again["reason"].as_str().unwrap();
    // One more server is what L4 lacks: the step of another server nearest to the query
    // (by the real MiniLM's cosine) is the one the writer is asked to need.
    let want = format!(
        "the query asks only for `alpha-markets-mcp::get_company_profile`; it must need \
         `slack-mcp::get_channel_history` too (plan does not fit L4: {ONE_SERVER})"
    );
    assert_eq!(reason, want);
    let first = again["decisions"].as_array().unwrap();
    let sim =
        |k: u64| first.iter().find(|d| d["step"] == k && d.get("dependency").is_none()).unwrap()["similarity"].as_f64();
    let slack = sim(1).expect("L4 scores by embeddings too");
    assert!([2, 4, 5].iter().all(|&k| sim(k).unwrap() <= slack), "{again}");
    // Asked once, with the two tools, the previous query and the reason.
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains(&format!("The refused request:\n{L4_1_QUERY}\n")), "{}", asked[0]);
    assert!(asked[0].contains(reason) && asked[0].contains("(slack-mcp::get_channel_history)"), "{}", asked[0]);
    assert!(!asked[0].contains("(tavily-search-mcp::search)"), "{}", asked[0]);
    // The new query needs the two servers: kept with those two steps; the repeats and the
    // steps it still does not ask for are pruned, each decided.
    assert!(rec.get("rejected").is_none(), "{rec}");
    let queries = out["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 1, "{out}");
    assert!(queries[0]["query"].as_str().unwrap().starts_with("Asked again: "), "{}", queries[0]);
    let tools: Vec<&str> =
        queries[0]["steps"].as_array().unwrap().iter().map(|s| s["tools"][0].as_str().unwrap()).collect();
    assert_eq!(tools, ["slack-mcp::get_channel_history", "alpha-markets-mcp::get_company_profile"], "{}", queries[0]);
    let kept = rec["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["decision"] == "kept" && d.get("dependency").is_none())
        .count();
    assert_eq!(kept, 2, "{rec}");
    assert_eq!(rec["decisions"].as_array().unwrap().iter().filter(|d| d.get("dependency").is_none()).count(), 8);
    // The first query's decisions are kept too, and the exchange that asked is a parent.
    assert_eq!(again["decisions"].as_array().unwrap().len(), 8, "{again}");
    let exchange = again["exchange"].as_str().unwrap();
    assert!(queries[0]["exchanges"].as_array().unwrap().iter().any(|e| e == exchange), "{}", queries[0]);
    assert!(funnel_has(&out, "plan check: asked again", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan check: kept after asking again", 1), "{}", out["funnel"]);
    // The new query went through quality control too; its exchange is a parent.
    let attempt = &out["attempts"]["attempt:0000"];
    assert!(attempt["asked_again_quality"]["solvability_score"].is_u64(), "{attempt}");
    let qc = attempt["exchanges"].as_array().unwrap().last().unwrap();
    assert!(queries[0]["exchanges"].as_array().unwrap().contains(qc), "{}", queries[0]);
    assert!(funnel_has(&out, "asked again: quality controlled", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "asked again: below the quality bar", 0), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan check: rejected after asking again", 0), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan checked", 1), "{}", out["funnel"]);
}

/// A new query that needs the servers but fails quality control is rejected: the query
/// asked again is held to the bar the scenario's own rounds were.
#[test]
fn an_l4_query_written_when_asked_again_is_held_to_quality_control() {
    let llm = ScriptedLlm::start(|seen: &Seen| {
        let text = seen.all_text();
        if text.contains("strict quality reviewer") && text.contains("Asked again: ") {
            let low = json!({"solvability_score": 3, "utility_score": 9,
                             "solvability_feedback": "scripted", "utility_feedback": "scripted"});
            return Answer::json(low);
        }
        l4_1_answer(seen, None)
    });
    let (out, _) = l4_1_run(&llm);
    assert_eq!(out["queries"], json!([]), "{out}");
    let rejected: Vec<&Value> =
        out["funnel"]["rejected"].as_array().unwrap().iter().filter(|r| r["item"] == "attempt:0000").collect();
    assert_eq!(rejected.len(), 1, "{out}");
    assert_eq!(rejected[0]["reason"], "quality control after asking again: below 7 (solvability 3 utility 9)");
    assert_eq!(out["attempts"]["attempt:0000"]["asked_again_quality"]["solvability_score"], 3);
    assert!(funnel_has(&out, "asked again: quality controlled", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "asked again: below the quality bar", 1), "{}", out["funnel"]);
}

#[test]
fn an_l4_whose_query_still_needs_one_server_when_asked_again_is_rejected_with_both_reasons() {
    let llm =
        ScriptedLlm::start(|seen: &Seen| l4_1_answer(seen, Some("Get the company profile for ticker: TSLA, today")));
    let (out, asked) = l4_1_run(&llm);
    assert_eq!(asked.len(), 1, "asked again once, not twice: {asked:?}");
    assert_eq!(out["queries"], json!([]), "{out}");
    let both = format!("plan does not fit L4 after asking again: first query: {ONE_SERVER}; asked again: {ONE_SERVER}");
    let rejected: Vec<&Value> =
        out["funnel"]["rejected"].as_array().unwrap().iter().filter(|r| r["item"] == "attempt:0000").collect();
    assert_eq!(rejected.len(), 1, "{out}");
    assert_eq!(rejected[0]["reason"], both.as_str());
    let rec = &out["plan_checks"]["attempt:0000"];
    assert_eq!(rec["rejected"], both.as_str());
    assert_eq!(rec["asked_again"]["query"], L4_1_QUERY);
    assert!(rec["asked_again"]["exchange"].as_str().is_some_and(|e| e.starts_with("sha256:")), "{rec}");
    // The new query's own decisions: again only the company profile is asked for.
    let kept: Vec<&Value> = rec["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["decision"] == "kept" && d.get("dependency").is_none())
        .collect();
    assert_eq!(kept.len(), 1, "{rec}");
    assert_eq!(kept[0]["tool"], "alpha-markets-mcp::get_company_profile");
    assert!(funnel_has(&out, "plan check: asked again", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan check: kept after asking again", 0), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan check: rejected after asking again", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan checked", 0), "{}", out["funnel"]);
}

/// The new query an L4 writer asked again writes: it needs the web search, the page
/// extraction and the company profile (each named).
const L4_AGAIN_QUERY: &str =
    "Search the web for Morvira, extract the pages it finds and get the company profile for ticker MRVA";

/// An L4 query asked again keeps the scenario's dependencies that have a data link (issue
/// 38): "extract needs search" (`search` names `urls`) holds for the new query too, and
/// nothing is annotated anew (a small judge's annotation could drop it).
#[test]
fn an_l4_query_asked_again_keeps_the_scenarios_data_linked_dependencies() {
    let llm = ScriptedLlm::start(|seen: &Seen| {
        let text = seen.all_text();
        if text.contains("Design one task that needs tools") {
            let steps = json!([
                {"tool_id": "slack-mcp::get_channel_history", "dependencies": []},
                {"tool_id": "postgres-mcp::describe_table", "dependencies": []},
                {"tool_id": "alpha-markets-mcp::get_company_profile", "dependencies": []},
                {"tool_id": "tavily-search-mcp::search", "dependencies": [0]},
                {"tool_id": "tavily-search-mcp::extract", "dependencies": [3]},
            ]);
            return Answer::json(json!({"query": L4_1_QUERY, "steps": steps}));
        }
        l4_1_answer(seen, Some(L4_AGAIN_QUERY))
    });
    let (out, asked) = l4_1_run(&llm);
    assert_eq!(asked.len(), 1, "{asked:?}");
    let queries = out["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 1, "{out}");
    let q = &queries[0];
    assert_eq!(q["query"], L4_AGAIN_QUERY, "{q}");
    let tools: Vec<&str> = q["steps"].as_array().unwrap().iter().map(|s| s["tools"][0].as_str().unwrap()).collect();
    assert_eq!(
        tools,
        ["alpha-markets-mcp::get_company_profile", "tavily-search-mcp::search", "tavily-search-mcp::extract"],
        "{q}"
    );
    // Extract still takes what search finds; search → Slack's history had no data link and is
    // dropped by rule, for the new query as for the first.
    let deps: Value = q["steps"].as_array().unwrap().iter().map(|s| s["depends_on"].clone()).collect();
    assert_eq!(deps, json!([[], [], [1]]), "{q}");
    let rec = &out["plan_checks"]["attempt:0000"];
    let on = |d: &Value, step: u64, dep: u64| d["step"] == step && d["dependency"] == dep;
    let decisions = rec["decisions"].as_array().unwrap();
    let kept = decisions.iter().find(|d| on(d, 5, 4)).expect("extract → search decided");
    assert_eq!((kept["decision"].as_str(), kept["by"].as_str()), (Some("kept"), Some("rule")), "{rec}");
    let dropped = decisions.iter().find(|d| on(d, 4, 1)).expect("search → history decided");
    assert_eq!((dropped["decision"].as_str(), dropped["by"].as_str()), (Some("dependency_dropped"), Some("rule")));
    assert!(rec["asked_again"].get("annotated").is_none(), "nothing annotated anew: {rec}");
    let annotations =
        llm.requests().iter().map(Seen::all_text).filter(|t| t.contains("Answer `dependency_graph`")).count();
    assert_eq!(annotations, 0);
    assert!(funnel_has(&out, "plan check: kept after asking again", 1), "{}", out["funnel"]);
}

// ---------------------------------------------------------------------------------------
// An L3 query asked again is annotated anew (issue 38): its plan holds the dependencies its
// own annotation gives, not those annotated for the query it replaces.

/// The scripted model for one three-step github chain: the first query asks for step 1's
/// task only and the judge finds the other steps not needed, so the writer is asked again
/// (and the judge finds every step of the new query needed); the first query's annotation
/// makes step 3 need step 1 (the chain's edge adds step 2), the new query's only step 2.
fn reannotated_answer(seen: &Seen) -> Answer {
    let text = seen.all_text();
    if text.contains("Write one request that needs every step") {
        let query = format!("Please {} for {}", words(&cap(r"- Step 1 \(([^)]+)\)", &text)), entity(&text));
        return Answer::json(json!({"query": query, "chain_of_thought": "scripted"}));
    }
    if text.contains("need a call to this step's tool?") {
        let needed = text.contains("Asked again: ");
        return Answer::json(json!({"needed": needed, "reason": format!("scripted: needed = {needed}")}));
    }
    if text.contains("Answer `dependency_graph`") {
        let again = text.contains("Request: Asked again: ");
        let tools: Vec<String> = crate::support::regex(r"(?m)^- (\d+) \(([^)]+)\)")
            .unwrap()
            .captures_iter(&text)
            .map(|c| c[2].to_string())
            .collect();
        let deps = |k: usize| -> Vec<usize> {
            match k {
                1 => vec![],
                3 if !again => vec![1],
                _ => vec![k - 1],
            }
        };
        let g: Vec<Value> = tools
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"id": i + 1, "tool_name": t, "dependencies": deps(i + 1)}))
            .collect();
        return Answer::json(json!({"dependency_graph": g}));
    }
    answer(seen)
}

#[test]
fn an_l3_query_asked_again_gets_its_own_dependencies_not_the_first_querys() {
    if !assets_or_skip() {
        return;
    }
    let llm = ScriptedLlm::start(reannotated_answer);
    let p = project(&llm, 1);
    let cfg = with_demo_registry_cut_to(&p, &["github-mcp"]);
    // One chain of three github tools (each feeds every other); every step the query does
    // not name is left open by the rules, for the scripted judge to decide.
    let cfg = format!(
        "{cfg}\n[levels.l3]\nmax_chain_len = 3\nmax_chains_per_server = 1\n\n[levels.plan_check]\n\
         min_similarity = -1.0\nrequested_similarity = 1.0\nrequested_overlap = 1.0\n"
    );
    std::fs::write(&p.config, cfg).unwrap();
    for args in
        [&["registry", "import"][..], &["filter"], &["levels", "profiles"], &["levels", "schemas"], &["levels", "l3"]]
    {
        p.ok(args);
    }
    let out = p.json("artifacts/levels-l3/queries.json");
    let queries = out["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 1, "{out}");
    let q = &queries[0];
    assert!(q["query"].as_str().unwrap().starts_with("Asked again: "), "{q}");
    // Asked again for too few tools and for the platform its first query did not name.
    let told = out["plan_checks"][q["key"].as_str().unwrap()]["asked_again"]["reason"].as_str().unwrap();
    assert!(told.ends_with("; platform not named: `github` does not occur"), "{told}");
    // Step 3 depends on step 2 only, as the new query's annotation says; the first query's
    // step 1 → step 3 is gone.
    let deps: Value = q["steps"].as_array().unwrap().iter().map(|s| s["depends_on"].clone()).collect();
    assert_eq!(deps, json!([[], [0], [1]]), "{q}");
    let checks = out["plan_checks"].as_object().unwrap();
    assert_eq!(checks.len(), 1, "{out}");
    let rec = &out["plan_checks"][q["key"].as_str().unwrap()];
    let annotated = rec["asked_again"]["annotated"].as_str().expect("the new query's annotation is recorded");
    assert!(annotated.starts_with("sha256:"), "{rec}");
    assert!(q["exchanges"].as_array().unwrap().iter().any(|e| e == annotated), "a parent of the sample: {q}");
    // The first query's check kept the dependency; the new query's records it dropped, by
    // the annotation that left it out.
    let on = |d: &Value| d["step"] == 3 && d["dependency"] == 1;
    let first = rec["asked_again"]["decisions"].as_array().unwrap();
    assert!(first.iter().any(|d| on(d) && d["decision"] == "kept"), "{rec}");
    let dropped: Vec<&Value> = rec["decisions"].as_array().unwrap().iter().filter(|d| on(d)).collect();
    assert_eq!(dropped.len(), 1, "{rec}");
    assert_eq!((dropped[0]["decision"].as_str(), dropped[0]["by"].as_str()), (Some("dependency_dropped"), Some("llm")));
    assert_eq!(dropped[0]["exchange"], annotated);
    let reason = dropped[0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("step 3 no longer depends on step 1: annotated for the first query"), "{reason}");
    // Annotated twice: for the first query, and for the new one.
    let annotations: Vec<String> =
        llm.requests().iter().map(Seen::all_text).filter(|t| t.contains("Answer `dependency_graph`")).collect();
    assert_eq!(annotations.len(), 2, "{annotations:?}");
    assert!(annotations[1].contains("Request: Asked again: "), "{}", annotations[1]);
    assert!(funnel_has(&out, "plan check: kept after asking again", 1), "{}", out["funnel"]);
}

// ---------------------------------------------------------------------------------------
// An L3 query names its server's platform (issue 38): the demo's "Find the current stock price
// of Apple Inc." named none, and the eval panel answered it with another server's EFS sibling.

/// The scripted model for one github chain whose writer leaves the platform out of its first
/// query; asked again, it names the platform when `mends` (else it leaves it out again).
fn unnamed_platform_answer(seen: &Seen, mends: bool) -> Answer {
    let text = seen.all_text();
    let steps = || -> Vec<String> {
        crate::support::regex(r"- Step \d+ \(([^)]+)\)").unwrap().captures_iter(&text).map(|c| words(&c[1])).collect()
    };
    if text.contains(ASKED_AGAIN) && !mends {
        let query = format!("Asked again: {} for {}", steps().join(", then "), entity(&text));
        return Answer::json(json!({"query": query, "chain_of_thought": "scripted"}));
    }
    if text.contains("Write one request that needs every step") {
        let query = format!("For repo {}: {}", entity(&text), steps().join(" then "));
        return Answer::json(json!({"query": query, "chain_of_thought": "scripted"}));
    }
    answer(seen)
}

/// A project on the demo registry cut to github-mcp, one chain of three tools; `registry
/// import`, `filter`, `levels profiles`, `levels schemas` and `levels l3` run. Returns L3's
/// `queries.json` and the prompts that asked the writer again.
fn unnamed_platform_run(llm: &ScriptedLlm) -> (Value, Vec<String>) {
    let p = project(llm, 1);
    let cfg = with_demo_registry_cut_to(&p, &["github-mcp"]);
    let cfg = format!("{cfg}\n[levels.l3]\nmax_chain_len = 3\nmax_chains_per_server = 1\n");
    std::fs::write(&p.config, cfg).unwrap();
    for args in
        [&["registry", "import"][..], &["filter"], &["levels", "profiles"], &["levels", "schemas"], &["levels", "l3"]]
    {
        p.ok(args);
    }
    let texts: Vec<String> = llm.requests().iter().map(Seen::all_text).collect();
    let first: Vec<&String> = texts.iter().filter(|t| t.contains("Write one request that needs every step")).collect();
    assert_eq!(first.len(), 1, "one chain: {first:?}");
    assert!(first[0].contains("\nPlatform: github"), "the writer is given the platform: {}", first[0]);
    let asked = texts.iter().filter(|t| t.contains(ASKED_AGAIN)).cloned().collect();
    (p.json("artifacts/levels-l3/queries.json"), asked)
}

const UNNAMED: &str = "platform not named: `github` does not occur";

#[test]
fn an_l3_query_that_does_not_name_its_platform_is_asked_again_and_kept_when_it_does() {
    if !assets_or_skip() {
        return;
    }
    let llm = ScriptedLlm::start(|seen: &Seen| unnamed_platform_answer(seen, true));
    let (out, asked) = unnamed_platform_run(&llm);
    // Asked once, with the platform, the refused query and the reason.
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains("\nPlatform: github\n"), "{}", asked[0]);
    assert!(asked[0].contains("The refused request:\nFor repo "), "{}", asked[0]);
    // The writer asked again is told the entity as well (the query names it, so only the
    // platform's reason is given).
    let entity = entity(&asked[0]);
    assert!(asked[0].contains(&format!("\nEntity: {entity}\n")) && entity != "acme-widgets", "{}", asked[0]);
    assert!(asked[0].contains(&format!("Why it was refused:\n{UNNAMED}")), "{}", asked[0]);
    let queries = out["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 1, "{out}");
    let q = &queries[0];
    let query = q["query"].as_str().unwrap();
    assert!(query.starts_with("Asked again: ") && query.ends_with(" on github"), "{q}");
    let rec = &out["plan_checks"][q["key"].as_str().unwrap()];
    assert_eq!(rec["asked_again"]["reason"], UNNAMED, "{rec}");
    assert!(rec["asked_again"]["query"].as_str().unwrap().starts_with(&format!("For repo {entity}: ")), "{rec}");
    // The exchange that asked again and the new query's annotation are parents of the sample.
    let exchanges = q["exchanges"].as_array().unwrap();
    for k in ["exchange", "annotated"] {
        let e = rec["asked_again"][k].as_str().unwrap_or_else(|| panic!("`{k}` recorded: {rec}"));
        assert!(exchanges.iter().any(|x| x == e), "{k} is a parent: {q}");
    }
    assert!(funnel_has(&out, "plan check: naming rule broken", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan check: naming rule broken after asking again", 0), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan check: asked again", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan check: kept after asking again", 1), "{}", out["funnel"]);
}

#[test]
fn an_l3_query_that_still_does_not_name_its_platform_when_asked_again_is_rejected_with_the_reason() {
    if !assets_or_skip() {
        return;
    }
    let llm = ScriptedLlm::start(|seen: &Seen| unnamed_platform_answer(seen, false));
    let (out, asked) = unnamed_platform_run(&llm);
    assert_eq!(asked.len(), 1, "asked again once, not twice: {asked:?}");
    assert_eq!(out["queries"], json!([]), "{out}");
    let head = format!("naming rule broken after asking again: first query: {UNNAMED}; asked again: ");
    let rejected: Vec<&Value> = out["funnel"]["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["reason"].as_str().unwrap().starts_with(&head))
        .collect();
    assert_eq!(rejected.len(), 1, "{out}");
    let reason = rejected[0]["reason"].as_str().unwrap();
    // The new query and the exchange that wrote it: the rejection is their only record.
    assert!(reason[head.len()..].starts_with("the new query \"Asked again: "), "{reason}");
    assert!(reason.contains("\" (exchange sha256:") && reason.ends_with(&format!("): {UNNAMED}")), "{reason}");
    let rec = &out["plan_checks"][rejected[0]["item"].as_str().unwrap()];
    assert_eq!(rec["rejected"], reason, "{rec}");
    assert_eq!(rec["asked_again"]["reason"], UNNAMED, "{rec}");
    // Refused before its plan was made: its dependencies were annotated for the first query only.
    assert!(rec["asked_again"].get("annotated").is_none(), "{rec}");
    let annotated = llm.requests().iter().filter(|s| s.all_text().contains("Request: Asked again: ")).count();
    assert_eq!(annotated, 0, "no call is spent on a refused query");
    assert!(funnel_has(&out, "plan check: naming rule broken", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan check: naming rule broken after asking again", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan check: rejected after asking again", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan checked", 0), "{}", out["funnel"]);
}

/// An L3 query about a famous entity in place of the invented one it was given (issue 38:
/// "the company 'Tesla'", whose ticker every agent knows, needs no lookup) is asked again
/// with the reason, and kept once it names the entity.
#[test]
fn an_l3_query_that_does_not_name_its_invented_entity_is_asked_again_with_the_reason() {
    if !assets_or_skip() {
        return;
    }
    let llm = ScriptedLlm::start(|seen: &Seen| {
        let text = seen.all_text();
        if text.contains("Write one request that needs every step") {
            let query = format!("For the Linux kernel{}: list its issues", on_platform(&text));
            return Answer::json(json!({"query": query, "chain_of_thought": "scripted"}));
        }
        answer(seen)
    });
    let (out, asked) = unnamed_platform_run(&llm);
    assert_eq!(asked.len(), 1, "{asked:?}");
    let entity = entity(&asked[0]);
    let why = format!("entity not named: `{entity}` does not occur");
    assert!(asked[0].contains(&format!("\nEntity: {entity}\n")), "{}", asked[0]);
    assert!(asked[0].contains(&format!("Why it was refused:\n{why}")), "{}", asked[0]);
    let q = &out["queries"][0];
    assert!(q["query"].as_str().unwrap().contains(&format!(" for {entity} on github")), "{out}");
    let rec = &out["plan_checks"][q["key"].as_str().unwrap()];
    assert_eq!(rec["asked_again"]["reason"], why.as_str(), "{rec}");
    assert!(funnel_has(&out, "plan check: naming rule broken", 1), "{}", out["funnel"]);
    assert!(funnel_has(&out, "plan check: kept after asking again", 1), "{}", out["funnel"]);
}

/// What the L1/L2 writer is asked when every candidate of an item was refused.
const REWRITE: &str = "was refused. Write it again";

/// The alpha-markets L1 writer of the rewrite tests: a function call for the company
/// profile (rewritten as asked when `mends`), a weather request for the stock quote, and
/// function calls for the rest, asked again or not.
fn l1_rewrite_answer(seen: &Seen, mends: bool) -> Answer {
    let text = seen.all_text();
    let tool = cap(r"Tool `([^`]+)`", &text);
    // A draft the answer schema allows (a function call it does not: `_` and `=` are out of
    // its pattern) and the copied-wording rule refuses: the tool's description.
    let copied = || format!("alpha-markets: {}", cap(r"Tool `[^`]+` \(server [^)]+\): ([^\n]+)", &text));
    if text.contains(REWRITE) {
        if mends && tool == "get_company_profile" {
            return Answer::json(
                json!({"queries": ["On alpha-markets, show me the company profile of Tesla (TSLA)."]}),
            );
        }
        return Answer::json(json!({"queries": [copied()]}));
    }
    if text.contains("direct-command requests") {
        let q = match tool.as_str() {
            "get_stock_quote" => "On alpha-markets, what will the weather be in Lyon tomorrow?".to_string(),
            _ => copied(),
        };
        return Answer::json(json!({"queries": [q]}));
    }
    answer(seen)
}

/// A project on the demo registry cut to alpha-markets, one L1 candidate per tool;
/// `registry import`, `filter`, `levels profiles` and `levels l1` run. Returns L1's
/// `queries.json` and the prompts that asked the writer again.
fn l1_rewrite_run(llm: &ScriptedLlm) -> (Value, Vec<String>) {
    let p = project(llm, 1);
    let cfg = with_demo_registry_cut_to(&p, &["alpha-markets-mcp"]) + "\n[levels.l1]\ncandidates = 1\n";
    std::fs::write(&p.config, cfg).unwrap();
    for args in [&["registry", "import"][..], &["filter"], &["levels", "profiles"], &["levels", "l1"]] {
        p.ok(args);
    }
    let asked: Vec<String> = llm.requests().iter().map(Seen::all_text).filter(|t| t.contains(REWRITE)).collect();
    (p.json("artifacts/levels-l1/queries.json"), asked)
}

fn rejection<'a>(out: &'a Value, item: &str) -> &'a str {
    let r = out["funnel"]["rejected"].as_array().unwrap().iter().find(|r| r["item"] == item);
    r.and_then(|r| r["reason"].as_str()).unwrap_or_else(|| panic!("{item} not rejected: {}", out["funnel"]))
}

#[test]
fn an_l1_query_refused_by_rule_is_asked_again_once_and_kept_when_mended() {
    let llm = ScriptedLlm::start(|seen: &Seen| l1_rewrite_answer(seen, true));
    let (out, asked) = l1_rewrite_run(&llm);
    // Asked again for the three copied descriptions and the weather request (with the query
    // and the reason).
    assert_eq!(asked.len(), 4, "{asked:?}");
    let profile = asked.iter().find(|t| t.contains("Tool `get_company_profile`")).expect("asked about the profile");
    assert!(
        profile.contains("The refused request:\nalpha-markets: Fetch the company profile for a ticker:"),
        "{profile}"
    );
    assert!(profile.contains("copies the description of `get_company_profile` (\"fetch the company"), "{profile}");
    assert!(profile.contains(r#"MUST mention the platform "alpha-markets" explicitly"#), "{profile}");
    let queries = out["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 1, "{out}");
    assert_eq!(queries[0]["key"], "tool:alpha-markets-mcp::get_company_profile");
    assert_eq!(queries[0]["query"], "On alpha-markets, show me the company profile of Tesla (TSLA).");
    // Its lineage: the first draft, the exchange that asked again, the verification.
    assert_eq!(queries[0]["exchanges"].as_array().unwrap().len(), 3, "{}", queries[0]);
    // The weather request for the stock quote: the verifier said yes, the rule no.
    let weather = asked.iter().find(|t| t.contains("Tool `get_stock_quote`")).expect("asked about the quote");
    let unrelated = "asks for nothing `get_stock_quote` does: shares no word with its name, description or inputs \
                     (the platform's name aside)";
    assert!(weather.contains(unrelated), "{weather}");
    let quote = rejection(&out, "alpha-markets-mcp::get_stock_quote");
    let again =
        format!("not verified: {unrelated}; asked again: copies the description of `get_stock_quote` (\"get the");
    assert!(quote.starts_with(&again), "{quote}");
    assert!(funnel_has(&out, "asked again", 4), "{}", out["funnel"]);
    assert!(funnel_has(&out, "verified after asking again", 1), "{}", out["funnel"]);
}

#[test]
fn an_l1_query_still_refused_when_asked_again_is_rejected_with_both_reasons() {
    let llm = ScriptedLlm::start(|seen: &Seen| l1_rewrite_answer(seen, false));
    let (out, asked) = l1_rewrite_run(&llm);
    assert_eq!(asked.len(), 4, "asked again once per item: {asked:?}");
    assert!(out["queries"].as_array().unwrap().is_empty(), "{out}");
    let why = "copies the description of `get_company_profile` (\"fetch the company profile for a ticker legal …\")";
    assert_eq!(
        rejection(&out, "alpha-markets-mcp::get_company_profile"),
        format!("not verified: {why}; asked again: {why}")
    );
    assert!(funnel_has(&out, "asked again", 4), "{}", out["funnel"]);
    assert!(funnel_has(&out, "verified after asking again", 0), "{}", out["funnel"]);
}

// ---------------------------------------------------------------------------------------
// ETOM's defects, its rule and ours side by side on the same input.

/// ETOM's parameter normalisation (lv3_generation.py): lowercase, strip one trailing "s",
/// `_` → `-`.
fn etom_norm(p: &str) -> String {
    let l = p.to_lowercase();
    l.strip_suffix('s').unwrap_or(&l).replace('_', "-")
}

/// ETOM's edge rule: B's normalised input names ⊆ A's normalised output names.
fn etom_feeds(a_out: &Value, b_in: &Value) -> bool {
    let names = |s: &Value| -> BTreeSet<String> {
        s["properties"].as_object().map(|p| p.keys().map(|k| etom_norm(k)).collect()).unwrap_or_default()
    };
    let (o, i) = (names(a_out), names(b_in));
    !o.is_empty() && !i.is_empty() && i.is_subset(&o)
}

#[test]
fn defect_plural_stripping_etom_vs_ours() {
    let out = json!({"properties": {"addresses": {"type": "array", "items": {"type": "string"}}}});
    let inp = json!({"properties": {"address": {"type": "string"}}});
    assert_eq!(etom_norm("address"), "addres", "ETOM strips one letter");
    assert!(!etom_feeds(&out, &inp), "ETOM: `addresses` (→ addresse) never feeds `address` (→ addres)");
    assert!(levels::l3::feeds(&out, &inp), "ours: a list of addresses feeds an address");
    // ETOM conflates `news` with `new`; we compare types where both schemas give them.
    let out = json!({"properties": {"new": {"type": "boolean"}}});
    let inp = json!({"properties": {"news": {"type": "array", "items": {"type": "object"}}}});
    assert!(etom_feeds(&out, &inp), "ETOM: a boolean `new` feeds a list of `news`");
    assert!(!levels::l3::feeds(&out, &inp), "ours: the types do not fit");
}

/// ETOM's maximality filter: drop a chain whose comma-joined text is a substring of a kept one.
fn etom_maximal(mut chains: Vec<Vec<String>>) -> Vec<Vec<String>> {
    chains.sort_by_key(|c| std::cmp::Reverse(c.len()));
    let mut kept: Vec<Vec<String>> = Vec::new();
    for c in chains {
        if !kept.iter().any(|k| k.join(",").contains(&c.join(","))) {
            kept.push(c);
        }
    }
    kept
}

#[test]
fn defect_substring_subpath_etom_vs_ours() {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let chains = vec![v(&["get_a", "update_bc"]), v(&["get_a", "update_b"]), v(&["x", "get_a", "update_bc"])];
    let etom = etom_maximal(chains.clone());
    let ours = levels::l3::maximal(chains);
    assert!(!etom.contains(&v(&["get_a", "update_b"])), "ETOM drops a,b as a substring of a,bc");
    assert!(ours.contains(&v(&["get_a", "update_b"])), "ours keeps it: it is no subpath");
    assert!(!ours.contains(&v(&["get_a", "update_bc"])), "a real subpath is still dropped");
    // ETOM's start filter is a substring test too: `target` contains `get`.
    assert!(
        ["start", "get"].iter().any(|k| "target_lookup".contains(k)),
        "ETOM keeps a chain starting at target_lookup"
    );
    assert!(!levels::l3::starts_well("target_lookup") && levels::l3::starts_well("getTarget"));
}

#[test]
fn defect_missing_efs_merge_etom_vs_ours() {
    // ETOM's L2 ground truth is the tool it wrote the query for, even when the tool has
    // equivalents (its shipped ids 1–604): `[[tool]]`.
    let set = vec!["A::x".to_string(), "B::y".to_string(), "C::z".to_string()];
    let etom: Vec<Vec<String>> = vec![vec![set[0].clone()]];
    let ours = levels::l2::ground_truth_rows(&set);
    assert_eq!(etom, [vec!["A::x".to_string()]]);
    assert_eq!(ours.len(), 3);
    for (i, row) in ours.iter().enumerate() {
        assert_eq!(row[0], set[i], "row {i} starts with its member");
        let mut r = row.clone();
        r.sort();
        assert_eq!(r, set, "and lists every member (symmetric)");
    }
    // So an agent choosing B::y is wrong under ETOM's ground truth and right under ours.
    assert!(!etom.iter().flatten().any(|t| t == "B::y"));
    assert!(ours.iter().flatten().any(|t| t == "B::y"));
}

#[test]
fn defect_forward_references_etom_vs_ours() {
    let chain: Vec<String> = ["list_repos", "get_repo", "create_issue"].iter().map(|s| s.to_string()).collect();
    // Step 1 says it needs step 2: a forward reference.
    let g = levels::l3::DepGraph {
        dependency_graph: vec![
            levels::l3::DepNode { id: 1, tool_name: "list_repos".into(), dependencies: vec![2] },
            levels::l3::DepNode { id: 2, tool_name: "get_repo".into(), dependencies: vec![] },
            levels::l3::DepNode { id: 3, tool_name: "create_issue".into(), dependencies: vec![1] },
        ],
    };
    let deps = levels::l3::annotation_deps(&chain, &g);
    // ETOM maps the ids and keeps them: 0-based, unfiltered.
    let etom = deps.clone();
    assert_eq!(etom, [vec![1], vec![], vec![0]]);
    assert!(etom.iter().enumerate().any(|(i, d)| d.iter().any(|&j| j >= i)), "ETOM keeps a forward reference");
    let ours = levels::repair_dependencies(&deps).unwrap();
    assert_eq!(ours.order, [1, 0, 2], "get_repo moves before list_repos");
    assert!(ours.deps.iter().enumerate().all(|(i, d)| d.iter().all(|&j| j < i)), "ours: all backward");
    // A cycle cannot be ordered: the chain is rejected with the reason.
    assert!(levels::repair_dependencies(&[vec![1], vec![0]]).unwrap_err().starts_with("cyclic"));
}

#[test]
fn defect_unseeded_sampling_etom_vs_ours() {
    use rand::{Rng, SeedableRng};
    let groups: BTreeMap<String, Vec<String>> =
        (0..8).map(|c| (format!("cat{c}"), (0..5).map(|s| format!("srv{c}-{s}")).collect())).collect();
    // ETOM draws from Python's global `random`, never seeded: its draw is a function of
    // process state it does not control. Two processes = two states.
    let etom = |state: u64| -> Vec<Vec<String>> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(state);
        let cats: Vec<&Vec<String>> = groups.values().collect();
        (0..20)
            .map(|_| {
                let k = rng.random_range(2..=4);
                let idx = rand::seq::index::sample(&mut rng, cats.len(), k).into_vec();
                idx.into_iter().map(|i| cats[i][rng.random_range(0..cats[i].len())].clone()).collect()
            })
            .collect()
    };
    assert_ne!(etom(1), etom(2), "ETOM: two runs sample different servers");
    // Ours: the project seed and the attempt number decide, nothing else.
    let ours = |seed: u64| -> Vec<Vec<String>> {
        (0..20).map(|n| levels::l4::sample_servers(&groups, seed, n, 2, 4).unwrap()).collect()
    };
    assert_eq!(ours(7), ours(7), "same seed, same draw");
    assert_ne!(ours(7), ours(8), "another seed, another draw");
    for draw in ours(7) {
        let cats: BTreeSet<&str> = draw.iter().map(|s| s.split('-').next().unwrap()).collect();
        assert_eq!(cats.len(), draw.len(), "one server per distinct category");
        assert!((2..=4).contains(&draw.len()));
    }
}

/// L5 with a judge and a red team that call every task doable (as the demo's 0.5B did):
/// `gaps.json` of a run with `min_cover_similarity` 0.3 and of one without.
fn l5_always_doable(min_cover: Option<f64>) -> Value {
    let llm = ScriptedLlm::start(|seen: &Seen| {
        let text = seen.all_text();
        if text.contains("Can the assistant fully perform tasks") {
            return Answer::json(json!({"answer": "YES", "reason": "scripted: always"}));
        }
        if text.contains("skeptical engineer") {
            return Answer::json(json!({"is_challenge_valid": true, "reasoning": "scripted: always"}));
        }
        if text.contains("look for a tool that solves it directly") {
            return Answer::json(json!({"analysis": "scripted: always", "final_verdict": "Partially Solvable"}));
        }
        if text.contains("Write a plan that serves the request") {
            return Answer::json(json!({"plan": "1. Use a tool anyway."}));
        }
        answer(seen)
    });
    let p = project(&llm, 1);
    if let Some(m) = min_cover {
        let cfg = std::fs::read_to_string(&p.config).unwrap();
        let cfg = cfg.replace("[levels.l5]\n", &format!("[levels.l5]\nmin_cover_similarity = {m}\n"));
        std::fs::write(&p.config, cfg).unwrap();
    }
    for args in [&["registry", "import"][..], &["filter"], &["embed"], &["levels", "l5"]] {
        p.ok(args);
    }
    let queries = p.json("artifacts/levels-l5/queries.json");
    let mut gaps = p.json("artifacts/levels-l5/gaps.json");
    gaps["kept"] = queries["queries"].clone();
    gaps["funnel"] = queries["funnel"].clone();
    gaps
}

#[test]
fn a_doable_with_no_capability_near_the_task_is_overruled_into_a_gap() {
    let gaps = l5_always_doable(Some(0.3));
    let restaurant = &gaps["checks"]["task:booking a restaurant table"];
    let overruled = restaurant["overruled"].to_string();
    assert!(overruled.contains("judge: no capability is near the task: the nearest, `"), "{restaurant}");
    // The red team is not asked: its "doable" would be overruled the same way.
    assert!(!overruled.contains("red team"), "{restaurant}");
    let why = restaurant["unchallenged"].as_str().unwrap();
    assert!(why.starts_with("no capability is near the task") && why.ends_with("would be overruled"), "{why}");
    assert_eq!(restaurant["challenge"], Value::Null, "{restaurant}");
    assert_eq!(restaurant["exchanges"].as_array().unwrap().len(), 1, "the judge's only: {restaurant}");
    assert_eq!(restaurant["gap"], true, "{restaurant}");
    let unchallenged = gaps["checks"].as_object().unwrap().values().filter(|t| t.get("unchallenged").is_some()).count();
    assert!(unchallenged >= 1, "{gaps}");
    let step = "gaps not put to the red team (no capability near)";
    assert!(funnel_has(&gaps, step, unchallenged as u64), "{}", gaps["funnel"]);
    assert!(gaps["confirmed"].as_array().unwrap().iter().any(|g| g == "booking a restaurant table"), "{gaps}");
    // The out-of-scope judge's "partly" and the writer's plan for those gaps' queries are
    // overruled the same way, so the queries are kept.
    let kept = gaps["kept"].as_array().unwrap();
    assert!(kept.iter().any(|q| q["category"] == "booking a restaurant table"), "{}", gaps["kept"]);
    // The self-check is not asked about such a query: its plan would be overruled too.
    let query_checks = gaps["query_checks"].as_object().unwrap();
    let restaurant_queries: Vec<&Value> =
        query_checks.values().filter(|q| q["gap"] == "booking a restaurant table").collect();
    assert!(!restaurant_queries.is_empty(), "{}", gaps["query_checks"]);
    for q in restaurant_queries {
        let overruled = q["overruled"].to_string();
        assert!(overruled.contains("self-check: not asked, no tool is near the query"), "{q}");
        assert_eq!(q["plan"], "", "{q}");
        assert_eq!(q["accepted"], true, "{q}");
        assert_eq!(q["exchanges"].as_array().unwrap().len(), 1, "the judge's only: {q}");
    }
    // Without the setting (ETOM's way) the same answers find no gap, and nothing is overruled.
    let trusting = l5_always_doable(None);
    assert_eq!(trusting["confirmed"], json!([]), "{trusting}");
    assert_eq!(trusting["kept"], json!([]), "{trusting}");
    assert!(!trusting.to_string().contains("overruled"), "{trusting}");
}
