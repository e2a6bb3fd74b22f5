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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::hinted;
use crate::model::{Server, Tool};
use crate::printer::Printer;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, Ctx, Inputs, Output, Plan, Stage, StageSpec};

/// The vectors, row-major little-endian `f32` (see the module doc).
pub const VECTORS: Artifact = Artifact::new("embed", VECTORS_FILE);
/// Which tool each row is, and the model that made it.
pub const INDEX: Artifact<Index> = Artifact::new("embed", INDEX_FILE);
const VECTORS_FILE: &str = "vectors.f32";
const INDEX_FILE: &str = "index.json";

pub static SPEC: StageSpec = StageSpec {
    name: "embed",
    command: "embed",
    version: 1,
    about: "one vector per tool of the filtered catalog (local ONNX model or an embedding server)",
    reads: &[crate::filter::CATALOG.read()],
    writes: &[VECTORS_FILE, INDEX_FILE],
    section: Some("embed"),
};

/// Where the vectors come from.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum EmbedProvider {
    /// A local ONNX model through fastembed (the default).
    #[default]
    Fastembed,
    /// Any OpenAI-compatible `/v1/embeddings` server.
    Openai,
}

/// `[embed]` in the pipeline config. Keys of one provider are errors under the other
/// (checked when the config is loaded).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedSettings {
    #[serde(default)]
    pub provider: EmbedProvider,
    /// Name recorded with every vector; change it when pointing at another model.
    /// Default: `all-MiniLM-L6-v2-int8` (fastembed), the `model` (openai).
    #[serde(default)]
    pub model_id: Option<String>,
    /// fastembed: folder with `model.onnx`, `tokenizer.json`, `config.json`,
    /// `special_tokens_map.json`, `tokenizer_config.json`. Default:
    /// `$BENCHGEN_CACHE/embed/all-MiniLM-L6-v2-int8` (fetched by `make setup`).
    #[serde(default)]
    pub model_dir: Option<PathBuf>,
    /// fastembed: ONNX Runtime shared library (1.24 or newer). Default:
    /// `$BENCHGEN_CACHE/embed/onnxruntime-1.24.4/libonnxruntime.so.1.24.4`.
    #[serde(default)]
    pub ort_dylib: Option<PathBuf>,
    /// fastembed: pooling over token vectors, `mean` (default, right for MiniLM) or `cls`.
    #[serde(default)]
    pub pooling: Option<PoolingKind>,
    /// fastembed: tokens per text (default 256); longer texts are truncated.
    #[serde(default)]
    pub max_length: Option<usize>,
    /// openai: base URL ending in `/v1` (requests go to `{base_url}/embeddings`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// openai: the model name sent to the server.
    #[serde(default)]
    pub model: Option<String>,
    /// openai: sent as `dimensions` (models that can shorten their vectors).
    #[serde(default)]
    pub dimensions: Option<u32>,
    /// openai: NAME of the environment variable holding the API key (never the key
    /// itself); none = no `Authorization` header.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// openai: requests in flight at once (default 4).
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    /// openai: seconds per request (default 120).
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// openai: retries of 408/409/429/5xx, connection errors, timeouts and malformed
    /// answers (default 5).
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// openai: first back-off in milliseconds, doubled per retry (default 500).
    #[serde(default)]
    pub backoff_ms: Option<u64>,
    #[serde(default)]
    pub text: TextRecipe,
    /// Texts per inference batch or request (a tuning knob: not part of the config hash).
    /// Default 8 (fastembed), 32 (openai).
    #[serde(default)]
    pub batch_size: Option<usize>,
}

/// `[embed]`; absent: its stages are not part of `run` (each still runs alone, with defaults).
impl crate::settings::Section for EmbedSettings {
    const NAME: &'static str = "embed";
    type Value = Option<Self>;
    fn check(e: &Self::Value, _: &Settings, problems: &mut Vec<crate::error::Problem>) {
        if let Some(e) = e {
            e.check(problems);
        }
    }
}

