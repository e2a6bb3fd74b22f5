//! The release `eval` runs on: `[eval] release = "release/NAME-VERSION"` (files outside
//! `artifacts/`, hashed as the plan's inputs), or the release candidate
//! (`artifacts/release-candidate/`, declared reads), which `benchgen release` publishes
//! after this audit. Either way every byte used is a hashed input.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{EvalSettings, ToolSpace};
use crate::error::{InputError, Problem, hinted};
use crate::model::{Catalog, Family, Sample, Server, Tool};
use crate::release::cassettes::{self, Cassette};
use crate::settings::Settings;
use crate::stage::{Artifact, Inputs, Read};

// The release candidate's files, declared here until the release exports handles of its own.
const SAMPLES: Artifact = Artifact::new(crate::release::candidate::STAGE, "samples.jsonl");
const TOOLS: Artifact = Artifact::new(crate::release::candidate::STAGE, "tools.parquet");
const CASSETTES: Artifact = Artifact::new(crate::release::candidate::STAGE, cassettes::FILE);
const SETS: Artifact = Artifact::new(crate::release::candidate::STAGE, "tool_equivalence_sets.json");
const LEVEL_1: Artifact = Artifact::new(crate::release::candidate::STAGE, "level_1.json");
const LEVEL_2: Artifact = Artifact::new(crate::release::candidate::STAGE, "level_2.json");
const LEVEL_3: Artifact = Artifact::new(crate::release::candidate::STAGE, "level_3.json");
const LEVEL_4: Artifact = Artifact::new(crate::release::candidate::STAGE, "level_4.json");
const LEVEL_5: Artifact = Artifact::new(crate::release::candidate::STAGE, "level_5.json");
const FIN_SINGLE: Artifact = Artifact::new(crate::release::candidate::STAGE, "finmcp_single_tool.json");
const FIN_MULTI: Artifact = Artifact::new(crate::release::candidate::STAGE, "finmcp_multi_tool.json");
const FIN_TURN: Artifact = Artifact::new(crate::release::candidate::STAGE, "finmcp_multi_turn.json");
const INVENTED: Artifact = Artifact::new(crate::release::candidate::STAGE, crate::release::invented::FILE);

/// Every file of a release `eval` reads, as handles.
const FILES: [&Artifact; 13] = [
    &SAMPLES,
    &TOOLS,
    &CASSETTES,
    &SETS,
    &LEVEL_1,
    &LEVEL_2,
    &LEVEL_3,
    &LEVEL_4,
    &LEVEL_5,
    &FIN_SINGLE,
    &FIN_MULTI,
    &FIN_TURN,
    &INVENTED,
];

/// The stage's reads: the release candidate's files (optional: `[eval] release` may name a
/// published folder instead).
pub const READS: &[Read] = &[
    SAMPLES.optional(),
    TOOLS.optional(),
    CASSETTES.optional(),
    SETS.optional(),
    LEVEL_1.optional(),
    LEVEL_2.optional(),
    LEVEL_3.optional(),
    LEVEL_4.optional(),
    LEVEL_5.optional(),
    FIN_SINGLE.optional(),
    FIN_MULTI.optional(),
    FIN_TURN.optional(),
    INVENTED.optional(),
];

/// The published folder `[eval] release` names, if any.
fn folder(s: &Settings, cfg: &EvalSettings) -> Option<PathBuf> {
    cfg.release.as_ref().map(|p| crate::settings::normalize(&s.resolve(p)))
}

/// The files of the named release folder (those that exist), for the plan.
pub fn plan_inputs(s: &Settings, cfg: &EvalSettings) -> Result<Vec<PathBuf>> {
    let Some(dir) = folder(s, cfg) else { return Ok(Vec::new()) };
    if !dir.join("samples.jsonl").is_file() {
        return Err(hinted(
            format!("`eval.release` names `{}`, which holds no `samples.jsonl`", s.display_path(&dir)),
            "name a folder `benchgen release` published (`release/NAME-VERSION`), or leave `eval.release` out to evaluate the release candidate (`artifacts/release-candidate/`)",
        ));
    }
    Ok(FILES.iter().map(|a| dir.join(a.file)).filter(|p| p.is_file()).collect())
}

