//! Error types at module boundaries and the exit-code policy.
//!
//! Exit codes: 0 success; 1 a failure the user can act on (bad input, a stage
//! that failed, a stale replay); 2 a usage error or an unexpected internal error; 3 the
//! pipeline waits for people (samples to review or adjudicate): not a failure.

use std::fmt;

/// One problem in an input, located precisely enough to fix it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// Where: a JSON path such as `servers[3] ("name").tools[0].input_schema`, or `line 12`.
    pub location: String,
    pub message: String,
}

impl Problem {
    pub fn new(location: impl Into<String>, message: impl Into<String>) -> Self {
        Self { location: location.into(), message: message.into() }
    }
}

/// An input file that cannot be used as given; lists every problem found.
#[derive(Debug, thiserror::Error)]
pub struct InputError {
    pub file: String,
    pub problems: Vec<Problem>,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(f, "`{}` has {n} problem{}:", self.file, if n == 1 { "" } else { "s" })?;
        const SHOWN: usize = 20;
        for p in self.problems.iter().take(SHOWN) {
            write!(f, "\n  - {}: {}", p.location, p.message)?;
        }
        if n > SHOWN {
            write!(f, "\n  … and {} more", n - SHOWN)?;
        }
        Ok(())
    }
}

/// Misuse of the command line that clap cannot catch (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// An error with a suggestion for the user, shown as `hint: …`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Hinted {
    pub message: String,
    pub hint: String,
}

/// Not a failure: the pipeline stopped where it waits for people (reviewers, adjudicators).
/// Shown as `waiting for people: …` and `next: …`, exit code [`EXIT_WAITING`].
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Waiting {
    pub message: String,
    /// What to do, and the command to run once it is done.
    pub next: String,
}

/// The exit code of a pipeline waiting for people.
pub const EXIT_WAITING: i32 = 3;

pub fn hinted(message: impl Into<String>, hint: impl Into<String>) -> anyhow::Error {
    Hinted { message: message.into(), hint: hint.into() }.into()
}

/// How a JSON value's type reads in an error message ("expected a string, found a number").
pub fn json_type_name(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A write that failed because the disk (or the user's quota) is full: which file, and the
/// system's own words. Built where we write (atomic files, checkpoints, the ledger).
#[derive(Debug, Clone, thiserror::Error)]
#[error("disk full: cannot write `{file}` ({cause})")]
pub struct DiskFull {
    pub file: String,
    pub cause: String,
}

/// The last [`DiskFull`] of this process. Errors from LLM fan-out cross threads and are
/// turned into text on the way (`LlmError`), so the stage runner asks here, not only the
/// error chain, to put the real cause on the first line instead of "LLM setup failed".
static LAST_DISK_FULL: std::sync::Mutex<Option<DiskFull>> = std::sync::Mutex::new(None);

/// Forget an earlier [`DiskFull`] (a new stage starts).
pub fn clear_disk_full() {
    *LAST_DISK_FULL.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

/// Whether an I/O error means "no space left" (ENOSPC, or a quota: EDQUOT).
pub fn is_disk_full_io(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
}

/// Whether SQLite reported `SQLITE_FULL` ("database or disk is full").
pub fn is_disk_full_sqlite(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull)
}

/// Record and return a [`DiskFull`] for `file`.
pub fn disk_full(file: &std::path::Path, cause: impl std::fmt::Display) -> anyhow::Error {
    let e = DiskFull { file: file.display().to_string(), cause: cause.to_string() };
    *LAST_DISK_FULL.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
    e.into()
}

/// An I/O error writing `file`: [`DiskFull`] when the disk is full, else `what` as context.
pub fn write_error(file: &std::path::Path, e: std::io::Error, what: &str) -> anyhow::Error {
    if is_disk_full_io(&e) {
        disk_full(file, e)
    } else {
        anyhow::Error::new(e).context(format!("{what} `{}`", file.display()))
    }
}

/// The disk-full condition behind `err`: in its chain, or recorded by this process.
pub fn disk_full_behind(err: &anyhow::Error) -> Option<DiskFull> {
    err.chain()
        .find_map(|e| e.downcast_ref::<DiskFull>().cloned())
        .or_else(|| LAST_DISK_FULL.lock().unwrap_or_else(|p| p.into_inner()).clone())
}

/// The exit code for an error that reached `main`.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.chain().any(|e| e.is::<Waiting>()) {
        EXIT_WAITING
    } else if err.chain().any(|e| e.is::<UsageError>()) {
        2
    } else {
        1
    }
}

/// Render an error the uv way: `error: …`, `Caused by: …` lines, `hint: …`.
pub fn render(err: &anyhow::Error) -> String {
    // Waiting is not an error: no `error:` and no "failed" context around it.
    if let Some(w) = err.chain().find_map(|e| e.downcast_ref::<Waiting>()) {
        return format!("waiting for people: {}\nnext: {}", w.message, w.next);
    }
    let mut out = format!("error: {err}");
    for cause in err.chain().skip(1) {
        out.push_str(&format!("\n  Caused by: {cause}"));
    }
    if let Some(h) = err.chain().find_map(|e| e.downcast_ref::<Hinted>()) {
        out.push_str(&format!("\nhint: {}", h.hint));
    } else if err.chain().any(|e| e.is::<DiskFull>()) {
        out.push_str(
            "\nhint: free space on that disk and run the command again; finished items are checkpointed and not redone",
        );
    }
    out
}
