//! Host-side rules: synchronous and pageable copies inside steps, synchronizations inside steps, many tiny
//! kernels, a rank late at collectives. Each rule is in its own file under `host/`; this file holds what they
//! share: the steps as per-process windows, the severity bands, and the evidence a finding carries.

pub(crate) mod copies;
pub(crate) mod straggler;
pub(crate) mod syncs;
pub(crate) mod tiny;

use cutr_model::ProcId;
use rayon::prelude::*;

use crate::stats::stream_utilization::Union;

use super::super::types::{Context, EventRef, Finding, MAX_EVIDENCE, Outcome, RuleResult, Severity, StepSource};

/// Every host-side rule's result, in a fixed order; the rules run in parallel, each one pass over its tables.
pub fn rules(cx: &Context<'_>) -> Vec<RuleResult> {
    let all: [fn(&Context<'_>) -> RuleResult; 5] = [
        copies::sync_copy_in_step,
        copies::pageable_copy_in_step,
        syncs::sync_in_step,
        tiny::tiny_kernels,
        straggler::straggler,
    ];
    all.par_iter().map(|rule| rule(cx)).collect()
}

/// A share of the steps' time at or above this is a high-severity finding.
pub const HIGH_SHARE_PCT: f64 = 10.0;
/// At or above this (and below [`HIGH_SHARE_PCT`]) a medium one; below it a low one.
pub const MEDIUM_SHARE_PCT: f64 = 3.0;

/// The severity band of a share of the steps' time (%).
pub fn severity_of(share_pct: f64) -> Severity {
    Severity::by_share(share_pct, HIGH_SHARE_PCT, MEDIUM_SHARE_PCT)
}

pub use crate::analyze::intervals::{ProcWindows as StepWindows, merged, union_ns};

/// The events a rule counted inside the steps: each process's union of their clipped host (or GPU) intervals,
/// and the first [`MAX_EVIDENCE`] of them in time order for the evidence. Bounded whether a load or a stream
/// feeds it: a stream settles each union behind the edge it is given ([`Hits::settle`]) and keeps only the
/// evidence that can still be among the first, so its answer is the load's.
#[derive(Default)]
pub struct Hits {
    count: u64,
    /// By process index: the intervals pushed since the last settle, then the union they went into. Per process,
    /// so that intervals of different processes never merge.
    unions: Vec<(Vec<(u64, u64)>, Union)>,
    /// The first events by [`evidence_key`], sorted; ties keep the order they came in (a stable sort's).
    evidence: Vec<EventRef>,
    /// Intervals that started inside time already settled (a stream's edge passed them): union time may be short.
    pub(crate) late: u64,
}

/// The order evidence is given in: time, then process, then correlation id.
fn evidence_key(e: &EventRef) -> (u64, ProcId, u32) {
    (e.start, e.proc, e.correlation)
}

impl Hits {
    /// Counts a hit: `clipped`, its interval inside the step, and `event`, its evidence.
    pub fn push(&mut self, clipped: (u64, u64), event: EventRef) {
        let key = evidence_key(&event);
        self.offer(clipped, key, event.end, || event.what);
    }

    /// Counts a hit of process `key.1` whose evidence would be `EventRef { start: key.0, end, correlation: key.2,
    /// what: what() }`; `what` is called only when the event is among the first so far (no string per row).
    pub fn offer(&mut self, clipped: (u64, u64), key: (u64, ProcId, u32), end: u64, what: impl FnOnce() -> String) {
        self.count += 1;
        let p = key.1.index();
        if self.unions.len() <= p {
            self.unions.resize_with(p + 1, Default::default);
        }
        self.unions[p].0.push(clipped);
        let at = self.evidence.partition_point(|e| evidence_key(e) <= key);
        if at < MAX_EVIDENCE {
            let (start, proc, correlation) = key;
            self.evidence.insert(at, EventRef { proc, start, end, correlation, what: what() });
            self.evidence.truncate(MAX_EVIDENCE);
        }
    }

    /// Adds the intervals pushed since the last settle to their unions, and settles the merged intervals that end
    /// before `edge` (no interval still to come starts before it) and the oldest past `cap` open ones per process.
    /// Returns how many were settled early (past `cap`).
    pub fn settle(&mut self, edge: u64, cap: usize) -> u64 {
        let mut early = 0;
        for (pending, union) in &mut self.unions {
            let before = union.settled_early;
            self.late += union.add(std::mem::take(pending), edge, cap);
            early += union.settled_early - before;
        }
        early
    }

    /// How many hits were counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The union of the intervals, each process's apart.
    pub fn time_ns(&mut self) -> u64 {
        self.settle(u64::MAX, usize::MAX);
        self.unions.iter().fold(0u64, |a, (_, u)| a.saturating_add(u.busy_ns()))
    }

    /// The first [`MAX_EVIDENCE`] events in time order.
    pub fn evidence(self) -> Vec<EventRef> {
        self.evidence
    }

    /// A finding with the hits' count, union time and share of `windows`, severity by that share.
    pub fn found(
        mut self,
        windows: &StepWindows,
        summary: impl FnOnce(u64, u64, f64) -> String,
        advice: &str,
    ) -> Outcome {
        let (count, time_ns) = (self.count(), self.time_ns());
        let share_pct = windows.share_pct(time_ns);
        Outcome::Found(Finding {
            severity: severity_of(share_pct),
            summary: summary(count, time_ns, share_pct),
            advice: advice.to_string(),
            count,
            time_ns,
            share_pct,
            events: self.evidence(),
        })
    }
}

/// The answer of a rule that needs steps when none are known.
pub fn no_steps(rule: &'static str, cx: &Context<'_>) -> RuleResult {
    let why = match cx.step_source {
        StepSource::None => "no steps: give --step PREFIX (the NVTX ranges that are steps)".to_string(),
        _ => "no steps: the step ranges asked for are not in the recording (give --step PREFIX)".to_string(),
    };
    RuleResult { rule, outcome: Outcome::CannotJudge { why } }
}

/// `1 copy`, `2 copies`: a count with its noun.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Milliseconds with three decimals, for summaries.
pub fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unions_count_overlaps_once_and_bands_split_at_3_and_10_percent() {
        assert_eq!(union_ns(vec![(10, 20), (15, 30), (40, 41), (30, 35)]), 26);
        assert_eq!(merged(vec![(5, 6), (1, 3), (2, 4)]), [(1, 4), (5, 6)]);
        assert_eq!([counted(1, "copy", "copies"), counted(0, "copy", "copies")], ["1 copy", "0 copies"]);
        assert_eq!(
            [severity_of(10.0), severity_of(9.99), severity_of(3.0), severity_of(2.9)],
            [Severity::High, Severity::Medium, Severity::Medium, Severity::Low]
        );
    }

    #[test]
    fn a_call_is_in_the_step_its_start_is_in_and_its_time_is_cut_at_the_steps_end() {
        let w = StepWindows::new(1, [(ProcId(0), 100, 200), (ProcId(0), 150, 250), (ProcId(0), 300, 400)].into_iter());
        assert_eq!((w.count, w.total_ns), (3, 250), "the overlapping two merge");
        assert_eq!(w.clip(ProcId(0), 100, 120), Some((100, 120)));
        assert_eq!(w.clip(ProcId(0), 240, 320), Some((240, 250)));
        assert_eq!(w.clip(ProcId(0), 250, 260), None, "windows are half-open");
        assert_eq!(w.clip(ProcId(0), 99, 150), None, "started before the step");
        assert_eq!(w.clip(ProcId(1), 100, 120), None, "another process");
        assert!((w.share_pct(25) - 10.0).abs() < 1e-12);
    }
}
