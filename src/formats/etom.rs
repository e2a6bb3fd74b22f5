//! ETOM wire types: level files (`level_N.json`), the EFS file
//! (`tool_equivalence_sets.json`) and the registry snapshot (`mcp_registry.json`).
//!
//! Level files (reference-pipelines.md D.2) differ only in the shape of
//! `ground_truth_tools`: L1 and L3 list tools, L2 and L4 list rows of alternative tools, L5 is
//! empty; L2–L4 tools carry `dependencies` and L3 adds `dependency_visualization`. So one
//! [`LevelQuery`] covers all five, with [`GroundTruth`] telling a tool from a row.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::RecordId;

/// One query of a `level_N.json` file. `G` is the type of a `ground_truth_tools` entry:
/// [`GroundTruth`] to read or write the format, `serde_json::Value` for a reader that looks at
/// each entry itself (score keeps unreadable entries as defects instead of failing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(deserialize = "G: Deserialize<'de>"))]
pub struct LevelQuery<G = GroundTruth> {
    pub query_id: RecordId,
    #[serde(default)]
    pub query: String,
    #[serde(default)]
    pub ground_truth_tools: Vec<G>,
    /// `len(ground_truth_tools)` in the published files (rows, not tools, for L2 and L4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ground_truth_tools_count: Option<usize>,
    /// L3 only: the dependency graph as text (`1: get_x\n2: get_y`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency_visualization: Option<String>,
    /// Fields this type does not name, kept for the round trip.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One `ground_truth_tools` entry: a tool (L1, L3) or a row of alternatives (L2, L4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "a tool object or a list of tool objects")]
pub enum GroundTruth {
    Row(Vec<GroundTruthTool>),
    Tool(GroundTruthTool),
}

impl GroundTruth {
    /// The tools of this entry: one, or the row's alternatives.
    pub fn tools(&self) -> &[GroundTruthTool] {
        match self {
            GroundTruth::Row(r) => r,
            GroundTruth::Tool(t) => std::slice::from_ref(t),
        }
    }
}

/// A reference tool in a level file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroundTruthTool {
    /// `server_name::tool_name` as ETOM wrote it (26 published ids carry stray spaces or an odd
    /// server; readers match on `server_name`/`tool_name`).
    #[serde(default)]
    pub tool_id: String,
    #[serde(default, alias = "server")]
    pub server_name: String,
    pub tool_name: String,
    #[serde(default)]
    pub description: String,
    /// 0-based indices of the entries this one depends on (L2–L4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<Vec<usize>>,
}

/// One set of `tool_equivalence_sets.json`: `{set_id, size, tools}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EfsSet {
    /// 1-based, in file order. Readers that only need the members accept it missing.
    #[serde(default)]
    pub set_id: u64,
    #[serde(default)]
    pub size: usize,
    #[serde(default)]
    pub tools: Vec<SetTool>,
}

/// A member of an EFS set. Every field may be missing on read (`efs compare` accepts sets
/// from other tools that give only `tool_id`, or only the two names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetTool {
    #[serde(default)]
    pub tool_id: String,
    #[serde(default)]
    pub server_name: String,
    #[serde(default)]
    pub tool_name: String,
    #[serde(default)]
    pub description: String,
}

impl SetTool {
    /// The normalised tool id: `tool_id` when given, else `server_name::tool_name`; `None`
    /// when the member names no tool (neither an id nor both names).
    pub fn id(&self) -> Option<String> {
        if !self.tool_id.trim().is_empty() {
            Some(crate::model::norm_tool_id(&self.tool_id))
        } else if !self.server_name.trim().is_empty() && !self.tool_name.trim().is_empty() {
            Some(crate::model::tool_id(&self.server_name, &self.tool_name))
        } else {
            None
        }
    }
}

/// The EFS file: a JSON list of sets.
pub type EfsFile = Vec<EfsSet>;

/// `mcp_registry.json`: `{total_servers, total_tools, servers}`. Registry import walks the
/// JSON by hand to locate every problem; it takes its list of known keys from here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_servers: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tools: Option<usize>,
    pub servers: Vec<RegistryServer>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistryServer {
    pub server_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_summary: Option<String>,
    #[serde(default)]
    pub categories: Vec<String>,
    /// Not in ETOM's snapshot; benchgen reads it when a registry gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    pub tools: Vec<RegistryTool>,
    /// The file the server came from in ETOM's scrape (its main category's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_file: Option<String>,
}

impl RegistryServer {
    /// The keys of a server record (what import reads; others are noted as ignored).
    pub const KEYS: &'static [&'static str] = &[
        "server_name",
        "server_description",
        "server_summary",
        "server_url",
        "categories",
        "source_file",
        "tools",
        "license",
    ];
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistryTool {
    pub tool_name: String,
    #[serde(default)]
    pub tool_description: String,
    pub input_schema: Value,
    /// Not in ETOM's snapshot; MCP servers may declare one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

impl RegistryTool {
    /// The keys of a tool record.
    pub const KEYS: &'static [&'static str] = &["tool_name", "tool_description", "input_schema", "output_schema"];
}

/// Keys ETOM's own scripts add to a registry (embeddings): not part of the format proper.
pub const REGISTRY_DERIVED_KEYS: &[&str] = &["server_embedding", "tool_embedding", "tool_description_embedding"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efs_sets_round_trip_and_tolerate_partial_members() {
        let text = r#"[{"set_id": 1, "size": 2, "tools": [
            {"tool_id": "A::x", "server_name": "A", "tool_name": "x", "description": "d"},
            {"tool_id": "B::y", "server_name": "B", "tool_name": "y", "description": "..."}]}]"#;
        let v: Value = serde_json::from_str(text).unwrap();
        let sets: EfsFile = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&sets).unwrap(), v);
        let partial: EfsSet = serde_json::from_str(
            r#"{"tools": [{"tool_id": " A :: x "}, {"server_name": "B", "tool_name": "y"}, {"tool_name": "z"}, {}]}"#,
        )
        .unwrap();
        let ids: Vec<Option<String>> = partial.tools.iter().map(SetTool::id).collect();
        assert_eq!(ids, [Some("A::x".to_string()), Some("B::y".to_string()), None, None]);
    }

    #[test]
    fn a_wrong_entry_is_named() {
        let e = serde_json::from_str::<LevelQuery>(r#"{"query_id": 1, "ground_truth_tools": [5]}"#).unwrap_err();
        assert!(e.to_string().contains("a tool object or a list of tool objects"), "{e}");
    }

    #[test]
    fn registry_key_lists_match_the_types() {
        let tool = RegistryTool {
            tool_name: "t".into(),
            tool_description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            output_schema: Some(serde_json::json!({})),
        };
        let server = RegistryServer {
            server_name: "s".into(),
            server_description: Some(String::new()),
            server_url: Some(String::new()),
            server_summary: Some(String::new()),
            categories: vec![],
            license: Some(String::new()),
            tools: vec![tool.clone()],
            source_file: Some(String::new()),
        };
        let keys = |v: Value| -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let sorted = |k: &[&str]| -> Vec<String> {
            let mut k: Vec<String> = k.iter().map(|s| s.to_string()).collect();
            k.sort();
            k
        };
        assert_eq!(keys(serde_json::to_value(&server).unwrap()), sorted(RegistryServer::KEYS));
        assert_eq!(keys(serde_json::to_value(&tool).unwrap()), sorted(RegistryTool::KEYS));
    }
}
