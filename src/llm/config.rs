//! `[llm]` config: one `[llm.roles.<role>]` table per role (verifier, generator, classifier, …).
//!
//! Only the fields that change what a model answers (provider, model, sampling parameters,
//! the local model file) enter [`role_hash`](super::role_hash); load knobs (concurrency, limits, timeouts,
//! retries, prices) do not, so tuning them never makes a stage stale.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config_doc::Key;
use crate::error::Problem;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    /// Folder of prompt templates (`NAME.md`), relative to the project root.
    #[serde(default = "default_prompts_dir")]
    pub prompts_dir: PathBuf,
    #[serde(default)]
    pub roles: BTreeMap<String, RoleSettings>,
}

/// `[llm]`; absent: its defaults.
impl crate::settings::Section for LlmSettings {
    const NAME: &'static str = "llm";
    type Value = crate::settings::Always<Self>;
    const KEYS: &'static [Key] = &[
        Key::new(
            "prompts_dir",
            "path",
            r#""pipeline/prompts""#,
            "Folder of the project's prompt templates (`NAME.md`), relative to the project root.",
        ),
        Key::table("roles.<role>", "One LLM role: the server and model the calls of the stages naming it go to."),
        Key::required(
            "roles.<role>.provider",
            r#""openai" | "vllm" | "sglang" | "ollama" | "llamacpp" | "local""#,
            "Server kind: sets the default base URL and key variable (`local`: benchgen starts llama-server).",
        ),
        Key::derived(
            "roles.<role>.base_url",
            "string",
            "the provider's",
            "OpenAI-compatible base URL ending in `/v1` (unused for `local`).",
        ),
        Key::unset(
            "roles.<role>.base_urls",
            "list of strings",
            "Several servers of one model instead of `base_url`: the least busy gets each request.",
        ),
        Key::derived(
            "roles.<role>.model",
            "string",
            "required; `local`: the GGUF file's stem",
            "Model name sent to the server.",
        ),
        Key::unset("roles.<role>.temperature", "number", "Sampling temperature sent; unset: the server's."),
        Key::unset("roles.<role>.top_p", "number", "Nucleus sampling `top_p` sent; unset: the server's."),
        Key::unset("roles.<role>.max_tokens", "integer", "Most tokens per answer, sent; unset: the server's."),
        Key::unset("roles.<role>.seed", "integer", "Sampling seed, where the server supports one."),
        Key::derived(
            "roles.<role>.api_key_env",
            "string",
            "`OPENAI_API_KEY` for `openai`, else none",
            "Name of the environment variable holding the API key (never the key itself).",
        ),
        Key::new(
            "roles.<role>.json_schema",
            "bool",
            "true",
            "Ask for `response_format: json_schema` in typed calls; false: the schema is in the prompt only.",
        ),
        Key::new("roles.<role>.timeout_s", "number", "120.0", "Per-request timeout in seconds."),
        Key::new(
            "roles.<role>.max_concurrency",
            "integer",
            "4",
            "Requests in flight at once (to each of `base_urls`).",
        ),
        Key::new(
            "roles.<role>.failover_after",
            "integer",
            "3",
            "With `base_urls`: failed attempts in a row that take a server out.",
        ),
        Key::new(
            "roles.<role>.cooldown_s",
            "number",
            "30.0",
            "With `base_urls`: seconds a server stays out before it is tried again.",
        ),
        Key::new("roles.<role>.rpm", "integer", "0", "Requests per minute (0: unlimited)."),
        Key::new(
            "roles.<role>.tpm",
            "integer",
            "0",
            "Tokens per minute, prompt estimate plus `max_tokens` (0: unlimited).",
        ),
        Key::new(
            "roles.<role>.max_retries",
            "integer",
            "5",
            "Retries of 429, 5xx, connection errors and timeouts after the first attempt.",
        ),
        Key::new(
            "roles.<role>.backoff_ms",
            "integer",
            "500",
            "First back-off in milliseconds; doubles per retry (capped at 60 s).",
        ),
        Key::new("roles.<role>.reask", "integer", "2", "Re-asks of a typed call whose answer does not validate."),
        Key::new(
            "roles.<role>.mode",
            r#""live" | "batch""#,
            r#""live""#,
            "One request per call, or the requests of a stage as OpenAI batch jobs (docs/llm-batch-api.md).",
        ),
        Key::unset(
            "roles.<role>.server_binary",
            "path",
            "`local`: the llama-server binary; unset: `$BENCHGEN_CACHE/llm/build/bin/llama-server`.",
        ),
        Key::unset(
            "roles.<role>.model_path",
            "path",
            "`local`: the GGUF model; unset: the 1.5B Qwen2.5-Coder instruct in the setup cache.",
        ),
        Key::new("roles.<role>.threads", "integer", "2", "`local`: threads given to llama-server."),
        Key::new("roles.<role>.ctx_size", "integer", "4096", "`local`: context size given to llama-server."),
        Key::new(
            "roles.<role>.startup_timeout_s",
            "number",
            "120.0",
            "`local`: seconds to wait for `/health` after start.",
        ),
        Key::table("roles.<role>.prices", "Prices in USD per million tokens, for `benchgen llm stats` estimates."),
        Key::required("roles.<role>.prices.prompt", "number", "USD per million prompt tokens."),
        Key::required("roles.<role>.prices.completion", "number", "USD per million completion tokens."),
        Key::derived(
            "roles.<role>.prices.batch_prompt",
            "number",
            "`prompt`",
            "USD per million prompt tokens of requests that ran in batch jobs.",
        ),
        Key::derived(
            "roles.<role>.prices.batch_completion",
            "number",
            "`completion`",
            "USD per million completion tokens of requests that ran in batch jobs.",
        ),
        Key::table(
            "roles.<role>.batch",
            r#"How `mode = "batch"` gathers, submits and polls (no knob changes an answer)."#,
        ),
        Key::new(
            "roles.<role>.batch.gather_ms",
            "integer",
            "2000",
            "A batch is sent once no new request has come for this long.",
        ),
        Key::new(
            "roles.<role>.batch.max_requests",
            "integer",
            "50000",
            "Requests per batch file (OpenAI's limit); more go into further batches.",
        ),
        Key::new(
            "roles.<role>.batch.max_bytes",
            "integer",
            "209715200",
            "Bytes per batch file (OpenAI's limit: 200 MB); more go into further batches.",
        ),
        Key::new(
            "roles.<role>.batch.completion_window",
            "string",
            r#""24h""#,
            "Each batch's `completion_window`, in whole hours.",
        ),
        Key::new(
            "roles.<role>.batch.poll_s",
            "number",
            "10.0",
            "Seconds before a batch's first poll; each further poll waits 1.5 times longer.",
        ),
        Key::new("roles.<role>.batch.poll_max_s", "number", "300.0", "Longest wait between polls, in seconds."),
        Key::new(
            "roles.<role>.batch.resubmits",
            "integer",
            "2",
            "Further batches a request that failed in one is sent in before `live_fallback` decides.",
        ),
        Key::new(
            "roles.<role>.batch.live_fallback",
            "bool",
            "true",
            "After `resubmits`, send the request as a live call; false: it fails.",
        ),
    ];
    const EXAMPLE: &'static str = r#"
