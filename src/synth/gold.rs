//! What of a run becomes ground truth: which calls a request needs, where each argument of
//! a reference call comes from, and whether an answer says only what its calls did.
//!
//! A trajectory is what an agent did; the reference plan is what the request needs. Every
//! call of a turn is classified by rules first:
//!
//! - **needed**: an action (a tool whose name says it changes something: acknowledge,
//!   notify, create, …) that the request asks for; a call whose result the answer quotes
//!   from a field the request asks about (`severity` for "what is its severity"; a quote of a field
//!   the request never names only shows the agent used the call, so the LLM check decides);
//!   or a call whose result a needed call consumes (one of its arguments is a value of that
//!   result). A step of the sampled chain is needed on this evidence or the LLM check's
//!   word only, as any call: a chain step found not needed rejects the chain sample (its
//!   query does not ask for the chain: "Find open incidents about slow checkout" for the
//!   chain `search_incidents` → `get_incident` was released by the demo before);
//! - **repeated**: the same tool and arguments as an earlier call of the turn, with no
//!   successful action between them (nothing new to read);
//! - **unrequested**: an action the request does not ask for (never needed, whatever the
//!   agent thought), or a call the LLM check finds not needed.
//!
//! Calls the rules leave open go to the LLM check (request, the calls before, the call →
//! needed or not, with a reason). Repeated and unrequested calls stay in the recorded
//! trajectory, marked `left_out` with their reason (their results remain recorded
//! responses), and leave the plan. A needed call that consumes a left-out action's result,
//! an argument taken from an unrelated result (an alert id that is a notification's
//! result id), or one with no source at all rejects the sample, naming call and argument.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::RecordedCall;
use crate::text::{root, singular, words};

/// One family of side-effect tools: the words a tool name uses, the words a request
/// asks for it with (prefixes of words, or phrases), and the words an answer claims it with.
struct Action {
    name: &'static str,
    tool: &'static [&'static str],
    asks: &'static [&'static str],
    claims: &'static [&'static str],
}

const ACTIONS: &[Action] = &[
    Action {
        name: "acknowledge",
        tool: &["acknowledge", "ack"],
        asks: &["acknowledg", "ack"],
        claims: &["acknowledged"],
    },
    Action {
        name: "notify",
        tool: &["notify", "send", "email", "message", "page", "ping"],
        asks: &[
            "notif",
            "tell",
            "inform",
            "email",
            "e-mail",
            "mail",
            "messag",
            "send",
            "let them know",
            "page",
            "ping",
        ],
        claims: &["notified", "told", "informed", "emailed", "e-mailed", "messaged", "paged", "sent"],
    },
    Action {
        name: "create",
        tool: &["create", "open", "add", "new", "file", "post", "insert", "register"],
        asks: &["creat", "open a", "open an", "file a", "file an", "raise", "add", "log a", "log an", "register"],
        claims: &["created", "filed", "raised", "registered"],
    },
    Action {
        name: "update",
        tool: &["update", "set", "edit", "change", "modify", "patch", "mark", "annotate"],
        asks: &[
            "updat", "set", "chang", "edit", "modif", "mark as", "mark it", "mark the", "note", "move", "bump",
            "annotat",
        ],
        claims: &["updated", "changed", "modified", "marked", "edited", "annotated"],
    },
    Action {
        name: "assign",
        tool: &["assign", "reassign"],
        asks: &["assign", "reassign", "hand over", "hand it", "give", "route"],
        claims: &["assigned", "reassigned", "handed"],
    },
    Action {
        name: "close",
        tool: &["close", "resolve", "complete", "finish"],
        asks: &["clos", "resolv", "complet", "finish"],
        claims: &["closed", "resolved", "completed"],
    },
    Action {
        name: "rollback",
        tool: &["rollback", "revert", "undo"],
        asks: &["roll back", "rollback", "roll it back", "revert", "undo"],
        claims: &["rolled back", "reverted"],
    },
    Action {
        name: "restart",
        tool: &["restart", "reboot", "scale", "deploy", "start", "stop", "restore"],
        asks: &["restart", "reboot", "scal", "deploy", "start", "stop", "restor", "bounce"],
        claims: &["restarted", "rebooted", "scaled", "deployed", "restored"],
    },
    Action {
        name: "delete",
        tool: &["delete", "remove", "drop", "cancel", "silence", "mute", "snooze", "purge"],
        asks: &["delet", "remov", "drop", "cancel", "silenc", "mute", "snooz", "purg"],
        claims: &["deleted", "removed", "cancelled", "canceled", "silenced", "muted", "snoozed", "purged"],
    },
    Action { name: "escalate", tool: &["escalate"], asks: &["escalat"], claims: &["escalated"] },
];

/// Tool-name words that only read: a name that starts with one is never an action.
const READS: &[&str] = &[
    "get", "list", "search", "query", "find", "fetch", "describe", "show", "read", "check", "lookup", "look", "count",
    "view", "inspect", "retrieve", "status", "who", "whois",
];

/// Argument-name words that say nothing about what a value is.
const GENERIC: &[&str] =
    &["id", "ids", "name", "names", "key", "value", "uuid", "ref", "num", "no", "code", "the", "of"];

/// Words that name the same kind of thing, for matching an argument to a result field.
const KINDRED: &[&[&str]] = &[
    &["assignee", "owner", "user", "person", "oncall", "engineer", "responder", "member", "contact", "email", "who"],
    &["alert", "alarm", "page"],
    &["incident", "issue", "ticket", "case"],
    &["deployment", "deploy", "release", "version", "rollout"],
    &["service", "app", "application", "component", "system"],
    &["host", "server", "node", "instance", "machine"],
];

fn same_kind(a: &str, b: &str) -> bool {
    let (a, b) = (root(a), root(b));
    a == b || KINDRED.iter().any(|k| k.iter().any(|w| root(w) == a) && k.iter().any(|w| root(w) == b))
}

/// The tool part of a tool id (`server::tool` → `tool`).
pub fn tool_name(id: &str) -> &str {
    crate::model::split_tool_id(id).map(|(_, t)| t).unwrap_or(id)
}

/// The action family of a tool, by its name; `None`: it only reads.
fn action_of(tool: &str) -> Option<&'static Action> {
    let w = words(tool_name(tool));
    let first = w.first()?;
    if READS.contains(&first.as_str()) {
        return None;
    }
    w.iter().find_map(|word| ACTIONS.iter().find(|a| a.tool.contains(&word.as_str())))
}

/// Is this tool an action (it changes something)?
pub fn is_action(tool: &str) -> bool {
    action_of(tool).is_some()
}

/// Does `text` use one of these stems (a word that starts with it, with an ending of at
/// most three letters: `acknowledg` → acknowledge, acknowledged; `add` → added, not
/// address) or phrases?
fn mentions(text: &str, stems: &[&str]) -> Option<String> {
    let lower = text.to_lowercase();
    let ws = words(&lower);
    stems
        .iter()
        .find(|s| {
            if s.contains(' ') {
                has_word(&lower, s)
            } else {
                ws.iter().any(|w| w.starts_with(*s) && w.len() - s.len() <= 3)
            }
        })
        .map(|s| s.to_string())
}

/// Does the request ask for this action?
fn asks_for(request: &str, a: &Action) -> Option<String> {
    mentions(request, a.asks)
}

/// Does a value look like an identifier (something a model must not make up)?
pub fn is_identifier(v: &str) -> bool {
    let v = v.trim();
    // A number with a unit (`1.2s`, `99th`, `5ms`) is a measurement, not an id.
    let digits = v.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ',');
    if digits.len() < v.len() && digits.len() <= 3 && digits.chars().all(|c| c.is_alphabetic() || c == '%') {
        return false;
    }
    v.contains('@')
        || (v.len() >= 2
            && v.chars().any(|c| c.is_ascii_digit())
            && v.chars().any(|c| c.is_alphabetic())
            && !v.contains(' '))
}

/// What an argument value was traced to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "from")]
pub enum Source {
    /// The request text says it.
    Request,
    /// A result of an earlier call (1-based position in the turn's calls, or in the
    /// sample's for dialogues), at this field path.
    Result { call: usize, path: String },
    /// The tool's documented default.
    Default,
    /// Empty or null: nothing to trace.
    Empty,
}

/// Where a value came from, or why it has no source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trace {
    Found(Source),
    /// Found only in a result whose field names something else.
    Unrelated {
        call: usize,
        path: String,
    },
    Nowhere,
}

/// An earlier call, as tracing sees it.
pub struct Earlier<'a> {
    /// 1-based position.
    pub call: usize,
    pub tool: &'a str,
    pub result: Option<&'a str>,
}

/// Leaves of a JSON value with their key paths (`alerts[0].id`), strings and numbers only.
fn leaves(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                leaves(x, &p, out);
            }
        }
        Value::Array(xs) => {
            for (i, x) in xs.iter().enumerate() {
                leaves(x, &format!("{path}[{i}]"), out);
            }
        }
        Value::String(s) => out.push((path.to_string(), s.clone())),
        Value::Number(n) => out.push((path.to_string(), n.to_string())),
        Value::Bool(_) | Value::Null => {}
    }
}

/// The result's leaves; a result that is not JSON is one leaf with an empty path.
fn result_leaves(text: &str) -> Vec<(String, String)> {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => {
            let mut out = Vec::new();
            leaves(&v, "", &mut out);
            out
        }
        _ => vec![(String::new(), text.to_string())],
    }
}

/// Does the field at `path` of `tool`'s result hold what the argument `arg` names?
fn related(arg: &str, tool: &str, path: &str) -> bool {
    let wanted: Vec<String> = words(arg).into_iter().filter(|w| !GENERIC.contains(&w.as_str())).collect();
    if wanted.is_empty() || path.is_empty() {
        return true;
    }
    let mut have: Vec<String> = words(path);
    have.extend(words(tool_name(tool)).into_iter().filter(|w| !READS.contains(&w.as_str())));
    wanted.iter().any(|w| have.iter().any(|h| same_kind(w, h)))
}

/// Byte positions where `needle` occurs in `hay` as a whole word or phrase (no letter or
/// digit right before or after it); none for an empty needle.
fn word_positions(hay: &str, needle: &str) -> Vec<usize> {
    let mut out = Vec::new();
    if needle.is_empty() {
        return out;
    }
    let mut start = 0;
    while let Some(i) = hay[start..].find(needle) {
        let at = start + i;
        let end = at + needle.len();
        // The characters around the match, decoded (a byte of a multi-byte character read
        // as a `char` is some Latin-1 letter).
        let before = hay[..at].chars().next_back();
        let after = hay[end..].chars().next();
        if before.is_none_or(|c| !c.is_alphanumeric()) && after.is_none_or(|c| !c.is_alphanumeric()) {
            out.push(at);
        }
        start = end;
    }
    out
}

/// Is `needle` a whole word (or phrase) of `hay` (both lower-case)?
fn has_word(hay: &str, needle: &str) -> bool {
    !word_positions(hay, needle).is_empty()
}

/// A message the agent composed (free text of two words or more, such as an e-mail body or
/// a note, holding at least one identifier: an id, an e-mail address) is traced by its
/// identifiers: each must occur in the request or an earlier result; its prose is the
/// agent's own. Found (at the first result an identifier came from, else the request) when
/// all do; nowhere when one does not (a made-up id); `None` for other values. Before, a
/// message with an `@` was an identifier as a whole, found only where a result held it
/// whole (never, for a message the agent wrote), and one without passed on any word the
/// request said, made-up ids and all. The demo's on-call chain (2026-12-06) wrote "… Please
/// contact her at Anna@company.com or call her at PHONE_34f473d0b5." to `notify_user`
/// while `get_oncall` returned `EMAIL_d5dd4ff5d1`: the made-up address is what this refuses.
fn composed(arg: &str, value: &Value, text: &str, request: &str, earlier: &[Earlier]) -> Option<Trace> {
    let Value::String(_) = value else { return None };
    // Two words or more: text, whatever `is_identifier` makes of its `@` (a short note
    // such as "Ack INC-9999" holds a made-up id as well as a long one).
    if text.split_whitespace().count() < 2 {
        return None;
    }
    let ids = message_ids(text);
    if ids.is_empty() {
        return None;
    }
    // Each identifier traced as a value of its own (one word, so this is not reached again);
    // a message may cite a field unrelated to its argument. The source returned is a result
    // of this turn's calls, a related field first, so `propagate` marks the call the message
    // draws on, not a listing that happens to hold an id too.
    let mut sources = Vec::new();
    for id in &ids {
        match trace(arg, &Value::String(id.clone()), request, earlier, None) {
            Trace::Found(Source::Result { call, path }) => sources.push((call, true, path)),
            Trace::Unrelated { call, path } => sources.push((call, false, path)),
            Trace::Found(_) => {}
            Trace::Nowhere => return Some(Trace::Nowhere),
        }
    }
    let best = sources.into_iter().min_by_key(|(call, related, _)| (*call == 0, !related));
    Some(Trace::Found(best.map_or(Source::Request, |(call, _, path)| Source::Result { call, path })))
}

