//! A temporary project with one LLM role `r` and a `judge` prompt, for the tests that
//! drive `LlmClient` directly (`llm_client`, `llm_endpoints`).
#![allow(dead_code)]

use std::path::Path;

use benchgen::ledger::Ledger;
use benchgen::llm::{LlmClient, LlmMode, Prompt};
use benchgen::settings::Settings;
use serde::Deserialize;
use serde_json::{Value, json};

use super::scripted_llm::Answer;

/// The typed answer the `judge` prompt asks for.
#[derive(Debug, Deserialize, schemars::JsonSchema, PartialEq)]
pub struct Verdict {
    pub verdict: String,
    pub reason: String,
}

/// A valid [`Verdict`].
pub fn good() -> Answer {
    Answer::json(json!({"verdict": "keep", "reason": "fine"}))
}

pub struct Project {
    pub dir: tempfile::TempDir,
    pub settings: Settings,
}

/// A project whose role `r` has the given endpoint lines (`base_url = …` or
/// `base_urls = […]`) and `extra` role lines.
pub fn project(endpoints: &str, extra: &str) -> Project {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline/prompts")).unwrap();
    std::fs::write(dir.path().join("pipeline/prompts/judge.md"), "You judge tools.\n--- user ---\nTool: {{ name }}\n")
        .unwrap();
    let settings = load(dir.path(), endpoints, extra).unwrap();
    Project { dir, settings }
}

/// (Re)writes `pipeline/test.toml` under `root` and loads it.
pub fn load(root: &Path, endpoints: &str, extra: &str) -> anyhow::Result<Settings> {
    let p = root.join("pipeline/test.toml");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(
        &p,
        format!(
            "[llm.roles.r]\nprovider = \"vllm\"\n{endpoints}\nmodel = \"m\"\ntemperature = 0.0\nseed = 1\nbackoff_ms = 20\n{extra}\n"
        ),
    )
    .unwrap();
    Settings::load(&p)
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A client in a new ledger run.
pub fn client(p: &Project, mode: LlmMode) -> LlmClient {
    let run = Ledger::open(&p.settings.artifacts).unwrap().begin_run("test", "", "0").unwrap();
    LlmClient::with_mode(&p.settings, "test", run, mode).unwrap()
}

pub fn prompt(name: &str) -> Prompt {
    Prompt::new("judge", json!({"name": name}))
}

/// The payloads of the ledger's events of `kind`, oldest first.
pub fn events(p: &Project, kind: &str) -> Vec<Value> {
    super::ledger_events(&p.settings.artifacts, kind)
}
