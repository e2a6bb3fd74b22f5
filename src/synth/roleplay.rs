//! `benchgen synth roleplay` (stage `synth-roleplay`): multi-turn dialogues simulated
//! from a persona and a goal (FinMCP-Bench's role-play synthesis).
//!
//! Per dialogue: the planner draws a persona (one value per attribute of the persona
//! pool's templates) and a sub-scenario (both seeded), and the LLM (`planner_role`) writes
//! a goal from them, the sub-scenario's tools and a few of its real queries, with its plan:
//! the user's requests, one per turn. Then the user simulator (`user_role`) and the
//! assistant (`assistant_role`, with the MCP tools) alternate. The simulator sees the
//! persona, the goal, its plan, the turn's request and the **visible** conversation only:
//! user messages and the assistant's final replies, never tool calls or results. It ends
//! the dialogue with `done` (recorded as FinMCP's `###STOP###`), or the turn cap does. With
//! `user_turns = "planned"` the plan's requests are the user's messages themselves, and the
//! dialogue ends with the plan (also recorded as `###STOP###`).
//! Each turn's tool-call groups are recorded. A turn whose agent run fails ends the
//! dialogue; validation rejects it with the reason.
//!
//! Persona pool (TOML): `[attributes]` with a list of values per attribute, e.g.
//! `age = ["27", "41"]`, `occupation = [...]`, `risk_attitude = [...]`, `goals = [...]`.
//!
//! Outputs: `dialogues.jsonl` (one [`Dialogue`] a line, sorted by id) and `report.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context, Result};
use rand::SeedableRng;
use rand::seq::IndexedRandom;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::SynthSettings;
use crate::agent::{AgentSettings, Executor, Query, Recorder, RunStatus, Trajectory};
use crate::ledger::{NewEvent, Parent};
use crate::llm::batch::{Batch, BatchOptions, Item, ItemError};
use crate::llm::{ChatMessage, Prompt};
use crate::logs::import::LogTool;
use crate::logs::{Session, UNLABELLED};
use crate::model::RecordedCall;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "synth-roleplay";

/// One [`Dialogue`] a line (read by `validate`).
pub const DIALOGUES: Artifact<Dialogue> = Artifact::new(STAGE, "dialogues.jsonl");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "synth roleplay",
    // 3: a user turn that repeats an earlier one, or asks for an action the assistant does
    // not take, is asked again, then ends the dialogue. 4: records each server it connects
    // to (`mcp.server`), which the release pins. 5: the agent's group of calls already run
    // (same function and arguments) is not run again: the answer nudge, then `repeated`.
    // 6: a call written as text is read up to its name and arguments, so one the assistant
    // cut while making up its result is run. 7: the goal comes with its plan of requests,
    // one per user turn, and the simulator is given the turn's request. 8: a planned request
    // names a tool only by its whole identifier, and a plain-word tool name (`search`) never.
    // 9: the dialogue's `synth.dialogue` event holds the hints of its planned turns.
    // 10: an agent turn on an open-weights server stops at a second call written as text
    //     (`llm::TEXT_CALL_STOPS`), which the loop never read. 11: a turn's answer that claims
    //     what its calls did not do is asked again before the next turn (`answer_again`).
    // 12: a call written `{"tool": NAME, "arguments": {…}}` (a listed NAME, nothing else) is read
    //     as a call (`agent::executor::tool_keyed`).
    // 13: the answer's schema says what is asked, not "the X's typed answer" (developer
    //     wording the model read).
    // 14: a call written in OpenAI's tool-call shape (`{"type": "function", "function":
    //     {…}}`) is read as a call (`agent::executor::function_wrapped`).
    // 15: a reply with neither calls nor words (`<tools></tools>`) before any call gets
    //      `call_nudge` once (`agent::executor::wordless`),
    //      and a wordless reply after calls the answer nudge; each nudge once per turn.
    // 16: a call of an action the user's requests so far do not ask for is withheld before it
    //     runs (`gold::unrequested_action`, `agent::Executor::run_guarded`) and the turn's
    //     `withheld` records it; the assistant is nudged to answer from what it has.
    // 17: words that come with a withheld call are no answer (nudged as a blank reply), and
    //     the calls withheld in a try that was not kept are recorded.
    // 18: an agent turn on the local server streams and ends where a call written as text is
    //     whole (`llm::stream`): its request asks to stream, so its hash changes.
    // 19: a call written in `<tools>` tags or between doubled braces (Qwen2.5's 1.5B) is read
    //     as the call (`llm::extract::leading_call`), and its streamed turn ends there.
    // 20: a call written after the echoed `<tools>` definition of its tool is read as the call.
    version: 20,
    about: "multi-turn dialogues: a persona's goal, a user simulator and an assistant with the MCP tools",
    reads: &[
        crate::logs::split::GRAPH_SOURCE.read(),
        crate::logs::split::BENCHMARK.read(),
        crate::logs::import::CATALOG.read(),
        crate::logs::import::SESSIONS.read(),
    ],
    writes: &["dialogues.jsonl", "report.md", "failed.json"],
    section: Some("synth"),
};

/// The user simulator's stop token in FinMCP's multi-turn samples.
pub const STOP: &str = "###STOP###";

/// The persona pool file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersonaPool {
    pub attributes: BTreeMap<String, Vec<String>>,
}

/// Read and check a persona pool (every attribute needs at least one value).
pub fn read_pool(bytes: &[u8], file: &str) -> Result<PersonaPool> {
    let text = std::str::from_utf8(bytes).with_context(|| format!("`{file}` is not UTF-8"))?;
    let pool: PersonaPool = toml::from_str(text).with_context(|| format!("`{file}` is not a persona pool"))?;
    if pool.attributes.is_empty() {
        anyhow::bail!("`{file}`: `[attributes]` lists no attribute");
    }
    if let Some((k, _)) = pool.attributes.iter().find(|(_, v)| v.is_empty()) {
        anyhow::bail!("`{file}`: attribute `{k}` has no values");
    }
    Ok(pool)
}

