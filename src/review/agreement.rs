//! Agreement between two reviewers on an ordinal scale: quadratic weighted Cohen's κ,
//! Krippendorff's α (ordinal, and the nominal/interval metrics for checks), exact and
//! within-one agreement, each with a seeded percentile-bootstrap confidence interval
//! (samples are resampled with replacement; the statistic is recomputed each time).
//!
//! Formulas:
//! - κ_w = 1 − Σ w_ij O_ij / Σ w_ij E_ij with w_ij = (i − j)² / (k − 1)² over the k
//!   scale values, O the observed and E the chance (product of marginals) proportions
//!   (Cohen 1968).
//! - α = 1 − D_o / D_e = 1 − (n − 1) Σ o_ck δ²_ck / Σ n_c n_k δ²_ck over the coincidence
//!   matrix o of pairable values (units with at least two values), n_c its marginals;
//!   ordinal δ²_ck = (Σ_{g=c..k} n_g − (n_c + n_k)/2)² (Krippendorff 2011, "Computing
//!   Krippendorff's Alpha-Reliability").

use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Krippendorff's difference functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Nominal,
    Ordinal,
    Interval,
}

/// Quadratic weighted κ for pairs on the scale `min..=max`; `None` when undefined
/// (no pairs, or both reviewers used one and the same value throughout).
pub fn quadratic_kappa(pairs: &[(u8, u8)], min: u8, max: u8) -> Option<f64> {
    if pairs.is_empty() || max <= min {
        return None;
    }
    let k = (max - min) as usize + 1;
    let n = pairs.len() as f64;
    let mut o = vec![vec![0.0f64; k]; k];
    let (mut rows, mut cols) = (vec![0.0f64; k], vec![0.0f64; k]);
    for &(a, b) in pairs {
        let (i, j) = ((a.clamp(min, max) - min) as usize, (b.clamp(min, max) - min) as usize);
        o[i][j] += 1.0 / n;
        rows[i] += 1.0 / n;
        cols[j] += 1.0 / n;
    }
    let denom_w = ((k - 1) * (k - 1)) as f64;
    let (mut num, mut den) = (0.0, 0.0);
    for i in 0..k {
        for j in 0..k {
            let w = ((i as f64 - j as f64).powi(2)) / denom_w;
            num += w * o[i][j];
            den += w * rows[i] * cols[j];
        }
    }
    if den <= 0.0 { None } else { Some(1.0 - num / den) }
}

/// Krippendorff's α over units of values (`None` = missing) on the value domain
/// `domain` (sorted). `None` when no unit has two values or the expected disagreement is 0.
pub fn krippendorff_alpha(units: &[Vec<Option<f64>>], domain: &[f64], metric: Metric) -> Option<f64> {
    let k = domain.len();
    let idx = |v: f64| domain.iter().position(|d| (*d - v).abs() < 1e-9);
    let mut o = vec![vec![0.0f64; k]; k];
    for u in units {
        let vals: Vec<usize> = u.iter().flatten().filter_map(|v| idx(*v)).collect();
        let m = vals.len();
        if m < 2 {
            continue;
        }
        for (a, &i) in vals.iter().enumerate() {
            for (b, &j) in vals.iter().enumerate() {
                if a != b {
                    o[i][j] += 1.0 / (m as f64 - 1.0);
                }
            }
        }
    }
    let nc: Vec<f64> = o.iter().map(|r| r.iter().sum()).collect();
    let n: f64 = nc.iter().sum();
    if n < 2.0 {
        return None;
    }
    let delta = |c: usize, kk: usize| -> f64 {
        match metric {
            Metric::Nominal => {
                if c == kk {
                    0.0
                } else {
                    1.0
                }
            }
            Metric::Interval => (domain[c] - domain[kk]).powi(2),
            Metric::Ordinal => {
                let (lo, hi) = if c <= kk { (c, kk) } else { (kk, c) };
                let s: f64 = nc[lo..=hi].iter().sum();
                (s - (nc[c] + nc[kk]) / 2.0).powi(2)
            }
        }
    };
    let (mut d_o, mut d_e) = (0.0, 0.0);
    for c in 0..k {
        for kk in 0..k {
            let d = delta(c, kk);
            d_o += o[c][kk] * d;
            d_e += nc[c] * nc[kk] * d;
        }
    }
    if d_e <= 0.0 {
        return None;
    }
    Some(1.0 - (n - 1.0) * d_o / d_e)
}

