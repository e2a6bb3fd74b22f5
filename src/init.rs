//! `benchgen init`: a new project that passes `benchgen check` as written.
//!
//! The project is a folder with `pipeline/<name>.toml` (paths in it are relative to the
//! folder above `pipeline/`), `raw/` for the user's files, `reviews/reviewers.toml`, a
//! personas file for role-play (log track), `.gitignore` and a README. Prompt templates are
//! built into benchgen, so nothing is copied from benchgen's repository.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::Value;

use crate::logs::LogFormat;

/// What `init` wrote, for the summary.
#[derive(Debug, serde::Serialize)]
pub struct Created {
    pub dir: String,
    pub config: String,
    pub files: Vec<String>,
    pub notes: Vec<String>,
}

/// The LLM endpoint every role of the new config uses.
struct Endpoint {
    lines: String,
}

impl Endpoint {
    fn from_args(a: &InitArgs) -> Result<Self> {
        let known = ["local", "openai", "vllm", "sglang", "ollama", "llamacpp"];
        if !known.contains(&a.provider.as_str()) {
            bail!("`--provider {}` is not one of: {}", a.provider, known.join(", "));
        }
        let mut lines = format!("provider = \"{}\"\n", a.provider);
        if a.provider == "local" {
            if a.base_url.is_some() {
                bail!("`--base-url` is for an OpenAI-compatible server: add `--provider openai` (or vllm, sglang, …)");
            }
            lines.push_str("timeout_s = 600                  # a busy 2-core machine is slow, not broken\n");
        } else {
            if let Some(u) = &a.base_url {
                lines.push_str(&format!("base_url = {}\n", toml_str(u)));
            }
            match &a.model {
                Some(m) => lines.push_str(&format!("model = {}\n", toml_str(m))),
                None => bail!("`--provider {}` needs `--model NAME` (the model name the server expects)", a.provider),
            }
            if let Some(k) = &a.api_key_env {
                lines.push_str(&format!("api_key_env = {}     # the key is read from it, never stored\n", toml_str(k)));
            }
        }
        Ok(Self { lines })
    }

    fn role(&self, name: &str, temperature: f32, max_tokens: u32, seed: u64) -> String {
        format!(
            "[llm.roles.{name}]\n{}temperature = {temperature:.1}\nseed = {seed}\nmax_tokens = {max_tokens}\n",
            self.lines
        )
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A project name usable as a file stem and release name.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.')
}

/// The log format of `path`, as `logs import` would detect it.
fn detect_logs(path: &Path) -> Result<LogFormat> {
    crate::logs::readers::detect(path, &path.display().to_string())
}

/// `mcp` (a `tools/list` result or a list of tools) or `catalog` (benchgen's).
fn detect_catalog(path: &Path) -> Result<&'static str> {
    let v = read_json(path)?;
    match &v {
        Value::Array(_) => Ok("mcp"),
        Value::Object(o) if o.get("tools").is_some_and(Value::is_array) => Ok("mcp"),
        Value::Object(o) if o.get("servers").is_some_and(Value::is_array) => Ok("catalog"),
        _ => bail!(
            "`{}` is not a tool catalog: expected an MCP `tools/list` result (`{{\"tools\": [...]}}` or a list of tools) or a benchgen catalog (`{{\"servers\": [...]}}`)",
            path.display()
        ),
    }
}

/// ETOM's `mcp_registry.json` shape: `{servers: [{server_name, tools, …}]}`.
fn check_registry(path: &Path) -> Result<()> {
    if path.is_dir() {
        bail!(
            "`{}` is a folder: scraped snapshot folders go in `[registry] snapshots` (docs/registry.md); `--registry` takes an ETOM `mcp_registry.json` file",
            path.display()
        );
    }
    let v = read_json(path)?;
    let servers = v.get("servers").and_then(Value::as_array);
    match servers {
        Some(s) if s.first().is_none_or(|x| x.get("server_name").is_some()) => Ok(()),
        _ => bail!(
            "`{}` is not an ETOM registry: expected `{{\"servers\": [{{\"server_name\": …, \"tools\": […]}}]}}`",
            path.display()
        ),
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    crate::json::value_from_str(&text).map_err(|e| anyhow::anyhow!("`{}` is not JSON: {e}", path.display()))
}

/// A file to copy into the project: source, destination relative to the project.
struct Copy {
    from: PathBuf,
    to: String,
}

fn file_name(p: &Path) -> Result<String> {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| anyhow::anyhow!("`{}` names no file", p.display()))
}

