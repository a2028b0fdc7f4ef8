//! `stats --stream`: the sections that can be summed as the chunks go by, over [`cutr_model::stream`], with state
//! bounded by the answer: one accumulator per row of the report (kernel name, API function, kind of copy or
//! memset, NVTX range name), the open NVTX ranges per thread and the correlation horizon of the stream. Counts,
//! totals, minimums, maximums and means are exact; medians too while a row has at most a cap of instances, and
//! from a sketch beyond ([`super::Durations`]), marked. Utilization's interval unions and the memory section's
//! peaks are settled as the stream passes their time (`stream_utilization`, `stream_memory`), exactly, as is
//! unified memory, each event joined to its kernel once no later kernel can hold it (`stream_um`), CUDA graphs,
//! each replay summed until final (`stream_graphs`, over a pass of their own), and counter averages, each
//! window's executions integrated against the series and only the sums kept (`stream_counters`).
//! A `--start/--end` window is streamed as a load reads it ([`stream_readers_in`]; the counter samples overlapping
//! it, as a load keeps them; the graphs joined over the window's calls and NVTX ranges, as a load with the window
//! joins them).

use std::collections::HashMap;
use std::path::PathBuf;

use cutr_format::Reader;
use cutr_model::stream::{
    Batch, RangeStacks, StreamEnd, StreamOptions, stream_readers_in, stream_readers_in_with_range_work,
};
use cutr_model::{Filter, LoadError, NameId, ProcId, Trace, describe};
use rustc_hash::FxHashMap;
use serde::Serialize;

use super::families::NvtxNames;
use super::nvtx_stream::NvtxRows;
use super::order_stats::{Durations, SKETCH_RELATIVE_ERROR};
use super::stream_counters::StreamedCounters;
use super::stream_graphs::StreamedGraphs;
use super::stream_memory::StreamedMemory;
use super::stream_um::StreamedUm;
use super::stream_utilization::StreamedUtilization;
use super::{MemoryOps, Section, Stats, StatsOptions, Summary, rank_and_cut, saturating_sum};

/// The sections a stream computes.
pub const STREAMED_SECTIONS: [Section; 9] = [
    Section::Kernels,
    Section::Api,
    Section::Memory,
    Section::Nvtx,
    Section::Graphs,
    Section::Utilization,
    Section::Um,
    Section::Loss,
    Section::Counters,
];

/// How a report was streamed, for its reader.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StreamReport {
    pub chunks: u64,
    pub windows: u64,
    /// Decompressed record bytes of the largest window of chunks decoded at once.
    pub largest_window_bytes: u64,
    /// Rows with more instances than this have a sketch's median.
    pub exact_values_cap: usize,
    pub sketch_relative_error: f64,
    /// Rows whose median is an estimate.
    pub estimated_rows: u64,
    /// What was asked for that a stream does not compute (`--no-stream` computes them): sections by name.
    pub not_computed: Vec<String>,
    /// API calls whose NVTX ranges are kept for the GPU work they launch.
    pub launch_horizon: usize,
    /// GPU work whose launching call fell out of that horizon: counted in no NVTX range.
    pub launches_out_of_horizon: u64,
    /// CUDA graph ops, in files with graph events, whose launching call was not at hand (out of the horizon, not
    /// read yet, or never recorded): traced back to their node at their own start, not the launch's (the same
    /// node unless an executable update came between the two).
    pub graph_ops_traced_at_own_start: u64,
}

/// The report's line about the stream: how it was read, which figures are estimates and what was not computed.
pub fn describe(st: &StreamReport) -> String {
    let mut text = format!(
        "Streamed over {} chunks in {} windows (--stream; at most {} MB of records decoded at once): counts, totals, \
         min, max, averages, utilization, memory peaks and unified memory exact, counter averages up to the order \
         of their sums; medians exact up to {} instances, \
         beyond from a sketch within {}% (marked ~, {} rows)",
        crate::fmt::thousands(st.chunks),
        crate::fmt::thousands(st.windows),
        crate::fmt::thousands(st.largest_window_bytes.div_ceil(1 << 20)),
        crate::fmt::thousands(st.exact_values_cap as u64),
        st.sketch_relative_error * 100.0,
        crate::fmt::thousands(st.estimated_rows),
    );
    if !st.not_computed.is_empty() {
        let names = &st.not_computed;
        text += &format!("; not computed when streaming: {} (--no-stream computes them)", names.join(", "));
    }
    text += &format!(
        "; NVTX: GPU work by the opening thread only, no GPU spans; GPU ops whose launch fell out of the last {} \
         launches: {}",
        crate::fmt::thousands(st.launch_horizon as u64),
        crate::fmt::thousands(st.launches_out_of_horizon)
    );
    if st.graph_ops_traced_at_own_start > 0 {
        text += &format!(
            "; CUDA graph ops traced back at their own start, their launching call not at hand: {}",
            crate::fmt::thousands(st.graph_ops_traced_at_own_start)
        );
    }
    text
}

