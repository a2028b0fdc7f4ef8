//! The hot kernels every per-kernel rule judges: the kernel names with the most GPU time inside the steps (or,
//! without steps, inside each process's GPU span), the fewest that cover [`HOT_COVER_PCT`] of the kernel time,
//! at most [`MAX_HOT`]. A name's share is its time inside the windows over the windows' time.

use std::collections::HashMap;

use cutr_model::{Kernel, NameId, ProcId, Trace};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::super::super::types::{Context, EventRef, MAX_EVIDENCE, Severity};
use crate::analyze::intervals::ProcWindows;
#[cfg(test)]
use crate::analyze::intervals::merged;

/// The hot kernels cover this share of the kernel time in the windows...
pub const HOT_COVER_PCT: f64 = 80.0;
/// ...and are at most this many names.
pub const MAX_HOT: usize = 10;
/// A finding whose kernel takes this share of the window time or more is of high severity...
pub const HIGH_SHARE_PCT: f64 = 25.0;
/// ...this share or more, medium; below, low.
pub const MEDIUM_SHARE_PCT: f64 = 10.0;

/// The time the rules judge against: per process, its steps merged (or its GPU span), in time order.
pub struct Windows {
    windows: ProcWindows,
    /// The windows' whole time, over every process.
    pub total_ns: u64,
    /// `steps` or `span`, for summaries.
    pub what: &'static str,
}

impl Windows {
    /// The steps of `cx` where it has any; else each process's GPU span (first GPU op's start to last's end).
    pub fn of(cx: &Context<'_>) -> Windows {
        let t = cx.trace;
        let (windows, what) = if cx.steps.is_empty() {
            let ops = t.kernels.iter().map(|k| (k.proc, k.start, k.end));
            let ops = ops.chain(t.memcpys.iter().map(|m| (m.proc, m.start, m.end)));
            let ops = ops.chain(t.memsets.iter().map(|m| (m.proc, m.start, m.end)));
            let mut span: HashMap<ProcId, (u64, u64)> = HashMap::new();
            for (proc, start, end) in ops {
                let s = span.entry(proc).or_insert((start, end));
                *s = (s.0.min(start), s.1.max(end));
            }
            (ProcWindows::new(t.processes.len(), span.into_iter().map(|(p, s)| (p, s.0, s.1))), "span")
        } else {
            (ProcWindows::new(t.processes.len(), cx.steps.iter().map(|s| (s.proc, s.start, s.end))), "steps")
        };
        Windows { total_ns: windows.total_ns, windows, what }
    }

    /// The part of `[start, end)` of process `proc` inside the windows.
    pub fn inside(&self, proc: ProcId, start: u64, end: u64) -> u64 {
        self.windows.inside(proc, start, end)
    }

    /// `ns` as a percentage of the windows' time (0 without windows).
    pub fn share_pct(&self, ns: u64) -> f64 {
        self.windows.share_pct(ns)
    }
}

/// One hot kernel name and what the rules read of it.
pub struct HotKernel<'t> {
    /// The demangled name, as `stats` shows it.
    pub name: String,
    /// Its executions' time inside the windows (summed; concurrent executions each counted).
    pub time_ns: u64,
    pub share_pct: f64,
    /// Executions that ran (at least in part) inside the windows.
    pub count: u64,
    /// The devices it ran on, most time first (its counters are read on the first that has them).
    pub devices: Vec<u32>,
    /// Its executions inside the windows, in time order.
    pub executions: Vec<&'t Kernel>,
}

impl HotKernel<'_> {
    /// The first few executions, as evidence.
    pub fn evidence(&self, t: &Trace) -> Vec<EventRef> {
        self.executions
            .iter()
            .take(MAX_EVIDENCE)
            .map(|k| EventRef {
                proc: k.proc,
                start: k.start,
                end: k.end,
                correlation: k.correlation,
                what: t.kernel_name(k).to_string(),
            })
            .collect()
    }

    /// The severity of a finding about this kernel, by its share of the window time.
    pub fn severity(&self) -> Severity {
        severity_of(self.share_pct)
    }

    /// The execution whose launch configuration (grid, block, registers, shared memory, device) has the most time
    /// inside the windows: the one the occupancy rule judges.
    pub fn main_launch(&self, w: &Windows) -> Option<&Kernel> {
        type Config = (ProcId, u32, [i32; 3], [i32; 3], u16, i32, i32);
        let mut by_config: HashMap<Config, (u64, &Kernel)> = HashMap::new();
        for k in &self.executions {
            let key = (k.proc, k.device, k.grid, k.block, k.registers, k.static_smem, k.dynamic_smem);
            by_config.entry(key).or_insert((0, k)).0 += w.inside(k.proc, k.start, k.end);
        }
        let best = by_config.into_values().max_by(|a, b| a.0.cmp(&b.0).then(b.1.start.cmp(&a.1.start)))?;
        Some(best.1)
    }
}

