//! `benchgen execute`: run queries with an LLM agent connected to MCP servers and record
//! each trajectory as a reference (FinMCP-Bench's execution step).
//!
//! The loop, per query: the model gets the system prompt, the query and every tool of the
//! selected servers as OpenAI `tools` (names mapped by [`names::ToolNames`]). Each
//! assistant message's tool calls run concurrently and form one parallel **group**; the
//! results go back as `tool` messages in call order; the loop stops at a reply without
//! tool calls (status `answered`) or when the next group would pass `max_calls`
//! (`cap_reached`; that group is recorded, not executed). A transport failure (crash,
//! timeout, invalid JSON-RPC, …) ends the query as `failed` when `stop_on_failure` (the
//! default), with the reason; an LLM failure does too. Tool errors (`isError`), unknown
//! tool names and non-object arguments go back to the model, which may correct itself.
//!
//! Every call is an `mcp.call` ledger event written as it finishes, with the LLM exchange
//! that asked for it as parent; each query ends with an `execute.trajectory` event whose
//! parents are its exchanges and calls.
//!
//! A trajectory holds only what the same inputs and ledger reproduce byte for byte: it
//! names exchanges by request hash and calls by [`call_hash`]; timings and event ids
//! (which depend on how concurrent work interleaves, and on whether a kill made a reply
//! come from the ledger) stay in the ledger's `mcp.call` and `execute.trajectory` events.
//!
//! Output `artifacts/execute/`: `trajectories/<query id>.json` ([`Trajectory`]) and
//! `summary.json` (counts and one row per query).
//!
//! Queries file: JSON Lines or a JSON array of `{"id", "query", "chain"?}`; `chain` is a
//! list of tool ids (each depends on the one before) or of `{"tool", "depends_on": [i]}`
//! (indices of earlier steps). A trajectory **preserves the chain** when every chain tool
//! was called successfully in a later group than each tool it depends on; extra calls are
//! allowed.

pub mod names;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{InputError, Problem};
use crate::ledger::{NewEvent, Parent, RunRecorder, kind};
use crate::llm::{ChatMessage, ChatTurn, LlmClient, LlmCounts, ToolCall, ToolSpec};
use crate::mcp::{CallFailure, CallOutcome, ClientOptions, McpClient};
use crate::settings::Settings;
use crate::stage::{ConfigRef, Ctx, Inputs, Output, Plan, Stage, StageSpec};
use names::ToolNames;

/// Ledger event kind of a finished query.
pub const TRAJECTORY: &str = "execute.trajectory";

/// `[execute]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExecuteSettings {
    /// Queries file (relative to the root); `benchgen execute --queries` overrides it.
    #[serde(default)]
    pub queries: Option<PathBuf>,
    /// Servers whose tools the agent gets (default: every configured server).
    #[serde(default)]
    pub servers: Vec<String>,
    /// LLM role (`[llm.roles.<role>]`).
    #[serde(default = "default_role")]
    pub role: String,
    /// Most tool calls executed per query.
    #[serde(default = "default_max_calls")]
    pub max_calls: usize,
    /// A transport failure ends the query as failed (else it goes back to the model).
    #[serde(default = "yes")]
    pub stop_on_failure: bool,
    /// Characters of a tool result passed back to the model (cut with a note).
    #[serde(default = "default_result_chars")]
    pub tool_result_chars: usize,
    #[serde(default = "default_system")]
    pub system_prompt: String,
    /// Sent once, as a trailing system message, when the model ends its turn after tool
    /// calls with neither calls nor text (small models often stop there); the request and
    /// its answer are in the ledger, the trajectory keeps only the answer. Empty: off.
    #[serde(default = "default_answer_nudge")]
    pub answer_nudge: String,
    /// Queries run at once (a tuning knob, not part of the config hash).
    #[serde(default = "default_concurrency", skip_serializing)]
    pub concurrency: usize,
}

/// `[execute]`; absent: its defaults.
impl crate::settings::Section for ExecuteSettings {
    const NAME: &'static str = "execute";
    type Value = crate::settings::Always<Self>;
}

impl Default for ExecuteSettings {
    fn default() -> Self {
        Self {
            queries: None,
            servers: Vec::new(),
            role: default_role(),
            max_calls: default_max_calls(),
            stop_on_failure: true,
            tool_result_chars: default_result_chars(),
            system_prompt: default_system(),
            answer_nudge: default_answer_nudge(),
            concurrency: default_concurrency(),
        }
    }
}

fn default_role() -> String {
    "agent".into()
}
fn default_max_calls() -> usize {
    20
}
fn yes() -> bool {
    true
}
fn default_result_chars() -> usize {
    8000
}
fn default_concurrency() -> usize {
    4
}
fn default_system() -> String {
    // Step-by-step wording: with the older "gather what the request needs" prompt the 1.5B
    // local model answered after the first call of a two-step chain (docs/synth.md#the-demo).
    "You are an assistant with tools. Work through the user's request step by step: call the tool for \
     the first step; when its result arrives, use the values in it (ids, names) to call the tool for the \
     next step. Tools that do not depend on each other may be called in the same turn. Answer only when \
     every step of the request is done."
        .into()
}

fn default_answer_nudge() -> String {
    "Now answer the user in plain words, from the tool results above.".into()
}

/// One step of a required dependency chain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChainStep {
    pub tool: String,
    /// Indices of earlier steps whose output this one needs.
    #[serde(default)]
    pub depends_on: Vec<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Query {
    pub id: String,
    pub query: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<ChainStep>,
}