/// Rows keyed by name, each with its accumulator.
struct Rows<T> {
    index: HashMap<String, usize>,
    rows: Vec<(String, T)>,
}

impl<T> Default for Rows<T> {
    fn default() -> Self {
        Rows { index: HashMap::new(), rows: Vec::new() }
    }
}

impl<T> Rows<T> {
    fn row(&mut self, name: String, make: impl FnOnce() -> T) -> usize {
        *self.index.entry(name).or_insert_with_key(|n| {
            self.rows.push((n.clone(), make()));
            self.rows.len() - 1
        })
    }
}

/// A memory operation row: its durations and bytes.
type MemoryRow = (Durations, u64);

/// Every accumulator of a streamed report; each section's apart, so that a batch's sections are summed at once.
struct Accumulators {
    cap: usize,
    kernel_rows: FxHashMap<NameId, usize>,
    kernels: Rows<Durations>,
    api_rows: FxHashMap<(ProcId, bool, u32), usize>,
    api: Rows<Durations>,
    /// (0 copy kind, source, destination) or (1 memset memory kind).
    memory_rows: FxHashMap<(u8, u16, u8, u8), usize>,
    memory: Rows<MemoryRow>,
    nvtx: NvtxRows,
    gpu_time: u64,
}

impl Accumulators {
    fn new(cap: usize, nvtx_names: NvtxNames) -> Accumulators {
        Accumulators {
            cap,
            kernel_rows: FxHashMap::default(),
            kernels: Rows::default(),
            api_rows: FxHashMap::default(),
            api: Rows::default(),
            memory_rows: FxHashMap::default(),
            memory: Rows::default(),
            nvtx: NvtxRows::new(cap, nvtx_names),
            gpu_time: 0,
        }
    }

    fn add(&mut self, t: &Trace, b: &Batch, window: &Filter, on: &(dyn Fn(Section) -> bool + Sync)) {
        let cap = self.cap;
        let (kernel_rows, kernels) = (&mut self.kernel_rows, &mut self.kernels);
        let (api_rows, api) = (&mut self.api_rows, &mut self.api);
        let (memory_rows, memory, nvtx) = (&mut self.memory_rows, &mut self.memory, &mut self.nvtx);
        let gpu_time = &mut self.gpu_time;
        rayon::scope(|s| {
            if on(Section::Kernels) {
                s.spawn(move |_| {
                    for k in &b.kernels {
                        let row = *kernel_rows.entry(k.name).or_insert_with(|| {
                            let name = cutr_model::demangle::demangle(t.names.get(k.name));
                            kernels.row(name, || Durations::new(cap))
                        });
                        kernels.rows[row].1.add(k.duration());
                    }
                });
            }
            if on(Section::Api) {
                s.spawn(move |_| {
                    for a in &b.apis {
                        let row = *api_rows.entry((a.proc, a.driver, a.cbid)).or_insert_with(|| {
                            api.row(t.api_name_of(a.proc, a.driver, a.cbid), || Durations::new(cap))
                        });
                        api.rows[row].1.add(a.duration());
                    }
                });
            }
            if on(Section::Memory) {
                s.spawn(move |_| add_memory(memory_rows, memory, b, cap));
            }
            if on(Section::Nvtx) {
                s.spawn(move |_| nvtx.add(t, b, window));
            }
            let durations = b.kernels.iter().map(|k| k.duration());
            let durations = durations.chain(b.memcpys.iter().map(|m| m.duration()));
            *gpu_time =
                gpu_time.saturating_add(saturating_sum(durations.chain(b.memsets.iter().map(|m| m.duration()))));
        });
    }
}

fn add_memory(rows: &mut FxHashMap<(u8, u16, u8, u8), usize>, memory: &mut Rows<MemoryRow>, b: &Batch, cap: usize) {
    let copies = b.memcpys.iter().map(|m| ((0, m.copy_kind as u16, m.src_kind, m.dst_kind), m.duration(), m.bytes));
    let sets = b.memsets.iter().map(|m| ((1, m.memory_kind, 0, 0), m.duration(), m.bytes));
    for (key, d, bytes) in copies.chain(sets) {
        let row = *rows.entry(key).or_insert_with(|| {
            let name = match key {
                (0, c, s, d) => describe::memcpy_name(c as u8, s, d),
                (_, m, ..) => describe::memset_name(m),
            };
            memory.row(name, || (Durations::new(cap), 0))
        });
        let r = &mut memory.rows[row].1;
        r.0.add(d);
        r.1 = r.1.saturating_add(bytes);
    }
}

