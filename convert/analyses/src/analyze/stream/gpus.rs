//! Every GPU's budget, idle causes, longest gaps and step budgets over a stream: each window's ops handed to
//! their GPU's [`Sweep`], the host's calls kept in a [`HostIndex`] only as far back as a gap still open may ask.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use cutr_model::demangle::demangle;
use cutr_model::stream::Batch;
use cutr_model::{ApiCall, ProcId, Trace};

use super::super::budget::OpClass;
use super::super::idle::{HostIndex, is_synchronizing, merge};
use super::super::types::Step;
use super::super::{GpuAnalysis, copy_code, is_communication, op_tie};
use super::FirstPass;
use super::steps::ProcSteps;
use super::sweep::{Op, Sweep, SweepContext, What};

/// The GPUs' fold.
pub struct GpuFold<'f> {
    threshold: u64,
    cap: usize,
    sweeps: BTreeMap<(ProcId, u32), Sweep>,
    host: HostIndex,
    /// Per process: its steps, as the sweeps count into them.
    steps: Vec<ProcSteps<'f>>,
    /// Per process: how many steps it has.
    step_counts: Vec<usize>,
    /// Per API function (file, driver?, cbid): whether it synchronizes.
    sync_fn: FxHashMap<(ProcId, bool, u32), bool>,
    /// Per kernel name id: whether it is communication.
    comm: Vec<Option<bool>>,
    /// Host intervals dropped before a gap could ask for them, past the cap.
    host_dropped: u64,
    /// Ops settled before the stream's edge passed them, past the cap.
    settled_early: u64,
}

