//! `benchgen efs pairs`: candidate pairs of possibly equivalent tools, and the
//! plan of LLM calls that will judge them (`calls.jsonl`, see [`super::plan`]).
//!
//! Cost is LLM calls: a listwise call judges a tool against up to `list_size`
//! candidates, so the search favours recall and the plan keeps calls few. For every tool, every other tool with cosine ≥
//! `min_cosine` gets a combined score
//!
//! `score = cosine + name_weight·J(name tokens) + param_weight·J(parameter tokens)
//!          − action_penalty·[actions differ] − same_server_penalty·[same server]`
//!
//! (J = Jaccard overlap; see [`super::lexical`]). The tool keeps its `top_k`
//! highest-scoring neighbours with score ≥ `min_score` (ties: catalog order). A
//! pair qualifies if either endpoint keeps the other (or both, with
//! `mutual_only`). The search is exact: all pairs in a loop ([`exact_neighbours`]), or
//! tiles of a matrix multiply that only filter what the loop's arithmetic then scores
//! ([`super::index`], `index = "blocked"`, the default from [`AUTO_BLOCKED_FROM`] tools);
//! both give the same lists bit for bit, whatever the thread count.
//!
//! Outputs in `artifacts/efs-pairs/`: `pairs.csv` (one row per pair, sorted by
//! ids: `a,b,cosine,score,name_overlap,param_overlap,action_a,action_b,
//! same_server,rank_a,rank_b`; `rank_a` is b's rank among a's neighbours, empty
//! when a did not select b), `similarity.svg` (cosine histogram of all top-k
//! neighbours vs the selected pairs) and `summary.json`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::lexical::{Features, Interner, jaccard};
use crate::embedding::Vectors;
use crate::model::Catalog;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const PAIRS_CSV: &str = "pairs.csv";
pub const CALLS_JSONL: &str = "calls.jsonl";
pub const LEFT_OUT_CSV: &str = "left_out.csv";

/// `[efs.pairs]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PairSettings {
    /// Neighbours each tool keeps.
    #[serde(default = "d_top_k")]
    pub top_k: usize,
    /// Combined score a neighbour needs.
    #[serde(default = "d_min_score")]
    pub min_score: f32,
    /// Cosine below which a pair is never considered (lexical overlap alone is not enough).
    #[serde(default = "d_min_cosine")]
    pub min_cosine: f32,
    #[serde(default = "d_name_weight")]
    pub name_weight: f32,
    #[serde(default = "d_param_weight")]
    pub param_weight: f32,
    /// Subtracted when the two tools' actions (read, create, update, delete, …) differ.
    #[serde(default = "d_penalty")]
    pub action_penalty: f32,
    /// Subtracted for two tools of one server (mostly siblings, rarely duplicates).
    #[serde(default = "d_penalty")]
    pub same_server_penalty: f32,
    /// Never pair two tools of one server.
    #[serde(default)]
    pub cross_server_only: bool,
    /// Keep a pair only when both endpoints select each other.
    #[serde(default)]
    pub mutual_only: bool,
    /// How each tool ranks its neighbours (with score ≥ `min_score`) to keep `top_k`:
    /// by the combined score, or by reciprocal-rank fusion of several views.
    #[serde(default, skip_serializing_if = "RankBy::is_score")]
    pub rank_by: RankBy,
    /// RRF's constant k: a view's vote for rank r is `1 / (rrf_k + r)`.
    #[serde(default = "d_rrf_k")]
    pub rrf_k: f32,
    /// Candidates shown in one listwise verification call (see [`super::plan`]).
    #[serde(default = "d_list_size")]
    pub list_size: usize,
    /// Budget of planned LLM calls (0: no limit); the least valuable calls are left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_calls: usize,
    /// How the neighbour search runs: the plain pairwise loop, the blocked matrix-multiply
    /// search, or the loop below [`AUTO_BLOCKED_FROM`] tools and blocked from there. Every
    /// choice finds the same neighbours (see [`super::index`]), so a tuning knob, not hashed.
    #[serde(default, skip_serializing)]
    pub index: SearchIndex,
    /// Worker threads (0: one per core). A tuning knob, not hashed.
    #[serde(default, skip_serializing)]
    pub threads: usize,
}

