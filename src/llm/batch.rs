//! LLM fan-out for stages: the one place that runs many LLM work items, so every LLM
//! stage is "prompt + typed answer + record" and nothing else.
//!
//! A stage lists its work items as `(key, input)` pairs and gives one async closure
//! that turns an input into a serialisable value, calling the model through the
//! [`Item`] handle as often as it needs (topdown writes requests, then selects per
//! request). [`Batch`] does the rest:
//!
//! * **Runtime and concurrency**: it builds the tokio runtime ([`runtime`], the one
//!   place that does) and keeps at most `concurrency` items and at most `concurrency`
//!   LLM requests in flight (the role's `max_concurrency` applies beneath).
//! * **Checkpoint and resume**: each finished item is appended to the stage's
//!   checkpoint (`artifacts/.work/<stage>/items.jsonl`, [`crate::store::Checkpoint`])
//!   as `{value, llm}` before the next one is reported; a rerun after a kill takes
//!   finished items from there and asks the model nothing for them. The fsyncs are
//!   grouped: one runs at a time off the polling task and covers every line written
//!   before it started, so the items in flight never wait for the disk (a per-item
//!   fsync serialised them). A killed process loses no line; an OS crash may lose the
//!   last few, whose items are redone with their exchanges answered from the ledger
//!   (never paid twice). Every line is durable before [`Batch::run`] returns.
//! * **Counts from items, not from the process**: `llm` is the item's own
//!   [`LlmCounts`] (exchanges, failures, tokens), so the manifest counts of a resumed
//!   run are the sum over all items, exactly those of an uninterrupted run.
//! * **Failure policy**: an item-level failure (an answer still invalid after
//!   re-asks, [`LlmError::is_item_level`]) fails that item only; the others go on.
//!   When all are done, the stage fails if the failed share exceeds
//!   `max_failed_share` (default 0: any failure fails the stage), naming the counts
//!   and every failed item; failed items are never checkpointed, so a rerun retries
//!   only them (from the ledger cache when the answer was recorded). Below the
//!   threshold, [`Batch::finish`] records them in `failed.json` with their reasons.
//!   Any other failure (endpoint down, replay miss, Ctrl-C, bad input) stops the
//!   stage at once; finished items stay checkpointed.
//! * **Ledger linking**: every [`Reply`] names its exchange by request hash
//!   ([`Reply::exchange`]), stable across reruns; store it in the item's value and
//!   resolve it to a parent event with [`Batch::exchange_event`] when recording.
//!
//! ```ignore
//! let opts = BatchOptions::new("efs-verify", "verify", "pairs")
//!     .concurrency(v.concurrency)
//!     .max_failed_share(v.max_failed_share, "efs.verify.max_failed_share")
//!     .fail_point("efs_verify_pair");
//! let mut batch = Batch::new(ctx, opts)?;
//! let role = &v.role; // closures borrow; inputs are moved into each item
//! let done = batch.run(items, |prompt: Prompt, llm: Item| async move {
//!     let reply = llm.typed::<PairJudgement>(role, &prompt).await?;
//!     Ok(Record { equivalent: reply.value.equivalent, exchange: reply.exchange })
//! })?;
//! batch.finish(out)?; // LLM counts, the summary line, failed.json when some failed
//! for (key, rec) in &done.values { /* build the artifact; link events with batch.exchange_event */ }
//! ```
//!
//! See `docs/llm-batch.md` for the failure policy and resume semantics in full.

// LlmError is returned once per call; its size does not matter (see `llm/mod.rs`).
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use tokio::sync::Semaphore;

use super::{ChatMessage, ChatTurn, LlmClient, LlmCounts, LlmError, Prompt, Reply, ToolSpec};
use crate::ledger::Ledger;
use crate::printer::Printer;
use crate::settings::Settings;
use crate::stage::{Ctx, Output};
use crate::store::Checkpoint;

/// The file [`Batch::finish`] writes when items failed within `max_failed_share`
/// (declare it in the stage spec's `writes`; it exists only when something failed).
pub const FAILED_FILE: &str = "failed.json";

