//! The stdio transport for spawned servers, written for robustness rather than taken
//! from rmcp: rmcp's line transport silently drops unparsable and oversized lines, so a
//! server that answers garbage would leave the call waiting for its timeout.
//!
//! Here every line from the server's stdout is classified:
//! - a JSON-RPC message → delivered;
//! - well-formed JSON with an `id` but not a valid message, or a line longer than the
//!   message limit whose `id` can be read from its head or tail → delivered as a JSON-RPC
//!   error for that id, with a benchgen code ([`CODE_INVALID_RESPONSE`],
//!   [`CODE_RESULT_TOO_LARGE`]) that the client maps to a typed failure of that one call;
//! - an unknown notification → ignored;
//! - anything else (not JSON, no id) → the connection is declared broken
//!   ([`Broken::InvalidJsonRpc`]) and closed, so every pending call fails at once.
//!
//! The child runs in its own process group; [`ChildGuard`] kills the whole group when
//! dropped, and tokio reaps the leader. Its stderr goes to a log file.

use std::sync::{Arc, Mutex};

use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc;

/// JSON-RPC error code for a response that is JSON but not a valid MCP message.
pub const CODE_INVALID_RESPONSE: i32 = -32098;
/// JSON-RPC error code for a response larger than the message limit.
pub const CODE_RESULT_TOO_LARGE: i32 = -32097;

/// Why a connection stopped being usable (the first cause wins).
#[derive(Debug, Clone, PartialEq)]
pub enum Broken {
    InvalidJsonRpc(String),
    Closed,
}

/// State shared between the transport and the client.
#[derive(Debug, Default)]
pub struct LinkState {
    broken: Mutex<Option<Broken>>,
}

impl LinkState {
    pub fn mark(&self, b: Broken) {
        let mut g = self.broken.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(b);
        }
    }
    pub fn broken(&self) -> Option<Broken> {
        self.broken.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Owns the spawned server; dropping it kills the server's whole process group.
#[derive(Debug)]
pub struct ChildGuard {
    child: Box<dyn ChildWrapper>,
    /// Registered with `crate::children` so a signal to benchgen reaches the group too.
    pgid: Option<u32>,
}

impl ChildGuard {
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Exit status if the server has exited.
    pub fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kill the process group and wait (bounded) for the leader.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(3), self.child.wait()).await;
        if let Some(pg) = self.pgid.take() {
            crate::children::unregister(pg);
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // SIGKILL to the group; tokio's kill-on-drop and orphan reaping collect the leader.
        let _ = self.child.start_kill();
        if let Some(pg) = self.pgid.take() {
            crate::children::unregister(pg);
        }
    }
}

/// The variables a server spawned with a cleared environment still gets from benchgen's:
/// `PATH`, to find `npx`, `uvx`, `node` or the command itself, and `HOME`, where npm and uv
/// keep their caches and settings.
pub const INHERITED_ENV: [&str; 2] = ["PATH", "HOME"];

/// Spawn `command` in its own process group with piped stdin/stdout and stderr to `stderr`;
/// with `env_clear`, it gets only [`INHERITED_ENV`] and `env` of benchgen's environment.
pub fn spawn(
    command: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    env_clear: bool,
    cwd: Option<&std::path::Path>,
    stderr: std::fs::File,
) -> std::io::Result<(ChildGuard, ChildStdout, ChildStdin)> {
    let mut cmd = CommandWrap::with_new(command, |c| {
        if env_clear {
            c.env_clear();
            for k in INHERITED_ENV {
                if let Some(v) = std::env::var_os(k) {
                    c.env(k, v);
                }
            }
        }
        c.args(args)
            .envs(env)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::from(stderr));
        if let Some(dir) = cwd {
            c.current_dir(dir);
        }
    });
    cmd.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    // Held until the child is registered, so a signal in between still stops it.
    let _spawning = crate::children::spawn_guard();
    let mut child = cmd.spawn()?;
    let stdout = child.stdout().take().ok_or_else(|| std::io::Error::other("no stdout pipe"))?;
    let stdin = child.stdin().take().ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
    let pgid = child.id();
    if let Some(pg) = pgid {
        crate::children::register(pg);
    }
    Ok((ChildGuard { child, pgid }, stdout, stdin))
}

