//! The sections of `stats`, each computed from the model's tables: GPU kernels, API calls, memory operations,
//! NVTX ranges and utilization.

use cutr_model::par::Source;
use cutr_model::{NameId, ProcId, Trace, describe, nvtx_spans};
use rayon::prelude::*;

use super::buckets::{buckets, group, split_at_bounds};
use super::families::{self, NvtxNames};
use super::{
    MemoryOps, MemoryPeak, RangeStats, RowsLeftOut, Summary, Utilization, rank_and_cut, saturating_sum, summarize,
};

/// A section's rows, biggest first, and those past `--top` summed.
type Ranked<T> = (Vec<T>, Option<RowsLeftOut>);

/// Kernel durations by demangled name.
pub(super) fn kernels(t: &Trace, top: Option<usize>) -> Ranked<Summary> {
    let names: Vec<NameId> = t.kernels.par_iter().map(|k| t.display_name_id(k.name)).collect();
    let (distinct, keys) = buckets(&names);
    let dur = |i: usize, _| t.kernels[i].duration();
    let (mut durs, bounds) = group(distinct.len(), &[Source { keys, make: &dur }]);
    let mut rows = split_at_bounds(&mut durs, &bounds)
        .into_par_iter()
        .zip(&distinct)
        .map(|(d, &n)| summarize(t.names.get(n).to_string(), d))
        .collect();
    let left_out = rank_and_cut(&mut rows, top);
    (rows, left_out)
}

/// API call durations by function name. Calls of different files (or ids) with one name are one row.
pub(super) fn api(t: &Trace, top: Option<usize>) -> Ranked<Summary> {
    let calls: Vec<(ProcId, bool, u32)> = t.apis.par_iter().map(|a| (a.proc, a.driver, a.cbid)).collect();
    let (distinct, keys) = buckets(&calls);
    let names: Vec<String> = distinct.iter().map(|&(p, d, c)| t.api_name_of(p, d, c)).collect();
    let (named, by_name) = buckets(&names);
    let keys: Vec<u32> = keys.par_iter().map(|&b| by_name[b as usize]).collect();
    let dur = |i: usize, _| t.apis[i].duration();
    let (mut durs, bounds) = group(named.len(), &[Source { keys, make: &dur }]);
    let mut rows =
        split_at_bounds(&mut durs, &bounds).into_par_iter().zip(named).map(|(d, n)| summarize(n, d)).collect();
    let left_out = rank_and_cut(&mut rows, top);
    (rows, left_out)
}

/// Copies and memsets by Kineto's name, with bytes and bandwidth.
pub(super) fn memory_ops(t: &Trace, top: Option<usize>) -> Ranked<MemoryOps> {
    // Names of copies and memsets, one bucket per distinct name.
    let copy_kinds: Vec<(u8, u8, u8)> = t.memcpys.par_iter().map(|m| (m.copy_kind, m.src_kind, m.dst_kind)).collect();
    let (copy_distinct, copy_keys) = buckets(&copy_kinds);
    let set_kinds: Vec<u16> = t.memsets.par_iter().map(|m| m.memory_kind).collect();
    let (set_distinct, set_keys) = buckets(&set_kinds);
    let names: Vec<String> = copy_distinct
        .iter()
        .map(|&(c, s, d)| describe::memcpy_name(c, s, d))
        .chain(set_distinct.iter().map(|&m| describe::memset_name(m)))
        .collect();
    let (named, by_name) = buckets(&names);
    let copy_keys: Vec<u32> = copy_keys.par_iter().map(|&b| by_name[b as usize]).collect();
    let set_keys: Vec<u32> = set_keys.par_iter().map(|&b| by_name[copy_distinct.len() + b as usize]).collect();
    let copy = |i: usize, _| (t.memcpys[i].duration(), t.memcpys[i].bytes);
    let set = |i: usize, _| (t.memsets[i].duration(), t.memsets[i].bytes);
    let (ops, bounds) =
        group(named.len(), &[Source { keys: copy_keys, make: &copy }, Source { keys: set_keys, make: &set }]);
    let mut memory_ops: Vec<MemoryOps> = bounds
        .windows(2)
        .zip(named)
        .map(|(w, n)| {
            let ops = &ops[w[0]..w[1]];
            let mut d: Vec<u64> = ops.iter().map(|o| o.0).collect();
            let bytes = saturating_sum(ops.iter().map(|o| o.1));
            let time = summarize(n, &mut d);
            let bw = if time.total_ns > 0 { bytes as f64 / time.total_ns as f64 } else { 0.0 };
            MemoryOps { time, bytes, bandwidth_gbps: bw }
        })
        .collect();
    let left_out = rank_and_cut(&mut memory_ops, top);
    (memory_ops, left_out)
}

