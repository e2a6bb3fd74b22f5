//! Fixture builders for the score tests: benchmark and prediction files in the published
//! formats, written to a temp dir and scored through the library in every mode.
#![allow(dead_code)]

use std::path::PathBuf;

use benchgen::score::report::Row;
use benchgen::score::{Mode, Options, Report};
use serde_json::{Value, json};

pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Self {
        Fixture { dir: tempfile::tempdir().expect("tempdir") }
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write fixture");
        p
    }

    pub fn jsonl(&self, name: &str, lines: &[Value]) -> PathBuf {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        self.write(name, &text)
    }
}

/// An ETOM tool object as in `level_N.json`.
pub fn t(server: &str, tool: &str, deps: &[usize]) -> Value {
    json!({"tool_id": format!("{server}::{tool}"), "server_name": server, "tool_name": tool, "description": "", "dependencies": deps})
}

/// A selection as the orchestrators return it: a JSON string.
pub fn sel(server: &str, tool: &str) -> Value {
    Value::String(json!({"server": server, "tool_name": tool}).to_string())
}

pub fn run(benches: Vec<PathBuf>, pred: PathBuf, mode: Mode) -> Report {
    benchgen::score::run(&Options { benches, pred, bench_format: None, pred_format: None, etom_level: None, mode })
        .expect("score runs")
}

/// Score ETOM level-`level` queries (`(query_id, ground_truth_tools)`) with `{id, prediction}`
/// records, corrected and compat.
pub fn etom(level: u8, queries: &[(u32, Value)], preds: &[(String, Value)]) -> (Report, Report) {
    let f = Fixture::new();
    let q: Vec<Value> = queries
        .iter()
        .map(|(id, gt)| json!({"query_id": id, "query": "q", "ground_truth_tools": gt, "ground_truth_tools_count": gt.as_array().map_or(0, Vec::len)}))
        .collect();
    let bench = f.write(&format!("level_{level}.json"), &Value::Array(q).to_string());
    let lines: Vec<Value> = preds.iter().map(|(id, p)| json!({"id": id, "prediction": p})).collect();
    let pred = f.jsonl("pred.jsonl", &lines);
    (run(vec![bench.clone()], pred.clone(), Mode::Corrected), run(vec![bench], pred, Mode::CompatEtom))
}

pub fn row<'a>(rep: &'a Report, dimension: &str, key: &str) -> &'a Row {
    rep.sections
        .iter()
        .find(|s| s.dimension == dimension)
        .and_then(|s| s.rows.iter().find(|r| r.key == key))
        .unwrap_or_else(|| panic!("no row {dimension}={key}"))
}

/// A FinMCP gold or predicted conversation from turns of groups of tool names.
pub fn messages(turns: &[(&str, &[&[&str]])]) -> Value {
    let mut m = Vec::new();
    for (user, groups) in turns {
        m.push(json!({"role": "user", "content": user}));
        for g in groups.iter() {
            let calls: Vec<Value> = g
                .iter()
                .enumerate()
                .map(|(i, n)| json!({"id": format!("call_{i}"), "type": "function", "index": i, "function": {"name": n, "arguments": "{}"}}))
                .collect();
            m.push(json!({"role": "assistant", "tool_calls": calls}));
            for i in 0..g.len() {
                m.push(json!({"role": "tool", "content": "{}", "tool_call_id": format!("call_{i}")}));
            }
        }
        m.push(json!({"role": "assistant", "content": "answer"}));
    }
    Value::Array(m)
}

/// A FinMCP sample record.
pub fn fin_sample(id: u32, task: &str, scenery: &str, level: &str, msgs: Value) -> Value {
    json!({"id": id, "scenery": scenery, "diff_level": {"turns": 1, "tool_number": 1, "level": level},
           "messages": msgs, "first-class": "主类", "sub-class": "子类", "task": task})
}

/// Score FinMCP samples with inference records, corrected and compat.
pub fn finmcp(samples: &[Value], records: &[Value]) -> (Report, Report) {
    let f = Fixture::new();
    let bench = f.write("bench.json", &Value::Array(samples.to_vec()).to_string());
    let pred = f.write("eval.json", &Value::Array(records.to_vec()).to_string());
    (run(vec![bench.clone()], pred.clone(), Mode::Corrected), run(vec![bench], pred, Mode::CompatFinmcp))
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}