/// How `efs pairs` finds each tool's neighbours (`[efs.pairs] index`).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum SearchIndex {
    /// Every pair's dot product in a plain loop (the reference).
    Exact,
    /// Tiles of the similarity matrix by a matrix multiply, then the loop's own
    /// arithmetic on the pairs that can still make a list: same neighbours, bit for bit.
    /// `"ann"` is accepted as another name: it meets what an approximate index is asked
    /// for (100,000 tools in seconds) with recall 1.0 instead of ≥ 0.99.
    #[serde(alias = "ann")]
    Blocked,
    /// `exact` below [`AUTO_BLOCKED_FROM`] tools, `blocked` from there.
    #[default]
    Auto,
}

/// Catalog size from which `index = "auto"` uses the blocked search (the loop takes about
/// a second at 5,000 tools on 2 cores and grows with n²).
pub const AUTO_BLOCKED_FROM: usize = 5_000;

impl SearchIndex {
    /// The search `auto` stands for at `n` tools.
    pub fn resolve(self, n: usize) -> SearchIndex {
        match self {
            SearchIndex::Auto if n >= AUTO_BLOCKED_FROM => SearchIndex::Blocked,
            SearchIndex::Auto => SearchIndex::Exact,
            other => other,
        }
    }
}

/// How a tool orders its neighbours before keeping `top_k`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RankBy {
    /// The combined score.
    #[default]
    Score,
    /// Reciprocal-rank fusion of four views of the tool text: embedding cosine (name,
    /// description and parameters together), name words, description words and
    /// parameter names (Jaccard overlaps; a view with no overlap gives no vote). A
    /// neighbour that several views rank high wins over one that only the embedding
    /// likes (same-server siblings share wording, not names).
    Rrf,
}

impl RankBy {
    fn is_score(&self) -> bool {
        *self == RankBy::Score
    }
}

fn d_rrf_k() -> f32 {
    10.0
}

fn is_zero(v: &usize) -> bool {
    *v == 0
}
fn d_list_size() -> usize {
    10
}

fn d_top_k() -> usize {
    10
}
fn d_min_score() -> f32 {
    // Low, since a listwise call judges up to `list_size` pairs at once: on the ETOM
    // snapshot 0.5 plans 2,040 calls for 13,414 pairs (0.75 planned 870 calls but
    // missed real equivalents of different servers; see docs/efs.md).
    0.5
}
fn d_min_cosine() -> f32 {
    0.45
}
fn d_name_weight() -> f32 {
    0.25
}
fn d_param_weight() -> f32 {
    0.1
}
fn d_penalty() -> f32 {
    0.1
}

impl Default for PairSettings {
    fn default() -> Self {
        Self {
            top_k: d_top_k(),
            min_score: d_min_score(),
            min_cosine: d_min_cosine(),
            name_weight: d_name_weight(),
            param_weight: d_param_weight(),
            action_penalty: d_penalty(),
            same_server_penalty: d_penalty(),
            cross_server_only: false,
            mutual_only: false,
            rank_by: RankBy::Score,
            rrf_k: d_rrf_k(),
            list_size: d_list_size(),
            max_calls: 0,
            index: SearchIndex::Auto,
            threads: 0,
        }
    }
}

/// One candidate pair (`a < b` in id order).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Pair {
    pub a: String,
    pub b: String,
    pub cosine: f32,
    pub score: f32,
    pub name_overlap: f32,
    pub param_overlap: f32,
    pub action_a: Option<String>,
    pub action_b: Option<String>,
    pub same_server: bool,
    /// b's rank (1-based) among a's neighbours; empty when a did not select b.
    pub rank_a: Option<usize>,
    pub rank_b: Option<usize>,
}

impl Pair {
    pub fn key(&self) -> String {
        pair_key(&self.a, &self.b)
    }
}

/// The id of a pair, used for checkpoints and ledger subjects.
pub fn pair_key(a: &str, b: &str) -> String {
    if a <= b { format!("{a} <> {b}") } else { format!("{b} <> {a}") }
}

/// A neighbour kept by one tool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbour {
    pub j: usize,
    pub cosine: f32,
    pub score: f32,
    pub name: f32,
    pub param: f32,
}

/// Dot product with 8 independent accumulators (auto-vectorised, fixed order). Both
/// searches compute every reported cosine with it, so they agree bit for bit.
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Rows processed together, so each column vector is loaded once per block.
const BLOCK: usize = 32;

/// Every tool's top-k neighbours by combined score (before `min_score`), in
/// score order (ties: lower index first). `data` is `n × dim`, rows L2-normalised;
/// `servers[i]` is tool i's server index. `p.index` picks the search; all give the
/// same lists.
pub fn neighbours(
    data: &[f32],
    dim: usize,
    feats: &[Features],
    servers: &[u32],
    p: &PairSettings,
) -> Vec<Vec<Neighbour>> {
    match p.index.resolve(servers.len()) {
        SearchIndex::Blocked => super::index::neighbours(data, dim, feats, servers, p),
        _ => exact_neighbours(data, dim, feats, servers, p),
    }
}

