//! ETOM's five-level curriculum (issue 13; reference-pipelines.md A.6–A.12), built over
//! any catalog on top of `filter`, `embed` and the final EFS sets.
//!
//! One stage per step, every LLM call through [`crate::llm::batch`] (checkpointed,
//! resumable, in the ledger):
//!
//! | stage | what |
//! |---|---|
//! | `levels-profiles` | per server its platform; per tool final-goal/middleware, user/system-facing, coupling |
//! | `levels-schemas` | an output JSON Schema per tool the catalog gives none (A.7), review sheet round trip |
//! | `levels-l1` … `levels-l5` | the five levels, each with a yield funnel and every rejection reason |
//! | `levels-export` | `level_1.json` … `level_5.json` in ETOM's shapes, unified samples, statistics |
//!
//! Each level stage writes `queries.json` ([`LevelOut`]): the kept queries with their
//! reference steps (tool ids, alternatives, backward dependencies), the funnel, and the
//! decisions of the [`plan_check`] every kept query's plan went through (repeated and
//! unrequested steps pruned, dependencies without a data link dropped, plans outside the
//! level's definition rejected). Export is the only place that numbers them and renders
//! ETOM's file shapes.

pub mod export;
pub mod l1;
pub mod l2;
pub mod l3;
pub mod l4;
pub mod l5;
pub mod plan_check;
pub mod profiles;
pub mod schemas;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::config_doc::Key;
use crate::model::{Catalog, Server, Tool};
use crate::settings::Settings;

/// `[levels]`: present means the level stages are part of `run`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LevelsSettings {
    /// Writes queries, scenarios, schemas and labels.
    #[serde(default = "default_writer")]
    pub writer_role: String,
    /// Classifies, verifies and judges.
    #[serde(default = "default_judge")]
    pub judge_role: String,
    /// L5's red team (ETOM: a second, stronger model); default the judge.
    #[serde(default)]
    pub red_team_role: Option<String>,
    /// Items in flight per stage.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Share of items that may fail (answers still invalid after re-asks) without failing
    /// the stage; failed items are listed in each stage's `failed.json`.
    #[serde(default, deserialize_with = "crate::llm::batch::de_share")]
    pub max_failed_share: f64,
    #[serde(default)]
    pub profiles: ProfileSettings,
    #[serde(default)]
    pub schemas: SchemaSettings,
    #[serde(default)]
    pub l1: L1Settings,
    #[serde(default)]
    pub l2: L2Settings,
    #[serde(default)]
    pub l3: L3Settings,
    #[serde(default)]
    pub l4: L4Settings,
    #[serde(default)]
    pub l5: L5Settings,
    #[serde(default)]
    pub plan_check: PlanCheckSettings,
}

