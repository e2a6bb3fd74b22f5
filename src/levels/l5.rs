//! `benchgen levels l5` (stage `levels-l5`): out-of-scope requests (ETOM A.10).
//!
//! 1. Capability map: HDBSCAN (the `hdbscan` crate; ETOM's parameters by default:
//!    min_cluster_size 5, min_samples 2, euclidean on unit vectors, cluster selection
//!    epsilon 0.5) over the `embed` stage's tool vectors; each cluster is labelled from
//!    three perspectives and a judge picks the consensus label (the first on disagreement).
//! 2. Gap analysis: the writer lists universal everyday task categories; for each the judge
//!    answers YES/NO (a typed answer — ETOM searched the reply for the substring "NO"),
//!    and a NO is challenged by the red team with the most similar capability labels; the
//!    gap is confirmed only when the challenge fails (an invalid answer is re-asked, never
//!    taken as a confirmation).
//! 3. Persona queries per confirmed gap.
//! 4. Verification: top-k retrieval over the same embedding space as the tools (ETOM
//!    mixed two), the judge's verdict under the key the prompt names (`final_verdict`),
//!    then the self-check: a plan from the retrieved tools or exactly `IMPOSSIBLE`.
//!
//! The gap label is kept on every L5 query (`category`).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};
use futures::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Funnel, Generated, LevelOut};
use crate::embed::{INDEX, VECTORS};
use crate::embedding::{Lazy, Vectors};
use crate::llm::Prompt;
use crate::llm::batch::{self, Batch, Item};
use crate::settings::Settings;
use crate::stage::{Artifact, ConfigRef, Ctx, Inputs, Output, Plan, PromptRef, Stage, StageSpec};

pub const STAGE: &str = "levels-l5";
pub const QUERIES: Artifact<LevelOut> = Artifact::new(STAGE, "queries.json");
pub const LABEL_TEMPLATE: &str = "levels_l5_label";
pub const CONSENSUS_TEMPLATE: &str = "levels_l5_consensus";
pub const TASKS_TEMPLATE: &str = "levels_l5_tasks";
pub const CAN_TEMPLATE: &str = "levels_l5_can";
pub const CHALLENGE_TEMPLATE: &str = "levels_l5_challenge";
pub const QUERIES_TEMPLATE: &str = "levels_l5_queries";
pub const JUDGE_TEMPLATE: &str = "levels_l5_judge";
pub const SELF_CHECK_TEMPLATE: &str = "levels_l5_self_check";
/// The three labelling perspectives (ETOM: three sampling configurations of one model).
pub const PERSPECTIVES: [&str; 3] = ["a product manager", "a software engineer", "an everyday user"];

pub static SPEC: StageSpec = StageSpec {
    name: STAGE,
    command: "levels l5",
    // 2: the plan check (`plan_check`, issue 38): an L5 query has no plan.
    // 3: `min_cover_similarity` can overrule a "doable" with no capability near the task.
    // 4: ... and the out-of-scope judge's "solvable" with no tool near the query.
    // 5: ... and the self-check's plan with no tool near the query.
    // 6: the red team is not asked about a task no capability is near (its "doable"
    //    would be overruled): one call saved per such task.
    // 7: nor is the writer's self-check asked about a query no tool is near (its plan would
    //    be overruled, so the query is kept whatever it answers): one call of the writer
    //    saved per such query (two 1.5B calls of about 250 tokens, 48 s, in the demo); the
    //    queries' checks are in `gaps.json` (`query_checks`).
    // 8: v7's 400-character bound on a self-check plan is withdrawn: a server that ignores
    //    the schema would have a longer plan refused and the item could fail.
    // 9: a persona's queries schema holds at most `queries_per_persona` queries, the number
    //    kept (the demo's writer wrote ten for one).
    version: 9,
    about: "ETOM L5: capability map (HDBSCAN + LLM labels), gap analysis with a red team, persona queries, verification",
    reads: &[crate::filter::CATALOG.read(), INDEX.read(), VECTORS.read()],
    writes: &["queries.json", "capability_map.json", "gaps.json", crate::llm::batch::FAILED_FILE],
    section: Some("levels"),
};

/// Up to this many tools, HDBSCAN gets a precomputed distance matrix (144 MB at the
/// limit); above it, the crate computes distances itself (same result, slower).
pub const MATRIX_LIMIT: usize = 6000;

