//! The stage commands, built from the stage list at start-up, so a stage is declared
//! once: a plain stage (only `--force`) gets its command here, at its command words
//! (`efs verify` is `verify` under `efs`), and every stage command, plain or typed in
//! `cli.rs` (a stage with flags of its own), gets its `about` from its spec and its
//! long help from [`Stage::help`] plus "Reads:"/"Writes:" lines from its reads and
//! writes. Kept out of `cli.rs` so that the argument types do not import the stages.

use clap::{ArgMatches, Args, CommandFactory, FromArgMatches};

use crate::cli::{Cli, Command, ForceArgs, GlobalArgs, STAGE_GROUPS, StageCall, TypedCli};
use crate::stage::{ReadKind, Stage};

impl CommandFactory for Cli {
    fn command() -> clap::Command {
        with_stages(TypedCli::command())
    }

    fn command_for_update() -> clap::Command {
        with_stages(TypedCli::command_for_update())
    }
}

impl FromArgMatches for Cli {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Self::from_arg_matches_mut(&mut m.clone())
    }

    fn from_arg_matches_mut(m: &mut ArgMatches) -> Result<Self, clap::Error> {
        if let Some((stage, leaf)) = plain_stage(m) {
            let force = ForceArgs::from_arg_matches(leaf)?.force;
            let global = GlobalArgs::from_arg_matches(m)?;
            return Ok(Cli { global, command: Command::Stage(StageCall { stage, force }) });
        }
        let typed = TypedCli::from_arg_matches_mut(m)?;
        Ok(Cli { global: typed.global, command: typed.command })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Parser for Cli {}

/// The stages without a typed command of their own: their commands are made here.
pub fn plain_stages() -> Vec<Box<dyn Stage>> {
    let typed = TypedCli::command();
    crate::stages::all().into_iter().filter(|s| find(&typed, s.spec().command).is_none()).collect()
}

/// The command at `words` (`"efs review import"`) under `root`.
pub fn find<'a>(root: &'a clap::Command, words: &str) -> Option<&'a clap::Command> {
    words.split(' ').try_fold(root, |cmd, w| cmd.find_subcommand(w))
}

/// The plain stage the parsed command line names, with the matches of its leaf.
fn plain_stage(m: &ArgMatches) -> Option<(&'static str, &ArgMatches)> {
    let mut words = Vec::new();
    let mut leaf = m;
    while let Some((name, sub)) = leaf.subcommand() {
        words.push(name);
        leaf = sub;
    }
    let words = words.join(" ");
    plain_stages().into_iter().find(|s| s.spec().command == words).map(|s| (s.spec().name, leaf))
}

/// The typed tree plus every stage's command, in pipeline order.
fn with_stages(mut root: clap::Command) -> clap::Command {
    let stages = crate::stages::all();
    for stage in &stages {
        let words: Vec<&'static str> = stage.spec().command.split(' ').collect();
        root = place(root, &words, stage.as_ref());
    }
    let commands: Vec<&str> = stages.iter().map(|s| s.spec().command).collect();
    order(root, "", &commands)
}

