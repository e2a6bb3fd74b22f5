//! The MCP client against our sandbox (in process and as a spawned binary) and against
//! the real third-party servers that `make setup` installs (npm and PyPI); the bounds that
//! stop paging through a `tools/list` that never ends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::mcp_assets::*;
use benchgen::mcp::config::{Lifecycle, ServerSpec, ToolIds};
use benchgen::mcp::{CallOutcome, ClientOptions, McpClient};
use benchgen::model::Catalog;
use benchgen::sandbox::{Sandbox, SandboxOptions};
use serde_json::{Value, json};

fn opts(dir: &std::path::Path) -> ClientOptions {
    let mut o = ClientOptions::new(&dir.join("logs"));
    o.call_timeout = Duration::from_secs(20);
    o.startup_timeout = Duration::from_secs(30);
    o
}

fn stdio(command: &str, args: &[&str], env: &[(&str, &str)]) -> ServerSpec {
    ServerSpec {
        command: Some(command.to_string()),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        ..Default::default()
    }
}

fn ok_text(o: &CallOutcome) -> String {
    match o {
        CallOutcome::Ok { output } => output.text.clone(),
        other => panic!("expected a result, got {other:?}"),
    }
}

fn fixture_sandbox(seed: u64) -> Sandbox {
    let catalog: Catalog = serde_json::from_value(fixture_catalog()).unwrap();
    Sandbox::new(&catalog, SandboxOptions { seed, page_size: 2, ..Default::default() }).unwrap()
}

#[tokio::test]
async fn sandbox_in_process_over_a_duplex_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = fixture_sandbox(7);
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_end);
    let server = tokio::spawn(async move { benchgen::sandbox::serve_io(&sandbox, sr, sw).await });
    let (cr, cw) = tokio::io::split(client_end);
    let client = McpClient::from_io("sandbox", ToolIds::AsIs, opts(dir.path()), cr, cw);

    // Page size 2 over 3 tools: the client must follow the cursor.
    let tools = client.list_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["books::find_book", "books::get_reviews", "weather::forecast"]);
    assert!(tools[0].output_schema.is_some());
    assert_eq!(client.tool_id("books::find_book"), "books::find_book");

    let out = client.call("books::find_book", &json!({"title": "Dune"}), None).await;
    let CallOutcome::Ok { output } = &out else { panic!("{out:?}") };
    let structured = output.structured.as_ref().expect("structured content from the output schema");
    assert!(structured["isbn"].is_string() && structured["year"].as_i64().unwrap() >= 1450, "{structured}");

    let bad = client.call("books::find_book", &json!({"title": "Dune", "limit": "3"}), None).await;
    let CallOutcome::ToolError { output } = &bad else { panic!("{bad:?}") };
    assert!(output.text.contains("`arguments.limit`") && output.text.contains("\"integer\""), "{}", output.text);

    client.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
}

#[tokio::test]
async fn sandbox_in_process_over_streamable_http() {
    let dir = tempfile::tempdir().unwrap();
    let sandbox = fixture_sandbox(7);
    let http = benchgen::sandbox::serve_http(&sandbox, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let spec = ServerSpec { url: Some(http.url()), tool_ids: ToolIds::AsIs, ..Default::default() };
    let client = McpClient::new("sandbox", spec, opts(dir.path()));
    assert_eq!(client.list_tools().await.unwrap().len(), 3);
    let a = ok_text(&client.call("weather::forecast", &json!({"city": "Oslo", "days": 3}), None).await);
    let v: Value = serde_json::from_str(&a).unwrap();
    assert_eq!(v["tool"], "weather::forecast");
    assert_eq!(v["arguments"], json!({"city": "Oslo", "days": 3}));
    let extra = client.call("weather::forecast", &json!({"city": "Oslo", "hours": 3}), None).await;
    assert!(matches!(&extra, CallOutcome::ToolError { output } if output.text.contains("hours")), "{extra:?}");
    client.shutdown().await;
    http.stop.cancel();
}

#[tokio::test]
async fn sandbox_spawned_binary_over_stdio_and_http() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = write_fixture_catalog(dir.path());
    let bin = env!("CARGO_BIN_EXE_benchgen");
    let cat = catalog.to_str().unwrap();
    let mut spec = stdio(bin, &["sandbox", "--catalog", cat, "--seed", "3"], &[]);
    spec.tool_ids = ToolIds::AsIs;
    let client = McpClient::new("sandbox", spec, opts(dir.path()));
    assert_eq!(client.list_tools().await.unwrap().len(), 3);
    let via_stdio = ok_text(&client.call("books::get_reviews", &json!({"isbn": "978-0"}), None).await);
    let pid = client.pid().await.unwrap();
    client.shutdown().await;
    assert!(!process_alive(pid), "the spawned sandbox must be reaped");

    let port = free_port();
    let mut server = KillOnDrop(
        std::process::Command::new(bin)
            .args(["sandbox", "--catalog", cat, "--seed", "3", "--http", &format!("127.0.0.1:{port}")])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(server.0.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), format!("http://127.0.0.1:{port}/mcp"));
    let spec = ServerSpec { url: Some(line.trim().to_string()), tool_ids: ToolIds::AsIs, ..Default::default() };
    let client = McpClient::new("sandbox-http", spec, opts(dir.path()));
    let via_http = ok_text(&client.call("books::get_reviews", &json!({"isbn": "978-0"}), None).await);
    assert_eq!(via_stdio, via_http, "same seed, tool and arguments: same answer on any transport");
    client.shutdown().await;
}

