//! Corrected FinMCP metrics (the default mode).
//!
//! Each turn is scored against its own reference (the gold-history protocol: the model saw
//! the gold conversation up to that user message), then counts are summed over the turns:
//! - call multisets (what the published code counts): TP = one-to-one matches between
//!   predicted and reference calls, so a tool called five times in the reference needs five calls;
//! - tool sets (what the paper defines): TP = distinct reference tools predicted at least once;
//! - exact match of the grouped structure: same sequence of parallel groups, order inside a
//!   group ignored, in every turn.
//!
//! Micro and macro averages are taken in the report. A turn with no reference call and no
//! predicted call is perfect (the published code gives it 0).

use std::sync::Arc;

use super::input::key_for;
use super::matching::max_matching;
use super::{
    GoldCall, Item, NormPred, Pred, PredCall, Prf, SampleResult, ScoreCtx, Status, TurnResult, corrected_pred,
    push_capped,
};
use crate::model::Kind;

pub fn score(ctx: &ScoreCtx, item: &Item, pred: Option<&Pred>) -> SampleResult {
    let empty = NormPred::default();
    let (mut res, norm) = corrected_pred(item, pred, &empty);
    let fam = item.family;
    let (gt, pt) = (item.turns.len(), norm.turns.len());
    let mut why = Vec::new();
    if pt > gt {
        why.push(format!("prediction has {pt} turns, the reference {gt}; calls in extra turns count as wrong"));
    }
    let (mut tp, mut n_pred, mut n_gold) = (0u32, 0u32, 0u32);
    let (mut stp, mut s_pred, mut s_gold) = (0u32, 0u32, 0u32);
    let mut em = true;
    let no_calls: Vec<PredCall> = Vec::new();
    for t in 0..gt.max(pt) {
        let gold = item.turns.get(t).map(Vec::as_slice).unwrap_or(&[]);
        let predc = norm.turns.get(t).unwrap_or(&no_calls);
        let keys: Vec<&str> = predc.iter().map(|c| key_for(fam, &c.tool)).collect();

        // Multiset: one-to-one matching of calls.
        let cand: Vec<Vec<usize>> = keys
            .iter()
            .map(|k| {
                gold.iter()
                    .enumerate()
                    .filter(|(_, g)| !k.is_empty() && g.alts.iter().any(|a| **a == **k))
                    .map(|(i, _)| i)
                    .collect()
            })
            .collect();
        let matched = max_matching(&cand, gold.len()) as u32;
        tp += matched;
        n_pred += keys.len() as u32;
        n_gold += gold.len() as u32;

        // Sets: distinct predicted tools against distinct reference tools (alternative sets).
        let (turn_stp, turn_pred, turn_gold) = set_counts(&keys, gold);
        stp += turn_stp;
        s_pred += turn_pred;
        s_gold += turn_gold;

        // Grouped structure: the i-th predicted group equals the i-th reference group as a multiset.
        let ggroups = group_by(gold.iter().map(|g| (i64::from(g.group), g.alts.as_slice())));
        let pgroups = group_by(predc.iter().zip(&keys).map(|(c, k)| (c.group, *k)));
        let turn_em = groups_match(&ggroups, &pgroups);
        em &= turn_em;

        let label = if gt > 1 || pt > 1 { format!("turn {t}: ") } else { String::new() };
        if !turn_em {
            let mut gm = vec![0u32; gold.len()];
            let mut assign = super::matching::max_matching_assign(&cand, gold.len());
            for a in assign.iter().flatten() {
                gm[*a] += 1;
            }
            for (i, g) in gold.iter().enumerate() {
                if gm[i] == 0 {
                    why.push(format!("{label}reference call `{}` not predicted", g.alts[0]));
                }
            }
            for (p, a) in assign.iter_mut().enumerate() {
                if a.is_none() && !keys[p].is_empty() {
                    let k = keys[p];
                    if !ctx.universe.contains(k) {
                        why.push(format!("{label}call `{k}`: unknown tool (not in the benchmark)"));
                    } else {
                        why.push(format!("{label}call `{k}`: not in the reference (or called too often)"));
                    }
                }
            }
            if matched as usize == gold.len() && matched as usize == keys.len() {
                why.push(format!(
                    "{label}right calls, wrong grouping: {} step(s) predicted, {} in the reference",
                    pgroups.len(),
                    ggroups.len()
                ));
            }
        }
        if item.kind == Kind::MultiTurn || gt > 1 {
            res.turns.push(TurnResult {
                turn: t,
                em: turn_em,
                gold_calls: gold.len() as u32,
                pred_calls: keys.len() as u32,
                matched,
            });
        }
    }
    res.em = em;
    res.calls = Some(Prf::from_counts(tp, tp, n_pred, n_gold));
    res.tool_set = Some(Prf::from_counts(stp, stp, s_pred, s_gold));
    push_capped(&mut res.reasons, why);
    if res.status == Status::Wrong && res.em {
        res.status = Status::Correct;
    }
    res
}

/// Tool-set counts of one turn, `(tp, predicted, reference)`: distinct predicted tools (each
/// unreadable call counted on its own) matched one-to-one against distinct reference tools
/// (alternative sets).
fn set_counts(keys: &[&str], gold: &[GoldCall]) -> (u32, u32, u32) {
    let mut pset: Vec<&str> = Vec::new();
    let mut unreadable = 0u32;
    for k in keys {
        if k.is_empty() {
            unreadable += 1;
        } else if !pset.contains(k) {
            pset.push(k);
        }
    }
    let mut gset: Vec<&[Arc<str>]> = Vec::new();
    for g in gold {
        if !gset.contains(&g.alts.as_slice()) {
            gset.push(&g.alts);
        }
    }
    let scand: Vec<Vec<usize>> = pset
        .iter()
        .map(|k| gset.iter().enumerate().filter(|(_, alts)| alts.iter().any(|a| **a == **k)).map(|(i, _)| i).collect())
        .collect();
    (max_matching(&scand, gset.len()) as u32, pset.len() as u32 + unreadable, gset.len() as u32)
}

/// Whether the predicted groups equal the reference groups place by place, each as a
/// multiset (a call matches any alternative of a reference call).
fn groups_match(ggroups: &[Vec<&[Arc<str>]>], pgroups: &[Vec<&str>]) -> bool {
    ggroups.len() == pgroups.len()
        && ggroups.iter().zip(pgroups).all(|(g, p)| {
            g.len() == p.len() && {
                let c: Vec<Vec<usize>> = p
                    .iter()
                    .map(|k| {
                        g.iter()
                            .enumerate()
                            .filter(|(_, alts)| !k.is_empty() && alts.iter().any(|a| **a == **k))
                            .map(|(i, _)| i)
                            .collect()
                    })
                    .collect();
                max_matching(&c, g.len()) == g.len()
            }
        })
}

/// Consecutive runs of equal group values, in order of group value.
fn group_by<T: Copy>(items: impl Iterator<Item = (i64, T)>) -> Vec<Vec<T>> {
    let mut v: Vec<(i64, T)> = items.collect();
    v.sort_by_key(|x| x.0);
    let mut out: Vec<Vec<T>> = Vec::new();
    let mut last = None;
    for (g, x) in v {
        if last != Some(g) {
            out.push(Vec::new());
            last = Some(g);
        }
        out.last_mut().expect("pushed").push(x);
    }
    out
}
