//! `cupti-convert analyze`: where each GPU's time went and why, per rank and step, with findings. Definitions
//! (what counts as communication, how overlap is computed, each rule's threshold) in docs/ANALYZE.md.
//!
//! [`analyze`] finds the steps ([`steps`]), then per GPU, in parallel, cuts its span into segments by interval
//! union ([`budget`]) and gives each idle gap a cause ([`idle`]); launch health ([`launch`]) and the rules
//! ([`findings`]) read the same trace. [`render`] prints it all as text or Markdown; JSON is [`Analysis`]
//! serialized.

pub mod budget;
pub mod findings;
pub mod idle;
pub mod intervals;
pub mod launch;
pub mod render;
pub mod steps;
pub mod stream;
pub mod types;

use std::collections::BTreeMap;

use cutr_model::{CorrKey, ProcId, Trace};
use rayon::prelude::*;
use serde::Serialize;

use budget::{OpClass, Segment, State};
use idle::{Cause, ClassifiedGap, HostIndex, IdleCauses, NextOp};
use types::{Budget, Context, RuleResult, Step, StepSource};

/// Each GPU lists at most this many of its longest idle gaps.
pub const LONGEST_GAPS: usize = 10;

/// What `analyze` is asked.
#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    /// `--step PREFIX`: NVTX ranges whose name starts with it are the steps.
    pub step_prefix: Option<String>,
    /// Idle gaps shorter than this (ns) are back-to-back ops (`--gap-threshold`).
    pub short_gap_ns: u64,
}

impl Default for AnalyzeOptions {
    fn default() -> AnalyzeOptions {
        AnalyzeOptions { step_prefix: None, short_gap_ns: idle::DEFAULT_SHORT_GAP_NS }
    }
}

/// The whole report (its JSON is the contract of `cupti-convert analyze --json`, docs/ANALYZE.md).
#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    /// The earliest record of any file (ns): the origin of the text's times, as of `--start`/`--end`.
    pub first_record_ns: u64,
    /// `--start`/`--end`: which records were analysed; `None` for all of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// How the recordings were read when streamed (`None`: loaded whole).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<AnalyzeStream>,
    pub step_source: StepSource,
    pub gpus: Vec<GpuAnalysis>,
    pub launch: launch::LaunchHealth,
    /// Every rule's result, found ones first by severity, then clean ones, then those that could not judge.
    pub findings: Vec<RuleResult>,
    /// Every process's steps (by process, then time).
    #[serde(skip)]
    pub steps: Vec<Step>,
}

/// A streamed analysis's reading: each pass walked these chunks in these windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AnalyzeStream {
    pub passes: u32,
    pub chunks: u64,
    pub windows: u64,
}

/// One GPU (one file's device).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuAnalysis {
    pub file: String,
    pub proc: ProcId,
    pub rank: u32,
    pub device: u32,
    pub budget: Budget,
    pub idle: IdleCauses,
    /// The longest idle gaps, longest first.
    pub longest_gaps: Vec<GapReport>,
    /// The GPU's budget over each step of its process.
    pub steps: Vec<StepBudget>,
    /// Idle gaps of the span that are not short gaps.
    #[serde(skip)]
    pub long_gaps: u64,
    /// The gaps with the most time inside steps, most first (whole gaps, ranked by their time inside steps):
    /// the evidence of rules judged over steps. Empty without steps.
    #[serde(skip)]
    pub longest_step_gaps: Vec<GapReport>,
}

/// One idle gap, with what ran before and after it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GapReport {
    pub start: u64,
    pub end: u64,
    pub ns: u64,
    pub cause: Cause,
    pub before: String,
    pub after: String,
    /// The correlation id of the op after the gap (evidence for findings).
    #[serde(skip)]
    pub after_correlation: u32,
}

/// A GPU's budget over one step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepBudget {
    pub index: u32,
    pub name: compact_str::CompactString,
    pub budget: Budget,
    pub idle: IdleCauses,
}

