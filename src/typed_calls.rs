//! Every typed LLM call of the code base, in one list ([`sites`]), and the property test
//! that walks it: answers generated at each schema's edges (each `minimum` and `maximum`,
//! each `enum` member, the shortest and longest allowed lists and strings, each optional
//! property present and absent) must pass the call's check. A typed call added without an
//! entry here fails [`every_typed_call_is_registered`].
//!
//! Tests only, at the crate root and in no family: the list names the answers of every
//! family, and every family imports `llm`, so inside `llm` (where it was, as
//! `llm::answer::sites`) it tied all of them into one import loop (issue 41).

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::llm::answer::{Answer, Site};

// The one edge generator, shared with the integration tests' scripted server.
#[path = "../tests/it/support/schema_edges.rs"]
mod edges;

/// One typed call: its file, what it asks, and its answer for a few items (the sizes that
/// shape a schema built per item: 1, a few, many candidates or turns).
pub struct Entry {
    pub file: &'static str,
    pub what: &'static str,
    pub answers: Vec<Site>,
}

fn entry(file: &'static str, what: &'static str, answers: Vec<Site>) -> Entry {
    Entry { file, what, answers }
}

fn one<T: serde::de::DeserializeOwned + 'static>(file: &'static str, what: &'static str, a: Answer<T>) -> Entry {
    entry(file, what, vec![a.site(file, what)])
}

fn of<T: serde::de::DeserializeOwned + schemars::JsonSchema + 'static>(
    file: &'static str,
    what: &'static str,
) -> Entry {
    one(file, what, Answer::<T>::of())
}

fn sizes<T: serde::de::DeserializeOwned + 'static>(
    file: &'static str,
    what: &'static str,
    ns: &[usize],
    f: impl Fn(usize) -> Answer<T>,
) -> Entry {
    entry(file, what, ns.iter().map(|&n| f(n).site(file, format!("{what} (n = {n})"))).collect())
}

/// The role-play goal's answer for a turn cap of `n`, over a catalog with one tool.
fn roleplay_goal(n: usize) -> Answer<crate::synth::roleplay::Goal> {
    crate::synth::roleplay::goal_answer(n, vec!["get_oncall".into()])
}

