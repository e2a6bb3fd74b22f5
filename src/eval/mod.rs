//! `benchgen eval`: is the benchmark right? A panel of agents (LLM roles of the config)
//! runs every released sample through MCP, their answers are written in the reference
//! formats and scored by `benchgen score`, and every item is audited from the results.
//!
//! - [`source`]: the release evaluated (`[eval] release`, or the release candidate `artifacts/release-candidate/`):
//!   samples, the tools of `tools.parquet`, each sample's cassette of recorded responses,
//!   the EFS sets and the published-format files.
//! - [`run`]: one agent on one sample (one repeat) in one tool space (every agent runs in
//!   each of `[eval] tool_spaces`): an in-process `benchgen sandbox` over the
//!   sample's tool space answering from its cassette, the agent loop of [`crate::agent`],
//!   turn by turn with the gold history. Each run is one `llm::batch` item (checkpointed,
//!   resumable, its exchanges cached in the ledger).
//! - [`search`]: the `full` tool space's two tools, `search_tools` over the track's released
//!   tools and `call_tool`, served in process in front of the sandbox.
//! - [`predict`]: the runs as unified, ETOM and FinMCP predictions, scored in the corrected
//!   mode and in `--compat etom` / `--compat finmcp`.
//! - [`board`]: `leaderboard.json` and `report.md`, per tool space, with 95 % bootstrap
//!   intervals over the items and the paired comparisons of every two agents.
//! - [`items`]: the item analysis (`items.jsonl`, per tool space): solve rates, flip rates
//!   across repeats, discrimination, Rasch difficulty, flags and the review queue.
//! - [`validity`]: with `[eval] reference_ranking`, Kendall's τ between the panel's ranking
//!   and the published one (`validity.json`, a section of the report).
//!
//! See docs/eval.md.

pub mod board;
pub mod items;
pub mod predict;
pub mod run;
pub mod search;
pub mod source;
pub mod validity;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::config_doc::Key;
use crate::error::Problem;
use crate::settings::{Settings, check_positive, section_hash};
use crate::stage::{ConfigRef, Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const STAGE: &str = "eval";

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "eval",
    // 2: writes the review queue `review.csv`. 3: bootstrap intervals and pairwise
    // comparisons on the leaderboard, the items' flip rate (`unstable` when it is above 0).
    // 4: several tool spaces (`tool_spaces`), reported and analysed per space, so runs and
    // items name their space; the `all-fail` evidence names the plan two agents agree on
    // and, on L2, the tool proposed for the sample's EFS set. 5: an agent's group of calls
    // already run in the turn (same function and arguments) is not run again: the answer
    // nudge, then the turn ends `repeated`. 6: the `all-fail` evidence says where two agents
    // called only part of the reference and which agents' runs covered it, with at least half
    // of its calls made right (`agreed_short`, `covered_by`), for `[release] decide_flagged`;
    // an agreement counts only offered tools of agents that did not cover the reference.
    // 7: off L2, an agreed tool of a reference tool's EFS set is named as its sibling
    // (`efs_sibling_of`), not as a sign of a wrong reference. 8: the `all-fail` evidence is
    // judged per run and per turn (`covered_by`, `agreed_short`, `agreed_plan`). 9: a call
    // written as text is read up to its name and arguments, so one the agent cut while
    // making up its result is run (it was the turn's answer). 10: an `all-fail` item whose
    // agents left out only a lookup of an entity `levels l3` invented names it
    // (`invented_entity`; reads `levels-l3/queries.json`). 11: on an item with no reference
    // call (L5), an agreed tool that shares no word with the request is named so
    // (`unrelated_to_request`); the agent's system prompt says never to make up a value.
    // 12: `unrelated_to_request` only on an L5 and only when every agreed tool is unrelated.
    // 13: the invented entities come from the release's `invented_entities.json`, not from
    //     the project's `levels-l3/queries.json`, so a published folder carries its own.
    // 14: an agent turn on an open-weights server stops at a second call written as text
    //     (`llm::TEXT_CALL_STOPS`), which the loop never read.
    // 15: a call written `{"tool": NAME, "arguments": {…}}` (a listed NAME, nothing else) is read
    //     as a call (`agent::executor::tool_keyed`).
    // 16: a call written in OpenAI's tool-call shape (`{"type": "function", "function":
    //     {…}}`) is read as a call (`agent::executor::function_wrapped`); a multi-turn
    //     `all-fail` item's evidence names who made each turn's calls (`turns_covered_by`).
    // 17: a reply with neither calls nor words (`<tools></tools>`) before any call gets
    //      `call_nudge` once (`agent::executor::wordless`),
    //      and a wordless reply after calls the answer nudge; each nudge once per turn.
    // 18: the server shortlist folds plurals as every check does (`text::singular`).
    // 19: plurals fold by the shared `text::singular` as refined: `caches` → `cache`, `causes` →
    //     `cause`, `cpus` → `cpu`; three-letter words but `ids` and `this`, `news` stay.
    // 20: plurals fold by `text::singular` with two vowels before `ch`/`us` read as one
    //     (`breaches` → `breach`, not `breache`), and `ips`, `vms`, `prs` fold.
    // 21: an agent turn on the local server streams and ends where a call written as text is
    //     whole (`llm::stream`): its request asks to stream, so its hash changes.
    // 22: a call written in `<tools>` tags or between doubled braces (Qwen2.5's 1.5B) is read
    //     as the call (`llm::extract::leading_call`), and its streamed turn ends there.
    // 23: a call written after the echoed `<tools>` definition of its tool is read as the call.
    // 24: an `all-fail` dialogue's evidence counts a turn that asks for its reference's action
    //     and in which no agent called anything as the agents' lapse (`turns_covered_by`).
    version: 24,
    about: "a panel of agents runs the release over MCP on its recorded responses: predictions in both reference formats, scores, leaderboard, item analysis",
    reads: source::READS,
    writes: &[
        "leaderboard.json",
        "items.jsonl",
        "review.csv",
        "report.md",
        "runs.jsonl",
        "validity.json",
        "predictions/*",
        "failed.json",
    ],
    section: Some(STAGE),
};