/// The identifiers of a message (lower-case): its parts between spaces and punctuation
/// that separates (`,;/()[]<>:` and quotes), a possessive `'s` cut, that
/// [`is_identifier`] takes for one and that are more than a short name of a thing (`S3`,
/// `EC2`, `p99`, `v2`: three characters or fewer without `-`, `_`, `@` or `.`).
fn message_ids(text: &str) -> Vec<String> {
    let parts = text.split(|c: char| c.is_whitespace() || ",;/()[]<>:\"'`".contains(c));
    parts
        .map(|t| t.trim_matches(|c: char| !c.is_alphanumeric()))
        .map(|t| t.strip_suffix("\u{2019}s").unwrap_or(t))
        .filter(|t| is_identifier(t) && (t.len() > 3 || t.contains(['-', '_', '@', '.'])))
        .map(str::to_string)
        .collect()
}

/// Trace one argument value (`arg` names it) of a call.
pub fn trace(arg: &str, value: &Value, request: &str, earlier: &[Earlier], default: Option<&Value>) -> Trace {
    if value.is_null() || value.as_str().is_some_and(|s| s.trim().is_empty()) {
        return Trace::Found(Source::Empty);
    }
    if default == Some(value) {
        return Trace::Found(Source::Default);
    }
    let request = request.to_lowercase();
    let text = match value {
        Value::String(s) => s.trim().to_lowercase(),
        Value::Bool(b) => {
            // A flag has a source when the request names what it switches.
            let named = words(arg)
                .iter()
                .filter(|w| w.len() >= 3 && !GENERIC.contains(&w.as_str()))
                .any(|w| words(&request).iter().any(|r| root(r) == root(w)));
            return if named || (!b && default.is_none()) { Trace::Found(Source::Request) } else { Trace::Nowhere };
        }
        other => other.to_string().to_lowercase(),
    };
    if has_word(&request, &text) {
        return Trace::Found(Source::Request);
    }
    if let Some(found) = composed(arg, value, &text, &request, earlier) {
        return found;
    }
    let ident = is_identifier(&text);
    // A word value (a status, a metric, a search phrase) may be said loosely: `open` for
    // "open incidents"; a name with a short suffix too (`latency_p99` for "its latency").
    if value.is_string() && !text.contains('@') {
        let rw: Vec<String> = words(&request).iter().map(|w| root(w).to_string()).collect();
        let ws = words(&text);
        let said = |w: &String| rw.contains(&root(w).to_string());
        let loose = if ident {
            ws.iter().any(|w| w.len() >= 4 && w.chars().all(char::is_alphabetic) && said(w))
                && ws.iter().all(|w| said(w) || w.len() <= 3)
        } else {
            ws.iter().filter(|w| w.len() >= 3).any(said)
        };
        if loose {
            return Trace::Found(Source::Request);
        }
    }
    let mut unrelated = None;
    for e in earlier {
        let Some(result) = e.result else { continue };
        for (path, leaf) in result_leaves(result) {
            let leaf = leaf.trim().to_lowercase();
            let hit = if path.is_empty() || ident { has_word(&leaf, &text) } else { leaf == text };
            if !hit {
                continue;
            }
            if related(arg, e.tool, &path) {
                return Trace::Found(Source::Result { call: e.call, path });
            }
            unrelated.get_or_insert(Trace::Unrelated { call: e.call, path });
        }
    }
    unrelated.unwrap_or(Trace::Nowhere)
}

/// Values each parameter name is known to take, lower-case: the input schemas' enums and
/// what the domain's logged calls gave it, pooled over the domain's tools (a `service` is a
/// service to every tool of one domain; the demo's logs give `query_metrics` three of its
/// eight). Single words only (`auth`, `cpu`, `last_hour`): free text (a message, a search
/// query) is no value a request names.
#[derive(Debug, Default, Clone)]
pub struct KnownValues(BTreeMap<String, BTreeSet<String>>);

impl KnownValues {
    /// The string leaves of a logged call's arguments.
    pub fn add_call(&mut self, arguments: &Value) {
        for (name, v) in argument_leaves(arguments) {
            if let Some(s) = v.as_str() {
                self.insert(&name, s);
            }
        }
    }

    /// The string enums of a tool's input schema's properties.
    pub fn add_schema(&mut self, schema: &Value) {
        for (name, p) in schema["properties"].as_object().into_iter().flatten() {
            for e in p["enum"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                self.insert(name, e);
            }
        }
    }

    fn insert(&mut self, param: &str, value: &str) {
        let v = value.trim().to_lowercase();
        let word = v.chars().count() >= 2 && v.chars().count() <= 40 && !v.contains(char::is_whitespace);
        if word && !v.chars().all(|c| c.is_ascii_digit()) {
            self.0.entry(param.to_string()).or_default().insert(v);
        }
    }
}

/// Fewer known values than this make a parameter enum-like (a severity, a metric, a window),
/// whose values are everyday words ("any", "high", "memory"): only entity-like parameters
/// (services, teams, hosts) are judged.
const MIN_KNOWN: usize = 5;

/// Values a turn's own message names for a parameter that the needed calls give other
/// values only: the message names two or more known values of `service` (`auth`,
/// `notifications`), the calls gave `service` only `auth`, and neither an argument nor a
/// result of the sample's needed calls holds `notifications`. Part of the request is then
/// not done, or done with another value (the demo's 1.5B answered "the CPU usage for
/// notifications" from a call about `auth`), and the trajectory is no reference for it.
///
/// Judged only where a reading is hard to get wrong: an entity-like parameter
/// ([`MIN_KNOWN`] values or more) that a needed call gives and whose given value the
/// message names too; a mention that is not negated ("not billing"); a value that is no word
/// of a called tool's name (`search` is a service of the demo's domain and what
/// `search_logs` does). Earlier turns' calls count as given; `own` is this turn's message
/// alone (a dialogue's request holds the earlier turns', which their own turns judged).
pub fn unserved_values(t: &TurnInput, own: &str, decisions: &[(Decision, String)], known: &KnownValues) -> Vec<String> {
    let own = own.to_lowercase();
    let needed: Vec<&RecordedCall> = t
        .context
        .iter()
        .copied()
        .chain(t.calls.iter().zip(decisions).filter(|(_, d)| d.0 == Decision::Needed).map(|(c, _)| *c))
        .collect();
    // Parameter → the values the calls gave it, and the tools that took it.
    let mut given: BTreeMap<String, (BTreeSet<String>, BTreeSet<&str>)> = BTreeMap::new();
    for c in &needed {
        for (name, v) in argument_leaves(&c.arguments) {
            if let Some(s) = v.as_str() {
                let e = given.entry(name).or_default();
                e.0.insert(s.trim().to_lowercase());
                e.1.insert(tool_name(&c.tool));
            }
        }
    }
    // What the calls hold: their arguments and their results' values (a value the answer
    // reads from a result, "does checkout depend on gateway?", is served).
    let mut held: Vec<String> = given.values().flat_map(|(v, _)| v.iter().cloned()).collect();
    held.extend(
        needed.iter().filter_map(|c| c.result.as_deref()).flat_map(result_leaves).map(|(_, v)| v.to_lowercase()),
    );
    let tool_words: BTreeSet<String> =
        t.context.iter().chain(&t.calls).flat_map(|c| words(tool_name(&c.tool))).map(|w| w.to_lowercase()).collect();
    let named = |v: &str| word_positions(&own, v).into_iter().any(|at| !negated(&own, at));
    let mut out = Vec::new();
    for (param, (values, tools)) in &given {
        let Some(known) = known.0.get(param).filter(|k| k.len() >= MIN_KNOWN) else { continue };
        if !values.iter().any(|v| named(v)) {
            continue;
        }
        for k in known {
            if named(k) && !held.iter().any(|v| has_word(v, k)) && !tool_words.contains(k) {
                let quote = |xs: Vec<&str>| xs.iter().map(|x| format!("`{x}`")).collect::<Vec<_>>().join(", ");
                out.push(format!(
                    "the request names `{k}`, a `{param}` of the domain's calls, but the needed calls ({}) give \
                     `{param}` only {}: that part of the request is not done",
                    quote(tools.iter().copied().collect()),
                    quote(values.iter().map(String::as_str).collect())
                ));
            }
        }
    }
    out
}

/// Every leaf argument of a call with the name it goes by (the key above it).
pub fn argument_leaves(args: &Value) -> Vec<(String, Value)> {
    fn walk(v: &Value, name: &str, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    walk(x, k, out);
                }
            }
            Value::Array(xs) => {
                for x in xs {
                    walk(x, name, out);
                }
            }
            other => out.push((name.to_string(), other.clone())),
        }
    }
    let mut out = Vec::new();
    walk(args, "", &mut out);
    out
}

/// What became of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Needed,
    Repeated,
    Unrequested,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Needed => "needed",
            Decision::Repeated => "repeated",
            Decision::Unrequested => "unrequested",
        }
    }
}

/// Who decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum By {
    Rule,
    Llm,
}

/// The decision about one call, as `verdicts.jsonl` and the ledger record it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallDecision {
    /// 1-based turn.
    pub turn: usize,
    /// 1-based position among the turn's calls.
    pub call: usize,
    pub tool: String,
    pub decision: Decision,
    pub by: By,
    pub reason: String,
    /// Request hash of the LLM check's exchange (`by = llm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<String>,
}

/// One turn as the rules see it.
pub struct TurnInput<'a> {
    /// What the user asked so far (a dialogue's earlier user turns included).
    pub request: &'a str,
    pub answer: Option<&'a str>,
    /// The turn's calls in trajectory order.
    pub calls: Vec<&'a RecordedCall>,
    /// Calls (0-based positions) that are steps of the sampled chain.
    pub chain_steps: Vec<usize>,
    /// The reference calls of the dialogue's earlier turns (their results are sources too).
    pub context: Vec<&'a RecordedCall>,
}

/// What the rules found about a turn: a decision per call (`None`: for the LLM check) and
/// the rejection reasons they already know.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Classified {
    pub decisions: Vec<Option<(Decision, String)>>,
    pub reasons: Vec<String>,
}

fn ok(c: &RecordedCall) -> bool {
    c.error.is_none() && c.result.is_some()
}

fn call_label(i: usize, c: &RecordedCall) -> String {
    format!("call {} `{}`", i + 1, tool_name(&c.tool))
}

/// Values of a result worth finding in an answer (identifiers, and longer words and
/// numbers), each with its field's path.
fn quotable(result: &str) -> Vec<(String, String)> {
    result_leaves(result)
        .into_iter()
        .filter(|(p, _)| !p.is_empty())
        .map(|(p, v)| (p, v.trim().to_lowercase()))
        .filter(|(_, v)| is_identifier(v) || v.chars().count() >= 4)
        .collect()
}

/// The word naming the field at `path` of `tool`'s result: the last telling word of its
/// last key (`incident.severity` and `incident_severity` → `severity`, `created_at` →
/// `created`); for a generic key (`id`, `name`), of the key holding it (`incidents[0].id` →
/// `incidents`); for a bare list (`[0].id`), of the tool's name (`list_services` →
/// `services`). Container and entity words name what holds the field, not the field, so
/// they do not count while the field has a name of its own.
fn field_word(tool: &str, path: &str) -> Option<String> {
    // A tool name's read verb (`get`, `list`) names no field; a key's (`status`) does.
    let telling = |s: &str, skip: &[&str]| {
        words(s).into_iter().rev().find(|w| {
            w.chars().count() >= 3
                && !GENERIC.contains(&w.as_str())
                && !skip.contains(&w.as_str())
                && !w.chars().all(|c| c.is_ascii_digit())
        })
    };
    path.split('.')
        .map(|k| k.split('[').next().unwrap_or_default())
        .filter(|k| !k.is_empty())
        .rev()
        .find_map(|k| telling(k, &[]))
        .or_else(|| telling(tool_name(tool), READS))
}

