//! PC-sample stall rates drawn over a stream of the recordings ([`crate::stream`]) as a load draws them
//! ([`crate::stall_rates`]): the same series, points and values, in the same order.
//!
//! A rate is a function's samples over its execution time on the file's device, so that time is needed before
//! any point. [`StallStream::read`] sums every file's samples per function (its `pc_samples` chunks, read whole as
//! a load reads them) and, only where there are some, each (file, device, kernel name)'s execution time in a pass
//! of its own over the activity chunks, decoding the kernel records alone (`stall_rates::whole_file_time`,
//! the one a windowed load uses). The stream's kernel runs of sampled functions then become starts and ends of
//! their rates ([`StallStream::window`]), swept per (file, device) in a load's order once the stream has passed
//! their time ([`crate::stream::Batch::next_start`]): only the starts and ends ahead of the stream's edge wait.
//! Past `max_waiting` of them (chunk headers claiming earlier times than their rows keep the edge back) the oldest
//! are swept anyway and counted, and a run that then starts at or before a time already swept is drawn from just
//! after it, counted too ([`StallEnd`]). The points are the answer: kept until [`StallStream::finish`] puts them
//! into the trace's counters where a load puts them.

use std::collections::BTreeMap;

use cutr_format::{Problem, Reader};
use cutr_schema::kinds;
use rustc_hash::FxHashMap;

use crate::counters::CounterSample;
use crate::decode::FileDecoder;
use crate::fields::FileFields;
use crate::load::count_damage;
use crate::pc_reasons::name_samples;
use crate::recorder_threads::RecorderThreads;
use crate::stall_rates::{FileStalls, FunctionTable, SampledFunction, SeriesState, has_pc_samples, whole_file_time};
use crate::timebase::{ClockCheck, TimeBase};
use crate::timing::timed;
use crate::{Filter, JoinStats, Kernel, NameId, Names, ProcId, Trace};

/// The stall-rate series of a stream, folded window by window.
pub struct StallStream {
    filter: Filter,
    /// Whether the filter keeps kernel records (else no function has a run, as in a load).
    kernels_kept: bool,
    max_waiting: usize,
    /// Every input's samples, in the order a load reads the inputs.
    files: Vec<FileSamples>,
    /// The series' names (`PC samples/ms: REASON`); a series is its index here until [`Self::finish`].
    series: Vec<String>,
    /// The functions and their rates, once the stream's names are known (its first window).
    sampled: Option<Sampled>,
    devices: BTreeMap<(ProcId, u32), DeviceSweep>,
    /// Starts and ends not swept yet, over every device.
    waiting: usize,
    points: Vec<CounterSample>,
    end: StallEnd,
}

/// What the sweep could not draw as a load does: both 0 unless the stream's edge was held back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StallEnd {
    /// Starts and ends swept before the stream had passed their time, as more than `max_waiting` waited.
    pub swept_early: u64,
    /// Kernel runs that started at or before a time already swept: drawn from just after it (or not at all, when
    /// they also ended by then).
    pub runs_late: u64,
}

impl StallEnd {
    /// One sentence per difference from a load's series, for a streamed export's warnings.
    pub fn warnings(&self, max_waiting: usize) -> Vec<String> {
        let mut out = Vec::new();
        if self.swept_early > 0 {
            out.push(format!(
                "{} starts and ends of sampled kernels' runs were swept into the PC samples' stall rates before the \
                 stream passed their time, as more than {max_waiting} waited (chunk headers claiming earlier times \
                 than their rows: a damaged or forged file)",
                self.swept_early
            ));
        }
        if self.runs_late > 0 {
            out.push(format!(
                "{} sampled kernels' runs started before the stall rates were already drawn up to: drawn from there \
                 on, the counters table's `PC samples/ms` series differ from --no-stream's there",
                self.runs_late
            ));
        }
        out
    }
}

/// A function's samples on one device: (device, its recorded name, samples per series).
type FunctionSamples = (u32, String, Vec<(u32, u64)>);

/// One file's PC samples summed per function, names as text until the stream's names are known.
struct FileSamples {
    proc: ProcId,
    /// In a load's order: by device, then name.
    functions: Vec<FunctionSamples>,
    /// Each (device, kernel name)'s execution time (ns) over the whole file; only where its process has samples
    /// (and the filter keeps kernels).
    kernel_time: FxHashMap<(u32, String), u64>,
    /// What naming the samples left out, and the `pc_samples` chunks that failed, for the file's process.
    warnings: Vec<String>,
    problems: Vec<Problem>,
}

