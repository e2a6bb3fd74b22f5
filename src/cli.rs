//! Command-line arguments (clap). Doc comments here are the `--help` text of the
//! commands that are not stages or that take flags of their own; the plain stage
//! commands (only `--force`) are built from the stage list by `stage_cli`, which also
//! gives every stage command its help. Only parsing and validation live here;
//! `main.rs` dispatches.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::registry::RegistryFormat;
// Argument structs kept next to the commands that use them (so those modules need not
// import the CLI), re-exported here for the clap tree.
pub use crate::init::{InitArgs, Track};
pub use crate::llm::prompts::{PromptsCommand, PromptsExportArgs, PromptsShowArgs};
pub use crate::registry::commands::{MergeArgs, ScrapeArgs, ToolsArgs};
pub use crate::sandbox::command::SandboxArgs;

/// Build tool-use benchmarks for LLM agents from real tool ecosystems.
///
/// Each stage reads earlier artifacts, writes its own under `artifacts/<stage>/`
/// with a `manifest.json`, and is skipped when that manifest is up to date.
/// Every decision is recorded in the ledger (`artifacts/ledger.sqlite`), so
/// `benchgen explain ID` can show how any item was made.
///
/// Exit codes: 0 success; 1 a failure you can act on (bad input, a failed stage: the error
/// names file, record and field); 2 a usage error; 3 waiting for people (`run` or `release`
/// stopped because samples wait for review or a decision: not a failure).
#[derive(Debug, Parser)]
#[command(name = "benchgen", version, propagate_version = true, max_term_width = 100)]
pub struct TypedCli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The parsed command line: [`TypedCli`]'s tree plus the plain stage commands, which
/// `stage_cli` builds from the stage list (its `CommandFactory` and `FromArgMatches`).
#[derive(Debug)]
pub struct Cli {
    pub global: GlobalArgs,
    pub command: Command,
}

/// A plain stage command (`benchgen efs verify [--force]`): the stage it names.
#[derive(Debug, Clone, Copy)]
pub struct StageCall {
    /// The stage's name (`StageSpec::name`).
    pub stage: &'static str,
    pub force: bool,
}

