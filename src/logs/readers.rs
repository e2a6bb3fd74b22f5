//! Log readers: FinMCP sample JSON, OpenAI chat-messages JSONL and generic event JSONL,
//! each streamed record by record into [`Session`]s (raw, before anonymisation).
//!
//! Memory stays bounded by the largest record, not the file: JSON arrays are walked
//! element by element with a serde visitor; JSONL is read line by line. Event logs may
//! interleave sessions, so the event reader makes two passes: the first indexes each
//! session's line offsets (a few bytes per event), the second reads one session's lines
//! back at a time, in session-id order.
//!
//! A record that cannot be read is reported as [`Item::Malformed`] with `file:line` and
//! a reason, and kept out; a readable record with a suspicious part (broken argument
//! JSON, an error result, a FinMCP `tool_list` that disagrees with its messages) is kept
//! with a [`Flag`].

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Map, Value};

use super::{Call, Flag, LogFormat, Session, Turn, flag};

/// What a reader yields.
#[derive(Debug)]
pub enum Item {
    Session(Box<Session>),
    Malformed { location: String, reason: String },
}

/// Read one source; `display` names the file in locations.
pub fn read_source(
    path: &Path,
    display: &str,
    source: &str,
    format: LogFormat,
    sink: &mut dyn FnMut(Item) -> Result<()>,
) -> Result<LogFormat> {
    // Every record of a UTF-16 file would be malformed: say what the file is instead.
    if let Some(enc) = other_encoding(path) {
        anyhow::bail!(
            "`{display}` is {enc} text (it starts with that byte-order mark); logs are read as UTF-8: \
             convert it (e.g. `iconv -f {} -t UTF-8`)",
            enc.split(' ').next().unwrap_or(enc)
        );
    }
    let format = match format {
        LogFormat::Auto => detect(path, display)?,
        f => f,
    };
    match format {
        LogFormat::Finmcp => read_json_array(path, display, source, sink)?,
        LogFormat::Openai => read_conversations(path, display, source, sink)?,
        LogFormat::Events => read_events(path, display, source, sink)?,
        LogFormat::Auto => unreachable!(),
    }
    Ok(format)
}

/// The UTF-8 byte-order mark some editors and spreadsheet programs write: skipped.
const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// The first (up to) 4 bytes of `path`; empty when it cannot be read.
pub fn head(path: &Path) -> Vec<u8> {
    let mut head = [0u8; 4];
    let Ok(mut f) = File::open(path) else { return Vec::new() };
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    head[..n].to_vec()
}

/// The encoding named by a byte-order mark other than UTF-8's at the start of `path`
/// (`UTF-16 LE`, `UTF-16 BE`, `UTF-32 LE`, `UTF-32 BE`), if any.
pub fn other_encoding(path: &Path) -> Option<&'static str> {
    bom_encoding(&head(path))
}

/// The non-UTF-8 encoding a byte-order mark at the start of `head` names.
pub fn bom_encoding(head: &[u8]) -> Option<&'static str> {
    // UTF-32 LE's mark starts with UTF-16 LE's: test the longer one first.
    match head {
        [0xff, 0xfe, 0, 0, ..] => Some("UTF-32 LE"),
        [0, 0, 0xfe, 0xff, ..] => Some("UTF-32 BE"),
        [0xff, 0xfe, ..] => Some("UTF-16 LE"),
        [0xfe, 0xff, ..] => Some("UTF-16 BE"),
        _ => None,
    }
}

/// A line's content: a UTF-8 byte-order mark and surrounding white space removed.
fn content(line: &[u8]) -> &[u8] {
    let t = line.trim_ascii();
    t.strip_prefix(UTF8_BOM).unwrap_or(t).trim_ascii()
}

