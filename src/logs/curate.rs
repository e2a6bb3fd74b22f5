//! `benchgen logs curate` (stage `logs-curate`): FinMCP's three retention criteria,
//! each decision with its reason in the ledger (`benchgen explain log:<id>`).
//!
//! 1. **Resolved through tool calls** (rule, checked first, no LLM): at least one call,
//!    and every failing call (an error result or arguments that are not JSON) is followed,
//!    later in the same turn, by a successful call of the same tool.
//! 2. **Genuine need of the domain**: rules first ([`need_by_rule`]): a successful call
//!    whose tool the request names or describes (as the log catalog describes it), or one
//!    of whose argument values the request contains, or positive feedback, keeps the
//!    session with `by: "rule"` and no LLM call; then, with `keep_similarity`, a called
//!    tool whose text is that near the requests by embedding ([`need_by_similarity`],
//!    `by: "similarity"`). Only where the rules cannot tell is the LLM asked (typed
//!    [`NeedVerdict`]).
//! 3. **Satisfactory answer**: the logs' feedback field when present; otherwise no final
//!    answer fails, and an answer is judged by the LLM (typed [`AnswerVerdict`]).
//!
//! An LLM verdict that would drop a session is never enough alone: a second, independent
//! verdict is asked ([`SecondAsk`]: the judge role with its seed + 1, or `second_role`), and
//! the session is dropped only when both say so; when they disagree it is kept and its
//! decision carries `review` (counted as `kept: verdicts disagree`).
//!
//! A session failing a criterion is dropped without asking the later ones. Scenario
//! labels: the logs' own, or (`scenarios = "llm"`) one label from `taxonomy` picked by
//! the LLM ([`LabelPick`]) for sessions without one (all with `relabel`).
//!
//! Each LLM item is "prompt + typed answer + record": `*_prompt` builds the prompt,
//! the typed struct is the answer, [`Decision`] records it; decisions are checkpointed
//! per session, so a killed run repeats no judgement.
//!
//! Outputs: `curated.jsonl` (kept sessions, scenario set), `decisions.jsonl`
//! (`{id, keep, dropped_by?, resolved, need?, answer?, scenario, review?}` in input order),
//! `report.json` (drops per criterion and decider with their share and examples).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{CurateSettings, ScenarioSource, Session};
use crate::efs::lexical;
use crate::ledger::{Explanation, Ledger, NewEvent, Parent};
use crate::llm::Prompt;
use crate::llm::batch::{Batch, BatchOptions, Item};
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "logs-curate";

/// Kept sessions (one JSON [`Session`] a line), read by `logs split`.
pub const CURATED: Artifact<Session> = Artifact::new(STAGE, "curated.jsonl");
/// The curation's figures (`report.json`): drops per criterion and decider, with their share
/// and examples; the release card shows them.
pub const REPORT: Artifact = Artifact::new(STAGE, "report.json");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "logs curate",
    // 5: a request that says what a called tool's catalog description says keeps the
    //    session by rule (`described_words`); the catalog is read when present.
    // 6: the second verdict of the judge role is asked at `second_temperature` (0.7).
    // 7: words fold their plurals as every check's do (`text::singular`: `status` stays,
    //    `boxes` → `box`, `ids` → `id`).
    // 8: `keep_similarity`: a session the word rules cannot tell is kept by rule when a
    //    called tool's text is that near its requests (embeddings); `near` in decisions.
    // 9: plurals fold by the shared `text::singular` as refined: `caches` → `cache`, `causes` →
    //     `cause`, `cpus` → `cpu`; three-letter words but `ids` and `this`, `news` stay.
    // 10: `keep_similarity` weighs each request of a session on its own (the best of them),
    //     not the requests joined, which the model cut at its length.
    // 11: plurals fold by `text::singular` with two vowels before `ch`/`us` read as one
    //     (`breaches` → `breach`, not `breache`), and `ips`, `vms`, `prs` fold.
    version: 11,
    about: "keeps sessions resolved through tools, with a genuine need and a satisfactory answer (LLM judge)",
    reads: &[super::import::SESSIONS.read(), super::import::CATALOG.optional()],
    writes: &["curated.jsonl", "decisions.jsonl", "report.json", crate::llm::batch::FAILED_FILE],
    section: Some("logs"),
};

/// Does the query reflect a genuine need of the domain?
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NeedVerdict {
    /// True when a real user of this domain could plausibly ask this and needs the tools for it.
    pub genuine: bool,
    /// One line saying why.
    pub reason: String,
}

/// Is the final answer satisfactory?
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AnswerVerdict {
    /// True when the answer addresses the request using the tool results.
    pub satisfactory: bool,
    /// One line saying why.
    pub reason: String,
}

/// A scenario label from the configured taxonomy.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LabelPick {
    /// Exactly one label of the list.
    pub scenario: String,
}

/// The label judge's answer: one label of `taxonomy` (`enum`; an answer outside it is
/// re-asked, where it used to be ignored after the call).
pub(crate) fn label_answer(taxonomy: &[String]) -> crate::llm::Answer<LabelPick> {
    let mut a = crate::llm::Answer::<LabelPick>::of();
    if !taxonomy.is_empty() {
        // An empty `enum` is not a valid schema; `check` refuses an empty taxonomy anyway.
        std::sync::Arc::make_mut(&mut a.schema)["properties"]["scenario"]["enum"] = json!(taxonomy);
    }
    let taxonomy = taxonomy.to_vec();
    a.check(move |p| {
        if taxonomy.iter().any(|t| *t == p.scenario.trim()) {
            Ok(())
        } else {
            Err(format!("`scenario` \"{}\" is not one of the labels: {}", p.scenario, taxonomy.join(", ")))
        }
    })
}

/// One criterion's outcome.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Criterion {
    pub ok: bool,
    pub reason: String,
    /// `rule`, `feedback`, `llm` or `unjudged`.
    pub by: String,
    /// The second, independent LLM verdict, asked only when the first said no: `ok` is
    /// false only when both said no; when this one says yes the session is kept (the
    /// verdicts disagree) and the decision carries `review`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second: Option<SecondVerdict>,
}

