//! Aggregation and rendering: terminal table, Markdown, JSON, per-sample JSONL.
//!
//! Corrected mode: sections overall / kind / difficulty / category / scenario; each row has N
//! (samples in the group: nothing leaves a denominator silently), exact match, node-set exact
//! match (ETOM L3/L4), call-level P/R/F1 macro (mean of per-sample values) and micro (pooled
//! counts), tool-set P/R/F1 (FinMCP), and how many samples were wrong, missing or malformed.
//! Compat modes: the sections and figures the published evaluators print.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::input::{Bench, BenchFile, Diagnostic, PredStats};
use super::{Mode, Options, Prf, SampleResult, Status};
use crate::model::Kind;

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Triple {
    pub p: f64,
    pub r: f64,
    pub f1: f64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Support {
    pub tp: u64,
    pub fp: u64,
    #[serde(rename = "fn")]
    pub fn_: u64,
}

/// One group's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    pub key: String,
    /// Samples counted in this group (all of them, except compat-finmcp drops).
    pub n: usize,
    pub em: f64,
    pub em_count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_set_em: Option<f64>,
    /// Samples whose call-level P/R/F1 enter the averages (compat etom L3/L4 leave some out).
    pub calls_n: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls_macro: Option<Triple>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls_micro: Option<Triple>,
    pub support: Support,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_macro: Option<Triple>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_micro: Option<Triple>,
    pub wrong: usize,
    pub missing: usize,
    pub malformed: usize,
    pub dropped: usize,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extras: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Section {
    pub dimension: String,
    pub rows: Vec<Row>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Defect {
    pub file: String,
    pub id: String,
    pub message: String,
}

/// The whole result of a `score` run.
#[derive(Debug, Serialize)]
pub struct Report {
    pub mode: Mode,
    pub benches: Vec<BenchFile>,
    pub predictions: PredStats,
    /// Samples scored (rows of `--per-sample`).
    pub samples: usize,
    pub sections: Vec<Section>,
    /// Unreadable prediction lines, unknown ids, duplicate ids and similar.
    pub diagnostics: Vec<Diagnostic>,
    /// Problems in the reference data, per sample.
    pub data_defects: Vec<Defect>,
    /// Samples of a family the compat mode does not cover.
    pub not_in_mode: usize,
    /// `--compat finmcp`: the records evaluation.py would not count, by why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_out: Option<LeftOut>,
    #[serde(skip)]
    pub results: Vec<SampleResult>,
    /// The loaded benchmark, kept so the caller decides when (or whether) to free it.
    #[serde(skip)]
    pub bench: Option<Bench>,
}

/// Records `--compat finmcp` leaves out of N, as evaluation.py does or would.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LeftOut {
    /// A truthy `error`: dropped (`--drop_error_data`).
    pub error_records: usize,
    /// A KeyError (a missing field, a tool call without `function` or `name`): skipped.
    pub skipped: usize,
    /// An exception the script does not catch (it would print no figures at all): reported
    /// as errors in the diagnostics.
    pub stopped: usize,
    /// Benchmark samples no record names (the script never sees them).
    pub no_record: usize,
}

fn left_out(results: &[SampleResult]) -> LeftOut {
    use super::compat_finmcp::{DROPPED_ERROR, SKIPPED, STOPPED};
    let mut l = LeftOut::default();
    for r in results.iter().filter(|r| r.status == Status::Dropped) {
        match r.compat_status.as_deref() {
            Some(DROPPED_ERROR) => l.error_records += 1,
            Some(SKIPPED) => l.skipped += 1,
            Some(STOPPED) => l.stopped += 1,
            _ => l.no_record += 1,
        }
    }
    l
}

fn mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut s, mut n) = (0.0, 0usize);
    for x in xs {
        s += x;
        n += 1;
    }
    (n > 0).then(|| s / n as f64)
}

fn macro_of<'a>(ps: impl Iterator<Item = &'a Prf> + Clone) -> Option<Triple> {
    Some(Triple { p: mean(ps.clone().map(|x| x.p))?, r: mean(ps.clone().map(|x| x.r))?, f1: mean(ps.map(|x| x.f1))? })
}

