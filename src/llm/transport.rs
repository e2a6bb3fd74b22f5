//! One endpoint (a server, or several replicas of one, that one or more roles talk to): the
//! async-openai client per replica, the concurrency bound (per replica), the rpm/tpm limiter
//! (shared by the replicas), the choice of replica ([`super::pool`]) and the retry loop.
//!
//! Requests go through async-openai's raw-JSON (`byot`) chat call. Its HTTP layer is our
//! own tower service, so a non-2xx answer reaches us with its status and `Retry-After`
//! header (async-openai's own error type drops the headers).
//!
//! Retried: 408, 409, 429, every 5xx, connection errors, timeouts and bodies that are not
//! a chat completion. Not retried: other 4xx (a bad request does not get better).
//! Back-off before retry n (1-based): `Retry-After` when the server sent one (seconds or an
//! HTTP date), else `backoff_ms * 2^(n-1)` capped at 60 s, times a random factor in
//! [0.5, 1.0) so parallel workers do not retry in lockstep. With several replicas, a retry
//! that can go to a replica the request has not failed on yet goes at once, without back-off.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::HttpRequestFactory;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::config::{Provider, RoleSettings};
use super::local::{LocalServer, LocalSpec};
use super::pool::{Failure, Pick, Pool};
use super::redact::{Redactor, truncate};

/// The process-wide Ctrl-C token. The first Ctrl-C cancels it (every client stops issuing
/// requests; finished exchanges are already in the ledger; the stage fails and benchgen
/// exits non-zero). A second Ctrl-C stops local model servers and exits at once (130).
pub fn interrupt_token() -> CancellationToken {
    static TOKEN: OnceLock<CancellationToken> = OnceLock::new();
    TOKEN
        .get_or_init(|| {
            let token = CancellationToken::new();
            let t = token.clone();
            // From here on, Ctrl-C is ours (graceful), not `children`'s (immediate).
            crate::children::set_graceful_interrupt();
            let spawned = std::thread::Builder::new().name("benchgen-ctrl-c".into()).spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
                rt.block_on(async move {
                    while tokio::signal::ctrl_c().await.is_ok() {
                        if t.is_cancelled() {
                            crate::children::kill_all();
                            eprintln!("benchgen: interrupted twice, exiting now");
                            std::process::exit(130);
                        }
                        eprintln!(
                            "benchgen: interrupted; no new LLM requests, finished exchanges stay recorded (Ctrl-C again to exit at once)"
                        );
                        t.cancel();
                    }
                });
            });
            if let Err(e) = spawned {
                tracing::warn!("cannot watch for Ctrl-C: {e}");
            }
            token
        })
        .clone()
}

/// Roles with the same key share an endpoint.
pub fn endpoint_key(r: &RoleSettings, resolve: &dyn Fn(&Path) -> PathBuf) -> String {
    match r.provider {
        Provider::Local => format!("local:{}", r.local_model_path(resolve).display()),
        _ => format!("{}|{}", r.base_urls().join(" "), r.api_key_env().unwrap_or_default()),
    }
}

pub enum SendError {
    Cancelled,
    /// The endpoint cannot be used at all (missing key, local server does not start).
    Setup(String),
    Failed {
        attempts: u32,
        last_status: String,
        message: String,
    },
}

pub struct Sent {
    pub response: Value,
    pub attempts: u32,
    /// Latency of the attempt that succeeded.
    pub latency_ms: u64,
    /// Which of the endpoint's replicas answered (0-based, in `base_urls` order).
    pub replica: usize,
    /// The batch job that answered, for a role in `mode = "batch"` (none: a live call).
    pub batch: Option<String>,
    /// When the attempt that succeeded was sent (a live call): with its latency, the span
    /// the request ran, which `check` and `run`'s notes time a local server by.
    pub started_at: Option<String>,
}

enum Target {
    /// One base URL per replica.
    Remote {
        base_urls: Vec<String>,
    },
    Local(LocalSpec),
}

struct Conn {
    client: async_openai::Client<OpenAIConfig>,
    /// Shared with later stages of the same command (see `local::shared`).
    server: Option<std::sync::Arc<LocalServer>>,
}

