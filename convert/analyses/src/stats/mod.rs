//! `cupti-convert stats`: where GPU time went, like `nsys stats`: kernels, API calls, copies and memsets, NVTX
//! ranges with the GPU time of the work launched inside them (and of the CUDA graph work captured inside them),
//! CUDA graphs' replays by where their nodes were made, per-stream and per-device utilization, and what was lost.

mod buckets;
mod counter_live;
mod counter_math;
mod counter_met;
mod counter_render;
mod counter_windows;
pub(crate) mod counters;
mod families;
mod graph_sites;
mod graphs;
mod graphs_render;
mod nvtx_stream;
mod order_stats;
mod render;
mod sections;
mod stream;
pub(crate) mod stream_counters;
#[cfg(test)]
mod stream_counters_tests;
mod stream_graphs;
mod stream_memory;
mod stream_um;
pub(crate) mod stream_utilization;
pub(crate) mod um;
mod um_render;
mod window;

use serde::Serialize;

use cutr_model::{JoinStats, Trace};
use rayon::prelude::*;

pub use counters::{CounterAverage, MAX_ROWS as MAX_COUNTER_ROWS, average_over_intervals as counter_average_over};
pub use families::NvtxNames;
pub use graph_sites::CaptureSite;
pub use graphs::{CaptureRange, GraphExecStats, GraphReport};
pub use order_stats::{Durations, EXACT_VALUES_CAP, SKETCH_RELATIVE_ERROR};
pub use render::{TextOptions, render_csv, render_text};
pub use stream::{
    STREAMED_SECTIONS, StreamReport, compute_streaming, compute_streaming_in, describe as describe_stream,
};
pub use stream_utilization::settled_early_warning;
pub use um::{
    UmAddress, UmCause, UmCpuFaults, UmGpuFaults, UmHostFunction, UmKernel, UmMigrations, UmRegion, UmReport,
    UmThrottling, VA_BLOCK,
};
pub use window::keep_gpu_work_in_ranges;

/// A section of the report, selectable with `--report` (as `nsys stats -r`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Section {
    Kernels,
    Api,
    Memory,
    Nvtx,
    /// CUDA graphs; in the text report only when the trace has graph ops or events or the section was asked for.
    Graphs,
    Utilization,
    Counters,
    /// Unified memory; in the text report only when the trace has UM events or the section was asked for.
    Um,
    Loss,
}

impl Section {
    pub const ALL: [Section; 9] = [
        Section::Kernels,
        Section::Api,
        Section::Memory,
        Section::Nvtx,
        Section::Graphs,
        Section::Utilization,
        Section::Counters,
        Section::Um,
        Section::Loss,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Section::Kernels => "kernels",
            Section::Api => "api",
            Section::Memory => "memory",
            Section::Nvtx => "nvtx",
            Section::Graphs => "graphs",
            Section::Utilization => "utilization",
            Section::Counters => "counters",
            Section::Um => "um",
            Section::Loss => "loss",
        }
    }

    pub fn parse(name: &str) -> Option<Section> {
        Section::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// What `stats` computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsOptions {
    /// The N biggest rows of each section; `None` for all.
    pub top: Option<usize>,
    /// The sections to compute (the others stay empty).
    pub sections: Vec<Section>,
    /// NVTX ranges get the GPU work launched by any thread of their process while they were open, not only by
    /// the thread that opened them.
    pub nvtx_across_threads: bool,
    /// Where to look, by file name, for the host binaries a recording's mappings name when they are not at their
    /// recorded path (the `um` section's host functions, the `graphs` section's capture sites; build ids are still
    /// checked).
    pub symbol_dirs: Vec<std::path::PathBuf>,
    /// NVTX range names with a number (`step 17`): folded into one row per family of more than
    /// `cutr_model::numbered::FAMILY_ROWS_CAP` names (the default), or each its own row.
    pub nvtx_names: NvtxNames,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions {
            top: None,
            sections: Section::ALL.to_vec(),
            nvtx_across_threads: false,
            symbol_dirs: Vec::new(),
            nvtx_names: NvtxNames::Fold,
        }
    }
}

