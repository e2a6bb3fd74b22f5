//! `CHANGELOG.md`: the samples added, removed and changed since the previous published
//! version, each with its reason, and the record of the eval audit (the items held back and
//! every decision of the adjudicated sheet).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};

use anyhow::{Context, Result};

use super::pool::Pooled;
use super::{Audit, Decision, HELD, ReleaseSettings, previous};
use crate::error::{InputError, Problem};
use crate::model::Sample;
use crate::settings::Settings;
use crate::stage::Inputs;

/// The CHANGELOG's record of the eval audit: the items held back, and every decision of
/// the adjudicated sheet on a pool item, with its reason.
pub(super) fn audit_log(audit: &Audit, pool: &Pooled) -> String {
    let mut md = String::new();
    let (title, listed): (&str, &dyn Fn(&String) -> bool) = if audit.hold {
        // Held here, not left out earlier for another reason (a review's rejection).
        ("Held back after evaluation", &|id| {
            audit.leaves_out(id).is_some_and(|(class, why)| class == HELD && pool.left_out.get(id) == Some(&why))
        })
    } else {
        ("Published undecided after evaluation (`[release] hold_flagged = false`)", &|id| pool.current.contains_key(id))
    };
    let rows: Vec<String> = audit
        .flagged
        .iter()
        .filter(|(id, _)| listed(id))
        .map(|(id, why)| format!("- `{id}`: {why}; waiting for `keep` or `leave out` in `[release] eval_review`\n"))
        .collect();
    if !rows.is_empty() {
        md.push_str(&format!("\n### {title} ({})\n\n{}", rows.len(), rows.concat()));
    }
    let mut decided: Vec<(&String, &String)> = audit
        .adjudicated
        .keep
        .iter()
        .filter(|(id, _)| pool.current.contains_key(*id))
        .chain(audit.adjudicated.leave_out.iter().filter(|(id, _)| pool.left_out.contains_key(*id)))
        .collect();
    decided.sort();
    if !decided.is_empty() {
        md.push_str(&format!("\n### Decided after evaluation ({})\n\n", decided.len()));
        for (id, why) in decided {
            md.push_str(&format!("- `{id}`: {why}\n"));
        }
    }
    md
}

/// `CHANGELOG.md` and the one line the card shows.
pub(super) fn changelog(
    inputs: &Inputs,
    s: &Settings,
    cfg: &ReleaseSettings,
    current: &HashMap<String, String>,
    left_out: &HashMap<String, String>,
    decisions: Option<&HashMap<String, Decision>>,
) -> Result<(String, Option<String>)> {
    let mut md = format!("# Changelog of {}\n\n## {}\n\n", cfg.name, cfg.version);
    let Some((prev_version, prev_dir)) = previous(s) else {
        md.push_str(&format!("First version: {} samples.\n", current.len()));
        return Ok((md, None));
    };
    let path = prev_dir.join("samples.jsonl");
    let mut prev: HashMap<String, String> = HashMap::new();
    for (i, l) in BufReader::new(inputs.open(&path)?).lines().enumerate() {
        let l = l.with_context(|| format!("cannot read `{}`", s.display_path(&path)))?;
        if l.trim().is_empty() {
            continue;
        }
        let sample: Sample = serde_json::from_str(&l).map_err(|e| InputError {
            file: s.display_path(&path),
            problems: vec![Problem::new(format!("line {}", i + 1), format!("not a unified sample: {e}"))],
        })?;
        prev.insert(sample.id.clone(), sample.content_hash());
    }
    let mut added: Vec<&String> = current.keys().filter(|k| !prev.contains_key(*k)).collect();
    let mut removed: Vec<(&String, String)> = prev
        .keys()
        .filter(|k| !current.contains_key(*k))
        .map(|k| {
            let why = left_out.get(k).cloned().unwrap_or_else(|| "no longer produced by the pipeline".into());
            (k, why)
        })
        .collect();
    let mut changed: Vec<(&String, String)> = current
        .iter()
        .filter(|(k, h)| prev.get(*k).is_some_and(|p| p != *h))
        .map(|(k, _)| {
            let why = match decisions.and_then(|d| d.get(k)) {
                Some(d) => format!("content changed; reviewed again ({} by {})", d.decision, d.decided_by),
                None => "content changed".into(),
            };
            (k, why)
        })
        .collect();
    added.sort();
    removed.sort();
    changed.sort();
    let head = format!(
        "Against {prev_version}: {} added, {} removed, {} changed, {} unchanged.",
        added.len(),
        removed.len(),
        changed.len(),
        current.len() - added.len() - changed.len()
    );
    md.push_str(&format!("{head}\n"));
    const CAP: usize = 1000;
    let mut section = |title: &str, rows: Vec<String>| {
        if rows.is_empty() {
            return;
        }
        md.push_str(&format!("\n### {title} ({})\n\n", rows.len()));
        for r in rows.iter().take(CAP) {
            md.push_str(&format!("- {r}\n"));
        }
        if rows.len() > CAP {
            md.push_str(&format!("- … and {} more\n", rows.len() - CAP));
        }
    };
    section("Added", added.iter().map(|k| format!("`{k}`: new in the sample pool")).collect());
    section("Removed", removed.iter().map(|(k, w)| format!("`{k}`: {w}")).collect());
    section("Changed", changed.iter().map(|(k, w)| format!("`{k}`: {w}")).collect());
    Ok((md, Some(head)))
}