/// Does the request ask about the field at `path` of `tool`'s result? Its
/// [`field_word`] names what a word of the request names: the same word, singular or
/// plural (`services`, "service"), or a kindred one (`assignee` for "who").
fn asks_about(request: &str, tool: &str, path: &str) -> bool {
    let Some(field) = field_word(tool, path) else { return false };
    words(request).iter().any(|r| same_kind(&field, r) || singular(&field) == singular(r))
}

fn unrequested_reason(tool: &str, a: &Action) -> String {
    format!("`{}` is an action ({}) the request does not ask for", tool_name(tool), a.name)
}

/// Why a call of `tool` would be an action `request` does not ask for (what [`classify`]
/// decides `unrequested` by), if it would. Role-play withholds such a call before it runs.
pub fn unrequested_action(request: &str, tool: &str) -> Option<String> {
    let a = action_of(tool)?;
    asks_for(request, a).is_none().then(|| unrequested_reason(tool, a))
}

/// Classify the calls of one turn by the rules (see the module doc).
pub fn classify(t: &TurnInput) -> Classified {
    let n = t.calls.len();
    let mut d: Vec<Option<(Decision, String)>> = vec![None; n];
    let answer = t.answer.unwrap_or_default().to_lowercase();
    let request_lower = t.request.to_lowercase();
    // Repeated: the same tool and arguments as an earlier call, with no successful action
    // between, or with the same result (nothing new either way).
    for j in 0..n {
        if let Some(i) = (0..j).find(|&i| {
            let (a, b) = (t.calls[i], t.calls[j]);
            a.tool == b.tool && a.arguments == b.arguments && ok(a) && a.result == b.result && d[i].is_none()
        }) {
            d[j] = Some((Decision::Repeated, format!("the same call and result as call {}: nothing new", i + 1)));
            continue;
        }
        for i in (0..j).rev() {
            let (a, b) = (t.calls[i], t.calls[j]);
            if is_action(&t.calls[i].tool) && ok(t.calls[i]) && a.tool != b.tool {
                break;
            }
            if a.tool == b.tool && a.arguments == b.arguments && d[i].as_ref().is_none_or(|x| x.0 != Decision::Repeated)
            {
                d[j] = Some((Decision::Repeated, format!("the same call as call {} (same tool and arguments)", i + 1)));
                break;
            }
        }
    }
    for (i, c) in t.calls.iter().enumerate() {
        if d[i].is_some() {
            continue;
        }
        if let Some(a) = action_of(&c.tool) {
            d[i] = Some(match asks_for(t.request, a) {
                None => (Decision::Unrequested, unrequested_reason(&c.tool, a)),
                Some(w) => (Decision::Needed, format!("the request asks for it (\"{w}\")")),
            });
        }
    }
    let mut reasons = Vec::new();
    for &i in &t.chain_steps {
        if let Some((Decision::Unrequested, why)) = &d[i] {
            reasons.push(format!("{}, a step of the sampled chain: {why}", call_label(i, t.calls[i])))
        }
    }
    // A read call whose result the answer quotes (a value not already in the request, nor
    // in the result of an earlier call, which is where the answer could have it from), from
    // a field the request asks about. The answer is the agent's own writing: that it quotes
    // a result shows the call was used, not that the request needed it ("Find the open
    // incident" answered with the severity `get_incident` returned made that call a
    // reference step of a released dialogue), so a quote of a field the request does not
    // name is left to the LLM check.
    for (i, c) in t.calls.iter().enumerate() {
        if d[i].is_some() || answer.is_empty() {
            continue;
        }
        let before: Vec<String> =
            t.calls[..i].iter().filter(|x| ok(x)).filter_map(|x| x.result.as_deref()).map(str::to_lowercase).collect();
        if let Some((p, v)) = c.result.as_deref().map(quotable).unwrap_or_default().into_iter().find(|(p, v)| {
            has_word(&answer, v)
                && !has_word(&request_lower, v)
                && !before.iter().any(|b| has_word(b, v))
                && asks_about(t.request, &c.tool, p)
        }) {
            d[i] = Some((
                Decision::Needed,
                format!("the answer quotes its result's `{p}` (`{v}`), which the request asks about"),
            ));
        }
    }
    propagate(t, &mut d);
    Classified { decisions: d, reasons }
}

/// The calls whose results a needed call's arguments come from become needed too
/// (repeatedly, back to the first call).
pub fn propagate(t: &TurnInput, d: &mut [Option<(Decision, String)>]) {
    for j in (0..t.calls.len()).rev() {
        if !matches!(d[j], Some((Decision::Needed, _))) {
            continue;
        }
        for (i, path) in sources(t, j) {
            if d[i].is_none() {
                d[i] = Some((Decision::Needed, format!("{} uses its result (`{path}`)", call_label(j, t.calls[j]))));
            }
        }
    }
}

/// Words that name nothing a tool brings (filler on both sides of the comparison).
const FILLER: &[&str] = &[
    "a", "an", "the", "of", "for", "to", "from", "in", "on", "at", "by", "with", "and", "or", "is", "are", "be", "it",
    "its", "their", "them", "me", "my", "our", "us", "we", "you", "your", "this", "that", "these", "those", "what",
    "which", "one", "all", "any", "some", "do", "does", "did", "can", "please", "turn",
];

/// Request words that ask for more than a search gives, whatever the tools' words: a
/// request with one is left to the LLM check.
const MORE: &[&str] = &[
    "detail",
    "details",
    "more",
    "everything",
    "full",
    "info",
    "information",
    "describe",
    "explain",
    "summary",
    "happened",
];

/// Do two words name the same thing: kindred, one the other's singular, or sharing their
/// first five letters (`severe` and `severity`, `assigned` and `assignee`)?
fn names_same(a: &str, b: &str) -> bool {
    let prefix = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    same_kind(a, b) || singular(a) == singular(b) || prefix >= 5
}

/// Every key path of a JSON value, whatever the key's value (a flag, a null, an object).
fn key_paths(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                key_paths(x, &p, out);
                out.push(p);
            }
        }
        Value::Array(xs) => {
            for (i, x) in xs.iter().enumerate() {
                key_paths(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn telling_word(w: &str) -> bool {
    w.chars().count() >= 2 && !FILLER.contains(&w) && !w.chars().all(|c| c.is_ascii_digit())
}

/// What a call's result fields name ([`field_word`] of each key), then its tool's name's
/// words (read verbs and generic words aside).
fn result_words(c: &RecordedCall) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // A stand-in the sandbox generated (no recording, no output schema) names no field of
    // the tool.
    if ok(c)
        && let Ok(v) = serde_json::from_str::<Value>(c.result.as_deref().unwrap_or_default())
        && !crate::sandbox::generate::is_generic(&v)
    {
        let mut paths = Vec::new();
        key_paths(&v, "", &mut paths);
        out.extend(paths.iter().filter_map(|p| field_word(&c.tool, p)));
    }
    out.extend(
        words(tool_name(&c.tool))
            .into_iter()
            .filter(|w| !READS.contains(&w.as_str()) && !GENERIC.contains(&w.as_str())),
    );
    out.retain(|w| telling_word(w));
    let mut seen = BTreeSet::new();
    out.retain(|w| seen.insert(w.clone()));
    out
}

/// A read call that only looks up again what an earlier call of its turn found (each of
/// its arguments is a value of that call's result), whose result no later call uses, and
/// that adds nothing the request names, is unrequested by rule, so a small judge's "needed"
/// cannot keep it. What it adds: the words of its result's fields, its tool's name and its
/// description that its sources' result fields and names do not have; the request names
/// one when a word of it is the same, singular or plural, kindred or sharing five letters.
/// "Find open incidents about slow checkout" is answered by `search_incidents`, and the
/// `get_incident` after it was released as a chain step the request needs (demo of
/// 2026-12-06; the 0.5B and the 1.5B judge both said needed); "… and their severity"
/// ("how severe", "who is assigned") leaves it to the LLM check. Left to the check too: a
/// tool without a description in `about` (tool descriptions by tool name), a lookup of the
/// same tool as its source (another entity of one kind: a manager after a user), a request
/// asking for details or more, and a lookup that adds no word.
pub fn lookups_adding_nothing(t: &TurnInput, cl: &mut Classified, about: &BTreeMap<String, String>) {
    let asked: Vec<String> = words(t.request).into_iter().filter(|w| telling_word(w)).collect();
    if asked.iter().any(|w| MORE.contains(&w.as_str())) {
        return;
    }
    // The calls whose results some call's arguments take (traced once for the turn).
    let used: BTreeSet<usize> = (0..t.calls.len()).flat_map(|k| sources(t, k)).map(|(i, _)| i).collect();
    for j in 0..t.calls.len() {
        let c = t.calls[j];
        let Some(description) = about.get(tool_name(&c.tool)).or_else(|| about.get(&c.tool)) else { continue };
        if cl.decisions[j].is_some() || is_action(&c.tool) || !ok(c) {
            continue;
        }
        let earlier = earlier_of(t, j);
        let mut from = Vec::new();
        let mut all_found = true;
        for (name, v) in argument_leaves(&c.arguments) {
            match trace(&name, &v, t.request, &earlier, None) {
                Trace::Found(Source::Result { call, path }) if call > 0 => from.push((call - 1, path)),
                Trace::Found(Source::Empty) => {}
                _ => all_found = false,
            }
        }
        if !all_found || from.is_empty() || from.iter().any(|(i, _)| t.calls[*i].tool == c.tool) || used.contains(&j) {
            continue;
        }
        let known: Vec<String> = from.iter().flat_map(|(i, _)| result_words(t.calls[*i])).collect();
        let mut adds = result_words(c);
        for w in words(description) {
            if telling_word(&w) && !adds.contains(&w) {
                adds.push(w);
            }
        }
        adds.retain(|w| !known.iter().any(|k| names_same(w, k)));
        if adds.is_empty() || asked.iter().any(|r| adds.iter().any(|a| names_same(r, a))) {
            continue;
        }
        let (src, path) = &from[0];
        let shown: Vec<&str> = adds.iter().take(6).map(String::as_str).collect();
        let why = format!(
            "only looks up again what {} found (its `{path}`), and the request names nothing it adds ({})",
            call_label(*src, t.calls[*src]),
            shown.join(", ")
        );
        if t.chain_steps.contains(&j) {
            cl.reasons.push(format!("{}, a step of the sampled chain, {why}", call_label(j, c)));
        }
        cl.decisions[j] = Some((Decision::Unrequested, format!("`{}` {why}", tool_name(&c.tool))));
    }
}

/// Earlier calls (0-based) whose results call `j`'s arguments were traced to, with the path.
fn sources(t: &TurnInput, j: usize) -> Vec<(usize, String)> {
    let earlier = earlier_of(t, j);
    let mut out = Vec::new();
    for (name, v) in argument_leaves(&t.calls[j].arguments) {
        if let Trace::Found(Source::Result { call, path }) = trace(&name, &v, t.request, &earlier, None)
            && call > 0
        {
            out.push((call - 1, path));
        }
    }
    out
}

/// The calls before call `j`: the earlier turns' (numbered 0) and this turn's.
fn earlier_of<'a>(t: &'a TurnInput, j: usize) -> Vec<Earlier<'a>> {
    let result = |c: &'a RecordedCall| if ok(c) { c.result.as_deref() } else { None };
    let before = t.context.iter().map(|c| Earlier { call: 0, tool: &c.tool, result: result(c) });
    before
        .chain(t.calls[..j].iter().enumerate().map(|(i, c)| Earlier { call: i + 1, tool: &c.tool, result: result(c) }))
        .collect()
}

