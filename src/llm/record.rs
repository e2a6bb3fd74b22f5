//! The ledger as the LLM cache. Exchanges are appended as `llm.exchange` events as they
//! happen (not at stage commit), so an interrupted stage keeps what it paid for. The
//! `llm_cache(key, event_id, created_at)` table maps the sha256 of a canonical request body
//! to the newest live exchange that answered it; a lookup reads that event's `response`.
//! The batch jobs of `mode = "batch"` roles keep their tables beside it (`batch_api`).

use std::path::Path;

use anyhow::{Context, Result};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use crate::ledger::{Group, Ledger, NewEvent, Parent, RunRecorder};

const CACHE_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS llm_cache(
    key TEXT PRIMARY KEY,
    event_id INTEGER NOT NULL REFERENCES events(id),
    created_at TEXT NOT NULL
)";

/// The run's recorder plus the cache table.
pub struct Recorder {
    run: RunRecorder,
}

impl Recorder {
    pub fn open(artifacts: &Path, run_id: i64, stage: &str) -> Result<Self> {
        let run = RunRecorder::open(artifacts, run_id, stage)?;
        run.lock().connection().execute(CACHE_SCHEMA, []).context("cannot create the LLM cache table")?;
        Ok(Self { run })
    }

    /// The ledger, for the batch tables of [`super::batch_api`].
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.run.lock()
    }

    /// The event that answered `key` and its payload.
    pub fn lookup(&self, key: &str) -> Result<Option<(i64, Value)>> {
        let l = self.lock();
        let id: Option<i64> = l
            .connection()
            .prepare_cached("SELECT event_id FROM llm_cache WHERE key = ?1")?
            .query_row([key], |r| r.get(0))
            .optional()?;
        let Some(id) = id else { return Ok(None) };
        Ok(l.event(id)?.map(|e| (id, e.payload)))
    }

    pub fn record(&self, kind: &str, subject: &str, payload: Value, parents: &[i64]) -> Result<i64> {
        let mut ev = NewEvent::new(kind, Some(subject), payload);
        for p in parents {
            ev = ev.with_parent(Parent::Id(*p));
        }
        self.run.record(ev)
    }

    /// Several writes of the run in one transaction ([`RunRecorder::group`]).
    pub(crate) fn group<T>(&self, f: impl FnOnce(&Group<'_>) -> Result<T>) -> Result<T> {
        self.run.group(f)
    }

    pub fn cache_put(&self, key: &str, event_id: i64) -> Result<()> {
        cache_put_on(self.lock().connection(), key, event_id, &crate::ledger::now())
    }
}

/// Point the cache entry `key` at exchange `event_id`, written at time `at`, on `c` (the
/// ledger, or a transaction of it: [`Recorder::group`]).
pub(crate) fn cache_put_on(c: &Connection, key: &str, event_id: i64, at: &str) -> Result<()> {
    let mut put = c.prepare_cached(
        "INSERT INTO llm_cache(key, event_id, created_at) VALUES (?1, ?2, ?3)
         ON CONFLICT(key) DO UPDATE SET event_id = excluded.event_id, created_at = excluded.created_at",
    )?;
    put.execute(params![key, event_id, at])?;
    Ok(())
}
