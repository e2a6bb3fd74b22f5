//! Prediction reading: JSONL (with a fast path for well-formed unified records) or one JSON
//! list, each record's format detected from its keys unless `--format` is given.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};

use anyhow::Context;
use serde_json::{Map, Value};

use super::{Bench, Diagnostic, PredFormat, PredStats, STOP, split_turns, typed};
use crate::error::json_type_name;
use crate::model::{TOOL_ID_SEP, norm_tool_id, norm_tool_id_cow};
use crate::score::{NormPred, Options, Pred, PredCall, RawPred};

fn id_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Read every prediction record and hand it to `on_pred(id, location, pred, diagnostics)`.
/// The id is `None` only for FinMCP records in `--compat finmcp`: evaluation.py reads each
/// record on its own and never looks at `id`, so such a record is still scored (see `score::run`).
pub fn read_predictions(
    opts: &Options,
    bench: &Bench,
    mut on_pred: impl FnMut(Option<&str>, &str, Pred, &mut Vec<Diagnostic>),
) -> anyhow::Result<PredStats> {
    let _ = bench;
    // The corrected mode refuses a record with a duplicate key; the compat modes read it as
    // the published evaluators' `json.loads` does (the last value wins).
    let strict = opts.mode == crate::score::Mode::Corrected;
    let compat_finmcp = opts.mode == crate::score::Mode::CompatFinmcp;
    let path = &opts.pred;
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).with_context(|| format!("cannot read predictions `{shown}`"))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut diags: Vec<Diagnostic> = Vec::new();
    let mut formats: HashMap<PredFormat, usize> = HashMap::new();
    let mut records = 0usize;

    let mut handle = |loc: &str, v: Record, diags: &mut Vec<Diagnostic>| {
        records += 1;
        let v = match v {
            Record::Fast(id, norm) => {
                *formats.entry(PredFormat::Unified).or_default() += 1;
                on_pred(Some(&id), loc, Pred::Ok { norm, raw: RawPred::Unified }, diags);
                return;
            }
            Record::Etom(id, norm, raw) => {
                *formats.entry(PredFormat::Etom).or_default() += 1;
                on_pred(Some(&id), loc, Pred::Ok { norm, raw: RawPred::Etom(raw) }, diags);
                return;
            }
            Record::Value(v) => v,
        };
        let Some((id, format, pred)) = value_pred(opts, compat_finmcp, loc, v, diags) else {
            return;
        };
        if let Some(f) = format {
            *formats.entry(f).or_default() += 1;
        }
        on_pred(id.as_deref(), loc, pred, diags);
    };

    // Peek the first non-space byte: `[` means one JSON array, else JSONL.
    let first = {
        let buf = reader.fill_buf()?;
        buf.iter().copied().find(|b| !b.is_ascii_whitespace())
    };
    let bad_lines = if first == Some(b'[') {
        read_list(&mut reader, strict, &shown, &mut handle, &mut diags)?;
        0
    } else {
        read_lines(&mut reader, opts, strict, &shown, &mut handle, &mut diags)?
    };
    let records = records + bad_lines;
    for d in &mut diags {
        if d.file.is_empty() {
            d.file = shown.clone();
        }
    }
    let mut formats: Vec<(PredFormat, usize)> = formats.into_iter().collect();
    formats.sort();
    Ok(PredStats { path: shown, records, formats, diagnostics: diags })
}

