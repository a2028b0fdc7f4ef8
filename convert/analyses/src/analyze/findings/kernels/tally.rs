//! What the per-kernel rules keep of one kernel name's executions inside the windows, summed as they come in any
//! order: time and count, time per device, the first few executions (evidence), each launch configuration's time
//! with its first execution, and the recorded (mangled) names. A loaded trace folds its kernels into these in
//! parallel and a stream window by window ([`crate::analyze::stream::kernel_rules`]), so both rank the same
//! [`super::hot::HotKernel`]s. Every part is a sum or a least-by-time-order pick, so the order kernels come in
//! does not change the result; its size is bounded by the name's distinct devices, configurations and recorded
//! names, never by its executions.

use std::cmp::Reverse;

use cutr_model::{Kernel, NameId, ProcId};
use rustc_hash::FxHashMap;

use super::super::super::types::MAX_EVIDENCE;

/// A launch configuration: (process, device, grid, block, registers, static and dynamic shared memory).
type Config = (ProcId, u32, [i32; 3], [i32; 3], u16, i32, i32);

/// An execution's place in time order (start, then process and correlation): executions are ranked by it.
fn order(k: &Kernel) -> (u64, ProcId, u32) {
    (k.start, k.proc, k.correlation)
}

/// One kernel name's executions inside the windows, summed.
#[derive(Clone, Debug, Default)]
pub struct KernelTally {
    /// Time inside the windows (saturating; concurrent executions each counted).
    pub time_ns: u64,
    /// Executions that ran (at least in part) inside the windows.
    pub count: u64,
    /// Per device: its time inside the windows and its first execution's place in time order.
    devices: FxHashMap<u32, (u64, (u64, ProcId, u32))>,
    /// The first [`MAX_EVIDENCE`] executions in time order.
    first: Vec<Kernel>,
    /// Per launch configuration: its time inside the windows and its first execution.
    configs: FxHashMap<Config, (u64, Kernel)>,
    /// The recorded names of its executions, sorted.
    recorded: Vec<NameId>,
}

impl KernelTally {
    /// Adds an execution with `inside` ns inside the windows (callers add only those with some).
    pub fn add(&mut self, k: &Kernel, inside: u64) {
        self.time_ns = self.time_ns.saturating_add(inside);
        self.count += 1;
        let at = order(k);
        let device = self.devices.entry(k.device).or_insert((0, at));
        device.0 = device.0.saturating_add(inside);
        device.1 = device.1.min(at);
        self.keep_first(k);
        let key = (k.proc, k.device, k.grid, k.block, k.registers, k.static_smem, k.dynamic_smem);
        let config = self.configs.entry(key).or_insert((0, *k));
        config.0 = config.0.saturating_add(inside);
        if at < order(&config.1) {
            config.1 = *k;
        }
        if let Err(i) = self.recorded.binary_search(&k.name) {
            self.recorded.insert(i, k.name);
        }
    }

    /// `k` among the first executions, if it is one of the first [`MAX_EVIDENCE`] seen so far.
    fn keep_first(&mut self, k: &Kernel) {
        let at = order(k);
        if self.first.len() >= MAX_EVIDENCE && self.first.last().is_some_and(|last| order(last) <= at) {
            return;
        }
        let i = self.first.partition_point(|f| order(f) <= at);
        self.first.insert(i, *k);
        self.first.truncate(MAX_EVIDENCE);
    }

    /// Another tally of the same name added in (its executions are others).
    pub fn merge(&mut self, other: KernelTally) {
        self.time_ns = self.time_ns.saturating_add(other.time_ns);
        self.count += other.count;
        for (device, (ns, at)) in other.devices {
            let d = self.devices.entry(device).or_insert((0, at));
            d.0 = d.0.saturating_add(ns);
            d.1 = d.1.min(at);
        }
        for k in &other.first {
            self.keep_first(k);
        }
        for (key, (ns, k)) in other.configs {
            let config = self.configs.entry(key).or_insert((0, k));
            config.0 = config.0.saturating_add(ns);
            if order(&k) < order(&config.1) {
                config.1 = k;
            }
        }
        for name in other.recorded {
            if let Err(i) = self.recorded.binary_search(&name) {
                self.recorded.insert(i, name);
            }
        }
    }

    /// The devices, most time first (ties by id).
    pub fn devices(&self) -> Vec<u32> {
        let mut devices: Vec<(u32, u64)> = self.devices.iter().map(|(d, (ns, _))| (*d, *ns)).collect();
        devices.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        devices.into_iter().map(|d| d.0).collect()
    }

    /// The process of the first execution on `device`.
    pub fn first_proc_on(&self, device: u32) -> Option<ProcId> {
        self.devices.get(&device).map(|(_, at)| at.1)
    }

    /// The first executions, in time order (at most [`MAX_EVIDENCE`]).
    pub fn first(&self) -> &[Kernel] {
        &self.first
    }

    /// The first execution of the launch configuration with the most time inside the windows (ties: the one that
    /// ran first).
    pub fn main_launch(&self) -> Option<&Kernel> {
        self.configs.values().max_by_key(|(ns, k)| (*ns, Reverse(order(k)))).map(|(_, k)| k)
    }

    /// The recorded (mangled) names of its executions, sorted.
    pub fn recorded(&self) -> &[NameId] {
        &self.recorded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(start: u64, correlation: u32, grid: i32, device: u32) -> Kernel {
        Kernel { start, end: start + 10, correlation, grid: [grid, 1, 1], device, name: NameId(7), ..Kernel::default() }
    }

    #[test]
    fn a_tally_is_the_same_in_any_order_and_split() {
        let ks: Vec<Kernel> = (0..12u32).map(|i| kernel(1_000 - 50 * u64::from(i), i, (i % 3) as i32, i % 2)).collect();
        let inside = |k: &Kernel| u64::from(k.correlation) + 1;
        let mut forward = KernelTally::default();
        ks.iter().for_each(|k| forward.add(k, inside(k)));
        let (mut a, mut b) = (KernelTally::default(), KernelTally::default());
        ks.iter().rev().take(5).for_each(|k| a.add(k, inside(k)));
        ks.iter().rev().skip(5).for_each(|k| b.add(k, inside(k)));
        a.merge(b);
        for t in [&forward, &a] {
            // 1 + 2 + ... + 12.
            assert_eq!((t.time_ns, t.count), (78, 12));
            // The earliest five start at 450, 500, ..., 650 (correlations 11 down to 7).
            assert_eq!(t.first().iter().map(|k| k.correlation).collect::<Vec<_>>(), [11, 10, 9, 8, 7]);
            // Per (device, grid), correlation i taking i + 1 ns: device 1 with grid 2 (5 and 11) has 18 ns, the
            // most of the six; its first execution is 11 (start 450).
            let main = t.main_launch().unwrap();
            assert_eq!((main.grid[0], main.device, main.correlation), (2, 1, 11));
            // Device 1 (odd correlations): 2 + 4 + ... + 12 = 42; device 0: 36.
            assert_eq!(t.devices(), [1, 0]);
            assert_eq!(t.first_proc_on(0), Some(ProcId(0)));
            assert_eq!(t.recorded(), [NameId(7)]);
        }
    }
}
