//! Human review of candidate sets: `efs review export` writes a sheet,
//! reviewers fill in decisions, `efs review import` checks and records them.
//!
//! Sheet `reviews/efs/efs_review.csv` (UTF-8, comma-separated, one header row):
//! `set_id,row,tool_id,server,description,signal,decision,target,reviewer,note`.
//! - `row = set` (one per set): decision `approve`, `reject` (drop the whole set)
//!   or `merge` (`target` = another set id);
//! - `row = member` (one per member): `drop`, or `split` (`target` = a label;
//!   members of one set sharing a label become a new set);
//! - `row = candidate` (a tool outside the set that the top-down check selected;
//!   reviewers may add rows of their own): `add`.
//!
//! An empty decision means "no decision". A decision needs a `reviewer`.
//! Cells that a spreadsheet would run as a formula (starting with `=`, `+`, `-`,
//! `@`, tab or carriage return) are written with a leading `'`, which import
//! removes again. Import reads every `*.csv` under `reviews/efs/`, never changes
//! them, and rejects the whole import when any row is malformed, naming each
//! problem as `file:line`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::build::{CandidateSet, Sets};
use super::topdown::ReviewItem;
use crate::csvout::restore_cell;
use crate::error::{InputError, Problem};
use crate::ledger::{NewEvent, kind};
use crate::model::Catalog;
use crate::settings::Settings;
use crate::stage::{Artifact, Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const SHEET: &str = "efs_review.csv";
pub const HEADER: [&str; 10] =
    ["set_id", "row", "tool_id", "server", "description", "signal", "decision", "target", "reviewer", "note"];

/// The review sheet for the current candidate sets and top-down items.
pub fn export_sheet(sets: &[CandidateSet], items: &[ReviewItem], catalog: &Catalog) -> Result<Vec<u8>> {
    let tools: HashMap<&str, (&str, &str)> =
        catalog.tools().map(|(s, t)| (t.id.as_str(), (s.name.as_str(), t.description.as_str()))).collect();
    let mut by_set: BTreeMap<&str, Vec<&ReviewItem>> = BTreeMap::new();
    for it in items {
        by_set.entry(it.set_id.as_str()).or_default().push(it);
    }
    let mut w = crate::csvout::Writer::new();
    w.write_record(HEADER)?;
    for set in sets {
        let its = by_set.get(set.id.as_str()).cloned().unwrap_or_default();
        let set_signal: Vec<&str> = its.iter().filter(|i| i.tool_id.is_empty()).map(|i| i.detail.as_str()).collect();
        let summary = format!("{} members on {} servers", set.members.len(), set.servers.len());
        let row = |w: &mut crate::csvout::Writer, cells: [&str; 6]| -> Result<()> {
            let [sid, kind, tool, server, desc, signal] = cells;
            w.write_record([sid, kind, tool, server, desc, signal, "", "", "", ""])
        };
        let sig = if set_signal.is_empty() { summary } else { format!("{summary}; {}", set_signal.join("; ")) };
        row(&mut w, [&set.id, "set", "", "", "", &sig])?;
        for m in &set.members {
            let (server, desc) = tools.get(m.as_str()).copied().unwrap_or(("", ""));
            let signal: Vec<&str> = its.iter().filter(|i| i.tool_id == *m).map(|i| i.kind.as_str()).collect::<Vec<_>>();
            row(&mut w, [&set.id, "member", m, server, desc, &signal.join("; ")])?;
        }
        for it in its.iter().filter(|i| i.kind == "outside-selected") {
            let (server, desc) = tools.get(it.tool_id.as_str()).copied().unwrap_or(("", ""));
            row(&mut w, [&set.id, "candidate", &it.tool_id, server, desc, &it.detail])?;
        }
    }
    w.into_bytes()
}

/// One imported decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub set_id: String,
    /// `approve`, `reject`, `merge`, `drop`, `split` or `add`.
    pub action: String,
    #[serde(default)]
    pub tool_id: String,
    #[serde(default)]
    pub target: String,
    pub reviewer: String,
    #[serde(default)]
    pub note: String,
    /// `file:line` of the row in the returned sheet.
    pub source: String,
}

/// Nothing but a UTF-8 byte order mark and white space.
fn is_blank_sheet(bytes: &[u8]) -> bool {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes).iter().all(u8::is_ascii_whitespace)
}

