//! Batch files for offline engines (`vllm run-batch`): `benchgen llm batch-export` runs a
//! stage with its batch roles keeping their first round here instead of sending it, and
//! writes that round as an OpenAI batch input file; `benchgen llm batch-import` ingests the
//! engine's output file into `llm_batch_results` exactly as a downloaded output file is, so
//! the stage then answers those requests from the ledger.
//!
//! The export records its requests in the ledger as a batch row whose id is
//! `export:<file sha256, 16 hex>` (state `exported`, never followed), so the import finds
//! each `custom_id`'s role and cache key there.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use rusqlite::params;
use serde::Serialize;
use serde_json::Value;

use super::{Api, Remote, SCHEMA, line_outcome, store_answers};
use crate::ledger::Ledger;
use crate::llm::redact::Redactor;
use crate::settings::Settings;

/// One request an export run kept instead of sending it.
struct Kept {
    role: String,
    stage: String,
    base_url: String,
    key: String,
    hash: String,
    line: Vec<u8>,
}

/// The requests kept while exporting: `Some` during [`export`]. Process-wide, because the
/// stage builds its own LLM client, out of the command's reach.
static KEPT: Mutex<Option<Vec<Kept>>> = Mutex::new(None);

fn kept() -> std::sync::MutexGuard<'static, Option<Vec<Kept>>> {
    KEPT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this process is exporting (batch jobs built now keep their rounds).
pub(super) fn exporting() -> bool {
    kept().is_some()
}

/// Keep a round of role `role` (`(key, hash, JSONL line)`).
pub(super) fn keep(role: &str, stage: &str, base_url: &str, lines: Vec<(String, String, Vec<u8>)>) {
    if let Some(all) = kept().as_mut() {
        for (key, hash, line) in lines {
            let (role, stage, base_url) = (role.to_string(), stage.to_string(), base_url.to_string());
            all.push(Kept { role, stage, base_url, key, hash, line });
        }
    }
}

/// What `benchgen llm batch-export` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    pub file: String,
    /// Lines of the file (requests, one per request hash).
    pub requests: usize,
    /// Requests per role.
    pub roles: BTreeMap<String, usize>,
    /// The ledger's id of the export (`export:<sha>`); none when nothing was pending.
    pub batch_id: Option<String>,
}

/// Run the stage (`run`) with every batch role keeping its first round, then write those
/// requests to `out` (OpenAI batch input format, sorted by cache key) and record them in
/// the ledger. A stage that needs no request runs to its end and `out` is empty. A stage
/// that fails for a reason of its own (see `own_failure`) fails the export with that error,
/// after what it kept is written and recorded.
/// Refused before anything runs when none of the stage's `roles` is a batch role: the stage
/// would otherwise make its requests live, pay for them and write its artifacts.
pub fn export(
    settings: &Settings,
    out: &Path,
    roles: &[String],
    run: impl FnOnce() -> Result<()>,
) -> Result<ExportReport> {
    if !roles.iter().any(|r| batch_role(settings, r)) {
        let named =
            if roles.is_empty() { "it asks no LLM".to_string() } else { format!("its roles: {}", roles.join(", ")) };
        return Err(crate::error::UsageError(format!(
            "nothing to export: none of the stage's roles sends its requests as batch jobs ({named}), so the stage would run live; set `mode = \"batch\"` in `[llm.roles.NAME]` or pass `--batch` (every role whose provider is not `local`)"
        ))
        .into());
    }
    *kept() = Some(Vec::new());
    let ran = run();
    let mut all = kept().take().unwrap_or_default();
    let own = match own_failure(ran, !all.is_empty()) {
        Some(e) if all.is_empty() => return Err(e),
        own => own,
    };
    all.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.role.cmp(&b.role)));
    let mut file = Vec::new();
    let mut hashes = std::collections::BTreeSet::new();
    let mut roles: BTreeMap<String, usize> = BTreeMap::new();
    for k in &all {
        // `custom_id` must be unique in a file: two roles on one server asking the same.
        if hashes.insert(k.hash.as_str()) {
            file.extend_from_slice(&k.line);
            *roles.entry(k.role.clone()).or_default() += 1;
        }
    }
    crate::store::write_atomic(out, &file).with_context(|| format!("cannot write `{}`", out.display()))?;
    let batch_id = if all.is_empty() {
        None
    } else {
        let id = format!("export:{}", &crate::store::sha256_hex(&file)[..16]);
        record_export(settings, &id, &all).context("cannot record the export in the ledger")?;
        Some(id)
    };
    let report = ExportReport { file: settings.display_path(out), requests: hashes.len(), roles, batch_id };
    match own {
        None => Ok(report),
        // What was kept is written and recorded all the same (its answers can be imported),
        // but the stage's own failure is what the user must fix first.
        Some(e) => Err(e.context(format!(
            "stage `{}` failed for a reason of its own (below), not at the stop of its exported round; the {} \
             requests it kept are written to `{}` ({}) all the same, for `benchgen llm batch-import`",
            all[0].stage,
            report.requests,
            report.file,
            report.batch_id.as_deref().unwrap_or("-")
        ))),
    }
}

