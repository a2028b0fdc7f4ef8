//! Launch health: launch latency (API call start to GPU start) and the launch call's CPU cost, per kernel name
//! and overall; queue depth per stream and time blocked on a full queue; kernels shorter than their launch.
//!
//! Ops are paired with their launching call by correlation id (runtime preferred over driver,
//! [`Trace::launcher_index`]) and kept in three classes that are never mixed: kernels launched by a call of their
//! own, copies and memsets launched by an `...Async` call, and ops replayed by a graph launch. A graph launch is
//! one call for all the ops it replays, so it counts once, with the latency to its first op: counting each op as
//! paying the call would charge one call many times.

#[path = "launch_collect.rs"]
pub(crate) mod collect;
#[path = "launch_dist.rs"]
pub(crate) mod dist;
#[path = "launch_queue.rs"]
pub(crate) mod queue;
#[path = "launch_render.rs"]
mod render;

use cutr_model::{ApiCall, NameId, Trace};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::Serialize;

use self::collect::{Class, Launch};
use super::types::{EventRef, MAX_EVIDENCE};
pub use dist::Dist;
pub use queue::{Blocked, FULL_QUEUE, MAX_SERIES_POINTS, StreamQueue};

/// Kernel names given their own row, the commonest first.
pub const TOP_NAMES: usize = 10;

/// The section over every launch in a trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LaunchHealth {
    /// The earliest record of any file (ns): evidence times are given after it, as `--start` takes them.
    pub first_record_ns: u64,
    /// Kernels launched by a call of their own.
    pub kernels: ClassHealth,
    /// Copies and memsets launched by an `...Async` call.
    pub async_copies: ClassHealth,
    /// Graph launches, one entry per launching call: latency to the first op it replayed, the call's cost.
    pub graph_launches: ClassHealth,
    /// Ops replayed by those graph launches.
    pub graph_ops: u64,
    /// The commonest kernel names (at most [`TOP_NAMES`]), by count, of the class `kernels`.
    pub by_name: Vec<NameHealth>,
    /// How many distinct kernel names `kernels` has.
    pub names: u64,
    /// Kernels (class `kernels`) that ran for less time than their launch call took (HTA's "short kernels").
    pub shorter_than_launch: ShortKernels,
    /// Launch queues by (file, device, stream), of kernels and async copies (graph launches not counted).
    pub queues: Vec<StreamQueue>,
    /// Launch calls that found their stream's queue full.
    pub blocked_on_full_queue: Blocked,
    /// GPU ops without a launching call in the file (device-side launches, lost API records): not counted.
    pub without_launcher: u64,
    /// Copies and memsets launched by a synchronous call (`cudaMemcpy`): not launches that queue, not counted.
    pub sync_copies: u64,
    /// Ops that started on the GPU before their launch call started (clock skew): counted with latency 0.
    pub started_before_call: u64,
}

/// Latency and CPU cost of one class of launches.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClassHealth {
    /// GPU op start − launch call start.
    pub latency: Dist,
    /// Launch call end − start.
    pub cpu_cost: Dist,
    /// Latencies beyond [`Dist::outlier_threshold_ns`].
    pub latency_outliers: Outliers,
    /// CPU costs beyond [`Dist::outlier_threshold_ns`].
    pub cpu_cost_outliers: Outliers,
}

/// The values beyond a distribution's outlier threshold.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Outliers {
    pub threshold_ns: u64,
    pub count: u64,
    /// The first few (at most [`MAX_EVIDENCE`]) in time order: the launch call's start to the op's start (latency)
    /// or the call's span (CPU cost).
    pub first: Vec<EventRef>,
}

/// One kernel name's launches.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NameHealth {
    /// Demangled.
    pub name: String,
    pub latency: Dist,
    pub cpu_cost: Dist,
    /// Of them, kernels shorter than their launch call.
    pub shorter_than_launch: u64,
}

/// Kernels that ran for less time than their launch call took.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ShortKernels {
    pub count: u64,
    /// Of the class `kernels`, in percent.
    pub share_pct: f64,
    /// The names with the most such kernels (at most [`MAX_EVIDENCE`]): (name, short ones, launches).
    pub top: Vec<(String, u64, u64)>,
}

