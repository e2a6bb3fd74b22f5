//! The one stage list. `run`, `status`, `explain`, `clean`, `check`, `stages`,
//! command dispatch and the README's stage table all come from [`all`], and
//! every edge between stages comes from the `reads` of their specs.
//!
//! Adding a stage: write its module (a `StageSpec`, its artifact handles and an
//! `impl Stage`), then add one line to [`all`] in pipeline order. See
//! `docs/pipeline.md`, "Adding a stage".

use std::collections::BTreeSet;

use anyhow::Result;
use serde::Serialize;

use crate::error::{InputError, Problem, UsageError};
use crate::settings::{SectionDecl, Settings};
use crate::stage::{ReadKind, Stage, StageSpec};

/// Every stage, in pipeline order.
pub fn all() -> Vec<Box<dyn Stage>> {
    vec![
        Box::new(crate::registry::ImportStage::default()),
        Box::new(crate::filter::FilterStage),
        Box::new(crate::embed::EmbedStage),
        Box::new(crate::efs::pairs::PairsStage),
        Box::new(crate::efs::verify::VerifyStage),
        Box::new(crate::efs::build::BuildStage),
        Box::new(crate::efs::topdown::TopdownStage),
        Box::new(crate::efs::review::ReviewStage::default()),
        Box::new(crate::efs::finalize::FinalizeStage),
        Box::new(crate::stats::StatsStage),
        Box::new(crate::levels::profiles::ProfilesStage),
        Box::new(crate::levels::schemas::SchemasStage),
        Box::new(crate::levels::l1::L1Stage),
        Box::new(crate::levels::l2::L2Stage),
        Box::new(crate::levels::l3::L3Stage),
        Box::new(crate::levels::l4::L4Stage),
        Box::new(crate::levels::l5::L5Stage),
        Box::new(crate::levels::export::ExportStage),
        Box::new(crate::logs::import::ImportStage),
        Box::new(crate::logs::curate::CurateStage),
        Box::new(crate::logs::split::SplitStage),
        Box::new(crate::graph::build::BuildStage),
        Box::new(crate::graph::review::ReviewStage),
        Box::new(crate::synth::chains::ChainsStage),
        Box::new(execute_stage(None)),
        Box::new(crate::synth::roleplay::RoleplayStage),
        Box::new(crate::synth::validate::ValidateStage),
        Box::new(crate::review::assign::AssignStage),
        Box::new(crate::review::sheets::ExportStage),
        Box::new(crate::review::sheets::ImportStage),
        Box::new(crate::review::prereview::PrereviewStage),
        Box::new(crate::review::merge::MergeStage),
        Box::new(crate::release::candidate::CandidateStage),
        Box::new(crate::eval::EvalStage),
        Box::new(crate::release::ReleaseStage),
    ]
}

/// `execute` as the list has it: fed the chain queries of synthesis (`queries`: `--queries
/// FILE`, which it runs instead).
pub fn execute_stage(queries: Option<std::path::PathBuf>) -> crate::execute::ExecuteStage {
    crate::execute::ExecuteStage { queries, chains: Some(&crate::synth::chains::FEED) }
}

/// Every config section's name, from [`sections`] (the one list), in the order an unknown
/// section's message lists them.
pub fn section_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| sections().iter().map(SectionDecl::name).collect())
}

/// Every config section, each declared by its family (`impl Section`). Their checks run
/// at load in this order.
pub fn sections() -> Vec<SectionDecl> {
    vec![
        SectionDecl::of::<crate::settings::ProjectSettings>(),
        SectionDecl::of::<crate::registry::RegistrySettings>(),
        SectionDecl::of::<crate::filter::FilterSettings>(),
        SectionDecl::of::<crate::stats::StatsSettings>(),
        SectionDecl::of::<crate::llm::LlmSettings>(),
        SectionDecl::of::<crate::embedding::EmbedSettings>(),
        SectionDecl::of::<crate::efs::EfsSettings>(),
        SectionDecl::of::<crate::mcp::McpSettings>(),
        SectionDecl::of::<crate::execute::ExecuteSettings>(),
        SectionDecl::of::<crate::logs::LogsSettings>(),
        SectionDecl::of::<crate::graph::GraphSettings>(),
        SectionDecl::of::<crate::levels::LevelsSettings>(),
        SectionDecl::of::<crate::release::ReleaseSettings>(),
        SectionDecl::of::<crate::review::ReviewSettings>(),
        SectionDecl::of::<crate::synth::SynthSettings>(),
        SectionDecl::of::<crate::eval::EvalSettings>(),
    ]
}

