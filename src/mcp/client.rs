//! The MCP client: connect to one server (spawned over stdio, or Streamable HTTP), list
//! its tools (every page), call tools with a timeout and cancellation.
//!
//! A call ends in exactly one [`CallOutcome`]: `ok`, `tool_error` (the server ran the
//! tool and set `isError`), or `failed` with a typed [`CallFailure`] (timeout, crash,
//! invalid JSON-RPC, oversized result, protocol error, cancelled, cannot connect). A
//! failure never escapes as a panic or a hang: every wait is bounded, a broken
//! connection is dropped (its server process group killed) and the next call on the
//! same [`McpClient`] starts a fresh one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CancelledNotification, CancelledNotificationParam, ClientCapabilities, ClientRequest,
    Implementation, InitializeRequestParams, PaginatedRequestParams, ProtocolVersion, Request, ServerResult,
};
use rmcp::service::{
    ClientLifecycleMode, PeerRequestOptions, RunningService, ServiceError, serve_client_with_lifecycle,
};
use rmcp::{ClientHandler, RoleClient};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::config::{Endpoint, Lifecycle, McpSettings, ServerSpec, ToolIds};
use super::stdio::{self, Broken, ChildGuard, LinkState, StdioTransport};
use crate::error::json_type_name as json_kind;
use crate::settings::Settings;

/// Client-wide limits and where spawned servers' stderr goes.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub call_timeout: Duration,
    pub startup_timeout: Duration,
    pub max_result_bytes: usize,
    pub max_message_bytes: usize,
    /// Bounds on one tool listing: pages, tools and total time.
    pub max_list_pages: usize,
    pub max_list_tools: usize,
    pub list_timeout: Duration,
    /// Folder for `<server>.stderr.log` files.
    pub log_dir: PathBuf,
    /// Project root (relative `cwd`s resolve against it).
    pub root: PathBuf,
}

impl ClientOptions {
    pub fn from_settings(settings: &Settings, mcp: &McpSettings) -> Self {
        Self {
            call_timeout: Duration::from_secs_f64(mcp.call_timeout_secs),
            startup_timeout: Duration::from_secs_f64(mcp.startup_timeout_secs),
            max_result_bytes: mcp.max_result_bytes,
            max_message_bytes: mcp.max_message_bytes,
            max_list_pages: mcp.max_list_pages,
            max_list_tools: mcp.max_list_tools,
            list_timeout: Duration::from_secs_f64(mcp.list_timeout_secs.max(0.001)),
            log_dir: settings.artifacts.join("mcp").join("logs"),
            root: settings.root.clone(),
        }
    }

    pub fn new(log_dir: &Path) -> Self {
        let d = McpSettings::default();
        Self {
            call_timeout: Duration::from_secs_f64(d.call_timeout_secs),
            startup_timeout: Duration::from_secs_f64(d.startup_timeout_secs),
            max_result_bytes: d.max_result_bytes,
            max_message_bytes: d.max_message_bytes,
            max_list_pages: d.max_list_pages,
            max_list_tools: d.max_list_tools,
            list_timeout: Duration::from_secs_f64(d.list_timeout_secs),
            log_dir: log_dir.to_path_buf(),
            root: std::env::current_dir().unwrap_or_default(),
        }
    }
}

/// A tool as the server lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolInfo {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

