//! Sign-in and sessions: the sign-in page and form, single-use link codes and personal
//! tokens (rate-limited per client address), the session cookie, and the checks every
//! write passes (same origin, CSRF token).

use super::App;
use super::pages::page;
use crate::review;
use crate::review::submissions::random_hex;
use crate::review::view::esc;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::extract::Form;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::Response;
use rusqlite::OptionalExtension;
use rusqlite::params;
use serde::Deserialize;
use std::net::IpAddr;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

/// The sign-in form (paste the personal token). A sign-in link (`/login#link=…`) posts
/// its code through it from the address's fragment, which browsers never send to a
/// server, after removing the fragment from the address and session history (`APP_JS`).
const LOGIN_FORM: &str = "<form id=\"login-form\" method=\"post\" action=\"/login\"><label>Personal token <input \
                          name=\"token\" type=\"password\" autocomplete=\"off\"></label> <button>Sign in</button></form>";

pub(super) fn unauthorised() -> Response {
    page(
        StatusCode::UNAUTHORIZED,
        "Sign in",
        &format!("<p>Open your sign-in link, or paste your personal token.</p>{LOGIN_FORM}"),
        None,
    )
}

pub(super) fn forbidden(why: &str) -> Response {
    page(StatusCode::FORBIDDEN, "Forbidden", &format!("<p>{}</p><p><a href=\"/\">Back</a></p>", esc(why)), None)
}

pub(super) struct Session {
    pub(super) reviewer: String,
    pub(super) csrf: String,
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

pub(super) fn session(app: &App, headers: &HeaderMap) -> Option<Session> {
    let id = cookie(headers, "bg_session")?;
    let h = review::token_hash(&id);
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
pub(super) fn check_write(headers: &HeaderMap, sess: &Session, form_csrf: Option<&str>) -> Option<Response> {
    if !from_our_pages(headers) {
        return Some(forbidden("cross-site request refused"));
    }
    let sent = headers.get("x-csrf-token").and_then(|h| h.to_str().ok()).or(form_csrf).unwrap_or("");
    if !eq_ct(sent, &sess.csrf) {
        return Some(forbidden("missing or wrong CSRF token: reload the page and try again"));
    }
    None
}

#[derive(Deserialize)]
pub(super) struct TokenQ {
    /// The personal token, pasted.
    token: Option<String>,
    /// A link's single-use code (posted by the sign-in page's script).
    link: Option<String>,
}

/// The sign-in page. A token or link code in the query string (`/login?token=…`, links
/// of earlier versions) is refused without being checked: query strings end up in server
/// and proxy logs, so such a link must not work.
pub(super) async fn login_get(Query(q): Query<TokenQ>) -> Response {
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

pub(super) async fn login_post(
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
    let secret_hash = review::token_hash(secret.trim());
    let known = if link { app.links.get(&secret_hash) } else { app.tokens.get(&secret_hash) };
    let Some(reviewer) = known.cloned() else {
        app.failures.lock().unwrap_or_else(|p| p.into_inner()).entry(ip).or_default().push_back(Instant::now());
        let what = if link { "That sign-in link is not valid." } else { "That token is not valid." };
        return page(StatusCode::UNAUTHORIZED, "Sign in", &format!("<p>{what}</p>{LOGIN_FORM}"), None);
    };
    let (sid, csrf) = (random_hex(), random_hex());
    let expires = now_s() + app.cfg.session_hours as i64 * 3600;
    let app2 = app.clone();
    let h = review::token_hash(&sid);
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
pub(super) struct CsrfForm {
    csrf: Option<String>,
}

pub(super) async fn logout(State(app): State<Arc<App>>, headers: HeaderMap, Form(f): Form<CsrfForm>) -> Response {
    let Some(sess) = session(&app, &headers) else { return unauthorised() };
    if let Some(r) = check_write(&headers, &sess, f.csrf.as_deref()) {
        return r;
    }
    if let Some(id) = cookie(&headers, "bg_session") {
        let h = review::token_hash(&id);
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
