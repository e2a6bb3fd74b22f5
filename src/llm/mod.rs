//! LLM access: the one way every stage talks to a model.
//!
//! * One client for any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang,
//!   Ollama, llama.cpp), configured per role in `[llm.roles.<role>]` (see [`config`]).
//! * Load behaviour per endpoint: a concurrency bound, an rpm/tpm limiter, retries of 429,
//!   5xx, connection errors, malformed bodies and timeouts with jittered exponential back-off
//!   that honours `Retry-After`, a per-request timeout, and Ctrl-C cancellation ([`transport`]).
//! * Several servers per role (`base_urls`, e.g. vLLM/SGLang replicas): least outstanding
//!   requests, and a server that fails repeatedly is taken out for a cool-down ([`pool`]).
//!   The cache key never depends on which server answered.
//! * Embeddings from an OpenAI-compatible `/v1/embeddings` server ([`embeddings`]), used by
//!   `[embed] provider = "openai"`.
//! * Typed structured output ([`LlmClient::typed`]): a schemars schema sent as
//!   `response_format: json_schema` (when the role allows it) and always stated in the prompt;
//!   the answer is extracted (`<think>` dropped, fenced or first balanced JSON), validated with
//!   serde and jsonschema, and re-asked with the validation error up to `reask` times.
//! * The ledger as cache ([`record`]): every exchange is an `llm.exchange` event; the
//!   `llm_cache` table maps the sha256 of the canonical request body to the event that
//!   answered it. Modes ([`LlmMode`]): `cached` (default) serves repeats from the ledger and
//!   goes live on a miss; `live` always calls the endpoint and records (the newest answer
//!   becomes the cached one); `replay` never touches the network and fails on a miss.
//! * `provider = "local"` starts llama.cpp's `llama-server` on a free loopback port on first
//!   use and stops it when the client is dropped, on error and on Ctrl-C ([`local`]).
//! * A role with `mode = "batch"` sends its requests as OpenAI batch jobs instead of live
//!   calls ([`batch_api`]); its answers are recorded exactly as live ones.

// LlmError carries stage, item, role and the failure's details by value so callers can
// match on them; it is returned once per item, so its size does not matter.
#![allow(clippy::result_large_err)]

pub mod answer;
pub mod batch;
pub mod batch_api;
pub mod config;
pub mod embeddings;
pub mod extract;
pub mod local;
pub mod ping;
pub mod pool;
pub mod prompts;
pub mod record;
pub mod redact;
pub mod stats;
pub mod stream;
pub mod transport;
pub mod turns;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use answer::Answer;
pub use config::{BatchSettings, LlmSettings, Prices, Provider, RoleMode, RoleSettings};

use crate::ledger::kind;
use crate::settings::Settings;
use batch_api::Outcome;
use record::Recorder;
use transport::{Endpoint, SendError, Sent};

/// Event kind of a final failure of a call (transport exhausted or invalid answer).
pub const LLM_FAILURE: &str = "llm.failure";

// Defined beside `Settings`, which carries it (settings.rs imports no stage code).
pub use crate::settings::LlmMode;

/// A prompt: a template under the prompts folder (`pipeline/prompts/<template>.md`) and
/// its variables. Rendered with minijinja, undefined variables are errors. A line
/// `--- user ---` splits the rendered text into a system message (above) and the user
/// message (below); without it the whole text is the user message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Prompt {
    pub template: String,
    pub vars: Value,
}

impl Prompt {
    pub fn new(template: &str, vars: Value) -> Self {
        Self { template: template.to_string(), vars }
    }
}

/// Sampling parameters of one tool-calling turn that replace the role's where set
/// ([`LlmClient::chat_seeded`]); the request body carries them, the exchange's `params`
/// stay the role's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnParams {
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
}

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Reply<T> {
    pub value: T,
    /// The ledger event of the exchange that produced the answer (link it as a parent).
    pub event_id: i64,
    /// Served from the ledger without network.
    pub cached: bool,
    /// The request hash of that exchange: a stable name for it across reruns (event ids
    /// depend on the order concurrent calls finish, and a cache hit is a new event).
    /// Artifacts name exchanges by it; [`crate::ledger::Ledger::exchange_event`] resolves it to an event.
    pub exchange: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ChatMessage {
    System(String),
    User(String),
    Assistant { content: Option<String>, tool_calls: Vec<ToolCall> },
    Tool { call_id: String, content: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Parsed arguments; when the model's argument string is not JSON, the raw string.
    pub arguments: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTurn {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
}

/// An item-level failure of an LLM call. Every variant names the stage and item; failures
/// after a request was attempted are recorded in the ledger (`event_id`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    #[error(
        "LLM call failed in stage `{stage}`, item `{item}` (role `{role}`) after {attempts} attempt(s); last status: {last_status}: {message}"
    )]
    Transport {
        stage: String,
        item: String,
        role: String,
        attempts: u32,
        last_status: String,
        message: String,
        event_id: Option<i64>,
    },
    #[error(
        "LLM answer in stage `{stage}`, item `{item}` (role `{role}`) is still invalid after {attempts} attempt(s): {error}"
    )]
    Invalid {
        stage: String,
        item: String,
        role: String,
        attempts: u32,
        error: String,
        raw: String,
        event_id: Option<i64>,
    },
    #[error(
        "replay mode: no recorded answer for request {hash} (stage `{stage}`, item `{item}`, role `{role}`); run once with `--llm-mode cached` to record it"
    )]
    ReplayMiss { stage: String, item: String, role: String, hash: String },
    #[error("LLM call cancelled (Ctrl-C) in stage `{stage}`, item `{item}`")]
    Cancelled { stage: String, item: String },
    #[error("LLM setup failed in stage `{stage}`, item `{item}` (role `{role}`): {message}")]
    Setup { stage: String, item: String, role: String, message: String },
}

impl LlmError {
    /// The ledger event recording this failure, when one was recorded.
    pub fn event_id(&self) -> Option<i64> {
        match self {
            LlmError::Transport { event_id, .. } | LlmError::Invalid { event_id, .. } => *event_id,
            _ => None,
        }
    }

    /// Failures that concern one item only (an invalid answer); the others (endpoint down,
    /// replay miss, Ctrl-C, setup) will hit every item and should usually stop the stage.
    pub fn is_item_level(&self) -> bool {
        matches!(self, LlmError::Invalid { .. })
    }

    pub fn is_cancelled(&self) -> bool {
        matches!(self, LlmError::Cancelled { .. })
    }
}

/// Path of a prompt template's override file (it may not exist: then the built-in serves).
pub fn prompt_path(settings: &Settings, template: &str) -> PathBuf {
    prompts::override_path(&settings.resolve(&settings.section::<crate::llm::LlmSettings>().prompts_dir), template)
}

/// A prompt template as a stage will use it: the project's override or the built-in.
pub fn prompt_template(settings: &Settings, template: &str) -> Result<prompts::Template, String> {
    prompts::resolve(&settings.resolve(&settings.section::<crate::llm::LlmSettings>().prompts_dir), template)
}

/// The runner's hashes of roles and prompt templates, handed to it at load.
pub const NAME_HASHES: crate::settings::NameHashes =
    crate::settings::NameHashes { role: role_hash, prompt: prompt_hash };

/// How manifests name a template (its override file, or `builtin:NAME`) and its text's hash.
fn prompt_hash(settings: &Settings, template: &str) -> Result<(String, String), String> {
    let t = prompt_template(settings, template)?;
    Ok((t.shown(|p| settings.display_path(p)), t.hash()))
}

/// Hash of the answer-changing settings of a role (for stage config hashes).
pub fn role_hash(settings: &Settings, role: &str) -> anyhow::Result<String> {
    let r = settings
        .section::<crate::llm::LlmSettings>()
        .roles
        .get(role)
        .ok_or_else(|| anyhow::anyhow!("no `[llm.roles.{role}]` is configured"))?;
    crate::settings::section_hash(&r.semantic(&|p: &Path| settings.resolve(p)))
}

/// Re-asks a typed call of `role` may make (its `reask`; the default for a role not
/// configured, which `check` reports on its own).
pub fn role_reask(settings: &Settings, role: &str) -> u32 {
    settings.section::<LlmSettings>().roles.get(role).map_or_else(config::default_reask, |r| r.reask)
}

/// One configured role, resolved.
pub(crate) struct Role {
    name: String,
    settings: RoleSettings,
    model: String,
    /// [`RoleSettings::endpoint_identity`], part of the exchange cache key.
    identity: String,
    endpoint: Arc<Endpoint>,
    /// Whether the role's first live request of this client has been sent; held locked
    /// while it is out (see [`FirstAlone`]).
    first_sent: tokio::sync::Mutex<bool>,
    /// The role's batch jobs, when it runs in `mode = "batch"`.
    batch: Option<Arc<batch_api::BatchJobs>>,
}

