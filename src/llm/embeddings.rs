//! Embeddings from any OpenAI-compatible `/v1/embeddings` server (text-embeddings-inference,
//! vLLM, Ollama, Infinity, llama.cpp's `llama-server --embeddings`, OpenAI): batches of texts
//! in, one vector per text out, in input order.
//!
//! Load behaviour as for chat calls ([`super::transport`]): up to `max_concurrency` batches in
//! flight; retries of 408, 409, 429, every 5xx, connection errors, timeouts and bodies that
//! are not an embedding list of the right length, with back-off `backoff_ms·2^(n-1)` (≤ 60 s)
//! × a random factor in [0.5, 1), or the server's `Retry-After`; other 4xx fail at once. The
//! API key comes from the variable `api_key_env` names, goes only into the `Authorization`
//! header, and is removed ([`super::redact`]) from every text a server sends back before it
//! is shown or logged.
//!
//! The caller is synchronous (the `embed` stage, and stages that embed a few queries from
//! inside their own async work), so [`EmbeddingClient::embed`] runs its requests on a thread
//! of its own with a runtime of its own, and may be called from anywhere.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::redact::{Redactor, truncate};
use super::transport::{error_chain, parse_retry_after, retry_delay, retryable_status};

/// Where and how to ask (from `[embed]`).
#[derive(Debug, Clone)]
pub struct EmbeddingEndpoint {
    /// Base URL ending in `/v1` (the request goes to `{base_url}/embeddings`).
    pub base_url: String,
    pub model: String,
    /// Sent as `dimensions` when set (models that can shorten their vectors).
    pub dimensions: Option<u32>,
    pub api_key_env: Option<String>,
    pub max_concurrency: usize,
    pub timeout_s: f64,
    pub max_retries: u32,
    pub backoff_ms: u64,
}

/// A ready client: the endpoint and its key (read once, at construction).
pub struct EmbeddingClient {
    cfg: EmbeddingEndpoint,
    url: String,
    api_key: Option<String>,
    redactor: Redactor,
}

/// Called with each answered request: where its texts start, and their vectors.
pub type OnBatch<'a> = dyn FnMut(usize, &[Vec<f32>]) -> Result<(), String> + Send + 'a;

/// What one [`EmbeddingClient::embed`] call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmbedCounts {
    /// Requests that got an answer.
    pub requests: u64,
    /// Extra attempts (after failures).
    pub retries: u64,
}

impl EmbeddingClient {
    /// Fails (naming the variable, never its content) when `api_key_env` is set but the
    /// variable is missing or unusable.
    pub fn new(cfg: EmbeddingEndpoint) -> Result<Self, String> {
        let api_key = match &cfg.api_key_env {
            Some(name) => Some(super::config::read_api_key(name)?),
            None => None,
        };
        let redactor = api_key.as_deref().map(Redactor::new).unwrap_or_default();
        let url = format!("{}/embeddings", cfg.base_url.trim_end_matches('/'));
        Ok(Self { cfg, url, api_key, redactor })
    }

    pub fn endpoint(&self) -> &EmbeddingEndpoint {
        &self.cfg
    }