/// One planned dialogue (before any LLM call).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan1 {
    pub id: String,
    pub sub_scenario: String,
    pub persona: BTreeMap<String, String>,
}

/// Draw `n` personas and sub-scenarios (seeded). Ids come from the content and the slot.
pub fn plan_dialogues(pool: &PersonaPool, subs: &[String], n: usize, seed: u64) -> Vec<Plan1> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x726f_6c65_706c_6179);
    let mut out = Vec::new();
    if subs.is_empty() {
        return out;
    }
    for k in 0..n {
        let persona: BTreeMap<String, String> = pool
            .attributes
            .iter()
            .map(|(a, vals)| (a.clone(), vals.choose(&mut rng).expect("checked non-empty").clone()))
            .collect();
        let sub = subs.choose(&mut rng).expect("non-empty").clone();
        let id = format!(
            "dialog-{}",
            super::short_hash(&format!("{k}|{sub}|{}", serde_json::to_string(&persona).unwrap_or_default()))
        );
        out.push(Plan1 { id, sub_scenario: sub, persona });
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// What this user wants, and the messages they will send.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Goal {
    /// What this user wants to get done in the conversation, in one or two sentences.
    pub goal: String,
    /// The messages the user will send, in order: each asks for one part of the goal that
    /// one of the tools does; a later one may build on what an earlier one found.
    pub requests: Vec<String>,
}

/// The user's next message.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UserTurn {
    /// The user's next message (empty when done).
    pub message: String,
    /// True when the goal is reached or the user gives up: the dialogue ends.
    pub done: bool,
}

/// The planner's answer: a goal that is not blank and does not loop, and its requests, one
/// per user turn: at least two (one when `turn_cap` is 1), at most `turn_cap`, none blank
/// and none naming one of the `tools` (the 1.5B planner wrote "search_incidents by free text
/// and status; …" as a request, and the simulator then spoke as the assistant).
///
/// Why a plan of requests: told only the goal, the demo's 1.5B user simulator asked for all
/// of it in its first message, the assistant did it all in one turn, and the simulator then
/// repeated itself (`repeated`) or thanked it (`no_action`): both of the clean run's
/// dialogues had one turn, and no multi-turn sample was released.
pub(crate) fn goal_answer(turn_cap: usize, tools: Vec<String>) -> crate::llm::Answer<Goal> {
    let (min, max) = request_bounds(turn_cap);
    let mut a = crate::llm::Answer::<Goal>::of()
        .non_blank("goal", |g: &Goal| g.goal.as_str())
        .max_items("requests", max)
        .min_items("requests", min)
        .non_blank_items("requests");
    a = a.check(|g| crate::llm::extract::check_no_loop(&g.goal, "the goal"));
    a.check(move |g| {
        if g.requests.len() < min || g.requests.len() > max {
            return Err(format!("`requests` has {} entries; write {min} to {max}, one per message", g.requests.len()));
        }
        if let Some(i) = g.requests.iter().position(|r| r.trim().is_empty()) {
            return Err(format!("request {} is blank; write it out", i + 1));
        }
        for (i, r) in g.requests.iter().enumerate() {
            if let Some(t) = tools.iter().find(|t| names_tool(r, t)) {
                return Err(format!(
                    "request {} names the tool `{t}`; write it as the message the user types, in the first person, without tool names",
                    i + 1
                ));
            }
        }
        // A request that repeats an earlier one is not refused here (the schema's edges, two
        // equal strings, would be): `simulate` ends a planned dialogue before it instead.
        g.requests.iter().try_for_each(|r| crate::llm::extract::check_no_loop(r, "a request"))
    })
}

/// Whether `request` names the tool `tool` as the assistant would call it: the tool's name
/// as a whole identifier (case aside), not inside a longer one, and only a name no plain
/// word is (one with `_`, `-`, `.` or `:`, or a lower-case letter followed by a capital, as
/// `search_incidents` or `getQuote`): a tool called `search`, `echo` or `SQL` is named by
/// every request that says "search", "echo" or "SQL", and refusing those would refuse
/// ordinary requests.
fn names_tool(request: &str, tool: &str) -> bool {
    let camel = tool.chars().zip(tool.chars().skip(1)).any(|(a, b)| a.is_lowercase() && b.is_uppercase());
    let identifier = tool.contains(['_', '-', '.', ':']) || camel;
    if !identifier {
        return false;
    }
    let (r, t) = (request.to_lowercase(), tool.to_lowercase());
    let part = |c: char| c.is_alphanumeric() || c == '_';
    r.match_indices(&t).any(|(at, _)| {
        let before = r[..at].chars().next_back();
        let after = r[at + t.len()..].chars().next();
        !before.is_some_and(part) && !after.is_some_and(part)
    })
}

/// How many requests a goal plans: `(min, max)` for a dialogue of at most `turn_cap` turns.
pub(crate) fn request_bounds(turn_cap: usize) -> (usize, usize) {
    let max = turn_cap.max(1);
    (2.min(max), max)
}

/// The user simulator's answer: a message that does not loop; on the `first` turn a
/// request is needed: not blank (a blank first message used to fail the dialogue after
/// the call).
/// How the refusal of a user turn that repeats an earlier one begins.
const REPEATS: &str = "the message repeats turn";

