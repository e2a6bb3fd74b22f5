//! The blocked neighbour search of `efs pairs` (`[efs.pairs] index = "blocked"`, and
//! `"auto"` from [`super::pairs::AUTO_BLOCKED_FROM`] tools): the same neighbour lists as
//! the plain loop ([`super::pairs::exact_neighbours`]), bit for bit, at registry scale.
//!
//! The similarity matrix is computed in square tiles of `TILE` rows by a matrix multiply
//! (`matrixmultiply::sgemm`, runtime-detected AVX2/FMA kernels), only tiles on or above the
//! diagonal (cosine is symmetric), spread over threads. A tile's product is only a filter:
//! it differs from the loop's dot product by rounding, at most `2·γ_d·‖a‖‖b‖` with
//! `γ_d = d·u/(1−d·u)` (`u = 2⁻²⁴`, the usual bound for any summation order), so a pair is
//! looked at only if its product could still put it on one of its two tools' lists, and
//! then gets the loop's own dot product, lexical signals and score
//! ([`super::pairs::scored`]). A pair can make row `i`'s list when
//!
//! - its cosine can reach `min_cosine`, and
//! - its score can reach the `top_k`-th best score `i` has so far (`rank_by = "score"`;
//!   that score only grows), or `min_score` (`rank_by = "rrf"`, which ranks every
//!   neighbour that qualifies), counting the largest lexical bonus
//!   (`name_weight + param_weight`).
//!
//! Everything else provably cannot, so each row's candidates are a superset of its list;
//! [`super::pairs::keep_best`] then orders them as the loop does (ties: lower index), and
//! the result does not depend on which thread saw a pair first. Non-finite or huge vectors
//! and non-finite weights fall back to the loop (the bound would not hold).
//!
//! Cost: `n²·d` multiply-adds for the half matrix, at 150–250 GFLOP/s per core here
//! (AVX-512 machine, AVX2 kernels), then the loop's work only for pairs near the lists
//! (docs/benchmarks.md has the figures).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use super::lexical::Features;
use super::pairs::{Neighbour, PairSettings, RankBy, dot, exact_neighbours, keep_best, scored, thread_count};

/// Rows (and columns) of one tile: 1024² products (4 MB) per matrix multiply.
pub const TILE: usize = 1024;

/// [`super::pairs::neighbours`] by the blocked search.
pub fn neighbours(
    data: &[f32],
    dim: usize,
    feats: &[Features],
    servers: &[u32],
    p: &PairSettings,
) -> Vec<Vec<Neighbour>> {
    neighbours_in_tiles(data, dim, feats, servers, p, TILE)
}

/// Rows of one group while tiles arrive: candidates that can still make each list, and
/// (score mode) the `top_k`-th best score at the list's last trim (−∞ before).
struct Rows {
    lists: Vec<Vec<Neighbour>>,
    kth: Vec<f32>,
}

/// The shared search state: rows in groups of one tile, each behind its own lock, and
/// each row's current lower bound on a tile product worth a look (f32 bits; it only
/// rises, so a stale read is merely less selective).
struct State<'a> {
    groups: Vec<Mutex<Rows>>,
    floor: Vec<AtomicU32>,
    tile: usize,
    p: &'a PairSettings,
    /// Largest possible lexical bonus of a score over its cosine.
    bonus: f32,
    /// Rounding slack: tile product vs the loop's dot product, plus the score sum.
    slack: f32,
}

impl State<'_> {
    fn floor(&self, i: usize) -> f32 {
        f32::from_bits(self.floor[i].load(Ordering::Relaxed))
    }

    /// Add candidates `(row, neighbour)` of rows in group `g`. In score mode a list is
    /// trimmed to its best `top_k` (the loop's order) when it reaches twice that, which
    /// raises the row's k-th score and floor; a candidate below the k-th score cannot
    /// make the list and is dropped.
    fn merge(&self, g: usize, found: &[(usize, Neighbour)]) {
        if found.is_empty() {
            return;
        }
        let p = self.p;
        let mut rows = self.groups[g].lock().expect("pair search lock poisoned");
        let Rows { lists, kth } = &mut *rows;
        let base = g * self.tile;
        for &(i, nb) in found {
            let r = i - base;
            match p.rank_by {
                RankBy::Score => {
                    if nb.score < kth[r] {
                        continue;
                    }
                    let list = &mut lists[r];
                    list.push(nb);
                    if list.len() >= 2 * p.top_k {
                        list.sort_by(|x, y| y.score.total_cmp(&x.score).then(x.j.cmp(&y.j)));
                        list.truncate(p.top_k);
                        kth[r] = list[p.top_k - 1].score;
                        let f = (kth[r] - self.bonus - self.slack).max(p.min_cosine - self.slack);
                        self.floor[i].store(f.to_bits(), Ordering::Relaxed);
                    }
                }
                RankBy::Rrf => {
                    if nb.score >= p.min_score {
                        lists[r].push(nb);
                    }
                }
            }
        }
    }
}

