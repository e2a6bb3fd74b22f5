//! Real embeddings with the MiniLM assets from `make setup` (no test double):
//! the vectors behave like sentence embeddings, and a grown catalog re-embeds
//! only its new or changed tools. Without the assets the tests fail under CI
//! (`CI=true`) and are skipped elsewhere, with the reason printed.

use std::path::PathBuf;

use assert_cmd::Command;
use benchgen::embedding::{Embedder, Vectors};
use benchgen::settings::Settings;

fn assets_or_skip() -> bool {
    let cache = std::env::var_os("BENCHGEN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/benchgen"));
    for p in [
        cache.join("embed/all-MiniLM-L6-v2-int8/model.onnx"),
        cache.join("embed/all-MiniLM-L6-v2-int8/tokenizer.json"),
        cache.join("embed/onnxruntime-1.24.4/libonnxruntime.so.1.24.4"),
    ] {
        if !p.exists() {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("embedding asset `{}` is missing: run make setup", p.display());
            }
            eprintln!("skipping: embedding asset `{}` is missing (run `make setup`)", p.display());
            return false;
        }
    }
    true
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn minilm_vectors_are_normalised_and_rank_paraphrases_first() {
    if !assets_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pipeline/x.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(&cfg, "").unwrap();
    let settings = Settings::load(&cfg).unwrap();
    let mut e = Embedder::load(&settings).unwrap();
    let texts: Vec<String> = [
        "Get the current weather for a city.",
        "Retrieve the current weather conditions in a given city.",
        "Delete a file from the local disk.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let v = e.embed(&texts, 2, &indicatif::ProgressBar::hidden()).unwrap();
    assert_eq!(v[0].len(), 384);
    for x in &v {
        assert!((dot(x, x) - 1.0).abs() < 1e-4);
    }
    let (para, unrelated) = (dot(&v[0], &v[1]), dot(&v[0], &v[2]));
    assert!(para > 0.6, "paraphrase cosine {para} (unrelated {unrelated})");
    assert!(unrelated < 0.2, "unrelated cosine {unrelated}");
    // Batching and order do not change a text's vector beyond float noise.
    let single = e.embed(&texts[1..2], 1, &indicatif::ProgressBar::hidden()).unwrap();
    assert!(dot(&single[0], &v[1]) > 0.9999);
}

#[test]
fn a_grown_catalog_embeds_only_new_and_changed_tools() {
    if !assets_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("pipeline")).unwrap();
    let registry = root.join("registry.json");
    let original =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("raw/demo/registry.json")).unwrap();
    std::fs::write(&registry, &original).unwrap();
    let cfg = root.join("pipeline/t.toml");
    std::fs::write(&cfg, format!("[registry]\nsource = \"{}\"\n\n[embed]\n", registry.display())).unwrap();
    let run = || {
        let o = Command::cargo_bin("benchgen")
            .unwrap()
            .env("BENCHGEN_NO_PROGRESS", "1")
            .arg("--config")
            .arg(&cfg)
            .args(["run", "--until", "embed"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // The stage note: "<n> tools: <e> embedded, <r> reused from the previous run (…)".
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let re = crate::support::regex(r"(\d+) tools: (\d+) embedded, (\d+) reused").unwrap();
        let c = re.captures(&out).unwrap_or_else(|| panic!("no embed note in {out}"));
        let n = |i: usize| c[i].parse::<u64>().unwrap();
        (n(1), n(2), n(3))
    };
    let first = run();
    assert_eq!(first.2, 0);
    let before = Vectors::load(&root.join("artifacts/embed")).unwrap();

    // Edit one description and the stage re-embeds exactly that tool.
    let edited =
        original.replacen("Get the real-time quote for a stock ticker", "Get the live quote for a stock ticker", 1);
    assert_ne!(edited, original, "the demo registry has that description");
    std::fs::write(&registry, edited).unwrap();
    let second = run();
    assert_eq!(second.1, 1, "{second:?}");
    assert_eq!(second.2, first.0 - 1);
    let after = Vectors::load(&root.join("artifacts/embed")).unwrap();
    let changed: Vec<&str> = (0..after.len())
        .filter(|&i| after.index.tools[i].text_sha256 != before.index.tools[i].text_sha256)
        .map(|i| after.index.tools[i].id.as_str())
        .collect();
    assert_eq!(changed.len(), 1);
    for i in 0..after.len() {
        if after.index.tools[i].id != changed[0] {
            assert_eq!(after.row(i), before.row(i), "reused vectors are copied bit for bit");
        }
    }
}
