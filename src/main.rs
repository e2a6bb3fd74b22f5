//! The `benchgen` binary: parse, dispatch, render the error, exit.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use benchgen::cli::{
    Cli, Command, EfsCommand, EfsReviewCommand, GraphCommand, GraphReviewCommand, InitArgs, LlmCommand, McpCommand,
    RegistryCommand, ReleaseArgs, ReviewCommand, StagesFormat,
};
use benchgen::printer::Printer;
use benchgen::settings::Settings;
use benchgen::stage::{self, Ctx, Stage};
use benchgen::{clean, error, explain, llm, mcp, pipeline, registry, release, sandbox, stages};

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
    // A local model server lives from its first stage to the end of the command.
    llm::local::keep_until_stopped();
    let result = dispatch(&cli, &printer);
    llm::local::stop_shared();
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
    // `release verify` reads only the folder it is given; with `--servers`, the servers of an
    // explicit `--config` stand in for the recorded starts of the pins of their names, and a
    // recorded stdio start runs only with `--trust-recorded-starts`.
    if let Command::Release(benchgen::cli::ReleaseArgs {
        command: Some(benchgen::cli::ReleaseCommand::Verify(a)),
        ..
    }) = &cli.command
    {
        let live = benchgen::release::servers::Live::from_args(a.servers, a.trust_recorded_starts, &cli.global.config)?;
        return benchgen::release::verify::command(&a.dir, live.as_ref(), printer);
    }
    // `config reference` describes the settings types, not a config.
    if let Command::Config(benchgen::cli::ConfigCommand::Reference) = &cli.command {
        let docs: Vec<_> = stages::sections().iter().map(benchgen::settings::SectionDecl::doc).collect();
        printer.summary(&benchgen::config_doc::markdown(&docs), &docs);
        return Ok(());
    }
    // `init` writes a project; it needs none.
    if let Command::Init(a) = &cli.command {
        return init_command(a, &cli.global, printer);
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
        let used = settings.as_ref().map(stages::prompts_used).unwrap_or_default();
        return benchgen::llm::prompts::command(settings.as_ref(), used, c, printer);
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
    settings.llm_batch = cli.global.batch;
    // The stage a command runs on its own, configured by its flags.
    let single = stage_command(&cli.command)?;
    // The pipeline is checked on every load (roles, prompts, servers, reads, ranges), so
    // a typo fails here, naming its key, before any stage runs; a stage command checks
    // only what it and its upstream need. `stages` lists what a config needs, so it also
    // works while the config is incomplete.
    match &single {
        _ if matches!(cli.command, Command::Check | Command::Sandbox(_) | Command::Stages(_)) => {}
        Some((stage, _)) => stages::check_stage(&settings, stage.spec().name)?,
        None => stages::check(&settings)?,
    }
    for w in load_warnings(&settings, &cli.command, single.as_ref().map(|(s, _)| s.as_ref())) {
        printer.warn(&format!("{}: {}", w.location, w.message));
    }
    stage::recover_if_idle(&settings, printer)?;
    let ctx = Ctx::new(&settings, printer);
    if let Some((stage, force)) = single {
        return pipeline::run_one(&ctx, stage.as_ref(), force);
    }
    project_command(&ctx, &cli.command)
}

/// What the load warns of without failing ([`stages::warnings`]), for the stages the command
/// runs: a stage command's or `llm batch-export`'s stage, the pipeline's for `run` and
/// `check`. Other commands run no stage and are not warned.
fn load_warnings(settings: &Settings, command: &Command, single: Option<&dyn Stage>) -> Vec<error::Problem> {
    if let Some(stage) = single {
        return stages::warnings(settings, stage);
    }
    let list = match command {
        Command::Check | Command::Run(_) => stages::enabled(settings),
        Command::Llm(LlmCommand::BatchExport(a)) => stages::get(&a.stage).into_iter().collect(),
        _ => Vec::new(),
    };
    list.iter().flat_map(|s| stages::warnings(settings, s.as_ref())).collect()
}

