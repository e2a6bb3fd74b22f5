//! `--compat etom`: the published ETOM evaluator (`eval/eval.py` level strategies and
//! `eval/graph_evaluator.py`), reproduced with its defects so numbers compare with the
//! paper's tables. Python semantics that matter are modelled: which exceptions are caught
//! where (a crash inside L3/L4 evaluation gives status `error` and leaves the F1 average; a
//! crash anywhere else gives the runner's `processing_error` with zero metrics), truthiness,
//! `dict.get` defaults, greedy first-fit matching, and the L5 key quirks.
//!
//! Not modelled: Python's numeric equalities across types (`1 == 1.0 == True`) in tool names.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::{Item, NormPred, Pred, Prf, Raw, RawPred, SampleResult, Status};
use crate::model::Kind;

/// One evaluation dict as the published strategies return it (only what aggregation reads).
#[derive(Debug, Clone, PartialEq)]
pub struct Eval {
    pub status: &'static str,
    pub em: bool,
    /// `f1_metrics`: (precision, recall, f1, tp, fp, fn); `None` when the key is absent.
    pub f1: Option<(f64, f64, f64, u32, u32, u32)>,
    pub node_set_match: Option<bool>,
    pub parallel_aware_match: Option<bool>,
    pub tool_name_match: bool,
    pub server_match: bool,
    pub note: Option<String>,
}

impl Eval {
    fn new(status: &'static str, em: bool, f1: Option<(f64, f64, f64, u32, u32, u32)>) -> Self {
        Eval {
            status,
            em,
            f1,
            node_set_match: None,
            parallel_aware_match: None,
            tool_name_match: false,
            server_match: false,
            note: None,
        }
    }

    /// What the runner records when a strategy raises.
    fn processing_error(msg: String) -> Self {
        let mut e = Eval::new("processing_error", false, Some((0.0, 0.0, 0.0, 0, 0, 1)));
        e.note = Some(msg);
        e
    }
}

/// A Python exception raised while evaluating.
type Py<T> = Result<T, String>;

pub(crate) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// `d.get(k, default)`.
fn get<'a>(d: &'a Map<String, Value>, k: &str, default: &'a Value) -> &'a Value {
    d.get(k).unwrap_or(default)
}

fn empty_str() -> &'static Value {
    static E: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    E.get_or_init(|| Value::String(String::new()))
}

/// `a or b`.
fn or<'a>(a: &'a Value, b: &'a Value) -> &'a Value {
    if truthy(a) { a } else { b }
}

fn hashable(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

/// `json.loads(s)` for a Python `str`; anything else raises TypeError.
fn json_loads(v: &Value) -> Py<Result<Value, ()>> {
    match v {
        Value::String(s) => Ok(crate::json::python_loads(s).map_err(|_| ())),
        other => Err(format!("TypeError: the JSON object must be str, not {}", py_type(other))),
    }
}

fn py_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        // NaN and infinities from `json.loads` (crate::json::python_loads).
        Value::String(s) if crate::json::py_float(s).is_some() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// `.lower()` on a value that must be a str.
fn lower(v: &Value) -> Py<String> {
    match v {
        Value::String(s) if crate::json::py_float(s).is_none() => Ok(s.to_lowercase()),
        other => Err(format!("AttributeError: '{}' object has no attribute 'lower'", py_type(other))),
    }
}

/// A normalised GT tool: `{server_name, tool_name, dependencies}`.
#[derive(Debug, Clone, PartialEq)]
pub struct GtTool {
    pub server: Value,
    pub tool: Value,
    pub deps: Value,
}

/// `ground_truth_tools` of one query, each member already normalised as
/// `_normalize_ground_truth_tool` does (read typed from the level file, see
/// `score::input`), with what the strategies still ask of the raw entries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EtomGt {
    pub entries: Vec<GtEntry>,
}

/// One raw `ground_truth_tools` entry.
#[derive(Debug, Clone, PartialEq)]
pub enum GtEntry {
    /// A list: its members that normalise to a tool.
    List(Vec<GtTool>),
    /// Anything else: the tool it normalises to, and whether it is a dict (L2's empty-result
    /// branch calls `.get` on every raw entry).
    One(Option<GtTool>, bool),
}

