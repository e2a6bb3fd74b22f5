//! `benchgen run` and `benchgen status`: the stages of a pipeline config in
//! order, with their freshness.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::embed::EmbedStage;
use crate::error::UsageError;
use crate::filter::FilterStage;
use crate::registry::CatalogStage;
use crate::settings::Settings;
use crate::stage::{self, Ctx, Freshness, Stage, StageReport};
use crate::stats::StatsStage;

/// Stage names in pipeline order.
pub const STAGES: &[&str] = &[
    "catalog",
    "filter",
    "embed",
    "efs-pairs",
    "efs-verify",
    "efs-build",
    "efs-topdown",
    "efs",
    "stats",
    "logs-import",
    "logs-curate",
    "logs-split",
    "graph-build",
];

/// The stages of the pipeline, in order. The catalog stage is absent when the
/// config names no registry source (it can still be imported by hand); `embed` and
/// `efs-pairs` are part of the pipeline when the config has an `[embed]` or `[efs]`
/// section, the LLM-backed EFS stages (and finalize) when it has `[efs]`.
pub fn stages(settings: &Settings) -> Vec<(&'static str, Result<Box<dyn Stage>>)> {
    let embed = settings.config.embed.is_some() || settings.config.efs.is_some();
    let efs = settings.config.efs.is_some();
    let all: Vec<(&'static str, Result<Box<dyn Stage>>)> = vec![
        ("catalog", CatalogStage::from_settings(settings, None, None, false).map(|s| Box::new(s) as Box<dyn Stage>)),
        ("filter", Ok(Box::new(FilterStage))),
        ("embed", Ok(Box::new(EmbedStage))),
        ("efs-pairs", Ok(Box::new(crate::efs::pairs::PairsStage))),
        ("efs-verify", Ok(Box::new(crate::efs::verify::VerifyStage))),
        ("efs-build", Ok(Box::new(crate::efs::build::BuildStage))),
        ("efs-topdown", Ok(Box::new(crate::efs::topdown::TopdownStage))),
        ("efs", Ok(Box::new(crate::efs::finalize::FinalizeStage))),
        ("stats", Ok(Box::new(StatsStage))),
        ("logs-import", Ok(Box::new(crate::logs::import::ImportStage))),
        ("logs-curate", Ok(Box::new(crate::logs::curate::CurateStage))),
        ("logs-split", Ok(Box::new(crate::logs::split::SplitStage))),
        ("graph-build", Ok(Box::new(crate::graph::build::BuildStage))),
    ];
    let logs = settings.config.logs.is_some();
    let graph = logs && settings.config.graph.is_some();
    let registry = settings.config.registry.source.is_some() || !logs;
    all.into_iter()
        .filter(|(name, _)| match *name {
            "embed" | "efs-pairs" => embed,
            "efs-verify" | "efs-build" | "efs-topdown" | "efs" => efs,
            "logs-import" | "logs-curate" | "logs-split" => logs,
            "graph-build" => graph,
            "catalog" | "filter" | "stats" => registry,
            _ => true,
        })
        .collect()
}

/// Freshness of every stage, in order.
pub fn status(settings: &Settings) -> Vec<StatusRow> {
    let mut states: BTreeMap<String, Freshness> = BTreeMap::new();
    let mut rows = Vec::new();
    for (name, stage) in stages(settings) {
        let (command, state) = match &stage {
            Ok(s) => (s.command(), stage::freshness(s.as_ref(), settings, &states)),
            Err(e) => ("registry import", Freshness::Missing(format!("{e:#}"))),
        };
        let manifest = stage::Manifest::load(&settings.artifacts, name).ok().flatten();
        states.insert(name.to_string(), state.clone());
        rows.push(StatusRow {
            stage: name,
            command,
            state,
            run_id: manifest.as_ref().map(|m| m.run_id),
            finished_at: manifest.map(|m| m.finished_at),
        });
    }
    rows
}

#[derive(Debug, Serialize)]
pub struct StatusRow {
    pub stage: &'static str,
    pub command: &'static str,
    #[serde(flatten)]
    pub state: Freshness,
    pub run_id: Option<i64>,
    pub finished_at: Option<String>,
}

pub fn render_status(rows: &[StatusRow]) -> String {
    let mut s = String::new();
    for r in rows {
        let (word, reason) = match &r.state {
            Freshness::Done => ("done", String::new()),
            Freshness::Stale(why) => ("stale", format!(" — {why}")),
            Freshness::Missing(why) => ("missing", format!(" — {why}")),
        };
        let run = r.run_id.map(|id| format!(" (run {id})")).unwrap_or_default();
        s.push_str(&format!("{:<10} {:<8}{run}{reason}\n", r.stage, word));
    }
    s
}

fn index_of(name: &str) -> Result<usize> {
    STAGES
        .iter()
        .position(|s| *s == name)
        .ok_or_else(|| UsageError(format!("unknown stage `{name}`; the stages are: {}", STAGES.join(", "))).into())
}

/// Run the stages from `from` to `until` (inclusive), skipping fresh ones.
pub fn run(ctx: &Ctx, from: Option<&str>, until: Option<&str>, force: bool) -> Result<Vec<StageReport>> {
    let lo = from.map(index_of).transpose()?.unwrap_or(0);
    let hi = until.map(index_of).transpose()?.unwrap_or(STAGES.len() - 1);
    if lo > hi {
        return Err(UsageError(format!("`--from {}` comes after `--until {}`", STAGES[lo], STAGES[hi])).into());
    }
    let mut states: BTreeMap<String, Freshness> = BTreeMap::new();
    let mut reports = Vec::new();
    for (name, stage) in stages(ctx.settings) {
        let stage = stage?;
        let i = index_of(name)?;
        if i < lo || i > hi {
            states.insert(name.into(), stage::freshness(stage.as_ref(), ctx.settings, &states));
            continue;
        }
        ctx.printer.info(&format!("running `{}` …", stage.command()));
        let report = stage::execute(ctx.settings, ctx.printer, stage.as_ref(), force, &states)?;
        // Each result as soon as it is known; `--json` gets the whole list at the end.
        ctx.printer.partial(&render_report(&report));
        states.insert(name.into(), Freshness::Done);
        reports.push(report);
    }
    Ok(reports)
}

pub fn render_report(r: &StageReport) -> String {
    let mut s = match r.status {
        "skipped" => format!("{}: up to date, skipped (run {})\n", r.stage, r.run_id.unwrap_or_default()),
        _ => format!("{}: done (run {}) in {} ms\n", r.stage, r.run_id.unwrap_or_default(), r.duration_ms),
    };
    if r.status != "skipped" {
        for n in &r.notes {
            s.push_str(&format!("  {n}\n"));
        }
    }
    s
}