/// One generically parsed record's id, format and prediction; `None` when it is not scored
/// (not an object, no usable id), with the diagnostic saying why already pushed.
fn value_pred(
    opts: &Options,
    compat_finmcp: bool,
    loc: &str,
    v: Value,
    diags: &mut Vec<Diagnostic>,
) -> Option<(Option<String>, Option<PredFormat>, Pred)> {
    let Value::Object(obj) = v else {
        diags.push(Diagnostic::line(loc, None, format!("expected a JSON object, got {}", json_type_name(&v))));
        return None;
    };
    // In compat finmcp a record with sample fields but no `messages_pred` is still a FinMCP
    // record (evaluation.py raises ValueError on it, which the compat scorer reports).
    let format = opts.pred_format.or_else(|| detect_pred(&obj)).or_else(|| {
        (compat_finmcp && FINMCP_SAMPLE_KEYS.iter().any(|k| obj.contains_key(*k))).then_some(PredFormat::Finmcp)
    });
    let id = id_string(obj.get("id"));
    // FinMCP inference writes a failed sample as `{error, error_message, messages_pred: []}`
    // without its id; evaluation.py never reads `id` at all. The compat mode takes such
    // records as they are and names them by their place in the file.
    let unpaired_ok = compat_finmcp && format == Some(PredFormat::Finmcp);
    if id.is_none() && !unpaired_ok {
        let msg = match obj.get("id") {
            None if truthy(obj.get("error")) => {
                "an inference error record without `id`: it cannot be paired with a sample (that sample counts as missing); not scored".to_string()
            }
            None => "no `id`; not scored".to_string(),
            Some(v) => format!("`id` is {}, expected a string or number; not scored", json_type_name(v)),
        };
        diags.push(Diagnostic::line(loc, None, msg));
        return None;
    }
    let pred = match format {
        None => Pred::Malformed(
            "cannot tell the prediction format: expected `turns`/`refusal`, `prediction` or `messages_pred`".into(),
        ),
        Some(PredFormat::Unified) => parse_unified(&obj),
        Some(PredFormat::Etom) => parse_etom(&obj),
        Some(PredFormat::Finmcp) => parse_finmcp(&obj, compat_finmcp),
    };
    if let Pred::Malformed(why) = &pred {
        diags.push(Diagnostic::line(loc, id.as_deref(), format!("malformed prediction: {why}; scored as wrong")));
    }
    Some((id, format, pred))
}

/// Read a predictions file that is one JSON list, handing each element on as a record.
fn read_list(
    reader: &mut impl BufRead,
    strict: bool,
    shown: &str,
    handle: &mut impl FnMut(&str, Record, &mut Vec<Diagnostic>),
    diags: &mut Vec<Diagnostic>,
) -> anyhow::Result<()> {
    let mut text = String::new();
    reader.read_to_string(&mut text).with_context(|| format!("cannot read predictions `{shown}`"))?;
    // Compat modes read what Python's json.loads reads (NaN, 1e400, lone surrogates).
    let parsed = if strict {
        crate::json::from_str::<Vec<Value>>(&text)
    } else {
        crate::json::python_loads(&text).and_then(serde_json::from_value)
    };
    match parsed {
        Ok(list) => {
            for (i, v) in list.into_iter().enumerate() {
                handle(&format!("record {}", i + 1), Record::Value(v), diags);
            }
        }
        Err(e) => diags.push(Diagnostic::line(
            &format!("line {}", e.line()),
            None,
            format!("the predictions file starts with `[` but is not a JSON list: {e}; nothing scored from it"),
        )),
    }
    Ok(())
}

/// Read a JSONL predictions file, handing each non-blank line on as a record; the number of
/// lines that are not valid JSON (they count as records too).
fn read_lines(
    reader: &mut impl BufRead,
    opts: &Options,
    strict: bool,
    shown: &str,
    handle: &mut impl FnMut(&str, Record, &mut Vec<Diagnostic>),
    diags: &mut Vec<Diagnostic>,
) -> anyhow::Result<usize> {
    let mut bad_lines = 0usize;
    let mut line = String::new();
    let mut loc = String::new();
    let mut ln = 0usize;
    loop {
        line.clear();
        let n = reader.read_line(&mut line).with_context(|| format!("cannot read predictions `{shown}`"))?;
        if n == 0 {
            break;
        }
        ln += 1;
        if line.trim().is_empty() {
            continue;
        }
        loc.clear();
        let _ = std::fmt::Write::write_fmt(&mut loc, format_args!("line {ln}"));
        match line_record(&line, opts.pred_format, strict) {
            Ok(record) => handle(&loc, record, diags),
            Err(e) => {
                bad_lines += 1;
                diags.push(Diagnostic::line(&loc, None, format!("not valid JSON: {e}; not scored")));
            }
        }
    }
    Ok(bad_lines)
}

