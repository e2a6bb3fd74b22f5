//! The LLM client against the scripted test server: retries and back-off, the rate limiter,
//! the concurrency bound, structured output and re-asks, item-level failures, the ledger
//! cache, replay misses and cancellation.

use std::time::{Duration, Instant};

use crate::support::llm_project::{self, Project, Verdict, client, events, good, prompt, rt};
use crate::support::scripted_llm::{Answer, ScriptedLlm};
use benchgen::ledger::Ledger;
use benchgen::llm::{ChatMessage, LlmClient, LlmError, LlmMode, Prompt, ToolSpec};
use serde_json::json;

/// A temp project with one role `r` at `base_url` (extra TOML lines appended to the role).
fn project(base_url: &str, extra: &str) -> Project {
    llm_project::project(&format!("base_url = \"{base_url}\""), extra)
}

#[test]
fn retries_429_and_500_honouring_retry_after() {
    let s = ScriptedLlm::start(|r| match r.n {
        0 => Answer::too_many("1"),
        1 => Answer::status(500),
        _ => good(),
    });
    let p = project(&s.base_url(), "");
    let reply = rt().block_on(client(&p, LlmMode::Cached).typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    assert_eq!(reply.value, Verdict { verdict: "keep".into(), reason: "fine".into() });
    let reqs = s.requests();
    assert_eq!(reqs.len(), 3);
    // Retry-After: 1 was honoured (minus at most the 10% jitter), the 500 used the short back-off.
    assert!(reqs[1].at - reqs[0].at >= Duration::from_millis(900), "{:?}", reqs[1].at - reqs[0].at);
    let ex = events(&p, "llm.exchange");
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0]["attempts"], 3);
    assert_eq!(ex[0]["template"], "judge");
    assert!(ex[0]["template_hash"].as_str().unwrap().starts_with("sha256:"));
    // The system message: the template's, then the answer type's schema (the same for
    // every item).
    let system = ex[0]["request"]["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("You judge tools.\n\nAnswer with only a JSON value"), "{system}");
}

#[test]
fn exhausted_retries_name_stage_item_and_last_status() {
    let s = ScriptedLlm::start(|_| Answer::status(503));
    let p = project(&s.base_url(), "max_retries = 2");
    let c = client(&p, LlmMode::Cached);
    let err = rt().block_on(c.typed::<Verdict>("r", &prompt("a"), "srv::tool")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("stage `test`") && msg.contains("item `srv::tool`") && msg.contains("HTTP 503"), "{msg}");
    assert!(matches!(err, LlmError::Transport { attempts: 3, .. }), "{err:?}");
    assert_eq!(s.count(), 3);
    let f = events(&p, "llm.failure");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0]["last_status"], "HTTP 503");
    assert_eq!(c.counts()["llm_failures"], 1);
    assert_eq!(c.counts()["llm_retries"], 2);
}

#[test]
fn client_errors_are_not_retried() {
    let s = ScriptedLlm::start(|_| Answer::status(400));
    let p = project(&s.base_url(), "");
    let err = rt().block_on(client(&p, LlmMode::Cached).text("r", &prompt("a"), "a")).unwrap_err();
    assert!(err.to_string().contains("HTTP 400"), "{err}");
    assert_eq!(s.count(), 1);
}

#[test]
fn malformed_bodies_and_timeouts_are_retried() {
    let s = ScriptedLlm::start(|r| match r.n {
        0 => Answer::MalformedBody,
        1 => good().after(3000),
        _ => good(),
    });
    let p = project(&s.base_url(), "timeout_s = 0.5");
    let reply = rt().block_on(client(&p, LlmMode::Cached).typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    assert_eq!(reply.value.verdict, "keep");
    assert_eq!(s.count(), 3);
}

/// `n` typed calls on distinct prompts, all in flight at once; each must succeed.
fn call_concurrently(c: &LlmClient, n: usize) {
    rt().block_on(async {
        let calls: Vec<_> = (0..n)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move { c.typed::<Verdict>("r", &prompt(&format!("t{i}")), "x").await })
            })
            .collect();
        for h in calls {
            h.await.unwrap().unwrap();
        }
    });
}

