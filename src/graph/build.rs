//! `benchgen graph build` (stage `graph-build`): candidate edges from the multi-tool
//! sessions of `logs split`, each validated by the LLM ([`EdgeVerdict`]: does `to`
//! depend on `from`?), checkpointed per candidate so a killed run repeats no verdict.
//!
//! Outputs under `artifacts/graph-build/`: `candidates.json` (every candidate with its
//! support, value flow, verdict and reason), the accepted graph as `graph.json`,
//! `graph.dot`, `graph.svg` and `report.md` (see [`super::render`]).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::render::{self, ToolInfo};
use super::{Candidate, Edge, GraphSettings, Judged};
use crate::ledger::{Explanation, Ledger, NewEvent, Parent, kind};
use crate::llm::Prompt;
use crate::llm::batch::{Batch, BatchOptions, Item};
use crate::logs::Session;
use crate::logs::import::LogTool;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "graph-build";

/// The accepted dependency graph.
pub const GRAPH: Artifact<super::GraphDoc> = Artifact::new(STAGE, "graph.json");
/// Every candidate edge with its support, value flow, verdict and reason; read by
/// `graph review import` (and `graph review export`).
pub const CANDIDATES: Artifact<Vec<Judged>> = Artifact::new(STAGE, "candidates.json");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "graph build",
    // 3: the answer's schema says what is asked, not "the X's typed answer" (developer
    //     wording the model read).
    version: 3,
    about: "tool dependency graph from the multi-tool sessions, each candidate edge validated by the LLM",
    reads: &[crate::logs::split::GRAPH_SOURCE.read(), crate::logs::import::CATALOG.read()],
    writes: &["candidates.json", "graph.json", "graph.dot", "graph.svg", "report.md", crate::llm::batch::FAILED_FILE],
    section: Some("graph"),
};

/// One candidate's checkpointed verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EdgeRecord {
    pub dependent: bool,
    pub reason: String,
    /// Request hash of the LLM exchange.
    pub exchange: String,
}

/// Does the second tool need an output of the first?
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EdgeVerdict {
    /// True when the second tool typically needs an output of the first one.
    pub dependent: bool,
    /// One line saying why.
    pub reason: String,
}

