//! Streaming over recordings in bounded memory: the activity chunks of one or several files walked in time order
//! (each chunk's range from the footer index), a window of chunks decoded in parallel into typed rows, handed to
//! a consumer as a [`Batch`], and dropped when the consumer returns. What a summary needs across windows is kept
//! here with a bound: NVTX ranges still open per thread, and each API call's enclosing ranges by correlation key
//! for a horizon of launches ([`StreamOptions::horizon`]); GPU work whose launch fell out of the horizon is
//! counted ([`StreamEnd::launches_out_of_horizon`]), never attributed silently.
//!
//! Counter samples, which a day of PM sampling makes more of than anything else, come a chunk at a time with the
//! windows ([`StreamOptions::counter_feed`]). The other side chunks (metadata, strings, clocks, loss) are read
//! whole at open, as [`crate::load`] does: the
//! consumer gets a [`Trace`] that holds the processes and names but no rows, so that names (kernels, API
//! functions) and ranks read as they do on a loaded trace. The records of the recorder's own `cutr-*` threads
//! are left out as at load ([`crate::recorder_threads`]); their API calls are dropped and counted, also the rare
//! one that launched GPU work (which a whole load keeps).
//!
//! ```
//! use cutr_model::stream::{StreamOptions, stream};
//!
//! # fn main() -> Result<(), cutr_model::LoadError> {
//! let mut kernels = 0;
//! let end = stream(&["../../fixtures/pytorch_loop.cutr".into()], &StreamOptions::default(), |_, _, batch| {
//!     kernels += batch.kernels.len();
//! })?;
//! assert_eq!(kernels, 5_653);
//! assert_eq!(end.launches_out_of_horizon, 0);
//! # Ok(())
//! # }
//! ```

mod counter_feed;
mod graphs;
mod horizon;
mod instances;
mod ranges;

use cutr_format::{ChunkError, ChunkInfo, ChunkType, Problem, Reader};
use rayon::prelude::*;
use std::path::PathBuf;

use crate::counters::{ChunkSamples, CounterSample, Leftovers};
use crate::decode::{ChunkCounts, ChunkRows, FileDecoder};
use crate::fields::FileFields;
use crate::ids::{NameId, ProcId};
use crate::load::{Filter, LoadError, count_damage, open_inputs};
use crate::recorder_threads::RecorderThreads;
use crate::rows::{ApiCall, Kernel, Memcpy, MemoryOp, Memset, NvtxMark, NvtxRange, Sync, UmEvent};
use crate::timebase::{ClockCheck, TimeBase};
use crate::trace::{JoinStats, Process, Trace};

pub use graphs::{graph_context, graph_context_in};
pub use instances::RangeWork;
pub use ranges::RangeStacks;

/// How to stream.
#[derive(Clone, Debug)]
pub struct StreamOptions {
    /// How many API calls' enclosing NVTX ranges are kept for the GPU work they launched (the most recent).
    pub horizon: usize,
    /// The most decompressed record bytes a window of chunks may claim (a chunk alone may claim more).
    pub window_bytes: u64,
    /// Also read each file's counter samples (`--counters` metrics; not the PC samples' stall rates, which are
    /// drawn over every kernel: [`crate::stall_stream`]) into the trace at open, as a load does: side chunks, read
    /// whole.
    pub counters: bool,
    /// Hand each file's counter samples over window by window ([`Batch::counters`]) instead (`counters` is then
    /// not read): at open only each series' span and size ([`Trace::counter_series`]), and the warnings and
    /// counts a load makes of them.
    pub counter_feed: bool,
    /// Also read each file's CUDA graph events into the trace at open (side chunks, read whole), unjoined: for
    /// [`graph_context`].
    pub graph_events: bool,
    /// Hold GPU work whose launching call is not read yet for as long as a chunk that starts before the work is
    /// still to come (a call's CUPTI buffer can start later than the buffer of the kernel it launched): the work
    /// reaches the consumer a window or more late, joined, instead of counted as without a call.
    pub hold_unlaunched: bool,
    /// The most rows a consumer (and the held GPU work of `hold_unlaunched`) keeps waiting for the stream to pass
    /// their time ([`Batch::next_start`]). Chunk headers whose times claim earlier than their rows (a damaged or
    /// forged file) would keep the edge back and everything waiting, a load's memory and a wait sorted again
    /// each window; past this many, the oldest are settled anyway and counted, and what then comes late for them
    /// is counted too (a real recording has a few thousand rows across an edge).
    pub max_waiting: usize,
    /// NVTX range sets made (each distinct set of ranges open around a call: a program naming its steps apart
    /// makes a few a step) beyond twice those kept before the stream drops those no call in its horizon refers
    /// to ([`RangeStacks`]). Memory against the walk of the horizon a compaction costs.
    pub range_sets_floor: usize,
}

