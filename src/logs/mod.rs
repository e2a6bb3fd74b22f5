//! The log track (FinMCP's method for any domain): import a domain's tool-call logs
//! into one normalised, anonymised session model (`import`), keep the sessions that
//! reflect a real need, were resolved through tool calls and answered (`curate`), and
//! split single-tool sessions into a benchmark and a seed pool (`split`). The grouped
//! multi-tool sessions feed the tool dependency graph (`crate::graph`).
//!
//! Config section `[logs]` (see docs/logs.md for every key).

pub mod anon;
pub mod curate;
pub mod import;
pub mod readers;
pub mod split;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config_doc::Key;

/// `[logs]`.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LogsSettings {
    /// Log files to import, in order.
    #[serde(default)]
    pub sources: Vec<LogSource>,
    /// Where the domain's tool catalog comes from (absent: tool names are not checked).
    #[serde(default)]
    pub catalog: Option<CatalogSource>,
    #[serde(default)]
    pub anonymise: AnonSettings,
    #[serde(default)]
    pub curate: CurateSettings,
    #[serde(default)]
    pub split: SplitSettings,
    /// Largest share of one source's records that may be malformed (kept out, listed in
    /// `malformed.jsonl`) before the import fails naming the file; default
    /// [`DEFAULT_MAX_MALFORMED_SHARE`]. A source without one readable record always fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_malformed_share: Option<f64>,
    /// A first look: import a seeded random subset of this many sessions (seed `[project]
    /// seed`); every session left out is counted (`not_sampled`) and listed in
    /// `report.json` → `sample`. Absent: every session. At least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<usize>,
}

