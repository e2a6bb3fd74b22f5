//! `benchgen init` for each track, then `check` and a whole run through `release` against
//! the scripted test endpoint, with nothing copied from the repository but the user's own
//! data files (the demo's logs, catalog and registry stand in for a user's). Also the
//! built-in prompts: `prompts list|show|export`, and overrides.

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;

use crate::support::scripted_llm::{Answer, ScriptedLlm, Seen};
use crate::support::{assert_code, repo, stderr, stdout};

fn benchgen(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("benchgen").unwrap();
    c.current_dir(dir)
        .env("BENCHGEN_NO_PROGRESS", "1")
        .env("BENCHGEN_ANON_SECRET", "it-init-secret")
        .env_remove("BENCHGEN_CONFIG")
        .env_remove("BENCHGEN_FAIL_AT");
    c
}

fn run(dir: &Path, args: &[&str]) -> Output {
    benchgen(dir).args(args).output().unwrap()
}

/// Answers every prompt of both tracks (levels, EFS, curation, graph, synthesis,
/// validation, pre-review).
fn answer(seen: &Seen) -> Answer {
    match crate::levels::answer(seen) {
        // Not a levels or pairwise-EFS prompt: the whole pipeline's double answers it.
        Answer::Status { .. } => crate::pipeline::pipeline_answer(seen),
        a => a,
    }
}

/// The user's files, outside any project: what a new user has.
fn users_files(dir: &Path) {
    std::fs::copy(repo().join("raw/demo/logs/events.jsonl"), dir.join("my_logs.jsonl")).unwrap();
    std::fs::copy(repo().join("raw/demo/logs/catalog.json"), dir.join("tools.json")).unwrap();
    std::fs::copy(repo().join("raw/demo/registry.json"), dir.join("registry.json")).unwrap();
}

fn init(dir: &Path, llm: &ScriptedLlm, extra: &[&str]) -> Output {
    let url = llm.base_url();
    let mut args = vec!["init", "proj", "--provider", "vllm", "--base-url", &url, "--model", "scripted"];
    args.extend_from_slice(extra);
    run(dir, &args)
}

/// Fill every reviewer sheet `review export` wrote with full marks and put it into
/// `reviews/returned/` (what reviewers do).
pub(crate) fn fill_sheets(proj: &Path) -> usize {
    let dir = proj.join("artifacts/review-export/sheets");
    let returned = proj.join("reviews/returned");
    std::fs::create_dir_all(&returned).unwrap();
    let mut filled = 0;
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "csv") {
            continue;
        }
        let mut r = csv::Reader::from_path(&p).unwrap();
        let headers = r.headers().unwrap().clone();
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(&headers).unwrap();
        for rec in r.records() {
            let rec = rec.unwrap();
            let row: Vec<String> = headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| {
                    if ["relevance", "completeness", "consistency", "reliability", "freshness"].contains(&h) {
                        "5".to_string()
                    } else {
                        v.to_string()
                    }
                })
                .collect();
            w.write_record(&row).unwrap();
            filled += 1;
        }
        std::fs::write(returned.join(p.file_name().unwrap()), w.into_inner().unwrap()).unwrap();
    }
    filled
}

