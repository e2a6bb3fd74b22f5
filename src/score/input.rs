//! Input formats and their auto-detection.
//!
//! Benchmarks (`--bench`, several allowed):
//! - unified JSONL (one [`crate::model::Sample`] per line);
//! - ETOM `level_N.json` (a JSON array of `{query_id, query, ground_truth_tools, …}`); sample
//!   ids become `L<level>-<query_id>`; the level comes from the file name or `--etom-level`;
//! - FinMCP sample JSON (a JSON array of `{id, scenery, diff_level, messages, task, …}`).
//!
//! Predictions (`--pred`, JSONL, or a JSON array for FinMCP inference output):
//! - ours: `{id, turns: [{calls: [{tool: "server::tool" | {server, tool}, group?, arguments?}]}]}`
//!   or `{id, refusal: true}`;
//! - ETOM orchestrator style: `{id, prediction: <list of JSON strings/objects, a string, …>}`;
//! - FinMCP inference records: `{id, messages_pred: [...], error?}` (other fields ignored).
//!
//! The format of each prediction record is detected from its keys unless `--format` is given.
//! Unreadable lines become [`Diagnostic`]s and the run goes on.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{GoldCall, Item, Mode, NormPred, Options, Pred, PredCall, Raw, RawPred};
use crate::error::{InputError, Problem};
use crate::model::{Difficulty, Family, Kind, TOOL_ID_SEP};

/// Benchmark file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BenchFormat {
    /// Our unified sample JSONL.
    Unified,
    /// ETOM `level_N.json`.
    Etom,
    /// FinMCP sample JSON.
    Finmcp,
}

/// Prediction record formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PredFormat {
    /// `{id, turns: [{calls: [...]}]}` or `{id, refusal: true}`.
    Unified,
    /// `{id, prediction: ...}` as an ETOM orchestrator returns it.
    Etom,
    /// `{id, messages_pred: [...]}` FinMCP inference output.
    Finmcp,
}

/// A problem with one input record that did not stop the run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Diagnostic {
    pub file: String,
    /// `line 12` (JSONL) or `record 3` (JSON array), or empty.
    pub location: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub message: String,
}

