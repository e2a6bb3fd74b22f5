//! The sample pool: where review and release find benchmark samples.
//!
//! Every stage that makes samples writes them as unified JSON Lines
//! ([`crate::model::Sample`], one per line, sorted by id) and is listed here, so consumers
//! declare one set of reads instead of naming each producer. A producer that is disabled in
//! the config simply has no artifact; its read is optional.

use std::path::Path;

use crate::model::Sample;
use crate::stage::{Artifact, Read};

/// Samples that passed automatic validation (real log samples, synthesised chains and
/// role-play dialogues), written by `benchgen validate`.
pub const VALIDATED: Artifact<Sample> = Artifact::new("validate", "samples.jsonl");

/// ETOM level queries L1–L5 in the unified shape, written by `benchgen levels export`.
pub const LEVELS: Artifact<Sample> = Artifact::new("levels-export", "samples.jsonl");

/// The pool's files, in pipeline order: every place that reads the pool reads these.
pub const POOL: [&Artifact<Sample>; 2] = [&VALIDATED, &LEVELS];

/// The pool's reads, in pipeline order (each optional: a track may be off).
pub const fn reads() -> [Read; 2] {
    [POOL[0].optional(), POOL[1].optional()]
}

/// Upper bounds of samples and their turns, before anything runs (for estimates).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolBound {
    pub samples: u64,
    pub turns: u64,
}

impl PoolBound {
    pub fn add(&mut self, other: PoolBound) {
        self.samples += other.samples;
        self.turns += other.turns;
    }
}

/// The samples and turns of a unified JSON Lines file; `None` when it cannot be read.
pub fn file_bound(path: &Path) -> Option<PoolBound> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut b = PoolBound::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let sample: Sample = serde_json::from_str(line).ok()?;
        b.add(PoolBound { samples: 1, turns: sample.turns.len().max(1) as u64 });
    }
    Some(b)
}
