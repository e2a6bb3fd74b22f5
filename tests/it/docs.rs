//! The docs and the command line agree: every leaf command of clap's tree is documented as
//! `benchgen <words>` in README.md or a `docs/*.md` page, every `benchgen <words>` written
//! there names a command that exists, and every docs page is linked from the README (and
//! every relative link between the pages points at a file that exists).
//!
//! A command is "written" when `benchgen` is followed by its words inside code: an inline
//! code span or a fenced block (prose such as "benchgen builds …" is not a command).
//! Global options before the words (`benchgen --json score`) are skipped, using clap's own
//! definition of which options take a value. So a new command fails this test until its
//! page shows it, and a renamed command fails it until the docs follow.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use benchgen::cli::Cli;
use clap::CommandFactory;

use crate::support::repo;

/// README.md first, then every `docs/*.md` in name order.
fn pages() -> Vec<(PathBuf, String)> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files.into_iter().map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap())).collect()
}

fn rel(p: &Path) -> String {
    p.strip_prefix(repo()).unwrap_or(p).display().to_string()
}

/// Code text of a Markdown page, one entry per source line: lines of fenced blocks whole,
/// inline code spans elsewhere.
fn code_of(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            out.push((i + 1, line.to_string()));
            continue;
        }
        // Inline spans: text between backtick runs of equal length.
        let b = line.as_bytes();
        let mut k = 0;
        while k < b.len() {
            if b[k] != b'`' {
                k += 1;
                continue;
            }
            let run = b[k..].iter().take_while(|&&c| c == b'`').count();
            let open = k + run;
            let fence = "`".repeat(run);
            match line[open..].find(&fence) {
                Some(end) => {
                    out.push((i + 1, line[open..open + end].to_string()));
                    k = open + end + run;
                }
                None => break,
            }
        }
    }
    out
}

/// Each leaf of the command tree as its words (`["efs", "review", "export"]`).
fn leaves(cmd: &clap::Command, prefix: &[String], out: &mut BTreeSet<Vec<String>>) {
    let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|s| s.get_name() != "help").collect();
    if subs.is_empty() && !prefix.is_empty() {
        out.insert(prefix.to_vec());
    }
    for s in subs {
        let mut p = prefix.to_vec();
        p.push(s.get_name().to_string());
        leaves(s, &p, out);
    }
}

/// The command words of one `benchgen …` mention, resolved along clap's tree. `Ok(words)`
/// when they name a command (a leaf or a group), `Err(words)` when a word is not a
/// subcommand where one is required.
fn resolve(root: &clap::Command, tokens: &[&str]) -> Result<Vec<String>, Vec<String>> {
    // Global options, and which of them take a value (`--config FILE`).
    let takes_value = |tok: &str| {
        let name = tok.trim_start_matches('-');
        if tok.contains('=') {
            return false;
        }
        root.get_arguments().any(|a| {
            let hit = if tok.starts_with("--") {
                a.get_long() == Some(name)
            } else {
                name.len() == 1 && a.get_short() == name.chars().next()
            };
            hit && a.get_action().takes_values()
        })
    };
    let mut i = 0;
    while i < tokens.len() && tokens[i].starts_with('-') {
        i += if takes_value(tokens[i]) { 2 } else { 1 };
    }
    let mut cmd = root;
    let mut words = Vec::new();
    while let Some(tok) = tokens.get(i) {
        let subs: Vec<&clap::Command> = cmd.get_subcommands().filter(|s| s.get_name() != "help").collect();
        if subs.is_empty() {
            break; // a leaf: the rest are its arguments
        }
        match subs.iter().find(|s| s.get_name() == *tok) {
            Some(s) => {
                words.push(tok.to_string());
                cmd = s;
                i += 1;
            }
            // A plain lowercase word where a subcommand belongs is a command that does not
            // exist; anything else (`[…]`, `tools|call`, a flag) ends a group mention.
            None if !tok.is_empty() && tok.chars().all(|c| c.is_ascii_lowercase() || c == '-') => {
                words.push(tok.to_string());
                return Err(words);
            }
            None => break,
        }
    }
    Ok(words)
}

/// Every `benchgen …` mention in code: (file, line, resolved words).
type Mention = (String, usize, Result<Vec<String>, Vec<String>>);

