//! `[execute]`: the agent's own settings (role, call budget, prompts), read by the
//! `execute` stage and by `synth roleplay` (which swaps in its assistant role), so neither
//! stage imports the other.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::AgentSettings;
use crate::config_doc::Key;

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
    /// calls with neither calls nor text, or asks again only for calls it was given the
    /// results of (small models often stop or loop there); the request and its answer are
    /// in the ledger, the trajectory keeps only the answer. Empty: off.
    #[serde(default = "default_answer_nudge")]
    pub answer_nudge: String,
    /// Sent once, as a trailing system message, when the model's first reply of a turn has
    /// neither calls nor words (empty, or only markup such as `<tools></tools>`, which the
    /// demo's 1.5B agent answered "Find the open incident about notifications errors" with).
    /// Each nudge is sent once per turn at most. Empty: off.
    #[serde(default = "default_call_nudge")]
    pub call_nudge: String,
    /// Queries run at once (a tuning knob, not part of the config hash).
    #[serde(default = "default_concurrency", skip_serializing)]
    pub concurrency: usize,
}

/// `[execute]`; absent: its defaults.
impl crate::settings::Section for ExecuteSettings {
    const NAME: &'static str = "execute";
    type Value = crate::settings::Always<Self>;
    const KEYS: &'static [Key] = &[
        Key::unset(
            "queries",
            "path",
            "Queries file (relative to the root); `benchgen execute --queries` overrides it.",
        ),
        Key::new(
            "servers",
            "list of strings",
            "[]",
            "Servers whose tools the agent gets; empty: every configured server.",
        ),
        Key::new("role", "string", r#""agent""#, "LLM role of the agent."),
        Key::new("max_calls", "integer", "20", "Most tool calls executed per query."),
        Key::new(
            "stop_on_failure",
            "bool",
            "true",
            "A transport failure ends the query as failed (else it goes back to the model).",
        ),
        Key::new(
            "tool_result_chars",
            "integer",
            "8000",
            "Characters of a tool result passed back to the model (cut with a note).",
        ),
        Key::new(
            "system_prompt",
            "string",
            r#""You are an assistant with tools. Work through the user's request step by step: call the tool for the first step; when its result arrives, use the values in it (ids, names) to call the tool for the next step. Tools that do not depend on each other may be called in the same turn. Take no action the user did not ask for. Never make up a value (an id, a name, an e-mail address): use only what the request and the tool results give. Answer only when every step of the request is done.""#,
            "The agent's system message.",
        ),
        Key::new(
            "answer_nudge",
            "string",
            r#""Now answer the user in plain words, from the tool results above.""#,
            "Sent once when the model stops after tool calls with neither calls nor words, or repeats calls it has the results of; empty: off.",
        ),
        Key::new(
            "call_nudge",
            "string",
            r#""Reply with a tool call for the first step of the user's request, or answer in plain words.""#,
            "Sent once when the model's first reply of a turn has neither calls nor words (empty, or only markup such as `<tools></tools>`); empty: off.",
        ),
        Key::new("concurrency", "integer", "4", "Queries run at once (not hashed)."),
    ];
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
            call_nudge: default_call_nudge(),
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
/// What `benchgen eval` (and a release's Inspect AI task) adds to the agent's system prompt:
/// a benchmark asks requests no tool serves (an ETOM L5), and an agent told only to work
/// through every step calls some tool on each (the demo's panel did). Not in `execute`'s
/// prompt, whose queries each need their tools.
pub const NO_TOOL_FITS: &str = "If none of your tools can do what the user asks, say so and call none.";

fn default_system() -> String {
    // Step-by-step wording: with the older "gather what the request needs" prompt the 1.5B
    // local model answered after the first call of a two-step chain (docs/synth.md#the-demo).
    // "Take no action the user did not ask for": in a dialogue's first turn ("Find the open
    // incident about notifications errors") the 1.5B also resolved the incident and
    // acknowledged an alert, and its answer claimed both, so `validate` rejected the
    // dialogue; with the sentence it did one such call (left out of the plan) and the
    // dialogue was accepted (demo artifacts, 2026-12-06).
    // "Never make up a value": the on-call chain's message gave `Anna@company.com` while
    // `get_oncall` returned another address, and `validate` rejected it; with the sentence the
    // 1.5B sent the returned address and the chain was accepted (`execute --force` on the
    // demo's artifacts, 2026-12-06; one run of a nondeterministic server, not a proof).
    "You are an assistant with tools. Work through the user's request step by step: call the tool for \
     the first step; when its result arrives, use the values in it (ids, names) to call the tool for the \
     next step. Tools that do not depend on each other may be called in the same turn. Take no action \
     the user did not ask for. Never make up a value (an id, a name, an e-mail address): use only what \
     the request and the tool results give. Answer only when every step of the request is done."
        .into()
}

fn default_answer_nudge() -> String {
    "Now answer the user in plain words, from the tool results above.".into()
}

fn default_call_nudge() -> String {
    // Of two wordings tried by hand on the recorded request (2026-12-06), this one had the
    // 1.5B write the call; "Your reply was empty. Call the tool …" had it describe the call.
    "Reply with a tool call for the first step of the user's request, or answer in plain words.".into()
}

impl AgentSettings {
    /// Most LLM exchanges one run of the loop makes: each executes at least one tool call
    /// up to `max_calls`, then one answers (or meets the cap, or repeats calls already run),
    /// the call nudge may ask once more before the first call, and the answer nudge once
    /// after calls (after a blank reply or a repeat, not both).
    pub fn max_exchanges(&self) -> u64 {
        self.max_calls as u64 + 1 + u64::from(!self.answer_nudge.is_empty()) + u64::from(!self.call_nudge.is_empty())
    }
}

/// The agent runs with `[execute]`'s settings (synthesis swaps in its assistant role).
impl From<&ExecuteSettings> for AgentSettings {
    fn from(e: &ExecuteSettings) -> Self {
        AgentSettings {
            role: e.role.clone(),
            max_calls: e.max_calls,
            stop_on_failure: e.stop_on_failure,
            tool_result_chars: e.tool_result_chars,
            system_prompt: e.system_prompt.clone(),
            answer_nudge: e.answer_nudge.clone(),
            call_nudge: e.call_nudge.clone(),
            concurrency: e.concurrency,
        }
    }
}