/// Which of benchgen's two tracks a new project uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Track {
    /// ETOM-style levels over a registry of MCP servers and tools.
    Registry,
    /// FinMCP-style samples from a domain's real tool-call logs.
    Logs,
    /// Both tracks, meeting in one release.
    Both,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The project folder (created when missing; default: the current folder).
    pub dir: Option<PathBuf>,
    /// Which track the project uses.
    #[arg(long, value_enum, default_value = "logs")]
    pub track: Track,
    /// Project name (default: the folder's name); the config is `pipeline/<name>.toml`.
    #[arg(long)]
    pub name: Option<String>,
    /// Your tool-call logs (JSON Lines or JSON): a file, or a folder whose `.json` and
    /// `.jsonl` files are each a log (a file in no log format, such as a catalog, is
    /// skipped with the reason); repeat for more. Each is copied to `raw/logs/`, its format
    /// detected, and becomes a `[[logs.sources]]` entry.
    #[arg(long)]
    pub logs: Vec<PathBuf>,
    /// The tool catalog your logs call (benchgen catalog, MCP `tools/list` result, or a
    /// list of tools); copied to `raw/`.
    #[arg(long)]
    pub catalog: Option<PathBuf>,
    /// A registry snapshot in ETOM's `mcp_registry.json` format; copied to `raw/`.
    #[arg(long)]
    pub registry: Option<PathBuf>,
    /// LLM provider of every role: `local` (default: benchgen starts llama.cpp's server
    /// with the model `make setup` assembled) or an OpenAI-compatible server (`openai`,
    /// `vllm`, `sglang`, `ollama`, `llamacpp`).
    #[arg(long, default_value = "local")]
    pub provider: String,
    /// Base URL of that server (e.g. `http://127.0.0.1:8000/v1`).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Model name the server expects.
    #[arg(long)]
    pub model: Option<String>,
    /// Environment variable holding the API key (the key itself is never written).
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Once the project is written, time one stage-sized exchange per LLM role (as
    /// `benchgen llm ping --probe`), so that the first run's table says about how long each
    /// stage takes here. On the local model this starts it: about half a minute on 2 cores.
    /// A role that fails is reported and the project stays written (exit 0; with `--json`,
    /// `probe` holds each role's result, `probe_error` why the probe did not run).
    #[arg(long)]
    pub probe: bool,
}