fn mentions(root: &clap::Command) -> Vec<Mention> {
    let word = crate::support::regex(r"(^|[\s`$(;&|])benchgen\s+(.*)$").unwrap();
    let mut out = Vec::new();
    for (path, text) in pages() {
        for (line, code) in code_of(&text) {
            // Several mentions may share a line (`benchgen review import && benchgen efs finalize`).
            for part in code.split("&&").flat_map(|p| p.split(';')) {
                let Some(c) = word.captures(part) else { continue };
                let tokens: Vec<&str> = c[2].split_whitespace().take_while(|t| !t.starts_with('#')).collect();
                if tokens.is_empty() {
                    continue;
                }
                out.push((rel(&path), line, resolve(root, &tokens)));
            }
        }
    }
    out
}

#[test]
fn every_command_is_documented_and_every_documented_command_exists() {
    let root = Cli::command();
    let mut all = BTreeSet::new();
    leaves(&root, &[], &mut all);
    assert!(all.len() >= 20, "the command tree looks wrong: {all:?}");

    let found = mentions(&root);
    let wrong: Vec<String> = found
        .iter()
        .filter_map(|(f, l, r)| {
            r.as_ref().err().map(|w| format!("{f}:{l}: `benchgen {}` is not a command", w.join(" ")))
        })
        .collect();
    assert!(wrong.is_empty(), "the docs name commands that do not exist:\n{}", wrong.join("\n"));

    let documented: BTreeSet<Vec<String>> = found.into_iter().filter_map(|(_, _, r)| r.ok()).collect();
    let missing: Vec<String> =
        all.iter().filter(|w| !documented.contains(*w)).map(|w| format!("benchgen {}", w.join(" "))).collect();
    assert!(
        missing.is_empty(),
        "commands without documentation (show each as `benchgen <words>` in README.md or docs/*.md):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_resolver_tells_commands_from_non_commands() {
    // The checks above are only as good as this parser; pin its behaviour on known cases.
    let root = Cli::command();
    let r = |s: &str| resolve(&root, &s.split_whitespace().collect::<Vec<_>>());
    let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(r("run --force"), Ok(w("run")));
    assert_eq!(r("--json score --bench x"), Ok(w("score")));
    assert_eq!(r("--config pipeline/x.toml efs compare --reference r"), Ok(w("efs compare")));
    assert_eq!(r("--json mcp call sandbox weather::forecast"), Ok(w("mcp call")));
    assert_eq!(r("efs review export"), Ok(w("efs review export")));
    assert_eq!(r("mcp tools|call|import"), Ok(w("mcp")));
    assert_eq!(r("efs frobnicate"), Err(w("efs frobnicate")));
    assert_eq!(r("frobnicate --all"), Err(w("frobnicate")));
    let mut spans = code_of("a `benchgen run` b ``benchgen `x` status`` c\n```\nbenchgen stats\n```\nbenchgen builds");
    spans.sort();
    assert_eq!(
        spans,
        vec![(1, "benchgen `x` status".into()), (1, "benchgen run".into()), (3, "benchgen stats".into())]
    );
}

#[test]
fn every_docs_page_is_linked_from_the_readme_and_every_link_resolves() {
    let all = pages();
    let readme = &all[0].1;
    let link = crate::support::regex(r"\]\(([^)\s#]+)(#[^)\s]*)?\)").unwrap();
    let mut problems = Vec::new();
    for (path, _) in &all[1..] {
        let name = rel(path);
        if !link.captures_iter(readme).any(|c| c[1] == *name) {
            problems.push(format!("README.md does not link `{name}`"));
        }
    }
    for (path, text) in &all {
        for c in link.captures_iter(text) {
            let target = &c[1];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            if !path.parent().unwrap().join(target).exists() {
                problems.push(format!("{}: link to `{target}`, which does not exist", rel(path)));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn readme_is_short_and_opens_with_the_two_commands() {
    let readme = &pages()[0].1;
    let lines: Vec<&str> = readme.lines().collect();
    assert!(lines.len() <= 250, "README.md has {} lines; topic detail belongs in docs/", lines.len());
    let first_code: Vec<&str> = lines
        .iter()
        .skip_while(|l| !l.starts_with("```"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .map(|s| {
            if s == "make demo" {
                "make demo"
            } else if s == "make test" {
                "make test"
            } else {
                "other"
            }
        })
        .collect();
    assert_eq!(first_code, ["make demo", "make test"], "the README opens with `make demo` and `make test`");
    assert!(
        readme.contains("<!-- stages:begin -->") && readme.contains("<!-- stages:end -->"),
        "the stage table sits between its markers"
    );
}
