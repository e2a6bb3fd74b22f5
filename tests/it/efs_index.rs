//! The blocked pair search (`[efs.pairs] index = "blocked"`, also spelled `"ann"`; what
//! `auto` picks from 5,000 tools) against the plain loop (`index = "exact"`) on synthetic
//! clustered vectors: the issue asks for recall ≥ 0.99 of the loop's top-k lists at 20,000
//! vectors; the blocked search is exact, so it must find every list entry, bit for bit.
//!
//! Size: 20,000 vectors of 32 dimensions. The blocked search runs over all of them; the
//! loop, at ~0.7 µs a pair in the unoptimised test build (2·10⁸ pairs: 150 CPU-s), runs as
//! the reference for 20 blocks of 32 rows spread over the catalog (640 query rows against
//! all 20,000, as ANN benchmarks measure recall on a query sample). The benchmark
//! (`benches/efs_pairs.rs`, `make bench`) compares every row at 20,000 vectors of 384
//! dimensions in the release build.

use benchgen::efs::lexical::Features;
use benchgen::efs::pairs::{PairSettings, SearchIndex, block_neighbours, neighbours, select};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const N: usize = 20_000;
const DIM: usize = 32;

fn gauss(rng: &mut ChaCha8Rng) -> f32 {
    let (u, v): (f32, f32) = (rng.random::<f32>().max(1e-7), rng.random());
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// Topics of ~100 tools, functions of ~5 within a topic, every 50th tool a copy of an
/// earlier one (tied cosines), name and parameter tokens shared within a function.
fn catalog(seed: u64) -> (Vec<f32>, Vec<Features>, Vec<u32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let topics: Vec<Vec<f32>> = (0..N / 100).map(|_| unit((0..DIM).map(|_| gauss(&mut rng)).collect())).collect();
    let functions: Vec<Vec<f32>> = (0..N / 5)
        .map(|_| {
            let t = &topics[rng.random_range(0..topics.len())];
            unit(t.iter().map(|x| x + 0.6 * gauss(&mut rng) / (DIM as f32).sqrt()).collect())
        })
        .collect();
    let mut data: Vec<f32> = Vec::with_capacity(N * DIM);
    let mut feats = Vec::with_capacity(N);
    for i in 0..N {
        let f = rng.random_range(0..functions.len());
        if i % 50 == 49 {
            let j = rng.random_range(0..i);
            let copy = data[j * DIM..(j + 1) * DIM].to_vec();
            data.extend(copy);
        } else {
            data.extend(unit(functions[f].iter().map(|x| x + 0.5 * gauss(&mut rng) / (DIM as f32).sqrt()).collect()));
        }
        let mut tokens = |vocab: u32| {
            let mut t: Vec<u32> = (0..rng.random_range(1..3)).map(|_| 1_000_000 + rng.random_range(0..vocab)).collect();
            if rng.random::<bool>() {
                t.push(f as u32);
            }
            t.sort_unstable();
            t.dedup();
            t
        };
        let (name, params, desc) = (tokens(5_000), tokens(2_000), tokens(20_000));
        feats.push(Features { name, params, desc, action: [None, Some("read"), Some("create")][i % 3] });
    }
    (data, feats, (0..N as u32).map(|i| i / 5).collect())
}

#[test]
fn blocked_search_recalls_every_exact_neighbour_at_20000() {
    let (data, feats, servers) = catalog(17);
    let p = PairSettings::default();
    assert_eq!(p.index.resolve(N), SearchIndex::Blocked, "the default search at this size");
    let blocked = neighbours(&data, DIM, &feats, &servers, &p);
    assert_eq!(blocked.len(), N);
    let exact_p = PairSettings { index: SearchIndex::Exact, ..p.clone() };
    let (mut want, mut found, mut rows) = (0usize, 0usize, 0usize);
    for k in 0..20 {
        let lo = k * (N / 20) + k * 7 % 32;
        let exact = block_neighbours(lo, lo + 32, &data, DIM, &feats, &servers, &exact_p);
        for (e, b) in exact.iter().zip(&blocked[lo..lo + 32]) {
            want += e.len();
            found += e.iter().filter(|x| b.iter().any(|y| y.j == x.j)).count();
            assert!(e == b, "same scores and order, bit for bit");
            rows += 1;
        }
    }
    assert_eq!(rows, 640);
    assert!(want > 5 * rows, "the lists are well filled: {want} entries");
    let recall = found as f64 / want as f64;
    assert!(recall >= 0.99, "recall {recall}");
    assert_eq!(found, want, "exact: every neighbour found");
}

#[test]
fn ann_is_another_name_for_the_blocked_search() {
    let p: PairSettings = toml::from_str("index = \"ann\"").expect("index = \"ann\" parses");
    assert_eq!(p.index, SearchIndex::Blocked);
    assert!(toml::from_str::<PairSettings>("index = \"hnsw\"").is_err(), "unknown index names are refused");
}

#[test]
fn the_blocked_search_selects_the_loops_pairs_on_a_whole_catalog() {
    // Every row of a smaller catalog: the pairs `select` keeps are the loop's.
    let (data, feats, servers) = catalog(5);
    let n = 3_000;
    let (data, feats, servers) = (&data[..n * DIM], &feats[..n], &servers[..n]);
    let p = PairSettings { index: SearchIndex::Blocked, ..PairSettings::default() };
    let exact = neighbours(data, DIM, feats, servers, &PairSettings { index: SearchIndex::Exact, ..p.clone() });
    let blocked = neighbours(data, DIM, feats, servers, &p);
    assert!(exact == blocked, "same lists, bit for bit");
    assert_eq!(format!("{:?}", select(&blocked, &p)), format!("{:?}", select(&exact, &p)), "same pairs");
}
