//! Human review of the dependency graph: `graph review export` writes a sheet of every
//! candidate edge with the LLM's verdict; reviewers set `decision` to `add` (keep or add
//! the edge) or `remove`, with their name in `reviewer`, and may add rows of their own
//! (`from`, `to`, `decision = add`). `graph review import` (stage `graph-review-import`)
//! checks every `*.csv` under `reviews/graph/` and writes the reviewed graph (same files
//! as `graph build`) under `artifacts/graph-review-import/`.
//!
//! Sheet `reviews/graph/graph_review.csv`:
//! `from,to,sessions,count,value_flow,llm_verdict,llm_reason,decision,reviewer,note`.
//! Cells a spreadsheet would evaluate are written with a leading `'` (removed on import).
//! Any malformed row rejects the whole import, naming each problem as `file:line`;
//! nothing is applied then.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::render;
use super::{Edge, GraphDoc, Judged, Support};
use crate::csvout::{SheetRow, read_rows};
use crate::error::{InputError, Problem};
use crate::ledger::{NewEvent, kind};
use crate::settings::Settings;
use crate::stage::{Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const STAGE: &str = "graph-review-import";
pub const SHEET: &str = "graph_review.csv";
/// The reviewed graph (present once a review sheet was imported); read by `synth chains`.
pub const GRAPH: crate::stage::Artifact<super::GraphDoc> = crate::stage::Artifact::new(STAGE, "graph.json");
pub const HEADER: [&str; 10] =
    ["from", "to", "sessions", "count", "value_flow", "llm_verdict", "llm_reason", "decision", "reviewer", "note"];

pub fn review_dir(s: &Settings) -> PathBuf {
    s.root.join("reviews").join("graph")
}

pub fn export_sheet(judged: &[Judged]) -> Result<Vec<u8>> {
    let mut w = crate::csvout::Writer::new();
    w.write_record(HEADER)?;
    for j in judged {
        let c = &j.candidate;
        w.write_record([
            c.from.clone(),
            c.to.clone(),
            c.support.sessions.len().to_string(),
            c.support.count.to_string(),
            c.value_flow.len().to_string(),
            if j.accepted { "accepted" } else { "rejected" }.to_string(),
            j.reason.clone(),
            String::new(),
            String::new(),
            String::new(),
        ])?;
    }
    w.into_bytes()
}

/// One reviewed decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Decision {
    pub from: String,
    pub to: String,
    /// `add` or `remove`.
    pub decision: String,
    pub reviewer: String,
    pub note: String,
    /// `file:line`.
    pub location: String,
}

/// Parse and check the sheets; every problem is reported at once.
pub fn import_sheets(files: &[(String, Vec<u8>)], tools: &BTreeSet<String>) -> Result<Vec<Decision>, InputError> {
    let mut problems = Vec::new();
    let mut out: BTreeMap<(String, String), Decision> = BTreeMap::new();
    for (name, bytes) in files {
        for SheetRow { loc, cells } in read_rows(name, bytes, &HEADER, &mut problems) {
            let cell = |i: usize| cells[i].clone();
            let (from, to, decision, reviewer) = (cell(0), cell(1), cell(7).to_ascii_lowercase(), cell(8));
            if decision.is_empty() {
                continue;
            }
            let mut bad = false;
            if decision != "add" && decision != "remove" {
                problems
                    .push(Problem::new(&loc, format!("decision must be `add`, `remove` or empty, found `{decision}`")));
                bad = true;
            }
            if reviewer.is_empty() {
                problems.push(Problem::new(&loc, "a decision needs a `reviewer`"));
                bad = true;
            }
            for t in [&from, &to] {
                if !tools.contains(t) {
                    problems.push(Problem::new(&loc, format!("unknown tool `{t}`")));
                    bad = true;
                }
            }
            if from == to {
                problems.push(Problem::new(&loc, "an edge cannot link a tool to itself"));
                bad = true;
            }
            if bad {
                continue;
            }
            let key = (from.clone(), to.clone());
            if let Some(prev) = out.get(&key)
                && prev.decision != decision
            {
                problems.push(Problem::new(&loc, format!("contradicts `{}` at {}", prev.decision, prev.location)));
                continue;
            }
            out.insert(key, Decision { from, to, decision, reviewer, note: cell(9), location: loc });
        }
    }
    if problems.is_empty() {
        Ok(out.into_values().collect())
    } else {
        Err(InputError { file: "reviews/graph".into(), problems })
    }
}

