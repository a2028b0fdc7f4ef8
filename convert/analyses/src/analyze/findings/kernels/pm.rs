//! Each kernel's PM sampling averages, as `stats --report counters` computes them (time-weighted over every
//! execution of the name on a device, `stats`' counters section): read once, looked up by the rules.

use std::collections::HashMap;

use cutr_model::Trace;

use crate::stats::counters::{MAX_ROWS, section};

/// PM sampling's series names (as the model names them: `PM: ` and the metric, its unit in parentheses).
pub const DRAM_READ_BYTES: &str = "PM: dram__bytes_read.sum.per_second (byte/second)";
pub const DRAM_WRITE_BYTES: &str = "PM: dram__bytes_write.sum.per_second (byte/second)";
/// The alternatives the recorder takes on chips whose PM sampling gives DRAM traffic in percent of peak only.
pub const DRAM_READ_PCT: &str = "PM: dramc__read_throughput.avg.pct_of_peak_sustained_elapsed (percent)";
pub const DRAM_WRITE_PCT: &str = "PM: dramc__write_throughput.avg.pct_of_peak_sustained_elapsed (percent)";
pub const SM_ISSUE_PCT: &str = "PM: sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed (percent)";
pub const TENSOR_PCT: &str = "PM: sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed (percent)";
pub const WARPS_UNUSED_ACTIVE_PCT: &str =
    "PM: tpc__warps_inactive_sm_active_realtime.avg.pct_of_peak_sustained_elapsed (percent)";
pub const WARPS_UNUSED_IDLE_PCT: &str =
    "PM: tpc__warps_inactive_sm_idle_realtime.avg.pct_of_peak_sustained_elapsed (percent)";

/// Per (kernel name, device): each PM series' average over the kernel's executions.
pub struct PmAverages {
    by_kernel: HashMap<(String, u32), HashMap<String, f64>>,
    /// Whether the file holds any PM sampling series at all.
    pub any: bool,
}

impl PmAverages {
    pub fn of(t: &Trace) -> PmAverages {
        let any = t.counters.iter().any(|c| t.names.get(c.series).starts_with("PM: "));
        let mut by_kernel: HashMap<(String, u32), HashMap<String, f64>> = HashMap::new();
        if any {
            for r in section(t, None, MAX_ROWS).rows {
                if r.over == "kernel" && r.series.starts_with("PM: ") && r.average.is_finite() {
                    by_kernel.entry((r.name, r.device)).or_default().insert(r.series, r.average);
                }
            }
        }
        PmAverages { by_kernel, any }
    }

    /// A series' average over a kernel's executions on a device.
    pub fn get(&self, kernel: &str, device: u32, series: &str) -> Option<f64> {
        self.by_kernel.get(&(kernel.to_string(), device))?.get(series).copied()
    }

    /// Achieved occupancy (%): 100 less the warp slots unused on active SMs and on idle SMs (the recorder's two
    /// `tpc__warps_inactive_*` shares of every warp slot), where both were recorded.
    pub fn achieved_occupancy_pct(&self, kernel: &str, device: u32) -> Option<f64> {
        let unused_active = self.get(kernel, device, WARPS_UNUSED_ACTIVE_PCT)?;
        let unused_idle = self.get(kernel, device, WARPS_UNUSED_IDLE_PCT)?;
        Some((100.0 - unused_active - unused_idle).clamp(0.0, 100.0))
    }
}
