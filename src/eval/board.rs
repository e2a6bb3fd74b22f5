//! `leaderboard.json` and `report.md`: the panel's scores, one row per tool space and agent.
//!
//! Wire format of `leaderboard.json`: a JSON list of [`Row`], the tool spaces in config
//! order, each space's rows best first (score, then pass^k, then agent name; `rank` within
//! the space): `{rank, agent, model, tool_space, release, samples, repeats,
//! score, score_ci: [lo, hi], pass_k, pass_k_ci: [lo, hi], f1, by_level, by_kind,
//! by_difficulty, repeats_scored: [{repeat, corrected, compat_etom?, compat_finmcp?}],
//! tokens: {prompt, completion}, cost_usd, calls, failed_runs, comparisons: [{agent,
//! difference, difference_ci: [lo, hi], half_width, resolved}]}`. `score` is pass@1: per
//! sample the share of the k repeats that solved it (exact match in the corrected mode of
//! `benchgen score`), averaged over the samples, in [0, 1]; `pass_k` (pass^k) the share of
//! samples solved in all k repeats.
//!
//! `score_ci` and `pass_k_ci` are 95 % percentile-bootstrap intervals over the samples:
//! `[eval] bootstrap` resamples of the samples with replacement (ChaCha8 seeded with
//! `[project] seed`, so the same inputs give the same bytes), the 2.5th and 97.5th
//! percentiles of the resampled figure. `comparisons` pairs the row with every agent ranked
//! below it in its tool space: the difference of their scores (this row's minus that
//! agent's) with its paired interval (the same resamples for both agents), `half_width`
//! half the interval's width, `resolved` when the interval excludes 0. `repeats_scored`
//! holds each repeat's figures as
//! `benchgen score` prints them for the prediction files (`n`, `em`, macro `f1`): the overall
//! row of the corrected run on `samples.jsonl` and of `--compat finmcp`, the per-level rows
//! of `--compat etom` (which reports per level, as `eval.py` does).
//! Model latency is not in it (it differs between runs of the same inputs): it is in the
//! ledger and printed by the stage.

use std::collections::{BTreeMap, BTreeSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::items::{self, Analysis};
use super::predict::{Figures, Scored};
use super::run::{Answer, RunRecord, Runs, Usage, key};
use super::source::Release;
use super::{EvalSettings, ToolSpace};
use crate::settings::Settings;

/// A group's share of samples solved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Cell {
    pub n: usize,
    pub score: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Tokens {
    pub prompt: u64,
    pub completion: u64,
}

/// One repeat's figures as `benchgen score` gives them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepeatFigures {
    pub repeat: usize,
    pub corrected: Figures,
    /// Per ETOM level, as `--compat etom` reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compat_etom: Option<BTreeMap<String, Figures>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compat_finmcp: Option<Figures>,
}

/// One agent's row in one tool space.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub rank: usize,
    pub agent: String,
    pub model: String,
    pub tool_space: &'static str,
    pub release: String,
    pub samples: usize,
    pub repeats: usize,
    /// pass@1: per sample the share of the repeats that solved it, averaged over samples.
    pub score: f64,
    /// 95 % percentile-bootstrap interval of `score` over the samples.
    pub score_ci: [f64; 2],
    /// pass^k: the share of samples solved in every repeat.
    pub pass_k: f64,
    /// 95 % percentile-bootstrap interval of `pass_k` over the samples.
    pub pass_k_ci: [f64; 2],
    /// Mean call-level F1 (corrected) over samples and repeats.
    pub f1: f64,
    pub by_level: BTreeMap<String, Cell>,
    pub by_kind: BTreeMap<String, Cell>,
    pub by_difficulty: BTreeMap<String, Cell>,
    pub repeats_scored: Vec<RepeatFigures>,
    pub tokens: Tokens,
    /// From the role's `prices` (USD per million tokens); null without them.
    pub cost_usd: Option<f64>,
    /// Calls by what they got (`recorded`, `generated`, `tool_error`, …), over all runs.
    pub calls: BTreeMap<String, usize>,
    pub failed_runs: usize,
    /// This agent against every agent ranked below it in the same tool space.
    pub comparisons: Vec<Comparison>,
}

/// The score difference between two agents, paired over the samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The other agent (ranked below).
    pub agent: String,
    /// Score of the row's agent minus the other's.
    pub difference: f64,
    /// 95 % percentile-bootstrap interval of the difference, both agents on the same
    /// resamples of the samples.
    pub difference_ci: [f64; 2],
    /// Half the interval's width: about the smallest difference the pair's interval resolves.
    pub half_width: f64,
    /// The interval excludes 0: this release tells the two agents apart.
    pub resolved: bool,
}

