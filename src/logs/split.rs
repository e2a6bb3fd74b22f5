//! `benchgen logs split` (stage `logs-split`): curated single-tool sessions (exactly one
//! call) → a benchmark pool and a seed pool; multi-tool sessions (two calls or more) →
//! the graph source set.
//!
//! Stratified and seeded: sessions are shuffled with ChaCha8 seeded from the project
//! seed; the seed pool first takes one session of every stratum (tool × sub-scenario,
//! strata in sorted order) so that every tool and sub-scenario keeps a seed example, then
//! fills up to its size round-robin over the strata. The seed-pool size is `seed_size`,
//! else `seed_ratio` (default 0.5) of the single-tool sessions; the benchmark pool takes
//! the rest, up to `benchmark_size`. Sessions left over are listed as `unused`.
//!
//! Outputs: `benchmark.jsonl`, `seed.jsonl`, `graph_source.jsonl`, `split.json`
//! (ids per pool, coverage: catalog tools and sub-scenarios without a seed example).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::Serialize;
use serde_json::json;

use super::{Session, SplitSettings};
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const STAGE: &str = "logs-split";

/// Multi-tool sessions (one JSON [`Session`] a line), read by `graph build`.
pub const GRAPH_SOURCE: Artifact<Session> = Artifact::new(STAGE, "graph_source.jsonl");
/// Single-tool sessions of the benchmark pool.
pub const BENCHMARK: Artifact<Session> = Artifact::new(STAGE, "benchmark.jsonl");
/// Single-tool sessions of the seed pool.
pub const SEED: Artifact<Session> = Artifact::new(STAGE, "seed.jsonl");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "logs split",
    version: 3,
    about: "curated sessions → seeded, stratified benchmark and seed pools, and the graph source",
    reads: &[super::curate::CURATED.read(), super::import::CATALOG.read()],
    writes: &["benchmark.jsonl", "seed.jsonl", "graph_source.jsonl", "split.json"],
    section: Some("logs"),
};

#[derive(Debug, Serialize, PartialEq)]
pub struct Split {
    pub benchmark: Vec<String>,
    pub seed: Vec<String>,
    pub graph_source: Vec<String>,
    pub unused: Vec<String>,
    /// Sessions in none of the pools (no call), with the reason.
    pub left_out: Vec<(String, String)>,
    pub coverage: Coverage,
}

#[derive(Debug, Serialize, PartialEq, Default)]
pub struct Coverage {
    pub tools_without_seed: Vec<String>,
    pub sub_scenarios_without_seed: Vec<String>,
}

