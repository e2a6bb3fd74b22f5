//! Benchmarks (ignored in `cargo test`; `scripts/bench.d/30-mcp.sh` runs them in release
//! mode and prints the figures quoted in the README). No timing is asserted.

use crate::support::mcp_assets;
use crate::support::scripted_llm;

use std::sync::Arc;
use std::time::{Duration, Instant};

use benchgen::mcp::config::{ServerSpec, ToolIds};
use benchgen::mcp::{CallOutcome, ClientOptions, McpClient};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_benchgen");

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// `clients` clients, each making `per_client` sequential calls; returns (calls/s, p50 ms, p99 ms).
async fn drive(clients: &[Arc<McpClient>], per_client: usize) -> (f64, f64, f64) {
    for c in clients {
        c.ensure_connected().await.unwrap();
        // Warm up (first call compiles the tool's validator).
        assert!(matches!(c.call("weather::forecast", &json!({"city": "warm"}), None).await, CallOutcome::Ok { .. }));
    }
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let c = c.clone();
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_client);
                for i in 0..per_client {
                    let t = Instant::now();
                    let o = c.call("weather::forecast", &json!({"city": format!("c{k}-{i}"), "days": 3}), None).await;
                    assert!(matches!(o, CallOutcome::Ok { .. }), "{o:?}");
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let wall = started.elapsed().as_secs_f64();
    all.sort();
    (all.len() as f64 / wall, percentile(&all, 0.5), percentile(&all, 0.99))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by scripts/bench.d/30-mcp.sh"]
async fn bench_sandbox_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = mcp_assets::write_fixture_catalog(dir.path());
    let n = env_usize("BENCH_CALLS", 2000);
    let opts = ClientOptions::new(&dir.path().join("logs"));
    let stdio_spec = ServerSpec {
        command: Some(BIN.into()),
        args: vec!["sandbox".into(), "--catalog".into(), catalog.display().to_string()],
        tool_ids: ToolIds::AsIs,
        ..Default::default()
    };

    // stdio: one client; then 32 concurrent callers multiplexed over that one connection
    // (a stdio server serves exactly one client).
    let one = Arc::new(McpClient::new("s", stdio_spec.clone(), opts.clone()));
    let r = drive(std::slice::from_ref(&one), n).await;
    println!("sandbox stdio  1 client : {:>8.0} calls/s  p50 {:>6.2} ms  p99 {:>6.2} ms", r.0, r.1, r.2);
    let shared: Vec<_> = (0..32).map(|_| one.clone()).collect();
    let r = drive(&shared, n / 32).await;
    println!("sandbox stdio 32 callers: {:>8.0} calls/s  p50 {:>6.2} ms  p99 {:>6.2} ms", r.0, r.1, r.2);
    one.shutdown().await;

    // Streamable HTTP: one server process, 1 and 32 separate client sessions.
    let (_server, _, url) = mcp_assets::sandbox_http(&catalog);
    let http = ServerSpec { url: Some(url), tool_ids: ToolIds::AsIs, ..Default::default() };
    let c1 = vec![Arc::new(McpClient::new("h", http.clone(), opts.clone()))];
    let r = drive(&c1, n).await;
    println!("sandbox http   1 client : {:>8.0} calls/s  p50 {:>6.2} ms  p99 {:>6.2} ms", r.0, r.1, r.2);
    let c32: Vec<_> = (0..32).map(|i| Arc::new(McpClient::new(&format!("h{i}"), http.clone(), opts.clone()))).collect();
    let r = drive(&c32, n / 32).await;
    println!("sandbox http  32 clients: {:>8.0} calls/s  p50 {:>6.2} ms  p99 {:>6.2} ms", r.0, r.1, r.2);
    for c in c1.iter().chain(&c32) {
        c.shutdown().await;
    }
}

