//! `benchgen score` end to end: the real example files from `../shared/data` with oracle
//! predictions built from them, every output form, and malformed prediction files.

use crate::support::score_fixtures;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::{Value, json};

fn data() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    if p.join("etom/level_1.examples.json").exists() && p.join("finmcp/demo_samples.json").exists() {
        Some(p)
    } else {
        eprintln!("skipping: ../shared/data (ETOM and FinMCP example files) is not beside the repository");
        None
    }
}

fn benchgen() -> Command {
    let mut c = Command::cargo_bin("benchgen").unwrap();
    c.env("BENCHGEN_NO_PROGRESS", "1").env_remove("BENCHGEN_CONFIG");
    c
}

fn etom_files(d: &Path) -> Vec<PathBuf> {
    (1..=5).map(|l| d.join(format!("etom/level_{l}.examples.json"))).collect()
}

/// Oracle predictions in the orchestrator format: one correct tool per step, in dependency
/// order (the first alternative of each step), one record per distinct id.
fn etom_oracle(files: &[PathBuf]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (l, f) in files.iter().enumerate() {
        let level = l + 1;
        let queries: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        for q in queries {
            let id = format!("L{level}-{}", q["query_id"]);
            if !seen.insert(id.clone()) {
                continue;
            }
            let steps: Vec<&Value> = q["ground_truth_tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| if e.is_array() { &e[0] } else { e })
                .collect();
            // Dependency order: repeatedly take the steps whose dependencies are all taken.
            let mut order: Vec<usize> = Vec::new();
            while order.len() < steps.len() {
                for (i, s) in steps.iter().enumerate() {
                    let deps: Vec<usize> = s["dependencies"]
                        .as_array()
                        .map(|a| a.iter().map(|d| d.as_u64().unwrap() as usize).collect())
                        .unwrap_or_default();
                    if !order.contains(&i) && deps.iter().all(|d| order.contains(d)) {
                        order.push(i);
                    }
                }
            }
            let take = if level == 2 { 1 } else { order.len() };
            let pred: Vec<Value> = order
                .iter()
                .take(take)
                .map(|&i| {
                    Value::String(
                        json!({"server": steps[i]["server_name"], "tool_name": steps[i]["tool_name"]}).to_string(),
                    )
                })
                .collect();
            out.push(json!({"id": id, "prediction": pred}));
        }
    }
    out
}

fn finmcp_oracle(d: &Path) -> Value {
    let samples: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(d.join("finmcp/demo_samples.json")).unwrap()).unwrap();
    Value::Array(samples.iter().map(|s| json!({"id": s["id"], "messages_pred": s["messages"]})).collect())
}