/// The split itself (pure, so tests can call it).
pub fn split(sessions: &[Session], cfg: &SplitSettings, seed: u64, catalog_tools: &[String]) -> Split {
    let mut singles: Vec<&Session> = Vec::new();
    let mut out = Split {
        benchmark: vec![],
        seed: vec![],
        graph_source: vec![],
        unused: vec![],
        left_out: vec![],
        coverage: Coverage::default(),
    };
    for s in sessions {
        match s.call_count() {
            0 => out.left_out.push((s.id.clone(), "no tool call".into())),
            1 => singles.push(s),
            _ => out.graph_source.push(s.id.clone()),
        }
    }
    singles.sort_by(|a, b| a.id.cmp(&b.id));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x6c6f_6773_706c_6974);
    singles.shuffle(&mut rng);
    let stratum = |s: &Session| (s.calls().next().map(|c| c.tool.clone()).unwrap_or_default(), s.sub_scenario());
    let mut strata: BTreeMap<(String, String), Vec<&Session>> = BTreeMap::new();
    for s in &singles {
        strata.entry(stratum(s)).or_default().push(s);
    }
    let n = singles.len();
    let target = cfg.seed_size.unwrap_or_else(|| (n as f64 * cfg.seed_ratio.unwrap_or(0.5)).round() as usize).min(n);
    let mut seed: BTreeSet<&str> = BTreeSet::new();
    // Round 0 covers every stratum; later rounds fill proportionally.
    let mut round = 0;
    while seed.len() < target {
        let mut took = false;
        for members in strata.values() {
            if seed.len() >= target {
                break;
            }
            if let Some(s) = members.get(round) {
                seed.insert(&s.id);
                took = true;
            }
        }
        if !took {
            break;
        }
        round += 1;
    }
    let mut bench_left = cfg.benchmark_size.unwrap_or(usize::MAX);
    for s in &singles {
        if seed.contains(s.id.as_str()) {
            out.seed.push(s.id.clone());
        } else if bench_left > 0 {
            out.benchmark.push(s.id.clone());
            bench_left -= 1;
        } else {
            out.unused.push(s.id.clone());
        }
    }
    for v in [&mut out.seed, &mut out.benchmark, &mut out.unused, &mut out.graph_source] {
        v.sort();
    }
    let seeded_tools: BTreeSet<String> =
        singles.iter().filter(|s| seed.contains(s.id.as_str())).map(|s| stratum(s).0).collect();
    let seeded_subs: BTreeSet<String> =
        singles.iter().filter(|s| seed.contains(s.id.as_str())).map(|s| s.sub_scenario()).collect();
    let mut all_tools: BTreeSet<String> = catalog_tools.iter().cloned().collect();
    all_tools.extend(sessions.iter().flat_map(|s| s.calls().map(|c| c.tool.clone())));
    let all_subs: BTreeSet<String> = sessions.iter().map(Session::sub_scenario).collect();
    out.coverage.tools_without_seed = all_tools.difference(&seeded_tools).cloned().collect();
    out.coverage.sub_scenarios_without_seed = all_subs.difference(&seeded_subs).cloned().collect();
    out
}

pub struct SplitStage;

impl Stage for SplitStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Single-tool sessions → benchmark and seed pools (seeded, stratified by tool and
         sub-scenario); multi-tool sessions → the graph source set. Reports coverage.

         Reads `logs-curate/curated.jsonl` and `logs-import/catalog.json`. Writes
         `artifacts/logs-split/`: `benchmark.jsonl`, `seed.jsonl`, `graph_source.jsonl`
         and `split.json` (ids per pool, coverage)."
    }
    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        let sp = super::import::settings(s).split;
        if let Some(r) = sp.seed_ratio
            && !(0.0..=1.0).contains(&r)
        {
            problems.push(crate::error::Problem::new("logs.split.seed_ratio", format!("is {r}; it must be in [0, 1]")));
        }
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        Ok(Plan {
            inputs: vec![],
            config_hash: section_hash(&json!({"split": super::import::settings(s).split, "seed": s.project.seed}))?,
        })
    }
    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let sessions = super::read_sessions(inputs.open_of(&super::curate::CURATED)?, "logs-curate/curated.jsonl")?;
        let catalog = inputs.json(&super::import::CATALOG)?;
        let names: Vec<String> = catalog.into_iter().map(|t| t.name).collect();
        let sp = split(&sessions, &super::import::settings(s).split, s.project.seed, &names);
        let by_id: BTreeMap<&str, &Session> = sessions.iter().map(|x| (x.id.as_str(), x)).collect();
        for (file, ids) in
            [("benchmark.jsonl", &sp.benchmark), ("seed.jsonl", &sp.seed), ("graph_source.jsonl", &sp.graph_source)]
        {
            let mut w = out.create(file)?;
            super::write_sessions(&mut w, ids.iter().map(|i| by_id[i.as_str()]))?;
            w.finish()?;
        }
        // Each split record's parent: the session's curation decision.
        let curated = crate::ledger::Ledger::ids_by_subject_in(
            &s.artifacts,
            super::kind::DECISION,
            ctx.manifest_of(super::curate::STAGE).map(|m| m.run_id),
        )?;
        let decided =
            |id: &str, ev: crate::ledger::NewEvent| match curated.get(&super::subject(id)).and_then(|i| i.last()) {
                Some(p) => ev.with_parent(crate::ledger::Parent::Id(*p)),
                None => ev,
            };
        for (pool, ids) in [
            ("benchmark", &sp.benchmark),
            ("seed", &sp.seed),
            ("graph_source", &sp.graph_source),
            ("unused", &sp.unused),
        ] {
            for id in ids.iter() {
                out.event(decided(
                    id,
                    crate::ledger::NewEvent::new(super::kind::SPLIT, Some(&super::subject(id)), json!({"pool": pool})),
                ));
            }
        }
        for (id, reason) in &sp.left_out {
            out.event(decided(
                id,
                crate::ledger::NewEvent::new(
                    super::kind::SPLIT,
                    Some(&super::subject(id)),
                    json!({"pool": "none", "reason": reason}),
                ),
            ));
        }
        out.json("split.json", &sp)?;
        out.count("benchmark", sp.benchmark.len());
        out.count("seed", sp.seed.len());
        out.count("graph_source", sp.graph_source.len());
        out.count("unused", sp.unused.len());
        out.notes.push(format!(
            "single-tool: {} benchmark, {} seed ({} unused); multi-tool: {} for the graph",
            sp.benchmark.len(),
            sp.seed.len(),
            sp.unused.len(),
            sp.graph_source.len()
        ));
        if !sp.coverage.tools_without_seed.is_empty() || !sp.coverage.sub_scenarios_without_seed.is_empty() {
            out.notes.push(format!(
                "no seed example for {} tool(s) [{}] and {} sub-scenario(s) [{}]",
                sp.coverage.tools_without_seed.len(),
                sp.coverage.tools_without_seed.join(", "),
                sp.coverage.sub_scenarios_without_seed.len(),
                sp.coverage.sub_scenarios_without_seed.join(", ")
            ));
        }
        Ok(())
    }
}

