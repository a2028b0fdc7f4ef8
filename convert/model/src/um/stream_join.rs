//! The kernel running at each unified memory event, joined while streaming ([`crate::stream`]): the kernel
//! [`RunningKernels`](super::RunningKernels) picks on a loaded trace (on the event's file and device, of the
//! kernels whose span holds the event's start, the latest to start, then to end, then the highest correlation
//! id), found window by window, each event handed on once no later kernel can hold it.
//!
//! Why an event becomes final: a stream hands over chunks in order of their earliest start, so every row of a
//! later window starts at or after the next window's first start ([`Batch::next_start`](crate::stream::Batch)).
//! GPU work a stream holds for its launching call ([`StreamOptions::hold_unlaunched`](crate::stream::StreamOptions))
//! is held only while it starts after that time, so it too starts after the edge of the window before the one
//! that hands it over. An event that starts before the edge can therefore be held by no later kernel: it is
//! final. The join keeps the events at or past the edge and the kernels still running there (ending at or after
//! it): state bounded by what straddles a window's edge, not by the number of events.
//!
//! A row that starts before the edge already passed (a chunk whose header claims a later start than its rows: a
//! damaged or forged file) may have missed its match: such rows are counted ([`UmJoin::late_rows`]), never
//! matched silently against less than a load sees.

use rustc_hash::FxHashMap;

use crate::ids::{NameId, ProcId};
use crate::rows::{Kernel, UmEvent};

/// A kernel as a match: (start, end, correlation) orders them, the largest wins (a load's kernels are sorted by
/// start then correlation, and [`super::RunningKernels`] takes the latest start, then end, then index); its
/// mangled name.
type Candidate = ((u64, u64, u32), NameId);

/// The streaming join of unified memory events to the kernels running on their devices.
pub struct UmJoin {
    /// Events with a device that a later window's kernel may still hold, each with its best kernel so far.
    pending: Vec<(UmEvent, Option<Candidate>)>,
    /// Kernels of earlier windows still running at the last window's edge, sorted by (file, device, start, end,
    /// correlation), with the latest end of each one's prefix within its file and device: a window's events find
    /// their kernel by binary search, as [`super::RunningKernels`] does on a loaded trace.
    running: Vec<Kernel>,
    running_reach: Vec<u64>,
    /// The most events (and running kernels) kept ([`crate::stream::StreamOptions::max_waiting`]): an edge kept
    /// back by chunk headers that claim early times would keep them all; past it the oldest are handed on (the
    /// kernels that ended first dropped), counted in `settled_early`.
    cap: usize,
    settled_early: u64,
    /// The last window's edge (its next window's first start): events before it were handed on.
    edge: Option<u64>,
    /// The latest start of an event handed on, per file and device: a later kernel starting at or before it
    /// might have held one.
    handed_on_to: FxHashMap<(ProcId, u32), u64>,
    late_rows: u64,
}

impl Default for UmJoin {
    fn default() -> Self {
        UmJoin::with_cap(crate::stream::DEFAULT_MAX_WAITING)
    }
}

impl UmJoin {
    /// A join that keeps at most `cap` events waiting and `cap` kernels running.
    pub fn with_cap(cap: usize) -> UmJoin {
        UmJoin {
            pending: Vec::new(),
            running: Vec::new(),
            running_reach: Vec::new(),
            cap: cap.max(1),
            settled_early: 0,
            edge: None,
            handed_on_to: FxHashMap::default(),
            late_rows: 0,
        }
    }

    /// Events handed on and kernels dropped before the stream passed their time (more than the cap waited).
    pub fn settled_early(&self) -> u64 {
        self.settled_early
    }

    /// The best kernel of the running ones holding `start` on `(proc, device)`.
    fn running_at(&self, proc: ProcId, device: u32, start: u64) -> Option<Candidate> {
        let key = |k: &Kernel| (k.proc, k.device, k.start);
        let mut i = self.running.partition_point(|k| key(k) <= (proc, device, start));
        while i > 0 {
            i -= 1;
            let k = &self.running[i];
            if (k.proc, k.device) != (proc, device) || self.running_reach[i] < start {
                return None;
            }
            // Sorted by start, end, correlation: the first that holds `start` going back is the best.
            if k.end >= start {
                return better(None, k);
            }
        }
        None
    }

