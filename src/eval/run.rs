//! One run: one agent on one released sample, one repeat, as one `llm::batch` item.
//!
//! The agent gets an in-process `benchgen sandbox` serving the sample's tool space in
//! recorded-responses mode: a call whose tool and canonical arguments match a recording of
//! the sample's cassette gets the recorded result; any other valid call gets a value shaped
//! by the tool's schema (seeded by `[project] seed`, the tool and the arguments); so does a
//! call of a `standard` space's distractor tool, which the cassette has no recording of.
//! Each call of the run says which it got ([`Answer`]). In the `full` space the agent talks
//! to the tool search in front of the sandbox ([`super::search`]): each `call_tool` call is
//! recorded as a call of the tool it names, with the arguments it passes on, so predictions
//! and scores see the real tool; each `search_tools` call is recorded as a search of its
//! turn, not a call. Turn `t` of a multi-turn sample starts from the gold conversation of
//! turns `0..t` (user messages, the reference trajectory's calls and results, the gold
//! replies), as FinMCP's protocol scores it.
//!
//! Wire format of `runs.jsonl` (one [`RunRecord`] per line, tool spaces in config order,
//! then agents in config order, then repeat, then sample id): `{tool_space, agent, repeat,
//! id, tools, searches?, turns: [{status, reason?, answer?, calls: [{tool, offered, group,
//! arguments, answer, result?}], searches?: [{group, arguments, found?, error?}],
//! exchanges}]}` (`searches` only in the `full` space).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::search::{self, CALL_TOOL, SEARCH_TOOLS, SearchServer, ToolSearch};
use super::source::Release;
use super::{EvalSettings, STAGE, ToolSpace};
use crate::agent::{AgentSettings, CallRecord, ExecuteSettings, Executor, Query, Recorder, RunStatus, Trajectory};
use crate::ledger::{NewEvent, Parent};
use crate::llm::batch::{Batch, BatchOptions, Item, ItemError};
use crate::llm::{ChatMessage, ToolCall};
use crate::mcp::config::ToolIds;
use crate::mcp::{CallOutcome, ClientOptions, McpClient};
use crate::model::{RecordedCall, Sample};
use crate::release::cassettes::Cassette;
use crate::settings::Settings;
use crate::stage::{Ctx, Output};

/// What one call of a run got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The sample's cassette holds this call (tool and arguments): the recorded result.
    Recorded,
    /// No recording matches: a value shaped by the tool's schema.
    Generated,
    /// The sandbox refused it (arguments that do not validate): a tool error.
    ToolError,
    /// The call failed in transport.
    Failed,
    /// The model named a function the agent was not given.
    UnknownTool,
    /// Not sent: the arguments were not a JSON object.
    NotExecuted,
    /// Not sent: past `max_calls` (left out of the predictions).
    OverCap,
}

/// One call of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalCall {
    /// Tool id, or the function name the model used when it names no offered tool.
    pub tool: String,
    /// The tool was in the agent's tool space.
    pub offered: bool,
    /// Parallel group within the turn (0-based).
    pub group: usize,
    pub arguments: Value,
    pub answer: Answer,
    /// What the agent was told (result or error text), when something was sent back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// One turn of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRun {
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    pub calls: Vec<EvalCall>,
    /// The turn's `search_tools` calls (`full` space), which are not calls of a tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<SearchRun>,
    /// Request hashes of the turn's LLM exchanges.
    pub exchanges: Vec<String>,
}

/// One `search_tools` call of a turn (`full` space).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchRun {
    /// Parallel group within the turn (0-based), counted with the calls' groups.
    pub group: usize,
    /// `{query, limit?}` as the agent sent them.
    pub arguments: Value,
    /// The function names it returned, best first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<Vec<String>>,
    /// What the agent was told instead (arguments refused, past the cap, a failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One run (the checkpointed value of its batch item).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The tool space it ran in.
    pub tool_space: ToolSpace,
    pub agent: String,
    pub repeat: usize,
    pub id: String,
    /// Tools in the agent's tool space (in the `full` space: behind its tool search).
    pub tools: usize,
    /// Its `search_tools` calls, over every turn (`full` space; absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub searches: usize,
    pub turns: Vec<TurnRun>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl RunRecord {
    /// The calls that count as the agent's answer (everything it asked for within the cap).
    pub fn predicted(turn: &TurnRun) -> impl Iterator<Item = &EvalCall> {
        turn.calls.iter().filter(|c| c.answer != Answer::OverCap)
    }
}

