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
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::Problem;

use crate::ledger::{Ledger, NewEvent};
use crate::printer::Printer;
use crate::settings::Settings;
use crate::store::{self, StagingDir};

pub const CODE_VERSION: &str = env!("CARGO_PKG_VERSION");
pub const MANIFEST: &str = "manifest.json";

/// A file one stage writes, addressed through its producer: the producing
/// module exports `pub const X: Artifact<T>` and consumers read it with
/// [`Inputs::json`] (or [`Inputs::bytes_of`] for non-JSON files), so no stage
/// builds another stage's paths or defines its output types.
pub struct Artifact<T: ?Sized = Raw> {
    pub stage: &'static str,
    pub file: &'static str,
    _type: PhantomData<fn() -> Box<T>>,
}

/// The type parameter of artifacts that are not JSON (CSV, binary vectors, SVG).
pub enum Raw {}

impl<T: ?Sized> Artifact<T> {
    pub const fn new(stage: &'static str, file: &'static str) -> Self {
        Self { stage, file, _type: PhantomData }
    }

    /// Declare this artifact as a required read of a stage.
    pub const fn read(&self) -> Read {
        Read { stage: self.stage, file: self.file, kind: ReadKind::Required }
    }

    /// Declare this artifact as a read used only when its producer has run.
    pub const fn optional(&self) -> Read {
        Read { stage: self.stage, file: self.file, kind: ReadKind::Optional }
    }

    pub fn path(&self, settings: &Settings) -> PathBuf {
        settings.artifacts.join(self.stage).join(self.file)
    }
}

impl<T: serde::de::DeserializeOwned> Artifact<T> {
    /// What its stage last committed, when the file is there and parses: for what reads
    /// it outside a run (estimates, a stage's sticky state). A stage's inputs go through
    /// [`Inputs::json`], which hashes what it reads and names the file in its errors.
    pub fn on_disk(&self, settings: &Settings) -> Option<T> {
        serde_json::from_slice(&std::fs::read(self.path(settings)).ok()?).ok()
    }
}

impl<T: ?Sized> Clone for Artifact<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for Artifact<T> {}

/// One declared input of a stage: a file of an upstream stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Read {
    pub stage: &'static str,
    pub file: &'static str,
    pub kind: ReadKind,
}

impl Read {
    /// The counts and timings of an upstream stage (its `manifest.json`), read
    /// for reports. Not hashed as an input: manifests carry times and run ids.
    pub const fn manifest(stage: &'static str) -> Read {
        Read { stage, file: MANIFEST, kind: ReadKind::Manifest }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadKind {
    /// The stage cannot run without it; its producer is an upstream stage.
    Required,
    /// Read when present; stale when its producer is stale.
    Optional,
    /// The producer's manifest (counts, timings), for reports only.
    Manifest,
}

/// What an [`Estimate::unknown`] waits for, where stages share it.
pub const UNTIL_REGISTRY: &str = "`registry import` can read the registry";
pub const UNTIL_LOGS: &str = "`logs import` can read the log files";
pub const UNTIL_POOL: &str = "the sample pool's inputs can be read";

/// The LLM exchanges a stage's first run makes for one role, known before it runs (`check`
/// and `init` print them with the time they take here, see `benchgen::estimate`). Counts
/// are upper bounds of first tries; the table adds the re-asks each role's `reask` allows
/// to `typed` ones.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Estimate {
    /// The role's name (`[llm.roles.<role>]`).
    pub role: String,
    /// Typed calls: an answer that does not validate is asked again.
    pub typed: u64,
    /// Calls whose answers are not validated (agent turns).
    pub plain: u64,
    /// How the bound was reached, in a short phrase (`≤ 40 sessions × 2 verdicts`).
    pub basis: String,
    /// Items the stage keeps in flight (0: only the role's `max_concurrency` bounds them).
    pub in_flight: usize,
    /// The bound cannot be known yet (an input the stage counts cannot be read): the row
    /// counts 0 and the table's total says the stage is not in it.
    pub unknown: bool,
}

impl Estimate {
    /// At most `asks` typed calls of `role`.
    pub fn typed(role: &str, asks: u64, basis: impl Into<String>) -> Self {
        let basis = basis.into();
        debug_assert!(!basis.starts_with("unknown until"), "an unknown bound is `Estimate::unknown`: {basis}");
        Self { role: role.to_string(), typed: asks, plain: 0, basis, in_flight: 1, unknown: false }
    }

    /// `role`'s exchanges cannot be counted until `until` ([`UNTIL_REGISTRY`], say).
    pub fn unknown(role: &str, until: &str) -> Self {
        let basis = format!("unknown until {until}");
        Self { role: role.to_string(), typed: 0, plain: 0, basis, in_flight: 1, unknown: true }
    }

    /// At most `asks` calls of `role` whose answers are not validated (chat turns).
    pub fn plain(role: &str, asks: u64, basis: impl Into<String>) -> Self {
        let basis = basis.into();
        debug_assert!(!basis.starts_with("unknown until"), "an unknown bound is `Estimate::unknown`: {basis}");
        Self { role: role.to_string(), typed: 0, plain: asks, basis, in_flight: 1, unknown: false }
    }

    /// The stage runs `n` items at once (its batch's `concurrency`; 0: the role's bound).
    pub fn in_flight(mut self, n: usize) -> Self {
        self.in_flight = n;
        self
    }

