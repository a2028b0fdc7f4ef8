//! A process's steps as a GPU's sweep counts into them: which steps a busy run or a gap overlaps (steps may
//! overlap one another), each step's busy time and idle causes, and its budget once the GPU's span is known.

use super::super::StepBudget;
use super::super::budget::State;
use super::super::idle::IdleCauses;
use super::super::intervals::ProcWindows;
use super::super::types::Step;
use super::sweep::Busy;
use cutr_model::ProcId;

/// One process's steps, in the order of [`super::FirstPass::steps`]: borrowed, with the first pass's merged
/// windows of them (a day-long recording has millions of steps, not to be copied per fold).
#[derive(Debug, Default)]
pub struct ProcSteps<'f> {
    proc: ProcId,
    /// The process's steps, by start.
    steps: &'f [Step],
    /// The latest end among the steps up to each: the first step that can reach past an instant.
    max_end: Vec<u64>,
    /// Every process's steps merged ([`super::FirstPass::step_windows`]), for a gap's time inside steps.
    merged: Option<&'f ProcWindows>,
}

impl<'f> ProcSteps<'f> {
    /// `steps`: process `proc`'s, by start; `merged`: the merged windows of every process's steps.
    pub fn new(proc: ProcId, steps: &'f [Step], merged: Option<&'f ProcWindows>) -> ProcSteps<'f> {
        let mut max_end = Vec::with_capacity(steps.len());
        let mut latest = 0;
        for (_, end) in steps.iter().map(window) {
            latest = latest.max(end);
            max_end.push(latest);
        }
        ProcSteps { proc, steps, max_end, merged }
    }

    /// The steps overlapping `[start, end)`, with their windows.
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = (usize, (u64, u64))> + '_ {
        let first = self.max_end.partition_point(|&e| e <= start);
        self.steps[first..]
            .iter()
            .map(window)
            .enumerate()
            .take_while(move |(_, w)| w.0 < end)
            .filter(move |(_, w)| w.1 > start)
            .map(move |(i, w)| (first + i, w))
    }

    /// The time of `[start, end)` inside the merged steps.
    pub fn merged_inside(&self, start: u64, end: u64) -> u64 {
        self.merged.map_or(0, |m| m.inside(self.proc, start, end))
    }
}

/// A step's `[start, end)`: an end before its start taken as the start, as a budget takes it.
fn window(s: &Step) -> (u64, u64) {
    (s.start, s.end.max(s.start))
}

/// A step's tally on one GPU, made in the place of its answer so that finishing it moves and allocates nothing
/// (a day-long recording has millions of steps): while the sweep runs, the budget's four busy parts add up as
/// [`Busy`] adds them and the idle causes as the gaps come; [`finish_tally`] fills in the rest.
pub fn new_tally(threshold: u64) -> StepBudget {
    StepBudget {
        index: 0,
        name: Default::default(),
        budget: Default::default(),
        idle: IdleCauses { short_gap_threshold_ns: threshold, ..IdleCauses::default() },
    }
}

/// `ns` of `state` inside the step.
pub fn add_busy(tally: &mut StepBudget, state: State, ns: u64) {
    let mut busy = Busy::of(&tally.budget);
    busy.add(state, ns);
    busy.write(&mut tally.budget);
}

/// The step's budget and idle causes on a GPU whose span is `span`: time of the step outside it is idle,
/// "other" (as [`super::super::idle::causes_over`] counts it).
pub fn finish_tally(tally: &mut StepBudget, step: &Step, span: (u64, u64)) {
    let (ws, we) = (step.start, step.end.max(step.start));
    let (ss, se) = if span.1 > span.0 { span } else { (we, we) };
    tally.idle.other_ns += ss.clamp(ws, we) - ws + (we - se.clamp(ws, we));
    tally.budget = Busy::of(&tally.budget).budget(step.start, step.end);
    (tally.index, tally.name) = (step.index, step.name.clone());
}