pub(crate) fn user_answer(first: bool, earlier: Vec<String>) -> crate::llm::Answer<UserTurn> {
    let a = crate::llm::Answer::<UserTurn>::of()
        .check(|u: &UserTurn| crate::llm::extract::check_no_loop(&u.message, "the message"))
        .check(move |u: &UserTurn| {
            // A turn that asks again what an earlier one asked adds nothing to the dialogue:
            // asked again with the reason; `done` ends the dialogue instead.
            let said: Vec<&str> = earlier.iter().map(String::as_str).collect();
            match super::gold::repeats(&said, &u.message) {
                Some(j) if !u.done => Err(format!(
                    "{REPEATS} {} (\"{}\"): ask for something the conversation has not covered yet, or set `done` to true",
                    j + 1,
                    crate::text::one_line(&earlier[j])
                )),
                _ => Ok(()),
            }
        });
    if first { a.non_blank("message", |u: &UserTurn| u.message.as_str()) } else { a }
}

/// One user turn and what the assistant did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DialogueTurn {
    pub user: String,
    /// Request hash of the simulator's exchange (the goal's, for a planned message).
    pub user_exchange: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The reminder the assistant was given with the user's message on a second try
    /// (`user_turns = "planned"`: its first answer made no call); not part of the
    /// conversation, recorded so that an audit sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Tool-call groups of this turn (calls in one group ran in parallel).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Vec<RecordedCall>>,
    /// What was wrong with the assistant's first answer, when it was asked again before the
    /// next turn and its second answer (`answer`) passed the check (see [`answer_again`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_asked_again: Option<String>,
    /// Calls the assistant asked for and was not given: actions the user's requests so far
    /// do not ask for ([`super::gold::unrequested_action`]). They never ran and are not in
    /// the conversation; recorded so that an audit sees them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<crate::agent::Withheld>,
}

impl DialogueTurn {
    /// The turn of `user`'s message (made by exchange `user_exchange`) and the assistant's
    /// run `t`, sent with `hint` (a planned request's second try).
    fn of(user: String, user_exchange: String, t: &Trajectory, hint: Option<&str>) -> DialogueTurn {
        DialogueTurn {
            user,
            user_exchange,
            status: t.status,
            reason: t.reason.clone(),
            answer: t.answer.clone(),
            hint: hint.map(str::to_string),
            groups: crate::agent::recorded_groups(&t.calls),
            answer_asked_again: None,
            withheld: t.withheld.clone(),
        }
    }
}

/// A simulated dialogue (a line of `dialogues.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dialogue {
    pub id: String,
    pub sub_scenario: String,
    pub persona: BTreeMap<String, String>,
    pub goal: String,
    /// The goal's plan: the user's requests, one per turn ([`Goal::requests`]; empty in a
    /// dialogue made before synth-roleplay v7).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<String>,
    pub goal_exchange: String,
    pub turns: Vec<DialogueTurn>,
    /// `user` (the simulator said done), `plan` (every request of the goal's plan was made,
    /// `user_turns = "planned"`), `cap` (turn cap), `repeated` (the simulator repeated an
    /// earlier turn after being asked again), `no_action` (a turn asked twice for an action
    /// the assistant did not take) or `failed` (a turn failed).
    pub ended: String,
    /// Calls withheld from the assistant in a try of a turn that was not kept (it answered
    /// without a successful call, so the turn was tried again or the dialogue ended before
    /// it), with the turn (1-based); a kept try's are in its turn's `withheld`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld_in_dropped_tries: Vec<(usize, crate::agent::Withheld)>,
}

/// The checkpointed value: the dialogue and the ledger events it links to.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Done1 {
    dialogue: Dialogue,
    events: Vec<i64>,
}

/// One line of the visible conversation (what the user simulator sees).
#[derive(Debug, Clone, Serialize)]
pub struct Visible {
    pub role: &'static str,
    pub text: String,
}

fn cfg(s: &Settings) -> SynthSettings {
    super::settings(s)
}

fn pool_path(s: &Settings) -> Option<PathBuf> {
    cfg(s).roleplay.personas.as_ref().map(|p| s.resolve(p))
}

/// Per sub-scenario: its tools, a few real queries, and the sessions those come from.
type SubInfo = (BTreeSet<String>, Vec<String>, Vec<String>);

/// Tools and a few real queries per sub-scenario (with their sessions, for the ledger).
fn sub_info(sessions: &[Session]) -> BTreeMap<String, SubInfo> {
    let mut out: BTreeMap<String, SubInfo> = BTreeMap::new();
    let mut sorted: Vec<&Session> = sessions.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    for s in sorted {
        let e = out.entry(s.sub_scenario()).or_default();
        e.0.extend(s.calls().map(|c| c.tool.clone()));
        if e.1.len() < 3
            && let Some(t) = s.turns.first()
            && !e.1.contains(&t.user)
        {
            e.1.push(t.user.clone());
            e.2.push(s.id.clone());
        }
    }
    out
}

pub struct RoleplayStage;