pub fn sheet_files(s: &Settings) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(review_dir(s))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "csv") && p.is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `graph review export`; refuses to overwrite a sheet with decisions unless `force`.
pub fn export(s: &Settings, force: bool) -> Result<(PathBuf, usize)> {
    let p = super::build::CANDIDATES.path(s);
    let bytes = std::fs::read(&p).map_err(|e| {
        crate::error::hinted(format!("cannot read `{}`: {e}", s.display_path(&p)), "run `benchgen graph build` first")
    })?;
    let judged: Vec<Judged> = serde_json::from_slice(&bytes).context("candidates.json is not valid")?;
    let path = review_dir(s).join(SHEET);
    if path.exists() && !force {
        let existing = std::fs::read(&path)?;
        let tools: BTreeSet<String> =
            judged.iter().flat_map(|j| [j.candidate.from.clone(), j.candidate.to.clone()]).collect();
        let filled = import_sheets(&[(SHEET.into(), existing)], &tools).map(|d| !d.is_empty()).unwrap_or(true);
        if filled {
            return Err(crate::error::hinted(
                format!("`{}` already holds review decisions; not overwriting it", s.display_path(&path)),
                "import it first (`benchgen graph review import`), move it aside, or pass `--force`",
            ));
        }
    }
    crate::store::write_atomic(&path, &export_sheet(&judged)?)?;
    Ok((path, judged.len()))
}

pub struct ReviewStage;

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "graph review import",
    version: 2,
    about: "imports filled graph review sheets (add/remove edges) into the reviewed graph",
    reads: &[super::build::GRAPH.read(), super::build::CANDIDATES.read()],
    writes: &["graph.json", "graph.dot", "graph.svg", "report.md", "decisions.json"],
    section: Some("graph"),
};

impl Stage for ReviewStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Apply the `add`/`remove` decisions of every `reviews/graph/*.csv`.

         Reads `graph-build/graph.json`, `graph-build/candidates.json` and the sheets.
         Writes `artifacts/graph-review-import/`: the reviewed `graph.json`, `graph.dot`,
         `graph.svg`, `report.md`, and `decisions.json`. Any malformed row rejects the
         whole import with `file:line` messages."
    }
    fn enabled(&self, s: &Settings) -> bool {
        s.section::<crate::logs::LogsSettings>().is_some()
            && s.section::<super::GraphSettings>().is_some()
            && !sheet_files(s).is_empty()
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        let sheets = sheet_files(s);
        if sheets.is_empty() {
            return Err(crate::error::hinted(
                format!("no review sheets in `{}`", s.display_path(&review_dir(s))),
                "run `benchgen graph review export`, fill in the sheet, then import it",
            ));
        }
        Ok(Plan { inputs: sheets, config_hash: crate::settings::section_hash(&"graph-review")? })
    }
    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let graph: GraphDoc = inputs.json(&super::build::GRAPH)?;
        let judged: Vec<Judged> = inputs.json(&super::build::CANDIDATES)?;
        let tools: BTreeSet<String> = graph.nodes.iter().map(|n| n.tool.clone()).collect();
        let mut files = Vec::new();
        for p in sheet_files(s) {
            files.push((s.display_path(&p), inputs.bytes(&p)?.to_vec()));
        }
        let decisions = import_sheets(&files, &tools)?;
        let cand: BTreeMap<(String, String), &Judged> =
            judged.iter().map(|j| ((j.candidate.from.clone(), j.candidate.to.clone()), j)).collect();
        let mut edges: BTreeMap<(String, String), Edge> =
            graph.edges.iter().map(|e| ((e.from.clone(), e.to.clone()), e.clone())).collect();
        let (mut added, mut removed) = (0, 0);
        for d in &decisions {
            let key = (d.from.clone(), d.to.clone());
            let reason = format!(
                "review by {}{}",
                d.reviewer,
                if d.note.is_empty() { String::new() } else { format!(": {}", d.note) }
            );
            if d.decision == "remove" {
                if edges.remove(&key).is_some() {
                    removed += 1;
                }
            } else if let std::collections::btree_map::Entry::Vacant(slot) = edges.entry(key.clone()) {
                let (support, value_flow) = match cand.get(&key) {
                    Some(j) => (j.candidate.support.clone(), j.candidate.value_flow.clone()),
                    None => (Support { sessions: vec![], count: 0, sub_scenarios: vec![] }, vec![]),
                };
                slot.insert(Edge {
                    from: d.from.clone(),
                    to: d.to.clone(),
                    support,
                    value_flow,
                    verdict: "added".into(),
                    reason,
                    exchange: String::new(),
                });
                added += 1;
            }
            out.event(NewEvent::new(
                kind::REVIEW,
                Some(&format!("edge:{}", super::edge_key(&d.from, &d.to))),
                serde_json::to_value(d)?,
            ));
        }
        let info: render::ToolInfo =
            graph.nodes.iter().map(|n| (n.tool.clone(), (n.description.clone(), n.sub_scenarios.clone()))).collect();
        let doc = render::doc(&info, edges.into_values().collect());
        let extra = vec![format!("\nReview: {} decisions, {added} edges added, {removed} removed.", decisions.len())];
        render::write_all(out, &doc, "Tool dependency graph (reviewed)", &extra)?;
        out.json("decisions.json", &decisions)?;
        out.count("decisions", decisions.len());
        out.count("added", added);
        out.count("removed", removed);
        out.notes.push(format!(
            "{} decisions: {added} edges added, {removed} removed; {} edges now",
            decisions.len(),
            doc.edges.len()
        ));
        Ok(())
    }
}
