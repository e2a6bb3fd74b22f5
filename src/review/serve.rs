//! `benchgen review serve`: the review web app (axum), for reviewers who would rather
//! click than edit spreadsheets.
//!
//! Each reviewer gets from `review assign` (`reviews/links/<id>.txt`) a single-use
//! sign-in link (`http://ADDR/login#link=CODE`) and a personal token to paste; both derive
//! from the review secret, and the server keeps only their SHA-256. The link's code sits
//! in the URL fragment, which browsers never send: the sign-in page's script removes it
//! from the address bar and session history (`history.replaceState`) and POSTs it; the
//! server spends the code and answers with an `HttpOnly; SameSite=Strict` session cookie
//! and a 303 to `/`. The browser's own history database still records the link, but as
//! a spent code; the reusable token is only ever posted, never in a URL. A token or code
//! in a query string is refused. Every request is authorised on the server: no session → 401; a
//! sample not assigned to the reviewer, or another reviewer's scores before both have
//! submitted (blind review) → 403; a write without the session's CSRF token, or from
//! another origin → 403; failed sign-ins are rate-limited per client address (429).
//! Pages carry a strict Content-Security-Policy (no inline script or style) and
//! `Referrer-Policy: no-referrer`. Leads get an adjudication view of disputed samples
//! they did not review; deciding a sample again records a new revision (all kept, the
//! latest counts). The sample page is built by [`super::view`].
//!
//! Scores live in SQLite (`reviews/review.sqlite`, WAL, `synchronous = FULL`): a draft is
//! saved on every change (autosave), a submission is one transaction, and every
//! submission and adjudication is a `review` / `review.adjudication` event in the
//! ledger. The event is queued in the same transaction (table `outbox`) and moved into
//! the ledger by one drainer task, exactly once (see [`drain_outbox`]); what a killed
//! server left queued is moved at its next start or by `review import` / `review merge`.
//! Submissions reach the pipeline through `reviews/web/scores.jsonl` and
//! `reviews/web/adjudications.jsonl`, rewritten every few seconds while serving and by
//! `review import` / `review merge`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Form, Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::Role;
use super::assign::Assignments;
use super::merge::WebAdjudication;
use super::sheets::WebScore;
use crate::ledger::{NewEvent, RunRecorder};
use crate::model::Sample;
use crate::settings::Settings;

/// `[review.serve]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSettings {
    /// Listen address (loopback by default; `--addr` overrides).
    #[serde(default = "default_addr")]
    pub addr: SocketAddr,
    /// The app's database (scores, drafts, sessions).
    #[serde(default = "default_db")]
    pub db: PathBuf,
    /// Failed sign-ins allowed per client address within `login_window_s`.
    #[serde(default = "default_failures")]
    pub max_login_failures: usize,
    #[serde(default = "default_window")]
    pub login_window_s: u64,
    #[serde(default = "default_session_hours")]
    pub session_hours: u64,
}

impl Default for ServeSettings {
    fn default() -> Self {
        Self {
            addr: default_addr(),
            db: default_db(),
            max_login_failures: default_failures(),
            login_window_s: default_window(),
            session_hours: default_session_hours(),
        }
    }
}

fn default_addr() -> SocketAddr {
    "127.0.0.1:8377".parse().expect("address")
}
fn default_db() -> PathBuf {
    PathBuf::from("reviews/review.sqlite")
}
fn default_failures() -> usize {
    5
}
fn default_window() -> u64 {
    60
}
fn default_session_hours() -> u64 {
    12
}

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

/// Queue a ledger event in the app database, inside the caller's transaction: it commits
/// (or not) together with the score or adjudication it describes. [`drain_outbox`] moves
/// it into the ledger later. The payload gets an `outbox` key that finds the event again.
fn enqueue(
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

pub fn db_path(s: &Settings) -> PathBuf {
    s.resolve(&super::settings(s).serve.db)
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
    dump_from(&c, &super::sheets::web_dir(s)).map(Some)
}

fn dump_from(c: &Connection, dir: &Path) -> Result<(usize, usize)> {
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
    write_if_changed(&dir.join("scores.jsonl"), &super::to_jsonl(&scores)?)?;
    write_if_changed(&dir.join("adjudications.jsonl"), &super::to_jsonl(&adj)?)?;
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

/// The running app's shared state.
struct App {
    writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    a: Assignments,
    samples: BTreeMap<String, Sample>,
    /// SHA-256 of each reviewer's token → reviewer id.
    tokens: HashMap<String, String>,
    /// SHA-256 of each reviewer's single-use link code → reviewer id.
    links: HashMap<String, String>,
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
    cfg: ServeSettings,
    result_chars: usize,
    /// Tool descriptions and parameters from the pipeline's catalogs, for the sample pages.
    tools: super::view::Tools,
    ledger: Option<RunRecorder>,
    ledger_run: Option<i64>,
    dirty: AtomicBool,
    /// Woken after a commit that queued ledger events in the outbox.
    outbox: tokio::sync::Notify,
}

impl App {
    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        let i = self.next_reader.fetch_add(1, Ordering::Relaxed) % self.readers.len();
        let c = self.readers[i].lock().unwrap_or_else(|p| p.into_inner());
        f(&c)
    }
    fn write<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> rusqlite::Result<T> {
        let mut c = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut c)
    }
    fn assigned(&self, id: &str, reviewer: &str) -> bool {
        self.a.sample(id).is_some_and(|x| x.reviewers.iter().any(|r| r == reviewer))
    }
    fn is_lead(&self, reviewer: &str) -> bool {
        self.a.reviewer(reviewer).is_some_and(|r| r.role == Role::Lead)
    }
    /// Move the outbox into the serving run's ledger (blocking). Without a ledger the
    /// entries wait for the next start, `review import` or `review merge`.
    fn drain(&self) {
        let (Some(l), Some(run)) = (&self.ledger, self.ledger_run) else { return };
        if let Ok(Err(e)) = self.write(|c| Ok(drain_outbox(c, &mut l.lock(), Some(run)))) {
            tracing::warn!("review events wait in the outbox, not yet in the ledger: {e:#}");
        }
    }
}

/// A score row as stored.
#[derive(Debug, Clone)]
struct Row {
    content_hash: String,
    scores: BTreeMap<String, u8>,
    note: String,
    submitted: bool,
}

