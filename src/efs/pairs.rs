//! `benchgen efs pairs`: candidate pairs of possibly equivalent tools.
//!
//! Each candidate costs one LLM verdict later, so the search favours few
//! candidates with high recall. For every tool, every other tool with cosine ≥
//! `min_cosine` gets a combined score
//!
//! `score = cosine + name_weight·J(name tokens) + param_weight·J(parameter tokens)
//!          − action_penalty·[actions differ] − same_server_penalty·[same server]`
//!
//! (J = Jaccard overlap; see [`super::lexical`]). The tool keeps its `top_k`
//! highest-scoring neighbours with score ≥ `min_score` (ties: catalog order). A
//! pair qualifies if either endpoint keeps the other (or both, with
//! `mutual_only`). The search is exact: all pairs, blocked by rows and spread
//! over threads; dot products run in a fixed order, so results do not depend on
//! the thread count.
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
use crate::embed::Vectors;
use crate::model::Catalog;
use crate::settings::{Settings, section_hash};
use crate::stage::{Artifact, Ctx, Inputs, Output, Plan, Stage, StageSpec};

pub const PAIRS_CSV: &str = "pairs.csv";

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
    /// Worker threads (0: one per core). A tuning knob, not hashed.
    #[serde(default, skip_serializing)]
    pub threads: usize,
}

fn d_top_k() -> usize {
    10
}
fn d_min_score() -> f32 {
    0.75
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

/// Dot product with 8 independent accumulators (auto-vectorised, fixed order).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
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
/// `servers[i]` is tool i's server index.
pub fn neighbours(
    data: &[f32],
    dim: usize,
    feats: &[Features],
    servers: &[u32],
    p: &PairSettings,
) -> Vec<Vec<Neighbour>> {
    let n = servers.len();
    let threads = if p.threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { p.threads };
    let next = AtomicUsize::new(0);
    let blocks = n.div_ceil(BLOCK);
    let mut results: Vec<(usize, Vec<Vec<Neighbour>>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
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

fn block_neighbours(
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
            let same = servers[i] == servers[j];
            if same && p.cross_server_only {
                continue;
            }
            let cosine = dot(&data[i * dim..(i + 1) * dim], col);
            if cosine < p.min_cosine {
                continue;
            }
            let (fi, fj) = (&feats[i], &feats[j]);
            let name = jaccard(&fi.name, &fj.name);
            let param = jaccard(&fi.params, &fj.params);
            let conflict = matches!((fi.action, fj.action), (Some(x), Some(y)) if x != y);
            let score = cosine + p.name_weight * name + p.param_weight * param
                - if conflict { p.action_penalty } else { 0.0 }
                - if same { p.same_server_penalty } else { 0.0 };
            cands[i - lo].push(Neighbour { j, cosine, score, name, param });
        }
    }
    for c in &mut cands {
        c.sort_by(|x, y| y.score.total_cmp(&x.score).then(x.j.cmp(&y.j)));
        c.truncate(p.top_k);
    }
    cands
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
            by_id.insert(t.id.as_str(), (si, s.name.clone(), interner.features(t)));
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
}

pub struct PairsStage;

/// Candidate pairs with every signal (CSV; read with [`read_pairs`]).
pub const PAIRS: Artifact = Artifact::new("efs-pairs", PAIRS_CSV);

pub static SPEC: StageSpec = StageSpec {
    name: "efs-pairs",
    command: "efs pairs",
    version: 1,
    about: "candidate pairs of possibly equivalent tools (embeddings + lexical signals, no LLM)",
    reads: &[crate::filter::CATALOG.read(), crate::embed::INDEX.read(), crate::embed::VECTORS.read()],
    writes: &[PAIRS_CSV, "similarity.svg", "summary.json"],
};

/// The candidate pairs, from a consumer's declared inputs.
pub fn read_pairs(inputs: &Inputs) -> Result<Vec<Pair>> {
    read_csv(inputs.bytes_of(&PAIRS)?, &format!("artifacts/{}/{}", PAIRS.stage, PAIRS.file))
}

impl Stage for PairsStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }

    fn enabled(&self, settings: &Settings) -> bool {
        settings.config.embed.is_some() || settings.config.efs.is_some()
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
    }

    fn plan(&self, settings: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![], config_hash: section_hash(&super::efs_settings(settings).pairs)? })
    }

    fn run(&self, ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let s = ctx.settings;
        let catalog = inputs.json(&crate::filter::CATALOG)?;
        let vectors = Vectors::read(inputs)?;
        let table = ToolTable::new(&catalog, &vectors)?;
        let p = &super::efs_settings(s).pairs;
        let (pairs, all_cos) = find_pairs(&table, &vectors, p);
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
        };
        let sel: Vec<f32> = pairs.iter().map(|p| p.cosine).collect();
        out.file(PAIRS_CSV, write_csv(&pairs)?);
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
