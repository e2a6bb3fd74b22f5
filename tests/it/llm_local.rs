//! `provider = "local"`: benchgen starts llama-server itself and leaves no process behind —
//! on success, on a start-up failure and on Ctrl-C — and a killed run leaves no server log
//! in `$TMPDIR`. The smoke test runs the real 0.5B model from the setup cache; the others
//! use small shell scripts standing in for the server binary (test doubles written by the
//! tests into their temp folders).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::llm_ping_project;
use benchgen::ledger::Ledger;
use benchgen::llm::{LlmClient, LlmError, LlmMode, Prompt};
use benchgen::settings::Settings;
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Capital {
    country: String,
    capital: String,
}

fn write_project(dir: &Path, role: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("pipeline/prompts")).unwrap();
    std::fs::write(
        dir.join("pipeline/prompts/capital.md"),
        "You answer geography questions in JSON.\n--- user ---\nWhat is the capital of {{ country }}?\n",
    )
    .unwrap();
    let p = dir.join("pipeline/test.toml");
    std::fs::write(&p, format!("[llm.roles.r]\nprovider = \"local\"\n{role}\n")).unwrap();
    p
}

/// [`write_project`] for a stand-in server binary `bin` and the `model.gguf` in `dir`, with
/// `extra` role lines.
fn stand_in_project(dir: &Path, bin: &Path, extra: &str) -> PathBuf {
    write_project(
        dir,
        &format!(
            "server_binary = \"{}\"\nmodel_path = \"{}\"\n{extra}",
            bin.display(),
            dir.join("model.gguf").display()
        ),
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn client(settings: &Settings) -> LlmClient {
    let run = Ledger::open(&settings.artifacts).unwrap().begin_run("test", "", "0").unwrap();
    LlmClient::with_mode(settings, "test", run, LlmMode::Cached).unwrap()
}

/// Alive = exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.rsplit(')').next().map(|r| !r.trim_start().starts_with('Z')).unwrap_or(false),
        Err(_) => false,
    }
}

