//! One run: one agent on one released sample, one repeat, as one `llm::batch` item.
//!
//! The agent gets an in-process `benchgen sandbox` serving the sample's tool space in
//! recorded-responses mode: a call whose tool and canonical arguments match a recording of
//! the sample's cassette gets the recorded result; any other valid call gets a value shaped
//! by the tool's schema (seeded by `[project] seed`, the tool and the arguments); so does a
//! call of a `standard` space's distractor tool, which the cassette has no recording of.
//! Each call of the run says which it got ([`Answer`]). Turn `t` of a multi-turn sample
//! starts from the gold conversation of turns `0..t` (user messages, the reference
//! trajectory's calls and results, the gold replies), as FinMCP's protocol scores it.
//!
//! Wire format of `runs.jsonl` (one [`RunRecord`] per line, agents in config order, then
//! repeat, then sample id): `{agent, repeat, id, tools, turns: [{status, reason?, answer?,
//! calls: [{tool, offered, group, arguments, answer, result?}], exchanges}]}`.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::source::Release;
use super::{EvalSettings, STAGE};
use crate::agent::{AgentSettings, ExecuteSettings, Executor, Query, Recorder, RunStatus, Trajectory};
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
    /// Request hashes of the turn's LLM exchanges.
    pub exchanges: Vec<String>,
}

/// One run (the checkpointed value of its batch item).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub agent: String,
    pub repeat: usize,
    pub id: String,
    /// Tools in the agent's tool space.
    pub tools: usize,
    pub turns: Vec<TurnRun>,
}

impl RunRecord {
    /// The calls that count as the agent's answer (everything it asked for within the cap).
    pub fn predicted(turn: &TurnRun) -> impl Iterator<Item = &EvalCall> {
        turn.calls.iter().filter(|c| c.answer != Answer::OverCap)
    }
}

/// The item key (and ledger subject) of a run: `<agent>/r<k>/<sample id>`.
pub fn key(agent: &str, repeat: usize, id: &str) -> String {
    format!("{agent}/r{repeat}/{id}")
}

/// Every finished run, by key.
pub struct Runs {
    pub records: BTreeMap<String, RunRecord>,
    /// Keys in output order (agents in config order, repeats, sample ids).
    order: Vec<String>,
}

