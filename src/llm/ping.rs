//! `benchgen llm ping`: one live typed call per role, end to end (endpoint or local
//! server start, schema-constrained answer, validation, ledger record). With `--probe`, one
//! more per role the size of a stage's (stage `llm-probe`): the ping's few tokens time the
//! round trip, the probe's hundreds time what a stage's exchange costs here.

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{LlmClient, LlmMode, Prompt};
use crate::ledger::Ledger;
use crate::settings::Settings;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct PingAnswer {
    sum: i64,
}

/// The probe's answer: a tool of its catalog and why (its content is not checked: only its
/// time counts).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct ProbeAnswer {
    #[schemars(length(max = 40))]
    #[allow(dead_code)] // read by serde; the probe keeps only its latency
    tool: String,
    #[schemars(length(max = 300))]
    #[allow(dead_code)]
    reason: String,
}

/// The probe's catalog: about 500 tokens of data, as a stage's prompt carries (a tool list,
/// a session, a sample). Each role gets it rotated, so a local server reuses only the system
/// message from an earlier role's probe, as it would within a stage.
const PROBE_TOOLS: &[(&str, &str, &str)] = &[
    (
        "search_incidents",
        "Search incidents by free text and status; returns incident ids, titles and services.",
        "query (required), status: open, resolved or any",
    ),
    (
        "get_incident",
        "One incident with its severity, timeline, affected services and assignee.",
        "incident_id (required)",
    ),
    ("assign_incident", "Assign an incident to a team or a person.", "incident_id (required), team (required)"),
    ("acknowledge_alert", "Acknowledge a firing alert so that it stops paging.", "alert_id (required), note"),
    ("list_alerts", "Alerts of a service, firing or all, newest first.", "service (required), state: firing or all"),
    ("get_oncall", "Who is on call for a team now, with contact e-mail and phone.", "team (required)"),
    ("notify_user", "Send a message to a person by e-mail.", "email (required), message (required)"),
    (
        "list_deployments",
        "Recent deployments of a service with deployment ids and versions.",
        "service (required), limit",
    ),
    (
        "rollback_deployment",
        "Roll a service back to a previous deployment.",
        "deployment_id (required), reason (required)",
    ),
    ("get_host_metrics", "CPU, memory and disk of a host over the last hour.", "host (required)"),
    ("list_hosts", "Hosts serving a service, with their region and state.", "service (required)"),
    ("get_service_status", "A service's health checks, error rate and latency now.", "service (required)"),
];

/// The probe's variables for the `i`-th role.
fn probe_vars(i: usize) -> serde_json::Value {
    let n = PROBE_TOOLS.len();
    let tools: Vec<serde_json::Value> = (0..n)
        .map(|k| PROBE_TOOLS[(k + i) % n])
        .map(|(name, description, inputs)| json!({"name": name, "description": description, "inputs": [inputs]}))
        .collect();
    json!({"tools": tools, "request": PROBE_REQUESTS[i % PROBE_REQUESTS.len()]})
}

/// The probe's requests, one per role in turn.
const PROBE_REQUESTS: &[&str] = &[
    "Checkout has been throwing errors since the last release; find out what changed and undo it if needed.",
    "Who should I call about the database alerts that keep paging tonight?",
    "The notifications service looks slow; show me how it is doing right now.",
    "Find the open incident about payment timeouts and give it to the sre team.",
];

#[derive(Debug, Serialize)]
pub struct PingResult {
    pub role: String,
    pub ok: bool,
    /// The answer was schema-valid and arithmetically right.
    pub correct: bool,
    pub latency_ms: u64,
    pub detail: String,
    /// With `--probe`: the stage-sized exchange's latency…
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_ms: Option<u64>,
    /// … or why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_error: Option<String>,
}

impl PingResult {
    /// Why the role failed, in a few words: its ping, or (the ping answered) its probe.
    pub fn failure(&self) -> Option<&'static str> {
        match (self.ok, &self.probe_error) {
            (_, Some(_)) => Some("the probe"),
            (false, None) => Some("the ping"),
            (true, None) => None,
        }
    }
}

