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
//! the ledger by one drainer task, exactly once (see [`drain_outbox`], in the app's storage
//! [`super::submissions`]); what a killed server left queued is moved at its next start or
//! by `review import` / `review merge`.
//! Submissions reach the pipeline through `reviews/web/scores.jsonl` and
//! `reviews/web/adjudications.jsonl`, rewritten every few seconds while serving and by
//! `review import` / `review merge`.

mod pages;
mod signin;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::Role;
use super::assign::Assignments;
use super::submissions::{db_path, drain_outbox, dump_from, open_db};
use crate::ledger::RunRecorder;
use crate::model::Sample;
use crate::settings::Settings;
use pages::{
    APP_CSS, APP_JS, adjudicate_list, adjudicate_page, adjudicate_post, api_scores, asset, draft, index, page,
    sample_page, security_headers, submit,
};
use signin::{login_get, login_post, logout};

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
    let (tokens, links) = sign_in_hashes(&a, &secret);
    let db = db_path(s);
    let mut writer = open_db(&db)?;
    let readers = (0..4).map(|_| open_db(&db).map(Mutex::new)).collect::<Result<Vec<_>>>()?;
    let (ledger, ledger_run) = open_ledger(s, printer, &mut writer)?;
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
    let web_dir = super::submissions::web_dir(s);
    // Ctrl-C stops serving gracefully (final dump of `reviews/web/`), not the process at once.
    crate::children::set_graceful_interrupt();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run(app, cfg, web_dir))
}

/// SHA-256 of each reviewer's token and of each reviewer's link code → reviewer id.
fn sign_in_hashes(a: &Assignments, secret: &str) -> (HashMap<String, String>, HashMap<String, String>) {
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
        tokens.insert(super::token_hash(&super::token_for(secret, &rv)), e.id.clone());
        links.insert(super::token_hash(&super::link_code_for(secret, &rv)), e.id.clone());
    }
    (tokens, links)
}

/// The serving run in the ledger, after moving in what a killed server left in the
/// outbox; without a ledger the app serves and only warns.
fn open_ledger(
    s: &Settings,
    printer: &crate::printer::Printer,
    writer: &mut Connection,
) -> Result<(Option<RunRecorder>, Option<i64>)> {
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
        let n = drain_outbox(writer, &mut l.lock(), Some(run))
            .context("cannot move pending review events from the app database into the ledger")?;
        if n > 0 {
            printer.info(&format!("{n} review event(s) left by an interrupted server recorded in the ledger"));
        }
    }
    Ok((ledger, ledger_run))
}

/// Serves until Ctrl-C, dumping `reviews/web/` and draining the outbox beside the
/// requests; then the last drain and dump, and the run is finished in the ledger.
async fn run(app: Arc<App>, cfg: ServeSettings, web_dir: PathBuf) -> Result<()> {
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
    Ok(())
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