/// `[` → FinMCP JSON array; a first line with `messages` → OpenAI JSONL; with `tool` and
/// `session` → events.
pub fn detect(path: &Path, display: &str) -> Result<LogFormat> {
    let f = File::open(path).with_context(|| format!("cannot open log `{display}`"))?;
    let mut r = BufReader::new(f);
    let mut line = Vec::new();
    let mut n = 0;
    loop {
        line.clear();
        n += 1;
        if r.read_until(b'\n', &mut line).with_context(|| format!("cannot read log `{display}`"))? == 0 {
            anyhow::bail!("`{display}` is empty: cannot tell its log format (set `format` on the source)");
        }
        let t = content(&line);
        if t.is_empty() {
            continue;
        }
        if t[0] == b'[' {
            return Ok(LogFormat::Finmcp);
        }
        let v: Value = match crate::json::value_from_slice(t) {
            Ok(v) => v,
            // One JSON object over several lines (a catalog, a config) is no log: say so
            // rather than that its first line ends early.
            Err(_) if t[0] == b'{' && one_json_object(path) => anyhow::bail!(
                "`{display}` is one JSON object over several lines, not a log (one record per line, or a JSON array of FinMCP samples)"
            ),
            Err(e) => anyhow::bail!(
                "`{display}:{n}`: cannot tell the log format: the first record is not JSON ({}); set `format` on the source",
                serde_msg(&e)
            ),
        };
        if v.get("messages").is_some() {
            return Ok(LogFormat::Openai);
        }
        if v.get("tool").is_some() && v.get("session").is_some() {
            return Ok(LogFormat::Events);
        }
        anyhow::bail!(
            "`{display}:{n}`: cannot tell the log format: the first record has neither `messages` nor `session` + `tool`; set `format` on the source"
        );
    }
}

/// Whether the whole file at `path` is one JSON object.
fn one_json_object(path: &Path) -> bool {
    let Ok(f) = File::open(path) else { return false };
    serde_json::from_reader::<_, Value>(BufReader::new(f)).is_ok_and(|v| v.is_object())
}

// ---------------------------------------------------------------------------
// JSON arrays (FinMCP sample files), streamed element by element.

struct Counting<R> {
    inner: R,
    lines: std::rc::Rc<std::cell::Cell<usize>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let nl = buf[..n].iter().filter(|b| **b == b'\n').count();
        self.lines.set(self.lines.get() + nl);
        Ok(n)
    }
}

struct ArrayVisitor<'a> {
    lines: std::rc::Rc<std::cell::Cell<usize>>,
    display: &'a str,
    source: &'a str,
    sink: &'a mut dyn FnMut(Item) -> Result<()>,
    fatal: &'a mut Option<anyhow::Error>,
}

impl<'de> serde::de::Visitor<'de> for ArrayVisitor<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array of FinMCP samples")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            let start = self.lines.get() + 1;
            // Duplicate keys end the read with their key and line (crate::json).
            let Some(v) = seq.next_element_seed(crate::json::Strict)? else { break };
            let end = self.lines.get() + 1;
            let location = if start == end {
                format!("{}:{start}", self.display)
            } else {
                format!("{}:{start}-{end}", self.display)
            };
            let item = match record_to_session(&v, self.source, "finmcp", &location, &format!("{index}")) {
                Ok(s) => Item::Session(Box::new(s)),
                Err(reason) => Item::Malformed { location: format!("{location} (record {index})"), reason },
            };
            if let Err(e) = (self.sink)(item) {
                *self.fatal = Some(e);
                return Err(serde::de::Error::custom("stopped"));
            }
            index += 1;
        }
        Ok(())
    }
}

fn read_json_array(path: &Path, display: &str, source: &str, sink: &mut dyn FnMut(Item) -> Result<()>) -> Result<()> {
    let f = File::open(path).with_context(|| format!("cannot open log `{display}`"))?;
    let lines = std::rc::Rc::new(std::cell::Cell::new(0));
    let mut inner = BufReader::with_capacity(1 << 16, f);
    if inner.fill_buf().with_context(|| format!("cannot read `{display}`"))?.starts_with(UTF8_BOM) {
        inner.consume(UTF8_BOM.len());
    }
    let reader = Counting { inner, lines: lines.clone() };
    let mut de = serde_json::Deserializer::from_reader(reader);
    let mut fatal = None;
    let r =
        serde::Deserializer::deserialize_seq(&mut de, ArrayVisitor { lines, display, source, sink, fatal: &mut fatal });
    if let Some(e) = fatal {
        return Err(e);
    }
    r.map_err(|e| {
        anyhow::anyhow!(
            "`{display}:{}`: the FinMCP file is not a valid JSON array of samples: {e}; the records before this point were read, nothing was imported",
            e.line()
        )
    })?;
    de.end().map_err(|e| anyhow::anyhow!("`{display}:{}`: trailing data after the JSON array: {e}", e.line()))?;
    Ok(())
}

// ---------------------------------------------------------------------------
// JSONL conversations (OpenAI chat messages; FinMCP samples one per line also work).

