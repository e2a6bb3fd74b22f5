//! `benchgen logs import` (stage `logs-import`): a domain's tool catalog and its logs →
//! one normalised, anonymised session per line.
//!
//! Outputs under `artifacts/logs-import/`:
//! - `sessions.jsonl`: [`Session`]s in source order (JSON-array and conversation files in
//!   file order, event logs by session id); every text anonymised (see [`super::anon`]);
//! - `catalog.json`: the domain's tools `[{name, description, input_schema}]` sorted by name;
//! - `malformed.jsonl`: `{location: "file:line", reason}` of every record kept out;
//! - `report.json`: counts (sessions, calls, groups, flags per code, malformed, detector hits);
//!   with `[logs] sample = N`, `sample` lists the sessions the seeded sample left out.
//!
//! Sessions are written one by one into a streamed output (`out.create`), and the
//! sources are read record by record, so memory does not grow with the log (a sample
//! reads the sources twice and keeps their session ids, see [`sample_ids`]).

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
    /// `[logs] sample = N`: the sessions the seeded sample left out (absent without it).
    /// Every other count is of the sessions written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<SampleReport>,
}

impl ImportReport {
    /// Add the counts [`finish_session`] made of one session.
    fn add_session(&mut self, one: ImportReport) {
        self.sessions += one.sessions;
        self.turns += one.turns;
        self.calls += one.calls;
        self.groups += one.groups;
        self.parallel_groups += one.parallel_groups;
        self.single_tool_sessions += one.single_tool_sessions;
        self.multi_tool_sessions += one.multi_tool_sessions;
        self.sessions_without_calls += one.sessions_without_calls;
        self.unrecognised_feedback += one.unrecognised_feedback;
        for (k, v) in one.flags {
            *self.flags.entry(k).or_default() += v;
        }
        for (k, v) in one.unknown_tools {
            *self.unknown_tools.entry(k).or_default() += v;
        }
    }
}

/// `report.json` → `sample`: what `[logs] sample = N` left out of `sessions.jsonl`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct SampleReport {
    /// The configured `[logs] sample`.
    pub sample: usize,
    /// Sessions the sources hold: those written and those left out.
    pub read: u64,
    /// Sessions left out.
    pub not_sampled: u64,
    /// Their ids, sorted.
    pub not_sampled_ids: Vec<String>,
}

/// The sessions `[logs] sample = N` keeps: their final (anonymised) ids, see [`sample_ids`].
pub struct Keep {
    /// The configured `[logs] sample`.
    pub sample: usize,
    pub ids: HashSet<String>,
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
    import_keeping(sources, known, anon, out, malformed, imported, None)
}

/// [`import_sources`], writing only the sessions of `keep` (all of them when `None`). A
/// session left out is anonymised all the same, so every id and pseudonym is the one a full
/// import gives, but it is neither written, handed to `imported` nor counted: the report's
/// `sample` lists it.
pub fn import_keeping(
    sources: &[SourceFile],
    known: Option<&HashSet<String>>,
    anon: &mut Anonymiser,
    out: &mut dyn Write,
    malformed: &mut dyn FnMut(&str, &str) -> Result<()>,
    imported: &mut dyn FnMut(&Session),
    keep: Option<&Keep>,
) -> Result<ImportReport> {
    let mut rep = ImportReport::default();
    let mut seen_ids: HashSet<String> = HashSet::new();
    let mut left_out: Vec<String> = Vec::new();
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
                    if !finish_kept(&mut s, known, anon, &mut rep, &mut seen_ids, keep) {
                        left_out.push(s.id.clone());
                        return Ok(());
                    }
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
    if let Some(keep) = keep {
        left_out.sort();
        let not_sampled = left_out.len() as u64;
        let read = rep.sessions + not_sampled;
        rep.sample = Some(SampleReport { sample: keep.sample, read, not_sampled, not_sampled_ids: left_out });
    }
    Ok(rep)
}

/// [`finish_session`], and whether the session is kept: always without `keep`, else when its
/// final id is in the sample. One left out changes no count of `rep` or of the anonymiser.
fn finish_kept(
    s: &mut Session,
    known: Option<&HashSet<String>>,
    anon: &mut Anonymiser,
    rep: &mut ImportReport,
    seen: &mut HashSet<String>,
    keep: Option<&Keep>,
) -> bool {
    let Some(keep) = keep else {
        finish_session(s, known, anon, rep, seen);
        return true;
    };
    let (mut one, counts) = (ImportReport::default(), anon.counts.clone());
    finish_session(s, known, anon, &mut one, seen);
    if !keep.ids.contains(&s.id) {
        anon.counts = counts;
        return false;
    }
    rep.add_session(one);
    true
}

