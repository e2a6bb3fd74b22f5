//! CLI tests of the foundation stages on the demo data: registry import,
//! filter, stats, run, status and explain, with snapshots of what users see; the
//! filter summary's `drops` account for every drop, with the ledger's decision words.

use crate::support::{Project, assert_code, redact_times, stderr, stdout};
use serde_json::Value;

#[test]
fn run_builds_every_stage_then_skips_when_up_to_date() {
    let p = Project::demo();
    let status = p.run(&["status"]);
    assert_code(&status, 0);
    insta::assert_snapshot!("status_fresh_project", stdout(&status));

    let run = p.run(&["run"]);
    assert_code(&run, 0);
    insta::assert_snapshot!("run_first", redact_times(&stdout(&run)));

    let again = p.run(&["run"]);
    assert_code(&again, 0);
    insta::assert_snapshot!("run_second", stdout(&again));

    let status = p.run(&["status"]);
    insta::assert_snapshot!("status_after_run", stdout(&status));
}

#[test]
fn import_writes_a_normalised_sorted_catalog() {
    let p = Project::demo();
    let o = p.run(&["registry", "import", "--json"]);
    assert_code(&o, 0);
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["counts"]["servers"], 18);
    assert_eq!(summary["counts"]["tools"], 56);

    let cat: serde_json::Value = serde_json::from_str(&p.read("artifacts/registry-import/catalog.json")).unwrap();
    let names: Vec<&str> = cat["servers"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "servers are sorted by name");
    let fx = cat["servers"].as_array().unwrap().iter().find(|s| s["name"] == "fx-rates-mcp").unwrap();
    let ids: Vec<&str> = fx["tools"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"fx-rates-mcp::get_exchange_rate_history"), "name trimmed in id: {ids:?}");
    insta::assert_snapshot!("import_report", p.read("artifacts/registry-import/import_report.json"));
}