/// Alive and not a zombie.
pub fn process_alive(pid: u32) -> bool {
    for _ in 0..50 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return false,
            Ok(s) if s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z') => {}
            Ok(_) => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
}

#[tokio::test]
async fn server_everything_over_stdio() {
    let Some(js) = npm_server_js("server-everything") else { return };
    let dir = tempfile::tempdir().unwrap();
    let client = McpClient::new("everything", stdio("node", &[js.to_str().unwrap()], &[]), opts(dir.path()));
    let tools = client.list_tools().await.unwrap();
    assert_eq!(tools.len(), 13, "{:?}", tools.iter().map(|t| &t.name).collect::<Vec<_>>());
    let (protocol, _) = client.server_info().await.unwrap();
    assert_eq!(protocol, "2025-11-25");
    assert_eq!(
        ok_text(&client.call("echo", &json!({"message": "hello benchgen"}), None).await),
        "Echo: hello benchgen"
    );
    // A tool error is an `isError` result, not a transport failure.
    let wrong = client.call("get-sum", &json!({"a": "x", "b": 2}), None).await;
    assert!(matches!(wrong, CallOutcome::ToolError { .. } | CallOutcome::Failed { .. }), "{wrong:?}");
    client.shutdown().await;
    assert!(std::fs::read_to_string(dir.path().join("logs/everything.stderr.log")).unwrap().contains("STDIO"));

    // `lifecycle = "auto"` falls back to `initialize` against the npm server.
    let mut spec = stdio("node", &[js.to_str().unwrap()], &[]);
    spec.lifecycle = Lifecycle::Auto;
    let client = McpClient::new("everything-auto", spec, opts(dir.path()));
    assert_eq!(client.list_tools().await.unwrap().len(), 13);
    assert_eq!(client.server_info().await.unwrap().0, "2025-11-25");
    client.shutdown().await;
}

