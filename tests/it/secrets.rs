//! The API key never leaks, not even its first characters, whatever offset and encoding an
//! endpoint echoes it at: not into the client's errors, the ledger, the project's files or
//! any output line of the binary (issue 10, item 1; each test failed before its fix). A
//! stage run with a key is `llm_cli::the_api_key_appears_nowhere`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::scripted_llm::{Answer, ScriptedLlm};
use crate::support::{bin, llm_ping_project, text};
use benchgen::ledger::Ledger;
use benchgen::llm::{LlmClient, LlmMode, Prompt};
use benchgen::settings::Settings;
use serde_json::json;

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() { out.extend(walk(&p)) } else { out.push(p) }
        }
    }
    out
}

/// Has `"`, `\`, `/`, `+` and `=` so the JSON-escaped, percent- and base64-encoded forms
/// all differ from the raw key.
const KEY: &str = "sk-Qz7\"Lp\\w/M4+nR=vX8kT2yH9bJ6aW5";
const FILLER_LEN: usize = 700;

fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() { A[((n >> (18 - 6 * i)) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// What the endpoint echoes for `form`, and the key-only parts of it to look for.
fn echoed(form: &str) -> (String, String) {
    match form {
        "raw" | "json" => (KEY.to_string(), KEY.to_string()),
        "url" => (format!("/v1/chat?api_key={}", pct(KEY)), pct(KEY)),
        "base64" => {
            let enc = b64(format!("Bearer {KEY}").as_bytes());
            // Characters carrying key bits only: the key spans bytes 7.. of the blob.
            let core = enc[(7 * 8usize).div_ceil(6)..(8 * (7 + KEY.len())) / 6].to_string();
            (format!("Authorization: Basic {enc}"), core)
        }
        _ => unreachable!(),
    }
}

/// An error body with the echoed text at `offset` of a long filler; `json` wraps it in a
/// JSON error object (so the key arrives JSON-escaped).
fn body(form: &str, offset: usize) -> String {
    let filler: String = "upstream said no ".chars().cycle().take(FILLER_LEN).collect();
    let (echo, _) = echoed(form);
    let text = format!("{}{echo}{}", &filler[..offset], &filler[offset..]);
    if form == "json" { json!({"error": {"message": text}}).to_string() } else { text }
}

/// Every 8-character window of every searchable form of the key: finding one means at
/// least 8 characters of the key leaked.
fn leak_windows() -> Vec<String> {
    let json_escaped = serde_json::to_string(KEY).unwrap().trim_matches('"').to_string();
    let mut forms = vec![KEY.to_string(), json_escaped];
    for f in ["url", "base64"] {
        forms.push(echoed(f).1);
    }
    let mut w = Vec::new();
    for f in forms {
        let c: Vec<char> = f.chars().collect();
        for win in c.windows(8) {
            w.push(win.iter().collect());
        }
    }
    w
}

fn assert_no_leak(what: &str, haystack: &str, windows: &[String]) {
    for w in windows {
        assert!(!haystack.contains(w.as_str()), "{what} leaks `{w}` of the key:\n{haystack}");
    }
}

const FORMS: [&str; 4] = ["raw", "json", "url", "base64"];

#[test]
fn api_key_echoed_at_any_offset_and_encoding_leaks_nowhere() {
    let s = ScriptedLlm::start(|seen| {
        let u = seen.last_user();
        let spec = u.trim().strip_prefix("Tool: ").unwrap_or("raw:0").to_string();
        let (form, off) = spec.split_once(':').unwrap();
        Answer::Status { code: 400, retry_after: None, body: body(form, off.parse().unwrap()) }
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pipeline/prompts")).unwrap();
    std::fs::write(dir.path().join("pipeline/prompts/judge.md"), "You judge tools.\n--- user ---\nTool: {{ name }}\n")
        .unwrap();
    let cfg = dir.path().join("pipeline/test.toml");
    std::fs::write(
        &cfg,
        format!(
            "[llm.roles.r]\nprovider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"m\"\nmax_retries = 0\napi_key_env = \"BENCHGEN_TEST_KEY_HARDEN\"\n",
            s.base_url()
        ),
    )
    .unwrap();
    // SAFETY: set before any client reads it; no other test reads this variable.
    unsafe { std::env::set_var("BENCHGEN_TEST_KEY_HARDEN", KEY) };
    let settings = Settings::load(&cfg).unwrap();
    let ledger = Ledger::open(&settings.artifacts).unwrap();
    let run = ledger.begin_run("test", "", "0").unwrap();
    drop(ledger);
    let client = LlmClient::with_mode(&settings, "test", run, LlmMode::Live).unwrap();
    let windows = leak_windows();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut errors = 0;
    rt.block_on(async {
        for form in FORMS {
            for off in 0..=FILLER_LEN {
                let spec = format!("{form}:{off}");
                let err = client
                    .typed::<serde_json::Value>("r", &Prompt::new("judge", json!({"name": spec})), &spec)
                    .await
                    .unwrap_err();
                assert_no_leak(&format!("the error for {spec}"), &format!("{err:#} {err:?}"), &windows);
                errors += 1;
            }
        }
    });
    assert_eq!(errors, FORMS.len() * (FILLER_LEN + 1));
    assert!(s.requests().iter().all(|r| r.authorization.as_deref() == Some(&format!("Bearer {KEY}"))));
    drop(client);
    let files = walk(dir.path());
    assert!(files.iter().any(|f| f.ends_with("ledger.sqlite")));
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        assert_no_leak(&f.display().to_string(), &String::from_utf8_lossy(&bytes), &windows);
    }
    let l = Ledger::open(&settings.artifacts).unwrap();
    let n: i64 =
        l.connection().query_row("SELECT count(*) FROM events WHERE kind = 'llm.failure'", [], |r| r.get(0)).unwrap();
    assert_eq!(n as usize, errors, "every failure is recorded (redacted)");
}

#[test]
fn api_key_straddling_the_display_cut_leaks_into_no_output_line() {
    // `llm ping` through the binary, verbose, at the offsets around the cuts (300
    // characters of a body before the fix, 500 of a message now).
    let next = Arc::new(AtomicUsize::new(0));
    let offsets: Vec<(usize, &str)> =
        FORMS.iter().flat_map(|f| (280..=305).chain(480..=505).step_by(5).map(move |o| (o, *f))).collect();
    let (n2, offs) = (next.clone(), offsets.clone());
    let s = ScriptedLlm::start(move |_| {
        let (off, form) = offs[n2.fetch_add(1, Ordering::SeqCst).min(offs.len() - 1)];
        Answer::Status { code: 500, retry_after: None, body: body(form, off) }
    });
    let dir = tempfile::tempdir().unwrap();
    llm_ping_project(
        dir.path(),
        "pipeline/t.toml",
        &format!(
            "[llm.roles.c]\nprovider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"m\"\nmax_retries = 0\napi_key_env = \"BENCHGEN_SECRET_HARDEN\"\n",
            s.base_url()
        ),
    );
    let windows = leak_windows();
    for (off, form) in &offsets {
        let o = bin()
            .current_dir(dir.path())
            .args(["-vv", "--config", "pipeline/t.toml", "llm", "ping"])
            .env("BENCHGEN_SECRET_HARDEN", KEY)
            .output()
            .unwrap();
        assert!(!o.status.success());
        let out = text(&o);
        assert!(out.contains("HTTP 500"), "{out}");
        for line in out.lines() {
            assert_no_leak(&format!("{form} at {off}: output line"), line, &windows);
        }
    }
    assert_eq!(s.count(), offsets.len());
    for f in walk(dir.path()) {
        assert_no_leak(&f.display().to_string(), &String::from_utf8_lossy(&std::fs::read(&f).unwrap()), &windows);
    }
}