fn micro_of<'a>(mode: Mode, ps: impl Iterator<Item = &'a Prf>) -> Option<Triple> {
    let (mut tpp, mut tpr, mut pred, mut gold, mut n) = (0u64, 0u64, 0u64, 0u64, 0usize);
    for x in ps {
        tpp += u64::from(x.tp_p);
        tpr += u64::from(x.tp_r);
        pred += u64::from(x.pred);
        gold += u64::from(x.gold);
        n += 1;
    }
    if n == 0 {
        return None;
    }
    let div = |a: u64, b: u64, empty: f64| if b > 0 { a as f64 / b as f64 } else { empty };
    // Corrected: nothing predicted and nothing expected is perfect; the published code says 0.
    let (p, r) = match mode {
        Mode::Corrected if pred == 0 && gold == 0 => (1.0, 1.0),
        Mode::Corrected => (div(tpp, pred, 0.0), div(tpr, gold, 1.0)),
        _ => (div(tpp, pred, 0.0), div(tpr, gold, 0.0)),
    };
    Some(Triple { p, r, f1: super::f1(p, r) })
}

fn row(mode: Mode, key: String, rs: &[&SampleResult]) -> Row {
    let counted: Vec<&SampleResult> = rs.iter().copied().filter(|r| r.status != Status::Dropped).collect();
    let n = counted.len();
    let em_count = counted.iter().filter(|r| r.em).count();
    let ns: Vec<bool> = counted.iter().filter_map(|r| r.node_set_em).collect();
    let calls: Vec<&Prf> = counted.iter().filter_map(|r| r.calls.as_ref()).collect();
    let sets: Vec<&Prf> = counted.iter().filter_map(|r| r.tool_set.as_ref()).collect();
    let mut support = Support::default();
    for c in &calls {
        support.tp += u64::from(c.tp_p);
        support.fp += u64::from(c.pred - c.tp_p);
        support.fn_ += u64::from(c.gold - c.tp_r);
    }
    let count = |s: Status| rs.iter().filter(|r| r.status == s).count();
    let mut out = Row {
        key,
        n,
        em: if n > 0 { em_count as f64 / n as f64 } else { 0.0 },
        em_count,
        node_set_em: (!ns.is_empty()).then(|| ns.iter().filter(|&&b| b).count() as f64 / ns.len() as f64),
        calls_n: calls.len(),
        calls_macro: macro_of(calls.iter().copied()),
        calls_micro: micro_of(mode, calls.iter().copied()),
        support,
        set_macro: macro_of(sets.iter().copied()),
        set_micro: micro_of(mode, sets.iter().copied()),
        wrong: count(Status::Wrong),
        missing: count(Status::Missing),
        malformed: count(Status::Malformed),
        dropped: count(Status::Dropped),
        extras: BTreeMap::new(),
    };
    if mode == Mode::CompatEtom {
        compat_etom_extras(&mut out, &counted);
    }
    out
}