fn row(c: &Connection, id: &str, reviewer: &str) -> rusqlite::Result<Option<Row>> {
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

/// Run the app until Ctrl-C; prints `serving http://ADDR` once listening.
pub fn serve(s: &Settings, printer: &crate::printer::Printer, addr: Option<SocketAddr>) -> Result<()> {
    let r = super::settings(s);
    let secret = super::secret(s)?;
    let a: Assignments = serde_json::from_slice(&std::fs::read(super::assign::ASSIGNMENTS.path(s)).map_err(|e| {
        crate::error::hinted(format!("no review assignments: {e}"), "run `benchgen review assign` first")
    })?)
    .context("`artifacts/review-assign/assignments.json` is not valid")?;
    let samples_bytes =
        std::fs::read(super::assign::SAMPLES.path(s)).context("cannot read the samples under review")?;
    let samples: BTreeMap<String, Sample> = super::from_jsonl::<Sample>(&samples_bytes, "review-assign/samples.jsonl")?
        .into_iter()
        .map(|x| (x.id.clone(), x))
        .collect();
    let (mut tokens, mut links) = (HashMap::new(), HashMap::new());
    for e in &a.reviewers {
        let rv = super::Reviewer {
            id: e.id.clone(),
            name: e.name.clone(),
            expertise: vec![],
            capacity: None,
            role: e.role,
            token_version: e.token_version,
        };
        tokens.insert(super::token_hash(&super::token_for(&secret, &rv)), e.id.clone());
        links.insert(super::token_hash(&super::link_code_for(&secret, &rv)), e.id.clone());
    }
    let db = db_path(s);
    let mut writer = open_db(&db)?;
    let readers = (0..4).map(|_| open_db(&db).map(Mutex::new)).collect::<Result<Vec<_>>>()?;
    let (ledger, ledger_run) = match crate::ledger::Ledger::open(&s.artifacts)
        .and_then(|l| l.begin_run("review-serve", "serve", crate::stage::CODE_VERSION))
    {
        Ok(run) => (Some(RunRecorder::open(&s.artifacts, run, "review-serve")?), Some(run)),
        Err(e) => {
            printer.warn(&format!("the ledger cannot be opened ({e:#}); submissions are not recorded there"));
            (None, None)
        }
    };
    if let (Some(l), Some(run)) = (&ledger, ledger_run) {
        // What a killed server committed but had not yet recorded in the ledger.
        let n = drain_outbox(&mut writer, &mut l.lock(), Some(run))
            .context("cannot move pending review events from the app database into the ledger")?;
        if n > 0 {
            printer.info(&format!("{n} review event(s) left by an interrupted server recorded in the ledger"));
        }
    }
    let (tools, warnings) = super::view::load_tools(s);
    for w in warnings {
        printer.warn(&w);
    }
    let cfg = ServeSettings { addr: addr.unwrap_or(r.serve.addr), ..r.serve.clone() };
    if !cfg.addr.ip().is_loopback() {
        printer.warn(&format!("serving on {}, which is not a loopback address: put TLS in front of it", cfg.addr));
    }
    let app = Arc::new(App {
        writer: Mutex::new(writer),
        readers,
        next_reader: AtomicUsize::new(0),
        a,
        samples,
        tokens,
        links,
        failures: Mutex::new(HashMap::new()),
        cfg: cfg.clone(),
        result_chars: r.result_chars,
        tools,
        ledger,
        ledger_run,
        dirty: AtomicBool::new(true),
        outbox: tokio::sync::Notify::new(),
    });
    let web_dir = super::sheets::web_dir(s);
    // Ctrl-C stops serving gracefully (final dump of `reviews/web/`), not the process at once.
    crate::children::set_graceful_interrupt();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener =
            tokio::net::TcpListener::bind(cfg.addr).await.with_context(|| format!("cannot listen on {}", cfg.addr))?;
        let local = listener.local_addr()?;
        crate::printer::out(&format!("serving http://{local}\n"));
        let dumper = {
            let app = app.clone();
            let dir = web_dir.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    if app.dirty.swap(false, Ordering::SeqCst) {
                        let app2 = app.clone();
                        let dir2 = dir.clone();
                        let _ = tokio::task::spawn_blocking(move || app2.read(|c| Ok(dump_from(c, &dir2)))).await;
                    }
                }
            })
        };
        // One drainer moves committed submissions' events from the outbox into the ledger,
        // in batches, off the request path.
        let drainer = {
            let app = app.clone();
            tokio::spawn(async move {
                loop {
                    app.outbox.notified().await;
                    let app2 = app.clone();
                    let _ = tokio::task::spawn_blocking(move || app2.drain()).await;
                }
            })
        };
        let router = router(app.clone());
        axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        dumper.abort();
        drainer.abort();
        let app2 = app.clone();
        tokio::task::spawn_blocking(move || app2.drain()).await?;
        app.read(|c| Ok(dump_from(c, &web_dir)))??;
        if let (Some(l), Some(run)) = (&app.ledger, app.ledger_run) {
            let _ = l.lock().finish_run(run, "ok");
        }
        anyhow::Ok(())
    })
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/login", get(login_get).post(login_post))
        .route("/logout", post(logout))
        .route("/s/{id}", get(sample_page))
        .route("/s/{id}/draft", post(draft))
        .route("/s/{id}/submit", post(submit))
        .route("/api/s/{id}/scores/{reviewer}", get(api_scores))
        .route("/adjudicate", get(adjudicate_list))
        .route("/adjudicate/{id}", get(adjudicate_page).post(adjudicate_post))
        .route("/static/app.js", get(|| async { asset("text/javascript", APP_JS) }))
        .route("/static/app.css", get(|| async { asset("text/css", APP_CSS) }))
        .fallback(|| async { page(StatusCode::NOT_FOUND, "Not found", "<p>No such page.</p>", None) })
        .layer(axum::middleware::map_response(security_headers))
        .with_state(app)
}

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

async fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // No page address ever leaves in a `Referer`. Browsers then send `Origin: null` on our
    // own form posts; [`from_our_pages`] tells those from cross-site ones.
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn asset(ct: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, ct)], body).into_response()
}

/// HTML escaping for text and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

fn page(status: StatusCode, title: &str, body: &str, csrf: Option<&str>) -> Response {
    let meta = csrf.map(|c| format!("<meta name=\"csrf\" content=\"{}\">", esc(c))).unwrap_or_default();
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title>{meta}\
         <link rel=\"stylesheet\" href=\"/static/app.css\"><script src=\"/static/app.js\" defer></script></head>\
         <body><main><h1>{t}</h1>{body}</main></body></html>",
        t = esc(title)
    );
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