/// Read and check every sheet; all problems of all files are reported at once. An empty
/// or BOM-only sheet is a problem unless `allow_empty` (importing it would silently wipe
/// the decisions of an earlier import).
pub fn import_sheets(
    files: &[(String, Vec<u8>)],
    sets: &[CandidateSet],
    catalog: &Catalog,
    allow_empty: bool,
) -> std::result::Result<Vec<Decision>, InputError> {
    let set_ids: HashMap<&str, &CandidateSet> = sets.iter().map(|s| (s.id.as_str(), s)).collect();
    let tool_ids: BTreeSet<&str> = catalog.tools().map(|(_, t)| t.id.as_str()).collect();
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for (name, bytes) in files {
        if is_blank_sheet(bytes) {
            if !allow_empty {
                problems.push(Problem::new(
                    format!("{name}:1"),
                    "the sheet is empty (no header row): importing it would wipe the earlier decisions; \
                     fill it in, remove it, or pass `--allow-empty` to record no decisions from it",
                ));
            }
            continue;
        }
        let mut r = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(bytes.as_slice());
        let mut lines = crate::csvout::Lines::new(bytes);
        for (i, rec) in r.records().enumerate() {
            let line = match &rec {
                Ok(r) => lines.of(r.position(), i as u64 + 1),
                Err(e) => lines.of(e.position(), i as u64 + 1),
            };
            let loc = format!("{name}:{line}");
            let rec = match rec {
                Ok(r) => r,
                Err(e) => {
                    problems.push(Problem::new(&loc, format!("unreadable CSV row: {e}")));
                    continue;
                }
            };
            if i == 0 {
                let got: Vec<String> = rec.iter().map(restore_cell).collect();
                if got != HEADER {
                    problems.push(Problem::new(
                        &loc,
                        format!("the header must be `{}`, found `{}`", HEADER.join(","), got.join(",")),
                    ));
                    break;
                }
                continue;
            }
            if rec.iter().all(|c| c.trim().is_empty()) {
                continue;
            }
            if rec.len() != HEADER.len() {
                problems.push(Problem::new(&loc, format!("expected {} cells, found {}", HEADER.len(), rec.len())));
                continue;
            }
            let c: Vec<String> = rec.iter().map(restore_cell).collect();
            match row_decision(&c, &set_ids, &tool_ids) {
                Err(m) => problems.push(Problem::new(&loc, m)),
                Ok(None) => {}
                Ok(Some(action)) => out.push(Decision {
                    set_id: c[0].clone(),
                    action,
                    tool_id: c[2].clone(),
                    target: c[7].clone(),
                    reviewer: c[8].clone(),
                    note: c[9].clone(),
                    source: loc,
                }),
            }
        }
    }
    // A tool may be added to one set only.
    let mut added: HashMap<&str, &Decision> = HashMap::new();
    for d in out.iter().filter(|d| d.action == "add") {
        if let Some(prev) = added.insert(d.tool_id.as_str(), d) {
            problems.push(Problem::new(
                &d.source,
                format!("`{}` is also added to set `{}` at {}", d.tool_id, prev.set_id, prev.source),
            ));
        }
    }
    if problems.is_empty() { Ok(out) } else { Err(InputError { file: "reviews/efs".into(), problems }) }
}

/// The decision to record from one filled-in row, its cells `c` in [`HEADER`] order
/// (`None`: no decision, or `keep`), or what is wrong with the row.
fn row_decision(
    c: &[String],
    set_ids: &HashMap<&str, &CandidateSet>,
    tool_ids: &BTreeSet<&str>,
) -> std::result::Result<Option<String>, String> {
    let (set_id, row, tool, decision, target, reviewer) = (&c[0], &c[1], &c[2], c[6].to_lowercase(), &c[7], &c[8]);
    let Some(set) = set_ids.get(set_id.as_str()) else {
        return Err(format!("unknown set id `{set_id}` (rerun `benchgen efs review export` if the sets changed)"));
    };
    let allowed: &[&str] = match row.as_str() {
        "set" => &["approve", "reject", "merge"],
        "member" => &["drop", "split", "keep"],
        "candidate" => &["add"],
        other => return Err(format!("row kind must be `set`, `member` or `candidate`, found `{other}`")),
    };
    if decision.is_empty() {
        return if target.is_empty() { Ok(None) } else { Err("a `target` without a decision".into()) };
    }
    if !allowed.contains(&decision.as_str()) {
        return Err(format!("decision `{decision}` is not allowed on a `{row}` row (allowed: {})", allowed.join(", ")));
    }
    if reviewer.is_empty() {
        return Err(format!("decision `{decision}` has no reviewer"));
    }
    match row.as_str() {
        "set" if !tool.is_empty() => {
            return Err("a `set` row names no tool".into());
        }
        "member" if !set.members.contains(tool) => {
            return Err(format!("`{tool}` is not a member of set `{set_id}`"));
        }
        "candidate" if !tool_ids.contains(tool.as_str()) => {
            return Err(format!("`{tool}` is not a tool of the catalog"));
        }
        "candidate" if set.members.contains(tool) => {
            return Err(format!("`{tool}` is already a member of set `{set_id}`"));
        }
        _ => {}
    }
    match decision.as_str() {
        "merge" if !set_ids.contains_key(target.as_str()) || target == set_id => {
            return Err(format!("`merge` needs another existing set id as target, found `{target}`"));
        }
        "split" if target.is_empty() => {
            return Err("`split` needs a target label (members sharing a label form a new set)".into());
        }
        "approve" | "reject" | "drop" | "add" | "keep" if !target.is_empty() => {
            return Err(format!("`{decision}` takes no target, found `{target}`"));
        }
        _ => {}
    }
    if decision == "keep" {
        return Ok(None); // the default; nothing to record
    }
    Ok(Some(decision))
}