/// Level-specific figures of the published ETOM statistics (including the L4 keys it reads
/// but no strategy writes, which therefore are always 0).
fn compat_etom_extras(row: &mut Row, rs: &[&SampleResult]) {
    let n = rs.len().max(1) as f64;
    let status = |s: &str| rs.iter().filter(|r| r.compat_status.as_deref() == Some(s)).count() as f64 / n;
    let flag = |f: &str| rs.iter().filter(|r| r.compat_flags.iter().any(|(k, v)| *k == f && *v)).count() as f64 / n;
    let Some(kind) = rs.first().map(|r| r.kind) else { return };
    let e = &mut row.extras;
    // The status counts eval.py prints for every level (`tool_graph`, `multi_tool_error`, …).
    for r in rs {
        if let Some(s) = &r.compat_status {
            *e.entry(format!("status.{s}")).or_default() += 1.0;
        }
    }
    match kind {
        Kind::L1 | Kind::L2 => {
            e.insert("match_rate.tool_name".into(), flag("tool_name_match"));
            e.insert("match_rate.server".into(), flag("server_match"));
            e.insert("errors.multi_tool".into(), status("multi_tool_error") * n);
            e.insert("errors.empty_result".into(), status("empty_result_error") * n);
            e.insert("errors.processing".into(), status("processing_error") * n);
        }
        Kind::L3 | Kind::L4 => {
            let graph = if kind == Kind::L3 { "tool_graph" } else { "tool_chain_efs" };
            let contains = |s: &str| {
                rs.iter().filter(|r| r.compat_status.as_deref().is_some_and(|x| x.contains(s))).count() as f64 / n
            };
            e.insert(format!("response_rate.{graph}"), contains(graph));
            e.insert("response_rate.conversational".into(), contains("conversational"));
            e.insert("response_rate.error".into(), contains("error"));
            if kind == Kind::L3 {
                e.insert("structure_match_rate".into(), row.em);
                e.insert(
                    "node_set_match_rate".into(),
                    rs.iter().filter(|r| r.node_set_em == Some(true)).count() as f64 / n,
                );
            } else {
                e.insert("structure_match_rate".into(), 0.0);
                e.insert("node_set_match_rate".into(), 0.0);
                // The EFS match counts eval.py prints: read from keys no strategy writes.
                e.insert("efs_matches".into(), 0.0);
                e.insert("total_efs_alternatives".into(), 0.0);
                e.insert("parallel_aware_match_rate".into(), flag("parallel_aware_match"));
            }
        }
        Kind::L5 => {
            e.insert("correct_no_tools_rate".into(), status("correct_no_tools"));
            e.insert("incorrect_tools_rate".into(), status("incorrect_tools_predicted"));
        }
        _ => {}
    }
}

fn section<'a>(
    mode: Mode,
    dimension: &str,
    results: &'a [SampleResult],
    key: impl Fn(&'a SampleResult) -> Option<&'a str>,
) -> Section {
    let mut groups: BTreeMap<&str, Vec<&SampleResult>> = BTreeMap::new();
    for r in results {
        if let Some(k) = key(r) {
            groups.entry(k).or_default().push(r);
        }
    }
    Section {
        dimension: dimension.into(),
        rows: groups.into_iter().map(|(k, rs)| row(mode, k.to_string(), &rs)).collect(),
    }
}

pub fn build(
    opts: &Options,
    bench: &Bench,
    preds: &PredStats,
    diagnostics: Vec<Diagnostic>,
    not_in_mode: Vec<usize>,
    results: Vec<SampleResult>,
) -> Report {
    let mode = opts.mode;
    let mut sections = Vec::new();
    match mode {
        Mode::Corrected => {
            sections.push(section(mode, "overall", &results, |_| Some("all")));
            // Kinds and difficulties sort in their natural order (the sort key is prefixed).
            let mut kinds = section(mode, "kind", &results, |r| Some(r.kind.as_str()));
            kinds.rows.sort_by_key(|r| kind_rank(&r.key));
            sections.push(kinds);
            let mut diff = section(mode, "difficulty", &results, |r| Some(r.difficulty.as_str()));
            diff.rows.sort_by_key(|r| ["easy", "medium", "hard"].iter().position(|d| *d == r.key));
            sections.push(diff);
            sections.push(section(mode, "category", &results, |r| Some(&*r.category)));
            sections.push(section(mode, "scenario", &results, |r| Some(&*r.scenario)));
        }
        Mode::CompatEtom => {
            let mut levels = section(mode, "level", &results, |r| Some(r.kind.as_str()));
            levels.rows.sort_by_key(|r| kind_rank(&r.key));
            sections.push(levels);
        }
        Mode::CompatFinmcp => {
            fn g(i: usize) -> impl Fn(&SampleResult) -> Option<&str> {
                move |r| r.compat_groups.as_ref().map(|g| g[i].as_str())
            }
            sections.push(section(mode, "overall", &results, |_| Some("all")));
            sections.push(section(mode, "class_Level1", &results, g(0)));
            sections.push(section(mode, "difficulty", &results, g(1)));
            sections.push(section(mode, "task", &results, g(2)));
        }
    }
    let mut data_defects = Vec::new();
    for it in &bench.items {
        for d in &it.defects {
            data_defects.push(Defect {
                file: bench.files[it.file].path.clone(),
                id: it.id.clone(),
                message: d.clone(),
            });
        }
    }
    Report {
        mode,
        benches: bench.files.clone(),
        predictions: preds.clone(),
        samples: results.len(),
        sections,
        diagnostics,
        data_defects,
        not_in_mode: not_in_mode.len(),
        left_out: (mode == Mode::CompatFinmcp).then(|| left_out(&results)),
        results,
        bench: None,
    }
}

