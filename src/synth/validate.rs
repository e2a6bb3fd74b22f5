//! `benchgen validate` (stage `validate`): FinMCP-Bench's automatic validation (stage 1 of
//! its quality control) for every sample of the log track, real and synthesised, and the
//! labels the benchmark reports.
//!
//! Samples: the real sessions of the benchmark pool (`logs split`; a seeded subset with
//! `synth.validate.real_samples`), the chains of `synth chains` with their executions
//! (`execute`), and the dialogues of `synth roleplay`. Checks:
//!
//! - every call of the reference trajectory ran without error (a logged error or missing
//!   result; a failed, refused or unexecuted call);
//! - chains: the run answered, every chain dependency `c_i → c_{i+1}` was kept (`c_i`'s group
//!   strictly before `c_{i+1}`'s; extra calls allowed), and a final answer exists;
//! - dialogues (and real multi-turn sessions): every turn answered, and the LLM
//!   (`synth.judge_role`, [`DialogueCheck`]) finds every user request addressed, with a
//!   reason per turn. It is asked only about dialogues that passed the checks above.
//!
//! Labels per sample: type (single-tool / multi-tool / multi-turn), difficulty by tool-call
//! count (easy 1–5, medium 6–10, hard 11+), calls, groups, parallel calls (calls in groups
//! of two or more), turns, sub-scenario.
//!
//! Outputs: `samples.jsonl` ([`crate::samples::VALIDATED`]: the accepted samples, unified
//! model, sorted by id, `turns[].trajectory` filled, `author = "llm:<role>"` for synthesised
//! ones), `finmcp.json` (the same samples in FinMCP's sample format), `verdicts.jsonl`
//! (every sample: accepted or not, reasons, labels), `report.md` (yield funnel per
//! sub-scenario with rejection reasons; Table-1-style statistics).

use std::collections::BTreeMap;

use anyhow::Result;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::SynthSettings;
use super::chains::{CHAINS, ChainRecord};
use super::roleplay::{DIALOGUES, Dialogue, STOP};
use crate::agent::{RunStatus, TRAJECTORIES, Trajectory};
use crate::ledger::{Ledger, NewEvent, Parent};
use crate::llm::Prompt;
use crate::llm::batch::{Batch, BatchOptions, Item};
use crate::logs::Session;
use crate::model::{Difficulty, Family, Kind, PlanCall, RecordedCall, Sample, Turn};
use crate::settings::{Settings, section_hash};
use crate::stage::{ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "validate";

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "validate",
    // 2: only the calls a request needs become the reference plan; arguments traced;
    // answers checked against their calls; dialogue turns that add nothing end the dialogue.
    // 3: an answer naming a function or parameter no call of its turn made is unfaithful.
    // 4: the needed-call check writes its reason before its verdict. 5: a synthesised turn
    // whose request names a parameter's known value that its needed calls do not give is
    // rejected (`gold::unserved_values`). 6: that rule judges each turn's own message, only
    // entity-like parameters (5 known values or more), not a negated mention, and counts a
    // value a needed call's result holds as served. 7: a step of the sampled chain is needed
    // on evidence or the LLM check's word only, and one found not needed rejects the chain.
    // 8: a message the agent composed is traced by its identifiers (`gold::composed`).
    // 9: the report groups rejections by what went wrong, not by "turn".
    // 10: ... a `server::tool` id and any argument value left whole.
    // 11: an answer quoting a call's result makes the call needed by rule only when the
    //     quoted field is one the request asks about; otherwise the LLM check decides.
    // 12: ... the field's own key, not the key or entity holding it (`gold::field_word`).
    // 13: the needed-call check's schema describes the answer only (its developer
    //     note, with a bad reason about a price, had reached the prompt).
    // 14: the answer's schema says what is asked, not "the X's typed answer" (developer
    //     wording the model read).
    // 15: a read that only looks up again what an earlier call of its turn found, and adds
    //     nothing the request names, is unrequested by rule (`gold::lookups_adding_nothing`).
    // 16: an answer quoting a value only a left-out call's result holds is asked again,
    //     then rejected (`gold::turn_claims`).
    // 17: a field and a request's word are one another's singular by `text::singular`
    //     (`status` no longer folds to `statu`), the words every check shares.
    // 18: plurals fold by the shared `text::singular` as refined: `caches` → `cache`, `causes` →
    //     `cause`, `cpus` → `cpu`; three-letter words but `ids` and `this`, `news` stay.
    // 19: plurals fold by `text::singular` with two vowels before `ch`/`us` read as one
    //     (`breaches` → `breach`, not `breache`), and `ips`, `vms`, `prs` fold.
    version: 19,
    about: "automatic validation of real and synthesised log-track samples (calls ran, chain kept, requests addressed, ground truth needed), with labels",
    reads: &[
        crate::logs::split::BENCHMARK.read(),
        crate::logs::curate::CURATED.optional(),
        CHAINS.optional(),
        super::chains::SAMPLING.optional(),
        TRAJECTORIES.optional(),
        DIALOGUES.optional(),
        crate::logs::import::CATALOG.optional(),
    ],
    writes: &["samples.jsonl", "finmcp.json", "verdicts.jsonl", "report.md", "failed.json"],
    section: Some("synth"),
};

/// Where a sample comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Real,
    Chain,
    Dialogue,
}

/// The labels of one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Labels {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub difficulty: Difficulty,
    pub tool_calls: usize,
    pub groups: usize,
    /// Calls in groups of two or more (FinMCP's `para_tool_call_number`).
    pub parallel_calls: usize,
    pub turns: usize,
    pub sub_scenario: String,
}

/// The judge's verdict on one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TurnCheck {
    /// The turn number (1-based).
    pub turn: u32,
    /// True when the assistant's reply addressed this turn's request.
    pub addressed: bool,
    pub reason: String,
}

/// Your check of each user turn of the dialogue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DialogueCheck {
    /// One entry per user turn.
    pub turns: Vec<TurnCheck>,
}

/// The checkpointed judge verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checked {
    pub turns: Vec<TurnCheck>,
    pub exchange: String,
    /// The exchange's ledger event (a parent of the verdict; not written to artifacts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<i64>,
}