/// Run `benchgen init`.
pub fn init(a: &InitArgs) -> Result<Created> {
    let dir = a.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let abs = if dir.is_absolute() { dir.clone() } else { std::env::current_dir()?.join(&dir) };
    let name = match &a.name {
        Some(n) => n.clone(),
        None => crate::settings::normalize(&abs)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "bench".into()),
    };
    let name = name.to_lowercase().replace(' ', "-");
    if !valid_name(&name) {
        bail!("project name `{name}` must use letters, digits, `-`, `_` and `.` only (pass `--name NAME`)");
    }
    // Refuse to overwrite: any config under pipeline/ or any file init would write.
    let config_rel = format!("pipeline/{name}.toml");
    refuse_existing_project(&dir)?;
    let logs_on = matches!(a.track, Track::Logs | Track::Both);
    let registry_on = matches!(a.track, Track::Registry | Track::Both);
    if !logs_on && (!a.logs.is_empty() || a.catalog.is_some()) {
        bail!("`--logs` and `--catalog` are for the log track: add `--track logs` or `--track both`");
    }
    if !registry_on && a.registry.is_some() {
        bail!("`--registry` is for the registry track: add `--track registry` or `--track both`");
    }
    let endpoint = Endpoint::from_args(a)?;
    let seed = crate::store::sha256_hex(name.as_bytes())
        .trim_start_matches("sha256:")
        .chars()
        .take(6)
        .fold(0u64, |acc, c| acc * 16 + c.to_digit(16).unwrap_or(0) as u64);

    let mut copies = Vec::new();
    let mut notes = Vec::new();
    let logs = log_files(&a.logs, a.catalog.as_deref(), &mut copies, &mut notes)?;
    let (catalog_path, catalog_format) = match &a.catalog {
        Some(p) => {
            let f = detect_catalog(p)?;
            let to = format!("raw/{}", file_name(p)?);
            copies.push(Copy { from: p.clone(), to: to.clone() });
            notes.push(format!("catalog: `{}` → `{to}` (format `{f}`)", p.display()));
            (to, f)
        }
        None => ("raw/catalog.json".to_string(), "mcp"),
    };
    let registry_path = match &a.registry {
        Some(p) => {
            check_registry(p)?;
            let to = format!("raw/{}", file_name(p)?);
            copies.push(Copy { from: p.clone(), to: to.clone() });
            notes.push(format!("registry: `{}` → `{to}` (format `etom`)", p.display()));
            to
        }
        None => "raw/registry.json".to_string(),
    };

    let mut config = header(&name, seed, a.track);
    config.push_str(&roles(&endpoint, seed, logs_on, registry_on));
    if registry_on {
        config.push_str(&registry_sections(&registry_path));
    }
    if logs_on {
        config.push_str(&logs_sections(&logs, &catalog_path, catalog_format, a.provider == "local"));
    }
    config.push_str(&review_and_release(&name));

    let mut files: Vec<(String, String)> = vec![
        (config_rel.clone(), config),
        ("reviews/reviewers.toml".into(), REVIEWERS.into()),
        (".gitignore".into(), GITIGNORE.into()),
        ("README.md".into(), readme(&name, a.track, &logs, &catalog_path, &registry_path, &a.provider)),
    ];
    if logs_on {
        files.push(("raw/personas.toml".into(), PERSONAS.into()));
    }
    refuse_overwrite(&dir, &files, &copies)?;
    let written = write_files(&dir, &files, &copies)?;
    std::fs::create_dir_all(dir.join("artifacts")).with_context(|| format!("cannot create `{}`", dir.display()))?;
    Ok(Created { dir: dir.display().to_string(), config: config_rel, files: written, notes })
}

/// Refuse a folder that already holds a project: any config under `pipeline/`.
fn refuse_existing_project(dir: &Path) -> Result<()> {
    if let Ok(rd) = std::fs::read_dir(dir.join("pipeline")) {
        let mut existing: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".toml"))
            .collect();
        existing.sort();
        if !existing.is_empty() {
            bail!(
                "`{}` already holds a benchgen project (pipeline/{}): `benchgen init` never overwrites one",
                dir.display(),
                existing.join(", pipeline/")
            );
        }
    }
    Ok(())
}

/// Refuse to overwrite any file init would write (`.gitignore` is added to instead).
fn refuse_overwrite(dir: &Path, files: &[(String, String)], copies: &[Copy]) -> Result<()> {
    for (rel, _) in files {
        let p = dir.join(rel);
        if p.exists() && rel != ".gitignore" {
            bail!("`{}` exists: `benchgen init` never overwrites a file", p.display());
        }
    }
    for c in copies {
        if dir.join(&c.to).exists() {
            bail!("`{}` exists: `benchgen init` never overwrites a file", dir.join(&c.to).display());
        }
    }
    Ok(())
}

