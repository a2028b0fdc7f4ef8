//! `kernel_bound`: each hot kernel's bound from its PM sampling averages, in Nsight Compute's "Speed of Light"
//! style. Memory throughput is DRAM read + write as a share of the device's peak (from the recorded memory clock
//! and bus width, `2 x clock x width / 8` as CUDA's bandwidthTest computes it; or the `dramc__*_throughput`
//! percentages where the chip gives those); compute throughput is the higher of the SMs' instruction issue and the
//! tensor pipes' activity, as percentages of peak. The higher of the two at or above [`BOUND_PCT`] names the bound;
//! both below it: latency-bound (neither unit is kept busy: too few warps, or each waits on the last).

use cutr_model::{ProcId, Trace};

use super::super::super::types::{Finding, Outcome, RuleResult, Severity};
use super::hot::{HotKernel, Windows, short_name};
use super::pm::{self, PmAverages};

pub const RULE: &str = "kernel_bound";
/// A throughput at or above this share of peak (%) makes a unit the bound.
pub const BOUND_PCT: f64 = 60.0;

/// Which unit limits a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    Memory,
    Compute,
    Latency,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::Memory => "memory-bound",
            Bound::Compute => "compute-bound",
            Bound::Latency => "latency-bound",
        }
    }
}

/// A kernel's throughputs (% of peak) and the bound they give.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Throughput {
    pub memory_pct: f64,
    pub compute_pct: f64,
    pub bound: Bound,
}

impl Throughput {
    pub fn of(memory_pct: f64, compute_pct: f64) -> Throughput {
        let bound = if memory_pct.max(compute_pct) < BOUND_PCT {
            Bound::Latency
        } else if memory_pct >= compute_pct {
            Bound::Memory
        } else {
            Bound::Compute
        };
        Throughput { memory_pct, compute_pct, bound }
    }
}

/// The device's peak DRAM bandwidth (B/s) from its recorded properties: two transfers per memory clock over the
/// bus (CUDA's bandwidthTest formula).
pub fn peak_dram_bytes_per_s(t: &Trace, proc: ProcId, device: u32) -> Option<f64> {
    let d = t.processes.get(proc.index())?.meta.devices.iter().find(|d| d.id == device)?;
    let prop = |k: &str| d.properties.iter().find(|p| p.0 == k)?.1.parse::<f64>().ok().filter(|v| *v > 0.0);
    Some(2.0 * prop("memoryClockRateKHz")? * 1e3 * prop("globalMemoryBusWidth")? / 8.0)
}

/// DRAM throughput (% of peak) over a kernel's executions on a device, where the file has its series.
fn memory_pct(t: &Trace, h: &HotKernel<'_>, pm: &PmAverages) -> Option<f64> {
    let get = |s: &str| pm.get(&h.name, h.device, s);
    if let (Some(r), Some(w)) = (get(pm::DRAM_READ_PCT), get(pm::DRAM_WRITE_PCT)) {
        return Some(r + w);
    }
    let bytes = get(pm::DRAM_READ_BYTES)? + get(pm::DRAM_WRITE_BYTES)?;
    let proc = h.executions.iter().find(|k| k.device == h.device)?.proc;
    Some(100.0 * bytes / peak_dram_bytes_per_s(t, proc, h.device)?)
}

/// The compute throughput (% of peak): the higher of SM issue and tensor pipe activity.
fn compute_pct(h: &HotKernel<'_>, pm: &PmAverages) -> Option<f64> {
    let issue = pm.get(&h.name, h.device, pm::SM_ISSUE_PCT)?;
    Some(issue.max(pm.get(&h.name, h.device, pm::TENSOR_PCT).unwrap_or(0.0)))
}

/// A finding per hot kernel with PM averages; a kernel the counters do not cover says so.
pub fn rule(t: &Trace, hot: &[HotKernel<'_>], w: &Windows, pm: &PmAverages) -> Vec<RuleResult> {
    if !pm.any {
        let why = "no PM counters in the file (record with `cupti-record --counters`)".to_string();
        return vec![RuleResult { rule: RULE, outcome: Outcome::CannotJudge { why } }];
    }
    if hot.is_empty() {
        let checked = format!("no kernel ran in the {}", w.what);
        return vec![RuleResult { rule: RULE, outcome: Outcome::Clean { checked } }];
    }
    hot.iter()
        .map(|h| {
            let outcome = match (memory_pct(t, h, pm), compute_pct(h, pm)) {
                (Some(m), Some(c)) => Outcome::Found(finding(t, h, w, Throughput::of(m, c))),
                _ => Outcome::CannotJudge {
                    why: format!(
                        "{}: the PM counters do not cover its executions on GPU {} (DRAM traffic and SM issue \
                         are needed)",
                        short_name(&h.name),
                        h.device
                    ),
                },
            };
            RuleResult { rule: RULE, outcome }
        })
        .collect()
}

fn finding(t: &Trace, h: &HotKernel<'_>, w: &Windows, tp: Throughput) -> Finding {
    let summary = format!(
        "{}: {} (DRAM {:.1}% of peak, SM {:.1}% of peak; bound at {BOUND_PCT}%), {:.1}% of the {} time",
        short_name(&h.name),
        tp.bound.name(),
        tp.memory_pct,
        tp.compute_pct,
        h.share_pct,
        w.what
    );
    let (advice, severity) = match tp.bound {
        Bound::Memory => (
            "Near the DRAM roofline: only moving fewer bytes helps (fuse with its neighbours, lower precision, \
             reuse data in shared memory or L2).",
            Severity::Low,
        ),
        Bound::Compute => (
            "Near the SMs' issue or tensor roofline: only less work helps (cheaper math, tensor cores, lower \
             precision).",
            Severity::Low,
        ),
        Bound::Latency => (
            "Neither DRAM nor the SMs are kept busy: raise occupancy or the work in flight per warp, and see its \
             stall reasons (`cupti-record --pc-sampling`, `cupti-convert source`).",
            h.severity(),
        ),
    };
    Finding {
        severity,
        summary,
        advice: advice.to_string(),
        count: h.count,
        time_ns: h.time_ns,
        share_pct: h.share_pct,
        events: h.evidence(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_higher_throughput_names_the_bound() {
        assert_eq!(Throughput::of(83.8, 3.4).bound, Bound::Memory);
        assert_eq!(Throughput::of(0.1, 95.0).bound, Bound::Compute);
        assert_eq!(Throughput::of(59.9, 59.9).bound, Bound::Latency);
        assert_eq!(Throughput::of(60.0, 60.0).bound, Bound::Memory, "a tie at the bound: memory");
    }
}
