//! Output modes in one place: quiet / default / verbose, human or `--json`
//! summaries on stdout, warnings and progress bars on stderr.
//!
//! Progress bars are hidden with `--quiet`, `--json`, or when `BENCHGEN_NO_PROGRESS` is set
//! (tests set it for stable output). When stderr is not a terminal (`make demo | tee`, CI,
//! a log file) a bar is written as a plain line at its start and then at most every
//! [`PLAIN_EVERY`], so a long stage still says how far it is and when it should end.

use std::io::IsTerminal;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};
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
        self.progress_at(len, 0, what)
    }

    /// A progress bar starting at `done` of `len` (a resumed stage's items already answered):
    /// its ETA counts only what is done from here, and its first plain line shows `done`.
    pub fn progress_at(&self, len: u64, done: u64, what: &str) -> ProgressBar {
        if self.no_progress() {
            return ProgressBar::hidden();
        }
        if !std::io::stderr().is_terminal() {
            // Drawn from its starting position on: attached after it is set.
            let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
            pb.set_style(with_eta(
                ProgressStyle::with_template("{prefix}: {pos}/{len} ({elapsed}, {left}) {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                done,
            ));
            pb.set_prefix(what.to_string());
            pb.set_position(done);
            pb.reset_eta();
            let plain = PlainLines::new(PLAIN_EVERY, |line| {
                use std::io::Write;
                // A closed stderr ends the line, not benchgen.
                let _ = writeln!(std::io::stderr(), "{line}");
            });
            pb.set_draw_target(ProgressDrawTarget::term_like(Box::new(plain)));
            pb.tick();
            // A stage whose next item takes minutes still says it is alive, and its ETA.
            pb.enable_steady_tick(PLAIN_EVERY);
            return pb;
        }
        self.terminal_bar(len, done, what)
    }

    /// A bar drawn only on a terminal (hidden elsewhere, and with `--quiet`, `--json` or
    /// `BENCHGEN_NO_PROGRESS`).
    pub fn terminal_progress(&self, len: u64, what: &str) -> ProgressBar {
        if self.no_progress() || !std::io::stderr().is_terminal() {
            return ProgressBar::hidden();
        }
        self.terminal_bar(len, 0, what)
    }

    /// No bar at all: `--quiet`, `--json` or `BENCHGEN_NO_PROGRESS`.
    fn no_progress(&self) -> bool {
        self.quiet || self.json || std::env::var_os("BENCHGEN_NO_PROGRESS").is_some()
    }

    fn terminal_bar(&self, len: u64, done: u64, what: &str) -> ProgressBar {
        let pb = ProgressBar::new(len);
        pb.set_style(with_eta(
            ProgressStyle::with_template(&bar_template(what))
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            done,
        ));
        pb.set_prefix(what.to_string());
        pb.set_position(done);
        pb.reset_eta();
        pb
    }
}

/// The terminal bar's template: a label longer than the 12 columns the others are aligned
/// to (a multi-round stage's `levels-l3 step dependencies`) takes its columns from the bar,
/// down to 10, so the line keeps its width and does not wrap (a wrapped line is redrawn
/// below itself on every tick).
fn bar_template(label: &str) -> String {
    let over = label.chars().count().saturating_sub(12);
    let bar = 30usize.saturating_sub(over).max(10);
    format!("{{prefix:>12}} [{{bar:{bar}}}] {{pos}}/{{len}} {{msg}} ({{elapsed}}, {{left}})")
}

/// `style` with its `{left}` key: `eta ?` until an item finishes in this run, then the items
/// left at the mean pace of this run's items so far, counting down until the next finishes
/// (`from`: the position the bar started at, a resumed stage's items already answered).
/// indicatif's own `{eta}` says `0s` before the first item (an LLM stage's first item can
/// take a minute) and, weighting the last seconds, grows between items that take 30 s each.
fn with_eta(style: ProgressStyle, from: u64) -> ProgressStyle {
    // The position last drawn and when it was first drawn (the pace is measured at it).
    let seen = std::sync::Arc::new(Mutex::new((from, Duration::ZERO)));
    style.with_key("left", move |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        if s.pos() != seen.0 {
            *seen = (s.pos(), s.elapsed());
        }
        let _ = w.write_str(&eta_text(s.pos(), s.len(), from, seen.1, s.elapsed()));
    })
}

/// The `{left}` text of a bar at `pos` of `len` that started at `from`, reached `pos`
/// `reached` after its start and is `elapsed` after it now.
fn eta_text(pos: u64, len: Option<u64>, from: u64, reached: Duration, elapsed: Duration) -> String {
    let (Some(len), Some(done)) = (len, pos.checked_sub(from).filter(|d| *d > 0)) else {
        return "eta ?".to_string();
    };
    let at_pace = len.saturating_sub(pos) as f64 * reached.as_secs_f64() / done as f64;
    let left = (at_pace - elapsed.saturating_sub(reached).as_secs_f64()).max(0.0);
    format!("eta {:#}", indicatif::HumanDuration(Duration::from_secs_f64(left)))
}