const DEFAULT_MODEL_ID: &str = "all-MiniLM-L6-v2-int8";
const DEFAULT_MAX_LENGTH: usize = 256;
/// Measured on the ETOM snapshot (2 loaded cores): batch 8 took 46 s and 530 MB
/// peak RSS, 16 took 59 s / 880 MB, 32 took 64 s / 1.6 GB (ONNX Runtime's arena
/// grows with the largest batch shape).
const DEFAULT_BATCH_LOCAL: usize = 8;
/// A server batches on its own side; fewer, larger requests cost less HTTP.
const DEFAULT_BATCH_REMOTE: usize = 32;

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum PoolingKind {
    #[default]
    Mean,
    Cls,
}

/// What goes into a tool's text, in order, joined by `separator`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TextRecipe {
    /// Any of `name`, `description`, `parameters`, `server`, `server_description`.
    #[serde(default = "default_fields")]
    pub fields: Vec<TextField>,
    /// At most this many parameters (those with a description, in schema order).
    #[serde(default = "default_max_params")]
    pub max_parameters: usize,
    #[serde(default = "default_sep")]
    pub separator: String,
    /// Texts are cut to this many characters before tokenising (ETOM: 2,048).
    #[serde(default = "default_max_chars")]
    pub max_chars: usize,
    /// Remove the server's own name from the tool description ("… using the Luno
    /// MCP Server"): vendor names make equivalent tools of different servers look
    /// less alike.
    #[serde(default = "yes")]
    pub strip_server_name: bool,
}

impl Default for TextRecipe {
    fn default() -> Self {
        Self {
            fields: default_fields(),
            max_parameters: default_max_params(),
            separator: default_sep(),
            max_chars: default_max_chars(),
            strip_server_name: true,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TextField {
    Name,
    Description,
    Parameters,
    Server,
    ServerDescription,
}

fn default_fields() -> Vec<TextField> {
    vec![TextField::Name, TextField::Description, TextField::Parameters]
}
fn default_max_params() -> usize {
    5
}
fn default_sep() -> String {
    " | ".into()
}
fn yes() -> bool {
    true
}
fn default_max_chars() -> usize {
    2048
}

/// The hashed part of `[embed]`: what changes the vectors (not paths, not batch size,
/// not the server's URL or load knobs). For fastembed it serialises exactly as before
/// the openai provider existed, so existing outputs stay fresh.
#[derive(Serialize)]
struct Hashed<'a> {
    model_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pooling: Option<PoolingKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_length: Option<usize>,
    text: &'a TextRecipe,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<HashedServer<'a>>,
}

#[derive(Serialize)]
struct HashedServer<'a> {
    provider: &'static str,
    model: &'a str,
    dimensions: Option<u32>,
}

impl EmbedSettings {
    fn hashed(&self) -> Hashed<'_> {
        let local = self.provider == EmbedProvider::Fastembed;
        Hashed {
            model_id: self.model_id(),
            pooling: local.then(|| self.pooling()),
            max_length: local.then(|| self.max_length()),
            text: &self.text,
            server: (!local).then(|| HashedServer {
                provider: "openai",
                model: self.model.as_deref().unwrap_or(""),
                dimensions: self.dimensions,
            }),
        }
    }

    /// The name recorded with the vectors.
    pub fn model_id(&self) -> String {
        match (&self.model_id, self.provider) {
            (Some(id), _) => id.clone(),
            (None, EmbedProvider::Fastembed) => DEFAULT_MODEL_ID.into(),
            (None, EmbedProvider::Openai) => self.model.clone().unwrap_or_default(),
        }
    }

    pub fn pooling(&self) -> PoolingKind {
        self.pooling.unwrap_or_default()
    }

    pub fn max_length(&self) -> usize {
        self.max_length.unwrap_or(DEFAULT_MAX_LENGTH)
    }

    pub fn batch_size(&self) -> usize {
        self.batch_size.unwrap_or(match self.provider {
            EmbedProvider::Fastembed => DEFAULT_BATCH_LOCAL,
            EmbedProvider::Openai => DEFAULT_BATCH_REMOTE,
        })
    }

    /// The server of `provider = "openai"`, with the documented defaults filled in.
    pub fn endpoint(&self) -> crate::llm::embeddings::EmbeddingEndpoint {
        crate::llm::embeddings::EmbeddingEndpoint {
            base_url: self.base_url.clone().unwrap_or_default(),
            model: self.model.clone().unwrap_or_default(),
            dimensions: self.dimensions,
            api_key_env: self.api_key_env.clone(),
            max_concurrency: self.max_concurrency.unwrap_or(4),
            timeout_s: self.timeout_s.unwrap_or(120.0),
            max_retries: self.max_retries.unwrap_or(5),
            backoff_ms: self.backoff_ms.unwrap_or(500),
        }
    }