impl Diagnostic {
    /// A diagnostic whose file is filled in by the reader.
    pub fn line(location: &str, id: Option<&str>, message: impl Into<String>) -> Self {
        Diagnostic {
            file: String::new(),
            location: location.to_string(),
            id: id.map(str::to_string),
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchFile {
    pub path: String,
    pub format: BenchFormat,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<u8>,
    pub samples: usize,
}

/// Every tool key and scenario name, stored once.
pub type Interner = HashSet<Arc<str>, foldhash::fast::RandomState>;

fn intern(pool: &mut Interner, s: &str) -> Arc<str> {
    if let Some(a) = pool.get(s) {
        return a.clone();
    }
    let a: Arc<str> = Arc::from(s);
    pool.insert(a.clone());
    a
}

/// The loaded benchmark.
#[derive(Debug, Default)]
pub struct Bench {
    /// Comparison keys of every reference tool (the "known tools").
    pub tools: Interner,
    pub files: Vec<BenchFile>,
    pub items: Vec<Item>,
    /// Duplicate ids and other non-fatal notes about benchmark records.
    pub diagnostics: Vec<Diagnostic>,
    /// Later occurrences of a duplicated id: `(first index, later index)`.
    pub duplicates: Vec<(usize, usize)>,
}

/// What was read from the predictions file.
#[derive(Debug, Clone, Serialize)]
pub struct PredStats {
    pub path: String,
    pub records: usize,
    pub formats: Vec<(PredFormat, usize)>,
    #[serde(skip)]
    pub diagnostics: Vec<Diagnostic>,
}

// ---------------------------------------------------------------------------
// Tool ids

/// Split a tool id at the first `::` (a byte scan: this runs for every call read).
pub fn split_id(s: &str) -> Option<(&str, &str)> {
    let b = s.as_bytes();
    let i = b.windows(2).position(|w| w == b"::")?;
    Some((&s[..i], &s[i + 2..]))
}

/// [`norm_tool_id`] without allocating when the id is already normal (the usual case).
pub fn norm_tool_id_cow(s: &str) -> Cow<'_, str> {
    let clean = |p: &str| p.trim().len() == p.len();
    let normal = match split_id(s) {
        Some((a, b)) => clean(a) && clean(b),
        None => clean(s),
    };
    if normal { Cow::Borrowed(s) } else { Cow::Owned(norm_tool_id(s)) }
}

/// `server::tool` with both parts trimmed; a bare name is trimmed.
pub fn norm_tool_id(s: &str) -> String {
    match split_id(s) {
        Some((a, b)) => crate::model::tool_id(a, b),
        None => s.trim().to_string(),
    }
}

/// The comparison key of a tool id for a family: ETOM compares full ids; FinMCP logs name
/// tools without their server, so FinMCP compares the tool part only.
pub fn key_for(family: Family, tool: &str) -> &str {
    match family {
        Family::Etom => tool,
        Family::Finmcp => match split_id(tool) {
            Some((_, t)) => t,
            None => tool,
        },
    }
}

// ---------------------------------------------------------------------------
// Benchmarks

pub fn load_benches(opts: &Options) -> anyhow::Result<Bench> {
    let keep_raw = opts.mode != Mode::Corrected;
    let mut bench = Bench::default();
    let mut names = Interner::default();
    for path in &opts.benches {
        let file_idx = bench.files.len();
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).with_context(|| format!("cannot read benchmark `{shown}`"))?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        // JSONL is streamed; a JSON list (ETOM, FinMCP) is read whole.
        let first = reader.fill_buf()?.iter().copied().find(|b| !b.is_ascii_whitespace());
        let streamed = match opts.bench_format {
            Some(f) => f == BenchFormat::Unified,
            None => first != Some(b'['),
        };
        let mut text = String::new();
        if !streamed {
            reader.read_to_string(&mut text).with_context(|| format!("cannot read benchmark `{shown}`"))?;
        }
        let format = match opts.bench_format {
            Some(f) => f,
            None if streamed => BenchFormat::Unified,
            None => detect_bench(path, &text)?,
        };
        let mut pools = Pools { tools: &mut bench.tools, names: &mut names };
        let (items, level) = match format {
            BenchFormat::Unified => (load_unified(&shown, reader, file_idx, &mut pools)?, None),
            BenchFormat::Etom => {
                let level = etom_level(path, opts.etom_level)?;
                (load_etom(&shown, &text, level, file_idx, keep_raw, &mut pools)?, Some(level))
            }
            BenchFormat::Finmcp => (load_finmcp(&shown, &text, file_idx, keep_raw, &mut pools)?, None),
        };
        bench.files.push(BenchFile { path: shown, format, level, samples: items.len() });
        bench.items.extend(items);
    }
    let mut first: HashMap<&str, usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(bench.items.len(), Default::default());
    let mut dups = Vec::new();
    for (i, it) in bench.items.iter().enumerate() {
        match first.get(it.id.as_str()) {
            Some(&j) => dups.push((j, i)),
            None => {
                first.insert(it.id.as_str(), i);
            }
        }
    }
    drop(first);
    for &(j, i) in &dups {
        let (a, b) = (&bench.items[j], &bench.items[i]);
        let same = a.turns == b.turns;
        bench.diagnostics.push(Diagnostic {
            file: bench.files[b.file].path.clone(),
            location: format!("record {}", b.record),
            id: Some(b.id.clone()),
            message: format!(
                "duplicate sample id (first at {} record {}{}); the corrected mode scores it once, the compat modes score every entry as the published evaluators do",
                bench.files[a.file].path,
                a.record,
                if same { ", identical reference" } else { ", DIFFERENT reference" }
            ),
        });
    }
    bench.duplicates = dups;
    Ok(bench)
}

/// The interners a loader fills.
struct Pools<'a> {
    tools: &'a mut Interner,
    names: &'a mut Interner,
}

/// A JSON list: look at the first element's keys.
fn detect_bench(path: &Path, text: &str) -> anyhow::Result<BenchFormat> {
    let v: Value = serde_json::from_str(text).map_err(|e| InputError {
        file: path.display().to_string(),
        problems: vec![Problem::new(format!("line {}", e.line()), format!("not valid JSON: {e}"))],
    })?;
    let first = v.as_array().and_then(|a| a.first()).and_then(Value::as_object);
    match first {
        Some(o) if o.contains_key("ground_truth_tools") || o.contains_key("query_id") => Ok(BenchFormat::Etom),
        Some(o) if o.contains_key("messages") && (o.contains_key("scenery") || o.contains_key("diff_level")) => {
            Ok(BenchFormat::Finmcp)
        }
        _ => Err(crate::error::hinted(
            format!("cannot tell the format of benchmark `{}`", path.display()),
            "pass `--bench-format unified|etom|finmcp`",
        )),
    }
}

fn etom_level(path: &Path, given: Option<u8>) -> anyhow::Result<u8> {
    if let Some(l) = given {
        return Ok(l);
    }
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let re = regex::Regex::new(r"level_?([1-5])").expect("static regex");
    match re.captures(&name) {
        Some(c) => Ok(c[1].parse().expect("digit")),
        None => Err(crate::error::hinted(
            format!("cannot tell the ETOM level of `{}`", path.display()),
            "name the file `level_N.json` (N = 1…5) or pass `--etom-level N`",
        )),
    }
}

