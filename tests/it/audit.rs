//! Issue 26, the audit trail, over the full demo pipeline on the scripted endpoint (every
//! stage; the agent calls tools, dialogues run two turns): two from-scratch runs, one of
//! whose ledgers holds unrelated events first (an `llm ping`), publish byte-identical
//! release folders; the release holds samples of every level and kind; and per kind, a
//! released sample's shipped lineage reaches every stage that made it (the rules `release
//! verify` enforces, docs/release.md#lineage), a level sample's with the plan check's
//! decision on every step of its plan (issue 38).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::support::{Project, assert_code, stderr, stdout, tree};

const RELEASE: &str = "release/demo-bench-0.1.0";

/// The stages each kind's lineage must reach in the demo (beyond what `release verify`
/// requires of any release, these are what the demo's tracks run).
const REQUIRED: &[(&str, &[&str])] = &[
    ("L1", &["registry-import", "filter", "levels-export", "review-merge"]),
    ("L2", &["registry-import", "filter", "efs-verify", "efs-finalize", "levels-l2", "levels-export", "review-merge"]),
    ("L3", &["registry-import", "filter", "levels-export", "review-merge"]),
    ("L4", &["registry-import", "filter", "levels-l4", "levels-export", "review-merge"]),
    ("L5", &["levels-l5", "levels-export", "review-merge"]),
    (
        "chain",
        &[
            "logs-import",
            "logs-curate",
            "logs-split",
            "graph-build",
            "synth-chains",
            "execute",
            "validate",
            "review-merge",
        ],
    ),
    ("real", &["logs-import", "logs-curate", "logs-split", "validate", "review-merge"]),
    ("dialogue", &["logs-import", "logs-curate", "logs-split", "synth-roleplay", "validate", "review-merge"]),
];

/// The kind of [`REQUIRED`] a lineage line belongs to.
fn kind_of(line: &Value, samples: &BTreeMap<String, Value>) -> String {
    let id = line["id"].as_str().unwrap();
    let s = &samples[id];
    if s["family"] == "etom" {
        return s["kind"].as_str().unwrap().to_string();
    }
    let stages: BTreeSet<&str> =
        line["events"].as_array().unwrap().iter().filter_map(|e| e["stage"].as_str()).collect();
    if stages.contains("synth-roleplay") {
        "dialogue".into()
    } else if stages.contains("synth-chains") {
        "chain".into()
    } else {
        "real".into()
    }
}

