//! `benchgen registry …`: get a catalog of MCP servers and tools into
//! `artifacts/registry-import/`.
//!
//! `registry import` reads a snapshot file (ETOM's `mcp_registry.json` format) or one or
//! more scraped snapshot folders (merged); `registry scrape` fetches those folders from
//! the Glama, official and Smithery APIs; `registry tools` lists tools live over MCP.
//! See `docs/registry.md`.

pub mod categories;
pub mod commands;
pub mod etom;
pub mod import;
pub mod merge;
pub mod pages;
pub mod schema;
pub mod scrape;
pub mod tools;

use std::path::PathBuf;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::config_doc::Key;
use crate::error::{InputError, Problem};
use crate::ledger::{NewEvent, Parent, kind};
use crate::model::{Catalog, Server};
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

/// A remark about the input that did not stop the import (a trimmed name, an
/// ignored field, a header count that disagrees with the file).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Note {
    pub location: String,
    pub kind: &'static str,
    pub message: String,
}

/// A record left out in lenient mode, with its reason.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Rejected {
    pub location: String,
    pub id: String,
    pub reason: String,
}

/// Where each imported record came from (for the ledger).
#[derive(Debug, Clone)]
pub struct Origin {
    pub id: String,
    pub is_server: bool,
    pub location: String,
    pub original_name: Option<String>,
}

