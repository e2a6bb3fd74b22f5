//! `benchgen levels export` (stage `levels-export`): the five levels as ETOM's files and as
//! unified samples.
//!
//! - `level_1.json` … `level_5.json` in ETOM's shapes (reference-pipelines.md D.2): L1 a
//!   one-tool flat list; L2 one row per EFS member (member first, then the others); L3 a
//!   flat list with 0-based `dependencies` and `dependency_visualization`; L4 one row per
//!   step (primary, then its EFS alternatives, all with the step's dependencies); L5 an
//!   empty list plus `category` (the capability gap). Ids run from 1 without gaps, in the
//!   order of the level's provenance keys; descriptions are the catalog's.
//! - `samples.jsonl`: the same queries as [`crate::model::Sample`]s (ids `L<level>-<id>`,
//!   as `benchgen score` names ETOM queries), the sample pool's `LEVELS` handle.
//! - `report.md` with a statistics table in the shape of ETOM's Table 1, `queries.svg` and
//!   `steps.svg`, and each level's yield funnel; `rejections.csv` lists every rejection.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use serde::Serialize;
use serde_json::Map;

use super::{Generated, LevelOut, Step};
use crate::formats::etom::{GroundTruth, GroundTruthTool, LevelQuery};
use crate::model::{Catalog, Difficulty, Kind, PlanCall, Sample, Turn};
use crate::settings::Settings;
use crate::stage::{Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const STAGE: &str = "levels-export";

/// At most how many samples `levels export` writes, one per kept query, before anything
/// runs: the written file when there is one, else each level's bound (L1 and L2 keep one
/// query per item, L3 `max_queries_per_server` per server, L4 one per attempt, L5 its
/// verified persona queries). `None`: the registry cannot be read yet.
pub fn sample_bound(s: &Settings) -> Option<u64> {
    if let Some(n) = crate::stage::jsonl_lines(&crate::samples::LEVELS.path(s)) {
        return Some(n);
    }
    let l = super::settings(s);
    let c = crate::registry::catalog_size(s, &[crate::filter::CATALOG])?;
    let l5 = (l.l5.universal_tasks * l.l5.personas.len() * l.l5.queries_per_persona) as u64;
    Some(
        crate::stage::capped(c.tools, l.l1.max_items)
            + crate::stage::capped(c.tools, l.l2.max_items)
            + c.servers * l.l3.max_queries_per_server as u64
            + l.l4.attempts as u64
            + l5,
    )
}

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "levels export",
    // 3: a sample whose query was asked again carries the first query's check
    //    (`asked_again`) in its `levels.sample` event.
    // 4: an L5 sample's event says its plan check had no step to decide (`plan_check: []`).
    version: 4,
    about: "ETOM level files level_1.json … level_5.json, unified samples, Table-1 statistics, plots and yield funnels",
    reads: &[
        crate::filter::CATALOG.read(),
        crate::stage::Read::manifest("filter"),
        crate::stage::Read::manifest("efs-finalize"),
        super::l1::QUERIES.read(),
        super::l2::QUERIES.read(),
        super::l3::QUERIES.read(),
        super::l4::QUERIES.read(),
        super::l5::QUERIES.read(),
    ],
    writes: &[
        "level_1.json",
        "level_2.json",
        "level_3.json",
        "level_4.json",
        "level_5.json",
        "samples.jsonl",
        "stats.json",
        "queries.svg",
        "steps.svg",
        "rejections.csv",
        "report.md",
    ],
    section: Some("levels"),
};

fn gt_tool(look: &super::Lookup, id: &str, deps: Option<Vec<usize>>) -> GroundTruthTool {
    let (server, tool) = crate::model::split_tool_id(id).unwrap_or(("", id));
    GroundTruthTool {
        tool_id: id.to_string(),
        server_name: server.to_string(),
        tool_name: tool.to_string(),
        description: look.get(id).map(|(_, t)| t.description.clone()).unwrap_or_default(),
        dependencies: deps,
    }
}