pub fn settings(s: &Settings) -> GraphSettings {
    s.section::<super::GraphSettings>().clone().unwrap_or_default()
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
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Candidate edges from adjacent groups of multi-tool sessions, validated by the
         LLM (`[graph]`). Resumable per candidate.

         Reads `logs-split/graph_source.jsonl` and `logs-import/catalog.json`. Writes
         `artifacts/graph-build/`: `candidates.json`, `graph.json`, `graph.dot`,
         `graph.svg`, `report.md` and `failed.json` (candidates whose judgement failed)."
    }

    /// The graph family's ids: an edge (`edge:<from>-><to>`).
    fn explain_subject(&self, ledger: &Ledger, runs: &[i64], id: &str) -> Result<Option<Explanation>> {
        if !id.starts_with("edge:") {
            return Ok(None);
        }
        explain_edge(ledger, runs, id).map(Some)
    }

    fn enabled(&self, s: &Settings) -> bool {
        s.section::<crate::logs::LogsSettings>().is_some() && s.section::<super::GraphSettings>().is_some()
    }

    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        vec![ConfigRef::new("graph.role", &settings(s).role)]
    }

    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        let g = settings(s);
        // Candidates over every session the track can carry: the split's graph sessions are
        // some of them, and an edge's support only shrinks with fewer sessions.
        let e = match crate::logs::import::sessions_before_run(s) {
            Some((mut sessions, from)) => {
                // Support counts sessions by id: one id each, as import makes them unique.
                for (i, x) in sessions.iter_mut().enumerate() {
                    x.id = i.to_string();
                }
                let cands = super::candidates(&sessions);
                let asked = cands.iter().filter(|c| c.support.sessions.len() >= g.min_support).count();
                let basis = format!("≤ {asked} candidate edges (support ≥ {}) in {from}", g.min_support);
                crate::stage::Estimate::typed(&g.role, asked as u64, basis)
            }
            None => crate::stage::Estimate::unknown(&g.role, crate::stage::UNTIL_LOGS),
        };
        vec![e.in_flight(g.concurrency.max(1))]
    }

    fn prompts(&self, s: &Settings) -> Vec<PromptRef> {
        let tool = json!({"name": "t", "description": "d", "parameters": ["p"]});
        let vars = json!({"from": tool, "to": tool, "sessions": 2, "count": 3, "value_flow": ["p"]});
        vec![PromptRef::new("graph.template", &settings(s).template, vars)]
    }

    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        let g = settings(s);
        crate::settings::check_positive(problems, "graph.concurrency", g.concurrency);
        crate::settings::check_positive(problems, "graph.min_support", g.min_support);
    }

    fn plan(&self, s: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![], config_hash: section_hash(&json!({"graph": settings(s)}))? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let g = settings(s);
        let sessions = crate::logs::read_sessions(
            inputs.open_of(&crate::logs::split::GRAPH_SOURCE)?,
            "logs-split/graph_source.jsonl",
        )?;
        let catalog = inputs.json(&crate::logs::import::CATALOG)?;
        let tools: BTreeMap<String, LogTool> = catalog.into_iter().map(|t| (t.name.clone(), t)).collect();
        let cands = super::candidates(&sessions);
        let asked: Vec<&Candidate> = cands.iter().filter(|c| c.support.sessions.len() >= g.min_support).collect();
        let items: Vec<(String, Prompt)> = asked.iter().map(|c| (c.key(), edge_prompt(&g, c, &tools))).collect();
        let opts = BatchOptions::new(STAGE, "edges", "candidate edges")
            .concurrency(g.concurrency.max(1))
            .max_failed_share(g.max_failed_share, "graph.max_failed_share")
            .fail_point("graph_build_edge");
        let mut batch = Batch::new(ctx, opts)?;
        let role = g.role.as_str();
        let done = batch.run(items, |prompt: Prompt, llm: Item| async move {
            let reply = llm.typed::<EdgeVerdict>(role, &prompt).await?;
            Ok(EdgeRecord {
                dependent: reply.value.dependent,
                reason: crate::text::one_line(&reply.value.reason),
                exchange: reply.exchange,
            })
        })?;
        let resumed = done.resumed;
        let failed: BTreeMap<&str, &str> = done.failed.iter().map(|f| (f.item.as_str(), f.reason.as_str())).collect();
        let mut judged = Vec::new();
        let mut edges = Vec::new();
        for c in &cands {
            let key = c.key();
            let (accepted, reason, exchange) = match done.values.get(&key) {
                Some(v) => (v.dependent, v.reason.clone(), v.exchange.clone()),
                // Failed within `max_failed_share`: rejected, with the failure as the reason.
                None if failed.contains_key(key.as_str()) => (
                    false,
                    format!("validation failed: {}", crate::text::one_line(failed[key.as_str()])),
                    String::new(),
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
            if let Some(id) = batch.exchange_event(&exchange)? {
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
        batch.finish(out)?;
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

/// `benchgen explain edge:<from>-><to>`: the verdict of `graph build` on the edge, else the
/// last event about it (a decision of `graph review import`).
fn explain_edge(ledger: &Ledger, runs: &[i64], id: &str) -> Result<Explanation> {
    let direct = ledger.events_for(id, runs)?;
    let Some(last) = direct.last() else {
        return Err(crate::error::hinted(
            format!("no graph edge `{id}` in the current artifacts"),
            "set ids are in `artifacts/efs-finalize/final.json`, edges in `artifacts/graph-build/graph.json`",
        ));
    };
    let lineage = ledger.lineage(&direct.iter().map(|e| e.id).collect::<Vec<_>>())?;
    let p = &last.payload;
    // `run` above marks its verdicts `"check": "graph-edge"`.
    let status = if p["check"] == "graph-edge" {
        format!(
            "{} by `graph build`: {}",
            if p["accepted"] == true { "accepted" } else { "rejected" },
            p["reason"].as_str().unwrap_or("")
        )
    } else {
        format!("{} of stage `{}`", last.kind, last.stage)
    };
    Ok(Explanation { id: id.into(), item: "graph edge", status, record: None, lineage })
}

pub fn path(s: &Settings, file: &str) -> std::path::PathBuf {
    s.artifacts.join(STAGE).join(file)
}
