//! `benchgen release`: the benchmark users come for, as a versioned folder
//! `release/<name>-<version>/` they can publish, regenerate, extend and audit.
//!
//! Why a stage of its own: it is the one place where the sample pool (`crate::samples`),
//! the review decisions, the catalogs, the EFS sets and the ledger meet, and the one output
//! that must never change once published. It streams the pool (two sorted JSONL files,
//! merged by id) and writes every file as it goes; only small per-sample values (table rows,
//! ids and hashes for the changelog) are kept.
//!
//! Publication: the files are written into `release/.<name>-<version>.partial/`, checked
//! into the stage's artifacts, and the folder is renamed into place. An existing version is
//! never overwritten: the same bytes again is a no-op, anything else is an error asking
//! for a new `[release] version`.
//!
//! Audit before publishing: where `[eval]` is configured, `benchgen run` first builds the
//! same files as a *release candidate* (`artifacts/release-candidate/`, [`candidate`],
//! nothing published), `benchgen eval` runs the agent panel on it, and this stage then
//! holds back every item the panel flagged `all-fail` until a person decides `keep` or
//! `leave out` in the adjudicated sheet (`[release] eval_review`), or, with `[release]
//! decide_flagged = "evidence"`, a rule standing in for a person decides where the panel's
//! evidence can (`eval_review::Evidence`); the card counts the held and rule-decided items
//! and the CHANGELOG lists them and every decision with its reason.
//!
//! See docs/release.md for the layout, the table schemas and `benchgen release verify`.

pub mod candidate;
pub mod card;
pub mod cassettes;
mod changelog;
pub mod content;
pub mod convert;
pub mod croissant;
pub mod eval_review;
pub mod inspect;
pub mod invented;
pub mod lineage;
mod pool;
mod publish;
pub mod servers;
pub mod tables;
pub mod verified;
pub mod verify;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::config_doc::Key;
use crate::error::{InputError, Problem, hinted};
use crate::model::{Family, Sample};
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, Ctx, Inputs, Manifest, Output, Plan, Stage, StageSpec};

pub const STAGE: &str = "release";

/// Review decisions, one JSON line per sample sorted by id, written by `benchgen review
/// merge`. Declared here until the review stage exports its own handle with this name.
pub(crate) const DECISIONS: Artifact<Decision> = Artifact::new("review-merge", "decisions.jsonl");
/// The review report, for its agreement figures.
pub(crate) const REVIEW_REPORT: Artifact = Artifact::new("review-merge", "report.md");

/// One review decision. Fields the release does not name (per-reviewer scores, notes, the
/// rule) are kept in `extra` and carried into `samples.parquet`.
#[derive(Debug, Clone, Deserialize)]
pub struct Decision {
    pub id: String,
    pub content_hash: String,
    /// `accepted`, `rejected`, `excluded` or `undecided`.
    pub decision: String,
    /// `human`, `llm` or `adjudication`; empty while undecided (`review merge` writes null).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub decided_by: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// The release's reasons (its summary's `left_out` classes) for a sample the review has not
/// accepted yet; what an undecided one waits for says where people should look.
const NOT_REVIEWED: &str = "not reviewed";
const WAITING_SCORES: &str = "review: waiting for scores";
const WAITING_PREREVIEW: &str = "review: waiting for an LLM review that failed";
const IN_QUEUE: &str = "review: in the adjudication queue";
const NOT_ASSIGNED: &str = "review: not assigned";
/// An undecided sample of decisions written before review-merge v5 (no `waiting_for`).
const UNDECIDED: &str = "review: undecided";

impl Decision {
    /// Why the review keeps the sample out (`None`: accepted): `review: <decision>`, and for
    /// an undecided sample what it waits for (review-merge's `waiting_for`).
    fn left_out_reason(&self) -> Option<String> {
        match self.decision.as_str() {
            "accepted" => None,
            "undecided" => Some(
                match self.extra.get("waiting_for").and_then(Value::as_str) {
                    Some("scores") => WAITING_SCORES,
                    Some("prereview") => WAITING_PREREVIEW,
                    Some("adjudication") => IN_QUEUE,
                    Some("assignment") => NOT_ASSIGNED,
                    _ => UNDECIDED,
                }
                .to_string(),
            ),
            other => Some(format!("review: {other}")),
        }
    }
}

/// The files of a release, then `$extra`: one list for [`FILES`] and [`WRITES`].
macro_rules! release_files {
    ($($extra:expr),*) => {
        &[
            "README.md",
            "croissant.json",
            "servers.json",
            "CHANGELOG.md",
            "SHA256SUMS",
            "samples.jsonl",
            "samples.parquet",
            "tools.parquet",
            "lineage.jsonl",
            "cassettes.jsonl",
            "level_1.json",
            "level_2.json",
            "level_3.json",
            "level_4.json",
            "level_5.json",
            "tool_equivalence_sets.json",
            "finmcp_single_tool.json",
            "finmcp_multi_tool.json",
            "finmcp_multi_turn.json",
            "inspect/benchgen_task.py",
            "inspect/tools.json",
            "invented_entities.json",
            $($extra),*
        ]
    };
}

/// The files a release may hold (under `artifacts/release/` and the published folder).
pub const FILES: &[&str] = release_files!();

/// Stages whose manifest counts make the card's yield funnel.
const FUNNEL: &[&str] = &[
    "registry-import",
    "filter",
    "efs-finalize",
    "logs-import",
    "logs-curate",
    "logs-split",
    "levels-export",
    "validate",
    "review-merge",
];

/// What the release and its candidate read: the pool, the review decisions, the catalogs,
/// the EFS sets and the funnel's manifests, then `$extra` (the release alone also reads
/// `eval`'s queue, which the candidate must not: `eval` reads the candidate).
macro_rules! pool_reads {
    ($($extra:expr),*) => {
        &[
            crate::samples::VALIDATED.optional(),
            crate::samples::LEVELS.optional(),
            crate::release::DECISIONS.optional(),
            crate::release::REVIEW_REPORT.optional(),
            crate::filter::CATALOG.optional(),
            crate::logs::import::CATALOG.optional(),
            crate::logs::curate::REPORT.optional(),
            crate::efs::finalize::ETOM_SETS.optional(),
            crate::levels::l3::QUERIES.optional(),
            crate::stage::Read::manifest("registry-import"),
            crate::stage::Read::manifest("filter"),
            crate::stage::Read::manifest("efs-finalize"),
            crate::stage::Read::manifest("logs-import"),
            crate::stage::Read::manifest("logs-curate"),
            crate::stage::Read::manifest("logs-split"),
            crate::stage::Read::manifest("levels-export"),
            crate::stage::Read::manifest("validate"),
            crate::stage::Read::manifest("review-merge"),
            crate::stage::Read::manifest("review-prereview"),
            $($extra),*
        ]
    };
}
pub(crate) use pool_reads;

/// The files the release and its candidate write (the card's plots besides [`FILES`]).
pub(crate) const WRITES: &[&str] = release_files!("plots/*");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "release",
    // 5: holds back the items `eval` flagged `all-fail` until they are decided.
    // 6: writes `croissant.json`. 7: writes `servers.json` (the pinned MCP servers).
    // 8: writes an Inspect AI task (`inspect/`). 9: `servers.json` counts log samples apart
    // (`logged`) and redacts credentials written in a pinned start. 10: the Inspect AI task's
    // agent loop does not run a group of calls already run again (nudge, then `repeated`).
    // 11: `decide_flagged = "evidence"`: a rule decides flagged items from the panel's
    // evidence; a kept flagged item's lineage record says who kept it and why. 12: the
    // Inspect AI task's system prompt ends as `benchgen eval`'s (`agent::NO_TOOL_FITS`).
    // 13: the rule holds an item whose agents agree on a reference tool's EFS sibling; the
    // Inspect AI task gives each turn at least the calls of the sample's largest turn.
    // 14: the card's "Real sessions: curation" section (drops per criterion and decider).
    // 15: the Inspect AI task's system prompt says to take no action the user did not ask for.
    // 16: ... and never to make up a value; the rule holds an L5 whose agents agree only on
    //     tools that share no word with the request (`evidence.unrelated_to_request`) for a
    //     person instead of leaving it out.
    // 17: such an L5 is held for a person (v16 as first committed kept it).
    // 18: `invented_entities.json`: the entities `levels l3` invented, by sample, for `eval`
    //     wherever the release is evaluated.
    // 19: the card's limitations say how many splits of the two LLM reviewers a third LLM
    //     reviewer decided (`[review.prereview] tiebreak`).
    // 20: the rule keeps a dialogue each of whose turns some panel agent made in that turn
    //     (`evidence.turns_covered_by`).
    // 21: the Inspect AI task's agent loop nudges a wordless first reply as `eval` does
    //      (`CALL_NUDGE`).
    // 22: a level sample's lineage line carries its plan check's decision on every step
    //     (`plan_check`, from its `levels.sample` event), readable without the ledger.
    // 23: the rule also keeps a dialogue where a turn no agent made asks for its reference's
    //     action and no agent called anything in it (and some agent made another turn).
    version: 23,
    about: "the versioned benchmark folder: ETOM and FinMCP files, unified JSONL and Parquet, per-sample lineage, dataset card, Croissant metadata, pinned servers, an Inspect AI task, checksums",
    reads: pool_reads!(eval_review::QUEUE.optional(), eval_review::ITEMS.optional()),
    writes: WRITES,
    section: Some("release"),
};