fn json_resp(status: StatusCode, v: serde_json::Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// The sign-in form (paste the personal token). A sign-in link (`/login#link=…`) posts
/// its code through it from the address's fragment, which browsers never send to a
/// server, after removing the fragment from the address and session history (`APP_JS`).
const LOGIN_FORM: &str = "<form id=\"login-form\" method=\"post\" action=\"/login\"><label>Personal token <input \
                          name=\"token\" type=\"password\" autocomplete=\"off\"></label> <button>Sign in</button></form>";

fn unauthorised() -> Response {
    page(
        StatusCode::UNAUTHORIZED,
        "Sign in",
        &format!("<p>Open your sign-in link, or paste your personal token.</p>{LOGIN_FORM}"),
        None,
    )
}

fn forbidden(why: &str) -> Response {
    page(StatusCode::FORBIDDEN, "Forbidden", &format!("<p>{}</p><p><a href=\"/\">Back</a></p>", esc(why)), None)
}

struct Session {
    reviewer: String,
    csrf: String,
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

fn now_s() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn session(app: &App, headers: &HeaderMap) -> Option<Session> {
    let id = cookie(headers, "bg_session")?;
    let h = super::token_hash(&id);
    app.read(|c| {
        c.query_row(
            "SELECT reviewer, csrf FROM sessions WHERE id_hash = ?1 AND expires_at > ?2",
            params![h, now_s()],
            |r| Ok(Session { reviewer: r.get(0)?, csrf: r.get(1)? }),
        )
        .optional()
    })
    .ok()
    .flatten()
}

fn eq_ct(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a write request may come from the app's own pages, by what the browser says:
/// `Sec-Fetch-Site`, when sent, must be `same-origin` (a page on another port of the same
/// host is `same-site`, and refused); `Origin`, when sent, must be this app's (`http` or,
/// behind a TLS proxy, `https`) or `null`. `null` is what a browser sends for our own
/// forms under `Referrer-Policy: no-referrer`; a cross-site page can send it too, but then
/// `Sec-Fetch-Site` says `cross-site`, and it has neither the `SameSite=Strict` session
/// cookie nor the CSRF token. Clients that send neither header (scripts) pass here.
fn from_our_pages(headers: &HeaderMap) -> bool {
    let get = |h: &str| headers.get(h).map(|v| v.to_str().unwrap_or("?"));
    let host = get("host").unwrap_or("");
    if get("sec-fetch-site").is_some_and(|v| v != "same-origin") {
        return false;
    }
    get("origin").is_none_or(|o| o == "null" || o == format!("http://{host}") || o == format!("https://{host}"))
}

/// A write must come from our own pages ([`from_our_pages`]), with the session's CSRF
/// token. `Some(refusal)` when the write must not happen.
fn check_write(headers: &HeaderMap, sess: &Session, form_csrf: Option<&str>) -> Option<Response> {
    if !from_our_pages(headers) {
        return Some(forbidden("cross-site request refused"));
    }
    let sent = headers.get("x-csrf-token").and_then(|h| h.to_str().ok()).or(form_csrf).unwrap_or("");
    if !eq_ct(sent, &sess.csrf) {
        return Some(forbidden("missing or wrong CSRF token: reload the page and try again"));
    }
    None
}

fn random_hex() -> String {
    use rand::TryRngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng.try_fill_bytes(&mut b).expect("the OS random source");
    hex::encode(b)
}

#[derive(Deserialize)]
struct TokenQ {
    /// The personal token, pasted.
    token: Option<String>,
    /// A link's single-use code (posted by the sign-in page's script).
    link: Option<String>,
}

/// The sign-in page. A token or link code in the query string (`/login?token=…`, links
/// of earlier versions) is refused without being checked: query strings end up in server
/// and proxy logs, so such a link must not work.
async fn login_get(Query(q): Query<TokenQ>) -> Response {
    match q.token.or(q.link) {
        Some(_) => page(
            StatusCode::BAD_REQUEST,
            "Sign in",
            &format!(
                "<p>Sign-in links carry their code after <code>#</code>, never after <code>?</code> (where \
                 servers keep it). Open your link from <code>reviews/links/</code> (rerun \
                 <code>benchgen review assign</code> for new ones), or paste your personal token.</p>{LOGIN_FORM}"
            ),
            None,
        ),
        None => page(StatusCode::OK, "Sign in", LOGIN_FORM, None),
    }
}

async fn login_post(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(q): Form<TokenQ>,
) -> Response {
    // No signing a victim's browser in as someone else from another site (login CSRF).
    if !from_our_pages(&headers) {
        return forbidden("cross-site sign-in refused");
    }
    match (q.link, q.token) {
        (Some(code), _) => login(&app, peer.ip(), &code, true).await,
        (None, t) => login(&app, peer.ip(), t.as_deref().unwrap_or(""), false).await,
    }
}

/// Start a session for a personal token, or for a link code (`link`), which is spent by
/// its first successful use.
async fn login(app: &Arc<App>, ip: IpAddr, secret: &str, link: bool) -> Response {
    let window = Duration::from_secs(app.cfg.login_window_s);
    {
        let mut f = app.failures.lock().unwrap_or_else(|p| p.into_inner());
        let q = f.entry(ip).or_default();
        while q.front().is_some_and(|t| t.elapsed() > window) {
            q.pop_front();
        }
        if q.len() >= app.cfg.max_login_failures {
            let mut r = page(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many attempts",
                "<p>Too many failed sign-ins from this address; wait a minute.</p>",
                None,
            );
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(app.cfg.login_window_s));
            return r;
        }
    }
    let secret_hash = super::token_hash(secret.trim());
    let known = if link { app.links.get(&secret_hash) } else { app.tokens.get(&secret_hash) };
    let Some(reviewer) = known.cloned() else {
        app.failures.lock().unwrap_or_else(|p| p.into_inner()).entry(ip).or_default().push_back(Instant::now());
        let what = if link { "That sign-in link is not valid." } else { "That token is not valid." };
        return page(StatusCode::UNAUTHORIZED, "Sign in", &format!("<p>{what}</p>{LOGIN_FORM}"), None);
    };
    let (sid, csrf) = (random_hex(), random_hex());
    let expires = now_s() + app.cfg.session_hours as i64 * 3600;
    let app2 = app.clone();
    let h = super::token_hash(&sid);
    let res = tokio::task::spawn_blocking(move || {
        app2.write(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            // A link signs in once: spending it and starting the session are one transaction.
            if link
                && tx.execute(
                    "INSERT OR IGNORE INTO spent_links(code_hash, reviewer, spent_at) VALUES (?1, ?2, ?3)",
                    params![secret_hash, reviewer, crate::ledger::now()],
                )? == 0
            {
                return Ok(false);
            }
            tx.execute("DELETE FROM sessions WHERE expires_at <= ?1", params![now_s()])?;
            tx.execute(
                "INSERT INTO sessions(id_hash, reviewer, csrf, expires_at) VALUES (?1, ?2, ?3, ?4)",
                params![h, reviewer, csrf, expires],
            )?;
            tx.commit()?;
            Ok(true)
        })
    })
    .await;
    match res {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => {
            return page(
                StatusCode::UNAUTHORIZED,
                "Sign in",
                &format!(
                    "<p>This sign-in link has been used already (a link works once). Paste your personal \
                     token (in the same message as the link), or ask for a new link.</p>{LOGIN_FORM}"
                ),
                None,
            );
        }
        _ => return page(StatusCode::INTERNAL_SERVER_ERROR, "Error", "<p>Could not start a session.</p>", None),
    }
    let max_age = app.cfg.session_hours * 3600;
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, "/")
        .header(header::SET_COOKIE, format!("bg_session={sid}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}"))
        .body(Body::empty())
        .expect("response")
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: Option<String>,
}

