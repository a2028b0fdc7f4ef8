//! `stats --stream`'s counters section: the loaded report's ([`super::counters`]) from the stream's batches. The
//! counter series are side chunks the stream reads whole at open; the kernels, copies and NVTX ranges they are
//! averaged over go by. What an average needs of them adds up over executions ([`Integrals`]): each window's
//! executions of a (name, device, file) are integrated against each series of that device at once, and only the
//! sums are kept. The one figure that is not a sum is a windowed series' own share, whose denominator is the
//! length of the windows meeting any execution (each window once): each part keeps the union of the windows its
//! executions met as runs of window indices ([`MetWindows`]), and a kernel's or copy's runs that end before the
//! stream's edge are settled into a sum (no later kernel starts before the edge, so none can meet them again).
//! An NVTX range arrives when it closes and can have begun at any earlier time, so a range's runs are not
//! settled: they are at most one per two windows of the series, which the series itself already holds.
//!
//! State is per (name, device, file) and series, the rows of the report before `--top` and
//! [`super::counters::MAX_ROWS`] cut it, not per execution, and at most [`SUMS_KEPT`] of them (past it the section
//! is not computed, and the report says so); the series themselves are held whole, as a load holds them. Rows,
//! groups, order, covered and total times and windows are the loaded report's exactly; averages and own shares
//! are the same sums added in another order (window by window, not execution by execution or sample by sample):
//! equal within a relative 1e-12, not bit for bit.

use std::collections::{BTreeMap, HashMap};

use cutr_model::stream::Batch;
use cutr_model::{NameId, ProcId, Trace, describe};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::counter_math::Runs;
use super::counter_windows::{Integrals, Series};
use super::counters::{CounterSection, Group, SeriesByDevice, cut, hulls, meets, merge_rows, series as series_of};

/// The section summed window by window.
#[derive(Default)]
pub(crate) struct StreamedCounters {
    /// Made at the first window (the series are in the stream's trace from its open).
    state: Option<State>,
}

/// A row's record kind as the stream gives it, before it is named.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum RawKind {
    Kernel(NameId),
    /// (copy kind, source memory kind, destination memory kind).
    Memcpy(u8, u8, u8),
    Memset(u16),
    Range(NameId),
}

/// What a part is named by in the loaded report: a kernel by its demangled name, a range by its name's id, a copy
/// or memset by its kind's text (names reading the same are one part there).
#[derive(Clone, PartialEq, Eq, Hash)]
enum PartName {
    Id(NameId),
    Text(String),
}

/// The executions of one name on one device of one file, summed.
struct Part {
    over: &'static str,
    name: PartName,
    /// (file, device): whose series it is averaged against.
    key: (ProcId, u32),
    /// Earliest start and latest end (ends raised to their starts), and the whole time (saturating).
    first: u64,
    last: u64,
    total: u64,
    /// Per series of `key`, in the list's order.
    sums: Vec<SeriesSums>,
}

#[derive(Default)]
struct SeriesSums {
    integrals: Integrals,
    met: MetWindows,
}

/// The windows of a series that some execution met, as disjoint runs of window indices (`start -> end`, not
/// touching), and the summed length of the runs settled (`below`: no later execution meets a window before it).
#[derive(Default)]
struct MetWindows {
    runs: BTreeMap<usize, usize>,
    settled: u128,
    below: usize,
    /// Executions met windows already settled (rows earlier than their chunks claim: a damaged file).
    late: u64,
}

impl MetWindows {
    /// Windows `from..to` met.
    fn add(&mut self, from: usize, to: usize) {
        if from < self.below && to > from {
            self.late += 1;
        }
        let from = from.max(self.below);
        if to <= from {
            return;
        }
        let (mut lo, mut hi) = (from, to);
        if let Some((&s, &e)) = self.runs.range(..=from).next_back()
            && e >= from
        {
            lo = s;
            hi = hi.max(e);
        }
        let joined: Vec<usize> = self.runs.range(lo..=hi).map(|(&s, _)| s).collect();
        for s in joined {
            hi = hi.max(self.runs.remove(&s).unwrap_or(0));
        }
        self.runs.insert(lo, hi);
    }

