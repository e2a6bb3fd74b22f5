//! Stage commands come from the stage list (issue 25): every stage is reachable at its
//! command words with its reads and writes in `--help`, `main.rs` names no stage, and the
//! user-visible output of the newer stages (help, report and status lines, and the reports
//! they write: synthesis, execute, validate, review, release card and eval) is pinned by
//! snapshots, as the foundation stages' is in `foundation_cli.rs`.

use crate::support::{assert_code, redact_times, stderr, stdout};

/// `benchgen ARGS` outside any project, at a fixed width, with no config from the
/// environment (clap shows an env value it finds in the help).
fn benchgen(args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("benchgen")
        .unwrap()
        .env("COLUMNS", "100")
        .env_remove("BENCHGEN_CONFIG")
        .env_remove("BENCHGEN_LLM_MODE")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn every_stage_is_a_command_whose_help_names_its_reads_and_writes() {
    for stage in benchgen::stages::all() {
        let spec = stage.spec();
        let mut args: Vec<&str> = spec.command.split(' ').collect();
        args.push("--help");
        let o = benchgen(&args);
        assert_code(&o, 0);
        let help = stdout(&o);
        assert!(help.contains("\nReads: "), "`benchgen {} --help` has no Reads: line:\n{help}", spec.command);
        let writes = format!("\nWrites: `artifacts/{}/`: ", spec.name);
        assert!(help.contains(&writes), "`benchgen {} --help` has no Writes: line:\n{help}", spec.command);
        for w in spec.writes {
            assert!(help.contains(&format!("`{w}`")), "`benchgen {} --help` does not list `{w}`", spec.command);
        }
        insta::assert_snapshot!(format!("help_{}", spec.name), help);
        // The short help is the spec's one line.
        args.pop();
        args.push("-h");
        let short = stdout(&benchgen(&args));
        let first = short.lines().next().unwrap_or_default().to_lowercase();
        assert!(spec.about.to_lowercase().starts_with(first.trim()), "{first:?} vs {:?}", spec.about);
    }
}

#[test]
fn main_rs_names_no_stage() {
    let main = std::fs::read_to_string(crate::support::repo().join("src/main.rs")).unwrap();
    for stage in benchgen::stages::all() {
        let spec = stage.spec();
        for word in [spec.name, spec.command] {
            assert!(!main.contains(&format!("\"{word}\"")), "src/main.rs names the stage `{word}`");
        }
    }
    // The test sees literals at all.
    assert!(main.contains("\"BENCHGEN_CONFIG\""));
}

#[test]
fn the_command_tree_lists_stages_in_pipeline_order_then_the_other_commands() {
    let o = benchgen(&["--help"]);
    assert_code(&o, 0);
    insta::assert_snapshot!("help_root", stdout(&o));
}

/// Stdout and stderr of a command, times redacted.
fn lines(o: &std::process::Output) -> String {
    redact_times(&format!("{}{}", stdout(o), stderr(o)))
}

#[test]
fn review_stage_lines() {
    let rp = crate::review::RP::new(12, "");
    let mut shown = String::new();
    let mut step = |args: &[&str]| {
        let o = rp.run(args);
        assert_code(&o, 0);
        shown.push_str(&format!("$ benchgen {}\n{}\n", args.join(" "), lines(&o)));
    };
    step(&["review", "assign"]);
    step(&["review", "export"]);
    let a = rp.assignments();
    for r in &a.reviewers {
        let reject = r.id == "carol";
        rp.fill(&r.id, |_| Some(if reject { [5, 5, 5, 5, 2] } else { [5, 4, 4, 5, 4] }));
    }
    step(&["review", "import"]);
    step(&["review", "merge"]);
    step(&["review", "merge"]);
    step(&["status"]);
    insta::assert_snapshot!("review_lines", shown);
    insta::assert_snapshot!("review_merge_report", rp.p.read("artifacts/review-merge/report.md"));
}

#[test]
fn release_stage_lines() {
    let p = crate::release::project("1.0.0");
    let mut shown = String::new();
    let o = crate::release::release(&p, &[]);
    assert_code(&o, 0);
    shown.push_str(&format!("$ benchgen release\n{}\n", lines(&o)));
    let o = crate::release::release(&p, &[]);
    assert_code(&o, 0);
    shown.push_str(&format!("$ benchgen release\n{}\n", lines(&o)));
    let o = p.run(&["--config", "pipeline/release.toml", "release", "verify", "release/it-bench-1.0.0"]);
    assert_code(&o, 0);
    shown.push_str(&format!("$ benchgen release verify release/it-bench-1.0.0\n{}\n", lines(&o)));
    insta::assert_snapshot!("release_lines", shown);
    insta::assert_snapshot!("release_card", p.read("release/it-bench-1.0.0/README.md"));
}

#[test]
fn levels_stage_lines() {
    if !crate::levels::assets_or_skip() {
        return;
    }
    let llm = crate::support::scripted_llm::ScriptedLlm::start(crate::levels::answer);
    let p = crate::levels::project(&llm, 1);
    // `registry import` names the registry file by its absolute path (in this checkout).
    let root = crate::support::repo().display().to_string();
    let redact = |s: String| redact_times(&s).replace(&root, "[repo]");
    let mut shown = format!("$ benchgen run\n{}\n", redact(p.ok(&["run"])));
    shown.push_str(&format!("$ benchgen status\n{}", redact(p.ok(&["status"]))));
    insta::assert_snapshot!("levels_lines", shown);
}

#[test]
fn synth_stage_lines() {
    let sp = crate::synth::synth_project(&[]);
    // Two identical requests in flight at once: whether the second finds the first's reply
    // in the ledger depends on timing (13 live + 1 from the ledger, or 14 live), so the
    // split is redacted; the total and the artifacts are the same either way.
    let split = |s: String| {
        let re = crate::support::regex(r"\(\d+ live, \d+ from the ledger\)").unwrap();
        re.replace_all(&s, "([live], [from the ledger])").into_owned()
    };
    let mut shown = format!("$ benchgen run\n{}\n", split(redact_times(&sp.ok(&["run"]))));
    shown.push_str(&format!("$ benchgen status\n{}", split(redact_times(&sp.ok(&["status"])))));
    insta::assert_snapshot!("synth_lines", shown);
    // The reports hold no time or path: the artifacts are byte-identical from run to run.
    insta::assert_snapshot!("synth_chains_report", sp.read("artifacts/synth-chains/report.md"));
    insta::assert_snapshot!("execute_summary", sp.read("artifacts/execute/summary.json"));
    insta::assert_snapshot!("synth_roleplay_report", sp.read("artifacts/synth-roleplay/report.md"));
    insta::assert_snapshot!("validate_report", sp.read("artifacts/validate/report.md"));
}

#[test]
fn eval_stage_lines() {
    let llm = crate::support::scripted_llm::ScriptedLlm::start(crate::eval::agent_rule);
    let p = crate::eval::project(&llm, "");
    // Each agent's mean model latency is wall-clock time.
    let latency = crate::support::regex(r"latency \d+ ms").unwrap();
    let mut shown = String::new();
    for _ in 0..2 {
        let o = crate::eval::eval(&p);
        assert_code(&o, 0);
        let said = latency.replace_all(&lines(&o), "latency [ms] ms").into_owned();
        shown.push_str(&format!("$ benchgen eval\n{said}\n"));
    }
    insta::assert_snapshot!("eval_lines", shown);
    insta::assert_snapshot!("eval_report", p.read("artifacts/eval/report.md"));
}
