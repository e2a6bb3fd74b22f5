//! Review sheets: `benchgen review export` (stage `review-export`) writes one sheet per
//! reviewer, `benchgen review import` (stage `review-import`) reads the filled ones back.
//!
//! Sheet `artifacts/review-export/sheets/<reviewer>.csv` (and `.xlsx` with 1–N
//! drop-downs on the score cells), one row per assigned sample:
//! `sample_id,content_hash,reviewer,kind,scenario,query,conversation,final_answer,<dimension ids…>,note`.
//! `conversation` shows each turn's request, tool-call groups with arguments and
//! shortened results. CSV cells a spreadsheet would evaluate (`= + - @`, tab, CR) get a
//! leading `'`, removed on import.
//!
//! Import reads every `reviews/returned/*.csv` and `*.xlsx` (the exported workbook, filled
//! in and saved as it is: worksheet `review`, else the first one) and the web app's
//! submissions (`reviews/web/scores.jsonl`). Both sheet formats give the same rows and
//! the same checks; an XLSX cell holding a formula or an error value is a problem (never
//! evaluated), and XLSX locations are `file:row`. Every row is checked: known sample, the reviewer is
//! assigned to it, the sample still has the content hash it was exported with (an edited
//! sample invalidates stale scores), every score an integer on the scale, no sample
//! scored twice by one reviewer. All problems are reported with `file:line`, and nothing
//! is applied unless every row is valid. A row with no score and no note is "not scored
//! yet" and counted as such. A web submission for an edited sample is left out and listed
//! in `report.json` (`web_stale`), since the web app shows the new content to score again.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::assign::{ASSIGNMENTS, Assignments, SAMPLES};
use super::submissions::{WebScore, web_dir};
use super::{Score, ScoreKind};
use crate::csvout::{SheetRow, restore_cell};
use crate::error::{InputError, Problem};
use crate::ledger::NewEvent;
use crate::model::Sample;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const EXPORT_STAGE: &str = "review-export";
pub const IMPORT_STAGE: &str = "review-import";

/// Validated human scores, one [`Score`] a line sorted by (sample, reviewer).
pub const SCORES: Artifact<Score> = Artifact::new(IMPORT_STAGE, "scores.jsonl");

pub const FIXED: [&str; 8] =
    ["sample_id", "content_hash", "reviewer", "kind", "scenario", "query", "conversation", "final_answer"];

/// The sheet header for a rubric.
pub fn header(a: &Assignments) -> Vec<String> {
    let mut h: Vec<String> = FIXED.iter().map(|s| s.to_string()).collect();
    h.extend(a.dimensions.iter().map(|d| d.id.clone()));
    h.push("note".into());
    h
}

pub static EXPORT_SPEC: StageSpec = StageSpec {
    name: EXPORT_STAGE,
    command: "review export",
    version: 1,
    about: "one review sheet per reviewer (CSV, and XLSX with score drop-downs)",
    reads: &[ASSIGNMENTS.read(), SAMPLES.read()],
    writes: &["sheets/*", "report.md"],
    section: Some("review"),
};

pub struct ExportStage;

