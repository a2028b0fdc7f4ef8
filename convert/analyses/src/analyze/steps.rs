//! Steps: the windows budgets are split by and rules judge against. NVTX ranges named by `--step PREFIX` (as
//! `stats --by-rank --step` finds them), else PyTorch's `ProfilerStep#N` ranges, else each CUDA graph launch where
//! a process's GPU work is mostly graph replays, else none.

use compact_str::{CompactString, format_compact};
use cutr_model::{CorrKey, ProcId, Trace};
use rustc_hash::FxHashMap;

use super::types::{Step, StepSource};
use crate::ranks::is_step_range;

/// The prefix of the ranges PyTorch's profiler opens around each `step()`.
pub(crate) const PROFILER_STEP: &str = "ProfilerStep#";

/// A process's GPU work is "mostly graph replays" when graph ops take more than this share of its GPU op time.
const GRAPH_SHARE: f64 = 0.5;

/// Every process's steps, sorted by (process, start) and numbered in time order within each process, and where
/// they came from. With `prefix`, the ranges it names (none found: no steps, but the source still says what was
/// asked).
pub fn find_steps(trace: &Trace, prefix: Option<&str>) -> (StepSource, Vec<Step>) {
    if let Some(p) = prefix {
        return (StepSource::NvtxPrefix(p.to_string()), nvtx_steps(trace, p));
    }
    let steps = nvtx_steps(trace, PROFILER_STEP);
    if !steps.is_empty() {
        return (StepSource::ProfilerStep, steps);
    }
    let steps = graph_launch_steps(trace);
    if !steps.is_empty() {
        return (StepSource::GraphLaunches, steps);
    }
    (StepSource::None, Vec::new())
}

fn nvtx_steps(trace: &Trace, prefix: &str) -> Vec<Step> {
    let raw = trace
        .ranges
        .iter()
        .filter(|r| is_step_range(trace, r, prefix))
        .map(|r| (r.proc, r.start, r.end, CompactString::from(trace.names.get(r.name))))
        .collect();
    number_steps(trace, raw)
}

/// Sorts `(proc, start, end, name)` and numbers each process's steps in time order.
pub(crate) fn number_steps(trace: &Trace, mut raw: Vec<(ProcId, u64, u64, CompactString)>) -> Vec<Step> {
    raw.sort_by_key(|a| (a.0, a.1, a.2));
    let ranks = trace.job_ranks();
    let mut out: Vec<Step> = Vec::with_capacity(raw.len());
    for (proc, start, end, name) in raw {
        let index = match out.last() {
            Some(prev) if prev.proc == proc => prev.index + 1,
            _ => 0,
        };
        out.push(Step { proc, rank: ranks[proc.index()].0, index, name, start, end });
    }
    out
}

/// Each graph launch of a process whose GPU time is mostly graph replays: from the launching call's start to
/// the end of the last op it launched.
fn graph_launch_steps(trace: &Trace) -> Vec<Step> {
    let files = trace.processes.len();
    // Per file: (graph op time, all op time); per graph launch (its correlation): the end of its last op.
    let mut time = vec![(0u64, 0u64); files];
    let mut launch_end: FxHashMap<CorrKey, u64> = FxHashMap::default();
    let mut add = |proc: ProcId, graph_id: u32, corr: CorrKey, end: u64, ns: u64| {
        let t = &mut time[proc.index()];
        t.1 += ns;
        if graph_id != 0 {
            t.0 += ns;
            let e = launch_end.entry(corr).or_insert(end);
            *e = (*e).max(end);
        }
    };
    for k in &trace.kernels {
        add(k.proc, k.graph_id, k.corr(), k.end, k.end.saturating_sub(k.start));
    }
    for m in &trace.memcpys {
        add(m.proc, m.graph_id, m.corr(), m.end, m.end.saturating_sub(m.start));
    }
    for m in &trace.memsets {
        add(m.proc, m.graph_id, m.corr(), m.end, m.end.saturating_sub(m.start));
    }
    let mostly_graphs = graph_launch_is_mostly_graphs(&time);
    let raw = launch_end
        .into_iter()
        .filter(|(key, _)| mostly_graphs[key.proc.index()])
        .filter_map(|(key, end)| {
            let call = trace.launcher(key)?;
            Some((key.proc, call.start, end.max(call.start), CompactString::default()))
        })
        .collect();
    let mut steps = number_steps(trace, raw);
    for s in &mut steps {
        s.name = format_compact!("graph launch {}", s.index + 1);
    }
    steps
}

/// Per process, from its (graph op time, all op time): whether its graph launches are its steps.
pub(crate) fn graph_launch_is_mostly_graphs(time: &[(u64, u64)]) -> Vec<bool> {
    time.iter().map(|&(g, all)| all > 0 && g as f64 > GRAPH_SHARE * all as f64).collect()
}