/// Severity by share of the window time ([`HIGH_SHARE_PCT`], [`MEDIUM_SHARE_PCT`]).
pub fn severity_of(share_pct: f64) -> Severity {
    Severity::by_share(share_pct, HIGH_SHARE_PCT, MEDIUM_SHARE_PCT)
}

/// A kernel name's time inside the windows, and that time per device.
type NameTime = (u64, FxHashMap<u32, u64>);
/// Every kernel name's [`NameTime`].
type NameTimes = FxHashMap<NameId, NameTime>;

/// Every kernel name's time inside the windows: one parallel pass over the kernels.
fn name_times(t: &Trace, w: &Windows) -> NameTimes {
    t.kernels
        .par_iter()
        .fold(NameTimes::default, |mut acc, k| {
            let inside = w.inside(k.proc, k.start, k.end);
            if inside > 0 {
                let e = acc.entry(t.display_name_id(k.name)).or_default();
                e.0 = e.0.saturating_add(inside);
                *e.1.entry(k.device).or_default() += inside;
            }
            acc
        })
        .reduce(NameTimes::default, |mut a, b| {
            for (name, (time, devices)) in b {
                let e = a.entry(name).or_default();
                e.0 = e.0.saturating_add(time);
                for (d, ns) in devices {
                    *e.1.entry(d).or_default() += ns;
                }
            }
            a
        })
}

/// The hot kernels, most time first (ties by name), and the windows they were measured in. Two passes: every
/// name's time, then the executions of the hot names only.
pub fn hot_kernels<'t>(cx: &Context<'t>) -> (Vec<HotKernel<'t>>, Windows) {
    let t = cx.trace;
    let w = Windows::of(cx);
    let times = name_times(t, &w);
    let all: u64 = times.values().fold(0u64, |a, e| a.saturating_add(e.0));
    let mut ranked: Vec<(NameId, NameTime)> = times.into_iter().collect();
    ranked.sort_by(|a, b| b.1.0.cmp(&a.1.0).then_with(|| t.names.get(a.0).cmp(t.names.get(b.0))));
    let mut hot = Vec::new();
    let mut index: FxHashMap<NameId, usize> = FxHashMap::default();
    let mut covered = 0u64;
    for (name, (time_ns, by_device)) in ranked {
        if hot.len() >= MAX_HOT || 100.0 * covered as f64 >= HOT_COVER_PCT * all as f64 {
            break;
        }
        covered = covered.saturating_add(time_ns);
        let mut devices: Vec<(u32, u64)> = by_device.into_iter().collect();
        devices.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        index.insert(name, hot.len());
        hot.push(HotKernel {
            name: t.names.get(name).to_string(),
            time_ns,
            share_pct: w.share_pct(time_ns),
            count: 0,
            devices: devices.into_iter().map(|d| d.0).collect(),
            executions: Vec::new(),
        });
    }
    let mut executions: Vec<(usize, &'t Kernel)> = t
        .kernels
        .par_iter()
        .filter(|k| w.inside(k.proc, k.start, k.end) > 0)
        .filter_map(|k| Some((*index.get(&t.display_name_id(k.name))?, k)))
        .collect();
    executions.sort_by_key(|(i, k)| (*i, k.start, k.proc, k.correlation));
    for (i, k) in executions {
        hot[i].executions.push(k);
    }
    for h in &mut hot {
        h.count = h.executions.len() as u64;
    }
    (hot, w)
}

/// A kernel name cut for a one-line summary (templated names run to hundreds of characters).
pub fn short_name(name: &str) -> String {
    const MAX: usize = 80;
    if name.chars().count() <= MAX {
        return name.to_string();
    }
    let cut: String = name.chars().take(MAX - 3).collect();
    format!("{cut}...")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_clip_and_merge() {
        assert_eq!(merged(vec![(30, 40), (0, 10), (5, 20), (20, 25)]), vec![(0, 25), (30, 40)]);
        let windows = ProcWindows::new(1, [(ProcId(0), 30, 40), (ProcId(0), 0, 10), (ProcId(0), 5, 25)].into_iter());
        let w = Windows { total_ns: windows.total_ns, windows, what: "steps" };
        assert_eq!(w.total_ns, 35);
        // 20..35 is inside for 5 ns (20..25) and 5 ns (30..35).
        assert_eq!(w.inside(ProcId(0), 20, 35), 10);
        assert_eq!(w.inside(ProcId(0), 25, 30), 0);
        assert_eq!(w.inside(ProcId(1), 0, 40), 0, "another process's windows");
        assert_eq!(w.share_pct(7), 20.0);
        assert_eq!(severity_of(25.0), Severity::High);
        assert_eq!(severity_of(24.9), Severity::Medium);
        assert_eq!(severity_of(9.9), Severity::Low);
    }
}
