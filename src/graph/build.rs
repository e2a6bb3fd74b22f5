//! `benchgen graph build` (stage `graph-build`): candidate edges from the multi-tool
//! sessions of `logs split`, each validated by the LLM ([`EdgeVerdict`]: does `to`
//! depend on `from`?), checkpointed per candidate so a killed run repeats no verdict.
//!
//! Outputs under `artifacts/graph-build/`: `candidates.json` (every candidate with its
//! support, value flow, verdict and reason), the accepted graph as `graph.json`,
//! `graph.dot`, `graph.svg` and `report.md` (see [`super::render`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::render::{self, ToolInfo};
use super::{Candidate, Edge, GraphSettings, Judged};
use crate::ledger::{NewEvent, Parent, kind};
use crate::llm::{LlmClient, Prompt, prompt_path, role_hash};
use crate::logs::Session;
use crate::logs::import::LogTool;
use crate::settings::{Settings, section_hash};
use crate::stage::{Ctx, Inputs, Output, Plan, Stage};

pub const STAGE: &str = "graph-build";

/// The validator's typed answer.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EdgeVerdict {
    /// True when the second tool typically needs an output of the first one.
    pub dependent: bool,
    /// One line saying why.
    pub reason: String,
}

pub fn settings(s: &Settings) -> GraphSettings {
    s.config.graph.clone().unwrap_or_default()
}

/// The prompt for one candidate.
pub fn edge_prompt(g: &GraphSettings, c: &Candidate, tools: &BTreeMap<String, LogTool>) -> Prompt {
    let info = |t: &str| {
        let d = tools.get(t).map(|x| x.description.clone()).unwrap_or_default();
        let params: Vec<String> = tools
            .get(t)
            .and_then(|x| x.input_schema.get("properties"))
            .and_then(|p| p.as_object())
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        json!({"name": t, "description": d, "parameters": params})
    };
    Prompt::new(
        &g.template,
        json!({
            "from": info(&c.from),
            "to": info(&c.to),
            "sessions": c.support.sessions.len(),
            "count": c.support.count,
            "value_flow": c.value_flow.iter().map(|f| f.argument.clone()).collect::<BTreeSet<_>>(),
        }),
    )
}

/// Tools of the graph source set with description and sub-scenarios.
pub fn tool_info(sessions: &[Session], catalog: &BTreeMap<String, LogTool>) -> ToolInfo {
    let mut subs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sessions {
        for c in s.calls() {
            subs.entry(c.tool.clone()).or_default().insert(s.sub_scenario());
        }
    }
    subs.into_iter()
        .map(|(t, ss)| {
            let d = catalog.get(&t).map(|x| x.description.clone()).unwrap_or_default();
            (t, (d, ss.into_iter().collect()))
        })
        .collect()
}

pub struct BuildStage;