/// `_normalize_ground_truth_tool`.
pub fn norm_gt_tool(v: &Value) -> Option<GtTool> {
    let parsed;
    let v = match v {
        Value::String(s) => match crate::json::python_loads(s) {
            Ok(p) => {
                parsed = p;
                &parsed
            }
            Err(_) => return None,
        },
        other => other,
    };
    let d = v.as_object()?;
    let server = get(d, "server_name", get(d, "server", empty_str())).clone();
    let tool = get(d, "tool_name", empty_str()).clone();
    let deps = d.get("dependencies").filter(|x| truthy(x)).cloned().unwrap_or(Value::Array(vec![]));
    Some(GtTool { server, tool, deps })
}

/// `_format_simple_ground_truth` (L1, L2) and `_format_graph_ground_truth` (L3 without, L4 with EFS).
fn format_gt(gt: &EtomGt, lists_as_groups: bool) -> Vec<Vec<&GtTool>> {
    let mut out = Vec::with_capacity(gt.entries.len());
    for e in &gt.entries {
        match e {
            GtEntry::List(opts) if lists_as_groups => {
                if !opts.is_empty() {
                    out.push(opts.iter().collect());
                }
            }
            // A list is not a dict: it normalises to nothing.
            GtEntry::List(_) => {}
            GtEntry::One(t, _) => {
                if let Some(t) = t {
                    out.push(vec![t]);
                }
            }
        }
    }
    out
}

/// A dependency id as Python would hash it: ints (and bools) can equal a node id.
fn dep_ids(deps: &Value) -> Py<Vec<Option<i64>>> {
    match deps {
        Value::Array(a) => a
            .iter()
            .map(|d| match d {
                Value::Number(n) => {
                    Ok(n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)))
                }
                Value::Bool(b) => Ok(Some(i64::from(*b))),
                Value::Array(_) | Value::Object(_) => Err(format!("TypeError: unhashable type: '{}'", py_type(d))),
                _ => Ok(None),
            })
            .collect(),
        // Iterating a str gives characters, a dict its keys: never equal to a node id.
        Value::String(s) => Ok(s.chars().map(|_| None).collect()),
        Value::Object(o) => Ok(o.keys().map(|_| None).collect()),
        Value::Null => Ok(Vec::new()),
        other => Err(format!("TypeError: '{}' object is not iterable", py_type(other))),
    }
}

/// A GT graph node: its EFS `(server, tool)` pairs and the union of its dependency ids.
type Node<'a> = (Vec<(&'a Value, &'a Value)>, Vec<Option<i64>>);

/// Result of `GraphEvaluator.evaluate`.
struct Graph {
    em: bool,
    p: f64,
    r: f64,
    f1: f64,
    tp: u32,
    fp: u32,
    fn_: u32,
}

/// Each raw item run through `json.loads` once (`None`: not a str; `Err`: JSONDecodeError),
/// shared by the evaluator and `_extract_predicted_tools_info`, which both parse every item.
type Parsed = Vec<Option<Result<Loaded, ()>>>;

fn parse_items(raw: &[Value]) -> Parsed {
    raw.iter().map(|v| v.as_str().map(load_item)).collect()
}

/// A prediction item after `json.loads`, as far as the strategies read it: of a dict only
/// the keys they `.get`, read straight from the text (the last of a repeated key wins).
#[derive(Debug)]
enum Loaded {
    Dict(PyDict),
    /// Any other JSON value (the strategies call `.get` on it: AttributeError).
    Other(Value),
}

#[derive(Debug, Default)]
struct PyDict {
    server: Option<Value>,
    server_name: Option<Value>,
    tool_name: Option<Value>,
}

impl PyDict {
    /// `d.get(k, "")` for the three keys.
    fn get(v: &Option<Value>) -> &Value {
        v.as_ref().unwrap_or_else(|| empty_str())
    }
}