/// `[release]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseSettings {
    /// The benchmark's name (folder `release/<name>-<version>/`).
    pub name: String,
    /// Its version; a published version is never overwritten.
    pub version: String,
    /// Release only samples the review accepted, and fail when there is no review.
    #[serde(default = "yes")]
    pub require_review: bool,
    /// License on the dataset card (a Hugging Face license id).
    #[serde(default = "default_license")]
    pub license: String,
    /// One paragraph for the top of the card.
    #[serde(default)]
    pub description: String,
    /// Known limitations listed on the card (besides those the release finds itself).
    #[serde(default)]
    pub limitations: Vec<String>,
    /// Folder of releases, relative to the project root.
    #[serde(default = "default_dir")]
    pub dir: PathBuf,
    /// An adjudicated copy of `benchgen eval`'s review queue (`artifacts/eval/review.csv`):
    /// the samples whose `decision` is `leave out` leave this version, with the flags and
    /// note as the reason in the CHANGELOG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_review: Option<PathBuf>,
    /// Hold back every item `benchgen eval` flagged `all-fail` (no panel agent solved it)
    /// until `eval_review` decides it (`keep` or `leave out`).
    #[serde(default = "yes")]
    pub hold_flagged: bool,
    /// Who decides the flagged items the sheet leaves undecided: a person (the default) or
    /// a rule from the panel's evidence standing in for one.
    #[serde(default, skip_serializing_if = "eval_review::Decider::is_person")]
    pub decide_flagged: eval_review::Decider,
}

/// `[release]`; absent: its stages are not part of `run` (each still runs alone, with defaults).
impl crate::settings::Section for ReleaseSettings {
    const NAME: &'static str = "release";
    type Value = Option<Self>;
    const KEYS: &'static [Key] = &[
        Key::required("name", "string", "The benchmark's name (folder `release/<name>-<version>/`)."),
        Key::required("version", "string", "Its version; a published version is never overwritten."),
        Key::new(
            "require_review",
            "bool",
            "true",
            "Release only samples the review accepted; fail when there is no review.",
        ),
        Key::new("license", "string", r#""cc-by-4.0""#, "License on the dataset card (a Hugging Face license id)."),
        Key::new("description", "string", r#""""#, "One paragraph for the top of the card."),
        Key::new(
            "limitations",
            "list of strings",
            "[]",
            "Known limitations listed on the card, besides those it finds.",
        ),
        Key::new("dir", "path", r#""release""#, "Folder of releases, relative to the project root."),
        Key::unset(
            "eval_review",
            "path",
            "An adjudicated copy of `artifacts/eval/review.csv`: samples marked `leave out` leave this version.",
        ),
        Key::new(
            "hold_flagged",
            "bool",
            "true",
            "Hold back items `benchgen eval` flagged `all-fail` until `eval_review` decides them.",
        ),
        Key::new(
            "decide_flagged",
            "string",
            r#""person""#,
            "Who decides `all-fail` items `eval_review` leaves undecided: `\"person\"` (held back until the sheet says), or `\"evidence\"`: where the panel's evidence can, a rule standing in for a person leaves out (two agents agree on an offered tool outside the reference, other than a tool proposed for an L2's EFS set, a reference tool's EFS sibling, or, on an L5, tools that share no word with the request, which a person decides) or keeps (an agent solved it in another tool space, its calls cover the reference's, each turn of a dialogue was made in that turn by some agent, or asks for the action its reference call does and no agent tried any call in it, or two agents left out only a lookup of an entity `levels l3` invented); the card says so.",
        ),
    ];
    const EXAMPLE: &'static str = r#"
[release]
name = "demo-bench"
version = "0.1.0"
"#;
}

fn yes() -> bool {
    true
}
fn default_license() -> String {
    "cc-by-4.0".into()
}
fn default_dir() -> PathBuf {
    PathBuf::from("release")
}

pub(crate) fn settings(s: &Settings) -> ReleaseSettings {
    s.section::<ReleaseSettings>().clone().unwrap_or_else(|| ReleaseSettings {
        name: s.project.name.clone(),
        version: "0.1.0".into(),
        require_review: true,
        license: default_license(),
        description: String::new(),
        limitations: Vec::new(),
        dir: default_dir(),
        eval_review: None,
        hold_flagged: true,
        decide_flagged: eval_review::Decider::Person,
    })
}

/// The published folder of the configured version.
pub fn target_dir(s: &Settings) -> PathBuf {
    let r = settings(s);
    s.root.join(&r.dir).join(format!("{}-{}", r.name, r.version))
}

fn safe_part(v: &str) -> bool {
    !v.is_empty()
        && v != "."
        && v != ".."
        && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '+'))
}

/// A version's sort key.
type VersionKey = Vec<(u64, String)>;

/// Version order: dot/dash-separated parts, numbers compared as numbers.
fn version_key(v: &str) -> VersionKey {
    v.split(['.', '-', '+']).map(|p| (p.parse::<u64>().unwrap_or(u64::MAX), p.to_string())).collect()
}

