//! The OpenAI batch API path at scale (issue 43; run by scripts/bench.d/12-llm-batch.sh;
//! nothing asserted): N distinct small typed requests (`Item {{ i }}: answer.`) of a role in
//! `mode = "batch"`, sent at once through `LlmClient` as a stage sends them, against the tests'
//! loopback stand-in of the files and batches endpoints, 50,000 requests per file (OpenAI's
//! limit), so 100,000 go out as two batches. `cargo bench --bench llm_batch -- N` (default
//! 100,000); under `cargo test --all-targets` a small smoke run.
//!
//! The client runs in a child process so that the peak resident memory (`VmHWM`) is
//! benchgen's alone: the stand-in, here in the parent, keeps every file and every request
//! line parsed. The stand-in holds the batches until every file is uploaded and its batch
//! created, so the three phases follow each other and add up to the total:
//!
//! * write + upload: from the first send until the last batch is created (the client's work
//!   per request, `gather_ms` of quiet, the JSONL files, their upload and the creates);
//! * stand-in: until the stand-in answered the last line (with up to 50 ms until the next
//!   poll). The batches are polled every 50 ms, less than the stand-in takes to answer
//!   50,000 lines, so the later batch's poll waits while it answers the earlier one and
//!   no download starts in between;
//! * download + ingest: until every call has its answer (the output files downloaded, the
//!   answers stored in the ledger, each exchange recorded and its answer checked).

mod common;

#[path = "../tests/it/support/scripted_llm.rs"]
mod scripted_llm;
// scripted_llm answers at a schema's edges with the tests' edge generator.
#[path = "../tests/it/support/batch_api.rs"]
mod batch_api;
#[path = "../tests/it/support/schema_edges.rs"]
mod schema_edges;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use batch_api::{BatchApi, Faults};
use benchgen::ledger::Ledger;
use benchgen::llm::{LlmClient, LlmMode, Prompt};
use benchgen::settings::Settings;
use futures::StreamExt;
use scripted_llm::{Answer, Seen};
use serde::Deserialize;
use serde_json::{Value, json};

// The `benchgen` binary's allocator (src/main.rs), so the client's peak is the one a stage
// run has: without it a bench binary runs on glibc's malloc, whose per-thread arenas keep
// what one thread freed from another's allocations.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Requests per batch file (OpenAI's limit).
const PER_FILE: usize = 50_000;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Verdict {
    reason: String,
    verdict: String,
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(f64::NAN, |d| d.as_secs_f64())
}

/// The child: a project with role `r` in batch mode at `base_url`, `n` requests through the
/// client, then one JSON line of figures (times in Unix seconds).
fn client_side(base_url: &str, n: usize) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline/prompts")).unwrap();
    std::fs::write(dir.path().join("pipeline/prompts/b.md"), "Item {{ i }}: answer.\n").unwrap();
    let role = format!(
        "[llm.roles.r]\nprovider = \"vllm\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\ntemperature = 0.0\nseed = 1\n\
         timeout_s = 600\nmode = \"batch\"\n[llm.roles.r.batch]\ngather_ms = 500\nmax_requests = {PER_FILE}\n\
         poll_s = 0.05\npoll_max_s = 0.05\n"
    );
    std::fs::write(dir.path().join("pipeline/b.toml"), role).unwrap();
    let s = Settings::load(&dir.path().join("pipeline/b.toml")).unwrap();
    let run = Ledger::open(&s.artifacts).unwrap().begin_run("bench", "", "0").unwrap();
    let cl = LlmClient::with_mode(&s, "bench", run, LlmMode::Live).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let t0 = unix_now();
    rt.block_on(async {
        let calls = (0..n).map(|i| {
            let cl = cl.clone();
            async move { cl.typed::<Verdict>("r", &Prompt::new("b", json!({"i": i})), &format!("i{i}")).await }
        });
        // All in flight at once, as a stage runs the items of a batch role; each answer is
        // dropped when it comes, so the peak is the client's, not this loop's.
        let mut answers = futures::stream::iter(calls).buffer_unordered(n.max(1));
        while let Some(r) = answers.next().await {
            r.unwrap();
        }
    });
    let end = unix_now();
    let files = benchgen::llm::batch_api::list(&s).unwrap().len();
    println!("{}", json!({"t0": t0, "end": end, "files": files, "peak_mib": common::peak_rss_mib()}));
}

/// Wait until `done` or the child's exit; past `deadline` the child is killed (a hang ends).
fn wait(child: &mut Child, deadline: Instant, done: impl Fn() -> bool) {
    loop {
        if done() || child.try_wait().expect("client process").is_some() {
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the client process did not end in time");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The parent: the stand-in, the client process, and the table row.
fn stand_in_side(n: usize, benching: bool) {
    // When the stand-in answered its last line (Unix seconds).
    let last_answer = Arc::new(Mutex::new(0.0_f64));
    let answered = last_answer.clone();
    let rule = move |_: &Seen| {
        *answered.lock().unwrap() = unix_now();
        Answer::json(json!({"reason": "r", "verdict": "keep"}))
    };
    let api = BatchApi::start(rule, Faults { hold: true, ..Faults::default() });
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .arg("--child")
        .arg(api.base_url())
        .arg(n.to_string())
        .env("BENCHGEN_NO_PROGRESS", "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("client process");
    let deadline = Instant::now() + Duration::from_secs(if benching { 3_600 } else { 300 });
    let files = n.div_ceil(PER_FILE);
    let created = || api.requests().iter().filter(|r| r.as_str() == "POST /v1/batches").count();
    wait(&mut child, deadline, || created() >= files);
    let released = unix_now();
    api.release();
    wait(&mut child, deadline, || false);
    let status = child.wait().expect("client process");
    assert!(status.success(), "the client process failed ({status})");
    let mut out = String::new();
    child.stdout.take().expect("piped stdout").read_to_string(&mut out).expect("the client's output");
    let v: Value = serde_json::from_str(out.lines().next_back().unwrap_or_default()).expect("the client's figures");
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let (t0, end, last) = (f("t0"), f("end"), *last_answer.lock().unwrap());
    println!(
        "| requests | files | write + upload s | stand-in s | download + ingest s | total s | exchanges/s \
         | ingest exchanges/s | peak RSS |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {n} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} MiB |",
        v["files"],
        released - t0,
        last - released,
        end - last,
        end - t0,
        n as f64 / (end - t0),
        n as f64 / (end - last),
        f("peak_mib")
    );
}

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let benching = all.iter().any(|a| a == "--bench");
    let args: Vec<String> = all.into_iter().filter(|a| a != "--bench").collect();
    if args.first().map(String::as_str) == Some("--child") {
        client_side(&args[1], args[2].parse().expect("the number of requests"));
        return;
    }
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(if benching { 100_000 } else { 500 });
    stand_in_side(n, benching);
}