/// The one-line help of command groups that hold only plain stages (the derive
/// describes the others), by their word.
pub const STAGE_GROUPS: &[(&str, &str)] = &[
    ("logs", "Tool-call logs of a domain: import (normalise + anonymise), curate, split"),
    ("synth", "Synthesised samples: chain queries from the graph, role-play dialogues"),
    (
        "levels",
        "ETOM's five levels (L1–L5) over the catalog: profiles, output schemas, each level, export. See docs/levels.md",
    ),
];

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Pipeline config; paths inside it are relative to the folder above `pipeline/`.
    #[arg(long, global = true, default_value = crate::settings::DEFAULT_CONFIG, env = "BENCHGEN_CONFIG")]
    pub config: PathBuf,
    /// More output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors and warnings on stderr; no summary.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Machine-readable summary on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// How LLM calls use the ledger: `cached` answers repeats from the ledger and calls the
    /// endpoint on a miss; `live` always calls (and records); `replay` never calls and fails
    /// on a miss.
    #[arg(long, global = true, value_enum, default_value = "cached", env = "BENCHGEN_LLM_MODE")]
    pub llm_mode: crate::llm::LlmMode,
    /// Send the LLM requests of every role whose provider is not `local` as OpenAI batch
    /// jobs, as `mode = "batch"` would (its `[llm.roles.NAME.batch]` knobs apply); changes
    /// no answer and no config hash. See docs/llm-batch-api.md.
    #[arg(long, global = true)]
    pub batch: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Get a catalog of MCP servers and tools.
    #[command(subcommand)]
    Registry(RegistryCommand),
    /// Equal function sets: groups of tools that do the same job.
    #[command(subcommand)]
    Efs(EfsCommand),
    /// The tool dependency graph from grouped multi-tool logs.
    #[command(subcommand)]
    Graph(GraphCommand),
    /// Review of the samples: two reviewers each, sheets, a web app, merge and agreement.
    #[command(subcommand)]
    Review(ReviewCommand),
    /// Run the pipeline's stages in order, skipping those that are up to date.
    ///
    /// The stages and what each reads and writes: `benchgen stages`. A stage runs when
    /// the config enables it (e.g. the EFS stages need `[efs]`); `--from`/`--until` take
    /// stage names.
    ///
    /// When no sample is accepted yet and some wait for review, the run stops at `release`
    /// with "waiting for people", what they are waiting for and the command to run next, and
    /// exit code 3 (not a failure: 1 is). `benchgen status` shows the same.
    Run(RunArgs),
    /// Show every stage as done, stale (with the reason) or missing.
    ///
    /// When the release waits for people (the state in which `run` stops with exit code
    /// 3), two more lines say so: "waiting for people: …" (how many samples wait, for what,
    /// and where) and "next: …" (what to do, then `benchgen run`); `--json` gives them as
    /// `waiting` on the `release` row. `status` itself exits 0.
    Status,
    /// Check the whole pipeline config before anything runs.
    ///
    /// Every LLM role, prompt template (it must exist and render with the variables its
    /// stage provides) and MCP server a stage names, every file a stage reads being
    /// produced by an earlier stage, and every numeric setting's range. All problems are
    /// listed at once, each with its config key; exit 1 when there is any. Every command
    /// that loads a config runs the same check first. Reads the config and prompts only.
    ///
    /// Warnings are printed and do not fail it (`--json` lists them under `warnings`): a role
    /// in batch mode that asks the turns of conversations (`execute`, `synth roleplay`,
    /// `eval`), each turn then waiting for a batch. See docs/llm-batch-api.md.
    Check,
    /// The pipeline as a graph: each stage with its command, reads, writes and LLM roles.
    ///
    /// Text by default, `--json`, or `--format dot` for Graphviz (`benchgen stages --format
    /// dot | dot -Tsvg > stages.svg`). `--format markdown` prints the README's stage table.
    /// Reads the config only.
    Stages(StagesArgs),
    /// Remove stage outputs so the next `run` makes them again.
    ///
    /// `benchgen clean STAGE…` removes `artifacts/<stage>/` and its unfinished work
    /// (`artifacts/.work/<stage>/`) for each stage named; later stages then show as stale.
    /// Without names, everything benchgen wrote under `artifacts/` goes: every stage
    /// folder, `.work/`, MCP server logs (`mcp/`) and the ledger.
    Clean(CleanArgs),
    /// Show the lineage of one item: how it entered and what decided its fate.
    ///
    /// ID is a tool (`server::tool`), a server name, a filter decision
    /// (`filter:server::tool`), a log session (`log:<id>`), a sample (`sample:<id>`: how
    /// it was made and validated and, once released, where it was released, its review and
    /// full lineage), a ledger event (`#42`) or an LLM exchange or MCP call by the hash an
    /// artifact names it with (`sha256:…`: an `exchange` or `call_hash`). Only the runs that
    /// produced the current artifacts are consulted.
    Explain(ExplainArgs),
    /// Talk to the MCP servers of `[mcp.servers]`: list tools, call one, import a config.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Serve every tool of a catalog as an MCP server with deterministic answers.
    ///
    /// Reads `artifacts/filter/catalog.json` (or `--catalog FILE`). Serves over stdio,
    /// or Streamable HTTP at `http://ADDR/mcp` with `--http ADDR` (loopback only; the URL
    /// is printed on stdout). Tool names are catalog ids (`server::tool`). Arguments are
    /// validated against each input schema; valid calls get output shaped by the output
    /// schema (else a generic shape), seeded by tool and arguments. Writes nothing
    /// unless `--call-log`. Fault flags are for tests and rehearsals.
    Sandbox(SandboxArgs),
    // A stage with flags of its own: its help comes from the stage list (`stage_cli`).
    Execute(ExecuteArgs),
    /// Check and account for the configured LLM roles (`[llm.roles.<role>]`).
    #[command(subcommand)]
    Llm(LlmCommand),
    /// The prompt templates benchgen ships, and the project's overrides of them.
    ///
    /// Every LLM stage renders a template built into benchgen. A file
    /// `pipeline/prompts/NAME.md` (the folder is `[llm] prompts_dir`) overrides the built-in
    /// NAME for that project; its text is hashed into the stage's manifest, so editing it
    /// makes the stage stale. To customise one: `benchgen prompts export`, edit the file,
    /// delete the others. Templates are minijinja; a line `--- user ---` splits the system
    /// message from the user message. Needs no pipeline config; with one, shows which stage
    /// uses which template and which are overridden.
    #[command(subcommand)]
    Prompts(PromptsCommand),
    /// The pipeline config's keys, from the settings types.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Start a benchgen project in DIR (default: the current folder).
    ///
    /// Writes a commented `pipeline/<name>.toml` with every section the track uses,
    /// `reviews/reviewers.toml`, a personas file, `.gitignore` (artifacts/, the review
    /// web app's secrets) and a README saying which raw files go where and which
    /// environment variables to set. Tracks: `logs` (a benchmark from your own tool-call
    /// logs), `registry` (ETOM's five levels over a registry of MCP servers), `both`.
    /// `--logs`, `--catalog` and `--registry` copy your files under `raw/` and detect their
    /// formats. Refuses to write into a folder that already holds a benchgen project.
    /// Then: `benchgen check`, `benchgen run`.
    Init(InitArgs),
    /// Score predictions against a benchmark (ETOM- and FinMCP-style metrics).
    ///
    /// Reads the benchmark files (`--bench`, repeatable: unified sample JSONL, ETOM
    /// `level_N.json`, FinMCP sample JSON) and the predictions (`--pred`: our JSONL,
    /// ETOM `{id, prediction}` JSONL, or FinMCP records with `messages_pred`); formats are
    /// detected unless given. Default: corrected metrics; `--compat etom|finmcp` reproduces a
    /// published evaluator exactly, defects included. Prints a table (or `--json`); writes
    /// only the files asked for (`--markdown`, `--per-sample`). Needs no pipeline config.
    /// Unreadable prediction lines are listed and the report still finishes, with exit code 1.
    Score(ScoreArgs),
    // A stage with flags of its own: its help comes from the stage list (`stage_cli`).
    Release(ReleaseArgs),
    /// A plain stage command, built from the stage list (never by the derive).
    #[command(skip)]
    Stage(StageCall),
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ReleaseArgs {
    #[command(subcommand)]
    pub command: Option<ReleaseCommand>,
    #[command(flatten)]
    pub force: ForceArgs,
}