/// The role's first live request of a stage goes alone; the others wait for its answer and
/// then go together. Servers reuse a prompt prefix they have processed (llama-server's
/// slots, vLLM's and SGLang's prefix caches, OpenAI's prompt caching), but requests sent
/// together each process the shared fixed part anew: on the demo's two cores two agent
/// loops paid for their 1,600-token tool list twice, 18 s each, at the same time.
struct FirstAlone;

impl FirstAlone {
    /// Wait for the role's first request, or become it (the guard is held until it is back).
    async fn enter(r: &Role) -> Option<tokio::sync::MutexGuard<'_, bool>> {
        let mut sent = r.first_sent.lock().await;
        if *sent {
            return None;
        }
        *sent = true;
        Some(sent)
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    calls: AtomicU64,
    cache_hits: AtomicU64,
    retries: AtomicU64,
    failures: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
}

struct Inner {
    stage: String,
    mode: LlmMode,
    roles: BTreeMap<String, Role>,
    recorder: Arc<Recorder>,
    prompts_dir: PathBuf,
    cancel: CancellationToken,
    counters: Counters,
    /// Held while an answer a batch brought is recorded (see [`LlmClient::record_sent`]).
    batch_answers: std::sync::Mutex<()>,
}

/// The LLM client of one stage run. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct LlmClient {
    inner: Arc<Inner>,
    /// Extra counters of one work item (see [`LlmClient::tallied`]), besides the client's.
    tally: Option<Arc<Counters>>,
}

/// The counts of LLM work that a rerun reproduces, so manifests may carry them:
/// exchanges (live or served from the ledger), final failures, and tokens (those of
/// answers served from the ledger included). Live calls, cache hits and retries depend
/// on the process and stay out of artifacts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmCounts {
    pub exchanges: u64,
    pub failures: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl LlmCounts {
    pub fn add(&mut self, other: &LlmCounts) {
        self.exchanges += other.exchanges;
        self.failures += other.failures;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }

    /// The manifest keys: `llm_exchanges`, `llm_failures`, `llm_prompt_tokens`,
    /// `llm_completion_tokens`.
    pub fn to_map(&self) -> BTreeMap<String, Value> {
        BTreeMap::from([
            ("llm_exchanges".to_string(), Value::from(self.exchanges)),
            ("llm_failures".to_string(), Value::from(self.failures)),
            ("llm_prompt_tokens".to_string(), Value::from(self.prompt_tokens)),
            ("llm_completion_tokens".to_string(), Value::from(self.completion_tokens)),
        ])
    }
}

impl Counters {
    fn reproducible(&self) -> LlmCounts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LlmCounts {
            exchanges: g(&self.calls) + g(&self.cache_hits),
            failures: g(&self.failures),
            prompt_tokens: g(&self.prompt_tokens),
            completion_tokens: g(&self.completion_tokens),
        }
    }
}

/// The counts of the calls made through one [`LlmClient::tallied`] handle.
#[derive(Clone)]
pub struct Tally(Arc<Counters>);

impl Tally {
    pub fn counts(&self) -> LlmCounts {
        self.0.reproducible()
    }
}

/// The result of one request/response exchange (live or from the ledger).
struct Exchange {
    response: Value,
    event_id: i64,
    cached: bool,
    /// Request hash (the cache key).
    hash: String,
}

impl Exchange {
    fn message(&self) -> &Value {
        &self.response["choices"][0]["message"]
    }
    fn content(&self) -> Option<String> {
        self.message()["content"].as_str().map(str::to_string)
    }
}

impl LlmClient {
    /// Built once per stage run: roles from `[llm.roles.<role>]`, records into ledger run `run_id`.
    pub async fn from_settings(settings: &Settings, stage: &str, run_id: i64) -> anyhow::Result<LlmClient> {
        Self::with_mode(settings, stage, run_id, settings.llm_mode)
    }

    /// Like [`LlmClient::from_settings`] with an explicit mode (e.g. `llm ping` is always live).
    pub fn with_mode(settings: &Settings, stage: &str, run_id: i64, mode: LlmMode) -> anyhow::Result<LlmClient> {
        Self::build(settings, stage, run_id, mode, true)
    }

    /// [`LlmClient::with_mode`] with every role called live, `mode = "batch"` or not (`llm
    /// ping` checks the live path and must not wait for a batch).
    pub fn direct(settings: &Settings, stage: &str, run_id: i64, mode: LlmMode) -> anyhow::Result<LlmClient> {
        Self::build(settings, stage, run_id, mode, false)
    }

    fn build(settings: &Settings, stage: &str, run_id: i64, mode: LlmMode, batch: bool) -> anyhow::Result<LlmClient> {
        let resolve = |p: &Path| settings.resolve(p);
        let mut endpoints: BTreeMap<String, Arc<Endpoint>> = BTreeMap::new();
        let mut roles = BTreeMap::new();
        // Roles that name the same server share one endpoint (one concurrency bound and one
        // limiter); the strictest setting among them applies.
        let mut groups: BTreeMap<String, Vec<(&String, &RoleSettings)>> = BTreeMap::new();
        for (name, r) in &settings.section::<crate::llm::LlmSettings>().roles {
            groups.entry(transport::endpoint_key(r, &resolve)).or_default().push((name, r));
        }
        for (key, members) in &groups {
            let log_dir = settings.artifacts.join("llm").join("logs");
            let ep = Endpoint::new(key, &members.iter().map(|(_, r)| *r).collect::<Vec<_>>(), &resolve, &log_dir)?;
            endpoints.insert(key.clone(), Arc::new(ep));
        }
        let recorder = Arc::new(Recorder::open(&settings.artifacts, run_id, stage)?);
        let cancel = transport::interrupt_token().child_token();
        for (key, members) in groups {
            for (name, r) in members {
                // `--batch` puts every role with a server batch API into batch mode.
                let batched = r.mode == RoleMode::Batch || (settings.llm_batch && r.provider != Provider::Local);
                let jobs = (batch && batched)
                    .then(|| batch_api::BatchJobs::new(name, stage, r, recorder.clone(), cancel.clone()))
                    .transpose()?;
                roles.insert(
                    name.clone(),
                    Role {
                        name: name.clone(),
                        settings: r.clone(),
                        model: r.model_name(&resolve),
                        identity: r.endpoint_identity(&resolve),
                        endpoint: endpoints[&key].clone(),
                        first_sent: tokio::sync::Mutex::new(false),
                        batch: jobs,
                    },
                );
            }
        }
        Ok(LlmClient {
            inner: Arc::new(Inner {
                stage: stage.to_string(),
                mode,
                roles,
                recorder,
                prompts_dir: settings.resolve(&settings.section::<crate::llm::LlmSettings>().prompts_dir),
                cancel,
                counters: Counters::default(),
                batch_answers: std::sync::Mutex::new(()),
            }),
            tally: None,
        })
    }

    /// Whether one of `roles` (any role, for `None`) sends its requests as batch jobs (the
    /// stage's fan-out then lets every item in flight, so that a round of the stage is one
    /// batch).
    pub fn batches(&self, roles: Option<&[String]>) -> bool {
        let of = |name: &String| roles.is_none_or(|rs| rs.contains(name));
        self.inner.roles.iter().any(|(name, r)| r.batch.is_some() && of(name))
    }

    /// A handle on the same client whose calls are also counted apart, in the returned
    /// [`Tally`] (so a stage can store the counts of each work item with its checkpoint).
    pub fn tallied(&self) -> (LlmClient, Tally) {
        let t = Arc::new(Counters::default());
        (LlmClient { inner: self.inner.clone(), tally: Some(t.clone()) }, Tally(t))
    }