    /// Sorts the running kernels and their reach, the oldest ending dropped past the cap.
    fn index_running(&mut self) {
        if self.running.len() > self.cap {
            self.running.sort_unstable_by_key(|k| std::cmp::Reverse(k.end));
            self.settled_early += (self.running.len() - self.cap) as u64;
            self.running.truncate(self.cap);
        }
        self.running.sort_unstable_by_key(|k| (k.proc, k.device, k.start, k.end, k.correlation));
        self.running_reach.clear();
        let mut reach = 0;
        for (i, k) in self.running.iter().enumerate() {
            let first = i == 0 || (self.running[i - 1].proc, self.running[i - 1].device) != (k.proc, k.device);
            reach = if first { k.end } else { reach.max(k.end) };
            self.running_reach.push(reach);
        }
    }

    /// A window's events and kernels (`next_start`: where the next window begins, `None` after the last). Each
    /// event that is final is handed to `hand_on` with its kernel's mangled name (`None`: no kernel ran on its
    /// device when it began, or it has no one device); after the last window, every event has been.
    pub fn window(
        &mut self,
        events: impl IntoIterator<Item = UmEvent>,
        kernels: &[Kernel],
        next_start: Option<u64>,
        mut hand_on: impl FnMut(UmEvent, Option<NameId>),
    ) {
        for e in events {
            let Some(device) = e.device() else {
                hand_on(e, None);
                continue;
            };
            if self.edge.is_some_and(|edge| e.start < edge) {
                self.late_rows += 1;
            }
            let best = self.running_at(e.proc, device, e.start);
            self.pending.push((e, best));
        }
        self.match_kernels(kernels);
        let Some(edge) = next_start else {
            for (e, best) in self.pending.drain(..) {
                hand_on(e, best.map(|b| b.1));
            }
            self.running.clear();
            self.running_reach.clear();
            self.edge = None;
            return;
        };
        let handed_on_to = &mut self.handed_on_to;
        self.pending.retain(|&(e, best)| {
            if e.start >= edge {
                return true;
            }
            let to = handed_on_to.entry((e.proc, e.device().unwrap_or_default())).or_default();
            *to = (*to).max(e.start);
            hand_on(e, best.map(|b| b.1));
            false
        });
        if self.pending.len() > self.cap {
            // The oldest events are handed on with the kernel found so far.
            self.pending.sort_by_key(|(e, _)| e.start);
            let early = self.pending.len() - self.cap;
            self.settled_early += early as u64;
            for (e, best) in self.pending.drain(..early) {
                let to = self.handed_on_to.entry((e.proc, e.device().unwrap_or_default())).or_default();
                *to = (*to).max(e.start);
                hand_on(e, best.map(|b| b.1));
            }
        }
        self.running.extend(kernels.iter().filter(|k| k.end >= edge).copied());
        self.running.retain(|k| k.end >= edge);
        self.index_running();
        // Never back: a window's first start is at or after the one before's (chunks come by their first start).
        self.edge = Some(self.edge.map_or(edge, |e| e.max(edge)));
    }

    /// Each of `kernels` as the match of the pending events its span holds (it may start in an earlier window:
    /// held work).
    fn match_kernels(&mut self, kernels: &[Kernel]) {
        if self.pending.is_empty() {
            return;
        }
        let key = |e: &UmEvent| (e.proc, e.device().unwrap_or_default(), e.start);
        self.pending.sort_unstable_by_key(|(e, _)| key(e));
        for k in kernels {
            let late = self.handed_on_to.get(&(k.proc, k.device)).is_some_and(|&to| k.start <= to);
            if late {
                self.late_rows += 1;
            }
            let from = self.pending.partition_point(|(e, _)| key(e) < (k.proc, k.device, k.start));
            let to = self.pending.partition_point(|(e, _)| key(e) <= (k.proc, k.device, k.end));
            for (_, best) in &mut self.pending[from..to.max(from)] {
                *best = better(*best, k);
            }
        }
    }

