//! Host-side rules: synchronous and pageable copies inside steps, synchronizations inside steps, many tiny
//! kernels, a rank late at collectives. Each rule is in its own file under `host/`; this file holds what they
//! share: the steps as per-process windows, the severity bands, and the evidence a finding carries.

mod copies;
mod straggler;
mod syncs;
mod tiny;

use cutr_model::ProcId;
use rayon::prelude::*;

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

/// The events a rule counted inside the steps: their clipped host (or GPU) intervals, for the union, and what
/// each was, for the evidence.
#[derive(Default)]
pub struct Hits {
    /// Per process, so that intervals of different processes never merge.
    intervals: Vec<((ProcId, u64), u64)>,
    events: Vec<EventRef>,
}

impl Hits {
    pub fn push(&mut self, clipped: (u64, u64), event: EventRef) {
        self.intervals.push(((event.proc, clipped.0), clipped.1));
        self.events.push(event);
    }

    pub fn count(&self) -> u64 {
        self.events.len() as u64
    }

    /// The union of the intervals, each process's apart.
    pub fn time_ns(&self) -> u64 {
        let mut iv = self.intervals.clone();
        iv.sort_unstable();
        let mut total = 0;
        for group in iv.chunk_by(|a, b| a.0.0 == b.0.0) {
            total += union_ns(group.iter().map(|((_, s), e)| (*s, *e)).collect());
        }
        total
    }

    /// The first [`MAX_EVIDENCE`] events in time order.
    pub fn evidence(mut self) -> Vec<EventRef> {
        self.events.sort_by_key(|e| (e.start, e.proc, e.correlation));
        self.events.truncate(MAX_EVIDENCE);
        self.events
    }

    /// A finding with the hits' count, union time and share of `windows`, severity by that share.
    pub fn found(self, windows: &StepWindows, summary: impl FnOnce(u64, u64, f64) -> String, advice: &str) -> Outcome {
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
