//! Hardening from outside probes, second round (issue 10): each test here failed before
//! its fix.
//!
//! - every CSV a scripted demo run writes is safe to open in a spreadsheet (item 2);

use std::path::Path;

use crate::support::scripted_llm::{Answer, ScriptedLlm};
use crate::support::{assert_code, tree};

// ---------------------------------------------------------------------------------------
// Item 2: one CSV writer, neutralising formula cells everywhere.

const FORMULA: &str = "=HYPERLINK(\"http://evil.example\",\"x\")";

fn is_plain_number(c: &str) -> bool {
    regex::Regex::new(r"^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$").unwrap().is_match(c)
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
            serde_json::json!({"goal": reason})
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
                    .map(|d| (d.to_string(), serde_json::json!({"score": 5, "reason": reason})))
                    .collect();
            serde_json::json!({"scores": scores, "note": reason})
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

// ---------------------------------------------------------------------------------------
// Item 12: duplicate JSON keys in every input: logs, the pipeline config, predictions and
// benchmarks (compat modes: the last value wins, as Python's `json.loads`), queries.

#[test]
fn duplicate_keys_in_logs_are_malformed_records_naming_the_key() {
    use benchgen::logs::LogFormat;
    use benchgen::logs::readers::{Item, read_source};
    let dir = tempfile::tempdir().unwrap();
    let read = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        let (mut ok, mut bad) = (0, Vec::new());
        let r = read_source(&p, "log", "src", LogFormat::Auto, &mut |item| {
            match item {
                Item::Session(_) => ok += 1,
                Item::Malformed { location, reason } => bad.push(format!("{location}: {reason}")),
            }
            Ok(())
        });
        (r.map_err(|e| format!("{e:#}")), ok, bad)
    };
    let chat =
        r#"{"id": "c1", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}"#;
    // The last `messages` (empty) would win: the conversation would silently vanish.
    let dup_chat = r#"{"id": "c2", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "messages": []}"#;
    let (r, ok, bad) = read("c.jsonl", &format!("{chat}\n{dup_chat}\n"));
    r.unwrap();
    assert_eq!(ok, 1);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].starts_with("log:2: not JSON: duplicate key `messages` at column"), "{bad:?}");

    let ev = r#"{"session": "s1", "tool": "a", "ts_start": 0, "ts_end": 5, "arguments": {}, "result": "ok"}"#;
    // `arguments` is kept as a JSON value: the typed parse alone would keep the last one.
    let dup_ev =
        r#"{"session": "s1", "tool": "b", "ts_start": 6, "ts_end": 9, "arguments": {"q": 1, "q": 2}, "result": "ok"}"#;
    let (r, ok, bad) = read("e.jsonl", &format!("{ev}\n{dup_ev}\n"));
    r.unwrap();
    assert_eq!(ok, 1);
    assert!(bad.len() == 1 && bad[0].starts_with("log:2: not JSON: duplicate key `q`"), "{bad:?}");

    let fin = r#"[{"id": 1, "messages": [{"role": "user", "content": "hi"}], "messages": []}]"#;
    let (r, _, _) = read("f.json", fin);
    let e = r.unwrap_err();
    assert!(e.contains("f.json") || e.contains("log:1"), "{e}");
    assert!(e.contains("duplicate key `messages` at line 1"), "{e}");
}

#[test]
fn a_duplicate_key_in_the_pipeline_config_is_refused_with_file_and_key() {
    let p = crate::support::Project::empty();
    p.write("pipeline/demo.toml", "[filter]\ndrop_servers_without_tools = true\ndrop_servers_without_tools = false\n");
    let o = p.run(&["--config", "pipeline/demo.toml", "check"]);
    assert_code(&o, 1);
    let err = crate::support::stderr(&o);
    assert!(err.contains("pipeline/demo.toml"), "{err}");
    assert!(err.contains("duplicate key") && err.contains("drop_servers_without_tools"), "{err}");
}

