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
///
/// Files are written into it without an fsync each; [`StagingDir::commit`] fsyncs them
/// all at once (in parallel, so the file system groups them into few journal commits)
/// and then their folders, before the swap. The folder is invisible until the swap, so
/// a file is never seen before it is durable, and a stage with hundreds of files (one
/// trajectory per query) does not pay two sequential fsyncs per file.
pub struct StagingDir {
    artifacts: PathBuf,
    stage_dir: String,
    path: PathBuf,
    files: Vec<(String, String)>,
    /// Written but not yet fsynced.
    unsynced: Vec<PathBuf>,
    /// Folders that received a file (fsynced at commit so the entries are durable).
    dirs: std::collections::BTreeSet<PathBuf>,
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
        Ok(Self {
            artifacts: artifacts.to_path_buf(),
            stage_dir: stage_dir.to_string(),
            path: path.clone(),
            files: Vec::new(),
            unsynced: Vec::new(),
            dirs: std::collections::BTreeSet::from([path]),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write one output file (relative path inside the stage folder); fsynced at commit.
    pub fn write(&mut self, rel: &str, bytes: &[u8]) -> Result<()> {
        let path = self.path.join(rel);
        let dir = path.parent().unwrap_or(&self.path).to_path_buf();
        fs::create_dir_all(&dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
        let err = |e, what| crate::error::write_error(&path, e, what);
        let mut f = File::create(&path).map_err(|e| err(e, "cannot create"))?;
        enospc_point("write_atomic").and_then(|()| f.write_all(bytes)).map_err(|e| err(e, "cannot write"))?;
        drop(f);
        fail_point("write_atomic")?;
        self.unsynced.push(path);
        self.note_dir(dir);
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
        self.note_dir(to.parent().unwrap_or(&self.path).to_path_buf());
        let hash = hash_file(&to)?;
        self.files.retain(|(r, _)| r != rel);
        self.files.push((rel.to_string(), hash));
        Ok(())
    }

    /// Hashes of every file written so far, sorted by path.
    pub fn outputs(&self) -> std::collections::BTreeMap<String, String> {
        self.files.iter().cloned().collect()
    }

    /// Remember a folder that received a file, and its parents up to the staging folder.
    fn note_dir(&mut self, dir: PathBuf) {
        let mut d = Some(dir.as_path());
        while let Some(p) = d.filter(|p| p.starts_with(&self.path)) {
            if !self.dirs.insert(p.to_path_buf()) {
                break;
            }
            d = p.parent();
        }
    }

    /// Make every staged file and folder durable: the files' fsyncs run on up to 8
    /// threads at once (the file system commits concurrent fsyncs together), then each
    /// folder is fsynced, deepest first.
    fn sync(&mut self) -> Result<()> {
        let files = std::mem::take(&mut self.unsynced);
        let threads = files.len().clamp(1, 8);
        let chunk = files.len().div_ceil(threads).max(1);
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let handles: Vec<_> = files
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || -> Result<()> {
                        for p in part {
                            let f = File::open(p).with_context(|| format!("cannot open `{}`", p.display()))?;
                            f.sync_all().map_err(|e| crate::error::write_error(p, e, "cannot fsync"))?;
                        }
                        Ok(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("fsync thread panicked"))))
                .collect()
        });
        results.into_iter().collect::<Result<()>>()?;
        for dir in self.dirs.iter().rev() {
            sync_dir(dir);
        }
        Ok(())
    }

