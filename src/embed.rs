//! `benchgen embed`: one vector per tool of the filtered catalog, from a local
//! ONNX sentence-embedding model (fastembed, ONNX Runtime loaded at run time; the
//! default) or from an OpenAI-compatible embedding server (`provider = "openai"`,
//! [`crate::llm::embeddings`]).
//!
//! The tool text follows ETOM's recipe by default (`Tool: <name> | Description:
//! <description> | Parameters: <name>: <description>; …` with up to 5 described
//! parameters) and is configurable in `[embed.text]`.
//!
//! Outputs in `artifacts/embed/`:
//! - `vectors.f32`: row-major little-endian `f32`, `count × dim`, every row
//!   L2-normalised (so a dot product is the cosine similarity);
//! - `index.json`: `{model_id, model_sha256, dim, count, tools: [{row, id, text_sha256}]}`
//!   with rows in catalog order (servers by name, tools by name).
//!
//! A rerun reuses the vector of every tool whose text hash (and model) is
//! unchanged from the previous `artifacts/embed/`, so a growing catalog only
//! embeds its new or edited tools. For a server, "the model" is the model name
//! and `dimensions` (`model_sha256` is the sha256 of `openai:<model>[:<dimensions>]`,
//! since a server does not tell its weights' hash), never the URL: moving the
//! server, or adding replicas, reuses every vector.
//!
//! The model, its settings and [`Vectors`] live in [`crate::embedding`], which other stages
//! use too; this file is the stage.

use std::collections::HashMap;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::embedding::{
    EmbedSettings, Embedder, INDEX_FILE, Index, IndexRow, VECTORS_FILE, Vectors, embed_settings, tool_text,
};
use crate::printer::Printer;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, Ctx, Inputs, Output, Plan, Stage, StageSpec};

/// The vectors, row-major little-endian `f32` (see the module doc).
pub const VECTORS: Artifact = Artifact::new("embed", VECTORS_FILE);
/// Which tool each row is, and the model that made it.
pub const INDEX: Artifact<Index> = Artifact::new("embed", INDEX_FILE);

pub static SPEC: StageSpec = StageSpec {
    name: "embed",
    command: "embed",
    version: 1,
    about: "one vector per tool of the filtered catalog (local ONNX model or an embedding server)",
    reads: &[crate::filter::CATALOG.read()],
    writes: &[VECTORS_FILE, INDEX_FILE],
    section: Some("embed"),
};

impl Vectors {
    /// The vectors of the `embed` stage, from a consumer's declared inputs.
    pub fn read(inputs: &Inputs) -> Result<Self> {
        Self::from_bytes(inputs.bytes_of(&INDEX)?, inputs.bytes_of(&VECTORS)?)
            .context("the `embed` output is not valid; rerun `benchgen embed --force`")
    }
}

pub struct EmbedStage;

impl Stage for EmbedStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Embed every tool of the filtered catalog with a local ONNX model.

         Reads `artifacts/filter/catalog.json` and `[embed]` (model files from
         `make setup` by default). Writes `artifacts/embed/vectors.f32` (row-major
         little-endian f32, L2-normalised) and `index.json` (tool id, row, text hash,
         model id). Tools whose text and model are unchanged since the previous run
         reuse their vectors. Skipped when up to date."
    }

    fn enabled(&self, settings: &Settings) -> bool {
        // `[efs]` by name: this stage does not import the EFS family (no import loop).
        settings.section::<EmbedSettings>().is_some() || settings.section_on("efs")
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![], config_hash: section_hash(&embed_settings(settings).hashed())? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let catalog = inputs.json(&crate::filter::CATALOG)?;
        let cfg = embed_settings(ctx.settings);
        let rows: Vec<(String, String)> =
            catalog.tools().map(|(s, t)| (t.id.clone(), tool_text(&cfg.text, s, t))).collect();
        let mut checkpoint = ctx.checkpoint()?;
        let (vectors, reuse) = embed_rows_resumable(ctx.settings, ctx.printer, &rows, Some(&mut checkpoint))?;
        let reused = reuse.previous + reuse.checkpoint;
        let embedded = rows.len() - reused;
        out.file(VECTORS_FILE, vectors.vector_bytes());
        out.json(INDEX_FILE, &vectors.index)?;
        out.count("tools", rows.len());
        // How many vectors were reused depends on the previous run, so it goes to the
        // notes, not the manifest's counts (a forced rerun must give the same manifest).
        out.count("dim", vectors.dim());
        let resumed = match reuse.checkpoint {
            0 => String::new(),
            n => format!(" ({n} of them from the checkpoint of an interrupted run)"),
        };
        out.notes.push(format!(
            "{} tools: {embedded} embedded, {reused} reused from the previous run{resumed} ({} × {} floats, model `{}`)",
            rows.len(),
            vectors.len(),
            vectors.dim(),
            vectors.index.model_id
        ));
        Ok(())
    }
}

