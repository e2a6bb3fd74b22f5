//! Hardening found by outside probes (issue 10): each test here failed before its fix.
//!
//! - the API key never leaks, not even its first characters, whatever offset and encoding
//!   an endpoint echoes it at;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::scripted_llm::{Answer, ScriptedLlm};
use benchgen::ledger::Ledger;
use benchgen::llm::{LlmClient, LlmMode, Prompt};
use benchgen::settings::Settings;
use serde_json::json;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_benchgen"));
    c.env("BENCHGEN_NO_PROGRESS", "1").env_remove("BENCHGEN_LLM_MODE");
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Item 1: the API key, echoed at any offset of a long error body, in any common encoding.

/// Has `"`, `\`, `/`, `+` and `=` so the JSON-escaped, percent- and base64-encoded forms
/// all differ from the raw key.
const KEY: &str = "sk-Qz7\"Lp\\w/M4+nR=vX8kT2yH9bJ6aW5";
const FILLER_LEN: usize = 700;

fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() { A[((n >> (18 - 6 * i)) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// What the endpoint echoes for `form`, and the key-only parts of it to look for.
fn echoed(form: &str) -> (String, String) {
    match form {
        "raw" | "json" => (KEY.to_string(), KEY.to_string()),
        "url" => (format!("/v1/chat?api_key={}", pct(KEY)), pct(KEY)),
        "base64" => {
            let enc = b64(format!("Bearer {KEY}").as_bytes());
            // Characters carrying key bits only: the key spans bytes 7.. of the blob.
            let core = enc[(7 * 8usize).div_ceil(6)..(8 * (7 + KEY.len())) / 6].to_string();
            (format!("Authorization: Basic {enc}"), core)
        }
        _ => unreachable!(),
    }
}

/// An error body with the echoed text at `offset` of a long filler; `json` wraps it in a
/// JSON error object (so the key arrives JSON-escaped).
fn body(form: &str, offset: usize) -> String {
    let filler: String = "upstream said no ".chars().cycle().take(FILLER_LEN).collect();
    let (echo, _) = echoed(form);
    let text = format!("{}{echo}{}", &filler[..offset], &filler[offset..]);
    if form == "json" { json!({"error": {"message": text}}).to_string() } else { text }
}

/// Every 8-character window of every searchable form of the key: finding one means at
/// least 8 characters of the key leaked.
fn leak_windows() -> Vec<String> {
    let json_escaped = serde_json::to_string(KEY).unwrap().trim_matches('"').to_string();
    let mut forms = vec![KEY.to_string(), json_escaped];
    for f in ["url", "base64"] {
        forms.push(echoed(f).1);
    }
    let mut w = Vec::new();
    for f in forms {
        let c: Vec<char> = f.chars().collect();
        for win in c.windows(8) {
            w.push(win.iter().collect());
        }
    }
    w
}

fn assert_no_leak(what: &str, haystack: &str, windows: &[String]) {
    for w in windows {
        assert!(!haystack.contains(w.as_str()), "{what} leaks `{w}` of the key:\n{haystack}");
    }
}

const FORMS: [&str; 4] = ["raw", "json", "url", "base64"];

#[test]
fn api_key_echoed_at_any_offset_and_encoding_leaks_nowhere() {
    let s = ScriptedLlm::start(|seen| {
        let u = seen.last_user();
        let spec = u.trim().strip_prefix("Tool: ").unwrap_or("raw:0").to_string();
        let (form, off) = spec.split_once(':').unwrap();
        Answer::Status { code: 400, retry_after: None, body: body(form, off.parse().unwrap()) }
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline/prompts")).unwrap();
    std::fs::write(dir.path().join("pipeline/prompts/judge.md"), "You judge tools.\n--- user ---\nTool: {{ name }}\n")
        .unwrap();
    let cfg = dir.path().join("pipeline/test.toml");
    std::fs::write(
        &cfg,
        format!(
            "[llm.roles.r]\nprovider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"m\"\nmax_retries = 0\napi_key_env = \"BENCHGEN_TEST_KEY_HARDEN\"\n",
            s.base_url()
        ),
    )
    .unwrap();
    // SAFETY: set before any client reads it; no other test reads this variable.
    unsafe { std::env::set_var("BENCHGEN_TEST_KEY_HARDEN", KEY) };
    let settings = Settings::load(&cfg).unwrap();
    let ledger = Ledger::open(&settings.artifacts).unwrap();
    let run = ledger.begin_run("test", "", "0").unwrap();
    drop(ledger);
    let client = LlmClient::with_mode(&settings, "test", run, LlmMode::Live).unwrap();
    let windows = leak_windows();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut errors = 0;
    rt.block_on(async {
        for form in FORMS {
            for off in 0..=FILLER_LEN {
                let spec = format!("{form}:{off}");
                let err = client
                    .typed::<serde_json::Value>("r", &Prompt::new("judge", json!({"name": spec})), &spec)
                    .await
                    .unwrap_err();
                assert_no_leak(&format!("the error for {spec}"), &format!("{err:#} {err:?}"), &windows);
                errors += 1;
            }
        }
    });
    assert_eq!(errors, FORMS.len() * (FILLER_LEN + 1));
    assert!(s.requests().iter().all(|r| r.authorization.as_deref() == Some(&format!("Bearer {KEY}"))));
    drop(client);
    let files = walk(dir.path());
    assert!(files.iter().any(|f| f.ends_with("ledger.sqlite")));
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        assert_no_leak(&f.display().to_string(), &String::from_utf8_lossy(&bytes), &windows);
    }
    let l = Ledger::open(&settings.artifacts).unwrap();
    let n: i64 =
        l.connection().query_row("SELECT count(*) FROM events WHERE kind = 'llm.failure'", [], |r| r.get(0)).unwrap();
    assert_eq!(n as usize, errors, "every failure is recorded (redacted)");
}

#[test]
fn api_key_straddling_the_display_cut_leaks_into_no_output_line() {
    // `llm ping` through the binary, verbose, at the offsets around the cuts (300
    // characters of a body before the fix, 500 of a message now).
    let next = Arc::new(AtomicUsize::new(0));
    let offsets: Vec<(usize, &str)> =
        FORMS.iter().flat_map(|f| (280..=305).chain(480..=505).step_by(5).map(move |o| (o, *f))).collect();
    let (n2, offs) = (next.clone(), offsets.clone());
    let s = ScriptedLlm::start(move |_| {
        let (off, form) = offs[n2.fetch_add(1, Ordering::SeqCst).min(offs.len() - 1)];
        Answer::Status { code: 500, retry_after: None, body: body(form, off) }
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline/prompts")).unwrap();
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("pipeline/prompts/llm-ping.md"),
        dir.path().join("pipeline/prompts/llm-ping.md"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("pipeline/t.toml"),
        format!(
            "[llm.roles.c]\nprovider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"m\"\nmax_retries = 0\napi_key_env = \"BENCHGEN_SECRET_HARDEN\"\n",
            s.base_url()
        ),
    )
    .unwrap();
    let windows = leak_windows();
    for (off, form) in &offsets {
        let o = bin()
            .current_dir(dir.path())
            .args(["-vv", "--config", "pipeline/t.toml", "llm", "ping"])
            .env("BENCHGEN_SECRET_HARDEN", KEY)
            .output()
            .unwrap();
        assert!(!o.status.success());
        let out = text(&o);
        assert!(out.contains("HTTP 500"), "{out}");
        for line in out.lines() {
            assert_no_leak(&format!("{form} at {off}: output line"), line, &windows);
        }
    }
    assert_eq!(s.count(), offsets.len());
    for f in walk(dir.path()) {
        assert_no_leak(&f.display().to_string(), &String::from_utf8_lossy(&std::fs::read(&f).unwrap()), &windows);
    }
}

// ---------------------------------------------------------------------------------------
// Item 3: a server that always returns a new `nextCursor` must not be paged forever.

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
    use benchgen::mcp::client::{CallFailure, ClientOptions, McpClient};
    use benchgen::mcp::config::ToolIds;
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
    use benchgen::mcp::client::{CallFailure, ClientOptions, McpClient};
    use benchgen::mcp::config::ToolIds;
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
        &Settings::load(&{
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

// ---------------------------------------------------------------------------------------
// Item 6: the sandbox seed is explicit, printed, and never read from a config file in the
// current folder when `--catalog` is given.

async fn sandbox_answer(cwd: &Path, catalog: &Path, extra: &[&str]) -> String {
    use benchgen::mcp::client::{CallOutcome, ClientOptions, McpClient};
    use benchgen::mcp::config::{ServerSpec, ToolIds};
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
// Item 7: signals reach spawned servers; a closed stdout ends benchgen quietly.

fn wait_gone(pid: i32) -> bool {
    for _ in 0..250 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
        match stat {
            Err(_) => return true,
            // A zombie has exited; it waits for init to collect it.
            Ok(s) if s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z') => return true,
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
    false
}

/// A project whose server `slow` is a shell that writes its pid and never answers.
fn silent_server_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
    std::fs::write(
        dir.path().join("pipeline/demo.toml"),
        format!(
            "[mcp.servers.slow]\ncommand = \"sh\"\nargs = [\"-c\", \"echo $$ > {}; exec sleep 600\"]\n",
            dir.path().join("server.pid").display()
        ),
    )
    .unwrap();
    dir
}

fn signal_mcp_tools(sig: i32) {
    let dir = silent_server_project();
    let child = bin()
        .current_dir(dir.path())
        .args(["mcp", "tools", "slow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pidfile = dir.path().join("server.pid");
    let mut server = None;
    for _ in 0..500 {
        if let Some(p) = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse::<i32>().ok()) {
            server = Some(p);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let server = server.expect("the server started");
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, sig) };
    let o = child.wait_with_output();
    let o = o.unwrap();
    let gone = wait_gone(server);
    if !gone {
        // SAFETY: clean up the survivor so the test leaves nothing behind.
        unsafe { libc::kill(server, libc::SIGKILL) };
    }
    assert!(gone, "the spawned server {server} outlived benchgen (signal {sig})");
    assert_eq!(o.status.code(), Some(128 + sig), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("interrupted"), "{}", text(&o));
}

#[test]
fn sigterm_to_mcp_tools_stops_the_spawned_server() {
    signal_mcp_tools(libc::SIGTERM);
}

#[test]
fn sigint_to_mcp_tools_stops_the_spawned_server() {
    signal_mcp_tools(libc::SIGINT);
}

/// Run benchgen with a stdout pipe whose reader is already gone.
fn with_closed_stdout(cwd: &Path, args: &[&str]) -> Output {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: pipe(2) fills two fresh descriptors; we own both.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] is ours; closing the read end makes every write fail with EPIPE.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is a valid descriptor we own; Stdio takes it over.
    let w = unsafe { std::process::Stdio::from_raw_fd(fds[1]) };
    bin().current_dir(cwd).args(args).stdout(w).stderr(std::process::Stdio::piped()).output().unwrap()
}

#[test]
fn a_closed_stdout_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = crate::support::mcp_assets::write_fixture_catalog(dir.path());
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
    std::fs::write(
        dir.path().join("pipeline/demo.toml"),
        format!(
            "[mcp.servers.sb]\ncommand = \"{}\"\nargs = [\"--quiet\", \"sandbox\", \"--catalog\", \"{}\"]\ntool_ids = \"as-is\"\n",
            env!("CARGO_BIN_EXE_benchgen"),
            catalog.display()
        ),
    )
    .unwrap();
    for args in [
        &["mcp", "tools", "sb"][..],
        &["--json", "mcp", "tools", "sb"],
        &["stages"],
        &["status"],
        &["mcp", "call", "sb", "weather::forecast", "--args", "{\"city\": \"Oslo\"}"],
    ] {
        let o = with_closed_stdout(dir.path(), args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
    }
}

// ---------------------------------------------------------------------------------------
// Item 5: MCP conformance of the sandbox on both transports.

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
    use crate::support::mcp_assets::{KillOnDrop, free_port, mcp_cache, require, write_fixture_catalog};
    let root = mcp_cache().join("conformance/node_modules");
    let Some(node) = require(root.join("node/bin/node"), "Node 22 (npm node@22)") else { return };
    let Some(suite) = require(root.join("@modelcontextprotocol/conformance/dist/index.js"), "MCP conformance suite")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let catalog = write_fixture_catalog(dir.path());
    let port = free_port();
    let mut server = KillOnDrop(
        bin()
            .args([
                "--quiet",
                "sandbox",
                "--catalog",
                catalog.to_str().unwrap(),
                "--http",
                &format!("127.0.0.1:{port}"),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut url = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(server.0.stdout.take().unwrap()), &mut url).unwrap();
    for scenario in
        ["server-initialize", "ping", "tools-list", "server-sse-multiple-streams", "dns-rebinding-protection"]
    {
        let o = Command::new(&node)
            .arg(&suite)
            .args(["server", "--url", url.trim(), "--scenario", scenario])
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let out = text(&o);
        assert!(o.status.success(), "scenario `{scenario}` failed:\n{out}");
        assert!(out.contains(" 0 failed"), "scenario `{scenario}`:\n{out}");
    }
}

// ---------------------------------------------------------------------------------------
// Item 12: duplicate JSON keys in the registry are refused, naming the key and place.

#[test]
fn registry_with_a_duplicate_key_is_refused_naming_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
    std::fs::write(dir.path().join("pipeline/demo.toml"), "").unwrap();
    let demo =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("raw/demo/registry.json")).unwrap();
    // The demo registry with `"servers": []` added at the end of its top-level object.
    let cut = demo.trim_end().strip_suffix('}').unwrap().to_string();
    let text_written = format!("{cut},\n  \"servers\": []\n}}\n");
    let second = text_written.rfind("\"servers\"").unwrap();
    let line = text_written[..second].matches('\n').count() + 1;
    std::fs::write(dir.path().join("dup.json"), &text_written).unwrap();
    let o = bin().current_dir(dir.path()).args(["registry", "import", "dup.json"]).output().unwrap();
    let err = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("duplicate key `servers`"), "{err}");
    assert!(err.contains(&format!("line {line}, column")), "the line of the second key ({line}): {err}");
    assert!(!dir.path().join("artifacts/registry-import").exists(), "nothing written");
}

// ---------------------------------------------------------------------------------------
// Item 14: a killed run leaves no llama-server log in $TMPDIR; its log under
// `artifacts/llm/logs` is removed by the next start.

#[test]
fn killed_runs_leave_no_local_server_log_in_tmpdir() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // A stand-in llama-server that never gets healthy and writes its pid next to itself.
    let fake = dir.path().join("fake-llama-server");
    std::fs::write(&fake, "#!/bin/sh\necho $$ > \"$(dirname \"$0\")/server.pid\"\nexec sleep 1000\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join("model.gguf"), b"not a model").unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline/prompts")).unwrap();
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("pipeline/prompts/llm-ping.md"),
        dir.path().join("pipeline/prompts/llm-ping.md"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("pipeline/demo.toml"),
        format!(
            "[llm.roles.r]\nprovider = \"local\"\nserver_binary = \"{}\"\nmodel_path = \"{}\"\nstartup_timeout_s = 60\n",
            fake.display(),
            dir.path().join("model.gguf").display()
        ),
    )
    .unwrap();
    let logs = dir.path().join("artifacts/llm/logs");
    let start_and_kill = || -> Vec<String> {
        let _ = std::fs::remove_file(dir.path().join("server.pid"));
        let mut child = bin()
            .current_dir(dir.path())
            .args(["llm", "ping"])
            .env("TMPDIR", &tmp)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut server = None;
        for _ in 0..500 {
            if let Some(p) =
                std::fs::read_to_string(dir.path().join("server.pid")).ok().and_then(|s| s.trim().parse::<i32>().ok())
            {
                server = Some(p);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let server = server.expect("the stand-in server started");
        let in_logs: Vec<String> = std::fs::read_dir(&logs)
            .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        child.kill().unwrap(); // SIGKILL: no destructor runs
        child.wait().unwrap();
        assert!(wait_gone(server), "PDEATHSIG stops the stand-in");
        in_logs
    };
    let first = start_and_kill();
    assert_eq!(first.len(), 1, "one log under artifacts/llm/logs: {first:?}");
    let leftovers: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(leftovers.is_empty(), "nothing in $TMPDIR: {leftovers:?}");
    assert!(logs.join(&first[0]).exists(), "the killed run's log is kept for the user");
    let second = start_and_kill();
    assert_eq!(second.len(), 1, "the next start removed the dead run's log: {second:?}");
    assert_ne!(first, second);
}