/// The newest published version below the configured one: `(version, folder)`.
fn previous(s: &Settings) -> Option<(String, PathBuf)> {
    let r = settings(s);
    let dir = s.root.join(&r.dir);
    let prefix = format!("{}-", r.name);
    let mut found: Vec<(VersionKey, String, PathBuf)> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let v = name.strip_prefix(&prefix)?.to_string();
            let p = e.path();
            (p.join("samples.jsonl").is_file() && version_key(&v) < version_key(&r.version))
                .then(|| (version_key(&v), v, p))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, v, p)| (v, p))
}

pub struct ReleaseStage;

/// The plan of the release and of its candidate: the previous version's samples and the
/// adjudicated eval sheet are inputs outside `artifacts/`; the project seed is part of the
/// config (`inspect/tools.json` carries it).
pub(crate) fn plan(s: &Settings) -> Result<Plan> {
    let mut inputs = previous(s).map(|(_, p)| vec![p.join("samples.jsonl")]).unwrap_or_default();
    inputs.extend(settings(s).eval_review.map(|p| s.resolve(&p)));
    let config = json!({"release": settings(s), "seed": s.project.seed});
    Ok(Plan { inputs, config_hash: section_hash(&config)? })
}

/// What a build does with its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Hold back undecided `all-fail` items, write the stage's artifacts and publish.
    Publish,
    /// The stage's artifacts only (`artifacts/release-candidate/`), for `eval`.
    Candidate,
}

/// The eval audit as a build applies it: the adjudicated sheet and the flagged items it
/// does not decide.
#[derive(Debug, Default)]
struct Audit {
    adjudicated: eval_review::Adjudicated,
    /// Undecided `all-fail` items: id → why they are suspect.
    flagged: BTreeMap<String, String>,
    /// Hold them back (`[release] hold_flagged`), or publish them and say so.
    hold: bool,
}

impl Audit {
    /// Whether the audit keeps `id` out of this version: (the card's reason class, the
    /// CHANGELOG's reason).
    fn leaves_out(&self, id: &str) -> Option<(&'static str, String)> {
        if let Some(reason) = self.adjudicated.leave_out.get(id) {
            return Some(("left out after evaluation", reason.clone()));
        }
        let flagged = self.flagged.get(id).filter(|_| self.hold)?;
        Some((HELD, format!("held back: {flagged}; waiting for a decision")))
    }
}

/// The summary's left-out reason of held items.
const HELD: &str = "held back: flagged all-fail by the eval panel, waiting for a decision";

impl Stage for ReleaseStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "The versioned benchmark: `release/<name>-<version>/` (`[release] name`, `version`).

         Reads the sample pool (`validate/samples.jsonl`, `levels-export/samples.jsonl`), the
         review decisions (`review-merge/decisions.jsonl`, required unless `[release]
         require_review = false`) and agreement figures (`review-merge/report.md`), the catalogs (`filter/catalog.json`,
         `logs-import/catalog.json`), `efs-finalize/tool_equivalence_sets.json`,
         `levels-l3/queries.json` (the entities its L3 queries are about), the ledger and
         the previous version's `samples.jsonl`. Writes `artifacts/release/` and the same files
         into `release/<name>-<version>/`: `level_1.json`, `level_2.json`, `level_3.json`,
         `level_4.json`, `level_5.json`,
         `tool_equivalence_sets.json`, `finmcp_single_tool.json`, `finmcp_multi_tool.json`,
         `finmcp_multi_turn.json`, `samples.jsonl`, `samples.parquet`, `tools.parquet`,
         `lineage.jsonl`, `cassettes.jsonl` (each sample's recorded tool responses, for
         `benchgen eval`), the dataset card `README.md` with `plots/*.svg`, `croissant.json`
         (MLCommons Croissant 1.1 with responsible-AI fields), `servers.json` (the MCP servers
         the samples were executed against, pinned from the `mcp.server` events of `execute`
         and `synth roleplay`: start, package version, protocol, `tools/list` hashes), an
         Inspect AI task (`inspect/benchgen_task.py` with `inspect/tools.json`: `inspect eval`
         runs the release with no benchgen), `invented_entities.json` (where an L3 request is
         about an entity `levels l3` invented, for `benchgen eval`), `CHANGELOG.md` and
         `SHA256SUMS`. A published version is never overwritten. With `[eval]`, the panel first
         audits the release candidate (`benchgen release candidate`), and every item it flagged
         `all-fail` (`eval/review.csv`) is held back until `[release] eval_review` decides it
         (`hold_flagged = false`: published and listed on the card; `decide_flagged =
         \"evidence\"`: where the panel's evidence can decide, a rule stands in for a person,
         and the card says so). When no sample is accepted yet and some wait for people
         (scores, an adjudication, reviewers, or a decision on held items), it stops with
         \"waiting for people\", what each group waits for and where, the next step, and exit
         code 3 (not a failure: 1 is); published while some still wait, it says a new version
         publishes them. `benchgen release verify
         DIR` checks a release; with `--servers` it also starts the pinned servers and reports
         every tool changed since."
    }

    fn explain(&self, s: &Settings, id: &str) -> Result<Option<crate::ledger::Explanation>> {
        explain(s, id)
    }

    fn check(&self, s: &Settings, problems: &mut Vec<Problem>) {
        let r = settings(s);
        for (key, v) in [("release.name", &r.name), ("release.version", &r.version)] {
            if !safe_part(v) {
                problems.push(Problem::new(
                    key,
                    format!("`{v}` must be non-empty and use only letters, digits and `.`, `_`, `-`, `+`"),
                ));
            }
        }
    }

    fn plan(&self, s: &Settings) -> Result<Plan> {
        plan(s)
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        build(ctx, inputs, out, Mode::Publish)
    }

    /// The published folder: removed by hand, it is published again.
    fn external_outputs(&self, s: &Settings) -> Vec<PathBuf> {
        vec![target_dir(s)]
    }
}

/// Per-type figures for the card's table.
#[derive(Debug, Default, Clone)]
pub struct KindStats {
    pub n: usize,
    pub turns: usize,
    pub calls: usize,
    pub steps: usize,
    pub tools: usize,
    pub difficulty: BTreeMap<String, usize>,
}

impl KindStats {
    fn add(&mut self, o: &KindStats) {
        self.n += o.n;
        self.turns += o.turns;
        self.calls += o.calls;
        self.steps += o.steps;
        self.tools += o.tools;
        for (k, v) in &o.difficulty {
            *self.difficulty.entry(k.clone()).or_default() += v;
        }
    }
}

/// Review figures for the card.
#[derive(Debug, Default, Clone)]
pub struct ReviewSummary {
    pub reviewed: usize,
    pub decisions: BTreeMap<String, usize>,
    pub by: BTreeMap<String, usize>,
    /// No human decided any released sample: the LLM pre-review stood in.
    pub llm_stand_in: bool,
    pub agreement: Option<String>,
}