impl Stage for ExportStage {
    fn spec(&self) -> &'static StageSpec {
        &EXPORT_SPEC
    }
    fn help(&self) -> &'static str {
        "One sheet per reviewer: `artifacts/review-export/sheets/<id>.csv` and `.xlsx`.

         Reads `review-assign/assignments.json` and `samples.jsonl`. Each row shows the query,
         every turn with its tool-call groups (arguments, shortened results) and the answer,
         with empty score columns (XLSX: drop-downs) and a note. Writes `report.md` too."
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        Ok(Plan {
            inputs: vec![],
            config_hash: section_hash(&json!({"result_chars": super::settings(s).result_chars}))?,
        })
    }
    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let a: Assignments = inputs.json(&ASSIGNMENTS)?;
        let samples: Vec<Sample> =
            super::from_jsonl(inputs.bytes_of(&SAMPLES)?, "artifacts/review-assign/samples.jsonl")?;
        let by_id: BTreeMap<&str, &Sample> = samples.iter().map(|s| (s.id.as_str(), s)).collect();
        let chars = super::settings(ctx.settings).result_chars;
        let mut report = String::from("# Review sheets\n\n| reviewer | samples | CSV | XLSX |\n|---|---|---|---|\n");
        for r in &a.reviewers {
            let rows: Vec<Vec<String>> = a
                .samples
                .iter()
                .filter(|x| x.reviewers.contains(&r.id))
                .map(|x| row(&a, x, by_id[x.id.as_str()], &r.id, chars))
                .collect();
            out.file(&format!("sheets/{}.csv", r.id), csv_sheet(&a, &rows)?);
            out.file(&format!("sheets/{}.xlsx", r.id), xlsx_sheet(&a, &rows)?);
            report.push_str(&format!(
                "| `{}` | {} | `sheets/{}.csv` | `sheets/{}.xlsx` |\n",
                r.id,
                rows.len(),
                r.id,
                r.id
            ));
        }
        report.push_str(
            "\nFill in the score columns (and `note`) of either file, save it (XLSX as it is, or CSV), and put it \
             in `reviews/returned/`; then run `benchgen review import`.\n",
        );
        out.file("report.md", report.into_bytes());
        out.count("sheets", a.reviewers.len());
        out.count("rows", a.samples.len() * 2);
        out.notes.push(format!(
            "{} sheets (CSV + XLSX) for {} samples under `artifacts/review-export/sheets/`",
            a.reviewers.len(),
            a.samples.len()
        ));
        Ok(())
    }
}

fn row(a: &Assignments, x: &super::assign::Assigned, s: &Sample, reviewer: &str, chars: usize) -> Vec<String> {
    let query = s.turns.first().map(|t| t.user.trim().to_string()).unwrap_or_default();
    let answer = s.turns.last().and_then(|t| t.gold_reply.clone()).unwrap_or_default();
    let mut r = vec![
        x.id.clone(),
        x.content_hash.clone(),
        reviewer.to_string(),
        x.kind.as_str().to_string(),
        x.scenario.join(" / "),
        query,
        super::render_sample(s, chars),
        answer,
    ];
    r.extend(a.dimensions.iter().map(|_| String::new()));
    r.push(String::new());
    r
}

fn csv_sheet(a: &Assignments, rows: &[Vec<String>]) -> Result<Vec<u8>> {
    // The project's one CSV writer neutralises formula cells (`restore` undoes it on import).
    let mut w = crate::csvout::Writer::new();
    w.write_record(header(a))?;
    for r in rows {
        w.write_record(r)?;
    }
    w.into_bytes()
}

fn xlsx_sheet(a: &Assignments, rows: &[Vec<String>]) -> Result<Vec<u8>> {
    use rust_xlsxwriter::{DataValidation, DocProperties, ExcelDateTime, Format, Workbook};
    let x = |e: rust_xlsxwriter::XlsxError| anyhow::anyhow!("xlsx: {e}");
    let mut wb = Workbook::new();
    // A fixed creation time: the same assignments give byte-identical sheets.
    let when = ExcelDateTime::from_ymd(2026, 1, 1).map_err(x)?;
    wb.set_properties(&DocProperties::new().set_creation_datetime(&when));
    let ws = wb.add_worksheet();
    ws.set_name("review").map_err(x)?;
    let bold = Format::new().set_bold();
    let wrap = Format::new().set_text_wrap();
    for (c, h) in header(a).iter().enumerate() {
        ws.write_string_with_format(0, c as u16, h, &bold).map_err(x)?;
    }
    for (i, r) in rows.iter().enumerate() {
        for (c, cell) in r.iter().enumerate() {
            // Strings, never formulas: a cell starting with `=` stays text.
            ws.write_string_with_format(i as u32 + 1, c as u16, cell, &wrap).map_err(x)?;
        }
    }
    ws.set_column_width(6, 80).map_err(x)?;
    ws.set_column_width(5, 40).map_err(x)?;
    ws.set_column_width(7, 40).map_err(x)?;
    ws.set_freeze_panes(1, 1).map_err(x)?;
    if !rows.is_empty() {
        let values: Vec<String> = (a.scale_min..=a.scale_max).map(|v| v.to_string()).collect();
        let dv = DataValidation::new().allow_list_strings(&values).map_err(x)?;
        let first = FIXED.len() as u16;
        let last = first + a.dimensions.len() as u16 - 1;
        ws.add_data_validation(1, first, rows.len() as u32, last, &dv).map_err(x)?;
    }
    wb.save_to_buffer().map_err(x)
}

