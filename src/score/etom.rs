//! Corrected ETOM metrics (the default mode).
//!
//! - L1: exact match = exactly one call, and it is the reference tool.
//! - L2: exact match = exactly one call, and it is in the union of the query's EFS alternatives.
//! - L3/L4: each reference call is a node with alternatives and dependencies. Predictions are
//!   matched to nodes one-to-one by a maximum matching that, among maximum matchings, places
//!   the most calls correctly ([`super::matching::placed_matching`]). Recall = matched nodes /
//!   nodes; a matched call is correctly placed when every dependency is matched to a call in an
//!   earlier step; precision = correctly placed / predicted calls; exact match = F1 of 1;
//!   node-set exact match = every node matched and no extra call (order ignored).
//! - L5: correct = no tool call (empty list, the "No" sentinel, a refusal, a plain-text answer);
//!   P = R = F1 = 1 when correct, else 0.
//!
//! The same graph metric gives P/R/F1 for L1 and L2 (one node each).

use std::borrow::Cow;
use std::sync::Arc;

use super::input::key_for;
use super::matching::placed_matching;
use super::{Item, NormPred, Pred, Prf, SampleResult, ScoreCtx, Status, corrected_pred, push_capped};
use crate::model::Kind;

pub fn score(ctx: &ScoreCtx, item: &Item, pred: Option<&Pred>) -> SampleResult {
    let empty = NormPred::default();
    let (mut res, norm) = corrected_pred(item, pred, &empty);

    // ETOM samples have one turn; should a sample have several, score them as one plan.
    let mut nodes_alts: Vec<&[Arc<str>]> = Vec::new();
    let mut deps: Vec<Cow<[usize]>> = Vec::new();
    for turn in &item.turns {
        let base = nodes_alts.len();
        for c in turn {
            nodes_alts.push(&c.alts);
            deps.push(if base == 0 {
                Cow::Borrowed(&c.deps)
            } else {
                Cow::Owned(c.deps.iter().map(|d| d + base).collect())
            });
        }
    }
    let mut calls: Vec<(&str, i64)> = Vec::new();
    let mut offset = 0i64;
    for turn in &norm.turns {
        let max = turn.iter().map(|c| c.group).max().unwrap_or(-1);
        calls.extend(turn.iter().map(|c| (key_for(item.family, &c.tool), c.group + offset)));
        offset += max + 1;
    }
    let n_pred = calls.len() as u32;

    if item.kind == Kind::L5 {
        let ok = calls.is_empty();
        res.em = ok;
        let v = if ok { 1.0 } else { 0.0 };
        res.calls = Some(Prf { p: v, r: v, f1: v, tp_p: 0, tp_r: 0, pred: n_pred, gold: 0 });
        if !ok {
            let shown: Vec<String> = calls.iter().take(5).map(|(t, _)| format!("`{t}`")).collect();
            res.reasons
                .push(format!("out-of-scope request, but {n_pred} tool call(s) predicted: {}", shown.join(", ")));
        }
        finish(&mut res);
        return res;
    }

    let cand: Vec<Vec<usize>> = calls
        .iter()
        .map(|(t, _)| {
            if t.is_empty() {
                return Vec::new();
            }
            nodes_alts.iter().enumerate().filter(|(_, alts)| alts.iter().any(|a| **a == **t)).map(|(n, _)| n).collect()
        })
        .collect();
    let groups: Vec<i64> = calls.iter().map(|c| c.1).collect();
    let pl = placed_matching(&cand, &groups, &deps);
    let n_nodes = nodes_alts.len() as u32;
    let prf = Prf::from_counts(pl.correctly_placed as u32, pl.matched as u32, n_pred, n_nodes);
    res.em = prf.f1 == 1.0 && pl.matched as u32 == n_nodes && pl.correctly_placed as u32 == n_pred;
    if matches!(item.kind, Kind::L3 | Kind::L4) {
        res.node_set_em = Some(pl.matched as u32 == n_nodes && n_pred == n_nodes);
    }
    res.calls = Some(prf);

    let mut why = Vec::new();
    if norm.refusal {
        why.push("no tool call (refusal or \"No\"), but the request needs tools".to_string());
    }
    if matches!(item.kind, Kind::L1 | Kind::L2) && n_pred > 1 {
        why.push(format!("{n_pred} calls; exactly one is expected"));
    }
    for (p, (tool, _)) in calls.iter().enumerate() {
        match pl.assign[p] {
            None if tool.is_empty() => {} // the reader's note already says why
            None if !ctx.universe.contains(*tool) => {
                why.push(format!("call {p} `{tool}`: unknown tool (not in the benchmark)"))
            }
            None if cand[p].is_empty() => why.push(format!("call {p} `{tool}`: not a reference tool of this sample")),
            None => why.push(format!("call {p} `{tool}`: extra call (its reference call is already matched)")),
            Some(n) if !pl.placed[p] => {
                let missing: Vec<String> = deps[n].iter().map(|d| format!("`{}`", nodes_alts[*d][0])).collect();
                why.push(format!("call {p} `{tool}`: placed before its dependency {}", missing.join(", ")));
            }
            Some(_) => {}
        }
    }
    let mut matched = vec![false; nodes_alts.len()];
    for n in pl.assign.iter().flatten() {
        matched[*n] = true;
    }
    for (n, m) in matched.iter().enumerate() {
        if !m {
            let alts = nodes_alts[n];
            let more = if alts.len() > 1 { format!(" (or {} alternative(s))", alts.len() - 1) } else { String::new() };
            why.push(format!("reference call {n} `{}`{more} not predicted", alts[0]));
        }
    }
    if pl.truncated {
        why.push("matching search hit its budget; the best matching found is used".into());
    }
    push_capped(&mut res.reasons, why);
    finish(&mut res);
    res
}

fn finish(res: &mut SampleResult) {
    if res.status == Status::Wrong && res.em {
        res.status = Status::Correct;
    }
}
