//! Unified samples in the reference projects' own shapes, through the wire types of
//! [`crate::formats`], so their evaluators (and `benchgen score --compat`) run on a release.
//!
//! ETOM (`level_N.json`): L1 and L3 list one tool per call, L2 one row holding every EFS
//! member of its single call, L4 one row of alternatives per call, L5 nothing. Dependencies
//! are the plan's `depends_on` (0-based, as ETOM writes them). The query id is the number of
//! the unified id `L<level>-<n>` (what `levels export` and `score` use), so a released ETOM
//! id names the same sample in every file.
//!
//! FinMCP: one OpenAI-style conversation per sample: per turn the user message, one
//! assistant message per parallel group of the reference plan (arguments and results from
//! the executed trajectory when it has them), the tool results, and the gold reply.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::formats::RecordId;
use crate::formats::etom::{GroundTruth, GroundTruthTool, LevelQuery};
use crate::formats::finmcp::{self, DiffLevel, Function, Message, ToolCall, ToolList};
use crate::model::{Kind, Sample, split_tool_id};

/// Tool descriptions by tool id, for the ETOM files.
pub type Descriptions = HashMap<String, String>;

/// The ETOM query number of a unified id `L<level>-<n>`.
pub fn etom_query_number(id: &str, level: u8) -> Option<u64> {
    id.strip_prefix(&format!("L{level}-"))?.parse().ok()
}

fn gt_tool(id: &str, deps: Option<Vec<usize>>, desc: &Descriptions) -> GroundTruthTool {
    let (server, tool) = split_tool_id(id).unwrap_or(("", id));
    GroundTruthTool {
        tool_id: id.to_string(),
        server_name: server.to_string(),
        tool_name: tool.to_string(),
        description: desc.get(id).cloned().unwrap_or_default(),
        dependencies: deps,
    }
}