/// Everything one tool space's leaderboard and item analysis are made from.
pub struct Panel<'a> {
    s: &'a Settings,
    cfg: &'a EvalSettings,
    space: ToolSpace,
    rel: &'a Release,
    runs: &'a Runs,
    scored: &'a [Scored],
    usage: &'a Usage,
}

fn answer_name(a: Answer) -> String {
    serde_json::to_value(a).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The model behind a role, for the table: its `model`, or for a local model the file it
/// loads (the default model too, which has no `model_path` in the config).
fn model_of(s: &Settings, role: &str) -> String {
    let Some(r) = s.section::<crate::llm::LlmSettings>().roles.get(role) else { return String::new() };
    match (&r.model, r.provider) {
        (Some(m), _) => m.clone(),
        (None, crate::llm::Provider::Local) => r
            .local_model_path(&|p| s.resolve(p))
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "local".into()),
        (None, p) => p.as_str().to_string(),
    }
}

impl<'a> Panel<'a> {
    /// `scored`: the scores of this space's runs.
    pub fn new(
        s: &'a Settings,
        cfg: &'a EvalSettings,
        space: ToolSpace,
        rel: &'a Release,
        runs: &'a Runs,
        scored: &'a [Scored],
        usage: &'a Usage,
    ) -> Self {
        Panel { s, cfg, space, rel, runs, scored, usage }
    }

    fn scored(&self, agent: &str) -> Vec<&Scored> {
        self.scored.iter().filter(|x| x.agent == agent).collect()
    }

    /// The agent's row without intervals and comparisons, and per sample (in release
    /// order) the share of its repeats that solved it and whether all of them did (1 or 0).
    fn row(&self, agent: &str) -> (Row, Vec<[f64; 2]>) {
        let scored = self.scored(agent);
        let k = scored.len().max(1) as f64;
        let n = self.rel.samples.len();
        let mut groups: [BTreeMap<String, (usize, f64)>; 3] = Default::default();
        let (mut total, mut f1, mut all_k) = (0.0, 0.0, 0usize);
        let mut values = Vec::with_capacity(n);
        for s in &self.rel.samples {
            let per: Vec<_> = scored.iter().filter_map(|x| x.samples.get(&s.id)).collect();
            let solved = per.iter().filter(|p| p.solved).count() as f64 / k;
            total += solved;
            f1 += per.iter().map(|p| p.f1).sum::<f64>() / k;
            let every = !per.is_empty() && per.iter().all(|p| p.solved) && per.len() == scored.len();
            if every {
                all_k += 1;
            }
            values.push([solved, if every { 1.0 } else { 0.0 }]);
            let keys = [
                s.kind.level().map(|l| format!("L{l}")),
                Some(s.kind.as_str().to_string()),
                Some(s.difficulty.as_str().to_string()),
            ];
            for (g, key) in groups.iter_mut().zip(keys) {
                if let Some(key) = key {
                    let c = g.entry(key).or_default();
                    c.0 += 1;
                    c.1 += solved;
                }
            }
        }
        let cells = |g: &BTreeMap<String, (usize, f64)>| {
            g.iter().map(|(k, (n, s))| (k.clone(), Cell { n: *n, score: s / *n as f64 })).collect::<BTreeMap<_, _>>()
        };
        let mut tokens = Tokens::default();
        let mut calls: BTreeMap<String, usize> = BTreeMap::new();
        let mut ran = 0usize;
        for r in self.runs.records.values().filter(|r| r.agent == agent && r.tool_space == self.space) {
            ran += 1;
            let (p, c) = self.usage.tokens(&key(self.space, &r.agent, r.repeat, &r.id));
            tokens.prompt += p;
            tokens.completion += c;
            for c in r.turns.iter().flat_map(|t| &t.calls) {
                *calls.entry(answer_name(c.answer)).or_default() += 1;
            }
        }
        let prices = self.s.section::<crate::llm::LlmSettings>().roles.get(agent).and_then(|r| r.prices);
        let cost_usd =
            prices.map(|p| (tokens.prompt as f64 * p.prompt + tokens.completion as f64 * p.completion) / 1_000_000.0);
        let nf = n.max(1) as f64;
        let (score, pass_k) = (total / nf, all_k as f64 / nf);
        let row = Row {
            rank: 0,
            agent: agent.to_string(),
            model: model_of(self.s, agent),
            tool_space: self.space.as_str(),
            release: self.rel.shown.clone(),
            samples: n,
            repeats: self.cfg.repeats,
            score,
            score_ci: [score, score],
            pass_k,
            pass_k_ci: [pass_k, pass_k],
            f1: f1 / nf,
            by_level: cells(&groups[0]),
            by_kind: cells(&groups[1]),
            by_difficulty: cells(&groups[2]),
            repeats_scored: scored
                .iter()
                .map(|x| RepeatFigures {
                    repeat: x.repeat,
                    corrected: x.corrected,
                    compat_etom: x.compat_etom.clone(),
                    compat_finmcp: x.compat_finmcp,
                })
                .collect(),
            tokens,
            cost_usd,
            calls,
            failed_runs: (n * self.cfg.repeats).saturating_sub(ran),
            comparisons: Vec::new(),
        };
        (row, values)
    }