/// One JSONL line as a record: by the typed ETOM reader, the unified fast path or the
/// general JSON reader, in that order; the parse error when the line is not valid JSON.
fn line_record(line: &str, forced: Option<PredFormat>, strict: bool) -> Result<Record, serde_json::Error> {
    // The corrected mode: one typed pass over the line checks every key is given once
    // and reads an ETOM orchestrator record without building a JSON tree.
    if strict {
        let p = typed::pred_line(line, true)?;
        if let Some((id, norm)) = typed_etom(&p, forced) {
            // The corrected mode reads `norm` only: no raw value is built.
            return Ok(Record::Etom(id, norm, Value::Null));
        }
    } else if let Ok(p) = typed::pred_line(line, false)
        && let Some(id) = etom_id(&p, forced)
    {
        // The compat modes: the last value of a key wins, as in `json.loads`; a line
        // with Python-only tokens (NaN, …) fails here and takes the general path. The
        // compat evaluators read the raw `prediction` only (the published evaluator
        // parses it itself), so it is not normalised here.
        let raw = p.prediction.map_or(Value::Null, typed::EtomPred::into_value);
        return Ok(Record::Etom(id, NormPred::default(), raw));
    }
    if matches!(forced, None | Some(PredFormat::Unified))
        && let Some((id, norm)) = fast_unified(line)
    {
        return Ok(Record::Fast(id, norm));
    }
    let parsed = if strict { serde_json::from_str::<Value>(line) } else { crate::json::python_loads(line) };
    parsed.map(Record::Value)
}

/// A prediction record, parsed generically or by a fast path.
enum Record {
    Value(Value),
    Fast(String, NormPred),
    /// Id, normalised prediction, and the `prediction` value for the compat modes (`Null` in
    /// the corrected mode, which does not read it).
    Etom(String, NormPred, Value),
}

/// An ETOM orchestrator record read by the typed reader, normalised; `None` sends the line
/// through the general reader (other formats, odd ids), which gives the same result for
/// these records and the diagnostics for the rest.
fn typed_etom(p: &typed::PredLine, forced: Option<PredFormat>) -> Option<(String, NormPred)> {
    let id = etom_id(p, forced)?;
    Some((id, norm_etom_typed(p.prediction.as_ref()?)))
}

/// The id of a line the typed reader can take as an ETOM orchestrator record.
fn etom_id(p: &typed::PredLine, forced: Option<PredFormat>) -> Option<String> {
    if p.not_object || !matches!(forced, None | Some(PredFormat::Etom)) || (forced.is_none() && p.finmcp_keys) {
        return None;
    }
    p.prediction.as_ref()?;
    match p.id.as_ref()? {
        typed::Fv::Str(s) => Some(s.to_string()),
        typed::Fv::Other(Value::Number(n)) => Some(n.to_string()),
        typed::Fv::Other(_) => None,
    }
}

/// [`norm_etom`] for a prediction read by the typed reader.
fn norm_etom_typed(pred: &typed::EtomPred) -> NormPred {
    let items = match pred {
        typed::EtomPred::List(items) => items,
        typed::EtomPred::Other(other) => return norm_etom(&other.to_value()),
    };
    let mut norm = NormPred::default();
    let mut calls = Vec::with_capacity(items.len());
    let mut nos = 0;
    for (k, it) in items.iter().enumerate() {
        let item = match it {
            typed::Fv::Str(s) => etom_item_str(s),
            typed::Fv::Other(v) => etom_item(v),
        };
        push_item(&mut norm, &mut calls, &mut nos, k, item);
    }
    finish_items(&mut norm, calls, nos);
    norm
}

/// [`etom_item`] of a JSON string item, parsed typed.
fn etom_item_str(s: &str) -> EtomItem {
    let Some(sel) = typed::selection(s) else {
        return etom_item_text(s);
    };
    fn text<'a>(f: &'a Option<typed::Fv<'_>>) -> Option<Option<&'a str>> {
        f.as_ref().map(typed::Fv::as_str)
    }
    match (text(&sel.server), text(&sel.tool)) {
        (Some(Some(s)), Some(Some(t))) if is_no(s) && is_no(t) => EtomItem::No,
        (None, Some(Some(t))) if is_no(t) => EtomItem::No,
        (Some(Some(s)), Some(Some(t))) if !t.trim().is_empty() => EtomItem::Tool(join_id(s, t)),
        _ => EtomItem::Unreadable("an object without string server and tool_name".into()),
    }
}