/// Write the project's files (each atomically; a `.gitignore` that exists gets the lines it
/// misses) and copy the user's files in, once everything is checked: the paths written.
fn write_files(dir: &Path, files: &[(String, String)], copies: &[Copy]) -> Result<Vec<String>> {
    let mut written = Vec::new();
    for (rel, text) in files {
        let p = dir.join(rel);
        if rel == ".gitignore" && p.exists() {
            // Append what is missing rather than replace the user's file.
            let old = std::fs::read_to_string(&p).with_context(|| format!("cannot read `{}`", p.display()))?;
            let missing: String =
                text.lines().filter(|l| !old.lines().any(|o| o == *l)).map(|l| format!("{l}\n")).collect();
            if missing.trim().is_empty() {
                continue;
            }
            let sep = if old.ends_with('\n') || old.is_empty() { "" } else { "\n" };
            write(&p, &format!("{old}{sep}{missing}"))?;
        } else {
            write(&p, text)?;
        }
        written.push(rel.clone());
    }
    for c in copies {
        let bytes = std::fs::read(&c.from).with_context(|| format!("cannot read `{}`", c.from.display()))?;
        let p = dir.join(&c.to);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create `{}`", parent.display()))?;
        }
        crate::store::write_atomic(&p, &bytes)?;
        written.push(c.to.clone());
    }
    Ok(written)
}

fn write(p: &Path, text: &str) -> Result<()> {
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("cannot create `{}`", parent.display()))?;
    }
    crate::store::write_atomic(p, text.as_bytes())
}

fn header(name: &str, seed: u64, track: Track) -> String {
    let track = match track {
        Track::Logs => "the log track (FinMCP's method: your own tool-call logs)",
        Track::Registry => "the registry track (ETOM's five levels over a registry of MCP servers)",
        Track::Both => "both tracks (a registry's ETOM levels and your logs' samples, in one release)",
    };
    format!(
        "# benchgen pipeline `{name}`: {track}.\n\
         # Written by `benchgen init`; edit freely. Paths are relative to the project root (the\n\
         # folder above pipeline/). Every section and key is described in benchgen's docs/config.md;\n\
         # `benchgen check` checks this file (and the prompt templates) before anything runs.\n\
         # Prompts are built into benchgen: `benchgen prompts list`; override one by writing\n\
         # pipeline/prompts/NAME.md (`benchgen prompts export` copies them all to edit).\n\n\
         [project]\nname = \"{name}\"\n# Every random choice (sampling, splits, seeds of LLM calls) derives from it.\nseed = {seed}\n\n"
    )
}

fn roles(e: &Endpoint, seed: u64, logs: bool, registry: bool) -> String {
    let mut s = String::from(
        "# ---- LLM roles (docs/llm.md) -------------------------------------------------------\n\
         # Each job names a role; roles may share one endpoint. `provider = \"local\"` runs the\n\
         # small model `make setup` assembled (fine to try the pipeline, too weak for a real\n\
         # benchmark); for real use point `provider`, `base_url`, `model` (and `api_key_env`) at\n\
         # a strong model behind any OpenAI-compatible server (vLLM, SGLang, OpenAI, …), and\n\
         # add `prices = { prompt = …, completion = … }` (per million tokens) for cost figures.\n\n",
    );
    s.push_str("# Judges: curation, graph edges, validation, pre-review, EFS verdicts.\n");
    s.push_str(&e.role("judge", 0.0, 300, seed));
    s.push_str("\n# Writers: queries, goals, dialogue turns, ETOM level drafts.\n");
    s.push_str(&e.role("writer", 0.7, 400, seed));
    if logs {
        s.push_str("\n# The agent that executes synthesised queries over MCP tools.\n");
        s.push_str(&e.role("agent", 0.0, 400, seed));
    }
    if registry {
        s.push_str("\n# The filter's classifier for rules with `action = \"ask\"`.\n");
        s.push_str(&e.role("classifier", 0.0, 200, seed));
    }
    s.push('\n');
    s
}

