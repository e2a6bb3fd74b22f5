//! `benchgen efs verify`: the LLM judges every candidate pair.
//!
//! Question (after ETOM's verifier): do the two tools reach the same end result
//! with the same scope and depth, whatever their server, API or implementation?
//! The answer is typed: `{equivalent: bool, reason: "<one line>"}`. The tools are
//! shown as Tool A and Tool B in tool-name order (ETOM's order), so a pair's
//! prompt never depends on the catalog's order.
//!
//! Resumable per pair: each verdict is checkpointed as it arrives, and the LLM
//! exchange is in the ledger (which also answers repeated requests), so a killed
//! run repeats no verdict. Every verdict becomes a `verdict` ledger event whose
//! parent is the exchange. A pair whose answer stays invalid fails the stage
//! after all other pairs are done (a rerun retries only those).
//!
//! Output `artifacts/efs-verify/verdicts.json`: `[{a, b, equivalent, reason,
//! exchange}]` sorted by `(a, b)`; `exchange` is the request hash of the LLM
//! exchange (stable across reruns, unlike event ids; the ledger resolves it).

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::pairs::Pair;
use crate::embed::described_parameters;
use crate::ledger::{NewEvent, Parent, kind};
use crate::llm::{LlmClient, Prompt};
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
    writes: &["verdicts.json"],
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
        let mut checkpoint = ctx.checkpoint()?;
        let resumed = pairs.iter().filter(|p| checkpoint.get(&p.key()).is_some()).count();
        let todo: Vec<&Pair> = pairs.iter().filter(|p| checkpoint.get(&p.key()).is_none()).collect();
        let run_id = ctx.ledger_run()?;
        let pb = ctx.printer.progress(pairs.len() as u64, "verify");
        pb.inc(resumed as u64);

        let ledger = crate::ledger::Ledger::open(&s.artifacts)?;
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let mut failures: Vec<String> = Vec::new();
        let client = rt.block_on(async {
            let client = LlmClient::from_settings(s, SPEC.name, run_id).await?;
            let sem = Arc::new(tokio::sync::Semaphore::new(v.concurrency.max(1)));
            let mut set = tokio::task::JoinSet::new();
            for p in todo {
                let (sa, ta) = *tools.get(p.a.as_str()).with_context(|| format!("pair tool `{}` is not in the catalog", p.a))?;
                let (sb, tb) = *tools.get(p.b.as_str()).with_context(|| format!("pair tool `{}` is not in the catalog", p.b))?;
                // ETOM orders the two tools by tool name; ties by id.
                let (x, y) = if (&ta.name, &ta.id) <= (&tb.name, &tb.id) {
                    (tool_vars(sa, ta), tool_vars(sb, tb))
                } else {
                    (tool_vars(sb, tb), tool_vars(sa, ta))
                };
                let prompt = Prompt::new(&v.template, json!({"tool_a": x, "tool_b": y}));
                let (client, role, sem, key) = (client.clone(), v.role.clone(), sem.clone(), p.key());
                set.spawn(async move {
                    let _permit = sem.acquire_owned().await;
                    let r = client.typed::<PairJudgement>(&role, &prompt, &key).await;
                    (key, r)
                });
            }
            while let Some(joined) = set.join_next().await {
                let (key, r) = joined.context("a verification task panicked")?;
                match r {
                    Ok(reply) => {
                        checkpoint.put(
                            &key,
                            json!({"equivalent": reply.value.equivalent, "reason": one_line(&reply.value.reason), "exchange": super::exchange_hash(&ledger, reply.event_id)?}),
                        )?;
                        crate::store::fail_point("efs_verify_pair")?;
                        pb.inc(1);
                    }
                    Err(e) if e.is_item_level() => failures.push(format!("{e}")),
                    Err(e) => {
                        set.abort_all();
                        return Err(anyhow::Error::new(e).context("stopping: the LLM is unusable for every pair"));
                    }
                }
            }
            anyhow::Ok(client)
        })?;
        pb.finish_and_clear();
        client.add_counts(out);
        if !failures.is_empty() {
            anyhow::bail!(
                "{} of {} pairs got no valid verdict (the {} verdicts so far are kept; a rerun retries only these):\n  {}",
                failures.len(),
                pairs.len(),
                checkpoint.len(),
                failures.join("\n  ")
            );
        }

        let mut verdicts = Vec::with_capacity(pairs.len());
        for p in &pairs {
            let c = checkpoint.get(&p.key()).context("internal: a pair has no verdict")?;
            let verdict: VerdictRecord =
                serde_json::from_value(c.clone()).context("a checkpointed verdict is not valid")?;
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
            if let Some(id) = super::exchange_event(&ledger, &vd.exchange)? {
                ev = ev.with_parent(Parent::Id(id));
            }
            out.event(ev);
        }
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

#[derive(Deserialize)]
struct VerdictRecord {
    equivalent: bool,
    reason: String,
    exchange: String,
}

/// The reason on one line (models sometimes add line breaks).
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
