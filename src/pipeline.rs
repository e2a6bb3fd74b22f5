//! `benchgen run` and `benchgen status`: the stages of a pipeline config (see
//! [`crate::stages`]) in order, with their freshness.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::error::UsageError;
use crate::printer::Printer;
use crate::settings::Settings;
use crate::stage::{self, Ctx, Freshness, RunStatus, StageReport};

/// Freshness of every stage of the pipeline, in order.
pub fn status(settings: &Settings) -> Vec<StatusRow> {
    status_of(settings, crate::stages::enabled(settings), true)
}

/// Freshness of every stage in the list, enabled or not (what a stage run on
/// its own checks its upstream against).
pub fn states(settings: &Settings) -> BTreeMap<String, Freshness> {
    status_of(settings, crate::stages::all(), false).into_iter().map(|r| (r.stage.to_string(), r.state)).collect()
}

/// `with_waiting`: also say what a release waiting for people waits for (reads the review
/// decisions and, when they accept samples, the eval audit of the candidate).
fn status_of(settings: &Settings, stages: Vec<Box<dyn crate::stage::Stage>>, with_waiting: bool) -> Vec<StatusRow> {
    let mut states: BTreeMap<String, Freshness> = BTreeMap::new();
    let mut rows = Vec::new();
    let release = crate::stage::Stage::spec(&crate::release::ReleaseStage).name;
    for stage in stages {
        let spec = stage.spec();
        let (name, command) = (spec.name, spec.command);
        let state = stage::freshness(stage.as_ref(), settings, &states);
        let manifest = stage::Manifest::load(&settings.artifacts, name).ok().flatten();
        states.insert(name.to_string(), state.clone());
        // A release not yet made because samples wait for people says so.
        let waiting = (with_waiting && name == release && state != Freshness::Done)
            .then(|| crate::release::waiting_for_review(settings))
            .flatten()
            .map(|w| Waiting { message: w.message, next: w.next });
        rows.push(StatusRow {
            stage: name,
            command,
            state,
            waiting,
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
    /// The release stage only: nothing accepted yet, samples wait for review.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
}

/// What the pipeline waits for, and what to do.
#[derive(Debug, Serialize)]
pub struct Waiting {
    pub message: String,
    pub next: String,
}

pub fn render_status(rows: &[StatusRow]) -> String {
    let width = rows.iter().map(|r| r.stage.len()).max().unwrap_or(0);
    let mut s = String::new();
    for r in rows {
        let (word, reason) = match &r.state {
            Freshness::Done => ("done", String::new()),
            Freshness::Stale(why) => ("stale", format!(" — {why}")),
            Freshness::Missing(why) => ("missing", format!(" — {why}")),
        };
        let run = r.run_id.map(|id| format!(" (run {id})")).unwrap_or_default();
        s.push_str(&format!("{:<width$} {:<8}{run}{reason}\n", r.stage, word));
    }
    for w in rows.iter().filter_map(|r| r.waiting.as_ref()) {
        s.push_str(&format!("\nwaiting for people: {}\nnext: {}\n", w.message, w.next));
    }
    s
}

/// Run the stages from `from` to `until` (inclusive), skipping fresh ones.
pub fn run(ctx: &Ctx, from: Option<&str>, until: Option<&str>, force: bool) -> Result<Vec<StageReport>> {
    let names = crate::stages::names();
    let index_of = |name: &str| -> Result<usize> {
        names
            .iter()
            .position(|s| *s == name)
            .ok_or_else(|| UsageError(format!("unknown stage `{name}`; the stages are: {}", names.join(", "))).into())
    };
    let lo = from.map(index_of).transpose()?.unwrap_or(0);
    let hi = until.map(index_of).transpose()?.unwrap_or(names.len() - 1);
    if lo > hi {
        return Err(UsageError(format!("`--from {}` comes after `--until {}`", names[lo], names[hi])).into());
    }
    let mut states: BTreeMap<String, Freshness> = BTreeMap::new();
    let mut reports = Vec::new();
    // Only where stages are announced (not under `--quiet` or `--json`).
    let mut pace = (!ctx.printer.quiet && !ctx.printer.json).then(crate::estimate::Pace::default);
    for stage in crate::stages::enabled(ctx.settings) {
        let spec = stage.spec();
        let i = index_of(spec.name)?;
        // Out of range too: what it prepares (the review outbox) is what later stages see.
        stage.prepare(ctx.settings, ctx.printer)?;
        if i < lo || i > hi {
            states.insert(spec.name.into(), stage::freshness(stage.as_ref(), ctx.settings, &states));
            continue;
        }
        let announcing = Printer { announce: true, ..*ctx.printer };
        let note = || pace.as_ref().and_then(|p| p.note(ctx.settings, stage.as_ref()));
        let report = match stage::execute_noted(ctx.settings, &announcing, stage.as_ref(), force, &states, &note) {
            Ok(r) => r,
            Err(e) => {
                // Waiting for people is a result, not a failure: `--json` gets the stages run
                // so far and what waits (exit code 3 all the same).
                let waiting = e.chain().find_map(|x| x.downcast_ref::<crate::error::Waiting>());
                if let Some(w) = waiting.filter(|_| ctx.printer.json) {
                    let value =
                        serde_json::json!({"reports": reports, "waiting": {"message": w.message, "next": w.next}});
                    ctx.printer.summary("", &value);
                }
                return Err(e);
            }
        };
        // Each result as soon as it is known; `--json` gets the whole list at the end.
        ctx.printer.partial(&render_report(&report));
        if let (Some(p), Some(run)) = (pace.as_mut(), report.run_id.filter(|_| report.status == RunStatus::Ran)) {
            p.update(ctx.settings, run);
        }
        states.insert(spec.name.into(), Freshness::Done);
        reports.push(report);
    }
    Ok(reports)
}

/// Run one stage on its own (its command): prepared, then run unless fresh; its
/// upstream stages must have run.
pub fn run_one(ctx: &Ctx, stage: &dyn crate::stage::Stage, force: bool) -> Result<()> {
    // Prepared before the upstream states are taken, as `run` does.
    stage.prepare(ctx.settings, ctx.printer)?;
    let states = states(ctx.settings);
    let report = stage::execute(ctx.settings, ctx.printer, stage, force, &states)?;
    ctx.printer.summary(&render_report(&report), &report);
    stage.after_command(ctx.settings, ctx.printer);
    Ok(())
}

pub fn render_report(r: &StageReport) -> String {
    let mut s = match r.status {
        RunStatus::Skipped => format!("{}: up to date, skipped (run {})\n", r.stage, r.run_id.unwrap_or_default()),
        _ => format!("{}: done (run {}) in {} ms\n", r.stage, r.run_id.unwrap_or_default(), r.duration_ms),
    };
    if r.status != RunStatus::Skipped {
        for n in &r.notes {
            s.push_str(&format!("  {n}\n"));
        }
    }
    s
}