/// `[logs]`; absent: its stages are not part of `run` (each still runs alone, with defaults).
impl crate::settings::Section for LogsSettings {
    const NAME: &'static str = "logs";
    type Value = Option<Self>;
    const KEYS: &'static [Key] = &[
        Key::derived(
            "max_malformed_share",
            "number",
            "`0.5`",
            "Largest share of a source's records that may be malformed (listed in `malformed.jsonl`).",
        ),
        Key::unset("sample", "integer", "Import a seeded random subset of this many sessions; unset: every session."),
        Key::tables("sources", "A log file to import, in order."),
        Key::derived("sources.name", "string", "the file stem", "Short name; session ids are `<name>:<native id>`."),
        Key::required("sources.path", "path", "The file, relative to the project root."),
        Key::new(
            "sources.format",
            r#""auto" | "finmcp" | "openai" | "events""#,
            r#""auto""#,
            "Its format; `auto` decides from the file's first byte and record.",
        ),
        Key::table("catalog", "Where the domain's tool catalog comes from; absent: tool names are not checked."),
        Key::unset("catalog.path", "path", "A catalog file, relative to the project root."),
        Key::new(
            "catalog.format",
            r#""mcp" | "catalog""#,
            r#""mcp""#,
            "An MCP `tools/list` result, or benchgen's catalog.",
        ),
        Key::unset("catalog.server", "string", "Or: fetch `tools/list` live from this `[mcp.servers.<name>]`."),
        Key::table("anonymise", "Pseudonyms for personal data in the logs."),
        Key::new(
            "anonymise.secret_env",
            "string",
            r#""BENCHGEN_ANON_SECRET""#,
            "Environment variable holding the pseudonym key (never written anywhere).",
        ),
        Key::new(
            "anonymise.detectors",
            "list of strings",
            r#"["email", "id_cn", "bank_card", "iban", "ip", "phone"]"#,
            "Built-in detectors to run.",
        ),
        Key::new(
            "anonymise.phone_regions",
            "list of strings",
            r#"["CN", "GB", "US", "DE", "FR", "IN", "JP"]"#,
            "Regions (ISO 3166 alpha-2) whose national phone formats the `phone` detector finds.",
        ),
        Key::tables("anonymise.rules", "An extra rule: the first capture group (or the whole match) is replaced."),
        Key::required(
            "anonymise.rules.name",
            "string",
            "Detector name in the report and the pseudonym prefix (upper-cased).",
        ),
        Key::required("anonymise.rules.pattern", "string", "The regex."),
        Key::table("curate", "Which sessions are kept: a real need, resolved through tool calls, answered."),
        Key::new(
            "curate.judge_role",
            "string",
            r#""judge""#,
            "LLM role judging genuine domain need and satisfactory answer.",
        ),
        Key::derived(
            "curate.second_role",
            "string",
            "`judge_role`, seed + 1",
            "LLM role for the second, independent verdict a drop by the LLM needs.",
        ),
        Key::new(
            "curate.second_temperature",
            "number",
            "0.7",
            "Sampling temperature of the second verdict when `second_role` is absent (the judge asked again).",
        ),
        Key::derived(
            "curate.keep_similarity",
            "number",
            "absent: off",
            "Keep by rule a session the word rules cannot tell whose called tool's text is at least this near its requests (`[embed]` model cosine, 0–1); the demo and `benchgen init` set 0.45.",
        ),
        Key::new("curate.need_template", "string", r#""logs_need""#, "Prompt template of the need judgement."),
        Key::new("curate.answer_template", "string", r#""logs_answer""#, "Prompt template of the answer judgement."),
        Key::new("curate.label_template", "string", r#""logs_label""#, "Prompt template of the scenario label."),
        Key::new("curate.domain", "string", r#""""#, "One line describing the domain, shown to the judge."),
        Key::new(
            "curate.scenarios",
            r#""logs" | "llm""#,
            r#""logs""#,
            "Scenario labels from the logs (FinMCP `scenery`), or picked by the LLM from `taxonomy`.",
        ),
        Key::new("curate.taxonomy", "list of strings", "[]", "`scenario-sub-scenario` labels the LLM may assign."),
        Key::new(
            "curate.relabel",
            "bool",
            "false",
            r#"With `scenarios = "llm"`: also relabel sessions that carry a label."#,
        ),
        Key::new("curate.concurrency", "integer", "2", "Sessions judged at once."),
        Key::unset(
            "curate.llm_sample",
            "integer",
            "Ask the LLM about at most this many sessions (seeded); the others pass as `unjudged`.",
        ),
        Key::new(
            "curate.max_failed_share",
            "number",
            "0.0",
            "Share of sessions whose judgement may fail; they are dropped with the reason.",
        ),
        Key::table("split", "Single-tool sessions split into a benchmark pool and a seed pool."),
        Key::unset("split.seed_size", "integer", "Seed-pool size; wins over `seed_ratio`."),
        Key::unset(
            "split.benchmark_size",
            "integer",
            "Benchmark-pool size; unset: every single-tool session not in the seed pool.",
        ),
        Key::derived("split.seed_ratio", "number", "`0.5`", "Share of single-tool sessions for the seed pool."),
    ];
    const EXAMPLE: &'static str = r#"
[[logs.sources]]
path = "raw/logs.jsonl"

[[logs.anonymise.rules]]
name = "ticket"
pattern = "T-[0-9]+"
"#;
}

/// Default of `[logs] max_malformed_share`: more than half of a file unreadable is a wrong
/// `format` or encoding, not a few broken lines.
pub const DEFAULT_MAX_MALFORMED_SHARE: f64 = 0.5;

impl LogsSettings {
    pub fn max_malformed_share(&self) -> f64 {
        self.max_malformed_share.unwrap_or(DEFAULT_MAX_MALFORMED_SHARE)
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Decided from the file's first non-blank byte and first record.
    #[default]
    Auto,
    /// FinMCP sample JSON: a JSON array of samples with `messages` (and `tool_list`, `scenery`).
    Finmcp,
    /// OpenAI chat-messages JSONL: one conversation per line.
    Openai,
    /// Generic event JSONL: one tool call per line.
    Events,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Auto => "auto",
            LogFormat::Finmcp => "finmcp",
            LogFormat::Openai => "openai",
            LogFormat::Events => "events",
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogSource {
    /// Short name; session ids are `<name>:<native id>`. Default: the file stem.
    #[serde(default)]
    pub name: Option<String>,
    /// File relative to the project root.
    pub path: PathBuf,
    #[serde(default)]
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum CatalogFormat {
    /// An MCP `tools/list` result: `{tools: [...]}` or a bare list of tools.
    #[default]
    Mcp,
    /// benchgen's catalog (`{servers: [{name, tools: [...]}]}`).
    Catalog,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogSource {
    /// A file relative to the project root.
    #[serde(default)]
    pub path: Option<PathBuf>,
    #[serde(default)]
    pub format: CatalogFormat,
    /// Or: fetch `tools/list` live from this `[mcp.servers.<name>]`.
    #[serde(default)]
    pub server: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AnonSettings {
    /// Environment variable holding the pseudonym key (never written anywhere).
    #[serde(default = "default_secret_env")]
    pub secret_env: String,
    /// Built-in detectors to run (default: all).
    #[serde(default = "anon::all_detectors")]
    pub detectors: Vec<String>,
    /// Regions (ISO 3166 alpha-2) whose national phone formats the `phone` detector finds.
    #[serde(default = "anon::default_phone_regions")]
    pub phone_regions: Vec<String>,
    /// Extra rules: the first capture group (or the whole match) is replaced.
    #[serde(default)]
    pub rules: Vec<AnonRule>,
}

impl Default for AnonSettings {
    fn default() -> Self {
        Self {
            secret_env: default_secret_env(),
            detectors: anon::all_detectors(),
            phone_regions: anon::default_phone_regions(),
            rules: Vec::new(),
        }
    }
}

fn default_secret_env() -> String {
    "BENCHGEN_ANON_SECRET".into()
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AnonRule {
    /// Detector name in the report and the pseudonym prefix (upper-cased).
    pub name: String,
    pub pattern: String,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ScenarioSource {
    /// The logs' own label (FinMCP `scenery`).
    #[default]
    Logs,
    /// The LLM picks one label of `taxonomy` (used when a session has none, or always with `relabel`).
    Llm,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CurateSettings {
    /// LLM role judging "genuine domain need" and "satisfactory answer".
    #[serde(default = "default_judge")]
    pub judge_role: String,
    /// LLM role asked for the second, independent verdict that a drop by the LLM needs
    /// (`need` or `answer`). Absent: `judge_role` again, with its seed + 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_role: Option<String>,
    /// The sampling temperature of the second verdict when `second_role` is absent: the
    /// judge role asked again at its own temperature (0 in the demo and in `benchgen init`'s
    /// configuration) decodes greedily, and a new seed alone then repeats the first verdict.
    #[serde(default = "default_second_temperature", skip_serializing_if = "is_default_second_temperature")]
    pub second_temperature: f64,
    /// Keep by rule a session whose need the word rules cannot tell when a successful
    /// call's tool (its name and log-catalog description, embedded by the `[embed]` model)
    /// is at least this near its requests (cosine). Absent: no embedding is made and such
    /// sessions go to the judge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_similarity: Option<f64>,
    #[serde(default = "default_need_template")]
    pub need_template: String,
    #[serde(default = "default_answer_template")]
    pub answer_template: String,
    #[serde(default = "default_label_template")]
    pub label_template: String,
    /// One line describing the domain, shown to the judge.
    #[serde(default)]
    pub domain: String,
    #[serde(default)]
    pub scenarios: ScenarioSource,
    /// `scenario-sub-scenario` labels the LLM may assign.
    #[serde(default)]
    pub taxonomy: Vec<String>,
    /// With `scenarios = "llm"`: also relabel sessions that carry a label.
    #[serde(default)]
    pub relabel: bool,
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Cost control: ask the LLM about at most this many sessions (a seeded sample of
    /// those passing `resolved` whose judgement needs the LLM: a need the rules do not
    /// settle, an answer without feedback, an LLM label); the others pass the LLM criteria
    /// as `unjudged`, with that reason recorded. Absent: every session is judged.
    #[serde(default)]
    pub llm_sample: Option<usize>,
    /// Share of sessions whose LLM judgement may fail (after retries) without failing the
    /// stage; such sessions are dropped with `dropped_by = "llm-failed"` and the reason.
    #[serde(
        default,
        deserialize_with = "crate::llm::batch::de_share",
        skip_serializing_if = "crate::llm::batch::is_zero_share"
    )]
    pub max_failed_share: f64,
}

impl Default for CurateSettings {
    fn default() -> Self {
        Self {
            judge_role: default_judge(),
            second_role: None,
            second_temperature: default_second_temperature(),
            keep_similarity: None,
            need_template: default_need_template(),
            answer_template: default_answer_template(),
            label_template: default_label_template(),
            domain: String::new(),
            scenarios: ScenarioSource::Logs,
            taxonomy: Vec::new(),
            relabel: false,
            concurrency: default_concurrency(),
            llm_sample: None,
            max_failed_share: 0.0,
        }
    }
}

fn default_second_temperature() -> f64 {
    0.7
}

fn is_default_second_temperature(t: &f64) -> bool {
    *t == default_second_temperature()
}

fn default_judge() -> String {
    "judge".into()
}
fn default_need_template() -> String {
    "logs_need".into()
}
fn default_answer_template() -> String {
    "logs_answer".into()
}
fn default_label_template() -> String {
    "logs_label".into()
}
pub(crate) fn default_concurrency() -> usize {
    2
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SplitSettings {
    /// Seed-pool size (single-tool sessions); wins over `seed_ratio`.
    #[serde(default)]
    pub seed_size: Option<usize>,
    /// Benchmark-pool size; absent: every single-tool session not in the seed pool.
    #[serde(default)]
    pub benchmark_size: Option<usize>,
    /// Share of single-tool sessions for the seed pool (default 0.5).
    #[serde(default)]
    pub seed_ratio: Option<f64>,
}

// ---------------------------------------------------------------------------
// The normalised session model (one JSON object per line of `sessions.jsonl`).

/// One conversation with its tool calls, after anonymisation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Session {
    /// `<source>:<native id>` (anonymised like any other text).
    pub id: String,
    pub source: String,
    /// Format it was read as.
    pub format: String,
    /// `file:line` of the record (first line for multi-line records).
    pub location: String,
    /// Scenario label, `scenario-sub-scenario[-…]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// A user-feedback signal when the logs have one (true = satisfied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<bool>,
    pub turns: Vec<Turn>,
    /// Session-level flags (e.g. a FinMCP `tool_list` that disagrees with the messages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<Flag>,
    /// Free metadata from the record (anonymised).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub meta: serde_json::Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Turn {
    pub user: String,
    /// Sequential groups; calls inside one group ran in parallel.
    pub groups: Vec<Vec<Call>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Call {
    pub tool: String,
    /// Parsed arguments; the raw (anonymised) text when they were not valid JSON.
    pub arguments: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Epoch milliseconds, when logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts_start: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts_end: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<Flag>,
}

/// Why a kept record is suspicious: `{code, detail}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Flag {
    pub code: String,
    pub detail: String,
}

impl Flag {
    pub fn new(code: &str, detail: impl Into<String>) -> Self {
        Self { code: code.into(), detail: detail.into() }
    }
}

pub mod flag {
    pub const UNKNOWN_TOOL: &str = "unknown-tool";
    pub const BAD_ARGUMENTS: &str = "bad-arguments";
    pub const ERROR_RESULT: &str = "error-result";
    pub const NO_RESULT: &str = "no-result";
    /// A session whose `feedback` value is none of the recognised signals (ignored).
    pub const UNRECOGNISED_FEEDBACK: &str = "unrecognised-feedback";
    pub const TOOL_LIST_FLAT: &str = "tool-list-flat";
    pub const TOOL_LIST_MISMATCH: &str = "tool-list-mismatch";
}

/// The sub-scenario of a session without a scenario label.
pub const UNLABELLED: &str = "unlabelled";

impl Session {
    pub fn calls(&self) -> impl Iterator<Item = &Call> {
        self.turns.iter().flat_map(|t| t.groups.iter().flatten())
    }
    pub fn call_count(&self) -> usize {
        self.calls().count()
    }
    /// `scenario-sub-scenario` (the first two levels), or `unlabelled`.
    pub fn sub_scenario(&self) -> String {
        match &self.scenario {
            Some(s) => s.split('-').take(2).collect::<Vec<_>>().join("-"),
            None => UNLABELLED.into(),
        }
    }
}

/// The ledger subject of a session's decisions (`benchgen explain log:<id>`).
pub fn subject(session_id: &str) -> String {
    format!("log:{session_id}")
}

/// Ledger event kinds of the log track.
pub mod kind {
    pub const REJECT: &str = "logs.reject";
    /// One imported session, with its `file:line`.
    pub const SESSION: &str = "logs.session";
    pub const DECISION: &str = "logs.decision";
    pub const SPLIT: &str = "logs.split";
}

/// Read a JSONL artifact of sessions, naming the line of any bad record.
pub fn parse_sessions(bytes: &[u8], what: &str) -> anyhow::Result<Vec<Session>> {
    let mut out = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let s: Session = serde_json::from_slice(line)
            .map_err(|e| anyhow::anyhow!("`{what}` line {}: not a benchgen session: {e}", i + 1))?;
        out.push(s);
    }
    Ok(out)
}

/// Read a JSONL stream of sessions line by line (a large artifact is never held
/// whole as bytes), naming the line of any bad record.
pub fn read_sessions(r: impl std::io::Read, what: &str) -> anyhow::Result<Vec<Session>> {
    use std::io::BufRead;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(r).lines().enumerate() {
        let line = line.map_err(|e| anyhow::anyhow!("cannot read `{what}`: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let s: Session = serde_json::from_str(&line)
            .map_err(|e| anyhow::anyhow!("`{what}` line {}: not a benchgen session: {e}", i + 1))?;
        out.push(s);
    }
    Ok(out)
}

/// Write sessions as JSONL (one per line) to a stream.
pub fn write_sessions<'a>(
    w: &mut impl std::io::Write,
    sessions: impl IntoIterator<Item = &'a Session>,
) -> anyhow::Result<()> {
    for s in sessions {
        serde_json::to_writer(&mut *w, s)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Sessions as JSONL bytes (one per line).
pub fn sessions_jsonl<'a>(sessions: impl IntoIterator<Item = &'a Session>) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    for s in sessions {
        serde_json::to_writer(&mut out, s)?;
        out.push(b'\n');
    }
    Ok(out)
}
