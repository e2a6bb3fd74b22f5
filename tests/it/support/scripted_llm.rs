//! TEST DOUBLE: a scripted OpenAI-compatible chat-completions server on 127.0.0.1.
//!
//! Not a model: it answers each request with whatever the test's rule returns for it —
//! content (plain, `<think>` blocks, fenced JSON, malformed JSON), tool calls, an HTTP
//! status with an optional `Retry-After`, a body that is not JSON, a raw JSON body (the
//! embedding tests answer `/v1/embeddings` this way), or a delay before any of these. It logs every request (arrival time, body, `Authorization` header) and the
//! highest number of requests in flight at once, so tests can check retries, back-off,
//! rate limits, the concurrency bound, re-asks and cache hits (zero new requests).
//!
//! Hand-written HTTP/1.1 (keep-alive, Content-Length bodies) on its own thread and tokio
//! runtime, so it serves sync tests and benchgen subprocesses alike.
//!
//! Use: `let s = ScriptedLlm::start(|req| Answer::json(json!({"ok": true})));`
//! then point a role's `base_url` at `s.base_url()`.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// What the server does with one request.
#[derive(Debug, Clone)]
pub enum Answer {
    /// 200 with this assistant content.
    Content(String),
    /// 200 with tool calls `(name, arguments JSON)` and no content.
    ToolCalls(Vec<(String, Value)>),
    /// A non-2xx status with a JSON error body (`body`) and an optional `Retry-After`.
    Status { code: u16, retry_after: Option<String>, body: String },
    /// 200 whose body is not JSON at all.
    MalformedBody,
    /// 200 with exactly this JSON body (e.g. an `/v1/embeddings` answer).
    Raw(String),
    /// Wait, then answer.
    Delay(Duration, Box<Answer>),
}