/// Which tools an agent sees on a sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolSpace {
    /// The sample's ground-truth tools (every alternative of every call, in every turn) and
    /// the members of their EFS sets; a sample with no reference call (L5) sees every
    /// released tool of its track.
    #[default]
    Oracle,
    /// The oracle space and the tools of the `[eval] distractor_servers` released servers
    /// of the sample's track nearest to its request that offer a tool it lacks (see
    /// [`source::nearest_servers`]); a log-track tool, which has no server, counts as one.
    Standard,
    /// Every released tool of the sample's track behind a tool search: the agent is offered
    /// two tools, `search_tools` and `call_tool` ([`search`]), so a catalog of any size fits
    /// in its request.
    Full,
}

impl ToolSpace {
    /// Its name in the config and the outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolSpace::Oracle => "oracle",
            ToolSpace::Standard => "standard",
            ToolSpace::Full => "full",
        }
    }
}

/// `[eval]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSettings {
    /// The release folder to evaluate (relative to the root, e.g. `release/demo-bench-0.1.0`);
    /// absent: the release candidate (`artifacts/release-candidate/`), audited before `release` publishes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<PathBuf>,
    /// The panel: LLM roles (`[llm.roles.<role>]`), each one agent.
    pub agents: Vec<String>,
    /// Runs of each agent on each sample (k of pass^k).
    #[serde(default = "one")]
    pub repeats: usize,
    /// Resamples of the items for the leaderboard's 95 % bootstrap intervals and the paired
    /// comparisons of agents (seeded from `[project] seed`). The default is left out of the
    /// config hash, so configs without the key keep their hash.
    #[serde(default = "default_bootstrap", skip_serializing_if = "is_default_bootstrap")]
    pub bootstrap: usize,
    /// The one tool space every agent runs in (default `oracle`); `tool_spaces` names
    /// several instead. Hashed as `oracle` when absent, as before `tool_spaces` existed, so
    /// configs keep their hash.
    #[serde(default, serialize_with = "space_or_default")]
    pub tool_space: Option<ToolSpace>,
    /// Several tool spaces (instead of `tool_space`): every agent runs every sample in each,
    /// and the leaderboard, the comparisons and the item flags are per space. Left out of
    /// the config hash when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_spaces: Option<Vec<ToolSpace>>,
    /// `standard`: how many other servers of the sample's track join its oracle space. A
    /// signed integer so that `check` can name a negative one; the default is left out of
    /// the config hash, so configs without the key keep their hash.
    #[serde(default = "default_distractor_servers", skip_serializing_if = "is_default_distractor_servers")]
    pub distractor_servers: i64,
    /// Most tool calls an agent makes per turn (default: `[execute] max_calls`); never fewer
    /// than the sample's largest turn's reference makes (twice that in `full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls: Option<usize>,
    /// Most completion tokens of one agent turn, for every agent (default: each agent role's
    /// `max_tokens`). A turn needs a tool call or a short answer; a small model that writes a
    /// call as text often goes on to make up its result until its role's limit. Left out of
    /// the config hash when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Runs at once (a tuning knob, not part of the config hash).
    #[serde(default = "default_concurrency", skip_serializing)]
    pub concurrency: usize,
    /// Share of runs (0..=1) allowed to fail (an LLM failure) before the stage fails; a
    /// failed run scores as no prediction.
    #[serde(
        default,
        deserialize_with = "crate::llm::batch::de_share",
        skip_serializing_if = "crate::llm::batch::is_zero_share"
    )]
    pub max_failed_share: f64,
    /// Published scores of (some of) the panel's agents, agent → score on any scale: the
    /// report then gives Kendall's τ between that ranking and the panel's on this release.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reference_ranking: BTreeMap<String, f64>,
}

