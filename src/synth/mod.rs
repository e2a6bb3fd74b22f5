//! Synthesis on the log track (FinMCP-Bench's second half): multi-tool samples from tool
//! chains sampled in the dependency graph (`synth chains`, then `execute`), multi-turn
//! dialogues from a persona-driven role-play (`synth roleplay`), and the automatic check
//! every sample passes before review (`validate`).
//!
//! Config section `[synth]` (see docs/synth.md for every key). The roles are separate
//! (`planner_role`, `user_role`, `assistant_role`, `judge_role`) so a project can use one
//! model for all, as the paper did, or not.
//!
//! Executions run against the domain's own tools: by default an in-process `benchgen
//! sandbox` serving the log catalog in recorded-responses mode (a call the logs hold a
//! result for gets that result), or any `[mcp.servers]` entry named by `synth.server`.

pub mod chains;
pub mod gold;
pub mod roleplay;
pub mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::config_doc::Key;
use crate::logs::Session;
use crate::logs::import::LogTool;
use crate::mcp::{ClientOptions, McpClient};
use crate::settings::Settings;

/// `[synth]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SynthSettings {
    /// Writes chain queries and dialogue goals.
    #[serde(default = "default_role")]
    pub planner_role: String,
    /// Plays the user in role-play (sees persona, goal and the visible conversation only).
    #[serde(default = "default_role")]
    pub user_role: String,
    /// The agent with the MCP tools in role-play and in `execute` on chain queries.
    #[serde(default = "default_role")]
    pub assistant_role: String,
    /// Checks that every user request of a dialogue was addressed (`validate`).
    #[serde(default = "default_role")]
    pub judge_role: String,
    /// A `[mcp.servers]` entry to execute against (default: the built-in sandbox serving the
    /// log catalog with recorded responses).
    #[serde(default)]
    pub server: Option<String>,
    #[serde(default)]
    pub chains: ChainSettings,
    #[serde(default)]
    pub roleplay: RoleplaySettings,
    #[serde(default)]
    pub validate: ValidateSettings,
}

