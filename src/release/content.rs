//! `release verify`'s content checks: every published-format file and both tables are
//! rebuilt record by record from `samples.jsonl` (with the same conversions the release
//! used, [`super::convert`] and [`super::sample_row`]) and compared with what the folder
//! holds, so an edit that keeps the file parseable, scoring and checksummed (one L2
//! alternative swapped for another real tool, `SHA256SUMS` recomputed) still fails, naming
//! the file, the sample and the field.
//!
//! What a record is checked against:
//! - `level_N.json`: [`super::convert::to_etom`] of the sample `L<N>-<query_id>`, with the
//!   descriptions of `tools.parquet`;
//! - `finmcp_<kind>.json`: [`super::convert::to_finmcp`] of the sample with its `id`;
//! - `samples.parquet`: the row [`super::sample_row`] makes of the sample, with its source
//!   stage, `released_as` and review from `lineage.jsonl` (the two columns taken from the
//!   review record itself, `review_score_mean` and `review_details`, are not rebuilt);
//! - `tools.parquet`: one row per tool the samples name, with the number of samples using
//!   it and its server and tool name from its id.
//!
//! Each file lists at most [`PER_FILE`] differences; the rest are counted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde_json::{Map, Value};

use super::convert;
use super::verified::Verified;
use crate::model::{Family, Kind, Sample};

/// At most this many differences are listed per file.
const PER_FILE: usize = 5;

/// The released samples and their lineage lines, by id.
pub struct Released<'a> {
    pub samples: &'a [Sample],
    pub lineage: &'a HashMap<String, Value>,
}

/// The first place where `got` differs from `want`: its JSON path and both values.
pub fn first_difference(path: &str, want: &Value, got: &Value) -> Option<(String, Value, Value)> {
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            keys.into_iter().find_map(|k| {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                first_difference(&p, a.get(k).unwrap_or(&Value::Null), b.get(k).unwrap_or(&Value::Null))
            })
        }
        (Value::Array(a), Value::Array(b)) => {
            let n = a.len().max(b.len());
            (0..n).find_map(|i| {
                let p = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => first_difference(&p, x, y),
                    (x, y) => Some((p, x.cloned().unwrap_or(Value::Null), y.cloned().unwrap_or(Value::Null))),
                }
            })
        }
        (a, b) if a == b => None,
        (a, b) => Some((if path.is_empty() { "(the record)".into() } else { path.to_string() }, a.clone(), b.clone())),
    }
}

/// Short text of a value for a failure line.
fn shown(v: &Value) -> String {
    let t = v.to_string();
    if t.chars().count() > 80 { format!("{}…", t.chars().take(80).collect::<String>()) } else { t }
}

/// Failures of one file, capped at [`PER_FILE`] listed.
struct FileReport<'v> {
    v: &'v mut Verified,
    name: String,
    n: usize,
}

impl<'v> FileReport<'v> {
    fn new(v: &'v mut Verified, name: &str) -> Self {
        FileReport { v, name: name.to_string(), n: 0 }
    }
    fn fail(&mut self, what: String) {
        self.n += 1;
        if self.n <= PER_FILE {
            self.v.fail(format!("{}: {what}", self.name));
        }
    }
    /// A record differing from its rebuild: names the sample and the field.
    fn differs(&mut self, record: &str, id: &str, want: &Value, got: &Value) {
        if let Some((field, w, g)) = first_difference("", want, got) {
            self.fail(format!(
                "{record} (sample `{id}`): field `{field}` is {} but samples.jsonl makes {}",
                shown(&g),
                shown(&w)
            ));
        }
    }
    fn finish(self, checked: usize) {
        if self.n > PER_FILE {
            self.v.fail(format!("{}: … and {} more differences", self.name, self.n - PER_FILE));
        }
        if self.n == 0 {
            self.v.checks.push(format!("{}: all {checked} records match samples.jsonl", self.name));
        }
    }
}