/// Parse a queries file (JSON Lines or a JSON array). Every problem is reported at once.
pub fn parse_queries(bytes: &[u8], file: &str) -> Result<Vec<Query>, InputError> {
    let text = String::from_utf8_lossy(bytes);
    let trimmed = text.trim_start();
    let records: Vec<(String, Result<Value, String>)> = if trimmed.starts_with('[') {
        match crate::json::from_str::<Vec<Value>>(trimmed) {
            Ok(v) => v.into_iter().enumerate().map(|(i, r)| (format!("[{i}]"), Ok(r))).collect(),
            Err(e) => {
                return Err(InputError { file: file.into(), problems: vec![Problem::new("json", e.to_string())] });
            }
        }
    } else {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (format!("line {}", i + 1), crate::json::value_from_str(l).map_err(|e| e.to_string())))
            .collect()
    };
    let mut problems = Vec::new();
    let mut out = Vec::new();
    let mut ids = BTreeSet::new();
    for (loc, r) in records {
        let v = match r {
            Ok(v) => v,
            Err(e) => {
                problems.push(Problem::new(&loc, format!("not JSON: {e}")));
                continue;
            }
        };
        let id = match v.get("id") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => {
                problems.push(Problem::new(&loc, "`id` (a non-empty string or a number) is missing"));
                continue;
            }
        };
        let loc = format!("{loc} (`{id}`)");
        let Some(query) = v.get("query").and_then(Value::as_str).filter(|q| !q.trim().is_empty()) else {
            problems.push(Problem::new(&loc, "`query` (a non-empty string) is missing"));
            continue;
        };
        if !ids.insert(id.clone()) {
            problems.push(Problem::new(&loc, "duplicate id"));
        }
        let mut chain = Vec::new();
        match v.get("chain") {
            None | Some(Value::Null) => {}
            Some(Value::Array(steps)) => {
                for (i, s) in steps.iter().enumerate() {
                    match s {
                        Value::String(t) => chain
                            .push(ChainStep { tool: t.clone(), depends_on: if i == 0 { vec![] } else { vec![i - 1] } }),
                        other => match serde_json::from_value::<ChainStep>(other.clone()) {
                            Ok(step) => {
                                if let Some(d) = step.depends_on.iter().find(|d| **d >= i) {
                                    problems.push(Problem::new(
                                        format!("{loc}.chain[{i}].depends_on"),
                                        format!("refers to step {d}, which is not earlier"),
                                    ));
                                }
                                chain.push(step);
                            }
                            Err(e) => problems.push(Problem::new(format!("{loc}.chain[{i}]"), e.to_string())),
                        },
                    }
                }
            }
            Some(_) => problems.push(Problem::new(format!("{loc}.chain"), "must be an array")),
        }
        out.push(Query { id, query: query.to_string(), chain });
    }
    if problems.is_empty() { Ok(out) } else { Err(InputError { file: file.into(), problems }) }
}

/// One tool call of a trajectory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CallRecord {
    /// Position in the trajectory (0-based, in the order the model listed the calls).
    pub index: usize,
    /// Parallel group (0-based): the calls of one assistant message.
    pub group: usize,
    pub call_id: String,
    /// The function name the model used.
    pub function: String,
    /// The benchgen tool id (`server::tool`), when the name maps to a tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    pub arguments: Value,
    /// Sent to a server (false: refused before sending, or past the cap).
    pub executed: bool,
    #[serde(flatten)]
    pub outcome: CallOutcome,
    /// Request hash of the LLM exchange that asked for this call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<String>,
    /// The call's stable name ([`call_hash`]); its `mcp.call` ledger event carries it too.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub call_hash: String,
}

/// The stable name of a call: a hash of the exchange that asked for it, its position and
/// what it asked (function and arguments), so a rerun or a resumed run names it alike.
pub fn call_hash(exchange: &str, index: usize, function: &str, arguments: &Value) -> String {
    let named = json!([exchange, index, function, arguments]);
    crate::store::sha256_hex(serde_json::to_string(&named).unwrap_or_default().as_bytes())
}

/// The newest `mcp.call` ledger event with this [`call_hash`].
pub fn call_event(ledger: &crate::ledger::Ledger, hash: &str) -> Result<Option<i64>> {
    use rusqlite::OptionalExtension;
    Ok(ledger
        .connection()
        .query_row(
            "SELECT id FROM events WHERE kind = ?1 AND json_extract(payload, '$.call_hash') = ?2 ORDER BY id DESC LIMIT 1",
            rusqlite::params![kind::MCP_CALL, hash],
            |r| r.get(0),
        )
        .optional()?)
}

/// The result of checking a trajectory against a required chain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChainCheck {
    pub preserved: bool,
    /// The group matched to each chain step (`None`: no fitting successful call).
    pub groups: Vec<Option<usize>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// Does a trajectory preserve a chain? Each step is matched, in order, to the earliest
