//! Duplicate JSON keys in every input are refused, naming the key and the place, where a
//! parser would keep one of the values without a word: the registry snapshot, tool logs,
//! the pipeline config, predictions and benchmarks (the compat modes take the last value,
//! as Python's `json.loads` does) and `execute`'s queries (issue 10, item 12; each test
//! failed before its fix).

use std::path::PathBuf;

use crate::support::{assert_code, bin, text};

#[test]
fn registry_with_a_duplicate_key_is_refused_naming_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
    std::fs::write(dir.path().join("pipeline/demo.toml"), "").unwrap();
    let demo =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("raw/demo/registry.json")).unwrap();
    // The demo registry with `"servers": []` added at the end of its top-level object.
    let cut = demo.trim_end().strip_suffix('}').unwrap().to_string();
    let text_written = format!("{cut},\n  \"servers\": []\n}}\n");
    let second = text_written.rfind("\"servers\"").unwrap();
    let line = text_written[..second].matches('\n').count() + 1;
    std::fs::write(dir.path().join("dup.json"), &text_written).unwrap();
    let o = bin().current_dir(dir.path()).args(["registry", "import", "dup.json"]).output().unwrap();
    let err = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("duplicate key `servers`"), "{err}");
    assert!(err.contains(&format!("line {line}, column")), "the line of the second key ({line}): {err}");
    assert!(!dir.path().join("artifacts/registry-import").exists(), "nothing written");
}

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
