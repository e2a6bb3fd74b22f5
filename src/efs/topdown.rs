//! `benchgen efs topdown`: cross-check each candidate set from the user's side.
//!
//! Per set, the LLM (`writer_role`) writes N realistic user requests that any
//! member could serve. Each request is embedded and the `retrieve` most similar
//! tools of the whole catalog are retrieved; the LLM (`judge_role`) selects every
//! retrieved tool that can fully serve the request. Selections are compared
//! with the set and become review items:
//! - `outside-selected`: a tool outside the set was selected (a missing member?);
//! - `member-never-selected`: a member was never selected for any request (a false member?);
//! - `split-across-requests`: members were selected, but no request selected two
//!   of them together (the set may be two sets);
//! - `not-cross-checked`: with `max_sets`, a set outside the seeded sample (so a person,
//!   the review sheet and `final.json` can tell it from a set checked without findings).
//!
//! Each set is one [`crate::llm::batch`] item (write requests, embed, retrieve,
//! select per request), checkpointed with its LLM counts; LLM exchanges are in the
//! ledger (and its cache). A set whose answers stay invalid fails the stage unless
//! `[efs.topdown] max_failed_share` allows it (then it is listed in `failed.json`).
//! Outputs in `artifacts/efs-topdown/`: `results.json` (per set: requests, for
//! each the retrieved and selected tools, exchange ids, and ETOM's metrics
//! precision, recall, RAG hit) and `items.json` ([`ReviewItem`]s).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::TopdownSettings;
use super::build::{CandidateSet, Sets};
use super::verify::tool_vars;
use crate::embedding::Vectors;
use crate::ledger::{NewEvent, Parent, kind};
use crate::llm::Prompt;
use crate::llm::batch::{self, Batch, BatchOptions, Item};
use crate::model::{Catalog, Server, Tool};
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

/// A review item from the top-down check (`items.json` is a list of these).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReviewItem {
    pub set_id: String,
    /// `outside-selected`, `member-never-selected`, `split-across-requests`, or
    /// `not-cross-checked` (a set outside the seeded sample of `max_sets`), or
    /// `cross-check-failed` (its check failed; `max_failed_share` let the stage go on).
    pub kind: String,
    /// The tool concerned (empty for set-level items).
    pub tool_id: String,
    pub detail: String,
}

/// What the top-down check flags for review.
pub const ITEMS: Artifact<Vec<ReviewItem>> = Artifact::new("efs-topdown", "items.json");