fn wait_dead(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A stand-in "llama-server" that never answers /health and starts a child of its own,
/// writing both pids next to itself.
fn hanging_server(dir: &Path) -> PathBuf {
    let bin = dir.join("fake-llama-server");
    std::fs::write(
        &bin,
        "#!/bin/bash\nd=$(dirname \"$0\")\necho $$ > \"$d/server.pid\"\nsleep 1000 &\necho $! > \"$d/child.pid\"\nwait\n",
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("model.gguf"), b"not a model").unwrap();
    bin
}

fn read_pid(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && let Ok(p) = s.trim().parse()
        {
            return p;
        }
        assert!(Instant::now() < deadline, "`{}` never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_server_that_never_gets_healthy_is_stopped_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let bin = hanging_server(dir.path());
    let cfg = stand_in_project(dir.path(), &bin, "startup_timeout_s = 1.5");
    let settings = Settings::load(&cfg).unwrap();
    let c = client(&settings);
    let err = rt()
        .block_on(c.typed::<Capital>("r", &Prompt::new("capital", json!({"country": "France"})), "fr"))
        .unwrap_err();
    assert!(matches!(err, LlmError::Setup { .. }), "{err:?}");
    assert!(err.to_string().contains("did not become healthy"), "{err}");
    let (server, child) = (read_pid(&dir.path().join("server.pid")), read_pid(&dir.path().join("child.pid")));
    assert!(wait_dead(server), "server {server} survived");
    assert!(wait_dead(child), "its child {child} survived");
    // The failure is remembered: the next item fails at once instead of starting again.
    std::fs::remove_file(dir.path().join("server.pid")).unwrap();
    let again = rt().block_on(c.typed::<Capital>("r", &Prompt::new("capital", json!({"country": "Peru"})), "pe"));
    assert!(again.is_err());
    assert!(!dir.path().join("server.pid").exists());
}

/// The error of the first call of a role whose `server_binary` is `script`.
fn start_error(script: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("stand-in-llama-server");
    std::fs::write(&bin, script).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join("model.gguf"), b"x").unwrap();
    let cfg = stand_in_project(dir.path(), &bin, "");
    let settings = Settings::load(&cfg).unwrap();
    rt().block_on(client(&settings).text("r", &Prompt::new("capital", json!({"country": "France"})), "fr"))
        .unwrap_err()
        .to_string()
}

#[test]
fn a_server_that_exits_at_once_is_reported_with_its_log() {
    let err = start_error("#!/bin/bash\necho 'error: cannot load model: bad magic' >&2\nexit 1\n");
    assert!(err.contains("exited with status 1 during start-up") && err.contains("bad magic"), "{err}");
}

/// A build that uses instructions this CPU traps on (AMX on some hosts) dies by SIGILL:
/// the error says so and what to run.
#[test]
fn a_server_killed_by_sigill_at_start_is_named_with_the_fix() {
    let err = start_error("#!/bin/sh\necho 'load_backend: loaded CPU backend' >&2\nkill -ILL $$\n");
    assert!(err.contains("was killed by SIGILL: this llama-server build does not run on this CPU"), "{err}");
    assert!(err.contains("run `make setup`") && err.contains("loaded CPU backend"), "{err}");
}

/// The same build on another model dies by a general protection fault on `ldtilecfg`
/// (SIGSEGV at start, seen on an AMX host): named the same way.
#[test]
fn a_server_killed_by_sigsegv_at_start_is_named_with_the_fix() {
    let err = start_error("#!/bin/sh\necho 'llama threadpool init, n_threads = 2' >&2\nkill -SEGV $$\n");
    assert!(
        err.contains("was killed by SIGSEGV: this llama-server build does not run on this CPU")
            && err.contains("during start-up; run `make setup`, which checks the server and rebuilds it portable"),
        "{err}"
    );
    assert!(err.contains("threadpool init"), "{err}");
}

#[test]
fn missing_assets_point_at_make_setup() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_project(dir.path(), "server_binary = \"nowhere/llama-server\"");
    let settings = Settings::load(&cfg).unwrap();
    let err = rt()
        .block_on(client(&settings).text("r", &Prompt::new("capital", json!({"country": "France"})), "fr"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("make setup"), "{err}");
}

#[test]
fn ctrl_c_during_start_up_stops_the_server_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let bin = hanging_server(dir.path());
    let cfg = stand_in_project(dir.path(), &bin, "startup_timeout_s = 60");
    std::fs::create_dir_all(dir.path().join("pipeline/prompts")).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("pipeline/prompts/llm-ping.md"),
        dir.path().join("pipeline/prompts/llm-ping.md"),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_benchgen"))
        .args(["--config", cfg.to_str().unwrap(), "llm", "ping"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let server = read_pid(&dir.path().join("server.pid"));
    let grandchild = read_pid(&dir.path().join("child.pid"));
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "benchgen did not exit after Ctrl-C");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success(), "exit must be non-zero");
    assert!(stderr.contains("interrupted") || stderr.contains("cancelled"), "{stderr}");
    assert!(wait_dead(server), "llama-server stand-in {server} survived Ctrl-C");
    assert!(wait_dead(grandchild), "its child {grandchild} survived Ctrl-C");
}

