//! Property tests of the corrected metrics: a perfect oracle scores 100 % everywhere, an
//! empty prediction scores 0 except on L5, permuting calls inside a parallel group never
//! changes the score, and any EFS alternative is accepted.

use crate::support::score_fixtures;

use benchgen::model::{Difficulty, Family, Kind, PlanCall, Sample, Turn};
use benchgen::score::{GoldCall, Item, Mode, NormPred, Pred, PredCall, RawPred, SampleResult, ScoreCtx, score_item};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::json;

const POOL: usize = 6;

fn tool(family: Family, i: usize) -> String {
    match family {
        // Few tools so that one tool often serves several reference calls.
        Family::Etom => format!("Srv {}::tool{}", i % 2, i),
        Family::Finmcp => format!("Tool{i}"),
    }
}

/// One reference call: alternative tool indices, dependencies on earlier calls, group.
type PlanStep = (Vec<usize>, Vec<usize>, u32);

/// A reference plan: per call (alternative tool indices, dependencies on earlier calls).
#[derive(Debug, Clone)]
struct Plan {
    kind: Kind,
    turns: Vec<Vec<PlanStep>>,
}

fn etom_plan() -> impl Strategy<Value = Plan> {
    (
        1u8..=4,
        1usize..=7,
        prop::collection::vec((prop::collection::vec(0..POOL, 1..=3), prop::collection::vec(any::<bool>(), 7)), 7),
    )
        .prop_map(|(level, n, raw)| {
            let kind = Kind::from_level(level).unwrap();
            let n = match kind {
                Kind::L1 | Kind::L2 => 1,
                _ => n.max(2),
            };
            let calls = (0..n)
                .map(|i| {
                    let (alts, dep_bits) = &raw[i];
                    let mut alts: Vec<usize> =
                        if kind == Kind::L3 || kind == Kind::L1 { alts[..1].to_vec() } else { alts.clone() };
                    alts.dedup();
                    let deps = if matches!(kind, Kind::L3 | Kind::L4) {
                        (0..i).filter(|&d| dep_bits[d]).collect()
                    } else {
                        vec![]
                    };
                    (alts, deps, 0)
                })
                .collect();
            Plan { kind, turns: vec![calls] }
        })
}

fn finmcp_plan() -> impl Strategy<Value = Plan> {
    prop::collection::vec(prop::collection::vec(prop::collection::vec(0..POOL, 1..=3), 0..=3), 1..=3).prop_filter_map(
        "at least one call",
        |turns| {
            let total: usize = turns.iter().flatten().map(Vec::len).sum();
            if total == 0 {
                return None;
            }
            let kind = if turns.len() > 1 {
                Kind::MultiTurn
            } else if total == 1 {
                Kind::SingleTool
            } else {
                Kind::MultiTool
            };
            let turns = turns
                .into_iter()
                .map(|groups| {
                    groups
                        .into_iter()
                        .enumerate()
                        .flat_map(|(g, calls)| calls.into_iter().map(move |c| (vec![c], vec![], g as u32)))
                        .collect()
                })
                .collect();
            Some(Plan { kind, turns })
        },
    )
}

fn item(plan: &Plan) -> Item {
    let family = plan.kind.family();
    let turns: Vec<Vec<GoldCall>> = plan
        .turns
        .iter()
        .map(|t| {
            t.iter()
                .map(|(alts, deps, g)| GoldCall {
                    alts: alts.iter().map(|&a| tool(family, a).into()).collect(),
                    group: *g,
                    deps: deps.clone(),
                })
                .collect()
        })
        .collect();
    let n = turns.iter().map(Vec::len).sum();
    Item {
        id: "x".into(),
        family,
        kind: plan.kind,
        difficulty: Difficulty::from_calls(n),
        given_difficulty: Difficulty::from_calls(n),
        category: "c".into(),
        scenario: "c / s".into(),
        turns,
        raw: None,
        defects: vec![],
        file: 0,
        record: 1,
    }
}

fn depth(calls: &[GoldCall]) -> Vec<i64> {
    let mut d = vec![0i64; calls.len()];
    for i in 0..calls.len() {
        d[i] = calls[i].deps.iter().map(|&j| d[j] + 1).max().unwrap_or(0);
    }
    d
}