fn registry_sections(registry: &str) -> String {
    format!(
        "# ---- Registry track (docs/registry.md, docs/efs.md, docs/levels.md) ---------------\n\
         [registry]\nsource = {}\nformat = \"etom\"\n\
         # sample = 20   # a seeded subset of servers (all their tools) for a first look; remove for all\n\n\
         # Rules that drop what a benchmark must not contain (`[[filter.rules]]`, see\n\
         # docs/registry.md#filter; benchgen's pipeline/demo.toml has a full set to copy).\n\
         [filter]\ndrop_servers_without_tools = true\nclassifier_role = \"classifier\"\n\n\
         [stats]\n\n\
         # Embeddings from `make setup`'s all-MiniLM-L6-v2 (docs/efs.md#embeddings).\n\
         [embed]\nmodel_id = \"all-MiniLM-L6-v2-int8\"\n\n\
         # Equal function sets: candidate pairs, LLM verdicts, a top-down check, review.\n\
         [efs.pairs]\ntop_k = 10\n\n\
         [efs.verify]\nrole = \"judge\"\nmode = \"listwise\"\n\n\
         [efs.topdown]\nwriter_role = \"writer\"\njudge_role = \"judge\"\n\
         # max_sets = 20   # cross-check a seeded sample of the sets for a first look; remove for all\n\n\
         [efs.finalize]\npolicy = \"keep\"\n\n\
         # ETOM's five levels, with ETOM's defaults (docs/levels.md).\n\
         [levels]\nwriter_role = \"writer\"\njudge_role = \"judge\"\n\n",
        toml_str(registry)
    )
}

/// One log of the new project: its `[[logs.sources]]` name, where it is (copied) under the
/// project and its format (`auto`: detected when imported).
struct LogFile {
    name: String,
    path: String,
    format: &'static str,
}

/// The project's logs from `--logs` (files, and the log files of folders), each copied to
/// `raw/logs/` (`copies`) with its detected format; a folder's file in no log format (or the
/// `catalog` file) is skipped, the reason in `notes`. None given: one source at
/// `raw/logs/sessions.jsonl` for the user to fill.
fn log_files(
    given: &[PathBuf],
    catalog: Option<&Path>,
    copies: &mut Vec<Copy>,
    notes: &mut Vec<String>,
) -> Result<Vec<LogFile>> {
    if given.is_empty() {
        return Ok(vec![LogFile { name: "logs".into(), path: "raw/logs/sessions.jsonl".into(), format: "auto" }]);
    }
    let mut out: Vec<LogFile> = Vec::new();
    let mut seen: Vec<(PathBuf, PathBuf)> = Vec::new();
    let catalog = catalog.and_then(|c| c.canonicalize().ok());
    for p in given {
        let files =
            if p.is_dir() { folder_logs(p, catalog.as_deref(), notes)? } else { vec![(p.clone(), detect_logs(p)?)] };
        for (file, format) in files {
            let real = file.canonicalize().unwrap_or_else(|_| file.clone());
            if let Some((first, _)) = seen.iter().find(|(_, r)| *r == real) {
                bail!("`{}` is given twice (also as `{}`): name each log once", file.display(), first.display());
            }
            seen.push((file.clone(), real));
            let to = format!("raw/logs/{}", file_name(&file)?);
            // Case aside: on a case-insensitive file system one copy would overwrite the other.
            if out.iter().any(|l| l.path.eq_ignore_ascii_case(&to)) {
                bail!("two of your logs are named `{}`: rename one (each is copied to `raw/logs/`)", file_name(&file)?);
            }
            notes.push(format!("logs: `{}` → `{to}` (format `{}`)", file.display(), format.as_str()));
            copies.push(Copy { from: file.clone(), to: to.clone() });
            out.push(LogFile { name: source_name(&file, &out), path: to, format: format.as_str() });
        }
    }
    Ok(out)
}

