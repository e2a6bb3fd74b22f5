//! Issue 24: answer schemas that agree with their checks, and `check` naming every MCP
//! server a stage would use.
//!
//! A whole demo run (every LLM stage: the filter, EFS verify and top-down, the log track,
//! synthesis and validation, the ETOM levels with `levels schemas`, the pre-review) against
//! a scripted server that answers exactly at each request's schema minimum, then another
//! at its maximum — what a server with grammar-constrained decoding may write. Every item
//! must be accepted: no answer fails its check (no re-ask), nothing fails, and none of the
//! old silent rejections ("the judge gave no verdict", "unusable output schema", …) shows.

use benchgen::ledger::Ledger;

use crate::pipeline::full_project;
use crate::support::scripted_llm::{Edge, ScriptedLlm};
use crate::support::{Project, assert_code, stderr, stdout};

/// The demo project of `pipeline::full_project` with its model replaced by one that
/// answers at `edge` of every schema.
fn edge_project(edge: Edge) -> Project {
    let mut p = full_project();
    let old = p.llm.as_ref().expect("full_project has a scripted model").base_url();
    let llm = ScriptedLlm::at_schema_edge(edge);
    let cfg = p.read("pipeline/demo.toml");
    assert!(cfg.contains(&old), "full_project's config names its scripted model");
    p.write("pipeline/demo.toml", cfg.replace(&old, &llm.base_url()));
    p.llm = Some(llm);
    p
}

/// Texts of the rejections that followed an answer the schema allowed and a check (or
/// the code after the call) refused, before issue 24.
const SILENT_REJECTIONS: &[&str] = &[
    "the judge gave no verdict",
    "the judge gave no usable verdict",
    "the inferred output schema is unusable",
    "the writer returned an empty query",
    "the model wrote an empty query",
    "empty first message",
    "is not one of the candidates",
    "are not judged",
    "dependencies rejected",
    "the answer has no score",
];

fn run_at(edge: Edge) {
    let p = edge_project(edge);
    // Up to the merged review decisions: at the minimum edge every pre-review score is the
    // scale's minimum, so no sample is accepted and `release` rightly refuses to publish
    // nothing; that is a decision, not an answer the schema allowed and its check refused.
    let o = p.run(&["run", "--until", "review-merge"]);
    assert_code(&o, 0);
    let llm = p.llm.as_ref().unwrap();
    let seen = llm.requests();
    let typed = seen.iter().filter(|s| s.answer_schema().is_some()).count();
    assert!(typed > 20, "{edge:?}: the demo asked only {typed} typed questions");
    // Every answer at the schema's edge passed its check at once: no re-ask.
    let reasked: Vec<String> = seen
        .iter()
        .filter(|s| s.all_text().contains("That answer is not valid"))
        .map(|s| s.last_user().chars().take(300).collect())
        .collect();
    assert!(reasked.is_empty(), "{edge:?}: answers at the schema's edge were re-asked: {reasked:#?}");
    // Nothing failed, in the ledger or in any stage's failed.json.
    let ledger = Ledger::open(&p.path("artifacts")).unwrap();
    let failures: i64 = ledger
        .connection()
        .query_row("SELECT COUNT(*) FROM events WHERE kind = 'llm.failure'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(failures, 0, "{edge:?}: LLM calls failed\n{}", stderr(&o));
    let artifacts = p.artifacts();
    let failed: Vec<&String> = artifacts.keys().filter(|k| k.ends_with("/failed.json")).collect();
    assert!(failed.is_empty(), "{edge:?}: items failed: {failed:?}\n{}", stdout(&o));
    for (file, bytes) in &artifacts {
        let text = String::from_utf8_lossy(bytes);
        for r in SILENT_REJECTIONS {
            assert!(
                !text.contains(r),
                "{edge:?}: `{file}` records a rejection the schema should have prevented: `{r}`"
            );
        }
    }
    // The three known cases got through: every planned EFS pair judged, every tool asked
    // got an output schema.
    let verdicts: serde_json::Value =
        serde_json::from_slice(&artifacts["efs-verify/verdicts.json"]).expect("efs-verify wrote its verdicts");
    let pairs = String::from_utf8_lossy(&artifacts["efs-pairs/pairs.csv"]).lines().count() - 1;
    assert_eq!(verdicts.as_array().unwrap().len(), pairs, "{edge:?}: every planned pair has a verdict");
    let schemas: serde_json::Value = serde_json::from_slice(&artifacts["levels-schemas/schemas.json"]).unwrap();
    let inferred = schemas.as_object().unwrap().values().filter(|e| e["source"] == "inferred").count();
    assert!(inferred > 0, "{edge:?}: no output schema was inferred: {schemas}");
}

#[test]
fn a_server_answering_at_each_schema_minimum_gets_every_item_accepted() {
    run_at(Edge::Min);
}

#[test]
fn a_server_answering_at_each_schema_maximum_gets_every_item_accepted() {
    run_at(Edge::Max);
}

/// Issue 24 part 4: `execute.servers` serve a queries file, which `benchgen execute
/// --queries` may run at any time, so `check` names them also when synthesis feeds
/// `execute`; `synth.server` likewise.
#[test]
fn check_names_every_server_of_every_mode_of_execute() {
    let p = full_project();
    let cfg = p.read("pipeline/demo.toml");
    // Synthesis feeds `execute`: no queries file.
    let chains = cfg.replace("queries = \"raw/queries.jsonl\"\n", "");
    assert_ne!(chains, cfg, "full_project's `[execute]` names a queries file");
    let ghost = chains.replace("servers = [\"sb\"]", "servers = [\"no-such-server\"]");
    assert_ne!(ghost, chains, "full_project's `[execute]` names its servers");
    let ghost = ghost.replacen("[synth]\n", "[synth]\nserver = \"no-such-synth-server\"\n", 1);
    p.write("pipeline/demo.toml", &ghost);
    let o = p.run(&["check"]);
    assert_code(&o, 1);
    let err = stderr(&o);
    assert!(err.contains("execute.servers[0]: no MCP server `no-such-server`"), "{err}");
    assert!(err.contains("synth.server: no MCP server `no-such-synth-server`"), "{err}");
    // The same servers, configured: no problem.
    p.write("pipeline/demo.toml", chains.replacen("[synth]\n", "[synth]\nserver = \"sb\"\n", 1));
    let o = p.run(&["check"]);
    assert_code(&o, 0);

    // A queries file and no MCP server at all: `execute` would have nothing to run against.
    let p = Project::demo();
    let base_url = p.llm.as_ref().unwrap().base_url();
    let cfg = format!(
        "{}\n[llm.roles.agent]\nprovider = \"vllm\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\n\n\
         [execute]\nqueries = \"raw/q.jsonl\"\nrole = \"agent\"\n",
        p.read("pipeline/demo.toml")
    );
    p.write("pipeline/demo.toml", cfg);
    let o = p.run(&["check"]);
    assert_code(&o, 1);
    assert!(
        stderr(&o).contains("execute.servers: `execute` runs a queries file and the config declares no MCP server")
    );
}
