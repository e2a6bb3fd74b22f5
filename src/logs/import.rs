//! `benchgen logs import` (stage `logs-import`): a domain's tool catalog and its logs →
//! one normalised, anonymised session per line.
//!
//! Outputs under `artifacts/logs-import/`:
//! - `sessions.jsonl`: [`Session`]s in source order (JSON-array and conversation files in
//!   file order, event logs by session id); every text anonymised (see [`super::anon`]);
//! - `catalog.json`: the domain's tools `[{name, description, input_schema}]` sorted by name;
//! - `malformed.jsonl`: `{location: "file:line", reason}` of every record kept out;
//! - `report.json`: counts (sessions, calls, groups, flags per code, malformed, detector hits).
//!
//! Sessions are written one by one into a streamed output (`out.create`), and the
//! sources are read record by record, so memory does not grow with the log.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::anon::Anonymiser;
use super::readers::{Item, read_source};
use super::{CatalogFormat, Flag, LogFormat, LogsSettings, Session, flag};
use crate::ledger::NewEvent;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const STAGE: &str = "logs-import";

/// Normalised, anonymised sessions (one JSON [`Session`] a line), read by `logs curate`.
pub const SESSIONS: Artifact<Session> = Artifact::new(STAGE, "sessions.jsonl");
/// The domain's tools, read by `logs split` and `graph build`.
pub const CATALOG: Artifact<Vec<LogTool>> = Artifact::new(STAGE, "catalog.json");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "logs import",
    // 3: report.json counts records and malformed ones per source, and unrecognised feedback.
    version: 4,
    about: "a domain's tool logs and catalog → normalised, anonymised sessions",
    reads: &[],
    writes: &["sessions.jsonl", "malformed.jsonl", "catalog.json", "report.json"],
    section: Some("logs"),
};

/// One tool of the domain's catalog.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LogTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default, alias = "inputSchema")]
    pub input_schema: Value,
}

/// Counts of one import.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct ImportReport {
    pub sessions: u64,
    pub turns: u64,
    pub calls: u64,
    pub groups: u64,
    pub parallel_groups: u64,
    pub single_tool_sessions: u64,
    pub multi_tool_sessions: u64,
    pub sessions_without_calls: u64,
    pub malformed: u64,
    /// Flag code → number of flagged calls or sessions.
    pub flags: BTreeMap<String, u64>,
    /// Source name → (format read as, sessions).
    pub sources: BTreeMap<String, Value>,
    /// Anonymisation: detector → values replaced.
    pub anonymised: BTreeMap<String, u64>,
    /// Tool names called but absent from the catalog, with call counts.
    pub unknown_tools: BTreeMap<String, u64>,
    /// Sessions whose `feedback` value is no recognised signal (ignored; flag
    /// `unrecognised-feedback`; the mapping is in docs/logs.md, "Feedback").
    #[serde(default)]
    pub unrecognised_feedback: u64,
}

/// Parse a catalog file in one of the accepted formats.
pub fn parse_catalog(bytes: &[u8], format: CatalogFormat, display: &str) -> Result<Vec<LogTool>> {
    let v: Value = crate::json::value_from_slice(bytes).with_context(|| format!("catalog `{display}` is not JSON"))?;
    let mut tools: Vec<LogTool> = match format {
        CatalogFormat::Mcp => {
            let list = v
                .get("tools")
                .or_else(|| v.get("result").and_then(|r| r.get("tools")))
                .unwrap_or(&v)
                .as_array()
                .with_context(|| {
                    format!("catalog `{display}`: expected an MCP `tools/list` result (`{{tools: [...]}}` or a list)")
                })?;
            list.iter()
                .enumerate()
                .map(|(i, t)| {
                    serde_json::from_value::<LogTool>(t.clone())
                        .map_err(|e| anyhow::anyhow!("catalog `{display}`: tools[{i}]: {e}"))
                })
                .collect::<Result<_>>()?
        }
        CatalogFormat::Catalog => {
            let cat: crate::model::Catalog =
                serde_json::from_value(v).with_context(|| format!("catalog `{display}` is not a benchgen catalog"))?;
            cat.tools()
                .map(|(_, t)| LogTool {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    input_schema: t.input_schema.clone(),
                })
                .collect()
        }
    };
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools.dedup_by(|a, b| a.name == b.name);
    Ok(tools)
}