/// `[levels]`; absent: its stages are not part of `run` (each still runs alone, with defaults).
impl crate::settings::Section for LevelsSettings {
    const NAME: &'static str = "levels";
    type Value = Option<Self>;
    const KEYS: &'static [Key] = &[
        Key::new("writer_role", "string", r#""generator""#, "Writes queries, scenarios, schemas and labels."),
        Key::new("judge_role", "string", r#""judge""#, "Classifies, verifies and judges."),
        Key::derived("red_team_role", "string", "`judge_role`", "L5's red team (ETOM: a second, stronger model)."),
        Key::new("concurrency", "integer", "4", "Items in flight per stage."),
        Key::new(
            "max_failed_share",
            "number",
            "0.0",
            "Share of items that may fail without failing the stage; each stage lists them in `failed.json`.",
        ),
        Key::table("profiles", "Tool profiles (`benchgen levels profiles`)."),
        Key::new(
            "profiles.max_servers",
            "integer",
            "0",
            "Profile the tools of at most this many servers (0: all), a seeded sample; L1/L2 skip the others and L3 names no platform for them.",
        ),
        Key::table("schemas", "Output schemas of the tools the catalog gives none (`benchgen levels schemas`)."),
        Key::unset(
            "schemas.review",
            "path",
            "A reviewed `tool_id,output_schema` CSV whose schemas replace the inferred ones (relative to the root).",
        ),
        Key::new(
            "schemas.max_tools",
            "integer",
            "0",
            "Infer schemas for at most this many tools (0: all), in catalog order.",
        ),
        Key::table("l1", "Level 1 (`benchgen levels l1`)."),
        Key::new("l1.candidates", "integer", "2", "Candidate queries written per tool; one verified query is kept."),
        Key::new("l1.max_items", "integer", "0", "At most this many eligible tools (0: all), a seeded sample."),
        Key::table("l2", "Level 2 (`benchgen levels l2`)."),
        Key::new(
            "l2.candidates",
            "integer",
            "2",
            "Candidate queries written per tool or EFS set; one verified query is kept.",
        ),
        Key::new(
            "l2.max_items",
            "integer",
            "0",
            "At most this many tools and EFS sets (0: all), a seeded sample taking EFS sets first.",
        ),
        Key::table("l3", "Level 3 (`benchgen levels l3`)."),
        Key::new("l3.max_chain_len", "integer", "5", "Longest chain (tools) in a server's data-flow graph."),
        Key::new(
            "l3.max_chains_per_server",
            "integer",
            "6",
            "Chains per server sent to the verifier (a seeded sample).",
        ),
        Key::new("l3.max_queries_per_server", "integer", "3", "Queries kept per server."),
        Key::table("l4", "Level 4, cross-server scenarios (`benchgen levels l4`)."),
        Key::new("l4.attempts", "integer", "20", "Scenario attempts."),
        Key::new(
            "l4.qc_rounds",
            "integer",
            "3",
            "Quality-control rounds per scenario (the first and up to two regenerations).",
        ),
        Key::new("l4.min_score", "integer", "7", "Pass mark for solvability and utility (1–10)."),
        Key::new("l4.min_servers", "integer", "2", "Fewest servers (distinct main categories) an attempt draws."),
        Key::new("l4.max_servers", "integer", "4", "Most servers an attempt draws."),
        Key::table("l5", "Level 5 (`benchgen levels l5`)."),
        Key::new("l5.min_cluster_size", "integer", "5", "HDBSCAN's smallest cluster, over the tool embeddings."),
        Key::new("l5.min_samples", "integer", "2", "HDBSCAN's `min_samples`."),
        Key::new("l5.cluster_epsilon", "number", "0.5", "HDBSCAN's cluster selection epsilon."),
        Key::new("l5.max_clusters", "integer", "0", "Label at most this many clusters (0: all), largest first."),
        Key::new("l5.descriptions_per_cluster", "integer", "10", "Descriptions shown per cluster (a seeded sample)."),
        Key::new("l5.universal_tasks", "integer", "100", "Everyday task categories the proposer brainstorms."),
        Key::new(
            "l5.top_labels",
            "integer",
            "10",
            "Capability labels shown to the red team (most similar to the task).",
        ),
        Key::new(
            "l5.personas",
            "list of strings",
            r#"["business analyst", "creative writer", "student", "casual user"]"#,
            "Personas whose queries are written for each gap.",
        ),
        Key::new("l5.queries_per_persona", "integer", "2", "Queries per persona and gap."),
        Key::new("l5.top_k", "integer", "5", "Tools retrieved for the out-of-scope judge."),
        Key::new(
            "l5.min_cover_similarity",
            "number",
            "0",
            "A judge's \"doable\" counts only when a capability label's cosine with the task reaches this, and a task none is near is not put to the red team (0: always trusted).",
        ),
        Key::table("plan_check", "The check of every kept query's reference plan."),
        Key::new(
            "plan_check.prune_unrequested",
            "bool",
            "true",
            "Prune a step the query does not call for when another is clearly requested; false: mark it.",
        ),
        Key::new(
            "plan_check.judge",
            "bool",
            "true",
            "Ask `judge_role` about each step the rules leave open; false: such steps stay.",
        ),
        Key::new(
            "plan_check.min_similarity",
            "number",
            "0.2",
            "L3/L4: query–tool cosine below which a step the query does not name, sharing at most one word with it, is unrequested.",
        ),
        Key::new(
            "plan_check.requested_similarity",
            "number",
            "0.45",
            "L3/L4: query–tool cosine at or above which a step is clearly requested.",
        ),
        Key::new(
            "plan_check.requested_overlap",
            "number",
            "0.3",
            "Share of the query's content words a step's tool text must hold to be clearly requested.",
        ),
    ];
}

impl Default for LevelsSettings {
    fn default() -> Self {
        toml::from_str("").expect("defaults parse")
    }
}

fn default_writer() -> String {
    "generator".into()
}
fn default_judge() -> String {
    "judge".into()
}
fn default_concurrency() -> usize {
    4
}
fn two() -> usize {
    2
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSettings {
    /// Profile the tools of at most this many servers (0 = all), a seeded sample; the
    /// others' tools are recorded as not profiled (so not used by L1/L2).
    #[serde(default)]
    pub max_servers: usize,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaSettings {
    /// A review sheet (`tool_id,output_schema` CSV, the shape of `schemas.csv`) whose
    /// schemas replace the inferred ones; relative to the project root.
    #[serde(default)]
    pub review: Option<std::path::PathBuf>,
    /// Infer schemas for at most this many tools (0 = all), in catalog order.
    #[serde(default)]
    pub max_tools: usize,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct L1Settings {
    /// Candidate queries written per tool (ETOM: 2); one verified query is kept.
    #[serde(default = "two")]
    pub candidates: usize,
    /// At most this many eligible tools (0 = all), a seeded sample.
    #[serde(default)]
    pub max_items: usize,
}

impl Default for L1Settings {
    fn default() -> Self {
        Self { candidates: 2, max_items: 0 }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct L2Settings {
    /// Candidate queries written per tool or EFS set; one verified query is kept.
    #[serde(default = "two")]
    pub candidates: usize,
    /// At most this many items (singleton tools and EFS sets; 0 = all), a seeded sample
    /// that takes EFS sets first.
    #[serde(default)]
    pub max_items: usize,
}

impl Default for L2Settings {
    fn default() -> Self {
        Self { candidates: 2, max_items: 0 }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct L3Settings {
    /// Longest chain (tools) enumerated in a server's data-flow graph.
    #[serde(default = "default_chain_len")]
    pub max_chain_len: usize,
    /// Chains per server sent to the verifier (a seeded sample of the maximal ones).
    #[serde(default = "default_chains")]
    pub max_chains_per_server: usize,
    /// Queries kept per server (the shipped data has at most 3).
    #[serde(default = "default_per_server")]
    pub max_queries_per_server: usize,
}

impl Default for L3Settings {
    fn default() -> Self {
        Self { max_chain_len: 5, max_chains_per_server: 6, max_queries_per_server: 3 }
    }
}

fn default_chain_len() -> usize {
    5
}
fn default_chains() -> usize {
    6
}
fn default_per_server() -> usize {
    3
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct L4Settings {
    /// Scenario attempts (ETOM `--num-scenarios`: 20).
    #[serde(default = "default_attempts")]
    pub attempts: usize,
    /// Quality-control rounds per scenario (the first and up to two regenerations).
    #[serde(default = "default_qc_rounds")]
    pub qc_rounds: usize,
    /// Pass mark for solvability and utility (1–10).
    #[serde(default = "default_min_score")]
    pub min_score: u8,
    #[serde(default = "two")]
    pub min_servers: usize,
    #[serde(default = "default_max_servers")]
    pub max_servers: usize,
}

impl Default for L4Settings {
    fn default() -> Self {
        Self { attempts: 20, qc_rounds: 3, min_score: 7, min_servers: 2, max_servers: 4 }
    }
}

fn default_attempts() -> usize {
    20
}
fn default_qc_rounds() -> usize {
    3
}
fn default_min_score() -> u8 {
    7
}
fn default_max_servers() -> usize {
    4
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct L5Settings {
    /// HDBSCAN over the tool embeddings (ETOM: 5, 2, 0.5).
    #[serde(default = "default_min_cluster")]
    pub min_cluster_size: usize,
    #[serde(default = "two")]
    pub min_samples: usize,
    #[serde(default = "default_epsilon")]
    pub cluster_epsilon: f64,
    /// Label at most this many clusters (0 = all), largest first.
    #[serde(default)]
    pub max_clusters: usize,
    /// Descriptions shown per cluster (a seeded sample).
    #[serde(default = "default_descriptions")]
    pub descriptions_per_cluster: usize,
    /// Everyday task categories the proposer brainstorms (ETOM: 100).
    #[serde(default = "default_tasks")]
    pub universal_tasks: usize,
    /// Capability labels shown to the red team (most similar to the task).
    #[serde(default = "default_top_labels")]
    pub top_labels: usize,
    #[serde(default = "default_personas")]
    pub personas: Vec<String>,
    /// Queries per persona and gap (ETOM: 10 // 4 = 2).
    #[serde(default = "two")]
    pub queries_per_persona: usize,
    /// Tools retrieved for the out-of-scope judge (ETOM: 5).
    #[serde(default = "default_top_k")]
    pub top_k: usize,
    /// A "yes, doable" of the gap judge counts only when some capability label's cosine
    /// with the task reaches this, and a task none reaches is not put to the red team (its
    /// "doable" would not count either); 0 (the default, ETOM's way) trusts them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_cover_similarity: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl Default for L5Settings {
    fn default() -> Self {
        toml::from_str("").expect("defaults parse")
    }
}

fn default_min_cluster() -> usize {
    5
}
fn default_epsilon() -> f64 {
    0.5
}
fn default_descriptions() -> usize {
    10
}
fn default_tasks() -> usize {
    100
}
fn default_top_labels() -> usize {
    10
}
fn default_top_k() -> usize {
    5
}
fn default_personas() -> Vec<String> {
    ["business analyst", "creative writer", "student", "casual user"].map(String::from).to_vec()
}

/// `[levels.plan_check]`: the check of every kept query's reference plan ([`plan_check`]).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PlanCheckSettings {
    /// Prune a step the query does not call for (no mention, clearly low score) when
    /// another step is clearly requested; `false`: such steps are only marked.
    #[serde(default = "yes")]
    pub prune_unrequested: bool,
    /// Ask the levels' `judge_role` about each step the rules leave open (one exchange per
    /// open step of L3 and L4 plans); `false`: such steps stay, marked by the rules.
    #[serde(default = "yes")]
    pub judge: bool,
    /// With embeddings: the query–tool cosine below which a step whose tool the query does
    /// not name, and which shares at most one content word with the query, is an
    /// unrequested candidate.
    #[serde(default = "default_min_similarity")]
    pub min_similarity: f64,
    /// With embeddings: the cosine at or above which a step is clearly requested.
    #[serde(default = "default_requested_similarity")]
    pub requested_similarity: f64,
    /// The share of the query's content words a tool's text must hold
    /// for its step to be clearly requested (a step sharing none is an unrequested candidate).
    #[serde(default = "default_requested_overlap")]
    pub requested_overlap: f64,
}

impl Default for PlanCheckSettings {
    fn default() -> Self {
        toml::from_str("").expect("defaults parse")
    }
}

fn yes() -> bool {
    true
}
fn default_min_similarity() -> f64 {
    0.2
}
fn default_requested_similarity() -> f64 {
    0.45
}
fn default_requested_overlap() -> f64 {
    0.3
}

/// The `[levels]` section (defaults when absent: each stage still runs alone).
pub fn settings(s: &Settings) -> LevelsSettings {
    s.section::<LevelsSettings>().clone().unwrap_or_default()
}

/// What every level stage's config hash covers besides its own subsection (not
/// `concurrency`: how many items are in flight changes no answer).
pub fn common_hash(s: &Settings, part: &impl Serialize) -> Result<String> {
    let l = settings(s);
    let red = l.red_team_role.clone();
    crate::settings::section_hash(&serde_json::json!({
        "seed": s.project.seed,
        "writer": l.writer_role,
        "judge": l.judge_role,
        "red_team": red,
        "max_failed_share": l.max_failed_share,
        "part": part,
    }))
}

/// The roles every level stage names.
pub fn roles(s: &Settings) -> Vec<crate::stage::ConfigRef> {
    let l = settings(s);
    vec![
        crate::stage::ConfigRef::new("levels.writer_role", &l.writer_role),
        crate::stage::ConfigRef::new("levels.judge_role", &l.judge_role),
    ]
}

/// The registry catalog a level's estimate counts (see [`crate::registry::catalog_size`]),
/// or the rows to show while it cannot be read.
pub fn estimate_catalog(s: &Settings) -> Result<crate::registry::CatalogSize, Vec<crate::stage::Estimate>> {
    crate::registry::catalog_size(s, &[crate::filter::CATALOG]).ok_or_else(|| {
        let l = settings(s);
        let until = crate::stage::UNTIL_REGISTRY;
        vec![crate::stage::Estimate::unknown(&l.writer_role, until).in_flight(l.concurrency.max(1))]
    })
}

/// `rows` as a level stage runs them: `levels.concurrency` items at once, one row per role.
pub fn estimates(s: &Settings, rows: Vec<crate::stage::Estimate>) -> Vec<crate::stage::Estimate> {
    let n = settings(s).concurrency.max(1);
    crate::stage::merge_by_role(rows).into_iter().map(|e| e.in_flight(n)).collect()
}

/// Items a write-and-verify level asks about, and how they were counted: at most
/// `max_items` of the catalog's tools (an L2 set stands for two or more of them).
pub fn tool_items(c: &crate::registry::CatalogSize, max_items: usize) -> (u64, String) {
    let n = crate::stage::capped(c.tools, max_items);
    let how = if n < c.tools { "`max_items`".to_string() } else { format!("tools in {}", c.from) };
    (n, format!("≤ {n} {how}"))
}

pub fn batch_options(
    stage: &'static str,
    label: &'static str,
    noun: &'static str,
    s: &Settings,
) -> crate::llm::batch::BatchOptions {
    let l = settings(s);
    crate::llm::batch::BatchOptions::new(stage, label, noun)
        .concurrency(l.concurrency.max(1))
        .max_failed_share(l.max_failed_share, "levels.max_failed_share")
}

/// A seeded RNG for one purpose (`what`) under the project seed.
pub fn rng(seed: u64, what: &str) -> rand_chacha::ChaCha8Rng {
    let h = crate::store::sha256_hex(format!("{seed}:{what}").as_bytes());
    let hex = h.trim_start_matches("sha256:");
    let n = u64::from_str_radix(&hex[..16], 16).unwrap_or(0);
    rand_chacha::ChaCha8Rng::seed_from_u64(n)
}

/// Halves of the names [`invented_name`] joins: syllables of no common word, so that the
/// joined name is not a company, product or place's. The 256 joins were read through by
/// hand: tails `ava`, `ova` and `ette` went, as they made Ostrava, Quilava and Corvette.
const NAME_HEADS: [&str; 16] = [
    "Quil", "Brav", "Tarsk", "Velm", "Corv", "Halv", "Ostr", "Feyl", "Lurn", "Wyndr", "Sabr", "Dunv", "Kess", "Morv",
    "Pelr", "Thav",
];
const NAME_TAILS: [&str; 16] = [
    "amoor", "enwick", "idane", "oster", "uvel", "ento", "ira", "undel", "oric", "ash", "eline", "ibel", "arin", "esk",
    "ith", "orne",
];

/// A seeded invented name for one purpose (`what`) under the project seed ("Quilamoor",
/// "Velmundel"): an entity a query can be about that no assistant knows the id of, so a
/// lookup step is needed to find it (issue 38: told only to invent one, the demo's 1.5B
/// writer asked for "the company 'Tesla'", whose ticker every agent knows).
pub fn invented_name(seed: u64, what: &str) -> String {
    use rand::Rng;
    let mut r = rng(seed, what);
    let head = NAME_HEADS[r.random_range(0..NAME_HEADS.len())];
    let tail = NAME_TAILS[r.random_range(0..NAME_TAILS.len())];
    format!("{head}{tail}")
}

/// A seeded subset of at most `n` items (0 = all), keeping the input order.
pub fn seeded_subset<T: Clone>(items: &[T], n: usize, seed: u64, what: &str) -> Vec<T> {
    if n == 0 || items.len() <= n {
        return items.to_vec();
    }
    let mut idx = rand::seq::index::sample(&mut rng(seed, what), items.len(), n).into_vec();
    idx.sort_unstable();
    idx.into_iter().map(|i| items[i].clone()).collect()
}

/// One reference step: the tools that serve it (primary first, then its EFS
/// alternatives) and the 0-based indices of earlier steps it depends on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub tools: Vec<String>,
    #[serde(default)]
    pub depends_on: Vec<usize>,
}

/// One kept query of a level, before export numbers it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Generated {
    /// Stable provenance key (the work item it came from).
    pub key: String,
    pub query: String,
    pub steps: Vec<Step>,
    /// L5: the capability gap the query falls into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// L3: the invented entity the query is about and names (the naming rule), whose id no
    /// agent can know: `eval`'s evidence reads a left-out lookup of it as the agents' lapse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// Request hashes of the exchanges behind this query.
    pub exchanges: Vec<String>,
}

/// One item that did not yield a query, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
pub struct Rejection {
    pub item: String,
    pub reason: String,
}

/// A level's yield: counts after each step, and every rejection with its reason.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Funnel {
    pub steps: Vec<(String, usize)>,
    pub rejected: Vec<Rejection>,
}

impl Funnel {
    pub fn step(&mut self, label: &str, n: usize) {
        self.steps.push((label.to_string(), n));
    }
    pub fn reject(&mut self, item: &str, reason: impl Into<String>) {
        self.rejected.push(Rejection { item: item.to_string(), reason: reason.into() });
    }
    /// Rejections grouped by reason class (the text before the first `:`), counted.
    pub fn reasons(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for r in &self.rejected {
            let class = r.reason.split(':').next().unwrap_or(&r.reason).trim().to_string();
            *m.entry(class).or_default() += 1;
        }
        m
    }
}

/// `queries.json` of a level stage.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LevelOut {
    pub level: u8,
    pub queries: Vec<Generated>,
    pub funnel: Funnel,
    /// The plan check's decisions per item key (kept and rejected items alike; an item
    /// with no decision and no rejection, such as an L5 query, is left out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plan_checks: BTreeMap<String, plan_check::PlanRecord>,
}

impl LevelOut {
    /// Sort for stable bytes, then write `queries.json` and the counts.
    pub fn write(mut self, out: &mut crate::stage::Output) -> Result<()> {
        self.queries.sort_by(|a, b| a.key.cmp(&b.key));
        self.funnel.rejected.sort();
        out.count("queries", self.queries.len());
        out.count("rejected", self.funnel.rejected.len());
        out.notes.push(format!(
            "L{}: {} queries kept, {} items rejected ({})",
            self.level,
            self.queries.len(),
            self.funnel.rejected.len(),
            self.funnel.reasons().iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
        ));
        out.json("queries.json", &self)
    }
}

/// Catalog lookups by tool id.
pub struct Lookup<'c> {
    pub tools: BTreeMap<String, (&'c Server, &'c Tool)>,
}

impl<'c> Lookup<'c> {
    pub fn new(c: &'c Catalog) -> Self {
        Self { tools: c.tools().map(|(s, t)| (crate::model::tool_id(&s.name, &t.name), (s, t))).collect() }
    }
    pub fn get(&self, id: &str) -> Option<(&'c Server, &'c Tool)> {
        self.tools.get(&crate::model::norm_tool_id(id)).copied()
    }
}

/// A tool as the prompts show it: id, name, server, description and input parameters.
pub fn tool_vars(s: &Server, t: &Tool) -> serde_json::Value {
    serde_json::json!({
        "id": crate::model::tool_id(&s.name, &t.name),
        "name": t.name.trim(),
        "server": s.name.trim(),
        "description": t.description,
        "inputs": input_lines(&t.input_schema),
    })
}

/// What a query must not copy from a tool: its description, its name, its parameters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Wording {
    pub name: String,
    pub description: String,
    pub params: Vec<String>,
}

/// The tools' wording in a prompt's variables: every object with a `description` and a
/// `name` or `tool` (parameters from its `inputs` lines, `` `name` (required): … ``).
pub fn wording_of(vars: &serde_json::Value) -> Vec<Wording> {
    fn walk(v: &serde_json::Value, out: &mut Vec<Wording>) {
        match v {
            serde_json::Value::Object(m) => {
                let name = m.get("name").or_else(|| m.get("tool")).and_then(|x| x.as_str());
                if let (Some(name), Some(d)) = (name, m.get("description").and_then(|x| x.as_str())) {
                    let params = m
                        .get("inputs")
                        .and_then(|i| i.as_array())
                        .into_iter()
                        .flatten()
                        .filter_map(|l| l.as_str()?.split('`').nth(1).map(str::to_string))
                        .collect();
                    out.push(Wording { name: name.to_string(), description: d.to_string(), params });
                }
                m.values().for_each(|x| walk(x, out));
            }
            serde_json::Value::Array(xs) => xs.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(vars, &mut out);
    out
}

/// Words a query shares in a row with a description before it reads as copied.
const COPIED_RUN: usize = 8;

/// Does a query copy a tool's wording instead of asking as a user would? A run of
/// [`COPIED_RUN`] words of a description, a list of two or more parameter names (its
/// signature), or the tool's own function name (`create_issue`).
pub fn copied_wording(query: &str, tools: &[Wording]) -> Option<String> {
    let words = |s: &str| -> Vec<String> {
        s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
    };
    let q = words(query);
    let lower = query.to_lowercase();
    // An input line's form, exactly as the prompts show the inputs: `x` (required): …
    // (Type: string). It depends on the query alone: looked for once, reported in the
    // order of the checks below.
    let types = ["string", "number", "integer", "boolean", "array", "object", "null", "any"];
    let forms = ["(required):".to_string(), "(optional):".to_string()];
    let form =
        forms.into_iter().chain(types.iter().map(|t| format!("(type: {t})"))).find(|f| lower.contains(f.as_str()));
    for t in tools {
        let d = words(&t.description);
        if d.len() >= COPIED_RUN && q.len() >= COPIED_RUN {
            let runs: BTreeSet<&[String]> = d.windows(COPIED_RUN).collect();
            if let Some(run) = q.windows(COPIED_RUN).find(|w| runs.contains(w)) {
                return Some(format!("copies the description of `{}` (\"{} …\")", t.name, run.join(" ")));
            }
        }
        let name = t.name.rsplit("::").next().unwrap_or(&t.name).to_lowercase();
        // Snake case as written, or run together in camel case as a word of its own
        // (`getDailyPrices`; "OpenWeatherMap" is not `open_weather`).
        let joined = name.replace('_', "");
        let camel = |w: &&str| w.chars().skip(1).any(char::is_uppercase) && w.to_lowercase() == joined;
        if name.contains('_')
            && (lower.contains(&name) || query.split(|c: char| !c.is_alphanumeric()).any(|w| camel(&w)))
        {
            return Some(format!("names the function `{name}` instead of asking for the task"));
        }
        if let Some(form) = &form {
            return Some(format!("copies the form of the inputs' lines (\"{form}\")"));
        }
        // A parameter list: two or more parameter names inside one pair of parentheses.
        for group in lower.split('(').skip(1).filter_map(|g| g.split(')').next()) {
            let inside = words(group);
            let named: Vec<&String> = t.params.iter().filter(|p| inside.contains(&p.to_lowercase())).collect();
            if named.len() >= 2 {
                let list: Vec<&str> = named.iter().map(|p| p.as_str()).collect();
                return Some(format!("lists the parameters of `{}` ({})", t.name, list.join(", ")));
            }
        }
    }
    None
}

/// Input parameters as lines `` `name` (required): description (Type: t) `` (ETOM's
/// `format_schema_for_prompt`).
pub fn input_lines(schema: &serde_json::Value) -> Vec<String> {
    let required: BTreeSet<&str> = schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(|p| p.as_object()) else {
        return vec![];
    };
    props
        .iter()
        .map(|(k, v)| {
            let ty = v.get("type").map(|t| t.to_string().trim_matches('"').to_string()).unwrap_or_else(|| "any".into());
            let d = v.get("description").and_then(|d| d.as_str()).unwrap_or("");
            let req = if required.contains(k.as_str()) { "required" } else { "optional" };
            format!("`{k}` ({req}): {d} (Type: {ty})")
        })
        .collect()
}

/// Repair a dependency annotation so every dependency points backwards.
///
/// `deps[i]` lists the 0-based steps step `i` depends on. Self-references and
/// out-of-range indices are dropped (returned as notes). When every dependency already
/// points backwards the order is kept; otherwise the steps are put in topological order
/// (stable: lowest original index first) and the dependencies renumbered. A cycle cannot
/// be ordered: `Err` names it.
pub fn repair_dependencies(deps: &[Vec<usize>]) -> Result<Repaired, String> {
    let n = deps.len();
    let mut notes = Vec::new();
    let mut clean: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for &j in d {
            if j == i {
                notes.push(format!("step {} depended on itself (dropped)", i + 1));
            } else if j >= n {
                notes.push(format!("step {} named step {} of {n} (dropped)", i + 1, j + 1));
            } else {
                clean[i].insert(j);
            }
        }
    }
    if clean.iter().enumerate().all(|(i, d)| d.iter().all(|&j| j < i)) {
        return Ok(Repaired {
            order: (0..n).collect(),
            deps: clean.into_iter().map(|d| d.into_iter().collect()).collect(),
            notes,
        });
    }
    // Kahn's algorithm, always taking the lowest ready original index.
    let mut indeg: Vec<usize> = clean.iter().map(BTreeSet::len).collect();
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(&i) = ready.iter().next() {
        ready.remove(&i);
        order.push(i);
        for (k, d) in clean.iter().enumerate() {
            if d.contains(&i) {
                indeg[k] -= 1;
                if indeg[k] == 0 {
                    ready.insert(k);
                }
            }
        }
    }
    if order.len() < n {
        let stuck: Vec<String> = (0..n).filter(|i| !order.contains(i)).map(|i| (i + 1).to_string()).collect();
        return Err(format!("cyclic dependencies: steps {} depend on each other", stuck.join(", ")));
    }
    let mut pos = vec![0; n];
    for (new, &old) in order.iter().enumerate() {
        pos[old] = new;
    }
    let deps = order
        .iter()
        .map(|&old| clean[old].iter().map(|&j| pos[j]).collect::<BTreeSet<_>>().into_iter().collect())
        .collect();
    notes.push("forward references repaired by topological order".into());
    Ok(Repaired { order, deps, notes })
}

/// A dependency annotation with every dependency pointing backwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repaired {
    /// `order[new] = old` step index.
    pub order: Vec<usize>,
    pub deps: Vec<Vec<usize>>,
    pub notes: Vec<String>,
}

/// The plan check's embedding similarities (see [`plan_check`], rule 3), per text of
/// `queries` (a query, or the parts of one): the cosine of the text with the text the
/// `embed` stage embeds for each tool of each step, the best of the step's tools; NaN for a
/// step none of whose tools is in the catalog. One embedding call for all of them, so a
/// tool is embedded once however many texts are weighed against it.
pub fn step_similarities(
    embedder: &crate::embedding::Lazy,
    look: &Lookup<'_>,
    queries: &[&str],
    steps: &[Step],
) -> Result<Vec<Vec<f32>>> {
    let recipe = &crate::embedding::embed_settings(embedder.settings()).text;
    let ids: Vec<String> = steps
        .iter()
        .flat_map(|s| &s.tools)
        .map(|id| crate::model::norm_tool_id(id))
        .collect::<BTreeSet<String>>()
        .into_iter()
        .filter(|id| look.get(id).is_some())
        .collect();
    let mut texts: Vec<String> = queries.iter().map(|q| q.to_string()).collect();
    texts.extend(ids.iter().filter_map(|id| look.get(id)).map(|(s, t)| crate::embedding::tool_text(recipe, s, t)));
    let mut vectors: Vec<Vec<f32>> = embedder.embed(&texts)?.into_iter().map(crate::embedding::normalised).collect();
    if vectors.len() != texts.len() {
        anyhow::bail!("the embedding model returned {} vectors for {} texts", vectors.len(), texts.len());
    }
    let tools = vectors.split_off(queries.len());
    Ok(vectors
        .iter()
        .map(|q| {
            let cosine: BTreeMap<&String, f32> = ids.iter().zip(&tools).map(|(id, v)| (id, dot(q, v))).collect();
            steps
                .iter()
                .map(|s| {
                    s.tools
                        .iter()
                        .filter_map(|id| cosine.get(&crate::model::norm_tool_id(id)).copied())
                        .fold(f32::NAN, f32::max)
                })
                .collect()
        })
        .collect())
}

pub use crate::embedding::dot;

pub use crate::text::one_line;

/// A verified L1 or L2 query before its plan check: its item key, the query, the exchanges
/// behind it and its one step (a tool, with its EFS alternatives in L2).
pub struct Verified {
    pub key: String,
    pub query: String,
    pub exchanges: Vec<String>,
    pub step: Step,
}

/// The judge's exchanges of [`check_single_steps`] in an estimate: at most its one step of
/// each item the rules leave open (none without `[levels.plan_check] judge`).
pub fn single_step_check_estimate(l: &LevelsSettings, items: u64, basis: &str) -> Option<crate::stage::Estimate> {
    l.plan_check.judge.then(|| {
        crate::stage::Estimate::typed(
            &l.judge_role,
            items,
            format!("{basis} × ≤ 1 plan-check step the rules leave open"),
        )
    })
}

/// L1 and L2's plan check, as L3 and L4 have it: the rules with each step's embedding
/// similarity to the query, then the per-step judge (`judge_role`, template
/// `levels_step_need`, when `[levels.plan_check] judge`) on a step the rules leave open;
/// nobody is asked again (one step cannot lack a tool). Gives the queries kept; the others
/// are rejected into `funnel` under `name(key)` with the reason.
pub fn check_single_steps(
    batch: &mut crate::llm::batch::Batch<'_>,
    (s, look, level): (&Settings, &Lookup<'_>, u8),
    verified: Vec<Verified>,
    (checks, funnel): (&mut plan_check::PlanChecks, &mut Funnel),
    name: &dyn Fn(&str) -> String,
) -> Result<Vec<Generated>> {
    let l = settings(s);
    let info = |id: &str| plan_check::catalog_tool(look, id);
    let embedder = crate::embedding::Lazy::new(s);
    let sim = |qs: &[&str], steps: &[Step]| step_similarities(&embedder, look, qs, steps);
    let cands: Vec<plan_check::Candidate> = verified
        .iter()
        .map(|v| plan_check::Candidate {
            key: &v.key,
            query: &v.query,
            steps: vec![v.step.clone()],
            platform: None,
            entity: None,
        })
        .collect();
    let ask =
        plan_check::Askers { judge: l.plan_check.judge.then_some(l.judge_role.as_str()), writer: None, replan: None };
    let checked = checks.check_all(batch, ask, level, &cands, (&info, Some(&sim)), &l.plan_check)?;
    let mut out = Vec::new();
    for (v, c) in verified.into_iter().zip(checked) {
        match c.verdict {
            Ok(steps) => out.push(Generated {
                key: v.key,
                query: v.query,
                steps,
                category: None,
                entity: None,
                exchanges: v.exchanges,
            }),
            Err(r) => funnel.reject(&name(&v.key), r),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An invented name is the seed's and the purpose's: the same twice, others for other
    /// chains, and one word of letters a prompt can quote.
    #[test]
    fn invented_names_are_seeded_per_purpose() {
        assert_eq!(invented_name(7, "l3-entity:a"), invented_name(7, "l3-entity:a"));
        let names: BTreeSet<String> = (0..20).map(|i| invented_name(7, &format!("l3-entity:{i}"))).collect();
        assert!(names.len() >= 10, "{names:?}");
        assert!(names.iter().all(|n| n.chars().all(|c| c.is_ascii_alphabetic()) && n.len() >= 5), "{names:?}");
        let other: BTreeSet<String> = (0..20).map(|i| invented_name(8, &format!("l3-entity:{i}"))).collect();
        assert_ne!(names, other, "another seed draws other names");
    }

    #[test]
    fn backward_annotations_are_kept_and_forward_ones_reordered() {
        let r = repair_dependencies(&[vec![], vec![0], vec![1]]).unwrap();
        assert_eq!(r.order, [0, 1, 2]);
        assert!(r.notes.is_empty());
        // Step 1 depends on step 2: reorder so 2 comes first.
        let r = repair_dependencies(&[vec![1], vec![]]).unwrap();
        assert_eq!(r.order, [1, 0]);
        assert_eq!(r.deps, [vec![], vec![0]]);
        let e = repair_dependencies(&[vec![1], vec![0]]).unwrap_err();
        assert!(e.contains("cyclic"), "{e}");
        let r = repair_dependencies(&[vec![0, 7], vec![0]]).unwrap();
        assert_eq!(r.deps, [vec![], vec![0]]);
        assert_eq!(r.notes.len(), 2);
    }

    #[test]
    fn a_query_that_copies_a_description_or_a_signature_is_told_from_a_request() {
        let t = Wording {
            name: "github::add_issue_comment".into(),
            description: "Add a comment to an existing issue or pull request; returns the comment ID and URL.".into(),
            params: vec!["owner".into(), "repo".into(), "issue_number".into(), "body".into()],
        };
        let copied = "On GitHub, add a comment to an existing issue or pull request and give me its URL";
        assert!(copied_wording(copied, std::slice::from_ref(&t)).unwrap().contains("copies the description"));
        let signature = "Use GitHub to comment on an issue (owner, repo, body)";
        assert!(copied_wording(signature, std::slice::from_ref(&t)).unwrap().contains("lists the parameters"));
        let named = "Call add_issue_comment on GitHub for issue 12";
        assert!(copied_wording(named, std::slice::from_ref(&t)).unwrap().contains("names the function"));
        let fine = "On GitHub, tell the reporter of issue 12 in octo/app that the fix ships Friday";
        assert_eq!(copied_wording(fine, std::slice::from_ref(&t)), None);
        let camel = "GitHub provides a tool `addIssueComment` for issue 12";
        assert!(copied_wording(camel, std::slice::from_ref(&t)).unwrap().contains("names the function"));
        let form = "Comment on issue 12 of octo/app (Type: string)";
        assert!(copied_wording(form, std::slice::from_ref(&t)).unwrap().contains("the form of the inputs' lines"));
        // Natural text that only looks like them passes.
        let weather = Wording { name: "w::open_weather".into(), description: "d".into(), params: vec![] };
        let natural = "Ask OpenWeatherMap for Lyon's forecast, and add a note (optional) on files (type: PDF)";
        assert_eq!(copied_wording(natural, &[weather, t.clone()]), None);
        let vars = serde_json::json!({"tools": [{"name": "x_y", "description": "d", "inputs": ["`a` (required): z (Type: string)"]}]});
        assert_eq!(wording_of(&vars)[0].params, ["a"]);
    }

    #[test]
    fn seeded_subsets_repeat() {
        let v: Vec<u32> = (0..50).collect();
        let a = seeded_subset(&v, 5, 7, "x");
        assert_eq!(a, seeded_subset(&v, 5, 7, "x"));
        assert_ne!(a, seeded_subset(&v, 5, 8, "x"));
        assert_eq!(seeded_subset(&v, 0, 7, "x").len(), 50);
    }
}
