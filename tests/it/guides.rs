//! docs/guide/*.md are run as a new user would: from an empty folder holding only the
//! user's files, every `$ ` command of the guide's `console` blocks in order, against the
//! scripted test endpoint (a test double). The only changes to the commands: `benchgen
//! init` gets the scripted endpoint (its `--base-url` replaced, or `--provider vllm
//! --base-url URL --model scripted` added), and after the command that writes the review
//! sheets they are filled in with full marks and returned, as the guide tells reviewers to.

use std::collections::BTreeMap;
use std::path::PathBuf;

use assert_cmd::Command;

use crate::support::repo;
use crate::support::scripted_llm::{Answer, ScriptedLlm, Seen};

/// The commands of a guide's `console` blocks (`$ ` lines, comments dropped).
fn commands(guide: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_console = false;
    for line in guide.lines() {
        if let Some(lang) = line.strip_prefix("```") {
            in_console = !in_console && lang.trim() == "console";
            continue;
        }
        if in_console && let Some(cmd) = line.strip_prefix("$ ") {
            // A `#` that starts a comment (outside quotes).
            let mut quoted = false;
            let mut end = cmd.len();
            for (i, c) in cmd.char_indices() {
                match c {
                    '"' => quoted = !quoted,
                    '#' if !quoted && cmd[..i].ends_with(' ') => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            out.push(cmd[..end].trim().to_string());
        }
    }
    out
}

/// Split on spaces, keeping double-quoted words whole.
fn words(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in cmd.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn answer(seen: &Seen) -> Answer {
    if seen.all_text().contains("Put the result in the field `sum`") {
        let nums: Vec<i64> = crate::support::regex(r"What is (-?\d+) plus (-?\d+)")
            .unwrap()
            .captures(&seen.all_text())
            .map(|c| vec![c[1].parse().unwrap(), c[2].parse().unwrap()])
            .unwrap_or_default();
        return Answer::json(serde_json::json!({"sum": nums.iter().sum::<i64>()}));
    }
    // `llm ping --probe`'s stage-sized exchange: a tool of its catalog.
    if seen.all_text().contains("Which tool should be called first?") {
        return Answer::json(serde_json::json!({"tool": "get_oncall", "reason": "It names who is on call."}));
    }
    match crate::levels::answer(seen) {
        Answer::Status { .. } => crate::pipeline::pipeline_answer(seen),
        a => a,
    }
}

/// Run every command of `guide` in a fresh folder holding the user's files; returns the
/// folder (kept alive by the handle) and the working folder after the last `cd`.
fn run_guide(guide: &str) -> (tempfile::TempDir, PathBuf) {
    let text = std::fs::read_to_string(repo().join("docs/guide").join(guide)).unwrap();
    let cmds = commands(&text);
    assert!(cmds.iter().any(|c| c.starts_with("benchgen init")), "{guide} has no `benchgen init`");
    let llm = ScriptedLlm::start(answer);
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path().to_path_buf();
    // The user's files (the demo's stand in for a user's own).
    std::fs::copy(repo().join("raw/demo/logs/events.jsonl"), top.join("my_logs.jsonl")).unwrap();
    std::fs::copy(repo().join("raw/demo/logs/catalog.json"), top.join("tools.json")).unwrap();
    std::fs::copy(repo().join("raw/demo/registry.json"), top.join("registry.json")).unwrap();
    let mut cwd = top.clone();
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for cmd in &cmds {
        let mut w = words(cmd);
        match w[0].as_str() {
            "cd" => {
                cwd = cwd.join(&w[1]);
                continue;
            }
            "export" => {
                let (k, v) = w[1].split_once('=').unwrap();
                env.insert(k.to_string(), v.to_string());
                continue;
            }
            "benchgen" => {}
            other => panic!("{guide}: `{other}` is not a command this test knows how to run: {cmd}"),
        }
        if w[1] == "init" {
            match w.iter().position(|x| x == "--base-url") {
                Some(i) => w[i + 1] = llm.base_url(),
                None => w.extend(
                    ["--provider", "vllm", "--base-url", &llm.base_url(), "--model", "scripted"].map(String::from),
                ),
            }
        }
        let mut c = Command::cargo_bin("benchgen").unwrap();
        c.current_dir(&cwd)
            .env("BENCHGEN_NO_PROGRESS", "1")
            .env_remove("BENCHGEN_ANON_SECRET")
            .env_remove("BENCHGEN_CONFIG")
            .env_remove("BENCHGEN_FAIL_AT")
            .envs(&env)
            .args(&w[1..]);
        let o = c.output().unwrap();
        // `run` stops where the samples wait for review: exit 3, "waiting for people".
        let waiting = o.status.code() == Some(3)
            && w[1] == "run"
            && String::from_utf8_lossy(&o.stderr).contains("waiting for people: ");
        assert!(
            o.status.success() || waiting,
            "{guide}: `{cmd}` failed ({:?}):\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        if waiting || w.iter().any(|x| x == "review-export") || w[1..] == ["review", "export"] {
            assert!(crate::init::fill_sheets(&cwd) > 0, "{guide}: no sample reached the reviewers");
        }
    }
    (tmp, cwd)
}

#[test]
fn guide_a_benchmark_from_your_own_tool_logs() {
    let (_tmp, proj) = run_guide("logs.md");
    assert!(proj.join("release/my-bench-0.1.0/finmcp_single_tool.json").is_file());
}

#[test]
fn guide_etom_levels_over_your_own_registry() {
    let (_tmp, proj) = run_guide("registry.md");
    assert!(proj.join("release/my-levels-0.1.0/level_1.json").is_file());
}

#[test]
fn guide_your_own_endpoints() {
    let (_tmp, proj) = run_guide("endpoints.md");
    assert!(proj.join("pipeline/my-bench.toml").is_file());
    let cfg = std::fs::read_to_string(proj.join("pipeline/my-bench.toml")).unwrap();
    assert!(cfg.contains("provider = \"vllm\""), "{cfg}");
}

#[test]
fn every_guide_is_linked_and_tested() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    for e in std::fs::read_dir(repo().join("docs/guide")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(readme.contains(&format!("docs/guide/{name}")), "README does not link docs/guide/{name}");
        let this = std::fs::read_to_string(repo().join("tests/it/guides.rs")).unwrap();
        assert!(this.contains(&format!("run_guide(\"{name}\")")), "docs/guide/{name} is not run by this test");
    }
}