/// The blocked search with tiles of `tile` rows (tests use small tiles to get many).
pub fn neighbours_in_tiles(
    data: &[f32],
    dim: usize,
    feats: &[Features],
    servers: &[u32],
    p: &PairSettings,
    tile: usize,
) -> Vec<Vec<Neighbour>> {
    let n = servers.len();
    let weights = [p.min_cosine, p.min_score, p.name_weight, p.param_weight, p.action_penalty, p.same_server_penalty];
    if dim == 0 || !data.iter().all(|x| x.is_finite()) || !weights.iter().all(|x| x.is_finite()) {
        return exact_neighbours(data, dim, feats, servers, p);
    }
    if n == 0 || p.top_k == 0 {
        return vec![Vec::new(); n];
    }
    let tile = tile.max(1);
    let max_norm = (0..n)
        .map(|i| data[i * dim..(i + 1) * dim].iter().map(|x| (*x as f64) * (*x as f64)).sum::<f64>().sqrt())
        .fold(0f64, f64::max);
    let u = f64::from(f32::EPSILON) / 2.0;
    let du = dim as f64 * u;
    // Beyond these a product could overflow, or the bound grow useless: the loop is exact.
    if du >= 0.5 || max_norm >= 1e15 {
        return exact_neighbours(data, dim, feats, servers, p);
    }
    // Two products, each within γ_d·‖a‖‖b‖ of the true one (norms rounded up a little).
    let gap = 2.0 * du / (1.0 - du) * (max_norm * 1.001).powi(2) + 1e-6;
    let bonus = p.name_weight.max(0.0)
        + p.param_weight.max(0.0)
        + (-p.action_penalty).max(0.0)
        + (-p.same_server_penalty).max(0.0);
    // The score sums four terms of magnitude ≤ |cosine| + bonus: a few ulps at most.
    let slack = (gap as f32) + 1e-5 * (1.0 + bonus + max_norm as f32 * max_norm as f32);
    let start = match p.rank_by {
        RankBy::Score => p.min_cosine - slack,
        RankBy::Rrf => (p.min_cosine).max(p.min_score - bonus) - slack,
    };
    let groups = n.div_ceil(tile);
    let state = State {
        groups: (0..groups)
            .map(|g| {
                let rows = tile.min(n - g * tile);
                Mutex::new(Rows { lists: vec![Vec::new(); rows], kth: vec![f32::NEG_INFINITY; rows] })
            })
            .collect(),
        floor: (0..n).map(|_| AtomicU32::new(start.to_bits())).collect(),
        tile,
        p,
        bonus,
        slack,
    };
    let tiles: Vec<(usize, usize)> = (0..groups).flat_map(|a| (a..groups).map(move |b| (a, b))).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..thread_count(p) {
            s.spawn(|| {
                let mut product = Vec::new();
                let (mut rows_found, mut cols_found) = (Vec::new(), Vec::new());
                loop {
                    let t = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(a, b)) = tiles.get(t) else { break };
                    one_tile(&state, data, dim, feats, servers, a, b, &mut product, &mut rows_found, &mut cols_found);
                    state.merge(a, &rows_found);
                    state.merge(b, &cols_found);
                }
            });
        }
    });
    let mut out = Vec::with_capacity(n);
    for g in state.groups {
        let rows = g.into_inner().expect("pair search lock poisoned");
        for mut list in rows.lists {
            let i = out.len();
            keep_best(i, &mut list, feats, p);
            out.push(list);
        }
    }
    out
}