/// Fail on a source that yielded nothing readable, or whose share of malformed records is
/// above `max_share`, naming the file, the counts and the first reason: such a source is a
/// wrong `format` or encoding, and importing it would leave it silently out of the benchmark.
pub fn check_sources(
    sources: &[SourceFile],
    rep: &ImportReport,
    max_share: f64,
    first_reason: &BTreeMap<String, String>,
) -> Result<()> {
    for src in sources {
        let Some(r) = rep.sources.get(&src.name) else { continue };
        let count = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
        let (records, bad) = (count("records"), count("malformed"));
        let share = if records == 0 { 1.0 } else { bad as f64 / records as f64 };
        if records > bad && share <= max_share {
            continue;
        }
        let what = if records == bad {
            format!("`{}` has no readable record ({bad} malformed)", src.display)
        } else {
            format!(
                "`{}`: {bad} of {records} records are malformed ({:.0}%, above `logs.max_malformed_share` = {max_share})",
                src.display,
                share * 100.0
            )
        };
        let mut hint = String::new();
        if let Some(reason) = first_reason.get(&src.display) {
            hint.push_str(&format!("the first: {reason}; "));
        }
        // (A file with a UTF-16 or UTF-32 byte-order mark was refused, naming it, when read.)
        hint.push_str(&format!(
            "check its `format` (read as `{}`) and that it is UTF-8 text",
            r.get("format").and_then(Value::as_str).unwrap_or("?")
        ));
        if super::readers::head(&src.path).contains(&0) {
            hint.push_str(" (it holds NUL bytes, as UTF-16 or UTF-32 text without a byte-order mark does)");
        }
        return Err(crate::error::hinted(what, hint));
    }
    Ok(())
}

/// One log file to read.
pub struct SourceFile {
    pub path: PathBuf,
    pub display: String,
    pub name: String,
    pub format: LogFormat,
}

/// The ledger record of one imported session (subject `log:<id>`): where it was read, the
/// first link of a log sample's lineage.
fn session_event(s: &Session) -> NewEvent {
    NewEvent::new(
        super::kind::SESSION,
        Some(&super::subject(&s.id)),
        json!({"id": s.id, "source": s.source, "format": s.format, "location": s.location,
               "turns": s.turns.len(), "calls": s.call_count()}),
    )
}

/// Import every source: check tool names, anonymise, write one session per line to `out`,
/// hand each malformed record to `malformed(location, reason)`.
pub fn import_sources(
    sources: &[SourceFile],
    known: Option<&HashSet<String>>,
    anon: &mut Anonymiser,
    out: &mut dyn Write,
    malformed: &mut dyn FnMut(&str, &str) -> Result<()>,
    imported: &mut dyn FnMut(&Session),
) -> Result<ImportReport> {
    let mut rep = ImportReport::default();
    let mut seen_ids: HashSet<String> = HashSet::new();
    for src in sources {
        // Records read: a session of a conversation file, an event (call) of an event log.
        let (mut n, mut records, mut bad) = (0u64, 0u64, 0u64);
        let used = read_source(&src.path, &src.display, &src.name, src.format, &mut |item| {
            match item {
                Item::Malformed { location, reason } => {
                    rep.malformed += 1;
                    bad += 1;
                    malformed(&location, &reason)?;
                }
                Item::Session(mut s) => {
                    n += 1;
                    records += if s.format == "events" { s.call_count() as u64 } else { 1 };
                    finish_session(&mut s, known, anon, &mut rep, &mut seen_ids);
                    imported(&s);
                    serde_json::to_writer(&mut *out, &s)?;
                    out.write_all(b"\n")?;
                }
            }
            Ok(())
        })?;
        rep.sources.insert(
            src.name.clone(),
            json!({"format": used.as_str(), "sessions": n, "records": records + bad, "malformed": bad}),
        );
    }
    rep.anonymised = anon.counts.clone();
    Ok(rep)
}

