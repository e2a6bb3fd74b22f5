//! `benchgen clean [STAGE…]`: remove stage outputs, so the next `run` makes
//! them again.
//!
//! With stage names, each one's `artifacts/<stage>/` folder and its
//! unfinished work (`artifacts/.work/<stage>/`: checkpoints and streamed
//! outputs) go; stages downstream of it then show as stale. Without names,
//! everything benchgen wrote under `artifacts/` goes: every stage folder,
//! `.work/`, the MCP server logs (`mcp/`) and the ledger. The ledger is
//! append-only history, so it only goes with a full clean.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::settings::Settings;

/// What `clean` removed (paths relative to the project root).
#[derive(Debug, Serialize)]
pub struct Cleaned {
    pub removed: Vec<String>,
}

/// Files and folders a full clean removes besides the stage folders.
const SHARED: [&str; 7] =
    [".work", ".staging", ".trash", "mcp", "ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm"];

pub fn clean(settings: &Settings, stages: &[String]) -> Result<Cleaned> {
    let artifacts = &settings.artifacts;
    let names: Vec<&'static str> = match stages.is_empty() {
        true => crate::stages::names(),
        false => stages.iter().map(|n| crate::stages::get(n).map(|s| s.spec().name)).collect::<Result<_>>()?,
    };
    if !artifacts.exists() {
        return Ok(Cleaned { removed: Vec::new() });
    }
    // Never pull a folder from under a process that is committing into it.
    let _lock = crate::stage::lock_artifacts(artifacts)?;
    let mut targets: Vec<PathBuf> = Vec::new();
    for n in &names {
        targets.push(artifacts.join(n));
        targets.push(crate::stage::work_dir(artifacts, n));
    }
    if stages.is_empty() {
        targets.extend(SHARED.iter().map(|f| artifacts.join(f)));
    }
    let mut removed = Vec::new();
    for t in targets {
        if remove(&t)? {
            removed.push(settings.display_path(&t));
        }
    }
    Ok(Cleaned { removed })
}

fn remove(p: &Path) -> Result<bool> {
    let meta = match std::fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(_) => return Ok(false),
    };
    if meta.is_dir() {
        std::fs::remove_dir_all(p).with_context(|| format!("cannot remove `{}`", p.display()))?;
    } else {
        std::fs::remove_file(p).with_context(|| format!("cannot remove `{}`", p.display()))?;
    }
    Ok(true)
}

pub fn render(c: &Cleaned) -> String {
    match c.removed.is_empty() {
        true => "nothing to clean\n".into(),
        false => c.removed.iter().map(|r| format!("removed `{r}`\n")).collect(),
    }
}
