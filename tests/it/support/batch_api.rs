//! TEST DOUBLE: a loopback stand-in of OpenAI's batch API (`POST /v1/files`,
//! `POST /v1/batches`, `GET /v1/batches`, `GET /v1/batches/{id}`, `GET /v1/files/{id}/content`)
//! and of `POST /v1/chat/completions` (live calls and live fall-backs). Not a model: every
//! request is answered by the test's rule, as the scripted server does, and a batch's output
//! lines carry exactly the bodies the scripted server would have sent live.
//!
//! Faults, all off by default ([`Faults`]): batches stay in progress for some polls or while
//! held, chosen requests fail in their first batches (a 500 line in the error file), the
//! first batch expires with half its requests unanswered, the first create cuts its
//! connection after the batch was made, one poll cuts its connection, the first batch is
//! lost (its polls answer 404), there is no files endpoint (404), and the list of batches
//! holds many of others before the stand-in's own (`GET /v1/batches` pages by `limit` and
//! `after`, as OpenAI's does).
//!
//! Hand-written HTTP/1.1 like `scripted_llm`, on its own thread and tokio runtime, so it
//! serves benchgen subprocesses.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use super::scripted_llm::{Answer, Seen, reply, write};

pub type Rule = dyn Fn(&Seen) -> Answer + Send + Sync;
/// Which requests a fault applies to.
pub type Pick = dyn Fn(&Seen) -> bool + Send + Sync;

/// What goes wrong, on purpose.
#[derive(Default)]
pub struct Faults {
    /// Polls a batch answers `in_progress` before it finishes (0: the first poll finishes it).
    pub polls: usize,
    /// Requests that get a 500 line in the error file, and in how many batches (their first).
    pub fail: Option<(Box<Pick>, usize)>,
    /// The first batch expires with only the first half of its lines answered.
    pub expire_first: bool,
    /// The first `POST /v1/batches` makes the batch, then cuts the connection unanswered.
    pub cut_first_create: bool,
    /// The n-th (1-based) `GET /v1/batches/{id}` cuts its connection unanswered.
    pub cut_poll: Option<usize>,
    /// Batches stay `in_progress` until [`BatchApi::release`].
    pub hold: bool,
    /// The server lost the first batch: `GET /v1/batches/batch_1` answers 404.
    pub gone_first: bool,
    /// No files endpoint (a server with chat completions only): `POST /v1/files` answers 404.
    pub no_files: bool,
    /// Batches of others, made after the stand-in's own: `GET /v1/batches` lists them first.
    pub others: usize,
}

/// One batch as the stand-in keeps it.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: String,
    pub input_file_id: String,
    pub status: String,
    /// The input file's lines.
    pub lines: Vec<Value>,
    pub polls: usize,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub completed: usize,
    pub failed: usize,
}

impl Job {
    fn object(&self) -> Value {
        json!({
            "id": self.id, "object": "batch", "endpoint": "/v1/chat/completions",
            "input_file_id": self.input_file_id, "completion_window": "24h", "status": self.status,
            "output_file_id": self.output_file_id, "error_file_id": self.error_file_id, "created_at": 0,
            "request_counts": {"total": self.lines.len(), "completed": self.completed, "failed": self.failed},
        })
    }

    /// The `custom_id` of every line of its input file.
    pub fn custom_ids(&self) -> Vec<String> {
        self.lines.iter().map(|l| l["custom_id"].as_str().unwrap_or_default().to_string()).collect()
    }
}

#[derive(Default)]
struct Log {
    files: BTreeMap<String, Vec<u8>>,
    jobs: Vec<Job>,
    /// Every request, as `METHOD PATH`.
    requests: Vec<String>,
    uploads: usize,
    chats: usize,
    polls: usize,
    cuts: usize,
    /// How many times each request (by `custom_id`) was failed on purpose.
    failed: BTreeMap<String, usize>,
    answered: usize,
}

struct State {
    rule: Box<Rule>,
    faults: Faults,
    held: AtomicBool,
    log: Mutex<Log>,
}