/// `init`: write the project, list what it holds and what the first run asks of the LLM.
fn init_command(a: &InitArgs, global: &benchgen::cli::GlobalArgs, printer: &Printer) -> Result<()> {
    let created = benchgen::init::init(a)?;
    let mut text = format!("created a benchgen project in `{}`:\n", created.dir);
    for f in &created.files {
        text.push_str(&format!("  {f}\n"));
    }
    for n in &created.notes {
        text.push_str(&format!("  {n}\n"));
    }
    text.push_str("next: read its README.md (files to drop under raw/, variables to set), then `benchgen check`");
    // The first run's LLM work, as `check` reckons it (files still to drop under raw/
    // only loosen the bounds; a config that does not load yet is `check`'s to explain).
    // `--probe` asks as `llm ping --probe` would under the same global flags.
    let settings = Settings::load(&std::path::Path::new(&created.dir).join(&created.config)).ok().map(|mut s| {
        s.llm_mode = global.llm_mode;
        s.llm_batch = global.batch;
        s
    });
    // `--probe`: the roles are timed before the table is reckoned, which then uses them. A
    // role that fails leaves the project written: the failure is shown, with `check` next.
    let probed = match (&settings, a.probe) {
        (Some(s), true) => Some(llm::ping::ping(s, None, true).map_err(|e| format!("{e:#}"))),
        (None, true) => Some(Err("the new config does not load yet (`benchgen check` says why)".to_string())),
        (_, false) => None,
    };
    match &probed {
        Some(Ok(results)) => {
            text.push_str(&format!("\n{}", llm::ping::render(results)));
            if results.iter().any(|r| r.failure().is_some()) {
                text.push_str("\nfix the failed role in the config, then `benchgen llm ping --probe`");
            }
        }
        Some(Err(e)) => text.push_str(&format!("\nthe probe did not run: {e}")),
        None => {}
    }
    let estimates = settings.as_ref().map(benchgen::estimate::table);
    match &estimates {
        Some(t) if !t.rows.is_empty() => text.push_str(&format!("\n{}", benchgen::estimate::render(t))),
        _ => text.push_str("\nrun `benchgen check` for the first run's LLM exchanges and time"),
    }
    let mut summary = serde_json::to_value(&created)?;
    summary["estimates"] = serde_json::to_value(&estimates)?;
    match &probed {
        Some(Ok(results)) => summary["probe"] = serde_json::to_value(results)?,
        Some(Err(e)) => summary["probe_error"] = serde_json::Value::String(e.clone()),
        None => {}
    }
    printer.summary(&text, &summary);
    Ok(())
}

/// A command that needs the project's config, loaded and checked: the ones that are not a
/// single stage.
fn project_command(ctx: &Ctx, command: &Command) -> Result<()> {
    let (settings, printer) = (ctx.settings, ctx.printer);
    match command {
        Command::Registry(RegistryCommand::Scrape(a)) => registry::commands::scrape(settings, printer, a),
        Command::Registry(RegistryCommand::Merge(a)) => registry::commands::merge(settings, printer, a),
        Command::Registry(RegistryCommand::Tools(a)) => registry::commands::tools(settings, printer, a),
        Command::Efs(c) => efs_command(ctx, c),
        Command::Graph(GraphCommand::Review(GraphReviewCommand::Export(f))) => {
            let (path, n) = benchgen::graph::review::export(settings, f.force)?;
            let shown = settings.display_path(&path);
            printer.summary(
                &format!("wrote `{shown}` ({n} candidate edges); fill in `decision` (add/remove) and `reviewer`"),
                &serde_json::json!({"sheet": shown, "edges": n}),
            );
            Ok(())
        }
        Command::Review(ReviewCommand::Serve(a)) => benchgen::review::serve::serve(settings, printer, a.addr),
        Command::Run(a) => {
            // Each stage is prepared as it comes (the review stages drain the web app's outbox).
            let reports = pipeline::run(ctx, a.from.as_deref(), a.until.as_deref(), a.force)?;
            printer.summary("", &reports); // the human text was streamed per stage
            Ok(())
        }
        Command::Status => {
            let rows = pipeline::status(settings);
            printer.summary(&pipeline::render_status(&rows), &rows);
            Ok(())
        }
        Command::Check => {
            stages::check(settings)?;
            let n = stages::enabled(settings).len();
            let shown = settings.display_path(&settings.config_path);
            // Printed as the config was loaded; counted here, and listed in the JSON.
            let warnings = load_warnings(settings, command, None);
            let warned = match warnings.len() {
                0 => String::new(),
                w => format!(", {w} warning{} (above)", if w == 1 { "" } else { "s" }),
            };
            // What the first run asks of the LLM, and how long that takes here.
            let estimates = benchgen::estimate::table(settings);
            printer.summary(
                &format!(
                    "`{shown}`: no problems ({n} stages in the pipeline){warned}\n{}",
                    benchgen::estimate::render(&estimates)
                ),
                &serde_json::json!({
                    "config": shown, "problems": [], "warnings": warnings, "stages": n, "estimates": estimates}),
            );
            Ok(())
        }
        Command::Stages(a) => {
            let rows = stages::rows(settings);
            let text = match a.format {
                StagesFormat::Text => stages::render_text(&rows),
                StagesFormat::Dot => stages::render_dot(&rows),
                StagesFormat::Markdown => stages::markdown_table(settings),
            };
            printer.summary(&text, &rows);
            Ok(())
        }
        Command::Clean(a) => {
            let c = clean::clean(settings, &a.stages)?;
            printer.summary(&clean::render(&c), &c);
            Ok(())
        }
        Command::Score(_) | Command::Init(_) | Command::Prompts(_) | Command::Config(_) => {
            unreachable!("handled before the config is loaded")
        }
        Command::Explain(a) => {
            let x = explain::explain(settings, &a.id)?;
            printer.summary(&explain::render(&x), &x);
            Ok(())
        }
        Command::Llm(c) => llm_command(ctx, c),
        Command::Mcp(McpCommand::Tools(a)) => mcp::commands::tools(settings, printer, &a.server),
        Command::Mcp(McpCommand::Call(a)) => mcp::commands::call(settings, printer, &a.server, &a.tool, &a.args),
        Command::Mcp(McpCommand::Import(a)) => mcp::commands::import(printer, &a.file),
        Command::Sandbox(a) => sandbox::command::run(settings, printer, a),
        Command::Stage(_)
        | Command::Execute(_)
        | Command::Release(_)
        | Command::Registry(RegistryCommand::Import(_)) => unreachable!("stage commands are run above"),
    }
}

