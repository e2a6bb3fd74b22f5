//! `benchgen efs build`: candidate sets from verified pairs, by union–find.
//!
//! Every pair the verifier judged equivalent joins its two tools; the connected
//! groups are the candidate sets. A tool is in at most one set by construction.
//! Members are sorted by id and sets by their first member, and every set keeps
//! its evidence: the verified pairs inside it with their similarities and the
//! ledger ids of the verdicts.
//!
//! Output `artifacts/efs-build/sets.json`: `{sets: [CandidateSet], rejected_pairs,
//! verified_pairs}` (see [`CandidateSet`]). Evidence names each verdict's LLM
//! exchange by its request hash (stable across reruns; the ledger resolves it).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{Context, Result};
use petgraph::unionfind::UnionFind;
use serde::{Deserialize, Serialize};

use super::pairs::Pair;
use super::verify::Verdict;
use crate::model::Catalog;
use crate::settings::Settings;
use crate::stage::{Artifact, Ctx, Inputs, Output, Plan, Stage, StageSpec};

/// A verified pair inside a set.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    pub a: String,
    pub b: String,
    pub cosine: f32,
    pub score: f32,
    pub reason: String,
    /// Request hash of the verdict's LLM exchange.
    pub verdict_exchange: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CandidateSet {
    /// Stable id (from the smallest member; see [`super::set_id`]).
    pub id: String,
    /// Tool ids, sorted.
    pub members: Vec<String>,
    /// Distinct servers of the members, sorted.
    pub servers: Vec<String>,
    /// Verified pairs joining the members, sorted by `(a, b)`.
    pub evidence: Vec<Evidence>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Sets {
    pub sets: Vec<CandidateSet>,
    pub verified_pairs: usize,
    pub rejected_pairs: usize,
}

/// Group tools joined by `edges` (pairs of tool ids); groups of one are dropped.
/// Members sorted; groups sorted by first member.
pub fn components(edges: &[(String, String)]) -> Vec<Vec<String>> {
    let ids: BTreeSet<&str> = edges.iter().flat_map(|(a, b)| [a.as_str(), b.as_str()]).collect();
    let index: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let mut uf = UnionFind::<usize>::new(ids.len());
    for (a, b) in edges {
        uf.union(index[a.as_str()], index[b.as_str()]);
    }
    let mut groups: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for id in &ids {
        groups.entry(uf.find(index[id])).or_default().push(id.to_string());
    }
    let mut out: Vec<Vec<String>> = groups.into_values().filter(|g| g.len() > 1).collect();
    for g in &mut out {
        g.sort();
    }
    out.sort();
    out
}

/// Candidate sets from pairs and verdicts.
pub fn build_sets(pairs: &[Pair], verdicts: &[Verdict], server_of: &HashMap<String, String>) -> Result<Sets> {
    let by_key: HashMap<String, &Pair> = pairs.iter().map(|p| (p.key(), p)).collect();
    let yes: Vec<&Verdict> = verdicts.iter().filter(|v| v.equivalent).collect();
    let edges: Vec<(String, String)> = yes.iter().map(|v| (v.a.clone(), v.b.clone())).collect();
    let mut sets = Vec::new();
    let groups = components(&edges);
    let group_of: HashMap<&str, usize> =
        groups.iter().enumerate().flat_map(|(g, m)| m.iter().map(move |id| (id.as_str(), g))).collect();
    let mut evidence: Vec<Vec<Evidence>> = vec![Vec::new(); groups.len()];
    for v in &yes {
        let key = super::pairs::pair_key(&v.a, &v.b);
        let p = by_key.get(&key).with_context(|| format!("verdict for `{key}`, which is not a candidate pair"))?;
        evidence[group_of[v.a.as_str()]].push(Evidence {
            a: p.a.clone(),
            b: p.b.clone(),
            cosine: p.cosine,
            score: p.score,
            reason: v.reason.clone(),
            verdict_exchange: v.exchange.clone(),
        });
    }
    for (members, mut ev) in groups.into_iter().zip(evidence) {
        ev.sort_by(|x, y| (&x.a, &x.b).cmp(&(&y.a, &y.b)));
        let servers: BTreeSet<String> = members
            .iter()
            .map(|m| server_of.get(m).cloned().with_context(|| format!("`{m}` is not in the catalog")))
            .collect::<Result<_>>()?;
        sets.push(CandidateSet {
            id: super::set_id(&members),
            members,
            servers: servers.into_iter().collect(),
            evidence: ev,
        });
    }
    Ok(Sets { sets, verified_pairs: yes.len(), rejected_pairs: verdicts.len() - yes.len() })
}

/// The candidate sets (`sets.json`).
pub const SETS: Artifact<Sets> = Artifact::new("efs-build", "sets.json");

pub static SPEC: StageSpec = StageSpec {
    name: "efs-build",
    command: "efs build",
    version: 1,
    about: "candidate sets from verified pairs, by union–find",
    reads: &[crate::filter::CATALOG.read(), super::pairs::PAIRS.read(), super::verify::VERDICTS.read()],
    writes: &["sets.json"],
    section: Some("efs"),
};

/// Server name of every tool of the filtered catalog.
pub fn servers_by_tool(catalog: &Catalog) -> HashMap<String, String> {
    catalog.tools().map(|(s, t)| (t.id.clone(), s.name.clone())).collect()
}

pub struct BuildStage;

impl Stage for BuildStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Union–find over verified pairs into candidate sets (no LLM).

         Reads `artifacts/filter/catalog.json`, `artifacts/efs-pairs/pairs.csv` and
         `artifacts/efs-verify/verdicts.json`.
         Writes `artifacts/efs-build/sets.json` (members sorted, sets by first member,
         evidence per set). Skipped when up to date."
    }

    fn plan(&self, _settings: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![], config_hash: crate::settings::section_hash(&"union-find")? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let _ = ctx;
        let catalog = inputs.json(&crate::filter::CATALOG)?;
        let pairs = super::pairs::read_pairs(inputs)?;
        let verdicts = inputs.json(&super::verify::VERDICTS)?;
        let sets = build_sets(&pairs, &verdicts, &servers_by_tool(&catalog))?;
        let tools: usize = sets.sets.iter().map(|x| x.members.len()).sum();
        out.json("sets.json", &sets)?;
        out.count("sets", sets.sets.len());
        out.count("tools_in_sets", tools);
        out.count("verified_pairs", sets.verified_pairs);
        out.notes.push(format!(
            "{} candidate sets over {tools} tools from {} verified pairs ({} pairs judged not equivalent)",
            sets.sets.len(),
            sets.verified_pairs,
            sets.rejected_pairs
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(a: &str, b: &str) -> (String, String) {
        (a.into(), b.into())
    }

    #[test]
    fn union_find_joins_chains_and_sorts() {
        let got = components(&[e("d", "c"), e("b", "a"), e("c", "e"), e("a", "b")]);
        assert_eq!(got, vec![vec!["a", "b"], vec!["c", "d", "e"]]);
        // Order of edges does not matter.
        assert_eq!(components(&[e("c", "e"), e("a", "b"), e("d", "c")]), got);
        assert!(components(&[]).is_empty());
        // A self-pair makes no set (singletons are dropped).
        assert!(components(&[e("x", "x")]).is_empty());
    }

    #[test]
    fn no_tool_is_in_two_sets_and_evidence_is_kept() {
        let pair = |a: &str, b: &str| Pair {
            a: a.into(),
            b: b.into(),
            cosine: 0.8,
            score: 0.9,
            name_overlap: 0.0,
            param_overlap: 0.0,
            action_a: None,
            action_b: None,
            same_server: false,
            rank_a: Some(1),
            rank_b: None,
        };
        let v = |a: &str, b: &str, eq: bool, id: i64| Verdict {
            a: a.into(),
            b: b.into(),
            equivalent: eq,
            reason: "r".into(),
            exchange: format!("sha256:{id}"),
        };
        let pairs = vec![pair("s1::a", "s2::a"), pair("s2::a", "s3::a"), pair("s1::b", "s2::b")];
        let verdicts = vec![v("s1::a", "s2::a", true, 7), v("s2::a", "s3::a", true, 8), v("s1::b", "s2::b", false, 9)];
        let servers: HashMap<String, String> = ["s1::a", "s2::a", "s3::a", "s1::b", "s2::b"]
            .iter()
            .map(|t| (t.to_string(), t.split("::").next().unwrap().to_string()))
            .collect();
        let sets = build_sets(&pairs, &verdicts, &servers).unwrap();
        assert_eq!(sets.sets.len(), 1);
        let s = &sets.sets[0];
        assert_eq!(s.members, ["s1::a", "s2::a", "s3::a"]);
        assert_eq!(s.servers, ["s1", "s2", "s3"]);
        assert_eq!(
            s.evidence.iter().map(|e| e.verdict_exchange.as_str()).collect::<Vec<_>>(),
            ["sha256:7", "sha256:8"]
        );
        assert_eq!((sets.verified_pairs, sets.rejected_pairs), (2, 1));
        // A verdict about a pair that was never a candidate is an error, not ignored.
        assert!(build_sets(&pairs, &[v("s1::a", "s3::a", true, 1)], &servers).is_err());
    }
}
