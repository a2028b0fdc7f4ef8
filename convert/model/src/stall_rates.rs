//! PC-sample stall rates drawn where the samples were taken. CUPTI hands a kernel's samples over late, at some
//! later drain, so a collection's time says little about when its samples were taken; the function each sample
//! names does. Per (file, device, function) every stall reason's samples, summed over all collections, are spread
//! over that function's executions on the device in proportion to their durations: while an execution runs the
//! reason's rate is samples / (the function's execution time) per ms. A series (`PC samples/ms: REASON`, one per
//! file, device and reason) is the sum over the executions running at each time, 0 where none runs; its integral
//! over time is the reason's samples.
//!
//! Samples of a function with no execution on its device (its kernel records lost, filtered out, evicted from a
//! ring) cannot be placed: they are counted ([`crate::JoinStats::pc_samples_unplaced`]) and drawn nowhere.

use std::collections::BTreeMap;

use cutr_format::{ChunkInfo, Problem, Reader};
use cutr_schema::kinds;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::counters::CounterSample;
use crate::decode::FileDecoder;
use crate::pc_reasons::name_samples;
use crate::{Filter, Kernel, NameId, Names, ProcId, Trace};

/// One file's PC samples summed per function, waiting for the kernels of the trace ([`draw`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct FileStalls {
    pub proc: ProcId,
    pub functions: Vec<SampledFunction>,
    /// Under a `--start/--end` window, where the trace holds only the executions in the window: each (device,
    /// recorded kernel name)'s execution time (ns) over the whole file, so that a rate does not depend on the
    /// window. `None`: the trace's executions are all of them.
    pub whole_file_time: Option<FxHashMap<(u32, NameId), u64>>,
    /// What naming the samples left out ([`crate::pc_reasons::ReasonCheck::warnings`]), for the file's warnings.
    pub warnings: Vec<String>,
}

/// The samples of one function on one device, over all collections of a file.
#[derive(Clone, Debug)]
pub(crate) struct SampledFunction {
    pub device: u32,
    /// The function's name as its kernel records carry it (mangled); `None` when no text of the trace has it.
    pub name: Option<NameId>,
    /// Samples per series (`PC samples/ms: REASON`), none of them 0.
    pub samples: Vec<(NameId, u64)>,
}

/// Whether a file holds PC samples (a `pc_samples` chunk).
pub(crate) fn has_pc_samples(r: &Reader) -> bool {
    r.chunks().iter().any(|c| c.chunk_type() == cutr_format::ChunkType::PcSamples)
}

/// The PC samples of one file summed per (device, function) and stall reason, named by
/// [`crate::pc_reasons::name_samples`] (the `*_not_issued` twins and the samples no table names left out, the
/// latter warned about). Returns the sums and the chunks that could not be decoded.
pub(crate) fn read_samples(reader: &Reader, proc: ProcId, names: &mut Names) -> (FileStalls, Vec<Problem>) {
    let (collections, problems) = reader.pc_samples();
    let mut series: FxHashMap<&str, NameId> = FxHashMap::default();
    let mut per_function: BTreeMap<(u32, &str), BTreeMap<NameId, u64>> = BTreeMap::new();
    let check = name_samples(&collections, |c, pc, reason, n| {
        let id = *series.entry(reason).or_insert_with(|| names.intern(&format!("PC samples/ms: {reason}")));
        let per_reason = per_function.entry((c.device, pc.function_name.as_str())).or_default();
        let sum = per_reason.entry(id).or_default();
        *sum = sum.saturating_add(n);
    });
    let functions = per_function
        .into_iter()
        .map(|((device, function), samples)| SampledFunction {
            device,
            name: names.lookup(function),
            samples: samples.into_iter().collect(),
        })
        .collect();
    (FileStalls { proc, functions, whole_file_time: None, warnings: check.warnings() }, problems)
}