/// Worker threads for a search.
pub(crate) fn thread_count(p: &PairSettings) -> usize {
    let t = if p.threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { p.threads };
    t.max(1)
}

/// [`neighbours`] by the plain loop: every pair's dot product, blocked by rows and spread
/// over threads.
pub fn exact_neighbours(
    data: &[f32],
    dim: usize,
    feats: &[Features],
    servers: &[u32],
    p: &PairSettings,
) -> Vec<Vec<Neighbour>> {
    let n = servers.len();
    let threads = thread_count(p);
    let next = AtomicUsize::new(0);
    let blocks = n.div_ceil(BLOCK);
    let mut results: Vec<(usize, Vec<Vec<Neighbour>>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let b = next.fetch_add(1, Ordering::Relaxed);
                        if b >= blocks {
                            break;
                        }
                        mine.push((
                            b,
                            block_neighbours(b * BLOCK, ((b + 1) * BLOCK).min(n), data, dim, feats, servers, p),
                        ));
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("pair search thread panicked")).collect()
    });
    results.sort_by_key(|(b, _)| *b);
    results.into_iter().flat_map(|(_, v)| v).collect()
}

/// The lexical signals and combined score of row `i`'s neighbour `j` at `cosine`.
#[inline]
pub(crate) fn scored(
    i: usize,
    j: usize,
    cosine: f32,
    feats: &[Features],
    servers: &[u32],
    p: &PairSettings,
) -> Neighbour {
    let same = servers[i] == servers[j];
    let (fi, fj) = (&feats[i], &feats[j]);
    let name = jaccard(&fi.name, &fj.name);
    let param = jaccard(&fi.params, &fj.params);
    let conflict = matches!((fi.action, fj.action), (Some(x), Some(y)) if x != y);
    let score = cosine + p.name_weight * name + p.param_weight * param
        - if conflict { p.action_penalty } else { 0.0 }
        - if same { p.same_server_penalty } else { 0.0 };
    Neighbour { j, cosine, score, name, param }
}

/// The plain loop's lists for rows `lo..hi` only (what [`exact_neighbours`] computes per
/// block): a reference for a sample of rows when the whole loop is too slow to run.
pub fn block_neighbours(
    lo: usize,
    hi: usize,
    data: &[f32],
    dim: usize,
    feats: &[Features],
    servers: &[u32],
    p: &PairSettings,
) -> Vec<Vec<Neighbour>> {
    let n = servers.len();
    let mut cands: Vec<Vec<Neighbour>> = vec![Vec::new(); hi - lo];
    for j in 0..n {
        let col = &data[j * dim..(j + 1) * dim];
        for i in lo..hi {
            if i == j {
                continue;
            }
            if p.cross_server_only && servers[i] == servers[j] {
                continue;
            }
            let cosine = dot(&data[i * dim..(i + 1) * dim], col);
            if cosine < p.min_cosine {
                continue;
            }
            cands[i - lo].push(scored(i, j, cosine, feats, servers, p));
        }
    }
    for (r, c) in cands.iter_mut().enumerate() {
        keep_best(lo + r, c, feats, p);
    }
    cands
}

/// Row `i`'s final list from its candidates (every neighbour with cosine ≥ `min_cosine`,
/// or a superset of those that can make the list, in any order): the `top_k` best by
/// score, or by fusion with `rank_by = "rrf"`.
pub(crate) fn keep_best(i: usize, c: &mut Vec<Neighbour>, feats: &[Features], p: &PairSettings) {
    if p.rank_by == RankBy::Rrf {
        // Fusion ranks only neighbours that qualify (score mode sorts by score, so
        // its top-k before `min_score` is the same).
        c.retain(|nb| nb.score >= p.min_score);
        let desc: Vec<f32> = c.iter().map(|nb| jaccard(&feats[i].desc, &feats[nb.j].desc)).collect();
        let fused = rrf(c, &desc, p.rrf_k);
        let mut order: Vec<usize> = (0..c.len()).collect();
        order.sort_by(|&x, &y| {
            fused[y].total_cmp(&fused[x]).then(c[x].score.total_cmp(&c[y].score).reverse()).then(c[x].j.cmp(&c[y].j))
        });
        order.truncate(p.top_k);
        let kept: Vec<Neighbour> = order.into_iter().map(|k| c[k]).collect();
        *c = kept;
    } else {
        c.sort_by(|x, y| y.score.total_cmp(&x.score).then(x.j.cmp(&y.j)));
        c.truncate(p.top_k);
    }
}

