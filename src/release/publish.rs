//! The release's last steps: `croissant.json`, the card and `SHA256SUMS` over the built
//! folder, its copy into the stage's artifacts and its rename into place (a published
//! version is never overwritten), and what a publication tells the user and the ledger.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Value, json};

use super::{HELD, Summary, card, checksums, croissant, list_files, sha256_file};
use crate::error::hinted;
use crate::ledger::NewEvent;
use crate::settings::Settings;
use crate::stage::Output;

/// Removes the partial folder unless publication took it.
pub(super) struct Partial(pub(super) Option<PathBuf>);
impl Drop for Partial {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// A published release's counts and notes (with the held items' next step).
pub(super) fn published_notes(out: &mut Output, summary: &Summary, shown: &str) {
    let held = summary.left_out.get(HELD).copied().unwrap_or(0);
    if held > 0 {
        out.count("held", held);
        out.notes.push(format!(
            "{held} item(s) that no eval panel agent solved (`all-fail`) were held back: copy `artifacts/eval/review.csv` to `reviews/eval/`, write `keep` or `leave out` in `decision`, name it in `[release] eval_review`, and release a new version (CHANGELOG.md lists them)"
        ));
    }
    // A version is never overwritten: what the review decides later needs a new one.
    let pending = super::pool::review_pending(&summary.left_out);
    if pending > 0 {
        out.count("review_pending", pending);
        out.notes.push(format!(
            "{pending} pool sample(s) still wait for review and are not in this version (`artifacts/review-merge/report.md` says what each waits for): once they are decided, set a new `[release] version` and run again to publish them"
        ));
    }
    let (kept, left) = summary.flagged_by_rule;
    if kept + left > 0 {
        out.count("decided_by_rule", kept + left);
        out.notes.push(format!(
            "{} item(s) that no eval panel agent solved (`all-fail`) were decided by rule from the panel's evidence, standing in for a person: {kept} kept, {left} left out (CHANGELOG.md gives each reason; a person's `keep` or `leave out` in `[release] eval_review` overrides it in a new version)",
            kept + left
        ));
    }
    out.count("samples", summary.samples);
    out.count("pool", summary.pool);
    out.count("left_out", summary.pool - summary.samples);
    out.count("tools", summary.tools);
    for (k, v) in &summary.by_kind {
        out.count(&format!("kind_{k}"), v.n);
    }
    out.notes.push(format!(
        "{} of {} pool samples released ({} tools); card `{shown}/README.md`",
        summary.samples, summary.pool, summary.tools
    ));
}

/// The ledger events of a publication: each released sample's, each left-out sample's
/// (sorted by id) and the release's own.
pub(super) fn published_events(
    out: &mut Output,
    (rel_name, release): (&str, Value),
    published: Vec<(String, Value)>,
    left: Vec<(&String, &String)>,
) {
    for (subject, payload) in published {
        out.event(NewEvent::new("release.published", Some(&subject), payload));
    }
    for (id, reason) in left {
        out.event(NewEvent::new(
            "release.left_out",
            Some(&crate::model::Sample::subject_for(id)),
            json!({"release": rel_name, "reason": reason}),
        ));
    }
    out.event(NewEvent::new("release.published", Some(&format!("release:{rel_name}")), release));
}

/// `croissant.json` (listing the files written so far with their checksums), then the card
/// and `SHA256SUMS`, which both list it; returns the checksums.
pub(super) fn finish_folder(tmp: &Path, summary: &mut Summary) -> Result<String> {
    let mut files = list_files(tmp)?;
    let mut listed: Vec<(String, String)> = Vec::new();
    for f in files.iter().filter(|f| !croissant::UNLISTED.contains(&f.as_str())) {
        listed.push((f.clone(), sha256_file(&tmp.join(f))?));
    }
    files.extend(["README.md", "SHA256SUMS", croissant::FILE].map(String::from));
    files.sort();
    files.dedup();
    summary.files = files;
    croissant::write(tmp, summary, &listed)?;
    std::fs::write(tmp.join("README.md"), card::render(summary))?;
    let sums = checksums(tmp)?;
    std::fs::write(tmp.join("SHA256SUMS"), &sums)?;
    Ok(sums)
}

/// Copies the release into the stage's artifacts and renames it into place; a version
/// already published is left alone when its files are the same and an error otherwise.
/// Returns the published folder as shown to the user.
pub(super) fn publish(
    s: &Settings,
    out: &mut Output,
    tmp: &Path,
    target: &Path,
    sums: &str,
    partial: &mut Partial,
) -> Result<String> {
    copy_out(out, tmp)?;
    let shown = s.display_path(target);
    if target.exists() {
        let old = std::fs::read_to_string(target.join("SHA256SUMS")).unwrap_or_default();
        if old != sums {
            return Err(hinted(
                format!("`{shown}` already exists with different content; a published version is never overwritten"),
                "set a new `[release] version` in the config (the previous version stays as it is)",
            ));
        }
        out.notes.push(format!("`{shown}` is already published with these exact files"));
    } else {
        std::fs::rename(tmp, target).with_context(|| format!("cannot publish `{shown}`"))?;
        partial.0 = None;
        out.notes.push(format!("published `{shown}`"));
    }
    Ok(shown)
}

/// Every file of the built folder into the stage's artifacts.
pub(super) fn copy_out(out: &mut Output, tmp: &Path) -> Result<()> {
    for rel in list_files(tmp)? {
        let mut f = out.create(&rel)?;
        std::io::copy(&mut std::fs::File::open(tmp.join(&rel))?, &mut f)?;
        f.finish()?;
    }
    Ok(())
}