/// Every typed call site, in the order of their files. Keep in step with the code: the
/// call sites use the same functions (or `T`'s own schema where the entry says `of`).
pub fn sites() -> Vec<Entry> {
    use crate::{efs, filter, graph, levels, logs, registry, review, synth};
    let names = |n: usize| -> Vec<String> { (1..=n).map(|i| format!("srv::tool_{i}")).collect() };
    let taxonomy = |n: usize| -> Vec<String> { (1..=n).map(|i| format!("Label {i}")).collect() };
    // Both rules of a query's platform mention (L1, L2's tightly coupled tools: must; L2:
    // must not), each with a name that needs escaping in the pattern.
    let must = levels::l1::Mention::Must("Alpha+ Markets (beta)".into());
    let must_not = levels::l1::Mention::MustNot(vec!["Alpha+ Markets".into()]);
    let drafts = |n: usize| {
        let mention = if n % 2 == 1 { &must } else { &must_not };
        Answer::<levels::l1::Drafts>::new("Drafts", levels::l1::drafts_schema(n, mention))
    };
    let etom: Vec<String> = registry::categories::ETOM_TAXONOMY.iter().map(|s| s.to_string()).collect();
    let assignments = |lo: u8, hi: u8| review::assign::Assignments {
        rule: String::new(),
        dimensions: review::default_dimensions(),
        scale_min: lo,
        scale_max: hi,
        accept_min: lo,
        reviewers: vec![],
        samples: vec![],
        unassigned: vec![],
    };
    let mut all = vec![
        sizes("src/efs/topdown.rs", "efs topdown: requests", &[1, 3, 10], |n| {
            Answer::<efs::topdown::Requests>::new("Requests", efs::topdown::requests_schema(n))
        }),
        sizes("src/efs/topdown.rs", "efs topdown: selection", &[0, 1, 4], |n| {
            Answer::<efs::topdown::Selection>::new("Selection", efs::topdown::selection_schema(&names(n)))
        }),
        of::<efs::verify::PairJudgement>("src/efs/verify.rs", "efs verify: pairwise"),
        sizes("src/efs/verify.rs", "efs verify: listwise", &[1, 2, 10], efs::verify::list_answer),
        of::<filter::LlmVerdict>("src/filter.rs", "filter: classifier"),
        of::<graph::build::EdgeVerdict>("src/graph/build.rs", "graph build: edge"),
        sizes("src/levels/l1.rs", "levels L1/L2: drafts", &[1, 2, 5], drafts),
        of::<levels::l1::QueryCheck>("src/levels/l1.rs", "levels L1/L2: verify"),
        one("src/levels/l1.rs", "levels L1/L2: asked again", drafts(1)),
        of::<levels::l1::QueryCheck>("src/levels/l1.rs", "levels L1/L2: verify the query asked again"),
        of::<levels::l3::ChainVerdict>("src/levels/l3.rs", "levels L3: verify"),
        one("src/levels/l3.rs", "levels L3: query", levels::l3::query_answer()),
        sizes("src/levels/l3.rs", "levels L3: deps", &[1, 2, 5], |n| levels::l3::deps_answer(&names(n))),
        sizes("src/levels/l3.rs", "levels L3: deps of a query asked again", &[1, 2, 5], |n| {
            levels::l3::deps_answer(&names(n))
        }),
        of::<levels::l4::Feasibility>("src/levels/l4.rs", "levels L4: feasible"),
        sizes("src/levels/l4.rs", "levels L4: scenario", &[1, 2, 3], |n| {
            let services: Vec<Value> = (1..=n)
                .map(|s| json!({"n": s, "tools": (1..=s).map(|t| json!({"id": format!("srv{s}::tool_{t}")})).collect::<Vec<_>>()}))
                .collect();
            levels::l4::scenario_answer(&json!(services))
        }),
        of::<levels::l4::Quality>("src/levels/l4.rs", "levels L4: quality"),
        of::<levels::l4::Quality>("src/levels/l4.rs", "levels L4: quality of a query asked again"),
    ];
    all.extend(l5_sites());
    all.extend(llm_sites());
    all.extend(vec![
        of::<levels::profiles::PlatformAnswer>("src/levels/profiles.rs", "levels profiles: platform"),
        of::<levels::profiles::ProfileAnswer>("src/levels/profiles.rs", "levels profiles: profile"),
        one("src/levels/schemas.rs", "levels schemas: output schema", levels::schemas::schema_answer()),
        of::<logs::curate::NeedVerdict>("src/logs/curate.rs", "logs curate: need"),
        of::<logs::curate::AnswerVerdict>("src/logs/curate.rs", "logs curate: answer"),
        sizes("src/logs/curate.rs", "logs curate: label", &[1, 4], |n| logs::curate::label_answer(&taxonomy(n))),
        entry(
            "src/registry/categories.rs",
            "registry categories: classifier",
            vec![
                registry::categories::category_answer(&etom).site("src/registry/categories.rs", "ETOM taxonomy"),
                registry::categories::category_answer(&taxonomy(1)).site("src/registry/categories.rs", "one label"),
            ],
        ),
        entry(
            "src/review/prereview.rs",
            "review pre-review",
            vec![
                review::prereview::review_answer(&assignments(1, 5)).site("src/review/prereview.rs", "scale 1-5"),
                review::prereview::review_answer(&assignments(0, 10)).site("src/review/prereview.rs", "scale 0-10"),
            ],
        ),
        one("src/synth/chains.rs", "synth chains: query", synth::chains::query_answer()),
        sizes("src/synth/roleplay.rs", "synth roleplay: goal", &[1, 2, 4], roleplay_goal),
        entry(
            "src/synth/roleplay.rs",
            "synth roleplay: user turn",
            vec![
                synth::roleplay::user_answer(true, vec![]).site("src/synth/roleplay.rs", "first turn"),
                synth::roleplay::user_answer(false, vec!["Which alerts are open on the gateway?".into()])
                    .site("src/synth/roleplay.rs", "later turn"),
            ],
        ),
        one("src/synth/roleplay.rs", "synth roleplay: answer asked again", synth::gold::again_answer()),
        sizes("src/synth/validate.rs", "synth validate: dialogue", &[1, 2, 6], synth::validate::check_answer),
        one("src/synth/validate.rs", "synth validate: needed call", synth::gold::need_answer()),
        one("src/levels/plan_check.rs", "levels plan check: judge", synth::gold::need_answer()),
        // The query asked again: the same answer as L3's query.
        one("src/levels/plan_check.rs", "levels plan check: query asked again", levels::l3::query_answer()),
        one("src/synth/validate.rs", "synth validate: answer again", synth::gold::again_answer()),
    ]);
    all
}