/// `reviews/returned/`: where filled sheets come back.
pub fn returned_dir(s: &Settings) -> PathBuf {
    s.root.join("reviews").join("returned")
}

pub fn web_scores_path(s: &Settings) -> PathBuf {
    web_dir(s).join("scores.jsonl")
}

pub fn returned_sheets(s: &Settings) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(returned_dir(s))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    // `~$x.xlsx` is Excel's lock file while a sheet is open; `.x` are hidden files.
                    let hidden = name.starts_with("~$") || name.starts_with('.');
                    let ext = p.extension().and_then(|x| x.to_str()).unwrap_or("").to_ascii_lowercase();
                    !hidden && (ext == "csv" || ext == "xlsx") && p.is_file()
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// What an import found.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Imported {
    pub scores: Vec<Score>,
    pub empty_rows: usize,
    /// Web submissions for samples edited since (shown again to their reviewers).
    pub web_stale: Vec<serde_json::Value>,
}

/// Check every sheet row and web submission; all problems at once, nothing on error.
pub fn import(
    a: &Assignments,
    sheets: &[(String, Vec<u8>)],
    web: Option<(&str, &[u8])>,
) -> Result<Imported, InputError> {
    let mut problems = Vec::new();
    let mut got: BTreeMap<(String, String), Score> = BTreeMap::new();
    let mut out = Imported::default();
    let expected = header(a);
    for (name, bytes) in sheets {
        let rows = if is_xlsx(name) {
            xlsx_rows(name, bytes, &expected, &mut problems)
        } else {
            csv_rows(name, bytes, &expected, &mut problems)
        };
        for SheetRow { loc, cells } in rows {
            let cell = |i: usize| cells.get(i).cloned().unwrap_or_default();
            let (id, hash, reviewer) = (cell(0), cell(1), cell(2));
            let first_dim = FIXED.len();
            let raw: Vec<String> = (0..a.dimensions.len()).map(|i| cell(first_dim + i)).collect();
            let note = cell(first_dim + a.dimensions.len());
            if raw.iter().all(String::is_empty) && note.is_empty() {
                out.empty_rows += 1;
                continue;
            }
            let mut scores = BTreeMap::new();
            let before = problems.len();
            for (d, v) in a.dimensions.iter().zip(&raw) {
                match v.parse::<u8>() {
                    Ok(n) if (a.scale_min..=a.scale_max).contains(&n) => {
                        scores.insert(d.id.clone(), n);
                    }
                    // The sample is named too: a reviewer finds the row by its id, not its line.
                    _ if v.is_empty() => {
                        problems.push(Problem::new(&loc, format!("sample `{id}`: `{}` has no score", d.id)))
                    }
                    _ => problems.push(Problem::new(
                        &loc,
                        format!(
                            "sample `{id}`: `{}` must be a whole number from {} to {}, found `{v}`",
                            d.id, a.scale_min, a.scale_max
                        ),
                    )),
                }
            }
            check_row(a, &id, &hash, &reviewer, &loc, &mut problems);
            if problems.len() > before {
                continue;
            }
            let key = (id.clone(), reviewer.clone());
            if let Some(prev) = got.get(&key) {
                problems.push(Problem::new(&loc, format!("`{reviewer}` already scored `{id}` at {}", prev.source)));
                continue;
            }
            got.insert(
                key,
                Score {
                    sample_id: id,
                    reviewer,
                    kind: ScoreKind::Human,
                    content_hash: hash,
                    scores,
                    note,
                    source: loc,
                },
            );
        }
    }
    if let Some((shown, bytes)) = web {
        match super::from_jsonl::<WebScore>(bytes, shown) {
            Err(e) => problems.push(Problem::new(shown, format!("{e:#}"))),
            Ok(items) => {
                for (i, w) in items.into_iter().enumerate() {
                    let loc = format!("{shown}:{}", i + 1);
                    let Some(x) = a.sample(&w.sample_id) else {
                        out.web_stale.push(json!({"sample_id": w.sample_id, "reviewer": w.reviewer,
                            "reason": "the sample is no longer under review"}));
                        continue;
                    };
                    if x.content_hash != w.content_hash {
                        out.web_stale.push(json!({"sample_id": w.sample_id, "reviewer": w.reviewer,
                            "reason": format!("the sample changed since it was scored ({} → {})", w.content_hash, x.content_hash)}));
                        continue;
                    }
                    let before = problems.len();
                    check_row(a, &w.sample_id, &w.content_hash, &w.reviewer, &loc, &mut problems);
                    let dims_ok = a
                        .dimensions
                        .iter()
                        .all(|d| w.scores.get(&d.id).is_some_and(|v| (a.scale_min..=a.scale_max).contains(v)))
                        && w.scores.len() == a.dimensions.len();
                    if !dims_ok {
                        problems.push(Problem::new(&loc, "scores do not match the rubric"));
                    }
                    if problems.len() > before {
                        continue;
                    }
                    let key = (w.sample_id.clone(), w.reviewer.clone());
                    if let Some(prev) = got.get(&key) {
                        problems.push(Problem::new(
                            &loc,
                            format!("`{}` scored `{}` in the web app and at {}", w.reviewer, w.sample_id, prev.source),
                        ));
                        continue;
                    }
                    got.insert(
                        key,
                        Score {
                            sample_id: w.sample_id,
                            reviewer: w.reviewer,
                            kind: ScoreKind::Human,
                            content_hash: w.content_hash,
                            scores: w.scores,
                            note: w.note,
                            source: format!("web ({})", w.submitted_at),
                        },
                    );
                }
            }
        }
    }
    if !problems.is_empty() {
        return Err(InputError { file: "the review sheets".into(), problems });
    }
    out.scores = got.into_values().collect();
    Ok(out)
}