/// Why a call produced no tool result. Serialised as `{"kind": "...", ...}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallFailure {
    /// The server could not be spawned or reached, or the handshake failed.
    #[error("cannot connect: {message}")]
    Connect { message: String },
    /// No answer within the timeout; a cancellation was sent to the server.
    #[error("no answer within {after_ms} ms")]
    Timeout { after_ms: u64 },
    /// The caller cancelled the call.
    #[error("cancelled")]
    Cancelled,
    /// The server process exited or the connection closed while the call was pending.
    #[error("server crashed or closed the connection: {message}")]
    ServerCrashed { message: String },
    /// The server sent something that is not valid JSON-RPC.
    #[error("invalid JSON-RPC from the server: {message}")]
    InvalidResponse { message: String },
    /// The response exceeded `mcp.max_message_bytes`.
    #[error("response of {bytes} bytes exceeds the {limit}-byte message limit")]
    ResultTooLarge { bytes: u64, limit: u64 },
    /// The server answered with a JSON-RPC error (unknown tool, invalid params, …).
    #[error("JSON-RPC error {code}: {message}")]
    Protocol { code: i32, message: String },
    /// A tool listing went past `mcp.max_list_pages`, `mcp.max_list_tools` or
    /// `mcp.list_timeout_secs` (a server paging forever).
    #[error("tool listing stopped: {message}")]
    ListLimit { message: String },
    /// An HTTP or other transport error.
    #[error("transport error: {message}")]
    Transport { message: String },
}

/// Output of a tool that ran (successfully or with `isError`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolOutput {
    /// The text blocks of `content`, joined by newlines (what an LLM sees).
    pub text: String,
    /// `content` as the server sent it (after truncation).
    pub content: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Present when the output was cut to `mcp.max_result_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<Truncation>,
}

impl ToolOutput {
    /// An output that is only a text note (for calls refused before reaching a server).
    pub fn note(text: &str) -> Self {
        Self {
            text: text.to_string(),
            content: serde_json::json!([{"type": "text", "text": text}]),
            structured: None,
            truncated: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Truncation {
    pub original_bytes: u64,
    pub kept_bytes: u64,
    pub note: String,
}

/// How a call ended. Serialised as `{"status": "ok"|"tool_error"|"failed", ...}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallOutcome {
    Ok { output: ToolOutput },
    ToolError { output: ToolOutput },
    Failed { failure: CallFailure },
}

impl CallOutcome {
    pub fn status(&self) -> &'static str {
        match self {
            CallOutcome::Ok { .. } => "ok",
            CallOutcome::ToolError { .. } => "tool_error",
            CallOutcome::Failed { .. } => "failed",
        }
    }

    /// Text for a `tool` message: the output, or a one-line description of the failure.
    pub fn as_text(&self) -> String {
        match self {
            CallOutcome::Ok { output } => output.text.clone(),
            CallOutcome::ToolError { output } => format!("tool error: {}", output.text),
            CallOutcome::Failed { failure } => format!("call failed: {failure}"),
        }
    }

    pub fn is_transport_failure(&self) -> bool {
        matches!(self, CallOutcome::Failed { .. })
    }
}

#[derive(Debug, Clone)]
struct Handler;