async fn logout(State(app): State<Arc<App>>, headers: HeaderMap, Form(f): Form<CsrfForm>) -> Response {
    let Some(sess) = session(&app, &headers) else { return unauthorised() };
    if let Some(r) = check_write(&headers, &sess, f.csrf.as_deref()) {
        return r;
    }
    if let Some(id) = cookie(&headers, "bg_session") {
        let h = super::token_hash(&id);
        let app2 = app.clone();
        let _ = tokio::task::spawn_blocking(move || {
            app2.write(|c| c.execute("DELETE FROM sessions WHERE id_hash = ?1", params![h]))
        })
        .await;
    }
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, "/login")
        .header(header::SET_COOKIE, "bg_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
        .body(Body::empty())
        .expect("response")
}

/// (done, total) and per-sample state for a reviewer.
fn progress(app: &App, reviewer: &str) -> rusqlite::Result<(Vec<(String, &'static str)>, usize)> {
    let mine: Vec<&super::assign::Assigned> =
        app.a.samples.iter().filter(|x| x.reviewers.iter().any(|r| r == reviewer)).collect();
    let rows: HashMap<String, (String, String)> = app.read(|c| {
        let mut st = c.prepare("SELECT sample_id, content_hash, status FROM scores WHERE reviewer = ?1")?;
        st.query_map(params![reviewer], |r| Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?))))?.collect()
    })?;
    let mut done = 0;
    let list = mine
        .iter()
        .map(|x| {
            let st = match rows.get(&x.id) {
                Some((h, s)) if *h == x.content_hash && s == "submitted" => {
                    done += 1;
                    "submitted"
                }
                Some((h, _)) if *h == x.content_hash => "draft",
                Some(_) => "changed: score again",
                None => "to do",
            };
            (x.id.clone(), st)
        })
        .collect();
    Ok((list, done))
}

async fn index(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let Some(sess) = session(&app, &headers) else { return unauthorised() };
    let Ok((list, done)) = progress(&app, &sess.reviewer) else {
        return page(StatusCode::INTERNAL_SERVER_ERROR, "Error", "<p>Database error.</p>", None);
    };
    let name = app.a.reviewer(&sess.reviewer).map(|r| r.name.clone()).unwrap_or_default();
    let mut b = format!(
        "<p>Signed in as <b>{}</b>. <span id=\"progress\">{done} of {} done</span>.</p><ul class=\"samples\">",
        esc(&name),
        list.len()
    );
    for (id, st) in &list {
        b.push_str(&format!("<li><a href=\"/s/{}\">{}</a> — {}</li>", esc(id), esc(id), st));
    }
    b.push_str("</ul>");
    if app.is_lead(&sess.reviewer) {
        b.push_str("<p><a href=\"/adjudicate\">Adjudication queue</a></p>");
    }
    b.push_str(&format!(
        "<form method=\"post\" action=\"/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button>Sign out</button></form>",
        esc(&sess.csrf)
    ));
    page(StatusCode::OK, "Your reviews", &b, Some(&sess.csrf))
}

fn sample_html(app: &App, s: &Sample) -> String {
    super::view::sample_html(s, &app.tools, app.result_chars)
}

#[derive(Deserialize)]
struct Saved {
    saved: Option<String>,
}

