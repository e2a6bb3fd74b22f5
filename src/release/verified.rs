//! What `benchgen release verify` found: the report that the checks of each part
//! (`verify`, `content`, `servers`, `inspect`) fill in. A file of its own so that the checks
//! can write into it without importing the command that runs them.

use serde::Serialize;

use crate::mcp::pin::ToolChange;

#[derive(Debug, Default, Serialize)]
pub struct Verified {
    pub dir: String,
    pub samples: usize,
    /// Each check that ran, with what it covered.
    pub checks: Vec<String>,
    /// What is worth knowing but fails nothing: an empty part (nothing to score or check).
    pub warnings: Vec<String>,
    pub failures: Vec<String>,
    /// `--servers`: each pinned server started again and compared with its pin.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<ServerCheck>,
}

impl Verified {
    pub(super) fn fail(&mut self, f: impl Into<String>) {
        self.failures.push(f.into());
    }
}

/// One pinned server started again and compared with its pin.
#[derive(Debug, Clone, Serialize)]
pub struct ServerCheck {
    pub name: String,
    pub source: String,
    /// `unchanged`, `changed`, `not started` (it did not start or list its tools in time),
    /// or `skipped` (nothing to start and no configured server of its name).
    pub status: &'static str,
    /// `recorded start` or `configured server`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_as: Option<&'static str>,
    /// Every tool added, removed or changed since the release, by name.
    pub changes: Vec<ToolChange>,
    /// Why it was skipped or did not start; a protocol, `serverInfo` or package version
    /// that differs from the pin's.
    pub notes: Vec<String>,
}