/// Evenly spaced admission (no bursts): each request takes the next free slot of the
/// request budget (`60 s / rpm`) and of the token budget (`tokens * 60 s / tpm`).
struct Limiter {
    rpm: u32,
    tpm: u32,
    next_req: Instant,
    next_tok: Instant,
}

impl Limiter {
    fn reserve(&mut self, tokens: u64) -> Instant {
        let now = Instant::now();
        let mut slot = now;
        if self.rpm > 0 {
            slot = slot.max(self.next_req);
            self.next_req = slot + Duration::from_secs_f64(60.0 / f64::from(self.rpm));
        }
        if self.tpm > 0 {
            slot = slot.max(self.next_tok);
            self.next_tok = slot + Duration::from_secs_f64(60.0 * tokens as f64 / f64::from(self.tpm));
        }
        slot
    }
}

/// One server of an endpoint: its own concurrency bound and connection.
struct Replica {
    semaphore: Semaphore,
    conn: tokio::sync::OnceCell<Result<Conn, String>>,
}

pub struct Endpoint {
    key: String,
    target: Target,
    api_key: Result<Option<String>, String>,
    redactor: Redactor,
    http: reqwest::Client,
    replicas: Vec<Replica>,
    pool: std::sync::Arc<Pool>,
    limiter: Option<Mutex<Limiter>>,
}

/// A non-2xx HTTP answer, as our tower service reports it.
#[derive(Debug)]
struct HttpStatus {
    status: u16,
    retry_after: Option<Duration>,
    body: String,
}

impl std::fmt::Display for HttpStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}: {}", self.status, self.body)
    }
}

impl std::error::Error for HttpStatus {}

pub(crate) fn parse_retry_after(v: Option<&reqwest::header::HeaderValue>) -> Option<Duration> {
    let s = v?.to_str().ok()?.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return (secs >= 0.0 && secs.is_finite()).then(|| Duration::from_secs_f64(secs.min(3600.0)));
    }
    // HTTP date (RFC 2822 form, e.g. `Wed, 21 Oct 2015 07:28:00 GMT`).
    let t = jiff::fmt::rfc2822::parse(s).ok()?.timestamp();
    let d = t.duration_since(jiff::Timestamp::now());
    Some(Duration::from_secs_f64(d.as_secs_f64().clamp(0.0, 3600.0)))
}

/// Whether an HTTP status is worth another attempt: request timeout, conflict, rate limit,
/// server error.
pub(crate) fn retryable_status(code: u16) -> bool {
    matches!(code, 408 | 409 | 429) || code >= 500
}

/// The wait before attempt `attempts + 1`: the server's `Retry-After` (±10 % jitter), else
/// `backoff_ms` doubled per attempt, capped at 60 s, with jitter.
pub(crate) fn retry_delay(backoff_ms: u64, attempts: u32, retry_after: Option<Duration>) -> Duration {
    match retry_after {
        Some(ra) => ra.mul_f64(1.0 + (jitter() - 0.5) / 5.0),
        None => Duration::from_millis(backoff_ms.saturating_mul(1u64 << (attempts - 1).min(20)))
            .min(Duration::from_secs(60))
            .mul_f64(jitter()),
    }
}

/// A reqwest error with every source, on one line.
pub(crate) fn error_chain(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    msg
}

/// A small random factor in [0.5, 1.0) for back-off jitter (not for anything that must be
/// reproducible, so it is seeded from the clock).
pub(crate) fn jitter() -> f64 {
    use std::cell::Cell;
    thread_local!(static STATE: Cell<u64> = Cell::new(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1) | 1
    ));
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        0.5 + (x >> 11) as f64 / (1u64 << 53) as f64 / 2.0
    })
}

