//! Per-sample lineage from the ledger, in a form that stays byte-identical when the pipeline
//! is rerun from the same inputs and ledger (`--llm-mode replay`).
//!
//! Roots of a sample: the events of the runs behind the current artifacts whose subject is
//! `sample:<id>` or the sample's `provenance_id`; its lineage is everything they descend
//! from. A rerun appends new events (new ids, new times), so released lineage never names
//! event ids or times: each event is `{kind, stage, subject, ref}`, where `ref` is the
//! request hash of an LLM exchange (what the ledger cache keys on), the call hash of an MCP
//! call (what trajectories name it by) and otherwise the hash of the event's payload without
//! its timing fields; an exchange carries no subject (one request may serve several items,
//! and which item's event a stage linked depends on the order they finished). Entries are deduplicated and sorted by
//! pipeline order, so concurrent stages recording in a different order change nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

use crate::ledger::{EventRow, Ledger, kind};

/// Payload keys that differ between a run and its replay.
const VOLATILE: &[&str] = &[
    "time",
    "latency_ms",
    "llm_ms",
    "other_ms",
    "attempts",
    "cached",
    "source_event",
    "duration_ms",
    "started_at",
    "finished_at",
    "run_id",
];

/// One released lineage entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
pub struct Entry {
    pub stage: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(rename = "ref")]
    pub reference: String,
}

/// What an LLM exchange cost, for the dataset card.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LlmUse {
    pub provider: String,
    pub model: String,
    pub role: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Answered by a batch job (the exchange names its batch).
    pub batched: bool,
}

struct Node {
    entry: Arc<Entry>,
    parents: Vec<i64>,
    llm: Option<(String, LlmUse)>,
    /// A level sample's plan check: the decision on each step of its query's plan (the
    /// `plan_check` of its `levels.sample` event).
    steps: Option<Value>,
}

/// Lineage lookups over one ledger, with every event read once.
pub struct Index {
    ledger: Option<Ledger>,
    runs: Vec<i64>,
    stage_order: HashMap<String, usize>,
    cache: HashMap<i64, Node>,
    /// LLM exchanges behind released samples, by request hash.
    pub llm: BTreeMap<String, LlmUse>,
    /// Events by kind behind released samples (each distinct entry once).
    pub kinds: BTreeMap<String, usize>,
    seen: BTreeSet<Arc<Entry>>,
}

impl Index {
    /// `runs`: the ledger runs behind the current artifacts.
    pub fn open(artifacts: &std::path::Path, runs: &[i64], stage_order: &[&str]) -> Result<Self> {
        Ok(Index {
            ledger: Ledger::open_read_only(artifacts)?,
            runs: runs.to_vec(),
            stage_order: stage_order.iter().enumerate().map(|(i, s)| (s.to_string(), i)).collect(),
            cache: HashMap::new(),
            llm: BTreeMap::new(),
            kinds: BTreeMap::new(),
            seen: BTreeSet::new(),
        })
    }

    /// Root event ids of a sample.
    pub fn roots(&self, id: &str, provenance_id: &str) -> Result<Vec<i64>> {
        let Some(ledger) = &self.ledger else { return Ok(Vec::new()) };
        ledger.event_ids_about(&[&crate::model::Sample::subject_for(id), provenance_id], &self.runs)
    }

    fn node(&mut self, id: i64) -> Result<Option<&Node>> {
        if !self.cache.contains_key(&id) {
            let Some(ledger) = &self.ledger else { return Ok(None) };
            let Some((EventRow { kind: k, stage, subject, payload, .. }, parents)) = ledger.event_row(id)? else {
                return Ok(None);
            };
            let p: Value = serde_json::from_str(&payload).unwrap_or(Value::Null);
            // A cache hit links to the exchange that first answered the request, which may
            // have served another item (two samples asking the same thing) and which one
            // depends on the order the cache was filled in; the hit itself already names
            // the request, so the released lineage stops there.
            let parents = match (k == kind::LLM_EXCHANGE, p["source_event"].as_i64()) {
                (true, Some(source)) => parents.into_iter().filter(|&x| x != source).collect(),
                _ => parents,
            };
            let (reference, llm) = if k == kind::LLM_EXCHANGE {
                let hash = p["request_hash"].as_str().unwrap_or("").to_string();
                let s = |key: &str| p[key].as_str().unwrap_or("").to_string();
                let u = LlmUse {
                    provider: s("provider"),
                    model: s("model"),
                    role: s("role"),
                    prompt_tokens: p["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
                    completion_tokens: p["usage"]["completion_tokens"].as_u64().unwrap_or(0),
                    batched: p["batch"].is_string(),
                };
                (format!("request:{hash}"), Some((hash, u)))
            } else if let Some(call) = p["call_hash"].as_str().filter(|_| k == kind::MCP_CALL) {
                // The call's content hash, the name trajectories give it.
                (format!("call:{call}"), None)
            } else {
                (stable_hash(&p), None)
            };
            // The same request may serve several items (two sets asking the same thing), and
            // which item's event a link reaches depends on the order they finished: an
            // exchange is named by its request alone.
            let subject = if k == kind::LLM_EXCHANGE { None } else { subject };
            let steps =
                (k == crate::levels::export::SAMPLE_EVENT).then(|| p["plan_check"].clone()).filter(|v| !v.is_null());
            let entry = Arc::new(Entry { stage, kind: k, subject, reference });
            self.cache.insert(id, Node { entry, parents, llm, steps });
        }
        Ok(self.cache.get(&id))
    }

    /// A level sample's plan check (issue 38), from the latest `levels.sample` event among
    /// its roots: the decision on every step of its query's plan, by rule or LLM, with its
    /// reason, so a holder of the release reads them without the ledger. `None` for other
    /// samples.
    pub fn step_decisions(&mut self, roots: &[i64]) -> Result<Option<Value>> {
        let mut ids = roots.to_vec();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        for id in ids {
            if let Some(steps) = self.node(id)?.and_then(|n| n.steps.clone()) {
                return Ok(Some(steps));
            }
        }
        Ok(None)
    }

    /// The released lineage of a sample: every event its roots descend from, deduplicated
    /// and in pipeline order.
    pub fn lineage(&mut self, roots: &[i64]) -> Result<Vec<Arc<Entry>>> {
        let mut seen = BTreeSet::new();
        let mut stack = roots.to_vec();
        let mut out: BTreeSet<(usize, Arc<Entry>)> = BTreeSet::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            let Some(node) = self.node(id)? else { continue };
            stack.extend(node.parents.iter().copied());
            let entry = node.entry.clone();
            let llm = node.llm.clone();
            let order = self.stage_order.get(&entry.stage).copied().unwrap_or(usize::MAX);
            if let Some((hash, u)) = llm {
                self.llm.entry(hash).or_insert(u);
            }
            if self.seen.insert(entry.clone()) {
                *self.kinds.entry(entry.kind.clone()).or_default() += 1;
            }
            out.insert((order, entry));
        }
        Ok(out.into_iter().map(|(_, e)| e).collect())
    }
}