impl Stage for RoleplayStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Simulate multi-turn dialogues: persona + goal, a user simulator and an assistant with tools.

         Reads the persona pool (`synth.roleplay.personas`), `logs-split/graph_source.jsonl`
         and `logs-split/benchmark.jsonl` (sub-scenarios and their tools),
         `logs-import/catalog.json` and `logs-import/sessions.jsonl` (the default sandbox).
         Writes `artifacts/synth-roleplay/`: `dialogues.jsonl`, `report.md` and `failed.json`
         when dialogues failed. Resumable per dialogue."
    }

    fn enabled(&self, s: &Settings) -> bool {
        super::enabled(s) && cfg(s).roleplay.dialogues > 0
    }

    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        let c = cfg(s);
        let user = (c.roleplay.user_turns == super::UserTurns::Simulated)
            .then(|| ConfigRef::new("synth.user_role", &c.user_role));
        let mut roles = vec![ConfigRef::new("synth.planner_role", &c.planner_role)];
        roles.extend(user);
        roles.push(ConfigRef::new("synth.assistant_role", &c.assistant_role));
        roles
    }

    /// The simulated user and the assistant take turns; the planner asks once per dialogue.
    fn turn_roles(&self, s: &Settings) -> Vec<ConfigRef> {
        let c = cfg(s);
        match c.roleplay.user_turns {
            super::UserTurns::Simulated => vec![
                ConfigRef::new("synth.user_role", &c.user_role),
                ConfigRef::new("synth.assistant_role", &c.assistant_role),
            ],
            super::UserTurns::Planned => vec![ConfigRef::new("synth.assistant_role", &c.assistant_role)],
        }
    }

    fn servers(&self, s: &Settings) -> Vec<ConfigRef> {
        cfg(s).server.iter().map(|n| ConfigRef::new("synth.server", n)).collect()
    }

    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        use crate::stage::Estimate;
        let sc = cfg(s);
        let rp = &sc.roleplay;
        let (n, cap) = (rp.dialogues as u64, rp.turn_cap as u64);
        let mut agent = AgentSettings::from(&s.section::<crate::agent::ExecuteSettings>().0);
        agent.role = sc.assistant_role.clone();
        let per = agent.max_exchanges();
        // Every user turn may be tried twice when the assistant did not act on it: a
        // simulated one asked again, a planned one sent again with a reminder.
        let mut rows = vec![Estimate::typed(&sc.planner_role, n, format!("{n} dialogues × 1 goal"))];
        if rp.user_turns == super::UserTurns::Simulated {
            rows.push(Estimate::typed(&sc.user_role, n * cap * 2, format!("≤ {n} dialogues × {cap} turns × 2 tries")));
        }
        rows.push(Estimate::plain(
            &sc.assistant_role,
            n * cap * 2 * per,
            format!("≤ {n} dialogues × {cap} turns × 2 tries × {per} agent turns"),
        ));
        rows.push(Estimate::typed(&sc.assistant_role, n * cap, format!("≤ {n} dialogues × {cap} answers asked again")));
        crate::stage::merge_by_role(rows).into_iter().map(|e| e.in_flight(rp.concurrency.max(1))).collect()
    }

    fn prompts(&self, s: &Settings) -> Vec<PromptRef> {
        let c = cfg(s);
        let persona = json!({"age": "30"});
        let tool = json!({"name": "t", "description": "d"});
        vec![
            PromptRef::new(
                "synth.roleplay.goal_template",
                &c.roleplay.goal_template,
                json!({"persona": persona, "sub_scenario": "A-B", "tools": [tool], "examples": ["q"],
                       "min_requests": 2, "max_requests": 3}),
            ),
            PromptRef::new(
                "synth.roleplay.user_template",
                &c.roleplay.user_template,
                json!({"persona": persona, "goal": "g", "conversation": [{"role": "user", "text": "t"}],
                       "requests": ["r1", "r2"], "request": "r2", "turn": 2, "turn_cap": 3}),
            ),
            // A turn's answer that claims what its calls did not do is asked again with
            // `validate`'s prompt before the next turn ([`answer_again`]).
            PromptRef::new(
                "synth.validate.answer_template",
                &c.validate.answer_template,
                json!({"request": "q", "calls": [{"n": 1, "tool": "t", "arguments": "{}", "result": "r"}],
                       "answer": "a", "problems": ["p"]}),
            ),
        ]
    }

    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        let r = cfg(s).roleplay;
        crate::settings::check_positive(problems, "synth.roleplay.turn_cap", r.turn_cap);
        crate::settings::check_positive(problems, "synth.roleplay.concurrency", r.concurrency);
        if r.dialogues > 0 && r.personas.is_none() {
            problems.push(crate::error::Problem::new(
                "synth.roleplay.personas",
                "is required when `dialogues` is above 0 (a TOML persona pool)",
            ));
        }
    }

    fn plan(&self, s: &Settings) -> Result<Plan> {
        let c = cfg(s);
        let hash = json!({
            "roleplay": c.roleplay, "roles": [c.planner_role, c.user_role, c.assistant_role],
            "seed": s.project.seed, "execute": s.section::<crate::agent::ExecuteSettings>(),
            "servers": super::server_hash_part(s)?,
        });
        Ok(Plan { inputs: pool_path(s).into_iter().collect(), config_hash: section_hash(&hash)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let sc = cfg(s);
        let rp = &sc.roleplay;
        let path = pool_path(s).context("`synth.roleplay.personas` is not set")?;
        let pool = read_pool(inputs.bytes(&path)?, &s.display_path(&path))?;
        let mut sessions = crate::logs::read_sessions(
            inputs.open_of(&crate::logs::split::GRAPH_SOURCE)?,
            "logs-split/graph_source.jsonl",
        )?;
        sessions.extend(crate::logs::read_sessions(
            inputs.open_of(&crate::logs::split::BENCHMARK)?,
            "logs-split/benchmark.jsonl",
        )?);
        let subs = sub_info(&sessions);
        let catalog: Vec<LogTool> = inputs.json(&crate::logs::import::CATALOG)?;
        let tools: BTreeMap<String, &LogTool> = catalog.iter().map(|t| (t.name.clone(), t)).collect();
        let logged = if sc.server.is_none() {
            crate::logs::read_sessions(inputs.open_of(&crate::logs::import::SESSIONS)?, "logs-import/sessions.jsonl")?
        } else {
            Vec::new()
        };
        // A goal needs a real sub-scenario: sessions without one (`unlabelled`, e.g. off-topic
        // ones the curation sample did not judge) are planned from only when nothing else is.
        let labelled: Vec<String> = subs.keys().filter(|k| *k != UNLABELLED).cloned().collect();
        let sub_names = if labelled.is_empty() { subs.keys().cloned().collect() } else { labelled };
        let plans = plan_dialogues(&pool, &sub_names, rp.dialogues, s.project.seed);

        let run_id = ctx.ledger_run()?;
        let opts = BatchOptions::new(STAGE, "dialogues", "dialogues")
            .concurrency(rp.concurrency.max(1))
            .max_failed_share(rp.max_failed_share, "synth.roleplay.max_failed_share")
            .fail_point("synth_dialogue");
        let mut batch = Batch::new(ctx, opts)?;
        let mut agent = AgentSettings::from(&s.section::<crate::agent::ExecuteSettings>().0);
        agent.role = sc.assistant_role.clone();
        let exec = batch.block_on(async {
            let clients = super::clients(s, &catalog, &logged)?;
            let recorder = Recorder::open(&s.artifacts, run_id, STAGE)?;
            Executor::connect(clients, agent, Some(recorder)).await
        })?;
        // What each server offered, so a release can pin the servers its samples ran against.
        exec.record_servers();
        let items: Vec<(String, Plan1)> = plans.iter().map(|p| (p.id.clone(), p.clone())).collect();
        let (ex, sc_ref, subs_ref, tools_ref) = (&exec, &sc, &subs, &tools);
        let done = batch.run(items, |plan: Plan1, llm: Item| async move {
            simulate(ex, sc_ref, subs_ref, tools_ref, plan, &llm).await
        });
        batch.block_on(exec.shutdown());
        drop(exec);
        let done = done?;

        // The goal's seed sessions: their split records (which lead on to curation and import).
        let splits = crate::ledger::Ledger::ids_by_subject_in(
            &s.artifacts,
            crate::logs::kind::SPLIT,
            ctx.manifest_of(crate::logs::split::STAGE).map(|m| m.run_id),
        )?;
        let mut lines = Vec::new();
        let mut dialogues = Vec::new();
        for (id, d) in &done.values {
            let payload = lineage_payload(&d.dialogue);
            let mut ev = NewEvent::new(super::kind::DIALOGUE, Some(&crate::model::Sample::subject_for(id)), payload);
            for e in &d.events {
                ev = ev.with_parent(Parent::Id(*e));
            }
            let seeds = subs.get(&d.dialogue.sub_scenario).map(|x| x.2.as_slice()).unwrap_or(&[]);
            for p in seeds.iter().filter_map(|x| splits.get(&crate::logs::subject(x)).and_then(|i| i.last())) {
                ev = ev.with_parent(Parent::Id(*p));
            }
            out.event(ev);
            serde_json::to_writer(&mut lines, &d.dialogue)?;
            lines.push(b'\n');
            dialogues.push(d.dialogue.clone());
        }
        batch.finish(out)?;
        out.file("dialogues.jsonl", lines);
        out.file("report.md", report(&dialogues, plans.len(), &sub_names).into_bytes());
        out.count("planned", plans.len());
        out.count("dialogues", dialogues.len());
        out.count("turns", dialogues.iter().map(|d| d.turns.len()).sum::<usize>());
        out.notes.push(format!(
            "{} of {} dialogues simulated ({} resumed)",
            dialogues.len(),
            plans.len(),
            done.resumed
        ));
        Ok(())
    }
}

/// The action a turn asked for and the assistant did not take (it answered without a
/// successful call), when the catalog has a tool for it.
fn unserved_action(t: &Trajectory, message: &str, names: &[String]) -> Option<&'static str> {
    unserved_request(t).and_then(|_| super::gold::asks_for_action(message, Some(names)))
}

