//! The hot kernels every per-kernel rule judges: the kernel names with the most GPU time inside the steps (or,
//! without steps, inside each process's GPU span), the fewest that cover [`HOT_COVER_PCT`] of the kernel time,
//! at most [`MAX_HOT`]. A name's share is its time inside the windows over the windows' time.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use cutr_model::{Kernel, NameId, ProcId};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::super::super::types::{Context, EventRef, MAX_EVIDENCE, Severity, Step};
use super::tally::KernelTally;
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

/// The time the rules judge against: per process, its steps merged (or its GPU span), in time order; a stream's
/// borrows the steps' windows its first pass made.
pub struct Windows<'w> {
    windows: Cow<'w, ProcWindows>,
    /// The windows' whole time, over every process.
    pub total_ns: u64,
    /// `steps` or `span`, for summaries.
    pub what: &'static str,
}

impl<'w> Windows<'w> {
    /// The steps of `cx` where it has any; else each process's GPU span (first GPU op's start to last's end).
    pub fn of(cx: &Context<'_>) -> Windows<'static> {
        let t = cx.trace;
        let mut span: HashMap<ProcId, (u64, u64)> = HashMap::new();
        if cx.steps.is_empty() {
            let ops = t.kernels.iter().map(|k| (k.proc, k.start, k.end));
            let ops = ops.chain(t.memcpys.iter().map(|m| (m.proc, m.start, m.end)));
            let ops = ops.chain(t.memsets.iter().map(|m| (m.proc, m.start, m.end)));
            for (proc, start, end) in ops {
                let s = span.entry(proc).or_insert((start, end));
                *s = (s.0.min(start), s.1.max(end));
            }
        }
        Windows::new(t.processes.len(), cx.steps, span.into_iter().map(|(p, s)| (p, s.0, s.1)))
    }

    /// The windows of `processes` processes: `steps` where there are any, else each process's GPU span in `spans`
    /// (process, first GPU op's start, last one's end).
    pub fn new(processes: usize, steps: &[Step], spans: impl Iterator<Item = (ProcId, u64, u64)>) -> Windows<'static> {
        let (windows, what) = if steps.is_empty() {
            (ProcWindows::new(processes, spans), "span")
        } else {
            (ProcWindows::new(processes, steps.iter().map(|s| (s.proc, s.start, s.end))), "steps")
        };
        Windows { total_ns: windows.total_ns, windows: Cow::Owned(windows), what }
    }

    /// [`Windows::new`] with the steps' windows made already (`step_windows`: those of `steps`, as
    /// [`ProcWindows::of_step_list`] makes them), borrowed.
    pub fn of_step_windows(
        processes: usize,
        steps: &[Step],
        step_windows: Option<&'w ProcWindows>,
        spans: impl Iterator<Item = (ProcId, u64, u64)>,
    ) -> Windows<'w> {
        match step_windows {
            // Empty steps add no time: windows without them judge the same.
            Some(w) if !steps.is_empty() => Windows { total_ns: w.total_ns, windows: Cow::Borrowed(w), what: "steps" },
            _ => Windows::new(processes, steps, spans),
        }
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
pub struct HotKernel {
    /// The demangled name, as `stats` shows it.
    pub name: String,
    /// Its executions' time inside the windows (summed; concurrent executions each counted).
    pub time_ns: u64,
    pub share_pct: f64,
    /// Executions that ran (at least in part) inside the windows.
    pub count: u64,
    /// The devices it ran on, most time first (its counters are read on the first that has them).
    pub devices: Vec<u32>,
    /// Its executions inside the windows, summed ([`KernelTally`]): the first few, the main launch, the recorded
    /// names.
    pub tally: KernelTally,
}

impl HotKernel {
    /// The first few executions, as evidence.
    pub fn evidence(&self) -> Vec<EventRef> {
        // Every execution's demangled name is the hot kernel's own.
        let event = |k: &Kernel| EventRef {
            proc: k.proc,
            start: k.start,
            end: k.end,
            correlation: k.correlation,
            what: self.name.clone(),
        };
        self.tally.first().iter().take(MAX_EVIDENCE).map(event).collect()
    }

    /// The severity of a finding about this kernel, by its share of the window time.
    pub fn severity(&self) -> Severity {
        severity_of(self.share_pct)
    }

    /// The execution whose launch configuration (grid, block, registers, shared memory, device) has the most time
    /// inside the windows (ties: the one that ran first): the one the occupancy rule judges.
    pub fn main_launch(&self) -> Option<&Kernel> {
        self.tally.main_launch()
    }
}

/// Severity by share of the window time ([`HIGH_SHARE_PCT`], [`MEDIUM_SHARE_PCT`]).
pub fn severity_of(share_pct: f64) -> Severity {
    Severity::by_share(share_pct, HIGH_SHARE_PCT, MEDIUM_SHARE_PCT)
}

/// The executions inside the windows of `kernels`, by the name `name_of` gives each (in parallel blocks).
pub fn tallies(
    kernels: &[Kernel],
    w: &Windows,
    name_of: impl Fn(&Kernel) -> NameId + Sync,
) -> FxHashMap<NameId, KernelTally> {
    kernels
        .par_iter()
        .fold(FxHashMap::default, |mut acc: FxHashMap<NameId, KernelTally>, k| {
            let inside = w.inside(k.proc, k.start, k.end);
            if inside > 0 {
                acc.entry(name_of(k)).or_default().add(k, inside);
            }
            acc
        })
        .reduce(FxHashMap::default, merge_tallies)
}

/// Two sets of tallies by name as one.
pub fn merge_tallies(
    mut a: FxHashMap<NameId, KernelTally>,
    b: FxHashMap<NameId, KernelTally>,
) -> FxHashMap<NameId, KernelTally> {
    for (name, tally) in b {
        match a.entry(name) {
            Entry::Occupied(mut e) => e.get_mut().merge(tally),
            Entry::Vacant(e) => {
                e.insert(tally);
            }
        }
    }
    a
}

/// The hot kernels, most time first (ties by name), and the windows they were measured in.
pub fn hot_kernels(cx: &Context<'_>) -> (Vec<HotKernel>, Windows<'static>) {
    let t = cx.trace;
    let w = Windows::of(cx);
    let named = tallies(&t.kernels, &w, |k| t.display_name_id(k.name))
        .into_iter()
        .map(|(id, tally)| (t.names.get(id).to_string(), tally));
    (rank(named.collect(), &w), w)
}

/// The hot names among every kernel name's tally (by demangled name; each name once), most time first (ties by
/// name): the fewest that cover [`HOT_COVER_PCT`] of their summed time, at most [`MAX_HOT`].
pub fn rank(mut named: Vec<(String, KernelTally)>, w: &Windows) -> Vec<HotKernel> {
    let all: u64 = named.iter().fold(0u64, |a, e| a.saturating_add(e.1.time_ns));
    named.sort_by(|a, b| b.1.time_ns.cmp(&a.1.time_ns).then_with(|| a.0.cmp(&b.0)));
    let mut hot = Vec::new();
    let mut covered = 0u64;
    for (name, tally) in named {
        if hot.len() >= MAX_HOT || 100.0 * covered as f64 >= HOT_COVER_PCT * all as f64 {
            break;
        }
        covered = covered.saturating_add(tally.time_ns);
        hot.push(HotKernel {
            name,
            time_ns: tally.time_ns,
            share_pct: w.share_pct(tally.time_ns),
            count: tally.count,
            devices: tally.devices(),
            tally,
        });
    }
    hot
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
        let w = Windows { total_ns: windows.total_ns, windows: Cow::Owned(windows), what: "steps" };
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
