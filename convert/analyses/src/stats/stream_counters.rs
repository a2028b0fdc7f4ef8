//! `stats --stream`'s counters section: the loaded report's ([`super::counters`]) from the stream's batches, the
//! series too ([`StreamOptions::counter_feed`](cutr_model::stream::StreamOptions::counter_feed): a chunk of samples
//! at a time, each series placed as its samples come, [`LiveSeries`]). What an average needs adds up over
//! executions ([`Integrals`]): each window's executions of a (name, device, file) are integrated against each series
//! of that device once the series is final over them ([`LiveSeries::ready`]; until then they wait), and only the
//! sums are kept. A series keeps its samples back to the oldest execution still waiting and the stream's edge
//! ([`Batch::next_start`]: no later kernel starts before it). An NVTX range arrives when it closes and can have
//! begun at any earlier time: where it began is told when it begins ([`Batch::range_starts`]), and before a series
//! drops the samples there it notes its running integrals at that time ([`Prefix`]), one per range still open. The
//! one figure that is not a sum is a windowed series' own share ([`super::counter_met`]).
//!
//! State is per (name, device, file) and series, the rows of the report before `--top` and
//! [`super::counters::MAX_ROWS`] cut it, at most [`SUMS_KEPT`] of them (past it the section is not computed, and
//! the report says so), plus the executions waiting (at most `max_waiting`, the oldest integrated early past it,
//! counted) and the open ranges' prefixes. Rows, groups, order, covered and total times and windows are the loaded
//! report's exactly; averages and own shares are the same sums added in another order (window by window, not
//! execution by execution or sample by sample; a range's integral as the difference of two running integrals):
//! equal within a relative 1e-12, not bit for bit.

use std::collections::{BTreeMap, HashMap};

use cutr_model::stream::Batch;
use cutr_model::{NameId, ProcId, Trace, describe};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::counter_live::{LiveSeries, Prefix};
use super::counter_math::Runs;
use super::counter_met::{MetWindows, add_met};
use super::counter_windows::{Integrals, Window, window_of};
use super::counters::{CounterSection, Group, cut, meets, merge_rows};

