//! Upstream artifacts made by hand, the way the runner leaves them: the files, a ledger run
//! with its events, and a `manifest.json` naming that run. Lets a test of a late stage
//! (release) start from the pool it reads without running the stages that make it.

use std::collections::BTreeMap;
use std::path::Path;

use benchgen::ledger::{Ledger, NewEvent};
use benchgen::stage::{CODE_VERSION, Manifest};

/// Write `files` under `artifacts/<stage>/`, record `events` as one finished ledger run of
/// `stage`, and write the manifest. Returns the ledger ids of the events.
pub fn stage(root: &Path, stage: &str, files: &[(&str, Vec<u8>)], events: &[NewEvent]) -> Vec<i64> {
    let artifacts = root.join("artifacts");
    let dir = artifacts.join(stage);
    std::fs::create_dir_all(&dir).unwrap();
    let mut outputs = BTreeMap::new();
    for (rel, bytes) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, bytes).unwrap();
        outputs.insert(rel.to_string(), benchgen::store::sha256_hex(bytes));
    }
    let (run_id, ids) = Ledger::open(&artifacts).unwrap().record_run(stage, "test", CODE_VERSION, events).unwrap();
    let m = Manifest {
        stage: stage.into(),
        stage_version: 1,
        code_version: CODE_VERSION.into(),
        config_hash: "test".into(),
        inputs: BTreeMap::new(),
        prompts: BTreeMap::new(),
        outputs,
        counts: BTreeMap::new(),
        run_id,
        started_at: "2026-01-01T00:00:00Z".into(),
        finished_at: "2026-01-01T00:00:00Z".into(),
        duration_ms: 0,
    };
    std::fs::write(dir.join("manifest.json"), serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    ids
}

/// JSON Lines of serialisable values.
pub fn jsonl<T: serde::Serialize>(items: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    for i in items {
        out.extend(serde_json::to_vec(i).unwrap());
        out.push(b'\n');
    }
    out
}
