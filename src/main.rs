//! The `benchgen` binary: parse, dispatch, render the error, exit.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use benchgen::cli::{
    Cli, Command, EfsCommand, EfsReviewCommand, GraphCommand, GraphReviewCommand, LevelsCommand, LlmCommand,
    LogsCommand, McpCommand, RegistryCommand, ReviewCommand, StagesFormat, SynthCommand,
};
use benchgen::printer::Printer;
use benchgen::settings::Settings;
use benchgen::stage::{self, Ctx, Stage};
use benchgen::{clean, error, execute, explain, llm, mcp, pipeline, registry, sandbox, stages};

// Large inputs are parsed into many small strings and vectors (`score` on 50 MB of level
// files spent about a tenth of its CPU in glibc's malloc and free).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Spawned servers must not outlive us, whatever signal ends us.
    benchgen::children::install();
    init_tracing(cli.global.verbose, cli.global.quiet);
    let printer =
        Printer { quiet: cli.global.quiet, verbose: cli.global.verbose, json: cli.global.json, announce: false };
    let result = dispatch(&cli, &printer);
    benchgen::children::wait_if_signalled();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{}", error::render(&err));
            ExitCode::from(error::exit_code(&err) as u8)
        }
    }
}

fn init_tracing(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("BENCHGEN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("benchgen={level}")));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).init();
}

fn dispatch(cli: &Cli, printer: &Printer) -> Result<()> {
    // `score` reads only the files it is given: no pipeline config needed.
    if let Command::Score(a) = &cli.command {
        let opts = benchgen::score::Options {
            benches: a.benches.clone(),
            pred: a.pred.clone(),
            bench_format: a.bench_format,
            pred_format: a.format,
            etom_level: a.etom_level,
            mode: a.compat.into(),
        };
        let files = benchgen::score::ReportFiles { per_sample: a.per_sample.clone(), markdown: a.markdown.clone() };
        return benchgen::score::command(&opts, &files, printer);
    }
    // `release verify` reads only the folder it is given.
    if let Command::Release(benchgen::cli::ReleaseArgs {
        command: Some(benchgen::cli::ReleaseCommand::Verify(a)),
        ..
    }) = &cli.command
    {
        return benchgen::release::verify::command(&a.dir, printer);
    }
    // `init` writes a project; it needs none.
    if let Command::Init(a) = &cli.command {
        let created = benchgen::init::init(a)?;
        let mut text = format!("created a benchgen project in `{}`:\n", created.dir);
        for f in &created.files {
            text.push_str(&format!("  {f}\n"));
        }
        for n in &created.notes {
            text.push_str(&format!("  {n}\n"));
        }
        text.push_str("next: read its README.md (files to drop under raw/, variables to set), then `benchgen check`");
        printer.summary(&text, &created);
        return Ok(());
    }
    // The sandbox serving an explicit `--catalog` needs no pipeline config: a
    // spawned `benchgen sandbox` must work from any folder.
    let config_is_default = cli.global.config.as_path() == std::path::Path::new(benchgen::settings::DEFAULT_CONFIG)
        && std::env::var_os("BENCHGEN_CONFIG").is_none();
    // `prompts` shows the built-ins without a project; with one, its overrides too.
    if let Command::Prompts(c) = &cli.command {
        let config =
            if config_is_default { benchgen::settings::discover_config()? } else { Some(cli.global.config.clone()) };
        let settings = match config {
            Some(path) => Some(Settings::load(&path)?),
            None => None,
        };
        return benchgen::llm::prompts::command(settings.as_ref(), c, printer);
    }
    let config = if config_is_default {
        benchgen::settings::discover_config()?.unwrap_or_else(|| cli.global.config.clone())
    } else {
        cli.global.config.clone()
    };
    let mut settings = match &cli.command {
        Command::Sandbox(a) if a.catalog.is_some() && config_is_default && !config.exists() => Settings::defaults()?,
        _ => Settings::load(&config)?,
    };
    settings.llm_mode = cli.global.llm_mode;
    // The pipeline is checked on every load (roles, prompts, servers, reads, ranges), so
    // a typo fails here, naming its key, before any stage runs; a stage command checks
    // only what it and its upstream need. `stages` lists what a config needs, so it also
    // works while the config is incomplete.
    match stage_of(&cli.command) {
        _ if matches!(cli.command, Command::Check | Command::Sandbox(_) | Command::Stages(_)) => {}
        Some(name) => stages::check_stage(&settings, name)?,
        None => stages::check(&settings)?,
    }
    stage::recover_if_idle(&settings, printer)?;
    let ctx = Ctx::new(&settings, printer);
    match &cli.command {
        Command::Registry(RegistryCommand::Import(a)) => {
            let stage = registry::ImportStage { file: a.file.clone(), format: a.format, lenient: a.lenient };
            run_one(&ctx, &stage, a.force.force)
        }
        Command::Registry(RegistryCommand::Scrape(a)) => registry::commands::scrape(&settings, printer, a),
        Command::Registry(RegistryCommand::Merge(a)) => registry::commands::merge(&settings, printer, a),
        Command::Registry(RegistryCommand::Tools(a)) => registry::commands::tools(&settings, printer, a),
        Command::Filter(f) => run_named(&ctx, "filter", f.force),
        Command::Stats(f) => run_named(&ctx, "stats", f.force),
        Command::Embed(f) => run_named(&ctx, "embed", f.force),
        Command::Efs(c) => efs_command(&ctx, c),
        Command::Logs(LogsCommand::Import(f)) => run_named(&ctx, "logs-import", f.force),
        Command::Logs(LogsCommand::Curate(f)) => run_named(&ctx, "logs-curate", f.force),
        Command::Logs(LogsCommand::Split(f)) => run_named(&ctx, "logs-split", f.force),
        Command::Levels(c) => {
            let (name, f) = match c {
                LevelsCommand::Profiles(f) => ("levels-profiles", f),
                LevelsCommand::Schemas(f) => ("levels-schemas", f),
                LevelsCommand::L1(f) => ("levels-l1", f),
                LevelsCommand::L2(f) => ("levels-l2", f),
                LevelsCommand::L3(f) => ("levels-l3", f),
                LevelsCommand::L4(f) => ("levels-l4", f),
                LevelsCommand::L5(f) => ("levels-l5", f),
                LevelsCommand::Export(f) => ("levels-export", f),
            };
            run_named(&ctx, name, f.force)
        }
        Command::Graph(GraphCommand::Build(f)) => run_named(&ctx, "graph-build", f.force),
        Command::Graph(GraphCommand::Review(GraphReviewCommand::Export(f))) => {
            let (path, n) = benchgen::graph::review::export(&settings, f.force)?;
            let shown = settings.display_path(&path);
            printer.summary(
                &format!("wrote `{shown}` ({n} candidate edges); fill in `decision` (add/remove) and `reviewer`"),
                &serde_json::json!({"sheet": shown, "edges": n}),
            );
            Ok(())
        }
        Command::Graph(GraphCommand::Review(GraphReviewCommand::Import(f))) => {
            run_named(&ctx, "graph-review-import", f.force)
        }
        Command::Review(c) => review_command(&ctx, c),
        Command::Synth(SynthCommand::Chains(f)) => run_named(&ctx, "synth-chains", f.force),
        Command::Synth(SynthCommand::Roleplay(f)) => run_named(&ctx, "synth-roleplay", f.force),
        Command::Validate(f) => run_named(&ctx, "validate", f.force),
        Command::Run(a) => {
            // As `review import` / `review merge` do: events a killed web app left in its
            // outbox reach the ledger, and its scores reach `reviews/web/`, before the
            // review stages look at them.
            benchgen::review::serve::dump(&settings)?;
            let reports = pipeline::run(&ctx, a.from.as_deref(), a.until.as_deref(), a.force)?;
            printer.summary("", &reports); // the human text was streamed per stage
            Ok(())
        }
        Command::Status => {
            let rows = pipeline::status(&settings);
            printer.summary(&pipeline::render_status(&rows), &rows);
            Ok(())
        }
        Command::Check => {
            stages::check(&settings)?;
            let n = stages::enabled(&settings).len();
            let shown = settings.display_path(&settings.config_path);
            printer.summary(
                &format!("`{shown}`: no problems ({n} stages in the pipeline)"),
                &serde_json::json!({"config": shown, "problems": [], "stages": n}),
            );
            Ok(())
        }
        Command::Stages(a) => {
            let rows = stages::rows(&settings);
            let text = match a.format {
                StagesFormat::Text => stages::render_text(&rows),
                StagesFormat::Dot => stages::render_dot(&rows),
                StagesFormat::Markdown => stages::markdown_table(&settings),
            };
            printer.summary(&text, &rows);
            Ok(())
        }
        Command::Clean(a) => {
            let c = clean::clean(&settings, &a.stages)?;
            printer.summary(&clean::render(&c), &c);
            Ok(())
        }
        Command::Score(_) | Command::Init(_) | Command::Prompts(_) => {
            unreachable!("handled before the config is loaded")
        }
        Command::Release(a) => run_named(&ctx, "release", a.force.force),
        Command::Explain(a) => {
            let x = explain::explain(&settings, &a.id)?;
            printer.summary(&explain::render(&x), &x);
            Ok(())
        }
        Command::Llm(LlmCommand::Ping(a)) => {
            let results = llm::ping::ping(&settings, a.role.as_deref())?;
            printer.summary(&llm::ping::render(&results), &results);
            match results.iter().find(|r| !r.ok) {
                Some(r) => Err(anyhow::anyhow!("role `{}` failed the ping", r.role)),
                None => Ok(()),
            }
        }
        Command::Llm(LlmCommand::Stats(a)) => {
            let rows = llm::stats::collect(&settings, a.stage.as_deref())?;
            printer.summary(&llm::stats::render(&rows), &rows);
            Ok(())
        }
        Command::Mcp(McpCommand::Tools(a)) => mcp::commands::tools(&settings, printer, &a.server),
        Command::Mcp(McpCommand::Call(a)) => mcp::commands::call(&settings, printer, &a.server, &a.tool, &a.args),
        Command::Mcp(McpCommand::Import(a)) => mcp::commands::import(printer, &a.file),
        Command::Sandbox(a) => sandbox::command::run(&settings, printer, a),
        Command::Execute(a) => {
            let stage = execute::ExecuteStage { queries: a.queries.clone() };
            run_one(&ctx, &stage, a.force.force)
        }
    }
}

fn efs_command(ctx: &Ctx, c: &EfsCommand) -> Result<()> {
    use benchgen::efs;
    match c {
        EfsCommand::Pairs(f) => run_named(ctx, "efs-pairs", f.force),
        EfsCommand::Verify(f) => run_named(ctx, "efs-verify", f.force),
        EfsCommand::Build(f) => run_named(ctx, "efs-build", f.force),
        EfsCommand::Topdown(f) => run_named(ctx, "efs-topdown", f.force),
        EfsCommand::Finalize(f) => run_named(ctx, "efs-finalize", f.force),
        EfsCommand::Review(EfsReviewCommand::Export(f)) => {
            let (path, n) = efs::review::export(ctx.settings, f.force)?;
            let shown = ctx.settings.display_path(&path);
            ctx.printer.summary(
                &format!("wrote `{shown}` ({n} sets); fill in `decision`, `target`, `reviewer`, `note`"),
                &serde_json::json!({"sheet": shown, "sets": n}),
            );
            Ok(())
        }
        EfsCommand::Review(EfsReviewCommand::Import(a)) => {
            run_one(ctx, &efs::review::ReviewStage { allow_empty: a.allow_empty }, a.force.force)
        }
        EfsCommand::Compare(a) => {
            let c = efs::compare::run(ctx.settings, &a.reference, a.sets.as_deref())?;
            if let Some(out) = &a.out {
                benchgen::store::write_atomic(out, &benchgen::store::to_json_bytes(&c)?)?;
            }
            ctx.printer.summary(&efs::compare::render(&c), &c);
            Ok(())
        }
    }
}

fn review_command(ctx: &Ctx, c: &ReviewCommand) -> Result<()> {
    use benchgen::review;
    let s = ctx.settings;
    match c {
        ReviewCommand::Assign(f) => {
            run_named(ctx, "review-assign", f.force)?;
            match review::assign::write_links(s) {
                Ok(paths) => ctx.printer.info(&format!("{} personal links in `reviews/links/`", paths.len())),
                Err(e) => ctx.printer.warn(&format!("no review links written: {e:#}")),
            }
            Ok(())
        }
        ReviewCommand::Export(f) => run_named(ctx, "review-export", f.force),
        ReviewCommand::Import(f) => {
            review::serve::dump(s)?;
            run_named(ctx, "review-import", f.force)
        }
        ReviewCommand::Prereview(f) => run_named(ctx, "review-prereview", f.force),
        ReviewCommand::Merge(f) => {
            review::serve::dump(s)?;
            run_named(ctx, "review-merge", f.force)
        }
        ReviewCommand::Serve(a) => review::serve::serve(s, ctx.printer, a.addr),
    }
}

/// The stage a command runs on its own (`None`: not a single-stage command).
fn stage_of(c: &Command) -> Option<&'static str> {
    Some(match c {
        Command::Registry(RegistryCommand::Import(_)) => "registry-import",
        Command::Filter(_) => "filter",
        Command::Stats(_) => "stats",
        Command::Embed(_) => "embed",
        Command::Efs(EfsCommand::Pairs(_)) => "efs-pairs",
        Command::Efs(EfsCommand::Verify(_)) => "efs-verify",
        Command::Efs(EfsCommand::Build(_)) => "efs-build",
        Command::Efs(EfsCommand::Topdown(_)) => "efs-topdown",
        Command::Efs(EfsCommand::Finalize(_)) => "efs-finalize",
        Command::Efs(EfsCommand::Review(EfsReviewCommand::Import(_))) => "efs-review-import",
        Command::Logs(LogsCommand::Import(_)) => "logs-import",
        Command::Logs(LogsCommand::Curate(_)) => "logs-curate",
        Command::Logs(LogsCommand::Split(_)) => "logs-split",
        Command::Levels(l) => match l {
            LevelsCommand::Profiles(_) => "levels-profiles",
            LevelsCommand::Schemas(_) => "levels-schemas",
            LevelsCommand::L1(_) => "levels-l1",
            LevelsCommand::L2(_) => "levels-l2",
            LevelsCommand::L3(_) => "levels-l3",
            LevelsCommand::L4(_) => "levels-l4",
            LevelsCommand::L5(_) => "levels-l5",
            LevelsCommand::Export(_) => "levels-export",
        },
        Command::Graph(GraphCommand::Build(_)) => "graph-build",
        Command::Graph(GraphCommand::Review(GraphReviewCommand::Import(_))) => "graph-review-import",
        Command::Synth(SynthCommand::Chains(_)) => "synth-chains",
        Command::Synth(SynthCommand::Roleplay(_)) => "synth-roleplay",
        Command::Validate(_) => "validate",
        Command::Execute(_) => "execute",
        Command::Review(ReviewCommand::Assign(_)) => "review-assign",
        Command::Review(ReviewCommand::Export(_)) => "review-export",
        Command::Review(ReviewCommand::Import(_)) => "review-import",
        Command::Review(ReviewCommand::Prereview(_)) => "review-prereview",
        Command::Review(ReviewCommand::Merge(_)) => "review-merge",
        Command::Release(benchgen::cli::ReleaseArgs { command: None, .. }) => "release",
        _ => return None,
    })
}

/// Run the stage of the list called `name` on its own.
fn run_named(ctx: &Ctx, name: &str, force: bool) -> Result<()> {
    run_one(ctx, stages::get(name)?.as_ref(), force)
}

/// Run one stage on its own; its upstream stages must be up to date.
fn run_one(ctx: &Ctx, stage: &dyn Stage, force: bool) -> Result<()> {
    let states = pipeline::states(ctx.settings);
    let report = stage::execute(ctx.settings, ctx.printer, stage, force, &states)?;
    ctx.printer.summary(&pipeline::render_report(&report), &report);
    Ok(())
}