pub fn path(s: &Settings, file: &str) -> std::path::PathBuf {
    s.artifacts.join(STAGE).join(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::{Call, Turn};

    fn session(id: &str, tools: &[&str], scenario: &str) -> Session {
        let groups = tools
            .iter()
            .map(|t| {
                vec![Call {
                    tool: t.to_string(),
                    arguments: json!({}),
                    result: None,
                    error: None,
                    ts_start: None,
                    ts_end: None,
                    flags: vec![],
                }]
            })
            .collect();
        Session {
            id: id.into(),
            source: "s".into(),
            format: "events".into(),
            location: "f:1".into(),
            scenario: Some(scenario.into()),
            feedback: None,
            turns: vec![Turn { user: "u".into(), groups, answer: None }],
            flags: vec![],
            meta: Default::default(),
        }
    }

    #[test]
    fn every_stratum_keeps_a_seed_example_and_the_split_is_seeded() {
        let mut sessions = Vec::new();
        for i in 0..60 {
            sessions.push(session(&format!("a{i:02}"), &["common"], "X-One"));
        }
        sessions.push(session("rare", &["rare_tool"], "Y-Two"));
        sessions.push(session("multi", &["common", "rare_tool"], "X-One"));
        sessions.push(session("none", &[], "X-One"));
        let cfg = SplitSettings { seed_size: Some(5), benchmark_size: Some(40), seed_ratio: None };
        let sp = split(&sessions, &cfg, 1, &["common".into(), "rare_tool".into(), "never_used".into()]);
        assert_eq!(sp.seed.len(), 5);
        assert!(sp.seed.contains(&"rare".to_string()), "the rare stratum keeps its only example as seed");
        assert_eq!(sp.benchmark.len(), 40);
        assert_eq!(sp.unused.len(), 61 - 45);
        assert_eq!(sp.graph_source, ["multi"]);
        assert_eq!(sp.left_out, [("none".to_string(), "no tool call".to_string())]);
        assert_eq!(sp.coverage.tools_without_seed, ["never_used"]);
        assert!(sp.coverage.sub_scenarios_without_seed.is_empty());
        assert_eq!(split(&sessions, &cfg, 1, &[]).seed, sp.seed, "same seed, same split");
        assert_ne!(split(&sessions, &cfg, 2, &[]).seed, sp.seed, "another seed, another split");
    }
}