/// `benchgen llm ping`'s typed calls.
fn llm_sites() -> Vec<Entry> {
    use crate::llm::ping::{PingAnswer, ProbeAnswer};
    vec![of::<PingAnswer>("src/llm/ping.rs", "llm ping"), of::<ProbeAnswer>("src/llm/ping.rs", "llm ping --probe")]
}

/// The L5 stage's typed calls, each with its own answer type's schema.
fn l5_sites() -> Vec<Entry> {
    use crate::levels::l5;
    vec![
        of::<l5::Label>("src/levels/l5.rs", "levels L5: label"),
        of::<l5::Consensus>("src/levels/l5.rs", "levels L5: consensus"),
        of::<l5::Tasks>("src/levels/l5.rs", "levels L5: tasks"),
        of::<l5::CanDo>("src/levels/l5.rs", "levels L5: can"),
        of::<l5::Challenge>("src/levels/l5.rs", "levels L5: challenge"),
        sizes("src/levels/l5.rs", "levels L5: persona queries", &[1, 3, 10], |n| {
            Answer::<l5::PersonaQueries>::new("PersonaQueries", l5::persona_queries_schema(n))
        }),
        of::<l5::Judged>("src/levels/l5.rs", "levels L5: judge"),
        of::<l5::SelfCheck>("src/levels/l5.rs", "levels L5: self-check"),
    ]
}

/// The value of `site` at its edges as `choices` pick them (see [`edges::edge_value`]).
fn generated(site: &Site, choices: &[usize]) -> Value {
    edges::edge_value(&site.schema, choices)
}

/// Asserts the site's check accepts `value`, which its schema allows.
fn assert_accepted(entry: &Entry, site: &Site, value: &Value) {
    let validator = jsonschema::validator_for(&site.schema).expect("the answer schema compiles");
    if let Some(e) = validator.iter_errors(value).next() {
        panic!("internal: the edge generator wrote a value the schema of {} refuses ({e}): {value}", site.what);
    }
    if let Err(e) = (site.accepts)(value) {
        panic!(
            "{} ({}): the schema allows an answer its check refuses: {e}\nanswer: {value}\nschema: {}",
            entry.what, entry.file, site.schema
        );
    }
}