fn finish_session(
    s: &mut Session,
    known: Option<&HashSet<String>>,
    anon: &mut Anonymiser,
    rep: &mut ImportReport,
    seen: &mut HashSet<String>,
) {
    // First learn what the configured rules find anywhere in the session, so a value is
    // replaced even where it appears before (or without) its rule's context.
    anon.learn(&s.id);
    for t in &s.turns {
        anon.learn(&t.user);
        if let Some(a) = &t.answer {
            anon.learn(a);
        }
        for c in t.groups.iter().flatten() {
            anon.learn_json(&c.arguments);
            for x in [&c.result, &c.error].into_iter().flatten() {
                anon.learn(x);
            }
        }
    }
    for m in s.meta.values() {
        anon.learn_json(m);
    }
    s.id = anon.scrub(&s.id);
    if !seen.insert(s.id.clone()) {
        let mut k = 2;
        while !seen.insert(format!("{}#{k}", s.id)) {
            k += 1;
        }
        s.flags.push(Flag::new("duplicate-id", format!("another record has the id `{}`; this one is `#{k}`", s.id)));
        s.id = format!("{}#{k}", s.id);
    }
    for t in &mut s.turns {
        t.user = anon.scrub(&t.user);
        if let Some(a) = &mut t.answer {
            *a = anon.scrub(a);
        }
        for g in &t.groups {
            rep.groups += 1;
            if g.len() > 1 {
                rep.parallel_groups += 1;
            }
        }
        for c in t.groups.iter_mut().flatten() {
            rep.calls += 1;
            if let Some(k) = known
                && !k.contains(&c.tool)
            {
                c.flags.push(Flag::new(flag::UNKNOWN_TOOL, "the tool is not in the catalog"));
                *rep.unknown_tools.entry(c.tool.clone()).or_default() += 1;
            }
            anon.scrub_json(&mut c.arguments);
            if let Some(r) = &mut c.result {
                *r = anon.scrub(r);
            }
            if let Some(e) = &mut c.error {
                *e = anon.scrub(e);
            }
            for f in &c.flags {
                *rep.flags.entry(f.code.clone()).or_default() += 1;
            }
        }
    }
    for m in s.meta.values_mut() {
        anon.scrub_json(m);
    }
    for f in &s.flags {
        *rep.flags.entry(f.code.clone()).or_default() += 1;
    }
    if s.flags.iter().any(|f| f.code == flag::UNRECOGNISED_FEEDBACK) {
        rep.unrecognised_feedback += 1;
    }
    rep.sessions += 1;
    rep.turns += s.turns.len() as u64;
    match s.call_count() {
        0 => rep.sessions_without_calls += 1,
        1 => rep.single_tool_sessions += 1,
        _ => rep.multi_tool_sessions += 1,
    }
}

pub fn settings(s: &Settings) -> LogsSettings {
    s.section::<super::LogsSettings>().clone().unwrap_or_default()
}

fn source_files(s: &Settings) -> Vec<SourceFile> {
    settings(s)
        .sources
        .iter()
        .map(|src| {
            let path = s.resolve(&src.path);
            let name = src.name.clone().unwrap_or_else(|| {
                Path::new(&src.path)
                    .file_stem()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "log".into())
            });
            SourceFile { display: s.display_path(&path), path, name, format: src.format }
        })
        .collect()
}

pub struct ImportStage;