/// What a planned request's second try adds to the user's message for the assistant.
pub const PLANNED_HINT: &str = "This request needs one of your tools: call it before you answer.";

/// A planned request the assistant answered without a successful call (`Some("do")`).
fn unserved_request(t: &Trajectory) -> Option<&'static str> {
    let acted = t.calls.iter().any(|c| matches!(c.outcome, crate::mcp::CallOutcome::Ok { .. }));
    (t.status == RunStatus::Answered && !acted).then_some("do")
}

/// The user simulator's message for turn `k` (0-based); `None` when it was asked again and
/// still repeats an earlier turn (the dialogue ends with the turns it has).
async fn ask_user(
    llm: &Item,
    sc: &SynthSettings,
    prompt: Prompt,
    part: &str,
    k: usize,
    earlier: Vec<String>,
    events: &mut Vec<i64>,
) -> Result<Option<crate::llm::Reply<UserTurn>>, ItemError> {
    match llm.ask(&sc.user_role, &prompt, Some(part), &user_answer(k == 0, earlier)).await {
        Ok(u) => Ok(Some(u)),
        Err(crate::llm::LlmError::Invalid { error, event_id, .. }) if k > 0 && error.contains(REPEATS) => {
            events.extend(event_id);
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// The planner's goal and plan for one dialogue.
async fn ask_goal(
    sc: &SynthSettings,
    subs: &BTreeMap<String, SubInfo>,
    tools: &BTreeMap<String, &LogTool>,
    plan: &Plan1,
    llm: &Item,
) -> Result<crate::llm::Reply<Goal>, ItemError> {
    let rp = &sc.roleplay;
    let (sub_tools, examples, _) = subs.get(&plan.sub_scenario).cloned().unwrap_or_default();
    let tool_vars: Vec<Value> = sub_tools
        .iter()
        .map(|t| json!({"name": t, "description": tools.get(t).map(|x| x.description.clone()).unwrap_or_default()}))
        .collect();
    let (min_requests, max_requests) = request_bounds(rp.turn_cap);
    let goal_prompt = Prompt::new(
        &rp.goal_template,
        json!({"persona": plan.persona, "sub_scenario": plan.sub_scenario, "tools": tool_vars, "examples": examples,
               "min_requests": min_requests, "max_requests": max_requests}),
    );
    let names: Vec<String> = tools.keys().cloned().collect();
    Ok(llm.ask(&sc.planner_role, &goal_prompt, Some("goal"), &goal_answer(rp.turn_cap, names)).await?)
}

/// A planned dialogue's message for turn `k`: the plan's request itself, or how the
/// dialogue ends before the turn: `plan` (no request left) or `repeated` (the request
/// repeats an earlier turn, which adds nothing, as when a simulator repeats itself).
fn planned_message(requests: &[String], k: usize, turns: &[DialogueTurn]) -> Result<String, &'static str> {
    let said: Vec<&str> = turns.iter().map(|t| t.user.as_str()).collect();
    match requests.get(k) {
        Some(r) if super::gold::repeats(&said, r).is_some() => Err("repeated"),
        Some(r) => Ok(r.clone()),
        None => Err("plan"),
    }
}

/// What the user simulator sees of a dialogue.
struct UserView<'a> {
    plan: &'a Plan1,
    goal: &'a str,
    requests: &'a [String],
    visible: &'a [Visible],
}

/// The simulator's message for turn `k` (try `attempt`, with the `note` of a first try the
/// assistant did not act on) and its exchange, or how the dialogue ends before the turn:
/// `repeated` (it still repeats an earlier turn) or `user` (it is done).
async fn simulated_message(
    llm: &Item,
    sc: &SynthSettings,
    user: &UserView<'_>,
    turns: &[DialogueTurn],
    (k, attempt, note): (usize, usize, Option<&str>),
    events: &mut Vec<i64>,
) -> Result<Result<(String, String), &'static str>, ItemError> {
    let rp = &sc.roleplay;
    // This turn's request from the goal's plan; past its end, the user may finish.
    let vars = json!({"persona": user.plan.persona, "goal": user.goal, "conversation": user.visible,
                      "requests": user.requests, "request": user.requests.get(k),
                      "turn": k + 1, "turn_cap": rp.turn_cap, "note": note});
    let part = if attempt == 0 { format!("user{}", k + 1) } else { format!("user{}-again", k + 1) };
    let earlier: Vec<String> = turns.iter().map(|t| t.user.clone()).collect();
    let prompt = Prompt::new(&rp.user_template, vars);
    let Some(u) = ask_user(llm, sc, prompt, &part, k, earlier, events).await? else {
        return Ok(Err("repeated"));
    };
    events.push(u.event_id);
    let message = u.value.message.trim().to_string();
    // The first turn always has a request; later, `done` (or nothing to say) ends it.
    if k > 0 && (u.value.done || message.is_empty()) {
        return Ok(Err("user"));
    }
    if message.is_empty() {
        return Err(ItemError::Failed("the user simulator wrote an empty first message".into()));
    }
    Ok(Ok((message, u.exchange)))
}

