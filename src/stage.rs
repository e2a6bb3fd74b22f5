//! The shared stage runner: every stage is a declared spec plus a plain `run`
//! function; this module does the hashing, skipping, staging, manifests and
//! ledger bookkeeping around it.
//!
//! A stage's output is held in memory until the stage returns, then recorded in
//! the ledger and swapped into `artifacts/<dir>/` in one step. A stage that fails
//! (bad input, a bug, Ctrl-C) therefore changes nothing under `artifacts/`.
//!
//! `manifest.json` wire format (one per stage folder):
//! `{stage, stage_version, code_version, config_hash, inputs: {path: sha256},
//!  prompts: {path: sha256}, outputs: {file: sha256}, counts: {...}, run_id,
//!  started_at, finished_at, duration_ms}`. Paths are relative to the project root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ledger::{Ledger, NewEvent};
use crate::printer::Printer;
use crate::settings::Settings;
use crate::store::{self, StagingDir};

pub const CODE_VERSION: &str = env!("CARGO_PKG_VERSION");
pub const MANIFEST: &str = "manifest.json";

/// What a stage reads and how it is configured: everything its freshness depends on.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Input files (absolute paths).
    pub inputs: Vec<PathBuf>,
    /// Prompt templates (absolute paths); empty for stages without an LLM.
    pub prompts: Vec<PathBuf>,
    /// Hash of the config values the stage uses.
    pub config_hash: String,
}

/// Input files read once by the runner; stages read them from here so the
/// hashes in the manifest are exactly of the bytes that were used.
pub struct Inputs {
    files: BTreeMap<PathBuf, Vec<u8>>,
}

impl Inputs {
    pub fn bytes(&self, path: &Path) -> Result<&[u8]> {
        self.files
            .get(path)
            .map(Vec::as_slice)
            .with_context(|| format!("internal: `{}` was not declared as a stage input", path.display()))
    }
}

/// What a stage produces.
#[derive(Default)]
pub struct Output {
    files: Vec<(String, Vec<u8>)>,
    pub events: Vec<NewEvent>,
    pub counts: BTreeMap<String, Value>,
    /// Lines for the human summary.
    pub notes: Vec<String>,
}

impl Output {
    pub fn file(&mut self, rel: &str, bytes: Vec<u8>) {
        self.files.retain(|(r, _)| r != rel);
        self.files.push((rel.to_string(), bytes));
    }

    pub fn json<T: Serialize + ?Sized>(&mut self, rel: &str, value: &T) -> Result<()> {
        self.file(rel, store::to_json_bytes(value)?);
        Ok(())
    }

    pub fn count(&mut self, key: &str, value: impl Into<Value>) {
        self.counts.insert(key.to_string(), value.into());
    }

    /// Index the next event will have in this batch (for `Parent::Batch`).
    pub fn next_event(&self) -> usize {
        self.events.len()
    }

    pub fn event(&mut self, ev: NewEvent) -> usize {
        self.events.push(ev);
        self.events.len() - 1
    }
}

/// Everything a stage run may use.
pub struct Ctx<'a> {
    pub settings: &'a Settings,
    pub printer: &'a Printer,
    /// Set by [`execute`] for the stage being run.
    run: Option<RunHandle>,
}

/// The ledger run of the stage being executed, begun on first use.
struct RunHandle {
    stage: &'static str,
    config_hash: String,
    id: std::cell::OnceCell<i64>,
}

impl<'a> Ctx<'a> {
    /// A context for commands outside a stage run (status, explain, …).
    pub fn new(settings: &'a Settings, printer: &'a Printer) -> Self {
        Self { settings, printer, run: None }
    }

    /// The ledger run id of the stage being executed. The run is begun on first
    /// call, so stages that never ask (pure transformations) leave the ledger
    /// untouched when they fail. Stages that record as they go (LLM exchanges,
    /// MCP calls) open their own ledger connection and append to this run, so
    /// finished work survives an interruption and is reused on rerun.
    pub fn ledger_run(&self) -> Result<i64> {
        let h = self.run.as_ref().context("internal: no stage is being executed")?;
        if let Some(id) = h.id.get() {
            return Ok(*id);
        }
        std::fs::create_dir_all(&self.settings.artifacts)?;
        let id = Ledger::open(&self.settings.artifacts)?.begin_run(h.stage, &h.config_hash, CODE_VERSION)?;
        let _ = h.id.set(id);
        Ok(id)
    }