/// The stop of an exported round: every call of the round ends with a setup error saying
/// this ([`super::BatchJobs`]'s `export_round`), and so does the stage.
pub(super) const EXPORT_STOP: &str = "a batch-export run stops after its first round";

/// The stage's own failure in the result of an export run (`kept`: whether it kept a
/// round), if any. With nothing kept every failure is its own; with a round kept, the stop
/// of that round ([`EXPORT_STOP`], anywhere in the error's text: errors of the LLM fan-out
/// cross threads as text) is how an export ends, not a failure. A failure that names
/// something else (a live role's server down, an input it cannot read, a bad answer past
/// `max_failed_share`) is the stage's, and is not lost because a round was kept.
fn own_failure(ran: Result<()>, kept: bool) -> Option<anyhow::Error> {
    ran.err().filter(|e| !kept || !format!("{e:#}").contains(EXPORT_STOP))
}

/// Whether the role `name` runs as batch jobs, as the client decides it (`mode = "batch"`,
/// or `--batch` and a provider that is not `local`).
pub fn batch_role(settings: &Settings, name: &str) -> bool {
    let llm = settings.section::<crate::llm::LlmSettings>();
    llm.roles.get(name).is_some_and(|r| {
        r.mode == crate::llm::config::RoleMode::Batch
            || (settings.llm_batch && r.provider != crate::llm::config::Provider::Local)
    })
}

/// One done batch row per role (never followed: no provider knows it), with its requests.
fn record_export(settings: &Settings, id: &str, all: &[Kept]) -> Result<()> {
    let l = Ledger::open(&settings.artifacts)?;
    l.connection().execute_batch(SCHEMA)?;
    let tx = l.connection().unchecked_transaction()?;
    let now = crate::ledger::now();
    let mut rows: BTreeMap<&str, i64> = BTreeMap::new();
    for k in all {
        let row = match rows.get(k.role.as_str()) {
            Some(row) => *row,
            None => {
                let n = all.iter().filter(|x| x.role == k.role).count() as i64;
                tx.execute(
                    "INSERT INTO llm_batches(batch_id, role, stage, base_url, input_file_id, state, requests,
                     created_at, updated_at, done) VALUES (?1, ?2, ?3, ?4, ?1, 'exported', ?5, ?6, ?6, 1)",
                    params![id, k.role, k.stage, k.base_url, n, now],
                )?;
                let new = tx.last_insert_rowid();
                rows.insert(k.role.as_str(), new);
                new
            }
        };
        tx.execute(
            "INSERT OR IGNORE INTO llm_batch_requests(batch, key, hash) VALUES (?1, ?2, ?3)",
            params![row, k.key, k.hash],
        )?;
    }
    tx.commit()?;
    Ok(())
}

