//! `benchgen synth chains` (stage `synth-chains`): tool chains sampled from the dependency
//! graph, each turned into one user query by the LLM (FinMCP-Bench's chain-based
//! multi-tool synthesis).
//!
//! Per sub-scenario (sorted): the tool pairs `(t_i, t_j)` that occur in one real multi-tool
//! session of that sub-scenario, `t_i` first; for each pair, up to `paths_per_pair` simple
//! paths from `t_i` to `t_j` along graph edges (a seeded random depth-first search: the
//! same pair gives different chains, and no tool repeats, so cycles cannot loop); the
//! sub-scenario's target (`per_sub_scenario`) split over chain lengths by `lengths`
//! (largest remainder), each length filled with seeded draws from its distinct paths. A
//! path already taken (in this or an earlier sub-scenario) is not taken again; every
//! shortfall is reported with its reason. For each chain tool, a seed example: a real
//! single-tool query of that tool from the seed pool (same sub-scenario first). The LLM
//! ([`ChainQuery`]) writes one query that needs the whole chain in order, in the
//! examples' language.
//!
//! Outputs: `queries.jsonl` (the `execute` query format, with the chain), `chains.jsonl`
//! (chain, pair, seed examples, query, exchange), `sampling.json` (per sub-scenario:
//! pairs, paths per length, requested, sampled, shortfalls) and `report.md`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, bail};
use rand::SeedableRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{ChainSettings, SynthSettings};
use crate::agent::{ChainStep, Query};
use crate::graph::GraphDoc;
use crate::ledger::{NewEvent, Parent};
use crate::llm::Prompt;
use crate::llm::batch::{Batch, BatchOptions, Item};
use crate::logs::Session;
use crate::logs::import::LogTool;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "synth-chains";

/// The chain queries in `execute`'s query format (read by `execute`, which names the file by
/// its place, `crate::execute::CHAIN_QUERIES`, and runs it as [`FEED`] says).
pub const QUERIES: Artifact<Query> = Artifact::new(STAGE, "queries.jsonl");
/// Per sub-scenario, how the chains were drawn (read by `validate` for its funnel).
pub const SAMPLING: Artifact<Vec<SubSampling>> = Artifact::new(STAGE, "sampling.json");
/// One [`ChainRecord`] a line (read by `validate`).
pub const CHAINS: Artifact<ChainRecord> = Artifact::new(STAGE, "chains.jsonl");

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "synth chains",
    // 3: the answer's schema says what is asked, not "the X's typed answer" (developer
    //     wording the model read).
    version: 3,
    about: "tool chains sampled from the dependency graph, each written as one user query by the LLM",
    reads: &[
        crate::graph::build::GRAPH.read(),
        crate::graph::review::GRAPH.optional(),
        crate::logs::split::GRAPH_SOURCE.read(),
        crate::logs::split::SEED.read(),
        crate::logs::import::CATALOG.read(),
    ],
    writes: &["queries.jsonl", "chains.jsonl", "sampling.json", "report.md", "failed.json"],
    section: Some("synth"),
};

/// How `execute` runs the queries this stage writes, from `[synth]`: handed to `execute` by
/// the stage list, so `execute` reads only `[execute]`.
pub static FEED: crate::execute::Feed = crate::execute::Feed {
    enabled: super::enabled,
    role_key: "synth.assistant_role",
    role: assistant_role,
    server_key: "synth.server",
    server: execution_server,
    server_hash: super::server_hash_part,
    clients: super::clients,
    bound: chain_bound,
};

/// The agent's role on the chain queries ([`FEED`]).
fn assistant_role(s: &Settings) -> String {
    cfg(s).assistant_role
}

/// The `[mcp.servers]` entry the chain queries run against ([`FEED`]); `None`: the sandbox.
fn execution_server(s: &Settings) -> Option<String> {
    cfg(s).server
}

/// A sampled chain before the query is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampledChain {
    pub id: String,
    pub sub_scenario: String,
    /// The co-occurring pair the path connects.
    pub pair: (String, String),
    /// Tools in order; each depends on the one before.
    pub tools: Vec<String>,
}