    /// Per-item checkpoints of the stage being executed (see [`store::Checkpoint`]).
    /// They survive a failed or killed run and are cleared once the stage commits.
    pub fn checkpoint(&self) -> Result<store::Checkpoint> {
        let h = self.run.as_ref().context("internal: no stage is being executed")?;
        store::Checkpoint::open(&self.settings.artifacts.join(".work").join(h.stage))
    }
}

/// A pipeline stage.
pub trait Stage {
    /// Stage name, also its folder under `artifacts/`.
    fn name(&self) -> &'static str;
    /// The command that runs it (for messages and `status`).
    fn command(&self) -> &'static str;
    /// Bump when the stage's logic changes its output, so old artifacts go stale.
    fn version(&self) -> u32;
    /// Stages whose artifacts this one reads.
    fn upstream(&self) -> &'static [&'static str];
    /// Stages whose artifacts this one reads when they exist (stale if they are stale).
    fn optional_upstream(&self) -> &'static [&'static str] {
        &[]
    }
    fn plan(&self, settings: &Settings) -> Result<Plan>;
    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()>;
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub stage: String,
    pub stage_version: u32,
    pub code_version: String,
    pub config_hash: String,
    pub inputs: BTreeMap<String, String>,
    pub prompts: BTreeMap<String, String>,
    pub outputs: BTreeMap<String, String>,
    pub counts: BTreeMap<String, Value>,
    pub run_id: i64,
    pub started_at: String,
    pub finished_at: String,
    pub duration_ms: u64,
}

impl Manifest {
    pub fn load(artifacts: &Path, stage: &str) -> Result<Option<Self>> {
        let path = artifacts.join(stage).join(MANIFEST);
        if !path.exists() {
            return Ok(None);
        }
        let bytes = std::fs::read(&path).with_context(|| format!("cannot read `{}`", path.display()))?;
        let m = serde_json::from_slice(&bytes)
            .with_context(|| format!("`{}` is not a benchgen manifest", path.display()))?;
        Ok(Some(m))
    }
}

/// Whether a stage's artifacts are up to date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "lowercase")]
pub enum Freshness {
    Done,
    Stale(String),
    Missing(String),
}

impl Freshness {
    pub fn is_done(&self) -> bool {
        matches!(self, Freshness::Done)
    }
}

/// Path → content hash.
type Hashes = BTreeMap<String, String>;

fn hash_inputs(settings: &Settings, paths: &[PathBuf]) -> Result<(Hashes, BTreeMap<PathBuf, Vec<u8>>)> {
    let mut hashes = BTreeMap::new();
    let mut files = BTreeMap::new();
    for p in paths {
        let bytes = std::fs::read(p).map_err(|e| {
            crate::error::hinted(
                format!("cannot read input `{}`: {e}", settings.display_path(p)),
                "check the path in the pipeline config, or run the stage that produces it",
            )
        })?;
        hashes.insert(settings.display_path(p), store::sha256_hex(&bytes));
        files.insert(p.clone(), bytes);
    }
    Ok((hashes, files))
}

