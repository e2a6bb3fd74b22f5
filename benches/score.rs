//! Throughput and peak memory of `benchgen score` (not a test: prints figures for the README).
//!
//! Generates N unified samples across every kind (ETOM L1–L5, FinMCP single-tool, multi-tool,
//! multi-turn) and N predictions (mostly right, some perturbed, wrong, empty or malformed) in a
//! temp dir (or `SCORE_BENCH_DIR`, kept for profiling), then scores them in each mode through the
//! library, each mode in a fresh child process, timing the whole run (reading, scoring,
//! aggregation, rendering) and reading that process's peak resident memory (`VmHWM`).
//!
//! `cargo bench --bench score -- [N]` (default 1,000,000); `-- --etom DIR` scores the ETOM
//! level files and predictions in DIR (scripts/bench.d/etom_gen.py) instead.

mod common;

use std::io::Write;
use std::time::Instant;

use std::collections::HashMap;

use benchgen::score::{Mode, Options, Pred, ScoreCtx, report, score_item};

/// splitmix64: a fixed, dependency-free stream so every run scores the same data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const KINDS: [(&str, &str, u64); 8] = [
    ("etom", "L1", 15),
    ("etom", "L2", 15),
    ("etom", "L3", 15),
    ("etom", "L4", 10),
    ("etom", "L5", 5),
    ("finmcp", "single_tool", 15),
    ("finmcp", "multi_tool", 15),
    ("finmcp", "multi_turn", 10),
];

fn tool(fam: &str, rng: &mut Rng) -> String {
    let t = rng.below(2000);
    if fam == "etom" { format!("server{}::tool{t}", t % 300) } else { format!("Tool{}", t % 65) }
}

/// One sample line and its prediction line.
fn generate(i: usize, rng: &mut Rng) -> (String, String) {
    let mut pick = rng.below(100);
    let (fam, kind, _) = *KINDS
        .iter()
        .find(|(_, _, w)| {
            if pick < *w {
                true
            } else {
                pick -= w;
                false
            }
        })
        .expect("weights sum to 100");
    let id = format!("s{i}");
    // Reference: turns of (alternatives, group, depends_on).
    let n_turns = if kind == "multi_turn" { 2 + rng.below(4) as usize } else { 1 };
    let mut turns = Vec::new();
    for _ in 0..n_turns {
        let n = match kind {
            "L1" | "L2" | "single_tool" => 1,
            "L5" => 0,
            "L3" => 2 + rng.below(5) as usize,
            "L4" => 2 + rng.below(7) as usize,
            "multi_tool" => 2 + rng.below(12) as usize,
            _ => rng.below(4) as usize,
        };
        let mut calls = Vec::new();
        let mut group = 0u32;
        for c in 0..n {
            let n_alt = match kind {
                "L2" => 1 + rng.below(4) as usize,
                "L4" => 1 + rng.below(3) as usize,
                _ => 1,
            };
            let alts: Vec<String> = (0..n_alt).map(|_| tool(fam, rng)).collect();
            let deps: Vec<usize> =
                if matches!(kind, "L3" | "L4") && c > 0 && rng.below(2) == 0 { vec![c - 1] } else { vec![] };
            if c > 0 && (!deps.is_empty() || rng.below(3) > 0) {
                group += 1;
            }
            calls.push((alts, group, deps));
        }
        turns.push(calls);
    }
    let n_calls: usize = turns.iter().map(Vec::len).sum();
    let difficulty = match n_calls {
        0..=5 => "easy",
        6..=10 => "medium",
        _ => "hard",
    };
    let plan_json = |calls: &Vec<(Vec<String>, u32, Vec<usize>)>| {
        calls
            .iter()
            .map(|(a, g, d)| serde_json::json!({"alternatives": a, "group": g, "depends_on": d}))
            .collect::<Vec<_>>()
    };
    let sample = serde_json::json!({
        "id": id, "family": fam, "kind": kind,
        "scenario": [format!("main{}", rng.below(10)), format!("sub{}", rng.below(33))],
        "turns": turns.iter().map(|t| serde_json::json!({"user": "request text of a typical length for a benchmark query", "reference_plan": plan_json(t)})).collect::<Vec<_>>(),
        "out_of_scope": kind == "L5", "difficulty": difficulty, "provenance_id": format!("p{i}"),
    });
    // Prediction: 60 % oracle, 15 % perturbed, 10 % wrong tool, 7 % empty, 3 % refusal,
    // 4 % ETOM orchestrator style, 1 % malformed.
    let r = rng.below(100);
    let pred = if r < 4 {
        let items: Vec<String> = turns
            .iter()
            .flatten()
            .map(|(a, _, _)| {
                let (s, t) = a[0].split_once("::").unwrap_or(("", &a[0]));
                serde_json::json!({"server": s, "tool_name": t}).to_string()
            })
            .collect();
        serde_json::json!({"id": id, "prediction": items})
    } else if r < 5 {
        serde_json::json!({"id": id, "turns": "not a list"})
    } else if r < 8 {
        serde_json::json!({"id": id, "refusal": true})
    } else if r < 15 {
        serde_json::json!({"id": id, "turns": []})
    } else {
        let perturb = r < 30;
        let wrong = (30..40).contains(&r);
        let turns: Vec<_> = turns
            .iter()
            .map(|calls| {
                let mut out = Vec::new();
                for (a, g, _) in calls {
                    let t = if wrong { tool(fam, rng) } else { a[rng.below(a.len() as u64) as usize].clone() };
                    if perturb && rng.below(4) == 0 {
                        continue;
                    }
                    out.push(serde_json::json!({"tool": t, "group": g}));
                    if perturb && rng.below(4) == 0 {
                        out.push(serde_json::json!({"tool": t, "group": g + 1}));
                    }
                }
                serde_json::json!({"calls": out})
            })
            .collect();
        serde_json::json!({"id": id, "turns": turns})
    };
    (sample.to_string(), pred.to_string())
}

