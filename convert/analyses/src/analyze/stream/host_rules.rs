//! The host-side rules over a stream (the loaded path: [`super::super::findings::host`]): each rule's fold is
//! the load's own, fed window by window, so the results are the load's.
//!
//! What waits for the stream's edge: each rule's union of host intervals
//! ([`Hits`](super::super::findings::host::Hits)), and the synchronizations whose record and call may come in
//! different windows (`host_rules/syncs.rs`). A copy's or a kernel's interval is its launching call's, which may
//! have been read windows before the copy: a union settles only what ends before the edge less the longest a GPU
//! op has started after its call so far (the launch lag), so a call read early is still merged with what it
//! overlaps. Past [`StreamOptions::max_waiting`] open intervals or waiting keys, the
//! oldest are settled anyway, counted and warned of.

mod syncs;

use cutr_model::stream::{Batch, StreamOptions};
use cutr_model::{ApiCall, Kernel, NameId, ProcId, Trace};
use rustc_hash::FxHashMap;

use super::super::findings::host::copies::{CopyHits, CopyRule};
use super::super::findings::host::straggler::{distinct_ranks, is_collective, step_prefix, straggler_of};
use super::super::findings::host::tiny::{TinyKernels, kernel_name};
use super::super::findings::host::{StepWindows, no_steps, syncs as loaded_syncs};
use super::super::types::{Context, RuleResult, Step, StepSource};
use super::FirstPass;
use syncs::SyncFold;

/// The host-side rules' fold over the second pass's windows, over the first pass's steps (borrowed: a long
/// recording has millions).
pub struct HostRulesFold<'f> {
    step_source: StepSource,
    steps: &'f [Step],
    /// The steps' windows (the first pass's); `None` without steps (every rule then cannot judge, and the fold
    /// reads nothing).
    windows: Option<&'f StepWindows>,
    /// How many ranks the files with GPU work are (the straggler's ranks).
    gpu_ranks: usize,
    cap: usize,
    sync_copies: CopyHits,
    pageable_copies: CopyHits,
    tiny: TinyKernels,
    syncs: SyncFold,
    collectives: FirstCollectives<'f>,
    /// The longest a GPU op started after its launching call, or after the edge it came behind (ns).
    launch_lag: u64,
    /// The last window's edge ([`Batch::next_start`]).
    last_edge: u64,
    /// Union intervals settled before the stream passed them (more than `cap` open).
    settled_early: u64,
}

