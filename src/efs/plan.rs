//! The verification plan: which LLM calls `efs verify` will make, written by
//! `efs pairs` so a maintainer sees the cost before any call.
//!
//! Cost is LLM calls, not pairs. In listwise mode (the default) one call shows an
//! anchor tool and up to `list_size` of its candidate neighbours and asks which do
//! the same job, so one call judges many pairs and a low similarity floor stays
//! affordable. Anchors are chosen by greedy set cover over the candidate pairs:
//! repeatedly the tool with the most uncovered pairs (capped at `list_size`)
//! becomes an anchor and takes its uncovered pairs, its own top-k picks first.
//! Every tool anchors at most once; since a pair qualifies only when one endpoint
//! has the other among its `top_k ≤ list_size` picks, that endpoint's call (or an
//! earlier one) covers it, so the plan covers every pair exactly once with at most
//! one call per tool. In pairwise mode each pair is its own call.
//!
//! `max_calls` trims the plan by expected value: a call is worth the expected
//! number of equivalent pairs it judges (a logistic prior of each pair's combined
//! score, [`prior`]); the least valuable calls are left out and listed.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use serde::{Deserialize, Serialize};

use super::pairs::Pair;

/// `calls.jsonl`: one line per planned call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlannedCall {
    /// 1-based call number, in plan order.
    pub call: usize,
    /// The tool the call asks about.
    pub anchor: String,
    /// The pairs the call judges, each `[a, b]` with `a < b` (as in `pairs.csv`), in
    /// the order the candidates are shown.
    pub pairs: Vec<[String; 2]>,
}

impl PlannedCall {
    /// The candidate shown against the anchor for each pair.
    pub fn candidates(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|[a, b]| if *a == self.anchor { b.as_str() } else { a.as_str() })
    }
}

/// How `efs verify` asks about the candidate pairs.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// One call per anchor tool with up to `list_size` candidates.
    #[default]
    Listwise,
    /// One call per pair (ETOM's verifier).
    Pairwise,
}

/// Prior probability that a pair is equivalent, from its combined score: a
/// logistic centred at 0.7 (about where verified pairs start on the ETOM
/// snapshot) with slope 0.05. Only used to rank calls for `max_calls`.
pub fn prior(score: f32) -> f64 {
    1.0 / (1.0 + (-(f64::from(score) - 0.7) / 0.05).exp())
}

/// The plan for `pairs` (as `efs pairs` selects them: `rank_a`/`rank_b` say which
/// endpoint picked the other). Listwise needs every tool's own picks to fit one
/// call (`top_k ≤ list_size`, checked in the config).
pub fn plan(pairs: &[Pair], mode: VerifyMode, list_size: usize) -> Vec<PlannedCall> {
    match mode {
        VerifyMode::Pairwise => pairs
            .iter()
            .enumerate()
            .map(|(i, p)| PlannedCall { call: i + 1, anchor: p.a.clone(), pairs: vec![[p.a.clone(), p.b.clone()]] })
            .collect(),
        VerifyMode::Listwise => set_cover(pairs, list_size.max(1)),
    }
}

fn set_cover(pairs: &[Pair], k: usize) -> Vec<PlannedCall> {
    // Tools in id order, so ties break the same way whatever the input order.
    let mut ids: Vec<&str> = pairs.iter().flat_map(|p| [p.a.as_str(), p.b.as_str()]).collect();
    ids.sort_unstable();
    ids.dedup();
    let index: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    // Per tool: incident pairs as (own pick?, score, pair index), own picks first,
    // then by score, then by pair order.
    let mut incident: Vec<Vec<(bool, f32, usize)>> = vec![Vec::new(); ids.len()];
    for (pi, p) in pairs.iter().enumerate() {
        incident[index[p.a.as_str()]].push((p.rank_a.is_some(), p.score, pi));
        incident[index[p.b.as_str()]].push((p.rank_b.is_some(), p.score, pi));
    }
    for l in &mut incident {
        l.sort_by(|x, y| y.0.cmp(&x.0).then(y.1.total_cmp(&x.1)).then(x.2.cmp(&y.2)));
    }
    let mut covered = vec![false; pairs.len()];
    let gain = |t: usize, covered: &[bool]| incident[t].iter().filter(|(_, _, p)| !covered[*p]).count().min(k);
    // Lazy greedy: a popped entry whose gain went down is pushed back with the new gain.
    let mut heap: BinaryHeap<(usize, Reverse<usize>)> =
        (0..ids.len()).map(|t| (gain(t, &covered), Reverse(t))).collect();
    let mut calls = Vec::new();
    while let Some((g, Reverse(t))) = heap.pop() {
        let now = gain(t, &covered);
        if now == 0 {
            continue;
        }
        if now < g {
            heap.push((now, Reverse(t)));
            continue;
        }
        let mut taken = Vec::new();
        for &(own, _, pi) in &incident[t] {
            if covered[pi] {
                continue;
            }
            // Own picks always (≤ top_k ≤ k of them); others while room is left.
            if own || taken.len() < k {
                taken.push(pi);
            }
        }
        for &pi in &taken {
            covered[pi] = true;
        }
        calls.push(PlannedCall {
            call: calls.len() + 1,
            anchor: ids[t].to_string(),
            pairs: taken.iter().map(|&pi| [pairs[pi].a.clone(), pairs[pi].b.clone()]).collect(),
        });
    }
    calls
}