/// The item key (and ledger subject) of a run: `<tool space>/<agent>/r<k>/<sample id>`, so
/// the runs of one agent in two spaces are two items (checkpointed and resumed apart).
pub fn key(space: ToolSpace, agent: &str, repeat: usize, id: &str) -> String {
    format!("{}/{agent}/r{repeat}/{id}", space.as_str())
}

/// Whether the run [`key`] `k` is one of `agent`'s (neither a space nor a role has a `/`).
fn of_agent(k: &str, agent: &str) -> bool {
    k.split('/').nth(1) == Some(agent)
}

/// The sampling seed the requests of repeat `repeat` (from 1) carry for an agent whose role
/// has `role_seed`: repeat 1 the role's own, repeat `r` > 1 `role seed + r − 1` (0 for a role
/// without one), so each repeat is a request of its own. `check` compares these between
/// agents, so that two agents never share a repeat's answers.
pub fn repeat_seed(role_seed: Option<u64>, repeat: usize) -> Option<u64> {
    match repeat {
        0 | 1 => role_seed,
        r => Some(role_seed.unwrap_or(0).wrapping_add(r as u64 - 1)),
    }
}

/// Every finished run, by key.
pub struct Runs {
    pub records: BTreeMap<String, RunRecord>,
    /// Keys in output order (tool spaces and agents in config order, repeats, sample ids).
    order: Vec<String>,
}

impl Runs {
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The runs of one agent and repeat in one tool space, by sample id (failed runs are
    /// absent).
    pub fn of(&self, space: ToolSpace, agent: &str, repeat: usize) -> BTreeMap<&str, &RunRecord> {
        self.records
            .values()
            .filter(|r| r.tool_space == space && r.agent == agent && r.repeat == repeat)
            .map(|r| (r.id.as_str(), r))
            .collect()
    }

    /// `runs.jsonl`.
    pub fn write_into(&self, out: &mut Output) -> Result<()> {
        use std::io::Write;
        let mut f = out.create("runs.jsonl")?;
        for k in &self.order {
            if let Some(r) = self.records.get(k) {
                serde_json::to_writer(&mut f, r)?;
                f.write_all(b"\n")?;
            }
        }
        f.finish()
    }
}

/// The agent loop's settings for one agent: `[execute]`'s prompts (the system prompt ending
/// with [`crate::agent::NO_TOOL_FITS`]) and limits, the agent's role, and `[eval] max_calls`
/// when set.
pub fn agent_settings(s: &Settings, cfg: &EvalSettings, role: &str) -> AgentSettings {
    let mut a = AgentSettings::from(&s.section::<ExecuteSettings>().0);
    a.system_prompt = format!("{} {}", a.system_prompt, crate::agent::NO_TOOL_FITS);
    a.role = role.to_string();
    if let Some(m) = cfg.max_calls {
        a.max_calls = m;
    }
    a.concurrency = 1;
    a
}

/// What every run shares.
struct Env<'a> {
    s: &'a Settings,
    cfg: &'a EvalSettings,
    rel: &'a Release,
    run_id: i64,
    client: ClientOptions,
}

/// One work item.
struct Job {
    space: ToolSpace,
    agent: usize,
    repeat: usize,
    sample: usize,
}

