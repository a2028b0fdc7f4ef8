//! `straggler`: one rank late at collectives. The slowest rank of each step is the one `stats --by-rank --step`
//! names ([`crate::ranks::by_rank`]): the rank whose step range is longest (the instances of one name on a rank
//! added up; ties to the lower rank). The straggler is the rank slowest in the most steps; it is a finding when that
//! is at least [`STRAGGLER_STEPS_PCT`] of the steps that several ranks ran and the time the others lost (the
//! slowest step's length less the fastest's, summed over its steps) is at least [`STRAGGLER_FLOOR_PCT`] of those
//! steps' time. Beside it, from the collectives themselves: in how many of those steps its first collective (NCCL)
//! kernel started last on the GPU, the others waiting inside theirs.
//!
//! The steps are grouped by name through an index sorted by (name, rank), four bytes a step: a day of steps named
//! apart is millions of names, and a map of them (a string and a map of ranks each) was the largest thing a
//! streamed `analyze` held.

use std::collections::BTreeMap;

use cutr_model::{ProcId, Trace};
use rayon::prelude::*;

use super::super::super::types::{Context, EventRef, Finding, MAX_EVIDENCE, Outcome, RuleResult, Step, StepSource};
use super::{ms, no_steps, severity_of};

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
    straggler_of(cx, prefix, gpu_ranks(cx.trace), || {
        let collectives = collectives(cx.trace);
        cx.steps.iter().map(|s| first_collective(&collectives, s)).collect()
    })
}

/// How many ranks have GPU work (kernels, copies or memsets): the ranks `stats --by-rank` lists.
fn gpu_ranks(t: &Trace) -> usize {
    let procs = t.kernels.iter().map(|k| k.proc);
    let procs = procs.chain(t.memcpys.iter().map(|m| m.proc)).chain(t.memsets.iter().map(|m| m.proc));
    let mut seen = vec![false; t.processes.len()];
    for p in procs {
        if let Some(s) = seen.get_mut(p.index()) {
            *s = true;
        }
    }
    distinct_ranks(t, (0..seen.len()).filter(|&i| seen[i]).map(|i| ProcId(i as u16)))
}

/// How many distinct ranks ([`Trace::job_ranks`]) the files `procs` are.
pub(crate) fn distinct_ranks(t: &Trace, procs: impl Iterator<Item = ProcId>) -> usize {
    let ranks = t.job_ranks();
    let mut r: Vec<u32> = procs.filter_map(|p| ranks.get(p.index()).map(|r| r.0)).collect();
    r.sort_unstable();
    r.dedup();
    r.len()
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
    if !cx.steps.iter().any(|s| s.end > s.start) {
        return Err(no_steps(RULE, cx));
    }
    Ok(prefix)
}

/// The rule over `cx.steps`, named with `prefix`, on a job whose files with GPU work are `ranks` ranks; `firsts`
/// gives, for each of `cx.steps`, the first collective kernel (on the GPU) of those launched inside it: (its GPU
/// start, its correlation id).
pub(crate) fn straggler_of(
    cx: &Context<'_>,
    prefix: &str,
    ranks: usize,
    firsts: impl FnOnce() -> Vec<Option<(u64, u32)>>,
) -> RuleResult {
    if ranks < 2 {
        return judge("one rank: give every rank's recording to compare them");
    }
    let groups = NameGroups::of(cx.steps);
    let (shared, steps_ns, slowest) = groups.slowest_counts();
    let Some((rank, slowest_in)) = slowest else {
        return judge("no step range is in more than one rank's recording");
    };
    let firsts = firsts();
    let mut lost = 0;
    let mut late = 0;
    let mut evidence = Evidence::default();
    for g in groups.iter().filter(|g| g.ranks.len() > 1 && g.slowest() == rank) {
        lost += g.spread_ns();
        let behind = g.late_at_collective(cx.steps, &firsts, rank);
        late += u64::from(behind.is_some());
        evidence.offer(cx.steps, prefix, &g, rank, behind);
    }
    let share_pct = if steps_ns == 0 { 0.0 } else { 100.0 * lost as f64 / steps_ns as f64 };
    let steps_pct = 100.0 * slowest_in as f64 / shared as f64;
    if steps_pct < STRAGGLER_STEPS_PCT || share_pct < STRAGGLER_FLOOR_PCT {
        let checked = format!(
            "{shared} steps on {ranks} ranks: the slowest, rank {rank}, was slowest in {slowest_in} ({steps_pct:.0}%), \
             the others losing {share_pct:.1}% of step time (fires at {STRAGGLER_STEPS_PCT}% of steps and \
             {STRAGGLER_FLOOR_PCT}% of time)"
        );
        return RuleResult { rule: RULE, outcome: Outcome::Clean { checked } };
    }
    let summary = format!(
        "rank {rank} was the slowest in {slowest_in} of {shared} steps (as stats --by-rank names it); the other ranks \
         lost {} ({share_pct:.1}% of step time); its first collective started last in {late} of those steps",
        ms(lost),
    );
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
        events: evidence.events(),
    };
    RuleResult { rule: RULE, outcome: Outcome::Found(finding) }
}