[llm.roles.judge]
provider = "openai"

[llm.roles.judge.prices]
prompt = 0.15
completion = 0.6
"#;
    fn check(l: &Self::Value, _: &crate::settings::Settings, problems: &mut Vec<Problem>) {
        l.check(problems);
    }
}

impl Default for LlmSettings {
    fn default() -> Self {
        Self { prompts_dir: default_prompts_dir(), roles: BTreeMap::new() }
    }
}

fn default_prompts_dir() -> PathBuf {
    PathBuf::from("pipeline/prompts")
}

/// Which kind of server a role talks to. All speak the OpenAI chat-completions API;
/// the provider only sets defaults (base URL, API key variable, structured-output support).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Openai,
    Vllm,
    Sglang,
    Ollama,
    Llamacpp,
    /// benchgen starts llama.cpp's `llama-server` itself (the embedded default).
    Local,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::Vllm => "vllm",
            Provider::Sglang => "sglang",
            Provider::Ollama => "ollama",
            Provider::Llamacpp => "llamacpp",
            Provider::Local => "local",
        }
    }

    fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::Openai => Some("https://api.openai.com/v1"),
            Provider::Vllm => Some("http://127.0.0.1:8000/v1"),
            Provider::Sglang => Some("http://127.0.0.1:30000/v1"),
            Provider::Ollama => Some("http://127.0.0.1:11434/v1"),
            Provider::Llamacpp => Some("http://127.0.0.1:8080/v1"),
            Provider::Local => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSettings {
    pub provider: Provider,
    /// OpenAI-compatible base URL ending in `/v1` (default per provider; unused for `local`).
    pub base_url: Option<String>,
    /// Several servers of the same model (replicas), instead of `base_url`: requests go to
    /// the one with the fewest outstanding, and one that keeps failing is taken out for a
    /// while ([`super::pool`]).
    pub base_urls: Option<Vec<String>>,
    /// Model name sent to the endpoint (for `local`: default the GGUF file's stem).
    pub model: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_tokens: Option<u32>,
    /// Sampling seed, where the server supports one.
    pub seed: Option<u64>,
    /// NAME of the environment variable holding the API key (never the key itself).
    /// Default `OPENAI_API_KEY` for `openai`, none otherwise.
    pub api_key_env: Option<String>,
    /// Ask for `response_format: json_schema` in typed calls (default true). When false,
    /// the schema is only given in the prompt and the JSON is extracted from the text.
    #[serde(default = "yes")]
    pub json_schema: bool,
    /// Per-request timeout in seconds.
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    /// Requests in flight at once against this endpoint (against each of `base_urls`).
    #[serde(default = "default_concurrency")]
    pub max_concurrency: usize,
    /// With `base_urls`: failed attempts in a row that take a server out.
    #[serde(default = "default_failover_after")]
    pub failover_after: u32,
    /// With `base_urls`: seconds a server stays out before it is tried again.
    #[serde(default = "default_cooldown")]
    pub cooldown_s: f64,
    /// Requests per minute (0 = unlimited).
    #[serde(default)]
    pub rpm: u32,
    /// Tokens per minute, prompt estimate plus `max_tokens` (0 = unlimited).
    #[serde(default)]
    pub tpm: u32,
    /// Retries of 429, 5xx, connection errors and timeouts after the first attempt.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// First back-off in milliseconds; doubles per retry (jittered, capped at 60 s).
    #[serde(default = "default_backoff")]
    pub backoff_ms: u64,
    /// Re-asks of a typed call whose answer does not validate.
    #[serde(default = "default_reask")]
    pub reask: u32,
    /// Prices in USD per million tokens, for `llm stats` estimates.
    pub prices: Option<Prices>,
    /// `live` (default): one request per call. `batch`: a stage's requests of this role go
    /// out as OpenAI batch jobs ([`super::batch_api`]), with the knobs of `batch`.
    #[serde(default, skip_serializing_if = "RoleMode::is_live")]
    pub mode: RoleMode,
    /// Batch jobs of `mode = "batch"` (`[llm.roles.NAME.batch]`).
    #[serde(default, skip_serializing_if = "BatchSettings::is_default")]
    pub batch: BatchSettings,
    /// `local` only: the llama-server binary (default `$BENCHGEN_CACHE/llm/build/bin/llama-server`).
    pub server_binary: Option<PathBuf>,
    /// `local` only: the GGUF model (default the 1.5B Qwen2.5-Coder instruct in the setup cache).
    pub model_path: Option<PathBuf>,
    /// `local` only: threads and context size given to llama-server.
    #[serde(default = "default_threads")]
    pub threads: u32,
    #[serde(default = "default_ctx")]
    pub ctx_size: u32,
    /// `local` only: seconds to wait for `/health` after start.
    #[serde(default = "default_startup")]
    pub startup_timeout_s: f64,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// USD per million prompt tokens.
    pub prompt: f64,
    /// USD per million completion tokens.
    pub completion: f64,
    /// USD per million prompt tokens of requests that ran in batch jobs (default `prompt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_prompt: Option<f64>,
    /// USD per million completion tokens of requests that ran in batch jobs (default
    /// `completion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_completion: Option<f64>,
}