/// What names a launch in evidence: a kernel its name, other launches their call (`cudaMemcpyAsync`,
/// `cudaGraphLaunch`).
pub(crate) fn launch_what(trace: &Trace, call: &ApiCall, name: Option<&str>) -> String {
    // Cut: a templated kernel's name runs to kilobytes, and evidence is for finding the launch, not reading it.
    name.map_or_else(|| trace.api_name(call), |n| n.chars().take(120).collect())
}

/// Which figure of a launch an outlier is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Figure {
    Latency,
    CpuCost,
}

impl Figure {
    /// The figure's value for a launch of `call` whose (first) op started at `op_start`.
    pub(crate) fn value(self, call: &ApiCall, op_start: u64) -> u64 {
        match self {
            Figure::Latency => collect::latency(call, op_start),
            Figure::CpuCost => collect::cost(call),
        }
    }

    /// An outlier's evidence: the call's start to the op's start (latency) or the call's span (CPU cost); `name`
    /// is a kernel's demangled name.
    pub(crate) fn evidence(self, trace: &Trace, call: &ApiCall, op_start: u64, name: Option<&str>) -> EventRef {
        let us = crate::fmt::thousands_1(self.value(call, op_start) as f64 / 1e3);
        let what = launch_what(trace, call, name);
        let (end, what) = match self {
            Figure::Latency => (op_start.max(call.start), format!("latency {us} us: {what}")),
            Figure::CpuCost => (call.end, format!("call {us} us: {what}")),
        };
        EventRef { proc: call.proc, start: call.start, end, correlation: call.correlation, what }
    }
}

/// The order outliers' evidence is given in: time order of the calls, then of the ops; file and correlation id
/// make it the same on every run and over a stream.
pub(crate) fn evidence_order(call: &ApiCall, op_start: u64) -> (u64, u64, u16, u32) {
    (call.start, op_start, call.proc.0, call.correlation)
}

/// The distribution of `figure` over `launches` and its outliers.
fn dist_and_outliers(trace: &Trace, launches: &[Launch], figure: Figure) -> (Dist, Outliers) {
    let call = |l: &Launch| &trace.apis[l.api as usize];
    let value = |l: &Launch| figure.value(call(l), l.op_start);
    let mut values: Vec<u64> = launches.par_iter().map(value).collect();
    values.par_sort_unstable();
    let d = Dist::of_sorted(&values);
    let threshold_ns = d.outlier_threshold_ns();
    let mut over: Vec<&Launch> = launches.par_iter().filter(|l| value(l) > threshold_ns).collect();
    over.par_sort_unstable_by_key(|l| evidence_order(call(l), l.op_start));
    let name = |l: &Launch| l.name.map(|n| trace.names.get(n));
    let first = over.iter().take(MAX_EVIDENCE).map(|l| figure.evidence(trace, call(l), l.op_start, name(l))).collect();
    (d, Outliers { threshold_ns, count: over.len() as u64, first })
}

/// Latency and cost of a class of launches.
fn class_health(trace: &Trace, launches: &[Launch]) -> ClassHealth {
    let (latency, latency_outliers) = dist_and_outliers(trace, launches, Figure::Latency);
    let (cpu_cost, cpu_cost_outliers) = dist_and_outliers(trace, launches, Figure::CpuCost);
    ClassHealth { latency, cpu_cost, latency_outliers, cpu_cost_outliers }
}

/// Graph launches, one per call, as a launch of the earliest op its replay started. Returns those and the number
/// of ops replayed.
fn graph_calls(graph: &[Launch]) -> (Vec<Launch>, u64) {
    let mut first_op: FxHashMap<u32, Launch> = FxHashMap::default();
    for l in graph {
        let e = first_op.entry(l.api).or_insert(*l);
        if l.op_start < e.op_start {
            *e = *l;
        }
    }
    let mut calls: Vec<Launch> = first_op.into_values().map(|l| Launch { name: None, ..l }).collect();
    calls.sort_unstable_by_key(|l| l.api);
    (calls, graph.len() as u64)
}

/// One kernel name's launches (class `kernels`) and how many of them were shorter than their call; `key` is what
/// finds the name's launches again (its demangled id on a load, its mangled ids over a stream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NameCount<K> {
    pub key: K,
    /// Demangled.
    pub name: String,
    pub launches: u64,
    pub short: u64,
}