/// check → run, which stops where the samples wait for review (exit 3, not an error) →
/// reviewers fill the sheets → run → release verify.
fn run_to_release(proj: &Path) -> String {
    let o = run(proj, &["check"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("no problems"), "{}", stdout(&o));
    // The whole pipeline: it stops before the release, which waits for the reviewers.
    let o = run(proj, &["run"]);
    assert_code(&o, 3);
    let err = stderr(&o);
    assert!(!err.contains("error:") && !err.contains("failed"), "waiting is not failing: {err}");
    // Every sample waits for its reviewers' scores: the message says so, and sends nobody to
    // the (empty) adjudication queue.
    let line = err.lines().find(|l| l.starts_with("waiting for people: ")).unwrap_or_else(|| panic!("{err}"));
    let n = line["waiting for people: ".len()..].split(' ').next().unwrap();
    assert_eq!(
        line,
        format!(
            "waiting for people: {n} of the {n} pool samples wait for review ({n} not scored yet); nothing is released until a sample is accepted"
        )
    );
    assert!(!err.contains("queue.csv") && !err.contains("adjudication"), "{err}");
    assert!(err.contains("next: ") && err.contains("benchgen review serve") && err.contains("benchgen run"), "{err}");
    assert!(!proj.join("release/proj-0.1.0").exists(), "nothing released while every sample waits");
    // `status` says the same, in text and JSON.
    let o = run(proj, &["status"]);
    assert_code(&o, 0);
    assert!(stdout(&o).lines().any(|l| l == line), "{}", stdout(&o));
    let o = run(proj, &["--json", "status"]);
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let release = rows.as_array().unwrap().iter().find(|r| r["stage"] == "release").unwrap();
    assert!(release["waiting"]["message"].as_str().unwrap().contains("wait for review"), "{release}");
    new_sample_waits_unassigned(proj, n.parse().unwrap());
    // `--json run` while waiting: the stages' reports (all up to date now) and what waits.
    let o = run(proj, &["--json", "run"]);
    assert_code(&o, 3);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    assert!(v["waiting"]["message"].as_str().unwrap().contains("not scored yet"), "{v}");
    assert!(v["waiting"]["next"].as_str().unwrap().contains("benchgen run"), "{v}");
    assert!(v["reports"].as_array().unwrap().iter().any(|r| r["stage"] == "review-export"), "{v}");
    assert!(fill_sheets(proj) > 0, "no sample reached the reviewers");
    let o = run(proj, &["run"]);
    assert_code(&o, 0);
    let release = proj.join("release/proj-0.1.0");
    assert!(release.join("samples.jsonl").is_file(), "no release: {}", stdout(&o));
    let o = run(proj, &["release", "verify", release.to_str().unwrap()]);
    assert_code(&o, 0);
    accepted_samples_changed_wait_again(proj);
    std::fs::read_to_string(release.join("samples.jsonl")).unwrap()
}

/// A sample that reaches the pool after the review stages ran (here written into the pool
/// by hand, then taken out again) has no decision: `status` counts it as the release does,
/// not yet assigned to reviewers; a decision whose sample left the pool counts for nothing.
fn new_sample_waits_unassigned(proj: &Path, n: usize) {
    let file = ["validate", "levels-export"]
        .iter()
        .map(|s| proj.join(format!("artifacts/{s}/samples.jsonl")))
        .find(|p| p.is_file())
        .unwrap();
    let before = std::fs::read(&file).unwrap();
    let text = String::from_utf8(before.clone()).unwrap();
    let (head, last) = text.trim_end().rsplit_once('\n').unwrap_or(("", text.trim_end()));
    let mut renamed: serde_json::Value = serde_json::from_str(last).unwrap();
    renamed["id"] = serde_json::Value::String("zzz-added-later".into());
    let status_with = |pool: String| {
        std::fs::write(&file, pool).unwrap();
        let o = run(proj, &["status"]);
        std::fs::write(&file, &before).unwrap();
        stdout(&o)
    };
    // One more sample.
    let out = status_with(format!("{text}{renamed}\n"));
    let want = format!(
        "{} of the {} pool samples wait for review (1 not yet assigned to reviewers, {n} not scored yet)",
        n + 1,
        n + 1
    );
    assert!(out.contains(&want), "{want}\n{out}");
    // The last sample renamed: its decision is for a sample no longer in the pool.
    let pool = if head.is_empty() { format!("{renamed}\n") } else { format!("{head}\n{renamed}\n") };
    let out = status_with(pool);
    let want = if n > 1 {
        format!(
            "{n} of the {n} pool samples wait for review (1 not yet assigned to reviewers, {} not scored yet)",
            n - 1
        )
    } else {
        "1 of the 1 pool samples wait for review (1 not yet assigned to reviewers)".to_string()
    };
    assert!(out.contains(&want), "{want}\n{out}");
    // The last sample changed: it waits for its scores as before (undecided, the release
    // counts it by its decision whatever its content).
    let mut changed: serde_json::Value = serde_json::from_str(last).unwrap();
    changed["scenario"].as_array_mut().unwrap().push("changed after review".into());
    let pool = if head.is_empty() { format!("{changed}\n") } else { format!("{head}\n{changed}\n") };
    let want = format!("{n} of the {n} pool samples wait for review ({n} not scored yet)");
    let out = status_with(pool);
    assert!(out.contains(&want), "{want}\n{out}");
}

/// Every sample of the pool changed after it was accepted (written into the pool by hand,
/// then put back): `status` counts them as the release does, changed after review, and
/// waits for their reviewers again.
fn accepted_samples_changed_wait_again(proj: &Path) {
    let files: Vec<std::path::PathBuf> = ["validate", "levels-export"]
        .iter()
        .map(|s| proj.join(format!("artifacts/{s}/samples.jsonl")))
        .filter(|p| p.is_file())
        .collect();
    let before: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let mut total = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let changed: String = text
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["scenario"].as_array_mut().unwrap().push("changed after review".into());
                total += 1;
                format!("{v}\n")
            })
            .collect();
        std::fs::write(f, changed).unwrap();
    }
    let o = run(proj, &["status"]);
    for (f, b) in files.iter().zip(&before) {
        std::fs::write(f, b).unwrap();
    }
    let out = stdout(&o);
    let line = out.lines().find(|l| l.starts_with("waiting for people: ")).unwrap_or_else(|| panic!("{out}"));
    let k = line["waiting for people: ".len()..].split(' ').next().unwrap();
    assert_eq!(
        line,
        format!(
            "waiting for people: {k} of the {total} pool samples wait for review ({k} changed since their review); nothing is released until a sample is accepted"
        )
    );
    assert!(k.parse::<usize>().unwrap() > 0, "{line}");
    assert!(out.contains("`benchgen run` assigns them"), "{out}");
}