impl Criterion {
    pub fn new(ok: bool, reason: impl Into<String>, by: &str) -> Self {
        Self { ok, reason: reason.into(), by: by.into(), second: None }
    }
}

/// The confirming verdict of an LLM criterion.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SecondVerdict {
    pub ok: bool,
    pub reason: String,
    /// The role asked.
    pub role: String,
    /// The sampling seed it was asked with (absent: the role's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The sampling temperature it was asked with (absent: the role's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

/// How the second verdict is asked: `[logs.curate] second_role` when set, else the judge
/// role again with its seed + 1 (its seed: `[llm.roles.<judge>] seed`, 0 when unset) at
/// `second_temperature`, so that a judge decoding greedily does not just repeat itself.
#[derive(Debug, Clone, PartialEq)]
pub struct SecondAsk {
    pub role: String,
    pub seed: Option<u64>,
    pub temperature: Option<f64>,
}

impl SecondAsk {
    pub fn of(s: &Settings, c: &CurateSettings) -> Self {
        match &c.second_role {
            Some(role) => SecondAsk { role: role.clone(), seed: None, temperature: None },
            None => {
                let llm = s.section::<crate::llm::LlmSettings>();
                let own = llm.roles.get(&c.judge_role).and_then(|r| r.seed).unwrap_or(0);
                SecondAsk {
                    role: c.judge_role.clone(),
                    seed: Some(own.wrapping_add(1)),
                    temperature: Some(c.second_temperature),
                }
            }
        }
    }
}

/// The recorded decision of one session.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Decision {
    pub id: String,
    pub keep: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_by: Option<String>,
    pub resolved: Criterion,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub need: Option<Criterion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Criterion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Why a person should look at this decision: the two LLM verdicts of a criterion
    /// disagreed, so the session was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<String>,
    /// With `keep_similarity`: the called tool nearest the requests, for a session whose
    /// need the word rules could not tell (kept by it at the threshold, else judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near: Option<Near>,
}

/// The successful call whose tool is nearest a session's requests ([`nearest_tools`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Near {
    pub tool: String,
    /// Cosine of the embeddings, 3 decimals.
    pub similarity: f64,
}

/// The text embedded for a log tool: its name and its log-catalog description (as the
/// `[embed]` recipe's first two fields write a registry tool's; a log tool has no server).
fn log_tool_text(tool: &str, about: &BTreeMap<String, String>) -> String {
    match about.get(tool).map(|d| d.trim()).filter(|d| !d.is_empty()) {
        Some(d) => format!("Tool: {tool}\nDescription: {d}"),
        None => format!("Tool: {tool}"),
    }
}

/// Embeds texts, one vector each (the `[embed]` model; a test double in tests).
pub type EmbedFn<'a> = dyn FnMut(&[String]) -> Result<Vec<Vec<f32>>> + 'a;

/// Per session that passes `resolved`, whose need the word rules cannot tell
/// ([`need_by_rule`]) and that has a request, the successful call whose tool is nearest one
/// of its requests: the best cosine between the embedding of a request (each turn's on its
/// own, so a long session's later turns are not cut off at the model's length) and that of
/// the tool's [`log_tool_text`]; ties go to the earlier request, then the first tool in name
/// order. `embed` is called once, for every request and tool together, and not at all when
/// no session is open.
pub fn nearest_tools(
    embed: &mut EmbedFn<'_>,
    sessions: &[Session],
    about: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Near>> {
    let open: Vec<(&Session, BTreeSet<&str>)> = sessions
        .iter()
        .filter(|s| resolved(s).ok && !requests(s).is_empty() && need_by_rule(s, about).is_none())
        .map(|s| (s, s.calls().filter(|c| succeeded(c)).map(|c| c.tool.as_str()).collect()))
        .collect();
    if open.is_empty() {
        return Ok(BTreeMap::new());
    }
    let tools: BTreeSet<&str> = open.iter().flat_map(|(_, t)| t.iter().copied()).collect();
    let asked: Vec<Vec<String>> = open.iter().map(|(s, _)| requests(s)).collect();
    let mut texts: Vec<String> = asked.iter().flatten().cloned().collect();
    let n_requests = texts.len();
    texts.extend(tools.iter().map(|t| log_tool_text(t, about)));
    let vectors: Vec<Vec<f32>> = embed(&texts)?.into_iter().map(crate::embedding::normalised).collect();
    if vectors.len() != texts.len() {
        anyhow::bail!("the embedding model returned {} vectors for {} texts", vectors.len(), texts.len());
    }
    let (request_vectors, tool_vectors) = vectors.split_at(n_requests);
    let of: BTreeMap<&str, &Vec<f32>> = tools.iter().copied().zip(tool_vectors).collect();
    let mut out = BTreeMap::new();
    let mut next = request_vectors.iter();
    for ((s, called), requests) in open.iter().zip(&asked) {
        let mut best: Option<(&str, f32)> = None;
        for q in next.by_ref().take(requests.len()) {
            for t in called {
                let cos = crate::embedding::dot(q, of[t]);
                if best.is_none_or(|(_, b)| cos > b) {
                    best = Some((t, cos));
                }
            }
        }
        if let Some((tool, cos)) = best {
            let similarity = (f64::from(cos) * 1000.0).round() / 1000.0;
            out.insert(s.id.clone(), Near { tool: tool.to_string(), similarity });
        }
    }
    Ok(out)
}

/// The need rule of embeddings: a session the word rules cannot tell is kept by it when its
/// nearest called tool ([`nearest_tools`]) is at least `keep_similarity` near its requests.
/// Below it, nothing is settled: the judge decides.
pub fn need_by_similarity(near: Option<&Near>, keep_similarity: Option<f64>) -> Option<Criterion> {
    let (n, at) = (near?, keep_similarity?);
    (n.similarity >= at).then(|| {
        Criterion::new(
            true,
            format!(
                "the request is near what `{}` does (similarity {:.3}, at least {at}), with a successful call",
                n.tool, n.similarity
            ),
            "similarity",
        )
    })
}

/// The need rules in order: words ([`need_by_rule`]), then embeddings
/// ([`need_by_similarity`], with `keep_similarity`).
fn rule_need(s: &Session, c: &CurateSettings, (about, near): Known<'_>) -> Option<Criterion> {
    need_by_rule(s, about).or_else(|| need_by_similarity(near.get(&s.id), c.keep_similarity))
}

/// What the need rules know besides the session: the log catalog's descriptions by tool
/// name, and each open session's nearest called tool.
pub type Known<'a> = (&'a BTreeMap<String, String>, &'a BTreeMap<String, Near>);

/// A decision with the request hashes of the LLM exchanges behind it (the
/// checkpointed value; the hashes become event parents, not artifact fields).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Judged {
    pub decision: Decision,
    #[serde(default)]
    pub exchanges: Vec<String>,
}

