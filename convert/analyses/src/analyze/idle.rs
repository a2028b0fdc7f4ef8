//! Idle time by cause: each idle gap of a GPU (from the end of the union of its ops to the next op's start) gets
//! one cause, in this order: the host waited on the GPU (a synchronizing call open through the whole gap), the
//! host had not launched the next op yet when the GPU ran out of work (launch-bound: its launching call returned
//! after the gap began; split by whether the launching thread was inside CUDA API calls), a gap shorter than the
//! threshold (back-to-back ops), other. Definitions in docs/ANALYZE.md.

use cutr_model::{ProcId, Trace};
use rustc_hash::FxHashMap;
use serde::Serialize;

/// HTA's `consecutive_kernel_delay` default: 30, in the microseconds of Kineto's JSON (its docstring says
/// nanoseconds, but HTA's `ts` and `dur` are the JSON's microseconds), so gaps under 30 us are "kernel wait".
pub const DEFAULT_SHORT_GAP_NS: u64 = 30_000;

/// Why a gap was idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    LaunchBound,
    HostSyncWait,
    ShortGap,
    Other,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::LaunchBound => "launch_bound",
            Cause::HostSyncWait => "host_sync_wait",
            Cause::ShortGap => "short_gap",
            Cause::Other => "other",
        }
    }
}

/// A GPU's (or a step's) idle time by cause: `launch_bound_ns + host_sync_wait_ns + short_gaps_ns + other_ns`
/// is the budget's `idle_ns`, and `launch_bound_in_api_ns + launch_bound_elsewhere_ns` is `launch_bound_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IdleCauses {
    pub launch_bound_ns: u64,
    pub launch_bound_in_api_ns: u64,
    pub launch_bound_elsewhere_ns: u64,
    pub host_sync_wait_ns: u64,
    pub short_gaps_ns: u64,
    pub other_ns: u64,
    pub short_gap_threshold_ns: u64,
}

impl IdleCauses {
    /// All idle time.
    pub fn total_ns(&self) -> u64 {
        self.launch_bound_ns + self.host_sync_wait_ns + self.short_gaps_ns + self.other_ns
    }
}

/// One idle gap with its cause. `launcher` is the (file, thread) that launched the op after it, for the
/// launch-bound split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassifiedGap {
    pub start: u64,
    pub end: u64,
    pub cause: Cause,
    pub launcher: Option<(ProcId, u32)>,
}

/// What the host was doing, as the gap classifier asks it: each thread's time inside CUDA API calls and each
/// process's time inside synchronizing calls, as sorted disjoint intervals.
#[derive(Debug, Default)]
pub struct HostIndex {
    /// Per thread, sorted and merged.
    pub(crate) in_api: FxHashMap<(ProcId, u32), Vec<(u64, u64)>>,
    /// Per process, sorted and merged.
    pub(crate) in_sync: FxHashMap<ProcId, Vec<(u64, u64)>>,
}

/// Whether a CUDA API function waits for the device: the explicit synchronizations, and the copies and memsets
/// that return only when done (any `cudaMemcpy*`/`cuMemcpy*`/`cudaMemset*`/`cuMemset*` without `Async`).
pub fn is_synchronizing(name: &str) -> bool {
    if name.contains("Synchronize") {
        return true;
    }
    let blocking_op = ["cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset"].iter().any(|p| name.starts_with(p));
    blocking_op && !name.contains("Async")
}

impl HostIndex {
    /// The index over `trace`'s API calls (and its SYNCHRONIZATION records, the host side of a wait).
    pub fn new(trace: &Trace) -> HostIndex {
        let mut sync_fn: FxHashMap<(ProcId, bool, u32), bool> = FxHashMap::default();
        let mut in_api: FxHashMap<(ProcId, u32), Vec<(u64, u64)>> = FxHashMap::default();
        let mut in_sync: FxHashMap<ProcId, Vec<(u64, u64)>> = FxHashMap::default();
        for a in trace.apis.iter().filter(|a| a.end > a.start) {
            in_api.entry((a.proc, a.tid)).or_default().push((a.start, a.end));
            let key = (a.proc, a.driver, a.cbid);
            let sync = *sync_fn.entry(key).or_insert_with(|| is_synchronizing(&trace.api_name(a)));
            if sync {
                in_sync.entry(a.proc).or_default().push((a.start, a.end));
            }
        }
        for s in trace.syncs.iter().filter(|s| s.end > s.start) {
            in_sync.entry(s.proc).or_default().push((s.start, s.end));
        }
        in_api.values_mut().for_each(merge);
        in_sync.values_mut().for_each(merge);
        HostIndex { in_api, in_sync }
    }

    /// Whether some synchronizing call of `proc` was open over all of `[start, end)`.
    fn sync_through(&self, proc: ProcId, start: u64, end: u64) -> bool {
        let Some(iv) = self.in_sync.get(&proc) else { return false };
        let i = iv.partition_point(|x| x.1 < end);
        iv.get(i).is_some_and(|x| x.0 <= start && x.1 >= end)
    }

    /// The time of `[start, end)` that thread `(proc, tid)` spent inside CUDA API calls.
    pub fn api_time(&self, thread: (ProcId, u32), start: u64, end: u64) -> u64 {
        let Some(iv) = self.in_api.get(&thread) else { return 0 };
        let first = iv.partition_point(|x| x.1 <= start);
        iv[first..].iter().take_while(|x| x.0 < end).map(|x| x.1.min(end).saturating_sub(x.0.max(start))).sum()
    }
}

