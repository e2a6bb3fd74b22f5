//! The fuzz suite (issue 10 item 17): every input surface gets near-valid inputs, made by
//! mutating a valid seed (cut, insert a nasty token, flip a byte, truncate, repeat a slice),
//! and must answer with no panic and an error that names the file and the place, leaving
//! artifacts untouched. Surfaces: registry snapshots, tool logs (JSONL conversations,
//! events, FinMCP arrays), review sheets (EFS, graph and eval), the pipeline config,
//! predictions, and MCP messages to the sandbox (stdio) and from a server to the client.
//!
//! A short run is part of `cargo test` (`make test`); `make fuzz` runs many more cases.
//! `BENCHGEN_FUZZ_CASES` sets the cases per library-level surface (default 32); the
//! process-level ones (CLI, MCP) run a quarter of that. Figures in `docs/inputs.md`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::support::{Project, assert_code, repo, stderr};

fn cases() -> u32 {
    std::env::var("BENCHGEN_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(32)
}

fn runner(cases: u32) -> TestRunner {
    // Deterministic per surface: a failure reproduces with the same case count.
    TestRunner::new_with_rng(
        Config { cases, failure_persistence: None, ..Config::default() },
        proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    )
}

/// Tokens that break parsers in interesting ways.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "null",
    "NaN",
    "Infinity",
    "1e400",
    "-0",
    "\"\\ud800\"",
    "\"\\u0000\"",
    "\r\n",
    "\n",
    "\r",
    "=cmd|' /c calc'!A0",
    "\"id\": 1, ",
    "\u{feff}",
    "\u{fffd}",
    "true",
    "99999999999999999999",
    "\"\"",
    "'",
    "\\",
    "\t",
    "\"name\": \"x\", \"name\": \"y\"",
    "é漢",
    "[[",
    "]]]",
    "=",
    "#",
];

/// A list of edits applied to a seed.
type Edits = Vec<(u8, usize, usize)>;

fn edits() -> impl Strategy<Value = Edits> {
    prop::collection::vec((0u8..7, any::<usize>(), any::<usize>()), 1..6)
}

fn mutate(seed: &[u8], edits: &Edits) -> Vec<u8> {
    let mut b = seed.to_vec();
    for &(op, x, y) in edits {
        let n = b.len().max(1);
        let at = x % n;
        match op {
            0 => {
                let end = (at + y % 24).min(b.len());
                b.drain(at.min(b.len())..end);
            }
            1 | 2 => {
                let t = TOKENS[y % TOKENS.len()].as_bytes();
                let at = at.min(b.len());
                b.splice(at..at, t.iter().copied());
            }
            3 if !b.is_empty() => b[at] = (y % 256) as u8,
            4 => b.truncate(at),
            5 => {
                let end = (at + y % 80).min(b.len());
                let slice = b[at.min(b.len())..end].to_vec();
                b.splice(end..end, slice);
            }
            _ => {
                if b.len() > 1 {
                    let j = y % b.len();
                    b.swap(at, j);
                }
            }
        }
    }
    b
}

fn run_fuzz(name: &str, cases: u32, f: impl FnMut(&Edits) -> Result<(), TestCaseError>) {
    let mut r = runner(cases);
    // proptest wants `Fn`; the surfaces keep state (a project, a temp file).
    let f = std::cell::RefCell::new(f);
    if let Err(e) = r.run(&edits(), |e| (f.borrow_mut())(&e)) {
        panic!("fuzz `{name}`: {e}");
    }
}

/// The demo registry cut to its first three servers (a small seed mutates faster).
fn registry_seed() -> Vec<u8> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(repo().join("raw/demo/registry.json")).unwrap()).unwrap();
    let servers: Vec<serde_json::Value> = v["servers"].as_array().unwrap()[..3].to_vec();
    serde_json::to_vec_pretty(&serde_json::json!({"total_servers": 3, "total_tools": 9, "servers": servers})).unwrap()
}