fn read_conversations(
    path: &Path,
    display: &str,
    source: &str,
    sink: &mut dyn FnMut(Item) -> Result<()>,
) -> Result<()> {
    let f = File::open(path).with_context(|| format!("cannot open log `{display}`"))?;
    let mut r = BufReader::with_capacity(1 << 16, f);
    let mut buf = Vec::new();
    let mut n = 0usize;
    loop {
        buf.clear();
        if r.read_until(b'\n', &mut buf).with_context(|| format!("cannot read `{display}`"))? == 0 {
            break;
        }
        n += 1;
        let t = content(&buf);
        if t.is_empty() {
            continue;
        }
        let location = format!("{display}:{n}");
        let item = match crate::json::value_from_slice(t) {
            Err(e) => Item::Malformed { location, reason: format!("not JSON: {}", serde_msg(&e)) },
            Ok(v) => match record_to_session(&v, source, "openai", &location, &format!("L{n}")) {
                Ok(s) => Item::Session(Box::new(s)),
                Err(reason) => Item::Malformed { location, reason },
            },
        };
        sink(item)?;
    }
    Ok(())
}

/// serde_json's message without the echoed input (which could hold personal data); a
/// duplicate key (crate::json) is named, as keys are field names, not values.
fn serde_msg(e: &serde_json::Error) -> String {
    let s = e.to_string();
    if s.starts_with("duplicate key `") {
        return s.split(" at line").next().map_or(s.clone(), |k| format!("{k} at column {}", e.column()));
    }
    format!("{:?} error at column {}", e.classify(), e.column())
}

fn scalar_id(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// One conversation record (FinMCP sample or OpenAI line) → a session.
pub fn record_to_session(
    v: &Value,
    source: &str,
    format: &str,
    location: &str,
    fallback_id: &str,
) -> Result<Session, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("a record must be a JSON object, found {}", crate::error::json_type_name(v)))?;
    let messages = obj
        .get("messages")
        .ok_or("no `messages` field")?
        .as_array()
        .ok_or("`messages` must be a list of chat messages")?;
    let native = ["id", "task_id", "session", "conversation_id"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(scalar_id))
        .unwrap_or_else(|| fallback_id.to_string());
    let mut flags = Vec::new();
    let turns = turns_from_messages(messages, &mut flags)?;
    let scenario =
        ["scenery", "scenario"].iter().find_map(|k| obj.get(*k).and_then(Value::as_str)).map(|s| s.trim().to_string());
    let feedback = match obj.get("feedback").map(feedback_value) {
        Some(Feedback::Given(b)) => Some(b),
        Some(Feedback::Unrecognised(kind)) => {
            flags.push(unrecognised_feedback(kind));
            None
        }
        Some(Feedback::Absent) | None => None,
    }
    .or_else(|| obj.get("annotation").and_then(|a| a.get("最终分数")).and_then(Value::as_f64).map(|x| x > 0.0));
    if let Some(tl) = obj.get("tool_list").or_else(|| obj.get("tool_path")) {
        check_tool_list(tl, &turns, obj.contains_key("tool_path"), &mut flags);
    }
    let mut meta = Map::new();
    for (k, val) in obj {
        if matches!(
            k.as_str(),
            "messages"
                | "messages_list"
                | "scenery"
                | "scenario"
                | "feedback"
                | "id"
                | "task_id"
                | "session"
                | "conversation_id"
        ) {
            continue;
        }
        meta.insert(k.clone(), val.clone());
    }
    Ok(Session {
        id: format!("{source}:{native}"),
        source: source.into(),
        format: format.into(),
        location: location.into(),
        scenario,
        feedback,
        turns,
        flags,
        meta,
    })
}

/// What a `feedback` value says (the mapping of docs/logs.md, "Feedback").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedback {
    /// `true`: the user was satisfied.
    Given(bool),
    /// `null` or empty text: no feedback.
    Absent,
    /// A value of this kind that says nothing benchgen reads (counted, flagged, ignored).
    Unrecognised(&'static str),
}

/// Words read as positive / negative feedback (compared trimmed, case-insensitively).
pub const POSITIVE_FEEDBACK: &[&str] =
    &["true", "yes", "up", "good", "positive", "satisfied", "thumbs_up", "thumbs up", "like", "1", "+1", "👍"];