#[tokio::test]
async fn server_everything_over_streamable_http() {
    let Some(js) = npm_server_js("server-everything") else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = KillOnDrop(
        std::process::Command::new("node")
            .arg(&js)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let spec = ServerSpec { url: Some(format!("http://127.0.0.1:{port}/mcp")), ..Default::default() };
    let client = McpClient::new("everything-http", spec, opts(dir.path()));
    // The server needs a moment to listen; connection attempts are bounded.
    let mut tools = None;
    for _ in 0..100 {
        match client.list_tools().await {
            Ok(t) => {
                tools = Some(t);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let tools = tools.expect("server-everything did not answer over HTTP within 10 s");
    assert_eq!(tools.len(), 13);
    let sum = ok_text(&client.call("get-sum", &json!({"a": 2, "b": 40}), None).await);
    assert!(sum.contains("42"), "{sum}");
    client.shutdown().await;
}

#[tokio::test]
async fn server_memory() {
    let Some(js) = npm_server_js("server-memory") else { return };
    let dir = tempfile::tempdir().unwrap();
    let mem = dir.path().join("memory.jsonl");
    let spec = stdio("node", &[js.to_str().unwrap()], &[("MEMORY_FILE_PATH", mem.to_str().unwrap())]);
    let client = McpClient::new("memory", spec, opts(dir.path()));
    assert_eq!(client.list_tools().await.unwrap().len(), 9);
    let args =
        json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]});
    ok_text(&client.call("create_entities", &args, None).await);
    let graph = ok_text(&client.call("read_graph", &json!({}), None).await);
    assert!(graph.contains("Ada") && graph.contains("wrote the first program"), "{graph}");
    client.shutdown().await;
    assert!(std::fs::read_to_string(&mem).unwrap().contains("Ada"));
}

#[tokio::test]
async fn server_filesystem() {
    let Some(js) = npm_server_js("server-filesystem") else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files").canonicalize().unwrap_or_else(|_| {
        std::fs::create_dir_all(dir.path().join("files")).unwrap();
        dir.path().join("files").canonicalize().unwrap()
    });
    std::fs::write(root.join("hello.txt"), "hello from benchgen\n").unwrap();
    let client =
        McpClient::new("fs", stdio("node", &[js.to_str().unwrap(), root.to_str().unwrap()], &[]), opts(dir.path()));
    assert_eq!(client.list_tools().await.unwrap().len(), 14);
    let text = ok_text(&client.call("read_text_file", &json!({"path": root.join("hello.txt")}), None).await);
    assert_eq!(text.trim(), "hello from benchgen");
    let listing = ok_text(&client.call("list_directory", &json!({"path": root}), None).await);
    assert!(listing.contains("hello.txt"), "{listing}");
    // Outside the allowed folder: the server refuses with a tool error.
    let denied = client.call("read_text_file", &json!({"path": "/etc/hostname"}), None).await;
    assert!(matches!(denied, CallOutcome::ToolError { .. }), "{denied:?}");
    client.shutdown().await;
}

#[tokio::test]
async fn mcp_server_time() {
    let Some(bin) = venv_bin("mcp-server-time") else { return };
    let dir = tempfile::tempdir().unwrap();
    let client = McpClient::new("time", stdio(bin.to_str().unwrap(), &[], &[]), opts(dir.path()));
    let tools = client.list_tools().await.unwrap();
    assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["get_current_time", "convert_time"]);
    let now: Value =
        serde_json::from_str(&ok_text(&client.call("get_current_time", &json!({"timezone": "UTC"}), None).await))
            .unwrap();
    assert_eq!(now["timezone"], "UTC");
    assert!(now["datetime"].as_str().unwrap().ends_with("+00:00"), "{now}");
    client.shutdown().await;

    // `lifecycle = "auto"`: the Python server answers `server/discover` and speaks 2026-07-28.
    let mut spec = stdio(bin.to_str().unwrap(), &[], &[]);
    spec.lifecycle = Lifecycle::Auto;
    let client = McpClient::new("time-auto", spec, opts(dir.path()));
    assert_eq!(client.list_tools().await.unwrap().len(), 2);
    assert_eq!(client.server_info().await.unwrap().0, "2026-07-28");
    let now = ok_text(&client.call("get_current_time", &json!({"timezone": "UTC"}), None).await);
    assert!(now.contains("\"timezone\": \"UTC\""), "{now}");
    client.shutdown().await;
}

