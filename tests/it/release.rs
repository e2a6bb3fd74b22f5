//! `benchgen release` and `benchgen release verify` on a pool made by hand (both tracks,
//! review decisions, ledger lineage): every format parses and scores 100 % for oracle
//! predictions, the tables have the documented schema, the card has every section, planted
//! defects fail verification, a version is never overwritten, an extension gets a
//! changelog, a rebuild from the same inputs and ledger is byte-identical, and a pinned
//! server whose tools changed after the release fails `release verify --servers`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use benchgen::ledger::{NewEvent, Parent};
use serde_json::{Value, json};

use crate::support::scripted_llm::{Answer, ScriptedLlm};
use crate::support::{Project, assert_code, stderr, stdout, tree, upstream};

const CONFIG: &str = "pipeline/release.toml";

fn config(version: &str, require_review: bool) -> String {
    format!(
        "[project]\nname = \"it-release\"\n\n[release]\nname = \"it-bench\"\nversion = \"{version}\"\nrequire_review = {require_review}\ndescription = \"Fixture benchmark of the release tests.\"\nlimitations = [\"Made by hand for tests.\"]\n"
    )
}

fn plan(calls: &[(&[&str], u32, &[usize])]) -> Value {
    Value::Array(
        calls.iter().map(|(alts, g, deps)| json!({"alternatives": alts, "group": g, "depends_on": deps})).collect(),
    )
}

fn etom(id: &str, kind: &str, user: &str, p: Value, scenario: &[&str]) -> Value {
    let n = p.as_array().unwrap().len();
    json!({"id": id, "family": "etom", "kind": kind, "scenario": scenario,
           "turns": [{"user": user, "reference_plan": p}], "out_of_scope": kind == "L5",
           "difficulty": if n > 5 { "medium" } else { "easy" }, "provenance_id": format!("levels:{id}")})
}

fn fin(id: &str, kind: &str, turns: Value, scenario: &[&str]) -> Value {
    json!({"id": id, "family": "finmcp", "kind": kind, "scenario": scenario, "turns": turns,
           "out_of_scope": false, "difficulty": "easy", "provenance_id": format!("sample:{id}"), "author": "llm:synth"})
}

fn levels_pool() -> Vec<Value> {
    vec![
        etom("L1-1", "L1", "On Alpha, run x.", plan(&[(&["Alpha::x"], 0, &[])]), &["dev"]),
        etom("L2-1", "L2", "Do the x thing.", plan(&[(&["Alpha::x", "Beta::u"], 0, &[])]), &["dev"]),
        etom("L3-1", "L3", "x then y.", plan(&[(&["Alpha::x"], 0, &[]), (&["Alpha::y"], 1, &[0])]), &["dev"]),
        etom(
            "L4-1",
            "L4",
            "z, then v or y with it.",
            plan(&[(&["Alpha::z"], 0, &[]), (&["Beta::v", "Alpha::y"], 1, &[0])]),
            &["ops"],
        ),
        etom("L5-1", "L5", "Pause my music.", plan(&[]), &["media"]),
    ]
}

fn validated_pool() -> Vec<Value> {
    let traj = |tool: &str, r: &str| json!({"tool": tool, "arguments": {"symbol": "ACME"}, "result": r});
    vec![
        fin(
            "fin-a",
            "single_tool",
            json!([{"user": "Quote for ACME?", "reference_plan": plan(&[(&["get_quote"], 0, &[])]),
                    "gold_reply": "ACME trades at 10.", "trajectory": [[traj("get_quote", "10")]]}]),
            &["markets", "quotes"],
        ),
        fin(
            "fin-b",
            "multi_tool",
            json!([{"user": "Quote and news for ACME, then in EUR.",
                    "reference_plan": plan(&[(&["get_quote"], 0, &[]), (&["get_news"], 0, &[]), (&["get_fx"], 1, &[0])]),
                    "gold_reply": "Done.",
                    "trajectory": [[traj("get_quote", "10"), traj("get_news", "none")], [traj("get_fx", "9.2")]]}]),
            &["markets", "news"],
        ),
        fin(
            "fin-c",
            "multi_turn",
            json!([{"user": "Quote ACME.", "reference_plan": plan(&[(&["get_quote"], 0, &[])]), "gold_reply": "10."},
                   {"user": "And news?", "reference_plan": plan(&[(&["get_news"], 0, &[])]), "gold_reply": "None."}]),
            &["markets", "quotes"],
        ),
        fin(
            "fin-d",
            "single_tool",
            json!([{"user": "News?", "reference_plan": plan(&[(&["get_news"], 0, &[])]), "gold_reply": "None."}]),
            &["markets", "news"],
        ),
    ]
}

fn hash(v: &Value) -> String {
    serde_json::from_value::<benchgen::model::Sample>(v.clone()).unwrap().content_hash()
}

fn decisions(pool: &[Value], rejected: &[&str]) -> Vec<Value> {
    let mut d: Vec<Value> = pool
        .iter()
        .map(|s| {
            let id = s["id"].as_str().unwrap();
            // `?id` in `rejected`: the sample waits for its reviewers' scores.
            if rejected.contains(&format!("?{id}").as_str()) {
                return json!({"id": id, "content_hash": hash(s), "decision": "undecided", "decided_by": null,
                              "reviewers": [], "rule": "both >= 4", "waiting_for": "scores"});
            }
            let decision = if rejected.contains(&id) { "rejected" } else { "accepted" };
            json!({"id": id, "content_hash": hash(s), "decision": decision, "decided_by": "llm",
                   "reviewers": [{"id": "llm:pre", "scores": {"relevance": 5, "completeness": 4}}], "rule": "both >= 4"})
        })
        .collect();
    d.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    d
}

