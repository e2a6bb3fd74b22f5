//! Error types at module boundaries and the exit-code policy.
//!
//! Exit codes: 0 success; 1 a failure the user can act on (bad input, a stage
//! that failed, a stale replay); 2 a usage error or an unexpected internal error.

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

/// The exit code for an error that reached `main`.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.chain().any(|e| e.is::<UsageError>()) { 2 } else { 1 }
}

/// Render an error the uv way: `error: …`, `Caused by: …` lines, `hint: …`.
pub fn render(err: &anyhow::Error) -> String {
    let mut out = format!("error: {err}");
    for cause in err.chain().skip(1) {
        out.push_str(&format!("\n  Caused by: {cause}"));
    }
    if let Some(h) = err.chain().find_map(|e| e.downcast_ref::<Hinted>()) {
        out.push_str(&format!("\nhint: {}", h.hint));
    }
    out
}