/// Each (device, kernel name)'s execution time (ns) over every activity chunk of a file, whatever the window of
/// `decoder`: with `--start/--end` the trace holds only the executions in the window, and the rate of a function
/// that also ran outside it would otherwise be too high. `text_names` maps the file's text ids to the trace's.
/// Chunks that fail to decode add nothing: in the window they are already counted as damaged, and outside it the
/// load does not read them.
pub(crate) fn whole_file_time(decoder: &FileDecoder<'_>, text_names: &[NameId]) -> FxHashMap<(u32, NameId), u64> {
    let only_kernels = Filter { kinds: vec![kinds::CONCURRENT_KERNEL, kinds::KERNEL], ..Default::default() };
    let all = FileDecoder { filter: &only_kernels, recorder: decoder.recorder.clone(), ..*decoder };
    let reader = decoder.reader;
    let chunks: Vec<&ChunkInfo> = reader.activity_chunks().collect();
    chunks
        .par_iter()
        .map(|c| {
            let mut time: FxHashMap<(u32, NameId), u64> = FxHashMap::default();
            let Ok(d) = reader.decode_activity(c) else { return time };
            // Decoded into owned rows below: a stream's first pass over a large file keeps none of its pages.
            reader.release_pages(c);
            if reader.check_strides(&d).is_err() {
                return time;
            }
            for k in all.chunk(c, &d).kernels {
                let name = text_names.get(k.name.index()).copied().unwrap_or(NameId::EMPTY);
                *time.entry((k.device, name)).or_default() += k.end - k.start;
            }
            time
        })
        .reduce(FxHashMap::default, |mut a, b| {
            for (k, v) in b {
                *a.entry(k).or_default() += v;
            }
            a
        })
}

/// Adds the stall-rate series of `files` to the trace's counters (each file's before its other series, as the
/// viewers make their tracks in that order) and counts the samples that could not be placed. Call once the
/// kernels are loaded.
pub(crate) fn draw(trace: &mut Trace, mut files: Vec<FileStalls>, filter: &Filter) {
    for f in &mut files {
        if let Some(p) = trace.processes.get_mut(f.proc.index()) {
            p.warnings.append(&mut f.warnings);
        }
    }
    if files.iter().all(|f| f.functions.is_empty()) {
        return;
    }
    let placed = place(&trace.kernels, &files, filter, &trace.names);
    for (proc, n) in placed.unplaced {
        trace.stats.pc_samples_unplaced += n;
        if let Some(p) = trace.processes.get_mut(proc.index()) {
            p.stats.pc_samples_unplaced += n;
        }
    }
    let mut counters = placed.samples;
    counters.append(&mut trace.counters);
    // Stable: within a file, the stall rates first and every series' points in their order.
    counters.sort_by_key(|c| c.proc);
    trace.counters = counters;
}

/// The points of every stall-rate series, and the samples of each file that could not be placed.
#[derive(Debug)]
pub(crate) struct Placed {
    pub samples: Vec<CounterSample>,
    pub unplaced: Vec<(ProcId, u64)>,
}

/// An execution of a sampled function: (index into the functions, start, end).
type Execution = (u32, u64, u64);

/// A sampled function of one file on one device, with its execution time over the whole file.
pub(crate) struct Function {
    pub proc: ProcId,
    pub device: u32,
    samples: Vec<(NameId, u64)>,
    pub time_ns: u64,
    /// Whether the trace holds all its executions, so that `time_ns` is their sum (else the whole file's, given).
    time_from_trace: bool,
}

impl Function {
    /// `more` samples per series added to the function's (both in series id order, as read).
    fn add_samples(&mut self, more: &[(NameId, u64)]) {
        for &(id, n) in more {
            match self.samples.binary_search_by_key(&id, |s| s.0) {
                Ok(at) => self.samples[at].1 = self.samples[at].1.saturating_add(n),
                Err(at) => self.samples.insert(at, (id, n)),
            }
        }
    }

    /// Each series' rate (samples per ms) while one of its executions runs; none before its time is known.
    pub fn rates(&self) -> impl Iterator<Item = (NameId, f64)> + '_ {
        let ms = self.time_ns as f64 / 1e6;
        self.samples.iter().map(move |&(id, n)| (id, n as f64 / ms))
    }
}

/// The sampled functions of some files, indexed by (file, device, recorded kernel name): a load's ([`place`]) and
/// a stream's ([`crate::stall_stream`]), so that both number, time and leave out the same functions.
pub(crate) struct FunctionTable {
    pub functions: Vec<Function>,
    pub index: FxHashMap<(ProcId, u32, NameId), u32>,
    /// Per file: the samples of the functions no kernel name matches.
    unnamed: BTreeMap<ProcId, u64>,
}