/// The decision of a session whose LLM judgement failed (within `max_failed_share`).
fn llm_failed(s: &Session, reason: &str, near: Option<&Near>) -> Judged {
    let decision = Decision {
        id: s.id.clone(),
        keep: false,
        dropped_by: Some("llm-failed".into()),
        resolved: resolved(s),
        need: Some(Criterion::new(false, crate::text::one_line(reason), "llm")),
        answer: None,
        scenario: s.scenario.clone(),
        review: None,
        near: near.cloned(),
    };
    Judged { decision, exchanges: Vec::new() }
}

/// Criterion 1 (rule).
pub fn resolved(s: &Session) -> Criterion {
    let rule = |ok, reason: String| Criterion::new(ok, reason, "rule");
    if s.call_count() == 0 {
        return rule(false, "no tool call: the request was not resolved through tools".into());
    }
    for (ti, t) in s.turns.iter().enumerate() {
        let calls: Vec<&super::Call> = t.groups.iter().flatten().collect();
        for (i, c) in calls.iter().enumerate() {
            let failed =
                |c: &super::Call| c.error.is_some() || c.flags.iter().any(|f| f.code == super::flag::BAD_ARGUMENTS);
            if failed(c) && !calls[i + 1..].iter().any(|d| d.tool == c.tool && !failed(d)) {
                let why = if c.error.is_some() { "failed" } else { "had arguments that are not JSON" };
                return rule(false, format!("turn {}: the call of `{}` {why} and was never repaired", ti + 1, c.tool));
            }
        }
    }
    rule(true, format!("{} call(s), no failing call left unrepaired", s.call_count()))
}

/// Generic actions in tool names: a request asks for the thing in its own verb
/// (`efs::lexical`'s stop words already leave out get, list, fetch, read, show, find, …).
const ACTIONS: &[&str] = &[
    "search", "query", "lookup", "look", "check", "describe", "create", "add", "update", "set", "delete", "remove",
    "run", "execute", "call", "send", "do", "make", "handle", "process", "manage",
];

/// Argument values too common to show that the request asked for the call.
const TRIVIAL: &[&str] =
    &["true", "false", "null", "none", "all", "any", "yes", "no", "default", "asc", "desc", "and", "or", "the"];

/// A call that succeeded: no error result, arguments that are JSON.
fn succeeded(c: &super::Call) -> bool {
    c.error.is_none() && !c.flags.iter().any(|f| f.code == super::flag::BAD_ARGUMENTS)
}

/// The content words of a tool name, singular, without generic actions:
/// `get_grid_prices` → `grid`, `price`; `getOncall` → `oncall`.
pub fn name_words(tool: &str) -> Vec<String> {
    lexical::content_tokens(tool)
        .into_iter()
        .filter(|w| !ACTIONS.iter().any(|a| crate::text::singular(a) == *w))
        .collect()
}

/// The words of a session's requests, as the need rules read them.
struct RequestWords {
    /// Each request's words, lower-case, in order.
    seqs: Vec<Vec<String>>,
    /// Every word, and every two neighbouring words written as one (`on call` → `oncall`),
    /// singular (`prices` → `price`).
    stems: BTreeSet<String>,
    /// Each request lower-cased (for scripts written without spaces between words).
    texts: Vec<String>,
}

fn request_words(s: &Session) -> RequestWords {
    let mut r = RequestWords { seqs: Vec::new(), stems: BTreeSet::new(), texts: Vec::new() };
    for t in &s.turns {
        let words = crate::text::words(&t.user);
        for w in &words {
            r.stems.insert(crate::text::singular(w));
        }
        for pair in words.windows(2) {
            r.stems.insert(crate::text::singular(&format!("{}{}", pair[0], pair[1])));
        }
        r.texts.push(t.user.to_lowercase());
        r.seqs.push(words);
    }
    r
}