    /// This estimate and `other` (same role) as one row: a stage that asks one role in
    /// several ways.
    pub fn plus(mut self, other: Estimate) -> Self {
        self.typed += other.typed;
        self.plain += other.plain;
        // Two rows of one role waiting for the same input say so once.
        if other.basis != self.basis {
            self.basis = format!("{} + {}", self.basis, other.basis);
        }
        self.unknown |= other.unknown;
        self
    }
}

/// A seeded random `n` of `ids` (all of them when there are no more than `n`): `[logs]
/// sample`'s sessions, `[registry] sample`'s servers. The ids are sorted first, so the
/// choice depends on the seed and the set of ids, not on their order.
pub fn seeded_sample(mut ids: Vec<String>, n: usize, seed: u64) -> std::collections::HashSet<String> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    if ids.len() > n {
        ids.sort();
        ids.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x7361_6d70_6c65));
        ids.truncate(n);
    }
    ids.into_iter().collect()
}

/// `n` within a configured `cap` (0: no cap), for estimates.
pub fn capped(n: u64, cap: usize) -> u64 {
    if cap == 0 { n } else { n.min(cap as u64) }
}

/// Non-blank lines of a JSON Lines file (one item each), when it can be read: the size of
/// an upstream artifact already made, for estimates.
pub fn jsonl_lines(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.lines().filter(|l| !l.trim().is_empty()).count() as u64)
}

/// One estimate per role, in the order roles first appear: a stage whose roles are
/// configured as one model reports that model's exchanges in one row.
pub fn merge_by_role(rows: impl IntoIterator<Item = Estimate>) -> Vec<Estimate> {
    let mut out: Vec<Estimate> = Vec::new();
    for e in rows {
        match out.iter().position(|o| o.role == e.role) {
            Some(i) => {
                let first = out.remove(i);
                out.insert(i, first.plus(e));
            }
            None => out.push(e),
        }
    }
    out
}

/// What a stage is, declared once: the stage list, `status`, `stages`, `clean`,
/// `check` and the README's stage table are all derived from these.
#[derive(Debug, Serialize)]
pub struct StageSpec {
    /// Its command's words joined by `-`; also its folder under `artifacts/`.
    pub name: &'static str,
    /// The command that runs it (`efs verify`).
    pub command: &'static str,
    /// Bump when the stage's logic changes its output, so old artifacts go stale.
    pub version: u32,
    /// One line for the stage table.
    pub about: &'static str,
    /// Files of upstream stages it reads; upstream dependencies derive from these.
    pub reads: &'static [Read],
    /// Files it writes under `artifacts/<name>/` (`dir/*` for a folder of files).
    pub writes: &'static [&'static str],
    /// The config section (`[levels]`) that configures it: by default it is part of `run`
    /// when that section is (present, or always there). Not shown by `stages`.
    #[serde(skip)]
    pub section: Option<&'static str>,
}

impl StageSpec {
    /// Stages this one cannot run without.
    pub fn upstream(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.reads_of(ReadKind::Required)
    }

    /// Stages whose output this one uses when it exists.
    /// Each once: `eval` reads a dozen files of `release-candidate`, and a stale one was
    /// warned about a dozen times.
    pub fn optional_upstream(&self) -> impl Iterator<Item = &'static str> + '_ {
        let mut seen: Vec<&'static str> = self.reads_of(ReadKind::Required).collect();
        self.reads.iter().filter(|r| r.kind != ReadKind::Required).map(|r| r.stage).filter(move |st| {
            if seen.contains(st) {
                false
            } else {
                seen.push(*st);
                true
            }
        })
    }

    fn reads_of(&self, kind: ReadKind) -> impl Iterator<Item = &'static str> + '_ {
        let mut seen = Vec::new();
        self.reads.iter().filter(move |r| r.kind == kind).map(|r| r.stage).filter(move |st| {
            if seen.contains(st) {
                false
            } else {
                seen.push(*st);
                true
            }
        })
    }

    /// Whether `file` (relative to the stage folder) is one of the declared writes.
    pub fn declares(&self, file: &str) -> bool {
        self.writes.iter().any(|w| match w.strip_suffix("/*") {
            Some(dir) => file.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/') && rest.len() > 1),
            None => *w == file,
        })
    }
}

/// A name a stage takes from the config (an LLM role, a prompt template, an MCP
/// server), with the config key that names it, so `check` can point at the key.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ConfigRef {
    pub key: String,
    pub name: String,
}

impl ConfigRef {
    pub fn new(key: impl Into<String>, name: impl Into<String>) -> Self {
        Self { key: key.into(), name: name.into() }
    }
}

/// A prompt template a stage renders, with example variables of the shape the
/// stage provides, so `check` can render it before anything runs.
#[derive(Debug, Clone, Serialize)]
pub struct PromptRef {
    pub key: String,
    pub template: String,
    #[serde(skip)]
    pub vars: Value,
}

impl PromptRef {
    pub fn new(key: impl Into<String>, template: impl Into<String>, vars: Value) -> Self {
        Self { key: key.into(), template: template.into(), vars }
    }
}

/// How a stage is configured, and which files outside `artifacts/` it reads:
/// together with its declared reads, everything its freshness depends on.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Input files outside `artifacts/` (absolute paths): snapshots, logs, sheets.
    pub inputs: Vec<PathBuf>,
    /// Hash of the config values the stage uses (its roles are added by the runner).
    pub config_hash: String,
}