/// successful call of its tool whose group comes after the groups of all its
/// dependencies. Extra calls are allowed.
pub fn check_chain(chain: &[ChainStep], calls: &[CallRecord]) -> ChainCheck {
    let mut groups: Vec<Option<usize>> = Vec::with_capacity(chain.len());
    let mut problems = Vec::new();
    for (i, step) in chain.iter().enumerate() {
        let deps: Vec<Option<usize>> = step.depends_on.iter().map(|d| groups.get(*d).copied().flatten()).collect();
        let ok_groups: Vec<usize> = calls
            .iter()
            .filter(|c| c.tool_id.as_deref() == Some(step.tool.as_str()) && matches!(c.outcome, CallOutcome::Ok { .. }))
            .map(|c| c.group)
            .collect();
        if deps.iter().any(Option::is_none) {
            problems.push(format!("step {i} `{}`: a step it depends on was not matched", step.tool));
            groups.push(None);
            continue;
        }
        let after = deps.iter().flatten().max().copied();
        let g = ok_groups.iter().copied().filter(|g| after.is_none_or(|a| *g > a)).min();
        match g {
            Some(g) => groups.push(Some(g)),
            None => {
                problems.push(if ok_groups.is_empty() {
                    format!("step {i} `{}` was never called successfully", step.tool)
                } else {
                    format!(
                        "step {i} `{}` was called in group(s) {ok_groups:?}, none after group {} of what it depends on",
                        step.tool,
                        after.unwrap_or(0)
                    )
                });
                groups.push(None);
            }
        }
    }
    ChainCheck { preserved: problems.is_empty(), groups, problems }
}

/// How the run of one query ended.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The model answered without asking for more calls.
    Answered,
    /// The model asked for calls past `max_calls`.
    CapReached,
    /// The LLM failed, or a call failed with `stop_on_failure`.
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Answered => "answered",
            RunStatus::CapReached => "cap_reached",
            RunStatus::Failed => "failed",
        }
    }
}

/// Compare with the serialised word (`trajectory.status == "answered"`).
impl PartialEq<&str> for RunStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The recorded run of one query.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Trajectory {
    pub id: String,
    pub query: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The conversation in OpenAI chat format (function names as the model saw them).
    pub messages: Vec<Value>,
    pub calls: Vec<CallRecord>,
    /// Number of parallel groups (assistant messages with tool calls).
    pub groups: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<ChainStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_check: Option<ChainCheck>,
    /// Request hashes of the LLM exchanges, in order (the answer nudge's included).
    pub exchanges: Vec<String>,
}

/// What a run of the agent loop leaves for the ledger rather than the trajectory: event
/// ids and timings, which differ between reruns of the same inputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopTrace {
    /// The `llm.exchange` events, in order.
    pub llm_events: Vec<i64>,
    /// The `mcp.call` events recorded.
    pub call_events: Vec<i64>,
    /// Wall time of each call by trajectory index (0 for calls not sent).
    pub call_ms: BTreeMap<usize, f64>,
    /// Time waiting for the model, and everything else (tool calls, bookkeeping), in ms.
    pub llm_ms: f64,
    pub other_ms: f64,
}

impl Trajectory {
    /// An empty trajectory for `q`, before anything ran.
    pub fn start(q: &Query) -> Self {
        Trajectory {
            id: q.id.clone(),
            query: q.query.clone(),
            status: RunStatus::Answered,
            reason: None,
            answer: None,
            messages: Vec::new(),
            calls: Vec::new(),
            groups: 0,
            chain: q.chain.clone(),
            chain_check: None,
            exchanges: Vec::new(),
        }
    }
}

/// A model the agent loop can talk to: the stage's [`LlmClient`], or one work item of
/// an [`crate::llm::batch::Batch`] (which records under the item's key and counts the
/// item's exchanges for its checkpoint).
pub trait Chat {
    fn chat(
        &self,
        role: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        subject: &str,
    ) -> impl std::future::Future<Output = Result<crate::llm::Reply<ChatTurn>, crate::llm::LlmError>>;
}

impl Chat for LlmClient {
    async fn chat(
        &self,
        role: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        subject: &str,
    ) -> Result<crate::llm::Reply<ChatTurn>, crate::llm::LlmError> {
        LlmClient::chat(self, role, messages, tools, subject).await
    }
}

/// A batch item records under its own key; `subject` only names MCP call events.
impl Chat for crate::llm::batch::Item {
    async fn chat(
        &self,
        role: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        _subject: &str,
    ) -> Result<crate::llm::Reply<ChatTurn>, crate::llm::LlmError> {
        crate::llm::batch::Item::chat(self, role, messages, tools).await
    }
}

struct ExecTool {
    server: String,
    tool: String,
    spec: ToolSpec,
}

/// Records calls in the ledger as they finish. A ledger write that fails is
/// warned about and the trajectory JSON still holds the call.
pub struct Recorder(RunRecorder);

impl Recorder {
    pub fn open(artifacts: &Path, run_id: i64, stage: &str) -> Result<Self> {
        Ok(Self(RunRecorder::open(artifacts, run_id, stage)?))
    }

    fn append(&self, ev: NewEvent) -> Option<i64> {
        let what = ev.kind.clone();
        self.0.record(ev).map_err(|e| tracing::warn!("cannot record `{what}` in the ledger: {e:#}")).ok()
    }
}

/// The agent: MCP clients, their tools as OpenAI functions, and the loop.
pub struct Executor {
    clients: BTreeMap<String, Arc<McpClient>>,
    tools: BTreeMap<String, ExecTool>,
    specs: Vec<ToolSpec>,
    names: ToolNames,
    settings: ExecuteSettings,
    recorder: Option<Recorder>,
}

impl Executor {
    /// List the tools of every client (a server that cannot list its tools is an error).
    pub async fn connect(
        clients: Vec<Arc<McpClient>>,
        settings: ExecuteSettings,
        recorder: Option<Recorder>,
    ) -> Result<Self> {
        let mut tools = BTreeMap::new();
        for c in &clients {
            let listed =
                c.list_tools().await.map_err(|f| anyhow::anyhow!("cannot list the tools of `{}`: {f}", c.name()))?;
            for t in listed {
                let id = c.tool_id(&t.name);
                let spec =
                    ToolSpec { name: String::new(), description: t.description.clone(), parameters: t.input_schema };
                tools.insert(id, ExecTool { server: c.name().to_string(), tool: t.name, spec });
            }
        }
        let names = ToolNames::new(tools.keys().map(String::as_str));
        let mut specs = Vec::with_capacity(tools.len());
        for (id, t) in &mut tools {
            t.spec.name = names.name(id).unwrap_or(id).to_string();
            specs.push(t.spec.clone());
        }
        let clients = clients.into_iter().map(|c| (c.name().to_string(), c)).collect();
        Ok(Self { clients, tools, specs, names, settings, recorder })
    }

