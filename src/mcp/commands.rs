//! `benchgen mcp tools|call|import`: look at and try a configured server by hand.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;

use super::client::{CallOutcome, ClientOptions, McpClient, ToolInfo};
use super::config;
use crate::error::UsageError;
use crate::printer::Printer;
use crate::settings::Settings;

/// The client for a server named in the config (or its `mcpServers` import).
pub fn client_for(settings: &Settings, name: &str) -> Result<McpClient> {
    let mcp = &settings.section::<crate::mcp::McpSettings>();
    let servers = mcp.all_servers(&settings.root)?;
    let Some(spec) = servers.get(name) else {
        let known: Vec<_> = servers.keys().map(String::as_str).collect();
        return Err(UsageError(format!(
            "no MCP server `{name}` in `{}`; configured: {}",
            settings.config_path.display(),
            if known.is_empty() { "none (add `[mcp.servers.NAME]`)".to_string() } else { known.join(", ") }
        ))
        .into());
    };
    Ok(McpClient::new(name, spec.clone(), ClientOptions::from_settings(settings, mcp)))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("cannot start tokio")
}

#[derive(Serialize)]
struct ToolsReport {
    server: String,
    protocol: Option<String>,
    server_info: Option<String>,
    tools: Vec<ToolInfo>,
}

/// `benchgen mcp tools SERVER`.
pub fn tools(settings: &Settings, printer: &Printer, server: &str) -> Result<()> {
    let client = client_for(settings, server)?;
    let rt = runtime()?;
    let report = rt.block_on(async {
        let tools = client.list_tools().await;
        let info = client.server_info().await;
        client.shutdown().await;
        tools.map(|tools| ToolsReport {
            server: server.to_string(),
            protocol: info.as_ref().map(|i| i.0.clone()),
            server_info: info.map(|i| i.1),
            tools,
        })
    });
    let report = report.map_err(|f| anyhow::anyhow!("cannot list the tools of `{server}`: {f}"))?;
    let mut human = format!(
        "{} tools on `{server}` ({}, protocol {})\n",
        report.tools.len(),
        report.server_info.as_deref().unwrap_or("?"),
        report.protocol.as_deref().unwrap_or("?")
    );
    for t in &report.tools {
        let first = t.description.lines().next().unwrap_or("");
        human.push_str(&format!("  {:<32} {}\n", t.name, super::client::truncate_str(first, 100)));
    }
    printer.summary(&human, &report);
    Ok(())
}

#[derive(Serialize)]
struct CallReport<'a> {
    server: &'a str,
    tool: &'a str,
    arguments: &'a Value,
    latency_ms: u64,
    #[serde(flatten)]
    outcome: &'a CallOutcome,
}

/// `benchgen mcp call SERVER TOOL --args JSON`. A tool error or failed call exits 1.
pub fn call(settings: &Settings, printer: &Printer, server: &str, tool: &str, args: &str) -> Result<()> {
    let arguments: Value =
        crate::json::value_from_str(args).map_err(|e| UsageError(format!("`--args` is not valid JSON: {e}")))?;
    if !arguments.is_object() {
        return Err(UsageError("`--args` must be a JSON object, e.g. '{\"q\": \"x\"}'".into()).into());
    }
    let client = client_for(settings, server)?;
    let rt = runtime()?;
    let started = std::time::Instant::now();
    let outcome = rt.block_on(async {
        let cancel = tokio_util::sync::CancellationToken::new();
        let c2 = cancel.clone();
        // Ctrl-C cancels the call (and the server is told so) instead of killing us mid-call;
        // the shutdown below stops the server.
        crate::children::set_graceful_interrupt();
        let watcher = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                c2.cancel();
            }
        });
        let o = client.call(tool, &arguments, Some(&cancel)).await;
        watcher.abort();
        client.shutdown().await;
        o
    });
    let latency_ms = started.elapsed().as_millis() as u64;
    let report = CallReport { server, tool, arguments: &arguments, latency_ms, outcome: &outcome };
    let human = match &outcome {
        CallOutcome::Ok { output } => output.text.clone(),
        _ => outcome.as_text(),
    };
    printer.summary(&human, &report);
    match outcome {
        CallOutcome::Ok { .. } => Ok(()),
        CallOutcome::ToolError { .. } => Err(anyhow::anyhow!("`{server}::{tool}` returned a tool error")),
        CallOutcome::Failed { failure } => Err(anyhow::anyhow!("`{server}::{tool}` failed: {failure}")),
    }
}

/// `benchgen mcp import FILE`: check a desktop `mcpServers` file and print it as config.
pub fn import(printer: &Printer, file: &Path) -> Result<()> {
    let servers = config::import_desktop_json(file)?;
    let toml = config::to_toml(&servers)?;
    let human = format!(
        "# {} server(s) from `{}`; paste into the pipeline config, or set `[mcp] import = \"{}\"`\n{toml}",
        servers.len(),
        file.display(),
        file.display()
    );
    printer.summary(&human, &servers);
    Ok(())
}