/// `[eval]`; absent: the stage is not part of `run` (it still runs alone when configured).
impl crate::settings::Section for EvalSettings {
    const NAME: &'static str = STAGE;
    type Value = Option<Self>;
    const KEYS: &'static [Key] = &[
        Key::unset(
            "release",
            "path",
            "The release folder to evaluate (relative to the root); unset: the release candidate.",
        ),
        Key::required("agents", "list of strings", "The panel: LLM roles, each one agent."),
        Key::new("repeats", "integer", "1", "Runs of each agent on each sample (k of pass^k)."),
        Key::new(
            "bootstrap",
            "integer",
            "1000",
            "Resamples for the leaderboard's 95 % intervals and the paired comparisons.",
        ),
        Key::unset(
            "tool_space",
            r#""oracle" | "standard" | "full""#,
            "The one tool space every agent runs in; unset: `oracle`.",
        ),
        Key::unset(
            "tool_spaces",
            "list of strings",
            "Several tool spaces instead of `tool_space`: every agent runs in each, reported per space.",
        ),
        Key::new(
            "distractor_servers",
            "integer",
            "3",
            "`standard`: other servers of the sample's track joining its oracle space.",
        ),
        Key::derived(
            "max_calls",
            "integer",
            "`[execute] max_calls`",
            "Most tool calls an agent makes per turn; never fewer than the sample's largest turn's reference makes (twice that in `full`).",
        ),
        Key::derived(
            "max_tokens",
            "integer",
            "each agent role's `max_tokens`",
            "Most completion tokens of one agent turn (a tool call or a short answer), for every agent.",
        ),
        Key::new("concurrency", "integer", "4", "Runs at once (not hashed)."),
        Key::new(
            "max_failed_share",
            "number",
            "0.0",
            "Share of runs (0 to 1) that may fail; a failed run scores as no prediction.",
        ),
        Key::new(
            "reference_ranking",
            "table of numbers",
            "{}",
            "Published scores of panel agents: the report gives Kendall's τ against the panel's ranking.",
        ),
    ];
    const EXAMPLE: &'static str = r#"
[eval]
agents = ["agent"]
"#;
}