#[test]
fn releases_are_byte_identical_whatever_else_the_ledger_holds_and_every_kind_reaches_its_sources() {
    let a = crate::determinism::project();
    // Unrelated events first: a ping of every role (its answers need not be right).
    let ping = a.run(&["llm", "ping"]);
    assert!(a.path("artifacts/ledger.sqlite").exists(), "`llm ping` recorded nothing: {}", stderr(&ping));
    crate::pipeline::run_everything(&a);
    let b = crate::determinism::project();
    crate::pipeline::run_everything(&b);
    let (ra, rb) = (tree(&a.path(RELEASE)), tree(&b.path(RELEASE)));
    assert!(ra.contains_key("lineage.jsonl"), "{:?}", ra.keys());
    assert_eq!(ra.keys().collect::<Vec<_>>(), rb.keys().collect::<Vec<_>>());
    // The checksums last: a differing file is named by itself first.
    let mut keys: Vec<&String> = ra.keys().collect();
    keys.sort_by_key(|k| (*k == "SHA256SUMS", *k));
    for k in keys {
        if rb[k] != ra[k] {
            let (x, y) = (String::from_utf8_lossy(&ra[k]), String::from_utf8_lossy(&rb[k]));
            let Some((p, q)) = x.lines().zip(y.lines()).find(|(p, q)| p != q) else {
                panic!("`{k}` differs between the two runs in its length");
            };
            let words = |l: &str| -> BTreeSet<String> { l.split("},{").map(str::to_string).collect() };
            let (wp, wq) = (words(p), words(q));
            let only_a: Vec<&String> = wp.difference(&wq).collect();
            let only_b: Vec<&String> = wq.difference(&wp).collect();
            panic!("`{k}` differs between the two runs; only in the first: {only_a:?}; only in the second: {only_b:?}");
        }
    }

    // Per kind, the first released sample's shipped lineage reaches every required stage.
    let samples: BTreeMap<String, Value> = String::from_utf8_lossy(&ra["samples.jsonl"])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|s| (s["id"].as_str().unwrap().to_string(), s))
        .collect();
    let mut first: BTreeMap<String, Value> = BTreeMap::new();
    for l in String::from_utf8_lossy(&ra["lineage.jsonl"]).lines() {
        let line: Value = serde_json::from_str(l).unwrap();
        first.entry(kind_of(&line, &samples)).or_insert(line);
    }
    // The demo releases samples of every level and kind.
    for kind in REQUIRED.iter().map(|(k, _)| *k) {
        assert!(first.contains_key(kind), "the demo released no `{kind}` sample: {:?}", first.keys());
    }
    let kinds: BTreeSet<&str> = samples.values().filter_map(|s| s["kind"].as_str()).collect();
    for kind in ["L1", "L2", "L3", "L4", "L5", "single_tool", "multi_tool", "multi_turn"] {
        assert!(kinds.contains(kind), "the demo released no sample of kind `{kind}`: {kinds:?}");
    }
    every_level_step_is_decided(&a, &samples);
    curation_is_on_the_card(&a, &String::from_utf8_lossy(&ra["README.md"]));
    for (kind, stages) in REQUIRED {
        let Some(line) = first.get(*kind) else { continue };
        let have: BTreeSet<&str> =
            line["events"].as_array().unwrap().iter().filter_map(|e| e["stage"].as_str()).collect();
        let missing: Vec<&&str> = stages.iter().filter(|s| !have.contains(**s)).collect();
        assert!(missing.is_empty(), "{kind} sample `{}` lacks {missing:?}; it has {have:?}", line["id"]);
    }
    let o = a.run(&["release", "verify", RELEASE]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("lineage"), "{}", stdout(&o));
    the_invented_entity_travels_with_the_release(&a, &samples, &ra);
}

/// The entity `levels l3` invented for the released L3 request is in the release's
/// `invented_entities.json`, so `eval` finds it wherever the folder is evaluated.
fn the_invented_entity_travels_with_the_release(
    p: &Project,
    samples: &BTreeMap<String, Value>,
    release: &BTreeMap<String, Vec<u8>>,
) {
    let l3: Value = serde_json::from_str(&p.read("artifacts/levels-l3/queries.json")).unwrap();
    let mut expected = serde_json::Map::new();
    for sample in samples.values().filter(|s| s["kind"] == "L3") {
        let query = l3["queries"].as_array().unwrap().iter().find(|q| q["query"] == sample["turns"][0]["user"]);
        let entity = query.and_then(|q| q["entity"].as_str()).unwrap_or_else(|| panic!("no entity for {sample}: {l3}"));
        expected.insert(sample["id"].as_str().unwrap().to_string(), json!(entity));
    }
    assert!(!expected.is_empty(), "no L3 sample released");
    let file = release.get("invented_entities.json").expect("the release has invented_entities.json");
    let invented: Value = serde_json::from_slice(file).unwrap();
    let n = expected.len();
    assert_eq!(invented, Value::Object(expected));
    // `eval` on the published folder finds them there, with the project's `levels-l3/` gone
    // (as where the folder is evaluated elsewhere).
    std::fs::remove_dir_all(p.path("artifacts/levels-l3")).unwrap();
    let cfg = p.read("pipeline/demo.toml").replace("[eval]\n", &format!("[eval]\nrelease = \"{RELEASE}\"\n"));
    p.write("pipeline/demo.toml", cfg);
    let o = p.run(&["eval"]);
    assert_code(&o, 0);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    let note = format!("{n} L3 request(s) about an entity `levels l3` invented (`{RELEASE}/invented_entities.json`)");
    assert!(said.contains(&note), "{said}");
}