/// The rejection reasons of a turn's final decisions: a needed call whose argument comes
/// from a left-out action's result, or from an unrelated result, or from nowhere.
/// `strict_words`: word values (a status, a phrase) need a source too (false for real
/// logged sessions, whose agent chose them; identifiers and numbers always do).
/// `schemas` gives each tool's input schema (for documented defaults) by tool name.
pub fn argument_reasons(
    t: &TurnInput,
    decisions: &[(Decision, String)],
    schemas: &BTreeMap<String, Value>,
    strict_words: bool,
) -> (Vec<String>, Vec<String>) {
    let mut reasons = Vec::new();
    let mut notes = Vec::new();
    for (j, c) in t.calls.iter().enumerate() {
        if decisions[j].0 != Decision::Needed {
            continue;
        }
        let earlier = earlier_of(t, j);
        let schema = schemas.get(tool_name(&c.tool));
        for (name, v) in argument_leaves(&c.arguments) {
            let default = schema.and_then(|s| s.pointer(&format!("/properties/{name}/default")));
            let shown = crate::text::one_line(&v.to_string());
            let what = format!("argument `{name}` = {shown} of {}", call_label(j, c));
            match trace(&name, &v, t.request, &earlier, default) {
                Trace::Found(Source::Result { call, path }) => {
                    if call > 0 && decisions[call - 1].0 != Decision::Needed {
                        reasons.push(format!(
                            "{what} comes from call {call} (`{path}`), which is left out ({}): leaving it out breaks the dependency",
                            decisions[call - 1].0.as_str()
                        ));
                    }
                }
                Trace::Found(_) => {}
                Trace::Unrelated { call, path } => {
                    let from = match call {
                        0 => "a call of an earlier turn".to_string(),
                        n => format!("call {n} `{}`", tool_name(&t.calls[n - 1].tool)),
                    };
                    reasons.push(format!("{what} is taken from an unrelated result: {from} returned it as `{path}`"))
                }
                Trace::Nowhere => {
                    let word = v.is_string() && !is_identifier(v.as_str().unwrap_or_default());
                    if strict_words || !word {
                        reasons.push(format!(
                            "{what} comes from nowhere: not in the request, an earlier result or the tool's defaults"
                        ));
                    } else {
                        notes.push(format!("{what}: not in the request (kept: a logged session's own choice)"));
                    }
                }
            }
        }
    }
    (reasons, notes)
}

const NUMBERS: &[(&str, usize)] = &[
    ("one", 1),
    ("a single", 1),
    ("two", 2),
    ("both", 2),
    ("three", 3),
    ("four", 4),
    ("five", 5),
    ("six", 6),
    ("seven", 7),
    ("eight", 8),
    ("nine", 9),
    ("ten", 10),
];

const NEGATIONS: &[&str] =
    &["not", "n't", "never", "no", "unable", "couldn't", "cannot", "can't", "failed", "without", "wasn't", "weren't"];

/// The claims of an answer its turn's calls do not support: actions no successful call
/// performed, counts of actions that differ from the calls, a list of ids an action claim
/// names that holds more ids than the calls of that action or one id more often than calls
/// acted on it (see [`listed_claims`]), identifiers that no request, argument or result
/// holds. `calls` are the turn's reference calls; `seen` every text the answer may quote
/// (the request, the sample's arguments and results so far).
pub fn unsupported_claims(answer: &str, calls: &[&RecordedCall], seen: &str) -> Vec<String> {
    let lower = answer.to_lowercase();
    let seen = seen.to_lowercase();
    let mut out = Vec::new();
    for a in ACTIONS {
        let done = calls.iter().filter(|c| ok(c) && action_of(&c.tool).is_some_and(|x| x.name == a.name)).count();
        for claim in a.claims {
            let Some(pos) = word_positions(&lower, claim).into_iter().find(|p| !negated(&lower, *p)) else {
                continue;
            };
            if done == 0 && !has_word(&seen, claim) {
                out.push(format!("says `{claim}`, and no call of the turn did that ({})", a.name));
                break;
            }
            if let Some(n) = count_near(&lower, pos)
                && done > 0
                && n != done
            {
                out.push(format!("says {n} {claim}, and {done} call(s) of the turn did that"));
                break;
            }
        }
    }
    out.extend(listed_claims(answer, &lower, calls));
    let mut idents: Vec<&str> = tokens(answer).into_iter().filter(|w| is_identifier(w)).collect();
    idents.dedup();
    for id in idents {
        if !seen.contains(&id.to_lowercase()) {
            out.push(format!("names `{id}`, which no request, argument or result of the sample holds"));
        }
    }
    out.extend(named_functions(answer, calls, &seen));
    out
}

/// snake_case names in an answer that talks about functions or calls, which no call of
/// the sample made (`server__tool` counts as `tool`) and no text it may quote holds (tool
/// names of every call so far are in `seen`): a function or parameter name. The demo's
/// 1.5B agent answered "Find the on-call person … and send a message" with "To acknowledge
/// the alert …, you can call the `acknowledge_alert` function with the `alert_id` parameter
/// …": an instruction about a tool nobody called, not a report of what the calls found.
/// An answer without such words ("no `due_date` was set") is left to the other checks.
fn named_functions(answer: &str, calls: &[&RecordedCall], seen: &str) -> Vec<String> {
    let lower = answer.to_lowercase();
    let instructs = ["function", "parameter", "call the", "calling", "invoke", "endpoint"];
    if !instructs.iter().any(|w| lower.contains(w)) {
        return Vec::new();
    }
    let snake = |w: &str| {
        w.contains('_')
            && !w.starts_with('_')
            && !w.ends_with('_')
            && w.starts_with(|c: char| c.is_ascii_lowercase())
            && w.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !is_identifier(w)
    };
    let mut names: Vec<&str> =
        answer.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| snake(w)).collect();
    names.sort_unstable();
    names.dedup();
    let known = |n: &str| {
        let bare = n.rsplit("__").next().unwrap_or(n);
        [n, bare].iter().any(|x| seen.contains(x) || calls.iter().any(|c| tool_name(&c.tool) == *x))
    };
    names
        .into_iter()
        .filter(|n| !known(n))
        .map(|n| format!("names `{n}`, which no call of the sample made and no request, argument or result holds (an answer reports what the calls found, not which function to call)"))
        .collect()
}

/// Is the claim at byte `pos` negated by one of the three words before it?
fn negated(lower: &str, pos: usize) -> bool {
    let before: Vec<&str> = lower[..pos].split_whitespace().rev().take(3).collect();
    before.iter().any(|w| {
        NEGATIONS
            .iter()
            .any(|n| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'') == *n || w.ends_with("n't"))
    })
}

/// A count said next to a claim: "acknowledged 2 alerts", "one alert was acknowledged".
fn count_near(lower: &str, pos: usize) -> Option<usize> {
    let num = |w: &str| -> Option<usize> {
        let w = w.trim_matches(|c: char| !c.is_alphanumeric());
        w.parse::<usize>().ok().filter(|n| *n < 1000).or_else(|| NUMBERS.iter().find(|(s, _)| *s == w).map(|(_, n)| *n))
    };
    let after: Vec<&str> = lower[pos..].split_whitespace().skip(1).take(2).collect();
    if let Some(n) = after.first().and_then(|w| num(w)) {
        return Some(n);
    }
    // "<n> <things> was/were <claim>": only with the verb between, so "in the last 5
    // minutes I acknowledged" says no count.
    let before: Vec<&str> = lower[..pos].split_whitespace().rev().take(4).collect();
    let aux = ["was", "were", "been", "are", "is", "got"];
    if before.first().is_some_and(|w| aux.contains(w)) || before.get(1).is_some_and(|w| aux.contains(w)) {
        return before.iter().find_map(|w| num(w));
    }
    // "<n> <things> <claim>" ("three alerts acknowledged"), but not a span of time ("in
    // the last 5 minutes acknowledged").
    let time = ["sec", "min", "hour", "hr", "day", "week", "month", "year", "time"];
    if let [thing, n, ..] = before.as_slice()
        && num(thing).is_none()
        && !time.iter().any(|t| thing.starts_with(*t))
    {
        return num(n);
    }
    None
}

/// The words of a text as the identifier scan splits them (quotes, brackets, commas and
/// semicolons apart; a full stop, colon or mark at a word's end dropped).
fn tokens(text: &str) -> Vec<&str> {
    text.split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')' | '"' | '\'' | '`' | '[' | ']'))
        .map(|w| w.trim_end_matches(['.', ':', '!', '?']))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Words that end what an action claim did: what follows them is another matter ("I
/// acknowledged A-1 but not A-3", "… and left A-3 open").
const BREAKS: &[&str] = &[
    "but",
    "except",
    "however",
    "while",
    "whereas",
    "although",
    "though",
    "not",
    "after",
    "before",
    "because",
    "since",
    "which",
    "who",
    "that",
    "then",
    "so",
    "yet",
    "besides",
    "other",
    "others",
    "remaining",
    "still",
    "left",
    "leaving",
    "skipped",
    "ignored",
    "kept",
];

/// Words a list of identifiers goes on through ("A-1, A-2 and A-3").
const LIST_WORDS: &[&str] = &["and", "&", "plus", "as", "well", "also", "ids", "id"];

/// Words after an identifier that start a clause of its own ("…, A-3 is still open").
const CLAUSE_VERBS: &[&str] =
    &["is", "are", "was", "were", "has", "have", "had", "remains", "remain", "stays", "stay", "still", "not"];

/// Words that put a claim before this turn ("earlier I acknowledged …").
const EARLIER: &[&str] = &["earlier", "previously", "already", "prior"];

/// A passive claim's auxiliaries ("were acknowledged"), and the words that may stand
/// between one and the claim ("have both been acknowledged").
const PASSIVE: &[&str] = &["was", "were", "been", "are", "is", "got"];
const BETWEEN: &[&str] = &["have", "has", "had", "now", "also", "all", "both", "each", "successfully"];

/// Longest lead of words between a claim and the first identifier of its list ("acknowledged
/// the alerts with IDs A-1 …").
const LEAD_WORDS: usize = 8;

/// Does a sentence end at byte `i` of `s` (a `.` before a space or the end, `!`, `?`, `;`, a
/// line break)?
fn sentence_end(s: &str, i: usize) -> bool {
    match s.as_bytes()[i] {
        b'!' | b'?' | b';' | b'\n' => true,
        b'.' => s.as_bytes().get(i + 1).is_none_or(|b| b.is_ascii_whitespace()),
        _ => false,
    }
}

/// `lower[a..b]` as the answer writes it, when the two line up byte for byte.
fn cased<'a>(answer: &'a str, lower: &'a str, a: usize, b: usize) -> &'a str {
    if answer.len() == lower.len() { answer.get(a..b).unwrap_or(&lower[a..b]) } else { &lower[a..b] }
}

/// The identifiers the claim at byte `pos` of `lower` (the answer in lower case) lists, as
/// written, each with whether it comes after the claim: the ids of its sentence after it,
/// from the first (within [`LEAD_WORDS`] words) through list words only ("acknowledged the
/// alerts with IDs A-1, A-2 and A-3"); before a passive claim, the ids right before its
/// auxiliary ("A-1 and A-2 were acknowledged"). None for a claim about an earlier turn.
fn claim_list(answer: &str, lower: &str, pos: usize, claim: &str) -> Vec<(String, bool)> {
    let claim_end = pos + claim.len();
    let start = (0..pos).rev().find(|&i| sentence_end(lower, i)).map_or(0, |i| i + 1);
    let end = (claim_end..lower.len()).find(|&i| sentence_end(lower, i)).unwrap_or(lower.len());
    let before = tokens(cased(answer, lower, start, pos));
    if before.iter().any(|w| EARLIER.contains(&w.to_lowercase().as_str())) {
        return Vec::new();
    }
    let after = tokens(cased(answer, lower, claim_end, end));
    let mut out = Vec::new();
    let mut listing = false;
    for (i, w) in after.iter().enumerate() {
        let lw = w.to_lowercase();
        if is_identifier(w) {
            if after.get(i + 1).is_some_and(|n| CLAUSE_VERBS.contains(&n.to_lowercase().as_str())) {
                break;
            }
            out.push((w.to_string(), true));
            listing = true;
            continue;
        }
        let ends = BREAKS.contains(&lw.as_str())
            || ACTIONS.iter().any(|a| a.claims.iter().any(|c| c.split(' ').next() == Some(lw.as_str())));
        if ends || (listing && !LIST_WORDS.contains(&lw.as_str())) || (!listing && i >= LEAD_WORDS) {
            break;
        }
    }
    let mut k = before.len();
    let mut passive = false;
    while k > 0 {
        let lw = before[k - 1].to_lowercase();
        if PASSIVE.contains(&lw.as_str()) {
            passive = true;
        } else if !BETWEEN.contains(&lw.as_str()) {
            break;
        }
        k -= 1;
    }
    if passive {
        for w in before[..k].iter().rev() {
            if is_identifier(w) {
                out.push((w.to_string(), false));
            } else if !LIST_WORDS.contains(&w.to_lowercase().as_str()) {
                break;
            }
        }
    }
    out
}

/// Does an argument value (lower case) hold the identifier `id` (lower case)?
fn holds(value: &str, id: &str) -> bool {
    value == id || has_word(value, id)
}

/// Do two identifiers (lower case) look like ids of one kind: two e-mail addresses, the
/// same letters before a separator (`a-1`, `a-17`), or, without such letters, the same
/// length and separators (two hashes, two uuids)?
fn same_shape(a: &str, b: &str) -> bool {
    fn prefix(s: &str) -> Option<&str> {
        let p = &s[..s.find(|c: char| !c.is_alphanumeric())?];
        (!p.is_empty() && p.chars().all(char::is_alphabetic)).then_some(p)
    }
    if a.contains('@') || b.contains('@') {
        return a.contains('@') && b.contains('@');
    }
    match (prefix(a), prefix(b)) {
        (Some(x), Some(y)) => x == y,
        (None, None) => {
            a.len() == b.len()
                && a.chars()
                    .zip(b.chars())
                    .all(|(x, y)| x.is_alphanumeric() == y.is_alphanumeric() && (x.is_alphanumeric() || x == y))
        }
        _ => false,
    }
}

/// The identifier arguments of a call: (argument name, value in lower case).
fn id_arguments(c: &RecordedCall) -> Vec<(String, String)> {
    argument_leaves(&c.arguments)
        .into_iter()
        .filter_map(|(n, v)| {
            let s = v.as_str()?.trim().to_lowercase();
            is_identifier(&s).then_some((n, s))
        })
        .collect()
}

/// The ids of a claim's list that stand for the argument `name` of the action's calls
/// (`targets`, per call): an id a call passed as `name`, or, after the claim, one shaped
/// like such an id (an alert the answer says it acted on and no call did).
fn listed_under<'a>(list: &'a [(String, bool)], targets: &[Vec<(String, String)>], name: &str) -> Vec<&'a str> {
    list.iter()
        .filter(|(id, after)| {
            let id = id.to_lowercase();
            targets
                .iter()
                .flatten()
                .any(|(n, v)| n.as_str() == name && (holds(v, &id) || (*after && same_shape(&id, v))))
        })
        .map(|(id, _)| id.as_str())
        .collect()
}

