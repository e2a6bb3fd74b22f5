//! `benchgen explain ID`: the lineage of one item, from the ledger runs that
//! produced the current artifacts.
//!
//! IDs of its own: a ledger event (`#123`), or an LLM exchange or MCP call by the hash an
//! artifact names it with (`sha256:…`). Every other id is a family's, answered by the family
//! through the stage list ([`crate::stage::Stage::explain_subject`]), asked from its end: a
//! log session (`log:<session id>`), an EFS set (`efs:<set id>`), a graph edge
//! (`edge:<from>-><to>`), a sample (`sample:<id>`), and last, by the first family, a tool
//! (`server::tool`), a server (`server`) or its filter decision (`filter:<tool or server>`).
//! An id no family answers is a tool or a server no current artifact has. This file names no
//! family, nor an event kind a family declares: each family describes its own
//! ([`crate::stage::Stage::describe_event`]); the foundation's (`ledger::kind`) and the LLM
//! client's are described here.

use anyhow::Result;
use serde_json::Value;

use crate::error::hinted;
use crate::ledger::{EXPLAIN_IDS, Event, Explanation, Ledger, kind};
use crate::model::{TOOL_ID_SEP, norm_tool_id};
use crate::settings::Settings;
use crate::stage::{Manifest, Stage};

pub fn explain(settings: &Settings, raw_id: &str) -> Result<Explanation> {
    let not_found = |what: String| hinted(what, EXPLAIN_IDS);
    let Some(ledger) = Ledger::open_existing(&settings.artifacts)? else {
        return Err(not_found(format!(
            "nothing to explain yet: `{}` has no ledger",
            settings.display_path(&settings.artifacts)
        )));
    };
    let id = raw_id.trim();
    let stages = crate::stages::all();
    // Ids a stage answers for first (a released sample: its release record, then its
    // ledger lineage).
    for stage in &stages {
        if let Some(x) = stage.explain(settings, id)? {
            return Ok(x);
        }
    }
    if let Some(n) = id.strip_prefix('#').or_else(|| id.strip_prefix("event:")) {
        let n: i64 = n.parse().map_err(|_| not_found(format!("`{id}` is not an event id")))?;
        let lineage = ledger.lineage(&[n])?;
        if lineage.is_empty() {
            return Err(not_found(format!("no event #{n} in the ledger")));
        }
        let ev = lineage.iter().find(|e| e.id == n).expect("root is in its own lineage");
        let status = format!("{} event of stage `{}`, run {}", ev.kind, ev.stage, ev.run_id);
        return Ok(Explanation { id: id.into(), item: "event", status, record: None, lineage });
    }
    // How artifacts name an LLM exchange (its request hash) or an MCP call (its call hash):
    // the newest event with that hash.
    if id.starts_with("sha256:") {
        let found = match ledger.exchange_event(id)? {
            Some(n) => Some(n),
            None => ledger.call_event(id)?,
        };
        let Some(n) = found else {
            return Err(not_found(format!("no LLM exchange or MCP call with hash `{id}` in the ledger")));
        };
        let lineage = ledger.lineage(&[n])?;
        let ev = lineage.iter().find(|e| e.id == n).expect("root is in its own lineage");
        let status = format!("{} event #{n} of stage `{}`, run {}", ev.kind, ev.stage, ev.run_id);
        return Ok(Explanation { id: id.into(), item: "event", status, record: None, lineage });
    }

    // Only the runs behind the current artifacts count.
    let runs = current_runs(settings);
    if let Some(x) = family_answer(&stages, &ledger, &runs, id)? {
        return Ok(x);
    }
    // No family knows it: a tool or a server (by its shape) no event of the current runs is about.
    let subject = norm_tool_id(id);
    let item = if subject.contains(TOOL_ID_SEP) { "tool" } else { "server" };
    Err(not_found(format!("no {item} `{subject}` in the current artifacts")))
}