pub fn render_export(r: &ExportReport) -> String {
    let Some(id) = &r.batch_id else {
        return format!("nothing to export: the stage ran from the ledger; wrote an empty `{}`\n", r.file);
    };
    let roles: Vec<String> = r.roles.iter().map(|(role, n)| format!("{role}: {n}")).collect();
    format!(
        "wrote {} requests to `{}` ({}; {id})\n\
         only the stage's first round: answer it (`vllm run-batch -i {} -o OUT`), \
         `benchgen llm batch-import OUT`, then run the stage again, or export its next round\n",
        r.requests,
        r.file,
        roles.join(", "),
        r.file
    )
}

/// What `benchgen llm batch-import` took.
#[derive(Debug, Clone, Serialize)]
pub struct ImportReport {
    pub file: String,
    /// Requests answered (their answers are in the ledger).
    pub answered: usize,
    /// Lines with no answer (an error status or error object), each `custom_id: why`: the
    /// stage sends those requests anew.
    pub failed: Vec<String>,
}

/// Ingest an output file of an offline engine: each line's answer goes into the ledger
/// under the cache keys the export recorded for its `custom_id`.
pub fn import(settings: &Settings, file: &Path) -> Result<ImportReport> {
    let shown = settings.display_path(file);
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read `{shown}`"))?;
    let Some(l) = Ledger::open_existing(&settings.artifacts)? else {
        bail!("`{shown}`: the project has no ledger yet; run `benchgen llm batch-export` first")
    };
    l.connection().execute_batch(SCHEMA)?;
    let (redactors, none) = (role_redactors(settings), Redactor::default());
    // The answers as the ledger stores them (JSON text), by batch row.
    let mut answers: BTreeMap<i64, Vec<(String, String)>> = BTreeMap::new();
    let mut failed = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = format!("`{shown}` line {}", n + 1);
        let mut v: Value = serde_json::from_str(line).with_context(|| format!("{at}: not JSON"))?;
        // Owned: the answer is taken out of `v`.
        let Some(hash) = v["custom_id"].as_str().map(str::to_string) else { bail!("{at}: no `custom_id` string") };
        let targets = exported_keys(&l, &hash)?;
        let Some((_, _, role)) = targets.first() else {
            bail!("{at}: `custom_id` {hash} is no request of a `benchgen llm batch-export`")
        };
        match line_outcome(redactors.get(role).unwrap_or(&none), &mut v) {
            Ok(response) => {
                let text = response.to_string();
                for (row, key, _) in targets {
                    answers.entry(row).or_default().push((key, text.clone()));
                }
            }
            Err(f) => failed.push(format!("{hash}: {}: {}", f.status, f.message)),
        }
    }
    let mut answered = 0;
    for (row, got) in answers {
        let batch_id: String =
            l.connection().query_row("SELECT batch_id FROM llm_batches WHERE id = ?1", [row], |r| r.get(0))?;
        let b = Remote { id: batch_id, status: "imported".into(), completed: got.len() as u64, ..Remote::default() };
        let texts = got.iter().map(|(key, response)| (key.as_str(), response.as_str()));
        store_answers(&l, row, &b, texts).with_context(|| format!("cannot store the answers of `{shown}`"))?;
        answered += got.len();
    }
    Ok(ImportReport { file: shown, answered, failed })
}

