//! OpenAI batch jobs for roles with `mode = "batch"` (`/v1/files` + `/v1/batches`). Not to
//! be confused with [`super::batch`], the in-process fan-out every LLM stage runs its items
//! through: this module decides how the requests of one role reach the server.
//!
//! Transparent to stages: in a batch role, the client's exchange does not send its request
//! but hands it to the role's [`BatchJobs`] and awaits the answer, which it then records
//! exactly as a live one (the same cache key and `llm.exchange` payload, plus the batch's
//! id), so a rerun replays it from the ledger without a request.
//!
//! * **Gathering**: requests wait until none has come for `gather_ms` (one round of a
//!   stage: every item in flight asks within milliseconds), or until the file would pass
//!   `max_requests` or `max_bytes`. Re-asks, agent turns and the filter's tools after its
//!   servers come later, so they go in later batches: each round is one batch.
//! * **Submitting**: the requests as JSONL (`custom_id` = the request hash, lines sorted by
//!   cache key), `POST /v1/files` (purpose `batch`), then `POST /v1/batches`. The batch is in
//!   the ledger (`llm_batches`, its requests in `llm_batch_requests`) before it is created:
//!   a process stopped between the two finds the row and adopts the batch made from its
//!   file (`GET /v1/batches`) instead of creating another; a create whose answer was lost is
//!   looked for the same way before it is tried again.
//! * **Polling**: `GET /v1/batches/{id}`, first after `poll_s`, then 1.5 times longer each
//!   time up to `poll_max_s`, with a progress line of its request counts.
//! * **Ingesting**: the output file's answers go into `llm_batch_results`, and the batch is
//!   marked done, in one transaction before any waiting call hears of them, so a process
//!   stopped after that finds them there; then their exchanges are recorded for the waiting
//!   calls, all in a second one (`record_answers`), and each call gets its own. A request
//!   the batch did not answer (an error line with a retryable status, an expired, failed or
//!   cancelled batch, no line at all) goes into the next batch, up to `resubmits` times,
//!   then live (`live_fallback`) or fails; a status that is not retried live (400) fails at
//!   once.
//! * **Resume**: a request first looks for an answer in `llm_batch_results` that no
//!   exchange has recorded yet, then for an unfinished batch in the ledger that holds it:
//!   that batch is followed (once per process) and nothing is submitted twice.
//! * **HTTP**: the role's `max_retries` and `backoff_ms` apply to every call to the files
//!   and batches endpoints (408, 409, 429, 5xx, connection errors). A poll or download that
//!   still fails stops the stage; its batch stays unfinished in the ledger and a rerun
//!   goes on with it, unless the server answered 404: `benchgen llm batches --forget`
//!   ([`forget`]) then gives the batch up. An upload or create the server refuses sends
//!   the batch's requests live at once, with a warning.
//! * **Offline engines** ([`offline`]): `benchgen llm batch-export` keeps a stage's first
//!   round in a file for `vllm run-batch` instead of sending it, and `benchgen llm
//!   batch-import` ingests the engine's output file as a downloaded one is.

mod offline;

pub use offline::{ExportReport, ImportReport, batch_role, export, import, render_export, render_import};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::future::Either;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::config::{BatchSettings, RoleSettings};
use super::record::{Recorder, cache_put_on};
use super::redact::{Redactor, truncate};
use super::transport::{error_chain, parse_retry_after, retry_delay, retryable_status};
use crate::ledger::Ledger;
use crate::settings::Settings;

/// The batch tables, created by the first client with a batch role. Unlike the events,
/// their rows change: a batch's state and counts while it runs, an answer's
/// `recorded_event` once recorded.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS llm_batches(
    id INTEGER PRIMARY KEY,
    batch_id TEXT,
    role TEXT NOT NULL,
    stage TEXT NOT NULL,
    base_url TEXT NOT NULL,
    input_file_id TEXT NOT NULL,
    state TEXT NOT NULL,
    requests INTEGER NOT NULL,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    output_file_id TEXT,
    error_file_id TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS llm_batch_requests(
    batch INTEGER NOT NULL REFERENCES llm_batches(id),
    key TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY(batch, key)
);
CREATE INDEX IF NOT EXISTS llm_batch_requests_key ON llm_batch_requests(key);
CREATE TABLE IF NOT EXISTS llm_batch_results(
    key TEXT PRIMARY KEY,
    batch INTEGER NOT NULL REFERENCES llm_batches(id),
    response TEXT NOT NULL,
    recorded_event INTEGER
);
";

/// Uploads and downloads may be large (OpenAI allows 200 MB files): they get this long.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(1800);

/// Pages of 100 batches looked through for the batch made from a file (the newest 2,000):
/// a bound, so a server with a long history cannot hold a stage listing it.
const LIST_PAGES: usize = 20;

/// At most this much room is set aside for an answer body before it comes (its announced
/// length; a larger one grows as it comes).
const PRESIZE_MAX: u64 = 256 << 20;

/// How a request handed to [`BatchJobs::ask`] ended.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// The batch's answer, recorded as the call's exchange when the batch was ingested.
    Recorded(Recorded),
    /// The batch's answer (a chat completion), the batch's id and the batches it took: an
    /// answer a batch brought earlier that no exchange records yet (the call records it).
    Answer {
        response: Value,
        batch: String,
        tries: u32,
    },
    /// Send it live: its `tries` batches did not answer it and `live_fallback` is on.
    Live {
        tries: u32,
    },
    /// It failed: a status that is not retried, or retries used up without `live_fallback`.
    Failed {
        tries: u32,
        status: String,
        message: String,
    },
    Cancelled,
    /// The batch cannot be followed (ledger, or a poll or download that kept failing): the
    /// stage stops, and a rerun goes on with the same batch.
    Setup(String),
}

/// An answer the ingest of a batch recorded as a waiting call's exchange (`record_answers`).
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    /// The chat completion, as the JSON text the ledger holds.
    pub(crate) response: String,
    pub(crate) event_id: i64,
    /// Recorded as a cache hit of the exchange that paid (identical requests of a round).
    pub(crate) cached: bool,
    /// The batches it took (the paid exchange's `attempts`).
    pub(crate) tries: u32,
    /// Prompt and completion tokens.
    pub(crate) tokens: (u64, u64),
}

/// What a call's exchange records once its batch answers, kept as text while it waits (a
/// stage has every item in flight: the parsed request bodies and fields of 100,000 calls
/// took most of 2.8 GiB). The ingest writes the payload [`super::LlmClient`]'s
/// `record_sent` would (`paid_text`, `hit_text`); the role's sampling parameters, the same
/// for almost all of its calls, are the batch jobs' (`BatchJobs::params`), held by a call
/// only where its request set its own.
pub(crate) struct Draft {
    /// The exchange's fields so far (`exchange_base`'s object) without its closing brace.
    head: Body,
    /// The request body as sent: the JSONL line's `body`, the exchange's `request`.
    body: Body,
    /// The ledger subject (the item) and the parent event.
    item: String,
    parent: Option<i64>,
    /// The sampling parameters the exchange records (serialised) where the request body set
    /// its own (curation's second verdict: its seed and temperature); none: the role's
    /// (`BatchJobs::params`), as for almost every call.
    params: Option<Box<str>>,
}

impl Draft {
    /// `base`: the exchange's fields so far (an object with fields); `body`: the request
    /// body, serialised; `at`: the item and the parent event.
    pub(crate) fn new(base: &Value, mut body: String, at: (&str, Option<i64>)) -> Draft {
        let mut head = base.to_string();
        head.truncate(head.len().saturating_sub(1));
        // Without the room a serialiser leaves (it doubles its buffer: 1 KiB for a body of
        // 600 bytes), as every call of a round holds its draft while the batch runs.
        head.shrink_to_fit();
        body.shrink_to_fit();
        Draft { head: Body::plain(head), body: Body::plain(body), item: at.0.to_string(), parent: at.1, params: None }
    }

    /// The sampling parameters this call sent where they are not its role's (serialised).
    pub(crate) fn with_params(mut self, params: Option<String>) -> Draft {
        self.params = params.map(String::into_boxed_str);
        self
    }
}

/// A waiting call's request body (or its exchange's fields): as text, or compressed (zstd)
/// against its role's first as a raw-content dictionary ([`Packer`]). A stage's requests
/// share most of their text (the system prompt, the answer's schema twice), so the part that
/// varies is what a waiting call holds: 100,000 waiting calls held some 100 MB of bodies in
/// full.
pub(crate) struct Body {
    bytes: Box<[u8]>,
    /// The text's length in bytes.
    len: usize,
    /// The packer that compressed `bytes`; none: `bytes` is the text.
    packer: Option<Arc<Packer>>,
}

impl Body {
    fn plain(text: String) -> Body {
        Body { len: text.len(), bytes: text.into_bytes().into_boxed_slice(), packer: None }
    }

