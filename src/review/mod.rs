//! Review (FinMCP's dual expert review, made auditable): two reviewers score every
//! sample on a Likert scale in several dimensions; a sample is kept only when the
//! acceptance rule holds for both; disagreements go to an adjudicator; agreement
//! between reviewers is measured and reported.
//!
//! Stages, in order: `review-assign` ([`assign`]: who reviews what, seeded and
//! load-balanced, sticky across reruns), `review-export` ([`sheets`]: one CSV/XLSX
//! sheet per reviewer), `review-import` ([`sheets`]: filled sheets and the web app's
//! submissions, validated all-or-nothing), `review-prereview` ([`prereview`]: optional
//! LLM scores with the same rubric, marked as LLM scores), `review-merge` ([`merge`]:
//! decisions, adjudication, agreement figures). `benchgen review serve` ([`serve`]) is
//! the web app for reviewers; it is a command, not a stage: its durable state is
//! `reviews/review.sqlite`, and what it collected enters the pipeline through
//! `reviews/web/*.jsonl`, which `review import` and `review merge` read.

pub mod agreement;
pub mod assign;
pub mod merge;
pub mod prereview;
pub mod serve;
pub mod sheets;
pub mod submissions;
pub mod view;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config_doc::Key;
use crate::error::{InputError, Problem};
use crate::settings::Settings;

/// Ledger event kinds of the review stages (subject `sample:<id>`).
pub mod kind {
    /// One reviewer's scores for one sample (human or LLM), as applied.
    pub const REVIEW: &str = crate::ledger::kind::REVIEW;
    /// The merged decision of one sample: both reviews, adjudication, rule.
    pub const DECISION: &str = "review.decision";
    /// One assignment of a sample to its reviewers.
    pub const ASSIGN: &str = "review.assign";
}

/// One scored dimension of the rubric.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Dimension {
    /// Column name in sheets and key in score maps (`[a-z0-9_]+`).
    pub id: String,
    /// What reviewers see.
    pub name: String,
    /// One line of guidance for reviewers and the LLM pre-reviewer.
    #[serde(default)]
    pub description: String,
}

fn dim(id: &str, name: &str, description: &str) -> Dimension {
    Dimension { id: id.into(), name: name.into(), description: description.into() }
}

/// FinMCP-Bench's five dimensions.
pub fn default_dimensions() -> Vec<Dimension> {
    vec![
        dim("relevance", "Question relevance", "the query is a realistic request of the domain and clearly stated"),
        dim(
            "completeness",
            "Tool-chain completeness",
            "the tool calls cover everything the query needs; nothing required is missing",
        ),
        dim(
            "consistency",
            "Tool-chain logical consistency",
            "the calls come in a sensible order, each using what earlier calls returned",
        ),
        dim(
            "reliability",
            "Answer reliability and traceability",
            "the final answer is correct and every claim can be traced to a tool result",
        ),
        dim("freshness", "Data freshness", "time-sensitive data comes from the tools, not from stale knowledge"),
    ]
}

/// `[review]`: the rubric, the roster, and the acceptance rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewSettings {
    /// The reviewer roster (TOML, `[[reviewer]]` tables).
    #[serde(default = "default_roster")]
    pub roster: PathBuf,
    /// Extra sample files (unified JSONL, `model::Sample`) reviewed with the pool's.
    #[serde(default)]
    pub extra_samples: Vec<PathBuf>,
    #[serde(default = "default_dimensions")]
    pub dimensions: Vec<Dimension>,
    #[serde(default = "default_scale_min")]
    pub scale_min: u8,
    #[serde(default = "default_scale_max")]
    pub scale_max: u8,
    /// A reviewer accepts a sample when every dimension scores at least this.
    #[serde(default = "default_accept_min")]
    pub accept_min: u8,
    /// Characters of a tool result shown in sheets and pages before it is shortened.
    #[serde(default = "default_result_chars")]
    pub result_chars: usize,
    /// Bootstrap resamples for the agreement confidence intervals.
    #[serde(default = "default_bootstrap")]
    pub bootstrap: usize,
    /// Environment variable holding the secret the reviewers' link tokens derive from.
    #[serde(default = "default_secret_env")]
    pub token_secret_env: String,
    #[serde(default)]
    pub prereview: Option<prereview::PrereviewSettings>,
    #[serde(default)]
    pub serve: serve::ServeSettings,
}