/// Multiply tile `(a, b)` (rows of group a against rows of group b, `a ≤ b`) and collect
/// the pairs worth a look: for rows of a into `rows_found`, for rows of b into `cols_found`.
#[allow(clippy::too_many_arguments)]
fn one_tile(
    state: &State,
    data: &[f32],
    dim: usize,
    feats: &[Features],
    servers: &[u32],
    a: usize,
    b: usize,
    product: &mut Vec<f32>,
    rows_found: &mut Vec<(usize, Neighbour)>,
    cols_found: &mut Vec<(usize, Neighbour)>,
) {
    let p = state.p;
    let n = servers.len();
    let (r0, c0) = (a * state.tile, b * state.tile);
    let (rn, cn) = (state.tile.min(n - r0), state.tile.min(n - c0));
    product.clear();
    product.resize(rn * cn, 0.0);
    // product (rn × cn, row-major) = rows r0.. · (rows c0..)ᵀ
    // SAFETY: the pointers cover rn·dim and cn·dim floats of `data` and rn·cn of `product`,
    // with the strides given; nothing else writes `product` meanwhile.
    unsafe {
        matrixmultiply::sgemm(
            rn,
            dim,
            cn,
            1.0,
            data[r0 * dim..].as_ptr(),
            dim as isize,
            1,
            data[c0 * dim..].as_ptr(),
            1,
            dim as isize,
            0.0,
            product.as_mut_ptr(),
            cn as isize,
            1,
        );
    }
    rows_found.clear();
    cols_found.clear();
    let col_floor: Vec<f32> = (0..cn).map(|c| state.floor(c0 + c)).collect();
    let least_col = col_floor.iter().copied().fold(f32::INFINITY, f32::min);
    for r in 0..rn {
        let i = r0 + r;
        let row_floor = state.floor(i);
        let least = row_floor.min(least_col);
        // On the diagonal tile, each pair once (j > i).
        let first = if a == b { r + 1 } else { 0 };
        let line = &product[r * cn..(r + 1) * cn];
        let mut c = first;
        while c < cn {
            // Skip 16 products at a time while none reaches the floor (vectorised compare).
            let end = (c + 16).min(cn);
            let mut any = false;
            for &g in &line[c..end] {
                any |= g >= least;
            }
            if !any {
                c = end;
                continue;
            }
            for (k, &g) in line[c..end].iter().enumerate() {
                let (for_row, for_col) = (g >= row_floor, g >= col_floor[c + k]);
                if !(for_row || for_col) {
                    continue;
                }
                let j = c0 + c + k;
                if p.cross_server_only && servers[i] == servers[j] {
                    continue;
                }
                let cosine = dot(&data[i * dim..(i + 1) * dim], &data[j * dim..(j + 1) * dim]);
                if cosine < p.min_cosine {
                    continue;
                }
                // Every signal is symmetric, so j's view of i is the same neighbour mirrored.
                let nb = scored(i, j, cosine, feats, servers, p);
                if for_row {
                    rows_found.push((i, nb));
                }
                if for_col {
                    cols_found.push((j, Neighbour { j: i, ..nb }));
                }
            }
            c = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::efs::pairs::{SearchIndex, select};

    /// Clustered unit vectors (so many pairs pass the floors and lists are contested),
    /// every 7th row an exact copy of an earlier one (tied cosines), with lexical features
    /// from a small vocabulary (so bonuses reorder neighbours) and 5 tools per server.
    fn synthetic(n: usize, dim: usize, seed: u64) -> (Vec<f32>, Vec<Features>, Vec<u32>) {
        fn gauss(rng: &mut ChaCha8Rng) -> f32 {
            let (u, v): (f32, f32) = (rng.random::<f32>().max(1e-7), rng.random());
            (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
        }
        fn tokens(rng: &mut ChaCha8Rng, vocab: u32) -> Vec<u32> {
            let mut t: Vec<u32> = (0..rng.random_range(0..4)).map(|_| rng.random_range(0..vocab)).collect();
            t.sort_unstable();
            t.dedup();
            t
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let centres: Vec<Vec<f32>> =
            (0..(n / 12).max(1)).map(|_| (0..dim).map(|_| gauss(&mut rng)).collect()).collect();
        let mut data = Vec::with_capacity(n * dim);
        for i in 0..n {
            if i % 7 == 6 {
                let j = rng.random_range(0..i);
                let copy = data[j * dim..(j + 1) * dim].to_vec();
                data.extend(copy);
                continue;
            }
            let c = &centres[rng.random_range(0..centres.len())];
            let spread = 0.3 + rng.random::<f32>();
            let mut v: Vec<f32> = c.iter().map(|x| x + spread * gauss(&mut rng)).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            data.extend(v);
        }
        let actions = [None, Some("read"), Some("create"), Some("delete")];
        let feats = (0..n)
            .map(|_| Features {
                name: tokens(&mut rng, 12),
                params: tokens(&mut rng, 8),
                desc: tokens(&mut rng, 20),
                action: actions[rng.random_range(0..actions.len())],
            })
            .collect();
        let servers = (0..n as u32).map(|i| i / 5).collect();
        (data, feats, servers)
    }

    fn both(data: &[f32], dim: usize, feats: &[Features], servers: &[u32], p: &PairSettings, tile: usize) {
        let exact = exact_neighbours(data, dim, feats, servers, p);
        let blocked = neighbours_in_tiles(data, dim, feats, servers, p, tile);
        assert_eq!(blocked, exact, "tile {tile}, {p:?}");
        assert!(exact.iter().any(|l| l.len() == p.top_k.min(servers.len() - 1)), "lists are full somewhere");
    }

    #[test]
    fn blocked_search_finds_the_loops_lists_bit_for_bit() {
        let dim = 24;
        let (data, feats, servers) = synthetic(300, dim, 7);
        let base = PairSettings { threads: 2, ..PairSettings::default() };
        let settings = [
            base.clone(),
            PairSettings { min_cosine: -1.0, top_k: 4, ..base.clone() },
            PairSettings { rank_by: RankBy::Rrf, min_score: 0.3, ..base.clone() },
            PairSettings { cross_server_only: true, mutual_only: true, ..base.clone() },
            PairSettings {
                name_weight: 1.0,
                param_weight: 1.0,
                action_penalty: 0.0,
                same_server_penalty: 0.0,
                ..base.clone()
            },
            PairSettings { threads: 3, min_cosine: 0.2, ..base.clone() },
        ];
        for p in &settings {
            for tile in [1, 7, 64, 1024] {
                both(&data, dim, &feats, &servers, p, tile);
            }
        }
    }

    #[test]
    fn vectors_that_are_not_unit_length_still_match() {
        let dim = 16;
        let (mut data, feats, servers) = synthetic(120, dim, 11);
        for (i, x) in data.iter_mut().enumerate() {
            *x *= 1.0 + ((i / dim) % 5) as f32 * 0.3;
        }
        both(&data, dim, &feats, &servers, &PairSettings { min_cosine: 0.3, ..PairSettings::default() }, 16);
    }

    #[test]
    fn non_finite_input_and_empty_catalogs_fall_back_or_return_nothing() {
        let dim = 8;
        let (mut data, feats, servers) = synthetic(40, dim, 3);
        data[5] = f32::NAN;
        let p = PairSettings::default();
        let exact = format!("{:?}", exact_neighbours(&data, dim, &feats, &servers, &p));
        assert_eq!(format!("{:?}", neighbours_in_tiles(&data, dim, &feats, &servers, &p, 8)), exact);
        assert!(neighbours(&[], dim, &[], &[], &p).is_empty());
        let none = PairSettings { top_k: 0, ..p };
        assert!(neighbours_in_tiles(&data[..0], dim, &[], &[], &none, 8).is_empty());
    }

    #[test]
    fn auto_switches_to_blocked_at_the_threshold_and_selection_is_unchanged() {
        use crate::efs::pairs::AUTO_BLOCKED_FROM;
        assert_eq!(SearchIndex::Auto.resolve(AUTO_BLOCKED_FROM - 1), SearchIndex::Exact);
        assert_eq!(SearchIndex::Auto.resolve(AUTO_BLOCKED_FROM), SearchIndex::Blocked);
        assert_eq!(SearchIndex::Exact.resolve(1 << 20), SearchIndex::Exact);
        assert_eq!(SearchIndex::Blocked.resolve(2), SearchIndex::Blocked);
        let dim = 16;
        let (data, feats, servers) = synthetic(200, dim, 5);
        let p = |index| PairSettings { index, ..PairSettings::default() };
        let run = |index| {
            let q = p(index);
            select(&crate::efs::pairs::neighbours(&data, dim, &feats, &servers, &q), &q)
        };
        let exact = run(SearchIndex::Exact);
        assert!(exact.len() > 50, "{} pairs", exact.len());
        assert_eq!(format!("{:?}", run(SearchIndex::Blocked)), format!("{exact:?}"));
        assert_eq!(format!("{:?}", run(SearchIndex::Auto)), format!("{exact:?}"));
    }
}