    /// The body's text.
    fn text(&self) -> std::borrow::Cow<'_, str> {
        let Some(packer) = &self.packer else {
            return String::from_utf8_lossy(&self.bytes);
        };
        let mut unpack = packer.unpack.lock().unwrap_or_else(|p| p.into_inner());
        // What it compressed comes back whole, so a failure here is a broken invariant.
        let text = unpack.decompress(&self.bytes, self.len).expect("a packed request body unpacks");
        std::borrow::Cow::Owned(String::from_utf8(text).expect("a packed request body is the text it was"))
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// The compressor and decompressor of one role's request bodies, with its first body as
/// their dictionary (kept by both contexts).
pub(crate) struct Packer {
    pack: Mutex<zstd::bulk::Compressor<'static>>,
    unpack: Mutex<zstd::bulk::Decompressor<'static>>,
}

impl Packer {
    fn new(dictionary: &[u8]) -> Option<Arc<Packer>> {
        let pack = zstd::bulk::Compressor::with_dictionary(1, dictionary).ok()?;
        let unpack = zstd::bulk::Decompressor::with_dictionary(dictionary).ok()?;
        Some(Arc::new(Packer { pack: Mutex::new(pack), unpack: Mutex::new(unpack) }))
    }

    /// `body` compressed by the packer of `cell`, made from `body` when it has none yet.
    fn packed(cell: &std::sync::OnceLock<Option<Arc<Packer>>>, body: Body) -> Body {
        match cell.get_or_init(|| Packer::new(&body.bytes)) {
            Some(packer) => packer.pack(body),
            None => body,
        }
    }

    /// `body` compressed, where that makes it smaller (else as it was).
    fn pack(self: &Arc<Self>, body: Body) -> Body {
        if body.packer.is_some() {
            return body;
        }
        let packed = self.pack.lock().unwrap_or_else(|p| p.into_inner()).compress(&body.bytes);
        match packed {
            Ok(bytes) if bytes.len() < body.bytes.len() => {
                Body { bytes: bytes.into_boxed_slice(), len: body.len, packer: Some(self.clone()) }
            }
            _ => body,
        }
    }
}

/// `{"prompt_tokens":…,"completion_tokens":…}`, as `record_sent` writes an exchange's usage.
fn usage_text((prompt, completion): (u64, u64)) -> String {
    format!("{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion}}}")
}

/// The payload of the paid exchange of an answer (`response`: its text, `tokens` its usage)
/// batch `batch` brought after `tries` batches, `params` the sampling parameters it was sent
/// with (serialised): `sent_payload(…).to_string()`, from text.
fn paid_text(d: &Draft, params: &str, response: &str, tokens: (u64, u64), batch: &str, tries: u32) -> String {
    let (head, body, usage, batch) = (d.head.text(), d.body.text(), usage_text(tokens), Value::from(batch));
    format!(
        "{head},\"cached\":false,\"params\":{params},\"request\":{body},\"response\":{response},\"usage\":{usage},\
         \"batch\":{batch},\"attempts\":{tries}}}"
    )
}

/// The payload of a cache hit of exchange `source`, the paid one of the same answer:
/// `hit_payload(…).to_string()`, from text.
fn hit_text(d: &Draft, source: i64, tokens: (u64, u64), batch: &str) -> String {
    let (head, usage, batch) = (d.head.text(), usage_text(tokens), Value::from(batch));
    format!(
        "{head},\"cached\":true,\"source_event\":{source},\"usage\":{usage},\"latency_ms\":0,\"attempts\":0,\
         \"batch\":{batch}}}"
    )
}

/// A request's JSONL line, `{"custom_id":…,"method":"POST","url":…,"body":…}` and a newline
/// as `serde_json` writes it, is these around the request hash's text and the body.
const LINE_START: &str = "{\"custom_id\":\"";
const LINE_MIDDLE: &str = "\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":";
const LINE_END: &str = "}\n";

/// The length of the JSONL line of a request with this body (serialised).
fn line_len(body: &Body) -> u64 {
    (LINE_START.len() + DIGEST_TEXT_LEN + LINE_MIDDLE.len() + body.len() + LINE_END.len()) as u64
}

/// Append a request's JSONL line to a batch file (`body`: the request body, serialised).
/// Written when its round goes out, from the body its first call waits with: made when the
/// call asked, each line was a second copy of its body (with a serialiser's spare room, some
/// 1 KiB) for as long as the round gathered.
fn write_line(file: &mut Vec<u8>, hash: &Digest, body: &str) {
    let hash = hash.text();
    for part in [LINE_START, hash.as_str(), LINE_MIDDLE, body, LINE_END] {
        file.extend_from_slice(part.as_bytes());
    }
}

/// What a request hash or a cache key starts with ([`super::request_hashes`]).
const DIGEST_PREFIX: &str = "sha256:";
/// The length of a request hash's or cache key's text: the prefix and 64 hex digits.
const DIGEST_TEXT_LEN: usize = DIGEST_PREFIX.len() + 64;

/// A request hash or cache key as its 32 bytes, where its text (`sha256:` and 64 lowercase
/// hex digits) took 71 on the heap for each copy: a round's requests are kept by key with
/// their hash while they wait, and listed again by the batch that follows them. The order is
/// the text's (lowercase hex sorts as its bytes), so a file's lines stay in cache key order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Digest([u8; 32]);

impl Digest {
    /// `sha256:` and 64 lowercase hex digits; anything else is none, as its text could not be
    /// made again byte for byte.
    fn parse(text: &str) -> Option<Digest> {
        let hex = text.strip_prefix(DIGEST_PREFIX)?.as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            *o = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Some(Digest(out))
    }

    /// Its text, as the ledger and the batch files hold it.
    fn text(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(DIGEST_TEXT_LEN);
        out.push_str(DIGEST_PREFIX);
        for b in self.0 {
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        out
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// One request of a batch that was not answered.
#[derive(Debug, Clone)]
struct Failure {
    status: String,
    message: String,
    retryable: bool,
}

/// Why following a batch stopped before its end.
enum Stop {
    Cancelled,
    /// The server would not take the batch (upload or create refused): its requests go on
    /// as unanswered ones.
    Refused(String),
    /// It cannot be followed now; the ledger keeps it unfinished for a rerun.
    Setup(String),
}

/// A failed call to the files or batches endpoints.
enum CallError {
    Cancelled,
    Failed(String),
    /// A 404: the server does not know the batch or file (or has no such endpoint).
    Gone(String),
}

/// Why a batch was not created: a call error that surely made none (`Call`), or a failure
/// after which it may exist on the server (`Uncertain`): the row then stays unfinished and
/// the rerun looks for it before creating another, so no file becomes two batches.
enum CreateError {
    Call(CallError),
    Uncertain(String),
}

impl CreateError {
    fn uncertain(e: CallError) -> Self {
        match e {
            CallError::Cancelled => CreateError::Call(CallError::Cancelled),
            CallError::Failed(why) | CallError::Gone(why) => CreateError::Uncertain(why),
        }
    }
}

/// One failed HTTP attempt.
struct Attempt {
    status: String,
    message: String,
    retryable: bool,
    retry_after: Option<Duration>,
}

/// What the batches endpoint says about a batch.
#[derive(Debug, Clone, Default)]
struct Remote {
    id: String,
    status: String,
    total: u64,
    completed: u64,
    failed: u64,
    output_file_id: Option<String>,
    error_file_id: Option<String>,
    /// Validation errors of a failed batch, for messages.
    errors: String,
}

impl Remote {
    fn parse(v: &Value) -> Result<Remote, String> {
        let s = |k: &str| v[k].as_str().filter(|x| !x.is_empty()).map(str::to_string);
        let Some(id) = s("id") else {
            return Err(format!("a batch object without `id`: {}", truncate(&v.to_string(), 300)));
        };
        let c = &v["request_counts"];
        let errors = v["errors"]["data"]
            .as_array()
            .map(|e| e.iter().filter_map(|x| x["message"].as_str()).collect::<Vec<_>>().join("; "))
            .unwrap_or_default();
        Ok(Remote {
            id,
            status: s("status").unwrap_or_default(),
            total: c["total"].as_u64().unwrap_or(0),
            completed: c["completed"].as_u64().unwrap_or(0),
            failed: c["failed"].as_u64().unwrap_or(0),
            output_file_id: s("output_file_id"),
            error_file_id: s("error_file_id"),
            errors,
        })
    }

    fn finished(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "expired" | "cancelled")
    }
}

/// The files and batches endpoints of one role's server (its first base URL).
struct Api {
    base: String,
    key: Result<Option<String>, String>,
    redactor: Redactor,
    http: reqwest::Client,
    retries: u32,
    backoff_ms: u64,
    timeout: Duration,
}

impl Api {
    fn new(s: &RoleSettings) -> Result<Api> {
        let key = match s.api_key_env() {
            None => Ok(None),
            Some(name) => super::config::read_api_key(&name).map(Some),
        };
        let redactor = match &key {
            Ok(Some(k)) => Redactor::new(k),
            _ => Redactor::default(),
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))?;
        Ok(Api {
            base: s.base_url().unwrap_or_default().trim_end_matches('/').to_string(),
            key,
            redactor,
            http,
            retries: s.max_retries,
            backoff_ms: s.backoff_ms,
            timeout: Duration::from_secs_f64(s.timeout_s),
        })
    }

    /// One attempt. The key goes in the `Authorization` header only; every text the server
    /// sends back is redacted before it is kept.
    async fn once<F>(&self, build: &F, timeout: Duration) -> Result<Vec<u8>, Attempt>
    where
        F: Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    {
        let fatal = |message: String| Attempt { status: "setup".into(), message, retryable: false, retry_after: None };
        let key = self.key.clone().map_err(fatal)?;
        let mut req = build(&self.http).timeout(timeout);
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let lost = |status: &str, e: &reqwest::Error| Attempt {
            status: if e.is_timeout() { "timeout".into() } else { status.to_string() },
            message: error_chain(e),
            retryable: !e.is_builder(),
            retry_after: None,
        };
        let mut resp = req.send().await.map_err(|e| lost("connection error", &e))?;
        let status = resp.status();
        let retry_after = parse_retry_after(resp.headers().get(reqwest::header::RETRY_AFTER));
        // Into one buffer of the length the server announces, chunk by chunk: `bytes()`
        // gathers the chunks, then copies them into one buffer, so an output file (some
        // 20 MB for 50,000 short answers) was held twice as it came.
        let mut body = Vec::with_capacity(resp.content_length().map_or(0, |n| n.min(PRESIZE_MAX) as usize));
        while let Some(chunk) = resp.chunk().await.map_err(|e| lost("transfer error", &e))? {
            body.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return Ok(body);
        }
        Err(Attempt {
            status: format!("HTTP {}", status.as_u16()),
            message: String::from_utf8_lossy(&body).trim().to_string(),
            retryable: retryable_status(status.as_u16()),
            retry_after,
        })
    }

    /// A failed attempt as one line, the key redacted before the cut.
    fn shown(&self, what: &str, a: &Attempt) -> String {
        format!("{what}: {}: {}", a.status, truncate(&self.redactor.text(&a.message), 500))
    }

    /// A call retried as the role's live calls are; `what` names it in errors.
    async fn call<F>(
        &self,
        what: &str,
        timeout: Duration,
        cancel: &CancellationToken,
        build: F,
    ) -> Result<Vec<u8>, CallError>
    where
        F: Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(CallError::Cancelled),
                r = self.once(&build, timeout) => r,
            };
            match r {
                Ok(bytes) => return Ok(bytes),
                Err(a) if a.retryable && attempts <= self.retries => {
                    tracing::debug!("{}", self.shown(what, &a));
                    let delay = retry_delay(self.backoff_ms, attempts, a.retry_after);
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => return Err(CallError::Cancelled),
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
                Err(a) if a.status == "HTTP 404" => return Err(CallError::Gone(self.shown(what, &a))),
                Err(a) => return Err(CallError::Failed(self.shown(what, &a))),
            }
        }
    }