    /// What identifies the model for reuse besides `model_id` (see the module doc).
    fn server_fingerprint(&self) -> String {
        let mut s = format!("openai:{}", self.model.as_deref().unwrap_or(""));
        if let Some(d) = self.dimensions {
            s.push_str(&format!(":{d}"));
        }
        crate::store::sha256_hex(s.as_bytes())
    }

    /// Config problems of `[embed]` (checked when the config is loaded).
    pub fn check(&self, problems: &mut Vec<crate::error::Problem>) {
        use crate::error::Problem;
        let loc = "embed";
        let misplaced = |keys: &[(bool, &str)]| -> Option<String> {
            let keys: Vec<String> = keys.iter().filter(|(set, _)| *set).map(|(_, k)| format!("`{k}`")).collect();
            (!keys.is_empty()).then(|| keys.join(", "))
        };
        match self.provider {
            EmbedProvider::Fastembed => {
                if let Some(keys) = misplaced(&[
                    (self.base_url.is_some(), "base_url"),
                    (self.model.is_some(), "model"),
                    (self.dimensions.is_some(), "dimensions"),
                    (self.api_key_env.is_some(), "api_key_env"),
                    (self.max_concurrency.is_some(), "max_concurrency"),
                    (self.timeout_s.is_some(), "timeout_s"),
                    (self.max_retries.is_some(), "max_retries"),
                    (self.backoff_ms.is_some(), "backoff_ms"),
                ]) {
                    problems.push(Problem::new(
                        loc,
                        format!(
                            "{keys}: for `provider = \"openai\"` only (this section uses the default, `fastembed`)"
                        ),
                    ));
                }
            }
            EmbedProvider::Openai => {
                if let Some(keys) = misplaced(&[
                    (self.model_dir.is_some(), "model_dir"),
                    (self.ort_dylib.is_some(), "ort_dylib"),
                    (self.pooling.is_some(), "pooling"),
                    (self.max_length.is_some(), "max_length"),
                ]) {
                    problems.push(Problem::new(
                        loc,
                        format!(
                            "{keys}: for `provider = \"fastembed\"` only (the server decides pooling and truncation)"
                        ),
                    ));
                }
                match &self.base_url {
                    None => problems.push(Problem::new(
                        loc,
                        "`base_url` is required for `provider = \"openai\"` (e.g. `http://127.0.0.1:8080/v1`)",
                    )),
                    Some(u) => crate::llm::config::check_urls(loc, "base_url", std::slice::from_ref(u), problems),
                }
                if self.model.as_deref().unwrap_or("").trim().is_empty() {
                    problems.push(Problem::new(loc, "`model` is required for `provider = \"openai\"`"));
                }
                if let Some(name) = &self.api_key_env {
                    crate::llm::config::check_key_env(loc, name, problems);
                }
                if self.dimensions == Some(0) {
                    problems.push(Problem::new(loc, "`dimensions` must be at least 1"));
                }
                if self.max_concurrency == Some(0) {
                    problems.push(Problem::new(loc, "`max_concurrency` must be at least 1"));
                }
                if let Some(t) = self.timeout_s
                    && !(t.is_finite() && t > 0.0)
                {
                    problems.push(Problem::new(loc, "`timeout_s` must be a positive number of seconds"));
                }
            }
        }
        if self.model_id.as_deref().is_some_and(|m| m.trim().is_empty()) {
            problems.push(Problem::new(loc, "`model_id` must not be empty"));
        }
        if self.batch_size == Some(0) {
            problems.push(Problem::new("embed.batch_size", "must be at least 1"));
        }
        if self.max_length == Some(0) {
            problems.push(Problem::new("embed.max_length", "must be at least 1"));
        }
    }

    pub fn model_dir(&self, settings: &Settings) -> PathBuf {
        match &self.model_dir {
            Some(p) => settings.resolve(p),
            None => cache_dir().join("embed").join("all-MiniLM-L6-v2-int8"),
        }
    }

