//! A windowed series' own share over a streamed name ([`super::stream_counters`]): its denominator is the length of
//! the series' windows meeting any execution of the name, each window once. The windows met are kept as disjoint
//! runs of window indices, each with the windows' summed length before its ends (from the series,
//! [`LiveSeries::meeting`]), so that a run's length needs no window once the series has dropped them; runs that no
//! later execution can meet are summed and dropped ([`MetWindows::settle`]).

use std::collections::BTreeMap;

use super::counter_live::LiveSeries;

/// A window index, and the summed length of the windows before it.
pub(super) type Edge = (usize, u128);

/// The windows of a series that some execution met, as disjoint runs (`start -> (end, length before start,
/// length before end)`, not touching), and the summed length of the runs settled (`below`: no later execution
/// meets a window before it).
#[derive(Default)]
pub(super) struct MetWindows {
    runs: BTreeMap<usize, (usize, u128, u128)>,
    settled: u128,
    below: Edge,
    /// Executions met windows already settled (rows earlier than their chunks claim: a damaged file).
    pub late: u64,
}

impl MetWindows {
    /// Windows `from..to` met.
    pub(super) fn add(&mut self, from: Edge, to: Edge) {
        if from.0 < self.below.0 && to.0 > from.0 {
            self.late += 1;
        }
        let from = if from.0 < self.below.0 { self.below } else { from };
        if to.0 <= from.0 {
            return;
        }
        let (mut lo, mut hi) = (from, to);
        if let Some((&s, &(e, ls, _))) = self.runs.range(..=from.0).next_back()
            && e >= from.0
        {
            lo = (s, ls);
        }
        let joined: Vec<usize> = self.runs.range(lo.0..=hi.0).map(|(&s, _)| s).collect();
        for s in joined {
            if let Some((e, _, le)) = self.runs.remove(&s)
                && e > hi.0
            {
                hi = (e, le);
            }
        }
        self.runs.insert(lo.0, (hi.0, lo.1, hi.1));
    }

    /// Runs that end by window `below` summed and dropped: no later execution meets them.
    pub(super) fn settle(&mut self, below: Edge) {
        while let Some(entry) = self.runs.first_entry() {
            if entry.get().0 > below.0 {
                break;
            }
            let (_, (_, ls, le)) = entry.remove_entry();
            self.settled += le - ls;
        }
        if below.0 > self.below.0 {
            self.below = below;
        }
    }

    /// The summed length of every window met.
    pub(super) fn length(&self) -> u128 {
        self.settled + self.runs.values().map(|&(_, ls, le)| le - ls).sum::<u128>()
    }
}

/// The windows of `s` meeting the merged execution intervals `merged` (in time order) added to `met`: runs of
/// consecutive intervals joined first, as their window runs are in order too.
pub(super) fn add_met(met: &mut MetWindows, s: &LiveSeries, merged: &[(u64, u64)]) {
    let mut run: Option<(Edge, Edge)> = None;
    for &(a, b) in merged {
        let Some((from, to)) = s.meeting(a, b) else { return };
        if to.0 <= from.0 {
            continue;
        }
        run = match run {
            Some((f, e)) if from.0 <= e.0 => Some((f, if to.0 > e.0 { to } else { e })),
            Some((f, e)) => {
                met.add(f, e);
                Some((from, to))
            }
            None => Some((from, to)),
        };
    }
    if let Some((f, e)) = run {
        met.add(f, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::counter_windows::Window;
    use cutr_model::counters::CounterSeriesInfo;
    use cutr_model::{NameId, ProcId};

    /// Window `i` of a tiling of 10 ns windows: 10 i ns before it.
    fn at(i: usize) -> Edge {
        (i, 10 * i as u128)
    }

    /// Rates read every 10 ns from 0 to 100, each over the 10 ns before it: window i is [10 i, 10 i + 10].
    fn tiling() -> LiveSeries {
        let info = CounterSeriesInfo {
            proc: ProcId(0),
            device: 0,
            series: NameId::EMPTY,
            first: 0,
            last: 100,
            samples: 11,
            largest: 1.0,
        };
        let mut s = LiveSeries::new(Window::SincePrevious, &info);
        (0..=10u64).for_each(|i| s.take(i * 10, 1.0));
        s.advance(u64::MAX);
        s
    }

    #[test]
    fn met_windows_are_counted_once_in_any_order() {
        let mut met = MetWindows::default();
        met.add(at(5), at(7));
        met.add(at(1), at(2));
        met.add(at(2), at(3));
        met.add(at(6), at(9));
        // {1, 2} and {5, 6, 7, 8}: 6 windows of 10 ns.
        assert_eq!(met.runs.len(), 2);
        assert_eq!(met.length(), 60);
        met.add(at(0), at(9));
        assert_eq!((met.runs.len(), met.length()), (1, 90));
    }

    #[test]
    fn settled_runs_are_summed_and_a_late_one_is_counted() {
        let mut met = MetWindows::default();
        met.add(at(0), at(2));
        met.add(at(4), at(6));
        met.settle(at(3));
        // [0, 2) settled; [4, 6) is not, past index 3.
        assert_eq!((met.settled, met.runs.len(), met.length()), (20, 1, 40));
        // A run from before the settled edge: only its part from index 3 is added, and it is counted late.
        met.add(at(1), at(5));
        assert_eq!((met.late, met.length()), (1, 50));
    }

    #[test]
    fn merged_intervals_meet_runs_of_windows() {
        let s = tiling();
        let mut met = MetWindows::default();
        // [12, 18] meets window 1, [25, 35] windows 2 and 3 (joined into one run), an instant at 70 none (it is
        // the edge of windows 6 and 7, inside neither), an instant at 71 window 7.
        add_met(&mut met, &s, &[(12, 18), (25, 35), (70, 70), (71, 71)]);
        assert_eq!(met.runs.iter().map(|(&a, &(b, ..))| (a, b)).collect::<Vec<_>>(), [(1, 4), (7, 8)]);
        assert_eq!(met.length(), 40);
    }
}