/// `[review]`; absent: its stages are not part of `run` (each still runs alone, with defaults).
impl crate::settings::Section for ReviewSettings {
    const NAME: &'static str = "review";
    type Value = Option<Self>;
    const KEYS: &'static [Key] = &[
        Key::new("roster", "path", r#""reviews/reviewers.toml""#, "Reviewer roster (TOML, `[[reviewer]]` tables)."),
        Key::new(
            "extra_samples",
            "list of paths",
            "[]",
            "Extra sample files (unified JSONL) reviewed with the pool's.",
        ),
        Key::new("scale_min", "integer", "1", "Lowest score."),
        Key::new("scale_max", "integer", "5", "Highest score (at most 9)."),
        Key::new(
            "accept_min",
            "integer",
            "4",
            "A reviewer accepts a sample when every dimension scores at least this.",
        ),
        Key::new("result_chars", "integer", "300", "Characters of a tool result shown in sheets and pages."),
        Key::new("bootstrap", "integer", "1000", "Bootstrap resamples for the agreement confidence intervals."),
        Key::new(
            "token_secret_env",
            "string",
            r#""BENCHGEN_REVIEW_SECRET""#,
            "Environment variable holding the secret the reviewers' link tokens derive from.",
        ),
        Key::tables("dimensions", "A scored dimension of the rubric; absent: FinMCP-Bench's five."),
        Key::required("dimensions.id", "string", "Column name in sheets and key in score maps (`[a-z0-9_]+`)."),
        Key::required("dimensions.name", "string", "What reviewers see."),
        Key::new(
            "dimensions.description",
            "string",
            r#""""#,
            "One line of guidance for reviewers and the LLM pre-reviewer.",
        ),
        Key::table("prereview", "LLM roles score each sample with the rubric; absent: no pre-review."),
        Key::required(
            "prereview.roles",
            "list of strings",
            "One or two LLM roles, each one LLM reviewer (`llm:<role>`).",
        ),
        Key::new("prereview.template", "string", r#""review_score""#, "Prompt template."),
        Key::new(
            "prereview.count_as_human",
            "bool",
            "false",
            "LLM scores decide like human ones where people have not scored.",
        ),
        Key::unset(
            "prereview.tiebreak",
            "string",
            "A third LLM role, asked only about samples the two `roles` split on; with `count_as_human`, its verdict decides them (a majority of three).",
        ),
        Key::new("prereview.concurrency", "integer", "2", "Samples in flight (not hashed)."),
        Key::new("prereview.max_failed_share", "number", "0.0", "Share of samples whose scoring may fail."),
        Key::table("serve", "The review web app (`benchgen review serve`)."),
        Key::new("serve.addr", "string", r#""127.0.0.1:8377""#, "Listen address (`--addr` overrides)."),
        Key::new("serve.db", "path", r#""reviews/review.sqlite""#, "The app's database (scores, drafts, sessions)."),
        Key::new(
            "serve.max_login_failures",
            "integer",
            "5",
            "Failed sign-ins allowed per client address within `login_window_s`.",
        ),
        Key::new("serve.login_window_s", "integer", "60", "The window of `max_login_failures`, in seconds."),
        Key::new("serve.session_hours", "integer", "12", "Hours a sign-in lasts."),
    ];
    const EXAMPLE: &'static str = r#"
[[review.dimensions]]
id = "relevance"
name = "Question relevance"

[review.prereview]
roles = ["judge"]
"#;
}

impl Default for ReviewSettings {
    fn default() -> Self {
        toml::from_str("").expect("review defaults")
    }
}

fn default_roster() -> PathBuf {
    PathBuf::from("reviews/reviewers.toml")
}
fn default_scale_min() -> u8 {
    1
}
fn default_scale_max() -> u8 {
    5
}
fn default_accept_min() -> u8 {
    4
}
fn default_result_chars() -> usize {
    300
}
fn default_bootstrap() -> usize {
    1000
}
fn default_secret_env() -> String {
    "BENCHGEN_REVIEW_SECRET".into()
}

impl ReviewSettings {
    /// The acceptance rule in words (written into every decision).
    pub fn rule(&self) -> String {
        let ids: Vec<&str> = self.dimensions.iter().map(|d| d.id.as_str()).collect();
        format!(
            "accepted iff both reviewers score >= {} (scale {}-{}) on all of: {}",
            self.accept_min,
            self.scale_min,
            self.scale_max,
            ids.join(", ")
        )
    }

    /// Whether one reviewer's scores accept the sample.
    pub fn passes(&self, scores: &BTreeMap<String, u8>) -> bool {
        self.dimensions.iter().all(|d| scores.get(&d.id).is_some_and(|s| *s >= self.accept_min))
    }

    pub fn check(&self, problems: &mut Vec<Problem>) {
        if self.dimensions.is_empty() {
            problems.push(Problem::new("review.dimensions", "must name at least one dimension"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, d) in self.dimensions.iter().enumerate() {
            if d.id.is_empty() || !d.id.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
                problems.push(Problem::new(
                    format!("review.dimensions[{i}].id"),
                    format!("`{}` must be lowercase letters, digits and `_`", d.id),
                ));
            }
            if !seen.insert(d.id.clone()) {
                problems.push(Problem::new(format!("review.dimensions[{i}].id"), format!("`{}` appears twice", d.id)));
            }
            if ["sample_id", "content_hash", "reviewer", "note"].contains(&d.id.as_str()) {
                problems.push(Problem::new(
                    format!("review.dimensions[{i}].id"),
                    format!("`{}` is a reserved column name", d.id),
                ));
            }
        }
        if self.scale_min >= self.scale_max {
            problems.push(Problem::new("review.scale_max", "must be greater than `review.scale_min`"));
        }
        if self.scale_max > 9 {
            problems.push(Problem::new("review.scale_max", "at most 9 (keys 1-9 score in the web app)"));
        }
        if self.accept_min < self.scale_min || self.accept_min > self.scale_max {
            problems.push(Problem::new("review.accept_min", "must lie on the scale"));
        }
        crate::settings::check_positive(problems, "review.bootstrap", self.bootstrap);
        if let Some(p) = &self.prereview {
            p.check(problems);
        }
    }
}

/// The `[review]` section, or its defaults when absent.
pub fn settings(s: &Settings) -> ReviewSettings {
    s.section::<ReviewSettings>().clone().unwrap_or_default()
}

/// At most how many samples (and turns) reach the pool that review and release read,
/// before anything runs: each enabled producer's bound and the extra sample files. `None`:
/// an input cannot be read yet. For estimates.
pub fn pool_bound(s: &Settings) -> Option<crate::samples::PoolBound> {
    use crate::samples::PoolBound;
    let mut b = PoolBound::default();
    if crate::synth::enabled(s) {
        b.add(crate::synth::validate::validated_bound(s)?);
    }
    if s.section_on("levels") {
        // Level queries are single-turn.
        let n = crate::levels::export::sample_bound(s)?;
        b.add(PoolBound { samples: n, turns: n });
    }
    for p in &settings(s).extra_samples {
        b.add(crate::samples::file_bound(&s.resolve(p))?);
    }
    Some(b)
}

/// A member of the roster.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Reviewer {
    pub id: String,
    pub name: String,
    /// Sample tags this reviewer is qualified for (family, kind or a scenario label);
    /// empty: any sample.
    #[serde(default)]
    pub expertise: Vec<String>,
    /// Most samples this reviewer takes (absent: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<usize>,
    /// `reviewer` (default) or `lead` (also adjudicates disagreements).
    #[serde(default)]
    pub role: Role,
    /// Raise to revoke this reviewer's link (a new token derives from it).
    #[serde(default = "one_u32")]
    pub token_version: u32,
}

fn one_u32() -> u32 {
    1
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    #[default]
    Reviewer,
    Lead,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RosterFile {
    #[serde(default)]
    reviewer: Vec<Reviewer>,
}

/// Parse a roster; every problem (duplicate ids, zero capacity, bad ids) at once.
pub fn parse_roster(text: &str, shown: &str) -> Result<Vec<Reviewer>, InputError> {
    let err = |location: String, message: String| InputError {
        file: shown.to_string(),
        problems: vec![Problem::new(location, message)],
    };
    let file: RosterFile = toml::from_str(text).map_err(|e| {
        let loc = e.span().map(|s| format!("line {}", text[..s.start].matches('\n').count() + 1));
        err(loc.unwrap_or_else(|| "roster".into()), e.message().to_string())
    })?;
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, r) in file.reviewer.iter().enumerate() {
        let loc = format!("reviewer[{i}] ({:?})", r.id);
        if r.id.is_empty()
            || !r.id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            || r.id.starts_with("llm")
        {
            problems.push(Problem::new(
                &loc,
                "id must be letters, digits, `_`, `-` or `.` and must not start with `llm` (kept for LLM reviewers)",
            ));
        }
        if !seen.insert(r.id.clone()) {
            problems.push(Problem::new(&loc, format!("id `{}` appears twice", r.id)));
        }
        if r.capacity == Some(0) {
            problems.push(Problem::new(&loc, "capacity must be at least 1 (remove the reviewer instead)"));
        }
    }
    if file.reviewer.is_empty() {
        problems.push(Problem::new("roster", "no `[[reviewer]]` entries"));
    }
    if problems.is_empty() { Ok(file.reviewer) } else { Err(InputError { file: shown.to_string(), problems }) }
}

/// The roster named in the config, resolved against the project root.
pub fn roster_path(s: &Settings) -> PathBuf {
    s.resolve(&settings(s).roster)
}

pub fn load_roster(s: &Settings, path: &Path) -> Result<Vec<Reviewer>> {
    let shown = s.display_path(path);
    let text = std::fs::read_to_string(path).map_err(|e| {
        crate::error::hinted(
            format!("cannot read the reviewer roster `{shown}`: {e}"),
            "write `[[reviewer]]` tables with `id` and `name` (see docs/review.md), or set `review.roster`",
        )
    })?;
    Ok(parse_roster(&text, &shown)?)
}

/// One reviewer's scores for one sample.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Score {
    pub sample_id: String,
    /// A roster id, or `llm:<role>` for LLM pre-review.
    pub reviewer: String,
    /// `human` or `llm`: LLM scores never count as human ones unless the config says so.
    pub kind: ScoreKind,
    /// The sample's content hash the reviewer saw.
    pub content_hash: String,
    pub scores: BTreeMap<String, u8>,
    #[serde(default)]
    pub note: String,
    /// Where it came from: `file:line` of a sheet, `web`, or `llm:<exchange hash>`.
    pub source: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum ScoreKind {
    Human,
    Llm,
}

/// Write records as JSON Lines (one compact object a line).
pub fn to_jsonl<T: Serialize>(items: &[T]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for it in items {
        serde_json::to_writer(&mut out, it)?;
        out.push(b'\n');
    }
    Ok(out)
}

/// Parse JSON Lines; a bad line is an error naming `shown:line`.
pub fn from_jsonl<T: serde::de::DeserializeOwned>(bytes: &[u8], shown: &str) -> Result<Vec<T>> {
    let text = std::str::from_utf8(bytes).with_context(|| format!("`{shown}` is not UTF-8"))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(line).with_context(|| format!("`{shown}:{}` is not a valid record", i + 1))?);
    }
    Ok(out)
}

/// HMAC-SHA256 (RFC 2104), for link tokens derived from the review secret.
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// A reviewer's link token: HMAC of the secret over the reviewer id and token version.
/// Never written to artifacts or the ledger; the server keeps only its SHA-256.
pub fn token_for(secret: &str, reviewer: &Reviewer) -> String {
    let msg = format!("benchgen-review-token:{}:{}", reviewer.id, reviewer.token_version);
    hex::encode(hmac_sha256(secret.as_bytes(), msg.as_bytes()))
}

/// A reviewer's single-use sign-in link code (`/login#link=…`): HMAC of the secret over
/// the reviewer id and token version, distinct from the personal token. The web app
/// accepts it once; since a browser keeps the link in its history, what stays there is a
/// spent code, while the reusable personal token never appears in a URL.
pub fn link_code_for(secret: &str, reviewer: &Reviewer) -> String {
    let msg = format!("benchgen-review-link:{}:{}", reviewer.id, reviewer.token_version);
    hex::encode(hmac_sha256(secret.as_bytes(), msg.as_bytes()))
}

/// SHA-256 of a token (what the server stores and compares).
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The review secret from the environment variable the config names.
pub fn secret(s: &Settings) -> Result<String> {
    let var = settings(s).token_secret_env;
    match std::env::var(&var) {
        Ok(v) if v.len() >= 16 => Ok(v),
        Ok(_) => Err(crate::error::hinted(
            format!("the review secret in `${var}` is shorter than 16 characters"),
            "use a long random value, e.g. `openssl rand -hex 32`",
        )),
        Err(_) => Err(crate::error::hinted(
            format!("the review secret is not set: `${var}` is empty"),
            format!("export {var}=<a long random value> (reviewers' link tokens derive from it)"),
        )),
    }
}

/// Shorten a text to `n` characters (with `…`), on one line.
pub fn clip(s: &str, n: usize) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() <= n { one } else { format!("{}…", one.chars().take(n).collect::<String>()) }
}