/// Summary statistics of a set of durations (ns).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
    /// Share of the section's total time.
    pub percent: f64,
    pub avg_ns: f64,
    pub median_ns: f64,
    /// The median is a sketch's estimate (`stats --stream`, a row past the exact-value cap; [`StreamReport`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub median_estimated: bool,
    pub min_ns: u64,
    pub max_ns: u64,
    pub stddev_ns: f64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Builds a summary from durations (sorted in place).
pub fn summarize(name: String, durs: &mut [u64]) -> Summary {
    durs.par_sort_unstable();
    let n = durs.len() as u64;
    let total = saturating_sum(durs.iter().copied());
    let avg = if n > 0 { total as f64 / n as f64 } else { 0.0 };
    let median = match durs.len() {
        0 => 0.0,
        l if l % 2 == 1 => durs[l / 2] as f64,
        l => (durs[l / 2 - 1] + durs[l / 2]) as f64 / 2.0,
    };
    // Sample standard deviation, as nsys reports it.
    let var = if n > 1 { durs.iter().map(|&d| (d as f64 - avg).powi(2)).sum::<f64>() / (n - 1) as f64 } else { 0.0 };
    Summary {
        name,
        count: n,
        total_ns: total,
        percent: 0.0,
        avg_ns: avg,
        median_ns: median,
        median_estimated: false,
        min_ns: durs.first().copied().unwrap_or(0),
        max_ns: durs.last().copied().unwrap_or(0),
        stddev_ns: var.sqrt(),
    }
}

/// The sum of durations or bytes, held at `u64::MAX` (a hostile record's duration may be near it: wrapping would
/// print a small total as if it were true).
pub(crate) fn saturating_sum(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

/// The rows of a section past `--top`, summed up: the report's last line of that section says what they were.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RowsLeftOut {
    pub rows: u64,
    pub total_ns: u64,
    /// Their share of the section's time (every row's, those shown included).
    pub percent: f64,
}

/// A row of a section ranked by time: its summary.
pub(crate) trait Timed {
    fn time(&self) -> &Summary;
    fn time_mut(&mut self) -> &mut Summary;
}

impl Timed for Summary {
    fn time(&self) -> &Summary {
        self
    }
    fn time_mut(&mut self) -> &mut Summary {
        self
    }
}

/// A section's rows, biggest first (then by name), each with its share of the section's time, cut to the `top`
/// biggest; and what was cut, summed.
pub(crate) fn rank_and_cut<T: Timed>(rows: &mut Vec<T>, top: Option<usize>) -> Option<RowsLeftOut> {
    let total = saturating_sum(rows.iter().map(|r| r.time().total_ns));
    for r in rows.iter_mut() {
        let s = r.time_mut();
        s.percent = if total > 0 { 100.0 * s.total_ns as f64 / total as f64 } else { 0.0 };
    }
    rows.sort_by(|a, b| {
        let (a, b) = (a.time(), b.time());
        b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name))
    });
    let top = top?;
    if rows.len() <= top {
        return None;
    }
    let cut = rows.split_off(top);
    let cut_ns = saturating_sum(cut.iter().map(|r| r.time().total_ns));
    Some(RowsLeftOut {
        rows: cut.len() as u64,
        total_ns: cut_ns,
        percent: if total > 0 { 100.0 * cut_ns as f64 / total as f64 } else { 0.0 },
    })
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MemoryOps {
    #[serde(flatten)]
    pub time: Summary,
    pub bytes: u64,
    /// bytes / total time, in GB/s (1e9 bytes).
    pub bandwidth_gbps: f64,
}

impl Timed for MemoryOps {
    fn time(&self) -> &Summary {
        &self.time
    }
    fn time_mut(&mut self) -> &mut Summary {
        &mut self.time
    }
}