    /// A JSON answer of a call.
    fn json(&self, what: &str, bytes: &[u8]) -> Result<Value, CallError> {
        serde_json::from_slice(bytes).map_err(|e| {
            let text = self.redactor.text(&String::from_utf8_lossy(bytes));
            CallError::Failed(format!("{what}: the answer is not JSON ({e}): {}", truncate(&text, 300)))
        })
    }

    async fn upload(&self, file: Vec<u8>, cancel: &CancellationToken) -> Result<String, CallError> {
        let url = format!("{}/files", self.base);
        // Shared, not copied, by each attempt's part (a file of 50,000 requests is some 50 MB,
        // and it was held twice while it went out). The part is what `Part::bytes` makes of a
        // `Vec`, a body of these bytes with their length; `Bytes` is the `bytes` crate's, as
        // axum re-exports it.
        let file = axum::body::Bytes::from(file);
        let bytes = self
            .call("uploading the batch file", TRANSFER_TIMEOUT, cancel, |h| {
                let part = reqwest::multipart::Part::stream(file.clone()).file_name("benchgen-batch.jsonl");
                h.post(&url).multipart(reqwest::multipart::Form::new().text("purpose", "batch").part("file", part))
            })
            .await?;
        let v = self.json("uploading the batch file", &bytes)?;
        match v["id"].as_str() {
            Some(id) if !id.is_empty() => Ok(id.to_string()),
            _ => {
                let shown = truncate(&v.to_string(), 300);
                Err(CallError::Failed(format!("uploading the batch file: no file `id` in {shown}")))
            }
        }
    }

    /// The batch made from `file_id` (a create whose answer was lost, or one a stopped
    /// process made), looked for among the server's batches, newest first, a page of 100 at
    /// a time (`after` the last one seen) while the server has more. Past [`LIST_PAGES`]
    /// pages it is an error, not "none": creating the batch again could make a second one.
    async fn made_from(&self, file_id: &str, cancel: &CancellationToken) -> Result<Option<Remote>, CallError> {
        let mut after: Option<String> = None;
        for _ in 0..LIST_PAGES {
            let mut query = vec![("limit", "100".to_string())];
            query.extend(after.take().map(|a| ("after", a)));
            let url = reqwest::Url::parse_with_params(&format!("{}/batches", self.base), &query)
                .map_err(|e| CallError::Failed(format!("listing batches: not a URL: {e}")))?;
            let bytes = self.call("listing batches", self.timeout, cancel, |h| h.get(url.clone())).await?;
            let v = self.json("listing batches", &bytes)?;
            let data = v["data"].as_array().map(Vec::as_slice).unwrap_or_default();
            if let Some(b) = data.iter().find(|b| b["input_file_id"] == file_id) {
                return Remote::parse(b).map(Some).map_err(CallError::Failed);
            }
            let last = v["last_id"].as_str().or_else(|| data.last().and_then(|b| b["id"].as_str()));
            match last {
                Some(id) if v["has_more"] == true => after = Some(id.to_string()),
                _ => return Ok(None),
            }
        }
        Err(CallError::Failed(format!(
            "listing batches: no batch made from file {file_id} among the server's newest {} batches",
            LIST_PAGES * 100
        )))
    }

    /// Create the batch of `file_id`, or adopt the one already made from it (`adopt`: look
    /// first, for a row a stopped process left). Never two batches from one file: before
    /// each retry, and before giving up after a lost answer, the list is searched.
    async fn create(
        &self,
        file_id: &str,
        window: &str,
        adopt: bool,
        cancel: &CancellationToken,
    ) -> Result<Remote, CreateError> {
        if adopt && let Some(b) = self.made_from(file_id, cancel).await.map_err(CreateError::uncertain)? {
            return Ok(b);
        }
        let url = format!("{}/batches", self.base);
        let body = json!({"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": window})
            .to_string();
        let build = |h: &reqwest::Client| h.post(&url).header("content-type", "application/json").body(body.clone());
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(CreateError::Call(CallError::Cancelled)),
                r = self.once(&build, self.timeout) => r,
            };
            let a = match r {
                Ok(bytes) => {
                    // The server made a batch whose answer we cannot read: it may exist.
                    let v = self.json("creating the batch", &bytes).map_err(CreateError::uncertain)?;
                    return Remote::parse(&v).map_err(CreateError::Uncertain);
                }
                Err(a) => a,
            };
            // A retryable failure may have come after the batch was made.
            if a.retryable
                && let Some(b) = self.made_from(file_id, cancel).await.map_err(CreateError::uncertain)?
            {
                return Ok(b);
            }
            if !a.retryable || attempts > self.retries {
                let why = self.shown("creating the batch", &a);
                // Only a refusal of the first request of a fresh file surely made no batch.
                let sure = attempts == 1 && !a.retryable && !adopt;
                return Err(if sure { CreateError::Call(CallError::Failed(why)) } else { CreateError::Uncertain(why) });
            }
            let delay = retry_delay(self.backoff_ms, attempts, a.retry_after);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(CreateError::Call(CallError::Cancelled)),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    async fn get(&self, id: &str, cancel: &CancellationToken) -> Result<Remote, CallError> {
        let url = format!("{}/batches/{id}", self.base);
        let what = format!("polling batch {id}");
        let bytes = self.call(&what, self.timeout, cancel, |h| h.get(&url)).await?;
        Remote::parse(&self.json(&what, &bytes)?).map_err(CallError::Failed)
    }

    async fn content(&self, file_id: &str, cancel: &CancellationToken) -> Result<Vec<u8>, CallError> {
        let url = format!("{}/files/{file_id}/content", self.base);
        self.call(&format!("downloading file {file_id}"), TRANSFER_TIMEOUT, cancel, |h| h.get(&url)).await
    }
}

/// A call waiting for its batch, with what its exchange records.
struct Waiter {
    tx: oneshot::Sender<Outcome>,
    draft: Draft,
}

/// One answer of a finished batch: the request's cache key, the chat completion as the
/// ledger stores it (JSON text: 50,000 parsed answers are some 130 MB) and its prompt and
/// completion tokens.
struct Answered {
    key: Digest,
    response: String,
    tokens: (u64, u64),
}

impl Answered {
    fn new(key: Digest, response: &Value) -> Answered {
        let usage = &response["usage"];
        let tokens = (usage["prompt_tokens"].as_u64().unwrap_or(0), usage["completion_tokens"].as_u64().unwrap_or(0));
        let mut response = response.to_string();
        // Without the serialiser's spare room (up to as much again): each answer of a batch
        // is held until its call takes it.
        response.shrink_to_fit();
        Answered { key, response, tokens }
    }
}

/// A finished batch's answers, and its unanswered requests by key.
type Downloaded = (Vec<Answered>, BTreeMap<Digest, Failure>);

/// One request on its way through batches. Its JSONL line is written into the file of each
/// batch it goes in, from its first call's body.
struct Pending {
    hash: Digest,
    /// Batches it was sent in.
    tries: u32,
    waiters: Vec<Waiter>,
}

#[derive(Default)]
struct State {
    /// Requests for the next batch, by cache key (so its lines are sorted).
    gathering: BTreeMap<Digest, Pending>,
    /// The length of their batch file.
    bytes: u64,
    arrivals: u64,
    gatherer: bool,
    /// Requests in batches this process follows, by cache key.
    sent: BTreeMap<Digest, Pending>,
    /// Ledger rows of those batches.
    following: BTreeSet<i64>,
}