fn one() -> usize {
    1
}
fn default_concurrency() -> usize {
    4
}
fn default_bootstrap() -> usize {
    1000
}
fn is_default_bootstrap(b: &usize) -> bool {
    *b == default_bootstrap()
}
/// `tool_space` as the config hash saw it before it could be absent: the default spelled out.
fn space_or_default<S: serde::Serializer>(space: &Option<ToolSpace>, s: S) -> std::result::Result<S::Ok, S::Error> {
    space.unwrap_or_default().serialize(s)
}
fn default_distractor_servers() -> i64 {
    3
}
fn is_default_distractor_servers(n: &i64) -> bool {
    *n == default_distractor_servers()
}

impl EvalSettings {
    /// `distractor_servers` as a count (a negative one, which `check` refuses, as none).
    pub fn distractors(&self) -> usize {
        usize::try_from(self.distractor_servers).unwrap_or(0)
    }

    /// The tool spaces every agent runs in, in config order: `tool_spaces`, else the one
    /// `tool_space` (default `oracle`).
    pub fn spaces(&self) -> Vec<ToolSpace> {
        match &self.tool_spaces {
            Some(v) => v.clone(),
            None => vec![self.tool_space.unwrap_or_default()],
        }
    }
}

/// The `[eval]` section, or a usage error saying how to configure it.
pub fn settings(s: &Settings) -> Result<&EvalSettings> {
    s.section::<EvalSettings>().as_ref().ok_or_else(|| {
        crate::error::hinted(
            "`eval` needs an `[eval]` section naming its agents",
            "add `[eval]` with `agents = [\"ROLE\", …]` (LLM roles of `[llm.roles]`); see docs/eval.md",
        )
    })
}

pub struct EvalStage;