async fn sample_page(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<Saved>,
) -> Response {
    let Some(sess) = session(&app, &headers) else { return unauthorised() };
    if !app.assigned(&id, &sess.reviewer) {
        return forbidden("this sample is not assigned to you");
    }
    let (Some(x), Some(s)) = (app.a.sample(&id), app.samples.get(&id)) else { return forbidden("unknown sample") };
    let mine = app.read(|c| row(c, &id, &sess.reviewer)).ok().flatten().filter(|r| r.content_hash == x.content_hash);
    let (list, done) = progress(&app, &sess.reviewer).unwrap_or_default();
    let pos = list.iter().position(|(i, _)| *i == id).unwrap_or(0);
    let next =
        list.iter().cycle().skip(pos + 1).take(list.len()).find(|(_, st)| *st != "submitted").map(|(i, _)| i.clone());
    let mut b =
        format!("<p><a href=\"/\">All samples</a> · <span id=\"progress\">{done} of {} done</span></p>", list.len());
    if q.saved.is_some() {
        b.push_str("<p class=\"ok\" id=\"submitted\">Submitted.</p>");
    }
    // The sample on the left, the rubric and scores beside it (sticky while scrolling a
    // long trajectory; one column on narrow screens).
    b.push_str("<div class=\"review\">");
    b.push_str(&sample_html(&app, s));
    b.push_str(&format!(
        "<aside class=\"panel\"><h2>Your review</h2>{}\
         <form id=\"score-form\" method=\"post\" action=\"/s/{id}/submit\" data-draft=\"/s/{id}/draft\" data-min=\"{}\" data-max=\"{}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        super::view::rubric_intro(app.a.scale_min, app.a.scale_max, app.a.accept_min),
        app.a.scale_min,
        app.a.scale_max,
        esc(&sess.csrf),
        id = esc(&id)
    ));
    for d in &app.a.dimensions {
        b.push_str(&format!(
            "<fieldset class=\"dim\" data-dim=\"{}\"><legend>{}</legend><p class=\"rubric\">{}</p><div class=\"scale\">",
            esc(&d.id),
            esc(&d.name),
            esc(&d.description)
        ));
        let cur = mine.as_ref().and_then(|m| m.scores.get(&d.id)).copied();
        for v in app.a.scale_min..=app.a.scale_max {
            b.push_str(&format!(
                "<label><input type=\"radio\" name=\"{}\" value=\"{v}\"{}> {v}</label> ",
                esc(&d.id),
                if cur == Some(v) { " checked" } else { "" }
            ));
        }
        b.push_str("</div></fieldset>");
    }
    let note = mine.as_ref().map(|m| m.note.clone()).unwrap_or_default();
    let state = match &mine {
        Some(m) if m.submitted => "Submitted",
        Some(_) => "Draft saved",
        None => "Not saved yet",
    };
    // The button is not named or id'd `submit`: that would shadow the form's own
    // `submit`/`requestSubmit` methods in scripts.
    b.push_str(&format!(
        "<label class=\"note\">Note <textarea name=\"note\" rows=\"3\">{}</textarea></label>\
         <p><button type=\"submit\" id=\"submit-review\">Submit review</button> <span id=\"status\" role=\"status\">{state}</span></p>\
         <p id=\"form-problem\" class=\"warn\" role=\"alert\"></p>\
         <p class=\"hint\">Keys: {}–{} score the dimension that has the focus (outlined) and move on; ↑/↓ or j/k move \
         between dimensions (j/k also bring the focus back to them); Tab moves on; Ctrl+Enter submits.</p></form>",
        esc(&note),
        app.a.scale_min,
        app.a.scale_max
    ));
    if let Some(n) = next {
        b.push_str(&format!("<p><a id=\"next\" href=\"/s/{}\">Next to do</a></p>", esc(&n)));
    }
    // Blind review: the other reviewer's scores only once both have submitted.
    let other = x.reviewers.iter().find(|r| **r != sess.reviewer).cloned().unwrap_or_default();
    let theirs = app.read(|c| row(c, &id, &other)).ok().flatten().filter(|r| r.content_hash == x.content_hash);
    if let (Some(m), Some(t)) = (&mine, &theirs)
        && m.submitted
        && t.submitted
    {
        let sc: Vec<String> = t.scores.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        b.push_str(&format!(
            "<section class=\"other\"><h2>The other review</h2><p>{}</p><p>{}</p></section>",
            esc(&sc.join(", ")),
            esc(&t.note)
        ));
    }
    b.push_str("</aside></div>");
    page(StatusCode::OK, &format!("Review {id}"), &b, Some(&sess.csrf))
}

/// Parse the score form: every present dimension must be on the scale.
fn parse_scores(app: &App, form: &HashMap<String, String>) -> Result<BTreeMap<String, u8>, String> {
    let mut out = BTreeMap::new();
    for d in &app.a.dimensions {
        if let Some(v) = form.get(&d.id).filter(|v| !v.is_empty()) {
            match v.parse::<u8>() {
                Ok(n) if (app.a.scale_min..=app.a.scale_max).contains(&n) => {
                    out.insert(d.id.clone(), n);
                }
                _ => return Err(format!("`{}` must be from {} to {}", d.id, app.a.scale_min, app.a.scale_max)),
            }
        }
    }
    Ok(out)
}

async fn draft(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    save(app, headers, id, form, false).await
}

async fn submit(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    save(app, headers, id, form, true).await
}

async fn save(app: Arc<App>, headers: HeaderMap, id: String, form: HashMap<String, String>, final_: bool) -> Response {
    let Some(sess) = session(&app, &headers) else { return unauthorised() };
    if let Some(r) = check_write(&headers, &sess, form.get("csrf").map(String::as_str)) {
        return r;
    }
    if !app.assigned(&id, &sess.reviewer) {
        return forbidden("this sample is not assigned to you");
    }
    let scores = match parse_scores(&app, &form) {
        Ok(s) => s,
        Err(e) => return json_resp(StatusCode::UNPROCESSABLE_ENTITY, json!({"error": e})),
    };
    if final_ && scores.len() != app.a.dimensions.len() {
        let missing: Vec<&str> =
            app.a.dimensions.iter().filter(|d| !scores.contains_key(&d.id)).map(|d| d.id.as_str()).collect();
        return page(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Not submitted",
            &format!(
                "<p>Score every dimension first (missing: {}).</p><p><a href=\"/s/{}\">Back</a></p>",
                esc(&missing.join(", ")),
                esc(&id)
            ),
            None,
        );
    }
    let hash = app.a.sample(&id).map(|x| x.content_hash.clone()).unwrap_or_default();
    let note = super::clip(form.get("note").map(String::as_str).unwrap_or(""), 2000);
    let reviewer = sess.reviewer.clone();
    let app2 = app.clone();
    let (sc, nt, idc) = (scores.clone(), note.clone(), id.clone());
    let res = tokio::task::spawn_blocking(move || {
        let at = crate::ledger::now();
        let sj = serde_json::to_string(&sc).expect("scores");
        let r = app2.write(|c| {
            // Immediate: the write lock from the start (`review import` may drain meanwhile).
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            // A submitted review stays submitted; a later draft save does not reopen it.
            let submitted_before = row(&tx, &idc, &reviewer)?.is_some_and(|r| r.submitted && r.content_hash == hash);
            let status = if final_ || submitted_before { "submitted" } else { "draft" };
            if !final_ && submitted_before {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO scores(sample_id, reviewer, content_hash, scores, note, status, updated_at, submitted_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, CASE WHEN ?6 = 'submitted' THEN ?7 END)
                 ON CONFLICT(sample_id, reviewer) DO UPDATE SET content_hash = ?3, scores = ?4, note = ?5,
                   status = ?6, updated_at = ?7, submitted_at = CASE WHEN ?6 = 'submitted' THEN ?7 ELSE NULL END",
                params![idc, reviewer, hash, sj, nt, status, at],
            )?;
            if final_ {
                // The ledger event commits with the score (outbox), so a kill after this
                // commit cannot lose it.
                enqueue(
                    &tx,
                    super::kind::REVIEW,
                    &idc,
                    json!({"reviewer": reviewer, "kind": "human", "content_hash": hash, "scores": sc, "note": nt,
                           "source": format!("web ({at})")}),
                )?;
            }
            tx.commit()?;
            Ok(true)
        });
        if final_ && matches!(r, Ok(true)) {
            app2.outbox.notify_one();
        }
        r
    })
    .await;
    match res {
        Ok(Ok(changed)) => {
            app.dirty.store(true, Ordering::SeqCst);
            if final_ {
                Response::builder()
                    .status(StatusCode::SEE_OTHER)
                    .header(header::LOCATION, format!("/s/{id}?saved=1"))
                    .body(Body::empty())
                    .expect("response")
            } else {
                json_resp(StatusCode::OK, json!({"saved": changed, "submitted": !changed}))
            }
        }
        _ => json_resp(StatusCode::INTERNAL_SERVER_ERROR, json!({"error": "not saved"})),
    }
}