// Loading lives here, not in `settings.rs`: only the stage list knows every family's
// section, and `settings.rs` importing them would tie every module into one import loop.
impl Settings {
    /// Load and check a pipeline config with every family's section. Every problem is
    /// reported at once.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let mut s = Settings::read(path, section_names(), &sections(), crate::llm::NAME_HASHES)?;
        s.stage_order = names();
        Ok(s)
    }

    /// Settings with every default, rooted at the working folder: for commands
    /// that can run without a pipeline config (e.g. `sandbox --catalog FILE`).
    pub fn defaults() -> Result<Self> {
        let mut s = Settings::with_defaults(section_names(), &sections(), crate::llm::NAME_HASHES)?;
        s.stage_order = names();
        Ok(s)
    }
}

/// Stage names in pipeline order.
pub fn names() -> Vec<&'static str> {
    all().iter().map(|s| s.spec().name).collect()
}

/// The stage called `name`, or a usage error listing the stages.
pub fn get(name: &str) -> Result<Box<dyn Stage>> {
    all()
        .into_iter()
        .find(|s| s.spec().name == name)
        .ok_or_else(|| UsageError(format!("unknown stage `{name}`; the stages are: {}", names().join(", "))).into())
}

/// The prompt templates the pipeline's stages name, each with the stages that name it (in
/// pipeline order), for `benchgen prompts list`.
pub fn prompts_used(settings: &Settings) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut used: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for stage in enabled(settings) {
        for p in stage.prompts(settings) {
            let v = used.entry(p.template).or_default();
            if !v.contains(&stage.spec().name.to_string()) {
                v.push(stage.spec().name.to_string());
            }
        }
    }
    used
}

/// The stages `benchgen run` includes under this config, in order.
pub fn enabled(settings: &Settings) -> Vec<Box<dyn Stage>> {
    all().into_iter().filter(|s| s.enabled(settings)).collect()
}

/// Check the whole pipeline before anything runs (vector's config compiler):
/// every LLM role, prompt template and MCP server a stage names, every
/// declared read produced upstream, and every numeric setting's range. All
/// problems are reported at once, each with the config key it comes from.
pub fn check(settings: &Settings) -> Result<()> {
    let problems = problems(settings);
    if problems.is_empty() {
        return Ok(());
    }
    Err(InputError { file: settings.display_path(&settings.config_path), problems }.into())
}

/// [`check`] for a command that runs one stage: only that stage and its upstream (every
/// stage it reads from, transitively), so `logs import` runs before the curation judge or
/// the graph's prompts are configured. `run` and `check` still check the whole pipeline.
pub fn check_stage(settings: &Settings, name: &str) -> Result<()> {
    get(name)?; // a misspelt name would check nothing
    let list = all();
    // Reads name earlier stages only, so one backward pass collects the whole upstream.
    let mut needed = BTreeSet::from([name]);
    for s in list.iter().rev() {
        let spec = s.spec();
        if needed.contains(spec.name) {
            needed.extend(spec.reads.iter().map(|r| r.stage));
        }
    }
    let list: Vec<Box<dyn Stage>> = list.into_iter().filter(|s| needed.contains(s.spec().name)).collect();
    let problems = problems_of(settings, &list);
    if problems.is_empty() {
        return Ok(());
    }
    Err(InputError { file: settings.display_path(&settings.config_path), problems }.into())
}