#[derive(Debug, Subcommand)]
pub enum ReleaseCommand {
    /// Check a release folder: every file parses in its format, oracle predictions score
    /// 100 % (`benchgen score`, corrected and compat modes) on every part, every tool is in
    /// `tools.parquet`, dependencies point backward, every sample has lineage, and
    /// `SHA256SUMS` matches. Reads DIR only; writes nothing. Exit 1 with the first failures
    /// listed.
    ///
    /// `croissant.json` must list every file with its sha256, and `servers.json` (the MCP
    /// servers the samples were executed against, pinned) must parse. With `--servers`, each
    /// pinned server is started again and every tool added, removed or changed since the
    /// release is reported (exit 1): with an explicit `--config`, by the configured server of
    /// the same name; else by its recorded start. A recorded URL is connected to. A recorded
    /// stdio command (or a URL naming `${VAR}`s) comes from a folder anyone may have crafted:
    /// it is printed and skipped (a warning) unless `--trust-recorded-starts` is given, after
    /// reading it; when that leaves no server started, nothing was verified: exit 1, saying
    /// so. Servers with nothing to start (benchgen's in-process sandbox, a registry
    /// snapshot's server, a start whose credential was redacted at release) are warned about
    /// unless the config names one. Each start and listing has a deadline (`[mcp]
    /// startup_timeout_secs`, `list_timeout_secs`: 30 s and 120 s by default).
    Verify(ReleaseVerifyArgs),
}

