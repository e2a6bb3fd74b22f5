//! Output modes in one place: quiet / default / verbose, human or `--json`
//! summaries on stdout, warnings and progress bars on stderr.
//!
//! Progress bars are hidden when stderr is not a terminal, with `--quiet`, or
//! when `BENCHGEN_NO_PROGRESS` is set (tests set it for stable output).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// Write to stdout and flush. A reader that has gone away (`benchgen … | head -1`) ends
/// benchgen quietly with exit 0, as ripgrep does: `print!` would panic (exit 101). Child
/// processes are stopped first; everything already committed stays.
pub fn out(text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let r = o.write_all(text.as_bytes()).and_then(|()| o.flush());
    match r {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            crate::children::terminate_all(std::time::Duration::from_secs(2));
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            std::process::exit(1);
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Printer {
    pub quiet: bool,
    pub verbose: u8,
    pub json: bool,
    /// Say "running `STAGE` …" as each stage that is not up to date starts (`benchgen run`;
    /// a single stage command's output starts with its result or error instead).
    pub announce: bool,
}

impl Printer {
    /// A progress line for status messages (stderr), hidden in quiet and JSON modes.
    pub fn info(&self, msg: &str) {
        if !self.quiet && !self.json {
            eprintln!("{msg}");
        }
    }

    pub fn warn(&self, msg: &str) {
        if !self.quiet {
            eprintln!("warning: {msg}");
        }
    }

    /// Part of the human result, printed as soon as it is known (nothing with
    /// `--json` or `--quiet`, whose output comes from [`Printer::summary`]).
    pub fn partial(&self, human: &str) {
        if !self.json && !self.quiet {
            out(human);
        }
    }

    /// The command's result: human text, or the JSON value with `--json`.
    pub fn summary<T: Serialize>(&self, human: &str, json: &T) {
        if self.json {
            out(&(serde_json::to_string_pretty(json).unwrap_or_else(|_| "null".into()) + "\n"));
        } else if !self.quiet && !human.is_empty() {
            out(human);
            if !human.ends_with('\n') {
                out("\n");
            }
        }
    }

    pub fn progress(&self, len: u64, what: &str) -> ProgressBar {
        let hidden = self.quiet
            || self.json
            || std::env::var_os("BENCHGEN_NO_PROGRESS").is_some()
            || !std::io::stderr().is_terminal();
        if hidden {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new(len);
        pb.set_style(
            ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        pb.set_prefix(what.to_string());
        pb
    }
}