fn category_and_scenario<S: AsRef<str>>(scenario: &[S], names: &mut Interner) -> (Arc<str>, Arc<str>) {
    let s: Vec<&str> = scenario.iter().map(|s| s.as_ref().trim()).filter(|s| !s.is_empty()).collect();
    match s.as_slice() {
        [] => (intern(names, "(none)"), intern(names, "(none)")),
        [a] => (intern(names, a), intern(names, a)),
        [a, b, ..] => {
            // Interned: one shared copy of the joined name for all its samples.
            let mut joined = String::with_capacity(a.len() + b.len() + 3);
            joined.push_str(a);
            joined.push_str(" / ");
            joined.push_str(b);
            (intern(names, a), intern(names, &joined))
        }
    }
}

/// Validate dependencies of one turn's plan; invalid ones are dropped and reported.
fn check_deps(calls: &mut [GoldCall], turn: usize, defects: &mut Vec<String>) {
    if calls.iter().all(|c| c.deps.is_empty()) {
        return; // the common case: nothing to check
    }
    let n = calls.len();
    for (i, c) in calls.iter_mut().enumerate() {
        let mut kept = Vec::with_capacity(c.deps.len());
        for &d in &c.deps {
            if d >= n {
                defects.push(format!(
                    "turn {turn} call {i} depends on call {d}, which does not exist; dependency ignored"
                ));
            } else if d == i {
                defects.push(format!("turn {turn} call {i} depends on itself; dependency ignored"));
            } else {
                if d > i {
                    defects.push(format!(
                        "turn {turn} call {i} depends on later-listed call {d} (forward reference); scored by the dependency, not the listing order"
                    ));
                }
                if !kept.contains(&d) {
                    kept.push(d);
                }
            }
        }
        c.deps = kept;
    }
    // Cycles make a plan unsatisfiable: report and drop the dependencies of the calls involved.
    let mut indeg: Vec<usize> = calls.iter().map(|c| c.deps.len()).collect();
    let mut done = vec![false; n];
    let mut progress = true;
    while progress {
        progress = false;
        for i in 0..n {
            if !done[i] && indeg[i] == 0 {
                done[i] = true;
                progress = true;
                for (j, c) in calls.iter().enumerate() {
                    if c.deps.contains(&i) {
                        indeg[j] -= 1;
                    }
                }
            }
        }
    }
    let cyclic: Vec<usize> = (0..n).filter(|&i| !done[i]).collect();
    if !cyclic.is_empty() {
        defects.push(format!("turn {turn}: dependency cycle among calls {cyclic:?}; their dependencies ignored"));
        for i in cyclic {
            calls[i].deps.clear();
        }
    }
}

