//! The pages and API a signed-in reviewer or lead uses: the review list, the sample page
//! with its score form (autosaved drafts, submissions), the blind-review score API and the
//! adjudication queue; plus the page frame, security headers and static assets.

use super::App;
use super::signin::{check_write, forbidden, session, unauthorised};
use crate::model::Sample;
use crate::review;
use crate::review::submissions::{Row, adjudication_revisions, enqueue, row};
use crate::review::view::esc;
use anyhow::Result;
use axum::body::Body;
use axum::extract::Form;
use axum::extract::Path as UrlPath;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use rusqlite::params;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(super) async fn security_headers(mut r: Response) -> Response {
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

pub(super) fn asset(ct: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, ct)], body).into_response()
}

pub(super) fn page(status: StatusCode, title: &str, body: &str, csrf: Option<&str>) -> Response {
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

/// (done, total) and per-sample state for a reviewer.
fn progress(app: &App, reviewer: &str) -> rusqlite::Result<(Vec<(String, &'static str)>, usize)> {
    let mine: Vec<&review::assign::Assigned> =
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

pub(super) async fn index(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
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
    review::view::sample_html(s, &app.tools, app.result_chars)
}

#[derive(Deserialize)]
pub(super) struct Saved {
    saved: Option<String>,
}

pub(super) async fn sample_page(
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
        review::view::rubric_intro(app.a.scale_min, app.a.scale_max, app.a.accept_min),
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

pub(super) async fn draft(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    save(app, headers, id, form, false).await
}

pub(super) async fn submit(
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
    let note = review::clip(form.get("note").map(String::as_str).unwrap_or(""), 2000);
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
                    review::kind::REVIEW,
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

pub(super) async fn api_scores(
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

/// Samples a lead may adjudicate: both reviews submitted, one accepts and one rejects,
/// and the lead neither reviewed nor wrote it.
fn disputed(app: &App, lead: &str) -> Vec<(String, Vec<(String, Row)>)> {
    let r = review::ReviewSettings {
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

pub(super) async fn adjudicate_list(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
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

pub(super) async fn adjudicate_page(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Response {
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

pub(super) async fn adjudicate_post(
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
    let reason = review::clip(form.get("reason").map(String::as_str).unwrap_or(""), 2000);
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

pub(super) const APP_CSS: &str = "body{font-family:system-ui,sans-serif;max-width:92rem;margin:1rem auto;padding:0 1rem;\
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

pub(super) const APP_JS: &str = r#"'use strict';
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
