//! Counter samples over time, one table for every source: the metrics of `counters` chunks (`--counters`: PM
//! sampling's hardware counters, NVML's power, clocks and utilization) and the stall reasons of PC samples per
//! device (`--pc-sampling`), as rates drawn over the sampled kernels' executions ([`crate::stall_rates`]). Each
//! (file, device, series) becomes one counter track in the viewers.

use std::collections::BTreeMap;

use cutr_format::{Problem, Reader};

use crate::{Filter, JoinStats, NameId, Names, ProcId, timebase::TimeBase};

/// One value of one series at one time: the value holds until the series' next sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CounterSample {
    pub proc: ProcId,
    pub device: u32,
    /// The series' name, with its unit (`PC samples/ms: long_scoreboard`).
    pub series: NameId,
    pub ts: u64,
    pub value: f64,
}

/// A series' name: the metric and its unit (`power (W)`, `PM: dram__throughput.avg.pct_of_peak_sustained_elapsed
/// (%)`).
pub fn series_name(source: &str, metric: &cutr_format::CounterMetric) -> String {
    let prefix = if source == "pm_sampling" { "PM: " } else { "" };
    if metric.unit.is_empty() {
        format!("{prefix}{}", metric.name)
    } else {
        format!("{prefix}{} ({})", metric.name, metric.unit)
    }
}

/// What a file's `counters` chunks gave: the samples, the chunks that could not be decoded, and what the user
/// should know of the rest.
#[derive(Debug, Default)]
pub(crate) struct FileCounters {
    pub samples: Vec<CounterSample>,
    pub problems: Vec<Problem>,
    pub warnings: Vec<String>,
}

/// The samples of a file's `counters` chunks, each metric of each (source, device) its own series, values at
/// each sample's start on the trace's time base; failed readings (NaN) left out, and infinite ones with them
/// (counted: an average over one is no number). `devices` are the devices the file's metadata lists (empty when
/// it is unknown): samples on another are kept and counted.
pub(crate) fn metric_samples(
    reader: &Reader,
    proc: ProcId,
    time: &TimeBase,
    filter: &Filter,
    names: &mut Names,
    (devices, stats): (&[u32], &mut JoinStats),
) -> FileCounters {
    let (chunks, problems) = reader.counter_samples();
    let mut out = FileCounters { problems, ..Default::default() };
    // Per device the metadata does not list: samples, and per series with infinite readings: how many.
    let mut unknown: BTreeMap<u32, u64> = BTreeMap::new();
    let mut infinite: BTreeMap<NameId, u64> = BTreeMap::new();
    for c in &chunks {
        let ids: Vec<NameId> = c.metrics.iter().map(|m| names.intern(&series_name(&c.source, m))).collect();
        let listed = devices.is_empty() || devices.contains(&c.device);
        for i in 0..c.len() {
            let (start, end) = (time.to_trace(c.t_start[i]), time.to_trace(c.t_end[i]));
            if !filter.keeps(start, end.max(start)) {
                continue;
            }
            for (j, &series) in ids.iter().enumerate() {
                let value = c.value(i, j);
                if value.is_infinite() {
                    *infinite.entry(series).or_default() += 1;
                } else if !value.is_nan() {
                    out.samples.push(CounterSample { proc, device: c.device, series, ts: start, value });
                    if !listed {
                        *unknown.entry(c.device).or_default() += 1;
                    }
                }
            }
        }
    }
    for (device, n) in &unknown {
        out.warnings.push(format!(
            "{n} counter samples are on device {device}, which the file's metadata does not list (devices {}): \
             kept, but no kernel ran there to average them over",
            devices.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    if !infinite.is_empty() {
        let total: u64 = infinite.values().sum();
        let series: Vec<&str> = infinite.keys().take(3).map(|&id| names.get(id)).collect();
        let more = if infinite.len() > 3 { format!(" and {} more", infinite.len() - 3) } else { String::new() };
        out.warnings.push(format!(
            "{total} counter readings are infinite ({}{more}): left out, as failed readings are",
            series.join(", ")
        ));
    }
    stats.counter_samples_unknown_device += unknown.values().sum::<u64>();
    stats.counter_readings_infinite += infinite.values().sum::<u64>();
    // Each series' samples together, in time order (chunks of one source interleave with other sources').
    out.samples.sort_by_key(|s| (s.device, s.series, s.ts));
    out
}

/// The prefix CUPTI puts on every stall-reason name.
const STALL_REASON_PREFIX: &str = "smsp__pcsamp_warps_issue_stalled_";

/// A stall reason's short name (`long_scoreboard`), `None` for the `*_not_issued` twins (the same stall counted
/// for warps that were not picked, which `--stall-reasons all` adds).
pub fn stall_reason_name(full: &str) -> Option<&str> {
    (!full.ends_with("_not_issued")).then(|| full.strip_prefix(STALL_REASON_PREFIX).unwrap_or(full))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_issued_duplicates_are_not_counted_and_prefixes_go() {
        assert_eq!(stall_reason_name("smsp__pcsamp_warps_issue_stalled_long_scoreboard"), Some("long_scoreboard"));
        assert_eq!(stall_reason_name("smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued"), None);
        assert_eq!(stall_reason_name("smsp__pcsamp_warps_issue_stalled_selected"), Some("selected"));
    }
}