impl Endpoint {
    /// `log_dir`: where a local model server's log goes (`artifacts/llm/logs`).
    pub fn new(
        key: &str,
        members: &[&RoleSettings],
        resolve: &dyn Fn(&Path) -> PathBuf,
        log_dir: &Path,
    ) -> anyhow::Result<Self> {
        let first = members[0];
        let concurrency = members.iter().map(|r| r.max_concurrency).min().unwrap_or(1).max(1);
        let target = match first.provider {
            Provider::Local => Target::Local(LocalSpec {
                binary: first.local_server_binary(resolve),
                model: first.local_model_path(resolve),
                threads: first.threads,
                ctx_size: first.ctx_size,
                parallel: concurrency,
                startup_timeout: Duration::from_secs_f64(first.startup_timeout_s.max(1.0)),
                log_dir: log_dir.to_path_buf(),
                extra_args: Vec::new(),
            }),
            _ => Target::Remote {
                base_urls: first.base_urls().iter().map(|u| u.trim_end_matches('/').to_string()).collect(),
            },
        };
        let n = match &target {
            Target::Remote { base_urls } => base_urls.len().max(1),
            Target::Local(_) => 1,
        };
        let failover_after = members.iter().map(|r| r.failover_after).min().unwrap_or(3);
        let cooldown = members.iter().map(|r| r.cooldown_s).fold(f64::INFINITY, f64::min);
        let cooldown = Duration::from_secs_f64(if cooldown.is_finite() { cooldown.max(0.0) } else { 30.0 });
        let api_key = match first.api_key_env() {
            None => Ok(None),
            Some(name) => super::config::read_api_key(&name).map(Some),
        };
        let redactor = match &api_key {
            Ok(Some(k)) => Redactor::new(k),
            _ => Redactor::default(),
        };
        let min_nonzero = |f: &dyn Fn(&RoleSettings) -> u32| members.iter().map(|r| f(r)).filter(|v| *v > 0).min();
        let (rpm, tpm) = (min_nonzero(&|r| r.rpm), min_nonzero(&|r| r.tpm));
        let limiter = (rpm.is_some() || tpm.is_some()).then(|| {
            let now = Instant::now();
            Mutex::new(Limiter { rpm: rpm.unwrap_or(0), tpm: tpm.unwrap_or(0), next_req: now, next_tok: now })
        });
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(concurrency)
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            key: key.to_string(),
            target,
            api_key,
            redactor,
            http,
            replicas: (0..n)
                .map(|_| Replica { semaphore: Semaphore::new(concurrency), conn: tokio::sync::OnceCell::new() })
                .collect(),
            pool: Pool::new(n, failover_after, cooldown),
            limiter,
        })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// How many servers (replicas) this endpoint spreads its requests over.
    pub fn replica_count(&self) -> usize {
        self.replicas.len()
    }

    /// Remove the API key (every form, see `redact`) from text that may echo it (server
    /// error bodies, error messages). Always on the whole text, before any cut.
    pub fn redact(&self, text: &str) -> String {
        self.redactor.text(text)
    }

    /// The base URL of replica `i` (for messages; a local server's is known once started).
    fn replica_url(&self, i: usize) -> String {
        match &self.target {
            Target::Remote { base_urls } => base_urls.get(i).cloned().unwrap_or_default(),
            Target::Local(_) => "the local server".into(),
        }
    }

    async fn connect(&self, replica: usize) -> Result<Conn, String> {
        let key = self.api_key.clone()?;
        let (base_url, server) = match &self.target {
            Target::Remote { base_urls } => (base_urls[replica].clone(), None),
            Target::Local(spec) => {
                let server = super::local::shared(spec).await?;
                (server.base_url(), Some(server))
            }
        };
        let http = self.http.clone();
        let service = tower::service_fn(move |factory: HttpRequestFactory| {
            let http = http.clone();
            async move {
                let request = factory.build().await?;
                let response = http.execute(request).await.map_err(OpenAIError::Reqwest)?;
                let status = response.status();
                if status.is_success() {
                    return Ok::<_, OpenAIError>(response);
                }
                let retry_after = parse_retry_after(response.headers().get(reqwest::header::RETRY_AFTER));
                let body = response.text().await.unwrap_or_default();
                Err(OpenAIError::Boxed(Box::new(HttpStatus { status: status.as_u16(), retry_after, body })))
            }
        });
        let config = OpenAIConfig::new()
            .with_api_base(base_url)
            .with_api_key(key.unwrap_or_default())
            .with_org_id("")
            .with_project_id("");
        let client = async_openai::Client::with_config(config).with_http_service(service);
        Ok(Conn { client, server })
    }

    /// Send one request with retries. Cancellation is honoured while waiting for a slot,
    /// during the request and during back-off.
    pub async fn send(
        &self,
        s: &RoleSettings,
        body: &Value,
        est_tokens: u64,
        until: Option<fn(&str) -> bool>,
        cancel: &CancellationToken,
    ) -> Result<Sent, SendError> {
        if cancel.is_cancelled() {
            return Err(SendError::Cancelled);
        }
        let timeout = Duration::from_secs_f64(s.timeout_s);
        let mut attempts = 0u32;
        // Replicas this request failed on (a retry prefers another).
        let mut tried: Vec<usize> = Vec::new();
        loop {
            attempts += 1;
            if let Some(lim) = &self.limiter {
                let slot = lim.lock().unwrap_or_else(|p| p.into_inner()).reserve(est_tokens);
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(SendError::Cancelled),
                    _ = tokio::time::sleep_until(slot.into()) => {}
                }
            }
            // Which replica: the least loaded one that is in; when all are out, wait for
            // the earliest cool-down to end.
            let outstanding = loop {
                match self.pool.pick(&tried) {
                    Pick::Ready(slot) => break slot,
                    Pick::Wait(until) => tokio::select! {
                        biased;
                        _ = cancel.cancelled() => return Err(SendError::Cancelled),
                        _ = tokio::time::sleep_until(until.into()) => {}
                    },
                }
            };
            let replica = &self.replicas[outstanding.index];
            // `biased`, cancel first: once cancelled, no branch that could send a request is polled.
            let conn = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(SendError::Cancelled),
                c = replica.conn.get_or_init(|| self.connect(outstanding.index)) => c,
            };
            let conn = conn.as_ref().map_err(|e| SendError::Setup(e.clone()))?;
            let permit = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(SendError::Cancelled),
                p = replica.semaphore.acquire() => p.map_err(|_| SendError::Cancelled)?,
            };
            // A local server computes only in its turn (`turns`: two at once on the same
            // cores run ten times slower); the wait is not the request's latency.
            let turn = match &self.target {
                Target::Local(spec) => {
                    let server = format!("{spec:?}");
                    Some(tokio::select! {
                        biased;
                        _ = cancel.cancelled() => return Err(SendError::Cancelled),
                        t = super::turns::take(&server) => t,
                    })
                }
                Target::Remote { .. } => None,
            };
            let started = Instant::now();
            let started_at = crate::ledger::now();
            let chat = conn.client.chat();
            let call = async {
                match until {
                    None => chat.create_byot::<&Value, Value>(body).await,
                    Some(whole) => streamed(chat.create_stream_byot::<&Value, Value>(body).await?, whole).await,
                }
            };
            let result = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(SendError::Cancelled),
                r = tokio::time::timeout(timeout, call) => r,
            };
            let latency_ms = started.elapsed().as_millis() as u64;
            if let (Ok(Ok(v)), Some(server), Some(turn)) = (&result, &conn.server, &turn)
                && v.get("cut_by_client").is_some()
            {
                let base_url = server.base_url();
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(SendError::Cancelled),
                    _ = settle(&self.http, &base_url, turn) => {}
                }
            }
            drop(turn);
            drop(permit);
            let index = outstanding.index;
            drop(outstanding);
            let (status, message, retryable, retry_after) = match result {
                Ok(Ok(mut v)) if v["choices"][0]["message"].is_object() => {
                    self.pool.success(index);
                    // The answer is stored in the ledger and shown: it must not carry the key.
                    self.redactor.value(&mut v);
                    return Ok(Sent {
                        response: v,
                        attempts,
                        latency_ms,
                        replica: index,
                        batch: None,
                        started_at: Some(started_at),
                    });
                }
                Ok(Ok(v)) => ("malformed response".to_string(), format!("not a chat completion: {v}"), true, None),
                Ok(Err(e)) => classify(e),
                Err(_) => (format!("timeout after {}s", s.timeout_s), "the request timed out".to_string(), true, None),
            };
            // Server bodies may echo request headers: never let the key reach a log or an
            // error. Redact the whole text first, then cut it for display (cutting first
            // would leave the start of a key that straddles the cut).
            let message = truncate(&self.redact(&message), 500);
            let status = truncate(&self.redact(&status), 100);
            tracing::debug!("LLM endpoint attempt {attempts}: {status}: {message}");
            if retryable && self.pool.failure(index) == Failure::TakenOut {
                tracing::warn!(
                    "LLM endpoint {} ({} of {}) is taken out for {:.0} s after {} failures in a row (last: {status})",
                    self.redact(&self.replica_url(index)),
                    index + 1,
                    self.replicas.len(),
                    self.pool.cooldown().as_secs_f64(),
                    self.pool.failover_after()
                );
            }
            if !tried.contains(&index) {
                tried.push(index);
            }
            if !retryable || attempts > s.max_retries {
                return Err(SendError::Failed { attempts, last_status: status, message });
            }
            // Another replica that has not failed this request is ready: go there at once.
            if self.pool.has_untried(&tried) {
                continue;
            }
            let delay = retry_delay(s.backoff_ms, attempts, retry_after);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(SendError::Cancelled),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