/// Whether a returned sheet is read as XLSX (by its file name) rather than CSV.
pub fn is_xlsx(name: &str) -> bool {
    name.rsplit('.').next().is_some_and(|x| x.eq_ignore_ascii_case("xlsx"))
}

fn csv_rows(name: &str, bytes: &[u8], expected: &[String], problems: &mut Vec<Problem>) -> Vec<SheetRow> {
    // Spreadsheets save CSV with a byte-order mark; review sheets accept it.
    crate::csvout::read_rows(name, bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes), expected, problems)
}

/// Spreadsheet column letters of a 0-based column index (0 → `A`, 26 → `AA`).
fn column_letters(mut c: u32) -> String {
    let mut s = Vec::new();
    loop {
        s.push(b'A' + (c % 26) as u8);
        if c < 26 {
            break;
        }
        c = c / 26 - 1;
    }
    s.reverse();
    String::from_utf8(s).expect("ASCII")
}

/// Used cells of a worksheet by 0-based (row, column): the text, or why it cannot be read.
type Cells = BTreeMap<(u32, u32), Result<String, String>>;

/// Every used cell of the worksheet `review` (else the first one) of an XLSX workbook, by
/// 0-based (row, column): its text, or why it cannot be read (a formula, an error value).
fn xlsx_cells(bytes: &[u8], expected: &[String]) -> Result<Cells, String> {
    use calamine::{Data, Reader, Xlsx};
    let mut wb = Xlsx::new(std::io::Cursor::new(bytes)).map_err(|e| format!("not an XLSX workbook: {e}"))?;
    let names = wb.sheet_names();
    let sheet =
        names.iter().find(|n| *n == "review").or(names.first()).cloned().ok_or("the workbook has no worksheet")?;
    let cell_name = |r: u32, c: u32| {
        let head = expected.get(c as usize).map(|h| format!("`{h}` ")).unwrap_or_default();
        format!("{head}(cell {}{})", column_letters(c), r + 1)
    };
    let mut cells = BTreeMap::new();
    let read = wb.worksheet_cells_reader(&sheet).and_then(|mut rd| {
        while let Some(c) = rd.next_cell_with_formula()? {
            let (r, col) = c.pos;
            let text = match (c.formula.filter(|f| !f.is_empty()), Data::from(c.value)) {
                (Some(f), _) => Err(format!(
                    "{} holds a formula (`={f}`): type the value itself; formulas are never evaluated",
                    cell_name(r, col)
                )),
                (None, Data::Error(e)) => Err(format!("{} holds the error value `{e}`", cell_name(r, col))),
                (None, d) => Ok(restore_cell(&d.to_string())),
            };
            if text.as_ref().is_ok_and(String::is_empty) {
                continue;
            }
            cells.insert((r, col), text);
        }
        Ok(())
    });
    read.map_err(|e| format!("cannot read worksheet `{sheet}`: {e}"))?;
    Ok(cells)
}

