//! Equal function sets (EFS): groups of tools that do the same job, any of
//! which is a correct answer (ETOM's ground truth for implicit requests).
//!
//! Bottom-up: `efs pairs` proposes candidate pairs from embeddings and lexical
//! signals, `efs verify` has the LLM judge each pair, `efs build` joins verified
//! pairs with union–find. Top-down: `efs topdown` writes requests per set,
//! retrieves tools for each and lets the LLM pick every tool that serves it.
//! Humans settle what is borderline (`efs review export/import`), and
//! `efs finalize` writes `artifacts/efs-finalize/final.json` and `report.md`;
//! `efs compare` measures the sets against a reference EFS file.

pub mod build;
pub mod compare;
pub mod finalize;
pub mod index;
pub mod lexical;
pub mod pairs;
pub mod plan;
pub mod review;
pub mod topdown;
pub mod verify;

use serde::{Deserialize, Serialize};

use crate::config_doc::Key;

pub use pairs::PairSettings;

/// `[efs]` in the pipeline config.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EfsSettings {
    #[serde(default)]
    pub pairs: PairSettings,
    #[serde(default)]
    pub verify: VerifySettings,
    #[serde(default)]
    pub topdown: TopdownSettings,
    #[serde(default)]
    pub finalize: FinalizeSettings,
}