/// How one sub-scenario's chains were drawn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubSampling {
    pub sub_scenario: String,
    /// Ordered tool pairs co-occurring in a multi-tool session of this sub-scenario.
    pub pairs: usize,
    /// Pairs with at least one path in the graph.
    pub pairs_with_path: usize,
    /// Distinct paths found, per chain length.
    pub paths: BTreeMap<usize, usize>,
    pub requested: BTreeMap<usize, usize>,
    pub sampled: BTreeMap<usize, usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shortfalls: Vec<String>,
}

/// The whole draw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub chains: Vec<SampledChain>,
    pub sub_scenarios: Vec<SubSampling>,
}

/// The chain-length mix as `(length, weight)`, lengths ascending; errors name the key.
pub fn length_mix(cfg: &ChainSettings) -> Result<Vec<(usize, f64)>> {
    let mut out = Vec::new();
    for (k, w) in &cfg.lengths {
        let n: usize = match k.trim().parse() {
            Ok(n) if n >= 2 => n,
            _ => bail!("`synth.chains.lengths`: key `{k}` is not a chain length (a whole number ≥ 2)"),
        };
        if !(w.is_finite() && *w >= 0.0) {
            bail!("`synth.chains.lengths.{k}`: the weight must be a number ≥ 0, not {w}");
        }
        out.push((n, *w));
    }
    out.sort_by_key(|(n, _)| *n);
    if out.iter().all(|(_, w)| *w == 0.0) {
        bail!("`synth.chains.lengths` gives no length a positive weight");
    }
    Ok(out)
}

/// Split `total` over the weights by largest remainder (ties to the shorter length).
pub fn quotas(total: usize, mix: &[(usize, f64)]) -> BTreeMap<usize, usize> {
    let sum: f64 = mix.iter().map(|(_, w)| w).sum();
    let mut out: BTreeMap<usize, usize> = BTreeMap::new();
    let mut rems = Vec::new();
    let mut given = 0;
    for (i, (n, w)) in mix.iter().enumerate() {
        let exact = total as f64 * w / sum;
        let base = exact.floor() as usize;
        out.insert(*n, base);
        given += base;
        rems.push((exact - base as f64, i));
    }
    rems.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal).then(a.1.cmp(&b.1)));
    for (_, i) in rems.into_iter().take(total - given) {
        *out.entry(mix[i].0).or_default() += 1;
    }
    out.retain(|_, v| *v > 0);
    out
}

fn sub_rng(seed: u64, salt: &str) -> ChaCha8Rng {
    let h = crate::store::sha256_hex(format!("{seed}|{salt}").as_bytes());
    ChaCha8Rng::seed_from_u64(u64::from_str_radix(&h.trim_start_matches("sha256:")[..16], 16).unwrap_or(0))
}

/// Ordered pairs of distinct tools in one session (first occurrence of each tool; `a`
/// before `b`).
fn session_pairs(s: &Session) -> BTreeSet<(String, String)> {
    let mut order: Vec<&str> = Vec::new();
    for c in s.calls() {
        if !order.contains(&c.tool.as_str()) {
            order.push(&c.tool);
        }
    }
    let mut out = BTreeSet::new();
    for i in 0..order.len() {
        for j in i + 1..order.len() {
            out.insert((order[i].to_string(), order[j].to_string()));
        }
    }
    out
}