/// What `max_calls` left out.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LeftOut {
    pub calls: usize,
    pub pairs: usize,
    /// Sum of the left-out pairs' priors (the equivalences the budget is expected to miss).
    pub expected_equivalent: f64,
}

/// Keep the `max_calls` (0: all) most valuable calls (value: the sum of their pairs'
/// [`prior`]s; ties: earlier call), in plan order, renumbered. Returns the kept calls
/// and the left-out ones (old numbers).
pub fn trim(
    calls: Vec<PlannedCall>,
    scores: &HashMap<(String, String), f32>,
    max_calls: usize,
) -> (Vec<PlannedCall>, Vec<PlannedCall>) {
    if max_calls == 0 || calls.len() <= max_calls {
        return (calls, Vec::new());
    }
    let value = |c: &PlannedCall| -> f64 {
        c.pairs.iter().map(|[a, b]| prior(scores.get(&(a.clone(), b.clone())).copied().unwrap_or(0.0))).sum()
    };
    let mut order: Vec<(f64, usize)> = calls.iter().enumerate().map(|(i, c)| (value(c), i)).collect();
    order.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    let mut keep = vec![false; calls.len()];
    for &(_, i) in order.iter().take(max_calls) {
        keep[i] = true;
    }
    let (mut kept, mut dropped) = (Vec::new(), Vec::new());
    for (i, c) in calls.into_iter().enumerate() {
        if keep[i] { kept.push(c) } else { dropped.push(c) }
    }
    for (n, c) in kept.iter_mut().enumerate() {
        c.call = n + 1;
    }
    (kept, dropped)
}

pub fn left_out(dropped: &[PlannedCall], scores: &HashMap<(String, String), f32>) -> LeftOut {
    let pairs: Vec<&[String; 2]> = dropped.iter().flat_map(|c| &c.pairs).collect();
    LeftOut {
        calls: dropped.len(),
        pairs: pairs.len(),
        expected_equivalent: pairs
            .iter()
            .map(|[a, b]| prior(scores.get(&(a.clone(), b.clone())).copied().unwrap_or(0.0)))
            .sum::<f64>(),
    }
}

/// `calls.jsonl` bytes.
pub fn write_jsonl(calls: &[PlannedCall]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    for c in calls {
        serde_json::to_writer(&mut out, c)?;
        out.push(b'\n');
    }
    Ok(out)
}