    /// Add `n` to one counter of the client and of the handle's tally.
    fn bump(&self, which: fn(&Counters) -> &AtomicU64, n: u64) {
        which(&self.inner.counters).fetch_add(n, Ordering::Relaxed);
        if let Some(t) = &self.tally {
            which(t).fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn mode(&self) -> LlmMode {
        self.inner.mode
    }

    /// Stop issuing requests from this client (Ctrl-C does this for every client).
    pub fn cancel(&self) {
        self.inner.cancel.cancel();
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Counts of this client's calls: `llm_calls` (live exchanges), `llm_cache_hits`,
    /// `llm_retries`, `llm_failures`, `llm_prompt_tokens`, `llm_completion_tokens` (tokens
    /// of answers served from the ledger included).
    pub fn counts(&self) -> BTreeMap<String, Value> {
        let c = &self.inner.counters;
        let g = |a: &AtomicU64| Value::from(a.load(Ordering::Relaxed));
        BTreeMap::from([
            ("llm_calls".to_string(), g(&c.calls)),
            ("llm_cache_hits".to_string(), g(&c.cache_hits)),
            ("llm_retries".to_string(), g(&c.retries)),
            ("llm_failures".to_string(), g(&c.failures)),
            ("llm_prompt_tokens".to_string(), g(&c.prompt_tokens)),
            ("llm_completion_tokens".to_string(), g(&c.completion_tokens)),
        ])
    }

    /// This client's reproducible counts in manifest form (see [`LlmCounts::to_map`]).
    /// They cover the calls of this process only; a stage that resumes from checkpoints
    /// counts per item instead ([`batch`]), so that a resumed run reports what an
    /// uninterrupted one does.
    pub fn manifest_counts(&self) -> BTreeMap<String, Value> {
        self.inner.counters.reproducible().to_map()
    }

    /// One summary line with the run-dependent split (live calls, cache hits, retries),
    /// which stays out of artifacts (it goes to the printed summary and `llm stats`).
    pub fn summary(&self) -> String {
        let c = self.counts();
        let n = |k: &str| c[k].as_u64().unwrap_or(0);
        format!(
            "LLM: {} exchanges ({} live, {} from the ledger), {} retries, {} failures",
            n("llm_calls") + n("llm_cache_hits"),
            n("llm_calls"),
            n("llm_cache_hits"),
            n("llm_retries"),
            n("llm_failures")
        )
    }

    fn role(&self, role: &str, item: &str) -> Result<&Role, LlmError> {
        self.inner.roles.get(role).ok_or_else(|| LlmError::Setup {
            stage: self.inner.stage.clone(),
            item: item.to_string(),
            role: role.to_string(),
            message: format!("no `[llm.roles.{role}]` is configured"),
        })
    }

    /// Render a prompt into chat messages; returns them with (template name, template hash).
    fn render(&self, role: &str, prompt: &Prompt, item: &str) -> Result<(Vec<Value>, String), LlmError> {
        let (text, hash) = self.render_text(role, prompt, item)?;
        Ok((split_messages(&text), hash))
    }

    /// The prompt's rendered text (before it is split into messages) and its template's hash.
    fn render_text(&self, role: &str, prompt: &Prompt, item: &str) -> Result<(String, String), LlmError> {
        let err = |message: String| LlmError::Setup {
            stage: self.inner.stage.clone(),
            item: item.to_string(),
            role: role.to_string(),
            message,
        };
        let template = prompts::resolve(&self.inner.prompts_dir, &prompt.template).map_err(err)?;
        let text = render_template(&prompt.template, &template.text, &prompt.vars).map_err(err)?;
        Ok((text, template.hash()))
    }

    /// Typed structured output (response_format json_schema when supported; else extract);
    /// re-asks on invalid output; Err(LlmError) is an item-level failure, recorded in the ledger.
    pub async fn typed<T: serde::de::DeserializeOwned + schemars::JsonSchema + 'static>(
        &self,
        role: &str,
        prompt: &Prompt,
        item: &str,
    ) -> Result<Reply<T>, LlmError> {
        self.typed_checked(role, prompt, item, |_: &T| Ok(())).await
    }

    /// [`Self::typed`] with a check beyond the schema (e.g. "every candidate answered
    /// once"): an answer it refuses is re-asked with its message, like a schema error.
    pub async fn typed_checked<T: serde::de::DeserializeOwned + schemars::JsonSchema + 'static>(
        &self,
        role: &str,
        prompt: &Prompt,
        item: &str,
        check: impl Fn(&T) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<Reply<T>, LlmError> {
        self.ask(role, prompt, item, &Answer::<T>::of().check(check)).await
    }

    /// [`Self::typed_checked`] with a schema built at run time (`name`, `schema`) instead of
    /// `T`'s, for answers whose shape depends on the config (e.g. one required property per
    /// rubric dimension, so a grammar-constrained server cannot leave one out). `T` must
    /// deserialise from what the schema allows; its strings are bounded as in [`schema_of`].
    pub async fn typed_schema<T: serde::de::DeserializeOwned + 'static>(
        &self,
        role: &str,
        prompt: &Prompt,
        item: &str,
        name: &str,
        schema: Value,
        check: impl Fn(&T) -> Result<(), String> + Send + Sync + 'static,
    ) -> Result<Reply<T>, LlmError> {
        self.ask(role, prompt, item, &Answer::new(name, schema).check(check)).await
    }

    /// A typed answer as `answer` states it (schema and check, see [`Answer`]): the one
    /// place that sends a schema, validates the answer and re-asks with the reason.
    pub async fn ask<T: serde::de::DeserializeOwned>(
        &self,
        role: &str,
        prompt: &Prompt,
        item: &str,
        answer: &Answer<T>,
    ) -> Result<Reply<T>, LlmError> {
        let r = self.role(role, item)?;
        let (text, hash) = self.render_text(role, prompt, item)?;
        let validator = validator_of(answer).map_err(|message| LlmError::Setup {
            stage: self.inner.stage.clone(),
            item: item.to_string(),
            role: role.to_string(),
            message,
        })?;
        // The schema goes out borrowed from `answer`, not copied into the call's fields: a
        // batch role's calls, all in flight at once, each held that copy while they waited.
        let format = r.settings.json_schema.then_some((answer.name.as_str(), &*answer.schema));
        let mut extra = serde_json::Map::new();
        if let Some(seed) = answer.seed {
            extra.insert("seed".into(), json!(seed));
        }
        if let Some(t) = answer.temperature {
            extra.insert("temperature".into(), json!(t));
        }
        let tmpl = Some((prompt.template.as_str(), hash.as_str()));
        let mut parent = None;
        let mut attempts = 0;
        let (mut last_error, mut raw) = (String::new(), String::new());
        // What the model answered and was told after each answer the checks refused.
        let mut again: Vec<Value> = Vec::new();
        for _ in 0..=r.settings.reask {
            attempts += 1;
            // The messages are made from the rendered text when the request needs them, not
            // held parsed: a batch role's calls all wait at once, and each one's parsed
            // messages with the schema's instruction took about 0.8 KB while it waited.
            let ex = {
                let make = || {
                    let mut messages = split_messages(&text);
                    instruct(&mut messages, answer);
                    messages.extend(again.iter().cloned());
                    messages
                };
                let req = Request { messages: Messages::Made(&make), format, extra: &extra, until: None };
                self.exchange(r, req, item, tmpl, parent).await?
            };
            let content = ex.content().unwrap_or_default();
            match validate::<T>(&content, &validator).and_then(|v| answer.run_check(&v).map(|()| v)) {
                Ok(value) => return Ok(Reply { value, event_id: ex.event_id, cached: ex.cached, exchange: ex.hash }),
                Err(e) => {
                    last_error = e;
                    raw = content.clone();
                    parent = Some(ex.event_id);
                    again.push(json!({"role": "assistant", "content": content}));
                    again.push(json!({"role": "user", "content": format!(
                        "That answer is not valid: {last_error}. Reply again with only the corrected JSON value."
                    )}));
                }
            }
        }
        let event_id = self.record_failure(
            r,
            item,
            parent,
            json!({"kind": "invalid", "error": last_error, "raw": raw, "attempts": attempts}),
        );
        Err(LlmError::Invalid {
            stage: self.inner.stage.clone(),
            item: item.to_string(),
            role: role.to_string(),
            attempts,
            error: last_error,
            raw,
            event_id,
        })
    }

    /// Plain text answer (`<think>…</think>` blocks removed).
    pub async fn text(&self, role: &str, prompt: &Prompt, item: &str) -> Result<Reply<String>, LlmError> {
        let r = self.role(role, item)?;
        let (messages, hash) = self.render(role, prompt, item)?;
        let none = serde_json::Map::new();
        let req = Request { messages: Messages::Given(&messages), format: None, extra: &none, until: None };
        let ex = self.exchange(r, req, item, Some((&prompt.template, &hash)), None).await?;
        let text = extract::strip_think(&ex.content().unwrap_or_default()).trim().to_string();
        Ok(Reply { value: text, event_id: ex.event_id, cached: ex.cached, exchange: ex.hash })
    }

    /// One tool-calling turn (for the agent executor).
    pub async fn chat(
        &self,
        role: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        item: &str,
    ) -> Result<Reply<ChatTurn>, LlmError> {
        self.chat_seeded(role, messages, tools, item, TurnParams::default()).await
    }

    /// [`Self::chat`] with the request's sampling parameters set by `turn` instead of the
    /// role's: the `seed` (a repeated run of the same conversation asks again instead of
    /// meeting its first answer in the ledger cache: the seed is part of the request hash)
    /// and `max_tokens` (an eval panel's turn limit).
    pub async fn chat_seeded(
        &self,
        role: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        item: &str,
        turn: TurnParams,
    ) -> Result<Reply<ChatTurn>, LlmError> {
        let r = self.role(role, item)?;
        let wire: Vec<Value> = messages.iter().map(|m| openai_message(m, CallIndex::Omit)).collect();
        let mut extra = serde_json::Map::new();
        if let Some(seed) = turn.seed {
            extra.insert("seed".into(), json!(seed));
        }
        if let Some(max) = turn.max_tokens {
            extra.insert("max_tokens".into(), json!(max));
        }
        let stops = !tools.is_empty() && r.settings.provider == Provider::Local;
        if stops {
            extra.insert("stop".into(), json!(TEXT_CALL_STOPS));
        }
        if !tools.is_empty() {
            extra.insert(
                "tools".into(),
                Value::Array(
                    tools
                        .iter()
                        .map(|t| {
                            json!({"type": "function", "function": {
                                "name": t.name, "description": t.description, "parameters": t.parameters}})
                        })
                        .collect(),
                ),
            );
        }
        // On the local server, the turn streams and ends once a call written as text is whole
        // (`stream`): what a small model writes after it is never read.
        let until = stops.then_some(extract::text_call_complete as fn(&str) -> bool);
        let req = Request { messages: Messages::Given(&wire), format: None, extra: &extra, until };
        let ex = self.exchange(r, req, item, None, None).await?;
        let msg = ex.message();
        let tool_calls = msg["tool_calls"]
            .as_array()
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| {
                        let args = &c["function"]["arguments"];
                        let arguments = match args {
                            Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
                            Value::Null => json!({}),
                            other => other.clone(),
                        };
                        ToolCall {
                            id: c["id"].as_str().unwrap_or_default().to_string(),
                            name: c["function"]["name"].as_str().unwrap_or_default().to_string(),
                            arguments,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let finish_reason = ex.response["choices"][0]["finish_reason"].as_str().map(str::to_string);
        let stopped = stops && finish_reason.as_deref() == Some("stop");
        let content = msg["content"].as_str().map(|s| match stopped {
            true => closed_at_stop(s),
            false => s.to_string(),
        });
        let turn = ChatTurn {
            content: content.map(|s| extract::strip_think(&s).trim().to_string()),
            tool_calls,
            finish_reason,
        };
        Ok(Reply { value: turn, event_id: ex.event_id, cached: ex.cached, exchange: ex.hash })
    }

    /// One request: from the ledger when allowed and present, else over the network; the
    /// exchange is recorded either way.
    async fn exchange(
        &self,
        r: &Role,
        req: Request<'_>,
        item: &str,
        template: Option<(&str, &str)>,
        parent: Option<i64>,
    ) -> Result<Exchange, LlmError> {
        let inner = &self.inner;
        let mut body = request_body(r, req);
        let body_text = serde_json::to_string(&body).unwrap_or_default();
        // `hash` names the request (artifacts and lineage refer to exchanges by it, so they
        // do not depend on where the server runs); the cache key also holds who answers
        // (provider and endpoint identity): two roles that send the same body to different
        // servers never share an answer.
        let (hash, key) = request_hashes(body_text.as_bytes(), &r.identity);
        let ledger_err = |e: anyhow::Error| LlmError::Setup {
            stage: inner.stage.clone(),
            item: item.to_string(),
            role: r.name.clone(),
            message: format!("ledger: {e:#}"),
        };
        let mut base = exchange_base(r, item, template, &hash);
        if inner.mode != LlmMode::Live {
            if let Some((source, payload)) = self.cached(r, &key, &hash).map_err(ledger_err)? {
                let id = self.record_hit(base, (item, parent), source, &payload).map_err(ledger_err)?;
                return Ok(Exchange { response: payload["response"].clone(), event_id: id, cached: true, hash });
            }
            if inner.mode == LlmMode::Replay {
                // An answer a batch brought is in the ledger too, though no exchange records
                // it yet (`llm batch-import`, or a batch run stopped after its download):
                // replay records it as the run that waited for it would have, with no request.
                let stored = batch_api::stored_answer(&inner.recorder, &key).map_err(ledger_err)?;
                if let Some((batch, response)) = stored {
                    let sent =
                        Sent { response, attempts: 1, latency_ms: 0, replica: 0, batch: Some(batch), started_at: None };
                    let (event_id, cached) =
                        self.record_sent(r, base, body, &sent, &key, (item, parent)).map_err(ledger_err)?;
                    return Ok(Exchange { response: sent.response, event_id, cached, hash });
                }
                return Err(LlmError::ReplayMiss {
                    stage: inner.stage.clone(),
                    item: item.to_string(),
                    role: r.name.clone(),
                    hash,
                });
            }
        }
        let est_tokens = estimated_tokens(&body_text, &body, r.settings.max_tokens);
        let sent = match &r.batch {
            Some(jobs) => {
                // The request waits for its batch as text, its body and fields dropped meanwhile:
                // a stage lets every item in flight at once, 100,000 of them held 2.8 GiB.
                // The sampling parameters it records: the role's, held once by the batch
                // jobs, unless the request set its own (as a live exchange records them).
                let params = sent_params(&r.settings, &body);
                let own = (params != role_params(&r.settings)).then(|| params.to_string());
                let draft = batch_api::Draft::new(&base, body_text, (item, parent)).with_params(own);
                drop((body, base));
                let outcome = jobs.ask(&key, &hash, draft).await;
                let outcome = match outcome {
                    Outcome::Recorded(rec) => return Ok(self.took(rec, hash)),
                    other => other,
                };
                // An answer found in the ledger, or a live fall-back: the request and the
                // exchange's fields are made again, as they were.
                (body, base) = (request_body(r, req), exchange_base(r, item, template, &hash));
                Box::pin(self.after_batch(r, &body, outcome, est_tokens)).await
            }
            // Boxed, here and above: a live call's future (retries, timers, the HTTP client's
            // futures) is large, and inline, every call of a batch role held room for it while
            // it waited for its batch.
            None => Box::pin(self.send(r, &body, &key, est_tokens, req.until)).await,
        };
        match sent {
            Ok(sent) => {
                let (event_id, cached) =
                    self.record_sent(r, base, body, &sent, &key, (item, parent)).map_err(ledger_err)?;
                Ok(Exchange { response: sent.response, event_id, cached, hash })
            }
            Err(e) => Err(self.send_failed(r, item, parent, hash, e)),
        }
    }

    /// Record a request answered by an exchange already in the ledger (`source`, whose
    /// `payload` gives the tokens): a cache hit, with no request of its own (`at`: the item
    /// and the parent event). The source's `batch` is kept, so the dataset card counts the
    /// request as a batch job's whichever of the two exchanges a sample's lineage reaches.
    fn record_hit(&self, p: Value, at: (&str, Option<i64>), source: i64, payload: &Value) -> anyhow::Result<i64> {
        let (item, parent) = at;
        let p = hit_payload(p, source, payload);
        let mut parents = vec![source];
        parents.extend(parent);
        let id = self.inner.recorder.record(kind::LLM_EXCHANGE, item, p, &parents)?;
        self.bump(|c| &c.cache_hits, 1);
        self.bump(|c| &c.prompt_tokens, payload["usage"]["prompt_tokens"].as_u64().unwrap_or(0));
        self.bump(|c| &c.completion_tokens, payload["usage"]["completion_tokens"].as_u64().unwrap_or(0));
        Ok(id)
    }

    /// Record the answer `send` brought (`p`: the exchange's fields so far, `at`: the item
    /// and the parent event): the event id, and whether it was recorded as a cache hit.
    /// Identical requests of one batch round are sent once and share the batch's answer:
    /// the first of their calls to get here records it as paid, the others as cache hits of
    /// that exchange, as a live run records a repeated request, so `llm stats` and costs
    /// count it once.
    fn record_sent(
        &self,
        r: &Role,
        p: Value,
        body: Value,
        sent: &Sent,
        key: &str,
        at: (&str, Option<i64>),
    ) -> anyhow::Result<(i64, bool)> {
        let inner = &self.inner;
        let usage = &sent.response["usage"];
        let (pt, ct) = (usage["prompt_tokens"].as_u64().unwrap_or(0), usage["completion_tokens"].as_u64().unwrap_or(0));
        let usage = json!({"prompt_tokens": pt, "completion_tokens": ct});
        // Held from the look-up to the mark, so that exactly one of the sharing calls pays.
        let _one = sent.batch.is_some().then(|| inner.batch_answers.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(batch) = &sent.batch
            && let Some(source) = batch_api::recorded_event(&inner.recorder, key, batch)?
        {
            let id = self.record_hit(p, at, source, &json!({"usage": usage, "batch": batch}))?;
            return Ok((id, true));
        }
        self.bump(|c| &c.calls, 1);
        self.bump(|c| &c.retries, u64::from(sent.attempts - 1));
        self.bump(|c| &c.prompt_tokens, pt);
        self.bump(|c| &c.completion_tokens, ct);
        let params = sent_params(&r.settings, &body);
        let mut p = sent_payload(p, params, body, sent, usage);
        if r.endpoint.replica_count() > 1 && sent.batch.is_none() {
            // Which of `base_urls` answered (0-based); not part of the cache key.
            p["replica"] = json!(sent.replica);
        }
        let parents: Vec<i64> = at.1.into_iter().collect();
        let id = inner.recorder.record(kind::LLM_EXCHANGE, at.0, p, &parents)?;
        inner.recorder.cache_put(key, id)?;
        if sent.batch.is_some() {
            batch_api::mark_recorded(&inner.recorder, key, id);
        }
        Ok((id, false))
    }

    /// Send one request of a role that is not in batch mode.
    async fn send(
        &self,
        r: &Role,
        body: &Value,
        key: &str,
        est_tokens: u64,
        until: Option<fn(&str) -> bool>,
    ) -> Result<Sent, SendError> {
        // An answer a batch brought while the role was in batch mode is not asked again.
        let stored = batch_api::stored_answer(&self.inner.recorder, key)
            .map_err(|e| SendError::Setup(format!("ledger: {e:#}")))?;
        if let Some((batch, response)) = stored {
            return Ok(Sent { response, attempts: 1, latency_ms: 0, replica: 0, batch: Some(batch), started_at: None });
        }
        // Batch jobs gather a round of requests; only live calls send the first alone.
        let _first = FirstAlone::enter(r).await;
        r.endpoint.send(&r.settings, body, est_tokens, until, &self.inner.cancel).await
    }

    /// The exchange the ingest of its batch recorded for a call of a batch role
    /// ([`batch_api::Recorded`]), counted as [`Self::record_sent`] counts one it records.
    fn took(&self, rec: batch_api::Recorded, hash: String) -> Exchange {
        let (pt, ct) = rec.tokens;
        if rec.cached {
            self.bump(|c| &c.cache_hits, 1);
        } else {
            self.bump(|c| &c.calls, 1);
            self.bump(|c| &c.retries, u64::from(rec.tries.saturating_sub(1)));
        }
        self.bump(|c| &c.prompt_tokens, pt);
        self.bump(|c| &c.completion_tokens, ct);
        // The text the ingest wrote from a chat completion it parsed: it parses again.
        let response = serde_json::from_str(&rec.response).unwrap_or(Value::Null);
        Exchange { response, event_id: rec.event_id, cached: rec.cached, hash }
    }

    /// How a request of a batch role ended that its batch did not answer with a recorded
    /// exchange: an answer found in the ledger, a live call (`body`) after its batches, with
    /// them counted as attempts, or a failure.
    async fn after_batch(&self, r: &Role, body: &Value, outcome: Outcome, est_tokens: u64) -> Result<Sent, SendError> {
        let cancel = &self.inner.cancel;
        match outcome {
            Outcome::Answer { response, batch, tries } => {
                Ok(Sent { response, attempts: tries, latency_ms: 0, replica: 0, batch: Some(batch), started_at: None })
            }
            Outcome::Live { tries } => match r.endpoint.send(&r.settings, body, est_tokens, None, cancel).await {
                Ok(sent) => Ok(Sent { attempts: sent.attempts + tries, ..sent }),
                Err(SendError::Failed { attempts, last_status, message }) => {
                    Err(SendError::Failed { attempts: attempts + tries, last_status, message })
                }
                Err(e) => Err(e),
            },
            Outcome::Failed { tries, status, message } => {
                Err(SendError::Failed { attempts: tries, last_status: status, message })
            }
            Outcome::Cancelled => Err(SendError::Cancelled),
            Outcome::Setup(message) => Err(SendError::Setup(message)),
            // Taken by `exchange` before it comes here.
            Outcome::Recorded(_) => Err(SendError::Setup("internal: a recorded batch answer came back".into())),
        }
    }

    /// The error of a request that could not be sent; a transport failure is recorded.
    fn send_failed(&self, r: &Role, item: &str, parent: Option<i64>, hash: String, e: SendError) -> LlmError {
        let stage = self.inner.stage.clone();
        match e {
            SendError::Cancelled => LlmError::Cancelled { stage, item: item.to_string() },
            SendError::Setup(message) => {
                LlmError::Setup { stage, item: item.to_string(), role: r.name.clone(), message }
            }
            SendError::Failed { attempts, last_status, message } => {
                let message = r.endpoint.redact(&message);
                self.bump(|c| &c.retries, u64::from(attempts.saturating_sub(1)));
                let event_id = self.record_failure(
                    r,
                    item,
                    parent,
                    json!({"kind": "transport", "request_hash": hash, "attempts": attempts,
                           "last_status": last_status, "error": message}),
                );
                LlmError::Transport {
                    stage,
                    item: item.to_string(),
                    role: r.name.clone(),
                    attempts,
                    last_status,
                    message,
                    event_id,
                }
            }
        }
    }

    fn record_failure(&self, r: &Role, item: &str, parent: Option<i64>, mut payload: Value) -> Option<i64> {
        self.bump(|c| &c.failures, 1);
        payload["role"] = json!(r.name);
        payload["model"] = json!(r.model);
        payload["item"] = json!(item);
        let parents: Vec<i64> = parent.into_iter().collect();
        match self.inner.recorder.record(LLM_FAILURE, item, payload, &parents) {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::warn!("cannot record an LLM failure in the ledger: {e:#}");
                None
            }
        }
    }
}

/// One line about an `llm.exchange` or `llm.failure` event (for `benchgen explain`).
pub fn describe_event(kind: &str, p: &Value) -> String {
    let s = |k: &str| p[k].as_str().unwrap_or("").to_string();
    let short = |t: &str| -> String {
        let one: String = t.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut out: String = one.chars().take(160).collect();
        if one.chars().count() > 160 {
            out.push('…');
        }
        out
    };
    let who = format!("role `{}` ({})", s("role"), s("model"));
    if kind == LLM_FAILURE {
        return format!("{who} failed ({}): {}", s("kind"), short(&s("error")));
    }
    let tmpl = if s("template").is_empty() { String::new() } else { format!(", template `{}`", s("template")) };
    if p["cached"] == Value::Bool(true) {
        return format!("{who}{tmpl}: served from the ledger (answer of #{})", p["source_event"]);
    }
    let content = p["response"]["choices"][0]["message"]["content"].as_str().unwrap_or("(tool calls)");
    if let Some(batch) = p["batch"].as_str() {
        let u = &p["usage"];
        let (pt, ct) = (&u["prompt_tokens"], &u["completion_tokens"]);
        return format!(
            "{who}{tmpl}: {pt}+{ct} tokens, batch {batch}, {} batch(es): {}",
            p["attempts"],
            short(content)
        );
    }
    format!(
        "{who}{tmpl}: {}+{} tokens, {} ms, {} attempt(s): {}",
        p["usage"]["prompt_tokens"],
        p["usage"]["completion_tokens"],
        p["latency_ms"],
        p["attempts"],
        short(content)
    )
}

/// The canonical request body: its sha256 is the cache key. Built in a fixed key order
/// from the model, sampling parameters, messages and the extras (response_format, tools);
/// never contains the API key.
impl LlmClient {
    /// The recorded exchange for a request: by its cache key, or in a ledger written before
    /// the key held the endpoint, by the body's hash alone, and then only for the role that
    /// recorded it.
    fn cached(&self, r: &Role, key: &str, hash: &str) -> anyhow::Result<Option<(i64, Value)>> {
        if let Some(hit) = self.inner.recorder.lookup(key)? {
            return Ok(Some(hit));
        }
        let old = self.inner.recorder.lookup(hash)?;
        Ok(old.filter(|(_, p)| p.get("endpoint").is_none() && p["role"].as_str() == Some(r.name.as_str())))
    }
}

/// The request hash (sha256 of the request body) and the exchange cache key (sha256 of the
/// body, a newline and the endpoint identity), as [`crate::store::sha256_hex`] writes them.
/// One pass over the body: SHA-256 reads its input in order, so the key's hasher goes on from
/// a copy of the state the body left. Hashing was a fifth of a batch call's own work before it
/// waits (dev profile, `sha2` unoptimised), half of it the body hashed again for the key.
fn request_hashes(body: &[u8], endpoint: &str) -> (String, String) {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(body);
    let mut key = hash.clone();
    key.update(b"\n");
    key.update(endpoint.as_bytes());
    let shown = |h: Sha256| format!("sha256:{}", hex::encode(h.finalize()));
    (shown(hash), shown(key))
}

/// The fields every `llm.exchange` of a request starts with.
fn exchange_base(r: &Role, item: &str, template: Option<(&str, &str)>, hash: &str) -> Value {
    json!({
        "role": r.name,
        "provider": r.settings.provider.as_str(),
        "model": r.model,
        "item": item,
        "template": template.map(|t| t.0),
        "template_hash": template.map(|t| t.1),
        "request_hash": hash,
        "endpoint": r.identity,
    })
}

/// The role's sampling parameters as a paid exchange records them (`params`).
fn role_params(s: &RoleSettings) -> Value {
    json!({"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens, "seed": s.seed})
}

/// The sampling parameters a live exchange records (`params`): the role's, except where the
/// request body itself set one (a turn's own `max_tokens`, a seed or temperature of the request,
/// [`Answer::with_seed`] and [`Answer::with_temperature`]: curation's second verdict at 0.7
/// was recorded with the judge role's 0), so the record says what was sent.
fn sent_params(s: &RoleSettings, body: &Value) -> Value {
    let mut p = role_params(s);
    for k in ["temperature", "top_p", "max_tokens", "seed"] {
        if let Some(v) = body.get(k).filter(|v| !v.is_null()) {
            p[k] = v.clone();
        }
    }
    p
}

/// The payload of a paid exchange: `p` (the fields of [`exchange_base`]), its `params`
/// ([`sent_params`]), the request `body`, and what `send` brought (`usage`: its tokens).
/// The batch ingest writes the same as text ([`batch_api`]'s `paid_text`).
fn sent_payload(mut p: Value, params: Value, body: Value, sent: &Sent, usage: Value) -> Value {
    p["cached"] = json!(false);
    p["params"] = params;
    p["request"] = body;
    p["response"] = sent.response.clone();
    p["usage"] = usage;
    match &sent.batch {
        // The batch's time is not a request's latency: the batch's id instead.
        Some(b) => p["batch"] = json!(b),
        None => {
            p["latency_ms"] = json!(sent.latency_ms);
            if let Some(t) = &sent.started_at {
                p["started_at"] = json!(t);
            }
        }
    }
    p["attempts"] = json!(sent.attempts);
    p
}

/// The payload of a cache hit of exchange `source` (whose `payload` gives the tokens and
/// the batch): `p` as in [`sent_payload`]. The batch ingest writes the same as text
/// ([`batch_api`]'s `hit_text`).
fn hit_payload(mut p: Value, source: i64, payload: &Value) -> Value {
    p["cached"] = json!(true);
    p["source_event"] = json!(source);
    p["usage"] = payload["usage"].clone();
    p["latency_ms"] = json!(0);
    p["attempts"] = json!(0);
    if let Some(batch) = payload.get("batch") {
        p["batch"] = batch.clone();
    }
    p
}

/// A request's messages: given (a chat turn's), or made when needed (a typed call's, from
/// its prompt's text; see [`LlmClient::ask`]).
#[derive(Clone, Copy)]
enum Messages<'a> {
    Given(&'a [Value]),
    Made(&'a (dyn Fn() -> Vec<Value> + Send + Sync)),
}

/// What a request asks besides the role's settings, borrowed from its call: the messages,
/// the answer's schema as `response_format` (its name and schema), and other fields of the
/// body (`seed`, `tools`).
#[derive(Clone, Copy)]
struct Request<'a> {
    messages: Messages<'a>,
    format: Option<(&'a str, &'a Value)>,
    extra: &'a serde_json::Map<String, Value>,
    /// Stream the answer and end it once its text is whole by this test
    /// ([`stream::Assembled::may_cut`]); `None`: one answer, not streamed.
    until: Option<fn(&str) -> bool>,
}

fn request_body(r: &Role, req: Request<'_>) -> Value {
    let mut b = serde_json::Map::new();
    b.insert("model".into(), json!(r.model));
    let messages = match req.messages {
        Messages::Given(m) => m.to_vec(),
        Messages::Made(make) => make(),
    };
    b.insert("messages".into(), Value::Array(messages));
    let s = &r.settings;
    if let Some(t) = s.temperature {
        b.insert("temperature".into(), json!(t));
    }
    if let Some(t) = s.top_p {
        b.insert("top_p".into(), json!(t));
    }
    if let Some(t) = s.max_tokens {
        b.insert("max_tokens".into(), json!(t));
    }
    if let Some(t) = s.seed {
        b.insert("seed".into(), json!(t));
    }
    // `response_format` first among the extras, where the call's fields used to hold it.
    if let Some((name, schema)) = req.format {
        b.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema}}),
        );
    }
    for (k, v) in req.extra {
        b.insert(k.clone(), v.clone());
    }
    b.insert("stream".into(), json!(req.until.is_some()));
    if req.until.is_some() {
        // The usage comes with the last chunk, which a cut answer never gets; llama-server's
        // timings with every chunk count its tokens until the cut.
        b.insert("stream_options".into(), json!({"include_usage": true}));
        b.insert("timings_per_token".into(), json!(true));
    }
    Value::Object(b)
}

/// Where an agent turn stops on the local server: a second call written as text on a line of
/// its own, after the first. Small local models write a call as a bare JSON object and go
/// on, the same call line after line until the completion limit; the agent loop reads only
/// the first call of such a text ([`crate::agent::text_tool_calls`]), so the rest was decode
/// time for nothing: in the demo's eval of 2026-12-06, 859 of the panel's 4,450 completion
/// tokens, about 98 s of its 414 s of decoding. A call ends `}}` (its arguments, then
/// itself); an answer that lists entities as JSON lines seldom does, and keeps its lines.
/// The stop takes those two braces with it; [`closed_at_stop`] puts them back. Not
/// `<tool_call>\n{"name"`: that opens Qwen's own call format. Sent only to the `local`
/// server (llama-server with the models `make setup` installs): a vLLM or Ollama server may
/// parse calls written as JSON lines into parallel calls itself, and OpenAI's reasoning
/// models refuse `stop`. A made-up result in the call's own object (`, "result_id": …`) has
/// no stop string (one cannot tell the end of the arguments from a nested object inside
/// them): the same turns stream, and the client ends them there ([`stream`]).
pub const TEXT_CALL_STOPS: [&str; 2] = ["}}\n{\"name\"", "}}\n\n{\"name\""];

/// The text of an agent turn as it was before a [`TEXT_CALL_STOPS`] match took the closing
/// `}}` of its first call. Only a call that opens a line (`{"name"`, `{"arguments"` or
/// `{"tool"` (see [`crate::agent::text_tool_calls`]), after
/// a line of prose, a fence or a `<tool_call>` tag) and ends inside exactly its own two
/// objects (outside any string) is closed, so it reads as it would have without the stop;
/// any other text is left as it came: llama-server says `stop` for the end of the sequence
/// too, and a prose answer is never touched.
pub fn closed_at_stop(text: &str) -> String {
    let opens_call = |i: usize| {
        let line_start = i == 0 || text[..i].ends_with('\n') || text[..i].ends_with("<tool_call>");
        let key = text[i + 1..].trim_start();
        line_start && ["\"name\"", "\"arguments\"", "\"tool\""].iter().any(|k| key.starts_with(k))
    };
    let Some(start) = text.match_indices('{').map(|(i, _)| i).find(|&i| opens_call(i)) else {
        return text.to_string();
    };
    match extract::closing(&text[start..]) {
        Err((2, false)) => format!("{text}}}}}"),
        // The call closed before the end (nothing of it was cut), or the text ends elsewhere.
        _ => text.to_string(),
    }
}

/// Whether the tool calls of an assistant message carry their position (`index`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallIndex {
    /// What a chat request sends.
    Omit,
    /// What FinMCP trajectories store (and `execute` records).
    Include,
}

