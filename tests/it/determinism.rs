//! Issue 24, part 3: the same inputs and ledger give byte-identical artifacts. The full demo
//! project (every stage, LLM on the scripted test double, `execute` against a sandbox) runs
//! uninterrupted twice, and once with every stage that calls an LLM or an MCP server killed
//! after an item's checkpoint (while others may be in flight) and resumed; every output file
//! of the three runs must agree byte for byte. Timings and ledger event ids belong in the
//! ledger and the manifests, which are left out of the comparison (docs/pipeline.md#determinism).

use std::collections::BTreeMap;

use crate::pipeline::{full_project, run_everything, run_everything_with};
use crate::support::{Project, assert_code, stderr, tree};

/// Each stage of the full project that calls an LLM or an MCP server, the fail point it
/// reaches after each item's checkpoint, and the hit that kills it: the second where the
/// stage has several items, so one is resumed from the checkpoint and others are redone
/// with their replies from the ledger.
const KILLS: &[(&str, &str, usize)] = &[
    ("filter", "filter_classify_item", 2),
    ("efs-verify", "efs_verify_call", 2),
    ("efs-topdown", "efs_topdown_set", 1),
    ("levels-profiles", "llm_batch_item", 2),
    ("levels-schemas", "llm_batch_item", 2),
    ("levels-l1", "llm_batch_item", 2),
    ("levels-l2", "llm_batch_item", 2),
    ("levels-l3", "llm_batch_item", 2),
    ("levels-l4", "llm_batch_item", 2),
    ("levels-l5", "llm_batch_item", 2),
    ("logs-curate", "logs_curate_session", 2),
    ("graph-build", "graph_build_edge", 2),
    ("synth-chains", "synth_chain", 2),
    ("execute", "execute_query", 1),
    ("synth-roleplay", "synth_dialogue", 1),
    ("validate", "validate_dialogue", 1),
    ("review-prereview", "review_prereview_item", 2),
];

/// Every output file: `artifacts/` without the manifests, the ledger and the work
/// folders, then the review sheets and the release.
fn outputs(p: &Project) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for top in ["artifacts", "reviews", "release"] {
        for (rel, bytes) in tree(&p.path(top)) {
            let skip = rel.ends_with("manifest.json")
                || rel.starts_with("ledger.sqlite")
                || rel.starts_with('.')
                || rel.contains("/.");
            if !skip {
                out.insert(format!("{top}/{rel}"), bytes);
            }
        }
    }
    out
}

/// The first difference between two output trees, as a readable message.
fn first_difference(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>) -> Option<String> {
    let (ka, kb): (Vec<&String>, Vec<&String>) = (a.keys().collect(), b.keys().collect());
    if ka != kb {
        let only_a: Vec<&&String> = ka.iter().filter(|k| !b.contains_key(**k)).collect();
        let only_b: Vec<&&String> = kb.iter().filter(|k| !a.contains_key(**k)).collect();
        return Some(format!("different files: only in the first {only_a:?}, only in the second {only_b:?}"));
    }
    let differ: Vec<&String> = a.keys().filter(|k| a[*k] != b[*k]).collect();
    let k = differ.first()?;
    let (x, y) = (String::from_utf8_lossy(&a[*k]), String::from_utf8_lossy(&b[*k]));
    let line = x.lines().zip(y.lines()).enumerate().find(|(_, (l, m))| l != m);
    Some(format!("{} file(s) differ: {differ:?}; first differing line of `{k}`: {line:?}", differ.len()))
}

fn stage_order(p: &Project) -> Vec<String> {
    let o = p.run(&["stages", "--json"]);
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn every_llm_and_mcp_stage_killed_and_resumed_or_rerun_writes_byte_identical_outputs() {
    let a = full_project();
    run_everything(&a);
    let want = outputs(&a);
    assert!(want.contains_key("artifacts/execute/trajectories.jsonl"), "{:?}", want.keys());

    // Two uninterrupted runs agree.
    let c = full_project();
    run_everything(&c);
    if let Some(d) = first_difference(&want, &outputs(&c)) {
        panic!("two uninterrupted runs differ: {d}");
    }

    // Every LLM or MCP stage killed mid-way, then resumed by the next command.
    let b = full_project();
    let order = stage_order(&b);
    let pos = |s: &str| order.iter().position(|x| x == s).unwrap_or_else(|| panic!("no stage `{s}`"));
    let mut killed: Vec<&str> = Vec::new();
    run_everything_with(&b, &mut |p: &Project, until: Option<&str>| {
        let last = until.map_or(usize::MAX, pos);
        let due: Vec<(&str, &str, usize)> =
            KILLS.iter().filter(|k| !killed.contains(&k.0) && pos(k.0) <= last).copied().collect();
        for (stage, point, nth) in due {
            let o = p.cmd().args(["run", "--until", stage]).env("BENCHGEN_FAIL_AT", format!("{point}:{nth}")).output();
            let o = o.unwrap();
            assert!(
                !o.status.success() && stderr(&o).contains(&format!("fail point `{point}` reached")),
                "`{stage}` was not killed at `{point}:{nth}` (fewer items?):\n{}",
                stderr(&o)
            );
            assert!(!p.path(&format!("artifacts/{stage}/manifest.json")).exists(), "`{stage}` committed");
            assert!(
                p.path(&format!("artifacts/.work/{stage}/items.jsonl")).exists(),
                "`{stage}` was killed before its first checkpoint"
            );
            killed.push(stage);
        }
        let mut args = vec!["run"];
        args.extend(until.iter().flat_map(|u| ["--until", *u]));
        let o = p.run(&args);
        assert_code(&o, 0);
    });
    assert_eq!(killed, KILLS.iter().map(|k| k.0).collect::<Vec<_>>(), "every stage in the table was killed once");
    if let Some(d) = first_difference(&want, &outputs(&b)) {
        panic!("a run killed inside each LLM and MCP stage and resumed differs from an uninterrupted one: {d}");
    }
}