pub const NEGATIVE_FEEDBACK: &[&str] = &[
    "false",
    "no",
    "down",
    "bad",
    "negative",
    "unsatisfied",
    "thumbs_down",
    "thumbs down",
    "dislike",
    "0",
    "-1",
    "👎",
];

/// A feedback field: a bool, a number (> 0 is positive, else negative), a word of
/// [`POSITIVE_FEEDBACK`] or [`NEGATIVE_FEEDBACK`], `null` (none); anything else is
/// [`Feedback::Unrecognised`].
pub fn feedback_value(v: &Value) -> Feedback {
    match v {
        Value::Null => Feedback::Absent,
        Value::Bool(b) => Feedback::Given(*b),
        Value::Number(n) => n.as_f64().map_or(Feedback::Unrecognised("number"), |x| Feedback::Given(x > 0.0)),
        Value::String(s) => {
            // Emoji come with a presentation selector or a skin tone as often as without.
            let w = s.trim().trim_end_matches(|c| matches!(c, '\u{fe0f}' | '\u{1f3fb}'..='\u{1f3ff}')).to_lowercase();
            if w.is_empty() {
                Feedback::Absent
            } else if POSITIVE_FEEDBACK.contains(&w.as_str()) {
                Feedback::Given(true)
            } else if NEGATIVE_FEEDBACK.contains(&w.as_str()) {
                Feedback::Given(false)
            } else {
                Feedback::Unrecognised("text")
            }
        }
        Value::Array(_) => Feedback::Unrecognised("list"),
        Value::Object(_) => Feedback::Unrecognised("object"),
    }
}

/// The session flag of a `feedback` value that was not understood (its value is never
/// quoted: it could hold personal data).
fn unrecognised_feedback(kind: &str) -> Flag {
    Flag::new(
        flag::UNRECOGNISED_FEEDBACK,
        format!("a `feedback` {kind} value that is not a recognised signal was ignored (docs/logs.md, \"Feedback\")"),
    )
}

/// Compare a FinMCP `tool_list` with the groups derived from the messages.
fn check_tool_list(tl: &Value, turns: &[Turn], is_path: bool, flags: &mut Vec<Flag>) {
    let derived: Vec<Vec<String>> =
        turns.iter().flat_map(|t| t.groups.iter().map(|g| g.iter().map(|c| c.tool.clone()).collect())).collect();
    let Some(list) = tl.as_array() else {
        flags.push(Flag::new(flag::TOOL_LIST_MISMATCH, "`tool_list` is not a list; groups taken from the messages"));
        return;
    };
    let grouped = !list.is_empty() && list.iter().all(Value::is_array);
    if grouped {
        let given: Vec<Vec<String>> = list
            .iter()
            .map(|g| g.as_array().into_iter().flatten().map(|x| x.as_str().unwrap_or("").to_string()).collect())
            .collect();
        if given != derived {
            flags.push(Flag::new(
                flag::TOOL_LIST_MISMATCH,
                format!("`tool_list` has {} groups that differ from the {} groups in the messages; the messages' groups are used", given.len(), derived.len()),
            ));
        }
        return;
    }
    let names: Vec<String> = list.iter().map(|x| x.as_str().unwrap_or("").to_string()).collect();
    let flat: Vec<String> = derived.iter().flatten().cloned().collect();
    if is_path {
        if names != flat {
            flags.push(Flag::new(
                flag::TOOL_LIST_MISMATCH,
                "`tool_path` differs from the call sequence in the messages",
            ));
        }
        return;
    }
    let mut distinct = flat.clone();
    distinct.sort();
    distinct.dedup();
    let detail = if names == distinct {
        "flat, sorted `tool_list` of distinct names (no grouping); groups derived from the messages".to_string()
    } else {
        format!(
            "flat `tool_list` ({} names) that does not match the {} distinct tools called; groups derived from the messages",
            names.len(),
            distinct.len()
        )
    };
    flags.push(Flag::new(flag::TOOL_LIST_FLAT, detail));
}

fn text_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str).or(p.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Tool calls as logged: a list, a JSON string, or a Python literal string (some FinMCP
/// trajectories were written with Python's `repr`).
fn tool_calls_of(v: &Value) -> Result<Vec<Value>, String> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => Ok(a.clone()),
        Value::String(s) if s.trim().is_empty() => Ok(Vec::new()),
        Value::String(s) => match serde_json::from_str::<Value>(s).or_else(|_| py_literal(s)) {
            Ok(Value::Array(a)) => Ok(a),
            Ok(other) => Err(format!("`tool_calls` text is {}, not a list", crate::error::json_type_name(&other))),
            Err(e) => Err(format!("`tool_calls` text is neither JSON nor a Python literal: {e}")),
        },
        other => Err(format!("`tool_calls` must be a list, found {}", crate::error::json_type_name(other))),
    }
}