/// Ordinal α for two reviewers' pairs on `min..=max`.
pub fn ordinal_alpha(pairs: &[(u8, u8)], min: u8, max: u8) -> Option<f64> {
    let units: Vec<Vec<Option<f64>>> = pairs.iter().map(|&(a, b)| vec![Some(a as f64), Some(b as f64)]).collect();
    let domain: Vec<f64> = (min..=max).map(f64::from).collect();
    krippendorff_alpha(&units, &domain, Metric::Ordinal)
}

/// Share of pairs with the same score.
pub fn exact(pairs: &[(u8, u8)]) -> Option<f64> {
    share(pairs, |a, b| a == b)
}

/// Share of pairs at most one point apart.
pub fn within_one(pairs: &[(u8, u8)]) -> Option<f64> {
    share(pairs, |a, b| a.abs_diff(b) <= 1)
}

fn share(pairs: &[(u8, u8)], f: impl Fn(u8, u8) -> bool) -> Option<f64> {
    if pairs.is_empty() {
        return None;
    }
    Some(pairs.iter().filter(|(a, b)| f(*a, *b)).count() as f64 / pairs.len() as f64)
}

/// A statistic with its 95 % percentile-bootstrap interval.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Estimate {
    pub value: Option<f64>,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
}

/// Bootstrap `stat` over the pairs (`b` resamples, ChaCha8 seeded with `seed`).
pub fn bootstrap(pairs: &[(u8, u8)], b: usize, seed: u64, stat: impl Fn(&[(u8, u8)]) -> Option<f64>) -> Estimate {
    let value = stat(pairs);
    if pairs.len() < 2 || value.is_none() {
        return Estimate { value, ci_low: None, ci_high: None };
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut draws = Vec::with_capacity(b);
    let mut buf = Vec::with_capacity(pairs.len());
    for _ in 0..b {
        buf.clear();
        for _ in 0..pairs.len() {
            buf.push(pairs[rng.random_range(0..pairs.len())]);
        }
        if let Some(v) = stat(&buf) {
            draws.push(v);
        }
    }
    if draws.is_empty() {
        return Estimate { value, ci_low: None, ci_high: None };
    }
    draws.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| draws[((q * (draws.len() - 1) as f64).round() as usize).min(draws.len() - 1)];
    Estimate { value, ci_low: Some(at(0.025)), ci_high: Some(at(0.975)) }
}

/// Every figure for one dimension.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DimensionAgreement {
    pub dimension: String,
    pub pairs: usize,
    pub kappa_quadratic: Estimate,
    pub alpha_ordinal: Estimate,
    pub exact: Estimate,
    pub within_one: Estimate,
}

pub fn dimension(name: &str, pairs: &[(u8, u8)], min: u8, max: u8, b: usize, seed: u64) -> DimensionAgreement {
    DimensionAgreement {
        dimension: name.to_string(),
        pairs: pairs.len(),
        kappa_quadratic: bootstrap(pairs, b, seed, |p| quadratic_kappa(p, min, max)),
        alpha_ordinal: bootstrap(pairs, b, seed ^ 1, |p| ordinal_alpha(p, min, max)),
        exact: bootstrap(pairs, b, seed ^ 2, exact),
        within_one: bootstrap(pairs, b, seed ^ 3, within_one),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfect_and_undefined_cases() {
        let p = [(1, 1), (3, 3), (5, 5)];
        assert_eq!(quadratic_kappa(&p, 1, 5), Some(1.0));
        assert_eq!(ordinal_alpha(&p, 1, 5), Some(1.0));
        assert_eq!(quadratic_kappa(&[(4, 4), (4, 4)], 1, 5), None, "no variation: κ undefined");
        assert_eq!(exact(&[(1, 2), (3, 3)]), Some(0.5));
        assert_eq!(within_one(&[(1, 2), (3, 5)]), Some(0.5));
    }

    #[test]
    fn bootstrap_is_seeded() {
        let p: Vec<(u8, u8)> = (0..30).map(|i| ((i % 5 + 1) as u8, ((i * 7) % 5 + 1) as u8)).collect();
        let a = bootstrap(&p, 200, 7, |x| quadratic_kappa(x, 1, 5));
        let b = bootstrap(&p, 200, 7, |x| quadratic_kappa(x, 1, 5));
        assert_eq!(a, b);
        assert!(a.ci_low.unwrap() <= a.ci_high.unwrap());
    }
}
