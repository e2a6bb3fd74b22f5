//! Small text helpers shared by every stage family (no family of its own, imports none).

/// A model's (or a user's) text on one line: every run of whitespace, newlines included,
/// becomes one space, and the ends are trimmed.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_line_joins_whitespace_runs() {
        assert_eq!(super::one_line("  a\n\tb  c \r\n"), "a b c");
        assert_eq!(super::one_line(""), "");
    }
}