/// The sampled functions, numbered and timed as a load's, with each one's rate of each series.
struct Sampled {
    table: FunctionTable,
    /// Per function: (series, samples per ms); none for a function with no execution time.
    rates: Vec<Vec<(u32, f64)>>,
}

impl StallStream {
    /// The samples of `readers` (the inputs of a stream, in their order) and their functions' execution times,
    /// for a stream with `filter`; `None` when no input holds PC samples.
    pub fn read(readers: &[Reader], filter: &Filter, max_waiting: usize) -> Option<StallStream> {
        if !readers.iter().any(has_pc_samples) {
            return None;
        }
        let grouping = crate::runs::group(readers);
        let mut series = Vec::new();
        let mut files: Vec<(usize, FileSamples)> = timed("PC samples", || {
            let mut ids = FxHashMap::default();
            grouping.order.iter().map(|&(i, proc)| (i, read_file(&readers[i], proc, &mut series, &mut ids))).collect()
        });
        let kernels_kept = filter.wants_kind(kinds::CONCURRENT_KERNEL) || filter.wants_kind(kinds::KERNEL);
        let sampled_procs: Vec<ProcId> =
            files.iter().filter(|(_, f)| !f.functions.is_empty()).map(|(_, f)| f.proc).collect();
        // A split recording's later parts are on its first part's time base, as a load reads them.
        let mut first_time: FxHashMap<ProcId, TimeBase> = FxHashMap::default();
        timed("PC samples: kernel time", || {
            for (i, f) in &mut files {
                let r = &readers[*i];
                let time = *first_time.entry(f.proc).or_insert_with(|| ClockCheck::of_reader(r).time);
                // Every part of a sampled process: a function's time is over its runs in all of them.
                if kernels_kept && sampled_procs.contains(&f.proc) {
                    f.kernel_time = kernel_time(r, f.proc, time, filter);
                }
            }
        });
        let files = files.into_iter().map(|(_, f)| f).collect();
        Some(StallStream::of_samples(filter.clone(), kernels_kept, max_waiting, files, series))
    }

    /// A fold over the samples `files` (series named by `series`), before its first window.
    fn of_samples(
        filter: Filter,
        kernels_kept: bool,
        max_waiting: usize,
        files: Vec<FileSamples>,
        series: Vec<String>,
    ) -> StallStream {
        StallStream {
            filter,
            kernels_kept,
            max_waiting,
            files,
            series,
            sampled: None,
            devices: BTreeMap::new(),
            waiting: 0,
            points: Vec::new(),
            end: StallEnd::default(),
        }
    }

    /// A window's kernels (named by `names`, the stream's), then every start and end before `next_start` swept
    /// (all of them at the last window: `None`).
    pub fn window(&mut self, names: &Names, kernels: &[Kernel], next_start: Option<u64>) {
        if self.sampled.is_none() {
            self.sampled = Some(self.resolve(names));
        }
        let Some(sampled) = &self.sampled else { return };
        let series = self.series.len();
        for k in kernels {
            let Some(&i) = sampled.table.index.get(&(k.proc, k.device, k.name)) else { continue };
            if sampled.table.functions[i as usize].time_ns == 0 {
                continue;
            }
            let f = &self.filter;
            let (mut start, end) = (f.start.map_or(k.start, |s| k.start.max(s)), f.end.map_or(k.end, |e| k.end.min(e)));
            if end <= start {
                continue;
            }
            let device = self.devices.entry((k.proc, k.device)).or_insert_with(|| DeviceSweep::new(series));
            if let Some(swept) = device.swept.filter(|&s| start <= s) {
                self.end.runs_late += 1;
                start = swept.saturating_add(1);
                if end <= start {
                    continue;
                }
            }
            device.wait(start, false, i);
            device.wait(end, true, i);
            self.waiting += 2;
        }
        for (&key, device) in &mut self.devices {
            while device.next_time().is_some_and(|ts| next_start.is_none_or(|edge| ts < edge)) {
                self.waiting -= device.sweep_next(key, &sampled.rates, &mut self.points);
            }
        }
        // The oldest swept first, whichever device it is on.
        while self.waiting > self.max_waiting {
            let oldest = self.devices.iter_mut().filter_map(|(k, d)| Some((d.next_time()?, *k, d))).min_by_key(|o| o.0);
            let Some((_, key, device)) = oldest else { break };
            let n = device.sweep_next(key, &sampled.rates, &mut self.points);
            self.waiting -= n;
            self.end.swept_early += n as u64;
        }
    }

