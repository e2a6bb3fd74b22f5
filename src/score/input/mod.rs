//! Input formats and their auto-detection.
//!
//! Benchmarks (`--bench`, several allowed):
//! - unified JSONL (one [`crate::model::Sample`] per line);
//! - ETOM `level_N.json` (a JSON array of `{query_id, query, ground_truth_tools, …}`); sample
//!   ids become `L<level>-<query_id>`; the level comes from the file name or `--etom-level`;
//! - FinMCP sample JSON (a JSON array of `{id, scenery, diff_level, messages, task, …}`).
//!
//! Predictions (`--pred`, JSONL, or a JSON array for FinMCP inference output):
//! - ours: `{id, turns: [{calls: [{tool: "server::tool" | {server, tool}, group?, arguments?}]}]}`
//!   or `{id, refusal: true}`;
//! - ETOM orchestrator style: `{id, prediction: <list of JSON strings/objects, a string, …>}`;
//! - FinMCP inference records: `{id, messages_pred: [...], error?}` (other fields ignored).
//!
//! The format of each prediction record is detected from its keys unless `--format` is given.
//! Unreadable lines become [`Diagnostic`]s and the run goes on.
//!
//! Two directions, one file each: [`bench`] loads benchmarks into score's own [`Item`]s
//! (the published formats through the wire types of [`crate::formats`]), [`pred`] reads
//! predictions. This file holds what both share: formats, diagnostics, tool-id keys and the
//! cutting of OpenAI-style messages into turns.

mod bench;
mod pred;
mod typed;

use std::collections::HashSet;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

pub use bench::load_benches;
pub(crate) use pred::truthy;
pub use pred::{norm_etom, norm_finmcp, read_predictions};

use super::Item;
use crate::error::json_type_name;
use crate::model::{Family, split_tool_id};

/// Benchmark file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BenchFormat {
    /// Our unified sample JSONL.
    Unified,
    /// ETOM `level_N.json`.
    Etom,
    /// FinMCP sample JSON.
    Finmcp,
}

/// Prediction record formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PredFormat {
    /// `{id, turns: [{calls: [...]}]}` or `{id, refusal: true}`.
    Unified,
    /// `{id, prediction: ...}` as an ETOM orchestrator returns it.
    Etom,
    /// `{id, messages_pred: [...]}` FinMCP inference output.
    Finmcp,
}

/// A problem with one input record that did not stop the run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Diagnostic {
    pub file: String,
    /// `line 12` (JSONL) or `record 3` (JSON array), or empty.
    pub location: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub message: String,
}

impl Diagnostic {
    /// A diagnostic whose file is filled in by the reader.
    pub fn line(location: &str, id: Option<&str>, message: impl Into<String>) -> Self {
        Diagnostic {
            file: String::new(),
            location: location.to_string(),
            id: id.map(str::to_string),
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchFile {
    pub path: String,
    pub format: BenchFormat,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<u8>,
    pub samples: usize,
}

/// Every tool key and scenario name, stored once.
pub type Interner = HashSet<Arc<str>, foldhash::fast::RandomState>;

fn intern(pool: &mut Interner, s: &str) -> Arc<str> {
    if let Some(a) = pool.get(s) {
        return a.clone();
    }
    let a: Arc<str> = Arc::from(s);
    pool.insert(a.clone());
    a
}

/// The loaded benchmark.
#[derive(Debug, Default)]
pub struct Bench {
    /// Comparison keys of every reference tool (the "known tools").
    pub tools: Interner,
    pub files: Vec<BenchFile>,
    pub items: Vec<Item>,
    /// Duplicate ids and other non-fatal notes about benchmark records.
    pub diagnostics: Vec<Diagnostic>,
    /// Later occurrences of a duplicated id: `(first index, later index)`.
    pub duplicates: Vec<(usize, usize)>,
}

/// What was read from the predictions file.
#[derive(Debug, Clone, Serialize)]
pub struct PredStats {
    pub path: String,
    pub records: usize,
    pub formats: Vec<(PredFormat, usize)>,
    #[serde(skip)]
    pub diagnostics: Vec<Diagnostic>,
}

// ---------------------------------------------------------------------------
// Tool ids (normalisation itself is `crate::model::norm_tool_id`)

/// The comparison key of a tool id for a family: ETOM compares full ids; FinMCP logs name
/// tools without their server, so FinMCP compares the tool part only.
pub fn key_for(family: Family, tool: &str) -> &str {
    match family {
        Family::Etom => tool,
        Family::Finmcp => match split_tool_id(tool) {
            Some((_, t)) => t,
            None => tool,
        },
    }
}

// ---------------------------------------------------------------------------
// Messages (FinMCP gold trajectories and `messages_pred`)

/// The user text that ends a simulated FinMCP conversation (not a request).
pub const STOP: &str = "###STOP###";

/// One conversation turn cut out of OpenAI-style messages.
#[derive(Debug, Default)]
pub struct MsgTurn {
    pub user: String,
    /// One entry per assistant message with tool calls; each call's name, or why it is unreadable.
    pub groups: Vec<Vec<Result<String, String>>>,
}

/// Cut messages into turns at each user message; calls before the first user message go to
/// turn 0. `Err` when a message is not an object.
pub fn split_turns(list: &[Value]) -> Result<Vec<MsgTurn>, String> {
    let mut turns: Vec<MsgTurn> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let Some(m) = m.as_object() else {
            return Err(format!("message {i} is {}, not an object", json_type_name(m)));
        };
        if m.get("role").and_then(Value::as_str) == Some("user") {
            let user = m.get("content").and_then(Value::as_str).unwrap_or("").to_string();
            turns.push(MsgTurn { user, groups: Vec::new() });
            continue;
        }
        let calls = match m.get("tool_calls") {
            Some(Value::Array(a)) if !a.is_empty() => a,
            _ => continue,
        };
        if turns.is_empty() {
            turns.push(MsgTurn::default());
        }
        let group = calls
            .iter()
            .enumerate()
            .map(|(k, c)| match c.get("function").and_then(|f| f.get("name")) {
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
                Some(other) => Err(format!("message {i} tool call {k}: name is {}", json_type_name(other))),
                None => Err(format!("message {i} tool call {k}: no function.name")),
            })
            .collect();
        turns.last_mut().expect("pushed above").groups.push(group);
    }
    Ok(turns)
}
