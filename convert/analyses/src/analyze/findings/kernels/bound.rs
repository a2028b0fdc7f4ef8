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

/// DRAM throughput (% of peak) over a kernel's executions on a device, or what the device lacks for it.
fn memory_pct(t: &Trace, h: &HotKernel, device: u32, pm: &PmAverages) -> Result<f64, String> {
    let get = |s: &str| pm.get(&h.name, device, s);
    if let (Some(r), Some(w)) = (get(pm::DRAM_READ_PCT), get(pm::DRAM_WRITE_PCT)) {
        return Ok(r + w);
    }
    let (read, write) = match (get(pm::DRAM_READ_BYTES), get(pm::DRAM_WRITE_BYTES)) {
        (Some(r), Some(w)) => (r, w),
        (None, _) => return Err(format!("no PM average of {} over it", pm::DRAM_READ_BYTES)),
        (_, None) => return Err(format!("no PM average of {} over it", pm::DRAM_WRITE_BYTES)),
    };
    let proc = h.tally.first_proc_on(device).unwrap_or(ProcId(0));
    let peak = peak_dram_bytes_per_s(t, proc, device)
        .ok_or_else(|| "no memory clock or bus width in the file (for its DRAM peak)".to_string())?;
    Ok(100.0 * (read + write) / peak)
}

/// The compute throughput (% of peak): the higher of SM issue and tensor pipe activity; or the series it lacks.
fn compute_pct(h: &HotKernel, device: u32, pm: &PmAverages) -> Result<f64, String> {
    let issue = pm
        .get(&h.name, device, pm::SM_ISSUE_PCT)
        .ok_or_else(|| format!("no PM average of {} over it", pm::SM_ISSUE_PCT))?;
    Ok(issue.max(pm.get(&h.name, device, pm::TENSOR_PCT).unwrap_or(0.0)))
}

/// A kernel's throughput on the first of its devices (most time first) whose counters give it; else what the
/// busiest device's counters lack.
fn throughput(t: &Trace, h: &HotKernel, pm: &PmAverages) -> Result<(u32, Throughput), String> {
    let mut first_err = None;
    for &d in &h.devices {
        match (memory_pct(t, h, d, pm), compute_pct(h, d, pm)) {
            (Ok(m), Ok(c)) => return Ok((d, Throughput::of(m, c))),
            (Err(e), _) | (_, Err(e)) => {
                first_err.get_or_insert(format!("GPU {d} has {e}"));
            }
        }
    }
    Err(first_err.unwrap_or_else(|| "it ran on no device".to_string()))
}

/// A finding per hot kernel with PM averages; a kernel the counters do not cover says so.
pub fn rule(t: &Trace, hot: &[HotKernel], w: &Windows, pm: &PmAverages) -> Vec<RuleResult> {
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
            let outcome = match throughput(t, h, pm) {
                Ok((device, tp)) => Outcome::Found(finding(h, w, device, tp)),
                Err(e) => Outcome::CannotJudge { why: format!("{}: {e}", short_name(&h.name)) },
            };
            RuleResult { rule: RULE, outcome }
        })
        .collect()
}

fn finding(h: &HotKernel, w: &Windows, device: u32, tp: Throughput) -> Finding {
    // The GPU is named where the kernel ran on several.
    let on = if h.devices.len() > 1 { format!(" on GPU {device}") } else { String::new() };
    let summary = format!(
        "{}{on}: {} (DRAM {:.1}% of peak, SM {:.1}% of peak; bound at {BOUND_PCT}%), {:.1}% of the {} time",
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
        events: h.evidence(),
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
