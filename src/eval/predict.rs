//! The runs of one agent and repeat as predictions in the three formats `benchgen score`
//! reads, and their scores (corrected, `--compat etom`, `--compat finmcp`).
//!
//! Files under `predictions/<agent>/<k>/` (with several tool spaces,
//! `predictions/<space>/<agent>/<k>/`):
//!
//! - `samples.jsonl`: unified predictions for the release's `samples.jsonl`, one line per
//!   sample that ran: `{id, turns: [{calls: [{tool, group, arguments}]}]}` (a turn per
//!   sample turn, calls in the order the agent made them, `group` its parallel step), or
//!   `{id, refusal: true}` when the agent called no tool at all;
//! - `etom.jsonl` (registry track): ETOM orchestrator records for the `level_N.json` files,
//!   `{id: "L<level>-<n>", prediction: ["{\"server\": S, \"tool_name\": T}", …]}`; no call
//!   is `[]`, or ETOM's `"No"` sentinel on L5;
//! - `finmcp.json` (log track): FinMCP inference records for the `finmcp_*.json` files,
//!   `[{id, messages_pred}]`, `messages_pred` the conversation as the agent had it (per turn
//!   the user message, one assistant message per group of calls, the tool results, the
//!   final answer).
//!
//! A run that failed has no line: the scorers count the sample as missing (wrong). In the
//! `full` tool space the runs already hold each `call_tool` call as a call of the tool it
//! names ([`super::run`]), so the predictions name the real tools; its `search_tools` calls
//! are searches, not calls, and appear in no prediction.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::{Value, json};

use super::ToolSpace;
use super::run::{RunRecord, TurnRun};
use super::source::Release;
use crate::model::{Family, Kind, split_tool_id};
use crate::score::{self, BenchFormat, Mode};
use crate::stage::Output;

/// The prediction files of one agent and repeat.
pub struct Files {
    pub unified: Vec<u8>,
    pub etom: Option<Vec<u8>>,
    pub finmcp: Option<Vec<u8>>,
}

fn unified_record(id: &str, r: &RunRecord) -> Value {
    if r.turns.iter().all(|t| RunRecord::predicted(t).next().is_none()) {
        return json!({"id": id, "refusal": true});
    }
    let turns: Vec<Value> = r
        .turns
        .iter()
        .map(|t| {
            let calls: Vec<Value> = RunRecord::predicted(t)
                .map(|c| json!({"tool": c.tool, "group": c.group, "arguments": c.arguments}))
                .collect();
            json!({"calls": calls})
        })
        .collect();
    json!({"id": id, "turns": turns})
}

fn etom_record(id: &str, kind: Kind, r: &RunRecord) -> Value {
    let items: Vec<Value> = r
        .turns
        .iter()
        .flat_map(RunRecord::predicted)
        .map(|c| {
            let (server, tool) = split_tool_id(&c.tool).unwrap_or(("", &c.tool));
            Value::String(json!({"server": server, "tool_name": tool}).to_string())
        })
        .collect();
    let prediction = if items.is_empty() && kind == Kind::L5 {
        json!([json!({"server": "No", "tool_name": "No"}).to_string()])
    } else {
        Value::Array(items)
    };
    json!({"id": id, "prediction": prediction})
}

/// The FinMCP tool name: the tool part of `server::tool`.
fn fin_name(id: &str) -> &str {
    split_tool_id(id).map(|(_, t)| t).unwrap_or(id)
}

fn finmcp_turn(user: &str, t: &TurnRun, turn: usize, messages: &mut Vec<Value>) {
    messages.push(json!({"role": "user", "content": user}));
    let mut groups: BTreeMap<usize, Vec<&super::run::EvalCall>> = BTreeMap::new();
    for c in RunRecord::predicted(t) {
        groups.entry(c.group).or_default().push(c);
    }
    for (g, calls) in groups {
        let ids: Vec<String> = (0..calls.len()).map(|k| format!("call_{turn}_{g}_{k}")).collect();
        let tool_calls: Vec<Value> = calls
            .iter()
            .zip(&ids)
            .enumerate()
            .map(|(k, (c, id))| {
                json!({"id": id, "type": "function", "index": k,
                       "function": {"name": fin_name(&c.tool), "arguments": c.arguments.to_string()}})
            })
            .collect();
        messages.push(json!({"role": "assistant", "content": "", "tool_calls": tool_calls}));
        for (c, id) in calls.iter().zip(&ids) {
            messages.push(json!({"role": "tool", "tool_call_id": id, "name": fin_name(&c.tool),
                                 "content": c.result.clone().unwrap_or_default()}));
        }
    }
    messages.push(json!({"role": "assistant", "content": t.answer.clone().unwrap_or_default()}));
}

impl Files {
    pub fn build(rel: &Release, records: &BTreeMap<&str, &RunRecord>) -> Result<Files> {
        let mut unified = Vec::new();
        let mut etom = Vec::new();
        let mut fin: Vec<Value> = Vec::new();
        for s in &rel.samples {
            let Some(r) = records.get(s.id.as_str()) else { continue };
            serde_json::to_writer(&mut unified, &unified_record(&s.id, r))?;
            unified.push(b'\n');
            match s.family {
                Family::Etom => {
                    serde_json::to_writer(&mut etom, &etom_record(&s.id, s.kind, r))?;
                    etom.push(b'\n');
                }
                Family::Finmcp => {
                    let mut messages = Vec::new();
                    for (i, (turn, t)) in s.turns.iter().zip(&r.turns).enumerate() {
                        finmcp_turn(&turn.user, t, i, &mut messages);
                    }
                    fin.push(json!({"id": s.id, "messages_pred": messages}));
                }
            }
        }
        let has = |p: &str| rel.benches.keys().any(|k| k.starts_with(p));
        Ok(Files {
            unified,
            etom: has("level_").then_some(etom),
            finmcp: if has("finmcp_") { Some(crate::store::to_json_bytes(&fin)?) } else { None },
        })
    }