#[test]
fn filter_records_every_drop_with_rule_and_reason() {
    let p = Project::demo();
    assert_code(&p.run(&["registry", "import"]), 0);
    let o = p.run(&["filter"]);
    assert_code(&o, 0);
    insta::assert_snapshot!("filter_summary", redact_times(&stdout(&o)));
    insta::assert_snapshot!("filter_dropped_csv", p.read("artifacts/filter/dropped.csv"));

    let kept: serde_json::Value = serde_json::from_str(&p.read("artifacts/filter/catalog.json")).unwrap();
    let servers: Vec<&str> = kept["servers"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    for gone in [
        "calculator-mcp",
        "memory-bank-mcp",
        "sequential-thinking-mcp",
        "mcp-server-template",
        "deprecated-crm-connector",
    ] {
        assert!(!servers.contains(&gone), "{gone} must be dropped");
    }
    assert_eq!(servers.len(), 13);
    // Every input tool is either kept or listed in dropped.csv: nothing vanishes.
    let dropped_tools = p.read("artifacts/filter/dropped.csv").lines().filter(|l| l.starts_with("tool,")).count();
    let kept_tools: usize =
        kept["servers"].as_array().unwrap().iter().map(|s| s["tools"].as_array().unwrap().len()).sum();
    assert_eq!(dropped_tools + kept_tools, 56);
}

#[test]
fn filter_needs_an_imported_catalog() {
    let p = Project::demo();
    let o = p.run(&["filter"]);
    assert_code(&o, 1);
    assert!(
        stderr(&o).contains("needs the output of `registry-import`, which has not been produced"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("hint:"), "{}", stderr(&o));
}

#[test]
fn stats_describe_imported_and_filtered_catalogs() {
    let p = Project::demo();
    assert_code(&p.run(&["run"]), 0);
    insta::assert_snapshot!("stats_catalog_md", p.read("artifacts/stats/catalog.md"));
    let svg = p.read("artifacts/stats/servers_per_category.svg");
    assert!(svg.starts_with("<svg") && svg.contains("finance"), "chart has category labels");
    let json: serde_json::Value = serde_json::from_str(&p.read("artifacts/stats/catalog.json")).unwrap();
    assert_eq!(json["imported"]["servers"], 18);
    assert_eq!(json["filtered"]["servers"], 13);
    assert_eq!(json["filtered"]["tools"], 45);
}

#[test]
fn status_names_what_changed() {
    let p = Project::demo();
    assert_code(&p.run(&["run"]), 0);

    // A changed input makes its stage stale and everything after it.
    let reg = p.read("raw/demo/registry.json").replace("Add two numbers", "Add up two numbers");
    p.write("raw/demo/registry.json", reg);
    insta::assert_snapshot!("status_input_changed", stdout(&p.run(&["status"])));
    assert_code(&p.run(&["run"]), 0);

    // A changed setting names the config file.
    let cfg = p.read("pipeline/demo.toml").replace("chart_categories = 40", "chart_categories = 10");
    p.write("pipeline/demo.toml", cfg);
    insta::assert_snapshot!("status_setting_changed", stdout(&p.run(&["status"])));

    // A hand-edited artifact is noticed.
    assert_code(&p.run(&["run"]), 0);
    p.write("artifacts/filter/dropped.csv", "tampered\n");
    insta::assert_snapshot!("status_output_modified", stdout(&p.run(&["status"])));
    assert_code(&p.run(&["run"]), 0);
    assert!(p.read("artifacts/filter/dropped.csv").starts_with("kind,id,rule"), "rerun restored the output");
}

#[test]
fn force_reruns_a_fresh_stage() {
    let p = Project::demo();
    assert_code(&p.run(&["run"]), 0);
    let o = p.run(&["stats", "--force"]);
    assert_code(&o, 0);
    // catalog, filter, embed, efs-pairs, efs-verify, efs-build, efs-topdown, efs, stats = runs 1–9.
    assert!(stdout(&o).starts_with("stats: done (run 10)"), "{}", stdout(&o));
}

#[test]
fn run_from_until_selects_stages() {
    let p = Project::demo();
    let o = p.run(&["run", "--until", "filter"]);
    assert_code(&o, 0);
    assert!(!p.path("artifacts/stats").exists());
    let o = p.run(&["run", "--from", "stats"]);
    assert_code(&o, 0);
    assert_eq!(redact_times(&stdout(&o)).lines().next().unwrap(), "stats: done (run 3) in [ms] ms");

    let bad = p.run(&["run", "--from", "nope"]);
    assert_code(&bad, 2);
    // Every stage of the list, in pipeline order.
    let expected = format!("unknown stage `nope`; the stages are: {}", benchgen::stages::names().join(", "));
    assert!(expected.contains("registry-import, filter, embed, efs-pairs"), "{expected}");
    assert!(stderr(&bad).contains(&expected), "{}", stderr(&bad));
    let reversed = p.run(&["run", "--from", "stats", "--until", "registry-import"]);
    assert_code(&reversed, 2);
}

#[test]
fn usage_errors_exit_2() {
    let p = Project::demo();
    assert_code(&p.run(&["frobnicate"]), 2);
    assert_code(&p.run(&["run", "--bogus"]), 2);
    assert_code(&p.run(&["--help"]), 0);
}

#[test]
fn every_stage_command_explains_what_it_reads_and_writes() {
    let p = Project::demo();
    for args in [&["registry", "import", "--help"][..], &["filter", "--help"], &["stats", "--help"]] {
        let o = p.run(args);
        assert_code(&o, 0);
        let help = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            help.contains("Reads") && help.contains("Writes") && help.contains("Skipped when up to date"),
            "{help}"
        );
    }
}

#[test]
fn explain_shows_lineage_of_tools_servers_and_decisions() {
    let p = Project::demo();
    assert_code(&p.run(&["run"]), 0);
    let o = p.run(&["explain", "fx-rates-mcp:: get_exchange_rate_history"]);
    assert_code(&o, 0);
    insta::assert_snapshot!("explain_trimmed_tool", stdout(&o));

    let o = p.run(&["explain", "calculator-mcp"]);
    assert_code(&o, 0);
    insta::assert_snapshot!("explain_dropped_server", stdout(&o));

    let o = p.run(&["explain", "filter:memory-bank-mcp::store_memory", "--json"]);
    assert_code(&o, 0);
    let x: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(x["item"], "filter decision");
    let kinds: Vec<&str> = x["lineage"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["input.read", "catalog.server", "catalog.tool", "filter.decision"]);
    insta::assert_json_snapshot!("explain_filter_decision_json", x, { ".lineage[].time" => "[time]" });

    let o = p.run(&["explain", "#1"]);
    assert_code(&o, 0);
    assert!(stdout(&o).starts_with("event `#1`: input.read event of stage `registry-import`, run 1"), "{}", stdout(&o));

    let o = p.run(&["explain", "no-such-server::tool"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("no tool `no-such-server::tool` in the current artifacts"), "{}", stderr(&o));
    // Every not-found error ends with the ids `explain` takes, whoever answers for the id.
    let hint = "\nhint: ids look like `server::tool`, `server`, `filter:server::tool`, `#<event id>` or \
                `sha256:<exchange or call hash>`; `benchgen status` shows what has run\n";
    assert!(stderr(&o).ends_with(hint), "{}", stderr(&o));
    let o = p.run(&["explain", "no-such-server"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("error: no server `no-such-server` in the current artifacts"), "{}", stderr(&o));
    let o = p.run(&["explain", "filter:no-such-server::tool"]);
    assert_code(&o, 1);
    let e = stderr(&o);
    assert!(e.contains("error: no filter decision for `no-such-server::tool` in the current artifacts"), "{e}");
    assert!(e.ends_with(hint), "{e}");
}

#[test]
fn explain_follows_the_current_artifacts_after_a_rerun() {
    let p = Project::demo();
    assert_code(&p.run(&["run"]), 0);
    assert_code(&p.run(&["filter", "--force"]), 0);
    let o = p.run(&["explain", "calculator-mcp::add", "--json"]);
    let x: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs: Vec<i64> = x["lineage"].as_array().unwrap().iter().map(|e| e["run_id"].as_i64().unwrap()).collect();
    assert_eq!(runs, [1, 1, 1, 10], "the decision comes from the newest filter run only");
}

#[test]
fn json_status_is_machine_readable() {
    let p = Project::demo();
    let o = p.run(&["status", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows[0]["stage"], "registry-import");
    assert_eq!(rows[0]["state"], "missing");
    assert_eq!(rows[0]["reason"], "never run");
}

#[test]
fn bad_config_names_file_line_and_key() {
    let p = Project::demo();
    let cfg =
        p.read("pipeline/demo.toml").replace("drop_servers_without_tools = true", "drop_servers_without_toolz = true");
    p.write("pipeline/demo.toml", cfg);
    let o = p.run(&["status"]);
    assert_code(&o, 1);
    let e = stderr(&o);
    assert!(
        e.contains("pipeline/demo.toml") && e.contains("line 14") && e.contains("drop_servers_without_toolz"),
        "{e}"
    );
}

#[test]
fn filter_summary_counts_every_drop_with_its_reason() {
    let p = Project::demo();
    assert_code(&p.run(&["registry", "import"]), 0);
    assert_code(&p.run(&["filter"]), 0);
    let summary: Value = serde_json::from_str(&p.read("artifacts/filter/summary.json")).unwrap();
    let drops: Vec<benchgen::model::Drops> = serde_json::from_value(summary["drops"].clone()).unwrap();
    let total =
        |what: &str| -> u64 { drops.iter().filter(|d| d.reason.starts_with(what)).map(|d| d.count as u64).sum() };
    assert_eq!(total("servers dropped"), summary["servers_dropped"].as_u64().unwrap());
    assert_eq!(total("tools dropped"), summary["tools_dropped"].as_u64().unwrap());
    assert!(total("servers dropped") > 0 && total("tools dropped") > 0, "{drops:?}");
    assert!(drops.iter().all(|d| d.intentional && d.count > 0));
    assert!(drops.windows(2).all(|w| w[0].reason < w[1].reason), "sorted by reason, no repeats: {drops:?}");
    // Per rule, the drops agree with `by_rule`.
    for (rule, n) in summary["by_rule"].as_object().unwrap() {
        for (plural, count) in n.as_object().unwrap() {
            let got: u64 = drops
                .iter()
                .filter(|d| d.reason.starts_with(&format!("{plural} dropped by rule `{rule}` ")))
                .map(|d| d.count as u64)
                .sum();
            assert_eq!(got, count.as_u64().unwrap(), "{rule} {plural}");
        }
    }
    let csv = p.read("artifacts/filter/dropped.csv");
    assert_eq!(csv.lines().count() as u64 - 1, total("servers dropped") + total("tools dropped"));
    // The decision words in the ledger are the ones they always were.
    let conn = rusqlite::Connection::open(p.path("artifacts/ledger.sqlite")).unwrap();
    let mut stmt = conn
        .prepare("SELECT json_extract(payload, '$.verdict'), COUNT(*) FROM events WHERE kind = 'filter.decision' GROUP BY 1 ORDER BY 1")
        .unwrap();
    let words: Vec<(String, u64)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(words.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>(), ["drop", "keep"]);
    assert_eq!(words[0].1, total("servers dropped") + total("tools dropped"));
}