/// The result of parsing a snapshot.
#[derive(Debug, Default)]
pub struct Imported {
    pub catalog: Catalog,
    pub notes: Vec<Note>,
    pub problems: Vec<Problem>,
    pub rejected: Vec<Rejected>,
    pub origins: Vec<Origin>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RegistryFormat {
    /// ETOM's `mcp_registry.json` (`{total_servers, total_tools, servers: [...]}`).
    #[default]
    Etom,
    /// A scraped Glama snapshot folder (`raw/registry/<source>/<snapshot>/`).
    Glama,
    /// A scraped official MCP Registry snapshot folder.
    Official,
    /// A scraped Smithery snapshot folder.
    Smithery,
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RegistrySettings {
    /// Snapshot file that `registry import` and `run` read (relative to the root).
    pub source: Option<PathBuf>,
    #[serde(default)]
    pub format: RegistryFormat,
    /// Drop invalid records (each recorded with its reason) instead of failing.
    #[serde(default)]
    pub lenient: bool,
    /// Import a seeded random subset of this many servers, each with all its tools (a first
    /// look at a large registry); `None`: every server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<usize>,
    /// Scraped snapshot folders that `registry import` merges into one catalog (in priority
    /// order) instead of reading `source` (see `docs/registry.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<PathBuf>,
    /// Registry APIs that `registry scrape --source NAME` pages through.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sources: std::collections::BTreeMap<String, crate::registry::scrape::SourceSettings>,
    /// Mapping of source categories onto one taxonomy.
    #[serde(default)]
    pub categories: crate::registry::categories::CategorySettings,
    /// Live tool listing (`registry tools`).
    #[serde(default)]
    pub tools: crate::registry::tools::ToolsSettings,
}

/// `[registry]`; absent: its defaults.
impl crate::settings::Section for RegistrySettings {
    const NAME: &'static str = "registry";
    type Value = crate::settings::Always<Self>;
    const KEYS: &'static [Key] = &[
        Key::unset(
            "source",
            "path",
            "The snapshot file `benchgen registry import` and `run` read (relative to the root).",
        ),
        Key::new(
            "format",
            r#""etom" | "glama" | "official" | "smithery""#,
            r#""etom""#,
            "ETOM's `mcp_registry.json`, or a scraped snapshot folder of that registry.",
        ),
        Key::new(
            "lenient",
            "bool",
            "false",
            "Leave invalid records out (each listed with its reason) instead of failing.",
        ),
        Key::unset(
            "sample",
            "integer",
            "Import a seeded random subset of this many servers, each with all its tools (a first look); unset: every server.",
        ),
        Key::new(
            "snapshots",
            "list of paths",
            "[]",
            "Scraped snapshot folders merged into one catalog (in priority order) instead of reading `source`.",
        ),
        Key::table("sources.<name>", "A registry API that `benchgen registry scrape --source NAME` pages through."),
        Key::required("sources.<name>.kind", r#""glama" | "official" | "smithery""#, "Which registry API it is."),
        Key::required("sources.<name>.base_url", "string", "Its base URL, e.g. `https://glama.ai`."),
        Key::unset(
            "sources.<name>.api_key_env",
            "string",
            "Name of the environment variable holding the Bearer key (never the key itself).",
        ),
        Key::new("sources.<name>.page_size", "integer", "100", "Items per list page (at most 100 except `official`)."),
        Key::new("sources.<name>.rate_per_s", "number", "2.0", "Requests per second, retries included."),
        Key::new(
            "sources.<name>.burst",
            "integer",
            "1",
            "Requests that may go out back to back before the rate applies.",
        ),
        Key::new(
            "sources.<name>.max_pages",
            "integer",
            "10000",
            "More list pages than this stop the scrape with an error.",
        ),
        Key::new("sources.<name>.timeout_secs", "number", "30.0", "Whole-request timeout in seconds."),
        Key::new("sources.<name>.connect_timeout_secs", "number", "10.0", "Connection timeout in seconds."),
        Key::new("sources.<name>.max_response_bytes", "integer", "16777216", "A larger response stops the scrape."),
        Key::new("sources.<name>.max_attempts", "integer", "6", "Attempts per request, the first included."),
        Key::new(
            "sources.<name>.backoff_ms",
            "integer",
            "500",
            "Base of the exponential back-off when the server sends no `Retry-After`.",
        ),
        Key::new(
            "sources.<name>.max_retry_after_secs",
            "number",
            "120.0",
            "A longer `Retry-After` stops the scrape instead of sleeping.",
        ),
        Key::new("sources.<name>.query", "string", r#""""#, "Search text passed to the API; empty: everything."),
        Key::new(
            "sources.<name>.details",
            "bool",
            "true",
            "Smithery: fetch each server's detail document (its tools); ignored elsewhere.",
        ),
        Key::new(
            "sources.<name>.folder",
            "path",
            r#""raw/registry""#,
            "Folder of its snapshots, relative to the root.",
        ),
        Key::table("categories", "The mapping of source categories onto one taxonomy."),
        Key::unset("categories.taxonomy", "list of strings", "The target taxonomy; unset: ETOM's 30 categories."),
        Key::new(
            "categories.builtin_rules",
            "bool",
            "true",
            "Append the built-in table (Glama attributes and keywords to ETOM categories).",
        ),
        Key::new(
            "categories.max_categories",
            "integer",
            "3",
            "At most this many categories per server (the first is the main one).",
        ),
        Key::unset(
            "categories.classifier_role",
            "string",
            "An `[llm.roles]` role that classifies servers no rule placed.",
        ),
        Key::tables("categories.rules", "A rule tried before the built-in table."),
        Key::unset("categories.rules.source", "string", "Only for servers from this source; unset: any."),
        Key::unset("categories.rules.source_category", "string", "Regex over a source category (case-insensitive)."),
        Key::unset("categories.rules.text", "string", "Regex over the name and description (case-insensitive)."),
        Key::required("categories.rules.category", "string", "The category it assigns."),
        Key::table("tools", "Live tool listing (`benchgen registry tools`)."),
        Key::new(
            "tools.allow",
            "list of strings",
            "[]",
            "Only matches are run or contacted: patterns (`*` wildcard) of `npm:<pkg>`, `pypi:<pkg>`, `remote:<url>`.",
        ),
        Key::new(
            "tools.npm",
            "list of strings",
            r#"["npx", "-y", "{package}@{version}"]"#,
            "Command line for an npm package; `{package}` and `{version}` are replaced.",
        ),
        Key::new(
            "tools.pypi",
            "list of strings",
            r#"["uvx", "{package}=={version}"]"#,
            "Command line for a PyPI package.",
        ),
        Key::new(
            "tools.time_limit_secs",
            "number",
            "60.0",
            "Wall-clock limit per server: start, handshake and every tool page.",
        ),
        Key::new(
            "tools.memory_limit_mb",
            "integer",
            "4096",
            "Address-space limit of a spawned server in MiB (`prlimit --as`); 0: none.",
        ),
        Key::new("tools.max_tools", "integer", "1000", "Keep at most this many tools per server."),
    ];
    const EXAMPLE: &'static str = r#"
[registry.sources.glama]
kind = "glama"
base_url = "https://glama.ai"

[[registry.categories.rules]]
category = "search"
"#;
}

/// The imported catalog (`registry import`), read by `filter` and `stats`.
pub const CATALOG: Artifact<Catalog> = Artifact::new("registry-import", "catalog.json");

pub static SPEC: StageSpec = StageSpec {
    name: "registry-import",
    command: "registry import",
    // 2: the answer's schema says what is asked, not "the X's typed answer" (developer
    //     wording the model read).
    version: 2,
    about: "import a registry snapshot into a normalised catalog",
    reads: &[],
    // The last five only from scraped snapshots (see `docs/registry.md`).
    writes: &[
        "catalog.json",
        "import_report.json",
        "merge.md",
        "merge_summary.json",
        "conflicts.csv",
        "review.csv",
        "categories.csv",
    ],
    section: Some("registry"),
};

/// The `registry-import` stage, with optional command-line overrides of `[registry]`.
#[derive(Debug, Clone, Default)]
pub struct ImportStage {
    pub file: Option<PathBuf>,
    pub format: Option<RegistryFormat>,
    pub lenient: bool,
}

impl ImportStage {
    fn source(&self, settings: &Settings) -> Result<PathBuf> {
        match (&self.file, &settings.section::<RegistrySettings>().source) {
            (Some(f), _) => Ok(crate::settings::normalize(f)),
            (None, Some(s)) => Ok(settings.resolve(s)),
            (None, None) => Err(crate::error::hinted(
                format!(
                    "no registry snapshot to import: `{}` has no `registry.source`",
                    settings.config_path.display()
                ),
                "pass a file (`benchgen registry import FILE`) or set `[registry] source = \"raw/…\"`",
            )),
        }
    }

    /// Scraped snapshot folders to import and merge (priority order); empty for ETOM's file.
    fn snapshots(&self, settings: &Settings) -> Vec<PathBuf> {
        let reg = &settings.section::<RegistrySettings>();
        let format = self.format.unwrap_or(reg.format);
        match &self.file {
            Some(f) if format != RegistryFormat::Etom => vec![crate::settings::normalize(f)],
            Some(_) => vec![],
            None if format != RegistryFormat::Etom || !reg.snapshots.is_empty() => {
                reg.snapshots.iter().map(|p| settings.resolve(p)).collect()
            }
            None => vec![],
        }
    }

    fn settings(&self, settings: &Settings) -> ImportSettings {
        let reg = &settings.section::<RegistrySettings>();
        let sample = reg.sample.map(|n| (n, settings.project.seed));
        ImportSettings { format: self.format.unwrap_or(reg.format), lenient: self.lenient || reg.lenient, sample }
    }
}

#[derive(Serialize)]
struct ImportSettings {
    format: RegistryFormat,
    lenient: bool,
    /// `[registry] sample` with the project seed that draws it. Left out of the hash when
    /// unset, so a project without it keeps its import.
    #[serde(skip_serializing_if = "Option::is_none")]
    sample: Option<(usize, u64)>,
}

/// `import_report.json` → `sample`: what `[registry] sample = N` left out of the catalog.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SampleReport {
    /// The configured `[registry] sample`.
    pub sample: usize,
    /// Servers the source holds: those kept and those left out.
    pub read: usize,
    /// Servers left out (with all their tools), sorted.
    pub not_sampled: Vec<String>,
    /// Why, in words.
    pub reason: String,
}

/// `[registry] sample = n`: keep a seeded random `n` of `catalog`'s servers with tools (all
/// when it holds no more) with all their tools, and `origins` of the kept ones only. The
/// draw depends on the seed and the set of server names, not their order in the file. A
/// server without tools is not drawn and stays, for `filter` to decide on as without a
/// sample: drawn, it would take the place of one that has tools.
pub fn sample_servers(catalog: &mut Catalog, origins: &mut Vec<Origin>, n: usize, seed: u64) -> SampleReport {
    let read = catalog.servers.len();
    let with_tools = |s: &&Server| !s.tools.is_empty();
    let names: Vec<String> = catalog.servers.iter().filter(with_tools).map(|s| s.name.clone()).collect();
    let drawn = names.len();
    let mut keep = crate::stage::seeded_sample(names, n, seed);
    let toolless: Vec<String> = catalog.servers.iter().filter(|s| s.tools.is_empty()).map(|s| s.name.clone()).collect();
    let without = toolless.len();
    keep.extend(toolless);
    let mut not_sampled: Vec<String> =
        catalog.servers.iter().filter(|s| !keep.contains(&s.name)).map(|s| s.name.clone()).collect();
    not_sampled.sort();
    catalog.servers.retain(|s| keep.contains(&s.name));
    // By id, not by splitting it: a server's name may hold the separator itself.
    let tools: std::collections::HashSet<&str> =
        catalog.servers.iter().flat_map(|s| s.tools.iter().map(|t| t.id.as_str())).collect();
    origins.retain(|o| if o.is_server { keep.contains(&o.id) } else { tools.contains(o.id.as_str()) });
    let kept = catalog.servers.len() - without;
    let mut reason =
        format!("left out by `[registry] sample = {n}`: a seeded subset of {kept} of {drawn} servers with tools");
    if without > 0 {
        reason.push_str(&format!(" ({without} without tools kept for `filter`)"));
    }
    reason.push_str(&format!(" (project seed {seed})"));
    SampleReport { sample: n, read, not_sampled, reason }
}

#[derive(Serialize)]
struct ImportReport<'a> {
    source: String,
    format: RegistryFormat,
    servers: usize,
    tools: usize,
    categories: usize,
    /// Tools whose input schema is not valid JSON Schema (listed in `notes`).
    invalid_input_schemas: usize,
    notes: &'a [Note],
    rejected: &'a [Rejected],
    /// Absent without `[registry] sample`.
    #[serde(skip_serializing_if = "Option::is_none")]
    sample: Option<SampleReport>,
}

/// Notes and outputs for the tools whose input schema does not compile (see [`schema`]).
fn report_invalid_schemas(catalog: &Catalog, notes: &mut Vec<Note>, out: &mut Output) -> usize {
    let invalid = schema::invalid_schema_notes(catalog);
    let n = invalid.len();
    out.count("invalid_input_schemas", n);
    if n > 0 {
        out.notes.push(format!(
            "{n} tools have an input schema that is not valid JSON Schema (listed in import_report.json; \
             a filter rule with `invalid_input_schema = true` drops them)"
        ));
    }
    notes.extend(invalid);
    n
}

/// Servers and tools of the registry catalog a stage will read, before it runs: the first
/// of `made` (catalogs of upstream stages, e.g. `filter`'s) that exists, else this stage's
/// own, else the snapshot file `registry.source` names. `None` when none can be read
/// (scraped snapshot folders are read by `registry import` only). For estimates.
pub fn catalog_size(settings: &Settings, made: &[Artifact<Catalog>]) -> Option<CatalogSize> {
    let r = settings.section::<RegistrySettings>();
    for a in made.iter().chain([&CATALOG]) {
        if let Some(c) = a.on_disk(settings) {
            // A catalog made before `sample` was set still holds every server: the sample
            // bounds what the next run reads.
            return Some(CatalogSize::of(&c, a.stage).at_most(r.sample));
        }
    }
    let bytes = std::fs::read(settings.resolve(r.source.as_ref()?)).ok()?;
    // Lenient: records an import would reject still bound what it keeps.
    let mut imported = etom::parse(&bytes, true).ok()?;
    if let Some(n) = r.sample {
        sample_servers(&mut imported.catalog, &mut imported.origins, n, settings.project.seed);
    }
    Some(CatalogSize::of(&imported.catalog, "registry.source"))
}

/// See [`catalog_size`].
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogSize {
    pub servers: u64,
    pub tools: u64,
    /// Tools of each server, most first.
    pub per_server: Vec<u64>,
    /// Where the counts come from (an upstream stage's name or the config key).
    pub from: &'static str,
}

impl CatalogSize {
    fn of(c: &Catalog, from: &'static str) -> Self {
        let mut per_server: Vec<u64> = c.servers.iter().map(|s| s.tools.len() as u64).collect();
        per_server.sort_unstable_by_key(|&n| std::cmp::Reverse(n));
        Self { servers: c.servers.len() as u64, tools: c.tool_count() as u64, per_server, from }
    }