    /// The space's leaderboard, best first, with the bootstrap intervals and the pairwise
    /// comparisons.
    pub fn rows(&self) -> Vec<Row> {
        let (mut rows, values): (Vec<Row>, Vec<Vec<[f64; 2]>>) = self.cfg.agents.iter().map(|a| self.row(a)).unzip();
        // Per sample, each agent's (share of repeats solved, solved in all) in config order:
        // agent `c` is columns `2c` and `2c + 1`, and every column sees the same resamples.
        let table: Vec<Vec<f64>> =
            (0..self.rel.samples.len()).map(|i| values.iter().flat_map(|v| v[i]).collect::<Vec<f64>>()).collect();
        let means = resample_means(&table, self.cfg.bootstrap, self.s.project.seed);
        for (c, r) in rows.iter_mut().enumerate() {
            r.score_ci = interval(means.iter().map(|m| m[2 * c]).collect()).unwrap_or([r.score, r.score]);
            r.pass_k_ci = interval(means.iter().map(|m| m[2 * c + 1]).collect()).unwrap_or([r.pass_k, r.pass_k]);
        }
        let column: BTreeMap<String, usize> = rows.iter().enumerate().map(|(c, r)| (r.agent.clone(), 2 * c)).collect();
        rows.sort_by(|a, b| {
            b.score.total_cmp(&a.score).then(b.pass_k.total_cmp(&a.pass_k)).then_with(|| a.agent.cmp(&b.agent))
        });
        for (i, r) in rows.iter_mut().enumerate() {
            r.rank = i + 1;
        }
        let comparisons: Vec<Vec<Comparison>> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                rows[i + 1..]
                    .iter()
                    .map(|o| difference(&means, column[&r.agent], column[&o.agent], r.score - o.score, &o.agent))
                    .collect::<Vec<Comparison>>()
            })
            .collect();
        for (r, c) in rows.iter_mut().zip(comparisons) {
            r.comparisons = c;
        }
        rows
    }

    /// The space's results as the item analysis takes them.
    pub fn matrix(&self) -> items::Matrix {
        let by_agent: BTreeMap<&str, Vec<&Scored>> =
            self.cfg.agents.iter().map(|a| (a.as_str(), self.scored(a))).collect();
        let items = self
            .rel
            .samples
            .iter()
            .map(|s| {
                let runs: Vec<Vec<Option<items::Outcome>>> = self
                    .cfg
                    .agents
                    .iter()
                    .map(|a| {
                        (1..=self.cfg.repeats)
                            .map(|k| {
                                let rec = self.runs.records.get(&key(self.space, a, k, &s.id))?;
                                let sc = by_agent[a.as_str()].iter().find(|x| x.repeat == k)?.samples.get(&s.id)?;
                                let (tools, offered_by_turn) = called(rec);
                                Some(items::Outcome { solved: sc.solved, f1: sc.f1, tools, offered_by_turn })
                            })
                            .collect()
                    })
                    .collect();
                // Per turn: a run covers the reference only with each turn's calls in that turn.
                let turn_steps: Vec<Vec<BTreeSet<String>>> = s
                    .turns
                    .iter()
                    .map(|t| t.reference_plan.iter().map(|c| c.alternatives.iter().cloned().collect()).collect())
                    .collect();
                let reference: BTreeSet<String> = turn_steps.iter().flatten().flatten().cloned().collect();
                // A tool in the sets of two reference tools is named with the first by name.
                let mut efs_siblings = BTreeMap::new();
                for t in &reference {
                    // Only a call without alternatives (L1, L3) can leave its EFS set out.
                    let single = turn_steps.iter().flatten().any(|alts| alts.len() == 1 && alts.contains(t));
                    let members = self.rel.efs.get(t).into_iter().flatten().filter(|_| single);
                    for m in members.filter(|m| !reference.contains(*m)) {
                        efs_siblings.entry(m.clone()).or_insert_with(|| t.clone());
                    }
                }
                let l5 = s.kind == crate::model::Kind::L5 && reference.is_empty();
                let unrelated = if l5 { unrelated(s, &runs, &self.rel.tools) } else { BTreeMap::new() };
                items::ItemInput {
                    id: s.id.clone(),
                    kind: s.kind,
                    difficulty: s.difficulty,
                    reference,
                    turn_steps,
                    efs_siblings,
                    lookups: lookups(s),
                    invented: self.rel.invented.get(&s.id).cloned(),
                    unrelated,
                    asked_actions: s.turns.iter().map(asks_its_actions).collect(),
                    runs,
                }
            })
            .collect();
        items::Matrix { tool_space: self.space, agents: self.cfg.agents.clone(), repeats: self.cfg.repeats, items }
    }
}

