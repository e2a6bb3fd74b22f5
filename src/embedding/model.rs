//! The embedding model: a local ONNX model (fastembed, ONNX Runtime loaded at run time)
//! or a client of an OpenAI-compatible embedding server.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result};

use super::{EmbedProvider, PoolingKind, embed_settings};
use crate::error::hinted;
use crate::settings::Settings;

/// Called with each finished batch: indices into the texts, their normalised vectors.
pub type BatchDone<'a> = dyn FnMut(&[usize], &[Vec<f32>]) -> Result<()> + Send + 'a;

/// A loaded embedding model, or a client of an embedding server.
pub struct Embedder {
    backend: Backend,
    pub model_id: String,
    /// sha256 of `model.onnx` (for a server: of `openai:<model>[:<dimensions>]`), recorded
    /// so vectors of another model are never reused.
    pub model_sha256: String,
}

enum Backend {
    Local(Box<fastembed::TextEmbedding>),
    Server(crate::llm::embeddings::EmbeddingClient),
}

/// ONNX Runtime allows one environment per process; it is created once.
static ORT_ENV: OnceLock<std::result::Result<ort::environment::Environment, String>> = OnceLock::new();

fn init_ort(dylib: &Path) -> Result<ort::environment::Environment> {
    let env = ORT_ENV.get_or_init(|| {
        let builder = ort::init_from(dylib).map_err(|e| format!("{e}"))?;
        builder.with_name("benchgen").build().map_err(|e| format!("{e}"))
    });
    match env {
        Ok(env) => Ok(env.clone()),
        Err(e) => Err(hinted(
            format!("cannot load ONNX Runtime from `{}`: {e}", dylib.display()),
            "run `make setup` (scripts/setup.d/20-embed.sh fetches ONNX Runtime 1.24.4), or set `[embed] ort_dylib`",
        )),
    }
}

/// Cosine of two unit vectors ([`normalised`] ones), summed in order.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The problem `check` reports under `key` when what embeds there (`what`, with `hint` on
/// what to do) would find the local `[embed]` model's files missing ([`missing_assets`]);
/// `None` when they are there.
pub fn missing_problem(settings: &Settings, key: &str, (what, hint): (&str, &str)) -> Option<crate::error::Problem> {
    let missing = missing_assets(settings);
    (!missing.is_empty()).then(|| {
        let files: Vec<String> = missing.iter().map(|p| format!("`{}`", p.display())).collect();
        crate::error::Problem::new(key, format!("{what}, whose files are missing: {} ({hint})", files.join(", ")))
    })
}

/// The files a local `[embed]` model needs that are not there (none for a server), so that a
/// stage's `check` can say so before anything runs.
pub fn missing_assets(settings: &Settings) -> Vec<PathBuf> {
    let cfg = embed_settings(settings);
    if cfg.provider == EmbedProvider::Openai {
        return Vec::new();
    }
    let dir = cfg.model_dir(settings);
    ["model.onnx", "tokenizer.json", "config.json", "special_tokens_map.json"]
        .iter()
        .map(|f| dir.join(f))
        .chain(std::iter::once(cfg.ort_dylib(settings)))
        .filter(|p| !p.exists())
        .collect()
}