/// Every string or number of a call's arguments, with the name of its key (at most 64).
fn argument_values(v: &Value, key: &str, out: &mut Vec<(String, String)>) {
    if out.len() >= 64 {
        return;
    }
    match v {
        Value::String(x) => out.push((key.to_string(), x.clone())),
        Value::Number(n) => out.push((key.to_string(), n.to_string())),
        Value::Array(items) => {
            for x in items {
                argument_values(x, key, out);
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                argument_values(x, k, out);
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
}

/// Chinese, Japanese or Korean script: words are not separated by spaces.
fn is_cjk(c: char) -> bool {
    matches!(c, '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}' | '\u{ac00}'..='\u{d7af}')
}

/// Whether the request contains an argument value: its words, in order, as whole words
/// (no plural folding: `cats` is not in "my cat"), at least 3 letters or digits and not
/// only trivial words; a value in a CJK script (2 characters or more) as a substring.
fn in_request(value: &str, r: &RequestWords) -> bool {
    let v = value.trim();
    if v.chars().any(is_cjk) {
        let v = v.to_lowercase();
        return v.chars().count() >= 2 && r.texts.iter().any(|t| t.contains(v.as_str()));
    }
    let words = crate::text::words(v);
    let letters: usize = words.iter().map(|w| w.chars().count()).sum();
    if words.is_empty() || words.len() > 12 || letters < 3 || words.iter().all(|w| TRIVIAL.contains(&w.as_str())) {
        return false;
    }
    r.seqs.iter().any(|seq| seq.windows(words.len()).any(|win| win == words.as_slice()))
}

/// The fewest letters of a description word that counts for [`described_words`]: shorter
/// words are mostly everyday ones ("per", "hour", "now") that many requests hold.
const DESCRIBED_MIN_LETTERS: usize = 5;

/// The words a request shares with `tool`'s name (its [`name_words`], `name`) and its catalog
/// description (`about`, by tool name), when it holds a word of the name and one of the description that the name
/// does not have ([`DESCRIBED_MIN_LETTERS`] letters or more): "What are electricity prices
/// in Texas?" and `get_grid_prices`, "Electricity prices on the grid, per hour and region",
/// share `price` and `electricity`. The demo's 0.5B judge had dropped such a session as "not
/// a typical use case for the get_grid_prices tool". "The price per hour for a babysitter"
/// shares only `price` and the everyday `hour`: the LLM judges it.
fn described_words(
    tool: &str,
    name: &[String],
    r: &RequestWords,
    about: &BTreeMap<String, String>,
) -> Option<Vec<String>> {
    let description = about.get(tool).or_else(|| about.get(crate::model::split_tool_id(tool)?.1))?;
    let from_name = name.iter().find(|w| r.stems.contains(*w))?;
    let from_description: Vec<String> = lexical::content_tokens(description)
        .into_iter()
        .filter(|w| w.chars().count() >= DESCRIBED_MIN_LETTERS && !name.contains(w) && r.stems.contains(w))
        .collect();
    (!from_description.is_empty()).then(|| std::iter::once(from_name.clone()).chain(from_description).collect())
}

/// Criterion 2 by rule: `Some` (kept, `by: "rule"`, the signals as the reason) when a
/// successful call plainly answers the request — the request names its tool (the tool
/// name's content words are all among the request's, singular and plural folded), or
/// says what its catalog description says ([`described_words`]; `about`: the log
/// catalog's descriptions by tool name), or contains one of its argument values — or the
/// user's feedback was positive; `None` when the rules cannot tell (the LLM judges).
/// Embedding similarity is the next rule ([`need_by_similarity`]), when configured.
pub fn need_by_rule(s: &Session, about: &BTreeMap<String, String>) -> Option<Criterion> {
    let r = request_words(s);
    let mut named: Option<(String, Vec<String>)> = None;
    let mut described: Option<(String, Vec<String>)> = None;
    let mut argument: Option<(String, String, String)> = None;
    let mut any_succeeded = false;
    for call in s.calls().filter(|c| succeeded(c)) {
        any_succeeded = true;
        if named.is_none() {
            let words = name_words(&call.tool);
            if !words.is_empty() && words.iter().all(|w| r.stems.contains(w)) {
                named = Some((call.tool.clone(), words));
            } else if described.is_none() {
                described = described_words(&call.tool, &words, &r, about).map(|w| (call.tool.clone(), w));
            }
        }
        if argument.is_none() {
            let mut values = Vec::new();
            argument_values(&call.arguments, "", &mut values);
            if let Some((key, value)) = values.into_iter().find(|(_, v)| in_request(v, &r)) {
                argument = Some((call.tool.clone(), key, value));
            }
        }
    }
    let mut why: Vec<String> = Vec::new();
    if let Some((tool, words)) = &named {
        why.push(format!("the request names `{tool}` ({})", words.join(", ")));
    } else if let Some((tool, words)) = &described {
        why.push(format!("the request says what `{tool}` does, by its description ({})", words.join(", ")));
    }
    if let Some((tool, key, value)) = &argument {
        let key = if key.is_empty() { "an argument".to_string() } else { format!("the argument `{key}`") };
        why.push(format!("the request contains {key} of `{tool}` (\"{}\")", crate::text::one_line(&clip(value, 60))));
    }
    if any_succeeded && s.feedback == Some(true) {
        why.push("the user's feedback was positive".to_string());
    }
    if why.is_empty() {
        return None;
    }
    Some(Criterion::new(true, format!("{}, with a successful call", why.join("; ")), "rule"))
}

/// The last non-blank final answer of a session.
fn final_answer(s: &Session) -> Option<&String> {
    s.turns.iter().rev().find_map(|t| t.answer.as_ref()).filter(|a| !a.trim().is_empty())
}

/// Whether judging a session that passes `resolved` may ask the LLM: its need is not
/// settled by rule, its answer has no feedback, or it gets an LLM label.
fn needs_llm(s: &Session, c: &CurateSettings, known: Known<'_>) -> bool {
    rule_need(s, c, known).is_none()
        || (s.feedback.is_none() && final_answer(s).is_some())
        || (c.scenarios == ScenarioSource::Llm && (s.scenario.is_none() || c.relabel))
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
}

fn requests(s: &Session) -> Vec<String> {
    s.turns.iter().map(|t| clip(&t.user, 600)).filter(|u| !u.trim().is_empty()).collect()
}

fn tools_used(s: &Session) -> Vec<String> {
    let mut v: Vec<String> = s.calls().map(|c| c.tool.clone()).collect();
    v.dedup();
    v
}

pub fn need_prompt(c: &CurateSettings, s: &Session) -> Prompt {
    Prompt::new(&c.need_template, json!({"domain": c.domain, "requests": requests(s), "tools": tools_used(s)}))
}

pub fn answer_prompt(c: &CurateSettings, s: &Session) -> Prompt {
    let answer = s.turns.iter().rev().find_map(|t| t.answer.clone()).unwrap_or_default();
    Prompt::new(
        &c.answer_template,
        json!({"domain": c.domain, "requests": requests(s), "tools": tools_used(s), "answer": clip(&answer, 1200)}),
    )
}

pub fn label_prompt(c: &CurateSettings, s: &Session) -> Prompt {
    Prompt::new(
        &c.label_template,
        json!({"domain": c.domain, "requests": requests(s), "tools": tools_used(s), "taxonomy": c.taxonomy}),
    )
}

fn need_read(v: NeedVerdict) -> (bool, String) {
    (v.genuine, v.reason)
}

fn answer_read(v: AnswerVerdict) -> (bool, String) {
    (v.satisfactory, v.reason)
}

/// An LLM criterion: the judge's verdict and, only when it says no, a second, independent
/// one ([`SecondAsk`], recorded under `<part>:second`). The criterion fails only when both
/// say no; when the second says yes the session is kept and the reason says so.
async fn llm_criterion<T: DeserializeOwned + schemars::JsonSchema + 'static>(
    llm: &Item,
    c: &CurateSettings,
    second: &SecondAsk,
    prompt: &Prompt,
    part: &str,
    read: fn(T) -> (bool, String),
    exchanges: &mut Vec<String>,
) -> Result<Criterion, crate::llm::LlmError> {
    let first = llm.typed_as::<T>(&c.judge_role, prompt, part).await?;
    exchanges.push(first.exchange);
    let (ok, reason) = read(first.value);
    let reason = crate::text::one_line(&reason);
    if ok {
        return Ok(Criterion::new(true, reason, "llm"));
    }
    let answer = crate::llm::Answer::<T>::of().with_seed(second.seed).with_temperature(second.temperature);
    let part = format!("{part}:second");
    let again = llm.ask(&second.role, prompt, Some(part.as_str()), &answer).await?;
    exchanges.push(again.exchange);
    let (ok2, reason2) = read(again.value);
    let verdict = SecondVerdict {
        ok: ok2,
        reason: crate::text::one_line(&reason2),
        role: second.role.clone(),
        seed: second.seed,
        temperature: second.temperature,
    };
    let reason = if ok2 { format!("kept: the verdicts disagree; the first said no ({reason})") } else { reason };
    Ok(Criterion { ok: ok2, reason, by: "llm".into(), second: Some(verdict) })
}

/// Whether a criterion was kept because its second verdict disagreed with the first.
fn disagreed(c: &Option<Criterion>) -> bool {
    c.as_ref().is_some_and(|c| c.second.as_ref().is_some_and(|v| v.ok))
}

/// The checkpointed value of a decision, with `review` set when two verdicts disagreed.
fn judged(mut d: Decision, exchanges: Vec<String>) -> Judged {
    let mut disagree = Vec::new();
    if disagreed(&d.need) {
        disagree.push("need");
    }
    if disagreed(&d.answer) {
        disagree.push("answer");
    }
    if !disagree.is_empty() {
        d.review = Some(format!("the two LLM verdicts on {} disagree: kept", disagree.join(" and ")));
    }
    Judged { decision: d, exchanges }
}

/// Judge one session (criteria in order, stopping at the first failure): rules first,
/// the LLM only where they cannot tell, and a drop by the LLM only on two agreeing verdicts.
/// `sampled = false`: the LLM criteria pass unjudged (see `llm_sample`).
pub async fn judge(
    llm: &Item,
    c: &CurateSettings,
    (second, known): (&SecondAsk, Known<'_>),
    s: &Session,
    sampled: bool,
) -> Result<Judged, crate::llm::LlmError> {
    let mut exchanges = Vec::new();
    let mut d = Decision {
        id: s.id.clone(),
        keep: false,
        dropped_by: None,
        resolved: resolved(s),
        need: None,
        answer: None,
        scenario: s.scenario.clone(),
        review: None,
        near: known.1.get(&s.id).cloned(),
    };
    if !d.resolved.ok {
        d.dropped_by = Some("resolved".into());
        return Ok(judged(d, exchanges));
    }
    let unjudged = || {
        Criterion::new(
            true,
            format!("not judged: outside the LLM sample (llm_sample = {})", c.llm_sample.unwrap_or(0)),
            "unjudged",
        )
    };
    d.need = Some(match rule_need(s, c, known) {
        Some(kept) => kept,
        None if sampled => {
            llm_criterion::<NeedVerdict>(llm, c, second, &need_prompt(c, s), "need", need_read, &mut exchanges).await?
        }
        None => unjudged(),
    });
    if !d.need.as_ref().is_some_and(|n| n.ok) {
        d.dropped_by = Some("need".into());
        return Ok(judged(d, exchanges));
    }
    d.answer = Some(match (s.feedback, final_answer(s)) {
        (Some(f), _) => Criterion::new(
            f,
            if f { "the user's feedback was positive" } else { "the user's feedback was negative" },
            "feedback",
        ),
        (None, None) => Criterion::new(false, "no final answer", "rule"),
        (None, Some(_)) if !sampled => unjudged(),
        (None, Some(_)) => {
            let prompt = answer_prompt(c, s);
            llm_criterion::<AnswerVerdict>(llm, c, second, &prompt, "answer", answer_read, &mut exchanges).await?
        }
    });
    if !d.answer.as_ref().is_some_and(|a| a.ok) {
        d.dropped_by = Some("answer".into());
        return Ok(judged(d, exchanges));
    }
    if sampled && c.scenarios == ScenarioSource::Llm && (s.scenario.is_none() || c.relabel) {
        let r = llm.ask(&c.judge_role, &label_prompt(c, s), Some("label"), &label_answer(&c.taxonomy)).await?;
        exchanges.push(r.exchange);
        let pick = r.value.scenario.trim().to_string();
        // The answer is one of the taxonomy (schema `enum` and check); kept as a guard.
        if c.taxonomy.contains(&pick) {
            d.scenario = Some(pick);
        }
    }
    d.keep = true;
    Ok(judged(d, exchanges))
}

/// The sessions the LLM judges: all those passing the `resolved` rule whose judgement
/// needs the LLM ([`needs_llm`]), or a seeded sample of `llm_sample` of them.
pub fn sample(
    sessions: &[Session],
    c: &CurateSettings,
    known: Known<'_>,
    seed: u64,
) -> std::collections::HashSet<String> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut ids: Vec<&str> =
        sessions.iter().filter(|s| resolved(s).ok && needs_llm(s, c, known)).map(|s| s.id.as_str()).collect();
    if let Some(n) = c.llm_sample {
        ids.sort();
        ids.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x6375_7261_7465));
        ids.truncate(n);
    }
    ids.into_iter().map(str::to_string).collect()
}

