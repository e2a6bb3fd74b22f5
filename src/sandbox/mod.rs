//! `benchgen sandbox`: an MCP server of our own that serves every tool of a catalog, so
//! pipelines can execute against a live MCP server offline.
//!
//! - Tool names are catalog tool ids (`server::tool`); configure the client side with
//!   `tool_ids = "as-is"`. `tools/list` pages through the catalog (`--page-size`).
//! - Arguments are validated against the tool's input schema (jsonschema); an invalid call
//!   is a tool error (`isError`) that names every offending field, e.g.
//!   ``invalid arguments for `s::t`: `arguments.limit`: "ten" is not of type "integer"``.
//! - A valid call gets a deterministic answer (see [`generate`]): the same tool and
//!   arguments give the same bytes across calls, restarts and machines.
//! - Faults for tests and rehearsals, decided per call from a hash of the call (so the
//!   same call always meets the same fault) or, for `--crash-after N`, by call count:
//!   latency, tool errors, hangs (timeouts), crashes, invalid JSON-RPC (stdio) and huge
//!   results.
//! - **Recorded responses** (`--recorded SESSIONS.jsonl`, and the default sandbox of
//!   `execute` and `synth roleplay`): where the anonymised logs hold a result for a call
//!   of the same tool with equal arguments (compared canonically: key order does not
//!   matter), that result is the answer; otherwise the answer is generated as above. So
//!   executions see the domain's realistic values. See [`Recorded`]. A catalog's
//!   `server::tool` id is answered from results logged under the bare `tool` name (and a
//!   bare name from `server::tool`) when that name is unambiguous; `benchgen sandbox`
//!   fails when no served tool has a recorded result, naming the logged tool names.
//! - `--call-log FILE` appends one JSON line per call: `{seq, tool, arguments, outcome,
//!   latency_ms}` with outcome `ok | invalid_arguments | unknown_tool | fault:<kind>`.
//!
//! Served over stdio (default) or Streamable HTTP on a loopback address (`--http`).

pub mod command;
pub mod conform;
pub mod domain;
pub mod generate;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::model::Catalog;

/// Fault injection and latency. Rates are probabilities in [0, 1].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Fixed delay added to every call.
    pub latency_ms: u64,
    /// Extra delay, uniform in [0, jitter_ms], from the call's hash.
    pub jitter_ms: u64,
    /// Answer with a tool error (`isError`) naming the injected fault.
    pub error_rate: f64,
    /// Never answer (until the client cancels).
    pub timeout_rate: f64,
    /// Crash: the process exits (binary) or the connection is dropped (in process).
    pub crash_rate: f64,
    /// Crash on the N-th call (1-based, counted across the process).
    pub crash_after: Option<u64>,
    /// Write a line that is not JSON-RPC instead of answering (stdio only; HTTP answers
    /// with a JSON-RPC internal error).
    pub garbage_rate: f64,
    /// Answer with `huge_bytes` of text.
    pub huge_rate: f64,
    pub huge_bytes: usize,
}

/// What the sandbox serves and how.
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    pub seed: u64,
    pub page_size: usize,
    pub faults: Faults,
    pub call_log: Option<PathBuf>,
    /// On a crash fault, exit the process (the binary) instead of dropping the connection.
    pub exit_on_crash: bool,
    /// Logged results answered for equal calls (recorded-responses mode).
    pub recorded: Option<Arc<Recorded>>,
}

/// Logged tool results by tool and canonical arguments (recorded-responses mode).
///
/// Built from log sessions in session-id order; when the logs hold several results for the
/// same call, the first successful one wins (deterministic). Failed calls (an `error`, or
/// no result) are not recorded.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Recorded {
    results: std::collections::BTreeMap<(String, String), String>,
}

impl Recorded {
    /// The successful results of every call in `sessions`.
    pub fn from_sessions(sessions: &[crate::logs::Session]) -> Self {
        let mut sorted: Vec<&crate::logs::Session> = sessions.iter().collect();
        sorted.sort_by(|a, b| a.id.cmp(&b.id));
        let mut r = Self::default();
        for s in sorted {
            for c in s.calls() {
                if let (Some(result), None) = (&c.result, &c.error) {
                    r.insert(&c.tool, &c.arguments, result);
                }
            }
        }
        r
    }

    /// Record one result (the first for a call is kept).
    pub fn insert(&mut self, tool: &str, args: &Value, result: &str) {
        self.results.entry((tool.to_string(), Self::key(args))).or_insert_with(|| result.to_string());
    }