impl FunctionTable {
    /// Every function of `files`, in their order. The parts of a split recording are one process: a function
    /// another part of it also sampled is one function, its samples summed over the parts (as its runs are). Under a
    /// window, a function's time is the sum of its process's files' whole-file times; else the time of the runs the
    /// trace holds, still to add ([`Self::add_time`]).
    pub fn new(files: &[FileStalls]) -> FunctionTable {
        let mut unnamed: BTreeMap<ProcId, u64> = files.iter().map(|f| (f.proc, 0)).collect();
        // Per process and (device, name), the time over its files' whole-file times (windowed processes only).
        let mut whole_time: BTreeMap<ProcId, FxHashMap<(u32, NameId), u64>> = BTreeMap::new();
        for file in files {
            if let Some(time) = &file.whole_file_time {
                let sum = whole_time.entry(file.proc).or_default();
                for (&key, &ns) in time {
                    *sum.entry(key).or_default() += ns;
                }
            }
        }
        let mut functions: Vec<Function> = Vec::new();
        let mut index: FxHashMap<(ProcId, u32, NameId), u32> = FxHashMap::default();
        for file in files {
            for f in &file.functions {
                let Some(name) = f.name else {
                    *unnamed.entry(file.proc).or_default() += f.samples.iter().map(|s| s.1).sum::<u64>();
                    continue;
                };
                if let Some(&i) = index.get(&(file.proc, f.device, name)) {
                    functions[i as usize].add_samples(&f.samples);
                    continue;
                }
                let whole = whole_time.get(&file.proc).map(|t| t.get(&(f.device, name)).copied().unwrap_or(0));
                index.insert((file.proc, f.device, name), functions.len() as u32);
                functions.push(Function {
                    proc: file.proc,
                    device: f.device,
                    samples: f.samples.clone(),
                    time_ns: whole.unwrap_or(0),
                    time_from_trace: whole.is_none(),
                });
            }
        }
        FunctionTable { functions, index, unnamed }
    }

    /// Adds `ns` of execution to function `i`, unless its time is the whole file's, given.
    pub fn add_time(&mut self, i: u32, ns: u64) {
        let f = &mut self.functions[i as usize];
        if f.time_from_trace {
            f.time_ns += ns;
        }
    }

    /// Per file, the samples that cannot be placed (those of functions without a name or without execution time),
    /// files with none left out. Call once every time is added.
    pub fn unplaced(&self) -> Vec<(ProcId, u64)> {
        let mut unplaced = self.unnamed.clone();
        for f in self.functions.iter().filter(|f| f.time_ns == 0) {
            *unplaced.entry(f.proc).or_default() += f.samples.iter().map(|s| s.1).sum::<u64>();
        }
        unplaced.into_iter().filter(|u| u.1 > 0).collect()
    }
}

/// The stall-rate series of `files` over `kernels` (sorted by start), drawn inside `filter`'s window only:
/// per (file, device) a sweep over its sampled functions' executions. Linear in the kernels and their samples
/// (plus the sort of each device's execution ends), in parallel over (file, device).
pub(crate) fn place(kernels: &[Kernel], files: &[FileStalls], filter: &Filter, names: &Names) -> Placed {
    let mut table = FunctionTable::new(files);
    // Each sampled function's executions, in start order.
    let executions: Vec<Execution> = kernels
        .par_iter()
        .filter_map(|k| table.index.get(&(k.proc, k.device, k.name)).map(|&i| (i, k.start, k.end)))
        .collect();
    for &(i, start, end) in &executions {
        table.add_time(i, end - start);
    }
    let functions = &table.functions;
    let mut per_device: BTreeMap<(ProcId, u32), Vec<Execution>> = BTreeMap::new();
    for &(i, start, end) in &executions {
        let f = &functions[i as usize];
        let (start, end) = (filter.start.map_or(start, |s| start.max(s)), filter.end.map_or(end, |e| end.min(e)));
        if end > start && f.time_ns > 0 {
            per_device.entry((f.proc, f.device)).or_default().push((i, start, end));
        }
    }
    let per_device: Vec<((ProcId, u32), Vec<Execution>)> = per_device.into_iter().collect();
    let samples: Vec<Vec<CounterSample>> =
        per_device.par_iter().map(|((proc, device), execs)| sweep(*proc, *device, execs, functions, names)).collect();
    Placed { samples: samples.into_iter().flatten().collect(), unplaced: table.unplaced() }
}