/// The plural noun of an action family's deeds, for a finding.
fn deeds(action: &str) -> &'static str {
    match action {
        "acknowledge" => "acknowledgements",
        "notify" => "notifications",
        "create" => "creations",
        "update" => "updates",
        "assign" => "assignments",
        "close" => "closures",
        "rollback" => "rollbacks",
        "restart" => "restarts",
        "delete" => "deletions",
        "escalate" => "escalations",
        _ => "actions",
    }
}

fn times(n: usize) -> String {
    match n {
        1 => "once".into(),
        2 => "twice".into(),
        n => format!("{n} times"),
    }
}

/// Action claims whose list of ids the turn's successful calls of that action do not bear
/// out (one finding per action family): more ids than calls ("acknowledged A-1, A-2 and
/// A-2" after two acknowledgements: an id named twice counts twice), or an id named more
/// often than calls acted on it. The ids counted are those of one argument of the calls
/// (`alert_id`), so a shared one ("notified X and Y about INC-5") does not add to them; an
/// id named once in different sentences is no list.
fn listed_claims(answer: &str, lower: &str, calls: &[&RecordedCall]) -> Vec<String> {
    let mut out = Vec::new();
    for a in ACTIONS {
        let targets: Vec<Vec<(String, String)>> = calls
            .iter()
            .copied()
            .filter(|c| ok(c) && action_of(&c.tool).is_some_and(|x| x.name == a.name))
            .map(id_arguments)
            .collect();
        if targets.is_empty() {
            continue;
        }
        let found = a.claims.iter().find_map(|claim| {
            word_positions(lower, claim)
                .into_iter()
                .filter(|p| !negated(lower, *p))
                .find_map(|p| list_finding(a.name, &targets, &claim_list(answer, lower, p, claim)))
        });
        out.extend(found);
    }
    out
}

/// What is wrong with one claim's list of ids (see [`listed_claims`]), if anything;
/// `targets` are the identifier arguments of each successful call of the action `action`.
fn list_finding(action: &str, targets: &[Vec<(String, String)>], list: &[(String, bool)]) -> Option<String> {
    let mut names: Vec<&str> = targets.iter().flatten().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let named: Vec<&str> =
        names.iter().map(|name| listed_under(list, targets, name)).max_by_key(|v| v.len()).unwrap_or_default();
    let keys: Vec<String> = named.iter().map(|id| id.to_lowercase()).collect();
    let mut twice = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let k = keys.iter().filter(|x| *x == key).count();
        let acted = targets.iter().filter(|t| t.iter().any(|(_, v)| holds(v, key))).count();
        if k >= 2 && k > acted && !keys[..i].contains(key) {
            let acted = match acted {
                0 => "no call acted on it".to_string(),
                n => format!("acted on {}", times(n)),
            };
            twice.push(format!("id {} is named {} but {acted}", named[i], times(k)));
        }
    }
    let over = named.len() > targets.len();
    if !over && twice.is_empty() {
        return None;
    }
    let mut why = format!("claims {} {} (ids {})", named.len(), deeds(action), named.join(", "));
    if over {
        why.push_str(&format!(" but the plan made {}", targets.len()));
    }
    for t in &twice {
        why.push_str(&format!("; {t}"));
    }
    Some(why)
}

/// Does a later user turn repeat an earlier one? (Same words, order and case aside.)
pub fn repeats(earlier: &[&str], user: &str) -> Option<usize> {
    let set = |s: &str| -> std::collections::BTreeSet<String> {
        words(s).into_iter().filter(|w| w.len() >= 3).map(|w| root(&w).to_string()).collect()
    };
    let now = set(user);
    if now.is_empty() {
        return None;
    }
    earlier.iter().position(|e| {
        let then = set(e);
        let common = now.intersection(&then).count();
        let union = now.union(&then).count();
        union > 0 && common * 10 >= union * 9
    })
}

/// Does a request ask for an action? (The family it asks for, when it does.) Only the
/// families of `tools` count, when the catalog is known (`None`: every family).
pub fn asks_for_action(request: &str, tools: Option<&[String]>) -> Option<&'static str> {
    ACTIONS
        .iter()
        .filter(|a| tools.is_none_or(|ts| ts.iter().any(|t| action_of(t).is_some_and(|x| x.name == a.name))))
        .find(|a| mentions(request, a.asks).is_some())
        .map(|a| a.name)
}

// ---------------------------------------------------------------------------
// Applying the checks to a validation candidate (`validate` runs these).

use super::validate::{Candidate, Source as Origin};
use crate::llm::Answer;

// The needed-call check's answer about a call the rules left open. Its doc comments are
// the schema's descriptions, which the model reads: they speak to it. The reason comes
// first: a model decodes the fields in schema order, and a verdict written before its
// reason was often contradicted by it. (This note was once the struct's doc comment, so the
// 0.5B judge read a bad reason it had given, about a price, in its schema, and gave it
// again for a request that mentions no price.)
/// Is this call needed to do what the user asked?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NeedCheck {
    /// One short sentence: what the user asked for and whether this call gives it, in your
    /// own words.
    pub reason: String,
    /// True when doing what the user asked needs this call.
    pub needed: bool,
}

/// What the needed-call check sends and accepts.
pub fn need_answer() -> Answer<NeedCheck> {
    Answer::<NeedCheck>::of().non_blank("reason", |c: &NeedCheck| c.reason.as_str())
}

// The assistant's second answer to a turn whose first one claimed what its calls did not
// do (the descriptions speak to the model).
/// Your reply to the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AnswerAgain {
    /// The reply: what the tool results show, and nothing they do not.
    pub answer: String,
}

/// What the answer re-ask sends and accepts.
pub fn again_answer() -> Answer<AnswerAgain> {
    Answer::<AnswerAgain>::of().non_blank("answer", |a: &AnswerAgain| a.answer.as_str())
}

/// A checkpointed LLM answer and the exchange behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Asked<T> {
    pub value: T,
    pub exchange: String,
    /// The exchange's ledger event (a parent of the verdict; not written to artifacts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<i64>,
}

/// Characters of a tool result shown to the LLM checks.
const RESULT_CHARS: usize = 600;

fn clip(s: &str) -> String {
    if s.chars().count() <= RESULT_CHARS {
        return s.to_string();
    }
    let cut: String = s.chars().take(RESULT_CHARS).collect();
    format!("{cut} …")
}

fn call_vars(n: usize, c: &RecordedCall) -> Value {
    serde_json::json!({
        "n": n,
        "tool": tool_name(&c.tool),
        "arguments": serde_json::to_string(&c.arguments).unwrap_or_default(),
        "result": clip(c.result.as_deref().or(c.error.as_deref()).unwrap_or("(no result)")),
    })
}

/// The request a turn answers: its user text, after the earlier turns' (a dialogue's
/// follow-up reads with what came before).
fn request_of(s: &crate::model::Sample, ti: usize) -> String {
    request_text(s.turns[..=ti].iter().map(|t| t.user.as_str()))
}

/// The request of a dialogue's last turn as the checks show it: alone for a first turn,
/// else every turn's user text in order (`turn 1: …`).
pub fn request_text<'a>(users: impl IntoIterator<Item = &'a str>) -> String {
    let users: Vec<&str> = users.into_iter().collect();
    if let [only] = users[..] {
        return only.to_string();
    }
    let mut out = String::new();
    for (i, u) in users.iter().enumerate() {
        out.push_str(&format!("turn {}: {}\n", i + 1, u.trim()));
    }
    out
}

/// The rules' findings about one candidate, turn by turn.
pub struct Review {
    requests: Vec<String>,
    turns: Vec<Classified>,
}

/// A call the rules left open: its LLM check's key and prompt variables.
pub struct Open {
    pub key: String,
    pub vars: Value,
}

fn turn_input<'a>(c: &'a Candidate, requests: &'a [String], ti: usize) -> TurnInput<'a> {
    let t = &c.sample.turns[ti];
    TurnInput {
        request: &requests[ti],
        answer: t.gold_reply.as_deref(),
        calls: t.trajectory.iter().flatten().collect(),
        chain_steps: if ti == 0 { c.chain_steps.clone() } else { vec![] },
        context: c.sample.turns[..ti].iter().flat_map(|t| t.trajectory.iter().flatten()).collect(),
    }
}

fn need_key(id: &str, turn: usize, call: usize) -> String {
    format!("need:{id}:{turn}.{call}")
}

impl Review {
    /// The rules over every turn of `c`, and the calls they leave to the LLM check.
    /// `about`: the tools' descriptions by tool name ([`lookups_adding_nothing`], which
    /// decides synthesised samples only: a real session's lookups are what its user got).
    pub fn start(c: &Candidate, about: &BTreeMap<String, String>) -> (Review, Vec<Open>) {
        let requests: Vec<String> = (0..c.sample.turns.len()).map(|i| request_of(&c.sample, i)).collect();
        let mut turns = Vec::new();
        let mut open = Vec::new();
        for ti in 0..c.sample.turns.len() {
            let t = turn_input(c, &requests, ti);
            let mut cl = classify(&t);
            if c.source != Origin::Real {
                lookups_adding_nothing(&t, &mut cl, about);
            }
            for (i, d) in cl.decisions.iter().enumerate() {
                if d.is_none() {
                    let before: Vec<Value> =
                        t.calls[..i].iter().enumerate().map(|(k, x)| call_vars(k + 1, x)).collect();
                    open.push(Open {
                        key: need_key(&c.sample.id, ti + 1, i + 1),
                        vars: serde_json::json!({"request": requests[ti], "before": before, "call": call_vars(i + 1, t.calls[i])}),
                    });
                }
            }
            turns.push(cl);
        }
        (Review { requests, turns }, open)
    }