/// `json.loads(s)` of an item: the JSON text, or with Python's extra tokens (NaN, …).
fn load_item(s: &str) -> Result<Loaded, ()> {
    fn parse(s: &str) -> Result<Loaded, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(s);
        let out = serde::Deserializer::deserialize_any(&mut de, LoadV)?;
        de.end()?;
        Ok(out)
    }
    parse(s)
        .or_else(|e| match crate::json::python_sanitise(s) {
            Some(clean) if !e.is_data() => parse(&clean),
            _ => Err(e),
        })
        .map_err(|_| ())
}

struct LoadV;

impl<'de> serde::de::Visitor<'de> for LoadV {
    type Value = Loaded;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Loaded, A::Error> {
        let mut d = PyDict::default();
        while let Some(crate::json::Key(k)) = map.next_key()? {
            let slot = match &*k {
                "server" => &mut d.server,
                "server_name" => &mut d.server_name,
                "tool_name" => &mut d.tool_name,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value()?);
        }
        Ok(Loaded::Dict(d))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Loaded, A::Error> {
        serde::Deserialize::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(Loaded::Other)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Loaded, E> {
        Ok(Loaded::Other(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Loaded, E> {
        Ok(Loaded::Other(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Loaded, E> {
        Ok(Loaded::Other(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Loaded, E> {
        Ok(Loaded::Other(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Loaded, E> {
        Ok(Loaded::Other(Value::String(v.to_string())))
    }
    fn visit_unit<E>(self) -> Result<Loaded, E> {
        Ok(Loaded::Other(Value::Null))
    }
}

fn graph_evaluate(gt: &[Vec<&GtTool>], raw: &[Value], parsed: &Parsed) -> Py<Graph> {
    if raw.is_empty() && gt.is_empty() {
        return Ok(Graph { em: true, p: 1.0, r: 1.0, f1: 1.0, tp: 0, fp: 0, fn_: 0 });
    }
    if raw.is_empty() {
        return Ok(Graph { em: false, p: 0.0, r: 0.0, f1: 0.0, tp: 0, fp: 0, fn_: gt.len() as u32 });
    }
    if gt.is_empty() {
        return Ok(Graph { em: false, p: 0.0, r: 1.0, f1: 0.0, tp: 0, fp: raw.len() as u32, fn_: 0 });
    }
    // parse_ground_truth: one node per step (keyed by position), EFS set and union of deps.
    let mut nodes: Vec<Node> = Vec::with_capacity(gt.len());
    for step in gt {
        let mut efs = Vec::new();
        let mut deps = Vec::new();
        for t in step {
            efs.push((&t.server, &t.tool));
            for d in dep_ids(&t.deps)? {
                if !deps.contains(&d) {
                    deps.push(d);
                }
            }
        }
        nodes.push((efs, deps));
    }
    // parse_prediction: JSONDecodeError skips the item; any other error propagates.
    let mut seq: Vec<(&Value, &Value)> = Vec::with_capacity(raw.len());
    for (item, pre) in raw.iter().zip(parsed) {
        let parsed = match pre {
            None => return Err(json_loads(item).err().unwrap_or_default()),
            Some(Err(())) => continue,
            Some(Ok(v)) => v,
        };
        let d = match parsed {
            Loaded::Dict(d) => d,
            Loaded::Other(v) => {
                return Err(format!("AttributeError: '{}' object has no attribute 'get'", py_type(v)));
            }
        };
        // `d.get('server_name', d.get('server', ''))`, `d.get('tool_name', '')`.
        let server = d.server_name.as_ref().unwrap_or_else(|| PyDict::get(&d.server));
        seq.push((server, PyDict::get(&d.tool_name)));
    }
    // find_tool_matches: greedy first unused node in step order.
    let mut used = vec![false; nodes.len()];
    let mut pos_of_node: Vec<Option<usize>> = vec![None; nodes.len()];
    let mut assign: Vec<Option<usize>> = vec![None; seq.len()];
    for (p, t) in seq.iter().enumerate() {
        for (n, (efs, _)) in nodes.iter().enumerate() {
            if used[n] {
                continue;
            }
            if !hashable(t.0) || !hashable(t.1) {
                return Err("TypeError: unhashable type in predicted tool".into());
            }
            if efs.contains(t) {
                assign[p] = Some(n);
                used[n] = true;
                pos_of_node[n] = Some(p);
                break;
            }
        }
    }
    let matched = used.iter().filter(|&&u| u).count();
    let r = matched as f64 / nodes.len() as f64;
    let mut placed = 0u32;
    for (p, a) in assign.iter().enumerate() {
        if let Some(n) = a {
            let ok = nodes[*n].1.iter().all(|d| match d {
                Some(d) if *d >= 0 && (*d as usize) < nodes.len() => {
                    matches!(pos_of_node[*d as usize], Some(q) if q < p)
                }
                _ => false,
            });
            placed += u32::from(ok);
        }
    }
    let p = if seq.is_empty() { 0.0 } else { f64::from(placed) / seq.len() as f64 };
    let f1 = super::f1(p, r);
    Ok(Graph {
        em: f1 == 1.0,
        p,
        r,
        f1,
        tp: placed,
        fp: seq.len() as u32 - placed,
        fn_: (nodes.len() - matched) as u32,
    })
}

/// A (server, tool_name) pair of `_extract_predicted_tools_info`, borrowed from the items.
type Info<'a> = (Cow<'a, Value>, Cow<'a, Value>);

/// `_extract_predicted_tools_info`: (server, tool_name) per raw item.
fn predicted_info<'a>(raw: &'a [Value], parsed: &'a Parsed) -> Py<Vec<Info<'a>>> {
    raw.iter()
        .zip(parsed)
        .map(|(item, pre)| match item {
            Value::String(_) => match pre {
                Some(Ok(Loaded::Dict(d))) => Ok(info_of_dict(d)),
                Some(Ok(Loaded::Other(other))) => {
                    Err(format!("AttributeError: '{}' object has no attribute 'get'", py_type(other)))
                }
                _ => Ok((Cow::Owned(Value::String("parse_error".into())), Cow::Borrowed(item))),
            },
            Value::Object(d) => Ok(info_of(d)),
            other => Ok((Cow::Owned(Value::String("unknown_format".into())), Cow::Owned(Value::String(py_str(other))))),
        })
        .collect()
}

fn info_of(d: &Map<String, Value>) -> Info<'_> {
    let server = or(get(d, "server", empty_str()), get(d, "server_name", empty_str()));
    (Cow::Borrowed(server), Cow::Borrowed(get(d, "tool_name", empty_str())))
}

/// `d.get('server', '') or d.get('server_name', '')`, `d.get('tool_name', '')`.
fn info_of_dict(d: &PyDict) -> Info<'_> {
    let server = or(PyDict::get(&d.server), PyDict::get(&d.server_name));
    (Cow::Borrowed(server), Cow::Borrowed(PyDict::get(&d.tool_name)))
}

/// Python `str()` of a JSON value (close enough for labels).
pub fn py_str(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::String(s) => crate::json::py_float(s).map_or_else(|| s.clone(), str::to_string),
        other => other.to_string(),
    }
}

fn fm(g: &Graph) -> Option<(f64, f64, f64, u32, u32, u32)> {
    Some((g.p, g.r, g.f1, g.tp, g.fp, g.fn_))
}

/// Level1Strategy / Level2Strategy.
fn level12(level: u8, gt: &EtomGt, result: &Value) -> Eval {
    if !truthy(result) {
        // L2 builds `ground_truth_set` with `gt.get(...)` on every raw entry: lists crash.
        if level == 2 && gt.entries.iter().any(|e| !matches!(e, GtEntry::One(_, true))) {
            return Eval::processing_error("AttributeError: 'list' object has no attribute 'get'".into());
        }
        return Eval::new("empty_result_error", false, Some((0.0, 0.0, 0.0, 0, 0, 0)));
    }
    let raw: Cow<[Value]> = match result {
        Value::Array(a) => Cow::Borrowed(a),
        other => Cow::Owned(vec![other.clone()]),
    };
    let formatted = format_gt(gt, true);
    let parsed = parse_items(&raw);
    let g = match graph_evaluate(&formatted, &raw, &parsed) {
        Ok(g) => g,
        Err(e) => return Eval::processing_error(e),
    };
    let info = match predicted_info(&raw, &parsed) {
        Ok(i) => i,
        Err(e) => return Eval::processing_error(e),
    };
    let status = if raw.len() > 1 { "multi_tool_error" } else { "tool_call" };
    let mut e = Eval::new(status, g.em, fm(&g));
    if let Some((server, tool)) = info.first() {
        for t in formatted.iter().flatten() {
            e.tool_name_match |= **tool == t.tool;
            e.server_match |= **server == t.server;
        }
    }
    e
}

/// Level3Strategy (`efs` false) / Level4Strategy (`efs` true).
fn level34(efs: bool, gt: &EtomGt, result: &Value) -> Eval {
    let formatted = format_gt(gt, efs);
    let flat: Vec<&GtTool> = formatted.iter().flatten().copied().collect();
    let gt_empty = flat.is_empty();
    let graph_status = if efs { "tool_chain_efs" } else { "tool_graph" };
    let Value::Array(items) = result else {
        let mut e = Eval::new(if gt_empty { "conversational" } else { "error" }, gt_empty, None);
        e.note = Some("Predicted result was not a valid tool plan list.".into());
        return e;
    };
    if items.is_empty() {
        if gt_empty {
            return Eval::new("conversational", true, None);
        }
        // Status tool_graph without `f1_metrics`: left out of the F1 average.
        let mut e = Eval::new("tool_graph", false, None);
        e.node_set_match = Some(false);
        return e;
    }
    // _ensure_json_strings: non-strings are dumped and parsed back by the evaluator.
    let raw: Cow<[Value]> = if items.iter().all(Value::is_string) {
        Cow::Borrowed(items)
    } else {
        Cow::Owned(items.iter().map(|i| if i.is_string() { i.clone() } else { Value::String(i.to_string()) }).collect())
    };
    let parsed = parse_items(&raw);
    let g = match graph_evaluate(&formatted, &raw, &parsed) {
        Ok(g) => g,
        Err(e) => {
            let mut ev = Eval::new("error", false, None);
            ev.note = Some(e);
            return ev;
        }
    };
    let info = match predicted_info(&raw, &parsed) {
        Ok(i) => i,
        Err(e) => return Eval::processing_error(e),
    };
    // Only entries passing the truthiness filter are hashed into the set.
    if info.iter().any(|(s, t)| truthy(s) && truthy(t) && (!hashable(s) || !hashable(t))) {
        return Eval::processing_error("TypeError: unhashable type in predicted tool".into());
    }
    let mut pred_nodes: Vec<(&Value, &Value)> = Vec::with_capacity(info.len());
    for (s, t) in &info {
        let k = (&**s, &**t);
        if truthy(k.0) && truthy(k.1) && !pred_nodes.contains(&k) {
            pred_nodes.push(k);
        }
    }
    let mut gt_nodes: Vec<(&Value, &Value)> = Vec::with_capacity(flat.len());
    for t in &flat {
        let k = (&t.server, &t.tool);
        if truthy(k.0) && truthy(k.1) && !gt_nodes.contains(&k) {
            gt_nodes.push(k);
        }
    }
    let node_set = pred_nodes.len() == gt_nodes.len() && pred_nodes.iter().all(|n| gt_nodes.contains(n));
    let parallel = flat.iter().all(|t| !truthy(&t.deps));
    let pam = parallel && node_set;
    let mut e = Eval::new(graph_status, g.em || pam, fm(&g));
    e.node_set_match = Some(node_set);
    e.parallel_aware_match = Some(pam);
    e
}

/// Level5Strategy.
fn level5(result: &Value) -> Eval {
    let correct = |n: u32| {
        let mut e = Eval::new("correct_no_tools", true, Some((1.0, 1.0, 1.0, n, 0, 0)));
        e.tool_name_match = true;
        e.server_match = true;
        e
    };
    match result {
        Value::Array(items) => {
            if items.is_empty() {
                return correct(0);
            }
            if let [Value::String(s)] = items.as_slice()
                && s.trim().to_lowercase() == "no"
            {
                return correct(1);
            }
            let (mut no, mut actual) = (0u32, 0u32);
            for it in items {
                match says_no(it) {
                    Ok(true) => no += 1,
                    Ok(false) => actual += 1,
                    Err(e) => return Eval::processing_error(e),
                }
            }
            let p = f64::from(no) / items.len() as f64;
            let r = if actual == 0 { 1.0 } else { 0.0 };
            let f = super::f1(p, r);
            let em = actual == 0;
            let mut e = Eval::new(
                if em { "correct_no_tools" } else { "incorrect_tools_predicted" },
                em,
                Some((p, r, f, no, actual, 0)),
            );
            e.tool_name_match = em;
            e.server_match = em;
            e
        }
        other => match single_tool(other) {
            Ok((tool, server)) => {
                let ok = tool == "no" && server == "no";
                let v = if ok { 1.0 } else { 0.0 };
                let mut e = Eval::new(
                    if ok { "correct_no_tools" } else { "incorrect_tools_predicted" },
                    ok,
                    Some((v, v, v, u32::from(ok), u32::from(!ok), 0)),
                );
                e.tool_name_match = tool == "no";
                e.server_match = server == "no";
                e
            }
            Err(msg) => {
                // Caught inside the strategy: status `error`, zero metrics.
                let mut e = Eval::new("error", false, Some((0.0, 0.0, 0.0, 0, 0, 0)));
                e.note = Some(msg);
                e
            }
        },
    }
}

/// Whether one item of a level-5 prediction list is the "no tool" answer (server and tool
/// both `no`, read as the evaluator reads them), or the error that stops its evaluation.
fn says_no(it: &Value) -> Py<bool> {
    match it {
        Value::String(s) => match load_item(s) {
            Ok(Loaded::Dict(d)) => {
                // Only the key `server` is read for JSON strings.
                let server = lower(PyDict::get(&d.server))?;
                let tool = lower(PyDict::get(&d.tool_name))?;
                Ok(server == "no" && tool == "no")
            }
            Ok(Loaded::Other(other)) => {
                Err(format!("AttributeError: '{}' object has no attribute 'get'", py_type(&other)))
            }
            Err(_) => Ok(false),
        },
        Value::Object(d) => {
            let server = lower(or(get(d, "server", empty_str()), get(d, "server_name", empty_str())))?;
            let tool = lower(get(d, "tool_name", empty_str()))?;
            Ok(server == "no" && tool == "no")
        }
        _ => Ok(false),
    }
}

/// A level-5 prediction that is not a list, read as one tool: its `(tool, server)`,
/// lower-cased, or the error the strategy catches.
fn single_tool(other: &Value) -> Py<(String, String)> {
    let parsed;
    let d = match other {
        Value::Object(d) => d,
        Value::String(s) => {
            parsed = crate::json::python_loads(s).map_err(|e| format!("JSONDecodeError: {e}"))?;
            parsed
                .as_object()
                .ok_or_else(|| format!("AttributeError: '{}' object has no attribute 'get'", py_type(&parsed)))?
        }
        v => return Err(format!("TypeError: the JSON object must be str, not {}", py_type(v))),
    };
    let tool = lower(get(d, "tool_name", empty_str()))?;
    let server = lower(or(get(d, "server", empty_str()), get(d, "server_name", empty_str())))?;
    Ok((tool, server))
}

/// Evaluate one query as the published strategy for `level` does.
pub fn evaluate(level: u8, gt: &EtomGt, result: &Value) -> Eval {
    match level {
        1 | 2 => level12(level, gt, result),
        3 => level34(false, gt, result),
        4 => level34(true, gt, result),
        _ => level5(result),
    }
}

/// Our normalised prediction as an orchestrator would return it: a list of JSON strings.
pub fn to_orchestrator(norm: &NormPred) -> Value {
    if norm.refusal {
        return Value::Array(vec![]);
    }
    let items = norm
        .turns
        .iter()
        .flatten()
        .map(|c| {
            let (server, tool) = match crate::model::split_tool_id(&c.tool) {
                Some((s, t)) => (s, t),
                None => ("", c.tool.as_str()),
            };
            // Python json.dumps separators, as the orchestrators produce.
            Value::String(format!(
                "{{\"server\": {}, \"tool_name\": {}}}",
                Value::String(server.into()),
                Value::String(tool.into())
            ))
        })
        .collect();
    Value::Array(items)
}

/// A unified ETOM sample in the published `ground_truth_tools` shape: L1 and L3 flat, L2 and
/// L4 one list of alternatives per step.
pub fn gt_from_item(item: &Item) -> EtomGt {
    let flat = matches!(item.kind, Kind::L1 | Kind::L3);
    let tool = |id: &str, deps: &[usize]| {
        let (server, tool) = crate::model::split_tool_id(id).unwrap_or(("", id));
        let deps: Value = deps.iter().map(|&d| Value::from(d)).collect();
        // `dependencies or []`: an empty list stays an empty list.
        GtTool { server: Value::String(server.into()), tool: Value::String(tool.into()), deps }
    };
    let entries = item
        .turns
        .iter()
        .flatten()
        .map(|c| {
            if flat {
                GtEntry::One(Some(tool(c.alts.first().map(|a| &**a).unwrap_or(""), &c.deps)), true)
            } else {
                GtEntry::List(c.alts.iter().map(|a| tool(a, &c.deps)).collect())
            }
        })
        .collect();
    EtomGt { entries }
}

pub fn score(item: &Item, pred: Option<&Pred>) -> SampleResult {
    let level = item.kind.level().unwrap_or(5);
    let mut res = SampleResult::new(item, Status::Wrong);
    let derived;
    let gt = match &item.raw {
        Some(Raw::Etom(v)) => v,
        _ => {
            derived = gt_from_item(item);
            &derived
        }
    };
    let result: Option<Cow<Value>> = match pred {
        None => {
            res.status = Status::Missing;
            res.reasons.push("no prediction; scored as the runner scores a failed query (processing_error)".into());
            None
        }
        Some(Pred::Malformed(why)) => {
            res.status = Status::Malformed;
            res.reasons.push(format!("malformed prediction ({why}); scored as processing_error"));
            None
        }
        Some(Pred::Ok { raw: RawPred::Etom(v), .. }) => Some(Cow::Borrowed(v)),
        Some(Pred::Ok { norm, .. }) => Some(Cow::Owned(to_orchestrator(norm))),
    };
    let ev = match &result {
        Some(r) => evaluate(level, gt, r),
        None => Eval::processing_error("no orchestrator result".into()),
    };
    res.em = ev.em;
    res.calls =
        ev.f1.map(|(p, r, f1, tp, fp, fn_)| Prf { p, r, f1, tp_p: tp, tp_r: tp, pred: tp + fp, gold: tp + fn_ });
    // L3/L4 average F1 only over answers with the graph status and `f1_metrics`.
    if matches!(item.kind, Kind::L3 | Kind::L4) && !matches!(ev.status, "tool_graph" | "tool_chain_efs") {
        res.calls = None;
    }
    if res.calls.is_none() && matches!(item.kind, Kind::L3 | Kind::L4) {
        res.reasons.push(format!("status `{}`: left out of the F1 average (published L3/L4 aggregation)", ev.status));
    }
    res.node_set_em = ev.node_set_match;
    if matches!(item.kind, Kind::L1 | Kind::L2) {
        res.compat_flags.push(("tool_name_match", ev.tool_name_match));
        res.compat_flags.push(("server_match", ev.server_match));
    }
    if let Some(p) = ev.parallel_aware_match {
        res.compat_flags.push(("parallel_aware_match", p));
    }
    if let Some(n) = ev.note {
        res.reasons.push(format!("evaluator: {n}"));
    }
    res.compat_status = Some(ev.status.to_string());
    if res.status == Status::Wrong && res.em {
        res.status = Status::Correct;
    }
    res
}