#[test]
fn fuzz_registry_snapshots() {
    let seed = registry_seed();
    run_fuzz("registry", cases(), |e| {
        let bytes = mutate(&seed, e);
        for lenient in [false, true] {
            match benchgen::registry::etom::parse(&bytes, lenient) {
                Ok(imp) => {
                    for p in &imp.problems {
                        prop_assert!(!p.location.is_empty(), "a problem without a location: {p:?}");
                    }
                    for r in &imp.rejected {
                        prop_assert!(!r.location.is_empty() && !r.reason.is_empty(), "{r:?}");
                    }
                }
                Err(problems) => {
                    prop_assert!(!problems.is_empty());
                    for p in &problems {
                        prop_assert!(!p.location.is_empty(), "a problem without a location: {p:?}");
                    }
                }
            }
        }
        Ok(())
    });
}

#[test]
fn fuzz_registry_import_cli_exits_1_naming_the_file_and_leaves_artifacts() {
    let p = Project::demo();
    p.write("raw/demo/registry.json", registry_seed());
    assert_code(&p.run(&["registry", "import"]), 0);
    let seed = registry_seed();
    run_fuzz("registry import (CLI)", (cases() / 4).max(4), |e| {
        let before = p.artifacts();
        let bytes = mutate(&seed, e);
        p.write("raw/demo/registry.json", &bytes);
        let o = p.run(&["registry", "import"]);
        let code = o.status.code();
        prop_assert!(code == Some(0) || code == Some(1), "exit {code:?}: {}", stderr(&o));
        if code == Some(1) {
            let err = stderr(&o);
            prop_assert!(err.starts_with("error: "), "{err}");
            prop_assert!(err.contains("raw/demo/registry.json"), "the file is not named: {err}");
            let after = p.artifacts();
            for (k, v) in &before {
                if k.starts_with("registry-import/") {
                    prop_assert!(after.get(k) == Some(v), "`{k}` changed by a failed import");
                }
            }
        } else {
            // A mutation that is still a valid snapshot: put the seed's import back.
            p.write("raw/demo/registry.json", &seed);
            assert_code(&p.run(&["registry", "import"]), 0);
        }
        Ok(())
    });
}

#[test]
fn fuzz_tool_logs() {
    use benchgen::logs::LogFormat;
    use benchgen::logs::readers::{Item, read_source};
    let dir = tempfile::tempdir().unwrap();
    let first = |rel: &str, n: usize| -> Vec<u8> {
        let text = std::fs::read_to_string(repo().join(rel)).unwrap();
        text.lines().take(n).map(|l| format!("{l}\n")).collect::<String>().into_bytes()
    };
    let fin = br#"[{"id": 1, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "t", "arguments": "{\"x\": 1}"}}]}, {"role": "tool", "tool_call_id": "a", "content": "r"}, {"role": "assistant", "content": "done"}]}]"#;
    let seeds = [
        ("c.jsonl", first("raw/demo/logs/chats.jsonl", 3)),
        ("e.jsonl", first("raw/demo/logs/events.jsonl", 6)),
        ("f.json", fin.to_vec()),
    ];
    for (name, seed) in seeds {
        run_fuzz(&format!("logs {name}"), cases(), |e| {
            let path = dir.path().join(name);
            std::fs::write(&path, mutate(&seed, e)).unwrap();
            let mut bad = Vec::new();
            let r = read_source(&path, "log", "src", LogFormat::Auto, &mut |item| {
                if let Item::Malformed { location, reason } = item {
                    bad.push((location, reason));
                }
                Ok(())
            });
            if let Err(e) = r {
                let m = format!("{e:#}");
                prop_assert!(m.contains("`log") || m.contains("log:") || m.contains("`log`"), "no file in: {m}");
            }
            for (loc, reason) in bad {
                prop_assert!(loc.starts_with("log:"), "location {loc:?} ({reason})");
                prop_assert!(!reason.is_empty());
            }
            Ok(())
        });
    }
}