    /// Rows that came after the time they could have joined in was settled (see the module): an event that
    /// started before a window's edge already passed, or a kernel that started at or before an event already
    /// handed on on its device. 0 on any file whose chunk headers are true.
    pub fn late_rows(&self) -> u64 {
        self.late_rows
    }
}

fn better(best: Option<Candidate>, k: &Kernel) -> Option<Candidate> {
    let c = ((k.start, k.end, k.correlation), k.name);
    Some(match best {
        Some(b) if b.0 >= c.0 => b,
        _ => c,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::UmKind;

    fn kernel(start: u64, end: u64, correlation: u32, name: u32) -> Kernel {
        Kernel { start, end, correlation, name: NameId(name), ..Default::default() }
    }

    fn fault(start: u64) -> UmEvent {
        UmEvent {
            proc: ProcId(0),
            kind: UmKind::GpuPageFault,
            start,
            end: start,
            value: 1,
            address: 0,
            src: 0,
            dst: 0,
            flags: 0,
            pc: 0,
            processors: 0,
        }
    }

    /// A window: its events, its kernels, the next window's first start.
    type Window = (Vec<UmEvent>, Vec<Kernel>, Option<u64>);
    /// (event start, kernel name) as handed on.
    type HandedOn = Vec<(u64, Option<u32>)>;

    /// Runs the windows through a join; returns what it handed on, window by window, and its late rows.
    fn run(windows: &[Window]) -> (Vec<HandedOn>, u64) {
        let mut join = UmJoin::default();
        let mut out = Vec::new();
        for (events, kernels, next) in windows {
            let mut got = Vec::new();
            join.window(events.iter().copied(), kernels, *next, |e, k| got.push((e.start, k.map(|k| k.0))));
            got.sort_unstable();
            out.push(got);
        }
        (out, join.late_rows())
    }

    #[test]
    fn events_are_handed_on_once_final_with_the_kernel_a_load_picks() {
        let (out, late) = run(&[
            // A kernel 10..100 (name 1) running past the edge at 50; two events before it, one after.
            (vec![fault(5), fault(20), fault(60)], vec![kernel(10, 100, 1, 1)], Some(50)),
            // A kernel starting at 55 (name 2) holds the event at 60 (latest start); one at 90 (kernel 1 only:
            // 2 ended at 80). Same start and end as kernel 2 with a higher correlation: name 3 wins.
            (vec![fault(90)], vec![kernel(55, 80, 7, 2), kernel(55, 80, 9, 3)], None),
        ]);
        assert_eq!(out, [vec![(5, None), (20, Some(1))], vec![(60, Some(3)), (90, Some(1))]]);
        assert_eq!(late, 0);
    }

    #[test]
    fn only_a_kernel_of_the_events_file_and_device_holds_it() {
        let on = |proc, device, k: Kernel| Kernel { proc: ProcId(proc), device, ..k };
        let (fault_1, mut fault_gpu_1) = (UmEvent { proc: ProcId(1), ..fault(20) }, fault(30));
        fault_gpu_1.src = 1;
        let kernels = vec![on(0, 0, kernel(10, 100, 1, 1)), on(1, 1, kernel(10, 100, 2, 2))];
        let (out, late) = run(&[(vec![fault_1, fault_gpu_1, fault(40)], kernels, None)]);
        // File 1's event on its GPU 0 and file 0's on GPU 1: no kernel; file 0's on GPU 0: kernel 1.
        assert_eq!((out, late), (vec![vec![(20, None), (30, None), (40, Some(1))]], 0));
    }

    #[test]
    fn rows_before_the_edge_passed_are_counted_late() {
        let (out, late) = run(&[
            (vec![fault(20)], vec![], Some(50)),
            // A forged chunk: an event at 30 and a kernel from 10, both before the edge at 50.
            (vec![fault(30)], vec![kernel(10, 40, 1, 1)], None),
        ]);
        assert_eq!(out, [vec![(20, None)], vec![(30, Some(1))]]);
        assert_eq!(late, 2);
    }
}
