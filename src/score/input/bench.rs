//! Benchmark loading: unified JSONL (streamed), ETOM level files and FinMCP sample files
//! (read whole, through [`crate::formats`]), into score's [`Item`]s with every reference
//! defect noted.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Bench, BenchFile, BenchFormat, Diagnostic, Interner, MsgTurn, STOP, intern, key_for, split_turns, typed};
use crate::error::{InputError, Problem, json_type_name};
use crate::formats::finmcp;
use crate::model::{Difficulty, Family, Kind, norm_tool_id_cow};
use crate::score::compat_etom::{self, EtomGt, GtEntry};
use crate::score::{GoldCall, Item, Mode, Options, Raw};

pub fn load_benches(opts: &Options) -> anyhow::Result<Bench> {
    let keep_raw = opts.mode != Mode::Corrected;
    let mut bench = Bench::default();
    let mut names = Interner::default();
    // One buffer for every file read whole: its pages are reused from file to file.
    let mut text = String::new();
    for path in &opts.benches {
        let file_idx = bench.files.len();
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).with_context(|| format!("cannot read benchmark `{shown}`"))?;
        let size = file.metadata().map_or(0, |m| m.len() as usize);
        let mut reader = BufReader::with_capacity(1 << 20, file);
        // JSONL is streamed; a JSON list (ETOM, FinMCP) is read whole.
        let first = reader.fill_buf()?.iter().copied().find(|b| !b.is_ascii_whitespace());
        let streamed = match opts.bench_format {
            Some(f) => f == BenchFormat::Unified,
            None => first != Some(b'['),
        };
        text.clear();
        if !streamed {
            // Read whole into one buffer of the file's size, parsed in place (text borrowed).
            text.reserve(size);
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
            BenchFormat::Finmcp => {
                (load_finmcp(&shown, &text, file_idx, keep_raw, &mut pools, &mut bench.diagnostics)?, None)
            }
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
    // The first sample that is not an inference error record (those carry no reference).
    let is_sample = |r: &Value| !(super::pred::truthy(r.get("error")) && r.get("messages").is_none());
    let first = match peek_first(text, is_sample) {
        Some(first) => first,
        None => {
            // Lenient here (Python's reading); the loaders apply each mode's own rules after.
            let v: Value = crate::json::python_loads(text).map_err(|e| InputError {
                file: path.display().to_string(),
                problems: vec![Problem::new(format!("line {}", e.line()), format!("not valid JSON: {e}"))],
            })?;
            v.as_array().and_then(|a| a.iter().find(|r| is_sample(r)).cloned())
        }
    };
    match first.as_ref().and_then(Value::as_object) {
        Some(o) if o.contains_key("ground_truth_tools") || o.contains_key("query_id") => Ok(BenchFormat::Etom),
        Some(o) if o.contains_key("messages") && (o.contains_key("scenery") || o.contains_key("diff_level")) => {
            Ok(BenchFormat::Finmcp)
        }
        // An empty list has no record to look at: `level_N.json` says it is ETOM's (a level
        // with no queries left after filtering is still one of the five files).
        None if etom_level(path, None).is_ok() && is_empty_list(text) => Ok(BenchFormat::Etom),
        _ => Err(crate::error::hinted(
            format!("cannot tell the format of benchmark `{}`", path.display()),
            "pass `--bench-format unified|etom|finmcp`",
        )),
    }
}

/// Whether `text` is a JSON list without elements (`[]`, any white space).
fn is_empty_list(text: &str) -> bool {
    let t = text.trim();
    t.strip_prefix('[').and_then(|r| r.strip_suffix(']')).is_some_and(|inner| inner.trim().is_empty())
}

/// The first record of a JSON list for which `wanted` holds, read from the start of the text
/// only (`Some(None)`: the list has none). `None` when that cannot be told without reading the
/// whole text (not a list, bad JSON or Python-only tokens up to that record).
fn peek_first(text: &str, wanted: impl Fn(&Value) -> bool) -> Option<Option<Value>> {
    let b = text.as_bytes();
    let ws = |mut i: usize| {
        while b.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    let mut pos = ws(0);
    if b.get(pos) != Some(&b'[') {
        return None;
    }
    pos += 1;
    loop {
        pos = ws(pos);
        if b.get(pos) == Some(&b']') {
            return Some(None);
        }
        let mut records = serde_json::Deserializer::from_str(&text[pos..]).into_iter::<Value>();
        let v = records.next()?.ok()?;
        pos += records.byte_offset();
        if wanted(&v) {
            return Some(Some(v));
        }
        pos = ws(pos);
        match b.get(pos) {
            Some(b',') => pos += 1,
            Some(b']') => return Some(None),
            _ => return None,
        }
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
    #[serde(default, borrow)]
    #[allow(dead_code)]
    author: Option<Cow<'a, str>>,
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
    #[serde(default)]
    #[allow(dead_code)] // shown to reviewers, not scored
    trajectory: serde::de::IgnoredAny,
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
        // Our own format: duplicate keys are refused in every mode.
        let s: SampleIn =
            match crate::json::check_unique_keys(line.as_bytes()).and_then(|()| serde_json::from_str(&line)) {
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

/// A benchmark file that must hold a JSON list of `what`; errors name the file
/// and the line (bad JSON) or the top level (not a list).
fn json_list(file: &str, text: &str, what: &str, strict: bool) -> anyhow::Result<Vec<Value>> {
    // The corrected mode refuses duplicate keys; the compat modes read what the published
    // evaluators' `json.load` reads (the last value of a key wins).
    let parsed = if strict { crate::json::from_str(text) } else { crate::json::python_loads(text) };
    let v: Value = parsed.map_err(|e| InputError {
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
    // One typed pass over the bytes, each query made an item as soon as it is read. The
    // corrected mode refuses duplicate keys; the compat modes read what the published
    // evaluators' `json.load` reads (the last value of a key wins; `NaN`, `Infinity`, `1e400`
    // and lone surrogates are accepted).
    let strict = !keep_raw;
    let bad_json = |e: serde_json::Error| InputError {
        file: file.to_string(),
        problems: vec![Problem::new(format!("line {}", e.line()), format!("not valid JSON: {e}"))],
    };
    let ctx = EtomCtx { level, kind: Kind::from_level(level).expect("level 1..5"), file_idx, keep_raw };
    let (is_list, items, problems) = match read_level(text, strict, &ctx, pools) {
        Ok(r) => r,
        Err(e) if !strict && !e.is_data() => match crate::json::python_sanitise(text) {
            Some(clean) => read_level(&clean, strict, &ctx, pools).map_err(bad_json)?,
            None => return Err(bad_json(e).into()),
        },
        Err(e) => return Err(bad_json(e).into()),
    };
    if !is_list {
        return Err(InputError {
            file: file.into(),
            problems: vec![Problem::new("top level", "expected a JSON list of queries")],
        }
        .into());
    }
    if !problems.is_empty() {
        return Err(InputError { file: file.to_string(), problems }.into());
    }
    Ok(items)
}

/// What turning a level-file query into an item needs besides the query.
struct EtomCtx {
    level: u8,
    kind: Kind,
    file_idx: usize,
    keep_raw: bool,
}

/// Read a level file: whether it is a list, its items and the problems of its records.
fn read_level(
    text: &str,
    strict: bool,
    ctx: &EtomCtx,
    pools: &mut Pools,
) -> Result<(bool, Vec<Item>, Vec<Problem>), serde_json::Error> {
    let (mut items, mut problems) = (Vec::new(), Vec::new());
    let mut r = 0usize;
    let mut key = String::new();
    let is_list = typed::level_file(text, strict, &mut |rec| {
        r += 1;
        match etom_query(r, rec, ctx, pools, &mut key) {
            Ok(item) => items.push(item),
            Err(p) => problems.push(p),
        }
    })?;
    Ok((is_list, items, problems))
}

/// One query of a level file (1-based record `r`) as an item, or the problem of its record.
/// `key` is a scratch buffer for tool ids.
fn etom_query(
    r: usize,
    rec: typed::LevelRecord,
    ctx: &EtomCtx,
    pools: &mut Pools,
    key: &mut String,
) -> Result<Item, Problem> {
    let q = match rec {
        typed::LevelRecord::NotObject(t) => {
            return Err(Problem::new(format!("record {r}"), format!("expected an object, got {t}")));
        }
        typed::LevelRecord::Query(q) => q,
    };
    // Entries are read leniently: an unreadable one is a defect of this query, not a fatal error.
    let query_id = q.id().map_err(|(field, e)| {
        let at = if field.is_empty() { format!("record {r}") } else { format!("record {r}.{field}") };
        Problem::new(at, format!("not an ETOM query: {e}"))
    })?;
    let (level, kind) = (ctx.level, ctx.kind);
    let mut defects = Vec::new();
    // Each entry: a tool object, or a list of alternative tool objects.
    let mut steps: Vec<(Vec<Arc<str>>, Vec<usize>)> = Vec::with_capacity(q.entries.len());
    for (e, entry) in q.entries.iter().enumerate() {
        if let Some(step) = etom_step(e, entry, pools, key, &mut defects) {
            steps.push(step);
        }
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
    Ok(Item {
        id: format!("L{level}-{query_id}"),
        family: Family::Etom,
        kind,
        difficulty: Difficulty::from_calls(n),
        given_difficulty: Difficulty::from_calls(n),
        category: intern(pools.names, "(none)"),
        scenario: intern(pools.names, "(none)"),
        turns: vec![calls],
        raw: ctx.keep_raw.then(|| Raw::Etom(compat_gt(&q.entries))),
        defects,
        file: ctx.file_idx,
        record: r,
    })
}

/// One ground-truth entry (step `e`) as its alternative tool ids and the union of their
/// dependencies; `None` when no member is a usable tool. Unreadable members are defects.
fn etom_step(
    e: usize,
    entry: &typed::Entry,
    pools: &mut Pools,
    key: &mut String,
    defects: &mut Vec<String>,
) -> Option<(Vec<Arc<str>>, Vec<usize>)> {
    let members: &[typed::Member] = match entry {
        typed::Entry::List(a) => a,
        typed::Entry::One(m) => std::slice::from_ref(m),
    };
    let mut alts = Vec::with_capacity(members.len());
    let mut deps: Vec<usize> = Vec::new();
    let mut first_deps: Option<&[usize]> = None;
    for (m, member) in members.iter().enumerate() {
        let t = match readable_tool(member) {
            Ok(t) => t,
            Err(why) => {
                defects.push(format!("ground_truth_tools[{e}][{m}] {why}; ignored"));
                continue;
            }
        };
        // `server_name::tool_name`, both trimmed (crate::model::tool_id), built in place.
        key.clear();
        key.push_str(t.server.trim());
        key.push_str(crate::model::TOOL_ID_SEP);
        key.push_str(t.tool.trim());
        if !t.tool_id.is_empty() && t.tool_id != key.as_str() {
            defects.push(format!(
                "tool_id `{}` differs from server_name::tool_name `{key}`; matched as the latter",
                t.tool_id
            ));
        }
        let mdeps = t.deps;
        match first_deps {
            None => first_deps = Some(mdeps),
            Some(f) if f != mdeps => defects.push(format!(
                "alternatives of step {e} disagree on dependencies ({f:?} vs {mdeps:?}); using their union"
            )),
            _ => {}
        }
        for &d in mdeps {
            if !deps.contains(&d) {
                deps.push(d);
            }
        }
        let id_norm = intern(pools.tools, key);
        if !alts.contains(&id_norm) {
            alts.push(id_norm);
        }
    }
    if alts.is_empty() {
        defects.push(format!("ground_truth_tools[{e}] has no usable tool; step ignored"));
        return None;
    }
    Some((alts, deps))
}

/// A ground-truth member read as the format's tool ([`crate::formats::etom::GroundTruthTool`]): its names,
/// `tool_id` and dependencies, or why it is not a tool.
struct ReadTool<'a> {
    tool_id: &'a str,
    server: &'a str,
    tool: &'a str,
    deps: &'a [usize],
}

fn readable_tool<'a>(member: &'a typed::Member<'_>) -> Result<ReadTool<'a>, String> {
    let t = match member {
        typed::Member::Tool(t) => t,
        typed::Member::Other(v) => return Err(format!("is {}, not a tool", v.type_name())),
    };
    let Some(tool) = t.tool_name.as_ref().and_then(typed::Fv::as_str) else {
        return Err("has no `tool_name`".into());
    };
    let tool_id = text(&t.tool_id)?;
    // `server` is an alias of `server_name` in the format: both at once is a duplicate field.
    if t.server_name.is_some() && t.server.is_some() {
        return Err("is not a readable tool (duplicate field `server_name`)".into());
    }
    let server = if t.server_name.is_some() { text(&t.server_name)? } else { text(&t.server)? };
    if let Some(d) = &t.bad_description {
        return Err(unreadable(typed::type_error::<String>(d).unwrap_or_default()));
    }
    let deps: &[usize] = match &t.dependencies {
        None | Some(typed::Deps::Other(Value::Null)) => &[],
        Some(typed::Deps::Ints(d)) => d,
        Some(typed::Deps::Other(v)) => {
            return Err(unreadable(
                Option::<Vec<usize>>::deserialize(v).err().map(|e| e.to_string()).unwrap_or_default(),
            ));
        }
    };
    Ok(ReadTool { tool_id, server, tool, deps })
}

fn unreadable(e: String) -> String {
    format!("is not a readable tool ({e})")
}

/// A text field of a tool ("" when absent), or why the tool is unreadable.
fn text<'a>(f: &'a Option<typed::Fv<'_>>) -> Result<&'a str, String> {
    match f {
        None => Ok(""),
        Some(v) => v.as_str().ok_or_else(|| unreadable(typed::type_error::<String>(v).unwrap_or_default())),
    }
}

/// `ground_truth_tools` as the published evaluator normalises it (`_normalize_ground_truth_tool`):
/// per member `server_name` (else `server`, else ""), `tool_name` (else "") and `dependencies`
/// when truthy; a JSON string member is parsed first; anything else is no tool.
fn compat_gt(entries: &[typed::Entry]) -> EtomGt {
    let norm = |m: &typed::Member| -> Option<compat_etom::GtTool> {
        match m {
            typed::Member::Tool(t) => {
                let server =
                    t.server_name.as_ref().or(t.server.as_ref()).map_or(Value::String(String::new()), |v| v.to_value());
                let tool = t.tool_name.as_ref().map_or(Value::String(String::new()), |v| v.to_value());
                let deps = t
                    .dependencies
                    .as_ref()
                    .map(typed::Deps::to_value)
                    .filter(compat_etom::truthy)
                    .unwrap_or(Value::Array(Vec::new()));
                Some(compat_etom::GtTool { server, tool, deps })
            }
            typed::Member::Other(typed::Fv::Str(s)) => compat_etom::norm_gt_tool(&Value::String(s.to_string())),
            typed::Member::Other(_) => None,
        }
    };
    EtomGt {
        entries: entries
            .iter()
            .map(|e| match e {
                typed::Entry::List(ms) => GtEntry::List(ms.iter().filter_map(norm).collect()),
                typed::Entry::One(m) => GtEntry::One(norm(m), matches!(m, typed::Member::Tool(_))),
            })
            .collect(),
    }
}

fn load_finmcp(
    file: &str,
    text: &str,
    file_idx: usize,
    keep_raw: bool,
    pools: &mut Pools,
    diagnostics: &mut Vec<Diagnostic>,
) -> anyhow::Result<Vec<Item>> {
    let records = json_list(file, text, "samples", !keep_raw)?;
    let mut items = Vec::with_capacity(records.len());
    let mut problems = Vec::new();
    for (r, rec) in records.into_iter().enumerate() {
        let loc = format!("record {}", r + 1);
        let Some(sample) = finmcp_sample(file, keep_raw, &loc, rec, &mut problems, diagnostics) else {
            continue;
        };
        let id = sample.id.to_string();
        let turns_msg = match split_turns(&sample.messages) {
            Ok(t) => t,
            Err(e) => {
                problems.push(Problem::new(format!("{loc} ({id}).messages"), e));
                continue;
            }
        };
        let mut defects = Vec::new();
        let turns = finmcp_turns(&turns_msg, pools, &mut defects);
        let (kind, difficulty, given_difficulty) = finmcp_class(&sample, &turns, &mut defects);
        let (category, scenario) = finmcp_scenario(&sample, pools.names);
        let raw = keep_raw.then(|| finmcp_raw(sample));
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

/// One record of a FinMCP file read as a sample; `None` when it is left out, with why pushed
/// to `problems` (an error of the file) or `diagnostics` (a record the mode passes over).
fn finmcp_sample(
    file: &str,
    keep_raw: bool,
    loc: &str,
    rec: Value,
    problems: &mut Vec<Problem>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<finmcp::Sample<Value>> {
    if !rec.is_object() {
        problems.push(Problem::new(loc, format!("expected an object, got {}", json_type_name(&rec))));
        return None;
    }
    // An inference output file given as the benchmark (as the FinMCP docs do): a sample
    // whose inference failed lost its reference; evaluation.py drops it from N too.
    if super::pred::truthy(rec.get("error")) && rec.get("messages").is_none() {
        diagnostics.push(Diagnostic {
            file: file.to_string(),
            location: loc.to_string(),
            id: rec.get("id").map(|v| v.to_string()),
            message: "inference error record without `messages`: no reference to score; left out".into(),
        });
        return None;
    }
    // evaluation.py never reads `id`: in the compat mode a record without one cannot be
    // paired, but the predictions file's own copy of it is scored (see `score::run`).
    if keep_raw && rec.get("id").is_none() {
        diagnostics.push(Diagnostic {
            file: file.to_string(),
            location: loc.to_string(),
            id: None,
            message: "no `id`: no prediction can be paired with it; left out of the benchmark (a prediction record that carries the sample's fields is scored by them)".into(),
        });
        return None;
    }
    // Messages stay JSON: unreadable gold calls are defects of this sample (and the compat
    // mode must see them as the published evaluator does).
    match finmcp::Sample::<Value>::deserialize(rec) {
        Ok(s) => Some(s),
        // The compat mode scores each prediction record by its own fields (its copy of
        // this record is reported there, e.g. as one evaluation.py would stop on).
        Err(e) if keep_raw => {
            diagnostics.push(Diagnostic {
                file: file.to_string(),
                location: loc.to_string(),
                id: None,
                message: format!("not a FinMCP sample: {e}; left out of the benchmark (a prediction record that carries the sample's fields is scored by them)"),
            });
            None
        }
        Err(e) => {
            problems.push(Problem::new(loc, format!("not a FinMCP sample: {e}")));
            None
        }
    }
}

/// A sample's gold calls per turn, a final `###STOP###` turn left out; unreadable calls are
/// defects.
fn finmcp_turns(turns_msg: &[MsgTurn], pools: &mut Pools, defects: &mut Vec<String>) -> Vec<Vec<GoldCall>> {
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
                    Ok(name) => {
                        calls.push(GoldCall { alts: vec![intern(pools.tools, name)], group: g as u32, deps: vec![] })
                    }
                    Err(e) => defects.push(format!("gold {e}; call ignored")),
                }
            }
        }
        turns.push(calls);
    }
    turns
}

/// A sample's kind, its difficulty by its reference calls and the difficulty its
/// `diff_level` gives (a disagreement is a defect).
fn finmcp_class(
    sample: &finmcp::Sample<Value>,
    turns: &[Vec<GoldCall>],
    defects: &mut Vec<String>,
) -> (Kind, Difficulty, Difficulty) {
    let task = sample.task.as_deref().unwrap_or("");
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
    let label = sample.diff_level.as_ref().and_then(|d| d.level.as_deref());
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
    (kind, difficulty, given_difficulty)
}

/// A sample's category and scenario names, interned.
fn finmcp_scenario(sample: &finmcp::Sample<Value>, names: &mut Interner) -> (Arc<str>, Arc<str>) {
    // The Chinese main/sub class is present for every task; `scenery` is English for
    // multi-turn samples and Chinese otherwise, so it cannot group them together.
    let scenery: Vec<String> =
        sample.scenery.as_deref().unwrap_or("").split('-').map(|s| s.trim().to_string()).collect();
    let mut scenario: Vec<String> = Vec::new();
    match (&sample.first_class, &sample.sub_class) {
        (Some(a), Some(b)) => {
            scenario.push(a.to_string());
            scenario.push(b.to_string());
            scenario.extend(scenery.iter().skip(2).cloned());
        }
        _ => scenario = scenery,
    }
    category_and_scenario(&scenario, names)
}

/// What the published evaluator reads of a sample, as the file gave it.
fn finmcp_raw(sample: finmcp::Sample<Value>) -> Raw {
    let mut m = Map::new();
    if let Some(v) = sample.scenery {
        m.insert("scenery".into(), Value::String(v));
    }
    if let Some(v) = &sample.diff_level {
        m.insert("diff_level".into(), serde_json::to_value(v).expect("a JSON object"));
    }
    m.insert("messages".into(), Value::Array(sample.messages));
    if let Some(v) = sample.task {
        m.insert("task".into(), Value::String(v));
    }
    Raw::Finmcp(Value::Object(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools_run<T>(f: impl FnOnce(&mut Pools) -> T) -> T {
        let (mut tools, mut names) = (Interner::default(), Interner::default());
        f(&mut Pools { tools: &mut tools, names: &mut names })
    }

    #[test]
    fn unreadable_etom_entries_are_defects_and_raw_is_the_file_text() {
        let text = r#"[{"query_id": 7, "query": "q", "ground_truth_tools": [
            [{"tool_id": "S::a", "server_name": "S", "tool_name": "a", "description": "", "dependencies": []},
             5,
             {"server_name": "S"},
             {"server_name": "S", "tool_name": "b", "dependencies": ["x"]},
             {"tool_id": "S ::c", "server": "S", "tool_name": "c"}]
        ]}]"#;
        let items = pools_run(|p| load_etom("f.json", text, 2, 0, true, p)).unwrap();
        let it = &items[0];
        assert_eq!(it.id, "L2-7");
        let alts: Vec<&str> = it.turns[0][0].alts.iter().map(|a| &**a).collect();
        assert_eq!(alts, ["S::a", "S::c"]);
        let d = it.defects.join("\n");
        assert!(d.contains("ground_truth_tools[0][1] is a number, not a tool; ignored"), "{d}");
        assert!(d.contains("ground_truth_tools[0][2] has no `tool_name`; ignored"), "{d}");
        assert!(d.contains("ground_truth_tools[0][3] is not a readable tool"), "{d}");
        assert!(d.contains("tool_id `S ::c` differs from server_name::tool_name `S::c`"), "{d}");
        // The compat mode's view: each member normalised as `_normalize_ground_truth_tool` does.
        let t = |s: &str, n: &str, d: Value| compat_etom::GtTool { server: s.into(), tool: n.into(), deps: d };
        let e = serde_json::json!([]);
        let want = EtomGt {
            entries: vec![GtEntry::List(vec![
                t("S", "a", e.clone()),
                t("S", "", e.clone()),
                t("S", "b", serde_json::json!(["x"])),
                t("S", "c", e),
            ])],
        };
        assert!(matches!(&it.raw, Some(Raw::Etom(v)) if *v == want), "{:?}", it.raw);
        let gt = serde_json::from_str::<Value>(text).unwrap()[0]["ground_truth_tools"].clone();
        assert_eq!(want, gt_of_value(&gt));
    }

    /// The compat view built from the file's JSON value, member by member (the reading
    /// before the typed reader).
    fn gt_of_value(gt: &Value) -> EtomGt {
        let entries = gt
            .as_array()
            .unwrap()
            .iter()
            .map(|e| match e {
                Value::Array(ms) => GtEntry::List(ms.iter().filter_map(compat_etom::norm_gt_tool).collect()),
                other => GtEntry::One(compat_etom::norm_gt_tool(other), other.is_object()),
            })
            .collect();
        EtomGt { entries }
    }

    #[test]
    fn typed_level_reading_matches_the_json_value_reading() {
        // Strings holding JSON, nulls, odd types, unknown fields, escapes, a row of one.
        let text = r#"[{"query_id": "q\u00e9", "extra": {"a": [1, {"b": 2}]}, "ground_truth_tools": [
            "{\"server\": \"S\", \"tool_name\": \"j\", \"dependencies\": [0]}",
            {"server_name": null, "tool_name": "n", "dependencies": 0},
            {"server": "T", "tool_name": ["x"], "dependencies": [1, 2]},
            [{"server_name": "U", "tool_name": "u\"q", "description": 5}],
            [[{"tool_name": "nested"}], "not json", 7, null],
            true
        ]}]"#;
        for keep_raw in [false, true] {
            let items = pools_run(|p| load_etom("f.json", text, 4, 0, keep_raw, p)).unwrap();
            assert_eq!(items[0].id, "L4-q\u{e9}");
            if keep_raw {
                let gt = serde_json::from_str::<Value>(text).unwrap()[0]["ground_truth_tools"].clone();
                assert!(matches!(&items[0].raw, Some(Raw::Etom(v)) if *v == gt_of_value(&gt)), "{:?}", items[0].raw);
            }
            let d = items[0].defects.join("\n");
            assert!(d.contains("ground_truth_tools[0][0] is a string, not a tool"), "{d}");
            assert!(
                d.contains("ground_truth_tools[1][0] is not a readable tool (invalid type: null, expected a string)"),
                "{d}"
            );
            assert!(d.contains("ground_truth_tools[2][0] has no `tool_name`"), "{d}");
            assert!(d.contains("ground_truth_tools[3][0] is not a readable tool (invalid type: integer `5`"), "{d}");
            assert!(d.contains("ground_truth_tools[4][0] is an array, not a tool"), "{d}");
            assert!(d.contains("ground_truth_tools[5][0] is a boolean, not a tool"), "{d}");
        }
    }

    #[test]
    fn typed_level_reading_names_record_and_field() {
        let e = |text: &str, keep_raw: bool| {
            format!("{:?}", pools_run(|p| load_etom("f.json", text, 1, 0, keep_raw, p)).unwrap_err())
        };
        for keep_raw in [false, true] {
            let m = e(
                r#"[{"query_id": 1, "ground_truth_tools": {"a": 1}}, {"query_id": [2]}, {"query_id": 3, "query": 4}]"#,
                keep_raw,
            );
            assert!(m.contains("f.json"), "{m}");
            assert!(
                m.contains("record 1.ground_truth_tools") && m.contains("invalid type: map, expected a sequence"),
                "{m}"
            );
            assert!(m.contains("record 2.query_id") && m.contains("expected a number or a string"), "{m}");
            assert!(m.contains("record 3.query") && m.contains("invalid type: integer `4`, expected a string"), "{m}");
            let m = e(r#"{"query_id": 1}"#, keep_raw);
            assert!(m.contains("top level") && m.contains("expected a JSON list of queries"), "{m}");
            let m = e("[{\"query_id\": 1,\n \"query\": }]", keep_raw);
            assert!(m.contains("line 2") && m.contains("not valid JSON"), "{m}");
        }
        // A key given twice, even in a field scoring skips: refused in the corrected mode,
        // the last wins in the compat modes.
        let dup = "[{\"query_id\": 1, \"extra\": {\"k\": 1,\n \"k\": 2}, \"ground_truth_tools\": []}]";
        let m = e(dup, false);
        assert!(m.contains("duplicate key `k`") && m.contains("line 2"), "{m}");
        assert!(pools_run(|p| load_etom("f.json", dup, 1, 0, true, p)).is_ok());
        // NaN and 1e400 in the compat modes, read as Python's json.load reads them.
        let py = r#"[{"query_id": 1, "x": NaN, "ground_truth_tools": [{"server_name": "S", "tool_name": "a", "w": 1e400}]}]"#;
        assert!(pools_run(|p| load_etom("f.json", py, 1, 0, false, p)).is_err());
        let items = pools_run(|p| load_etom("f.json", py, 1, 0, true, p)).unwrap();
        assert_eq!(&*items[0].turns[0][0].alts[0], "S::a");
    }

    #[test]
    fn bad_records_name_the_record() {
        let e = pools_run(|p| load_etom("f.json", r#"[{"query_id": 1}, 3, {"query": "no id"}]"#, 1, 0, false, p))
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.json"), "{e}");
        let e = format!(
            "{:?}",
            pools_run(|p| load_etom("f.json", r#"[{"query_id": 1}, 3, {"query": "x"}]"#, 1, 0, false, p)).unwrap_err()
        );
        assert!(e.contains("record 2") && e.contains("expected an object, got a number"), "{e}");
        assert!(e.contains("record 3") && e.contains("missing field `query_id`"), "{e}");
        let e = format!(
            "{:?}",
            pools_run(|p| load_finmcp("g.json", r#"[{"id": 1}]"#, 0, false, p, &mut Vec::new())).unwrap_err()
        );
        assert!(e.contains("record 1") && e.contains("missing field `messages`"), "{e}");
    }

    #[test]
    fn finmcp_raw_keeps_what_the_evaluator_reads() {
        let text = r#"[{"id": 3, "scenery": "A-B-C", "diff_level": {"turns": 1, "tool_number": 1, "level": "easy"},
            "tool_list": [["f"]], "messages": [{"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}, "type": "function", "index": 0}]}],
            "first-class": "A", "sub-class": "B", "task": "single step", "annotation": {"x": 1}}]"#;
        let items = pools_run(|p| load_finmcp("g.json", text, 0, true, p, &mut Vec::new())).unwrap();
        let rec: Value = serde_json::from_str::<Value>(text).unwrap()[0].clone();
        let want = serde_json::json!({"scenery": rec["scenery"], "diff_level": rec["diff_level"], "messages": rec["messages"], "task": rec["task"]});
        match &items[0].raw {
            Some(Raw::Finmcp(v)) => {
                assert_eq!(*v, want);
                let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
                assert_eq!(keys, ["scenery", "diff_level", "messages", "task"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(items[0].id, "3");
        assert_eq!(&*items[0].scenario, "A / B");
        assert_eq!(items[0].kind, Kind::SingleTool);
    }
}
