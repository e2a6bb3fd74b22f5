//! Core records shared by the stages: the normalised catalog.
//!
//! Wire format of `artifacts/catalog/catalog.json` and `artifacts/filter/catalog.json`:
//! `{"servers": [Server]}`, servers sorted by name and tools by name, so the same
//! catalog always serialises to the same bytes. Categories keep their given order
//! because the first one is the server's main category.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Separator between server and tool name in a tool id.
pub const TOOL_ID_SEP: &str = "::";

/// The tool id `"<server>::<tool>"`, both parts trimmed.
pub fn tool_id(server: &str, tool: &str) -> String {
    format!("{}{TOOL_ID_SEP}{}", server.trim(), tool.trim())
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    pub servers: Vec<Server>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Server {
    pub name: String,
    pub description: String,
    pub summary: String,
    pub url: String,
    pub categories: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    pub tools: Vec<Tool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    pub id: String,
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

impl Catalog {
    pub fn tool_count(&self) -> usize {
        self.servers.iter().map(|s| s.tools.len()).sum()
    }

    /// Sort servers by name and tools by name (the canonical order).
    pub fn sort(&mut self) {
        self.servers.sort_by(|a, b| a.name.cmp(&b.name));
        for s in &mut self.servers {
            s.tools.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }

    pub fn tools(&self) -> impl Iterator<Item = (&Server, &Tool)> {
        self.servers.iter().flat_map(|s| s.tools.iter().map(move |t| (s, t)))
    }

    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        use anyhow::Context;
        let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
        serde_json::from_slice(&bytes).with_context(|| format!("`{}` is not a benchgen catalog", path.display()))
    }
}