/// The `.json` and `.jsonl` files of `dir` (sorted by name; the extension in any case) in a
/// log format, with it; the others, a list of tools and the `catalog` file are skipped with
/// the reason (in `notes`). A folder with none is an error listing what it holds.
fn folder_logs(dir: &Path, catalog: Option<&Path>, notes: &mut Vec<String>) -> Result<Vec<(PathBuf, LogFormat)>> {
    let rd = std::fs::read_dir(dir).with_context(|| format!("cannot read the folder `{}`", dir.display()))?;
    let mut files = Vec::new();
    for e in rd {
        let p = e.with_context(|| format!("cannot read the folder `{}`", dir.display()))?.path();
        let ext = p.extension().map(|x| x.to_string_lossy().to_lowercase());
        if p.is_file() && matches!(ext.as_deref(), Some("json" | "jsonl")) {
            files.push(p);
        }
    }
    files.sort();
    let (mut logs, mut skipped) = (Vec::new(), Vec::new());
    for f in files {
        if catalog.is_some_and(|c| f.canonicalize().is_ok_and(|r| r == c)) {
            skipped.push(format!("`{}`: the `--catalog` file", f.display()));
            continue;
        }
        match detect_logs(&f) {
            Ok(LogFormat::Finmcp) if tool_list(&f) => {
                skipped.push(format!("`{}`: a list of tools, not a log (a catalog goes in `--catalog`)", f.display()))
            }
            Ok(format) => logs.push((f, format)),
            Err(e) => skipped.push(format!("`{}`: {e:#}", f.display())),
        }
    }
    if logs.is_empty() {
        let held = if skipped.is_empty() { "no `.json` or `.jsonl` file".to_string() } else { skipped.join("; ") };
        bail!("`{}` holds no tool-call log: {held}", dir.display());
    }
    notes.extend(skipped.into_iter().map(|s| format!("logs: skipped {s}")));
    Ok(logs)
}

/// Whether the JSON array at `path` is a list of tools (its first element has a name and an
/// input schema), which `--catalog` takes, rather than FinMCP samples.
fn tool_list(path: &Path) -> bool {
    let Ok(v) = read_json(path) else { return false };
    let first = v.as_array().and_then(|a| a.first());
    first
        .is_some_and(|t| t.get("name").is_some() && (t.get("inputSchema").is_some() || t.get("input_schema").is_some()))
}

/// A `[[logs.sources]]` name for `file`: its stem in letters, digits, `-` and `_`, made
/// unique among `taken` with `-2`, `-3`, ….
fn source_name(file: &Path, taken: &[LogFile]) -> String {
    let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let base: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect();
    let base = if base.is_empty() { "logs".to_string() } else { base };
    let mut name = base.clone();
    let mut k = 2;
    while taken.iter().any(|l| l.name == name) {
        name = format!("{base}-{k}");
        k += 1;
    }
    name
}