    /// At most the `sample` servers with the most tools (a bound on any seeded sample).
    fn at_most(mut self, sample: Option<usize>) -> Self {
        if let Some(n) = sample.filter(|&n| n < self.per_server.len()) {
            self.per_server.truncate(n);
            self.servers = n as u64;
            self.tools = self.per_server.iter().sum();
        }
        self
    }

    /// Tools of the `n` servers with the most (all servers when `n` is 0): what any
    /// sample of `n` servers holds at most.
    pub fn tools_of_largest(&self, n: usize) -> u64 {
        let n = if n == 0 { self.per_server.len() } else { n };
        self.per_server.iter().take(n).sum()
    }
}

/// Whether the registry track (import, filter, stats) is part of `run`: always,
/// unless the config is a log-track project that names no registry snapshot.
pub fn in_pipeline(settings: &Settings) -> bool {
    let r = &settings.section::<RegistrySettings>();
    // `[logs]` by name: the registry does not import the log family (no import loop).
    !settings.section_on("logs") || r.source.is_some() || !r.snapshots.is_empty()
}

impl Stage for ImportStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Import a registry snapshot file into `artifacts/registry-import/`.

         Reads FILE (default: `registry.source` from the config). Writes
         `artifacts/registry-import/catalog.json` (servers and tools sorted by name, tool ids
         `server::tool` with names trimmed) and `import_report.json` (every note and
         every record left out). Invalid records (duplicates, tools without names,
         schemas that are not JSON-Schema objects, wrong types) stop the import with
         their locations, unless `--lenient`. Skipped when up to date.

