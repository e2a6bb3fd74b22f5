//! The embedding model loaded on first use, on a thread of its own ([`Lazy`]): the level
//! stages, `efs topdown` and `logs curate` embed texts of their own with it, and a fully
//! resumed run (or one with nothing to embed) never loads the model.

use std::sync::{Arc, Mutex};

use anyhow::Result;

use super::Embedder;
use crate::settings::Settings;

/// One embedding request to the [`Lazy`]'s thread: texts and where the vectors go.
type EmbedJob = (Vec<String>, tokio::sync::oneshot::Sender<Result<Vec<Vec<f32>>>>);

/// The embedding model on a thread of its own, loaded there on first use (a fully resumed
/// run needs none). A work item awaits its vectors ([`Lazy::embed_async`]) while
/// the model runs, so the other items' LLM requests go on; computed on the task that
/// polls the items, one embedding stopped them all. Requests are served one at a time,
/// each as its own call, so a text's vector does not depend on which other items asked
/// at the same moment (byte-identical reruns).
pub struct Lazy {
    settings: Settings,
    worker: Mutex<Option<(std::sync::mpsc::Sender<EmbedJob>, std::thread::JoinHandle<()>)>>,
}

impl Lazy {
    pub fn new(settings: &Settings) -> Self {
        Self { settings: settings.clone(), worker: Mutex::new(None) }
    }

    /// The settings whose `[embed]` model this is.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn sender(&self) -> Result<std::sync::mpsc::Sender<EmbedJob>> {
        let mut w = self.worker.lock().map_err(|_| anyhow::anyhow!("internal: the embedder lock is poisoned"))?;
        if w.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<EmbedJob>();
            let settings = self.settings.clone();
            let handle = std::thread::Builder::new()
                .name("benchgen-embed".into())
                .spawn(move || {
                    let mut model: Option<Embedder> = None;
                    for (texts, reply) in rx {
                        let mut run = || -> Result<Vec<Vec<f32>>> {
                            if model.is_none() {
                                model = Some(Embedder::load(&settings)?);
                            }
                            model.as_mut().expect("loaded above").embed(&texts, 32, &indicatif::ProgressBar::hidden())
                        };
                        let _ = reply.send(run());
                    }
                })
                .map_err(|e| anyhow::anyhow!("cannot start the embedding thread: {e}"))?;
            *w = Some((tx, handle));
        }
        Ok(w.as_ref().expect("started above").0.clone())
    }

    /// Vectors of `texts` (from async work items: the wait does not block other items).
    pub async fn embed_async(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.sender()?.send((texts, tx)).map_err(|_| anyhow::anyhow!("the embedding thread has stopped"))?;
        rx.await.map_err(|_| anyhow::anyhow!("the embedding thread has stopped"))?
    }

    /// Vectors of `texts`, waiting for them (outside the async items).
    pub fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        futures::executor::block_on(self.embed_async(texts.to_vec()))
    }

    /// Load the model on the embedding thread now, while the caller does other work.
    pub fn preload(&self) -> Result<()> {
        let (tx, _) = tokio::sync::oneshot::channel();
        self.sender()?.send((Vec::new(), tx)).map_err(|_| anyhow::anyhow!("the embedding thread has stopped"))
    }

    /// Vectors of a fixed list of texts for work items ([`Prefetch::get`]): computed on the
    /// embedding thread in chunks of [`PREFETCH_CHUNK`] texts in list order, each chunk
    /// once. Chunks holding a text for which `wanted(position)` is true start at once (in
    /// order, ahead of the items that will ask); the others only if asked. A text's vector
    /// thus depends on the list alone, never on which items were still to do or when they
    /// asked, and a fully resumed run embeds nothing.
    pub fn prefetch(&self, texts: Vec<String>, wanted: impl Fn(usize) -> bool) -> Result<Prefetch<'_>> {
        let mut index = std::collections::HashMap::new();
        for (i, t) in texts.iter().enumerate() {
            index.entry(t.clone()).or_insert(i);
        }
        let n_chunks = texts.len().div_ceil(PREFETCH_CHUNK);
        let p = Prefetch { embedder: self, texts, index, chunks: Mutex::new(vec![None; n_chunks]) };
        for c in 0..n_chunks {
            if (c * PREFETCH_CHUNK..((c + 1) * PREFETCH_CHUNK).min(p.texts.len())).any(&wanted) {
                p.start(c)?;
            }
        }
        Ok(p)
    }
}

/// Texts per embedding call of a [`Prefetch`] (the embedding batch size).
pub const PREFETCH_CHUNK: usize = 32;

type ChunkFuture = futures::future::Shared<futures::future::BoxFuture<'static, Result<Arc<Vec<Vec<f32>>>, String>>>;

/// See [`Lazy::prefetch`].
pub struct Prefetch<'e> {
    embedder: &'e Lazy,
    texts: Vec<String>,
    /// First position of each text.
    index: std::collections::HashMap<String, usize>,
    chunks: Mutex<Vec<Option<ChunkFuture>>>,
}

impl Prefetch<'_> {
    /// Send chunk `c` to the embedding thread unless it was sent already.
    fn start(&self, c: usize) -> Result<()> {
        self.chunk(c).map(drop)
    }

    /// Chunk `c`'s vectors, started on the embedding thread if they were not yet.
    fn chunk(&self, c: usize) -> Result<ChunkFuture> {
        use futures::FutureExt;
        let mut chunks = self.chunks.lock().map_err(|_| anyhow::anyhow!("internal: the prefetch lock is poisoned"))?;
        if let Some(f) = &chunks[c] {
            return Ok(f.clone());
        }
        let part = self.texts[c * PREFETCH_CHUNK..((c + 1) * PREFETCH_CHUNK).min(self.texts.len())].to_vec();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.embedder.sender()?.send((part, tx)).map_err(|_| anyhow::anyhow!("the embedding thread has stopped"))?;
        // The thread works on the chunk from now on; the future only waits for its answer.
        let f = async move {
            match rx.await {
                Ok(Ok(v)) => Ok(Arc::new(v)),
                Ok(Err(e)) => Err(format!("{e:#}")),
                Err(_) => Err("the embedding thread has stopped".to_string()),
            }
        }
        .boxed()
        .shared();
        chunks[c] = Some(f.clone());
        Ok(f)
    }

    /// The vector of `text` (one of the listed texts).
    pub async fn get(&self, text: &str) -> Result<Vec<f32>> {
        let i = *self.index.get(text).ok_or_else(|| anyhow::anyhow!("internal: `{text}` was not prefetched"))?;
        let vectors = self.chunk(i / PREFETCH_CHUNK)?.await.map_err(anyhow::Error::msg)?;
        Ok(vectors[i % PREFETCH_CHUNK].clone())
    }
}

impl Drop for Lazy {
    fn drop(&mut self) {
        let worker = self.worker.get_mut().map(Option::take).unwrap_or_else(|p| p.into_inner().take());
        if let Some((tx, handle)) = worker {
            drop(tx);
            let _ = handle.join();
        }
    }
}
