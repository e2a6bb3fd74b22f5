//! benchgen: build tool-use benchmarks for LLM agents from real tool
//! ecosystems, with the full lineage of every item.
//!
//! One module per stage (named like its command), plus the shared pieces:
//! `settings` (pipeline config), `stage` (runner, manifests, freshness),
//! `store` (atomic files), `ledger` (provenance), `model` (core records).

pub mod agent;
pub mod children;
pub mod clean;
pub mod cli;
pub mod config_doc;
pub mod csvout;
pub mod efs;
pub mod embed;
pub mod embedding;
pub mod error;
pub mod estimate;
pub mod eval;
pub mod execute;
pub mod explain;
pub mod filter;
pub mod formats;
pub mod graph;
pub mod init;
pub mod json;
pub mod ledger;
pub mod levels;
pub mod llm;
pub mod logs;
pub mod mcp;
pub mod model;
pub mod pipeline;
pub mod printer;
pub mod registry;
pub mod release;
pub mod review;
pub mod samples;
pub mod sandbox;
pub mod score;
pub mod settings;
pub mod stage;
pub mod stage_cli;
pub mod stages;
pub mod stats;
pub mod store;
pub mod synth;
pub mod text;

#[cfg(test)]
mod import_graph;
// Every typed LLM call and its schema-edge tests: at the root, as it names every family.
#[cfg(test)]
mod typed_calls;