/// Run every agent on every sample `repeats` times in every tool space; returns the runs and
/// how many failed (within `max_failed_share`, recorded in `failed.json`).
pub fn run_panel(ctx: &Ctx, cfg: &EvalSettings, rel: &Release, out: &mut Output) -> Result<(Runs, usize)> {
    let s = ctx.settings;
    let opts = BatchOptions::new(STAGE, "eval", "runs")
        .concurrency(cfg.concurrency)
        .max_failed_share(cfg.max_failed_share, "eval.max_failed_share")
        .fail_point("eval_run");
    let mut batch = Batch::new(ctx, opts)?;
    let env = Env {
        s,
        cfg,
        rel,
        run_id: ctx.ledger_run()?,
        client: ClientOptions::from_settings(s, s.section::<crate::mcp::McpSettings>()),
    };
    let mut items = Vec::new();
    for space in cfg.spaces() {
        for (a, agent) in cfg.agents.iter().enumerate() {
            for repeat in 1..=cfg.repeats {
                for (i, sample) in rel.samples.iter().enumerate() {
                    items.push((key(space, agent, repeat, &sample.id), Job { space, agent: a, repeat, sample: i }));
                }
            }
        }
    }
    let order: Vec<String> = items.iter().map(|(k, _)| k.clone()).collect();
    let env = &env;
    let done = batch.run(items, |job: Job, llm: Item| async move { run_one(env, job, &llm).await })?;
    for (k, r) in &done.values {
        let calls: usize = r.turns.iter().map(|t| t.calls.len()).sum();
        let statuses: Vec<&str> = r.turns.iter().map(|t| t.status.as_str()).collect();
        let mut ev = NewEvent::new(
            "eval.run",
            Some(k),
            json!({"tool_space": r.tool_space, "agent": r.agent, "repeat": r.repeat, "sample": r.id, "calls": calls,
                   "searches": r.searches, "statuses": statuses}),
        );
        for x in r.turns.iter().flat_map(|t| &t.exchanges) {
            if let Some(id) = batch.exchange_event(x)? {
                ev = ev.with_parent(Parent::Id(id));
            }
        }
        out.event(ev);
    }
    let failed = done.failed.len();
    batch.finish(out)?;
    Ok((Runs { records: done.values, order }, failed))
}

/// The gold conversation before turn `t` and its user message: the system prompt, then per
/// earlier turn the user message, the reference trajectory's calls (one assistant message
/// per group) with their results, and the gold reply. In the `full` space (`search`) each
/// gold call is a `call_tool` call, as the agent would have made it with the tools it has.
fn gold_history(exec: &Executor, sample: &Sample, t: usize, search: Option<&ToolSearch>) -> Vec<ChatMessage> {
    let mut m = vec![ChatMessage::System(exec.system_prompt().to_string())];
    for (i, turn) in sample.turns[..t].iter().enumerate() {
        m.push(ChatMessage::User(turn.user.clone()));
        let groups: Vec<Vec<RecordedCall>> = if turn.trajectory.is_empty() {
            let mut by_group: BTreeMap<u32, Vec<RecordedCall>> = BTreeMap::new();
            for c in &turn.reference_plan {
                let tool = c.alternatives.first().cloned().unwrap_or_default();
                by_group.entry(c.group).or_default().push(RecordedCall {
                    tool,
                    arguments: json!({}),
                    result: None,
                    error: None,
                    left_out: None,
                });
            }
            by_group.into_values().collect()
        } else {
            turn.gold_trajectory()
        };
        for (g, calls) in groups.iter().enumerate() {
            let ids: Vec<String> = (0..calls.len()).map(|k| format!("gold_{i}_{g}_{k}")).collect();
            let tool_calls = calls
                .iter()
                .zip(&ids)
                .map(|(c, id)| match search {
                    Some(index) => ToolCall {
                        id: id.clone(),
                        name: CALL_TOOL.to_string(),
                        arguments: index.wrap(&c.tool, &c.arguments),
                    },
                    None => ToolCall {
                        id: id.clone(),
                        name: exec.names().name(&c.tool).unwrap_or(&c.tool).to_string(),
                        arguments: c.arguments.clone(),
                    },
                })
                .collect();
            m.push(ChatMessage::Assistant { content: None, tool_calls });
            for (c, id) in calls.iter().zip(ids) {
                let content = c.result.clone().or_else(|| c.error.clone()).unwrap_or_default();
                m.push(ChatMessage::Tool { call_id: id, content });
            }
        }
        m.push(ChatMessage::Assistant {
            content: Some(turn.gold_reply.clone().unwrap_or_default()),
            tool_calls: vec![],
        });
    }
    m.push(ChatMessage::User(sample.turns[t].user.clone()));
    m
}