    /// Take the LLM checks' answers, decide every call, trace the needed calls' arguments,
    /// and rewrite the candidate: left-out calls marked, the plan rebuilt from the needed
    /// calls, reasons and decisions recorded. `tools` are the catalog's tool names.
    pub fn settle(
        self,
        c: &mut Candidate,
        checks: &BTreeMap<String, Asked<NeedCheck>>,
        failed: &BTreeMap<String, String>,
        schemas: &BTreeMap<String, Value>,
        known: &KnownValues,
    ) {
        let strict = c.source != Origin::Real;
        let mut all: Vec<Vec<(Decision, String)>> = Vec::new();
        // The calls as they ran, read while the candidate is rewritten.
        let view = c.clone();
        for (ti, cl) in self.turns.into_iter().enumerate() {
            let t = turn_input(&view, &self.requests, ti);
            c.reasons.extend(cl.reasons.iter().map(|r| format!("turn {}: {r}", ti + 1)));
            let mut d = cl.decisions;
            let mut by = vec![By::Rule; d.len()];
            let mut exchange: Vec<Option<String>> = vec![None; d.len()];
            for i in 0..d.len() {
                if d[i].is_some() {
                    continue;
                }
                let key = need_key(&c.sample.id, ti + 1, i + 1);
                match checks.get(&key) {
                    Some(a) => {
                        let decision = if a.value.needed { Decision::Needed } else { Decision::Unrequested };
                        d[i] = Some((decision, crate::text::one_line(&a.value.reason)));
                        by[i] = By::Llm;
                        exchange[i] = Some(a.exchange.clone());
                        c.events.extend(a.event);
                    }
                    None => {
                        let why = failed.get(&key).cloned().unwrap_or_else(|| "no verdict".into());
                        c.reasons.push(format!(
                            "turn {} {}: the needed-call check gave no usable verdict: {why}",
                            ti + 1,
                            call_label(i, t.calls[i])
                        ));
                        d[i] = Some((Decision::Needed, "no verdict".into()));
                    }
                }
            }
            // A read the LLM check left out that a needed call consumes is needed after all.
            for j in (0..d.len()).rev() {
                if !matches!(d[j], Some((Decision::Needed, _))) {
                    continue;
                }
                for (i, path) in sources(&t, j) {
                    if by[i] == By::Llm
                        && matches!(d[i], Some((Decision::Unrequested, _)))
                        && !is_action(&t.calls[i].tool)
                    {
                        d[i] = Some((
                            Decision::Needed,
                            format!("{} uses its result (`{path}`)", call_label(j, t.calls[j])),
                        ));
                        by[i] = By::Rule;
                    }
                }
            }
            let d: Vec<(Decision, String)> =
                d.into_iter().map(|x| x.unwrap_or((Decision::Needed, String::new()))).collect();
            c.reasons.extend(unneeded_chain_steps(&t, &d, &by, ti));
            let (mut reasons, notes) = argument_reasons(&t, &d, schemas, strict);
            // A real session is what its user asked and got; a synthesised one must do all
            // its request names.
            if strict {
                reasons.extend(unserved_values(&t, &view.sample.turns[ti].user, &d, known));
            }
            c.reasons.extend(reasons.into_iter().map(|r| format!("turn {}: {r}", ti + 1)));
            c.notes.extend(notes.into_iter().map(|r| format!("turn {}: {r}", ti + 1)));
            if !t.calls.is_empty() && d.iter().all(|x| x.0 != Decision::Needed) && c.sample.turns.len() == 1 {
                c.reasons.push(format!("turn {}: no call of the run is one the request needs", ti + 1));
            }
            for (i, (decision, reason)) in d.iter().enumerate() {
                c.decisions.push(CallDecision {
                    turn: ti + 1,
                    call: i + 1,
                    tool: t.calls[i].tool.clone(),
                    decision: *decision,
                    by: by[i],
                    reason: reason.clone(),
                    exchange: exchange[i].clone(),
                });
            }
            all.push(d);
        }
        for (ti, d) in all.iter().enumerate() {
            rebuild_turn(c, &self.requests, ti, d);
        }
        let needed = all.iter().flatten().filter(|x| x.0 == Decision::Needed).count();
        if c.sample.turns.len() > 1 && needed == 0 {
            c.reasons.push("no call of the dialogue is one its requests need".into());
        }
        if c.source == Origin::Dialogue {
            cut_dialogue(c, schemas);
        }
    }
}

/// A chain sample is its chain: a step its query does not need (the LLM check's word; an
/// action's was given by `classify`) rejects it.
fn unneeded_chain_steps(t: &TurnInput, d: &[(Decision, String)], by: &[By], ti: usize) -> Vec<String> {
    t.chain_steps
        .iter()
        .filter(|&&i| by[i] == By::Llm && d[i].0 == Decision::Unrequested)
        .map(|&i| {
            format!(
                "turn {}: {}, a step of the sampled chain, is not needed by the request: {}",
                ti + 1,
                call_label(i, t.calls[i]),
                d[i].1
            )
        })
        .collect()
}

/// Mark a turn's left-out calls and rebuild its plan from the needed ones: groups as they
/// ran (empty ones dropped), dependencies from the chain and from traced arguments.
fn rebuild_turn(c: &mut Candidate, requests: &[String], ti: usize, d: &[(Decision, String)]) {
    let deps: Vec<Vec<usize>> = {
        let t = turn_input(c, requests, ti);
        (0..t.calls.len()).map(|j| sources(&t, j).into_iter().map(|(i, _)| i).collect()).collect()
    };
    let chain = if ti == 0 { c.chain_steps.clone() } else { vec![] };
    let turn = &mut c.sample.turns[ti];
    let mut k = 0;
    for g in &mut turn.trajectory {
        for call in g {
            call.left_out = match &d[k] {
                (Decision::Needed, _) => None,
                (x, why) => Some(format!("{}: {why}", x.as_str())),
            };
            k += 1;
        }
    }
    // Plan index of each kept call (by trajectory position).
    let mut plan_index: BTreeMap<usize, usize> = BTreeMap::new();
    let mut k = 0;
    let mut plan = Vec::new();
    let mut group = 0u32;
    for g in &turn.trajectory {
        let mut any = false;
        for call in g {
            if call.left_out.is_none() {
                plan_index.insert(k, plan.len());
                let mut on: Vec<usize> = deps[k].iter().filter_map(|i| plan_index.get(i).copied()).collect();
                if let Some(step) = chain.iter().position(|&x| x == k)
                    && step > 0
                    && let Some(p) = plan_index.get(&chain[step - 1])
                {
                    on.push(*p);
                }
                on.sort_unstable();
                on.dedup();
                plan.push(crate::model::PlanCall { alternatives: vec![call.tool.clone()], group, depends_on: on });
                any = true;
            }
            k += 1;
        }
        if any {
            group += 1;
        }
    }
    turn.reference_plan = plan;
}

/// Item 4 of the checks: a dialogue's user turn that repeats an earlier one, or asks for an
/// action and has an empty reference plan, ends the dialogue before it (a sample when at
/// least two turns remain).
fn cut_dialogue(c: &mut Candidate, schemas: &BTreeMap<String, Value>) {
    let known: Vec<String> = schemas.keys().cloned().collect();
    let tools = (!known.is_empty()).then_some(known.as_slice());
    if let Some(first) = c.sample.turns.first()
        && first.reference_plan.is_empty()
        && let Some(a) = asks_for_action(&first.user, tools)
    {
        c.reasons.push(format!("turn 1 asks for an action ({a}) and its reference plan is empty"));
        return;
    }
    let mut cut = None;
    for ti in 1..c.sample.turns.len() {
        let earlier: Vec<&str> = c.sample.turns[..ti].iter().map(|t| t.user.as_str()).collect();
        let t = &c.sample.turns[ti];
        if let Some(j) = repeats(&earlier, &t.user) {
            cut = Some((ti, format!("turn {} repeats turn {}", ti + 1, j + 1)));
            break;
        }
        if t.reference_plan.is_empty()
            && let Some(a) = asks_for_action(&t.user, tools)
        {
            cut = Some((ti, format!("turn {} asks for an action ({a}) and its reference plan is empty", ti + 1)));
            break;
        }
    }
    let Some((ti, why)) = cut else { return };
    if ti >= 2 {
        c.notes.push(format!("the dialogue ends before turn {}: {why}", ti + 1));
        c.sample.turns.truncate(ti);
        c.decisions.retain(|d| d.turn <= ti);
        c.stopped_by_user = false;
    } else {
        c.reasons.push(format!("{why}; fewer than two turns remain before it"));
    }
}

/// Adds what a turn showed to `seen` (the text an answer may take ids and names from): the
/// request, the names of every call, and the arguments and results of the `kept` ones.
pub fn see_turn(seen: &mut String, user: &str, calls: &[&RecordedCall], kept: &[&RecordedCall]) {
    seen.push_str(user);
    seen.push('\n');
    for x in calls {
        seen.push_str(&tool_name(&x.tool).to_lowercase());
        seen.push('\n');
    }
    for k in kept {
        seen.push_str(&k.arguments.to_string());
        seen.push('\n');
        seen.push_str(k.result.as_deref().unwrap_or_default());
        seen.push('\n');
    }
}

/// The claims of `answer` that its conversation `c` does not support ([`turn_claims`]),
/// with the prompt variables of the answer's re-ask; `None` for a supported answer.
pub fn answer_problems(c: &Conversation, request: &str, answer: &str) -> Option<(Vec<String>, Value)> {
    let claims = turn_claims(answer, c);
    if claims.is_empty() {
        return None;
    }
    let calls: Vec<Value> = c.kept.iter().enumerate().map(|(i, x)| call_vars(i + 1, x)).collect();
    let vars = serde_json::json!({"request": request, "calls": calls, "answer": answer, "problems": claims});
    Some((claims, vars))
}

/// What a turn's answer is checked against ([`conversation_to`]).
pub struct Conversation<'a> {
    /// What the conversation showed up to the answer ([`see_turn`] of each turn, the earlier
    /// turns' answers between them).
    pub seen: String,
    /// The same without the earlier answers: what the calls and requests gave.
    pub given: String,
    /// The turn's reference calls.
    pub kept: Vec<&'a RecordedCall>,
    /// The calls left out of the reference, in this turn and the earlier ones.
    pub left: Vec<&'a RecordedCall>,
}

/// [`unsupported_claims`] against a turn's kept calls, and the values the answer quotes
/// from the results of calls the reference leaves out that the calls and requests kept do
/// not give (an earlier answer that quoted it is no source: it may be rewritten): such an
/// answer reports what the reference never looked up. A value counts when the answer also
/// names its field (the `severity` of "… has a severity of high"), so a common word that
/// happens to be some left-out field's value is no quote; identifiers are
/// [`unsupported_claims`]' own finding. The demo's incident dialogue answered "Find the open
/// incident about notifications errors" with "… has a severity of high.", from the
/// `get_incident` call `validate` left out as a lookup that adds nothing the request names.
pub fn turn_claims(answer: &str, c: &Conversation) -> Vec<String> {
    let mut out = unsupported_claims(answer, &c.kept, &c.seen);
    let (lower, given) = (answer.to_lowercase(), c.given.to_lowercase());
    for x in c.left.iter().filter(|x| ok(x)) {
        let quoted = result_leaves(x.result.as_deref().unwrap_or_default()).into_iter().find(|(p, v)| {
            let v = v.trim().to_lowercase();
            !p.is_empty()
                && !is_identifier(&v)
                && has_word(&lower, &v)
                && !has_word(&given, &v)
                && asks_about(answer, &x.tool, p)
        });
        if let Some((path, v)) = quoted {
            let claim = format!(
                "quotes `{}`, the `{path}` of `{}`, a call left out as not needed",
                v.trim().to_lowercase(),
                tool_name(&x.tool)
            );
            if !out.contains(&claim) {
                out.push(claim);
            }
        }
    }
    out
}

/// What the conversation of `s` showed up to turn `ti`'s answer, and the calls it is
/// checked against.
fn conversation_to(s: &crate::model::Sample, ti: usize) -> Conversation<'_> {
    let mut c = Conversation { seen: String::new(), given: String::new(), kept: Vec::new(), left: Vec::new() };
    for (i, t) in s.turns[..=ti].iter().enumerate() {
        let calls: Vec<&RecordedCall> = t.trajectory.iter().flatten().collect();
        let left;
        (c.kept, left) = calls.iter().copied().partition(|x| x.left_out.is_none());
        c.left.extend(left);
        see_turn(&mut c.seen, &t.user, &calls, &c.kept);
        see_turn(&mut c.given, &t.user, &calls, &c.kept);
        if let Some(a) = t.gold_reply.as_deref().filter(|_| i < ti) {
            c.seen.push_str(a);
            c.seen.push('\n');
        }
    }
    c
}

/// Turns whose answer claims what the calls did not do: (turn, the claims, prompt vars).
pub fn unfaithful(c: &Candidate) -> Vec<(usize, Vec<String>, Value)> {
    let mut out = Vec::new();
    for (ti, t) in c.sample.turns.iter().enumerate() {
        let Some(a) = &t.gold_reply else { continue };
        let conv = conversation_to(&c.sample, ti);
        if let Some((claims, vars)) = answer_problems(&conv, &request_of(&c.sample, ti), a) {
            out.push((ti, claims, vars));
        }
    }
    out
}