async fn api_scores(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    UrlPath((id, who)): UrlPath<(String, String)>,
) -> Response {
    let Some(sess) = session(&app, &headers) else {
        return json_resp(StatusCode::UNAUTHORIZED, json!({"error": "sign in"}));
    };
    let lead_view = app.is_lead(&sess.reviewer) && !app.assigned(&id, &sess.reviewer);
    if !app.assigned(&id, &sess.reviewer) && !lead_view {
        return json_resp(StatusCode::FORBIDDEN, json!({"error": "not assigned to you"}));
    }
    let Some(x) = app.a.sample(&id) else {
        return json_resp(StatusCode::FORBIDDEN, json!({"error": "unknown sample"}));
    };
    let get = |r: &str| app.read(|c| row(c, &id, r)).ok().flatten().filter(|r| r.content_hash == x.content_hash);
    if who != sess.reviewer {
        // Blind review: another reviewer's scores only after both submitted (or to a lead
        // who did not review the sample).
        let both = x.reviewers.iter().all(|r| get(r).is_some_and(|r| r.submitted));
        if !(both && (app.assigned(&id, &sess.reviewer) || lead_view)) {
            return json_resp(
                StatusCode::FORBIDDEN,
                json!({"error": "blind review: not before both reviewers submitted"}),
            );
        }
    }
    match get(&who) {
        Some(r) => json_resp(StatusCode::OK, json!({"scores": r.scores, "note": r.note, "submitted": r.submitted})),
        None => json_resp(StatusCode::OK, json!({"scores": {}, "note": "", "submitted": false})),
    }
}

/// Every web adjudication of a sample, oldest revision first.
fn adjudication_revisions(c: &Connection, id: &str) -> rusqlite::Result<Vec<WebAdjudication>> {
    let mut st = c.prepare(
        "SELECT sample_id, content_hash, decision, adjudicator, reason, at, revision FROM adjudication_revisions
         WHERE sample_id = ?1 ORDER BY revision",
    )?;
    st.query_map(params![id], adjudication_row)?.collect()
}

/// Samples a lead may adjudicate: both reviews submitted, one accepts and one rejects,
/// and the lead neither reviewed nor wrote it.
fn disputed(app: &App, lead: &str) -> Vec<(String, Vec<(String, Row)>)> {
    let r = super::ReviewSettings {
        dimensions: app.a.dimensions.clone(),
        accept_min: app.a.accept_min,
        scale_min: app.a.scale_min,
        scale_max: app.a.scale_max,
        ..Default::default()
    };
    let mut out = Vec::new();
    for x in &app.a.samples {
        if x.reviewers.iter().any(|r| r == lead) || x.author.as_deref() == Some(lead) {
            continue;
        }
        let rows: Vec<(String, Row)> = x
            .reviewers
            .iter()
            .filter_map(|rv| {
                app.read(|c| row(c, &x.id, rv))
                    .ok()
                    .flatten()
                    .filter(|r| r.submitted && r.content_hash == x.content_hash)
                    .map(|r| (rv.clone(), r))
            })
            .collect();
        if rows.len() == 2 && r.passes(&rows[0].1.scores) != r.passes(&rows[1].1.scores) {
            out.push((x.id.clone(), rows));
        }
    }
    out
}

async fn adjudicate_list(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let Some(sess) = session(&app, &headers) else { return unauthorised() };
    if !app.is_lead(&sess.reviewer) {
        return forbidden("the adjudication view is for leads");
    }
    let mut b = String::from("<p><a href=\"/\">Your reviews</a></p><ul>");
    let list = disputed(&app, &sess.reviewer);
    for (id, _) in &list {
        let done = app.read(|c| adjudication_revisions(c, id)).unwrap_or_default();
        b.push_str(&format!(
            "<li><a href=\"/adjudicate/{}\">{}</a> — {}</li>",
            esc(id),
            esc(id),
            done.last()
                .map(|d| format!("decided: {} (revision {} by {})", esc(&d.decision), d.revision, esc(&d.adjudicator)))
                .unwrap_or_else(|| "open".into())
        ));
    }
    b.push_str("</ul>");
    if list.is_empty() {
        b.push_str("<p>No disputed sample you may adjudicate.</p>");
    }
    page(StatusCode::OK, "Adjudication queue", &b, Some(&sess.csrf))
}

async fn adjudicate_page(State(app): State<Arc<App>>, headers: HeaderMap, UrlPath(id): UrlPath<String>) -> Response {
    let Some(sess) = session(&app, &headers) else { return unauthorised() };
    if !app.is_lead(&sess.reviewer) {
        return forbidden("the adjudication view is for leads");
    }
    let Some((_, rows)) = disputed(&app, &sess.reviewer).into_iter().find(|(i, _)| *i == id) else {
        return forbidden("not a disputed sample you may adjudicate");
    };
    let Some(s) = app.samples.get(&id) else { return forbidden("unknown sample") };
    let mut b = format!("<p><a href=\"/adjudicate\">Queue</a></p>{}", sample_html(&app, s));
    for (rv, r) in &rows {
        let sc: Vec<String> = r.scores.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        b.push_str(&format!(
            "<section class=\"other\"><h2>{}</h2><p>{}</p><p>{}</p></section>",
            esc(rv),
            esc(&sc.join(", ")),
            esc(&r.note)
        ));
    }
    let earlier = app.read(|c| adjudication_revisions(c, &id)).unwrap_or_default();
    if !earlier.is_empty() {
        b.push_str("<section class=\"revisions\" id=\"revisions\"><h2>Decided already</h2><ol>");
        for w in &earlier {
            b.push_str(&format!(
                "<li>revision {}: <b>{}</b> by {} ({}): {}</li>",
                w.revision,
                esc(&w.decision),
                esc(&w.adjudicator),
                esc(&w.at),
                esc(&w.reason)
            ));
        }
        b.push_str(&format!(
            "</ol><p class=\"hint\">Deciding again records revision {}: the latest revision counts, every earlier \
             one stays in the ledger and in the decision's record.</p></section>",
            earlier.len() + 1
        ));
    }
    b.push_str(&format!(
        "<form method=\"post\" action=\"/adjudicate/{}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <label><input type=\"radio\" name=\"decision\" value=\"accept\"> accept</label> \
         <label><input type=\"radio\" name=\"decision\" value=\"reject\"> reject</label> \
         <label><input type=\"radio\" name=\"decision\" value=\"exclude\"> exclude</label>\
         <label class=\"note\">Reason <textarea name=\"reason\" rows=\"2\" required></textarea></label><button>Decide</button></form>",
        esc(&id),
        esc(&sess.csrf)
    ));
    page(StatusCode::OK, &format!("Adjudicate {id}"), &b, Some(&sess.csrf))
}

