//! The ETOM and FinMCP wire types (`benchgen::formats`) against the published example files:
//! parse, serialise back, same JSON value — what release export relies on to write the
//! formats exactly.

use benchgen::formats::{etom, finmcp};
use serde_json::Value;

fn read(rel: &str) -> Option<Value> {
    let path = crate::support::shared_data(rel)?;
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
    Some(serde_json::from_str(&text).unwrap())
}

#[test]
fn etom_level_files_round_trip() {
    for level in 1..=5 {
        let rel = format!("etom/level_{level}.examples.json");
        let Some(v) = read(&rel) else { return };
        let queries: Vec<etom::LevelQuery> = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert!(!queries.is_empty());
        // Nothing fell into `extra`: the type names every field of the published format.
        assert!(queries.iter().all(|q| q.extra.is_empty()), "{rel}");
        assert_eq!(serde_json::to_value(&queries).unwrap(), v, "{rel}");
        // The shapes of reference-pipelines.md D.2: tools for L1/L3, rows for L2/L4, none for L5.
        for q in &queries {
            let rows = q.ground_truth_tools.iter().filter(|g| matches!(g, etom::GroundTruth::Row(_))).count();
            match level {
                1 | 3 => assert_eq!(rows, 0, "{rel}"),
                2 | 4 => assert_eq!(rows, q.ground_truth_tools.len(), "{rel}"),
                _ => assert!(q.ground_truth_tools.is_empty(), "{rel}"),
            }
            assert_eq!(q.ground_truth_tools_count, Some(q.ground_truth_tools.len()), "{rel}");
            assert_eq!(q.dependency_visualization.is_some(), level == 3, "{rel}");
        }
        // Loosely typed entries (what score reads) round-trip too.
        let loose: Vec<etom::LevelQuery<Value>> = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&loose).unwrap(), v, "{rel}");
    }
}

#[test]
fn etom_registry_round_trips() {
    let Some(v) = read("etom/mcp_registry.json") else { return };
    let r: etom::Registry = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(r.servers.len(), r.total_servers.unwrap());
    assert_eq!(r.servers.iter().map(|s| s.tools.len()).sum::<usize>(), r.total_tools.unwrap());
    assert_eq!(serde_json::to_value(&r).unwrap(), v);
}

#[test]
fn finmcp_samples_round_trip() {
    let Some(v) = read("finmcp/demo_samples.json") else { return };
    let samples: Vec<finmcp::Sample> = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(samples.len(), 6);
    assert_eq!(serde_json::to_value(&samples).unwrap(), v);
    // Only the free-form fields are left to `extra`.
    for s in &samples {
        assert!(s.extra.keys().all(|k| ["annotation", "task info"].contains(&k.as_str())), "{:?}", s.extra.keys());
        assert!(s.messages.iter().all(|m| m.extra.is_empty()));
        assert!(s.diff_level.as_ref().is_some_and(|d| d.level.is_some() && d.extra.is_empty()));
    }
    let calls: usize = samples.iter().flat_map(|s| &s.messages).map(|m| m.calls().len()).sum();
    assert!(calls > 0);
    // `Sample<Value>` (what score reads) keeps the messages as JSON and round-trips as well.
    let loose: Vec<finmcp::Sample<Value>> = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(serde_json::to_value(&loose).unwrap(), v);
}

#[test]
fn finmcp_trajectory_messages_round_trip() {
    // The trajectory files vary in their record shape; their messages are the common part.
    let Some(v) = read("finmcp/demo_trajectories.json") else { return };
    let mut n = 0;
    for rec in v.as_array().unwrap() {
        let Some(Value::Array(msgs)) = rec.get("messages") else { continue };
        for m in msgs {
            let typed: finmcp::Message = serde_json::from_value(m.clone()).unwrap_or_else(|e| panic!("{m}: {e}"));
            assert_eq!(&serde_json::to_value(&typed).unwrap(), m);
            n += 1;
        }
    }
    assert!(n > 20, "{n} messages");
}

#[test]
fn key_order_follows_the_published_files() {
    // Values compare without order; release export also wants the published key order.
    let Some(v) = read("finmcp/demo_samples.json") else { return };
    let samples: Vec<finmcp::Sample> = serde_json::from_value(v.clone()).unwrap();
    let first_msg_keys =
        |s: &Value| -> Vec<String> { s["messages"][1]["tool_calls"][0].as_object().unwrap().keys().cloned().collect() };
    let back = serde_json::to_value(&samples).unwrap();
    assert_eq!(first_msg_keys(&back[0]), first_msg_keys(&v[0]));
}
