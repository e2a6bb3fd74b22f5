//! `benchgen sandbox`: the ETOM snapshot's 2,375 tools, schema validation, determinism
//! across restarts, injected faults seen by the client as typed failures, the seed of
//! `--catalog`, JSON-RPC errors for bad messages on both transports and the official MCP
//! conformance suite.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::mcp_assets::*;
use crate::support::{bin, text};
use benchgen::mcp::config::{ServerSpec, ToolIds};
use benchgen::mcp::{CallFailure, CallOutcome, ClientOptions, McpClient};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_benchgen");

fn opts(dir: &std::path::Path, timeout: Duration) -> ClientOptions {
    let mut o = ClientOptions::new(&dir.join("logs"));
    o.call_timeout = timeout;
    o
}

fn sandbox(dir: &std::path::Path, catalog: &std::path::Path, flags: &[&str], timeout: Duration) -> McpClient {
    let mut args = vec!["sandbox".to_string(), "--catalog".into(), catalog.display().to_string()];
    args.extend(flags.iter().map(|s| s.to_string()));
    let spec = ServerSpec { command: Some(BIN.into()), args, tool_ids: ToolIds::AsIs, ..Default::default() };
    McpClient::new("sandbox", spec, opts(dir, timeout))
}

/// Import the ETOM snapshot into a temporary project; `None` (skipped) when absent.
fn etom_catalog(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let registry = shared_data("etom/mcp_registry.json")?;
    std::fs::create_dir_all(dir.join("pipeline")).unwrap();
    std::fs::write(dir.join("pipeline/x.toml"), "").unwrap();
    let out = std::process::Command::new(BIN)
        .arg("--config")
        .arg(dir.join("pipeline/x.toml"))
        .args(["--quiet", "registry", "import"])
        .arg(&registry)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(dir.join("artifacts/registry-import/catalog.json"))
}

#[tokio::test]
async fn serves_the_etom_snapshot_validates_and_is_deterministic_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let Some(catalog) = etom_catalog(dir.path()) else { return };
    let log = dir.path().join("calls.jsonl");
    let client = sandbox(dir.path(), &catalog, &["--call-log", log.to_str().unwrap()], Duration::from_secs(20));
    let tools = client.list_tools().await.unwrap();
    assert_eq!(tools.len(), 2375, "every ETOM tool is served (over several pages)");

    // A tool with an integer parameter: a string there is rejected, naming the field.
    let (tool, field) = tools
        .iter()
        .find_map(|t| {
            let props = t.input_schema.get("properties")?.as_object()?;
            let (k, _) = props.iter().find(|(_, p)| p.get("type") == Some(&json!("integer")))?;
            Some((t.name.clone(), k.clone()))
        })
        .expect("the ETOM snapshot has a tool with an integer parameter");
    let bad = client.call(&tool, &json!({ field.clone(): "not a number" }), None).await;
    let CallOutcome::ToolError { output } = &bad else { panic!("{bad:?}") };
    assert!(
        output.text.contains(&format!("`arguments.{field}`: \"not a number\" is not of type \"integer\"")),
        "{}",
        output.text
    );

    // Valid calls: answer and remember for the restart.
    let sample: Vec<(String, Value)> = tools
        .iter()
        .filter(|t| t.input_schema.get("required").is_none_or(|r| r.as_array().is_some_and(|a| a.is_empty())))
        .take(5)
        .map(|t| (t.name.clone(), json!({})))
        .collect();
    assert_eq!(sample.len(), 5);
    let mut first = Vec::new();
    for (t, a) in &sample {
        first.push(client.call(t, a, None).await);
    }
    client.shutdown().await;

    let again = sandbox(dir.path(), &catalog, &[], Duration::from_secs(20));
    for ((t, a), before) in sample.iter().zip(&first) {
        let after = again.call(t, a, None).await;
        assert!(matches!(after, CallOutcome::Ok { .. }), "{after:?}");
        assert_eq!(&after, before, "`{t}` answered differently after a restart");
    }
    again.shutdown().await;
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(lines.lines().count(), 6, "one log line per call of the first server");
    assert!(lines.lines().next().unwrap().contains("invalid_arguments"));
}

