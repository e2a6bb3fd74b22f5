//! The blocked pair search (`[efs.pairs] index = "blocked"`, what `auto` picks from 5,000
//! tools) against the plain loop (`index = "exact"`) on synthetic clustered vectors: the
//! issue asks for recall ≥ 0.99 of the loop's top-k lists; the blocked search is exact, so
//! it must find every list entry, bit for bit.
//!
//! Size: 5,000 vectors of 32 dimensions (5 groups of 1,024 rows, 15 tiles). The loop in the
//! unoptimised test build costs ~0.7 µs a pair, so 20,000 vectors (2·10⁸ pairs) took 150
//! CPU-s here; the benchmark (`benches/efs_pairs.rs`, `make bench`) makes the same
//! comparison at 20,000 vectors of 384 dimensions in the release build and prints the
//! recall.

use benchgen::efs::lexical::Features;
use benchgen::efs::pairs::{AUTO_BLOCKED_FROM, PairSettings, SearchIndex, neighbours, select};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const N: usize = AUTO_BLOCKED_FROM;
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
fn blocked_search_recalls_every_exact_neighbour() {
    let (data, feats, servers) = catalog(17);
    let p = PairSettings::default();
    assert_eq!(p.index.resolve(N), SearchIndex::Blocked, "the default search at this size");
    let exact = neighbours(&data, DIM, &feats, &servers, &PairSettings { index: SearchIndex::Exact, ..p.clone() });
    let blocked = neighbours(&data, DIM, &feats, &servers, &p);
    let want: usize = exact.iter().map(Vec::len).sum();
    assert!(want > 5 * N, "the lists are well filled: {want} entries");
    let found: usize =
        exact.iter().zip(&blocked).map(|(e, b)| e.iter().filter(|x| b.iter().any(|y| y.j == x.j)).count()).sum();
    let recall = found as f64 / want as f64;
    assert!(recall >= 0.99, "recall {recall}");
    assert_eq!(found, want, "exact: every neighbour found");
    assert!(exact == blocked, "same scores and order, bit for bit");
    assert_eq!(format!("{:?}", select(&blocked, &p)), format!("{:?}", select(&exact, &p)), "same pairs");
}