/// A perfect prediction: every reference call once, through alternative `pick`, in a valid
/// order; ETOM calls grouped by dependency depth (or one per step), FinMCP by reference group
/// (sequential FinMCP calls would change the grouped structure, which is the point of it).
fn oracle(it: &Item, pick: usize, sequential: bool) -> NormPred {
    let turns = it
        .turns
        .iter()
        .map(|calls| {
            let key: Vec<i64> = if it.family == Family::Etom {
                depth(calls)
            } else {
                calls.iter().map(|c| i64::from(c.group)).collect()
            };
            let mut idx: Vec<usize> = (0..calls.len()).collect();
            idx.sort_by_key(|&i| key[i]);
            idx.iter()
                .enumerate()
                .map(|(pos, &i)| PredCall {
                    tool: calls[i].alts[pick % calls[i].alts.len()].to_string(),
                    group: if sequential && it.family == Family::Etom { pos as i64 } else { key[i] },
                })
                .collect()
        })
        .collect();
    NormPred { turns, refusal: false, notes: vec![] }
}

fn score(it: &Item, norm: NormPred) -> SampleResult {
    let ctx = ScoreCtx::new(Mode::Corrected, std::slice::from_ref(it));
    score_item(&ctx, it, Some(&Pred::Ok { norm, raw: RawPred::Unified }))
}

fn perfect(r: &SampleResult) -> bool {
    let c = r.calls.unwrap();
    r.em && c.p == 1.0
        && c.r == 1.0
        && c.f1 == 1.0
        && r.node_set_em.unwrap_or(true)
        && r.tool_set.is_none_or(|s| s.f1 == 1.0)
}