/// Embed `(id, text)` rows, reusing vectors of the previous `artifacts/embed/`
/// whose text hash and model match. Returns the vectors and how many were reused.
pub fn embed_rows(settings: &Settings, printer: &Printer, rows: &[(String, String)]) -> Result<(Vectors, usize)> {
    let (v, reuse) = embed_rows_resumable(settings, printer, rows, None)?;
    Ok((v, reuse.previous + reuse.checkpoint))
}

/// Where the vectors that were not computed came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reuse {
    /// From the previous `artifacts/embed/` (same model, same text hash).
    pub previous: usize,
    /// From the checkpoint of an interrupted run.
    pub checkpoint: usize,
}

/// Finished vectors in the stage's checkpoint (`batch-<n>`, numbered from 0): the model
/// (`model_id|model_sha256`), the texts' sha256 and their vectors (little-endian `f32`, hex).
#[derive(Serialize, Deserialize)]
struct SavedBatch {
    model: String,
    texts: Vec<String>,
    vectors: String,
}

/// The local model's finished texts are saved once there are this many (or one batch), so
/// it does not pay an fsync per small batch; a crash loses at most about that much work.
/// A server's answers are saved with every request (a request costs far more than a write).
const CHECKPOINT_TEXTS: usize = 64;

/// [`embed_rows`] with the stage's checkpoint: vectors an interrupted run finished (same
/// model) are taken from it, and finished batches are added to it as they finish.
pub fn embed_rows_resumable(
    settings: &Settings,
    printer: &Printer,
    rows: &[(String, String)],
    mut checkpoint: Option<&mut crate::store::Checkpoint>,
) -> Result<(Vectors, Reuse)> {
    let cfg = embed_settings(settings);
    let previous = Vectors::load(&settings.artifacts.join("embed")).ok();
    let mut embedder = Embedder::load(settings)?;
    let model = format!("{}|{}", embedder.model_id, embedder.model_sha256);
    let hashes: Vec<String> = rows.iter().map(|(_, t)| crate::store::sha256_hex(t.as_bytes())).collect();
    let saved: Vec<(Vec<String>, Vec<f32>)> =
        checkpoint.as_deref().map(|c| saved_batches(c, &model)).unwrap_or_default();
    let mut known: HashMap<&str, &[f32]> = HashMap::new();
    if let Some(p) = &previous
        && p.index.model_id == embedder.model_id
        && p.index.model_sha256 == embedder.model_sha256
    {
        for r in &p.index.tools {
            known.insert(r.text_sha256.as_str(), p.row(r.row));
        }
    }
    let from_previous: std::collections::HashSet<&str> = known.keys().copied().collect();
    for (texts, floats) in &saved {
        let dim = floats.len() / texts.len().max(1);
        for (k, h) in texts.iter().enumerate() {
            known.entry(h.as_str()).or_insert(&floats[k * dim..(k + 1) * dim]);
        }
    }
    let todo: Vec<usize> = (0..rows.len()).filter(|&i| !known.contains_key(hashes[i].as_str())).collect();
    let texts: Vec<String> = todo.iter().map(|&i| rows[i].1.clone()).collect();
    let pb = printer.progress(texts.len() as u64, "embed");
    let mut next_batch = checkpoint.as_deref().map_or(0, |c| c.len());
    let mut pending: (Vec<String>, Vec<u8>) = (Vec::new(), Vec::new());
    let mut flush = |pending: &mut (Vec<String>, Vec<u8>), checkpoint: &mut Option<&mut crate::store::Checkpoint>| {
        let Some(c) = checkpoint.as_deref_mut() else { return Ok(()) };
        if pending.0.is_empty() {
            return Ok(());
        }
        let (texts, bytes) = std::mem::take(pending);
        let batch = SavedBatch { model: model.clone(), texts, vectors: hex::encode(bytes) };
        c.put(&format!("batch-{next_batch}"), serde_json::to_value(batch)?)?;
        next_batch += 1;
        anyhow::Ok(())
    };
    let batch = cfg.batch_size();
    let save_every = if embedder.is_server() { 1 } else { CHECKPOINT_TEXTS.max(batch) };
    let fresh = embedder.embed_with(&texts, batch, &pb, &mut |idx, vs| {
        if checkpoint.is_none() {
            return Ok(());
        }
        for (&k, v) in idx.iter().zip(vs) {
            pending.0.push(hashes[todo[k]].clone());
            pending.1.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        }
        if pending.0.len() >= save_every {
            flush(&mut pending, &mut checkpoint)?;
        }
        Ok(())
    })?;
    pb.finish_and_clear();
    let dim = fresh.first().map(Vec::len).or_else(|| known.values().next().map(|v| v.len())).unwrap_or(0);
    let mut by_row: HashMap<usize, Vec<f32>> = todo.into_iter().zip(fresh).collect();
    let mut data = Vec::with_capacity(rows.len() * dim);
    let mut tools = Vec::with_capacity(rows.len());
    let mut reuse = Reuse::default();
    for (i, (id, _)) in rows.iter().enumerate() {
        let v = match by_row.remove(&i) {
            Some(v) => v,
            None => {
                if from_previous.contains(hashes[i].as_str()) {
                    reuse.previous += 1;
                } else {
                    reuse.checkpoint += 1;
                }
                known[hashes[i].as_str()].to_vec()
            }
        };
        if v.len() != dim {
            bail!("the model returned a vector of {} floats for `{id}`, expected {dim}", v.len());
        }
        data.extend_from_slice(&v);
        tools.push(IndexRow { row: i, id: id.clone(), text_sha256: hashes[i].clone() });
    }
    let index = Index {
        model_id: embedder.model_id.clone(),
        model_sha256: embedder.model_sha256.clone(),
        dim,
        count: rows.len(),
        tools,
    };
    Ok((Vectors { index, data }, reuse))
}

/// The checkpoint's batches of `model` as (text hashes, their vectors); anything else there
/// (another model, a damaged entry) is skipped.
fn saved_batches(c: &crate::store::Checkpoint, model: &str) -> Vec<(Vec<String>, Vec<f32>)> {
    (0..c.len())
        .filter_map(|n| c.get(&format!("batch-{n}")))
        .filter_map(|v| serde_json::from_value::<SavedBatch>(v.clone()).ok())
        .filter(|b| b.model == model && !b.texts.is_empty())
        .filter_map(|b| {
            let bytes = hex::decode(&b.vectors).ok()?;
            let floats: Vec<f32> =
                bytes.chunks_exact(4).map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]])).collect();
            (bytes.len() % 4 == 0 && !floats.is_empty() && floats.len().is_multiple_of(b.texts.len()))
                .then_some((b.texts, floats))
        })
        .collect()
}