/// Simple paths from `from` to `to` of at most `max_len` tools, at most `limit` of them,
/// found by a depth-first search that tries neighbours in a seeded random order.
pub fn paths(
    adj: &BTreeMap<String, Vec<String>>,
    from: &str,
    to: &str,
    max_len: usize,
    limit: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<Vec<String>> {
    fn dfs(
        adj: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        to: &str,
        max_len: usize,
        limit: usize,
        rng: &mut ChaCha8Rng,
        out: &mut Vec<Vec<String>>,
    ) {
        if out.len() >= limit {
            return;
        }
        let last = path.last().expect("a path starts with its source").clone();
        if last == to {
            out.push(path.clone());
            return;
        }
        if path.len() >= max_len {
            return;
        }
        let mut next: Vec<&String> = adj.get(&last).map(|v| v.iter().collect()).unwrap_or_default();
        next.shuffle(rng);
        for n in next {
            if path.contains(n) {
                continue; // a cycle: never revisit a tool
            }
            path.push(n.clone());
            dfs(adj, path, to, max_len, limit, rng, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    if from == to || limit == 0 {
        return out;
    }
    dfs(adj, &mut vec![from.to_string()], to, max_len, limit, rng, &mut out);
    out
}

/// A co-occurring pair and one path between its tools.
type Candidate = ((String, String), Vec<String>);

/// The draw (pure: the same graph, sessions, settings and seed give the same chains).
/// At most how many chains [`sample`] takes, before anything runs: `per_sub_scenario` for
/// each sub-scenario a graph session can carry (one it was logged with, or one of the
/// curation taxonomy's when the LLM labels sessions; never more than the sessions), within
/// `max_chains`. With the reason, for estimates.
pub fn chain_bound(s: &Settings) -> Option<(u64, String)> {
    let c = cfg(s).chains;
    let (sessions, from) = crate::logs::import::sessions_before_run(s)?;
    let mut subs: BTreeSet<String> = sessions.iter().map(Session::sub_scenario).collect();
    let curate = crate::logs::import::settings(s).curate;
    if curate.scenarios == crate::logs::ScenarioSource::Llm {
        subs.extend(curate.taxonomy.iter().map(|t| t.split('-').take(2).collect::<Vec<_>>().join("-")));
    }
    let n_subs = (subs.len() as u64).min(sessions.len() as u64);
    let n = n_subs * c.per_sub_scenario as u64;
    Some(match c.max_chains {
        Some(cap) if (cap as u64) < n => (cap as u64, "≤ `synth.chains.max_chains`".to_string()),
        _ => (n, format!("≤ {n_subs} sub-scenarios in {from} × {} per_sub_scenario", c.per_sub_scenario)),
    })
}

pub fn sample(graph: &GraphDoc, sources: &[Session], cfg: &ChainSettings, seed: u64) -> Result<Sampling> {
    let mix = length_mix(cfg)?;
    let max_len = mix.iter().map(|(n, _)| *n).max().unwrap_or(2);
    let mut adj: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &graph.edges {
        if e.from != e.to {
            adj.entry(e.from.clone()).or_default().push(e.to.clone());
        }
    }
    for v in adj.values_mut() {
        v.sort();
        v.dedup();
    }
    let mut by_sub: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for s in sources {
        by_sub.entry(s.sub_scenario()).or_default().extend(session_pairs(s));
    }
    let mut taken: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut out = Sampling::default();
    for (sub, pairs) in &by_sub {
        let mut rng = sub_rng(seed, sub);
        let mut rep = SubSampling { sub_scenario: sub.clone(), pairs: pairs.len(), ..Default::default() };
        let mut by_len: BTreeMap<usize, Vec<Candidate>> = BTreeMap::new();
        for (a, b) in pairs {
            let found = paths(&adj, a, b, max_len, cfg.paths_per_pair, &mut rng);
            if !found.is_empty() {
                rep.pairs_with_path += 1;
            }
            for p in found {
                by_len.entry(p.len()).or_default().push(((a.clone(), b.clone()), p));
            }
        }
        for (n, v) in &by_len {
            rep.paths.insert(*n, v.len());
        }
        rep.requested = quotas(cfg.per_sub_scenario, &mix);
        for (len, want) in &rep.requested {
            let mut cands: Vec<&Candidate> = by_len.get(len).map(|v| v.iter().collect()).unwrap_or_default();
            cands.shuffle(&mut rng);
            let mut got = 0;
            let mut repeated = 0;
            for (pair, path) in cands {
                if got == *want {
                    break;
                }
                if !taken.insert(path.clone()) {
                    repeated += 1;
                    continue;
                }
                got += 1;
                out.chains.push(SampledChain {
                    id: format!("chain-{}", super::short_hash(&format!("{sub}|{}", path.join(">")))),
                    sub_scenario: sub.clone(),
                    pair: pair.clone(),
                    tools: path.clone(),
                });
            }
            rep.sampled.insert(*len, got);
            if got < *want {
                let found = rep.paths.get(len).copied().unwrap_or(0);
                rep.shortfalls.push(format!(
                    "length {len}: {got} of {want} chains; the graph offers {found} distinct path(s) of that length between co-occurring pairs{}",
                    if repeated > 0 { format!(" ({repeated} already taken)") } else { String::new() }
                ));
            }
        }
        out.sub_scenarios.push(rep);
    }
    if let Some(max) = cfg.max_chains
        && out.chains.len() > max
    {
        let mut rng = sub_rng(seed, "max_chains");
        out.chains.shuffle(&mut rng);
        for dropped in out.chains.split_off(max) {
            let rep = out.sub_scenarios.iter_mut().find(|r| r.sub_scenario == dropped.sub_scenario);
            let rep = rep.expect("every chain has its sub-scenario");
            *rep.sampled.entry(dropped.tools.len()).or_default() -= 1;
            rep.shortfalls.push(format!("a chain of length {} left out by `max_chains` = {max}", dropped.tools.len()));
        }
    }
    out.chains.sort_by(|a, b| (&a.sub_scenario, &a.id).cmp(&(&b.sub_scenario, &b.id)));
    Ok(out)
}

/// One seed example shown to the query writer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedExample {
    pub tool: String,
    /// The seed-pool session it comes from.
    pub session: String,
    pub query: String,
}

/// For each chain tool, a seed single-tool session of it (same sub-scenario first), drawn
/// with a rng seeded by the chain id; tools without any seed example are skipped.
pub fn seed_examples(chain: &SampledChain, seeds: &BTreeMap<String, Vec<&Session>>, seed: u64) -> Vec<SeedExample> {
    let mut rng = sub_rng(seed, &chain.id);
    let mut out = Vec::new();
    for t in &chain.tools {
        let Some(pool) = seeds.get(t) else { continue };
        let same: Vec<&&Session> = pool.iter().filter(|s| s.sub_scenario() == chain.sub_scenario).collect();
        let from: Vec<&&Session> = if same.is_empty() { pool.iter().collect() } else { same };
        if let Some(s) = from.choose(&mut rng) {
            out.push(SeedExample {
                tool: t.clone(),
                session: s.id.clone(),
                query: s.turns.first().map(|t| t.user.clone()).unwrap_or_default(),
            });
        }
    }
    out
}

/// The user's request for this chain of tools.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChainQuery {
    /// The user's request: one message that needs every tool of the chain, in order.
    pub query: String,
}

/// The query writer's answer: a query that is not blank and does not loop.
pub(crate) fn query_answer() -> crate::llm::Answer<ChainQuery> {
    crate::llm::Answer::<ChainQuery>::of()
        .non_blank("query", |q: &ChainQuery| q.query.as_str())
        .check(|q| crate::llm::extract::check_no_loop(&q.query, "the query"))
}

/// A finished chain (a line of `chains.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainRecord {
    pub id: String,
    pub sub_scenario: String,
    pub pair: (String, String),
    pub tools: Vec<String>,
    pub seeds: Vec<SeedExample>,
    pub query: String,
    /// Request hash of the query exchange.
    pub exchange: String,
}

/// What a chain event links to besides its query exchange: the verdicts (and review
/// decisions) of the graph edges along its path, and the split record of each seed
/// session (which links on to its curation decision and import record).
struct ChainLinks {
    edges: BTreeMap<String, Vec<i64>>,
    reviews: BTreeMap<String, Vec<i64>>,
    splits: BTreeMap<String, Vec<i64>>,
}

impl ChainLinks {
    fn load(ctx: &Ctx) -> Result<Self> {
        use crate::ledger::{Ledger, kind};
        let run = |st: &str| ctx.manifest_of(st).map(|m| m.run_id);
        let a = &ctx.settings.artifacts;
        Ok(ChainLinks {
            edges: Ledger::ids_by_subject_in(a, kind::VERDICT, run(crate::graph::build::STAGE))?,
            reviews: Ledger::ids_by_subject_in(a, kind::REVIEW, run(crate::graph::review::STAGE))?,
            splits: Ledger::ids_by_subject_in(a, crate::logs::kind::SPLIT, run(crate::logs::split::STAGE))?,
        })
    }

    fn parents(&self, rec: &ChainRecord) -> BTreeSet<i64> {
        let mut out = BTreeSet::new();
        for w in rec.tools.windows(2) {
            let subject = format!("edge:{}", crate::graph::edge_key(&w[0], &w[1]));
            out.extend(self.edges.get(&subject).and_then(|i| i.last()));
            out.extend(self.reviews.get(&subject).and_then(|i| i.last()));
        }
        for seed in &rec.seeds {
            out.extend(self.splits.get(&crate::logs::subject(&seed.session)).and_then(|i| i.last()));
        }
        out
    }
}

/// The checkpointed value of one chain.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Written {
    query: String,
    exchange: String,
    /// The exchange's ledger event (from the run that asked; a parent for the chain event
    /// without a ledger scan per chain).
    event: i64,
}

