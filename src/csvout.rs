//! The one CSV writer of the project. Every CSV we write (filter lists, EFS pairs, review
//! sheets, registry merge tables, …) goes through [`Writer`], which neutralises cells a
//! spreadsheet would evaluate as a formula: text from registries and logs is untrusted,
//! and a tool description starting with `=HYPERLINK(…)` must stay text when someone opens
//! the file in Excel or LibreOffice (CSV injection).
//!
//! A cell starting with `=`, `+`, `-`, `@`, tab or carriage return gets a leading `'`
//! (also one that already starts with `'`s before such a character, so [`restore`] is an
//! exact inverse). Plain numbers (`-0.25`, `1e-3`) are left alone: a spreadsheet reads
//! them as numbers, never as formulas, and tools reading our CSVs keep numeric columns.
//! Readers of our own CSVs apply [`restore`] to every cell.

use anyhow::{Context, Result};
use serde::Serialize;

/// Characters that make a spreadsheet treat a cell as a formula (OWASP's list).
const TRIGGERS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// A decimal number as spreadsheets read it: `-?digits[.digits][e[+-]digits]`.
fn is_plain_number(cell: &str) -> bool {
    let s = cell.strip_prefix('-').unwrap_or(cell);
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = !int.is_empty() && digits(int) && digits(frac) && (frac.is_empty() || !mantissa.ends_with('.'));
    let exp_ok = exp.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exp_ok
}

/// Whether `cell` (after any leading `'`s) starts with a formula trigger.
fn triggers(cell: &str) -> bool {
    cell.trim_start_matches('\'').starts_with(TRIGGERS)
}

/// The cell as written: with a leading `'` when a spreadsheet would evaluate it.
pub fn neutralise(cell: &str) -> std::borrow::Cow<'_, str> {
    if triggers(cell) && !is_plain_number(cell) {
        std::borrow::Cow::Owned(format!("'{cell}"))
    } else {
        std::borrow::Cow::Borrowed(cell)
    }
}

/// Undo [`neutralise`] (exactly: `restore(neutralise(x)) == x` for every `x`).
pub fn restore(cell: &str) -> &str {
    match cell.strip_prefix('\'') {
        Some(rest) if triggers(rest) => rest,
        _ => cell,
    }
}

/// A cell read back from one of our sheets: trimmed, neutralisation undone.
pub fn restore_cell(cell: &str) -> String {
    restore(cell.trim()).to_string()
}

/// One data row of a returned sheet: where it is (`file:line`, or `file:row` for XLSX)
/// and its cells, formula neutralisation undone, exactly as many as the header has.
pub struct SheetRow {
    pub loc: String,
    pub cells: Vec<String>,
}

/// 1-based line numbers of records in a CSV text, counted by ourselves. The csv crate's
/// own line count runs one behind after CRLF line ends (Excel and Python's csv module write
/// them): a record's position is taken before the `\n` of the previous `\r\n` is consumed.
/// So the line is counted from the record's byte offset, past any line-end bytes the
/// position still points at. Records are asked for in order, so counting resumes where
/// the previous one stopped (linear in the text, not quadratic).
pub struct Lines<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Line ends in `bytes[..pos]`.
    ends: u64,
}

impl<'a> Lines<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0, ends: 0 }
    }

    /// The line of the record starting at byte `start`.
    pub fn line_at(&mut self, start: u64) -> u64 {
        let b = self.bytes;
        let mut start = (start as usize).min(b.len());
        while start < b.len() && matches!(b[start], b'\r' | b'\n') {
            start += 1;
        }
        if start < self.pos {
            (self.pos, self.ends) = (0, 0);
        }
        // `\n` ends a line; so does a lone `\r` (old Mac line ends), as for the csv reader.
        for (i, &c) in b.iter().enumerate().take(start).skip(self.pos) {
            if c == b'\n' || (c == b'\r' && b.get(i + 1) != Some(&b'\n')) {
                self.ends += 1;
            }
        }
        self.pos = start;
        self.ends + 1
    }

    /// The line of a record or of a read error, `fallback` when the reader gives no position.
    pub fn of(&mut self, pos: Option<&csv::Position>, fallback: u64) -> u64 {
        pos.map_or(fallback, |p| self.line_at(p.byte()))
    }
}

/// The data rows of a CSV sheet written with header `expected` (the review and graph
/// review sheets). Every problem — a wrong header (then no rows), a broken record, a
/// wrong cell count — goes into `problems` at `name:line`; good rows are returned.
/// Lines are counted right for LF, CRLF and CR line ends alike (see [`Lines`]).
pub fn read_rows(
    name: &str,
    bytes: &[u8],
    expected: &[impl AsRef<str>],
    problems: &mut Vec<crate::error::Problem>,
) -> Vec<SheetRow> {
    use crate::error::Problem;
    let expected: Vec<&str> = expected.iter().map(AsRef::as_ref).collect();
    let mut rd = csv::ReaderBuilder::new().flexible(true).from_reader(bytes);
    match rd.headers() {
        Ok(h) if h.iter().map(str::trim).eq(expected.iter().copied()) => {}
        Ok(h) => {
            problems.push(Problem::new(
                format!("{name}:1"),
                format!("header must be `{}`, found `{}`", expected.join(","), h.iter().collect::<Vec<_>>().join(",")),
            ));
            return Vec::new();
        }
        Err(e) => {
            problems.push(Problem::new(format!("{name}:1"), format!("not CSV: {e}")));
            return Vec::new();
        }
    }
    let mut lines = Lines::new(bytes);
    let mut out = Vec::new();
    for rec in rd.records() {
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                let line = lines.of(e.position(), 0);
                problems.push(Problem::new(format!("{name}:{line}"), format!("not CSV: {e}")));
                continue;
            }
        };
        let loc = format!("{name}:{}", lines.of(rec.position(), 0));
        if rec.len() != expected.len() {
            problems.push(Problem::new(&loc, format!("expected {} cells, found {}", expected.len(), rec.len())));
            continue;
        }
        out.push(SheetRow { loc, cells: rec.iter().map(restore_cell).collect() });
    }
    out
}