/// Executor time per call outside the LLM: (wall − LLM time) / calls, with the sandbox's
/// own per-call latency beside it; the difference is the agent loop's bookkeeping (name
/// mapping, concurrency, ledger writes, messages).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by scripts/bench.d/30-mcp.sh"]
async fn bench_executor_overhead() {
    use benchgen::agent::{AgentSettings, Executor, Query, Recorder};
    use benchgen::execute::ExecuteSettings;
    use scripted_llm::{Answer, ScriptedLlm};

    let queries_n = env_usize("BENCH_QUERIES", 50);
    // Two groups of 4 parallel calls, then an answer.
    let llm = ScriptedLlm::start(|r| {
        let turns = r.body["messages"].as_array().unwrap().iter().filter(|m| m["tool_calls"].is_array()).count();
        if turns < 2 {
            let q = r.last_user();
            Answer::ToolCalls(
                (0..4)
                    .map(|i| ("weather__forecast".to_string(), json!({"city": format!("{q}-{turns}-{i}")})))
                    .collect(),
            )
        } else {
            Answer::text("done")
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let catalog = mcp_assets::write_fixture_catalog(dir.path());
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
    let config = dir.path().join("pipeline/b.toml");
    std::fs::write(
        &config,
        format!("[llm.roles.agent]\nprovider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"m\"\nseed = 1\n", llm.base_url()),
    )
    .unwrap();
    let settings = benchgen::settings::Settings::load(&config).unwrap();
    let run = benchgen::ledger::Ledger::open(&settings.artifacts).unwrap().begin_run("bench", "", "0").unwrap();
    let spec = ServerSpec {
        command: Some(BIN.into()),
        args: vec!["--quiet".into(), "sandbox".into(), "--catalog".into(), catalog.display().to_string()],
        tool_ids: ToolIds::AsIs,
        ..Default::default()
    };
    let client = Arc::new(McpClient::new("sb", spec, ClientOptions::new(&dir.path().join("logs"))));
    let recorder = Recorder::open(&settings.artifacts, run, "bench").unwrap();
    let exec = Executor::connect(vec![client], AgentSettings::from(&ExecuteSettings::default()), Some(recorder))
        .await
        .unwrap();
    let llm_client = benchgen::llm::LlmClient::from_settings(&settings, "bench", run).await.unwrap();
    let queries: Vec<Query> =
        (0..queries_n).map(|i| Query { id: format!("q{i}"), query: format!("q{i}"), chain: vec![] }).collect();
    let (mut calls, mut other_ms, mut tool_ms) = (0u64, 0f64, 0f64);
    for q in &queries {
        let (t, trace) = exec.run_query(&llm_client, q).await;
        assert_eq!(t.status, "answered", "{:?}", t.reason);
        calls += t.calls.len() as u64;
        other_ms += trace.other_ms;
        // Calls of a group run concurrently: the group costs its slowest call.
        for g in 0..t.groups {
            let group = t.calls.iter().filter(|c| c.group == g);
            tool_ms += group.map(|c| trace.call_ms.get(&c.index).copied().unwrap_or(0.0)).fold(0.0, f64::max);
        }
    }
    exec.shutdown().await;
    println!(
        "executor: {calls} calls in {queries_n} queries; non-LLM time {:.2} ms/call, of which waiting for sandbox calls {:.2} ms/call, loop overhead {:.2} ms/call",
        other_ms / calls as f64,
        tool_ms / calls as f64,
        (other_ms - tool_ms) / calls as f64
    );
}

/// One HTTP/1.1 request on a kept-alive connection; returns (status, headers lower-cased, body).
fn keep_alive_post(
    s: &mut std::io::BufReader<std::net::TcpStream>,
    session: Option<&str>,
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    use std::io::{BufRead, Read, Write};
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(id) = session {
        req.push_str(&format!("Mcp-Session-Id: {id}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    // One write per request, so only the server's side decides how segments go out.
    s.get_mut().write_all(req.as_bytes()).unwrap();
    let mut line = String::new();
    s.read_line(&mut line).unwrap();
    let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        s.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let header = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut out = Vec::new();
    if let Some(n) = header("content-length") {
        let mut b = vec![0u8; n.parse().unwrap()];
        s.read_exact(&mut b).unwrap();
        out = b;
    } else if header("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        loop {
            line.clear();
            s.read_line(&mut line).unwrap();
            let n = usize::from_str_radix(line.trim(), 16).unwrap();
            let mut b = vec![0u8; n + 2];
            s.read_exact(&mut b).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&b[..n]);
        }
    }
    (status, headers, String::from_utf8_lossy(&out).into_owned())
}

/// A peer that keeps one TCP connection for every call (as the MCP Inspector's load mode
/// and curl with several URLs do), with its own Nagle left on. Before the sandbox set
/// TCP_NODELAY, each call after the first waited for a delayed ACK (~40 ms).
#[test]
#[ignore = "benchmark: run by scripts/bench.d/30-mcp.sh"]
fn bench_sandbox_http_keep_alive_client() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = mcp_assets::write_fixture_catalog(dir.path());
    let n = env_usize("BENCH_CALLS", 2000).min(500);
    let (_server, port, _) = mcp_assets::sandbox_http(&catalog);
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut s = std::io::BufReader::new(tcp);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}});
    let (st, headers, _) = keep_alive_post(&mut s, None, &init.to_string());
    assert_eq!(st, 200);
    let session = headers.iter().find(|(k, _)| k == "mcp-session-id").map(|(_, v)| v.clone()).unwrap();
    let (st, _, _) = keep_alive_post(
        &mut s,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
    );
    assert!(st == 202 || st == 200, "{st}");
    let mut lat = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let call = json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
            "params": {"name": "weather::forecast", "arguments": {"city": format!("k{i}"), "days": 3}}});
        let t = Instant::now();
        let (st, _, body) = keep_alive_post(&mut s, Some(&session), &call.to_string());
        assert_eq!(st, 200, "{body}");
        assert!(body.contains("\"result\""), "{body}");
        lat.push(t.elapsed());
    }
    let wall = started.elapsed().as_secs_f64();
    lat.sort();
    println!(
        "sandbox http   1 keep-alive raw client: {:>8.0} calls/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
        n as f64 / wall,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99)
    );
}
