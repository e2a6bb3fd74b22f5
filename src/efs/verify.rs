//! `benchgen efs verify`: the LLM judges every candidate pair.
//!
//! Question (after ETOM's verifier): do the two tools reach the same end result
//! with the same scope and depth, whatever their server, API or implementation?
//! The answer is typed: `{equivalent: bool, reason: "<one line>"}`. The tools are
//! shown as Tool A and Tool B in tool-name order (ETOM's order), so a pair's
//! prompt never depends on the catalog's order.
//!
//! The fan-out is [`crate::llm::batch`]: resumable per pair (each verdict is
//! checkpointed as it arrives, with its LLM counts, so a killed run repeats no
//! verdict and the resumed run's counts equal an uninterrupted run's). Every verdict
//! becomes a `verdict` ledger event whose parent is the exchange. A pair whose
//! answer stays invalid fails the stage after all other pairs are done (a rerun
//! retries only those), unless `[efs.verify] max_failed_share` allows it: then the
//! pair is left out and listed in `failed.json`.
//!
//! Output `artifacts/efs-verify/verdicts.json`: `[{a, b, equivalent, reason,
//! exchange}]` sorted by `(a, b)`; `exchange` is the request hash of the LLM
//! exchange (stable across reruns, unlike event ids; the ledger resolves it).

use std::collections::HashMap;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::pairs::Pair;
use crate::embed::described_parameters;
use crate::ledger::{NewEvent, Parent, kind};
use crate::llm::Prompt;
use crate::llm::batch::{Batch, BatchOptions, Item};
use crate::model::{Catalog, Server, Tool};
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

/// One verdict (`verdicts.json` is a list of these, sorted by `(a, b)`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub a: String,
    pub b: String,
    pub equivalent: bool,
    pub reason: String,
    /// Request hash of the LLM exchange that gave the verdict (see [`super::exchange_hash`]).
    pub exchange: String,
}

/// Every pair's verdict.
pub const VERDICTS: Artifact<Vec<Verdict>> = Artifact::new("efs-verify", "verdicts.json");

pub static SPEC: StageSpec = StageSpec {
    name: "efs-verify",
    command: "efs verify",
    version: 1,
    about: "the LLM judges each candidate pair: equivalent or not, with a reason",
    reads: &[crate::filter::CATALOG.read(), super::pairs::PAIRS.read()],
    writes: &["verdicts.json", crate::llm::batch::FAILED_FILE],
};

/// The verifier's typed answer.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairJudgement {
    /// True when both tools reach the same end result with the same scope and depth.
    pub equivalent: bool,
    /// One line saying why.
    pub reason: String,
}

/// Prompt variables describing one tool.
pub fn tool_vars(server: &Server, tool: &Tool) -> serde_json::Value {
    let params: Vec<serde_json::Value> = described_parameters(&tool.input_schema)
        .into_iter()
        .map(|(n, d)| json!({"name": n, "description": d}))
        .collect();
    json!({
        "id": tool.id,
        "name": tool.name,
        "server": server.name,
        "description": tool.description,
        "parameters": params,
    })
}

pub struct VerifyStage;