fn diff_maps(what: &str, old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Option<String> {
    let added: Vec<&String> = new.keys().filter(|k| !old.contains_key(*k)).collect();
    let removed: Vec<&String> = old.keys().filter(|k| !new.contains_key(*k)).collect();
    if let ([a], [r]) = (added.as_slice(), removed.as_slice()) {
        return Some(format!("last run read {what} `{r}`; the config now names `{a}`"));
    }
    for (k, v) in new {
        match old.get(k) {
            None => return Some(format!("{what} `{k}` is new")),
            Some(o) if o != v => return Some(format!("{what} `{k}` changed")),
            _ => {}
        }
    }
    old.keys().find(|k| !new.contains_key(*k)).map(|k| format!("{what} `{k}` is no longer used"))
}

/// Freshness of one stage, given its upstream stages' states.
pub fn freshness(stage: &dyn Stage, settings: &Settings, upstream: &BTreeMap<String, Freshness>) -> Freshness {
    let manifest = match Manifest::load(&settings.artifacts, stage.name()) {
        Ok(Some(m)) => m,
        Ok(None) => return Freshness::Missing("never run".into()),
        Err(e) => return Freshness::Stale(format!("{e:#}")),
    };
    if let Some(up) = stage.upstream().iter().find(|u| upstream.get(**u).is_some_and(|f| !f.is_done())) {
        return Freshness::Stale(format!("upstream `{up}` is not done"));
    }
    if let Some(up) =
        stage.optional_upstream().iter().find(|u| upstream.get(**u).is_some_and(|f| matches!(f, Freshness::Stale(_))))
    {
        return Freshness::Stale(format!("upstream `{up}` is stale"));
    }
    if manifest.code_version != CODE_VERSION || manifest.stage_version != stage.version() {
        return Freshness::Stale(format!(
            "benchgen changed: made by {} (stage v{}), now {} (stage v{})",
            manifest.code_version,
            manifest.stage_version,
            CODE_VERSION,
            stage.version()
        ));
    }
    let plan = match stage.plan(settings) {
        Ok(p) => p,
        Err(e) => return Freshness::Stale(format!("{e:#}")),
    };
    if plan.config_hash != manifest.config_hash {
        return Freshness::Stale(format!("its settings in `{}` changed", settings.display_path(&settings.config_path)));
    }
    for (what, paths, old) in [("input", &plan.inputs, &manifest.inputs), ("prompt", &plan.prompts, &manifest.prompts)]
    {
        let mut now = BTreeMap::new();
        for p in paths {
            let key = settings.display_path(p);
            match store::hash_file(p) {
                Ok(h) => {
                    now.insert(key, h);
                }
                Err(_) => return Freshness::Stale(format!("{what} `{key}` is missing")),
            }
        }
        if let Some(reason) = diff_maps(what, old, &now) {
            return Freshness::Stale(reason);
        }
    }
    let dir = settings.artifacts.join(stage.name());
    for (file, hash) in &manifest.outputs {
        match store::hash_file(&dir.join(file)) {
            Ok(h) if &h == hash => {}
            Ok(_) => {
                return Freshness::Stale(format!("output `{file}` was modified after the run"));
            }
            Err(_) => return Freshness::Stale(format!("output `{file}` is missing")),
        }
    }
    Freshness::Done
}

/// The result of running (or skipping) one stage.
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    pub stage: String,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i64>,
    pub counts: BTreeMap<String, Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    pub duration_ms: u64,
}

