//! Synthesis benchmark (scripts/bench.d/60-synth.sh; nothing asserted): `synth chains` and
//! `execute` on N chains (default 1,000) of a generated log domain (40 tools, 10
//! sub-scenarios, 800 sessions; the demo's is too small for 1,000 distinct chains), every LLM call answered
//! by the scripted test server after a fixed 200 ms, concurrency 32, executions against the
//! built-in domain sandbox. Prints samples/s, the share of the endpoint ceiling (32 calls in
//! flight / 0.2 s = 160 calls/s, so a chain of k LLM calls has a ceiling of 160/k chains/s)
//! and CPU per sample (process CPU, so it includes the in-process scripted server).
//!
//! `cargo bench --bench synth -- [CHAINS]`. Figures in docs/synth.md.

#[path = "../tests/it/support/scripted_llm.rs"]
mod scripted_llm;
// scripted_llm answers at a schema's edges with the tests' edge generator.
#[path = "../tests/it/support/schema_edges.rs"]
mod schema_edges;

mod common;

use std::path::Path;
use std::time::Instant;

use benchgen::printer::Printer;
use benchgen::settings::Settings;
use benchgen::stage::Ctx;
use scripted_llm::{Answer, ScriptedLlm, Seen};
use serde_json::{Value, json};

/// The scripted model: judges keep everything, the writer lists the chain, the agent
/// follows it one tool per group, then answers.
fn rule(seen: &Seen) -> Answer {
    let t = seen.all_text();
    if seen.body.get("tools").is_some() {
        let msgs = seen.body["messages"].as_array().unwrap();
        let last_user = msgs.iter().rposition(|m| m["role"] == "user").unwrap();
        let user = msgs[last_user]["content"].as_str().unwrap_or_default();
        let chain: Vec<&str> = user.split("CHAIN: ").nth(1).map(|c| c.split(" > ").collect()).unwrap_or_default();
        let done = msgs[last_user..].iter().filter(|m| m["role"] == "assistant").count();
        return match chain.get(done) {
            Some(tool) => {
                let spec = seen.body["tools"].as_array().unwrap().iter().find(|s| s["function"]["name"] == *tool);
                let mut args = serde_json::Map::new();
                for r in spec.and_then(|s| s["function"]["parameters"]["required"].as_array()).into_iter().flatten() {
                    args.insert(r.as_str().unwrap().into(), json!("X-1"));
                }
                Answer::ToolCalls(vec![(tool.to_string(), Value::Object(args))])
            }
            None => Answer::text("done"),
        }
        .after(200);
    }
    let v = if t.contains("genuine need") {
        json!({"genuine": true, "reason": "r"})
    } else if t.contains("satisfactory") {
        json!({"satisfactory": true, "reason": "r"})
    } else if t.contains("must run after it") {
        json!({"dependent": true, "reason": "r"})
    } else if t.contains("Write ONE user request") {
        let tools: Vec<&str> = t
            .lines()
            .filter(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()) && l.contains(". `"))
            .filter_map(|l| l.split('`').nth(1))
            .collect();
        json!({"query": format!("CHAIN: {}", tools.join(" > "))})
    } else {
        json!({"scenario": "Monitoring-Alerts"})
    };
    Answer::json(v).after(200)
}