/// A message in OpenAI chat format: the one place that writes it, for requests and for
/// recorded trajectories.
pub fn openai_message(m: &ChatMessage, index: CallIndex) -> Value {
    match m {
        ChatMessage::System(s) => json!({"role": "system", "content": s}),
        ChatMessage::User(s) => json!({"role": "user", "content": s}),
        ChatMessage::Assistant { content, tool_calls } => {
            let mut v = json!({"role": "assistant", "content": content});
            if !tool_calls.is_empty() {
                v["tool_calls"] = Value::Array(
                    tool_calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| {
                            let mut call = serde_json::Map::new();
                            call.insert("id".into(), json!(c.id));
                            call.insert("type".into(), json!("function"));
                            if index == CallIndex::Include {
                                call.insert("index".into(), json!(i));
                            }
                            let arguments = match &c.arguments {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            };
                            call.insert("function".into(), json!({"name": c.name, "arguments": arguments}));
                            Value::Object(call)
                        })
                        .collect(),
                );
            }
            v
        }
        ChatMessage::Tool { call_id, content } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
    }
}

/// Render a template with strict undefined variables. A template is parsed once for its
/// text and kept (by name, with the text it was parsed from): a stage renders one template
/// per item, and parsed it anew each time.
pub fn render_template(name: &str, source: &str, vars: &Value) -> Result<String, String> {
    type Parsed = HashMap<String, (String, Arc<minijinja::Environment<'static>>)>;
    static PARSED: LazyLock<Mutex<Parsed>> = LazyLock::new(Default::default);
    let err = |e: minijinja::Error| format!("prompt template `{name}`: {e}");
    let parsed = || PARSED.lock().unwrap_or_else(|p| p.into_inner());
    let kept = parsed().get(name).filter(|(text, _)| text == source).map(|(_, env)| env.clone());
    let env = match kept {
        Some(env) => env,
        None => {
            let mut env = minijinja::Environment::new();
            env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
            env.add_template_owned(name.to_string(), source.to_string()).map_err(err)?;
            let env = Arc::new(env);
            parsed().insert(name.to_string(), (source.to_string(), env.clone()));
            env
        }
    };
    let t = env.get_template(name).map_err(err)?;
    t.render(minijinja::value::Serde(vars)).map_err(err)
}

/// Split a rendered prompt at a `--- user ---` line into system and user messages.
fn split_messages(text: &str) -> Vec<Value> {
    let mut system = None;
    let mut user = text;
    if let Some(pos) = text.lines().position(|l| l.trim() == "--- user ---") {
        let mut offset = 0;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            if i == pos {
                system = Some(text[..offset].trim());
                user = &text[offset + line.len()..];
                break;
            }
            offset += line.len();
        }
    }
    // Room for the two it can hold, no spare: a plain-text call keeps its messages while it waits.
    let mut out = Vec::with_capacity(2);
    if let Some(s) = system.filter(|s| !s.is_empty()) {
        out.push(json!({"role": "system", "content": s}));
    }
    out.push(json!({"role": "user", "content": user.trim()}));
    out
}