    /// The logged result of this call, if any.
    pub fn get(&self, tool: &str, args: &Value) -> Option<&str> {
        self.results.get(&(tool.to_string(), Self::key(args))).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.results.len()
    }

    /// The tool names the recorded results are for.
    pub fn tools(&self) -> std::collections::BTreeSet<&str> {
        self.results.keys().map(|(t, _)| t.as_str()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }

    fn key(args: &Value) -> String {
        generate::canonical(args).to_string()
    }
}

impl Default for SandboxOptions {
    fn default() -> Self {
        Self {
            seed: 0,
            page_size: 1000,
            faults: Faults::default(),
            call_log: None,
            exit_on_crash: false,
            recorded: None,
        }
    }
}

struct Entry {
    input_schema: Value,
    output_schema: Option<Value>,
    validator: OnceLock<Result<jsonschema::Validator, String>>,
    /// The tool name the recorded results of this tool are filed under (see
    /// [`recorded_names`]), when any are.
    recorded_as: Option<String>,
}

/// The tool name after the last `::` (`server::tool` → `tool`).
fn bare(id: &str) -> &str {
    id.rsplit("::").next().unwrap_or(id)
}

/// For each catalog tool id, the recorded tool name its calls are answered from: the id
/// itself when the logs use it; else the one recorded name with the same bare tool name,
/// when no other catalog tool has that bare name. So a benchgen catalog's `server::tool`
/// ids find the bare names logs hold, and a log catalog's bare names find `server::tool`
/// names, never guessing between two servers' tools of one name.
fn recorded_names<'a>(ids: &[&'a str], recorded: &std::collections::BTreeSet<&str>) -> HashMap<&'a str, String> {
    let mut catalog_bare: HashMap<&str, usize> = HashMap::new();
    for id in ids {
        *catalog_bare.entry(bare(id)).or_default() += 1;
    }
    let mut out = HashMap::new();
    for &id in ids {
        if recorded.contains(id) {
            out.insert(id, id.to_string());
            continue;
        }
        if catalog_bare[bare(id)] > 1 {
            continue;
        }
        let mut same = recorded.iter().filter(|r| bare(r) == bare(id));
        if let (Some(r), None) = (same.next(), same.next()) {
            out.insert(id, r.to_string());
        }
    }
    out
}

struct Inner {
    tools: Vec<Tool>,
    entries: HashMap<String, Entry>,
    opts: SandboxOptions,
    calls: AtomicU64,
    log: Option<Mutex<std::fs::File>>,
}

/// The sandbox server (cheap to clone; one per connection shares the catalog).
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
    /// Cancelling this drops the connection (the in-process stand-in for a crash).
    kill: CancellationToken,
    /// Raw stdout for the garbage fault (stdio only).
    raw: Option<RawOut>,
}

type RawOut = Arc<tokio::sync::Mutex<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>>;