/// The section summed window by window.
pub(crate) struct StreamedCounters {
    /// Made at the first window (the series are known from the stream's open).
    state: Option<State>,
    /// The most executions waiting for their series ([`cutr_model::stream::StreamOptions::max_waiting`]).
    max_waiting: usize,
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

/// The series of one (file, device), by name, with how each places its readings.
type SeriesList = Vec<(NameId, Window, LiveSeries)>;

/// An execution waiting for its series to be final over it.
#[derive(Clone, Copy)]
struct Waiting {
    part: usize,
    start: u64,
    end: u64,
}

/// The most (part, series) sums a stream keeps (~100 bytes each): a real recording's are tens of thousands (8 GPUs
/// x 300 names x 40 series is 96,000). A hostile one (20,000 metrics over every name) would cost gigabytes where a
/// load ranks the names first and computes only the rows it shows: past this the section is not computed.
pub(crate) const SUMS_KEPT: usize = 1 << 19;

/// What the section keeps between windows.
struct State {
    series: FxHashMap<(ProcId, u32), SeriesList>,
    /// (file, device, series) -> its place in its list.
    position: FxHashMap<(ProcId, u32, NameId), usize>,
    /// (part, series) sums kept; a part that would take them past [`SUMS_KEPT`] drops them all, and `gave_up` says
    /// how many parts there were with it.
    sums: usize,
    gave_up: Option<usize>,
    /// Per file: its devices with series, in order (a range is averaged against each).
    devices: FxHashMap<ProcId, Vec<u32>>,
    parts: Vec<Part>,
    by_name: HashMap<(&'static str, PartName, u32, ProcId), usize>,
    by_raw: FxHashMap<(RawKind, u32, ProcId), usize>,
    waiting: Vec<Waiting>,
    /// Per (file, device with series): the starts of the NVTX ranges begun and not yet integrated, how many at each.
    open_starts: FxHashMap<(ProcId, u32), BTreeMap<u64, u32>>,
    /// The running integrals at such a start, per series of the device, noted before the series dropped it.
    prefixes: FxHashMap<(ProcId, u32, u64), Vec<Option<Prefix>>>,
    /// Executions integrated before their series were final over them (more waiting than a stream keeps), kernels
    /// and copies that started before what their series still hold, and ranges whose start a series dropped
    /// before it was noted (a damaged file: rows earlier than their chunks claim).
    early: u64,
    late: u64,
    ranges_without_start: u64,
}

impl State {
    fn new(t: &Trace) -> State {
        let mut series: FxHashMap<(ProcId, u32), SeriesList> = FxHashMap::default();
        for info in t.counter_series.iter().filter(|s| !t.names.get(s.series).starts_with("PC samples/ms:")) {
            let gpu =
                t.processes.get(info.proc.index()).and_then(|p| p.meta.devices.iter().find(|d| d.id == info.device));
            let window = window_of(t.names.get(info.series), gpu);
            series.entry((info.proc, info.device)).or_default().push((
                info.series,
                window,
                LiveSeries::new(window, info),
            ));
        }
        let mut position = FxHashMap::default();
        let mut devices: FxHashMap<ProcId, Vec<u32>> = FxHashMap::default();
        for (&(proc, device), list) in &mut series {
            list.sort_unstable_by(|a, b| t.names.get(a.0).cmp(t.names.get(b.0)));
            position.extend(list.iter().enumerate().map(|(i, s)| ((proc, device, s.0), i)));
            devices.entry(proc).or_default().push(device);
        }
        devices.values_mut().for_each(|d| d.sort_unstable());
        State {
            series,
            position,
            sums: 0,
            gave_up: None,
            devices,
            parts: Vec::new(),
            by_name: HashMap::new(),
            by_raw: FxHashMap::default(),
            waiting: Vec::new(),
            open_starts: FxHashMap::default(),
            prefixes: FxHashMap::default(),
            early: 0,
            late: 0,
            ranges_without_start: 0,
        }
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

    /// A window's samples given to their series, and the series' steps placed as far as they are final.
    fn take_samples(&mut self, b: &Batch) {
        for s in &b.counters {
            if let Some(&i) = self.position.get(&(s.proc, s.device, s.series))
                && let Some(list) = self.series.get_mut(&(s.proc, s.device))
            {
                list[i].2.take(s.ts, s.value);
            }
        }
        let complete = b.counters_complete_before;
        self.series.par_iter_mut().for_each(|(_, list)| list.iter_mut().for_each(|s| s.2.advance(complete)));
    }

    /// A window's kernels, copies, memsets and closed ranges to wait for their series, each part's time summed;
    /// the ranges begun noted. `None` when their parts' sums would pass [`SUMS_KEPT`].
    fn arrive(&mut self, t: &Trace, b: &Batch) -> Option<()> {
        for &(proc, start) in &b.range_starts {
            for &device in self.devices.get(&proc).into_iter().flatten() {
                *self.open_starts.entry((proc, device)).or_default().entry(start).or_default() += 1;
            }
        }
        let ops = b.kernels.iter().map(|k| (RawKind::Kernel(k.name), k.proc, k.device, k.start, k.end));
        let copies = b
            .memcpys
            .iter()
            .map(|m| (RawKind::Memcpy(m.copy_kind, m.src_kind, m.dst_kind), m.proc, m.device, m.start, m.end));
        let sets = b.memsets.iter().map(|m| (RawKind::Memset(m.memory_kind), m.proc, m.device, m.start, m.end));
        for (raw, proc, device, start, end) in ops.chain(copies).chain(sets) {
            if self.series.contains_key(&(proc, device)) {
                let part = self.part(t, raw, (proc, device))?;
                self.wait(part, start, end);
            }
        }
        for r in b.ranges.iter().filter(|r| r.closed()) {
            let Some(devices) = self.devices.get(&r.proc).cloned() else { continue };
            for device in devices {
                let part = self.part(t, RawKind::Range(r.name), (r.proc, device))?;
                self.wait(part, r.start, r.end);
            }
        }
        Some(())
    }

    fn wait(&mut self, part: usize, start: u64, end: u64) {
        let p = &mut self.parts[part];
        let end = end.max(start);
        p.first = p.first.min(start);
        p.last = p.last.max(end);
        p.total = p.total.saturating_add(end - start);
        self.waiting.push(Waiting { part, start, end });
    }

    /// The executions their series are final over integrated (and, past `max_waiting` waiting, the oldest ones
    /// anyway, counted), by part, in parallel.
    fn integrate_ready(&mut self, max_waiting: usize) {
        let ready: FxHashMap<(ProcId, u32), u64> = self
            .series
            .iter()
            .map(|(k, list)| (*k, list.iter().map(|s| s.2.ready()).min().unwrap_or(u64::MAX)))
            .collect();
        let parts = &self.parts;
        let (mut now, mut still): (Vec<Waiting>, Vec<Waiting>) =
            self.waiting.drain(..).partition(|w| w.end <= ready[&parts[w.part].key]);
        if still.len() > max_waiting {
            still.sort_unstable_by_key(|w| w.start);
            let over = still.len() - max_waiting;
            self.early += over as u64;
            now.extend(still.drain(..over));
        }
        self.waiting = still;
        let mut by_part: FxHashMap<usize, Vec<(u64, u64)>> = FxHashMap::default();
        for w in now {
            by_part.entry(w.part).or_default().push((w.start, w.end));
        }
        let (series, prefixes) = (&self.series, &self.prefixes);
        let touched: Vec<(&mut Part, Vec<(u64, u64)>)> =
            self.parts.iter_mut().enumerate().filter_map(|(i, p)| Some((p, by_part.remove(&i)?))).collect();
        let done: Vec<Integrated> = touched
            .into_par_iter()
            .map(|(part, intervals)| {
                let list = &series[&part.key];
                match part.over {
                    "nvtx" => integrate_ranges(part, list, prefixes, intervals),
                    _ => integrate_ops(part, list, intervals),
                }
            })
            .collect();
        for d in done {
            self.late += d.late;
            self.ranges_without_start += d.without_start;
            for start in d.range_starts {
                self.range_done(d.key, start);
            }
        }
    }

    /// A range begun at `start` on `key` integrated: its start no longer open (nor noted, once none is).
    fn range_done(&mut self, key: (ProcId, u32), start: u64) {
        let Some(opens) = self.open_starts.get_mut(&key) else { return };
        if let Some(n) = opens.get_mut(&start) {
            *n -= 1;
            if *n == 0 {
                opens.remove(&start);
                self.prefixes.remove(&(key.0, key.1, start));
            }
        }
    }

    /// Each series keeps its samples back to the oldest kernel or copy still waiting on its device and the
    /// stream's edge `next_start` (none: the last window), noting its running integrals at the open ranges' starts
    /// it drops; the windows met that no later execution can meet are settled.
    fn keep_back(&mut self, next_start: Option<u64>) {
        let Some(edge) = next_start else { return };
        let mut oldest: FxHashMap<(ProcId, u32), u64> = FxHashMap::default();
        for w in self.waiting.iter().filter(|w| self.parts[w.part].over != "nvtx") {
            let e = oldest.entry(self.parts[w.part].key).or_insert(u64::MAX);
            *e = (*e).min(w.start);
        }
        let (prefixes, open_starts) = (&mut self.prefixes, &self.open_starts);
        for (key, list) in &mut self.series {
            let floor = edge.min(oldest.get(key).copied().unwrap_or(u64::MAX));
            let opens = open_starts.get(key);
            let n = list.len();
            for (i, (_, _, s)) in list.iter_mut().enumerate() {
                let to = floor.min(s.ready());
                if to <= s.kept_from() {
                    continue;
                }
                for &a in opens.into_iter().flat_map(|o| o.range(s.kept_from()..to)).map(|(a, _)| a) {
                    let noted = prefixes.entry((key.0, key.1, a)).or_insert_with(|| vec![None; n]);
                    noted[i].get_or_insert_with(|| s.prefix(a));
                }
                s.keep_from(to);
            }
        }
        self.settle(edge, &oldest);
    }

    /// The windows met that no later execution can meet settled: before the oldest waiting kernel or copy and the
    /// edge for kernels and copies, before the oldest open range's start for ranges.
    fn settle(&mut self, edge: u64, oldest: &FxHashMap<(ProcId, u32), u64>) {
        let (series, prefixes, open_starts) = (&self.series, &self.prefixes, &self.open_starts);
        self.parts.par_iter_mut().for_each(|part| {
            let list = &series[&part.key];
            let floor = match part.over {
                "nvtx" => open_starts.get(&part.key).and_then(|o| o.keys().next().copied()),
                _ => oldest.get(&part.key).copied(),
            };
            let floor = floor.unwrap_or(u64::MAX).min(edge);
            let noted = prefixes.get(&(part.key.0, part.key.1, floor));
            for (i, (sums, (_, _, s))) in part.sums.iter_mut().zip(list).enumerate() {
                let below = if floor >= s.kept_from() {
                    s.meeting(floor, floor).map(|m| m.0)
                } else {
                    noted.and_then(|n| n[i]).and_then(|p| s.meeting_since(&p, floor)).map(|m| m.0)
                };
                if let Some(below) = below {
                    sums.met.settle(below);
                }
            }
        });
    }
}

/// What integrating one part's executions found.
struct Integrated {
    key: (ProcId, u32),
    /// Kernels or copies that started before what their series still hold.
    late: u64,
    /// Ranges whose start's running integrals a series had dropped unnoted.
    without_start: u64,
    /// The ranges' starts (each range once).
    range_starts: Vec<u64>,
}

/// One part's kernels or copies integrated against its series: as one set of runs, as a load integrates them.
fn integrate_ops(part: &mut Part, list: &SeriesList, intervals: Vec<(u64, u64)>) -> Integrated {
    let kept_from = list.iter().map(|s| s.2.kept_from()).max().unwrap_or(0);
    let before = intervals.len();
    let intervals: Vec<(u64, u64)> = intervals.into_iter().filter(|iv| iv.0 >= kept_from).collect();
    let late = (before - intervals.len()) as u64;
    if !intervals.is_empty() {
        let runs = Runs::new(intervals);
        let merged = runs.merged();
        for (sums, (_, _, s)) in part.sums.iter_mut().zip(list) {
            sums.integrals.add(&s.integrate(&runs));
            add_met(&mut sums.met, s, &merged);
        }
    }
    Integrated { key: part.key, late, without_start: 0, range_starts: Vec::new() }
}

/// One part's closed ranges integrated against its series, each from its start's running integrals: the series'
/// own while it holds the start, else those noted when it dropped it.
fn integrate_ranges(
    part: &mut Part,
    list: &SeriesList,
    prefixes: &FxHashMap<(ProcId, u32, u64), Vec<Option<Prefix>>>,
    intervals: Vec<(u64, u64)>,
) -> Integrated {
    let (proc, device) = part.key;
    let mut without_start = 0;
    for &(a, b) in &intervals {
        let noted = prefixes.get(&(proc, device, a));
        let mut missing = false;
        for (i, (sums, (_, _, s))) in part.sums.iter_mut().zip(list).enumerate() {
            let prefix = if a >= s.kept_from() { Some(s.prefix(a)) } else { noted.and_then(|n| n[i]) };
            let Some(prefix) = prefix else {
                missing = true;
                continue;
            };
            sums.integrals.add(&s.between(&prefix, b));
            if let Some((from, to)) = s.meeting_since(&prefix, b) {
                sums.met.add(from, to);
            }
        }
        without_start += u64::from(missing);
    }
    Integrated { key: part.key, late: 0, without_start, range_starts: intervals.iter().map(|iv| iv.0).collect() }
}

impl StreamedCounters {
    /// A fold that keeps at most `max_waiting` executions waiting for their series.
    pub(crate) fn new(max_waiting: usize) -> StreamedCounters {
        StreamedCounters { state: None, max_waiting }
    }