         With `--format glama|official|smithery` FILE is a scraped snapshot folder; without
         FILE, `registry.snapshots` are merged in order. Those imports also write `merge.md`,
         `merge_summary.json`, `conflicts.csv`, `review.csv` and `categories.csv` (see
         docs/registry.md)."
    }

    fn enabled(&self, settings: &Settings) -> bool {
        in_pipeline(settings)
    }

    fn roles(&self, settings: &Settings) -> Vec<ConfigRef> {
        let role = settings.section::<RegistrySettings>().categories.classifier_role.as_ref();
        role.map(|r| ConfigRef::new("registry.categories.classifier_role", r)).into_iter().collect()
    }

    fn estimate(&self, settings: &Settings) -> Vec<crate::stage::Estimate> {
        let r = settings.section::<RegistrySettings>();
        let Some(role) = r.categories.classifier_role.as_ref() else { return Vec::new() };
        // Categories are mapped when snapshot folders are merged, not for a `source` file.
        if self.snapshots(settings).is_empty() {
            return Vec::new();
        }
        // Only servers the category rules leave unassigned are asked about (the sample
        // bounds the size already).
        let e = match crate::registry::catalog_size(settings, &[]) {
            Some(c) => crate::stage::Estimate::typed(role, c.servers, format!("≤ {} servers in {}", c.servers, c.from)),
            None => crate::stage::Estimate::unknown(role, "`registry import` has merged the snapshots"),
        };
        vec![e.in_flight(0)]
    }

    fn prompts(&self, settings: &Settings) -> Vec<PromptRef> {
        if settings.section::<RegistrySettings>().categories.classifier_role.is_none() {
            return Vec::new();
        }
        let vars = serde_json::json!({
            "name": "s", "description": "d", "tools": ["t"], "source_categories": ["c"], "taxonomy": ["x"],
        });
        vec![PromptRef::new("registry.categories.classifier_role", categories::CLASSIFY_PROMPT, vars)]
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        let snapshots = self.snapshots(settings);
        if !snapshots.is_empty() {
            return Ok(Plan {
                inputs: snapshots.iter().map(|d| snapshot_files(d)).collect::<Result<Vec<_>>>()?.concat(),
                config_hash: section_hash(&(
                    self.settings(settings),
                    &settings.section::<RegistrySettings>().categories,
                ))?,
            });
        }
        Ok(Plan { inputs: vec![self.source(settings)?], config_hash: section_hash(&self.settings(settings))? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let snapshots = self.snapshots(ctx.settings);
        if !snapshots.is_empty() {
            return self.run_snapshots(ctx, inputs, out, &snapshots);
        }
        let source = self.source(ctx.settings)?;
        let ImportSettings { format, lenient, sample: drawn } = self.settings(ctx.settings);
        let bytes = inputs.bytes(&source)?;
        let shown = ctx.settings.display_path(&source);
        let mut imported = match format {
            RegistryFormat::Etom => etom::parse(bytes, lenient),
            _ => unreachable!("scraped formats are imported as snapshot folders"),
        }
        .map_err(|problems| InputError { file: shown.clone(), problems })?;
        if !imported.problems.is_empty() {
            return Err(InputError { file: shown, problems: imported.problems }.into());
        }
        refuse_empty_sample(drawn)?;
        let sample = drawn.map(|(n, seed)| sample_servers(&mut imported.catalog, &mut imported.origins, n, seed));
        for n in &imported.notes {
            if ctx.printer.verbose > 0 {
                ctx.printer.warn(&format!("{shown}: {}: {}", n.location, n.message));
            }
        }
        for r in &imported.rejected {
            ctx.printer.warn(&format!("{shown}: {}: left out `{}`: {}", r.location, r.id, r.reason));
        }

        let catalog = &imported.catalog;
        let mut notes = imported.notes.clone();
        let invalid_input_schemas = report_invalid_schemas(catalog, &mut notes, out);
        let categories: std::collections::BTreeSet<&str> =
            catalog.servers.iter().flat_map(|s| s.categories.iter().map(String::as_str)).collect();

        record_import_events(out, &shown, bytes, format, &imported);

        out.json("catalog.json", catalog)?;
        out.json(
            "import_report.json",
            &ImportReport {
                source: shown.clone(),
                format,
                servers: catalog.servers.len(),
                tools: catalog.tool_count(),
                categories: categories.len(),
                invalid_input_schemas,
                notes: &notes,
                rejected: &imported.rejected,
                sample: sample.clone(),
            },
        )?;
        out.count("servers", catalog.servers.len());
        out.count("tools", catalog.tool_count());
        out.count("categories", categories.len());
        out.count("notes", notes.len());
        out.count("rejected", imported.rejected.len());
        out.notes.push(format!(
            "imported {} servers and {} tools in {} categories from `{shown}`",
            catalog.servers.len(),
            catalog.tool_count(),
            categories.len()
        ));
        if !imported.rejected.is_empty() {
            out.notes.push(format!("{} records left out (see import_report.json)", imported.rejected.len()));
        }
        sample_note(sample.as_ref(), out);
        Ok(())
    }

    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        if s.section::<RegistrySettings>().sample == Some(0) {
            problems.push(crate::error::Problem::new(
                "registry.sample",
                "must be at least 1 (it is the number of servers a first look imports; leave it out for all)",
            ));
        }
    }
}