/// Input files, hashed by the runner before the stage runs and read on demand,
/// so a large input is never held whole unless the stage asks for its bytes.
/// A file that changes between hashing and reading is an error: the manifest's
/// hashes are always of the bytes that were used.
pub struct Inputs {
    artifacts: PathBuf,
    files: BTreeMap<PathBuf, InputFile>,
}

struct InputFile {
    shown: String,
    hash: String,
    bytes: std::cell::OnceCell<Vec<u8>>,
}

impl Inputs {
    /// The whole contents of a declared input.
    pub fn bytes(&self, path: &Path) -> Result<&[u8]> {
        let f = self.file(path)?;
        if let Some(b) = f.bytes.get() {
            return Ok(b);
        }
        let bytes = std::fs::read(path).with_context(|| format!("cannot read input `{}`", f.shown))?;
        if store::sha256_hex(&bytes) != f.hash {
            bail!("input `{}` changed while the stage was running; run it again", f.shown);
        }
        Ok(f.bytes.get_or_init(|| bytes))
    }

    /// A declared input as a stream, for files too large to hold: the reader
    /// hashes what it reads and fails at the end if the file changed.
    pub fn open(&self, path: &Path) -> Result<HashedReader> {
        let f = self.file(path)?;
        let file = std::fs::File::open(path).with_context(|| format!("cannot read input `{}`", f.shown))?;
        Ok(HashedReader { inner: file, hasher: Sha256::new(), expected: f.hash.clone(), shown: f.shown.clone() })
    }

    /// The bytes of an upstream artifact this stage declared in `reads`.
    pub fn bytes_of<T: ?Sized>(&self, a: &Artifact<T>) -> Result<&[u8]> {
        self.bytes(&self.artifacts.join(a.stage).join(a.file))
    }

    /// Stream an upstream artifact (see [`Inputs::open`]).
    pub fn open_of<T: ?Sized>(&self, a: &Artifact<T>) -> Result<HashedReader> {
        self.open(&self.artifacts.join(a.stage).join(a.file))
    }

    /// Whether an optional read was present when the stage started.
    pub fn has<T: ?Sized>(&self, a: &Artifact<T>) -> bool {
        self.files.contains_key(&self.artifacts.join(a.stage).join(a.file))
    }

    /// Parse an upstream JSON artifact into its producer's type. The one error
    /// for a corrupt or foreign file names it and the command that remakes it.
    pub fn json<T: DeserializeOwned>(&self, a: &Artifact<T>) -> Result<T> {
        let path = self.artifacts.join(a.stage).join(a.file);
        let bytes = self.bytes(&path)?;
        serde_json::from_slice(bytes).map_err(|e| {
            let shown = self.files.get(&path).map(|f| f.shown.clone()).unwrap_or_else(|| path.display().to_string());
            crate::error::hinted(
                format!("`{shown}` is not a valid `{}` output: {e}", a.stage),
                format!("rerun `benchgen {} --force` to remake it", a.stage.replace('-', " ")),
            )
        })
    }

    fn file(&self, path: &Path) -> Result<&InputFile> {
        self.files
            .get(path)
            .with_context(|| format!("internal: `{}` was not declared as a stage input", path.display()))
    }
}

/// A reader over an input file that checks, at its end, that the bytes read are
/// the bytes the runner hashed.
pub struct HashedReader {
    inner: std::fs::File,
    hasher: Sha256,
    expected: String,
    shown: String,
}

impl std::io::Read for HashedReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.hasher.update(&buf[..n]);
        } else if !buf.is_empty() && !self.expected.is_empty() {
            let got = format!("sha256:{}", hex::encode(std::mem::take(&mut self.hasher).finalize()));
            if got != std::mem::take(&mut self.expected) {
                return Err(std::io::Error::other(format!(
                    "input `{}` changed while the stage was running; run it again",
                    self.shown
                )));
            }
        }
        Ok(n)
    }
}

/// What a stage produces. Small files are held in memory; large ones are
/// written straight into the stage's work folder with [`Output::create`]. Either
/// way nothing reaches `artifacts/<stage>/` until the runner commits.
#[derive(Default)]
pub struct Output {
    files: Vec<(String, Vec<u8>)>,
    streamed: Vec<(String, PathBuf)>,
    stream_dir: Option<PathBuf>,
    pub events: Vec<NewEvent>,
    pub counts: BTreeMap<String, Value>,
    /// Lines for the human summary.
    pub notes: Vec<String>,
}

impl Output {
    pub fn file(&mut self, rel: &str, bytes: Vec<u8>) {
        self.files.retain(|(r, _)| r != rel);
        self.streamed.retain(|(r, _)| r != rel);
        self.files.push((rel.to_string(), bytes));
    }

    pub fn json<T: Serialize + ?Sized>(&mut self, rel: &str, value: &T) -> Result<()> {
        self.file(rel, store::to_json_bytes(value)?);
        Ok(())
    }