#[test]
fn duplicate_keys_in_predictions_are_refused_in_corrected_mode_and_last_wins_in_compat() {
    use crate::support::score_fixtures::{Fixture, run, sel, t};
    use benchgen::score::Mode;
    let f = Fixture::new();
    let q = serde_json::json!([{"query_id": 1, "query": "q", "ground_truth_tools": [t("s", "a", &[])], "ground_truth_tools_count": 1}]);
    let bench = f.write("level_1.json", &q.to_string());
    // Wrong first, right last: Python's json.loads keeps the last value.
    let line =
        format!("{{\"id\": \"L1-1\", \"prediction\": [{}], \"prediction\": [{}]}}\n", sel("s", "b"), sel("s", "a"));
    let pred = f.write("pred.jsonl", &line);
    let cor = run(vec![bench.clone()], pred.clone(), Mode::Corrected);
    let d: Vec<String> = cor.diagnostics.iter().map(|d| format!("{}: {}", d.location, d.message)).collect();
    assert!(d.iter().any(|m| m.starts_with("line 1: not valid JSON: duplicate key `prediction`")), "{d:?}");
    assert!(!cor.results[0].em, "the refused record is not scored");
    let com = run(vec![bench.clone()], pred, Mode::CompatEtom);
    assert!(com.results[0].em, "compat: the last value wins, as in eval.py");
    // The same in a JSON-list predictions file.
    let pred = f.write("pred.json", &format!("[{}]", line.trim()));
    let cor = run(vec![bench.clone()], pred.clone(), Mode::Corrected);
    assert!(cor.diagnostics.iter().any(|d| d.message.contains("duplicate key `prediction`")), "{:?}", cor.diagnostics);
    assert!(run(vec![bench], pred, Mode::CompatEtom).results[0].em);

    // A benchmark file with a duplicate key: refused in the corrected mode, naming it.
    let q = format!(
        "[{{\"query_id\": 1, \"query\": \"q\", \"ground_truth_tools\": [], \"ground_truth_tools\": [{}]}}]",
        t("s", "a", &[])
    );
    let bench = f.write("level_1.json", &q);
    let pred = f.write("pred.jsonl", &line);
    let opts = |mode| benchgen::score::Options {
        benches: vec![bench.clone()],
        pred: pred.clone(),
        bench_format: None,
        pred_format: None,
        etom_level: None,
        mode,
    };
    let e = format!("{:#}", benchgen::score::run(&opts(Mode::Corrected)).unwrap_err());
    assert!(e.contains("duplicate key `ground_truth_tools`"), "{e}");
    assert!(benchgen::score::run(&opts(Mode::CompatEtom)).unwrap().results[0].em);
}

#[test]
fn duplicate_keys_in_execute_queries_are_refused() {
    let e = benchgen::agent::parse_queries(b"{\"id\": \"q1\", \"query\": \"a\", \"query\": \"b\"}\n", "q.jsonl")
        .unwrap_err();
    let text = format!("{e}");
    assert!(text.contains("q.jsonl") || e.file == "q.jsonl", "{text}");
    assert!(e.problems.iter().any(|p| p.location == "line 1" && p.message.contains("duplicate key `query`")), "{text}");
}

// ---------------------------------------------------------------------------------------
// Item 8: tools whose input schema is not valid JSON Schema are reported at import and
// filter rules can drop them.

