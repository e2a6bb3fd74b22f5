//! `benchgen score`: metrics for predictions against a benchmark.
//!
//! Three modes share one pipeline (load → normalise → score each sample → aggregate):
//! - corrected (default): the semantics SPEC.md states, see [`etom`] and [`finmcp`];
//! - `--compat etom`: the published ETOM evaluator (`eval/eval.py`), defects included ([`compat_etom`]);
//! - `--compat finmcp`: the published FinMCP evaluator (`eval/evaluation.py`) ([`compat_finmcp`]).
//!
//! Predictions are streamed: each line is scored as soon as it is read, so memory holds the
//! benchmark and one small result per sample, not the predictions.

pub mod compat_etom;
pub mod compat_finmcp;
pub mod etom;
pub mod finmcp;
pub mod input;
pub mod matching;
pub mod report;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::model::{Difficulty, Family, Kind};

pub use input::{BenchFormat, PredFormat};
pub use report::Report;

/// Which semantics to score with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Corrected,
    #[serde(rename = "compat-etom")]
    CompatEtom,
    #[serde(rename = "compat-finmcp")]
    CompatFinmcp,
}

/// `--compat` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompatArg {
    Etom,
    Finmcp,
}

impl From<Option<CompatArg>> for Mode {
    fn from(c: Option<CompatArg>) -> Mode {
        match c {
            None => Mode::Corrected,
            Some(CompatArg::Etom) => Mode::CompatEtom,
            Some(CompatArg::Finmcp) => Mode::CompatFinmcp,
        }
    }
}

/// Everything `score` needs, resolved from the command line.
#[derive(Debug, Clone)]
pub struct Options {
    pub benches: Vec<PathBuf>,
    pub pred: PathBuf,
    pub bench_format: Option<BenchFormat>,
    pub pred_format: Option<PredFormat>,
    /// Level of ETOM level files whose name does not say it (`level_N.json`).
    pub etom_level: Option<u8>,
    pub mode: Mode,
}

/// Files the `score` command writes besides printing the report.
#[derive(Debug, Clone, Default)]
pub struct ReportFiles {
    /// Per-sample results with reasons (JSONL).
    pub per_sample: Option<PathBuf>,
    /// The report as Markdown.
    pub markdown: Option<PathBuf>,
}

/// One reference call, ready for matching: comparison keys of its alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldCall {
    /// Interned: a benchmark names a few thousand tools across millions of calls.
    pub alts: Vec<Arc<str>>,
    pub group: u32,
    pub deps: Vec<usize>,
}

/// A benchmark sample as the scorers need it (texts dropped, keys normalised).
#[derive(Debug, Clone)]
pub struct Item {
    pub id: String,
    pub family: Family,
    pub kind: Kind,
    /// Counted from the reference calls (easy ≤ 5, medium 6–10, hard > 10).
    pub difficulty: Difficulty,
    /// The difficulty label the file gives (compat finmcp groups by it).
    pub given_difficulty: Difficulty,
    /// `scenario[0]`, or `(none)`.
    pub category: Arc<str>,
    /// `scenario[0] / scenario[1]`, or `(none)`.
    pub scenario: Arc<str>,
    pub turns: Vec<Vec<GoldCall>>,
    /// A published-format sample in its own shape, kept only for the compat modes (unified
    /// samples are converted from `turns` when scored).
    pub raw: Option<Raw>,
    /// Problems in the reference data of this sample (reported, never silent).
    pub defects: Vec<String>,
    /// Bench file index and 1-based record number.
    pub file: usize,
    pub record: usize,
}

/// The published shape of a sample, for the compat evaluators.
#[derive(Debug, Clone)]
pub enum Raw {
    /// ETOM `ground_truth_tools` as in `level_N.json`, normalised as the published evaluator does.
    Etom(compat_etom::EtomGt),
    /// The FinMCP fields `evaluation.py` reads: `scenery`, `diff_level`, `messages`, `task`.
    Finmcp(Value),
}

/// One predicted call.
#[derive(Debug, Clone, PartialEq)]
pub struct PredCall {
    /// Full tool id `server::tool` (or a bare tool name); empty when the item was unreadable.
    pub tool: String,
    /// Step; calls sharing a step ran in parallel.
    pub group: i64,
}