/// The answer of the family that files its events under `id`, asking the stage list from its
/// end (the first answer wins): a later family's ids carry its prefix (`log:`, `efs:`, `edge:`,
/// `sample:`), and the first family's — the catalog's tools and servers, and any other subject
/// an event of `runs` is about — are asked for last.
fn family_answer(stages: &[Box<dyn Stage>], ledger: &Ledger, runs: &[i64], id: &str) -> Result<Option<Explanation>> {
    for stage in stages.iter().rev() {
        if let Some(x) = stage.explain_subject(ledger, runs, id)? {
            return Ok(Some(x));
        }
    }
    Ok(None)
}

/// The runs behind the current artifacts: the run of every stage's manifest.
fn current_runs(settings: &Settings) -> Vec<i64> {
    crate::stages::names()
        .into_iter()
        .filter_map(|s| Manifest::load(&settings.artifacts, s).ok().flatten())
        .map(|m| m.run_id)
        .collect()
}

/// One line about an event: the foundation's and the LLM client's kinds here, every other
/// kind by the family that records it (through the stage list), else the raw payload.
fn describe(e: &Event, stages: &[Box<dyn Stage>]) -> String {
    let p = &e.payload;
    let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("");
    match e.kind.as_str() {
        kind::INPUT_READ => format!("read `{}` ({} bytes, {})", s("path"), p["bytes"], s("sha256")),
        kind::CATALOG_SERVER | kind::CATALOG_TOOL => {
            let mut d = format!("`{}` from `{}` at {}", e.subject.as_deref().unwrap_or(""), s("source"), s("location"));
            if let Some(orig) = p.get("original_name").and_then(Value::as_str) {
                d.push_str(&format!(" (name {orig:?} trimmed)"));
            }
            d
        }
        kind::CATALOG_REJECT => format!("left out at {}: {}", s("location"), s("reason")),
        kind::FILTER_DECISION => {
            let rule = if s("rule").is_empty() { String::new() } else { format!(" [{}]", s("rule")) };
            let ev = if s("evidence").is_empty() { String::new() } else { format!(" ({})", s("evidence")) };
            format!("{}{rule}: {}{ev}", s("verdict"), s("reason"))
        }
        kind::LLM_EXCHANGE | crate::llm::LLM_FAILURE => crate::llm::describe_event(&e.kind, p),
        other => stages.iter().find_map(|s| s.describe_event(other, p)).unwrap_or_else(|| p.to_string()),
    }
}

/// Width of the text `explain` prints (a terminal of 100 columns).
const WIDTH: usize = 100;

/// `text` in lines of at most `width` characters: after each "; " first (one finding per
/// line, the `;` kept), then between words (a single word longer than `width` stays whole).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let parts: Vec<&str> = text.split("; ").collect();
    for (i, part) in parts.iter().enumerate() {
        // The separator stays at the end of its finding's line.
        let part = if i + 1 < parts.len() { format!("{part};") } else { part.to_string() };
        let mut line = String::new();
        for w in part.split(' ') {
            if !line.is_empty() && line.chars().count() + 1 + w.chars().count() > width {
                out.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(w);
        }
        out.push(line);
    }
    out
}