/// A client transport over a child's stdout/stdin (or any reader/writer pair).
pub struct StdioTransport {
    rx: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    writer: Arc<tokio::sync::Mutex<Option<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl StdioTransport {
    pub fn new<R, W>(read: R, write: W, max_message_bytes: usize, state: Arc<LinkState>) -> Self
    where
        R: tokio::io::AsyncRead + Send + Unpin + 'static,
        W: tokio::io::AsyncWrite + Send + Unpin + 'static,
    {
        let (tx, rx) = mpsc::channel(64);
        let reader = tokio::spawn(read_loop(BufReader::with_capacity(64 * 1024, read), tx, max_message_bytes, state));
        Self { rx, writer: Arc::new(tokio::sync::Mutex::new(Some(Box::new(write)))), reader }
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Transport<RoleClient> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = self.writer.clone();
        async move {
            let mut line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            line.push(b'\n');
            let mut g = writer.lock().await;
            let w = g.as_mut().ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotConnected, "closed"))?;
            w.write_all(&line).await?;
            w.flush().await
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.rx.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        if let Some(mut w) = self.writer.lock().await.take() {
            let _ = w.shutdown().await;
        }
        self.rx.close();
        Ok(())
    }
}

/// What one line from the server means.
#[derive(Debug)]
enum Line {
    Message(Box<RxJsonRpcMessage<RoleClient>>),
    Ignore,
    Fatal(String),
}

async fn read_loop<R: tokio::io::AsyncRead + Unpin>(
    mut read: BufReader<R>,
    tx: mpsc::Sender<RxJsonRpcMessage<RoleClient>>,
    max: usize,
    state: Arc<LinkState>,
) {
    const KEEP: usize = 4096;
    let mut buf: Vec<u8> = Vec::new();
    let mut tail: Vec<u8> = Vec::new();
    let mut total = 0usize;
    loop {
        let (consumed, newline) = {
            let avail = match read.fill_buf().await {
                Ok(a) => a,
                Err(_) => break,
            };
            if avail.is_empty() {
                break;
            }
            let nl = avail.iter().position(|b| *b == b'\n');
            let take = nl.map_or(avail.len(), |i| i + 1);
            let chunk = &avail[..take];
            total += chunk.len();
            if total <= max {
                buf.extend_from_slice(chunk);
            } else {
                // Over the limit: keep the head (already in buf, cut to KEEP) and a rolling tail.
                buf.truncate(KEEP.min(buf.len()));
                tail.extend_from_slice(chunk);
                if tail.len() > 2 * KEEP {
                    tail.drain(..tail.len() - KEEP);
                }
            }
            (take, nl.is_some())
        };
        read.consume(consumed);
        if !newline {
            continue;
        }
        let line = if total > max { oversized(&buf, &tail, total, max) } else { classify(&buf) };
        buf.clear();
        tail.clear();
        total = 0;
        match line {
            Line::Message(m) => {
                if tx.send(*m).await.is_err() {
                    return;
                }
            }
            Line::Ignore => {}
            Line::Fatal(why) => {
                state.mark(Broken::InvalidJsonRpc(why));
                return; // dropping tx closes the connection; pending calls fail
            }
        }
    }
    state.mark(Broken::Closed);
}

fn excerpt(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let s = s.trim();
    if s.chars().count() > 200 { format!("{}…", s.chars().take(200).collect::<String>()) } else { s.to_string() }
}