/// A prediction normalised for the corrected scorers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NormPred {
    pub turns: Vec<Vec<PredCall>>,
    /// Explicit refusal / "No" sentinel / plain-text answer (no tool call).
    pub refusal: bool,
    /// Why parts of the prediction were ignored or counted as wrong.
    pub notes: Vec<String>,
}

/// A prediction as read: normalised for the corrected mode, raw for the compat modes.
#[derive(Debug, Clone)]
pub enum Pred {
    /// Our JSONL or a FinMCP record, normalised; `raw` is the published-shape value the
    /// compat evaluators consume (orchestrator list or `messages_pred`) when the format has one.
    Ok { norm: NormPred, raw: RawPred },
    /// The record names a sample but cannot be read as a prediction.
    Malformed(String),
}

/// The prediction in a published evaluator's input shape.
#[derive(Debug, Clone)]
pub enum RawPred {
    /// What an ETOM orchestrator returns (list of JSON strings/objects, a string, …).
    Etom(Value),
    /// FinMCP inference output: `messages_pred`, whether the record carries `error`, and
    /// (compat finmcp) the sample fields the record carries itself (`scenery`, `diff_level`,
    /// `messages`, `task`), which `evaluation.py` scores it by. `messages_pred` is `None`
    /// when the record has no such key.
    Finmcp { messages_pred: Option<Value>, error: bool, sample: Option<Value> },
    /// Our JSONL: the compat evaluators get it converted to their input shape.
    Unified,
}

/// Precision/recall counts of one sample (or pooled).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Prf {
    pub p: f64,
    pub r: f64,
    pub f1: f64,
    /// Numerator of precision (ETOM: correctly placed calls; FinMCP: matched calls).
    pub tp_p: u32,
    /// Numerator of recall (matched reference calls).
    pub tp_r: u32,
    /// Predicted calls.
    pub pred: u32,
    /// Reference calls.
    pub gold: u32,
}

impl Prf {
    /// Build from counts; the corrected conventions for empty sides: nothing predicted and
    /// nothing expected is perfect; nothing predicted otherwise has precision 0.
    pub fn from_counts(tp_p: u32, tp_r: u32, pred: u32, gold: u32) -> Prf {
        let (p, r) = match (pred, gold) {
            (0, 0) => (1.0, 1.0),
            (0, _) => (0.0, 0.0),
            (_, 0) => (0.0, 1.0),
            _ => (f64::from(tp_p) / f64::from(pred), f64::from(tp_r) / f64::from(gold)),
        };
        Prf { p, r, f1: f1(p, r), tp_p, tp_r, pred, gold }
    }
}

pub fn f1(p: f64, r: f64) -> f64 {
    if p + r > 0.0 { 2.0 * p * r / (p + r) } else { 0.0 }
}

/// Outcome class of one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Correct,
    Wrong,
    /// No prediction line for this sample.
    Missing,
    /// A prediction line exists but cannot be read.
    Malformed,
    /// Left out of N (compat finmcp: error records and records the script skips).
    Dropped,
}

/// Per-turn detail of multi-turn samples.
#[derive(Debug, Clone, Serialize)]
pub struct TurnResult {
    pub turn: usize,
    pub em: bool,
    pub gold_calls: u32,
    pub pred_calls: u32,
    pub matched: u32,
}

/// The score of one sample, with the reasons for anything short of perfect.
#[derive(Debug, Clone, Serialize)]
pub struct SampleResult {
    pub id: String,
    pub family: Family,
    pub kind: Kind,
    pub difficulty: Difficulty,
    pub category: Arc<str>,
    pub scenario: Arc<str>,
    pub status: Status,
    /// Exact match (ETOM L5: correct rejection; FinMCP: grouped structure; compat: as published).
    pub em: bool,
    /// ETOM L1–L4 node-set exact match (compat: `node_set_match` of L3/L4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_set_em: Option<bool>,
    /// Call-level precision/recall; `None` when the mode leaves the sample out of the average.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<Prf>,
    /// FinMCP tool-set precision/recall (corrected mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_set: Option<Prf>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnResult>,
    /// Compat modes: the published evaluator's status label and flags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compat_status: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compat_flags: Vec<(&'static str, bool)>,
    /// Compat finmcp grouping keys (class_Level1, diff_level.level, task).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compat_groups: Option<[String; 3]>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

impl SampleResult {
    pub fn new(item: &Item, status: Status) -> Self {
        let mut r = SampleResult::unscored(&item.id, item.family, item.kind, item.difficulty, status);
        r.category = item.category.clone();
        r.scenario = item.scenario.clone();
        r.reasons = item.defects.iter().map(|d| format!("data defect: {d}")).collect();
        r
    }