/// Ping one role or every configured role. Always live: a cached ping would prove nothing.
pub fn ping(settings: &Settings, role: Option<&str>, probe: bool) -> Result<Vec<PingResult>> {
    let roles: Vec<String> = match role {
        Some(r) => {
            if !settings.section::<crate::llm::LlmSettings>().roles.contains_key(r) {
                return Err(crate::error::hinted(
                    format!("no `[llm.roles.{r}]` in `{}`", settings.display_path(&settings.config_path)),
                    "add the role to the config, or name one that exists",
                ));
            }
            vec![r.to_string()]
        }
        None => settings.section::<crate::llm::LlmSettings>().roles.keys().cloned().collect(),
    };
    if roles.is_empty() {
        return Err(crate::error::hinted(
            "no LLM roles are configured",
            "add a `[llm.roles.NAME]` table (e.g. `provider = \"local\"`) to the pipeline config",
        ));
    }
    if settings.llm_mode == LlmMode::Replay {
        return Err(
            crate::error::UsageError("`llm ping` calls the endpoint; it cannot run in replay mode".into()).into()
        );
    }
    let ledger = Ledger::open(&settings.artifacts)?;
    let run = ledger.begin_run("llm-ping", "", crate::stage::CODE_VERSION)?;
    let probe_run = if probe { Some(ledger.begin_run("llm-probe", "", crate::stage::CODE_VERSION)?) } else { None };
    let rt = super::batch::runtime()?;
    let results = rt.block_on(async {
        let client = LlmClient::direct(settings, "llm-ping", run, LlmMode::Live)?;
        let prober = probe_run.map(|r| LlmClient::direct(settings, "llm-probe", r, LlmMode::Live)).transpose()?;
        let mut out = Vec::new();
        for (i, r) in roles.iter().enumerate() {
            let (a, b) = (17 + i as i64, 25);
            let started = std::time::Instant::now();
            let prompt = Prompt::new("llm-ping", json!({"a": a, "b": b}));
            let res = client.typed::<PingAnswer>(r, &prompt, &format!("ping:{r}")).await;
            let latency_ms = started.elapsed().as_millis() as u64;
            let (ok, correct, detail) = match res {
                Ok(reply) => (
                    true,
                    reply.value.sum == a + b,
                    format!("{a} + {b} = {} (ledger event #{})", reply.value.sum, reply.event_id),
                ),
                Err(e) => (false, false, e.to_string()),
            };
            let mut result =
                PingResult { role: r.clone(), ok, correct, latency_ms, detail, probe_ms: None, probe_error: None };
            // A role that cannot answer a ping is not probed: its failure is already said.
            if let Some(p) = prober.as_ref().filter(|_| result.ok) {
                let prompt = Prompt::new("llm-probe", probe_vars(i));
                let started = std::time::Instant::now();
                match p.typed::<ProbeAnswer>(r, &prompt, &format!("probe:{r}")).await {
                    Ok(_) => result.probe_ms = Some(started.elapsed().as_millis() as u64),
                    Err(e) => result.probe_error = Some(e.to_string()),
                }
            }
            out.push(result);
        }
        anyhow::Ok(out)
    });
    // Each run says how its own calls went.
    let status = |ok: bool| if ok { "ok" } else { "failed" };
    ledger.finish_run(run, status(results.as_ref().is_ok_and(|r| r.iter().all(|p| p.ok))))?;
    if let Some(r) = probe_run {
        ledger.finish_run(r, status(results.as_ref().is_ok_and(|r| r.iter().all(|p| p.probe_error.is_none()))))?;
    }
    results
}

pub fn render(results: &[PingResult]) -> String {
    results
        .iter()
        .map(|r| {
            let probe = match (r.probe_ms, &r.probe_error) {
                (Some(ms), _) => format!("; probe (a stage-sized exchange) {ms} ms"),
                (None, Some(e)) => format!("; probe FAILED: {e}"),
                (None, None) => String::new(),
            };
            format!(
                "{:<14} {:<6} {:>6} ms  {}{probe}\n",
                r.role,
                if r.failure().is_some() {
                    "FAILED"
                } else if r.correct {
                    "ok"
                } else {
                    "ok (wrong sum)"
                },
                r.latency_ms,
                r.detail
            )
        })
        .collect()
}