/// Closed NVTX ranges by name (an unclosed one has no duration), with the GPU work launched inside them: by the
/// range's own thread, or with `across_threads` by any thread of its process while it was open; and their GPU
/// spans (by the range's own thread).
/// Numbered names are folded by family per `names` ([`super::families`]).
pub(super) fn nvtx(t: &Trace, top: Option<usize>, across_threads: bool, names: NvtxNames) -> Ranked<RangeStats> {
    let gpu_in_range = if across_threads { t.gpu_work_by_range_across_threads() } else { t.gpu_work_by_range() };
    // Capture-time attribution is by the making thread's ranges whatever `across_threads` is: a node is made by
    // one call on one thread, so its ranges are known, not guessed from overlap.
    let replayed = super::graphs::replays_by_range(t);
    let spans = nvtx_spans::span_totals(t, &nvtx_spans::gpu_spans(t));
    let closed: Vec<u32> =
        (0..t.ranges.len() as u32).into_par_iter().filter(|&i| t.ranges[i as usize].closed()).collect();
    let range_names: Vec<NameId> = closed.par_iter().map(|&i| t.ranges[i as usize].name).collect();
    let (distinct, keys) = buckets(&range_names);
    let texts: Vec<&str> = distinct.iter().map(|&n| t.names.get(n)).collect();
    let folding = families::fold(&texts, names);
    let keys: Vec<u32> = keys.par_iter().map(|&k| folding.row_of[k as usize]).collect();
    let range = |i: usize, _| {
        let c = closed[i] as usize;
        let (r, g, p, s) = (&t.ranges[c], gpu_in_range[c], replayed[c], spans[c]);
        (r.end - r.start, g.0, g.1, p.0, p.1, s.0, s.1)
    };
    let (rows, bounds) = group(folding.rows.len(), &[Source { keys, make: &range }]);
    let mut nvtx: Vec<RangeStats> = bounds
        .par_windows(2)
        .zip(&folding.rows)
        .map(|(w, (name, folded_names))| {
            let rows = &rows[w[0]..w[1]];
            let mut d: Vec<u64> = rows.iter().map(|r| r.0).collect();
            RangeStats {
                time: summarize(name.clone(), &mut d),
                folded_names: *folded_names,
                gpu_ns: saturating_sum(rows.iter().map(|r| r.1)),
                gpu_ops: saturating_sum(rows.iter().map(|r| r.2)),
                replayed_gpu_ns: saturating_sum(rows.iter().map(|r| r.3)),
                replayed_gpu_ops: saturating_sum(rows.iter().map(|r| r.4)),
                gpu_span_ns: saturating_sum(rows.iter().map(|r| r.5)),
                gpu_spans: saturating_sum(rows.iter().map(|r| r.6)),
            }
        })
        .collect();
    let left_out = rank_and_cut(&mut nvtx, top);
    (nvtx, left_out)
}