#[test]
fn rate_limiter_spaces_requests() {
    let s = ScriptedLlm::start(|_| good());
    let p = project(&s.base_url(), "rpm = 600\nmax_concurrency = 8");
    let c = client(&p, LlmMode::Cached);
    let start = Instant::now();
    call_concurrently(&c, 5);
    let mut at: Vec<Instant> = s.requests().iter().map(|r| r.at).collect();
    at.sort();
    // 600 rpm = one admission per 100 ms: the k-th request cannot arrive before k × 100 ms.
    for (k, t) in at.iter().enumerate() {
        assert!(*t - start >= Duration::from_millis(100 * k as u64), "request {k} came after {:?}", *t - start);
    }
}

#[test]
fn concurrency_is_bounded_per_endpoint() {
    let s = ScriptedLlm::start(|_| good().after(150));
    let p = project(&s.base_url(), "max_concurrency = 3");
    let c = client(&p, LlmMode::Cached);
    call_concurrently(&c, 12);
    assert_eq!(s.count(), 12);
    assert!(s.max_in_flight() <= 3, "{}", s.max_in_flight());
    assert!(s.max_in_flight() >= 2, "requests did run concurrently: {}", s.max_in_flight());
}

/// A role's first live request goes alone, so a server that caches prompt prefixes has
/// processed the shared fixed part before the others arrive; the rest then go together.
#[test]
fn a_role_s_first_live_request_goes_alone_and_the_rest_then_go_together() {
    let s = ScriptedLlm::start(|_| good().after(300));
    let p = project(&s.base_url(), "max_concurrency = 4");
    let c = client(&p, LlmMode::Cached);
    call_concurrently(&c, 5);
    let mut at: Vec<Instant> = s.requests().iter().map(|r| r.at).collect();
    at.sort();
    assert_eq!(at.len(), 5);
    for (k, t) in at.iter().enumerate().skip(1) {
        assert!(*t - at[0] >= Duration::from_millis(300), "request {k} came {:?} after the first", *t - at[0]);
    }
    assert!(s.max_in_flight() >= 3, "the rest did run together: {}", s.max_in_flight());
}

#[test]
fn think_blocks_and_fenced_json_are_extracted() {
    let s = ScriptedLlm::start(|_| {
        Answer::text(
            "<think>{\"verdict\": \"drop\"}</think>Here:\n```json\n{\"verdict\": \"keep\", \"reason\": \"r\"}\n```",
        )
    });
    let p = project(&s.base_url(), "");
    let reply = rt().block_on(client(&p, LlmMode::Cached).typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    assert_eq!(reply.value, Verdict { verdict: "keep".into(), reason: "r".into() });
    // The schema went out as response_format and in the prompt.
    let body = &s.requests()[0].body;
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert!(body["response_format"]["json_schema"]["schema"]["properties"]["verdict"].is_object());
    // The answer type's schema is the same for every item: it joins the system message, the
    // fixed part a prefix-caching server reuses, and the user message holds only the data.
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["role"], "system");
    let system = msgs[0]["content"].as_str().unwrap();
    assert!(system.starts_with("You judge tools.") && system.contains("JSON Schema"), "{system}");
    assert!(!s.requests()[0].last_user().contains("JSON Schema"));
}