#[test]
fn init_logs_track_checks_and_runs_to_a_verified_release_with_nothing_copied() {
    let llm = ScriptedLlm::start(answer);
    let dir = tempfile::tempdir().unwrap();
    users_files(dir.path());
    let o = init(dir.path(), &llm, &["--track", "logs", "--logs", "my_logs.jsonl", "--catalog", "tools.json"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("format `events`") && out.contains("format `mcp`"), "formats detected: {out}");
    // The first run's LLM work, counted in the copied log file; nothing is timed yet.
    let curate = out.lines().find(|l| l.starts_with("logs-curate ")).unwrap_or_else(|| panic!("no estimate: {out}"));
    assert!(curate.contains("sessions in the log files") && curate.contains("not measured"), "{curate}");
    let proj = dir.path().join("proj");
    for f in ["pipeline/proj.toml", "reviews/reviewers.toml", "raw/personas.toml", ".gitignore", "README.md"] {
        assert!(proj.join(f).is_file(), "{f} missing");
    }
    assert!(!proj.join("pipeline/prompts").exists(), "prompts are built in, not copied");
    let readme = std::fs::read_to_string(proj.join("README.md")).unwrap();
    assert!(readme.contains("BENCHGEN_ANON_SECRET") && readme.contains("raw/logs/my_logs.jsonl"), "{readme}");
    // Role-play is in the new project's run (issue 38: a new domain's release has
    // synthesised multi-turn samples too), with a small default.
    let o = run(&proj, &["--json", "stages"]);
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rp = rows.as_array().unwrap().iter().find(|r| r["name"] == "synth-roleplay").unwrap();
    assert_eq!(rp["enabled"], true, "{rp}");
    let samples = run_to_release(&proj);
    assert!(samples.lines().count() > 0);
    let dialogues = std::fs::read_to_string(proj.join("artifacts/synth-roleplay/dialogues.jsonl")).unwrap();
    assert_eq!(dialogues.lines().count(), 2, "{dialogues}");

    // Refuses to overwrite an existing project.
    let o = init(dir.path(), &llm, &["--track", "logs"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("already holds a benchgen project"), "{}", stderr(&o));
}

/// `init --probe` times one stage-sized exchange per role before it reckons the first run,
/// so its table says about how long each stage takes (≈), where without it says nothing.
#[test]
fn init_with_probe_times_each_role_and_reckons_the_first_run_with_it() {
    let llm = ScriptedLlm::start(|seen| {
        let u = seen.last_user();
        if u.contains("Which tool should be called first?") {
            // A stage-sized exchange takes time; a test double's 1 ms rounds to none.
            std::thread::sleep(std::time::Duration::from_millis(20));
            return Answer::json(serde_json::json!({"tool": "get_oncall", "reason": "It asks who is on call."}));
        }
        if u.contains("Put the result in the field `sum`") {
            let nums: Vec<i64> = u.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            return Answer::json(serde_json::json!({"sum": nums[0] + nums[1]}));
        }
        answer(seen)
    });
    let dir = tempfile::tempdir().unwrap();
    users_files(dir.path());
    let o =
        init(dir.path(), &llm, &["--track", "logs", "--logs", "my_logs.jsonl", "--catalog", "tools.json", "--probe"]);
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("probe (a stage-sized exchange)"), "{out}");
    let curate = out.lines().find(|l| l.starts_with("logs-curate ")).unwrap_or_else(|| panic!("no estimate: {out}"));
    assert!(curate.contains("≈ ") && curate.contains("from `llm ping --probe`"), "{out}");
    // `run` says it again as each stage starts, at the pace timed so far.
    let o = run(&dir.path().join("proj"), &["run", "--until", "logs-curate"]);
    assert_code(&o, 0);
    let err = stderr(&o);
    let line = err.lines().find(|l| l.starts_with("running `logs curate` … (")).unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.contains("(up to ") && line.contains("(re-asks aside), about ") && line.ends_with("the ledger has timed)"),
        "{line}"
    );
    assert!(err.lines().any(|l| l == "running `logs import` …"), "a stage without LLM exchanges has no note: {err}");
    let o = run(
        dir.path(),
        &["--json", "init", "other", "--provider", "vllm", "--base-url", &llm.base_url(), "--model", "m", "--probe"],
    );
    assert_code(&o, 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["probe"].as_array().is_some_and(|r| !r.is_empty() && r.iter().all(|r| r["probe_ms"].is_u64())), "{v}");
    // The global `--llm-mode` holds for the probe too: `replay` sends nothing.
    let sent = llm.count();
    let url = llm.base_url();
    let o = run(
        dir.path(),
        &["--llm-mode", "replay", "init", "third", "--provider", "vllm", "--base-url", &url, "--model", "m", "--probe"],
    );
    assert_code(&o, 0);
    assert_eq!(llm.count(), sent, "a replayed probe asks the endpoint nothing");
    assert!(stdout(&o).contains("the probe did not run") && stdout(&o).contains("replay mode"), "{}", stdout(&o));
}