    /// Runs that end by window `below` summed and dropped: no later execution meets them.
    fn settle(&mut self, below: usize, series: &Series) {
        while let Some(entry) = self.runs.first_entry() {
            if *entry.get() > below {
                break;
            }
            let (s, e) = entry.remove_entry();
            self.settled += series.windows_length(s, e);
        }
        self.below = self.below.max(below);
    }

    /// The summed length of every window met.
    fn length(&self, series: &Series) -> u128 {
        self.settled + self.runs.iter().map(|(&s, &e)| series.windows_length(s, e)).sum::<u128>()
    }
}

/// The most (part, series) sums a stream keeps (~100 bytes each): a real recording's are tens of thousands (8 GPUs
/// x 300 names x 40 series is 96,000). A hostile one (20,000 metrics over every name) would cost gigabytes where a
/// load ranks the names first and computes only the rows it shows: past this the section is not computed.
pub(crate) const SUMS_KEPT: usize = 1 << 19;

/// What the section keeps between windows.
struct State {
    series: SeriesByDevice,
    /// (part, series) sums kept; a part that would take them past [`SUMS_KEPT`] drops them all, and `gave_up` says
    /// how many parts there were with it.
    sums: usize,
    gave_up: Option<usize>,
    /// Per file: its devices with series, in order (a range is averaged against each).
    devices: FxHashMap<ProcId, Vec<u32>>,
    parts: Vec<Part>,
    by_name: HashMap<(&'static str, PartName, u32, ProcId), usize>,
    by_raw: FxHashMap<(RawKind, u32, ProcId), usize>,
}

impl State {
    fn new(series: SeriesByDevice) -> State {
        let mut devices: FxHashMap<ProcId, Vec<u32>> = FxHashMap::default();
        for &(proc, device) in series.keys() {
            devices.entry(proc).or_default().push(device);
        }
        devices.values_mut().for_each(|d| d.sort_unstable());
        let (parts, by_name, by_raw) = (Vec::new(), HashMap::new(), FxHashMap::default());
        State { series, sums: 0, gave_up: None, devices, parts, by_name, by_raw }
    }

    /// The part of a row of kind `raw` on (file, device) `key`; `None` when a new part's sums would pass
    /// [`SUMS_KEPT`].
    fn part(&mut self, t: &Trace, raw: RawKind, (proc, device): (ProcId, u32)) -> Option<usize> {
        if let Some(&i) = self.by_raw.get(&(raw, device, proc)) {
            return Some(i);
        }
        let (over, name) = match raw {
            // The stream's trace has no demangled names: named as a load names them.
            RawKind::Kernel(id) => ("kernel", PartName::Text(cutr_model::demangle::demangle(t.names.get(id)))),
            RawKind::Memcpy(c, s, d) => ("copy", PartName::Text(describe::memcpy_name(c, s, d))),
            RawKind::Memset(kind) => ("copy", PartName::Text(describe::memset_name(kind))),
            RawKind::Range(id) => ("nvtx", PartName::Id(id)),
        };
        let n_series = self.series[&(proc, device)].len();
        let key = (over, name, device, proc);
        if !self.by_name.contains_key(&key) && self.sums + n_series > SUMS_KEPT {
            return None;
        }
        let (parts, sums) = (&mut self.parts, &mut self.sums);
        let i = *self.by_name.entry(key).or_insert_with_key(|(_, name, ..)| {
            *sums += n_series;
            parts.push(Part {
                over,
                name: name.clone(),
                key: (proc, device),
                first: u64::MAX,
                last: 0,
                total: 0,
                sums: (0..n_series).map(|_| SeriesSums::default()).collect(),
            });
            parts.len() - 1
        });
        self.by_raw.insert((raw, device, proc), i);
        Some(i)
    }