/// Everything the card shows.
#[derive(Debug, Default)]
pub struct Summary {
    pub name: String,
    pub version: String,
    pub license: String,
    pub description: String,
    pub samples: usize,
    pub pool: usize,
    pub tools: usize,
    pub files: Vec<String>,
    /// Format files holding no record (`[]`): listed, but given no dataset config.
    pub empty_files: std::collections::BTreeSet<String>,
    pub by_kind: BTreeMap<String, KindStats>,
    pub scenarios: BTreeMap<String, usize>,
    pub funnel: Vec<(String, String)>,
    pub left_out: BTreeMap<String, usize>,
    pub review: Option<ReviewSummary>,
    pub llm: BTreeMap<(String, String), card::ModelUse>,
    pub event_kinds: BTreeMap<String, usize>,
    pub limitations: Vec<String>,
    pub changelog_head: Option<String>,
    /// Items the eval panel flagged `all-fail`, published undecided (`hold_flagged = false`).
    pub flagged_published: usize,
    /// Flagged items decided by rule from the panel's evidence (`decide_flagged =
    /// "evidence"`): (kept, left out).
    pub flagged_by_rule: (usize, usize),
    /// Values the log track's import anonymised (its manifest's `anonymised` count); `None`
    /// when the log track did not run. For `croissant.json`'s personal-information field.
    pub anonymised: Option<u64>,
    /// How `logs curate` decided the real sessions (its `report.json`); `None` when the log
    /// track did not run.
    pub curation: Option<Curation>,
}

/// The card's account of `logs curate` (issue 38: a real session dropped, by which
/// criterion and by whom, with an example).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Curation {
    pub sessions: u64,
    pub kept: u64,
    pub dropped: Vec<CurationDrop>,
}

/// One row of [`Curation`]: the sessions a criterion dropped as decided by `by` (`rule`,
/// `feedback`, `llm`, `llm-agreed`, `llm-failed`, …), their share of all sessions and up
/// to three examples.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CurationDrop {
    pub criterion: String,
    pub by: String,
    pub sessions: u64,
    pub share: f64,
    pub examples: Vec<CurationExample>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CurationExample {
    pub id: String,
    pub reason: String,
}

/// A tool of the catalogs the release may use.
struct CatalogTool {
    server: String,
    tool: String,
    description: String,
    categories: String,
    input_schema: String,
    catalog: &'static str,
}

fn load_tools(inputs: &Inputs) -> Result<HashMap<String, CatalogTool>> {
    let mut tools = HashMap::new();
    if inputs.has(&crate::logs::import::CATALOG) {
        for t in inputs.json(&crate::logs::import::CATALOG)? {
            tools.insert(
                t.name.clone(),
                CatalogTool {
                    server: String::new(),
                    tool: t.name.clone(),
                    description: t.description.clone(),
                    categories: String::new(),
                    input_schema: t.input_schema.to_string(),
                    catalog: "logs-import",
                },
            );
        }
    }
    if inputs.has(&crate::filter::CATALOG) {
        let cat = inputs.json(&crate::filter::CATALOG)?;
        for (s, t) in cat.tools() {
            tools.insert(
                t.id.clone(),
                CatalogTool {
                    server: s.name.clone(),
                    tool: t.name.clone(),
                    description: t.description.clone(),
                    categories: s.categories.join(", "),
                    input_schema: t.input_schema.to_string(),
                    catalog: "filter",
                },
            );
        }
    }
    Ok(tools)
}

fn read_decisions(inputs: &Inputs) -> Result<HashMap<String, Decision>> {
    let file = "review-merge/decisions.jsonl";
    let mut out = HashMap::new();
    let mut problems = Vec::new();
    for (i, l) in BufReader::new(inputs.open_of(&DECISIONS)?).lines().enumerate() {
        let l = l.with_context(|| format!("cannot read `{file}`"))?;
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Decision>(&l) {
            Ok(d) if !["accepted", "rejected", "excluded", "undecided"].contains(&d.decision.as_str()) => problems
                .push(Problem::new(
                    format!("line {} ({}).decision", i + 1, d.id),
                    format!("`{}` is not accepted, rejected, excluded or undecided", d.decision),
                )),
            Ok(d) => {
                out.insert(d.id.clone(), d);
            }
            Err(e) => problems.push(Problem::new(format!("line {}", i + 1), format!("not a review decision: {e}"))),
        }
    }
    if !problems.is_empty() {
        return Err(InputError { file: file.into(), problems }.into());
    }
    Ok(out)
}

/// Mean of every number under a key containing `score` (per-reviewer scores).
fn score_mean(extra: &Map<String, Value>) -> Option<f64> {
    fn walk(v: &Value, scored: bool, acc: &mut (f64, usize)) {
        match v {
            Value::Number(n) if scored => {
                if let Some(f) = n.as_f64() {
                    acc.0 += f;
                    acc.1 += 1;
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, scored, acc)),
            Value::Object(m) => m.iter().for_each(|(k, x)| walk(x, scored || k.to_lowercase().contains("score"), acc)),
            _ => {}
        }
    }
    let mut acc = (0.0, 0);
    for (k, v) in extra {
        walk(v, k.to_lowercase().contains("score"), &mut acc);
    }
    (acc.1 > 0).then(|| acc.0 / acc.1 as f64)
}

/// Counts of a manifest for the funnel, without the ones a replay changes (LLM client
/// counters, timings).
fn funnel_counts(m: &Manifest) -> String {
    let volatile = ["cache", "retr", "token", "latency", "_ms", "duration", "attempt", "llm", "calls_made"];
    m.counts
        .iter()
        .filter(|(k, v)| v.is_number() && !volatile.iter().any(|w| k.contains(w)))
        .take(10)
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(hex::encode(h.finalize()))
}

