//! `llm::batch` against the scripted OpenAI-compatible test double: the concurrency
//! bound (single- and multi-call items), the failure-share threshold (below: the stage
//! goes on and failed items are recorded with reasons; above: it fails naming the
//! counts), counts taken from checkpointed items, and — through the `benchgen` binary —
//! a kill inside the filter's classifier and a resume that repeats no exchange and
//! gives byte-identical artifacts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::scripted_llm::{Answer, ScriptedLlm, Seen};
use benchgen::ledger::Ledger;
use benchgen::llm::Prompt;
use benchgen::llm::batch::{self, Batch, BatchOptions, Item, ItemError};
use benchgen::printer::Printer;
use benchgen::settings::Settings;
use benchgen::store::Checkpoint;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
struct Label {
    label: String,
}

struct Project {
    dir: tempfile::TempDir,
    settings: Settings,
}

/// A temp project with one role `r` at `base_url` and a prompt `tag` asking about `{{ name }}`.
fn project(base_url: &str, extra: &str) -> Project {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline/prompts")).unwrap();
    std::fs::write(dir.path().join("pipeline/prompts/tag.md"), "You label things.\n--- user ---\nThing: {{ name }}\n")
        .unwrap();
    let p = dir.path().join("pipeline/t.toml");
    std::fs::write(
        &p,
        format!(
            "[llm.roles.r]\nprovider = \"vllm\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\ntemperature = 0.0\nseed = 1\nbackoff_ms = 10\nreask = 0\n{extra}\n"
        ),
    )
    .unwrap();
    let settings = Settings::load(&p).unwrap();
    Project { dir, settings }
}

impl Project {
    fn batch<'a>(&self, printer: &'a Printer, opts: BatchOptions) -> anyhow::Result<Batch<'a>> {
        let ledger = Ledger::open(&self.settings.artifacts).unwrap();
        let run = ledger.begin_run("test-batch", "", "0").unwrap();
        let ckpt = Checkpoint::open(&self.dir.path().join("artifacts/.work/test-batch")).unwrap();
        Batch::open(&self.settings, printer, run, ckpt, opts)
    }

    fn checkpointed(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("artifacts/.work/test-batch/items.jsonl"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }
}

fn things(n: usize) -> Vec<(String, String)> {
    (0..n).map(|i| (format!("thing-{i:02}"), format!("thing {i:02}"))).collect()
}

/// Answers `{label: <the thing>}`; things listed in `bad` get prose (an invalid answer).
fn labeller(bad: &'static [&'static str], delay_ms: u64) -> ScriptedLlm {
    ScriptedLlm::start(move |seen: &Seen| {
        let thing = seen.last_user().lines().next().unwrap_or_default().trim_start_matches("Thing: ").to_string();
        let a = if bad.contains(&thing.as_str()) {
            Answer::text("I would rather not say.")
        } else {
            Answer::json(json!({"label": thing}))
        };
        if delay_ms > 0 { a.after(delay_ms) } else { a }
    })
}

fn opts(concurrency: usize) -> BatchOptions {
    BatchOptions::new("test-batch", "label", "things").concurrency(concurrency)
}