/// Whether a kernel (by its demangled name) is communication: NCCL's and RCCL's kernels (`nccl...`,
/// `ncclDevKernel_...`, `ncclKernel_...`, `rccl...`) and the collectives of other libraries, by the collective
/// in their name (PyTorch's symmetric-memory `one_shot_all_reduce`, vLLM's `cross_device_reduce`, ...). The list
/// is in docs/ANALYZE.md.
pub fn is_communication(name: &str) -> bool {
    if name.starts_with("nccl") || name.starts_with("rccl") {
        return true;
    }
    let lower = name.to_ascii_lowercase();
    // At the start of a word only: `small_gather` is not an all-gather.
    let word_at = |i: usize| i == 0 || !lower.as_bytes()[i - 1].is_ascii_alphabetic();
    ["all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "reducescatter", "all_to_all"]
        .iter()
        .chain(&["alltoall", "cross_device_reduce"])
        .any(|c| lower.match_indices(c).any(|(i, _)| word_at(i)))
}

/// One GPU op as the sweep and the gap report need it: its interval, class, and which row it is.
#[derive(Clone, Copy, Debug)]
struct Op {
    start: u64,
    end: u64,
    class: OpClass,
    /// Tells apart ops that start and end at the same instants ([`op_tie`]), so the op named before or after a
    /// gap is the same on every run and in the streamed path.
    tie: (u8, u32, u32),
    row: Row,
}

/// The order among ops of one GPU that start and end at the same instants: kernels, copies, memsets; then by
/// correlation id; then by name (a kernel's name id, a copy's kinds, a memset's memory kind). Ops equal in all
/// of it print the same.
pub(crate) fn op_tie(kind: u8, correlation: u32, what: u32) -> (u8, u32, u32) {
    (kind, correlation, what)
}

/// A copy's kinds as one number, for [`op_tie`].
pub(crate) fn copy_code(copy_kind: u8, src: u8, dst: u8) -> u32 {
    (copy_kind as u32) << 16 | (src as u32) << 8 | dst as u32
}

#[derive(Clone, Copy, Debug)]
enum Row {
    Kernel(u32),
    Memcpy(u32),
    Memset(u32),
}

/// The analysis of `trace` (one job's files).
pub fn analyze(trace: &Trace, opts: &AnalyzeOptions) -> Analysis {
    let (step_source, steps) = steps::find_steps(trace, opts.step_prefix.as_deref());
    let (gpus, launch) = rayon::join(
        || {
            let host = HostIndex::new(trace);
            let ranks = trace.job_ranks();
            let groups: Vec<((ProcId, u32), Vec<Op>)> = gpu_ops(trace).into_iter().collect();
            groups
                .into_par_iter()
                .map(|(key, ops)| {
                    let own: Vec<&Step> = steps.iter().filter(|s| s.proc == key.0).collect();
                    let mut g = analyze_gpu(trace, &host, &own, ops, opts.short_gap_ns);
                    (g.file, g.proc, g.rank, g.device) = (trace.label(key.0), key.0, ranks[key.0.index()].0, key.1);
                    g
                })
                .collect::<Vec<GpuAnalysis>>()
        },
        || launch::launch_health(trace),
    );
    let cx = Context { trace, steps: &steps, step_source: &step_source };
    let mut findings: Vec<RuleResult> = findings::host::rules(&cx);
    findings.extend(findings::kernels::rules(&cx));
    findings.extend(findings::starvation::rules(&cx, &gpus));
    stream::sort_findings(&mut findings);
    Analysis { first_record_ns: trace.span().0, window: None, stream: None, step_source, gpus, launch, findings, steps }
}

/// Every kernel, memcpy and memset, by (file, device).
fn gpu_ops(trace: &Trace) -> BTreeMap<(ProcId, u32), Vec<Op>> {
    let mut comm: Vec<Option<bool>> = vec![None; trace.names.len()];
    let mut by_gpu: BTreeMap<(ProcId, u32), Vec<Op>> = BTreeMap::new();
    for (i, k) in trace.kernels.iter().enumerate() {
        let name = trace.display_name_id(k.name);
        let is_comm = match comm.get(name.index()).copied().flatten() {
            Some(c) => c,
            None => {
                let c = is_communication(trace.names.get(name));
                if let Some(slot) = comm.get_mut(name.index()) {
                    *slot = Some(c);
                }
                c
            }
        };
        let class = if is_comm { OpClass::Communication } else { OpClass::Compute };
        by_gpu.entry((k.proc, k.device)).or_default().push(Op {
            start: k.start,
            end: k.end,
            class,
            tie: op_tie(0, k.correlation, k.name.0),
            row: Row::Kernel(i as u32),
        });
    }
    for (i, m) in trace.memcpys.iter().enumerate() {
        let tie = op_tie(1, m.correlation, copy_code(m.copy_kind, m.src_kind, m.dst_kind));
        let op = Op { start: m.start, end: m.end, class: OpClass::Copy, tie, row: Row::Memcpy(i as u32) };
        by_gpu.entry((m.proc, m.device)).or_default().push(op);
    }
    for (i, m) in trace.memsets.iter().enumerate() {
        let tie = op_tie(2, m.correlation, m.memory_kind as u32);
        let op = Op { start: m.start, end: m.end, class: OpClass::Copy, tie, row: Row::Memset(i as u32) };
        by_gpu.entry((m.proc, m.device)).or_default().push(op);
    }
    by_gpu
}

fn corr_of(trace: &Trace, row: Row) -> CorrKey {
    match row {
        Row::Kernel(i) => trace.kernels[i as usize].corr(),
        Row::Memcpy(i) => trace.memcpys[i as usize].corr(),
        Row::Memset(i) => trace.memsets[i as usize].corr(),
    }
}

fn name_of(trace: &Trace, row: Row) -> String {
    use cutr_model::describe::{memcpy_name, memset_name};
    match row {
        Row::Kernel(i) => trace.kernel_name(&trace.kernels[i as usize]).to_string(),
        Row::Memcpy(i) => {
            let m = &trace.memcpys[i as usize];
            memcpy_name(m.copy_kind, m.src_kind, m.dst_kind)
        }
        Row::Memset(i) => memset_name(trace.memsets[i as usize].memory_kind),
    }
}

/// One GPU's budget, idle causes, longest gaps and step budgets (file, rank and device left for the caller).
fn analyze_gpu(trace: &Trace, host: &HostIndex, steps: &[&Step], mut ops: Vec<Op>, threshold: u64) -> GpuAnalysis {
    ops.sort_unstable_by_key(|o| (o.start, o.end, o.tie));
    let segs: Vec<Segment> = budget::segments(ops.iter().map(|o| (o.start, o.end, o.class)));
    let budget = budget::budget(&segs);
    let span = (budget.start, budget.end);
    let gaps: Vec<ClassifiedGap> = segs
        .iter()
        .filter(|s| s.state == State::Idle)
        .map(|s| {
            // Gaps lie inside the span: some op starts where one ends.
            let next = &ops[ops.partition_point(|o| o.start < s.end)];
            let key = corr_of(trace, next.row);
            let launch = trace.launcher(key).map(|a| (a.end, a.tid));
            idle::classify(host, s.start, s.end, NextOp { proc: key.proc, launch }, threshold)
        })
        .collect();
    let idle = idle::causes_over(host, &gaps, span, span, threshold);
    debug_assert_eq!(idle.total_ns(), budget.idle_ns);
    let step_budgets = steps
        .iter()
        .map(|s| StepBudget {
            index: s.index,
            name: s.name.clone(),
            budget: budget::budget_over(&segs, s.start, s.end),
            idle: idle::causes_over(host, &gaps, span, (s.start, s.end), threshold),
        })
        .collect();
    let long_gaps = gaps.iter().filter(|g| g.cause != Cause::ShortGap).count() as u64;
    let by_length =
        first_by_key(gaps.iter().collect(), LONGEST_GAPS, |g| (std::cmp::Reverse(g.end - g.start), g.start));
    let mut windows: Vec<(u64, u64)> = steps.iter().map(|s| (s.start, s.end)).collect();
    idle::merge(&mut windows);
    let in_steps = |g: &ClassifiedGap| -> u64 { time_in_windows(&windows, g.start, g.end) };
    let by_step_time: Vec<(u64, &ClassifiedGap)> = gaps.iter().map(|g| (in_steps(g), g)).filter(|x| x.0 > 0).collect();
    let by_step_time = first_by_key(by_step_time, LONGEST_GAPS, |&(ns, g)| (std::cmp::Reverse(ns), g.start));
    GpuAnalysis {
        file: String::new(),
        proc: ProcId::default(),
        rank: 0,
        device: 0,
        budget,
        idle,
        longest_gaps: gap_reports(trace, &ops, by_length),
        steps: step_budgets,
        long_gaps,
        longest_step_gaps: gap_reports(trace, &ops, by_step_time.into_iter().map(|x| x.1).collect()),
    }
}

/// The time of `[start, end)` inside `windows` (merged, sorted): how gaps are ranked by their time inside steps.
pub(crate) fn time_in_windows(windows: &[(u64, u64)], start: u64, end: u64) -> u64 {
    let first = windows.partition_point(|w| w.1 <= start);
    windows[first..].iter().take_while(|w| w.0 < end).map(|w| w.1.min(end).saturating_sub(w.0.max(start))).sum()
}

/// The first `n` of `items` in the order of `key`, sorted. A selection then a sort of `n`, not a sort of all: a
/// GPU of the 30M-record generated trace has over 900,000 gaps, and sorting them all was a fifth of `analyze`'s
/// CPU time (docs/BENCHMARKS.md). The same result as a full sort because the keys are unique (gaps are disjoint,
/// so their starts differ).
fn first_by_key<T, K: Ord>(mut items: Vec<T>, n: usize, key: impl Fn(&T) -> K) -> Vec<T> {
    if items.len() > n {
        items.select_nth_unstable_by_key(n, &key);
        items.truncate(n);
    }
    items.sort_unstable_by_key(key);
    items
}

/// The first [`LONGEST_GAPS`] of `order`, with the ops around them.
fn gap_reports(trace: &Trace, ops: &[Op], order: Vec<&ClassifiedGap>) -> Vec<GapReport> {
    order
        .into_iter()
        .take(LONGEST_GAPS)
        .map(|g| {
            let n = ops.partition_point(|o| o.start < g.end);
            // The op before: one that ends where the gap starts (the union's end); every op before `n` started
            // at or before the gap's start.
            let before =
                ops[..n].iter().rev().find(|o| o.end == g.start).map_or(String::new(), |o| name_of(trace, o.row));
            GapReport {
                start: g.start,
                end: g.end,
                ns: g.end - g.start,
                cause: g.cause,
                before,
                after: name_of(trace, ops[n].row),
                after_correlation: corr_of(trace, ops[n].row).correlation,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{first_by_key, is_communication};

    /// The selection gives what a full sort then a cut gives: the longest first, ties by start.
    #[test]
    fn first_by_key_is_a_sorted_cut() {
        let gaps: Vec<(u64, u64)> = vec![(0, 5), (10, 30), (40, 41), (50, 70), (80, 83), (90, 100), (120, 160)];
        let longest = |v: Vec<(u64, u64)>, n| first_by_key(v, n, |g| (std::cmp::Reverse(g.1 - g.0), g.0));
        assert_eq!(longest(gaps.clone(), 3), [(120, 160), (10, 30), (50, 70)]);
        assert_eq!(longest(gaps.clone(), 0), []);
        assert_eq!(longest(gaps[..2].to_vec(), 3), [(10, 30), (0, 5)]);
    }

    #[test]
    fn communication_by_name() {
        for n in [
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclKernel_AllGather_RING_LL_Sum_int8_t",
            "rcclGenericKernel",
            "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(...)",
            "void vllm::cross_device_reduce_1stage<half, 2>(...)",
            "multimem_all_reduce_kernel",
        ] {
            assert!(is_communication(n), "{n}");
        }
        for n in ["small_gather_kernel", "void at::native::reduce_kernel<512, 1>", "sm90_xmma_gemm", "tallreduce"] {
            assert!(!is_communication(n), "{n}");
        }
    }
}
