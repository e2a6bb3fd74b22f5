//! MCP access: a client for live servers (`client`, over spawned stdio processes or
//! Streamable HTTP), their configuration (`config`), what identifies a server's tools for a
//! release (`pin`), and the `benchgen mcp` commands (`commands`). The sandbox server lives in
//! `crate::sandbox`, the agent executor in `crate::execute`.

pub mod client;
pub mod commands;
pub mod config;
pub mod pin;
pub mod stdio;

pub use client::{CallFailure, CallOutcome, ClientOptions, McpClient, ToolInfo, ToolOutput};
pub use config::{McpSettings, ServerSpec};