/// The upstream artifacts and ledger of a release: catalogs, EFS sets, both pools,
/// review decisions, and per-sample ledger events behind an LLM exchange.
fn upstream_fixture(root: &Path, validated: &[Value], levels: &[Value], rejected: &[&str]) {
    let catalog = json!({"servers": [
        {"name": "Alpha", "description": "a", "summary": "", "url": "", "categories": ["Developer Tools"], "tools": [
            {"id": "Alpha::x", "name": "x", "description": "does x", "input_schema": {"type": "object"}},
            {"id": "Alpha::y", "name": "y", "description": "does y", "input_schema": {"type": "object"}},
            {"id": "Alpha::z", "name": "z", "description": "does z", "input_schema": {"type": "object"}}]},
        {"name": "Beta", "description": "b", "summary": "", "url": "", "categories": ["Operations"], "tools": [
            {"id": "Beta::u", "name": "u", "description": "does x too", "input_schema": {"type": "object"}},
            {"id": "Beta::v", "name": "v", "description": "does y too", "input_schema": {"type": "object"}}]}]});
    // `get_fx` takes a string `symbol`: the Inspect task's test (tests/it/inspect.rs) calls it
    // with a number, which the tool's schema refuses.
    let log_tools = json!([
        {"name": "get_quote", "description": "quote", "input_schema": {"type": "object"}},
        {"name": "get_news", "description": "news", "input_schema": {"type": "object"}},
        {"name": "get_fx", "description": "fx",
         "input_schema": {"type": "object", "properties": {"symbol": {"type": "string"}}, "required": ["symbol"]}}]);
    let sets = json!([{"set_id": 1, "size": 2, "tools": [
        {"tool_id": "Alpha::x", "server_name": "Alpha", "tool_name": "x", "description": "does x"},
        {"tool_id": "Beta::u", "server_name": "Beta", "tool_name": "u", "description": "does x too"}]}]);

    let exchange = |item: &str, hash: &str| {
        NewEvent::new(
            "llm.exchange",
            Some(item),
            json!({"role": "synth", "provider": "vllm", "model": "qwen-test", "item": item, "request_hash": hash,
                   "cached": false, "usage": {"prompt_tokens": 100, "completion_tokens": 20}, "latency_ms": 7}),
        )
    };
    // Per stage, the events the fixture records: an exchange and a verdict per validated
    // sample, a level query per level sample, and one event in every further stage its
    // lineage must reach (`release verify` checks the rules).
    let mut events: BTreeMap<String, Vec<NewEvent>> = BTreeMap::new();
    let validate = events.entry("validate".into()).or_default();
    for s in validated {
        let id = s["id"].as_str().unwrap();
        validate.push(exchange(id, &format!("sha256:req-{id}")));
        let parent = Parent::Batch(validate.len() - 1);
        validate.push(
            NewEvent::new("validate.verdict", Some(&format!("sample:{id}")), json!({"accepted": true, "time": "t"}))
                .with_parent(parent),
        );
    }
    // A level sample's event gives its plan check's decision on each step, as `levels
    // export` records it; the release copies them into the sample's lineage line.
    events.entry("levels-export".into()).or_default().extend(levels.iter().map(|s| {
        let steps: Vec<Value> = s["turns"][0]["reference_plan"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"step": i + 1, "tool": c["alternatives"][0], "decision": "kept", "by": "rule",
                       "reason": "requested: the query names it"})
            })
            .collect();
        let id = s["id"].as_str().unwrap();
        NewEvent::new("levels.sample", Some(&format!("sample:{id}")), json!({"id": id, "plan_check": steps}))
    }));
    for s in validated.iter().chain(levels) {
        let sample: benchgen::model::Sample = serde_json::from_value(s.clone()).unwrap();
        for stage in benchgen::release::lineage::required_stages(&sample, true) {
            if stage != "validate" && stage != "levels-export" {
                let ev = NewEvent::new("fixture.step", Some(&format!("sample:{}", sample.id)), json!({"stage": stage}));
                events.entry(stage).or_default().push(ev);
            }
        }
    }
    let mut take = |stage: &str| events.remove(stage).unwrap_or_default();
    upstream::stage(root, "filter", &[("catalog.json", serde_json::to_vec_pretty(&catalog).unwrap())], &take("filter"));
    upstream::stage(
        root,
        "logs-import",
        &[("catalog.json", serde_json::to_vec(&log_tools).unwrap())],
        &take("logs-import"),
    );
    upstream::stage(
        root,
        "efs-finalize",
        &[("tool_equivalence_sets.json", serde_json::to_vec(&sets).unwrap())],
        &take("efs-finalize"),
    );
    upstream::stage(root, "validate", &[("samples.jsonl", upstream::jsonl(validated))], &take("validate"));
    upstream::stage(root, "levels-export", &[("samples.jsonl", upstream::jsonl(levels))], &take("levels-export"));
    let review = take("review-merge");
    let mut all: Vec<Value> = validated.iter().chain(levels).cloned().collect();
    all.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    let report = "# Review merge\n\n## Agreement\n\n| dimension | Cohen's kappa | Krippendorff's alpha |\n|---|---:|---:|\n| relevance | 0.81 | 0.80 |\n\n## Discussion\n\nnone\n";
    upstream::stage(
        root,
        "review-merge",
        &[("decisions.jsonl", upstream::jsonl(&decisions(&all, rejected))), ("report.md", report.as_bytes().to_vec())],
        &review,
    );
    for (stage, evs) in events {
        upstream::stage(root, &stage, &[], &evs);
    }
}

pub(crate) fn project(version: &str) -> Project {
    project_of(version, &[])
}

/// The release project with only the pool samples named in `keep` (all of them when empty):
/// a smaller release for tests whose cost grows with each sample (a real model's panel).
pub(crate) fn project_of(version: &str, keep: &[&str]) -> Project {
    let kept = |pool: Vec<Value>| -> Vec<Value> {
        pool.into_iter().filter(|s| keep.is_empty() || keep.contains(&s["id"].as_str().unwrap())).collect()
    };
    let p = Project::empty();
    p.write(CONFIG, config(version, true));
    upstream_fixture(p.root(), &kept(validated_pool()), &kept(levels_pool()), &["fin-d"]);
    p
}

pub(crate) fn release(p: &Project, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["--config", CONFIG, "release"];
    args.extend_from_slice(extra);
    p.run(&args)
}

fn dir(p: &Project, version: &str) -> PathBuf {
    p.path(&format!("release/it-bench-{version}"))
}

fn benchgen(args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("benchgen")
        .unwrap()
        .env("BENCHGEN_NO_PROGRESS", "1")
        .env_remove("BENCHGEN_CONFIG")
        .args(args)
        .output()
        .unwrap()
}