impl Prices {
    /// USD for these tokens, at the batch prices when `batch`.
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64, batch: bool) -> f64 {
        let (p, c) = if batch {
            (self.batch_prompt.unwrap_or(self.prompt), self.batch_completion.unwrap_or(self.completion))
        } else {
            (self.prompt, self.completion)
        };
        (prompt_tokens as f64 * p + completion_tokens as f64 * c) / 1e6
    }
}

/// How a role's requests reach its server (`mode`).
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RoleMode {
    /// One HTTP request per call, answered while the stage waits.
    #[default]
    Live,
    /// Gathered into OpenAI batch jobs (`/v1/files` + `/v1/batches`), polled to completion.
    Batch,
}

impl RoleMode {
    fn is_live(&self) -> bool {
        *self == RoleMode::Live
    }
}

/// `[llm.roles.NAME.batch]`: how `mode = "batch"` gathers, submits and polls. Load knobs
/// only: none of them changes an answer, so none enters a config hash.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BatchSettings {
    /// A batch is sent once no new request has come for this long (one round of a stage:
    /// every item in flight asks within milliseconds of the others).
    #[serde(default = "default_gather_ms")]
    pub gather_ms: u64,
    /// Requests per batch file (OpenAI's limit: 50,000); more go into further batches.
    #[serde(default = "default_batch_requests")]
    pub max_requests: usize,
    /// Bytes per batch file (OpenAI's limit: 200 MB); more go into further batches.
    #[serde(default = "default_batch_bytes")]
    pub max_bytes: u64,
    /// `completion_window` of each batch (OpenAI accepts `24h`).
    #[serde(default = "default_window")]
    pub completion_window: String,
    /// Seconds before the first poll of a batch; each further poll waits 1.5 times longer,
    /// up to `poll_max_s`.
    #[serde(default = "default_poll")]
    pub poll_s: f64,
    #[serde(default = "default_poll_max")]
    pub poll_max_s: f64,
    /// Further batches a request that failed in one (an error line, an expired, failed or
    /// cancelled batch) is sent in before `live_fallback` decides; none after a batch the
    /// server refused (its upload or create), which the next would meet too.
    #[serde(default = "default_resubmits")]
    pub resubmits: u32,
    /// After `resubmits`, send the request as a live call (with the role's retries);
    /// false: it fails as a transport failure.
    #[serde(default = "yes")]
    pub live_fallback: bool,
}

