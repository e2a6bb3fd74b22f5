//! Pair search cost on synthetic vectors (run by scripts/bench.d/20-efs.sh; nothing asserted).
//!
//! n unit vectors of dimension 384: a tenth are noisy copies of others (so some
//! pairs pass the cosine floor, as in a real catalog), the rest random. Reports
//! the wall time of the exact blocked search (`efs::pairs::neighbours` + `select`)
//! with the default settings, for n = 2,375 (the ETOM snapshot's size), 20,000
//! and 100,000 (or the sizes given as arguments).

use std::time::Instant;

use benchgen::efs::lexical::Features;
use benchgen::efs::pairs::{PairSettings, neighbours, select};

/// xorshift64*: a fixed, dependency-free generator (synthetic data only).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn gauss(&mut self) -> f32 {
        let (u, v) = (self.next().max(1e-12), self.next());
        ((-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()) as f32
    }
}

fn vectors(n: usize, dim: usize) -> Vec<f32> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut data = vec![0f32; n * dim];
    for i in 0..n {
        let copy_of = if i > 0 && i % 10 == 0 { Some((rng.next() * i as f64) as usize) } else { None };
        for d in 0..dim {
            data[i * dim + d] = match copy_of {
                Some(j) => data[j * dim + d] + 0.04 * rng.gauss(),
                None => rng.gauss(),
            };
        }
        let row = &mut data[i * dim..(i + 1) * dim];
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    data
}

fn main() {
    // `cargo test --all-targets` runs bench binaries too; only `cargo bench` passes `--bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("efs_pairs: run with `cargo bench --bench efs_pairs`");
        return;
    }
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![2_375, 20_000, 100_000] } else { sizes };
    let p = PairSettings::default();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("pair search on synthetic 384-d vectors ({threads} threads, top_k {}, default settings)", p.top_k);
    println!("{:>9} {:>12} {:>10} {:>14}", "vectors", "seconds", "pairs", "Mpairs/s");
    for n in sizes {
        let data = vectors(n, 384);
        let feats = vec![Features::default(); n];
        let servers: Vec<u32> = (0..n as u32).map(|i| i / 5).collect();
        let t = Instant::now();
        let lists = neighbours(&data, 384, &feats, &servers, &p);
        let pairs = select(&lists, &p);
        let s = t.elapsed().as_secs_f64();
        let mp = (n as f64 * (n as f64 - 1.0)) / s / 1e6;
        println!("{n:>9} {s:>12.2} {:>10} {mp:>14.0}", pairs.len());
    }
}