    /// A large output file written as the stage goes, without holding it in
    /// memory. Call [`OutputFile::finish`] when done; an unfinished file is
    /// never committed.
    pub fn create(&mut self, rel: &str) -> Result<OutputFile> {
        let dir = self.stream_dir.clone().context("internal: streamed output outside a stage run")?;
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create `{}`", parent.display()))?;
        }
        let f = std::fs::File::create(&path).with_context(|| format!("cannot create `{}`", path.display()))?;
        self.files.retain(|(r, _)| r != rel);
        self.streamed.retain(|(r, _)| r != rel);
        self.streamed.push((rel.to_string(), path.clone()));
        Ok(OutputFile { writer: std::io::BufWriter::with_capacity(1 << 20, f), path })
    }

    pub fn count(&mut self, key: &str, value: impl Into<Value>) {
        self.counts.insert(key.to_string(), value.into());
    }

    /// Add several counts at once (e.g. an LLM client's).
    pub fn counts(&mut self, counts: BTreeMap<String, Value>) {
        self.counts.extend(counts);
    }

    /// Index the next event will have in this batch (for `Parent::Batch`).
    pub fn next_event(&self) -> usize {
        self.events.len()
    }

    pub fn event(&mut self, ev: NewEvent) -> usize {
        self.events.push(ev);
        self.events.len() - 1
    }

    fn file_names(&self) -> impl Iterator<Item = &str> {
        self.files.iter().map(|(r, _)| r.as_str()).chain(self.streamed.iter().map(|(r, _)| r.as_str()))
    }
}

/// A streamed output file (see [`Output::create`]).
pub struct OutputFile {
    writer: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
}

impl std::io::Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.writer.flush()
    }
}

impl OutputFile {
    /// Flush and fsync; the runner moves the file into place at commit.
    pub fn finish(self) -> Result<()> {
        let f = self.writer.into_inner().map_err(|e| e.into_error()).context("cannot flush a streamed output")?;
        f.sync_all().with_context(|| format!("cannot fsync `{}`", self.path.display()))?;
        Ok(())
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
    /// What the stage's per-item checkpoint is keyed by ([`checkpoint_key`]).
    checkpoint_key: String,
    /// The LLM roles it calls ([`Stage::roles`]).
    roles: Vec<String>,
    id: std::cell::OnceCell<i64>,
}

impl<'a> Ctx<'a> {
    /// A context for commands outside a stage run (status, explain, …).
    pub fn new(settings: &'a Settings, printer: &'a Printer) -> Self {
        Self { settings, printer, run: None }
    }

    /// The name of the stage being executed.
    pub fn stage(&self) -> Result<&'static str> {
        Ok(self.run.as_ref().context("internal: no stage is being executed")?.stage)
    }

    /// The LLM roles the stage being executed calls (none outside a stage run).
    pub fn roles(&self) -> &[String] {
        self.run.as_ref().map(|r| r.roles.as_slice()).unwrap_or_default()
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
        let (c, discarded) =
            store::Checkpoint::open_keyed(&work_dir(&self.settings.artifacts, h.stage), &h.checkpoint_key)?;
        if discarded > 0 {
            self.printer.info(&format!(
                "discarded {discarded} checkpointed item(s) of an interrupted `{}` run made with other settings, inputs or prompts",
                h.stage
            ));
        }
        Ok(c)
    }

    /// The manifest of a stage this one declared with [`Read::manifest`].
    pub fn manifest_of(&self, stage: &str) -> Option<Manifest> {
        Manifest::load(&self.settings.artifacts, stage).ok().flatten()
    }
}

/// `artifacts/.work/<stage>`: checkpoints and streamed outputs of a stage that
/// has not committed yet.
pub fn work_dir(artifacts: &Path, stage: &str) -> PathBuf {
    artifacts.join(".work").join(stage)
}

/// A pipeline stage: a declared spec plus a plain `run`.
pub trait Stage: Send + Sync {
    fn spec(&self) -> &'static StageSpec;
    /// The prose of its command's `--help` (paragraphs split by blank lines; the lines of
    /// one are joined). The command's `about` and its "Reads:"/"Writes:" lines come from
    /// the spec.
    fn help(&self) -> &'static str {
        ""
    }
    /// Work before it is planned, whether it runs alone or under `benchgen run` (e.g.
    /// bringing a file it reads up to date), so both see the same inputs.
    fn prepare(&self, _settings: &Settings, _printer: &Printer) -> Result<()> {
        Ok(())
    }
    /// After its own command ran it (not under `run`), e.g. files made from its output
    /// for people, with their info or warning lines.
    fn after_command(&self, _settings: &Settings, _printer: &Printer) {}
    /// Whether `benchgen run` includes it under this config (it can always run alone):
    /// by default, whether its spec's section is on.
    fn enabled(&self, settings: &Settings) -> bool {
        self.spec().section.is_none_or(|s| settings.section_on(s))
    }
    /// LLM roles it calls, with the config keys that name them.
    fn roles(&self, _settings: &Settings) -> Vec<ConfigRef> {
        Vec::new()
    }
    /// Those of its roles whose requests are the turns of a conversation (an agent's next
    /// turn, a simulated user's reply), each sent once the one before is answered: in batch
    /// mode each turn waits for a batch, which `check` warns of.
    fn turn_roles(&self, _settings: &Settings) -> Vec<ConfigRef> {
        Vec::new()
    }
    /// Prompt templates it renders, with example variables.
    fn prompts(&self, _settings: &Settings) -> Vec<PromptRef> {
        Vec::new()
    }
    /// MCP servers it connects to, with the config keys that name them.
    fn servers(&self, _settings: &Settings) -> Vec<ConfigRef> {
        Vec::new()
    }
    /// The LLM exchanges its first run makes, per role: upper bounds from the config, the
    /// raw inputs it names and upstream artifacts already made (`check` prints them). Never
    /// fails: an input it cannot read gives a looser bound or says what is unknown.
    fn estimate(&self, _settings: &Settings) -> Vec<Estimate> {
        Vec::new()
    }
    /// Range checks of its own settings (reported with every other problem by `check`).
    fn check(&self, _settings: &Settings, _problems: &mut Vec<Problem>) {}
    /// `benchgen explain ID` for ids this stage answers for before every other explainer,
    /// [`Stage::explain_subject`] too (a released sample); `None`: not one of its ids.
    fn explain(&self, _settings: &Settings, _id: &str) -> Result<Option<crate::ledger::Explanation>> {
        Ok(None)
    }
    /// One line for `benchgen explain` about an event of a kind this stage's family records;
    /// `None`: not one of its kinds (one stage of each family answers for the family).
    fn describe_event(&self, _kind: &str, _payload: &Value) -> Option<String> {
        None
    }
    /// `benchgen explain ID` for an id its family files ledger events under (`log:<id>`),
    /// from those events in `runs` (the runs behind the current artifacts); `None`: not one
    /// of its family's ids (one stage of each family answers for the family). An id of its
    /// family with no event there is an error saying where such ids are. `explain` asks the
    /// stage list from its end, so a family's prefixed ids come to it before the first
    /// family's (`filter`: tools, servers and any other subject) are asked for.
    fn explain_subject(
        &self,
        _ledger: &Ledger,
        _runs: &[i64],
        _id: &str,
    ) -> Result<Option<crate::ledger::Explanation>> {
        Ok(None)
    }
    /// What the stage writes outside `artifacts/` (the published release folder): a run
    /// is stale when one is missing.
    fn external_outputs(&self, _settings: &Settings) -> Vec<PathBuf> {
        Vec::new()
    }
    fn plan(&self, settings: &Settings) -> Result<Plan>;
    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()>;
}