#[test]
fn real_examples_oracle_scores_100_corrected() {
    let Some(d) = data() else { return };
    let f = score_fixtures::Fixture::new();
    let etom = etom_files(&d);
    let ep = f.jsonl("etom_pred.jsonl", &etom_oracle(&etom));
    let fp = f.write("fin_pred.json", &finmcp_oracle(&d).to_string());

    let mut cmd = benchgen();
    cmd.arg("--json").arg("score");
    for b in &etom {
        cmd.arg("--bench").arg(b);
    }
    let out = cmd.arg("--pred").arg(&ep).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    for s in rep["sections"].as_array().unwrap() {
        for r in s["rows"].as_array().unwrap() {
            assert_eq!(r["em"], 1.0, "{} {}", s["dimension"], r["key"]);
            assert_eq!(r["calls_micro"]["f1"], 1.0);
        }
    }
    // 12 distinct ids scored; the two duplicated ids are diagnostics, not silent drops.
    assert_eq!(rep["samples"], 12);
    assert_eq!(rep["diagnostics"].as_array().unwrap().len(), 2);

    let out = benchgen()
        .args(["--json", "score", "--bench"])
        .arg(d.join("finmcp/demo_samples.json"))
        .arg("--pred")
        .arg(&fp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    let all = &rep["sections"][0]["rows"][0];
    assert_eq!((all["n"].as_u64(), all["em"].as_f64()), (Some(6), Some(1.0)));
    assert_eq!(all["set_micro"]["f1"], 1.0);
}

#[test]
fn real_examples_compat_reproduces_the_published_l2_defect() {
    let Some(d) = data() else { return };
    let f = score_fixtures::Fixture::new();
    let etom = etom_files(&d);
    let ep = f.jsonl("etom_pred.jsonl", &etom_oracle(&etom));
    let mut cmd = benchgen();
    cmd.arg("--json").args(["score", "--compat", "etom"]);
    for b in &etom {
        cmd.arg("--bench").arg(b);
    }
    let out = cmd.arg("--pred").arg(&ep).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rep["sections"][0]["rows"].as_array().unwrap();
    let l2 = rows.iter().find(|r| r["key"] == "L2").unwrap();
    // The two EFS queries (605, 606: three rows each) fail with one correct tool.
    assert_eq!((l2["n"].as_u64(), l2["em"].as_f64()), (Some(4), Some(0.5)));
    // The published runner scores every entry, duplicates included.
    let l3 = rows.iter().find(|r| r["key"] == "L3").unwrap();
    assert_eq!(l3["n"], 3);
}

#[test]
fn real_examples_all_outputs_and_compat_finmcp() {
    let Some(d) = data() else { return };
    let f = score_fixtures::Fixture::new();
    let fp = f.write("fin_pred.json", &finmcp_oracle(&d).to_string());
    let md = f.dir.path().join("report.md");
    let per = f.dir.path().join("per_sample.jsonl");
    let out = benchgen()
        .args(["score", "--compat", "finmcp", "--bench"])
        .arg(d.join("finmcp/demo_samples.json"))
        .arg("--pred")
        .arg(&fp)
        .arg("--markdown")
        .arg(&md)
        .arg("--per-sample")
        .arg(&per)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("consist_mean") && text.contains("PlatformTechnicalSupport"), "{text}");
    let md = std::fs::read_to_string(md).unwrap();
    assert!(md.contains("## By class_Level1") && md.contains("| all | 6 | 1.0000"), "{md}");
    let lines: Vec<Value> =
        std::fs::read_to_string(per).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 6);
    assert!(lines.iter().all(|l| l["em"] == true && l["compat_groups"].is_array()));
}

#[test]
fn malformed_predictions_give_per_line_diagnostics_and_a_finished_report() {
    let f = score_fixtures::Fixture::new();
    let bench = f.jsonl(
        "bench.jsonl",
        &(1..=6)
            .map(|i| {
                json!({"id": format!("s{i}"), "family": "etom", "kind": "L1", "scenario": ["main", "sub"],
                       "turns": [{"user": "u", "reference_plan": [{"alternatives": ["S::a"], "group": 0, "depends_on": []}]}],
                       "out_of_scope": false, "difficulty": "easy", "provenance_id": ""})
            })
            .collect::<Vec<_>>(),
    );
    let pred = f.write(
        "pred.jsonl",
        concat!(
            "{\"id\": \"s1\", \"turns\": [{\"calls\": [{\"tool\": \"S::a\"}]}]}\n",
            "{this is not json\n",
            "{\"id\": \"nope\", \"turns\": []}\n",
            "{\"id\": \"s2\", \"turns\": \"S::a\"}\n",
            "{\"id\": \"s3\", \"turns\": [{\"calls\": [{\"tool\": 42}]}]}\n",
            "[1, 2]\n",
            "{\"id\": \"s4\", \"prediction\": [\"{\\\"server\\\": \\\"S\\\", \\\"tool_name\\\": \\\"zzz\\\"}\"]}\n",
            "{\"turns\": []}\n",
            "{\"id\": \"s5\", \"whatever\": 1}\n",
        ),
    );
    let per = f.dir.path().join("per.jsonl");
    let out = benchgen()
        .arg("--json")
        .arg("score")
        .arg("--bench")
        .arg(&bench)
        .arg("--pred")
        .arg(&pred)
        .arg("--per-sample")
        .arg(&per)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "unscorable lines are remembered in the exit code");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("could not be scored"), "{stderr}");
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    let diags: Vec<String> =
        rep["diagnostics"].as_array().unwrap().iter().map(|d| format!("{} {}", d["location"], d["message"])).collect();
    let has = |loc: &str, what: &str| diags.iter().any(|d| d.contains(loc) && d.contains(what));
    assert!(has("line 2", "not valid JSON"), "{diags:#?}");
    assert!(has("line 3", "no sample with this id"), "{diags:#?}");
    assert!(has("line 4", "`turns` is a string"), "{diags:#?}");
    assert!(has("line 5", "tool is a number"), "{diags:#?}");
    assert!(has("line 6", "expected a JSON object"), "{diags:#?}");
    assert!(has("line 8", "no `id`"), "{diags:#?}");
    assert!(has("line 9", "cannot tell the prediction format"), "{diags:#?}");
    // Every benchmark sample is in N: s1 right; s2, s3, s5 malformed; s4 wrong (unknown tool); s6 missing.
    let all = &rep["sections"][0]["rows"][0];
    assert_eq!((all["n"].as_u64(), all["em_count"].as_u64()), (Some(6), Some(1)));
    assert_eq!(
        (all["malformed"].as_u64(), all["missing"].as_u64(), all["wrong"].as_u64()),
        (Some(3), Some(1), Some(1))
    );
    let per: Vec<Value> =
        std::fs::read_to_string(per).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(per.len(), 6);
    let s4 = per.iter().find(|p| p["id"] == "s4").unwrap();
    assert!(s4["reasons"].to_string().contains("unknown tool"), "{s4}");
    let s6 = per.iter().find(|p| p["id"] == "s6").unwrap();
    assert_eq!(s6["status"], "missing");
}