/// Memory of one class in use (MEMORY2 allocations less frees) on one device of one file: its peak, when, and the
/// allocation that reached it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MemoryPeak {
    pub file: String,
    pub device: u32,
    /// `device` (`cudaMalloc`, pools, arrays, `__device__` variables), `managed` (`cudaMallocManaged`: resident
    /// wherever last touched, so counted apart) or `pinned host` (`cudaMallocHost`).
    pub memory: &'static str,
    pub peak_bytes: u64,
    /// When the peak was first reached, from the start of the trace (its first record).
    pub peak_at_ns: u64,
    /// The allocation that reached it: its address, bytes and memory kind (`Device`, `Managed`...).
    pub allocation_address: u64,
    pub allocation_bytes: u64,
    pub allocation_kind: &'static str,
    pub allocations: u64,
    pub frees: u64,
    /// Frees of memory allocated before recording began (not subtracted: the total never held them).
    pub frees_without_allocation: u64,
    pub bytes_at_end: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RangeStats {
    #[serde(flatten)]
    pub time: Summary,
    /// For a family of numbered names folded into one row (`step <n>`, [`NvtxNames::Fold`]): how many range names
    /// it holds, its figures their ranges' together; 0 (and absent in JSON) for a row of one name.
    #[serde(skip_serializing_if = "is_zero")]
    pub folded_names: u64,
    /// GPU time (kernels, copies, memsets) of the work launched by API calls inside these ranges (nested
    /// ranges included).
    pub gpu_ns: u64,
    pub gpu_ops: u64,
    /// GPU time of the CUDA graph kernels, copies and memsets whose node was made (captured, or added) inside these
    /// ranges on their thread, nested ranges included, wherever the graph was launched: a replay launched in
    /// another range counts there in `gpu_ns` and here for the range it was captured in. Counted apart, never
    /// added to `gpu_ns` (a graph captured and launched in one range would be counted twice).
    pub replayed_gpu_ns: u64,
    pub replayed_gpu_ops: u64,
    /// The GPU spans of these ranges, summed: per range and stream, first start to last end of the work the range
    /// launched itself (not inside a range nested in it), by the thread that opened it whatever the attribution
    /// of `gpu_ns` (`cutr_model::nvtx_spans`). What both viewers draw as `gpu_user_annotation` slices, and what
    /// HTA's `get_gpu_user_annotation_breakdown` adds up.
    pub gpu_span_ns: u64,
    pub gpu_spans: u64,
}