    /// A window's executions, by part; `None` when their parts' sums would pass [`SUMS_KEPT`].
    fn executions(&mut self, t: &Trace, b: &Batch) -> Option<FxHashMap<usize, Vec<(u64, u64)>>> {
        let mut out: FxHashMap<usize, Vec<(u64, u64)>> = FxHashMap::default();
        let ops = b.kernels.iter().map(|k| (RawKind::Kernel(k.name), k.proc, k.device, k.start, k.end));
        let copies = b
            .memcpys
            .iter()
            .map(|m| (RawKind::Memcpy(m.copy_kind, m.src_kind, m.dst_kind), m.proc, m.device, m.start, m.end));
        let sets = b.memsets.iter().map(|m| (RawKind::Memset(m.memory_kind), m.proc, m.device, m.start, m.end));
        for (raw, proc, device, start, end) in ops.chain(copies).chain(sets) {
            if self.series.contains_key(&(proc, device)) {
                let i = self.part(t, raw, (proc, device))?;
                out.entry(i).or_default().push((start, end));
            }
        }
        for r in b.ranges.iter().filter(|r| r.closed()) {
            let Some(devices) = self.devices.get(&r.proc).cloned() else { continue };
            for device in devices {
                let i = self.part(t, RawKind::Range(r.name), (r.proc, device))?;
                out.entry(i).or_default().push((r.start, r.end));
            }
        }
        Some(out)
    }
}

impl StreamedCounters {
    /// A window's kernels, copies, memsets and closed ranges integrated against their devices' series.
    pub(crate) fn add(&mut self, t: &Trace, b: &Batch) {
        let state = self.state.get_or_insert_with(|| State::new(series_of(t)));
        if state.series.is_empty() || state.gave_up.is_some() {
            return;
        }
        let Some(mut executions) = state.executions(t, b) else {
            state.gave_up = Some(state.parts.len() + 1);
            (state.parts, state.by_name, state.by_raw) = Default::default();
            return;
        };
        let series = &state.series;
        let touched: Vec<(&mut Part, Vec<(u64, u64)>)> =
            state.parts.iter_mut().enumerate().filter_map(|(i, p)| Some((p, executions.remove(&i)?))).collect();
        touched.into_par_iter().for_each(|(part, intervals)| {
            let list = &series[&part.key];
            let runs = Runs::new(intervals);
            part.first = part.first.min(runs.first);
            part.last = part.last.max(runs.last);
            part.total = part.total.saturating_add(runs.total);
            // Kernels and copies start at or after the edge from the next window on; a range may have begun
            // before it.
            let edge = b.next_start.filter(|_| part.over != "nvtx");
            let merged = runs.merged();
            for (sums, (_, _, s)) in part.sums.iter_mut().zip(list.iter()) {
                sums.integrals.add(&s.integrate(&runs));
                add_met(&mut sums.met, s, &merged);
                if let Some((below, _)) = edge.and_then(|e| s.windows_meeting(e, e)) {
                    sums.met.settle(below, s);
                }
            }
        });
    }

