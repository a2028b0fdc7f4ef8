//! Counter samples over time (`--counters`): which sources run and how often. NVML's device metrics
//! ([`crate::nvml`]) run wherever the driver is installed.

use std::time::Duration;

/// The `--counters` options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountersConfig {
    /// How often NVML is read (`--nvml-interval`); `None` leaves NVML out.
    pub nvml_interval: Option<Duration>,
}

impl Default for CountersConfig {
    fn default() -> Self {
        CountersConfig { nvml_interval: Some(DEFAULT_NVML_INTERVAL) }
    }
}

/// 100 Hz: NVML's power and utilization readings change at the driver's own rate (a few ms to 1/6 s).
pub const DEFAULT_NVML_INTERVAL: Duration = Duration::from_millis(10);
/// The fastest NVML rate accepted: each reading costs the driver a few microseconds per metric and device.
pub const MIN_NVML_INTERVAL: Duration = Duration::from_millis(1);