#[derive(Debug, Args)]
pub struct ReleaseVerifyArgs {
    /// The release folder (`release/<name>-<version>`).
    pub dir: PathBuf,
    /// Also start every MCP server `servers.json` pins and report each tool added, removed
    /// or changed since the release (with `--json`: per server, even when it fails).
    #[arg(long)]
    pub servers: bool,
    /// With `--servers`: run the stdio commands `servers.json` records (and connect to its
    /// URLs that name `${VAR}`s), which are otherwise printed and skipped. Read them first: a
    /// crafted release runs what it likes. A recorded command runs with a cleared
    /// environment: only `PATH` and `HOME` (to find and run `npx`, `uvx`, `node`) and the
    /// variables its pin names, each with the value of the variable of the same name here.
    #[arg(long, requires = "servers")]
    pub trust_recorded_starts: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Every section and key of a pipeline config with its type, default and meaning.
    ///
    /// Markdown, made from the settings types: the reference part of docs/config.md (between
    /// its `config:begin` and `config:end` markers), which a test holds to this output. Needs
    /// no pipeline config.
    Reference,
}

#[derive(Debug, Subcommand)]
pub enum LlmCommand {
    /// Check roles end to end: one live typed call each (starting the local model server
    /// for `provider = "local"`). Records the exchange in the ledger (stage `llm-ping`);
    /// writes nothing else. Fails when any role fails. `--probe` also times one
    /// stage-sized exchange per role for `check`'s time column.
    Ping(PingArgs),
    /// LLM accounting from the ledger, per stage and role: calls, cache hits, retries,
    /// failures, prompt/completion tokens, latency p50/p90/p99 and estimated cost (when the
    /// role has `prices`). Reads `artifacts/ledger.sqlite`; writes nothing.
    Stats(LlmStatsArgs),
    /// Batch jobs of the roles in `mode = "batch"` (OpenAI batch API), oldest first: the
    /// provider's batch id, stage, role, state, whether benchgen has taken its answers,
    /// request counts, cost at the role's batch prices (when it has `prices`) and when it was
    /// created. Reads `artifacts/ledger.sqlite`; writes nothing, except with `--forget`.
    Batches(LlmBatchesArgs),
    /// Write the requests a stage would send through its `mode = "batch"` roles and the
    /// ledger cannot answer, as a batch input file for an offline engine (`vllm run-batch
    /// -i FILE -o OUT`): `custom_id` is the request hash. Runs the stage (its upstream must
    /// be done) up to its first round, which is all that can be exported: import the
    /// answers, then run the stage again or export its next round. Records the export in
    /// the ledger (`benchgen llm batches`); writes no stage artifacts. A stage that fails
    /// for a reason of its own fails the export with that error, after writing what it kept.
    BatchExport(BatchExportArgs),
    /// Take an offline engine's batch output file (`vllm run-batch -o OUT`) into the
    /// ledger, as a downloaded batch output is: the stage then answers those requests from
    /// the ledger without a request. Every `custom_id` must be a request of a `benchgen llm
    /// batch-export`.
    BatchImport(BatchImportArgs),
}

#[derive(Debug, Args)]
pub struct LlmBatchesArgs {
    /// Give up on an unfinished batch, such as one the server no longer has (a poll or
    /// download answering 404 stops every run that follows it): its ledger row stays, as
    /// state `forgotten`, and the next run of its stage submits its requests again. BATCH_ID
    /// is the provider's batch id, or for a batch never created, its `input_file_id`
    /// (`--json`). Forget a batch the server still runs and its requests are paid twice.
    #[arg(long, value_name = "BATCH_ID")]
    pub forget: Option<String>,
}

