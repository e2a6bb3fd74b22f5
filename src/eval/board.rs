//! `leaderboard.json` and `report.md`: the panel's scores, one row per agent.
//!
//! Wire format of `leaderboard.json`: a JSON list of [`Row`], best first (score, then
//! pass^k, then agent name): `{rank, agent, model, tool_space, release, samples, repeats,
//! score, pass_k, f1, by_level, by_kind, by_difficulty, repeats_scored: [{repeat,
//! corrected, compat_etom?, compat_finmcp?}], tokens: {prompt, completion}, cost_usd,
//! calls, failed_runs}`. `score` is the share of samples solved (exact match in the
//! corrected mode of `benchgen score`), averaged over the repeats: pass@1, in [0, 1];
//! `pass_k` the share solved in every repeat. `repeats_scored` holds each repeat's figures as
//! `benchgen score` prints them for the prediction files (`n`, `em`, macro `f1`): the overall
//! row of the corrected run on `samples.jsonl` and of `--compat finmcp`, the per-level rows
//! of `--compat etom` (which reports per level, as `eval.py` does).
//! Model latency is not in it (it differs between runs of the same inputs): it is in the
//! ledger and printed by the stage.

use std::collections::BTreeMap;

use serde::Serialize;

use super::EvalSettings;
use super::items::{self, Analysis};
use super::predict::{Figures, Scored};
use super::run::{Answer, RunRecord, Runs, Usage, key};
use super::source::Release;
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

/// One agent's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub rank: usize,
    pub agent: String,
    pub model: String,
    pub tool_space: &'static str,
    pub release: String,
    pub samples: usize,
    pub repeats: usize,
    pub score: f64,
    pub pass_k: f64,
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
}

/// Everything the leaderboard and the item analysis are made from.
pub struct Panel<'a> {
    s: &'a Settings,
    cfg: &'a EvalSettings,
    rel: &'a Release,
    runs: &'a Runs,
    scored: &'a [Scored],
    usage: &'a Usage,
}

fn answer_name(a: Answer) -> String {
    serde_json::to_value(a).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The model behind a role, for the table.
fn model_of(s: &Settings, role: &str) -> String {
    let Some(r) = s.section::<crate::llm::LlmSettings>().roles.get(role) else { return String::new() };
    if let Some(m) = &r.model {
        return m.clone();
    }
    r.model_path
        .as_ref()
        .and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| r.provider.as_str().to_string())
}

impl<'a> Panel<'a> {
    pub fn new(
        s: &'a Settings,
        cfg: &'a EvalSettings,
        rel: &'a Release,
        runs: &'a Runs,
        scored: &'a [Scored],
        usage: &'a Usage,
    ) -> Self {
        Panel { s, cfg, rel, runs, scored, usage }
    }

    fn scored(&self, agent: &str) -> Vec<&Scored> {
        self.scored.iter().filter(|x| x.agent == agent).collect()
    }