impl Stage for BuildStage {
    fn name(&self) -> &'static str {
        STAGE
    }
    fn command(&self) -> &'static str {
        "graph build"
    }
    fn version(&self) -> u32 {
        1
    }
    fn upstream(&self) -> &'static [&'static str] {
        &[crate::logs::split::STAGE, crate::logs::import::STAGE]
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        let g = settings(s);
        Ok(Plan {
            inputs: vec![
                crate::logs::split::path(s, "graph_source.jsonl"),
                crate::logs::import::path(s, "catalog.json"),
            ],
            prompts: vec![prompt_path(s, &g.template)],
            config_hash: section_hash(&json!({"graph": g, "role": role_hash(s, &g.role)?}))?,
        })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let g = settings(s);
        let sessions = crate::logs::parse_sessions(
            inputs.bytes(&crate::logs::split::path(s, "graph_source.jsonl"))?,
            "logs-split/graph_source.jsonl",
        )?;
        let catalog: Vec<LogTool> =
            serde_json::from_slice(inputs.bytes(&crate::logs::import::path(s, "catalog.json"))?)
                .context("logs-import/catalog.json is not valid")?;
        let tools: BTreeMap<String, LogTool> = catalog.into_iter().map(|t| (t.name.clone(), t)).collect();
        let cands = super::candidates(&sessions);
        let asked: Vec<&Candidate> = cands.iter().filter(|c| c.support.sessions.len() >= g.min_support).collect();
        let mut checkpoint = ctx.checkpoint()?;
        let todo: Vec<&Candidate> = asked.iter().copied().filter(|c| checkpoint.get(&c.key()).is_none()).collect();
        let resumed = asked.len() - todo.len();
        let run_id = ctx.ledger_run()?;
        let pb = ctx.printer.progress(asked.len() as u64, "edges");
        pb.inc(resumed as u64);
        let mut failures = Vec::new();
        if !todo.is_empty() {
            let ledger = crate::ledger::Ledger::open(&s.artifacts)?;
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            let client = rt.block_on(async {
                let client = LlmClient::from_settings(s, STAGE, run_id).await?;
                let sem = Arc::new(tokio::sync::Semaphore::new(g.concurrency.max(1)));
                let mut set = tokio::task::JoinSet::new();
                for c in todo {
                    let prompt = edge_prompt(&g, c, &tools);
                    let (client, role, sem, key) = (client.clone(), g.role.clone(), sem.clone(), c.key());
                    set.spawn(async move {
                        let _p = sem.acquire_owned().await;
                        let r = client.typed::<EdgeVerdict>(&role, &prompt, &key).await;
                        (key, r)
                    });
                }
                while let Some(j) = set.join_next().await {
                    let (key, r) = j.context("an edge task panicked")?;
                    match r {
                        Ok(reply) => {
                            checkpoint.put(
                                &key,
                                json!({"dependent": reply.value.dependent, "reason": crate::logs::curate::one_line(&reply.value.reason),
                                       "exchange": crate::efs::exchange_hash(&ledger, reply.event_id)?}),
                            )?;
                            crate::store::fail_point("graph_build_edge")?;
                            pb.inc(1);
                        }
                        Err(e) if e.is_item_level() => failures.push(format!("{e}")),
                        Err(e) => {
                            set.abort_all();
                            return Err(anyhow::Error::new(e).context("stopping: the LLM is unusable for every candidate"));
                        }
                    }
                }
                anyhow::Ok(client)
            })?;
            client.add_counts(out);
        }
        pb.finish_and_clear();
        if !failures.is_empty() {
            anyhow::bail!(
                "{} of {} candidate edges got no valid verdict (the {} verdicts so far are kept; a rerun retries only these):\n  {}",
                failures.len(),
                asked.len(),
                checkpoint.len(),
                failures.join("\n  ")
            );
        }
        let ledger = crate::ledger::Ledger::open(&s.artifacts)?;
        let mut judged = Vec::new();
        let mut edges = Vec::new();
        for c in &cands {
            let (accepted, reason, exchange) = match checkpoint.get(&c.key()) {
                Some(v) => (
                    v["dependent"].as_bool().unwrap_or(false),
                    v["reason"].as_str().unwrap_or("").to_string(),
                    v["exchange"].as_str().unwrap_or("").to_string(),
                ),
                None => (
                    false,
                    format!("support {} below min_support {}", c.support.sessions.len(), g.min_support),
                    String::new(),
                ),
            };
            let mut ev = NewEvent::new(
                kind::VERDICT,
                Some(&format!("edge:{}", c.key())),
                json!({"check": "graph-edge", "from": c.from, "to": c.to, "accepted": accepted, "reason": reason, "sessions": c.support.sessions.len(), "exchange": exchange}),
            );
            if let Some(id) = crate::efs::exchange_event(&ledger, &exchange)? {
                ev = ev.with_parent(Parent::Id(id));
            }
            out.event(ev);
            if accepted {
                edges.push(Edge {
                    from: c.from.clone(),
                    to: c.to.clone(),
                    support: c.support.clone(),
                    value_flow: c.value_flow.clone(),
                    verdict: "accepted".into(),
                    reason: reason.clone(),
                    exchange: exchange.clone(),
                });
            }
            judged.push(Judged { candidate: c.clone(), accepted, reason, exchange });
        }
        out.json("candidates.json", &judged)?;
        let doc = render::doc(&tool_info(&sessions, &tools), edges);
        let extra = vec![format!(
            "\n{} candidate edges from {} multi-tool sessions; {} asked (min_support {}), {} accepted.",
            cands.len(),
            sessions.len(),
            asked.len(),
            g.min_support,
            doc.edges.len()
        )];
        let st = render::write_all(out, &doc, "Tool dependency graph (LLM-validated)", &extra)?;
        out.count("candidates", cands.len());
        out.notes.push(format!(
            "{} candidates, {} accepted; graph of {} tools, {} edges, density {} ({resumed} verdicts resumed)",
            cands.len(),
            doc.edges.len(),
            st.nodes,
            st.edges,
            st.density
        ));
        Ok(())
    }
}

pub fn path(s: &Settings, file: &str) -> std::path::PathBuf {
    s.artifacts.join(STAGE).join(file)
}