/// [`crate::model::tool_id`] without the formatting machinery (one call per predicted item).
fn join_id(server: &str, tool: &str) -> String {
    let (server, tool) = (server.trim(), tool.trim());
    let mut id = String::with_capacity(server.len() + TOOL_ID_SEP.len() + tool.len());
    id.push_str(server);
    id.push_str(TOOL_ID_SEP);
    id.push_str(tool);
    id
}

/// A string item that is not a JSON object: the "No" sentinel, a bare `server::tool`, or text.
fn etom_item_text(s: &str) -> EtomItem {
    if is_no(s) {
        EtomItem::No
    } else if s.contains(TOOL_ID_SEP) {
        EtomItem::Tool(norm_tool_id(s))
    } else {
        EtomItem::Unreadable(format!("`{}` is not a tool selection", truncate(s, 60)))
    }
}

/// Marks that a key is present, whatever its value (even `null`).
#[derive(Default)]
struct Present(bool);

impl<'de> serde::Deserialize<'de> for Present {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(Present(true))
    }
}

/// The common unified record, deserialised without building a JSON tree.
#[derive(serde::Deserialize)]
struct FastRecord<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    turns: Option<Vec<FastTurn<'a>>>,
    #[serde(default)]
    refusal: Option<bool>,
    #[serde(default)]
    prediction: Present,
    #[serde(default)]
    messages_pred: Present,
    #[serde(default)]
    error: Present,
}

#[derive(serde::Deserialize)]
struct FastTurn<'a> {
    #[serde(borrow)]
    calls: Vec<FastCall<'a>>,
}

#[derive(serde::Deserialize)]
struct FastCall<'a> {
    #[serde(borrow)]
    tool: std::borrow::Cow<'a, str>,
    #[serde(default)]
    group: Option<i64>,
}

/// Fast path for well-formed unified records; `None` sends the line through the general
/// reader, which gives the same result for these records and the diagnostics for the rest.
fn fast_unified(line: &str) -> Option<(String, NormPred)> {
    let r: FastRecord = serde_json::from_str(line).ok()?;
    if r.prediction.0 || r.messages_pred.0 || r.error.0 {
        return None;
    }
    let refusal = r.refusal.unwrap_or(false);
    let Some(turns_in) = r.turns else {
        return refusal.then(|| (r.id.into_owned(), NormPred { refusal: true, ..Default::default() }));
    };
    let mut turns = Vec::with_capacity(turns_in.len());
    for t in turns_in {
        let with_group = t.calls.iter().filter(|c| c.group.is_some()).count();
        if with_group != 0 && with_group != t.calls.len() {
            return None;
        }
        let mut calls = Vec::with_capacity(t.calls.len());
        for (k, c) in t.calls.into_iter().enumerate() {
            if c.tool.trim().is_empty() {
                return None;
            }
            calls.push(PredCall { tool: norm_tool_id_cow(&c.tool).into_owned(), group: c.group.unwrap_or(k as i64) });
        }
        turns.push(calls);
    }
    if refusal && turns.iter().any(|t: &Vec<PredCall>| !t.is_empty()) {
        return None;
    }
    Some((r.id.into_owned(), NormPred { turns, refusal, notes: Vec::new() }))
}

fn detect_pred(obj: &Map<String, Value>) -> Option<PredFormat> {
    if obj.contains_key("messages_pred") || obj.contains_key("error") {
        Some(PredFormat::Finmcp)
    } else if obj.contains_key("prediction") {
        Some(PredFormat::Etom)
    } else if obj.contains_key("turns") || obj.contains_key("refusal") {
        Some(PredFormat::Unified)
    } else {
        None
    }
}

/// A tool given as `"server::tool"` or `{server, tool}` (also `server_name`/`tool_name`).
fn tool_from(v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Ok(norm_tool_id(s)),
        Value::Object(o) => {
            let server = o.get("server").or_else(|| o.get("server_name")).and_then(Value::as_str);
            let tool = o.get("tool").or_else(|| o.get("tool_name")).and_then(Value::as_str);
            match (server, tool) {
                (Some(s), Some(t)) if !t.trim().is_empty() => Ok(crate::model::tool_id(s, t)),
                (None, Some(t)) if !t.trim().is_empty() => Ok(t.trim().to_string()),
                _ => Err("an object without string `server` and `tool`".into()),
            }
        }
        other => Err(format!("{}; expected \"server::tool\" or {{server, tool}}", json_type_name(other))),
    }
}