fn tool_vars(t: &str, tools: &BTreeMap<String, LogTool>) -> serde_json::Value {
    let info = tools.get(t);
    let params: Vec<String> = info
        .and_then(|x| x.input_schema.get("properties"))
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    json!({"name": t, "description": info.map(|x| x.description.clone()).unwrap_or_default(), "parameters": params})
}

/// The query prompt of one chain.
pub fn prompt(
    cfg: &ChainSettings,
    chain: &SampledChain,
    examples: &[SeedExample],
    tools: &BTreeMap<String, LogTool>,
) -> Prompt {
    Prompt::new(
        &cfg.template,
        json!({
            "sub_scenario": chain.sub_scenario,
            "tools": chain.tools.iter().map(|t| tool_vars(t, tools)).collect::<Vec<_>>(),
            "examples": examples,
        }),
    )
}

/// The chain as `execute` checks it: each tool depends on the one before.
pub fn chain_steps(tools: &[String]) -> Vec<ChainStep> {
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| ChainStep { tool: t.clone(), depends_on: if i == 0 { vec![] } else { vec![i - 1] } })
        .collect()
}

/// The graph synthesis uses: the reviewed one when `graph review import` ran, else the
/// LLM-validated one.
pub fn graph(inputs: &Inputs) -> Result<GraphDoc> {
    if inputs.has(&crate::graph::review::GRAPH) {
        inputs.json(&crate::graph::review::GRAPH)
    } else {
        inputs.json(&crate::graph::build::GRAPH)
    }
}