pub fn read_jsonl(bytes: &[u8], file: &str) -> anyhow::Result<Vec<PlannedCall>> {
    use anyhow::Context;
    let text = std::str::from_utf8(bytes).with_context(|| format!("`{file}` is not UTF-8"))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("`{file}` line {} is not a planned call", i + 1)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn pair(a: &str, b: &str, score: f32, ra: bool, rb: bool) -> Pair {
        Pair {
            a: a.into(),
            b: b.into(),
            cosine: score,
            score,
            name_overlap: 0.0,
            param_overlap: 0.0,
            action_a: None,
            action_b: None,
            same_server: false,
            rank_a: ra.then_some(1),
            rank_b: rb.then_some(1),
        }
    }

    /// Random top-k selections over `n` tools, as `efs pairs` makes them.
    fn random_pairs(seed: u64, n: usize, top_k: usize) -> Vec<Pair> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut by: HashMap<(usize, usize), (bool, bool, f32)> = HashMap::new();
        for i in 0..n {
            let picks = rng.random_range(0..=top_k);
            for _ in 0..picks {
                let j = rng.random_range(0..n);
                if j == i {
                    continue;
                }
                let (a, b) = (i.min(j), i.max(j));
                let s = rng.random_range(0.4..1.0f32);
                let e = by.entry((a, b)).or_insert((false, false, s));
                if i == a { e.0 = true } else { e.1 = true }
            }
        }
        let mut v: Vec<Pair> = by
            .into_iter()
            .map(|((a, b), (ra, rb, s))| pair(&format!("t{a:04}"), &format!("t{b:04}"), s, ra, rb))
            .collect();
        v.sort_by(|x, y| (&x.a, &x.b).cmp(&(&y.a, &y.b)));
        v
    }

    #[test]
    fn listwise_plan_covers_every_pair_once_with_at_most_one_call_per_tool() {
        for seed in 0..40 {
            let (n, top_k) = (5 + seed as usize * 3, 1 + seed as usize % 6);
            let pairs = random_pairs(seed, n, top_k);
            for k in [top_k, top_k + 3] {
                let calls = plan(&pairs, VerifyMode::Listwise, k);
                let mut seen: Vec<(String, String)> =
                    calls.iter().flat_map(|c| c.pairs.iter().map(|[a, b]| (a.clone(), b.clone()))).collect();
                seen.sort();
                let mut want: Vec<(String, String)> = pairs.iter().map(|p| (p.a.clone(), p.b.clone())).collect();
                want.sort();
                assert_eq!(seen, want, "seed {seed}: every pair exactly once");
                let mut anchors: Vec<&str> = calls.iter().map(|c| c.anchor.as_str()).collect();
                anchors.sort_unstable();
                let tools = anchors.len();
                anchors.dedup();
                assert_eq!(anchors.len(), tools, "seed {seed}: a tool anchors at most once");
                for c in &calls {
                    assert!(c.pairs.len() <= k && !c.pairs.is_empty(), "seed {seed}: call size");
                    assert!(c.pairs.iter().all(|[a, b]| *a == c.anchor || *b == c.anchor));
                }
                assert!(calls.iter().enumerate().all(|(i, c)| c.call == i + 1));
                // And the plan is far below one call per pair once tools have several picks.
                if top_k >= 3 && pairs.len() > 20 {
                    assert!(calls.len() < pairs.len(), "seed {seed}: {} calls for {} pairs", calls.len(), pairs.len());
                }
            }
        }
    }

    #[test]
    fn a_hub_takes_one_call_for_its_whole_list() {
        // Tool h is everyone's pick: one call with h as the anchor judges all of them.
        let pairs: Vec<Pair> = (0..6).map(|i| pair("h", &format!("x{i}"), 0.8, false, true)).collect();
        let calls = plan(&pairs, VerifyMode::Listwise, 6);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].anchor, "h");
        assert_eq!(calls[0].candidates().collect::<Vec<_>>(), ["x0", "x1", "x2", "x3", "x4", "x5"]);
        // With room for 4, the other two are covered by their own calls.
        let calls = plan(&pairs, VerifyMode::Listwise, 4);
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0].pairs.len(), 4);
        assert_eq!(plan(&pairs, VerifyMode::Pairwise, 4).len(), 6);
    }

    #[test]
    fn trimming_keeps_the_most_valuable_calls_in_plan_order() {
        let calls: Vec<PlannedCall> = [("a", 0.9f32), ("b", 0.5), ("c", 0.8), ("d", 0.6)]
            .iter()
            .enumerate()
            .map(|(i, (t, _))| PlannedCall {
                call: i + 1,
                anchor: t.to_string(),
                pairs: vec![[t.to_string(), "z".into()]],
            })
            .collect();
        let scores: HashMap<(String, String), f32> = [("a", 0.9f32), ("b", 0.5), ("c", 0.8), ("d", 0.6)]
            .iter()
            .map(|(t, s)| ((t.to_string(), "z".into()), *s))
            .collect();
        let (kept, dropped) = trim(calls.clone(), &scores, 2);
        assert_eq!(kept.iter().map(|c| (c.call, c.anchor.as_str())).collect::<Vec<_>>(), [(1, "a"), (2, "c")]);
        assert_eq!(dropped.iter().map(|c| c.anchor.as_str()).collect::<Vec<_>>(), ["b", "d"]);
        let lo = left_out(&dropped, &scores);
        assert_eq!((lo.calls, lo.pairs), (2, 2));
        assert!((lo.expected_equivalent - (prior(0.5) + prior(0.6))).abs() < 1e-12);
        assert_eq!(trim(calls.clone(), &scores, 0).0, calls);
        assert_eq!(trim(calls.clone(), &scores, 9).0, calls);
        assert!(prior(0.9) > prior(0.7) && prior(0.7) > prior(0.5));
    }

    #[test]
    fn jsonl_round_trip() {
        let c = vec![PlannedCall { call: 1, anchor: "a::x".into(), pairs: vec![["a::x".into(), "b::y".into()]] }];
        let bytes = write_jsonl(&c).unwrap();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            "{\"call\":1,\"anchor\":\"a::x\",\"pairs\":[[\"a::x\",\"b::y\"]]}\n"
        );
        assert_eq!(read_jsonl(&bytes, "x").unwrap(), c);
        assert!(read_jsonl(b"{\"call\":1}\n", "calls.jsonl").unwrap_err().to_string().contains("line 1"));
    }
}