/// One (file, device)'s series from its executions `(function, start, end)`: a point wherever a series' value
/// changes, each series' points together in time order, the series in name order.
fn sweep(proc: ProcId, device: u32, execs: &[Execution], functions: &[Function], names: &Names) -> Vec<CounterSample> {
    // The device's series, in name order, and each function's rate (samples per ms) of each.
    let mut sampled: Vec<u32> = execs.iter().map(|e| e.0).collect();
    sampled.sort_unstable();
    sampled.dedup();
    let mut ids: Vec<NameId> =
        sampled.iter().flat_map(|&i| functions[i as usize].samples.iter().map(|s| s.0)).collect();
    ids.sort_unstable_by(|a, b| names.get(*a).cmp(names.get(*b)));
    ids.dedup();
    let slot: FxHashMap<NameId, usize> = ids.iter().enumerate().map(|(s, &id)| (id, s)).collect();
    let rates: FxHashMap<u32, Vec<(usize, f64)>> = sampled
        .iter()
        .map(|&i| (i, functions[i as usize].rates().map(|(id, rate)| (slot[&id], rate)).collect()))
        .collect();
    // Starts before ends at one time: an execution ending where the next begins makes no dip to 0.
    let mut events: Vec<(u64, bool, u32)> = execs.iter().flat_map(|&(i, s, e)| [(s, true, i), (e, false, i)]).collect();
    events.sort_unstable_by_key(|&(ts, starts, i)| (ts, !starts, i));
    let mut state = vec![SeriesState::default(); ids.len()];
    let mut points: Vec<Vec<(u64, f64)>> = vec![Vec::new(); ids.len()];
    // Only the series of the executions starting or ending at a time are looked at then: the work is the
    // executions' series, never every series of the device at every start and end.
    let mut touched: Vec<usize> = Vec::new();
    let mut at = 0;
    while at < events.len() {
        let ts = events[at].0;
        while at < events.len() && events[at].0 == ts {
            let (_, starts, i) = events[at];
            for &(s, rate) in &rates[&i] {
                if !state[s].touched {
                    touched.push(s);
                }
                state[s].apply(starts, rate);
            }
            at += 1;
        }
        for s in touched.drain(..) {
            if let Some(v) = state[s].take_change() {
                points[s].push((ts, v));
            }
        }
    }
    ids.iter()
        .zip(points)
        .flat_map(|(&series, p)| {
            p.into_iter().map(move |(ts, value)| CounterSample { proc, device, series, ts, value })
        })
        .collect()
}

/// One series during a sweep (a load's, or a stream's: [`crate::stall_stream`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SeriesState {
    /// The sum of the running executions' rates.
    value: f64,
    /// Executions running with samples of this series: at 0 the value is exactly 0, whatever the rounding of the
    /// sums on the way.
    running: u32,
    last: Option<f64>,
    touched: bool,
}

impl SeriesState {
    pub fn apply(&mut self, starts: bool, rate: f64) {
        if starts {
            self.value += rate;
            self.running += 1;
        } else {
            self.value -= rate;
            self.running = self.running.saturating_sub(1);
        }
        if self.running == 0 {
            self.value = 0.0;
        }
        self.touched = true;
    }

    /// Whether an execution started or ended since the last [`Self::take_change`].
    pub fn touched(&self) -> bool {
        self.touched
    }