/// One line of `verdicts.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub id: String,
    pub source: Source,
    pub accepted: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    pub labels: Labels,
    /// How far it got: `generated`, `executed` (its run produced a trajectory), `checked`.
    pub reached: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Checked>,
    /// What became of every call of the reference trajectory (needed, repeated, unrequested).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<super::gold::CallDecision>,
    /// What the checks changed without rejecting the sample.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A sample under validation: the unified sample and what the checks found so far.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub sample: Sample,
    pub source: Source,
    pub sub_scenario: String,
    pub reasons: Vec<String>,
    pub executed: bool,
    /// FinMCP: the user ended the dialogue (a final `###STOP###` message).
    pub stopped_by_user: bool,
    /// Session / chain / dialogue id of the origin (for ledger links).
    pub origin: String,
    /// Positions (in the first turn's calls, trajectory order) of the sampled chain's steps.
    pub chain_steps: Vec<usize>,
    /// What became of every call ([`super::gold`]).
    pub decisions: Vec<super::gold::CallDecision>,
    /// What the checks changed without rejecting (an answer asked again, a dialogue cut).
    pub notes: Vec<String>,
    /// Ledger events of the checks' LLM exchanges (parents of the verdict).
    pub events: Vec<i64>,
}

/// Labels of a unified sample.
pub fn labels(s: &Sample, sub_scenario: &str) -> Labels {
    let gold: Vec<Vec<Vec<RecordedCall>>> = s.turns.iter().map(|t| t.gold_trajectory()).collect();
    let groups: Vec<&Vec<RecordedCall>> = gold.iter().flatten().collect();
    Labels {
        kind: s.kind,
        difficulty: s.difficulty,
        tool_calls: s.reference_calls(),
        groups: groups.iter().filter(|g| !g.is_empty()).count(),
        parallel_calls: groups.iter().filter(|g| g.len() >= 2).map(|g| g.len()).sum(),
        turns: s.turns.len(),
        sub_scenario: sub_scenario.to_string(),
    }
}

/// The kind of a log-track sample by its shape.
pub fn kind_of(turns: usize, calls: usize) -> Kind {
    if turns > 1 {
        Kind::MultiTurn
    } else if calls > 1 {
        Kind::MultiTool
    } else {
        Kind::SingleTool
    }
}

/// A turn from executed groups: the plan lists every call (group = its step), and
/// `deps` gives, per call index, the calls it depends on.
fn turn_of(
    user: &str,
    groups: Vec<Vec<RecordedCall>>,
    answer: Option<String>,
    deps: &BTreeMap<usize, Vec<usize>>,
) -> Turn {
    let mut plan = Vec::new();
    for (g, calls) in groups.iter().enumerate() {
        for c in calls {
            let i = plan.len();
            plan.push(PlanCall {
                alternatives: vec![c.tool.clone()],
                group: g as u32,
                depends_on: deps.get(&i).cloned().unwrap_or_default(),
            });
        }
    }
    Turn { user: user.to_string(), reference_plan: plan, gold_reply: answer, trajectory: groups }
}

fn call_errors(turns: &[Turn]) -> Vec<String> {
    let mut out = Vec::new();
    for (ti, t) in turns.iter().enumerate() {
        for (gi, g) in t.trajectory.iter().enumerate() {
            for c in g {
                if let Some(e) = &c.error {
                    out.push(format!("turn {} group {gi}: `{}` did not succeed: {e}", ti + 1, c.tool));
                } else if c.result.is_none() {
                    out.push(format!("turn {} group {gi}: `{}` has no result", ti + 1, c.tool));
                }
            }
        }
    }
    out
}

fn scenario_path(sub: &str) -> Vec<String> {
    sub.split('-').map(str::to_string).collect()
}

fn finish(mut sample: Sample) -> Sample {
    sample.difficulty = Difficulty::from_calls(sample.reference_calls());
    sample.kind = kind_of(sample.turns.len(), sample.reference_calls());
    sample.provenance_id = sample.subject();
    sample
}

/// A real session of the benchmark pool.
pub fn from_session(s: &Session) -> Candidate {
    let turns: Vec<Turn> = s
        .turns
        .iter()
        .map(|t| {
            let groups = t
                .groups
                .iter()
                .map(|g| {
                    g.iter()
                        .map(|c| RecordedCall {
                            tool: c.tool.clone(),
                            arguments: c.arguments.clone(),
                            result: c.result.clone(),
                            error: c.error.clone(),
                            left_out: None,
                        })
                        .collect()
                })
                .collect();
            turn_of(&t.user, groups, t.answer.clone(), &BTreeMap::new())
        })
        .collect();
    let sub = s.sub_scenario();
    let sample = finish(Sample {
        id: format!("log:{}", s.id),
        family: Family::Finmcp,
        kind: Kind::SingleTool,
        scenario: s.scenario.as_deref().map(scenario_path).unwrap_or_else(|| scenario_path(&sub)),
        turns,
        out_of_scope: false,
        difficulty: Difficulty::Easy,
        provenance_id: String::new(),
        author: None,
    });
    let mut reasons = call_errors(&sample.turns);
    if let Some(i) = sample.turns.iter().position(|t| t.gold_reply.as_deref().is_none_or(|a| a.trim().is_empty())) {
        reasons.push(format!("turn {} has no final answer", i + 1));
    }
    Candidate {
        sample,
        source: Source::Real,
        sub_scenario: sub,
        reasons,
        executed: true,
        stopped_by_user: false,
        origin: s.id.clone(),
        chain_steps: vec![],
        decisions: vec![],
        notes: vec![],
        events: vec![],
    }
}

/// A chain and its execution (when it ran).
pub fn from_chain(c: &ChainRecord, t: Option<&Trajectory>, author_role: &str) -> Candidate {
    let mut reasons = Vec::new();
    let mut chain_steps = Vec::new();
    let (turn, executed) = match t {
        None => {
            reasons.push("not executed: `execute` has no trajectory for it".to_string());
            (Turn { user: c.query.clone(), reference_plan: vec![], gold_reply: None, trajectory: vec![] }, false)
        }
        Some(t) => {
            let groups = crate::agent::recorded_groups(&t.calls);
            // Dependencies of the matched chain calls: each chain step's call depends on the
            // previous step's call (indices into the plan, which lists calls group by group).
            let mut deps = BTreeMap::new();
            if let Some(check) = &t.chain_check {
                let mut index_of = BTreeMap::new();
                let mut i = 0;
                for (g, calls) in groups.iter().enumerate() {
                    for call in calls {
                        index_of.entry((g, call.tool.clone())).or_insert(i);
                        i += 1;
                    }
                }
                let matched: Vec<Option<usize>> = check
                    .groups
                    .iter()
                    .zip(&c.tools)
                    .map(|(g, tool)| g.and_then(|g| index_of.get(&(g, tool.clone())).copied()))
                    .collect();
                for w in matched.windows(2) {
                    if let [Some(a), Some(b)] = w {
                        deps.insert(*b, vec![*a]);
                    }
                }
                chain_steps = matched.iter().flatten().copied().collect();
                if !check.preserved {
                    reasons.extend(check.problems.iter().map(|p| format!("chain not kept: {p}")));
                }
            } else {
                reasons.push("the execution carries no chain check".into());
            }
            if t.status != RunStatus::Answered {
                reasons.push(format!(
                    "the run ended `{}`{}",
                    t.status.as_str(),
                    t.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
                ));
            }
            let answer = t.answer.clone().filter(|a| !a.trim().is_empty());
            if answer.is_none() && t.status == RunStatus::Answered {
                reasons.push("no final answer".into());
            }
            (turn_of(&c.query, groups, answer, &deps), true)
        }
    };
    let turns = vec![turn];
    // Call errors first: they are the paper's first criterion.
    let mut all = call_errors(&turns);
    all.extend(reasons);
    let sample = finish(Sample {
        id: c.id.clone(),
        family: Family::Finmcp,
        kind: Kind::MultiTool,
        scenario: scenario_path(&c.sub_scenario),
        turns,
        out_of_scope: false,
        difficulty: Difficulty::Easy,
        provenance_id: String::new(),
        author: Some(format!("llm:{author_role}")),
    });
    Candidate {
        sample,
        source: Source::Chain,
        sub_scenario: c.sub_scenario.clone(),
        reasons: all,
        executed,
        stopped_by_user: false,
        origin: c.id.clone(),
        chain_steps,
        decisions: vec![],
        notes: vec![],
        events: vec![],
    }
}