/// A million NVTX range sets (~30 MB) between compactions: ~40M records of a loop that names its steps apart.
pub const DEFAULT_RANGE_SETS_FLOOR: usize = 1 << 20;

/// A million rows: ~50 MB of the largest rows a consumer keeps waiting.
pub const DEFAULT_MAX_WAITING: usize = 1 << 20;

/// One million launches: ~40 MB of correlation state, minutes of a launch-bound program.
pub const DEFAULT_HORIZON: usize = 1 << 20;

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            horizon: DEFAULT_HORIZON,
            window_bytes: 256 << 20,
            counters: false,
            counter_feed: false,
            graph_events: false,
            hold_unlaunched: false,
            max_waiting: DEFAULT_MAX_WAITING,
            range_sets_floor: DEFAULT_RANGE_SETS_FLOOR,
        }
    }
}

/// The rows of a window of chunks, names as the trace's [`NameId`]s. Dropped when the consumer returns.
#[derive(Default)]
pub struct Batch {
    pub kernels: Vec<Kernel>,
    pub memcpys: Vec<Memcpy>,
    pub memsets: Vec<Memset>,
    /// The program's API calls (not the recorder threads').
    pub apis: Vec<ApiCall>,
    /// NVTX ranges that closed in this window (end seen); `depth` is the thread's nesting when each started.
    pub ranges: Vec<NvtxRange>,
    /// For each kernel, then each copy, then each memset: the id of the NVTX ranges open around its launching
    /// call on the call's thread ([`RangeStacks::names`]; 0 = none, or no launching call known).
    pub gpu_ranges: Vec<u32>,
    /// For each kernel, then each copy, then each memset (as `gpu_ranges`): its launching call, while in the
    /// horizon (a runtime call wins over the driver call sharing its id).
    pub gpu_calls: Vec<Option<ApiCall>>,
    /// For each kernel, then each copy, then each memset: PyTorch's op id and user annotation id (external kinds
    /// CUSTOM0, CUSTOM1) of its correlation key, while in the horizon; 0 = none.
    pub gpu_external: Vec<(u64, u64)>,
    /// For each of `apis`: the id of the NVTX ranges open around it on its thread (as `gpu_ranges`).
    pub api_ranges: Vec<u32>,
    pub syncs: Vec<Sync>,
    /// Instantaneous NVTX markers.
    pub marks: Vec<NvtxMark>,
    pub memory: Vec<MemoryOp>,
    pub um: Vec<UmEvent>,
    /// With [`StreamOptions::counter_feed`]: the counter samples of the chunks whose first sample is before
    /// [`Batch::next_start`] (all that are left, in the last window), each series' together in time order (by
    /// file, device, series, time). A chunk's samples can reach past the window's rows.
    pub counters: Vec<CounterSample>,
    /// With [`StreamOptions::counter_feed`]: every counter sample before this time has been handed over, in this
    /// batch or an earlier one (`u64::MAX`: all of them).
    pub counters_complete_before: u64,
    /// The start of each NVTX range (start/end or push/pop) that began in this window, by file: a consumer that
    /// must know, at a range's end, something of the time it began (a counter series' integral up to it) can note
    /// it while that time is at hand.
    pub range_starts: Vec<(ProcId, u64)>,
    /// The earliest time a later window's chunks begin at (`None`: this is the last window): no row of a later
    /// window starts before it, so state about earlier times can be dropped.
    pub next_start: Option<u64>,
    /// Closed NVTX range instances whose GPU work is final, with that work (filled only by
    /// [`stream_readers_with_range_work`]; the instances final at the end come in one last batch of their own).
    pub range_work: Vec<RangeWork>,
}

