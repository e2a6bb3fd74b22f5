//! The pipeline config (`pipeline/NAME.toml`), parsed once and checked up front.
//!
//! Paths inside a config are relative to the project root, which is the folder
//! `project.root` names relative to the config file (default `..`, the folder
//! above `pipeline/`). Every section is `deny_unknown_fields`, so a typo is an
//! error naming the file, line and key instead of a silently ignored setting.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::error::{InputError, Problem};

pub const DEFAULT_CONFIG: &str = "pipeline/demo.toml";

/// The config a command uses when none is named (`--config`, `BENCHGEN_CONFIG`):
/// `pipeline/demo.toml` when it exists (benchgen's own repository), else the one
/// `pipeline/*.toml` of the project in the working folder (as `benchgen init` writes it).
/// `None` when there is none; several are an error naming them.
pub fn discover_config() -> Result<Option<PathBuf>> {
    let default = PathBuf::from(DEFAULT_CONFIG);
    if default.exists() {
        return Ok(Some(default));
    }
    let Ok(rd) = std::fs::read_dir("pipeline") else { return Ok(None) };
    let mut found: Vec<PathBuf> =
        rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "toml")).collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(crate::error::hinted(
            format!(
                "`pipeline/` holds {} configs ({}): which one?",
                found.len(),
                found.iter().map(|p| format!("`{}`", p.display())).collect::<Vec<_>>().join(", ")
            ),
            "pass `--config pipeline/NAME.toml` or set BENCHGEN_CONFIG",
        )),
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub project: ProjectSettings,
    #[serde(default)]
    pub registry: crate::registry::RegistrySettings,
    #[serde(default)]
    pub filter: crate::filter::FilterSettings,
    #[serde(default)]
    pub stats: crate::stats::StatsSettings,
    /// Absent: `embed` and `efs pairs` are not part of `run` (they still run alone, with defaults).
    #[serde(default)]
    pub embed: Option<crate::embed::EmbedSettings>,
    /// Absent: no EFS stage is part of `run` (each still runs alone, with defaults).
    #[serde(default)]
    pub efs: Option<crate::efs::EfsSettings>,
    #[serde(default)]
    pub llm: crate::llm::LlmSettings,
    #[serde(default)]
    pub mcp: crate::mcp::McpSettings,
    #[serde(default)]
    pub execute: crate::execute::ExecuteSettings,
    /// Absent: the log stages are not part of `run` (each still runs alone).
    #[serde(default)]
    pub logs: Option<crate::logs::LogsSettings>,
    /// Absent: `graph build` is not part of `run` (it still runs alone).
    #[serde(default)]
    pub graph: Option<crate::graph::GraphSettings>,
    /// Absent: the ETOM level stages are not part of `run` (each still runs alone).
    #[serde(default)]
    pub levels: Option<crate::levels::LevelsSettings>,
    /// Absent: `release` is not part of `run` (it still runs alone).
    #[serde(default)]
    pub release: Option<crate::release::ReleaseSettings>,
    /// Absent: the review stages are not part of `run` (each still runs alone).
    #[serde(default)]
    pub review: Option<crate::review::ReviewSettings>,
    /// `[synth]`: chain and role-play synthesis and validation (the log track's second half).
    #[serde(default)]
    pub synth: Option<crate::synth::SynthSettings>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectSettings {
    /// A short name for this pipeline (shown in status and reports).
    #[serde(default = "default_name")]
    pub name: String,
    /// Project root relative to the config file's folder.
    #[serde(default = "default_root")]
    pub root: PathBuf,
    /// Artifacts folder relative to the project root.
    #[serde(default = "default_artifacts")]
    pub artifacts: PathBuf,
    /// Seed every random choice derives from.
    #[serde(default)]
    pub seed: u64,
}

impl Default for ProjectSettings {
    fn default() -> Self {
        Self { name: default_name(), root: default_root(), artifacts: default_artifacts(), seed: 0 }
    }
}

fn default_name() -> String {
    "benchgen".into()
}
fn default_root() -> PathBuf {
    PathBuf::from("..")
}
fn default_artifacts() -> PathBuf {
    PathBuf::from("artifacts")
}

/// A loaded config and where it came from.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: Config,
    pub config_path: PathBuf,
    pub root: PathBuf,
    pub artifacts: PathBuf,
    /// How LLM calls use the ledger cache (`--llm-mode`; not part of any config hash).
    pub llm_mode: crate::llm::LlmMode,
}