pub fn review_dir(s: &Settings) -> PathBuf {
    s.root.join("reviews").join("efs")
}
/// The reviewers' decisions, applied by `efs finalize`.
pub const DECISIONS: Artifact<Vec<Decision>> = Artifact::new("efs-review-import", "decisions.json");

pub static SPEC: StageSpec = StageSpec {
    name: "efs-review-import",
    command: "efs review import",
    version: 1,
    about: "read filled-in review sheets (`reviews/efs/*.csv`) into decisions",
    reads: &[crate::filter::CATALOG.read(), super::build::SETS.read()],
    writes: &["decisions.json"],
    section: Some("efs"),
};

/// The returned sheets: every `*.csv` in `reviews/efs/`, sorted by name.
pub fn sheet_files(s: &Settings) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(review_dir(s))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "csv") && p.is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `efs review export`: write the sheet; refuses to overwrite one with decisions unless `force`.
pub fn export(settings: &Settings, force: bool) -> Result<(PathBuf, usize)> {
    let sets: Sets = load_json(&super::build::SETS.path(settings), "run `benchgen efs build` first")?;
    let catalog = Catalog::load(&crate::filter::CATALOG.path(settings))?;
    let items_path = super::topdown::ITEMS.path(settings);
    let items: Vec<ReviewItem> =
        if items_path.exists() { load_json(&items_path, "rerun `benchgen efs topdown`")? } else { Vec::new() };
    let path = review_dir(settings).join(SHEET);
    if path.exists() && !force {
        let existing = std::fs::read(&path)?;
        let filled = import_sheets(&[(SHEET.to_string(), existing)], &sets.sets, &catalog, true)
            .map(|d| !d.is_empty())
            .unwrap_or(true);
        if filled {
            return Err(crate::error::hinted(
                format!("`{}` already holds review decisions; not overwriting it", settings.display_path(&path)),
                "import it first (`benchgen efs review import`), move it aside, or pass `--force`",
            ));
        }
    }
    let bytes = export_sheet(&sets.sets, &items, &catalog)?;
    crate::store::write_atomic(&path, &bytes)?;
    Ok((path, sets.sets.len()))
}