/// `local`: the roles run on the embedded llama-server (`provider = "local"`).
fn logs_sections(logs: &[LogFile], catalog: &str, catalog_format: &str, local: bool) -> String {
    let sources: String = logs
        .iter()
        .map(|l| {
            format!(
                "[[logs.sources]]\nname = {}\npath = {}\nformat = \"{}\"\n\n",
                toml_str(&l.name),
                toml_str(&l.path),
                l.format
            )
        })
        .collect();
    // The local server evaluates the tools' shared prompt prefix once when the agent loops
    // run one after another (docs/llm.md#prompts); other servers cache it across requests.
    let one_at_a_time = if local {
        "# One at a time: the local model server then evaluates your tools' shared prompt\n\
         # prefix once (docs/llm.md#prompts); raise it with a server that caches prefixes.\n\
         concurrency = 1\n"
    } else {
        ""
    };
    format!(
        "# ---- Log track (docs/logs.md, docs/synth.md) --------------------------------------\n\
         # Your tool-call logs: FinMCP sample JSON, OpenAI chat JSONL or tool-event JSONL\n\
         # (`auto` detects it). Add a `[[logs.sources]]` per file.\n\
         # For a first look at a few sessions, uncomment these two lines:\n\
         # [logs]\n\
         # sample = 50   # a seeded subset for a first look; remove for the whole log\n\
         {sources}\
         # The tools your logs call: an MCP `tools/list` result (`mcp`) or a benchgen catalog.\n\
         [logs.catalog]\npath = {}\nformat = \"{catalog_format}\"\n\n\
         # Personal data is replaced by keyed pseudonyms (e-mails, phones, names, ids, …).\n\
         # The key comes from this environment variable: set it, keep it secret.\n\
         [logs.anonymise]\nsecret_env = \"BENCHGEN_ANON_SECRET\"\n\n\
         [logs.curate]\njudge_role = \"judge\"\n\
         # One line on your domain, shown to the judge.\n\
         domain = \"the services and tools these logs come from\"\n\
         # Sub-scenario labels from the logs (`scenery`); `llm` lets the judge label them.\n\
         scenarios = \"logs\"\n\
         # A session the word rules cannot tell is kept when a tool it called is this near its\n\
         # requests (cosine of `make setup`'s all-MiniLM-L6-v2, the `[embed]` default); the\n\
         # others go to the judge (docs/logs.md#curation).\n\
         keep_similarity = 0.45\n\n\
         [logs.split]\n# Share of sessions that seed synthesis; the rest are candidate real samples.\nseed_ratio = 0.5\n\n\
         # The tool-dependency graph mined from the logs (docs/logs.md#graph).\n\
         [graph]\nrole = \"judge\"\n\n\
         # Synthesis: chain-based multi-tool queries and role-play dialogues (docs/synth.md).\n\
         [synth]\nplanner_role = \"writer\"\nuser_role = \"writer\"\nassistant_role = \"agent\"\njudge_role = \"judge\"\n\n\
         # Role-play: a few simulated multi-turn dialogues, so a first release has multi-turn\n\
         # samples of its own; raise `dialogues` once the first ones read well.\n\
         [synth.roleplay]\npersonas = \"raw/personas.toml\"\ndialogues = 2\nturn_cap = 3\n{one_at_a_time}\n\
         # The agent loop that executes the synthesised queries (docs/mcp.md#benchgen-execute):\n\
         # by default against a sandbox serving your catalog with the results in your logs.\n\
         [execute]\nmax_calls = 12\n{one_at_a_time}\n",
        toml_str(catalog)
    )
}

fn review_and_release(name: &str) -> String {
    format!(
        "# ---- Review and release (docs/review.md, docs/release.md) --------------------------\n\
         # Two reviewers per sample from reviews/reviewers.toml: `benchgen run` writes their sheets\n\
         # (artifacts/review-export/sheets/), `benchgen review serve` runs the web app, and the\n\
         # next `benchgen run` imports what comes back into reviews/returned/.\n\
         [review]\nroster = \"reviews/reviewers.toml\"\n\n\
         # LLM scores with the same rubric, shown to reviewers and marked as such. They decide\n\
         # nothing unless `count_as_human = true` (then the card says so).\n\
         [review.prereview]\nroles = [\"judge\"]\ncount_as_human = false\n\n\
         [release]\nname = \"{name}\"\nversion = \"0.1.0\"\nlicense = \"cc-by-4.0\"\n"
    )
}