/// Compares one published file (records `got`, keyed by sample id) with the rebuilt records
/// `want`: every record must be a sample's and every sample of the part must be there.
fn compare_part(v: &mut Verified, name: &str, want: BTreeMap<String, Value>, got: Vec<(String, String, Value)>) {
    let mut r = FileReport::new(v, name);
    let mut seen = BTreeSet::new();
    for (record, id, value) in &got {
        if !seen.insert(id.clone()) {
            r.fail(format!("{record}: sample `{id}` appears twice"));
            continue;
        }
        match want.get(id) {
            None => r.fail(format!("{record}: no sample `{id}` of this part in samples.jsonl")),
            Some(w) => r.differs(record, id, w, value),
        }
    }
    for id in want.keys().filter(|id| !seen.contains(*id)) {
        r.fail(format!("sample `{id}` of samples.jsonl is missing"));
    }
    r.finish(got.len());
}

fn read_array(path: &Path) -> Result<Vec<Value>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    serde_json::from_reader(std::io::BufReader::with_capacity(1 << 20, f)).map_err(|e| format!("not a JSON array: {e}"))
}

/// Descriptions of the registry tools, from `tools.parquet` (what the ETOM files carry).
fn descriptions(tools: &[Map<String, Value>]) -> convert::Descriptions {
    tools
        .iter()
        .filter(|t| t["catalog"] == "filter")
        .map(|t| (t["tool_id"].as_str().unwrap_or("").to_string(), t["description"].as_str().unwrap_or("").to_string()))
        .collect()
}

/// The ETOM level files against their samples.
pub fn check_levels(dir: &Path, v: &mut Verified, rel: &Released, tools: &[Map<String, Value>]) {
    let desc = descriptions(tools);
    for level in 1..=5u8 {
        let name = format!("level_{level}.json");
        let path = dir.join(&name);
        if !path.exists() {
            continue;
        }
        let Ok(records) = read_array(&path) else { continue }; // the format check names it
        let want: BTreeMap<String, Value> = rel
            .samples
            .iter()
            .filter(|s| s.family == Family::Etom && s.kind.level() == Some(level))
            .filter_map(|s| {
                let n = convert::etom_query_number(&s.id, level)?;
                Some((s.id.clone(), serde_json::to_value(convert::to_etom(s, n, &desc)).ok()?))
            })
            .collect();
        let got = records
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                let qid = match &q["query_id"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (format!("query {qid} (record {i})"), format!("L{level}-{qid}"), q)
            })
            .collect();
        compare_part(v, &name, want, got);
    }
}

/// The FinMCP files against their samples.
pub fn check_finmcp(dir: &Path, v: &mut Verified, rel: &Released) {
    for kind in [Kind::SingleTool, Kind::MultiTool, Kind::MultiTurn] {
        let name = format!("finmcp_{}.json", kind.as_str());
        let path = dir.join(&name);
        if !path.exists() {
            continue;
        }
        let Ok(records) = read_array(&path) else { continue };
        let want: BTreeMap<String, Value> = rel
            .samples
            .iter()
            .filter(|s| s.kind == kind)
            .filter_map(|s| Some((s.id.clone(), serde_json::to_value(convert::to_finmcp(s)).ok()?)))
            .collect();
        let got = records
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let id = s["id"].as_str().map(str::to_string).unwrap_or_else(|| s["id"].to_string());
                (format!("record {i}"), id, s)
            })
            .collect();
        compare_part(v, &name, want, got);
    }
}

/// The tools a sample names, each once.
fn sample_tools(s: &Sample) -> BTreeSet<&str> {
    s.turns.iter().flat_map(|t| &t.reference_plan).flat_map(|c| &c.alternatives).map(String::as_str).collect()
}

/// Columns of `samples.parquet` rebuilt from the sample and its lineage line.
const REBUILT: &[&str] = &[
    "id",
    "family",
    "kind",
    "level",
    "difficulty",
    "category",
    "scenario",
    "turns",
    "calls",
    "steps",
    "distinct_tools",
    "out_of_scope",
    "source",
    "author",
    "review_decision",
    "decided_by",
    "content_hash",
    "released_as",
];

