//! `straggler`: one rank late at collectives. The slowest rank of each step is the one `stats --by-rank --step`
//! names ([`crate::ranks::by_rank`], reused so the two never disagree): the rank whose step range is longest. The
//! straggler is the rank slowest in the most steps; it is a finding when that is at least
//! [`STRAGGLER_STEPS_PCT`] of the steps that several ranks ran and the time the others lost (the slowest step's
//! length less the fastest's, summed over its steps) is at least [`STRAGGLER_FLOOR_PCT`] of those steps' time.
//! Beside it, from the collectives themselves: in how many of those steps its first collective (NCCL) kernel
//! started last on the GPU, the others waiting inside theirs.

use std::collections::BTreeMap;

use cutr_model::Trace;

use super::super::super::types::{Context, EventRef, Finding, MAX_EVIDENCE, Outcome, RuleResult, Step, StepSource};
use super::{StepWindows, ms, no_steps, severity_of};
use crate::ranks::{RankReport, StepRow, by_rank};

/// The straggler must be the slowest rank in at least this share (%) of the steps several ranks ran.
pub const STRAGGLER_STEPS_PCT: f64 = 50.0;
/// The time the other ranks lost must be at least this share (%) of those steps' time.
pub const STRAGGLER_FLOOR_PCT: f64 = 1.0;

const RULE: &str = "straggler";

fn judge(why: &str) -> RuleResult {
    RuleResult { rule: RULE, outcome: Outcome::CannotJudge { why: why.to_string() } }
}

pub fn straggler(cx: &Context<'_>) -> RuleResult {
    let prefix = match step_prefix(cx) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let report = by_rank(cx.trace, Some(prefix));
    straggler_of(cx, &report, || {
        let collectives = collectives(cx.trace);
        cx.steps.iter().map(|s| first_collective(&collectives, s)).collect()
    })
}

/// The prefix of the NVTX ranges that are the steps (as `stats --by-rank --step` takes it), or the result when the
/// rule cannot judge the steps.
pub(crate) fn step_prefix<'a>(cx: &Context<'a>) -> Result<&'a str, RuleResult> {
    let prefix = match cx.step_source {
        StepSource::NvtxPrefix(p) => p.as_str(),
        StepSource::ProfilerStep => "ProfilerStep#",
        StepSource::GraphLaunches => return Err(judge("steps are graph launches, which ranks do not name alike")),
        StepSource::None => return Err(no_steps(RULE, cx)),
    };
    if StepWindows::of_steps(cx).is_none() {
        return Err(no_steps(RULE, cx));
    }
    Ok(prefix)
}

/// The rule over `stats --by-rank`'s `report` of the steps; `firsts` gives, for each of `cx.steps`, the first
/// collective kernel (on the GPU) of those launched inside it: (its GPU start, its correlation id).
pub(crate) fn straggler_of(
    cx: &Context<'_>,
    report: &RankReport,
    firsts: impl FnOnce() -> Vec<Option<(u64, u32)>>,
) -> RuleResult {
    if report.ranks.len() < 2 {
        return judge("one rank: give every rank's recording to compare them");
    }
    let shared: Vec<&StepRow> = report.steps.iter().filter(|s| s.per_rank.len() > 1).collect();
    let Some(&(rank, slowest_in)) = report.stragglers.first() else {
        return judge("no step range is in more than one rank's recording");
    };
    let its: Vec<&StepRow> = shared.iter().copied().filter(|s| s.slowest_rank == rank).collect();
    let lost: u64 = its.iter().map(|s| spread_ns(s)).sum();
    let steps_ns: u64 = shared.iter().map(|s| s.per_rank.iter().map(|r| r.1).max().unwrap_or(0)).sum();
    let share_pct = if steps_ns == 0 { 0.0 } else { 100.0 * lost as f64 / steps_ns as f64 };
    let steps_pct = 100.0 * slowest_in as f64 / shared.len() as f64;
    let late = late_at_collectives(cx.steps, &firsts(), &its, rank);
    if steps_pct < STRAGGLER_STEPS_PCT || share_pct < STRAGGLER_FLOOR_PCT {
        let checked = format!(
            "{} steps on {} ranks: the slowest, rank {rank}, was slowest in {slowest_in} ({steps_pct:.0}%), the \
             others losing {share_pct:.1}% of step time (fires at {STRAGGLER_STEPS_PCT}% of steps and \
             {STRAGGLER_FLOOR_PCT}% of time)",
            shared.len(),
            report.ranks.len()
        );
        return RuleResult { rule: RULE, outcome: Outcome::Clean { checked } };
    }
    let summary = format!(
        "rank {rank} was the slowest in {slowest_in} of {} steps (as stats --by-rank names it); the other ranks lost \
         {} ({share_pct:.1}% of step time); its first collective started last in {} of those steps",
        shared.len(),
        ms(lost),
        late.len()
    );
    let events = evidence(cx.steps, &its, rank, &late);
    let finding = Finding {
        severity: severity_of(share_pct),
        summary,
        advice: format!(
            "Look at what rank {rank} does before its collectives (data loading, extra host work, a slower GPU or \
             link): the other ranks wait for it inside every collective."
        ),
        count: slowest_in,
        time_ns: lost,
        share_pct,
        events,
    };
    RuleResult { rule: RULE, outcome: Outcome::Found(finding) }
}