/// Group = depth in the dependency graph (calls with no dependency share step 0).
fn depth_groups(calls: &mut [GoldCall]) {
    let n = calls.len();
    let mut depth = vec![0u32; n];
    // Dependencies are acyclic after `check_deps`; n rounds of relaxation reach the fixpoint.
    for _ in 0..n {
        let mut changed = false;
        for i in 0..n {
            let d = calls[i].deps.iter().map(|&j| depth[j] + 1).max().unwrap_or(0);
            if d != depth[i] {
                depth[i] = d;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for (c, d) in calls.iter_mut().zip(depth) {
        c.group = d;
    }
}

/// A unified sample borrowed from its line: the same fields and checks as
/// [`crate::model::Sample`], without copying texts the scorer does not need.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SampleIn<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    family: Family,
    kind: Kind,
    #[serde(default, borrow)]
    scenario: Vec<Cow<'a, str>>,
    #[serde(borrow)]
    turns: Vec<TurnIn<'a>>,
    #[serde(default)]
    #[allow(dead_code)] // validated, not needed for scoring
    out_of_scope: bool,
    difficulty: Difficulty,
    #[serde(default, borrow)]
    #[allow(dead_code)]
    provenance_id: Cow<'a, str>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnIn<'a> {
    #[serde(borrow)]
    #[allow(dead_code)]
    user: Cow<'a, str>,
    #[serde(borrow)]
    reference_plan: Vec<PlanCallIn<'a>>,
    #[serde(default, borrow)]
    #[allow(dead_code)]
    gold_reply: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanCallIn<'a> {
    #[serde(borrow)]
    alternatives: Vec<Cow<'a, str>>,
    group: u32,
    #[serde(default)]
    depends_on: Vec<usize>,
}

impl SampleIn<'_> {
    fn reference_calls(&self) -> usize {
        self.turns.iter().map(|t| t.reference_plan.len()).sum()
    }
}

fn load_unified(file: &str, mut reader: impl BufRead, file_idx: usize, pools: &mut Pools) -> anyhow::Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut problems = Vec::new();
    let mut line = String::new();
    let mut ln = 0usize;
    loop {
        line.clear();
        if reader.read_line(&mut line).with_context(|| format!("cannot read benchmark `{file}`"))? == 0 {
            break;
        }
        ln += 1;
        let ln = ln - 1;
        if line.trim().is_empty() {
            continue;
        }
        let loc = format!("line {}", ln + 1);
        let s: SampleIn = match serde_json::from_str(&line) {
            Ok(s) => s,
            Err(e) => {
                problems.push(Problem::new(&loc, format!("not a unified sample: {e}")));
                continue;
            }
        };
        if s.kind.family() != s.family {
            problems.push(Problem::new(
                format!("{loc} ({})", s.id),
                format!("kind {} does not belong to family {:?}", s.kind.as_str(), s.family),
            ));
            continue;
        }
        let mut defects = Vec::new();
        let mut turns = Vec::with_capacity(s.turns.len());
        for (t, turn) in s.turns.iter().enumerate() {
            let mut calls: Vec<GoldCall> = Vec::with_capacity(turn.reference_plan.len());
            for (i, c) in turn.reference_plan.iter().enumerate() {
                let alts: Vec<Arc<str>> = c
                    .alternatives
                    .iter()
                    .map(|a| norm_tool_id_cow(a))
                    .filter(|a| !key_for(s.family, a).is_empty())
                    .map(|a| intern(pools.tools, key_for(s.family, &a)))
                    .collect();
                if alts.is_empty() {
                    problems.push(Problem::new(
                        format!("{loc} ({}).turns[{t}].reference_plan[{i}]", s.id),
                        "a reference call needs at least one alternative",
                    ));
                }
                calls.push(GoldCall { alts, group: c.group, deps: c.depends_on.clone() });
            }
            check_deps(&mut calls, t, &mut defects);
            turns.push(calls);
        }
        let computed = Difficulty::from_calls(s.reference_calls());
        if computed != s.difficulty {
            defects.push(format!(
                "difficulty says {} but {} reference calls make it {}; reports use {}",
                s.difficulty.as_str(),
                s.reference_calls(),
                computed.as_str(),
                computed.as_str()
            ));
        }
        if s.kind == Kind::L5 && s.reference_calls() > 0 {
            defects.push("an L5 (out-of-scope) sample has reference calls; scored as a rejection task".into());
        }
        let (category, scenario) = category_and_scenario(&s.scenario, pools.names);
        items.push(Item {
            id: s.id.into_owned(),
            family: s.family,
            kind: s.kind,
            difficulty: computed,
            given_difficulty: s.difficulty,
            category,
            scenario,
            turns,
            raw: None,
            defects,
            file: file_idx,
            record: ln + 1,
        });
    }
    if !problems.is_empty() {
        return Err(InputError { file: file.to_string(), problems }.into());
    }
    Ok(items)
}

fn value_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn id_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A benchmark file that must hold a JSON list of `what`; errors name the file
/// and the line (bad JSON) or the top level (not a list).
fn json_list(file: &str, text: &str, what: &str) -> anyhow::Result<Vec<Value>> {
    let v: Value = serde_json::from_str(text).map_err(|e| InputError {
        file: file.to_string(),
        problems: vec![Problem::new(format!("line {}", e.line()), format!("not valid JSON: {e}"))],
    })?;
    match v {
        Value::Array(records) => Ok(records),
        _ => Err(InputError {
            file: file.into(),
            problems: vec![Problem::new("top level", format!("expected a JSON list of {what}"))],
        }
        .into()),
    }
}

fn load_etom(
    file: &str,
    text: &str,
    level: u8,
    file_idx: usize,
    keep_raw: bool,
    pools: &mut Pools,
) -> anyhow::Result<Vec<Item>> {
    let records = json_list(file, text, "queries")?;
    let kind = Kind::from_level(level).expect("level 1..5");
    let mut items = Vec::with_capacity(records.len());
    let mut problems = Vec::new();
    for (r, rec) in records.into_iter().enumerate() {
        let loc = format!("record {}", r + 1);
        let Some(obj) = rec.as_object() else {
            problems.push(Problem::new(&loc, format!("expected an object, got {}", value_kind(&rec))));
            continue;
        };
        let Some(qid) = id_string(obj.get("query_id")) else {
            problems.push(Problem::new(&loc, "missing `query_id` (a number or string)"));
            continue;
        };
        let id = format!("L{level}-{qid}");
        let gt = obj.get("ground_truth_tools").cloned().unwrap_or(Value::Array(vec![]));
        let Some(entries) = gt.as_array() else {
            problems.push(Problem::new(format!("{loc} ({id}).ground_truth_tools"), "expected a list"));
            continue;
        };
        let mut defects = Vec::new();
        // Each entry: a tool object, or a list of alternative tool objects.
        let mut steps: Vec<(Vec<Arc<str>>, Vec<usize>)> = Vec::new();
        for (e, entry) in entries.iter().enumerate() {
            let members: Vec<&Value> = match entry {
                Value::Array(a) => a.iter().collect(),
                other => vec![other],
            };
            let mut alts = Vec::new();
            let mut deps: Vec<usize> = Vec::new();
            let mut first_deps: Option<Vec<usize>> = None;
            for (m, member) in members.iter().enumerate() {
                let Some(t) = member.as_object() else {
                    defects
                        .push(format!("ground_truth_tools[{e}][{m}] is {}, not a tool; ignored", value_kind(member)));
                    continue;
                };
                let server = t.get("server_name").or_else(|| t.get("server")).and_then(Value::as_str).unwrap_or("");
                let Some(tool) = t.get("tool_name").and_then(Value::as_str) else {
                    defects.push(format!("ground_truth_tools[{e}][{m}] has no `tool_name`; ignored"));
                    continue;
                };
                let id_norm = crate::model::tool_id(server, tool);
                if let Some(given) = t.get("tool_id").and_then(Value::as_str)
                    && given != id_norm
                {
                    defects.push(format!(
                        "tool_id `{given}` differs from server_name::tool_name `{id_norm}`; matched as the latter"
                    ));
                }
                let mdeps: Vec<usize> = match t.get("dependencies") {
                    Some(Value::Array(a)) => a.iter().filter_map(|d| d.as_u64().map(|d| d as usize)).collect(),
                    _ => Vec::new(),
                };
                match &first_deps {
                    None => first_deps = Some(mdeps.clone()),
                    Some(f) if *f != mdeps => defects.push(format!(
                        "alternatives of step {e} disagree on dependencies ({f:?} vs {mdeps:?}); using their union"
                    )),
                    _ => {}
                }
                for d in mdeps {
                    if !deps.contains(&d) {
                        deps.push(d);
                    }
                }
                let id_norm = intern(pools.tools, &id_norm);
                if !alts.contains(&id_norm) {
                    alts.push(id_norm);
                }
            }
            if alts.is_empty() {
                defects.push(format!("ground_truth_tools[{e}] has no usable tool; step ignored"));
                continue;
            }
            steps.push((alts, deps));
        }
        let mut calls: Vec<GoldCall> = match kind {
            // L2: one call; any tool of any row is correct (the rows are one EFS, listed per member).
            Kind::L2 => {
                let mut union: Vec<Arc<str>> = Vec::new();
                for (alts, _) in &steps {
                    for a in alts {
                        if !union.contains(a) {
                            union.push(a.clone());
                        }
                    }
                }
                if union.is_empty() { vec![] } else { vec![GoldCall { alts: union, group: 0, deps: vec![] }] }
            }
            _ => steps.into_iter().map(|(alts, deps)| GoldCall { alts, group: 0, deps }).collect(),
        };
        if kind == Kind::L5 && !calls.is_empty() {
            defects.push("an L5 query lists ground-truth tools; scored as a rejection task".into());
        }
        if kind != Kind::L5 && calls.is_empty() {
            defects.push("no reference tools; every non-empty prediction is wrong".into());
        }
        if kind == Kind::L1 && calls.len() > 1 {
            defects.push(format!("an L1 query lists {} tools", calls.len()));
        }
        check_deps(&mut calls, 0, &mut defects);
        depth_groups(&mut calls);
        let n = calls.len();
        items.push(Item {
            id,
            family: Family::Etom,
            kind,
            difficulty: Difficulty::from_calls(n),
            given_difficulty: Difficulty::from_calls(n),
            category: intern(pools.names, "(none)"),
            scenario: intern(pools.names, "(none)"),
            turns: vec![calls],
            raw: keep_raw.then(|| Raw::Etom(gt.clone())),
            defects,
            file: file_idx,
            record: r + 1,
        });
    }
    if !problems.is_empty() {
        return Err(InputError { file: file.to_string(), problems }.into());
    }
    Ok(items)
}

/// The user text that ends a simulated FinMCP conversation (not a request).
pub const STOP: &str = "###STOP###";

/// One conversation turn cut out of OpenAI-style messages.
#[derive(Debug, Default)]
pub struct MsgTurn {
    pub user: String,
    /// One entry per assistant message with tool calls; each call's name, or why it is unreadable.
    pub groups: Vec<Vec<Result<String, String>>>,
}

/// Cut messages into turns at each user message; calls before the first user message go to
/// turn 0. `Err` when `messages` is not a list of objects.
pub fn split_turns(messages: &Value) -> Result<Vec<MsgTurn>, String> {
    let Some(list) = messages.as_array() else {
        return Err(format!("expected a list of messages, got {}", value_kind(messages)));
    };
    let mut turns: Vec<MsgTurn> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let Some(m) = m.as_object() else {
            return Err(format!("message {i} is {}, not an object", value_kind(m)));
        };
        if m.get("role").and_then(Value::as_str) == Some("user") {
            let user = m.get("content").and_then(Value::as_str).unwrap_or("").to_string();
            turns.push(MsgTurn { user, groups: Vec::new() });
            continue;
        }
        let calls = match m.get("tool_calls") {
            Some(Value::Array(a)) if !a.is_empty() => a,
            _ => continue,
        };
        if turns.is_empty() {
            turns.push(MsgTurn::default());
        }
        let group = calls
            .iter()
            .enumerate()
            .map(|(k, c)| match c.get("function").and_then(|f| f.get("name")) {
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
                Some(other) => Err(format!("message {i} tool call {k}: name is {}", value_kind(other))),
                None => Err(format!("message {i} tool call {k}: no function.name")),
            })
            .collect();
        turns.last_mut().expect("pushed above").groups.push(group);
    }
    Ok(turns)
}