    fn named(&self) -> Vec<(&'static str, &[u8])> {
        let mut v = vec![("samples.jsonl", self.unified.as_slice())];
        if let Some(b) = &self.etom {
            v.push(("etom.jsonl", b));
        }
        if let Some(b) = &self.finmcp {
            v.push(("finmcp.json", b));
        }
        v
    }

    /// Into the stage's output, under `predictions/<folder>/<k>/`: the folder is the agent,
    /// or `<space>/<agent>` with several tool spaces.
    pub fn write_into(&self, out: &mut Output, folder: &str, k: usize) -> Result<()> {
        for (name, bytes) in self.named() {
            out.file(&format!("predictions/{folder}/{k}/{name}"), bytes.to_vec());
        }
        Ok(())
    }
}

/// The overall row of a score report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Samples scored.
    pub n: usize,
    /// Exact-match rate.
    pub em: f64,
    /// Macro F1 of the call-level metric (the published scripts' average).
    pub f1: f64,
}

/// One sample's corrected score in one run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SampleScore {
    pub solved: bool,
    /// Call-level F1 (corrected mode).
    pub f1: f64,
}

/// The scores of one agent and repeat.
#[derive(Debug, Clone)]
pub struct Scored {
    pub agent: String,
    pub repeat: usize,
    /// Corrected mode on `samples.jsonl`, by sample id (every released sample).
    pub samples: BTreeMap<String, SampleScore>,
    pub corrected: Figures,
    /// `--compat etom` reports per level, as `eval.py` does.
    pub compat_etom: Option<BTreeMap<String, Figures>>,
    pub compat_finmcp: Option<Figures>,
}

/// The rows of one section of a score report, by key.
fn rows(rep: &score::Report, dimension: &str) -> Result<BTreeMap<String, Figures>> {
    let section = rep
        .sections
        .iter()
        .find(|s| s.dimension == dimension)
        .with_context(|| format!("internal: the score report has no `{dimension}` section"))?;
    Ok(section
        .rows
        .iter()
        .map(|r| (r.key.clone(), Figures { n: r.n, em: r.em, f1: r.calls_macro.map(|t| t.f1).unwrap_or(0.0) }))
        .collect())
}

/// The overall row of a score report.
fn overall(rep: &score::Report) -> Result<Figures> {
    rows(rep, "overall")?.into_values().next().context("internal: the score report has no overall row")
}

/// `benchgen score` on one prediction file; a diagnostic is a bug of ours and fails the stage.
fn run_score(benches: Vec<PathBuf>, pred: &Path, format: BenchFormat, mode: Mode) -> Result<score::Report> {
    let opts = score::Options {
        benches,
        pred: pred.to_path_buf(),
        bench_format: Some(format),
        pred_format: None,
        etom_level: None,
        mode,
    };
    let rep = score::run(&opts).with_context(|| format!("`benchgen score` on `{}` ({mode:?})", pred.display()))?;
    if let Some(d) = rep.diagnostics.first() {
        bail!(
            "internal: `benchgen score` ({mode:?}) could not read `{}`: {} {}: {} ({} diagnostic(s))",
            pred.display(),
            d.location,
            d.id.as_deref().unwrap_or(""),
            d.message,
            rep.diagnostics.len()
        );
    }
    Ok(rep)
}

/// Write the files into `scratch/pred/<space>/<agent>/<k>/` and score them against the
/// release's files in `scratch/bench/`.
pub fn score(scratch: &Path, rel: &Release, space: ToolSpace, agent: &str, k: usize, files: &Files) -> Result<Scored> {
    let bench = scratch.join("bench");
    let dir = scratch.join("pred").join(space.as_str()).join(agent).join(k.to_string());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    for (name, bytes) in files.named() {
        std::fs::write(dir.join(name), bytes)
            .with_context(|| format!("cannot write `{}`", dir.join(name).display()))?;
    }
    let rep = run_score(
        vec![bench.join("samples.jsonl")],
        &dir.join("samples.jsonl"),
        BenchFormat::Unified,
        Mode::Corrected,
    )?;
    let samples = rep
        .results
        .iter()
        .map(|r| (r.id.clone(), SampleScore { solved: r.em, f1: r.calls.map(|c| c.f1).unwrap_or(0.0) }))
        .collect();
    let mut corrected = overall(&rep)?;
    corrected.f1 =
        rep.results.iter().map(|r| r.calls.map(|c| c.f1).unwrap_or(0.0)).sum::<f64>() / rep.results.len().max(1) as f64;
    let of = |prefix: &str| -> Vec<PathBuf> {
        rel.benches.keys().filter(|k| k.starts_with(prefix)).map(|k| bench.join(k)).collect()
    };
    let compat_etom = match &files.etom {
        Some(_) => {
            let rep = run_score(of("level_"), &dir.join("etom.jsonl"), BenchFormat::Etom, Mode::CompatEtom)?;
            Some(rows(&rep, "level")?)
        }
        None => None,
    };
    let compat_finmcp = match &files.finmcp {
        Some(_) => Some(overall(&run_score(
            of("finmcp_"),
            &dir.join("finmcp.json"),
            BenchFormat::Finmcp,
            Mode::CompatFinmcp,
        )?)?),
        None => None,
    };
    Ok(Scored { agent: agent.to_string(), repeat: k, samples, corrected, compat_etom, compat_finmcp })
}
