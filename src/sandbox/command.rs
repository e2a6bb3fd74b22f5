//! `benchgen sandbox`: resolve the flags, load the catalog, serve until the peer leaves.

use anyhow::{Context, Result};

use super::{Faults, Sandbox, SandboxOptions};
use crate::cli::SandboxArgs;
use crate::error::UsageError;
use crate::model::Catalog;
use crate::printer::Printer;
use crate::settings::Settings;

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
        Ok(tools) => Ok(crate::agent::sandbox_catalog(&tools)),
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
        (None, None) => (settings.config.project.seed, "project.seed"),
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
