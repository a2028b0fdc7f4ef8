//! `diff --stream`: each run streamed over its chunks ([`cutr_model::stream`]) into the same per-row sums a loaded
//! run gives ([`super::samples`]), in state bounded by the answer: one sum per kernel name, kind and size of copy
//! or memset and NVTX range name (numbered families folded, [`super::families`]), the NVTX range instances whose
//! GPU work may still arrive (bounded by the stream's correlation horizon) and the unified memory totals. Moments
//! are integer sums, so rows, counts, moments and verdicts equal the loaded diff's exactly; GPU work whose launch
//! fell out of the horizon is in no NVTX range instance and is counted. Counter averages per kernel are those of
//! `stats --stream` ([`crate::stats::stream_counters`]): the loaded diff's up to the order of their sums.

use std::path::PathBuf;

use cutr_format::Reader;
use cutr_model::stream::{Batch, StreamOptions, stream_readers_with_range_work};
use cutr_model::{LoadError, NameId, Trace};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::Serialize;

use super::inputs::{RunInput, UmTotals, counter_sums};
use super::samples::{RunSums, Sums, copy_key, memset_key};
use super::{ByRankReport, DiffOptions, Report};
use crate::stats::stream_counters::{SUMS_KEPT, StreamedCounters};

/// At most this many runs stream at once, each with its share of the window of records the options allow: the
/// memory of one stream, whatever the number of runs.
const RUNS_AT_ONCE: usize = 4;

/// How a diff was streamed, for its reader.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DiffStream {
    /// Runs streamed, activity chunks walked over all of them, and the most decompressed record bytes one run's
    /// window held.
    pub runs: usize,
    pub chunks: u64,
    pub largest_window_bytes: u64,
    /// API calls per run whose NVTX ranges are kept for the GPU work they launch.
    pub launch_horizon: usize,
    /// GPU work (all runs) whose launching call fell out of that horizon: in no NVTX range instance.
    pub launches_out_of_horizon: u64,
    /// What a loaded diff compares and this one did not (`--no-stream` compares it).
    pub not_compared: Vec<String>,
}

/// The report's line about the stream.
pub fn describe(s: &DiffStream) -> String {
    let mut text = format!(
        "Streamed {} runs over {} chunks (at most {} MB of records decoded at once per run): counts, totals and \
         variances exact; NVTX ranges by the GPU work launched by the opening thread inside each instance; GPU ops \
         whose launch fell out of the last {} launches of their run: {}",
        s.runs,
        crate::fmt::thousands(s.chunks),
        crate::fmt::thousands(s.largest_window_bytes.div_ceil(1 << 20)),
        crate::fmt::thousands(s.launch_horizon as u64),
        crate::fmt::thousands(s.launches_out_of_horizon),
    );
    if !s.not_compared.is_empty() {
        text += &format!("; not compared when streaming: {} (--no-stream compares them)", s.not_compared.join(", "));
    }
    text
}

/// One side of a streamed diff: its runs, each the recordings read together as one (a split recording's parts;
/// else one file) with their open readers.
pub struct StreamedSide<'a> {
    pub runs: Vec<(&'a [PathBuf], &'a [Reader])>,
}

/// [`super::diff`] with each run streamed. Also returns each run's trace of processes (no rows, no names), whose
/// problems and join counts are the inputs' warnings.
pub fn diff_streaming(
    base: StreamedSide<'_>,
    new: StreamedSide<'_>,
    opts: &DiffOptions,
    stream_opts: &StreamOptions,
) -> Result<(Report, Vec<Trace>), LoadError> {
    let (b, n, stream, traces) = stream_sides(&base, &new, opts, stream_opts)?;
    let (b, n): (Vec<&RunInput>, Vec<&RunInput>) = (b.iter().collect(), n.iter().collect());
    let mut report = super::compare_inputs(&b, &n, opts);
    report.stream = Some(stream);
    Ok((report, traces))
}

/// [`super::diff_by_rank`] with each run streamed.
pub fn diff_by_rank_streaming(
    base: StreamedSide<'_>,
    new: StreamedSide<'_>,
    opts: &DiffOptions,
    stream_opts: &StreamOptions,
) -> Result<(ByRankReport, Vec<Trace>), LoadError> {
    let (b, n, stream, traces) = stream_sides(&base, &new, opts, stream_opts)?;
    let mut report = super::by_rank::by_rank_inputs(&b, &n, opts);
    for r in &mut report.ranks {
        r.report.stream = Some(stream.clone());
    }
    Ok((report, traces))
}

type Streamed = (Vec<RunInput>, Vec<RunInput>, DiffStream, Vec<Trace>);

