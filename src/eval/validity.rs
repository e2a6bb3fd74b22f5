//! The validity figure: Kendall's τ between the panel's ranking on this release and a
//! published ranking of the same agents (`[eval] reference_ranking`, agent → score).
//!
//! τ-b (ties in either ranking counted as neither concordant nor discordant) with a two-sided
//! p-value computed as SciPy's `kendalltau` does by default: the exact null distribution
//! when neither side has ties (the count of permutations with k inversions), the normal
//! approximation with the tie-corrected variance otherwise, so a maintainer can check the
//! figure with `scipy.stats.kendalltau`.
//!
//! Wire format of `validity.json`: `{n, agents: [{agent, panel_score, reference_score}],
//! tau_b, p_value, method: "exact"|"normal", concordant, discordant}`; `tau_b` and
//! `p_value` are null when τ is undefined (fewer than two agents, or one side all tied).

use std::collections::BTreeMap;

use serde::Serialize;

/// One agent of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pair {
    pub agent: String,
    pub panel_score: f64,
    pub reference_score: f64,
}

/// Kendall's τ-b of two paired score lists, and its p-value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tau {
    pub tau_b: Option<f64>,
    pub p_value: Option<f64>,
    pub method: &'static str,
    pub concordant: u64,
    pub discordant: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Validity {
    pub n: usize,
    pub agents: Vec<Pair>,
    #[serde(flatten)]
    pub tau: Tau,
}

/// The comparison over the agents that are both on the panel and in the reference (the
/// stage's check refuses a reference naming an agent that is not on the panel).
pub fn compare(panel: &BTreeMap<String, f64>, reference: &BTreeMap<String, f64>) -> Validity {
    let agents: Vec<Pair> = reference
        .iter()
        .filter_map(|(a, r)| panel.get(a).map(|p| Pair { agent: a.clone(), panel_score: *p, reference_score: *r }))
        .collect();
    let x: Vec<f64> = agents.iter().map(|p| p.panel_score).collect();
    let y: Vec<f64> = agents.iter().map(|p| p.reference_score).collect();
    Validity { n: agents.len(), tau: kendall_tau_b(&x, &y), agents }
}

/// Pair counts of tied groups in one list: Σ t(t−1)/2, Σ t(t−1)(t−2), Σ t(t−1)(2t+5).
fn ties(v: &[f64]) -> (f64, f64, f64) {
    let mut sorted = v.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (mut pairs, mut t0, mut t1) = (0.0, 0.0, 0.0);
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j < sorted.len() && sorted[j] == sorted[i] {
            j += 1;
        }
        let t = (j - i) as f64;
        pairs += t * (t - 1.0) / 2.0;
        t0 += t * (t - 1.0) * (t - 2.0);
        t1 += t * (t - 1.0) * (2.0 * t + 5.0);
        i = j;
    }
    (pairs, t0, t1)
}

pub fn kendall_tau_b(x: &[f64], y: &[f64]) -> Tau {
    let n = x.len().min(y.len());
    let (mut con, mut dis) = (0u64, 0u64);
    for i in 0..n {
        for j in i + 1..n {
            // Positive: concordant, negative: discordant, zero: a tie on either side.
            let s = (x[i] - x[j]) * (y[i] - y[j]);
            if s > 0.0 {
                con += 1;
            } else if s < 0.0 {
                dis += 1;
            }
        }
    }
    let undefined = |method| Tau { tau_b: None, p_value: None, method, concordant: con, discordant: dis };
    if n < 2 {
        return undefined("exact");
    }
    let tot = (n * (n - 1) / 2) as f64;
    let (xt, x0, x1) = ties(&x[..n]);
    let (yt, y0, y1) = ties(&y[..n]);
    let s = con as f64 - dis as f64;
    if xt == 0.0 && yt == 0.0 {
        let tau = s / tot;
        let c = dis.min(con);
        return Tau {
            tau_b: Some(tau),
            p_value: Some(exact_p(n, c as usize)),
            method: "exact",
            concordant: con,
            discordant: dis,
        };
    }
    let denom = ((tot - xt) * (tot - yt)).sqrt();
    if denom == 0.0 {
        return undefined("normal");
    }
    let m = (n * (n - 1)) as f64;
    let nf = n as f64;
    let mut var = (m * (2.0 * nf + 5.0) - x1 - y1) / 18.0 + (2.0 * xt * yt) / m;
    if n > 2 {
        var += x0 * y0 / (9.0 * m * (nf - 2.0));
    }
    let p = if var > 0.0 { libm::erfc((s / var.sqrt()).abs() / std::f64::consts::SQRT_2) } else { 1.0 };
    Tau { tau_b: Some(s / denom), p_value: Some(p.min(1.0)), method: "normal", concordant: con, discordant: dis }
}