/// The async runtime of a command that talks to models: two worker threads (the
/// work is I/O; the machine is shared), timers and I/O enabled.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("cannot start tokio")
}

/// Check a `max_failed_share` value: a number from 0 to 1 (NaN is refused).
pub fn check_share(key: &str, value: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&value) {
        bail!("`{key}` must be a number from 0 to 1 (the share of items allowed to fail), not {value}");
    }
    Ok(())
}

/// Serde `deserialize_with` for `max_failed_share` settings: refuses NaN and values
/// outside 0..=1 when the config is loaded (the TOML error names the line and key).
pub fn de_share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = f64::deserialize(d)?;
    if !(0.0..=1.0).contains(&v) {
        return Err(serde::de::Error::custom(format!(
            "max_failed_share must be a number from 0 to 1 (the share of items allowed to fail), not {v}"
        )));
    }
    Ok(v)
}

/// For `skip_serializing_if`: the default share (0) stays out of config hashes, so
/// adding the setting left existing stages fresh.
pub fn is_zero_share(v: &f64) -> bool {
    *v == 0.0
}

/// How a stage runs its items.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    /// Stage name (the LLM client records under it).
    pub stage: &'static str,
    /// Progress-bar label.
    pub label: &'static str,
    /// What the items are, plural, for messages ("pairs", "sets").
    pub noun: &'static str,
    /// Items, and LLM requests, in flight at once; 0 = no bound of the stage's own
    /// (the roles' `max_concurrency` still applies). Not applied when a role runs in
    /// `mode = "batch"`: all items are in flight, so each round is one batch job.
    pub concurrency: usize,
    /// Share of items (0..=1) allowed to fail before the stage fails.
    pub max_failed_share: f64,
    /// Config key of `max_failed_share`, named in messages.
    pub share_key: &'static str,
    /// Test hook reached after each item's checkpoint (see [`crate::store::fail_point`]).
    pub fail_point: &'static str,
}

impl BatchOptions {
    pub fn new(stage: &'static str, label: &'static str, noun: &'static str) -> Self {
        Self {
            stage,
            label,
            noun,
            concurrency: 0,
            max_failed_share: 0.0,
            share_key: "max_failed_share",
            fail_point: "llm_batch_item",
        }
    }
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }
    pub fn max_failed_share(mut self, share: f64, key: &'static str) -> Self {
        self.max_failed_share = share;
        self.share_key = key;
        self
    }
    pub fn fail_point(mut self, name: &'static str) -> Self {
        self.fail_point = name;
        self
    }
}

/// Why one item has no value.
#[derive(Debug)]
pub enum ItemError {
    /// This item failed; the others go on (counted against `max_failed_share`).
    Failed(String),
    /// Stop the stage now.
    Fatal(anyhow::Error),
}

impl From<LlmError> for ItemError {
    fn from(e: LlmError) -> Self {
        if e.is_item_level() { ItemError::Failed(e.to_string()) } else { ItemError::Fatal(anyhow::Error::new(e)) }
    }
}

impl From<anyhow::Error> for ItemError {
    fn from(e: anyhow::Error) -> Self {
        ItemError::Fatal(e)
    }
}

/// Results of several calls of one item (run together with `join_all`, so each is
/// complete and the item's counts do not depend on timing): all values, or the
/// item's failure naming every failed call; a fatal error wins.
pub fn all<T>(results: Vec<Result<T, LlmError>>) -> Result<Vec<T>, ItemError> {
    let mut values = Vec::with_capacity(results.len());
    let mut failed = Vec::new();
    for r in results {
        match r {
            Ok(v) => values.push(v),
            Err(e) if e.is_item_level() => failed.push(e.to_string()),
            Err(e) => return Err(ItemError::Fatal(anyhow::Error::new(e))),
        }
    }
    if failed.is_empty() { Ok(values) } else { Err(ItemError::Failed(failed.join("; "))) }
}

/// The model, as one item sees it: calls are recorded under the item's key, bounded
/// by the batch's concurrency, and counted for the item's checkpoint.
pub struct Item {
    key: String,
    client: LlmClient,
    calls: Arc<Semaphore>,
}