#[test]
fn every_schema_edge_passes_its_check() {
    for e in sites() {
        for site in &e.answers {
            // Every choice at its lowest, at its highest, and each position k of every
            // `enum` (and every other choice) in turn.
            let sweeps: Vec<Vec<usize>> = (0..64).map(|k| vec![k]).chain([vec![usize::MAX]]).collect();
            for choices in sweeps {
                assert_accepted(&e, site, &generated(site, &choices));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Edges mixed at random: the lowest here, the highest there.
    #[test]
    fn mixed_schema_edges_pass_their_checks(choices in proptest::collection::vec(0usize..64, 1..48)) {
        for e in sites() {
            for site in &e.answers {
                assert_accepted(&e, site, &generated(site, &choices));
            }
        }
    }
}

/// The typed calls of one source text: `.typed…(` and `.ask(` calls outside comments.
fn typed_calls(text: &str) -> usize {
    let calls = ["typed", "typed_checked", "typed_schema", "typed_as", "typed_checked_as", "typed_for", "ask"];
    let mut n = 0;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        for (at, _) in code.match_indices('.') {
            let rest = &code[at + 1..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let after = rest[name.len()..].trim_start();
            if calls.contains(&name.as_str()) && (after.starts_with('(') || after.starts_with("::<")) {
                n += 1;
            }
        }
    }
    n
}

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src/ is readable") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_typed_call_is_registered() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    // The client and the batch handle define the calls (and delegate among themselves).
    let defining = ["src/llm/mod.rs", "src/llm/batch.rs", "src/llm/answer.rs", "src/typed_calls.rs"];
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        if defining.contains(&rel.as_str()) {
            continue;
        }
        let n = typed_calls(&std::fs::read_to_string(&f).unwrap());
        if n > 0 {
            found.insert(rel, n);
        }
    }
    let mut registered: BTreeMap<String, usize> = BTreeMap::new();
    for e in sites() {
        *registered.entry(e.file.to_string()).or_default() += 1;
    }
    assert_eq!(
        found, registered,
        "typed LLM calls per file (left: in the source, right: in `typed_calls::sites`); register every call \
         with its answer so the property test covers it"
    );
}

#[test]
fn the_counter_sees_calls_and_skips_comments() {
    let text = "let r = llm.typed::<A>(role, &p).await?;\n// llm.typed_as::<B>(…)\nlet q = llm\n    .ask(role, &p, None, &a)\n    .await;\nlet x = typed::pred_line(l);\nlet y = v.ask_more(1);";
    assert_eq!(typed_calls(text), 2);
}

#[test]
fn the_known_disagreements_are_gone() {
    // Issue 24's three: listwise `candidate` 0 and a short `verdicts` list, a dialogue judge
    // numbering turns from 0, and an output schema that is a string.
    let list = crate::efs::verify::list_answer(3);
    let v = &list.schema["properties"]["verdicts"];
    assert_eq!((&v["minItems"], &v["maxItems"]), (&json!(3), &json!(3)));
    assert_eq!(v["prefixItems"][0]["properties"]["candidate"]["minimum"], 1);
    assert_eq!(v["prefixItems"][2]["properties"]["candidate"]["maximum"], 3);
    let turns = crate::synth::validate::check_answer(2);
    let t = &turns.schema["properties"]["turns"];
    assert_eq!((&t["minItems"], &t["maxItems"]), (&json!(2), &json!(2)));
    assert_eq!(t["prefixItems"][0]["properties"]["turn"]["minimum"], 1);
    let zero = json!({"turns": [{"turn": 0, "addressed": true, "reason": "r"}, {"turn": 1, "addressed": true, "reason": "r"}]});
    assert!(turns.accepts(&zero).is_err());
    let schemas = crate::levels::schemas::schema_answer();
    assert!(schemas.accepts(&json!({"output_schema": "an object"})).is_err());
    assert_eq!(schemas.schema["properties"]["output_schema"]["type"], "object");
}

/// Every schema we send is one a grammar-following server takes. llama.cpp (the local
/// provider; vLLM and SGLang constrain the same way) turns the schema into a grammar before
/// it samples, and refuses what it cannot build with HTTP 400 ("Unable to generate parser
/// …": `"items": false` beside `prefixItems` was one). So each site's schema goes to the
/// real llama-server of `make setup` for one token. Skipped without the assets; CI fails.
#[test]
fn every_schema_is_taken_by_the_real_llama_server() {
    use crate::llm::config::{SMALL_LOCAL_MODEL, cache_dir};
    use crate::llm::local::{LocalServer, LocalSpec};
    let cache = cache_dir();
    let (binary, model) = (cache.join("llm/build/bin/llama-server"), cache.join("llm/models").join(SMALL_LOCAL_MODEL));
    if !(binary.is_file() && model.is_file()) {
        let msg = format!("llama-server or the 0.5B model is missing from `{}`; run `make setup`", cache.display());
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
        eprintln!("skipping: {msg}");
        return;
    }
    let logs = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let refused = rt.block_on(async {
        let spec = LocalSpec {
            binary,
            model,
            threads: 2,
            ctx_size: 4096,
            parallel: 1,
            startup_timeout: std::time::Duration::from_secs(300),
            log_dir: logs.path().to_path_buf(),
            extra_args: vec![],
        };
        let server = LocalServer::start(&spec).await.expect("the real llama-server starts");
        let http = reqwest::Client::new();
        let mut refused = Vec::new();
        for e in sites() {
            for site in &e.answers {
                let body = json!({
                    "messages": [{"role": "user", "content": "Answer with JSON."}],
                    "max_tokens": 1,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": site.schema}},
                });
                let r = http
                    .post(format!("{}/chat/completions", server.base_url()))
                    .header("content-type", "application/json")
                    .body(serde_json::to_vec(&body).unwrap())
                    .send()
                    .await
                    .unwrap();
                let status = r.status();
                if !status.is_success() {
                    let text = r.text().await.unwrap_or_default();
                    refused.push(format!("{} ({}): HTTP {status}: {text}", site.what, site.file));
                }
            }
        }
        refused
    });
    assert!(refused.is_empty(), "llama-server refuses these schemas:\n{}", refused.join("\n"));
}

#[test]
fn the_edges_catch_the_old_listwise_schema() {
    // Before issue 24: `T`'s own schema (`candidate` ≥ 0, any number of verdicts) and the
    // check 1..=N, each once. The lowest edge (no verdict) and candidate 0 are refused.
    use crate::efs::verify::ListJudgement;
    let old = Answer::<ListJudgement>::of().check(|j: &ListJudgement| {
        let ids: Vec<u64> = j.verdicts.iter().map(|v| u64::from(v.candidate)).collect();
        crate::llm::answer::check_numbered(&ids, 3, "candidate")
    });
    let site = old.site("src/efs/verify.rs", "the old listwise answer");
    let refused = (0..4).chain([usize::MAX]).filter(|&k| (site.accepts)(&generated(&site, &[k])).is_err()).count();
    assert!(refused >= 2, "the edges of the old schema include answers its check refuses");
}

/// Every `description` in `v`, with its JSON path.
fn descriptions(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("description", Value::String(s)) => out.push((path.to_string(), s.clone())),
                    _ => descriptions(x, &format!("{path}/{k}"), out),
                }
            }
        }
        Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| descriptions(x, &format!("{path}/{i}"), out)),
        _ => {}
    }
}

/// A schema's descriptions are what the model reads: a struct's doc comment that tells
/// developers why (which model did what, how decoding works) reaches the prompt too. The
/// need-check's once quoted the 0.5B judge's bad reason ("the user asks for the price, which
/// this tool returns"), and the judge of the 2026-12-06 demo gave exactly that reason.
#[test]
fn schema_descriptions_speak_to_the_model_not_to_developers() {
    let developer = [
        "0.5B",
        "1.5B",
        "schema order",
        "decodes",
        "docs/",
        "issue ",
        "a verdict written",
        "[`",
        "typed answer",
        "so the model",
        "the model reasons",
    ];
    let mut found = Vec::new();
    for e in sites() {
        for site in &e.answers {
            let mut d = Vec::new();
            descriptions(&site.schema, "", &mut d);
            for (path, text) in d {
                if developer.iter().any(|w| text.contains(w)) {
                    found.push(format!("{} ({}) at `{path}`: {text}", e.what, e.file));
                }
            }
        }
    }
    assert!(found.is_empty(), "descriptions written for developers:\n{}", found.join("\n"));
}