fn failure(o: &CallOutcome) -> &CallFailure {
    match o {
        CallOutcome::Failed { failure } => failure,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn injected_faults_are_typed_failures_and_never_hang() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = write_fixture_catalog(dir.path());
    let args = json!({"city": "Oslo"});
    let started = Instant::now();

    // Tool error.
    let c = sandbox(dir.path(), &catalog, &["--error-rate", "1"], Duration::from_secs(10));
    let o = c.call("weather::forecast", &args, None).await;
    assert!(matches!(&o, CallOutcome::ToolError { output } if output.text.contains("injected fault")), "{o:?}");
    c.shutdown().await;

    // Hang → timeout; then the same connection still answers other requests.
    let c = sandbox(dir.path(), &catalog, &["--timeout-rate", "1"], Duration::from_millis(500));
    let o = c.call("weather::forecast", &args, None).await;
    assert!(matches!(failure(&o), CallFailure::Timeout { .. }), "{o:?}");
    assert_eq!(c.list_tools().await.unwrap().len(), 3);
    // Cancellation by the caller.
    let cancel = tokio_util::sync::CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let o = c.call("weather::forecast", &args, Some(&cancel)).await;
    assert_eq!(failure(&o), &CallFailure::Cancelled);
    c.shutdown().await;

    // Crash on the second call; the next call respawns the server.
    let c = sandbox(dir.path(), &catalog, &["--crash-after", "2"], Duration::from_secs(10));
    assert!(matches!(c.call("weather::forecast", &args, None).await, CallOutcome::Ok { .. }));
    let pid = c.pid().await.unwrap();
    let o = c.call("weather::forecast", &json!({"city": "Rome"}), None).await;
    let CallFailure::ServerCrashed { message } = failure(&o) else { panic!("{o:?}") };
    assert!(message.contains("exited") && message.contains("injected crash"), "{message}");
    assert!(matches!(c.call("weather::forecast", &args, None).await, CallOutcome::Ok { .. }), "respawned");
    assert_ne!(c.pid().await.unwrap(), pid);
    c.shutdown().await;

    // A line that is not JSON-RPC.
    let c = sandbox(dir.path(), &catalog, &["--garbage-rate", "1"], Duration::from_secs(10));
    let o = c.call("weather::forecast", &args, None).await;
    assert!(matches!(failure(&o), CallFailure::InvalidResponse { message } if message.contains("not JSON")), "{o:?}");
    c.shutdown().await;

    // A result over the message limit fails that call; one under it is truncated with a note.
    let mut c = opts(dir.path(), Duration::from_secs(20));
    c.max_message_bytes = 1 << 20;
    c.max_result_bytes = 64 * 1024;
    let spec = |bytes: &str| ServerSpec {
        command: Some(BIN.into()),
        args: ["sandbox", "--catalog", catalog.to_str().unwrap(), "--huge-rate", "1", "--huge-bytes", bytes]
            .map(String::from)
            .to_vec(),
        tool_ids: ToolIds::AsIs,
        ..Default::default()
    };
    let huge = McpClient::new("huge", spec("3000000"), c.clone());
    let o = huge.call("weather::forecast", &args, None).await;
    assert!(
        matches!(failure(&o), CallFailure::ResultTooLarge { bytes, limit } if *bytes > 3_000_000 && *limit == 1 << 20),
        "{o:?}"
    );
    // The connection survives an oversized message.
    assert_eq!(huge.list_tools().await.unwrap().len(), 3);
    huge.shutdown().await;
    let big = McpClient::new("big", spec("200000"), c);
    let o = big.call("weather::forecast", &args, None).await;
    let CallOutcome::Ok { output } = &o else { panic!("{o:?}") };
    let t = output.truncated.as_ref().expect("truncation note");
    assert_eq!(t.kept_bytes, 64 * 1024);
    assert!(output.text.ends_with("(mcp.max_result_bytes)]"));
    big.shutdown().await;

    assert!(started.elapsed() < Duration::from_secs(60), "fault handling must stay bounded");
}

#[tokio::test]
async fn a_server_that_cannot_start_is_a_connect_failure() {
    let dir = tempfile::tempdir().unwrap();
    let spec = ServerSpec { command: Some("/nonexistent/mcp-server".into()), ..Default::default() };
    let c = McpClient::new("missing", spec, opts(dir.path(), Duration::from_secs(5)));
    let o = c.call("x", &json!({}), None).await;
    assert!(matches!(failure(&o), CallFailure::Connect { message } if message.contains("cannot spawn")), "{o:?}");
    // A process that exits at once: the handshake fails with its stderr in the message.
    let spec = ServerSpec {
        command: Some("sh".into()),
        args: vec!["-c".into(), "echo boom >&2; exit 3".into()],
        ..Default::default()
    };
    let c = McpClient::new("dies", spec, opts(dir.path(), Duration::from_secs(5)));
    let err = c.list_tools().await.unwrap_err();
    assert!(matches!(&err, CallFailure::Connect { message } if message.contains("boom")), "{err:?}");
}

/// A spec with `env_clear` (a start read from a release) spawns its server with only `PATH`,
/// `HOME` and its own `env`; without it, the server inherits benchgen's environment.
#[tokio::test]
async fn a_cleared_environment_passes_on_only_path_home_and_the_spec_env() {
    let dir = tempfile::tempdir().unwrap();
    // A variable of this process, set and not empty, that only inheritance can pass on
    // (cargo sets several).
    let parent_only = std::env::vars_os()
        .filter(|(_, v)| !v.is_empty())
        .filter_map(|(k, _)| k.into_string().ok())
        .find(|k| {
            !["PATH", "HOME", "TZ", "PWD", "OLDPWD", "SHLVL", "_"].contains(&k.as_str())
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !k.starts_with(|c: char| c.is_ascii_digit())
        })
        .expect("the test process has an environment variable besides PATH and HOME");
    // No `${…}`: benchgen expands those in arguments itself.
    let test = format!("test -n \"${parent_only}\" && a=set || a=unset; test -n \"$PATH\" && b=path");
    let script = format!("{test}; echo \"seen:$a:$b:$TZ\" >&2; exit 3");
    let spec = |env_clear: bool| ServerSpec {
        command: Some("sh".into()),
        args: vec!["-c".into(), script.clone()],
        env: [("TZ".to_string(), "UTC".to_string())].into(),
        env_clear,
        ..Default::default()
    };
    let seen = |name: &str, env_clear: bool| {
        let c = McpClient::new(name, spec(env_clear), opts(dir.path(), Duration::from_secs(5)));
        async move {
            match c.list_tools().await.unwrap_err() {
                CallFailure::Connect { message } => message,
                other => panic!("{other:?}"),
            }
        }
    };
    let cleared = seen("cleared", true).await;
    assert!(cleared.contains("seen:unset:path:UTC"), "{parent_only} must not reach the server: {cleared}");
    let inherited = seen("inherited", false).await;
    assert!(inherited.contains("seen:set:path:UTC"), "{parent_only} is inherited: {inherited}");
}

/// A log session (benchgen's session JSONL) with one successful call of `tool`.
fn recorded_session(tool: &str) -> String {
    json!({
        "id": "ops:1", "source": "ops", "format": "events", "location": "raw/ops.jsonl:1",
        "turns": [{"user": "how is web-01?", "groups": [[
            {"tool": tool, "arguments": {"host": "web-01"}, "result": "{\"host\":\"web-01\",\"cpu\":93}"}
        ]]}]
    })
    .to_string()
        + "\n"
}

const HOST_SCHEMA: &str = r#"{"type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]}"#;

#[tokio::test]
async fn recorded_sandbox_serves_log_catalogs_tools_list_files_and_server_tool_ids() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let write = |name: &str, text: &str| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let bare_sessions = write("sessions.jsonl", &recorded_session("get_host"));
    let server_sessions = write("server_sessions.jsonl", &recorded_session("ops::get_host"));
    // The log track's catalog, an MCP `tools/list` result, benchgen's catalog.
    let log_catalog = write(
        "log_catalog.json",
        &format!(r#"[{{"name": "get_host", "description": "a host", "input_schema": {HOST_SCHEMA}}}]"#),
    );
    let tools_list = write(
        "tools_list.json",
        &format!(
            r#"{{"tools": [{{"name": "get_host", "title": "Host", "description": "a host", "inputSchema": {HOST_SCHEMA}}}]}}"#
        ),
    );
    let benchgen_catalog = |tool: &str| {
        format!(
            r#"{{"servers": [{{"name": "ops", "description": "", "summary": "", "url": "", "categories": [],
              "tools": [{{"id": "ops::{tool}", "name": "{tool}", "description": "a host", "input_schema": {HOST_SCHEMA}}}]}}]}}"#
        )
    };
    let server_catalog = write("catalog.json", &benchgen_catalog("get_host"));
    let recorded = "{\"host\":\"web-01\",\"cpu\":93}";
    for (catalog, sessions, tool) in [
        (&log_catalog, &bare_sessions, "get_host"),
        (&tools_list, &bare_sessions, "get_host"),
        (&server_catalog, &bare_sessions, "ops::get_host"),
        (&log_catalog, &server_sessions, "get_host"),
    ] {
        let what = format!("{} with {}", catalog.display(), sessions.display());
        let client = sandbox(d, catalog, &["--recorded", sessions.to_str().unwrap()], Duration::from_secs(20));
        let names: Vec<String> =
            client.list_tools().await.unwrap_or_else(|e| panic!("{what}: {e}")).into_iter().map(|t| t.name).collect();
        assert_eq!(names, [tool], "{what}");
        match client.call(tool, &json!({"host": "web-01"}), None).await {
            CallOutcome::Ok { output } => assert_eq!(output.text, recorded, "{what}"),
            other => panic!("{what}: {other:?}"),
        }
        client.shutdown().await;
    }

    // Recorded responses no served tool can answer from: the sandbox refuses to start,
    // naming the logged tool names.
    let other = write("other.json", &benchgen_catalog("restart_host"));
    let o = std::process::Command::new(BIN)
        .args(["sandbox", "--catalog"])
        .arg(&other)
        .arg("--recorded")
        .arg(&bare_sessions)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no tool of") && err.contains("the sessions call `get_host`"), "{err}");
    // Neither a catalog nor a tool list: said, with what is accepted.
    let junk = write("junk.json", r#"{"rows": []}"#);
    let o = std::process::Command::new(BIN)
        .args(["sandbox", "--catalog"])
        .arg(&junk)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is neither a benchgen catalog nor a tool list"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

// ---------------------------------------------------------------------------------------
// Issue 10, item 6: the sandbox seed is explicit, printed, and never read from a config file
// in the current folder when `--catalog` is given.

async fn sandbox_answer(cwd: &Path, catalog: &Path, extra: &[&str]) -> String {
    let mut args = vec!["sandbox".to_string(), "--catalog".into(), catalog.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let spec = ServerSpec {
        command: Some(env!("CARGO_BIN_EXE_benchgen").into()),
        args,
        cwd: Some(cwd.to_path_buf()),
        tool_ids: ToolIds::AsIs,
        ..Default::default()
    };
    let c = McpClient::new("sb", spec, ClientOptions::new(&cwd.join("logs")));
    let o = c.call("weather::forecast", &json!({"city": "Oslo", "days": 2}), None).await;
    c.shutdown().await;
    match o {
        CallOutcome::Ok { output, .. } => output.text,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn sandbox_catalog_answers_the_same_from_any_folder() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = crate::support::mcp_assets::write_fixture_catalog(dir.path());
    let plain = dir.path().join("plain");
    let project = dir.path().join("project");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::create_dir_all(project.join("pipeline")).unwrap();
    // A project folder whose default config has another seed: it must not be read.
    std::fs::write(project.join("pipeline/demo.toml"), "[project]\nseed = 99\n").unwrap();
    let a = sandbox_answer(&plain, &catalog, &[]).await;
    let b = sandbox_answer(&project, &catalog, &[]).await;
    assert_eq!(a, b, "same call, same answer, whatever the folder");
    assert_eq!(a, sandbox_answer(&plain, &catalog, &["--seed", "0"]).await, "the documented default is 0");
    assert_ne!(a, sandbox_answer(&project, &catalog, &["--seed", "99"]).await, "--seed changes the answers");
    let log = std::fs::read_to_string(project.join("logs/sb.stderr.log")).unwrap_or_default();
    assert!(log.contains("sandbox: seed 99 (--seed)"), "the seed is printed: {log}");
}

#[test]
fn sandbox_prints_its_seed() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = crate::support::mcp_assets::write_fixture_catalog(dir.path());
    let o = bin()
        .current_dir(dir.path())
        .args(["sandbox", "--catalog", catalog.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("sandbox: seed 0 (default for --catalog)"), "{err}");
}

// ---------------------------------------------------------------------------------------
// Issue 10, item 5: MCP conformance of the sandbox on both transports.

#[test]
fn sandbox_stdio_answers_bad_lines_with_json_rpc_errors() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let catalog = crate::support::mcp_assets::write_fixture_catalog(dir.path());
    let mut child = bin()
        .args(["--quiet", "sandbox", "--catalog", catalog.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    // A sandbox that stays silent (as before the fix) must fail the test, not hang it.
    let pid = child.id() as i32;
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(20));
        // SAFETY: signalling our own child; harmless if it has already exited and been reaped
        // by then only if the pid was not reused, which 20 s in a test makes unlikely.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let mut ask = |line: &str| -> serde_json::Value {
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l:?}"))
    };
    let e = ask("this is not json");
    assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (json!(null), json!(-32700)), "{e}");
    let e =
        ask(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"weather::forecast","arguments":[1]}}"#);
    assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (json!(4), json!(-32602)), "{e}");
    let e =
        ask(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"weather::forecast","arguments":"x"}}"#);
    assert_eq!(e["error"]["code"], -32602, "{e}");
    let e = ask(r#"{"jsonrpc":"2.0","id":6,"result":"#);
    assert_eq!(e["error"]["code"], -32700, "{e}");
    // The connection still works afterwards.
    let init = ask(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "benchgen-sandbox", "{init}");
    drop(stdin);
    child.wait().unwrap();
}

