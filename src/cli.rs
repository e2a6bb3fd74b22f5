//! Command-line arguments (clap). Doc comments here are the `--help` text.
//! Only parsing and validation live here; `main.rs` dispatches.

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
#[derive(Debug, Parser)]
#[command(name = "benchgen", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

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
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Get a catalog of MCP servers and tools.
    #[command(subcommand)]
    Registry(RegistryCommand),
    /// Drop servers and tools a benchmark must not contain, recording why.
    ///
    /// Reads `artifacts/registry-import/catalog.json` and the `[filter]` section of the
    /// config. Writes `artifacts/filter/`: `catalog.json` (what remains),
    /// `dropped.csv` and `undecided.csv` (one row per server or tool with rule,
    /// class, reason and evidence) and `summary.json`; one `filter.decision` event
    /// per server and tool goes to the ledger. With `[filter] classifier_role`, matches
    /// of `action = "ask"` rules are decided by that LLM role (answers cached in the
    /// ledger; see `--llm-mode`). Skipped when up to date.
    Filter(ForceArgs),
    /// Corpus statistics of the catalog (and of the filtered catalog).
    ///
    /// Reads `artifacts/registry-import/catalog.json` and, when present,
    /// `artifacts/filter/catalog.json`. Writes `artifacts/stats/catalog.json`,
    /// `catalog.md` (tables) and `servers_per_category.svg`. Skipped when up to date.
    Stats(ForceArgs),
    /// Embed every tool of the filtered catalog with a local ONNX model.
    ///
    /// Reads `artifacts/filter/catalog.json` and `[embed]` (model files from
    /// `make setup` by default). Writes `artifacts/embed/vectors.f32` (row-major
    /// little-endian f32, L2-normalised) and `index.json` (tool id, row, text hash,
    /// model id). Tools whose text and model are unchanged since the previous run
    /// reuse their vectors. Skipped when up to date.
    Embed(ForceArgs),
    /// Equal function sets: groups of tools that do the same job.
    #[command(subcommand)]
    Efs(EfsCommand),
    /// Tool-call logs of a domain: import (normalise + anonymise), curate, split.
    #[command(subcommand)]
    Logs(LogsCommand),
    /// The tool dependency graph from grouped multi-tool logs.
    #[command(subcommand)]
    Graph(GraphCommand),
    /// Review of the samples: two reviewers each, sheets, a web app, merge and agreement.
    #[command(subcommand)]
    Review(ReviewCommand),
    /// Synthesised samples: chain queries from the graph, role-play dialogues.
    #[command(subcommand)]
    Synth(SynthCommand),
    /// Automatic validation of every log-track sample (real, chains, dialogues), with labels.
    ///
    /// Reads the benchmark pool `logs-split/benchmark.jsonl`, the chains
    /// `synth-chains/chains.jsonl` (with `synth-chains/sampling.json` for the funnel) and their
    /// executions `execute/trajectories.jsonl`, and the
    /// dialogues `synth-roleplay/dialogues.jsonl` (each when present). A sample passes when
    /// every reference call ran without error (chains also: answered, chain order kept;
    /// dialogues also: the LLM `synth.judge_role` finds every user request addressed).
    /// Writes `artifacts/validate/`: `samples.jsonl` (accepted, unified format, sorted by
    /// id), `finmcp.json` (the same in FinMCP's sample format), `verdicts.jsonl` (every
    /// sample with labels and rejection reasons), `report.md` (yield funnel per
    /// sub-scenario, Table-1-style statistics) and `failed.json` when checks failed.
    Validate(ForceArgs),
    /// ETOM's five levels (L1–L5) over the catalog: profiles, output schemas, each
    /// level, export. See docs/levels.md.
    #[command(subcommand)]
    Levels(LevelsCommand),
    /// Run the pipeline's stages in order, skipping those that are up to date.
    ///
    /// The stages and what each reads and writes: `benchgen stages`. A stage runs when
    /// the config enables it (e.g. the EFS stages need `[efs]`); `--from`/`--until` take
    /// stage names.
    Run(RunArgs),
    /// Show every stage as done, stale (with the reason) or missing.
    Status,
    /// Check the whole pipeline config before anything runs.
    ///
    /// Every LLM role, prompt template (it must exist and render with the variables its
    /// stage provides) and MCP server a stage names, every file a stage reads being
    /// produced by an earlier stage, and every numeric setting's range. All problems are
    /// listed at once, each with its config key; exit 1 when there is any. Every command
    /// that loads a config runs the same check first. Reads the config and prompts only.
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
    /// Run queries with an LLM agent over MCP tools and record reference trajectories.
    ///
    /// Reads the queries file (`--queries FILE` or `execute.queries`; JSON Lines or a JSON
    /// array of `{id, query, chain?}`), the servers of `[mcp.servers]` (or
    /// `execute.servers`) and the LLM role `execute.role`. Without a file and with `[synth]`,
    /// reads the chain queries `synth-chains/queries.jsonl` and runs them (role
    /// `synth.assistant_role`) against `synth.server`, or by default a sandbox serving
    /// `logs-import/catalog.json` that answers with results logged in
    /// `logs-import/sessions.jsonl` for equal calls. Writes `artifacts/execute/`:
    /// `trajectories/<id>.json`, `trajectories.jsonl` and `summary.json`; every tool call is an `mcp.call`
    /// ledger event linked to the LLM exchange that asked for it (trajectories name both by
    /// hash; timings are in the ledger). The loop's settings
    /// (`max_calls`, `system_prompt`, `answer_nudge` for a turn left blank after tool calls,
    /// …) are in `[execute]`. A query that fails is recorded with its reason and the run
    /// goes on. Finished queries are checkpointed; skipped when up to date.
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
    /// The versioned benchmark: `release/<name>-<version>/` (`[release] name`, `version`).
    ///
    /// Reads the sample pool (`validate/samples.jsonl`, `levels-export/samples.jsonl`), the
    /// review decisions (`review-merge/decisions.jsonl`, required unless `[release]
    /// require_review = false`) and agreement figures (`review-merge/report.md`), the catalogs (`filter/catalog.json`,
    /// `logs-import/catalog.json`), `efs-finalize/tool_equivalence_sets.json`, the ledger and
    /// the previous version's `samples.jsonl`. Writes `artifacts/release/` and the same files
    /// into `release/<name>-<version>/`: `level_1.json`, `level_2.json`, `level_3.json`,
    /// `level_4.json`, `level_5.json`,
    /// `tool_equivalence_sets.json`, `finmcp_single_tool.json`, `finmcp_multi_tool.json`,
    /// `finmcp_multi_turn.json`, `samples.jsonl`, `samples.parquet`, `tools.parquet`,
    /// `lineage.jsonl`, the dataset card `README.md` with `plots/*.svg`, `CHANGELOG.md` and
    /// `SHA256SUMS`. A published version is never overwritten. `benchgen release verify DIR`
    /// checks a release.
    Release(ReleaseArgs),
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
    Verify(ReleaseVerifyArgs),
}