async fn adjudicate_post(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let Some(sess) = session(&app, &headers) else { return unauthorised() };
    if let Some(r) = check_write(&headers, &sess, form.get("csrf").map(String::as_str)) {
        return r;
    }
    if !app.is_lead(&sess.reviewer) {
        return forbidden("the adjudication view is for leads");
    }
    if !disputed(&app, &sess.reviewer).iter().any(|(i, _)| *i == id) {
        return forbidden("not a disputed sample you may adjudicate");
    }
    let decision = form.get("decision").cloned().unwrap_or_default();
    let reason = super::clip(form.get("reason").map(String::as_str).unwrap_or(""), 2000);
    if !["accept", "reject", "exclude"].contains(&decision.as_str()) || reason.is_empty() {
        return page(StatusCode::UNPROCESSABLE_ENTITY, "Not saved", "<p>Pick a decision and give a reason.</p>", None);
    }
    let hash = app.a.sample(&id).map(|x| x.content_hash.clone()).unwrap_or_default();
    let app2 = app.clone();
    let lead = sess.reviewer.clone();
    let idc = id.clone();
    let res = tokio::task::spawn_blocking(move || {
        let at = crate::ledger::now();
        let r = app2.write(|c| {
            // Immediate: the write lock from the start (`review import` may drain meanwhile).
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            // A second decision is a new revision; the earlier ones are kept (the latest counts).
            let earlier = adjudication_revisions(&tx, &idc)?;
            let revision = earlier.len() as u32 + 1;
            tx.execute(
                "INSERT INTO adjudication_revisions(sample_id, revision, content_hash, decision, adjudicator, reason, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![idc, revision, hash, decision, lead, reason, at],
            )?;
            let mut ev = json!({"decision": decision, "adjudicator": lead, "reason": reason, "content_hash": hash,
                                "source": "web", "revision": revision});
            if let Some(p) = earlier.last() {
                ev["replaces"] = json!({"revision": p.revision, "decision": p.decision, "adjudicator": p.adjudicator,
                                        "reason": p.reason, "at": p.at});
            }
            enqueue(&tx, "review.adjudication", &idc, ev)?;
            tx.commit()
        });
        if r.is_ok() {
            app2.outbox.notify_one();
        }
        r
    })
    .await;
    match res {
        Ok(Ok(_)) => {
            app.dirty.store(true, Ordering::SeqCst);
            Response::builder()
                .status(StatusCode::SEE_OTHER)
                .header(header::LOCATION, "/adjudicate")
                .body(Body::empty())
                .expect("response")
        }
        _ => page(StatusCode::INTERNAL_SERVER_ERROR, "Error", "<p>Not saved.</p>", None),
    }
}

const APP_CSS: &str = "body{font-family:system-ui,sans-serif;max-width:92rem;margin:1rem auto;padding:0 1rem;\
line-height:1.4;color:#1d1d1d}\
h1{font-size:1.4rem;margin:.3rem 0}h2{font-size:1.15rem;margin:.6rem 0 .3rem}h3{font-size:1rem;margin:.5rem 0 .3rem}\
.review{display:grid;grid-template-columns:minmax(0,1fr) 24rem;gap:1.5rem;align-items:start}\
.panel{position:sticky;top:.5rem;max-height:calc(100vh - 1rem);overflow:auto;border:1px solid #ccd;\
border-radius:6px;padding:.2rem .8rem;background:#fcfcff}\
@media (max-width:60rem){.review{grid-template-columns:1fr}.panel{position:static;max-height:none}}\
.meta{color:#555;margin:.2rem 0}nav.turns a{margin:0 .2rem}\
section.turn{border-top:2px solid #dde;padding-top:.3rem;margin-top:.8rem}\
.msg{border-radius:6px;padding:.4rem .7rem;margin:.5rem 0}.msg .who{display:block;font-weight:600;font-size:.85rem;color:#444}\
.msg.user{background:#eef4ff;border-left:4px solid #2a6ad8}.msg.reply{background:#f3f3f3;border-left:4px solid #888}\
.text,.desc{white-space:pre-wrap;overflow-wrap:anywhere}\
ol.steps{padding-left:1.2rem}li.step{margin:.6rem 0}.par{color:#8a4b00;font-weight:normal}\
article.call{border:1px solid #d6d6de;border-radius:6px;padding:.4rem .7rem;margin:.4rem 0;background:#fff}\
article.call header{display:flex;flex-wrap:wrap;gap:.3rem .8rem;align-items:baseline}\
code.tool{font-weight:700;font-size:1rem}.plan-ref{color:#444;font-size:.85rem}\
.desc{color:#333;font-size:.9rem;margin:.2rem 0 .4rem}.none{color:#777;font-style:italic}\
table{border-collapse:collapse;margin:.3rem 0;font-size:.9rem}\
th,td{border:1px solid #ddd;padding:.15rem .45rem;text-align:left;vertical-align:top}thead th{background:#f2f2f6}\
table.args{width:100%}table.args td:nth-child(2){overflow-wrap:anywhere}.ty{color:#555;font-family:monospace}\
.str{white-space:pre-wrap}pre{margin:.2rem 0;white-space:pre-wrap;overflow-wrap:anywhere}\
pre.json,pre.full{background:#f6f6f6;padding:.4rem;border-radius:4px;font-size:.85rem}\
details.result,details.plan{margin:.3rem 0}details>summary{cursor:pointer}\
details.result>summary .len{color:#666;font-size:.85rem}\
details.result>summary .preview{display:block;white-space:pre-wrap;overflow-wrap:anywhere;font-family:monospace;\
font-size:.85rem;color:#444;background:#f6f6f6;padding:.3rem;border-radius:4px;margin-top:.2rem}\
details[open]>summary .preview{display:none}details.error>summary{color:#a00}\
.warn{color:#a00}.final-answer{border:2px solid #176317;border-radius:6px;padding:.3rem .8rem;margin:1rem 0;background:#f4fbf4}\
fieldset.dim{margin:.45rem 0;border:1px solid #ccc;border-radius:5px}\
fieldset.dim.current{border:2px solid #2a6ad8;background:#f0f5ff}\
fieldset.dim legend{font-weight:600}.rubric{margin:.1rem 0 .3rem;font-size:.88rem;color:#333}\
.scale label{margin-right:.5rem;white-space:nowrap}input[type=radio]:focus-visible{outline:3px solid #2a6ad8}\
.rule{font-size:.88rem;color:#333}.hint{color:#666;font-size:.85rem;margin:.2rem 0}.ok{color:#176317}\
.note{display:block;margin-top:.4rem}.note textarea{width:100%;box-sizing:border-box}\
section.other,section.revisions{border-left:3px solid #999;padding-left:.6rem}";