/// The slowest rank's step length less the fastest's.
fn spread_ns(s: &StepRow) -> u64 {
    let max = s.per_rank.iter().map(|r| r.1).max().unwrap_or(0);
    max - s.per_rank.iter().map(|r| r.1).min().unwrap_or(0)
}

/// Whether a kernel is a collective: NCCL's and RCCL's kernels, by name.
pub fn is_collective(name: &str) -> bool {
    name.starts_with("nccl") || name.starts_with("rccl")
}

/// Every collective kernel of each process, by process index: (its launching call's start, its GPU start, its
/// correlation id), in launch order.
fn collectives(t: &Trace) -> Vec<Vec<(u64, u64, u32)>> {
    let mut by_proc = vec![Vec::new(); t.processes.len()];
    for k in t.kernels.iter().filter(|k| is_collective(t.kernel_name(k))) {
        if let (Some(a), Some(v)) = (t.launcher(k.corr()), by_proc.get_mut(k.proc.index())) {
            v.push((a.start, k.start, k.correlation));
        }
    }
    for v in &mut by_proc {
        v.sort_unstable();
    }
    by_proc
}

/// The first collective kernel (on the GPU) of those launched inside a step: (its GPU start, its correlation id).
fn first_collective(collectives: &[Vec<(u64, u64, u32)>], step: &Step) -> Option<(u64, u32)> {
    let v = collectives.get(step.proc.index())?;
    let from = v.partition_point(|c| c.0 < step.start);
    let to = v.partition_point(|c| c.0 < step.end);
    v[from..to].iter().map(|c| (c.1, c.2)).min()
}

/// A step and its first collective (GPU start, correlation id).
type StepFirst<'a> = (&'a Step, Option<(u64, u32)>);

/// Of the straggler's steps, by name: those where its first collective started after every other rank's, with
/// (its start, its correlation id, how much later than the earliest rank's). `firsts`: each step's first
/// collective.
fn late_at_collectives(
    steps: &[Step],
    firsts: &[Option<(u64, u32)>],
    its: &[&StepRow],
    rank: u32,
) -> BTreeMap<String, (u64, u32, u64)> {
    let mut late = BTreeMap::new();
    // Each step of a name, with its first collective.
    let mut by_name: BTreeMap<&str, Vec<StepFirst<'_>>> = BTreeMap::new();
    for (i, s) in steps.iter().enumerate() {
        by_name.entry(s.name.as_str()).or_default().push((s, firsts.get(i).copied().flatten()));
    }
    for row in its {
        let firsts: Vec<(u32, (u64, u32))> = by_name
            .get(row.step.as_str())
            .into_iter()
            .flatten()
            .filter_map(|(s, first)| first.map(|f| (s.rank, f)))
            .collect();
        let Some(&(_, mine)) = firsts.iter().find(|f| f.0 == rank) else { continue };
        let others = firsts.iter().filter(|f| f.0 != rank).map(|f| f.1.0);
        if let (Some(latest_other), Some(earliest)) = (others.clone().max(), others.min())
            && mine.0 > latest_other
        {
            late.insert(row.step.clone(), (mine.0, mine.1, mine.0 - earliest));
        }
    }
    late
}

/// The straggler's first steps (at most [`MAX_EVIDENCE`]) with their lengths and its lateness at the collective.
fn evidence(steps: &[Step], its: &[&StepRow], rank: u32, late: &BTreeMap<String, (u64, u32, u64)>) -> Vec<EventRef> {
    let mut events: Vec<EventRef> = its
        .iter()
        .filter_map(|row| {
            let step = steps.iter().find(|s| s.rank == rank && s.name == row.step)?;
            let fastest = row.per_rank.iter().min_by_key(|r| (r.1, r.0))?;
            let mut what = format!(
                "{}: rank {rank} {}, rank {} {}",
                row.step,
                ms(row.per_rank.iter().find(|r| r.0 == rank)?.1),
                fastest.0,
                ms(fastest.1)
            );
            let mut correlation = 0;
            if let Some(&(_, corr, behind)) = late.get(&row.step) {
                what += &format!("; its first collective started {} after the first rank's", ms(behind));
                correlation = corr;
            }
            Some(EventRef { proc: step.proc, start: step.start, end: step.end, correlation, what })
        })
        .collect();
    events.sort_by_key(|e| e.start);
    events.truncate(MAX_EVIDENCE);
    events
}