/// One ETOM query of a unified ETOM sample (its first turn: ETOM queries have one).
pub fn to_etom(s: &Sample, query_id: u64, desc: &Descriptions) -> LevelQuery {
    let turn = s.turns.first();
    let plan = turn.map(|t| t.reference_plan.as_slice()).unwrap_or(&[]);
    let with_deps = !matches!(s.kind, Kind::L1);
    let deps = |c: &crate::model::PlanCall| with_deps.then(|| c.depends_on.clone());
    let gt: Vec<GroundTruth> = match s.kind {
        Kind::L1 | Kind::L3 => plan
            .iter()
            .map(|c| {
                GroundTruth::Tool(gt_tool(c.alternatives.first().map(String::as_str).unwrap_or(""), deps(c), desc))
            })
            .collect(),
        Kind::L2 | Kind::L4 => plan
            .iter()
            .map(|c| GroundTruth::Row(c.alternatives.iter().map(|a| gt_tool(a, deps(c), desc)).collect()))
            .collect(),
        _ => Vec::new(),
    };
    let visual = (s.kind == Kind::L3).then(|| {
        plan.iter()
            .enumerate()
            .map(|(i, c)| {
                let name = c.alternatives.first().and_then(|a| split_tool_id(a)).map(|(_, t)| t).unwrap_or("");
                format!("{}: {name}", i + 1)
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    LevelQuery {
        query_id: RecordId::Number(query_id.into()),
        query: turn.map(|t| t.user.clone()).unwrap_or_default(),
        ground_truth_tools_count: Some(gt.len()),
        ground_truth_tools: gt,
        dependency_visualization: visual,
        extra: Map::new(),
    }
}

/// The task label FinMCP writes for a kind.
pub fn finmcp_task(kind: Kind) -> &'static str {
    match kind {
        Kind::SingleTool => "single step",
        Kind::MultiTool => "multi step",
        _ => "multi turn",
    }
}

/// The tool name FinMCP messages use: the tool part of `server::tool`.
fn fin_name(id: &str) -> &str {
    split_tool_id(id).map(|(_, t)| t).unwrap_or(id)
}

/// One FinMCP sample of a unified FinMCP-family sample.
pub fn to_finmcp(s: &Sample) -> finmcp::Sample {
    let mut messages = Vec::new();
    let mut steps: Vec<Vec<String>> = Vec::new();
    let mut call_no = 0usize;
    let msg = |role: &str, content: Option<Value>| Message {
        role: role.into(),
        content,
        reasoning_content: None,
        tool_calls: None,
        tool_call_id: None,
        name: None,
        extra: Map::new(),
    };
    let mut para = 0u32;
    for turn in &s.turns {
        messages.push(msg("user", Some(Value::String(turn.user.clone()))));
        // The plan's groups in order; calls keep their plan order inside a group.
        let mut groups: Vec<u32> = turn.reference_plan.iter().map(|c| c.group).collect();
        groups.sort_unstable();
        groups.dedup();
        // The executed calls of the plan (left-out calls are recorded responses only).
        let gold = turn.gold_trajectory();
        for (gi, g) in groups.iter().enumerate() {
            let executed = gold.get(gi);
            let calls: Vec<(usize, &crate::model::PlanCall)> =
                turn.reference_plan.iter().enumerate().filter(|(_, c)| c.group == *g).collect();
            if calls.len() > 1 {
                para += 1;
            }
            let mut tool_calls = Vec::new();
            let mut results = Vec::new();
            let mut names = Vec::new();
            for (k, (_, c)) in calls.iter().enumerate() {
                let tool = c.alternatives.first().map(String::as_str).unwrap_or("");
                let rec = executed.and_then(|e| e.get(k)).filter(|r| r.tool == tool);
                let args = rec.map(|r| r.arguments.to_string()).unwrap_or_else(|| "{}".into());
                let call_id = format!("call_{call_no}");
                call_no += 1;
                tool_calls.push(ToolCall {
                    id: Some(call_id.clone()),
                    function: Function { name: fin_name(tool).to_string(), arguments: Value::String(args) },
                    kind: "function".into(),
                    index: Some(k),
                });
                let result = rec.and_then(|r| r.result.clone().or_else(|| r.error.clone())).unwrap_or_default();
                let mut m = msg("tool", Some(Value::String(result)));
                m.tool_call_id = Some(call_id);
                m.name = Some(fin_name(tool).to_string());
                results.push(m);
                names.push(fin_name(tool).to_string());
            }
            let mut a = msg("assistant", Some(Value::String(String::new())));
            a.tool_calls = Some(Some(tool_calls));
            messages.push(a);
            messages.extend(results);
            steps.push(names);
        }
        if let Some(reply) = &turn.gold_reply {
            messages.push(msg("assistant", Some(Value::String(reply.clone()))));
        }
    }
    let calls = s.reference_calls();
    let multi_turn = s.kind == Kind::MultiTurn;
    let tool_list = if multi_turn {
        let mut names: Vec<String> = steps.iter().flatten().cloned().collect();
        names.dedup();
        ToolList::Names(names)
    } else {
        ToolList::Steps(steps)
    };
    let first = s.turns.first();
    let mut extra = Map::new();
    extra.insert("benchgen_id".into(), json!(s.id));
    finmcp::Sample {
        id: RecordId::Text(s.id.clone()),
        scenery: (!s.scenario.is_empty()).then(|| s.scenario.join("-")),
        diff_level: Some(DiffLevel {
            turns: Some(s.turns.len() as u32),
            tool_number: Some(calls as u32),
            para_tool_call_number: Some(para),
            level: Some(s.difficulty.as_str().to_string()),
            extra: Map::new(),
        }),
        tool_list: Some(tool_list),
        question: (!multi_turn).then(|| first.map(|t| t.user.clone()).unwrap_or_default()),
        answer: (!multi_turn).then(|| first.and_then(|t| t.gold_reply.clone()).unwrap_or_default()),
        messages,
        first_class: s.scenario.first().cloned(),
        sub_class: s.scenario.get(1).cloned(),
        task: Some(finmcp_task(s.kind).to_string()),
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(line: &str) -> Sample {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn etom_shapes_follow_the_level() {
        let d = Descriptions::new();
        let l2 = sample(
            r#"{"id":"L2-4","family":"etom","kind":"L2","turns":[{"user":"q","reference_plan":[{"alternatives":["A::x","B::y"],"group":0}]}],"difficulty":"easy"}"#,
        );
        let q = serde_json::to_value(to_etom(&l2, 4, &d)).unwrap();
        assert_eq!(q["query_id"], 4);
        assert_eq!(q["ground_truth_tools"].as_array().unwrap().len(), 1, "one row of EFS members");
        assert_eq!(q["ground_truth_tools"][0][1]["tool_name"], "y");
        let l3 = sample(
            r#"{"id":"L3-1","family":"etom","kind":"L3","turns":[{"user":"q","reference_plan":[{"alternatives":["A::x"],"group":0},{"alternatives":["A::y"],"group":1,"depends_on":[0]}]}],"difficulty":"easy"}"#,
        );
        let q = serde_json::to_value(to_etom(&l3, 1, &d)).unwrap();
        assert_eq!(q["ground_truth_tools"][1]["dependencies"], json!([0]));
        assert_eq!(q["dependency_visualization"], "1: x\n2: y");
        assert_eq!(etom_query_number("L3-17", 3), Some(17));
        assert_eq!(etom_query_number("L3-x", 3), None);
    }

    #[test]
    fn finmcp_groups_become_assistant_messages() {
        let s = sample(
            r#"{"id":"m1","family":"finmcp","kind":"multi_tool","scenario":["A","B"],"turns":[{"user":"q","reference_plan":[{"alternatives":["S::a"],"group":0},{"alternatives":["S::b"],"group":0},{"alternatives":["S::c"],"group":1}],"gold_reply":"done","trajectory":[[{"tool":"S::a","arguments":{"x":1},"result":"ok"},{"tool":"S::b","arguments":{},"result":"ok2"}],[{"tool":"S::c","arguments":{},"result":"r"}]]}],"difficulty":"easy"}"#,
        );
        let f = to_finmcp(&s);
        let roles: Vec<&str> = f.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]);
        assert_eq!(f.messages[1].calls()[0].function.arguments, json!("{\"x\":1}"));
        assert_eq!(f.task.as_deref(), Some("multi step"));
        assert_eq!(f.diff_level.as_ref().unwrap().para_tool_call_number, Some(1));
    }
}