#[test]
fn a_schema_built_per_item_follows_the_data_and_two_items_share_their_fixed_prefix() {
    let s = ScriptedLlm::start(|_| good());
    let p = project(&s.base_url(), "");
    let c = client(&p, LlmMode::Cached);
    let schema = json!({"type": "object", "properties": {"verdict": {"type": "string", "enum": ["keep", "drop"]},
        "reason": {"type": "string"}}, "required": ["verdict", "reason"]});
    let per_item = benchgen::llm::Answer::<Verdict>::new("verdict_for_a", schema);
    rt().block_on(c.ask("r", &prompt("a"), "a", &per_item)).unwrap();
    let body = &s.requests()[0].body;
    let msgs = body["messages"].as_array().unwrap();
    assert!(!msgs[0]["content"].as_str().unwrap().contains("JSON Schema"));
    assert!(s.requests()[0].last_user().ends_with("```"), "after the data: {}", s.requests()[0].last_user());
    // Two items of one typed stage: everything up to the data is the same bytes.
    rt().block_on(c.typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    rt().block_on(c.typed::<Verdict>("r", &prompt("b"), "b")).unwrap();
    let reqs = s.requests();
    let text = |i: usize| serde_json::to_string(&reqs[i].body["messages"]).unwrap();
    let (one, two) = (text(1), text(2));
    let shared = one.chars().zip(two.chars()).take_while(|(a, b)| a == b).count();
    let data_at = one.find("Tool: ").expect("the user message's data");
    assert!(shared >= data_at, "the shared prefix ends at {shared}, before the data at {data_at}: {one}");
}

#[test]
fn a_schema_built_at_run_time_but_the_same_for_every_item_joins_the_system_message() {
    let s = ScriptedLlm::start(|_| good());
    let p = project(&s.base_url(), "");
    let c = client(&p, LlmMode::Cached);
    let schema = json!({"type": "object", "properties": {"verdict": {"type": "string", "enum": ["keep", "drop"]},
        "reason": {"type": "string"}}, "required": ["verdict", "reason"]});
    let rubric = benchgen::llm::Answer::<Verdict>::new("rubric", schema).same_for_every_item();
    rt().block_on(c.ask("r", &prompt("a"), "a", &rubric)).unwrap();
    rt().block_on(c.ask("r", &prompt("b"), "b", &rubric)).unwrap();
    let reqs = s.requests();
    let system = |i: usize| reqs[i].body["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(system(0).starts_with("You judge tools.") && system(0).contains("JSON Schema"), "{}", system(0));
    assert_eq!(system(0), system(1), "the two items share the system message, schema included");
    assert!(!reqs[0].last_user().contains("JSON Schema"));
    // The check beyond the schema still holds after the mark.
    let strict = benchgen::llm::Answer::<Verdict>::new("strict", json!({"type": "object"}))
        .same_for_every_item()
        .check(|v: &Verdict| if v.verdict == "never" { Ok(()) } else { Err("not `never`".into()) });
    assert!(rt().block_on(c.ask("r", &prompt("c"), "c", &strict)).is_err());
}

/// A typed request's body, field by field in order, with the answer's schema as
/// `response_format` and the answer's seed over the role's: its bytes are the request hash
/// and the cache key, so a change here would miss every answer a ledger holds.
#[test]
fn a_typed_request_body_keeps_its_fields_and_their_order() {
    let s = ScriptedLlm::start(|_| good());
    let p = project(&s.base_url(), "");
    let c = client(&p, LlmMode::Cached);
    let answer = benchgen::llm::Answer::<Verdict>::of().with_seed(Some(7));
    let reply = rt().block_on(c.ask("r", &prompt("a"), "a", &answer)).unwrap();
    let body = &s.requests()[0].body;
    let keys: Vec<&str> = body.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["model", "messages", "temperature", "seed", "response_format", "stream"]);
    assert_eq!(body["seed"], 7);
    let schema = benchgen::llm::schema_of::<Verdict>();
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "Verdict", "schema": schema}})
    );
    let format: Vec<&str> = body["response_format"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(format, ["type", "json_schema"]);
    // The exchange is named by the body it recorded.
    let request = serde_json::to_string(&events(&p, "llm.exchange")[0]["request"]).unwrap();
    assert_eq!(reply.exchange, benchgen::store::sha256_hex(request.as_bytes()));
}