impl Sandbox {
    pub fn new(catalog: &Catalog, opts: SandboxOptions) -> Result<Self> {
        let mut tools = Vec::with_capacity(catalog.tool_count());
        let mut entries = HashMap::new();
        let ids: Vec<&str> = catalog.tools().map(|(_, t)| t.id.as_str()).collect();
        let recorded_tools = opts.recorded.as_ref().map(|r| r.tools()).unwrap_or_default();
        let mut recorded_as = recorded_names(&ids, &recorded_tools);
        for (_, t) in catalog.tools() {
            let Value::Object(schema) = &t.input_schema else {
                bail!("tool `{}`: input schema is not a JSON object", t.id);
            };
            let mut tool = Tool::new(t.id.clone(), t.description.clone(), Arc::new(schema.clone()));
            if let Some(Value::Object(os)) = &t.output_schema {
                tool = tool.with_raw_output_schema(Arc::new(os.clone()));
            }
            if entries
                .insert(
                    t.id.clone(),
                    Entry {
                        input_schema: t.input_schema.clone(),
                        output_schema: t.output_schema.clone(),
                        validator: OnceLock::new(),
                        recorded_as: recorded_as.remove(t.id.as_str()),
                    },
                )
                .is_some()
            {
                bail!("tool id `{}` appears twice in the catalog", t.id);
            }
            tools.push(tool);
        }
        let log = match &opts.call_log {
            Some(p) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .with_context(|| format!("cannot open call log `{}`", p.display()))?,
            )),
            None => None,
        };
        Ok(Self {
            inner: Arc::new(Inner { tools, entries, opts, calls: AtomicU64::new(0), log }),
            kill: CancellationToken::new(),
            raw: None,
        })
    }

    pub fn tool_count(&self) -> usize {
        self.inner.tools.len()
    }

    /// Recorded-responses coverage: `(catalog id, recorded name)` of every served tool
    /// that has recorded results, sorted, and the recorded names no served tool answers
    /// from (not in the catalog, or ambiguous between two of its tools).
    pub fn recorded_coverage(&self) -> (Vec<(String, String)>, Vec<String>) {
        let mut matched: Vec<(String, String)> =
            self.inner.entries.iter().filter_map(|(id, e)| e.recorded_as.clone().map(|r| (id.clone(), r))).collect();
        matched.sort();
        let used: std::collections::BTreeSet<&str> = matched.iter().map(|(_, r)| r.as_str()).collect();
        let unmatched = match &self.inner.opts.recorded {
            Some(r) => r.tools().into_iter().filter(|t| !used.contains(t)).map(str::to_string).collect(),
            None => Vec::new(),
        };
        (matched, unmatched)
    }

    /// A handle for one connection (its own crash switch and raw output).
    fn for_connection(&self, raw: Option<RawOut>) -> Self {
        Self { inner: self.inner.clone(), kill: CancellationToken::new(), raw }
    }

    fn log(&self, seq: u64, tool: &str, args: &Value, outcome: &str, started: Instant) {
        if let Some(f) = &self.inner.log {
            let line = json!({
                "seq": seq, "tool": tool, "arguments": args, "outcome": outcome,
                "latency_ms": started.elapsed().as_millis() as u64,
            });
            let mut f = f.lock().unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(f, "{line}");
        }
    }

    /// Validate `args` for `tool`; `Err` is the tool-error text naming each bad field.
    pub fn validate(&self, tool: &str, args: &Value) -> Result<(), String> {
        let Some(e) = self.inner.entries.get(tool) else {
            return Err(format!("unknown tool `{tool}`"));
        };
        let v = e.validator.get_or_init(|| {
            jsonschema::validator_for(&e.input_schema)
                .map_err(|err| format!("the catalog's input schema is invalid: {err}"))
        });
        let validator = match v {
            Ok(v) => v,
            Err(m) => return Err(format!("cannot validate arguments for `{tool}`: {m}")),
        };
        let mut problems: Vec<String> = validator
            .iter_errors(args)
            .map(|err| {
                let path = err.instance_path().as_str().trim_start_matches('/').replace('/', ".");
                let at = if path.is_empty() { "arguments".to_string() } else { format!("arguments.{path}") };
                format!("`{at}`: {err}")
            })
            .collect();
        problems.sort();
        problems.dedup();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("invalid arguments for `{tool}`: {}", problems.join("; ")))
        }
    }

    async fn crash(&self) {
        if self.inner.opts.exit_on_crash {
            eprintln!("benchgen sandbox: injected crash");
            std::process::exit(70);
        }
        self.kill.cancel();
        // Never answer: the connection is going away.
        std::future::pending::<()>().await;
    }

    /// Answer one call in process, as `tools/call` would (eval's tool search forwards its
    /// `call_tool` calls here, so they meet the same recordings, validation and values).
    pub async fn answer(&self, tool: &str, args: Value) -> Result<CallToolResult, ErrorData> {
        self.handle(tool.to_string(), args, CancellationToken::new()).await
    }

    async fn handle(&self, tool: String, args: Value, ct: CancellationToken) -> Result<CallToolResult, ErrorData> {
        let started = Instant::now();
        let seq = self.inner.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let Some(entry) = self.inner.entries.get(&tool) else {
            self.log(seq, &tool, &args, "unknown_tool", started);
            return Err(ErrorData::invalid_params(format!("unknown tool `{tool}`"), None));
        };
        let f = &self.inner.opts.faults;
        let seed = self.inner.opts.seed;
        let roll = |salt: &str| generate::unit(seed, salt, &tool, &args);
        let delay = f.latency_ms + if f.jitter_ms > 0 { (roll("jitter") * (f.jitter_ms + 1) as f64) as u64 } else { 0 };
        if delay > 0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
                _ = ct.cancelled() => return Err(ErrorData::internal_error("cancelled", None)),
            }
        }
        if f.crash_after == Some(seq) || roll("crash") < f.crash_rate {
            self.log(seq, &tool, &args, "fault:crash", started);
            self.crash().await;
        }
        if roll("timeout") < f.timeout_rate {
            self.log(seq, &tool, &args, "fault:timeout", started);
            ct.cancelled().await;
            return Err(ErrorData::internal_error("cancelled", None));
        }
        if roll("garbage") < f.garbage_rate {
            self.log(seq, &tool, &args, "fault:garbage", started);
            if let Some(raw) = &self.raw {
                let mut w = raw.lock().await;
                let _ = w.write_all(b"this line is not JSON-RPC (injected fault)\n").await;
                let _ = w.flush().await;
                drop(w);
                ct.cancelled().await;
            }
            return Err(ErrorData::internal_error("injected fault: invalid response", None));
        }
        if let Err(msg) = self.validate(&tool, &args) {
            self.log(seq, &tool, &args, "invalid_arguments", started);
            return Ok(CallToolResult::error(vec![ContentBlock::text(msg)]));
        }
        if roll("error") < f.error_rate {
            self.log(seq, &tool, &args, "fault:error", started);
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "injected fault: `{tool}` failed (sandbox --error-rate)"
            ))]));
        }
        if roll("huge") < f.huge_rate {
            self.log(seq, &tool, &args, "fault:huge", started);
            return Ok(CallToolResult::success(vec![ContentBlock::text("x".repeat(f.huge_bytes))]));
        }
        let recorded = self.inner.opts.recorded.as_ref().zip(entry.recorded_as.as_deref());
        if let Some(text) = recorded.and_then(|(r, name)| r.get(name, &args)) {
            self.log(seq, &tool, &args, "recorded", started);
            return Ok(CallToolResult::success(vec![ContentBlock::text(text.to_string())]));
        }
        let out = generate::output(seed, &tool, &args, entry.output_schema.as_ref());
        self.log(seq, &tool, &args, "ok", started);
        Ok(if entry.output_schema.is_some() {
            CallToolResult::structured(out)
        } else {
            CallToolResult::success(vec![ContentBlock::text(out.to_string())])
        })
    }
}