/// ETOM's `ground_truth_tools` for one query of `level`.
pub fn ground_truth(level: u8, steps: &[Step], look: &super::Lookup) -> Vec<GroundTruth> {
    match level {
        1 => steps.iter().map(|s| GroundTruth::Tool(gt_tool(look, &s.tools[0], None))).collect(),
        2 => steps
            .iter()
            .flat_map(|s| super::l2::ground_truth_rows(&s.tools))
            .map(|row| GroundTruth::Row(row.iter().map(|t| gt_tool(look, t, Some(vec![]))).collect()))
            .collect(),
        3 => steps.iter().map(|s| GroundTruth::Tool(gt_tool(look, &s.tools[0], Some(s.depends_on.clone())))).collect(),
        4 => steps
            .iter()
            .map(|s| GroundTruth::Row(s.tools.iter().map(|t| gt_tool(look, t, Some(s.depends_on.clone()))).collect()))
            .collect(),
        _ => vec![],
    }
}

/// ETOM's text tree of an L3 dependency graph: roots (no dependencies) first, children
/// indented under the step they depend on, ` (parallel)` after a step with several children.
pub fn visualization(names: &[String], deps: &[Vec<usize>]) -> String {
    let n = names.len();
    let mut children: Vec<Vec<usize>> = vec![vec![]; n];
    for (i, d) in deps.iter().enumerate() {
        // A step hangs under its last dependency (ETOM draws a tree, not a DAG).
        if let Some(&p) = d.iter().max() {
            children[p].push(i);
        }
    }
    let mut lines = Vec::new();
    fn walk(
        i: usize,
        prefix: &str,
        last: Option<bool>,
        names: &[String],
        children: &[Vec<usize>],
        lines: &mut Vec<String>,
    ) {
        let par = if children[i].len() > 1 { " (parallel)" } else { "" };
        let (head, next) = match last {
            None => (String::new(), String::new()),
            Some(true) => (format!("{prefix}└── "), format!("{prefix}    ")),
            Some(false) => (format!("{prefix}├── "), format!("{prefix}│   ")),
        };
        lines.push(format!("{head}{}: {}{par}", i + 1, names[i]));
        for (k, &c) in children[i].iter().enumerate() {
            walk(c, &next, Some(k + 1 == children[i].len()), names, children, lines);
        }
    }
    for i in (0..n).filter(|&i| deps[i].is_empty()) {
        walk(i, "", None, names, &children, &mut lines);
    }
    lines.join("\n")
}

/// The reference plan of a unified sample: one call per step, grouped by depth.
pub fn plan(steps: &[Step]) -> Vec<PlanCall> {
    let mut depth = vec![0u32; steps.len()];
    for (i, s) in steps.iter().enumerate() {
        depth[i] = s.depends_on.iter().filter(|&&d| d < i).map(|&d| depth[d] + 1).max().unwrap_or(0);
    }
    steps
        .iter()
        .zip(depth)
        .map(|(s, g)| PlanCall { alternatives: s.tools.clone(), group: g, depends_on: s.depends_on.clone() })
        .collect()
}

/// One row of the statistics table (ETOM's Table 1 plus alternatives).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatRow {
    pub level: u8,
    pub queries: usize,
    /// Mean top-level `ground_truth_tools` entries (ETOM's "tools per query").
    pub tools_per_query: f64,
    /// Mean distinct servers of the primary tools.
    pub servers_per_query: f64,
    /// Mean distinct servers counting every alternative (the paper's L4 convention).
    pub servers_all_alternatives: f64,
    /// Mean tools per step (1 = no alternatives).
    pub alternatives_per_step: f64,
}

fn mean(xs: impl Iterator<Item = usize>) -> f64 {
    let v: Vec<usize> = xs.collect();
    if v.is_empty() { 0.0 } else { (v.iter().sum::<usize>() as f64 * 1000.0 / v.len() as f64).round() / 1000.0 }
}

pub fn stat_row(level: u8, qs: &[LevelQuery], gens: &[Generated]) -> StatRow {
    let server = |t: &String| crate::model::split_tool_id(t).map(|(s, _)| s.to_string()).unwrap_or_default();
    StatRow {
        level,
        queries: qs.len(),
        tools_per_query: mean(qs.iter().map(|q| q.ground_truth_tools.len())),
        servers_per_query: mean(
            gens.iter().map(|g| g.steps.iter().map(|s| server(&s.tools[0])).collect::<BTreeSet<_>>().len()),
        ),
        servers_all_alternatives: mean(
            gens.iter().map(|g| g.steps.iter().flat_map(|s| s.tools.iter().map(server)).collect::<BTreeSet<_>>().len()),
        ),
        alternatives_per_step: {
            let steps: Vec<usize> = gens.iter().flat_map(|g| g.steps.iter().map(|s| s.tools.len())).collect();
            mean(steps.into_iter())
        },
    }
}

