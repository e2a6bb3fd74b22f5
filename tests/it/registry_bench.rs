//! Registry benchmark (ignored by default; `scripts/bench.d/15-scrape.sh` runs it):
//! scrape 10,000 servers from the loopback Glama fixture at a configured 20 requests/s
//! (achieved rate, CPU per page, peak memory of the scraper process), then merge three
//! 10,000-server snapshots (wall time of `benchgen registry merge`).

use crate::support as util;
use crate::support::registry_fixture;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use registry_fixture::{Faults, FixtureServer, Kind, Universe};

fn children_usage() -> (f64, i64) {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let cpu = u.ru_utime.tv_sec as f64
        + u.ru_utime.tv_usec as f64 / 1e6
        + u.ru_stime.tv_sec as f64
        + u.ru_stime.tv_usec as f64 / 1e6;
    (cpu, u.ru_maxrss)
}

fn source(name: &str, kind: &str, base: &str, rate: f64, burst: u32) -> String {
    format!(
        "[registry.sources.{name}]\nkind = \"{kind}\"\nbase_url = \"{base}\"\npage_size = 100\nrate_per_s = {rate}\nburst = {burst}\nmax_pages = 1000\n"
    )
}

#[test]
#[ignore = "benchmark: run by scripts/bench.d/15-scrape.sh"]
fn registry_scrape_and_merge_figures() {
    let n = 10_000;
    let u = Universe::generate(16, 3 * n);
    let glama: Vec<_> = u.glama().into_iter().take(n).collect();
    let official: Vec<_> = u.official().into_iter().take(n).collect();
    let (smithery, details) = u.smithery();
    let g = FixtureServer::start(Kind::Glama, glama, BTreeMap::new(), Faults::default());
    let o = FixtureServer::start(Kind::Official, official, BTreeMap::new(), Faults::default());
    let s = FixtureServer::start(Kind::Smithery, smithery.into_iter().take(n).collect(), details, Faults::default());

    let p = util::Project::empty();
    let cfg = format!(
        "{}{}{}",
        source("glama", "glama", &g.base_url(), 20.0, 1),
        source("official", "official", &o.base_url(), 2000.0, 50),
        source("smithery", "smithery", &s.base_url(), 2000.0, 50)
            .replace("max_pages = 1000\n", "max_pages = 1000\ndetails = false\n")
    );
    p.write("pipeline/demo.toml", cfg);

    // 1. Scrape at 20 requests/s.
    let (cpu0, _) = children_usage();
    let t0 = Instant::now();
    // Under GNU time when present, for the scraper's own peak RSS.
    let time = std::path::Path::new("/usr/bin/time");
    let out = if time.exists() {
        std::process::Command::new(time)
            .args(["-f", "maxrss_kib=%M"])
            .arg(assert_cmd::cargo::cargo_bin("benchgen"))
            .args(["registry", "scrape", "--source", "glama", "--snapshot", "b"])
            .current_dir(p.root())
            .env("BENCHGEN_NO_PROGRESS", "1")
            .output()
            .unwrap()
    } else {
        p.run(&["registry", "scrape", "--source", "glama", "--snapshot", "b"])
    };
    util::assert_code(&out, 0);
    let wall = t0.elapsed();
    let (cpu1, children_maxrss) = children_usage();
    let maxrss_kib = util::stderr(&out)
        .lines()
        .find_map(|l| l.strip_prefix("maxrss_kib=").and_then(|v| v.trim().parse::<i64>().ok()))
        .unwrap_or(children_maxrss);
    let (pages, span) = g.log(|l| {
        let first = l.seen.first().unwrap().2;
        let last = l.seen.last().unwrap().2;
        (l.seen.len(), last - first)
    });
    let rate = (pages - 1) as f64 / span.as_secs_f64();
    println!(
        "registry scrape: {n} servers, {pages} pages at a configured 20 req/s: achieved {rate:.2} req/s ({:+.1} %), \
         wall {:.1} s, CPU {:.2} ms/page, peak RSS {:.1} MiB",
        (rate / 20.0 - 1.0) * 100.0,
        wall.as_secs_f64(),
        (cpu1 - cpu0) * 1000.0 / pages as f64,
        maxrss_kib as f64 / 1024.0
    );

    // 1b. The limiter alone: cheap pages (10 servers each), 100 pages at 20 req/s.
    let small = FixtureServer::start(
        Kind::Glama,
        u.glama().into_iter().take(1000).collect(),
        BTreeMap::new(),
        Faults::default(),
    );
    let cfg = p.read("pipeline/demo.toml")
        + &source("small", "glama", &small.base_url(), 20.0, 1).replace("page_size = 100", "page_size = 10");
    p.write("pipeline/demo.toml", cfg);
    util::assert_code(&p.run(&["registry", "scrape", "--source", "small", "--snapshot", "b"]), 0);
    let (n_small, span_small) = small.log(|l| (l.seen.len(), l.seen.last().unwrap().2 - l.seen.first().unwrap().2));
    let rate_small = (n_small - 1) as f64 / span_small.as_secs_f64();
    println!(
        "registry scrape (limiter): {n_small} pages of 10 servers at a configured 20 req/s: achieved {rate_small:.2} req/s ({:+.1} %)",
        (rate_small / 20.0 - 1.0) * 100.0
    );

    // 2. Merge three 10,000-server snapshots.
    for src in ["official", "smithery"] {
        util::assert_code(&p.run(&["registry", "scrape", "--source", src, "--snapshot", "b"]), 0);
    }
    let t0 = Instant::now();
    let (mcpu0, _) = children_usage();
    let out =
        p.run(&["registry", "merge", "raw/registry/glama/b", "raw/registry/official/b", "raw/registry/smithery/b"]);
    util::assert_code(&out, 0);
    let merge = t0.elapsed();
    let (mcpu1, _) = children_usage();
    println!(
        "registry merge: 3 x {n} servers in {:.2} s wall, {:.2} s CPU: {}",
        merge.as_secs_f64(),
        mcpu1 - mcpu0,
        util::stdout(&out).trim()
    );
    assert!(merge < Duration::from_secs(600));
}