/// What the folds that wait for the stream's edge warn of: rows settled early (more than `max_waiting` waited) or
/// read late (damaged or forged chunk headers).
fn edge_warnings(
    utilization: &StreamedUtilization,
    memory: &StreamedMemory,
    um: &StreamedUm,
    end: &StreamEnd,
    max_waiting: usize,
) -> Vec<String> {
    let mut warnings = utilization.warnings();
    warnings.extend(memory.warnings());
    warnings.extend(um.warnings(max_waiting));
    if end.held_released_early > 0 {
        warnings.push(super::stream_utilization::settled_early_warning(
            "GPU work waiting for its launching call",
            end.held_released_early,
            max_waiting,
        ));
    }
    warnings
}

/// The memory operations' rows from their accumulators: summarized, ranked and cut to `top`.
fn memory_summaries(
    rows: Rows<MemoryRow>,
    top: Option<usize>,
    estimated: &mut u64,
) -> (Vec<MemoryOps>, Option<super::RowsLeftOut>) {
    let mut out: Vec<MemoryOps> = rows
        .rows
        .into_iter()
        .map(|(n, (d, bytes))| {
            *estimated += d.estimated() as u64;
            let time = d.summary(n);
            let bw = if time.total_ns > 0 { bytes as f64 / time.total_ns as f64 } else { 0.0 };
            MemoryOps { time, bytes, bandwidth_gbps: bw }
        })
        .collect();
    let left_out = rank_and_cut(&mut out, top);
    (out, left_out)
}

/// The sections asked for that `streamed` computes (in the report's order), and the names of the others.
fn split_sections(asked: &[Section], streamed: impl Fn(&Section) -> bool) -> (Vec<Section>, Vec<String>) {
    let mut sections: Vec<Section> = asked.to_vec();
    sections.sort_unstable();
    sections.dedup();
    let (computed, not): (Vec<Section>, Vec<Section>) = sections.into_iter().partition(|s| streamed(s));
    (computed, not.iter().map(|s| s.as_str().to_string()).collect())
}

/// [`stream_readers_in`], with the NVTX range instances' GPU work when `range_work`.
fn stream_with(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &StreamOptions,
    filter: &Filter,
    range_work: bool,
    consume: impl FnMut(&Trace, &RangeStacks, Batch) + Send,
) -> Result<(Trace, StreamEnd), LoadError> {
    match range_work {
        true => stream_readers_in_with_range_work(paths, readers, opts, filter, consume),
        false => stream_readers_in(paths, readers, opts, filter, consume),
    }
}

/// The rows of a section from their accumulators: summarized, ranked and cut to `top`.
fn summaries(
    rows: Rows<Durations>,
    top: Option<usize>,
    estimated: &mut u64,
) -> (Vec<Summary>, Option<super::RowsLeftOut>) {
    let mut out: Vec<Summary> = rows
        .rows
        .into_iter()
        .map(|(n, d)| {
            *estimated += d.estimated() as u64;
            d.summary(n)
        })
        .collect();
    let left_out = rank_and_cut(&mut out, top);
    (out, left_out)
}

/// `stats` streamed over the activity of `readers` (labelled by `paths`), keeping up to `cap` values per row for
/// exact medians. The sections a stream cannot compute stay empty and are named in [`Stats::stream`]. Also returns
/// the trace of the inputs' processes (no rows), whose problems and join counts are the inputs' warnings.
pub fn compute_streaming(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &StatsOptions,
    cap: usize,
    stream_opts: &StreamOptions,
) -> Result<(Stats, Trace), LoadError> {
    compute_streaming_in(paths, readers, opts, &Filter::default(), cap, stream_opts)
}

