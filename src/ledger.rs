//! The provenance ledger: an append-only SQLite database of every event that
//! shapes an artifact (inputs read, catalog records, filter decisions, and in
//! later stages LLM exchanges, MCP calls, sampling draws, verdicts and reviews).
//!
//! Runs group the events of one stage execution. A stage's `manifest.json` names
//! the run that produced it, so "what produced X" is answered from the runs the
//! current artifacts came from, never from an abandoned run.
//!
//! Schema (version 1):
//! - `runs(id, stage, started_at, finished_at, status, config_hash, code_version)`
//! - `events(id, run_id, kind, stage, subject, time, payload)` — payload is JSON
//! - `event_parents(event_id, parent_id)` — lineage edges
//!
//! Indexes: events by subject, by run and kind, and `llm.exchange` events by their
//! payload's `request_hash`.
//!
//! Triggers reject UPDATE and DELETE on events and parents.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

pub const LEDGER_FILE: &str = "ledger.sqlite";

/// Well-known event kinds. Kinds are plain strings in the database so new stages
/// can add their own; these constants keep the spelling in one place.
pub mod kind {
    pub const INPUT_READ: &str = "input.read";
    pub const CATALOG_SERVER: &str = "catalog.server";
    pub const CATALOG_TOOL: &str = "catalog.tool";
    pub const CATALOG_REJECT: &str = "catalog.reject";
    pub const FILTER_DECISION: &str = "filter.decision";
    pub const LLM_EXCHANGE: &str = "llm.exchange";
    pub const MCP_CALL: &str = "mcp.call";
    /// An MCP server as `execute` or `synth roleplay` met it when connecting: how it was
    /// started, its handshake and the hashes of its `tools/list` ([`crate::mcp::pin`]).
    pub const MCP_SERVER: &str = "mcp.server";
    pub const SAMPLING: &str = "sampling.draw";
    pub const VERDICT: &str = "verdict";
    pub const REVIEW: &str = "review";
}

/// A parent of a new event: an event already in the ledger, or an earlier event
/// of the same batch (by its index in the batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parent {
    Id(i64),
    Batch(usize),
}

/// An event to append.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub kind: String,
    pub subject: Option<String>,
    pub payload: Value,
    pub parents: Vec<Parent>,
}

impl NewEvent {
    pub fn new(kind: &str, subject: Option<&str>, payload: Value) -> Self {
        Self { kind: kind.to_string(), subject: subject.map(str::to_string), payload, parents: Vec::new() }
    }

    pub fn with_parent(mut self, p: Parent) -> Self {
        self.parents.push(p);
        self
    }
}

/// A recorded event.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Event {
    pub id: i64,
    pub run_id: i64,
    pub kind: String,
    pub stage: String,
    pub subject: Option<String>,
    pub time: String,
    pub payload: Value,
    pub parents: Vec<i64>,
}

/// An event's columns without its id, run and parents: what scans over many events read.
/// The payload is the stored JSON text, for callers to parse as they need.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub kind: String,
    pub stage: String,
    pub subject: Option<String>,
    pub payload: String,
    /// When it was recorded (RFC 3339).
    pub time: String,
}

fn event_row(r: &rusqlite::Row) -> rusqlite::Result<EventRow> {
    Ok(EventRow { kind: r.get(0)?, stage: r.get(1)?, subject: r.get(2)?, payload: r.get(3)?, time: r.get(4)? })
}

/// What `benchgen explain ID` says about one item: where it stands and its lineage.
/// Declared here, beside [`Event`], so stages that explain their own ids need not
/// import `explain` (which reaches them through the stage list).
#[derive(Debug, Serialize)]
pub struct Explanation {
    pub id: String,
    pub item: &'static str,
    /// One line saying where the item stands now.
    pub status: String,
    /// The item's current record, when it is a catalog entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<Value>,
    /// Lineage events, oldest first.
    pub lineage: Vec<Event>,
}

/// The hint of `benchgen explain`'s not-found errors: the ids it takes. Declared here, beside
/// [`Explanation`], for a family that answers for some of them (`filter`'s decisions).
pub const EXPLAIN_IDS: &str = "ids look like `server::tool`, `server`, `filter:server::tool`, `#<event id>` or \
                               `sha256:<exchange or call hash>`; `benchgen status` shows what has run";

/// Metadata of one stage run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Run {
    pub id: i64,
    pub stage: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: String,
    pub config_hash: String,
    pub code_version: String,
}

/// A stage's run that asked a model ([`Ledger::last_model_runs`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelRun {
    pub id: i64,
    pub started_at: String,
    pub finished_at: String,
    /// Live exchanges per role.
    pub exchanges: BTreeMap<String, u64>,
    /// Exchanges per role the ledger answered (a rerun after a kill or a changed prompt
    /// asks the model only for what it has not answered).
    pub cached: BTreeMap<String, u64>,
}

impl ModelRun {
    /// Wall seconds from the run's first record to its end (0 where a time cannot be read):
    /// a stage's work before its first exchange is not in it.
    pub fn seconds(&self) -> f64 {
        let at = |t: &str| t.parse::<jiff::Timestamp>().ok();
        match (at(&self.started_at), at(&self.finished_at)) {
            (Some(a), Some(b)) => (b.as_millisecond() - a.as_millisecond()).max(0) as f64 / 1000.0,
            _ => 0.0,
        }
    }
}