#[test]
fn concurrency_bound_is_respected_for_single_and_multi_call_items() {
    let s = labeller(&[], 60);
    let p = project(&s.base_url(), "max_concurrency = 16");
    let printer = Printer::default();
    let mut b = p.batch(&printer, opts(3)).unwrap();
    let done = b
        .run(things(12), |name: String, llm: Item| async move {
            let r = llm.typed::<Label>("r", &Prompt::new("tag", json!({ "name": name }))).await?;
            Ok(r.value.label)
        })
        .unwrap();
    assert_eq!(done.values.len(), 12);
    assert_eq!(done.values["thing-07"], "thing 07");
    assert_eq!(s.max_in_flight(), 3, "three at once, never more (the endpoint would allow 16)");

    // Items that each ask three things at once still keep to the bound on requests.
    let s = labeller(&[], 60);
    let p = project(&s.base_url(), "max_concurrency = 16");
    let mut b = p.batch(&printer, opts(2)).unwrap();
    let done = b
        .run(things(4), |name: String, llm: Item| async move {
            let llm = &llm;
            let calls = (0..3).map(|k| {
                let prompt = Prompt::new("tag", json!({ "name": format!("{name}/{k}") }));
                async move { llm.typed_as::<Label>("r", &prompt, &format!("part{k}")).await.map(|r| r.value.label) }
            });
            Ok(batch::all(futures::future::join_all(calls).await)?.join(","))
        })
        .unwrap();
    assert_eq!(done.values["thing-01"], "thing 01/0,thing 01/1,thing 01/2");
    assert_eq!(s.count(), 12);
    assert_eq!(s.max_in_flight(), 2);
    // Each part is recorded under `<key>:<part>`.
    let l = Ledger::open(&p.settings.artifacts).unwrap();
    let n: i64 = l
        .connection()
        .query_row("SELECT COUNT(*) FROM events WHERE kind = 'llm.exchange' AND subject = 'thing-02:part1'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(n, 1);
}

fn label_all(b: &mut Batch, n: usize) -> anyhow::Result<batch::Done<String>> {
    b.run(things(n), |name: String, llm: Item| async move {
        let r = llm.typed::<Label>("r", &Prompt::new("tag", json!({ "name": name }))).await?;
        Ok(r.value.label)
    })
}

#[test]
fn failure_share_above_the_threshold_fails_naming_counts_and_below_records_reasons() {
    let s = labeller(&["thing 03", "thing 08"], 0);
    let p = project(&s.base_url(), "");
    let printer = Printer::default();

    // Default 0: the two invalid answers fail the stage after all other items are done.
    let mut b = p.batch(&printer, opts(4)).unwrap();
    let e = format!("{:#}", label_all(&mut b, 10).unwrap_err());
    assert!(e.contains("2 of 10 things failed (20.0%, more than `max_failed_share` = 0)"), "{e}");
    assert!(e.contains("the 8 finished are kept"), "{e}");
    assert!(e.contains("thing-03: LLM answer in stage `test-batch`, item `thing-03`"), "{e}");
    assert!(e.contains("thing-08: "), "{e}");
    assert_eq!(p.checkpointed(), 8, "finished items are checkpointed, failed ones are not");
    assert_eq!(s.count(), 10);
    drop(b);

    // 10% allowed: still too many, and the error names the configured key.
    let mut b = p.batch(&printer, opts(4).max_failed_share(0.1, "x.max_failed_share")).unwrap();
    let e = format!("{:#}", label_all(&mut b, 10).unwrap_err());
    assert!(e.contains("2 of 10 things failed (20.0%, more than `x.max_failed_share` = 0.1)"), "{e}");
    drop(b);

    // 25% allowed: the stage goes on; failed items are recorded with their reasons.
    let mut b = p.batch(&printer, opts(4).max_failed_share(0.25, "x.max_failed_share")).unwrap();
    let done = label_all(&mut b, 10).unwrap();
    assert_eq!(done.resumed, 8);
    assert_eq!(done.values.len(), 8);
    let failed: Vec<&str> = done.failed.iter().map(|f| f.item.as_str()).collect();
    assert_eq!(failed, ["thing-03", "thing-08"]);
    assert!(done.failed[0].reason.contains("is still invalid after 1 attempt(s)"), "{:?}", done.failed);
    assert_eq!(s.count(), 10, "the retried items were answered from the ledger, the rest from the checkpoint");
    let mut out = benchgen::stage::Output::default();
    b.finish(&mut out).unwrap();
    assert_eq!(out.counts["failed_items"], 2);
    assert!(out.notes.iter().any(|n| n.contains("2 things failed and are left out")), "{:?}", out.notes);
    // Counts come from the items: the same as one uninterrupted run with the same policy.
    let resumed_counts = out.counts.clone();

    let s2 = labeller(&["thing 03", "thing 08"], 0);
    let q = project(&s2.base_url(), "");
    let mut b = q.batch(&printer, opts(4).max_failed_share(0.25, "x.max_failed_share")).unwrap();
    label_all(&mut b, 10).unwrap();
    let mut out = benchgen::stage::Output::default();
    b.finish(&mut out).unwrap();
    assert_eq!(out.counts, resumed_counts);
    assert_eq!(out.counts["llm_exchanges"], 10);
    assert_eq!(out.counts["llm_failures"], 2);
    assert!(out.counts["llm_prompt_tokens"].as_u64().unwrap() > 0);
}

#[test]
fn out_of_range_shares_are_refused_naming_the_key() {
    let s = labeller(&[], 0);
    let p = project(&s.base_url(), "");
    let printer = Printer::default();
    for bad in [f64::NAN, -0.5, 1.01] {
        let e = p.batch(&printer, opts(1).max_failed_share(bad, "efs.topdown.max_failed_share")).err().unwrap();
        assert!(e.to_string().contains("`efs.topdown.max_failed_share` must be a number from 0 to 1"), "{e}");
    }
}

#[test]
fn fatal_errors_stop_at_once_and_keep_finished_items() {
    // The first three answer; then the endpoint refuses everything (not an item-level failure).
    let s = ScriptedLlm::start(
        |seen: &Seen| {
            if seen.n < 3 { Answer::json(json!({"label": "x"})) } else { Answer::status(401) }
        },
    );
    let p = project(&s.base_url(), "max_retries = 0");
    let printer = Printer::default();
    let mut b = p.batch(&printer, opts(1)).unwrap();
    let e = format!("{:#}", label_all(&mut b, 10).unwrap_err());
    assert!(e.contains("stopping: the LLM is unusable for every item (3 of 10 things finished are kept"), "{e}");
    assert_eq!(s.count(), 4, "nothing more is asked after the fatal error");
    assert_eq!(p.checkpointed(), 3);
    // A closure's own error is fatal too and names the item.
    let mut b = p.batch(&printer, opts(1)).unwrap();
    let e = b
        .run(things(5), |name: String, _llm: Item| async move {
            if name == "thing 04" {
                return Err(ItemError::Fatal(anyhow::anyhow!("tool `x` is not in the catalog")));
            }
            Ok(name)
        })
        .unwrap_err();
    assert!(format!("{e:#}").contains("work item `thing-04`: tool `x` is not in the catalog"), "{e:#}");
}

// ---- through the binary: kill inside the filter's classifier, resume ----

fn keep_or_drop(seen: &Seen) -> Answer {
    if seen.last_user().contains("price") {
        Answer::json(json!({"reason": "live market data", "verdict": "keep"}))
    } else {
        Answer::json(json!({"reason": "not needed", "verdict": "drop"}))
    }
}

fn filter_project(base_url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline/prompts")).unwrap();
    std::fs::copy(
        repo().join("pipeline/prompts/filter-classify.md"),
        dir.path().join("pipeline/prompts/filter-classify.md"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("pipeline/t.toml"),
        format!(
            r#"[registry]
source = "{}"
[filter]
classifier_role = "c"
[[filter.rules]]
id = "ask-getters"
target = "tool"
class = "custom"
reason = "getters may be trivial"
name = ['^get_']
action = "ask"
[llm.roles.c]
provider = "vllm"
base_url = "{base_url}"
model = "scripted"
temperature = 0.0
seed = 3
backoff_ms = 10
max_concurrency = 1
"#,
            repo().join("raw/demo/registry.json").display()
        ),
    )
    .unwrap();
    dir
}

fn benchgen(dir: &Path, fail_at: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_benchgen"));
    c.current_dir(dir).env("BENCHGEN_NO_PROGRESS", "1").env_remove("BENCHGEN_LLM_MODE").env_remove("BENCHGEN_FAIL_AT");
    if let Some(f) = fail_at {
        c.env("BENCHGEN_FAIL_AT", f);
    }
    c.arg("--config").arg("pipeline/t.toml").args(args).output().unwrap()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let o = benchgen(dir, None, args);
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every file of a stage folder; manifests without their run-dependent fields.
fn stage_files(dir: &Path, stage: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir.join("artifacts").join(stage)).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let mut bytes = std::fs::read(&p).unwrap();
        if name == "manifest.json" {
            let mut m: Value = serde_json::from_slice(&bytes).unwrap();
            for k in ["run_id", "started_at", "finished_at", "duration_ms"] {
                m.as_object_mut().unwrap().remove(k);
            }
            bytes = serde_json::to_vec_pretty(&m).unwrap();
        }
        out.insert(name, bytes);
    }
    out
}

#[test]
fn killed_filter_classifier_resumes_without_repeated_exchanges_and_identical_artifacts() {
    let s = ScriptedLlm::start(keep_or_drop);
    let reference = filter_project(&s.base_url());
    ok(reference.path(), &["run", "--until", "filter"]);
    let want = stage_files(reference.path(), "filter");
    assert_eq!(s.count(), 16);

    let s = ScriptedLlm::start(keep_or_drop);
    let p = filter_project(&s.base_url());
    ok(p.path(), &["registry", "import"]);
    let killed = benchgen(p.path(), Some("filter_classify_item:5"), &["filter"]);
    assert!(!killed.status.success(), "the fail point aborts the run");
    let ckpt = std::fs::read_to_string(p.path().join("artifacts/.work/filter/items.jsonl")).unwrap();
    assert_eq!(ckpt.lines().count(), 5);
    assert!(!p.path().join("artifacts/filter").exists(), "nothing committed by the killed run");
    let before = s.count();
    assert!((5..=6).contains(&before), "one request in flight at a time: {before}");

    ok(p.path(), &["filter"]);
    // Every question asked exactly once over both processes (the one cut off by the
    // kill, if any, was recorded and is answered from the ledger).
    let mut asked: BTreeMap<String, usize> = BTreeMap::new();
    for r in s.requests() {
        *asked.entry(r.last_user()).or_default() += 1;
    }
    assert_eq!(asked.len(), 16);
    assert!(asked.values().all(|n| *n == 1), "{asked:#?}");
    assert_eq!(stage_files(p.path(), "filter"), want, "artifacts are byte-identical to an uninterrupted run");
    assert!(!p.path().join("artifacts/.work/filter").exists(), "checkpoints cleared after the commit");
}
