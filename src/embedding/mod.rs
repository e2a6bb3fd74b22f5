//! Sentence embeddings, a capability several stages share: the `[embed]` section (model,
//! provider, the tool-text recipe), the [`Embedder`] (a local ONNX model through fastembed,
//! or an OpenAI-compatible embedding server) and [`Vectors`] (an index and its rows). The
//! `embed` stage (`src/embed.rs`) writes the catalog's vectors with them; `efs pairs`,
//! `efs topdown` and `levels l5` read them, and the level stages embed texts of their own.

mod lazy;
mod model;
mod settings;
mod vectors;

pub use lazy::{Lazy, PREFETCH_CHUNK, Prefetch};
pub use model::{BatchDone, Embedder, dot, missing_assets, missing_problem, normalised};
pub use settings::{
    EmbedProvider, EmbedSettings, PoolingKind, TextField, TextRecipe, cache_dir, described_parameters, embed_settings,
    tool_text,
};
pub use vectors::{INDEX_FILE, Index, IndexRow, VECTORS_FILE, Vectors};