fn bars_svg(title: &str, bars: &[(String, f64)], x_desc: &str) -> Result<String> {
    use plotters::prelude::*;
    let n = bars.len().max(1);
    let max = bars.iter().map(|b| b.1).fold(1.0_f64, f64::max);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 80 + 40 * n as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("chart: {e}"))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..max * 1.1, (0usize..n).into_segmented())
            .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
        let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(row) if *row < n => labels.get(n - 1 - *row).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .x_desc(x_desc)
            .draw()
            .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
                let row = n - 1 - i;
                let mut r = Rectangle::new(
                    [(0.0, SegmentValue::Exact(row)), (*v, SegmentValue::Exact(row + 1))],
                    RGBColor(66, 113, 196).filled(),
                );
                r.set_margin(4, 4, 0, 0);
                r
            }))
            .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
        root.present().map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    }
    Ok(svg)
}

/// Level files, samples and statistics from the five levels' outputs.
pub fn export(catalog: &Catalog, levels: &[LevelOut], author: &str) -> Result<Exported> {
    let look = super::Lookup::new(catalog);
    let categories: BTreeMap<String, String> = catalog
        .servers
        .iter()
        .map(|s| (s.name.trim().to_string(), s.categories.first().cloned().unwrap_or_default()))
        .collect();
    let mut files = Vec::new();
    let mut samples = Vec::new();
    let mut stats = Vec::new();
    for lv in levels {
        let mut gens = lv.queries.clone();
        gens.sort_by(|a, b| a.key.cmp(&b.key));
        let mut qs = Vec::new();
        for (g, id) in gens.iter().zip(1u64..) {
            let gt = ground_truth(lv.level, &g.steps, &look);
            let mut extra = Map::new();
            if let Some(c) = &g.category {
                extra.insert("category".into(), serde_json::json!(c));
            }
            let viz = (lv.level == 3).then(|| {
                let names: Vec<String> = g
                    .steps
                    .iter()
                    .map(|s| crate::model::split_tool_id(&s.tools[0]).map(|(_, t)| t.to_string()).unwrap_or_default())
                    .collect();
                visualization(&names, &g.steps.iter().map(|s| s.depends_on.clone()).collect::<Vec<_>>())
            });
            qs.push(LevelQuery {
                query_id: crate::formats::RecordId::Number(id.into()),
                query: g.query.clone(),
                ground_truth_tools_count: Some(gt.len()),
                ground_truth_tools: gt,
                dependency_visualization: viz,
                extra,
            });
            let kind = Kind::from_level(lv.level).expect("levels 1–5");
            let reference_plan = plan(&g.steps);
            let mut scenario: Vec<String> = match &g.category {
                Some(c) => vec![c.clone()],
                None => g
                    .steps
                    .iter()
                    .filter_map(|s| crate::model::split_tool_id(&s.tools[0]))
                    .filter_map(|(s, _)| categories.get(s).cloned())
                    .filter(|c| !c.is_empty())
                    .collect(),
            };
            scenario.sort();
            scenario.dedup();
            samples.push(Sample {
                id: format!("L{}-{id}", lv.level),
                family: kind.family(),
                kind,
                scenario,
                difficulty: Difficulty::from_calls(reference_plan.len()),
                turns: vec![Turn { user: g.query.clone(), reference_plan, gold_reply: None, trajectory: vec![] }],
                out_of_scope: lv.level == 5,
                provenance_id: format!("levels-l{}:{}", lv.level, g.key),
                author: Some(format!("llm:{author}")),
            });
        }
        stats.push(stat_row(lv.level, &qs, &gens));
        files.push((lv.level, qs));
    }
    samples.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(Exported { files, samples, stats })
}

pub struct Exported {
    pub files: Vec<(u8, Vec<LevelQuery>)>,
    pub samples: Vec<Sample>,
    pub stats: Vec<StatRow>,
}

pub struct ExportStage;