    /// A window's counter samples placed, and its kernels, copies, memsets and closed ranges integrated against
    /// their devices' series as those are final over them.
    pub(crate) fn add(&mut self, t: &Trace, b: &Batch) {
        let state = self.state.get_or_insert_with(|| State::new(t));
        if state.series.is_empty() || state.gave_up.is_some() {
            return;
        }
        state.take_samples(b);
        if state.arrive(t, b).is_none() {
            state.gave_up = Some(state.parts.len() + 1);
            (state.parts, state.by_name, state.by_raw, state.waiting) = Default::default();
            return;
        }
        state.integrate_ready(self.max_waiting.max(1));
        state.keep_back(b.next_start);
    }

    /// The section, as [`super::counters::section`] makes it of the loaded trace, at most `max_rows` rows (`t`: the
    /// stream's trace, for names).
    pub(crate) fn section(self, t: &Trace, top: Option<usize>, max_rows: usize) -> CounterSection {
        let state = self.state.unwrap_or_else(|| State::new(t));
        if state.series.is_empty() || state.gave_up.is_some() {
            return CounterSection::default();
        }
        let hull: HashMap<(ProcId, u32), (u64, u64)> = state
            .series
            .iter()
            .map(|(k, list)| {
                let spans = list.iter().filter_map(|(_, _, s)| s.span());
                (*k, spans.fold((u64::MAX, 0), |h, (a, b)| (h.0.min(a), h.1.max(b))))
            })
            .collect();
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
                    Some((*id, *window, s.place(&sums.integrals, sums.met.length())?))
                });
                (p.total, placed)
            });
            merge_rows(t, g, parts, limit)
        };
        let count = series.values().map(Vec::len).sum();
        cut(groups, top, max_rows, count, rows_of)
    }

    /// The steps and windows the series hold now, and the executions waiting.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        self.state.as_ref().map_or((0, 0), |s| (s.series.values().flatten().map(|x| x.2.held()).sum(), s.waiting.len()))
    }

    /// Whether the section was given up: more (name, series) pairs than [`SUMS_KEPT`].
    pub(crate) fn gave_up(&self) -> bool {
        self.state.as_ref().is_some_and(|s| s.gave_up.is_some())
    }

    /// What the report should say about how it was streamed: more averages than a stream keeps, or what a damaged
    /// file's order (rows or samples earlier than their chunks claim) or more waiting than a stream keeps left
    /// out of the loaded figures.
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
        let met_late: u64 = state.parts.iter().flat_map(|p| p.sums.iter()).map(|s| s.met.late).sum();
        let samples_late: u64 = state.series.values().flatten().map(|s| s.2.late).sum();
        let said = [
            (state.late, "kernels or copies started before the samples their series still held"),
            (met_late, "kernels, copies or ranges met windows already settled (their own shares may leave some out)"),
            (state.ranges_without_start, "NVTX ranges began before the samples their series still held"),
            (samples_late, "counter samples came after later ones of their series (left out)"),
            (
                state.early,
                "executions were averaged before their series' samples had all come (more waiting than a stream keeps)",
            ),
        ];
        let parts: Vec<String> = said.iter().filter(|s| s.0 > 0).map(|(n, what)| format!("{n} {what}")).collect();
        (!parts.is_empty())
            .then(|| format!("counters: {} (a damaged file's order; --no-stream places them all)", parts.join("; ")))
    }
}