/// A released tool and the catalog it came from (`filter` or `logs-import`).
#[derive(Debug, Clone)]
pub struct ReleasedTool {
    pub server: String,
    pub tool: Tool,
    pub catalog: String,
}

/// The release as `eval` uses it.
pub struct Release {
    /// Where it came from, for the report (`release/NAME-VERSION` or `artifacts/release-candidate`).
    pub shown: String,
    /// Sorted by id.
    pub samples: Vec<Sample>,
    pub tools: BTreeMap<String, ReleasedTool>,
    pub cassettes: BTreeMap<String, Cassette>,
    /// Tool id → the members of every EFS set it is in (itself included).
    pub efs: HashMap<String, BTreeSet<String>>,
    /// The files `benchgen score` reads: name → bytes (those the release has).
    pub benches: BTreeMap<&'static str, Vec<u8>>,
    /// Sample id → the entity `levels l3` invented for its request (seeded, and named by the
    /// request under the naming rule): the release's `invented_entities.json`
    /// ([`crate::release::invented`]); empty without one.
    pub invented: BTreeMap<String, String>,
}

impl Release {
    pub fn read(s: &Settings, cfg: &EvalSettings, inputs: &Inputs) -> Result<Self> {
        let dir = folder(s, cfg);
        let shown = match &dir {
            Some(d) => s.display_path(d),
            None => format!("artifacts/{}", crate::release::candidate::STAGE),
        };
        let get = |a: &Artifact| -> Result<Option<Vec<u8>>> {
            match &dir {
                Some(d) => {
                    let p = d.join(a.file);
                    if p.is_file() { Ok(Some(inputs.bytes(&p)?.to_vec())) } else { Ok(None) }
                }
                None if inputs.has(a) => Ok(Some(inputs.bytes_of(a)?.to_vec())),
                None => Ok(None),
            }
        };
        let Some(samples_bytes) = get(&SAMPLES)? else {
            return Err(hinted(
                "there is no release candidate to evaluate: `artifacts/release-candidate/samples.jsonl` does not exist",
                "run `benchgen release candidate` first, or name a published folder in `[eval] release`",
            ));
        };
        let samples = read_samples(&samples_bytes, &format!("{shown}/samples.jsonl"))?;
        let tools_bytes = get(&TOOLS)?.with_context(|| format!("`{shown}` has no `tools.parquet`"))?;
        let tools = read_tools(&tools_bytes, &format!("{shown}/tools.parquet"))?;
        let cassettes = match get(&CASSETTES)? {
            Some(b) => cassettes::read(&b, &format!("{shown}/{}", cassettes::FILE))?,
            None => {
                return Err(hinted(
                    format!("`{shown}` has no `{}` (recorded tool responses)", cassettes::FILE),
                    "rebuild the release with this benchgen (`benchgen release` under a new `[release] version`)",
                ));
            }
        };
        let efs = match get(&SETS)? {
            Some(b) => read_sets(&b, &format!("{shown}/tool_equivalence_sets.json"))?,
            None => HashMap::new(),
        };
        let mut benches = BTreeMap::new();
        for a in FILES.iter().filter(|a| a.file.starts_with("level_") || a.file.starts_with("finmcp_")) {
            if let Some(b) = get(a)? {
                benches.insert(a.file, b);
            }
        }
        benches.insert(SAMPLES.file, samples_bytes);
        let invented = match get(&INVENTED)? {
            Some(b) => crate::release::invented::read(&b, &format!("{shown}/{}", INVENTED.file))?,
            None => BTreeMap::new(),
        };
        Ok(Release { shown, samples, tools, cassettes, efs, benches, invented })
    }