    /// The section, as [`super::counters::section`] makes it of the loaded trace, at most `max_rows` rows (`t`: the
    /// stream's trace, for names and the series).
    pub(crate) fn section(self, t: &Trace, top: Option<usize>, max_rows: usize) -> CounterSection {
        let state = self.state.unwrap_or_else(|| State::new(series_of(t)));
        if state.series.is_empty() || state.gave_up.is_some() {
            return CounterSection::default();
        }
        let hull = hulls(&state.series);
        let mut by_key: BTreeMap<(&'static str, String, u32), Vec<&Part>> = BTreeMap::new();
        for p in state.parts.iter().filter(|p| meets(&hull, p.key, (p.first, p.last))) {
            let name = match &p.name {
                PartName::Id(id) => t.names.get(*id).to_string(),
                PartName::Text(text) => text.clone(),
            };
            by_key.entry((p.over, name, p.key.1)).or_default().push(p);
        }
        let groups: Vec<Group<&Part>> = by_key
            .into_iter()
            .map(|((over, name, device), parts)| {
                let total = parts.iter().fold(0u64, |t, p| t.saturating_add(p.total));
                Group { over, name, device, parts, total }
            })
            .collect();
        let series = &state.series;
        let rows_of = |g: &Group<&Part>, limit: usize| {
            let parts = g.parts.iter().map(|p| {
                let placed = series[&p.key].iter().zip(&p.sums).filter_map(|((id, window, s), sums)| {
                    Some((*id, *window, s.place(&sums.integrals, sums.met.length(s))?))
                });
                (p.total, placed)
            });
            merge_rows(t, g, parts, limit)
        };
        cut(groups, top, max_rows, series, rows_of)
    }

    /// Whether the section was given up: more (name, series) pairs than [`SUMS_KEPT`].
    pub(crate) fn gave_up(&self) -> bool {
        self.state.as_ref().is_some_and(|s| s.gave_up.is_some())
    }

    /// What the report should say about how it was streamed: more averages than a stream keeps, or executions
    /// that met windows already settled.
    pub(crate) fn warning(&self) -> Option<String> {
        let state = self.state.as_ref()?;
        if let Some(parts) = state.gave_up {
            let series: usize = state.series.values().map(Vec::len).sum();
            return Some(format!(
                "counters: {series} series over {parts} or more (name, GPU, file) pairs are more averages than a \
                 stream keeps ({SUMS_KEPT}): not computed (--no-stream ranks the names first and computes the \
                 averages it shows)"
            ));
        }
        let late: u64 = state.parts.iter().flat_map(|p| p.sums.iter()).map(|s| s.met.late).sum();
        (late > 0).then(|| {
            format!(
                "counters: {late} kernels or copies started before the time their chunks claim (a damaged file): \
                 their own shares may leave out windows (--no-stream places them all)"
            )
        })
    }
}

/// The windows of `s` meeting the merged execution intervals `merged` (in time order) added to `met`: runs of
/// consecutive intervals joined first, as their window runs are in order too.
fn add_met(met: &mut MetWindows, s: &Series, merged: &[(u64, u64)]) {
    let mut run: Option<(usize, usize)> = None;
    for &(a, b) in merged {
        let Some((from, to)) = s.windows_meeting(a, b) else { return };
        if to <= from {
            continue;
        }
        run = match run {
            Some((f, e)) if from <= e => Some((f, e.max(to))),
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

    /// Rates read every 10 ns from 0 to 100, each over the 10 ns before it: window i is [10 i, 10 i + 10].
    fn tiling() -> Series {
        let points: Vec<(u64, f64)> = (0..=10u64).map(|i| (i * 10, 1.0)).collect();
        Series::new(&points, Window::SincePrevious)
    }

    #[test]
    fn met_windows_are_counted_once_in_any_order() {
        let s = tiling();
        let mut met = MetWindows::default();
        met.add(5, 7);
        met.add(1, 2);
        met.add(2, 3);
        met.add(6, 9);
        // {1, 2} and {5, 6, 7, 8}: 6 windows of 10 ns.
        assert_eq!(met.runs.len(), 2);
        assert_eq!(met.length(&s), 60);
        met.add(0, 9);
        assert_eq!((met.runs.len(), met.length(&s)), (1, 90));
    }

    #[test]
    fn settled_runs_are_summed_and_a_late_one_is_counted() {
        let s = tiling();
        let mut met = MetWindows::default();
        met.add(0, 2);
        met.add(4, 6);
        met.settle(3, &s);
        // [0, 2) settled; [4, 6) is not, past index 3.
        assert_eq!((met.settled, met.runs.len(), met.length(&s)), (20, 1, 40));
        // A run from before the settled edge: only its part from index 3 is added, and it is counted late.
        met.add(1, 5);
        assert_eq!((met.late, met.length(&s)), (1, 50));
    }

    #[test]
    fn merged_intervals_meet_runs_of_windows() {
        let s = tiling();
        let mut met = MetWindows::default();
        // [12, 18] meets window 1, [25, 35] windows 2 and 3 (joined into one run), an instant at 70 none (it is
        // the edge of windows 6 and 7, inside neither), an instant at 71 window 7.
        add_met(&mut met, &s, &[(12, 18), (25, 35), (70, 70), (71, 71)]);
        assert_eq!(met.runs.iter().map(|(&a, &b)| (a, b)).collect::<Vec<_>>(), [(1, 4), (7, 8)]);
    }
}
