//! `benchgen sandbox`: resolve the flags, load the catalog, serve until the peer leaves.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use super::{Faults, Sandbox, SandboxOptions};
use crate::error::UsageError;
use crate::model::Catalog;
use crate::printer::Printer;
use crate::settings::Settings;

#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Catalog to serve (default `artifacts/filter/catalog.json`): benchgen's catalog, or a
    /// tool list served under its bare names (`artifacts/logs-import/catalog.json`, an MCP
    /// `tools/list` result).
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// Serve Streamable HTTP on this loopback address (e.g. `127.0.0.1:0` for any port).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Seed of the answers, printed at start (default: 0 with `--catalog`, else `project.seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Tools per `tools/list` page.
    #[arg(long, default_value_t = 1000)]
    pub page_size: usize,
    /// Append one JSON line per call to FILE.
    #[arg(long, value_name = "FILE")]
    pub call_log: Option<PathBuf>,
    /// Recorded-responses mode: answer a call with the result the sessions in FILE (benchgen
    /// session JSONL, e.g. `artifacts/logs-import/sessions.jsonl`) logged for the same tool
    /// and equal arguments (a `server::tool` id matches a logged bare `tool` name); other
    /// calls are generated as usual. Fails when no served tool has a recorded result.
    #[arg(long, value_name = "FILE")]
    pub recorded: Option<PathBuf>,
    /// Delay every call by this many milliseconds.
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Add a per-call delay in [0, N] ms (from the call's hash).
    #[arg(long, default_value_t = 0)]
    pub jitter_ms: u64,
    /// Share of calls answered with an injected tool error (`isError`).
    #[arg(long, default_value_t = 0.0)]
    pub error_rate: f64,
    /// Share of calls never answered (the client times out).
    #[arg(long, default_value_t = 0.0)]
    pub timeout_rate: f64,
    /// Share of calls on which the process exits.
    #[arg(long, default_value_t = 0.0)]
    pub crash_rate: f64,
    /// Exit on the N-th call.
    #[arg(long, value_name = "N")]
    pub crash_after: Option<u64>,
    /// Share of calls answered with a line that is not JSON-RPC (stdio).
    #[arg(long, default_value_t = 0.0)]
    pub garbage_rate: f64,
    /// Share of calls answered with `--huge-bytes` of text.
    #[arg(long, default_value_t = 0.0)]
    pub huge_rate: f64,
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub huge_bytes: usize,
}

/// The options a command line asks for (rates checked to lie in [0, 1]).
pub fn options(settings: &Settings, a: &SandboxArgs) -> Result<SandboxOptions> {
    for (flag, v) in [
        ("--error-rate", a.error_rate),
        ("--timeout-rate", a.timeout_rate),
        ("--crash-rate", a.crash_rate),
        ("--garbage-rate", a.garbage_rate),
        ("--huge-rate", a.huge_rate),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return Err(UsageError(format!("`{flag}` must lie between 0 and 1, not {v}")).into());
        }
    }
    Ok(SandboxOptions {
        seed: seed(settings, a).0,
        page_size: a.page_size.max(1),
        call_log: a.call_log.clone(),
        exit_on_crash: true,
        recorded: match &a.recorded {
            Some(p) => {
                let f = std::fs::File::open(p).with_context(|| format!("cannot read `{}`", p.display()))?;
                let sessions = crate::logs::read_sessions(f, &p.display().to_string())?;
                Some(std::sync::Arc::new(super::Recorded::from_sessions(&sessions)))
            }
            None => None,
        },
        faults: Faults {
            latency_ms: a.latency_ms,
            jitter_ms: a.jitter_ms,
            error_rate: a.error_rate,
            timeout_rate: a.timeout_rate,
            crash_rate: a.crash_rate,
            crash_after: a.crash_after,
            garbage_rate: a.garbage_rate,
            huge_rate: a.huge_rate,
            huge_bytes: a.huge_bytes,
        },
    })
}

/// The catalog to serve: benchgen's catalog (`{servers: [...]}`, e.g.
/// `artifacts/filter/catalog.json`), or a tool list — the log track's
/// `artifacts/logs-import/catalog.json` (`[{name, description, input_schema}]`), an MCP
/// `tools/list` result (`{tools: [...]}`, `inputSchema` or `input_schema`) or the JSON-RPC
/// response holding one — served with the bare tool names as ids, as `execute` and
/// `synth roleplay` serve the log catalog.
pub fn load_catalog(path: &std::path::Path) -> Result<Catalog> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).with_context(|| format!("cannot read `{shown}`"))?;
    let v: serde_json::Value =
        crate::json::value_from_slice(&bytes).with_context(|| format!("catalog `{shown}` is not JSON"))?;
    if v.get("servers").is_some() {
        return serde_json::from_value(v).with_context(|| format!("`{shown}` is not a benchgen catalog"));
    }
    match crate::logs::import::parse_catalog(&bytes, crate::logs::CatalogFormat::Mcp, &shown) {
        Ok(tools) => Ok(super::domain::sandbox_catalog(&tools)),
        Err(e) => Err(crate::error::hinted(
            format!("`{shown}` is neither a benchgen catalog nor a tool list: {e:#}"),
            "pass benchgen's catalog (`{servers: [...]}`), the log track's `artifacts/logs-import/catalog.json`, \
             or an MCP `tools/list` result (`{tools: [...]}`)",
        )),
    }
}