#[test]
fn init_registry_track_checks_and_runs_to_a_verified_release() {
    let llm = ScriptedLlm::start(answer);
    let dir = tempfile::tempdir().unwrap();
    users_files(dir.path());
    let o = init(dir.path(), &llm, &["--track", "registry", "--registry", "registry.json"]);
    assert_code(&o, 0);
    let proj = dir.path().join("proj");
    assert!(!proj.join("raw/personas.toml").exists(), "no role-play on the registry track");
    let samples = run_to_release(&proj);
    assert!(samples.contains("\"L1-"), "ETOM levels released: {samples}");
}

#[test]
fn init_both_tracks_checks_and_runs_to_a_verified_release_of_both_families() {
    let llm = ScriptedLlm::start(answer);
    let dir = tempfile::tempdir().unwrap();
    users_files(dir.path());
    let o = init(
        dir.path(),
        &llm,
        &["--track", "both", "--logs", "my_logs.jsonl", "--catalog", "tools.json", "--registry", "registry.json"],
    );
    assert_code(&o, 0);
    let o = run(&dir.path().join("proj"), &["check"]);
    assert_code(&o, 0);
    let o = run(&dir.path().join("proj"), &["stages", "--json"]);
    let stages: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let enabled: Vec<&str> = stages
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["enabled"] == true)
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    for s in ["registry-import", "efs-verify", "levels-l1", "logs-import", "synth-chains", "execute", "release"] {
        assert!(enabled.contains(&s), "{s} not in {enabled:?}");
    }
    // Both tracks' first run waits for the reviewers as one; then one release holds both.
    let samples = run_to_release(&dir.path().join("proj"));
    assert!(samples.contains("\"L1-") && samples.contains("\"family\":\"finmcp\""), "both families: {samples}");
}