impl Stage for ImportStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Read the `[logs]` sources (FinMCP JSON, OpenAI chat JSONL, event JSONL) and the
         tool catalog into one normalised, anonymised session per line.

         Reads the files of `[[logs.sources]]` and `[logs.catalog]` (or lists the tools of
         its MCP server), streaming them record by record. Writes `artifacts/logs-import/`:
         `sessions.jsonl`, `catalog.json`, `malformed.jsonl` (`file:line` + reason of every
         record kept out) and `report.json` (counts, flags, anonymisation per detector).
         Needs the secret in the environment variable `[logs.anonymise] secret_env`.
         Skipped when up to date."
    }

    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        let share = settings(s).max_malformed_share();
        crate::settings::check_range(problems, "logs.max_malformed_share", share, 0.0, 1.0);
    }

    fn servers(&self, s: &Settings) -> Vec<ConfigRef> {
        let l = settings(s);
        l.catalog
            .as_ref()
            .filter(|c| c.path.is_none())
            .and_then(|c| c.server.as_ref())
            .map(|name| vec![ConfigRef::new("logs.catalog.server", name)])
            .unwrap_or_default()
    }

    fn plan(&self, s: &Settings) -> Result<Plan> {
        let l = settings(s);
        let mut inputs: Vec<PathBuf> = source_files(s).into_iter().map(|f| f.path).collect();
        if let Some(p) = l.catalog.as_ref().and_then(|c| c.path.as_ref()) {
            inputs.push(s.resolve(p));
        }
        // The secret itself is never hashed into anything written; a hash of its HMAC
        // on a fixed message tells a changed secret apart without revealing it.
        let secret_tag = std::env::var(&l.anonymise.secret_env)
            .map(|k| hex::encode(super::anon::hmac_sha256(k.as_bytes(), b"benchgen secret check"))[..16].to_string())
            .unwrap_or_default();
        Ok(Plan {
            inputs,
            config_hash: section_hash(
                &json!({"sources": l.sources, "catalog": l.catalog, "anonymise": l.anonymise, "secret": secret_tag}),
            )?,
        })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let l = settings(s);
        if l.sources.is_empty() {
            return Err(crate::error::hinted(
                "no log sources are configured",
                "add `[[logs.sources]]` with `path` (and optionally `format`) to the pipeline config",
            ));
        }
        let mut anon = Anonymiser::from_settings(&l.anonymise)?;
        let catalog = load_catalog(ctx, inputs, &l)?;
        let known: Option<HashSet<String>> = catalog.as_ref().map(|c| c.iter().map(|t| t.name.clone()).collect());

        let mut w = out.create("sessions.jsonl")?;
        let mut rejects = Vec::new();
        let mut malformed_lines = Vec::new();
        let files = source_files(s);
        // The first malformed reason of each file (by its shown name, which starts the location).
        let mut first_reason: BTreeMap<String, String> = BTreeMap::new();
        let mut records = Vec::new();
        let mut record = |sess: &Session| records.push(session_event(sess));
        let rep = import_sources(
            &files,
            known.as_ref(),
            &mut anon,
            &mut w,
            &mut |loc, reason| {
                serde_json::to_writer(&mut malformed_lines, &json!({"location": loc, "reason": reason}))?;
                malformed_lines.push(b'\n');
                rejects.push(NewEvent::new(super::kind::REJECT, Some(loc), json!({"location": loc, "reason": reason})));
                if let Some(f) =
                    files.iter().find(|f| loc.strip_prefix(f.display.as_str()).is_some_and(|r| r.starts_with(':')))
                {
                    first_reason.entry(f.display.clone()).or_insert_with(|| format!("{loc}: {reason}"));
                }
                Ok(())
            },
            &mut record,
        )?;
        check_sources(&files, &rep, l.max_malformed_share(), &first_reason)?;
        w.finish()?;
        out.file("malformed.jsonl", malformed_lines);
        out.json("catalog.json", &catalog.unwrap_or_default())?;
        out.json("report.json", &rep)?;
        for ev in rejects.into_iter().chain(records) {
            out.event(ev);
        }
        out.count("sessions", rep.sessions);
        out.count("calls", rep.calls);
        out.count("malformed", rep.malformed);
        out.count("single_tool", rep.single_tool_sessions);
        out.count("multi_tool", rep.multi_tool_sessions);
        out.count("anonymised", rep.anonymised.values().sum::<u64>());
        out.notes.push(format!(
            "{} sessions ({} single-tool, {} multi-tool), {} calls in {} groups ({} parallel); {} malformed records kept out",
            rep.sessions, rep.single_tool_sessions, rep.multi_tool_sessions, rep.calls, rep.groups, rep.parallel_groups, rep.malformed
        ));
        if !rep.flags.is_empty() {
            let f: Vec<String> = rep.flags.iter().map(|(k, v)| format!("{k} {v}")).collect();
            out.notes.push(format!("flagged (kept): {}", f.join(", ")));
        }
        if rep.unrecognised_feedback > 0 {
            out.notes.push(format!(
                "{} sessions with a `feedback` value that is no recognised signal (ignored; flag `{}`, see docs/logs.md)",
                rep.unrecognised_feedback,
                flag::UNRECOGNISED_FEEDBACK
            ));
        }
        let a: Vec<String> = rep.anonymised.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.notes.push(format!("anonymised: {}", if a.is_empty() { "nothing found".into() } else { a.join(", ") }));
        Ok(())
    }
}

fn load_catalog(ctx: &Ctx, inputs: &Inputs, l: &LogsSettings) -> Result<Option<Vec<LogTool>>> {
    let s = ctx.settings;
    let Some(c) = &l.catalog else { return Ok(None) };
    if let Some(p) = &c.path {
        let path = s.resolve(p);
        return parse_catalog(inputs.bytes(&path)?, c.format, &s.display_path(&path)).map(Some);
    }
    let Some(server) = &c.server else {
        anyhow::bail!("`[logs.catalog]` needs `path` (a file) or `server` (a configured MCP server)");
    };
    let client = crate::mcp::commands::client_for(s, server)?;
    let rt = crate::llm::batch::runtime()?;
    let tools = rt.block_on(async {
        let t = client.list_tools().await;
        client.shutdown().await;
        t
    });
    let tools = tools.map_err(|f| anyhow::anyhow!("cannot list the tools of MCP server `{server}`: {f}"))?;
    let mut out: Vec<LogTool> = tools
        .into_iter()
        .map(|t| LogTool { name: t.name, description: t.description, input_schema: t.input_schema })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Some(out))
}

/// Path of an artifact of this stage.
pub fn path(s: &Settings, file: &str) -> PathBuf {
    s.artifacts.join(STAGE).join(file)
}
