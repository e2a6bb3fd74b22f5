//! `benchgen registry tools`: tool lists for servers whose registry gives none (the
//! official registry lists packages and remotes only), fetched by starting the server
//! (npm via `npx`, PyPI via `uvx`, versions pinned) or connecting to its Streamable HTTP
//! remote, with the MCP client of `crate::mcp`.
//!
//! Safety: only packages and remotes matching `[registry.tools] allow` are touched; a
//! package without a pinned version is refused. Each spawned server runs in its own
//! process group (the MCP client's spawn) under `prlimit --as` (address-space limit)
//! and is cut off, with its whole group, at `time_limit_secs`. Results are kept per
//! server in the output folder (`live.json`) as each finishes, so a rerun skips servers
//! already done.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::mcp::config::ServerSpec;
use crate::mcp::{ClientOptions, McpClient};
use crate::model::{Catalog, Server, Tool, tool_id};
use crate::store::{to_json_bytes, write_atomic};

/// `[registry.tools]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsSettings {
    /// Patterns (`*` wildcard) over `npm:<package>`, `pypi:<package>` and `remote:<url>`.
    /// Nothing is run or contacted unless it matches one.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Command line for an npm package; `{package}` and `{version}` are replaced.
    #[serde(default = "default_npm")]
    pub npm: Vec<String>,
    /// Command line for a PyPI package.
    #[serde(default = "default_pypi")]
    pub pypi: Vec<String>,
    /// Wall-clock limit per server: start, handshake and every tool page.
    #[serde(default = "default_time")]
    pub time_limit_secs: f64,
    /// Address-space limit of a spawned server (MiB), applied with `prlimit --as`; 0: none.
    #[serde(default = "default_mem")]
    pub memory_limit_mb: u64,
    /// Keep at most this many tools per server (a bound on endless tool pages).
    #[serde(default = "default_max_tools")]
    pub max_tools: usize,
}

fn default_npm() -> Vec<String> {
    vec!["npx".into(), "-y".into(), "{package}@{version}".into()]
}
fn default_pypi() -> Vec<String> {
    vec!["uvx".into(), "{package}=={version}".into()]
}
fn default_time() -> f64 {
    60.0
}
fn default_mem() -> u64 {
    4096
}
fn default_max_tools() -> usize {
    1000
}

impl Default for ToolsSettings {
    fn default() -> Self {
        Self {
            allow: vec![],
            npm: default_npm(),
            pypi: default_pypi(),
            time_limit_secs: default_time(),
            memory_limit_mb: default_mem(),
            max_tools: default_max_tools(),
        }
    }
}

/// How one server's live listing ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LiveResult {
    /// `listed`, `refused`, `failed`, `timed-out` or `skipped`.
    pub status: String,
    /// What was run or contacted (`npm:pkg@1.2.3`, `remote:https://…`).
    #[serde(default)]
    pub target: String,
    pub reason: String,
    #[serde(default)]
    pub at: String,
    #[serde(default)]
    pub tools: Vec<crate::mcp::ToolInfo>,
}

fn glob(p: &str) -> Result<Regex> {
    let re = format!("^{}$", regex::escape(p).replace(r"\*", ".*"));
    Regex::new(&re).with_context(|| format!("bad allow pattern `{p}`"))
}

/// What to run for a server, or why nothing may be.
enum Plan {
    Spawn { target: String, command: String, args: Vec<String> },
    Connect { target: String, url: String },
    Refuse(String),
    Nothing(String),
}

fn plan(s: &Server, cfg: &ToolsSettings, allow: &[Regex]) -> Plan {
    let Some(info) = s.registry.as_ref() else { return Plan::Nothing("no registry data (packages or remotes)".into()) };
    let allowed = |key: &str| allow.iter().any(|r| r.is_match(key));
    let mut refused = Vec::new();
    for p in &info.packages {
        let template = match p.registry_type.as_str() {
            "npm" => &cfg.npm,
            "pypi" => &cfg.pypi,
            _ => continue,
        };
        let key = format!("{}:{}", p.registry_type, p.identifier);
        if !allowed(&key) {
            refused.push(format!("`{key}` is not in `[registry.tools] allow`"));
            continue;
        }
        let Some(version) = p.version.as_deref().filter(|v| !v.is_empty() && *v != "latest") else {
            refused.push(format!("`{key}` has no pinned version"));
            continue;
        };
        let fill = |a: &String| a.replace("{package}", &p.identifier).replace("{version}", version);
        let mut parts = template.iter().map(fill);
        let Some(command) = parts.next() else { continue };
        return Plan::Spawn { target: format!("{key}@{version}"), command, args: parts.collect() };
    }
    for r in &info.remotes {
        if r.transport != "streamable-http" {
            continue;
        }
        let key = format!("remote:{}", r.url);
        if !allowed(&key) {
            refused.push(format!("`{key}` is not in `[registry.tools] allow`"));
            continue;
        }
        return Plan::Connect { target: key, url: r.url.clone() };
    }
    if refused.is_empty() {
        Plan::Nothing("no npm or PyPI package and no Streamable HTTP remote".into())
    } else {
        Plan::Refuse(refused.join("; "))
    }
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

async fn list_one(
    name: &str,
    spec: ServerSpec,
    cfg: &ToolsSettings,
    log_dir: &Path,
) -> (String, String, Vec<crate::mcp::ToolInfo>) {
    let limit = Duration::from_secs_f64(cfg.time_limit_secs);
    let mut opts = ClientOptions::new(log_dir);
    opts.startup_timeout = limit;
    opts.call_timeout = limit;
    let client = McpClient::new(name, spec, opts);
    let result = tokio::time::timeout(limit, async {
        client.ensure_connected().await?;
        client.list_tools().await
    })
    .await;
    // Always stop the server (and its process group), whatever happened.
    client.shutdown().await;
    match result {
        Err(_) => ("timed-out".into(), format!("cut off after the time limit of {} s", cfg.time_limit_secs), vec![]),
        Ok(Err(e)) => {
            let msg = e.to_string();
            if msg.contains("within") || msg.contains("timed out") || msg.contains("timeout") {
                (
                    "timed-out".into(),
                    format!("cut off after the time limit of {} s: {msg}", cfg.time_limit_secs),
                    vec![],
                )
            } else {
                ("failed".into(), msg, vec![])
            }
        }
        Ok(Ok(mut tools)) => {
            let reason = if tools.len() > cfg.max_tools {
                let n = tools.len();
                tools.truncate(cfg.max_tools);
                format!("{n} tools listed; kept the first {} (`max_tools`)", cfg.max_tools)
            } else {
                format!("{} tools listed", tools.len())
            };
            ("listed".into(), reason, tools)
        }
    }
}

pub struct ToolsOptions<'a> {
    pub cfg: &'a ToolsSettings,
    /// Only these servers (all servers without tools when empty).
    pub only: Vec<String>,
    /// Folder for `live.json` and server logs.
    pub out: PathBuf,
    pub progress: indicatif::ProgressBar,
}