    pub fn tool_specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    pub fn names(&self) -> &ToolNames {
        &self.names
    }

    /// Kill spawned servers.
    pub async fn shutdown(&self) {
        for c in self.clients.values() {
            c.shutdown().await;
        }
    }

    /// Run one query to its end. Never returns an error: failures are recorded in the
    /// trajectory's `status` and `reason`; event ids and timings are in the trace.
    pub async fn run_query<C: Chat>(&self, llm: &C, q: &Query) -> (Trajectory, LoopTrace) {
        let started = Instant::now();
        let mut t = Trajectory::start(q);
        let mut messages =
            vec![ChatMessage::System(self.settings.system_prompt.clone()), ChatMessage::User(q.query.clone())];
        let mut trace = self.run_loop(llm, &q.id, &mut messages, &mut t).await;
        t.messages = messages.iter().map(|m| crate::llm::openai_message(m, crate::llm::CallIndex::Include)).collect();
        if !q.chain.is_empty() {
            t.chain_check = Some(check_chain(&q.chain, &t.calls));
        }
        trace.other_ms = round3((ms(started) - trace.llm_ms).max(0.0));
        (t, trace)
    }

    /// The system prompt the agent starts from (a dialogue's first message).
    pub fn system_prompt(&self) -> &str {
        &self.settings.system_prompt
    }

    /// Run the agent loop on `messages` (which end with a user message) until the model
    /// answers, the cap is reached or a call fails; calls, groups, status and answer go
    /// into `t` (its counters continue, so a dialogue may run several turns into one
    /// trajectory or one each). `subject` names the item in ledger events. Returns the
    /// ledger events and the time spent waiting for the model (`other_ms` left at 0).
    pub async fn run_loop<C: Chat>(
        &self,
        llm: &C,
        subject: &str,
        messages: &mut Vec<ChatMessage>,
        t: &mut Trajectory,
    ) -> LoopTrace {
        let mut trace = LoopTrace::default();
        let mut executed = 0usize;
        let mut llm_ms = 0.0f64;
        let mut nudged = false;
        let mut nudge_now = false;
        loop {
            let asked = Instant::now();
            // The nudge is part of this one request only, not of the conversation.
            if nudge_now {
                messages.push(ChatMessage::System(self.settings.answer_nudge.clone()));
            }
            let reply = llm.chat(&self.settings.role, messages, &self.specs, subject).await;
            if std::mem::take(&mut nudge_now) {
                messages.pop();
            }
            llm_ms += ms(asked);
            let reply = match reply {
                Ok(r) => r,
                Err(e) => {
                    t.status = RunStatus::Failed;
                    t.reason = Some(format!("LLM: {e}"));
                    break;
                }
            };
            trace.llm_events.push(reply.event_id);
            t.exchanges.push(reply.exchange.clone());
            let ChatTurn { content, tool_calls, .. } = reply.value;
            // Small local models often write the call as text; take it when it names a tool.
            let parsed = match tool_calls.is_empty() {
                true => text_tool_calls(content.as_deref().unwrap_or(""), t.groups, |n| self.names.id(n).is_some()),
                false => Vec::new(),
            };
            let (content, tool_calls) = if parsed.is_empty() { (content, tool_calls) } else { (None, parsed) };
            let blank = tool_calls.is_empty() && content.as_deref().is_none_or(|c| c.trim().is_empty());
            if blank && executed > 0 && !nudged && !self.settings.answer_nudge.is_empty() {
                nudged = true;
                nudge_now = true;
                continue;
            }
            messages.push(ChatMessage::Assistant { content: content.clone(), tool_calls: tool_calls.clone() });
            if tool_calls.is_empty() {
                t.answer = Some(content.unwrap_or_default());
                break;
            }
            let group = t.groups;
            t.groups += 1;
            if executed + tool_calls.len() > self.settings.max_calls {
                let note = format!("not executed: the call cap of {} was reached", self.settings.max_calls);
                for call in &tool_calls {
                    let mut rec = self.record_base(t.calls.len(), group, call, &reply.exchange);
                    rec.outcome = CallOutcome::ToolError { output: crate::mcp::ToolOutput::note(&note) };
                    t.calls.push(rec);
                }
                t.status = RunStatus::CapReached;
                t.reason = Some(format!(
                    "the model asked for {} more call(s) after {executed}; the cap is {}",
                    tool_calls.len(),
                    self.settings.max_calls
                ));
                break;
            }
            executed += tool_calls.len();
            let base = t.calls.len();
            let runs = tool_calls
                .iter()
                .enumerate()
                .map(|(i, call)| self.run_call(subject, base + i, group, call, &reply.exchange, reply.event_id));
            let records = futures::future::join_all(runs).await;
            let mut failed = None;
            for (rec, call_ms, event) in records {
                trace.call_ms.insert(rec.index, call_ms);
                trace.call_events.extend(event);
                let text = truncate_chars(&rec.outcome.as_text(), self.settings.tool_result_chars);
                messages.push(ChatMessage::Tool { call_id: rec.call_id.clone(), content: text });
                if rec.executed
                    && let CallOutcome::Failed { failure } = &rec.outcome
                    && failed.is_none()
                {
                    failed = Some(format!("call {} (`{}`) failed: {failure}", rec.index, rec.function));
                }
                t.calls.push(rec);
            }
            if let Some(why) = failed
                && self.settings.stop_on_failure
            {
                t.status = RunStatus::Failed;
                t.reason = Some(why);
                break;
            }
        }
        trace.llm_ms = round3(llm_ms);
        trace
    }