fn load_finmcp(
    file: &str,
    text: &str,
    file_idx: usize,
    keep_raw: bool,
    pools: &mut Pools,
) -> anyhow::Result<Vec<Item>> {
    let records = json_list(file, text, "samples")?;
    let mut items = Vec::with_capacity(records.len());
    let mut problems = Vec::new();
    for (r, rec) in records.into_iter().enumerate() {
        let loc = format!("record {}", r + 1);
        let Some(obj) = rec.as_object() else {
            problems.push(Problem::new(&loc, format!("expected an object, got {}", value_kind(&rec))));
            continue;
        };
        let Some(id) = id_string(obj.get("id")) else {
            problems.push(Problem::new(&loc, "missing `id` (a number or string)"));
            continue;
        };
        let turns_msg = match obj.get("messages").map(split_turns) {
            Some(Ok(t)) => t,
            Some(Err(e)) => {
                problems.push(Problem::new(format!("{loc} ({id}).messages"), e));
                continue;
            }
            None => {
                problems.push(Problem::new(format!("{loc} ({id})"), "missing `messages` (the gold trajectory)"));
                continue;
            }
        };
        let mut defects = Vec::new();
        let mut turns: Vec<Vec<GoldCall>> = Vec::new();
        let last = turns_msg.len().saturating_sub(1);
        for (t, mt) in turns_msg.iter().enumerate() {
            if t == last && t > 0 && mt.user.trim() == STOP {
                if !mt.groups.is_empty() {
                    defects.push("tool calls after the final `###STOP###` user message; ignored".into());
                }
                continue;
            }
            let mut calls = Vec::new();
            for (g, group) in mt.groups.iter().enumerate() {
                for c in group {
                    match c {
                        Ok(name) => calls.push(GoldCall {
                            alts: vec![intern(pools.tools, name)],
                            group: g as u32,
                            deps: vec![],
                        }),
                        Err(e) => defects.push(format!("gold {e}; call ignored")),
                    }
                }
            }
            turns.push(calls);
        }
        let task = obj.get("task").and_then(Value::as_str).unwrap_or("");
        let n_calls: usize = turns.iter().map(Vec::len).sum();
        let kind = match task {
            "single step" => Kind::SingleTool,
            "multi step" => Kind::MultiTool,
            "multi turn" => Kind::MultiTurn,
            _ if turns.len() > 1 => Kind::MultiTurn,
            _ if n_calls <= 1 => Kind::SingleTool,
            _ => Kind::MultiTool,
        };
        let difficulty = Difficulty::from_calls(n_calls);
        let label = obj.get("diff_level").and_then(|d| d.get("level")).and_then(Value::as_str);
        let given_difficulty = match label {
            Some("easy") => Difficulty::Easy,
            Some("medium") => Difficulty::Medium,
            Some("hard") => Difficulty::Hard,
            _ => difficulty,
        };
        if let Some(level) = label
            && level != difficulty.as_str()
        {
            defects.push(format!(
                "diff_level.level `{level}` but {n_calls} reference calls make it {}; corrected reports use {}",
                difficulty.as_str(),
                difficulty.as_str()
            ));
        }
        // The Chinese main/sub class is present for every task; `scenery` is English for
        // multi-turn samples and Chinese otherwise, so it cannot group them together.
        let scenery: Vec<String> =
            obj.get("scenery").and_then(Value::as_str).unwrap_or("").split('-').map(|s| s.trim().to_string()).collect();
        let mut scenario: Vec<String> = Vec::new();
        match (obj.get("first-class").and_then(Value::as_str), obj.get("sub-class").and_then(Value::as_str)) {
            (Some(a), Some(b)) => {
                scenario.push(a.to_string());
                scenario.push(b.to_string());
                scenario.extend(scenery.iter().skip(2).cloned());
            }
            _ => scenario = scenery,
        }
        let (category, scenario) = category_and_scenario(&scenario, pools.names);
        let raw = keep_raw.then(|| {
            let mut m = Map::new();
            for k in ["scenery", "diff_level", "messages", "task"] {
                if let Some(v) = obj.get(k) {
                    m.insert(k.to_string(), v.clone());
                }
            }
            Raw::Finmcp(Value::Object(m))
        });
        items.push(Item {
            id,
            family: Family::Finmcp,
            kind,
            difficulty,
            given_difficulty,
            category,
            scenario,
            turns,
            raw,
            defects,
            file: file_idx,
            record: r + 1,
        });
    }
    if !problems.is_empty() {
        return Err(InputError { file: file.to_string(), problems }.into());
    }
    Ok(items)
}