#[derive(Debug, Serialize)]
pub struct ToolsReport {
    pub listed: usize,
    pub refused: usize,
    pub failed: usize,
    pub timed_out: usize,
    pub skipped: usize,
    pub tools: usize,
}

/// List tools live for the catalog's servers and write them into it.
pub fn run(catalog: &mut Catalog, opts: &ToolsOptions) -> Result<(ToolsReport, BTreeMap<String, LiveResult>)> {
    let allow: Vec<Regex> = opts.cfg.allow.iter().map(|p| glob(p)).collect::<Result<_>>()?;
    let live_path = opts.out.join("live.json");
    let mut live: BTreeMap<String, LiveResult> = match std::fs::read(&live_path) {
        Ok(b) => {
            serde_json::from_slice(&b).with_context(|| format!("`{}` is not a live tool list", live_path.display()))?
        }
        Err(_) => BTreeMap::new(),
    };
    let log_dir = opts.out.join("logs");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let wanted: Vec<usize> = catalog
        .servers
        .iter()
        .enumerate()
        .filter(|(_, s)| if opts.only.is_empty() { s.tools.is_empty() } else { opts.only.contains(&s.name) })
        .map(|(i, _)| i)
        .collect();
    for name in &opts.only {
        if !catalog.servers.iter().any(|s| &s.name == name) {
            anyhow::bail!("no server `{name}` in the catalog");
        }
    }
    opts.progress.set_length(wanted.len() as u64);
    for (k, &i) in wanted.iter().enumerate() {
        opts.progress.set_position(k as u64);
        let s = &catalog.servers[i];
        opts.progress.set_message(s.name.clone());
        if live.contains_key(&s.name) {
            continue;
        }
        let result = match plan(s, opts.cfg, &allow) {
            Plan::Nothing(r) => {
                LiveResult { status: "skipped".into(), target: String::new(), reason: r, at: now(), tools: vec![] }
            }
            Plan::Refuse(r) => {
                LiveResult { status: "refused".into(), target: String::new(), reason: r, at: now(), tools: vec![] }
            }
            Plan::Spawn { target, command, args } => {
                let (command, args) = if opts.cfg.memory_limit_mb > 0 {
                    let mut a =
                        vec![format!("--as={}", opts.cfg.memory_limit_mb * 1024 * 1024), "--".to_string(), command];
                    a.extend(args);
                    ("prlimit".to_string(), a)
                } else {
                    (command, args)
                };
                let spec = ServerSpec { command: Some(command), args, ..Default::default() };
                let at = now();
                let (status, reason, tools) = rt.block_on(list_one(&s.name, spec, opts.cfg, &log_dir));
                LiveResult { status, target, reason, at, tools }
            }
            Plan::Connect { target, url } => {
                let spec = ServerSpec { url: Some(url), ..Default::default() };
                let at = now();
                let (status, reason, tools) = rt.block_on(list_one(&s.name, spec, opts.cfg, &log_dir));
                LiveResult { status, target, reason, at, tools }
            }
        };
        live.insert(s.name.clone(), result);
        write_atomic(&live_path, &to_json_bytes(&live)?)?;
    }
    opts.progress.finish_and_clear();
    let mut report = ToolsReport { listed: 0, refused: 0, failed: 0, timed_out: 0, skipped: 0, tools: 0 };
    for &i in &wanted {
        let s = &mut catalog.servers[i];
        let Some(r) = live.get(&s.name) else { continue };
        match r.status.as_str() {
            "listed" => {
                report.listed += 1;
                report.tools += r.tools.len();
                let name = s.name.clone();
                s.tools = r
                    .tools
                    .iter()
                    .map(|t| Tool {
                        id: tool_id(&name, &t.name),
                        name: t.name.clone(),
                        description: t.description.clone(),
                        input_schema: t.input_schema.clone(),
                        output_schema: t.output_schema.clone(),
                    })
                    .collect();
                s.tools.sort_by(|a, b| a.name.cmp(&b.name));
                s.tools.dedup_by(|a, b| a.name == b.name);
                let info = s.registry.get_or_insert_with(Default::default);
                info.tools_from = Some(format!("listed live at {} ({})", r.at, r.target));
            }
            "refused" => report.refused += 1,
            "timed-out" => report.timed_out += 1,
            "failed" => report.failed += 1,
            _ => report.skipped += 1,
        }
    }
    Ok((report, live))
}