#[test]
fn invalid_input_schemas_are_reported_at_import_and_a_rule_drops_them() {
    let p = crate::support::Project::demo();
    let reg = p.read("raw/demo/registry.json");
    let mut v: serde_json::Value = serde_json::from_str(&reg).unwrap();
    let bad_id = format!(
        "{}::{}",
        v["servers"][0]["server_name"].as_str().unwrap(),
        v["servers"][0]["tools"][0]["tool_name"].as_str().unwrap()
    );
    v["servers"][0]["tools"][0]["input_schema"] =
        serde_json::json!({"type": "object", "properties": {"symbol": {"type": "strin"}}});
    p.write("raw/demo/registry.json", serde_json::to_vec_pretty(&v).unwrap());

    let o = p.run(&["registry", "import", "--json"]);
    assert_code(&o, 0);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["counts"]["invalid_input_schemas"], 1, "{s}");
    let report: serde_json::Value =
        serde_json::from_str(&p.read("artifacts/registry-import/import_report.json")).unwrap();
    assert_eq!(report["invalid_input_schemas"], 1, "{report}");
    let notes: Vec<&serde_json::Value> =
        report["notes"].as_array().unwrap().iter().filter(|n| n["kind"] == "invalid-input-schema").collect();
    assert_eq!(notes.len(), 1, "{report}");
    assert_eq!(notes[0]["location"], bad_id.as_str());
    assert!(notes[0]["message"].as_str().unwrap().contains("strin"), "{}", notes[0]);

    // A filter rule acts on it, with the reason and the evidence in dropped.csv.
    let cfg = p.read("pipeline/demo.toml").replacen(
        "[[filter.rules]]",
        "[[filter.rules]]\nid = \"invalid-schema\"\ntarget = \"tool\"\nclass = \"custom\"\n\
         reason = \"the sandbox cannot validate its arguments\"\ninvalid_input_schema = true\n\n[[filter.rules]]",
        1,
    );
    p.write("pipeline/demo.toml", cfg);
    assert_code(&p.run(&["filter"]), 0);
    let dropped = p.read("artifacts/filter/dropped.csv");
    let line =
        dropped.lines().find(|l| l.contains(&bad_id)).unwrap_or_else(|| panic!("{bad_id} not dropped:\n{dropped}"));
    assert!(line.contains("invalid-schema") && line.contains("not valid JSON Schema"), "{line}");
    assert_eq!(dropped.lines().filter(|l| l.contains("invalid-schema")).count(), 1, "{dropped}");

    // A server rule cannot use it.
    let cfg = p.read("pipeline/demo.toml").replacen(
        "target = \"tool\"\nclass = \"custom\"",
        "target = \"server\"\nclass = \"custom\"",
        1,
    );
    p.write("pipeline/demo.toml", cfg);
    let o = p.run(&["check"]);
    assert_code(&o, 1);
    assert!(crate::support::stderr(&o).contains("`invalid_input_schema` applies to tool rules only"));
}

#[test]
fn the_etom_snapshot_reports_its_four_invalid_input_schemas() {
    let Some(reg) = crate::support::shared_data("etom/mcp_registry.json") else { return };
    let p = crate::support::Project::demo();
    let o = p.run(&["registry", "import", reg.to_str().unwrap(), "--json"]);
    assert_code(&o, 0);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["counts"]["invalid_input_schemas"], 4, "{s}");
}

// ---------------------------------------------------------------------------------------
// Item 14: a full disk is named first: the stage, the file and the cause.

fn first_line(o: &std::process::Output) -> String {
    crate::support::stderr(o).lines().next().unwrap_or_default().to_string()
}

#[test]
fn a_full_disk_names_stage_file_and_cause_first_and_leaves_artifacts_as_they_were() {
    let p = crate::support::Project::demo();
    assert_code(&p.run(&["run", "--until", "efs-pairs"]), 0);
    let before = p.artifacts();

    // An atomic write hits ENOSPC (fail point): the filter's outputs.
    let o = p.cmd().args(["filter", "--force"]).env("BENCHGEN_FAIL_ENOSPC", "write_atomic").output().unwrap();
    assert_code(&o, 1);
    let line = first_line(&o);
    assert!(line.starts_with("error: disk full in stage `filter`: cannot write `"), "{line}");
    assert!(line.contains("filter/") && line.contains("No space left on device"), "{line}");
    assert!(crate::support::stderr(&o).contains("hint: free space"), "{}", crate::support::stderr(&o));

    // The ledger cannot grow in an LLM stage: SQLite's own "database or disk is full",
    // named with the stage and the ledger file, not blamed on the LLM.
    let o = p.cmd().args(["efs", "verify"]).env("BENCHGEN_FAIL_LEDGER_FULL", "1").output().unwrap();
    assert_code(&o, 1);
    let line = first_line(&o);
    assert!(line.starts_with("error: disk full in stage `efs-verify`: cannot write `"), "{line}");
    assert!(line.contains("ledger.sqlite") && line.contains("database or disk is full"), "{line}");

    // Nothing was half-written: every artifact as before (the ledger may hold a failed run).
    let after = p.artifacts();
    for (k, v) in &before {
        if k.starts_with("ledger.sqlite") || k.starts_with(".") {
            continue;
        }
        assert!(after.get(k) == Some(v), "`{k}` changed");
    }
    let new: Vec<&String> = after
        .keys()
        .filter(|k| !before.contains_key(*k) && !k.starts_with("ledger.sqlite") && !k.starts_with('.'))
        .collect();
    assert!(new.is_empty(), "written after a full disk: {new:?}");

    // With space again, the same commands run.
    assert_code(&p.run(&["filter", "--force"]), 0);
    assert_code(&p.run(&["efs", "verify"]), 0);
}

