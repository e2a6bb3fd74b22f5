//! `--compat finmcp`: the published FinMCP evaluator (`eval/evaluation.py`), reproduced.
//!
//! Per sample: the tool names of every assistant `tool_calls` entry, flattened over the whole
//! conversation (turns concatenated, parallel groups flattened); TP/FP/FN over call
//! multisets (`Counter &`); `consist` = the flat name lists are equal (order-sensitive,
//! grouping ignored); every division by zero gives 0. Records with a truthy `error` are
//! dropped (`--drop_error_data` cannot be switched off); a record on which the script raises
//! KeyError (a missing `scenery`, `diff_level.level` or `messages`, a tool call without
//! `function` or `name`, gold or predicted) is skipped; both leave N. A record on which the
//! script raises anything else stops it with no figures at all: we report such a record as an
//! error naming it and leave it out of N (`compat_status` `stopped`). Groups:
//! `scenery.split('-')[0].strip()`, `diff_level.level`, `task` with spaces as underscores.
//! Figures are rounded to 4 decimals. ../shared/docs/reference-pipelines.md C.5 has the rules.

use std::collections::HashMap;

use serde_json::Value;

use super::compat_etom::py_str;
use super::{GoldCall, Item, Pred, Prf, Raw, RawPred, SampleResult, Status};
use crate::model::{Difficulty, Kind};

/// Why `evaluation.py` does not score a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Fail {
    /// A KeyError, which the script catches: the record is skipped, left out of N.
    Skip(String),
    /// Any other exception, which the script does not catch: it stops with no figures.
    Stop(String),
}

/// `compat_status` of a record the script does not score.
pub const DROPPED_ERROR: &str = "error_dropped";
pub const SKIPPED: &str = "skipped";
pub const STOPPED: &str = "stopped";

fn skip(what: impl Into<String>) -> Fail {
    Fail::Skip(format!("KeyError: {}", what.into()))
}

fn stop(what: impl Into<String>) -> Fail {
    Fail::Stop(what.into())
}

/// Python's `type(v).__name__` for a JSON value (the marker strings of NaN/Infinity are floats).
fn py_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(s) if crate::json::py_float(s).is_some() => "float",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Python's `'tool_calls' in x` for an element of `messages`: Ok(true) when the script goes
/// on to read `x['tool_calls']`.
fn has_tool_calls(x: &Value) -> Result<bool, Fail> {
    match x {
        Value::Object(o) => Ok(o.contains_key("tool_calls")),
        // A substring test on a string, an element test on a list: then `x['tool_calls']`
        // raises TypeError.
        Value::String(s) if crate::json::py_float(s).is_none() => match s.contains("tool_calls") {
            true => Err(stop(format!("TypeError: a message is the string {s:?}, which contains `tool_calls`"))),
            false => Ok(false),
        },
        Value::Array(a) => match a.iter().any(|e| e.as_str() == Some("tool_calls")) {
            true => Err(stop("TypeError: a message is a list holding the string `tool_calls`")),
            false => Ok(false),
        },
        other => Err(stop(format!(
            "TypeError: a message is {} (argument of type '{}' is not iterable)",
            py_str(other),
            py_type(other)
        ))),
    }
}

/// Python's truthiness (NaN and the infinities are truthy floats).
fn truthy(v: &Value) -> bool {
    crate::score::input::truthy(Some(v))
}

/// `extract_toolcall_from_meg(messages)`, with the exception the script would raise. `field`
/// names the list in the messages (`messages` or `messages_pred`).
fn extract(messages: &Value, field: &str) -> Result<Vec<String>, Fail> {
    let elements: Vec<&Value> = match messages {
        Value::Array(a) => a.iter().collect(),
        // Iterating a string gives one-character strings, which never contain `tool_calls`.
        Value::String(s) if crate::json::py_float(s).is_none() => return Ok(Vec::new()),
        Value::Object(o) => {
            // Iterating a dict gives its keys (strings).
            return match o.keys().find(|k| k.contains("tool_calls")) {
                Some(k) => {
                    Err(stop(format!("TypeError: `{field}` is an object whose key {k:?} contains `tool_calls`")))
                }
                None => Ok(Vec::new()),
            };
        }
        other => {
            return Err(stop(format!(
                "TypeError: `{field}` is {} ('{}' object is not iterable)",
                py_str(other),
                py_type(other)
            )));
        }
    };
    let mut out = Vec::new();
    for m in elements {
        if !has_tool_calls(m)? {
            continue;
        }
        let calls = &m["tool_calls"];
        if !truthy(calls) {
            continue;
        }
        let calls: Vec<&Value> = match calls {
            Value::Array(a) => a.iter().collect(),
            // Iterating a string or a dict gives strings; `s['function']` raises TypeError.
            Value::String(_) | Value::Object(_) => {
                return Err(stop(format!(
                    "TypeError: a `tool_calls` of `{field}` is a {}, not a list",
                    py_type(calls)
                )));
            }
            other => {
                return Err(stop(format!(
                    "TypeError: a `tool_calls` of `{field}` is {} ('{}' object is not iterable)",
                    py_str(other),
                    py_type(other)
                )));
            }
        };
        for c in calls {
            let Value::Object(c) = c else {
                return Err(stop(format!("TypeError: a tool call in `{field}` is a {}, not an object", py_type(c))));
            };
            let f = c.get("function").ok_or_else(|| skip(format!("'function' (a tool call in `{field}` has none)")))?;
            let Value::Object(f) = f else {
                return Err(stop(format!(
                    "TypeError: a tool call's `function` in `{field}` is a {}, not an object",
                    py_type(f)
                )));
            };
            let name = f
                .get("name")
                .ok_or_else(|| skip(format!("'name' (a tool call's `function` in `{field}` has none)")))?;
            out.push(py_str(name));
        }
    }
    Ok(out)
}