    pub fn ort_dylib(&self, settings: &Settings) -> PathBuf {
        match &self.ort_dylib {
            Some(p) => settings.resolve(p),
            None => cache_dir().join("embed").join("onnxruntime-1.24.4").join("libonnxruntime.so.1.24.4"),
        }
    }
}

/// `[embed]` of the config, or the defaults when the section is absent.
pub fn embed_settings(settings: &Settings) -> &EmbedSettings {
    static DEFAULT: std::sync::LazyLock<EmbedSettings> = std::sync::LazyLock::new(EmbedSettings::default);
    settings.section::<EmbedSettings>().as_ref().unwrap_or(&DEFAULT)
}

/// `$BENCHGEN_CACHE`, default `~/.cache/benchgen` (where `make setup` puts assets).
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("BENCHGEN_CACHE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".cache").join("benchgen"),
    }
}

/// The text embedded for one tool.
pub fn tool_text(recipe: &TextRecipe, server: &Server, tool: &Tool) -> String {
    let mut parts: Vec<String> = Vec::new();
    for f in &recipe.fields {
        match f {
            TextField::Name => parts.push(format!("Tool: {}", tool.name.trim())),
            TextField::Description if !tool.description.trim().is_empty() => {
                let d = if recipe.strip_server_name {
                    strip_name(&tool.description, &server.name)
                } else {
                    tool.description.trim().to_string()
                };
                parts.push(format!("Description: {d}"))
            }
            TextField::Parameters => {
                let params: Vec<String> = described_parameters(&tool.input_schema)
                    .into_iter()
                    .take(recipe.max_parameters)
                    .map(|(n, d)| format!("{n}: {d}"))
                    .collect();
                if !params.is_empty() {
                    parts.push(format!("Parameters: {}", params.join("; ")));
                }
            }
            TextField::Server => parts.push(format!("Server: {}", server.name.trim())),
            TextField::ServerDescription if !server.description.trim().is_empty() => {
                parts.push(format!("Server description: {}", server.description.trim()))
            }
            _ => {}
        }
    }
    let text = parts.join(&recipe.separator);
    match text.char_indices().nth(recipe.max_chars) {
        Some((cut, _)) => text[..cut].to_string(),
        None => text,
    }
}

/// `text` without case-insensitive whole-word occurrences of `name` (whitespace collapsed).
fn strip_name(text: &str, name: &str) -> String {
    let name = name.trim();
    if name.is_empty() {
        return text.trim().to_string();
    }
    // Whole words only: a short server name must not eat letters inside other words.
    let re = regex::Regex::new(&format!(r"(?i)(^|\W){}(\W|$)", regex::escape(name)))
        .expect("an escaped literal is a valid regex");
    re.replace_all(text, "${1}${2}").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `(name, description)` of every parameter that has a non-empty description,
/// in schema order.
pub fn described_parameters(schema: &Value) -> Vec<(String, String)> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .filter_map(|(n, v)| {
            let d = v.get("description").and_then(Value::as_str)?.trim();
            (!d.is_empty()).then(|| (n.clone(), d.to_string()))
        })
        .collect()
}

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
        let missing: Vec<PathBuf> = ["model.onnx", "tokenizer.json", "config.json", "special_tokens_map.json"]
            .iter()
            .map(|f| dir.join(f))
            .chain(std::iter::once(dylib.clone()))
            .filter(|p| !p.exists())
            .collect();
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

/// One row of `index.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IndexRow {
    pub row: usize,
    pub id: String,
    pub text_sha256: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Index {
    pub model_id: String,
    pub model_sha256: String,
    pub dim: usize,
    pub count: usize,
    pub tools: Vec<IndexRow>,
}

/// Vectors with their index, in memory.
#[derive(Debug, Clone)]
pub struct Vectors {
    pub index: Index,
    pub data: Vec<f32>,
}

impl Vectors {
    pub fn len(&self) -> usize {
        self.index.count
    }

    pub fn is_empty(&self) -> bool {
        self.index.count == 0
    }