    /// Embed `texts` in requests of up to `batch` texts, up to `max_concurrency` at once;
    /// `on_batch(start, vectors)` with each answered request (`texts[start..]`), in the order
    /// they finish; its error stops the work. Vectors as the server sent them (not
    /// normalised), in input order; every vector has the same length.
    pub fn embed(
        &self,
        texts: &[String],
        batch: usize,
        on_batch: &mut OnBatch<'_>,
    ) -> Result<(Vec<Vec<f32>>, EmbedCounts), String> {
        if texts.is_empty() {
            return Ok((Vec::new(), EmbedCounts::default()));
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start tokio: {e}"))?;
                rt.block_on(self.embed_async(texts, batch, on_batch))
            })
            .join()
            .unwrap_or_else(|_| Err("internal: the embedding thread panicked".into()))
        })
    }

    async fn embed_async(
        &self,
        texts: &[String],
        batch: usize,
        on_batch: &mut OnBatch<'_>,
    ) -> Result<(Vec<Vec<f32>>, EmbedCounts), String> {
        let concurrency = self.cfg.max_concurrency.max(1);
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(concurrency)
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let chunks: Vec<(usize, &[String])> =
            texts.chunks(batch.max(1)).enumerate().map(|(i, c)| (i * batch.max(1), c)).collect();
        let mut answers = futures::stream::iter(chunks)
            .map(|(start, chunk)| {
                let http = &http;
                async move { (start, self.request(http, chunk).await) }
            })
            .buffer_unordered(concurrency);
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        let mut counts = EmbedCounts::default();
        let mut dim: Option<usize> = None;
        while let Some((start, answer)) = answers.next().await {
            let (vectors, attempts) = answer?;
            counts.requests += 1;
            counts.retries += u64::from(attempts - 1);
            for v in &vectors {
                match dim {
                    None => dim = Some(v.len()),
                    Some(d) if d != v.len() => {
                        return Err(format!(
                            "the embedding server `{}` returned vectors of {} and of {d} floats for model `{}`",
                            self.cfg.base_url,
                            v.len(),
                            self.cfg.model
                        ));
                    }
                    Some(_) => {}
                }
            }
            on_batch(start, &vectors)?;
            for (k, v) in vectors.into_iter().enumerate() {
                out[start + k] = v;
            }
        }
        Ok((out, counts))
    }

    /// One batch, with retries: (vectors in input order, attempts made).
    async fn request(&self, http: &reqwest::Client, inputs: &[String]) -> Result<(Vec<Vec<f32>>, u32), String> {
        let mut body = json!({"model": self.cfg.model, "input": inputs});
        if let Some(d) = self.cfg.dimensions {
            body["dimensions"] = json!(d);
        }
        let body = serde_json::to_vec(&body).map_err(|e| format!("cannot encode the request: {e}"))?;
        let timeout = Duration::from_secs_f64(self.cfg.timeout_s);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let mut req = http
                .post(&self.url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .timeout(timeout);
            if let Some(k) = &self.api_key {
                req = req.bearer_auth(k);
            }
            let (status, message, retryable, retry_after) = match req.send().await {
                Ok(resp) if resp.status().is_success() => match resp.bytes().await {
                    Ok(bytes) => match parse_response(&bytes, inputs.len(), self.cfg.dimensions) {
                        Ok(v) => return Ok((v, attempts)),
                        Err(e) => ("malformed response".to_string(), e, true, None),
                    },
                    Err(e) => (transfer_status(&e), error_chain(&e), true, None),
                },
                Ok(resp) => {
                    let code = resp.status().as_u16();
                    let retry_after = parse_retry_after(resp.headers().get(reqwest::header::RETRY_AFTER));
                    let text = resp.text().await.unwrap_or_default();
                    (format!("HTTP {code}"), text.trim().to_string(), retryable_status(code), retry_after)
                }
                Err(e) => (transfer_status(&e), error_chain(&e), !e.is_builder(), None),
            };
            // Redact the whole text first, then cut it (see `redact`).
            let message = truncate(&self.redactor.text(&message), 500);
            let status = truncate(&self.redactor.text(&status), 100);
            tracing::debug!("embedding request attempt {attempts}: {status}: {message}");
            if !retryable || attempts > self.cfg.max_retries {
                return Err(format!(
                    "the embedding server `{}` (model `{}`) failed after {attempts} attempt(s); last status: {status}: {message}",
                    self.redactor.text(&self.cfg.base_url),
                    self.cfg.model
                ));
            }
            tokio::time::sleep(retry_delay(self.cfg.backoff_ms, attempts, retry_after)).await;
        }
    }
}