/// Where a released sample came from, for the lineage rules: `level` (ETOM), `chain`
/// (`synth chains` + `execute`), `real` (a log session), `dialogue` (`synth roleplay`).
pub fn origin(s: &crate::model::Sample) -> &'static str {
    match s.family {
        crate::model::Family::Etom => "level",
        crate::model::Family::Finmcp if s.id.starts_with("chain-") => "chain",
        crate::model::Family::Finmcp if s.id.starts_with("log:") => "real",
        crate::model::Family::Finmcp => "dialogue",
    }
}

/// The stages a released sample's lineage must reach (docs/release.md#lineage), whatever
/// the release: a level sample its export, for each tool its registry record and filter
/// decision, for L2, L4 and L5 the level stage's exchanges and for a call with
/// alternatives the final EFS set; a log sample its session's import, curation and split,
/// a chain its graph edges, its query and (when executed) its execution, a dialogue its
/// simulation; every log-track sample its validation and every reviewed sample its merge
/// decision.
pub fn required_stages(s: &crate::model::Sample, reviewed: bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let calls = || s.turns.iter().flat_map(|t| &t.reference_plan);
    match origin(s) {
        "level" => {
            let level = s.kind.level().unwrap_or(0);
            if calls().next().is_some() {
                out.extend(["registry-import", "filter"].map(String::from));
            }
            if calls().any(|c| c.alternatives.len() > 1) {
                out.push("efs-finalize".into());
            }
            if matches!(level, 2 | 4 | 5) {
                out.push(format!("levels-l{level}"));
            }
            out.push("levels-export".into());
        }
        origin => {
            out.extend(["logs-import", "logs-curate", "logs-split"].map(String::from));
            match origin {
                "chain" => {
                    out.extend(["graph-build", "synth-chains"].map(String::from));
                    if s.turns.iter().any(|t| !t.trajectory.is_empty()) {
                        out.push("execute".into());
                    }
                }
                "dialogue" => out.push("synth-roleplay".into()),
                _ => {}
            }
            out.push("validate".into());
        }
    }
    if reviewed {
        out.push("review-merge".into());
    }
    out
}

/// The last entry of a released sample's lineage: its publication in this release. Its
/// `ref` is the hash of the `release.published` event the stage records for the sample
/// (subject `sample:<id>`), whose payload names nothing that differs between reruns.
pub fn published(release: &str, id: &str, content_hash: &str, released_as: &str) -> (Entry, Value) {
    let payload = serde_json::json!({
        "release": release, "id": id, "content_hash": content_hash, "released_as": released_as,
    });
    let entry = Entry {
        stage: "release".into(),
        kind: "release.published".into(),
        subject: Some(crate::model::Sample::subject_for(id)),
        reference: stable_hash(&payload),
    };
    (entry, payload)
}

/// Hash of a payload without its timing fields (top level and one level down).
fn stable_hash(p: &Value) -> String {
    fn strip(v: &Value, depth: u8) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, _)| !VOLATILE.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), if depth > 0 { strip(v, depth - 1) } else { v.clone() }))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    crate::store::sha256_hex(&serde_json::to_vec(&strip(p, 1)).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_fields_do_not_change_the_reference() {
        let a = serde_json::json!({"tool": "S::a", "latency_ms": 3, "result": {"x": 1, "time": "t1"}});
        let b = serde_json::json!({"tool": "S::a", "latency_ms": 9, "result": {"x": 1, "time": "t2"}});
        let c = serde_json::json!({"tool": "S::b", "latency_ms": 9});
        assert_eq!(stable_hash(&a), stable_hash(&b));
        assert_ne!(stable_hash(&a), stable_hash(&c));
    }
}