    fn record_base(&self, index: usize, group: usize, call: &ToolCall, exchange: &str) -> CallRecord {
        let tool_id = self.names.id(&call.name).map(str::to_string);
        CallRecord {
            index,
            group,
            call_id: call.id.clone(),
            function: call.name.clone(),
            server: tool_id.as_ref().and_then(|id| self.tools.get(id)).map(|t| t.server.clone()),
            tool_id,
            arguments: call.arguments.clone(),
            executed: false,
            outcome: CallOutcome::Failed { failure: CallFailure::Cancelled },
            exchange: Some(exchange.to_string()),
            call_hash: call_hash(exchange, index, &call.name, &call.arguments),
        }
    }

    /// Run one call; returns its record, its wall time (ms) and its `mcp.call` event.
    async fn run_call(
        &self,
        subject: &str,
        index: usize,
        group: usize,
        call: &ToolCall,
        exchange: &str,
        llm_event: i64,
    ) -> (CallRecord, f64, Option<i64>) {
        let mut rec = self.record_base(index, group, call, exchange);
        let mut latency_ms = 0.0;
        let target = rec
            .tool_id
            .as_ref()
            .and_then(|id| self.tools.get(id))
            .and_then(|t| Some((self.clients.get(&t.server)?, t)));
        match (target, &call.arguments) {
            (None, _) => {
                rec.outcome = CallOutcome::ToolError {
                    output: crate::mcp::ToolOutput::note(&format!(
                        "unknown tool `{}`; use one of the listed tools",
                        call.name
                    )),
                };
            }
            (Some(_), args) if !args.is_object() => {
                rec.outcome = CallOutcome::ToolError {
                    output: crate::mcp::ToolOutput::note("the arguments are not a JSON object; send a JSON object"),
                };
            }
            (Some((client, tool)), args) => {
                let started = Instant::now();
                rec.outcome = client.call(&tool.tool, args, None).await;
                latency_ms = round3(ms(started));
                rec.executed = true;
            }
        }
        let mut event = None;
        if let Some(r) = &self.recorder {
            let mut payload = serde_json::to_value(&rec).unwrap_or(Value::Null);
            if let Some(o) = payload.as_object_mut() {
                o.insert("query".into(), json!(subject));
                o.insert("latency_ms".into(), json!(latency_ms));
            }
            let ev = NewEvent::new(kind::MCP_CALL, Some(subject), payload).with_parent(Parent::Id(llm_event));
            event = r.append(ev);
        }
        (rec, latency_ms, event)
    }

    /// Record a finished query in the ledger (`execute.trajectory` with its timings, its
    /// exchanges and calls as parents); returns the event id.
    pub fn record_trajectory(&self, t: &Trajectory, trace: &LoopTrace) -> Option<i64> {
        let r = self.recorder.as_ref()?;
        let mut payload = trajectory_summary(t);
        payload["llm_ms"] = json!(trace.llm_ms);
        payload["other_ms"] = json!(trace.other_ms);
        let mut ev = NewEvent::new(TRAJECTORY, Some(&t.id), payload);
        for id in trace.llm_events.iter().chain(&trace.call_events) {
            ev = ev.with_parent(Parent::Id(*id));
        }
        r.append(ev)
    }

    /// Run queries (`concurrency` at once); `done` is called with each finished one and
    /// the counts of its own LLM calls, in completion order. The result is in query order.
    pub async fn run_all(
        &self,
        llm: &LlmClient,
        queries: &[Query],
        mut done: impl FnMut(&Trajectory, LlmCounts) -> Result<()>,
    ) -> Result<Vec<Trajectory>> {
        let mut results: Vec<Option<Trajectory>> = vec![None; queries.len()];
        let mut stream = futures::stream::iter(queries.iter().enumerate())
            .map(|(i, q)| async move {
                let (llm, tally) = llm.tallied();
                let (t, trace) = self.run_query(&llm, q).await;
                (i, t, trace, tally.counts())
            })
            .buffer_unordered(self.settings.concurrency.max(1));
        while let Some((i, t, trace, counts)) = stream.next().await {
            self.record_trajectory(&t, &trace);
            done(&t, counts)?;
            results[i] = Some(t);
        }
        Ok(results.into_iter().flatten().collect())
    }
}

