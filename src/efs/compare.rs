//! `benchgen efs compare --reference FILE`: our sets against a reference EFS
//! file in ETOM's `tool_equivalence_sets.json` shape.
//!
//! Metrics: co-membership pairs (two tools in one set) precision, recall and F1;
//! reference sets matched exactly; and the reference pairs that `efs pairs` never
//! proposed, which no verifier could recover (the recall ceiling of the
//! candidate stage). Tool ids are trimmed (around `::` too) before comparing.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::error::{InputError, Problem};
use crate::formats::etom::EfsSet;
use crate::model::norm_tool_id;

/// Sets (lists of normalised tool ids) from an ETOM-shaped file or our `final.json`.
pub fn load_sets(path: &Path) -> Result<Vec<BTreeSet<String>>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).with_context(|| format!("`{}` is not JSON", path.display()))?;
    // Our final.json: {sets: [{members: [{tool_id, …}]}]}; ETOM: [{tools: [...]}].
    let list = match &v {
        serde_json::Value::Object(o) if o.contains_key("sets") => o["sets"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|s| serde_json::json!({"tools": s.get("members").cloned().unwrap_or_default()}))
            .collect(),
        serde_json::Value::Array(a) => a.clone(),
        _ => {
            return Err(InputError {
                file: path.display().to_string(),
                problems: vec![Problem::new("top level", "expected a list of sets or `{sets: [...]}`")],
            }
            .into());
        }
    };
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for (i, s) in list.into_iter().enumerate() {
        let set: EfsSet = match serde_json::from_value(s) {
            Ok(x) => x,
            Err(e) => {
                problems.push(Problem::new(format!("[{i}]"), e.to_string()));
                continue;
            }
        };
        let mut ids = BTreeSet::new();
        for (j, t) in set.tools.iter().enumerate() {
            let Some(id) = t.id() else {
                problems.push(Problem::new(format!("[{i}].tools[{j}]"), "no `tool_id` and no server/tool name"));
                continue;
            };
            ids.insert(id);
        }
        out.push(ids);
    }
    if problems.is_empty() { Ok(out) } else { Err(InputError { file: path.display().to_string(), problems }.into()) }
}