/// A turn's trajectory as the run records it. In the `full` space (`search`) a `call_tool`
/// call is recorded as a call of the tool it names and a `search_tools` call as a search.
fn turn_run(t: Trajectory, cassette: Option<&Cassette>, search: Option<&ToolSearch>) -> TurnRun {
    let capped = (t.status == RunStatus::CapReached).then(|| t.groups.saturating_sub(1));
    let mut calls = Vec::with_capacity(t.calls.len());
    let mut searches = Vec::new();
    for c in t.calls {
        let over_cap = capped == Some(c.group) && !c.executed;
        // Owned, so the match below does not hold a borrow of the call it moves.
        let meta = c.tool_id.clone().filter(|_| search.is_some());
        match (search, meta.as_deref()) {
            (Some(index), Some(SEARCH_TOOLS)) => searches.push(search_run(index, &c)),
            (Some(index), Some(CALL_TOOL)) => calls.push(unwrapped_call(c, over_cap, cassette, index)),
            _ => calls.push(direct_call(c, over_cap, cassette)),
        }
    }
    TurnRun { status: t.status, reason: t.reason, answer: t.answer, calls, searches, exchanges: t.exchanges }
}

/// A call the sandbox answered: from the sample's recording of it, or generated.
fn got(cassette: Option<&Cassette>, id: &str, arguments: &Value) -> Answer {
    match cassette.and_then(|k| k.get(id, arguments)) {
        Some(_) => Answer::Recorded,
        None => Answer::Generated,
    }
}

/// What the agent was told of a call.
fn told(outcome: &CallOutcome) -> Option<String> {
    Some(match outcome {
        CallOutcome::Ok { output } | CallOutcome::ToolError { output } => output.text.clone(),
        CallOutcome::Failed { failure } => format!("call failed: {failure}"),
    })
}

/// A call of a function the agent was offered (or of one it was not).
fn direct_call(c: CallRecord, over_cap: bool, cassette: Option<&Cassette>) -> EvalCall {
    let answer = match (&c.outcome, c.executed, &c.tool_id) {
        _ if over_cap => Answer::OverCap,
        (_, false, None) => Answer::UnknownTool,
        (_, false, Some(_)) => Answer::NotExecuted,
        (CallOutcome::Ok { .. }, true, Some(id)) => got(cassette, id, &c.arguments),
        (CallOutcome::Ok { .. }, true, None) => Answer::Generated,
        (CallOutcome::ToolError { .. }, true, _) => Answer::ToolError,
        (CallOutcome::Failed { .. }, true, _) => Answer::Failed,
    };
    EvalCall {
        offered: c.tool_id.is_some(),
        result: told(&c.outcome),
        tool: c.tool_id.unwrap_or(c.function),
        group: c.group,
        arguments: c.arguments,
        answer,
    }
}

/// A `call_tool` call as a call of the tool it names (offered: the search has it), with the
/// arguments it passes on, judged as the search server judged it: no name or arguments that
/// are not an object were not executed, a name the search does not know is an unknown tool.
fn unwrapped_call(c: CallRecord, over_cap: bool, cassette: Option<&Cassette>, index: &ToolSearch) -> EvalCall {
    let name = search::called_name(&c.arguments).map(str::to_string);
    let id = name.as_deref().and_then(|n| index.resolve(n)).map(str::to_string);
    let arguments = if c.arguments.is_object() { search::called_arguments(&c.arguments) } else { c.arguments.clone() };
    let answer = match (&c.outcome, &id) {
        _ if over_cap => Answer::OverCap,
        _ if !c.executed || name.is_none() => Answer::NotExecuted,
        (_, None) => Answer::UnknownTool,
        _ if !arguments.is_object() => Answer::NotExecuted,
        (CallOutcome::Ok { .. }, Some(id)) => got(cassette, id, &arguments),
        (CallOutcome::ToolError { .. }, Some(_)) => Answer::ToolError,
        (CallOutcome::Failed { .. }, Some(_)) => Answer::Failed,
    };
    EvalCall {
        offered: id.is_some(),
        result: told(&c.outcome),
        tool: id.or(name).unwrap_or(c.function),
        group: c.group,
        arguments,
        answer,
    }
}

/// A `search_tools` call: what it asked and the tools it found (recomputed, as the search
/// is deterministic), or what the agent was told instead.
fn search_run(index: &ToolSearch, c: &CallRecord) -> SearchRun {
    let (found, error) = match &c.outcome {
        CallOutcome::Ok { .. } if c.executed => (index.found(&c.arguments), None),
        CallOutcome::Ok { output } | CallOutcome::ToolError { output } => (None, Some(output.text.clone())),
        CallOutcome::Failed { failure } => (None, Some(format!("call failed: {failure}"))),
    };
    SearchRun { group: c.group, arguments: c.arguments.clone(), found, error }
}

