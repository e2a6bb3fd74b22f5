//! `benchgen efs verify`: the LLM judges the candidate pairs, as `efs pairs` planned.
//!
//! Question (after ETOM's verifier): do two tools reach the same end result with
//! the same scope and depth, whatever their server, API or implementation? The
//! plan (`calls.jsonl`, see [`super::plan`]) says how it is asked:
//!
//! * listwise (default): one call shows an anchor tool and its candidates
//!   (`efs_verify_list.md`); the typed answer has one `{candidate, equivalent,
//!   reason}` per candidate, and an answer that misses or repeats a candidate is
//!   re-asked like a schema error;
//! * pairwise: one call per pair, tools shown as Tool A and Tool B in tool-name
//!   order (ETOM's), `{equivalent, reason}` (`efs_verify.md`).
//!
//! Either way every pair gets a verdict that feeds union–find unchanged. A pair
//! judged by several calls with different answers is not equivalent and listed
//! in `conflicts.json` ([`resolve`]).
//!
//! The fan-out is [`crate::llm::batch`]: resumable per call (each call's verdicts
//! are checkpointed as they arrive, with its LLM counts, so a killed run repeats no
//! call and the resumed run's counts equal an uninterrupted run's). Every verdict
//! becomes a `verdict` ledger event whose parent is the exchange. A call whose
//! answer stays invalid fails the stage after all other calls are done (a rerun
//! retries only those), unless `[efs.verify] max_failed_share` allows it: then its
//! pairs are left out and the call is listed in `failed.json`.
//!
//! Output `artifacts/efs-verify/verdicts.json`: `[{a, b, equivalent, reason,
//! exchange}]` sorted by `(a, b)`; `exchange` is the request hash of the LLM
//! exchange (stable across reruns, unlike event ids; the ledger resolves it).

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::plan::{PlannedCall, VerifyMode};
use crate::embedding::described_parameters;
use crate::ledger::{NewEvent, Parent, kind};
use crate::llm::Prompt;
use crate::llm::batch::{Batch, BatchOptions, Item};
use crate::model::{Catalog, Server, Tool};
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};
use crate::text::one_line;

/// One verdict (`verdicts.json` is a list of these, sorted by `(a, b)`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub a: String,
    pub b: String,
    pub equivalent: bool,
    pub reason: String,
    /// Request hash of the LLM exchange that gave the verdict (see [`super::exchange_hash`]).
    pub exchange: String,
}

/// Every pair's verdict.
pub const VERDICTS: Artifact<Vec<Verdict>> = Artifact::new("efs-verify", "verdicts.json");

pub static SPEC: StageSpec = StageSpec {
    name: "efs-verify",
    command: "efs verify",
    // 2: the pair answer's schema describes the answer to the model, not to developers.
    // 3: the answer's schema says what is asked, not "the X's typed answer" (developer
    //     wording the model read).
    version: 3,
    about: "the LLM judges the candidate pairs as planned (listwise: an anchor against its candidates), with reasons",
    reads: &[crate::filter::CATALOG.read(), super::pairs::PAIRS.read(), super::pairs::CALLS.read()],
    writes: &["verdicts.json", CONFLICTS_FILE, crate::llm::batch::FAILED_FILE],
    section: Some("efs"),
};

// The verifier's typed answer. `reason` comes before `equivalent` (here and in
// `CandidateVerdict`): the schema's property order is the order a grammar-constrained server
// writes the answer in, so the verdict follows the reasoning instead of being rationalised
// after it. Replaying the demo's seven planned calls, the 1.5B model found 1 of the 6
// planted equivalents with the verdict first and all 6 with the reason first (docs/efs.md).
// Doc comments here are the schema's descriptions, which the model reads: this note is a
// plain comment so that it stays out of the prompt.
/// Do the two tools do the same thing?
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairJudgement {
    /// One line saying why.
    pub reason: String,
    /// True when both tools reach the same end result with the same scope and depth.
    pub equivalent: bool,
}

/// Prompt variables describing one tool.
pub fn tool_vars(server: &Server, tool: &Tool) -> serde_json::Value {
    let params: Vec<serde_json::Value> = described_parameters(&tool.input_schema)
        .into_iter()
        .map(|(n, d)| json!({"name": n, "description": d}))
        .collect();
    json!({
        "id": tool.id,
        "name": tool.name,
        "server": server.name,
        "description": tool.description,
        "parameters": params,
    })
}