/// User + system CPU time of this process so far (`/proc/self/stat`, clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Score once in this process and print one row (run as a child so the peak is this run's).
fn child(mode: &str, pred: &str, n: usize, benches: &[String]) {
    let m = match mode {
        "corrected" => Mode::Corrected,
        "etom" => Mode::CompatEtom,
        _ => Mode::CompatFinmcp,
    };
    let opts = Options {
        benches: benches.iter().map(Into::into).collect(),
        pred: pred.into(),
        bench_format: None,
        pred_format: None,
        etom_level: None,
        mode: m,
    };
    // Loading the benchmark alone first, to separate it from scoring the predictions.
    let cpu0 = cpu_seconds();
    let loaded = benchgen::score::input::load_benches(&opts).expect("load");
    let load_cpu = cpu_seconds() - cpu0;
    // The scoring core: every prediction already read, `score_item` alone (wall clock: the
    // CPU clock ticks in 10 ms).
    let core = {
        let ctx = ScoreCtx { mode: m, universe: loaded.tools.clone() };
        let index: HashMap<&str, usize> = loaded.items.iter().enumerate().map(|(i, it)| (it.id.as_str(), i)).collect();
        let mut preds: Vec<(usize, Pred)> = Vec::with_capacity(n);
        benchgen::score::input::read_predictions(&opts, &loaded, |id, _, pred, _| {
            if let Some(&i) = id.and_then(|id| index.get(id)) {
                preds.push((i, pred));
            }
        })
        .expect("read predictions");
        let t = Instant::now();
        let mut em = 0usize;
        for (i, p) in &preds {
            let r = score_item(&ctx, &loaded.items[*i], Some(p));
            em += usize::from(r.em);
            std::hint::black_box(r);
        }
        std::hint::black_box(em);
        preds.len() as f64 / t.elapsed().as_secs_f64()
    };
    drop(loaded);
    let cpu0 = cpu_seconds();
    let t = Instant::now();
    let rep = benchgen::score::run(&opts).expect("score");
    let text = report::render_text(&rep);
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    std::hint::black_box(text);
    let name = if mode == "corrected" { "corrected".to_string() } else { format!("compat {mode}") };
    println!(
        "{name:<14} {:>8} {:>8.2} {:>8.2} {:>10.0} {:>10.0} {:>14.0} {:>12.0} {:>9.0}",
        rep.samples,
        secs,
        cpu,
        n as f64 / secs,
        n as f64 / cpu,
        n as f64 / (cpu - load_cpu).max(1e-9),
        core,
        common::peak_rss_mib()
    );
}