/// Two-sided exact p-value without ties: 2 · P(inversions ≤ c) under a uniform permutation,
/// from the Mahonian numbers (permutations of n with k inversions), as SciPy computes it.
fn exact_p(n: usize, c: usize) -> f64 {
    let max = n * (n - 1) / 2;
    if 2 * c >= max {
        return 1.0;
    }
    // counts[k]: permutations of the first m elements with k inversions, as fractions of m!
    // (kept as probabilities so large n does not overflow).
    let mut probs = vec![0.0f64; max + 1];
    probs[0] = 1.0;
    for m in 2..=n {
        let mut next = vec![0.0f64; max + 1];
        let top = m * (m - 1) / 2;
        // Inserting the m-th element adds 0..m−1 inversions, each with probability 1/m.
        let mut window = 0.0;
        for k in 0..=top {
            window += probs[k];
            if k >= m {
                window -= probs[k - m];
            }
            next[k] = window / m as f64;
        }
        probs = next;
    }
    (2.0 * probs[..=c].iter().sum::<f64>()).min(1.0)
}

/// The report's section.
pub fn section(v: &Validity) -> String {
    let mut s = String::from("\n## Validity: ranking against the reference\n\n");
    s.push_str(
        "Kendall's τ-b between the panel's scores on this release and `[eval] reference_ranking` (p two-sided; exact without ties, normal approximation with ties, as `scipy.stats.kendalltau`).\n\n",
    );
    s.push_str("| agent | panel score | reference score |\n|---|---:|---:|\n");
    for p in &v.agents {
        s.push_str(&format!("| `{}` | {:.3} | {} |\n", p.agent, p.panel_score, p.reference_score));
    }
    match (v.tau.tau_b, v.tau.p_value) {
        (Some(t), Some(p)) => s.push_str(&format!(
            "\nτ-b = {t:.3} over {} agents (p = {p:.3}, {}; {} concordant, {} discordant pairs).\n",
            v.n, v.tau.method, v.tau.concordant, v.tau.discordant
        )),
        _ => s.push_str(&format!(
            "\nτ is undefined over these {} agents (fewer than two, or every score tied on one side).\n",
            v.n
        )),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn agrees_with_scipy_kendalltau() {
        // scipy.stats.kendalltau(x, y) printed the expected figures (SciPy 1.x).
        let t = kendall_tau_b(&[12.0, 2.0, 1.0, 12.0, 2.0], &[1.0, 4.0, 7.0, 1.0, 0.0]);
        assert_eq!(t.method, "normal");
        close(t.tau_b.unwrap(), -0.47140452079103173);
        close(t.p_value.unwrap(), 0.2827454599327748);
        // No ties: the exact distribution.
        let t = kendall_tau_b(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 1.0, 4.0, 3.0, 5.0]);
        assert_eq!(t.method, "exact");
        close(t.tau_b.unwrap(), 0.6);
        close(t.p_value.unwrap(), 0.23333333333333334);
    }

    #[test]
    fn perfect_reversed_and_undefined() {
        let up = [0.1, 0.2, 0.3, 0.4];
        let t = kendall_tau_b(&up, &[1.0, 2.0, 3.0, 4.0]);
        close(t.tau_b.unwrap(), 1.0);
        // 2 of the 24 orders are as extreme (4 agents, exact).
        close(t.p_value.unwrap(), 2.0 / 24.0);
        let t = kendall_tau_b(&up, &[4.0, 3.0, 2.0, 1.0]);
        close(t.tau_b.unwrap(), -1.0);
        assert!(kendall_tau_b(&[0.5], &[1.0]).tau_b.is_none());
        assert!(kendall_tau_b(&[0.5, 0.5, 0.5], &[1.0, 2.0, 3.0]).tau_b.is_none());
    }

    #[test]
    fn compares_only_the_agents_on_both_sides() {
        let panel: BTreeMap<String, f64> = [("a", 0.9), ("b", 0.5), ("c", 0.1)].map(|(k, v)| (k.into(), v)).into();
        let reference: BTreeMap<String, f64> = [("a", 80.0), ("c", 20.0)].map(|(k, v)| (k.into(), v)).into();
        let v = compare(&panel, &reference);
        assert_eq!(v.n, 2);
        close(v.tau.tau_b.unwrap(), 1.0);
        assert!(section(&v).contains("τ-b = 1.000 over 2 agents"));
    }
}