impl Stage for EvalStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }

    fn help(&self) -> &'static str {
        "A panel of agents runs the released benchmark and audits it (`[eval]`, docs/eval.md).

         Reads the release (`[eval] release = \"release/NAME-VERSION\"`, or the release
         candidate `artifacts/release-candidate/`, which `benchgen run` builds before this
         audit and publishes after it): `samples.jsonl`, `tools.parquet`, `cassettes.jsonl`,
         `tool_equivalence_sets.json`, the ETOM and FinMCP files and, where the release has
         it, `invented_entities.json` (the entities its L3 requests are about). Every agent
         (`[eval] agents`, LLM roles) runs every sample `repeats` times through MCP: an
         in-process sandbox serves the sample's tool space (`tool_space = \"oracle\"`: its
         ground-truth tools and their EFS members; `\"standard\"`: those and the tools of the
         `distractor_servers` other servers of its track nearest to its request, default 3;
         `\"full\"`: every released tool of its track behind two tools, `search_tools` and
         `call_tool`; `tool_spaces = [\"oracle\", \"standard\"]` runs every agent in each)
         and answers each call from the sample's cassette of recorded responses, or with a
         value shaped by the tool's schema when no recording matches (each call says which
         it got). Multi-turn samples run turn by turn with the gold history. Each run is
         checkpointed; a killed run resumes without asking again.

         Writes `artifacts/eval/`: `runs.jsonl` (every run), `predictions/<agent>/<k>/`
         (`predictions/<space>/<agent>/<k>/` with several spaces: `samples.jsonl` unified,
         `etom.jsonl` and `finmcp.json` in the reference formats, for `benchgen score`),
         `leaderboard.json` and `report.md` (per tool space and agent: score, pass^k, per
         level, kind and difficulty, compat figures, tokens, cost), `items.jsonl` (per space
         and sample: solve rate, results, discrimination, Rasch difficulty, flags `all-fail`
         with evidence, `all-pass`, `label-mismatch`, `unstable`), `review.csv` (the flagged
         items, each space that flagged one named) and `failed.json` when runs failed within
         `max_failed_share`."
    }

    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        let Some(cfg) = s.section::<EvalSettings>() else { return Vec::new() };
        cfg.agents.iter().enumerate().map(|(i, a)| ConfigRef::new(format!("eval.agents[{i}]"), a)).collect()
    }

    /// Every agent of the panel runs agent loops.
    fn turn_roles(&self, s: &Settings) -> Vec<ConfigRef> {
        self.roles(s)
    }

    fn check(&self, s: &Settings, problems: &mut Vec<Problem>) {
        let Some(cfg) = s.section::<EvalSettings>() else { return };
        if cfg.agents.is_empty() {
            problems.push(Problem::new("eval.agents", "name at least one LLM role (the agents of the panel)"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, a) in cfg.agents.iter().enumerate() {
            if !seen.insert(a) {
                problems.push(Problem::new(format!("eval.agents[{i}]"), format!("`{a}` is listed twice")));
            }
            if a.contains('/') {
                problems.push(Problem::new(format!("eval.agents[{i}]"), format!("`{a}`: a role name has no `/`")));
            }
        }
        check_distinct_agents(s, cfg, problems);
        check_spaces(cfg, problems);
        check_positive(problems, "eval.repeats", cfg.repeats);
        check_positive(problems, "eval.bootstrap", cfg.bootstrap);
        check_positive(problems, "eval.concurrency", cfg.concurrency);
        if let Some(m) = cfg.max_calls {
            check_positive(problems, "eval.max_calls", m);
        }
        if let Some(m) = cfg.max_tokens {
            check_positive(problems, "eval.max_tokens", m as usize);
        }
        if cfg.distractor_servers < 0 {
            problems.push(Problem::new(
                "eval.distractor_servers",
                format!(
                    "must be 0 or more (the other servers of the track that join a sample's `standard` tool space), not {}",
                    cfg.distractor_servers
                ),
            ));
        }
        check_reference(cfg, problems);
    }

    fn plan(&self, s: &Settings) -> Result<Plan> {
        let cfg = settings(s)?;
        let inputs = source::plan_inputs(s, cfg)?;
        let agent = run::agent_settings(s, cfg, "");
        let prices: BTreeMap<&str, serde_json::Value> = cfg
            .agents
            .iter()
            .map(|a| {
                let p = s.section::<crate::llm::LlmSettings>().roles.get(a).and_then(|r| r.prices);
                (a.as_str(), json!(p))
            })
            .collect();
        let hash = section_hash(&json!({
            "eval": cfg,
            "agent": {"max_calls": agent.max_calls, "stop_on_failure": agent.stop_on_failure,
                      "tool_result_chars": agent.tool_result_chars, "system_prompt": agent.system_prompt,
                      "answer_nudge": agent.answer_nudge, "call_nudge": agent.call_nudge},
            "seed": s.project.seed,
            "prices": prices,
        }))?;
        Ok(Plan { inputs, config_hash: hash })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        evaluate(ctx, inputs, out)
    }

    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        let Some(cfg) = s.section::<EvalSettings>() else { return Vec::new() };
        // The release it reads when made, else every sample that can reach the candidate.
        let file = match &cfg.release {
            Some(p) => s.resolve(p).join("samples.jsonl"),
            None => s.artifacts.join(crate::release::candidate::STAGE).join("samples.jsonl"),
        };
        let pool = crate::samples::file_bound(&file)
            .map(|b| (b, "in the release"))
            .or_else(|| crate::review::pool_bound(s).map(|b| (b, "that can reach the release")));
        let repeats = cfg.repeats as u64;
        // Every tool space runs every sample again.
        let spaces = cfg.spaces().len() as u64;
        let in_spaces = if spaces > 1 { format!(" × {spaces} tool spaces") } else { String::new() };
        let rows = cfg.agents.iter().map(|agent| {
            // Every turn of a sample runs the agent loop once.
            let per = run::agent_settings(s, cfg, agent).max_exchanges();
            let e = match pool {
                Some((b, from)) => crate::stage::Estimate::plain(
                    agent,
                    spaces * repeats * b.turns * per,
                    format!(
                        "≤ {repeats} × {} turns of {} samples {from} × {per} agent turns{in_spaces}",
                        b.turns, b.samples
                    ),
                ),
                None => crate::stage::Estimate::unknown(agent, crate::stage::UNTIL_POOL),
            };
            e.in_flight(cfg.concurrency)
        });
        rows.collect()
    }
}