#[derive(Debug, Args)]
pub struct BatchExportArgs {
    /// The stage whose requests to export.
    #[arg(long, value_name = "STAGE")]
    pub stage: String,
    /// The file to write (default `artifacts/llm/batch-export-STAGE.jsonl`).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct BatchImportArgs {
    /// The engine's output file (JSONL, OpenAI batch output format).
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct PingArgs {
    /// Only this role (default: every configured role).
    #[arg(long)]
    pub role: Option<String>,
    /// Also time one stage-sized exchange per role (a ~500-token prompt, a one-sentence
    /// JSON answer; ledger stage `llm-probe`), so `check` and `init` reckon how long the
    /// first run takes here instead of giving the ping's lower bound.
    #[arg(long)]
    pub probe: bool,
}

#[derive(Debug, Args)]
pub struct LlmStatsArgs {
    /// Only this stage.
    #[arg(long)]
    pub stage: Option<String>,
}

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Benchmark file (repeat for several).
    #[arg(long = "bench", value_name = "FILE", required = true)]
    pub benches: Vec<PathBuf>,
    /// Predictions file (JSONL, or a JSON list of FinMCP inference records).
    #[arg(long, value_name = "FILE")]
    pub pred: PathBuf,
    /// Prediction format (default: detected per record from its keys).
    #[arg(long, value_enum)]
    pub format: Option<crate::score::PredFormat>,
    /// Benchmark format (default: detected from the content).
    #[arg(long, value_enum)]
    pub bench_format: Option<crate::score::BenchFormat>,
    /// ETOM level of benchmark files not named `level_N.json`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=5))]
    pub etom_level: Option<u8>,
    /// Reproduce a published evaluator instead of the corrected metrics.
    #[arg(long, value_enum, value_name = "EVALUATOR")]
    pub compat: Option<crate::score::CompatArg>,
    /// Write per-sample results with reasons (JSONL) to FILE.
    #[arg(long, value_name = "FILE")]
    pub per_sample: Option<PathBuf>,
    /// Write the report as Markdown to FILE.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum EfsCommand {
    /// Human review of candidate sets.
    #[command(subcommand)]
    Review(EfsReviewCommand),
    /// Compare our sets with a reference EFS file (ETOM `tool_equivalence_sets.json` shape).
    ///
    /// Reads `artifacts/efs-finalize/final.json` (or `--sets FILE`), the reference, and when
    /// present `artifacts/efs-pairs/pairs.csv` and the filtered catalog. Prints
    /// co-membership pair precision/recall/F1, exact set matches and the reference
    /// pairs the candidate stage never proposed. Writes nothing unless `--out`.
    Compare(CompareArgs),
}

#[derive(Debug, Subcommand)]
pub enum GraphCommand {
    /// Human review of the graph's edges.
    #[command(subcommand)]
    Review(GraphReviewCommand),
}

#[derive(Debug, Subcommand)]
pub enum GraphReviewCommand {
    /// Write `reviews/graph/graph_review.csv` (one row per candidate edge of
    /// `graph-build/candidates.json`). Refuses to overwrite a sheet holding decisions
    /// unless `--force`.
    Export(ForceArgs),
}

#[derive(Debug, Subcommand)]
pub enum ReviewCommand {
    /// The review web app: sign-in links, blind scoring with keyboard shortcuts and
    /// autosave, progress, and an adjudication view for leads.
    ///
    /// Each sample is shown turn by turn: every tool call with its tool's description (from
    /// the pipeline's catalogs), its arguments as a table, its full result (long ones
    /// collapsed) and its place in the reference plan; the final answer apart; the rubric
    /// beside it. A second adjudication of a sample is recorded as a new revision.
    ///
    /// Reads `review-assign/` and the review secret; keeps scores in `reviews/review.sqlite`
    /// and writes `reviews/web/*.jsonl` for `review import` and `review merge`. Listens on
    /// `[review.serve] addr` (loopback by default) until Ctrl-C.
    Serve(ReviewServeArgs),
}

#[derive(Debug, Args)]
pub struct ReviewServeArgs {
    /// Listen address (default `[review.serve] addr`, `127.0.0.1:8377`; port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    pub addr: Option<std::net::SocketAddr>,
}

#[derive(Debug, Subcommand)]
pub enum EfsReviewCommand {
    /// Write the review sheet `reviews/efs/efs_review.csv` (one row per set, member
    /// and top-down candidate). Refuses to overwrite a sheet holding decisions
    /// unless `--force`.
    Export(ForceArgs),
    // A stage with flags of its own: its help comes from the stage list (`stage_cli`).
    Import(ReviewImportArgs),
}