/// A batch as the ledger knows it.
#[derive(Debug, Clone)]
struct Row {
    id: i64,
    batch_id: Option<String>,
    file_id: String,
    /// Left by another process: look for its batch before creating one.
    resumed: bool,
}

/// The batch jobs of one role in one stage run (see the module doc).
pub(crate) struct BatchJobs {
    role: String,
    stage: String,
    /// An export run: rounds go to [`offline`]'s file instead of the server.
    export: bool,
    s: BatchSettings,
    /// The role's sampling parameters as its paid exchanges record them (`params`),
    /// serialised once: the same for all its calls, each of which held a copy.
    params: String,
    api: Api,
    recorder: Arc<Recorder>,
    cancel: CancellationToken,
    state: Mutex<State>,
    /// The packers of the role's request bodies and exchange fields, each made from the
    /// first (none: they stay text).
    packer: std::sync::OnceLock<Option<Arc<Packer>>>,
    head_packer: std::sync::OnceLock<Option<Arc<Packer>>>,
}

impl BatchJobs {
    pub(crate) fn new(
        role: &str,
        stage: &str,
        settings: &RoleSettings,
        recorder: Arc<Recorder>,
        cancel: CancellationToken,
    ) -> Result<Arc<Self>> {
        recorder.lock().connection().execute_batch(SCHEMA).context("cannot create the LLM batch tables")?;
        Ok(Arc::new(BatchJobs {
            role: role.to_string(),
            stage: stage.to_string(),
            export: offline::exporting(),
            s: settings.batch.clone(),
            params: super::role_params(settings).to_string(),
            api: Api::new(settings)?,
            recorder,
            cancel,
            state: Mutex::new(State::default()),
            packer: std::sync::OnceLock::new(),
            head_packer: std::sync::OnceLock::new(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change is made whole under the lock: a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The answer to one request (`key`: its cache key, `hash`: its request hash, the
    /// `custom_id`), through a batch; `draft`: what its exchange records. The request is
    /// registered when this is called; the future only waits for its answer, holding no more
    /// than the receiver and the token (as an `async fn`, each call of a round kept its
    /// arguments, the draft's fields among them, in its future while it waited).
    pub(crate) fn ask(self: &Arc<Self>, key: &str, hash: &str, mut draft: Draft) -> impl Future<Output = Outcome> {
        draft.body = Packer::packed(&self.packer, draft.body);
        draft.head = Packer::packed(&self.head_packer, draft.head);
        let (tx, rx) = oneshot::channel();
        let now = match self.register(key, hash, Waiter { tx, draft }) {
            Ok(now) => now,
            Err(e) => Some(Outcome::Setup(format!("ledger: {e:#}"))),
        };
        let cancel = self.cancel.clone();
        match now {
            Some(now) => Either::Left(std::future::ready(now)),
            None => Either::Right(async move {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => Outcome::Cancelled,
                    r = rx => r.unwrap_or_else(|_| Outcome::Setup("the batch task ended without an answer".into())),
                }
            }),
        }
    }

    /// Where a request waits: with a batch of this process, an answer already in the
    /// ledger, an unfinished batch of the ledger, or the next batch. Under the state lock,
    /// so an answer stored meanwhile is never missed and a request never sent twice.
    fn register(self: &Arc<Self>, key: &str, hash: &str, w: Waiter) -> Result<Option<Outcome>> {
        let (Some(k), Some(h)) = (Digest::parse(key), Digest::parse(hash)) else {
            bail!("internal: request hash `{hash}` or cache key `{key}` is not a sha256 digest");
        };
        let mut guard = self.lock();
        let st = &mut *guard;
        if let Some(p) = st.sent.get_mut(&k) {
            p.waiters.push(w);
            return Ok(None);
        }
        if let Some(p) = st.gathering.get_mut(&k) {
            p.waiters.push(w);
            return Ok(None);
        }
        if let Some((batch, response)) = unrecorded_answer(&self.recorder.lock(), key)? {
            return Ok(Some(Outcome::Answer { response, batch, tries: 1 }));
        }
        let unfinished = unfinished_with(&self.recorder.lock(), key)?;
        if let Some(row) = unfinished {
            self.resume(st, row)?;
            if let Some(p) = st.sent.get_mut(&k) {
                p.waiters.push(w);
                return Ok(None);
            }
        }
        self.enqueue(st, k, Pending { hash: h, tries: 0, waiters: vec![w] });
        Ok(None)
    }

    /// Follow a batch another process left unfinished; its requests wait for it.
    fn resume(self: &Arc<Self>, st: &mut State, row: Row) -> Result<()> {
        if st.following.contains(&row.id) {
            return Ok(());
        }
        let requests = batch_requests(&self.recorder.lock(), row.id)?;
        st.following.insert(row.id);
        for &(key, hash) in &requests {
            st.sent.entry(key).or_insert_with(|| Pending { hash, tries: 1, waiters: Vec::new() });
        }
        tracing::info!(
            "role `{}`: following batch {} of an earlier run",
            self.role,
            row.batch_id.as_deref().unwrap_or("(being created)")
        );
        tokio::spawn(self.clone().follow(row, requests));
        Ok(())
    }

    /// Add a request to the next batch; a full one is sent first.
    fn enqueue(self: &Arc<Self>, st: &mut State, key: Digest, p: Pending) {
        let len = p.waiters.first().map_or(0, |w| line_len(&w.draft.body));
        let full = st.gathering.len() >= self.s.max_requests || st.bytes + len > self.s.max_bytes;
        // An exported round stays one file: `vllm run-batch` has no such limits, and a part
        // sent early would stop the stage before the rest of the round had asked.
        if !self.export && !st.gathering.is_empty() && full {
            self.send_gathered(st);
        }
        st.arrivals += 1;
        st.bytes += len;
        st.gathering.insert(key, p);
        if !st.gatherer {
            st.gatherer = true;
            tokio::spawn(self.clone().gather());
        }
    }

    /// Wait until no request has come for `gather_ms`, then send what has gathered.
    async fn gather(self: Arc<Self>) {
        let quiet = Duration::from_millis(self.s.gather_ms);
        let mut seen = None;
        loop {
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    self.lock().gatherer = false;
                    return;
                }
                _ = tokio::time::sleep(quiet) => {}
            }
            let mut guard = self.lock();
            let st = &mut *guard;
            if st.gathering.is_empty() || seen == Some(st.arrivals) {
                if !st.gathering.is_empty() {
                    self.send_gathered(st);
                }
                st.gatherer = false;
                return;
            }
            seen = Some(st.arrivals);
        }
    }

    /// What has gathered becomes a batch: its file, a line per request in cache key order
    /// written from the first waiting call's body, and a task that submits and follows it.
    fn send_gathered(self: &Arc<Self>, st: &mut State) {
        let group = std::mem::take(&mut st.gathering);
        // Its length exactly: what `enqueue` counted (a file of 50,000 requests is some 35 MB).
        let mut file = Vec::with_capacity(std::mem::take(&mut st.bytes) as usize);
        let mut requests = Vec::with_capacity(group.len());
        for (key, mut p) in group {
            // Every gathered request has a call (`register`, `after_failure`).
            let Some(first) = p.waiters.first() else { continue };
            write_line(&mut file, &p.hash, &first.draft.body.text());
            p.tries += 1;
            requests.push((key, p.hash));
            st.sent.insert(key, p);
        }
        tokio::spawn(self.clone().submit(requests, file));
    }

    /// Upload a round's file (`requests`: its `(key, hash)`, in the order of its lines) and
    /// record the batch in the ledger, then follow it.
    async fn submit(self: Arc<Self>, requests: Vec<(Digest, Digest)>, file: Vec<u8>) {
        if self.export {
            return self.export_round(&requests, &file);
        }
        // Without its key no batch call can succeed: the stage stops at once.
        if let Err(why) = &self.api.key {
            return self.fail_all(None, &keys_of(&requests), why);
        }
        // Moved into the upload, and dropped once it is done.
        let file_id = match self.api.upload(file, &self.cancel).await {
            Ok(id) => id,
            Err(CallError::Cancelled) => return,
            Err(CallError::Failed(why) | CallError::Gone(why)) => {
                // In the ledger as a refused batch (no file), so `llm batches` counts what
                // went live instead.
                let what: [&str; 4] = [&self.role, &self.stage, &self.api.base, ""];
                let refused = insert_batch(&self.recorder.lock(), what, "refused", &requests);
                if let Err(e) = refused {
                    tracing::warn!("cannot record a refused batch in the ledger: {e:#}");
                }
                return self.unanswered(None, &keys_of(&requests), &why);
            }
        };
        let what: [&str; 4] = [&self.role, &self.stage, &self.api.base, &file_id];
        let row = insert_batch(&self.recorder.lock(), what, "submitting", &requests);
        match row {
            Ok(id) => {
                self.lock().following.insert(id);
                self.follow(Row { id, batch_id: None, file_id, resumed: false }, requests).await;
            }
            Err(e) => self.fail_all(None, &keys_of(&requests), &format!("ledger: {e:#}")),
        }
    }

    /// Follow a batch to its end and answer its requests (`(key, hash)`).
    async fn follow(self: Arc<Self>, row: Row, requests: Vec<(Digest, Digest)>) {
        let ended = async {
            let row = self.created(row.clone()).await?;
            let b = self.poll(&row).await?;
            let (answers, failed) = self.download(&b, &requests).await?;
            Ok::<_, Stop>((b, answers, failed))
        }
        .await;
        match ended {
            Ok((b, answers, failed)) => self.ingest(row.id, &b, answers, failed),
            Err(Stop::Cancelled) => {}
            Err(Stop::Refused(why)) => {
                let marked = mark_refused(&self.recorder.lock(), row.id);
                if let Err(e) = marked {
                    tracing::warn!("cannot mark a refused batch in the ledger: {e:#}");
                }
                self.unanswered(Some(row.id), &keys_of(&requests), &why);
            }
            Err(Stop::Setup(why)) => self.fail_all(Some(row.id), &keys_of(&requests), &why),
        }
    }

    /// The row's batch, created now unless it has one (or, for a row another process left,
    /// the batch already made from its file).
    async fn created(&self, mut row: Row) -> Result<Row, Stop> {
        if row.batch_id.is_some() {
            return Ok(row);
        }
        let b = match self.api.create(&row.file_id, &self.s.completion_window, row.resumed, &self.cancel).await {
            Ok(b) => b,
            Err(CreateError::Call(CallError::Cancelled)) => return Err(Stop::Cancelled),
            Err(CreateError::Call(CallError::Failed(why) | CallError::Gone(why))) => return Err(Stop::Refused(why)),
            Err(CreateError::Uncertain(why)) => {
                let (role, file) = (&self.role, &row.file_id);
                return Err(Stop::Setup(format!(
                    "the batch of role `{role}` may have been created ({why}); it stays in the ledger and a rerun \
                     looks for it before creating another (if the server surely has none made from file {file}, \
                     `benchgen llm batches --forget {file}` lets the next run submit its requests again)"
                )));
            }
        };
        update_batch(&self.recorder.lock(), row.id, &b, false).map_err(|e| Stop::Setup(format!("ledger: {e:#}")))?;
        tracing::info!("role `{}`: batch {} of {} requests created", self.role, b.id, b.total);
        row.batch_id = Some(b.id);
        Ok(row)
    }

    /// Poll until the batch has finished, with a progress line of its request counts.
    async fn poll(&self, row: &Row) -> Result<Remote, Stop> {
        let id = row.batch_id.clone().unwrap_or_default();
        // No printer reaches the poller (its state goes to the log through `tracing`): the bar
        // is a terminal's only, as before plain progress lines existed.
        let pb = crate::printer::Printer::default().terminal_progress(0, "batch");
        pb.set_message(format!("{id} (role {})", self.role));
        let mut wait = self.s.poll_s;
        // A batch the server never finishes must not hold the stage for ever: past its
        // completion window (and a tenth more) it is taken as expired and its requests go on
        // as an expired batch's do (a next batch, then live).
        let window = Duration::from_secs(self.s.window_hours().unwrap_or(24) * 3_600);
        let deadline = tokio::time::Instant::now() + window + window / 10;
        loop {
            if tokio::time::Instant::now() >= deadline {
                pb.finish_and_clear();
                tracing::warn!(
                    "role `{}`: batch {id} not finished within its completion window; taken as expired",
                    self.role
                );
                let mut b = self.api.get(&id, &self.cancel).await.map_err(|e| self.unfollowable(&id, e))?;
                b.status = "expired".into();
                return Ok(b);
            }
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(Stop::Cancelled),
                _ = tokio::time::sleep(Duration::from_secs_f64(wait)) => {}
            }
            wait = (wait * 1.5).min(self.s.poll_max_s);
            let b = self.api.get(&id, &self.cancel).await.map_err(|e| self.unfollowable(&id, e))?;
            pb.set_length(b.total);
            pb.set_position(b.completed + b.failed);
            pb.set_message(format!("{id} (role {}): {}", self.role, b.status));
            update_batch(&self.recorder.lock(), row.id, &b, false)
                .map_err(|e| Stop::Setup(format!("ledger: {e:#}")))?;
            if b.finished() {
                pb.finish_and_clear();
                let (role, state) = (&self.role, &b.status);
                tracing::info!("role `{role}`: batch {id} {state}: {} answered, {} failed", b.completed, b.failed);
                return Ok(b);
            }
        }
    }

    /// Why batch `id` cannot be followed now: it stays unfinished in the ledger for a rerun,
    /// unless the server does not know it (a 404, which every rerun would meet again): then
    /// `llm batches --forget` gives it up.
    fn unfollowable(&self, id: &str, e: CallError) -> Stop {
        let role = &self.role;
        match e {
            CallError::Cancelled => Stop::Cancelled,
            CallError::Failed(why) => Stop::Setup(format!(
                "batch {id} of role `{role}` cannot be followed now ({why}); it stays in the ledger for a rerun"
            )),
            CallError::Gone(why) => Stop::Setup(format!(
                "batch {id} of role `{role}` is not on the server ({why}), so every rerun would stop here: \
                 `benchgen llm batches --forget {id}` gives it up, and the next run submits its requests again"
            )),
        }
    }

    /// The answers (by key) and the unanswered requests of a finished batch, from its
    /// output and error files; a request with no line in either is unanswered too.
    async fn download(&self, b: &Remote, requests: &[(Digest, Digest)]) -> Result<Downloaded, Stop> {
        let by_hash: BTreeMap<&Digest, Digest> = requests.iter().map(|(k, h)| (h, *k)).collect();
        let mut answers = Vec::new();
        let mut failed = BTreeMap::new();
        for file in [&b.output_file_id, &b.error_file_id].into_iter().flatten() {
            let bytes = self.api.content(file, &self.cancel).await.map_err(|e| self.unfollowable(&b.id, e))?;
            // Line by line, each answer kept as the text the ledger stores.
            for line in String::from_utf8_lossy(&bytes).lines().filter(|l| !l.trim().is_empty()) {
                let mut v: Value = serde_json::from_str(line).unwrap_or(Value::Null);
                let key = v["custom_id"].as_str().and_then(Digest::parse).and_then(|h| by_hash.get(&h).copied());
                let Some(key) = key else {
                    tracing::warn!("batch {}: a line of file {file} names no request of the batch", b.id);
                    continue;
                };
                match line_outcome(&self.api.redactor, &mut v) {
                    Ok(response) => answers.push(Answered::new(key, &response)),
                    Err(f) => {
                        failed.insert(key, f);
                    }
                }
            }
        }
        let answered: BTreeSet<&Digest> = answers.iter().map(|a| &a.key).collect();
        for (key, _) in requests {
            if !answered.contains(key) && !failed.contains_key(key) {
                let message =
                    if b.errors.is_empty() { "no answer in the batch's files".to_string() } else { b.errors.clone() };
                let f = Failure { status: format!("batch {}", b.status), message, retryable: true };
                failed.insert(*key, f);
            }
        }
        Ok((answers, failed))
    }

    /// Keep a round (`requests`, with the file of their lines) for the export file instead
    /// of sending it; its calls then stop the stage (a setup error: no artifacts), as only a
    /// first round can be exported.
    fn export_round(&self, requests: &[(Digest, Digest)], file: &[u8]) {
        // A line per request, in their order (a serialised body holds no raw newline).
        let lines = requests
            .iter()
            .zip(file.split_inclusive(|&b| b == b'\n'))
            .map(|((key, hash), line)| (key.text(), hash.text(), line.to_vec()))
            .collect();
        offline::keep(&self.role, &self.stage, &self.api.base, lines);
        let (n, role) = (requests.len(), &self.role);
        let why = format!("{n} requests of role `{role}` exported, not answered: {}", offline::EXPORT_STOP);
        self.fail_all(None, &keys_of(requests), &why);
    }
}

/// One line of an output or error file: the chat completion, or why there is none. The
/// answer's body is taken out of the parsed line, not copied (a copy was made and dropped for
/// every answer of a batch).
fn line_outcome(redactor: &Redactor, v: &mut Value) -> Result<Value, Failure> {
    // What `v["response"]["body"]` reads: null unless `response` is an object with a body.
    let mut body = v.get_mut("response").and_then(|r| r.get_mut("body")).map(Value::take).unwrap_or_default();
    // Stored and shown like a live answer: never with the key in it.
    redactor.value(&mut body);
    let code = v["response"]["status_code"].as_u64();
    match code {
        Some(200) if body["choices"][0]["message"].is_object() => Ok(body),
        Some(200) => Err(Failure {
            status: "malformed response".into(),
            message: format!("not a chat completion: {}", truncate(&body.to_string(), 300)),
            retryable: true,
        }),
        Some(c) => Err(Failure {
            status: format!("HTTP {c}"),
            message: truncate(&body.to_string(), 500),
            retryable: u16::try_from(c).is_ok_and(retryable_status),
        }),
        None => Err(Failure {
            status: format!("batch error {}", v["error"]["code"].as_str().unwrap_or("?")),
            message: truncate(&redactor.text(v["error"]["message"].as_str().unwrap_or("")), 500),
            retryable: true,
        }),
    }
}

impl BatchJobs {
    /// Store a finished batch's answers (durable before any call hears of them), then
    /// answer its requests.
    fn ingest(self: &Arc<Self>, row: i64, b: &Remote, answers: Vec<Answered>, failed: BTreeMap<Digest, Failure>) {
        let mut guard = self.lock();
        let texts = answers.iter().map(|a| (a.key.text(), a.response.as_str()));
        let stored = store_answers(&self.recorder.lock(), row, b, texts);
        if let Err(e) = stored {
            let why = format!("cannot store the answers of batch {} in the ledger: {e:#}", b.id);
            let keys: Vec<Digest> = answers.into_iter().map(|a| a.key).chain(failed.into_keys()).collect();
            drop(guard);
            return self.fail_all(Some(row), &keys, &why);
        }
        let st = &mut *guard;
        st.following.remove(&row);
        let taken: Vec<(Answered, Pending)> =
            answers.into_iter().filter_map(|a| st.sent.remove(&a.key).map(|p| (a, p))).collect();
        self.record_answers(&b.id, taken);
        for (key, f) in failed {
            if let Some(p) = st.sent.remove(&key) {
                self.after_failure(st, key, p, &f, true);
            }
        }
    }

    /// Record the exchanges of a batch's answers (`taken`: each with its request) for the
    /// calls that wait for them, all in one ledger transaction (a commit each made this the
    /// slowest part of a batch), then hand each call its exchange. The first call of a
    /// request records the answer as paid, the others as cache hits of it, as
    /// [`super::LlmClient`]'s `record_sent` records them one by one. A ledger error fails
    /// every call (the answers stay stored for a rerun).
    fn record_answers(&self, batch: &str, taken: Vec<(Answered, Pending)>) {
        let recorded = self.recorder.group(|g| {
            let mut ids = Vec::with_capacity(taken.len());
            for (a, p) in &taken {
                let key = a.key.text();
                let mut paid: Option<i64> = None;
                for w in &p.waiters {
                    let (d, cached) = (&w.draft, paid.is_some());
                    let payload = match paid {
                        None => {
                            let params = d.params.as_deref().unwrap_or(&self.params);
                            paid_text(d, params, &a.response, a.tokens, batch, p.tries)
                        }
                        Some(source) => hit_text(d, source, a.tokens, batch),
                    };
                    let parents: Vec<i64> = paid.into_iter().chain(d.parent).collect();
                    let id = g.record_text(crate::ledger::kind::LLM_EXCHANGE, &d.item, &payload, &parents)?;
                    if paid.is_none() {
                        cache_put_on(g.connection(), &key, id, g.time())?;
                        mark_recorded_on(g.connection(), &key, id)?;
                        paid = Some(id);
                    }
                    ids.push((id, cached));
                }
            }
            Ok(ids)
        });
        let mut ids = match recorded {
            Ok(ids) => ids.into_iter(),
            Err(e) => {
                let why = format!("ledger: {e:#}");
                for w in taken.into_iter().flat_map(|(_, p)| p.waiters) {
                    let _ = w.tx.send(Outcome::Setup(why.clone()));
                }
                return;
            }
        };
        for (mut a, p) in taken {
            let last = p.waiters.len().saturating_sub(1);
            for (i, (w, (event_id, cached))) in p.waiters.into_iter().zip(ids.by_ref()).enumerate() {
                // The last call (mostly the only one) takes the text itself, the others a copy.
                let response = if i == last { std::mem::take(&mut a.response) } else { a.response.clone() };
                let (tries, tokens) = (p.tries, a.tokens);
                let _ = w.tx.send(Outcome::Recorded(Recorded { response, event_id, cached, tries, tokens }));
            }
        }
    }

    /// A request its batch did not answer: into the next batch (when `resubmit`), live, or
    /// failed.
    fn after_failure(self: &Arc<Self>, st: &mut State, key: Digest, p: Pending, f: &Failure, resubmit: bool) {
        // A request of a resumed batch that no call asked for: a call that asks later
        // sends it anew.
        if p.waiters.is_empty() {
            return;
        }
        if resubmit && f.retryable && p.tries <= self.s.resubmits {
            tracing::info!(
                "role `{}`: request {} goes into the next batch ({}: {})",
                self.role,
                p.hash,
                f.status,
                f.message
            );
            // Its line is written again, into the next batch's file.
            return self.enqueue(st, key, p);
        }
        let outcome = if f.retryable && self.s.live_fallback {
            Outcome::Live { tries: p.tries }
        } else {
            Outcome::Failed { tries: p.tries, status: f.status.clone(), message: f.message.clone() }
        };
        for w in p.waiters {
            let _ = w.tx.send(outcome.clone());
        }
    }

    /// The requests of a batch the server would not take (upload or create refused after
    /// the role's retries) go live, or fail without `live_fallback`: not into another batch,
    /// which the server would refuse as well (a server with no files endpoint answers 404
    /// every time; an upload that failed after the role's retries is taken as refused too).
    /// A warning says so, naming the role, the server and its answer.
    fn unanswered(self: &Arc<Self>, row: Option<i64>, keys: &[Digest], why: &str) {
        let mut guard = self.lock();
        let st = &mut *guard;
        if let Some(row) = row {
            st.following.remove(&row);
        }
        let f = Failure { status: "batch refused".into(), message: why.to_string(), retryable: true };
        let mut asked = 0;
        for key in keys {
            if let Some(p) = st.sent.remove(key) {
                asked += usize::from(!p.waiters.is_empty());
                self.after_failure(st, *key, p, &f, false);
            }
        }
        if asked > 0 {
            let then = if self.s.live_fallback { "they go live" } else { "they fail (`live_fallback = false`)" };
            let (role, base) = (&self.role, &self.api.base);
            tracing::warn!("role `{role}`: the batch API at {base} would not take {asked} requests ({why}); {then}");
        }
    }

    /// The calls waiting for these requests fail with `why` (the stage stops).
    fn fail_all(&self, row: Option<i64>, keys: &[Digest], why: &str) {
        let mut st = self.lock();
        if let Some(row) = row {
            st.following.remove(&row);
        }
        for key in keys {
            if let Some(p) = st.sent.remove(key) {
                for w in p.waiters {
                    let _ = w.tx.send(Outcome::Setup(why.to_string()));
                }
            }
        }
    }
}

// ---- the ledger tables ----

/// Record a batch about to be created from a file (`what`: role, stage, base URL, file id;
/// `state` `submitting`), or one whose upload the server refused (`refused`, no file id,
/// taken at once), with its requests `(key, hash)`.
fn insert_batch(l: &Ledger, what: [&str; 4], state: &str, requests: &[(Digest, Digest)]) -> Result<i64> {
    let tx = l.connection().unchecked_transaction()?;
    let now = crate::ledger::now();
    tx.execute(
        "INSERT INTO llm_batches(role, stage, base_url, input_file_id, state, requests, created_at, updated_at, done)
         VALUES (?1, ?2, ?3, ?4, ?7, ?5, ?6, ?6, ?8)",
        params![what[0], what[1], what[2], what[3], requests.len() as i64, now, state, state == "refused"],
    )?;
    let id = tx.last_insert_rowid();
    {
        let mut ins =
            tx.prepare_cached("INSERT OR IGNORE INTO llm_batch_requests(batch, key, hash) VALUES (?1, ?2, ?3)")?;
        for (key, hash) in requests {
            ins.execute(params![id, key.text(), hash.text()])?;
        }
    }
    tx.commit()?;
    Ok(id)
}

fn update_batch(l: &Ledger, id: i64, b: &Remote, done: bool) -> Result<()> {
    update_row(l.connection(), id, b, done)
}

fn update_row(c: &Connection, id: i64, b: &Remote, done: bool) -> Result<()> {
    c.execute(
        "UPDATE llm_batches SET batch_id = ?2, state = ?3, completed = ?4, failed = ?5, output_file_id = ?6,
         error_file_id = ?7, updated_at = ?8, done = ?9 WHERE id = ?1",
        params![
            id,
            b.id,
            b.status,
            b.completed as i64,
            b.failed as i64,
            b.output_file_id,
            b.error_file_id,
            crate::ledger::now(),
            done
        ],
    )?;
    Ok(())
}

fn mark_refused(l: &Ledger, id: i64) -> Result<()> {
    l.connection().execute(
        "UPDATE llm_batches SET state = 'refused', done = 1, updated_at = ?2 WHERE id = ?1",
        params![id, crate::ledger::now()],
    )?;
    Ok(())
}

/// A finished batch's answers `(key, chat completion as JSON text)` and its final state,
/// in one transaction.
fn store_answers<'a, K: AsRef<str>>(
    l: &Ledger,
    id: i64,
    b: &Remote,
    answers: impl IntoIterator<Item = (K, &'a str)>,
) -> Result<()> {
    let tx = l.connection().unchecked_transaction()?;
    {
        let mut ins = tx.prepare_cached(
            "INSERT OR REPLACE INTO llm_batch_results(key, batch, response, recorded_event) VALUES (?1, ?2, ?3, NULL)",
        )?;
        for (key, response) in answers {
            ins.execute(params![key.as_ref(), id, response])?;
        }
    }
    update_row(&tx, id, b, true)?;
    tx.commit()?;
    Ok(())
}

/// Note that the answer to `key` a batch brought is recorded as exchange `event` (it is not
/// handed out again from `llm_batch_results`).
pub(crate) fn mark_recorded(recorder: &Recorder, key: &str, event: i64) {
    let r = mark_recorded_on(recorder.lock().connection(), key, event);
    if let Err(e) = r {
        tracing::warn!("cannot note a recorded batch answer in the ledger: {e}");
    }
}

/// [`mark_recorded`] on `c` (the ledger, or a transaction of it).
fn mark_recorded_on(c: &Connection, key: &str, event: i64) -> rusqlite::Result<usize> {
    c.prepare_cached("UPDATE llm_batch_results SET recorded_event = ?2 WHERE key = ?1")?.execute(params![key, event])
}

/// The exchange that recorded the answer batch `batch` brought for `key`, once a call has:
/// identical requests of one round share that answer, and the calls after the first
/// record it as cache hits of that exchange ([`super::LlmClient`]'s `record_sent`).
pub(crate) fn recorded_event(recorder: &Recorder, key: &str, batch: &str) -> Result<Option<i64>> {
    let l = recorder.lock();
    let event = l
        .connection()
        .prepare_cached(
            "SELECT r.recorded_event FROM llm_batch_results r JOIN llm_batches b ON b.id = r.batch
             WHERE r.key = ?1 AND COALESCE(b.batch_id, '') = ?2",
        )?
        .query_row(params![key, batch], |r| r.get::<_, Option<i64>>(0))
        .optional()?;
    Ok(event.flatten())
}

/// For a role that is not in batch mode, and for any role in replay mode: an answer a batch
/// brought for `key` and no exchange recorded (a run with `--batch` stopped after its batch
/// finished, or `llm batch-import`), so that turning batch mode off neither loses it nor
/// pays for the request again, and replay answers it as it answers a recorded exchange.
/// None in a ledger that never held a batch.
pub(crate) fn stored_answer(recorder: &Recorder, key: &str) -> Result<Option<(String, Value)>> {
    let l = recorder.lock();
    let tables: i64 = l.connection().query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('llm_batch_results', 'llm_batches')",
        [],
        |r| r.get(0),
    )?;
    if tables < 2 {
        return Ok(None);
    }
    unrecorded_answer(&l, key)
}

/// An answer a batch brought for `key` that no exchange has recorded yet, with the
/// batch's id.
fn unrecorded_answer(l: &Ledger, key: &str) -> Result<Option<(String, Value)>> {
    // Prepared once: every request of a batch role asks (100,000 in a round of a stage).
    let row: Option<(String, String)> = l
        .connection()
        .prepare_cached(
            "SELECT COALESCE(b.batch_id, ''), r.response FROM llm_batch_results r JOIN llm_batches b ON b.id = r.batch
             WHERE r.key = ?1 AND r.recorded_event IS NULL",
        )?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(row.and_then(|(batch, text)| serde_json::from_str(&text).ok().map(|v| (batch, v))))
}

/// The newest unfinished batch that holds `key`.
fn unfinished_with(l: &Ledger, key: &str) -> Result<Option<Row>> {
    Ok(l.connection()
        .prepare_cached(
            "SELECT b.id, b.batch_id, b.input_file_id FROM llm_batch_requests q JOIN llm_batches b ON b.id = q.batch
             WHERE q.key = ?1 AND b.done = 0 ORDER BY b.id DESC LIMIT 1",
        )?
        .query_row([key], |r| Ok(Row { id: r.get(0)?, batch_id: r.get(1)?, file_id: r.get(2)?, resumed: true }))
        .optional()?)
}

/// The cache keys of requests `(key, hash)`.
fn keys_of(requests: &[(Digest, Digest)]) -> Vec<Digest> {
    requests.iter().map(|(k, _)| *k).collect()
}

/// `(key, hash)` of every request of a batch. A row whose key or hash is not a sha256 digest
/// was not written by a client (which writes nothing else) and is left out, with a warning:
/// a call that asks for it sends it anew.
fn batch_requests(l: &Ledger, id: i64) -> Result<Vec<(Digest, Digest)>> {
    let mut st =
        l.connection().prepare_cached("SELECT key, hash FROM llm_batch_requests WHERE batch = ?1 ORDER BY key")?;
    let rows = st.query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (key, hash) = row?;
        match (Digest::parse(&key), Digest::parse(&hash)) {
            (Some(k), Some(h)) => out.push((k, h)),
            _ => tracing::warn!("batch row {id} of the ledger: request {hash} (key {key}) is not a sha256 digest"),
        }
    }
    Ok(out)
}