    /// The functions of every file named by the stream's `names` and timed as a load times them.
    fn resolve(&self, names: &Names) -> Sampled {
        let windowed = self.filter.has_window();
        let named_time = |time: &FxHashMap<(u32, String), u64>| {
            time.iter().filter_map(|((device, name), &ns)| Some(((*device, names.lookup(name)?), ns))).collect()
        };
        let sampled = |proc: ProcId| self.files.iter().any(|f| f.proc == proc && !f.functions.is_empty());
        let files: Vec<FileStalls> = self
            .files
            .iter()
            .map(|f| FileStalls {
                proc: f.proc,
                functions: f
                    .functions
                    .iter()
                    .map(|(device, name, samples)| SampledFunction {
                        device: *device,
                        name: names.lookup(name),
                        samples: samples.iter().map(|&(s, n)| (NameId(s), n)).collect(),
                    })
                    .collect(),
                // A windowed load gives each file of a sampled process its own kernels' time, where it keeps
                // kernels.
                whole_file_time: (windowed && self.kernels_kept && sampled(f.proc)).then(|| named_time(&f.kernel_time)),
                warnings: Vec::new(),
            })
            .collect();
        let mut table = FunctionTable::new(&files);
        if !windowed {
            // Without a window the trace holds every run: a function's time is that of its process's runs.
            for f in &self.files {
                for ((device, name), &ns) in &f.kernel_time {
                    let i = names.lookup(name).and_then(|id| table.index.get(&(f.proc, *device, id)).copied());
                    if let Some(i) = i {
                        table.add_time(i, ns);
                    }
                }
            }
        }
        let rates = table
            .functions
            .iter()
            .map(|f| if f.time_ns == 0 { Vec::new() } else { f.rates().map(|(id, rate)| (id.0, rate)).collect() })
            .collect();
        Sampled { table, rates }
    }

    /// The series' points into `trace`'s counters (each file's before its other series, as a load puts them), the
    /// samples that could not be placed counted, the files' warnings and failed `pc_samples` chunks added to their
    /// processes. Call after the last window.
    pub fn finish(mut self, trace: &mut Trace) -> StallEnd {
        // What still waits: a stream of no window at all has not named the functions yet either.
        self.window(&trace.names, &[], None);
        for f in &mut self.files {
            let Some(p) = trace.processes.get_mut(f.proc.index()) else { continue };
            p.warnings.append(&mut f.warnings);
            let mut damage = JoinStats::default();
            for problem in f.problems.drain(..) {
                if !p.problems.contains(&problem) {
                    count_damage(std::slice::from_ref(&problem), &mut damage);
                    p.problems.push(problem);
                }
            }
            p.stats.add(&damage);
            trace.stats.add(&damage);
        }
        let unplaced = self.sampled.as_ref().map(|s| s.table.unplaced()).unwrap_or_default();
        for (proc, n) in unplaced {
            trace.stats.pc_samples_unplaced += n;
            if let Some(p) = trace.processes.get_mut(proc.index()) {
                p.stats.pc_samples_unplaced += n;
            }
        }
        let ids: Vec<NameId> = self.series.iter().map(|s| trace.names.intern(s)).collect();
        let mut by_name: Vec<u32> = (0..self.series.len() as u32).collect();
        by_name.sort_by(|&a, &b| self.series[a as usize].cmp(&self.series[b as usize]));
        let mut rank = vec![0; by_name.len()];
        for (r, &s) in by_name.iter().enumerate() {
            rank[s as usize] = r;
        }
        // Stable: each series' points stay in time order; a load orders by (file, device), then series name.
        let mut points = std::mem::take(&mut self.points);
        points.sort_by_key(|c| (c.proc, c.device, rank[c.series.index()]));
        points.iter_mut().for_each(|c| c.series = ids[c.series.index()]);
        points.append(&mut trace.counters);
        points.sort_by_key(|c| c.proc);
        trace.counters = points;
        self.end
    }
}