#[tokio::test]
async fn sandbox_http_checks_origin_bodies_arguments_and_delete() {
    use benchgen::sandbox::{Sandbox, SandboxOptions, serve_http};
    let catalog: benchgen::model::Catalog =
        serde_json::from_value(crate::support::mcp_assets::fixture_catalog()).unwrap();
    let sb = Sandbox::new(&catalog, SandboxOptions::default()).unwrap();
    let http = serve_http(&sb, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    let url = http.url();
    let c = reqwest::Client::new();
    let post = |body: &str, origin: Option<&str>, session: Option<&str>| {
        let mut r = c
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(o) = origin {
            r = r.header("origin", o);
        }
        if let Some(s) = session {
            r = r.header("mcp-session-id", s).header("mcp-protocol-version", "2025-06-18");
        }
        r.send()
    };
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let r = post(init, Some("http://evil.example"), None).await.unwrap();
    assert_eq!(r.status(), 403, "a foreign Origin is refused");
    let r = post(init, Some("http://localhost:5173"), None).await.unwrap();
    assert_eq!(r.status(), 200, "a loopback Origin is served");
    let r = post(init, None, None).await.unwrap();
    assert_eq!(r.status(), 200);
    let session = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let _ = r.text().await;
    let r = post("not json", None, Some(&session)).await.unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32700, "{body}");
    let r = post(
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"weather::forecast","arguments":[1]}}"#,
        None,
        Some(&session),
    )
    .await
    .unwrap();
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!((body["id"].clone(), body["error"]["code"].clone()), (json!(9), json!(-32602)), "{body}");
    let r = c.delete(&url).header("mcp-session-id", &session).send().await.unwrap();
    assert!(r.status() == 200 || r.status() == 204, "session DELETE: {}", r.status());
    http.stop.cancel();
}

