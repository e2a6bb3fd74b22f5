//! `benchgen execute`: run queries with an LLM agent connected to MCP servers and record
//! each trajectory as a reference (FinMCP-Bench's execution step). The agent itself (the
//! loop, its records, the queries file) is [`crate::agent`]; this is the stage.
//!
//! Output `artifacts/execute/`: `trajectories/<query id>.json` ([`crate::agent::Trajectory`]),
//! `trajectories.jsonl` ([`crate::agent::TRAJECTORIES`]) and `summary.json` (counts and
//! one row per query).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::agent::{AgentSettings, Executor, Query, Recorder, parse_queries, trajectory_summary};
use crate::logs::Session;
use crate::logs::import::LogTool;
use crate::mcp::{ClientOptions, McpClient};
use crate::settings::Settings;
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub use crate::agent::ExecuteSettings;

/// The `execute` stage; `queries` overrides `execute.queries` (`--queries FILE`), and
/// `chains` (the stage list's: synthesis') feeds it chain queries when neither is set.
#[derive(Debug, Clone, Default)]
pub struct ExecuteStage {
    pub queries: Option<PathBuf>,
    pub chains: Option<&'static Feed>,
}

/// The chain queries synthesis writes (`synth chains`), named by place as the pool's files
/// are in `crate::samples`: the spec's reads are static, and `execute` imports no family
/// that feeds it ([`Feed`]). `stages.rs`'s tests check that `synth chains` writes it.
pub const CHAIN_QUERIES: Artifact<Query> = Artifact::new("synth-chains", "queries.jsonl");

/// What running the chain queries ([`CHAIN_QUERIES`]) takes from the config of the family
/// that writes them: declared by that family (`synth chains`, from `[synth]`) and handed in
/// by the stage list, so `execute` reads only `[execute]` and names no synthesis setting.
#[derive(Debug)]
pub struct Feed {
    /// Whether the family writes them under this config.
    pub enabled: fn(&Settings) -> bool,
    /// The config key naming the LLM role that runs them, and the role it names.
    pub role_key: &'static str,
    pub role: fn(&Settings) -> String,
    /// The config key naming the MCP server they run against, and the server it names
    /// (`None`: the domain sandbox serving the log catalog, which `clients` builds).
    pub server_key: &'static str,
    pub server: fn(&Settings) -> Option<String>,
    /// What decides the server, for the config hash.
    pub server_hash: fn(&Settings) -> Result<Value>,
    /// The MCP clients they run against.
    pub clients: FeedClients,
    /// How many there are at most before they are written, and what was counted.
    pub bound: fn(&Settings) -> Option<(u64, String)>,
}

/// [`Feed::clients`]: the MCP clients, from the log catalog and its sessions when the
/// sandbox serves them (call inside a tokio runtime).
pub type FeedClients = fn(&Settings, &[LogTool], &[Session]) -> Result<Vec<Arc<McpClient>>>;

pub static SPEC: StageSpec = StageSpec {
    name: "execute",
    command: "execute",
    // 4: records each server it connects to (`mcp.server`), which the release pins, and
    // every query's trajectory event in the run that writes the artifacts (resumed included).
    // 5: a group of calls already run (same function and arguments) is not run again: the
    // answer nudge, then the run ends `repeated`. 6: a call written as text is read up to its
    // name and arguments, so one the model cut while making up its result is run.
    // 7: an agent turn on an open-weights server stops at a second call written as text
    //     (`llm::TEXT_CALL_STOPS`), which the loop never read.
    // 8: a call written `{"tool": NAME, "arguments": {…}}` (a listed NAME, nothing else) is read
    //     as a call (`agent::executor::tool_keyed`).
    // 9: a call written in OpenAI's tool-call shape, `{"type": "function", "function":
    //     {"name", "arguments"}}`, is read as a call (`agent::executor::function_wrapped`).
    // 10: a reply with neither calls nor words (`<tools></tools>`) before any call gets
    //      `call_nudge` once (`agent::executor::wordless`),
    //      and a wordless reply after calls the answer nudge; each nudge once per turn.
    // 11: an agent turn on the local server streams and ends where a call written as text is
    //     whole (`llm::stream`): its request asks to stream, so its hash changes.
    // 12: a call written in `<tools>` tags or between doubled braces (Qwen2.5's 1.5B) is read
    //     as the call (`llm::extract::leading_call`), and its streamed turn ends there.
    // 13: a call written after the echoed `<tools>` definition of its tool is read as the call.
    version: 13,
    about: "run queries with an LLM agent over MCP tools; record reference trajectories",
    reads: &[
        CHAIN_QUERIES.optional(),
        crate::logs::import::CATALOG.optional(),
        crate::logs::import::SESSIONS.optional(),
    ],
    writes: &["trajectories/*", "trajectories.jsonl", "summary.json"],
    section: Some("execute"),
};

