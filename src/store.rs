//! Durable file output: atomic writes, content hashes, and per-stage staging
//! directories that replace a stage's previous output in one step.
//!
//! A stage never writes into `artifacts/<stage>/` directly. It writes into
//! `artifacts/.staging/<stage>/`, and [`StagingDir::commit`] swaps that folder in
//! with two renames. A process killed at any point leaves either the previous
//! complete output or the new complete one; [`recover`] finishes or undoes a swap
//! that was cut between its two renames.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

/// Hex SHA-256 of a byte slice, prefixed with the algorithm so hashes stay
/// self-describing in manifests and the ledger.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Hash of a file's contents, streamed (inputs may be larger than memory).
pub fn hash_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("cannot read `{}`", path.display()))?;
    Ok(format!("sha256:{}", hex::encode(h.finalize())))
}

/// Write `bytes` to `path` atomically: temp file in the same folder, fsync,
/// rename over the target, fsync the folder.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| -> Result<()> {
        // Errors name the file being written (not the temporary), disk full first.
        let err = |e, what| crate::error::write_error(path, e, what);
        let mut f = File::create(&tmp).map_err(|e| err(e, "cannot create"))?;
        enospc_point("write_atomic").and_then(|()| f.write_all(bytes)).map_err(|e| err(e, "cannot write"))?;
        f.sync_all().map_err(|e| err(e, "cannot fsync"))?;
        drop(f);
        fail_point("write_atomic")?;
        fs::rename(&tmp, path).with_context(|| format!("cannot rename `{}` to `{}`", tmp.display(), path.display()))?;
        sync_dir(dir);
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Serialise a value as pretty JSON with a trailing newline (the one JSON layout
/// every artifact uses, so identical values give identical bytes).
pub fn to_json_bytes<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let mut out = serde_json::to_vec_pretty(value)?;
    out.push(b'\n');
    Ok(out)
}

fn sync_dir(dir: &Path) {
    // Directory fsync makes the rename itself durable; not all filesystems allow it.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Test hook: `BENCHGEN_FAIL_AT=<point>[:<n>]` aborts the process at the n-th
/// (default first) time a named point is reached, so tests can prove that an
/// interrupted write leaves no torn output. Unset in normal use.
pub fn fail_point(name: &str) -> Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static HITS: AtomicUsize = AtomicUsize::new(0);
    let Ok(spec) = std::env::var("BENCHGEN_FAIL_AT") else {
        return Ok(());
    };
    let (point, nth) = match spec.split_once(':') {
        Some((p, n)) => (p.to_string(), n.parse::<usize>().unwrap_or(1)),
        None => (spec, 1),
    };
    if point == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == nth {
        eprintln!("benchgen: fail point `{name}` reached, aborting (BENCHGEN_FAIL_AT)");
        std::process::abort();
    }
    Ok(())
}

/// Test hook: `BENCHGEN_FAIL_ENOSPC=<point>[:<n>]` makes the n-th (default first) and
/// every later write at a named point fail with ENOSPC ("No space left on device"), as a
/// full disk does, so tests can check what a full disk looks like to the user.
pub fn enospc_point(name: &str) -> std::io::Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static HITS: AtomicUsize = AtomicUsize::new(0);
    let Ok(spec) = std::env::var("BENCHGEN_FAIL_ENOSPC") else {
        return Ok(());
    };
    let (point, nth) = match spec.split_once(':') {
        Some((p, n)) => (p.to_string(), n.parse::<usize>().unwrap_or(1)),
        None => (spec, 1),
    };
    if point == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 >= nth {
        return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
    }
    Ok(())
}

/// A stage's output folder under construction.
pub struct StagingDir {
    artifacts: PathBuf,
    stage_dir: String,
    path: PathBuf,
    files: Vec<(String, String)>,
}