/// Whether every reference call of `t` (each alternative) is an action its request asks for
/// by name, as the gold rules read a request (one call at least).
fn asks_its_actions(t: &crate::model::Turn) -> bool {
    use crate::synth::gold::{is_action, unrequested_action};
    let asked = |tool: &String| is_action(tool) && unrequested_action(&t.user, tool).is_none();
    !t.reference_plan.is_empty() && t.reference_plan.iter().all(|c| c.alternatives.iter().all(asked))
}

/// The tools the agents called on `s` (`runs`) that ask for nothing its request does, each
/// with why: the levels' rule for an L1/L2 query that needs none of its tools
/// ([`crate::levels::plan_check::unrelated`]: no word shared with the tool's name,
/// description or inputs, its server's name aside). A tool not in the release is left out.
fn unrelated(
    s: &crate::model::Sample,
    runs: &[Vec<Option<items::Outcome>>],
    tools: &BTreeMap<String, super::source::ReleasedTool>,
) -> BTreeMap<String, String> {
    let request: Vec<&str> = s.turns.iter().map(|t| t.user.as_str()).collect();
    let request = request.join(" ");
    let called: BTreeSet<&String> = runs.iter().flatten().flatten().flat_map(|o| &o.tools).collect();
    let mut out = BTreeMap::new();
    for id in called {
        let Some(t) = tools.get(id) else { continue };
        let vars = serde_json::json!({"name": t.tool.name.trim(), "server": t.server, "description": t.tool.description,
            "inputs": crate::levels::input_lines(&t.tool.input_schema)});
        if crate::levels::plan_check::unrelated(&request, &[vars], "").is_some() {
            out.insert(id.clone(), "shares no word of its name, description or inputs with the request".to_string());
        }
    }
    out
}

/// The alternatives of `s`'s lookups: reference calls that take nothing from an earlier
/// call and feed a later call of their turn, so what they find from the request alone the
/// later one takes (a middle step of a chain takes its input from a call, not the request).
fn lookups(s: &crate::model::Sample) -> BTreeSet<String> {
    s.turns
        .iter()
        .flat_map(|t| {
            let plan = &t.reference_plan;
            let fed = |i: usize| plan.iter().any(|c| c.depends_on.contains(&i));
            plan.iter()
                .enumerate()
                .filter(move |(i, c)| c.depends_on.is_empty() && fed(*i))
                .flat_map(|(_, c)| c.alternatives.clone())
        })
        .collect()
}

/// The distinct tools a run called (within the cap) over its turns, in order of first call,
/// and per turn (the run's turns are the sample's) those it called in that turn and was
/// offered.
fn called(r: &RunRecord) -> (Vec<String>, Vec<Vec<String>>) {
    let mut all: Vec<String> = Vec::new();
    let mut offered = Vec::with_capacity(r.turns.len());
    for turn in &r.turns {
        let mut here: Vec<String> = Vec::new();
        for c in RunRecord::predicted(turn) {
            if !all.contains(&c.tool) {
                all.push(c.tool.clone());
            }
            if c.offered && !here.contains(&c.tool) {
                here.push(c.tool.clone());
            }
        }
        offered.push(here);
    }
    (all, offered)
}

/// Column means of `table` (`[sample][column]`) over `resamples` bootstrap resamples of the
/// samples, drawn with replacement from a ChaCha8 stream seeded with `seed`:
/// `[resample][column]`. The draws depend only on the seed and the numbers of samples and
/// resamples, so every column (and every pair of columns) sees the same resamples. Empty
/// without samples.
pub fn resample_means(table: &[Vec<f64>], resamples: usize, seed: u64) -> Vec<Vec<f64>> {
    let n = table.len();
    if n == 0 {
        return Vec::new();
    }
    let columns = table[0].len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..resamples)
        .map(|_| {
            let mut sum = vec![0.0f64; columns];
            for _ in 0..n {
                for (s, v) in sum.iter_mut().zip(&table[rng.random_range(0..n)]) {
                    *s += v;
                }
            }
            sum.into_iter().map(|s| s / n as f64).collect::<Vec<f64>>()
        })
        .collect()
}