/// What a stream leaves when it is done.
#[derive(Debug, Default)]
pub struct StreamEnd {
    /// Earliest and latest timestamp of any row (as [`Trace::span`]).
    pub span: (u64, u64),
    /// Activity chunks walked, and windows decoded.
    pub chunks: u64,
    pub windows: u64,
    /// GPU work whose launching call fell out of the correlation horizon before the work was read: attributed to
    /// no NVTX range.
    pub launches_out_of_horizon: u64,
    /// Decompressed record bytes of the largest window: what the stream held at once.
    pub largest_window_bytes: u64,
    /// The NVTX ranges never ended (`end` = `u64::MAX`, as a load keeps them), `depth` their nesting at start.
    pub unclosed_ranges: Vec<NvtxRange>,
    /// GPU work held for its launching call (`hold_unlaunched`) that was handed on unjoined because more than
    /// [`StreamOptions::max_waiting`] waited (its call, if it came later, was not joined).
    pub held_released_early: u64,
    /// Batches of counter samples alone: a window's counter chunks past its bytes, handed over ahead of its rows.
    pub counter_batches: u64,
}

/// Decompressed record bytes of the activity chunks of `readers` (as their headers claim): the size a whole load
/// would hold, give or take the model's row sizes.
pub fn record_bytes(readers: &[Reader]) -> u64 {
    readers.iter().flat_map(|r| r.activity_chunks()).map(|c| c.header.raw_len).sum()
}

/// Streams the activity of `paths` (one recording per process) in time order through `consume`, which gets the
/// trace of processes and names (no rows), the NVTX range sets [`Batch::gpu_ranges`] names, and each window's
/// [`Batch`]. The next window decodes while the consumer works: two windows are held at most. Returns the
/// stream's own counts.
pub fn stream(
    paths: &[PathBuf],
    opts: &StreamOptions,
    consume: impl FnMut(&Trace, &RangeStacks, Batch) + Send,
) -> Result<StreamEnd, LoadError> {
    let (readers, _) = open_inputs(paths, false)?;
    stream_readers(paths, &readers, opts, consume).map(|(_, end)| end)
}

/// [`stream`] over already open readers (`paths` label them); also returns the trace of processes and names, with
/// each file's join statistics and problems (the chunks that failed to decode among them).
pub fn stream_readers(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &StreamOptions,
    consume: impl FnMut(&Trace, &RangeStacks, Batch) + Send,
) -> Result<(Trace, StreamEnd), LoadError> {
    stream_inner(paths, readers, opts, &Filter::default(), false, consume)
}

/// [`stream_readers`] over the records that `filter`'s `--start/--end` window keeps, as a load with that filter
/// keeps them ([`crate::LoadOptions::filter`]): the chunks wholly outside the window are not decoded, the rows
/// outside it are left out, and NVTX ranges are kept when they overlap it (the span too is that of the rows
/// kept).
pub fn stream_readers_in(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &StreamOptions,
    filter: &Filter,
    consume: impl FnMut(&Trace, &RangeStacks, Batch) + Send,
) -> Result<(Trace, StreamEnd), LoadError> {
    stream_inner(paths, readers, opts, filter, false, consume)
}

/// [`stream_readers`], also handing on each closed NVTX range instance with the GPU work launched inside it
/// ([`Batch::range_work`], as [`Trace::gpu_work_by_range`] counts it on a loaded trace) once that work is final:
/// its calls out of the horizon and its nested instances final. After the last window, `consume` gets one more
/// batch holding only the instances still waiting. GPU work whose call fell out of the horizon is in no instance
/// ([`StreamEnd::launches_out_of_horizon`]).
pub fn stream_readers_with_range_work(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &StreamOptions,
    consume: impl FnMut(&Trace, &RangeStacks, Batch) + Send,
) -> Result<(Trace, StreamEnd), LoadError> {
    stream_inner(paths, readers, opts, &Filter::default(), true, consume)
}