// ---- `benchgen llm batches` ----

/// One batch of the project, for `benchgen llm batches`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BatchInfo {
    /// The provider's id (none while it was being created).
    pub batch_id: Option<String>,
    pub role: String,
    pub stage: String,
    /// The provider's status (`validating`, `in_progress`, `completed`, `expired`, …), or
    /// `submitting` (uploaded, not yet created), `refused` (upload or create refused),
    /// `exported` or `forgotten` (`benchgen llm batches --forget`).
    pub state: String,
    /// Whether benchgen has taken its answers (or given up on it).
    pub done: bool,
    /// The uploaded file it was made from (empty when the upload was refused): the name
    /// `--forget` takes for a batch that never got its id.
    pub input_file_id: String,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub created_at: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The answers' tokens at the role's batch prices; none without `prices`.
    pub cost_usd: Option<f64>,
}

/// Every batch in the project's ledger, oldest first.
pub fn list(settings: &Settings) -> Result<Vec<BatchInfo>> {
    let Some(l) = Ledger::open_existing(&settings.artifacts)? else { return Ok(Vec::new()) };
    let c = l.connection();
    let tables = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'llm_batches'";
    let exists: i64 = c.query_row(tables, [], |r| r.get(0))?;
    if exists == 0 {
        return Ok(Vec::new());
    }
    let mut st = c.prepare(
        "SELECT b.batch_id, b.role, b.stage, b.state, b.done, b.requests, b.completed, b.failed, b.created_at,
                CAST(COALESCE(SUM(json_extract(r.response, '$.usage.prompt_tokens')), 0) AS INTEGER),
                CAST(COALESCE(SUM(json_extract(r.response, '$.usage.completion_tokens')), 0) AS INTEGER),
                b.input_file_id
         FROM llm_batches b LEFT JOIN llm_batch_results r ON r.batch = b.id GROUP BY b.id ORDER BY b.id",
    )?;
    let n = |r: &rusqlite::Row, i: usize| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
    let rows = st.query_map([], |r| {
        Ok(BatchInfo {
            batch_id: r.get(0)?,
            role: r.get(1)?,
            stage: r.get(2)?,
            state: r.get(3)?,
            done: r.get(4)?,
            input_file_id: r.get(11)?,
            requests: n(r, 5)?,
            completed: n(r, 6)?,
            failed: n(r, 7)?,
            created_at: r.get(8)?,
            prompt_tokens: n(r, 9)?,
            completion_tokens: n(r, 10)?,
            cost_usd: None,
        })
    })?;
    let mut out = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    let roles = &settings.section::<super::config::LlmSettings>().roles;
    for b in &mut out {
        let prices = roles.get(&b.role).and_then(|r| r.prices);
        b.cost_usd = prices.map(|p| p.cost(b.prompt_tokens, b.completion_tokens, true));
    }
    Ok(out)
}