/// Tool calls a model wrote as text instead of structured `tool_calls`: a JSON object
/// `{"name", "arguments"}` (or a list of them), bare, fenced or in Qwen's `<tool_call>` tags,
/// as small local models often answer. Taken only when every object names a listed function
/// (`known`) or has the call's shape (`name` and `arguments`); otherwise the text is an
/// answer. Ids are `text_call_<group>_<i>`.
pub fn text_tool_calls(content: &str, group: usize, known: impl Fn(&str) -> bool) -> Vec<ToolCall> {
    let text = crate::llm::extract::strip_think(content);
    let mut values = Vec::new();
    if text.contains("<tool_call>") {
        for block in text.split("<tool_call>").skip(1) {
            let body = block.split("</tool_call>").next().unwrap_or(block);
            match crate::llm::extract::extract_json(body) {
                Ok(v) => values.push(v),
                Err(_) => return Vec::new(),
            }
        }
    } else if let Ok(v) = crate::llm::extract::extract_json(&text) {
        match v {
            Value::Array(items) => values.extend(items),
            v => values.push(v),
        }
    }
    let mut calls = Vec::new();
    for (i, v) in values.iter().enumerate() {
        // A listed name, or the call shape (`name` + `arguments`): an unknown name then goes
        // back to the model as an unknown tool, as a structured call would.
        let shaped = v.get("arguments").or_else(|| v.get("parameters")).is_some();
        let Some(name) = v.get("name").and_then(Value::as_str).filter(|n| !n.is_empty() && (known(n) || shaped)) else {
            return Vec::new();
        };
        let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
            Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
            Some(a) => a.clone(),
            None => json!({}),
        };
        calls.push(ToolCall { id: format!("text_call_{group}_{i}"), name: name.to_string(), arguments });
    }
    calls
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let kept: String = s.chars().take(max).collect();
    format!("{kept}\n[cut: {} of {} characters shown]", max, s.chars().count())
}

fn trajectory_summary(t: &Trajectory) -> Value {
    json!({
        "status": t.status, "reason": t.reason, "calls": t.calls.len(), "groups": t.groups,
        "chain_preserved": t.chain_check.as_ref().map(|c| c.preserved),
    })
}

/// Every trajectory, one JSON line each in query order (read by `validate`).
pub const TRAJECTORIES: crate::stage::Artifact<Trajectory> =
    crate::stage::Artifact::new("execute", "trajectories.jsonl");

/// The `execute` stage; `queries` overrides `execute.queries` (`--queries FILE`).
#[derive(Debug, Clone, Default)]
pub struct ExecuteStage {
    pub queries: Option<PathBuf>,
}

pub static SPEC: StageSpec = StageSpec {
    name: "execute",
    command: "execute",
    version: 3,
    about: "run queries with an LLM agent over MCP tools; record reference trajectories",
    reads: &[
        crate::synth::chains::QUERIES.optional(),
        crate::logs::import::CATALOG.optional(),
        crate::logs::import::SESSIONS.optional(),
    ],
    writes: &["trajectories/*", "trajectories.jsonl", "summary.json"],
    section: Some("execute"),
};

/// Where the queries come from.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// `--queries FILE` or `execute.queries`: run against `execute.servers`, role `execute.role`.
    File(PathBuf),
    /// `synth chains` output: run against `synth.server` or the domain sandbox, role
    /// `synth.assistant_role`.
    Chains,
}

impl ExecuteStage {
    fn source(&self, settings: &Settings) -> Result<Source> {
        let q = self
            .queries
            .clone()
            .or_else(|| settings.section::<ExecuteSettings>().queries.as_ref().map(|p| settings.resolve(p)));
        match q {
            Some(q) => Ok(Source::File(crate::settings::normalize(&q))),
            None if crate::synth::enabled(settings) => Ok(Source::Chains),
            None => Err(crate::error::UsageError(
                "no queries: pass `--queries FILE`, set `execute.queries`, or configure `[synth]` so `synth chains` writes them"
                    .into(),
            )
            .into()),
        }
    }

    fn server_specs(settings: &Settings) -> Result<BTreeMap<String, crate::mcp::ServerSpec>> {
        let all = settings.section::<crate::mcp::McpSettings>().all_servers(&settings.root)?;
        let wanted = &settings.section::<ExecuteSettings>().servers;
        if wanted.is_empty() {
            if all.is_empty() {
                return Err(crate::error::hinted(
                    "`execute` needs MCP servers, and the config declares none",
                    "add `[mcp.servers.NAME]` (e.g. a `benchgen sandbox`), or set `mcp.import`",
                ));
            }
            return Ok(all);
        }
        let mut out = BTreeMap::new();
        for w in wanted {
            let spec = all.get(w).ok_or_else(|| {
                crate::error::UsageError(format!("`execute.servers` names `{w}`, which is not in `[mcp.servers]`"))
            })?;
            out.insert(w.clone(), spec.clone());
        }
        Ok(out)
    }

    fn on_chains(&self, settings: &Settings) -> bool {
        matches!(self.source(settings), Ok(Source::Chains))
    }
}