/// A simulated dialogue.
pub fn from_dialogue(d: &Dialogue, author_role: &str) -> Candidate {
    let turns: Vec<Turn> = d
        .turns
        .iter()
        .map(|t| {
            turn_of(&t.user, t.groups.clone(), t.answer.clone().filter(|a| !a.trim().is_empty()), &BTreeMap::new())
        })
        .collect();
    let mut reasons = call_errors(&turns);
    for (i, t) in d.turns.iter().enumerate() {
        if t.status != RunStatus::Answered {
            reasons.push(format!(
                "turn {}: the assistant's run ended `{}`{}",
                i + 1,
                t.status.as_str(),
                t.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
            ));
        } else if t.answer.as_deref().is_none_or(|a| a.trim().is_empty()) {
            reasons.push(format!("turn {}: no reply", i + 1));
        }
    }
    if turns.is_empty() {
        reasons.push("the dialogue has no turn".into());
    } else if turns.len() == 1 {
        reasons.push(format!("the dialogue has one turn (it ended `{}`); a multi-turn sample needs two", d.ended));
    }
    let sample = finish(Sample {
        id: d.id.clone(),
        family: Family::Finmcp,
        kind: Kind::MultiTurn,
        scenario: scenario_path(&d.sub_scenario),
        turns,
        out_of_scope: false,
        difficulty: Difficulty::Easy,
        provenance_id: String::new(),
        author: Some(format!("llm:{author_role}")),
    });
    Candidate {
        sample,
        source: Source::Dialogue,
        sub_scenario: d.sub_scenario.clone(),
        reasons,
        executed: !d.turns.is_empty(),
        // The user's own end: the simulator said done, or the planned user had no request left.
        stopped_by_user: d.ended == "user" || d.ended == "plan",
        origin: d.id.clone(),
        chain_steps: vec![],
        decisions: vec![],
        notes: vec![],
        events: vec![],
    }
}

/// Does a dialogue need the judge? (Multi-turn samples that passed the automatic checks.)
fn needs_judge(c: &Candidate) -> bool {
    c.reasons.is_empty() && c.sample.kind == Kind::MultiTurn
}

/// The judge's answer about a dialogue of `turns` turns: one verdict per turn, in order,
/// entry k naming turn k (see [`crate::llm::Answer::numbered`]); an answer that misses or
/// repeats a turn is re-asked, so [`judge_reasons`] always finds every turn.
pub(crate) fn check_answer(turns: usize) -> crate::llm::Answer<DialogueCheck> {
    crate::llm::Answer::<DialogueCheck>::of().numbered("turns", "turn", turns, "turn", |c: &DialogueCheck| {
        c.turns.iter().map(|t| u64::from(t.turn)).collect()
    })
}

/// The judge's reasons to reject (empty: every request addressed). A verdict that does
/// not cover every turn rejects the sample too.
pub fn judge_reasons(check: &[TurnCheck], turns: usize) -> Vec<String> {
    let mut out = Vec::new();
    for n in 1..=turns {
        match check.iter().find(|t| t.turn as usize == n) {
            None => out.push(format!("turn {n}: the judge gave no verdict")),
            Some(t) if !t.addressed => out.push(format!("turn {n}: request not addressed: {}", t.reason)),
            Some(_) => {}
        }
    }
    out
}

/// The judge prompt of a multi-turn sample: the conversation with the tools each turn used.
pub fn check_prompt(template: &str, s: &Sample) -> Prompt {
    let turns: Vec<Value> = s
        .turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let gold = t.gold_trajectory();
            let tools: Vec<&str> = gold.iter().flatten().map(|c| c.tool.as_str()).collect();
            json!({"turn": i + 1, "user": t.user, "tools": tools, "reply": t.gold_reply.clone().unwrap_or_default()})
        })
        .collect();
    Prompt::new(template, json!({"turns": turns}))
}

/// A sample in FinMCP's sample format (`id`, `scenery`, `diff_level`, `tool_list` groups,
/// `question`, `answer`, `messages`, `first-class`, `sub-class`, `task`).
pub fn finmcp_sample(c: &Candidate) -> Value {
    let s = &c.sample;
    let mut messages = Vec::new();
    let mut n = 0usize;
    let mut tool_list: Vec<Vec<String>> = Vec::new();
    for t in &s.turns {
        messages.push(json!({"role": "user", "content": t.user}));
        for g in &t.gold_trajectory() {
            let mut calls = Vec::new();
            let mut results = Vec::new();
            for (i, call) in g.iter().enumerate() {
                let id = format!("call_{n:04x}");
                n += 1;
                let args = serde_json::to_string(&call.arguments).unwrap_or_default();
                calls.push(json!({"id": id, "type": "function", "index": i,
                                   "function": {"name": call.tool, "arguments": args}}));
                let content = call.result.clone().or_else(|| call.error.clone()).unwrap_or_default();
                results.push(json!({"role": "tool", "content": content, "tool_call_id": id, "name": call.tool}));
            }
            tool_list.push(g.iter().map(|c| c.tool.clone()).collect());
            messages.push(json!({"role": "assistant", "content": "", "tool_calls": calls}));
            messages.extend(results);
        }
        messages.push(json!({"role": "assistant", "content": t.gold_reply.clone().unwrap_or_default()}));
    }
    if c.stopped_by_user {
        messages.push(json!({"role": "user", "content": STOP}));
    }
    let l = labels(s, &c.sub_scenario);
    let user_messages = messages.iter().filter(|m| m["role"] == "user").count();
    let task = match s.kind {
        Kind::SingleTool => "single step",
        Kind::MultiTool => "multi step",
        _ => "multi turn",
    };
    let scenery = s.scenario.join("-");
    json!({
        "id": s.id,
        "scenery": scenery,
        "diff_level": {"turns": user_messages, "tool_number": l.tool_calls,
                       "para_tool_call_number": l.parallel_calls, "level": s.difficulty.as_str()},
        "tool_list": tool_list,
        "question": s.turns.first().map(|t| t.user.clone()).unwrap_or_default(),
        "answer": s.turns.last().and_then(|t| t.gold_reply.clone()).unwrap_or_default(),
        "messages": messages,
        "first-class": s.scenario.first().cloned().unwrap_or_default(),
        "sub-class": s.scenario.get(1).cloned().unwrap_or_default(),
        "task": task,
    })
}