/// How often a progress bar writes a plain line where stderr is not a terminal.
pub const PLAIN_EVERY: Duration = Duration::from_secs(30);

/// A progress bar's drawing as plain lines for a log: each redraw's text is kept, and
/// written as one line when the last was written `every` ago or more (the first at once);
/// cursor moves and clears, which a log cannot undo, are dropped.
pub struct PlainLines {
    every: Duration,
    /// The text of the redraw in progress, and when a line was last written.
    state: Mutex<(String, Option<Instant>)>,
    write: Box<dyn Fn(&str) + Send + Sync>,
}

impl PlainLines {
    pub fn new(every: Duration, write: impl Fn(&str) + Send + Sync + 'static) -> Self {
        Self { every, state: Mutex::new((String::new(), None)), write: Box::new(write) }
    }
}

impl std::fmt::Debug for PlainLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainLines").field("every", &self.every).finish_non_exhaustive()
    }
}

impl TermLike for PlainLines {
    fn width(&self) -> u16 {
        // Wide enough that a bar's line is never cut; the filler spaces are trimmed.
        200
    }

    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.write_str(s)
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0.push_str(s);
        Ok(())
    }

    fn clear_line(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn flush(&self) -> std::io::Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let text = std::mem::take(&mut st.0);
        let line = text.replace('\r', "");
        let line = line.trim();
        let due = st.1.is_none_or(|t| t.elapsed() >= self.every);
        // A cleared bar (its stage is done) draws nothing: no line for it.
        if !line.is_empty() && due {
            (self.write)(line);
            st.1 = Some(Instant::now());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_eta_is_unknown_until_an_item_finishes_then_the_mean_pace_of_this_run() {
        let s = Duration::from_secs;
        assert_eq!(eta_text(0, Some(4), 0, s(0), s(30)), "eta ?", "no item done: not `0s`");
        assert_eq!(eta_text(2, Some(6), 2, s(0), s(90)), "eta ?", "a resumed stage's items took no time now");
        assert_eq!(eta_text(1, Some(4), 0, s(30), s(30)), "eta 2m", "90 s, as indicatif rounds it");
        assert_eq!(eta_text(3, Some(6), 2, s(20), s(20)), "eta 60s", "only this run's item sets the pace");
        assert_eq!(eta_text(3, Some(6), 2, s(20), s(50)), "eta 30s", "it counts down until the next item");
        assert_eq!(eta_text(3, Some(6), 2, s(20), s(95)), "eta 0s", "and stops at zero, not below");
        assert_eq!(eta_text(4, Some(4), 0, s(40), s(40)), "eta 0s");
        assert_eq!(eta_text(1, None, 0, s(5), s(5)), "eta ?");
    }

    #[test]
    fn a_long_round_label_takes_its_columns_from_the_bar() {
        let width = |label: &str| {
            let t = bar_template(label);
            let bar: usize = t.split("{bar:").nth(1).unwrap().split('}').next().unwrap().parse().unwrap();
            label.chars().count().max(12) + bar
        };
        assert!(bar_template("embed").contains("{bar:30}"));
        assert_eq!(width("levels-l3 step dependencies"), width("embed"), "the line keeps its width");
        assert!(bar_template(&"x".repeat(60)).contains("{bar:10}"), "a bar stays visible");
    }

    fn collected(every: Duration) -> (ProgressBar, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let term = PlainLines::new(every, move |l| sink.lock().unwrap().push(l.to_string()));
        let pb = ProgressBar::with_draw_target(Some(4), ProgressDrawTarget::term_like(Box::new(term)));
        pb.set_style(ProgressStyle::with_template("{prefix}: {pos}/{len}").unwrap());
        pb.set_prefix("efs-verify");
        (pb, lines)
    }

    #[test]
    fn a_bar_without_a_terminal_writes_plain_lines_at_most_every_interval() {
        // Every redraw is due when the interval is zero: one clean line each, no escape
        // codes, no carriage returns, no filler.
        let (pb, lines) = collected(Duration::ZERO);
        pb.inc(1);
        pb.inc(1);
        pb.finish_and_clear();
        let got = lines.lock().unwrap().clone();
        assert!(got.len() >= 2, "{got:?}");
        assert!(got.iter().all(|l| l.starts_with("efs-verify: ") && !l.contains('\r') && l.trim() == l), "{got:?}");
        assert!(got.contains(&"efs-verify: 2/4".to_string()), "{got:?}");
        // A long interval: only the first drawing is written, however often it redraws.
        let (pb, lines) = collected(Duration::from_secs(3600));
        for _ in 0..4 {
            pb.inc(1);
        }
        pb.finish_and_clear();
        let got = lines.lock().unwrap().clone();
        assert_eq!(got.len(), 1, "{got:?}");
    }
}