impl Timed for RangeStats {
    fn time(&self) -> &Summary {
        &self.time
    }
    fn time_mut(&mut self) -> &mut Summary {
        &mut self.time
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Utilization {
    pub device: u32,
    /// `None` for the device as a whole.
    pub stream: Option<u32>,
    /// Time with at least one kernel, copy or memset running (union of intervals).
    pub busy_ns: u64,
    /// First start to last end of GPU work on the device or stream (not the recording's span: start-up and host
    /// work before the first GPU operation are not in it).
    pub span_ns: u64,
    pub percent: f64,
    pub ops: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub files: Vec<String>,
    /// The part of the recordings reported (`--start`/`--end`, `--nvtx`), in words; absent for all of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// The sections computed; the others' lists are empty.
    pub sections: Vec<Section>,
    /// How NVTX ranges' GPU work was attributed: `thread` (launched by the range's own thread) or
    /// `process` (by any thread of its process while it was open).
    pub nvtx_attribution: &'static str,
    pub kernels: Vec<Summary>,
    /// The kernels past `--top`, summed (absent when none was left out); the same for the other sections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels_left_out: Option<RowsLeftOut>,
    pub api: Vec<Summary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_left_out: Option<RowsLeftOut>,
    pub memory_ops: Vec<MemoryOps>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_ops_left_out: Option<RowsLeftOut>,
    /// Peak memory in use per (file, device, class) (the `memory` section).
    pub memory_peaks: Vec<MemoryPeak>,
    pub nvtx: Vec<RangeStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvtx_left_out: Option<RowsLeftOut>,
    /// CUDA graphs (the `graphs` section).
    pub graphs: GraphReport,
    pub utilization: Vec<Utilization>,
    /// Counter series averaged over kernels and NVTX ranges (`--counters` recordings), at most
    /// [`MAX_COUNTER_ROWS`].
    pub counters: Vec<CounterAverage>,
    /// (kernel, copy or range, device) groups whose counter averages are past [`MAX_COUNTER_ROWS`], left out.
    pub counter_groups_not_shown: usize,
    /// Unified memory (the `um` section).
    pub um: UmReport,
    pub gpu_time_ns: u64,
    pub span_ns: u64,
    pub loss: std::collections::BTreeMap<String, u64>,
    pub joins: JoinStats,
    /// Figures that came out as no number (named), shown with the report.
    pub warnings: Vec<String>,
    /// How the report was streamed over the recordings' chunks (`--stream`); absent when the trace was loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamReport>,
}

/// Everything is grouped and summarized in parallel: a 10M-record trace's sections took ~0.45 s on one worker,
/// which made `stats` slower on a 16-core host (slower per core) than on a 2-core laptop.
pub fn compute(t: &Trace, opts: &StatsOptions) -> Stats {
    use cutr_model::timing::timed;
    let top = opts.top;
    let on = |s: Section| opts.sections.contains(&s);
    let (kernels, kernels_left_out) =
        if on(Section::Kernels) { timed("stats kernels", || sections::kernels(t, top)) } else { Default::default() };
    let (api, api_left_out) =
        if on(Section::Api) { timed("stats api", || sections::api(t, top)) } else { Default::default() };
    let (memory_ops, memory_ops_left_out) =
        if on(Section::Memory) { timed("stats memory", || sections::memory_ops(t, top)) } else { Default::default() };
    let memory_peaks = if on(Section::Memory) { sections::memory_peaks(t) } else { Vec::new() };
    let um =
        if on(Section::Um) { timed("stats um", || um::um(t, top, &opts.symbol_dirs)) } else { UmReport::default() };
    let (nvtx, nvtx_left_out) = if on(Section::Nvtx) {
        timed("stats nvtx", || sections::nvtx(t, top, opts.nvtx_across_threads, opts.nvtx_names))
    } else {
        Default::default()
    };
    let graphs = if on(Section::Graphs) {
        timed("stats graphs", || graphs::graphs(t, top, &opts.symbol_dirs))
    } else {
        GraphReport::default()
    };
    // The GPU time of the header comes with the utilization's intervals.
    let (mut utilization, gpu_time) = timed("stats utilization", || sections::utilization(t));
    if !on(Section::Utilization) {
        utilization.clear();
    }
    let counters = if on(Section::Counters) {
        timed("stats counters", || counters::section(t, top, counters::MAX_ROWS))
    } else {
        counters::CounterSection::default()
    };
    let mut warnings: Vec<String> =
        counters.not_finite.iter().map(|what| format!("the average of {what} is not a number")).collect();
    if counters.series_over_nothing > 0 {
        // A part of a --split recording holds the records delivered while it was written: the kernels that ran in
        // its samples' time can be in the next part.
        warnings.push(format!(
            "{} counter series were recorded, but no kernel, copy or NVTX range ran while their samples were taken: \
             no averages (read a --split recording's parts together)",
            counters.series_over_nothing
        ));
    }
    let (a, b) = t.span();
    let mut sections = opts.sections.clone();
    sections.sort_unstable();
    sections.dedup();
    Stats {
        files: t.processes.iter().map(|p| p.path.display().to_string()).collect(),
        window: None,
        sections,
        nvtx_attribution: if opts.nvtx_across_threads { "process" } else { "thread" },
        kernels,
        kernels_left_out,
        api,
        api_left_out,
        memory_ops,
        memory_ops_left_out,
        memory_peaks,
        nvtx,
        nvtx_left_out,
        graphs,
        utilization,
        counters: counters.rows,
        counter_groups_not_shown: counters.groups_not_shown,
        um,
        gpu_time_ns: gpu_time,
        span_ns: b - a,
        loss: t.loss().entries().iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        joins: t.stats.clone(),
        warnings,
        stream: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_of_durations_match_nsys_definitions() {
        let s = summarize("k".into(), &mut [30, 10, 20, 40]);
        assert_eq!((s.count, s.total_ns, s.min_ns, s.max_ns, s.median_ns, s.avg_ns), (4, 100, 10, 40, 25.0, 25.0));
        assert!((s.stddev_ns - 12.909944487358056).abs() < 1e-9);
    }

    #[test]
    fn graph_events_lost_and_ops_not_traced_back_are_losses() {
        let mut t = Trace::default();
        (t.stats.graph_events_lost, t.stats.graph_ops_without_capture, t.stats.graph_events_unjoined) = (2, 3, 4);
        let s = compute(&t, &StatsOptions { sections: vec![Section::Loss], ..Default::default() });
        let text = render::render_text(&s, Default::default());
        let want = "Loss: CUDA graph events the recorder lost 2, CUDA graph ops not traced back to their node 3\n";
        assert!(text.ends_with(want), "{text}");
    }
}