/// JSON schema of an answer type, without the `$schema` marker some servers reject, with
/// its free-text strings bounded ([`bound_strings`]).
pub fn schema_of<T: schemars::JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(json!({}));
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
    }
    bound_strings(&mut v, None);
    v
}

/// [`schema_of`] with the list property `list` bounded to at most `max` items (at least
/// one), so a small model that keeps adding items ends in a valid answer.
pub fn schema_with_max_items<T: schemars::JsonSchema + serde::de::DeserializeOwned + 'static>(
    list: &str,
    max: usize,
) -> Value {
    Arc::unwrap_or_clone(Answer::<T>::of().max_items(list, max).schema)
}

/// `maxLength` of an explanation field (`reason`, `note`, `…_feedback`, …).
pub const MAX_EXPLANATION_CHARS: u64 = 300;
/// `maxLength` of any other string in an answer.
pub const MAX_STRING_CHARS: u64 = 1_000;

/// Gives every string of an answer schema without a `maxLength` one: explanations
/// [`MAX_EXPLANATION_CHARS`], other strings [`MAX_STRING_CHARS`]. Why: servers that turn
/// the schema into a grammar (llama-server, vLLM, SGLang) then close the string at the
/// bound, so a small model caught in a repetition loop ("… a popular choice. Notion is a
/// cloud-based platform …") still gives a valid answer within `max_tokens` instead of a
/// cut-off one that fails every re-ask; servers that ignore the schema get the bound
/// checked and an over-long answer re-asked.
pub fn bound_strings(schema: &mut Value, name: Option<&str>) {
    let Some(o) = schema.as_object_mut() else { return };
    if o.get("type").and_then(Value::as_str) == Some("string")
        && !o.contains_key("enum")
        && !o.contains_key("maxLength")
    {
        let explanation = name.is_some_and(|n| {
            matches!(n, "reason" | "reasons" | "note" | "notes" | "feedback" | "explanation" | "rationale")
                || n.ends_with("_reason")
                || n.ends_with("_feedback")
        });
        let max = if explanation { MAX_EXPLANATION_CHARS } else { MAX_STRING_CHARS };
        o.insert("maxLength".into(), json!(max));
    }
    for (k, v) in o.iter_mut() {
        match k.as_str() {
            "properties" | "$defs" | "definitions" => {
                if let Some(props) = v.as_object_mut() {
                    for (pn, pv) in props.iter_mut() {
                        bound_strings(pv, (k == "properties").then_some(pn.as_str()));
                    }
                }
            }
            "items" | "additionalProperties" => bound_strings(v, name),
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                if let Some(xs) = v.as_array_mut() {
                    xs.iter_mut().for_each(|x| bound_strings(x, name));
                }
            }
            _ => {}
        }
    }
}