pub static SPEC: StageSpec = StageSpec {
    name: "efs-topdown",
    command: "efs topdown",
    // 2: `max_sets` (a seeded sample of sets; `results.json` lists the others as `not_checked`).
    // v3: a set whose check failed gets a `cross-check-failed` review item.
    version: 3,
    about: "cross-check each set from the user's side: requests, retrieval, LLM selection",
    reads: &[
        crate::filter::CATALOG.read(),
        super::build::SETS.read(),
        crate::embed::INDEX.read(),
        crate::embed::VECTORS.read(),
    ],
    writes: &["results.json", "items.json", crate::llm::batch::FAILED_FILE],
    section: Some("efs"),
};

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Requests {
    /// Realistic, specific user requests that any of the tools could fully serve.
    pub requests: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Selection {
    /// Ids of every listed tool that can fully serve the request (possibly none).
    pub selected: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RequestResult {
    pub request: String,
    /// Retrieved tool ids, most similar first.
    pub retrieved: Vec<String>,
    /// Selected tool ids (only ids that were retrieved), sorted.
    pub selected: Vec<String>,
    /// Ids the judge named that were not retrieved (ignored, kept for audit).
    pub unknown: Vec<String>,
    /// Request hash of the judge's LLM exchange.
    pub exchange: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SetResult {
    pub set_id: String,
    /// Request hash of the writer's LLM exchange.
    pub requests_exchange: String,
    pub requests: Vec<RequestResult>,
    /// |selected ∩ set| / |selected|, over all requests.
    pub precision: f64,
    /// Members selected for at least one request / members.
    pub recall: f64,
    /// Some member was retrieved for every request.
    pub rag_hit: bool,
}

/// Top-`k` catalog rows by cosine to `q` (ties: lower row first).
pub fn retrieve(vectors: &Vectors, q: &[f32], k: usize) -> Vec<usize> {
    let mut scored: Vec<(f32, usize)> =
        (0..vectors.len()).map(|i| (vectors.row(i).iter().zip(q).map(|(a, b)| a * b).sum::<f32>(), i)).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(k).map(|(_, i)| i).collect()
}

/// Review items and metrics of one set's requests.
pub fn cross_check(set: &CandidateSet, requests: &[RequestResult]) -> (Vec<ReviewItem>, f64, f64, bool) {
    let members: BTreeSet<&str> = set.members.iter().map(String::as_str).collect();
    let mut items = Vec::new();
    let mut outside: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    let mut chosen: BTreeSet<&str> = BTreeSet::new();
    let (mut sel, mut hit) = (0usize, 0usize);
    for (i, r) in requests.iter().enumerate() {
        for t in &r.selected {
            sel += 1;
            if members.contains(t.as_str()) {
                hit += 1;
                chosen.insert(t);
            } else {
                outside.entry(t).or_default().push(i + 1);
            }
        }
    }
    for (t, reqs) in outside {
        items.push(ReviewItem {
            set_id: set.id.clone(),
            kind: "outside-selected".into(),
            tool_id: t.into(),
            detail: format!(
                "selected for request {} but not a member",
                reqs.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
            ),
        });
    }
    for m in &set.members {
        if !chosen.contains(m.as_str()) {
            items.push(ReviewItem {
                set_id: set.id.clone(),
                kind: "member-never-selected".into(),
                tool_id: m.clone(),
                detail: format!("not selected for any of {} requests", requests.len()),
            });
        }
    }
    let together = requests.iter().any(|r| r.selected.iter().filter(|t| members.contains(t.as_str())).count() >= 2);
    if chosen.len() >= 2 && !together {
        let per: Vec<String> = requests
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let m: Vec<&str> =
                    r.selected.iter().filter(|t| members.contains(t.as_str())).map(String::as_str).collect();
                format!("request {}: {}", i + 1, if m.is_empty() { "none".to_string() } else { m.join(", ") })
            })
            .collect();
        items.push(ReviewItem {
            set_id: set.id.clone(),
            kind: "split-across-requests".into(),
            tool_id: String::new(),
            detail: format!("no request selected two members together ({})", per.join("; ")),
        });
    }
    let precision = if sel == 0 { 0.0 } else { round4(hit as f64 / sel as f64) };
    let recall = if members.is_empty() { 0.0 } else { round4(chosen.len() as f64 / members.len() as f64) };
    let rag_hit =
        !requests.is_empty() && requests.iter().all(|r| r.retrieved.iter().any(|t| members.contains(t.as_str())));
    (items, precision, recall, rag_hit)
}

/// The writer's prompt for one set: its members described.
fn requests_prompt(t: &TopdownSettings, tools: &HashMap<&str, (&Server, &Tool)>, set: &CandidateSet) -> Result<Prompt> {
    let members: Vec<serde_json::Value> = set
        .members
        .iter()
        .map(|m| {
            tools
                .get(m.as_str())
                .map(|(sv, tl)| tool_vars(sv, tl))
                .with_context(|| format!("`{m}` is not in the catalog"))
        })
        .collect::<Result<_>>()?;
    Ok(Prompt::new(&t.requests_template, json!({"tools": members, "n": t.requests_per_set})))
}

/// The `retrieve` catalog tools nearest to a request, and the judge's prompt over them.
fn select_prompt(
    t: &TopdownSettings,
    tools: &HashMap<&str, (&Server, &Tool)>,
    vectors: &Vectors,
    request: &str,
    q: &[f32],
) -> (Vec<String>, Prompt) {
    let retrieved: Vec<String> =
        retrieve(vectors, q, t.retrieve).into_iter().map(|r| vectors.index.tools[r].id.clone()).collect();
    let cands: Vec<serde_json::Value> = retrieved
        .iter()
        .filter_map(|id| tools.get(id.as_str()))
        .map(|(_, tl)| json!({"id": tl.id, "description": tl.description}))
        .collect();
    (retrieved, Prompt::new(&t.select_template, json!({"request": request, "tools": cands})))
}

/// The writer's answer schema: at most `n` requests.
pub(crate) fn requests_schema(n: usize) -> serde_json::Value {
    crate::llm::schema_with_max_items::<Requests>("requests", n)
}

/// The judge's answer schema for one request: each selected id one of the retrieved ids,
/// at most all of them. A grammar-constrained server can then neither invent an id nor
/// loop over the list (the 1.5B model did: `"selected": ["github-mcp::create_issue", …`
/// until `max_tokens` cut the JSON); other servers' answers are checked and re-asked.
pub(crate) fn selection_schema(retrieved: &[String]) -> serde_json::Value {
    let mut s = crate::llm::schema_of::<Selection>();
    if !retrieved.is_empty() {
        // An empty `enum` is not a valid schema; `maxItems: 0` says it all then.
        s["properties"]["selected"]["items"] = json!({"type": "string", "enum": retrieved});
    }
    s["properties"]["selected"]["maxItems"] = json!(retrieved.len());
    s
}

/// What the judge's selection means for one request: only retrieved ids count
/// (others are kept as `unknown` for audit), both lists sorted and deduplicated.
fn request_result(request: String, retrieved: Vec<String>, sel: &Selection, exchange: String) -> RequestResult {
    let known: BTreeSet<&str> = retrieved.iter().map(String::as_str).collect();
    let (mut selected, mut unknown): (Vec<String>, Vec<String>) =
        sel.selected.iter().map(|x| crate::model::norm_tool_id(x)).partition(|x| known.contains(x.as_str()));
    selected.sort();
    selected.dedup();
    unknown.sort();
    unknown.dedup();
    RequestResult { request, retrieved, selected, unknown, exchange }
}

/// One set's checkpointed work: the writer's exchange and each request's result.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetRequests {
    set_id: String,
    requests_exchange: String,
    requests: Vec<RequestResult>,
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

pub struct TopdownStage;

impl Stage for TopdownStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Top-down cross-check: requests per set, retrieval, LLM selection.

         Reads `artifacts/filter/catalog.json`, `artifacts/efs-build/sets.json`,
         `artifacts/embed/` (`index.json`, `vectors.f32`) and `[efs.topdown]`.
         Writes `artifacts/efs-topdown/results.json` (requests, retrieved and selected
         tools, metrics per set) and `items.json` (review items: outside tools
         selected, members never selected, sets split across requests; and, not
         findings, `not-cross-checked` and `cross-check-failed`); `failed.json` lists
         sets whose check failed when `[efs.topdown] max_failed_share` lets some fail
         (kept as verified, each with a `cross-check-failed` item).
         With `max_sets = N`, a seeded sample of N sets is checked and the others are
         listed in `results.json` as `not_checked` (kept as verified, each with a
         `not-cross-checked` item).
         Resumable per set. Skipped when up to date."
    }

    fn roles(&self, settings: &Settings) -> Vec<ConfigRef> {
        let t = &super::efs_settings(settings).topdown;
        vec![
            ConfigRef::new("efs.topdown.writer_role", &t.writer_role),
            ConfigRef::new("efs.topdown.judge_role", &t.judge_role),
        ]
    }

    fn estimate(&self, settings: &Settings) -> Vec<crate::stage::Estimate> {
        use crate::stage::Estimate;
        let t = &super::efs_settings(settings).topdown;
        let built = super::build::SETS.on_disk(settings).map(|s| s.sets.len() as u64);
        // Sets are disjoint (union–find) and hold two tools or more.
        let (sets, basis) = match (built, crate::registry::catalog_size(settings, &[crate::filter::CATALOG])) {
            (Some(n), _) => (n, format!("{n} sets built")),
            (None, Some(c)) => (c.tools / 2, format!("≤ {} sets ({} tools / 2)", c.tools / 2, c.tools)),
            (None, None) => {
                let until = crate::stage::UNTIL_REGISTRY;
                let rows = [Estimate::unknown(&t.writer_role, until), Estimate::unknown(&t.judge_role, until)];
                return crate::stage::merge_by_role(rows)
                    .into_iter()
                    .map(|e| e.in_flight(t.concurrency.max(1)))
                    .collect();
            }
        };
        let (sets, basis) = match t.max_sets {
            Some(m) if (m as u64) < sets => (m as u64, format!("{m} of {basis} (`max_sets`)")),
            _ => (sets, basis),
        };
        let per = t.requests_per_set as u64;
        let rows = vec![
            Estimate::typed(&t.writer_role, sets, format!("{basis} × 1 request list")),
            Estimate::typed(&t.judge_role, sets * per, format!("{basis} × {per} requests judged")),
        ];
        crate::stage::merge_by_role(rows).into_iter().map(|e| e.in_flight(t.concurrency.max(1))).collect()
    }

    fn prompts(&self, settings: &Settings) -> Vec<PromptRef> {
        let t = &super::efs_settings(settings).topdown;
        let tool = json!({"id": "s::t", "name": "t", "server": "s", "description": "d",
            "parameters": [{"name": "p", "description": "d"}]});
        vec![
            PromptRef::new("efs.topdown.requests_template", &t.requests_template, json!({"tools": [tool], "n": 2})),
            PromptRef::new(
                "efs.topdown.select_template",
                &t.select_template,
                json!({"request": "r", "tools": [{"id": "s::t", "description": "d"}]}),
            ),
        ]
    }

    fn check(&self, settings: &Settings, problems: &mut Vec<crate::error::Problem>) {
        use crate::settings::check_positive;
        let t = &super::efs_settings(settings).topdown;
        check_positive(problems, "efs.topdown.requests_per_set", t.requests_per_set);
        check_positive(problems, "efs.topdown.retrieve", t.retrieve);
        check_positive(problems, "efs.topdown.concurrency", t.concurrency);
        if let Some(m) = t.max_sets {
            check_positive(problems, "efs.topdown.max_sets", m);
        }
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        let t = &super::efs_settings(settings).topdown;
        // The sample is drawn from the project seed, which matters only when there is one.
        let hashed = match t.max_sets {
            Some(_) => json!({"topdown": t, "seed": settings.project.seed}),
            None => json!({"topdown": t}),
        };
        Ok(Plan { inputs: vec![], config_hash: section_hash(&hashed)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let t = &super::efs_settings(s).topdown;
        let catalog: Catalog = inputs.json(&crate::filter::CATALOG)?;
        let sets: Sets = inputs.json(&super::build::SETS)?;
        let vectors = Vectors::read(inputs)?;
        let tools: HashMap<&str, (&Server, &Tool)> =
            catalog.tools().map(|(sv, tl)| (tl.id.as_str(), (sv, tl))).collect();
        let embedder = crate::embedding::Lazy::new(s);

        let opts = BatchOptions::new(SPEC.name, "topdown", "sets")
            .concurrency(t.concurrency.max(1))
            .max_failed_share(t.max_failed_share, "efs.topdown.max_failed_share")
            .fail_point("efs_topdown_set");
        let mut batch = Batch::new(ctx, opts)?;
        let (checked, not_checked) = sample_sets(&sets.sets, t.max_sets, s.project.seed);
        let items = checked.iter().map(|set| (format!("set:{}", set.id), *set)).collect();
        let (tools, vectors, embedder) = (&tools, &vectors, &embedder);
        let done = batch.run(items, |set: &CandidateSet, llm: Item| async move {
            let prompt = requests_prompt(t, tools, set)?;
            let schema = requests_schema(t.requests_per_set);
            let reqs = llm
                .typed_schema::<Requests>(&t.writer_role, &prompt, Some("requests"), ("Requests", schema), |_| Ok(()))
                .await?;
            let texts: Vec<String> = reqs.value.requests.iter().take(t.requests_per_set).cloned().collect();
            let qv = embedder.embed_async(texts.clone()).await?;
            let llm = &llm;
            let judged = futures::future::join_all(texts.iter().zip(&qv).enumerate().map(|(i, (text, q))| {
                let (retrieved, prompt) = select_prompt(t, tools, vectors, text, q);
                async move {
                    let part = format!("request{}", i + 1);
                    let schema = ("Selection", selection_schema(&retrieved));
                    let sel =
                        llm.typed_schema::<Selection>(&t.judge_role, &prompt, Some(&part), schema, |_| Ok(())).await?;
                    Ok(request_result(text.clone(), retrieved, &sel.value, sel.exchange))
                }
            }))
            .await;
            Ok(SetRequests { set_id: set.id.clone(), requests_exchange: reqs.exchange, requests: batch::all(judged)? })
        })?;

        let batch::Done { values, failed, .. } = done;
        let (results, mut items) = checked_results(&batch, &sets.sets, values, out)?;
        batch.finish(out)?;
        // A set whose check failed (allowed by `max_failed_share`) is not a set checked
        // without findings: it gets an item of its own, as a set outside the sample does.
        items.extend(failed.iter().map(check_failed_item));
        items.extend(not_checked_items(&not_checked, t.max_sets.unwrap_or(0)));
        let n = results.len().max(1) as f64;
        let mean = |f: &dyn Fn(&SetResult) -> f64| round4(results.iter().map(f).sum::<f64>() / n);
        out.json(
            "results.json",
            &json!({
                "sets": results,
                "mean_precision": mean(&|r| r.precision),
                "mean_recall": mean(&|r| r.recall),
                "rag_hit_rate": mean(&|r| f64::from(u8::from(r.rag_hit))),
                "not_checked": not_checked,
            }),
        )?;
        out.json(ITEMS.file, &items)?;
        out.count("sets", results.len());
        out.count("sets_not_checked", not_checked.len());
        out.count("sets_check_failed", failed.len());
        out.count("review_items", items.iter().filter(|i| is_finding(&i.kind)).count());
        let count = |k: &str| items.iter().filter(|i| i.kind == k).count();
        out.notes.push(format!(
            "{} sets cross-checked: {} outside tools selected, {} members never selected, {} sets split across requests",
            results.len(),
            count("outside-selected"),
            count("member-never-selected"),
            count("split-across-requests")
        ));
        if !not_checked.is_empty() {
            let (k, n, rest) = (checked.len(), sets.sets.len(), not_checked.len());
            out.notes.push(format!(
                "a seeded sample of {k} of the {n} sets was cross-checked (`efs.topdown.max_sets`); the other {rest} keep their verified members, each with a `{NOT_CHECKED}` review item"
            ));
        }
        Ok(())
    }
}

/// Each checked set's metrics and review items, with a verdict event per item linked to the
/// set's exchanges. Computed here, not checkpointed, so resumed sets give the same bytes.
fn checked_results(
    batch: &Batch<'_>,
    sets: &[CandidateSet],
    values: BTreeMap<String, SetRequests>,
    out: &mut Output,
) -> Result<(Vec<SetResult>, Vec<ReviewItem>)> {
    let by_id: HashMap<&str, &CandidateSet> = sets.iter().map(|x| (x.id.as_str(), x)).collect();
    let (mut results, mut items) = (Vec::new(), Vec::new());
    for r in values.into_values() {
        let (its, precision, recall, rag_hit) = cross_check(by_id[r.set_id.as_str()], &r.requests);
        let mut parents: Vec<i64> = Vec::new();
        for h in std::iter::once(&r.requests_exchange).chain(r.requests.iter().map(|q| &q.exchange)) {
            parents.extend(batch.exchange_event(h)?);
        }
        for it in &its {
            let mut ev = NewEvent::new(
                kind::VERDICT,
                Some(&format!("efs:{}", r.set_id)),
                json!({"check": "efs-topdown", "item": it}),
            );
            for p in &parents {
                ev = ev.with_parent(Parent::Id(*p));
            }
            out.event(ev);
        }
        items.extend(its);
        let SetRequests { set_id, requests_exchange, requests } = r;
        results.push(SetResult { set_id, requests_exchange, requests, precision, recall, rag_hit });
    }
    Ok((results, items))
}

/// The review item of a set outside the sample of `max_sets`.
pub const NOT_CHECKED: &str = "not-cross-checked";

/// The review item of a set whose cross-check failed (`max_failed_share` let it).
pub const CHECK_FAILED: &str = "cross-check-failed";

/// Whether a review item of this kind is a finding of the check (a set outside the sample,
/// or one whose check failed, is not: nothing was found about it).
pub fn is_finding(kind: &str) -> bool {
    kind != NOT_CHECKED && kind != CHECK_FAILED
}

fn check_failed_item(f: &batch::FailedItem) -> ReviewItem {
    ReviewItem {
        set_id: f.item.strip_prefix("set:").unwrap_or(&f.item).to_string(),
        kind: CHECK_FAILED.into(),
        tool_id: String::new(),
        detail: format!("not cross-checked: the check failed (`efs.topdown.max_failed_share`): {}", f.reason),
    }
}

/// One [`NOT_CHECKED`] review item per set outside the sample of `max_sets`.
fn not_checked_items(ids: &[String], max_sets: usize) -> impl Iterator<Item = ReviewItem> + '_ {
    ids.iter().map(move |id| ReviewItem {
        set_id: id.clone(),
        kind: NOT_CHECKED.into(),
        tool_id: String::new(),
        detail: format!("not cross-checked: outside the seeded sample of {max_sets} sets (`efs.topdown.max_sets`)"),
    })
}