// ---------------------------------------------------------------------------------------
// Item 9 for `execute`: counts come from the checkpointed queries, not the process.

#[test]
fn a_killed_execute_resumes_with_the_counts_of_an_uninterrupted_run() {
    let project = || {
        let p = crate::pipeline::full_project();
        let q: String = (1..=3).map(|i| format!("{{\"id\": \"q{i}\", \"query\": \"What is rate {i}?\"}}\n")).collect();
        p.write("raw/queries.jsonl", q);
        assert_code(&p.run(&["run", "--until", "filter"]), 0);
        p
    };
    let whole = project();
    assert_code(&whole.run(&["execute"]), 0);

    let p = project();
    let o = p.cmd().arg("execute").env("BENCHGEN_FAIL_AT", "execute_query:2").output().unwrap();
    assert!(!o.status.success(), "the fail point stops the run after two queries");
    assert!(!p.path("artifacts/execute/manifest.json").exists());
    assert_code(&p.run(&["execute"]), 0);

    let manifest = |p: &crate::support::Project| {
        let m: serde_json::Value = serde_json::from_str(&p.read("artifacts/execute/manifest.json")).unwrap();
        m["counts"].clone()
    };
    let (a, b) = (manifest(&whole), manifest(&p));
    assert!(a["llm_exchanges"].as_u64().unwrap() >= 3, "{a}");
    assert_eq!(a, b, "manifest counts after a resume");
    let summary = |p: &crate::support::Project| {
        let s: serde_json::Value = serde_json::from_str(&p.read("artifacts/execute/summary.json")).unwrap();
        s["counts"].clone()
    };
    assert_eq!(summary(&whole), summary(&p));
}

// ---------------------------------------------------------------------------------------
// Item 15: the compat modes read what Python's `json.loads` reads.