/// `(batch row, cache key, role)` of every exported request with this hash, newest export
/// first (one per key).
fn exported_keys(l: &Ledger, hash: &str) -> Result<Vec<(i64, String, String)>> {
    let mut st = l.connection().prepare_cached(
        "SELECT q.batch, q.key, b.role FROM llm_batch_requests q JOIN llm_batches b ON b.id = q.batch
         WHERE q.hash = ?1 AND b.batch_id LIKE 'export:%' ORDER BY b.id DESC",
    )?;
    let rows = st.query_map([hash], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    let mut out: Vec<(i64, String, String)> = Vec::new();
    for r in rows {
        let r: (i64, String, String) = r?;
        if !out.iter().any(|o| o.1 == r.1) {
            out.push(r);
        }
    }
    Ok(out)
}

/// Each role's key redactor: an imported answer is stored like a live one, never with a key.
fn role_redactors(settings: &Settings) -> BTreeMap<String, Redactor> {
    let roles = &settings.section::<crate::llm::LlmSettings>().roles;
    roles.iter().filter_map(|(name, r)| Api::new(r).ok().map(|a| (name.clone(), a.redactor))).collect()
}

pub fn render_import(r: &ImportReport) -> String {
    let mut out = format!("`{}`: {} requests answered into the ledger", r.file, r.answered);
    if r.failed.is_empty() {
        out.push_str("; run the stage again\n");
        return out;
    }
    out.push_str(&format!("; {} not answered (the stage sends them anew):\n", r.failed.len()));
    for f in &r.failed {
        out.push_str(&format!("  {f}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stage's failure as the stage runner wraps it, `root` its cause.
    fn failed(root: String) -> Result<()> {
        Err(anyhow::anyhow!(root).context("`filter` failed; its previous artifacts were left as they were"))
    }

    /// The stop of an exported round, as its calls end the stage.
    fn stopped() -> Result<()> {
        failed(format!(
            "LLM setup failed in stage `filter`, item `a` (role `c`): 1 requests of role `c` exported, not answered: \
             {EXPORT_STOP}"
        ))
    }

    /// A failure of the stage's own: a live role's server down.
    fn down() -> Result<()> {
        failed("LLM call failed in stage `filter`, item `b` (role `l`) after 3 attempt(s); last status: refused".into())
    }

    #[test]
    fn the_stop_of_an_exported_round_is_no_failure_but_the_stages_own_failure_is() {
        assert!(own_failure(Ok(()), true).is_none() && own_failure(Ok(()), false).is_none());
        assert!(own_failure(stopped(), true).is_none(), "the stop of a kept round is how an export ends");
        let e = own_failure(down(), true).expect("a failure of its own is kept though a round was kept");
        assert!(format!("{e:#}").contains("last status: refused"), "{e:#}");
        assert!(own_failure(down(), false).is_some());
        assert!(own_failure(stopped(), false).is_some(), "with nothing kept, every failure is the stage's");
    }

    /// A round kept, then the stage fails for a reason of its own: the file and the export's
    /// ledger row are written all the same, and the export fails with the stage's error,
    /// saying so. The stop of the kept round alone ends the export well.
    #[test]
    fn an_export_whose_stage_fails_on_its_own_writes_what_it_kept_and_fails_with_that_error() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("pipeline/t.toml");
        std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
        let role = "[llm.roles.c]\nprovider = \"vllm\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n";
        std::fs::write(&cfg, format!("{role}mode = \"batch\"\n")).unwrap();
        let settings = Settings::load(&cfg).unwrap();
        let (out, roles) = (dir.path().join("in.jsonl"), vec!["c".to_string()]);
        let line = |hash: &str| format!("{{\"custom_id\":\"{hash}\"}}\n").into_bytes();
        let base = "http://127.0.0.1:9/v1";

        let e = export(&settings, &out, &roles, || {
            keep("c", "filter", base, vec![("k1".into(), "h1".into(), line("h1"))]);
            down()
        })
        .unwrap_err();
        let text = format!("{e:#}");
        assert!(text.contains("stage `filter` failed for a reason of its own"), "{text}");
        assert!(text.contains("the 1 requests it kept are written to"), "{text}");
        assert!(text.contains("last status: refused"), "the stage's own error: {text}");
        assert_eq!(std::fs::read(&out).unwrap(), line("h1"), "what was kept is written");
        let rows = super::super::list(&settings).unwrap();
        assert_eq!((rows.len(), rows[0].state.as_str()), (1, "exported"), "and recorded: {rows:#?}");

        let r = export(&settings, &out, &roles, || {
            keep("c", "filter", base, vec![("k2".into(), "h2".into(), line("h2"))]);
            stopped()
        })
        .unwrap();
        assert_eq!(r.requests, 1);
        assert_eq!(std::fs::read(&out).unwrap(), line("h2"));
    }
}