/// What `benchgen llm batches --forget` gave up.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Forgotten {
    /// The id it was named by: the provider's batch id, or its input file's.
    pub batch: String,
    pub role: String,
    pub stage: String,
    /// Its state before: what the ledger last knew of it.
    pub was: String,
    pub requests: u64,
}

/// Give up on an unfinished batch (`id`: the provider's batch id, or for one that never got
/// it, its input file's id), such as one the server no longer has: a poll or download that
/// answers 404 stops every run that follows the batch. Its row stays, as state `forgotten`
/// and taken, so `llm batches` still shows what was sent; no run follows it any more, and
/// the next run of its stage submits its requests again.
pub fn forget(settings: &Settings, id: &str) -> Result<Forgotten> {
    let unknown = || {
        anyhow::anyhow!(
            "no batch `{id}` in the ledger: `benchgen llm batches` lists them (one not yet created goes by its \
             `input_file_id` in `--json`)"
        )
    };
    let Some(l) = Ledger::open_existing(&settings.artifacts)? else { return Err(unknown()) };
    let c = l.connection();
    let tables = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'llm_batches'";
    if c.query_row(tables, [], |r| r.get::<_, i64>(0))? == 0 {
        return Err(unknown());
    }
    // An unfinished row first: an id shared by rows (an export, one row per role) is
    // forgotten where it still matters.
    let found = c
        .query_row(
            "SELECT id, done, role, stage, state, requests FROM llm_batches
             WHERE batch_id = ?1 OR (batch_id IS NULL AND input_file_id = ?1) ORDER BY done, id DESC LIMIT 1",
            [id],
            |r| {
                let info = Forgotten {
                    batch: id.to_string(),
                    role: r.get(2)?,
                    stage: r.get(3)?,
                    was: r.get(4)?,
                    requests: r.get::<_, i64>(5)?.max(0) as u64,
                };
                Ok((r.get::<_, i64>(0)?, r.get::<_, bool>(1)?, info))
            },
        )
        .optional()?;
    let Some((row, done, info)) = found else { return Err(unknown()) };
    if done {
        bail!("batch `{id}` is not followed any more (state `{}`): there is nothing to forget", info.was);
    }
    c.execute(
        "UPDATE llm_batches SET state = 'forgotten', done = 1, updated_at = ?2 WHERE id = ?1",
        params![row, crate::ledger::now()],
    )?;
    Ok(info)
}

