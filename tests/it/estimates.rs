//! `benchgen check`'s table of the first run's LLM exchanges is an upper bound (issue 39):
//! on the full scripted demo, taken before anything runs, every stage's live exchanges per
//! role, as the ledger counts them after the whole pipeline ran, stay within it, and every
//! stage that called the LLM has a row.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::pipeline::{full_project, run_everything};
use crate::support::{assert_code, stdout};

#[test]
fn every_stage_makes_at_most_the_exchanges_check_estimated_before_the_run() {
    let p = full_project();
    let o = p.run(&["check"]);
    assert_code(&o, 0);
    let text = stdout(&o);
    assert!(text.contains("no problems"), "{text}");
    let header = text.lines().find(|l| l.starts_with("stage ")).unwrap_or_else(|| panic!("no table:\n{text}"));
    let columns: Vec<&str> = header.split('|').map(str::trim).collect();
    assert_eq!(columns, ["stage", "role", "exchanges (≤)", "basis", "time ≈"], "{text}");
    // Nothing has run yet: no role is timed, and the table says how to time one.
    assert!(text.contains("not measured: `benchgen llm ping --probe --role"), "{text}");

    let o = p.run(&["--json", "check"]);
    assert_code(&o, 0);
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut estimated: BTreeMap<(String, String), u64> = BTreeMap::new();
    for r in summary["estimates"]["rows"].as_array().expect("the JSON summary has the rows") {
        // Every input the demo's bounds need is there before the run.
        assert!(!r["basis"].as_str().unwrap().contains("unknown"), "{r}");
        let key = (r["stage"].as_str().unwrap().to_string(), r["role"].as_str().unwrap().to_string());
        *estimated.entry(key).or_default() += r["exchanges"].as_u64().unwrap();
    }

    run_everything(&p);
    let o = p.run(&["--json", "llm", "stats"]);
    assert_code(&o, 0);
    let stats: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut stages_with_calls = std::collections::BTreeSet::new();
    for r in stats.as_array().expect("stats rows") {
        let (stage, role) = (r["stage"].as_str().unwrap(), r["role"].as_str().unwrap());
        let calls = r["calls"].as_u64().unwrap();
        if calls == 0 {
            continue;
        }
        stages_with_calls.insert(stage.to_string());
        let Some(bound) = estimated.get(&(stage.to_string(), role.to_string())) else {
            panic!("`{stage}` made {calls} exchanges with `{role}`, and `check` estimated none: {estimated:?}");
        };
        assert!(calls <= *bound, "`{stage}` made {calls} exchanges with `{role}`; `check` said at most {bound}");
    }
    // Both tracks, synthesis, review and the panel all called the model.
    for stage in ["filter", "efs-verify", "levels-l4", "logs-curate", "synth-chains", "review-prereview", "eval"] {
        assert!(stages_with_calls.contains(stage), "`{stage}` made no exchange: {stages_with_calls:?}");
    }
}