/// Every file under `dir`, relative, sorted.
fn list_files(dir: &Path) -> Result<Vec<String>> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
        for e in std::fs::read_dir(dir).with_context(|| format!("cannot list `{}`", dir.display()))? {
            let p = e?.path();
            if p.is_dir() {
                walk(base, &p, out)?;
            } else {
                out.push(p.strip_prefix(base).expect("under base").to_string_lossy().replace('\\', "/"));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// `SHA256SUMS` of a release folder (every file but itself), in `sha256sum` format.
pub fn checksums(dir: &Path) -> Result<String> {
    let mut text = String::new();
    for f in list_files(dir)? {
        if f != "SHA256SUMS" {
            text.push_str(&format!("{}  {f}\n", sha256_file(&dir.join(&f))?));
        }
    }
    Ok(text)
}

pub(crate) fn build(ctx: &Ctx, inputs: &Inputs, out: &mut Output, mode: Mode) -> Result<()> {
    let s = ctx.settings;
    let cfg = settings(s);
    let rel_name = format!("{}-{}", cfg.name, cfg.version);
    let releases = s.root.join(&cfg.dir);
    let target = releases.join(&rel_name);

    let decisions = if inputs.has(&DECISIONS) { Some(read_decisions(inputs)?) } else { None };
    if decisions.is_none() && cfg.require_review {
        return Err(hinted(
            "no review decisions (`artifacts/review-merge/decisions.jsonl`); a release takes only reviewed samples",
            "run `benchgen review merge` first, or set `[release] require_review = false` to release unreviewed samples",
        ));
    }
    let catalog = load_tools(inputs)?;
    let audit = audit(s, &cfg, inputs, mode)?;

    let tmp = match mode {
        Mode::Publish => releases.join(format!(".{rel_name}.partial")),
        Mode::Candidate => releases.join(format!(".{rel_name}.candidate.partial")),
    };
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("cannot clear `{}`", tmp.display()))?;
    }
    std::fs::create_dir_all(tmp.join("plots")).with_context(|| format!("cannot create `{}`", tmp.display()))?;
    let mut partial = publish::Partial(Some(tmp.clone()));

    // The pool, merged by id.
    let mut pool = pool::write_pool(s, &cfg, inputs, &tmp, &catalog, (decisions.as_ref(), &audit))?;
    if !audit.hold {
        pool.summary.flagged_published = audit.flagged.keys().filter(|id| pool.current.contains_key(*id)).count();
    }
    let by_rule = &audit.adjudicated.by_rule;
    pool.summary.flagged_by_rule = (
        by_rule.iter().filter(|id| pool.current.contains_key(*id)).count(),
        by_rule
            .iter()
            .filter(|id| audit.adjudicated.leave_out.get(*id).is_some_and(|r| pool.left_out.get(*id) == Some(r)))
            .count(),
    );
    warn_unknown(out, &audit, &pool);
    cassettes::write(&tmp)?;
    servers::write(s, &tmp, &rel_name, &catalog)?;

    // EFS sets, where the registry track made levels.
    write_sets(inputs, &tmp, pool.etom_track)?;
    // The entities `levels l3` invented, for `eval` wherever the release is evaluated.
    if let Some(warning) = invented::write(inputs, &tmp)? {
        out.notes.push(warning);
    }
    // Tools used, and the Inspect AI task over them.
    write_tables(&tmp, &catalog, &mut pool, s.project.seed)?;

    // Changelog against the previous version.
    let mut changelog = changelog::changelog(inputs, s, &cfg, &pool.current, &pool.left_out, decisions.as_ref())?;
    changelog.0.push_str(&changelog::audit_log(&audit, &pool));
    pool.summary.changelog_head = changelog.1;
    std::fs::write(tmp.join("CHANGELOG.md"), changelog.0)?;

    // The card.
    let published = std::mem::take(&mut pool.published);
    let left_out = std::mem::take(&mut pool.left_out);
    let (summary, sums) = write_card(ctx, inputs, &cfg, &tmp, pool)?;

    if mode == Mode::Candidate {
        // The stage's artifacts only; `partial` removes the scratch folder.
        publish::copy_out(out, &tmp)?;
        out.count("samples", summary.samples);
        out.count("pool", summary.pool);
        out.count("left_out", summary.pool - summary.samples);
        out.notes.push(format!(
            "release candidate: {} of {} pool samples in `artifacts/{}/` (nothing published); `benchgen eval` runs the panel on it, then `benchgen release` publishes",
            summary.samples,
            summary.pool,
            candidate::STAGE
        ));
        return Ok(());
    }
    // Into the stage's artifacts, then publish.
    let shown = publish::publish(s, out, &tmp, &target, &sums, &mut partial)?;
    drop(partial);

    publish::published_notes(out, &summary, &shown);
    let mut left: Vec<(&String, &String)> = left_out.iter().collect();
    left.sort();
    let release_event = json!({"name": cfg.name, "version": cfg.version, "dir": shown, "samples": summary.samples,
                               "sha256sums": crate::store::sha256_hex(sums.as_bytes())});
    publish::published_events(out, (&rel_name, release_event), published, left);
    Ok(())
}

/// Ids the adjudicated eval sheet leaves out that are not in the pool: a warning.
fn warn_unknown(out: &mut Output, audit: &Audit, pool: &pool::Pooled) {
    // The rule decides only what the queue flagged: a person's sheet is what can name strays.
    let by_person = |id: &&String| !audit.adjudicated.by_rule.contains(*id);
    let leave_out = audit.adjudicated.leave_out.keys().filter(by_person).filter(|id| !pool.left_out.contains_key(*id));
    let keep = audit
        .adjudicated
        .keep
        .keys()
        .filter(by_person)
        .filter(|id| !pool.current.contains_key(*id) && !pool.left_out.contains_key(*id));
    let mut unknown: Vec<&String> = leave_out.chain(keep).collect();
    if !unknown.is_empty() {
        unknown.sort();
        let shown: Vec<&str> = unknown.iter().take(5).map(|s| s.as_str()).collect();
        out.notes.push(format!(
            "warning: the eval review decides {} sample(s) that are not in the pool: {}",
            unknown.len(),
            shown.join(", ")
        ));
    }
}

/// What `benchgen status` shows for the release when it waits for people (the state in
/// which `release` stops with exit code 3): the review decisions accept no sample yet and
/// some wait for scores, an adjudication or reviewers, or every sample that would be
/// released is held back after evaluation until a person decides it.
pub fn waiting_for_review(settings: &Settings) -> Option<crate::error::Waiting> {
    let path = settings.artifacts.join(DECISIONS.stage).join(DECISIONS.file);
    let (mut accepted, mut pool, mut left_out) = (0, 0, BTreeMap::<String, usize>::new());
    let reviewed = std::fs::read_to_string(path).ok();
    // As the release counts: the samples in the pool now, each by its decision (an accepted
    // one whose content changed since as changed after review), and those that reached the
    // pool after the review stages last ran as not reviewed; a decision whose sample left
    // the pool counts for nothing. Without a readable pool, the decisions alone.
    let in_pool = reviewed.as_ref().and_then(|_| pool::pool_hashes(settings));
    let mut decided = std::collections::HashSet::new();
    for d in reviewed.iter().flat_map(|t| t.lines()).filter_map(|l| serde_json::from_str::<Decision>(l).ok()) {
        let hash = match &in_pool {
            Some(hashes) => match hashes.get(&d.id) {
                Some(h) => h.as_str(),
                None => continue,
            },
            None => d.content_hash.as_str(),
        };
        pool += 1;
        match pool::left_out_by_review(&d, hash) {
            None => accepted += 1,
            Some(why) if d.decision == "undecided" || why == pool::CHANGED => *left_out.entry(why).or_default() += 1,
            Some(_) => {}
        }
        decided.insert(d.id);
    }
    if let Some(ids) = &in_pool {
        let new = ids.keys().filter(|id| !decided.contains(*id)).count();
        if new > 0 {
            *left_out.entry(NOT_REVIEWED.to_string()).or_default() += new;
        }
        pool = ids.len();
    }
    if reviewed.is_none() || accepted > 0 {
        // Held items count only when `eval` audited the latest candidate (it ran after it):
        // a candidate made since would be audited anew by `run` first.
        let run_of = |s: &str| Manifest::load(&settings.artifacts, s).ok().flatten().map(|m| m.run_id);
        if !matches!((run_of(candidate::STAGE), run_of(eval_review::QUEUE.stage)), (Some(c), Some(e)) if e > c) {
            return None;
        }
        // The samples that pass review (all, without one) may all be held back after
        // evaluation (the demo's were once): `release` then waits for people, and so must
        // `status`.
        let (held, candidate_pool) = held_candidate(settings)?;
        left_out.insert(HELD.to_string(), held);
        pool = pool.max(candidate_pool);
    }
    pool::waiting(&left_out, pool)
}

