//! The domain sandbox as a tool source: an in-process `benchgen sandbox` over the log
//! catalog in recorded-responses mode (a call the logs hold a result for gets that result).

use std::sync::Arc;

use anyhow::Result;

use crate::logs::Session;
use crate::logs::import::LogTool;
use crate::mcp::config::ToolIds;
use crate::mcp::{ClientOptions, McpClient};

/// The log catalog as a benchgen catalog whose tool ids are the bare log tool names (what
/// sessions and the graph use), for the sandbox.
pub fn sandbox_catalog(tools: &[LogTool]) -> crate::model::Catalog {
    let tools = tools
        .iter()
        .map(|t| crate::model::Tool {
            id: t.name.clone(),
            name: t.name.clone(),
            description: t.description.clone(),
            input_schema: if t.input_schema.is_object() {
                t.input_schema.clone()
            } else {
                serde_json::json!({"type": "object"})
            },
            output_schema: None,
        })
        .collect();
    let mut c = crate::model::Catalog {
        servers: vec![crate::model::Server {
            name: "logs".into(),
            description: "the domain's tools, from the log catalog".into(),
            summary: String::new(),
            url: String::new(),
            categories: vec![],
            license: None,
            tools,
            registry: None,
        }],
    };
    c.sort();
    c
}

/// An in-process sandbox over the log catalog in recorded-responses mode, and a client
/// connected to it (tool ids as-is). Call inside a tokio runtime.
pub fn domain_sandbox(
    tools: &[LogTool],
    sessions: &[Session],
    seed: u64,
    opts: ClientOptions,
) -> Result<Arc<McpClient>> {
    let recorded = crate::sandbox::Recorded::from_sessions(sessions);
    let sandbox = crate::sandbox::Sandbox::new(
        &sandbox_catalog(tools),
        crate::sandbox::SandboxOptions { seed, recorded: Some(Arc::new(recorded)), ..Default::default() },
    )?;
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let (sr, sw) = tokio::io::split(server_end);
    tokio::spawn(async move {
        if let Err(e) = crate::sandbox::serve_io(&sandbox, sr, sw).await {
            tracing::warn!("the in-process sandbox stopped: {e:#}");
        }
    });
    let (cr, cw) = tokio::io::split(client_end);
    Ok(Arc::new(McpClient::from_io("sandbox", ToolIds::AsIs, opts, cr, cw)))
}