fn parse_unified(obj: &Map<String, Value>) -> Pred {
    let refusal = match obj.get("refusal") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Pred::Malformed(format!("`refusal` is {}, expected true or false", json_type_name(v))),
    };
    let turns_v = match obj.get("turns") {
        None | Some(Value::Null) if refusal => {
            return Pred::Ok { norm: NormPred { refusal: true, ..Default::default() }, raw: RawPred::Unified };
        }
        None => return Pred::Malformed("no `turns` (and no `refusal: true`)".into()),
        Some(Value::Array(a)) => a,
        Some(v) => return Pred::Malformed(format!("`turns` is {}, expected a list", json_type_name(v))),
    };
    let mut turns = Vec::with_capacity(turns_v.len());
    for (t, turn) in turns_v.iter().enumerate() {
        let calls_v = match turn.get("calls") {
            Some(Value::Array(a)) => a,
            Some(v) => return Pred::Malformed(format!("turns[{t}].calls is {}, expected a list", json_type_name(v))),
            None if turn.is_object() => return Pred::Malformed(format!("turns[{t}] has no `calls`")),
            None => return Pred::Malformed(format!("turns[{t}] is {}, expected an object", json_type_name(turn))),
        };
        let mut calls = Vec::with_capacity(calls_v.len());
        let mut with_group = 0;
        for (k, c) in calls_v.iter().enumerate() {
            let Some(co) = c.as_object() else {
                return Pred::Malformed(format!("turns[{t}].calls[{k}] is {}, expected an object", json_type_name(c)));
            };
            let tool = match co.get("tool").map(tool_from) {
                Some(Ok(tool)) => tool,
                Some(Err(e)) => return Pred::Malformed(format!("turns[{t}].calls[{k}].tool is {e}")),
                None => return Pred::Malformed(format!("turns[{t}].calls[{k}] has no `tool`")),
            };
            let group = match co.get("group") {
                None | Some(Value::Null) => k as i64,
                Some(Value::Number(n)) if n.as_i64().is_some() => {
                    with_group += 1;
                    n.as_i64().expect("checked")
                }
                Some(v) => {
                    return Pred::Malformed(format!(
                        "turns[{t}].calls[{k}].group is {}, expected an integer",
                        json_type_name(v)
                    ));
                }
            };
            calls.push(PredCall { tool, group });
        }
        if with_group != 0 && with_group != calls.len() {
            return Pred::Malformed(format!(
                "turns[{t}]: `group` is given for {with_group} of {} calls; give it for all or none",
                calls.len()
            ));
        }
        turns.push(calls);
    }
    if refusal && turns.iter().any(|t| !t.is_empty()) {
        return Pred::Malformed("`refusal: true` together with tool calls".into());
    }
    Pred::Ok { norm: NormPred { turns, refusal, notes: Vec::new() }, raw: RawPred::Unified }
}

/// Whether a string says "no" (the ETOM no-tool sentinel), any case, surrounding space ignored.
fn is_no(s: &str) -> bool {
    s.trim().eq_ignore_ascii_case("no")
}

/// Field of an ETOM tool selection under any key spelling (`server`, `server_name`,
/// `Server Name`, …): keys compared lower-cased without non-alphanumerics.
fn field<'a>(o: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    o.iter().find_map(|(k, v)| {
        let norm: String = k.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect();
        names.contains(&norm.as_str()).then_some(v)
    })
}

enum EtomItem {
    Tool(String),
    No,
    Unreadable(String),
}