/// One file's samples summed per (device, function) and series, named as [`crate::stall_rates::read_samples`]
/// names them; series numbered in `series` (their names) through `ids`.
fn read_file(r: &Reader, proc: ProcId, series: &mut Vec<String>, ids: &mut FxHashMap<String, u32>) -> FileSamples {
    let (collections, problems) = r.pc_samples();
    let mut per_function: BTreeMap<(u32, &str), BTreeMap<u32, u64>> = BTreeMap::new();
    let check = name_samples(&collections, |c, pc, reason, n| {
        let id = *ids.entry(reason.to_string()).or_insert_with(|| {
            series.push(format!("PC samples/ms: {reason}"));
            series.len() as u32 - 1
        });
        let sum = per_function.entry((c.device, pc.function_name.as_str())).or_default().entry(id).or_default();
        *sum = sum.saturating_add(n);
    });
    let functions = per_function
        .into_iter()
        .map(|((device, name), samples)| (device, name.to_string(), samples.into_iter().collect()))
        .collect();
    FileSamples { proc, functions, kernel_time: FxHashMap::default(), warnings: check.warnings(), problems }
}

/// Each (device, kernel name)'s execution time over every activity chunk of the file `r` (`time`: its process's
/// time base); nothing for a file without its metadata, which a stream does not read.
fn kernel_time(r: &Reader, proc: ProcId, time: TimeBase, filter: &Filter) -> FxHashMap<(u32, String), u64> {
    let Some(layouts) = r.layouts() else { return FxHashMap::default() };
    let recorder = RecorderThreads::of(r.thread_names());
    let decoder = FileDecoder { reader: r, fields: FileFields::new(layouts), proc, time, filter, recorder };
    // Each text id as its own name id (0: none), named by its text afterwards.
    let texts: Vec<&str> = std::iter::once("").chain(r.strings().iter()).collect();
    let ids: Vec<NameId> = (0..texts.len() as u32).map(NameId).collect();
    whole_file_time(&decoder, &ids)
        .into_iter()
        .map(|((device, id), ns)| ((device, texts[id.index()].to_string()), ns))
        .collect()
}

/// One (file, device)'s sweep: the starts and ends not swept yet, and the state of its series.
struct DeviceSweep {
    /// (time, whether an end, function) -> how many: a load's sweep order (at one time starts before ends, then
    /// by function), so that the sums round as a load's do.
    waiting: BTreeMap<(u64, bool, u32), u32>,
    /// By series.
    series: Vec<SeriesState>,
    touched: Vec<usize>,
    /// The last time swept: a start or end at or before it comes too late to be drawn there.
    swept: Option<u64>,
}

impl DeviceSweep {
    fn new(series: usize) -> DeviceSweep {
        DeviceSweep {
            waiting: BTreeMap::new(),
            series: vec![SeriesState::default(); series],
            touched: Vec::new(),
            swept: None,
        }
    }

    fn wait(&mut self, ts: u64, ends: bool, function: u32) {
        *self.waiting.entry((ts, ends, function)).or_default() += 1;
    }

    fn next_time(&self) -> Option<u64> {
        self.waiting.keys().next().map(|k| k.0)
    }