/// Unordered co-membership pairs `(a, b)` with `a < b`.
pub fn co_pairs(sets: &[BTreeSet<String>]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for s in sets {
        let v: Vec<&String> = s.iter().collect();
        for i in 0..v.len() {
            for j in i + 1..v.len() {
                out.insert((v[i].clone(), v[j].clone()));
            }
        }
    }
    out
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Comparison {
    pub our_sets: usize,
    pub reference_sets: usize,
    pub our_pairs: usize,
    pub reference_pairs: usize,
    pub common_pairs: usize,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    /// Reference sets equal to one of ours.
    pub exact_set_matches: usize,
    /// Reference pairs whose tools are not both in our catalog (when known).
    pub reference_pairs_outside_catalog: Option<usize>,
    /// Reference pairs (with both tools in the catalog) that `efs pairs` never proposed.
    pub reference_pairs_not_proposed: Option<usize>,
    /// Share of in-catalog reference pairs the candidate stage proposed.
    pub candidate_recall_ceiling: Option<f64>,
    /// Share of in-catalog reference pairs a perfect verifier would recover: it accepts
    /// exactly the proposed pairs that are reference pairs, and union–find joins them
    /// (so a group needs only a spanning subset of its pairs proposed).
    pub perfect_verifier_recall: Option<f64>,
    pub not_proposed: Vec<(String, String)>,
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { (a as f64 / b as f64 * 10_000.0).round() / 10_000.0 }
}

/// Compare sets; `candidates` (pairs of `efs pairs`) and `catalog` (tool ids)
/// enable the recall-ceiling figures.
pub fn compare(
    ours: &[BTreeSet<String>],
    reference: &[BTreeSet<String>],
    candidates: Option<&BTreeSet<(String, String)>>,
    catalog: Option<&BTreeSet<String>>,
) -> Comparison {
    let op = co_pairs(ours);
    let rp = co_pairs(reference);
    let common = op.intersection(&rp).count();
    let (p, r) = (ratio(common, op.len()), ratio(common, rp.len()));
    let f1 = if p + r == 0.0 { 0.0 } else { ((2.0 * p * r / (p + r)) * 10_000.0).round() / 10_000.0 };
    let ours_set: BTreeSet<&BTreeSet<String>> = ours.iter().collect();
    let exact = reference.iter().filter(|s| ours_set.contains(s)).count();
    let in_catalog: Vec<&(String, String)> = match catalog {
        Some(c) => rp.iter().filter(|(a, b)| c.contains(a) && c.contains(b)).collect(),
        None => rp.iter().collect(),
    };
    let (not_proposed, ceiling) = match candidates {
        Some(c) => {
            let missing: Vec<(String, String)> =
                in_catalog.iter().filter(|p| !c.contains(p)).map(|p| (*p).clone()).collect();
            let ceil = ratio(in_catalog.len() - missing.len(), in_catalog.len());
            (Some(missing), Some(ceil))
        }
        None => (None, None),
    };
    let perfect = candidates.map(|c| {
        let edges: Vec<(String, String)> = in_catalog.iter().filter(|p| c.contains(p)).map(|p| (*p).clone()).collect();
        let groups: Vec<BTreeSet<String>> =
            super::build::components(&edges).into_iter().map(|g| g.into_iter().collect()).collect();
        let got = co_pairs(&groups);
        ratio(in_catalog.iter().filter(|p| got.contains(p)).count(), in_catalog.len())
    });
    Comparison {
        our_sets: ours.len(),
        reference_sets: reference.len(),
        our_pairs: op.len(),
        reference_pairs: rp.len(),
        common_pairs: common,
        precision: p,
        recall: r,
        f1,
        exact_set_matches: exact,
        reference_pairs_outside_catalog: catalog.map(|_| rp.len() - in_catalog.len()),
        reference_pairs_not_proposed: not_proposed.as_ref().map(Vec::len),
        candidate_recall_ceiling: ceiling,
        perfect_verifier_recall: perfect,
        not_proposed: not_proposed.unwrap_or_default(),
    }
}

/// `efs compare`: our final sets (or `sets`) against `reference`, with the
/// candidate pairs and catalog of the current artifacts when they exist.
pub fn run(settings: &crate::settings::Settings, reference: &Path, sets: Option<&Path>) -> Result<Comparison> {
    let ours_path = match sets {
        Some(p) => p.to_path_buf(),
        None => super::finalize::FINAL.path(settings),
    };
    if !ours_path.exists() {
        return Err(crate::error::hinted(
            format!("no sets to compare: `{}` does not exist", settings.display_path(&ours_path)),
            "run `benchgen efs finalize` first, or pass `--sets FILE`",
        ));
    }
    let ours = load_sets(&ours_path)?;
    let reference = load_sets(reference)?;
    let pairs_path = super::pairs::PAIRS.path(settings);
    let candidates: Option<BTreeSet<(String, String)>> = match pairs_path.exists() {
        true => {
            let bytes = std::fs::read(&pairs_path)?;
            let pairs = super::pairs::read_csv(&bytes, &settings.display_path(&pairs_path))?;
            Some(
                pairs
                    .into_iter()
                    .map(|p| {
                        let (a, b) = (norm_tool_id(&p.a), norm_tool_id(&p.b));
                        if a <= b { (a, b) } else { (b, a) }
                    })
                    .collect(),
            )
        }
        false => None,
    };
    let catalog_path = crate::filter::CATALOG.path(settings);
    let catalog: Option<BTreeSet<String>> = match catalog_path.exists() {
        true => Some(crate::model::Catalog::load(&catalog_path)?.tools().map(|(_, t)| t.id.clone()).collect()),
        false => None,
    };
    Ok(compare(&ours, &reference, candidates.as_ref(), catalog.as_ref()))
}

pub fn render(c: &Comparison) -> String {
    let mut s = format!(
        "sets: ours {}, reference {}; exact matches {}\nco-membership pairs: ours {}, reference {}, common {}\nprecision {:.3}  recall {:.3}  F1 {:.3}\n",
        c.our_sets,
        c.reference_sets,
        c.exact_set_matches,
        c.our_pairs,
        c.reference_pairs,
        c.common_pairs,
        c.precision,
        c.recall,
        c.f1
    );
    if let Some(o) = c.reference_pairs_outside_catalog {
        s.push_str(&format!("reference pairs with a tool outside our catalog: {o}\n"));
    }
    if let (Some(n), Some(ceil)) = (c.reference_pairs_not_proposed, c.candidate_recall_ceiling) {
        s.push_str(&format!(
            "reference pairs never proposed by `efs pairs`: {n} (candidate recall ceiling {ceil:.3})\n"
        ));
        if let Some(pv) = c.perfect_verifier_recall {
            s.push_str(&format!("recall of a perfect verifier on the candidates (with union–find): {pv:.3}\n"));
        }
        for (a, b) in c.not_proposed.iter().take(20) {
            s.push_str(&format!("  {a}  <>  {b}\n"));
        }
        if c.not_proposed.len() > 20 {
            s.push_str(&format!("  … and {} more (see --json)\n", c.not_proposed.len() - 20));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(v: &[&[&str]]) -> Vec<BTreeSet<String>> {
        v.iter().map(|s| s.iter().map(|x| norm_tool_id(x)).collect()).collect()
    }

    #[test]
    fn pair_precision_recall_on_hand_made_sets() {
        // Reference: {a,b,c} (3 pairs) and {d,e} (1 pair) = 4 pairs.
        // Ours: {a,b} (1 pair, right), {d,e} (right), {f,g} (wrong) = 3 pairs, 2 right.
        let reference = sets(&[&["s::a", "s::b", "s::c"], &["s::d", "s::e"]]);
        let ours = sets(&[&["s::a", "s::b"], &["s::d", "s::e"], &["s::f", "s::g"]]);
        let c = compare(&ours, &reference, None, None);
        assert_eq!((c.our_pairs, c.reference_pairs, c.common_pairs), (3, 4, 2));
        assert_eq!(c.precision, 0.6667);
        assert_eq!(c.recall, 0.5);
        assert_eq!(c.f1, 0.5714);
        assert_eq!(c.exact_set_matches, 1);
    }

    #[test]
    fn ids_are_trimmed_and_the_recall_ceiling_counts_unproposed_pairs() {
        let reference = sets(&[&["s::a ", " s ::b", "t::z"]]);
        let ours = sets(&[&["s::a", "s::b"]]);
        let candidates: BTreeSet<(String, String)> = [("s::a".to_string(), "s::b".to_string())].into();
        let catalog: BTreeSet<String> = ["s::a", "s::b"].iter().map(|s| s.to_string()).collect();
        let c = compare(&ours, &reference, Some(&candidates), Some(&catalog));
        assert_eq!(c.common_pairs, 1);
        assert_eq!(c.reference_pairs_outside_catalog, Some(2), "t::z is not in the catalog");
        assert_eq!(c.reference_pairs_not_proposed, Some(0));
        assert_eq!(c.candidate_recall_ceiling, Some(1.0));
        let none: BTreeSet<(String, String)> = BTreeSet::new();
        let c = compare(&ours, &reference, Some(&none), Some(&catalog));
        assert_eq!(c.reference_pairs_not_proposed, Some(1));
        assert_eq!(c.candidate_recall_ceiling, Some(0.0));
    }

    #[test]
    fn a_perfect_verifier_needs_only_a_spanning_subset_of_a_group() {
        // Group a-b-c-d: three of six pairs proposed, forming a path; e-f proposed, but
        // not a reference pair, joins nothing.
        let reference = sets(&[&["a", "b", "c", "d"]]);
        let cand: BTreeSet<(String, String)> = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")]
            .iter()
            .map(|(x, y)| (x.to_string(), y.to_string()))
            .collect();
        let c = compare(&[], &reference, Some(&cand), None);
        assert_eq!(c.candidate_recall_ceiling, Some(0.5));
        assert_eq!(c.perfect_verifier_recall, Some(1.0));
        let cand: BTreeSet<(String, String)> =
            [("a", "b"), ("c", "d")].iter().map(|(x, y)| (x.to_string(), y.to_string())).collect();
        let c = compare(&[], &reference, Some(&cand), None);
        assert_eq!(c.perfect_verifier_recall, Some(0.3333), "two halves: 2 of 6 pairs");
    }
}
