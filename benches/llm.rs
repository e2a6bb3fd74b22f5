//! LLM layer figures for the README (run by scripts/bench.d/10-llm.sh; nothing asserted).
//!
//! 1. Throughput against the scripted test server at a fixed 200 ms latency with
//!    concurrency C = 1, 8, 64: achieved calls/s against the ceiling C / 0.2 s, and CPU time
//!    per call (process CPU, so it includes the in-process test server: an upper bound).
//! 2. The local model (llama-server via `provider = "local"`): tokens/s and seconds per
//!    typical call (the filter classifier's prompt and schema), for each GGUF in the cache.

#[path = "../tests/it/support/scripted_llm.rs"]
mod scripted_llm;
// scripted_llm answers at a schema's edges with the tests' edge generator.
#[path = "../tests/it/support/schema_edges.rs"]
mod schema_edges;

mod common;

use std::path::Path;
use std::time::Instant;

use benchgen::ledger::Ledger;
use benchgen::llm::{LlmClient, LlmMode, Prompt};
use benchgen::settings::Settings;
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Verdict {
    reason: String,
    verdict: String,
}

fn project(dir: &Path, role: &str) -> Settings {
    std::fs::create_dir_all(dir.join("pipeline/prompts")).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(repo.join("pipeline/prompts/filter-classify.md"), dir.join("pipeline/prompts/filter-classify.md"))
        .unwrap();
    std::fs::write(dir.join("pipeline/prompts/b.md"), "Item {{ i }}: answer.\n").unwrap();
    std::fs::write(dir.join("pipeline/b.toml"), format!("[llm.roles.r]\n{role}\n")).unwrap();
    Settings::load(&dir.join("pipeline/b.toml")).unwrap()
}

fn client(s: &Settings) -> LlmClient {
    let run = Ledger::open(&s.artifacts).unwrap().begin_run("bench", "", "0").unwrap();
    LlmClient::with_mode(s, "bench", run, LlmMode::Live).unwrap()
}

fn throughput(levels: &[usize], rounds: usize) {
    let server = scripted_llm::ScriptedLlm::start(|_| {
        scripted_llm::Answer::json(json!({"reason": "r", "verdict": "keep"})).after(200)
    });
    println!("scripted server at 200 ms per call (process CPU includes the test server):");
    println!("{:>4} {:>6} {:>9} {:>9} {:>7} {:>12}", "C", "calls", "calls/s", "ceiling", "share", "cpu_ms/call");
    for &c in levels {
        let dir = tempfile::tempdir().unwrap();
        let s = project(
            dir.path(),
            &format!(
                "provider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"m\"\nmax_concurrency = {c}\ntimeout_s = 30",
                server.base_url()
            ),
        );
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let cl = client(&s);
        let n = (c * rounds).max(rounds * 2 + 4);
        let cpu0 = common::cpu_seconds();
        let t0 = Instant::now();
        rt.block_on(async {
            let calls = (0..n).map(|i| {
                let cl = cl.clone();
                async move { cl.typed::<Verdict>("r", &Prompt::new("b", json!({"i": i})), &format!("i{i}")).await }
            });
            for r in futures::future::join_all(calls).await {
                r.unwrap();
            }
        });
        let wall = t0.elapsed().as_secs_f64();
        let cpu = common::cpu_seconds() - cpu0;
        let rate = n as f64 / wall;
        let ceiling = c as f64 / 0.2;
        println!(
            "{c:>4} {n:>6} {rate:>9.1} {ceiling:>9.1} {:>6.1}% {:>12.3}",
            100.0 * rate / ceiling,
            1000.0 * cpu / n as f64
        );
    }
}

fn local_model() {
    let cache = benchgen::llm::config::cache_dir();
    let bin = cache.join("llm/build/bin/llama-server");
    for model in [benchgen::llm::config::SMALL_LOCAL_MODEL, benchgen::llm::config::DEFAULT_LOCAL_MODEL] {
        let path = cache.join("llm/models").join(model);
        if !bin.is_file() || !path.is_file() {
            println!("local model {model}: not in the cache (run `make setup`)");
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        let s = project(
            dir.path(),
            &format!(
                "provider = \"local\"\nmodel_path = \"{}\"\ntemperature = 0.0\nseed = 1\nmax_tokens = 200\nmax_concurrency = 1",
                path.display()
            ),
        );
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let cl = client(&s);
        let items = [
            ("convert_currency", "Convert an amount between currencies at the current mid-market rate."),
            ("echo", "Echo the input back."),
            ("get_current_weather", "Current weather for a city from a weather service."),
            ("add", "Add two numbers."),
        ];
        // The first call includes the server start; time it separately.
        let mut per_call = Vec::new();
        for (i, (name, desc)) in items.iter().enumerate() {
            let vars = json!({
                "target": "tool", "name": name, "description": desc, "server_name": "demo",
                "server_description": "a demo server", "server_tools": [name], "rule_id": "r",
                "rule_class": "trivial", "rule_reason": "maybe trivial"});
            let t = Instant::now();
            rt.block_on(cl.typed::<Verdict>("r", &Prompt::new("filter-classify", vars), name)).unwrap();
            if i > 0 {
                per_call.push(t.elapsed().as_secs_f64());
            } else {
                println!("local model {model}: first call incl. server start {:.1} s", t.elapsed().as_secs_f64());
            }
        }
        drop(cl);
        // Token rates from llama-server's own timings, recorded in the ledger.
        let l = Ledger::open(&s.artifacts).unwrap();
        let mut st = l.connection().prepare("SELECT payload FROM events WHERE kind = 'llm.exchange'").unwrap();
        let (mut pn, mut pms, mut gn, mut gms) = (0.0, 0.0, 0.0, 0.0);
        for p in st.query_map([], |r| r.get::<_, String>(0)).unwrap() {
            let v: serde_json::Value = serde_json::from_str(&p.unwrap()).unwrap();
            let t = &v["response"]["timings"];
            pn += t["prompt_n"].as_f64().unwrap_or(0.0);
            pms += t["prompt_ms"].as_f64().unwrap_or(0.0);
            gn += t["predicted_n"].as_f64().unwrap_or(0.0);
            gms += t["predicted_ms"].as_f64().unwrap_or(0.0);
        }
        let mean = per_call.iter().sum::<f64>() / per_call.len().max(1) as f64;
        println!(
            "local model {model}: {:.1} s per typical call (mean of {}), prompt {:.0} tok/s, generation {:.1} tok/s (JSON-schema grammar), {:.0} prompt + {:.0} generated tokens per call",
            mean,
            per_call.len(),
            pn / (pms / 1000.0).max(1e-9),
            gn / (gms / 1000.0).max(1e-9),
            pn / items.len() as f64,
            gn / items.len() as f64
        );
    }
}

fn main() {
    // `cargo bench --bench llm -- throughput|local` runs one part; default both.
    // `cargo test --all-targets` runs this target without `--bench`: then only a quick
    // throughput smoke run (no local model) keeps the test suite fast.
    let args: Vec<String> = std::env::args().collect();
    let only = |p: &str| args.iter().any(|a| a == p);
    if !only("--bench") {
        throughput(&[1, 8], 2);
        return;
    }
    let all = !only("throughput") && !only("local");
    if all || only("throughput") {
        throughput(&[1, 8, 64], 8);
    }
    if all || only("local") {
        local_model();
    }
}