/// The header of [`child`]'s rows.
fn header() {
    println!(
        "{:<14} {:>8} {:>8} {:>8} {:>10} {:>10} {:>14} {:>12} {:>9}",
        "mode", "scored", "wall s", "cpu s", "pred/s", "pred/s cpu", "pred/s cpu *", "core pred/s", "peak MiB"
    );
    println!(
        "(cpu = user + system time of the run; * = excluding the time to load the benchmark; core = `score_item` alone on predictions already read)"
    );
}

fn run_children(modes: &[&str], pred: &std::path::Path, n: usize, benches: &[std::path::PathBuf]) {
    let exe = std::env::current_exe().expect("own path");
    for mode in modes {
        let status = std::process::Command::new(&exe)
            .args(["--child", mode])
            .arg(pred)
            .arg(n.to_string())
            .args(benches)
            .status()
            .expect("run child");
        assert!(status.success(), "child {mode} failed");
    }
}

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this target without it,
    // and then a small smoke run keeps the test suite fast.
    let benching = all.iter().any(|a| a == "--bench");
    let args: Vec<String> = all.into_iter().filter(|a| a != "--bench").collect();
    if args.first().map(String::as_str) == Some("--child") {
        child(&args[1], &args[2], args[3].parse().expect("n"), &args[4..]);
        return;
    }
    // `--etom DIR`: the ETOM level files and predictions of scripts/bench.d/55-score-etom.sh.
    if let Some(i) = args.iter().position(|a| a == "--etom") {
        let dir = std::path::PathBuf::from(&args[i + 1]);
        let benches: Vec<_> = (1..=5).map(|l| dir.join(format!("level_{l}.json"))).collect();
        let pred = dir.join("predictions.jsonl");
        let n = std::fs::read_to_string(&pred).expect("predictions").lines().count();
        header();
        run_children(&["corrected", "etom"], &pred, n, &benches);
        return;
    }
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(if benching { 1_000_000 } else { 2_000 });
    // SCORE_BENCH_DIR keeps the generated files (for profiling); default: a temp dir.
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir =
        std::env::var_os("SCORE_BENCH_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir).expect("bench dir");
    let bench = dir.join(format!("bench-{n}.jsonl"));
    let pred = dir.join(format!("pred-{n}.jsonl"));
    let mb = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len() as f64 / 1e6).unwrap_or(0.0);
    if !bench.exists() || !pred.exists() {
        let t0 = Instant::now();
        let mut b = std::io::BufWriter::new(std::fs::File::create(&bench).unwrap());
        let mut p = std::io::BufWriter::new(std::fs::File::create(&pred).unwrap());
        let mut rng = Rng(42);
        for i in 0..n {
            let (s, q) = generate(i, &mut rng);
            writeln!(b, "{s}").unwrap();
            writeln!(p, "{q}").unwrap();
        }
        b.flush().unwrap();
        p.flush().unwrap();
        println!("generated in {:.1} s", t0.elapsed().as_secs_f64());
    }
    println!("{n} samples ({:.0} MB), {n} predictions ({:.0} MB), all kinds", mb(&bench), mb(&pred));
    header();
    run_children(&["corrected", "etom", "finmcp"], &pred, n, &[bench]);
}