/// Everything a run of `stage` depends on: declared reads that exist (or are
/// required), the plan's own inputs, prompt files, and the config hash with
/// the stage's LLM roles folded in.
struct Resolved {
    inputs: Vec<PathBuf>,
    /// Template names (each resolves to the project's override or the built-in).
    prompts: Vec<String>,
    config_hash: String,
}

fn resolve(stage: &dyn Stage, settings: &Settings) -> Result<Resolved> {
    let spec = stage.spec();
    let plan = stage.plan(settings)?;
    let mut inputs = Vec::new();
    for r in spec.reads {
        let p = settings.artifacts.join(r.stage).join(r.file);
        match r.kind {
            ReadKind::Required => inputs.push(p),
            ReadKind::Optional if p.exists() => inputs.push(p),
            _ => {}
        }
    }
    inputs.extend(plan.inputs);
    let prompts = stage.prompts(settings).into_iter().map(|p| p.template).collect();
    let roles = stage.roles(settings);
    let config_hash = if roles.is_empty() {
        plan.config_hash
    } else {
        let mut hashes = BTreeMap::new();
        for r in &roles {
            let h = (settings.hashes.role)(settings, &r.name).with_context(|| format!("`{}` names it", r.key))?;
            hashes.insert(r.key.clone(), h);
        }
        crate::settings::section_hash(&serde_json::json!({"stage": plan.config_hash, "roles": hashes}))?
    };
    Ok(Resolved { inputs, prompts, config_hash })
}

/// The inputs `stage` would read if it ran now, hashed as a run hashes them: for a look
/// at them outside a run that writes nothing (`benchgen status` applies the release's eval
/// audit to the candidate with them).
pub fn inputs_now(stage: &dyn Stage, settings: &Settings) -> Result<Inputs> {
    let plan = resolve(stage, settings)?;
    let (_, files) = hash_inputs(settings, &plan.inputs)?;
    Ok(Inputs { artifacts: settings.artifacts.clone(), files })
}