/// Two panel agents whose roles send the same request to the same endpoint (the same
/// endpoint identity as the exchange cache key's, model name and sampling settings) are one
/// agent twice: their exchanges would be one and the same. Repeat `r` > 1 asks with the
/// seed `role seed + r − 1` ([`run::repeat_seed`]), so two agents whose seeds are fewer than `repeats`
/// apart share the answers of some repeats (seeds 1 and 2 with two repeats: the first's
/// second repeat is the second's first).
fn check_distinct_agents(s: &Settings, cfg: &EvalSettings, problems: &mut Vec<Problem>) {
    let roles = &s.section::<crate::llm::LlmSettings>().roles;
    let resolve = |p: &std::path::Path| s.resolve(p);
    // Per identity: each agent, its role's seed, and the seeds its repeats ask with.
    type Agent<'a> = (&'a str, Option<u64>, BTreeSet<Option<u64>>);
    let mut seen: BTreeMap<String, Vec<Agent>> = BTreeMap::new();
    for (i, a) in cfg.agents.iter().enumerate() {
        let Some(r) = roles.get(a) else { continue };
        let identity = json!([
            r.endpoint_identity(&resolve),
            r.model_name(&resolve),
            r.temperature,
            r.top_p,
            // `[eval] max_tokens` replaces each role's in every turn's request.
            cfg.max_tokens.or(r.max_tokens),
        ])
        .to_string();
        let seeds: BTreeSet<Option<u64>> = (1..=cfg.repeats.max(1)).map(|k| run::repeat_seed(r.seed, k)).collect();
        let same = seen.entry(identity).or_default();
        if let Some((first, their_seed, _)) = same.iter().find(|(_, _, theirs)| !theirs.is_disjoint(&seeds)) {
            let why = if *their_seed != r.seed {
                format!(
                    "`{a}` and `{first}` would share the answers of some repeats (same provider, endpoint, model and sampling settings; repeat r asks with the role's seed + r - 1): give their seeds at least {} apart, or another endpoint or model",
                    cfg.repeats
                )
            } else {
                format!(
                    "`{a}` cannot be told apart from `{first}` (same provider, endpoint, model and sampling settings): they would share every answer; give one another endpoint, model or seed"
                )
            };
            problems.push(Problem::new(format!("eval.agents[{i}]"), why));
        }
        same.push((a.as_str(), r.seed, seeds));
    }
}

/// `tool_space` or `tool_spaces`, not both; `tool_spaces` names at least one space, each once.
fn check_spaces(cfg: &EvalSettings, problems: &mut Vec<Problem>) {
    let Some(spaces) = &cfg.tool_spaces else { return };
    if cfg.tool_space.is_some() {
        problems.push(Problem::new("eval.tool_spaces", "give either `tool_space` or `tool_spaces`, not both"));
    }
    if spaces.is_empty() {
        problems.push(Problem::new("eval.tool_spaces", "name at least one tool space (`oracle`, `standard`, `full`)"));
    }
    for (i, space) in spaces.iter().enumerate() {
        if spaces[..i].contains(space) {
            let name = space.as_str();
            problems.push(Problem::new(format!("eval.tool_spaces[{i}]"), format!("`{name}` is listed twice")));
        }
    }
}

/// `[eval] reference_ranking`: scores of agents on the panel, at least two of them (τ needs
/// two), each a finite number.
fn check_reference(cfg: &EvalSettings, problems: &mut Vec<Problem>) {
    if cfg.reference_ranking.is_empty() {
        return;
    }
    for (agent, score) in &cfg.reference_ranking {
        let key = format!("eval.reference_ranking.{agent}");
        if !cfg.agents.contains(agent) {
            problems
                .push(Problem::new(key, format!("`{agent}` is not on the panel (`eval.agents` = {:?})", cfg.agents)));
        } else if !score.is_finite() {
            problems.push(Problem::new(key, "give a finite number (the agent's published score)"));
        }
    }
    if cfg.reference_ranking.len() < 2 {
        problems.push(Problem::new(
            "eval.reference_ranking",
            "give the published scores of at least two agents of the panel (a ranking of one says nothing)",
        ));
    }
}