/// Python's `str.strip()`: Rust's whitespace and the four information separators
/// U+001C–U+001F, which Python also counts as whitespace.
fn py_strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

fn safe_div(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// P, R, F1 of one sample with the script's zero-division rule.
pub fn prf(tp: u32, fp: u32, fn_: u32) -> (f64, f64, f64) {
    let p = safe_div(f64::from(tp), f64::from(tp + fp));
    let r = safe_div(f64::from(tp), f64::from(tp + fn_));
    let f = safe_div(2.0 * p * r, p + r);
    (p, r, f)
}

/// `calc_tp_fp_fn` over name multisets.
pub fn counts(pred: &[String], gold: &[String]) -> (u32, u32, u32) {
    let mut pc: HashMap<&str, i64> = HashMap::new();
    for p in pred {
        *pc.entry(p).or_default() += 1;
    }
    let mut gc: HashMap<&str, i64> = HashMap::new();
    for g in gold {
        *gc.entry(g).or_default() += 1;
    }
    let mut tp = 0;
    for (k, &n) in &pc {
        tp += n.min(*gc.get(k).unwrap_or(&0));
    }
    let tp = tp as u32;
    (tp, pred.len() as u32 - tp, gold.len() as u32 - tp)
}

pub fn score(item: &Item, pred: Option<&Pred>) -> SampleResult {
    match pred {
        Some(p) => score_record(Some(item), &item.id, p),
        None => {
            let mut res = SampleResult::new(item, Status::Dropped);
            res.reasons
                .push("no prediction record: left out of N (evaluation.py only sees the records it is given)".into());
            res
        }
    }
}

/// One record of the inference output, as `evaluation.py` scores it: by the sample fields
/// the record carries itself, else by those of `item` (the benchmark sample it was paired
/// with by id). `name` labels the result (the id, or the record's place in the file).
pub fn score_record(item: Option<&Item>, name: &str, pred: &Pred) -> SampleResult {
    let mut res = match item {
        Some(it) => {
            let mut r = SampleResult::new(it, Status::Dropped);
            r.id = name.to_string();
            r
        }
        None => unpaired(name, pred),
    };
    let (messages_pred, own) = match pred {
        Pred::Malformed(why) => {
            res.reasons.push(format!("malformed prediction ({why}): left out of N, as the script skips it"));
            res.compat_status = Some(SKIPPED.into());
            return res;
        }
        Pred::Ok { raw: RawPred::Finmcp { error: true, .. }, .. } => {
            res.reasons
                .push("error record: dropped (--drop_error_data defaults to True and cannot be turned off)".into());
            res.compat_status = Some(DROPPED_ERROR.into());
            return res;
        }
        Pred::Ok { raw: RawPred::Finmcp { messages_pred, sample, .. }, .. } => {
            (Some(messages_pred.as_ref()), sample.as_ref())
        }
        Pred::Ok { .. } => (None, None),
    };
    // The script reads the sample's fields first, then `messages_pred`: the first exception wins.
    let keys = match (own, item) {
        (Some(rec), _) => keys_of_record(rec),
        (None, Some(Item { raw: Some(Raw::Finmcp(rec)), .. })) => keys_of_record(rec),
        (None, Some(it)) => Ok(keys_of_unified(it)),
        (None, None) => Err(skip("'scenery' (no sample fields and no sample paired by id)")),
    };
    let pred_names = keys.and_then(|k| {
        let names = match (messages_pred, pred) {
            (Some(None), _) => Err(stop("ValueError: messages_pred not found in data_dict")),
            (Some(Some(m)), _) => extract(m, "messages_pred"),
            (None, Pred::Ok { norm, .. }) => Ok(norm
                .turns
                .iter()
                .flatten()
                .map(|c| super::input::key_for(crate::model::Family::Finmcp, &c.tool).to_string())
                .collect()),
            (None, Pred::Malformed(_)) => unreachable!("returned above"),
        };
        names.map(|n| (k, n))
    });
    let ((groups, gold), pred_names) = match pred_names {
        Ok(k) => k,
        Err(Fail::Skip(e)) => {
            res.reasons.push(format!("{e}: skipped by evaluation.py, left out of N"));
            res.compat_status = Some(SKIPPED.into());
            return res;
        }
        Err(Fail::Stop(e)) => {
            res.reasons.push(format!(
                "{e}: evaluation.py stops here with no figures at all; reported as an error and left out of N"
            ));
            res.compat_status = Some(STOPPED.into());
            return res;
        }
    };
    let (tp, fp, fn_) = counts(&pred_names, &gold);
    let (p, r, f1) = prf(tp, fp, fn_);
    res.em = pred_names == gold;
    res.calls = Some(Prf { p, r, f1, tp_p: tp, tp_r: tp, pred: tp + fp, gold: tp + fn_ });
    res.compat_groups = Some(groups);
    res.status = if res.em { Status::Correct } else { Status::Wrong };
    if !res.em {
        res.reasons.push(format!("flat call list {pred_names:?} differs from the reference {gold:?}"));
    }
    res
}

/// The result of a record no benchmark sample is paired with (no id, or an id the benchmark
/// lacks): described from its own fields.
fn unpaired(name: &str, pred: &Pred) -> SampleResult {
    let own = match pred {
        Pred::Ok { raw: RawPred::Finmcp { sample: Some(s), .. }, .. } => Some(s),
        _ => None,
    };
    let task = own.and_then(|s| s.get("task")).and_then(Value::as_str).unwrap_or("");
    let kind = match task {
        "single step" => Kind::SingleTool,
        "multi step" => Kind::MultiTool,
        _ => Kind::MultiTurn,
    };
    let level = own.and_then(|s| s.get("diff_level")).and_then(|d| d.get("level")).and_then(Value::as_str);
    let difficulty = match level {
        Some("medium") => Difficulty::Medium,
        Some("hard") => Difficulty::Hard,
        _ => Difficulty::Easy,
    };
    let mut r = SampleResult::unscored(name, crate::model::Family::Finmcp, kind, difficulty, Status::Dropped);
    r.reasons = vec![
        "paired with no benchmark sample (no id, or an id the benchmark lacks): scored by the record's own sample fields, as evaluation.py does".into(),
    ];
    r
}

/// Grouping keys (class_Level1, diff_level.level, task) and the flat gold name list.
type Keys = ([String; 3], Vec<String>);

/// What `get_instance_result` reads from a FinMCP record, in its order; Err is the exception
/// the script raises on it.
fn keys_of_record(rec: &Value) -> Result<Keys, Fail> {
    let scenery = rec.get("scenery").ok_or_else(|| skip("'scenery'"))?;
    let scenery = match scenery {
        Value::String(s) if crate::json::py_float(s).is_none() => s,
        _ => {
            return Err(stop(format!(
                "AttributeError: `scenery` is a {} ('{0}' object has no attribute 'split')",
                py_type(scenery)
            )));
        }
    };
    let class = py_strip(scenery.split('-').next().unwrap_or("")).to_string();
    let level = match rec.get("diff_level").ok_or_else(|| skip("'diff_level'"))? {
        Value::Object(d) => d.get("level").ok_or_else(|| skip("'level' (`diff_level` has no `level`)"))?,
        other => {
            return Err(stop(format!(
                "TypeError: `diff_level` is a {}, not an object ('{0}' object is not subscriptable by 'level')",
                py_type(other)
            )));
        }
    };
    // A list or object cannot be a dict key: compute_metrics raises TypeError on it.
    if level.is_array() || level.is_object() {
        return Err(stop(format!("TypeError: `diff_level.level` is a {} (unhashable type)", py_type(level))));
    }
    let task = match rec.get("task") {
        None => "any".to_string(),
        Some(Value::String(s)) if crate::json::py_float(s).is_none() => s.replace(' ', "_"),
        Some(other) => {
            return Err(stop(format!(
                "AttributeError: `task` is a {} ('{0}' object has no attribute 'replace')",
                py_type(other)
            )));
        }
    };
    let gold = extract(rec.get("messages").ok_or_else(|| skip("'messages'"))?, "messages")?;
    Ok(([class, py_str(level), task], gold))
}

/// The same for a unified FinMCP sample: `scenery` = the scenario path, the file's difficulty
/// label, the task from the kind, reference calls in order (first alternative, tool name).
fn keys_of_unified(item: &Item) -> Keys {
    let class = if &*item.category == "(none)" { String::new() } else { item.category.to_string() };
    let task = match item.kind {
        crate::model::Kind::SingleTool => "single_step",
        crate::model::Kind::MultiTool => "multi_step",
        _ => "multi_turn",
    };
    let mut gold = Vec::new();
    for turn in &item.turns {
        // Messages list the groups in step order.
        let mut calls: Vec<&GoldCall> = turn.iter().collect();
        calls.sort_by_key(|c| c.group);
        gold.extend(calls.iter().map(|c| {
            super::input::key_for(crate::model::Family::Finmcp, c.alts.first().map(|a| &**a).unwrap_or("")).to_string()
        }));
    }
    ([class, item.given_difficulty.as_str().to_string(), task.to_string()], gold)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn group_key_is_stripped_as_python_strips() {
        assert_eq!(py_strip(" 账户与服务管理 "), "账户与服务管理");
        assert_eq!(py_strip("\u{1c}\t a\u{3000}\u{85}"), "a");
        assert_eq!(py_strip("a b"), "a b");
        let rec = |scenery: &str| json!({"scenery": scenery, "diff_level": {"level": "easy"}, "messages": []});
        let k = |s: &str| keys_of_record(&rec(s)).unwrap().0[0].clone();
        assert_eq!(k("账户与服务管理 - 账户查询"), k("账户与服务管理-账户查询"));
        assert_eq!(k(" - x"), "");
    }

    #[test]
    fn extraction_raises_what_the_script_raises() {
        let call = |f: Value| json!([{"role": "assistant", "tool_calls": [f]}]);
        // Names are `str(name)`.
        let named = call(json!({"function": {"name": null}}));
        assert_eq!(extract(&named, "m"), Ok(vec!["None".to_string()]));
        assert_eq!(extract(&call(json!({"function": {"name": 7}})), "m"), Ok(vec!["7".to_string()]));
        assert_eq!(extract(&call(json!({"function": {"name": true}})), "m"), Ok(vec!["True".to_string()]));
        // KeyError: skipped.
        assert!(matches!(extract(&call(json!({"name": "a"})), "m"), Err(Fail::Skip(_))));
        assert!(matches!(extract(&call(json!({"function": {}})), "m"), Err(Fail::Skip(_))));
        // Anything else stops the script.
        for bad in [json!({"function": "a"}), json!({"function": null}), json!("a"), json!(null), json!([1])] {
            assert!(matches!(extract(&call(bad.clone()), "m"), Err(Fail::Stop(_))), "{bad}");
        }
        assert!(matches!(extract(&json!(null), "m"), Err(Fail::Stop(_))));
        assert!(matches!(extract(&json!(3), "m"), Err(Fail::Stop(_))));
        assert!(matches!(extract(&json!(["has tool_calls"]), "m"), Err(Fail::Stop(_))));
        assert!(matches!(extract(&json!([["tool_calls"]]), "m"), Err(Fail::Stop(_))));
        assert!(matches!(extract(&json!([1]), "m"), Err(Fail::Stop(_))));
        assert!(matches!(extract(&json!({"tool_calls": 1}), "m"), Err(Fail::Stop(_))));
        assert!(matches!(extract(&json!([{"tool_calls": "ab"}]), "m"), Err(Fail::Stop(_))));
        // Falsy `tool_calls`, strings that do not name it, a string as the whole list: nothing.
        for ok in [json!([{"tool_calls": null}, {"tool_calls": 0}, {"tool_calls": ""}, "hello", {}]), json!("text")] {
            assert_eq!(extract(&ok, "m"), Ok(vec![]), "{ok}");
        }
    }

    #[test]
    fn record_fields_are_read_in_the_script_s_order() {
        // A missing `scenery` is a KeyError even when `task` would stop the script later.
        let r = json!({"diff_level": {"level": "easy"}, "task": null, "messages": []});
        assert!(matches!(keys_of_record(&r), Err(Fail::Skip(_))));
        let r = json!({"scenery": "a", "diff_level": "easy", "messages": []});
        assert!(matches!(keys_of_record(&r), Err(Fail::Stop(_))));
        let r = json!({"scenery": "a", "diff_level": {}, "messages": []});
        assert!(matches!(keys_of_record(&r), Err(Fail::Skip(_))));
        let r = json!({"scenery": "a", "diff_level": {"level": ["x"]}, "messages": []});
        assert!(matches!(keys_of_record(&r), Err(Fail::Stop(_))));
        let r = json!({"scenery": 1, "diff_level": {"level": "easy"}, "messages": []});
        assert!(matches!(keys_of_record(&r), Err(Fail::Stop(_))));
        let r = json!({"scenery": "a-b", "diff_level": {"level": "easy"}, "messages": []});
        assert_eq!(keys_of_record(&r).unwrap().0, ["a".to_string(), "easy".into(), "any".into()]);
    }
}