/// The config hash a run of `stage` is recorded under (its roles folded in): the pinned demo
/// hashes of `stages.rs`'s tests, which name every stage (this file names none).
#[cfg(test)]
pub(crate) fn config_hash(stage: &dyn Stage, settings: &Settings) -> Result<String> {
    resolve(stage, settings).map(|r| r.config_hash)
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

/// What a stage's per-item checkpoint is keyed by: its code and stage versions, config
/// hash, input and prompt hashes. An interrupted run resumes its items only under the same
/// key; with another (a changed setting, input or prompt, or a new benchgen) they are made
/// anew, their LLM exchanges still answered from the ledger where the requests are the same.
fn checkpoint_key(spec: &StageSpec, config_hash: &str, inputs: &Hashes, prompts: &Hashes) -> String {
    let text = serde_json::json!({"code": CODE_VERSION, "stage": spec.version, "config": config_hash,
                                  "inputs": inputs, "prompts": prompts});
    store::sha256_hex(text.to_string().as_bytes())
}

fn hash_inputs(settings: &Settings, paths: &[PathBuf]) -> Result<(Hashes, BTreeMap<PathBuf, InputFile>)> {
    let mut hashes = BTreeMap::new();
    let mut files = BTreeMap::new();
    for p in paths {
        let shown = settings.display_path(p);
        let hash = store::hash_file(p).map_err(|e| {
            crate::error::hinted(
                format!("cannot read input `{shown}`: {}", e.root_cause()),
                "check the path in the pipeline config, or run the stage that produces it",
            )
        })?;
        hashes.insert(shown.clone(), hash.clone());
        files.insert(p.clone(), InputFile { shown, hash, bytes: Default::default() });
    }
    Ok((hashes, files))
}

/// Manifest keys and hashes of the templates a stage uses: an override file by its path
/// (as before built-ins existed, so existing manifests stay fresh), a built-in as
/// `builtin:<name>`; the hash is the text's either way.
fn hash_prompts(settings: &Settings, names: &[String]) -> Result<Hashes> {
    let mut hashes = BTreeMap::new();
    for name in names {
        let (shown, hash) = (settings.hashes.prompt)(settings, name).map_err(|e| {
            crate::error::hinted(
                e,
                "`benchgen prompts list` names the built-in templates; `benchgen check` checks them all",
            )
        })?;
        hashes.insert(shown, hash);
    }
    Ok(hashes)
}

/// Manifest prompt entries keyed by what names the template for a person: `builtin:NAME`
/// stays, an override file `…/NAME.md` becomes `NAME (path)`; both compare as NAME.
fn prompts_by_name(m: &Hashes) -> Hashes {
    m.iter()
        .map(|(k, v)| {
            let name = match k.strip_prefix("builtin:") {
                Some(n) => n,
                None => k.rsplit('/').next().unwrap_or(k).trim_end_matches(".md"),
            };
            (name.to_string(), v.clone())
        })
        .collect()
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
    let spec = stage.spec();
    let manifest = match Manifest::load(&settings.artifacts, spec.name) {
        Ok(Some(m)) => m,
        Ok(None) => return Freshness::Missing("never run".into()),
        Err(e) => return Freshness::Stale(format!("{e:#}")),
    };
    if let Some(up) = spec.upstream().find(|u| upstream.get(*u).is_some_and(|f| !f.is_done())) {
        return Freshness::Stale(format!("upstream `{up}` is not done"));
    }
    if let Some(up) =
        spec.optional_upstream().find(|u| upstream.get(*u).is_some_and(|f| matches!(f, Freshness::Stale(_))))
    {
        return Freshness::Stale(format!("upstream `{up}` is stale"));
    }
    if manifest.code_version != CODE_VERSION || manifest.stage_version != spec.version {
        return Freshness::Stale(format!(
            "benchgen changed: made by {} (stage v{}), now {} (stage v{})",
            manifest.code_version, manifest.stage_version, CODE_VERSION, spec.version
        ));
    }
    let plan = match resolve(stage, settings) {
        Ok(p) => p,
        Err(e) => return Freshness::Stale(format!("{e:#}")),
    };
    if plan.config_hash != manifest.config_hash {
        return Freshness::Stale(format!("its settings in `{}` changed", settings.display_path(&settings.config_path)));
    }
    let mut now = BTreeMap::new();
    for p in &plan.inputs {
        let key = settings.display_path(p);
        match store::hash_file(p) {
            Ok(h) => {
                now.insert(key, h);
            }
            Err(_) => return Freshness::Stale(format!("input `{key}` is missing")),
        }
    }
    if let Some(reason) = diff_maps("input", &manifest.inputs, &now) {
        return Freshness::Stale(reason);
    }
    match hash_prompts(settings, &plan.prompts) {
        Ok(now) => {
            // By template name: the same text moving between the built-in and an override
            // file (`benchgen prompts export`) changes the key, not what the stage made.
            let (old_n, now_n) = (prompts_by_name(&manifest.prompts), prompts_by_name(&now));
            if let Some(reason) = diff_maps("prompt", &old_n, &now_n) {
                return Freshness::Stale(reason);
            }
        }
        Err(e) => return Freshness::Stale(format!("{e:#}")),
    }
    let dir = settings.artifacts.join(spec.name);
    for (file, hash) in &manifest.outputs {
        match store::hash_file(&dir.join(file)) {
            Ok(h) if &h == hash => {}
            Ok(_) => {
                return Freshness::Stale(format!("output `{file}` was modified after the run"));
            }
            Err(_) => return Freshness::Stale(format!("output `{file}` is missing")),
        }
    }
    if let Some(p) = stage.external_outputs(settings).into_iter().find(|p| !p.exists()) {
        return Freshness::Stale(format!("`{}` is missing", settings.display_path(&p)));
    }
    Freshness::Done
}

/// What became of a stage in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// It ran and committed new output.
    Ran,
    /// It was up to date.
    Skipped,
}

/// The result of running (or skipping) one stage.
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    pub stage: String,
    pub status: RunStatus,
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
    execute_noted(settings, printer, stage, force, upstream, &|| None)
}

/// [`execute`], with `note` said in brackets after "running `STAGE` …" when the stage runs
/// (`run`: about how many LLM exchanges and how long).
pub fn execute_noted(
    settings: &Settings,
    printer: &Printer,
    stage: &dyn Stage,
    force: bool,
    upstream: &BTreeMap<String, Freshness>,
    note: &dyn Fn() -> Option<String>,
) -> Result<StageReport> {
    crate::error::clear_disk_full();
    execute_inner(settings, printer, stage, force, upstream, note).map_err(|e| {
        match crate::error::disk_full_behind(&e) {
            // A full disk is the cause whatever failed on top of it (an LLM call recording its
            // exchange, a checkpoint, the commit): say so first, with the stage and the file.
            Some(df) => e.context(format!(
                "disk full in stage `{}`: cannot write `{}` ({}); its previous artifacts were left as they were",
                stage.spec().name,
                df.file,
                df.cause
            )),
            None => e,
        }
    })
}

/// A failed stage run, named (its output was not committed).
fn stage_failed(spec: &StageSpec, e: anyhow::Error) -> anyhow::Error {
    if crate::error::disk_full_behind(&e).is_some() {
        return e; // [`execute`] names the stage and the disk
    }
    e.context(format!("`{}` failed; its previous artifacts were left as they were", spec.command))
}