/// Reciprocal-rank fusion of the views of each candidate: cosine, name, description
/// (`desc`, aligned with `c`) and parameter overlap. Ranks are 1-based in descending
/// value (ties: lower row first); a zero overlap gives no vote.
fn rrf(c: &[Neighbour], desc: &[f32], k: f32) -> Vec<f32> {
    let mut fused = vec![0f32; c.len()];
    let views: [Box<dyn Fn(usize) -> f32>; 4] =
        [Box::new(|x| c[x].cosine), Box::new(|x| c[x].name), Box::new(|x| desc[x]), Box::new(|x| c[x].param)];
    for (v, value) in views.iter().enumerate() {
        let mut order: Vec<usize> = (0..c.len()).collect();
        order.sort_by(|&x, &y| value(y).total_cmp(&value(x)).then(c[x].j.cmp(&c[y].j)));
        for (rank, &x) in order.iter().enumerate() {
            if v > 0 && value(x) <= 0.0 {
                break;
            }
            fused[x] += 1.0 / (k + rank as f32 + 1.0);
        }
    }
    fused
}

/// A selected pair of rows: `(i, j, rank of j in i's list, rank of i in j's list, scores)`.
pub type Selected = (usize, usize, Option<usize>, Option<usize>, Neighbour);

/// Pairs from neighbour lists: a pair qualifies when either endpoint keeps the
/// other with score ≥ `min_score` (both, with `mutual_only`). Returns
/// `(i, j, rank_i, rank_j, neighbour)` with `i < j`, sorted by `(i, j)`.
pub fn select(lists: &[Vec<Neighbour>], p: &PairSettings) -> Vec<Selected> {
    type Ranks = (Option<usize>, Option<usize>, Neighbour);
    let mut by_pair: BTreeMap<(usize, usize), Ranks> = BTreeMap::new();
    for (i, list) in lists.iter().enumerate() {
        for (r, nb) in list.iter().enumerate().filter(|(_, nb)| nb.score >= p.min_score) {
            let (a, b) = (i.min(nb.j), i.max(nb.j));
            let e = by_pair.entry((a, b)).or_insert((None, None, *nb));
            if i == a {
                e.0 = Some(r + 1);
            } else {
                e.1 = Some(r + 1);
            }
        }
    }
    by_pair
        .into_iter()
        .filter(|(_, (ra, rb, _))| !p.mutual_only || (ra.is_some() && rb.is_some()))
        .map(|((a, b), (ra, rb, nb))| (a, b, ra, rb, nb))
        .collect()
}

fn round4(x: f32) -> f32 {
    (x * 10_000.0).round() / 10_000.0
}

/// Tools of the catalog in embedding-row order, with their lexical features.
pub struct ToolTable {
    pub ids: Vec<String>,
    pub servers: Vec<u32>,
    pub server_names: Vec<String>,
    pub feats: Vec<Features>,
}

impl ToolTable {
    /// Align the catalog with the vector rows; every vector row must be a tool of the catalog.
    pub fn new(catalog: &Catalog, vectors: &Vectors) -> Result<Self> {
        let mut interner = Interner::default();
        let mut by_id = HashMap::new();
        let mut server_index: HashMap<&str, u32> = HashMap::new();
        for (s, t) in catalog.tools() {
            let next = server_index.len() as u32;
            let si = *server_index.entry(s.name.as_str()).or_insert(next);
            by_id.insert(t.id.as_str(), (si, s.name.clone(), interner.features_of(t, &s.name)));
        }
        let mut out = ToolTable { ids: vec![], servers: vec![], server_names: vec![], feats: vec![] };
        for row in &vectors.index.tools {
            let (si, sname, f) = by_id.get(row.id.as_str()).with_context(|| {
                format!("the embeddings list `{}`, which is not in the catalog; rerun `benchgen embed`", row.id)
            })?;
            out.ids.push(row.id.clone());
            out.servers.push(*si);
            out.server_names.push(sname.clone());
            out.feats.push(f.clone());
        }
        Ok(out)
    }
}