/// The steps by name, each name's steps by rank: indices into the steps, in the steps' own order within a rank.
struct NameGroups<'s> {
    steps: &'s [Step],
    order: Vec<u32>,
}

/// One step name: its steps (indices into the steps) and each rank's summed length.
struct NameGroup<'s> {
    name: &'s str,
    members: &'s [u32],
    /// (rank, ns), by rank.
    ranks: Vec<(u32, u64)>,
}

impl<'s> NameGroups<'s> {
    fn of(steps: &'s [Step]) -> NameGroups<'s> {
        let mut order: Vec<u32> = (0..steps.len() as u32).collect();
        let key = |i: &u32| {
            let s = &steps[*i as usize];
            (s.name.as_str(), s.rank, *i)
        };
        order.par_sort_unstable_by(|a, b| key(a).cmp(&key(b)));
        NameGroups { steps, order }
    }

    fn iter(&self) -> impl Iterator<Item = NameGroup<'_>> {
        let steps = self.steps;
        let name = move |i: u32| steps[i as usize].name.as_str();
        self.order.chunk_by(move |a, b| name(*a) == name(*b)).map(move |members| {
            let mut ranks: Vec<(u32, u64)> = Vec::new();
            for &i in members {
                let s = &steps[i as usize];
                let ns = s.end.saturating_sub(s.start);
                match ranks.last_mut() {
                    Some(last) if last.0 == s.rank => last.1 += ns,
                    _ => ranks.push((s.rank, ns)),
                }
            }
            NameGroup { name: name(members[0]), members, ranks }
        })
    }

    /// Of the names that several ranks ran: how many, their slowest ranks' time summed, and the rank slowest in
    /// the most of them with that count (ties to the lower rank), as `stats --by-rank` counts its stragglers.
    fn slowest_counts(&self) -> (u64, u64, Option<(u32, u64)>) {
        let (mut shared, mut steps_ns) = (0, 0);
        let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
        for g in self.iter().filter(|g| g.ranks.len() > 1) {
            shared += 1;
            steps_ns += g.max_ns();
            *counts.entry(g.slowest()).or_default() += 1;
        }
        let most = counts.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)));
        (shared, steps_ns, most)
    }
}

impl NameGroup<'_> {
    fn max_ns(&self) -> u64 {
        self.ranks.iter().map(|r| r.1).max().unwrap_or(0)
    }

    /// The rank with the longest time (the lower rank on a tie).
    fn slowest(&self) -> u32 {
        self.ranks.iter().copied().max_by_key(|x| (x.1, std::cmp::Reverse(x.0))).map_or(0, |x| x.0)
    }

    /// The slowest rank's length less the fastest's.
    fn spread_ns(&self) -> u64 {
        self.max_ns() - self.ranks.iter().map(|r| r.1).min().unwrap_or(0)
    }

    /// Whether `rank`'s first collective of this name's steps (the first of its steps that launched one) started
    /// after every other rank's: (its start, its correlation id, how much later than the earliest rank's).
    fn late_at_collective(&self, steps: &[Step], firsts: &[Option<(u64, u32)>], rank: u32) -> Option<(u64, u32, u64)> {
        let with_first = self.members.iter().filter_map(|&i| {
            let first = firsts.get(i as usize).copied().flatten()?;
            Some((steps[i as usize].rank, first))
        });
        let mine = with_first.clone().find(|f| f.0 == rank)?.1;
        let others = with_first.filter(|f| f.0 != rank).map(|f| f.1.0);
        let (latest, earliest) = (others.clone().max()?, others.min()?);
        (mine.0 > latest).then(|| (mine.0, mine.1, mine.0 - earliest))
    }
}