/// `[efs]`; absent: its stages are not part of `run` (each still runs alone, with defaults).
impl crate::settings::Section for EfsSettings {
    const NAME: &'static str = "efs";
    type Value = Option<Self>;
    const KEYS: &'static [Key] = &[
        Key::table("pairs", "Candidate pairs from embeddings and lexical signals (`benchgen efs pairs`)."),
        Key::new("pairs.top_k", "integer", "10", "Neighbours each tool keeps."),
        Key::new("pairs.min_score", "number", "0.5", "Combined score a neighbour needs."),
        Key::new("pairs.min_cosine", "number", "0.45", "Cosine below which a pair is never considered."),
        Key::new("pairs.name_weight", "number", "0.25", "Weight of name-token overlap in the combined score."),
        Key::new("pairs.param_weight", "number", "0.1", "Weight of parameter-token overlap in the combined score."),
        Key::new(
            "pairs.action_penalty",
            "number",
            "0.1",
            "Subtracted when the two tools' actions (read, create, …) differ.",
        ),
        Key::new("pairs.same_server_penalty", "number", "0.1", "Subtracted for two tools of one server."),
        Key::new("pairs.cross_server_only", "bool", "false", "Never pair two tools of one server."),
        Key::new("pairs.mutual_only", "bool", "false", "Keep a pair only when both tools select each other."),
        Key::new(
            "pairs.rank_by",
            r#""score" | "rrf""#,
            r#""score""#,
            "Rank neighbours by the combined score, or by reciprocal-rank fusion of four views.",
        ),
        Key::new("pairs.rrf_k", "number", "10.0", "RRF's constant k: a view's vote for rank r is `1 / (rrf_k + r)`."),
        Key::new("pairs.list_size", "integer", "10", "Candidates shown in one listwise verification call."),
        Key::new(
            "pairs.max_calls",
            "integer",
            "0",
            "Budget of planned LLM calls (0: none); the least valuable are left out.",
        ),
        Key::new(
            "pairs.index",
            r#""exact" | "blocked" | "ann" | "auto""#,
            r#""auto""#,
            "Plain loop (`exact`), matrix-multiply tiles (`blocked`, alias `ann`), or `auto`: blocked at 5,000 tools.",
        ),
        Key::new("pairs.threads", "integer", "0", "Worker threads (0: one per core; not hashed)."),
        Key::table("verify", "The LLM judging the candidate pairs (`benchgen efs verify`)."),
        Key::new("verify.role", "string", r#""verifier""#, "LLM role that judges pairs."),
        Key::new(
            "verify.mode",
            r#""listwise" | "pairwise""#,
            r#""listwise""#,
            "One call per tool and its candidates, or one call per pair.",
        ),
        Key::new("verify.template", "string", r#""efs_verify""#, "Prompt template of pairwise calls."),
        Key::new("verify.list_template", "string", r#""efs_verify_list""#, "Prompt template of listwise calls."),
        Key::new("verify.concurrency", "integer", "4", "Pairs judged at once (not hashed)."),
        Key::new(
            "verify.max_failed_share",
            "number",
            "0.0",
            "Share of pairs (0 to 1) whose answer may stay invalid; they are listed in `failed.json`.",
        ),
        Key::table("topdown", "Requests per set, retrieval and the LLM's selection (`benchgen efs topdown`)."),
        Key::new("topdown.writer_role", "string", r#""generator""#, "LLM role that writes user requests for a set."),
        Key::new(
            "topdown.judge_role",
            "string",
            r#""verifier""#,
            "LLM role that picks the retrieved tools serving a request.",
        ),
        Key::new("topdown.requests_template", "string", r#""efs_requests""#, "Prompt template of the requests."),
        Key::new("topdown.select_template", "string", r#""efs_select""#, "Prompt template of the selection."),
        Key::new("topdown.requests_per_set", "integer", "2", "Requests written per candidate set."),
        Key::new("topdown.retrieve", "integer", "10", "Tools retrieved from the whole catalog per request."),
        Key::unset(
            "topdown.max_sets",
            "integer",
            "Cross-check a seeded sample (`project.seed`) of this many sets (unset: every set); the others keep their verified members, with a `not-cross-checked` review item.",
        ),
        Key::new("topdown.concurrency", "integer", "4", "Sets, and LLM requests, in flight at once (not hashed)."),
        Key::new(
            "topdown.max_failed_share",
            "number",
            "0.0",
            "Share of sets (0 to 1) whose check may fail; they are listed in `failed.json` and keep their verified members, each with a `cross-check-failed` review item.",
        ),
        Key::table("finalize", "What `benchgen efs finalize` does with sets no person decided."),
        Key::new(
            "finalize.policy",
            r#""keep" | "drop-unselected""#,
            r#""keep""#,
            "Keep every verified set as built, or also drop members the top-down judge never selected.",
        ),
    ];
}

/// `[efs.verify]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VerifySettings {
    /// LLM role (`[llm.roles.<role>]`) that judges pairs.
    #[serde(default = "d_verifier")]
    pub role: String,
    /// Listwise (default: one call per anchor tool and its candidates, as planned by
    /// `efs pairs`) or pairwise (one call per pair).
    #[serde(default)]
    pub mode: plan::VerifyMode,
    /// Prompt template of pairwise calls (file stem under `pipeline/prompts/`).
    #[serde(default = "d_verify_template")]
    pub template: String,
    /// Prompt template of listwise calls.
    #[serde(default = "d_verify_list_template")]
    pub list_template: String,
    /// Pairs judged at once (a tuning knob, not hashed).
    #[serde(default = "d_concurrency", skip_serializing)]
    pub concurrency: usize,
    /// Share of pairs (0..=1) whose answer may stay invalid before the stage fails;
    /// those pairs are left out and listed in `failed.json` (see `docs/llm-batch.md`).
    #[serde(
        default,
        deserialize_with = "crate::llm::batch::de_share",
        skip_serializing_if = "crate::llm::batch::is_zero_share"
    )]
    pub max_failed_share: f64,
}

impl Default for VerifySettings {
    fn default() -> Self {
        Self {
            role: d_verifier(),
            mode: plan::VerifyMode::default(),
            template: d_verify_template(),
            list_template: d_verify_list_template(),
            concurrency: d_concurrency(),
            max_failed_share: 0.0,
        }
    }
}

/// `[efs.topdown]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TopdownSettings {
    /// LLM role that writes user requests for a set.
    #[serde(default = "d_writer")]
    pub writer_role: String,
    /// LLM role that selects the retrieved tools able to serve a request.
    #[serde(default = "d_verifier")]
    pub judge_role: String,
    #[serde(default = "d_requests_template")]
    pub requests_template: String,
    #[serde(default = "d_select_template")]
    pub select_template: String,
    /// Requests written per candidate set.
    #[serde(default = "d_requests")]
    pub requests_per_set: usize,
    /// Tools retrieved from the whole catalog per request.
    #[serde(default = "d_retrieve")]
    pub retrieve: usize,
    /// Cross-check a seeded sample of this many sets (`None`: every set); the others are
    /// kept as built and listed as not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sets: Option<usize>,
    /// Sets, and LLM requests, in flight at once (a tuning knob, not hashed).
    #[serde(default = "d_concurrency", skip_serializing)]
    pub concurrency: usize,
    /// Share of sets (0..=1) that may fail (an answer still invalid) before the stage
    /// fails; those sets are left out and listed in `failed.json`.
    #[serde(
        default,
        deserialize_with = "crate::llm::batch::de_share",
        skip_serializing_if = "crate::llm::batch::is_zero_share"
    )]
    pub max_failed_share: f64,
}