/// What `check` warns of for `stage` without failing, each with the config key it comes
/// from: a role in batch mode (`mode = "batch"`, or any role not `local` with `--batch`)
/// among its [`Stage::turn_roles`]. Such a stage runs correctly, each turn of every
/// conversation in flight one batch, but each turn waits for its batch, up to the completion
/// window, before the next can be asked; it is warned of rather than refused because only
/// the time suffers (docs/decisions.md).
pub fn warnings(settings: &Settings, stage: &dyn Stage) -> Vec<Problem> {
    let roles = &settings.section::<crate::llm::LlmSettings>().roles;
    let name = stage.spec().name;
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for r in stage.turn_roles(settings) {
        let Some(s) = roles.get(&r.name) else { continue };
        if !crate::llm::batch_api::batch_role(settings, &r.name) || !seen.insert(r.name.clone()) {
            continue;
        }
        let (role, window) = (&r.name, &s.batch.completion_window);
        // The way out depends on what put the role in batch mode: its `mode`, or only `--batch`
        // (then `mode = "live"` is already set, and advising it would send the user in a circle).
        let command = stage.spec().command;
        let way_out = match (s.mode, settings.llm_batch) {
            (crate::llm::config::RoleMode::Batch, false) => {
                format!("set `mode = \"live\"` in `[llm.roles.{role}]`, or use `--batch` only for stages of one round")
            }
            (crate::llm::config::RoleMode::Batch, true) => format!(
                "set `mode = \"live\"` in `[llm.roles.{role}]` and run `benchgen {command}` without `--batch` \
                 (either alone keeps the role in batch mode)"
            ),
            (crate::llm::config::RoleMode::Live, _) => format!(
                "run `benchgen {command}` without `--batch` (`[llm.roles.{role}]` is live; `--batch` suits stages of \
                 one round)"
            ),
        };
        out.push(Problem::new(
            &r.key,
            format!(
                "stage `{name}` sends the requests of role `{role}` as batch jobs, and they are turns of \
                 conversations: each turn waits for a batch (up to its completion window, {window}) before the next \
                 is asked; {way_out}"
            ),
        ));
    }
    out
}

/// Every problem [`check`] reports, in stage order.
pub fn problems(settings: &Settings) -> Vec<Problem> {
    problems_of(settings, &all())
}

fn problems_of(settings: &Settings, stages: &[Box<dyn Stage>]) -> Vec<Problem> {
    let on: Vec<&dyn Stage> = stages.iter().map(|s| s.as_ref()).filter(|s| s.enabled(settings)).collect();
    let mut problems = Vec::new();
    let mut seen_keys = BTreeSet::new();
    let servers = settings.section::<crate::mcp::McpSettings>().all_servers(&settings.root).unwrap_or_default();
    for (i, stage) in on.iter().enumerate() {
        let spec = stage.spec();
        for r in stage.roles(settings) {
            if seen_keys.insert(r.key.clone())
                && !settings.section::<crate::llm::LlmSettings>().roles.contains_key(&r.name)
            {
                problems.push(Problem::new(&r.key, format!("no `[llm.roles.{}]` is configured", r.name)));
            }
        }
        for p in stage.prompts(settings) {
            if !seen_keys.insert(format!("{}={}", p.key, p.template)) {
                continue;
            }
            match crate::llm::prompt_template(settings, &p.template) {
                Err(e) => problems.push(Problem::new(&p.key, e)),
                Ok(t) => {
                    if let Err(e) = crate::llm::render_template(&p.template, &t.text, &p.vars) {
                        let shown = t.shown(|p| settings.display_path(p));
                        problems.push(Problem::new(&p.key, format!("`{shown}` does not render: {e}")));
                    }
                }
            }
        }
        for s in stage.servers(settings) {
            if !servers.contains_key(&s.name) {
                problems
                    .push(Problem::new(&s.key, format!("no MCP server `{}` is configured in `[mcp.servers]`", s.name)));
            }
        }
        for r in spec.reads.iter().filter(|r| r.kind == ReadKind::Required) {
            let producer = on[..i].iter().find(|p| p.spec().name == r.stage);
            match producer {
                Some(p) if r.file == crate::stage::MANIFEST || p.spec().declares(r.file) => {}
                Some(_) => problems.push(Problem::new(
                    format!("stage `{}`", spec.name),
                    format!("reads `{}/{}`, which `{}` does not write", r.stage, r.file, r.stage),
                )),
                None => problems.push(Problem::new(
                    format!("stage `{}`", spec.name),
                    format!("reads `{}/{}`, but no stage before it in this pipeline produces it", r.stage, r.file),
                )),
            }
        }
        stage.check(settings, &mut problems);
    }
    problems
}