/// The straggler's first steps (at most [`MAX_EVIDENCE`], by start, then in `stats --by-rank`'s order of the
/// names) with their lengths and its lateness at the collective.
#[derive(Default)]
struct Evidence<'n> {
    /// ((start, the name's number after the prefix, the name), the event), sorted.
    first: Vec<((u64, u64, &'n str), EventRef)>,
}

impl<'n> Evidence<'n> {
    fn offer(&mut self, steps: &[Step], prefix: &str, g: &NameGroup<'n>, rank: u32, late: Option<(u64, u32, u64)>) {
        let Some(&i) = g.members.iter().find(|&&i| steps[i as usize].rank == rank) else { return };
        let step = &steps[i as usize];
        let number = g.name.trim_start_matches(prefix).trim().parse::<u64>().unwrap_or(u64::MAX);
        let key = (step.start, number, g.name);
        if self.first.len() == MAX_EVIDENCE && self.first.last().is_some_and(|(k, _)| *k <= key) {
            return;
        }
        let (Some(own), Some(fastest)) =
            (g.ranks.iter().find(|r| r.0 == rank), g.ranks.iter().min_by_key(|r| (r.1, r.0)))
        else {
            return;
        };
        let mut what = format!("{}: rank {rank} {}, rank {} {}", g.name, ms(own.1), fastest.0, ms(fastest.1));
        let mut correlation = 0;
        if let Some((_, corr, behind)) = late {
            what += &format!("; its first collective started {} after the first rank's", ms(behind));
            correlation = corr;
        }
        let event = EventRef { proc: step.proc, start: step.start, end: step.end, correlation, what };
        let at = self.first.partition_point(|(k, _)| *k <= key);
        self.first.insert(at, (key, event));
        self.first.truncate(MAX_EVIDENCE);
    }

    fn events(self) -> Vec<EventRef> {
        self.first.into_iter().map(|(_, e)| e).collect()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::types::Severity;

    /// (file and rank, name, start and end in µs).
    fn steps(list: &[(u16, &str, u64, u64)]) -> Vec<Step> {
        let mut steps: Vec<Step> = list
            .iter()
            .map(|&(p, name, start, end)| Step {
                proc: ProcId(p),
                rank: p as u32,
                index: 0,
                name: name.into(),
                start: start * 1000,
                end: end * 1000,
            })
            .collect();
        steps.sort_by_key(|s| (s.proc, s.start));
        steps
    }

    fn run(steps: &[Step], firsts: Vec<Option<(u64, u32)>>) -> RuleResult {
        let t = Trace::default();
        let source = StepSource::NvtxPrefix("iter ".into());
        let cx = Context { trace: &t, steps, step_source: &source };
        straggler_of(&cx, "iter ", 2, || firsts)
    }

    /// Instances of a name on a rank add up, a tie goes to the lower rank, a name one rank ran is not compared,
    /// and the lateness at the collective is judged from each rank's first step of the name that launched one.
    #[test]
    fn names_group_across_ranks_as_stats_by_rank_groups_them() {
        let s = steps(&[
            (0, "iter 1", 0, 100),
            (0, "iter 2", 200, 260),
            (0, "iter 2", 300, 350),
            (0, "iter 3", 400, 500),
            (1, "iter 1", 0, 80),
            (1, "iter 2", 200, 300),
            (1, "iter 3", 400, 500),
            (1, "iter 4", 600, 700),
        ]);
        // In the steps' order: rank 0's iter 1, 2, 2, 3, then rank 1's iter 1, 2, 3, 4.
        let firsts =
            vec![Some((50_000, 7)), None, Some((320_000, 9)), None, Some((20_000, 8)), Some((330_000, 10)), None, None];
        let Outcome::Found(f) = run(&s, firsts).outcome else { panic!("a finding") };
        assert_eq!(
            f.summary,
            "rank 0 was the slowest in 3 of 3 steps (as stats --by-rank names it); the other ranks lost 0.030 ms \
             (9.7% of step time); its first collective started last in 1 of those steps"
        );
        assert_eq!((f.count, f.time_ns, f.severity), (3, 30_000, Severity::Medium));
        let what: Vec<(&str, u64, u32)> = f.events.iter().map(|e| (e.what.as_str(), e.start, e.correlation)).collect();
        assert_eq!(
            what,
            [
                (
                    "iter 1: rank 0 0.100 ms, rank 1 0.080 ms; its first collective started 0.030 ms after the first \
                     rank's",
                    0,
                    7
                ),
                ("iter 2: rank 0 0.110 ms, rank 1 0.100 ms", 200_000, 0),
                ("iter 3: rank 0 0.100 ms, rank 0 0.100 ms", 400_000, 0),
            ]
        );
    }

    /// The evidence is the straggler's first steps in time, whatever their names' order.
    #[test]
    fn the_evidence_is_the_first_steps_in_time() {
        let mut list = Vec::new();
        let names: Vec<String> = (1..=7).map(|n| format!("iter {n}")).collect();
        for (n, name) in names.iter().enumerate() {
            let start = (7 - n as u64) * 1000;
            list.push((0, name.as_str(), start, start + 200));
            list.push((1, name.as_str(), start, start + 100));
        }
        let Outcome::Found(f) = run(&steps(&list), vec![None; list.len()]).outcome else { panic!("a finding") };
        let names: Vec<&str> = f.events.iter().map(|e| e.what.split(':').next().unwrap()).collect();
        assert_eq!(names, ["iter 7", "iter 6", "iter 5", "iter 4", "iter 3"]);
        assert_eq!(
            f.summary.split(';').next().unwrap(),
            "rank 0 was the slowest in 7 of 7 steps (as stats --by-rank names it)"
        );
    }
}