impl Default for TopdownSettings {
    fn default() -> Self {
        Self {
            writer_role: d_writer(),
            judge_role: d_verifier(),
            requests_template: d_requests_template(),
            select_template: d_select_template(),
            requests_per_set: d_requests(),
            retrieve: d_retrieve(),
            max_sets: None,
            concurrency: d_concurrency(),
            max_failed_share: 0.0,
        }
    }
}

/// What `efs finalize` does with top-down findings no human has decided.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AutoPolicy {
    /// Keep every verified set as built; findings stay open review items.
    #[default]
    Keep,
    /// Also drop members the top-down judge never selected for any request of their set.
    DropUnselected,
}

/// `[efs.finalize]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FinalizeSettings {
    /// Policy for sets without a human decision.
    #[serde(default)]
    pub policy: AutoPolicy,
}

fn d_verifier() -> String {
    "verifier".into()
}
fn d_writer() -> String {
    "generator".into()
}
fn d_verify_template() -> String {
    "efs_verify".into()
}
fn d_verify_list_template() -> String {
    "efs_verify_list".into()
}
fn d_requests_template() -> String {
    "efs_requests".into()
}
fn d_select_template() -> String {
    "efs_select".into()
}
fn d_concurrency() -> usize {
    4
}
fn d_requests() -> usize {
    2
}
fn d_retrieve() -> usize {
    10
}

/// `[efs]` of the config, or the defaults when the section is absent.
pub fn efs_settings(settings: &crate::settings::Settings) -> &EfsSettings {
    static DEFAULT: std::sync::LazyLock<EfsSettings> = std::sync::LazyLock::new(EfsSettings::default);
    settings.section::<EfsSettings>().as_ref().unwrap_or(&DEFAULT)
}

/// The request hash of a recorded LLM exchange: a stable name for it (the same as
/// [`crate::llm::Reply::exchange`], which stages get without asking the ledger). Event ids
/// depend on the order concurrent calls finish (and a cache hit is a new event),
/// so artifacts name exchanges by request hash, which the ledger resolves
/// ([`crate::ledger::Ledger::exchange_event`]), and stay byte-identical across reruns.
pub fn exchange_hash(ledger: &crate::ledger::Ledger, event_id: i64) -> anyhow::Result<String> {
    let ev = ledger.event(event_id)?.ok_or_else(|| anyhow::anyhow!("ledger event #{event_id} is missing"))?;
    ev.payload["request_hash"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("ledger event #{event_id} is not an LLM exchange"))
}

/// A stable, short set id derived from the set's smallest member, so ids survive
/// unrelated sets appearing or disappearing (review decisions refer to them).
pub fn set_id(members: &[String]) -> String {
    let first = members.iter().min().map(String::as_str).unwrap_or("");
    let h = crate::store::sha256_hex(first.as_bytes());
    format!("S{}", &h["sha256:".len().."sha256:".len() + 6])
}