fn readme(name: &str, track: Track, logs: &[LogFile], catalog: &str, registry: &str, provider: &str) -> String {
    let logs = logs.iter().map(|l| l.path.as_str()).collect::<Vec<_>>().join("`, `");
    let mut s = format!(
        "# {name}\n\nA benchgen project (`pipeline/{name}.toml`). Made by `benchgen init`.\n\n## Your files\n\n"
    );
    if matches!(track, Track::Logs | Track::Both) {
        s.push_str(&format!(
            "- `{logs}`: your tool-call logs (FinMCP sample JSON, OpenAI chat JSONL with tool calls, or\n  \
             one tool event per line: `{{\"session\", \"tool\", \"arguments\", \"result\", …}}`; docs/logs.md).\n\
             - `{catalog}`: the tools those logs call, as an MCP `tools/list` result.\n\
             - `raw/personas.toml`: who the simulated users of role-play dialogues are; edit for your domain.\n"
        ));
    }
    if matches!(track, Track::Registry | Track::Both) {
        s.push_str(&format!("- `{registry}`: a registry snapshot in ETOM's `mcp_registry.json` format.\n"));
    }
    s.push_str("- `reviews/reviewers.toml`: your reviewers (two per sample).\n\n## Environment\n\n");
    if matches!(track, Track::Logs | Track::Both) {
        s.push_str("- `BENCHGEN_ANON_SECRET`: the key of the logs' pseudonyms. Required; keep it secret.\n");
    }
    s.push_str("- `BENCHGEN_REVIEW_SECRET`: signs reviewers' links for `benchgen review serve`.\n");
    if provider == "local" {
        s.push_str(
            "- `BENCHGEN_CACHE`: where `make setup` (in benchgen's repository) put the local model\n  \
             (default `~/.cache/benchgen`).\n",
        );
    } else {
        s.push_str("- the API key variable named by `api_key_env` in the config, if your server needs one.\n");
    }
    s.push_str(&format!(
        "\n## Run\n\n```console\n$ benchgen llm ping --probe               # each LLM role answers; one stage-sized exchange timed\n\
         $ benchgen check                          # the config and prompts; the first run's LLM exchanges and time\n\
         $ benchgen run                            # every stage; stops with exit code 3: the samples wait for review\n\
         # reviewers fill artifacts/review-export/sheets/NAME.csv (or .xlsx; or `benchgen review serve`)\n\
         # and return them into reviews/returned/\n\
         $ benchgen run                            # imports the sheets, merges, releases\n\
         $ benchgen release verify release/{name}-0.1.0\n```\n\n\
         Exit code 3 means \"waiting for people\", not failure: `run` says how many samples wait, for\n\
         what and where, and what to run next; `benchgen status` shows the same. For a first look\n\
         at a large input, uncomment `sample = N` in the config (a seeded subset). `benchgen status`\n\
         shows what is done or stale and why; `benchgen explain sample:ID` how a sample was made.\n\
         Prompts: `benchgen prompts list`.\n"
    ));
    s
}

const REVIEWERS: &str = "# Your reviewers (docs/review.md#assign). Each: `id`, `name`, optional `expertise` (sample\n\
# tags such as `finmcp`, `etom`, `multi_tool`, `L3` or a scenario label), optional\n\
# `capacity` (most samples) and `role` = \"reviewer\" (default) or \"lead\" (adjudicates).\n\n\
[[reviewer]]\nid = \"alice\"\nname = \"Alice\"\n\n\
[[reviewer]]\nid = \"bob\"\nname = \"Bob\"\n\n\
[[reviewer]]\nid = \"lead\"\nname = \"Review lead\"\nrole = \"lead\"\n";

const PERSONAS: &str = "# Personas of role-play synthesis (docs/synth.md#role-play): the planner draws one value per\n\
# attribute (seeded) and the writer role writes a goal for that persona in a sub-scenario of\n\
# your logs. Attributes are free: rename, add or remove them for your domain.\n\n\
[attributes]\n\
experience = [\"new to these tools\", \"uses them every day\", \"an expert\"]\n\
attitude = [\"cautious: wants the facts first\", \"in a hurry: wants it done\"]\n\
goal = [\"fix a problem\", \"find something out\", \"change a setting\"]\n";

const GITIGNORE: &str = "# benchgen: stage outputs and the ledger (rebuilt by `benchgen run`).\n\
/artifacts/\n\
# Review secrets: reviewers' personal links and the web app's database. (Returned sheets\n\
# and reviews/web/ are inputs of the release: keep them, so a checkout replays it.)\n\
/reviews/links/\n/reviews/review.sqlite*\n";