/// The sets to cross-check — every set, or the `max_sets` whose ids rank first by a seeded
/// hash, in the built order — and the ids of the others, sorted. A set's rank depends on its
/// id and the seed alone: neither the order of `sets.json` nor a set added or removed
/// elsewhere changes which of the others are checked (a shuffle would redraw them all, and
/// their checkpointed checks would be lost).
fn sample_sets(sets: &[CandidateSet], max_sets: Option<usize>, seed: u64) -> (Vec<&CandidateSet>, Vec<String>) {
    let Some(m) = max_sets.filter(|m| *m < sets.len()) else {
        return (sets.iter().collect(), Vec::new());
    };
    let mut ranked: Vec<(String, &str)> = sets
        .iter()
        .map(|s| (crate::store::sha256_hex(format!("{seed}:efs-topdown:{}", s.id).as_bytes()), s.id.as_str()))
        .collect();
    ranked.sort();
    let chosen: std::collections::HashSet<&str> = ranked.iter().take(m).map(|(_, id)| *id).collect();
    let (keep, rest): (Vec<&CandidateSet>, Vec<&CandidateSet>) =
        sets.iter().partition(|s| chosen.contains(s.id.as_str()));
    let mut rest: Vec<String> = rest.into_iter().map(|s| s.id.clone()).collect();
    rest.sort();
    (keep, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(m: &[&str]) -> CandidateSet {
        CandidateSet {
            id: "S1".into(),
            members: m.iter().map(|s| s.to_string()).collect(),
            servers: vec![],
            evidence: vec![],
        }
    }

    fn req(retrieved: &[&str], selected: &[&str]) -> RequestResult {
        RequestResult {
            request: "r".into(),
            retrieved: retrieved.iter().map(|s| s.to_string()).collect(),
            selected: selected.iter().map(|s| s.to_string()).collect(),
            unknown: vec![],
            exchange: "sha256:1".into(),
        }
    }

    #[test]
    fn a_seeded_sample_of_sets_is_stable_and_lists_the_rest() {
        // Built in an order that is not the ids' (`sets.json` lists sets by first member).
        let sets: Vec<CandidateSet> = ["S9", "S2", "S7", "S1", "S5", "S3"]
            .iter()
            .map(|i| CandidateSet { id: i.to_string(), ..set(&["a::x", "b::y"]) })
            .collect();
        let (all, none) = sample_sets(&sets, None, 7);
        assert_eq!((all.len(), none.len()), (6, 0));
        let (all, none) = sample_sets(&sets, Some(6), 7);
        assert_eq!((all.len(), none.len()), (6, 0), "a cap at the count checks every set");
        let (two, rest) = sample_sets(&sets, Some(2), 7);
        assert_eq!((two.len(), rest.len()), (2, 4));
        let ids: Vec<&str> = two.iter().map(|s| s.id.as_str()).collect();
        let at = |id: &str| sets.iter().position(|s| s.id == id).unwrap();
        assert!(at(ids[0]) < at(ids[1]), "in the built order: {ids:?}");
        let mut reversed = sets.clone();
        reversed.reverse();
        let mut other: Vec<String> = sample_sets(&reversed, Some(2), 7).0.iter().map(|s| s.id.clone()).collect();
        other.sort();
        let mut same: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        same.sort();
        assert_eq!(other, same, "the draw does not depend on the sets' order");
        // A set added elsewhere leaves the others' ranks as they were: the sample keeps every
        // set it had unless the new one outranks it.
        let mut more = sets.clone();
        more.push(CandidateSet { id: "S4".into(), ..set(&["a::x", "b::y"]) });
        let grown: Vec<String> = sample_sets(&more, Some(2), 7).0.iter().map(|s| s.id.clone()).collect();
        assert!(grown.contains(&"S4".to_string()) || grown.iter().all(|g| same.contains(g)), "{grown:?} / {same:?}");
        assert!(same.iter().filter(|s| grown.contains(s)).count() >= 1, "{grown:?} / {same:?}");
        assert!(ids.iter().all(|i| !rest.iter().any(|r| r == i)), "{ids:?} / {rest:?}");
        assert!(rest.windows(2).all(|w| w[0] < w[1]), "{rest:?}");
        let again: Vec<&str> = sample_sets(&sets, Some(2), 7).0.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, again, "the same seed draws the same sets");
        let draws: BTreeSet<Vec<String>> =
            (0..20).map(|seed| sample_sets(&sets, Some(2), seed).0.iter().map(|s| s.id.clone()).collect()).collect();
        assert!(draws.len() > 1, "the seed decides the sample");
    }

    #[test]
    fn answer_schemas_bound_the_lists_and_allow_only_retrieved_ids() {
        let retrieved = vec!["a::x".to_string(), "b::y".to_string()];
        let v = jsonschema::validator_for(&selection_schema(&retrieved)).unwrap();
        assert!(v.is_valid(&json!({"selected": ["b::y"]})));
        assert!(v.is_valid(&json!({"selected": []})));
        assert!(!v.is_valid(&json!({"selected": ["c::z"]})), "an invented id");
        assert!(!v.is_valid(&json!({"selected": ["a::x", "b::y", "a::x"]})), "a loop over the list");
        let none = jsonschema::validator_for(&selection_schema(&[])).unwrap();
        assert!(none.is_valid(&json!({"selected": []})) && !none.is_valid(&json!({"selected": ["a::x"]})));
        let w = jsonschema::validator_for(&requests_schema(2)).unwrap();
        assert!(w.is_valid(&json!({"requests": ["one", "two"]})));
        assert!(!w.is_valid(&json!({"requests": ["one", "two", "three"]})));
    }

    #[test]
    fn cross_check_finds_outside_unselected_and_split() {
        let s = set(&["a::x", "b::x", "c::x"]);
        let reqs = [req(&["a::x", "b::x", "z::x"], &["a::x", "z::x"]), req(&["b::x"], &["b::x"])];
        let (items, p, r, hit) = cross_check(&s, &reqs);
        let kinds: Vec<(&str, &str)> = items.iter().map(|i| (i.kind.as_str(), i.tool_id.as_str())).collect();
        assert_eq!(
            kinds,
            [("outside-selected", "z::x"), ("member-never-selected", "c::x"), ("split-across-requests", "")]
        );
        assert_eq!((p, r, hit), (0.6667, 0.6667, true));
        // Selected together once: not split.
        let (items, ..) = cross_check(&s, &[req(&["a::x"], &["a::x", "b::x", "c::x"])]);
        assert!(items.is_empty());
    }
}