impl Item {
    /// The item's key (also the ledger subject of its exchanges).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Typed answer (see [`LlmClient::typed`]), recorded under the item's key.
    pub async fn typed<T: DeserializeOwned + schemars::JsonSchema + 'static>(
        &self,
        role: &str,
        prompt: &Prompt,
    ) -> Result<Reply<T>, LlmError> {
        let _p = self.calls.acquire().await;
        self.client.typed(role, prompt, &self.key).await
    }

    /// Typed answer with a check beyond the schema (see [`LlmClient::typed_checked`]).
    pub async fn typed_checked<T: DeserializeOwned + schemars::JsonSchema + 'static>(
        &self,
        role: &str,
        prompt: &Prompt,
        check: impl Fn(&T) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<Reply<T>, LlmError> {
        let _p = self.calls.acquire().await;
        self.client.typed_checked(role, prompt, &self.key, check).await
    }

    /// Typed answer against a schema built at run time (see [`LlmClient::typed_schema`]),
    /// recorded under the item's key or, with `part`, under `<key>:<part>`.
    pub async fn typed_schema<T: DeserializeOwned + 'static>(
        &self,
        role: &str,
        prompt: &Prompt,
        part: Option<&str>,
        (name, schema): (&str, serde_json::Value),
        check: impl Fn(&T) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<Reply<T>, LlmError> {
        let subject = match part {
            Some(part) => format!("{}:{part}", self.key),
            None => self.key.clone(),
        };
        let _p = self.calls.acquire().await;
        self.client.typed_schema(role, prompt, &subject, name, schema, check).await
    }

    /// A typed answer as `answer` states it (see [`super::Answer`]), recorded under the
    /// item's key or, with `part`, under `<key>:<part>`.
    pub async fn ask<T: DeserializeOwned>(
        &self,
        role: &str,
        prompt: &Prompt,
        part: Option<&str>,
        answer: &super::Answer<T>,
    ) -> Result<Reply<T>, LlmError> {
        let subject = match part {
            Some(part) => format!("{}:{part}", self.key),
            None => self.key.clone(),
        };
        let _p = self.calls.acquire().await;
        self.client.ask(role, prompt, &subject, answer).await
    }

    /// Typed answer recorded under `<key>:<part>` (for items that ask several things).
    pub async fn typed_as<T: DeserializeOwned + schemars::JsonSchema + 'static>(
        &self,
        role: &str,
        prompt: &Prompt,
        part: &str,
    ) -> Result<Reply<T>, LlmError> {
        self.typed_checked_as(role, prompt, part, |_: &T| Ok(())).await
    }

    /// [`Self::typed_as`] with a check beyond the schema (see [`LlmClient::typed_checked`]).
    pub async fn typed_checked_as<T: DeserializeOwned + schemars::JsonSchema + 'static>(
        &self,
        role: &str,
        prompt: &Prompt,
        part: &str,
        check: impl Fn(&T) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<Reply<T>, LlmError> {
        let _p = self.calls.acquire().await;
        self.client.typed_checked(role, prompt, &format!("{}:{part}", self.key), check).await
    }

    /// Typed answer recorded under another ledger subject (e.g. the bare tool id that
    /// `benchgen explain` looks up, when the key carries a kind prefix).
    pub async fn typed_for<T: DeserializeOwned + schemars::JsonSchema + 'static>(
        &self,
        role: &str,
        prompt: &Prompt,
        subject: &str,
    ) -> Result<Reply<T>, LlmError> {
        let _p = self.calls.acquire().await;
        self.client.typed(role, prompt, subject).await
    }

    /// Plain text answer (see [`LlmClient::text`]).
    pub async fn text(&self, role: &str, prompt: &Prompt) -> Result<Reply<String>, LlmError> {
        let _p = self.calls.acquire().await;
        self.client.text(role, prompt, &self.key).await
    }

    /// One tool-calling turn (see [`LlmClient::chat`]).
    pub async fn chat(
        &self,
        role: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
    ) -> Result<Reply<ChatTurn>, LlmError> {
        let _p = self.calls.acquire().await;
        self.client.chat(role, messages, tools, &self.key).await
    }

    /// One tool-calling turn with the request's sampling parameters set (see [`LlmClient::chat_seeded`]).
    pub async fn chat_seeded(
        &self,
        role: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        turn: crate::llm::TurnParams,
    ) -> Result<Reply<ChatTurn>, LlmError> {
        let _p = self.calls.acquire().await;
        self.client.chat_seeded(role, messages, tools, &self.key, turn).await
    }
}