impl Stage for ExecuteStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Run queries with an LLM agent over MCP tools and record reference trajectories.

         Reads the queries file (`--queries FILE` or `execute.queries`; JSON Lines or a JSON
         array of `{id, query, chain?}`), the servers of `[mcp.servers]` (or
         `execute.servers`) and the LLM role `execute.role`. Without a file and with `[synth]`,
         reads the chain queries `synth-chains/queries.jsonl` and runs them (role
         `synth.assistant_role`) against `synth.server`, or by default a sandbox serving
         `logs-import/catalog.json` that answers with results logged in
         `logs-import/sessions.jsonl` for equal calls. Writes `artifacts/execute/`:
         `trajectories/<id>.json`, `trajectories.jsonl` and `summary.json`; every tool call is an `mcp.call`
         ledger event linked to the LLM exchange that asked for it (trajectories name both by
         hash; timings are in the ledger). The loop's settings
         (`max_calls`, `system_prompt`, `answer_nudge` for a turn left blank after tool calls,
         …) are in `[execute]`. A query that fails is recorded with its reason and the run
         goes on. Finished queries are checkpointed; skipped when up to date."
    }

    /// Part of `run` when the config names a queries file, or synthesis writes chain queries.
    fn enabled(&self, settings: &Settings) -> bool {
        settings.section::<ExecuteSettings>().queries.is_some() || crate::synth::enabled(settings)
    }

    fn roles(&self, settings: &Settings) -> Vec<ConfigRef> {
        if self.on_chains(settings) {
            vec![ConfigRef::new("synth.assistant_role", &crate::synth::settings(settings).assistant_role)]
        } else {
            vec![ConfigRef::new("execute.role", &settings.section::<ExecuteSettings>().role)]
        }
    }

    /// The servers of every mode, not only the current one: `execute.servers` serve a
    /// queries file (`execute.queries`, or `--queries` at any time, even when synthesis
    /// feeds `execute`), `synth.server` the chain queries.
    fn servers(&self, settings: &Settings) -> Vec<ConfigRef> {
        let names = settings.section::<ExecuteSettings>().servers.iter().enumerate();
        let mut out: Vec<ConfigRef> = names.map(|(i, n)| ConfigRef::new(format!("execute.servers[{i}]"), n)).collect();
        if crate::synth::enabled(settings) {
            out.extend(crate::synth::settings(settings).server.iter().map(|n| ConfigRef::new("synth.server", n)));
        }
        out
    }

    fn check(&self, settings: &Settings, problems: &mut Vec<crate::error::Problem>) {
        use crate::settings::check_positive;
        let e = &settings.section::<ExecuteSettings>();
        check_positive(problems, "execute.max_calls", e.max_calls);
        check_positive(problems, "execute.concurrency", e.concurrency);
        check_positive(problems, "execute.tool_result_chars", e.tool_result_chars);
        // A queries file runs against `execute.servers`, or every server when it names none.
        if matches!(self.source(settings), Ok(Source::File(_)))
            && e.servers.is_empty()
            && settings.section::<crate::mcp::McpSettings>().all_servers(&settings.root).is_ok_and(|all| all.is_empty())
        {
            problems.push(crate::error::Problem::new(
                "execute.servers",
                "`execute` runs a queries file and the config declares no MCP server: add `[mcp.servers.NAME]` or set `mcp.import`",
            ));
        }
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        match self.source(settings)? {
            Source::File(path) => {
                let servers = Self::server_specs(settings)?;
                let hash = crate::settings::section_hash(
                    &json!({"execute": settings.section::<ExecuteSettings>(), "servers": servers}),
                )?;
                Ok(Plan { inputs: vec![path], config_hash: hash })
            }
            Source::Chains => {
                let synth = crate::synth::settings(settings);
                let hash = crate::settings::section_hash(&json!({
                    "execute": settings.section::<ExecuteSettings>(),
                    "role": synth.assistant_role,
                    "servers": crate::synth::server_hash_part(settings)?,
                }))?;
                Ok(Plan { inputs: vec![], config_hash: hash })
            }
        }
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        use crate::llm::batch::{Batch, BatchOptions, Item};
        let settings = ctx.settings;
        let mut es = ExecuteSettings::clone(settings.section::<ExecuteSettings>());
        let source = self.source(settings)?;
        let queries = match &source {
            Source::File(path) => parse_queries(inputs.bytes(path)?, &settings.display_path(path))?,
            Source::Chains => {
                es.role = crate::synth::settings(settings).assistant_role;
                parse_queries(inputs.bytes_of(&crate::synth::chains::QUERIES)?, "synth-chains/queries.jsonl")?
            }
        };
        // The domain sandbox answers from the logs: read them only when it is used.
        let (tools, sessions) = if source == Source::Chains && crate::synth::settings(settings).server.is_none() {
            if !inputs.has(&crate::logs::import::CATALOG) || !inputs.has(&crate::logs::import::SESSIONS) {
                return Err(crate::error::hinted(
                    "`execute` on chain queries serves the log catalog, and `logs import` has not written it",
                    "run `benchgen logs import` (or `benchgen run`), or name a server in `synth.server`",
                ));
            }
            let tools = inputs.json(&crate::logs::import::CATALOG)?;
            let sessions = crate::logs::read_sessions(
                inputs.open_of(&crate::logs::import::SESSIONS)?,
                "logs-import/sessions.jsonl",
            )?;
            (tools, sessions)
        } else {
            (Vec::new(), Vec::new())
        };
        let run_id = ctx.ledger_run()?;
        let opts = BatchOptions::new("execute", "execute", "queries")
            .concurrency(es.concurrency.max(1))
            .fail_point("execute_query");
        let mut batch = Batch::new(ctx, opts)?;
        let exec = batch.block_on(async {
            let clients = match &source {
                Source::File(_) => {
                    let opts = ClientOptions::from_settings(settings, settings.section::<crate::mcp::McpSettings>());
                    Self::server_specs(settings)?
                        .iter()
                        .map(|(n, s)| Arc::new(McpClient::new(n, s.clone(), opts.clone())))
                        .collect()
                }
                Source::Chains => crate::synth::clients(settings, &tools, &sessions)?,
            };
            let recorder = Recorder::open(&settings.artifacts, run_id, "execute")?;
            Executor::connect(clients, es.clone(), Some(recorder)).await
        })?;
        let items: Vec<(String, Query)> = queries.iter().map(|q| (q.id.clone(), q.clone())).collect();
        let ex = &exec;
        let done = batch.run(items, |q: Query, llm: Item| async move {
            let (t, trace) = ex.run_query(&llm, &q).await;
            ex.record_trajectory(&t, &trace);
            Ok(t)
        });
        batch.block_on(exec.shutdown());
        drop(exec);
        let done = done?;
        batch.finish(out)?;

        let mut rows = Vec::new();
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        let mut all = Vec::new();
        for q in &queries {
            let t = done.values.get(&q.id).context("a query has no result")?;
            *counts.entry(t.status.as_str()).or_default() += 1;
            *counts.entry("calls").or_default() += t.calls.len() as u64;
            if let Some(c) = &t.chain_check {
                *counts.entry(if c.preserved { "chain_preserved" } else { "chain_broken" }).or_default() += 1;
            }
            // The ledger's trajectory summary, led by the id.
            let mut row = serde_json::Map::from_iter([("id".to_string(), json!(t.id))]);
            if let Value::Object(summary) = trajectory_summary(t) {
                row.extend(summary);
            }
            rows.push(Value::Object(row));
            out.json(&format!("trajectories/{}.json", crate::mcp::client::safe_file_name(&t.id)), t)?;
            serde_json::to_writer(&mut all, t)?;
            all.push(b'\n');
        }
        out.file("trajectories.jsonl", all);
        out.count("queries", queries.len() as u64);
        for (k, v) in &counts {
            out.count(k, *v);
        }
        let n = |k: &str| counts.get(k).copied().unwrap_or(0);
        // The outcome in one line, as the other stages print theirs (the counts were only in
        // the manifest and summary.json).
        let mut line = format!(
            "{} quer{}: {} answered, {} at the call cap, {} failed; {} calls",
            queries.len(),
            if queries.len() == 1 { "y" } else { "ies" },
            n("answered"),
            n("cap_reached"),
            n("failed"),
            n("calls")
        );
        if n("chain_preserved") + n("chain_broken") > 0 {
            line.push_str(&format!(
                "; chain order preserved in {}, broken in {}",
                n("chain_preserved"),
                n("chain_broken")
            ));
        }
        out.notes.push(line);
        let failed = n("failed");
        if failed > 0 {
            out.notes.push(format!(
                "{failed} quer{} failed; reasons in summary.json",
                if failed == 1 { "y" } else { "ies" }
            ));
        }
        out.json("summary.json", &json!({"queries": queries.len(), "counts": counts, "rows": rows}))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_status_serialises_as_before() {
        use super::RunStatus;
        for (s, word) in
            [(RunStatus::Answered, "answered"), (RunStatus::CapReached, "cap_reached"), (RunStatus::Failed, "failed")]
        {
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(word));
            assert_eq!(serde_json::from_value::<RunStatus>(serde_json::json!(word)).unwrap(), s);
            assert_eq!(s.as_str(), word);
        }
    }

    use super::*;

    fn call(group: usize, tool: &str, ok: bool) -> CallRecord {
        let output = crate::mcp::ToolOutput::note("x");
        CallRecord {
            index: 0,
            group,
            call_id: String::new(),
            function: String::new(),
            tool_id: Some(tool.into()),
            server: None,
            arguments: json!({}),
            executed: true,
            outcome: if ok { CallOutcome::Ok { output } } else { CallOutcome::ToolError { output } },
            exchange: None,
            call_hash: String::new(),
        }
    }

    #[test]
    fn chain_check_takes_the_earliest_fitting_successful_call() {
        let chain =
            parse_queries(br#"{"id": 1, "query": "q", "chain": ["a", "b", "c"]}"#, "f").unwrap()[0].chain.clone();
        assert_eq!(chain[2].depends_on, [1]);
        // `b` in group 0 is too early, the one in group 2 fits; `c` failed in 3, succeeded in 4.
        let calls = [
            call(0, "b", true),
            call(1, "a", true),
            call(1, "x", true),
            call(2, "b", true),
            call(3, "c", false),
            call(4, "c", true),
        ];
        let c = check_chain(&chain, &calls);
        assert!(c.preserved, "{c:?}");
        assert_eq!(c.groups, [Some(1), Some(2), Some(4)]);
        // Only a failed `c`: broken, and the reason says so.
        let c = check_chain(&chain, &calls[..5]);
        assert!(!c.preserved);
        assert!(c.problems[0].contains("`c` was never called successfully"), "{c:?}");
    }

    #[test]
    fn text_tool_calls_are_taken_only_when_they_name_listed_tools() {
        let known = |n: &str| ["get_oncall", "notify_user"].contains(&n);
        let fenced = "```json\n{\"name\": \"get_oncall\", \"arguments\": {\"team\": \"db\"}}\n```";
        let calls = text_tool_calls(fenced, 2, known);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].id.as_str(), calls[0].name.as_str()), ("text_call_2_0", "get_oncall"));
        assert_eq!(calls[0].arguments, json!({"team": "db"}));
        let tagged = "<tool_call>{\"name\": \"get_oncall\", \"arguments\": \"{\\\"team\\\": \\\"x\\\"}\"}</tool_call>\n<tool_call>{\"name\": \"notify_user\", \"arguments\": {}}</tool_call>";
        let calls = text_tool_calls(tagged, 0, known);
        assert_eq!(calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["get_oncall", "notify_user"]);
        assert_eq!(calls[0].arguments, json!({"team": "x"}), "string arguments are parsed");
        // An unknown name in the call's shape is a call (the model hears "unknown tool"); an
        // unknown name without arguments, or plain text, is an answer.
        assert_eq!(text_tool_calls("{\"name\": \"rm_rf\", \"arguments\": {}}", 0, known)[0].name, "rm_rf");
        assert!(text_tool_calls("{\"name\": \"Ada\", \"team\": \"db\"}", 0, known).is_empty());
        assert!(text_tool_calls("The on-call engineer is Ada.", 0, known).is_empty());
        assert!(text_tool_calls("{\"answer\": 3}", 0, known).is_empty());
    }
}