/// Sorts `counts` the commonest name first (among equals by name, so the order is the same on every run) and
/// gives the short-kernel summary over them.
pub(crate) fn rank_names<K>(counts: &mut [NameCount<K>]) -> ShortKernels {
    counts.sort_by(|a, b| b.launches.cmp(&a.launches).then_with(|| a.name.cmp(&b.name)));
    let mut shorts: Vec<(String, u64, u64)> =
        counts.iter().filter(|c| c.short > 0).map(|c| (c.name.clone(), c.short, c.launches)).collect();
    shorts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let count: u64 = shorts.iter().map(|s| s.1).sum();
    let launches: u64 = counts.iter().map(|c| c.launches).sum();
    let share_pct = if launches == 0 { 0.0 } else { 100.0 * count as f64 / launches as f64 };
    shorts.truncate(MAX_EVIDENCE);
    ShortKernels { count, share_pct, top: shorts }
}

/// The name that stands for a kernel without one in the per-name groups.
pub(crate) const NO_NAME: NameId = NameId(u32::MAX);

/// Per kernel name: the commonest [`TOP_NAMES`], the count of names, and the short-kernel summary.
fn by_name(trace: &Trace, kernels: &[Launch]) -> (Vec<NameHealth>, u64, ShortKernels) {
    let mut groups: FxHashMap<NameId, Vec<usize>> = FxHashMap::default();
    for (i, l) in kernels.iter().enumerate() {
        groups.entry(l.name.unwrap_or(NO_NAME)).or_default().push(i);
    }
    let short = |i: &usize| {
        let l = &kernels[*i];
        collect::is_short(&trace.apis[l.api as usize], l.op_start, l.op_end)
    };
    let mut counts: Vec<NameCount<NameId>> = groups
        .iter()
        .map(|(n, idx)| NameCount {
            key: *n,
            name: trace.names.get(*n).to_string(),
            launches: idx.len() as u64,
            short: idx.iter().filter(|i| short(i)).count() as u64,
        })
        .collect();
    let shorter_than_launch = rank_names(&mut counts);
    let top = counts
        .iter()
        .take(TOP_NAMES)
        .map(|c| {
            let idx = &groups[&c.key];
            let mut lat: Vec<u64> = idx.iter().map(|&i| kernels[i].latency(trace)).collect();
            let mut cost: Vec<u64> = idx.iter().map(|&i| kernels[i].cost(trace)).collect();
            NameHealth {
                name: c.name.clone(),
                latency: Dist::of(&mut lat),
                cpu_cost: Dist::of(&mut cost),
                shorter_than_launch: c.short,
            }
        })
        .collect();
    (top, counts.len() as u64, shorter_than_launch)
}

/// The section over every launch in `trace`.
pub fn launch_health(trace: &Trace) -> LaunchHealth {
    let collected = collect::collect(trace);
    let started_before_call =
        collected.launches.par_iter().filter(|l| l.op_start < trace.apis[l.api as usize].start).count() as u64;
    let (mut kernels, mut copies, mut graph) = (Vec::new(), Vec::new(), Vec::new());
    for l in collected.launches {
        match l.class {
            Class::Kernel => kernels.push(l),
            Class::AsyncCopy => copies.push(l),
            Class::Graph => graph.push(l),
        }
    }
    let (graph_calls, graph_ops) = graph_calls(&graph);
    let (by_name, names, shorter_than_launch) = by_name(trace, &kernels);
    let queued = kernels
        .iter()
        .chain(copies.iter())
        .map(|l| {
            let a = &trace.apis[l.api as usize];
            queue::Queued { stream: l.stream, call_start: a.start, call_end: a.end, op_start: l.op_start }
        })
        .collect();
    let (queues, blocked_on_full_queue) = queue::queues(queued);
    LaunchHealth {
        first_record_ns: trace.span().0,
        kernels: class_health(trace, &kernels),
        async_copies: class_health(trace, &copies),
        graph_launches: class_health(trace, &graph_calls),
        graph_ops,
        by_name,
        names,
        shorter_than_launch,
        queues,
        blocked_on_full_queue,
        without_launcher: collected.without_launcher,
        sync_copies: collected.sync_copies,
        started_before_call,
    }
}

/// The section as text (appended to `o`).
pub fn render_text(o: &mut String, h: &LaunchHealth) {
    render::text(o, h);
}

/// The section as Markdown (appended to `o`).
pub fn render_markdown(o: &mut String, h: &LaunchHealth) {
    render::markdown(o, h);
}