pub struct BatchApi {
    port: u16,
    state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BatchApi {
    /// Start on a free loopback port; `rule` answers every request, batched or live.
    pub fn start(rule: impl Fn(&Seen) -> Answer + Send + Sync + 'static, faults: Faults) -> BatchApi {
        let held = AtomicBool::new(faults.hold);
        let state = Arc::new(State { rule: Box::new(rule), faults, held, log: Mutex::new(Log::default()) });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let st = state.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let accept = async {
                    loop {
                        let Ok((sock, _)) = listener.accept().await else { continue };
                        let _ = sock.set_nodelay(true);
                        let st = st.clone();
                        tokio::spawn(async move {
                            let _ = serve(sock, st).await;
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stop_rx => {}
                }
            });
            rt.shutdown_timeout(Duration::from_millis(100));
        });
        BatchApi { port, state, stop: Some(stop_tx), thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Let held batches finish at their next poll.
    pub fn release(&self) {
        self.state.held.store(false, Ordering::SeqCst);
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.state.log.lock().unwrap()
    }

    /// Every batch made, in order.
    pub fn jobs(&self) -> Vec<Job> {
        self.log().jobs.clone()
    }

    /// Every request seen, as `METHOD PATH`.
    pub fn requests(&self) -> Vec<String> {
        self.log().requests.clone()
    }

    pub fn uploads(&self) -> usize {
        self.log().uploads
    }

    /// `POST /v1/chat/completions` requests (live calls).
    pub fn chats(&self) -> usize {
        self.log().chats
    }

    /// `GET /v1/batches/{id}` requests, cut ones included.
    pub fn polls(&self) -> usize {
        self.log().polls
    }

    /// Connections cut on purpose.
    pub fn cuts(&self) -> usize {
        self.log().cuts
    }
}

impl Drop for BatchApi {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(sock: tokio::net::TcpStream, st: Arc<State>) -> std::io::Result<()> {
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut words = line.split_whitespace();
        let method = words.next().unwrap_or_default().to_string();
        let path = words.next().unwrap_or("/").to_string();
        let (mut len, mut content_type) = (0usize, String::new());
        loop {
            let mut h = String::new();
            r.read_line(&mut h).await?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => len = v.trim().parse().unwrap_or(0),
                    "content-type" => content_type = v.trim().to_string(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).await?;
        match route(&st, &method, &path, &content_type, &body) {
            Some((code, text)) => write(&mut w, code, None, &text).await?,
            // A cut: the connection closes without an answer.
            None => return Ok(()),
        }
    }
}

fn not_found(what: &str) -> Option<(u16, String)> {
    Some((404, json!({"error": {"message": format!("no {what}"), "type": "invalid_request_error"}}).to_string()))
}

/// The answer to one request; `None` cuts the connection.
fn route(st: &State, method: &str, path: &str, content_type: &str, body: &[u8]) -> Option<(u16, String)> {
    let mut log = st.log.lock().unwrap();
    log.requests.push(format!("{method} {path}"));
    let p = path.strip_prefix("/v1").unwrap_or(path);
    match method {
        "POST" if p == "/chat/completions" => {
            log.chats += 1;
            let seen = Seen {
                n: log.requests.len() - 1,
                at: Instant::now(),
                path: path.to_string(),
                authorization: None,
                body: serde_json::from_slice(body).unwrap_or(Value::Null),
            };
            let (code, _, text) = reply(&seen, (st.rule)(&seen));
            Some((code, text))
        }
        "POST" if p == "/files" && !st.faults.no_files => {
            let Some(content) = multipart_file(content_type, body) else { return not_found("`file` part") };
            log.uploads += 1;
            let id = format!("file-{}", log.files.len() + 1);
            let bytes = content.len();
            log.files.insert(id.clone(), content);
            Some((200, json!({"id": id, "object": "file", "bytes": bytes, "purpose": "batch"}).to_string()))
        }
        "POST" if p == "/batches" => create(st, &mut log, body),
        "GET" if p == "/batches" || p.starts_with("/batches?") => Some((200, list(st, &log, p))),
        "GET" if p.starts_with("/batches/") => poll(st, &mut log, &p["/batches/".len()..]),
        "GET" if p.starts_with("/files/") && p.ends_with("/content") => {
            let id = &p["/files/".len()..p.len() - "/content".len()];
            match log.files.get(id) {
                Some(bytes) => Some((200, String::from_utf8_lossy(bytes).into_owned())),
                None => not_found("such file"),
            }
        }
        _ => not_found("such route"),
    }
}

fn create(st: &State, log: &mut Log, body: &[u8]) -> Option<(u16, String)> {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let file = v["input_file_id"].as_str().unwrap_or_default().to_string();
    let Some(content) = log.files.get(&file) else { return not_found("such file") };
    let lines: Vec<Value> = String::from_utf8_lossy(content)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
        .collect();
    let job = Job {
        id: format!("batch_{}", log.jobs.len() + 1),
        input_file_id: file,
        status: "validating".into(),
        lines,
        polls: 0,
        output_file_id: None,
        error_file_id: None,
        completed: 0,
        failed: 0,
    };
    let object = job.object();
    log.jobs.push(job);
    if st.faults.cut_first_create && log.jobs.len() == 1 {
        log.cuts += 1;
        return None;
    }
    Some((200, object.to_string()))
}

/// One page of `GET /v1/batches?limit=N&after=ID`, newest first: the batches of others
/// ([`Faults::others`]), then the stand-in's own.
fn list(st: &State, log: &Log, p: &str) -> String {
    let query = p.split_once('?').map_or("", |(_, q)| q);
    let param = |k: &str| query.split('&').find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='));
    let limit = param("limit").and_then(|l| l.parse().ok()).unwrap_or(20);
    let others = (1..=st.faults.others).rev().map(|k| {
        json!({"id": format!("batch_other_{k}"), "object": "batch", "input_file_id": format!("file-other-{k}"),
               "status": "completed", "request_counts": {"total": 1, "completed": 1, "failed": 0}})
    });
    let all: Vec<Value> = others.chain(log.jobs.iter().rev().map(Job::object)).collect();
    let start = match param("after") {
        Some(after) => all.iter().position(|b| b["id"] == after).map_or(all.len(), |i| i + 1),
        None => 0,
    };
    let page: Vec<Value> = all.iter().skip(start).take(limit).cloned().collect();
    let has_more = start + page.len() < all.len();
    let (first, last) = (page.first().map(|b| b["id"].clone()), page.last().map(|b| b["id"].clone()));
    json!({"object": "list", "data": page, "first_id": first, "last_id": last, "has_more": has_more}).to_string()
}

fn poll(st: &State, log: &mut Log, id: &str) -> Option<(u16, String)> {
    log.polls += 1;
    if st.faults.cut_poll == Some(log.polls) {
        log.cuts += 1;
        return None;
    }
    if st.faults.gone_first && id == "batch_1" {
        return not_found("such batch");
    }
    let Some(i) = log.jobs.iter().position(|j| j.id == id) else { return not_found("such batch") };
    let held = st.held.load(Ordering::SeqCst);
    let job = &mut log.jobs[i];
    if matches!(job.status.as_str(), "validating" | "in_progress") {
        job.polls += 1;
        job.status = "in_progress".into();
        if !held && job.polls > st.faults.polls {
            finish(st, log, i);
        }
    }
    Some((200, log.jobs[i].object().to_string()))
}

/// Answer every line of batch `i` by the rule (faults applied) into its output and error files.
fn finish(st: &State, log: &mut Log, i: usize) {
    let lines = log.jobs[i].lines.clone();
    let expire = st.faults.expire_first && i == 0;
    let half = lines.len() / 2;
    let (mut out, mut err) = (String::new(), String::new());
    let (mut completed, mut failed) = (0, 0);
    for (k, line) in lines.iter().enumerate() {
        let custom_id = line["custom_id"].as_str().unwrap_or_default().to_string();
        log.answered += 1;
        let n = log.answered;
        if expire && k >= half {
            let message = "This request could not be executed before the completion window expired.";
            let e = json!({"id": format!("batch_req_{n}"), "custom_id": custom_id, "response": null,
                           "error": {"code": "batch_expired", "message": message}});
            err.push_str(&format!("{e}\n"));
            failed += 1;
            continue;
        }
        let seen = Seen {
            n,
            at: Instant::now(),
            path: line["url"].as_str().unwrap_or_default().to_string(),
            authorization: None,
            body: line["body"].clone(),
        };
        let fails = match &st.faults.fail {
            Some((pick, times)) if pick(&seen) => {
                let count = log.failed.entry(custom_id.clone()).or_default();
                *count += 1;
                *count <= *times
            }
            _ => false,
        };
        let (code, text) = if fails {
            (500, json!({"error": {"message": "scripted batch failure", "type": "server_error"}}).to_string())
        } else {
            let (code, _, text) = reply(&seen, (st.rule)(&seen));
            (code, text)
        };
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        let entry = json!({"id": format!("batch_req_{n}"), "custom_id": custom_id,
                           "response": {"status_code": code, "request_id": format!("req_{n}"), "body": body},
                           "error": null});
        if code == 200 {
            out.push_str(&format!("{entry}\n"));
            completed += 1;
        } else {
            err.push_str(&format!("{entry}\n"));
            failed += 1;
        }
    }
    let id = log.jobs[i].id.clone();
    let mut keep = |suffix: &str, text: String| {
        (!text.is_empty()).then(|| {
            let file = format!("file-{id}-{suffix}");
            log.files.insert(file.clone(), text.into_bytes());
            file
        })
    };
    let (output, errors) = (keep("out", out), keep("err", err));
    let job = &mut log.jobs[i];
    job.status = if expire { "expired" } else { "completed" }.into();
    job.output_file_id = output;
    job.error_file_id = errors;
    job.completed = completed;
    job.failed = failed;
}

/// The content of the multipart part named `file`.
fn multipart_file(content_type: &str, body: &[u8]) -> Option<Vec<u8>> {
    let boundary = content_type.split("boundary=").nth(1)?.trim_matches('"');
    let next = format!("\r\n--{boundary}");
    let mut at = find(body, format!("--{boundary}").as_bytes(), 0)?;
    loop {
        let head = find(body, b"\r\n\r\n", at)?;
        let end = find(body, next.as_bytes(), head)?;
        if String::from_utf8_lossy(&body[at..head]).contains("name=\"file\"") {
            return Some(body[head + 4..end].to_vec());
        }
        at = end + 2;
    }
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| from + p)
}