    /// A result with its keys and status and nothing scored yet (category and scenario
    /// `(none)`, no reasons): what a scorer fills in, or a dropped record keeps.
    pub fn unscored(id: &str, family: Family, kind: Kind, difficulty: Difficulty, status: Status) -> Self {
        let none: Arc<str> = Arc::from("(none)");
        SampleResult {
            id: id.to_string(),
            family,
            kind,
            difficulty,
            category: none.clone(),
            scenario: none,
            status,
            em: false,
            node_set_em: None,
            calls: None,
            tool_set: None,
            turns: Vec::new(),
            compat_status: None,
            compat_flags: Vec::new(),
            compat_groups: None,
            reasons: Vec::new(),
        }
    }
}

/// What every scorer may consult besides the sample and its prediction.
#[derive(Debug, Clone)]
pub struct ScoreCtx {
    pub mode: Mode,
    /// Comparison keys of every reference tool in the loaded benchmarks: a predicted tool
    /// outside it is reported as unknown, not just as wrong.
    pub universe: HashSet<Arc<str>, foldhash::fast::RandomState>,
}

impl ScoreCtx {
    pub fn new(mode: Mode, items: &[Item]) -> Self {
        let universe =
            items.iter().flat_map(|i| i.turns.iter().flatten().flat_map(|c| c.alts.iter().cloned())).collect();
        ScoreCtx { mode, universe }
    }
}

/// Score one sample in the given mode (`None`: no prediction line for it).
pub fn score_item(ctx: &ScoreCtx, item: &Item, pred: Option<&Pred>) -> SampleResult {
    match ctx.mode {
        Mode::Corrected => match item.family {
            Family::Etom => etom::score(ctx, item, pred),
            Family::Finmcp => finmcp::score(ctx, item, pred),
        },
        Mode::CompatEtom => compat_etom::score(item, pred),
        Mode::CompatFinmcp => compat_finmcp::score(item, pred),
    }
}

/// The prediction to score in the corrected mode, with the sample's status so far.
pub(crate) fn corrected_pred<'a>(
    item: &Item,
    pred: Option<&'a Pred>,
    empty: &'a NormPred,
) -> (SampleResult, &'a NormPred) {
    match pred {
        None => {
            let mut r = SampleResult::new(item, Status::Missing);
            r.reasons.push("no prediction for this sample; scored as no tool calls".into());
            (r, empty)
        }
        Some(Pred::Malformed(why)) => {
            let mut r = SampleResult::new(item, Status::Malformed);
            r.reasons.push(format!("malformed prediction ({why}); scored as no tool calls"));
            (r, empty)
        }
        Some(Pred::Ok { norm, .. }) => {
            let mut r = SampleResult::new(item, Status::Wrong);
            r.reasons.extend(norm.notes.iter().cloned());
            (r, norm)
        }
    }
}

/// At most this many per-call reasons per sample (the count of the rest is given).
pub(crate) const MAX_REASONS: usize = 12;

pub(crate) fn push_capped(reasons: &mut Vec<String>, extra: Vec<String>) {
    let n = extra.len();
    reasons.extend(extra.into_iter().take(MAX_REASONS));
    if n > MAX_REASONS {
        reasons.push(format!("… and {} more", n - MAX_REASONS));
    }
}