/// [`stream_readers_in`] with each closed NVTX range instance's GPU work, as [`stream_readers_with_range_work`]
/// hands it on (every instance closed, in the `--start/--end` window or not: the consumer keeps those it keeps).
pub fn stream_readers_in_with_range_work(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &StreamOptions,
    filter: &Filter,
    consume: impl FnMut(&Trace, &RangeStacks, Batch) + Send,
) -> Result<(Trace, StreamEnd), LoadError> {
    stream_inner(paths, readers, opts, filter, true, consume)
}

fn stream_inner(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &StreamOptions,
    filter: &Filter,
    range_work: bool,
    mut consume: impl FnMut(&Trace, &RangeStacks, Batch) + Send,
) -> Result<(Trace, StreamEnd), LoadError> {
    if paths.len() > u16::MAX as usize {
        return Err(LoadError::TooMany(paths.len()));
    }
    let Opened { mut trace, decoders, text_ids, mut feed } = open_all(paths, readers, opts, filter)?;
    let devices: Vec<Vec<u32>> = decoders.iter().map(|d| listed_devices(&trace.processes[d.proc.index()])).collect();
    let reads: Vec<ChunkSamples<'_>> = decoders
        .iter()
        .zip(&devices)
        .map(|(d, devices)| ChunkSamples { proc: d.proc, time: &d.time, filter, devices })
        .collect();
    let chunks = chunks_in_order(readers, &decoders, filter);
    let windows = cut_windows(&chunks, opts.window_bytes);
    let mut state = ranges::RangeState::new(opts.horizon, filter.clone(), opts.max_waiting, opts.range_sets_floor);
    state.instances = range_work.then(instances::Instances::default);
    let mut end = StreamEnd { chunks: chunks.len() as u64, windows: windows.len() as u64, ..Default::default() };
    let mut span = (u64::MAX, 0u64);
    let mut stats = vec![JoinStats::default(); trace.processes.len()];
    let decode = |win: &[(usize, ChunkInfo)]| -> Vec<(usize, Result<ChunkRows, Problem>)> {
        win.par_iter().map(|(f, c)| (*f, decode_chunk(&decoders[*f], c).map_err(|e| damaged(c, e)))).collect()
    };
    let mut pending = windows.first().map(|w| decode(w));
    for i in 0..windows.len() {
        let done = pending.take().unwrap_or_default();
        end.largest_window_bytes = end.largest_window_bytes.max(windows[i].iter().map(|c| c.1.header.raw_len).sum());
        let mut rows = Vec::with_capacity(done.len());
        for (f, r) in done {
            match r {
                Ok(mut c) => {
                    let proc = decoders[f].proc;
                    rename(&mut c, &text_ids[f]);
                    count(&mut stats[proc.index()], &c.counts);
                    stats[proc.index()].recorder_thread_records += c.recorder_calls.len() as u64;
                    rows.push((proc, c));
                }
                Err(p) => trace.processes[decoders[f].proc.index()].problems.push(p),
            }
        }
        let next = windows.get(i + 1);
        let next_start = next.and_then(|w| w.iter().map(|(f, c)| decoders[*f].time.to_trace(c.header.t_min)).min());
        let mut batch = state.batch(rows, &mut span, &mut stats, next_start.filter(|_| opts.hold_unlaunched));
        batch.next_start = next_start;
        if opts.counter_feed {
            // The edge of the batches of counters alone is still this window's start (its rows are to come).
            let edge = windows[i].iter().map(|(f, c)| decoders[*f].time.to_trace(c.header.t_min)).min();
            let mut feeding = Feeding { feed: &mut feed, readers, reads: &reads, max_bytes: opts.window_bytes };
            batch.counters = feeding.due((next_start, edge), &mut trace, &state.stacks, &mut end, &mut consume);
        }
        batch.counters_complete_before = feed.complete_before();
        let (t, stacks) = (&trace, &state.stacks);
        pending = rayon::join(|| consume(t, stacks, batch), || next.map(|w| decode(w))).1;
    }
    if windows.is_empty() && opts.counter_feed {
        // No activity to ride on (a recording, or a --start/--end window, of counters alone).
        let mut feeding = Feeding { feed: &mut feed, readers, reads: &reads, max_bytes: opts.window_bytes };
        let counters = feeding.due((None, None), &mut trace, &state.stacks, &mut end, &mut consume);
        consume(&trace, &state.stacks, Batch { counters, counters_complete_before: u64::MAX, ..Default::default() });
    }
    end.unclosed_ranges = state.finish(&mut stats, &mut span);
    if let Some(mut instances) = state.instances.take() {
        let mut last = Batch { counters_complete_before: u64::MAX, ..Batch::default() };
        instances.finish(&mut last.range_work);
        consume(&trace, &state.stacks, last);
    }
    end.launches_out_of_horizon = state.out_of_horizon;
    end.held_released_early = state.held_released_early;
    end.span = if span.0 == u64::MAX { (0, 0) } else { span };
    for (p, mut s) in trace.processes.iter_mut().zip(stats) {
        // What was counted at open (counter samples).
        s.add(&p.stats);
        count_damage(&p.problems, &mut s);
        trace.stats.add(&s);
        p.stats = s;
    }
    Ok((trace, end))
}