#[test]
fn compat_reads_nan_infinity_1e400_and_lone_surrogates_like_json_loads() {
    use crate::support::score_fixtures::{Fixture, run, t};
    use benchgen::score::Mode;
    let f = Fixture::new();
    let q = serde_json::json!([{"query_id": 1, "query": "q", "ground_truth_tools": [t("s", "a", &[])], "ground_truth_tools_count": 1}]);
    let bench = f.write("level_1.json", &q.to_string());
    for extra in ["NaN", "Infinity", "-Infinity", "1e400", "\"\\ud800\""] {
        // In an item string (eval.py runs json.loads on each) …
        let item = format!(r#"{{"server": "s", "tool_name": "a", "x": {extra}}}"#);
        let line = format!("{{\"id\": \"L1-1\", \"prediction\": [{}]}}\n", serde_json::Value::String(item));
        let pred = f.write("pred.jsonl", &line);
        let rep = run(vec![bench.clone()], pred, Mode::CompatEtom);
        assert!(rep.results[0].em, "item with {extra}: {:?}", rep.diagnostics);
        // … and in the record itself.
        let line = format!(
            "{{\"id\": \"L1-1\", \"prediction\": [{}], \"x\": {extra}}}\n",
            serde_json::Value::String(r#"{"server": "s", "tool_name": "a"}"#.into())
        );
        let pred = f.write("pred.jsonl", &line);
        let rep = run(vec![bench.clone()], pred.clone(), Mode::CompatEtom);
        assert!(rep.results[0].em, "record with {extra}: {:?}", rep.diagnostics);
        // The corrected mode follows the JSON standard: such a record is refused, named.
        if extra != "1e400" && extra != "\"\\ud800\"" {
            let rep = run(vec![bench.clone()], pred, Mode::Corrected);
            assert!(rep.diagnostics.iter().any(|d| d.location == "line 1"), "{:?}", rep.diagnostics);
        }
    }
    // A float where a name belongs is a float, as in Python: NaN behaves like 1.5.
    let em = |name: &str| {
        let item = format!(r#"{{"server": "s", "tool_name": {name}}}"#);
        let line = format!("{{\"id\": \"L1-1\", \"prediction\": [{}]}}\n", serde_json::Value::String(item));
        let rep = run(vec![bench.clone()], f.write("pred.jsonl", &line), Mode::CompatEtom);
        (rep.results[0].em, rep.results[0].compat_status.clone())
    };
    assert_eq!(em("NaN"), em("1.5"));
    assert_eq!(em("1e400"), em("1.5"));
}

#[test]
fn finmcp_inference_error_records_without_id_and_the_inference_file_as_bench() {
    use crate::support::score_fixtures::{Fixture, fin_sample, messages, row, run};
    use benchgen::score::Mode;
    let g: &[&[&str]] = &[&["A"]];
    let samples: Vec<serde_json::Value> =
        (1..=3).map(|i| fin_sample(i, "single step", "x-y", "easy", messages(&[("q", g)]))).collect();
    // What inference_api.py writes: the samples with `messages_pred`, and a failed sample
    // replaced by an error record that has lost every other field, its id included.
    let mut out = samples.clone();
    for s in &mut out {
        s["messages_pred"] = messages(&[("q", g)]);
    }
    out[1] = serde_json::json!({"error": true, "error_message": "boom", "messages_pred": []});
    let f = Fixture::new();
    let bench = f.write("bench.json", &serde_json::Value::Array(samples).to_string());
    let eval = f.write("eval.json", &serde_json::Value::Array(out).to_string());

    // evaluation.py: the error record is dropped, N = 2, both others exact.
    let com = run(vec![bench.clone()], eval.clone(), Mode::CompatFinmcp);
    let c = row(&com, "overall", "all");
    assert_eq!((c.n, c.em), (2, 1.0), "{:?}", com.diagnostics);
    assert!(!com.diagnostics.iter().any(|d| d.message.contains("no `id`")), "{:?}", com.diagnostics);

    // The inference output as the benchmark too (as the FinMCP docs run it).
    let com = run(vec![eval.clone()], eval.clone(), Mode::CompatFinmcp);
    let c = row(&com, "overall", "all");
    assert_eq!((c.n, c.em), (2, 1.0), "{:?}", com.diagnostics);
    let left_out: Vec<_> = com.diagnostics.iter().filter(|d| d.message.contains("inference error record")).collect();
    assert_eq!(left_out.len(), 1, "reported once: {:?}", com.diagnostics);
    assert_eq!(left_out[0].location, "record 2");
    let cor = run(vec![eval.clone()], eval, Mode::Corrected);
    assert_eq!(row(&cor, "overall", "all").n, 2);
}

#[test]
fn compat_etom_reports_status_counts_and_the_l4_efs_match_counts() {
    use crate::support::score_fixtures::{etom, row, sel, t};
    let gt = serde_json::json!([t("s", "a", &[]), t("s", "b", &[0])]);
    let (_, com) = etom(
        4,
        &[(1, gt.clone()), (2, gt)],
        &[
            ("L4-1".into(), serde_json::json!([sel("s", "a"), sel("s", "b")])),
            ("L4-2".into(), serde_json::json!("No tools")),
        ],
    );
    let e = &row(&com, "level", "L4").extras;
    assert_eq!(e.get("efs_matches"), Some(&0.0), "{e:?}");
    assert_eq!(e.get("total_efs_alternatives"), Some(&0.0), "{e:?}");
    let statuses: f64 = e.iter().filter(|(k, _)| k.starts_with("status.")).map(|(_, v)| v).sum();
    assert_eq!(statuses, 2.0, "every query has a status: {e:?}");
    assert_eq!(e.get("status.tool_chain_efs"), Some(&1.0), "{e:?}");
}

#[test]
fn compat_finmcp_scores_a_repeated_record_again_as_evaluation_py_does() {
    use crate::support::score_fixtures::{fin_sample, finmcp, messages, row};
    let g: &[&[&str]] = &[&["A"]];
    let wrong: &[&[&str]] = &[&["B"]];
    let s = |i| fin_sample(i, "single step", "x-y", "easy", messages(&[("q", g)]));
    let rec = |i: u32, m| serde_json::json!({"id": i, "messages_pred": m});
    let (cor, com) = finmcp(
        &[s(1), s(2)],
        &[rec(1, messages(&[("q", g)])), rec(2, messages(&[("q", g)])), rec(1, messages(&[("q", wrong)]))],
    );
    let c = row(&com, "overall", "all");
    assert_eq!(c.n, 3, "every record counts: {:?}", com.diagnostics);
    assert!((c.em - 2.0 / 3.0).abs() < 1e-9, "{}", c.em);
    let k = row(&cor, "overall", "all");
    assert_eq!((k.n, k.em), (2, 1.0), "corrected: the first prediction only");
    assert!(cor.diagnostics.iter().any(|d| d.message.contains("only the first is scored")));
}