impl<'f> HostRulesFold<'f> {
    /// A fold over the steps and GPU spans of `first`; `trace`: the stream's rowless trace.
    pub fn new(trace: &Trace, first: &'f FirstPass, opts: &StreamOptions) -> HostRulesFold<'f> {
        let gpu_files = first.gpu_spans.iter().enumerate().filter(|(_, s)| s.is_some());
        let gpu_ranks = distinct_ranks(trace, gpu_files.map(|(i, _)| ProcId(i as u16)));
        HostRulesFold {
            step_source: first.step_source.clone(),
            steps: &first.steps,
            windows: first.step_windows.as_ref(),
            gpu_ranks,
            cap: opts.max_waiting,
            sync_copies: CopyHits::new(CopyRule::Synchronous),
            pageable_copies: CopyHits::new(CopyRule::Pageable),
            tiny: TinyKernels::default(),
            syncs: SyncFold::default(),
            // One rank has no straggler: its steps' first collectives are not kept.
            collectives: FirstCollectives::new(if gpu_ranks > 1 { &first.steps } else { &[] }),
            launch_lag: 0,
            last_edge: 0,
            settled_early: 0,
        }
    }

    /// Folds one window's rows.
    pub fn batch(&mut self, trace: &Trace, b: &Batch) {
        let Some(windows) = self.windows else { return };
        let call = |i: usize| b.gpu_calls.get(i).and_then(|c| c.as_ref());
        let mut lag = self.launch_lag;
        let mut lag_of = |op_start: u64, call: Option<&ApiCall>| {
            let host_start = call.map_or(op_start, |a| a.start);
            lag = lag.max(op_start.max(self.last_edge).saturating_sub(host_start));
        };
        for (i, k) in b.kernels.iter().enumerate() {
            let c = call(i);
            lag_of(k.start, c);
            self.tiny.add(trace, windows, k, c);
            self.collectives.add(trace, k, c);
        }
        let copies = b.kernels.len();
        for (j, m) in b.memcpys.iter().enumerate() {
            let c = call(copies + j);
            lag_of(m.start, c);
            self.sync_copies.add(trace, windows, m, c);
            self.pageable_copies.add(trace, windows, m, c);
        }
        let memsets = copies + b.memcpys.len();
        for (j, m) in b.memsets.iter().enumerate() {
            lag_of(m.start, call(memsets + j));
        }
        self.launch_lag = lag;
        self.syncs.batch(trace, windows, b);
        let edge = b.next_start.unwrap_or(u64::MAX);
        // A call read windows before its GPU op can start up to the launch lag before the edge.
        let launched_edge = if b.next_start.is_some() { edge.saturating_sub(self.launch_lag) } else { edge };
        let cap = self.cap;
        for hits in [&mut self.sync_copies.hits, &mut self.pageable_copies.hits, &mut self.tiny.hits] {
            self.settled_early += hits.settle(launched_edge, cap);
        }
        let waiting_from = self.syncs.settle(trace, windows, edge, cap);
        self.settled_early += self.syncs.hits.settle(edge.min(waiting_from), cap);
        self.last_edge = self.last_edge.max(b.next_start.unwrap_or(0));
    }

    /// Every host-side rule's result, in the order of [`super::super::findings::host::rules`], and the warnings
    /// of what was settled early.
    pub fn finish(mut self, trace: &Trace) -> (Vec<RuleResult>, Vec<String>) {
        let cx = Context { trace, steps: self.steps, step_source: &self.step_source };
        let straggler = match step_prefix(&cx) {
            Err(r) => r,
            Ok(prefix) => straggler_of(&cx, prefix, self.gpu_ranks, || std::mem::take(&mut self.collectives.firsts)),
        };
        let Some(windows) = self.windows else {
            let rules =
                [CopyRule::Synchronous.name(), CopyRule::Pageable.name(), loaded_syncs::RULE, TinyKernels::RULE];
            let mut results: Vec<RuleResult> = rules.iter().map(|r| no_steps(r, &cx)).collect();
            results.push(straggler);
            return (results, Vec::new());
        };
        let mut syncs = self.syncs;
        syncs.settle(trace, windows, u64::MAX, usize::MAX);
        // Everything into the unions now, so that what came late is counted before the warnings are written.
        let all = [&mut self.sync_copies.hits, &mut self.pageable_copies.hits, &mut self.tiny.hits, &mut syncs.hits];
        for hits in all {
            hits.settle(u64::MAX, usize::MAX);
        }
        let late = [&self.sync_copies.hits, &self.pageable_copies.hits, &self.tiny.hits, &syncs.hits]
            .iter()
            .map(|h| h.late)
            .sum::<u64>();
        let mut warnings = Vec::new();
        if self.settled_early + syncs.settled_early > 0 {
            warnings.push(format!(
                "host rules: {} intervals or synchronizations were settled before the stream passed their time, as \
                 more than {} waited for it; what came later for them may be counted short (--no-stream computes it \
                 exactly)",
                self.settled_early + syncs.settled_early,
                self.cap
            ));
        }
        if late > 0 {
            warnings.push(format!(
                "host rules: {late} events started inside time already settled (a launching call read long before \
                 its GPU work, or a damaged file): their union time is counted only past it"
            ));
        }
        let results = vec![
            self.sync_copies.result(windows),
            self.pageable_copies.result(windows),
            loaded_syncs::result(syncs.hits, windows),
            self.tiny.result(trace, windows),
            straggler,
        ];
        (results, warnings)
    }
}

/// For each step, the first collective kernel (on the GPU) of those launched inside it, as the straggler rule
/// reads it on a load: (its GPU start, its correlation id).
struct FirstCollectives<'f> {
    /// Aligned with the steps (sorted by process, then start).
    firsts: Vec<Option<(u64, u32)>>,
    steps: &'f [Step],
    /// Aligned with the steps: the latest end of the process's steps up to each, so that the steps holding an
    /// instant are found walking back from the last one that starts at or before it.
    reach: Vec<u64>,
    /// Whether a kernel name is a collective, by name id.
    collective: FxHashMap<NameId, bool>,
}

impl<'f> FirstCollectives<'f> {
    fn new(steps: &'f [Step]) -> FirstCollectives<'f> {
        let mut reach: Vec<u64> = Vec::with_capacity(steps.len());
        for (i, s) in steps.iter().enumerate() {
            let before = i.checked_sub(1).filter(|&j| steps[j].proc == s.proc).map(|j| reach[j]);
            reach.push(before.map_or(s.end, |r| r.max(s.end)));
        }
        FirstCollectives { firsts: vec![None; steps.len()], steps, reach, collective: FxHashMap::default() }
    }

    /// A kernel: where it is a collective whose launching call started inside steps, the first of each of those
    /// steps' so far.
    fn add(&mut self, t: &Trace, k: &Kernel, call: Option<&ApiCall>) {
        // No steps kept (one rank): no name to judge.
        let (false, Some(call)) = (self.steps.is_empty(), call) else { return };
        if !*self.collective.entry(k.name).or_insert_with(|| is_collective(&kernel_name(t, k.name))) {
            return;
        }
        let at = call.start;
        let mut i = self.steps.partition_point(|s| (s.proc, s.start) <= (k.proc, at));
        while let Some(s) = i.checked_sub(1).and_then(|j| self.steps.get(j)) {
            if s.proc != k.proc || self.reach[i - 1] <= at {
                break;
            }
            i -= 1;
            if s.start <= at
                && at < s.end
                && let Some(first) = self.firsts.get_mut(i)
            {
                let this = (k.start, k.correlation);
                *first = Some(first.map_or(this, |f| f.min(this)));
            }
        }
    }
}

#[cfg(test)]
mod tests;
