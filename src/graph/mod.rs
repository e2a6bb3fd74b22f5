//! The tool dependency graph from grouped multi-tool logs (FinMCP's graph step).
//!
//! Candidates (pure, [`candidates`]): within one turn of one session, every tool of a
//! group is paired with every tool of the group right after it; never two tools of one
//! group, never across turns, no self-loops. Each candidate carries its support (sessions,
//! occurrences, sub-scenarios) and value-flow evidence: a value of `from`'s logged result
//! that reappears as an argument value of `to`. `build` has the LLM validate each
//! candidate; `review` lets people add or remove edges through a CSV sheet.

pub mod build;
pub mod render;
pub mod review;

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config_doc::Key;
use crate::logs::Session;

/// `[graph]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GraphSettings {
    /// LLM role validating candidate edges.
    #[serde(default = "default_role")]
    pub role: String,
    #[serde(default = "default_template")]
    pub template: String,
    /// Candidates seen in fewer sessions are not asked about (recorded as rejected).
    #[serde(default = "one")]
    pub min_support: usize,
    #[serde(default = "crate::logs::default_concurrency")]
    pub concurrency: usize,
    /// Share of candidate edges whose validation may fail (after retries) without failing
    /// the stage; such edges are left out as rejected, with the failure as their reason.
    #[serde(
        default,
        deserialize_with = "crate::llm::batch::de_share",
        skip_serializing_if = "crate::llm::batch::is_zero_share"
    )]
    pub max_failed_share: f64,
}

/// `[graph]`; absent: its stages are not part of `run` (each still runs alone, with defaults).
impl crate::settings::Section for GraphSettings {
    const NAME: &'static str = "graph";
    type Value = Option<Self>;
    const KEYS: &'static [Key] = &[
        Key::new("role", "string", r#""judge""#, "LLM role validating candidate edges."),
        Key::new("template", "string", r#""graph_edge""#, "Prompt template of the validation."),
        Key::new(
            "min_support",
            "integer",
            "1",
            "Candidates seen in fewer sessions are not asked about (recorded as rejected).",
        ),
        Key::new("concurrency", "integer", "2", "Candidate edges validated at once."),
        Key::new(
            "max_failed_share",
            "number",
            "0.0",
            "Share of candidate edges whose validation may fail; they are left out as rejected.",
        ),
    ];
}

impl Default for GraphSettings {
    fn default() -> Self {
        Self {
            role: default_role(),
            template: default_template(),
            min_support: 1,
            concurrency: 2,
            max_failed_share: 0.0,
        }
    }
}

fn default_role() -> String {
    "judge".into()
}
fn default_template() -> String {
    "graph_edge".into()
}
fn one() -> usize {
    1
}

/// One value-flow observation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Flow {
    pub session: String,
    /// The argument of `to` whose value came from `from`'s result.
    pub argument: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Support {
    /// Distinct sessions (sorted).
    pub sessions: Vec<String>,
    /// Occurrences (one per adjacent group pair).
    pub count: u64,
    pub sub_scenarios: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Candidate {
    pub from: String,
    pub to: String,
    pub support: Support,
    /// Value-flow evidence (at most 20, sorted).
    pub value_flow: Vec<Flow>,
}

impl Candidate {
    pub fn key(&self) -> String {
        edge_key(&self.from, &self.to)
    }
}

pub fn edge_key(from: &str, to: &str) -> String {
    format!("{from}->{to}")
}

/// Scalar leaves of a JSON value as `(path, text)`.
fn leaves(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(o) => {
            o.iter().for_each(|(k, x)| leaves(x, &if path.is_empty() { k.clone() } else { format!("{path}.{k}") }, out))
        }
        Value::Array(a) => a.iter().for_each(|x| leaves(x, &format!("{path}[]"), out)),
        Value::String(s) => out.push((path.to_string(), s.trim().to_string())),
        Value::Number(n) => out.push((path.to_string(), n.to_string())),
        _ => {}
    }
}

/// A value worth tracing: not trivially common (long enough, or carrying a digit).
fn distinctive(s: &str) -> bool {
    let n = s.chars().count();
    (3..=200).contains(&n) && (n >= 6 || s.chars().any(|c| c.is_ascii_digit()))
}

/// Values in a logged result: JSON leaves, or word-like tokens of plain text.
fn result_values(r: &str) -> HashSet<String> {
    let mut set = HashSet::new();
    match serde_json::from_str::<Value>(r) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => {
            let mut l = Vec::new();
            leaves(&v, "", &mut l);
            set.extend(l.into_iter().map(|(_, s)| s).filter(|s| distinctive(s)));
        }
        _ => {
            for tok in r.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.')) {
                let tok = tok.trim_matches('.');
                if distinctive(tok) {
                    set.insert(tok.to_string());
                }
            }
        }
    }
    set
}

