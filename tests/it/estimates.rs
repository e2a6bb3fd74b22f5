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

    let estimated = bounds(&p);

    run_everything(&p);
    // Once the stages' inputs are there (as `run` finds them stage by stage), some bounds
    // count them instead (`filter`'s `ask` matches, `levels l3`'s chains, `validate`'s
    // executed chains and dialogues): those bounds hold too.
    let after = bounds(&p);
    for stage in ["filter", "levels-l3", "validate"] {
        let before: u64 = estimated.iter().filter(|((s, _), _)| s == stage).map(|(_, n)| n).sum();
        let now: u64 = after.iter().filter(|((s, _), _)| s == stage).map(|(_, n)| n).sum();
        assert!(now <= before, "`{stage}`: {now} exchanges at most once its inputs are there, {before} before");
    }
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
        for (when, bounds) in [("before the run", &estimated), ("after it", &after)] {
            let Some(bound) = bounds.get(&(stage.to_string(), role.to_string())) else {
                panic!("`{stage}` made {calls} exchanges with `{role}`, and `check` {when} estimated none: {bounds:?}");
            };
            assert!(
                calls <= *bound,
                "`{stage}` made {calls} exchanges with `{role}`; `check` {when} said at most {bound}"
            );
        }
    }
    // Both tracks, synthesis, review and the panel all called the model.
    for stage in ["filter", "efs-verify", "levels-l4", "logs-curate", "synth-chains", "review-prereview", "eval"] {
        assert!(stages_with_calls.contains(stage), "`{stage}` made no exchange: {stages_with_calls:?}");
    }

    // Now every stage that asked a model has a last run: what its roles made (as the ledger
    // counts them, this run the only one), its time, and the total of those.
    let o = p.run(&["--json", "check"]);
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    let last = summary["estimates"]["last_runs"].as_object().expect("the JSON summary has the last runs");
    let ran: std::collections::BTreeSet<String> = last.keys().cloned().collect();
    assert_eq!(ran, stages_with_calls, "{last:?}");
    for r in summary["estimates"]["rows"].as_array().unwrap() {
        let (stage, role) = (r["stage"].as_str().unwrap(), r["role"].as_str().unwrap());
        let made = stats
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["stage"] == stage && s["role"] == role)
            .map_or(0, |s| s["calls"].as_u64().unwrap());
        match r.get("last_run") {
            Some(n) => assert_eq!(n.as_u64(), Some(made), "{r}"),
            None => assert!(made == 0 && !ran.contains(stage), "{r}"),
        }
    }
    let text = stdout(&p.run(&["check"]));
    let header = text.lines().find(|l| l.starts_with("stage ")).unwrap();
    assert!(header.ends_with("| last run"), "{text}");
    let total = text.lines().find(|l| l.starts_with("total ")).unwrap();
    assert!(total.ends_with(&format!("over {} stages)", ran.len())), "{text}");
}

/// `check --json`'s bound per stage and role.
fn bounds(p: &crate::support::Project) -> BTreeMap<(String, String), u64> {
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
    estimated
}