/// "running `STAGE` …", with `note` in brackets when there is one (`run` only).
fn announce(printer: &Printer, spec: &StageSpec, note: &dyn Fn() -> Option<String>) {
    if printer.announce {
        match note() {
            Some(n) => printer.info(&format!("running `{}` … ({n})", spec.command)),
            None => printer.info(&format!("running `{}` …", spec.command)),
        }
    }
}

fn execute_inner(
    settings: &Settings,
    printer: &Printer,
    stage: &dyn Stage,
    force: bool,
    upstream: &BTreeMap<String, Freshness>,
    note: &dyn Fn() -> Option<String>,
) -> Result<StageReport> {
    let spec = stage.spec();
    recover_if_idle(settings, printer)?;
    check_upstream(spec, printer, upstream)?;
    if !force && freshness(stage, settings, upstream).is_done() {
        return skipped(settings, spec);
    }
    // Said only here, past the freshness check: a stage that is up to date never "runs".
    announce(printer, spec, note);
    let plan = resolve(stage, settings)?;
    let roles = stage.roles(settings).into_iter().map(|r| r.name).collect();
    let (input_hashes, files) = hash_inputs(settings, &plan.inputs)?;
    let prompt_hashes = hash_prompts(settings, &plan.prompts)?;
    let checkpoint_key = checkpoint_key(spec, &plan.config_hash, &input_hashes, &prompt_hashes);
    let ctx = Ctx {
        settings,
        printer,
        run: Some(RunHandle {
            stage: spec.name,
            config_hash: plan.config_hash.clone(),
            checkpoint_key,
            roles,
            id: Default::default(),
        }),
    };
    let inputs = Inputs { artifacts: settings.artifacts.clone(), files };
    let started_at = crate::ledger::now();
    let clock = Instant::now();
    let stream_dir = work_dir(&settings.artifacts, spec.name).join("out");
    if stream_dir.exists() {
        // Streamed files of a killed run are incomplete: never reuse them.
        std::fs::remove_dir_all(&stream_dir).with_context(|| format!("cannot clear `{}`", stream_dir.display()))?;
    }
    let mut out = Output { stream_dir: Some(stream_dir.clone()), ..Default::default() };
    let result = stage.run(&ctx, &inputs, &mut out).and_then(|()| match out.file_names().find(|f| !spec.declares(f)) {
        Some(f) => Err(anyhow::anyhow!("internal: `{}` wrote `{f}`, which its spec does not declare", spec.name)),
        None => Ok(()),
    });
    if let Err(e) = result {
        if let Some(id) = ctx.run.as_ref().and_then(|h| h.id.get()) {
            let _ = Ledger::open(&settings.artifacts).and_then(|l| l.finish_run(*id, "failed"));
        }
        let _ = std::fs::remove_dir_all(&stream_dir);
        return Err(stage_failed(spec, e));
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
            ledger.append(id, spec.name, &out.events)?;
            ledger.finish_run(id, "ok")?;
            id
        }
        None => ledger.record_run(spec.name, &plan.config_hash, CODE_VERSION, &out.events)?.0,
    };
    let mut staging = StagingDir::create(&settings.artifacts, spec.name)?;
    stage_outputs(&mut staging, &out, &settings.artifacts, &stream_dir)?;
    let duration_ms = clock.elapsed().as_millis() as u64;
    let manifest = Manifest {
        stage: spec.name.into(),
        stage_version: spec.version,
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
    // Cleared without its key: nothing is written only to be removed.
    store::Checkpoint::open(&work_dir(&settings.artifacts, spec.name))?.clear()?;
    Ok(StageReport {
        stage: spec.name.into(),
        status: RunStatus::Ran,
        run_id: Some(run_id),
        counts: out.counts,
        notes: out.notes,
        duration_ms,
    })
}

/// Run alone, a stage needs its upstream output to exist; stale upstream output is used
/// with a warning (`benchgen run` brings it up to date first).
fn check_upstream(spec: &StageSpec, printer: &Printer, upstream: &BTreeMap<String, Freshness>) -> Result<()> {
    for up in spec.upstream() {
        if let Some(Freshness::Missing(_)) = upstream.get(up) {
            return Err(crate::error::hinted(
                format!("`{}` needs the output of `{up}`, which has not been produced", spec.command),
                "run `benchgen run` to bring every stage up to date, or run the upstream stage first",
            ));
        }
    }
    for up in spec.upstream().chain(spec.optional_upstream()) {
        if let Some(Freshness::Stale(why)) = upstream.get(up) {
            printer.warn(&format!("`{up}` is stale ({why}); `{}` reads its last complete output", spec.command))
        }
    }
    Ok(())
}

/// The report of a stage that is up to date: its last run's counts, not run again.
fn skipped(settings: &Settings, spec: &StageSpec) -> Result<StageReport> {
    let m = Manifest::load(&settings.artifacts, spec.name)?.context("manifest vanished")?;
    Ok(StageReport {
        stage: spec.name.into(),
        status: RunStatus::Skipped,
        run_id: Some(m.run_id),
        counts: m.counts,
        notes: vec!["up to date (use --force to rerun)".into()],
        duration_ms: 0,
    })
}

