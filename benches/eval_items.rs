//! The item analysis of `benchgen eval` (`benchgen::eval::items::analyse`) on a generated
//! panel: N samples × A agents × 1 repeat, each agent of a seeded ability and each item of a
//! seeded difficulty (a Rasch-shaped matrix), with the point-biserial and the Rasch
//! estimates. `cargo bench --bench eval_items -- [N] [A]` (default 100,000 × 10; target
//! under 5 s).

mod common;

use std::time::Instant;

use benchgen::eval::ToolSpace;
use benchgen::eval::items::{ItemInput, Matrix, Options, Outcome, analyse};
use benchgen::model::{Difficulty, Kind};
use rand::{Rng, SeedableRng};

fn matrix(n: usize, agents: usize) -> Matrix {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(20261202);
    let ability: Vec<f64> = (0..agents).map(|a| -1.5 + 3.0 * a as f64 / agents.max(2) as f64).collect();
    let items = (0..n)
        .map(|i| {
            let b: f64 = rng.random_range(-2.5..2.5);
            let runs = ability
                .iter()
                .map(|t| {
                    let p = 1.0 / (1.0 + (b - t).exp());
                    let solved = rng.random_bool(p);
                    let tools = if solved { vec!["S::a".to_string()] } else { vec!["S::b".to_string()] };
                    let offered_by_turn = vec![tools.clone()];
                    vec![Some(Outcome { solved, f1: if solved { 1.0 } else { 0.0 }, offered_by_turn, tools })]
                })
                .collect();
            ItemInput {
                id: format!("L1-{i}"),
                kind: Kind::L1,
                difficulty: Difficulty::Easy,
                reference: ["S::a".to_string()].into_iter().collect(),
                turn_steps: vec![vec![["S::a".to_string()].into_iter().collect()]],
                efs_siblings: Default::default(),
                lookups: Default::default(),
                invented: None,
                unrelated: Default::default(),
                asked_actions: vec![false],
                runs,
            }
        })
        .collect();
    let agents = (0..agents).map(|a| format!("agent{a}")).collect();
    Matrix { tool_space: ToolSpace::Oracle, agents, repeats: 1, items }
}

fn main() {
    if !common::benching("eval_items") {
        return;
    }
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n = args.first().copied().unwrap_or(100_000);
    let agents = args.get(1).copied().unwrap_or(10);
    let m = matrix(n, agents);
    let (cpu0, t0) = (common::cpu_seconds(), Instant::now());
    let a = analyse(&m, &Options::default());
    let wall = t0.elapsed().as_secs_f64();
    let cpu = common::cpu_seconds() - cpu0;
    let rasch = a.items.iter().filter(|i| i.rasch.is_some()).count();
    println!(
        "eval_items: {n} samples × {agents} agents analysed in {wall:.3} s wall, {cpu:.3} s CPU; {rasch} Rasch estimates; flags {:?}; load {}",
        a.flag_counts,
        common::loadavg()
    );
}