pub struct ChainsStage;

fn cfg(s: &Settings) -> SynthSettings {
    super::settings(s)
}

impl Stage for ChainsStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Sample tool chains from the dependency graph and have the LLM write one query each.

         Reads `graph-build/graph.json` (or the reviewed `graph-review-import/graph.json`),
         `logs-split/graph_source.jsonl` (co-occurring pairs per sub-scenario),
         `logs-split/seed.jsonl` (examples) and `logs-import/catalog.json`. Writes
         `artifacts/synth-chains/`: `queries.jsonl` (for `execute`), `chains.jsonl`,
         `sampling.json`, `report.md` and `failed.json` when queries failed. Resumable per chain."
    }

    fn enabled(&self, s: &Settings) -> bool {
        super::enabled(s)
    }

    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        vec![ConfigRef::new("synth.planner_role", &cfg(s).planner_role)]
    }

    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        let c = cfg(s);
        let e = match chain_bound(s) {
            Some((n, basis)) => crate::stage::Estimate::typed(&c.planner_role, n, basis),
            None => crate::stage::Estimate::unknown(&c.planner_role, crate::stage::UNTIL_LOGS),
        };
        vec![e.in_flight(c.chains.concurrency.max(1))]
    }

    fn prompts(&self, s: &Settings) -> Vec<PromptRef> {
        let tool = json!({"name": "t", "description": "d", "parameters": ["p"]});
        let vars = json!({"sub_scenario": "A-B", "tools": [tool, tool],
            "examples": [{"tool": "t", "session": "s", "query": "q"}]});
        vec![PromptRef::new("synth.chains.template", &cfg(s).chains.template, vars)]
    }

    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        let c = cfg(s).chains;
        crate::settings::check_positive(problems, "synth.chains.per_sub_scenario", c.per_sub_scenario);
        crate::settings::check_positive(problems, "synth.chains.paths_per_pair", c.paths_per_pair);
        crate::settings::check_positive(problems, "synth.chains.concurrency", c.concurrency);
        if let Err(e) = length_mix(&c) {
            problems.push(crate::error::Problem::new("synth.chains.lengths", format!("{e:#}")));
        }
    }

    fn plan(&self, s: &Settings) -> Result<Plan> {
        let c = cfg(s);
        let hash = json!({"chains": c.chains, "planner_role": c.planner_role, "seed": s.project.seed});
        Ok(Plan { inputs: vec![], config_hash: section_hash(&hash)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let sc = cfg(s);
        let c = &sc.chains;
        let seed = s.project.seed;
        let graph = graph(inputs)?;
        let sources = crate::logs::read_sessions(
            inputs.open_of(&crate::logs::split::GRAPH_SOURCE)?,
            "logs-split/graph_source.jsonl",
        )?;
        let seed_sessions =
            crate::logs::read_sessions(inputs.open_of(&crate::logs::split::SEED)?, "logs-split/seed.jsonl")?;
        let tools: BTreeMap<String, LogTool> =
            inputs.json(&crate::logs::import::CATALOG)?.into_iter().map(|t| (t.name.clone(), t)).collect();
        let mut seeds: BTreeMap<String, Vec<&Session>> = BTreeMap::new();
        for sess in &seed_sessions {
            if let Some(call) = sess.calls().next() {
                seeds.entry(call.tool.clone()).or_default().push(sess);
            }
        }
        for v in seeds.values_mut() {
            v.sort_by(|a, b| a.id.cmp(&b.id));
        }

        let sampling = sample(&graph, &sources, c, seed)?;
        let examples: BTreeMap<String, Vec<SeedExample>> =
            sampling.chains.iter().map(|ch| (ch.id.clone(), seed_examples(ch, &seeds, seed))).collect();
        let items: Vec<(String, Prompt)> =
            sampling.chains.iter().map(|ch| (ch.id.clone(), prompt(c, ch, &examples[&ch.id], &tools))).collect();
        let opts = BatchOptions::new(STAGE, "chains", "chains")
            .concurrency(c.concurrency.max(1))
            .max_failed_share(c.max_failed_share, "synth.chains.max_failed_share")
            .fail_point("synth_chain");
        let mut batch = Batch::new(ctx, opts)?;
        let role = sc.planner_role.as_str();
        let done = batch.run(items, |prompt: Prompt, llm: Item| async move {
            // A looping or blank query goes back to the model with the reason (its retries), then fails.
            let reply = llm.ask(role, &prompt, None, &query_answer()).await?;
            let query = reply.value.query.trim().to_string();
            Ok(Written { query, exchange: reply.exchange, event: reply.event_id })
        })?;

        let links = ChainLinks::load(ctx)?;
        let mut records = Vec::new();
        for ch in &sampling.chains {
            let Some(w) = done.values.get(&ch.id) else { continue };
            let rec = ChainRecord {
                id: ch.id.clone(),
                sub_scenario: ch.sub_scenario.clone(),
                pair: ch.pair.clone(),
                tools: ch.tools.clone(),
                seeds: examples[&ch.id].clone(),
                query: w.query.clone(),
                exchange: w.exchange.clone(),
            };
            let mut ev =
                NewEvent::new(super::kind::CHAIN, Some(&crate::model::Sample::subject_for(&ch.id)), json!(rec))
                    .with_parent(Parent::Id(w.event));
            for p in links.parents(&rec) {
                ev = ev.with_parent(Parent::Id(p));
            }
            out.event(ev);
            records.push(rec);
        }
        records.sort_by(|a, b| a.id.cmp(&b.id));
        batch.finish(out)?;

        let mut queries = Vec::new();
        let mut chains = Vec::new();
        for r in &records {
            let q = Query { id: r.id.clone(), query: r.query.clone(), chain: chain_steps(&r.tools) };
            serde_json::to_writer(&mut queries, &q)?;
            queries.push(b'\n');
            serde_json::to_writer(&mut chains, r)?;
            chains.push(b'\n');
        }
        out.file("queries.jsonl", queries);
        out.file("chains.jsonl", chains);
        out.json("sampling.json", &sampling.sub_scenarios)?;
        out.file("report.md", report(&sampling, &records).into_bytes());
        out.count("sampled", sampling.chains.len());
        out.count("chains", records.len());
        out.notes.push(format!(
            "{} chains sampled over {} sub-scenarios, {} queries written ({} resumed)",
            sampling.chains.len(),
            sampling.sub_scenarios.len(),
            records.len(),
            done.resumed
        ));
        Ok(())
    }
}

fn report(sampling: &Sampling, records: &[ChainRecord]) -> String {
    let mut md = String::from("# Chain synthesis\n\n");
    md.push_str("| sub-scenario | pairs | pairs with a path | paths by length | requested | sampled | shortfalls |\n");
    md.push_str("|---|---|---|---|---|---|---|\n");
    let fmt = |m: &BTreeMap<usize, usize>| {
        if m.is_empty() {
            "—".to_string()
        } else {
            m.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
        }
    };
    for r in &sampling.sub_scenarios {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.sub_scenario,
            r.pairs,
            r.pairs_with_path,
            fmt(&r.paths),
            fmt(&r.requested),
            fmt(&r.sampled),
            if r.shortfalls.is_empty() { "—".into() } else { r.shortfalls.join("; ") }
        ));
    }
    // failed.json exists only when a chain failed, so it is pointed at only then.
    let failed = sampling.chains.len().saturating_sub(records.len());
    md.push_str(&format!("\n{} chains sampled; {} queries written", sampling.chains.len(), records.len()));
    md.push_str(&match failed {
        0 => ".\n\n".to_string(),
        n => format!(" ({n} failed; reasons in failed.json).\n\n"),
    });
    md.push_str("| id | sub-scenario | chain | query |\n|---|---|---|---|\n");
    for r in records {
        md.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.id,
            r.sub_scenario,
            r.tools.join(" → "),
            crate::text::one_line(&r.query).replace('|', "\\|")
        ));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_split_by_largest_remainder() {
        assert_eq!(quotas(4, &[(2, 1.0), (3, 1.0)]), BTreeMap::from([(2, 2), (3, 2)]));
        assert_eq!(quotas(3, &[(2, 1.0), (3, 1.0)]), BTreeMap::from([(2, 2), (3, 1)]));
        assert_eq!(quotas(5, &[(2, 0.0), (4, 1.0)]), BTreeMap::from([(4, 5)]));
        assert_eq!(quotas(10, &[(2, 0.7), (6, 0.2), (11, 0.1)]), BTreeMap::from([(2, 7), (6, 2), (11, 1)]));
    }

    #[test]
    fn paths_follow_edges_and_never_revisit_a_tool() {
        let mut adj: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("b", "d"), ("d", "c")] {
            adj.entry(a.into()).or_default().push(b.into());
        }
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut found = paths(&adj, "a", "c", 5, 10, &mut rng);
        found.sort();
        assert_eq!(found, vec![vec!["a", "b", "c"], vec!["a", "b", "d", "c"]]);
        assert!(paths(&adj, "a", "c", 2, 10, &mut rng).is_empty(), "bounded length");
    }
}
