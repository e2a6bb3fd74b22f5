//! The `benchgen` binary: parse, dispatch, render the error, exit.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use benchgen::cli::{
    Cli, Command, EfsCommand, EfsReviewCommand, GraphCommand, GraphReviewCommand, LlmCommand, LogsCommand, McpCommand,
    RegistryCommand,
};
use benchgen::printer::Printer;
use benchgen::settings::Settings;
use benchgen::stage::{self, Ctx, Stage};
use benchgen::{embed, error, execute, explain, filter, llm, mcp, pipeline, registry, sandbox, stats};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.global.verbose, cli.global.quiet);
    let printer = Printer { quiet: cli.global.quiet, verbose: cli.global.verbose, json: cli.global.json };
    match dispatch(&cli, &printer) {
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
        return benchgen::score::command(a, printer);
    }
    // The sandbox serving an explicit `--catalog` needs no pipeline config: a
    // spawned `benchgen sandbox` must work from any folder.
    let config_is_default = cli.global.config.as_path() == std::path::Path::new(benchgen::settings::DEFAULT_CONFIG)
        && std::env::var_os("BENCHGEN_CONFIG").is_none();
    let mut settings = match &cli.command {
        Command::Sandbox(a) if a.catalog.is_some() && config_is_default && !cli.global.config.exists() => {
            Settings::defaults()?
        }
        _ => Settings::load(&cli.global.config)?,
    };
    settings.llm_mode = cli.global.llm_mode;
    stage::recover_if_idle(&settings, printer)?;
    let ctx = Ctx::new(&settings, printer);
    match &cli.command {
        Command::Registry(RegistryCommand::Import(a)) => {
            let stage = registry::CatalogStage::from_settings(&settings, a.file.clone(), a.format, a.lenient)?;
            run_one(&ctx, &stage, a.force.force)
        }
        Command::Filter(f) => run_one(&ctx, &filter::FilterStage, f.force),
        Command::Stats(f) => run_one(&ctx, &stats::StatsStage, f.force),
        Command::Embed(f) => run_one(&ctx, &embed::EmbedStage, f.force),
        Command::Efs(c) => efs_command(&ctx, c),
        Command::Logs(LogsCommand::Import(f)) => run_one(&ctx, &benchgen::logs::import::ImportStage, f.force),
        Command::Logs(LogsCommand::Curate(f)) => run_one(&ctx, &benchgen::logs::curate::CurateStage, f.force),
        Command::Logs(LogsCommand::Split(f)) => run_one(&ctx, &benchgen::logs::split::SplitStage, f.force),
        Command::Graph(GraphCommand::Build(f)) => run_one(&ctx, &benchgen::graph::build::BuildStage, f.force),
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
            run_one(&ctx, &benchgen::graph::review::ReviewStage, f.force)
        }
        Command::Run(a) => {
            let reports = pipeline::run(&ctx, a.from.as_deref(), a.until.as_deref(), a.force)?;
            printer.summary("", &reports); // the human text was streamed per stage
            Ok(())
        }
        Command::Status => {
            let rows = pipeline::status(&settings);
            printer.summary(&pipeline::render_status(&rows), &rows);
            Ok(())
        }
        Command::Score(_) => unreachable!("handled before the config is loaded"),
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
            let stage = execute::ExecuteStage::from_settings(&settings, a.queries.clone())?;
            run_one(&ctx, &stage, a.force.force)
        }
    }
}

fn efs_command(ctx: &Ctx, c: &EfsCommand) -> Result<()> {
    use benchgen::efs;
    match c {
        EfsCommand::Pairs(f) => run_one(ctx, &efs::pairs::PairsStage, f.force),
        EfsCommand::Verify(f) => run_one(ctx, &efs::verify::VerifyStage, f.force),
        EfsCommand::Build(f) => run_one(ctx, &efs::build::BuildStage, f.force),
        EfsCommand::Topdown(f) => run_one(ctx, &efs::topdown::TopdownStage, f.force),
        EfsCommand::Finalize(f) => run_one(ctx, &efs::finalize::FinalizeStage, f.force),
        EfsCommand::Review(EfsReviewCommand::Export(f)) => {
            let (path, n) = efs::review::export(ctx.settings, f.force)?;
            let shown = ctx.settings.display_path(&path);
            ctx.printer.summary(
                &format!("wrote `{shown}` ({n} sets); fill in `decision`, `target`, `reviewer`, `note`"),
                &serde_json::json!({"sheet": shown, "sets": n}),
            );
            Ok(())
        }
        EfsCommand::Review(EfsReviewCommand::Import(f)) => run_one(ctx, &efs::review::ReviewStage, f.force),
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

/// Run one stage on its own; its upstream stages must be up to date.
fn run_one(ctx: &Ctx, stage: &dyn Stage, force: bool) -> Result<()> {
    let rows = pipeline::status(ctx.settings);
    let states = rows.into_iter().map(|r| (r.stage.to_string(), r.state)).collect();
    let report = stage::execute(ctx.settings, ctx.printer, stage, force, &states)?;
    ctx.printer.summary(&pipeline::render_report(&report), &report);
    Ok(())
}