/// What [`Ledger::exchange_usage`] reads of one exchange.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ExchangeUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub latency_ms: f64,
    /// The answer stopped at the request's completion-token limit (`finish_reason` "length").
    pub cut: bool,
}

pub struct Ledger {
    conn: Connection,
    path: PathBuf,
}

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
    id INTEGER PRIMARY KEY,
    stage TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    code_version TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events(
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    kind TEXT NOT NULL,
    stage TEXT NOT NULL,
    subject TEXT,
    time TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_subject ON events(subject);
CREATE INDEX IF NOT EXISTS events_run_kind ON events(run_id, kind);
-- Exchanges by request hash (`Ledger::exchange_event`, which stages call per item):
-- without it each lookup scanned every event's JSON.
CREATE INDEX IF NOT EXISTS events_exchange_hash ON events(json_extract(payload, '$.request_hash'))
    WHERE kind = 'llm.exchange';
CREATE TABLE IF NOT EXISTS event_parents(
    event_id INTEGER NOT NULL REFERENCES events(id),
    parent_id INTEGER NOT NULL REFERENCES events(id),
    PRIMARY KEY(event_id, parent_id)
);
CREATE INDEX IF NOT EXISTS event_parents_parent ON event_parents(parent_id);
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS parents_no_update BEFORE UPDATE ON event_parents
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS parents_no_delete BEFORE DELETE ON event_parents
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS runs_finish_once BEFORE UPDATE ON runs
    WHEN OLD.finished_at IS NOT NULL
    BEGIN SELECT RAISE(ABORT, 'a finished run is immutable'); END;
CREATE TRIGGER IF NOT EXISTS runs_no_delete BEFORE DELETE ON runs
    BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '1');
"#;

pub fn now() -> String {
    jiff::Timestamp::now().to_string()
}