impl ServerHandler for Sandbox {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("benchgen-sandbox", env!("CARGO_PKG_VERSION")))
            .with_instructions("benchgen sandbox: deterministic stand-ins for every tool of a catalog")
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let start = match request.and_then(|r| r.cursor) {
            Some(c) => c.parse::<usize>().map_err(|_| ErrorData::invalid_params(format!("bad cursor `{c}`"), None))?,
            None => 0,
        };
        let tools = &self.inner.tools;
        let end = (start + self.inner.opts.page_size.max(1)).min(tools.len());
        let mut page = ListToolsResult::with_all_items(tools[start.min(end)..end].to_vec());
        if end < tools.len() {
            page.next_cursor = Some(end.to_string());
        }
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        self.handle(request.name.to_string(), args, context.ct.clone()).await.map(Into::into)
    }
}

/// A line-delimited JSON-RPC server transport whose writer the sandbox can also use to
/// inject a raw (invalid) line between whole messages.
struct LineServer {
    rx: tokio::sync::mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    out: RawOut,
    reader: tokio::task::JoinHandle<()>,
}

impl LineServer {
    fn new<R: tokio::io::AsyncRead + Send + Unpin + 'static>(read: R, out: RawOut) -> Self {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let err_out = out.clone();
        let reader = tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.trim().is_empty() {
                    continue;
                }
                // Lines the MCP service cannot take get their JSON-RPC error here (-32700,
                // -32600, -32602) instead of silence.
                let refused = match conform::precheck(line.as_bytes()) {
                    Some(e) => Some(e),
                    None => match serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(&line) {
                        Ok(m) => {
                            if tx.send(m).await.is_err() {
                                break;
                            }
                            None
                        }
                        Err(e) => Some(conform::invalid_request(line.as_bytes(), &e.to_string())),
                    },
                };
                if let Some(e) = refused {
                    tracing::warn!("sandbox: refused a line: {}", e["error"]["message"]);
                    let mut w = err_out.lock().await;
                    let mut bytes = e.to_string().into_bytes();
                    bytes.push(b'\n');
                    if w.write_all(&bytes).await.is_err() || w.flush().await.is_err() {
                        break;
                    }
                }
            }
        });
        Self { rx, out, reader }
    }
}