fn classify(raw: &[u8]) -> Line {
    let line = raw.strip_suffix(b"\n").unwrap_or(raw);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Line::Ignore;
    }
    if let Ok(m) = serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line) {
        return Line::Message(Box::new(m));
    }
    let value = match serde_json::from_slice::<serde_json::Value>(line) {
        Ok(v) => v,
        Err(e) => return Line::Fatal(format!("the server wrote a line that is not JSON ({e}): `{}`", excerpt(line))),
    };
    match (value.get("id"), value.get("method")) {
        // Requests and notifications rmcp does not model: not ours to fail on.
        (_, Some(_)) => Line::Ignore,
        (Some(id), None) if id.is_number() || id.is_string() => error_for(
            id.clone(),
            CODE_INVALID_RESPONSE,
            format!("the server answered with JSON that is not a valid MCP response: `{}`", excerpt(line)),
            serde_json::json!({}),
        ),
        _ => Line::Fatal(format!("the server wrote JSON that is not JSON-RPC: `{}`", excerpt(line))),
    }
}

fn oversized(head: &[u8], tail: &[u8], total: usize, max: usize) -> Line {
    static ID: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = ID.get_or_init(|| regex::Regex::new(r#""id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")"#).expect("valid regex"));
    // JSON-RPC responses carry `id` at the top level, first (Python) or last (JavaScript).
    let find = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        re.captures_iter(&s).last().and_then(|c| serde_json::from_str::<serde_json::Value>(&c[1]).ok())
    };
    let id = find(tail).or_else(|| find(head));
    match id {
        Some(id) => error_for(
            id,
            CODE_RESULT_TOO_LARGE,
            format!("the response is {total} bytes, over the {max}-byte message limit (`mcp.max_message_bytes`)"),
            serde_json::json!({"bytes": total, "limit": max}),
        ),
        None => Line::Fatal(format!("the server wrote a {total}-byte line without a readable id (limit {max})")),
    }
}

fn error_for(id: serde_json::Value, code: i32, message: String, data: serde_json::Value) -> Line {
    let msg =
        serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message, "data": data}});
    match serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(msg) {
        Ok(m) => Line::Message(Box::new(m)),
        Err(e) => Line::Fatal(format!("cannot represent the server's bad response: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_classified() {
        assert!(matches!(classify(b"\n"), Line::Ignore));
        assert!(matches!(classify(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n"), Line::Message(_)));
        // Unknown notifications are delivered (rmcp models them as custom) or ignored, never fatal.
        assert!(!matches!(classify(b"{\"jsonrpc\":\"2.0\",\"method\":\"x/unknown\",\"params\":{}}\n"), Line::Fatal(_)));
        assert!(matches!(classify(b"hello world\n"), Line::Fatal(m) if m.contains("not JSON")));
        assert!(matches!(classify(b"[1,2]\n"), Line::Fatal(_)));
        match classify(b"{\"id\":7,\"weird\":true}\n") {
            Line::Message(m) => assert!(serde_json::to_string(&m).unwrap().contains("-32098")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn oversized_line_becomes_an_error_for_its_id_from_the_tail() {
        match oversized(
            b"{\"result\":{\"content\":[{\"text\":\"aaaa",
            b"aaaa\"}]},\"jsonrpc\":\"2.0\",\"id\":12}",
            99,
            10,
        ) {
            Line::Message(m) => {
                let s = serde_json::to_string(&m).unwrap();
                assert!(s.contains("\"id\":12") && s.contains("-32097"), "{s}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(oversized(b"xxxx", b"yyyy", 99, 10), Line::Fatal(_)));
    }

    #[tokio::test]
    async fn garbage_breaks_the_link_and_closes_the_stream() {
        let (mut server, client) = tokio::io::duplex(1024);
        let (r, w) = tokio::io::split(client);
        let state = Arc::new(LinkState::default());
        let mut t = StdioTransport::new(r, w, 1 << 20, state.clone());
        server.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\nnot json\n").await.unwrap();
        assert!(t.receive().await.is_some());
        assert!(t.receive().await.is_none());
        assert!(matches!(state.broken(), Some(Broken::InvalidJsonRpc(_))));
    }
}