/// `samples.parquet` against the samples and their lineage lines.
pub fn check_samples_table(v: &mut Verified, rel: &Released, rows: &[Map<String, Value>]) {
    let want: BTreeMap<String, Value> = rel
        .samples
        .iter()
        .map(|s| {
            let line = rel.lineage.get(&s.id).cloned().unwrap_or(Value::Null);
            let decision = line["review"].as_object().map(|r| super::Decision {
                id: s.id.clone(),
                content_hash: s.content_hash(),
                decision: r.get("decision").and_then(Value::as_str).unwrap_or("").to_string(),
                decided_by: r.get("decided_by").and_then(Value::as_str).unwrap_or("").to_string(),
                extra: Map::new(),
            });
            let row = super::sample_row(
                s,
                line["source"]["stage"].as_str().unwrap_or(""),
                s.content_hash(),
                sample_tools(s).len(),
                line["released_as"].as_str().unwrap_or("").to_string(),
                decision.as_ref(),
            );
            (s.id.clone(), pick(serde_json::to_value(row).unwrap_or(Value::Null)))
        })
        .collect();
    let got = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let id = r.get("id").and_then(Value::as_str).unwrap_or("").to_string();
            (format!("row {i}"), id, pick(Value::Object(r.clone())))
        })
        .collect();
    compare_part(v, "samples.parquet", want, got);
}

/// The rebuilt columns of a row.
fn pick(row: Value) -> Value {
    let Value::Object(m) = row else { return row };
    Value::Object(m.into_iter().filter(|(k, _)| REBUILT.contains(&k.as_str())).collect())
}

/// `tools.parquet` against the tools the samples name: the same tools, each with the
/// number of samples using it and the server and tool name of its id.
pub fn check_tools_table(v: &mut Verified, rel: &Released, rows: &[Map<String, Value>]) {
    let mut used: BTreeMap<&str, u32> = BTreeMap::new();
    for s in rel.samples {
        for t in sample_tools(s) {
            *used.entry(t).or_default() += 1;
        }
    }
    let mut r = FileReport::new(v, "tools.parquet");
    let mut seen = BTreeSet::new();
    for (i, row) in rows.iter().enumerate() {
        let id = row.get("tool_id").and_then(Value::as_str).unwrap_or("");
        seen.insert(id.to_string());
        let Some(n) = used.get(id) else {
            r.fail(format!("row {i}: tool `{id}` is used by no sample of samples.jsonl"));
            continue;
        };
        let (server, tool) = match crate::model::split_tool_id(id) {
            Some((s, t)) if row["catalog"] == "filter" => (s, t),
            _ => ("", id),
        };
        let want = serde_json::json!({"tool_id": id, "server": server, "tool": tool, "samples": n});
        let got =
            serde_json::json!({"tool_id": id, "server": row["server"], "tool": row["tool"], "samples": row["samples"]});
        if let Some((field, w, g)) = first_difference("", &want, &got) {
            r.fail(format!(
                "row {i} (tool `{id}`): field `{field}` is {} but samples.jsonl makes {}",
                shown(&g),
                shown(&w)
            ));
        }
    }
    for id in used.keys().filter(|id| !seen.contains(**id)) {
        r.fail(format!("tool `{id}` of samples.jsonl is missing"));
    }
    r.finish(rows.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_difference_names_its_path() {
        let a = json!({"q": 1, "gt": [[{"tool_id": "A::x"}, {"tool_id": "B::u"}]]});
        let b = json!({"q": 1, "gt": [[{"tool_id": "A::x"}, {"tool_id": "B::v"}]]});
        assert_eq!(first_difference("", &a, &b), Some(("gt[0][1].tool_id".into(), json!("B::u"), json!("B::v"))));
        assert_eq!(first_difference("", &a, &a), None);
        let c = json!({"q": 1, "gt": [[{"tool_id": "A::x"}]]});
        assert_eq!(first_difference("", &a, &c).unwrap().0, "gt[0][1]");
        assert_eq!(first_difference("", &json!({"q": 1}), &json!({"q": 1, "x": 2})).unwrap().0, "x");
    }
}