    /// Replace `artifacts/<stage_dir>` with the staged folder (every staged file is
    /// fsynced first).
    pub fn commit(mut self) -> Result<PathBuf> {
        self.sync()?;
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
/// `artifacts/.work/<stage>/items.jsonl`. A rerun after a crash reads them back and skips
/// those items; a torn last line (the crash hit mid-append) is ignored.
///
/// [`Checkpoint::put`] appends and fsyncs. [`Checkpoint::append`] only writes the line
/// (a killed process keeps it: it is in the kernel's page cache) and leaves the fsync to
/// the caller, so a stage with many items in flight can group the fsyncs
/// ([`Checkpoint::syncer`], as `llm::batch` does) instead of stopping for one per item.
/// An OS crash may then lose the lines appended since the last fsync; those items are
/// redone, their LLM exchanges answered from the ledger.
pub struct Checkpoint {
    dir: PathBuf,
    done: std::collections::BTreeMap<String, serde_json::Value>,
    file: Option<File>,
    /// What the items are made from ([`Checkpoint::open_keyed`]), written beside them with
    /// the first one (a stage that checkpoints nothing writes nothing).
    key: Option<String>,
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
        Ok(Self { dir: dir.to_path_buf(), done, file: None, key: None })
    }

    /// [`Checkpoint::open`] for work whose inputs `key` names (the stage's settings, input
    /// and prompt hashes, versions): the items of an interrupted run made with another key,
    /// or with none (an older layout), are discarded, never reused for inputs they were not
    /// made from. Returns the checkpoint and how many items were discarded.
    pub fn open_keyed(dir: &Path, key: &str) -> Result<(Self, usize)> {
        let had = fs::read_to_string(dir.join("key")).ok();
        let mut discarded = 0;
        let items = dir.join("items.jsonl");
        if had.as_deref() != Some(key) && items.exists() {
            discarded = Self::open(dir)?.len();
            fs::remove_file(&items).with_context(|| format!("cannot remove `{}`", items.display()))?;
        }
        let mut c = Self::open(dir)?;
        c.key = Some(key.to_string());
        Ok((c, discarded))
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

    fn path(&self) -> PathBuf {
        self.dir.join("items.jsonl")
    }

    /// The checkpoint file, opened for appending on first use. A torn last line of a
    /// killed run is ended first, so the next line starts on a line of its own.
    fn file(&mut self) -> Result<&mut File> {
        if self.file.is_none() {
            fs::create_dir_all(&self.dir).with_context(|| format!("cannot create `{}`", self.dir.display()))?;
            // The key before the first item, so no item is ever on disk without it.
            if let Some(key) = &self.key
                && fs::read_to_string(self.dir.join("key")).ok().as_deref() != Some(key.as_str())
            {
                write_atomic(&self.dir.join("key"), key.as_bytes())?;
            }
            let path = self.path();
            let mut f = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .read(true)
                .open(&path)
                .with_context(|| format!("cannot open `{}`", path.display()))?;
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len > 0 {
                use std::io::{Read, Seek, SeekFrom};
                let mut last = [0u8; 1];
                f.seek(SeekFrom::Start(len - 1))
                    .and_then(|_| f.read_exact(&mut last))
                    .map_err(|e| crate::error::write_error(&path, e, "cannot read"))?;
                if last[0] != b'\n' {
                    f.write_all(b"\n").map_err(|e| crate::error::write_error(&path, e, "cannot append to"))?;
                }
            }
            self.file = Some(f);
        }
        Ok(self.file.as_mut().expect("opened above"))
    }

    /// Write a finished item's line, without an fsync (see the type's doc).
    pub fn append(&mut self, id: &str, value: serde_json::Value) -> Result<()> {
        let path = self.path();
        let mut line = serde_json::to_vec(&serde_json::json!({"id": id, "value": value}))?;
        line.push(b'\n');
        let f = self.file()?;
        enospc_point("checkpoint")
            .and_then(|()| f.write_all(&line))
            .map_err(|e| crate::error::write_error(&path, e, "cannot append to"))?;
        self.done.insert(id.to_string(), value);
        Ok(())
    }

    /// A handle whose `sync_data` makes every line appended so far durable (for an fsync
    /// run off the calling thread); `None` before the first append.
    pub fn syncer(&self) -> Result<Option<(File, PathBuf)>> {
        match &self.file {
            Some(f) => Ok(Some((
                f.try_clone().with_context(|| format!("cannot reopen `{}`", self.path().display()))?,
                self.path(),
            ))),
            None => Ok(None),
        }
    }

    /// Fsync every line appended so far.
    pub fn sync(&mut self) -> Result<()> {
        let path = self.path();
        if let Some(f) = &self.file {
            f.sync_data().map_err(|e| crate::error::write_error(&path, e, "cannot append to"))?;
        }
        Ok(())
    }

    /// Record a finished item durably before returning.
    pub fn put(&mut self, id: &str, value: serde_json::Value) -> Result<()> {
        self.append(id, value)?;
        self.sync()
    }

    /// Forget every checkpoint (after the stage's output was committed).
    pub fn clear(self) -> Result<()> {
        drop(self.file);
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

    /// A checkpoint is reused only for the key it was made with: another key (other inputs
    /// or settings) or none (an older layout) discards its items.
    #[test]
    fn a_keyed_checkpoint_is_reused_only_under_its_own_key() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join(".work/verify");
        let (mut c, discarded) = Checkpoint::open_keyed(&w, "k1").unwrap();
        assert_eq!((c.len(), discarded), (0, 0));
        assert!(!w.exists(), "nothing written before the first item");
        c.put("a", serde_json::json!(1)).unwrap();
        assert_eq!(fs::read_to_string(w.join("key")).unwrap(), "k1");
        c.put("b", serde_json::json!(2)).unwrap();
        let (c, discarded) = Checkpoint::open_keyed(&w, "k1").unwrap();
        assert_eq!((c.len(), discarded), (2, 0), "the same key resumes");
        let (mut c, discarded) = Checkpoint::open_keyed(&w, "k2").unwrap();
        assert_eq!((c.len(), discarded), (0, 2), "another key starts over");
        c.put("z", serde_json::json!(0)).unwrap();
        let (c, _) = Checkpoint::open_keyed(&w, "k2").unwrap();
        assert_eq!(c.len(), 1, "the new key's items resume");
        // An older layout (items, no key) is not trusted either.
        let mut old = Checkpoint::open(&w).unwrap();
        old.put("c", serde_json::json!(3)).unwrap();
        fs::remove_file(w.join("key")).unwrap();
        let (c, discarded) = Checkpoint::open_keyed(&w, "k2").unwrap();
        assert_eq!((c.len(), discarded), (0, 2));
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
        let mut c = Checkpoint::open(&w).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.get("b").unwrap()["x"], 2);
        // The next line after a torn one starts on a line of its own.
        c.append("d", serde_json::json!(4)).unwrap();
        c.sync().unwrap();
        let c = Checkpoint::open(&w).unwrap();
        assert_eq!((c.len(), c.get("d")), (3, Some(&serde_json::json!(4))));
        c.clear().unwrap();
        assert!(!dir.path().join(".work").exists());
    }

    #[test]
    fn hashes_are_prefixed_and_stable() {
        assert_eq!(sha256_hex(b"abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