fn load_json<T: serde::de::DeserializeOwned>(path: &Path, hint: &str) -> Result<T> {
    let bytes = std::fs::read(path)
        .map_err(|e| crate::error::hinted(format!("cannot read `{}`: {e}", path.display()), hint.to_string()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("`{}` is not valid", path.display()))
}

/// `efs review import`, as a stage: reads the sheets, writes
/// `artifacts/efs-review-import/decisions.json`, one `review` ledger event per decision.
#[derive(Debug, Default)]
pub struct ReviewStage {
    /// `--allow-empty`: an empty or BOM-only sheet means "no decisions" instead of an error.
    pub allow_empty: bool,
}

impl Stage for ReviewStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Check and record the decisions in every `reviews/efs/*.csv`.

         Reads the sheets, `artifacts/filter/catalog.json` and `artifacts/efs-build/sets.json`
         (decisions must name existing sets and tools). Part of `benchgen run` once a sheet
         is in `reviews/efs/`. Writes `artifacts/efs-review-import/decisions.json` and one `review` ledger event
         per decision. Any malformed row rejects the whole import with `file:line`
         messages; the sheets are never modified. Skipped when up to date. An empty (or
         BOM-only) sheet is refused unless `--allow-empty`: it would wipe earlier decisions."
    }

    /// Part of `run` once there are sheets to import (they come back from people).
    fn enabled(&self, settings: &Settings) -> bool {
        settings.section::<super::EfsSettings>().is_some() && !sheet_files(settings).is_empty()
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        let sheets = sheet_files(settings);
        if sheets.is_empty() {
            return Err(crate::error::hinted(
                format!("no review sheets in `{}`", settings.display_path(&review_dir(settings))),
                "run `benchgen efs review export`, fill in the sheet, then import it",
            ));
        }
        Ok(Plan { inputs: sheets, config_hash: crate::settings::section_hash(&"efs-review")? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let catalog: Catalog = inputs.json(&crate::filter::CATALOG)?;
        let sets: Sets = inputs.json(&super::build::SETS)?;
        let mut files = Vec::new();
        for p in sheet_files(s) {
            files.push((s.display_path(&p), inputs.bytes(&p)?.to_vec()));
        }
        let decisions = import_sheets(&files, &sets.sets, &catalog, self.allow_empty)?;
        for d in &decisions {
            out.event(NewEvent::new(kind::REVIEW, Some(&format!("efs:{}", d.set_id)), serde_json::to_value(d)?));
        }
        let reviewers: BTreeSet<&str> = decisions.iter().map(|d| d.reviewer.as_str()).collect();
        out.json(DECISIONS.file, &decisions)?;
        out.count("decisions", decisions.len());
        out.count("sheets", files.len());
        out.notes.push(format!(
            "{} decisions by {} reviewer(s) from {} sheet(s)",
            decisions.len(),
            reviewers.len(),
            files.len()
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_cells_are_neutralised_and_restored() {
        use crate::csvout::neutralise;
        for c in ["=1+1", "+x", "-3+1", "@SUM(A1)"] {
            assert!(neutralise(c).starts_with('\''), "{c:?}");
            assert_eq!(restore_cell(&neutralise(c)), c);
        }
        assert!(neutralise("\tx").starts_with('\''));
        assert_eq!(neutralise("plain"), "plain");
        assert_eq!(restore_cell("'quoted but harmless"), "'quoted but harmless");
    }

    fn one_set() -> Vec<CandidateSet> {
        vec![CandidateSet {
            id: "S1".into(),
            members: vec!["a::x".into(), "a::y".into()],
            servers: vec!["a".into()],
            evidence: vec![],
        }]
    }

    /// Rows: header, a good `approve` (line 2), a quoted note spanning two lines (3–4), an
    /// unknown set (5), a decision without reviewer (6); joined with `eol`.
    fn sheet(eol: &str, bom: bool) -> Vec<u8> {
        let rows = [
            HEADER.join(","),
            "S1,set,,a,,,approve,,ana,".to_string(),
            format!("S1,member,a::x,a,,,drop,,bo,\"two{eol}lines\""),
            "Snope,set,,a,,,approve,,ana,".to_string(),
            "S1,member,a::y,a,,,drop,,,".to_string(),
        ];
        let mut out = if bom { b"\xEF\xBB\xBF".to_vec() } else { Vec::new() };
        out.extend_from_slice((rows.join(eol) + eol).as_bytes());
        out
    }

    #[test]
    fn crlf_and_lf_sheets_report_the_same_lines_and_sources() {
        for (eol, bom) in [("\n", false), ("\r\n", false), ("\r\n", true), ("\r", false)] {
            let files = [("s.csv".to_string(), sheet(eol, bom))];
            let err = import_sheets(&files, &one_set(), &Catalog::default(), false).unwrap_err();
            let locs: Vec<&str> = err.problems.iter().map(|p| p.location.as_str()).collect();
            assert_eq!(locs, ["s.csv:5", "s.csv:6"], "{eol:?} bom={bom}: {err}");
            // Without the bad rows, the decisions carry their own line as `source`.
            let mut good = sheet(eol, bom);
            let cut = String::from_utf8_lossy(&good).find("Snope").unwrap();
            good.truncate(cut);
            let d = import_sheets(&[("s.csv".to_string(), good)], &one_set(), &Catalog::default(), false).unwrap();
            let src: Vec<&str> = d.iter().map(|d| d.source.as_str()).collect();
            assert_eq!(src, ["s.csv:2", "s.csv:3"], "{eol:?} bom={bom}");
        }
    }

    #[test]
    fn empty_and_bom_only_sheets_are_refused_unless_allowed() {
        for bytes in [&b""[..], b"\xEF\xBB\xBF", b"\xEF\xBB\xBF\r\n", b"  \n"] {
            let files = [("s.csv".to_string(), bytes.to_vec())];
            let err = import_sheets(&files, &one_set(), &Catalog::default(), false).unwrap_err();
            assert_eq!(err.problems.len(), 1, "{bytes:?}");
            assert_eq!(err.problems[0].location, "s.csv:1");
            assert!(err.to_string().contains("--allow-empty"), "{err}");
            assert_eq!(import_sheets(&files, &one_set(), &Catalog::default(), true).unwrap(), vec![]);
        }
    }
}
