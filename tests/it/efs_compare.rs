//! `benchgen efs compare` on small hand-made sets with known precision and recall.

use assert_cmd::Command;
use serde_json::{Value, json};

fn etom(sets: &[&[&str]]) -> Value {
    Value::Array(
        sets.iter()
            .enumerate()
            .map(|(i, s)| {
                json!({"set_id": i + 1, "size": s.len(), "tools": s.iter().map(|id| {
                    let (server, tool) = id.split_once("::").unwrap();
                    json!({"tool_id": id, "server_name": server.trim(), "tool_name": tool.trim(), "description": "d"})
                }).collect::<Vec<_>>()})
            })
            .collect(),
    )
}

#[test]
fn compare_reports_pair_precision_recall_and_exact_matches() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
    std::fs::write(dir.path().join("pipeline/x.toml"), "").unwrap();
    // Reference: {a,b,c} + {d,e} = 4 pairs. Ours: {a,b} + {d,e} + {f,g} = 3 pairs, 2 shared.
    // The stray space in the reference id is trimmed away.
    let reference = etom(&[&["s::a ", "s::b", "s::c"], &["s::d", "s::e"]]);
    let ours = etom(&[&["s::a", "s::b"], &["s::d", "s::e"], &["s::f", "s::g"]]);
    std::fs::write(dir.path().join("ref.json"), reference.to_string()).unwrap();
    std::fs::write(dir.path().join("ours.json"), ours.to_string()).unwrap();
    let out = Command::cargo_bin("benchgen")
        .unwrap()
        .current_dir(dir.path())
        .args([
            "--config",
            "pipeline/x.toml",
            "--json",
            "efs",
            "compare",
            "--reference",
            "ref.json",
            "--sets",
            "ours.json",
        ])
        .args(["--out", "cmp.json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (c["our_pairs"].as_u64(), c["reference_pairs"].as_u64(), c["common_pairs"].as_u64()),
        (Some(3), Some(4), Some(2))
    );
    assert_eq!(c["precision"], 0.6667);
    assert_eq!(c["recall"], 0.5);
    assert_eq!(c["f1"], 0.5714);
    assert_eq!(c["exact_set_matches"], 1);
    assert_eq!(c["candidate_recall_ceiling"], Value::Null, "no candidate pairs in this project");
    let written: Value = serde_json::from_slice(&std::fs::read(dir.path().join("cmp.json")).unwrap()).unwrap();
    assert_eq!(written, c);

    // A malformed reference names the record.
    std::fs::write(dir.path().join("bad.json"), r#"[{"set_id": 1, "tools": [{"description": "x"}]}]"#).unwrap();
    let out = Command::cargo_bin("benchgen")
        .unwrap()
        .current_dir(dir.path())
        .args(["--config", "pipeline/x.toml", "efs", "compare", "--reference", "bad.json", "--sets", "ours.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[0].tools[0]: no `tool_id` and no server/tool name"), "{err}");
}
