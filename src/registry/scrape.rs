//! `benchgen registry scrape --source NAME`: page through a registry API and keep every
//! page as received, politely and resumably.
//!
//! Layout of one snapshot (`<raw>/<source>/<snapshot>/`):
//! - `page-000001.json` … the list pages, bytes exactly as received;
//! - `details/<name>.json` (Smithery) the detail document of each server, for its tools;
//! - `state.json` what has been fetched: per page its request, file, hash, ETag, item
//!   count and what comes next; `complete` once the last page (and detail) is saved.
//!
//! A page is written (atomically) before `state.json` records it, and a rerun adopts a
//! page file that the state does not list yet, so a killed scrape never fetches a saved
//! page again. The API key is read from the environment variable that `api_key_env`
//! names and only ever goes into the `Authorization` header: not into pages, state,
//! logs or errors.
//!
//! Politeness: a GCRA rate limiter (`rate_per_s`, `burst`), retries with jittered
//! exponential back-off that honour `Retry-After` on 408/429/5xx, timeouts, a
//! descriptive User-Agent and `If-None-Match` with the previous complete snapshot's ETag
//! for the same request. Defensive stops (a cursor seen twice, more pages than
//! `max_pages`, an oversized response, a page of the wrong shape) name the source, the
//! page and the field.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::pages::{self, Next, PageError, SourceKind};
use crate::store::{sha256_hex, to_json_bytes, write_atomic};

pub const USER_AGENT: &str = concat!(
    "benchgen/",
    env!("CARGO_PKG_VERSION"),
    " (MCP registry snapshot for tool-use benchmarks; polite: rate-limited, resumable, conditional requests)"
);

/// `[registry.sources.<name>]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSettings {
    pub kind: SourceKind,
    /// e.g. `https://glama.ai` (Glama), `https://registry.modelcontextprotocol.io` (official),
    /// `https://registry.smithery.ai` (Smithery).
    pub base_url: String,
    /// Name of the environment variable holding the Bearer key (never the key itself).
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default = "default_page_size")]
    pub page_size: u32,
    /// Requests per second (all requests of this source, retries included).
    #[serde(default = "default_rate")]
    pub rate_per_s: f64,
    /// Requests that may go out back to back before the rate applies.
    #[serde(default = "default_burst")]
    pub burst: u32,
    /// Stop (with an error) rather than fetch more list pages than this.
    #[serde(default = "default_max_pages")]
    pub max_pages: u64,
    /// Whole-request timeout.
    #[serde(default = "default_timeout")]
    pub timeout_secs: f64,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: f64,
    /// A larger response stops the scrape.
    #[serde(default = "default_max_response")]
    pub max_response_bytes: u64,
    /// Attempts per request (the first one included).
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// Base of the exponential back-off when the server sends no `Retry-After`.
    #[serde(default = "default_backoff")]
    pub backoff_ms: u64,
    /// A `Retry-After` longer than this stops the scrape instead of sleeping.
    #[serde(default = "default_max_retry_after")]
    pub max_retry_after_secs: f64,
    /// Search text passed to the API (`query` / `search` / `q`); empty: everything.
    #[serde(default)]
    pub query: String,
    /// Smithery: fetch each server's detail document (its tools). Ignored elsewhere.
    #[serde(default = "yes")]
    pub details: bool,
    /// Folder of snapshots, relative to the root (default `raw/registry`).
    #[serde(default = "default_folder")]
    pub folder: PathBuf,
}

fn default_page_size() -> u32 {
    100
}
fn default_rate() -> f64 {
    2.0
}
fn default_burst() -> u32 {
    1
}
fn default_max_pages() -> u64 {
    10_000
}
fn default_timeout() -> f64 {
    30.0
}
fn default_connect_timeout() -> f64 {
    10.0
}
fn default_max_response() -> u64 {
    16 * 1024 * 1024
}
fn default_attempts() -> u32 {
    6
}
fn default_backoff() -> u64 {
    500
}
fn default_max_retry_after() -> f64 {
    120.0
}
fn yes() -> bool {
    true
}
fn default_folder() -> PathBuf {
    PathBuf::from("raw/registry")
}