/// The card gives `logs curate`'s drops as its report has them: per criterion and decider,
/// with the share of all sessions and the first example (issue 38, deliverable 5).
fn curation_is_on_the_card(p: &Project, card: &str) {
    let report: Value = serde_json::from_str(&p.read("artifacts/logs-curate/report.json")).unwrap();
    let (kept, sessions) = (report["kept"].as_u64().unwrap(), report["sessions"].as_u64().unwrap());
    assert!(card.contains(&format!("`logs curate` kept {kept} of {sessions} logged sessions")), "{card}");
    for d in report["dropped"].as_array().unwrap() {
        let share = d["share"].as_f64().unwrap() * 100.0;
        let id = &d["examples"][0]["id"];
        let row = format!(
            "| {} | {} | {} | {share:.1} % | {}: ",
            d["criterion"].as_str().unwrap(),
            d["by"].as_str().unwrap(),
            d["sessions"],
            id.as_str().unwrap()
        );
        assert!(card.contains(&row), "no row `{row}` on the card: {card}");
    }
    assert!(
        kept < sessions && !report["dropped"].as_array().unwrap().is_empty(),
        "the demo's logs drop sessions: {report}"
    );
}

/// Kept decisions about steps (not about their dependencies).
fn kept_steps(decisions: &[Value]) -> usize {
    decisions.iter().filter(|d| d["decision"] == "kept" && d.get("dependency").is_none()).count()
}

/// How many steps the candidate plan of the level sample `s` (item `key`) had before the
/// plan check: one for L1 and L2, its chain's tools for L3 (`chain:<server>:<a>><b>…`), and
/// its scenario's steps for L4 (the last round of its attempt: rounds stop at the one
/// quality control passes).
fn candidate_steps(p: &Project, s: &Value, key: &str) -> usize {
    match s["kind"].as_str().unwrap() {
        "L1" | "L2" => 1,
        "L3" => key.rsplit(':').next().unwrap().split('>').count(),
        "L4" => {
            let attempts: Value = serde_json::from_str(&p.read("artifacts/levels-l4/attempts.json")).unwrap();
            let rounds = attempts[key]["rounds"].as_array().unwrap_or_else(|| panic!("no rounds of `{key}`"));
            rounds.last().unwrap()["scenario"]["steps"].as_array().unwrap().len()
        }
        other => panic!("no candidate plan for {other}"),
    }
}

/// Every released L1–L4 sample has the plan check's decision on every step of its
/// candidate plan, one kept decision per step of its released plan, in its level's
/// `queries.json` and in each of its `levels.sample` lineage events.
fn every_level_step_is_decided(p: &Project, samples: &BTreeMap<String, Value>) {
    let events = crate::support::ledger_events(&p.path("artifacts"), "levels.sample");
    let mut checked = 0;
    for s in samples.values().filter(|s| s["family"] == "etom" && s["kind"] != "L5") {
        let id = s["id"].as_str().unwrap();
        let (stage, key) = s["provenance_id"].as_str().unwrap().split_once(':').unwrap();
        let out: Value = serde_json::from_str(&p.read(&format!("artifacts/{stage}/queries.json"))).unwrap();
        let decisions =
            out["plan_checks"][key]["decisions"].as_array().unwrap_or_else(|| panic!("{id}: no plan check of `{key}`"));
        let plan = s["turns"][0]["reference_plan"].as_array().unwrap().len();
        assert_eq!(kept_steps(decisions), plan, "{id}: one kept decision per step of its plan: {decisions:?}");
        let decided: BTreeSet<u64> =
            decisions.iter().filter(|d| d.get("dependency").is_none()).filter_map(|d| d["step"].as_u64()).collect();
        // The candidate plan's length from where the plan came from, not from the decisions.
        let every: BTreeSet<u64> = (1..=candidate_steps(p, s, key) as u64).collect();
        assert_eq!(decided, every, "{id}: a decision on every step of the candidate plan: {decisions:?}");
        let lineage: Vec<&Value> = events.iter().filter(|e| e["id"] == id).collect();
        assert!(!lineage.is_empty(), "{id} has no `levels.sample` event");
        for e in lineage {
            let d = e["plan_check"].as_array().unwrap_or_else(|| panic!("{id}: its lineage lacks the plan check: {e}"));
            assert_eq!(kept_steps(d), e["tools"].as_array().unwrap().len(), "{id}: {e}");
        }
        checked += 1;
    }
    assert!(checked >= 4, "L1–L4 each released a sample, {checked} checked");
}