/// On the local model (the default provider) the agent loops of a new project run one at a
/// time, so the local server evaluates the tools' shared prompt prefix once
/// (docs/llm.md#prompts); on an endpoint that caches prefixes they keep the default.
#[test]
fn init_on_the_local_model_runs_agent_loops_one_at_a_time() {
    let concurrency = |proj: &Path| {
        let text = std::fs::read_to_string(proj.join("pipeline/proj.toml")).unwrap();
        let cfg: toml::Value = toml::from_str(&text).unwrap();
        let get = |t: &toml::Value| t.get("concurrency").and_then(toml::Value::as_integer);
        (get(&cfg["execute"]), get(&cfg["synth"]["roleplay"]))
    };
    let dir = tempfile::tempdir().unwrap();
    users_files(dir.path());
    let o = run(dir.path(), &["init", "proj", "--track", "logs", "--logs", "my_logs.jsonl", "--catalog", "tools.json"]);
    assert_code(&o, 0);
    assert_eq!(concurrency(&dir.path().join("proj")), (Some(1), Some(1)));

    let llm = ScriptedLlm::start(answer);
    let dir = tempfile::tempdir().unwrap();
    users_files(dir.path());
    let o = init(dir.path(), &llm, &["--track", "logs", "--logs", "my_logs.jsonl", "--catalog", "tools.json"]);
    assert_code(&o, 0);
    assert_eq!(concurrency(&dir.path().join("proj")), (None, None));
}

