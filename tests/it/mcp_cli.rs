//! `benchgen mcp tools|call|import` and `benchgen sandbox` from the command line; a signal to
//! `mcp tools` stops the server it spawned, and a closed stdout ends benchgen quietly.

use std::path::Path;
use std::process::Output;

use crate::support::{bin, mcp_assets, text};

use assert_cmd::Command;
use serde_json::Value;

fn project() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let catalog = mcp_assets::write_fixture_catalog(dir.path());
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
    let config = dir.path().join("pipeline/t.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.servers.sandbox]\ncommand = {:?}\nargs = [\"--quiet\", \"sandbox\", \"--catalog\", {:?}]\ntool_ids = \"as-is\"\n",
            env!("CARGO_BIN_EXE_benchgen"),
            catalog.to_str().unwrap()
        ),
    )
    .unwrap();
    (dir, config)
}

fn benchgen(config: &std::path::Path) -> Command {
    let mut c = Command::cargo_bin("benchgen").unwrap();
    c.arg("--config").arg(config).env("BENCHGEN_NO_PROGRESS", "1");
    c
}

#[test]
fn tools_and_call_against_a_configured_sandbox() {
    let (dir, config) = project();
    let out = benchgen(&config).args(["mcp", "tools", "sandbox"]).assert().success().get_output().stdout.clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("3 tools on `sandbox` (benchgen-sandbox"), "{text}");
    assert!(text.contains("weather::forecast"));

    let out = benchgen(&config)
        .args(["--json", "mcp", "call", "sandbox", "weather::forecast", "--args", r#"{"city": "Oslo"}"#])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["server"], "sandbox");

    // A wrong type: a tool error, exit 1, the field named.
    let out = benchgen(&config)
        .args(["--json", "mcp", "call", "sandbox", "weather::forecast", "--args", r#"{"city": 5}"#])
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["status"], "tool_error");
    assert!(v["output"]["text"].as_str().unwrap().contains("`arguments.city`: 5 is not of type \"string\""), "{v}");
    assert!(dir.path().join("artifacts/mcp/logs/sandbox.stderr.log").exists());

    // Unknown server and bad JSON are usage errors (exit 2).
    benchgen(&config).args(["mcp", "tools", "nope"]).assert().code(2);
    benchgen(&config).args(["mcp", "call", "sandbox", "x", "--args", "{"]).assert().code(2);
}

#[test]
fn import_prints_config_and_the_config_key_uses_the_file() {
    let (dir, _) = project();
    let json = dir.path().join("mcp.json");
    std::fs::write(
        &json,
        format!(
            r#"{{"mcpServers": {{"sb": {{"command": {:?}, "args": ["--quiet", "sandbox", "--catalog", {:?}]}}}}}}"#,
            env!("CARGO_BIN_EXE_benchgen"),
            dir.path().join("catalog.json").to_str().unwrap()
        ),
    )
    .unwrap();
    let out = benchgen(&dir.path().join("pipeline/t.toml"))
        .args(["mcp", "import"])
        .arg(&json)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8(out).unwrap().contains("[mcp.servers.sb]"));

    let config = dir.path().join("pipeline/imported.toml");
    std::fs::write(&config, "[mcp]\nimport = \"mcp.json\"\n").unwrap();
    let out = benchgen(&config).args(["mcp", "tools", "sb"]).assert().success().get_output().stdout.clone();
    assert!(String::from_utf8(out).unwrap().contains("books::find_book"));
}

#[test]
fn sandbox_refuses_non_loopback_and_bad_rates() {
    let (dir, config) = project();
    let cat = dir.path().join("catalog.json");
    benchgen(&config)
        .args(["sandbox", "--http", "0.0.0.0:0", "--catalog"])
        .arg(&cat)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("loopback"));
    benchgen(&config).args(["sandbox", "--error-rate", "2", "--catalog"]).arg(&cat).assert().code(2);
    benchgen(&config)
        .args(["sandbox"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("artifacts/filter/catalog.json"));
}

/// Regression: a spawned `benchgen sandbox --catalog FILE` used to demand
/// `pipeline/demo.toml` in its working folder, so it failed under any other
/// config. With `--catalog` it needs no pipeline config.
#[test]
fn spawned_sandbox_needs_no_default_config_in_its_folder() {
    let (dir, config) = project();
    assert!(!dir.path().join("pipeline/demo.toml").exists());
    let out = benchgen(&config)
        .current_dir(dir.path())
        .env_remove("BENCHGEN_CONFIG")
        .args(["--json", "mcp", "call", "sandbox", "weather::forecast", "--args", r#"{"city": "Oslo"}"#])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["status"], "ok", "{v}");

    // An explicitly named config that is missing is still an error.
    Command::cargo_bin("benchgen")
        .unwrap()
        .current_dir(dir.path())
        .args(["--config", "pipeline/missing.toml", "sandbox", "--catalog", "x.json"])
        .assert()
        .code(1);
}

// ---------------------------------------------------------------------------------------
// Issue 10, item 7: signals reach spawned servers; a closed stdout ends benchgen quietly.

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