/// When the eval audit of a publishing run would hold back every sample of the release
/// candidate: how many it holds, and the candidate's pool. `None` otherwise, or when there
/// is no candidate to look at.
fn held_candidate(settings: &Settings) -> Option<(usize, usize)> {
    let text = std::fs::read_to_string(settings.artifacts.join(candidate::STAGE).join("samples.jsonl")).ok()?;
    let ids: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect();
    let inputs = crate::stage::inputs_now(&ReleaseStage, settings).ok()?;
    let audit = audit(settings, &self::settings(settings), &inputs, Mode::Publish).ok()?;
    let out: Vec<&'static str> = ids.iter().filter_map(|id| audit.leaves_out(id).map(|(class, _)| class)).collect();
    let held = out.iter().filter(|c| **c == HELD).count();
    let manifest = Manifest::load(&settings.artifacts, candidate::STAGE).ok().flatten();
    let pool = manifest.and_then(|m| m.counts.get("pool").and_then(Value::as_u64)).unwrap_or(0) as usize;
    (!ids.is_empty() && out.len() == ids.len() && held > 0).then_some((held, pool.max(ids.len())))
}

/// A released sample's row of `samples.parquet`; `release verify` rebuilds it from
/// `samples.jsonl` and `lineage.jsonl` to check the table.
pub(crate) fn sample_row(
    sample: &Sample,
    source: &str,
    content_hash: String,
    distinct_tools: usize,
    released_as: String,
    decision: Option<&Decision>,
) -> tables::SampleRow {
    let steps: usize =
        sample.turns.iter().map(|t| t.reference_plan.iter().map(|c| c.group).collect::<BTreeSet<_>>().len()).sum();
    tables::SampleRow {
        id: sample.id.clone(),
        family: match sample.family {
            Family::Etom => "etom".into(),
            Family::Finmcp => "finmcp".into(),
        },
        kind: sample.kind.as_str().into(),
        level: sample.kind.level().map(u32::from),
        difficulty: sample.difficulty.as_str().into(),
        category: sample.scenario.first().cloned().unwrap_or_default(),
        scenario: sample.scenario.join(" / "),
        turns: sample.turns.len() as u32,
        calls: sample.reference_calls() as u32,
        steps: steps as u32,
        distinct_tools: distinct_tools as u32,
        out_of_scope: sample.out_of_scope,
        source: source.into(),
        author: sample.author.clone(),
        review_decision: decision.map(|d| d.decision.clone()),
        decided_by: decision.map(|d| d.decided_by.clone()),
        review_score_mean: decision.and_then(|d| score_mean(&d.extra)),
        review_details: decision.filter(|d| !d.extra.is_empty()).map(|d| Value::Object(d.extra.clone()).to_string()),
        content_hash,
        released_as,
    }
}

/// The EFS sets, where the registry track made levels.
fn write_sets(inputs: &Inputs, tmp: &Path, etom_track: bool) -> Result<()> {
    if etom_track && inputs.has(&crate::efs::finalize::ETOM_SETS) {
        std::fs::write(tmp.join("tool_equivalence_sets.json"), inputs.bytes_of(&crate::efs::finalize::ETOM_SETS)?)?;
    }
    Ok(())
}

/// `tools.parquet` (the tools the released samples use), the Inspect AI task's `inspect/` files
/// over them, and `samples.parquet`.
fn write_tables(tmp: &Path, catalog: &HashMap<String, CatalogTool>, pool: &mut pool::Pooled, seed: u64) -> Result<()> {
    let tool_rows: Vec<tables::ToolRow> = pool
        .used
        .iter()
        .map(|(id, n)| {
            let t = &catalog[id];
            tables::ToolRow {
                tool_id: id.clone(),
                server: t.server.clone(),
                tool: t.tool.clone(),
                description: t.description.clone(),
                categories: t.categories.clone(),
                input_schema: t.input_schema.clone(),
                catalog: t.catalog.into(),
                samples: *n,
            }
        })
        .collect();
    pool.summary.tools = tool_rows.len();
    inspect::write(tmp, seed, &tool_rows)?;
    tables::write_tools(&tmp.join("tools.parquet"), tool_rows)?;
    tables::write_samples(&tmp.join("samples.parquet"), std::mem::take(&mut pool.cols))?;
    Ok(())
}

/// The card (`README.md`, its plots) and `SHA256SUMS`, written last; returns the summary
/// and the checksums.
fn write_card(
    ctx: &Ctx,
    inputs: &Inputs,
    cfg: &ReleaseSettings,
    tmp: &Path,
    pool: pool::Pooled,
) -> Result<(Summary, String)> {
    let pool::Pooled { mut summary, mut review, index, without_events, human, etom_track, fin_track, .. } = pool;
    for st in FUNNEL {
        if let Some(m) = ctx.manifest_of(st) {
            summary.funnel.push((st.to_string(), funnel_counts(&m)));
        }
    }
    if let Some(r) = review.as_mut() {
        r.llm_stand_in = human == 0;
        if inputs.has(&REVIEW_REPORT) {
            r.agreement = card::agreement_from_report(&String::from_utf8_lossy(inputs.bytes_of(&REVIEW_REPORT)?));
        }
    }
    summary.review = review;
    summary.llm = card::model_use(&index.llm);
    summary.event_kinds = index.kinds.clone();
    let mut limits = cfg.limitations.clone();
    if summary.review.is_none() {
        limits.push("Not reviewed: samples passed automatic validation only.".into());
    } else if summary.review.as_ref().is_some_and(|r| r.llm_stand_in) {
        limits.push(format!(
            "Review decisions come from an LLM pre-review standing in for human reviewers.{}{}",
            rubric_copies(ctx),
            tiebreaks(ctx)
        ));
    }
    if without_events > 0 {
        limits.push(format!(
            "{without_events} sample(s) have no ledger events of their own; their lineage names the artifact line they came from."
        ));
    }
    if let Some(n) = summary.left_out.get(HELD) {
        limits.push(format!(
            "{n} item(s) that no eval panel agent solved (`all-fail`) are held back until a person decides `keep` or `leave out`; CHANGELOG.md lists them with the panel's evidence."
        ));
    }
    if summary.flagged_published > 0 {
        limits.push(format!(
            "{} released item(s) were solved by no eval panel agent (`all-fail`) and are published without a decision (`[release] hold_flagged = false`); their ground truth may be wrong. CHANGELOG.md lists them with the panel's evidence.",
            summary.flagged_published
        ));
    }
    let (kept, left) = summary.flagged_by_rule;
    if kept + left > 0 {
        limits.push(format!(
            "{} item(s) that no eval panel agent solved (`all-fail`) were decided by rule from the panel's evidence, standing in for a person (`[release] decide_flagged = \"evidence\"`): {kept} kept (an agent solved it in another tool space, the panel's calls cover the reference's, each turn of a dialogue was made in that turn by some agent, or asks for the action its reference call does and no agent tried any call in it, or the agents left out only a lookup of an entity `levels l3` invented), {left} left out (two or more agents agree on an offered tool outside the reference, not an EFS equivalent of a reference tool nor, on an L5, only tools that share no word with the request); CHANGELOG.md gives each reason.",
            kept + left
        ));
    }
    if !etom_track {
        limits.push("No ETOM levels: the registry track did not run.".into());
    }
    if !fin_track {
        limits.push("No FinMCP-style samples: the log track did not run.".into());
    }
    limits.push("Tool outputs in trajectories come from the benchgen sandbox or recorded logs, not live services; answers that depend on fresh data may date.".into());
    summary.limitations = limits;
    for (rel, svg) in card::plots(&summary)? {
        std::fs::write(tmp.join(&rel), svg)?;
    }
    if fin_track {
        summary.anonymised = ctx.manifest_of("logs-import").and_then(|m| m.counts.get("anonymised")?.as_u64());
    }
    if inputs.has(&crate::logs::curate::REPORT) {
        let path = crate::logs::curate::REPORT.path(ctx.settings);
        summary.curation = Some(
            serde_json::from_slice(inputs.bytes_of(&crate::logs::curate::REPORT)?)
                .with_context(|| format!("`{}`: not a `logs curate` report", path.display()))?,
        );
    }
    let sums = publish::finish_folder(tmp, &mut summary)?;
    Ok((summary, sums))
}