impl Stage for ExportStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Write `level_1.json` … `level_5.json` (ETOM's shapes), the unified samples and the
         statistics.

         Reads `levels-l1` … `levels-l5` `queries.json` and `filter/catalog.json`. Writes
         `artifacts/levels-export/`: `level_1.json`, `level_2.json`, `level_3.json`,
         `level_4.json`, `level_5.json`, `samples.jsonl`, `stats.json`,
         `queries.svg`, `steps.svg`, `rejections.csv` and `report.md`."
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![], config_hash: crate::settings::section_hash(&super::settings(s).writer_role)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let catalog = inputs.json(&crate::filter::CATALOG)?;
        let levels = vec![
            inputs.json(&super::l1::QUERIES)?,
            inputs.json(&super::l2::QUERIES)?,
            inputs.json(&super::l3::QUERIES)?,
            inputs.json(&super::l4::QUERIES)?,
            inputs.json(&super::l5::QUERIES)?,
        ];
        let ex = export(&catalog, &levels, &super::settings(ctx.settings).writer_role)?;
        for (level, qs) in &ex.files {
            out.json(&format!("level_{level}.json"), qs)?;
            out.count(&format!("level_{level}"), qs.len());
        }
        let mut jsonl = Vec::new();
        for s in &ex.samples {
            serde_json::to_writer(&mut jsonl, s)?;
            jsonl.push(b'\n');
        }
        out.file("samples.jsonl", jsonl);
        out.json("stats.json", &ex.stats)?;
        let q: Vec<(String, f64)> = ex.stats.iter().map(|r| (format!("L{}", r.level), r.queries as f64)).collect();
        out.file("queries.svg", bars_svg("Queries per level", &q, "queries")?.into_bytes());
        let t: Vec<(String, f64)> = ex.stats.iter().map(|r| (format!("L{}", r.level), r.tools_per_query)).collect();
        out.file(
            "steps.svg",
            bars_svg("Reference entries per query (mean)", &t, "ground_truth_tools entries")?.into_bytes(),
        );

        // The project's one CSV writer: tool ids and reasons come from registry text.
        let mut w = crate::csvout::Writer::new();
        w.write_record(["level", "item", "reason"])?;
        let mut md = String::from("# ETOM levels\n\n## Statistics (the shape of ETOM's Table 1)\n\n");
        md.push_str("| level | queries | tools per query | servers per query | servers (all alternatives) | alternatives per step |\n|---|---|---|---|---|---|\n");
        for r in &ex.stats {
            md.push_str(&format!(
                "| L{} | {} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                r.level,
                r.queries,
                r.tools_per_query,
                r.servers_per_query,
                r.servers_all_alternatives,
                r.alternatives_per_step
            ));
        }
        md.push_str(&format!(
            "\nTotal: {} queries. ![queries](queries.svg) ![steps](steps.svg)\n\n## Yield funnels\n",
            ex.samples.len()
        ));
        for lv in &levels {
            md.push_str(&format!("\n### L{}\n\n| step | count |\n|---|---|\n", lv.level));
            for (label, n) in &lv.funnel.steps {
                md.push_str(&format!("| {label} | {n} |\n"));
            }
            let reasons = lv.funnel.reasons();
            if !reasons.is_empty() {
                md.push_str("\n| rejected because | items |\n|---|---|\n");
                for (k, v) in &reasons {
                    md.push_str(&format!("| {k} | {v} |\n"));
                }
            }
            for r in &lv.funnel.rejected {
                w.write_record([format!("L{}", lv.level), r.item.clone(), r.reason.clone()])?;
            }
        }
        md.push_str("\nEvery rejected item with its full reason: `rejections.csv`.\n");
        out.file("rejections.csv", w.into_bytes()?);
        out.file("report.md", md.into_bytes());
        out.count("samples", ex.samples.len());
        for ev in sample_events(ctx, &ex.samples, &levels)? {
            out.event(ev);
        }
        out.notes.push(format!(
            "{} queries: {}",
            ex.samples.len(),
            ex.stats.iter().map(|r| format!("L{} {}", r.level, r.queries)).collect::<Vec<_>>().join(", ")
        ));
        Ok(())
    }
}

/// Ledger kind of an exported level sample (subject `sample:<id>`): the root of its lineage.
pub const SAMPLE_EVENT: &str = "levels.sample";