impl<'f> GpuFold<'f> {
    pub fn new(trace: &Trace, first: &'f FirstPass, threshold: u64, cap: usize) -> GpuFold<'f> {
        // The steps are sorted by process: each process's are one run of them.
        let by_proc: Vec<&[Step]> = (0..trace.processes.len())
            .map(|p| {
                let from = first.steps.partition_point(|s| s.proc.index() < p);
                let to = first.steps.partition_point(|s| s.proc.index() <= p);
                &first.steps[from..to]
            })
            .collect();
        let merged = first.step_windows.as_ref();
        GpuFold {
            threshold,
            cap: cap.max(1),
            sweeps: BTreeMap::new(),
            host: HostIndex::default(),
            steps: by_proc.iter().enumerate().map(|(p, s)| ProcSteps::new(ProcId(p as u16), s, merged)).collect(),
            step_counts: by_proc.iter().map(|s| s.len()).collect(),
            sync_fn: FxHashMap::default(),
            comm: vec![None; trace.names.len()],
            host_dropped: 0,
            settled_early: 0,
        }
    }

    pub fn batch(&mut self, trace: &Trace, b: &Batch) {
        self.add_host(trace, b);
        self.add_ops(trace, b);
        let empty = ProcSteps::default();
        let per_gpu = (self.cap / self.sweeps.len().max(1)).max(1);
        for sweep in self.sweeps.values_mut() {
            let steps = self.steps.get(sweep.proc.index()).unwrap_or(&empty);
            let cx = SweepContext { trace, host: &self.host, steps, threshold: self.threshold };
            self.settled_early += sweep.advance(b.next_start, per_gpu, &cx);
        }
        if let Some(edge) = b.next_start {
            self.prune_host(edge);
        }
    }

    fn add_host(&mut self, trace: &Trace, b: &Batch) {
        let mut touched_threads = Vec::new();
        let mut touched_procs = Vec::new();
        for a in b.apis.iter().filter(|a| a.end > a.start) {
            let thread = self.host.in_api.entry((a.proc, a.tid)).or_default();
            thread.push((a.start, a.end));
            touched_threads.push((a.proc, a.tid));
            if self.is_sync(trace, a) {
                self.host.in_sync.entry(a.proc).or_default().push((a.start, a.end));
                touched_procs.push(a.proc);
            }
        }
        for s in b.syncs.iter().filter(|s| s.end > s.start) {
            self.host.in_sync.entry(s.proc).or_default().push((s.start, s.end));
            touched_procs.push(s.proc);
        }
        touched_threads.sort_unstable();
        touched_threads.dedup();
        for t in touched_threads {
            self.host.in_api.get_mut(&t).map(merge);
        }
        touched_procs.sort_unstable();
        touched_procs.dedup();
        for p in touched_procs {
            self.host.in_sync.get_mut(&p).map(merge);
        }
    }

    fn is_sync(&mut self, trace: &Trace, a: &ApiCall) -> bool {
        *self.sync_fn.entry((a.proc, a.driver, a.cbid)).or_insert_with(|| is_synchronizing(&trace.api_name(a)))
    }

    fn add_ops(&mut self, trace: &Trace, b: &Batch) {
        let launch = |i: usize| b.gpu_calls.get(i).copied().flatten().map(|a| (a.end, a.tid));
        let threshold = self.threshold;
        let step_counts = &self.step_counts;
        let push = |sweeps: &mut BTreeMap<(ProcId, u32), Sweep>, proc: ProcId, device: u32, op: Op| {
            let steps = step_counts.get(proc.index()).copied().unwrap_or(0);
            sweeps.entry((proc, device)).or_insert_with(|| Sweep::new(proc, steps, threshold)).push(op);
        };
        for (i, k) in b.kernels.iter().enumerate() {
            let class = if is_comm(&mut self.comm, trace, k.name) { OpClass::Communication } else { OpClass::Compute };
            let op = Op {
                start: k.start,
                end: k.end,
                class,
                tie: op_tie(0, k.correlation, k.name.0),
                what: What::Kernel(k.name),
                correlation: k.correlation,
                launch: launch(i),
            };
            push(&mut self.sweeps, k.proc, k.device, op);
        }
        let base = b.kernels.len();
        for (i, m) in b.memcpys.iter().enumerate() {
            let op = Op {
                start: m.start,
                end: m.end,
                class: OpClass::Copy,
                tie: op_tie(1, m.correlation, copy_code(m.copy_kind, m.src_kind, m.dst_kind)),
                what: What::Memcpy { copy_kind: m.copy_kind, src: m.src_kind, dst: m.dst_kind },
                correlation: m.correlation,
                launch: launch(base + i),
            };
            push(&mut self.sweeps, m.proc, m.device, op);
        }
        let base = base + b.memcpys.len();
        for (i, m) in b.memsets.iter().enumerate() {
            let op = Op {
                start: m.start,
                end: m.end,
                class: OpClass::Copy,
                tie: op_tie(2, m.correlation, m.memory_kind as u32),
                what: What::Memset { memory_kind: m.memory_kind },
                correlation: m.correlation,
                launch: launch(base + i),
            };
            push(&mut self.sweeps, m.proc, m.device, op);
        }
    }

    /// Drops the host's calls that no gap can ask for any more: those ended before every sweep of their process
    /// stands (a gap open since its start, else its position; the stream's edge for a process with no GPU yet: its
    /// first op starts after it).
    /// Past the cap, the oldest calls are dropped anyway, counted.
    fn prune_host(&mut self, edge: u64) {
        let mut frontier: FxHashMap<ProcId, u64> = FxHashMap::default();
        for s in self.sweeps.values() {
            // Past the edge only where the sweep settled early (a kept-back edge): its gaps still start after it.
            let at = s.frontier().unwrap_or(edge);
            let f = frontier.entry(s.proc).or_insert(at);
            *f = (*f).min(at);
        }
        let keep_from = |proc: ProcId| frontier.get(&proc).copied().unwrap_or(edge);
        let mut held = 0usize;
        for ((proc, _), iv) in self.host.in_api.iter_mut() {
            drop_ended(iv, keep_from(*proc));
            held += iv.len();
        }
        self.host.in_api.retain(|_, iv| !iv.is_empty());
        for (proc, iv) in self.host.in_sync.iter_mut() {
            drop_ended(iv, keep_from(*proc));
            held += iv.len();
        }
        self.host.in_sync.retain(|_, iv| !iv.is_empty());
        if held > self.cap {
            // A gap open for long on one GPU keeps its process's calls: past the cap, the older half of each
            // list goes (a gap over it may then be counted as not waited on).
            for iv in self.host.in_api.values_mut().chain(self.host.in_sync.values_mut()) {
                let half = iv.len() / 2;
                self.host_dropped += half as u64;
                iv.drain(..half);
            }
        }
    }

    /// Every GPU's analysis (file, rank and device filled in), and the warnings of what was settled early.
    pub fn finish(mut self, trace: &Trace, steps: &[Step]) -> (Vec<GpuAnalysis>, Vec<String>) {
        let empty = ProcSteps::default();
        for sweep in self.sweeps.values_mut() {
            let steps = self.steps.get(sweep.proc.index()).unwrap_or(&empty);
            let cx = SweepContext { trace, host: &self.host, steps, threshold: self.threshold };
            sweep.advance(None, usize::MAX, &cx);
        }
        // The steps' windows are done with: gone before the step budgets are made.
        self.steps = Vec::new();
        let ranks = trace.job_ranks();
        let mut late = 0;
        let gpus = std::mem::take(&mut self.sweeps)
            .into_iter()
            .map(|((proc, device), sweep)| {
                let own: Vec<&Step> = steps.iter().filter(|s| s.proc == proc).collect();
                let f = sweep.finish(&own);
                late += f.late;
                GpuAnalysis {
                    file: trace.label(proc),
                    proc,
                    rank: ranks.get(proc.index()).map_or(0, |r| r.0),
                    device,
                    budget: f.budget,
                    idle: f.idle,
                    longest_gaps: f.longest,
                    steps: f.steps,
                    long_gaps: f.long_gaps,
                    longest_step_gaps: f.longest_in_steps,
                }
            })
            .collect();
        let mut warnings = Vec::new();
        if self.settled_early > 0 || late > 0 {
            warnings.push(format!(
                "analyze: {} GPU ops were counted before the stream's edge passed them (more than {} waited), {} \
                 came after the sweep had passed their start and were counted from there: chunk headers that \
                 claim earlier times than their records (a damaged file?)",
                self.settled_early, self.cap, late
            ));
        }
        if self.host_dropped > 0 {
            warnings.push(format!(
                "analyze: {} host API intervals were dropped before a GPU's idle gap could ask for them (more than \
                 {} held): the causes of those gaps may read launch-bound or other where the host was in a call",
                self.host_dropped, self.cap
            ));
        }
        (gpus, warnings)
    }
}

/// Drops the intervals (sorted, merged) that end at or before `from`.
fn drop_ended(iv: &mut Vec<(u64, u64)>, from: u64) {
    let n = iv.partition_point(|x| x.1 <= from);
    iv.drain(..n);
}

/// Whether kernel name `name` is communication, judged once per name (`comm` by name id).
fn is_comm(comm: &mut Vec<Option<bool>>, trace: &Trace, name: cutr_model::NameId) -> bool {
    if name.index() >= comm.len() {
        comm.resize(name.index() + 1, None);
    }
    // The stream's trace has no demangled names: judged by the demangled name, as on a load.
    *comm[name.index()].get_or_insert_with(|| is_communication(&demangle(trace.names.get(name))))
}