/// At most how many samples `validate` accepts, before anything runs: the written file
/// when there is one, else every candidate it can check. `None`: the logs cannot be read.
pub fn validated_bound(s: &Settings) -> Option<crate::samples::PoolBound> {
    if let Some(b) = crate::samples::file_bound(&crate::samples::VALIDATED.path(s)) {
        return Some(b);
    }
    sample_bound(s, &cfg(s)).map(|b| crate::samples::PoolBound { samples: b.samples, turns: b.turns })
}

/// Where validation left a sample, from the events filed under its subject (for `explain
/// sample:<id>`): `None` when no verdict is among them, else whether it was accepted and a
/// line saying so (a rejection with its reasons).
pub fn verdict_status(events: &[crate::ledger::Event]) -> Option<(bool, String)> {
    let v = events.iter().rev().find(|e| e.kind == super::kind::VALIDATION)?;
    if v.payload["accepted"] == true {
        return Some((true, "accepted by `validate`".into()));
    }
    let reasons: Vec<&str> = v.payload["reasons"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    Some((false, format!("rejected by `validate`: {}", reasons.join("; "))))
}

/// Upper bounds of what `validate` checks, before anything runs (for its estimate).
struct SampleBound {
    samples: u64,
    turns: u64,
    calls: u64,
    /// Counted from the executed chains and the dialogues on disk ([`made_samples`]).
    made: bool,
}

/// Real samples (the sessions with the most calls when `real_samples` takes some), chain
/// queries (one turn, at most `max_calls` calls) and dialogues (`turn_cap` turns of at most
/// `max_calls` calls), as [`super::chains::chain_bound`] and `[synth.roleplay]` allow.
fn sample_bound(s: &Settings, sc: &SynthSettings) -> Option<SampleBound> {
    let (sessions, _) = crate::logs::import::sessions_before_run(s)?;
    let take = sc.validate.real_samples.unwrap_or(sessions.len()).min(sessions.len());
    // The largest `take` of each count bounds what any sample of that many sessions holds.
    let largest = |count: &dyn Fn(&Session) -> u64| -> u64 {
        let mut v: Vec<u64> = sessions.iter().map(count).collect();
        v.sort_unstable_by_key(|&n| std::cmp::Reverse(n));
        v.iter().take(take).sum()
    };
    let (real_calls, real_turns) = (largest(&|x| x.call_count() as u64), largest(&|x| x.turns.len().max(1) as u64));
    let made = made_samples(s);
    let (samples, turns, calls) = match made {
        Some(made) => made,
        None => {
            let max_calls = s.section::<crate::agent::ExecuteSettings>().max_calls as u64;
            let chains = super::chains::chain_bound(s).map_or(0, |(n, _)| n);
            let rp = &sc.roleplay;
            let (dialogues, cap) = (rp.dialogues as u64, rp.turn_cap as u64);
            (chains + dialogues, chains + dialogues * cap, (chains + dialogues * cap) * max_calls)
        }
    };
    Some(SampleBound {
        samples: take as u64 + samples,
        turns: real_turns + turns,
        calls: real_calls + calls,
        made: made.is_some(),
    })
}

/// Once `execute` and `synth roleplay` have written theirs (as `run` reaches this stage):
/// the executed chains and the dialogues as samples, turns and calls — what validation
/// checks of them. `None` before both files are there (a track without one: before it).
fn made_samples(s: &Settings) -> Option<(u64, u64, u64)> {
    // Read whenever there (validation checks an optional input it finds); needed where the
    // stage that writes it is on: chains whenever synthesis runs, dialogues when some are
    // asked for.
    fn read<T: serde::de::DeserializeOwned>(path: std::path::PathBuf, needed: bool) -> Option<Vec<T>> {
        match std::fs::read(path) {
            Ok(bytes) => jsonl(&bytes, "").ok(),
            Err(_) if needed => None,
            Err(_) => Some(Vec::new()),
        }
    }
    // A run stopped at the call cap records its whole last group; validation checks no more
    // than `max_calls` of a turn's calls.
    let max_calls = s.section::<crate::agent::ExecuteSettings>().max_calls;
    let (mut samples, mut turns, mut calls) = (0, 0, 0);
    for t in read::<Trajectory>(TRAJECTORIES.path(s), super::enabled(s))? {
        (samples, turns, calls) = (samples + 1, turns + 1, calls + t.calls.len().min(max_calls) as u64);
    }
    for d in read::<Dialogue>(DIALOGUES.path(s), super::enabled(s) && cfg(s).roleplay.dialogues > 0)? {
        let n: usize = d.turns.iter().map(|t| t.groups.iter().map(Vec::len).sum::<usize>().min(max_calls)).sum();
        (samples, turns, calls) = (samples + 1, turns + d.turns.len() as u64, calls + n as u64);
    }
    Some((samples, turns, calls))
}

fn cfg(s: &Settings) -> SynthSettings {
    super::settings(s)
}

pub struct ValidateStage;

impl Stage for ValidateStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Automatic validation of every log-track sample (real, chains, dialogues), with labels.

         Reads the benchmark pool `logs-split/benchmark.jsonl` (and the curated sessions
         `logs-curate/curated.jsonl`, for the values their calls gave each parameter), the chains
         `synth-chains/chains.jsonl` (with `synth-chains/sampling.json` for the funnel) and their
         executions `execute/trajectories.jsonl`, and the
         dialogues `synth-roleplay/dialogues.jsonl` (each when present). A sample passes when
         every reference call ran without error (chains also: answered, chain order kept;
         dialogues also: the LLM `synth.judge_role` finds every user request addressed).
         Writes `artifacts/validate/`: `samples.jsonl` (accepted, unified format, sorted by
         id), `finmcp.json` (the same in FinMCP's sample format), `verdicts.jsonl` (every
         sample with labels and rejection reasons), `report.md` (yield funnel per
         sub-scenario, Table-1-style statistics) and `failed.json` when checks failed."
    }

    fn enabled(&self, s: &Settings) -> bool {
        super::enabled(s)
    }

    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        vec![
            ConfigRef::new("synth.judge_role", &cfg(s).judge_role),
            ConfigRef::new("synth.assistant_role", &cfg(s).assistant_role),
        ]
    }

    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        use crate::stage::Estimate;
        let sc = cfg(s);
        let Some(b) = sample_bound(s, &sc) else {
            return vec![Estimate::unknown(&sc.judge_role, crate::stage::UNTIL_LOGS)];
        };
        let rows = [
            Estimate::typed(
                &sc.judge_role,
                b.calls + b.samples,
                format!(
                    "≤ {} calls' need checks + {} samples' dialogue checks{}",
                    b.calls,
                    b.samples,
                    if b.made { " (of the executed chains and dialogues on disk)" } else { "" }
                ),
            ),
            Estimate::typed(&sc.assistant_role, b.turns, format!("≤ {} turns' answer re-asks", b.turns)),
        ];
        crate::stage::merge_by_role(rows).into_iter().map(|e| e.in_flight(sc.validate.concurrency.max(1))).collect()
    }

    fn prompts(&self, s: &Settings) -> Vec<PromptRef> {
        let vars = json!({"turns": [{"turn": 1, "user": "u", "tools": ["t"], "reply": "r"}]});
        let call = json!({"n": 1, "tool": "t", "arguments": "{}", "result": "r"});
        let need = json!({"request": "q", "before": [call.clone()], "call": call.clone()});
        let again = json!({"request": "q", "calls": [call], "answer": "a", "problems": ["p"]});
        let v = &cfg(s).validate;
        vec![
            PromptRef::new("synth.validate.check_template", &v.check_template, vars),
            PromptRef::new("synth.validate.need_template", &v.need_template, need),
            PromptRef::new("synth.validate.answer_template", &v.answer_template, again),
        ]
    }

    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        crate::settings::check_positive(problems, "synth.validate.concurrency", cfg(s).validate.concurrency);
    }

    /// A verdict: accepted or why not, and what became of each call.
    fn describe_event(&self, kind: &str, payload: &Value) -> Option<String> {
        (kind == super::kind::VALIDATION).then(|| super::gold::describe_verdict(payload))
    }

    fn plan(&self, s: &Settings) -> Result<Plan> {
        let c = cfg(s);
        let hash = json!({"validate": c.validate, "judge_role": c.judge_role, "planner_role": c.planner_role,
                          "user_role": c.user_role, "assistant_role": c.assistant_role, "seed": s.project.seed});
        Ok(Plan { inputs: vec![], config_hash: section_hash(&hash)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let sc = cfg(s);
        let v = &sc.validate;
        let Candidates { mut cands, real_pool, real, chains, dialogues, mut known } = candidates(s, &sc, inputs)?;

        let opts = BatchOptions::new(STAGE, "validate", "checks")
            .concurrency(v.concurrency.max(1))
            .max_failed_share(v.max_failed_share, "synth.validate.max_failed_share")
            .fail_point("validate_dialogue");
        let mut batch = Batch::new(ctx, opts)?;
        let (schemas, about) = tool_schemas(inputs)?;
        for schema in schemas.values() {
            known.add_schema(schema);
        }
        ground_truth(&mut batch, &mut cands, &sc, &schemas, &about, &known)?;
        let items: Vec<(String, (Prompt, usize))> = cands
            .iter()
            .filter(|c| needs_judge(c))
            .map(|c| (c.sample.id.clone(), (check_prompt(&v.check_template, &c.sample), c.sample.turns.len())))
            .collect();
        let role = sc.judge_role.as_str();
        batch.phase("samples");
        let done = batch.run(items, |(prompt, turns): (Prompt, usize), llm: Item| async move {
            let reply = llm.ask(role, &prompt, None, &check_answer(turns)).await?;
            let mut turns = reply.value.turns;
            for t in &mut turns {
                t.reason = crate::text::one_line(&t.reason);
            }
            Ok(Checked { turns, exchange: reply.exchange, event: Some(reply.event_id) })
        })?;
        let failed: BTreeMap<String, String> = done.failed.iter().map(|f| (f.item.clone(), f.reason.clone())).collect();

        // Ledger links: each verdict's parents are the events that made the sample.
        let ledger = Ledger::open(&s.artifacts)?;

        let mut verdicts = Vec::new();
        let mut accepted: Vec<&Candidate> = Vec::new();
        for c in &cands {
            let id = &c.sample.id;
            let mut reasons = c.reasons.clone();
            let check = done.values.get(id).cloned();
            let judge_event = check.as_ref().and_then(|c| c.event);
            let check = check.map(|c| Checked { event: None, ..c });
            if let Some(ch) = &check {
                reasons.extend(judge_reasons(&ch.turns, c.sample.turns.len()));
            } else if needs_judge(c) {
                let why = failed.get(id).cloned().unwrap_or_else(|| "no verdict".into());
                reasons.push(format!("the judge gave no usable verdict: {why}"));
            }
            let reached = if !c.executed {
                "generated"
            } else if check.is_some() || !needs_judge(c) {
                "checked"
            } else {
                "executed"
            };
            let verdict = Verdict {
                id: id.clone(),
                source: c.source,
                accepted: reasons.is_empty(),
                reasons,
                labels: labels(&c.sample, &c.sub_scenario),
                reached: reached.into(),
                check,
                calls: c.decisions.clone(),
                notes: c.notes.clone(),
            };
            let mut ev =
                NewEvent::new(super::kind::VALIDATION, Some(&crate::model::Sample::subject_for(id)), json!(verdict));
            for p in origin_events(ctx, &ledger, c)? {
                ev = ev.with_parent(Parent::Id(p));
            }
            for e in judge_event.iter().chain(&c.events) {
                ev = ev.with_parent(Parent::Id(*e));
            }
            out.event(ev);
            if verdict.accepted {
                accepted.push(c);
            }
            verdicts.push(verdict);
        }
        batch.finish(out)?;

        write_results(inputs, out, &verdicts, &accepted, real_pool)?;
        out.notes.push(format!(
            "{} of {} samples accepted ({real} real, {chains} chains, {dialogues} dialogues checked)",
            accepted.len(),
            verdicts.len(),
        ));
        Ok(())
    }
}

/// The samples to validate, one candidate each, sorted by id, and how many came from where.
struct Candidates {
    cands: Vec<Candidate>,
    /// Sessions in the benchmark pool (before `synth.validate.real_samples` picks some).
    real_pool: usize,
    real: usize,
    chains: usize,
    dialogues: usize,
    /// The values the curated sessions' calls (the benchmark pool's among them) gave each
    /// parameter (`gold::unserved_values`).
    known: super::gold::KnownValues,
}

/// Read the real sessions (a seeded subset with `synth.validate.real_samples`), the chains
/// with their executions and the dialogues, each when present, as candidates sorted by id;
/// two sharing an id is an error.
fn candidates(s: &Settings, sc: &SynthSettings, inputs: &Inputs) -> Result<Candidates> {
    let v = &sc.validate;
    let mut real =
        crate::logs::read_sessions(inputs.open_of(&crate::logs::split::BENCHMARK)?, "logs-split/benchmark.jsonl")?;
    real.sort_by(|a, b| a.id.cmp(&b.id));
    let real_pool = real.len();
    // Every curated session's calls (the benchmark pool is a third of them).
    let curated = match inputs.has(&crate::logs::curate::CURATED) {
        true => {
            crate::logs::read_sessions(inputs.open_of(&crate::logs::curate::CURATED)?, "logs-curate/curated.jsonl")?
        }
        false => Vec::new(),
    };
    let mut known = super::gold::KnownValues::default();
    for call in real.iter().chain(&curated).flat_map(|s| &s.turns).flat_map(|t| &t.groups).flatten() {
        known.add_call(&call.arguments);
    }
    if let Some(n) = v.real_samples {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(s.project.seed ^ 0x7661_6c69_6461_7465);
        real.shuffle(&mut rng);
        real.truncate(n);
        real.sort_by(|a, b| a.id.cmp(&b.id));
    }
    let chains: Vec<ChainRecord> =
        if inputs.has(&CHAINS) { jsonl(inputs.bytes_of(&CHAINS)?, "synth-chains/chains.jsonl")? } else { vec![] };
    let trajectories: BTreeMap<String, Trajectory> = if inputs.has(&TRAJECTORIES) {
        jsonl::<Trajectory>(inputs.bytes_of(&TRAJECTORIES)?, "execute/trajectories.jsonl")?
            .into_iter()
            .map(|t| (t.id.clone(), t))
            .collect()
    } else {
        BTreeMap::new()
    };
    let dialogues: Vec<Dialogue> = if inputs.has(&DIALOGUES) {
        jsonl(inputs.bytes_of(&DIALOGUES)?, "synth-roleplay/dialogues.jsonl")?
    } else {
        vec![]
    };

    let mut cands: Vec<Candidate> = real.iter().map(from_session).collect();
    cands.extend(chains.iter().map(|c| from_chain(c, trajectories.get(&c.id), &sc.planner_role)));
    cands.extend(dialogues.iter().map(|d| from_dialogue(d, &sc.user_role)));
    cands.sort_by(|a, b| a.sample.id.cmp(&b.sample.id));
    if let Some(w) = cands.windows(2).find(|w| w[0].sample.id == w[1].sample.id) {
        anyhow::bail!("two samples share the id `{}`; sample ids must be unique", w[0].sample.id);
    }
    Ok(Candidates { cands, real_pool, real: real.len(), chains: chains.len(), dialogues: dialogues.len(), known })
}

/// The ledger events that made a candidate (its session's split; its chain and the chain's
/// execution; its dialogue): parents of its verdict.
fn origin_events(ctx: &Ctx, ledger: &Ledger, c: &Candidate) -> Result<Vec<i64>> {
    let run_of = |stage: &str| ctx.manifest_of(stage).map(|m| m.run_id);
    let mut ids = Vec::new();
    let last = |subject: &str, stage: &str, kind: &str| -> Result<Option<i64>> {
        let Some(run) = run_of(stage) else { return Ok(None) };
        Ok(ledger.events_for(subject, &[run])?.into_iter().rev().find(|e| e.kind == kind).map(|e| e.id))
    };
    match c.source {
        Source::Real => {
            ids.extend(last(&crate::logs::subject(&c.origin), "logs-split", crate::logs::kind::SPLIT)?);
        }
        Source::Chain => {
            ids.extend(last(&crate::model::Sample::subject_for(&c.origin), super::chains::STAGE, super::kind::CHAIN)?);
            ids.extend(last(&c.origin, "execute", crate::agent::TRAJECTORY)?);
        }
        Source::Dialogue => {
            ids.extend(last(
                &crate::model::Sample::subject_for(&c.origin),
                super::roleplay::STAGE,
                super::kind::DIALOGUE,
            )?);
        }
    }
    Ok(ids)
}

/// Write the accepted samples (unified and in FinMCP's format), every verdict, the report
/// and the counts.
fn write_results(
    inputs: &Inputs,
    out: &mut Output,
    verdicts: &[Verdict],
    accepted: &[&Candidate],
    real_pool: usize,
) -> Result<()> {
    let mut samples = Vec::new();
    for c in accepted {
        serde_json::to_writer(&mut samples, &c.sample)?;
        samples.push(b'\n');
    }
    out.file("samples.jsonl", samples);
    let fin: Vec<Value> = accepted.iter().map(|c| finmcp_sample(c)).collect();
    out.json("finmcp.json", &fin)?;
    let mut lines = Vec::new();
    for v in verdicts {
        serde_json::to_writer(&mut lines, v)?;
        lines.push(b'\n');
    }
    out.file("verdicts.jsonl", lines);
    let sampled = sampled_per_sub(inputs)?;
    out.file("report.md", report(verdicts, accepted, &sampled, real_pool).into_bytes());
    for src in [Source::Real, Source::Chain, Source::Dialogue] {
        let name = format!("{src:?}").to_lowercase();
        let all = verdicts.iter().filter(|v| v.source == src).count();
        let ok = verdicts.iter().filter(|v| v.source == src && v.accepted).count();
        out.count(&format!("{name}_candidates"), all);
        out.count(&format!("{name}_accepted"), ok);
    }
    out.count("samples", accepted.len());
    for d in [super::gold::Decision::Needed, super::gold::Decision::Repeated, super::gold::Decision::Unrequested] {
        let n = verdicts.iter().flat_map(|v| &v.calls).filter(|c| c.decision == d).count();
        out.count(&format!("calls_{}", d.as_str()), n);
    }
    Ok(())
}

/// Input schemas (for documented defaults) and descriptions of the log catalog's tools by
/// name, when `logs import` wrote one.
#[allow(clippy::type_complexity)]
fn tool_schemas(inputs: &Inputs) -> Result<(BTreeMap<String, Value>, BTreeMap<String, String>)> {
    if !inputs.has(&crate::logs::import::CATALOG) {
        return Ok(Default::default());
    }
    let tools: Vec<crate::logs::import::LogTool> = inputs.json(&crate::logs::import::CATALOG)?;
    let about = tools.iter().map(|t| (t.name.clone(), t.description.clone())).collect();
    Ok((tools.into_iter().map(|t| (t.name, t.input_schema)).collect(), about))
}

/// The ground-truth checks of [`super::gold`] over every candidate that passed the
/// automatic checks: each call decided (rules, then the LLM check for the rest), the plan
/// rebuilt from the needed calls, arguments traced, and answers that claim more than their
/// calls did asked again once.
fn ground_truth(
    batch: &mut Batch,
    cands: &mut [Candidate],
    sc: &SynthSettings,
    schemas: &BTreeMap<String, Value>,
    about: &BTreeMap<String, String>,
    known: &super::gold::KnownValues,
) -> Result<()> {
    use super::gold::{self, Asked, Review};
    let mut reviews = Vec::new();
    let mut open = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        if c.reasons.is_empty() && c.executed {
            let (r, o) = Review::start(c, about);
            reviews.push((i, r));
            open.extend(o.into_iter().map(|o| (o.key, o.vars)));
        }
    }
    let (role, template) = (sc.judge_role.as_str(), sc.validate.need_template.as_str());
    batch.phase("need checks");
    let checks = batch.run(open, |vars: Value, llm: Item| async move {
        let r = llm.ask(role, &Prompt::new(template, vars), None, &gold::need_answer()).await?;
        Ok(Asked { value: r.value, exchange: r.exchange, event: Some(r.event_id) })
    })?;
    let failed: BTreeMap<String, String> = checks.failed.iter().map(|f| (f.item.clone(), f.reason.clone())).collect();
    let reviewed: Vec<usize> = reviews.iter().map(|(i, _)| *i).collect();
    for (i, r) in reviews {
        r.settle(&mut cands[i], &checks.values, &failed, schemas, known);
    }
    let mut asks = Vec::new();
    let mut claims = BTreeMap::new();
    for (i, c) in cands.iter().enumerate().filter(|(_, c)| c.reasons.is_empty() && c.executed) {
        for (ti, said, vars) in gold::unfaithful(c) {
            let key = gold::answer_key(&c.sample.id, ti + 1);
            claims.insert(key.clone(), (i, ti, said));
            asks.push((key, vars));
        }
    }
    let (role, template) = (sc.assistant_role.as_str(), sc.validate.answer_template.as_str());
    batch.phase("answers again");
    let again = batch.run(asks, |vars: Value, llm: Item| async move {
        let r = llm.ask(role, &Prompt::new(template, vars), None, &gold::again_answer()).await?;
        Ok(Asked { value: r.value, exchange: r.exchange, event: Some(r.event_id) })
    })?;
    for (key, (i, ti, said)) in &claims {
        let got = again.values.get(key).ok_or_else(|| {
            again.failed.iter().find(|f| &f.item == key).map(|f| f.reason.clone()).unwrap_or_else(|| "no answer".into())
        });
        gold::settle_answer(&mut cands[*i], *ti, said, got);
    }
    for i in reviewed {
        cands[i].sample = finish(cands[i].sample.clone());
    }
    Ok(())
}

