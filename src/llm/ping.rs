//! `benchgen llm ping`: one live typed call per role, end to end (endpoint or local
//! server start, schema-constrained answer, validation, ledger record).

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

#[derive(Debug, Serialize)]
pub struct PingResult {
    pub role: String,
    pub ok: bool,
    /// The answer was schema-valid and arithmetically right.
    pub correct: bool,
    pub latency_ms: u64,
    pub detail: String,
}

/// Ping one role or every configured role. Always live: a cached ping would prove nothing.
pub fn ping(settings: &Settings, role: Option<&str>) -> Result<Vec<PingResult>> {
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
    let rt = super::batch::runtime()?;
    let results = rt.block_on(async {
        let client = LlmClient::direct(settings, "llm-ping", run, LlmMode::Live)?;
        let mut out = Vec::new();
        for (i, r) in roles.iter().enumerate() {
            let (a, b) = (17 + i as i64, 25);
            let started = std::time::Instant::now();
            let prompt = Prompt::new("llm-ping", json!({"a": a, "b": b}));
            let res = client.typed::<PingAnswer>(r, &prompt, &format!("ping:{r}")).await;
            let latency_ms = started.elapsed().as_millis() as u64;
            out.push(match res {
                Ok(reply) => PingResult {
                    role: r.clone(),
                    ok: true,
                    correct: reply.value.sum == a + b,
                    latency_ms,
                    detail: format!("{a} + {b} = {} (ledger event #{})", reply.value.sum, reply.event_id),
                },
                Err(e) => PingResult { role: r.clone(), ok: false, correct: false, latency_ms, detail: e.to_string() },
            });
        }
        anyhow::Ok(out)
    });
    ledger.finish_run(run, if results.as_ref().is_ok_and(|r| r.iter().all(|p| p.ok)) { "ok" } else { "failed" })?;
    results
}

pub fn render(results: &[PingResult]) -> String {
    results
        .iter()
        .map(|r| {
            format!(
                "{:<14} {:<6} {:>6} ms  {}\n",
                r.role,
                if !r.ok {
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