impl Default for BatchSettings {
    fn default() -> Self {
        Self {
            gather_ms: default_gather_ms(),
            max_requests: default_batch_requests(),
            max_bytes: default_batch_bytes(),
            completion_window: default_window(),
            poll_s: default_poll(),
            poll_max_s: default_poll_max(),
            resubmits: default_resubmits(),
            live_fallback: true,
        }
    }
}

impl BatchSettings {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    fn check(&self, loc: &str, problems: &mut Vec<Problem>) {
        let loc = format!("{loc}.batch");
        if self.max_requests == 0 || self.max_bytes == 0 {
            problems.push(Problem::new(&loc, "`max_requests` and `max_bytes` must be at least 1"));
        }
        if !(self.poll_s.is_finite() && self.poll_s > 0.0) {
            problems.push(Problem::new(&loc, "`poll_s` must be a positive number of seconds"));
        }
        if !(self.poll_max_s.is_finite() && self.poll_max_s >= self.poll_s) {
            problems.push(Problem::new(&loc, "`poll_max_s` must be a number of seconds, at least `poll_s`"));
        }
        if self.window_hours().is_none() {
            problems.push(Problem::new(&loc, "`completion_window` must be a whole number of hours such as `24h`"));
        }
    }

    /// `completion_window` in hours (`24h` → 24); `None` when it is not of that form.
    pub fn window_hours(&self) -> Option<u64> {
        let w = self.completion_window.trim().strip_suffix('h')?;
        w.parse().ok().filter(|h| *h > 0)
    }
}

fn default_gather_ms() -> u64 {
    2_000
}
fn default_batch_requests() -> usize {
    50_000
}
fn default_batch_bytes() -> u64 {
    200 * 1024 * 1024
}
fn default_window() -> String {
    "24h".into()
}
fn default_poll() -> f64 {
    10.0
}
fn default_poll_max() -> f64 {
    300.0
}
fn default_resubmits() -> u32 {
    2
}

fn yes() -> bool {
    true
}
fn default_timeout() -> f64 {
    120.0
}
fn default_concurrency() -> usize {
    4
}
pub(crate) fn default_failover_after() -> u32 {
    3
}
pub(crate) fn default_cooldown() -> f64 {
    30.0
}
fn default_retries() -> u32 {
    5
}
fn default_backoff() -> u64 {
    500
}
pub(crate) fn default_reask() -> u32 {
    2
}
fn default_threads() -> u32 {
    2
}
fn default_ctx() -> u32 {
    4096
}
fn default_startup() -> f64 {
    120.0
}