/// Sorts intervals and merges those that overlap or touch.
pub fn merge(iv: &mut Vec<(u64, u64)>) {
    iv.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(iv.len());
    for &(s, e) in iv.iter() {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    *iv = out;
}

/// The op that ends a gap, as the classifier needs it: its file, and its launching call's end and thread.
#[derive(Clone, Copy, Debug)]
pub struct NextOp {
    pub proc: ProcId,
    /// When the launching call returned (the op was queued by then), and its thread.
    pub launch: Option<(u64, u32)>,
}

/// The cause of the gap `[start, end)` before `next`.
pub fn classify(host: &HostIndex, start: u64, end: u64, next: NextOp, threshold: u64) -> ClassifiedGap {
    let (cause, launcher) = if host.sync_through(next.proc, start, end) {
        (Cause::HostSyncWait, None)
    } else if let Some((_, tid)) = next.launch.filter(|&(launch_end, _)| launch_end > start) {
        (Cause::LaunchBound, Some((next.proc, tid)))
    } else if end - start < threshold {
        (Cause::ShortGap, None)
    } else {
        (Cause::Other, None)
    };
    ClassifiedGap { start, end, cause, launcher }
}

/// The idle causes over `[start, end)` of a GPU with gaps `gaps` (sorted, disjoint) and busy segments
/// covering `span`: idle time in the window outside `span` (before the GPU's first op or after its last) is
/// "other".
pub fn causes_over(
    host: &HostIndex,
    gaps: &[ClassifiedGap],
    span: (u64, u64),
    window: (u64, u64),
    threshold: u64,
) -> IdleCauses {
    let (ws, we) = (window.0, window.1.max(window.0));
    let mut c = IdleCauses { short_gap_threshold_ns: threshold, ..IdleCauses::default() };
    let first = gaps.partition_point(|g| g.end <= ws);
    for g in gaps[first..].iter().take_while(|g| g.start < we) {
        add_gap_part(&mut c, host, g, g.start.max(ws), g.end.min(we));
    }
    let (ss, se) = if span.1 > span.0 { span } else { (we, we) };
    c.other_ns += ss.clamp(ws, we) - ws + (we - se.clamp(ws, we));
    c
}

/// Adds the part `[start, end)` of gap `g` to `c` by its cause (a launch-bound part split by its launching
/// thread's time in API calls).
pub fn add_gap_part(c: &mut IdleCauses, host: &HostIndex, g: &ClassifiedGap, start: u64, end: u64) {
    let ns = end.saturating_sub(start);
    match g.cause {
        Cause::LaunchBound => {
            let in_api = g.launcher.map_or(0, |t| host.api_time(t, start, end));
            c.launch_bound_ns += ns;
            c.launch_bound_in_api_ns += in_api;
            c.launch_bound_elsewhere_ns += ns - in_api;
        }
        Cause::HostSyncWait => c.host_sync_wait_ns += ns,
        Cause::ShortGap => c.short_gaps_ns += ns,
        Cause::Other => c.other_ns += ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostIndex {
        let p = ProcId(0);
        let mut h = HostIndex::default();
        // Thread 7 in API calls 100-120 and 150-160; the process in a cudaDeviceSynchronize 400-520.
        h.in_api.insert((p, 7), vec![(100, 120), (150, 160)]);
        h.in_sync.insert(p, vec![(400, 520)]);
        h
    }

    /// One gap of each cause, known by construction.
    #[test]
    fn each_gap_gets_its_cause() {
        let h = host();
        let p = ProcId(0);
        let launched_late = NextOp { proc: p, launch: Some((110, 7)) };
        let launched_early = NextOp { proc: p, launch: Some((10, 7)) };
        let gaps = [
            classify(&h, 90, 200, launched_late, 30_000),
            classify(&h, 300, 310, launched_early, 30_000),
            classify(&h, 410, 500, launched_early, 30_000),
            classify(&h, 600, 100_600, launched_early, 30_000),
            classify(&h, 200_000, 200_050, NextOp { proc: p, launch: None }, 30_000),
        ];
        let causes: Vec<Cause> = gaps.iter().map(|g| g.cause).collect();
        assert_eq!(causes, [Cause::LaunchBound, Cause::ShortGap, Cause::HostSyncWait, Cause::Other, Cause::ShortGap]);
        let c = causes_over(&h, &gaps, (0, 300_000), (0, 300_000), 30_000);
        assert_eq!((c.launch_bound_ns, c.launch_bound_in_api_ns, c.launch_bound_elsewhere_ns), (110, 30, 80));
        assert_eq!((c.short_gaps_ns, c.host_sync_wait_ns, c.other_ns), (60, 90, 100_000));
        // A window from 150 to 420 clips the gaps: 150-200 launch-bound (10 in API), 300-310 short, 410-420 waited.
        let w = causes_over(&h, &gaps, (0, 300_000), (150, 420), 30_000);
        assert_eq!((w.launch_bound_ns, w.launch_bound_in_api_ns, w.short_gaps_ns), (50, 10, 10));
        assert_eq!((w.host_sync_wait_ns, w.other_ns), (10, 0));
        // A window reaching past the span: the time after the last op is "other".
        let w = causes_over(&h, &gaps, (0, 300_000), (200_000, 400_000), 30_000);
        assert_eq!((w.short_gaps_ns, w.other_ns, w.total_ns()), (50, 100_000, 100_050));
    }

    #[test]
    fn synchronizing_calls_by_name() {
        for n in ["cudaDeviceSynchronize", "cudaStreamSynchronize", "cuCtxSynchronize", "cudaMemcpy", "cudaMemset"] {
            assert!(is_synchronizing(n), "{n}");
        }
        for n in ["cudaMemcpyAsync", "cudaLaunchKernel", "cuMemsetD32Async", "cudaStreamQuery"] {
            assert!(!is_synchronizing(n), "{n}");
        }
    }
}