/// The official MCP conformance suite (installed by `scripts/setup.d/35-mcp-conformance.sh`
/// with its own Node 22) against `benchgen sandbox --http`, offline. Scenarios that test
/// the reference server's own tools, resources, prompts, logging or completions (features a
/// catalog sandbox does not offer) do not apply; every applicable one must pass.
#[test]
fn official_conformance_suite_passes_every_applicable_scenario() {
    let root = mcp_cache().join("conformance/node_modules");
    let Some(node) = require(root.join("node/bin/node"), "Node 22 (npm node@22)") else { return };
    let Some(suite) = require(root.join("@modelcontextprotocol/conformance/dist/index.js"), "MCP conformance suite")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let catalog = write_fixture_catalog(dir.path());
    let (_server, _, url) = sandbox_http(&catalog);
    for scenario in
        ["server-initialize", "ping", "tools-list", "server-sse-multiple-streams", "dns-rebinding-protection"]
    {
        let o = std::process::Command::new(&node)
            .arg(&suite)
            .args(["server", "--url", &url, "--scenario", scenario])
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let out = text(&o);
        assert!(o.status.success(), "scenario `{scenario}` failed:\n{out}");
        assert!(out.contains(" 0 failed"), "scenario `{scenario}`:\n{out}");
    }
}