/// An in-process sandbox over `catalog` answering from `cassette`, and a client on it; in
/// the `full` space (`search`) the client talks to the tool search in front of the sandbox.
fn sandbox_client(
    env: &Env,
    catalog: &crate::model::Catalog,
    cassette: Option<&Cassette>,
    search: Option<Arc<ToolSearch>>,
) -> Result<Arc<McpClient>> {
    let mut recorded = crate::sandbox::Recorded::default();
    for c in cassette.iter().flat_map(|c| &c.calls) {
        recorded.insert(&c.tool, &c.arguments, &c.result);
    }
    let opts = crate::sandbox::SandboxOptions {
        seed: env.s.project.seed,
        recorded: Some(Arc::new(recorded)),
        ..Default::default()
    };
    let sandbox = crate::sandbox::Sandbox::new(catalog, opts)?;
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let (sr, sw) = tokio::io::split(server_end);
    match search {
        None => {
            tokio::spawn(async move {
                if let Err(e) = crate::sandbox::serve_io(&sandbox, sr, sw).await {
                    tracing::debug!("an eval sandbox stopped: {e:#}");
                }
            });
        }
        Some(index) => {
            let server = SearchServer::new(index, sandbox);
            tokio::spawn(async move {
                if let Err(e) = crate::sandbox::serve_handler_io(server, sr, sw).await {
                    tracing::debug!("an eval tool search stopped: {e:#}");
                }
            });
        }
    }
    let (cr, cw) = tokio::io::split(client_end);
    Ok(Arc::new(McpClient::from_io("eval", ToolIds::AsIs, env.client.clone(), cr, cw)))
}

/// The model of one run: repeat 1 asks with the role's settings; repeat `r` > 1 with the
/// sampling seed `role seed + r − 1`, so each repeat is a request of its own (the ledger
/// cache would otherwise answer it with the first repeat's reply); every turn with
/// `[eval] max_tokens` where set.
struct Seeded<'a> {
    item: &'a Item,
    turn: crate::llm::TurnParams,
}

impl crate::agent::Chat for Seeded<'_> {
    async fn chat(
        &self,
        role: &str,
        messages: &[ChatMessage],
        tools: &[crate::llm::ToolSpec],
        _subject: &str,
    ) -> Result<crate::llm::Reply<crate::llm::ChatTurn>, crate::llm::LlmError> {
        self.item.chat_seeded(role, messages, tools, self.turn).await
    }
}

async fn run_one(env: &Env<'_>, job: Job, item: &Item) -> Result<RunRecord, ItemError> {
    let sample = &env.rel.samples[job.sample];
    let agent = &env.cfg.agents[job.agent];
    let role_seed = env.s.section::<crate::llm::LlmSettings>().roles.get(agent).and_then(|r| r.seed);
    // Repeat 1 asks with the role's settings as they are (no seed of its own in the body).
    let seed = (job.repeat > 1).then(|| repeat_seed(role_seed, job.repeat)).flatten();
    let llm = &Seeded { item, turn: crate::llm::TurnParams { seed, max_tokens: env.cfg.max_tokens } };
    let space = env.rel.tool_space(job.space, env.cfg.distractors(), env.s.project.seed, sample);
    let cassette = env.rel.cassettes.get(&sample.id);
    // The `full` space's search over the track: its server answers the agent, and the run
    // record reads the agent's calls of it back.
    let search = (job.space == ToolSpace::Full)
        .then(|| Arc::new(ToolSearch::new(env.rel, &space, env.s.project.seed, &sample.id)));
    let client = sandbox_client(env, &env.rel.catalog(&space), cassette, search.clone())?;
    let recorder = Recorder::open(&env.s.artifacts, env.run_id, STAGE)?;
    // A cap below the reference's own calls would make the item unsolvable by construction
    // (a cap of 3 against a 4-step L4): each turn may make at least the calls the sample's
    // largest turn makes (twice as many in the `full` space: a search before each).
    let mut settings = agent_settings(env.s, env.cfg, agent);
    let needed = sample.turns.iter().map(|t| t.reference_plan.len()).max().unwrap_or(0);
    let needed = if job.space == ToolSpace::Full { 2 * needed } else { needed };
    settings.max_calls = settings.max_calls.max(needed);
    let exec = Executor::connect(vec![client], settings, Some(recorder)).await?;
    let mut turns = Vec::with_capacity(sample.turns.len());
    for t in 0..sample.turns.len() {
        let mut messages = gold_history(&exec, sample, t, search.as_deref());
        let q = Query { id: item.key().to_string(), query: sample.turns[t].user.clone(), chain: Vec::new() };
        let mut traj = Trajectory::start(&q);
        exec.run_loop(llm, item.key(), &mut messages, &mut traj).await;
        if traj.status == RunStatus::Failed
            && let Some(why) = traj.reason.as_deref().filter(|r| r.starts_with("LLM:"))
        {
            exec.shutdown().await;
            return Err(ItemError::Failed(format!("turn {}: {why}", t + 1)));
        }
        turns.push(turn_run(traj, cassette, search.as_deref()));
    }
    exec.shutdown().await;
    let searches = turns.iter().map(|t| t.searches.len()).sum();
    Ok(RunRecord {
        tool_space: job.space,
        agent: agent.clone(),
        repeat: job.repeat,
        id: sample.id.clone(),
        tools: space.len(),
        searches,
        turns,
    })
}