/// Every run of both sides streamed, [`RUNS_AT_ONCE`] at a time.
fn stream_sides(
    base: &StreamedSide<'_>,
    new: &StreamedSide<'_>,
    opts: &DiffOptions,
    stream_opts: &StreamOptions,
) -> Result<Streamed, LoadError> {
    let runs: Vec<(&[PathBuf], &[Reader])> = base.runs.iter().chain(&new.runs).copied().collect();
    let at_once = runs.len().clamp(1, RUNS_AT_ONCE);
    let each = StreamOptions { window_bytes: (stream_opts.window_bytes / at_once as u64).max(1), ..*stream_opts };
    let mut streamed = Vec::with_capacity(runs.len());
    for group in runs.chunks(at_once) {
        let done: Vec<Result<(RunInput, Trace, cutr_model::stream::StreamEnd), LoadError>> =
            group.par_iter().map(|(p, r)| stream_run(p, r, opts, &each)).collect();
        for d in done {
            streamed.push(d?);
        }
    }
    let mut stream = DiffStream { runs: runs.len(), launch_horizon: stream_opts.horizon, ..Default::default() };
    if streamed.iter().any(|(input, ..)| input.counters.is_none()) {
        let why = format!("counter averages per kernel (more than {} name x series sums)", SUMS_KEPT);
        stream.not_compared.push(why);
    }
    let mut inputs = Vec::with_capacity(streamed.len());
    let mut traces = Vec::with_capacity(streamed.len());
    for (input, trace, end) in streamed {
        stream.chunks += end.chunks;
        stream.largest_window_bytes = stream.largest_window_bytes.max(end.largest_window_bytes);
        stream.launches_out_of_horizon += end.launches_out_of_horizon;
        inputs.push(input);
        traces.push(trace);
    }
    let new_inputs = inputs.split_off(base.runs.len());
    Ok((inputs, new_inputs, stream, traces))
}

/// One run's recordings streamed together into a run.
fn stream_run(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &DiffOptions,
    stream_opts: &StreamOptions,
) -> Result<(RunInput, Trace, cutr_model::stream::StreamEnd), LoadError> {
    let mut acc = Accumulator::default();
    // The counter samples come window by window with the rows; their averages as a loaded run's.
    let mut counters = StreamedCounters::new(stream_opts.max_waiting);
    let stream_opts = &StreamOptions { counter_feed: true, ..stream_opts.clone() };
    let (t, end) = stream_readers_with_range_work(paths, readers, stream_opts, |t, _, b| {
        rayon::join(|| acc.add(t, &b, opts), || counters.add(t, &b));
    })?;
    // Past the sums a stream keeps: not compared (`None`), and the report says so.
    let gave_up = counters.gave_up();
    let counters = counters.section(&t, None, crate::stats::counters::MAX_DIFF_ROWS);
    let mut sums = RunSums { ranges: acc.ranges, span_ns: end.span.1 - end.span.0, ..Default::default() };
    for (name, s) in acc.kernels {
        sums.kernels.entry(name).or_default().merge(&s);
    }
    sums.memory.extend(acc.memory);
    let input = RunInput {
        run: sums.into_run(),
        files: t.processes.iter().flat_map(cutr_model::runs::files_of).map(|f| f.display().to_string()).collect(),
        rank: t.processes.first().and_then(|p| p.rank()).map(|r| r.rank),
        gpu_work: acc.gpu_work,
        counters: (!gave_up).then(|| counter_sums(counters.rows)),
        counters_left_out: counters.groups_not_shown,
        um: acc.um,
    };
    // The warnings need the processes only; the names table can go.
    let mut processes = Trace::default();
    (processes.processes, processes.stats) = (t.processes, t.stats);
    Ok((input, processes, end))
}

/// What a run's batches add up to.
#[derive(Default)]
struct Accumulator {
    /// Kernel name id -> its row in `kernels` (ids of one demangled name share a row).
    kernel_rows: FxHashMap<NameId, usize>,
    kernels: Vec<(String, Sums)>,
    row_of_name: FxHashMap<String, usize>,
    memory: FxHashMap<(u32, u32), Sums>,
    ranges: super::families::RangeRows,
    um: UmTotals,
    gpu_work: bool,
}

impl Accumulator {
    fn add(&mut self, t: &Trace, b: &Batch, opts: &DiffOptions) {
        self.gpu_work |= !(b.kernels.is_empty() && b.memcpys.is_empty());
        for k in &b.kernels {
            let row = match self.kernel_rows.get(&k.name) {
                Some(&row) => row,
                None => {
                    let demangled = cutr_model::demangle::demangle(t.names.get(k.name));
                    let name = super::row_name(&demangled, opts);
                    let row = *self.row_of_name.entry(name).or_insert_with_key(|name| {
                        self.kernels.push((name.clone(), Sums::default()));
                        self.kernels.len() - 1
                    });
                    self.kernel_rows.insert(k.name, row);
                    row
                }
            };
            self.kernels[row].1.add(k.duration(), 1);
        }
        for c in &b.memcpys {
            self.memory.entry(copy_key(c)).or_default().add(c.duration(), 1);
        }
        for s in &b.memsets {
            self.memory.entry(memset_key(s)).or_default().add(s.duration(), 1);
        }
        for w in b.range_work.iter().filter(|w| w.range.closed()) {
            self.ranges.add(t.names.get(w.range.name), w.gpu_ns, w.gpu_ops);
        }
        self.um.add(&b.um);
    }
}
