//! Counter samples over time (`--counters`): which sources run and how often. NVML's device metrics
//! (module `nvml`) run wherever the driver is installed; PM sampling's hardware counters
//! ([`crate::counters::pm_sampling`]) where CUPTI 12.6+ and the GPU (Turing and later) allow.

pub(crate) mod nvml;
pub mod pm_sampling;

use std::time::Duration;

use crate::counters::pm_sampling::PmConfig;

/// The `--counters` options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountersConfig {
    /// How often NVML is read (`--nvml-interval`); `None` leaves NVML out.
    pub nvml_interval: Option<Duration>,
    /// PM sampling's metrics and interval; `None` leaves it out (`--counters nvml`).
    pub pm: Option<PmConfig>,
}

impl Default for CountersConfig {
    fn default() -> Self {
        CountersConfig { nvml_interval: Some(DEFAULT_NVML_INTERVAL), pm: Some(PmConfig::default()) }
    }
}

impl CountersConfig {
    /// `default` (PM sampling's default metrics, and NVML), `nvml` (NVML only), or a comma-separated list of PM
    /// metrics (and NVML), sampled every `interval`.
    pub fn parse(set: &str, interval: Duration, nvml_interval: Option<Duration>) -> Result<CountersConfig, String> {
        let pm = match set.trim() {
            "" => return Err("empty: use default, nvml or a comma-separated list of metric names".into()),
            "default" => Some(PmConfig { interval, ..PmConfig::default() }),
            "nvml" => None,
            names => Some(PmConfig {
                metrics: names.split(',').map(|m| m.trim().to_string()).filter(|m| !m.is_empty()).collect(),
                interval,
            }),
        };
        if let Some(p) = &pm
            && p.interval < crate::counters::pm_sampling::MIN_INTERVAL
        {
            return Err(format!(
                "counter interval {:?} is shorter than {:?}, the fastest PM sampling rate (100 kHz)",
                p.interval,
                crate::counters::pm_sampling::MIN_INTERVAL
            ));
        }
        Ok(CountersConfig { nvml_interval, pm })
    }

    /// The set `parse` reads back.
    pub fn set_arg(&self) -> String {
        match &self.pm {
            None => "nvml".into(),
            Some(p) if p.metrics == PmConfig::default().metrics => "default".into(),
            Some(p) => p.metrics.join(","),
        }
    }
}

/// 100 Hz: NVML's power and utilization readings change at the driver's own rate (a few ms to 1/6 s).
pub const DEFAULT_NVML_INTERVAL: Duration = Duration::from_millis(10);
/// The fastest NVML rate accepted: each reading costs the driver a few microseconds per metric and device.
pub const MIN_NVML_INTERVAL: Duration = Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_parse_and_read_back() {
        let us = Duration::from_micros;
        let d = CountersConfig::parse("default", us(100), Some(DEFAULT_NVML_INTERVAL)).unwrap();
        assert_eq!((d.set_arg(), d.pm.unwrap().interval), ("default".to_string(), us(100)));
        assert_eq!(CountersConfig::parse("nvml", us(100), None).unwrap().pm, None);
        let l = CountersConfig::parse("a__b.sum, c__d.avg.per_second", us(50), None).unwrap();
        assert_eq!(l.set_arg(), "a__b.sum,c__d.avg.per_second");
        assert_eq!(CountersConfig::parse("default", us(10), None).unwrap().pm.unwrap().interval, us(10));
        assert_eq!(
            CountersConfig::parse("default", us(5), None).unwrap_err(),
            "counter interval 5µs is shorter than 10µs, the fastest PM sampling rate (100 kHz)"
        );
    }
}