/// HDBSCAN cluster of each row (`-1` = noise), rows L2-normalised first.
///
/// Euclidean distances, as ETOM. Up to [`MATRIX_LIMIT`] rows they are computed here once
/// per pair ([`euclidean_matrix`]: both halves of the symmetric matrix from one
/// computation, several pairs at a time, on the machine's cores) and handed to the crate
/// as a precalculated matrix; the crate's own path computes each distance about twice
/// per pair (k-d tree for the core distances, then Prim's tree), one at a time, which
/// took seconds on the ETOM snapshot. The values are bit-identical to the crate's
/// (same operations in the same order), so the clusters are the same either way.
pub fn clusters(v: &Vectors, min_cluster_size: usize, min_samples: usize, epsilon: f64) -> Result<Vec<i32>> {
    let n = v.len();
    if n <= min_cluster_size.max(min_samples) {
        return Ok(vec![-1; n]);
    }
    let data: Vec<Vec<f32>> = (0..n).map(|i| crate::embedding::normalised(v.row(i).to_vec())).collect();
    let (input, metric) = if n <= MATRIX_LIMIT {
        (euclidean_matrix(&data), hdbscan::DistanceMetric::Precalculated)
    } else {
        (data, hdbscan::DistanceMetric::Euclidean)
    };
    let hp = hdbscan::HdbscanHyperParams::builder()
        .min_cluster_size(min_cluster_size)
        .min_samples(min_samples)
        .epsilon(epsilon)
        .dist_metric(metric)
        .build();
    hdbscan::Hdbscan::new(&input, hp).cluster().map_err(|e| anyhow::anyhow!("HDBSCAN failed: {e}"))
}

/// The full Euclidean distance matrix of equally long rows. Each distance is
/// `sqrt(Σ (a_k − b_k)²)` summed in index order from 0, exactly as the `hdbscan` crate
/// computes it; four pairs are summed side by side (independent additions), and rows are
/// shared out over up to four threads.
pub fn euclidean_matrix(data: &[Vec<f32>]) -> Vec<Vec<f32>> {
    let n = data.len();
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).clamp(1, 4).min(n.max(1));
    let mut upper: Vec<Vec<f32>> = vec![Vec::new(); n];
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || (t..n).step_by(threads).map(|i| (i, upper_row(data, i))).collect::<Vec<_>>()))
            .collect();
        for h in handles {
            for (i, row) in h.join().expect("a distance thread panicked") {
                upper[i] = row;
            }
        }
    });
    let mut m = vec![vec![0f32; n]; n];
    for (i, row) in upper.into_iter().enumerate() {
        for (off, d) in row.into_iter().enumerate() {
            let j = i + 1 + off;
            m[i][j] = d;
            m[j][i] = d;
        }
    }
    m
}