impl ClientHandler for Handler {
    fn get_info(&self) -> InitializeRequestParams {
        InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("benchgen", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

struct Conn {
    service: RunningService<RoleClient, Handler>,
    link: Arc<LinkState>,
    child: Option<tokio::sync::Mutex<ChildGuard>>,
    /// The stderr log and its length when this connection started.
    stderr: Option<(PathBuf, u64)>,
    http: bool,
}

impl Conn {
    async fn dead_reason(&self) -> Option<String> {
        if let Some(child) = &self.child
            && let Some(status) = child.lock().await.try_exit()
        {
            return Some(format!("the server exited ({status}){}", self.stderr_tail()));
        }
        if self.service.is_closed() || self.service.peer().is_transport_closed() {
            return Some(format!("the connection closed{}", self.stderr_tail()));
        }
        None
    }

    fn stderr_tail(&self) -> String {
        let Some((path, start)) = &self.stderr else { return String::new() };
        let Ok(bytes) = std::fs::read(path) else { return String::new() };
        let new = &bytes[(*start as usize).min(bytes.len())..];
        let text = String::from_utf8_lossy(new);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
        if tail.is_empty() { String::new() } else { format!("; stderr: {}", truncate_str(&tail, 400)) }
    }
}

type BoxRead = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// A client for one named server. Cheap to share (`Arc`); calls may run concurrently.
pub struct McpClient {
    name: String,
    spec: ServerSpec,
    opts: ClientOptions,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// An in-process stream pair, used by the first connection only.
    io: std::sync::Mutex<Option<(BoxRead, BoxWrite)>>,
}

impl McpClient {
    pub fn new(name: &str, spec: ServerSpec, opts: ClientOptions) -> Self {
        Self { name: name.to_string(), spec, opts, conn: tokio::sync::Mutex::new(None), io: Default::default() }
    }

    /// A client over an in-process stream pair (e.g. a sandbox on a `tokio::io::duplex`).
    /// Once that connection breaks there is nothing to reconnect to: later calls fail
    /// with [`CallFailure::Connect`].
    pub fn from_io<R, W>(name: &str, tool_ids: ToolIds, opts: ClientOptions, read: R, write: W) -> Self
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let spec = ServerSpec { tool_ids, ..Default::default() };
        let c = Self::new(name, spec, opts);
        *c.io.lock().unwrap_or_else(|e| e.into_inner()) = Some((Box::new(read), Box::new(write)));
        c
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn spec(&self) -> &ServerSpec {
        &self.spec
    }

    /// The benchgen tool id of one of this server's tools.
    pub fn tool_id(&self, tool: &str) -> String {
        match self.spec.tool_ids {
            ToolIds::Qualified => crate::model::tool_id(&self.name, tool),
            ToolIds::AsIs => tool.to_string(),
        }
    }

    fn call_timeout(&self) -> Duration {
        self.spec.timeout_secs.map(Duration::from_secs_f64).unwrap_or(self.opts.call_timeout)
    }

    /// The live connection, (re)connecting when there is none or the last one broke.
    async fn connection(&self) -> Result<Arc<Conn>, CallFailure> {
        let mut g = self.conn.lock().await;
        if let Some(c) = g.as_ref() {
            if c.dead_reason().await.is_none() && c.link.broken().is_none() {
                return Ok(c.clone());
            }
            let old = g.take();
            if let Some(old) = old {
                shutdown_conn(old).await;
            }
        }
        let c = Arc::new(self.connect().await?);
        *g = Some(c.clone());
        Ok(c)
    }

    /// Connect now (the handshake), reporting failure as [`CallFailure::Connect`].
    pub async fn ensure_connected(&self) -> Result<(), CallFailure> {
        self.connection().await.map(|_| ())
    }

    /// The negotiated protocol version and server name, once connected.
    pub async fn server_info(&self) -> Option<(String, String)> {
        let c = self.conn.lock().await.clone()?;
        let info = c.service.peer().peer_info()?;
        let name = info.server_info.as_ref().map(|i| format!("{} {}", i.name, i.version)).unwrap_or_default();
        Some((info.protocol_version.to_string(), name))
    }

    /// The negotiated protocol version and the server's `serverInfo` (name, version), once
    /// connected (a server may send no `serverInfo`).
    pub async fn handshake(&self) -> Option<(String, Option<(String, String)>)> {
        let c = self.conn.lock().await.clone()?;
        let info = c.service.peer().peer_info()?;
        let server = info.server_info.as_ref().map(|i| (i.name.clone(), i.version.clone()));
        Some((info.protocol_version.to_string(), server))
    }

    /// The project root relative `cwd`s and paths resolve against.
    pub fn root(&self) -> &Path {
        &self.opts.root
    }

    async fn connect(&self) -> Result<Conn, CallFailure> {
        let fail = |m: String| CallFailure::Connect { message: m };
        if self.spec.command.is_none() && self.spec.url.is_none() {
            let io = self.io.lock().unwrap_or_else(|e| e.into_inner()).take();
            let Some((read, write)) = io else {
                return Err(fail("the in-process connection is closed".into()));
            };
            let link = Arc::new(LinkState::default());
            let transport = StdioTransport::new(read, write, self.opts.max_message_bytes, link.clone());
            let service = tokio::time::timeout(
                self.opts.startup_timeout,
                serve_client_with_lifecycle(Handler, transport, ClientLifecycleMode::Initialize),
            )
            .await
            .map_err(|_| fail("in-process handshake timed out".into()))?
            .map_err(|e| fail(format!("in-process handshake failed: {e}")))?;
            return Ok(Conn { service, link, child: None, stderr: None, http: false });
        }
        let endpoint = self.spec.endpoint(&self.opts.root).map_err(|e| fail(format!("{e:#}")))?;
        let lifecycle = match self.spec.lifecycle {
            Lifecycle::Initialize => ClientLifecycleMode::Initialize,
            Lifecycle::Auto => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25],
                legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
            },
        };
        let link = Arc::new(LinkState::default());
        match endpoint {
            Endpoint::Stdio { command, args, env, cwd } => {
                std::fs::create_dir_all(&self.opts.log_dir)
                    .map_err(|e| fail(format!("cannot create `{}`: {e}", self.opts.log_dir.display())))?;
                let log = self.opts.log_dir.join(format!("{}.stderr.log", safe_file_name(&self.name)));
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .map_err(|e| fail(format!("cannot open `{}`: {e}", log.display())))?;
                let start = file.metadata().map(|m| m.len()).unwrap_or(0);
                let clear = self.spec.env_clear;
                let (mut child, out, inp) = stdio::spawn(&command, &args, &env, clear, cwd.as_deref(), file)
                    .map_err(|e| fail(format!("cannot spawn `{command}`: {e}")))?;
                let transport = StdioTransport::new(out, inp, self.opts.max_message_bytes, link.clone());
                let started = tokio::time::timeout(
                    self.opts.startup_timeout,
                    serve_client_with_lifecycle(Handler, transport, lifecycle),
                )
                .await;
                let stderr = Some((log, start));
                match started {
                    Ok(Ok(service)) => {
                        Ok(Conn { service, link, child: Some(tokio::sync::Mutex::new(child)), stderr, http: false })
                    }
                    Ok(Err(e)) => {
                        let conn_tail = tail_of(stderr.as_ref());
                        let why = match link.broken() {
                            Some(Broken::InvalidJsonRpc(m)) => m,
                            _ => e.to_string(),
                        };
                        let exited = child.try_exit().map(|s| format!(" (server exited: {s})")).unwrap_or_default();
                        child.kill().await;
                        Err(fail(format!("handshake with `{command}` failed: {why}{exited}{conn_tail}")))
                    }
                    Err(_) => {
                        child.kill().await;
                        Err(fail(format!(
                            "`{command}` did not finish the handshake within {:?}{}",
                            self.opts.startup_timeout,
                            tail_of(stderr.as_ref())
                        )))
                    }
                }
            }
            Endpoint::Http { url, headers } => {
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut custom = std::collections::HashMap::new();
                let mut auth = None;
                for (k, v) in &headers {
                    // Never echo a header value: it may be a secret.
                    if k.eq_ignore_ascii_case("authorization") {
                        auth = Some(v.strip_prefix("Bearer ").unwrap_or(v).to_string());
                        continue;
                    }
                    let name = http::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|_| fail(format!("header name `{k}` is invalid")))?;
                    let value = http::HeaderValue::from_str(v)
                        .map_err(|_| fail(format!("header `{k}` has an invalid value")))?;
                    custom.insert(name, value);
                }
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone())
                    .custom_headers(custom)
                    .max_sse_event_size(self.opts.max_message_bytes)
                    .max_json_response_size(self.opts.max_message_bytes);
                if let Some(a) = auth {
                    config = config.auth_header(a);
                }
                let transport = StreamableHttpClientTransport::from_config(config);
                match tokio::time::timeout(
                    self.opts.startup_timeout,
                    serve_client_with_lifecycle(Handler, transport, lifecycle),
                )
                .await
                {
                    Ok(Ok(service)) => Ok(Conn { service, link, child: None, stderr: None, http: true }),
                    Ok(Err(e)) => Err(fail(format!("handshake with {url} failed: {e}"))),
                    Err(_) => {
                        Err(fail(format!("{url} did not finish the handshake within {:?}", self.opts.startup_timeout)))
                    }
                }
            }
        }
    }

    /// Every tool the server lists, following `nextCursor` to the last page, within
    /// `mcp.max_list_pages` pages, `mcp.max_list_tools` tools and `mcp.list_timeout_secs`
    /// (a server that always returns a new cursor is otherwise paged forever).
    pub async fn list_tools(&self) -> Result<Vec<ToolInfo>, CallFailure> {
        let limit = self.opts.list_timeout;
        match tokio::time::timeout(limit, self.list_tools_paged()).await {
            Ok(r) => r,
            Err(_) => Err(CallFailure::ListLimit {
                message: format!(
                    "server `{}` did not finish listing its tools within {:?} (`mcp.list_timeout_secs`)",
                    self.name, limit
                ),
            }),
        }
    }

    async fn list_tools_paged(&self) -> Result<Vec<ToolInfo>, CallFailure> {
        let conn = self.connection().await?;
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen = std::collections::BTreeSet::new();
        let (max_pages, max_tools) = (self.opts.max_list_pages.max(1), self.opts.max_list_tools);
        for page_no in 1.. {
            if page_no > max_pages {
                return Err(CallFailure::ListLimit {
                    message: format!(
                        "server `{}` listed more than {max_pages} pages of tools, each with a new `nextCursor` \
                         (`mcp.max_list_pages`)",
                        self.name
                    ),
                });
            }
            let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
            let req = ClientRequest::ListToolsRequest(rmcp::model::ListToolsRequest {
                method: Default::default(),
                params: Some(params),
                extensions: Default::default(),
            });
            let res = self.request(&conn, req, self.call_timeout(), None).await?;
            let ServerResult::ListToolsResult(page) = res else {
                return Err(CallFailure::InvalidResponse { message: "tools/list did not return a tool list".into() });
            };
            for t in page.tools {
                let v = serde_json::to_value(&t).unwrap_or(Value::Null);
                tools.push(ToolInfo {
                    name: t.name.to_string(),
                    description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                    input_schema: v
                        .get("inputSchema")
                        .cloned()
                        .unwrap_or_else(|| serde_json::json!({"type": "object"})),
                    output_schema: v.get("outputSchema").cloned(),
                });
            }
            if tools.len() > max_tools {
                return Err(CallFailure::ListLimit {
                    message: format!(
                        "server `{}` listed more than {max_tools} tools (`mcp.max_list_tools`)",
                        self.name
                    ),
                });
            }
            match page.next_cursor {
                // A server that repeats a cursor would loop forever; stop there.
                Some(c) if !c.is_empty() && seen.insert(c.clone()) => cursor = Some(c),
                _ => break,
            }
        }
        Ok(tools)
    }

    /// Call a tool. Never returns an error: every way a call can end is a [`CallOutcome`].
    pub async fn call(&self, tool: &str, arguments: &Value, cancel: Option<&CancellationToken>) -> CallOutcome {
        let conn = match self.connection().await {
            Ok(c) => c,
            Err(failure) => return CallOutcome::Failed { failure },
        };
        let args = match arguments {
            Value::Object(m) => Some(m.clone()),
            Value::Null => None,
            other => {
                return CallOutcome::Failed {
                    failure: CallFailure::Protocol {
                        code: -32602,
                        message: format!("arguments must be a JSON object, not {}", json_kind(other)),
                    },
                };
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Some(a) = args {
            params = params.with_arguments(a);
        }
        let req = ClientRequest::CallToolRequest(Request::new(params));
        match self.request(&conn, req, self.call_timeout(), cancel).await {
            Ok(ServerResult::CallToolResult(r)) => {
                let v = serde_json::to_value(&r).unwrap_or(Value::Null);
                let output = tool_output(&v, self.opts.max_result_bytes);
                if r.is_error == Some(true) { CallOutcome::ToolError { output } } else { CallOutcome::Ok { output } }
            }
            Ok(other) => CallOutcome::Failed {
                failure: CallFailure::InvalidResponse {
                    message: format!(
                        "tools/call returned a non-tool result: {}",
                        truncate_str(&serde_json::to_string(&other).unwrap_or_default(), 200)
                    ),
                },
            },
            Err(failure) => CallOutcome::Failed { failure },
        }
    }

    async fn request(
        &self,
        conn: &Arc<Conn>,
        req: ClientRequest,
        timeout: Duration,
        cancel: Option<&CancellationToken>,
    ) -> Result<ServerResult, CallFailure> {
        let peer = conn.service.peer().clone();
        let handle = match peer.send_request_with_option(req, PeerRequestOptions::with_timeout(timeout)).await {
            Ok(h) => h,
            Err(e) => return Err(self.map_error(conn, e).await),
        };
        let id = handle.id.clone();
        let never = CancellationToken::new();
        let cancel = cancel.unwrap_or(&never);
        // The outer timeout is a backstop in case the transport stalls on send.
        let backstop = timeout + Duration::from_secs(2);
        let started = Instant::now();
        tokio::select! {
            r = tokio::time::timeout(backstop, handle.await_response()) => match r {
                Ok(Ok(res)) => Ok(res),
                Ok(Err(e)) => Err(self.map_error(conn, e).await),
                Err(_) => Err(CallFailure::Timeout { after_ms: started.elapsed().as_millis() as u64 }),
            },
            _ = cancel.cancelled() => {
                let n = CancelledNotification::new(CancelledNotificationParam::new(
                    Some(id),
                    Some("cancelled by the client".into()),
                ));
                let _ = tokio::time::timeout(Duration::from_secs(1), peer.send_notification(n.into())).await;
                Err(CallFailure::Cancelled)
            }
        }
    }

    async fn map_error(&self, conn: &Arc<Conn>, e: ServiceError) -> CallFailure {
        match e {
            ServiceError::Timeout { timeout } => CallFailure::Timeout { after_ms: timeout.as_millis() as u64 },
            ServiceError::Cancelled { .. } => CallFailure::Cancelled,
            ServiceError::McpError(err) => {
                let code = err.code.0;
                if code == stdio::CODE_RESULT_TOO_LARGE {
                    let d = err.data.unwrap_or(Value::Null);
                    CallFailure::ResultTooLarge {
                        bytes: d.get("bytes").and_then(Value::as_u64).unwrap_or(0),
                        limit: d.get("limit").and_then(Value::as_u64).unwrap_or(0),
                    }
                } else if code == stdio::CODE_INVALID_RESPONSE {
                    CallFailure::InvalidResponse { message: err.message.to_string() }
                } else {
                    CallFailure::Protocol { code, message: err.message.to_string() }
                }
            }
            ServiceError::UnexpectedResponse => {
                CallFailure::InvalidResponse { message: "the response does not match the request".into() }
            }
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                if let Some(Broken::InvalidJsonRpc(m)) = conn.link.broken() {
                    return CallFailure::InvalidResponse { message: m };
                }
                // The exit status may lag the closed pipe by a moment.
                for _ in 0..20 {
                    if let Some(reason) = conn.dead_reason().await
                        && reason.contains("exited")
                    {
                        return CallFailure::ServerCrashed { message: reason };
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                let why = conn.dead_reason().await.unwrap_or_else(|| e.to_string());
                if !conn.http {
                    CallFailure::ServerCrashed { message: why }
                } else {
                    CallFailure::Transport { message: format!("{e}: {why}") }
                }
            }
            other => CallFailure::Transport { message: other.to_string() },
        }
    }

    /// Close the connection and kill a spawned server (its whole process group).
    pub async fn shutdown(&self) {
        if let Some(c) = self.conn.lock().await.take() {
            shutdown_conn(c).await;
        }
    }

    /// The process id of the spawned server, if connected over stdio.
    pub async fn pid(&self) -> Option<u32> {
        let c = self.conn.lock().await.clone()?;
        let child = c.child.as_ref()?;
        child.lock().await.id()
    }
}

async fn shutdown_conn(c: Arc<Conn>) {
    c.service.cancellation_token().cancel();
    if let Some(child) = &c.child {
        child.lock().await.kill().await;
    }
}

fn tail_of(stderr: Option<&(PathBuf, u64)>) -> String {
    let Some((path, start)) = stderr else { return String::new() };
    let Ok(bytes) = std::fs::read(path) else { return String::new() };
    let new = String::from_utf8_lossy(&bytes[(*start as usize).min(bytes.len())..]).into_owned();
    let lines: Vec<&str> = new.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    if tail.is_empty() { String::new() } else { format!("; stderr: {}", truncate_str(&tail, 400)) }
}

/// A file name for a server name (server names may contain spaces and slashes).
pub fn safe_file_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect()
}

/// Cut a string to at most `max` bytes at a char boundary.
pub fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Build the recorded output of a tool result, cutting it to `max` bytes with a note.
fn tool_output(result: &Value, max: usize) -> ToolOutput {
    let content = result.get("content").cloned().unwrap_or(Value::Array(Vec::new()));
    let structured = result.get("structuredContent").cloned();
    let text = content
        .as_array()
        .map(|blocks| {
            blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        })
        .unwrap_or_default();
    let text = if text.is_empty() { structured.as_ref().map(|s| s.to_string()).unwrap_or_default() } else { text };
    let original = serde_json::to_vec(&content).map(|v| v.len()).unwrap_or(0)
        + structured.as_ref().map(|s| s.to_string().len()).unwrap_or(0);
    if original <= max {
        return ToolOutput { text, content, structured, truncated: None };
    }
    let kept_text = truncate_str(&text, max).to_string();
    let note = format!(
        "output truncated: {original} bytes, first {} bytes of text kept (mcp.max_result_bytes)",
        kept_text.len()
    );
    ToolOutput {
        text: format!("{kept_text}\n[{note}]"),
        // The blocks are replaced by the kept text so recorded trajectories stay bounded.
        content: serde_json::json!([{"type": "text", "text": kept_text}]),
        structured: structured.filter(|s| s.to_string().len() <= max),
        truncated: Some(Truncation { original_bytes: original as u64, kept_bytes: kept_text.len() as u64, note }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_output_is_cut_with_a_note() {
        let big = "x".repeat(5000);
        let out = tool_output(&serde_json::json!({"content": [{"type": "text", "text": big}]}), 1000);
        let t = out.truncated.unwrap();
        assert_eq!(t.kept_bytes, 1000);
        assert!(t.original_bytes > 5000);
        assert!(out.text.ends_with("(mcp.max_result_bytes)]"));
        let small = tool_output(&serde_json::json!({"content": [{"type": "text", "text": "hi"}]}), 1000);
        assert_eq!(small.text, "hi");
        assert!(small.truncated.is_none());
    }

    #[test]
    fn outcomes_serialise_with_a_status_and_a_kind() {
        let o = CallOutcome::Failed { failure: CallFailure::Timeout { after_ms: 5 } };
        assert_eq!(
            serde_json::to_value(&o).unwrap(),
            serde_json::json!({"status": "failed", "failure": {"kind": "timeout", "after_ms": 5}})
        );
    }
}