#[test]
fn fuzz_review_sheets() {
    use benchgen::efs::build::CandidateSet;
    use benchgen::model::Catalog;
    let sets = vec![CandidateSet {
        id: "S1".into(),
        members: vec!["a::x".into(), "b::y".into()],
        servers: vec!["a".into(), "b".into()],
        evidence: vec![],
    }];
    let efs = "set_id,row,tool_id,server,description,signal,decision,target,reviewer,note\r\n\
               S1,set,,,,2 members,approve,,ann,\r\n\
               S1,member,a::x,a,'=x,,drop,,ann,\"a, quoted\nnote\"\r\n\
               S1,member,b::y,b,y,,split,g1,ann,\r\n";
    run_fuzz("efs review sheet", cases(), |e| {
        let files = vec![("s.csv".to_string(), mutate(efs.as_bytes(), e))];
        for allow_empty in [false, true] {
            if let Err(err) = benchgen::efs::review::import_sheets(&files, &sets, &Catalog::default(), allow_empty) {
                prop_assert!(!err.problems.is_empty());
                for p in &err.problems {
                    prop_assert!(p.location.starts_with("s.csv:"), "location {:?}: {}", p.location, p.message);
                }
            }
        }
        Ok(())
    });
    let tools: BTreeSet<String> = ["a".to_string(), "b".into(), "c".into()].into();
    let graph = "from,to,sessions,count,value_flow,llm_verdict,llm_reason,decision,reviewer,note\n\
                 a,b,2,3,1,accepted,'-because,remove,ann,\n\
                 b,c,1,1,0,rejected,no,add,ann,\"x\"\n";
    // The adjudicated review queue of `benchgen eval` (`[release] eval_review`).
    let queue = "id,flags,solve_rate,evidence,decision,note\n\
                 L1-1,all-fail,0.0000,\"`a`, `b` called `x::y`\",leave out,wrong gold\n\
                 L5-1,all-pass,1.0000,,keep,\n\
                 fin-a,label-mismatch,0.3333,,,\n";
    run_fuzz("eval review sheet", cases(), |e| {
        if let Err(err) = benchgen::release::eval_review::parse("r.csv", &mutate(queue.as_bytes(), e)) {
            prop_assert!(!err.problems.is_empty());
            for p in &err.problems {
                prop_assert!(p.location.starts_with("r.csv:"), "location {:?}: {}", p.location, p.message);
            }
        }
        Ok(())
    });
    run_fuzz("graph review sheet", cases(), |e| {
        let files = vec![("g.csv".to_string(), mutate(graph.as_bytes(), e))];
        if let Err(err) = benchgen::graph::review::import_sheets(&files, &tools) {
            for p in &err.problems {
                prop_assert!(p.location.starts_with("g.csv:"), "location {:?}: {}", p.location, p.message);
            }
        }
        Ok(())
    });
}

#[test]
fn fuzz_pipeline_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline")).unwrap();
    let seed = std::fs::read(repo().join("pipeline/demo.toml")).unwrap();
    run_fuzz("pipeline config", cases(), |e| {
        let path = dir.path().join("pipeline/demo.toml");
        std::fs::write(&path, mutate(&seed, e)).unwrap();
        if let Err(err) = benchgen::settings::Settings::load(&path) {
            let m = format!("{err:#}");
            prop_assert!(m.contains("demo.toml"), "the file is not named: {m}");
        }
        Ok(())
    });
}

#[test]
fn fuzz_predictions_and_level_files() {
    use benchgen::score::{Mode, Options};
    let dir = tempfile::tempdir().unwrap();
    let t = |s: &str, n: &str, deps: &[usize]| serde_json::json!({"tool_id": format!("{s}::{n}"), "server_name": s, "tool_name": n, "description": "", "dependencies": deps});
    let level = serde_json::json!([
        {"query_id": 1, "query": "q", "ground_truth_tools": [t("s", "a", &[]), t("s", "b", &[0])], "ground_truth_tools_count": 2},
        {"query_id": 2, "query": "q", "ground_truth_tools": [[t("s", "a", &[]), t("s", "c", &[])]], "ground_truth_tools_count": 1}
    ])
    .to_string();
    let sel = |n: &str| serde_json::Value::String(serde_json::json!({"server": "s", "tool_name": n}).to_string());
    let preds = format!(
        "{}\n{}\n",
        serde_json::json!({"id": "L3-1", "prediction": [sel("a"), sel("b")]}),
        serde_json::json!({"id": "L3-2", "prediction": [sel("c")]})
    );
    let bench = dir.path().join("level_3.json");
    let pred = dir.path().join("pred.jsonl");
    for (what, seed) in [("predictions", preds.as_bytes()), ("level file", level.as_bytes())] {
        run_fuzz(what, cases(), |e| {
            let (b, p) = if what == "predictions" {
                (level.as_bytes().to_vec(), mutate(seed, e))
            } else {
                (mutate(seed, e), preds.as_bytes().to_vec())
            };
            std::fs::write(&bench, b).unwrap();
            std::fs::write(&pred, p).unwrap();
            for mode in [Mode::Corrected, Mode::CompatEtom] {
                let opts = Options {
                    benches: vec![bench.clone()],
                    pred: pred.clone(),
                    bench_format: None,
                    pred_format: None,
                    etom_level: None,
                    mode,
                };
                match benchgen::score::run(&opts) {
                    Ok(rep) => {
                        for d in &rep.diagnostics {
                            prop_assert!(!d.message.is_empty());
                        }
                    }
                    Err(err) => {
                        let m = format!("{err:#}");
                        prop_assert!(m.contains("level_3.json") || m.contains("pred.jsonl"), "no file named: {m}");
                    }
                }
            }
            Ok(())
        });
    }
}