fn kind_rank(k: &str) -> usize {
    ["L1", "L2", "L3", "L4", "L5", "single_tool", "multi_tool", "multi_turn"].iter().position(|x| *x == k).unwrap_or(99)
}

// ---------------------------------------------------------------------------
// Rendering

fn num(mode: Mode, x: f64) -> String {
    match mode {
        Mode::Corrected => format!("{:.1}", x * 100.0),
        _ => format!("{x:.4}"),
    }
}

fn opt(mode: Mode, x: Option<f64>) -> String {
    x.map(|x| num(mode, x)).unwrap_or_else(|| "–".into())
}

/// Header and cells of one section, shared by the terminal and Markdown renderers.
fn table(mode: Mode, s: &Section) -> (Vec<String>, Vec<Vec<String>>) {
    match mode {
        Mode::Corrected => corrected_table(mode, s),
        Mode::CompatEtom => etom_table(mode, s),
        Mode::CompatFinmcp => finmcp_table(mode, s),
    }
}

/// [`table`] in the corrected mode: every figure, macro and micro, calls and tool sets.
fn corrected_table(mode: Mode, s: &Section) -> (Vec<String>, Vec<Vec<String>>) {
    let t = |x: Option<Triple>, f: fn(&Triple) -> f64| opt(mode, x.as_ref().map(f));
    let head = [
        &s.dimension as &str,
        "N",
        "EM",
        "node EM",
        "P",
        "R",
        "F1",
        "µP",
        "µR",
        "µF1",
        "set P",
        "set R",
        "set F1",
        "set µP",
        "set µR",
        "set µF1",
        "wrong",
        "missing",
        "malformed",
    ];
    let rows = s
        .rows
        .iter()
        .map(|r| {
            vec![
                r.key.clone(),
                r.n.to_string(),
                num(mode, r.em),
                opt(mode, r.node_set_em),
                t(r.calls_macro, |x| x.p),
                t(r.calls_macro, |x| x.r),
                t(r.calls_macro, |x| x.f1),
                t(r.calls_micro, |x| x.p),
                t(r.calls_micro, |x| x.r),
                t(r.calls_micro, |x| x.f1),
                t(r.set_macro, |x| x.p),
                t(r.set_macro, |x| x.r),
                t(r.set_macro, |x| x.f1),
                t(r.set_micro, |x| x.p),
                t(r.set_micro, |x| x.r),
                t(r.set_micro, |x| x.f1),
                r.wrong.to_string(),
                r.missing.to_string(),
                r.malformed.to_string(),
            ]
        })
        .collect();
    (head.iter().map(|h| h.to_string()).collect(), rows)
}