fn score_json(args: &[&str]) -> Value {
    let mut a = vec!["--json", "score"];
    a.extend_from_slice(args);
    let o = benchgen(&a);
    assert_code(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

fn all_perfect(rep: &Value, n: usize) {
    assert_eq!(rep["samples"], n, "{rep}");
    for s in rep["sections"].as_array().unwrap() {
        for r in s["rows"].as_array().unwrap() {
            assert_eq!(r["em"], 1.0, "{} {}: {r}", s["dimension"], r["key"]);
        }
    }
    assert!(rep["data_defects"].as_array().unwrap().is_empty(), "{rep}");
}

#[test]
fn release_parses_scores_100_and_has_a_full_card() {
    let p = project("1.0.0");
    let o = release(&p, &[]);
    assert_code(&o, 0);
    let d = dir(&p, "1.0.0");
    let files: Vec<String> = tree(&d).into_keys().collect();
    for f in [
        "README.md",
        "croissant.json",
        "CHANGELOG.md",
        "SHA256SUMS",
        "samples.jsonl",
        "samples.parquet",
        "tools.parquet",
        "lineage.jsonl",
        "level_1.json",
        "level_5.json",
        "tool_equivalence_sets.json",
        "finmcp_single_tool.json",
        "finmcp_multi_tool.json",
        "finmcp_multi_turn.json",
        "plots/difficulty.svg",
        "plots/scenarios.svg",
        "inspect/benchgen_task.py",
        "inspect/tools.json",
    ] {
        assert!(files.contains(&f.to_string()), "{f} missing from {files:?}");
    }
    assert_eq!(
        tree(&d),
        tree(&p.path("artifacts/release")).into_iter().filter(|(k, _)| k != "manifest.json").collect()
    );

    // The rejected sample is left out; the others are released in id order.
    let ids: Vec<String> = std::fs::read_to_string(d.join("samples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<benchgen::model::Sample>(l).unwrap().id)
        .collect();
    assert_eq!(ids, ["L1-1", "L2-1", "L3-1", "L4-1", "L5-1", "fin-a", "fin-b", "fin-c"]);

    // `release verify` passes and names every part it scored.
    let o = benchgen(&["release", "verify", d.to_str().unwrap()]);
    assert_code(&o, 0);
    let out = stdout(&o);
    for part in ["samples.jsonl", "level_2.json", "level_4.json", "finmcp_multi_tool.json", "finmcp_multi_turn.json"] {
        assert!(out.contains(&format!("{part}: oracle scores 100 %")), "{part}: {out}");
    }
    assert!(out.contains("--compat etom") && out.contains("--compat finmcp"), "{out}");

    // The published files load in `benchgen score` as their own formats, oracle 100 %.
    let fx = tempfile::tempdir().unwrap();
    let mut etom_pred = String::new();
    for l in 1..=4 {
        let q: Vec<Value> = serde_json::from_slice(&std::fs::read(d.join(format!("level_{l}.json"))).unwrap()).unwrap();
        for q in q {
            let first: Vec<&Value> = q["ground_truth_tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| if e.is_array() { &e[0] } else { e })
                .collect();
            let take = if l == 2 { 1 } else { first.len() };
            let pred: Vec<String> = first[..take]
                .iter()
                .map(|t| json!({"server": t["server_name"], "tool_name": t["tool_name"]}).to_string())
                .collect();
            etom_pred.push_str(&format!("{}\n", json!({"id": format!("L{l}-{}", q["query_id"]), "prediction": pred})));
        }
    }
    etom_pred.push_str(&format!("{}\n", json!({"id": "L5-1", "prediction": []})));
    let ep = fx.path().join("etom.jsonl");
    std::fs::write(&ep, etom_pred).unwrap();
    let mut args: Vec<String> = Vec::new();
    for l in 1..=5 {
        args.push("--bench".into());
        args.push(d.join(format!("level_{l}.json")).display().to_string());
    }
    args.extend(["--pred".into(), ep.display().to_string()]);
    for compat in [None, Some("etom")] {
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Some(c) = compat {
            a.extend(["--compat", c]);
        }
        all_perfect(&score_json(&a), 5);
    }
    let mut fin_pred = String::new();
    let mut fargs: Vec<String> = Vec::new();
    for k in ["single_tool", "multi_tool", "multi_turn"] {
        let f = d.join(format!("finmcp_{k}.json"));
        let samples: Vec<Value> = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        for s in samples {
            fin_pred.push_str(&format!("{}\n", json!({"id": s["id"], "messages_pred": s["messages"]})));
        }
        fargs.extend(["--bench".into(), f.display().to_string()]);
    }
    let fp = fx.path().join("fin.jsonl");
    std::fs::write(&fp, fin_pred).unwrap();
    fargs.extend(["--pred".into(), fp.display().to_string()]);
    for compat in [None, Some("finmcp")] {
        let mut a: Vec<&str> = fargs.iter().map(String::as_str).collect();
        if let Some(c) = compat {
            a.extend(["--compat", c]);
        }
        all_perfect(&score_json(&a), 3);
    }

    // Parquet, read back with polars: the documented schema and one row per sample.
    use polars_core::prelude::*;
    use polars_io::prelude::{ParquetReader, SerReader};
    let df = ParquetReader::new(std::fs::File::open(d.join("samples.parquet")).unwrap()).finish().unwrap();
    let cols: Vec<String> = df.get_column_names().iter().map(|c| c.to_string()).collect();
    let want: Vec<String> = benchgen::release::tables::SAMPLES_SCHEMA.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(cols, want);
    assert_eq!(df.height(), 8);
    assert_eq!(df.column("calls").unwrap().dtype(), &DataType::UInt32);
    assert_eq!(df.column("review_score_mean").unwrap().dtype(), &DataType::Float64);
    let decision = df.column("review_decision").unwrap().str().unwrap().get(6).map(str::to_string);
    assert_eq!(decision.as_deref(), Some("accepted"));
    let mean = df.column("review_score_mean").unwrap().f64().unwrap().get(0);
    assert_eq!(mean, Some(4.5));
    let tools = ParquetReader::new(std::fs::File::open(d.join("tools.parquet")).unwrap()).finish().unwrap();
    let ids = benchgen::release::tables::strings(&tools, "tool_id").unwrap();
    assert_eq!(ids, ["Alpha::x", "Alpha::y", "Alpha::z", "Beta::u", "Beta::v", "get_fx", "get_news", "get_quote"]);

    // The card: HF header and every section.
    let card = std::fs::read_to_string(d.join("README.md")).unwrap();
    assert!(card.starts_with("---\npretty_name: \"it-bench\"\nlicense: \"cc-by-4.0\"\n"), "{card}");
    for needle in [
        "task_categories:",
        "configs:",
        // One loader for every config (see every_card_config_loads_with_hugging_face_datasets).
        "- config_name: all\n  default: true\n  data_files:\n  - split: test\n    path: samples.jsonl\n",
        "config_name: level_4",
        "config_name: finmcp_multi_turn",
        "# it-bench 1.0.0",
        "## Files",
        "## Statistics",
        "| L4 | 1 | 1.00 | 2.00 | 2.00 | 3.00 | 1 | 0 | 0 |",
        "![difficulty](plots/difficulty.svg)",
        "## Scenarios",
        "## Yield funnel",
        "| left out | 1: review: rejected |",
        "| **release** | 8 samples |",
        "## Review and agreement",
        "| relevance | 0.81 | 0.80 |",
        "LLM pre-review standing in for human reviewers",
        "## How it was made",
        "| vllm | qwen-test | synth | 3 | 300 | 60 |",
        "## Known limitations",
        "Made by hand for tests.",
        "## Lineage and verification",
    ] {
        assert!(card.contains(needle), "card lacks {needle:?}:\n{card}");
    }
    assert!(std::fs::read_to_string(d.join("plots/kinds.svg")).unwrap().starts_with("<svg"));

    // Lineage, and `explain` of a released id.
    let lineage = std::fs::read_to_string(d.join("lineage.jsonl")).unwrap();
    let fb: Value = serde_json::from_str(lineage.lines().find(|l| l.contains("\"fin-b\"")).unwrap()).unwrap();
    // A level sample's line gives its plan check's decision on each step; others have none.
    let l4: Value = serde_json::from_str(lineage.lines().find(|l| l.contains("\"L4-1\"")).unwrap()).unwrap();
    let steps: Vec<(&str, &str)> = l4["plan_check"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["tool"].as_str().unwrap(), d["decision"].as_str().unwrap()))
        .collect();
    assert_eq!(steps, [("Alpha::z", "kept"), ("Beta::v", "kept")], "{l4}");
    assert!(fb.get("plan_check").is_none(), "{fb}");
    let events = fb["events"].as_array().unwrap();
    let of = |stage: &str| -> Vec<&Value> { events.iter().filter(|e| e["stage"] == stage).collect() };
    let kinds: Vec<&str> = of("validate").iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["llm.exchange", "validate.verdict"], "{fb}");
    assert_eq!(of("validate")[0]["ref"], "request:sha256:req-fin-b");
    // In pipeline order: the log track's stages, the simulation, validation, the merge, and
    // last the publication itself.
    let stages: Vec<&str> = events.iter().map(|e| e["stage"].as_str().unwrap()).collect();
    assert_eq!(
        stages,
        [
            "logs-import",
            "logs-curate",
            "logs-split",
            "synth-roleplay",
            "validate",
            "validate",
            "review-merge",
            "release"
        ],
        "{fb}"
    );
    let last = events.last().unwrap();
    assert_eq!((&last["kind"], &last["subject"]), (&json!("release.published"), &json!("sample:fin-b")));
    // Every released sample's lineage ends so, and the ledger holds the event it names.
    for l in lineage.lines() {
        let r: Value = serde_json::from_str(l).unwrap();
        let e = r["events"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(e["kind"], "release.published", "{r}");
        assert_eq!(e["subject"], format!("sample:{}", r["id"].as_str().unwrap()));
    }
    let published = p.run(&["--config", CONFIG, "--json", "explain", "sample:fin-b"]);
    let x: Value = serde_json::from_slice(&published.stdout).unwrap();
    assert!(x.to_string().contains("release.published"), "explain names the publication: {x}");
    assert_eq!(fb["review"]["decision"], "accepted");
    let o = p.run(&["--config", CONFIG, "--json", "explain", "sample:fin-b"]);
    assert_code(&o, 0);
    let x: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(x["item"], "released sample");
    assert!(x["status"].as_str().unwrap().contains("finmcp_multi_tool.json#fin-b"), "{x}");
    // Seven upstream events and the publication.
    assert_eq!(x["lineage"].as_array().unwrap().len(), 8, "{x}");
    let o = p.run(&["--config", CONFIG, "explain", "sample:L3-1"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("levels.sample"), "{}", stdout(&o));
}

#[test]
fn without_review_the_release_needs_the_switch() {
    let p = Project::empty();
    p.write(CONFIG, config("0.1.0", true));
    upstream_fixture(p.root(), &validated_pool(), &[], &[]);
    std::fs::remove_dir_all(p.path("artifacts/review-merge")).unwrap();
    // The registry track is off: no levels.
    std::fs::remove_dir_all(p.path("artifacts/levels-export")).unwrap();
    let o = release(&p, &[]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("require_review = false"), "{}", stderr(&o));
    assert!(!dir(&p, "0.1.0").exists());
    p.write(CONFIG, config("0.1.0", false));
    assert_code(&release(&p, &[]), 0);
    let d = dir(&p, "0.1.0");
    assert!(!d.join("level_1.json").exists(), "no levels track, no ETOM files");
    let card = std::fs::read_to_string(d.join("README.md")).unwrap();
    assert!(card.contains("built without the review stage") && card.contains("No ETOM levels"), "{card}");
    assert_code(&benchgen(&["release", "verify", d.to_str().unwrap()]), 0);
}

fn planted(p: &Project, name: &str, edit: impl FnOnce(&Path), resum: bool) -> String {
    let src = dir(p, "1.0.0");
    let d = p.path(&format!("planted/{name}"));
    for (rel, bytes) in tree(&src) {
        p.write(&format!("planted/{name}/{rel}"), bytes);
    }
    edit(&d);
    if resum {
        // A consistent edit: croissant.json's checksums too, then SHA256SUMS over it.
        benchgen::release::croissant::rehash(&d).unwrap();
        std::fs::write(d.join("SHA256SUMS"), benchgen::release::checksums(&d).unwrap()).unwrap();
    }
    let o = benchgen(&["release", "verify", d.to_str().unwrap()]);
    assert_code(&o, 1);
    stderr(&o)
}

/// Rewrite each line of a release folder's `lineage.jsonl` with `f`.
fn edit_lineage(d: &Path, f: impl Fn(&mut Value)) {
    let text = std::fs::read_to_string(d.join("lineage.jsonl")).unwrap();
    let lines: String = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            f(&mut v);
            format!("{v}\n")
        })
        .collect();
    std::fs::write(d.join("lineage.jsonl"), lines).unwrap();
}

fn replace_in(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{from} not in {}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn verify_fails_on_each_planted_defect() {
    let p = project("1.0.0");
    assert_code(&release(&p, &[]), 0);
    let e = planted(&p, "tool", |d| replace_in(&d.join("samples.jsonl"), "\"Alpha::z\"", "\"Alpha::gone\""), true);
    assert!(e.contains("tool `Alpha::gone` is not in tools.parquet"), "{e}");
    let e = planted(
        &p,
        "forward",
        |d| replace_in(&d.join("level_3.json"), "\"dependencies\":[]", "\"dependencies\":[1]"),
        true,
    );
    assert!(
        e.contains("level_3.json query 1: entry 0 depends on entry 1, which is not earlier (forward dependency)"),
        "{e}"
    );
    let e = planted(
        &p,
        "checksum",
        |d| {
            let mut t = std::fs::read(d.join("tools.parquet")).unwrap();
            t.push(0);
            std::fs::write(d.join("tools.parquet"), t).unwrap();
        },
        false,
    );
    assert!(e.contains("SHA256SUMS: `tools.parquet` does not match its checksum"), "{e}");
    let e = planted(
        &p,
        "lineage",
        |d| {
            let text = std::fs::read_to_string(d.join("lineage.jsonl")).unwrap();
            let kept: String = text.lines().filter(|l| !l.contains("\"fin-b\"")).map(|l| format!("{l}\n")).collect();
            std::fs::write(d.join("lineage.jsonl"), kept).unwrap();
        },
        true,
    );
    assert!(e.contains("sample `fin-b` has no lineage in lineage.jsonl"), "{e}");
    assert!(e.starts_with("error: `") && e.contains("failed verification"), "{e}");
    // croissant.json naming a checksum its file does not have (SHA256SUMS recomputed over it).
    let e = planted(
        &p,
        "croissant",
        |d| {
            let path = d.join("croissant.json");
            let mut doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            let f =
                doc["distribution"].as_array_mut().unwrap().iter_mut().find(|f| f["@id"] == "samples.jsonl").unwrap();
            f["sha256"] = json!("0".repeat(64));
            std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
            std::fs::write(d.join("SHA256SUMS"), benchgen::release::checksums(d).unwrap()).unwrap();
        },
        false,
    );
    assert!(e.contains("croissant.json: `samples.jsonl` does not match its sha256"), "{e}");
    let e = planted(&p, "no_croissant", |d| std::fs::remove_file(d.join("croissant.json")).unwrap(), false);
    assert!(e.contains("croissant.json: cannot read"), "{e}");
    // The Inspect AI task edited after publishing: SHA256SUMS catches it, and the task is
    // named as not this benchgen's (only a warning alone: another version writes another).
    let e = planted(
        &p,
        "inspect_task",
        |d| {
            let path = d.join("inspect/benchgen_task.py");
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, text.replace("max_calls=20", "max_calls=5")).unwrap();
        },
        false,
    );
    assert!(e.contains("inspect/benchgen_task.py"), "{e}");
    let e = planted(&p, "no_inspect_tools", |d| std::fs::remove_file(d.join("inspect/tools.json")).unwrap(), false);
    assert!(e.contains("inspect/tools.json: cannot read"), "{e}");
}

/// A release file rewritten by `edit` on its parsed JSON (an array of records), written
/// back in the release's own layout.
fn edit_json(path: &Path, edit: impl FnOnce(&mut Vec<Value>)) {
    let mut v: Vec<Value> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut v);
    let lines: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    std::fs::write(path, format!("[\n{}\n]\n", lines.join(",\n"))).unwrap();
}

/// A Parquet table with one string cell changed.
fn edit_parquet(path: &Path, column: &str, row: usize, to: &str) {
    use polars_core::prelude::*;
    use polars_io::prelude::*;
    let mut df = ParquetReader::new(std::fs::File::open(path).unwrap()).finish().unwrap();
    let mut values = benchgen::release::tables::strings(&df, column).unwrap();
    values[row] = to.to_string();
    df.replace(column, Column::from(Series::new(column.into(), values))).unwrap();
    ParquetWriter::new(std::fs::File::create(path).unwrap()).finish(&mut df).unwrap();
}

#[test]
fn verify_fails_on_a_consistent_edit_of_each_format_file() {
    // Issue 26: each edit keeps its file parseable and scoring 100 %, and SHA256SUMS is
    // recomputed; only the record-by-record check against samples.jsonl finds it.
    let p = project("1.0.0");
    assert_code(&release(&p, &[]), 0);
    let e = planted(
        &p,
        "level2",
        |d| {
            edit_json(&d.join("level_2.json"), |q| {
                let alt = &mut q[0]["ground_truth_tools"][0][1];
                alt["tool_id"] = json!("Alpha::y");
                alt["server_name"] = json!("Alpha");
                alt["tool_name"] = json!("y");
                alt["description"] = json!("does y");
            })
        },
        true,
    );
    assert!(
        e.contains("level_2.json: query 1 (record 0) (sample `L2-1`): field `ground_truth_tools[0][1].description` is \"does y\" but samples.jsonl makes \"does x too\""),
        "{e}"
    );
    let e = planted(
        &p,
        "level1",
        |d| edit_json(&d.join("level_1.json"), |q| q[0]["query"] = json!("On Alpha, run y.")),
        true,
    );
    assert!(
        e.contains("level_1.json: query 1 (record 0) (sample `L1-1`): field `query` is \"On Alpha, run y.\""),
        "{e}"
    );
    let e = planted(
        &p,
        "finmcp",
        |d| edit_json(&d.join("finmcp_multi_tool.json"), |s| s[0]["answer"] = json!("Other.")),
        true,
    );
    assert!(e.contains("finmcp_multi_tool.json: record 0 (sample `fin-b`): field `answer` is \"Other.\" but samples.jsonl makes \"Done.\""), "{e}");
    let e = planted(&p, "samples_table", |d| edit_parquet(&d.join("samples.parquet"), "difficulty", 0, "hard"), true);
    assert!(
        e.contains(
            "samples.parquet: row 0 (sample `L1-1`): field `difficulty` is \"hard\" but samples.jsonl makes \"easy\""
        ),
        "{e}"
    );
    let e = planted(&p, "tools_table", |d| edit_parquet(&d.join("tools.parquet"), "tool", 0, "w"), true);
    assert!(
        e.contains("tools.parquet: row 0 (tool `Alpha::x`): field `tool` is \"w\" but samples.jsonl makes \"x\""),
        "{e}"
    );

    // A lineage line that misses a required stage (its `efs-finalize` events removed).
    let e = planted(
        &p,
        "lineage_gap",
        |d| {
            edit_lineage(d, |v| {
                if v["id"] == "L2-1" {
                    v["events"].as_array_mut().unwrap().retain(|e| e["stage"] != "efs-finalize");
                }
            })
        },
        true,
    );
    assert!(e.contains("lineage of `L2-1` (level L2) misses the required stage(s) `efs-finalize`"), "{e}");

    // A level sample whose plan check decided a step out, or gives no decisions at all.
    let e = planted(
        &p,
        "step_decisions",
        |d| {
            edit_lineage(d, |v| {
                if v["id"] == "L4-1" {
                    v["plan_check"][1]["decision"] = json!("unrequested");
                }
                if v["id"] == "L1-1" {
                    v.as_object_mut().unwrap().remove("plan_check");
                }
            })
        },
        true,
    );
    assert!(e.contains("lineage of `L1-1` gives no plan check (`plan_check`)"), "{e}");
    assert!(e.contains("lineage of `L4-1`: the plan check has no `kept` decision on step 2 ("), "{e}");
}

#[test]
fn verify_warns_on_an_empty_part_instead_of_scoring_it() {
    let p = project("1.0.0");
    assert_code(&release(&p, &[]), 0);
    let o = benchgen(&["release", "verify", dir(&p, "1.0.0").to_str().unwrap()]);
    assert_code(&o, 0);
    let out = stdout(&o);
    // The fixture's only multi-tool FinMCP sample stays; the single-tool file holds one.
    // Empty the L5 file (its one sample removed from every file) and verify again.
    let d = p.path("planted/empty");
    for (rel, bytes) in tree(&dir(&p, "1.0.0")) {
        p.write(&format!("planted/empty/{rel}"), bytes);
    }
    edit_json(&d.join("level_5.json"), Vec::clear);
    let keep = |f: &str, drop: &str| {
        let text = std::fs::read_to_string(d.join(f)).unwrap();
        let kept: String = text.lines().filter(|l| !l.contains(drop)).map(|l| format!("{l}\n")).collect();
        std::fs::write(d.join(f), kept).unwrap();
    };
    keep("samples.jsonl", "\"L5-1\"");
    keep("lineage.jsonl", "\"L5-1\"");
    keep("cassettes.jsonl", "\"L5-1\"");
    {
        use polars_core::prelude::*;
        use polars_io::prelude::*;
        let path = d.join("samples.parquet");
        let df = ParquetReader::new(std::fs::File::open(&path).unwrap()).finish().unwrap();
        let ids = benchgen::release::tables::strings(&df, "id").unwrap();
        let mask: BooleanChunked = ids.iter().map(|i| i != "L5-1").collect();
        let mut df = df.filter(&mask).unwrap();
        ParquetWriter::new(std::fs::File::create(&path).unwrap()).finish(&mut df).unwrap();
    }
    benchgen::release::croissant::rehash(&d).unwrap();
    std::fs::write(d.join("SHA256SUMS"), benchgen::release::checksums(&d).unwrap()).unwrap();
    let o = benchgen(&["release", "verify", d.to_str().unwrap()]);
    assert_code(&o, 0);
    let now = stdout(&o);
    assert!(now.contains("warn  level_5.json: empty part (0 queries): nothing to score"), "{now}");
    assert!(!now.contains("level_5.json: oracle scores"), "an empty part is not scored: {now}");
    assert!(out.contains("level_5.json: oracle scores 100 %"), "{out}");
}

#[test]
fn a_version_is_never_overwritten_and_an_extension_gets_a_changelog() {
    let p = project("1.0.0");
    assert_code(&release(&p, &[]), 0);
    let v1 = tree(&dir(&p, "1.0.0"));
    // The same inputs again: the same bytes, nothing rewritten.
    let o = release(&p, &["--force"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("already published"), "{}", stdout(&o));
    assert_eq!(tree(&dir(&p, "1.0.0")), v1);

    // Extend: a new sample, one changed (and reviewed again), one now rejected.
    let mut validated = validated_pool();
    validated[0]["turns"][0]["gold_reply"] = json!("ACME trades at 11.");
    validated.push(fin(
        "fin-e",
        "single_tool",
        json!([{"user": "EUR rate?", "reference_plan": plan(&[(&["get_fx"], 0, &[])]), "gold_reply": "0.92"}]),
        &["markets", "fx"],
    ));
    upstream_fixture(p.root(), &validated, &levels_pool(), &["fin-d", "fin-c"]);
    let o = release(&p, &[]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("already exists with different content"), "{}", stderr(&o));
    assert_eq!(tree(&dir(&p, "1.0.0")), v1, "the published version is untouched");

    p.write(CONFIG, config("1.1.0", true));
    assert_code(&release(&p, &[]), 0);
    assert_eq!(tree(&dir(&p, "1.0.0")), v1);
    let log = std::fs::read_to_string(dir(&p, "1.1.0").join("CHANGELOG.md")).unwrap();
    for needle in [
        "## 1.1.0",
        "Against 1.0.0: 1 added, 1 removed, 1 changed, 6 unchanged.",
        "- `fin-e`: new in the sample pool",
        "- `fin-c`: review: rejected",
        "- `fin-a`: content changed; reviewed again (accepted by llm)",
    ] {
        assert!(log.contains(needle), "changelog lacks {needle:?}:\n{log}");
    }
    assert!(std::fs::read_to_string(dir(&p, "1.1.0").join("README.md")).unwrap().contains("## Changes"));
    assert_code(&benchgen(&["release", "verify", dir(&p, "1.1.0").to_str().unwrap()]), 0);
}

#[test]
fn a_rebuild_from_the_same_inputs_and_ledger_is_byte_identical() {
    let a = project("1.0.0");
    assert_code(&release(&a, &[]), 0);
    let first = tree(&dir(&a, "1.0.0"));
    // Same project: the release removed and remade, replaying from the ledger.
    std::fs::remove_dir_all(dir(&a, "1.0.0")).unwrap();
    assert_code(&a.run(&["--config", CONFIG, "clean", "release"]), 0);
    assert_code(&a.run(&["--config", CONFIG, "--llm-mode", "replay", "release"]), 0);
    assert_eq!(tree(&dir(&a, "1.0.0")), first);
    // A fresh project from the same inputs and ledger events.
    let b = project("1.0.0");
    assert_code(&b.run(&["--config", CONFIG, "--llm-mode", "replay", "release"]), 0);
    let second = tree(&dir(&b, "1.0.0"));
    assert_eq!(first.keys().collect::<Vec<_>>(), second.keys().collect::<Vec<_>>());
    for (k, v) in &first {
        assert!(second[k] == *v, "{k} differs between the two builds");
    }
}

/// The loader `make setup` installs for this test (scripts/setup.d/45-hf-datasets.sh).
fn hf_python() -> Option<PathBuf> {
    let py = benchgen::llm::config::cache_dir().join("hf-datasets/bin/python");
    if py.is_file() {
        return Some(py);
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "Hugging Face datasets is missing: run `make setup`");
    eprintln!("skipping the Hugging Face loader test: run `make setup` to install `datasets`");
    None
}

/// Every config of the card loads with Hugging Face `datasets` as the Hub would load it
/// (one loader for all configs, chosen from the default's files), with one row per record;
/// an empty part has no config. Before: every JSON config failed with "Parquet magic bytes
/// not found in footer" and an empty part with "corresponds to no data".
#[test]
fn every_card_config_loads_with_hugging_face_datasets() {
    let Some(py) = hf_python() else { return };
    let p = project("0.1.0");
    assert_code(&release(&p, &[]), 0);
    // fin-c is the only multi-turn sample: rejecting it too leaves finmcp_multi_turn.json empty.
    let q = Project::empty();
    q.write(CONFIG, config("0.1.0", true));
    upstream_fixture(q.root(), &validated_pool(), &levels_pool(), &["fin-c", "fin-d"]);
    assert_code(&release(&q, &[]), 0);
    const LOAD: &str = r#"
import json, os, sys, yaml, datasets
datasets.disable_progress_bars()
root = sys.argv[1]
meta = yaml.safe_load(open(os.path.join(root, "README.md")).read().split("---")[1])
out = {}
for c in meta["configs"]:
    d = datasets.load_dataset(root, c["config_name"], split="test")
    out[c["config_name"]] = {"rows": d.num_rows, "columns": d.column_names, "path": c["data_files"][0]["path"]}
print(json.dumps(out))
"#;
    for (proj, empty) in [(&p, None), (&q, Some("finmcp_multi_turn"))] {
        let root = dir(proj, "0.1.0");
        let home = tempfile::tempdir().unwrap();
        let o = std::process::Command::new(&py)
            .args(["-c", LOAD])
            .arg(&root)
            .env("HF_HOME", home.path())
            .env("HF_DATASETS_OFFLINE", "1")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let loaded: Value = serde_json::from_slice(o.stdout.rsplit(|b| *b == b'\n').nth(1).unwrap()).unwrap();
        let samples = std::fs::read_to_string(root.join("samples.jsonl")).unwrap().lines().count();
        assert_eq!(loaded["all"]["rows"], samples, "{loaded}");
        assert!(loaded["all"]["columns"].as_array().unwrap().contains(&json!("turns")), "{loaded}");
        for name in [
            "level_1",
            "level_2",
            "level_3",
            "level_4",
            "level_5",
            "finmcp_single_tool",
            "finmcp_multi_tool",
            "finmcp_multi_turn",
        ] {
            let file: Value =
                serde_json::from_str(&std::fs::read_to_string(root.join(format!("{name}.json"))).unwrap()).unwrap();
            let n = file.as_array().unwrap().len();
            if Some(name) == empty {
                assert_eq!(n, 0);
                assert!(loaded.get(name).is_none(), "an empty part has no config: {loaded}");
                let card = std::fs::read_to_string(root.join("README.md")).unwrap();
                assert!(card.contains(&format!("| `{name}.json` | FinMCP sample JSON (`benchgen score --compat finmcp` reads it) (empty in this release: no dataset config) |")), "{card}");
            } else {
                assert_eq!(loaded[name]["rows"], n, "{name}: {loaded}");
            }
        }
    }
}

/// The validator and loader `make setup` installs for this test
/// (scripts/setup.d/46-mlcroissant.sh): its venv's `bin/`.
fn mlcroissant_bin() -> Option<PathBuf> {
    let bin = benchgen::llm::config::cache_dir().join("mlcroissant/bin");
    if bin.join("python").is_file() && bin.join("mlcroissant").is_file() {
        return Some(bin);
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "mlcroissant is missing: run `make setup`");
    eprintln!("skipping the Croissant test: run `make setup` to install `mlcroissant`");
    None
}

/// `croissant.json` validates with `mlcroissant` (the MLCommons reference library), and each
/// of its record sets loads with one record per record of its file: every part that holds
/// records and `lineage.jsonl`; `SHA256SUMS` lists it.
#[test]
fn croissant_json_validates_and_every_record_set_loads_with_mlcroissant() {
    let Some(bin) = mlcroissant_bin() else { return };
    let p = project("0.1.0");
    assert_code(&release(&p, &[]), 0);
    let root = dir(&p, "0.1.0");
    let jsonld = root.join("croissant.json");
    let o = std::process::Command::new(bin.join("mlcroissant"))
        .args(["validate", "--jsonld"])
        .arg(&jsonld)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    const LOAD: &str = r#"
import json, sys, mlcroissant as mlc
ds = mlc.Dataset(jsonld=sys.argv[1])
print(json.dumps({rs.uuid: len(list(ds.records(record_set=rs.uuid))) for rs in ds.metadata.record_sets}))
"#;
    let o = std::process::Command::new(bin.join("python")).args(["-c", LOAD]).arg(&jsonld).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let loaded: Value = serde_json::from_slice(o.stdout.rsplit(|b| *b == b'\n').nth(1).unwrap()).unwrap();
    let lines = |f: &str| std::fs::read_to_string(root.join(f)).unwrap().lines().count();
    let mut want = serde_json::Map::new();
    for f in [
        "finmcp_multi_tool",
        "finmcp_multi_turn",
        "finmcp_single_tool",
        "level_1",
        "level_2",
        "level_3",
        "level_4",
        "level_5",
    ] {
        let records: Vec<Value> =
            serde_json::from_slice(&std::fs::read(root.join(format!("{f}.json"))).unwrap()).unwrap();
        assert!(!records.is_empty(), "the fixture fills every part: {f}");
        want.insert(f.into(), json!(records.len()));
    }
    want.insert("lineage".into(), json!(lines("lineage.jsonl")));
    want.insert("samples".into(), json!(lines("samples.jsonl")));
    assert_eq!(loaded, Value::Object(want));
    let sums = std::fs::read_to_string(root.join("SHA256SUMS")).unwrap();
    assert!(sums.contains("  croissant.json\n"), "{sums}");
}

/// Two samples asking the same thing (the same user text, up to case, spacing and end
/// punctuation) are released once: the first in id order; the other is left out with its
/// reason, counted on the card and recorded in the ledger.
#[test]
fn a_request_released_twice_is_left_out_the_second_time_with_its_reason() {
    let p = Project::empty();
    p.write(CONFIG, config("0.1.0", true));
    let mut levels = levels_pool();
    levels.insert(2, etom("L2-2", "L2", "do the  x thing", plan(&[(&["Beta::u"], 0, &[])]), &["dev"]));
    upstream_fixture(p.root(), &validated_pool(), &levels, &["fin-d"]);
    let o = release(&p, &[]);
    assert_code(&o, 0);
    let d = dir(&p, "0.1.0");
    let ids: Vec<String> = std::fs::read_to_string(d.join("samples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].as_str().unwrap().to_string())
        .collect();
    assert!(ids.contains(&"L2-1".to_string()) && !ids.contains(&"L2-2".to_string()), "{ids:?}");
    assert_eq!(ids.len(), 8);
    let card = std::fs::read_to_string(d.join("README.md")).unwrap();
    assert!(card.contains("duplicate request"), "{card}");
    let o = p.run(&["--config", CONFIG, "--json", "explain", "sample:L2-2"]);
    let x = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        x.contains("release.left_out") && x.contains("duplicate request: the same text as `L2-1`"),
        "the drop is in the ledger with its reason: {x}"
    );
}

/// A sample still waiting for scores stays out with what it waits for, and the publication
/// says that a later decision needs a new version (a published one is never overwritten).
#[test]
fn a_release_published_while_samples_wait_for_review_says_they_need_a_new_version() {
    let p = Project::empty();
    p.write(CONFIG, config("0.1.0", true));
    upstream_fixture(p.root(), &validated_pool(), &levels_pool(), &["fin-d", "?L2-1"]);
    let o = release(&p, &[]);
    assert_code(&o, 0);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.contains("1 pool sample(s) still wait for review and are not in this version")
            && out.contains("set a new `[release] version`"),
        "{out}"
    );
    let card = std::fs::read_to_string(dir(&p, "0.1.0").join("README.md")).unwrap();
    assert!(card.contains("review: waiting for scores"), "{card}");
    let o = p.run(&["--config", CONFIG, "--json", "explain", "sample:L2-1"]);
    let x = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(x.contains("release.left_out") && x.contains("review: waiting for scores"), "{x}");
}

#[test]
fn a_published_folder_removed_by_hand_is_published_again() {
    // The full demo project, every stage done: the release is up to date.
    let p = crate::pipeline::full_project();
    crate::pipeline::run_everything(&p);
    let folder = p.path("release/demo-bench-0.1.0");
    let v1 = tree(&folder);
    let o = p.run(&["status"]);
    let release_line = |o: &std::process::Output| -> String {
        stdout(o).lines().find(|l| l.starts_with("release ")).unwrap_or_default().to_string()
    };
    assert!(release_line(&o).contains(" done "), "{}", stdout(&o));
    std::fs::remove_dir_all(&folder).unwrap();
    let o = p.run(&["status"]);
    assert!(release_line(&o).contains("`release/demo-bench-0.1.0` is missing"), "{}", stdout(&o));
    // `run` does not skip it as up to date: it publishes the same bytes again.
    let o = p.run(&["run"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("release: done"), "{}", stdout(&o));
    assert_eq!(tree(&folder), v1);
}

/// Issue 42: the servers the samples ran against are pinned in `servers.json` (from the
/// `mcp.server` event `execute` recorded when it connected), and a server whose `tools/list`
/// changed after the release is reported by `release verify --servers` with every changed
/// tool; unchanged, it passes. The recorded stdio command runs only with
/// `--trust-recorded-starts`: without it, it is printed and skipped.
#[test]
fn verify_servers_reports_every_tool_a_pinned_server_changed_since_the_release() {
    let llm = ScriptedLlm::start(|_| Answer::text("Done."));
    let p = project("1.0.0");
    // The log tools the fixture's samples called, served by a `benchgen sandbox` over a list.
    let schema = json!({"type": "object", "properties": {"symbol": {"type": "string"}}});
    let tool = |name: &str, schema: &Value| json!({"name": name, "description": name, "input_schema": schema});
    let tools = p.path("quotes.json");
    let write_tools = |list: Value| std::fs::write(&tools, list.to_string()).unwrap();
    write_tools(json!([tool("get_quote", &schema), tool("get_news", &schema), tool("get_fx", &schema)]));
    let servers = format!(
        "\n[llm.roles.agent]\nprovider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"m\"\n\n[mcp.servers.quotes]\ncommand = {:?}\nargs = [\"--quiet\", \"sandbox\", \"--catalog\", {:?}]\ntool_ids = \"as-is\"\n",
        llm.base_url(),
        env!("CARGO_BIN_EXE_benchgen"),
        tools.to_str().unwrap()
    );
    p.write(CONFIG, config("1.0.0", true) + &servers);
    p.write("queries.jsonl", "{\"id\": \"q1\", \"query\": \"Quote for ACME?\"}\n");
    assert_code(&p.run(&["--config", CONFIG, "execute", "--queries", "queries.jsonl"]), 0);
    assert_code(&release(&p, &[]), 0);

    let d = dir(&p, "1.0.0");
    let pinned: Value = serde_json::from_slice(&std::fs::read(d.join("servers.json")).unwrap()).unwrap();
    let listed = pinned["servers"].as_array().unwrap();
    let quotes = listed.iter().find(|s| s["name"] == "quotes").unwrap_or_else(|| panic!("not pinned: {pinned}"));
    // fin-a and fin-b called its tools; the levels were never executed.
    assert_eq!((quotes["source"].as_str(), quotes["samples"].as_u64()), (Some("execution"), Some(2)), "{quotes}");
    assert_eq!(quotes["start"]["args"][1], "sandbox");
    let names: Vec<&str> = quotes["tools"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(names, ["get_fx", "get_news", "get_quote"]);
    let snapshot: Vec<&str> =
        listed.iter().filter(|s| s["source"] == "registry snapshot").map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(snapshot, ["Alpha", "Beta"], "{pinned}");
    let card = std::fs::read_to_string(d.join("README.md")).unwrap();
    assert!(card.contains("[`servers.json`](servers.json)") && card.contains("[`croissant.json`](croissant.json)"));

    let verify = |json: bool, trust: bool| {
        let mut args = vec!["release", "verify", "release/it-bench-1.0.0", "--servers"];
        if trust {
            args.push("--trust-recorded-starts");
        }
        if json {
            args.insert(0, "--json");
        }
        p.run(&args)
    };
    // A release's recorded command is not run untrusted: it is shown, with why it was not run,
    // and as no server was started, nothing was verified: exit 1, saying how to trust.
    let o = verify(false, false);
    assert_code(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("servers.json: no server verified: none was started (1 recorded start(s) not run without --trust-recorded-starts)"),
        "{err}"
    );
    assert!(err.contains("hint: the release is intact; to verify its servers, read the commands above"), "{err}");
    let out = stdout(&o);
    assert!(out.contains("servers.json: `quotes` (execution): would run `"), "{out}");
    assert!(out.contains(" --quiet sandbox --catalog "), "the whole command line is shown: {out}");
    assert!(
        out.contains("recorded stdio start not run without --trust-recorded-starts; pass it after reading the commands above, or --config to start your configured servers"),
        "{out}"
    );
    assert!(!out.contains("every pinned tool as released"), "{out}");

    let o = verify(false, true);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("servers.json: `quotes` (recorded start): every pinned tool as released"), "{out}");
    assert!(out.contains("servers.json: `Alpha` (registry snapshot): never executed: nothing to start"), "{out}");

    // After the release the server changes: one schema widened, one tool gone, one new.
    let wider = json!({"type": "object", "properties": {"symbol": {"type": "string"}, "date": {"type": "string"}}});
    write_tools(json!([tool("get_quote", &schema), tool("get_fx", &wider), tool("get_rate", &schema)]));
    let o = verify(true, true);
    assert_code(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("servers.json: `quotes` (recorded start): 3 tool(s) changed since the release: `get_fx` input schema changed, `get_news` removed, `get_rate` added"),
        "{err}"
    );
    assert!(!err.contains("`get_quote`"), "an unchanged tool is not reported: {err}");
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let check = report["servers"].as_array().unwrap().iter().find(|c| c["name"] == "quotes").unwrap();
    assert_eq!(check["status"], "changed");
    assert_eq!(
        check["changes"],
        json!([
            {"tool": "get_fx", "change": "input schema changed"},
            {"tool": "get_news", "change": "removed"},
            {"tool": "get_rate", "change": "added"}
        ])
    );
}