/// Score the predictions file against the benchmark files.
pub fn run(opts: &Options) -> anyhow::Result<Report> {
    let bench = input::load_benches(opts)?;
    let keep_family = match opts.mode {
        Mode::Corrected => None,
        Mode::CompatEtom => Some(Family::Etom),
        Mode::CompatFinmcp => Some(Family::Finmcp),
    };
    let ctx = ScoreCtx { mode: opts.mode, universe: bench.tools.clone() };
    let mut index: HashMap<&str, usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(bench.items.len(), Default::default());
    let mut in_mode: Vec<bool> = vec![true; bench.items.len()];
    let mut not_in_mode: Vec<usize> = Vec::new();
    for (i, it) in bench.items.iter().enumerate() {
        if keep_family.is_some_and(|f| f != it.family) {
            not_in_mode.push(i);
            in_mode[i] = false;
            continue;
        }
        index.entry(it.id.as_str()).or_insert(i);
    }
    if opts.mode == Mode::CompatFinmcp {
        drop(index);
        return run_compat_finmcp(opts, bench, &ctx, &in_mode, not_in_mode);
    }
    // Later entries with a duplicated id: scored too in the compat modes (the published
    // evaluators run over every entry), once only in the corrected mode.
    let mut extra: HashMap<usize, Vec<usize>> = HashMap::new();
    if opts.mode != Mode::Corrected {
        for &(j, i) in &bench.duplicates {
            if in_mode[i] {
                extra.entry(j).or_default().push(i);
            }
        }
    } else {
        for &(_, i) in &bench.duplicates {
            in_mode[i] = false;
        }
    }
    let mut results: Vec<Option<SampleResult>> = vec![None; bench.items.len()];
    // Where each sample's prediction was read, to name it when another one comes.
    let mut first_at: HashMap<usize, String> = HashMap::new();
    let mut diagnostics = bench.diagnostics.clone();
    let preds = input::read_predictions(opts, &bench, |id, line, pred, diags| {
        let Some(id) = id else {
            // Only compat finmcp hands over records without an id (it has its own path).
            diags.push(input::Diagnostic::line(line, None, "no `id`; not scored"));
            return;
        };
        let Some(&i) = index.get(id) else {
            diags.push(input::Diagnostic::line(line, Some(id), "no sample with this id in the benchmark; not scored"));
            return;
        };
        if results[i].is_some() {
            let first = first_at.get(&i).map(String::as_str).unwrap_or("an earlier record");
            diags.push(input::Diagnostic::line(
                line,
                Some(id),
                format!("second prediction for this id (the first is at {first}); only the first is scored"),
            ));
            return;
        }
        first_at.insert(i, line.to_string());
        results[i] = Some(score_item(&ctx, &bench.items[i], Some(&pred)));
        if let Some(more) = extra.get(&i) {
            for &k in more {
                results[k] = Some(score_item(&ctx, &bench.items[k], Some(&pred)));
            }
        }
    })?;
    diagnostics.extend(preds.diagnostics.iter().cloned());
    for (i, it) in bench.items.iter().enumerate() {
        if results[i].is_none() && in_mode[i] {
            results[i] = Some(score_item(&ctx, it, None));
        }
    }
    // In place: `Option<SampleResult>` and `SampleResult` share a layout, so no second copy.
    results.retain(Option::is_some);
    let results: Vec<SampleResult> = results.into_iter().map(|r| r.expect("retained")).collect();
    drop(index);
    let mut rep = report::build(opts, &bench, &preds, diagnostics, not_in_mode, results);
    // Handed to the caller, who may let the process exit instead of freeing millions of
    // small allocations one by one.
    rep.bench = Some(bench);
    Ok(rep)
}

