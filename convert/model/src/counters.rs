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

/// What a stream that hands the counter samples over window by window ([`crate::stream::StreamOptions::counter_feed`])
/// knows of each series from its open: enough to place a reading before the series is whole (the span it covers,
/// how large its readings get), and to tell when it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CounterSeriesInfo {
    pub proc: ProcId,
    pub device: u32,
    pub series: NameId,
    /// The first and last sample's time (trace time), and the number of samples: finite readings, in the
    /// `--start/--end` window, as a load keeps them.
    pub first: u64,
    pub last: u64,
    pub samples: u64,
    /// The largest magnitude among the readings.
    pub largest: f64,
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

/// What reading a file's counter chunks left out, counted as they are read ([`ChunkSamples::read`]), said once
/// at the end ([`Leftovers::finish`]).
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    /// Per device the metadata does not list: samples kept.
    unknown: BTreeMap<u32, u64>,
    /// Per series with infinite readings: how many.
    infinite: BTreeMap<NameId, u64>,
}

impl Leftovers {
    /// The warnings, and the counts into `stats`.
    pub(crate) fn finish(self, devices: &[u32], names: &Names, stats: &mut JoinStats) -> Vec<String> {
        let mut warnings = Vec::new();
        for (device, n) in &self.unknown {
            warnings.push(format!(
                "{n} counter samples are on device {device}, which the file's metadata does not list (devices {}): \
                 kept, but no kernel ran there to average them over",
                devices.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
        if !self.infinite.is_empty() {
            let total: u64 = self.infinite.values().sum();
            let series: Vec<&str> = self.infinite.keys().take(3).map(|&id| names.get(id)).collect();
            let n = self.infinite.len();
            let more = if n > 3 { format!(" and {} more", n - 3) } else { String::new() };
            warnings.push(format!(
                "{total} counter readings are infinite ({}{more}): left out, as failed readings are",
                series.join(", ")
            ));
        }
        stats.counter_samples_unknown_device += self.unknown.values().sum::<u64>();
        stats.counter_readings_infinite += self.infinite.values().sum::<u64>();
        warnings
    }
}

/// How one file's counter chunks are read into samples: its process, time base, window and devices.
pub(crate) struct ChunkSamples<'a> {
    pub proc: ProcId,
    pub time: &'a TimeBase,
    pub filter: &'a Filter,
    /// The devices the file's metadata lists (empty when it is unknown).
    pub devices: &'a [u32],
}

impl ChunkSamples<'_> {
    /// Chunk `c`'s samples into `out` (in the chunk's order: sample by sample, metric by metric), each metric of
    /// its (source, device) its own series, values at each sample's start on the trace's time base; failed
    /// readings (NaN) left out, and infinite ones with them (counted in `left`: an average over one is no number).
    /// Samples on a device the metadata does not list are kept and counted.
    pub(crate) fn read(
        &self,
        c: &cutr_format::CounterSamples,
        names: &mut Names,
        left: &mut Leftovers,
        out: &mut Vec<CounterSample>,
    ) {
        let ids: Vec<NameId> = c.metrics.iter().map(|m| names.intern(&series_name(&c.source, m))).collect();
        let listed = self.devices.is_empty() || self.devices.contains(&c.device);
        for i in 0..c.len() {
            let (start, end) = (self.time.to_trace(c.t_start[i]), self.time.to_trace(c.t_end[i]));
            if !self.filter.keeps(start, end.max(start)) {
                continue;
            }
            for (j, &series) in ids.iter().enumerate() {
                let value = c.value(i, j);
                if value.is_infinite() {
                    *left.infinite.entry(series).or_default() += 1;
                } else if !value.is_nan() {
                    out.push(CounterSample { proc: self.proc, device: c.device, series, ts: start, value });
                    if !listed {
                        *left.unknown.entry(c.device).or_default() += 1;
                    }
                }
            }
        }
    }
}

/// The samples of a file's `counters` chunks ([`ChunkSamples::read`]), each series' samples together in time
/// order. `devices` are the devices the file's metadata lists (empty when it is unknown).
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
    let read = ChunkSamples { proc, time, filter, devices };
    let mut left = Leftovers::default();
    for c in &chunks {
        read.read(c, names, &mut left, &mut out.samples);
    }
    out.warnings = left.finish(devices, names, stats);
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