/// `[synth]`; absent: its stages are not part of `run` (each still runs alone, with defaults).
impl crate::settings::Section for SynthSettings {
    const NAME: &'static str = "synth";
    type Value = Option<Self>;
    const KEYS: &'static [Key] = &[
        Key::new("planner_role", "string", r#""synth""#, "Writes chain queries and dialogue goals."),
        Key::new(
            "user_role",
            "string",
            r#""synth""#,
            "Plays the user in role-play (persona, goal and visible conversation only).",
        ),
        Key::new(
            "assistant_role",
            "string",
            r#""synth""#,
            "The agent with the MCP tools in role-play and on chain queries.",
        ),
        Key::new("judge_role", "string", r#""synth""#, "Checks that every user request of a dialogue was addressed."),
        Key::unset(
            "server",
            "string",
            "A `[mcp.servers]` entry to execute against; unset: a sandbox answering with the logs' responses.",
        ),
        Key::table("chains", "Chain queries from paths in the tool graph (`benchgen synth chains`)."),
        Key::new(
            "chains.per_sub_scenario",
            "integer",
            "2",
            "Chains per sub-scenario (fewer when the graph has fewer paths).",
        ),
        Key::new(
            "chains.lengths",
            "table of numbers",
            "{ 2 = 1.0, 3 = 1.0 }",
            "Chain-length mix: weight per number of tools in the chain (keys at least 2).",
        ),
        Key::unset("chains.max_chains", "integer", "At most this many chains (a seeded subset); unset: no cap."),
        Key::new("chains.paths_per_pair", "integer", "20", "Distinct paths enumerated per tool pair."),
        Key::new("chains.template", "string", r#""synth_chain_query""#, "Prompt template of the chain query."),
        Key::new("chains.concurrency", "integer", "4", "Chains in flight (not hashed)."),
        Key::new("chains.max_failed_share", "number", "0.0", "Share of chains whose query may fail."),
        Key::table("roleplay", "Persona-driven role-play dialogues (`benchgen synth roleplay`)."),
        Key::new("roleplay.dialogues", "integer", "0", "Dialogues to simulate (0: the stage is off)."),
        Key::new("roleplay.turn_cap", "integer", "4", "Most user turns per dialogue."),
        Key::unset("roleplay.personas", "path", "Persona pool (TOML, `[[persona]]` tables; relative to the root)."),
        Key::new("roleplay.goal_template", "string", r#""synth_goal""#, "Prompt template of a dialogue's goal."),
        Key::new("roleplay.user_template", "string", r#""synth_user""#, "Prompt template of the simulated user."),
        Key::new(
            "roleplay.user_turns",
            "string",
            r#""simulated""#,
            "`simulated`: a user simulator writes each message, given the conversation and the turn's request of the goal's plan; `planned`: each message is the plan's request itself (no simulator; the dialogue ends with the plan).",
        ),
        Key::new("roleplay.concurrency", "integer", "4", "Dialogues in flight (not hashed)."),
        Key::new("roleplay.max_failed_share", "number", "0.0", "Share of dialogues that may fail."),
        Key::table("validate", "The automatic check of every sample (`benchgen validate`)."),
        Key::new(
            "validate.check_template",
            "string",
            r#""synth_check""#,
            "Prompt template of the check (role `judge_role`).",
        ),
        Key::new(
            "validate.need_template",
            "string",
            r#""synth_need_call""#,
            "The needed-call check of a call the rules leave open (role `judge_role`).",
        ),
        Key::new(
            "validate.answer_template",
            "string",
            r#""synth_answer_again""#,
            "The re-ask of an answer claiming what its calls did not do (role `assistant_role`).",
        ),
        Key::new("validate.concurrency", "integer", "4", "Samples in flight (not hashed)."),
        Key::unset(
            "validate.real_samples",
            "integer",
            "Real log samples to include (seeded, of the benchmark pool); unset: all.",
        ),
        Key::new("validate.max_failed_share", "number", "0.0", "Share of samples whose check may fail."),
    ];
}

impl Default for SynthSettings {
    fn default() -> Self {
        toml::from_str("").expect("defaults")
    }
}

fn default_role() -> String {
    "synth".into()
}

/// `[synth.chains]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ChainSettings {
    /// Chains per sub-scenario (fewer when the graph offers fewer distinct paths; the
    /// shortfall is reported).
    #[serde(default = "default_per_sub")]
    pub per_sub_scenario: usize,
    /// Chain-length mix: weight per number of tools in the chain (keys are lengths, ≥ 2).
    /// Each sub-scenario's target is split by these weights (largest remainder), so the
    /// Easy/Medium/Hard mix of the samples is controlled here.
    #[serde(default = "default_lengths")]
    pub lengths: BTreeMap<String, f64>,
    /// At most this many chains in all (a seeded subset of the sampled ones; absent: no cap).
    #[serde(default)]
    pub max_chains: Option<usize>,
    /// Distinct paths enumerated per tool pair (bounds the search on dense graphs).
    #[serde(default = "default_paths_per_pair")]
    pub paths_per_pair: usize,
    #[serde(default = "default_chain_template")]
    pub template: String,
    /// A tuning knob, not part of the config hash (as `[execute] concurrency`).
    #[serde(default = "default_concurrency", skip_serializing)]
    pub concurrency: usize,
    #[serde(
        default,
        deserialize_with = "crate::llm::batch::de_share",
        skip_serializing_if = "crate::llm::batch::is_zero_share"
    )]
    pub max_failed_share: f64,
}

impl Default for ChainSettings {
    fn default() -> Self {
        toml::from_str("").expect("defaults")
    }
}

fn default_per_sub() -> usize {
    2
}
fn default_lengths() -> BTreeMap<String, f64> {
    BTreeMap::from([("2".to_string(), 1.0), ("3".to_string(), 1.0)])
}
fn default_paths_per_pair() -> usize {
    20
}
fn default_chain_template() -> String {
    "synth_chain_query".into()
}
fn default_concurrency() -> usize {
    4
}

/// `[synth.roleplay]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RoleplaySettings {
    /// Dialogues to simulate (0: the stage is off).
    #[serde(default)]
    pub dialogues: usize,
    /// Most user turns per dialogue.
    #[serde(default = "default_turn_cap")]
    pub turn_cap: usize,
    /// Persona pool (TOML, `[[persona]]` tables of attributes; relative to the root).
    #[serde(default)]
    pub personas: Option<PathBuf>,
    #[serde(default = "default_goal_template")]
    pub goal_template: String,
    #[serde(default = "default_user_template")]
    pub user_template: String,
    /// Who writes the user's messages (see [`UserTurns`]).
    #[serde(default)]
    pub user_turns: UserTurns,
    /// A tuning knob, not part of the config hash (as `[execute] concurrency`).
    #[serde(default = "default_concurrency", skip_serializing)]
    pub concurrency: usize,
    #[serde(
        default,
        deserialize_with = "crate::llm::batch::de_share",
        skip_serializing_if = "crate::llm::batch::is_zero_share"
    )]
    pub max_failed_share: f64,
}