/// A generated domain large enough for N distinct chains: 40 tools, 10 sub-scenarios, 600
/// multi-tool sessions of 4 sequential calls (seeded), as generic event JSONL, plus 200
/// single-tool sessions for the seed pool.
fn write_domain(dir: &Path) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let tools: Vec<String> = (0..40).map(|i| format!("tool_{i:02}")).collect();
    let catalog = json!({"tools": tools.iter().map(|t| json!({
        "name": t, "description": format!("{t} does one step"),
        "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    })).collect::<Vec<_>>()});
    std::fs::create_dir_all(dir.join("raw")).unwrap();
    std::fs::write(dir.join("raw/catalog.json"), catalog.to_string()).unwrap();
    let mut lines = Vec::new();
    for s in 0..800 {
        let sub = format!("Area{}-Task{}", s % 5, s % 10);
        let n = if s < 600 { 4 } else { 1 };
        // Tools of a sub-scenario come from its own band of 12, so pairs co-occur per band.
        let band = (s % 10) * 3;
        for k in 0..n {
            let tool = &tools[(band + rng.random_range(0..12)) % 40];
            let mut ev = json!({"session": format!("s{s:04}"), "tool": tool, "ts_start": 1000 * k,
                "ts_end": 1000 * k + 500, "arguments": {"id": format!("X-{}", rng.random_range(0..50))},
                "result": {"ok": true, "id": format!("X-{}", rng.random_range(0..50))}});
            if k == 0 {
                ev["user"] = json!(format!("please handle case {s}"));
                ev["scenario"] = json!(sub);
            }
            if k == n - 1 {
                ev["answer"] = json!("handled");
            }
            lines.push(ev.to_string());
        }
    }
    std::fs::write(dir.join("raw/events.jsonl"), lines.join("\n") + "\n").unwrap();
}

fn project(dir: &Path, base_url: &str, chains: usize) -> Settings {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    write_domain(dir);
    std::fs::create_dir_all(dir.join("pipeline/prompts")).unwrap();
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
        let f = format!("pipeline/prompts/{t}.md");
        std::fs::copy(repo.join(&f), dir.join(&f)).unwrap();
    }
    let role = format!(
        "provider = \"vllm\"\nbase_url = \"{base_url}\"\nmodel = \"scripted\"\nmax_concurrency = 32\ntimeout_s = 60"
    );
    let cfg = format!(
        r#"[project]
seed = 5

[[logs.sources]]
name = "gen"
path = "raw/events.jsonl"
format = "events"

[logs.catalog]
path = "raw/catalog.json"

[logs.curate]
concurrency = 32
llm_sample = 32

[graph]
role = "judge"
min_support = 1
concurrency = 32

[execute]
concurrency = 32

[synth.chains]
per_sub_scenario = {per_sub}
lengths = {{ "2" = 1, "3" = 1, "4" = 1, "5" = 1 }}
max_chains = {chains}
paths_per_pair = 50
concurrency = 32

[llm.roles.judge]
{role}

[llm.roles.synth]
{role}
"#,
        // 1.5 × the even share: the generated graph has few direct edges, so length 2
        // falls short and the longer lengths make up for it (`max_chains` cuts to N).
        per_sub = chains * 3 / 20 + 4,
    );
    std::fs::write(dir.join("pipeline/b.toml"), cfg).unwrap();
    Settings::load(&dir.join("pipeline/b.toml")).unwrap()
}

fn main() -> anyhow::Result<()> {
    if !common::benching("synth") {
        return Ok(());
    }
    let n: usize = std::env::args().skip(1).find(|a| !a.starts_with('-')).and_then(|a| a.parse().ok()).unwrap_or(1000);
    // SAFETY: set before any thread reads the environment.
    unsafe { std::env::set_var("BENCHGEN_ANON_SECRET", "bench") };
    let server = ScriptedLlm::start(rule);
    let dir = tempfile::tempdir()?;
    let s = project(dir.path(), &server.base_url(), n);
    let printer = Printer { quiet: true, verbose: 0, json: false, announce: false };
    let ctx = Ctx::new(&s, &printer);
    benchgen::pipeline::run(&ctx, None, Some("graph-build"), false)?;
    let load_before = common::loadavg();
    let calls0 = server.count();
    let (cpu0, t0) = (common::cpu_seconds(), Instant::now());
    benchgen::pipeline::run(&ctx, Some("synth-chains"), Some("synth-chains"), false)?;
    let (chains_wall, chains_calls) = (t0.elapsed().as_secs_f64(), server.count() - calls0);
    let (calls1, t1) = (server.count(), Instant::now());
    benchgen::pipeline::run(&ctx, Some("execute"), Some("execute"), false)?;
    let (exec_wall, exec_calls) = (t1.elapsed().as_secs_f64(), server.count() - calls1);
    let cpu = common::cpu_seconds() - cpu0;
    let wall = t0.elapsed().as_secs_f64();
    let summary: Value = serde_json::from_slice(&std::fs::read(dir.path().join("artifacts/execute/summary.json"))?)?;
    let chains = summary["queries"].as_u64().unwrap_or(0) as f64;
    let calls = (chains_calls + exec_calls) as f64;
    let ceiling_calls = 32.0 / 0.2;
    println!("synthesise + execute {chains} chains; scripted endpoint 200 ms per call, concurrency 32:");
    println!("  load average before / after: {load_before} / {}", common::loadavg());
    println!(
        "  synth chains: {chains_wall:.1} s, {chains_calls} LLM calls ({:.1} calls/s)",
        chains_calls as f64 / chains_wall
    );
    println!(
        "  execute:      {exec_wall:.1} s, {exec_calls} LLM calls ({:.1} calls/s), {} MCP calls, chains kept: {}",
        exec_calls as f64 / exec_wall,
        summary["counts"]["calls"],
        summary["counts"]["chain_preserved"]
    );
    println!(
        "  total:        {wall:.1} s, {:.2} samples/s, {:.1} LLM calls/s = {:.1}% of the ceiling ({ceiling_calls:.0} calls/s); CPU {:.1} ms per sample",
        chains / wall,
        calls / wall,
        100.0 * calls / wall / ceiling_calls,
        1000.0 * cpu / chains.max(1.0)
    );
    Ok(())
}
