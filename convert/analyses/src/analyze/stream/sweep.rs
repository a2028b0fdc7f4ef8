//! One GPU's sweep over a stream: its ops' starts and ends in time order, as [`super::super::budget::segments`]
//! sweeps them on a load, but settled window by window behind the stream's edge, each busy run counted into the
//! budgets as it ends and each idle gap classified as it closes. Held: the ops not yet reached, the ops running,
//! the gap open, the ten longest gaps; never the segments.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use cutr_model::{NameId, ProcId, Trace};

use super::super::budget::{OpClass, State, state_of};
use super::super::idle::{Cause, HostIndex, IdleCauses, NextOp, add_gap_part, classify};
use super::super::types::{Budget, Step};
use super::super::{GapReport, LONGEST_GAPS, StepBudget};
use super::steps::{ProcSteps, add_busy, finish_tally, new_tally};

/// What an op is, for the names of the ops around a gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum What {
    /// The kernel's name as recorded (shown demangled).
    Kernel(NameId),
    Memcpy {
        copy_kind: u8,
        src: u8,
        dst: u8,
    },
    Memset {
        memory_kind: u16,
    },
}

impl What {
    pub fn name(self, trace: &Trace) -> String {
        use cutr_model::describe::{memcpy_name, memset_name};
        match self {
            // The stream's trace has no demangled names: named as a load names them.
            What::Kernel(n) => cutr_model::demangle::demangle(trace.names.get(n)),
            What::Memcpy { copy_kind, src, dst } => memcpy_name(copy_kind, src, dst),
            What::Memset { memory_kind } => memset_name(memory_kind),
        }
    }
}

/// One GPU op as the sweep needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub start: u64,
    pub end: u64,
    pub class: OpClass,
    /// [`super::super::op_tie`].
    pub tie: (u8, u32, u32),
    pub what: What,
    pub correlation: u32,
    /// Its launching call's end and thread, while in the stream's horizon.
    pub launch: Option<(u64, u32)>,
}

impl Op {
    fn key(&self) -> (u64, u64, (u8, u32, u32)) {
        (self.start, self.end, self.tie)
    }
}

/// A running op in the heap: the earliest end first, then in the ops' order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Running(Op);

impl Ord for Running {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.0.end, self.0.key()).cmp(&(other.0.end, other.0.key()))
    }
}