/// Checks a played turn's answer as `validate` will ([`super::gold::answer_problems`], with
/// no call left out: which are is `validate`'s to decide) and,
/// when it claims what its calls did not do, asks the assistant once again before the next
/// turn. A small assistant repeats its last answer: the demo's 1.5B answered who is on call
/// with "you would call the `acknowledge_alert` function …", and then gave the same words
/// to the next request, twice, so the dialogue ended after one turn. A second answer that
/// passes replaces the first in the conversation and in `turn` (whose `answer_asked_again`
/// then says why); otherwise the first stays (`validate` asks again or rejects).
/// `seen` is what the conversation showed before the turn; the turn is added to it.
/// `earlier` are the dialogue's turns before it: the re-ask shows the turn's request with
/// theirs, as `validate` does.
async fn answer_again(
    llm: &Item,
    sc: &SynthSettings,
    (k, earlier): (usize, &[DialogueTurn]),
    seen: &mut String,
    turn: &mut DialogueTurn,
    messages: &mut [ChatMessage],
    events: &mut Vec<i64>,
) -> Result<(), ItemError> {
    use super::gold;
    let message = turn.user.as_str();
    let request = gold::request_text(earlier.iter().map(|t| t.user.as_str()).chain([message]));
    let calls: Vec<&RecordedCall> = turn.groups.iter().flatten().collect();
    gold::see_turn(seen, message, &calls, &calls);
    // Nothing is left out of a turn yet (that is `validate`'s to decide).
    let conv = gold::Conversation { seen: seen.clone(), given: String::new(), kept: calls, left: vec![] };
    if let Some(first) = turn.answer.as_deref().filter(|_| turn.status == RunStatus::Answered)
        && let Some((claims, vars)) = gold::answer_problems(&conv, &request, first)
    {
        let prompt = Prompt::new(&sc.validate.answer_template, vars);
        let part = format!("answer{}", k + 1);
        // An answer the model could not give (refused by its check after the re-asks) leaves
        // the first one, as a second answer that fails the check does.
        let second = match llm.ask(&sc.assistant_role, &prompt, Some(&part), &gold::again_answer()).await {
            Ok(r) => {
                events.push(r.event_id);
                Some(r.value.answer.trim().to_string())
            }
            Err(e) if e.is_item_level() => {
                events.extend(e.event_id());
                None
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(second) = second.filter(|a| gold::answer_problems(&conv, &request, a).is_none()) {
            // The loop's last message is the answer it ended with.
            if let Some(ChatMessage::Assistant { content, .. }) = messages.last_mut() {
                *content = Some(second.clone());
            }
            turn.answer = Some(second);
            turn.answer_asked_again = Some(claims.join("; "));
        }
    }
    seen.push_str(turn.answer.as_deref().unwrap_or_default());
    seen.push('\n');
    Ok(())
}

/// Run the assistant on the user's `message` (`id` names the turn), sent with `hint`, which
/// stays out of the conversation: `messages` then hold the message as the user wrote it.
/// A call of an action that neither this message nor an `earlier` turn's asks for is
/// withheld (the turn's rules in `validate` would leave it out of the reference, and the
/// answer that reported it would then claim what the reference did not do): the demo's
/// 1.5B assigned the incident that "Find the open incident about notifications errors"
/// found, and messaged the on-call engineer it was only asked to name.
async fn assistant_turn(
    exec: &Executor,
    llm: &Item,
    (id, message, hint): (&str, &str, Option<&str>),
    earlier: &[DialogueTurn],
    messages: &mut Vec<ChatMessage>,
    events: &mut Vec<i64>,
) -> Trajectory {
    let before = messages.len();
    let sent = hint.map_or_else(|| message.to_string(), |h| format!("{message}\n\n({h})"));
    messages.push(ChatMessage::User(sent));
    let q = Query { id: id.to_string(), query: message.to_string(), chain: vec![] };
    let mut t = Trajectory::start(&q);
    let request = super::gold::request_text(earlier.iter().map(|t| t.user.as_str()).chain([message]));
    let guard = |tool: &str| super::gold::unrequested_action(&request, tool);
    let trace = exec.run_guarded(llm, &q.id, messages, &mut t, Some(&guard)).await;
    events.extend(trace.llm_events.iter().chain(&trace.call_events).copied());
    if hint.is_some() {
        messages[before] = ChatMessage::User(message.to_string());
    }
    t
}

/// Run one dialogue: goal, then user and assistant turns until done, the cap or a failure.
async fn simulate(
    exec: &Executor,
    sc: &SynthSettings,
    subs: &BTreeMap<String, SubInfo>,
    tools: &BTreeMap<String, &LogTool>,
    plan: Plan1,
    llm: &Item,
) -> Result<Done1, ItemError> {
    let rp = &sc.roleplay;
    let names: Vec<String> = tools.keys().cloned().collect();
    let goal = ask_goal(sc, subs, tools, &plan, llm).await?;
    let requests: Vec<String> = goal.value.requests.iter().map(|r| r.trim().to_string()).collect();
    let mut events = vec![goal.event_id];
    let mut messages = vec![ChatMessage::System(exec.system_prompt().to_string())];
    let mut visible: Vec<Visible> = Vec::new();
    let mut turns = Vec::new();
    let mut ended = "cap".to_string();
    let mut seen = String::new();
    let mut dropped = Vec::new();
    let planned = rp.user_turns == super::UserTurns::Planned;
    'turns: for k in 0..rp.turn_cap {
        // A turn that asks for an action the assistant does not take (no successful call) is
        // asked again once, with the reason; the second time the dialogue ends before it.
        let mut note: Option<String> = None;
        for attempt in 0..2 {
            let before = messages.len();
            let next = if planned {
                planned_message(&requests, k, &turns).map(|m| (m, goal.exchange.clone()))
            } else {
                let user = UserView { plan: &plan, goal: &goal.value.goal, requests: &requests, visible: &visible };
                simulated_message(llm, sc, &user, &turns, (k, attempt, note.as_deref()), &mut events).await?
            };
            let (message, user_exchange) = match next {
                Ok(m) => m,
                Err(end) => {
                    ended = end.into();
                    break 'turns;
                }
            };
            // A planned request's second try reminds the assistant that it needs a tool.
            let hint = (planned && attempt == 1).then_some(PLANNED_HINT);
            let id = format!("{}:turn{}", plan.id, k + 1);
            let t = assistant_turn(exec, llm, (&id, &message, hint), &turns, &mut messages, &mut events).await;
            // Every planned request asks for something a tool does (the plan's contract), so
            // an answer without a successful call leaves it undone; a simulated message only
            // when it asks for an action of the catalog.
            let unserved = if planned { unserved_request(&t) } else { unserved_action(&t, &message, &names) };
            if let Some(action) = unserved {
                messages.truncate(before);
                dropped.extend(t.withheld.iter().map(|w| (k + 1, w.clone())));
                if attempt == 0 {
                    note = (!planned).then(|| format!(
                        "Your last message (\"{}\") asked the assistant to {action} something, and it did not: ask again in other words, ask for something else your goal needs, or set `done` to true.",
                        crate::text::one_line(&message)
                    ));
                    continue;
                }
                ended = "no_action".into();
                break 'turns;
            }
            let mut turn = DialogueTurn::of(message, user_exchange, &t, hint);
            answer_again(llm, sc, (k, &turns), &mut seen, &mut turn, &mut messages, &mut events).await?;
            visible.push(Visible { role: "user", text: turn.user.clone() });
            if let Some(a) = &turn.answer {
                visible.push(Visible { role: "assistant", text: a.clone() });
            }
            let failed = turn.status != RunStatus::Answered;
            turns.push(turn);
            if failed {
                ended = "failed".into();
                break 'turns;
            }
            break;
        }
    }
    // A plan as long as the turn cap ends with the loop: it ended by the plan all the same.
    if planned && ended == "cap" && turns.len() == requests.len() {
        ended = "plan".into();
    }
    Ok(Done1 {
        dialogue: Dialogue {
            id: plan.id,
            sub_scenario: plan.sub_scenario,
            persona: plan.persona,
            goal: goal.value.goal,
            requests,
            goal_exchange: goal.exchange,
            turns,
            ended,
            withheld_in_dropped_tries: dropped,
        },
        events,
    })
}

/// A dialogue's `synth.dialogue` event payload. The reminders a planned turn's second try
/// was sent with and the calls withheld from the assistant are in no other event (neither
/// is part of the conversation), so the lineage is where an audit finds them; each key only
/// when given, so other dialogues' events stay as they were.
fn lineage_payload(d: &Dialogue) -> Value {
    let mut payload = json!({"sub_scenario": d.sub_scenario, "persona": d.persona,
                             "goal": d.goal, "requests": d.requests,
                             "turns": d.turns.len(), "ended": d.ended});
    let hints: Vec<Value> = (d.turns.iter().enumerate())
        .filter_map(|(k, t)| t.hint.as_ref().map(|h| json!({"turn": k + 1, "hint": h})))
        .collect();
    if !hints.is_empty() {
        payload["hints"] = json!(hints);
    }
    let withheld: Vec<Value> = (d.turns.iter().enumerate())
        .flat_map(|(k, t)| t.withheld.iter().map(move |w| json!({"turn": k + 1, "call": w})))
        .collect();
    if !withheld.is_empty() {
        payload["withheld"] = json!(withheld);
    }
    if !d.withheld_in_dropped_tries.is_empty() {
        let dropped: Vec<Value> =
            d.withheld_in_dropped_tries.iter().map(|(k, w)| json!({"turn": k, "call": w})).collect();
        payload["withheld_in_dropped_tries"] = json!(dropped);
    }
    payload
}

fn report(dialogues: &[Dialogue], planned: usize, subs: &[String]) -> String {
    let mut md = String::from("# Role-play dialogues\n\n");
    md.push_str(&format!("{} of {planned} planned dialogues simulated.\n\n", dialogues.len()));
    md.push_str(&format!("Sub-scenarios drawn from: {}.\n\n", subs.join(", ")));
    md.push_str("| id | sub-scenario | turns | tool calls | ended | goal |\n|---|---|---|---|---|---|\n");
    for d in dialogues {
        let calls: usize = d.turns.iter().map(|t| t.groups.iter().map(Vec::len).sum::<usize>()).sum();
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            d.id,
            d.sub_scenario,
            d.turns.len(),
            calls,
            d.ended,
            crate::text::one_line(&d.goal).replace('|', "\\|")
        ));
    }
    let again: Vec<String> = dialogues
        .iter()
        .flat_map(|d| {
            d.turns.iter().enumerate().filter_map(move |(i, t)| {
                t.answer_asked_again.as_ref().map(|why| format!("- `{}` turn {}: it {why}", d.id, i + 1))
            })
        })
        .collect();
    if !again.is_empty() {
        md.push_str(&format!(
            "\n## Answers asked again\n\n{} answer(s) claimed what the turn's calls did not do and were asked again once before the next turn; the second answer passed the check and replaced the first:\n\n{}\n",
            again.len(),
            again.join("\n")
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn goal(requests: &[&str]) -> Value {
        json!({"goal": "Find the on-call for database and message them", "requests": requests})
    }

    #[test]
    fn a_goal_plans_two_to_turn_cap_requests_none_blank() {
        let a = goal_answer(3, vec!["get_oncall".into(), "notify_user".into()]);
        assert_eq!(a.schema["properties"]["requests"]["minItems"], 2);
        assert_eq!(a.schema["properties"]["requests"]["maxItems"], 3);
        assert_eq!(a.schema["properties"]["requests"]["items"]["minLength"], 1);
        let two = a.accepts(&goal(&["Who is on call for database?", "Send them a message about the outage"])).unwrap();
        assert_eq!(two.requests.len(), 2);
        for (bad, why) in [
            (goal(&["Who is on call for database, and message them"]), "minItems"),
            (goal(&["a", "b", "c", "d"]), "maxItems"),
        ] {
            assert!(a.accepts(&bad).is_err(), "{why}: {bad}");
        }
        // What a server that ignores the schema may send: the check refuses it too.
        let blank: Goal = serde_json::from_value(goal(&["Who is on call for database?", "  "])).unwrap();
        assert!(a.run_check(&blank).unwrap_err().contains("request 2 is blank"));
        let one: Goal = serde_json::from_value(goal(&["Who is on call?"])).unwrap();
        assert!(a.run_check(&one).unwrap_err().contains("write 2 to 3"));
        // A dialogue of one turn at most plans one request.
        assert_eq!(request_bounds(1), (1, 1));
        assert!(goal_answer(1, vec![]).accepts(&goal(&["Who is on call for database?"])).is_ok());
        // A request that names a tool is the planner writing for the assistant.
        let named = a.accepts(&goal(&["Who is on call for database?", "notify_user with the outage"])).unwrap_err();
        assert!(named.contains("request 2 names the tool `notify_user`"), "{named}");
        // Named only as a whole identifier, and only a name no plain word is.
        assert!(names_tool("Please run Notify_User now", "notify_user"));
        assert!(names_tool("call `getQuote`.", "getQuote"));
        assert!(!names_tool("notify_users_all of it", "notify_user"), "inside a longer identifier");
        assert!(!names_tool("Search the web for the outage", "search"), "a plain word");
        assert!(!names_tool("Echo what I said", "echo"));
        assert!(!names_tool("Run this SQL on the sales table", "SQL"), "an acronym is a plain word");
        let plain = goal_answer(3, vec!["search".into(), "echo".into()]);
        assert!(plain.accepts(&goal(&["Search the web for it", "Echo it back"])).is_ok());
    }

    #[test]
    fn the_simulator_is_given_its_turn_s_request_and_told_when_the_plan_is_done() {
        let text = crate::llm::prompts::builtin("synth_user").expect("built in");
        let render = |turn: usize, request: Option<&str>| {
            let vars = json!({"persona": {"age": "30"}, "goal": "g", "conversation": [], "note": null,
                              "requests": ["Who is on call for database?", "Message them"], "request": request,
                              "turn": turn, "turn_cap": 3});
            crate::llm::render_template("synth_user", text, &vars).unwrap()
        };
        let first = render(1, Some("Who is on call for database?"));
        assert!(first.contains("1. Who is on call for database?\n2. Message them\n"), "{first}");
        assert!(first.contains("The request for this turn: Who is on call for database?"), "{first}");
        let past = render(3, None);
        assert!(past.contains("Every request of your plan has been made."), "{past}");
        assert!(!past.contains("The request for this turn"), "{past}");
    }
}
