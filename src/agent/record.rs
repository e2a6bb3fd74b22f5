//! What a run of the agent leaves: the trajectory (calls, messages, status) and the
//! ledger's `mcp.call` and `execute.trajectory` events.
//!
//! A trajectory holds only what the same inputs and ledger reproduce byte for byte: it
//! names exchanges by request hash and calls by [`call_hash`]; timings and event ids
//! (which depend on how concurrent work interleaves, and on whether a kill made a reply
//! come from the ledger) stay in the ledger's `mcp.call` and `execute.trajectory` events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{ChainCheck, ChainStep, Query};
use crate::mcp::CallOutcome;

/// Ledger event kind of a finished query.
pub const TRAJECTORY: &str = "execute.trajectory";

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
    /// The model asked again, with the same arguments, only for calls whose results it was
    /// given (after the answer nudge, when there is one); those calls are not run again.
    Repeated,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Answered => "answered",
            RunStatus::CapReached => "cap_reached",
            RunStatus::Failed => "failed",
            RunStatus::Repeated => "repeated",
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
    /// Calls the model asked for that a guard withheld (role-play: actions the user did
    /// not ask for); never run, and not in `messages`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<Withheld>,
}

/// A call the model asked for and the loop did not run, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Withheld {
    /// The function name as the model wrote it.
    pub function: String,
    pub arguments: Value,
    pub reason: String,
}

/// What a run of the agent loop leaves for the ledger rather than the trajectory: event
/// ids and timings, which differ between reruns of the same inputs. Checkpointed with the
/// trajectory, so a resumed run records the trajectory event with the original parents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
            withheld: Vec::new(),
        }
    }
}

/// The counts of a trajectory that its ledger event and the `execute` summary rows hold.
pub fn trajectory_summary(t: &Trajectory) -> Value {
    json!({
        "status": t.status, "reason": t.reason, "calls": t.calls.len(), "groups": t.groups,
        "chain_preserved": t.chain_check.as_ref().map(|c| c.preserved),
    })
}

/// Every trajectory, one JSON line each in query order: written by the `execute` stage,
/// read by `validate`. Declared beside [`Trajectory`] so synthesis, which feeds `execute`,
/// reads it without importing the stage (that was an import cycle).
pub const TRAJECTORIES: crate::stage::Artifact<Trajectory> =
    crate::stage::Artifact::new("execute", "trajectories.jsonl");

/// An executed trajectory's calls as sequential groups of recorded calls (the unified
/// sample's `trajectory`): a call that did not succeed carries its reason in `error`.
pub fn recorded_groups(calls: &[CallRecord]) -> Vec<Vec<crate::model::RecordedCall>> {
    let mut groups: BTreeMap<usize, Vec<crate::model::RecordedCall>> = BTreeMap::new();
    for c in calls {
        let (result, error) = match &c.outcome {
            CallOutcome::Ok { output } => (Some(output.text.clone()), None),
            CallOutcome::ToolError { output } => {
                (Some(output.text.clone()), Some(format!("tool error: {}", output.text)))
            }
            CallOutcome::Failed { failure } => (None, Some(format!("call failed: {failure}"))),
        };
        let error = if c.executed || error.is_some() { error } else { Some("not executed".into()) };
        groups.entry(c.group).or_default().push(crate::model::RecordedCall {
            tool: c.tool_id.clone().unwrap_or_else(|| c.function.clone()),
            arguments: c.arguments.clone(),
            result,
            error,
            left_out: None,
        });
    }
    groups.into_values().collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_status_serialises_as_before() {
        use super::RunStatus;
        for (s, word) in [
            (RunStatus::Answered, "answered"),
            (RunStatus::CapReached, "cap_reached"),
            (RunStatus::Failed, "failed"),
            (RunStatus::Repeated, "repeated"),
        ] {
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(word));
            assert_eq!(serde_json::from_value::<RunStatus>(serde_json::json!(word)).unwrap(), s);
            assert_eq!(s.as_str(), word);
        }
    }
}