#[test]
fn unreadable_benchmark_is_an_input_error_naming_the_record() {
    let f = score_fixtures::Fixture::new();
    let bench = f.write("bench.jsonl", "{\"id\": \"s1\", \"family\": \"etom\"}\n");
    let pred = f.write("pred.jsonl", "");
    let out = benchgen().arg("score").arg("--bench").arg(&bench).arg("--pred").arg(&pred).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 1") && stderr.contains("missing field"), "{stderr}");
}

#[test]
fn etom_file_without_level_in_its_name_needs_the_flag() {
    let f = score_fixtures::Fixture::new();
    let bench = f.write("queries.json", "[{\"query_id\": 1, \"query\": \"q\", \"ground_truth_tools\": []}]");
    let pred = f.write("pred.jsonl", "{\"id\": \"L5-1\", \"prediction\": []}\n");
    let out = benchgen().arg("score").arg("--bench").arg(&bench).arg("--pred").arg(&pred).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--etom-level"));
    let out = benchgen()
        .arg("score")
        .arg("--bench")
        .arg(&bench)
        .arg("--etom-level")
        .arg("5")
        .arg("--pred")
        .arg(&pred)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The level files as the loader read them before the typed reader: the whole file as a JSON
/// value, every record through the format's own `LevelQuery`, every ground-truth member
/// through `GroundTruthTool`; the compat view member by member through `norm_gt_tool`.
#[test]
fn typed_level_reader_gives_what_the_json_value_reading_gave_on_the_shared_examples() {
    use benchgen::formats::etom::{GroundTruthTool, LevelQuery};
    use benchgen::score::compat_etom::{EtomGt, GtEntry, norm_gt_tool};
    use benchgen::score::{Mode, Options, Raw};
    let Some(d) = data() else { return };
    for (l, file) in etom_files(&d).iter().enumerate() {
        let level = l + 1;
        let v: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let mut want = Vec::new();
        for rec in v.as_array().unwrap() {
            let q: LevelQuery<Value> = serde_json::from_value(rec.clone()).unwrap();
            let mut steps: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
            for entry in &q.ground_truth_tools {
                let members = if let Value::Array(a) = entry { a.clone() } else { vec![entry.clone()] };
                let (mut alts, mut deps) = (Vec::new(), Vec::new());
                for m in members {
                    let Ok(t) = serde_json::from_value::<GroundTruthTool>(m) else { continue };
                    let id = benchgen::model::tool_id(&t.server_name, &t.tool_name);
                    if !alts.contains(&id) {
                        alts.push(id);
                    }
                    for d in t.dependencies.unwrap_or_default() {
                        if !deps.contains(&d) {
                            deps.push(d);
                        }
                    }
                }
                if !alts.is_empty() {
                    steps.push((alts, deps));
                }
            }
            if level == 2 {
                let mut union: Vec<String> = Vec::new();
                for a in steps.iter().flat_map(|s| s.0.iter()) {
                    if !union.contains(a) {
                        union.push(a.clone());
                    }
                }
                steps = vec![(union, vec![])];
            }
            let compat = EtomGt {
                entries: q
                    .ground_truth_tools
                    .iter()
                    .map(|e| match e {
                        Value::Array(ms) => GtEntry::List(ms.iter().filter_map(norm_gt_tool).collect()),
                        other => GtEntry::One(norm_gt_tool(other), other.is_object()),
                    })
                    .collect(),
            };
            want.push((format!("L{level}-{}", q.query_id), steps, compat));
        }
        for mode in [Mode::Corrected, Mode::CompatEtom] {
            let opts = Options {
                benches: vec![file.clone()],
                pred: file.clone(),
                bench_format: None,
                pred_format: None,
                etom_level: None,
                mode,
            };
            let bench = benchgen::score::input::load_benches(&opts).unwrap();
            assert_eq!(bench.items.len(), want.len(), "{}", file.display());
            for (it, (id, steps, compat)) in bench.items.iter().zip(&want) {
                assert_eq!(&it.id, id);
                let got: Vec<(Vec<String>, Vec<usize>)> = it.turns[0]
                    .iter()
                    .map(|c| (c.alts.iter().map(|a| a.to_string()).collect(), c.deps.clone()))
                    .collect();
                assert_eq!(&got, steps, "{id}");
                match (&it.raw, mode) {
                    (Some(Raw::Etom(gt)), Mode::CompatEtom) => assert_eq!(gt, compat, "{id}"),
                    (None, Mode::Corrected) => {}
                    (other, _) => panic!("{id}: {other:?}"),
                }
            }
        }
    }
}

#[test]
fn a_bad_level_file_is_refused_naming_file_record_and_field() {
    let f = score_fixtures::Fixture::new();
    let t = json!({"tool_id": "S::a", "server_name": "S", "tool_name": "a", "description": "d"});
    let pred = f.write("pred.jsonl", "{\"id\": \"L1-1\", \"prediction\": []}\n");
    let run = |text: &str, compat: bool| {
        let bench = f.write("level_1.json", text);
        let mut c = benchgen();
        c.arg("score").arg("--bench").arg(&bench).arg("--pred").arg(&pred);
        if compat {
            c.args(["--compat", "etom"]);
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let text = json!([
        {"query_id": 1, "query": 4, "ground_truth_tools": [t.clone()]},
        {"query_id": [2], "query": "q", "ground_truth_tools": [t]},
        {"query_id": 3, "query": "q", "ground_truth_tools": {"a": 1}},
        "not a query",
        {"query": "q", "ground_truth_tools": []}
    ])
    .to_string();
    for compat in [false, true] {
        let e = run(&text, compat);
        assert!(e.contains("level_1.json"), "{e}");
        assert!(e.contains("record 1.query: not an ETOM query: invalid type: integer `4`, expected a string"), "{e}");
        assert!(e.contains("record 2.query_id: not an ETOM query:") && e.contains("a number or a string"), "{e}");
        assert!(e.contains("record 3.ground_truth_tools: not an ETOM query: invalid type: map"), "{e}");
        assert!(e.contains("record 4: expected an object, got a string"), "{e}");
        assert!(e.contains("record 5: not an ETOM query: missing field `query_id`"), "{e}");
    }
    // Bad JSON and a key given twice (corrected mode) name the line.
    let e = run("[{\"query_id\": 1,\n \"query\": }]", false);
    assert!(e.contains("level_1.json") && e.contains("line 2: not valid JSON"), "{e}");
    let e = run("[{\"query_id\": 1, \"ground_truth_tools\": [],\n \"x\": {\"k\": 1, \"k\": 2}}]", false);
    assert!(e.contains("line 2: not valid JSON: duplicate key `k` at line 2"), "{e}");
}

#[test]
fn an_empty_level_file_is_read_as_etom_by_its_name() {
    let f = score_fixtures::Fixture::new();
    let one = f.write("level_1.json", "[{\"query_id\": 1, \"query\": \"q\", \"ground_truth_tools\": []}]");
    let empty = f.write("level_2.json", "[\n]\n");
    let pred = f.write("pred.jsonl", "{\"id\": \"L1-1\", \"prediction\": []}\n");
    let out = benchgen()
        .args(["--json", "score", "--bench"])
        .arg(&one)
        .arg("--bench")
        .arg(&empty)
        .arg("--pred")
        .arg(&pred)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("level_2.json"), "{text}");
    // Another name for the same empty list still needs its format said.
    let other = f.write("queries.json", "[]");
    let out = benchgen().arg("score").arg("--bench").arg(&other).arg("--pred").arg(&pred).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--bench-format"));
}
