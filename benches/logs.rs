//! Log-track benchmark: import + anonymise + group N sessions of 10 calls (default
//! 100,000 sessions ≈ 1 M events, sessions interleaved in the file), then graph
//! candidates and stats over them. Prints wall times and peak RSS (VmHWM).
//!
//! `cargo bench --bench logs -- [SESSIONS]` (scripts/bench.d/40-logs.sh). Figures in docs/logs.md.

mod common;

use std::io::{BufWriter, Write};
use std::time::Instant;

use benchgen::logs::anon::Anonymiser;
use benchgen::logs::import::{SourceFile, import_sources};
use benchgen::logs::{AnonSettings, LogFormat};

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse::<f64>().unwrap_or(0.0))
        })
        .unwrap_or(0.0)
        / 1024.0
}

const TOOLS: [&str; 20] = [
    "search_incidents",
    "get_incident",
    "create_incident",
    "update_incident",
    "assign_incident",
    "list_services",
    "get_service_status",
    "get_service_dependencies",
    "query_metrics",
    "search_logs",
    "get_alerts",
    "acknowledge_alert",
    "get_host_info",
    "ping_host",
    "restart_service",
    "list_deployments",
    "rollback_deployment",
    "get_oncall",
    "notify_user",
    "get_runbook",
];

fn main() -> anyhow::Result<()> {
    if !common::benching("logs") {
        return Ok(());
    }
    let n: usize =
        std::env::args().skip(1).find(|a| !a.starts_with('-')).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let calls = 10;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("events.jsonl");
    let t = Instant::now();
    {
        let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        // Blocks of 64 sessions written round-robin, so sessions interleave in the file.
        for block in (0..n).step_by(64) {
            for step in 0..calls {
                for k in block..(block + 64).min(n) {
                    let tool = TOOLS[(k * 7 + step * 3) % TOOLS.len()];
                    let ts = 1_772_352_000_000_i64 + k as i64 * 60_000 + (step / 2) as i64 * 1000;
                    let user = if step == 0 {
                        format!(
                            ",\"user\":\"check service {k} and mail ops{}@example.com or call 138{:08}\"",
                            k % 5000,
                            k
                        )
                    } else {
                        String::new()
                    };
                    writeln!(
                        w,
                        "{{\"session\":\"s{k:06}\",\"tool\":\"{tool}\",\"ts_start\":{ts},\"ts_end\":{},\"arguments\":{{\"id\":\"INC-{}\",\"host\":\"10.0.{}.{}\"}},\"result\":{{\"id\":\"INC-{}\",\"state\":\"up\"}}{user}}}",
                        ts + 500,
                        (k + step) % 9000 + 1000,
                        k % 250,
                        step + 1,
                        (k + step + 1) % 9000 + 1000
                    )?;
                }
            }
        }
        w.flush()?;
    }
    let bytes = std::fs::metadata(&path)?.len();
    eprintln!(
        "generated {n} sessions, {} events, {:.0} MB in {:.1} s",
        n * calls,
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    let rss0 = peak_rss_mb();

    let mut anon = Anonymiser::new(b"bench-secret", &AnonSettings::default())?;
    let out_path = dir.path().join("sessions.jsonl");
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&out_path)?);
    let src = [SourceFile {
        path: path.clone(),
        display: "events.jsonl".into(),
        name: "bench".into(),
        format: LogFormat::Auto,
    }];
    let t = Instant::now();
    let c0 = common::cpu_seconds();
    let rep = import_sources(&src, None, &mut anon, &mut out, &mut |_, _| Ok(()), &mut |_| {})?;
    out.flush()?;
    let import_s = t.elapsed().as_secs_f64();
    let import_cpu = common::cpu_seconds() - c0;
    let rss_import = peak_rss_mb();
    println!(
        "import+anonymise+group: {} sessions, {} calls, {} groups, {} values anonymised in {import_s:.2} s wall, {import_cpu:.2} s CPU ({:.0} k events/s); peak RSS {rss_import:.0} MB (before import {rss0:.0} MB)",
        rep.sessions,
        rep.calls,
        rep.groups,
        rep.anonymised.values().sum::<u64>(),
        rep.calls as f64 / import_s / 1e3
    );

    let text = std::fs::read(&out_path)?;
    let sessions = benchgen::logs::parse_sessions(&text, "sessions.jsonl")?;
    drop(text);
    let t = Instant::now();
    let c0 = common::cpu_seconds();
    let cands = benchgen::graph::candidates(&sessions);
    let cand_s = t.elapsed().as_secs_f64();
    let cand_cpu = common::cpu_seconds() - c0;
    let t = Instant::now();
    let info: benchgen::graph::render::ToolInfo =
        TOOLS.iter().map(|t| (t.to_string(), (String::new(), vec![]))).collect();
    let edges = cands
        .iter()
        .map(|c| benchgen::graph::Edge {
            from: c.from.clone(),
            to: c.to.clone(),
            support: c.support.clone(),
            value_flow: c.value_flow.clone(),
            verdict: "accepted".into(),
            reason: String::new(),
            exchange: String::new(),
        })
        .collect();
    let doc = benchgen::graph::render::doc(&info, edges);
    let st = benchgen::graph::render::stats(&doc);
    let stats_s = t.elapsed().as_secs_f64();
    println!(
        "graph: {} candidates from {} sessions in {cand_s:.2} s wall, {cand_cpu:.2} s CPU; stats ({} nodes, {} edges, density {}) in {stats_s:.3} s; peak RSS {:.0} MB",
        cands.len(),
        sessions.len(),
        st.nodes,
        st.edges,
        st.density,
        peak_rss_mb()
    );
    Ok(())
}