/// One row of `benchgen stages`.
#[derive(Debug, Serialize)]
pub struct StageRow {
    #[serde(flatten)]
    pub spec: &'static StageSpec,
    pub upstream: Vec<&'static str>,
    /// Part of `benchgen run` under the loaded config.
    pub enabled: bool,
    /// `config key → role` under the loaded config.
    pub roles: Vec<crate::stage::ConfigRef>,
    pub prompts: Vec<crate::stage::PromptRef>,
    pub servers: Vec<crate::stage::ConfigRef>,
}

pub fn rows(settings: &Settings) -> Vec<StageRow> {
    all()
        .iter()
        .map(|s| {
            let spec = s.spec();
            let mut upstream: Vec<&str> = spec.upstream().chain(spec.optional_upstream()).collect();
            upstream.dedup();
            // Roles, prompts and servers are what this pipeline needs: a stage outside it
            // needs none (its defaults would read as roles to configure).
            let enabled = s.enabled(settings);
            StageRow {
                spec,
                upstream,
                enabled,
                roles: if enabled { s.roles(settings) } else { Vec::new() },
                prompts: if enabled { s.prompts(settings) } else { Vec::new() },
                servers: if enabled { s.servers(settings) } else { Vec::new() },
            }
        })
        .collect()
}

fn reads_text(spec: &StageSpec) -> String {
    let parts: Vec<String> = spec
        .reads
        .iter()
        .map(|r| match r.kind {
            ReadKind::Required => format!("{}/{}", r.stage, r.file),
            ReadKind::Optional => format!("{}/{} (optional)", r.stage, r.file),
            ReadKind::Manifest => format!("{} (manifest)", r.stage),
        })
        .collect();
    if parts.is_empty() { "—".into() } else { parts.join(", ") }
}

/// `benchgen stages`: the graph as text.
pub fn render_text(rows: &[StageRow]) -> String {
    let mut s = String::new();
    for r in rows {
        let on = if r.enabled { "" } else { "  (not in this pipeline's `run`)" };
        s.push_str(&format!("{}  — `benchgen {}`{on}\n  {}\n", r.spec.name, r.spec.command, r.spec.about));
        s.push_str(&format!("  reads:  {}\n", reads_text(r.spec)));
        s.push_str(&format!("  writes: {}\n", r.spec.writes.join(", ")));
        if !r.roles.is_empty() {
            let roles: Vec<String> = r.roles.iter().map(|c| format!("{} = {}", c.key, c.name)).collect();
            s.push_str(&format!("  roles:  {}\n", roles.join(", ")));
        }
        if !r.servers.is_empty() {
            let servers: Vec<String> = r.servers.iter().map(|c| format!("{} = {}", c.key, c.name)).collect();
            s.push_str(&format!("  mcp:    {}\n", servers.join(", ")));
        }
    }
    s
}

/// `benchgen stages --format dot`: the graph for Graphviz. Solid edges are
/// required reads, dashed ones optional reads and manifests.
pub fn render_dot(rows: &[StageRow]) -> String {
    let mut s = String::from("digraph benchgen {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n");
    for r in rows {
        let style = if r.enabled { "" } else { ", style=dashed" };
        s.push_str(&format!(
            "  \"{}\" [label=\"{}\\n(benchgen {})\"{style}];\n",
            r.spec.name, r.spec.name, r.spec.command
        ));
    }
    for r in rows {
        let mut done = BTreeSet::new();
        for read in r.spec.reads {
            if !done.insert((read.stage, read.kind == ReadKind::Required)) {
                continue;
            }
            let style = if read.kind == ReadKind::Required { "" } else { " [style=dashed]" };
            s.push_str(&format!("  \"{}\" -> \"{}\"{style};\n", read.stage, r.spec.name));
        }
    }
    s.push_str("}\n");
    s
}