pub struct VerifyStage;

impl Stage for VerifyStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "The LLM judges the candidate pairs as planned: equivalent yes/no with a one-line reason.

         Reads `artifacts/efs-pairs/calls.jsonl` and `pairs.csv`, `artifacts/filter/catalog.json`,
         `[efs.verify]` and the prompt `pipeline/prompts/efs_verify_list.md` (listwise, the
         default: an anchor against its candidates) or `efs_verify.md` (pairwise). Writes
         `artifacts/efs-verify/verdicts.json`, `conflicts.json` (pairs judged differently by
         several calls; they count as not equivalent) and one `verdict` ledger event per pair
         (its parent is the LLM exchange); `failed.json` lists calls left out when
         `[efs.verify] max_failed_share` lets some fail. Resumable: an interrupted run
         keeps every call it got. Skipped when up to date."
    }

    fn roles(&self, settings: &Settings) -> Vec<ConfigRef> {
        vec![ConfigRef::new("efs.verify.role", &super::efs_settings(settings).verify.role)]
    }

    fn estimate(&self, settings: &Settings) -> Vec<crate::stage::Estimate> {
        let e = super::efs_settings(settings);
        let planned = crate::stage::jsonl_lines(&super::pairs::CALLS.path(settings));
        let (n, basis) = match (planned, crate::registry::catalog_size(settings, &[crate::filter::CATALOG])) {
            (Some(n), _) => (n, format!("{n} calls planned by `efs pairs`")),
            // Listwise, a tool anchors one call at most; pairwise, each of a tool's `top_k`
            // neighbours is a call.
            (None, Some(c)) => {
                let (all, per) = match e.verify.mode {
                    VerifyMode::Listwise => (c.tools, "1 call".to_string()),
                    VerifyMode::Pairwise => (c.tools * e.pairs.top_k as u64, format!("top_k {}", e.pairs.top_k)),
                };
                let n = crate::stage::capped(all, e.pairs.max_calls);
                (n, format!("≤ {n} calls ({} tools × {per}, max_calls {})", c.tools, e.pairs.max_calls))
            }
            (None, None) => {
                let until = crate::stage::UNTIL_REGISTRY;
                return vec![
                    crate::stage::Estimate::unknown(&e.verify.role, until).in_flight(e.verify.concurrency.max(1)),
                ];
            }
        };
        let v = &e.verify;
        vec![crate::stage::Estimate::typed(&v.role, n, basis).in_flight(v.concurrency.max(1))]
    }

    fn prompts(&self, settings: &Settings) -> Vec<PromptRef> {
        let tool = json!({"id": "s::t", "name": "t", "server": "s", "description": "d",
            "parameters": [{"name": "p", "description": "d"}]});
        let v = &super::efs_settings(settings).verify;
        // Both templates are checked whatever the mode, so switching modes never meets
        // a broken prompt.
        let mut cand = tool.clone();
        cand["n"] = json!(1);
        vec![
            PromptRef::new("efs.verify.template", &v.template, json!({"tool_a": tool, "tool_b": tool})),
            PromptRef::new("efs.verify.list_template", &v.list_template, json!({"anchor": tool, "candidates": [cand]})),
        ]
    }

    fn check(&self, settings: &Settings, problems: &mut Vec<crate::error::Problem>) {
        crate::settings::check_positive(
            problems,
            "efs.verify.concurrency",
            super::efs_settings(settings).verify.concurrency,
        );
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        let v = &super::efs_settings(settings).verify;
        Ok(Plan { inputs: vec![], config_hash: section_hash(&json!({"verify": v}))? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let v = &super::efs_settings(s).verify;
        let catalog: Catalog = inputs.json(&crate::filter::CATALOG)?;
        let pairs = super::pairs::read_pairs(inputs)?;
        let calls = super::pairs::read_calls(inputs)?;
        let tools: HashMap<&str, (&Server, &Tool)> = catalog.tools().map(|(sv, t)| (t.id.as_str(), (sv, t))).collect();
        let known: HashSet<(&str, &str)> = pairs.iter().map(|p| (p.a.as_str(), p.b.as_str())).collect();
        let mut items = Vec::with_capacity(calls.len());
        for c in &calls {
            if let Some([a, b]) = c.pairs.iter().find(|[a, b]| !known.contains(&(a.as_str(), b.as_str()))) {
                bail!(
                    "`artifacts/efs-pairs/calls.jsonl` call {} plans the pair `{a}` / `{b}`, which is not in `pairs.csv`; rerun `benchgen efs pairs`",
                    c.call
                );
            }
            items.push(call_item(&tools, v, c)?);
        }

        let opts = BatchOptions::new(SPEC.name, "verify", "calls")
            .concurrency(v.concurrency.max(1))
            .max_failed_share(v.max_failed_share, "efs.verify.max_failed_share")
            .fail_point(match v.mode {
                VerifyMode::Pairwise => "efs_verify_pair",
                VerifyMode::Listwise => "efs_verify_call",
            });
        let mut batch = Batch::new(ctx, opts)?;
        let role = v.role.as_str();
        let done = batch.run(items, |call: CallInput, llm: Item| async move {
            match call {
                CallInput::Pair { prompt, a, b } => {
                    let reply = llm.typed::<PairJudgement>(role, &prompt).await?;
                    Ok(CallRecord {
                        verdicts: vec![PairRecord {
                            a,
                            b,
                            equivalent: reply.value.equivalent,
                            reason: one_line(&reply.value.reason),
                        }],
                        exchange: reply.exchange,
                    })
                }
                CallInput::List { prompt, anchor, candidates } => {
                    let n = candidates.len();
                    let reply = llm.ask(role, &prompt, None, &list_answer(n)).await?;
                    let mut verdicts: Vec<PairRecord> = reply
                        .value
                        .verdicts
                        .iter()
                        .map(|cv| {
                            let other = &candidates[cv.candidate as usize - 1];
                            let (a, b) = if anchor <= *other { (&anchor, other) } else { (other, &anchor) };
                            PairRecord {
                                a: a.clone(),
                                b: b.clone(),
                                equivalent: cv.equivalent,
                                reason: one_line(&cv.reason),
                            }
                        })
                        .collect();
                    verdicts.sort_by(|x, y| (&x.a, &x.b).cmp(&(&y.a, &y.b)));
                    Ok(CallRecord { verdicts, exchange: reply.exchange })
                }
            }
        })?;
        let resumed = done.resumed;

        // Every pair's verdicts (one per call that judged it), then one verdict per pair.
        let mut by_pair: PairVerdicts = BTreeMap::new();
        for rec in done.values.values() {
            for pv in &rec.verdicts {
                by_pair.entry((pv.a.clone(), pv.b.clone())).or_default().push((
                    pv.equivalent,
                    pv.reason.clone(),
                    rec.exchange.clone(),
                ));
            }
        }
        let (verdicts, conflicts) = resolve(by_pair);
        for vd in &verdicts {
            let mut ev = NewEvent::new(
                kind::VERDICT,
                Some(&super::pairs::pair_key(&vd.a, &vd.b)),
                json!({"check": "efs-pair", "a": vd.a, "b": vd.b, "equivalent": vd.equivalent, "reason": vd.reason, "exchange": vd.exchange}),
            );
            if let Some(id) = batch.exchange_event(&vd.exchange)? {
                ev = ev.with_parent(Parent::Id(id));
            }
            out.event(ev);
        }
        batch.finish(out)?;
        let yes = verdicts.iter().filter(|x| x.equivalent).count();
        out.json(VERDICTS.file, &verdicts)?;
        out.json(CONFLICTS_FILE, &conflicts)?;
        out.count("calls", done.values.len());
        out.count("pairs", verdicts.len());
        out.count("equivalent", yes);
        out.count("conflicts", conflicts.len());
        out.notes.push(format!(
            "{} pairs judged in {} calls: {yes} equivalent, {} not ({resumed} calls resumed from an interrupted run)",
            verdicts.len(),
            done.values.len(),
            verdicts.len() - yes
        ));
        if !conflicts.is_empty() {
            out.notes.push(format!(
                "{} pairs got conflicting verdicts and count as not equivalent (conflicts.json)",
                conflicts.len()
            ));
        }
        Ok(())
    }
}

/// The file listing pairs judged differently by different calls.
pub const CONFLICTS_FILE: &str = "conflicts.json";

/// A pair judged differently by several calls.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Conflict {
    pub a: String,
    pub b: String,
    /// Every verdict, sorted by exchange.
    pub verdicts: Vec<ConflictVerdict>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConflictVerdict {
    pub equivalent: bool,
    pub reason: String,
    pub exchange: String,
}

/// Every verdict of each pair `(a, b)`: `(equivalent, reason, exchange)`, one per call.
pub type PairVerdicts = BTreeMap<(String, String), Vec<(bool, String, String)>>;

/// One verdict per pair. The conflict rule: when calls disagree on a pair, it is not
/// equivalent (a wrong "yes" merges two whole groups in union–find, a wrong "no"
/// loses one edge that other members or the top-down check often restore); the
/// verdict kept is the first "no" by exchange hash, and the pair is listed.
pub fn resolve(by_pair: PairVerdicts) -> (Vec<Verdict>, Vec<Conflict>) {
    let mut verdicts = Vec::with_capacity(by_pair.len());
    let mut conflicts = Vec::new();
    for ((a, b), mut vs) in by_pair {
        vs.sort_by(|x, y| x.2.cmp(&y.2).then(x.0.cmp(&y.0)));
        let disagree = vs.iter().any(|v| v.0) && vs.iter().any(|v| !v.0);
        let pick = if disagree { vs.iter().find(|v| !v.0).unwrap_or(&vs[0]) } else { &vs[0] };
        verdicts.push(Verdict {
            a: a.clone(),
            b: b.clone(),
            equivalent: pick.0,
            reason: pick.1.clone(),
            exchange: pick.2.clone(),
        });
        if disagree {
            conflicts.push(Conflict {
                a,
                b,
                verdicts: vs
                    .into_iter()
                    .map(|(equivalent, reason, exchange)| ConflictVerdict { equivalent, reason, exchange })
                    .collect(),
            });
        }
    }
    (verdicts, conflicts)
}

/// One planned call, ready to ask.
enum CallInput {
    Pair { prompt: Prompt, a: String, b: String },
    List { prompt: Prompt, anchor: String, candidates: Vec<String> },
}

/// The work item of a planned call: its key (a pair key in pairwise mode; in listwise
/// mode the anchor and a hash of the candidates, so a changed plan never reuses a
/// checkpoint) and its prompt.
fn call_item(
    tools: &HashMap<&str, (&Server, &Tool)>,
    v: &super::VerifySettings,
    c: &PlannedCall,
) -> Result<(String, CallInput)> {
    let get = |id: &str| {
        tools.get(id).copied().with_context(|| format!("planned call {}: tool `{id}` is not in the catalog", c.call))
    };
    match v.mode {
        VerifyMode::Pairwise => {
            let [a, b] = c.pairs.first().with_context(|| format!("planned call {} has no pair", c.call))?;
            if c.pairs.len() != 1 {
                bail!(
                    "planned call {} holds {} pairs, but `[efs.verify] mode` is pairwise; rerun `benchgen efs pairs`",
                    c.call,
                    c.pairs.len()
                );
            }
            let prompt = pair_prompt(tools, &v.template, a, b)?;
            Ok((super::pairs::pair_key(a, b), CallInput::Pair { prompt, a: a.clone(), b: b.clone() }))
        }
        VerifyMode::Listwise => {
            let (sa, ta) = get(&c.anchor)?;
            let candidates: Vec<String> = c.candidates().map(str::to_string).collect();
            let cands = candidates
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    let (sv, t) = get(id)?;
                    let mut vars = tool_vars(sv, t);
                    vars["n"] = json!(i + 1);
                    Ok(vars)
                })
                .collect::<Result<Vec<_>>>()?;
            let h = crate::store::sha256_hex(candidates.join("\n").as_bytes());
            let key = format!("list {} #{}", c.anchor, &h["sha256:".len().."sha256:".len() + 8]);
            let prompt = Prompt::new(&v.list_template, json!({"anchor": tool_vars(sa, ta), "candidates": cands}));
            Ok((key, CallInput::List { prompt, anchor: c.anchor.clone(), candidates }))
        }
    }
}