fn etom_item(v: &Value) -> EtomItem {
    match v {
        Value::String(s) => etom_item_str(s),
        Value::Object(o) => {
            let server = field(o, &["server", "servername"]);
            let tool = field(o, &["toolname", "tool", "name"]);
            match (server, tool) {
                (Some(Value::String(s)), Some(Value::String(t))) if is_no(s) && is_no(t) => EtomItem::No,
                (None, Some(Value::String(t))) if is_no(t) => EtomItem::No,
                (Some(Value::String(s)), Some(Value::String(t))) if !t.trim().is_empty() => {
                    EtomItem::Tool(crate::model::tool_id(s, t))
                }
                _ => EtomItem::Unreadable("an object without string server and tool_name".into()),
            }
        }
        other => EtomItem::Unreadable(format!("{} is not a tool selection", json_type_name(other))),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
}

/// Normalise what an ETOM orchestrator returned.
pub fn norm_etom(pred: &Value) -> NormPred {
    let mut norm = NormPred::default();
    let items: Vec<Value> = match pred {
        Value::Array(a) => a.clone(),
        Value::Null => {
            norm.refusal = true;
            norm.notes.push("null prediction: no tool call".into());
            return norm;
        }
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Array(a)) => a,
            Ok(o @ Value::Object(_)) => vec![o],
            // A bare `server::tool` id (server names may contain spaces; an answer has more text).
            _ if s.contains(TOOL_ID_SEP) && !s.contains('\n') && s.len() < 300 => vec![pred.clone()],
            _ => {
                norm.refusal = true;
                if !is_no(s) {
                    norm.notes.push("plain-text answer: no tool call".into());
                }
                return norm;
            }
        },
        other => vec![other.clone()],
    };
    let mut calls = Vec::with_capacity(items.len());
    let mut nos = 0;
    for (k, it) in items.iter().enumerate() {
        push_item(&mut norm, &mut calls, &mut nos, k, etom_item(it));
    }
    finish_items(&mut norm, calls, nos);
    norm
}

fn push_item(norm: &mut NormPred, calls: &mut Vec<PredCall>, nos: &mut usize, k: usize, item: EtomItem) {
    match item {
        EtomItem::Tool(t) => calls.push(PredCall { tool: t, group: k as i64 }),
        EtomItem::No => *nos += 1,
        EtomItem::Unreadable(why) => {
            norm.notes.push(format!("item {k}: {why}; counted as a wrong call"));
            calls.push(PredCall { tool: String::new(), group: k as i64 });
        }
    }
}

fn finish_items(norm: &mut NormPred, calls: Vec<PredCall>, nos: usize) {
    if nos > 0 && calls.is_empty() {
        norm.refusal = true;
    } else if nos > 0 {
        norm.notes.push(format!("{nos} \"No\" item(s) next to tool calls ignored"));
    }
    norm.turns = vec![calls];
}

fn parse_etom(obj: &Map<String, Value>) -> Pred {
    let Some(p) = obj.get("prediction") else {
        return Pred::Malformed("no `prediction`".into());
    };
    Pred::Ok { norm: norm_etom(p), raw: RawPred::Etom(p.clone()) }
}

pub(crate) fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|x| x != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// Normalise FinMCP `messages_pred`: one turn per user message, one group per assistant message.
pub fn norm_finmcp(messages: &Value) -> Result<NormPred, String> {
    let Some(list) = messages.as_array() else {
        return Err(format!("expected a list of messages, got {}", json_type_name(messages)));
    };
    let turns = split_turns(list)?;
    let mut norm = NormPred::default();
    let last = turns.len().saturating_sub(1);
    for (t, mt) in turns.into_iter().enumerate() {
        if t == last && t > 0 && mt.user.trim() == STOP {
            let n: usize = mt.groups.iter().map(Vec::len).sum();
            if n > 0 {
                norm.notes.push(format!("{n} call(s) after the final `###STOP###` message ignored"));
            }
            continue;
        }
        let mut calls = Vec::new();
        for (g, group) in mt.groups.into_iter().enumerate() {
            for c in group {
                match c {
                    Ok(name) => calls.push(PredCall { tool: name, group: g as i64 }),
                    Err(e) => {
                        norm.notes.push(format!("{e}; counted as a wrong call"));
                        calls.push(PredCall { tool: String::new(), group: g as i64 });
                    }
                }
            }
        }
        norm.turns.push(calls);
    }
    Ok(norm)
}

/// The fields of a sample that `evaluation.py` reads, when an inference record carries them
/// (the inference output is each sample with `messages_pred` added).
pub const FINMCP_SAMPLE_KEYS: [&str; 4] = ["scenery", "diff_level", "messages", "task"];