/// One line about a `validate.verdict` event: accepted or the reasons, the calls left out
/// of the reference plan with why, and what the checks changed.
pub fn describe_verdict(p: &Value) -> String {
    let strs = |k: &str| -> Vec<String> {
        p[k].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
    };
    let mut out = if p["accepted"] == true {
        "accepted".to_string()
    } else {
        format!("rejected: {}", strs("reasons").join("; "))
    };
    let calls: Vec<CallDecision> = serde_json::from_value(p["calls"].clone()).unwrap_or_default();
    if !calls.is_empty() {
        let kept = calls.iter().filter(|c| c.decision == Decision::Needed).count();
        out.push_str(&format!("; {kept} of {} calls in the reference plan", calls.len()));
        for c in calls.iter().filter(|c| c.decision != Decision::Needed) {
            let by = if c.by == By::Llm { ", by the LLM check" } else { "" };
            out.push_str(&format!(
                "; left out: turn {} call {} `{}` ({}{by}: {})",
                c.turn,
                c.call,
                tool_name(&c.tool),
                c.decision.as_str(),
                c.reason
            ));
        }
    }
    for n in strs("notes") {
        out.push_str(&format!("; {n}"));
    }
    out
}

/// The key of a turn's answer re-ask.
pub fn answer_key(id: &str, turn: usize) -> String {
    format!("answer:{id}:{turn}")
}