/// The listwise answer for `n` candidates: one verdict per candidate, in order, entry k
/// naming candidate k (see [`crate::llm::Answer::numbered`]); an answer that misses or
/// repeats a candidate is re-asked.
pub(crate) fn list_answer(n: usize) -> crate::llm::Answer<ListJudgement> {
    crate::llm::Answer::<ListJudgement>::of().numbered("verdicts", "candidate", n, "candidate", |j: &ListJudgement| {
        j.verdicts.iter().map(|v| u64::from(v.candidate)).collect()
    })
}

/// Which candidates do the same thing as the tool?
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ListJudgement {
    /// One verdict per candidate.
    pub verdicts: Vec<CandidateVerdict>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CandidateVerdict {
    /// The candidate's number as shown.
    pub candidate: u32,
    /// One line saying why.
    pub reason: String,
    /// True when the candidate reaches the same end result as the anchor with the same scope and depth.
    pub equivalent: bool,
}

/// One call's checkpointed verdicts.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallRecord {
    verdicts: Vec<PairRecord>,
    exchange: String,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PairRecord {
    a: String,
    b: String,
    equivalent: bool,
    reason: String,
}

/// The prompt for one pair. ETOM orders the two tools by tool name; ties by id.
fn pair_prompt(tools: &HashMap<&str, (&Server, &Tool)>, template: &str, a: &str, b: &str) -> Result<Prompt> {
    let (sa, ta) = *tools.get(a).with_context(|| format!("pair tool `{a}` is not in the catalog"))?;
    let (sb, tb) = *tools.get(b).with_context(|| format!("pair tool `{b}` is not in the catalog"))?;
    let (x, y) = if (&ta.name, &ta.id) <= (&tb.name, &tb.id) {
        (tool_vars(sa, ta), tool_vars(sb, tb))
    } else {
        (tool_vars(sb, tb), tool_vars(sa, ta))
    };
    Ok(Prompt::new(template, json!({"tool_a": x, "tool_b": y})))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(eq: bool, reason: &str, ex: &str) -> (bool, String, String) {
        (eq, reason.into(), ex.into())
    }

    #[test]
    fn disagreeing_calls_make_a_pair_not_equivalent_and_are_listed() {
        let mut by: PairVerdicts = BTreeMap::new();
        by.insert(("a".into(), "b".into()), vec![v(true, "same", "sha256:2"), v(false, "differs", "sha256:9")]);
        by.insert(("a".into(), "c".into()), vec![v(true, "same", "sha256:5"), v(true, "same too", "sha256:1")]);
        by.insert(("b".into(), "c".into()), vec![v(false, "no", "sha256:3")]);
        let (verdicts, conflicts) = resolve(by);
        let got: Vec<(&str, &str, bool, &str)> =
            verdicts.iter().map(|x| (x.a.as_str(), x.b.as_str(), x.equivalent, x.exchange.as_str())).collect();
        assert_eq!(got, [("a", "b", false, "sha256:9"), ("a", "c", true, "sha256:1"), ("b", "c", false, "sha256:3")]);
        assert_eq!(conflicts.len(), 1);
        assert_eq!((conflicts[0].a.as_str(), conflicts[0].b.as_str()), ("a", "b"));
        assert_eq!(conflicts[0].verdicts.len(), 2);
    }

    #[test]
    fn a_listwise_answer_must_judge_each_candidate_once() {
        let j = |ns: &[u32]| ListJudgement {
            verdicts: ns
                .iter()
                .map(|&n| CandidateVerdict { candidate: n, equivalent: false, reason: String::new() })
                .collect(),
        };
        let a = list_answer(3);
        let check_list = |j: &ListJudgement| a.run_check(j);
        assert!(check_list(&j(&[2, 1, 3])).is_ok());
        assert!(check_list(&j(&[1, 3])).unwrap_err().contains("candidates 2 are not judged"));
        assert!(check_list(&j(&[1, 1, 2, 3])).unwrap_err().contains("judged twice"));
        assert!(check_list(&j(&[0, 1, 2])).unwrap_err().contains("not one of the candidates"));
        assert!(check_list(&j(&[1, 2, 4])).is_err());
        // The schema says the same: three verdicts, entry k for candidate k.
        let v = a.schema["properties"]["verdicts"].clone();
        assert_eq!((v["minItems"].clone(), v["maxItems"].clone()), (json!(3), json!(3)));
        assert_eq!(v["prefixItems"][1]["properties"]["candidate"]["enum"], json!([2]));
        let answer = |ns: &[u32]| json!({"verdicts": ns.iter().map(|n| json!({"candidate": n, "reason": "r", "equivalent": true})).collect::<Vec<_>>()});
        assert!(a.accepts(&answer(&[1, 2, 3])).is_ok());
        assert!(a.accepts(&answer(&[1, 2])).is_err());
        assert!(a.accepts(&answer(&[0, 1, 2])).is_err());
    }
}
