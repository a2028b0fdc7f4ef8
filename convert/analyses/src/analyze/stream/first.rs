//! The first pass: the steps (the NVTX ranges named as steps, or each graph launch of a process whose GPU time
//! is mostly graph replays) and each process's GPU span, as [`super::super::steps::find_steps`] finds them on a
//! load. Held: the step ranges (the answer), and one entry per graph launch while graph launches may still turn
//! out to be the steps.

use compact_str::{CompactString, format_compact};
use rustc_hash::FxHashMap;

use cutr_model::stream::Batch;
use cutr_model::{CorrKey, NvtxRange, ProcId, Trace};

use super::super::steps::{PROFILER_STEP, graph_launch_is_mostly_graphs, number_steps};
use super::super::types::StepSource;
use super::FirstPass;
use crate::ranks::is_step_range;

/// The first pass's state.
pub struct FirstFold {
    prefix: Option<String>,
    /// Closed ranges named as steps: by `--step PREFIX`, else `ProfilerStep#`.
    ranges: Vec<(ProcId, u64, u64, CompactString)>,
    /// Per process: (graph op time, all op time).
    op_time: Vec<(u64, u64)>,
    /// Per graph launch: its call's start (when known) and the end of its last op.
    launch_end: FxHashMap<CorrKey, (Option<u64>, u64)>,
    gpu_spans: Vec<Option<(u64, u64)>>,
}

impl FirstFold {
    pub fn new(trace: &Trace, prefix: Option<&str>) -> FirstFold {
        let files = trace.processes.len();
        FirstFold {
            prefix: prefix.map(str::to_string),
            ranges: Vec::new(),
            op_time: vec![(0, 0); files],
            launch_end: FxHashMap::default(),
            gpu_spans: vec![None; files],
        }
    }

    fn step_prefix(&self) -> &str {
        self.prefix.as_deref().unwrap_or(PROFILER_STEP)
    }

    pub fn batch(&mut self, trace: &Trace, b: &Batch) {
        self.ranges_of(trace, &b.ranges);
        let kernels = b.kernels.iter().map(|k| (k.proc, k.graph_id, k.correlation, k.start, k.end));
        let copies = b.memcpys.iter().map(|m| (m.proc, m.graph_id, m.correlation, m.start, m.end));
        let sets = b.memsets.iter().map(|m| (m.proc, m.graph_id, m.correlation, m.start, m.end));
        for (i, (proc, graph_id, correlation, start, end)) in kernels.chain(copies).chain(sets).enumerate() {
            let Some(span) = self.gpu_spans.get_mut(proc.index()) else { continue };
            *span = Some(span.map_or((start, end), |s| (s.0.min(start), s.1.max(end))));
            let ns = end.saturating_sub(start);
            let time = &mut self.op_time[proc.index()];
            time.1 += ns;
            // With --step the graph launches are never the steps: none is kept.
            if graph_id != 0 && self.prefix.is_none() {
                time.0 += ns;
                let call_start = b.gpu_calls.get(i).copied().flatten().map(|a| a.start);
                let e = self.launch_end.entry(CorrKey::new(proc, correlation)).or_insert((call_start, end));
                e.0 = e.0.or(call_start);
                e.1 = e.1.max(end);
            }
        }
    }

    fn ranges_of(&mut self, trace: &Trace, ranges: &[NvtxRange]) {
        let prefix = self.step_prefix().to_string();
        for r in ranges.iter().filter(|r| is_step_range(trace, r, &prefix)) {
            self.ranges.push((r.proc, r.start, r.end, CompactString::from(trace.names.get(r.name))));
        }
    }

    /// The steps and spans (a range the stream never saw end is no step, as on a load).
    pub fn finish(self, trace: &Trace) -> FirstPass {
        let FirstFold { prefix, ranges, op_time, launch_end, gpu_spans } = self;
        let nvtx = number_steps(trace, ranges);
        let (step_source, steps) = if let Some(p) = prefix {
            (StepSource::NvtxPrefix(p), nvtx)
        } else if !nvtx.is_empty() {
            (StepSource::ProfilerStep, nvtx)
        } else {
            let mostly = graph_launch_is_mostly_graphs(&op_time);
            let raw = launch_end
                .into_iter()
                .filter(|(key, _)| mostly.get(key.proc.index()).copied().unwrap_or(false))
                .filter_map(|(key, (call_start, end))| {
                    let start = call_start?;
                    Some((key.proc, start, end.max(start), CompactString::default()))
                })
                .collect();
            let mut steps = number_steps(trace, raw);
            for s in &mut steps {
                s.name = format_compact!("graph launch {}", s.index + 1);
            }
            if steps.is_empty() { (StepSource::None, steps) } else { (StepSource::GraphLaunches, steps) }
        };
        FirstPass::new(trace.processes.len(), step_source, steps, gpu_spans)
    }
}