/// Who writes a dialogue's user messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UserTurns {
    /// A user simulator (`synth.user_role`), given the persona, the goal and its plan, the
    /// conversation so far and the turn's request: FinMCP's role-play. It may end early
    /// (`done`) and may go on past the plan up to `turn_cap`.
    #[default]
    Simulated,
    /// The goal's planned requests, one a turn, as written by the planner (who plays the
    /// user ahead of the conversation): no simulator exchange, and no reaction to what the
    /// assistant said. For small models that copy the assistant's reply as the user's
    /// next message (the demo's 1.5B did).
    Planned,
}

impl Default for RoleplaySettings {
    fn default() -> Self {
        toml::from_str("").expect("defaults")
    }
}

fn default_turn_cap() -> usize {
    4
}
fn default_goal_template() -> String {
    "synth_goal".into()
}
fn default_user_template() -> String {
    "synth_user".into()
}

/// `[synth.validate]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ValidateSettings {
    #[serde(default = "default_check_template")]
    pub check_template: String,
    /// The needed-call check of a call the rules leave open ([`gold`]), role `judge_role`.
    #[serde(default = "default_need_template")]
    pub need_template: String,
    /// The re-ask of an answer that claims what its calls did not do, role `assistant_role`.
    #[serde(default = "default_answer_template")]
    pub answer_template: String,
    /// A tuning knob, not part of the config hash (as `[execute] concurrency`).
    #[serde(default = "default_concurrency", skip_serializing)]
    pub concurrency: usize,
    /// Real log samples to include (a seeded sample of the benchmark pool; absent: all).
    #[serde(default)]
    pub real_samples: Option<usize>,
    #[serde(
        default,
        deserialize_with = "crate::llm::batch::de_share",
        skip_serializing_if = "crate::llm::batch::is_zero_share"
    )]
    pub max_failed_share: f64,
}

impl Default for ValidateSettings {
    fn default() -> Self {
        toml::from_str("").expect("defaults")
    }
}

fn default_check_template() -> String {
    "synth_check".into()
}

fn default_need_template() -> String {
    "synth_need_call".into()
}

fn default_answer_template() -> String {
    "synth_answer_again".into()
}

/// The `[synth]` section (defaults when absent).
pub fn settings(s: &Settings) -> SynthSettings {
    s.section::<SynthSettings>().clone().unwrap_or_default()
}

/// Synthesis runs when the config has the log track, the graph and `[synth]`.
pub fn enabled(s: &Settings) -> bool {
    // By name: presence is all synthesis needs of the other families' sections.
    s.section_on("logs") && s.section_on("graph") && s.section::<SynthSettings>().is_some()
}

/// Ledger event kinds of synthesis.
pub mod kind {
    /// A sampled chain with its seed examples and query (subject `sample:<id>`).
    pub const CHAIN: &str = "synth.chain";
    /// A simulated dialogue (subject `sample:<id>`).
    pub const DIALOGUE: &str = "synth.dialogue";
    /// A validation verdict (subject `sample:<id>`).
    pub const VALIDATION: &str = "validate.verdict";
}

/// Short stable hex id of some text (sample ids are derived from content, not position,
/// so a changed count does not rename the samples that stay).
pub fn short_hash(text: &str) -> String {
    let h = crate::store::sha256_hex(text.as_bytes());
    h.trim_start_matches("sha256:")[..10].to_string()
}

/// The MCP clients synthesis executes against: `synth.server` from `[mcp.servers]`, else
/// the in-process domain sandbox. Call inside a tokio runtime.
pub fn clients(settings: &Settings, tools: &[LogTool], sessions: &[Session]) -> Result<Vec<Arc<McpClient>>> {
    let opts = ClientOptions::from_settings(settings, settings.section::<crate::mcp::McpSettings>());
    match &self::settings(settings).server {
        Some(name) => {
            let all = settings.section::<crate::mcp::McpSettings>().all_servers(&settings.root)?;
            let spec = all.get(name).ok_or_else(|| {
                crate::error::UsageError(format!("`synth.server` names `{name}`, which is not in `[mcp.servers]`"))
            })?;
            Ok(vec![Arc::new(McpClient::new(name, spec.clone(), opts))])
        }
        None => Ok(vec![crate::sandbox::domain::domain_sandbox(tools, sessions, settings.project.seed, opts)?]),
    }
}

/// What decides the executions' server, for config hashes.
pub fn server_hash_part(settings: &Settings) -> Result<serde_json::Value> {
    Ok(match &self::settings(settings).server {
        Some(name) => {
            let all = settings.section::<crate::mcp::McpSettings>().all_servers(&settings.root)?;
            serde_json::json!({"server": name, "spec": all.get(name)})
        }
        None => serde_json::json!({"server": "sandbox:recorded", "seed": settings.project.seed}),
    })
}