/// `sample = 0` would import an empty catalog. `check` refuses it before a run; this covers
/// `registry import FILE` in a project whose registry track is off (`check` skips it).
fn refuse_empty_sample(sample: Option<(usize, u64)>) -> Result<()> {
    if let Some((0, _)) = sample {
        return Err(crate::error::hinted(
            "`[registry] sample = 0` would import no server",
            "set it to at least 1 (the number of servers a first look imports), or remove it for all",
        ));
    }
    Ok(())
}

/// The category counts of the sampled servers, from their own reasons: `merge.md`'s category
/// line and `categories.csv` describe the catalog written, as its server counts do not.
fn sample_categories(servers: &[Server]) -> categories::CategoryReport {
    let reasons = servers.iter().filter_map(|s| s.registry.as_ref()).flat_map(|r| &r.category_reasons);
    let (mut by_rule, mut by_source) = (0, 0);
    for r in reasons {
        match r.by.as_str() {
            "rule" => by_rule += 1,
            "source" => by_source += 1,
            _ => {}
        }
    }
    categories::CategoryReport {
        assigned: servers.iter().filter(|s| !s.categories.is_empty()).count(),
        by_rule,
        by_source,
        unassigned: servers.iter().filter(|s| s.categories.is_empty()).map(|s| s.name.clone()).collect(),
    }
}

