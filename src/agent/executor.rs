//! The agent loop: MCP clients, their tools as OpenAI functions, and the conversation
//! that runs a query to its answer, its call cap or a failure.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use futures::StreamExt;
use serde_json::{Value, json};

use super::names::ToolNames;
use super::{
    AgentSettings, CallRecord, LoopTrace, Query, RunStatus, TRAJECTORY, Trajectory, Withheld, call_hash, check_chain,
};
use crate::ledger::{NewEvent, Parent, RunRecorder, kind};
use crate::llm::extract::{extract_json, leading_call, strip_think};
use crate::llm::{ChatMessage, ChatTurn, LlmClient, LlmCounts, ToolCall, ToolSpec};
use crate::mcp::pin::ServerPin;
use crate::mcp::{CallFailure, CallOutcome, McpClient};

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
    settings: AgentSettings,
    recorder: Option<Recorder>,
    /// Each server as it was when connecting, for [`Executor::record_servers`].
    pins: Vec<ServerPin>,
}

impl Executor {
    /// List the tools of every client (a server that cannot list its tools is an error).
    pub async fn connect(
        clients: Vec<Arc<McpClient>>,
        settings: AgentSettings,
        recorder: Option<Recorder>,
    ) -> Result<Self> {
        let mut tools = BTreeMap::new();
        let mut pins = Vec::with_capacity(clients.len());
        for c in &clients {
            let listed =
                c.list_tools().await.map_err(|f| anyhow::anyhow!("cannot list the tools of `{}`: {f}", c.name()))?;
            pins.push(ServerPin::of(c, &listed).await);
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
        Ok(Self { clients, tools, specs, names, settings, recorder, pins })
    }

    /// Record each server as it was when connecting (an `mcp.server` event, subject
    /// `mcp-server:<name>`), so a release can pin the servers its samples ran against.
    pub fn record_servers(&self) {
        let Some(r) = &self.recorder else { return };
        for pin in &self.pins {
            let payload = serde_json::to_value(pin).unwrap_or(Value::Null);
            r.append(NewEvent::new(kind::MCP_SERVER, Some(&format!("mcp-server:{}", pin.name)), payload));
        }
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
    /// answers, the cap is reached, it asks again only for calls it already had answered
    /// (after the one answer nudge) or a call fails; calls, groups, status and answer go
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
        self.run_guarded(llm, subject, messages, t, None).await
    }

    /// [`Executor::run_loop`] with a `guard` over the calls the model asks for: a call it
    /// refuses is withheld (not run, not in the conversation; recorded in `t.withheld`), and
    /// a reply left with nothing to run is nudged as a blank one is (its words, if any, are
    /// no answer). A reply that holds only withheld calls once no nudge is left ends the run
    /// as failed ([`WITHHELD_ONLY`]).
    pub async fn run_guarded<C: Chat>(
        &self,
        llm: &C,
        subject: &str,
        messages: &mut Vec<ChatMessage>,
        t: &mut Trajectory,
        guard: Guard<'_>,
    ) -> LoopTrace {
        let mut trace = LoopTrace::default();
        let mut executed = 0usize;
        let mut llm_ms = 0.0f64;
        let mut nudged = Nudged::default();
        let mut nudge_now: Option<&str> = None;
        // The calls this loop ran (not those of a dialogue's earlier turns), for `repeated`.
        let first = t.calls.len();
        loop {
            let asked = Instant::now();
            // The nudge is part of this one request only, not of the conversation.
            if let Some(nudge) = nudge_now {
                messages.push(ChatMessage::System(nudge.to_string()));
            }
            let reply = llm.chat(&self.settings.role, messages, &self.specs, subject).await;
            if nudge_now.take().is_some() {
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
            let (content, mut tool_calls) = if parsed.is_empty() { (content, tool_calls) } else { (None, parsed) };
            let withheld = self.withhold(guard, &mut tool_calls, t);
            // A reply left with nothing to run is nudged as a blank one is, whatever words came
            // with the withheld calls ("I'll assign it now." is no answer).
            let blank = tool_calls.is_empty() && (withheld || content.as_deref().is_none_or(wordless));
            let repeat = repeated(&tool_calls, &t.calls[first..]);
            if (repeat.is_some() || blank)
                && let Some(nudge) = nudged.next(&self.settings, executed > 0 || repeat.is_some())
            {
                nudge_now = Some(nudge);
                continue;
            }
            let ended = match repeat {
                Some(why) => Some((RunStatus::Repeated, why)),
                None => (blank && withheld).then(|| (RunStatus::Failed, WITHHELD_ONLY.to_string())),
            };
            if let Some((status, why)) = ended {
                (t.status, t.reason) = (status, Some(why));
                break;
            }
            messages.push(ChatMessage::Assistant { content: content.clone(), tool_calls: tool_calls.clone() });
            if tool_calls.is_empty() {
                t.answer = Some(content.unwrap_or_default());
                break;
            }
            let group = t.groups;
            t.groups += 1;
            if executed + tool_calls.len() > self.settings.max_calls {
                self.cap_reached(t, group, executed, &tool_calls, &reply.exchange);
                break;
            }
            executed += tool_calls.len();
            let sent = (group, reply.exchange.as_str(), reply.event_id);
            if let Some(why) = self.run_group(subject, &tool_calls, sent, (messages, t, &mut trace)).await
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

    /// Run one group of calls (`sent`: the group, and the exchange and event of the reply
    /// that asked for them); their results go into `messages`, their records into `t` and
    /// their timings and events into `trace`. Returns why the first executed call that
    /// failed failed.
    async fn run_group(
        &self,
        subject: &str,
        tool_calls: &[ToolCall],
        (group, exchange, llm_event): (usize, &str, i64),
        (messages, t, trace): (&mut Vec<ChatMessage>, &mut Trajectory, &mut LoopTrace),
    ) -> Option<String> {
        let base = t.calls.len();
        let runs = tool_calls
            .iter()
            .enumerate()
            .map(|(i, call)| self.run_call(subject, base + i, group, call, exchange, llm_event));
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
        failed
    }

    /// Take the calls `guard` refuses out of `tool_calls` into `t.withheld`; whether any was.
    fn withhold(&self, guard: Guard<'_>, tool_calls: &mut Vec<ToolCall>, t: &mut Trajectory) -> bool {
        let Some(guard) = guard else { return false };
        let before = tool_calls.len();
        tool_calls.retain(|call| {
            let tool = self.names.id(&call.name).unwrap_or(&call.name);
            let Some(reason) = guard(tool) else { return true };
            t.withheld.push(Withheld { function: call.name.clone(), arguments: call.arguments.clone(), reason });
            false
        });
        tool_calls.len() < before
    }

    /// End the run at the call cap: the group that would pass it is recorded, not executed.
    fn cap_reached(&self, t: &mut Trajectory, group: usize, executed: usize, tool_calls: &[ToolCall], exchange: &str) {
        let note = format!("not executed: the call cap of {} was reached", self.settings.max_calls);
        for call in tool_calls {
            let mut rec = self.record_base(t.calls.len(), group, call, exchange);
            rec.outcome = CallOutcome::ToolError { output: crate::mcp::ToolOutput::note(&note) };
            t.calls.push(rec);
        }
        t.status = RunStatus::CapReached;
        t.reason = Some(format!(
            "the model asked for {} more call(s) after {executed}; the cap is {}",
            tool_calls.len(),
            self.settings.max_calls
        ));
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
        let mut payload = super::trajectory_summary(t);
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

/// What [`Executor::run_guarded`] asks of a call the model wants, by tool id (the name
/// the model used when no listed tool has it): `Some(reason)` withholds the call.
pub type Guard<'a> = Option<&'a (dyn Fn(&str) -> Option<String> + Sync)>;

/// Why a guarded run ended when the model asked only for withheld calls and the nudge it
/// would have been sent had been sent already.
pub const WITHHELD_ONLY: &str = "the model asked only for calls that were withheld, with no nudge left to send";

/// Tool calls a model wrote as text instead of structured `tool_calls`: a JSON object
/// `{"name", "arguments"}` (or a list of them), bare, fenced or in Qwen's `<tool_call>` tags,
/// as small local models often answer. Taken only when every object names a listed function
/// (`known`) or has the call's shape (`name` and `arguments`); otherwise the text is an
/// answer. Ids are `text_call_<group>_<i>`.
pub fn text_tool_calls(content: &str, group: usize, known: impl Fn(&str) -> bool) -> Vec<ToolCall> {
    let text = strip_think(content);
    let mut values = Vec::new();
    if text.contains("<tool_call>") {
        for block in text.split("<tool_call>").skip(1) {
            let body = block.split("</tool_call>").next().unwrap_or(block);
            match leading_call(body).or_else(|| extract_json(body).ok()) {
                Some(v) => values.push(v),
                None => return Vec::new(),
            }
        }
    } else if let Some(v) = leading_call(&text) {
        values.push(v);
    } else if let Ok(v) = extract_json(&text) {
        match v {
            Value::Array(items) => values.extend(items),
            v => values.push(v),
        }
    }
    let mut calls = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let v = function_wrapped(v).unwrap_or(v);
        // A listed name, or the call shape (`name` + `arguments`): an unknown name then goes
        // back to the model as an unknown tool, as a structured call would.
        let shaped = v.get("arguments").or_else(|| v.get("parameters")).is_some();
        let named = v.get("name").and_then(Value::as_str).filter(|n| !n.is_empty() && (known(n) || shaped));
        let Some(name) = named.or_else(|| tool_keyed(v, &known)) else {
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

/// The call inside OpenAI's tool-call shape written as text, `{"type": "function",
/// "function": {"name": N, "arguments": …}}` (an `id` may come too): the demo's 1.5B agent
/// wrote "Find the open incident about notifications errors" that way when asked again
/// (2026-12-06, by hand). A tool's definition in the same wrapper, which small models echo
/// from their prompt, has `parameters` and no `arguments`, and is no call.
fn function_wrapped(v: &Value) -> Option<&Value> {
    let o = v.as_object()?;
    if !o.keys().all(|k| ["type", "function", "id"].contains(&k.as_str()))
        || o.get("type").is_some_and(|t| t != "function")
    {
        return None;
    }
    let f = o.get("function")?;
    (f.get("name").is_some_and(Value::is_string) && f.get("arguments").is_some()).then_some(f)
}

/// The nudges a turn has sent. Each goes once per turn: the call nudge before any call, the
/// answer nudge after calls or a repeat (a model nudged into its first call may still stop
/// blank after its result).
#[derive(Default)]
struct Nudged {
    call: bool,
    answer: bool,
}

impl Nudged {
    /// The nudge to send now (`answer`: after calls or a repeat), if it is on and unsent.
    fn next<'a>(&mut self, settings: &'a AgentSettings, answer: bool) -> Option<&'a str> {
        let (text, sent) = match answer {
            true => (&settings.answer_nudge, &mut self.answer),
            false => (&settings.call_nudge, &mut self.call),
        };
        (!text.is_empty() && !std::mem::replace(sent, true)).then_some(text.as_str())
    }
}

/// Does a reply say nothing: no words once markup tags (`<tools>`, `</tool_call>`) and code
/// fences are taken out? The demo's 1.5B agent answered a request with `<tools></tools>`.
pub fn wordless(text: &str) -> bool {
    static MARKUP: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"</?[A-Za-z_][A-Za-z0-9_]*>|```[A-Za-z]*").expect("a valid pattern")
    });
    MARKUP.replace_all(text, "").trim().is_empty()
}

/// The name of a call written `{"tool": NAME, "arguments": {…}}` (those two keys only, NAME
/// a listed function): small models take the key from the tool results they were shown,
/// whose generic sandbox shape opens with `tool` and `arguments` (the demo's 1.5B assistant
/// answered "Assign the incident to sre" with `<tool_response>{"tool": "assign_incident",
/// "arguments": {…}}</tool_response>`, twice, and the dialogue ended there). A result itself
/// has more keys (`result_id`, `items`, …) and is never read as a call.
fn tool_keyed<'a>(v: &'a Value, known: &impl Fn(&str) -> bool) -> Option<&'a str> {
    let o = v.as_object().filter(|o| o.len() == 2 && o.get("arguments").is_some_and(Value::is_object))?;
    o.get("tool").and_then(Value::as_str).filter(|n| known(n))
}

/// Why a group of calls is not run: each call asks, with the same function and arguments,
/// for one the loop already ran (`ran`), whose result the model was given. Small local
/// models ask for the same call again and again until the cap, and each exchange costs
/// seconds. A call that failed in transport may be tried again (only a transport failure
/// says nothing of the call itself), and a call whose arguments are not a JSON object is
/// never a repeat (the release's Inspect task, which mirrors this loop, cannot see such
/// arguments as the model wrote them). `None` for an empty group or when one call is new.
fn repeated(group: &[ToolCall], ran: &[CallRecord]) -> Option<String> {
    let given = |r: &&CallRecord| !matches!(r.outcome, CallOutcome::Failed { .. }) && r.arguments.is_object();
    let earlier = |c: &ToolCall| ran.iter().filter(given).find(|r| r.function == c.name && r.arguments == c.arguments);
    let first = earlier(group.first()?)?;
    if !group.iter().all(|c| earlier(c).is_some()) {
        return None;
    }
    let (i, function) = (first.index, &first.function);
    Some(format!(
        "the model asked again for call {i} (`{function}`) with the same arguments; its result was already given"
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A test double for the model: its replies in order, and the messages and tools of
    /// each request.
    struct ScriptedChat {
        replies: std::sync::Mutex<Vec<ChatTurn>>,
        seen: std::sync::Mutex<Vec<Vec<ChatMessage>>>,
        tools: std::sync::Mutex<Vec<String>>,
    }

    impl ScriptedChat {
        fn new(replies: Vec<ChatTurn>) -> Self {
            Self { replies: std::sync::Mutex::new(replies), seen: Default::default(), tools: Default::default() }
        }
    }

    impl Chat for ScriptedChat {
        async fn chat(
            &self,
            _role: &str,
            messages: &[ChatMessage],
            tools: &[ToolSpec],
            _subject: &str,
        ) -> Result<crate::llm::Reply<ChatTurn>, crate::llm::LlmError> {
            self.seen.lock().unwrap().push(messages.to_vec());
            self.tools.lock().unwrap().push(serde_json::to_string(tools).unwrap());
            let value = self.replies.lock().unwrap().remove(0);
            Ok(crate::llm::Reply { value, event_id: 1, cached: false, exchange: "x".into() })
        }
    }

    fn call_of(name: &str) -> ChatTurn {
        let call = ToolCall { id: "c".into(), name: name.into(), arguments: json!({}) };
        ChatTurn { content: None, tool_calls: vec![call], finish_reason: None }
    }

    fn said(text: &str) -> ChatTurn {
        ChatTurn { content: Some(text.into()), tool_calls: vec![], finish_reason: None }
    }

    /// Run a guarded loop (which withholds `notify_user`) on `replies`.
    async fn guarded(replies: Vec<ChatTurn>) -> (Trajectory, Vec<Vec<ChatMessage>>, Vec<ChatMessage>) {
        let settings = AgentSettings::from(&crate::agent::ExecuteSettings::default());
        let exec = Executor::connect(vec![], settings, None).await.unwrap();
        let chat = ScriptedChat::new(replies);
        let q = Query { id: "q".into(), query: "Who is on call?".into(), chain: vec![] };
        let mut t = Trajectory::start(&q);
        let mut messages = vec![ChatMessage::User(q.query.clone())];
        let guard = |tool: &str| (tool == "notify_user").then(|| "not asked for".to_string());
        exec.run_guarded(&chat, "q", &mut messages, &mut t, Some(&guard)).await;
        let seen = chat.seen.into_inner().unwrap();
        (t, seen, messages)
    }

    /// An executor over an in-process sandbox serving `tools` (names in the given order).
    async fn sandboxed(tools: &[&str]) -> Executor {
        let tool = |n: &&str| crate::model::Tool {
            id: format!("ops::{n}"),
            name: n.to_string(),
            description: format!("{n} of a service"),
            input_schema: json!({"type": "object", "properties": {"service": {"type": "string"}}}),
            output_schema: None,
        };
        let catalog = crate::model::Catalog {
            servers: vec![crate::model::Server {
                name: "ops".into(),
                description: "operations".into(),
                summary: String::new(),
                url: String::new(),
                categories: vec![],
                license: None,
                tools: tools.iter().map(tool).collect(),
                registry: None,
            }],
        };
        let sandbox = crate::sandbox::Sandbox::new(&catalog, crate::sandbox::SandboxOptions::default()).unwrap();
        let (client_end, server_end) = tokio::io::duplex(1 << 16);
        let (sr, sw) = tokio::io::split(server_end);
        tokio::spawn(async move { crate::sandbox::serve_io(&sandbox, sr, sw).await });
        let (cr, cw) = tokio::io::split(client_end);
        let logs = std::env::temp_dir();
        let opts = crate::mcp::client::ClientOptions::new(&logs);
        let client = McpClient::from_io("ops", crate::mcp::config::ToolIds::AsIs, opts, cr, cw);
        let settings = AgentSettings::from(&crate::agent::ExecuteSettings::default());
        Executor::connect(vec![Arc::new(client)], settings, None).await.unwrap()
    }

    #[tokio::test]
    async fn two_queries_send_the_same_system_message_and_tools_so_a_server_reuses_that_prefix() {
        // The agent stages (execute, synth roleplay, eval) send no template: their fixed part
        // is the system message and the tools, which a chat template renders first. Two
        // queries must send both byte for byte, even from two connections whose server listed
        // the tools in different orders (each stage, each eval run connects anew).
        let mut seen = Vec::new();
        for (listing, (id, text)) in [
            (["list_hosts", "get_oncall", "acknowledge_alert"], ("q1", "Who is on call for db?")),
            (["acknowledge_alert", "list_hosts", "get_oncall"], ("q2", "Which hosts serve checkout?")),
        ] {
            let exec = sandboxed(&listing).await;
            let chat = ScriptedChat::new(vec![said("Done.")]);
            let q = Query { id: id.into(), query: text.into(), chain: vec![] };
            let (t, _) = exec.run_query(&chat, &q).await;
            assert_eq!(t.status, RunStatus::Answered, "{t:?}");
            let messages = chat.seen.into_inner().unwrap().remove(0);
            seen.push((messages, chat.tools.into_inner().unwrap().remove(0)));
            exec.shutdown().await;
        }
        let ((m1, t1), (m2, t2)) = (&seen[0], &seen[1]);
        assert!(matches!(&m1[0], ChatMessage::System(_)), "{:?}", m1[0]);
        assert_eq!(m1[0], m2[0], "the system message");
        assert_eq!(t1, t2, "the tools, whatever order the server listed them in");
        assert_ne!(m1[1], m2[1], "the varying part comes after");
        let first = |t: &str| t.find("ops__acknowledge_alert").unwrap() < t.find("ops__get_oncall").unwrap();
        assert!(first(t1), "sorted by name: {t1}");
    }

    #[tokio::test]
    async fn a_withheld_call_is_not_run_nor_in_the_conversation_and_the_model_is_nudged() {
        let (t, seen, messages) = guarded(vec![call_of("notify_user"), said("Ada is on call.")]).await;
        assert_eq!((t.status, t.answer.as_deref()), (RunStatus::Answered, Some("Ada is on call.")));
        assert!(t.calls.is_empty());
        assert_eq!(t.withheld.len(), 1);
        assert_eq!((t.withheld[0].function.as_str(), t.withheld[0].reason.as_str()), ("notify_user", "not asked for"));
        // Asked again with the call nudge (no call had run), which is not kept.
        let nudge = AgentSettings::from(&crate::agent::ExecuteSettings::default()).call_nudge;
        assert_eq!(seen[1].last(), Some(&ChatMessage::System(nudge)));
        assert_eq!(messages.len(), 2, "the request and the answer: {messages:?}");
    }

    #[tokio::test]
    async fn a_model_asking_again_only_for_withheld_calls_fails_the_run() {
        let (t, seen, _) = guarded(vec![call_of("notify_user"), call_of("notify_user")]).await;
        assert_eq!((t.status, t.reason.as_deref()), (RunStatus::Failed, Some(WITHHELD_ONLY)));
        assert_eq!((t.withheld.len(), seen.len(), t.calls.len()), (2, 2, 0));
    }

    #[tokio::test]
    async fn words_that_come_with_a_withheld_call_are_no_answer() {
        let mut announced = call_of("notify_user");
        announced.content = Some("I'll message the on-call engineer now.".into());
        let (t, seen, _) = guarded(vec![announced, said("Ada is on call.")]).await;
        assert_eq!((t.status, t.answer.as_deref()), (RunStatus::Answered, Some("Ada is on call.")));
        assert_eq!((t.withheld.len(), seen.len()), (1, 2));
    }

    #[tokio::test]
    async fn only_the_withheld_calls_of_a_group_are_left_out() {
        let mut both = call_of("get_oncall");
        both.tool_calls.push(ToolCall { id: "d".into(), name: "notify_user".into(), arguments: json!({}) });
        let (t, seen, messages) = guarded(vec![both, said("Ada is on call.")]).await;
        // The lookup goes on (to the unknown-tool note: this executor has no servers).
        assert_eq!(t.calls.iter().map(|c| c.function.as_str()).collect::<Vec<_>>(), ["get_oncall"]);
        assert_eq!((t.withheld.len(), t.groups, seen.len()), (1, 1, 2));
        let ChatMessage::Assistant { tool_calls, .. } = &messages[1] else { panic!("{messages:?}") };
        assert_eq!(tool_calls.len(), 1, "the conversation holds the call that ran only");
        assert_eq!(t.answer.as_deref(), Some("Ada is on call."));
    }

    #[test]
    fn a_reply_of_markup_alone_is_wordless() {
        for text in ["", " \n", "<tools></tools>", "<tool_call>\n</tool_call>", "```json\n```"] {
            assert!(wordless(text), "{text:?}");
        }
        for text in ["No tool fits.", "<tools>none</tools>", "a < b > c"] {
            assert!(!wordless(text), "{text:?}");
        }
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
        // Qwen2.5's `<tools>` tag and doubled braces around a call, as the 1.5B writes it.
        let echoed = "<tools>\n{{\"name\": \"get_oncall\", \"arguments\": {\"team\": \"db\"}}}\n</tools>";
        let calls = text_tool_calls(echoed, 1, known);
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!((calls[0].name.as_str(), &calls[0].arguments), ("get_oncall", &json!({"team": "db"})));
        // A call keyed `tool`, as the sandbox's results are (the demo's 1.5B, 2026-12-06), is a
        // call when it names a listed function and has nothing but its arguments; a result
        // (more keys), an unlisted name or arguments that are no object are not.
        // OpenAI's tool-call shape as text is a call; a tool's definition in it is not.
        let wrapped = "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_oncall\", \"arguments\": {\"team\": \"db\"}}}\n</tools>";
        let calls = text_tool_calls(wrapped, 0, known);
        assert_eq!((calls[0].name.as_str(), &calls[0].arguments), ("get_oncall", &json!({"team": "db"})));
        let definition = "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_oncall\", \"description\": \"Who is on call\", \"parameters\": {\"type\": \"object\"}}}\n</tools>";
        assert!(text_tool_calls(definition, 0, known).is_empty());
        let more =
            "{\"type\": \"function\", \"function\": {\"name\": \"get_oncall\", \"arguments\": {}}, \"result\": 1}";
        assert!(text_tool_calls(more, 0, known).is_empty(), "a wrapper with other keys is no call");
        let other = "{\"type\": \"code\", \"function\": {\"name\": \"get_oncall\", \"arguments\": {}}}";
        assert!(text_tool_calls(other, 0, known).is_empty(), "a wrapper of another type is no call");
        let tool_keyed =
            "<tool_response>\n{\"tool\":\"notify_user\",\"arguments\":{\"email\":\"E_1\"}}\n</tool_response>";
        let calls = text_tool_calls(tool_keyed, 1, known);
        assert_eq!((calls[0].name.as_str(), &calls[0].arguments), ("notify_user", &json!({"email": "E_1"})));
        for text in [
            "{\"tool\": \"notify_user\", \"arguments\": {}, \"result_id\": \"r-1\", \"items\": []}",
            "{\"tool\": \"rm_rf\", \"arguments\": {}}",
            "{\"tool\": \"notify_user\", \"arguments\": \"now\"}",
        ] {
            assert!(text_tool_calls(text, 0, known).is_empty(), "{text}");
        }
    }

    #[test]
    fn a_call_cut_while_the_model_makes_up_its_result_is_taken_up_to_its_arguments() {
        let known = |n: &str| ["yfinance-mcp__price_history", "slack-mcp__send_message"].contains(&n);
        // The demo's 1.5B agent on L4-1 (eval, 2026-12-06): the call, then a made-up result in
        // the same object until its 160 tokens ran out.
        let cut = "{\"name\": \"yfinance-mcp__price_history\", \"arguments\": {\"ticker\": \"Apple\", \"auto_adjust\": true}, \"result_id\": \"r-98\", \"items\":[{\"id\":\"be4cba2f\",\"name\":\"tundra";
        let calls = text_tool_calls(cut, 1, known);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].id.as_str(), calls[0].name.as_str()), ("text_call_1_0", "yfinance-mcp__price_history"));
        assert_eq!(calls[0].arguments, json!({"ticker": "Apple", "auto_adjust": true}));
        // Arguments first, name second, fenced; and in an unclosed Qwen tag.
        let fenced = "```json\n{\"arguments\": {\"channel\": \"#news\"}, \"name\": \"slack-mcp__send_message\", \"summary\": \"sent";
        assert_eq!(text_tool_calls(fenced, 0, known)[0].arguments, json!({"channel": "#news"}));
        let tagged =
            "<tool_call>\n{\"name\": \"slack-mcp__send_message\", \"arguments\": {\"text\": \"hi\"}, \"ok\": tr";
        assert_eq!(text_tool_calls(tagged, 0, known)[0].name, "slack-mcp__send_message");
        // After a line of prose, in a fence; CRLF line ends and non-ASCII text.
        let preamble = "Here is the call:\r\n```json\r\n{\"name\": \"slack-mcp__send_message\",\r\n \"arguments\": {\"text\": \"Prix en €\"}, \"résultat\": [";
        assert_eq!(text_tool_calls(preamble, 0, known)[0].arguments, json!({"text": "Prix en €"}));
        // Complete calls, one or several, read as before.
        let list = "[{\"name\": \"slack-mcp__send_message\", \"arguments\": {}}, {\"name\": \"yfinance-mcp__price_history\", \"arguments\": {\"ticker\": \"AAPL\"}}]";
        assert_eq!(text_tool_calls(list, 0, known).len(), 2);
        // Cut inside the arguments, before the name, after prose, in a number the text ends
        // with, or no call's shape: an answer.
        for text in [
            "{\"name\": \"slack-mcp__send_message\", \"arguments\": 12",
            "{\"name\": \"slack-mcp__send_message\", \"arguments\": {\"text\": \"hi",
            "{\"arguments\": {\"text\": \"hi\"}, \"na",
            "I will call {\"name\": \"slack-mcp__send_message\", \"arguments\": {}, \"x\": [",
            "{\"name\": \"Ada\", \"team\": \"db\", \"notes\": [",
            "{\"name\": 3, \"arguments\": {}, \"x\": [",
        ] {
            assert!(text_tool_calls(text, 0, known).is_empty(), "{text}");
        }
    }