/// A JSON-RPC line for the sandbox: one of a few valid messages, mutated.
fn mcp_seeds() -> Vec<String> {
    vec![
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#.into(),
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"alpha-markets-mcp::get_stock_quote","arguments":{"symbol":"AAPL"}}}"#.into(),
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#.into(),
    ]
}

#[test]
fn fuzz_mcp_messages_to_the_sandbox() {
    let p = Project::demo();
    assert_code(&p.run(&["registry", "import"]), 0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_benchgen"))
        .args(["--quiet", "sandbox", "--catalog", "artifacts/registry-import/catalog.json"])
        .current_dir(p.root())
        .env("BENCHGEN_NO_PROGRESS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut send = move |line: &str| {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    send(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}"#,
    );
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // Read until the answer with `id`, skipping the answers to fuzzed lines.
    let mut wait_for = move |id: u64| -> Result<serde_json::Value, String> {
        let mut line = String::new();
        loop {
            line.clear();
            if out.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("the sandbox closed its output (crashed?)".into());
            }
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && v["id"] == id
            {
                return Ok(v);
            }
        }
    };
    wait_for(0).expect("initialize");
    let seeds = mcp_seeds();
    let ping = std::cell::Cell::new(1_000_000u64);
    let (send, wait_for) = (std::cell::RefCell::new(send), std::cell::RefCell::new(wait_for));
    let mut r = runner((cases() / 2).max(8));
    let result = r.run(&(0..seeds.len(), edits()), |(i, e)| {
        let mut send = send.borrow_mut();
        let mut wait_for = wait_for.borrow_mut();
        let bytes = mutate(seeds[i].as_bytes(), &e);
        // One message per line: newlines inside the mutation would split it.
        let text: String = String::from_utf8_lossy(&bytes).replace(['\n', '\r'], " ");
        send(&text);
        ping.set(ping.get() + 1);
        let ping = ping.get();
        send(&format!(r#"{{"jsonrpc":"2.0","id":{ping},"method":"ping"}}"#));
        let v = wait_for(ping).map_err(|e| TestCaseError::fail(format!("after {text:?}: {e}")))?;
        prop_assert!(v.get("result").is_some(), "ping after {text:?}: {v}");
        Ok(())
    });
    drop(send);
    let _ = child.wait();
    if let Err(e) = result {
        panic!("fuzz `mcp sandbox`: {e}");
    }
}

#[test]
fn fuzz_mcp_server_answers_to_the_client() {
    // A "server" that answers the client's first request with a fuzzed line (the id
    // matching the client's: rmcp numbers from 0), then stays silent until stdin closes.
    let p = Project::empty();
    let good = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"f","version":"1"}}}"#;
    run_fuzz("mcp client", (cases() / 4).max(4), |e| {
        let text = String::from_utf8_lossy(&mutate(good.as_bytes(), e)).replace(['\n', '\r'], " ");
        p.write("answer.txt", format!("{text}\n"));
        p.write(
            "pipeline/demo.toml",
            "[mcp.servers.f]\ncommand = \"sh\"\nargs = [\"-c\", \"read l; cat answer.txt; sleep 2\"]\n\
             [mcp]\nstartup_timeout_secs = 1\ncall_timeout_secs = 1\nlist_timeout_secs = 1\n",
        );
        let o = p.cmd().args(["--config", "pipeline/demo.toml", "mcp", "tools", "f"]).output().unwrap();
        let code = o.status.code();
        prop_assert!(code == Some(0) || code == Some(1), "exit {code:?}: {}", stderr(&o));
        if code == Some(1) {
            let err = stderr(&o);
            prop_assert!(err.starts_with("error: ") && err.contains('f'), "{err}");
        }
        Ok(())
    });
}