/// The README's stage table (Markdown), generated so it cannot go stale. LLM
/// roles are shown as `config key = role` under the given config.
pub fn markdown_table(settings: &Settings) -> String {
    let mut s = String::from(
        "| stage | command | what it does | reads | writes (`artifacts/<stage>/`) | LLM roles |\n|---|---|---|---|---|---|\n",
    );
    for st in all() {
        let spec = st.spec();
        let roles: Vec<String> = st.roles(settings).iter().map(|r| format!("`{}` = `{}`", r.key, r.name)).collect();
        s.push_str(&format!(
            "| `{}` | `benchgen {}` | {} | {} | {} | {} |\n",
            spec.name,
            spec.command,
            spec.about,
            reads_text(spec),
            spec.writes.iter().map(|w| format!("`{w}`")).collect::<Vec<_>>().join(", "),
            if roles.is_empty() { "—".into() } else { roles.join(", ") }
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::tests::project;

    #[test]
    fn names_are_commands_joined_by_dashes_and_unique() {
        let mut seen = BTreeSet::new();
        for s in all() {
            let spec = s.spec();
            assert_eq!(spec.name, spec.command.replace(' ', "-"), "stage `{}`", spec.name);
            assert!(seen.insert(spec.name), "duplicate stage `{}`", spec.name);
        }
    }

    #[test]
    fn every_read_names_an_earlier_stage_that_writes_it() {
        let stages = all();
        for (i, s) in stages.iter().enumerate() {
            for r in s.spec().reads {
                let producer = stages[..i].iter().find(|p| p.spec().name == r.stage);
                let producer =
                    producer.unwrap_or_else(|| panic!("`{}` reads `{}`, not an earlier stage", s.spec().name, r.stage));
                assert!(
                    r.file == crate::stage::MANIFEST || producer.spec().declares(r.file),
                    "`{}` reads `{}/{}`, which is not declared",
                    s.spec().name,
                    r.stage,
                    r.file
                );
            }
        }
    }

    /// A stage reading a file no earlier stage of the pipeline writes (test double).
    struct TestOnlyOrphanReader;

    static ORPHAN: StageSpec = StageSpec {
        name: "orphan-reader",
        command: "orphan reader",
        version: 1,
        about: "test double",
        reads: &[
            crate::stage::Artifact::<()>::new("filter", "not-written.json").read(),
            crate::stage::Artifact::<()>::new("nowhere", "x.json").read(),
        ],
        writes: &["out.json"],
        section: None,
    };

    impl Stage for TestOnlyOrphanReader {
        fn spec(&self) -> &'static StageSpec {
            &ORPHAN
        }
        fn plan(&self, _: &Settings) -> Result<crate::stage::Plan> {
            unreachable!("check never plans")
        }
        fn run(&self, _: &crate::stage::Ctx, _: &crate::stage::Inputs, _: &mut crate::stage::Output) -> Result<()> {
            unreachable!("check never runs")
        }
    }

    #[test]
    fn check_names_reads_no_earlier_stage_produces() {
        let settings = Settings::defaults().unwrap();
        let list: Vec<Box<dyn Stage>> = vec![
            Box::new(crate::registry::ImportStage::default()),
            Box::new(crate::filter::FilterStage),
            Box::new(TestOnlyOrphanReader),
        ];
        let problems = problems_of(&settings, &list);
        let text: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.location, p.message)).collect();
        assert_eq!(
            text,
            [
                "stage `orphan-reader`: reads `filter/not-written.json`, which `filter` does not write",
                "stage `orphan-reader`: reads `nowhere/x.json`, but no stage before it in this pipeline produces it",
            ]
        );
        // In the real list every read is produced.
        assert!(problems_of(&settings, &all()).is_empty(), "{:?}", problems_of(&settings, &all()));
    }

    #[test]
    fn the_section_list_names_every_section_once() {
        let mut listed: Vec<&str> = sections().iter().map(|s| s.name()).collect();
        listed.sort();
        let mut names = section_names().to_vec();
        names.sort();
        assert_eq!(listed, names);
        for s in all() {
            if let Some(sec) = s.spec().section {
                assert!(section_names().contains(&sec), "`{}` names an unknown section `{sec}`", s.spec().name);
            }
        }
    }

    /// The config hash (roles folded in) of every stage under `pipeline/demo.toml`, pinned so
    /// a refactor of how sections are read cannot make existing artifacts stale. A stage whose
    /// plan cannot be made here (an input missing in a clean clone) pins its error instead.
    #[test]
    fn demo_config_hashes_are_pinned() {
        let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("pipeline/demo.toml");
        let settings = Settings::load(&cfg).unwrap();
        let got: Vec<String> = all()
            .iter()
            .map(|s| {
                let on = if s.enabled(&settings) { "on" } else { "off" };
                match crate::stage::config_hash(s.as_ref(), &settings) {
                    Ok(h) => format!("{} {on} {h}", s.spec().name),
                    Err(e) => format!("{} {on} error: {e:#}", s.spec().name),
                }
            })
            .collect();
        // `logs-import` folds in the pseudonym key's hash (`[logs.anonymise] secret_env`):
        // unset here, or the demo's key that the Makefile exports for `make test`.
        let logs_import = match std::env::var("BENCHGEN_ANON_SECRET").ok().as_deref() {
            None => Some(PINNED_LOGS_IMPORT_NO_SECRET),
            Some("benchgen-demo-only") => Some(PINNED_LOGS_IMPORT_DEMO_SECRET),
            Some(_) => None, // another key: that line cannot be pinned
        };
        let want: Vec<String> = PINNED_DEMO_HASHES
            .lines()
            .map(|l| match (l.starts_with("logs-import "), logs_import) {
                (true, Some(h)) => format!("logs-import on {h}"),
                _ => l.to_string(),
            })
            .collect();
        let keep = |v: &[String]| -> Vec<String> {
            v.iter().filter(|l| logs_import.is_some() || !l.starts_with("logs-import ")).cloned().collect()
        };
        assert_eq!(keep(&got), keep(&want), "got:\n{}", got.join("\n"));
        // Without any optional section, only the stages of the always-present ones are on.
        let (_dir, empty) = project();
        let on: Vec<&str> = all().iter().filter(|s| s.enabled(&empty)).map(|s| s.spec().name).collect();
        assert_eq!(on, PINNED_EMPTY_ON, "{on:?}");
    }

    const PINNED_EMPTY_ON: &[&str] = &["registry-import", "filter", "stats"];
    const PINNED_LOGS_IMPORT_NO_SECRET: &str =
        "sha256:67765c4790fde165f499ea66466cf2ca9a490f9c0bcb1cedd421d1424178542b";
    const PINNED_LOGS_IMPORT_DEMO_SECRET: &str =
        "sha256:8bfdfc6c61392eeea016c995c1579eb9e7e9edfe6e55376b77ab51b02972de42";

    const PINNED_DEMO_HASHES: &str = "\
registry-import on sha256:76403acf45e3440358a1658db4e2fbac884a25f266988c45aac6ce28bef8f827
filter on sha256:a926f124eeac941492f764ee75587593cd48834530ebd785721e13303163f957
embed on sha256:af3be80e34395dc3d3bb0d34d2b963e86485682521d93e586bd4490805bbe383
efs-pairs on sha256:a4220d3d781518c1696eea70377ac57331c31a1325d82bb7da1413f4132df964
efs-verify on sha256:64c377b728bfb5d9c37dfc6cac10e425a60c4c2cccf811776921cb73087b1eba
efs-build on sha256:db95fca634cf6cd9aab2515e84d4b98853e71dc6253b7ea63b04fafe02c9b973
efs-topdown on sha256:5f88502bc1635c973d534378135f48c2867b4a6450a1b9d9dc531809941c8a96
efs-review-import off error: no review sheets in `reviews/efs`
efs-finalize on sha256:701fc33b825767ea3693d5e53dee6511aa4c568d6439aff34b104ee6ed42e01d
stats on sha256:1e6920158f62b687fca4dfd21e6a397809a9ead05ad76ab81ce4b9e8c2d3e36c
levels-profiles on sha256:812fa21eddcee9ff8603cbc56aa7feeb0284e340e337f8f8a1bb9fd65b08f439
levels-schemas on sha256:909f31e27234b09fbfd2a7f0c29770ec3e5faffe0179d97c1ed2a926ae64c907
levels-l1 on sha256:d6964d916a228d43830cc8ae047b53619729858228a3a33f7678213126ad827e
levels-l2 on sha256:c47afe2fc9229d736c5e5362ba1560112a00a9359b6da6179f86397283153094
levels-l3 on sha256:b4b29bb324bd7c4d50cd837c1a4b00606fa771fc287c0545d5caca443f21deea
levels-l4 on sha256:2f08e6a8166e4f18c2f89a03a999c5076ba145f3f10259f803811878c8655703
levels-l5 on sha256:758f7650ad14897dcd91b1d86343a63f105bdde515ce5cb0cfadbb45c1bd32f2
levels-export on sha256:65d2355b0b8d9e21596d058566a5b5647d3797151a0942a9706c803fe8c16aab
logs-import on sha256:67765c4790fde165f499ea66466cf2ca9a490f9c0bcb1cedd421d1424178542b
logs-curate on sha256:efd3bbef5018d6ed8fac8ac84fcdbdf77af8e505f49ba9b2507ab54bc05705a0
logs-split on sha256:cfaf55eb8d54eda5edd63246e5acac42ab0848c9e66f54bb9c8529dcba3261a5
graph-build on sha256:25adaf7849d781c8a0cfbab0018e6467500b5a6d1540b46024da208e7c6c8a59
graph-review-import off error: no review sheets in `reviews/graph`
synth-chains on sha256:bc66ca46172c40b7f09825c2986f0e70c02043c4bd1c83c85774e4fbede819d1
execute on sha256:6f86250c40f2fcddc82e977406d52b23f31d804d1b528a16072fd5433e79f462
synth-roleplay on sha256:69b14c6d0d9030215ee8bd0aa7f474ec6f9215993155e5db7376f919fd56197c
validate on sha256:8bd270f47d8c7e158da5f8f076d57905b1da8d78134d0656698117d32bb4074f
review-assign on sha256:fcddaa6f853884cd3122ed2f5c1f717d72651d2c32e47862595d2a6f45a5e3e9
review-export on sha256:2590279cb0054a94f4772b72bfa8002e01d9491b47ca9181120f92ced5e25d44
review-import off error: no filled sheets in `reviews/returned` and no web submissions in `reviews/web/scores.jsonl`
review-prereview on sha256:c829e58745204c9276c83e17cb6f770efe460a81e0582b74e656d2b11efdc292
review-merge on sha256:0cdfd2bb032f498667077a008e1bc5bca70e4bad4ce15d7c5c836bb803ebe997
release-candidate on sha256:cec03fbbf885801222415fa7868d1403aa91426b982a64681d1314cdafaa7816
eval on sha256:db85dd39b5bfb567f241ef497c5dccc266687012ad1b4eee83d33b80abdb6a75
release on sha256:cec03fbbf885801222415fa7868d1403aa91426b982a64681d1314cdafaa7816
";

    #[test]
    fn execute_runs_the_chain_queries_synthesis_feeds_it() {
        // `execute` names the file by its place (a spec's reads are static): the one
        // `synth chains` writes.
        let (read, written) = (crate::execute::CHAIN_QUERIES, crate::synth::chains::QUERIES);
        assert_eq!((read.stage, read.file), (written.stage, written.file));
        // The list's `execute` runs them with `[synth]`'s assistant role; a queries file with
        // its own role; unfed, it has nothing to run.
        let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("pipeline/demo.toml");
        let settings = Settings::load(&cfg).unwrap();
        let fed = get("execute").unwrap();
        assert!(fed.enabled(&settings));
        let assistant = crate::synth::settings(&settings).assistant_role;
        assert_eq!(fed.roles(&settings), [crate::stage::ConfigRef::new("synth.assistant_role", assistant)]);
        let own = &settings.section::<crate::execute::ExecuteSettings>().role;
        let file = execute_stage(Some("queries.jsonl".into()));
        assert_eq!(file.roles(&settings), [crate::stage::ConfigRef::new("execute.role", own)]);
        assert!(!crate::execute::ExecuteStage::default().enabled(&settings));
    }

    #[test]
    fn declared_writes_match_files_and_folders() {
        let spec = &crate::execute::SPEC;
        assert!(spec.declares("trajectories/q1.json"));
        assert!(spec.declares("summary.json"));
        assert!(!spec.declares("trajectories"));
        assert!(!spec.declares("other.json"));
    }
}