/// The run's line about `[registry] sample`, and its count.
fn sample_note(sample: Option<&SampleReport>, out: &mut Output) {
    let Some(s) = sample else { return };
    out.count("not_sampled", s.not_sampled.len());
    out.notes.push(format!(
        "sample: {} of {} servers kept (`[registry] sample = {}`); the {} left out are listed in import_report.json",
        s.read - s.not_sampled.len(),
        s.read,
        s.sample,
        s.not_sampled.len()
    ));
}

/// The ledger events of one import: the input read, a record per server and tool (a tool's
/// parent is its server's), and a record per left-out entry.
fn record_import_events(out: &mut Output, shown: &str, bytes: &[u8], format: RegistryFormat, imported: &Imported) {
    let input_ev = out.event(NewEvent::new(
        kind::INPUT_READ,
        Some(shown),
        serde_json::json!({
            "path": shown,
            "sha256": crate::store::sha256_hex(bytes),
            "format": format,
            "bytes": bytes.len(),
        }),
    ));
    let mut server_ev = std::collections::HashMap::new();
    for o in &imported.origins {
        let server_name = o.id.split(crate::model::TOOL_ID_SEP).next().unwrap_or(&o.id);
        let mut ev = NewEvent::new(
            if o.is_server { kind::CATALOG_SERVER } else { kind::CATALOG_TOOL },
            Some(&o.id),
            serde_json::json!({
                "source": shown,
                "location": o.location,
                "original_name": o.original_name,
            }),
        )
        .with_parent(Parent::Batch(input_ev));
        if !o.is_server
            && let Some(&p) = server_ev.get(server_name)
        {
            ev = ev.with_parent(Parent::Batch(p));
        }
        let idx = out.event(ev);
        if o.is_server {
            server_ev.insert(server_name.to_string(), idx);
        }
    }
    for r in &imported.rejected {
        out.event(
            NewEvent::new(
                kind::CATALOG_REJECT,
                Some(&r.id),
                serde_json::json!({"source": shown, "location": r.location, "reason": r.reason}),
            )
            .with_parent(Parent::Batch(input_ev)),
        );
    }
}