/// The rows of a filled XLSX sheet (the worksheet `review`, else the first one), checked
/// like a CSV sheet: row 1 is the header, every later non-blank row a data row located
/// as `file:row`. A cell holding a formula or an error value is a problem, never
/// evaluated or taken from its cached value; numbers read as the reviewer typed them
/// (`4`, `4.5`); text cells get the same `'` restoration as the CSV reader applies.
/// Cells are streamed and kept sparse, so a stray value far away (say in `XFD1048576`)
/// is one problem, not a grid of 17 billion cells in memory.
fn xlsx_rows(name: &str, bytes: &[u8], expected: &[String], problems: &mut Vec<Problem>) -> Vec<SheetRow> {
    let at = |row: u32| format!("{name}:{}", row + 1);
    // The reader is third-party code on a file people edited by hand: a panic on malformed
    // data (calamine overflows on absurd row numbers, for one) is a problem of this file,
    // not the end of the import.
    let cells = match std::panic::catch_unwind(|| xlsx_cells(bytes, expected)) {
        Ok(Ok(cells)) => cells,
        Ok(Err(e)) => {
            problems.push(Problem::new(at(0), e));
            return Vec::new();
        }
        Err(_) => {
            problems.push(Problem::new(at(0), "not a readable XLSX workbook (the reader failed on malformed data)"));
            return Vec::new();
        }
    };
    let width = expected.len() as u32;
    let header: Vec<&str> = {
        let last = cells.range((0, 0)..(1, 0)).map(|((_, c), _)| *c + 1).max().unwrap_or(0);
        (0..last).map(|c| cells.get(&(0, c)).and_then(|t| t.as_deref().ok()).unwrap_or("")).collect()
    };
    if !header.iter().copied().eq(expected.iter().map(String::as_str)) {
        problems.push(Problem::new(
            at(0),
            format!("header must be `{}`, found `{}`", expected.join(","), header.join(",")),
        ));
        return Vec::new();
    }
    let rows: std::collections::BTreeSet<u32> = cells.keys().map(|(r, _)| *r).filter(|r| *r > 0).collect();
    let mut out = Vec::new();
    for r in rows {
        let before = problems.len();
        let mut row = vec![String::new(); expected.len()];
        for ((_, c), text) in cells.range((r, 0)..(r + 1, 0)) {
            match text {
                Err(e) => problems.push(Problem::new(at(r), e)),
                Ok(_) if *c >= width => problems.push(Problem::new(
                    at(r),
                    format!(
                        "cell {}{} lies right of the last column `{}`",
                        column_letters(*c),
                        r + 1,
                        expected[expected.len() - 1]
                    ),
                )),
                Ok(t) => row[*c as usize] = t.clone(),
            }
        }
        if problems.len() == before {
            out.push(SheetRow { loc: at(r), cells: row });
        }
    }
    out
}

fn check_row(a: &Assignments, id: &str, hash: &str, reviewer: &str, loc: &str, problems: &mut Vec<Problem>) {
    let Some(x) = a.sample(id) else {
        problems.push(Problem::new(loc, format!("unknown sample `{id}` (not under review)")));
        return;
    };
    if !x.reviewers.iter().any(|r| r == reviewer) {
        problems.push(Problem::new(
            loc,
            format!("reviewer `{reviewer}` is not assigned to `{id}` (assigned: {})", x.reviewers.join(", ")),
        ));
    }
    if x.content_hash != hash {
        problems.push(Problem::new(
            loc,
            format!(
                "stale: `{id}` changed since this sheet was exported (sheet {hash}, now {}); export again and rescore it",
                x.content_hash
            ),
        ));
    }
}