/// The stage a command runs on its own with its `--force` (`None`: not a stage command): a
/// plain one from the stage list, a typed one configured by its flags.
fn stage_command(c: &Command) -> Result<Option<(Box<dyn Stage>, bool)>> {
    let (stage, force): (Box<dyn Stage>, bool) = match c {
        Command::Stage(call) => (stages::get(call.stage)?, call.force),
        Command::Registry(RegistryCommand::Import(a)) => {
            let stage = registry::ImportStage { file: a.file.clone(), format: a.format, lenient: a.lenient };
            (Box::new(stage), a.force.force)
        }
        Command::Efs(EfsCommand::Review(EfsReviewCommand::Import(a))) => {
            (Box::new(benchgen::efs::review::ReviewStage { allow_empty: a.allow_empty }), a.force.force)
        }
        Command::Execute(a) => (Box::new(stages::execute_stage(a.queries.clone())), a.force.force),
        Command::Release(ReleaseArgs { command: None, force }) => (Box::new(release::ReleaseStage), force.force),
        _ => return Ok(None),
    };
    Ok(Some((stage, force)))
}

/// The `llm` commands: ping the roles, their exchange stats, the batches and their files.
fn llm_command(ctx: &Ctx, c: &LlmCommand) -> Result<()> {
    let (settings, printer) = (ctx.settings, ctx.printer);
    match c {
        LlmCommand::Ping(a) => {
            let results = llm::ping::ping(settings, a.role.as_deref(), a.probe)?;
            printer.summary(&llm::ping::render(&results), &results);
            match results.iter().find_map(|r| r.failure().map(|what| (r, what))) {
                Some((r, what)) => Err(anyhow::anyhow!("role `{}` failed {what}", r.role)),
                None => Ok(()),
            }
        }
        LlmCommand::Stats(a) => {
            let rows = llm::stats::collect(settings, a.stage.as_deref())?;
            printer.summary(&llm::stats::render(&rows), &rows);
            Ok(())
        }
        LlmCommand::Batches(a) => {
            if let Some(id) = &a.forget {
                let f = llm::batch_api::forget(settings, id)?;
                printer.summary(&llm::batch_api::render_forgotten(&f), &f);
                return Ok(());
            }
            let rows = llm::batch_api::list(settings)?;
            printer.summary(&llm::batch_api::render(&rows), &rows);
            Ok(())
        }
        LlmCommand::BatchExport(a) => {
            let exported = stages::get(&a.stage)?;
            // An agent loop records a turn whose model call failed (the export's stop among
            // them) as a failed run and commits its artifacts: an export would leave the
            // stage up to date with every query failed, and the imported answers unused.
            if let Some(r) = exported.turn_roles(settings).first() {
                return Err(benchgen::error::hinted(
                    format!(
                        "`{}` runs agent loops (role `{}`, `{}`), whose turns cannot be exported as one round",
                        a.stage, r.name, r.key
                    ),
                    "run it live, or with the role in `mode = \"batch\"` (each turn a batch job); export the single-round stages",
                ));
            }
            let default = settings.artifacts.join("llm").join(format!("batch-export-{}.jsonl", a.stage));
            let out = a.out.clone().unwrap_or(default);
            // Not `--force`: a stage that is up to date needs no request, and its file is empty.
            let roles: Vec<String> = exported.roles(settings).into_iter().map(|r| r.name).collect();
            let r = llm::batch_api::export(settings, &out, &roles, || {
                exported.prepare(settings, printer)?;
                let states = pipeline::states(settings);
                stage::execute(settings, printer, exported.as_ref(), false, &states).map(|_| ())
            })?;
            printer.summary(&llm::batch_api::render_export(&r), &r);
            Ok(())
        }
        LlmCommand::BatchImport(a) => {
            let r = llm::batch_api::import(settings, &a.file)?;
            printer.summary(&llm::batch_api::render_import(&r), &r);
            Ok(())
        }
    }
}

fn efs_command(ctx: &Ctx, c: &EfsCommand) -> Result<()> {
    use benchgen::efs;
    match c {
        EfsCommand::Review(EfsReviewCommand::Export(f)) => {
            let (path, n) = efs::review::export(ctx.settings, f.force)?;
            let shown = ctx.settings.display_path(&path);
            ctx.printer.summary(
                &format!("wrote `{shown}` ({n} sets); fill in `decision`, `target`, `reviewer`, `note`"),
                &serde_json::json!({"sheet": shown, "sets": n}),
            );
            Ok(())
        }
        EfsCommand::Review(EfsReviewCommand::Import(_)) => unreachable!("a stage command"),
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