fn schema_name<T: schemars::JsonSchema>() -> String {
    let n: String = T::schema_name()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect();
    if n.is_empty() { "answer".into() } else { n.chars().take(64).collect() }
}

/// The compiled validator of `answer`'s schema ([`compiled`]).
fn validator_of<T>(answer: &Answer<T>) -> Result<Arc<jsonschema::Validator>, String> {
    let schema = serde_json::to_string(&*answer.schema).unwrap_or_default();
    compiled(&schema, &answer.schema).map_err(|e| format!("the answer type's JSON schema is not usable: {e}"))
}

/// States `answer`'s schema in the prompt's `messages`. Where the instruction goes decides
/// how much of a request a server with prefix caching (llama.cpp, vLLM, SGLang) reuses from
/// the stage's previous one: a schema that is the same for every item joins the system
/// message, the fixed part that comes first; one built per item goes after the data, so the
/// fixed part stays a shared prefix either way.
fn instruct<T>(messages: &mut [Value], answer: &Answer<T>) {
    let schema = serde_json::to_string(&*answer.schema).unwrap_or_default();
    let instruction = format!(
        "\n\nAnswer with only a JSON value that matches this JSON Schema, nothing else:\n```json\n{schema}\n```"
    );
    let system = messages.iter().position(|m| m["role"] == "system").filter(|_| answer.fixed);
    let at = system.or_else(|| messages.iter().rposition(|m| m["role"] == "user"));
    if let Some(m) = at.and_then(|i| messages.get_mut(i)) {
        let text = format!("{}{instruction}", m["content"].as_str().unwrap_or_default());
        m["content"] = Value::String(text);
    }
}

