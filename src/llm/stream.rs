//! A streamed chat completion put back together as the `chat.completion` object the rest of
//! the client reads and the ledger records, and the point where the client may end it.
//!
//! Only agent turns on the local server stream ([`super::TEXT_CALL_STOPS`] says why): small
//! local models write a tool call as text and then go on, making up the call's result in the
//! same object until the completion limit, and the agent loop reads nothing after the call.
//! A stop string cannot tell where the arguments end (a nested object inside them looks the
//! same), but the text so far can be read: once it holds a whole call
//! ([`super::extract::text_call_complete`]), the client stops reading and drops the
//! connection, and llama-server stops decoding for it.

use serde_json::{Value, json};

/// Why a recorded answer ends where it does when the client ended it: the response's
/// `cut_by_client` field, so that an audit of the ledger tells such an answer from one the
/// model finished.
pub const CUT_REASON: &str = "a tool call written as text was whole; the rest of the turn was not generated";

/// The chunks of one streamed chat completion, folded as they arrive.
#[derive(Debug, Default)]
pub struct Assembled {
    content: String,
    /// Tool calls by their `index`: id, name and the arguments' text so far.
    calls: Vec<(String, String, String)>,
    finish: Option<String>,
    usage: Option<Value>,
    timings: Option<Value>,
    /// `id`, `created`, `model`, `system_fingerprint` of the first chunk.
    head: serde_json::Map<String, Value>,
    cut: bool,
}