/// The 95 % percentile interval of bootstrap draws: the 2.5th and 97.5th percentiles (the
/// nearest rank of the sorted draws); `None` without draws.
fn interval(mut draws: Vec<f64>) -> Option<[f64; 2]> {
    if draws.is_empty() {
        return None;
    }
    draws.sort_by(f64::total_cmp);
    let last = draws.len() - 1;
    let at = |q: f64| draws[((q * last as f64).round() as usize).min(last)];
    Some([at(0.025), at(0.975)])
}

/// Columns `a` − `b` of the resample means as a comparison with the other agent `agent`.
fn difference(means: &[Vec<f64>], a: usize, b: usize, point: f64, agent: &str) -> Comparison {
    let ci = interval(means.iter().map(|m| m[a] - m[b]).collect()).unwrap_or([point, point]);
    Comparison {
        agent: agent.to_string(),
        difference: point,
        difference_ci: ci,
        half_width: (ci[1] - ci[0]) / 2.0,
        resolved: ci[0] > 0.0 || ci[1] < 0.0,
    }
}

/// Two agents' per-sample scores (same samples, same order) compared as the leaderboard
/// compares them: `a − b` with its paired interval (`agent` left empty).
pub fn paired(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Comparison {
    let table: Vec<Vec<f64>> = a.iter().zip(b).map(|(x, y)| vec![*x, *y]).collect();
    let n = table.len().max(1) as f64;
    let point = a.iter().sum::<f64>() / n - b.iter().sum::<f64>() / n;
    difference(&resample_means(&table, resamples, seed), 0, 1, point, "")
}

/// The smallest score difference between two agents of this panel that the release
/// resolves: the largest half-width of the pairs' paired intervals (a difference above it
/// is resolved for any pair, about); `None` with fewer than two agents.
pub fn min_detectable(rows: &[Row]) -> Option<f64> {
    rows.iter().flat_map(|r| &r.comparisons).map(|c| c.half_width).max_by(f64::total_cmp)
}

fn pct(x: f64) -> String {
    format!("{:.1}", x * 100.0)
}

/// A figure and its interval, in percent: `87.5 [62.5, 100.0]`.
fn pct_ci(x: f64, ci: [f64; 2]) -> String {
    format!("{} [{}, {}]", pct(x), pct(ci[0]), pct(ci[1]))
}

/// One tool space's leaderboard rows and item analysis, for the report.
pub struct SpaceReport {
    pub space: ToolSpace,
    pub rows: Vec<Row>,
    pub analysis: Analysis,
}

/// `report.md`: the definitions; with several tool spaces, each agent's score per space;
/// then per space the leaderboard table with intervals and compat figures, the calls, the
/// pairwise comparisons and the item analysis.
pub fn report(cfg: &EvalSettings, rel: &Release, spaces: &[SpaceReport]) -> String {
    let k = cfg.repeats;
    let several = spaces.len() > 1;
    let names: Vec<String> = spaces.iter().map(|x| format!("`{}`", x.space.as_str())).collect();
    let (label, each) = if several {
        ("Tool spaces", " (every agent runs in each; ranked, compared and analysed per space)")
    } else {
        ("Tool space", "")
    };
    let mut s = format!(
        "# Evaluation of `{}`\n\n{label} {}{each}; {} samples; {} agent(s) × {k} repeat(s). Figures in percent, with their 95 % interval in brackets.\n\n",
        rel.shown,
        names.join(", "),
        rel.samples.len(),
        cfg.agents.len(),
    );
    s.push_str(&format!(
        "- **pass@1** (`score`): for each sample, the share of the agent's {k} repeat(s) that solved it (exact match in the corrected mode of `benchgen score`; a failed run counts as not solved), averaged over the samples.\n\
         - **pass^{k}** (`pass_k`): the share of samples the agent solved in all {k} repeat(s).\n\
         - **Intervals**: 95 % percentile bootstrap over the samples: {} resamples of the samples with replacement (seeded from `[project] seed`), the 2.5th and 97.5th percentiles of the resampled figure. They say how much a figure depends on which samples the release holds; how much it moves between runs shows in pass^k against pass@1 and in the items' flip rate.\n\n\
         Per-group columns are pass@1 in percent.\n\n",
        cfg.bootstrap
    ));
    if several {
        per_space_table(&mut s, spaces);
    }
    for x in spaces {
        // With several spaces each section says which space it is of.
        let within = if several { format!(" in tool space `{}`", x.space.as_str()) } else { String::new() };
        if several {
            s.push_str(&format!("\n## Leaderboard{within}\n\n"));
        }
        leaderboard_table(&mut s, &x.rows, k);
        comparison_section(&mut s, &x.rows, cfg.bootstrap, &within);
        item_section(&mut s, &x.analysis, k, &within);
    }
    s
}

/// With several tool spaces: each agent's pass@1 with its interval and its rank in each
/// space, agents in the first space's order.
fn per_space_table(s: &mut String, spaces: &[SpaceReport]) {
    s.push_str(
        "## Scores per tool space\n\npass@1 in percent with its 95 % interval, and the agent's rank in the space.\n\n| agent | model |",
    );
    for x in spaces {
        s.push_str(&format!(" `{}` |", x.space.as_str()));
    }
    s.push_str("\n|---|---|");
    s.push_str(&"---:|".repeat(spaces.len()));
    s.push('\n');
    let Some(first) = spaces.first() else { return };
    for r in &first.rows {
        s.push_str(&format!("| `{}` | {} |", r.agent, r.model));
        for x in spaces {
            let row = x.rows.iter().find(|o| o.agent == r.agent);
            let cell = row.map(|o| format!("{}, rank {}", pct_ci(o.score, o.score_ci), o.rank)).unwrap_or_default();
            s.push_str(&format!(" {cell} |"));
        }
        s.push('\n');
    }
}

/// One space's leaderboard table and its calls by what they got.
fn leaderboard_table(s: &mut String, rows: &[Row], k: usize) {
    let kinds: Vec<String> = rows.first().map(|r| r.by_kind.keys().cloned().collect()).unwrap_or_default();
    let diffs: Vec<String> = rows.first().map(|r| r.by_difficulty.keys().cloned().collect()).unwrap_or_default();
    s.push_str(&format!("| rank | agent | model | score (pass@1) | pass^{k} | F1 |"));
    for k in kinds.iter().chain(&diffs) {
        s.push_str(&format!(" {k} |"));
    }
    s.push_str(" compat etom EM | compat finmcp EM | tokens | cost (USD) |\n|---:|---|---|---:|---:|---:|");
    s.push_str(&"---:|".repeat(kinds.len() + diffs.len() + 4));
    s.push('\n');
    for r in rows {
        s.push_str(&format!(
            "| {} | `{}` | {} | {} | {} | {} |",
            r.rank,
            r.agent,
            r.model,
            pct_ci(r.score, r.score_ci),
            pct_ci(r.pass_k, r.pass_k_ci),
            pct(r.f1)
        ));
        for k in &kinds {
            s.push_str(&format!(" {} |", r.by_kind.get(k).map(|c| pct(c.score)).unwrap_or_default()));
        }
        for d in &diffs {
            s.push_str(&format!(" {} |", r.by_difficulty.get(d).map(|c| pct(c.score)).unwrap_or_default()));
        }
        // Exact-match rate over every scored sample and repeat (the etom levels pooled).
        let compat = |f: &dyn Fn(&RepeatFigures) -> Vec<Figures>| {
            let v: Vec<Figures> = r.repeats_scored.iter().flat_map(f).collect();
            let n: usize = v.iter().map(|x| x.n).sum();
            if n == 0 {
                return "—".to_string();
            }
            format!("{:.4}", v.iter().map(|x| x.em * x.n as f64).sum::<f64>() / n as f64)
        };
        s.push_str(&format!(
            " {} | {} | {} | {} |\n",
            compat(&|x| x.compat_etom.iter().flat_map(|m| m.values().copied()).collect()),
            compat(&|x| x.compat_finmcp.into_iter().collect()),
            r.tokens.prompt + r.tokens.completion,
            r.cost_usd.map(|c| format!("{c:.4}")).unwrap_or_else(|| "—".into())
        ));
    }
    s.push_str(
        "\nCalls by what they got (recorded: the sample's cassette; generated: shaped by the tool's schema):\n\n",
    );
    for r in rows {
        let parts: Vec<String> = r.calls.iter().map(|(k, n)| format!("{k} {n}")).collect();
        s.push_str(&format!(
            "- `{}`: {}{}\n",
            r.agent,
            if parts.is_empty() { "no calls".into() } else { parts.join(", ") },
            if r.failed_runs > 0 { format!("; {} failed run(s)", r.failed_runs) } else { String::new() }
        ));
    }
}

fn comparison_section(s: &mut String, rows: &[Row], resamples: usize, within: &str) {
    s.push_str(&format!("\n## Comparisons{within}\n\n"));
    let Some(mdd) = min_detectable(rows) else {
        s.push_str("One agent: nothing to compare.\n");
        return;
    };
    s.push_str(&format!(
        "Each pair of agents, the better ranked first: the difference of their pass@1 scores with its paired 95 % bootstrap interval (both agents on the same {resamples} resamples of the samples). `resolved`: the interval excludes 0, this release tells the two apart; `not resolved`: the difference may be noise. Half-width: half the interval's width.\n\n\
         | agents | difference | 95 % interval | half-width | |\n|---|---:|---:|---:|---|\n"
    ));
    for r in rows {
        for c in &r.comparisons {
            s.push_str(&format!(
                "| `{}` − `{}` | {} | [{}, {}] | {} | {} |\n",
                r.agent,
                c.agent,
                pct(c.difference),
                pct(c.difference_ci[0]),
                pct(c.difference_ci[1]),
                pct(c.half_width),
                if c.resolved { "resolved" } else { "not resolved" }
            ));
        }
    }
    s.push_str(&format!(
        "\nSmallest difference this release resolves between two agents of this panel: **{} points** of pass@1 (the largest half-width above). A smaller difference between two of these agents may be noise.\n",
        pct(mdd)
    ));
}

fn item_section(s: &mut String, analysis: &Analysis, repeats: usize, within: &str) {
    s.push_str(&format!("\n## Items{within}\n\n"));
    if analysis.flag_counts.is_empty() {
        s.push_str("No item is flagged.\n");
    } else {
        let parts: Vec<String> = analysis.flag_counts.iter().map(|(f, n)| format!("`{f}` {n}")).collect();
        s.push_str(&format!("Flags: {}.\n", parts.join(", ")));
    }
    if repeats >= 2 {
        let flipping = analysis.items.iter().filter(|i| i.flip_rate > 0.0).count();
        let mean = analysis.items.iter().map(|i| i.flip_rate).sum::<f64>() / analysis.items.len().max(1) as f64;
        s.push_str(&format!(
            "\nFlip rate: the share of agents whose {repeats} repeats on an item disagree (solved in some, not in all; a failed run counts as not solved). Mean over items {mean:.3}; {flipping} item(s) with a flip rate above 0 (`unstable`).\n"
        ));
    } else {
        s.push_str("\nFlip rate: with one repeat nothing can flip (`[eval] repeats` of 2 or more measures it).\n");
    }
    s.push_str("\nSolve rate | items\n---|---:\n");
    for (i, n) in analysis.histogram.iter().enumerate() {
        let hi = if i == 9 { "1.0]".to_string() } else { format!("{:.1})", (i + 1) as f64 / 10.0) };
        s.push_str(&format!("[{:.1}, {hi} | {n}\n", i as f64 / 10.0));
    }
    let flagged: Vec<&items::ItemRecord> = analysis.items.iter().filter(|i| !i.flags.is_empty()).collect();
    if flagged.is_empty() {
        return;
    }
    s.push_str(
        "\n### Flagged items\n\n| id | kind | label | solve rate | flip rate | flags | evidence |\n|---|---|---|---:|---:|---|---|\n",
    );
    for it in flagged.iter().take(200) {
        let ev = it.evidence.as_ref().map(|e| e.note.clone()).unwrap_or_default();
        s.push_str(&format!(
            "| `{}` | {} | {} | {:.2} | {:.2} | {} | {} |\n",
            it.id,
            it.kind.as_str(),
            it.difficulty.as_str(),
            it.solve_rate,
            it.flip_rate,
            it.flags.join(", "),
            ev.replace('|', "\\|")
        ));
    }
    if flagged.len() > 200 {
        s.push_str(&format!("\n… and {} more in `items.jsonl`.\n", flagged.len() - 200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a chain a → b → c only `a` is a lookup: `b` takes its input from `a`, and `c`
    /// feeds nothing; a call on its own (no dependency either way) is none.
    #[test]
    fn only_a_first_step_that_feeds_a_later_one_is_a_lookup() {
        let s: crate::model::Sample = serde_json::from_value(serde_json::json!({
            "id": "L3-1", "family": "etom", "kind": "L3", "difficulty": "easy",
            "turns": [{"user": "q", "reference_plan": [
                {"alternatives": ["S::a", "T::a"], "group": 0},
                {"alternatives": ["S::b"], "group": 1, "depends_on": [0]},
                {"alternatives": ["S::c"], "group": 2, "depends_on": [1]},
                {"alternatives": ["S::d"], "group": 0}
            ]}]
        }))
        .unwrap();
        assert_eq!(lookups(&s), BTreeSet::from(["S::a".to_string(), "T::a".to_string()]));
    }

    /// The demo's L5 request and the Slack tool both agents called on it (clean run at
    /// 96741c6): the tool shares no word with the request; a tool that does is not listed, nor
    /// one outside the release.
    #[test]
    fn a_called_tool_that_shares_no_word_with_an_l5_request_is_unrelated() {
        let s: crate::model::Sample = serde_json::from_value(serde_json::json!({
            "id": "L5-1", "family": "etom", "kind": "L5", "difficulty": "easy", "out_of_scope": true,
            "turns": [{"user": "Can I set up a calendar event for the first of September?", "reference_plan": []}]
        }))
        .unwrap();
        let tool = |name: &str, description: &str, inputs: serde_json::Value| super::super::source::ReleasedTool {
            server: "slack-mcp".into(),
            tool: crate::model::Tool {
                id: format!("slack-mcp::{name}"),
                name: name.into(),
                description: description.into(),
                input_schema: serde_json::json!({"type": "object", "properties": inputs}),
                output_schema: None,
            },
            catalog: "filter".into(),
        };
        let send = tool(
            "send_message",
            "Post a message to a Slack channel, or reply in a thread when a thread timestamp is given. Supports Slack mrkdwn formatting. Returns the channel ID and message timestamp.",
            serde_json::json!({"channel": {"description": "Channel ID or name, e.g. 'C024BE91L' or '#finance-alerts'."},
                "text": {"description": "Message text, formatted with Slack mrkdwn."},
                "thread_ts": {"description": "Timestamp of the parent message to reply in its thread."}}),
        );
        let remind = tool("set_reminder", "Set a reminder in Slack for a date.", serde_json::json!({}));
        let tools = BTreeMap::from([
            ("slack-mcp::send_message".to_string(), send),
            ("slack-mcp::set_reminder".to_string(), remind),
        ]);
        let run = |t: &[&str]| {
            Some(items::Outcome {
                solved: false,
                f1: 0.0,
                tools: t.iter().map(|x| x.to_string()).collect(),
                offered_by_turn: vec![],
            })
        };
        let runs = vec![vec![run(&["slack-mcp::send_message", "slack-mcp::set_reminder"])], vec![run(&["x::made_up"])]];
        let got = unrelated(&s, &runs, &tools);
        assert_eq!(got.keys().collect::<Vec<_>>(), ["slack-mcp::send_message"], "{got:?}");
    }

    #[test]
    fn a_difference_on_one_sample_of_eight_is_not_resolved_one_on_all_eight_is() {
        let base = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0];
        let mut one = base;
        one[1] = 1.0;
        // Resamples without that sample (about (7/8)^8 = 34 % of them) show no difference.
        let c = paired(&one, &base, 1000, 7);
        assert_eq!(c.difference, 1.0 / 8.0);
        assert_eq!(c.difference_ci[0], 0.0, "{c:?}");
        assert!(!c.resolved && c.half_width > 0.0, "{c:?}");
        let c = paired(&[1.0; 8], &[0.0; 8], 1000, 7);
        assert_eq!((c.difference, c.difference_ci, c.half_width), (1.0, [1.0, 1.0], 0.0));
        assert!(c.resolved);
        // The other way round: the interval lies below 0, also resolved.
        assert!(paired(&[0.0; 8], &[1.0; 8], 1000, 7).resolved);
        // Equal scores on every sample: nothing to tell apart.
        let c = paired(&base, &base, 1000, 7);
        assert_eq!(c.difference_ci, [0.0, 0.0]);
        assert!(!c.resolved);
    }

    #[test]
    fn every_column_sees_the_same_resamples_and_the_same_seed_the_same_bytes() {
        let a = [1.0, 0.5, 0.0, 1.0, 0.0];
        let b = [0.0, 0.5, 1.0, 1.0, 0.0];
        let c = [1.0, 1.0, 0.0, 0.0, 0.5];
        let table: Vec<Vec<f64>> = (0..5).map(|i| vec![a[i], b[i], c[i]]).collect();
        let means = resample_means(&table, 200, 3);
        assert_eq!(means.len(), 200);
        assert!(means.iter().all(|m| m.len() == 3 && m.iter().all(|x| (0.0..=1.0).contains(x))));
        assert_eq!(resample_means(&table, 200, 3), means, "same seed, same draws");
        // A pair compared within the panel and alone: the same resamples, the same interval.
        assert_eq!(difference(&means, 0, 2, 0.0, "").difference_ci, paired(&a, &c, 200, 3).difference_ci);
        let [lo, hi] = interval(means.iter().map(|m| m[1]).collect()).unwrap();
        assert!(lo <= 0.5 && 0.5 <= hi, "{lo} {hi}");
        assert!(resample_means(&[], 200, 3).is_empty());
        assert_eq!(interval(Vec::new()), None);
    }
}