/// Occurrences of a candidate searched for value flow (bounds the work on large logs).
pub const FLOW_CHECKS: u32 = 500;

/// Every candidate edge of the sessions, sorted by `(from, to)`.
pub fn candidates(sessions: &[Session]) -> Vec<Candidate> {
    struct Acc {
        sessions: BTreeSet<String>,
        count: u64,
        subs: BTreeSet<String>,
        flow: BTreeSet<Flow>,
        checked: u32,
    }
    let mut acc: BTreeMap<(String, String), Acc> = BTreeMap::new();
    for s in sessions {
        let sub = s.sub_scenario();
        for t in &s.turns {
            for w in t.groups.windows(2) {
                let (a, b) = (&w[0], &w[1]);
                // Values per call, computed once per window and only when needed.
                let mut a_vals: Vec<Option<HashSet<String>>> = vec![None; a.len()];
                let mut b_args: Vec<Option<Vec<(String, String)>>> = vec![None; b.len()];
                let mut pairs: BTreeSet<(&str, &str)> = BTreeSet::new();
                for x in a {
                    for y in b {
                        if x.tool != y.tool {
                            pairs.insert((&x.tool, &y.tool));
                        }
                    }
                }
                for (from, to) in pairs {
                    let e = acc.entry((from.to_string(), to.to_string())).or_insert_with(|| Acc {
                        sessions: BTreeSet::new(),
                        count: 0,
                        subs: BTreeSet::new(),
                        flow: BTreeSet::new(),
                        checked: 0,
                    });
                    if e.sessions.last() != Some(&s.id) && !e.sessions.contains(&s.id) {
                        e.sessions.insert(s.id.clone());
                    }
                    e.count += 1;
                    if !e.subs.contains(&sub) {
                        e.subs.insert(sub.clone());
                    }
                    // Evidence is sampled: the first FLOW_CHECKS occurrences, at most 20 findings.
                    if e.flow.len() >= 20 || e.checked >= FLOW_CHECKS {
                        continue;
                    }
                    e.checked += 1;
                    for (i, c) in a.iter().enumerate() {
                        if c.tool == from
                            && a_vals[i].is_none()
                            && let Some(r) = c.result.as_deref()
                        {
                            a_vals[i] = Some(result_values(r));
                        }
                    }
                    let values: HashSet<&str> = a
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| c.tool == from)
                        .filter_map(|(i, _)| a_vals[i].as_ref())
                        .flatten()
                        .map(String::as_str)
                        .collect();
                    if values.is_empty() {
                        continue;
                    }
                    for (i, c) in b.iter().enumerate() {
                        if c.tool != to {
                            continue;
                        }
                        let l = b_args[i].get_or_insert_with(|| {
                            let mut l = Vec::new();
                            leaves(&c.arguments, "", &mut l);
                            l.retain(|(_, v)| distinctive(v));
                            l
                        });
                        for (path, v) in l.iter() {
                            if values.contains(v.as_str()) {
                                e.flow.insert(Flow { session: s.id.clone(), argument: path.clone() });
                            }
                        }
                    }
                }
            }
        }
    }
    acc.into_iter()
        .map(|((from, to), a)| Candidate {
            from,
            to,
            support: Support {
                sessions: a.sessions.into_iter().collect(),
                count: a.count,
                sub_scenarios: a.subs.into_iter().collect(),
            },
            value_flow: a.flow.into_iter().take(20).collect(),
        })
        .collect()
}

/// A node of the written graph.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Node {
    pub tool: String,
    pub description: String,
    pub sub_scenarios: Vec<String>,
    pub in_degree: usize,
    pub out_degree: usize,
}

/// An edge of the written graph.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub support: Support,
    pub value_flow: Vec<Flow>,
    /// `accepted` (LLM), `added` (review).
    pub verdict: String,
    pub reason: String,
    /// Request hash of the LLM exchange (empty for reviewed edges and unasked ones).
    #[serde(default)]
    pub exchange: String,
}

/// The graph file (`graph.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GraphDoc {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

/// A candidate with its verdict (`candidates.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Judged {
    #[serde(flatten)]
    pub candidate: Candidate,
    pub accepted: bool,
    pub reason: String,
    #[serde(default)]
    pub exchange: String,
}