impl PartialOrd for Running {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The busy time of a window by state (the budget's parts but idle).
#[derive(Clone, Copy, Debug, Default)]
pub struct Busy {
    compute: u64,
    comm_overlapped: u64,
    comm_exposed: u64,
    copies: u64,
}

impl Busy {
    /// The busy parts of a budget being tallied ([`super::steps::add_busy`]).
    pub fn of(b: &Budget) -> Busy {
        Busy {
            compute: b.computation_ns,
            comm_overlapped: b.communication_overlapped_ns,
            comm_exposed: b.communication_exposed_ns,
            copies: b.copies_exposed_ns,
        }
    }

    /// The busy parts into a budget being tallied.
    pub fn write(&self, b: &mut Budget) {
        b.computation_ns = self.compute;
        b.communication_overlapped_ns = self.comm_overlapped;
        b.communication_exposed_ns = self.comm_exposed;
        b.copies_exposed_ns = self.copies;
    }

    pub fn add(&mut self, state: State, ns: u64) {
        match state {
            State::Idle => {}
            State::Copy => self.copies += ns,
            State::CommunicationExposed => self.comm_exposed += ns,
            State::Compute => self.compute += ns,
            State::ComputeWithCommunication => {
                self.compute += ns;
                self.comm_overlapped += ns;
            }
        }
    }

    /// The budget over `[start, end)` with this busy time: the rest is idle.
    pub fn budget(&self, start: u64, end: u64) -> Budget {
        let end = end.max(start);
        let span_ns = end - start;
        let busy = self.compute + self.comm_exposed + self.copies;
        Budget {
            start,
            end,
            span_ns,
            computation_ns: self.compute,
            communication_overlapped_ns: self.comm_overlapped,
            communication_exposed_ns: self.comm_exposed,
            copies_exposed_ns: self.copies,
            idle_ns: span_ns.saturating_sub(busy),
        }
    }
}

/// The [`LONGEST_GAPS`] smallest of a key, with their reports.
struct TopGaps(Vec<((Reverse<u64>, u64), GapReport)>);

impl TopGaps {
    fn wants(&self, key: (Reverse<u64>, u64)) -> bool {
        self.0.len() < LONGEST_GAPS || self.0.last().is_some_and(|l| key < l.0)
    }

    fn insert(&mut self, key: (Reverse<u64>, u64), report: GapReport) {
        let at = self.0.partition_point(|x| x.0 < key);
        self.0.insert(at, (key, report));
        self.0.truncate(LONGEST_GAPS);
    }

    fn reports(self) -> Vec<GapReport> {
        self.0.into_iter().map(|x| x.1).collect()
    }
}

/// The gap open since the union of running ops emptied.
#[derive(Clone, Copy, Debug)]
struct OpenGap {
    start: u64,
    /// The last op (in the ops' order) that ends where the gap starts.
    before: Option<Op>,
}

/// One GPU's sweep.
pub struct Sweep {
    pub proc: ProcId,
    pending: Vec<Op>,
    running: BinaryHeap<Reverse<Running>>,
    counts: [u32; 3],
    /// The sweep's position: every event before it is counted.
    time: Option<u64>,
    /// The busy run being extended: (start, end, state).
    run: Option<(u64, u64, State)>,
    first_at: Option<Op>,
    gap: Option<OpenGap>,
    span: Option<(u64, u64)>,
    busy: Busy,
    pub idle: IdleCauses,
    /// Per step: its tally, finished in place ([`super::steps::new_tally`]).
    steps: Vec<StepBudget>,
    pub long_gaps: u64,
    longest: TopGaps,
    longest_in_steps: TopGaps,
    /// Ops that started before the sweep's position when read (a damaged file's edge, or the wait cap).
    pub late: u64,
}

impl Sweep {
    pub fn new(proc: ProcId, steps: usize, threshold: u64) -> Sweep {
        Sweep {
            proc,
            pending: Vec::new(),
            running: BinaryHeap::new(),
            counts: [0; 3],
            time: None,
            run: None,
            first_at: None,
            gap: None,
            span: None,
            busy: Busy::default(),
            idle: IdleCauses { short_gap_threshold_ns: threshold, ..IdleCauses::default() },
            steps: vec![new_tally(threshold); steps],
            long_gaps: 0,
            longest: TopGaps(Vec::new()),
            longest_in_steps: TopGaps(Vec::new()),
            late: 0,
        }
    }

    pub fn push(&mut self, op: Op) {
        self.pending.push(op);
    }

    /// Where the sweep stands: a gap open since its start, else its position (`None` before its first op).
    pub fn frontier(&self) -> Option<u64> {
        self.gap.map(|g| g.start).or(self.time)
    }

    /// Counts every event before `edge` (`None`: every event). With `keep_at_most`, settles the oldest pending
    /// ops past that many even at or after the edge.
    /// Returns how many ops it settled at or after the edge.
    pub fn advance(&mut self, edge: Option<u64>, keep_at_most: usize, cx: &SweepContext<'_>) -> u64 {
        self.pending.sort_unstable_by_key(Op::key);
        let before_edge = self.pending.partition_point(|o| edge.is_none_or(|e| o.start < e));
        let reach = before_edge.max(self.pending.len().saturating_sub(keep_at_most));
        let ready: Vec<Op> = self.pending.drain(..reach).collect();
        for op in ready {
            self.op(op, cx);
        }
        let limit = match (edge, self.pending.first()) {
            (None, _) => u64::MAX,
            (Some(e), first) => first.map_or(e, |f| f.start.min(e)),
        };
        while let Some(Reverse(Running(r))) = self.running.peek().copied() {
            if r.end >= limit && limit != u64::MAX {
                break;
            }
            self.running.pop();
            self.end_of(r, cx);
        }
        if edge.is_none()
            && let Some(run) = self.run.take()
        {
            self.count_run(run, cx);
        }
        (reach - before_edge) as u64
    }

    fn advance_to(&mut self, t: u64, cx: &SweepContext<'_>) {
        let Some(now) = self.time else {
            self.time = Some(t);
            return;
        };
        if t <= now {
            return;
        }
        let state = state_of(self.counts[0], self.counts[1], self.counts[2]);
        if state != State::Idle {
            match &mut self.run {
                Some(run) if run.2 == state && run.1 == now => run.1 = t,
                _ => {
                    let old = self.run.replace((now, t, state));
                    if let Some(old) = old {
                        self.count_run(old, cx);
                    }
                }
            }
        }
        self.time = Some(t);
    }

    fn end_of(&mut self, r: Op, cx: &SweepContext<'_>) {
        self.advance_to(r.end, cx);
        self.counts[class_index(r.class)] -= 1;
        self.span = self.span.map(|s| (s.0, s.1.max(r.end)));
        if self.counts == [0; 3] {
            self.gap = Some(OpenGap { start: r.end, before: Some(r) });
        }
    }

    fn op(&mut self, mut op: Op, cx: &SweepContext<'_>) {
        // Ends before starts at the same instant, as the load's sweep orders them.
        while let Some(Reverse(Running(r))) = self.running.peek().copied() {
            if r.end > op.start {
                break;
            }
            self.running.pop();
            self.end_of(r, cx);
        }
        if let Some(now) = self.time
            && op.start < now
        {
            // Read after the sweep passed its start: counted from where the sweep is.
            self.late += 1;
            op.end = op.end.max(now);
            op.start = now;
        }
        self.advance_to(op.start, cx);
        if self.first_at.is_none_or(|f| f.start != op.start) {
            self.first_at = Some(op);
        }
        if let Some(gap) = &mut self.gap
            && op.end == gap.start
            && gap.before.is_none_or(|b| op.key() > b.key())
        {
            gap.before = Some(op);
        }
        if op.end <= op.start {
            return;
        }
        if let Some(gap) = self.gap.take()
            && op.start > gap.start
        {
            let next = self.first_at.unwrap_or(op);
            self.close_gap(gap, op.start, next, cx);
        }
        self.span = Some(self.span.map_or((op.start, op.end), |s| (s.0, s.1.max(op.end))));
        self.counts[class_index(op.class)] += 1;
        self.running.push(Reverse(Running(op)));
    }

    fn count_run(&mut self, (start, end, state): (u64, u64, State), cx: &SweepContext<'_>) {
        self.busy.add(state, end - start);
        for (i, (s, e)) in cx.steps.overlapping(start, end) {
            add_busy(&mut self.steps[i], state, end.min(e) - start.max(s));
        }
    }

    fn close_gap(&mut self, gap: OpenGap, end: u64, next: Op, cx: &SweepContext<'_>) {
        let next_op = NextOp { proc: self.proc, launch: next.launch };
        let g = classify(cx.host, gap.start, end, next_op, cx.threshold);
        add_gap_part(&mut self.idle, cx.host, &g, g.start, g.end);
        for (i, (s, e)) in cx.steps.overlapping(g.start, g.end) {
            let (cs, ce) = (g.start.max(s), g.end.min(e));
            add_gap_part(&mut self.steps[i].idle, cx.host, &g, cs, ce);
        }
        if g.cause != Cause::ShortGap {
            self.long_gaps += 1;
        }
        let report = |trace: &Trace| GapReport {
            start: g.start,
            end: g.end,
            ns: g.end - g.start,
            cause: g.cause,
            before: gap.before.map_or(String::new(), |b| b.what.name(trace)),
            after: next.what.name(trace),
            after_correlation: next.correlation,
        };
        let by_length = (Reverse(g.end - g.start), g.start);
        if self.longest.wants(by_length) {
            self.longest.insert(by_length, report(cx.trace));
        }
        let in_steps = cx.steps.merged_inside(g.start, g.end);
        let by_step_time = (Reverse(in_steps), g.start);
        if in_steps > 0 && self.longest_in_steps.wants(by_step_time) {
            self.longest_in_steps.insert(by_step_time, report(cx.trace));
        }
    }

    /// The GPU's budget, idle causes, step budgets and gaps once every event is counted.
    pub fn finish(self, steps: &[&Step]) -> Finished {
        let (start, end) = self.span.unwrap_or((0, 0));
        let budget = if self.span.is_some() { self.busy.budget(start, end) } else { Budget::default() };
        let span = (budget.start, budget.end);
        let mut step_rows = self.steps;
        for (tally, s) in step_rows.iter_mut().zip(steps) {
            finish_tally(tally, s, span);
        }
        Finished {
            budget,
            idle: self.idle,
            steps: step_rows,
            long_gaps: self.long_gaps,
            longest: self.longest.reports(),
            longest_in_steps: self.longest_in_steps.reports(),
            late: self.late,
        }
    }
}

/// What a sweep reads besides its ops: the host's calls, its process's steps, the names.
pub struct SweepContext<'a> {
    pub trace: &'a Trace,
    pub host: &'a HostIndex,
    pub steps: &'a ProcSteps<'a>,
    pub threshold: u64,
}

/// A finished sweep's figures.
pub struct Finished {
    pub budget: Budget,
    pub idle: IdleCauses,
    pub steps: Vec<StepBudget>,
    pub long_gaps: u64,
    pub longest: Vec<GapReport>,
    pub longest_in_steps: Vec<GapReport>,
    pub late: u64,
}

fn class_index(c: OpClass) -> usize {
    match c {
        OpClass::Compute => 0,
        OpClass::Communication => 1,
        OpClass::Copy => 2,
    }
}