/// The adjudicated eval sheet (`[release] eval_review`) and, when publishing with `[eval]`
/// configured, the items of `eval`'s queue flagged `all-fail` that it does not decide.
fn audit(s: &Settings, cfg: &ReleaseSettings, inputs: &Inputs, mode: Mode) -> Result<Audit> {
    let mut adjudicated = match &cfg.eval_review {
        Some(p) => eval_review::read(s, inputs, &s.resolve(p))?,
        None => eval_review::Adjudicated::default(),
    };
    let mut flagged = BTreeMap::new();
    // A queue left on disk by an eval that is no longer configured holds nothing back.
    if mode == Mode::Publish && s.section_on("eval") && inputs.has(&eval_review::QUEUE) {
        let name = format!("artifacts/{}/{}", eval_review::QUEUE.stage, eval_review::QUEUE.file);
        flagged = eval_review::all_fail(&name, inputs.bytes_of(&eval_review::QUEUE)?)?;
        flagged.retain(|id, _| !adjudicated.decided(id));
        if cfg.decide_flagged == eval_review::Decider::Evidence && !flagged.is_empty() {
            let (name, evidence) = panel_evidence(inputs)?;
            for (id, why) in std::mem::take(&mut flagged) {
                let Some(ev) = evidence.get(&id) else {
                    return Err(hinted(
                        format!("`{id}` is flagged in the eval queue and has no record in `{name}`"),
                        "run `benchgen eval` again: it writes both from one run",
                    ));
                };
                if !adjudicated.decide_by_rule(&id, &why, ev) {
                    flagged.insert(id, why);
                }
            }
        }
    }
    Ok(Audit { adjudicated, flagged, hold: cfg.hold_flagged })
}

/// [`eval_review::evidence`] of `eval`'s `items.jsonl`, which `eval` writes beside the
/// queue, and its name.
fn panel_evidence(inputs: &Inputs) -> Result<(String, BTreeMap<String, eval_review::Evidence>)> {
    let items = &eval_review::ITEMS;
    let name = format!("artifacts/{}/{}", items.stage, items.file);
    if !inputs.has(items) {
        return Err(hinted(
            format!("`[release] decide_flagged = \"evidence\"` needs the panel's evidence, and `{name}` is missing"),
            "run `benchgen eval` again: it writes `items.jsonl` beside `review.csv`",
        ));
    }
    let evidence = eval_review::evidence(&name, inputs.bytes_of(items)?)?;
    Ok((name, evidence))
}

/// `benchgen explain sample:<id>` for a released sample: its release record and ledger
/// lineage. `None` when the id is not in the current release (other explainers try).
pub fn explain(s: &Settings, id: &str) -> Result<Option<crate::ledger::Explanation>> {
    let Some(sample) = crate::model::Sample::id_in_subject(id) else { return Ok(None) };
    let path = s.artifacts.join(STAGE).join("lineage.jsonl");
    let Ok(f) = std::fs::File::open(&path) else { return Ok(None) };
    let needle = format!("{{\"id\":{}", serde_json::to_string(sample)?);
    let mut record: Option<Value> = None;
    for l in BufReader::new(f).lines() {
        let l = l?;
        if l.starts_with(&needle) {
            record = Some(serde_json::from_str(&l).with_context(|| format!("`{}` is corrupt", path.display()))?);
            break;
        }
    }
    let Some(record) = record else { return Ok(None) };
    let cfg = settings(s);
    let mut lineage = Vec::new();
    if let Some(ledger) = crate::ledger::Ledger::open_existing(&s.artifacts)? {
        let runs: Vec<i64> = s
            .stage_order
            .clone()
            .into_iter()
            .chain(FUNNEL.iter().copied())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter_map(|st| Manifest::load(&s.artifacts, st).ok().flatten())
            .map(|m| m.run_id)
            .collect();
        let mut roots = Vec::new();
        for subject in
            [crate::model::Sample::subject_for(sample), record["provenance_id"].as_str().unwrap_or("").to_string()]
        {
            if !subject.is_empty() {
                roots.extend(ledger.events_for(&subject, &runs)?.into_iter().map(|e| e.id));
            }
        }
        lineage = ledger.lineage(&roots)?;
    }
    let review = match &record["review"] {
        Value::Object(r) => format!(
            "; review: {} by {}",
            r.get("decision").and_then(Value::as_str).unwrap_or("?"),
            r.get("decided_by").and_then(Value::as_str).unwrap_or("?")
        ),
        _ => "; not reviewed".into(),
    };
    let status = format!(
        "released in `{}-{}` as `{}` (from `{}`){review}",
        cfg.name,
        cfg.version,
        record["released_as"].as_str().unwrap_or("?"),
        record["source"]["file"].as_str().unwrap_or("?"),
    );
    Ok(Some(crate::ledger::Explanation {
        id: crate::model::Sample::subject_for(sample),
        item: "released sample",
        status,
        record: Some(record),
        lineage,
    }))
}

/// What the card adds to the LLM pre-review's limitation when some of its reviews copied a
/// rubric description as their note (`review-prereview`'s `rubric_copies`): " In N of its
/// M reviews the note is the rubric's own description of a dimension, not something said
/// of the sample." Empty when none did or the stage never ran.
fn rubric_copies(ctx: &Ctx) -> String {
    let Some(m) = ctx.manifest_of(crate::review::prereview::STAGE) else { return String::new() };
    let count = |k: &str| m.counts.get(k).and_then(Value::as_u64).unwrap_or(0);
    match (count("rubric_copies"), count("llm_reviews")) {
        (0, _) => String::new(),
        (n, all) => format!(
            " In {n} of its {all} reviews the note is the rubric's own description of a dimension, not something said of the sample: their scores say little about it."
        ),
    }
}