/// The setup cache (`$BENCHGEN_CACHE`, default `~/.cache/benchgen`).
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("BENCHGEN_CACHE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/benchgen"),
    }
}

pub const DEFAULT_LOCAL_MODEL: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
pub const SMALL_LOCAL_MODEL: &str = "qwen2.5-coder-0.5b-instruct.gguf";

pub fn default_server_binary() -> PathBuf {
    cache_dir().join("llm/build/bin/llama-server")
}

pub fn default_model_path() -> PathBuf {
    cache_dir().join("llm/models").join(DEFAULT_LOCAL_MODEL)
}

impl RoleSettings {
    /// The model name sent in requests and used in cache keys.
    pub fn model_name(&self, resolve: &dyn Fn(&Path) -> PathBuf) -> String {
        if let Some(m) = &self.model {
            return m.clone();
        }
        match self.provider {
            Provider::Local => self
                .local_model_path(resolve)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "local".into()),
            _ => String::new(),
        }
    }

    /// A bare file name that is not in the project (`model_path = "qwen2.5-coder-0.5b-instruct.gguf"`)
    /// names a model of the setup cache (`$BENCHGEN_CACHE/llm/models/`), so a config can pick
    /// one of the models `make setup` assembles without a machine-specific path.
    pub fn local_model_path(&self, resolve: &dyn Fn(&Path) -> PathBuf) -> PathBuf {
        match self.model_path.as_deref() {
            None => default_model_path(),
            Some(p) => {
                let r = resolve(p);
                let bare = p.components().count() == 1 && !p.is_absolute();
                if bare && !r.exists() { cache_dir().join("llm/models").join(p) } else { r }
            }
        }
    }

    /// Who answers this role's requests, for the exchange cache key and the eval panel's
    /// check: the provider and the set of base URLs (replicas of one role are one identity;
    /// without credentials, query or trailing `/`), or the local model's file name (the
    /// same file answers wherever the cache folder is). Two servers that serve different
    /// checkpoints under one model name are told apart by this, so they never share answers.
    pub fn endpoint_identity(&self, resolve: &dyn Fn(&Path) -> PathBuf) -> String {
        let who = match self.provider {
            Provider::Local => format!(
                "local:{}",
                self.local_model_path(resolve)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
            _ => {
                let mut urls: Vec<String> = self.base_urls().iter().map(|u| url_identity(u)).collect();
                urls.sort();
                urls.dedup();
                format!("remote:{}", urls.join(" "))
            }
        };
        format!("{}|{who}", self.provider.as_str())
    }

    pub fn local_server_binary(&self, resolve: &dyn Fn(&Path) -> PathBuf) -> PathBuf {
        self.server_binary.as_deref().map(resolve).unwrap_or_else(default_server_binary)
    }

    pub fn base_url(&self) -> Option<String> {
        self.base_urls().into_iter().next()
    }

    /// Every server of this role: `base_urls`, else `base_url`, else the provider's default.
    pub fn base_urls(&self) -> Vec<String> {
        match (&self.base_urls, &self.base_url) {
            (Some(urls), _) => urls.clone(),
            (None, Some(u)) => vec![u.clone()],
            (None, None) => self.provider.default_base_url().map(str::to_string).into_iter().collect(),
        }
    }

    pub fn api_key_env(&self) -> Option<String> {
        self.api_key_env.clone().or_else(|| (self.provider == Provider::Openai).then(|| "OPENAI_API_KEY".to_string()))
    }

    /// Config problems of this role (checked when the config is loaded).
    pub fn check(&self, role: &str, problems: &mut Vec<Problem>) {
        let loc = format!("llm.roles.{role}");
        if self.provider != Provider::Local && self.model.as_deref().unwrap_or("").is_empty() {
            problems.push(Problem::new(&loc, "`model` is required for this provider"));
        }
        if self.provider == Provider::Local && (self.base_url.is_some() || self.base_urls.is_some()) {
            problems.push(Problem::new(&loc, "`base_url` is chosen by benchgen for provider `local`; remove it"));
        }
        if let Some(urls) = &self.base_urls {
            if self.base_url.is_some() {
                problems.push(Problem::new(&loc, "give either `base_url` or `base_urls`, not both"));
            }
            if urls.is_empty() {
                problems.push(Problem::new(&loc, "`base_urls` needs at least one URL"));
            }
            check_urls(&loc, "base_urls", urls, problems);
        }
        if self.failover_after == 0 {
            problems.push(Problem::new(&loc, "`failover_after` must be at least 1"));
        }
        if !self.cooldown_s.is_finite() || self.cooldown_s < 0.0 {
            problems.push(Problem::new(&loc, "`cooldown_s` must be a number of seconds, 0 or more"));
        }
        if self.provider != Provider::Local && (self.server_binary.is_some() || self.model_path.is_some()) {
            problems.push(Problem::new(&loc, "`server_binary` and `model_path` apply to provider `local` only"));
        }
        if let Some(u) = &self.base_url {
            check_urls(&loc, "base_url", std::slice::from_ref(u), problems);
        }
        if let Some(name) = &self.api_key_env {
            check_key_env(&loc, name, problems);
        }
        if self.max_concurrency == 0 {
            problems.push(Problem::new(&loc, "`max_concurrency` must be at least 1"));
        }
        if self.timeout_s.is_nan() || self.timeout_s <= 0.0 {
            problems.push(Problem::new(&loc, "`timeout_s` must be positive"));
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            problems.push(Problem::new(&loc, "`temperature` must be between 0 and 2"));
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            problems.push(Problem::new(&loc, "`top_p` must be in (0, 1]"));
        }
        if self.mode == RoleMode::Batch && self.provider == Provider::Local {
            problems.push(Problem::new(
                &loc,
                "`mode = \"batch\"` needs a server with the OpenAI batch API (`/v1/files`, `/v1/batches`); \
                 provider `local` has none",
            ));
        }
        self.batch.check(&loc, problems);
    }

    /// The part of a role that changes answers (hashed into stage config hashes).
    pub fn semantic(&self, resolve: &dyn Fn(&Path) -> PathBuf) -> serde_json::Value {
        serde_json::json!({
            "provider": self.provider.as_str(),
            "model": self.model_name(resolve),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "json_schema": self.json_schema,
        })
    }
}

