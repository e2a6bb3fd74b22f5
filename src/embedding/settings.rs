//! `[embed]`: which model embeds, and the text embedded for a tool.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config_doc::Key;
use crate::model::{Server, Tool};
use crate::settings::Settings;

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
    const KEYS: &'static [Key] = &[
        Key::new(
            "provider",
            r#""fastembed" | "openai""#,
            r#""fastembed""#,
            "A local ONNX model through fastembed, or an OpenAI-compatible `/v1/embeddings` server.",
        ),
        Key::derived(
            "model_id",
            "string",
            "`all-MiniLM-L6-v2-int8` (fastembed), `model` (openai)",
            "Name recorded with every vector; change it when pointing at another model.",
        ),
        Key::unset(
            "model_dir",
            "path",
            "fastembed: the model's folder; unset: `$BENCHGEN_CACHE/embed/all-MiniLM-L6-v2-int8` (`make setup`).",
        ),
        Key::unset(
            "ort_dylib",
            "path",
            "fastembed: ONNX Runtime library (1.24 or newer); unset: the one under `$BENCHGEN_CACHE/embed/`.",
        ),
        Key::derived("pooling", r#""mean" | "cls""#, r#"`"mean"`"#, "fastembed: pooling over the token vectors."),
        Key::derived("max_length", "integer", "`256`", "fastembed: tokens per text; longer texts are truncated."),
        Key::unset("base_url", "string", "openai: base URL ending in `/v1` (requests go to `{base_url}/embeddings`)."),
        Key::unset("model", "string", "openai: the model name sent to the server."),
        Key::unset("dimensions", "integer", "openai: sent as `dimensions` (models that can shorten their vectors)."),
        Key::unset(
            "api_key_env",
            "string",
            "openai: name of the environment variable holding the API key; unset: no `Authorization` header.",
        ),
        Key::derived("max_concurrency", "integer", "`4`", "openai: requests in flight at once."),
        Key::derived("timeout_s", "number", "`120`", "openai: seconds per request."),
        Key::derived(
            "max_retries",
            "integer",
            "`5`",
            "openai: retries of 408/409/429/5xx, connection errors, timeouts and malformed answers.",
        ),
        Key::derived("backoff_ms", "integer", "`500`", "openai: first back-off in milliseconds, doubled per retry."),
        Key::derived(
            "batch_size",
            "integer",
            "`8` (fastembed), `32` (openai)",
            "Texts per inference batch or request (not hashed).",
        ),
        Key::table("text", "What goes into a tool's text, in order, joined by `separator`."),
        Key::new(
            "text.fields",
            "list of strings",
            r#"["name", "description", "parameters"]"#,
            "Any of `name`, `description`, `parameters`, `server`, `server_description`.",
        ),
        Key::new(
            "text.max_parameters",
            "integer",
            "5",
            "At most this many parameters (those with a description, in schema order).",
        ),
        Key::new("text.separator", "string", r#"" | ""#, "Joins the fields."),
        Key::new("text.max_chars", "integer", "2048", "Texts are cut to this many characters before tokenising."),
        Key::new(
            "text.strip_server_name",
            "bool",
            "true",
            "Remove the server's own name from tool descriptions (vendor names hide equivalence).",
        ),
    ];
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
pub(crate) struct Hashed<'a> {
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
    pub(crate) fn hashed(&self) -> Hashed<'_> {
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
    pub(crate) fn server_fingerprint(&self) -> String {
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
}