/// Put `stage`'s command at `words` under `cmd`: describe a typed one, make a plain one,
/// and the groups on the way when they have no typed command.
fn place(mut cmd: clap::Command, words: &[&'static str], stage: &dyn Stage) -> clap::Command {
    let Some((&word, rest)) = words.split_first() else { return describe(cmd, stage) };
    if cmd.find_subcommand(word).is_none() {
        cmd = cmd.subcommand(if rest.is_empty() {
            ForceArgs::augment_args(clap::Command::new(word))
        } else {
            let about = STAGE_GROUPS.iter().find(|(w, _)| *w == word).map(|(_, a)| *a);
            let about =
                about.unwrap_or_else(|| panic!("the stage group `{word}` needs its line in `cli::STAGE_GROUPS`"));
            // As the derive makes a group: a subcommand is required, bare it prints help.
            clap::Command::new(word).about(about).subcommand_required(true).arg_required_else_help(true)
        });
    }
    cmd.mut_subcommand(word, |c| place(c, rest, stage))
}

fn describe(cmd: clap::Command, stage: &dyn Stage) -> clap::Command {
    cmd.about(about(stage)).long_about(long_help(stage))
}

/// The spec's `about`, capitalised like the other commands' one-line help.
pub fn about(stage: &dyn Stage) -> String {
    let about = stage.spec().about;
    let mut chars = about.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// A stage command's `--help`: the stage's prose, then what it reads and writes.
pub fn long_help(stage: &dyn Stage) -> String {
    let spec = stage.spec();
    let prose = paragraphs(stage.help());
    let mut text = if prose.is_empty() { about(stage) } else { prose };
    let reads: Vec<String> = spec
        .reads
        .iter()
        .filter_map(|r| match r.kind {
            ReadKind::Required => Some(format!("`{}/{}`", r.stage, r.file)),
            ReadKind::Optional => Some(format!("`{}/{}` (optional)", r.stage, r.file)),
            ReadKind::Manifest => None,
        })
        .collect();
    // Manifests are read for counts in reports, not as inputs: named apart, briefly.
    let manifests: Vec<String> =
        spec.reads.iter().filter(|r| r.kind == ReadKind::Manifest).map(|r| format!("`{}`", r.stage)).collect();
    let mut reads = if reads.is_empty() { "no stage's output".to_string() } else { reads.join(", ") };
    if !manifests.is_empty() {
        reads.push_str(&format!("; the manifests of {}", manifests.join(", ")));
    }
    let writes: Vec<String> = spec.writes.iter().map(|w| format!("`{w}`")).collect();
    text.push_str(&format!("\n\nReads: {reads}\nWrites: `artifacts/{}/`: {}", spec.name, writes.join(", ")));
    text
}

/// Help prose as the derive reads doc comments: lines of a paragraph joined by one space,
/// paragraphs split by blank lines.
fn paragraphs(text: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut para: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim).chain([""]) {
        if !line.is_empty() {
            para.push(line);
        } else if !para.is_empty() {
            out.push(para.join(" "));
            para.clear();
        }
    }
    out.join("\n\n")
}

/// List each command's subcommands in pipeline order (by the first stage under each),
/// then the commands that hold no stage, in their declared order.
fn order(cmd: clap::Command, prefix: &str, commands: &[&str]) -> clap::Command {
    let names: Vec<String> = cmd.get_subcommands().map(|c| c.get_name().to_string()).collect();
    let mut ranked: Vec<(usize, usize, String)> = names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let path = if prefix.is_empty() { name.clone() } else { format!("{prefix} {name}") };
            let first = commands.iter().position(|c| *c == path || c.starts_with(&format!("{path} ")));
            (first.unwrap_or(usize::MAX), i, name)
        })
        .collect();
    ranked.sort();
    ranked.into_iter().enumerate().fold(cmd, |cmd, (k, (_, _, name))| {
        let path = if prefix.is_empty() { name.clone() } else { format!("{prefix} {name}") };
        cmd.mut_subcommand(&name, |c| order(c.display_order(k), &path, commands))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paragraphs_join_lines_and_keep_blank_line_breaks() {
        assert_eq!(paragraphs("One line\n   and more.\n\n   Second.\n"), "One line and more.\n\nSecond.");
        assert_eq!(paragraphs(""), "");
    }

    #[test]
    fn every_stage_has_a_command_with_its_help_and_plain_ones_parse_to_their_stage() {
        let root = Cli::command();
        let plain: Vec<&str> = plain_stages().iter().map(|s| s.spec().name).collect();
        for stage in crate::stages::all() {
            let spec = stage.spec();
            let cmd = find(&root, spec.command).unwrap_or_else(|| panic!("no command `{}`", spec.command));
            let shown = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
            assert_eq!(shown.to_lowercase(), spec.about.to_lowercase(), "`{}`", spec.command);
            let long = cmd.get_long_about().map(|a| a.to_string()).unwrap_or_default();
            assert!(long.contains("\n\nReads: ") && long.contains("\nWrites: `artifacts/"), "{long}");
            if !plain.contains(&spec.name) {
                continue;
            }
            let mut args = vec!["benchgen"];
            args.extend(spec.command.split(' '));
            args.push("--force");
            let cli = <Cli as clap::Parser>::try_parse_from(&args).unwrap();
            assert!(
                matches!(cli.command, Command::Stage(StageCall { stage, force: true }) if stage == spec.name),
                "{args:?} parsed as {:?}",
                cli.command
            );
        }
        // Typed stage commands stay typed (their flags), the rest are generated.
        assert!(!plain.contains(&"registry-import") && !plain.contains(&"execute") && plain.contains(&"filter"));
    }
}