const APP_JS: &str = r#"'use strict';
document.addEventListener('DOMContentLoaded', function () {
  // Sign-in link `/login#link=…`: the fragment never reaches a server; take it out of the
  // address bar and session history before anything else, then post it (once).
  var login = document.getElementById('login-form');
  if (login) {
    var m = /^#link=([0-9A-Za-z]+)$/.exec(location.hash);
    if (/(link|token)=/.test(location.hash + location.search)) history.replaceState(null, '', location.pathname);
    if (m) {
      var code = document.createElement('input');
      code.type = 'hidden'; code.name = 'link'; code.value = m[1];
      login.appendChild(code);
      login.submit();
    }
    return;
  }
  // Results: open or close them all at once.
  var results = Array.prototype.slice.call(document.querySelectorAll('details.result'));
  var expand = document.getElementById('expand-all'), collapse = document.getElementById('collapse-all');
  if (expand) expand.addEventListener('click', function () { results.forEach(function (d) { d.open = true; }); });
  if (collapse) collapse.addEventListener('click', function () {
    results.forEach(function (d) { if (d.querySelector('.preview')) d.open = false; });
  });
  var form = document.getElementById('score-form');
  if (!form) return;
  var csrf = document.querySelector('meta[name=csrf]').getAttribute('content');
  var status = document.getElementById('status'), problem = document.getElementById('form-problem');
  var dims = Array.prototype.slice.call(form.querySelectorAll('fieldset.dim'));
  var min = parseInt(form.getAttribute('data-min'), 10), max = parseInt(form.getAttribute('data-max'), 10);
  function dimOf(el) {
    for (var i = 0; i < dims.length; i++) { if (el && dims[i].contains(el)) return i; }
    return -1;
  }
  // The highlighted dimension is always the one holding the keyboard focus (none when the
  // focus is elsewhere), so a key never scores a dimension other than the one outlined.
  var last = 0;
  for (var i = 0; i < dims.length; i++) { if (!dims[i].querySelector('input:checked')) { last = i; break; } }
  function mark() {
    var cur = dimOf(document.activeElement);
    if (cur >= 0) last = cur;
    dims.forEach(function (d, i) { d.classList.toggle('current', i === cur); });
  }
  function focusDim(i, stay) {
    var d = dims[i];
    var r = d.querySelector('input:checked') || d.querySelector('input[type=radio]');
    r.focus({ preventScroll: !!stay });
    mark();
  }
  document.addEventListener('focusin', mark);
  document.addEventListener('focusout', mark);
  // A click anywhere on a dimension (its rubric text, its frame) gives it the focus.
  dims.forEach(function (d, i) {
    d.addEventListener('click', function (e) { if (e.target.tagName !== 'INPUT') focusDim(i); });
  });
  // One save in flight at a time, always sending the latest form state, so an older
  // save can never land after a newer one.
  var pending = null, inFlight = false, again = false;
  function save() {
    if (inFlight) { again = true; return; }
    inFlight = true; again = false;
    var body = new URLSearchParams(new FormData(form));
    status.textContent = 'Saving…';
    fetch(form.getAttribute('data-draft'), { method: 'POST', headers: { 'X-CSRF-Token': csrf }, body: body, credentials: 'same-origin' })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (j) { inFlight = false; if (again) { save(); } else { status.textContent = j.submitted ? 'Submitted' : 'Draft saved'; } })
      .catch(function (e) { inFlight = false; status.textContent = 'Not saved (' + e + ')'; if (again) save(); });
  }
  form.addEventListener('change', save);
  var note = form.querySelector('textarea[name=note]');
  note.addEventListener('input', function () { clearTimeout(pending); pending = setTimeout(save, 600); });
  // Submitting with a dimension unscored is refused here too, with the focus on it.
  form.addEventListener('submit', function (e) {
    var missing = dims.filter(function (d) { return !d.querySelector('input:checked'); });
    if (missing.length) {
      e.preventDefault();
      // Its own line, so a draft save finishing meanwhile does not hide it.
      problem.textContent = 'Score every dimension first (missing: ' +
        missing.map(function (d) { return d.querySelector('legend').textContent; }).join(', ') + ')';
      focusDim(dims.indexOf(missing[0]));
    } else {
      problem.textContent = '';
    }
  });
  var button = document.getElementById('submit-review');
  function typing(t) { return t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || (t.tagName === 'INPUT' && t.type !== 'radio'); }
  document.addEventListener('keydown', function (e) {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); form.requestSubmit(button); return; }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var t = e.target, cur = dimOf(t);
    if (cur < 0) {
      // Outside the dimensions, digits do nothing (and type in text fields); j/k bring
      // the focus back to the dimension last worked on.
      if (!typing(t) && (e.key === 'j' || e.key === 'k')) { focusDim(last); e.preventDefault(); }
      return;
    }
    var n = /^[0-9]$/.test(e.key) ? parseInt(e.key, 10) : NaN;
    if (n >= min && n <= max) {
      var r = dims[cur].querySelector('input[value="' + n + '"]');
      if (r) { r.checked = true; save(); }
      if (cur < dims.length - 1) focusDim(cur + 1); else mark();
      e.preventDefault();
    } else if (e.key === 'ArrowDown' || e.key === 'j') { if (cur < dims.length - 1) focusDim(cur + 1); e.preventDefault(); }
    else if (e.key === 'ArrowUp' || e.key === 'k') { if (cur > 0) focusDim(cur - 1); e.preventDefault(); }
  });
  // Start on the first dimension not scored yet (without scrolling away from the sample).
  focusDim(last, true);
});
"#;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_cookies() {
        assert_eq!(esc("<a href=\"x\">'&"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;");
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; bg_session=abc; b=2"));
        assert_eq!(cookie(&h, "bg_session").as_deref(), Some("abc"));
        assert!(eq_ct("abc", "abc") && !eq_ct("abc", "abd") && !eq_ct("abc", "ab"));
    }
}