/// Every file of a snapshot that an import reads: `state.json`, its pages and details.
fn snapshot_files(dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    let st = commands::snapshot_state(dir)?;
    let mut files = vec![dir.join("state.json")];
    files.extend(st.pages.iter().map(|p| dir.join(&p.file)));
    files.extend(st.details.values().map(|d| dir.join(&d.file)));
    Ok(files)
}

impl ImportStage {
    /// Import and merge scraped snapshots (one is a merge of one).
    fn run_snapshots(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output, dirs: &[PathBuf]) -> Result<()> {
        let cats_cfg = &ctx.settings.section::<RegistrySettings>().categories;
        let format = self.settings(ctx.settings).format;
        let mut snaps: Vec<(String, pages::SourceKind, commands::Reader)> = Vec::new();
        for d in dirs {
            let st = commands::snapshot_state(d)?;
            if dirs.len() == 1 && format != RegistryFormat::Etom {
                let want = match format {
                    RegistryFormat::Glama => pages::SourceKind::Glama,
                    RegistryFormat::Official => pages::SourceKind::Official,
                    _ => pages::SourceKind::Smithery,
                };
                if want != st.kind {
                    return Err(crate::error::hinted(
                        format!(
                            "`{}` is a {} snapshot, not {}",
                            ctx.settings.display_path(d),
                            st.kind.as_str(),
                            want.as_str()
                        ),
                        format!("use `--format {}`", st.kind.as_str()),
                    ));
                }
            }
            let dir = d.clone();
            snaps.push((
                ctx.settings.display_path(d),
                st.kind,
                Box::new(move |rel: &str| Ok(inputs.bytes(&dir.join(rel))?.to_vec())),
            ));
        }
        let (mut merged, mut cats, mut notes) = commands::build_catalog(&snaps, cats_cfg)?;
        // Sampled before the LLM classifies any server: a first look asks about its sample only.
        let drawn = self.settings(ctx.settings).sample;
        refuse_empty_sample(drawn)?;
        let sample = drawn.map(|(n, seed)| sample_servers(&mut merged.catalog, &mut Vec::new(), n, seed));
        if sample.is_some() {
            cats = sample_categories(&merged.catalog.servers);
        }
        categories::classify_with_llm(ctx, &mut merged.catalog.servers, cats_cfg, &mut cats, out)?;
        for n in &notes {
            if ctx.printer.verbose > 0 {
                ctx.printer.warn(&format!("{}: {}", n.location, n.message));
            }
        }
        for (name, bytes) in commands::merge_files(&merged, &cats)? {
            out.file(name, bytes);
        }
        let catalog = &merged.catalog;
        let invalid_input_schemas = report_invalid_schemas(catalog, &mut notes, out);
        let categories: std::collections::BTreeSet<&str> =
            catalog.servers.iter().flat_map(|s| s.categories.iter().map(String::as_str)).collect();
        out.json(
            "import_report.json",
            &ImportReport {
                source: snaps.iter().map(|s| s.0.clone()).collect::<Vec<_>>().join(", "),
                format,
                servers: catalog.servers.len(),
                tools: catalog.tool_count(),
                categories: categories.len(),
                invalid_input_schemas,
                notes: &notes,
                rejected: &[],
                sample: sample.clone(),
            },
        )?;
        out.count("servers", catalog.servers.len());
        out.count("tools", catalog.tool_count());
        out.count("categories", categories.len());
        out.count("notes", notes.len());
        out.count("conflicts", merged.conflicts.len());
        out.notes.push(format!(
            "imported {} servers and {} tools in {} categories from {} snapshot(s)",
            catalog.servers.len(),
            catalog.tool_count(),
            categories.len(),
            snaps.len()
        ));
        sample_note(sample.as_ref(), out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample bounds the estimate by the servers with the most tools, however many the
    /// catalog it reads holds; a sample larger than the catalog changes nothing.
    #[test]
    fn a_sample_bounds_the_catalog_size_by_its_largest_servers() {
        let size = CatalogSize { servers: 4, tools: 10, per_server: vec![5, 3, 1, 1], from: "filter" };
        let two = size.clone().at_most(Some(2));
        assert_eq!((two.servers, two.tools, two.per_server.clone()), (2, 8, vec![5, 3]));
        assert_eq!(size.clone().at_most(Some(9)), size);
        assert_eq!(size.clone().at_most(None), size);
    }

    /// Origins are kept by id: a server whose name holds `::` keeps its own, and a tool's
    /// follows the tool, not a server whose name its id begins with.
    #[test]
    fn sampled_origins_follow_their_server_and_tool_ids() {
        let server = |name: &str, tool: &str| -> Server {
            serde_json::from_value(serde_json::json!({"name": name, "description": "d", "summary": "", "url": "",
                "categories": [], "tools": [
                {"id": format!("{name}::{tool}"), "name": tool, "description": "d", "input_schema": {"type": "object"}}
            ]}))
            .unwrap()
        };
        let mut catalog = Catalog { servers: vec![server("a", "x"), server("a::b", "y")] };
        // A server without tools is not drawn: it stays, and the one with tools is sampled.
        let mut bare = Catalog { servers: vec![server("c", "z"), server("d", "w"), server("e", "v")] };
        bare.servers[0].tools.clear();
        let report = sample_servers(&mut bare, &mut Vec::new(), 1, 3);
        assert_eq!(bare.servers.len(), 2, "{:?}", bare.servers);
        assert_eq!(bare.servers[0].name, "c");
        assert_eq!(report.not_sampled.len(), 1);
        assert!(
            report.reason.contains("a seeded subset of 1 of 2 servers with tools (1 without tools kept for `filter`)")
        );
        let origin = |id: &str, is_server: bool| Origin {
            id: id.into(),
            is_server,
            location: String::new(),
            original_name: None,
        };
        let mut origins =
            vec![origin("a", true), origin("a::x", false), origin("a::b", true), origin("a::b::y", false)];
        let report = sample_servers(&mut catalog, &mut origins, 1, 3);
        let kept = catalog.servers[0].name.clone();
        assert_eq!(report.not_sampled.len(), 1);
        let ids: Vec<&str> = origins.iter().map(|o| o.id.as_str()).collect();
        let want: Vec<&str> = if kept == "a" { vec!["a", "a::x"] } else { vec!["a::b", "a::b::y"] };
        assert_eq!(ids, want);
    }
}