/// The stage: run the panel in every tool space, write predictions and score them, then
/// per space the leaderboard and the item analysis.
fn evaluate(ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
    let s = ctx.settings;
    let cfg = settings(s)?;
    let rel = source::Release::read(s, cfg, inputs)?;
    if !rel.invented.is_empty() {
        // Said, so a maintainer evaluating a published folder sees that it carried them.
        out.notes.push(format!(
            "{} L3 request(s) about an entity `levels l3` invented (`{}/{}`)",
            rel.invented.len(),
            rel.shown,
            crate::release::invented::FILE
        ));
    }
    let scratch = crate::stage::work_dir(&s.artifacts, STAGE).join("scratch");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch).with_context(|| format!("cannot clear `{}`", scratch.display()))?;
    }
    rel.write_benches(&scratch.join("bench"))?;

    let (runs, failed) = run::run_panel(ctx, cfg, &rel, out)?;
    let usage = run::usage(&s.artifacts, &runs)?;
    let spaces = cfg.spaces();
    let several = spaces.len() > 1;
    let scoring = Scoring { s, cfg, rel: &rel, runs: &runs, usage: &usage, scratch: &scratch, several };
    let mut results = Vec::with_capacity(spaces.len());
    for space in spaces {
        results.push(scoring.space(space, out)?);
    }
    let mut items_out = Vec::new();
    for rec in results.iter().flat_map(|r| &r.analysis.items) {
        serde_json::to_writer(&mut items_out, rec)?;
        items_out.push(b'\n');
    }
    out.file("items.jsonl", items_out);
    // The review queue of flagged items: `release` holds back the `all-fail` ones until an
    // adjudicated copy, named in `[release] eval_review`, decides them.
    let analyses: Vec<&items::Analysis> = results.iter().map(|r| &r.analysis).collect();
    out.file("review.csv", items::review_sheet(&analyses)?);
    let flagged = items::flagged(&analyses);
    if !flagged.is_empty() {
        let release = match crate::release::settings(ctx.settings).decide_flagged {
            crate::release::eval_review::Decider::Person => "`release` holds back the `all-fail` ones until decided",
            crate::release::eval_review::Decider::Evidence => {
                "`release` decides the `all-fail` ones it can by rule from the panel's evidence and holds back the rest until decided"
            }
        };
        out.notes.push(format!(
            "{} flagged item(s) in `artifacts/eval/review.csv` ({release}): copy it to `reviews/eval/`, write `leave out` or `keep` in `decision`, name it in `[release] eval_review`, and release",
            flagged.len()
        ));
    }
    let rows: Vec<&board::Row> = results.iter().flat_map(|r| &r.rows).collect();
    out.json("leaderboard.json", &rows)?;
    let mut report = board::report(cfg, &rel, &results);
    if let Some(first) = results.first().filter(|_| !cfg.reference_ranking.is_empty()) {
        report.push_str(&validity_section(cfg, first, several, out)?);
    }
    out.file("report.md", report.into_bytes());
    runs.write_into(out)?;

    out.count("samples", rel.samples.len());
    out.count("agents", cfg.agents.len());
    out.count("runs", runs.len());
    out.count("failed_runs", failed);
    // Items carrying each flag in some tool space (those of the review queue).
    let mut flag_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for f in flagged.values().flatten() {
        *flag_counts.entry(*f).or_default() += 1;
    }
    for (flag, n) in &flag_counts {
        out.count(&format!("flag_{}", flag.replace('-', "_")), *n);
    }
    summary_notes(cfg, &results, &usage, out);
    Ok(())
}

/// What every tool space's scoring reads.
struct Scoring<'a> {
    s: &'a Settings,
    cfg: &'a EvalSettings,
    rel: &'a source::Release,
    runs: &'a run::Runs,
    usage: &'a run::Usage,
    scratch: &'a Path,
    /// Several tool spaces: each one's predictions go under `predictions/<space>/`.
    several: bool,
}