    /// Copy the scored files into `dir` (scratch), where `benchgen score` reads them.
    pub fn write_benches(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
        for (name, bytes) in &self.benches {
            std::fs::write(dir.join(name), bytes)
                .with_context(|| format!("cannot write `{}`", dir.join(name).display()))?;
        }
        Ok(())
    }

    /// The tool ids an agent can reach on `sample` in tool space `space`, sorted: those it
    /// is offered, or in the `full` space those behind its tool search. `distractors` is
    /// `[eval] distractor_servers`; `seed` (the project seed) orders the candidate
    /// distractor servers that are equally near.
    pub fn tool_space(&self, space: ToolSpace, distractors: usize, seed: u64, sample: &Sample) -> Vec<String> {
        match space {
            ToolSpace::Oracle => self.oracle_space(sample),
            ToolSpace::Standard => self.standard_space(self.oracle_space(sample), distractors, seed, sample),
            ToolSpace::Full => self.track_tools(sample.family).collect(),
        }
    }

    /// Every released tool of a family's track, in id order.
    fn track_tools(&self, family: Family) -> impl Iterator<Item = String> + '_ {
        let catalog = track_catalog(family);
        self.tools.iter().filter(move |(_, t)| t.catalog == catalog).map(|(id, _)| id.clone())
    }

    /// The sample's ground-truth tools (every alternative of every call) and their EFS
    /// members; with no reference call (L5), every released tool of its track.
    fn oracle_space(&self, sample: &Sample) -> Vec<String> {
        let mut ids: BTreeSet<String> = BTreeSet::new();
        for alt in sample.turns.iter().flat_map(|t| t.reference_plan.iter().flat_map(|c| &c.alternatives)) {
            ids.insert(alt.clone());
            if let Some(members) = self.efs.get(alt) {
                ids.extend(members.iter().cloned());
            }
        }
        if ids.is_empty() {
            // Nothing to call (L5): every released tool of the sample's track.
            ids.extend(self.track_tools(sample.family));
        }
        ids.into_iter().filter(|id| self.tools.contains_key(id)).collect()
    }

    /// `oracle` and the tools of the `k` candidates of the sample's track nearest to its
    /// request (all its turns' user messages). A candidate is a released server with tools
    /// `oracle` does not offer yet, as its name and those tools' names and descriptions; a
    /// tool released without a server (FinMCP's, from logs) is a candidate on its own.
    fn standard_space(&self, oracle: Vec<String>, k: usize, seed: u64, sample: &Sample) -> Vec<String> {
        let catalog = track_catalog(sample.family);
        let mut ids: BTreeSet<String> = oracle.into_iter().collect();
        // Candidate → (its tool ids not offered yet, its text), in name order. A candidate is
        // a server; a tool without a server (the log track's catalog) is one on its own. A
        // server the oracle space draws on is a candidate with its other tools.
        let mut servers: BTreeMap<&str, (Vec<&str>, String)> = BTreeMap::new();
        for (id, t) in self.tools.iter().filter(|(id, t)| t.catalog == catalog && !ids.contains(*id)) {
            let name = if t.server.is_empty() { id.as_str() } else { t.server.as_str() };
            let (tools, text) = servers.entry(name).or_insert_with(|| (Vec::new(), t.server.clone()));
            tools.push(id.as_str());
            text.push_str(&format!("\n{}\n{}", t.tool.name, t.tool.description));
        }
        let request: Vec<&str> = sample.turns.iter().map(|t| t.user.as_str()).collect();
        let candidates: Vec<(&str, &str)> = servers.iter().map(|(name, (_, text))| (*name, text.as_str())).collect();
        let chosen = nearest_servers(&request.join("\n"), &candidates, k, seed, &sample.id);
        for name in chosen {
            ids.extend(servers[name].0.iter().map(|id| id.to_string()));
        }
        ids.into_iter().collect()
    }

    /// A catalog of these tool ids, for the sandbox.
    pub fn catalog(&self, ids: &[String]) -> Catalog {
        let mut servers: BTreeMap<&str, Vec<Tool>> = BTreeMap::new();
        for id in ids {
            if let Some(t) = self.tools.get(id) {
                servers.entry(t.server.as_str()).or_default().push(t.tool.clone());
            }
        }
        let mut c = Catalog {
            servers: servers
                .into_iter()
                .map(|(name, tools)| Server {
                    name: name.to_string(),
                    description: String::new(),
                    summary: String::new(),
                    url: String::new(),
                    categories: Vec::new(),
                    license: None,
                    tools,
                    registry: None,
                })
                .collect(),
        };
        c.sort();
        c
    }
}

