//! Phase timing for `CUTR_TIMING=1`: wall time since the process started and the resident-memory high-water
//! mark at each phase boundary, on stderr. Used to see where a conversion spends time and memory; the benchmark
//! figures themselves come from `bench/`.

use std::sync::OnceLock;
use std::time::Instant;

fn start() -> &'static Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now)
}

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("CUTR_TIMING").is_some())
}

/// Peak resident set size so far, in MB (Linux: VmHWM), 0 where unknown.
fn peak_rss_mb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

/// Starts the clock (call first thing in `main`).
pub fn init() {
    start();
}

/// Reports that `name` finished.
pub fn mark(name: &str) {
    if enabled() {
        eprintln!(
            "timing: {name:<14} at {:>8.1} ms, peak RSS {} MB",
            start().elapsed().as_secs_f64() * 1e3,
            peak_rss_mb()
        );
    }
}

/// Reports a detail of the phase that just finished (shown only with `CUTR_TIMING=1`).
pub fn note(what: impl FnOnce() -> String) {
    if enabled() {
        eprintln!("timing:   {}", what());
    }
}