    pub fn dim(&self) -> usize {
        self.index.dim
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.index.dim..(i + 1) * self.index.dim]
    }

    pub fn ids(&self) -> Vec<&str> {
        self.index.tools.iter().map(|t| t.id.as_str()).collect()
    }

    pub fn from_bytes(index: &[u8], vectors: &[u8]) -> Result<Self> {
        let index: Index = serde_json::from_slice(index).context("the embedding index is not valid")?;
        if vectors.len() != index.count * index.dim * 4 {
            bail!(
                "`{VECTORS_FILE}` holds {} bytes, but the index says {} vectors of {} floats",
                vectors.len(),
                index.count,
                index.dim
            );
        }
        let data = vectors.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(Self { index, data })
    }

    /// Read `index.json` and `vectors.f32` from a folder.
    /// The vectors of the `embed` stage, from a consumer's declared inputs.
    pub fn read(inputs: &Inputs) -> Result<Self> {
        Self::from_bytes(inputs.bytes_of(&INDEX)?, inputs.bytes_of(&VECTORS)?)
            .context("the `embed` output is not valid; rerun `benchgen embed --force`")
    }

    pub fn load(dir: &Path) -> Result<Self> {
        let i = std::fs::read(dir.join(INDEX_FILE))
            .with_context(|| format!("cannot read `{}`", dir.join(INDEX_FILE).display()))?;
        let v = std::fs::read(dir.join(VECTORS_FILE))
            .with_context(|| format!("cannot read `{}`", dir.join(VECTORS_FILE).display()))?;
        Self::from_bytes(&i, &v).with_context(|| format!("in `{}`", dir.display()))
    }

    pub fn vector_bytes(&self) -> Vec<u8> {
        self.data.iter().flat_map(|x| x.to_le_bytes()).collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(schema: Value) -> (Server, Tool) {
        let t = Tool {
            id: "s::t".into(),
            name: " get_quote ".into(),
            description: "Latest price.".into(),
            input_schema: schema,
            output_schema: None,
        };
        let s = Server {
            name: "s".into(),
            description: String::new(),
            summary: String::new(),
            url: String::new(),
            categories: vec![],
            license: None,
            tools: vec![],
            registry: None,
        };
        (s, t)
    }

    #[test]
    fn etom_text_recipe_takes_first_five_described_parameters() {
        let mut props = serde_json::Map::new();
        for i in 0..7 {
            props.insert(format!("p{i}"), json!({"type": "string", "description": format!("d{i}")}));
        }
        props.insert("q".into(), json!({"type": "string"}));
        let (s, t) = tool(json!({"type": "object", "properties": props}));
        let text = tool_text(&TextRecipe::default(), &s, &t);
        assert_eq!(
            text,
            "Tool: get_quote | Description: Latest price. | Parameters: p0: d0; p1: d1; p2: d2; p3: d3; p4: d4"
        );
    }

    #[test]
    fn text_without_parameters_and_cut_to_max_chars() {
        let (s, t) = tool(json!({"type": "object"}));
        let r = TextRecipe { max_chars: 9, ..TextRecipe::default() };
        assert_eq!(tool_text(&TextRecipe::default(), &s, &t), "Tool: get_quote | Description: Latest price.");
        assert_eq!(tool_text(&r, &s, &t), "Tool: get");
    }

    #[test]
    fn server_name_is_stripped_as_whole_words_only() {
        assert_eq!(
            strip_name("Send mail via the Luno MCP Server, fast.", "luno mcp server"),
            "Send mail via the , fast."
        );
        assert_eq!(strip_name("Latest price of s.", "s"), "Latest price of .");
        assert_eq!(strip_name("Lists stars", "s"), "Lists stars");
    }

    #[test]
    fn vectors_round_trip_and_size_is_checked() {
        let index = Index {
            model_id: "m".into(),
            model_sha256: "h".into(),
            dim: 2,
            count: 2,
            tools: vec![
                IndexRow { row: 0, id: "a".into(), text_sha256: "x".into() },
                IndexRow { row: 1, id: "b".into(), text_sha256: "y".into() },
            ],
        };
        let v = Vectors { index: index.clone(), data: vec![1.0, 0.0, 0.6, 0.8] };
        let bytes = v.vector_bytes();
        let back = Vectors::from_bytes(&serde_json::to_vec(&index).unwrap(), &bytes).unwrap();
        assert_eq!(back.row(1), &[0.6, 0.8]);
        assert!(Vectors::from_bytes(&serde_json::to_vec(&index).unwrap(), &bytes[..12]).is_err());
    }
}
