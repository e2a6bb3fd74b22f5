//! The review web app's storage: the SQLite schema, score and adjudication rows, and the
//! outbox that carries each submission's ledger event into the ledger exactly once; `dump`
//! writes the submissions out to `reviews/web/` for the pipeline. Kept out of `serve` so
//! that `review import` and `review merge`, which dump before they read, depend on the
//! storage and not on the server (issue 41), and the server on the storage.

use crate::ledger::NewEvent;
use crate::review;
use crate::settings::Settings;
use anyhow::Context;
use anyhow::Result;
use rusqlite::Connection;
use rusqlite::OptionalExtension;
use rusqlite::params;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

// Adjudications are kept as revisions (`adjudication_revisions`), every one of them; the
// latest counts. `adjudications` (one row per sample, replaced on a second decision) is
// what databases of earlier versions hold: its rows become revision 1 on opening.
const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS scores(
    sample_id TEXT NOT NULL, reviewer TEXT NOT NULL, content_hash TEXT NOT NULL,
    scores TEXT NOT NULL, note TEXT NOT NULL, status TEXT NOT NULL,
    updated_at TEXT NOT NULL, submitted_at TEXT,
    PRIMARY KEY(sample_id, reviewer));
CREATE TABLE IF NOT EXISTS adjudications(
    sample_id TEXT PRIMARY KEY, content_hash TEXT NOT NULL, decision TEXT NOT NULL,
    adjudicator TEXT NOT NULL, reason TEXT NOT NULL, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions(
    id_hash TEXT PRIMARY KEY, reviewer TEXT NOT NULL, csrf TEXT NOT NULL, expires_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS outbox(
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, subject TEXT NOT NULL,
    payload TEXT NOT NULL, created_at TEXT NOT NULL, ledger_event INTEGER);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox(id) WHERE ledger_event IS NULL;
CREATE TABLE IF NOT EXISTS spent_links(
    code_hash TEXT PRIMARY KEY, reviewer TEXT NOT NULL, spent_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS adjudication_revisions(
    sample_id TEXT NOT NULL, revision INTEGER NOT NULL, content_hash TEXT NOT NULL, decision TEXT NOT NULL,
    adjudicator TEXT NOT NULL, reason TEXT NOT NULL, at TEXT NOT NULL,
    PRIMARY KEY(sample_id, revision));
INSERT INTO adjudication_revisions(sample_id, revision, content_hash, decision, adjudicator, reason, at)
    SELECT sample_id, 1, content_hash, decision, adjudicator, reason, at FROM adjudications a
    WHERE NOT EXISTS (SELECT 1 FROM adjudication_revisions r WHERE r.sample_id = a.sample_id);
"#;

/// The ledger stage name of the web app's events.
pub const LEDGER_STAGE: &str = "review-serve";

/// `reviews/web/`: what the web app collected, as files the pipeline reads.
pub fn web_dir(s: &Settings) -> PathBuf {
    s.root.join("reviews").join("web")
}

/// The app's database (`[review.serve] db`).
pub fn db_path(s: &Settings) -> PathBuf {
    s.resolve(&review::settings(s).serve.db)
}

/// A submission of the web app as dumped to `reviews/web/scores.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WebScore {
    pub sample_id: String,
    pub reviewer: String,
    pub content_hash: String,
    pub scores: BTreeMap<String, u8>,
    #[serde(default)]
    pub note: String,
    pub submitted_at: String,
}

/// An adjudication as the web app dumps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WebAdjudication {
    pub sample_id: String,
    pub content_hash: String,
    pub decision: String,
    pub adjudicator: String,
    pub reason: String,
    pub at: String,
    /// 1 for the first decision on a sample, then 2, 3, …: every revision is dumped and
    /// the highest counts (dumps of earlier versions have one line per sample, no field).
    #[serde(default = "one")]
    pub revision: u32,
}

fn one() -> u32 {
    1
}

/// 32 random bytes from the OS, hex: outbox keys here, session ids and CSRF tokens in
/// the server.
pub(super) fn random_hex() -> String {
    use rand::TryRngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng.try_fill_bytes(&mut b).expect("the OS random source");
    hex::encode(b)
}

/// Queue a ledger event in the app database, inside the caller's transaction: it commits
/// (or not) together with the score or adjudication it describes. [`drain_outbox`] moves
/// it into the ledger later. The payload gets an `outbox` key that finds the event again.
pub(super) fn enqueue(
    tx: &rusqlite::Transaction<'_>,
    kind: &str,
    sample_id: &str,
    mut payload: serde_json::Value,
) -> rusqlite::Result<()> {
    let key = format!("{LEDGER_STAGE}:{}", &random_hex()[..32]);
    payload["outbox"] = json!(key);
    tx.execute(
        "INSERT INTO outbox(key, kind, subject, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![key, kind, crate::model::Sample::subject_for(sample_id), payload.to_string(), crate::ledger::now()],
    )?;
    Ok(())
}

/// Move every pending outbox entry into the ledger, exactly once, oldest first; returns
/// how many events were appended. `run`: the serving run to append to, or `None` to
/// record them as a run of their own (`review import` / `review merge` after the server
/// was killed).
///
/// Exactly once: drains are serialised by the app database's write lock (held from the
/// first read to the commit, across processes too); an entry whose event is already in
/// the ledger (a drain killed after the ledger write, before marking the entry) is found
/// by its key and only marked, never appended again.
pub fn drain_outbox(c: &mut Connection, ledger: &mut crate::ledger::Ledger, run: Option<i64>) -> Result<usize> {
    let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let pending: Vec<(i64, String, String, String, String)> = {
        let mut st =
            tx.prepare("SELECT id, key, kind, subject, payload FROM outbox WHERE ledger_event IS NULL ORDER BY id")?;
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    if pending.is_empty() {
        return Ok(0);
    }
    crate::store::fail_point("review-outbox-before-ledger")?;
    let mut recorded: Vec<Option<i64>> = Vec::with_capacity(pending.len());
    for (_, key, kind, subject, _) in &pending {
        recorded.push(ledger.oldest_with_field(subject, kind, LEDGER_STAGE, "outbox", key)?);
    }
    let fresh: Vec<usize> = (0..pending.len()).filter(|i| recorded[*i].is_none()).collect();
    let events = fresh
        .iter()
        .map(|i| {
            let (_, _, kind, subject, payload) = &pending[*i];
            Ok(NewEvent::new(kind, Some(subject), serde_json::from_str(payload)?))
        })
        .collect::<Result<Vec<_>>>()?;
    if !events.is_empty() {
        let ids = match run {
            Some(run) => ledger.append(run, LEDGER_STAGE, &events)?,
            None => ledger.record_run(LEDGER_STAGE, "outbox", crate::stage::CODE_VERSION, &events)?.1,
        };
        for (i, id) in fresh.iter().zip(ids) {
            recorded[*i] = Some(id);
        }
    }
    crate::store::fail_point("review-outbox-recorded")?;
    for ((id, ..), ev) in pending.iter().zip(&recorded) {
        tx.execute("UPDATE outbox SET ledger_event = ?1 WHERE id = ?2", params![ev, id])?;
    }
    tx.commit()?;
    Ok(events.len())
}

/// Entries of the outbox not yet in the ledger.
pub fn outbox_pending(c: &Connection) -> rusqlite::Result<i64> {
    c.query_row("SELECT count(*) FROM outbox WHERE ledger_event IS NULL", [], |r| r.get(0))
}

/// Open (creating) the app database in WAL mode.
pub fn open_db(path: &Path) -> Result<Connection> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).with_context(|| format!("cannot create `{}`", p.display()))?;
    }
    let c = Connection::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: a submission acknowledged to the browser survives power loss too, not only a kill.
    c.pragma_update(None, "synchronous", "FULL")?;
    c.busy_timeout(Duration::from_secs(30))?;
    c.execute_batch(SCHEMA).with_context(|| format!("cannot initialise `{}`", path.display()))?;
    Ok(c)
}