/// [`compute_streaming`] over the records `filter`'s `--start/--end` window keeps, as a load with that filter
/// keeps them: the same figures as [`super::compute`] of that load. The report's [`Stats::window`] is the
/// caller's to say.
pub fn compute_streaming_in(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &StatsOptions,
    filter: &Filter,
    cap: usize,
    stream_opts: &StreamOptions,
) -> Result<(Stats, Trace), LoadError> {
    let on = |s: Section| opts.sections.contains(&s);
    let streamed = |s: &Section| STREAMED_SECTIONS.contains(s);
    let mut acc = Accumulators::new(cap, opts.nvtx_names);
    let mut utilization = StreamedUtilization::new(stream_opts.max_waiting);
    let mut memory = StreamedMemory::new(stream_opts.max_waiting);
    let mut um = StreamedUm::new(stream_opts.max_waiting);
    let mut graphs = match on(Section::Graphs) {
        true => Some(StreamedGraphs::open(paths, readers, stream_opts, filter, cap)?),
        false => None,
    };
    let mut counters = StreamedCounters::new(stream_opts.max_waiting);
    // The counter samples come window by window, a chunk at a time (in a --start/--end window, the samples
    // overlapping it, as a load reads them).
    let counters_on = on(Section::Counters);
    let stream_opts = &StreamOptions { counter_feed: stream_opts.counter_feed || counters_on, ..stream_opts.clone() };
    // NVTX rows get each closed range instance's GPU work once final (an instance never closed gets none, as at
    // load): the stream tracks the instances only when the section is asked for.
    let nvtx_on = on(Section::Nvtx);
    let (mut t, end) = stream_with(paths, readers, stream_opts, filter, nvtx_on, |t, _, batch| {
        let settled = || {
            if on(Section::Utilization) {
                utilization.add(&batch);
            }
            if on(Section::Memory) {
                memory.add(&batch);
            }
            if on(Section::Um) {
                um.add(&batch);
            }
            if let Some(g) = &mut graphs {
                g.add(&batch);
            }
            if counters_on {
                counters.add(t, &batch);
            }
        };
        rayon::join(|| acc.add(t, &batch, filter, &on), settled);
    })?;
    let mut estimated = 0;
    let (kernels, kernels_left_out) = summaries(acc.kernels, opts.top, &mut estimated);
    let (api, api_left_out) = summaries(acc.api, opts.top, &mut estimated);
    let (memory_ops, memory_ops_left_out) = memory_summaries(acc.memory, opts.top, &mut estimated);
    let mut nvtx = acc.nvtx.finish(&mut estimated);
    let graphs = graphs.map(|g| g.finish(&mut t, &mut nvtx, opts)).unwrap_or_default();
    estimated += graphs.estimated_rows;
    let nvtx_left_out = rank_and_cut(&mut nvtx, opts.top);
    // Past the sums a stream keeps, counters are not computed either (the warning says why).
    let counters_on = counters_on && !counters.gave_up();
    let streamed = |s: &Section| streamed(s) && (*s != Section::Counters || counters_on);
    let (sections, not_computed) = split_sections(&opts.sections, streamed);
    let mut warnings = edge_warnings(&utilization, &memory, &um, &end, stream_opts.max_waiting);
    warnings.extend(graphs.warning);
    let counters_warning = counters.warning();
    let counters =
        if counters_on { counters.section(&t, opts.top, super::counters::MAX_ROWS) } else { Default::default() };
    warnings.extend(counters.warnings().into_iter().chain(counters_warning));
    let um = if on(Section::Um) { um.report(&t, opts.top, &opts.symbol_dirs) } else { Default::default() };
    let stats = Stats {
        files: t.processes.iter().map(|p| p.path.display().to_string()).collect(),
        sections,
        nvtx_attribution: "thread",
        kernels,
        kernels_left_out,
        api,
        api_left_out,
        memory_ops,
        memory_ops_left_out,
        nvtx,
        nvtx_left_out,
        graphs: graphs.report,
        memory_peaks: memory.peaks(&t, end.span.0),
        utilization: if on(Section::Utilization) { utilization.rows() } else { Vec::new() },
        counters: counters.rows,
        counter_groups_not_shown: counters.groups_not_shown,
        um,
        warnings,
        gpu_time_ns: acc.gpu_time,
        span_ns: end.span.1 - end.span.0,
        loss: t.loss().entries().iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        joins: t.stats.clone(),
        stream: Some(StreamReport {
            chunks: end.chunks,
            windows: end.windows,
            largest_window_bytes: end.largest_window_bytes,
            exact_values_cap: cap,
            sketch_relative_error: SKETCH_RELATIVE_ERROR,
            estimated_rows: estimated,
            not_computed,
            launch_horizon: stream_opts.horizon,
            launches_out_of_horizon: end.launches_out_of_horizon,
            graph_ops_traced_at_own_start: graphs.traced_at_own_start,
        }),
        ..Default::default()
    };
    Ok((stats, t))
}
