//! Pair search cost on synthetic vectors (run by scripts/bench.d/21-efs-search.sh; nothing
//! asserted).
//!
//! n unit vectors of dimension 384, clustered like tool embeddings: topics of ~100 tools,
//! "functions" of ~5 tools within a topic (cosine ≈ 0.8 to each other, ≈ 0.5 to the rest
//! of the topic, ≈ 0 elsewhere; about 90 neighbours per tool above the default
//! `min_cosine`), with name and parameter tokens shared within a function and 5 tools per
//! server, all from a fixed seed. For each size it runs the blocked search
//! (`index = "blocked"`) with the default settings and, up to `EFS_BENCH_EXACT_MAX` tools
//! (default 20,000), the plain loop (`index = "exact"`), and prints CPU and wall seconds,
//! the selected pairs and the recall of the loop's top-k lists by the blocked search.
//! Sizes: 2,375 (the ETOM snapshot), 20,000 and 100,000, or those given as arguments.

mod common;

use std::time::Instant;

use benchgen::efs::lexical::Features;
use benchgen::efs::pairs::{Neighbour, PairSettings, SearchIndex, neighbours, select};

/// xorshift64*: a fixed, dependency-free generator (synthetic data only).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: usize) -> usize {
        ((self.next() * n as f64) as usize).min(n - 1)
    }
    fn gauss(&mut self) -> f32 {
        let (u, v) = (self.next().max(1e-12), self.next());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }
    fn unit(&mut self, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| self.gauss()).collect();
        normalise(&mut v);
        v
    }
}

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= norm);
}

/// `(vectors, features, servers)` for n tools.
fn catalog(n: usize, dim: usize) -> (Vec<f32>, Vec<Features>, Vec<u32>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let topics: Vec<Vec<f32>> = (0..(n / 100).max(1)).map(|_| rng.unit(dim)).collect();
    let functions: Vec<Vec<f32>> = (0..(n / 5).max(1))
        .map(|_| {
            let t = topics[rng.below(topics.len())].clone();
            let g = rng.unit(dim);
            let mut f: Vec<f32> = t.iter().zip(&g).map(|(a, b)| a + 0.8 * b).collect();
            normalise(&mut f);
            f
        })
        .collect();
    let actions = [None, Some("read"), Some("create"), Some("update"), Some("delete")];
    let mut data = Vec::with_capacity(n * dim);
    let mut feats = Vec::with_capacity(n);
    for _ in 0..n {
        let f = rng.below(functions.len());
        let g = rng.unit(dim);
        let mut v: Vec<f32> = functions[f].iter().zip(&g).map(|(a, b)| a + 0.5 * b).collect();
        normalise(&mut v);
        data.extend(v);
        // Name: the function's word half the time, plus one or two words of 5,000; parameters
        // likewise from 2,000.
        let mut tokens = |own: u32, vocab: usize| -> Vec<u32> {
            let mut t: Vec<u32> = (0..1 + rng.below(2)).map(|_| 1_000_000 + rng.below(vocab) as u32).collect();
            if rng.next() < 0.5 {
                t.push(own);
            }
            t.sort_unstable();
            t.dedup();
            t
        };
        let name = tokens(f as u32, 5_000);
        let params = tokens(f as u32, 2_000);
        let desc = tokens(f as u32, 20_000);
        feats.push(Features { name, params, desc, action: actions[rng.below(actions.len())] });
    }
    let servers = (0..n as u32).map(|i| i / 5).collect();
    (data, feats, servers)
}

fn run(data: &[f32], feats: &[Features], servers: &[u32], p: &PairSettings) -> (Vec<Vec<Neighbour>>, usize, f64, f64) {
    let (c, t) = (common::cpu_seconds(), Instant::now());
    let lists = neighbours(data, 384, feats, servers, p);
    let pairs = select(&lists, p).len();
    (lists, pairs, common::cpu_seconds() - c, t.elapsed().as_secs_f64())
}

fn main() {
    if !common::benching("efs_pairs") {
        return;
    }
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![2_375, 20_000, 100_000] } else { sizes };
    let exact_max: usize = std::env::var("EFS_BENCH_EXACT_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let p = PairSettings::default();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "pair search on synthetic clustered 384-d vectors ({threads} threads, top_k {}, default settings; \
         CPU = user+sys seconds of all threads)",
        p.top_k
    );
    println!(
        "{:>9} {:>8} {:>9} {:>9} {:>10} {:>22}",
        "vectors", "search", "CPU s", "wall s", "pairs", "recall of exact top-k"
    );
    for n in sizes {
        let (data, feats, servers) = catalog(n, 384);
        let blocked = run(&data, &feats, &servers, &PairSettings { index: SearchIndex::Blocked, ..p.clone() });
        let mut recall = "(exact not run)".to_string();
        if n <= exact_max {
            let exact = run(&data, &feats, &servers, &PairSettings { index: SearchIndex::Exact, ..p.clone() });
            println!("{n:>9} {:>8} {:>9.2} {:>9.2} {:>10} {:>22}", "exact", exact.2, exact.3, exact.1, "");
            let want: usize = exact.0.iter().map(Vec::len).sum();
            let found: usize = exact
                .0
                .iter()
                .zip(&blocked.0)
                .map(|(e, b)| e.iter().filter(|x| b.iter().any(|y| y.j == x.j)).count())
                .sum();
            let same = if exact.0 == blocked.0 { ", identical" } else { ", DIFFERENT" };
            recall = format!("{:.4}{same}", found as f64 / want.max(1) as f64);
        }
        println!("{n:>9} {:>8} {:>9.2} {:>9.2} {:>10} {recall:>22}", "blocked", blocked.2, blocked.3, blocked.1);
    }
}