/// [`table`] in `--compat etom`: the published ETOM evaluator's columns.
fn etom_table(mode: Mode, s: &Section) -> (Vec<String>, Vec<Vec<String>>) {
    let t = |x: Option<Triple>, f: fn(&Triple) -> f64| opt(mode, x.as_ref().map(f));
    let head = [
        "level",
        "N",
        "exact_match_rate",
        "precision",
        "recall",
        "f1",
        "f1 sample_size",
        "tp",
        "fp",
        "fn",
        "level_specific",
    ];
    let rows = s
        .rows
        .iter()
        .map(|r| {
            vec![
                r.key.clone(),
                r.n.to_string(),
                num(mode, r.em),
                t(r.calls_macro, |x| x.p),
                t(r.calls_macro, |x| x.r),
                t(r.calls_macro, |x| x.f1),
                r.calls_n.to_string(),
                r.support.tp.to_string(),
                r.support.fp.to_string(),
                r.support.fn_.to_string(),
                r.extras.iter().map(|(k, v)| format!("{k}={}", fmt_extra(*v))).collect::<Vec<_>>().join(" "),
            ]
        })
        .collect();
    (head.iter().map(|h| h.to_string()).collect(), rows)
}

/// [`table`] in `--compat finmcp`: the published FinMCP evaluator's columns.
fn finmcp_table(mode: Mode, s: &Section) -> (Vec<String>, Vec<Vec<String>>) {
    let t = |x: Option<Triple>, f: fn(&Triple) -> f64| opt(mode, x.as_ref().map(f));
    let head = [
        &s.dimension as &str,
        "N",
        "macro_Precision",
        "macro_Recall",
        "macro_F1",
        "micro_Precision",
        "micro_Recall",
        "micro_F1",
        "consist_mean",
    ];
    let rows = s
        .rows
        .iter()
        .map(|r| {
            vec![
                r.key.clone(),
                r.n.to_string(),
                t(r.calls_macro, |x| x.p),
                t(r.calls_macro, |x| x.r),
                t(r.calls_macro, |x| x.f1),
                t(r.calls_micro, |x| x.p),
                t(r.calls_micro, |x| x.r),
                t(r.calls_micro, |x| x.f1),
                num(mode, r.em),
            ]
        })
        .collect();
    (head.iter().map(|h| h.to_string()).collect(), rows)
}

/// `--compat finmcp`: what N leaves out and why, when anything is left out.
fn left_out_line(rep: &Report) -> Option<String> {
    let l = rep.left_out?;
    let parts: Vec<String> = [
        (l.error_records, "error record(s) dropped (--drop_error_data)"),
        (l.skipped, "record(s) skipped on a KeyError"),
        (l.stopped, "record(s) on which evaluation.py would stop with no figures (errors, listed below)"),
        (l.no_record, "benchmark sample(s) without a record"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    (!parts.is_empty()).then(|| format!("Left out of N: {}.", parts.join(", ")))
}

fn fmt_extra(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v:.4}") }
}

fn width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

fn mode_title(mode: Mode) -> &'static str {
    match mode {
        Mode::Corrected => "corrected metrics (percent; P/R/F1 = macro mean, µ = micro)",
        Mode::CompatEtom => "--compat etom: the published ETOM evaluator's statistics",
        Mode::CompatFinmcp => "--compat finmcp: the published FinMCP evaluator's output",
    }
}

const SHOWN: usize = 20;

