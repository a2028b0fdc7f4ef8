//! Phase timing for `CUTR_TIMING=1`: wall time since `main` started and the resident-memory high-water mark at
//! each phase boundary ([`mark`]), on stderr. `CUTR_TIMING=spans` adds every timed step ([`timed`]: thread,
//! start, end, label), printed when the command ends, to see which thread waits for which on a many-core machine.
//! Used to see where a conversion spends time and memory; the benchmark figures themselves come from `bench/`.
//! Shared by every crate that reads the model, so one run's spans come out together.

use std::sync::{Mutex, OnceLock};
use std::time::Instant;

fn start() -> &'static Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now)
}

/// 0 off, 1 phase marks, 2 marks and spans.
fn level() -> u8 {
    static LEVEL: OnceLock<u8> = OnceLock::new();
    *LEVEL.get_or_init(|| match std::env::var("CUTR_TIMING") {
        Ok(v) if v == "spans" => 2,
        Ok(_) => 1,
        Err(_) => 0,
    })
}

fn enabled() -> bool {
    level() > 0
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

/// A finished span: thread, start and end (µs since `main`), label.
type SpanRecord = (u64, u64, u64, String);

fn spans() -> &'static Mutex<Vec<SpanRecord>> {
    static SPANS: OnceLock<Mutex<Vec<SpanRecord>>> = OnceLock::new();
    SPANS.get_or_init(|| Mutex::new(Vec::new()))
}

/// A step being timed; recorded when dropped.
struct Span(Option<(Instant, String)>);

impl Drop for Span {
    fn drop(&mut self) {
        if let Some((t0, label)) = self.0.take() {
            let us = |t: Instant| t.duration_since(*start()).as_micros() as u64;
            let thread = rayon::current_thread_index().map_or(u64::MAX, |i| i as u64);
            if let Ok(mut v) = spans().lock() {
                v.push((thread, us(t0), us(Instant::now()), label));
            }
        }
    }
}

/// Runs the step `f`, timed as `label` (only with `CUTR_TIMING=spans`; otherwise nothing is measured).
#[inline]
pub fn timed<R>(label: &str, f: impl FnOnce() -> R) -> R {
    timed_with(|| label.to_string(), f)
}

/// [`timed`] with a label made only when spans are on (it names a chunk or shard, say).
#[inline]
pub fn timed_with<R>(label: impl FnOnce() -> String, f: impl FnOnce() -> R) -> R {
    let _span = Span((level() == 2).then(|| (Instant::now(), label())));
    f()
}

/// Prints the spans, ordered by start (call at the end of the command).
pub fn print_spans() {
    if level() != 2 {
        return;
    }
    let Ok(mut v) = spans().lock() else { return };
    v.sort_by_key(|s| (s.1, s.0));
    for (thread, a, b, label) in v.iter() {
        let t = if *thread == u64::MAX { "main".to_string() } else { format!("w{thread}") };
        eprintln!(
            "span: {t:>4} {:>9.3} {:>9.3} {:>8.3} {label}",
            *a as f64 / 1e3,
            *b as f64 / 1e3,
            (b - a) as f64 / 1e3
        );
    }
}