/// Error-looking tool results: `{"error": …}`, FinMCP's "调用失败" (call failed), `Error: …`.
pub fn error_in_result(text: &str) -> Option<String> {
    let t = text.trim();
    if t == "调用失败" || t.starts_with("Error") || t.starts_with("error:") || t.starts_with("ERROR") {
        return Some(t.chars().take(200).collect());
    }
    if t.starts_with('{')
        && let Ok(Value::Object(o)) = serde_json::from_str::<Value>(t)
        && let Some(e) = o.get("error").filter(|e| !e.is_null() && **e != Value::Bool(false))
    {
        return Some(text_of(Some(e)).chars().take(200).collect());
    }
    None
}

/// Parse arguments; broken JSON is kept as text and flagged.
pub fn arguments_of(v: Option<&Value>, flags: &mut Vec<Flag>) -> Value {
    match v {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(x) => x,
            Err(e) => {
                flags.push(Flag::new(flag::BAD_ARGUMENTS, format!("arguments are not valid JSON: {}", serde_msg(&e))));
                Value::String(s.clone())
            }
        },
        Some(other) => other.clone(),
    }
}

fn turns_from_messages(messages: &[Value], session_flags: &mut Vec<Flag>) -> Result<Vec<Turn>, String> {
    let mut turns: Vec<Turn> = Vec::new();
    // call id → (turn, group, index)
    let mut ids: HashMap<String, (usize, usize, usize)> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).ok_or_else(|| format!("messages[{i}] has no `role`"))?;
        match role {
            "system" => {}
            "user" => turns.push(Turn { user: text_of(m.get("content")), groups: Vec::new(), answer: None }),
            "assistant" => {
                if turns.is_empty() {
                    turns.push(Turn { user: String::new(), groups: Vec::new(), answer: None });
                }
                let calls = tool_calls_of(m.get("tool_calls").unwrap_or(&Value::Null))
                    .map_err(|e| format!("messages[{i}]: {e}"))?;
                let ti = turns.len() - 1;
                if calls.is_empty() {
                    let c = text_of(m.get("content"));
                    if !c.trim().is_empty() {
                        turns[ti].answer = Some(c);
                    }
                    continue;
                }
                let gi = turns[ti].groups.len();
                let mut group = Vec::new();
                for (j, c) in calls.iter().enumerate() {
                    let f = c.get("function").unwrap_or(c);
                    let name = f.get("name").and_then(Value::as_str).map(str::trim).filter(|n| !n.is_empty());
                    let name = name.ok_or_else(|| format!("messages[{i}].tool_calls[{j}] has no function name"))?;
                    let mut flags = Vec::new();
                    let arguments = arguments_of(f.get("arguments"), &mut flags);
                    if let Some(id) = c.get("id").and_then(Value::as_str) {
                        ids.insert(id.to_string(), (ti, gi, j));
                    }
                    group.push(Call {
                        tool: name.to_string(),
                        arguments,
                        result: None,
                        error: None,
                        ts_start: None,
                        ts_end: None,
                        flags,
                    });
                }
                turns[ti].groups.push(group);
            }
            "tool" | "function" => {
                let content = text_of(m.get("content"));
                let target =
                    m.get("tool_call_id").and_then(Value::as_str).and_then(|id| ids.get(id).copied()).or_else(|| {
                        // No id: the first call of the latest group still without a result.
                        let ti = turns.len().checked_sub(1)?;
                        let gi = turns[ti].groups.len().checked_sub(1)?;
                        let ci = turns[ti].groups[gi].iter().position(|c| c.result.is_none() && c.error.is_none())?;
                        Some((ti, gi, ci))
                    });
                match target {
                    Some((ti, gi, ci)) => {
                        let call = &mut turns[ti].groups[gi][ci];
                        if let Some(e) = error_in_result(&content) {
                            call.error = Some(e);
                            call.flags.push(Flag::new(flag::ERROR_RESULT, "the tool result is an error"));
                        }
                        call.result = Some(content);
                    }
                    None => session_flags
                        .push(Flag::new("orphan-result", format!("messages[{i}]: a tool result matches no call"))),
                }
            }
            other => return Err(format!("messages[{i}] has unknown role `{other}`")),
        }
    }
    for t in &mut turns {
        for c in t.groups.iter_mut().flatten() {
            if c.result.is_none() && c.error.is_none() {
                c.flags.push(Flag::new(flag::NO_RESULT, "no tool result was logged for this call"));
            }
        }
    }
    Ok(turns)
}

