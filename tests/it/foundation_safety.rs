//! Durability and input-safety guarantees of the stage runner: interrupted
//! runs never leave torn output, bad input changes nothing, a full disk is named
//! first and changes nothing, and runs are deterministic.

use std::collections::BTreeMap;

use crate::support::{Project, assert_code, shared_data, stderr, stdout, tree};

/// Artifacts without what legitimately differs between runs: the ledger
/// (timestamps) and the manifests' times and run ids.
fn comparable(p: &Project) -> BTreeMap<String, Vec<u8>> {
    p.artifacts()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("ledger.sqlite") && k != ".lock")
        .map(|(k, v)| {
            if k.ends_with("manifest.json") {
                let mut m: serde_json::Value = serde_json::from_slice(&v).unwrap();
                for f in ["started_at", "finished_at", "duration_ms", "run_id"] {
                    m.as_object_mut().unwrap().remove(f);
                }
                (k, serde_json::to_vec_pretty(&m).unwrap())
            } else {
                (k, v)
            }
        })
        .collect()
}

#[test]
fn two_runs_from_scratch_are_byte_identical() {
    let a = Project::demo();
    let b = Project::demo();
    assert_code(&a.run(&["run"]), 0);
    assert_code(&b.run(&["run"]), 0);
    let (ta, tb) = (comparable(&a), comparable(&b));
    assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>());
    for (k, v) in &ta {
        assert!(v == &tb[k], "artifact `{k}` differs between two identical runs");
    }
    // Forcing a rerun in place gives the same bytes too.
    assert_code(&a.run(&["run", "--force"]), 0);
    assert_eq!(comparable(&a), ta);
}

#[test]
fn a_kill_during_the_folder_swap_keeps_the_previous_output() {
    let p = Project::demo();
    assert_code(&p.run(&["run"]), 0);
    let before = tree(&p.path("artifacts/filter"));

    // Abort between moving the old output aside and moving the new one in.
    let o = p.cmd().args(["filter", "--force"]).env("BENCHGEN_FAIL_AT", "commit_swap").output().unwrap();
    assert!(!o.status.success(), "the process must have died");
    assert!(!p.path("artifacts/filter").exists(), "the old output is aside, the new one not yet in place");

    // The next command restores the previous complete output, byte for byte.
    let st = p.run(&["status"]);
    assert_code(&st, 0);
    assert!(stderr(&st).contains("restored `filter` from an interrupted run"), "{}", stderr(&st));
    assert!(stdout(&st).contains("filter          done"), "{}", stdout(&st));
    assert_eq!(tree(&p.path("artifacts/filter")), before);

    // And a rerun completes.
    assert_code(&p.run(&["filter", "--force"]), 0);
    assert!(p.path("artifacts/filter/manifest.json").exists());
}

#[test]
fn a_kill_mid_write_leaves_no_torn_file() {
    let p = Project::demo();
    assert_code(&p.run(&["run"]), 0);
    let before = tree(&p.path("artifacts/filter"));
    // Die while writing the second output file of the filter stage.
    let o = p.cmd().args(["filter", "--force"]).env("BENCHGEN_FAIL_AT", "write_atomic:2").output().unwrap();
    assert!(!o.status.success());
    assert_eq!(tree(&p.path("artifacts/filter")), before, "previous output untouched");
    assert!(p.path("artifacts/.staging").exists(), "the half-written new output stayed in staging");
    assert_code(&p.run(&["run"]), 0);
    assert!(!p.path("artifacts/.staging").exists(), "staging discarded on the next run");
}

#[test]
fn a_kill_on_the_first_ever_run_leaves_nothing_half_done() {
    let p = Project::demo();
    let o = p.cmd().args(["registry", "import"]).env("BENCHGEN_FAIL_AT", "write_atomic:1").output().unwrap();
    assert!(!o.status.success());
    assert!(!p.path("artifacts/registry-import").exists());
    let st = stdout(&p.run(&["status"]));
    assert!(st.starts_with("registry-import missing"), "{st}");
    assert_code(&p.run(&["run"]), 0);
}

fn registry_with(servers: serde_json::Value) -> String {
    serde_json::to_string_pretty(&serde_json::json!({"servers": servers})).unwrap()
}