impl Drop for LineServer {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Transport<RoleServer> for LineServer {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = self.out.clone();
        async move {
            let mut line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            line.push(b'\n');
            let mut w = out.lock().await;
            w.write_all(&line).await?;
            w.flush().await
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.rx.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.rx.close();
        Ok(())
    }
}

/// Serve one connection over a reader/writer pair (stdin/stdout, or a duplex in tests)
/// until the peer closes it or a crash fault drops it.
pub async fn serve_io<R, W>(sandbox: &Sandbox, read: R, write: W) -> Result<()>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let raw: RawOut = Arc::new(tokio::sync::Mutex::new(Box::new(write)));
    let conn = sandbox.for_connection(Some(raw.clone()));
    let kill = conn.kill.clone();
    let service = conn.serve(LineServer::new(read, raw)).await.context("MCP handshake failed")?;
    let ct = service.cancellation_token();
    tokio::select! {
        r = service.waiting() => { r.context("sandbox connection task failed")?; }
        _ = kill.cancelled() => { ct.cancel(); }
    }
    Ok(())
}

/// Serve another MCP server of ours (eval's tool search) over a reader/writer pair with
/// the sandbox's line transport, so it answers malformed lines as the sandbox does, until
/// the peer closes the connection.
pub async fn serve_handler_io<H, R, W>(handler: H, read: R, write: W) -> Result<()>
where
    H: ServerHandler,
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let raw: RawOut = Arc::new(tokio::sync::Mutex::new(Box::new(write)));
    // Named in full: for a generic handler, the role cannot be left to inference.
    let service = <H as ServiceExt<RoleServer>>::serve(handler, LineServer::new(read, raw))
        .await
        .context("MCP handshake failed")?;
    service.waiting().await.context("MCP connection task failed")?;
    Ok(())
}

/// Accepted connections with Nagle's algorithm off. A response goes out in several small
/// writes (headers, then SSE events); with Nagle on, a peer that reuses its connection and
/// delays its ACKs waits ~40 ms for every call after the first.
fn nodelay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY on a sandbox connection: {e}");
        }
    })
}

/// A running Streamable HTTP sandbox.
pub struct HttpSandbox {
    pub addr: SocketAddr,
    pub stop: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

impl HttpSandbox {
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

/// Serve Streamable HTTP at `http://ADDR/mcp`. Only loopback addresses are accepted.
pub async fn serve_http(sandbox: &Sandbox, addr: SocketAddr) -> Result<HttpSandbox> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    if !addr.ip().is_loopback() {
        bail!("the sandbox serves loopback addresses only (127.0.0.1, ::1), not {}", addr.ip());
    }
    let stop = CancellationToken::new();
    let config = StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token());
    let base = sandbox.clone();
    let crash_stop = stop.clone();
    let service: StreamableHttpService<Sandbox, LocalSessionManager> = StreamableHttpService::new(
        move || {
            let conn = base.for_connection(None);
            // In process, a crash fault stops the whole HTTP server (the process would die).
            let kill = conn.kill.clone();
            let stop = crash_stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = kill.cancelled() => stop.cancel(),
                    _ = stop.cancelled() => {}
                }
            });
            Ok(conn)
        },
        Default::default(),
        config,
    );
    let router =
        axum::Router::new().nest_service("/mcp", service).layer(axum::middleware::from_fn(conform::http_guard));
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot bind {addr}"))?;
    let addr = listener.local_addr()?;
    let listener = nodelay(listener);
    let s2 = stop.clone();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).with_graceful_shutdown(async move { s2.cancelled_owned().await }).await;
    });
    Ok(HttpSandbox { addr, stop, task })
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener;

    #[test]
    fn recorded_names_match_server_tool_ids_to_bare_names_unless_ambiguous() {
        let recorded = std::collections::BTreeSet::from(["get_host", "ops::restart", "list", "x::dup", "y::dup"]);
        let ids = ["ops::get_host", "restart", "a::list", "b::list", "dup", "ops::other"];
        let got = super::recorded_names(&ids, &recorded);
        let mut got: Vec<(&str, &str)> = got.iter().map(|(k, v)| (*k, v.as_str())).collect();
        got.sort();
        // `list` is two catalog tools' bare name and `dup` two recorded names: neither guessed.
        assert_eq!(got, [("ops::get_host", "get_host"), ("restart", "ops::restart")]);
    }

    #[tokio::test]
    async fn http_connections_have_nagle_off() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut l = super::nodelay(l);
        let client = tokio::spawn(async move { tokio::net::TcpStream::connect(addr).await.unwrap() });
        let (tcp, _) = l.accept().await;
        assert!(tcp.nodelay().unwrap(), "TCP_NODELAY is set on accepted connections");
        drop(client.await.unwrap());
    }
}