/// One `levels.sample` event per exported sample, its parents what made it: the level
/// stage's exchanges (writing, verification and asking again, by request hash), the
/// `filter` decision of every tool it names, and for each step with alternatives the final
/// EFS set holding them.
fn sample_events(ctx: &Ctx, samples: &[Sample], levels: &[LevelOut]) -> Result<Vec<crate::ledger::NewEvent>> {
    use crate::ledger::{Ledger, NewEvent, Parent, kind};
    let Some(ledger) = Ledger::open_read_only(&ctx.settings.artifacts)? else { return Ok(Vec::new()) };
    let runs = |st: &str| ctx.manifest_of(st).map(|m| vec![m.run_id]).unwrap_or_default();
    let decisions = ledger.ids_by_subject(kind::FILTER_DECISION, &runs("filter"))?;
    // Each tool of a final set → that set's event.
    let mut set_of: BTreeMap<String, i64> = BTreeMap::new();
    for ev in
        ledger.events_of_kind(runs("efs-finalize").first().copied().unwrap_or(-1), crate::efs::finalize::SET_EVENT)?
    {
        for m in ev.payload["members"].as_array().into_iter().flatten().filter_map(|m| m.as_str()) {
            set_of.insert(m.to_string(), ev.id);
        }
    }
    // Each generated query with the plan check's decisions on its steps (issue 38).
    type WithChecks<'a> = (&'a Generated, Option<&'a super::plan_check::PlanRecord>);
    let generated: BTreeMap<String, WithChecks> = levels
        .iter()
        .flat_map(|lv| {
            lv.queries.iter().map(move |g| (format!("levels-l{}:{}", lv.level, g.key), (g, lv.plan_checks.get(&g.key))))
        })
        .collect();
    // The check's decisions; an L5 query has no plan, so its check decided no step (`[]`),
    // while a missing record of another level stays missing (`null`), which `release
    // verify` reports.
    let plan_check = |s: &Sample, checks: Option<&super::plan_check::PlanRecord>| -> serde_json::Value {
        match (checks, s.kind.level()) {
            (Some(c), _) => serde_json::to_value(&c.decisions).unwrap_or(serde_json::Value::Null),
            (None, Some(5)) => serde_json::Value::Array(vec![]),
            (None, _) => serde_json::Value::Null,
        }
    };
    let mut events = Vec::new();
    for s in samples {
        let Some(&(g, checks)) = generated.get(&s.provenance_id) else { continue };
        let mut parents: BTreeSet<i64> = BTreeSet::new();
        for h in &g.exchanges {
            parents.extend(ledger.exchange_event(h)?);
        }
        let mut sets = BTreeSet::new();
        for step in &g.steps {
            for t in &step.tools {
                parents.extend(decisions.get(t).and_then(|d| d.last()).copied());
            }
            if step.tools.len() > 1 {
                sets.extend(step.tools.iter().filter_map(|t| set_of.get(t)).copied());
            }
        }
        parents.extend(&sets);
        let mut payload = serde_json::json!({"id": s.id, "key": g.key, "exchanges": g.exchanges,
                           "tools": g.steps.iter().map(|x| &x.tools).collect::<Vec<_>>(), "efs_sets": sets.len(),
                           "plan_check": plan_check(s, checks)});
        // The first query and its check, when the writer was asked again (only then, so the
        // events of other samples stay as they were).
        if let Some(a) = checks.and_then(|c| c.asked_again.as_ref()) {
            payload["asked_again"] = serde_json::to_value(a)?;
        }
        let mut ev = NewEvent::new(SAMPLE_EVENT, Some(&Sample::subject_for(&s.id)), payload);
        for p in parents {
            ev = ev.with_parent(Parent::Id(p));
        }
        events.push(ev);
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visualization_draws_a_tree() {
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(visualization(&names, &[vec![], vec![], vec![]]), "1: a\n2: b\n3: c");
        assert_eq!(visualization(&names, &[vec![], vec![0], vec![0]]), "1: a (parallel)\n├── 2: b\n└── 3: c");
    }

    #[test]
    fn plan_groups_by_depth() {
        let steps = vec![
            Step { tools: vec!["s::a".into()], depends_on: vec![] },
            Step { tools: vec!["s::b".into()], depends_on: vec![0] },
            Step { tools: vec!["s::c".into()], depends_on: vec![] },
        ];
        let p = plan(&steps);
        assert_eq!(p.iter().map(|c| c.group).collect::<Vec<_>>(), [0, 1, 0]);
    }
}