    fn row(&self, agent: &str) -> Row {
        let scored = self.scored(agent);
        let k = scored.len().max(1) as f64;
        let n = self.rel.samples.len();
        let mut groups: [BTreeMap<String, (usize, f64)>; 3] = Default::default();
        let (mut total, mut f1, mut all_k) = (0.0, 0.0, 0usize);
        for s in &self.rel.samples {
            let per: Vec<_> = scored.iter().filter_map(|x| x.samples.get(&s.id)).collect();
            let solved = per.iter().filter(|p| p.solved).count() as f64 / k;
            total += solved;
            f1 += per.iter().map(|p| p.f1).sum::<f64>() / k;
            if !per.is_empty() && per.iter().all(|p| p.solved) && per.len() == scored.len() {
                all_k += 1;
            }
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
        for r in self.runs.records.values().filter(|r| r.agent == agent) {
            ran += 1;
            let (p, c) = self.usage.tokens(&key(&r.agent, r.repeat, &r.id));
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
        Row {
            rank: 0,
            agent: agent.to_string(),
            model: model_of(self.s, agent),
            tool_space: self.cfg.tool_space.as_str(),
            release: self.rel.shown.clone(),
            samples: n,
            repeats: self.cfg.repeats,
            score: total / nf,
            pass_k: all_k as f64 / nf,
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
        }
    }

    /// The leaderboard, best first.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows: Vec<Row> = self.cfg.agents.iter().map(|a| self.row(a)).collect();
        rows.sort_by(|a, b| {
            b.score.total_cmp(&a.score).then(b.pass_k.total_cmp(&a.pass_k)).then_with(|| a.agent.cmp(&b.agent))
        });
        for (i, r) in rows.iter_mut().enumerate() {
            r.rank = i + 1;
        }
        rows
    }

    /// The results as the item analysis takes them.
    pub fn matrix(&self) -> items::Matrix {
        let by_agent: BTreeMap<&str, Vec<&Scored>> =
            self.cfg.agents.iter().map(|a| (a.as_str(), self.scored(a))).collect();
        let items = self
            .rel
            .samples
            .iter()
            .map(|s| {
                let runs = self
                    .cfg
                    .agents
                    .iter()
                    .map(|a| {
                        (1..=self.cfg.repeats)
                            .map(|k| {
                                let rec = self.runs.records.get(&key(a, k, &s.id))?;
                                let sc = by_agent[a.as_str()].iter().find(|x| x.repeat == k)?.samples.get(&s.id)?;
                                Some(items::Outcome { solved: sc.solved, f1: sc.f1, tools: called(rec) })
                            })
                            .collect()
                    })
                    .collect();
                items::ItemInput {
                    id: s.id.clone(),
                    kind: s.kind,
                    difficulty: s.difficulty,
                    reference: s
                        .turns
                        .iter()
                        .flat_map(|t| &t.reference_plan)
                        .flat_map(|c| c.alternatives.clone())
                        .collect(),
                    runs,
                }
            })
            .collect();
        items::Matrix { agents: self.cfg.agents.clone(), repeats: self.cfg.repeats, items }
    }
}

/// The distinct tools a run called (within the cap), in order of first call.
fn called(r: &RunRecord) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in r.turns.iter().flat_map(RunRecord::predicted) {
        if !out.contains(&c.tool) {
            out.push(c.tool.clone());
        }
    }
    out
}

fn pct(x: f64) -> String {
    format!("{:.1}", x * 100.0)
}

/// `report.md`: the leaderboard table, the compat figures, and the item analysis.
pub fn report(panel: &Panel, rows: &[Row], analysis: &Analysis) -> String {
    let mut s = format!(
        "# Evaluation of `{}`\n\nTool space `{}`; {} samples; {} agent(s) × {} repeat(s). Score: share of samples solved (exact match, corrected mode of `benchgen score`), in percent; pass^k: solved in every repeat. Per-group columns are scores in percent.\n\n",
        panel.rel.shown,
        panel.cfg.tool_space.as_str(),
        panel.rel.samples.len(),
        panel.cfg.agents.len(),
        panel.cfg.repeats
    );
    let kinds: Vec<String> = rows.first().map(|r| r.by_kind.keys().cloned().collect()).unwrap_or_default();
    let diffs: Vec<String> = rows.first().map(|r| r.by_difficulty.keys().cloned().collect()).unwrap_or_default();
    s.push_str("| rank | agent | model | score | pass^k | F1 |");
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
            pct(r.score),
            pct(r.pass_k),
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
    item_section(&mut s, analysis);
    s
}

fn item_section(s: &mut String, analysis: &Analysis) {
    s.push_str("\n## Items\n\n");
    if analysis.flag_counts.is_empty() {
        s.push_str("No item is flagged.\n");
    } else {
        let parts: Vec<String> = analysis.flag_counts.iter().map(|(f, n)| format!("`{f}` {n}")).collect();
        s.push_str(&format!("Flags: {}.\n", parts.join(", ")));
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
        "\n### Flagged items\n\n| id | kind | label | solve rate | flags | evidence |\n|---|---|---|---:|---|---|\n",
    );
    for it in flagged.iter().take(200) {
        let ev = it.evidence.as_ref().map(|e| e.note.clone()).unwrap_or_default();
        s.push_str(&format!(
            "| `{}` | {} | {} | {:.2} | {} | {} |\n",
            it.id,
            it.kind.as_str(),
            it.difficulty.as_str(),
            it.solve_rate,
            it.flags.join(", "),
            ev.replace('|', "\\|")
        ));
    }
    if flagged.len() > 200 {
        s.push_str(&format!("\n… and {} more in `items.jsonl`.\n", flagged.len() - 200));
    }
}