/// Before `review import` / `review merge`: move what a killed server left in the
/// outbox into the ledger ([`drain_outbox`]), then rewrite `reviews/web/scores.jsonl` and
/// `adjudications.jsonl` from the database (submitted scores only, sorted), when it
/// exists. Returns (scores, adjudications).
pub fn dump(s: &Settings) -> Result<Option<(usize, usize)>> {
    let p = db_path(s);
    if !p.exists() {
        return Ok(None);
    }
    let mut c = open_db(&p)?;
    if outbox_pending(&c)? > 0 {
        let mut ledger = crate::ledger::Ledger::open(&s.artifacts)?;
        drain_outbox(&mut c, &mut ledger, None).with_context(|| {
            format!("cannot move the web app's pending review events into `{}`", ledger.path().display())
        })?;
    }
    dump_from(&c, &web_dir(s)).map(Some)
}

pub(super) fn dump_from(c: &Connection, dir: &Path) -> Result<(usize, usize)> {
    let mut st = c.prepare(
        "SELECT sample_id, reviewer, content_hash, scores, note, submitted_at FROM scores
         WHERE status = 'submitted' ORDER BY sample_id, reviewer",
    )?;
    let scores: Vec<WebScore> = st
        .query_map([], |r| {
            Ok(WebScore {
                sample_id: r.get(0)?,
                reviewer: r.get(1)?,
                content_hash: r.get(2)?,
                scores: serde_json::from_str(&r.get::<_, String>(3)?).unwrap_or_default(),
                note: r.get(4)?,
                submitted_at: r.get::<_, Option<String>>(5)?.unwrap_or_default(),
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut st = c.prepare(
        "SELECT sample_id, content_hash, decision, adjudicator, reason, at, revision FROM adjudication_revisions
         ORDER BY sample_id, revision",
    )?;
    let adj: Vec<WebAdjudication> = st.query_map([], adjudication_row)?.collect::<rusqlite::Result<_>>()?;
    write_if_changed(&dir.join("scores.jsonl"), &review::to_jsonl(&scores)?)?;
    write_if_changed(&dir.join("adjudications.jsonl"), &review::to_jsonl(&adj)?)?;
    Ok((scores.len(), adj.len()))
}

fn write_if_changed(p: &Path, bytes: &[u8]) -> Result<()> {
    if std::fs::read(p).ok().as_deref() == Some(bytes) {
        return Ok(());
    }
    if bytes.is_empty() && !p.exists() {
        return Ok(());
    }
    crate::store::write_atomic(p, bytes)
}

/// A score row as stored.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) content_hash: String,
    pub(super) scores: BTreeMap<String, u8>,
    pub(super) note: String,
    pub(super) submitted: bool,
}

pub(super) fn row(c: &Connection, id: &str, reviewer: &str) -> rusqlite::Result<Option<Row>> {
    c.query_row(
        "SELECT content_hash, scores, note, status FROM scores WHERE sample_id = ?1 AND reviewer = ?2",
        params![id, reviewer],
        |r| {
            Ok(Row {
                content_hash: r.get(0)?,
                scores: serde_json::from_str(&r.get::<_, String>(1)?).unwrap_or_default(),
                note: r.get(2)?,
                submitted: r.get::<_, String>(3)? == "submitted",
            })
        },
    )
    .optional()
}

/// Every web adjudication of a sample, oldest revision first.
pub(super) fn adjudication_revisions(c: &Connection, id: &str) -> rusqlite::Result<Vec<WebAdjudication>> {
    let mut st = c.prepare(
        "SELECT sample_id, content_hash, decision, adjudicator, reason, at, revision FROM adjudication_revisions
         WHERE sample_id = ?1 ORDER BY revision",
    )?;
    st.query_map(params![id], adjudication_row)?.collect()
}

/// One `adjudication_revisions` row selected as `sample_id, content_hash, decision,
/// adjudicator, reason, at, revision` (the column order both queries use).
fn adjudication_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<WebAdjudication> {
    Ok(WebAdjudication {
        sample_id: r.get(0)?,
        content_hash: r.get(1)?,
        decision: r.get(2)?,
        adjudicator: r.get(3)?,
        reason: r.get(4)?,
        at: r.get(5)?,
        revision: r.get(6)?,
    })
}