impl Runs {
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The runs of one agent and repeat, by sample id (failed runs are absent).
    pub fn of(&self, agent: &str, repeat: usize) -> BTreeMap<&str, &RunRecord> {
        self.records.values().filter(|r| r.agent == agent && r.repeat == repeat).map(|r| (r.id.as_str(), r)).collect()
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

/// The agent loop's settings for one agent: `[execute]`'s prompts and limits, the agent's
/// role, and `[eval] max_calls` when set.
pub fn agent_settings(s: &Settings, cfg: &EvalSettings, role: &str) -> AgentSettings {
    let mut a = AgentSettings::from(&s.section::<ExecuteSettings>().0);
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
    agent: usize,
    repeat: usize,
    sample: usize,
}

/// Run every agent on every sample `repeats` times; returns the runs and how many failed
/// (within `max_failed_share`, recorded in `failed.json`).
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
    for (a, agent) in cfg.agents.iter().enumerate() {
        for repeat in 1..=cfg.repeats {
            for (i, sample) in rel.samples.iter().enumerate() {
                items.push((key(agent, repeat, &sample.id), Job { agent: a, repeat, sample: i }));
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
            json!({"agent": r.agent, "repeat": r.repeat, "sample": r.id, "calls": calls, "statuses": statuses}),
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
/// per group) with their results, and the gold reply.
fn gold_history(exec: &Executor, sample: &Sample, t: usize) -> Vec<ChatMessage> {
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
                .map(|(c, id)| ToolCall {
                    id: id.clone(),
                    name: exec.names().name(&c.tool).unwrap_or(&c.tool).to_string(),
                    arguments: c.arguments.clone(),
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

/// A turn's trajectory as the run records it.
fn turn_run(t: Trajectory, cassette: Option<&Cassette>) -> TurnRun {
    let capped = (t.status == RunStatus::CapReached).then(|| t.groups.saturating_sub(1));
    let calls = t
        .calls
        .into_iter()
        .map(|c| {
            let answer = match (&c.outcome, c.executed, &c.tool_id) {
                _ if capped == Some(c.group) && !c.executed => Answer::OverCap,
                (_, false, None) => Answer::UnknownTool,
                (_, false, Some(_)) => Answer::NotExecuted,
                (CallOutcome::Ok { .. }, true, Some(id)) => match cassette.and_then(|k| k.get(id, &c.arguments)) {
                    Some(_) => Answer::Recorded,
                    None => Answer::Generated,
                },
                (CallOutcome::Ok { .. }, true, None) => Answer::Generated,
                (CallOutcome::ToolError { .. }, true, _) => Answer::ToolError,
                (CallOutcome::Failed { .. }, true, _) => Answer::Failed,
            };
            let result = match &c.outcome {
                CallOutcome::Ok { output } | CallOutcome::ToolError { output } => Some(output.text.clone()),
                CallOutcome::Failed { failure } => Some(format!("call failed: {failure}")),
            };
            EvalCall {
                offered: c.tool_id.is_some(),
                tool: c.tool_id.unwrap_or(c.function),
                group: c.group,
                arguments: c.arguments,
                answer,
                result,
            }
        })
        .collect();
    TurnRun { status: t.status, reason: t.reason, answer: t.answer, calls, exchanges: t.exchanges }
}

/// An in-process sandbox over `catalog` answering from `cassette`, and a client on it.
fn sandbox_client(env: &Env, catalog: &crate::model::Catalog, cassette: Option<&Cassette>) -> Result<Arc<McpClient>> {
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
    tokio::spawn(async move {
        if let Err(e) = crate::sandbox::serve_io(&sandbox, sr, sw).await {
            tracing::debug!("an eval sandbox stopped: {e:#}");
        }
    });
    let (cr, cw) = tokio::io::split(client_end);
    Ok(Arc::new(McpClient::from_io("eval", ToolIds::AsIs, env.client.clone(), cr, cw)))
}

/// The model of one run: repeat 1 asks with the role's settings; repeat `r` > 1 with the
/// sampling seed `role seed + r − 1`, so each repeat is a request of its own (the ledger
/// cache would otherwise answer it with the first repeat's reply).
struct Seeded<'a> {
    item: &'a Item,
    seed: Option<u64>,
}

impl crate::agent::Chat for Seeded<'_> {
    async fn chat(
        &self,
        role: &str,
        messages: &[ChatMessage],
        tools: &[crate::llm::ToolSpec],
        _subject: &str,
    ) -> Result<crate::llm::Reply<crate::llm::ChatTurn>, crate::llm::LlmError> {
        self.item.chat_seeded(role, messages, tools, self.seed).await
    }
}

async fn run_one(env: &Env<'_>, job: Job, item: &Item) -> Result<RunRecord, ItemError> {
    let sample = &env.rel.samples[job.sample];
    let agent = &env.cfg.agents[job.agent];
    let role_seed = env.s.section::<crate::llm::LlmSettings>().roles.get(agent).and_then(|r| r.seed).unwrap_or(0);
    let seed = (job.repeat > 1).then(|| role_seed.wrapping_add(job.repeat as u64 - 1));
    let llm = &Seeded { item, seed };
    let space = env.rel.tool_space(env.cfg, env.s.project.seed, sample);
    let cassette = env.rel.cassettes.get(&sample.id);
    let client = sandbox_client(env, &env.rel.catalog(&space), cassette)?;
    let recorder = Recorder::open(&env.s.artifacts, env.run_id, STAGE)?;
    let exec = Executor::connect(vec![client], agent_settings(env.s, env.cfg, agent), Some(recorder)).await?;
    let mut turns = Vec::with_capacity(sample.turns.len());
    for t in 0..sample.turns.len() {
        let mut messages = gold_history(&exec, sample, t);
        let q = Query { id: item.key().to_string(), query: sample.turns[t].user.clone(), chain: Vec::new() };
        let mut traj = Trajectory::start(&q);
        exec.run_loop(llm, item.key(), &mut messages, &mut traj).await;
        if traj.status == RunStatus::Failed
            && let Some(why) = traj.reason.as_deref().filter(|r| r.starts_with("LLM:"))
        {
            exec.shutdown().await;
            return Err(ItemError::Failed(format!("turn {}: {why}", t + 1)));
        }
        turns.push(turn_run(traj, cassette));
    }
    exec.shutdown().await;
    Ok(RunRecord { agent: agent.clone(), repeat: job.repeat, id: sample.id.clone(), tools: space.len(), turns })
}

/// Tokens and model latency of each run, from the ledger: each exchange's usage and the
/// latency of its first (live) recording, so a resumed run counts what the first asking
/// cost. Latency stays out of the artifacts (it differs between runs); it is printed.
#[derive(Debug, Default)]
pub struct Usage {
    /// Run key → (prompt tokens, completion tokens, model latency ms).
    pub per_run: BTreeMap<String, (u64, u64, f64)>,
}

impl Usage {
    /// One line per agent: mean model latency per run.
    pub fn latency_notes(&self, agents: &[String]) -> Vec<String> {
        agents
            .iter()
            .map(|a| {
                let prefix = format!("{a}/");
                let v: Vec<f64> =
                    self.per_run.iter().filter(|(k, _)| k.starts_with(&prefix)).map(|(_, u)| u.2).collect();
                let mean = if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
                format!("{a}: mean model latency {:.0} ms per run ({} runs)", mean, v.len())
            })
            .collect()
    }

    pub fn tokens(&self, key: &str) -> (u64, u64) {
        self.per_run.get(key).map(|u| (u.0, u.1)).unwrap_or_default()
    }
}

pub fn usage(artifacts: &std::path::Path, runs: &Runs) -> Result<Usage> {
    let ledger = crate::ledger::Ledger::open(artifacts)?;
    let mut stmt = ledger.connection().prepare(
        "SELECT json_extract(payload, '$.usage.prompt_tokens'), json_extract(payload, '$.usage.completion_tokens'),
                json_extract(payload, '$.latency_ms')
         FROM events WHERE kind = 'llm.exchange' AND json_extract(payload, '$.request_hash') = ?1
           AND json_extract(payload, '$.role') = ?2 ORDER BY id LIMIT 1",
    )?;
    let mut seen: BTreeMap<String, (u64, u64, f64)> = BTreeMap::new();
    let mut out = Usage::default();
    for (k, r) in &runs.records {
        let mut acc = (0u64, 0u64, 0f64);
        for x in r.turns.iter().flat_map(|t| &t.exchanges) {
            // Two agents may send the same body (roles that differ only in their endpoint):
            // each exchange is the agent's own.
            let seen_key = format!("{}\n{x}", r.agent);
            let u = match seen.get(&seen_key) {
                Some(u) => *u,
                None => {
                    let u = stmt
                        .query_row([x.as_str(), r.agent.as_str()], |row| {
                            Ok((
                                row.get::<_, Option<u64>>(0)?.unwrap_or(0),
                                row.get::<_, Option<u64>>(1)?.unwrap_or(0),
                                row.get::<_, Option<f64>>(2)?.unwrap_or(0.0),
                            ))
                        })
                        .unwrap_or_default();
                    seen.insert(seen_key, u);
                    u
                }
            };
            acc = (acc.0 + u.0, acc.1 + u.1, acc.2 + u.2);
        }
        out.per_run.insert(k.clone(), acc);
    }
    Ok(out)
}