pub struct CurateStage;

impl Stage for CurateStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Keep sessions that reflect a genuine need, were resolved through tool calls and
         got a satisfactory answer (LLM judge with `[logs.curate]`; each decision in the
         ledger, see `benchgen explain log:<id>`).

         The need is decided by rules first (the request names or describes a tool it
         called, or holds one of its argument values; positive feedback), then, with
         `keep_similarity`, by the embedding similarity of the requests and the called
         tools (the `[embed]` model), and only then by the judge; a drop by the judge needs
         a second, independent verdict that agrees.

         Reads `logs-import/sessions.jsonl` (and the catalog's tool descriptions, for the
         need rules). Writes `artifacts/logs-curate/`:
         `curated.jsonl` (kept sessions), `decisions.jsonl` (one decision per session),
         `report.json`, `failed.json` (judgements that failed, with their reasons). Resumable
         per session; a session whose answers stay invalid
         fails the stage after the others are done (a rerun asks only for it)."
    }

    /// The log family's events (curation decisions).
    fn describe_event(&self, kind: &str, payload: &Value) -> Option<String> {
        (kind == super::kind::DECISION).then(|| describe(payload))
    }

    /// The log family's ids: a session (`log:<session id>`, [`super::subject`]).
    fn explain_subject(&self, ledger: &Ledger, runs: &[i64], id: &str) -> Result<Option<Explanation>> {
        if !id.starts_with("log:") {
            return Ok(None);
        }
        explain_session(ledger, runs, id).map(Some)
    }

    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        let c = super::import::settings(s).curate;
        let mut roles = vec![ConfigRef::new("logs.curate.judge_role", &c.judge_role)];
        if let Some(second) = &c.second_role {
            roles.push(ConfigRef::new("logs.curate.second_role", second));
        }
        roles
    }

    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        use crate::stage::Estimate;
        let c = super::import::settings(s).curate;
        let Some((n, what)) = super::import::session_bound(s) else {
            return vec![Estimate::unknown(&c.judge_role, crate::stage::UNTIL_LOGS)];
        };
        let (sessions, what) = match c.llm_sample {
            Some(k) if (k as u64) < n => (k as u64, "`logs.curate.llm_sample`".to_string()),
            _ => (n, what.to_string()),
        };
        // Need and answer: one verdict each, and a second verdict when the first says no.
        let label = u64::from(c.scenarios == ScenarioSource::Llm);
        let first = Estimate::typed(
            &c.judge_role,
            sessions * (2 + label),
            format!("≤ {sessions} {what} × ({} verdicts)", 2 + label),
        );
        let second = SecondAsk::of(s, &c);
        let again = Estimate::typed(&second.role, sessions * 2, format!("≤ {sessions} × 2 second verdicts"));
        let rows = if second.role == c.judge_role { vec![first.plus(again)] } else { vec![first, again] };
        rows.into_iter().map(|e| e.in_flight(c.concurrency.max(1))).collect()
    }

    fn prompts(&self, s: &Settings) -> Vec<PromptRef> {
        let c = super::import::settings(s).curate;
        let base = json!({"domain": "d", "requests": ["r"], "tools": ["t"]});
        let mut answer = base.clone();
        answer["answer"] = json!("a");
        let mut label = base.clone();
        label["taxonomy"] = json!(["x"]);
        let mut v = vec![
            PromptRef::new("logs.curate.need_template", &c.need_template, base),
            PromptRef::new("logs.curate.answer_template", &c.answer_template, answer),
        ];
        if c.scenarios == ScenarioSource::Llm {
            v.push(PromptRef::new("logs.curate.label_template", &c.label_template, label));
        }
        v
    }

    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        let c = super::import::settings(s).curate;
        crate::settings::check_positive(problems, "logs.curate.concurrency", c.concurrency);
        if c.scenarios == ScenarioSource::Llm && c.taxonomy.is_empty() {
            problems.push(crate::error::Problem::new(
                "logs.curate.taxonomy",
                "is empty, but `scenarios = \"llm\"` picks labels from it",
            ));
        }
        if !(0.0..=2.0).contains(&c.second_temperature) {
            problems.push(crate::error::Problem::new(
                "logs.curate.second_temperature",
                format!("is {}; a sampling temperature is between 0 and 2", c.second_temperature),
            ));
        }
        if let Some(x) = c.keep_similarity.filter(|x| !(0.0..=1.0).contains(x)) {
            problems.push(crate::error::Problem::new(
                "logs.curate.keep_similarity",
                format!("is {x}; a cosine threshold is between 0 and 1"),
            ));
        }
        // The rule embeds with the `[embed]` model: a missing one is said before the run.
        let what = (
            "needs the `[embed]` model",
            "run `make setup`, or leave `keep_similarity` out and the judge decides those sessions",
        );
        problems.extend(
            c.keep_similarity.and_then(|_| crate::embedding::missing_problem(s, "logs.curate.keep_similarity", what)),
        );
        if c.second_role.as_deref() == Some(c.judge_role.as_str()) {
            problems.push(crate::error::Problem::new(
                "logs.curate.second_role",
                "is `judge_role` itself: the second verdict would repeat the first; leave it out \
                 (the judge is asked again with its seed + 1) or name another role",
            ));
        }
    }

    fn plan(&self, s: &Settings) -> Result<Plan> {
        let c = super::import::settings(s).curate;
        // The embedding model decides `keep_similarity`'s keeps: it is part of the
        // configuration only when that rule is on (other configurations keep their hash).
        let mut hashed = json!({"curate": c});
        if c.keep_similarity.is_some() {
            hashed["embed"] = serde_json::to_value(crate::embedding::embed_settings(s).hashed())?;
        }
        Ok(Plan { inputs: vec![], config_hash: section_hash(&hashed)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let c = super::import::settings(s).curate;
        let sessions = super::read_sessions(inputs.open_of(&super::import::SESSIONS)?, "logs-import/sessions.jsonl")?;
        // The catalog's descriptions, for the need rule that reads them (a project made
        // before the catalog was written has none: that rule then says nothing).
        let about: BTreeMap<String, String> = match inputs.has(&super::import::CATALOG) {
            true => inputs.json(&super::import::CATALOG)?.into_iter().map(|t| (t.name, t.description)).collect(),
            false => BTreeMap::new(),
        };
        // With `keep_similarity`, the nearest called tool of each session the word rules
        // cannot tell; the embedding model is loaded only when there is one.
        let near = match c.keep_similarity {
            Some(_) => {
                let model = crate::embedding::Lazy::new(s);
                nearest_tools(&mut |texts| model.embed(texts), &sessions, &about)?
            }
            None => BTreeMap::new(),
        };
        let sampled = sample(&sessions, &c, (&about, &near), s.project.seed);
        let items: Vec<(String, (Session, bool))> =
            sessions.iter().map(|x| (x.id.clone(), (x.clone(), sampled.contains(&x.id)))).collect();
        let opts = BatchOptions::new(STAGE, "curate", "sessions")
            .concurrency(c.concurrency.max(1))
            .max_failed_share(c.max_failed_share, "logs.curate.max_failed_share")
            .fail_point("logs_curate_session");
        let mut batch = Batch::new(ctx, opts)?;
        let second = SecondAsk::of(s, &c);
        let (cref, sref, known) = (&c, &second, (&about, &near));
        let done = batch.run(items, |(sess, in_sample): (Session, bool), llm: Item| async move {
            Ok(judge(&llm, cref, (sref, known), &sess, in_sample).await?)
        })?;
        let resumed = done.resumed;
        // Each decision's first parent: the session's import record (its `file:line`).
        let imported = crate::ledger::Ledger::ids_by_subject_in(
            &s.artifacts,
            super::kind::SESSION,
            ctx.manifest_of(super::import::STAGE).map(|m| m.run_id),
        )?;
        let mut kept = Vec::new();
        let mut decisions = Vec::new();
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        let mut tally = Tally::default();
        let failed: BTreeMap<&str, &str> = done.failed.iter().map(|f| (f.item.as_str(), f.reason.as_str())).collect();
        for sess in &sessions {
            // A session whose judgement failed within `max_failed_share` is dropped, never lost.
            let j = match (done.values.get(&sess.id), failed.get(sess.id.as_str())) {
                (Some(j), _) => j.clone(),
                (None, Some(reason)) => llm_failed(sess, reason, near.get(&sess.id)),
                (None, None) => anyhow::bail!("internal: session {} has no decision", sess.id),
            };
            let d = j.decision.clone();
            let mut ev =
                NewEvent::new(super::kind::DECISION, Some(&super::subject(&sess.id)), serde_json::to_value(&d)?);
            if let Some(id) = imported.get(&super::subject(&sess.id)).and_then(|i| i.last()) {
                ev = ev.with_parent(Parent::Id(*id));
            }
            for x in &j.exchanges {
                if let Some(id) = batch.exchange_event(x)? {
                    ev = ev.with_parent(Parent::Id(id));
                }
            }
            out.event(ev);
            *by.entry(d.dropped_by.clone().unwrap_or_else(|| "kept".into())).or_default() += 1;
            tally.add(&d);
            if d.keep {
                let mut k = sess.clone();
                k.scenario = d.scenario.clone();
                kept.push(k);
            }
            decisions.push(d);
        }
        let mut dec_bytes = Vec::new();
        for d in &decisions {
            serde_json::to_writer(&mut dec_bytes, d)?;
            dec_bytes.push(b'\n');
        }
        batch.finish(out)?;
        let mut w = out.create("curated.jsonl")?;
        super::write_sessions(&mut w, &kept)?;
        w.finish()?;
        out.file("decisions.jsonl", dec_bytes);
        report(out, sessions.len(), kept.len(), &by, &tally, resumed)?;
        Ok(())
    }
}

/// `report.json`, the counts and the summary lines of a curation run.
fn report(
    out: &mut Output,
    sessions: usize,
    kept: usize,
    by: &BTreeMap<String, u64>,
    tally: &Tally,
    resumed: usize,
) -> Result<()> {
    let report = json!({
        "sessions": sessions,
        "kept": kept,
        "outcome": by,
        "dropped": tally.dropped(sessions),
        "decided_by": tally.decided,
        "kept_verdicts_disagree": {
            "sessions": tally.disagree.0,
            "share": share(tally.disagree.0, sessions),
            "examples": tally.disagree.1,
        },
    });
    out.json("report.json", &report)?;
    out.count("sessions", sessions);
    out.count("kept", kept);
    for (k, v) in by {
        if k != "kept" {
            out.count(&format!("dropped_{k}"), *v);
        }
    }
    for ((_, criterion, who), (n, _)) in &tally.drops {
        if criterion != who {
            out.count(&format!("dropped_{criterion}_by_{who}"), *n);
        }
    }
    let need = |who: &str| tally.decided.get("need").and_then(|m| m.get(who)).copied().unwrap_or(0);
    out.count("need_by_rule", need("rule"));
    out.count("need_by_similarity", need("similarity"));
    out.count("kept_verdicts_disagree", tally.disagree.0);
    let drops: Vec<String> = by.iter().filter(|(k, _)| *k != "kept").map(|(k, v)| format!("{v} by `{k}`")).collect();
    out.notes.push(format!(
        "{} of {} sessions kept; dropped: {} ({resumed} decisions resumed)",
        kept,
        sessions,
        if drops.is_empty() { "none".into() } else { drops.join(", ") }
    ));
    if tally.decided.contains_key("need") {
        out.notes.push(format!(
            "need: {} settled by rule, {} by embedding similarity, {} by one LLM verdict, {} dropped on two agreeing verdicts, {} kept as \
                 the verdicts disagree (for review), {} unjudged",
            need("rule"),
            need("similarity"),
            need("llm"),
            need("llm-agreed"),
            need("llm-disagreed"),
            need("unjudged")
        ));
    }
    Ok(())
}

/// Who decided a criterion: `rule`, `feedback`, `unjudged`, `llm` (one verdict, yes),
/// `llm-agreed` (two verdicts, both no) or `llm-disagreed` (kept: the second said yes).
pub fn decider(c: &Criterion) -> String {
    match (&c.second, c.by.as_str()) {
        (Some(v), "llm") if v.ok => "llm-disagreed".into(),
        (Some(_), "llm") => "llm-agreed".into(),
        (_, by) => by.to_string(),
    }
}

/// A dropped session's criterion, who decided it ([`decider`]; `llm-failed` for a
/// judgement that failed) and the reason.
pub fn drop_of(d: &Decision) -> Option<(String, String, String)> {
    let criterion = d.dropped_by.clone()?;
    let c = match criterion.as_str() {
        "resolved" => Some(&d.resolved),
        "need" => d.need.as_ref(),
        "answer" => d.answer.as_ref(),
        _ => None,
    };
    Some(match c {
        Some(c) => (criterion, decider(c), c.reason.clone()),
        None => {
            let reason = d.need.as_ref().map(|n| n.reason.clone()).unwrap_or_default();
            (criterion.clone(), criterion, reason)
        }
    })
}

/// `n` of `total` as a share, 4 decimals.
fn share(n: u64, total: usize) -> f64 {
    if total == 0 { 0.0 } else { (n as f64 / total as f64 * 10_000.0).round() / 10_000.0 }
}

/// The report's figures: drops per criterion and decider (up to 3 examples each), how
/// each of `need` and `answer` was decided, and the sessions kept as verdicts disagreed.
#[derive(Default)]
struct Tally {
    /// (criterion order, criterion, decider) → (sessions, examples).
    drops: BTreeMap<(usize, String, String), (u64, Vec<Value>)>,
    /// criterion → decider → sessions.
    decided: BTreeMap<String, BTreeMap<String, u64>>,
    disagree: (u64, Vec<Value>),
}

impl Tally {
    fn add(&mut self, d: &Decision) {
        // A failed judgement decided nothing (it is counted among the drops).
        let failed = d.dropped_by.as_deref() == Some("llm-failed");
        for (k, c) in [("need", &d.need), ("answer", &d.answer)] {
            if let (Some(c), false) = (c, failed) {
                *self.decided.entry(k.to_string()).or_default().entry(decider(c)).or_default() += 1;
            }
        }
        if let Some((criterion, who, reason)) = drop_of(d) {
            let order = ["resolved", "need", "answer", "llm-failed"].iter().position(|k| *k == criterion).unwrap_or(4);
            let e = self.drops.entry((order, criterion, who)).or_default();
            e.0 += 1;
            if e.1.len() < 3 {
                e.1.push(json!({"id": d.id, "reason": reason}));
            }
        }
        if let Some(r) = &d.review {
            self.disagree.0 += 1;
            if self.disagree.1.len() < 3 {
                self.disagree.1.push(json!({"id": d.id, "review": r}));
            }
        }
    }

    /// `[{criterion, by, sessions, share, examples: [{id, reason}]}]`, in criterion order.
    fn dropped(&self, total: usize) -> Vec<Value> {
        self.drops
            .iter()
            .map(|((_, criterion, who), (n, examples))| {
                let share = share(*n, total);
                json!({"criterion": criterion, "by": who, "sessions": n, "share": share, "examples": examples})
            })
            .collect()
    }
}

/// `benchgen explain log:<session id>`: the session's curation decision and split pool.
fn explain_session(ledger: &Ledger, runs: &[i64], id: &str) -> Result<Explanation> {
    let direct = ledger.events_for(id, runs)?;
    if direct.is_empty() {
        return Err(crate::error::hinted(
            format!("no log session `{id}` in the current artifacts"),
            "session ids are in `artifacts/logs-import/sessions.jsonl` (field `id`); run `benchgen logs curate` first",
        ));
    }
    let lineage = ledger.lineage(&direct.iter().map(|e| e.id).collect::<Vec<_>>())?;
    let mut status = Vec::new();
    if let Some(d) = direct.iter().rev().find(|e| e.kind == super::kind::DECISION) {
        status.push(describe(&d.payload));
    }
    if let Some(sp) = direct.iter().rev().find(|e| e.kind == super::kind::SPLIT) {
        status.push(format!("pool: {}", sp.payload["pool"].as_str().unwrap_or("?")));
    }
    let status = if status.is_empty() { "imported; not curated yet".into() } else { status.join("; ") };
    Ok(Explanation { id: id.into(), item: "log session", status, record: None, lineage })
}

/// The decision of a session as recorded (for `explain log:<id>`).
pub fn describe(p: &Value) -> String {
    let keep = p["keep"].as_bool().unwrap_or(false);
    let mut parts = Vec::new();
    let yes = |c: &Value| if c["ok"].as_bool().unwrap_or(false) { "yes" } else { "no" };
    for k in ["resolved", "need", "answer"] {
        if let Some(c) = p.get(k).filter(|c| c.is_object()) {
            let (by, reason) = (c["by"].as_str().unwrap_or("?"), c["reason"].as_str().unwrap_or(""));
            let mut part = format!("{k}: {} by {by} ({reason})", yes(c));
            if let Some(v) = c.get("second").filter(|v| v.is_object()) {
                let seed = v["seed"].as_u64().map(|s| format!(", seed {s}")).unwrap_or_default();
                part.push_str(&format!(
                    ", second verdict ({}{seed}): {} ({})",
                    v["role"].as_str().unwrap_or("?"),
                    yes(v),
                    v["reason"].as_str().unwrap_or("")
                ));
            }
            parts.push(part);
        }
    }
    let mut text = format!("{}; {}", if keep { "kept" } else { "dropped" }, parts.join("; "));
    if let Some(r) = p["review"].as_str() {
        text.push_str(&format!("; for review: {r}"));
    }
    text
}