/// Where the queries come from.
#[derive(Debug, Clone)]
enum Source {
    /// `--queries FILE` or `execute.queries`: run against `execute.servers`, role `execute.role`.
    File(PathBuf),
    /// `synth chains` output: run against `synth.server` or the domain sandbox, role
    /// `synth.assistant_role` (as the feed says).
    Chains(&'static Feed),
}

impl ExecuteStage {
    /// The feed of chain queries, when its family writes them under this config.
    fn fed(&self, settings: &Settings) -> Option<&'static Feed> {
        self.chains.filter(|f| (f.enabled)(settings))
    }

    fn source(&self, settings: &Settings) -> Result<Source> {
        let q = self
            .queries
            .clone()
            .or_else(|| settings.section::<ExecuteSettings>().queries.as_ref().map(|p| settings.resolve(p)));
        match (q, self.fed(settings)) {
            (Some(q), _) => Ok(Source::File(crate::settings::normalize(&q))),
            (None, Some(feed)) => Ok(Source::Chains(feed)),
            (None, None) => Err(crate::error::UsageError(
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
         hash; timings are in the ledger), and every server it connects to an `mcp.server`
         event (how it was started, its handshake, the hashes of its `tools/list`), from
         which the release pins the servers in `servers.json`. The loop's settings
         (`max_calls`, `system_prompt`, `answer_nudge` for a turn left blank after tool calls
         or asking again only for calls already run, `call_nudge` for a blank first reply,
         …) are in `[execute]`; a repeat after
         the nudge ends the query as `repeated`. A query that fails is recorded with its
         reason and the run goes on. Finished queries are checkpointed; skipped when up to
         date."
    }

    /// Part of `run` when the config names a queries file, or synthesis writes chain queries.
    fn enabled(&self, settings: &Settings) -> bool {
        settings.section::<ExecuteSettings>().queries.is_some() || self.fed(settings).is_some()
    }

    fn roles(&self, settings: &Settings) -> Vec<ConfigRef> {
        match self.source(settings) {
            Ok(Source::Chains(f)) => vec![ConfigRef::new(f.role_key, (f.role)(settings))],
            _ => vec![ConfigRef::new("execute.role", &settings.section::<ExecuteSettings>().role)],
        }
    }

    /// Its one role runs the agent loop.
    fn turn_roles(&self, settings: &Settings) -> Vec<ConfigRef> {
        self.roles(settings)
    }

    fn estimate(&self, settings: &Settings) -> Vec<crate::stage::Estimate> {
        let mut agent = AgentSettings::from(&settings.section::<ExecuteSettings>().0);
        let queries = match self.source(settings) {
            Ok(Source::File(path)) => std::fs::read(&path)
                .ok()
                .and_then(|b| parse_queries(&b, &settings.display_path(&path)).ok())
                .map(|q| (q.len() as u64, "queries".to_string())),
            Ok(Source::Chains(f)) => {
                agent.role = (f.role)(settings);
                (f.bound)(settings).map(|(n, basis)| (n, format!("chain queries ({basis})")))
            }
            Err(_) => None,
        };
        let per = agent.max_exchanges();
        let e = match queries {
            Some((n, what)) => crate::stage::Estimate::plain(
                &agent.role,
                n * per,
                format!("≤ {n} {what} × {per} turns (max_calls {} + answer + nudge)", agent.max_calls),
            ),
            None => crate::stage::Estimate::unknown(&agent.role, "the queries can be read"),
        };
        vec![e.in_flight(agent.concurrency.max(1))]
    }

    /// The servers of every mode, not only the current one: `execute.servers` serve a
    /// queries file (`execute.queries`, or `--queries` at any time, even when synthesis
    /// feeds `execute`), `synth.server` the chain queries.
    fn servers(&self, settings: &Settings) -> Vec<ConfigRef> {
        let names = settings.section::<ExecuteSettings>().servers.iter().enumerate();
        let mut out: Vec<ConfigRef> = names.map(|(i, n)| ConfigRef::new(format!("execute.servers[{i}]"), n)).collect();
        if let Some(f) = self.fed(settings) {
            out.extend((f.server)(settings).map(|n| ConfigRef::new(f.server_key, n)));
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
            Source::Chains(f) => {
                let hash = crate::settings::section_hash(&json!({
                    "execute": settings.section::<ExecuteSettings>(),
                    "role": (f.role)(settings),
                    "servers": (f.server_hash)(settings)?,
                }))?;
                Ok(Plan { inputs: vec![], config_hash: hash })
            }
        }
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        use crate::llm::batch::{Batch, BatchOptions, Item};
        let settings = ctx.settings;
        let mut agent = AgentSettings::from(&settings.section::<ExecuteSettings>().0);
        let source = self.source(settings)?;
        let queries = match &source {
            Source::File(path) => parse_queries(inputs.bytes(path)?, &settings.display_path(path))?,
            Source::Chains(f) => {
                agent.role = (f.role)(settings);
                parse_queries(inputs.bytes_of(&CHAIN_QUERIES)?, "synth-chains/queries.jsonl")?
            }
        };
        // The domain sandbox answers from the logs: read them only when it is used.
        let sandbox = match &source {
            Source::Chains(f) if (f.server)(settings).is_none() => Some(f.server_key),
            _ => None,
        };
        let (tools, sessions) = if let Some(server_key) = sandbox {
            if !inputs.has(&crate::logs::import::CATALOG) || !inputs.has(&crate::logs::import::SESSIONS) {
                return Err(crate::error::hinted(
                    "`execute` on chain queries serves the log catalog, and `logs import` has not written it",
                    format!("run `benchgen logs import` (or `benchgen run`), or name a server in `{server_key}`"),
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
            .concurrency(agent.concurrency.max(1))
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
                Source::Chains(f) => (f.clients)(settings, &tools, &sessions)?,
            };
            let recorder = Recorder::open(&settings.artifacts, run_id, "execute")?;
            Executor::connect(clients, agent.clone(), Some(recorder)).await
        })?;
        // What each server offered, so a release can pin the servers its samples ran against.
        exec.record_servers();
        let items: Vec<(String, Query)> = queries.iter().map(|q| (q.id.clone(), q.clone())).collect();
        let ex = &exec;
        let done = batch.run(items, |q: Query, llm: Item| async move { Ok(ex.run_query(&llm, &q).await) });
        // Every query's `execute.trajectory` event goes into this run, in query order, the
        // resumed ones included: a later stage links a sample to the trajectory of the run
        // that wrote `execute`'s artifacts, and a query finished before a kill would
        // otherwise have its event only in the killed run (its sample's lineage then lost
        // the agent's exchanges and calls).
        if let Ok(d) = &done {
            for q in &queries {
                if let Some((t, trace)) = d.values.get(&q.id) {
                    ex.record_trajectory(t, trace);
                }
            }
        }
        batch.block_on(exec.shutdown());
        drop(exec);
        let done = done?;
        batch.finish(out)?;

        let mut rows = Vec::new();
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        let mut all = Vec::new();
        for q in &queries {
            let (t, _) = done.values.get(&q.id).context("a query has no result")?;
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
            "{} quer{}: {} answered, {} at the call cap, {} repeating calls, {} failed; {} calls",
            queries.len(),
            if queries.len() == 1 { "y" } else { "ies" },
            n("answered"),
            n("cap_reached"),
            n("repeated"),
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