/// A CSV writer into memory that neutralises every cell (see the module doc).
pub struct Writer {
    inner: csv::Writer<Vec<u8>>,
    /// Whether [`Writer::serialize`] still has to write the header row.
    header_pending: bool,
}

impl Default for Writer {
    fn default() -> Self {
        Self::new()
    }
}

impl Writer {
    pub fn new() -> Self {
        Self { inner: csv::WriterBuilder::new().has_headers(false).from_writer(Vec::new()), header_pending: true }
    }

    /// One row of cells.
    pub fn write_record<I, T>(&mut self, cells: I) -> Result<()>
    where
        I: IntoIterator<Item = T>,
        T: AsRef<str>,
    {
        let row: Vec<String> = cells.into_iter().map(|c| neutralise(c.as_ref()).into_owned()).collect();
        self.inner.write_record(&row).context("writing a CSV row")
    }

    /// One row from a struct; the first call also writes the header (the field names).
    pub fn serialize<T: Serialize>(&mut self, row: &T) -> Result<()> {
        // csv has no public "serialise to cells", so the row goes through a scratch writer.
        let mut scratch = csv::WriterBuilder::new().has_headers(self.header_pending).from_writer(Vec::new());
        scratch.serialize(row).context("writing a CSV row")?;
        let bytes = scratch.into_inner().map_err(|e| anyhow::anyhow!("writing a CSV row: {e}"))?;
        let mut r = csv::ReaderBuilder::new().has_headers(false).from_reader(bytes.as_slice());
        for rec in r.records() {
            self.write_record(rec.context("writing a CSV row")?.iter())?;
        }
        self.header_pending = false;
        Ok(())
    }

    /// Whether a row was written yet (a header for an empty table is the caller's).
    pub fn is_empty(&self) -> bool {
        self.inner.get_ref().is_empty()
    }

    pub fn into_bytes(self) -> Result<Vec<u8>> {
        self.inner.into_inner().map_err(|e| anyhow::anyhow!("writing CSV: {e}"))
    }
}

/// `rows` with `header` (written also when there are no rows).
pub fn table<T: Serialize>(header: &[&str], rows: &[T]) -> Result<Vec<u8>> {
    let mut w = Writer::new();
    if rows.is_empty() {
        w.write_record(header)?;
    }
    for r in rows {
        w.serialize(r)?;
    }
    w.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formula_cells_get_a_quote_and_numbers_do_not() {
        for c in ["=1+1", "+x", "-x", "@SUM(A1)", "\tx", "\rx", "-2+3", "'=x", "''@x", "-", "-1e", "1-"] {
            let n = neutralise(c);
            assert!(c == "1-" || n.starts_with('\''), "{c:?}");
            assert_eq!(restore(&n), c);
        }
        for c in ["plain", "'quoted but harmless", "-3", "-0.25", "1e-3", "-1.5E+10", "42", ""] {
            assert_eq!(neutralise(c), c, "{c:?}");
            assert_eq!(restore(c), c);
        }
    }

    #[test]
    fn serialised_rows_are_neutralised_with_a_header() {
        #[derive(Serialize)]
        struct Row {
            a: String,
            n: f32,
        }
        let mut w = Writer::new();
        w.serialize(&Row { a: "=cmd|'/c calc'!A0".into(), n: -0.5 }).unwrap();
        w.serialize(&Row { a: "x".into(), n: 1.0 }).unwrap();
        assert_eq!(String::from_utf8(w.into_bytes().unwrap()).unwrap(), "a,n\n'=cmd|'/c calc'!A0,-0.5\nx,1.0\n");
        assert_eq!(String::from_utf8(table::<Row>(&["a", "n"], &[]).unwrap()).unwrap(), "a,n\n");
    }

    #[test]
    fn rows_are_located_on_their_line_with_lf_crlf_and_cr_line_ends() {
        let header = ["id", "score"];
        // Row 3 spans two lines (a quoted line break); row 4 has a bad cell count.
        let lf = "id,score\na,1\n\"b\nb\",2\nc\n";
        for (ends, text) in [("LF", lf.to_string()), ("CRLF", lf.replace('\n', "\r\n")), ("CR", lf.replace('\n', "\r"))]
        {
            let mut problems = Vec::new();
            let rows = read_rows("s.csv", text.as_bytes(), &header, &mut problems);
            let locs: Vec<&str> = rows.iter().map(|r| r.loc.as_str()).collect();
            assert_eq!(locs, ["s.csv:2", "s.csv:3"], "{ends}");
            let bad: Vec<&str> = problems.iter().map(|p| p.location.as_str()).collect();
            assert_eq!(bad, ["s.csv:5"], "{ends}: {problems:?}");
        }
    }

    proptest! {
        #[test]
        fn restore_inverts_neutralise_and_no_written_cell_triggers(cell in "['=+@\\-\t\ra-z0-9.e]{0,8}") {
            let n = neutralise(&cell);
            prop_assert_eq!(restore(&n), cell.as_str());
            prop_assert!(!n.starts_with(TRIGGERS) || is_plain_number(&n));
        }
    }
}
