//! Interval arithmetic the rules share: merging, the union's length, and each process's windows (its steps, or
//! its GPU span) that the rules judge inside.

use cutr_model::ProcId;

use super::types::{Context, Step};

/// Disjoint, sorted intervals covering the same instants as `iv`.
pub fn merged(mut iv: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    iv.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(iv.len());
    for (s, e) in iv {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The time `iv` covers, overlaps counted once.
pub fn union_ns(iv: Vec<(u64, u64)>) -> u64 {
    merged(iv).iter().map(|(s, e)| e - s).sum()
}

/// Per process, merged `[start, end)` windows in time order: "inside a step" is a binary search, and shares are
/// of the windows' summed time.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcWindows {
    /// By process index.
    by_proc: Vec<Vec<(u64, u64)>>,
    /// The windows' summed length (overlaps once): what shares are of.
    pub total_ns: u64,
    /// How many windows were given (before merging).
    pub count: usize,
}

impl ProcWindows {
    /// The windows of `processes` processes; windows of a process beyond them are left out.
    pub fn new(processes: usize, windows: impl Iterator<Item = (ProcId, u64, u64)>) -> ProcWindows {
        let mut by_proc: Vec<Vec<(u64, u64)>> = vec![Vec::new(); processes];
        let mut count = 0;
        for (proc, start, end) in windows {
            if let Some(w) = by_proc.get_mut(proc.index()) {
                w.push((start, end.max(start)));
                count += 1;
            }
        }
        for w in &mut by_proc {
            *w = merged(std::mem::take(w));
        }
        let total_ns = by_proc.iter().flatten().fold(0u64, |a, (s, e)| a.saturating_add(e - s));
        ProcWindows { by_proc, total_ns, count }
    }

    /// The windows of `cx`'s steps (empty ones left out); `None` when there are none.
    pub fn of_steps(cx: &Context<'_>) -> Option<ProcWindows> {
        ProcWindows::of_step_list(cx.trace.processes.len(), cx.steps)
    }

    /// The windows of `steps` of `processes` processes (empty ones left out); `None` when there are none.
    pub fn of_step_list(processes: usize, steps: &[Step]) -> Option<ProcWindows> {
        let steps = steps.iter().filter(|s| s.end > s.start);
        let windows = ProcWindows::new(processes, steps.map(|s| (s.proc, s.start, s.end)));
        (windows.count > 0).then_some(windows)
    }

    /// The part of `[start, end)` inside the window that `start` falls in; `None` when `start` is in none.
    pub fn clip(&self, proc: ProcId, start: u64, end: u64) -> Option<(u64, u64)> {
        let w = self.by_proc.get(proc.index())?;
        let i = w.partition_point(|x| x.0 <= start).checked_sub(1)?;
        let (ws, we) = w[i];
        (start >= ws && start < we).then(|| (start, end.clamp(start, we)))
    }

    /// The part of `[start, end)` of process `proc` inside any of its windows (ns).
    pub fn inside(&self, proc: ProcId, start: u64, end: u64) -> u64 {
        let Some(list) = self.by_proc.get(proc.index()) else { return 0 };
        let first = list.partition_point(|w| w.1 <= start);
        list[first..].iter().take_while(|w| w.0 < end).map(|w| end.min(w.1).saturating_sub(start.max(w.0))).sum()
    }

    /// `ns` as a share (%) of the windows' time (0 without windows).
    pub fn share_pct(&self, ns: u64) -> f64 {
        if self.total_ns == 0 { 0.0 } else { 100.0 * ns as f64 / self.total_ns as f64 }
    }
}