    #[test]
    fn a_turn_stopped_at_its_second_text_call_reads_as_the_whole_turn() {
        use crate::llm::TEXT_CALL_STOPS;
        let known = |n: &str| ["get_oncall", "notify_user"].contains(&n);
        let one = "{\"name\": \"get_oncall\", \"arguments\": {\"team\": \"db\"}}";
        // The demo's 0.5B agent: the same call line after line; the 1.5B: one call a line.
        for text in [
            format!("{one}\n{one}\n{one}"),
            format!("{one}\n\n{one}"),
            format!("{one}\n{{\"name\": \"notify_user\", \"arguments\": {{}}}}"),
            format!("```json\n{one}\n{one}\n```"),
            // After a line of prose the reader takes the first whole object.
            format!("Let me check.\n{one}\n{one}"),
            // Keyed `tool`, as the sandbox's results are.
            format!("{}\n{one}", one.replace("\"name\"", "\"tool\"")),
        ] {
            let (at, stop) = TEXT_CALL_STOPS
                .iter()
                .filter_map(|s| text.find(s).map(|i| (i, s)))
                .min()
                .unwrap_or_else(|| panic!("no stop in {text:?}"));
            // The server leaves the stop out of what it sends back; the client closes what
            // the stop took.
            let sent = crate::llm::closed_at_stop(&text[..at]);
            assert_eq!(sent, format!("{}}}}}", &text[..at]), "{stop:?} in {text:?}");
            let (whole, cut) = (text_tool_calls(&text, 0, known), text_tool_calls(&sent, 0, known));
            assert_eq!(whole.len(), 1, "{text:?}");
            assert_eq!((cut[0].name.as_str(), &cut[0].arguments), (whole[0].name.as_str(), &whole[0].arguments));
        }
        // Qwen's own call format and a list of calls never meet a stop: every call is read.
        let tagged = format!("<tool_call>\n{one}\n</tool_call>\n<tool_call>\n{one}\n</tool_call>");
        let list = format!("[{one},\n{one}]");
        for text in [tagged, list] {
            assert!(TEXT_CALL_STOPS.iter().all(|s| !text.contains(s)), "{text:?}");
            assert_eq!(text_tool_calls(&text, 0, known).len(), 2);
        }
        // An answer listing what it found as JSON lines keeps its lines.
        let found = "{\"name\": \"Ada\", \"team\": \"db\"}\n{\"name\": \"Bo\", \"team\": \"web\"}";
        assert!(TEXT_CALL_STOPS.iter().all(|s| !found.contains(s)));
        // A made-up result in the call's own object meets no stop (a stop cannot tell the end
        // of the arguments from a nested object in them); the loop reads the call up to it.
        let made_up = format!("{}, \"result_id\": \"r-1\", \"items\": [{{\"id\": \"a\"", &one[..one.len() - 1]);
        assert!(TEXT_CALL_STOPS.iter().all(|s| !made_up.contains(s)));
        assert_eq!(text_tool_calls(&made_up, 0, known)[0].arguments, json!({"team": "db"}));
        // Only a call that opens a line and ends inside its own two objects is closed; the end
        // of a sequence (also `stop`) leaves prose, a whole call and deeper cuts as they came.
        for text in [
            "Done.",
            "A set {a, {b",
            "{\"a\": \"}}{{\"}",
            "{\"a\": {\"b\": 1",
            "I will call {\"name\": \"x\", \"arguments\": {\"a\": 1",
            "{\"name\": \"x\", \"arguments\": {\"a\": 1}}",
            "{\"name\": \"x\", \"arguments\": {\"a\": {\"b\": 1",
            "{\"name\": \"x\", \"arguments\": {\"a\": \"open",
        ] {
            assert_eq!(crate::llm::closed_at_stop(text), text);
        }
        // Prose before the call's line counts for nothing, stray quotes and braces included.
        let after = "A 27\" screen } or two {\n{\"name\": \"get_oncall\", \"arguments\": {\"team\": \"db\"";
        let closed = crate::llm::closed_at_stop(after);
        assert_eq!(closed, format!("{after}}}}}"));
        assert_eq!(text_tool_calls(&closed, 0, known)[0].arguments, json!({"team": "db"}));
    }
}