fn jsonl<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        out.push(serde_json::from_slice(line).map_err(|e| anyhow::anyhow!("`{what}` line {}: {e}", i + 1))?);
    }
    Ok(out)
}

/// Chains sampled per sub-scenario (from `synth chains`' sampling file, when present).
fn sampled_per_sub(inputs: &Inputs) -> Result<BTreeMap<String, usize>> {
    if !inputs.has(&super::chains::SAMPLING) {
        return Ok(BTreeMap::new());
    }
    let subs = inputs.json(&super::chains::SAMPLING)?;
    Ok(subs.into_iter().map(|s| (s.sub_scenario, s.sampled.values().sum())).collect())
}

/// What became of the executed calls, per source: in the reference plan, or left out
/// (repeated, unrequested; by rule or by the LLM check).
fn calls_section(verdicts: &[Verdict]) -> String {
    use super::gold::{By, Decision};
    let mut md = String::from("\n## Reference calls\n\n");
    let mut rows: BTreeMap<Source, [usize; 5]> = BTreeMap::new();
    for v in verdicts {
        for c in &v.calls {
            let r = rows.entry(v.source).or_default();
            r[0] += 1;
            match c.decision {
                Decision::Needed => r[1] += 1,
                Decision::Repeated => r[2] += 1,
                Decision::Unrequested => r[3] += 1,
            }
            if c.by == By::Llm {
                r[4] += 1;
            }
        }
    }
    if rows.is_empty() {
        md.push_str("No executed call was checked.\n");
        return md;
    }
    md.push_str("Only the calls a request needs form the reference plan; the others stay in the recorded trajectory, marked `left_out` with the reason (`verdicts.jsonl` lists every decision).\n\n");
    md.push_str("| source | calls | in the plan | repeated | unrequested | decided by the LLM check |\n|---|---|---|---|---|---|\n");
    for (src, [n, kept, rep, unreq, llm]) in &rows {
        md.push_str(&format!("| {} | {n} | {kept} | {rep} | {unreq} | {llm} |\n", format!("{src:?}").to_lowercase()));
    }
    md
}