// ---------------------------------------------------------------------------
// Predictions

/// Read every prediction record and hand it to `on_pred(id, location, pred, diagnostics)`.
pub fn read_predictions(
    opts: &Options,
    bench: &Bench,
    mut on_pred: impl FnMut(&str, &str, Pred, &mut Vec<Diagnostic>),
) -> anyhow::Result<PredStats> {
    let _ = bench;
    let path = &opts.pred;
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).with_context(|| format!("cannot read predictions `{shown}`"))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut diags: Vec<Diagnostic> = Vec::new();
    let mut formats: HashMap<PredFormat, usize> = HashMap::new();
    let mut records = 0usize;
    let mut bad_lines = 0usize;

    let mut handle = |loc: &str, v: Record, diags: &mut Vec<Diagnostic>| {
        records += 1;
        let v = match v {
            Record::Fast(id, norm) => {
                *formats.entry(PredFormat::Unified).or_default() += 1;
                on_pred(&id, loc, Pred::Ok { norm, raw: RawPred::Unified }, diags);
                return;
            }
            Record::Value(v) => v,
        };
        let Value::Object(obj) = v else {
            diags.push(Diagnostic::line(loc, None, format!("expected a JSON object, got {}", value_kind(&v))));
            return;
        };
        let Some(id) = id_string(obj.get("id")) else {
            let msg = match obj.get("id") {
                None => "no `id`; not scored".to_string(),
                Some(v) => format!("`id` is {}, expected a string or number; not scored", value_kind(v)),
            };
            diags.push(Diagnostic::line(loc, None, msg));
            return;
        };
        let format = opts.pred_format.or_else(|| detect_pred(&obj));
        let pred = match format {
            None => Pred::Malformed(
                "cannot tell the prediction format: expected `turns`/`refusal`, `prediction` or `messages_pred`".into(),
            ),
            Some(f) => {
                *formats.entry(f).or_default() += 1;
                match f {
                    PredFormat::Unified => parse_unified(&obj),
                    PredFormat::Etom => parse_etom(&obj),
                    PredFormat::Finmcp => parse_finmcp(&obj),
                }
            }
        };
        if let Pred::Malformed(why) = &pred {
            diags.push(Diagnostic::line(loc, Some(&id), format!("malformed prediction: {why}; scored as wrong")));
        }
        on_pred(&id, loc, pred, diags);
    };

    // Peek the first non-space byte: `[` means one JSON array, else JSONL.
    let first = {
        let buf = reader.fill_buf()?;
        buf.iter().copied().find(|b| !b.is_ascii_whitespace())
    };
    if first == Some(b'[') {
        let mut text = String::new();
        reader.read_to_string(&mut text).with_context(|| format!("cannot read predictions `{shown}`"))?;
        match serde_json::from_str::<Vec<Value>>(&text) {
            Ok(list) => {
                for (i, v) in list.into_iter().enumerate() {
                    handle(&format!("record {}", i + 1), Record::Value(v), &mut diags);
                }
            }
            Err(e) => diags.push(Diagnostic::line(
                &format!("line {}", e.line()),
                None,
                format!("the predictions file starts with `[` but is not a JSON list: {e}; nothing scored from it"),
            )),
        }
    } else {
        let mut line = String::new();
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
            let loc = format!("line {ln}");
            if matches!(opts.pred_format, None | Some(PredFormat::Unified))
                && let Some((id, norm)) = fast_unified(&line)
            {
                handle(&loc, Record::Fast(id, norm), &mut diags);
                continue;
            }
            match serde_json::from_str::<Value>(&line) {
                Ok(v) => handle(&loc, Record::Value(v), &mut diags),
                Err(e) => {
                    bad_lines += 1;
                    diags.push(Diagnostic::line(&loc, None, format!("not valid JSON: {e}; not scored")));
                }
            }
        }
    }
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