/// Write the run's files into its staging folder and adopt the streamed ones; when that
/// fails, remove both.
fn stage_outputs(staging: &mut StagingDir, out: &Output, artifacts: &Path, stream_dir: &Path) -> Result<()> {
    let staged = (|| -> Result<()> {
        for (rel, bytes) in &out.files {
            staging.write(rel, bytes)?;
        }
        for (rel, path) in &out.streamed {
            staging.adopt(rel, path)?;
        }
        Ok(())
    })();
    if let Err(e) = staged {
        // A write that failed (a full disk) leaves no staging folder for the next run to
        // warn about; the ledger run stays unreferenced, as after a crash.
        let _ = std::fs::remove_dir_all(staging.path());
        let _ = std::fs::remove_dir(artifacts.join(".staging"));
        let _ = std::fs::remove_dir_all(stream_dir);
        return Err(e);
    }
    Ok(())
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
pub fn lock_artifacts(artifacts: &Path) -> Result<std::fs::File> {
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
pub(crate) mod tests {
    use super::*;

    /// A stage that copies a large input to its output through the streaming
    /// path (test double; the same shape runs in `benches/stream.rs`).
    struct TestOnlyCopy {
        input: PathBuf,
    }

    static COPY: StageSpec = StageSpec {
        name: "copy",
        command: "copy",
        version: 1,
        about: "test double",
        reads: &[],
        writes: &["out/copy.bin"],
        section: None,
    };

    impl Stage for TestOnlyCopy {
        fn spec(&self) -> &'static StageSpec {
            &COPY
        }
        fn plan(&self, _: &Settings) -> Result<Plan> {
            Ok(Plan { inputs: vec![self.input.clone()], config_hash: "h".into() })
        }
        fn run(&self, _ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
            let mut r = inputs.open(&self.input)?;
            let mut w = out.create("out/copy.bin")?;
            std::io::copy(&mut r, &mut w)?;
            w.finish()
        }
    }

    /// A project with an empty config: only the always-present sections (also the
    /// project of `stages.rs`'s tests, which may import this file; this file names no stage).
    pub(crate) fn project() -> (tempfile::TempDir, Settings) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("pipeline/t.toml");
        std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
        std::fs::write(&cfg, "").unwrap();
        let s = Settings::load(&cfg).unwrap();
        (dir, s)
    }

    #[test]
    fn streamed_input_and_output_are_hashed_and_committed() {
        let (dir, s) = project();
        let input = dir.path().join("big.bin");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&input, &data).unwrap();
        let stage = TestOnlyCopy { input: input.clone() };
        let printer = Printer::default();
        let r = execute(&s, &printer, &stage, false, &BTreeMap::new()).unwrap();
        assert_eq!(r.status, RunStatus::Ran);
        let out = s.artifacts.join("copy/out/copy.bin");
        assert_eq!(std::fs::read(&out).unwrap(), data);
        let m = Manifest::load(&s.artifacts, "copy").unwrap().unwrap();
        assert_eq!(m.outputs["out/copy.bin"], store::sha256_hex(&data));
        assert_eq!(m.inputs["big.bin"], store::sha256_hex(&data));
        assert!(!work_dir(&s.artifacts, "copy").exists(), "the work folder is cleared after commit");
        // Fresh now; skipped without --force.
        let r = execute(&s, &printer, &stage, false, &BTreeMap::new()).unwrap();
        assert_eq!(r.status, RunStatus::Skipped);
    }

    #[test]
    fn a_stage_writing_an_undeclared_file_fails_and_commits_nothing() {
        struct TestOnlyStray;
        impl Stage for TestOnlyStray {
            fn spec(&self) -> &'static StageSpec {
                &COPY
            }
            fn plan(&self, _: &Settings) -> Result<Plan> {
                Ok(Plan { inputs: vec![], config_hash: "h".into() })
            }
            fn run(&self, _ctx: &Ctx, _inputs: &Inputs, out: &mut Output) -> Result<()> {
                out.file("stray.json", b"{}".to_vec());
                Ok(())
            }
        }
        let (_dir, s) = project();
        let err = execute(&s, &Printer::default(), &TestOnlyStray, false, &BTreeMap::new()).unwrap_err();
        assert!(format!("{err:#}").contains("wrote `stray.json`, which its spec does not declare"), "{err:#}");
        assert!(!s.artifacts.join("copy").exists());
    }

    #[test]
    fn a_hashed_reader_notices_a_file_changed_under_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"before").unwrap();
        let (_, files) = {
            let (_d, s) = project();
            hash_inputs(&s, std::slice::from_ref(&p)).unwrap()
        };
        let inputs = Inputs { artifacts: dir.path().to_path_buf(), files };
        std::fs::write(&p, b"after!").unwrap();
        let mut text = String::new();
        let err = std::io::Read::read_to_string(&mut inputs.open(&p).unwrap(), &mut text).unwrap_err();
        assert!(err.to_string().contains("changed while the stage was running"), "{err}");
        assert!(inputs.bytes(&p).is_err());
    }

    #[test]
    fn diff_names_the_changed_input() {
        let a: BTreeMap<_, _> = [("x".to_string(), "1".to_string())].into();
        let b: BTreeMap<_, _> = [("x".to_string(), "2".to_string())].into();
        assert_eq!(diff_maps("input", &a, &b).unwrap(), "input `x` changed");
        assert_eq!(diff_maps("input", &a, &BTreeMap::new()).unwrap(), "input `x` is no longer used");
        assert!(diff_maps("input", &a, &a).is_none());
    }
}
