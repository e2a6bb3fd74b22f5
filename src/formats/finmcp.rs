//! FinMCP wire types: a benchmark sample (`{id, scenery, diff_level, tool_list, messages,
//! first-class, sub-class, task, …}`) and its OpenAI-style chat messages.
//!
//! Sample files differ by task kind (single/multi-step samples carry `question`, `answer`
//! and `annotation`; multi-turn ones `task info`), so only the fields the pipeline reads are
//! named and the rest ride along in `extra`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{RecordId, present};

/// One FinMCP sample. `M` is the message type: [`Message`] to read or write the format,
/// `serde_json::Value` for a reader that cuts turns itself and keeps unreadable calls as
/// defects (score, whose compat mode must see what the published evaluator sees).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample<M = Message> {
    pub id: RecordId,
    /// `main class-sub class-scenario` (Chinese for single/multi-step, English for multi-turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenery: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_level: Option<DiffLevel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_list: Option<ToolList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The gold trajectory.
    pub messages: Vec<M>,
    #[serde(default, rename = "first-class", skip_serializing_if = "Option::is_none")]
    pub first_class: Option<String>,
    #[serde(default, rename = "sub-class", skip_serializing_if = "Option::is_none")]
    pub sub_class: Option<String>,
    /// `single step`, `multi step` or `multi turn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Fields this type does not name (`annotation`, `task info`, …), kept for the round trip.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `tool_list`: tool names per step (single/multi-step samples) or one flat list (multi-turn).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "a list of tool names or a list of lists of tool names")]
pub enum ToolList {
    Steps(Vec<Vec<String>>),
    Names(Vec<String>),
}

/// `diff_level`: the sample's size and its published difficulty label.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiffLevel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_number: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub para_tool_call_number: Option<u32>,
    /// `easy`, `medium` or `hard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One OpenAI-style chat message as FinMCP stores it. `content` and `tool_calls` tell an absent
/// key (`None`) from a `null` (`Some(Value::Null)`, `Some(None)`); the published files use both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// A text in samples; recorded trajectories also hold tool results as objects, and `null`.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// The model's thinking, when the trajectory kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Option<Vec<ToolCall>>>,
    /// On a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// On a `tool` message: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    /// The text content (empty when absent, `null` or not a text).
    pub fn text(&self) -> &str {
        self.content.as_ref().and_then(Value::as_str).unwrap_or("")
    }

    /// The tool calls of this message (none when absent or `null`).
    pub fn calls(&self) -> &[ToolCall] {
        self.tool_calls.as_ref().and_then(Option::as_deref).unwrap_or(&[])
    }
}

/// One tool call of an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Given in samples; some recorded trajectories leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub function: Function,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Position in the message's call list (FinMCP writes it; OpenAI requests omit it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Function {
    pub name: String,
    /// The arguments: a JSON text as OpenAI sends them (samples), or an object (some
    /// recorded trajectories).
    pub arguments: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_absent_stay_distinct() {
        for text in [
            r#"{"role":"assistant","tool_calls":null}"#,
            r#"{"role":"assistant"}"#,
            r#"{"role":"user","content":null}"#,
        ] {
            let m: Message = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&m).unwrap(), text);
            assert!(m.calls().is_empty());
        }
    }
}