    /// Sweeps the earliest time waiting: its points, for the series that changed, onto `points`. Returns how many
    /// starts and ends it took.
    fn sweep_next(
        &mut self,
        (proc, device): (ProcId, u32),
        rates: &[Vec<(u32, f64)>],
        points: &mut Vec<CounterSample>,
    ) -> usize {
        let Some(ts) = self.next_time() else { return 0 };
        let mut taken = 0;
        while let Some(entry) = self.waiting.first_entry().filter(|e| e.key().0 == ts) {
            let ((_, ends, function), n) = entry.remove_entry();
            for _ in 0..n {
                for &(s, rate) in &rates[function as usize] {
                    let state = &mut self.series[s as usize];
                    if !state.touched() {
                        self.touched.push(s as usize);
                    }
                    state.apply(!ends, rate);
                }
            }
            taken += n as usize;
        }
        for s in self.touched.drain(..) {
            if let Some(value) = self.series[s].take_change() {
                points.push(CounterSample { proc, device, series: NameId(s as u32), ts, value });
            }
        }
        self.swept = Some(ts);
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// The load's case ([`crate::stall_rates`]'s tests): `a` has 30 long_scoreboard and 6 wait samples over 3 ms
    /// of runs (10 and 2 per ms), `b` 4 long_scoreboard samples over 2 ms (2 per ms); device 0 of file 0.
    fn fold(max_waiting: usize) -> (Names, StallStream) {
        let mut names = Names::default();
        names.intern("_Z1av");
        names.intern("_Z1bv");
        let functions = vec![(0, "_Z1av".to_string(), vec![(0, 30), (1, 6)]), (0, "_Z1bv".to_string(), vec![(0, 4)])];
        let kernel_time =
            [((0, "_Z1av".to_string()), 3 * MS), ((0, "_Z1bv".to_string()), 2 * MS)].into_iter().collect();
        let file = FileSamples { proc: ProcId(0), functions, kernel_time, warnings: Vec::new(), problems: Vec::new() };
        let series = vec!["PC samples/ms: long_scoreboard".to_string(), "PC samples/ms: wait".to_string()];
        let fold = StallStream::of_samples(Filter::default(), true, max_waiting, vec![file], series);
        (names, fold)
    }

    /// A run of `name` on device 0 of file 0, in ms; `start_ns` added to its start.
    fn run(names: &Names, name: &str, (start_ms, start_ns): (u64, u64), end_ms: u64) -> Kernel {
        let name = names.lookup(name).unwrap();
        Kernel { name, start: start_ms * MS + start_ns, end: end_ms * MS, ..Default::default() }
    }

    /// The trace's points as (series, ns, value).
    fn points(fold: StallStream) -> (Vec<(String, u64, f64)>, StallEnd) {
        let mut trace = Trace::default();
        let end = fold.finish(&mut trace);
        let name = |c: &CounterSample| trace.names.get(c.series).trim_start_matches("PC samples/ms: ").to_string();
        (trace.counters.iter().map(|c| (name(c), c.ts, c.value)).collect(), end)
    }

    fn want(points: &[(&str, u64, f64)]) -> Vec<(String, u64, f64)> {
        points.iter().map(|&(s, ts, v)| (s.to_string(), ts, v)).collect()
    }

    /// An edge held back (the next window claims to start at 0): past 2 waiting, the oldest times are swept, the
    /// runs being in time order the points are still the load's.
    #[test]
    fn past_max_waiting_the_oldest_are_swept_early() {
        let (names, mut fold) = fold(2);
        let kernels =
            [run(&names, "_Z1av", (1, 0), 3), run(&names, "_Z1bv", (2, 0), 4), run(&names, "_Z1av", (5, 0), 6)];
        fold.window(&names, &kernels, Some(0));
        assert_eq!((fold.waiting, fold.end.swept_early), (2, 4));
        let (got, end) = points(fold);
        let load = [
            ("long_scoreboard", MS, 10.0),
            ("long_scoreboard", 2 * MS, 12.0),
            ("long_scoreboard", 3 * MS, 2.0),
            ("long_scoreboard", 4 * MS, 0.0),
            ("long_scoreboard", 5 * MS, 10.0),
            ("long_scoreboard", 6 * MS, 0.0),
            ("wait", MS, 2.0),
            ("wait", 3 * MS, 0.0),
            ("wait", 5 * MS, 2.0),
            ("wait", 6 * MS, 0.0),
        ];
        assert_eq!(got, want(&load));
        assert_eq!(end, StallEnd { swept_early: 4, runs_late: 0 });
    }

    /// A run starting at or before a time already swept is drawn from just after it; one that also ended by then
    /// not at all. Both counted.
    #[test]
    fn runs_before_what_was_swept_are_drawn_from_there_and_counted() {
        let (names, mut fold) = fold(1 << 20);
        fold.window(&names, &[run(&names, "_Z1bv", (2, 0), 4)], Some(3 * MS));
        let late = [run(&names, "_Z1av", (1, 0), 3), run(&names, "_Z1bv", (1, 0), 2), run(&names, "_Z1av", (5, 0), 6)];
        fold.window(&names, &late, None);
        let (got, end) = points(fold);
        let drawn = [
            ("long_scoreboard", 2 * MS, 2.0),
            ("long_scoreboard", 2 * MS + 1, 12.0),
            ("long_scoreboard", 3 * MS, 2.0),
            ("long_scoreboard", 4 * MS, 0.0),
            ("long_scoreboard", 5 * MS, 10.0),
            ("long_scoreboard", 6 * MS, 0.0),
            ("wait", 2 * MS + 1, 2.0),
            ("wait", 3 * MS, 0.0),
            ("wait", 5 * MS, 2.0),
            ("wait", 6 * MS, 0.0),
        ];
        assert_eq!(got, want(&drawn));
        assert_eq!(end, StallEnd { swept_early: 0, runs_late: 2 });
        assert_eq!(end.warnings(1 << 20).len(), 1);
    }
}