    /// The value to draw now, if it changed since the last point (a series begins at its first non-zero value).
    pub fn take_change(&mut self) -> Option<f64> {
        if !std::mem::take(&mut self.touched) {
            return None;
        }
        let v = self.value;
        let changed = match self.last {
            None => v != 0.0,
            Some(last) => last != v,
        };
        changed.then(|| {
            self.last = Some(v);
            v
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A kernel execution of `name` on device 0 of file 0.
    fn run(name: NameId, start_ms: u64, end_ms: u64) -> Kernel {
        Kernel { name, start: start_ms * MS, end: end_ms * MS, ..Default::default() }
    }

    /// Each series' points as (name, ms, value).
    fn points(placed: &Placed, names: &Names) -> Vec<(String, f64, f64)> {
        let name = |c: &CounterSample| names.get(c.series).trim_start_matches("PC samples/ms: ").to_string();
        placed.samples.iter().map(|c| (name(c), c.ts as f64 / MS as f64, c.value)).collect()
    }

    /// Function `a` ran 2 ms then 1 ms with 30 long_scoreboard and 6 wait samples: 10 and 2 per ms in both runs.
    /// `b` ran 2 ms beside them with 4 long_scoreboard samples (2 per ms, added to `a`'s where they overlap).
    /// `c` (7 samples) never ran: counted, drawn nowhere.
    fn case() -> (Names, Vec<Kernel>, FileStalls) {
        let mut names = Names::default();
        let (a, b, c) = (names.intern("_Z1av"), names.intern("_Z1bv"), names.intern("_Z1cv"));
        let (ls, wait) = (names.intern("PC samples/ms: long_scoreboard"), names.intern("PC samples/ms: wait"));
        let kernels = vec![run(a, 1, 3), run(b, 2, 4), run(a, 5, 6)];
        let f = |name, samples| SampledFunction { device: 0, name: Some(name), samples };
        let functions = vec![f(a, vec![(ls, 30), (wait, 6)]), f(b, vec![(ls, 4)]), f(c, vec![(ls, 7)])];
        (names, kernels, FileStalls { proc: ProcId(0), functions, ..Default::default() })
    }

    #[test]
    fn samples_are_spread_over_their_functions_executions_by_duration() {
        let (names, kernels, file) = case();
        let placed = place(&kernels, &[file], &Filter::default(), &names);
        let want = [
            ("long_scoreboard", 1.0, 10.0),
            ("long_scoreboard", 2.0, 12.0),
            ("long_scoreboard", 3.0, 2.0),
            ("long_scoreboard", 4.0, 0.0),
            ("long_scoreboard", 5.0, 10.0),
            ("long_scoreboard", 6.0, 0.0),
            ("wait", 1.0, 2.0),
            ("wait", 3.0, 0.0),
            ("wait", 5.0, 2.0),
            ("wait", 6.0, 0.0),
        ];
        let want: Vec<(String, f64, f64)> = want.iter().map(|&(n, t, v)| (n.to_string(), t, v)).collect();
        assert_eq!(points(&placed, &names), want);
        assert_eq!(placed.unplaced, [(ProcId(0), 7)]);
    }

    /// Under a window the rates are those of the whole file (its execution times given), drawn inside the window.
    #[test]
    fn a_window_cuts_the_drawing_not_the_rates() {
        let (names, kernels, mut file) = case();
        let (a, b) = (names.lookup("_Z1av").unwrap(), names.lookup("_Z1bv").unwrap());
        file.whole_file_time = Some([((0, a), 3 * MS), ((0, b), 2 * MS)].into_iter().collect());
        let window = Filter { start: Some(2 * MS + MS / 2), end: Some(5 * MS + MS / 2), kinds: Vec::new() };
        // The load keeps the executions overlapping the window: all three.
        let placed = place(&kernels, &[file], &window, &names);
        let want = [
            ("long_scoreboard", 2.5, 12.0),
            ("long_scoreboard", 3.0, 2.0),
            ("long_scoreboard", 4.0, 0.0),
            ("long_scoreboard", 5.0, 10.0),
            ("long_scoreboard", 5.5, 0.0),
            ("wait", 2.5, 2.0),
            ("wait", 3.0, 0.0),
            ("wait", 5.0, 2.0),
            ("wait", 5.5, 0.0),
        ];
        let want: Vec<(String, f64, f64)> = want.iter().map(|&(n, t, v)| (n.to_string(), t, v)).collect();
        assert_eq!(points(&placed, &names), want);
    }

    /// Back to back executions make no dip to 0; samples whose function name no record has are unplaced too.
    #[test]
    fn back_to_back_runs_hold_the_rate_and_unknown_functions_are_counted() {
        let mut names = Names::default();
        let (a, ls) = (names.intern("_Z1av"), names.intern("PC samples/ms: long_scoreboard"));
        let kernels: Vec<Kernel> =
            [run(a, 1, 2), run(a, 2, 5)].into_iter().map(|k| Kernel { proc: ProcId(3), ..k }).collect();
        let functions = vec![
            SampledFunction { device: 0, name: Some(a), samples: vec![(ls, 8)] },
            SampledFunction { device: 0, name: None, samples: vec![(ls, 5)] },
        ];
        let file = FileStalls { proc: ProcId(3), functions, ..Default::default() };
        let placed = place(&kernels, &[file], &Filter::default(), &names);
        let got: Vec<(u64, f64)> = placed.samples.iter().map(|c| (c.ts / MS, c.value)).collect();
        assert_eq!(got, [(1, 2.0), (5, 0.0)]);
        assert!(placed.samples.iter().all(|c| c.proc == ProcId(3)));
        assert_eq!(placed.unplaced, [(ProcId(3), 5)]);
    }
}