#[test]
fn invalid_answers_are_re_asked_with_the_error() {
    let s = ScriptedLlm::start(|r| match r.n {
        0 => Answer::text("{\"verdict\": \"keep\""),
        1 => Answer::json(json!({"verdict": "keep"})),
        _ => good(),
    });
    let p = project(&s.base_url(), "reask = 2\njson_schema = false");
    let reply = rt().block_on(client(&p, LlmMode::Cached).typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    assert_eq!(reply.value.reason, "fine");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[0].body.get("response_format").is_none(), "json_schema = false: instruct only");
    assert!(reqs[1].last_user().contains("not valid"), "{}", reqs[1].last_user());
    assert!(
        reqs[2].last_user().contains("reason"),
        "the schema error names the missing field: {}",
        reqs[2].last_user()
    );
    // The re-asks are chained in the ledger.
    let l = Ledger::open(&p.settings.artifacts).unwrap();
    let lineage = l.lineage(&[reply.event_id]).unwrap();
    assert_eq!(lineage.iter().filter(|e| e.kind == "llm.exchange").count(), 3);
}

#[test]
fn a_final_invalid_answer_is_an_item_failure_recorded_with_raw_text() {
    let s = ScriptedLlm::constant("I cannot answer in JSON, sorry.");
    let p = project(&s.base_url(), "reask = 1");
    let c = client(&p, LlmMode::Cached);
    let err = rt().block_on(c.typed::<Verdict>("r", &prompt("a"), "srv::t")).unwrap_err();
    match &err {
        LlmError::Invalid { raw, attempts, item, event_id, .. } => {
            assert_eq!(raw, "I cannot answer in JSON, sorry.");
            assert_eq!(*attempts, 2);
            assert_eq!(item, "srv::t");
            assert!(event_id.is_some());
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert!(err.is_item_level());
    let f = events(&p, "llm.failure");
    assert_eq!(f[0]["raw"], "I cannot answer in JSON, sorry.");
    assert_eq!(f[0]["kind"], "invalid");
    // The client is still usable for the next item.
    assert_eq!(s.count(), 2);
}

#[test]
fn repeats_are_served_from_the_ledger_with_zero_requests() {
    let s = ScriptedLlm::start(|r| match r.n {
        0 => Answer::text("not json"),
        _ => good(),
    });
    let p = project(&s.base_url(), "");
    let first = rt().block_on(client(&p, LlmMode::Cached).typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    assert!(!first.cached);
    assert_eq!(s.count(), 2);
    // A new client (a rerun of the stage) with the same ledger: the re-ask chain replays.
    let c = client(&p, LlmMode::Cached);
    let again = rt().block_on(c.typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    assert!(again.cached);
    assert_eq!(again.value, first.value);
    assert_eq!(s.count(), 2, "no network on a rerun");
    assert_eq!(c.counts()["llm_cache_hits"], 2);
    assert_eq!(c.counts()["llm_calls"], 0);
    // Replay mode answers from the ledger too.
    let r = rt().block_on(client(&p, LlmMode::Replay).typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    assert!(r.cached);
    // Live mode calls again (and records the newest answer).
    rt().block_on(client(&p, LlmMode::Live).typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    assert!(s.count() > 2);
    // A different prompt is a different request.
    rt().block_on(client(&p, LlmMode::Cached).typed::<Verdict>("r", &prompt("b"), "b")).unwrap();
    let n = s.count();
    rt().block_on(client(&p, LlmMode::Cached).typed::<Verdict>("r", &prompt("b"), "b")).unwrap();
    assert_eq!(s.count(), n);
}

#[test]
fn replay_miss_names_hash_stage_and_item() {
    let s = ScriptedLlm::start(|_| good());
    let p = project(&s.base_url(), "");
    let err = rt().block_on(client(&p, LlmMode::Replay).typed::<Verdict>("r", &prompt("a"), "srv::x")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("sha256:") && msg.contains("stage `test`") && msg.contains("item `srv::x`"), "{msg}");
    assert_eq!(s.count(), 0);
}

#[test]
fn cancellation_stops_new_requests_and_keeps_finished_exchanges() {
    let s = ScriptedLlm::start(|r| if r.last_user().contains("fast") { good() } else { good().after(5000) });
    let p = project(&s.base_url(), "max_concurrency = 2");
    let c = client(&p, LlmMode::Cached);
    let started = Instant::now();
    let results = rt().block_on(async {
        c.typed::<Verdict>("r", &prompt("fast"), "fast").await.unwrap();
        let calls: Vec<_> = (0..6)
            .map(|i| {
                let c = c.clone();
                tokio::spawn(async move { c.typed::<Verdict>("r", &prompt(&format!("slow{i}")), "slow").await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.cancel();
        let mut out = Vec::new();
        for h in calls {
            out.push(h.await.unwrap());
        }
        out.push(c.typed::<Verdict>("r", &prompt("fast2"), "after").await);
        out
    });
    assert!(started.elapsed() < Duration::from_secs(4), "cancel must not wait for slow answers");
    assert!(results.iter().all(|r| matches!(r, Err(LlmError::Cancelled { .. }))), "{results:?}");
    // Only the two slow requests that were in flight (concurrency 2) reached the server.
    assert_eq!(s.count(), 3);
    let ex = events(&p, "llm.exchange");
    assert_eq!(ex.len(), 1, "the finished exchange is recorded");
}

#[test]
fn chat_turns_carry_tools_and_parse_tool_calls() {
    let s = ScriptedLlm::start(|_| Answer::ToolCalls(vec![("get_weather".into(), json!({"city": "Oslo"}))]));
    let p = project(&s.base_url(), "");
    let c = client(&p, LlmMode::Cached);
    let tools = [ToolSpec {
        name: "get_weather".into(),
        description: "Weather for a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }];
    let msgs = [ChatMessage::System("be brief".into()), ChatMessage::User("weather in Oslo?".into())];
    let turn = rt().block_on(c.chat("r", &msgs, &tools, "task-1")).unwrap().value;
    assert_eq!(turn.tool_calls.len(), 1);
    assert_eq!(turn.tool_calls[0].name, "get_weather");
    assert_eq!(turn.tool_calls[0].arguments, json!({"city": "Oslo"}));
    assert_eq!(turn.finish_reason.as_deref(), Some("tool_calls"));
    let body = &s.requests()[0].body;
    assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(body["messages"][1]["content"], "weather in Oslo?");
    // Only the local server is sent the text-call stops (tests/it/llm_local.rs): a vLLM
    // server may read calls written as JSON lines as parallel calls, and OpenAI's reasoning
    // models refuse `stop`.
    assert!(body.get("stop").is_none(), "{body}");
    let cfg = p.dir.path().join("pipeline/test.toml");
    std::fs::write(
        &cfg,
        std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("\"vllm\"", "\"openai\"\napi_key_env = \"BENCHGEN_TEST_KEY_STOP\""),
    )
    .unwrap();
    // SAFETY: set before the client reads it; no other test of this binary reads this name.
    unsafe { std::env::set_var("BENCHGEN_TEST_KEY_STOP", "sk-test-stop") };
    let openai = Project { settings: benchgen::settings::Settings::load(&cfg).unwrap(), dir: p.dir };
    rt().block_on(client(&openai, LlmMode::Cached).chat("r", &msgs, &tools, "task-2")).unwrap();
    let body = &s.requests()[1].body;
    assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    assert!(body.get("stop").is_none(), "{body}");
}

#[test]
fn missing_template_variables_are_errors_not_empty_strings() {
    let s = ScriptedLlm::start(|_| good());
    let p = project(&s.base_url(), "");
    let err = rt()
        .block_on(client(&p, LlmMode::Cached).typed::<Verdict>("r", &Prompt::new("judge", json!({})), "a"))
        .unwrap_err();
    assert!(err.to_string().contains("undefined"), "{err}");
    assert_eq!(s.count(), 0);
}

#[test]
fn api_key_is_sent_but_never_recorded() {
    let s = ScriptedLlm::start(|_| good());
    let p = project(&s.base_url(), "api_key_env = \"BENCHGEN_TEST_KEY_CLIENT\"");
    // SAFETY: set before any client reads it; this test binary's other tests use other names.
    unsafe { std::env::set_var("BENCHGEN_TEST_KEY_CLIENT", "sk-test-abcdef123456") };
    rt().block_on(client(&p, LlmMode::Cached).typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    assert_eq!(s.requests()[0].authorization.as_deref(), Some("Bearer sk-test-abcdef123456"));
    let ledger = std::fs::read(p.settings.artifacts.join("ledger.sqlite")).unwrap();
    assert!(!String::from_utf8_lossy(&ledger).contains("sk-test-abcdef123456"));
}

/// Two roles that differ only in `base_url` (the same model name, as two vLLM servers that
/// serve different checkpoints under one name) each get their own answers: the exchange
/// key holds the endpoint identity. An older ledger, keyed by the body alone, still replays
/// for the role that recorded it and for no other.
#[test]
fn roles_differing_only_in_base_url_never_share_an_exchange() {
    let a = ScriptedLlm::start(|_| good());
    let b = ScriptedLlm::start(|_| Answer::json(json!({"verdict": "drop", "reason": "other server"})));
    let second = format!(
        "[llm.roles.r2]\nprovider = \"vllm\"\nbase_url = \"{}\"\nmodel = \"m\"\ntemperature = 0.0\nseed = 1\nbackoff_ms = 20\n",
        b.base_url()
    );
    let p = project(&a.base_url(), &second);
    let c = client(&p, LlmMode::Cached);
    let first = rt().block_on(c.typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    let other = rt().block_on(c.typed::<Verdict>("r2", &prompt("a"), "a")).unwrap();
    assert_eq!(first.value.verdict, "keep");
    assert!(!other.cached, "r2 was answered from r's exchange");
    assert_eq!(other.value.verdict, "drop");
    assert_eq!((a.count(), b.count()), (1, 1));
    // The same request (one request hash), two endpoints, two recorded exchanges.
    assert_eq!(first.exchange, other.exchange);
    let ex = events(&p, "llm.exchange");
    assert_eq!(ex.len(), 2);
    assert!(ex[0]["endpoint"].as_str().unwrap().starts_with("vllm|remote:http://127.0.0.1:"), "{}", ex[0]);
    assert_ne!(ex[0]["endpoint"], ex[1]["endpoint"]);
    // Each replays its own.
    let c = client(&p, LlmMode::Replay);
    assert_eq!(rt().block_on(c.typed::<Verdict>("r", &prompt("a"), "a")).unwrap().value.verdict, "keep");
    assert_eq!(rt().block_on(c.typed::<Verdict>("r2", &prompt("a"), "a")).unwrap().value.verdict, "drop");

    // An older ledger: r's exchange as it was recorded before (no `endpoint`), keyed by its
    // body's hash alone.
    let mut l = Ledger::open(&p.settings.artifacts).unwrap();
    let payload: String = l
        .connection()
        .query_row(
            "SELECT payload FROM events WHERE kind = 'llm.exchange' AND json_extract(payload, '$.role') = 'r' ORDER BY id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let mut old: serde_json::Value = serde_json::from_str(&payload).unwrap();
    old.as_object_mut().unwrap().remove("endpoint");
    let legacy = benchgen::store::sha256_hex(&serde_json::to_vec(&old["request"]).unwrap());
    let run = l.begin_run("test", "", "0").unwrap();
    let ids = l.append(run, "test", &[benchgen::ledger::NewEvent::new("llm.exchange", Some("a"), old)]).unwrap();
    l.connection().execute("DELETE FROM llm_cache", []).unwrap();
    l.connection()
        .execute(
            "INSERT INTO llm_cache(key, event_id, created_at) VALUES (?1, ?2, '')",
            rusqlite::params![legacy, ids[0]],
        )
        .unwrap();
    drop(l);
    let c = client(&p, LlmMode::Replay);
    let replayed = rt().block_on(c.typed::<Verdict>("r", &prompt("a"), "a")).unwrap();
    assert!(replayed.cached && replayed.value.verdict == "keep");
    let miss = rt().block_on(c.typed::<Verdict>("r2", &prompt("a"), "a")).unwrap_err();
    assert!(matches!(miss, LlmError::ReplayMiss { .. }), "the older exchange is r's only: {miss:?}");
}