/// What the card says of the LLM reviewers' splits a third LLM reviewer decided.
fn tiebreaks(ctx: &Ctx) -> String {
    let Some(m) = ctx.manifest_of(crate::review::merge::STAGE) else { return String::new() };
    match m.counts.get("decided_by_tiebreak").and_then(Value::as_u64).unwrap_or(0) {
        0 => String::new(),
        n => format!(
            " {n} sample(s) of the review pool on which the two LLM reviewers split were decided by a third LLM reviewer (`[review.prereview] tiebreak`, a majority of three), not by a lead."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revised_adjudication_is_read_as_its_latest_revision() {
        // A lead decided twice in the web app: `review merge` applies the latest revision
        // and keeps the first under `superseded`; the release reads the same outcome.
        use crate::review::merge::{Adjudication, DecidedBy, Decision as Merged, Outcome};
        let adj = |decision: &str, revision: u32, superseded: Vec<Adjudication>| Adjudication {
            decision: decision.into(),
            adjudicator: "lena".into(),
            reason: format!("revision {revision}"),
            source: format!("reviews/web/adjudications.jsonl:{revision}"),
            revision,
            superseded,
        };
        let merged = Merged {
            id: "s1".into(),
            content_hash: "sha256:00".into(),
            decision: Outcome::Accepted,
            decided_by: Some(DecidedBy::Adjudication),
            kind: crate::model::Kind::MultiTool,
            scenario: vec![],
            reviewers: vec!["a".into(), "b".into()],
            reviews: vec![],
            adjudication: Some(adj("accept", 2, vec![adj("reject", 1, vec![])])),
            rule: "both".into(),
            reason: "reviewers disagreed; `lena` decided: revision 2".into(),
            waiting_for: None,
        };
        let d: Decision = serde_json::from_str(&serde_json::to_string(&merged).unwrap()).unwrap();
        assert_eq!((d.decision.as_str(), d.decided_by.as_str()), ("accepted", "adjudication"));
        assert_eq!(d.extra["adjudication"]["superseded"][0]["decision"], "reject", "the first revision travels along");
    }

    #[test]
    fn an_undecided_merge_decision_is_read_with_no_decider() {
        // What `review merge` writes for a sample the two reviewers split on (the demo's
        // first full run stopped here: `decided_by` is null until someone decides).
        use crate::review::merge::{Decision as Merged, Outcome};
        let merged = Merged {
            id: "L1-1".into(),
            content_hash: "sha256:00".into(),
            decision: Outcome::Undecided,
            decided_by: None,
            kind: crate::model::Kind::L1,
            scenario: vec![],
            reviewers: vec!["a".into(), "b".into()],
            reviews: vec![],
            adjudication: None,
            rule: "both".into(),
            reason: "split".into(),
            waiting_for: Some(crate::review::merge::WaitingFor::Adjudication),
        };
        let line = serde_json::to_string(&merged).unwrap();
        assert!(line.contains("\"decided_by\":null"), "{line}");
        let d: Decision = serde_json::from_str(&line).unwrap();
        assert_eq!((d.decision.as_str(), d.decided_by.as_str()), ("undecided", ""));
        assert_eq!(d.left_out_reason().as_deref(), Some(IN_QUEUE));
    }

    #[test]
    fn versions_order_numerically() {
        assert!(version_key("0.10.0") > version_key("0.9.1"));
        assert!(version_key("1.0.0") > version_key("0.99"));
        assert!(safe_part("0.1.0-rc1") && !safe_part("../x") && !safe_part(""));
    }

    #[test]
    fn score_mean_takes_numbers_under_score_keys() {
        let m: Map<String, Value> = serde_json::from_str(
            r#"{"reviewers": [{"id": "a", "scores": {"q": 4, "c": 5}}, {"id": "b", "scores": {"q": 3, "c": 4}}], "rule": "both >= 4", "n": 7}"#,
        )
        .unwrap();
        assert_eq!(score_mean(&m), Some(4.0));
        assert_eq!(score_mean(&Map::new()), None);
    }

    #[test]
    fn the_waiting_message_counts_what_each_sample_waits_for_and_lists_only_their_steps() {
        use crate::review::merge::{Decision as Merged, Outcome, WaitingFor};
        let merged = |id: &str, waiting_for: Option<WaitingFor>| Merged {
            id: id.into(),
            content_hash: "sha256:00".into(),
            decision: Outcome::Undecided,
            decided_by: None,
            kind: crate::model::Kind::MultiTool,
            scenario: vec![],
            reviewers: vec![],
            reviews: vec![],
            adjudication: None,
            rule: "both".into(),
            reason: String::new(),
            waiting_for,
        };
        let reason = |m: Merged| {
            let d: Decision = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
            d.left_out_reason().unwrap()
        };
        let mut left_out = BTreeMap::new();
        for (m, n) in [(merged("a", Some(WaitingFor::Scores)), 3), (merged("b", Some(WaitingFor::Adjudication)), 2)] {
            left_out.insert(reason(m), n);
        }
        left_out.insert(NOT_REVIEWED.to_string(), 1);
        left_out.insert("review: rejected".to_string(), 4);
        let w = pool::waiting(&left_out, 10).unwrap();
        assert_eq!(
            w.message,
            "6 of the 10 pool samples wait for review (1 not yet assigned to reviewers, 3 not scored yet, 2 in the \
             adjudication queue (their reviewers disagree: `artifacts/review-merge/queue.csv`)); nothing is released \
             until a sample is accepted"
        );
        assert!(w.next.starts_with("`benchgen run` assigns them") && w.next.contains("reviewers fill their sheets"));
        assert!(w.next.contains("`reviews/adjudications.csv`"), "{}", w.next);
        assert!(!w.next.contains("eval_review") && !w.next.contains("roster"), "{}", w.next);

        // Only scores missing: no word of a queue; only an assignment short of reviewers: the roster.
        let only = |k: String| pool::waiting(&BTreeMap::from([(k, 5)]), 5).unwrap();
        let w = only(reason(merged("a", Some(WaitingFor::Scores))));
        assert!(w.message.contains("(5 not scored yet)") && !w.next.contains("adjudication"), "{w:?}");
        let w = only(reason(merged("a", Some(WaitingFor::Assignment))));
        assert!(w.message.contains("5 without two eligible reviewers") && w.next.contains("roster"), "{w:?}");
        assert!(!w.next.contains("sheets"), "{}", w.next);
        // An LLM review standing in for people failed: its settings, not a sheet.
        let w = only(reason(merged("a", Some(WaitingFor::Prereview))));
        assert!(w.message.contains("5 whose LLM review, standing in for people, failed"), "{w:?}");
        assert!(w.next.contains("`benchgen review prereview`") && !w.next.contains("sheets"), "{}", w.next);
        // Decisions from before review-merge v5 say only `undecided`.
        let w = only(reason(merged("a", None)));
        assert!(w.message.contains("5 undecided") && w.next.contains("sheets") && w.next.contains("adjudications"));
        // Held items alone: the eval sheet, not the review docs.
        let w = only(HELD.to_string());
        assert!(
            w.next.starts_with("a person decides each held item") && !w.next.contains("docs/review.md"),
            "{}",
            w.next
        );
        assert!(pool::waiting(&BTreeMap::from([("review: rejected".to_string(), 3)]), 3).is_none());
        // Accepted, then changed: the release waits for their reviewers again (it used to
        // fail with nothing to release), as `status` says.
        let accepted = |hash: &str| -> Decision {
            serde_json::from_value(serde_json::json!({"id": "a", "decision": "accepted", "content_hash": hash}))
                .unwrap()
        };
        let why = pool::left_out_by_review(&accepted("sha256:1"), "sha256:2").unwrap();
        assert_eq!(pool::left_out_by_review(&accepted("sha256:1"), "sha256:1"), None);
        let w = only(why);
        assert!(w.message.contains("(5 changed since their review)"), "{w:?}");
        assert!(w.next.starts_with("`benchgen run` assigns them"), "{}", w.next);
    }
}