#[derive(Debug, Args)]
pub struct ReleaseVerifyArgs {
    /// The release folder (`release/<name>-<version>`).
    pub dir: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum LlmCommand {
    /// Check roles end to end: one live typed call each (starting the local model server
    /// for `provider = "local"`). Records the exchange in the ledger (stage `llm-ping`);
    /// writes nothing else. Fails when any role fails.
    Ping(PingArgs),
    /// LLM accounting from the ledger, per stage and role: calls, cache hits, retries,
    /// failures, prompt/completion tokens, latency p50/p90/p99 and estimated cost (when the
    /// role has `prices`). Reads `artifacts/ledger.sqlite`; writes nothing.
    Stats(LlmStatsArgs),
}

#[derive(Debug, Args)]
pub struct PingArgs {
    /// Only this role (default: every configured role).
    #[arg(long)]
    pub role: Option<String>,
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
    /// Candidate pairs of possibly equivalent tools, and the plan of LLM calls that will judge them (no LLM).
    ///
    /// Reads `artifacts/filter/catalog.json`, `artifacts/embed/` (`index.json`,
    /// `vectors.f32`) and `[efs.pairs]`.
    /// Each tool keeps its top-k neighbours by a score combining cosine similarity
    /// with name and parameter overlap (minus penalties for differing actions and a
    /// shared server); a pair qualifies if either endpoint keeps it. Plans the
    /// verification calls (listwise: greedy set cover of the pairs by anchor tools)
    /// and prints their number. Writes `artifacts/efs-pairs/pairs.csv` (planned
    /// pairs), `calls.jsonl` (one line per planned call), `left_out.csv` (pairs
    /// `max_calls` left out), `similarity.svg` and `summary.json`.
    /// Skipped when up to date.
    Pairs(ForceArgs),
    /// The LLM judges the candidate pairs as planned: equivalent yes/no with a one-line reason.
    ///
    /// Reads `artifacts/efs-pairs/calls.jsonl` and `pairs.csv`, `artifacts/filter/catalog.json`,
    /// `[efs.verify]` and the prompt `pipeline/prompts/efs_verify_list.md` (listwise, the
    /// default: an anchor against its candidates) or `efs_verify.md` (pairwise). Writes
    /// `artifacts/efs-verify/verdicts.json`, `conflicts.json` (pairs judged differently by
    /// several calls; they count as not equivalent) and one `verdict` ledger event per pair
    /// (its parent is the LLM exchange); `failed.json` lists calls left out when
    /// `[efs.verify] max_failed_share` lets some fail. Resumable: an interrupted run
    /// keeps every call it got. Skipped when up to date.
    Verify(ForceArgs),
    /// Union–find over verified pairs into candidate sets (no LLM).
    ///
    /// Reads `artifacts/filter/catalog.json`, `artifacts/efs-pairs/pairs.csv` and
    /// `artifacts/efs-verify/verdicts.json`.
    /// Writes `artifacts/efs-build/sets.json` (members sorted, sets by first member,
    /// evidence per set). Skipped when up to date.
    Build(ForceArgs),
    /// Top-down cross-check: requests per set, retrieval, LLM selection.
    ///
    /// Reads `artifacts/filter/catalog.json`, `artifacts/efs-build/sets.json`,
    /// `artifacts/embed/` (`index.json`, `vectors.f32`) and `[efs.topdown]`.
    /// Writes `artifacts/efs-topdown/results.json` (requests, retrieved and selected
    /// tools, metrics per set) and `items.json` (review items: outside tools
    /// selected, members never selected, sets split across requests); `failed.json`
    /// lists sets left out when `[efs.topdown] max_failed_share` lets some fail.
    /// Resumable per set. Skipped when up to date.
    Topdown(ForceArgs),
    /// Human review of candidate sets.
    #[command(subcommand)]
    Review(EfsReviewCommand),
    /// The final sets, with decisions and evidence, and the EFS report.
    ///
    /// Reads `artifacts/filter/catalog.json`, `artifacts/efs-build/sets.json`,
    /// `artifacts/efs-pairs/pairs.csv`, `artifacts/efs-verify/verdicts.json`, the manifests
    /// of the EFS stages (for the cost table) and, when present,
    /// `artifacts/efs-topdown/items.json` and `artifacts/efs-review-import/decisions.json`.
    /// Writes `artifacts/efs-finalize/final.json`, `tool_equivalence_sets.json` (ETOM shape)
    /// and `report.md`. Sets without a human decision follow `[efs.finalize] policy`
    /// and are marked `unreviewed`. Skipped when up to date.
    Finalize(ForceArgs),
    /// Compare our sets with a reference EFS file (ETOM `tool_equivalence_sets.json` shape).
    ///
    /// Reads `artifacts/efs-finalize/final.json` (or `--sets FILE`), the reference, and when
    /// present `artifacts/efs-pairs/pairs.csv` and the filtered catalog. Prints
    /// co-membership pair precision/recall/F1, exact set matches and the reference
    /// pairs the candidate stage never proposed. Writes nothing unless `--out`.
    Compare(CompareArgs),
}

#[derive(Debug, Subcommand)]
pub enum LogsCommand {
    /// Read the `[logs]` sources (FinMCP JSON, OpenAI chat JSONL, event JSONL) and the
    /// tool catalog into one normalised, anonymised session per line.
    ///
    /// Reads the files of `[[logs.sources]]` and `[logs.catalog]` (or lists the tools of
    /// its MCP server), streaming them record by record. Writes `artifacts/logs-import/`:
    /// `sessions.jsonl`, `catalog.json`, `malformed.jsonl` (`file:line` + reason of every
    /// record kept out) and `report.json` (counts, flags, anonymisation per detector).
    /// Needs the secret in the environment variable `[logs.anonymise] secret_env`.
    /// Skipped when up to date.
    Import(ForceArgs),
    /// Keep sessions that reflect a genuine need, were resolved through tool calls and
    /// got a satisfactory answer (LLM judge with `[logs.curate]`; each decision in the
    /// ledger, see `benchgen explain log:<id>`).
    ///
    /// Reads `logs-import/sessions.jsonl`. Writes `artifacts/logs-curate/`:
    /// `curated.jsonl` (kept sessions), `decisions.jsonl` (one decision per session),
    /// `report.json`, `failed.json` (judgements that failed, with their reasons). Resumable
    /// per session; a session whose answers stay invalid
    /// fails the stage after the others are done (a rerun asks only for it).
    Curate(ForceArgs),
    /// Single-tool sessions → benchmark and seed pools (seeded, stratified by tool and
    /// sub-scenario); multi-tool sessions → the graph source set. Reports coverage.
    ///
    /// Reads `logs-curate/curated.jsonl` and `logs-import/catalog.json`. Writes
    /// `artifacts/logs-split/`: `benchmark.jsonl`, `seed.jsonl`, `graph_source.jsonl`
    /// and `split.json` (ids per pool, coverage).
    Split(ForceArgs),
}

#[derive(Debug, Subcommand)]
pub enum SynthCommand {
    /// Sample tool chains from the dependency graph and have the LLM write one query each.
    ///
    /// Reads `graph-build/graph.json` (or the reviewed `graph-review-import/graph.json`),
    /// `logs-split/graph_source.jsonl` (co-occurring pairs per sub-scenario),
    /// `logs-split/seed.jsonl` (examples) and `logs-import/catalog.json`. Writes
    /// `artifacts/synth-chains/`: `queries.jsonl` (for `execute`), `chains.jsonl`,
    /// `sampling.json`, `report.md` and `failed.json` when queries failed. Resumable per chain.
    Chains(ForceArgs),
    /// Simulate multi-turn dialogues: persona + goal, a user simulator and an assistant with tools.
    ///
    /// Reads the persona pool (`synth.roleplay.personas`), `logs-split/graph_source.jsonl`
    /// and `logs-split/benchmark.jsonl` (sub-scenarios and their tools),
    /// `logs-import/catalog.json` and `logs-import/sessions.jsonl` (the default sandbox).
    /// Writes `artifacts/synth-roleplay/`: `dialogues.jsonl`, `report.md` and `failed.json`
    /// when dialogues failed. Resumable per dialogue.
    Roleplay(ForceArgs),
}

#[derive(Debug, Subcommand)]
pub enum GraphCommand {
    /// Candidate edges from adjacent groups of multi-tool sessions, validated by the
    /// LLM (`[graph]`). Resumable per candidate.
    ///
    /// Reads `logs-split/graph_source.jsonl` and `logs-import/catalog.json`. Writes
    /// `artifacts/graph-build/`: `candidates.json`, `graph.json`, `graph.dot`,
    /// `graph.svg`, `report.md` and `failed.json` (candidates whose judgement failed).
    Build(ForceArgs),
    /// Human review of the graph's edges.
    #[command(subcommand)]
    Review(GraphReviewCommand),
}

#[derive(Debug, Subcommand)]
pub enum LevelsCommand {
    /// Per server its platform; per tool final-goal/middleware, user/system-facing and
    /// coupling (`[levels]`, judge role). Resumable per item.
    ///
    /// Reads `filter/catalog.json`. Writes `artifacts/levels-profiles/profiles.json`
    /// (with every L1/L2 exclusion and its reason) and `report.md`; `failed.json` lists items
    /// left out when `[levels] max_failed_share` lets some fail (as for every level stage).
    Profiles(ForceArgs),
    /// An output JSON Schema per tool: the catalog's, inferred by the writer, or from
    /// the review sheet `[levels.schemas] review`.
    ///
    /// Reads `filter/catalog.json`. Writes `artifacts/levels-schemas/schemas.json` and the
    /// review sheet `schemas.csv` (and `failed.json`).
    Schemas(ForceArgs),
    /// L1: explicit single-tool queries naming the platform, verified, one per tool.
    ///
    /// Reads `filter/catalog.json` and `levels-profiles/profiles.json`. Writes
    /// `artifacts/levels-l1/queries.json` (and `failed.json`).
    L1(ForceArgs),
    /// L2: implicit queries; EFS members share one query whose ground truth is the set.
    ///
    /// Reads `filter/catalog.json`, `levels-profiles/profiles.json` and (optional)
    /// `efs-finalize/final.json`. Writes `artifacts/levels-l2/queries.json` (and `failed.json`).
    L2(ForceArgs),
    /// L3: single-server chains from data-flow graphs, verified, with backward dependencies.
    ///
    /// Reads `filter/catalog.json` and `levels-schemas/schemas.json`. Writes
    /// `artifacts/levels-l3/queries.json`, `chains.json` (and `failed.json`).
    L3(ForceArgs),
    /// L4: cross-server scenarios with quality control, validation and EFS alternatives.
    ///
    /// Reads `filter/catalog.json` and (optional) `efs-finalize/final.json`. Writes
    /// `artifacts/levels-l4/queries.json`, `attempts.json` (and `failed.json`).
    L4(ForceArgs),
    /// L5: out-of-scope requests from the capability map's gaps, each with its gap label.
    ///
    /// Reads `filter/catalog.json` and `embed/` (`index.json`, `vectors.f32`). Writes
    /// `artifacts/levels-l5/queries.json`, `capability_map.json`, `gaps.json` (and
    /// `failed.json`).
    L5(ForceArgs),
    /// Write `level_1.json` … `level_5.json` (ETOM's shapes), the unified samples and the
    /// statistics.
    ///
    /// Reads `levels-l1` … `levels-l5` `queries.json` and `filter/catalog.json`. Writes
    /// `artifacts/levels-export/`: `level_1.json`, `level_2.json`, `level_3.json`,
    /// `level_4.json`, `level_5.json`, `samples.jsonl`, `stats.json`,
    /// `queries.svg`, `steps.svg`, `rejections.csv` and `report.md`.
    Export(ForceArgs),
}

#[derive(Debug, Subcommand)]
pub enum GraphReviewCommand {
    /// Write `reviews/graph/graph_review.csv` (one row per candidate edge of
    /// `graph-build/candidates.json`). Refuses to overwrite a sheet holding decisions
    /// unless `--force`.
    Export(ForceArgs),
    /// Apply the `add`/`remove` decisions of every `reviews/graph/*.csv`.
    ///
    /// Reads `graph-build/graph.json`, `graph-build/candidates.json` and the sheets.
    /// Writes `artifacts/graph-review-import/`: the reviewed `graph.json`, `graph.dot`,
    /// `graph.svg`, `report.md`, and `decisions.json`. Any malformed row rejects the
    /// whole import with `file:line` messages.
    Import(ForceArgs),
}

#[derive(Debug, Subcommand)]
pub enum ReviewCommand {
    /// Two distinct reviewers per sample from the roster (`reviews/reviewers.toml`).
    ///
    /// Reads the sample pool (`validate/samples.jsonl`, `levels-export/samples.jsonl`, and
    /// `[review] extra_samples`) and the roster. Seeded, balanced draw respecting expertise
    /// tags and capacity; never a sample's author. Earlier assignments are kept: a rerun
    /// assigns only new samples. Writes `artifacts/review-assign/`: `assignments.json`,
    /// `samples.jsonl`, `report.md`; then each reviewer's personal link to
    /// `reviews/links/<id>.txt` when the review secret (`[review] token_secret_env`) is set.
    Assign(ForceArgs),
    /// One sheet per reviewer: `artifacts/review-export/sheets/<id>.csv` and `.xlsx`.
    ///
    /// Reads `review-assign/assignments.json` and `samples.jsonl`. Each row shows the query,
    /// every turn with its tool-call groups (arguments, shortened results) and the answer,
    /// with empty score columns (XLSX: drop-downs) and a note. Writes `report.md` too.
    Export(ForceArgs),
    /// Validate and apply filled sheets (`reviews/returned/*.csv`, `*.xlsx`) and web submissions.
    ///
    /// Reads `review-assign/assignments.json`, the sheets and `reviews/web/scores.jsonl`
    /// (rewritten from the web app's database first). Every bad row (score off the scale,
    /// reviewer not assigned, stale content hash, duplicate) is reported with `file:line`
    /// and nothing is applied. Writes `artifacts/review-import/scores.jsonl` and `report.json`.
    Import(ForceArgs),
    /// LLM pre-review: `[review.prereview] roles` score every sample with the rubric.
    ///
    /// Reads `review-assign/assignments.json` and `samples.jsonl` and the prompt
    /// `pipeline/prompts/review_score.md`. Writes `artifacts/review-prereview/scores.jsonl`
    /// (marked as LLM scores) and `report.md`. Resumable per sample and role.
    Prereview(ForceArgs),
    /// Decide every sample, queue disagreements for adjudication, measure agreement.
    ///
    /// Reads `review-assign/assignments.json` and `samples.jsonl`, `review-import/scores.jsonl`
    /// and `review-prereview/scores.jsonl` when present, `reviews/adjudications.csv` and
    /// `reviews/web/adjudications.jsonl` (rewritten from the web app's database first).
    /// Writes `artifacts/review-merge/`: `decisions.jsonl`, `agreement.json`, `report.md`,
    /// `heatmap.svg` and `queue.csv` (the adjudication queue).
    Merge(ForceArgs),
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
    /// Check and record the decisions in every `reviews/efs/*.csv`.
    ///
    /// Reads the sheets, `artifacts/filter/catalog.json` and `artifacts/efs-build/sets.json`
    /// (decisions must name existing sets and tools). Part of `benchgen run` once a sheet
    /// is in `reviews/efs/`. Writes `artifacts/efs-review-import/decisions.json` and one `review` ledger event
    /// per decision. Any malformed row rejects the whole import with `file:line`
    /// messages; the sheets are never modified. Skipped when up to date. An empty (or
    /// BOM-only) sheet is refused unless `--allow-empty`: it would wipe earlier decisions.
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
    /// Import a registry snapshot file into `artifacts/registry-import/`.
    ///
    /// Reads FILE (default: `registry.source` from the config). Writes
    /// `artifacts/registry-import/catalog.json` (servers and tools sorted by name, tool ids
    /// `server::tool` with names trimmed) and `import_report.json` (every note and
    /// every record left out). Invalid records (duplicates, tools without names,
    /// schemas that are not JSON-Schema objects, wrong types) stop the import with
    /// their locations, unless `--lenient`. Skipped when up to date.
    ///
    /// With `--format glama|official|smithery` FILE is a scraped snapshot folder; without
    /// FILE, `registry.snapshots` are merged in order. Those imports also write `merge.md`,
    /// `merge_summary.json`, `conflicts.csv`, `review.csv` and `categories.csv` (see
    /// docs/registry.md).
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