/// What opening every file gives the stream.
struct Opened<'r> {
    /// Rowless: processes, names, counter series' spans, graph events when asked.
    trace: Trace,
    /// Each file's decoder, by its place among the inputs.
    decoders: Vec<FileDecoder<'r>>,
    /// Each file's string table as the trace's names.
    text_ids: Vec<Vec<NameId>>,
    /// The counter chunks indexed ([`StreamOptions::counter_feed`]).
    feed: counter_feed::CounterFeed,
}

/// Every file opened, in its run's order.
fn open_all<'r>(
    paths: &[PathBuf],
    readers: &'r [Reader],
    opts: &StreamOptions,
    filter: &'r Filter,
) -> Result<Opened<'r>, LoadError> {
    let mut trace = Trace::default();
    // A split recording's parts are one process on its first part's time base, as a whole load reads them: their
    // NVTX ranges and correlations pair across the parts' boundaries.
    let grouping = crate::runs::group(readers);
    let mut decoders: Vec<Option<FileDecoder<'_>>> = (0..readers.len()).map(|_| None).collect();
    let mut text_ids = vec![Vec::new(); readers.len()];
    let mut feed = counter_feed::CounterFeed::default();
    let mut series_info = rustc_hash::FxHashMap::default();
    for &(i, proc) in &grouping.order {
        let (path, r) = (&paths[i], &readers[i]);
        let first = trace.processes.get(proc.index()).map(|p| p.time);
        let (decoder, mut process) = open_file(proc, path, r, filter, first)?;
        if opts.counter_feed {
            index_counters(&mut trace, &mut process, (i, proc, r), &mut feed, (filter, &mut series_info));
        } else if opts.counters {
            read_counters(&mut trace, &mut process, proc, r, filter);
        }
        if opts.graph_events {
            let damaged = trace.graphs.read_file(r, proc, &process.time, filter, &mut process.stats);
            process.problems.extend(damaged.into_iter().filter(|p| !r.problems().contains(p)));
        }
        let texts = std::iter::once(NameId::EMPTY).chain(r.strings().iter().map(|t| trace.names.intern(t)));
        text_ids[i] = texts.collect::<Vec<NameId>>();
        decoders[i] = Some(decoder);
        let graphs_before = trace.graphs.pending.events.len();
        crate::runs::add_file(&mut trace, proc, process, graphs_before);
    }
    for (proc, w) in grouping.warnings {
        trace.processes[proc.index()].warnings.push(w);
    }
    // The occupancy calculator's inputs ([`Trace::occupancy_inputs`]) read as on a loaded trace.
    trace.device_limits = trace.index_device_limits();
    let decoders: Vec<FileDecoder<'_>> =
        decoders.into_iter().map(|d| d.expect("every input is in the grouping")).collect();
    feed.sort();
    let mut series_info: Vec<_> = series_info.into_values().collect();
    series_info.sort_unstable_by_key(|s: &crate::counters::CounterSeriesInfo| (s.proc, s.device, s.series));
    trace.counter_series = series_info;
    Ok(Opened { trace, decoders, text_ids, feed })
}

