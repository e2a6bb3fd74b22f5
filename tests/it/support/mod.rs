//! Shared helpers of the integration tests, in one place: a temporary benchgen project
//! (pipeline config + demo data copied in) and a command runner with stable output
//! settings here; the scripted LLM test double, the MCP asset finder and the score
//! fixtures in the submodules.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;

pub mod batch_api;
pub mod llm_project;
pub mod mcp_assets;
pub mod registry_fixture;
pub mod schema_edges;
pub mod score_fixtures;
pub mod scripted_llm;
pub mod source_text;
pub mod upstream;

/// The repository root (where Cargo.toml is).
/// The payloads of the ledger's events of `kind` under `artifacts`, oldest first.
pub fn ledger_events(artifacts: &Path, kind: &str) -> Vec<serde_json::Value> {
    let conn = rusqlite::Connection::open(artifacts.join("ledger.sqlite")).unwrap();
    let mut st = conn.prepare("SELECT payload FROM events WHERE kind = ?1 ORDER BY id").unwrap();
    st.query_map([kind], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|s| serde_json::from_str(&s.unwrap()).unwrap())
        .collect()
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared/data/<rel>` beside the repository, when present.
pub fn shared_data(rel: &str) -> Option<PathBuf> {
    let p = repo().join("..").join("shared").join("data").join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipped: `{}` is absent (CI keeps ../shared beside the clone)", p.display());
        None
    }
}

/// Held by each test that runs a real llama-server, for its whole run: two such tests at
/// once put 4 model threads on 2 cores, where llama.cpp's per-layer barrier makes decoding
/// collapse (15.7 → 1.0 token/s measured, docs/benchmarks.md), so they took far longer
/// side by side than one after the other.
static REAL_MODEL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The llama-server binary and the 0.5B GGUF that `make setup` puts into `$BENCHGEN_CACHE`,
/// for the tests that run the real local model, with the guard that runs them one at a time
/// (keep it bound, e.g. `Some((bin, model, _one_at_a_time))`). Missing assets fail under
/// `CI=true` ("run make setup") and skip `test` with a printed reason elsewhere.
pub fn local_llm_assets(test: &str) -> Option<(PathBuf, PathBuf, std::sync::MutexGuard<'static, ()>)> {
    let cache = benchgen::llm::config::cache_dir();
    let bin = cache.join("llm/build/bin/llama-server");
    let model = cache.join("llm/models").join(benchgen::llm::config::SMALL_LOCAL_MODEL);
    if bin.is_file() && model.is_file() {
        // A test that panicked while holding it leaves nothing behind that matters.
        let guard = REAL_MODEL.lock().unwrap_or_else(|p| p.into_inner());
        return Some((bin, model, guard));
    }
    let msg = format!(
        "llama-server or the 0.5B model is missing from `{}`; run `make setup` (scripts/setup.d/10-llm-models.sh, 15-llm-server.sh)",
        cache.display()
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg}");
    }
    eprintln!("skipping {test}: {msg}");
    None
}

/// A bare project under `root` for `benchgen llm ping`: the repository's `llm-ping` prompt
/// copied in and `config` written to `root/<config_rel>` (a file under `pipeline/`).
pub fn llm_ping_project(root: &Path, config_rel: &str, config: &str) {
    std::fs::create_dir_all(root.join("pipeline/prompts")).unwrap();
    std::fs::copy(repo().join("pipeline/prompts/llm-ping.md"), root.join("pipeline/prompts/llm-ping.md")).unwrap();
    std::fs::write(root.join(config_rel), config).unwrap();
}

pub struct Project {
    pub dir: tempfile::TempDir,
    /// Stands in for the demo's local model (see [`Project::demo`]).
    pub llm: Option<scripted_llm::ScriptedLlm>,
}

impl Project {
    /// A project with the demo pipeline and the demo registry. The demo's filter
    /// classifier (`provider = "local"`, a real model) is pointed at the scripted test
    /// server, which keeps every item it is asked about, so these tests need no model and
    /// see the demo's intended keep/drop split.
    pub fn demo() -> Self {
        let mut p = Self::empty();
        p.copy_in("raw/demo/registry.json");
        p.copy_in("pipeline/prompts/filter-classify.md");
        for t in ["efs_verify", "efs_verify_list", "efs_requests", "efs_select"] {
            p.copy_in(&format!("pipeline/prompts/{t}.md"));
        }
        let llm = scripted_llm::ScriptedLlm::start(|seen| {
            // EFS prompts (the demo's verifier and generator roles): no pair is equivalent,
            // so the EFS stages run through with empty sets.
            let text = seen.all_text();
            let answer = if text.contains("Tool A: `") {
                serde_json::json!({"equivalent": false, "reason": "scripted"})
            } else if text.contains("Anchor: `") {
                // Listwise: "not equivalent" for every numbered candidate.
                let n = text.matches("\nCandidate ").count();
                let v: Vec<_> = (1..=n)
                    .map(|i| serde_json::json!({"candidate": i, "equivalent": false, "reason": "scripted"}))
                    .collect();
                serde_json::json!({"verdicts": v})
            } else if text.contains("User request:") {
                serde_json::json!({"selected": []})
            } else if text.contains("user requests") {
                serde_json::json!({"requests": []})
            } else {
                serde_json::json!({"reason": "needs live data", "verdict": "keep"})
            };
            scripted_llm::Answer::json(answer)
        });
        let cfg = std::fs::read_to_string(repo().join("pipeline/demo.toml")).unwrap();
        // The demo's log track (last in the file) has its own tests in tests/it/logs.rs.
        let cfg = match cfg.find("# The log track") {
            Some(i) => cfg[..i].to_string(),
            None => cfg,
        };
        assert!(cfg.contains("provider = \"local\""), "the demo's classifier role changed; update tests/it/support");
        let cfg = cfg.replace(
            "provider = \"local\"",
            &format!("provider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"scripted\"", llm.base_url()),
        );
        p.write("pipeline/demo.toml", cfg);
        p.llm = Some(llm);
        p
    }

    pub fn empty() -> Self {
        Self { dir: tempfile::tempdir().expect("tempdir"), llm: None }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    pub fn copy_in(&self, rel: &str) {
        let dst = self.path(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(repo().join(rel), dst).unwrap();
    }

    pub fn write(&self, rel: &str, contents: impl AsRef<[u8]>) {
        let dst = self.path(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::write(dst, contents).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    /// `benchgen` in the project root, with progress bars off.
    pub fn cmd(&self) -> Command {
        let mut c = Command::cargo_bin("benchgen").unwrap();
        c.current_dir(self.root())
            .env("BENCHGEN_NO_PROGRESS", "1")
            // The log track's pseudonym key (tests of a missing secret remove it).
            .env("BENCHGEN_ANON_SECRET", "it-support-secret")
            .env_remove("BENCHGEN_CONFIG")
            .env_remove("BENCHGEN_FAIL_AT");
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// Every file under `artifacts/` (relative path → bytes).
    pub fn artifacts(&self) -> BTreeMap<String, Vec<u8>> {
        tree(&self.path("artifacts"))
    }
}

/// `regex::Regex::new`, compiled once per pattern for the whole test binary: the scripted
/// models match every request they answer, and an unoptimised regex build per request was
/// an eighth of the CPU of the longest scripted test (perf, 2026-12-07).
pub fn regex(pattern: &str) -> Result<regex::Regex, regex::Error> {
    static CACHE: std::sync::LazyLock<std::sync::Mutex<BTreeMap<String, regex::Regex>>> =
        std::sync::LazyLock::new(Default::default);
    if let Some(re) = CACHE.lock().unwrap_or_else(|e| e.into_inner()).get(pattern) {
        return Ok(re.clone());
    }
    let re = regex::Regex::new(pattern)?;
    CACHE.lock().unwrap_or_else(|e| e.into_inner()).insert(pattern.to_string(), re.clone());
    Ok(re)
}

pub fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().replace('\\', "/");
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

/// `benchgen` as a plain child process, outside any project (for the tests that signal
/// it, give it their own pipes or spawn it as a server), with progress bars off and no LLM
/// mode from the environment.
pub fn bin() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_benchgen"));
    c.env("BENCHGEN_NO_PROGRESS", "1").env_remove("BENCHGEN_LLM_MODE");
    c
}

/// Stdout then stderr of a command, as one text.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Replace run durations so summaries snapshot stably.
pub fn redact_times(s: &str) -> String {
    let re = regex::Regex::new(r"in \d+ ms").unwrap();
    let s = re.replace_all(s, "in [ms] ms");
    let secs = regex::Regex::new(r"\b\d+\.\d s\b").unwrap();
    secs.replace_all(&s, "[s] s").into_owned()
}

#[track_caller]
pub fn assert_code(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "expected exit {code}\n--- stdout\n{}\n--- stderr\n{}",
        stdout(o),
        stderr(o)
    );
}