/// The catalog a family's tools come from: ETOM samples use the registry's (`filter`),
/// FinMCP samples the logs' (`logs-import`).
fn track_catalog(family: Family) -> &'static str {
    if family == Family::Etom { "filter" } else { "logs-import" }
}

/// Words that say nothing about what a request asks for or a server offers (function words,
/// and the generic verbs and nouns of tool names).
const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "get", "i", "in", "is", "it",
    "list", "mcp", "me", "my", "of", "on", "or", "please", "server", "the", "then", "this", "to", "tool", "what",
    "with", "you",
];

/// Bag of words of `text`: lower-case alphanumeric words (identifiers split as
/// [`crate::text::words`] splits them), crudely singular, without [`STOP`] words.
fn bag(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for w in crate::text::words(text) {
        if !STOP.contains(&w.as_str()) {
            *out.entry(crate::text::singular(&w)).or_insert(0.0) += 1.0;
        }
    }
    out
}

/// Cosine of two bags of words; 0 when either is empty.
fn cosine(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> f64 {
    let dot: f64 = a.iter().filter_map(|(w, x)| b.get(w).map(|y| x * y)).sum();
    let norm = |v: &BTreeMap<String, f64>| v.values().map(|x| x * x).sum::<f64>().sqrt();
    let (na, nb) = (norm(a), norm(b));
    if na == 0.0 || nb == 0.0 { 0.0 } else { dot / (na * nb) }
}

/// The `k` candidate servers (name, text) nearest to `request`, nearest first: cosine
/// over bags of words, a lexical measure because `eval` may run where no embedding model
/// is. Servers equally near come in an order seeded by `seed` and `key` (the sample id),
/// so each sample breaks its ties its own way and the same inputs give the same servers.
/// Fewer than `k` candidates: all of them.
pub fn nearest_servers<'a>(
    request: &str,
    candidates: &[(&'a str, &str)],
    k: usize,
    seed: u64,
    key: &str,
) -> Vec<&'a str> {
    nearest("eval.distractors", request, candidates, k, seed, key)
}

/// The `k` candidates (name, text) nearest to `request`, nearest first, as
/// [`nearest_servers`] ranks them; `stream` names the seeded order of equally near ones, so
/// the distractors and the tool search (`eval.search`) break their ties independently.
pub fn nearest<'a>(
    stream: &str,
    request: &str,
    candidates: &[(&'a str, &str)],
    k: usize,
    seed: u64,
    key: &str,
) -> Vec<&'a str> {
    use rand::seq::SliceRandom;
    let want = bag(request);
    let mut scored: Vec<(&'a str, f64)> =
        candidates.iter().map(|(name, text)| (*name, cosine(&want, &bag(text)))).collect();
    // Name order first, so the seeded shuffle does not depend on the callers' order.
    scored.sort_by(|a, b| a.0.cmp(b.0));
    scored.shuffle(&mut crate::levels::rng(seed, &format!("{stream}:{key}")));
    // A stable sort keeps the shuffled order among equal similarities.
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored.into_iter().take(k).map(|(name, _)| name).collect()
}

fn read_samples(bytes: &[u8], file: &str) -> Result<Vec<Sample>> {
    let mut out: Vec<Sample> = Vec::new();
    let mut problems = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Sample>(line) {
            Ok(s) => {
                if out.last().is_some_and(|p| p.id >= s.id) {
                    problems.push(Problem::new(format!("line {} ({})", i + 1, s.id), "ids must be unique and sorted"));
                }
                out.push(s);
            }
            Err(e) => problems.push(Problem::new(format!("line {}", i + 1), format!("not a unified sample: {e}"))),
        }
        if problems.len() >= 20 {
            break;
        }
    }
    if !problems.is_empty() {
        return Err(InputError { file: file.into(), problems }.into());
    }
    Ok(out)
}

fn read_tools(bytes: &[u8], file: &str) -> Result<BTreeMap<String, ReleasedTool>> {
    use polars_io::prelude::{ParquetReader, SerReader};
    let fail = |e: String| InputError { file: file.into(), problems: vec![Problem::new("table", e)] };
    let df = ParquetReader::new(std::io::Cursor::new(bytes)).finish().map_err(|e| fail(format!("not Parquet: {e}")))?;
    let col = |name: &str| crate::release::tables::strings(&df, name).map_err(|e| fail(format!("`{name}`: {e}")));
    let (ids, servers, names, descs, schemas, catalogs) =
        (col("tool_id")?, col("server")?, col("tool")?, col("description")?, col("input_schema")?, col("catalog")?);
    let mut out = BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        let input_schema: serde_json::Value = serde_json::from_str(&schemas[i]).map_err(|e| InputError {
            file: file.into(),
            problems: vec![Problem::new(format!("row {} ({id}).input_schema", i + 1), format!("not JSON: {e}"))],
        })?;
        let input_schema = if input_schema.is_object() { input_schema } else { serde_json::json!({"type": "object"}) };
        let tool = Tool {
            id: id.clone(),
            name: names[i].clone(),
            description: descs[i].clone(),
            input_schema,
            output_schema: None,
        };
        out.insert(id.clone(), ReleasedTool { server: servers[i].clone(), tool, catalog: catalogs[i].clone() });
    }
    Ok(out)
}

