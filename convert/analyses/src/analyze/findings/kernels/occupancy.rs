//! `low_occupancy`: a hot kernel with a large share of the window time that keeps few of its SMs' warp slots busy.
//! Achieved occupancy comes from PM sampling where the file has it ([`PmAverages::achieved_occupancy_pct`]);
//! otherwise the launch's own occupancy is judged: the calculator's resident blocks per SM
//! ([`cutr_model::occupancy`], limited by registers, shared memory, block size or the architecture's block
//! count), capped by the blocks the grid gives each SM (Kineto's "est. achieved occupancy").

use cutr_model::occupancy::{BlockLimits, DeviceLimits, Launch, block_limits};
use cutr_model::{Kernel, Trace};

use super::super::super::types::{Finding, Outcome, RuleResult};
use super::hot::{HotKernel, Windows, short_name};
use super::pm::PmAverages;

pub const RULE: &str = "low_occupancy";
/// Only kernels with at least this share of the window time are judged.
pub const LARGE_SHARE_PCT: f64 = 5.0;
/// Occupancy below this (% of the SM's warp slots) is low.
pub const LOW_OCCUPANCY_PCT: f64 = 50.0;

/// A kernel's launch, as the calculator sees it: resident blocks per SM by each limit, and the grid's share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaunchOccupancy {
    pub limits: BlockLimits,
    pub grid_blocks: u64,
    pub block_threads: i32,
    pub multiprocessors: i32,
    /// Resident blocks per SM x block threads over the SM's thread slots (%), the grid aside.
    pub theoretical_pct: f64,
    /// The same with the blocks per SM capped by what the grid gives each SM (%).
    pub launch_pct: f64,
}

impl LaunchOccupancy {
    pub fn of(d: &DeviceLimits, l: &Launch) -> Option<LaunchOccupancy> {
        let limits = block_limits(d, l)?;
        if d.multiprocessors <= 0 || d.max_threads_per_multiprocessor <= 0 {
            return None;
        }
        let slots = d.max_threads_per_multiprocessor as f64;
        let per_sm = l.grid_blocks as f64 / d.multiprocessors as f64;
        let active = limits.active() as f64;
        Some(LaunchOccupancy {
            limits,
            grid_blocks: l.grid_blocks,
            block_threads: l.block_threads,
            multiprocessors: d.multiprocessors,
            theoretical_pct: 100.0 * active * l.block_threads as f64 / slots,
            launch_pct: 100.0 * active.min(per_sm) * l.block_threads as f64 / slots,
        })
    }

    /// What holds the launch's occupancy down: the grid where it gives each SM fewer blocks than fit, else the
    /// resource whose limit binds.
    pub fn limiter(&self) -> String {
        let active = self.limits.active();
        let per_sm = self.grid_blocks as f64 / self.multiprocessors as f64;
        if per_sm < active as f64 {
            return format!(
                "grid size: {} block(s) for {} SMs ({per_sm:.2} per SM, {active} would fit)",
                self.grid_blocks, self.multiprocessors
            );
        }
        let b = &self.limits;
        let t = self.block_threads;
        if active == b.registers {
            format!("registers: {active} block(s) of {t} threads fit the register file")
        } else if active == b.shared_memory {
            format!("shared memory: {active} block(s) fit the SM's shared memory")
        } else if active == b.warps {
            format!("block size: {active} block(s) of {t} threads fill the SM's warp slots")
        } else {
            format!("blocks per SM: the architecture's limit of {active}")
        }
    }
}

/// The rule's results: a finding per judged kernel below the threshold; else one clean result naming what was
/// checked, or why nothing could be.
pub fn rule(t: &Trace, hot: &[HotKernel], w: &Windows, pm: &PmAverages) -> Vec<RuleResult> {
    // NCCL's kernels keep few blocks on purpose (a channel each): their occupancy says nothing to act on.
    let large: Vec<&HotKernel> = hot
        .iter()
        .filter(|h| h.share_pct >= LARGE_SHARE_PCT && !h.name.to_ascii_lowercase().starts_with("nccl"))
        .collect();
    if large.is_empty() {
        let checked = format!("no kernel takes {LARGE_SHARE_PCT}% or more of the {} time", w.what);
        return vec![RuleResult { rule: RULE, outcome: Outcome::Clean { checked } }];
    }
    let mut found = Vec::new();
    let mut checked = Vec::new();
    for h in large {
        let launch = h.main_launch().and_then(|k| Some((k, t.occupancy_inputs(k)?)));
        let launch = launch.and_then(|(k, (d, l))| Some((k, LaunchOccupancy::of(&d, &l)?)));
        let achieved = h.devices.iter().find_map(|d| pm.achieved_occupancy_pct(&h.name, *d));
        let (pct, which) = match (achieved, &launch) {
            (Some(a), _) => (a, "achieved (PM sampling)"),
            (None, Some((_, o))) => (o.launch_pct, "estimated from the launch"),
            (None, None) => continue,
        };
        checked.push(format!("{} {pct:.1}% {which}", short_name(&h.name)));
        if pct < LOW_OCCUPANCY_PCT {
            found.push(finding(h, w, pct, which, launch));
        }
    }
    if !found.is_empty() {
        return found;
    }
    let outcome = if checked.is_empty() {
        Outcome::CannotJudge {
            why: "neither the device's limits (for the occupancy calculator) nor PM sampling's warp counters \
                  (record with `cupti-record --counters`) are in the file"
                .to_string(),
        }
    } else {
        Outcome::Clean { checked: format!("occupancy at or above {LOW_OCCUPANCY_PCT}%: {}", checked.join("; ")) }
    };
    vec![RuleResult { rule: RULE, outcome }]
}

fn finding(
    h: &HotKernel,
    w: &Windows,
    pct: f64,
    which: &str,
    launch: Option<(&Kernel, LaunchOccupancy)>,
) -> RuleResult {
    let mut summary = format!(
        "{}: occupancy {pct:.1}% {which}, below {LOW_OCCUPANCY_PCT}%, on {:.1}% of the {} time",
        short_name(&h.name),
        h.share_pct,
        w.what
    );
    let mut advice = String::from("More resident warps hide more latency: ");
    match launch {
        Some((k, o)) => {
            summary.push_str(&format!(
                "; launch of {} block(s) x {} threads, {} registers, {} B shared memory: theoretical {:.1}%, {:.1}% \
                 with its grid; limiter: {}",
                o.grid_blocks,
                o.block_threads,
                k.registers,
                k.static_smem.max(0) as i64 + k.dynamic_smem.max(0) as i64,
                o.theoretical_pct,
                o.launch_pct,
                o.limiter()
            ));
            advice.push_str(if o.launch_pct + 1e-9 < o.theoretical_pct {
                "give the grid more blocks (more, smaller tiles, or split-K) so every SM holds several."
            } else {
                "use fewer registers (__launch_bounds__, -maxrregcount) or less shared memory per block, or \
                 another block size."
            });
            if pct + 1e-9 < o.launch_pct * 0.8 {
                advice.push_str(" Achieved is well under what the launch allows: look for load imbalance or a tail.");
            }
        }
        None => advice.push_str("check the launch configuration (the file lacks the device's limits)."),
    }
    let finding = Finding {
        severity: h.severity(),
        summary,
        advice,
        count: h.count,
        time_ns: h.time_ns,
        share_pct: h.share_pct,
        events: h.evidence(),
    };
    RuleResult { rule: RULE, outcome: Outcome::Found(finding) }
}
