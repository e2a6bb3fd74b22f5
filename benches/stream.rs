//! The runner's streaming path: a stage that copies a large input to its
//! output through `Inputs::open` and `Output::create`, with the atomic commit
//! and hashing. Prints wall time, throughput and peak memory (VmHWM).
//! Target: a 2 GB copy in under 300 MB of memory.
//!
//! `cargo bench --bench stream` (size in MB: `BENCHGEN_STREAM_MB`, default 2048).

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use benchgen::printer::Printer;
use benchgen::settings::Settings;
use benchgen::stage::{self, Ctx, Inputs, Output, Plan, Stage, StageSpec};

struct CopyStage {
    input: PathBuf,
}

static SPEC: StageSpec = StageSpec {
    name: "copy",
    command: "copy",
    version: 1,
    about: "bench",
    reads: &[],
    writes: &["copy.bin"],
    section: None,
};

impl Stage for CopyStage {
    fn spec(&self) -> &'static StageSpec {
        &SPEC
    }
    fn plan(&self, _: &Settings) -> Result<Plan> {
        Ok(Plan { inputs: vec![self.input.clone()], config_hash: "bench".into() })
    }
    fn run(&self, _ctx: &Ctx, inputs: &Inputs, out: &mut Output) -> Result<()> {
        let mut r = inputs.open(&self.input)?;
        let mut w = out.create("copy.bin")?;
        std::io::copy(&mut r, &mut w)?;
        w.finish()
    }
}

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

fn main() -> Result<()> {
    if !common::benching("stream") {
        return Ok(());
    }
    let mb: usize = std::env::var("BENCHGEN_STREAM_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(2048);
    let dir = tempfile::tempdir()?;
    let cfg = dir.path().join("pipeline/b.toml");
    std::fs::create_dir_all(cfg.parent().unwrap())?;
    std::fs::write(&cfg, "")?;
    let settings = Settings::load(&cfg)?;
    let input = dir.path().join("big.bin");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&input)?);
        let chunk: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i % 251) as u8).collect();
        for _ in 0..mb {
            f.write_all(&chunk)?;
        }
        f.flush()?;
    }
    let before = peak_rss_mb();
    let clock = Instant::now();
    let report = stage::execute(&settings, &Printer::default(), &CopyStage { input }, true, &BTreeMap::new())?;
    let secs = clock.elapsed().as_secs_f64();
    println!(
        "stream copy: {mb} MB in {secs:.1} s ({:.0} MB/s), peak RSS {:.0} MB (before the stage: {before:.0} MB), run {}",
        mb as f64 / secs,
        peak_rss_mb(),
        report.run_id.unwrap_or_default()
    );
    Ok(())
}