fn read_sets(bytes: &[u8], file: &str) -> Result<HashMap<String, BTreeSet<String>>> {
    let sets: crate::formats::etom::EfsFile = serde_json::from_slice(bytes).map_err(|e| InputError {
        file: file.into(),
        problems: vec![Problem::new("sets", format!("not an ETOM EFS file: {e}"))],
    })?;
    let mut out: HashMap<String, BTreeSet<String>> = HashMap::new();
    for set in &sets {
        let members: BTreeSet<String> = set.tools.iter().filter_map(|t| t.id()).collect();
        for m in &members {
            out.entry(m.clone()).or_default().extend(members.iter().cloned());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(server: &str, name: &str, description: &str, catalog: &str) -> (String, ReleasedTool) {
        let id = if server.is_empty() { name.to_string() } else { format!("{server}::{name}") };
        let tool = Tool {
            id: id.clone(),
            name: name.to_string(),
            description: description.to_string(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
        };
        (id, ReleasedTool { server: server.to_string(), tool, catalog: catalog.to_string() })
    }

    /// The registry track: `Meteo` (the reference), `WeatherAlt` (forecast tools), `Stocks`
    /// and `Music`; the logs track: one server-less weather tool, nearer to a weather request
    /// than any registry server.
    fn release(efs: &[(&str, &str)]) -> Release {
        let tools = [
            tool("Meteo", "forecast", "Weather forecast for a city", "filter"),
            tool("WeatherAlt", "get_forecast", "Daily weather forecast for a location", "filter"),
            tool("WeatherAlt", "get_alerts", "Severe weather alerts for a region", "filter"),
            tool("Stocks", "get_quote", "Latest stock quote for a ticker symbol", "filter"),
            tool("Music", "play_song", "Play a song by an artist", "filter"),
            tool("", "weather_forecast", "Weather forecast for a city tomorrow", "logs-import"),
        ];
        let mut sets: HashMap<String, BTreeSet<String>> = HashMap::new();
        for (a, b) in efs {
            let members: BTreeSet<String> = [a.to_string(), b.to_string()].into();
            sets.entry(a.to_string()).or_default().extend(members.clone());
            sets.entry(b.to_string()).or_default().extend(members);
        }
        Release {
            shown: "test".to_string(),
            samples: Vec::new(),
            tools: tools.into_iter().collect(),
            cassettes: BTreeMap::new(),
            efs: sets,
            benches: BTreeMap::new(),
            invented: BTreeMap::new(),
        }
    }

    fn sample(family: &str, kind: &str, user: &str, tools: &[&str]) -> Sample {
        serde_json::from_value(json!({
            "id": format!("{kind}-1"), "family": family, "kind": kind, "difficulty": "easy",
            "turns": [{"user": user, "reference_plan": [{"alternatives": tools, "group": 0}]}]
        }))
        .unwrap()
    }

    fn weather() -> Sample {
        sample("etom", "L1", "What is the weather forecast for Paris tomorrow?", &["Meteo::forecast"])
    }

    fn space(tool_space: &str, k: i64) -> EvalSettings {
        serde_json::from_value(json!({"agents": ["a"], "tool_space": tool_space, "distractor_servers": k})).unwrap()
    }

    /// The tool ids of `sample` in the named space with `k` distractor servers, seed 7.
    fn reach(rel: &Release, tool_space: &str, k: i64, sample: &Sample) -> Vec<String> {
        let cfg = space(tool_space, k);
        rel.tool_space(cfg.spaces()[0], cfg.distractors(), 7, sample)
    }

    fn servers<'a>(rel: &'a Release, ids: &[String]) -> BTreeSet<&'a str> {
        ids.iter().map(|id| rel.tools[id].server.as_str()).collect()
    }

    #[test]
    fn the_standard_space_adds_the_nearest_servers_of_the_track_to_the_oracle_space() {
        let rel = release(&[]);
        let s = weather();
        let oracle = reach(&rel, "oracle", 3, &s);
        assert_eq!(oracle, ["Meteo::forecast"]);
        // One distractor: the forecast server, not stocks or music (nor the logs' weather tool).
        assert_eq!(
            reach(&rel, "standard", 1, &s),
            ["Meteo::forecast", "WeatherAlt::get_alerts", "WeatherAlt::get_forecast"]
        );
        for k in 0..=5 {
            let ids = reach(&rel, "standard", k, &s);
            assert!(oracle.iter().all(|id| ids.contains(id)), "k = {k}: {ids:?}");
            // Exactly k servers besides the oracle's, as long as the track has them (3 others).
            let extra = servers(&rel, &ids).len() - servers(&rel, &oracle).len();
            assert_eq!(extra, (k as usize).min(3), "k = {k}: {ids:?}");
            assert!(ids.iter().all(|id| rel.tools[id].catalog == "filter"), "k = {k}: {ids:?}");
            assert!(ids.is_sorted(), "{ids:?}");
            assert_eq!(ids, reach(&rel, "standard", k, &s), "the same inputs, the same space");
        }
        assert_eq!(reach(&rel, "standard", 0, &s), oracle);
    }

    #[test]
    fn a_server_the_oracle_space_draws_on_offers_its_other_tools_and_the_other_track_never_joins() {
        // `WeatherAlt::get_forecast` in the reference's EFS set: WeatherAlt's other tool,
        // `get_alerts`, is still a distractor candidate (the nearest: severe weather), Stocks
        // and Music are farther.
        let rel = release(&[("Meteo::forecast", "WeatherAlt::get_forecast")]);
        let ids = reach(&rel, "standard", 1, &weather());
        assert_eq!(ids, ["Meteo::forecast", "WeatherAlt::get_alerts", "WeatherAlt::get_forecast"]);
        // The log track's tools have no server: each is a candidate of its own, and only
        // log-track tools are. Here the one there is is the reference: nothing to add.
        let fin = sample("finmcp", "single_tool", "Weather forecast for Paris?", &["weather_forecast"]);
        assert_eq!(reach(&rel, "standard", 3, &fin), ["weather_forecast"]);
    }

    #[test]
    fn the_full_space_is_every_released_tool_of_the_samples_track() {
        let rel = release(&[]);
        let etom = reach(&rel, "full", 3, &weather());
        let filter: Vec<String> =
            rel.tools.iter().filter(|(_, t)| t.catalog == "filter").map(|(id, _)| id.clone()).collect();
        assert_eq!(etom, filter);
        assert_eq!(etom.len(), 5);
        let fin = sample("finmcp", "single_tool", "Weather forecast for Paris?", &["weather_forecast"]);
        assert_eq!(reach(&rel, "full", 0, &fin), ["weather_forecast"]);
        assert_eq!(space("full", 3).spaces(), [ToolSpace::Full]);
        assert_eq!(ToolSpace::Full.as_str(), "full");
    }

    #[test]
    fn equally_near_servers_come_in_a_seeded_order_after_the_nearer_ones() {
        let names = ["A", "B", "C", "D", "E", "F"];
        let mut candidates: Vec<(&str, &str)> = names.iter().map(|n| (*n, "unrelated words")).collect();
        candidates.push(("W", "weather report"));
        let pick = |c: &[(&'static str, &'static str)], seed: u64| nearest_servers("weather today", c, 3, seed, "L1-1");
        // The first of the tied servers, under 32 seeds.
        let tied: BTreeSet<&str> = (0..32).map(|seed| pick(&candidates, seed)[1]).collect();
        for seed in 0..32 {
            let got = pick(&candidates, seed);
            assert_eq!(got.len(), 3);
            assert_eq!(got[0], "W", "the nearest first, whatever the seed");
            assert_eq!(got, pick(&candidates, seed), "seed {seed}: the same inputs, the same servers");
            let reversed: Vec<(&str, &str)> = candidates.iter().rev().copied().collect();
            assert_eq!(got, pick(&reversed, seed), "seed {seed}: the candidates' order does not matter");
        }
        assert!(tied.len() > 1, "ties fall differently under different seeds: {tied:?}");
        assert_eq!(nearest_servers("weather", &candidates, 10, 0, "x").len(), 7, "fewer than k: all of them");
        assert!(nearest_servers("weather", &candidates, 0, 0, "x").is_empty());
    }

    #[test]
    fn distractor_servers_enter_the_config_hash_only_when_not_the_default() {
        // What `plan` hashes of `[eval]`: the default stays out, so configs without the key
        // (the demo's) keep their hash.
        let hashed = |s: &EvalSettings| serde_json::to_value(s).unwrap();
        assert!(hashed(&space("standard", 3)).get("distractor_servers").is_none());
        assert_eq!(hashed(&space("standard", 1))["distractor_servers"], 1);
        assert_eq!(hashed(&space("standard", 1))["tool_space"], "standard");
    }

    #[test]
    fn a_config_without_tool_spaces_keeps_its_hash_and_one_with_them_runs_each() {
        // `tool_space` absent is hashed as `oracle`, as it was before `tool_spaces` existed;
        // `tool_spaces` only when given.
        let hashed = |s: &EvalSettings| serde_json::to_value(s).unwrap();
        let bare: EvalSettings = serde_json::from_value(json!({"agents": ["a"]})).unwrap();
        assert_eq!(bare.spaces(), [ToolSpace::Oracle]);
        assert_eq!(hashed(&bare)["tool_space"], "oracle");
        assert!(hashed(&bare).get("tool_spaces").is_none());
        let two: EvalSettings =
            serde_json::from_value(json!({"agents": ["a"], "tool_spaces": ["standard", "oracle"]})).unwrap();
        assert_eq!(two.spaces(), [ToolSpace::Standard, ToolSpace::Oracle], "in config order");
        assert_eq!(hashed(&two)["tool_spaces"], json!(["standard", "oracle"]));
    }
}