/// Run a stage unless it is fresh (or `force`), then commit its output.
pub fn execute(
    settings: &Settings,
    printer: &Printer,
    stage: &dyn Stage,
    force: bool,
    upstream: &BTreeMap<String, Freshness>,
) -> Result<StageReport> {
    recover_if_idle(settings, printer)?;
    // Run alone, a stage needs its upstream output to exist; stale upstream
    // output is used with a warning (`benchgen run` brings it up to date first).
    for up in stage.upstream().iter().chain(stage.optional_upstream()) {
        match upstream.get(*up) {
            Some(Freshness::Missing(_)) if stage.upstream().contains(up) => {
                return Err(crate::error::hinted(
                    format!("`{}` needs the output of `{up}`, which has not been produced", stage.command()),
                    "run `benchgen run` to bring every stage up to date, or run the upstream stage first",
                ));
            }
            Some(Freshness::Stale(why)) => {
                printer.warn(&format!("`{up}` is stale ({why}); `{}` reads its last complete output", stage.command()))
            }
            _ => {}
        }
    }
    if !force && freshness(stage, settings, upstream).is_done() {
        let m = Manifest::load(&settings.artifacts, stage.name())?.context("manifest vanished")?;
        return Ok(StageReport {
            stage: stage.name().into(),
            status: "skipped",
            run_id: Some(m.run_id),
            counts: m.counts,
            notes: vec!["up to date (use --force to rerun)".into()],
            duration_ms: 0,
        });
    }
    let plan = stage.plan(settings)?;
    let ctx = Ctx {
        settings,
        printer,
        run: Some(RunHandle { stage: stage.name(), config_hash: plan.config_hash.clone(), id: Default::default() }),
    };
    let (input_hashes, files) = hash_inputs(settings, &plan.inputs)?;
    let (prompt_hashes, _) = hash_inputs(settings, &plan.prompts)?;
    let inputs = Inputs { files };
    let started_at = crate::ledger::now();
    let clock = Instant::now();
    let mut out = Output::default();
    if let Err(e) = stage.run(&ctx, &inputs, &mut out) {
        if let Some(id) = ctx.run.as_ref().and_then(|h| h.id.get()) {
            let _ = Ledger::open(&settings.artifacts).and_then(|l| l.finish_run(*id, "failed"));
        }
        return Err(e.context(format!("`{}` failed; its previous artifacts were left as they were", stage.command())));
    }

    // Commit: ledger first (its run id goes into the manifest), then the folder swap.
    // A crash between the two leaves an unreferenced ledger run, never a manifest
    // pointing at events that do not exist.
    std::fs::create_dir_all(&settings.artifacts)
        .with_context(|| format!("cannot create `{}`", settings.artifacts.display()))?;
    let _lock = lock_artifacts(&settings.artifacts)?;
    let mut ledger = Ledger::open(&settings.artifacts)?;
    let run_id = match ctx.run.as_ref().and_then(|h| h.id.get()) {
        Some(&id) => {
            ledger.append(id, stage.name(), &out.events)?;
            ledger.finish_run(id, "ok")?;
            id
        }
        None => ledger.record_run(stage.name(), &plan.config_hash, CODE_VERSION, &out.events)?.0,
    };
    let mut staging = StagingDir::create(&settings.artifacts, stage.name())?;
    for (rel, bytes) in &out.files {
        staging.write(rel, bytes)?;
    }
    let duration_ms = clock.elapsed().as_millis() as u64;
    let manifest = Manifest {
        stage: stage.name().into(),
        stage_version: stage.version(),
        code_version: CODE_VERSION.into(),
        config_hash: plan.config_hash,
        inputs: input_hashes,
        prompts: prompt_hashes,
        outputs: staging.outputs(),
        counts: out.counts.clone(),
        run_id,
        started_at,
        finished_at: crate::ledger::now(),
        duration_ms,
    };
    staging.write_json(MANIFEST, &manifest)?;
    staging.commit()?;
    ctx.checkpoint()?.clear()?;
    Ok(StageReport {
        stage: stage.name().into(),
        status: "ran",
        run_id: Some(run_id),
        counts: out.counts,
        notes: out.notes,
        duration_ms,
    })
}

/// Finish or undo what a killed commit left behind, unless another process is
/// committing right now (then its staging folder is not ours to touch).
pub fn recover_if_idle(settings: &Settings, printer: &Printer) -> Result<()> {
    if !settings.artifacts.join(".staging").exists() && !settings.artifacts.join(".trash").exists() {
        return Ok(());
    }
    let Ok(_lock) = lock_artifacts(&settings.artifacts) else { return Ok(()) };
    for note in store::recover(&settings.artifacts)? {
        printer.warn(&note);
    }
    Ok(())
}

/// An exclusive lock on the artifacts folder, so two benchgen processes never
/// commit into it at once.
fn lock_artifacts(artifacts: &Path) -> Result<std::fs::File> {
    let path = artifacts.join(".lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open `{}`", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => {
            bail!("another benchgen process is writing to `{}`; wait for it to finish", artifacts.display())
        }
        Err(std::fs::TryLockError::Error(e)) => Err(e).context("cannot lock the artifacts folder"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_the_changed_input() {
        let a: BTreeMap<_, _> = [("x".to_string(), "1".to_string())].into();
        let b: BTreeMap<_, _> = [("x".to_string(), "2".to_string())].into();
        assert_eq!(diff_maps("input", &a, &b).unwrap(), "input `x` changed");
        assert_eq!(diff_maps("input", &a, &BTreeMap::new()).unwrap(), "input `x` is no longer used");
        assert!(diff_maps("input", &a, &a).is_none());
    }
}