fn mean_median(xs: &mut [usize]) -> String {
    if xs.is_empty() {
        return "—".into();
    }
    xs.sort_unstable();
    let mean = xs.iter().sum::<usize>() as f64 / xs.len() as f64;
    let mid = xs.len() / 2;
    let median = if xs.len() % 2 == 1 { xs[mid] as f64 } else { (xs[mid - 1] + xs[mid]) as f64 / 2.0 };
    format!("{mean:.2} / {median}")
}

/// The kind of a rejection reason, for the report's table: where it happened (`turn 1:`,
/// `turn 2 group 1:`, "turn 1 call 2 `x`:") and the values it quotes left out (an
/// argument's value whatever its type, every quoted string), then the text before the first
/// `: ` with numbers dropped. Why: the demo's report grouped every reason of a turn as
/// "turn", an argument made up, a step not needed and a part not done alike.
fn reason_kind(reason: &str) -> String {
    use std::sync::LazyLock;
    static WHERE: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(r"^turn \d+(?: group \d+| call \d+ `[^`]*`)?: ").expect("a valid pattern"));
    static VALUE: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(r"(argument `[^`]*`) = .*? (of call \d+ `)").expect("a valid pattern"));
    static QUOTED: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(r#""(?:[^"\\]|\\.)*""#).expect("a valid pattern"));
    let what = WHERE.replace(reason, "");
    let what = VALUE.replace_all(&what, "$1 = … $2");
    let what = QUOTED.replace_all(&what, "…");
    // At ": ", not ':': a `server::tool` id holds colons of its own.
    let head: String = what.split(": ").next().unwrap_or_default().chars().filter(|c| !c.is_ascii_digit()).collect();
    head.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The report: yield funnel per source and sub-scenario, rejection reasons, Table-1 stats.
pub fn report(
    verdicts: &[Verdict],
    accepted: &[&Candidate],
    sampled: &BTreeMap<String, usize>,
    real_pool: usize,
) -> String {
    let mut md = String::from("# Validation\n\n## Yield funnel\n\n");
    md.push_str(&format!("Real samples: {real_pool} in the benchmark pool.\n\n"));
    md.push_str("| source | sub-scenario | sampled | generated | executed | accepted | yield |\n|---|---|---|---|---|---|---|\n");
    let mut rows: BTreeMap<(Source, String), [usize; 3]> = BTreeMap::new();
    for v in verdicts {
        let r = rows.entry((v.source, v.labels.sub_scenario.clone())).or_default();
        r[0] += 1;
        if v.reached != "generated" {
            r[1] += 1;
        }
        if v.accepted {
            r[2] += 1;
        }
    }
    for ((src, sub), [gen_, exe, acc]) in &rows {
        let samp = match src {
            Source::Chain => sampled.get(sub).copied().unwrap_or(*gen_).to_string(),
            _ => "—".into(),
        };
        let base = if *src == Source::Chain { sampled.get(sub).copied().unwrap_or(*gen_) } else { *gen_ };
        let y = if base == 0 { 0.0 } else { *acc as f64 * 100.0 / base as f64 };
        md.push_str(&format!(
            "| {} | {sub} | {samp} | {gen_} | {exe} | {acc} | {y:.1}% |\n",
            format!("{src:?}").to_lowercase()
        ));
    }
    let mut reasons: BTreeMap<(String, String), usize> = BTreeMap::new();
    for v in verdicts.iter().filter(|v| !v.accepted) {
        for r in &v.reasons {
            *reasons.entry((format!("{:?}", v.source).to_lowercase(), reason_kind(r))).or_default() += 1;
        }
    }
    md.push_str("\n### Rejection reasons\n\n");
    if reasons.is_empty() {
        md.push_str("None.\n");
    } else {
        md.push_str("| source | reason | samples |\n|---|---|---|\n");
        for ((src, r), n) in &reasons {
            md.push_str(&format!("| {src} | {} | {n} |\n", r.replace('|', "\\|")));
        }
        md.push_str("\nEvery rejected sample's full reasons are in `verdicts.jsonl`.\n");
    }
    md.push_str(&calls_section(verdicts));
    md.push_str("\n## Statistics of the accepted samples (Table 1 style)\n\n");
    md.push_str("| type | samples | calls per sample (mean / median) | groups per sample (mean / median) | samples with parallel calls | turns (mean / median) | easy / medium / hard |\n|---|---|---|---|---|---|---|\n");
    let mut by_kind: BTreeMap<Kind, Vec<Labels>> = BTreeMap::new();
    for c in accepted {
        by_kind.entry(c.sample.kind).or_default().push(labels(&c.sample, &c.sub_scenario));
    }
    let all: Vec<Labels> = by_kind.values().flatten().cloned().collect();
    let mut groups: Vec<(String, Vec<Labels>)> =
        by_kind.into_iter().map(|(k, v)| (k.as_str().to_string(), v)).collect();
    groups.push(("all".into(), all));
    for (name, ls) in groups {
        let mut calls: Vec<usize> = ls.iter().map(|l| l.tool_calls).collect();
        let mut gs: Vec<usize> = ls.iter().map(|l| l.groups).collect();
        let mut turns: Vec<usize> = ls.iter().map(|l| l.turns).collect();
        let par = ls.iter().filter(|l| l.parallel_calls > 0).count();
        let d = |x: Difficulty| ls.iter().filter(|l| l.difficulty == x).count();
        md.push_str(&format!(
            "| {name} | {} | {} | {} | {par} | {} | {} / {} / {} |\n",
            ls.len(),
            mean_median(&mut calls),
            mean_median(&mut gs),
            mean_median(&mut turns),
            d(Difficulty::Easy),
            d(Difficulty::Medium),
            d(Difficulty::Hard)
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's rejections (clean run at 96741c6) each get their own kind, not "turn".
    #[test]
    fn a_reason_is_grouped_by_what_went_wrong_not_where() {
        let cases = [
            (
                r#"turn 1: argument `message` = "The on-call person is Anna: mail Anna@company.com." of call 2 `notify_user` comes from nowhere: not in the request"#,
                "argument `message` = … of call `notify_user` comes from nowhere",
            ),
            (
                "turn 1: call 2 `get_incident`, a step of the sampled chain, is not needed by the request: The user's …",
                "call `get_incident`, a step of the sampled chain, is not needed by the request",
            ),
            (
                "turn 1: the answer is not supported by its calls: says `acknowledged` (asked again once: …)",
                "the answer is not supported by its calls",
            ),
            ("turn 2 group 1: `get_incident` did not succeed: timeout", "`get_incident` did not succeed"),
            (
                "turn 2 group 1: `pagerduty-mcp::get_incident` did not succeed: timeout",
                "`pagerduty-mcp::get_incident` did not succeed",
            ),
            (
                "the dialogue has one turn (it ended `no_action`); a multi-turn sample needs two",
                "the dialogue has one turn (it ended `no_action`); a multi-turn sample needs two",
            ),
            ("turn 3 has no final answer", "turn has no final answer"),
            (
                "turn 1 call 2 `get_incident`: the needed-call check gave no usable verdict: timeout",
                "the needed-call check gave no usable verdict",
            ),
            (
                r#"turn 1: argument `filter` = {"status": "open"} of call 1 `search` comes from nowhere: not in the request"#,
                "argument `filter` = … of call `search` comes from nowhere",
            ),
            (
                "turn 2: argument `urgent` = true of call 1 `notify` comes from nowhere: not in the request",
                "argument `urgent` = … of call `notify` comes from nowhere",
            ),
        ];
        for (reason, kind) in cases {
            assert_eq!(reason_kind(reason), kind, "{reason}");
        }
    }
}