#[derive(Debug, Args)]
pub struct ReviewImportArgs {
    /// Import empty or BOM-only sheets as "no decisions" instead of refusing them.
    #[arg(long)]
    pub allow_empty: bool,
    #[command(flatten)]
    pub force: ForceArgs,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Reference EFS file: `[{set_id, size, tools: [{tool_id, server_name, tool_name, description}]}]`.
    #[arg(long)]
    pub reference: PathBuf,
    /// Our sets (default `artifacts/efs-finalize/final.json`); ETOM shape accepted too.
    #[arg(long)]
    pub sets: Option<PathBuf>,
    /// Also write the comparison as JSON to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum RegistryCommand {
    // A stage with flags of its own: its help comes from the stage list (`stage_cli`).
    Import(ImportArgs),
    /// Page through a registry API and save every page as received.
    ///
    /// Reads `[registry.sources.NAME]` (kind glama, official or smithery; base_url,
    /// api_key_env, page_size, rate_per_s, burst, max_pages, timeouts). Writes
    /// `raw/registry/NAME/SNAPSHOT/` (`page-NNNNNN.json`, Smithery `details/`, and
    /// `state.json`). Resumes the latest unfinished snapshot of the source unless
    /// `--new` or `--snapshot`; a saved page is never fetched again.
    Scrape(ScrapeArgs),
    /// Merge scraped snapshots of several sources into one catalog with provenance.
    ///
    /// Reads each SNAPSHOT folder (default: `registry.snapshots`, else the latest complete
    /// snapshot of every configured source, by name); the first has the highest priority. Writes `catalog.json`,
    /// `merge.md`, `conflicts.csv`, `review.csv` and `categories.csv` into `--out`.
    Merge(MergeArgs),
    /// List tools live over MCP for catalog servers that have none.
    ///
    /// Starts allowed npm/PyPI packages (pinned versions) or connects to Streamable
    /// HTTP remotes (`[registry.tools]`), each under a time and memory limit. Writes
    /// the catalog with the tools to `--out` and per-server outcomes to `live.json`
    /// beside it.
    Tools(ToolsArgs),
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Snapshot file; default `registry.source` from the config.
    pub file: Option<PathBuf>,
    /// Snapshot format.
    #[arg(long, value_enum)]
    pub format: Option<RegistryFormat>,
    /// Leave invalid records out (each listed with its reason) instead of failing.
    #[arg(long)]
    pub lenient: bool,
    #[command(flatten)]
    pub force: ForceArgs,
}

#[derive(Debug, Args, Clone, Copy)]
pub struct ForceArgs {
    /// Rerun even when the stage is up to date.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct StagesArgs {
    /// Output format (`--json` also works).
    #[arg(long, value_enum, default_value = "text")]
    pub format: StagesFormat,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum StagesFormat {
    Text,
    Dot,
    Markdown,
}

#[derive(Debug, Args)]
pub struct CleanArgs {
    /// Stages to clean (default: everything under `artifacts/`).
    #[arg(value_name = "STAGE")]
    pub stages: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// First stage to run (earlier stages must be up to date).
    #[arg(long, value_name = "STAGE")]
    pub from: Option<String>,
    /// Last stage to run.
    #[arg(long, value_name = "STAGE")]
    pub until: Option<String>,
    /// Rerun every selected stage even when up to date.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// `server::tool`, `server`, `filter:<id>` or `#<event id>`.
    pub id: String,
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// List every tool of a configured server (all pages).
    ///
    /// Spawns (stdio) or connects to (Streamable HTTP) SERVER from `[mcp.servers]`
    /// or the `mcp.import` file; a spawned server's stderr goes to
    /// `artifacts/mcp/logs/SERVER.stderr.log`. Writes nothing else.
    Tools(McpToolsArgs),
    /// Call one tool and print its result (exit 1 on a tool error or a failed call).
    ///
    /// With `--json` the output is `{server, tool, arguments, latency_ms, status,
    /// output | failure}` where status is `ok`, `tool_error` or `failed`.
    Call(McpCallArgs),
    /// Check a desktop-client `mcpServers` JSON file and print it as `[mcp.servers.*]` TOML.
    Import(McpImportArgs),
}

#[derive(Debug, Args)]
pub struct McpToolsArgs {
    /// Server name from the config.
    pub server: String,
}

#[derive(Debug, Args)]
pub struct McpCallArgs {
    /// Server name from the config.
    pub server: String,
    /// Tool name as the server lists it.
    pub tool: String,
    /// Arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    pub args: String,
}

#[derive(Debug, Args)]
pub struct McpImportArgs {
    /// A JSON file with `{"mcpServers": {...}}`.
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct ExecuteArgs {
    /// Queries file (default: `execute.queries` from the config).
    #[arg(long, value_name = "FILE")]
    pub queries: Option<PathBuf>,
    #[command(flatten)]
    pub force: ForceArgs,
}