/// Run the whole candidate search; returns the selected pairs and the cosine
/// values of every top-k neighbour (for the histogram).
pub fn find_pairs(table: &ToolTable, vectors: &Vectors, p: &PairSettings) -> (Vec<Pair>, Vec<f32>) {
    let lists = neighbours(&vectors.data, vectors.dim(), &table.feats, &table.servers, p);
    let all_cos: Vec<f32> = lists.iter().flatten().map(|nb| nb.cosine).collect();
    let pairs = select(&lists, p)
        .into_iter()
        .map(|(i, j, ri, rj, nb)| {
            // Report in id order (`a < b`), whatever the row order.
            let (a, b, ra, rb) = if table.ids[i] <= table.ids[j] { (i, j, ri, rj) } else { (j, i, rj, ri) };
            Pair {
                a: table.ids[a].clone(),
                b: table.ids[b].clone(),
                cosine: round4(nb.cosine),
                score: round4(nb.score),
                name_overlap: round4(nb.name),
                param_overlap: round4(nb.param),
                action_a: table.feats[a].action.map(str::to_string),
                action_b: table.feats[b].action.map(str::to_string),
                same_server: table.servers[a] == table.servers[b],
                rank_a: ra,
                rank_b: rb,
            }
        })
        .collect::<Vec<_>>();
    let mut pairs = pairs;
    pairs.sort_by(|x, y| (&x.a, &x.b).cmp(&(&y.a, &y.b)));
    (pairs, all_cos)
}

pub fn write_csv(pairs: &[Pair]) -> Result<Vec<u8>> {
    crate::csvout::table(
        &[
            "a",
            "b",
            "cosine",
            "score",
            "name_overlap",
            "param_overlap",
            "action_a",
            "action_b",
            "same_server",
            "rank_a",
            "rank_b",
        ],
        pairs,
    )
}

pub fn read_csv(bytes: &[u8], file: &str) -> Result<Vec<Pair>> {
    let mut r = csv::Reader::from_reader(bytes);
    let headers = r.headers().with_context(|| format!("`{file}` has no header row"))?.clone();
    let mut out = Vec::new();
    for (i, row) in r.records().enumerate() {
        // Cells were neutralised against spreadsheet formulas when written (crate::csvout).
        let row = row.map(|rec| rec.iter().map(crate::csvout::restore).collect::<csv::StringRecord>());
        let pair = row.and_then(|rec| rec.deserialize(Some(&headers)));
        out.push(pair.with_context(|| format!("`{file}` row {} is not a valid pair", i + 2))?);
    }
    Ok(out)
}

