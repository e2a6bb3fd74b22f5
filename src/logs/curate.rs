//! `benchgen logs curate` (stage `logs-curate`): FinMCP's three retention criteria,
//! each decision with its reason in the ledger (`benchgen explain log:<id>`).
//!
//! 1. **Resolved through tool calls** (rule, checked first, no LLM): at least one call,
//!    and every failing call (an error result or arguments that are not JSON) is followed,
//!    later in the same turn, by a successful call of the same tool.
//! 2. **Genuine need of the domain** (LLM judge, typed [`NeedVerdict`]).
//! 3. **Satisfactory answer**: the logs' feedback field when present; otherwise no final
//!    answer fails, and an answer is judged by the LLM (typed [`AnswerVerdict`]).
//!
//! A session failing a criterion is dropped without asking the later ones. Scenario
//! labels: the logs' own, or (`scenarios = "llm"`) one label from `taxonomy` picked by
//! the LLM ([`LabelPick`]) for sessions without one (all with `relabel`).
//!
//! Each LLM item is "prompt + typed answer + record": `*_prompt` builds the prompt,
//! the typed struct is the answer, [`Decision`] records it; decisions are checkpointed
//! per session, so a killed run repeats no judgement.
//!
//! Outputs: `curated.jsonl` (kept sessions, scenario set), `decisions.jsonl`
//! (`{id, keep, dropped_by?, resolved, need?, answer?, scenario}` in input order), `report.json`.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{CurateSettings, ScenarioSource, Session};
use crate::ledger::{NewEvent, Parent};
use crate::llm::Prompt;
use crate::llm::batch::{Batch, BatchOptions, Item};
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "logs-curate";

/// Kept sessions (one JSON [`Session`] a line), read by `logs split`.
pub const CURATED: Artifact<Session> = Artifact::new(STAGE, "curated.jsonl");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "logs curate",
    version: 3,
    about: "keeps sessions resolved through tools, with a genuine need and a satisfactory answer (LLM judge)",
    reads: &[super::import::SESSIONS.read()],
    writes: &["curated.jsonl", "decisions.jsonl", "report.json", crate::llm::batch::FAILED_FILE],
    section: Some("logs"),
};

/// Does the query reflect a genuine need of the domain?
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NeedVerdict {
    /// True when a real user of this domain could plausibly ask this and needs the tools for it.
    pub genuine: bool,
    /// One line saying why.
    pub reason: String,
}

/// Is the final answer satisfactory?
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AnswerVerdict {
    /// True when the answer addresses the request using the tool results.
    pub satisfactory: bool,
    /// One line saying why.
    pub reason: String,
}

/// A scenario label from the configured taxonomy.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LabelPick {
    /// Exactly one label of the list.
    pub scenario: String,
}

/// The label judge's answer: one label of `taxonomy` (`enum`; an answer outside it is
/// re-asked, where it used to be ignored after the call).
pub(crate) fn label_answer(taxonomy: &[String]) -> crate::llm::Answer<LabelPick> {
    let mut a = crate::llm::Answer::<LabelPick>::of();
    if !taxonomy.is_empty() {
        // An empty `enum` is not a valid schema; `check` refuses an empty taxonomy anyway.
        a.schema["properties"]["scenario"]["enum"] = json!(taxonomy);
    }
    let taxonomy = taxonomy.to_vec();
    a.check(move |p| {
        if taxonomy.iter().any(|t| *t == p.scenario.trim()) {
            Ok(())
        } else {
            Err(format!("`scenario` \"{}\" is not one of the labels: {}", p.scenario, taxonomy.join(", ")))
        }
    })
}

/// One criterion's outcome.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Criterion {
    pub ok: bool,
    pub reason: String,
    /// `rule`, `feedback` or `llm`.
    pub by: String,
}

/// The recorded decision of one session.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Decision {
    pub id: String,
    pub keep: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_by: Option<String>,
    pub resolved: Criterion,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub need: Option<Criterion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Criterion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
}

/// A decision with the request hashes of the LLM exchanges behind it (the
/// checkpointed value; the hashes become event parents, not artifact fields).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Judged {
    pub decision: Decision,
    #[serde(default)]
    pub exchanges: Vec<String>,
}