/// `--logs` takes a folder (each of its log files a source; a catalog beside them skipped
/// with the reason) and repeats; `check` passes on what it writes. A folder with no log,
/// and two logs of one name, are refused with nothing written.
#[test]
fn init_takes_a_folder_of_logs_and_several_files() {
    let llm = ScriptedLlm::start(answer);
    let dir = tempfile::tempdir().unwrap();
    users_files(dir.path());
    let logs = dir.path().join("exported");
    std::fs::create_dir(&logs).unwrap();
    for f in ["chats.jsonl", "catalog.json"] {
        std::fs::copy(repo().join("raw/demo/logs").join(f), logs.join(f)).unwrap();
    }
    std::fs::write(logs.join("tool_list.JSON"), r#"[{"name": "get_quote", "inputSchema": {"type": "object"}}]"#)
        .unwrap();
    let o = init(
        dir.path(),
        &llm,
        &["--track", "logs", "--logs", "exported", "--logs", "my_logs.jsonl", "--catalog", "tools.json"],
    );
    assert_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("→ `raw/logs/chats.jsonl` (format `openai`)"), "{out}");
    assert!(out.contains("→ `raw/logs/my_logs.jsonl` (format `events`)"), "{out}");
    assert!(
        out.contains("logs: skipped `") && out.contains("catalog.json` is one JSON object over several lines"),
        "{out}"
    );
    assert!(out.contains("tool_list.JSON`: a list of tools, not a log"), "a tool list is no FinMCP log: {out}");
    let proj = dir.path().join("proj");
    let config = std::fs::read_to_string(proj.join("pipeline/proj.toml")).unwrap();
    for (name, path, format) in
        [("chats", "raw/logs/chats.jsonl", "openai"), ("my_logs", "raw/logs/my_logs.jsonl", "events")]
    {
        let source = format!("[[logs.sources]]\nname = \"{name}\"\npath = \"{path}\"\nformat = \"{format}\"\n");
        assert!(config.contains(&source), "{source} in {config}");
    }
    assert!(!proj.join("raw/logs/catalog.json").exists(), "the skipped file is not copied");
    assert_code(&run(&proj, &["check"]), 0);

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = run(dir.path(), &["init", "p", "--track", "logs", "--logs", "empty"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("holds no tool-call log: no `.json` or `.jsonl` file"), "{}", stderr(&o));
    let o = run(dir.path(), &["init", "p", "--track", "logs", "--logs", "exported", "--logs", "exported/chats.jsonl"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("chats.jsonl` is given twice"), "{}", stderr(&o));
    std::fs::copy(dir.path().join("my_logs.jsonl"), logs.join("my_logs.jsonl")).unwrap();
    let o = run(dir.path(), &["init", "p", "--track", "logs", "--logs", "exported", "--logs", "my_logs.jsonl"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("two of your logs are named `my_logs.jsonl`"), "{}", stderr(&o));
    assert!(!dir.path().join("p").exists(), "nothing written on bad input");
}

#[test]
fn init_refuses_bad_input_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a log").unwrap();
    let o = run(dir.path(), &["init", "p", "--track", "logs", "--logs", "notes.txt"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("notes.txt"), "{}", stderr(&o));
    assert!(!dir.path().join("p").exists(), "nothing written on bad input");
    let o = run(dir.path(), &["init", "p", "--track", "registry", "--logs", "x.jsonl"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("for the log track"), "{}", stderr(&o));
    let o = run(dir.path(), &["init", "p", "--provider", "vllm"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("--model"), "{}", stderr(&o));
    assert!(!dir.path().join("p").exists());
}

#[test]
fn builtin_prompts_list_show_export_and_an_override_that_changes_the_manifest_hash() {
    let llm = ScriptedLlm::start(answer);
    let dir = tempfile::tempdir().unwrap();
    users_files(dir.path());
    assert_code(&init(dir.path(), &llm, &["--track", "logs", "--logs", "my_logs.jsonl", "--catalog", "tools.json"]), 0);
    let proj = dir.path().join("proj");

    // list: every built-in, with the stages that use it.
    let o = run(&proj, &["prompts", "list"]);
    assert_code(&o, 0);
    let list = stdout(&o);
    assert!(list.contains("logs_need") && list.contains("used by logs-curate"), "{list}");
    assert!(list.contains("built-in"), "{list}");

    // show: the built-in text is the repository's file, byte for byte.
    let o = run(&proj, &["prompts", "show", "logs_need"]);
    assert_code(&o, 0);
    let file = std::fs::read_to_string(repo().join("pipeline/prompts/logs_need.md")).unwrap();
    assert_eq!(stdout(&o).trim_end(), file.trim_end());

    // An unchanged built-in hashes as its file did (the manifest key names the built-in).
    assert_code(&run(&proj, &["logs", "import"]), 0);
    assert_code(&run(&proj, &["logs", "curate"]), 0);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(proj.join("artifacts/logs-curate/manifest.json")).unwrap())
            .unwrap();
    let want = benchgen::store::hash_file(&repo().join("pipeline/prompts/logs_need.md")).unwrap();
    assert_eq!(manifest["prompts"]["builtin:logs_need"], serde_json::json!(want), "{manifest}");

    // export round-trips: files equal to the built-ins change nothing but the key.
    let o = run(&proj, &["prompts", "export"]);
    assert_code(&o, 0);
    for (name, text) in benchgen::llm::prompts::BUILTIN {
        assert_eq!(std::fs::read_to_string(proj.join(format!("pipeline/prompts/{name}.md"))).unwrap(), *text);
    }
    let o = run(&proj, &["prompts", "export"]);
    assert!(stdout(&o).contains("kept"), "a second export keeps what exists: {}", stdout(&o));

    // Exported copies hold the built-ins' text: nothing is stale.
    let o = run(&proj, &["status"]);
    assert!(stdout(&o).contains("logs-curate      done"), "{}", stdout(&o));
    // An override wins and changes the hash: curation is stale and reruns with it.
    let edited = format!("{file}\nBe strict.\n");
    std::fs::write(proj.join("pipeline/prompts/logs_need.md"), &edited).unwrap();
    let o = run(&proj, &["status"]);
    assert!(
        stdout(&o).contains("logs-curate      stale") && stdout(&o).contains("prompt `logs_need` changed"),
        "{}",
        stdout(&o)
    );
    assert_code(&run(&proj, &["logs", "curate"]), 0);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(proj.join("artifacts/logs-curate/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(
        manifest["prompts"]["pipeline/prompts/logs_need.md"],
        serde_json::json!(benchgen::store::sha256_hex(edited.as_bytes()))
    );
    let o = run(&proj, &["prompts", "list"]);
    assert!(stdout(&o).contains("overrides the built-in"), "{}", stdout(&o));

    // A template that is neither: `check` names the key and how to list the built-ins.
    let cfg = std::fs::read_to_string(proj.join("pipeline/proj.toml")).unwrap();
    let cfg = cfg.replace("[logs.curate]\n", "[logs.curate]\nneed_template = \"my_need\"\n");
    std::fs::write(proj.join("pipeline/proj.toml"), cfg).unwrap();
    let o = run(&proj, &["check"]);
    assert_code(&o, 1);
    assert!(stderr(&o).contains("my_need") && stderr(&o).contains("benchgen prompts list"), "{}", stderr(&o));
}

#[test]
fn prompts_work_without_a_project() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(dir.path(), &["prompts", "list"]);
    assert_code(&o, 0);
    assert!(stdout(&o).contains("efs_verify_list") && stdout(&o).contains("built-ins only"), "{}", stdout(&o));
    let o = run(dir.path(), &["prompts", "export", "out"]);
    assert_code(&o, 0);
    assert_eq!(std::fs::read_dir(dir.path().join("out")).unwrap().count(), benchgen::llm::prompts::BUILTIN.len());
    let o = run(dir.path(), &["prompts", "show", "nope"]);
    assert_code(&o, 1);
}