/// Take a re-asked answer when the checks find it supported; else reject the sample.
pub fn settle_answer(c: &mut Candidate, ti: usize, claims: &[String], again: Result<&Asked<AnswerAgain>, String>) {
    let first = claims.join("; ");
    let asked = match again {
        Ok(a) => a,
        Err(why) => {
            c.reasons.push(format!(
                "turn {}: the answer is not supported by its calls: {first} (asking again failed: {why})",
                ti + 1
            ));
            return;
        }
    };
    c.events.extend(asked.event);
    // What the conversation showed up to the turn, as the first check saw it (`unfaithful`).
    let conv = conversation_to(&c.sample, ti);
    let answer = asked.value.answer.trim().to_string();
    let still = turn_claims(&answer, &conv);
    if still.is_empty() {
        c.notes.push(format!("turn {}: the answer was asked again ({first})", ti + 1));
        c.sample.turns[ti].gold_reply = Some(answer);
    } else {
        c.reasons.push(format!(
            "turn {}: the answer is not supported by its calls: {first} (asked again once: {})",
            ti + 1,
            still.join("; ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(tool: &str, args: Value, result: &str) -> RecordedCall {
        RecordedCall {
            tool: format!("ops::{tool}"),
            arguments: args,
            result: Some(result.into()),
            error: None,
            left_out: None,
        }
    }

    fn decide(t: &TurnInput) -> Vec<Option<Decision>> {
        classify(t).decisions.into_iter().map(|d| d.map(|x| x.0)).collect()
    }

    #[test]
    fn names_split_into_words_and_actions_are_told_from_reads() {
        assert_eq!(words("getAlerts"), ["get", "alerts"]);
        assert_eq!(words("acknowledge_alert"), ["acknowledge", "alert"]);
        assert!(is_action("ops::acknowledge_alert"));
        assert!(is_action("ops::notify_user"));
        assert!(!is_action("ops::get_alerts"));
        assert!(!is_action("ops::list_deployments"), "a read verb first wins over `deployments`");
        assert!(is_identifier("ALR-77") && is_identifier("maria@corp.example") && !is_identifier("billing"));
    }

    #[test]
    fn an_unrequested_action_is_left_out_and_a_requested_one_is_kept() {
        let calls = [
            call("get_oncall", json!({"team": "database"}), r#"{"email":"dba@corp.example"}"#),
            call("notify_user", json!({"email": "dba@corp.example"}), r#"{"result_id":"N-9"}"#),
            call("acknowledge_alert", json!({"alert_id": "N-9"}), r#"{"ok":true}"#),
        ];
        let t = TurnInput {
            request: "Find the database team's on-call person and e-mail them",
            answer: Some("I e-mailed dba@corp.example."),
            calls: calls.iter().collect(),
            chain_steps: vec![0, 1],
            context: vec![],
        };
        assert_eq!(decide(&t), [Some(Decision::Needed), Some(Decision::Needed), Some(Decision::Unrequested)]);
    }

    #[test]
    fn a_value_the_request_names_beside_a_given_one_must_be_given_too() {
        let mut known = KnownValues::default();
        for service in ["auth", "notifications", "search", "payments", "billing", "gateway", "checkout"] {
            known.add_call(&json!({"service": service, "window": "1h", "text": "free text, many words"}));
        }
        for severity in ["any", "high", "critical"] {
            known.add_call(&json!({"severity": severity}));
        }
        known.add_schema(&json!({"properties": {"team": {"type": "string", "enum": ["sre", "network", "database", "platform", "payments-dev"]}}}));
        fn turn<'a>(request: &'a str, calls: &'a [RecordedCall]) -> TurnInput<'a> {
            TurnInput { request, answer: None, calls: calls.iter().collect(), chain_steps: vec![], context: vec![] }
        }
        let needed = |n: usize| vec![(Decision::Needed, String::new()); n];
        let check = |t: &TurnInput, n: usize| unserved_values(t, t.request, &needed(n), &known);
        // The demo's chain (clean run of 2026-12-06): two services asked for, one served.
        let calls = [
            call("get_service_status", json!({"service": "auth"}), r#"{"state":"up"}"#),
            call("query_metrics", json!({"service": "auth", "metric": "cpu", "window": "1h"}), r#"{"v":697.05}"#),
        ];
        let mut t = TurnInput {
            request: "Find the health of the auth service and the CPU usage for notifications over the last hour.",
            answer: None,
            calls: calls.iter().collect(),
            chain_steps: vec![0, 1],
            context: vec![],
        };
        let r = check(&t, 2);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(r[0].starts_with("the request names `notifications`, a `service` of the domain's calls, but the needed calls (`get_service_status`, `query_metrics`) give `service` only `auth`"), "{r:?}");
        // The demo's dialogue: a schema's enum counts as known.
        let oncall = [call("get_oncall", json!({"team": "network"}), r#"{"email":"n@corp.example"}"#)];
        let d = turn("Who is on call for network and sre?", &oncall);
        assert!(check(&d, 1)[0].contains("names `sre`, a `team`"), "{:?}", check(&d, 1));
        // Served by a call's argument or result: nothing to say.
        let both = [calls[0].clone(), call("query_metrics", json!({"service": "notifications"}), "{}")];
        t.calls = both.iter().collect();
        assert!(check(&t, 2).is_empty());
        let deps = [call("get_service_dependencies", json!({"service": "checkout"}), r#"{"depends_on":["gateway"]}"#)];
        let d = turn("Does checkout depend on gateway?", &deps);
        assert!(check(&d, 1).is_empty(), "read from the result");
        // Not judged: an enum-like parameter (few values); a negated or tool-word mention; a
        // message that names no given value; a call that is not needed; an earlier turn's call.
        let alerts = [call("get_alerts", json!({"service": "billing", "severity": "critical"}), "{}")];
        let d = turn("Are there any critical alerts on billing?", &alerts);
        assert!(check(&d, 1).is_empty(), "`any` is a severity, and an everyday word");
        let d = turn("Check the alerts of billing, not gateway", &alerts);
        assert!(check(&d, 1).is_empty(), "negated");
        let logs = [call("searchLogs", json!({"service": "auth"}), "{}")];
        let d = turn("Search the auth logs", &logs);
        assert!(check(&d, 1).is_empty(), "`search` is what the tool does");
        t.calls = calls.iter().collect();
        t.request = "How are payments doing?";
        assert!(check(&t, 2).is_empty(), "`auth` is not named: another check's business");
        t.request = "Find the health of auth and notifications.";
        let left_out = vec![(Decision::Unrequested, String::new()); 2];
        assert!(unserved_values(&t, t.request, &left_out, &known).is_empty(), "no needed call gives `service`");
        let earlier = [call("get_service_status", json!({"service": "notifications"}), "{}")];
        t.context = earlier.iter().collect();
        assert!(check(&t, 2).is_empty(), "an earlier turn gave it");
        // A dialogue's later turn is judged by its own message only.
        t.context = vec![];
        let own = "And its CPU?";
        assert!(unserved_values(&t, own, &needed(2), &known).is_empty());
    }

    #[test]
    fn a_chain_step_is_needed_on_evidence_only() {
        // The demo's released chain (clean run at 4b1af71): the query asks for the search;
        // nothing says it needs the incident's details.
        let calls = [
            call(
                "search_incidents",
                json!({"query": "slow checkout", "status": "open"}),
                r#"{"incidents":[{"id":"INC-2231","title":"slow checkout"}]}"#,
            ),
            call("get_incident", json!({"incident_id": "INC-2231"}), r#"{"id":"INC-2231","severity":"high"}"#),
        ];
        let mut t = TurnInput {
            request: "Find open incidents about slow checkout",
            answer: Some("The open incidents about slow checkout are: slow checkout"),
            calls: calls.iter().collect(),
            chain_steps: vec![0, 1],
            context: vec![],
        };
        assert_eq!(decide(&t), [None, None], "both open for the LLM check");
        // An answer quoting a detail the request never asks about shows the agent used the
        // call, not that the request needs it: still the LLM check's (the demo's dialogue
        // of 2026-12-06, "Find the open incident about notifications errors", answered with
        // the severity, had `get_incident` made a reference step by this quote alone).
        // The search is needed: the answer quotes the id of the incidents the request asks for.
        t.answer = Some("INC-2231 is open, with high severity.");
        assert_eq!(decide(&t), [Some(Decision::Needed), None]);
        // A request that asks for the severity needs the details, and the search with them.
        t.request = "What is the severity of the open incident about slow checkout?";
        assert_eq!(decide(&t), [Some(Decision::Needed), Some(Decision::Needed)]);
        let why = classify(&t).decisions[1].clone().unwrap().1;
        assert_eq!(why, "the answer quotes its result's `severity` (`high`), which the request asks about");
    }

    #[test]
    fn a_quoted_field_is_asked_about_by_its_own_name_not_its_container() {
        let find = "Find the open incident about notifications errors";
        // The field's own name, however the result wraps it (a helper's finding: the entity
        // word of `incident.severity` made any wrapped result count as asked about).
        for path in ["severity", "incident.severity", "data.incident.severity", "incidents[0].severity"] {
            assert!(!asks_about(find, "ops::get_incident", path), "{path}");
            assert!(asks_about("What is the severity of INC-7?", "ops::get_incident", path), "{path}");
        }
        assert!(!asks_about(find, "ops::get_incident", "incident_severity"));
        assert!(!asks_about(find, "ops::get_incident", "incidentSeverity"));
        // A generic key is named by what holds it, a bare list by the tool.
        assert!(asks_about(find, "ops::search_incidents", "incidents[0].id"));
        assert!(!asks_about("Show item 0", "ops::search_incidents", "incidents[0].id"));
        assert!(
            asks_about("Which service is down?", "ops::list_services", "[0].name"),
            "plural tool, singular request"
        );
        assert!(asks_about("List the services", "ops::get_status", "service"), "singular field, plural request");
        // Short words of a key (`at`, `to`) are no names: "is" and "at" in a request ask for nothing.
        assert!(!asks_about("What is it? Look at it", "ops::get_incident", "created_at"));
        assert!(!asks_about("I need to know", "ops::get_incident", "assigned_to"));
        // A key that is a read verb elsewhere (`status`) is still the field's name.
        assert!(!asks_about(find, "ops::get_incident", "incident.status"));
        assert!(asks_about("What is the status of INC-7?", "ops::get_incident", "incident.status"));
        // "Who" asks about an assignee (kindred words).
        assert!(asks_about("Who is handling INC-2231?", "ops::get_incident", "assignee"));
        assert!(!asks_about("Find INC-2231", "ops::get_incident", "assignee"));
    }

    #[test]
    fn words_are_whole_words_around_multibyte_characters_too() {
        assert!(has_word("prix du café auth", "auth") && !has_word("authé", "auth") && !has_word("éauth", "auth"));
        assert!(has_word("服务 auth，", "auth"));
    }

    #[test]
    fn a_repeated_read_is_left_out_unless_an_action_ran_between() {
        let calls = [
            call("get_alerts", json!({"service": "gateway"}), r#"{"alerts":[{"id":"A-1"}]}"#),
            call("get_alerts", json!({"service": "gateway"}), r#"{"alerts":[{"id":"A-1"}]}"#),
        ];
        let t = TurnInput {
            request: "alerts on gateway",
            answer: None,
            calls: calls.iter().collect(),
            chain_steps: vec![0],
            context: vec![],
        };
        // The chain step itself has no evidence here (no answer): the LLM check decides it.
        assert_eq!(decide(&t), [None, Some(Decision::Repeated)]);
        let calls = [
            call("get_alerts", json!({"service": "gateway"}), r#"{"alerts":[{"id":"A-1"}]}"#),
            call("acknowledge_alert", json!({"alert_id": "A-1"}), r#"{"ok":true}"#),
            call("get_alerts", json!({"service": "gateway"}), r#"{"alerts":[]}"#),
        ];
        let t = TurnInput {
            request: "acknowledge the alerts on gateway",
            answer: None,
            calls: calls.iter().collect(),
            chain_steps: vec![0, 1],
            context: vec![],
        };
        assert_eq!(decide(&t)[2], None, "after an action a read may show something new: for the LLM check");
        // The same result after the action: nothing new after all.
        let mut same = calls.clone();
        same[2].result = same[0].result.clone();
        let t = TurnInput {
            request: "acknowledge the alerts on gateway",
            answer: Some("A-1 is acknowledged."),
            calls: same.iter().collect(),
            chain_steps: vec![0, 1],
            context: vec![],
        };
        let d = classify(&t).decisions;
        assert_eq!(d[2].as_ref().map(|x| x.0), Some(Decision::Repeated));
        assert_eq!(d[2].as_ref().unwrap().1, "the same call and result as call 1: nothing new");
    }

    #[test]
    fn an_id_from_an_unrelated_result_or_from_nowhere_is_refused() {
        let earlier = [Earlier { call: 1, tool: "ops::notify_user", result: Some(r#"{"result_id":"N-9"}"#) }];
        assert_eq!(
            trace("alert_id", &json!("N-9"), "ack it", &earlier, None),
            Trace::Unrelated { call: 1, path: "result_id".into() }
        );
        let earlier = [Earlier { call: 1, tool: "ops::get_alerts", result: Some(r#"{"alerts":[{"id":"A-7"}]}"#) }];
        assert_eq!(
            trace("alert_id", &json!("A-7"), "ack it", &earlier, None),
            Trace::Found(Source::Result { call: 1, path: "alerts[0].id".into() })
        );
        assert_eq!(trace("alert_id", &json!("A-8"), "ack it", &earlier, None), Trace::Nowhere);
        assert_eq!(trace("service", &json!("billing"), "is billing slow?", &[], None), Trace::Found(Source::Request));
        assert_eq!(trace("metric", &json!("latency_p99"), "its latency", &[], None), Trace::Found(Source::Request));
        assert_eq!(trace("limit", &json!(10), "alerts", &[], Some(&json!(10))), Trace::Found(Source::Default));
        assert_eq!(trace("limit", &json!(10), "alerts", &[], None), Trace::Nowhere);
        assert_eq!(
            trace(
                "owner",
                &json!("maria"),
                "x",
                &[Earlier { call: 1, tool: "ops::get_oncall", result: Some(r#"{"user":"maria"}"#) }],
                None
            ),
            Trace::Found(Source::Result { call: 1, path: "user".into() }),
            "kindred words: owner ~ user"
        );
    }

    /// A message the agent composed is traced by its identifiers: all from a result (or the
    /// request) is found, at the first result one came from; one made up is from nowhere;
    /// a message without an identifier is traced as before.
    #[test]
    fn a_composed_message_is_traced_by_its_identifiers() {
        let oncall = r#"{"team":"database","user":"anna","email":"anna@company.com","phone":"PHONE_34f473d0b5"}"#;
        let earlier = [Earlier { call: 1, tool: "ops::get_oncall", result: Some(oncall) }];
        let request = "Who is on call for the database team? E-mail them the outage";
        let message = "The current on-call person for the database team is Anna. Please contact her at Anna@company.com or call her at PHONE_34f473d0b5.";
        assert_eq!(
            trace("message", &json!(message), request, &earlier, None),
            Trace::Found(Source::Result { call: 1, path: "email".into() })
        );
        let made_up = "Anna is on call: reach her at anna@company.com about INC-9999 today.";
        assert_eq!(trace("message", &json!(made_up), request, &earlier, None), Trace::Nowhere);
        assert_eq!(trace("note", &json!("Ack INC-9999"), "ack the database alert", &earlier, None), Trace::Nowhere);
        let from_request = "Please look at INC-8983 as soon as you can, thanks.";
        let asked = "Tell the sre team about INC-8983";
        assert_eq!(trace("message", &json!(from_request), asked, &[], None), Trace::Found(Source::Request));
        // Short values and prose are traced as before.
        assert_eq!(trace("alert_id", &json!("A-8"), "ack it", &earlier, None), Trace::Nowhere);
        let prose = "The database team is looking into the outage now.";
        assert_eq!(trace("message", &json!(prose), request, &earlier, None), Trace::Found(Source::Request));
        // Ids between punctuation and with a possessive are read; short names of things are
        // not ids.
        let punctuated = "Please close INC-8983's duplicate (see A-1,A-2) on EC2 and S3 by 10:30am today.";
        assert_eq!(message_ids(&punctuated.to_lowercase()), ["inc-8983", "a-1", "a-2"]);
    }

    #[test]
    fn an_answer_that_claims_more_than_its_calls_is_caught() {
        let ack = call("acknowledge_alert", json!({"alert_id": "A-1"}), r#"{"ok":true}"#);
        let ack2 = call("acknowledge_alert", json!({"alert_id": "A-2"}), r#"{"ok":true}"#);
        let seen = "acknowledge A-1 A-2";
        assert!(unsupported_claims("I acknowledged two alerts: A-1 and A-2.", &[&ack, &ack2], seen).is_empty());
        let one = unsupported_claims("One alert was acknowledged.", &[&ack, &ack2], seen);
        assert!(one[0].contains("says 1 acknowledged, and 2"), "{one:?}");
        let none = unsupported_claims("The incident has been acknowledged.", &[], "find incidents");
        assert!(none[0].contains("no call of the turn did that"), "{none:?}");
        assert!(unsupported_claims("It was not acknowledged.", &[], "").is_empty(), "a negated claim is no claim");
        let made_up = unsupported_claims("See INC-9999.", &[&ack], seen);
        assert!(made_up[0].contains("`INC-9999`"), "{made_up:?}");
    }

    /// chain-a2b4d34d7b of the demo release: asked for the on-call person and a message,
    /// the answer told the user to call a function nobody called.
    #[test]
    fn an_answer_that_names_a_function_no_call_made_is_caught() {
        let oncall = call("get_oncall", json!({"team": "database"}), r#"{"name":"Anna","email":"EMAIL_d5dd4ff5d1"}"#);
        let notify = call("notify_user", json!({"email": "EMAIL_d5dd4ff5d1", "message": "hi"}), r#"{"id":"2fb281ef"}"#);
        let seen = r#"find the on-call person for the database team {"team":"database"} {"name":"anna","email":"email_d5dd4ff5d1"} {"email":"email_d5dd4ff5d1","message":"hi"} {"id":"2fb281ef"}"#;
        let answer = "To acknowledge the alert for the incident with ID \"2fb281ef\", you can call the \
                      `acknowledge_alert` function with the `alert_id` parameter set to \"2fb281ef\".";
        let found = unsupported_claims(answer, &[&oncall, &notify], seen);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("names `acknowledge_alert`, which no call of the sample made"), "{found:?}");
        assert!(found[1].starts_with("names `alert_id`"), "{found:?}");
        // A report of what the calls did passes, a called tool and a quoted value named too.
        let report = "I used notify_user to message Anna at EMAIL_d5dd4ff5d1; she is on call for the database team.";
        assert!(unsupported_claims(report, &[&oncall, &notify], seen).is_empty());
        // The agent's own name of a called tool, and a parameter in an answer that gives no
        // instruction, pass too.
        let named = "I called the `pagerduty__notify_user` function to message Anna.";
        assert!(unsupported_claims(named, &[&oncall, &notify], seen).is_empty());
        assert!(unsupported_claims("Anna is on call; no due_date was set.", &[&oncall, &notify], seen).is_empty());
    }

    #[test]
    fn an_answer_that_names_more_acts_than_its_calls_made_is_caught() {
        let ack = |id: &str| call("acknowledge_alert", json!({"alert_id": id}), r#"{"ok":true}"#);
        // chain-963ddb8bdf of the demo release: two acknowledgements, three claimed, one id twice.
        let (a, b) = (ack("469aa735"), ack("34e663dc"));
        let seen = "acknowledge the gateway alerts 469aa735 34e663dc";
        let demo =
            unsupported_claims("I acknowledged the alerts with IDs 469aa735, 34e663dc, and 34e663dc.", &[&a, &b], seen);
        assert_eq!(
            demo,
            ["claims 3 acknowledgements (ids 469aa735, 34e663dc, 34e663dc) but the plan made 2; \
              id 34e663dc is named twice but acted on once"]
        );
        // The same list with as many ids as calls, each once: faithful.
        let (a1, b2) = (ack("a1"), ack("b2"));
        let seen = "acknowledge a1 b2";
        assert!(unsupported_claims("I acknowledged the alerts with IDs a1 and b2", &[&a1, &b2], seen).is_empty());
        assert!(unsupported_claims("Alerts a1 and b2 were acknowledged.", &[&a1, &b2], seen).is_empty());
        // A count said in words: three claimed, two made.
        let three = unsupported_claims("Three alerts acknowledged: a1 and b2.", &[&a1, &b2], seen);
        assert_eq!(three, ["says 3 acknowledged, and 2 call(s) of the turn did that"]);
        let three = unsupported_claims("I acknowledged three alerts.", &[&a1, &b2], seen);
        assert_eq!(three, ["says 3 acknowledged, and 2 call(s) of the turn did that"]);
        // A passive list, and an id of the same kind no call acted on.
        let twice = unsupported_claims("Alerts a1, b2 and b2 were acknowledged.", &[&a1, &b2], seen);
        assert!(twice[0].contains("id b2 is named twice but acted on once"), "{twice:?}");
        let seen = "acknowledge a1 b2; open: c3";
        let more = unsupported_claims("I acknowledged a1, b2 and c3.", &[&a1, &b2], seen);
        assert_eq!(more, ["claims 3 acknowledgements (ids a1, b2, c3) but the plan made 2"]);
        // An id named again outside the claim's list, or after the list in a clause of its
        // own, is no claim.
        assert!(unsupported_claims("I acknowledged a1 and b2. b2 was the noisy one.", &[&a1, &b2], seen).is_empty());
        assert!(unsupported_claims("I acknowledged a1 and b2, c3 is still open.", &[&a1, &b2], seen).is_empty());
        assert!(unsupported_claims("I acknowledged a1 and b2 but not c3.", &[&a1, &b2], seen).is_empty());
        assert!(unsupported_claims("I acknowledged a1 and b2 and left c3 open.", &[&a1, &b2], seen).is_empty());
        // An argument the calls share (the incident both notifications are about) adds no act.
        let n = |email: &str| call("notify_user", json!({"email": email, "incident": "INC-5"}), r#"{"ok":true}"#);
        let (x, y) = (n("x@corp.example"), n("y@corp.example"));
        let seen = "x@corp.example y@corp.example INC-5";
        let said = "I notified x@corp.example and y@corp.example about INC-5.";
        assert!(unsupported_claims(said, &[&x, &y], seen).is_empty());
    }

    #[test]
    fn a_turn_that_repeats_an_earlier_one_is_found() {
        assert_eq!(repeats(&["Find open alerts on gateway"], "find open alerts on gateway!"), Some(0));
        assert_eq!(repeats(&["Find open alerts on gateway"], "now acknowledge them"), None);
        assert_eq!(
            asks_for_action("please acknowledge it", Some(&["ops::acknowledge_alert".into()])),
            Some("acknowledge")
        );
        assert_eq!(asks_for_action("what is open?", Some(&["ops::acknowledge_alert".into()])), None);
    }
}
