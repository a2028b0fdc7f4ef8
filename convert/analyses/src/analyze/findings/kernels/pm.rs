//! Each kernel's PM sampling averages, as `stats --report counters` computes them (time-weighted over every
//! execution of the name on a device, `stats`' counters section): read once, looked up by the rules.

use std::collections::HashMap;

use cutr_model::Trace;

use crate::stats::counters::{CounterSection, MAX_ROWS, section};

/// PM sampling's metrics, as the recorder names them (the model's series are `PM: METRIC (UNIT)`; the unit is
/// not matched, so a recorder that spells it otherwise is still read).
pub const DRAM_READ_BYTES: &str = "dram__bytes_read.sum.per_second";
pub const DRAM_WRITE_BYTES: &str = "dram__bytes_write.sum.per_second";
/// The alternatives the recorder takes on chips whose PM sampling gives DRAM traffic in percent of peak only.
pub const DRAM_READ_PCT: &str = "dramc__read_throughput.avg.pct_of_peak_sustained_elapsed";
pub const DRAM_WRITE_PCT: &str = "dramc__write_throughput.avg.pct_of_peak_sustained_elapsed";
pub const SM_ISSUE_PCT: &str = "sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed";
pub const TENSOR_PCT: &str = "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed";
pub const WARPS_UNUSED_ACTIVE_PCT: &str = "tpc__warps_inactive_sm_active_realtime.avg.pct_of_peak_sustained_elapsed";
pub const WARPS_UNUSED_IDLE_PCT: &str = "tpc__warps_inactive_sm_idle_realtime.avg.pct_of_peak_sustained_elapsed";

/// The metric of a PM series' name: `PM: dram__bytes_read.sum.per_second (byte/second)` gives
/// `dram__bytes_read.sum.per_second`; `None` for a series not of PM sampling.
fn metric_of(series: &str) -> Option<&str> {
    let rest = series.strip_prefix("PM: ")?;
    Some(rest.split_once(" (").map_or(rest, |(metric, _)| metric))
}

/// Per (kernel name, device): each PM metric's average over the kernel's executions.
pub struct PmAverages {
    by_kernel: HashMap<(String, u32), HashMap<String, f64>>,
    /// Whether the file holds any PM sampling series at all.
    pub any: bool,
}

impl PmAverages {
    pub fn of(t: &Trace) -> PmAverages {
        if !PmAverages::recorded(t) {
            return PmAverages { by_kernel: HashMap::new(), any: false };
        }
        PmAverages::of_section(section(t, None, MAX_ROWS))
    }

    /// Whether `t` holds any PM sampling series (the series alone: a stream's trace has them without its rows).
    pub(crate) fn recorded(t: &Trace) -> bool {
        let pm = |series| t.names.get(series).starts_with("PM: ");
        t.counters.iter().any(|c| pm(c.series)) || t.counter_series.iter().any(|c| pm(c.series))
    }

    /// The averages of the kernel rows of `stats`' counters section (of a trace with PM sampling series: loaded,
    /// or summed over a stream).
    pub(crate) fn of_section(s: CounterSection) -> PmAverages {
        let mut by_kernel: HashMap<(String, u32), HashMap<String, f64>> = HashMap::new();
        for r in s.rows {
            let Some(metric) = metric_of(&r.series).filter(|_| r.over == "kernel" && r.average.is_finite()) else {
                continue;
            };
            let metric = metric.to_string();
            by_kernel.entry((r.name, r.device)).or_default().insert(metric, r.average);
        }
        PmAverages { by_kernel, any: true }
    }

    /// A metric's average over a kernel's executions on a device.
    pub fn get(&self, kernel: &str, device: u32, metric: &str) -> Option<f64> {
        self.by_kernel.get(&(kernel.to_string(), device))?.get(metric).copied()
    }

    /// Achieved occupancy (%): 100 less the warp slots unused on active SMs and on idle SMs (the recorder's two
    /// `tpc__warps_inactive_*` shares of every warp slot), where both were recorded.
    pub fn achieved_occupancy_pct(&self, kernel: &str, device: u32) -> Option<f64> {
        let unused_active = self.get(kernel, device, WARPS_UNUSED_ACTIVE_PCT)?;
        let unused_idle = self.get(kernel, device, WARPS_UNUSED_IDLE_PCT)?;
        Some((100.0 - unused_active - unused_idle).clamp(0.0, 100.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_name_gives_its_metric() {
        assert_eq!(metric_of("PM: dram__bytes_read.sum.per_second (byte/second)"), Some(DRAM_READ_BYTES));
        assert_eq!(metric_of("PM: sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed"), Some(SM_ISSUE_PCT));
        assert_eq!(metric_of("power (W)"), None);
    }
}