/// Each bad input: exit 1, a message with the location, and `artifacts/` as it was.
#[test]
fn bad_input_fails_with_its_location_and_changes_nothing() {
    let tool = |name: &str| serde_json::json!({"tool_name": name, "tool_description": "d", "input_schema": {"type": "object"}});
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "truncated JSON",
            r#"{"servers": [{"server_name": "a", "tools": ["#.to_string(),
            "line 1, column 44: invalid JSON: EOF while parsing a list\n",
        ),
        (
            "wrong type",
            registry_with(
                serde_json::json!([{"server_name": "a", "tools": [{"tool_name": "t", "tool_description": 7, "input_schema": {"type": "object"}}]}]),
            ),
            "servers[0] \"a\".tools[0] \"t\".tool_description: expected a string, found a number",
        ),
        (
            "duplicate tool names",
            registry_with(serde_json::json!([{"server_name": "a", "tools": [tool("t"), tool(" t")]}])),
            "servers[0] \"a\".tools[1] \"t\": duplicate tool name \"t\" in server \"a\" (first at servers[0] \"a\".tools[0] \"t\")",
        ),
        (
            "non-object schema",
            registry_with(
                serde_json::json!([{"server_name": "a", "tools": [{"tool_name": "t", "tool_description": "d", "input_schema": "object"}]}]),
            ),
            "servers[0] \"a\".tools[0] \"t\".input_schema: expected a JSON-Schema object, found a string",
        ),
    ];
    for (what, text, expected) in cases {
        // Both on a fresh project and on one with earlier artifacts.
        for with_previous in [false, true] {
            let p = Project::demo();
            if with_previous {
                assert_code(&p.run(&["run"]), 0);
            }
            let before = p.artifacts();
            p.write("bad.json", &text);
            let o = p.run(&["registry", "import", "bad.json"]);
            assert_code(&o, 1);
            let e = stderr(&o);
            assert!(e.contains("`bad.json` has 1 problem") || e.contains("bad.json"), "{what}: {e}");
            assert!(e.contains(expected), "{what}: expected `{expected}` in\n{e}");
            assert_eq!(p.artifacts(), before, "{what}: artifacts/ changed (previous: {with_previous})");
            assert_eq!(p.path("artifacts").exists(), with_previous, "{what}");
        }
    }
}

#[test]
fn all_problems_are_reported_at_once() {
    let p = Project::demo();
    let bad = registry_with(serde_json::json!([
        {"server_name": "a", "tools": [{"tool_description": "no name", "input_schema": {"type": "object"}}]},
        {"server_name": "a", "tools": []},
        {"server_name": "b", "tools": [{"tool_name": "x", "tool_description": "d", "input_schema": {"type": "array"}}]}
    ]));
    p.write("bad.json", bad);
    let o = p.run(&["registry", "import", "bad.json"]);
    assert_code(&o, 1);
    insta::assert_snapshot!("import_three_problems", stderr(&o));
}

#[test]
fn lenient_import_leaves_bad_records_out_with_reasons() {
    let p = Project::demo();
    let bad = registry_with(serde_json::json!([
        {"server_name": "a", "categories": ["x"], "tools": [
            {"tool_name": "ok", "tool_description": "d", "input_schema": {"type": "object"}},
            {"tool_name": "ok", "tool_description": "d", "input_schema": {"type": "object"}},
            {"tool_name": "bad", "tool_description": "d", "input_schema": []}
        ]}
    ]));
    p.write("bad.json", bad);
    let o = p.run(&["registry", "import", "bad.json", "--lenient"]);
    assert_code(&o, 0);
    assert!(stderr(&o).contains("left out `a::bad`"), "{}", stderr(&o));
    let report: serde_json::Value =
        serde_json::from_str(&p.read("artifacts/registry-import/import_report.json")).unwrap();
    assert_eq!(report["tools"], 1);
    assert_eq!(report["rejected"].as_array().unwrap().len(), 2);
    let x = p.run(&["explain", "a::bad", "--json"]);
    assert_code(&x, 0);
    let v: serde_json::Value = serde_json::from_slice(&x.stdout).unwrap();
    assert!(v["lineage"].as_array().unwrap().iter().any(|e| e["kind"] == "catalog.reject"), "{v}");
}

#[test]
fn etom_snapshot_imports_491_servers_2375_tools_30_categories() {
    let Some(reg) = shared_data("etom/mcp_registry.json") else { return };
    let p = Project::demo();
    let o = p.run(&["registry", "import", reg.to_str().unwrap(), "--json"]);
    assert_code(&o, 0);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["counts"]["servers"].as_u64(), s["counts"]["tools"].as_u64()), (Some(491), Some(2375)));
    assert_eq!(s["counts"]["categories"], 30);
    let o = p.run(&["stats", "--json"]);
    assert_code(&o, 0);
    // The config names the demo registry, so the import is reported as differing from it.
    assert!(stderr(&o).contains("the config now names `raw/demo/registry.json`"), "{}", stderr(&o));
    let stats: serde_json::Value = serde_json::from_str(&p.read("artifacts/stats/catalog.json")).unwrap();
    let imp = &stats["imported"];
    assert_eq!(
        (imp["servers"].as_u64(), imp["tools"].as_u64(), imp["categories"].as_u64()),
        (Some(491), Some(2375), Some(30))
    );
    // Figures documented for the snapshot (reference-pipelines.md D.4).
    assert_eq!(imp["tools_per_server"]["histogram"]["8"], 137);
    assert_eq!(imp["schema"]["with_parameters"], 2094);
    assert_eq!(imp["servers_per_main_category"]["communication"], 24);
    // Two server names carry stray spaces; they are trimmed and noted.
    let report: serde_json::Value =
        serde_json::from_str(&p.read("artifacts/registry-import/import_report.json")).unwrap();
    let trimmed = report["notes"].as_array().unwrap().iter().filter(|n| n["kind"] == "trimmed-name").count();
    assert_eq!(trimmed, 2, "{report}");
}

// ---------------------------------------------------------------------------------------
// Issue 10, item 14: a full disk is named first: the stage, the file and the cause.

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