/// Every file's activity chunks in one time order (trace time: the files' clocks differ); chunks wholly outside a
/// `--start/--end` window are not read, as a load skips them.
fn chunks_in_order(readers: &[Reader], decoders: &[FileDecoder<'_>], filter: &Filter) -> Vec<(usize, ChunkInfo)> {
    let outside = |f: usize, c: &ChunkInfo| {
        let time = decoders[f].time;
        let (a, b) = (time.to_trace(c.header.t_min), time.to_trace(c.header.t_max));
        c.header.t_max != 0 && (filter.start.is_some_and(|s| b < s) || filter.end.is_some_and(|e| a > e))
    };
    let mut chunks: Vec<(usize, ChunkInfo)> = readers
        .iter()
        .enumerate()
        .flat_map(|(f, r)| r.activity_chunks().filter(move |c| !outside(f, c)).map(move |c| (f, c.clone())))
        .collect();
    chunks.sort_by_key(|(f, c)| (decoders[*f].time.to_trace(c.header.t_min), *f, c.header.seq));
    chunks
}

/// The counter feed and what reading its chunks takes, for one window.
struct Feeding<'f, 'r> {
    feed: &'f mut counter_feed::CounterFeed,
    readers: &'r [Reader],
    reads: &'f [ChunkSamples<'r>],
    /// A window's decompressed bytes ([`StreamOptions::window_bytes`]).
    max_bytes: u64,
}

impl Feeding<'_, '_> {
    /// The samples of the counter chunks due before `before`, a window's bytes at a time: every group but the last
    /// goes to `consume` in a batch of its own (rows none, the stream's edge `edge`), the last is returned for the
    /// window's batch. A recording far denser in counters than in activity would otherwise hand a long stretch's
    /// samples over at once.
    fn due(
        &mut self,
        (before, edge): (Option<u64>, Option<u64>),
        trace: &mut Trace,
        stacks: &RangeStacks,
        end: &mut StreamEnd,
        consume: &mut impl FnMut(&Trace, &RangeStacks, Batch),
    ) -> Vec<CounterSample> {
        let mut counters = self.feed.take((before, self.max_bytes), self.readers, self.reads, &mut trace.names);
        while self.feed.has_due(before) {
            let complete = self.feed.complete_before();
            let only = Batch { counters, counters_complete_before: complete, next_start: edge, ..Default::default() };
            end.counter_batches += 1;
            consume(trace, stacks, only);
            counters = self.feed.take((before, self.max_bytes), self.readers, self.reads, &mut trace.names);
        }
        counters
    }
}

/// A file's decoder and its process (no rows yet; `first_part_time`: a split recording's first part's time base,
/// for its later parts). A file without readable metadata cannot be streamed.
fn open_file<'r>(
    proc: ProcId,
    path: &std::path::Path,
    r: &'r Reader,
    filter: &'r Filter,
    first_part_time: Option<TimeBase>,
) -> Result<(FileDecoder<'r>, Process), LoadError> {
    let (Some(meta), Some(layouts)) = (r.metadata_shared(), r.layouts()) else {
        return Err(LoadError::NoMetadata { path: path.to_path_buf() });
    };
    let clocks = ClockCheck::of_reader(r);
    let time = first_part_time.unwrap_or(clocks.time);
    let recorder = RecorderThreads::of(r.thread_names());
    let decoder = FileDecoder { reader: r, fields: FileFields::new(layouts), proc, time, filter, recorder };
    let mut api_names = rustc_hash::FxHashMap::default();
    for (i, (d, c, _)) in meta.callback_names.iter().enumerate() {
        api_names.insert((*d, *c), i as u32);
    }
    let process = Process {
        path: path.to_path_buf(),
        pid: meta.pid,
        time,
        loss: r.loss().cloned().unwrap_or_default(),
        problems: r.problems().to_vec(),
        recovery: r.recovery().cloned(),
        warnings: clocks.warnings(),
        stats: JoinStats::default(),
        api_names,
        thread_names: r.thread_names().clone(),
        rank_given: None,
        parts: Vec::new(),
        meta,
    };
    Ok((decoder, process))
}

/// The devices a file's metadata lists (as a load checks counter samples against them).
fn listed_devices(p: &Process) -> Vec<u32> {
    p.meta.devices.iter().map(|d| d.id).collect()
}