#[tokio::test]
async fn mcp_server_git() {
    let Some(bin) = venv_bin("mcp-server-git") else { return };
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| {
        let st = std::process::Command::new("git")
            .args(["-c", "user.email=t@example.com", "-c", "user.name=T"])
            .args(args)
            .current_dir(&repo)
            .status()
            .unwrap();
        assert!(st.success());
    };
    git(&["init", "-q"]);
    git(&["commit", "-q", "--allow-empty", "-m", "benchgen test commit"]);
    let spec = stdio(bin.to_str().unwrap(), &["--repository", repo.to_str().unwrap()], &[]);
    let client = McpClient::new("git", spec, opts(dir.path()));
    assert_eq!(client.list_tools().await.unwrap().len(), 12);
    let log = ok_text(&client.call("git_log", &json!({"repo_path": repo}), None).await);
    assert!(log.contains("benchgen test commit"), "{log}");
    client.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Issue 10, item 3: a server that always returns a new `nextCursor` must not be paged forever.

/// TEST DOUBLE: a newline-delimited JSON-RPC MCP server over an in-process pipe that answers
/// `initialize`, and every `tools/list` with `tools_per_page` new tools and a fresh cursor.
/// Returns the pipe's client end and the page counter.
fn endless_pager(
    tools_per_page: usize,
) -> (tokio::io::ReadHalf<tokio::io::DuplexStream>, tokio::io::WriteHalf<tokio::io::DuplexStream>, Arc<AtomicUsize>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (client, server) = tokio::io::duplex(1 << 16);
    let pages = Arc::new(AtomicUsize::new(0));
    let p = pages.clone();
    tokio::spawn(async move {
        let (r, mut w) = tokio::io::split(server);
        let mut lines = tokio::io::BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            let Some(id) = msg.get("id").cloned() else { continue };
            let result = match msg["method"].as_str() {
                Some("initialize") => json!({
                    "protocolVersion": msg["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "endless-pager", "version": "0"}}),
                Some("tools/list") => {
                    let n = p.fetch_add(1, Ordering::SeqCst);
                    let tools: Vec<_> = (0..tools_per_page)
                        .map(|i| json!({"name": format!("t{n}_{i}"), "inputSchema": {"type": "object"}}))
                        .collect();
                    json!({"tools": tools, "nextCursor": format!("cursor-{n}")})
                }
                _ => json!({}),
            };
            let out = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string() + "\n";
            if w.write_all(out.as_bytes()).await.is_err() {
                break;
            }
        }
    });
    let (r, w) = tokio::io::split(client);
    (r, w, pages)
}

#[tokio::test]
async fn endless_pagination_stops_at_the_page_bound_naming_the_server() {
    use benchgen::mcp::CallFailure;
    let dir = tempfile::tempdir().unwrap();
    let (r, w, pages) = endless_pager(1);
    let mut o = ClientOptions::new(dir.path());
    o.max_list_pages = 50;
    let c = McpClient::from_io("pager", ToolIds::AsIs, o, r, w);
    let err = c.list_tools().await.unwrap_err();
    assert!(matches!(err, CallFailure::ListLimit { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("`pager`") && msg.contains("50 pages") && msg.contains("mcp.max_list_pages"), "{msg}");
    assert_eq!(pages.load(Ordering::SeqCst), 50, "no page past the bound is requested");
}

#[tokio::test]
async fn endless_pagination_stops_at_the_tool_and_time_bounds() {
    use benchgen::mcp::CallFailure;
    let dir = tempfile::tempdir().unwrap();
    let (r, w, pages) = endless_pager(100);
    let mut o = ClientOptions::new(dir.path());
    o.max_list_tools = 1000;
    let err = McpClient::from_io("wide", ToolIds::AsIs, o, r, w).list_tools().await.unwrap_err();
    assert!(err.to_string().contains("`wide` listed more than 1000 tools"), "{err}");
    assert!(matches!(err, CallFailure::ListLimit { .. }));
    assert_eq!(pages.load(Ordering::SeqCst), 11);

    // With the defaults' page and tool bounds out of reach, the time bound ends it.
    let (r, w, pages) = endless_pager(1);
    let mut o = ClientOptions::new(dir.path());
    o.max_list_pages = usize::MAX;
    o.max_list_tools = usize::MAX;
    o.list_timeout = std::time::Duration::from_millis(300);
    let err = McpClient::from_io("slow", ToolIds::AsIs, o, r, w).list_tools().await.unwrap_err();
    assert!(
        err.to_string().contains("`slow` did not finish listing its tools")
            && err.to_string().contains("list_timeout_secs"),
        "{err}"
    );
    assert!(pages.load(Ordering::SeqCst) > 1);
}

#[test]
fn list_bounds_are_configurable_in_mcp_settings() {
    let s: benchgen::mcp::config::McpSettings =
        toml::from_str("max_list_pages = 7\nmax_list_tools = 9\nlist_timeout_secs = 1.5\n").unwrap();
    let o = benchgen::mcp::client::ClientOptions::from_settings(
        &benchgen::settings::Settings::load(&{
            let d = tempfile::tempdir().unwrap().keep();
            let p = d.join("p.toml");
            std::fs::write(&p, "").unwrap();
            p
        })
        .unwrap(),
        &s,
    );
    assert_eq!((o.max_list_pages, o.max_list_tools), (7, 9));
    assert_eq!(o.list_timeout, std::time::Duration::from_millis(1500));
}
