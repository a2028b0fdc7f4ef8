//! `CUTR_PM_DEBUG=1`: each step of PM sampling's set-up, each decode and evaluation, and a context's end timed on
//! stderr (how set-up races an application that ends its context early is only visible on a GPU).

use std::time::{Duration, Instant};

/// When `CUTR_PM_DEBUG=1`, the instant the first debug line was asked for; `None` when debugging is off.
pub(super) fn debug_start() -> Option<Instant> {
    static ON: std::sync::OnceLock<Option<Instant>> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CUTR_PM_DEBUG").is_ok_and(|v| v == "1").then(Instant::now))
}

/// CPU time of the calling thread (whether a slow CUPTI call computes or waits), zero when debugging is off.
pub(super) fn thread_cpu_time() -> Duration {
    if debug_start().is_none() {
        return Duration::ZERO;
    }
    crate::ffi::os::thread_cpu_time()
}

/// One `CUTR_PM_DEBUG` line; the message is formatted only when debugging is on (decodes run 100 times a second).
macro_rules! debug {
    ($($arg:tt)*) => {
        if let Some(t0) = $crate::counters::pm_sampling::debug::debug_start() {
            eprintln!(
                "cutr-pm-debug {:>9.3} ms [{}] {}",
                t0.elapsed().as_secs_f64() * 1e3,
                std::thread::current().name().unwrap_or("?"),
                format_args!($($arg)*)
            );
        }
    };
}