/// A streamed answer read until the model finishes or its text is `whole`
/// ([`super::stream`]); dropping the stream then closes the connection, and llama-server
/// stops decoding for it. A stream that ends before either is no chat completion (the
/// caller's malformed-response retry).
async fn streamed(
    mut chunks: impl futures::Stream<Item = Result<Value, OpenAIError>> + Unpin,
    whole: fn(&str) -> bool,
) -> Result<Value, OpenAIError> {
    use futures::StreamExt;
    let mut a = super::stream::Assembled::default();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        // An error the server sends inside the stream (the request was taken, then failed):
        // classified by its code as an HTTP status would be (a 4xx is not asked again).
        if let Some(e) = chunk.get("error") {
            let status = e["code"].as_u64().and_then(|c| u16::try_from(c).ok()).unwrap_or(500);
            return Err(OpenAIError::Boxed(Box::new(HttpStatus { status, retry_after: None, body: e.to_string() })));
        }
        a.add(&chunk);
        if a.may_cut(whole) {
            a.cut();
            break;
        }
    }
    Ok(a.response().unwrap_or_else(|| json!({"error": "the stream ended before the answer did"})))
}

/// After the client ended a streamed answer, wait until the local server has let go of
/// the answer's slot: it sees the closed connection only at its next token, and the
/// conversation's next turn, sent at once, went to the other, idle slot and evaluated its
/// whole prompt again there (20 s for `execute`'s 1,700-token prompt, demo of 2026-12-07)
/// instead of reusing the slot that holds it. Busy slots are read from llama-server's
/// `/slots` until no more run than this process's other requests on the server (counted at
/// each read: one may start or end meanwhile); at most 2 s in all, and a server that does
/// not say (no `/slots`) is not waited for.
async fn settle(http: &reqwest::Client, base_url: &str, turn: &super::turns::Turn) {
    let url = format!("{}/slots", base_url.trim_end_matches("/v1"));
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let busy = match http.get(&url).timeout(left.min(Duration::from_millis(500))).send().await {
            Ok(r) if r.status().is_success() => r.bytes().await.ok().and_then(|b| {
                let slots: Value = serde_json::from_slice(&b).ok()?;
                Some(slots.as_array()?.iter().filter(|s| s["is_processing"] == true).count())
            }),
            _ => None,
        };
        match busy {
            Some(n) if n > turn.others() => tokio::time::sleep(Duration::from_millis(10)).await,
            _ => return,
        }
    }
}