/// Recorded responses that no served tool can answer from are a mistake to say, not a
/// silent fallback to generated answers: fail when none match, warn about the rest.
fn check_recorded(
    sandbox: &Sandbox,
    catalog: &std::path::Path,
    recorded: &std::path::Path,
    printer: &Printer,
) -> Result<()> {
    let (matched, unmatched) = sandbox.recorded_coverage();
    let list = |v: &[String]| {
        let mut s: Vec<String> = v.iter().take(5).map(|t| format!("`{t}`")).collect();
        if v.len() > 5 {
            s.push(format!("… {} more", v.len() - 5));
        }
        s.join(", ")
    };
    if matched.is_empty() && !unmatched.is_empty() {
        return Err(crate::error::hinted(
            format!(
                "no tool of `{}` has a recorded response in `{}`: the sessions call {}, which no catalog tool id matches \
                 (exactly, or by the tool name after `::`)",
                catalog.display(),
                recorded.display(),
                list(&unmatched)
            ),
            "serve the catalog the logs were imported with (`--catalog artifacts/logs-import/catalog.json`)",
        ));
    }
    if !unmatched.is_empty() {
        printer.warn(&format!(
            "recorded responses of {} tool(s) match no catalog tool and are never served: {}",
            unmatched.len(),
            list(&unmatched)
        ));
    }
    let renamed: Vec<String> =
        matched.iter().filter(|(id, r)| id != r).map(|(id, r)| format!("`{id}` ← `{r}`")).collect();
    printer.info(&format!(
        "sandbox: recorded responses for {} tool(s){}",
        matched.len(),
        if renamed.is_empty() {
            String::new()
        } else {
            format!(
                " ({} by tool name: {})",
                renamed.len(),
                renamed.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
            )
        }
    ));
    Ok(())
}

/// The seed of the answers and where it came from: `--seed N`; else, for an explicit
/// `--catalog`, 0 (never a config file found in the current folder, so the same call
/// answers the same from any folder); else, serving the project's own catalog,
/// `project.seed` of the project's config.
pub fn seed(settings: &Settings, a: &SandboxArgs) -> (u64, &'static str) {
    match (a.seed, &a.catalog) {
        (Some(s), _) => (s, "--seed"),
        (None, Some(_)) => (0, "default for --catalog"),
        (None, None) => (settings.project.seed, "project.seed"),
    }
}

pub fn run(settings: &Settings, printer: &Printer, a: &SandboxArgs) -> Result<()> {
    let path = a.catalog.clone().unwrap_or_else(|| crate::filter::CATALOG.path(settings));
    if !path.exists() {
        return Err(crate::error::hinted(
            format!("catalog `{}` does not exist", path.display()),
            "run `benchgen run` (or `benchgen filter`) first, or pass `--catalog FILE`",
        ));
    }
    let catalog = load_catalog(&path)?;
    let sandbox = Sandbox::new(&catalog, options(settings, a)?)?;
    if let Some(p) = &a.recorded {
        check_recorded(&sandbox, &path, p, printer)?;
    }
    let (seed, from) = seed(settings, a);
    // Said on stderr (stdout is the protocol or the URL) unless --quiet, so a run can be
    // repeated.
    if !printer.quiet {
        eprintln!("sandbox: seed {seed} ({from})");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start tokio")?;
    rt.block_on(async {
        match a.http {
            Some(addr) => {
                let http = super::serve_http(&sandbox, addr).await?;
                // The URL on stdout is the contract for scripts and tests that start us.
                crate::printer::out(&format!("{}\n", http.url()));
                printer.info(&format!("sandbox: {} tools at {}", sandbox.tool_count(), http.url()));
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => http.stop.cancel(),
                    _ = http.stop.cancelled() => {}
                }
                let _ = http.task.await;
                Ok(())
            }
            None => {
                printer.info(&format!("sandbox: {} tools on stdio", sandbox.tool_count()));
                super::serve_io(&sandbox, tokio::io::stdin(), tokio::io::stdout()).await
            }
        }
    })
}