/// Tokens and model latency of each run, from the ledger: each exchange's usage and the
/// latency of its first (live) recording, so a resumed run counts what the first asking
/// cost. Latency stays out of the artifacts (it differs between runs); it is printed.
#[derive(Debug, Default)]
pub struct Usage {
    /// Run key → (prompt tokens, completion tokens, model latency ms).
    pub per_run: BTreeMap<String, (u64, u64, f64)>,
    /// Run key → its model turns that stopped at the completion-token limit (absent: none).
    pub cut: BTreeMap<String, usize>,
}

impl Usage {
    /// One line per agent: mean model latency per run (over every tool space).
    pub fn latency_notes(&self, agents: &[String]) -> Vec<String> {
        agents
            .iter()
            .map(|a| {
                let v: Vec<f64> = self.per_run.iter().filter(|(k, _)| of_agent(k, a)).map(|(_, u)| u.2).collect();
                let mean = if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
                format!("{a}: mean model latency {:.0} ms per run ({} runs)", mean, v.len())
            })
            .collect()
    }

    /// One line per agent with model turns cut at the completion-token limit (`limit`: `[eval]
    /// max_tokens`, else each role's own): a call or an answer written past it is lost, and
    /// an item's all-fail evidence may come from such runs, so a person reading the flags
    /// should know.
    pub fn cut_notes(&self, agents: &[String], limit: Option<u32>) -> Vec<String> {
        let limit = limit
            .map_or("its role's `max_tokens`, else the server's".to_string(), |m| format!("`[eval] max_tokens` = {m}"));
        agents
            .iter()
            .filter_map(|a| {
                let cut: Vec<usize> = self.cut.iter().filter(|(k, _)| of_agent(k, a)).map(|(_, n)| *n).collect();
                let turns: usize = cut.iter().sum();
                (turns > 0).then(|| {
                    format!(
                        "{a}: {turns} model turn(s) in {} run(s) stopped at the completion-token limit ({limit}); \
                         what the model wrote past it is not in the run",
                        cut.len()
                    )
                })
            })
            .collect()
    }

    pub fn tokens(&self, key: &str) -> (u64, u64) {
        self.per_run.get(key).map(|u| (u.0, u.1)).unwrap_or_default()
    }
}