impl SourceSettings {
    /// Problems with this section, each under `loc` (`registry.sources.glama`).
    pub fn check(&self, loc: &str) -> Vec<crate::error::Problem> {
        use crate::error::Problem;
        let mut p = Vec::new();
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            p.push(Problem::new(format!("{loc}.base_url"), "must start with http:// or https://"));
        }
        let max_size = if self.kind == SourceKind::Official { u32::MAX } else { 100 };
        if self.page_size == 0 || self.page_size > max_size {
            p.push(Problem::new(format!("{loc}.page_size"), format!("must be between 1 and {max_size}")));
        }
        if !(self.rate_per_s.is_finite() && self.rate_per_s > 0.0) {
            p.push(Problem::new(format!("{loc}.rate_per_s"), "must be a positive number"));
        }
        if self.burst == 0 {
            p.push(Problem::new(format!("{loc}.burst"), "must be at least 1"));
        }
        if self.max_attempts == 0 {
            p.push(Problem::new(format!("{loc}.max_attempts"), "must be at least 1"));
        }
        if !(self.timeout_secs > 0.0 && self.connect_timeout_secs > 0.0) {
            p.push(Problem::new(format!("{loc}.timeout_secs"), "timeouts must be positive"));
        }
        p
    }
}

/// `state.json` of a snapshot.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub source: String,
    pub kind: SourceKind,
    pub snapshot: String,
    pub base_url: String,
    pub page_size: u32,
    pub query: String,
    pub started_at: String,
    #[serde(default)]
    pub finished_at: Option<String>,
    pub pages: Vec<PageRecord>,
    /// Smithery detail documents by qualified name.
    #[serde(default)]
    pub details: BTreeMap<String, DetailRecord>,
    pub complete: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PageRecord {
    pub page: u64,
    /// Path and query of the request (no host, no key).
    pub request: String,
    pub file: String,
    pub sha256: String,
    #[serde(default)]
    pub etag: Option<String>,
    pub items: usize,
    pub next: Next,
    pub fetched_at: String,
    /// Answered 304: the bytes are the previous snapshot's.
    #[serde(default)]
    pub not_modified: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DetailRecord {
    pub request: String,
    pub file: String,
    pub sha256: String,
    #[serde(default)]
    pub etag: Option<String>,
    pub fetched_at: String,
}

/// What a scrape did.
#[derive(Debug, Clone, Serialize)]
pub struct ScrapeReport {
    pub source: String,
    pub snapshot: String,
    pub folder: String,
    /// Pages fetched now / adopted from files a killed run saved / already recorded.
    pub pages_fetched: u64,
    pub pages_adopted: u64,
    pub pages_total: u64,
    pub not_modified: u64,
    pub details_fetched: u64,
    pub servers: usize,
    pub duplicates: usize,
    pub requests: u64,
    pub retries: u64,
    pub elapsed_s: f64,
    pub complete: bool,
}

/// A failure that stops the scrape.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error(transparent)]
    Page(#[from] PageError),
    #[error("source `{source_name}`, {page}: {message}")]
    Http { source_name: String, page: String, message: String },
}

/// GCRA: requests are spaced `1/rate` apart with up to `burst` at once.
pub struct RateLimiter {
    interval: Duration,
    tolerance: Duration,
    tat: Instant,
}

impl RateLimiter {
    pub fn new(rate_per_s: f64, burst: u32) -> Self {
        let interval = Duration::from_secs_f64(1.0 / rate_per_s);
        Self { interval, tolerance: interval * burst.saturating_sub(1), tat: Instant::now() }
    }

    /// Wait for the next slot.
    pub async fn acquire(&mut self) {
        let now = Instant::now();
        let tat = self.tat.max(now);
        let earliest = tat.checked_sub(self.tolerance).unwrap_or(now);
        if earliest > now {
            tokio::time::sleep_until(earliest.into()).await;
        }
        self.tat = tat + self.interval;
    }
}

/// Parse `Retry-After`: seconds or an HTTP date.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(s) = v.parse::<f64>() {
        return (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s));
    }
    let t = jiff::fmt::rfc2822::parse(v).ok()?;
    let secs = t.timestamp().as_second() - jiff::Timestamp::now().as_second();
    Some(Duration::from_secs(secs.max(0) as u64))
}