/// A Python literal (dict, list, str, int, float, True/False/None) as JSON.
pub fn py_literal(s: &str) -> Result<Value, String> {
    let b: Vec<char> = s.chars().collect();
    let mut p = Py { b: &b, i: 0 };
    let v = p.value()?;
    p.ws();
    if p.i != b.len() {
        return Err(format!("trailing text at character {}", p.i));
    }
    Ok(v)
}

struct Py<'a> {
    b: &'a [char],
    i: usize,
}

impl Py<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_whitespace() {
            self.i += 1;
        }
    }
    fn peek(&self) -> Option<char> {
        self.b.get(self.i).copied()
    }
    fn expect(&mut self, c: char) -> Result<(), String> {
        self.ws();
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected `{c}` at character {}", self.i))
        }
    }
    fn value(&mut self) -> Result<Value, String> {
        self.ws();
        match self.peek().ok_or("unexpected end")? {
            '{' => {
                self.i += 1;
                let mut m = Map::new();
                loop {
                    self.ws();
                    if self.peek() == Some('}') {
                        self.i += 1;
                        return Ok(Value::Object(m));
                    }
                    let k = match self.value()? {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    self.expect(':')?;
                    let v = self.value()?;
                    m.insert(k, v);
                    self.ws();
                    if self.peek() == Some(',') {
                        self.i += 1;
                    }
                }
            }
            '[' | '(' => {
                let close = if self.peek() == Some('[') { ']' } else { ')' };
                self.i += 1;
                let mut a = Vec::new();
                loop {
                    self.ws();
                    if self.peek() == Some(close) {
                        self.i += 1;
                        return Ok(Value::Array(a));
                    }
                    a.push(self.value()?);
                    self.ws();
                    if self.peek() == Some(',') {
                        self.i += 1;
                    }
                }
            }
            q @ ('\'' | '"') => {
                self.i += 1;
                let mut s = String::new();
                loop {
                    let c = self.peek().ok_or("unterminated string")?;
                    self.i += 1;
                    match c {
                        '\\' => {
                            let e = self.peek().ok_or("unterminated escape")?;
                            self.i += 1;
                            s.push(match e {
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                'u' => {
                                    let hex: String =
                                        self.b.get(self.i..self.i + 4).ok_or("bad \\u escape")?.iter().collect();
                                    self.i += 4;
                                    char::from_u32(u32::from_str_radix(&hex, 16).map_err(|_| "bad \\u escape")?)
                                        .unwrap_or('\u{fffd}')
                                }
                                other => other,
                            });
                        }
                        c if c == q => return Ok(Value::String(s)),
                        c => s.push(c),
                    }
                }
            }
            _ => {
                let start = self.i;
                while self.i < self.b.len()
                    && !matches!(self.b[self.i], ',' | ':' | '}' | ']' | ')')
                    && !self.b[self.i].is_whitespace()
                {
                    self.i += 1;
                }
                let word: String = self.b[start..self.i].iter().collect();
                match word.as_str() {
                    "True" => Ok(Value::Bool(true)),
                    "False" => Ok(Value::Bool(false)),
                    "None" => Ok(Value::Null),
                    w => serde_json::from_str::<serde_json::Number>(w).map(Value::Number).map_err(|_| {
                        format!("unexpected `{}` at character {start}", w.chars().take(20).collect::<String>())
                    }),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Generic event JSONL.

/// One event line.
#[derive(Debug, serde::Deserialize)]
struct EventLine {
    session: Value,
    tool: String,
    ts_start: Value,
    #[serde(default)]
    ts_end: Option<Value>,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    group: Option<Value>,
    #[serde(default)]
    turn: Option<i64>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    answer: Option<String>,
    #[serde(default)]
    scenario: Option<String>,
    #[serde(default)]
    feedback: Option<Value>,
    #[serde(default)]
    meta: Option<Map<String, Value>>,
}

/// RFC 3339 text or epoch milliseconds → epoch milliseconds.
pub fn timestamp_ms(v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => n.as_i64().ok_or_else(|| format!("timestamp {n} is not whole epoch milliseconds")),
        Value::String(s) => s
            .trim()
            .parse::<jiff::Timestamp>()
            .map(|t| t.as_millisecond())
            .map_err(|e| format!("timestamp is not RFC 3339: {e}")),
        other => Err(format!(
            "timestamp must be RFC 3339 text or epoch milliseconds, found {}",
            crate::error::json_type_name(other)
        )),
    }
}

struct Parsed {
    line: usize,
    ev: EventLine,
    start: i64,
    end: i64,
}

fn parse_event(bytes: &[u8]) -> Result<(EventLine, i64, i64), String> {
    // A duplicate key is refused, not last-one-wins (serde's derive skips unknown ones).
    crate::json::check_unique_keys(bytes).map_err(|e| format!("not JSON: {}", serde_msg(&e)))?;
    let ev: EventLine = serde_json::from_slice(bytes).map_err(|e| {
        if e.is_data() {
            format!("not an event record: {}", data_msg(&e))
        } else {
            format!("not JSON: {}", serde_msg(&e))
        }
    })?;
    if scalar_id(&ev.session).is_none() {
        return Err("`session` must be a non-empty string or a number".into());
    }
    if ev.tool.trim().is_empty() {
        return Err("`tool` is empty".into());
    }
    let start = timestamp_ms(&ev.ts_start).map_err(|e| format!("`ts_start`: {e}"))?;
    let end = match &ev.ts_end {
        Some(v) if !v.is_null() => timestamp_ms(v).map_err(|e| format!("`ts_end`: {e}"))?,
        _ => start,
    };
    if end < start {
        return Err("`ts_end` is before `ts_start`".into());
    }
    Ok((ev, start, end))
}

/// A serde data error names the field but may quote the value: keep only the field part.
fn data_msg(e: &serde_json::Error) -> String {
    let s = e.to_string();
    let s = s.split(" at line").next().unwrap_or(&s);
    if s.starts_with("missing field") || s.starts_with("unknown field") || s.starts_with("duplicate field") {
        s.to_string()
    } else {
        format!("a field has the wrong type (column {})", e.column())
    }
}

fn read_events(path: &Path, display: &str, source: &str, sink: &mut dyn FnMut(Item) -> Result<()>) -> Result<()> {
    let f = File::open(path).with_context(|| format!("cannot open log `{display}`"))?;
    let mut r = BufReader::with_capacity(1 << 16, f);
    // Pass 1: validate, index (offset, length, line) per session.
    let mut index: HashMap<String, Vec<(u64, u32, u32)>> = HashMap::new();
    let mut buf = Vec::new();
    let (mut off, mut n) = (0u64, 0u32);
    loop {
        buf.clear();
        let len = r.read_until(b'\n', &mut buf).with_context(|| format!("cannot read `{display}`"))?;
        if len == 0 {
            break;
        }
        n += 1;
        let t = content(&buf);
        if !t.is_empty() {
            match parse_event(t) {
                Ok((ev, _, _)) => {
                    index.entry(scalar_id(&ev.session).unwrap_or_default()).or_default().push((off, len as u32, n))
                }
                Err(reason) => sink(Item::Malformed { location: format!("{display}:{n}"), reason })?,
            }
        }
        off += len as u64;
    }
    let mut keys: Vec<String> = index.keys().cloned().collect();
    keys.sort();
    // Pass 2: one session at a time.
    let mut f = r.into_inner();
    for key in keys {
        let mut events = Vec::new();
        for &(o, len, line) in &index[&key] {
            let mut b = vec![0u8; len as usize];
            f.seek(SeekFrom::Start(o))?;
            f.read_exact(&mut b).with_context(|| format!("`{display}` changed while it was read"))?;
            let (ev, start, end) = parse_event(content(&b))
                .map_err(|e| anyhow::anyhow!("`{display}:{line}` changed while it was read: {e}"))?;
            events.push(Parsed { line: line as usize, ev, start, end });
        }
        let first = events[0].line;
        let session = events_to_session(source, &key, events, &format!("{display}:{first}"));
        sink(Item::Session(Box::new(session)))?;
        index.remove(&key);
    }
    Ok(())
}

/// The grouping rule (docs/logs.md, "Grouping"): per turn, sort by (ts_start, ts_end,
/// line); events with an explicit `group` form one group per value; the others form
/// clusters of overlapping half-open spans [ts_start, ts_end); groups are ordered by
/// their first event.
fn events_to_session(source: &str, key: &str, mut events: Vec<Parsed>, location: &str) -> Session {
    events.sort_by_key(|e| (e.ev.turn.unwrap_or(0), e.start, e.end, e.line));
    let mut turns: Vec<Turn> = Vec::new();
    let (mut scenario, mut feedback, mut meta) = (None, None, Map::new());
    let mut session_flags = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let t = events[i].ev.turn.unwrap_or(0);
        let j = events[i..].iter().position(|e| e.ev.turn.unwrap_or(0) != t).map_or(events.len(), |p| i + p);
        let span = &mut events[i..j];
        let groups = turn_groups(span);
        let mut turn = Turn { user: String::new(), groups: Vec::new(), answer: None };
        for e in span.iter() {
            if turn.user.is_empty()
                && let Some(u) = &e.ev.user
            {
                turn.user = u.clone();
            }
            if let Some(a) = &e.ev.answer {
                turn.answer = Some(a.clone());
            }
            if scenario.is_none() {
                scenario = e.ev.scenario.clone();
            }
            match e.ev.feedback.as_ref().map(feedback_value) {
                Some(Feedback::Given(b)) => {
                    feedback.get_or_insert(b);
                }
                // Flagged once per session, whichever value came first.
                Some(Feedback::Unrecognised(kind)) if session_flags.is_empty() => {
                    session_flags.push(unrecognised_feedback(kind))
                }
                _ => {}
            }
            if let Some(m) = &e.ev.meta {
                for (k, v) in m {
                    meta.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
        }
        for (_, members) in groups {
            let mut g = Vec::new();
            for k in members {
                g.push(event_call(&mut span[k]));
            }
            turn.groups.push(g);
        }
        turns.push(turn);
        i = j;
    }
    Session {
        id: format!("{source}:{key}"),
        source: source.into(),
        format: "events".into(),
        location: location.into(),
        scenario,
        feedback,
        turns,
        flags: session_flags,
        meta,
    }
}

/// One turn's events (sorted) grouped, as `(group key, member indices)`: explicit groups by
/// value, the others by overlapping spans, in order of their first event.
fn turn_groups(span: &[Parsed]) -> Vec<(Option<String>, Vec<usize>)> {
    let mut groups: Vec<(Option<String>, Vec<usize>)> = Vec::new();
    let mut cluster: Option<(usize, i64)> = None; // (index in groups, max end)
    for (k, e) in span.iter().enumerate() {
        if let Some(g) = e.ev.group.as_ref().filter(|g| !g.is_null()) {
            let gk = scalar_id(g).unwrap_or_else(|| g.to_string());
            match groups.iter_mut().find(|(key, _)| key.as_deref() == Some(gk.as_str())) {
                Some((_, m)) => m.push(k),
                None => groups.push((Some(gk), vec![k])),
            }
            continue;
        }
        match cluster {
            Some((gi, end)) if e.start < end => {
                groups[gi].1.push(k);
                cluster = Some((gi, end.max(e.end)));
            }
            _ => {
                groups.push((None, vec![k]));
                cluster = Some((groups.len() - 1, e.end));
            }
        }
    }
    groups
}

/// One event's tool call: its arguments, result and error (taken out of the event), with
/// the flags for a failed call or a missing result.
fn event_call(e: &mut Parsed) -> Call {
    let mut flags = Vec::new();
    let arguments = arguments_of(e.ev.arguments.as_ref(), &mut flags);
    let result = e.ev.result.take().filter(|r| !r.is_null()).map(|r| match r {
        Value::String(s) => s,
        other => other.to_string(),
    });
    let mut error = e.ev.error.take().filter(|x| !x.is_null() && *x != Value::Bool(false)).map(|x| text_of(Some(&x)));
    if error.is_none() {
        error = result.as_deref().and_then(error_in_result);
    }
    if error.is_some() {
        flags.push(Flag::new(flag::ERROR_RESULT, "the call failed"));
    } else if result.is_none() {
        flags.push(Flag::new(flag::NO_RESULT, "no tool result was logged for this call"));
    }
    Call {
        tool: e.ev.tool.trim().to_string(),
        arguments,
        result,
        error,
        ts_start: Some(e.start),
        ts_end: Some(e.end),
        flags,
    }
}