pub fn usage(artifacts: &std::path::Path, runs: &Runs) -> Result<Usage> {
    let ledger = crate::ledger::Ledger::open(artifacts)?;
    let mut seen: BTreeMap<String, crate::ledger::ExchangeUsage> = BTreeMap::new();
    let mut out = Usage::default();
    for (k, r) in &runs.records {
        let mut acc = (0u64, 0u64, 0f64);
        let mut cut = 0usize;
        for x in r.turns.iter().flat_map(|t| &t.exchanges) {
            // Two agents may send the same body (roles that differ only in their endpoint):
            // each exchange is the agent's own.
            let seen_key = format!("{}\n{x}", r.agent);
            let u = match seen.get(&seen_key) {
                Some(u) => *u,
                None => {
                    let u = ledger.exchange_usage(x, &r.agent)?;
                    seen.insert(seen_key, u);
                    u
                }
            };
            acc = (acc.0 + u.prompt_tokens, acc.1 + u.completion_tokens, acc.2 + u.latency_ms);
            cut += usize::from(u.cut);
        }
        out.per_run.insert(k.clone(), acc);
        if cut > 0 {
            out.cut.insert(k.clone(), cut);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::eval::source::ReleasedTool;
    use crate::mcp::ToolOutput;
    use crate::release::cassettes::Recording;

    /// Two registry tools and one sample that asks for the weather.
    fn release() -> Release {
        let tool = |id: &str, description: &str| {
            let (server, name) = id.split_once("::").unwrap();
            let tool = crate::model::Tool {
                id: id.to_string(),
                name: name.to_string(),
                description: description.to_string(),
                input_schema: json!({"type": "object"}),
                output_schema: None,
            };
            (id.to_string(), ReleasedTool { server: server.to_string(), tool, catalog: "filter".to_string() })
        };
        let plan = json!([{"alternatives": ["Meteo::forecast"], "group": 0}]);
        let sample: Sample = serde_json::from_value(json!({
            "id": "L1-1", "family": "etom", "kind": "L1", "difficulty": "easy",
            "turns": [{"user": "Weather in Paris?", "reference_plan": plan}]
        }))
        .unwrap();
        Release {
            shown: "test".to_string(),
            samples: vec![sample],
            tools: [tool("Meteo::forecast", "Weather forecast for a city"), tool("Stocks::get_quote", "Stock quote")]
                .into_iter()
                .collect(),
            cassettes: BTreeMap::new(),
            efs: HashMap::new(),
            benches: BTreeMap::new(),
            invented: BTreeMap::new(),
        }
    }

    /// An executed call of one of the two tools the `full` space offers, as the agent loop
    /// records it.
    fn call(index: usize, group: usize, function: &str, arguments: Value, outcome: CallOutcome) -> CallRecord {
        CallRecord {
            index,
            group,
            call_id: format!("call_{index}"),
            function: function.to_string(),
            tool_id: Some(function.to_string()),
            server: Some("eval".to_string()),
            arguments,
            executed: true,
            outcome,
            exchange: None,
            call_hash: String::new(),
        }
    }

    fn ok(text: &str) -> CallOutcome {
        CallOutcome::Ok { output: ToolOutput::note(text) }
    }

    fn refused(text: &str) -> CallOutcome {
        CallOutcome::ToolError { output: ToolOutput::note(text) }
    }

    fn run(turns: Vec<TurnRun>) -> RunRecord {
        let searches = turns.iter().map(|t| t.searches.len()).sum();
        RunRecord {
            tool_space: ToolSpace::Full,
            agent: "oracle".to_string(),
            repeat: 1,
            id: "L1-1".to_string(),
            tools: 2,
            searches,
            turns,
        }
    }

    #[test]
    fn call_tool_calls_are_predicted_as_calls_of_the_tool_they_name_and_searches_are_not_calls() {
        let rel = release();
        let ids: Vec<String> = rel.tools.keys().cloned().collect();
        let index = ToolSearch::new(&rel, &ids, 7, "L1-1");
        let paris = json!({"city": "Paris"});
        let recording =
            Recording { tool: "Meteo::forecast".to_string(), arguments: paris.clone(), result: "sunny".to_string() };
        let cassette = Cassette { id: "L1-1".to_string(), calls: vec![recording] };
        let q = Query { id: "oracle/r1/L1-1".to_string(), query: "Weather in Paris?".to_string(), chain: Vec::new() };
        let mut t = Trajectory::start(&q);
        t.calls = vec![
            call(0, 0, SEARCH_TOOLS, json!({"query": "weather"}), ok("{\"tools\": []}")),
            call(1, 1, CALL_TOOL, json!({"name": "Meteo__forecast", "arguments": paris}), ok("sunny")),
            call(2, 1, CALL_TOOL, json!({"name": "Stocks::get_quote", "arguments": {"symbol": "ACME"}}), ok("{}")),
            call(3, 2, CALL_TOOL, json!({"name": "Nope__x", "arguments": {}}), refused("unknown tool `Nope__x`")),
            call(4, 2, CALL_TOOL, json!({"arguments": {}}), refused("`arguments.name` is missing")),
            call(5, 3, SEARCH_TOOLS, json!({}), refused("invalid arguments for `search_tools`")),
        ];
        // Past the cap: recorded, not sent.
        let mut capped = call(6, 4, CALL_TOOL, json!({"name": "Meteo__forecast"}), refused("not executed: the cap"));
        capped.executed = false;
        t.calls.push(capped);
        t.groups = 5;
        t.status = RunStatus::CapReached;
        let turn = turn_run(t, Some(&cassette), Some(&index));
        let got: Vec<(&str, bool, usize, Answer)> =
            turn.calls.iter().map(|c| (c.tool.as_str(), c.offered, c.group, c.answer)).collect();
        assert_eq!(
            got,
            [
                ("Meteo::forecast", true, 1, Answer::Recorded),
                ("Stocks::get_quote", true, 1, Answer::Generated),
                ("Nope__x", false, 2, Answer::UnknownTool),
                ("call_tool", false, 2, Answer::NotExecuted),
                ("Meteo::forecast", true, 4, Answer::OverCap),
            ]
        );
        assert_eq!(turn.calls[0].arguments, paris, "the arguments it passed on");
        assert_eq!(turn.calls[4].arguments, json!({}), "no arguments: none");
        assert_eq!(turn.calls[0].result.as_deref(), Some("sunny"));
        // Searches: what each asked and found, or what the agent was told instead.
        assert_eq!(turn.searches.len(), 2);
        assert_eq!((turn.searches[0].group, &turn.searches[0].arguments), (0, &json!({"query": "weather"})));
        let found = vec!["Meteo__forecast".to_string(), "Stocks__get_quote".to_string()];
        assert_eq!(turn.searches[0].found, Some(found), "the nearest first");
        assert_eq!(turn.searches[1].found, None);
        assert!(turn.searches[1].error.as_deref().is_some_and(|e| e.contains("invalid arguments")));

        // The unified predictions name the tools within the cap, never the two meta-tools.
        let record = run(vec![turn]);
        assert_eq!(record.searches, 2);
        let records = BTreeMap::from([("L1-1", &record)]);
        let files = crate::eval::predict::Files::build(&rel, &records).unwrap();
        let line: Value = serde_json::from_slice(files.unified.split(|b| *b == b'\n').next().unwrap()).unwrap();
        let calls = line["turns"][0]["calls"].as_array().unwrap();
        let tools: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
        assert_eq!(tools, ["Meteo::forecast", "Stocks::get_quote", "Nope__x", "call_tool"]);
        assert_eq!(calls[0]["arguments"], json!({"city": "Paris"}));
        assert_eq!(calls[0]["group"], 1);
    }

    #[test]
    fn a_turn_of_searches_alone_predicts_no_call_and_other_spaces_record_no_searches() {
        let rel = release();
        let ids: Vec<String> = rel.tools.keys().cloned().collect();
        let index = ToolSearch::new(&rel, &ids, 7, "L1-1");
        let q = Query { id: "oracle/r1/L1-1".to_string(), query: "Pause my music.".to_string(), chain: Vec::new() };
        let mut t = Trajectory::start(&q);
        t.calls = vec![call(0, 0, SEARCH_TOOLS, json!({"query": "music", "limit": 1}), ok("{\"tools\": []}"))];
        t.groups = 1;
        let record = run(vec![turn_run(t.clone(), None, Some(&index))]);
        assert!(record.turns[0].calls.is_empty());
        assert_eq!(record.turns[0].searches[0].found.as_ref().map(Vec::len), Some(1), "the limit is kept");
        // An L5 refusal stays a refusal: searching is not calling.
        let files = crate::eval::predict::Files::build(&rel, &BTreeMap::from([("L1-1", &record)])).unwrap();
        let line: Value = serde_json::from_slice(files.unified.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!(line, json!({"id": "L1-1", "refusal": true}));
        let v = serde_json::to_value(&record).unwrap();
        assert_eq!(v["searches"], 1);

        // Without a search (the oracle and standard spaces) a call is a call of the function
        // it names, and the record's bytes have no `searches`, as before.
        let record = run(vec![turn_run(t, None, None)]);
        assert_eq!(record.turns[0].calls[0].tool, SEARCH_TOOLS);
        let v = serde_json::to_value(&record).unwrap();
        assert!(v.get("searches").is_none() && v["turns"][0].get("searches").is_none(), "{v}");
    }
}
