//! `invented_entities.json`: for each released L3 sample whose request is about an entity
//! `levels l3` invented (seeded, and named by the request under the naming rule), that
//! entity, `{"<sample id>": "<entity>"}` sorted by id. `benchgen eval` reads it from the
//! release it evaluates (the candidate or a published folder), so an agent's missing lookup
//! of an entity whose id no agent can know is named as such wherever the release is
//! evaluated, without the project's `artifacts/levels-l3/` (before, `eval` read that file,
//! which a published folder evaluated elsewhere does not have). Written only when some
//! released sample has one.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use crate::model::Sample;
use crate::stage::Inputs;

pub const FILE: &str = "invented_entities.json";

/// Sample id → the invented entity of its L3 query: a sample counts only when its
/// provenance is the query's item and its request the query itself, so a release made
/// from another run of `levels l3` gets nothing it did not ask.
pub fn of_samples(samples: &[Sample], l3: &crate::levels::LevelOut) -> BTreeMap<String, String> {
    let by_key: BTreeMap<String, (&str, &str)> = l3
        .queries
        .iter()
        .filter_map(|g| {
            Some((format!("{}:{}", crate::levels::l3::STAGE, g.key), (g.query.as_str(), g.entity.as_deref()?)))
        })
        .collect();
    samples
        .iter()
        .filter_map(|s| {
            let (query, entity) = by_key.get(&s.provenance_id)?;
            let asked = s.turns.first().is_some_and(|t| t.user == *query);
            asked.then(|| (s.id.clone(), entity.to_string()))
        })
        .collect()
}

/// Writes [`FILE`] into the release folder being built (`tmp`, whose `samples.jsonl` is
/// written), from `levels-l3/queries.json` when the project has it. The file only helps
/// `eval` read an agent's lapse, so a `queries.json` it cannot read (another benchgen's
/// format) does not stop the release: the warning returned says so, and no file is written.
pub(super) fn write(inputs: &Inputs, tmp: &Path) -> Result<Option<String>> {
    use std::io::BufRead;
    if !inputs.has(&crate::levels::l3::QUERIES) {
        return Ok(None);
    }
    let l3: crate::levels::LevelOut = match inputs.json(&crate::levels::l3::QUERIES) {
        Ok(l3) => l3,
        Err(e) => {
            return Ok(Some(format!(
                "warning: no `{FILE}` in this release: `artifacts/levels-l3/queries.json` cannot be read ({e:#}); rerun `benchgen levels l3`"
            )));
        }
    };
    // Streamed, keeping only the samples an L3 query made (a release may hold 100,000).
    let prefix = format!("{}:", crate::levels::l3::STAGE);
    let file = std::fs::File::open(tmp.join("samples.jsonl")).context("cannot read the release's samples.jsonl")?;
    let mut samples = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.context("cannot read the release's samples.jsonl")?;
        if line.trim().is_empty() || !line.contains(&prefix) {
            continue;
        }
        let s = serde_json::from_str::<Sample>(&line)
            .with_context(|| format!("the release's samples.jsonl line {}: not a sample", i + 1))?;
        if s.provenance_id.starts_with(&prefix) {
            samples.push(s);
        }
    }
    let map = of_samples(&samples, &l3);
    if map.is_empty() {
        return Ok(None);
    }
    let mut bytes = serde_json::to_vec_pretty(&map)?;
    bytes.push(b'\n');
    std::fs::write(tmp.join(FILE), bytes).with_context(|| format!("cannot write `{FILE}`"))?;
    Ok(None)
}

/// Reads [`FILE`] of a release; `shown` names it in errors.
pub fn read(bytes: &[u8], shown: &str) -> Result<BTreeMap<String, String>> {
    serde_json::from_slice(bytes)
        .with_context(|| format!("`{shown}` is not an object of sample ids and the entities `levels l3` invented"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample(user: &str) -> Sample {
        serde_json::from_value(json!({
            "id": "L3-1", "family": "etom", "kind": "L3", "difficulty": "easy",
            "turns": [{"user": user, "reference_plan": [{"alternatives": ["S::search", "S::price"], "group": 0}]}]
        }))
        .unwrap()
    }

    /// An L3 sample gets its query's invented entity only when its provenance is the
    /// query's item and its request the query itself (a release from another run of
    /// `levels l3` may hold another query of the same chain).
    #[test]
    fn an_l3_sample_gets_the_entity_of_its_own_query_only() {
        let with = |provenance: &str, user: &str| {
            let mut s = sample(user);
            s.provenance_id = provenance.to_string();
            s
        };
        let l3: crate::levels::LevelOut = serde_json::from_value(json!({
            "level": 3,
            "queries": [
                {"key": "chain:S:search>price", "query": "What does Morvira cost?", "steps": [], "entity": "Morvira", "exchanges": []},
                {"key": "chain:S:list>price", "query": "What do they cost?", "steps": [], "exchanges": []}
            ],
            "funnel": {"steps": [], "rejected": []}
        }))
        .unwrap();
        let own = with("levels-l3:chain:S:search>price", "What does Morvira cost?");
        assert_eq!(of_samples(std::slice::from_ref(&own), &l3), BTreeMap::from([("L3-1".into(), "Morvira".into())]));
        for other in [
            with("levels-l3:chain:S:search>price", "What does Tesla cost?"),
            with("levels-l3:chain:S:list>price", "What do they cost?"),
            with("levels-l4:chain:S:search>price", "What does Morvira cost?"),
        ] {
            assert!(of_samples(&[other], &l3).is_empty());
        }
    }
}