/// One HTTP exchange's usable result.
enum Fetched {
    Body { bytes: Vec<u8>, etag: Option<String> },
    NotModified,
}

struct Fetcher<'a> {
    name: &'a str,
    cfg: &'a SourceSettings,
    http: reqwest::Client,
    key: Option<String>,
    limiter: RateLimiter,
    rng: rand_chacha::ChaCha8Rng,
    requests: u64,
    retries: u64,
    /// The next request's rate-limiter slot was already waited for.
    prepaid: bool,
}

impl Fetcher<'_> {
    fn url(&self, request: &str) -> String {
        format!("{}{request}", self.cfg.base_url.trim_end_matches('/'))
    }

    /// GET with retries. `what` names the page for errors.
    async fn get(&mut self, request: &str, what: &str, etag: Option<&str>) -> Result<Fetched, ScrapeError> {
        let url = self.url(request);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            if !std::mem::take(&mut self.prepaid) {
                self.limiter.acquire().await;
            }
            self.requests += 1;
            let outcome = self.once(&url, etag).await;
            let (message, retry_after) = match outcome {
                Attempt::Done(f) => return Ok(f),
                Attempt::Fatal(message) => {
                    return Err(ScrapeError::Http { source_name: self.name.into(), page: what.into(), message });
                }
                Attempt::Retry { message, retry_after } => (message, retry_after),
            };
            if attempt >= self.cfg.max_attempts {
                return Err(ScrapeError::Http {
                    source_name: self.name.into(),
                    page: what.into(),
                    message: format!("gave up after {attempt} attempts; last: {message}"),
                });
            }
            let wait = match retry_after {
                Some(d) if d.as_secs_f64() > self.cfg.max_retry_after_secs => {
                    return Err(ScrapeError::Http {
                        source_name: self.name.into(),
                        page: what.into(),
                        message: format!(
                            "{message}; the server asks to wait {:.0} s, more than `max_retry_after_secs` ({:.0} s)",
                            d.as_secs_f64(),
                            self.cfg.max_retry_after_secs
                        ),
                    });
                }
                Some(d) => d,
                None => {
                    let base = self.cfg.backoff_ms.saturating_mul(1 << (attempt - 1).min(16)).min(60_000);
                    Duration::from_millis((base as f64 * self.rng.random_range(0.5..1.0)) as u64)
                }
            };
            tracing::warn!("{}: {what}: {message}; retry {attempt} in {:.1} s", self.name, wait.as_secs_f64());
            self.retries += 1;
            tokio::time::sleep(wait).await;
        }
    }

    async fn once(&self, url: &str, etag: Option<&str>) -> Attempt {
        let mut req = self.http.get(url).header(reqwest::header::ACCEPT, "application/json");
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        if let Some(e) = etag {
            req = req.header(reqwest::header::IF_NONE_MATCH, e);
        }
        let mut resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Attempt::Retry { message: describe(&e), retry_after: None },
        };
        let status = resp.status().as_u16();
        let retry_after =
            resp.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
        if status == 304 && etag.is_some() {
            return Attempt::Done(Fetched::NotModified);
        }
        let new_etag = resp.headers().get(reqwest::header::ETAG).and_then(|v| v.to_str().ok()).map(str::to_string);
        let max = self.cfg.max_response_bytes;
        if let Some(len) = resp.content_length()
            && len > max
        {
            return Attempt::Fatal(format!(
                "response is larger than `max_response_bytes` ({max}): Content-Length {len}; field `$`"
            ));
        }
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(c)) => {
                    body.extend_from_slice(&c);
                    if body.len() as u64 > max {
                        return Attempt::Fatal(format!(
                            "response is larger than `max_response_bytes` ({max}); field `$`"
                        ));
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Attempt::Retry {
                        message: format!("HTTP {status}: body cut off: {}", describe(&e)),
                        retry_after: None,
                    };
                }
            }
        }
        match status {
            200..=299 => {
                // A body that is not JSON is usually a page cut off in transit: ask again.
                if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
                    return Attempt::Retry {
                        message: format!("HTTP {status} but the body is not complete JSON ({e}); field `$`"),
                        retry_after: None,
                    };
                }
                Attempt::Done(Fetched::Body { bytes: body, etag: new_etag })
            }
            408 | 409 | 425 | 429 | 500..=599 => {
                Attempt::Retry { message: format!("HTTP {status}: {}", snippet(&body)), retry_after }
            }
            _ => Attempt::Fatal(format!("HTTP {status}: {}", snippet(&body))),
        }
    }
}