/// (status text, message, retryable, Retry-After) of a failed attempt.
fn classify(e: OpenAIError) -> (String, String, bool, Option<Duration>) {
    let reqwest_err = |e: &reqwest::Error| {
        let status = if e.is_timeout() {
            "timeout"
        } else if e.is_connect() {
            "connection error"
        } else if e.is_body() || e.is_decode() || e.is_request() {
            "transfer error"
        } else {
            "http error"
        };
        (status.to_string(), error_chain(e), !e.is_builder(), None)
    };
    match e {
        OpenAIError::Boxed(b) => match b.downcast::<HttpStatus>() {
            Ok(h) => {
                (format!("HTTP {}", h.status), h.body.trim().to_string(), retryable_status(h.status), h.retry_after)
            }
            Err(b) => match b.downcast::<reqwest::Error>() {
                Ok(r) => reqwest_err(&r),
                Err(b) => ("error".into(), b.to_string(), true, None),
            },
        },
        OpenAIError::Reqwest(r) => reqwest_err(&r),
        OpenAIError::JSONDeserialize(err, body) => {
            ("malformed response".into(), format!("the response body is not JSON ({err}): {body}"), true, None)
        }
        // A stream whose connection broke partway (unstreamed, the same is a reqwest error).
        OpenAIError::StreamError(e) => ("transfer error".into(), e.to_string(), true, None),
        OpenAIError::ApiError(a) => {
            let code = a.status_code.as_u16();
            (format!("HTTP {code}"), a.api_error.message, code == 429 || code >= 500, None)
        }
        other => ("error".into(), other.to_string(), false, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().build().unwrap()
    }

    fn piece(content: &str, finish: Option<&str>) -> Result<Value, OpenAIError> {
        Ok(json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}))
    }

    #[test]
    fn a_streamed_turn_is_read_until_its_text_call_is_whole_and_no_further() {
        let read = std::sync::atomic::AtomicUsize::new(0);
        let pieces = vec![
            piece("{\"name\": \"f\", ", None),
            piece("\"arguments\": {}", None),
            piece(", \"result_id\": ", None),
            piece("\"r-1\"}", Some("stop")),
        ];
        let chunks = futures::stream::iter(pieces).inspect(|_| {
            read.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        let whole = crate::llm::extract::text_call_complete;
        let r = rt().block_on(streamed(Box::pin(chunks), whole)).unwrap();
        assert_eq!(read.load(std::sync::atomic::Ordering::SeqCst), 2, "nothing read after the cut");
        assert_eq!(r["choices"][0]["message"]["content"], "{\"name\": \"f\", \"arguments\": {}");
        assert_eq!(r["cut_by_client"], crate::llm::stream::CUT_REASON);
        // Never whole: read to the model's end, as it came.
        let pieces = vec![piece("Anna is ", None), piece("on call.", Some("stop"))];
        let r = rt().block_on(streamed(futures::stream::iter(pieces), whole)).unwrap();
        assert_eq!(r["choices"][0]["message"]["content"], "Anna is on call.");
        assert!(r.get("cut_by_client").is_none());
    }

    #[test]
    fn a_streamed_error_or_a_broken_stream_is_classified_as_its_unstreamed_form_would_be() {
        let never = |_: &str| false;
        let too_long = vec![Ok(json!({"error": {"code": 400, "message": "the request exceeds the context"}}))];
        let e = rt().block_on(streamed(futures::stream::iter(too_long), never)).unwrap_err();
        let (status, message, retryable, _) = classify(e);
        assert_eq!((status.as_str(), retryable), ("HTTP 400", false), "{message}");
        assert!(message.contains("exceeds the context"), "{message}");
        let busy = vec![piece("An", None), Ok(json!({"error": {"code": 503, "message": "loading"}}))];
        let (status, _, retryable, _) =
            classify(rt().block_on(streamed(futures::stream::iter(busy), never)).unwrap_err());
        assert_eq!((status.as_str(), retryable), ("HTTP 503", true));
        let broken = OpenAIError::StreamError(Box::new(async_openai::error::StreamError::EventStream("reset".into())));
        let (status, _, retryable, _) = classify(broken);
        assert_eq!((status.as_str(), retryable), ("transfer error", true));
        // Ended before the model finished: no chat completion, so the malformed-answer retry.
        let cut_off = vec![piece("An", None)];
        let r = rt().block_on(streamed(futures::stream::iter(cut_off), never)).unwrap();
        assert!(!r["choices"][0]["message"].is_object(), "{r}");
    }

    #[test]
    fn limiter_spaces_requests_evenly() {
        let start = Instant::now();
        let mut l = Limiter { rpm: 600, tpm: 0, next_req: start, next_tok: start };
        let slots: Vec<Instant> = (0..4).map(|_| l.reserve(10)).collect();
        for w in slots.windows(2) {
            assert!(w[1] - w[0] >= Duration::from_millis(99), "{:?}", w[1] - w[0]);
        }
        let mut l = Limiter { rpm: 0, tpm: 6000, next_req: start, next_tok: start };
        let a = l.reserve(100);
        let b = l.reserve(100);
        assert!(b - a >= Duration::from_millis(999));
    }

    #[test]
    fn retry_after_in_seconds_and_dates() {
        let h = reqwest::header::HeaderValue::from_static("2");
        assert_eq!(parse_retry_after(Some(&h)), Some(Duration::from_secs(2)));
        let h = reqwest::header::HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(parse_retry_after(Some(&h)), Some(Duration::ZERO));
        assert_eq!(parse_retry_after(None), None);
    }

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.5..1.0).contains(&j), "{j}");
        }
    }
}