impl Assembled {
    /// Fold one `chat.completion.chunk`.
    pub fn add(&mut self, chunk: &Value) {
        if self.head.is_empty() {
            for k in ["id", "created", "model", "system_fingerprint"] {
                if let Some(v) = chunk.get(k) {
                    self.head.insert(k.into(), v.clone());
                }
            }
        }
        // llama-server sends its timings with each chunk when asked (`timings_per_token`),
        // and with the last in any case; the last seen count the tokens so far.
        if let Some(t) = chunk.get("timings").filter(|t| t.is_object()) {
            self.timings = Some(t.clone());
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        let Some(choice) = chunk["choices"].as_array().and_then(|c| c.first()) else {
            return;
        };
        let delta = &choice["delta"];
        if let Some(s) = delta["content"].as_str() {
            self.content.push_str(s);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = call["index"].as_u64().unwrap_or(0) as usize;
            if self.calls.len() <= i {
                self.calls.resize(i + 1, Default::default());
            }
            let (id, name, args) = &mut self.calls[i];
            if let Some(s) = call["id"].as_str() {
                *id = s.to_string();
            }
            if let Some(s) = call["function"]["name"].as_str() {
                name.push_str(s);
            }
            if let Some(s) = call["function"]["arguments"].as_str() {
                args.push_str(s);
            }
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            self.finish = Some(f.to_string());
        }
    }

    /// Whether the answer so far may end here: no structured call has begun (the text is
    /// all there is), the model has not finished, and `whole` says the text is complete.
    pub fn may_cut(&self, whole: fn(&str) -> bool) -> bool {
        self.calls.is_empty() && self.finish.is_none() && whole(&self.content)
    }

    /// End the answer here: it reads as if the model had stopped (`finish_reason` `stop`), and
    /// says that the client ended it.
    pub fn cut(&mut self) {
        self.cut = true;
        self.finish = Some("stop".into());
    }

    /// The chat completion the chunks make, or `None` when the stream ended before the
    /// model finished and the client did not end it (the answer is incomplete).
    pub fn response(self) -> Option<Value> {
        let finish = self.finish?;
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.calls.is_empty() {
            // As llama-server answers unstreamed: words before a structured call are kept.
            if self.content.is_empty() {
                message["content"] = Value::Null;
            }
            message["tool_calls"] = self
                .calls
                .into_iter()
                .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
                .collect();
        }
        let mut r = self.head;
        r.insert("object".into(), json!("chat.completion"));
        r.insert("choices".into(), json!([{"index": 0, "message": message, "finish_reason": finish}]));
        // Without the last chunk there is no usage: the timings of the last chunk count the
        // prompt (evaluated and cached) and the tokens generated until the cut.
        let usage = self.usage.or_else(|| {
            let t = self.timings.as_ref()?;
            let n = |k: &str| t[k].as_u64().unwrap_or(0);
            let (prompt, completion) = (n("prompt_n") + n("cache_n"), n("predicted_n"));
            Some(json!({"completion_tokens": completion, "prompt_tokens": prompt,
                        "total_tokens": prompt + completion,
                        "prompt_tokens_details": {"cached_tokens": n("cache_n")}}))
        });
        if let Some(u) = usage {
            r.insert("usage".into(), u);
        }
        if let Some(t) = self.timings {
            r.insert("timings".into(), t);
        }
        if self.cut {
            r.insert("cut_by_client".into(), json!(CUT_REASON));
        }
        Some(Value::Object(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(delta: Value, finish: Value) -> Value {
        json!({"id": "c-1", "created": 7, "model": "m", "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    #[test]
    fn content_chunks_make_the_completion_a_whole_answer_would_be() {
        let mut a = Assembled::default();
        a.add(&chunk(json!({"role": "assistant", "content": null}), Value::Null));
        for part in ["The on-call ", "is Anna", "."] {
            a.add(&chunk(json!({"content": part}), Value::Null));
        }
        a.add(&chunk(json!({}), json!("stop")));
        a.add(&json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
                      "timings": {"prompt_n": 12, "cache_n": 0, "predicted_n": 5}}));
        let r = a.response().unwrap();
        assert_eq!(r["choices"][0]["message"], json!({"role": "assistant", "content": "The on-call is Anna."}));
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
        assert_eq!(r["usage"]["completion_tokens"], 5);
        assert_eq!(r["timings"]["predicted_n"], 5);
        assert_eq!((r["id"].as_str(), r["object"].as_str()), (Some("c-1"), Some("chat.completion")));
        assert!(r.get("cut_by_client").is_none());
    }

    #[test]
    fn tool_call_deltas_are_joined_by_index() {
        let mut a = Assembled::default();
        let call = |i: u64, id: Option<&str>, name: Option<&str>, args: &str| {
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                                   "function": {"name": name, "arguments": args}}]})
        };
        a.add(&chunk(call(0, Some("a"), Some("get_oncall"), "{\"team\""), Value::Null));
        a.add(&chunk(call(1, Some("b"), Some("list_hosts"), "{}"), Value::Null));
        a.add(&chunk(call(0, None, None, ": \"db\"}"), Value::Null));
        assert!(!a.may_cut(|_| true), "a structured call is never cut");
        a.add(&chunk(json!({}), json!("tool_calls")));
        let r = a.response().unwrap();
        let m = &r["choices"][0]["message"];
        assert_eq!(m["content"], Value::Null);
        assert_eq!(m["tool_calls"][0]["function"], json!({"name": "get_oncall", "arguments": "{\"team\": \"db\"}"}));
        assert_eq!(m["tool_calls"][1]["id"], "b");
        assert_eq!(r["choices"][0]["finish_reason"], "tool_calls");
        // Words that come with a structured call stay, as in an unstreamed answer.
        let mut a = Assembled::default();
        a.add(&chunk(json!({"content": "I'll check the on-call."}), Value::Null));
        a.add(&chunk(call(0, Some("a"), Some("get_oncall"), "{}"), json!("tool_calls")));
        let r = a.response().unwrap();
        assert_eq!(r["choices"][0]["message"]["content"], "I'll check the on-call.");
        assert_eq!(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_oncall");
    }

    #[test]
    fn a_cut_answer_counts_its_tokens_from_the_last_timings_and_says_it_was_cut() {
        let mut a = Assembled::default();
        let whole = crate::llm::extract::text_call_complete;
        let parts = ["{\"name\": \"get_oncall\", ", "\"arguments\": {\"team\": ", "{\"x\": 1}", "}", ", \"result_id\""];
        let mut sent = 0;
        for (i, part) in parts.iter().enumerate() {
            let mut c = chunk(json!({"content": part}), Value::Null);
            c["timings"] = json!({"prompt_n": 40, "cache_n": 100, "predicted_n": i + 1});
            a.add(&c);
            sent += 1;
            if a.may_cut(whole) {
                a.cut();
                break;
            }
        }
        assert_eq!(sent, 4, "cut where the arguments close, not before (a nested object) nor after");
        let r = a.response().unwrap();
        assert_eq!(
            r["choices"][0]["message"]["content"],
            "{\"name\": \"get_oncall\", \"arguments\": {\"team\": {\"x\": 1}}"
        );
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
        assert_eq!(r["usage"]["prompt_tokens"], 140);
        assert_eq!(r["usage"]["completion_tokens"], 4);
        assert_eq!(r["usage"]["prompt_tokens_details"]["cached_tokens"], 100);
        assert_eq!(r["cut_by_client"], CUT_REASON);
    }

    #[test]
    fn a_stream_that_ends_before_the_model_finished_is_no_answer() {
        let mut a = Assembled::default();
        a.add(&chunk(json!({"content": "The on-"}), Value::Null));
        assert!(a.response().is_none());
    }
}
