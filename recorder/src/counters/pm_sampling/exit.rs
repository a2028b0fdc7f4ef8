//! When PM sampling is stopped as the process exits.
//!
//! Sampling must be stopped and disabled before `exit()` runs the exit handlers that CUDA's and CUPTI's libraries
//! registered after the recorder was loaded (libnvperf_host's among them: cuptiProfilerInitialize loads it, and
//! set-up's calls go on in it). After them, cuptiPmSamplingDisable crashed inside libnvperf_host on the H100
//! (SIGSEGV, or glibc's "double free or corruption") or hung: the session's own hook, registered when CUDA loaded
//! the recorder, runs after them (`exit()` runs hooks last-registered first), and used to be what stopped sampling
//! when the process exited while set-up was still under way (runs of under a second; 5 of 10 crashed,
//! measurements/2026-11-27-h100-counters-exit-crash). So the set-up thread registers hooks as it goes
//! (`ExitHooks`), each running before every handler registered before it:
//! - before its first CUPTI call: a hook that ends the gate (`PmSampler::exit_began`): no CUPTI call of
//!   sampling's from then on (one under way is waited for), what was set up left alone;
//! - once cuptiProfilerInitialize returned, and again once the first device samples: a hook that stops sampling
//!   (`PmSampler::finish`; a device being set up is finished first, ~0.8 s at most; no further one is begun).
//!
//! A process that exits while a device is set up thus has its samples and sampling stopped first; one that exits
//! before cuptiProfilerInitialize returned makes no further CUPTI call of sampling's. What CUPTI registers during
//! set-up after cuptiProfilerInitialize still runs before the first stop hook (none was seen to matter: 0 crashes
//! in 10 such exits).

/// What the set-up thread asks the session for as it goes (above): each registers an `exit()` hook.
pub(crate) struct ExitHooks {
    /// A hook that calls `PmSampler::exit_began`; asked for once, before set-up's first CUPTI call.
    pub exit_began: Box<dyn Fn() + Send>,
    /// A hook that stops sampling (`PmSampler::finish`); asked for once cuptiProfilerInitialize returned and
    /// again once the first device samples (each later one runs earlier, ahead of what CUPTI registered meanwhile).
    pub stop: Box<dyn Fn() + Send>,
}