pub static IMPORT_SPEC: StageSpec = StageSpec {
    name: IMPORT_STAGE,
    command: "review import",
    version: 1,
    about: "filled review sheets (`reviews/returned/*.csv`, `*.xlsx`) and web submissions → validated scores",
    reads: &[ASSIGNMENTS.read()],
    writes: &["scores.jsonl", "report.json"],
    section: Some("review"),
};

pub struct ImportStage;

impl Stage for ImportStage {
    fn spec(&self) -> &'static StageSpec {
        &IMPORT_SPEC
    }
    fn help(&self) -> &'static str {
        "Validate and apply filled sheets (`reviews/returned/*.csv`, `*.xlsx`) and web submissions.

         Reads `review-assign/assignments.json`, the sheets and `reviews/web/scores.jsonl`
         (rewritten from the web app's database first). Every bad row (score off the scale,
         reviewer not assigned, stale content hash, duplicate) is reported with `file:line`
         and nothing is applied. Writes `artifacts/review-import/scores.jsonl` and `report.json`."
    }
    fn prepare(&self, s: &Settings, _: &crate::printer::Printer) -> Result<()> {
        // Events a killed web app left in its outbox reach the ledger, and its scores and
        // adjudications reach `reviews/web/`, before this stage hashes them.
        super::submissions::dump(s).map(drop)
    }
    fn enabled(&self, s: &Settings) -> bool {
        s.section::<super::ReviewSettings>().is_some()
            && (!returned_sheets(s).is_empty() || web_scores_path(s).exists())
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        let mut inputs = returned_sheets(s);
        if web_scores_path(s).exists() {
            inputs.push(web_scores_path(s));
        }
        if inputs.is_empty() {
            return Err(crate::error::hinted(
                format!(
                    "no filled sheets in `{}` and no web submissions in `{}`",
                    s.display_path(&returned_dir(s)),
                    s.display_path(&web_scores_path(s))
                ),
                "run `benchgen review export`, fill in a sheet and save it (CSV or XLSX) in `reviews/returned/`, or use `benchgen review serve`",
            ));
        }
        Ok(Plan { inputs, config_hash: section_hash(&"review-import")? })
    }
    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let a: Assignments = inputs.json(&ASSIGNMENTS)?;
        let mut sheets = Vec::new();
        for p in returned_sheets(s) {
            sheets.push((s.display_path(&p), inputs.bytes(&p)?.to_vec()));
        }
        let web_path = web_scores_path(s);
        let web_bytes = if web_path.exists() { Some(inputs.bytes(&web_path)?.to_vec()) } else { None };
        let web_shown = s.display_path(&web_path);
        let imported = import(&a, &sheets, web_bytes.as_deref().map(|b| (web_shown.as_str(), b)))
            .context("nothing was imported")?;
        for sc in &imported.scores {
            out.event(NewEvent::new(
                super::kind::REVIEW,
                Some(&crate::model::Sample::subject_for(&sc.sample_id)),
                serde_json::to_value(sc)?,
            ));
        }
        let web = imported.scores.iter().filter(|x| x.source.starts_with("web")).count();
        out.file("scores.jsonl", super::to_jsonl(&imported.scores)?);
        out.json(
            "report.json",
            &json!({"sheets": sheets.iter().map(|(n, _)| n).collect::<Vec<_>>(), "scores": imported.scores.len(),
                    "from_web": web, "empty_rows": imported.empty_rows, "web_stale": imported.web_stale}),
        )?;
        out.count("scores", imported.scores.len());
        out.count("from_web", web);
        out.count("empty_rows", imported.empty_rows);
        out.count("web_stale", imported.web_stale.len());
        out.notes.push(format!(
            "{} scores imported ({} from sheets, {web} from the web app); {} rows not scored yet; {} stale web submissions left out",
            imported.scores.len(),
            imported.scores.len() - web,
            imported.empty_rows,
            imported.web_stale.len()
        ));
        Ok(())
    }
}
