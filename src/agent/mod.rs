//! The LLM agent over MCP tools, shared by `execute` and `synth roleplay`: the loop, its
//! records, its settings (`[execute]`, [`ExecuteSettings`]) and where its tools come from.
//! Each caller builds the [`AgentSettings`] it runs with from them.
//!
//! The loop, per query: the model gets the system prompt, the query and every tool of the
//! selected servers as OpenAI `tools` (names mapped by [`names::ToolNames`]). Each
//! assistant message's tool calls run concurrently and form one parallel **group**; the
//! results go back as `tool` messages in call order; the loop stops at a reply without
//! tool calls (status `answered`) or when the next group would pass `max_calls`
//! (`cap_reached`; that group is recorded, not executed). A group whose every call repeats,
//! with the same arguments, one the loop already ran is not run again: small local models
//! ask for one call again and again until the cap, each exchange costing seconds. The
//! model gets the answer nudge (once per loop), else the loop ends as `repeated` (the
//! repeated calls are not recorded). A transport failure (crash, timeout, invalid
//! JSON-RPC, …) ends the query as `failed` when `stop_on_failure` (the default), with the
//! reason; an LLM failure does too. Tool errors (`isError`), unknown tool names and
//! non-object arguments go back to the model, which may correct itself.
//!
//! Every call is an `mcp.call` ledger event written as it finishes, with the LLM exchange
//! that asked for it as parent; each query ends with an `execute.trajectory` event whose
//! parents are its exchanges and calls.

mod executor;
pub mod names;
mod query;
mod record;
mod settings;

pub use executor::{Chat, Executor, Guard, Recorder, WITHHELD_ONLY, text_tool_calls};
pub use query::{ChainCheck, ChainStep, Query, check_chain, parse_queries};
pub use record::{
    CallRecord, LoopTrace, RunStatus, TRAJECTORIES, TRAJECTORY, Trajectory, Withheld, call_hash, recorded_groups,
    trajectory_summary,
};
pub use settings::{ExecuteSettings, NO_TOOL_FITS};

/// How the agent runs: built by the caller from its own section (`[execute]`, with
/// `[synth]`'s assistant role for synthesis), so the loop depends on no stage.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    /// LLM role (`[llm.roles.<role>]`).
    pub role: String,
    /// Most tool calls executed per query.
    pub max_calls: usize,
    /// A transport failure ends the query as failed (else it goes back to the model).
    pub stop_on_failure: bool,
    /// Characters of a tool result passed back to the model (cut with a note).
    pub tool_result_chars: usize,
    pub system_prompt: String,
    /// Sent once, as a trailing system message, when the model ends its turn after tool
    /// calls with neither calls nor words ([`executor::wordless`]), or asks again only for
    /// calls it was given the results of; empty: off.
    pub answer_nudge: String,
    /// Sent once, as a trailing system message, when the model's first reply of a turn has
    /// neither calls nor words ([`executor::wordless`]); empty: off.
    pub call_nudge: String,
    /// Queries [`Executor::run_all`] runs at once.
    pub concurrency: usize,
}

#[cfg(test)]
mod tests {
    /// Non-test source text of the `.rs` files under `src/<dir>` (or of `src/<dir>.rs`).
    fn source(dir: &str) -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = vec![root.join(format!("{dir}.rs"))];
        if let Ok(rd) = std::fs::read_dir(root.join(dir)) {
            files.extend(rd.flatten().map(|e| e.path()));
        }
        let mut out = String::new();
        for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "rs")) {
            if let Ok(text) = std::fs::read_to_string(f) {
                // Test modules may name anything.
                out.push_str(text.split("#[cfg(test)]").next().unwrap_or(""));
            }
        }
        out
    }

    #[test]
    fn the_agent_room_and_its_users_import_no_cycle() {
        let agent = source("agent");
        assert!(!agent.is_empty());
        for stage in ["crate::execute", "crate::synth", "config.execute", "config.synth"] {
            assert!(!agent.contains(stage), "the agent room names `{stage}`");
        }
        // execute runs synthesis' chain queries as synthesis declares (`execute::Feed`, handed
        // in by the stage list), so execute names no synthesis: synthesis imports execute.
        assert!(!source("execute").contains("crate::synth"), "execute imports synth");
        // explain reaches release through the stage list, so release must not import explain.
        assert!(!source("release").contains("crate::explain"), "release imports explain");
        assert!(!source("explain").contains("crate::release"), "explain imports release");
    }
}