impl Ledger {
    /// Open (creating if needed) the ledger in an artifacts folder.
    pub fn open(artifacts: &Path) -> Result<Self> {
        std::fs::create_dir_all(artifacts).with_context(|| format!("cannot create `{}`", artifacts.display()))?;
        let path = artifacts.join(LEDGER_FILE);
        let conn = Connection::open(&path).with_context(|| format!("cannot open ledger `{}`", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(30))?;
        conn.execute_batch(SCHEMA)
            .map_err(|e| full(&path, e.into()))
            .with_context(|| format!("cannot initialise ledger `{}`", path.display()))?;
        if std::env::var_os("BENCHGEN_FAIL_LEDGER_FULL").is_some() {
            // Test hook: the ledger cannot grow any more, so SQLite answers the next write
            // that needs a page with SQLITE_FULL, exactly as on a full disk.
            let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            conn.pragma_update(None, "max_page_count", pages)?;
        }
        Ok(Self { conn, path })
    }

    /// Open an existing ledger read-only; `None` when there is none yet.
    pub fn open_existing(artifacts: &Path) -> Result<Option<Self>> {
        if !artifacts.join(LEDGER_FILE).exists() {
            return Ok(None);
        }
        Self::open(artifacts).map(Some)
    }

    /// Open an existing ledger without writing to it (no schema set-up); `None` when there
    /// is none yet.
    pub fn open_read_only(artifacts: &Path) -> Result<Option<Self>> {
        let path = artifacts.join(LEDGER_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let conn = Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .with_context(|| format!("cannot open ledger `{}`", path.display()))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))?;
        Ok(Some(Self { conn, path }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The artifacts folder the ledger is in (the one it was opened in), for an explanation
    /// that shows an item's record from an artifact beside it.
    pub fn artifacts(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new(""))
    }

    /// Start a run; events are appended to it until [`Ledger::finish_run`].
    pub fn begin_run(&self, stage: &str, config_hash: &str, code_version: &str) -> Result<i64> {
        insert_run(&self.conn, stage, config_hash, code_version).map_err(|e| full(&self.path, e))
    }

    pub fn finish_run(&self, run_id: i64, status: &str) -> Result<()> {
        update_run(&self.conn, run_id, status).map_err(|e| full(&self.path, e))
    }

    /// Append a batch of events to a run in one transaction; returns their ids in
    /// batch order.
    pub fn append(&mut self, run_id: i64, stage: &str, events: &[NewEvent]) -> Result<Vec<i64>> {
        let path = self.path.clone();
        (|| {
            let tx = self.conn.transaction()?;
            let ids = insert_events(&tx, run_id, stage, events)?;
            tx.commit()?;
            Ok(ids)
        })()
        .map_err(|e| full(&path, e))
    }

    /// Record a whole finished run in one transaction: the run and its events
    /// appear together or not at all.
    pub fn record_run(
        &mut self,
        stage: &str,
        config_hash: &str,
        code_version: &str,
        events: &[NewEvent],
    ) -> Result<(i64, Vec<i64>)> {
        let path = self.path.clone();
        (|| {
            let tx = self.conn.transaction()?;
            let run = insert_run(&tx, stage, config_hash, code_version)?;
            let ids = insert_events(&tx, run, stage, events)?;
            update_run(&tx, run, "ok")?;
            tx.commit()?;
            Ok((run, ids))
        })()
        .map_err(|e| full(&path, e))
    }

    pub fn run(&self, id: i64) -> Result<Option<Run>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, stage, started_at, finished_at, status, config_hash, code_version FROM runs WHERE id = ?1",
                [id],
                |r| {
                    Ok(Run {
                        id: r.get(0)?,
                        stage: r.get(1)?,
                        started_at: r.get(2)?,
                        finished_at: r.get(3)?,
                        status: r.get(4)?,
                        config_hash: r.get(5)?,
                        code_version: r.get(6)?,
                    })
                },
            )
            .optional()?)
    }

    fn read_events(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<Event>> {
        let mut stmt = self.conn.prepare(sql)?;
        let rows = stmt.query_map(params, |r| {
            let payload: String = r.get(6)?;
            Ok(Event {
                id: r.get(0)?,
                run_id: r.get(1)?,
                kind: r.get(2)?,
                stage: r.get(3)?,
                subject: r.get(4)?,
                time: r.get(5)?,
                payload: serde_json::from_str(&payload).unwrap_or(Value::String(payload)),
                parents: Vec::new(),
            })
        })?;
        let mut events = rows.collect::<rusqlite::Result<Vec<_>>>()?;
        let mut par =
            self.conn.prepare_cached("SELECT parent_id FROM event_parents WHERE event_id = ?1 ORDER BY parent_id")?;
        for ev in &mut events {
            ev.parents = par.query_map([ev.id], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
        }
        Ok(events)
    }

    pub fn event(&self, id: i64) -> Result<Option<Event>> {
        Ok(self
            .read_events("SELECT id, run_id, kind, stage, subject, time, payload FROM events WHERE id = ?1", [id])?
            .pop())
    }

    /// Events about `subject` recorded by the given runs, oldest first.
    pub fn events_for(&self, subject: &str, runs: &[i64]) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        for run in runs {
            out.extend(self.read_events(
                "SELECT id, run_id, kind, stage, subject, time, payload FROM events WHERE subject = ?1 AND run_id = ?2 ORDER BY id",
                params![subject, run],
            )?);
        }
        out.sort_by_key(|e| e.id);
        Ok(out)
    }

    /// Events of one kind in a run, oldest first.
    pub fn events_of_kind(&self, run_id: i64, kind: &str) -> Result<Vec<Event>> {
        self.read_events(
            "SELECT id, run_id, kind, stage, subject, time, payload FROM events WHERE run_id = ?1 AND kind = ?2 ORDER BY id",
            params![run_id, kind],
        )
    }

    /// "What produced X": the given events and all their ancestors, oldest first.
    pub fn lineage(&self, roots: &[i64]) -> Result<Vec<Event>> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<i64> = roots.to_vec();
        let mut found = BTreeMap::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id) {
                continue;
            }
            if let Some(ev) = self.event(id)? {
                stack.extend(ev.parents.iter().copied());
                found.insert(id, ev);
            }
        }
        Ok(found.into_values().collect())
    }

    /// Count of events per kind (for summaries and tests).
    pub fn count_by_kind(&self) -> Result<BTreeMap<String, i64>> {
        let mut stmt = self.conn.prepare("SELECT kind, COUNT(*) FROM events GROUP BY kind ORDER BY kind")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The newest `llm.exchange` event with this request hash ([`crate::llm::Reply::exchange`]),
    /// for linking what a stage records to the exchange behind it.
    pub fn exchange_event(&self, request_hash: &str) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row(
                // The kind is spelled out so the partial index `events_exchange_hash` applies.
                "SELECT id FROM events WHERE kind = 'llm.exchange' AND json_extract(payload, '$.request_hash') = ?1 ORDER BY id DESC LIMIT 1",
                params![request_hash],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// The newest `mcp.call` event with this call hash (how artifacts name a call,
    /// `agent::call_hash`), for `explain` and for tests that follow a call to its event.
    pub fn call_event(&self, call_hash: &str) -> Result<Option<i64>> {
        self.newest_with_field(kind::MCP_CALL, "call_hash", call_hash)
    }

    /// Prompt tokens, completion tokens, latency (ms) and whether the answer stopped at the
    /// completion-token limit (`finish_reason` "length"; a cache hit's from the exchange it
    /// reused, as a hit records no response) of the oldest `llm.exchange` event with this
    /// request hash sent by `role`: zeros without one, and 0 for a field it lacks
    /// (an exchange recorded without usage still counts). A ledger that cannot be read, or a
    /// field of the wrong type, is an error: zeros would pass for a free exchange.
    pub fn exchange_usage(&self, request_hash: &str, role: &str) -> Result<ExchangeUsage> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT json_extract(e.payload, '$.usage.prompt_tokens'), json_extract(e.payload, '$.usage.completion_tokens'),
                    json_extract(e.payload, '$.latency_ms'),
                    COALESCE(json_extract(e.payload, '$.response.choices[0].finish_reason'),
                             (SELECT json_extract(s.payload, '$.response.choices[0].finish_reason') FROM events s
                               WHERE s.id = json_extract(e.payload, '$.source_event'))) = 'length'
             FROM events e WHERE e.kind = 'llm.exchange' AND json_extract(e.payload, '$.request_hash') = ?1
               AND json_extract(e.payload, '$.role') = ?2 ORDER BY e.id LIMIT 1",
        )?;
        Ok(stmt
            .query_row(params![request_hash, role], |row| {
                Ok(ExchangeUsage {
                    prompt_tokens: row.get::<_, Option<u64>>(0)?.unwrap_or(0),
                    completion_tokens: row.get::<_, Option<u64>>(1)?.unwrap_or(0),
                    latency_ms: row.get::<_, Option<f64>>(2)?.unwrap_or(0.0),
                    cut: row.get::<_, Option<bool>>(3)?.unwrap_or(false),
                })
            })
            .optional()?
            .unwrap_or_default())
    }

    /// The newest event of `kind` whose payload has `field` (top level) equal to `value`.
    pub fn newest_with_field(&self, kind: &str, field: &str, value: &str) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id FROM events WHERE kind = ?1 AND json_extract(payload, ?2) = ?3 ORDER BY id DESC LIMIT 1",
                params![kind, format!("$.{field}"), value],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// The oldest event about `subject` of `kind` recorded by `stage` whose payload has
    /// `field` (top level) equal to `value`.
    pub fn oldest_with_field(
        &self,
        subject: &str,
        kind: &str,
        stage: &str,
        field: &str,
        value: &str,
    ) -> Result<Option<i64>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id FROM events WHERE subject = ?1 AND kind = ?2 AND stage = ?3
                 AND json_extract(payload, ?4) = ?5 ORDER BY id LIMIT 1",
                params![subject, kind, stage, format!("$.{field}"), value],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Per stage, its latest finished run that asked a model (an exchange not answered from
    /// the cache): when it started (its first record) and ended, how many live exchanges
    /// each role made and how many the cache answered. What a stage took last time is the
    /// forecast `check` and `run` give beside their bounds.
    pub fn last_model_runs(&self) -> Result<BTreeMap<String, ModelRun>> {
        let mut stmt = self.conn.prepare(
            "SELECT r.stage, r.id, r.started_at, r.finished_at, json_extract(e.payload, '$.role'),
                    SUM(json_extract(e.payload, '$.cached') IS NOT 1), SUM(json_extract(e.payload, '$.cached') IS 1)
             FROM runs r JOIN events e ON e.run_id = r.id
             WHERE r.status = 'ok' AND r.finished_at IS NOT NULL AND e.kind = ?1
             GROUP BY r.id, json_extract(e.payload, '$.role') ORDER BY r.id",
        )?;
        let rows = stmt.query_map([kind::LLM_EXCHANGE], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<String>>(4)?,
                [r.get::<_, i64>(5)?, r.get::<_, i64>(6)?],
            ))
        })?;
        let mut out: BTreeMap<String, ModelRun> = BTreeMap::new();
        let mut current: Option<(String, ModelRun)> = None;
        // Rows come by run id: a run's rows are together, and a later run of the stage that
        // asked a model replaces the one before.
        let mut close = |run: Option<(String, ModelRun)>| {
            if let Some((stage, run)) = run.filter(|(_, r)| r.exchanges.values().any(|n| *n > 0)) {
                out.insert(stage, run);
            }
        };
        for row in rows {
            let (stage, id, started_at, finished_at, role, [live, cached]) = row?;
            if current.as_ref().is_none_or(|(_, r)| r.id != id) {
                close(current.take());
                let run = ModelRun { id, started_at, finished_at, ..ModelRun::default() };
                current = Some((stage, run));
            }
            if let Some((_, run)) = current.as_mut() {
                let role = role.unwrap_or_else(|| "?".into());
                if live > 0 {
                    run.exchanges.insert(role.clone(), live as u64);
                }
                if cached > 0 {
                    run.cached.insert(role, cached as u64);
                }
            }
        }
        close(current);
        Ok(out)
    }

    /// Every event of these kinds, oldest first, without parents (for scans over many events).
    pub fn rows_of_kinds(&self, kinds: &[&str]) -> Result<Vec<EventRow>> {
        self.rows_of_kinds_in(kinds, None)
    }

    /// [`Self::rows_of_kinds`] recorded by one run (the index on run and kind finds them).
    pub fn rows_of_kinds_in_run(&self, kinds: &[&str], run_id: i64) -> Result<Vec<EventRow>> {
        self.rows_of_kinds_where(kinds, Some(("run_id", rusqlite::types::Value::Integer(run_id))))
    }

    /// [`Self::rows_of_kinds`] of one stage (`None`: every stage), filtered by the database
    /// rather than after reading every payload.
    pub fn rows_of_kinds_in(&self, kinds: &[&str], stage: Option<&str>) -> Result<Vec<EventRow>> {
        self.rows_of_kinds_where(kinds, stage.map(|s| ("stage", rusqlite::types::Value::Text(s.to_string()))))
    }

    /// Events of these kinds whose `column` (a name of ours, never user input: it is spliced
    /// into the statement) holds the value.
    fn rows_of_kinds_where(
        &self,
        kinds: &[&str],
        filter: Option<(&'static str, rusqlite::types::Value)>,
    ) -> Result<Vec<EventRow>> {
        let marks = vec!["?"; kinds.len()].join(", ");
        let (clause, value) = match filter {
            Some((column, value)) => (format!(" AND {column} = ?"), Some(value)),
            None => (String::new(), None),
        };
        let mut stmt = self.conn.prepare(&format!(
            "SELECT kind, stage, subject, payload, time FROM events WHERE kind IN ({marks}){clause} ORDER BY id"
        ))?;
        let params = kinds.iter().map(|k| rusqlite::types::Value::Text(k.to_string())).chain(value);
        let rows = stmt.query_map(rusqlite::params_from_iter(params), event_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Subject → ids (oldest first) of the events of `kind` recorded by `runs`: what a stage
    /// links its own events to (the filter decision of each tool, the EFS set of each member).
    pub fn ids_by_subject(&self, kind: &str, runs: &[i64]) -> Result<BTreeMap<String, Vec<i64>>> {
        let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT subject, id FROM events WHERE run_id = ?1 AND kind = ?2 AND subject IS NOT NULL ORDER BY id",
        )?;
        for run in runs {
            let rows = stmt.query_map(params![run, kind], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
            for row in rows {
                let (subject, id) = row?;
                out.entry(subject).or_default().push(id);
            }
        }
        Ok(out)
    }

    /// [`Self::ids_by_subject`] in the ledger of an artifacts folder (empty without one),
    /// for the run of `stage` behind its current artifacts (`run`: its manifest's).
    pub fn ids_by_subject_in(artifacts: &Path, kind: &str, run: Option<i64>) -> Result<BTreeMap<String, Vec<i64>>> {
        match (Ledger::open_read_only(artifacts)?, run) {
            (Some(l), Some(run)) => l.ids_by_subject(kind, &[run]),
            _ => Ok(BTreeMap::new()),
        }
    }

    /// Ids of the events about any of `subjects` recorded by `runs`, oldest first.
    pub fn event_ids_about(&self, subjects: &[&str], runs: &[i64]) -> Result<Vec<i64>> {
        if runs.is_empty() || subjects.is_empty() {
            return Ok(Vec::new());
        }
        let marks = vec!["?"; subjects.len()].join(", ");
        let runs = runs.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT id FROM events WHERE subject IN ({marks}) AND run_id IN ({runs}) ORDER BY id"
        ))?;
        let rows = stmt.query_map(rusqlite::params_from_iter(subjects), |r| r.get::<_, i64>(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// One event's kind, stage, subject and raw payload, and its parents in id order.
    pub fn event_row(&self, id: i64) -> Result<Option<(EventRow, Vec<i64>)>> {
        let row = self
            .conn
            .prepare_cached("SELECT kind, stage, subject, payload, time FROM events WHERE id = ?1")?
            .query_row(params![id], event_row)
            .optional()?;
        let Some(row) = row else { return Ok(None) };
        let parents = self
            .conn
            .prepare_cached("SELECT parent_id FROM event_parents WHERE event_id = ?1 ORDER BY parent_id")?
            .query_map(params![id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(Some((row, parents)))
    }

    /// Direct access for stages with their own tables (e.g. the LLM cache).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}

/// A ledger connection bound to one stage run and shareable between tasks, for
/// stages that record events as they happen (LLM exchanges, MCP calls) rather
/// than at commit.
pub struct RunRecorder {
    ledger: std::sync::Mutex<Ledger>,
    run_id: i64,
    stage: String,
}

impl RunRecorder {
    pub fn open(artifacts: &Path, run_id: i64, stage: &str) -> Result<Self> {
        Ok(Self { ledger: std::sync::Mutex::new(Ledger::open(artifacts)?), run_id, stage: stage.to_string() })
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        // Every write is one statement or one transaction, so a panic while the
        // lock was held cannot leave the connection inconsistent: ignore poisoning.
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Append one event to the run; returns its id.
    pub fn record(&self, ev: NewEvent) -> Result<i64> {
        let ids = self.lock().append(self.run_id, &self.stage, std::slice::from_ref(&ev))?;
        Ok(ids[0])
    }

    /// Several writes in one transaction, one commit for them all: `f` appends events of
    /// the run with [`Group::record_text`] and writes other tables on [`Group::connection`];
    /// all or nothing. A batch job's answers are recorded so: a commit per exchange made
    /// recording them the slowest part of a batch.
    pub fn group<T>(&self, f: impl FnOnce(&Group<'_>) -> Result<T>) -> Result<T> {
        let mut l = self.lock();
        let path = l.path.clone();
        (|| {
            let tx = l.conn.transaction()?;
            let out = f(&Group { conn: &tx, run_id: self.run_id, stage: &self.stage, time: now() })?;
            tx.commit()?;
            Ok(out)
        })()
        .map_err(|e| full(&path, e))
    }
}

/// The writes of one transaction of a [`RunRecorder`] ([`RunRecorder::group`]).
pub struct Group<'a> {
    conn: &'a Connection,
    run_id: i64,
    stage: &'a str,
    /// The time of every event of the group.
    time: String,
}

impl Group<'_> {
    /// Append an event whose payload is JSON text already (an object, as a [`NewEvent`]'s
    /// payload serialises), with its parents; returns its id.
    pub fn record_text(&self, kind: &str, subject: &str, payload: &str, parents: &[i64]) -> Result<i64> {
        insert_event(self.conn, (self.run_id, self.stage, self.time.as_str()), (kind, Some(subject), payload), parents)
    }

    /// The transaction's connection, for the rows of other tables written with the events.
    pub fn connection(&self) -> &Connection {
        self.conn
    }

    /// The time of the group's events, for the rows written with them.
    pub fn time(&self) -> &str {
        &self.time
    }
}

/// SQLite's "database or disk is full" as a [`crate::error::DiskFull`] naming the ledger
/// file; other errors unchanged.
fn full(path: &Path, e: anyhow::Error) -> anyhow::Error {
    match e.chain().find_map(|c| c.downcast_ref::<rusqlite::Error>()) {
        Some(s) if crate::error::is_disk_full_sqlite(s) => crate::error::disk_full(path, s),
        _ => e,
    }
}

fn insert_run(conn: &Connection, stage: &str, config_hash: &str, code_version: &str) -> Result<i64> {
    conn.execute(
        "INSERT INTO runs(stage, started_at, status, config_hash, code_version) VALUES (?1, ?2, 'running', ?3, ?4)",
        params![stage, now(), config_hash, code_version],
    )?;
    Ok(conn.last_insert_rowid())
}

fn update_run(conn: &Connection, run_id: i64, status: &str) -> Result<()> {
    conn.execute("UPDATE runs SET finished_at = ?1, status = ?2 WHERE id = ?3", params![now(), status, run_id])?;
    Ok(())
}

fn insert_events(conn: &Connection, run_id: i64, stage: &str, events: &[NewEvent]) -> Result<Vec<i64>> {
    let mut ids = Vec::with_capacity(events.len());
    let time = now();
    for ev in events {
        let mut parents = Vec::with_capacity(ev.parents.len());
        for p in &ev.parents {
            parents.push(match *p {
                Parent::Id(i) => i,
                Parent::Batch(i) => {
                    *ids.get(i).with_context(|| format!("event parent refers to batch item {i}, which comes later"))?
                }
            });
        }
        let payload = ev.payload.to_string();
        let ev = (ev.kind.as_str(), ev.subject.as_deref(), payload.as_str());
        ids.push(insert_event(conn, (run_id, stage, time.as_str()), ev, &parents)?);
    }
    Ok(ids)
}

/// Insert one event (`run`: run id, stage and time; `ev`: kind, subject and payload text)
/// and its parent edges; returns its id. The statements are prepared once per connection.
fn insert_event(
    conn: &Connection,
    run: (i64, &str, &str),
    ev: (&str, Option<&str>, &str),
    parents: &[i64],
) -> Result<i64> {
    let ((run_id, stage, time), (kind, subject, payload)) = (run, ev);
    let mut ins = conn.prepare_cached(
        "INSERT INTO events(run_id, kind, stage, subject, time, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    ins.execute(params![run_id, kind, stage, subject, time, payload])?;
    let id = conn.last_insert_rowid();
    let mut par = conn.prepare_cached("INSERT OR IGNORE INTO event_parents(event_id, parent_id) VALUES (?1, ?2)")?;
    for parent in parents {
        par.execute(params![id, parent])?;
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_and_subject_queries_find_what_they_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path()).unwrap();
        let ev = |kind: &str, subject: &str, v: &str| NewEvent::new(kind, Some(subject), json!({"k": v}));
        let (run, ids) = l
            .record_run("s", "c", "v", &[ev("a", "x", "1"), ev("a", "y", "1"), ev("b", "x", "1"), ev("a", "x", "2")])
            .unwrap();
        assert_eq!(l.newest_with_field("a", "k", "1").unwrap(), Some(ids[1]));
        assert_eq!(l.newest_with_field("a", "k", "3").unwrap(), None);
        assert_eq!(l.oldest_with_field("x", "a", "s", "k", "1").unwrap(), Some(ids[0]));
        assert_eq!(l.oldest_with_field("x", "a", "other", "k", "1").unwrap(), None);
        let kinds: Vec<String> = l.rows_of_kinds(&["b", "a"]).unwrap().into_iter().map(|r| r.kind).collect();
        assert_eq!(kinds, ["a", "a", "b", "a"]);
        assert_eq!(l.event_ids_about(&["y", "x"], &[run]).unwrap(), ids);
        assert_eq!(l.event_ids_about(&["y"], &[run + 1]).unwrap(), Vec::<i64>::new());
        let (row, parents) = l.event_row(ids[2]).unwrap().unwrap();
        assert_eq!((row.kind.as_str(), row.subject.as_deref(), parents.len()), ("b", Some("x"), 0));
        assert_eq!(serde_json::from_str::<Value>(&row.payload).unwrap(), json!({"k": "1"}));
    }

    #[test]
    fn a_stage_s_last_model_run_is_its_latest_finished_run_that_asked_a_model() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path()).unwrap();
        let ask = |role: &str, cached: bool| {
            NewEvent::new(kind::LLM_EXCHANGE, Some("i"), json!({"role": role, "cached": cached}))
        };
        let (first, _) = l.record_run("s", "c", "v", &[ask("a", false), ask("a", false), ask("b", false)]).unwrap();
        // A later run answered from the cache alone, and one that failed, ask no model.
        let (cached_only, _) = l.record_run("s", "c", "v", &[ask("a", true)]).unwrap();
        let failed = l.begin_run("s", "c", "v").unwrap();
        l.append(failed, "s", &[ask("a", false)]).unwrap();
        l.finish_run(failed, "failed").unwrap();
        l.record_run("t", "c", "v", &[NewEvent::new("other", None, json!({}))]).unwrap();
        let runs = l.last_model_runs().unwrap();
        assert_eq!(runs.keys().collect::<Vec<_>>(), ["s"], "{runs:?}");
        let s = &runs["s"];
        assert_eq!(s.id, first);
        assert_eq!(s.exchanges, BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 1)]));
        assert!(s.seconds() >= 0.0 && s.seconds() < 60.0, "{s:?}");
        assert!(s.cached.is_empty() && cached_only > first, "{s:?}");
        // A newer run that asks replaces it, with its own roles only, and says what the
        // cache answered (an unnamed role is `?`).
        let no_role = NewEvent::new(kind::LLM_EXCHANGE, None, json!({"cached": false}));
        let (newer, _) = l.record_run("s", "c", "v", &[ask("b", false), ask("a", true), no_role]).unwrap();
        let s = &l.last_model_runs().unwrap()["s"];
        assert_eq!(s.id, newer);
        assert_eq!(s.exchanges, BTreeMap::from([("?".to_string(), 1), ("b".to_string(), 1)]));
        assert_eq!(s.cached, BTreeMap::from([("a".to_string(), 1)]));
        // A run still going (or killed) is not a last run.
        let running = l.begin_run("s", "c", "v").unwrap();
        l.append(running, "s", &[ask("b", false)]).unwrap();
        assert_eq!(l.last_model_runs().unwrap()["s"].id, newer);
        let timed = ModelRun {
            started_at: "2026-12-07T17:09:24.5Z".into(),
            finished_at: "2026-12-07T17:13:23.7Z".into(),
            ..ModelRun::default()
        };
        assert_eq!(timed.seconds(), 239.2);
    }

    #[test]
    fn a_call_is_found_by_its_hash_and_the_ledger_knows_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path()).unwrap();
        let call = |h: &str| NewEvent::new(kind::MCP_CALL, Some("s::t"), json!({"call_hash": h}));
        let other = NewEvent::new(kind::LLM_EXCHANGE, Some("i"), json!({"call_hash": "h1"}));
        let (_, ids) = l.record_run("execute", "c", "v", &[call("h1"), call("h2"), call("h1"), other]).unwrap();
        assert_eq!(l.call_event("h1").unwrap(), Some(ids[2]), "the newest call with the hash");
        assert_eq!(l.call_event("h3").unwrap(), None);
        assert_eq!(l.artifacts(), dir.path());
    }

    #[test]
    fn exchange_lookup_by_hash_uses_the_index_and_finds_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path()).unwrap();
        let ex = |h: &str| {
            NewEvent::new(crate::ledger::kind::LLM_EXCHANGE, Some("i"), serde_json::json!({"request_hash": h}))
        };
        let (_, ids) = l
            .record_run(
                "s",
                "c",
                "v",
                &[ex("h1"), NewEvent::new("other", None, serde_json::json!("x")), ex("h2"), ex("h1")],
            )
            .unwrap();
        assert_eq!(l.exchange_event("h1").unwrap(), Some(ids[3]));
        assert_eq!(l.exchange_event("h2").unwrap(), Some(ids[2]));
        assert_eq!(l.exchange_event("h3").unwrap(), None);
        let plan: Vec<String> = l
            .connection()
            .prepare(&format!(
                "EXPLAIN QUERY PLAN SELECT id FROM events WHERE kind = '{}' AND json_extract(payload, '$.request_hash') = ?1 ORDER BY id DESC LIMIT 1",
                crate::ledger::kind::LLM_EXCHANGE
            ))
            .unwrap()
            .query_map(["h1"], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(plan.iter().any(|p| p.contains("events_exchange_hash")), "{plan:?}");
    }

    /// Eval's tokens per request: the oldest exchange of the role, zeros without one, and an
    /// error, not zeros, for a payload it cannot read (zeros would pass for a free exchange).
    #[test]
    fn exchange_usage_reads_the_oldest_of_the_role_and_fails_on_what_it_cannot_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path()).unwrap();
        let ex = |h: &str, prompt: Value| {
            let usage = json!({"prompt_tokens": prompt, "completion_tokens": 2});
            let payload = json!({"request_hash": h, "role": "a", "usage": usage, "latency_ms": 7});
            NewEvent::new(kind::LLM_EXCHANGE, Some("i"), payload)
        };
        let mut cut = ex("h4", json!(5));
        cut.payload["response"] = json!({"choices": [{"finish_reason": "length"}]});
        let mut stopped = ex("h5", json!(5));
        stopped.payload["response"] = json!({"choices": [{"finish_reason": "stop"}]});
        l.record_run("s", "c", "v", &[ex("h1", json!(10)), ex("h1", json!(99)), ex("h2", json!("many")), cut, stopped])
            .unwrap();
        // A cache hit of `h4` by role `b` records no response: the cut is the source's.
        let h4 = l.newest_with_field(kind::LLM_EXCHANGE, "request_hash", "h4").unwrap().unwrap();
        let mut hit = ex("h4", json!(5));
        hit.payload["role"] = json!("b");
        hit.payload["source_event"] = json!(h4);
        l.record_run("s", "c", "v", &[hit]).unwrap();
        let usage = |p, c, ms, cut| ExchangeUsage { prompt_tokens: p, completion_tokens: c, latency_ms: ms, cut };
        assert_eq!(l.exchange_usage("h1", "a").unwrap(), usage(10, 2, 7.0, false));
        assert_eq!(l.exchange_usage("h1", "b").unwrap(), usage(0, 0, 0.0, false));
        assert_eq!(l.exchange_usage("h3", "a").unwrap(), usage(0, 0, 0.0, false));
        assert_eq!(l.exchange_usage("h4", "a").unwrap(), usage(5, 2, 7.0, true));
        assert_eq!(l.exchange_usage("h5", "a").unwrap(), usage(5, 2, 7.0, false));
        assert_eq!(l.exchange_usage("h4", "b").unwrap(), usage(5, 2, 7.0, true));
        assert!(l.exchange_usage("h2", "a").is_err(), "a token count that is not a number is an error");
    }

    #[test]
    fn records_runs_events_and_lineage() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path()).unwrap();
        let (run, ids) = l
            .record_run(
                "catalog",
                "sha256:c",
                "0.1.0",
                &[
                    NewEvent::new(kind::INPUT_READ, Some("file.json"), json!({"sha256": "x"})),
                    NewEvent::new(kind::CATALOG_TOOL, Some("s::t"), json!({})).with_parent(Parent::Batch(0)),
                ],
            )
            .unwrap();
        let (_, ids2) = l
            .record_run(
                "filter",
                "sha256:f",
                "0.1.0",
                &[NewEvent::new(kind::FILTER_DECISION, Some("s::t"), json!({"verdict": "keep"}))
                    .with_parent(Parent::Id(ids[1]))],
            )
            .unwrap();
        let lineage = l.lineage(&ids2).unwrap();
        assert_eq!(
            lineage.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
            ["input.read", "catalog.tool", "filter.decision"]
        );
        assert_eq!(l.events_for("s::t", &[run]).unwrap().len(), 1);
        assert_eq!(l.run(run).unwrap().unwrap().status, "ok");
    }

    /// A group writes the rows `record` writes, its events' payloads given as text, in one
    /// transaction: an error in it leaves nothing.
    #[test]
    fn a_group_writes_what_record_writes_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let run = Ledger::open(dir.path()).unwrap().begin_run("s", "c", "v").unwrap();
        let rec = RunRecorder::open(dir.path(), run, "s").unwrap();
        let payload = json!({"request_hash": "h", "text": "ü \"q\"", "n": 1.5});
        let one = rec.record(NewEvent::new(kind::LLM_EXCHANGE, Some("i"), payload.clone())).unwrap();
        let ids = rec
            .group(|g| {
                let a = g.record_text(kind::LLM_EXCHANGE, "i", &payload.to_string(), &[])?;
                let b = g.record_text(kind::LLM_EXCHANGE, "j", &payload.to_string(), &[one, a])?;
                Ok([a, b])
            })
            .unwrap();
        let l = rec.lock();
        // Their recording times differ.
        let untimed = |r: EventRow| EventRow { time: String::new(), ..r };
        let (first, _) = l.event_row(one).unwrap().unwrap();
        let (second, parents) = l.event_row(ids[0]).unwrap().unwrap();
        assert!(!first.time.is_empty() && !second.time.is_empty());
        assert_eq!((untimed(first), parents.len()), (untimed(second), 0), "the same kind, stage, subject and payload");
        let (third, parents) = l.event_row(ids[1]).unwrap().unwrap();
        assert_eq!((third.subject.as_deref(), parents), (Some("j"), vec![one, ids[0]]));
        assert_eq!(l.exchange_event("h").unwrap(), Some(ids[1]), "found by its request hash");
        drop(l);
        let failed: Result<()> = rec.group(|g| {
            g.record_text("k", "x", "{}", &[])?;
            anyhow::bail!("stop")
        });
        assert!(failed.is_err());
        assert_eq!(rec.lock().count_by_kind().unwrap().get("k"), None, "nothing of a failed group is kept");
    }

    #[test]
    fn events_cannot_be_changed_or_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path()).unwrap();
        l.record_run("s", "c", "v", &[NewEvent::new("k", None, json!(1))]).unwrap();
        let c = l.connection();
        assert!(c.execute("UPDATE events SET kind = 'x'", []).is_err());
        assert!(c.execute("DELETE FROM events", []).is_err());
        assert!(c.execute("UPDATE runs SET status = 'x'", []).is_err());
    }

    #[test]
    fn forward_batch_parent_is_rejected_and_nothing_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path()).unwrap();
        let bad = NewEvent::new("k", None, json!(1)).with_parent(Parent::Batch(5));
        assert!(l.record_run("s", "c", "v", &[bad]).is_err());
        assert!(l.count_by_kind().unwrap().is_empty());
        assert!(l.run(1).unwrap().is_none());
    }
}
