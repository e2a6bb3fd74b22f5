//! Queries the agent runs, and whether a run kept a query's tool chain.
//!
//! Queries file: JSON Lines or a JSON array of `{"id", "query", "chain"?}`; `chain` is a
//! list of tool ids (each depends on the one before) or of `{"tool", "depends_on": [i]}`
//! (indices of earlier steps). A trajectory **preserves the chain** when every chain tool
//! was called successfully in a later group than each tool it depends on; extra calls are
//! allowed.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::CallRecord;
use crate::error::{InputError, Problem};
use crate::mcp::CallOutcome;

/// One step of a required dependency chain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChainStep {
    pub tool: String,
    /// Indices of earlier steps whose output this one needs.
    #[serde(default)]
    pub depends_on: Vec<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Query {
    pub id: String,
    pub query: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<ChainStep>,
}

/// Parse a queries file (JSON Lines or a JSON array). Every problem is reported at once.
pub fn parse_queries(bytes: &[u8], file: &str) -> Result<Vec<Query>, InputError> {
    let text = String::from_utf8_lossy(bytes);
    let trimmed = text.trim_start();
    let records: Vec<(String, Result<Value, String>)> = if trimmed.starts_with('[') {
        match crate::json::from_str::<Vec<Value>>(trimmed) {
            Ok(v) => v.into_iter().enumerate().map(|(i, r)| (format!("[{i}]"), Ok(r))).collect(),
            Err(e) => {
                return Err(InputError { file: file.into(), problems: vec![Problem::new("json", e.to_string())] });
            }
        }
    } else {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (format!("line {}", i + 1), crate::json::value_from_str(l).map_err(|e| e.to_string())))
            .collect()
    };
    let mut problems = Vec::new();
    let mut out = Vec::new();
    let mut ids = BTreeSet::new();
    for (loc, r) in records {
        let v = match r {
            Ok(v) => v,
            Err(e) => {
                problems.push(Problem::new(&loc, format!("not JSON: {e}")));
                continue;
            }
        };
        let id = match v.get("id") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => {
                problems.push(Problem::new(&loc, "`id` (a non-empty string or a number) is missing"));
                continue;
            }
        };
        let loc = format!("{loc} (`{id}`)");
        let Some(query) = v.get("query").and_then(Value::as_str).filter(|q| !q.trim().is_empty()) else {
            problems.push(Problem::new(&loc, "`query` (a non-empty string) is missing"));
            continue;
        };
        if !ids.insert(id.clone()) {
            problems.push(Problem::new(&loc, "duplicate id"));
        }
        let mut chain = Vec::new();
        match v.get("chain") {
            None | Some(Value::Null) => {}
            Some(Value::Array(steps)) => {
                for (i, s) in steps.iter().enumerate() {
                    match s {
                        Value::String(t) => chain
                            .push(ChainStep { tool: t.clone(), depends_on: if i == 0 { vec![] } else { vec![i - 1] } }),
                        other => match serde_json::from_value::<ChainStep>(other.clone()) {
                            Ok(step) => {
                                if let Some(d) = step.depends_on.iter().find(|d| **d >= i) {
                                    problems.push(Problem::new(
                                        format!("{loc}.chain[{i}].depends_on"),
                                        format!("refers to step {d}, which is not earlier"),
                                    ));
                                }
                                chain.push(step);
                            }
                            Err(e) => problems.push(Problem::new(format!("{loc}.chain[{i}]"), e.to_string())),
                        },
                    }
                }
            }
            Some(_) => problems.push(Problem::new(format!("{loc}.chain"), "must be an array")),
        }
        out.push(Query { id, query: query.to_string(), chain });
    }
    if problems.is_empty() { Ok(out) } else { Err(InputError { file: file.into(), problems }) }
}

/// The result of checking a trajectory against a required chain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChainCheck {
    pub preserved: bool,
    /// The group matched to each chain step (`None`: no fitting successful call).
    pub groups: Vec<Option<usize>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// Does a trajectory preserve a chain? Each step is matched, in order, to the earliest
/// successful call of its tool whose group comes after the groups of all its
/// dependencies. Extra calls are allowed.
pub fn check_chain(chain: &[ChainStep], calls: &[CallRecord]) -> ChainCheck {
    let mut groups: Vec<Option<usize>> = Vec::with_capacity(chain.len());
    let mut problems = Vec::new();
    for (i, step) in chain.iter().enumerate() {
        let deps: Vec<Option<usize>> = step.depends_on.iter().map(|d| groups.get(*d).copied().flatten()).collect();
        let ok_groups: Vec<usize> = calls
            .iter()
            .filter(|c| c.tool_id.as_deref() == Some(step.tool.as_str()) && matches!(c.outcome, CallOutcome::Ok { .. }))
            .map(|c| c.group)
            .collect();
        if deps.iter().any(Option::is_none) {
            problems.push(format!("step {i} `{}`: a step it depends on was not matched", step.tool));
            groups.push(None);
            continue;
        }
        let after = deps.iter().flatten().max().copied();
        let g = ok_groups.iter().copied().filter(|g| after.is_none_or(|a| *g > a)).min();
        match g {
            Some(g) => groups.push(Some(g)),
            None => {
                problems.push(if ok_groups.is_empty() {
                    format!("step {i} `{}` was never called successfully", step.tool)
                } else {
                    format!(
                        "step {i} `{}` was called in group(s) {ok_groups:?}, none after group {} of what it depends on",
                        step.tool,
                        after.unwrap_or(0)
                    )
                });
                groups.push(None);
            }
        }
    }
    ChainCheck { preserved: problems.is_empty(), groups, problems }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::CallOutcome;
    use serde_json::json;

    fn call(group: usize, tool: &str, ok: bool) -> CallRecord {
        let output = crate::mcp::ToolOutput::note("x");
        CallRecord {
            index: 0,
            group,
            call_id: String::new(),
            function: String::new(),
            tool_id: Some(tool.into()),
            server: None,
            arguments: json!({}),
            executed: true,
            outcome: if ok { CallOutcome::Ok { output } } else { CallOutcome::ToolError { output } },
            exchange: None,
            call_hash: String::new(),
        }
    }

    #[test]
    fn chain_check_takes_the_earliest_fitting_successful_call() {
        let chain =
            parse_queries(br#"{"id": 1, "query": "q", "chain": ["a", "b", "c"]}"#, "f").unwrap()[0].chain.clone();
        assert_eq!(chain[2].depends_on, [1]);
        // `b` in group 0 is too early, the one in group 2 fits; `c` failed in 3, succeeded in 4.
        let calls = [
            call(0, "b", true),
            call(1, "a", true),
            call(1, "x", true),
            call(2, "b", true),
            call(3, "c", false),
            call(4, "c", true),
        ];
        let c = check_chain(&chain, &calls);
        assert!(c.preserved, "{c:?}");
        assert_eq!(c.groups, [Some(1), Some(2), Some(4)]);
        // Only a failed `c`: broken, and the reason says so.
        let c = check_chain(&chain, &calls[..5]);
        assert!(!c.preserved);
        assert!(c.problems[0].contains("`c` was never called successfully"), "{c:?}");
    }
}