impl StagingDir {
    /// Create an empty staging folder for `stage_dir` (the folder name under
    /// `artifacts/`). A leftover staging folder from a killed run is discarded.
    pub fn create(artifacts: &Path, stage_dir: &str) -> Result<Self> {
        let path = artifacts.join(".staging").join(stage_dir);
        if path.exists() {
            fs::remove_dir_all(&path).with_context(|| format!("cannot clear `{}`", path.display()))?;
        }
        fs::create_dir_all(&path).with_context(|| format!("cannot create `{}`", path.display()))?;
        Ok(Self { artifacts: artifacts.to_path_buf(), stage_dir: stage_dir.to_string(), path, files: Vec::new() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write one output file (relative path inside the stage folder).
    pub fn write(&mut self, rel: &str, bytes: &[u8]) -> Result<()> {
        write_atomic(&self.path.join(rel), bytes)?;
        self.files.retain(|(r, _)| r != rel);
        self.files.push((rel.to_string(), sha256_hex(bytes)));
        Ok(())
    }

    pub fn write_json<T: serde::Serialize + ?Sized>(&mut self, rel: &str, value: &T) -> Result<()> {
        self.write(rel, &to_json_bytes(value)?)
    }

    /// Move an already written (and fsynced) file into the staging folder, for
    /// outputs streamed to disk rather than held in memory.
    pub fn adopt(&mut self, rel: &str, from: &Path) -> Result<()> {
        let to = self.path.join(rel);
        if let Some(dir) = to.parent() {
            fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
        }
        fs::rename(from, &to).with_context(|| format!("cannot move `{}` into `{}`", from.display(), to.display()))?;
        let hash = hash_file(&to)?;
        self.files.retain(|(r, _)| r != rel);
        self.files.push((rel.to_string(), hash));
        Ok(())
    }

    /// Hashes of every file written so far, sorted by path.
    pub fn outputs(&self) -> std::collections::BTreeMap<String, String> {
        self.files.iter().cloned().collect()
    }

    /// Replace `artifacts/<stage_dir>` with the staged folder.
    pub fn commit(self) -> Result<PathBuf> {
        let target = self.artifacts.join(&self.stage_dir);
        let trash_root = self.artifacts.join(".trash");
        let trash = trash_root.join(&self.stage_dir);
        if trash.exists() {
            fs::remove_dir_all(&trash).with_context(|| format!("cannot clear `{}`", trash.display()))?;
        }
        if target.exists() {
            fs::create_dir_all(&trash_root)?;
            fs::rename(&target, &trash).with_context(|| format!("cannot move aside `{}`", target.display()))?;
        }
        fail_point("commit_swap")?;
        fs::rename(&self.path, &target).with_context(|| format!("cannot move `{}` into place", self.path.display()))?;
        sync_dir(&self.artifacts);
        if trash.exists() {
            fs::remove_dir_all(&trash).with_context(|| format!("cannot remove `{}`", trash.display()))?;
        }
        for empty in [trash_root, self.artifacts.join(".staging")] {
            let _ = fs::remove_dir(empty); // only succeeds when empty
        }
        Ok(target)
    }
}

/// Undo what a killed run left behind: a stage folder moved aside but not yet
/// replaced is moved back; staging folders are discarded.
pub fn recover(artifacts: &Path) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let trash_root = artifacts.join(".trash");
    if let Ok(entries) = fs::read_dir(&trash_root) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let target = artifacts.join(&name);
            if target.exists() {
                fs::remove_dir_all(entry.path())?;
            } else {
                fs::rename(entry.path(), &target)?;
                notes.push(format!("restored `{name}` from an interrupted run"));
            }
        }
        let _ = fs::remove_dir(&trash_root);
    }
    let staging = artifacts.join(".staging");
    if staging.exists() {
        fs::remove_dir_all(&staging).with_context(|| format!("cannot remove `{}`", staging.display()))?;
        notes.push("discarded unfinished output of an interrupted run".to_string());
    }
    Ok(notes)
}

