//! `benchgen mcp tools|call|import` and `benchgen sandbox` from the command line.

use crate::support::mcp_assets;

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
