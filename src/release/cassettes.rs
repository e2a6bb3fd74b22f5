//! `cassettes.jsonl`: the recorded tool responses of every released sample, so an agent
//! evaluated on the release (`benchgen eval`) meets the values the reference trajectory
//! met, offline and byte for byte the same on every run.
//!
//! Wire format, one JSON object per line, one line per sample of `samples.jsonl` in the
//! same (id) order:
//!
//! ```json
//! {"id": "fin-b", "calls": [{"tool": "get_fx", "arguments": {"symbol": "ACME"}, "result": "9.2"}]}
//! ```
//!
//! `calls` are the successful calls of the sample's executed trajectories (every turn),
//! keyed by tool and arguments: one recording per tool and canonical arguments (key order
//! does not matter; the first one in trajectory order wins), sorted by tool, then by the
//! canonical arguments' JSON text. A call that failed, or has no result, is not recorded; a
//! sample that was never executed (the registry track) has no calls. A call of the
//! evaluated agent that matches no recording is answered with a value shaped by the tool's
//! schema, and says so (see docs/eval.md).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{InputError, Problem};
use crate::model::Sample;
use crate::sandbox::generate::canonical;

/// The file in the release folder.
pub const FILE: &str = "cassettes.jsonl";

/// The recorded responses of one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cassette {
    pub id: String,
    pub calls: Vec<Recording>,
}

/// One recorded call: what was asked and what the tool answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recording {
    /// Tool id as the sample names it (`server::tool`, or a log tool's bare name).
    pub tool: String,
    pub arguments: Value,
    pub result: String,
}

impl Cassette {
    /// The cassette of one sample: its successful recorded calls, one per tool and
    /// canonical arguments, sorted.
    pub fn of_sample(s: &Sample) -> Self {
        let mut calls: BTreeMap<(String, String), Recording> = BTreeMap::new();
        for call in s.turns.iter().flat_map(|t| t.trajectory.iter().flatten()) {
            let (Some(result), None) = (&call.result, &call.error) else { continue };
            let args = canonical(&call.arguments);
            calls.entry((call.tool.clone(), args.to_string())).or_insert_with(|| Recording {
                tool: call.tool.clone(),
                arguments: args,
                result: result.clone(),
            });
        }
        Cassette { id: s.id.clone(), calls: calls.into_values().collect() }
    }

    /// The recorded result of this call, if any (arguments compared canonically).
    pub fn get(&self, tool: &str, args: &Value) -> Option<&str> {
        let args = canonical(args);
        self.calls.iter().find(|c| c.tool == tool && c.arguments == args).map(|c| c.result.as_str())
    }
}

/// Write `dir/cassettes.jsonl` from `dir/samples.jsonl` (streamed line by line); returns
/// the number of recorded calls.
pub fn write(dir: &Path) -> Result<usize> {
    let src = dir.join("samples.jsonl");
    let f = std::fs::File::open(&src).with_context(|| format!("cannot read `{}`", src.display()))?;
    let dst = dir.join(FILE);
    let out = std::fs::File::create(&dst).with_context(|| format!("cannot create `{}`", dst.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
    let mut recorded = 0;
    for (i, line) in BufReader::with_capacity(1 << 20, f).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read `{}`", src.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let s: Sample = serde_json::from_str(&line).with_context(|| format!("samples.jsonl line {}", i + 1))?;
        let c = Cassette::of_sample(&s);
        recorded += c.calls.len();
        serde_json::to_writer(&mut out, &c)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(recorded)
}

/// Read a `cassettes.jsonl` (`file` names it in errors): the cassettes by sample id. A line
/// that does not parse, or an id given twice, is an error naming the line.
pub fn read(bytes: &[u8], file: &str) -> Result<BTreeMap<String, Cassette>> {
    let mut out = BTreeMap::new();
    let mut problems = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Cassette>(line) {
            Ok(c) => {
                if let Some(prev) = out.insert(c.id.clone(), c) {
                    problems
                        .push(Problem::new(format!("line {} ({})", i + 1, prev.id), "a second cassette for this id"));
                }
            }
            Err(e) => problems.push(Problem::new(format!("line {}", i + 1), format!("not a cassette: {e}"))),
        }
        if problems.len() >= 20 {
            break;
        }
    }
    if !problems.is_empty() {
        return Err(InputError { file: file.to_string(), problems }.into());
    }
    Ok(out)
}

/// For `release verify`: every line of `cassettes.jsonl` parses and names a sample of
/// `samples.jsonl` (`ids`); the check's line goes to `checks`, its problems to `failures`.
/// A release made before cassettes has none, and nothing is checked.
pub fn verify(dir: &Path, ids: &[String], checks: &mut Vec<String>, failures: &mut Vec<String>) {
    let Ok(bytes) = std::fs::read(dir.join(FILE)) else { return };
    let cassettes = match read(&bytes, FILE) {
        Ok(c) => c,
        Err(e) => return failures.push(format!("{e:#}")),
    };
    let known: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let before = failures.len();
    for id in cassettes.keys().filter(|id| !known.contains(id.as_str())).take(20) {
        failures.push(format!("{FILE}: cassette `{id}` names no sample of samples.jsonl"));
    }
    if failures.len() == before {
        let calls: usize = cassettes.values().map(|c| c.calls.len()).sum();
        checks.push(format!("{FILE}: {} cassettes parse ({calls} recorded calls)", cassettes.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cassette_keeps_one_successful_recording_per_tool_and_canonical_arguments() {
        let s: Sample = serde_json::from_value(json!({
        "id": "m1", "family": "finmcp", "kind": "multi_turn", "difficulty": "easy",
        "turns": [
            {"user": "q", "reference_plan": [], "trajectory": [[
                {"tool": "b", "arguments": {"y": 2, "x": 1}, "result": "first"},
                {"tool": "a", "arguments": {}, "error": "boom"},
            ]]},
            {"user": "q2", "reference_plan": [], "trajectory": [[
                {"tool": "b", "arguments": {"x": 1, "y": 2}, "result": "second"},
                {"tool": "a", "arguments": {"k": [2, 1]}, "result": "ok"},
            ]]},
        ]}))
        .unwrap();
        let c = Cassette::of_sample(&s);
        let tools: Vec<(&str, &str)> = c.calls.iter().map(|r| (r.tool.as_str(), r.result.as_str())).collect();
        assert_eq!(tools, [("a", "ok"), ("b", "first")], "failed calls are not recorded; the first wins");
        assert_eq!(c.get("b", &json!({"y": 2, "x": 1})), Some("first"));
        assert_eq!(c.get("a", &json!({"k": [1, 2]})), None, "array order matters");
        assert_eq!(c.get("a", &json!({"k": [2, 1]})), Some("ok"));
        let line = serde_json::to_string(&c).unwrap();
        let back = read(line.as_bytes(), "cassettes.jsonl").unwrap();
        assert_eq!(back["m1"], c);
        let err = read(format!("{line}\n{line}\n{{}}\n").as_bytes(), "cassettes.jsonl").unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("line 2 (m1)") && text.contains("line 3"), "{text}");
    }
}