/// Cosine histogram (bins of 0.02) of all top-k neighbours and of the selected pairs.
pub fn histogram_svg(all: &[f32], selected: &[f32], title: &str) -> Result<String> {
    use plotters::prelude::*;
    let bin = |x: f32| ((x.clamp(-1.0, 1.0) + 1.0) * 50.0).floor().min(99.0) as usize;
    let mut a = [0usize; 100];
    let mut s = [0usize; 100];
    all.iter().for_each(|x| a[bin(*x)] += 1);
    selected.iter().for_each(|x| s[bin(*x)] += 1);
    let lo = a.iter().position(|c| *c > 0).unwrap_or(50).min(s.iter().position(|c| *c > 0).unwrap_or(50));
    let max = a.iter().chain(s.iter()).copied().max().unwrap_or(1).max(1);
    let x0 = lo as f32 / 50.0 - 1.0;
    let mut svg = String::new();
    {
        let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("chart: {e}");
        let root = SVGBackend::with_string(&mut svg, (900, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..1.0f32, 0usize..(max + max / 10 + 1))
            .map_err(|e| err(&e))?;
        chart.configure_mesh().x_desc("cosine similarity").y_desc("pairs").draw().map_err(|e| err(&e))?;
        for (counts, color, label) in [
            (&a, RGBColor(180, 180, 180), "top-k neighbours (both directions)"),
            (&s, RGBColor(66, 113, 196), "selected candidate pairs"),
        ] {
            chart
                .draw_series(counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, c)| {
                    let x = i as f32 / 50.0 - 1.0;
                    Rectangle::new([(x, 0), (x + 0.02, *c)], color.filled())
                }))
                .map_err(|e| err(&e))?
                .label(label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub tools: usize,
    pub pairs: usize,
    pub cross_server: usize,
    pub same_server: usize,
    pub mutual: usize,
    pub tools_in_pairs: usize,
    pub settings: PairSettings,
    /// Pairs per cosine band (lower bound, step 0.05).
    pub by_cosine: BTreeMap<String, usize>,
    /// The verification plan (`calls.jsonl`): how `efs verify` asks.
    pub verify_mode: super::plan::VerifyMode,
    /// Planned LLM calls.
    pub calls: usize,
    /// Calls and pairs `max_calls` left out (the pairs are in `left_out.csv`).
    pub left_out: super::plan::LeftOut,
}

pub struct PairsStage;

/// Candidate pairs with every signal, those the plan judges (CSV; read with [`read_pairs`]).
pub const PAIRS: Artifact = Artifact::new("efs-pairs", PAIRS_CSV);
/// The verification plan (JSON lines; read with [`read_calls`]).
pub const CALLS: Artifact = Artifact::new("efs-pairs", CALLS_JSONL);

pub static SPEC: StageSpec = StageSpec {
    name: "efs-pairs",
    command: "efs pairs",
    // 2: lexical signals fold plurals by `text::singular` (`status` stays, `ids` → `id`).
    // 3: plurals fold by the shared `text::singular` as refined: `caches` → `cache`, `causes` →
    //     `cause`, `cpus` → `cpu`; three-letter words but `ids` and `this`, `news` stay.
    // 4: plurals fold by `text::singular` with two vowels before `ch`/`us` read as one
    //     (`breaches` → `breach`, not `breache`), and `ips`, `vms`, `prs` fold.
    version: 4,
    about: "candidate pairs of possibly equivalent tools and the plan of LLM calls that will judge them (no LLM)",
    reads: &[crate::filter::CATALOG.read(), crate::embed::INDEX.read(), crate::embed::VECTORS.read()],
    writes: &[PAIRS_CSV, CALLS_JSONL, LEFT_OUT_CSV, "similarity.svg", "summary.json"],
    section: Some("efs"),
};

/// The planned verification calls, from a consumer's declared inputs.
pub fn read_calls(inputs: &Inputs) -> Result<Vec<super::plan::PlannedCall>> {
    super::plan::read_jsonl(inputs.bytes_of(&CALLS)?, &format!("artifacts/{}/{}", CALLS.stage, CALLS.file))
}

/// The candidate pairs, from a consumer's declared inputs.
pub fn read_pairs(inputs: &Inputs) -> Result<Vec<Pair>> {
    read_csv(inputs.bytes_of(&PAIRS)?, &format!("artifacts/{}/{}", PAIRS.stage, PAIRS.file))
}

impl Stage for PairsStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn help(&self) -> &'static str {
        "Candidate pairs of possibly equivalent tools, and the plan of LLM calls that will judge them (no LLM).

         Reads `artifacts/filter/catalog.json`, `artifacts/embed/` (`index.json`,
         `vectors.f32`) and `[efs.pairs]`.
         Each tool keeps its top-k neighbours by a score combining cosine similarity
         with name and parameter overlap (minus penalties for differing actions and a
         shared server); a pair qualifies if either endpoint keeps it. Plans the
         verification calls (listwise: greedy set cover of the pairs by anchor tools)
         and prints their number. Writes `artifacts/efs-pairs/pairs.csv` (planned
         pairs), `calls.jsonl` (one line per planned call), `left_out.csv` (pairs
         `max_calls` left out), `similarity.svg` and `summary.json`.
         Skipped when up to date."
    }

    fn enabled(&self, settings: &Settings) -> bool {
        settings.section::<crate::embedding::EmbedSettings>().is_some()
            || settings.section::<super::EfsSettings>().is_some()
    }

    fn check(&self, settings: &Settings, problems: &mut Vec<crate::error::Problem>) {
        use crate::settings::{check_positive, check_range};
        let p = &super::efs_settings(settings).pairs;
        check_positive(problems, "efs.pairs.top_k", p.top_k);
        check_range(problems, "efs.pairs.min_cosine", p.min_cosine as f64, -1.0, 1.0);
        // Scores are cosine plus bonuses minus penalties, so they range a little wider.
        check_range(problems, "efs.pairs.min_score", p.min_score as f64, -3.0, 3.0);
        for (k, v) in [
            ("efs.pairs.name_weight", p.name_weight),
            ("efs.pairs.param_weight", p.param_weight),
            ("efs.pairs.action_penalty", p.action_penalty),
            ("efs.pairs.same_server_penalty", p.same_server_penalty),
        ] {
            check_range(problems, k, v as f64, 0.0, 1.0);
        }
        check_positive(problems, "efs.pairs.list_size", p.list_size);
        if super::efs_settings(settings).verify.mode == super::plan::VerifyMode::Listwise && p.top_k > p.list_size {
            problems.push(crate::error::Problem::new(
                "efs.pairs.list_size",
                format!("must be at least `top_k` ({}), so one listwise call can hold every tool's own picks", p.top_k),
            ));
        }
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        let e = super::efs_settings(settings);
        Ok(Plan {
            inputs: vec![],
            config_hash: section_hash(&serde_json::json!({"pairs": e.pairs, "verify_mode": e.verify.mode}))?,
        })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let catalog = inputs.json(&crate::filter::CATALOG)?;
        let vectors = Vectors::read(inputs)?;
        let table = ToolTable::new(&catalog, &vectors)?;
        let p = &super::efs_settings(s).pairs;
        let (found, all_cos) = find_pairs(&table, &vectors, p);
        let mode = super::efs_settings(s).verify.mode;
        let scores: HashMap<(String, String), f32> =
            found.iter().map(|x| ((x.a.clone(), x.b.clone()), x.score)).collect();
        let (calls, dropped) = super::plan::trim(super::plan::plan(&found, mode, p.list_size), &scores, p.max_calls);
        let left_out = super::plan::left_out(&dropped, &scores);
        let dropped: std::collections::HashSet<&[String; 2]> = dropped.iter().flat_map(|c| &c.pairs).collect();
        let (left_pairs, pairs): (Vec<Pair>, Vec<Pair>) =
            found.into_iter().partition(|x| dropped.contains(&[x.a.clone(), x.b.clone()]));
        let mut by_cosine = BTreeMap::new();
        for pr in &pairs {
            let band = ((pr.cosine * 20.0).floor() / 20.0).max(-1.0);
            *by_cosine.entry(format!("{band:.2}")).or_default() += 1;
        }
        let mut in_pairs: Vec<&str> = pairs.iter().flat_map(|p| [p.a.as_str(), p.b.as_str()]).collect();
        in_pairs.sort_unstable();
        in_pairs.dedup();
        let summary = Summary {
            tools: table.ids.len(),
            pairs: pairs.len(),
            cross_server: pairs.iter().filter(|p| !p.same_server).count(),
            same_server: pairs.iter().filter(|p| p.same_server).count(),
            mutual: pairs.iter().filter(|p| p.rank_a.is_some() && p.rank_b.is_some()).count(),
            tools_in_pairs: in_pairs.len(),
            settings: p.clone(),
            by_cosine,
            verify_mode: mode,
            calls: calls.len(),
            left_out,
        };
        let sel: Vec<f32> = pairs.iter().map(|p| p.cosine).collect();
        out.file(PAIRS_CSV, write_csv(&pairs)?);
        out.file(LEFT_OUT_CSV, write_csv(&left_pairs)?);
        out.file(CALLS_JSONL, super::plan::write_jsonl(&calls)?);
        out.file(
            "similarity.svg",
            histogram_svg(
                &all_cos,
                &sel,
                &format!("Candidate pairs: {} of {} tools' top-{} neighbours", pairs.len(), table.ids.len(), p.top_k),
            )?
            .into_bytes(),
        );
        out.json("summary.json", &summary)?;
        out.count("tools", summary.tools);
        out.count("pairs", summary.pairs);
        out.count("cross_server", summary.cross_server);
        out.count("same_server", summary.same_server);
        out.count("calls", summary.calls);
        let per = match mode {
            super::plan::VerifyMode::Listwise => format!("listwise, up to {} candidates each", p.list_size),
            super::plan::VerifyMode::Pairwise => "pairwise, one per pair".to_string(),
        };
        out.notes
            .push(format!("plan: {} LLM calls ({per}) judge {} pairs (calls.jsonl)", summary.calls, summary.pairs));
        if summary.left_out.calls > 0 {
            out.count("left_out_calls", summary.left_out.calls);
            out.notes.push(format!(
                "`efs.pairs.max_calls` = {} left out {} calls with {} pairs (about {:.1} expected equivalences; left_out.csv)",
                p.max_calls, summary.left_out.calls, summary.left_out.pairs, summary.left_out.expected_equivalent
            ));
        }
        out.notes.push(format!(
            "{} candidate pairs ({} cross-server, {} same-server, {} mutual) over {} of {} tools",
            summary.pairs,
            summary.cross_server,
            summary.same_server,
            summary.mutual,
            summary.tools_in_pairs,
            summary.tools
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unit vectors in 2-D at the given angles (degrees): cosine = cos(angle difference).
    fn vecs(angles: &[f32]) -> Vec<f32> {
        angles.iter().flat_map(|a| [a.to_radians().cos(), a.to_radians().sin()]).collect()
    }

    fn plain(top_k: usize, min_score: f32) -> PairSettings {
        PairSettings {
            top_k,
            min_score,
            min_cosine: -1.0,
            name_weight: 0.0,
            param_weight: 0.0,
            action_penalty: 0.0,
            same_server_penalty: 0.0,
            threads: 2,
            ..PairSettings::default()
        }
    }

    fn run(angles: &[f32], p: &PairSettings) -> Vec<(usize, usize, Option<usize>, Option<usize>)> {
        let n = angles.len();
        let feats = vec![Features::default(); n];
        let servers: Vec<u32> = (0..n as u32).collect();
        let lists = neighbours(&vecs(angles), 2, &feats, &servers, p);
        select(&lists, p).into_iter().map(|(a, b, ra, rb, _)| (a, b, ra, rb)).collect()
    }

    #[test]
    fn asymmetric_top_k_qualifies_when_either_endpoint_selects() {
        // 0 and 1 are each other's nearest; 2 sits near 1 but 1 prefers 0.
        let p = plain(1, 0.0);
        let got = run(&[0.0, 10.0, 25.0], &p);
        assert_eq!(got, vec![(0, 1, Some(1), Some(1)), (1, 2, None, Some(1))]);
        let mutual = run(&[0.0, 10.0, 25.0], &PairSettings { mutual_only: true, ..p });
        assert_eq!(mutual, vec![(0, 1, Some(1), Some(1))]);
    }

    #[test]
    fn ties_break_by_catalog_order_and_results_are_stable() {
        // 1 and 2 are equally far from 0: the lower index wins the single slot.
        let p = plain(1, 0.0);
        let got = run(&[0.0, 20.0, -20.0], &p);
        assert_eq!(got[0], (0, 1, Some(1), Some(1)));
        assert!(got.iter().all(|(a, b, _, _)| a < b));
        // Any thread count gives the same answer.
        for t in [1, 3, 8] {
            assert_eq!(
                run(&[0.0, 20.0, -20.0, 5.0, 90.0], &PairSettings { threads: t, ..p.clone() }),
                run(&[0.0, 20.0, -20.0, 5.0, 90.0], &p)
            );
        }
    }

    #[test]
    fn tools_without_a_close_neighbour_are_left_out() {
        let p = plain(3, 0.9); // cos 25° ≈ 0.906
        let got = run(&[0.0, 20.0, 90.0, 180.0], &p);
        assert_eq!(got, vec![(0, 1, Some(1), Some(1))]);
    }

    #[test]
    fn lexical_signals_and_penalties_move_the_score() {
        let mut feats = vec![Features::default(); 3];
        feats[0].name = vec![1, 2];
        feats[1].name = vec![1, 2];
        feats[0].action = Some("read");
        feats[2].action = Some("delete");
        let p = PairSettings { min_cosine: -1.0, threads: 1, ..PairSettings::default() };
        // Server of 0 and 2 is the same.
        let lists = neighbours(&vecs(&[0.0, 40.0, 30.0]), 2, &feats, &[0, 1, 0], &p);
        let to1 = lists[0].iter().find(|n| n.j == 1).unwrap();
        let to2 = lists[0].iter().find(|n| n.j == 2).unwrap();
        assert!((to1.score - (40f32.to_radians().cos() + 0.25)).abs() < 1e-5);
        assert!((to2.score - (30f32.to_radians().cos() - 0.2)).abs() < 1e-5);
        assert_eq!(lists[0][0].j, 1, "name overlap outranks the closer sibling");
        let cross = PairSettings { cross_server_only: true, ..p };
        let lists = neighbours(&vecs(&[0.0, 40.0, 30.0]), 2, &feats, &[0, 1, 0], &cross);
        assert!(lists[0].iter().all(|n| n.j != 2));
    }

    #[test]
    fn csv_round_trip() {
        let p = Pair {
            a: "a::x".into(),
            b: "b::y".into(),
            cosine: 0.5,
            score: 0.75,
            name_overlap: 1.0,
            param_overlap: 0.0,
            action_a: Some("read".into()),
            action_b: None,
            same_server: false,
            rank_a: Some(1),
            rank_b: None,
        };
        let bytes = write_csv(std::slice::from_ref(&p)).unwrap();
        assert_eq!(read_csv(&bytes, "x").unwrap(), vec![p]);
        assert!(read_csv(&write_csv(&[]).unwrap(), "x").unwrap().is_empty());
    }
}
