//! The review queue of `benchgen eval` as the release reads it: `eval` writes
//! `artifacts/eval/review.csv` (one row per flagged item), an adjudicator fills `decision`
//! in a copy, and `[release] eval_review` names it. The format lives here, with its
//! reader, so `release` imports nothing of `eval` (which reads the release).

use std::collections::HashMap;
use std::path::Path;

use anyhow::Result;

use crate::error::{InputError, Problem};
use crate::settings::Settings;
use crate::stage::Inputs;

/// Columns of the sheet.
pub const REVIEW_HEADER: [&str; 6] = ["id", "flags", "solve_rate", "evidence", "decision", "note"];

/// What an adjudicator may write in `decision`: the sample leaves the next release, or
/// stays (blank: not decided yet, it stays).
pub const LEAVE_OUT: &str = "leave out";
pub const KEEP: &str = "keep";

/// The samples an adjudicated eval review sheet leaves out, with the reason: id →
/// "left out after evaluation: <flags>: <note>". Every problem (header, cells, a decision
/// other than `leave out`, `keep` or blank, an id twice) is an error naming file and line.
pub fn read(s: &Settings, inputs: &Inputs, path: &Path) -> Result<HashMap<String, String>> {
    let name = s.display_path(path);
    Ok(parse(&name, inputs.bytes(path)?)?)
}

/// [`read`] of the sheet's bytes, `name` naming it in problems.
pub fn parse(name: &str, bytes: &[u8]) -> Result<HashMap<String, String>, InputError> {
    let mut problems = Vec::new();
    let rows = crate::csvout::read_rows(name, bytes, &REVIEW_HEADER, &mut problems);
    let mut out = HashMap::new();
    let mut seen = HashMap::new();
    for r in rows {
        let (id, flags, decision, note) = (r.cells[0].trim(), r.cells[1].trim(), r.cells[4].trim(), r.cells[5].trim());
        if let Some(first) = seen.insert(id.to_string(), r.loc.clone()) {
            problems.push(Problem::new(&r.loc, format!("`{id}` is listed twice (first at {first})")));
            continue;
        }
        match decision.to_lowercase().as_str() {
            d if d == LEAVE_OUT => {
                let why = if note.is_empty() { String::new() } else { format!(": {note}") };
                out.insert(id.to_string(), format!("left out after evaluation: {flags}{why}"));
            }
            d if d == KEEP || d.is_empty() => {}
            _ => problems.push(Problem::new(
                format!("{} (decision)", r.loc),
                format!("`{decision}`: write `{LEAVE_OUT}`, `{KEEP}` or leave it blank"),
            )),
        }
    }
    if !problems.is_empty() {
        return Err(InputError { file: name.to_string(), problems });
    }
    Ok(out)
}