impl Answer {
    pub fn text(s: &str) -> Answer {
        Answer::Content(s.to_string())
    }
    pub fn json(v: Value) -> Answer {
        Answer::Content(v.to_string())
    }
    pub fn status(code: u16) -> Answer {
        Answer::Status {
            code,
            retry_after: None,
            body: json!({"error": {"message": format!("scripted status {code}"), "type": "scripted"}}).to_string(),
        }
    }
    pub fn too_many(retry_after: &str) -> Answer {
        Answer::Status {
            code: 429,
            retry_after: Some(retry_after.to_string()),
            body: json!({"error": {"message": "rate limited", "type": "rate_limit_error"}}).to_string(),
        }
    }
    pub fn after(self, ms: u64) -> Answer {
        Answer::Delay(Duration::from_millis(ms), Box::new(self))
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// 0-based arrival index.
    pub n: usize,
    pub at: Instant,
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

impl Seen {
    /// Content of the last user message.
    pub fn last_user(&self) -> String {
        self.body["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string()
    }
    /// Every message's content joined (for rules that match on the prompt).
    pub fn all_text(&self) -> String {
        self.body["messages"]
            .as_array()
            .map(|m| m.iter().filter_map(|m| m["content"].as_str()).collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    }
}

impl Seen {
    /// The JSON Schema a typed request asks its answer to match: `response_format`'s, or
    /// (for roles with `json_schema = false`) the one the prompt states.
    pub fn answer_schema(&self) -> Option<Value> {
        if let Some(s) = self.body["response_format"]["json_schema"].get("schema") {
            return Some(s.clone());
        }
        const MARK: &str = "matches this JSON Schema, nothing else:\n```json\n";
        let text = self.all_text();
        let at = text.find(MARK)? + MARK.len();
        let end = text[at..].find("\n```")?;
        serde_json::from_str(&text[at..at + end]).ok()
    }
}

/// Which edge of each request's schema [`ScriptedLlm::at_schema_edge`] answers at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// Every choice at its lowest: each `minimum`, `enum` member 1, the shortest lists and
    /// strings, optional properties left out.
    Min,
    /// Every choice at its highest: each `maximum`, the last `enum` member, the longest
    /// lists and strings, every optional property.
    Max,
}

type Rule = dyn Fn(&Seen) -> Answer + Send + Sync;

struct State {
    log: Mutex<Vec<Seen>>,
    count: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    rule: Box<Rule>,
}

pub struct ScriptedLlm {
    port: u16,
    state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ScriptedLlm {
    /// Start on a free loopback port; `rule` decides every answer.
    pub fn start(rule: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> ScriptedLlm {
        let state = Arc::new(State {
            log: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            rule: Box::new(rule),
        });
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
        ScriptedLlm { port, state, stop: Some(stop_tx), thread: Some(thread) }
    }

    /// A server that answers each typed request exactly at one edge of its schema, as a
    /// server with grammar-constrained decoding may (see `support::schema_edges`); a
    /// request with tools gets a final text answer, a plain one a short text.
    pub fn at_schema_edge(edge: Edge) -> ScriptedLlm {
        Self::start(move |seen| match seen.answer_schema() {
            Some(schema) => Answer::json(match edge {
                Edge::Min => super::schema_edges::minimum(&schema),
                Edge::Max => super::schema_edges::maximum(&schema),
            }),
            None if seen.body.get("tools").is_some() => Answer::text("The scripted assistant's final answer."),
            None => Answer::text("scripted"),
        })
    }

    /// A server that answers every request with the same content.
    pub fn constant(content: &str) -> ScriptedLlm {
        let c = content.to_string();
        Self::start(move |_| Answer::text(&c))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn count(&self) -> usize {
        self.state.count.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.state.log.lock().unwrap().clone()
    }

    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptedLlm {
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
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let mut len = 0usize;
        let mut auth = None;
        loop {
            let mut h = String::new();
            r.read_line(&mut h).await?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                if k == "content-length" {
                    len = v.trim().parse().unwrap_or(0);
                } else if k == "authorization" {
                    auth = Some(v.trim().to_string());
                }
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).await?;
        if path.ends_with("/health") {
            write(&mut w, 200, None, "{\"status\":\"ok\"}").await?;
            continue;
        }
        let seen = Seen {
            n: st.count.fetch_add(1, Ordering::SeqCst),
            at: Instant::now(),
            path,
            authorization: auth,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        st.log.lock().unwrap().push(seen.clone());
        let now = st.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        st.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let mut answer = (st.rule)(&seen);
        while let Answer::Delay(d, inner) = answer {
            tokio::time::sleep(d).await;
            answer = *inner;
        }
        st.in_flight.fetch_sub(1, Ordering::SeqCst);
        let (code, retry_after, body) = reply(&seen, answer);
        if code == 200 && seen.body["stream"] == true {
            write_as(&mut w, (code, "text/event-stream"), None, &events(&body)).await?;
            continue;
        }
        write(&mut w, code, retry_after.as_deref(), &body).await?;
    }
}

/// The status, `Retry-After` and body this server sends for `answer` to `seen` (a delay is
/// not waited here; `serve` waits it first). Shared with the batch stand-in
/// (`support::batch_api`), whose output lines carry the same bodies.
pub fn reply(seen: &Seen, answer: Answer) -> (u16, Option<String>, String) {
    let model = seen.body["model"].clone();
    let prompt_tokens = seen.all_text().len() / 4;
    match answer {
        Answer::Content(c) => {
            let b = completion(&model, json!({"role": "assistant", "content": c}), "stop", prompt_tokens, c.len() / 4);
            (200, None, b)
        }
        Answer::ToolCalls(calls) => {
            let tc: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (n, a))| {
                    json!({"id": format!("call_{i}"), "type": "function",
                           "function": {"name": n, "arguments": a.to_string()}})
                })
                .collect();
            let b = completion(
                &model,
                json!({"role": "assistant", "content": null, "tool_calls": tc}),
                "tool_calls",
                prompt_tokens,
                10,
            );
            (200, None, b)
        }
        Answer::Status { code, retry_after, body } => (code, retry_after, body),
        Answer::MalformedBody => (200, None, "{\"choices\": [ this is not json".to_string()),
        Answer::Raw(body) => (200, None, body),
        Answer::Delay(_, inner) => reply(seen, *inner),
    }
}

fn completion(model: &Value, message: Value, finish: &str, pt: usize, ct: usize) -> String {
    json!({
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}
    })
    .to_string()
}

/// A chat completion (`body`) as the server-sent events of the streamed answer that a
/// request with `stream: true` asks for: the content in pieces of four characters, each
/// tool call in a delta of its own, the finish, then the usage; every piece carries
/// llama-server's running `timings` (its `timings_per_token`). A body that is no chat
/// completion goes as it is.
pub fn events(body: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return body.to_string();
    };
    let Some(choice) = v["choices"].get(0) else {
        return body.to_string();
    };
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    let mut n = 0u64;
    let mut out = String::new();
    let mut push = |delta: Value, finish: Value, n: u64| {
        let chunk = json!({"id": v["id"], "object": "chat.completion.chunk", "created": v["created"], "model": v["model"],
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                           "timings": {"prompt_n": prompt, "cache_n": 0, "predicted_n": n}});
        out.push_str(&format!("data: {chunk}\n\n"));
    };
    push(json!({"role": "assistant", "content": null}), Value::Null, n);
    let chars: Vec<char> = choice["message"]["content"].as_str().unwrap_or("").chars().collect();
    for piece in chars.chunks(4) {
        n += 1;
        push(json!({"content": piece.iter().collect::<String>()}), Value::Null, n);
    }
    for (i, call) in choice["message"]["tool_calls"].as_array().into_iter().flatten().enumerate() {
        n += 1;
        let mut c = call.clone();
        c["index"] = json!(i);
        push(json!({"tool_calls": [c]}), Value::Null, n);
    }
    push(json!({}), choice["finish_reason"].clone(), n);
    out.push_str(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"id": v["id"], "object": "chat.completion.chunk", "choices": [], "usage": v["usage"]})
    ));
    out
}

pub async fn write(
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    code: u16,
    retry_after: Option<&str>,
    body: &str,
) -> std::io::Result<()> {
    write_as(w, (code, "application/json"), retry_after, body).await
}

/// [`write`] with the body's content type.
pub async fn write_as(
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    (code, content_type): (u16, &str),
    retry_after: Option<&str>,
    body: &str,
) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let mut head =
        format!("HTTP/1.1 {code} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n", body.len());
    if let Some(ra) = retry_after {
        head.push_str(&format!("retry-after: {ra}\r\n"));
    }
    head.push_str("\r\n");
    // One write: head and body in separate segments would meet Nagle + delayed ACK (40 ms).
    head.push_str(body);
    w.write_all(head.as_bytes()).await?;
    w.flush().await
}