/// The embedded default on this machine: the real llama-server and the 0.5B model that
/// `make setup` put into $BENCHGEN_CACHE. In CI (CI=true) missing assets fail the test.
#[test]
fn real_local_model_gives_a_schema_valid_typed_answer() {
    let Some((_, model, _one_at_a_time)) = crate::support::local_llm_assets("the real-model smoke test") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // A uniquely named link to the model, so this test can find its own server in /proc.
    let link = dir.path().join("smoke-model.gguf");
    std::os::unix::fs::symlink(&model, &link).unwrap();
    let cfg = write_project(
        dir.path(),
        &format!("model_path = \"{}\"\ntemperature = 0.0\nseed = 7\nmax_tokens = 64", link.display()),
    );
    let settings = Settings::load(&cfg).unwrap();
    let c = client(&settings);
    let reply =
        rt().block_on(c.typed::<Capital>("r", &Prompt::new("capital", json!({"country": "France"})), "fr")).unwrap();
    eprintln!("local model answered: {:?}", reply.value);
    assert!(!reply.value.country.is_empty() && !reply.value.capital.is_empty());
    assert!(!reply.cached);
    let running = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|c| String::from_utf8_lossy(&c).contains(link.to_str().unwrap()))
    };
    assert!(running(), "the server runs while the client lives");
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(10);
    while running() {
        assert!(Instant::now() < deadline, "llama-server still running after the client was dropped");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A stand-in llama-server (a test double): appends its pid to `starts.txt` beside itself,
/// answers `/health`, answers `/slots` with one busy slot for its first three reads (each
/// read a line in `slots.txt`), and forwards every other request to the scripted endpoint on the port
/// in `upstream.txt` beside itself, or else `$BENCHGEN_TEST_UPSTREAM`.
fn forwarding_server(dir: &Path) -> PathBuf {
    let bin = dir.join("llama-server-standin");
    std::fs::write(
        &bin,
        r#"#!/usr/bin/env python3
import http.server, os, sys, urllib.request
port = int(sys.argv[sys.argv.index("--port") + 1])
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "starts.txt"), "a") as f:
    f.write(f"{os.getpid()}\n")
here = os.path.dirname(os.path.abspath(__file__))
port_file = os.path.join(here, "upstream.txt")
upstream_port = open(port_file).read().strip() if os.path.exists(port_file) else os.environ['BENCHGEN_TEST_UPSTREAM']
upstream = f"http://127.0.0.1:{upstream_port}"
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, body, content_type="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path == "/slots":
            # llama-server's slots: the first three reads say one is still busy.
            with open(os.path.join(here, "slots.txt"), "a") as f:
                f.write("read\n")
            reads = len(open(os.path.join(here, "slots.txt")).readlines())
            busy = "true" if reads <= 3 else "false"
            self.reply(200, ('[{"id": 0, "is_processing": %s}, {"id": 1, "is_processing": false}]' % busy).encode())
            return
        self.reply(200, b'{"status":"ok"}')
    def do_POST(self):
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        req = urllib.request.Request(upstream + self.path, data, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            self.reply(r.status, r.read(), r.headers.get("Content-Type", "application/json"))
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#,
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `benchgen run` starts a local model once for all its stages (not once per stage), and
/// stops it when the command ends; a single stage command starts its own.
#[test]
fn a_run_starts_the_local_model_once_for_all_its_stages_and_stops_it_at_the_end() {
    use crate::support::scripted_llm::{Edge, ScriptedLlm};
    let llm = ScriptedLlm::at_schema_edge(Edge::Min);
    let dir = tempfile::tempdir().unwrap();
    let server = forwarding_server(dir.path());
    std::fs::write(dir.path().join("model.gguf"), b"a stand-in model").unwrap();
    let demo = crate::support::repo().join("raw/demo/logs");
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
    let cfg = dir.path().join("pipeline/t.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"[project]
name = "t"
seed = 1

[[logs.sources]]
name = "ops"
path = "{events}"

[logs.catalog]
path = "{catalog}"
format = "mcp"

[logs.anonymise]
secret_env = "BENCHGEN_ANON_SECRET"

[logs.curate]
judge_role = "judge"
domain = "IT operations"
scenarios = "logs"
llm_sample = 2

[logs.split]
seed_ratio = 0.5

[graph]
role = "judge"
min_support = 14

[llm.roles.judge]
provider = "local"
server_binary = "{server}"
model_path = "{model}"
startup_timeout_s = 60
"#,
            events = demo.join("events.jsonl").display(),
            catalog = demo.join("catalog.json").display(),
            server = server.display(),
            model = dir.path().join("model.gguf").display(),
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_benchgen"))
            .env("BENCHGEN_NO_PROGRESS", "1")
            .env_remove("BENCHGEN_LLM_MODE")
            .current_dir(dir.path())
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .env("BENCHGEN_ANON_SECRET", "test-secret")
            .env("BENCHGEN_TEST_UPSTREAM", llm.port().to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let starts = || -> Vec<u32> {
        std::fs::read_to_string(dir.path().join("starts.txt"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    };
    run(&["run"]);
    let after_run = starts();
    assert_eq!(after_run.len(), 1, "one server for logs-curate and graph-build: {after_run:?}");
    assert!(llm.count() > 2, "both stages asked the model ({} requests)", llm.count());
    assert!(wait_dead(after_run[0]), "the server is stopped when `run` ends");
    assert!(
        std::fs::read_dir(dir.path().join("artifacts/llm/logs")).map(|d| d.count()).unwrap_or(0) == 0,
        "a cleanly stopped server's log is removed"
    );
    // Each single stage command starts its own (the ledger answers nothing: forced, live).
    run(&["--llm-mode", "live", "logs", "curate", "--force"]);
    run(&["--llm-mode", "live", "graph", "build", "--force"]);
    let all = starts();
    assert_eq!(all.len(), 3, "one more server per stage command: {all:?}");
    assert!(all.iter().all(|&p| wait_dead(p)), "every server was stopped: {all:?}");
}

// ---------------------------------------------------------------------------------------
// Issue 10, item 14: a killed run leaves no llama-server log in $TMPDIR; its log under
// `artifacts/llm/logs` is removed by the next start.

#[test]
fn killed_runs_leave_no_local_server_log_in_tmpdir() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // A stand-in llama-server that never gets healthy and writes its pid next to itself.
    let fake = dir.path().join("fake-llama-server");
    std::fs::write(&fake, "#!/bin/sh\necho $$ > \"$(dirname \"$0\")/server.pid\"\nexec sleep 1000\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.path().join("model.gguf"), b"not a model").unwrap();
    llm_ping_project(
        dir.path(),
        "pipeline/demo.toml",
        &format!(
            "[llm.roles.r]\nprovider = \"local\"\nserver_binary = \"{}\"\nmodel_path = \"{}\"\nstartup_timeout_s = 60\n",
            fake.display(),
            dir.path().join("model.gguf").display()
        ),
    );
    let logs = dir.path().join("artifacts/llm/logs");
    let start_and_kill = || -> Vec<String> {
        let _ = std::fs::remove_file(dir.path().join("server.pid"));
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_benchgen"))
            .current_dir(dir.path())
            .args(["llm", "ping"])
            .env("BENCHGEN_NO_PROGRESS", "1")
            .env_remove("BENCHGEN_LLM_MODE")
            .env("TMPDIR", &tmp)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut server = None;
        for _ in 0..500 {
            if let Some(p) =
                std::fs::read_to_string(dir.path().join("server.pid")).ok().and_then(|s| s.trim().parse::<u32>().ok())
            {
                server = Some(p);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let server = server.expect("the stand-in server started");
        let in_logs: Vec<String> = std::fs::read_dir(&logs)
            .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        child.kill().unwrap(); // SIGKILL: no destructor runs
        child.wait().unwrap();
        assert!(wait_dead(server), "PDEATHSIG stops the stand-in");
        in_logs
    };
    let first = start_and_kill();
    assert_eq!(first.len(), 1, "one log under artifacts/llm/logs: {first:?}");
    let leftovers: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(leftovers.is_empty(), "nothing in $TMPDIR: {leftovers:?}");
    assert!(logs.join(&first[0]).exists(), "the killed run's log is kept for the user");
    let second = start_and_kill();
    assert_eq!(second.len(), 1, "the next start removed the dead run's log: {second:?}");
    assert_ne!(first, second);
}

// ---------------------------------------------------------------------------------------
// An agent turn on the local server carries the text-call stops, and a turn cut at one
// reads as its first call, whole (`llm::TEXT_CALL_STOPS`, `llm::closed_at_stop`).

#[test]
fn an_agent_turn_on_the_local_server_stops_at_a_second_text_call_and_keeps_the_first_whole() {
    use crate::support::scripted_llm::{Answer, ScriptedLlm};
    use benchgen::llm::{ChatMessage, TEXT_CALL_STOPS, ToolSpec};
    // What llama-server sends back when the stop met the second call: the first one without
    // its closing `}}`, after a line of prose.
    let cut = "Let me look that up.\n{\"name\": \"get_oncall\", \"arguments\": {\"team\": \"db {x}\"";
    // The second request's answer ran to the completion limit instead: it is left as it came.
    let llm = ScriptedLlm::start(move |seen| {
        let finish = if seen.n == 0 { "stop" } else { "length" };
        Answer::Raw(
            json!({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": cut}, "finish_reason": finish}],
                   "usage": {"prompt_tokens": 9, "completion_tokens": 20}})
            .to_string(),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let server = forwarding_server(dir.path());
    std::fs::write(dir.path().join("upstream.txt"), llm.port().to_string()).unwrap();
    std::fs::write(dir.path().join("model.gguf"), b"a stand-in model").unwrap();
    let cfg = stand_in_project(dir.path(), &server, "startup_timeout_s = 60");
    let c = client(&Settings::load(&cfg).unwrap());
    let tools = [ToolSpec {
        name: "get_oncall".into(),
        description: "Who is on call for a team".into(),
        parameters: json!({"type": "object", "properties": {"team": {"type": "string"}}}),
    }];
    let msgs = [ChatMessage::User("Who is on call for db?".into())];
    let turn = rt().block_on(c.chat("r", &msgs, &tools, "t-1")).unwrap().value;
    let other = [ChatMessage::User("Who is on call for web?".into())];
    let cut_short = rt().block_on(c.chat("r", &other, &tools, "t-2")).unwrap().value;
    drop(c);
    assert_eq!(cut_short.content.as_deref(), Some(cut));
    assert_eq!(llm.requests()[0].body["stop"], json!(TEXT_CALL_STOPS));
    // The two braces the stop took are back (a brace inside a string counts for nothing),
    // so the loop reads the call as it would have read the whole text.
    let content = turn.content.unwrap();
    assert_eq!(content, format!("{cut}}}}}"));
    let calls = benchgen::agent::text_tool_calls(&content, 0, |n| n == "get_oncall");
    assert_eq!(calls.len(), 1, "{content}");
    assert_eq!(calls[0].arguments, json!({"team": "db {x}"}));
}

// An agent turn on the local server streams and ends where a call written as text is whole:
// small models go on after the call, making up its result in the same object, and the loop
// reads nothing after the call (`llm::stream`).

#[test]
fn an_agent_turn_on_the_local_server_ends_where_its_text_call_is_whole() {
    use crate::support::scripted_llm::{Answer, ScriptedLlm};
    use benchgen::llm::ChatMessage;
    use benchgen::llm::ToolSpec;
    let call = r#"{"name": "get_oncall", "arguments": {"team": "db", "when": {"day": "mon"}}"#;
    let made_up = r#", "result_id": "r-1", "items": [{"id": "a", "name": "Anna"}]"#.repeat(20);
    let full = format!("{call}{made_up}");
    let answered = full.clone();
    // The second turn is an answer in words: it streams to its end.
    let llm = ScriptedLlm::start(move |seen| match seen.n {
        0 => Answer::Content(answered.clone()),
        _ => Answer::text("Anna is on call for db."),
    });
    let dir = tempfile::tempdir().unwrap();
    let server = forwarding_server(dir.path());
    std::fs::write(dir.path().join("upstream.txt"), llm.port().to_string()).unwrap();
    std::fs::write(dir.path().join("model.gguf"), b"a stand-in model").unwrap();
    let cfg = stand_in_project(dir.path(), &server, "startup_timeout_s = 60");
    let settings = Settings::load(&cfg).unwrap();
    let c = client(&settings);
    let tools = [ToolSpec {
        name: "get_oncall".into(),
        description: "Who is on call for a team".into(),
        parameters: json!({"type": "object", "properties": {"team": {"type": "string"}}}),
    }];
    let msgs = [ChatMessage::User("Who is on call for db?".into())];
    let reply = rt().block_on(c.chat("r", &msgs, &tools, "t-1")).unwrap();
    let other = [ChatMessage::User("And who is that?".into())];
    let words = rt().block_on(c.chat("r", &other, &tools, "t-2")).unwrap();
    drop(c);
    let body = &llm.requests()[0].body;
    assert_eq!((&body["stream"], &body["timings_per_token"]), (&json!(true), &json!(true)), "{body}");
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    // The text ends in the piece where the arguments close (the stand-in sends four
    // characters a piece), and reads as that call.
    let content = reply.value.content.unwrap();
    assert!(content.len() >= call.len() && content.len() < call.len() + 4, "{content}");
    assert_eq!(content, full[..content.len()]);
    let calls = benchgen::agent::text_tool_calls(&content, 0, |n| n == "get_oncall");
    assert_eq!(calls.len(), 1, "{content}");
    assert_eq!(calls[0].arguments, json!({"team": "db", "when": {"day": "mon"}}));
    assert_eq!(words.value.content.as_deref(), Some("Anna is on call for db."));
    // The ledger says the client ended it, and counts the tokens generated until then from
    // the last piece's timings.
    let ledger = Ledger::open(&settings.artifacts).unwrap();
    let ex = ledger.event(reply.event_id).unwrap().unwrap().payload;
    assert_eq!(ex["response"]["cut_by_client"], benchgen::llm::stream::CUT_REASON, "{ex}");
    assert_eq!(ex["response"]["choices"][0]["finish_reason"], "stop");
    let pieces = content.chars().count().div_ceil(4) as u64;
    assert_eq!(ex["usage"]["completion_tokens"], pieces, "{ex}");
    // After the cut, the client waited until the server had let go of the slot (three busy
    // reads, then an idle one) before the next turn; the turn the model finished did not ask.
    let reads = std::fs::read_to_string(dir.path().join("slots.txt")).unwrap();
    assert_eq!(reads.lines().count(), 4, "{reads}");
    let whole = ledger.event(words.event_id).unwrap().unwrap().payload;
    assert!(whole["response"].get("cut_by_client").is_none(), "{whole}");
    assert_eq!(whole["response"]["choices"][0]["message"]["content"], "Anna is on call for db.");
}