/// One item that failed, with the reason (the `llm.failure` event is in the ledger).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FailedItem {
    pub item: String,
    pub reason: String,
}

/// What [`Batch::run`] produced.
#[derive(Debug)]
pub struct Done<T> {
    /// Every finished item's value (this run's and resumed ones), by key.
    pub values: BTreeMap<String, T>,
    /// Items that failed at item level (within `max_failed_share`), sorted by key.
    pub failed: Vec<FailedItem>,
    /// Items taken from the checkpoint of an interrupted run.
    pub resumed: usize,
}

/// The checkpoint line of one item.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record<T> {
    value: T,
    llm: LlmCounts,
}

/// The checkpoint's group commit: at most one fsync in flight (on tokio's blocking
/// pool); lines written while it runs are covered by the next one.
#[derive(Default)]
struct GroupSync {
    running: Option<tokio::task::JoinHandle<Result<()>>>,
    /// Lines written since the running (or last) fsync started.
    dirty: bool,
}

impl GroupSync {
    fn running(&self) -> bool {
        self.running.is_some()
    }

    /// Start an fsync when lines wait for one and none is running.
    fn start_if_dirty(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        if self.dirty
            && self.running.is_none()
            && let Some((file, path)) = checkpoint.syncer()?
        {
            self.dirty = false;
            self.running = Some(tokio::task::spawn_blocking(move || {
                file.sync_data().map_err(|e| crate::error::write_error(&path, e, "cannot append to"))
            }));
        }
        Ok(())
    }

    /// The running fsync's outcome (pending forever when none runs).
    async fn done(&mut self) -> Result<()> {
        match &mut self.running {
            Some(h) => {
                let r = h.await;
                self.running = None;
                r.context("the checkpoint fsync did not finish")?
            }
            None => std::future::pending().await,
        }
    }

    /// Wait for the running fsync, then fsync what was written after it started.
    async fn finish(&mut self, checkpoint: &mut Checkpoint) -> Result<()> {
        if self.running() {
            self.done().await?;
        }
        if self.dirty {
            self.dirty = false;
            checkpoint.sync()?;
        }
        Ok(())
    }
}

/// The LLM fan-out of one stage run (see the module doc).
pub struct Batch<'a> {
    printer: &'a Printer,
    opts: BatchOptions,
    // Field order is drop order: the client (which may own a local llama-server)
    // goes before the runtime it was started on.
    client: LlmClient,
    checkpoint: Checkpoint,
    ledger: Ledger,
    counts: LlmCounts,
    resumed: usize,
    failed: Vec<FailedItem>,
    /// Items of every round so far: `max_failed_share` is a share of the stage's items, not
    /// of one round's (a second round of three tie-break reviews with one failure is not a
    /// third of the stage failing).
    items: usize,
    /// The LLM roles the stage calls (`None`: not known, any configured role may be).
    roles: Option<Vec<String>>,
    /// What the next round asks, after the stage's label on its progress bar (a stage of
    /// several rounds — L5's labels, tasks, queries — says which one a bar counts).
    phase: Option<&'static str>,
    rt: tokio::runtime::Runtime,
}

impl<'a> Batch<'a> {
    /// For the stage being executed: its ledger run and checkpoint.
    pub fn new(ctx: &'a Ctx<'a>, opts: BatchOptions) -> Result<Self> {
        let mut batch = Self::open(ctx.settings, ctx.printer, ctx.ledger_run()?, ctx.checkpoint()?, opts)?;
        batch.roles = Some(ctx.roles().to_vec());
        Ok(batch)
    }