/// The decision of a session whose LLM judgement failed (within `max_failed_share`).
fn llm_failed(s: &Session, reason: &str) -> Judged {
    let decision = Decision {
        id: s.id.clone(),
        keep: false,
        dropped_by: Some("llm-failed".into()),
        resolved: resolved(s),
        need: Some(Criterion { ok: false, reason: one_line(reason), by: "llm".into() }),
        answer: None,
        scenario: s.scenario.clone(),
    };
    Judged { decision, exchanges: Vec::new() }
}

/// Criterion 1 (rule).
pub fn resolved(s: &Session) -> Criterion {
    let rule = |ok, reason: String| Criterion { ok, reason, by: "rule".into() };
    if s.call_count() == 0 {
        return rule(false, "no tool call: the request was not resolved through tools".into());
    }
    for (ti, t) in s.turns.iter().enumerate() {
        let calls: Vec<&super::Call> = t.groups.iter().flatten().collect();
        for (i, c) in calls.iter().enumerate() {
            let failed =
                |c: &super::Call| c.error.is_some() || c.flags.iter().any(|f| f.code == super::flag::BAD_ARGUMENTS);
            if failed(c) && !calls[i + 1..].iter().any(|d| d.tool == c.tool && !failed(d)) {
                let why = if c.error.is_some() { "failed" } else { "had arguments that are not JSON" };
                return rule(false, format!("turn {}: the call of `{}` {why} and was never repaired", ti + 1, c.tool));
            }
        }
    }
    rule(true, format!("{} call(s), no failing call left unrepaired", s.call_count()))
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
}

fn requests(s: &Session) -> Vec<String> {
    s.turns.iter().map(|t| clip(&t.user, 600)).filter(|u| !u.trim().is_empty()).collect()
}

fn tools_used(s: &Session) -> Vec<String> {
    let mut v: Vec<String> = s.calls().map(|c| c.tool.clone()).collect();
    v.dedup();
    v
}

pub fn need_prompt(c: &CurateSettings, s: &Session) -> Prompt {
    Prompt::new(&c.need_template, json!({"domain": c.domain, "requests": requests(s), "tools": tools_used(s)}))
}

pub fn answer_prompt(c: &CurateSettings, s: &Session) -> Prompt {
    let answer = s.turns.iter().rev().find_map(|t| t.answer.clone()).unwrap_or_default();
    Prompt::new(
        &c.answer_template,
        json!({"domain": c.domain, "requests": requests(s), "tools": tools_used(s), "answer": clip(&answer, 1200)}),
    )
}

pub fn label_prompt(c: &CurateSettings, s: &Session) -> Prompt {
    Prompt::new(
        &c.label_template,
        json!({"domain": c.domain, "requests": requests(s), "tools": tools_used(s), "taxonomy": c.taxonomy}),
    )
}

/// Judge one session (criteria in order, stopping at the first failure).
/// `sampled = false`: the LLM criteria pass unjudged (see `llm_sample`).
pub async fn judge(llm: &Item, c: &CurateSettings, s: &Session, sampled: bool) -> Result<Judged, crate::llm::LlmError> {
    let mut exchanges = Vec::new();
    let mut d = Decision {
        id: s.id.clone(),
        keep: false,
        dropped_by: None,
        resolved: resolved(s),
        need: None,
        answer: None,
        scenario: s.scenario.clone(),
    };
    if !d.resolved.ok {
        d.dropped_by = Some("resolved".into());
        return Ok(Judged { decision: d, exchanges });
    }
    let unjudged = || Criterion {
        ok: true,
        reason: format!("not judged: outside the LLM sample (llm_sample = {})", c.llm_sample.unwrap_or(0)),
        by: "unjudged".into(),
    };
    if sampled {
        let r = llm.typed_as::<NeedVerdict>(&c.judge_role, &need_prompt(c, s), "need").await?;
        exchanges.push(r.exchange);
        d.need = Some(Criterion { ok: r.value.genuine, reason: one_line(&r.value.reason), by: "llm".into() });
    } else {
        d.need = Some(unjudged());
    }
    if !d.need.as_ref().is_some_and(|n| n.ok) {
        d.dropped_by = Some("need".into());
        return Ok(Judged { decision: d, exchanges });
    }
    let answer = s.turns.iter().rev().find_map(|t| t.answer.as_ref()).filter(|a| !a.trim().is_empty());
    d.answer = Some(match (s.feedback, answer) {
        (Some(f), _) => Criterion {
            ok: f,
            reason: if f { "the user's feedback was positive" } else { "the user's feedback was negative" }.into(),
            by: "feedback".into(),
        },
        (None, None) => Criterion { ok: false, reason: "no final answer".into(), by: "rule".into() },
        (None, Some(_)) if !sampled => unjudged(),
        (None, Some(_)) => {
            let r = llm.typed_as::<AnswerVerdict>(&c.judge_role, &answer_prompt(c, s), "answer").await?;
            exchanges.push(r.exchange);
            Criterion { ok: r.value.satisfactory, reason: one_line(&r.value.reason), by: "llm".into() }
        }
    });
    if !d.answer.as_ref().is_some_and(|a| a.ok) {
        d.dropped_by = Some("answer".into());
        return Ok(Judged { decision: d, exchanges });
    }
    if sampled && c.scenarios == ScenarioSource::Llm && (s.scenario.is_none() || c.relabel) {
        let r = llm.ask(&c.judge_role, &label_prompt(c, s), Some("label"), &label_answer(&c.taxonomy)).await?;
        exchanges.push(r.exchange);
        let pick = r.value.scenario.trim().to_string();
        // The answer is one of the taxonomy (schema `enum` and check); kept as a guard.
        if c.taxonomy.contains(&pick) {
            d.scenario = Some(pick);
        }
    }
    d.keep = true;
    Ok(Judged { decision: d, exchanges })
}