/// Union length of intervals (sorted by start).
pub(super) fn busy(intervals: &mut [(u64, u64)]) -> u64 {
    intervals.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for &(s, e) in intervals.iter() {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

/// Busy time per (device, stream) and per device, and the GPU time of all kernels, copies and memsets.
pub(super) fn utilization(t: &Trace) -> (Vec<Utilization>, u64) {
    let streams: Vec<(u32, u32)> = t
        .kernels
        .par_iter()
        .map(|k| (k.device, k.stream))
        .chain(t.memcpys.par_iter().map(|k| (k.device, k.stream)))
        .chain(t.memsets.par_iter().map(|k| (k.device, k.stream)))
        .collect();
    let (distinct, mut kernel_keys) = buckets(&streams);
    drop(streams);
    let set_keys = kernel_keys.split_off(t.kernels.len() + t.memcpys.len());
    let copy_keys = kernel_keys.split_off(t.kernels.len());
    let kernel = |i: usize, _| (t.kernels[i].start, t.kernels[i].end);
    let copy = |i: usize, _| (t.memcpys[i].start, t.memcpys[i].end);
    let set = |i: usize, _| (t.memsets[i].start, t.memsets[i].end);
    let (mut iv, bounds) = group(
        distinct.len(),
        &[
            Source { keys: kernel_keys, make: &kernel },
            Source { keys: copy_keys, make: &copy },
            Source { keys: set_keys, make: &set },
        ],
    );
    let gpu_time: u64 = iv.par_iter().map(|&(a, b)| b - a).reduce(|| 0, u64::saturating_add);
    let span =
        |iv: &[(u64, u64)]| iv.iter().map(|x| x.1).max().unwrap_or(0) - iv.iter().map(|x| x.0).min().unwrap_or(0);
    let row = |device: u32, stream: Option<u32>, iv: &mut [(u64, u64)]| {
        let span = span(iv);
        let b = busy(iv);
        Utilization {
            device,
            stream,
            busy_ns: b,
            span_ns: span,
            percent: if span > 0 { 100.0 * b as f64 / span as f64 } else { 0.0 },
            ops: iv.len() as u64,
        }
    };
    // Each stream's rows are a few runs already in time order (one per kind): a stable sort merges them.
    let mut utilization: Vec<Utilization> = split_at_bounds(&mut iv, &bounds)
        .into_par_iter()
        .zip(&distinct)
        .map(|(iv, &(d, s))| {
            iv.sort();
            row(d, Some(s), iv)
        })
        .collect();
    let mut devices: Vec<u32> = distinct.iter().map(|k| k.0).collect();
    devices.sort_unstable();
    devices.dedup();
    for d in devices {
        let mut all: Vec<(u64, u64)> = distinct
            .iter()
            .zip(bounds.windows(2))
            .filter(|(k, _)| k.0 == d)
            .flat_map(|(_, w)| iv[w[0]..w[1]].iter().copied())
            .collect();
        all.par_sort_unstable();
        utilization.push(row(d, None, &mut all));
    }
    utilization.sort_by_key(|u| (u.device, u.stream.map_or(0, |s| s as u64 + 1)));
    (utilization, gpu_time)
}

/// Peak memory in use per (file, device) and class (device, managed, pinned host), from the model's step series.
pub(super) fn memory_peaks(t: &Trace) -> Vec<MemoryPeak> {
    use cutr_model::memory::{MemoryClass, memory_in_use_of};
    let origin = t.span().0;
    let classes =
        [(MemoryClass::Device, "device"), (MemoryClass::Managed, "managed"), (MemoryClass::PinnedHost, "pinned host")];
    let mut peaks: Vec<MemoryPeak> = classes
        .into_iter()
        .flat_map(|(class, memory)| memory_in_use_of(t, class).into_iter().map(move |m| (memory, m)))
        .map(|(memory, m)| {
            let allocation = m.peak_allocation.and_then(|i| t.memory.get(i));
            MemoryPeak {
                file: t.processes.get(m.proc.index()).map(|p| p.path.display().to_string()).unwrap_or_default(),
                device: m.device,
                memory,
                peak_bytes: m.peak_bytes,
                peak_at_ns: m.peak_ts.saturating_sub(origin),
                allocation_address: allocation.map_or(0, |a| a.address),
                allocation_bytes: allocation.map_or(0, |a| a.bytes),
                allocation_kind: allocation.map_or("", |a| describe::memory_kind(a.memory_kind)),
                allocations: m.allocations,
                frees: m.frees,
                frees_without_allocation: m.frees_without_allocation,
                bytes_at_end: m.bytes_at_end,
            }
        })
        .collect();
    // By file and device, device memory first.
    peaks.sort_by(|a, b| (&a.file, a.device).cmp(&(&b.file, b.device)));
    peaks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_is_the_union_of_intervals() {
        assert_eq!(busy(&mut [(0, 10), (5, 15), (20, 30), (30, 31)]), 26);
        assert_eq!(busy(&mut []), 0);
    }
}