/// Schemas whose validators [`compiled`] keeps; past that it starts again.
const COMPILED_KEPT: usize = 256;

/// The validator of an answer schema (`text`: its JSON text), compiled once and shared.
/// Compiling, which checks the schema against its meta-schema first, was most of a typed
/// call's own work before it was sent, once per call; a stage asks with a few schemas. Some
/// are made per item (an `enum` of the item's ids), so the map is emptied when full.
fn compiled(text: &str, schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
    static COMPILED: LazyLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> = LazyLock::new(Default::default);
    let kept = || COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(v) = kept().get(text) {
        return Ok(v.clone());
    }
    // Compiled outside the lock: calls with other schemas do not wait for it.
    let v = Arc::new(jsonschema::validator_for(schema).map_err(|e| e.to_string())?);
    let mut map = kept();
    if map.len() >= COMPILED_KEPT {
        map.clear();
    }
    map.insert(text.to_string(), v.clone());
    Ok(v)
}

/// Extract, schema-check and deserialise an answer.
fn validate<T: serde::de::DeserializeOwned>(content: &str, validator: &jsonschema::Validator) -> Result<T, String> {
    validate_value(extract::extract_json(content)?, validator)
}

/// Schema-check and deserialise an extracted answer.
fn validate_value<T: serde::de::DeserializeOwned>(
    value: Value,
    validator: &jsonschema::Validator,
) -> Result<T, String> {
    let errors: Vec<String> =
        validator.iter_errors(&value).take(5).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
    if !errors.is_empty() {
        return Err(format!("does not match the schema: {}", errors.join("; ")));
    }
    serde_json::from_value(value).map_err(|e| format!("does not match the expected shape: {e}"))
}