impl Scoring<'_> {
    /// One tool space: its runs as predictions (written and scored), its leaderboard rows
    /// and its item analysis.
    fn space(&self, space: ToolSpace, out: &mut Output) -> Result<board::SpaceReport> {
        let mut scored = Vec::new();
        for agent in &self.cfg.agents {
            let folder = if self.several { format!("{}/{agent}", space.as_str()) } else { agent.clone() };
            for k in 1..=self.cfg.repeats {
                let records = self.runs.of(space, agent, k);
                let files = predict::Files::build(self.rel, &records)?;
                let score = predict::score(self.scratch, self.rel, space, agent, k, &files)?;
                files.write_into(out, &folder, k)?;
                scored.push(score);
            }
        }
        let panel = board::Panel::new(self.s, self.cfg, space, self.rel, self.runs, &scored, self.usage);
        let rows = panel.rows();
        let analysis = items::analyse(&panel.matrix(), &items::Options::default());
        Ok(board::SpaceReport { space, rows, analysis })
    }
}

/// With `[eval] reference_ranking`: `validity.json` and the report's section, against the
/// scores of the first tool space (the one `tool_space` names, or the first of `tool_spaces`).
fn validity_section(cfg: &EvalSettings, first: &board::SpaceReport, several: bool, out: &mut Output) -> Result<String> {
    let scores: BTreeMap<String, f64> = first.rows.iter().map(|r| (r.agent.clone(), r.score)).collect();
    let v = validity::compare(&scores, &cfg.reference_ranking);
    let mut section = validity::section(&v);
    if several {
        section.push_str(&format!(
            "\nThe panel's scores are those of tool space `{}`, the first of `tool_spaces`.\n",
            first.space.as_str()
        ));
    }
    out.notes.push(match (v.tau.tau_b, v.tau.p_value) {
        (Some(t), Some(p)) => format!(
            "validity: Kendall's tau-b {t:.3} (p = {p:.3}, {}) against the reference ranking of {} agents; `validity.json`",
            v.tau.method, v.n
        ),
        _ => format!("validity: tau is undefined over the {} reference agents (scores tied)", v.n),
    });
    out.json("validity.json", &v)?;
    Ok(section)
}

/// The stage's summary: per tool space each agent's score, the pairs resolved and the
/// flags; each agent's model latency.
fn summary_notes(cfg: &EvalSettings, results: &[board::SpaceReport], usage: &run::Usage, out: &mut Output) {
    let several = results.len() > 1;
    for x in results {
        let within = if several { format!(" in `{}`", x.space.as_str()) } else { String::new() };
        for r in &x.rows {
            out.notes.push(format!(
                "{}{within}: score {:.3} [{:.3}, {:.3}] (pass^{} {:.3}) on {} samples, {} tokens",
                r.agent,
                r.score,
                r.score_ci[0],
                r.score_ci[1],
                cfg.repeats,
                r.pass_k,
                r.samples,
                r.tokens.prompt + r.tokens.completion
            ));
        }
        if let Some(mdd) = board::min_detectable(&x.rows) {
            let pairs = x.rows.iter().map(|r| r.comparisons.len()).sum::<usize>();
            let resolved = x.rows.iter().flat_map(|r| &r.comparisons).filter(|c| c.resolved).count();
            out.notes.push(format!(
                "{resolved} of {pairs} agent pair(s) resolved{within} (paired 95 % bootstrap over samples); smallest resolvable difference {:.1} points",
                mdd * 100.0
            ));
        }
    }
    out.notes.extend(usage.latency_notes(&cfg.agents));
    out.notes.extend(usage.cut_notes(&cfg.agents, cfg.max_tokens));
    for x in results {
        let within = if several { format!(" in `{}`", x.space.as_str()) } else { String::new() };
        let flagged: Vec<String> = x.analysis.flag_counts.iter().map(|(f, n)| format!("{n} {f}")).collect();
        out.notes.push(format!(
            "{} items analysed{within}{}; `artifacts/eval/report.md`",
            x.analysis.items.len(),
            if flagged.is_empty() { String::new() } else { format!(": {}", flagged.join(", ")) }
        ));
    }
}