/// A prediction record, parsed generically or by the fast path.
enum Record {
    Value(Value),
    Fast(String, NormPred),
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
        other => Err(format!("{}; expected \"server::tool\" or {{server, tool}}", value_kind(other))),
    }
}

fn parse_unified(obj: &Map<String, Value>) -> Pred {
    let refusal = match obj.get("refusal") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Pred::Malformed(format!("`refusal` is {}, expected true or false", value_kind(v))),
    };
    let turns_v = match obj.get("turns") {
        None | Some(Value::Null) if refusal => {
            return Pred::Ok { norm: NormPred { refusal: true, ..Default::default() }, raw: RawPred::Unified };
        }
        None => return Pred::Malformed("no `turns` (and no `refusal: true`)".into()),
        Some(Value::Array(a)) => a,
        Some(v) => return Pred::Malformed(format!("`turns` is {}, expected a list", value_kind(v))),
    };
    let mut turns = Vec::with_capacity(turns_v.len());
    for (t, turn) in turns_v.iter().enumerate() {
        let calls_v = match turn.get("calls") {
            Some(Value::Array(a)) => a,
            Some(v) => return Pred::Malformed(format!("turns[{t}].calls is {}, expected a list", value_kind(v))),
            None if turn.is_object() => return Pred::Malformed(format!("turns[{t}] has no `calls`")),
            None => return Pred::Malformed(format!("turns[{t}] is {}, expected an object", value_kind(turn))),
        };
        let mut calls = Vec::with_capacity(calls_v.len());
        let mut with_group = 0;
        for (k, c) in calls_v.iter().enumerate() {
            let Some(co) = c.as_object() else {
                return Pred::Malformed(format!("turns[{t}].calls[{k}] is {}, expected an object", value_kind(c)));
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
                        value_kind(v)
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
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(inner @ Value::Object(_)) => etom_item(&inner),
            _ if is_no(s) => EtomItem::No,
            _ if s.contains(TOOL_ID_SEP) => EtomItem::Tool(norm_tool_id(s)),
            _ => EtomItem::Unreadable(format!("`{}` is not a tool selection", truncate(s, 60))),
        },
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
        other => EtomItem::Unreadable(format!("{} is not a tool selection", value_kind(other))),
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
        match etom_item(it) {
            EtomItem::Tool(t) => calls.push(PredCall { tool: t, group: k as i64 }),
            EtomItem::No => nos += 1,
            EtomItem::Unreadable(why) => {
                norm.notes.push(format!("item {k}: {why}; counted as a wrong call"));
                calls.push(PredCall { tool: String::new(), group: k as i64 });
            }
        }
    }
    if nos > 0 && calls.is_empty() {
        norm.refusal = true;
    } else if nos > 0 {
        norm.notes.push(format!("{nos} \"No\" item(s) next to tool calls ignored"));
    }
    norm.turns = vec![calls];
    norm
}

fn parse_etom(obj: &Map<String, Value>) -> Pred {
    let Some(p) = obj.get("prediction") else {
        return Pred::Malformed("no `prediction`".into());
    };
    Pred::Ok { norm: norm_etom(p), raw: RawPred::Etom(p.clone()) }
}

fn truthy(v: Option<&Value>) -> bool {
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
    let turns = split_turns(messages)?;
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

fn parse_finmcp(obj: &Map<String, Value>) -> Pred {
    let error = truthy(obj.get("error"));
    let messages = obj.get("messages_pred").cloned().unwrap_or(Value::Null);
    let norm = if error {
        let mut n = NormPred::default();
        n.notes.push("inference failed (record has `error`); scored as no tool calls".into());
        n
    } else {
        match norm_finmcp(&messages) {
            Ok(n) => n,
            Err(e) => return Pred::Malformed(format!("messages_pred: {e}")),
        }
    };
    Pred::Ok { norm, raw: RawPred::Finmcp { messages_pred: messages, error } }
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