/// The terminal rendering.
pub fn render_text(rep: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "score: {}", mode_title(rep.mode));
    for b in &rep.benches {
        let lvl = b.level.map(|l| format!(" level {l}")).unwrap_or_default();
        let _ = writeln!(out, "  bench {} ({:?}{lvl}): {} samples", b.path, b.format, b.samples);
    }
    let fm: Vec<String> = rep.predictions.formats.iter().map(|(f, n)| format!("{n} {f:?}")).collect();
    let _ = writeln!(
        out,
        "  predictions {}: {} records ({})",
        rep.predictions.path,
        rep.predictions.records,
        fm.join(", ")
    );
    for s in &rep.sections {
        out.push('\n');
        let (head, rows) = table(rep.mode, s);
        let mut widths: Vec<usize> = head.iter().map(|h| width(h)).collect();
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(width(c));
            }
        }
        let line = |cells: &[String]| {
            let mut l = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i] - width(c);
                if i == 0 || i == cells.len() - 1 && rep.mode == Mode::CompatEtom {
                    l.push_str(c);
                    l.push_str(&" ".repeat(pad));
                } else {
                    l.push_str(&" ".repeat(pad));
                    l.push_str(c);
                }
                l.push_str("  ");
            }
            l.trim_end().to_string()
        };
        let _ = writeln!(out, "{}", line(&head));
        for r in &rows {
            let _ = writeln!(out, "{}", line(r));
        }
    }
    if rep.not_in_mode > 0 {
        let _ = writeln!(out, "\n{} sample(s) of the other family are not scored in this mode.", rep.not_in_mode);
    }
    if let Some(line) = left_out_line(rep) {
        let _ = writeln!(out, "\n{line}");
    }
    if !rep.data_defects.is_empty() {
        let _ = writeln!(out, "\n{} data defect(s) in the reference:", rep.data_defects.len());
        for d in rep.data_defects.iter().take(SHOWN) {
            let _ = writeln!(out, "  - {} {}: {}", d.file, d.id, d.message);
        }
        if rep.data_defects.len() > SHOWN {
            let _ = writeln!(out, "  … and {} more (all in --json / --markdown)", rep.data_defects.len() - SHOWN);
        }
    }
    if !rep.diagnostics.is_empty() {
        let _ = writeln!(out, "\n{} diagnostic(s):", rep.diagnostics.len());
        for d in rep.diagnostics.iter().take(SHOWN) {
            let _ = writeln!(out, "  - {}", diag_line(d));
        }
        if rep.diagnostics.len() > SHOWN {
            let _ = writeln!(out, "  … and {} more (all in --json / --markdown)", rep.diagnostics.len() - SHOWN);
        }
    }
    out
}

fn diag_line(d: &Diagnostic) -> String {
    let id = d.id.as_ref().map(|i| format!(" ({i})")).unwrap_or_default();
    format!("{} {}{id}: {}", d.file, d.location, d.message)
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The Markdown rendering (everything, nothing capped).
pub fn render_markdown(rep: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Scores: {}\n", mode_title(rep.mode));
    for b in &rep.benches {
        let lvl = b.level.map(|l| format!(", level {l}")).unwrap_or_default();
        let _ = writeln!(out, "- benchmark `{}` ({:?}{lvl}): {} samples", b.path, b.format, b.samples);
    }
    let _ = writeln!(out, "- predictions `{}`: {} records", rep.predictions.path, rep.predictions.records);
    let _ = writeln!(out, "- samples scored: {}", rep.samples);
    if let Some(line) = left_out_line(rep) {
        let _ = writeln!(out, "- {line}");
    }
    for s in &rep.sections {
        let _ = writeln!(out, "\n## By {}\n", s.dimension);
        let (head, rows) = table(rep.mode, s);
        let _ = writeln!(out, "| {} |", head.iter().map(|h| md_escape(h)).collect::<Vec<_>>().join(" | "));
        let _ = writeln!(
            out,
            "|{}",
            head.iter().enumerate().map(|(i, _)| if i == 0 { " --- |" } else { " ---: |" }).collect::<String>()
        );
        for r in rows {
            let _ = writeln!(out, "| {} |", r.iter().map(|c| md_escape(c)).collect::<Vec<_>>().join(" | "));
        }
    }
    if !rep.data_defects.is_empty() {
        let _ = writeln!(out, "\n## Data defects ({})\n", rep.data_defects.len());
        for d in &rep.data_defects {
            let _ = writeln!(out, "- `{}` {}: {}", d.file, md_escape(&d.id), md_escape(&d.message));
        }
    }
    if !rep.diagnostics.is_empty() {
        let _ = writeln!(out, "\n## Diagnostics ({})\n", rep.diagnostics.len());
        for d in &rep.diagnostics {
            let _ = writeln!(out, "- {}", md_escape(&diag_line(d)));
        }
    }
    out
}

/// `--per-sample`: one JSON object per scored sample, in benchmark order.
pub fn render_per_sample(rep: &Report) -> Vec<u8> {
    let mut out = Vec::with_capacity(rep.results.len() * 200);
    for r in &rep.results {
        serde_json::to_writer(&mut out, r).expect("serialisable");
        out.push(b'\n');
    }
    out
}