/// `text` wrapped to [`WIDTH`] after a first-line prefix, later lines indented by `indent`.
fn block(out: &mut String, first: &str, indent: usize, text: &str) {
    let lines = wrap(text, WIDTH.saturating_sub(indent.max(first.chars().count())).max(20));
    for (i, l) in lines.iter().enumerate() {
        if i == 0 {
            out.push_str(first);
        } else {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(l);
        out.push('\n');
    }
}

/// The explanation for a terminal: the item and its status, then the lineage oldest first,
/// grouped by stage run, every line within [`WIDTH`] columns (`--json` has every payload).
pub fn render(x: &Explanation) -> String {
    let mut out = String::new();
    block(&mut out, "", 2, &format!("{} `{}`: {}", x.item, x.id, x.status));
    if let Some(r) = &x.record {
        if let Some(d) = r.get("description").and_then(Value::as_str) {
            block(&mut out, "  description: ", 4, d);
        }
        if let Some(p) = r.get("parameters").and_then(Value::as_array) {
            let names: Vec<&str> = p.iter().filter_map(Value::as_str).collect();
            let names = if names.is_empty() { "none".into() } else { names.join(", ") };
            block(&mut out, "  parameters: ", 4, &names);
        }
    }
    out.push_str("\nlineage (oldest first), by stage:\n");
    let stages = crate::stages::all();
    let kind_w = x.lineage.iter().map(|e| e.kind.len()).max().unwrap_or(0).min(20);
    let mut group: Option<(&str, i64)> = None;
    for e in &x.lineage {
        if group != Some((e.stage.as_str(), e.run_id)) {
            out.push_str(&format!("{} (run {})\n", e.stage, e.run_id));
            group = Some((e.stage.as_str(), e.run_id));
        }
        let head = format!("  #{:<6} {:<kind_w$} ", e.id, e.kind);
        let indent = head.chars().count();
        block(&mut out, &head, indent, &describe(e, &stages));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn families_describe_their_own_events_through_the_stage_list() {
        let stages = crate::stages::all();
        let ev = |kind: &str, payload: &Value| Event {
            id: 1,
            run_id: 1,
            kind: kind.into(),
            stage: "s".into(),
            subject: None,
            time: String::new(),
            payload: payload.clone(),
            parents: vec![],
        };
        let p = json!({"decision": "accept", "verdict": "keep", "reason": "r", "reviewer": "ada", "score": 4});
        let curated = describe(&ev(crate::logs::kind::DECISION, &p), &stages);
        assert_eq!(curated, crate::logs::curate::describe(&p));
        for k in [crate::review::kind::REVIEW, crate::review::kind::DECISION, crate::review::kind::ASSIGN] {
            assert_eq!(describe(&ev(k, &p), &stages), crate::review::describe(k, &p), "{k}");
        }
        assert_ne!(curated, p.to_string());
        assert_eq!(describe(&ev("nobody.records.this", &p), &stages), p.to_string());
    }

    #[test]
    fn each_familys_ids_are_answered_by_one_stage_of_the_list() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path()).unwrap();
        let ev = |k: &str, subject: &str, p: Value| crate::ledger::NewEvent::new(k, Some(subject), p);
        let events = [
            ev(crate::logs::kind::SPLIT, "log:a", json!({"pool": "benchmark"})),
            ev(crate::efs::finalize::SET_EVENT, "efs:s1", json!({"status": "verified", "members": ["x::a", "y::b"]})),
            ev(kind::VERDICT, "edge:a->b", json!({"check": "graph-edge", "accepted": true, "reason": "r"})),
            ev(crate::synth::kind::VALIDATION, "sample:c1", json!({"accepted": false, "reasons": ["r1", "r2"]})),
            ev(crate::review::kind::REVIEW, "sample:c1", json!({})),
            ev(crate::synth::kind::VALIDATION, "sample:c2", json!({"accepted": true})),
            ev(crate::review::kind::REVIEW, "sample:c2", json!({})),
            ev(kind::CATALOG_TOOL, "srv::tool", json!({})),
            ev(kind::FILTER_DECISION, "srv::tool", json!({"verdict": "drop", "rule": "meta", "reason": "why"})),
            ev(kind::CATALOG_SERVER, "srv", json!({})),
        ];
        let (run, _) = ledger.record_run("s", "c", "v", &events).unwrap();
        let stages = crate::stages::all();
        // Every stage that answers, but the first family's (`filter`), which `explain` asks
        // last: it answers for any subject with events.
        let answers = |id: &str| -> Vec<Explanation> {
            let families = stages.iter().filter(|s| s.spec().name != crate::filter::SPEC.name);
            families.filter_map(|s| s.explain_subject(&ledger, &[run], id).unwrap()).collect()
        };
        let want = [
            ("log:a", "log session", "pool: benchmark"),
            ("efs:s1", "EFS set", "final set (verified) of 2 member(s): x::a, y::b"),
            ("edge:a->b", "graph edge", "accepted by `graph build`: r"),
            ("sample:c1", "sample", "rejected by `validate`: r1; r2"),
            ("sample:c2", "sample", "accepted by `validate`; 1 review(s) so far, not merged yet"),
        ];
        for (id, item, status) in want {
            let x = answers(id);
            assert_eq!(x.len(), 1, "`{id}` is answered by {} stages", x.len());
            assert_eq!((x[0].item, x[0].status.as_str()), (item, status), "{id}");
            // As `explain` asks: the family's answer comes first.
            let first = family_answer(&stages, &ledger, &[run], id).unwrap().unwrap();
            assert_eq!((first.item, first.status), (item, status.to_string()), "{id}");
        }
        // Tools, servers and their decisions: `filter`'s, asked last.
        let tools = [
            ("srv::tool", "tool", "dropped by `filter` (rule `meta`): why"),
            ("filter:srv::tool", "filter decision", "dropped by `filter` (rule `meta`): why"),
            ("srv", "server", "imported; `filter` has not run"),
        ];
        for (id, item, status) in tools {
            assert!(answers(id).is_empty(), "`{id}` is answered by another family");
            let x = family_answer(&stages, &ledger, &[run], id).unwrap().unwrap();
            assert_eq!((x.item, x.status.as_str()), (item, status), "{id}");
        }
        // A tool no event is about: no family answers (`explain` says so); its decision: an error.
        assert!(family_answer(&stages, &ledger, &[run], "srv::nope").unwrap().is_none());
        let no_decision = family_answer(&stages, &ledger, &[run], "filter:srv").unwrap_err();
        assert!(no_decision.to_string().contains("no filter decision for `srv`"), "{no_decision}");
        // A family's id with no event in the current runs: the family says where its ids are.
        let missing = stages.iter().find_map(|s| s.explain_subject(&ledger, &[run], "log:nope").err()).unwrap();
        assert!(missing.to_string().contains("no log session `log:nope`"), "{missing}");
    }

    #[test]
    fn explain_names_no_familys_event_kind() {
        // Each family describes its events and explains its ids through the stage list:
        // explain names the foundation's kinds (`ledger::kind`) and the LLM client's only.
        let code = include_str!("explain.rs").split("#[cfg(test)]").next().unwrap();
        // Shaped like an event kind: lower-case words joined by dots (`logs.decision`).
        let kind_like = |l: &str| {
            let word = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            l.contains('.') && l.split('.').all(word)
        };
        for k in [
            crate::logs::kind::DECISION,
            crate::logs::kind::SPLIT,
            crate::review::kind::DECISION,
            crate::synth::kind::VALIDATION,
            crate::efs::finalize::SET_EVENT,
        ] {
            assert!(kind_like(k), "`{k}` is not read as an event kind");
        }
        // The string literals (the text between quotes) of its code.
        for l in code.split('"').skip(1).step_by(2) {
            assert!(!kind_like(l) && l != "graph-edge", "explain.rs names `{l}`: its family should describe it");
        }
        for family in ["agent", "efs", "filter", "graph", "logs", "registry", "release", "review", "synth"] {
            assert!(!code.contains(&format!("crate::{family}::")), "explain.rs names `crate::{family}`");
        }
    }

    #[test]
    fn the_text_is_a_tree_by_stage_run_within_100_columns() {
        let ev = |id: i64, stage: &str, run_id: i64, reason: &str| Event {
            id,
            run_id,
            kind: crate::ledger::kind::FILTER_DECISION.into(),
            stage: stage.into(),
            subject: None,
            time: String::new(),
            payload: json!({"verdict": "drop", "reason": reason}),
            parents: vec![],
        };
        let long = "every tool of the server was dropped by a rule, and the server has no tool left; ".repeat(3);
        let x = Explanation {
            id: "srv".into(),
            item: "server",
            status: format!("dropped: {long}"),
            record: Some(json!({"description": long, "parameters": ["a", "b"]})),
            lineage: vec![ev(1, "filter", 2, "short"), ev(2, "filter", 2, &long), ev(3, "review", 5, "again")],
        };
        let text = render(&x);
        for l in text.lines() {
            assert!(l.chars().count() <= WIDTH, "{} columns: {l}", l.chars().count());
        }
        let heads: Vec<&str> = text.lines().filter(|l| l.ends_with(')') && !l.starts_with(' ')).collect();
        assert_eq!(heads, ["filter (run 2)", "review (run 5)"], "{text}");
        // Nothing is lost: every word of the long reason is there, in order.
        let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("drop: every tool of the server was dropped by a rule, and the server has no tool left"),
            "{text}"
        );
    }
}
