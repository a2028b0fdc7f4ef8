//! Unified memory events joined to the kernel that ran on their device when they happened: a GPU page fault or
//! a migration to the device during a kernel is that kernel's doing (or its wait). [`RunningKernels`] finds it on
//! a loaded trace, [`UmJoin`] the same kernel while streaming.

mod stream_join;

pub use stream_join::UmJoin;

use rustc_hash::FxHashMap;

use crate::ids::ProcId;
use crate::rows::UmEvent;
use crate::trace::Trace;

/// One device's kernels as (start, end, index into `Trace::kernels`) by start, and the running maximum of ends.
type DeviceSpans = (Vec<(u64, u64, usize)>, Vec<u64>);

/// Finds the kernel running on a device at a time. Built once per trace; each lookup is a binary search and a
/// walk back over the kernels that overlap the time (the concurrent ones).
pub struct RunningKernels {
    by_device: FxHashMap<(ProcId, u32), DeviceSpans>,
}

impl RunningKernels {
    pub fn new(trace: &Trace) -> RunningKernels {
        let mut by_device: FxHashMap<(ProcId, u32), DeviceSpans> = FxHashMap::default();
        for (i, k) in trace.kernels.iter().enumerate() {
            by_device.entry((k.proc, k.device)).or_default().0.push((k.start, k.end, i));
        }
        for (spans, max_end) in by_device.values_mut() {
            spans.sort_unstable();
            let mut m = 0;
            *max_end = spans
                .iter()
                .map(|s| {
                    m = m.max(s.1);
                    m
                })
                .collect();
        }
        RunningKernels { by_device }
    }

    /// The kernel (index into `Trace::kernels`) running on `device` of file `proc` at `ts`: of those whose span
    /// holds `ts`, the one that started last.
    pub fn at(&self, proc: ProcId, device: u32, ts: u64) -> Option<usize> {
        let (spans, max_end) = self.by_device.get(&(proc, device))?;
        let mut i = spans.partition_point(|s| s.0 <= ts);
        while i > 0 {
            i -= 1;
            if max_end[i] < ts {
                return None;
            }
            if spans[i].1 >= ts {
                return Some(spans[i].2);
            }
        }
        None
    }

    /// The kernel running on a unified memory event's device when the event began; `None` for events of no one
    /// device (CPU faults, thrashing) or outside every kernel.
    pub fn of_um(&self, e: &UmEvent) -> Option<usize> {
        self.at(e.proc, e.device()?, e.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::Kernel;

    #[test]
    fn concurrent_kernels_latest_start_wins() {
        let k = |start, end, device| Kernel { start, end, device, ..Default::default() };
        let trace =
            Trace { kernels: vec![k(0, 100, 0), k(10, 20, 0), k(30, 40, 1), k(150, 160, 0)], ..Default::default() };
        let r = RunningKernels::new(&trace);
        let at = |ts| r.at(ProcId(0), 0, ts);
        assert_eq!(
            (at(5), at(15), at(25), at(120), at(155), at(200)),
            (Some(0), Some(1), Some(0), None, Some(3), None)
        );
        assert_eq!(r.at(ProcId(0), 1, 35), Some(2));
        assert_eq!(r.at(ProcId(0), 2, 35), None);
    }
}