fn transfer_status(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connection error".into()
    } else {
        "transfer error".into()
    }
}

/// `{"data": [{"index": i, "embedding": [f, …]}, …]}` → vectors in input order. Every input
/// must be answered once, with a non-empty list of finite numbers (of `dimensions` floats
/// when that was asked for).
fn parse_response(bytes: &[u8], expected: usize, dimensions: Option<u32>) -> Result<Vec<Vec<f32>>, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        format!("the response body is not JSON ({e}): {}", truncate(&String::from_utf8_lossy(bytes), 200))
    })?;
    let data = v["data"].as_array().ok_or("the response has no `data` list")?;
    if data.len() != expected {
        return Err(format!("{} embeddings for {expected} inputs", data.len()));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; expected];
    for (pos, item) in data.iter().enumerate() {
        let index = match &item["index"] {
            Value::Null => pos,
            i => i.as_u64().map(|i| i as usize).ok_or("an `index` is not a number")?,
        };
        let slot = out.get_mut(index).ok_or_else(|| format!("`index` {index} is out of range"))?;
        if slot.is_some() {
            return Err(format!("`index` {index} is answered twice"));
        }
        let floats = item["embedding"]
            .as_array()
            .ok_or_else(|| format!("embedding {index} is not a list of numbers"))?
            .iter()
            .map(|x| x.as_f64().filter(|f| f.is_finite()).map(|f| f as f32))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| format!("embedding {index} holds something that is not a finite number"))?;
        if floats.is_empty() {
            return Err(format!("embedding {index} is empty"));
        }
        if let Some(d) = dimensions
            && floats.len() != d as usize
        {
            return Err(format!("embedding {index} has {} floats, not the {d} asked for", floats.len()));
        }
        *slot = Some(floats);
    }
    Ok(out.into_iter().map(|v| v.expect("every index answered once")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_put_in_input_order_and_checked() {
        let body = json!({"data": [
            {"index": 1, "embedding": [0.0, 1.0]},
            {"index": 0, "embedding": [1.0, 0.5]}
        ]});
        let v = parse_response(body.to_string().as_bytes(), 2, None).unwrap();
        assert_eq!(v, vec![vec![1.0, 0.5], vec![0.0, 1.0]]);
        let err = |b: Value, n: usize, d: Option<u32>| parse_response(b.to_string().as_bytes(), n, d).unwrap_err();
        assert!(err(body.clone(), 3, None).contains("2 embeddings for 3 inputs"));
        assert!(err(body.clone(), 2, Some(3)).contains("not the 3 asked for"));
        assert!(
            err(json!({"data": [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [1]}]}), 2, None)
                .contains("twice")
        );
        assert!(err(json!({"data": [{"embedding": "AAAA"}]}), 1, None).contains("not a list"));
        assert!(err(json!({"error": "x"}), 1, None).contains("no `data`"));
        assert!(parse_response(b"<html>", 1, None).unwrap_err().contains("not JSON"));
        // No `index`: list order.
        let v =
            parse_response(json!({"data": [{"embedding": [2]}, {"embedding": [3]}]}).to_string().as_bytes(), 2, None)
                .unwrap();
        assert_eq!(v, vec![vec![2.0], vec![3.0]]);
    }

    #[test]
    fn a_missing_key_variable_is_named_not_shown() {
        let cfg = EmbeddingEndpoint {
            base_url: "http://127.0.0.1:9/v1".into(),
            model: "m".into(),
            dimensions: None,
            api_key_env: Some("BENCHGEN_TEST_EMBED_KEY_SURELY_UNSET".into()),
            max_concurrency: 1,
            timeout_s: 1.0,
            max_retries: 0,
            backoff_ms: 1,
        };
        let err = EmbeddingClient::new(cfg).err().unwrap();
        assert!(err.contains("BENCHGEN_TEST_EMBED_KEY_SURELY_UNSET") && err.contains("not set"), "{err}");
    }
}