/// What a request may cost the tpm limiter: its text's tokens (about 4 characters each) and
/// the completion limit the request carries (an eval turn's `[eval] max_tokens` replaces the
/// role's there), else the role's, else 256.
fn estimated_tokens(body_text: &str, body: &Value, role_max: Option<u32>) -> u64 {
    let completion = body.get("max_tokens").and_then(Value::as_u64).or(role_max.map(u64::from)).unwrap_or(256);
    body_text.len() as u64 / 4 + completion
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limiters_estimate_takes_the_completion_limit_the_request_carries() {
        let body = json!({"messages": [], "max_tokens": 160});
        assert_eq!(estimated_tokens(&"x".repeat(400), &body, Some(300)), 100 + 160, "the request's, not the role's");
        assert_eq!(estimated_tokens(&"x".repeat(400), &json!({}), Some(300)), 100 + 300);
        assert_eq!(estimated_tokens("", &json!({}), None), 256);
    }

    #[test]
    fn templates_are_strict_and_split_into_messages() {
        let err = render_template("t", "Hi {{ name }} {{ missing }}", &json!({"name": "x"})).unwrap_err();
        assert!(err.contains("undefined"), "{err}");
        let text =
            render_template("t", "You judge.\n--- user ---\nTool: {{ name }}\n", &json!({"name": "add"})).unwrap();
        let m = split_messages(&text);
        assert_eq!(
            m,
            vec![json!({"role": "system", "content": "You judge."}), json!({"role": "user", "content": "Tool: add"})]
        );
        assert_eq!(split_messages("just user\n"), vec![json!({"role": "user", "content": "just user"})]);
    }

    /// Artifacts and lineage name exchanges by the request hash and the ledger cache finds
    /// them by the key: made in one pass, both are still the hashes of their whole inputs
    /// (bodies that end in, and across, SHA-256's 64-byte blocks).
    #[test]
    fn the_request_hash_and_cache_key_are_the_sha256_of_the_body_and_of_the_body_with_its_endpoint() {
        let (hash, _) = request_hashes(b"", "e");
        assert_eq!(hash, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        for n in [0, 1, 54, 55, 56, 63, 64, 65, 119, 128, 1000] {
            let body = "é".repeat(n / 2) + &"b".repeat(n % 2);
            let (hash, key) = request_hashes(body.as_bytes(), "vllm http://h/v1");
            assert_eq!(hash, crate::store::sha256_hex(body.as_bytes()), "body of {n} bytes");
            let keyed = format!("{body}\nvllm http://h/v1");
            assert_eq!(key, crate::store::sha256_hex(keyed.as_bytes()), "body of {n} bytes");
        }
    }

    #[test]
    fn client_is_send_sync_and_cheap_to_clone() {
        fn check<T: Send + Sync + Clone>() {}
        check::<LlmClient>();
        check::<LlmError>();
    }

    #[derive(Debug, Deserialize, schemars::JsonSchema, PartialEq)]
    struct V {
        verdict: String,
        n: u32,
    }

    #[derive(Debug, Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Bounded {
        reason: String,
        solvability_feedback: String,
        queries: Vec<String>,
        kind: Kind,
        inner: Option<Inner>,
    }
    #[derive(Debug, Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    enum Kind {
        A,
        B,
    }
    #[derive(Debug, Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        note: String,
        text: String,
    }

    #[test]
    fn answer_strings_are_bounded_explanations_tighter_and_enums_untouched() {
        let s = schema_of::<Bounded>();
        let p = &s["properties"];
        assert_eq!(p["reason"]["maxLength"], MAX_EXPLANATION_CHARS);
        assert_eq!(p["solvability_feedback"]["maxLength"], MAX_EXPLANATION_CHARS);
        assert_eq!(p["queries"]["items"]["maxLength"], MAX_STRING_CHARS);
        let inner = &s["$defs"]["Inner"]["properties"];
        assert_eq!(inner["note"]["maxLength"], MAX_EXPLANATION_CHARS);
        assert_eq!(inner["text"]["maxLength"], MAX_STRING_CHARS);
        assert!(s["$defs"]["Kind"].get("maxLength").is_none(), "{}", s["$defs"]["Kind"]);
        // A bound already there is kept; the validator enforces the bound for servers that
        // ignore the schema.
        let mut own = json!({"type": "object", "properties": {"reason": {"type": "string", "maxLength": 5}}});
        bound_strings(&mut own, None);
        assert_eq!(own["properties"]["reason"]["maxLength"], 5);
        let val = jsonschema::validator_for(&s).unwrap();
        let long = "x".repeat(MAX_EXPLANATION_CHARS as usize + 1);
        let answer = json!({"reason": long, "solvability_feedback": "", "queries": [], "kind": "A"}).to_string();
        assert!(validate::<Bounded>(&answer, &val).unwrap_err().contains("reason"));
    }

    #[test]
    fn an_answer_types_schema_and_validator_are_made_once_and_a_changed_schema_is_the_calls_own() {
        let (a, b) = (Answer::<V>::of(), Answer::<V>::of());
        assert!(Arc::ptr_eq(&a.schema, &b.schema), "one schema per type");
        assert_eq!(*a.schema, schema_of::<V>());
        let bounded = Answer::<V>::of().max_items("n", 2);
        assert!(!Arc::ptr_eq(&a.schema, &bounded.schema));
        assert_eq!(bounded.schema["properties"]["n"]["maxItems"], 2);
        assert_eq!(Answer::<V>::of().schema["properties"]["n"].get("maxItems"), None, "the shared one is unchanged");
        let text = serde_json::to_string(&*a.schema).unwrap();
        let (one, two) = (compiled(&text, &a.schema).unwrap(), compiled(&text, &a.schema).unwrap());
        assert!(Arc::ptr_eq(&one, &two), "one validator per schema");
        assert!(validate::<V>("{\"verdict\": \"keep\", \"n\": 2}", &one).is_ok());
        // A schema that does not compile is refused every time, never kept.
        let bad = json!({"type": 5});
        assert!(compiled(&bad.to_string(), &bad).is_err());
        assert!(compiled(&bad.to_string(), &bad).is_err());
    }

    #[test]
    fn a_kept_template_is_parsed_again_when_its_text_changes() {
        let name = "kept_template_test";
        assert_eq!(render_template(name, "one {{ x }}", &json!({"x": 1})).unwrap(), "one 1");
        assert_eq!(render_template(name, "one {{ x }}", &json!({"x": 2})).unwrap(), "one 2");
        assert_eq!(render_template(name, "two {{ x }}", &json!({"x": 3})).unwrap(), "two 3");
        let err = render_template(name, "two {{ y }}", &json!({"x": 3})).unwrap_err();
        assert!(err.contains("undefined") && err.contains(name), "{err}");
        assert!(render_template(name, "bad {{", &json!({})).is_err());
        assert_eq!(render_template(name, "two {{ x }}", &json!({"x": 4})).unwrap(), "two 4");
    }

    #[test]
    fn validation_names_the_problem() {
        let schema = schema_of::<V>();
        assert!(schema.get("$schema").is_none());
        let val = jsonschema::validator_for(&schema).unwrap();
        assert_eq!(validate::<V>("```json\n{\"verdict\": \"keep\", \"n\": 2}\n```", &val).unwrap().n, 2);
        let e = validate::<V>("{\"verdict\": \"keep\"}", &val).unwrap_err();
        assert!(e.contains("n"), "{e}");
        let e = validate::<V>("no json here", &val).unwrap_err();
        assert!(e.contains("no JSON"), "{e}");
    }

    #[test]
    fn openai_messages_differ_only_by_the_call_index() {
        let m = ChatMessage::Assistant {
            content: None,
            tool_calls: vec![
                ToolCall { id: "c1".into(), name: "f".into(), arguments: json!({"a": 1}) },
                ToolCall { id: "c2".into(), name: "g".into(), arguments: json!("not json") },
            ],
        };
        assert_eq!(
            openai_message(&m, CallIndex::Omit).to_string(),
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"not json"}}]}"#
        );
        assert_eq!(
            openai_message(&m, CallIndex::Include).to_string(),
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","index":0,"function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"c2","type":"function","index":1,"function":{"name":"g","arguments":"not json"}}]}"#
        );
        let plain = ChatMessage::Assistant { content: Some("hi".into()), tool_calls: vec![] };
        for index in [CallIndex::Omit, CallIndex::Include] {
            assert_eq!(openai_message(&plain, index), json!({"role": "assistant", "content": "hi"}));
            assert_eq!(
                openai_message(&ChatMessage::Tool { call_id: "c1".into(), content: "r".into() }, index),
                json!({"role": "tool", "tool_call_id": "c1", "content": "r"})
            );
        }
    }
}