/// `[logs] sample = n`: the final ids of a seeded random `n` of the sessions the sources hold
/// (all of them when they hold no more). A first pass over the sources with an anonymiser of
/// its own, writing nothing, so the ids are the ones the import then writes (anonymised, a
/// duplicate renamed `…#2`); only the ids are kept in memory.
pub fn sample_ids(
    files: &[SourceFile],
    known: Option<&HashSet<String>>,
    anon: &super::AnonSettings,
    n: usize,
    seed: u64,
) -> Result<Keep> {
    let mut anon = Anonymiser::from_settings(anon)?;
    let mut ids: Vec<String> = Vec::new();
    let mut record = |s: &Session| ids.push(s.id.clone());
    let mut sink = std::io::sink();
    import_sources(files, known, &mut anon, &mut sink, &mut |_, _| Ok(()), &mut record)?;
    Ok(Keep { sample: n, ids: crate::stage::seeded_sample(ids, n, seed) })
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

/// Sessions the log track's first run carries, and where that count comes from:
/// `sessions.jsonl` when imported, else the sessions the configured sources hold (at most
/// `[logs] sample`). `None`: a source cannot be read yet.
pub fn session_bound(s: &Settings) -> Option<(u64, &'static str)> {
    let (sessions, from) = sessions_before_run(s)?;
    let n = sessions.len() as u64;
    match settings(s).sample {
        Some(k) if from != "imported sessions" => Some((n.min(k as u64), from)),
        _ => Some((n, from)),
    }
}

/// Every session a first run can import, for estimates: `sessions.jsonl` when imported,
/// else every session of the configured sources as read (before `[logs] sample`, so what
/// is counted over them bounds what any sample yields).
pub fn sessions_before_run(s: &Settings) -> Option<(Vec<Session>, &'static str)> {
    if let Ok(f) = std::fs::File::open(SESSIONS.path(s)) {
        return Some((super::read_sessions(f, "logs-import/sessions.jsonl").ok()?, "imported sessions"));
    }
    let mut sessions = Vec::new();
    for f in source_files(s) {
        let mut keep = |item: Item| -> Result<()> {
            if let Item::Session(x) = item {
                sessions.push(*x);
            }
            Ok(())
        };
        read_source(&f.path, &f.display, &f.name, f.format, &mut keep).ok()?;
    }
    Some((sessions, "sessions in the log files"))
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
        let l = settings(s);
        crate::settings::check_range(problems, "logs.max_malformed_share", l.max_malformed_share(), 0.0, 1.0);
        if l.sample == Some(0) {
            problems.push(crate::error::Problem::new(
                "logs.sample",
                "must be at least 1 (it is the number of sessions a first look imports; leave it out for all)",
            ));
        }
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
        let mut hashed =
            json!({"sources": l.sources, "catalog": l.catalog, "anonymise": l.anonymise, "secret": secret_tag});
        // Only when set (a config without it keeps its hash); the seed picks the sample.
        if let Some(n) = l.sample {
            hashed["sample"] = json!({"n": n, "seed": s.project.seed});
        }
        Ok(Plan { inputs, config_hash: section_hash(&hashed)? })
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
        let files = source_files(s);
        let keep = match l.sample {
            Some(n) => Some(sample_ids(&files, known.as_ref(), &l.anonymise, n, s.project.seed)?),
            None => None,
        };

        let mut w = out.create("sessions.jsonl")?;
        let mut rejects = Vec::new();
        let mut malformed_lines = Vec::new();
        // The first malformed reason of each file (by its shown name, which starts the location).
        let mut first_reason: BTreeMap<String, String> = BTreeMap::new();
        let mut records = Vec::new();
        let mut record = |sess: &Session| records.push(session_event(sess));
        let rep = import_keeping(
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
            keep.as_ref(),
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
        sample_summary(out, &rep);
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

/// With `[logs] sample`: the count `not_sampled` and the summary's first line.
fn sample_summary(out: &mut Output, rep: &ImportReport) {
    let Some(x) = &rep.sample else { return };
    out.count("not_sampled", x.not_sampled);
    out.notes.push(format!(
        "sampled {} of {} sessions (`[logs] sample = {}`); the {} not sampled are listed in report.json → `sample`",
        rep.sessions, x.read, x.sample, x.not_sampled
    ));
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