/// Each URL starts with http:// or https://, carries no user or password (they would end up
/// in logs; use `api_key_env`), and appears once.
pub(crate) fn check_urls(loc: &str, key: &str, urls: &[String], problems: &mut Vec<Problem>) {
    let mut seen = std::collections::BTreeSet::new();
    for u in urls {
        let Some(rest) = u.strip_prefix("http://").or_else(|| u.strip_prefix("https://")) else {
            problems.push(Problem::new(loc, format!("`{key}` must start with http:// or https://, got `{u}`")));
            continue;
        };
        if rest.split(['/', '?', '#']).next().unwrap_or("").contains('@') {
            problems.push(Problem::new(
                loc,
                format!("`{key}` must not carry a user or password; put the key in the variable `api_key_env` names"),
            ));
            continue;
        }
        if !seen.insert(u.trim_end_matches('/')) {
            problems.push(Problem::new(loc, format!("`{key}` lists `{u}` twice")));
        }
    }
}

/// `api_key_env` is a variable name, never the key itself.
pub(crate) fn check_key_env(loc: &str, name: &str, problems: &mut Vec<Problem>) {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        problems.push(Problem::new(
            loc,
            "`api_key_env` is the NAME of an environment variable (letters, digits, `_`), not the key",
        ));
    }
}

/// The API key in the variable `name`, checked for use in an `Authorization` header. The
/// error names the variable, never its content.
pub(crate) fn read_api_key(name: &str) -> Result<String, String> {
    match std::env::var(name) {
        Ok(k) if k.bytes().all(|b| (0x21..0x7f).contains(&b)) && !k.is_empty() => Ok(k),
        Ok(_) => Err(format!("the API key in `${name}` is empty or has characters not allowed in a header")),
        Err(_) => Err(format!("the API key variable `${name}` is not set")),
    }
}

impl LlmSettings {
    pub fn check(&self, problems: &mut Vec<Problem>) {
        for (name, role) in &self.roles {
            role.check(name, problems);
        }
    }
}

/// A base URL as an identity: scheme, host, port and path, lower-case host, no user info,
/// query or trailing `/` (so a key in the URL never reaches the ledger).
fn url_identity(u: &str) -> String {
    match reqwest::Url::parse(u) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.as_str().trim_end_matches('/').to_string()
        }
        Err(_) => u.trim_end_matches('/').to_string(),
    }
}