impl Embedder {
    /// The model of `[embed]`: fastembed loads it here; for a server this only reads the
    /// API key (the first request shows whether the server answers).
    pub fn load(settings: &Settings) -> Result<Self> {
        let cfg = embed_settings(settings);
        if cfg.provider == EmbedProvider::Openai {
            let client = crate::llm::embeddings::EmbeddingClient::new(cfg.endpoint()).map_err(|e| {
                hinted(format!("`[embed]`: {e}"), "export the variable that `[embed] api_key_env` names")
            })?;
            return Ok(Self {
                backend: Backend::Server(client),
                model_id: cfg.model_id(),
                model_sha256: cfg.server_fingerprint(),
            });
        }
        let dir = cfg.model_dir(settings);
        let dylib = cfg.ort_dylib(settings);
        let missing = missing_assets(settings);
        if !missing.is_empty() {
            return Err(hinted(
                format!(
                    "embedding assets are missing: {}",
                    missing.iter().map(|p| format!("`{}`", p.display())).collect::<Vec<_>>().join(", ")
                ),
                "run `make setup` (scripts/setup.d/20-embed.sh), or point `[embed] model_dir` / `ort_dylib` at local files",
            ));
        }
        let env = init_ort(&dylib)?;
        let read =
            |f: &str| std::fs::read(dir.join(f)).with_context(|| format!("cannot read `{}`", dir.join(f).display()));
        let onnx = read("model.onnx")?;
        let model_sha256 = crate::store::sha256_hex(&onnx);
        // tokenizer_config.json is optional in some exports; an empty object is what fastembed expects then.
        let tokenizer_config = read("tokenizer_config.json").unwrap_or_else(|_| b"{}".to_vec());
        let files = fastembed::TokenizerFiles {
            tokenizer_file: read("tokenizer.json")?,
            config_file: read("config.json")?,
            special_tokens_map_file: read("special_tokens_map.json")?,
            tokenizer_config_file: tokenizer_config,
        };
        // Pooling must be explicit: fastembed's default for user models (CLS) is wrong for MiniLM.
        let pooling = match cfg.pooling() {
            PoolingKind::Mean => fastembed::Pooling::Mean,
            PoolingKind::Cls => fastembed::Pooling::Cls,
        };
        let model = fastembed::UserDefinedEmbeddingModel::new(onnx, files).with_pooling(pooling);
        let options = fastembed::InitOptionsUserDefined::new()
            .with_max_length(cfg.max_length())
            .with_environment(env)
            // Spinning worker threads only burn CPU that other processes on a shared
            // 2-core machine need; batches are large enough that waking costs nothing.
            .with_session_config("session.intra_op.allow_spinning", "0");
        let model = fastembed::TextEmbedding::try_new_from_user_defined(model, options)
            .map_err(|e| anyhow::anyhow!("cannot load the embedding model from `{}`: {e}", dir.display()))?;
        Ok(Self { backend: Backend::Local(Box::new(model)), model_id: cfg.model_id(), model_sha256 })
    }

    /// Embed texts in batches; every vector is L2-normalised. Texts are batched
    /// in length order, so a batch pads to a similar length (much less work than
    /// padding short texts to the longest of a random batch); results come back in
    /// input order.
    ///
    /// A server gets requests of `batch` texts, up to its `max_concurrency` at once, with
    /// retries; its vectors are normalised here like the local model's.
    pub fn embed(&mut self, texts: &[String], batch: usize, pb: &indicatif::ProgressBar) -> Result<Vec<Vec<f32>>> {
        self.embed_with(texts, batch, pb, &mut |_, _| Ok(()))
    }

    /// Whether the vectors come from an embedding server.
    pub fn is_server(&self) -> bool {
        matches!(self.backend, Backend::Server(_))
    }

    /// [`Embedder::embed`], calling `done(indices, vectors)` with each finished batch
    /// (indices into `texts`, normalised vectors) as it finishes, e.g. to checkpoint it.
    pub fn embed_with(
        &mut self,
        texts: &[String],
        batch: usize,
        pb: &indicatif::ProgressBar,
        done: &mut BatchDone<'_>,
    ) -> Result<Vec<Vec<f32>>> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| (texts[i].len(), i));
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        match &mut self.backend {
            Backend::Local(model) => {
                for chunk in order.chunks(batch.max(1)) {
                    let batch_texts: Vec<&str> = chunk.iter().map(|&i| texts[i].as_str()).collect();
                    let vs: Vec<Vec<f32>> = model
                        .embed(&batch_texts, Some(batch_texts.len()))
                        .map_err(|e| anyhow::anyhow!("embedding failed: {e}"))?
                        .into_iter()
                        .map(normalised)
                        .collect();
                    done(chunk, &vs)?;
                    for (&i, v) in chunk.iter().zip(vs) {
                        out[i] = v;
                    }
                    pb.inc(chunk.len() as u64);
                }
            }
            Backend::Server(client) => {
                let sorted: Vec<String> = order.iter().map(|&i| texts[i].clone()).collect();
                let order = &order;
                let mut on_batch = |start: usize, vs: &[Vec<f32>]| -> std::result::Result<(), String> {
                    let idx: Vec<usize> = (start..start + vs.len()).map(|k| order[k]).collect();
                    let vs: Vec<Vec<f32>> = vs.iter().cloned().map(normalised).collect();
                    pb.inc(vs.len() as u64);
                    done(&idx, &vs).map_err(|e| format!("{e:#}"))
                };
                let (vs, counts) = client.embed(&sorted, batch, &mut on_batch).map_err(|e| anyhow::anyhow!("{e}"))?;
                tracing::info!(
                    "embedding server: {} texts in {} requests, {} retries",
                    texts.len(),
                    counts.requests,
                    counts.retries
                );
                for (&i, v) in order.iter().zip(vs) {
                    out[i] = normalised(v);
                }
            }
        }
        Ok(out)
    }
}

pub fn normalised(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
    v
}
