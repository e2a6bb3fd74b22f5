//! `benchgen release` on N generated samples (half ETOM levels L1–L5, half FinMCP-style),
//! with catalogs and review decisions: wall time and peak memory of the release stage alone
//! (run in a child process so the peak is the release's). `cargo bench --bench release -- N`
//! (default 100,000); under `cargo test --all-targets` a small smoke run.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use serde_json::json;

fn write_stage(root: &std::path::Path, stage: &str, files: &[(&str, Vec<u8>)]) {
    let dir = root.join("artifacts").join(stage);
    std::fs::create_dir_all(&dir).unwrap();
    let mut outputs = BTreeMap::new();
    for (rel, bytes) in files {
        std::fs::write(dir.join(rel), bytes).unwrap();
        outputs.insert(rel.to_string(), benchgen::store::sha256_hex(bytes));
    }
    let (run_id, _) = benchgen::ledger::Ledger::open(&root.join("artifacts"))
        .unwrap()
        .record_run(stage, "bench", benchgen::stage::CODE_VERSION, &[])
        .unwrap();
    let m = benchgen::stage::Manifest {
        stage: stage.into(),
        stage_version: 1,
        code_version: benchgen::stage::CODE_VERSION.into(),
        config_hash: "bench".into(),
        inputs: BTreeMap::new(),
        prompts: BTreeMap::new(),
        outputs,
        counts: BTreeMap::new(),
        run_id,
        started_at: String::new(),
        finished_at: String::new(),
        duration_ms: 0,
    };
    std::fs::write(dir.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
}

fn generate(root: &std::path::Path, n: usize) {
    let servers = 200;
    let tools_per = 10;
    let mut catalog = Vec::new();
    for s in 0..servers {
        let tools: Vec<_> = (0..tools_per)
            .map(|t| json!({"id": format!("srv{s}::tool{t}"), "name": format!("tool{t}"), "description": format!("tool {t} of server {s}"), "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}))
            .collect();
        catalog.push(json!({"name": format!("srv{s}"), "description": "d", "summary": "", "url": "", "categories": [format!("cat{}", s % 12)], "tools": tools}));
    }
    write_stage(root, "filter", &[("catalog.json", serde_json::to_vec(&json!({"servers": catalog})).unwrap())]);
    let log_tools: Vec<_> = (0..60)
        .map(|t| json!({"name": format!("fin_tool{t}"), "description": "d", "input_schema": {"type": "object"}}))
        .collect();
    write_stage(root, "logs-import", &[("catalog.json", serde_json::to_vec(&log_tools).unwrap())]);

    let mut levels: Vec<(String, String)> = Vec::new();
    let mut fins: Vec<(String, String)> = Vec::new();
    let tool = |i: usize| format!("srv{}::tool{}", i % servers, (i / servers) % tools_per);
    for i in 0..n {
        let k = i % 10;
        if k < 5 {
            let level = k + 1;
            let id = format!("L{level}-{}", i / 10 + 1);
            let plan = match level {
                1 => json!([{"alternatives": [tool(i)], "group": 0}]),
                2 => json!([{"alternatives": [tool(i), tool(i + 1), tool(i + 2)], "group": 0}]),
                3 => {
                    json!([{"alternatives": [tool(i)], "group": 0}, {"alternatives": [tool(i + 3)], "group": 1, "depends_on": [0]}])
                }
                4 => {
                    json!([{"alternatives": [tool(i)], "group": 0}, {"alternatives": [tool(i + 7), tool(i + 8)], "group": 1, "depends_on": [0]}, {"alternatives": [tool(i + 9)], "group": 2, "depends_on": [1]}])
                }
                _ => json!([]),
            };
            let s = json!({"id": id, "family": "etom", "kind": format!("L{level}"), "scenario": [format!("cat{}", i % 12)],
                "turns": [{"user": format!("request number {i} for the tools"), "reference_plan": plan}],
                "out_of_scope": level == 5, "difficulty": "easy", "provenance_id": format!("levels:{i}")});
            levels.push((id, s.to_string()));
        } else {
            let kind = ["single_tool", "multi_tool", "multi_turn", "multi_tool", "single_tool"][k - 5];
            let t = |j: usize| format!("fin_tool{}", (i + j) % 60);
            let call = |j: usize, g: u32| json!({"alternatives": [t(j)], "group": g});
            let traj = |j: usize| json!({"tool": t(j), "arguments": {"q": i}, "result": format!("result {i} {j}")});
            let turns = match kind {
                "single_tool" => {
                    json!([{"user": format!("question {i}"), "reference_plan": [call(0, 0)], "gold_reply": "answer", "trajectory": [[traj(0)]]}])
                }
                "multi_tool" => {
                    json!([{"user": format!("question {i}"), "reference_plan": [call(0, 0), call(1, 0), call(2, 1)], "gold_reply": "answer", "trajectory": [[traj(0), traj(1)], [traj(2)]]}])
                }
                _ => {
                    json!([{"user": format!("question {i}"), "reference_plan": [call(0, 0)], "gold_reply": "a"}, {"user": "and then?", "reference_plan": [call(3, 0)], "gold_reply": "b"}])
                }
            };
            let id = format!("fin-{i:07}");
            let s = json!({"id": id, "family": "finmcp", "kind": kind, "scenario": ["finance", format!("sub{}", i % 7)], "turns": turns,
                "out_of_scope": false, "difficulty": "easy", "provenance_id": format!("sample:{id}"), "author": "llm:synth"});
            fins.push((id, s.to_string()));
        }
    }
    levels.sort();
    fins.sort();
    let mut decisions: Vec<(String, String)> = Vec::new();
    for (stage, items) in [("levels-export", &levels), ("validate", &fins)] {
        let mut buf = Vec::new();
        for (k, (id, line)) in items.iter().enumerate() {
            writeln!(buf, "{line}").unwrap();
            let s: benchgen::model::Sample = serde_json::from_str(line).unwrap();
            // Every 7th sample of each pool is rejected (about 14 %).
            let d = if k % 7 == 3 { "rejected" } else { "accepted" };
            decisions.push((id.clone(), json!({"id": id, "content_hash": s.content_hash(), "decision": d, "decided_by": "llm", "reviewers": [{"scores": {"a": 4}}]}).to_string()));
        }
        write_stage(root, stage, &[("samples.jsonl", buf)]);
    }
    decisions.sort();
    let mut buf = Vec::new();
    for (_, l) in decisions {
        writeln!(buf, "{l}").unwrap();
    }
    write_stage(root, "review-merge", &[("decisions.jsonl", buf)]);
    std::fs::create_dir_all(root.join("pipeline")).unwrap();
    std::fs::write(root.join("pipeline/bench.toml"), "[release]\nname = \"bench\"\nversion = \"1.0.0\"\n").unwrap();
}

/// Run the release stage once in this process and print one row.
fn child(root: &str) {
    let settings = benchgen::settings::Settings::load(&std::path::Path::new(root).join("pipeline/bench.toml")).unwrap();
    let printer = benchgen::printer::Printer { quiet: true, verbose: 0, json: false, announce: false };
    let t0 = Instant::now();
    let rep = benchgen::stage::execute(&settings, &printer, &benchgen::release::ReleaseStage, true, &BTreeMap::new())
        .expect("release");
    println!(
        "release: {} samples released of {} in {:.2} s, peak {:.0} MiB",
        rep.counts["samples"],
        rep.counts["pool"],
        t0.elapsed().as_secs_f64(),
        common::peak_rss_mib()
    );
    let dir = std::path::Path::new(root).join("release/bench-1.0.0");
    let size: u64 = std::fs::read_dir(&dir).unwrap().flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum();
    println!("release folder: {:.1} MB", size as f64 / 1e6);
}

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let benching = all.iter().any(|a| a == "--bench");
    let args: Vec<String> = all.into_iter().filter(|a| a != "--bench").collect();
    if args.first().map(String::as_str) == Some("--child") {
        child(&args[1]);
        return;
    }
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(if benching { 100_000 } else { 500 });
    // RELEASE_BENCH_DIR keeps the project and its release (to look at); default: a temp dir.
    let tmp = tempfile::tempdir().expect("tempdir");
    let root =
        std::env::var_os("RELEASE_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| tmp.path().to_path_buf());
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("bench dir");
    let t0 = Instant::now();
    generate(&root, n);
    println!("generated {n} samples in {:.1} s", t0.elapsed().as_secs_f64());
    let exe = std::env::current_exe().expect("own path");
    let status = std::process::Command::new(exe).arg("--child").arg(&root).status().expect("child");
    assert!(status.success(), "release failed");
}