/// `compat`: the record is kept as `evaluation.py` reads it (its own sample fields, and
/// `messages_pred` unchecked: the compat scorer extracts the names itself).
fn parse_finmcp(obj: &Map<String, Value>, compat: bool) -> Pred {
    let error = truthy(obj.get("error"));
    let given = obj.get("messages_pred").cloned();
    let messages = given.clone().unwrap_or(Value::Null);
    let sample = (compat && FINMCP_SAMPLE_KEYS[..3].iter().any(|k| obj.contains_key(*k))).then(|| {
        let own: Map<String, Value> =
            FINMCP_SAMPLE_KEYS.iter().filter_map(|k| obj.get(*k).map(|v| (k.to_string(), v.clone()))).collect();
        Value::Object(own)
    });
    let norm = if error {
        let mut n = NormPred::default();
        n.notes.push("inference failed (record has `error`); scored as no tool calls".into());
        n
    } else {
        match norm_finmcp(&messages) {
            Ok(n) => n,
            Err(_) if compat => NormPred::default(),
            Err(e) => return Pred::Malformed(format!("messages_pred: {e}")),
        }
    };
    Pred::Ok { norm, raw: RawPred::Finmcp { messages_pred: given, error, sample } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_path_agrees_with_the_general_reader() {
        let lines = [
            r#"{"id": "a", "turns": [{"calls": [{"tool": " S :: t ", "arguments": {"x": [1, {"y": 2}]}}, {"tool": "S::u"}]}]}"#,
            r#"{"id": "b", "turns": [{"calls": [{"tool": "S::t", "group": 0}, {"tool": "S::u", "group": 0}]}, {"calls": []}]}"#,
            r#"{"id": "c", "refusal": true}"#,
            r#"{"id": "d", "refusal": true, "turns": []}"#,
            r#"{"id": "e", "turns": [{"calls": [{"tool": "S::t", "group": null}]}], "refusal": null}"#,
        ];
        for l in lines {
            let (id, fast) = fast_unified(l).expect("fast path takes it");
            let v: Value = serde_json::from_str(l).unwrap();
            let obj = v.as_object().unwrap();
            assert_eq!(id_string(obj.get("id")).unwrap(), id);
            match parse_unified(obj) {
                Pred::Ok { norm, .. } => assert_eq!(norm, fast, "{l}"),
                Pred::Malformed(m) => panic!("{l}: {m}"),
            }
        }
        // Everything else goes to the general reader.
        assert!(fast_unified(r#"{"id": "a", "turns": "x"}"#).is_none());
        for l in [
            r#"{"id": 1, "turns": []}"#,
            r#"{"id": "a", "turns": [{"calls": [{"tool": {"server": "S", "tool": "t"}}]}]}"#,
            r#"{"id": "a", "turns": [{"calls": [{"tool": "S::t", "group": 0}, {"tool": "S::u"}]}]}"#,
            r#"{"id": "a", "refusal": true, "turns": [{"calls": [{"tool": "S::t"}]}]}"#,
            r#"{"id": "a", "turns": [], "prediction": null}"#,
            r#"{"id": "a"}"#,
            r#"{"id": "a", "turns": [{"calls": [{"tool": "  "}]}]}"#,
        ] {
            assert!(fast_unified(l).is_none(), "{l}");
        }
    }

    #[test]
    fn typed_etom_reading_agrees_with_the_value_reading() {
        use serde_json::json;
        let sel = |s: &str, t: &str| {
            json!({"server": s, "tool_name": t, "arguments_kv": [{"key": "k", "value_json": "1"}]}).to_string()
        };
        let lines = [
            json!({"id": "L1-1", "prediction": [sel("S", "a"), sel("No", "NO")]}),
            json!({"id": 7, "x": {"y": [1]}, "prediction": [{"Server Name": "S", "Tool_Name": "b"}, 5, "garbage", "S::c", "no"]}),
            json!({"id": "x", "prediction": "Sorry, I cannot do that."}),
            json!({"id": "x", "prediction": "no"}),
            json!({"id": "x", "prediction": null}),
            json!({"id": "x", "prediction": "My Server::do it"}),
            json!({"id": "x", "prediction": []}),
            json!({"id": "x", "prediction": {"server": "S", "tool_name": "a"}}),
            json!({"id": "x", "prediction": [
                r#"{"server": "S", "server": "T", "tool_name": "a"}"#,
                r#"{"Server": "S", "server": "T", "tool": "a"}"#,
                "[1]",
                r#"{"server": 1, "tool_name": "a"}"#,
                r#"{"tool_name": "no"}"#,
                r#" {"server_name": "S", "name": "a"} "#,
                r#"{"server": "S", "tool_name": "a"} x"#,
                r#"{"server": "S", "tool_name": "  "}"#,
                r#"{"server": "S\u00e9", "tool_name": "a\"b"}"#,
            ]}),
            json!({"id": "x", "prediction": json!([sel("S", "a")]).to_string()}),
        ];
        for l in lines {
            let text = l.to_string();
            let p = typed::pred_line(&text, true).unwrap();
            let (id, fast) = typed_etom(&p, None).expect("typed path");
            let obj = l.as_object().unwrap();
            assert_eq!(id_string(obj.get("id")).unwrap(), id);
            match parse_etom(obj) {
                Pred::Ok { norm, .. } => assert_eq!(norm, fast, "{text}"),
                Pred::Malformed(m) => panic!("{text}: {m}"),
            }
        }
        // Other formats and odd ids go to the general reader.
        for l in [
            r#"{"id": "a", "messages_pred": [], "prediction": []}"#,
            r#"{"id": [1], "prediction": []}"#,
            r#"{"id": "a", "turns": []}"#,
            r#"{"prediction": []}"#,
            "[1]",
        ] {
            let p = typed::pred_line(l, true).unwrap();
            assert!(typed_etom(&p, None).is_none(), "{l}");
        }
        let p = typed::pred_line(r#"{"id": "a", "error": true, "prediction": []}"#, true).unwrap();
        assert!(typed_etom(&p, Some(PredFormat::Etom)).is_some(), "a forced format reads `prediction`");
        // Every key once, in skipped fields too (corrected); the last wins otherwise.
        let e = typed::pred_line(r#"{"id": "a", "prediction": [], "prediction": []}"#, true).unwrap_err();
        assert!(e.to_string().starts_with("duplicate key `prediction` at line 1"), "{e}");
        assert!(typed::pred_line(r#"{"id": "a", "x": [{"k": 1, "k": 2}]}"#, true).is_err());
        assert!(typed::pred_line(r#"{"id": "a", "prediction": [{"k": 1, "k": 2}]}"#, true).is_err());
        assert!(typed::pred_line(r#"{"id": "a", "x": [{"k": 1, "k": 2}]}"#, false).is_ok());
        assert!(typed::pred_line(r#"{"id": "a", "x": NaN}"#, true).is_err());
    }

    #[test]
    fn orchestrator_outputs() {
        let tools = |v: Value| -> (Vec<String>, bool) {
            let n = norm_etom(&v);
            (n.turns.iter().flatten().map(|c| c.tool.clone()).collect(), n.refusal)
        };
        let sel = |s: &str, t: &str| Value::String(serde_json::json!({"server": s, "tool_name": t}).to_string());
        assert_eq!(tools(Value::String("My Server::do it".into())), (vec!["My Server::do it".to_string()], false));
        assert_eq!(tools(Value::String("Sorry, I cannot do that.".into())), (vec![], true));
        assert_eq!(tools(serde_json::json!([sel("No", "NO")])), (vec![], true));
        assert_eq!(tools(serde_json::json!([{"Server Name": "no", "Tool_Name": "No"}])), (vec![], true));
        assert_eq!(tools(serde_json::json!(["no"])), (vec![], true));
        assert_eq!(tools(serde_json::json!([])), (vec![], false));
        assert_eq!(
            tools(serde_json::json!([sel("S ", " t"), {"server_name": "S", "tool_name": "u"}])).0,
            vec!["S::t", "S::u"]
        );
        // Unreadable items stay in the sequence as wrong calls.
        assert_eq!(tools(serde_json::json!([5, "garbage", sel("S", "t")])).0, vec!["", "", "S::t"]);
    }
}
