//! `[embed] provider = "openai"`: vectors from an OpenAI-compatible `/v1/embeddings` server.
//! Against the scripted test double (answering `/v1/embeddings` with vectors made from each
//! text's sha256): batching and concurrency, reuse by model and text hash (not by URL),
//! retries, client errors, the API key kept out of every output, and config errors. Against
//! the real llama-server of `make setup` in embedding mode with the 0.5B GGUF: vectors of the
//! model's width come back, the same text gives the same vector, and reuse by hash holds.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use benchgen::embed::embed_rows;
use benchgen::embedding::{Embedder, Index, Vectors, normalised};
use benchgen::settings::Settings;
use serde_json::{Value, json};

use crate::support::repo;
use crate::support::scripted_llm::{Answer, ScriptedLlm, Seen};

const DIM: usize = 8;

/// The double's vector for a text: its sha256 bytes as numbers (not normalised).
fn double_vector(text: &str) -> Vec<f32> {
    let h = benchgen::store::sha256_hex(text.as_bytes());
    let hex = h.trim_start_matches("sha256:");
    (0..DIM).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap() as f32 / 255.0 + 0.01).collect()
}

fn inputs(seen: &Seen) -> Vec<String> {
    seen.body["input"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

/// An `/v1/embeddings` answer, listed in reverse order with indices (the client must sort).
fn embeddings(seen: &Seen) -> Answer {
    let data: Vec<Value> = inputs(seen)
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": double_vector(t)}))
        .collect();
    Answer::Raw(
        json!({"object": "list", "data": data, "model": seen.body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}})
            .to_string(),
    )
}

struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    /// The demo registry and an `[embed]` section (lines given).
    fn new(embed: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
        std::fs::copy(repo().join("raw/demo/registry.json"), dir.path().join("registry.json")).unwrap();
        let p = Project { dir };
        p.config(embed);
        p
    }

    fn config(&self, embed: &str) {
        std::fs::write(
            self.cfg(),
            format!("[registry]\nsource = \"{}\"\n\n[embed]\n{embed}\n", self.root().join("registry.json").display()),
        )
        .unwrap();
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn cfg(&self) -> PathBuf {
        self.root().join("pipeline/t.toml")
    }

    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::cargo_bin("benchgen")
            .unwrap()
            .env("BENCHGEN_NO_PROGRESS", "1")
            .env("BENCHGEN_TEST_EMBED_KEY", KEY)
            .arg("--config")
            .arg(self.cfg())
            .args(args)
            .output()
            .unwrap()
    }

    /// Run and return (tools, embedded, reused) from the stage note.
    fn embed(&self, args: &[&str]) -> (u64, u64, u64) {
        let o = self.cmd(args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let re = crate::support::regex(r"(\d+) tools: (\d+) embedded, (\d+) reused").unwrap();
        let c = re.captures(&out).unwrap_or_else(|| panic!("no embed note in {out}"));
        let n = |i: usize| c[i].parse::<u64>().unwrap();
        (n(1), n(2), n(3))
    }

    fn vectors(&self) -> Vectors {
        Vectors::load(&self.root().join("artifacts/embed")).unwrap()
    }
}

const KEY: &str = "sk-embed-test-9f8e7d6c5b4a3210";

fn server_embed(base_url: &str, extra: &str) -> String {
    format!("provider = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"double-embed\"\n{extra}")
}

#[test]
fn vectors_come_from_the_server_in_batches_and_are_reused_by_text_hash() {
    let s = ScriptedLlm::start(|r| embeddings(r).after(30));
    let p = Project::new(&server_embed(&s.base_url(), "batch_size = 5\nmax_concurrency = 3"));
    let (tools, embedded, reused) = p.embed(&["run", "--until", "embed"]);
    assert_eq!((embedded, reused), (tools, 0));
    let reqs = s.requests();
    assert!(reqs.iter().all(|r| r.path == "/v1/embeddings" && r.body["model"] == "double-embed"));
    assert!(reqs.iter().all(|r| inputs(r).len() <= 5));
    assert_eq!(reqs.iter().map(|r| inputs(r).len() as u64).sum::<u64>(), tools);
    assert!(s.max_in_flight() <= 3, "{}", s.max_in_flight());
    // Every row is the server's vector of that tool's text, normalised.
    let by_hash: std::collections::HashMap<String, Vec<f32>> = reqs
        .iter()
        .flat_map(inputs)
        .map(|t| (benchgen::store::sha256_hex(t.as_bytes()), normalised(double_vector(&t))))
        .collect();
    let v = p.vectors();
    assert_eq!((v.index.model_id.as_str(), v.dim(), v.len() as u64), ("double-embed", DIM, tools));
    for (i, row) in v.index.tools.iter().enumerate() {
        assert_eq!(v.row(i), by_hash[&row.text_sha256].as_slice(), "row of `{}`", row.id);
    }

    // One edited description: exactly that text goes to the server again.
    let registry = p.root().join("registry.json");
    let original = std::fs::read_to_string(&registry).unwrap();
    let edited =
        original.replacen("Get the real-time quote for a stock ticker", "Get the live quote for a stock ticker", 1);
    assert_ne!(edited, original);
    std::fs::write(&registry, edited).unwrap();
    let before = s.count();
    assert_eq!(p.embed(&["run", "--until", "embed"]), (tools, 1, tools - 1));
    let new: Vec<String> = s.requests()[before..].iter().flat_map(inputs).collect();
    assert_eq!(new.len(), 1);
    assert!(new[0].contains("Get the live quote"), "{new:?}");

    // Another server (or replica) of the same model: the URL is no part of the reuse key.
    let other = ScriptedLlm::start(embeddings);
    p.config(&server_embed(&other.base_url(), "batch_size = 5"));
    assert_eq!(p.embed(&["embed", "--force"]), (tools, 0, tools));
    assert_eq!(other.count(), 0);

    // Another model: everything is embedded again.
    p.config(&format!("provider = \"openai\"\nbase_url = \"{}\"\nmodel = \"double-embed-2\"", other.base_url()));
    assert_eq!(p.embed(&["embed"]), (tools, tools, 0));
    assert_eq!(p.vectors().index.model_id, "double-embed-2");
}

#[test]
fn an_interrupted_run_resumes_from_its_checkpoint() {
    // The server answers three requests of five texts, then refuses every request.
    let s = ScriptedLlm::start(|r| if r.n < 3 { embeddings(r) } else { Answer::status(400) });
    let p = Project::new(&server_embed(&s.base_url(), "batch_size = 5\nmax_concurrency = 1"));
    let o = p.cmd(&["run", "--until", "embed"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("HTTP 400"));
    assert!(!p.root().join("artifacts/embed/index.json").exists(), "nothing half-written");
    // Another server of the same model finishes the work without the 15 finished texts.
    let again = ScriptedLlm::start(embeddings);
    p.config(&server_embed(&again.base_url(), "batch_size = 5\nmax_concurrency = 1"));
    let o = p.cmd(&["embed"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tools = p.vectors().len() as u64;
    assert!(
        out.contains(&format!(
            "{tools} tools: {} embedded, 15 reused from the previous run (15 of them from the checkpoint",
            tools - 15
        )),
        "{out}"
    );
    let sent: Vec<String> = again.requests().iter().flat_map(inputs).collect();
    assert_eq!(sent.len() as u64, tools - 15);
    // The result is what one uninterrupted run gives, and the checkpoint is gone.
    let v = p.vectors();
    let first: Vec<String> = s.requests()[..3].iter().flat_map(inputs).collect();
    for t in first.iter().chain(&sent) {
        let h = benchgen::store::sha256_hex(t.as_bytes());
        let row = v.index.tools.iter().position(|r| r.text_sha256 == h).unwrap();
        assert_eq!(v.row(row), normalised(double_vector(t)).as_slice());
    }
    assert!(!p.root().join("artifacts/.work/embed").exists());
}

/// A project with `[embed]` only, loaded as settings (for the library API).
fn settings(embed: &str) -> (tempfile::TempDir, Settings) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pipeline/x.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(&cfg, format!("[embed]\n{embed}\n")).unwrap();
    let s = Settings::load(&cfg).unwrap();
    (dir, s)
}

fn texts(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

#[test]
fn transient_failures_are_retried_and_client_errors_are_not() {
    let s = ScriptedLlm::start(|r| match r.n {
        0 => Answer::status(503),
        1 => Answer::too_many("0"),
        2 => Answer::MalformedBody,
        // One vector for two inputs: not an answer.
        3 => Answer::Raw(json!({"data": [{"index": 0, "embedding": [1.0, 2.0]}]}).to_string()),
        _ => embeddings(r),
    });
    let (_d, st) = settings(&server_embed(&s.base_url(), "backoff_ms = 5\nmax_concurrency = 1"));
    let mut e = Embedder::load(&st).unwrap();
    let t = texts(&["get weather", "delete a file"]);
    let v = e.embed(&t, 2, &indicatif::ProgressBar::hidden()).unwrap();
    assert_eq!(s.count(), 5);
    assert_eq!(v[0], normalised(double_vector("get weather")));
    assert_eq!(v[1], normalised(double_vector("delete a file")));

    let bad = ScriptedLlm::start(|_| Answer::status(400));
    let (_d, st) = settings(&server_embed(&bad.base_url(), "backoff_ms = 5"));
    let err = Embedder::load(&st).unwrap().embed(&t, 2, &indicatif::ProgressBar::hidden()).unwrap_err();
    assert!(err.to_string().contains("HTTP 400"), "{err}");
    assert_eq!(bad.count(), 1, "a 400 is not retried");

    let down = ScriptedLlm::start(|_| Answer::status(503));
    let (_d, st) = settings(&server_embed(&down.base_url(), "backoff_ms = 5\nmax_retries = 2"));
    let err = Embedder::load(&st).unwrap().embed(&t, 1, &indicatif::ProgressBar::hidden()).unwrap_err().to_string();
    assert!(err.contains("after 3 attempt(s)") && err.contains("HTTP 503") && err.contains("double-embed"), "{err}");
}

/// A server that echoes the `Authorization` header it got in an error body.
fn echoing(fail_first: usize) -> ScriptedLlm {
    ScriptedLlm::start(move |r| {
        if r.n < fail_first {
            let auth = r.authorization.clone().unwrap_or_default();
            Answer::Status {
                code: 500,
                retry_after: None,
                body: json!({"error": {"message": format!("upstream rejected {auth}")}}).to_string(),
            }
        } else {
            embeddings(r)
        }
    })
}

fn assert_no_key(what: &str, text: &str) {
    assert!(!text.contains(KEY) && !text.contains(&KEY[..12]), "{what} leaks the key:\n{text}");
}

fn assert_no_key_in_files(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            assert_no_key_in_files(&p);
        } else {
            assert_no_key(&p.display().to_string(), &String::from_utf8_lossy(&std::fs::read(&p).unwrap()));
        }
    }
}

#[test]
fn the_api_key_goes_only_into_the_authorization_header() {
    let s = echoing(1);
    let p = Project::new(&server_embed(&s.base_url(), "api_key_env = \"BENCHGEN_TEST_EMBED_KEY\"\nbackoff_ms = 5"));
    let o = p.cmd(&["-vv", "run", "--until", "embed"]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    assert!(s.requests().iter().all(|r| r.authorization.as_deref() == Some(&format!("Bearer {KEY}"))));
    assert!(err.contains("[redacted]"), "the echoed key is logged redacted at debug level:\n{err}");
    assert_no_key("stdout", &out);
    assert_no_key("stderr", &err);
    assert_no_key_in_files(&p.root().join("artifacts"));

    // A final failure: the error names the status, not the key.
    let down = echoing(usize::MAX);
    p.config(&server_embed(
        &down.base_url(),
        "api_key_env = \"BENCHGEN_TEST_EMBED_KEY\"\nbackoff_ms = 5\nmax_retries = 1\nbatch_size = 1000\nmodel_id = \"other\"",
    ));
    let o = p.cmd(&["embed"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("HTTP 500") && err.contains("[redacted]"), "{err}");
    assert_no_key("stderr", &err);
    assert_no_key("stdout", &String::from_utf8_lossy(&o.stdout));
    assert_no_key_in_files(&p.root().join("artifacts"));
    assert_eq!(down.count(), 2, "one request of every text, retried once");

    // An unset variable is named, and nothing is sent.
    let o = Command::cargo_bin("benchgen")
        .unwrap()
        .env("BENCHGEN_NO_PROGRESS", "1")
        .env_remove("BENCHGEN_TEST_EMBED_KEY")
        .arg("--config")
        .arg(p.cfg())
        .args(["embed", "--force"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("BENCHGEN_TEST_EMBED_KEY") && err.contains("not set"), "{err}");
    assert_eq!(down.count(), 2);
}

#[test]
fn embed_config_errors_are_reported_at_load() {
    let load = |embed: &str| -> String {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("pipeline/x.toml");
        std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
        std::fs::write(&cfg, format!("[embed]\n{embed}\n")).unwrap();
        format!("{:#}", Settings::load(&cfg).unwrap_err())
    };
    let e = load("provider = \"openai\"");
    assert!(e.contains("`base_url` is required") && e.contains("`model` is required"), "{e}");
    let e = load("base_url = \"http://127.0.0.1:1/v1\"\nmax_concurrency = 2");
    assert!(e.contains("`base_url`, `max_concurrency`: for `provider = \"openai\"` only"), "{e}");
    let e = load("provider = \"openai\"\nbase_url = \"http://x/v1\"\nmodel = \"m\"\npooling = \"cls\"");
    assert!(e.contains("`pooling`: for `provider = \"fastembed\"` only"), "{e}");
    let e = load("provider = \"openai\"\nbase_url = \"localhost:8080\"\nmodel = \"m\"\napi_key_env = \"sk-123 456\"");
    assert!(e.contains("must start with http://") && e.contains("NAME of an environment variable"), "{e}");
    let e = load("provider = \"openai\"\nbase_url = \"http://user:pw@host/v1\"\nmodel = \"m\"\nmax_concurrency = 0");
    assert!(e.contains("user or password") && e.contains("`max_concurrency` must be at least 1"), "{e}");
    let e = load("provider = \"cohere\"");
    assert!(e.contains("cohere"), "{e}");
    let e = load("batch_size = 0");
    assert!(e.contains("embed.batch_size"), "{e}");
}

/// The real llama-server of `make setup`, started in embedding mode with the 0.5B GGUF (a
/// chat model: this checks the wiring, not the quality of its vectors). With more than one
/// slot (`-np 2`) the second text of a request came back with cosine 0.73 to its vector
/// alone; the same-text check below catches that. In CI (`CI=true`)
/// missing assets fail the test; elsewhere it is skipped with the reason.
#[test]
fn real_llama_server_embeddings_have_the_model_width_and_are_reused_by_hash() {
    let Some((bin, model, _one_at_a_time)) = crate::support::local_llm_assets("the real llama-server embedding test")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = rt
        .block_on(benchgen::llm::local::LocalServer::start(&benchgen::llm::local::LocalSpec {
            binary: bin,
            model,
            threads: 2,
            ctx_size: 1024,
            // One slot: this llama-server build returns wrong vectors for all but one of
            // several sequences that share a batch (more slots, or several inputs per
            // request over several slots); checked below by the same-text assertion.
            parallel: 1,
            startup_timeout: std::time::Duration::from_secs(120),
            log_dir: dir.path().join("logs"),
            extra_args: ["--embeddings", "--pooling", "mean", "-ub", "1024", "-b", "1024"].map(String::from).to_vec(),
        }))
        .unwrap();
    let (_d, st) = settings(&format!(
        "provider = \"openai\"\nbase_url = \"{}\"\nmodel = \"qwen2.5-coder-0.5b\"\nmax_concurrency = 2",
        server.base_url()
    ));
    let mut e = Embedder::load(&st).unwrap();
    let t = texts(&[
        "Tool: get_weather | Description: Current weather for a city.",
        "Tool: delete_file | Description: Delete a file from the disk.",
        "Tool: forecast | Description: Weather forecast for the next days in a city.",
    ]);
    let v = e.embed(&t, 2, &indicatif::ProgressBar::hidden()).unwrap();
    // Qwen2.5 0.5B: hidden size 896.
    assert!(v.iter().all(|x| x.len() == 896), "{:?}", v.iter().map(Vec::len).collect::<Vec<_>>());
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    for x in &v {
        assert!((dot(x, x) - 1.0).abs() < 1e-4);
    }
    assert!(dot(&v[0], &v[1]) < 0.9999, "different texts, different vectors");
    // The same text again, alone in its request: the same vector.
    let again = e.embed(&t[1..2], 1, &indicatif::ProgressBar::hidden()).unwrap();
    assert!(dot(&again[0], &v[1]) > 0.999, "{}", dot(&again[0], &v[1]));

    // Reuse by text hash: a previous output with these three rows, then a catalog where
    // one text changed: one embedded, two reused bit for bit.
    let rows: Vec<(String, String)> =
        t.iter().enumerate().map(|(i, text)| (format!("s::t{i}"), text.clone())).collect();
    let (first, reused) = embed_rows(&st, &benchgen::printer::Printer::default(), &rows).unwrap();
    assert_eq!((reused, first.dim()), (0, 896));
    let out = st.artifacts.join("embed");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("index.json"), serde_json::to_vec(&first.index).unwrap()).unwrap();
    std::fs::write(out.join("vectors.f32"), first.vector_bytes()).unwrap();
    let mut grown = rows.clone();
    grown[2].1 = "Tool: forecast | Description: Seven-day weather forecast for a city.".into();
    let (second, reused) = embed_rows(&st, &benchgen::printer::Printer::default(), &grown).unwrap();
    assert_eq!(reused, 2);
    assert_eq!(second.row(0), first.row(0));
    assert_eq!(second.row(1), first.row(1));
    assert_ne!(second.index.tools[2].text_sha256, first.index.tools[2].text_sha256);
    let index: Index = serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    assert_eq!(index.model_id, "qwen2.5-coder-0.5b");
    drop(server);
}