    /// From parts (tests, and commands outside the stage runner).
    pub fn open(
        settings: &Settings,
        printer: &'a Printer,
        run_id: i64,
        checkpoint: Checkpoint,
        opts: BatchOptions,
    ) -> Result<Self> {
        check_share(opts.share_key, opts.max_failed_share)?;
        let rt = runtime()?;
        let client = rt.block_on(LlmClient::from_settings(settings, opts.stage, run_id))?;
        let ledger = Ledger::open(&settings.artifacts)?;
        Ok(Self {
            printer,
            opts,
            client,
            checkpoint,
            ledger,
            counts: LlmCounts::default(),
            resumed: 0,
            failed: Vec::new(),
            items: 0,
            roles: None,
            phase: None,
            rt,
        })
    }

    /// Name the rounds from here on on the progress bar (`L5 persona queries: 1/2`).
    pub fn phase(&mut self, what: &'static str) -> &mut Self {
        self.phase = Some(what);
        self
    }

    /// Run `work` for every item not already checkpointed. Returns once every item
    /// is done or failed at item level, with an error when the failed share exceeds
    /// `max_failed_share`; returns at once on a fatal error. May be called several
    /// times (the filter asks about servers, then about their tools).
    pub fn run<I, T, F, Fut>(&mut self, items: Vec<(String, I)>, work: F) -> Result<Done<T>>
    where
        T: Serialize + DeserializeOwned,
        F: Fn(I, Item) -> Fut,
        Fut: Future<Output = Result<T, ItemError>>,
    {
        let total = items.len();
        let mut seen = BTreeSet::new();
        if let Some((dup, _)) = items.iter().find(|(k, _)| !seen.insert(k.as_str())) {
            bail!("internal: work item `{dup}` is listed twice");
        }
        let mut values = BTreeMap::new();
        let mut todo = Vec::new();
        for (key, input) in items {
            // A line that does not parse (an older checkpoint layout) is redone; the
            // ledger cache answers its exchanges.
            match self.checkpoint.get(&key).and_then(|v| serde_json::from_value::<Record<T>>(v.clone()).ok()) {
                Some(rec) => {
                    self.counts.add(&rec.llm);
                    values.insert(key, rec.value);
                }
                None => todo.push((key, input)),
            }
        }
        let resumed = values.len();
        self.resumed += resumed;
        // What the ledger held took no time now: the ETA counts only the items asked from here.
        // A round with nothing to ask (L4's retry round when every draft passed, or one the
        // checkpoint answered whole) draws no bar.
        let pb = match todo.len() {
            0 => indicatif::ProgressBar::hidden(),
            _ => {
                let label = match self.phase {
                    Some(p) => format!("{} {p}", self.opts.label),
                    None => self.opts.label.to_string(),
                };
                self.printer.progress_at(total as u64, resumed as u64, &label)
            }
        };
        // A role in batch mode answers a round of the stage in one batch job: every item is
        // let in flight then (they wait on the batch, not on a server).
        let bound = match self.opts.concurrency {
            0 => todo.len().max(1),
            _ if self.client.batches(self.roles.as_deref()) => todo.len().max(1),
            n => n,
        }
        .min(Semaphore::MAX_PERMITS);
        let calls = Arc::new(Semaphore::new(bound));
        let Self { client, checkpoint, counts, opts, rt, .. } = self;
        let mut failed: Vec<FailedItem> = Vec::new();
        let outcome: Result<()> = rt.block_on(async {
            let mut stream = futures::stream::iter(todo.into_iter().map(|(key, input)| {
                let (c, tally) = client.tallied();
                let fut = work(input, Item { key: key.clone(), client: c, calls: calls.clone() });
                async move { (key, fut.await, tally) }
            }))
            .buffer_unordered(bound);
            // Group commit of the checkpoint: each finished item's line is written at once
            // (a killed process keeps it), and one fsync at a time runs on the blocking pool,
            // covering every line written before it started; the items go on meanwhile.
            let mut sync = GroupSync::default();
            let result: Result<()> = async {
                loop {
                    tokio::select! {
                        biased;
                        r = sync.done(), if sync.running() => {
                            r?;
                            sync.start_if_dirty(checkpoint)?;
                        }
                        next = stream.next() => {
                            let Some((key, result, tally)) = next else { break };
                            let llm = tally.counts();
                            match result {
                                Ok(value) => {
                                    let record = Record { value, llm };
                                    checkpoint.append(&key, serde_json::to_value(&record)?)?;
                                    crate::store::fail_point(opts.fail_point)?;
                                    values.insert(key, record.value);
                                    sync.dirty = true;
                                    if !sync.running() {
                                        sync.start_if_dirty(checkpoint)?;
                                    }
                                }
                                Err(ItemError::Failed(reason)) => failed.push(FailedItem { item: key, reason }),
                                Err(ItemError::Fatal(e)) => {
                                    let kept = format!(
                                        "{} of {total} {} finished are kept; a rerun resumes from there",
                                        values.len(),
                                        opts.noun
                                    );
                                    return Err(match e.downcast_ref::<LlmError>() {
                                        Some(l) if l.is_cancelled() => e.context(format!("stopped ({kept})")),
                                        Some(_) => {
                                            e.context(format!("stopping: the LLM is unusable for every item ({kept})"))
                                        }
                                        None => e.context(format!("work item `{key}`")),
                                    });
                                }
                            }
                            counts.add(&llm);
                            pb.inc(1);
                        }
                    }
                }
                Ok(())
            }
            .await;
            // Whatever happened, the finished items are made durable before returning.
            let flushed = sync.finish(checkpoint).await;
            result.and(flushed)
        });
        pb.finish_and_clear();
        outcome?;
        failed.sort_by(|a, b| a.item.cmp(&b.item));
        self.items += total;
        let (all, all_failed) = (self.items, self.failed.len() + failed.len());
        let share = if all == 0 { 0.0 } else { all_failed as f64 / all as f64 };
        // A round whose every item failed is over the bound on its own, whatever the earlier
        // rounds: a stage that asks for one thing in a round (the L5 task list after its
        // clusters) must not go on without it because the earlier rounds were many.
        let round_lost = failed.len() == total && 1.0 > opts.max_failed_share;
        if !failed.is_empty() && (share > opts.max_failed_share || round_lost) {
            bail!(
                "{all_failed} of {all} {} failed ({:.1}%, more than `{}` = {}{}); the {} finished are kept and a rerun with the same settings retries only the failed ones:\n  {}",
                opts.noun,
                share * 100.0,
                opts.share_key,
                opts.max_failed_share,
                if round_lost && share <= opts.max_failed_share { ", and every item of a round failed" } else { "" },
                all - all_failed,
                self.failed
                    .iter()
                    .chain(&failed)
                    .map(|f| format!("{}: {}", f.item, f.reason))
                    .collect::<Vec<_>>()
                    .join("\n  ")
            );
        }
        self.failed.extend(failed.iter().cloned());
        Ok(Done { values, failed, resumed })
    }