/// A sample rendered for a reviewer: each turn's request, its tool-call groups with
/// arguments and shortened results, and the answer.
pub fn render_sample(s: &crate::model::Sample, result_chars: usize) -> String {
    let mut out = String::new();
    for (ti, t) in s.turns.iter().enumerate() {
        if s.turns.len() > 1 {
            out.push_str(&format!("Turn {}\n", ti + 1));
        }
        out.push_str(&format!("User: {}\n", t.user.trim()));
        if t.trajectory.is_empty() && !t.reference_plan.is_empty() {
            out.push_str("Reference plan (not executed):\n");
            for c in &t.reference_plan {
                out.push_str(&format!("  step {}: {}\n", c.group + 1, c.alternatives.join(" | ")));
            }
        }
        for (gi, g) in t.trajectory.iter().enumerate() {
            let par = if g.len() > 1 { " (parallel)" } else { "" };
            out.push_str(&format!("Step {}{par}:\n", gi + 1));
            for c in g {
                let args = serde_json::to_string(&c.arguments).unwrap_or_default();
                let res = match (&c.error, &c.result) {
                    (Some(e), _) => format!("ERROR {}", clip(e, result_chars)),
                    (None, Some(r)) => clip(r, result_chars),
                    (None, None) => "(no result)".into(),
                };
                let left = c.left_out.as_deref().map(|w| format!(" [left out of the plan: {w}]")).unwrap_or_default();
                out.push_str(&format!("  {}({}) -> {}{left}\n", c.tool, clip(&args, result_chars), res));
            }
        }
        if let Some(a) = &t.gold_reply {
            out.push_str(&format!("Answer: {}\n", a.trim()));
        }
    }
    out
}