fn any_plan() -> impl Strategy<Value = Plan> {
    prop_oneof![etom_plan(), finmcp_plan()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn perfect_oracle_scores_100(plan in any_plan(), pick in 0usize..3, sequential in any::<bool>()) {
        let it = item(&plan);
        let r = score(&it, oracle(&it, pick, sequential));
        prop_assert!(perfect(&r), "{r:?}");
    }

    #[test]
    fn empty_prediction_scores_zero_except_l5(plan in any_plan(), refusal in any::<bool>()) {
        let it = item(&plan);
        let r = score(&it, NormPred { turns: vec![], refusal, notes: vec![] });
        let c = r.calls.unwrap();
        prop_assert!(!r.em);
        prop_assert_eq!((c.p, c.r, c.f1), (0.0, 0.0, 0.0));
        if let Some(s) = r.tool_set {
            prop_assert_eq!((s.p, s.r, s.f1), (0.0, 0.0, 0.0));
        }
        let l5 = Item { kind: Kind::L5, family: Family::Etom, turns: vec![vec![]], ..it };
        let r = score(&l5, NormPred { turns: vec![], refusal, notes: vec![] });
        prop_assert!(r.em && r.calls.unwrap().f1 == 1.0);
    }

    #[test]
    fn permuting_inside_a_parallel_group_changes_nothing(
        plan in any_plan(),
        pick in 0usize..3,
        drops in prop::collection::vec(any::<bool>(), 12),
        extras in prop::collection::vec((0..POOL, 0i64..4), 0..3),
        seed in any::<u64>(),
    ) {
        let it = item(&plan);
        // A perturbed oracle: some calls dropped, some wrong or duplicate calls added.
        let mut pred = oracle(&it, pick, false);
        for t in &mut pred.turns {
            let mut k = 0;
            t.retain(|_| { k += 1; !drops[(k - 1) % drops.len()] });
            for &(tl, g) in &extras {
                t.push(PredCall { tool: tool(it.family, tl), group: g });
            }
            t.sort_by_key(|c| c.group);
        }
        let base = score(&it, pred.clone());
        // Shuffle within each group (deterministic from the seed).
        let mut s = seed;
        for t in &mut pred.turns {
            let mut start = 0;
            while start < t.len() {
                let g = t[start].group;
                let end = start + t[start..].iter().take_while(|c| c.group == g).count();
                for i in (start + 1..end).rev() {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let j = start + (s >> 33) as usize % (i - start + 1);
                    t.swap(i, j);
                }
                start = end;
            }
        }
        let shuffled = score(&it, pred);
        prop_assert_eq!(base.em, shuffled.em);
        prop_assert_eq!(base.calls, shuffled.calls);
        prop_assert_eq!(base.tool_set, shuffled.tool_set);
        prop_assert_eq!(base.node_set_em, shuffled.node_set_em);
    }

    #[test]
    fn any_efs_alternative_is_accepted(alts in prop::collection::btree_set(0..POOL, 1..=POOL), pick in 0usize..POOL) {
        let alts: Vec<usize> = alts.into_iter().collect();
        let plan = Plan { kind: Kind::L2, turns: vec![vec![(alts.clone(), vec![], 0)]] };
        let it = item(&plan);
        let chosen = tool(Family::Etom, alts[pick % alts.len()]);
        let r = score(&it, NormPred { turns: vec![vec![PredCall { tool: chosen, group: 0 }]], refusal: false, notes: vec![] });
        prop_assert!(perfect(&r));
    }
}

/// Unified samples and oracle predictions through files and the whole report: every row of
/// every section is 100 %.
#[test]
fn oracle_report_is_100_everywhere() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let plans: Vec<Plan> = (0..80).map(|_| any_plan().new_tree(&mut runner).unwrap().current()).collect();
    let f = score_fixtures::Fixture::new();
    let mut samples = Vec::new();
    let mut preds = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        let mut it = item(plan);
        it.id = format!("s{i}");
        let s = Sample {
            id: it.id.clone(),
            family: it.family,
            kind: it.kind,
            scenario: vec![format!("main{}", i % 3), format!("sub{}", i % 5)],
            turns: it
                .turns
                .iter()
                .map(|t| Turn {
                    user: "u".into(),
                    reference_plan: t
                        .iter()
                        .map(|c| PlanCall {
                            alternatives: c.alts.iter().map(|a| a.to_string()).collect(),
                            group: c.group,
                            depends_on: c.deps.clone(),
                        })
                        .collect(),
                    gold_reply: None,
                    trajectory: Vec::new(),
                })
                .collect(),
            out_of_scope: false,
            difficulty: it.difficulty,
            provenance_id: String::new(),
            author: None,
        };
        samples.push(serde_json::to_value(&s).unwrap());
        let o = oracle(&it, i, i % 2 == 0);
        let turns: Vec<_> = o
            .turns
            .iter()
            .map(|t| json!({"calls": t.iter().map(|c| json!({"tool": c.tool, "group": c.group})).collect::<Vec<_>>()}))
            .collect();
        preds.push(json!({"id": it.id, "turns": turns}));
    }
    samples.push(json!({"id": "oos", "family": "etom", "kind": "L5", "scenario": [], "turns": [{"user": "u", "reference_plan": []}], "out_of_scope": true, "difficulty": "easy", "provenance_id": ""}));
    preds.push(json!({"id": "oos", "refusal": true}));
    let bench = f.jsonl("bench.jsonl", &samples);
    let pred = f.jsonl("pred.jsonl", &preds);
    let rep = score_fixtures::run(vec![bench], pred, Mode::Corrected);
    assert!(rep.diagnostics.is_empty(), "{:?}", rep.diagnostics);
    assert_eq!(rep.samples, 81);
    for s in &rep.sections {
        for r in &s.rows {
            let ok = r.em == 1.0
                && r.calls_macro.is_some_and(|t| t.p == 1.0 && t.r == 1.0 && t.f1 == 1.0)
                && r.calls_micro.is_some_and(|t| t.p == 1.0 && t.r == 1.0 && t.f1 == 1.0)
                && r.node_set_em.is_none_or(|x| x == 1.0)
                && r.set_micro.is_none_or(|t| t.f1 == 1.0)
                && r.set_macro.is_none_or(|t| t.f1 == 1.0);
            assert!(ok, "{} {}: {r:?}", s.dimension, r.key);
        }
    }
}