pub fn render_forgotten(f: &Forgotten) -> String {
    let Forgotten { batch, role, stage, was, requests } = f;
    format!(
        "batch {batch} (role {role}, stage {stage}, was {was}) forgotten: no run follows it any more, and the next \
         run of `{stage}` submits its {requests} requests again\n"
    )
}

pub fn render(rows: &[BatchInfo]) -> String {
    if rows.is_empty() {
        return "no batch jobs in the ledger\n".into();
    }
    let wb = rows.iter().map(|r| r.batch_id.as_deref().unwrap_or("-").len()).chain([5]).max().unwrap_or(5);
    let ws = rows.iter().map(|r| r.stage.len()).chain([5]).max().unwrap_or(5);
    let wr = rows.iter().map(|r| r.role.len()).chain([4]).max().unwrap_or(4);
    let wt = rows.iter().map(|r| r.state.len()).chain([5]).max().unwrap_or(5);
    let line = |c: [&str; 10]| {
        format!(
            "{:<wb$} {:<ws$} {:<wr$} {:<wt$} {:<5} {:>8} {:>9} {:>6} {:>9}  {}\n",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
        )
    };
    let mut out =
        line(["batch", "stage", "role", "state", "taken", "requests", "completed", "failed", "cost_usd", "created"]);
    for r in rows {
        let cost = r.cost_usd.map(|c| format!("{c:.4}")).unwrap_or_else(|| "-".into());
        let nums = [r.requests, r.completed, r.failed].map(|n| n.to_string());
        let taken = if r.done { "yes" } else { "no" };
        let (id, at) = (r.batch_id.as_deref().unwrap_or("-"), r.created_at.as_str());
        out.push_str(&line([id, &r.stage, &r.role, &r.state, taken, &nums[0], &nums[1], &nums[2], &cost, at]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::transport::Sent;

    /// The ingest of a batch writes exchanges and JSONL lines from text: byte for byte what
    /// the payload functions of a call that records its own answer, and `serde_json`, write;
    /// a line is as long as counted before it is written.
    #[test]
    fn payloads_and_lines_written_from_text_are_what_the_json_values_serialise_to() {
        let hash = format!("sha256:{}", "0123456789abcdef".repeat(4));
        let base = json!({
            "role": "r", "provider": "vllm", "model": "m/ü", "item": "i \"q\"\n", "template": null,
            "template_hash": null, "request_hash": hash, "endpoint": "vllm http://h/v1",
        });
        let params = json!({"temperature": 0.1, "top_p": null, "max_tokens": 5, "seed": 7});
        let body = json!({
            "model": "m", "messages": [{"role": "user", "content": "Ünïcode \"quoted\" \\ \t {x}"}],
            "temperature": 0.1 + 0.2, "response_format": {"type": "json_schema", "json_schema": {
                "name": "V", "schema": {"type": "object", "properties": {"n": {"type": "number", "minimum": 1e-7}}}}},
            "stream": false,
        });
        let response = json!({
            "id": "c1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"n\": 1}"}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15},
        });
        let plain = Draft::new(&base, serde_json::to_string(&body).unwrap(), ("i \"q\"\n", Some(3)));
        // The same, packed as `BatchJobs::ask` packs it: against another request's body and
        // exchange fields.
        let mut packed = Draft::new(&base, serde_json::to_string(&body).unwrap(), ("i \"q\"\n", Some(3)));
        let (other_body, other_head) =
            (body.to_string().replace("quoted", "other"), base.to_string().replace("i \\\"q", "j"));
        packed.body = Packer::new(other_body.as_bytes()).unwrap().pack(packed.body);
        packed.head = Packer::new(other_head.as_bytes()).unwrap().pack(packed.head);
        assert!(packed.body.packer.is_some() && packed.head.packer.is_some());
        let digest = Digest::parse(&hash).unwrap();
        let a = Answered::new(digest, &response);
        assert_eq!((a.response.as_str(), a.tokens), (response.to_string().as_str(), (11, 4)));

        let usage = json!({"prompt_tokens": 11, "completion_tokens": 4});
        let sent =
            Sent { response, attempts: 2, latency_ms: 0, replica: 0, batch: Some("batch_1".into()), started_at: None };
        let params_text = params.to_string();
        let paid = crate::llm::sent_payload(base.clone(), params, body.clone(), &sent, usage.clone());
        let hit = crate::llm::hit_payload(base, 42, &json!({"usage": usage, "batch": "batch_1"}));
        let mut line = serde_json::to_vec(&json!({
            "custom_id": hash, "method": "POST", "url": "/v1/chat/completions", "body": body,
        }))
        .unwrap();
        line.push(b'\n');
        for d in [&plain, &packed] {
            assert_eq!(paid_text(d, &params_text, &a.response, a.tokens, "batch_1", 2), paid.to_string());
            assert_eq!(hit_text(d, 42, a.tokens, "batch_1"), hit.to_string());
            assert_eq!(line_len(&d.body), line.len() as u64);
            let mut file = b"before\n".to_vec();
            write_line(&mut file, &digest, &d.body.text());
            assert_eq!(String::from_utf8(file[7..].to_vec()).unwrap(), String::from_utf8(line.clone()).unwrap());
        }
    }

    /// A waiting call's body is held compressed against its role's first body and comes back
    /// byte for byte, its line counted from the text; a body compression does not shrink
    /// stays text.
    #[test]
    fn a_packed_body_comes_back_byte_for_byte_and_smaller() {
        let system = "You judge one item of a benchmark. ".repeat(20);
        let first = json!({"model": "m", "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": "Item 1"}]})
        .to_string();
        let other = first.replace("Item 1", "Item 2: Ünïcode \"q\"");
        let packer = Packer::new(first.as_bytes()).unwrap();
        let body = packer.pack(Body::plain(other.clone()));
        assert!(body.packer.is_some() && body.bytes.len() * 4 < other.len(), "{} of {}", body.bytes.len(), other.len());
        assert_eq!((body.text(), body.len()), (std::borrow::Cow::Borrowed(other.as_str()), other.len()));
        let tiny = packer.pack(Body::plain("{}".into()));
        assert!(tiny.packer.is_none() && tiny.text() == "{}");
    }

    /// Request hashes and cache keys are kept as their 32 bytes: the text comes back byte for
    /// byte, they sort as their texts do (a batch file's lines stay in cache key order), and
    /// anything but `sha256:` and 64 lowercase hex digits is none, as its text would not come
    /// back.
    #[test]
    fn a_digest_gives_back_its_text_and_sorts_as_the_text_does() {
        let mut texts: Vec<String> = (0..200)
            .flat_map(|i| {
                let (hash, key) = crate::llm::request_hashes(format!("{{\"n\":{i}}}").as_bytes(), "vllm http://h/v1");
                [hash, key]
            })
            .collect();
        texts.extend([format!("sha256:{}", "0".repeat(64)), format!("sha256:{}", "f".repeat(64))]);
        let mut digests: Vec<Digest> = texts.iter().map(|t| Digest::parse(t).unwrap()).collect();
        for (t, d) in texts.iter().zip(&digests) {
            assert_eq!((&d.text(), &d.to_string()), (t, t));
        }
        texts.sort();
        digests.sort();
        assert_eq!(digests.iter().map(Digest::text).collect::<Vec<_>>(), texts);

        let hex = &texts[0]["sha256:".len()..];
        let bad = [
            String::new(),
            "sha256:".into(),
            hex.to_string(),
            format!("sha256:{}", &hex[1..]),
            format!("sha256:{hex}0"),
            format!("SHA256:{hex}"),
            format!("sha256:{}", "AB".repeat(32)),
            format!("sha256:{}g", &hex[1..]),
            format!("sha256: {}", &hex[1..]),
        ];
        for b in &bad {
            assert_eq!(Digest::parse(b), None, "{b}");
        }
    }

    /// A line of an output or error file gives its chat completion (the key redacted), or why
    /// there is none, whatever the line's shape: the answer is taken out of the parsed line, as
    /// `v["response"]["body"]` reads it, never by writing into a line that has no such place.
    #[test]
    fn a_batch_file_line_gives_its_redacted_answer_or_why_not_whatever_its_shape() {
        let answer = json!({"choices": [{"message": {"role": "assistant", "content": "{}"}}], "usage": {"n": 1}});
        let none = Redactor::default();
        let mut line = json!({"custom_id": "h", "response": {"status_code": 200, "body": answer.clone()}});
        assert_eq!(line_outcome(&none, &mut line).unwrap(), answer);
        let echoed = json!({"choices": [{"message": {"content": "key sk-test-0123456789"}}]});
        let mut line = json!({"custom_id": "h", "response": {"status_code": 200, "body": echoed}});
        let redacted = line_outcome(&Redactor::new("sk-test-0123456789"), &mut line).unwrap();
        assert_eq!(redacted["choices"][0]["message"]["content"], "key [redacted]");
        let why = |mut v: Value| {
            let f = line_outcome(&none, &mut v).unwrap_err();
            format!("{} {}", f.status, f.retryable)
        };
        assert_eq!(why(json!({"response": {"status_code": 200, "body": {"x": 1}}})), "malformed response true");
        assert_eq!(why(json!({"response": {"status_code": 400, "body": {"error": "e"}}})), "HTTP 400 false");
        assert_eq!(why(json!({"response": {"status_code": 429}})), "HTTP 429 true");
        assert_eq!(why(json!({"error": {"code": "c", "message": "m"}})), "batch error c true");
        assert_eq!(why(json!({"response": "not an object", "error": {"code": "c"}})), "batch error c true");
        assert_eq!(why(json!({"response": [1]})), "batch error ? true");
    }
}