enum Attempt {
    Done(Fetched),
    Retry { message: String, retry_after: Option<Duration> },
    Fatal(String),
}

/// A transport error without the URL's query (it carries no secret, but keeps messages short).
fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else if e.is_body() || e.is_decode() {
        "body error"
    } else {
        "request failed"
    };
    let mut msg = kind.to_string();
    let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
    if let Some(s) = src.take() {
        msg.push_str(&format!(": {s}"));
    }
    msg
}

fn snippet(body: &[u8]) -> String {
    pages::truncate(String::from_utf8_lossy(body).trim(), 200)
}

/// The request (path and query) for a list page.
pub fn list_request(kind: SourceKind, page_size: u32, query: &str, after: &Next) -> String {
    let q = enc(query);
    match (kind, after) {
        (SourceKind::Glama, Next::Cursor(c)) => {
            format!("/api/mcp/v1/servers?first={page_size}&after={}&query={q}", enc(c))
        }
        (SourceKind::Glama, _) => format!("/api/mcp/v1/servers?first={page_size}&query={q}"),
        (SourceKind::Official, Next::Cursor(c)) => {
            format!("/v0.1/servers?limit={page_size}&cursor={}&search={q}&version=latest", enc(c))
        }
        (SourceKind::Official, _) => format!("/v0.1/servers?limit={page_size}&search={q}&version=latest"),
        (SourceKind::Smithery, Next::Page(p)) => format!("/servers?q={q}&page={p}&pageSize={page_size}"),
        (SourceKind::Smithery, _) => format!("/servers?q={q}&page=1&pageSize={page_size}"),
    }
}

/// Percent-encode a query value or path segment (unreserved characters pass).
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The detail request of a Smithery server (`@owner/name` keeps its `@` and `/`).
pub fn detail_request(qualified_name: &str) -> String {
    let path: Vec<String> = qualified_name.split('/').map(|seg| enc(seg).replace("%40", "@")).collect();
    format!("/servers/{}", path.join("/"))
}

/// The file of a detail document: a readable name plus a short hash (names may collide
/// once made file-safe).
pub fn detail_file(qualified_name: &str) -> String {
    let h = sha256_hex(qualified_name.as_bytes());
    format!("details/{}-{}.json", crate::mcp::client::safe_file_name(qualified_name), &h[7..15])
}

