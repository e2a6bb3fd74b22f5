//! `benchgen sandbox`: the ETOM snapshot's 2,375 tools, schema validation, determinism
//! across restarts, and injected faults seen by the client as typed failures.

use std::time::{Duration, Instant};

use crate::support::mcp_assets::*;
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