impl Stage for VerifyStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }

    fn enabled(&self, settings: &Settings) -> bool {
        settings.config.efs.is_some()
    }

    fn roles(&self, settings: &Settings) -> Vec<ConfigRef> {
        vec![ConfigRef::new("efs.verify.role", &super::efs_settings(settings).verify.role)]
    }

    fn prompts(&self, settings: &Settings) -> Vec<PromptRef> {
        let tool = json!({"id": "s::t", "name": "t", "server": "s", "description": "d",
            "parameters": [{"name": "p", "description": "d"}]});
        let v = &super::efs_settings(settings).verify;
        vec![PromptRef::new("efs.verify.template", &v.template, json!({"tool_a": tool, "tool_b": tool}))]
    }

    fn check(&self, settings: &Settings, problems: &mut Vec<crate::error::Problem>) {
        crate::settings::check_positive(
            problems,
            "efs.verify.concurrency",
            super::efs_settings(settings).verify.concurrency,
        );
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        let v = &super::efs_settings(settings).verify;
        Ok(Plan { inputs: vec![], config_hash: section_hash(&json!({"verify": v}))? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let v = &super::efs_settings(s).verify;
        let catalog: Catalog = inputs.json(&crate::filter::CATALOG)?;
        let pairs = super::pairs::read_pairs(inputs)?;
        let tools: HashMap<&str, (&Server, &Tool)> = catalog.tools().map(|(sv, t)| (t.id.as_str(), (sv, t))).collect();
        let items = pairs.iter().map(|p| Ok((p.key(), pair_prompt(&tools, &v.template, p)?))).collect::<Result<_>>()?;

        let opts = BatchOptions::new(SPEC.name, "verify", "pairs")
            .concurrency(v.concurrency.max(1))
            .max_failed_share(v.max_failed_share, "efs.verify.max_failed_share")
            .fail_point("efs_verify_pair");
        let mut batch = Batch::new(ctx, opts)?;
        let role = v.role.as_str();
        let done = batch.run(items, |prompt: Prompt, llm: Item| async move {
            let reply = llm.typed::<PairJudgement>(role, &prompt).await?;
            Ok(VerdictRecord {
                equivalent: reply.value.equivalent,
                reason: one_line(&reply.value.reason),
                exchange: reply.exchange,
            })
        })?;
        let resumed = done.resumed;

        let mut verdicts = Vec::with_capacity(pairs.len());
        for p in &pairs {
            // Pairs that failed within `max_failed_share` have no verdict (see failed.json).
            let Some(verdict) = done.values.get(&p.key()) else { continue };
            let verdict = verdict.clone();
            verdicts.push(Verdict {
                a: p.a.clone(),
                b: p.b.clone(),
                equivalent: verdict.equivalent,
                reason: verdict.reason,
                exchange: verdict.exchange,
            });
        }
        verdicts.sort_by(|x, y| (&x.a, &x.b).cmp(&(&y.a, &y.b)));
        for vd in &verdicts {
            let mut ev = NewEvent::new(
                kind::VERDICT,
                Some(&super::pairs::pair_key(&vd.a, &vd.b)),
                json!({"check": "efs-pair", "a": vd.a, "b": vd.b, "equivalent": vd.equivalent, "reason": vd.reason, "exchange": vd.exchange}),
            );
            if let Some(id) = batch.exchange_event(&vd.exchange)? {
                ev = ev.with_parent(Parent::Id(id));
            }
            out.event(ev);
        }
        batch.finish(out)?;
        let yes = verdicts.iter().filter(|x| x.equivalent).count();
        out.json(VERDICTS.file, &verdicts)?;
        out.count("pairs", verdicts.len());
        out.count("equivalent", yes);
        out.notes.push(format!(
            "{} pairs judged: {yes} equivalent, {} not ({resumed} resumed from an interrupted run)",
            verdicts.len(),
            verdicts.len() - yes
        ));
        Ok(())
    }
}

/// One pair's checkpointed verdict.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct VerdictRecord {
    equivalent: bool,
    reason: String,
    exchange: String,
}

/// The prompt for one pair. ETOM orders the two tools by tool name; ties by id.
fn pair_prompt(tools: &HashMap<&str, (&Server, &Tool)>, template: &str, p: &Pair) -> Result<Prompt> {
    let (sa, ta) = *tools.get(p.a.as_str()).with_context(|| format!("pair tool `{}` is not in the catalog", p.a))?;
    let (sb, tb) = *tools.get(p.b.as_str()).with_context(|| format!("pair tool `{}` is not in the catalog", p.b))?;
    let (x, y) = if (&ta.name, &ta.id) <= (&tb.name, &tb.id) {
        (tool_vars(sa, ta), tool_vars(sb, tb))
    } else {
        (tool_vars(sb, tb), tool_vars(sa, ta))
    };
    Ok(Prompt::new(template, json!({"tool_a": x, "tool_b": y})))
}

/// The reason on one line (models sometimes add line breaks).
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