/// Distances from row `i` to every later row.
fn upper_row(data: &[Vec<f32>], i: usize) -> Vec<f32> {
    let a = data[i].as_slice();
    let d = a.len();
    let one = |b: &[f32]| -> f32 {
        let mut acc = 0f32;
        for (x, y) in a.iter().zip(&b[..d]) {
            acc += (x - y) * (x - y);
        }
        acc.sqrt()
    };
    let mut out = Vec::with_capacity(data.len() - i - 1);
    let mut rest = &data[i + 1..];
    while let [b0, b1, b2, b3, tail @ ..] = rest {
        let (b0, b1, b2, b3) = (&b0[..d], &b1[..d], &b2[..d], &b3[..d]);
        let mut acc = [0f32; 4];
        for k in 0..d {
            let x = a[k];
            acc[0] += (x - b0[k]) * (x - b0[k]);
            acc[1] += (x - b1[k]) * (x - b1[k]);
            acc[2] += (x - b2[k]) * (x - b2[k]);
            acc[3] += (x - b3[k]) * (x - b3[k]);
        }
        out.extend(acc.map(f32::sqrt));
        rest = tail;
    }
    out.extend(rest.iter().map(|b| one(b)));
    out
}

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct Label {
    /// A short capability label (2–6 words).
    pub label: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct Consensus {
    /// The best of the labels, or "DISAGREEMENT".
    pub consensus_label: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct Tasks {
    pub universal_tasks: Vec<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub enum YesNo {
    Yes,
    No,
}

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct CanDo {
    pub answer: YesNo,
    pub reason: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema, PartialEq)]
pub struct Challenge {
    pub is_challenge_valid: bool,
    pub reasoning: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct PersonaQueries {
    pub queries: Vec<String>,
}

/// The writer's answer schema for one persona: at most `n` queries (`queries_per_persona`),
/// the number the stage keeps. Unbounded, the demo's 1.5B wrote ten where one was asked
/// (265 completion tokens, 14.8 s on two cores, nine of them dropped).
pub(crate) fn persona_queries_schema(n: usize) -> serde_json::Value {
    crate::llm::schema_with_max_items::<PersonaQueries>("queries", n)
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, schemars::JsonSchema, PartialEq, Eq)]
pub enum Verdict {
    #[serde(rename = "Directly Solvable")]
    Direct,
    #[serde(rename = "Partially Solvable")]
    Partial,
    #[serde(rename = "Out-of-Scope")]
    OutOfScope,
}

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct Judged {
    pub analysis: String,
    pub final_verdict: Verdict,
}

#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
pub struct SelfCheck {
    /// A plan using only the listed tools, or exactly "IMPOSSIBLE".
    pub plan: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterLabel {
    pub size: usize,
    pub labels: Vec<String>,
    pub consensus: String,
    pub label: String,
    pub exchanges: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TaskCheck {
    pub can: bool,
    pub reason: String,
    #[serde(default)]
    pub nearest_labels: Vec<String>,
    #[serde(default)]
    pub challenge: Option<Challenge>,
    pub gap: bool,
    pub exchanges: Vec<String>,
    /// A "doable" of the judge that `min_cover_similarity` overruled, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overruled: Vec<String>,
    /// Why the red team was not asked: with no capability near the task its "doable"
    /// would be overruled, so the gap stands whatever it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchallenged: Option<String>,
}

/// Why a "doable" is not taken (`l5.min_cover_similarity`): nothing of `kind` is near the
/// `subject` (a capability label near a task; a retrieved tool near a query). `best`: the
/// nearest one and its cosine. Why: the demo's 0.5B judge called "ordering groceries
/// online" covered by "historical financial data retrieval" and "code management tools",
/// and "I want to order a cart of groceries" partly solvable by finance tools; no L5 query
/// was ever kept.
pub fn far_from(min: f64, best: Option<(&str, f32)>, (kind, subject): (&str, &str)) -> Option<String> {
    if min <= 0.0 {
        return None;
    }
    match best {
        Some((_, cos)) if f64::from(cos) >= min => None,
        Some((near, cos)) => {
            Some(format!("no {kind} is near the {subject}: the nearest, `{near}`, has cosine {cos:.2} < {min}"))
        }
        None => Some(format!("no {kind} to serve the {subject}")),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QueryCheck {
    pub gap: String,
    pub query: String,
    pub retrieved: Vec<String>,
    pub verdict: Verdict,
    pub analysis: String,
    #[serde(default)]
    pub plan: String,
    pub accepted: bool,
    pub exchanges: Vec<String>,
    /// What `min_cover_similarity` decided instead of a model, and why: a "solvable" or
    /// "partly" of the judge it overruled, or the self-check it did not ask (no tool is
    /// near the query, so a plan would be overruled too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overruled: Vec<String>,
}

/// ETOM's self-check, made exact: the answer is the word IMPOSSIBLE and nothing else.
pub fn is_impossible(plan: &str) -> bool {
    plan.trim().trim_matches(|c: char| c == '.' || c == '"' || c == '*').eq_ignore_ascii_case("impossible")
}

fn cosine_top(q: &[f32], rows: &[Vec<f32>], k: usize) -> Vec<usize> {
    let mut s: Vec<(f32, usize)> = rows.iter().enumerate().map(|(i, r)| (super::dot(q, r), i)).collect();
    s.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    s.into_iter().take(k).map(|(_, i)| i).collect()
}

pub struct L5Stage;

impl Stage for L5Stage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "L5: out-of-scope requests from the capability map's gaps, each with its gap label.

         Reads `filter/catalog.json` and `embed/` (`index.json`, `vectors.f32`). Writes
         `artifacts/levels-l5/queries.json`, `capability_map.json`, `gaps.json` (and
         `failed.json`)."
    }
    fn roles(&self, s: &Settings) -> Vec<ConfigRef> {
        let mut r = super::roles(s);
        if let Some(red) = &super::settings(s).red_team_role {
            r.push(ConfigRef::new("levels.red_team_role", red));
        }
        r
    }
    fn estimate(&self, s: &Settings) -> Vec<crate::stage::Estimate> {
        use crate::stage::Estimate;
        let l = super::settings(s);
        let c = match super::estimate_catalog(s) {
            Ok(c) => c,
            Err(unknown) => return unknown,
        };
        let cfg = &l.l5;
        // A cluster holds at least `min_cluster_size` tools.
        let clusters = crate::stage::capped(c.tools / cfg.min_cluster_size.max(1) as u64, cfg.max_clusters);
        let tasks = cfg.universal_tasks as u64;
        let personas = cfg.personas.len() as u64;
        // Every task may be a gap, written for by each persona.
        let lists = tasks * personas;
        let queries = lists * cfg.queries_per_persona as u64;
        let red = l.red_team_role.clone().unwrap_or_else(|| l.judge_role.clone());
        let p = PERSPECTIVES.len() as u64;
        super::estimates(
            s,
            vec![
                Estimate::typed(
                    &l.writer_role,
                    clusters * p + 1 + lists + queries,
                    format!("≤ {clusters} × {p} labels + 1 task list + {lists} persona lists + {queries} self-checks"),
                ),
                Estimate::typed(
                    &l.judge_role,
                    clusters + tasks + queries,
                    format!("≤ {clusters} consensus + {tasks} task checks + {queries} query verdicts"),
                ),
                Estimate::typed(&red, tasks, format!("≤ {tasks} challenges")),
            ],
        )
    }
    fn prompts(&self, _s: &Settings) -> Vec<PromptRef> {
        vec![
            PromptRef::new("levels.l5_label", LABEL_TEMPLATE, json!({"perspective": "p", "descriptions": ["d"]})),
            PromptRef::new("levels.l5_consensus", CONSENSUS_TEMPLATE, json!({"labels": ["a", "b", "c"]})),
            PromptRef::new("levels.l5_tasks", TASKS_TEMPLATE, json!({"n": 3})),
            PromptRef::new("levels.l5_can", CAN_TEMPLATE, json!({"task": "t", "labels": ["a"]})),
            PromptRef::new("levels.l5_challenge", CHALLENGE_TEMPLATE, json!({"task": "t", "labels": ["a"]})),
            PromptRef::new("levels.l5_queries", QUERIES_TEMPLATE, json!({"gap": "g", "persona": "p", "n": 2})),
            PromptRef::new(
                "levels.l5_judge",
                JUDGE_TEMPLATE,
                json!({"query": "q", "tools": [{"id": "s::t", "description": "d"}]}),
            ),
            PromptRef::new(
                "levels.l5_self_check",
                SELF_CHECK_TEMPLATE,
                json!({"query": "q", "tools": [{"id": "s::t", "description": "d"}]}),
            ),
        ]
    }
    fn check(&self, s: &Settings, problems: &mut Vec<crate::error::Problem>) {
        let c = super::settings(s).l5;
        if c.min_cluster_size < 2 {
            problems.push(crate::error::Problem::new("levels.l5.min_cluster_size", "must be at least 2"));
        }
        crate::settings::check_positive(problems, "levels.l5.min_samples", c.min_samples);
        crate::settings::check_range(problems, "levels.l5.cluster_epsilon", c.cluster_epsilon, 0.0, 2.0);
        crate::settings::check_positive(problems, "levels.l5.universal_tasks", c.universal_tasks);
        crate::settings::check_positive(problems, "levels.l5.queries_per_persona", c.queries_per_persona);
        crate::settings::check_positive(problems, "levels.l5.top_k", c.top_k);
        crate::settings::check_positive(problems, "levels.l5.top_labels", c.top_labels);
        let min_cover = c.min_cover_similarity;
        crate::settings::check_range(problems, "levels.l5.min_cover_similarity", min_cover, 0.0, 1.0);
        if c.personas.is_empty() {
            problems.push(crate::error::Problem::new("levels.l5.personas", "name at least one persona"));
        }
    }
    fn plan(&self, s: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![], config_hash: super::common_hash(s, &super::settings(s).l5)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let l = super::settings(s);
        let c = l.l5.clone();
        let seed = s.project.seed;
        let catalog = inputs.json(&crate::filter::CATALOG)?;
        let look = super::Lookup::new(&catalog);
        let vectors = Vectors::read(inputs)?;
        let (writer, judge) = (l.writer_role.as_str(), l.judge_role.as_str());
        let red = l.red_team_role.clone().unwrap_or_else(|| l.judge_role.clone());
        let red = red.as_str();
        let embedder = Lazy::new(s);
        let emb = &embedder;
        let mut funnel = Funnel::default();
        let mut batch = Batch::new(ctx, super::batch_options(STAGE, "L5", "items", s))?;

        // 1. Capability map. The embedding model loads on its own thread meanwhile.
        if !vectors.is_empty() {
            embedder.preload()?;
        }
        let assign = clusters(&vectors, c.min_cluster_size, c.min_samples, c.cluster_epsilon)?;
        let mut members: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        for (row, &cl) in assign.iter().enumerate() {
            if cl >= 0 {
                members.entry(cl).or_default().push(row);
            }
        }
        let mut order: Vec<(i32, Vec<usize>)> = members.into_iter().collect();
        order.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let noise = assign.iter().filter(|&&a| a < 0).count();
        funnel.step("tools clustered", vectors.len());
        funnel.step("clusters", order.len());
        if c.max_clusters > 0 {
            order.truncate(c.max_clusters);
        }
        let cluster_items: Vec<(String, (usize, Vec<String>))> = order
            .iter()
            .map(|(cl, rows)| {
                let descs: Vec<String> = rows
                    .iter()
                    .filter_map(|&r| look.get(&vectors.index.tools[r].id))
                    .map(|(_, t)| super::one_line(&t.description))
                    .collect();
                let descs = super::seeded_subset(&descs, c.descriptions_per_cluster, seed, &format!("l5:cluster:{cl}"));
                (format!("cluster:{cl:04}"), (rows.len(), descs))
            })
            .collect();
        batch.phase("cluster labels");
        let labelled = batch.run(cluster_items, |(size, descs): (usize, Vec<String>), llm: Item| async move {
            let llm = &llm;
            let calls = join_all(PERSPECTIVES.iter().enumerate().map(|(i, p)| {
                let pr = Prompt::new(LABEL_TEMPLATE, json!({"perspective": p, "descriptions": descs}));
                async move { llm.typed_as::<Label>(writer, &pr, &format!("label-{}", i + 1)).await }
            }))
            .await;
            let labels = batch::all(calls)?;
            let names: Vec<String> = labels.iter().map(|l| super::one_line(&l.value.label)).collect();
            let j = llm
                .typed_as::<Consensus>(judge, &Prompt::new(CONSENSUS_TEMPLATE, json!({"labels": names})), "consensus")
                .await?;
            let consensus = super::one_line(&j.value.consensus_label);
            let label = if consensus.eq_ignore_ascii_case("DISAGREEMENT") || consensus.is_empty() {
                names[0].clone()
            } else {
                consensus.clone()
            };
            let mut exchanges: Vec<String> = labels.into_iter().map(|l| l.exchange).collect();
            exchanges.push(j.exchange);
            Ok(ClusterLabel { size, labels: names, consensus, label, exchanges })
        })?;
        let labels: Vec<String> =
            labelled.values.values().map(|c| c.label.clone()).collect::<BTreeSet<_>>().into_iter().collect();
        funnel.step("capability labels", labels.len());
        let label_vecs = if labels.is_empty() {
            vec![]
        } else {
            embedder.embed(&labels).context("embedding the capability labels")?
        };

        // 2. Gap analysis.
        let n_tasks = c.universal_tasks;
        batch.phase("everyday tasks");
        let tasks = batch.run(vec![("tasks".to_string(), ())], |_: (), llm: Item| async move {
            let r = llm.typed::<Tasks>(writer, &Prompt::new(TASKS_TEMPLATE, json!({"n": n_tasks}))).await?;
            Ok((r.value.universal_tasks, r.exchange))
        })?;
        let mut task_list: Vec<String> = Vec::new();
        if let Some((list, _)) = tasks.values.get("tasks") {
            for t in list {
                let t = super::one_line(t);
                if !t.is_empty() && !task_list.contains(&t) && task_list.len() < n_tasks {
                    task_list.push(t);
                }
            }
        }
        funnel.step("universal tasks", task_list.len());
        let (labels_ref, lv, top_labels, min_cover) = (&labels, &label_vecs, c.top_labels, c.min_cover_similarity);
        let task_items: Vec<(String, String)> = task_list.iter().map(|t| (format!("task:{t}"), t.clone())).collect();
        // The tasks' vectors (for the red team's nearest labels) are computed ahead.
        let task_vecs = emb.prefetch(task_list.clone(), |i| !lv.is_empty() && !batch.is_done(&task_items[i].0))?;
        let task_vecs = &task_vecs;
        batch.phase("task coverage");
        let checked = batch.run(task_items, |task: String, llm: Item| async move {
            let can = llm
                .typed_as::<CanDo>(
                    judge,
                    &Prompt::new(CAN_TEMPLATE, json!({"task": task, "labels": labels_ref})),
                    "can",
                )
                .await?;
            let mut rec = TaskCheck {
                can: can.value.answer == YesNo::Yes,
                reason: super::one_line(&can.value.reason),
                nearest_labels: vec![],
                challenge: None,
                gap: false,
                exchanges: vec![can.exchange],
                overruled: vec![],
                unchallenged: None,
            };
            // The nearest labels, for the red team, and the first one's cosine, for the
            // similarity guard.
            let mut best_cos: Option<f32> = None;
            if !lv.is_empty() && (!rec.can || min_cover > 0.0) {
                let q = task_vecs.get(&task).await?;
                let top = cosine_top(&q, lv, top_labels);
                best_cos = top.first().map(|&i| super::dot(&q, &lv[i]));
                rec.nearest_labels = top.into_iter().map(|i| labels_ref[i].clone()).collect();
            }
            let best = rec.nearest_labels.first().map(String::as_str).zip(best_cos);
            let far = far_from(min_cover, best, ("capability", "task"));
            if rec.can {
                match &far {
                    Some(why) => {
                        rec.can = false;
                        rec.overruled.push(format!("judge: {why}"));
                    }
                    None => return Ok(rec),
                }
            }
            if let Some(why) = far {
                rec.gap = true;
                rec.unchallenged = Some(format!("{why}: a \"doable\" of the red team would be overruled"));
                return Ok(rec);
            }
            let ch = llm
                .typed_as::<Challenge>(
                    red,
                    &Prompt::new(CHALLENGE_TEMPLATE, json!({"task": task, "labels": rec.nearest_labels})),
                    "challenge",
                )
                .await?;
            rec.gap = !ch.value.is_challenge_valid;
            rec.exchanges.push(ch.exchange);
            rec.challenge = Some(Challenge {
                is_challenge_valid: ch.value.is_challenge_valid,
                reasoning: super::one_line(&ch.value.reasoning),
            });
            Ok(rec)
        })?;
        let mut gaps = Vec::new();
        for (key, t) in &checked.values {
            let task = key.trim_start_matches("task:");
            if t.can {
                funnel.reject(key, format!("covered: {}", t.reason));
            } else if !t.gap {
                let why = t.challenge.as_ref().map(|c| c.reasoning.clone()).unwrap_or_default();
                funnel.reject(key, format!("challenged: the red team showed it doable ({why})"));
            } else {
                gaps.push(task.to_string());
            }
        }
        if min_cover > 0.0 {
            let overruled = checked.values.values().filter(|t| !t.overruled.is_empty()).count();
            funnel.step("tasks whose \"doable\" no capability is near", overruled);
            let unchallenged = checked.values.values().filter(|t| t.unchallenged.is_some()).count();
            funnel.step("gaps not put to the red team (no capability near)", unchallenged);
        }
        funnel.step("confirmed gaps", gaps.len());

        // 3. Persona queries per gap.
        let (personas, per) = (&c.personas, c.queries_per_persona);
        let gap_items: Vec<(String, String)> = gaps.iter().map(|g| (format!("gap:{g}"), g.clone())).collect();
        batch.phase("persona queries");
        let written = batch.run(gap_items, |gap: String, llm: Item| async move {
            let llm = &llm;
            let calls = join_all(personas.iter().enumerate().map(|(i, p)| {
                let pr = Prompt::new(QUERIES_TEMPLATE, json!({"gap": gap, "persona": p, "n": per}));
                let schema = ("PersonaQueries", persona_queries_schema(per));
                let part = format!("persona-{}", i + 1);
                async move { llm.typed_schema::<PersonaQueries>(writer, &pr, Some(&part), schema, |_| Ok(())).await }
            }))
            .await;
            let r = batch::all(calls)?;
            let mut qs: Vec<String> = Vec::new();
            for a in &r {
                for q in a.value.queries.iter().take(per) {
                    let q = super::one_line(q);
                    if !q.is_empty() && !qs.contains(&q) {
                        qs.push(q);
                    }
                }
            }
            Ok((qs, r.into_iter().map(|a| a.exchange).collect::<Vec<_>>()))
        })?;
        let mut cand: BTreeMap<String, (String, String)> = BTreeMap::new();
        for (key, (qs, _)) in &written.values {
            let gap = key.trim_start_matches("gap:");
            for q in qs {
                // The same text under two gaps is asked once, under the first gap.
                cand.entry(format!("query:{q}")).or_insert_with(|| (gap.to_string(), q.clone()));
            }
        }
        funnel.step("candidate queries", cand.len());

        // 4. Verification.
        let (vref, look_ref, top_k) = (&vectors, &look, c.top_k);
        let q_items: Vec<(String, (String, String))> = cand.into_iter().collect();
        // The queries' vectors (for retrieval) are computed ahead, in query order.
        let q_vecs =
            emb.prefetch(q_items.iter().map(|(_, (_, q))| q.clone()).collect(), |i| !batch.is_done(&q_items[i].0))?;
        let q_vecs = &q_vecs;
        batch.phase("query checks");
        let verified = batch.run(q_items, |(gap, query): (String, String), llm: Item| async move {
            let q = q_vecs.get(&query).await?;
            let idx = crate::efs::topdown::retrieve(vref, &q, top_k);
            // The nearest tool's cosine, for the similarity guard.
            let nearest_cos = idx.first().map(|&r| super::dot(vref.row(r), &q));
            let retrieved: Vec<String> = idx.iter().map(|&r| vref.index.tools[r].id.clone()).collect();
            let tools: Vec<Value> = retrieved
                .iter()
                .map(|id| json!({"id": id, "description": look_ref.get(id).map(|(_, t)| t.description.clone()).unwrap_or_default()}))
                .collect();
            let vars = json!({"query": query, "tools": tools});
            let j = llm.typed_as::<Judged>(judge, &Prompt::new(JUDGE_TEMPLATE, vars.clone()), "judge").await?;
            let mut rec = QueryCheck { gap, query, retrieved, verdict: j.value.final_verdict, analysis: super::one_line(&j.value.analysis), plan: String::new(), accepted: false, exchanges: vec![j.exchange], overruled: vec![] };
            let far = far_from(min_cover, rec.retrieved.first().map(String::as_str).zip(nearest_cos), ("tool", "query"));
            if rec.verdict != Verdict::OutOfScope {
                match &far {
                    Some(why) => rec.overruled.push(format!("judge: {why}")),
                    None => return Ok(rec),
                }
            }
            // A plan is one more "doable": with no tool near the query it would be overruled
            // too (the 1.5B planned stock quotes for "apples, bananas and oranges"), so the
            // query is kept whatever the self-check says, and it is not asked.
            if let Some(why) = far {
                rec.accepted = true;
                rec.overruled.push(format!("self-check: not asked, {why}"));
                return Ok(rec);
            }
            let p = llm.typed_as::<SelfCheck>(writer, &Prompt::new(SELF_CHECK_TEMPLATE, vars), "self-check").await?;
            rec.plan = super::one_line(&p.value.plan);
            rec.accepted = is_impossible(&rec.plan);
            rec.exchanges.push(p.exchange);
            Ok(rec)
        })?;
        for f in labelled
            .failed
            .iter()
            .chain(&tasks.failed)
            .chain(&checked.failed)
            .chain(&written.failed)
            .chain(&verified.failed)
        {
            funnel.reject(&f.item, format!("failed: {}", f.reason));
        }
        batch.finish(out)?;
        let mut checks = super::plan_check::PlanChecks::default();
        let mut accepted = 0;
        let mut queries = Vec::new();
        for (key, r) in &verified.values {
            if r.verdict != Verdict::OutOfScope && r.overruled.is_empty() {
                funnel.reject(key, format!("solvable: judged {:?} ({})", r.verdict, r.analysis));
            } else if !r.accepted {
                funnel.reject(key, format!("self-check: a plan was found ({})", r.plan));
            } else {
                let mut exchanges =
                    written.values.get(&format!("gap:{}", r.gap)).map(|w| w.1.clone()).unwrap_or_default();
                exchanges.extend(r.exchanges.iter().cloned());
                accepted += 1;
                let no_tool = &super::plan_check::no_tool;
                match checks.apply((key, 5), &r.query, &[], (no_tool, None), &l.plan_check) {
                    Ok(steps) => queries.push(Generated {
                        key: key.clone(),
                        query: r.query.clone(),
                        steps,
                        category: Some(r.gap.clone()),
                        entity: None,
                        exchanges,
                    }),
                    Err(e) => funnel.reject(key, e),
                }
            }
        }
        funnel.step("out of scope, verified", accepted);
        checks.count(&mut funnel, queries.len());
        let map: BTreeMap<String, &ClusterLabel> = labelled.values.iter().map(|(k, v)| (k.clone(), v)).collect();
        out.json("capability_map.json", &json!({"noise_tools": noise, "clusters": map}))?;
        // The queries' checks too: a judge's verdict or a self-check that was overruled or
        // not asked is recorded nowhere else.
        out.json("gaps.json", &json!({"confirmed": gaps, "checks": checked.values, "query_checks": verified.values}))?;
        LevelOut { level: 5, queries, funnel, plan_checks: checks.records }.write(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_doable_counts_only_with_a_capability_near_the_task() {
        let task = ("capability", "task");
        assert_eq!(far_from(0.0, None, task), None, "off: the judge is trusted");
        assert_eq!(far_from(0.3, Some(("stock market data", 0.31)), task), None);
        let far = far_from(0.3, Some(("stock market data", 0.12)), task).unwrap();
        assert_eq!(far, "no capability is near the task: the nearest, `stock market data`, has cosine 0.12 < 0.3");
        assert!(far_from(0.3, None, task).is_some(), "no label at all");
    }

    /// The `hdbscan` crate's Euclidean distance, as it computes it.
    fn crate_euclidean(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| (*x - *y) * (*x - *y)).fold(0f32, std::ops::Add::add).sqrt()
    }

    #[test]
    fn the_precomputed_matrix_gives_the_crates_distances_and_clusters() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        // Blobs around 12 centres in 24 dimensions, plus noise, 301 rows (not a multiple of 4).
        let centres: Vec<Vec<f32>> = (0..12).map(|_| (0..24).map(|_| rng.random_range(-1.0..1.0)).collect()).collect();
        let data: Vec<Vec<f32>> = (0..301)
            .map(|i| {
                let c = &centres[i % 12];
                let spread = if i % 10 == 0 { 1.0 } else { 0.05 };
                c.iter().map(|x| x + rng.random_range(-spread..spread)).collect()
            })
            .collect();
        let m = euclidean_matrix(&data);
        for i in 0..data.len() {
            assert_eq!(m[i][i], 0.0);
            for j in 0..data.len() {
                assert_eq!(m[i][j].to_bits(), crate_euclidean(&data[i], &data[j]).to_bits(), "({i}, {j})");
            }
        }
        let hp = |metric| {
            hdbscan::HdbscanHyperParams::builder()
                .min_cluster_size(5)
                .min_samples(2)
                .epsilon(0.5)
                .dist_metric(metric)
                .build()
        };
        let theirs = hdbscan::Hdbscan::new(&data, hp(hdbscan::DistanceMetric::Euclidean)).cluster().unwrap();
        let ours = hdbscan::Hdbscan::new(&m, hp(hdbscan::DistanceMetric::Precalculated)).cluster().unwrap();
        assert_eq!(ours, theirs);
        assert!(ours.iter().filter(|&&c| c >= 0).count() > 200, "the blobs are found: {ours:?}");
    }

    #[test]
    fn only_the_word_impossible_counts() {
        assert!(is_impossible(" IMPOSSIBLE. "));
        assert!(is_impossible("impossible"));
        assert!(!is_impossible("It is not impossible: call X then Y"));
    }
}