impl Settings {
    /// Load and check a pipeline config. Every problem is reported at once.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            crate::error::hinted(
                format!("cannot read pipeline config `{}`: {e}", path.display()),
                "pass `--config pipeline/NAME.toml`, run from the project root, or start a project with `benchgen init`",
            )
        })?;
        let config: Config = toml::from_str(&text).map_err(|e| {
            let location = match e.span() {
                Some(span) => {
                    let line = text[..span.start].matches('\n').count() + 1;
                    format!("line {line}")
                }
                None => "config".to_string(),
            };
            // toml refuses a key given twice but says only "duplicate key": name it.
            let message = match e.span().and_then(|s| text.get(s)) {
                Some(key) if e.message() == "duplicate key" => format!("duplicate key `{}`", key.trim()),
                _ => e.message().to_string(),
            };
            InputError { file: path.display().to_string(), problems: vec![Problem::new(location, message)] }
        })?;
        config.check(path)?;
        let config_dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let root = config_dir.join(&config.project.root);
        let root = normalize(&root);
        let artifacts = root.join(&config.project.artifacts);
        Ok(Self { config, config_path: path.to_path_buf(), root, artifacts, llm_mode: Default::default() })
    }

    /// Settings with every default, rooted at the working folder: for commands
    /// that can run without a pipeline config (e.g. `sandbox --catalog FILE`).
    pub fn defaults() -> Result<Self> {
        let config: Config = toml::from_str("").context("default config")?;
        let root = normalize(Path::new("."));
        let artifacts = root.join(&config.project.artifacts);
        Ok(Self { config, config_path: PathBuf::from(DEFAULT_CONFIG), root, artifacts, llm_mode: Default::default() })
    }

    /// A path from the config, resolved against the project root.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() { p.to_path_buf() } else { self.root.join(p) }
    }

    /// A path shown relative to the project root when it lies inside it (so
    /// manifests and ledgers do not depend on where the clone lives).
    pub fn display_path(&self, p: &Path) -> String {
        let abs = normalize(p);
        match abs.strip_prefix(&self.root) {
            Ok(rel) => rel.to_string_lossy().replace('\\', "/"),
            Err(_) => abs.to_string_lossy().into_owned(),
        }
    }
}

impl Config {
    fn check(&self, path: &Path) -> Result<()> {
        let mut problems = Vec::new();
        crate::filter::check_rules(&self.filter, &mut problems);
        self.llm.check(&mut problems);
        if let Some(e) = &self.embed {
            e.check(&mut problems);
        }
        if let Some(role) = &self.filter.classifier_role
            && !self.llm.roles.contains_key(role)
        {
            problems.push(Problem::new("filter.classifier_role", format!("no `[llm.roles.{role}]` is configured")));
        }
        problems.extend(self.mcp.check());
        if problems.is_empty() { Ok(()) } else { Err(InputError { file: path.display().to_string(), problems }.into()) }
    }
}

/// A count that must be at least 1 (`top_k = 0` would silently produce nothing).
pub fn check_positive(problems: &mut Vec<Problem>, key: &str, value: usize) {
    if value == 0 {
        problems.push(Problem::new(key, "must be at least 1"));
    }
}

/// A real number that must be finite and within `lo..=hi` (NaN compares false
/// with everything, so it would silently disable a threshold).
pub fn check_range(problems: &mut Vec<Problem>, key: &str, value: f64, lo: f64, hi: f64) {
    if !value.is_finite() {
        problems.push(Problem::new(key, format!("must be a finite number, not {value}")));
    } else if value < lo || value > hi {
        problems.push(Problem::new(key, format!("must be between {lo} and {hi}, not {value}")));
    }
}

/// Lexically normalise a path (make it absolute, drop `.` and resolve `..`)
/// without touching the filesystem.
pub fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let abs = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().unwrap_or_default().join(p) };
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Hash of a config section: canonical JSON of the parsed values, so comments
/// and formatting in the TOML do not make a stage stale.
pub fn section_hash<T: Serialize>(section: &T) -> Result<String> {
    let json = serde_json::to_vec(section).context("cannot serialise config section")?;
    Ok(crate::store::sha256_hex(&json))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_str(text: &str) -> Result<Settings> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pipeline/x.toml");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        Settings::load(&p)
    }

    #[test]
    fn unknown_key_names_line_and_key() {
        let err = load_str("[filter]\ndrop_servers_without_tool = true\n").unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("line 2"), "{msg}");
        assert!(msg.contains("drop_servers_without_tool"), "{msg}");
    }

    #[test]
    fn every_bad_rule_is_reported_at_once() {
        let err = load_str(
            r#"
[[filter.rules]]
id = "a"
target = "tool"
class = "trivial"
reason = "r"
name = ["("]
[[filter.rules]]
id = "a"
target = "server"
class = "meta"
reason = "r"
"#,
        )
        .unwrap_err();
        let e = err.downcast_ref::<InputError>().unwrap();
        assert_eq!(e.problems.len(), 3, "{e}");
    }

    #[test]
    fn root_defaults_to_folder_above_pipeline() {
        let s = load_str("").unwrap();
        assert!(s.artifacts.ends_with("artifacts"));
        assert!(!s.root.ends_with("pipeline"));
    }
}