/// File `i`'s counter chunks indexed into `feed` and `series` (each series' span and size), their warnings,
/// problems and counts into `process`, as a load with `filter` reads them.
fn index_counters(
    trace: &mut Trace,
    process: &mut Process,
    (i, proc, r): (usize, ProcId, &Reader),
    feed: &mut counter_feed::CounterFeed,
    (filter, series): (&Filter, &mut rustc_hash::FxHashMap<(ProcId, u32, NameId), crate::counters::CounterSeriesInfo>),
) {
    let devices = listed_devices(process);
    let read = ChunkSamples { proc, time: &process.time, filter, devices: &devices };
    let mut left = Leftovers::default();
    let problems = feed.index_file((i, r), &read, &mut trace.names, (&mut left, series));
    process.warnings.extend(left.finish(&devices, &trace.names, &mut process.stats));
    for p in problems {
        if !process.problems.contains(&p) {
            process.problems.push(p);
        }
    }
}

/// File `proc`'s counter samples into `trace`, their warnings, problems and counts into `process`, as a load
/// with `filter` reads them (a `--start/--end` window keeps the samples that overlap it).
fn read_counters(trace: &mut Trace, process: &mut Process, proc: ProcId, r: &Reader, filter: &Filter) {
    let devices: Vec<u32> = process.meta.devices.iter().map(|d| d.id).collect();
    let got = crate::counters::metric_samples(
        r,
        proc,
        &process.time,
        filter,
        &mut trace.names,
        (&devices, &mut process.stats),
    );
    process.warnings.extend(got.warnings);
    for p in got.problems {
        if !process.problems.contains(&p) {
            process.problems.push(p);
        }
    }
    trace.counters.extend(got.samples);
}

/// One chunk decompressed and decoded into rows (names still the file's text ids).
fn decode_chunk(d: &FileDecoder<'_>, c: &ChunkInfo) -> Result<ChunkRows, ChunkError> {
    let buf = d.reader.decode_activity(c)?;
    // The chunk is decoded into owned rows: its mapped pages need not stay resident (a billion-record file would
    // otherwise end the stream with all of it counted in the process's memory).
    d.reader.release_pages(c);
    d.reader.check_strides(&buf)?;
    Ok(d.chunk(c, &buf))
}

fn damaged(c: &ChunkInfo, error: ChunkError) -> Problem {
    Problem::DamagedChunk {
        offset: c.offset,
        seq: c.header.seq,
        chunk_type: ChunkType::Activity,
        records: c.header.record_count,
        error,
    }
}

/// The file's text ids of a chunk's rows -> the trace's name ids.
fn rename(c: &mut ChunkRows, ids: &[NameId]) {
    let name = |id: NameId| ids.get(id.index()).copied().unwrap_or(NameId::EMPTY);
    c.kernels.iter_mut().for_each(|k| k.name = name(k.name));
    c.markers.iter_mut().for_each(|m| {
        m.name = name(m.name);
        m.domain = name(m.domain);
    });
}

fn count(s: &mut JoinStats, counts: &ChunkCounts) {
    s.zero_timestamp_records += counts.zero;
    s.inverted_records += counts.inverted;
    s.unmodelled_records += counts.unmodelled;
    s.unresolved_names += counts.unresolved;
    s.unparsed_bytes += counts.unparsed;
    s.um_unknown_kind += counts.um_unknown_kind;
    s.recorder_thread_records += counts.recorder_thread;
}

/// The time-ordered chunks cut into windows: two per worker, at most `max_bytes` of claimed records each.
fn cut_windows(chunks: &[(usize, ChunkInfo)], max_bytes: u64) -> Vec<&[(usize, ChunkInfo)]> {
    let per_window = (rayon::current_num_threads() * 2).max(1);
    let mut out = Vec::new();
    let mut rest = chunks;
    while !rest.is_empty() {
        let (mut n, mut bytes) = (0, 0u64);
        while n < rest.len() && n < per_window && (n == 0 || bytes + rest[n].1.header.raw_len <= max_bytes) {
            bytes += rest[n].1.header.raw_len;
            n += 1;
        }
        let (win, tail) = rest.split_at(n);
        out.push(win);
        rest = tail;
    }
    out
}
