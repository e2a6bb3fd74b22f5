//! `--compat finmcp`: the published FinMCP evaluator (`eval/evaluation.py`), reproduced.
//!
//! Per sample: the tool names of every assistant `tool_calls` entry, flattened over the whole
//! conversation (turns concatenated, parallel groups flattened); TP/FP/FN over call
//! multisets (`Counter &`); `consist` = the flat name lists are equal (order-sensitive,
//! grouping ignored); every division by zero gives 0. Records with a truthy `error` are
//! dropped (`--drop_error_data` cannot be switched off), and records missing a key the script
//! reads raise KeyError and are skipped: both leave N. Groups: `scenery.split('-')[0]`,
//! `diff_level.level`, `task` with spaces as underscores. Figures are rounded to 4 decimals.

use std::collections::HashMap;

use serde_json::Value;

use super::compat_etom::py_str;
use super::{GoldCall, Item, Pred, Prf, Raw, RawPred, SampleResult, Status};
use crate::model::{Difficulty, Kind};

/// `extract_toolcall_from_meg`: Err is a KeyError (the record is skipped).
fn extract(messages: &Value) -> Result<Vec<String>, String> {
    let Some(list) = messages.as_array() else {
        return Err(format!("messages is not a list ({})", py_str(messages)));
    };
    let mut out = Vec::new();
    for m in list {
        let Some(m) = m.as_object() else { continue };
        let Some(calls) = m.get("tool_calls") else { continue };
        let calls: &[Value] = match calls {
            Value::Array(a) => a,
            Value::Null | Value::Bool(false) => continue,
            _ => return Err("tool_calls is not a list".into()),
        };
        for c in calls {
            let name = c
                .get("function")
                .and_then(|f| f.get("name"))
                .ok_or_else(|| "KeyError: tool call without function.name".to_string())?;
            out.push(py_str(name));
        }
    }
    Ok(out)
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
    let (pred_names, own) = match pred {
        Pred::Malformed(why) => {
            res.reasons.push(format!("malformed prediction ({why}): left out of N, as the script skips it"));
            return res;
        }
        Pred::Ok { raw: RawPred::Finmcp { error: true, .. }, .. } => {
            res.reasons
                .push("error record: dropped (--drop_error_data defaults to True and cannot be turned off)".into());
            return res;
        }
        Pred::Ok { raw: RawPred::Finmcp { messages_pred, sample, .. }, .. } => match extract(messages_pred) {
            Ok(n) => (n, sample.as_ref()),
            Err(e) => {
                res.reasons.push(format!("messages_pred: {e}: skipped, left out of N"));
                return res;
            }
        },
        Pred::Ok { norm, .. } => (
            norm.turns
                .iter()
                .flatten()
                .map(|c| super::input::key_for(crate::model::Family::Finmcp, &c.tool).to_string())
                .collect(),
            None,
        ),
    };
    let keys = match (own, item) {
        (Some(rec), _) => keys_of_record(rec),
        (None, Some(Item { raw: Some(Raw::Finmcp(rec)), .. })) => keys_of_record(rec),
        (None, Some(it)) => Ok(keys_of_unified(it)),
        (None, None) => Err("KeyError: 'scenery' (no sample fields and no sample paired by id)".to_string()),
    };
    let (groups, gold) = match keys {
        Ok(k) => k,
        Err(e) => {
            res.reasons.push(format!("{e}: skipped by evaluation.py, left out of N"));
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

/// What `get_instance_result` reads from a FinMCP record; Err is the KeyError that skips it.
fn keys_of_record(rec: &Value) -> Result<Keys, String> {
    (|| -> Result<Keys, String> {
        let scenery = rec.get("scenery").ok_or("KeyError: 'scenery'")?;
        let scenery = scenery.as_str().ok_or("scenery is not a string")?;
        let class = scenery.split('-').next().unwrap_or("").to_string();
        let level = rec.get("diff_level").and_then(|d| d.get("level")).ok_or("KeyError: 'diff_level.level'")?;
        let task = match rec.get("task") {
            None => "any".to_string(),
            Some(Value::String(s)) => s.replace(' ', "_"),
            Some(_) => return Err("task is not a string".into()),
        };
        let gold = extract(rec.get("messages").ok_or("KeyError: 'messages'")?)?;
        Ok(([class, py_str(level), task], gold))
    })()
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
