//! Every CSV a scripted demo run writes is safe to open in a spreadsheet: one CSV writer
//! neutralises formula cells everywhere, and benchgen's own readers restore them (issue 10,
//! item 2; the test failed before its fix).

use std::path::Path;

use crate::support::scripted_llm::{Answer, ScriptedLlm};
use crate::support::{assert_code, tree};

const FORMULA: &str = "=HYPERLINK(\"http://evil.example\",\"x\")";

fn is_plain_number(c: &str) -> bool {
    crate::support::regex(r"^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$").unwrap().is_match(c)
}

/// Every CSV under `dir`: (file, line, cell) of cells a spreadsheet would evaluate, and
/// the number of neutralised cells (`'` before a trigger) seen.
fn formula_cells(dir: &Path) -> (Vec<String>, usize, Vec<String>) {
    let mut bad = Vec::new();
    let mut neutralised = 0;
    let mut files = Vec::new();
    for (rel, bytes) in tree(dir) {
        if !rel.ends_with(".csv") {
            continue;
        }
        files.push(rel.clone());
        let mut r = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(bytes.as_slice());
        for rec in r.records() {
            let rec = rec.unwrap_or_else(|e| panic!("{rel} is not CSV: {e}"));
            for c in rec.iter() {
                if c.starts_with(['=', '+', '-', '@', '\t', '\r']) && !is_plain_number(c) {
                    bad.push(format!("{rel}:{}: {c:?}", rec.position().unwrap().line()));
                }
                if c.strip_prefix('\'').is_some_and(|r| r.starts_with(['=', '+', '-', '@', '\t', '\r'])) {
                    neutralised += 1;
                }
            }
        }
    }
    (bad, neutralised, files)
}

#[test]
fn no_csv_of_a_demo_run_carries_a_formula_cell() {
    let mut p = crate::pipeline::full_project();
    // Registry text and model answers that start like formulas: a server name (so tool ids
    // in pairs.csv start with `-`), every tool description, and every model reason.
    let reg = p.read("raw/demo/registry.json");
    let mut v: serde_json::Value = serde_json::from_str(&reg).unwrap();
    for (i, s) in v["servers"].as_array_mut().unwrap().iter_mut().enumerate() {
        if i == 0 {
            let name = s["server_name"].as_str().unwrap().to_string();
            s["server_name"] = format!("-{name}").into();
        }
        for t in s["tools"].as_array_mut().unwrap() {
            let d = t["tool_description"].as_str().unwrap_or_default().to_string();
            t["tool_description"] = format!("{FORMULA} {d}").into();
        }
    }
    p.write("raw/demo/registry.json", serde_json::to_vec_pretty(&v).unwrap());
    let llm = ScriptedLlm::start(|seen| {
        let text = seen.all_text();
        let reason = format!("@{FORMULA}");
        Answer::json(if text.contains("genuine need") {
            serde_json::json!({"genuine": true, "reason": reason})
        } else if text.contains("satisfactory") {
            serde_json::json!({"satisfactory": true, "reason": reason})
        } else if text.contains("must run after it") {
            serde_json::json!({"dependent": true, "reason": reason})
        } else if text.contains("Write ONE user request") {
            serde_json::json!({"query": format!("={FORMULA}")})
        } else if text.contains("Write this user's goal") {
            serde_json::json!({"goal": reason, "requests": [reason, format!("{reason} again")]})
        } else if text.contains("You play a user") {
            serde_json::json!({"message": reason, "done": true})
        } else if text.contains("addressed the user's request") {
            serde_json::json!({"turns": [{"turn": 1, "addressed": true, "reason": reason}]})
        } else if text.contains("Does doing what the user asked need this call?")
            || text.contains("need a call to this step's tool?")
        {
            serde_json::json!({"needed": true, "reason": reason})
        } else if text.contains("Your earlier reply was wrong") {
            serde_json::json!({"answer": reason})
        } else if text.contains("Tool A: `") {
            serde_json::json!({"equivalent": true, "reason": reason})
        } else if text.contains("Anchor: `") {
            let n = text.matches("\nCandidate ").count();
            let v: Vec<_> =
                (1..=n).map(|i| serde_json::json!({"candidate": i, "equivalent": true, "reason": reason})).collect();
            serde_json::json!({"verdicts": v})
        } else if text.contains("Score the benchmark sample") {
            let scores: serde_json::Map<_, _> =
                ["relevance", "completeness", "consistency", "reliability", "freshness"]
                    .iter()
                    .map(|d| (d.to_string(), serde_json::json!(5)))
                    .collect();
            serde_json::json!({"note": reason, "scores": scores})
        } else if text.contains("User request:") {
            serde_json::json!({"selected": []})
        } else if text.contains("user requests") {
            serde_json::json!({"requests": ["+convert 5 EUR"]})
        } else if text.contains("Example") || text.contains("example") {
            serde_json::json!({"reason": reason, "verdict": "unsure"})
        } else {
            serde_json::json!({"reason": reason, "verdict": "drop"})
        })
    });
    let old = p.llm.as_ref().unwrap().base_url();
    let cfg = p.read("pipeline/demo.toml").replace(&old, &llm.base_url());
    p.write("pipeline/demo.toml", cfg);
    p.llm = Some(llm);

    assert_code(&p.run(&["run", "--until", "efs-topdown"]), 0);
    assert_code(&p.run(&["efs", "review", "export"]), 0);
    assert_code(&p.run(&["run", "--until", "graph-build"]), 0);
    assert_code(&p.run(&["graph", "review", "export"]), 0);
    assert_code(&p.run(&["run"]), 0);

    let (bad, neutralised, files) = formula_cells(p.root());
    assert!(bad.is_empty(), "formula cells:\n{}", bad.join("\n"));
    for f in ["artifacts/filter/dropped.csv", "artifacts/efs-pairs/pairs.csv", "reviews/efs/efs_review.csv"] {
        assert!(files.iter().any(|x| x == f), "{f} was not written: {files:?}");
    }
    assert!(neutralised > 10, "the injected formulas reached the CSVs ({neutralised} neutralised cells)");
    // Our own readers restore the cells: pairs.csv fed efs verify (the tool ids start with `-`).
    let pairs = p.read("artifacts/efs-pairs/pairs.csv");
    assert!(pairs.contains("'-"), "{pairs}");
}
