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

/// Every file of a release `eval` reads, as handles.
const FILES: [&Artifact; 12] = [
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
        Ok(Release { shown, samples, tools, cassettes, efs, benches })
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

    /// The tool ids an agent sees on `sample`, sorted.
    pub fn tool_space(&self, space: ToolSpace, sample: &Sample) -> Vec<String> {
        match space {
            ToolSpace::Oracle => {
                let mut ids: BTreeSet<String> = BTreeSet::new();
                for alt in sample.turns.iter().flat_map(|t| t.reference_plan.iter().flat_map(|c| &c.alternatives)) {
                    ids.insert(alt.clone());
                    if let Some(members) = self.efs.get(alt) {
                        ids.extend(members.iter().cloned());
                    }
                }
                if ids.is_empty() {
                    // Nothing to call (L5): every released tool of the sample's track.
                    let catalog = if sample.family == Family::Etom { "filter" } else { "logs-import" };
                    ids.extend(self.tools.iter().filter(|(_, t)| t.catalog == catalog).map(|(id, _)| id.clone()));
                }
                ids.into_iter().filter(|id| self.tools.contains_key(id)).collect()
            }
        }
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