/// `--compat finmcp`: `evaluation.py` scores every record of the inference output on its own,
/// in file order, and never reads `id` (each record is its sample with `messages_pred`
/// added). So every prediction record is one evaluation record: repeats are scored again,
/// a record carrying its sample's fields (`scenery`, `diff_level`, `messages`) is scored by
/// them, id or not, and an error record is dropped wherever it stands. A record without those
/// fields takes them from the benchmark sample of its id: the k-th record of an id from the
/// k-th sample of that id (the inference output given as the benchmark pairs each record
/// with itself), further records from the last one. Samples no record names are left out of
/// N, as the script never sees them.
fn run_compat_finmcp(
    opts: &Options,
    bench: input::Bench,
    ctx: &ScoreCtx,
    in_mode: &[bool],
    not_in_mode: Vec<usize>,
) -> anyhow::Result<Report> {
    let mut by_id: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, it) in bench.items.iter().enumerate() {
        if in_mode[i] {
            by_id.entry(it.id.as_str()).or_default().push(i);
        }
    }
    let mut used: HashMap<&str, usize> = HashMap::new();
    let mut first_at: HashMap<usize, String> = HashMap::new();
    let mut covered = vec![false; bench.items.len()];
    let mut results: Vec<SampleResult> = Vec::new();
    let preds = input::read_predictions(opts, &bench, |id, line, pred, diags| {
        let own = matches!(
            &pred,
            Pred::Ok { raw: RawPred::Finmcp { sample: Some(_), .. } | RawPred::Finmcp { error: true, .. }, .. }
        );
        // Named by its id, or by its place in the file when it has none.
        let name = id.map_or_else(|| line.to_string(), str::to_string);
        let paired = id.and_then(|id| by_id.get_key_value(id)).map(|(&key, list)| {
            let k = used.entry(key).or_default();
            let i = list[(*k).min(list.len() - 1)];
            *k += 1;
            (i, *k > list.len())
        });
        let item = match paired {
            Some((i, again)) => {
                if again {
                    let first = first_at.get(&i).map(String::as_str).unwrap_or("an earlier record");
                    diags.push(input::Diagnostic::line(
                        line,
                        id,
                        format!(
                            "another record for this id (the first is at {first}) and no further sample with it; scored again, as evaluation.py scores every record"
                        ),
                    ));
                }
                first_at.entry(i).or_insert_with(|| line.to_string());
                covered[i] = true;
                Some(&bench.items[i])
            }
            None if own => None,
            None => {
                let msg = if id.is_some() {
                    "no sample with this id in the benchmark, and the record carries no `scenery`/`diff_level`/`messages` of its own; not scored"
                } else {
                    "no `id`, and no `scenery`/`diff_level`/`messages` of its own: nothing to score it against; left out of N (evaluation.py skips such a record: KeyError)"
                };
                diags.push(input::Diagnostic::line(line, id, msg));
                return;
            }
        };
        let res = compat_finmcp::score_record(item, &name, &pred);
        // evaluation.py would stop on this record with no figures: an error of the input.
        if res.compat_status.as_deref() == Some(compat_finmcp::STOPPED) {
            diags.push(input::Diagnostic::line(line, id, res.reasons.last().cloned().unwrap_or_default()));
        }
        results.push(res);
    })?;
    for (i, it) in bench.items.iter().enumerate() {
        if in_mode[i] && !covered[i] {
            results.push(score_item(ctx, it, None));
        }
    }
    let mut diagnostics = bench.diagnostics.clone();
    diagnostics.extend(preds.diagnostics.iter().cloned());
    let mut rep = report::build(opts, &bench, &preds, diagnostics, not_in_mode, results);
    rep.bench = Some(bench);
    Ok(rep)
}

/// The `score` command: run, print, write the requested files; exit 1 when prediction
/// records could not be scored (the report is complete either way).
pub fn command(opts: &Options, files: &ReportFiles, printer: &crate::printer::Printer) -> anyhow::Result<()> {
    let rep = run(opts)?;
    if let Some(p) = &files.per_sample {
        crate::store::write_atomic(p, &report::render_per_sample(&rep))?;
    }
    if let Some(p) = &files.markdown {
        crate::store::write_atomic(p, report::render_markdown(&rep).as_bytes())?;
    }
    printer.summary(&report::render_text(&rep), &rep);
    let unreadable = rep.diagnostics.iter().filter(|d| d.file == rep.predictions.path).count();
    // The process ends here: skip freeing the benchmark and the results piece by piece
    // (seconds for millions of samples).
    std::mem::forget(rep);
    if unreadable > 0 {
        return Err(crate::error::hinted(
            format!("{unreadable} prediction record(s) could not be scored as given (listed above)"),
            "fix the listed lines; the report covers every benchmark sample regardless",
        ));
    }
    Ok(())
}
