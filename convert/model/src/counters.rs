//! Counter samples over time, one table for every source: the metrics of `counters` chunks (`--counters`: PM
//! sampling's hardware counters, NVML's power, clocks and utilization) and the stall reasons of PC samples per
//! device (`--pc-sampling`), each collection's samples per reason as a rate. Each (file, device, series) becomes
//! one counter track in the viewers.

use cutr_format::source::PcSamples;
use cutr_format::{Problem, Reader};

use crate::{Filter, NameId, Names, ProcId, timebase::TimeBase};

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

/// The samples of a file's `counters` chunks, each metric of each (source, device) its own series, values at
/// each sample's start on the trace's time base; failed readings (NaN) left out. Returns the samples and the
/// chunks that could not be decoded.
pub(crate) fn metric_samples(
    reader: &Reader,
    proc: ProcId,
    time: &TimeBase,
    filter: &Filter,
    names: &mut Names,
) -> (Vec<CounterSample>, Vec<Problem>) {
    let (chunks, problems) = reader.counter_samples();
    let mut out = Vec::new();
    for c in &chunks {
        let ids: Vec<NameId> = c.metrics.iter().map(|m| names.intern(&series_name(&c.source, m))).collect();
        for i in 0..c.len() {
            let (start, end) = (time.to_trace(c.t_start[i]), time.to_trace(c.t_end[i]));
            if !filter.keeps(start, end.max(start)) {
                continue;
            }
            for (j, &series) in ids.iter().enumerate() {
                let value = c.value(i, j);
                if !value.is_nan() {
                    out.push(CounterSample { proc, device: c.device, series, ts: start, value });
                }
            }
        }
    }
    // Each series' samples together, in time order (chunks of one source interleave with other sources').
    out.sort_by_key(|s| (s.device, s.series, s.ts));
    (out, problems)
}

/// The prefix CUPTI puts on every stall-reason name.
const STALL_REASON_PREFIX: &str = "smsp__pcsamp_warps_issue_stalled_";

/// A stall reason's short name (`long_scoreboard`), `None` for the `*_not_issued` twins (the same stall counted
/// for warps that were not picked, which `--stall-reasons all` adds).
pub fn stall_reason_name(full: &str) -> Option<&str> {
    (!full.ends_with("_not_issued")).then(|| full.strip_prefix(STALL_REASON_PREFIX).unwrap_or(full))
}

/// One collection's device, start, end (trace time) and samples per series.
type Collection = (u32, u64, u64, Vec<(NameId, u64)>);

/// The PC samples of one file as rates per device and stall reason: for each collection (the recorder drains
/// the hardware at every flush), its samples of a reason over its duration, at its start; a series that has
/// samples somewhere gets a 0 in the collections without any, and every series ends at 0 after the last one.
/// Returns the samples and the chunks that could not be decoded.
pub(crate) fn stall_rates(
    reader: &Reader,
    proc: ProcId,
    time: &TimeBase,
    filter: &Filter,
    names: &mut Names,
) -> (Vec<CounterSample>, Vec<Problem>) {
    let (collections, problems) = reader.pc_samples();
    if collections.is_empty() {
        return (Vec::new(), problems);
    }
    // Each context's reason table comes with its first collection.
    let mut tables: std::collections::HashMap<(u32, u32), &PcSamples> = Default::default();
    for c in &collections {
        if !c.stall_reasons.is_empty() {
            tables.entry((c.context, c.device)).or_insert(c);
        }
    }
    // (device, reason) -> series id; per collection: device, start, end, samples per series.
    let mut series: std::collections::BTreeMap<(u32, String), NameId> = Default::default();
    let mut points: Vec<Collection> = Vec::new();
    for c in &collections {
        let table = tables.get(&(c.context, c.device));
        let mut per_reason: std::collections::BTreeMap<NameId, u64> = Default::default();
        for pc in &c.pcs {
            for &(index, n) in &pc.stalls {
                let full = table.and_then(|t| t.stall_reasons.iter().find(|r| r.0 == index)).map(|r| r.1.as_str());
                let name = match full {
                    Some(f) => match stall_reason_name(f) {
                        Some(s) => s.to_string(),
                        None => continue,
                    },
                    None => format!("reason {index}"),
                };
                let id = *series
                    .entry((c.device, name))
                    .or_insert_with_key(|(_, n)| names.intern(&format!("PC samples/ms: {n}")));
                *per_reason.entry(id).or_default() += u64::from(n);
            }
        }
        let (start, end) = (time.to_trace(c.t_start), time.to_trace(c.t_end));
        if end > start && filter.keeps(start, end) {
            points.push((c.device, start, end, per_reason.into_iter().collect()));
        }
    }
    points.sort_by_key(|p| (p.0, p.1));
    let mut out = Vec::new();
    for (&(device, _), &id) in &series {
        let mine = points.iter().filter(|p| p.0 == device);
        let mut last_end = None;
        for (_, start, end, counts) in mine {
            // A gap between collections (none drained, or filtered out) reads as no samples.
            if let Some(e) = last_end
                && e < *start
            {
                out.push(CounterSample { proc, device, series: id, ts: e, value: 0.0 });
            }
            let n = counts.iter().find(|c| c.0 == id).map_or(0, |c| c.1);
            let ms = (end - start) as f64 / 1e6;
            out.push(CounterSample { proc, device, series: id, ts: *start, value: n as f64 / ms });
            last_end = Some(*end);
        }
        if let Some(e) = last_end {
            out.push(CounterSample { proc, device, series: id, ts: e, value: 0.0 });
        }
    }
    (out, problems)
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