/// The sessions the LLM judges: all, or a seeded sample of `llm_sample` among those
/// passing the rule.
pub fn sample(sessions: &[Session], c: &CurateSettings, seed: u64) -> std::collections::HashSet<String> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut ids: Vec<&str> = sessions.iter().filter(|s| resolved(s).ok).map(|s| s.id.as_str()).collect();
    if let Some(n) = c.llm_sample {
        ids.sort();
        ids.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x6375_7261_7465));
        ids.truncate(n);
    }
    ids.into_iter().map(str::to_string).collect()
}

pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub struct CurateStage;

impl Stage for CurateStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Keep sessions that reflect a genuine need, were resolved through tool calls and
         got a satisfactory answer (LLM judge with `[logs.curate]`; each decision in the
         ledger, see `benchgen explain log:<id>`).

         Reads `logs-import/sessions.jsonl`. Writes `artifacts/logs-curate/`:
         `curated.jsonl` (kept sessions), `decisions.jsonl` (one decision per session),
         `report.json`, `failed.json` (judgements that failed, with their reasons). Resumable
         per session; a session whose answers stay invalid
         fails the stage after the others are done (a rerun asks only for it)."
    }

    /// The log family's events (curation decisions).
    fn describe_event(&self, kind: &str, payload: &Value) -> Option<String> {
        (kind == super::kind::DECISION).then(|| describe(payload))
    }

    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        vec![ConfigRef::new("logs.curate.judge_role", &super::import::settings(s).curate.judge_role)]
    }

    fn prompts(&self, s: &Settings) -> Vec<PromptRef> {
        let c = super::import::settings(s).curate;
        let base = json!({"domain": "d", "requests": ["r"], "tools": ["t"]});
        let mut answer = base.clone();
        answer["answer"] = json!("a");
        let mut label = base.clone();
        label["taxonomy"] = json!(["x"]);
        let mut v = vec![
            PromptRef::new("logs.curate.need_template", &c.need_template, base),
            PromptRef::new("logs.curate.answer_template", &c.answer_template, answer),
        ];
        if c.scenarios == ScenarioSource::Llm {
            v.push(PromptRef::new("logs.curate.label_template", &c.label_template, label));
        }
        v
    }

    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        let c = super::import::settings(s).curate;
        crate::settings::check_positive(problems, "logs.curate.concurrency", c.concurrency);
        if c.scenarios == ScenarioSource::Llm && c.taxonomy.is_empty() {
            problems.push(crate::error::Problem::new(
                "logs.curate.taxonomy",
                "is empty, but `scenarios = \"llm\"` picks labels from it",
            ));
        }
    }

    fn plan(&self, s: &Settings) -> Result<Plan> {
        let c = super::import::settings(s).curate;
        Ok(Plan { inputs: vec![], config_hash: section_hash(&json!({"curate": c}))? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let c = super::import::settings(s).curate;
        let sessions = super::read_sessions(inputs.open_of(&super::import::SESSIONS)?, "logs-import/sessions.jsonl")?;
        let sampled = sample(&sessions, &c, s.project.seed);
        let items: Vec<(String, (Session, bool))> =
            sessions.iter().map(|x| (x.id.clone(), (x.clone(), sampled.contains(&x.id)))).collect();
        let opts = BatchOptions::new(STAGE, "curate", "sessions")
            .concurrency(c.concurrency.max(1))
            .max_failed_share(c.max_failed_share, "logs.curate.max_failed_share")
            .fail_point("logs_curate_session");
        let mut batch = Batch::new(ctx, opts)?;
        let cref = &c;
        let done = batch.run(items, |(sess, in_sample): (Session, bool), llm: Item| async move {
            Ok(judge(&llm, cref, &sess, in_sample).await?)
        })?;
        let resumed = done.resumed;
        // Each decision's first parent: the session's import record (its `file:line`).
        let imported = crate::ledger::Ledger::ids_by_subject_in(
            &s.artifacts,
            super::kind::SESSION,
            ctx.manifest_of(super::import::STAGE).map(|m| m.run_id),
        )?;
        let mut kept = Vec::new();
        let mut decisions = Vec::new();
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        let failed: BTreeMap<&str, &str> = done.failed.iter().map(|f| (f.item.as_str(), f.reason.as_str())).collect();
        for sess in &sessions {
            // A session whose judgement failed within `max_failed_share` is dropped, never lost.
            let j = match (done.values.get(&sess.id), failed.get(sess.id.as_str())) {
                (Some(j), _) => j.clone(),
                (None, Some(reason)) => llm_failed(sess, reason),
                (None, None) => anyhow::bail!("internal: session {} has no decision", sess.id),
            };
            let d = j.decision.clone();
            let mut ev =
                NewEvent::new(super::kind::DECISION, Some(&super::subject(&sess.id)), serde_json::to_value(&d)?);
            if let Some(id) = imported.get(&super::subject(&sess.id)).and_then(|i| i.last()) {
                ev = ev.with_parent(Parent::Id(*id));
            }
            for x in &j.exchanges {
                if let Some(id) = batch.exchange_event(x)? {
                    ev = ev.with_parent(Parent::Id(id));
                }
            }
            out.event(ev);
            *by.entry(d.dropped_by.clone().unwrap_or_else(|| "kept".into())).or_default() += 1;
            if d.keep {
                let mut k = sess.clone();
                k.scenario = d.scenario.clone();
                kept.push(k);
            }
            decisions.push(d);
        }
        let mut dec_bytes = Vec::new();
        for d in &decisions {
            serde_json::to_writer(&mut dec_bytes, d)?;
            dec_bytes.push(b'\n');
        }
        batch.finish(out)?;
        let mut w = out.create("curated.jsonl")?;
        super::write_sessions(&mut w, &kept)?;
        w.finish()?;
        out.file("decisions.jsonl", dec_bytes);
        let report = json!({"sessions": sessions.len(), "kept": kept.len(), "outcome": by});
        out.json("report.json", &report)?;
        out.count("sessions", sessions.len());
        out.count("kept", kept.len());
        for (k, v) in &by {
            if k != "kept" {
                out.count(&format!("dropped_{k}"), *v);
            }
        }
        let drops: Vec<String> =
            by.iter().filter(|(k, _)| *k != "kept").map(|(k, v)| format!("{v} by `{k}`")).collect();
        out.notes.push(format!(
            "{} of {} sessions kept; dropped: {} ({resumed} decisions resumed)",
            kept.len(),
            sessions.len(),
            if drops.is_empty() { "none".into() } else { drops.join(", ") }
        ));
        Ok(())
    }
}

/// The decision of a session as recorded (for `explain log:<id>`).
pub fn describe(p: &Value) -> String {
    let keep = p["keep"].as_bool().unwrap_or(false);
    let mut parts = Vec::new();
    for k in ["resolved", "need", "answer"] {
        if let Some(c) = p.get(k).filter(|c| c.is_object()) {
            parts.push(format!(
                "{k}: {} by {} ({})",
                if c["ok"].as_bool().unwrap_or(false) { "yes" } else { "no" },
                c["by"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("")
            ));
        }
    }
    format!("{}; {}", if keep { "kept" } else { "dropped" }, parts.join("; "))
}