pub fn page_file(n: u64) -> String {
    format!("page-{n:06}.json")
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Snapshots of a source, sorted by id (ids sort by time).
pub fn snapshots(source_dir: &Path) -> Vec<(String, Option<State>)> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(source_dir) {
        for e in rd.flatten() {
            if e.path().is_dir() {
                let id = e.file_name().to_string_lossy().into_owned();
                let state = std::fs::read(e.path().join("state.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<State>(&b).ok());
                out.push((id, state));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

pub struct ScrapeOptions<'a> {
    pub name: &'a str,
    pub cfg: &'a SourceSettings,
    /// Folder holding `<source>/<snapshot>/` (the resolved `folder`).
    pub raw: PathBuf,
    pub snapshot: Option<String>,
    /// Start a new snapshot even when an unfinished one exists.
    pub fresh: bool,
    pub progress: indicatif::ProgressBar,
    pub seed: u64,
}

/// Choose the snapshot: the explicit one, else the latest unfinished one of this source
/// (resume), else a new id from the current UTC time.
pub fn choose_snapshot(source_dir: &Path, explicit: Option<&str>, fresh: bool) -> Result<String> {
    if let Some(s) = explicit {
        if s.is_empty() || !s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) || s.starts_with('.') {
            bail!(crate::error::UsageError(format!(
                "snapshot id `{s}` must be letters, digits, `-`, `_` or `.` (it becomes a folder name)"
            )));
        }
        return Ok(s.to_string());
    }
    if !fresh
        && let Some((id, _)) =
            snapshots(source_dir).into_iter().rev().find(|(_, st)| st.as_ref().is_none_or(|s| !s.complete))
    {
        return Ok(id);
    }
    Ok(jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ").to_string())
}

/// Run a scrape to the end (or to the first defensive stop).
pub fn scrape(opts: ScrapeOptions) -> Result<ScrapeReport> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(scrape_async(opts))
}

async fn scrape_async(opts: ScrapeOptions<'_>) -> Result<ScrapeReport> {
    let started = Instant::now();
    let cfg = opts.cfg;
    let name = opts.name;
    let problems = cfg.check(&format!("registry.sources.{name}"));
    if !problems.is_empty() {
        return Err(crate::error::InputError { file: format!("[registry.sources.{name}]"), problems }.into());
    }
    let key = api_key(name, cfg)?;
    let source_dir = opts.raw.join(name);
    let snapshot = choose_snapshot(&source_dir, opts.snapshot.as_deref(), opts.fresh)?;
    let dir = source_dir.join(&snapshot);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let state_path = dir.join("state.json");
    remove_cut_writes(&dir);

    let prev_pages = previous_etags(&source_dir, &snapshot);
    let state = open_state(&state_path, cfg, name, &snapshot)?;
    let f = fetcher(name, cfg, key, opts.seed)?;
    let report = ScrapeReport {
        source: name.into(),
        snapshot: snapshot.clone(),
        folder: dir.display().to_string(),
        pages_fetched: 0,
        pages_adopted: 0,
        pages_total: 0,
        not_modified: 0,
        details_fetched: 0,
        servers: 0,
        duplicates: 0,
        requests: 0,
        retries: 0,
        elapsed_s: 0.0,
        complete: false,
    };
    let mut run = Scrape {
        name,
        cfg,
        snapshot,
        dir,
        state_path,
        prev_pages,
        state,
        f,
        report,
        ids: BTreeSet::new(),
        order: Vec::new(),
        cursors: BTreeMap::new(),
        pb: opts.progress,
    };
    run.reread_pages()?;
    run.pages().await?;
    run.details().await?;
    run.finish(started)
}

/// The source's API key from its environment variable, when it names one.
fn api_key(name: &str, cfg: &SourceSettings) -> Result<Option<String>> {
    Ok(match &cfg.api_key_env {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(k) if !k.trim().is_empty() => Some(k.trim().to_string()),
            _ => {
                return Err(crate::error::hinted(
                    format!("source `{name}` needs an API key but the environment variable `{var}` is not set"),
                    format!("export {var}=… (the key is only sent as a Bearer header, never written anywhere)"),
                ));
            }
        },
    })
}

/// Removes the temp files of atomic writes cut off by a kill: never part of a snapshot.
fn remove_cut_writes(dir: &Path) {
    for d in [dir.to_path_buf(), dir.join("details")] {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with('.') && n.contains(".tmp.") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// ETags of the latest complete snapshot, by request, with the file that holds each body.
fn previous_etags(source_dir: &Path, snapshot: &str) -> BTreeMap<String, (PathBuf, String)> {
    let previous: Option<(PathBuf, State)> = snapshots(source_dir)
        .into_iter()
        .rev()
        .filter(|(id, _)| *id != snapshot)
        .find_map(|(id, st)| st.filter(|s| s.complete).map(|s| (source_dir.join(id), s)));
    let mut prev_pages: BTreeMap<String, (PathBuf, String)> = BTreeMap::new();
    if let Some((pdir, st)) = &previous {
        for p in &st.pages {
            if let Some(e) = &p.etag {
                prev_pages.insert(p.request.clone(), (pdir.join(&p.file), e.clone()));
            }
        }
        for d in st.details.values() {
            if let Some(e) = &d.etag {
                prev_pages.insert(d.request.clone(), (pdir.join(&d.file), e.clone()));
            }
        }
    }
    prev_pages
}

/// The snapshot's saved state (resumed only with the same settings), or a new one.
fn open_state(state_path: &Path, cfg: &SourceSettings, name: &str, snapshot: &str) -> Result<State> {
    Ok(match std::fs::read(state_path) {
        Ok(b) => {
            let s: State = serde_json::from_slice(&b)
                .with_context(|| format!("`{}` is not a scrape state file", state_path.display()))?;
            let same = s.kind == cfg.kind
                && s.base_url == cfg.base_url
                && s.page_size == cfg.page_size
                && s.query == cfg.query
                && s.source == name;
            if !same {
                return Err(crate::error::hinted(
                    format!(
                        "snapshot `{snapshot}` of `{name}` was started with other settings (kind, base_url, page_size or query)"
                    ),
                    "scrape into a new snapshot (`--new` or `--snapshot ID`)",
                ));
            }
            s
        }
        Err(_) => State {
            source: name.to_string(),
            kind: cfg.kind,
            snapshot: snapshot.to_string(),
            base_url: cfg.base_url.clone(),
            page_size: cfg.page_size,
            query: cfg.query.clone(),
            started_at: now(),
            finished_at: None,
            pages: vec![],
            details: BTreeMap::new(),
            complete: false,
        },
    })
}

fn fetcher<'a>(name: &'a str, cfg: &'a SourceSettings, key: Option<String>, seed: u64) -> Result<Fetcher<'a>> {
    let http = reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .timeout(Duration::from_secs_f64(cfg.timeout_secs))
        .connect_timeout(Duration::from_secs_f64(cfg.connect_timeout_secs))
        .build()
        .context("cannot build the HTTP client")?;
    Ok(Fetcher {
        name,
        cfg,
        http,
        key,
        limiter: RateLimiter::new(cfg.rate_per_s, cfg.burst),
        rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x005c_4a9e),
        requests: 0,
        retries: 0,
        prepaid: false,
    })
}

/// A scrape under way: its snapshot folder and state, the servers its pages listed so far
/// (in order, with the cursors seen), the client and the report.
struct Scrape<'a> {
    name: &'a str,
    cfg: &'a SourceSettings,
    snapshot: String,
    dir: PathBuf,
    state_path: PathBuf,
    prev_pages: BTreeMap<String, (PathBuf, String)>,
    state: State,
    f: Fetcher<'a>,
    report: ScrapeReport,
    ids: BTreeSet<String>,
    order: Vec<String>,
    cursors: BTreeMap<String, u64>,
    pb: indicatif::ProgressBar,
}

impl Scrape<'_> {
    /// Ids and cursors of the pages already recorded (re-parsed from the saved bytes).
    fn reread_pages(&mut self) -> Result<()> {
        let (name, cfg) = (self.name, self.cfg);
        let Self { snapshot, dir, state, report, ids, order, cursors, .. } = self;
        for p in &state.pages {
            let bytes = std::fs::read(dir.join(&p.file))
                .with_context(|| format!("snapshot `{snapshot}`: `{}` is listed in state.json but missing", p.file))?;
            if sha256_hex(&bytes) != p.sha256 {
                bail!("snapshot `{snapshot}`: `{}` does not match its hash in state.json (edited?)", p.file);
            }
            let page = pages::parse_page(cfg.kind, name, p.page, &bytes)?;
            for it in page.items {
                if ids.insert(it.id.clone()) {
                    order.push(it.id);
                } else {
                    report.duplicates += 1;
                }
            }
            if let Next::Cursor(c) = &p.next {
                cursors.insert(c.clone(), p.page);
            }
        }
        let pb = &self.pb;
        pb.set_length(cfg.max_pages.min(10_000));
        pb.set_position(state.pages.len() as u64);
        Ok(())
    }

    /// The list pages, from the first unrecorded one to the end.
    async fn pages(&mut self) -> Result<()> {
        // `None`: nothing fetched yet (the first request has no cursor).
        let mut next: Option<Next> = self.state.pages.last().map(|p| p.next.clone());
        while !self.state.complete && next != Some(Next::End) {
            next = Some(self.page(next.as_ref()).await?);
        }
        Ok(())
    }

    /// The bytes for a list page's `request`, with their ETag and whether they are the
    /// previous snapshot's copy (304 Not Modified) or adopted from `path`, where a killed run
    /// saved them.
    async fn page_bytes(
        &mut self,
        request: &str,
        path: &Path,
        what: &str,
    ) -> Result<(Vec<u8>, Option<String>, bool, bool)> {
        if let Ok(b) = std::fs::read(path) {
            // Saved by a run that was killed before it updated state.json.
            return Ok((b, None, false, true));
        }
        let prev = self.prev_pages.get(request);
        Ok(match self.f.get(request, what, prev.map(|(_, e)| e.as_str())).await? {
            Fetched::Body { bytes, etag } => (bytes, etag, false, false),
            Fetched::NotModified => {
                let (p, e) = prev.expect("304 only with an ETag");
                let b = std::fs::read(p).with_context(|| format!("cannot read `{}`", p.display()))?;
                (b, Some(e.clone()), true, false)
            }
        })
    }

    /// Fetches (or adopts) the next list page, checks it and records it durably; returns
    /// its next-page pointer.
    async fn page(&mut self, next: Option<&Next>) -> Result<Next> {
        let (name, cfg) = (self.name, self.cfg);
        let n = self.state.pages.len() as u64 + 1;
        if n > cfg.max_pages {
            return Err(ScrapeError::Page(pages::Loc { source: name, page: format!("page {n}") }.err(
                match cfg.kind {
                    SourceKind::Glama => "pageInfo.endCursor",
                    SourceKind::Official => "metadata.nextCursor",
                    SourceKind::Smithery => "pagination.totalPages",
                },
                format!(
                    "the source still has a next page after {} pages, the configured `max_pages` (a never-ending cursor?)",
                    cfg.max_pages
                ),
            ))
            .into());
        }
        let request = list_request(cfg.kind, cfg.page_size, &cfg.query, next.unwrap_or(&Next::Page(1)));
        let file = page_file(n);
        let path = self.dir.join(&file);
        let what = format!("page {n}");
        let (bytes, etag, not_modified, adopted) = self.page_bytes(&request, &path, &what).await?;
        let Self { dir, state_path, state, f, report, ids, order, cursors, pb, .. } = self;
        let page = match pages::parse_page(cfg.kind, name, n, &bytes) {
            Ok(p) => p,
            Err(e) => {
                let bad = dir.join(format!("page-{n:06}.rejected.json"));
                let _ = write_atomic(&bad, &bytes);
                let _ = std::fs::remove_file(&path);
                return Err(ScrapeError::Page(e))
                    .with_context(|| format!("the page as received is kept in `{}` for inspection", bad.display()));
            }
        };
        if let Next::Cursor(c) = &page.next
            && let Some(earlier) = cursors.insert(c.clone(), n)
        {
            return Err(ScrapeError::Page(pages::Loc { source: name, page: what }.err(
                match cfg.kind {
                    SourceKind::Glama => "pageInfo.endCursor",
                    _ => "metadata.nextCursor",
                },
                format!("cursor `{}` was already returned by page {earlier} (a cursor loop)", pages::truncate(c, 80)),
            ))
            .into());
        }
        for it in &page.items {
            if ids.insert(it.id.clone()) {
                order.push(it.id.clone());
            } else {
                report.duplicates += 1;
            }
        }
        if let Some(t) = page.total_pages {
            pb.set_length(t.min(cfg.max_pages));
        }
        state.pages.push(PageRecord {
            page: n,
            request,
            file,
            sha256: sha256_hex(&bytes),
            etag,
            items: page.items.len(),
            next: page.next.clone(),
            fetched_at: now(),
            not_modified,
        });
        // Persist (page, then state) while the rate limiter waits for the next request's
        // slot, so the disk's fsyncs use time the scraper would spend idle; the next request
        // goes out only once this page is durable, so a kill never loses a fetched page.
        let state_bytes = to_json_bytes(&state)?;
        let sp = state_path.clone();
        let persist = tokio::task::spawn_blocking(move || -> Result<()> {
            if !adopted {
                write_atomic(&path, &bytes)?;
            }
            crate::store::fail_point("registry-page-saved")?;
            write_atomic(&sp, &state_bytes)
        });
        if page.next != Next::End {
            f.limiter.acquire().await;
            f.prepaid = true;
        }
        persist.await.context("internal: page writer panicked")??;
        if adopted {
            report.pages_adopted += 1;
        } else {
            report.pages_fetched += 1;
        }
        if not_modified {
            report.not_modified += 1;
        }
        pb.set_position(n);
        pb.set_message(format!("pages, {} servers", ids.len()));
        Ok(page.next)
    }

    /// Smithery's per-server detail documents, when configured.
    async fn details(&mut self) -> Result<()> {
        let (name, cfg) = (self.name, self.cfg);
        let Self { dir, state_path, prev_pages, state, f, report, order, pb, .. } = self;
        if cfg.kind == SourceKind::Smithery && cfg.details && !state.complete {
            pb.set_length(order.len() as u64);
            pb.set_position(0);
            for (i, qn) in order.iter().enumerate() {
                pb.set_position(i as u64);
                pb.set_message(format!("details ({qn})"));
                if state.details.contains_key(qn) {
                    continue;
                }
                let file = detail_file(qn);
                let path = dir.join(&file);
                let request = detail_request(qn);
                let what = format!("detail of `{qn}`");
                let (bytes, etag) = if let Ok(b) = std::fs::read(&path) {
                    (b, None)
                } else {
                    let prev = prev_pages.get(&request);
                    match f.get(&request, &what, prev.map(|(_, e)| e.as_str())).await? {
                        Fetched::Body { bytes, etag } => (bytes, etag),
                        Fetched::NotModified => {
                            let (p, e) = prev.expect("304 only with an ETag");
                            (std::fs::read(p)?, Some(e.clone()))
                        }
                    }
                };
                pages::parse_detail(name, qn, &bytes)?;
                write_atomic(&path, &bytes)?;
                state.details.insert(
                    qn.clone(),
                    DetailRecord { request, file, sha256: sha256_hex(&bytes), etag, fetched_at: now() },
                );
                report.details_fetched += 1;
                // Checkpoint every few details: a kill loses at most these, and their files
                // are adopted on rerun anyway.
                if report.details_fetched.is_multiple_of(20) {
                    write_atomic(state_path, &to_json_bytes(&state)?)?;
                }
            }
        }
        Ok(())
    }

    /// Marks the snapshot complete and fills in the report's totals.
    fn finish(self, started: Instant) -> Result<ScrapeReport> {
        let Self { state_path, mut state, f, mut report, ids, pb, .. } = self;
        if !state.complete {
            state.complete = true;
            state.finished_at = Some(now());
            write_atomic(&state_path, &to_json_bytes(&state)?)?;
        }
        pb.finish_and_clear();
        report.pages_total = state.pages.len() as u64;
        report.servers = ids.len();
        report.requests = f.requests;
        report.retries = f.retries;
        report.elapsed_s = started.elapsed().as_secs_f64();
        report.complete = state.complete;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_dates() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn requests_encode_cursors_and_names() {
        assert_eq!(
            list_request(SourceKind::Glama, 50, "", &Next::Cursor("a b/=".into())),
            "/api/mcp/v1/servers?first=50&after=a%20b%2F%3D&query="
        );
        assert_eq!(detail_request("@acme/weather tool"), "/servers/@acme/weather%20tool");
        assert!(detail_file("@a/b").starts_with("details/_a_b-"));
    }

    #[test]
    fn snapshot_ids_must_be_folder_names() {
        let d = tempfile::tempdir().unwrap();
        assert!(choose_snapshot(d.path(), Some("../x"), false).is_err());
        assert_eq!(choose_snapshot(d.path(), Some("s1"), false).unwrap(), "s1");
    }
}