/// One line for a review event (used by `explain`).
pub fn describe(kind_: &str, p: &serde_json::Value) -> String {
    let s = |k: &str| p.get(k).and_then(serde_json::Value::as_str).unwrap_or("").to_string();
    let scores = |v: &serde_json::Value| {
        v.as_object()
            .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    match kind_ {
        kind::ASSIGN => format!(
            "assigned to {}",
            p["reviewers"]
                .as_array()
                .map(|a| a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(" and "))
                .unwrap_or_default()
        ),
        kind::REVIEW if p.get("scores").is_none() => p.to_string(),
        kind::REVIEW => format!(
            "{} review by `{}` ({}): {}{}",
            s("kind"),
            s("reviewer"),
            s("source"),
            scores(&p["scores"]),
            if s("note").is_empty() { String::new() } else { format!("; note: {}", s("note")) }
        ),
        kind::DECISION => {
            let mut d = format!("{} (decided by {})", s("decision"), p["decided_by"].as_str().unwrap_or("nobody yet"));
            for r in p["reviews"].as_array().into_iter().flatten() {
                d.push_str(&format!(
                    "; {} `{}`{}: {}",
                    r["kind"].as_str().unwrap_or(""),
                    r["reviewer"].as_str().unwrap_or(""),
                    if r["tiebreak"] == true { " (tie-break)" } else { "" },
                    scores(&r["scores"])
                ));
            }
            if let Some(a) = p.get("adjudication").filter(|a| a.is_object()) {
                d.push_str(&format!(
                    "; adjudicated `{}` by `{}`: {}",
                    a["decision"].as_str().unwrap_or(""),
                    a["adjudicator"].as_str().unwrap_or(""),
                    a["reason"].as_str().unwrap_or("")
                ));
                let earlier: Vec<String> = a["superseded"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| {
                        format!(
                            "revision {} `{}` by `{}`",
                            e["revision"].as_u64().unwrap_or(1),
                            e["decision"].as_str().unwrap_or(""),
                            e["adjudicator"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                if !earlier.is_empty() {
                    d.push_str(&format!(
                        " (revision {}, replacing {})",
                        a["revision"].as_u64().unwrap_or(1),
                        earlier.join(", ")
                    ));
                }
            }
            d.push_str(&format!("; rule: {}; {}", s("rule"), s("reason")));
            d
        }
        _ => p.to_string(),
    }
}

/// `benchgen explain sample:<id>` for a sample of the pool (the release explains a released
/// one first): how it was validated ([`crate::synth::validate::verdict_status`]) and how it
/// was reviewed; both record under the subject `sample:<id>`.
pub fn explain_sample(ledger: &crate::ledger::Ledger, runs: &[i64], id: &str) -> Result<crate::ledger::Explanation> {
    let subject = crate::model::Sample::subject_for(id);
    let direct = ledger.events_for(&subject, runs)?;
    if direct.is_empty() {
        return Err(crate::error::hinted(
            format!("no sample `{id}` in the current artifacts"),
            "sample ids are in `artifacts/validate/verdicts.jsonl` and `artifacts/review-assign/samples.jsonl` \
             (field `id`); run `benchgen validate` or `benchgen review assign` first",
        ));
    }
    let lineage = ledger.lineage(&direct.iter().map(|e| e.id).collect::<Vec<_>>())?;
    let reviews = direct.iter().filter(|e| e.kind == kind::REVIEW).count();
    let decision = direct.iter().rev().find(|e| e.kind == kind::DECISION);
    let status = match (decision, crate::synth::validate::verdict_status(&direct)) {
        (Some(d), _) => describe(&d.kind, &d.payload),
        (None, Some((true, v))) if reviews > 0 => format!("{v}; {reviews} review(s) so far, not merged yet"),
        // Accepted and not reviewed yet, or rejected (where the sample stopped, whatever
        // reviews it had).
        (None, Some((_, v))) => v,
        (None, None) if reviews > 0 => format!("{reviews} review(s) so far, not merged yet"),
        (None, None) => "made; neither validated nor reviewed yet".into(),
    };
    Ok(crate::ledger::Explanation { id: subject, item: "sample", status, record: None, lineage })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_test_case_2() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex::encode(mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn roster_problems_are_reported_together() {
        let e = parse_roster(
            "[[reviewer]]\nid = \"a\"\nname = \"A\"\ncapacity = 0\n[[reviewer]]\nid = \"a\"\nname = \"B\"\n[[reviewer]]\nid = \"llm-x\"\nname = \"X\"\n",
            "r.toml",
        )
        .unwrap_err();
        assert_eq!(e.problems.len(), 3, "{e}");
    }

    #[test]
    fn the_rule_needs_every_dimension_at_the_threshold() {
        let s = ReviewSettings::default();
        let mut m: BTreeMap<String, u8> = s.dimensions.iter().map(|d| (d.id.clone(), 4)).collect();
        assert!(s.passes(&m));
        m.insert("freshness".into(), 3);
        assert!(!s.passes(&m));
        m.remove("freshness");
        assert!(!s.passes(&m), "a missing score never passes");
    }
}