    /// Whether the item `key` is in the checkpoint of an interrupted run (so [`Batch::run`]
    /// will not run it), for work a stage prepares ahead of the items.
    pub fn is_done(&self, key: &str) -> bool {
        self.checkpoint.get(key).is_some()
    }

    /// Run a future on the batch's runtime (setup that must live on it, such as MCP
    /// clients the items share).
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The newest ledger event of an exchange named by its request hash (an event parent).
    pub fn exchange_event(&self, hash: &str) -> Result<Option<i64>> {
        self.ledger.exchange_event(hash)
    }

    /// The LLM counts over every item so far (checkpointed ones included).
    pub fn counts(&self) -> LlmCounts {
        self.counts
    }

    /// Record the batch in the stage output: the LLM counts (from the items, so a
    /// resumed run reports what an uninterrupted one does), the summary line of this
    /// process's calls, and — when items failed within `max_failed_share` —
    /// `failed.json` (`[{item, reason}]` sorted by item) and the count `failed_items`.
    pub fn finish(mut self, out: &mut Output) -> Result<()> {
        out.counts.extend(self.counts.to_map());
        let mut note = self.client.summary();
        if self.resumed > 0 {
            note.push_str(&format!("; {} items resumed from an interrupted run", self.resumed));
        }
        out.notes.push(note);
        if !self.failed.is_empty() {
            self.failed.sort_by(|a, b| a.item.cmp(&b.item));
            out.json(FAILED_FILE, &self.failed)?;
            out.count("failed_items", self.failed.len());
            out.notes.push(format!(
                "{} {} failed and are left out (allowed by `{}` = {}); reasons in failed.json",
                self.failed.len(),
                self.opts.noun,
                self.opts.share_key,
                self.opts.max_failed_share
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_is_range_checked_and_nan_refused() {
        assert!(check_share("k", 0.0).is_ok() && check_share("k", 1.0).is_ok() && check_share("k", 0.25).is_ok());
        for bad in [f64::NAN, -0.1, 1.5, f64::INFINITY] {
            let e = check_share("efs.verify.max_failed_share", bad).unwrap_err().to_string();
            assert!(e.contains("`efs.verify.max_failed_share`"), "{e}");
        }
        #[derive(Deserialize, Debug)]
        struct S {
            #[serde(deserialize_with = "de_share")]
            #[allow(dead_code)]
            max_failed_share: f64,
        }
        assert!(toml::from_str::<S>("max_failed_share = 0.5").is_ok());
        for bad in ["max_failed_share = nan", "max_failed_share = 2.0", "max_failed_share = -1.0"] {
            let e = toml::from_str::<S>(bad).unwrap_err().to_string();
            assert!(e.contains("max_failed_share"), "{e}");
        }
    }

    fn invalid(item: &str) -> LlmError {
        LlmError::Invalid {
            stage: "s".into(),
            item: item.into(),
            role: "r".into(),
            attempts: 2,
            error: "no JSON".into(),
            raw: String::new(),
            event_id: None,
        }
    }

    #[test]
    fn all_combines_item_failures_and_lets_fatal_errors_win() {
        assert_eq!(all::<u8>(vec![Ok(1), Ok(2)]).unwrap(), vec![1, 2]);
        match all::<u8>(vec![Ok(1), Err(invalid("a")), Err(invalid("b"))]) {
            Err(ItemError::Failed(r)) => assert!(r.contains("item `a`") && r.contains("item `b`"), "{r}"),
            other => panic!("{other:?}"),
        }
        let fatal = LlmError::Cancelled { stage: "s".into(), item: "c".into() };
        assert!(matches!(all::<u8>(vec![Err(invalid("a")), Err(fatal)]), Err(ItemError::Fatal(_))));
    }

    /// A batch over a temp project without LLM roles (the closures below never call one).
    fn offline_batch<'a>(dir: &std::path::Path, printer: &'a Printer, opts: BatchOptions) -> Batch<'a> {
        let cfg = dir.join("pipeline/t.toml");
        std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
        std::fs::write(&cfg, "").unwrap();
        let settings = Settings::load(&cfg).unwrap();
        std::fs::create_dir_all(&settings.artifacts).unwrap();
        let run = Ledger::open(&settings.artifacts).unwrap().begin_run("t", "", "0").unwrap();
        let ckpt = Checkpoint::open(&settings.artifacts.join(".work/t")).unwrap();
        Batch::open(&settings, printer, run, ckpt, opts).unwrap()
    }

    #[test]
    fn resume_skips_checkpointed_items_and_failed_ones_are_retried() {
        let dir = tempfile::tempdir().unwrap();
        let printer = Printer::default();
        let items = || (0..6).map(|i| (format!("k{i}"), i)).collect::<Vec<(String, u32)>>();
        let seen = std::sync::Mutex::new(Vec::new());
        let work = |fail: &'static [u32]| {
            let seen = &seen;
            move |i: u32, llm: Item| async move {
                seen.lock().unwrap().push(llm.key().to_string());
                if fail.contains(&i) { Err(ItemError::Failed(format!("no luck with {i}"))) } else { Ok(i * 10) }
            }
        };
        let opts = BatchOptions::new("t", "t", "things").concurrency(2);
        let mut b = offline_batch(dir.path(), &printer, opts.clone());
        let e = b.run(items(), work(&[1, 4])).unwrap_err().to_string();
        assert!(e.starts_with("2 of 6 things failed (33.3%, more than `max_failed_share` = 0)"), "{e}");
        assert!(e.contains("k1: no luck with 1\n  k4: no luck with 4"), "{e}");
        drop(b);
        seen.lock().unwrap().clear();
        let mut b = offline_batch(dir.path(), &printer, opts.max_failed_share(0.2, "k"));
        let done = b.run(items(), work(&[4])).unwrap();
        assert_eq!(*seen.lock().unwrap(), ["k1", "k4"], "only the failed items are run again");
        assert_eq!((done.resumed, done.values.len()), (4, 5));
        assert_eq!(done.failed, [FailedItem { item: "k4".into(), reason: "no luck with 4".into() }]);
        let done = b.run(items(), work(&[])).unwrap();
        assert_eq!(done.resumed, 5);
        assert_eq!(done.values.values().copied().collect::<Vec<_>>(), [0, 10, 20, 30, 40, 50]);
        let e = b.run(vec![("a".to_string(), 1), ("a".to_string(), 2)], work(&[])).unwrap_err();
        assert!(e.to_string().contains("`a` is listed twice"), "{e}");
    }

    #[test]
    fn the_failed_share_counts_the_items_of_every_round() {
        // Ten items, then a second round of two (as `review prereview`'s tie-break): one
        // failure in the second round is 1 of 12, within 0.1, not 1 of 2.
        let dir = tempfile::tempdir().unwrap();
        let printer = Printer::default();
        let work = |fail: u32| {
            move |i: u32, _: Item| async move { if i == fail { Err(ItemError::Failed("no luck".into())) } else { Ok(i) } }
        };
        let opts = BatchOptions::new("t", "t", "things").max_failed_share(0.1, "k");
        let mut b = offline_batch(dir.path(), &printer, opts.clone());
        b.run((0..10).map(|i| (format!("a{i}"), i)).collect(), work(99)).unwrap();
        let done = b.run((0..2).map(|i| (format!("b{i}"), i)).collect(), work(1)).unwrap();
        assert_eq!(done.failed.len(), 1);
        // A second failure makes it 2 of 14, over 0.1, and says so, naming both.
        let e = b.run((0..2).map(|i| (format!("c{i}"), i)).collect(), work(0)).unwrap_err().to_string();
        assert!(e.starts_with("2 of 14 things failed (14.3%, more than `k` = 0.1); the 12 finished"), "{e}");
        assert!(e.contains("b1: no luck\n  c0: no luck"), "{e}");
        // A round of one item that fails is lost whatever the earlier rounds (the L5 task
        // list after its clusters): 1 of 11 is within 0.1, the round is not.
        drop(b);
        let mut b = offline_batch(dir.path(), &printer, opts);
        b.run((0..10).map(|i| (format!("d{i}"), i)).collect(), work(99)).unwrap();
        let e = b.run(vec![("tasks".to_string(), 7)], work(7)).unwrap_err().to_string();
        assert!(
            e.starts_with("1 of 11 things failed (9.1%, more than `k` = 0.1, and every item of a round failed)"),
            "{e}"
        );
    }

    #[test]
    fn counts_add_up_and_map_to_the_manifest_keys() {
        let mut c = LlmCounts { exchanges: 1, failures: 0, prompt_tokens: 10, completion_tokens: 3 };
        c.add(&LlmCounts { exchanges: 2, failures: 1, prompt_tokens: 5, completion_tokens: 1 });
        let m = c.to_map();
        assert_eq!(m["llm_exchanges"], 3);
        assert_eq!(m["llm_failures"], 1);
        assert_eq!(m["llm_prompt_tokens"], 15);
        assert_eq!(m["llm_completion_tokens"], 4);
        let rec: Record<u8> = serde_json::from_value(serde_json::json!({"value": 7, "llm": c})).unwrap();
        assert_eq!((rec.value, rec.llm), (7, c));
        // An older checkpoint layout (a bare value) is not taken for a record.
        assert!(serde_json::from_value::<Record<u8>>(serde_json::json!({"equivalent": true})).is_err());
    }
}