/// Per-item checkpoints of a long stage: one JSON line per finished item in
/// `artifacts/.work/<stage>/items.jsonl`, appended and fsynced as each item
/// finishes. A rerun after a crash reads them back and skips those items; a
/// torn last line (the crash hit mid-append) is ignored.
pub struct Checkpoint {
    dir: PathBuf,
    done: std::collections::BTreeMap<String, serde_json::Value>,
}

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Self> {
        let mut done = std::collections::BTreeMap::new();
        if let Ok(text) = fs::read_to_string(dir.join("items.jsonl")) {
            for line in text.lines() {
                if let Ok(serde_json::Value::Object(mut o)) = serde_json::from_str::<serde_json::Value>(line)
                    && let (Some(serde_json::Value::String(id)), Some(v)) = (o.remove("id"), o.remove("value"))
                {
                    done.insert(id, v);
                }
            }
        }
        Ok(Self { dir: dir.to_path_buf(), done })
    }

    pub fn get(&self, id: &str) -> Option<&serde_json::Value> {
        self.done.get(id)
    }

    pub fn len(&self) -> usize {
        self.done.len()
    }

    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }

    /// Record a finished item durably before returning.
    pub fn put(&mut self, id: &str, value: serde_json::Value) -> Result<()> {
        fs::create_dir_all(&self.dir).with_context(|| format!("cannot create `{}`", self.dir.display()))?;
        let path = self.dir.join("items.jsonl");
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open `{}`", path.display()))?;
        let mut line = serde_json::to_vec(&serde_json::json!({"id": id, "value": value}))?;
        line.push(b'\n');
        let err = |e| crate::error::write_error(&path, e, "cannot append to");
        enospc_point("checkpoint").and_then(|()| f.write_all(&line)).map_err(err)?;
        f.sync_data().map_err(err)?;
        self.done.insert(id.to_string(), value);
        Ok(())
    }

    /// Forget every checkpoint (after the stage's output was committed).
    pub fn clear(self) -> Result<()> {
        if self.dir.exists() {
            fs::remove_dir_all(&self.dir).with_context(|| format!("cannot remove `{}`", self.dir.display()))?;
        }
        if let Some(parent) = self.dir.parent() {
            let _ = fs::remove_dir(parent); // only when empty
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let leftovers: Vec<_> = fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temp files must not remain");
    }

    #[test]
    fn commit_swaps_and_recover_restores_moved_aside_output() {
        let dir = tempfile::tempdir().unwrap();
        let art = dir.path();
        let mut s = StagingDir::create(art, "filter").unwrap();
        s.write("x.txt", b"v1").unwrap();
        s.commit().unwrap();
        assert_eq!(fs::read(art.join("filter/x.txt")).unwrap(), b"v1");

        // Simulate a kill between the two renames of a second commit.
        fs::create_dir_all(art.join(".trash")).unwrap();
        fs::rename(art.join("filter"), art.join(".trash/filter")).unwrap();
        fs::create_dir_all(art.join(".staging/filter")).unwrap();
        let notes = recover(art).unwrap();
        assert_eq!(notes.len(), 2);
        assert_eq!(fs::read(art.join("filter/x.txt")).unwrap(), b"v1");
        assert!(!art.join(".staging").exists() && !art.join(".trash").exists());
    }

    #[test]
    fn checkpoint_survives_reopen_and_ignores_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join(".work/verify");
        let mut c = Checkpoint::open(&w).unwrap();
        c.put("a", serde_json::json!(1)).unwrap();
        c.put("b", serde_json::json!({"x": 2})).unwrap();
        let mut f = fs::OpenOptions::new().append(true).open(w.join("items.jsonl")).unwrap();
        f.write_all(b"{\"id\": \"c\", \"val").unwrap();
        let c = Checkpoint::open(&w).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.get("b").unwrap()["x"], 2);
        c.clear().unwrap();
        assert!(!dir.path().join(".work").exists());
    }

    #[test]
    fn hashes_are_prefixed_and_stable() {
        assert_eq!(sha256_hex(b"abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
