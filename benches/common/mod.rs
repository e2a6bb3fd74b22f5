//! What the benchmark binaries share: the `cargo bench` guard and CPU and load readings.
#![allow(dead_code)]

/// Whether `cargo bench` started this binary (it passes `--bench`). `cargo test
/// --all-targets` runs bench binaries too; then this prints how to run `name` and is false.
pub fn benching(name: &str) -> bool {
    let yes = std::env::args().any(|a| a == "--bench");
    if !yes {
        println!("{name}: run with `cargo bench --bench {name}`");
    }
    yes
}

fn rusage_seconds(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the zeroed struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// User + system CPU seconds of this process, all threads.
pub fn cpu_seconds() -> f64 {
    rusage_seconds(libc::RUSAGE_SELF)
}

/// User + system CPU seconds of the waited-for child processes.
pub fn children_cpu_seconds() -> f64 {
    rusage_seconds(libc::RUSAGE_CHILDREN)
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` gives them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The peak resident set of this process (`VmHWM`), in MiB; NaN where /proc has none.
pub fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}
