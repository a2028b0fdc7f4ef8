//! `cupti-convert stats`: where GPU time went, like `nsys stats`: kernels, API calls, copies and memsets, NVTX
//! ranges with the GPU time of the work launched inside them, per-stream and per-device utilization, and what
//! was lost.

use std::fmt::Write as _;

use serde::Serialize;

use rayon::prelude::*;

use crate::group::{Source, group_by_key, push_blocks};
use crate::model::{JoinStats, Trace};
use crate::{fmt, names};

/// Summary statistics of a set of durations (ns).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub name: String,
    pub count: u64,
    pub total_ns: u64,
    /// Share of the section's total time.
    pub percent: f64,
    pub avg_ns: f64,
    pub median_ns: f64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub stddev_ns: f64,
}

/// Builds a summary from durations (sorted in place).
pub fn summarize(name: String, durs: &mut [u64]) -> Summary {
    durs.par_sort_unstable();
    let n = durs.len() as u64;
    let total: u64 = durs.iter().sum();
    let avg = if n > 0 { total as f64 / n as f64 } else { 0.0 };
    let median = match durs.len() {
        0 => 0.0,
        l if l % 2 == 1 => durs[l / 2] as f64,
        l => (durs[l / 2 - 1] + durs[l / 2]) as f64 / 2.0,
    };
    // Sample standard deviation, as nsys reports it.
    let var = if n > 1 { durs.iter().map(|&d| (d as f64 - avg).powi(2)).sum::<f64>() / (n - 1) as f64 } else { 0.0 };
    Summary {
        name,
        count: n,
        total_ns: total,
        percent: 0.0,
        avg_ns: avg,
        median_ns: median,
        min_ns: durs.first().copied().unwrap_or(0),
        max_ns: durs.last().copied().unwrap_or(0),
        stddev_ns: var.sqrt(),
    }
}

fn finish(mut rows: Vec<Summary>, top: Option<usize>) -> Vec<Summary> {
    let total: u64 = rows.iter().map(|r| r.total_ns).sum();
    for r in &mut rows {
        r.percent = if total > 0 { 100.0 * r.total_ns as f64 / total as f64 } else { 0.0 };
    }
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
    if let Some(t) = top {
        rows.truncate(t);
    }
    rows
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MemoryOps {
    #[serde(flatten)]
    pub time: Summary,
    pub bytes: u64,
    /// bytes / total time, in GB/s (1e9 bytes).
    pub bandwidth_gbps: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RangeStats {
    #[serde(flatten)]
    pub time: Summary,
    /// GPU time (kernels, copies, memsets) of the work launched by API calls inside these ranges (nested
    /// ranges included).
    pub gpu_ns: u64,
    pub gpu_ops: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Utilization {
    pub device: u32,
    /// `None` for the device as a whole.
    pub stream: Option<u32>,
    /// Time with at least one kernel, copy or memset running (union of intervals).
    pub busy_ns: u64,
    /// First start to last end of GPU work on the device.
    pub span_ns: u64,
    pub percent: f64,
    pub ops: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stats {
    pub files: Vec<String>,
    pub kernels: Vec<Summary>,
    pub api: Vec<Summary>,
    pub memory_ops: Vec<MemoryOps>,
    pub nvtx: Vec<RangeStats>,
    pub utilization: Vec<Utilization>,
    pub gpu_time_ns: u64,
    pub span_ns: u64,
    pub loss: std::collections::BTreeMap<String, u64>,
    pub joins: JoinStats,
}

/// Union length of intervals (sorted by start).
fn busy(intervals: &mut [(u64, u64)]) -> u64 {
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

/// Rows per block of the parallel grouping (large enough that counting per block stays cheap).
const GROUP_BLOCK: usize = 1 << 16;

/// Dense bucket numbers for `keys`, in order of first appearance, and each key's bucket. Keys are
/// found per block in parallel, so the first appearances are in row order too.
fn buckets<K: std::hash::Hash + Eq + Clone + Send + Sync>(keys: &[K]) -> (Vec<K>, Vec<u32>) {
    let firsts: Vec<Vec<K>> = keys
        .par_chunks(GROUP_BLOCK)
        .map(|block| {
            let mut seen = rustc_hash::FxHashSet::default();
            block.iter().filter(|k| seen.insert(*k)).cloned().collect()
        })
        .collect();
    let mut index: rustc_hash::FxHashMap<K, u32> = rustc_hash::FxHashMap::default();
    let mut distinct = Vec::new();
    for k in firsts.into_iter().flatten() {
        index.entry(k.clone()).or_insert_with(|| {
            distinct.push(k);
            distinct.len() as u32 - 1
        });
    }
    let bucket = keys.par_iter().map(|k| index[k]).collect();
    (distinct, bucket)
}

/// The values of `sources` grouped by bucket (a parallel stable counting sort): bucket `b` is
/// `out[bounds[b]..bounds[b + 1]]`, rows in source order and row order.
fn group<T: Send>(buckets: usize, sources: &[Source<'_, T>]) -> (Vec<T>, Vec<usize>) {
    let mut blocks = Vec::new();
    for (i, src) in sources.iter().enumerate() {
        push_blocks(&mut blocks, i, 0..src.keys.len(), 0, GROUP_BLOCK);
    }
    group_by_key(buckets, sources, &blocks, 1)
}

/// `v` cut at `bounds` into one mutable slice per bucket.
fn split_at_bounds<'a, T>(mut v: &'a mut [T], bounds: &[usize]) -> Vec<&'a mut [T]> {
    let mut out = Vec::with_capacity(bounds.len().saturating_sub(1));
    for w in bounds.windows(2) {
        let (head, tail) = std::mem::take(&mut v).split_at_mut(w[1] - w[0]);
        out.push(head);
        v = tail;
    }
    out
}

/// Everything is grouped and summarized in parallel: a 10M-record trace's sections took ~0.45 s on one worker,
/// which made `stats` slower on a 16-core host (slower per core) than on a 2-core laptop.
pub fn compute(trace: &mut Trace, top: Option<usize>) -> Stats {
    trace.demangle_names();
    let t: &Trace = trace;

    let kernels = {
        let _s = crate::phase::span(|| "stats kernels".into());
        let names: Vec<u32> = t.kernels.par_iter().map(|k| t.display_name_id(k.name)).collect();
        let (distinct, keys) = buckets(&names);
        let dur = |i: usize, _| t.kernels[i].end - t.kernels[i].start;
        let (mut durs, bounds) = group(distinct.len(), &[Source { keys, make: &dur }]);
        let rows = split_at_bounds(&mut durs, &bounds)
            .into_par_iter()
            .zip(&distinct)
            .map(|(d, &n)| summarize(t.names.get(n).to_string(), d))
            .collect();
        finish(rows, top)
    };

    let api = {
        let _s = crate::phase::span(|| "stats api".into());
        let calls: Vec<(u16, bool, u32)> = t.apis.par_iter().map(|a| (a.proc, a.driver, a.cbid)).collect();
        let (distinct, keys) = buckets(&calls);
        // Calls of different files (or ids) with one name are one row.
        let names: Vec<String> = distinct.iter().map(|&(p, d, c)| t.api_name_of(p, d, c)).collect();
        let (named, by_name) = buckets(&names);
        let keys: Vec<u32> = keys.par_iter().map(|&b| by_name[b as usize]).collect();
        let dur = |i: usize, _| t.apis[i].end - t.apis[i].start;
        let (mut durs, bounds) = group(named.len(), &[Source { keys, make: &dur }]);
        let rows =
            split_at_bounds(&mut durs, &bounds).into_par_iter().zip(named).map(|(d, n)| summarize(n, d)).collect();
        finish(rows, top)
    };

    let memory_ops = {
        let _s = crate::phase::span(|| "stats memory".into());
        // Names of copies and memsets, one bucket per distinct name.
        let copy_kinds: Vec<(u8, u8, u8)> =
            t.memcpys.par_iter().map(|m| (m.copy_kind, m.src_kind, m.dst_kind)).collect();
        let (copy_distinct, copy_keys) = buckets(&copy_kinds);
        let set_kinds: Vec<u16> = t.memsets.par_iter().map(|m| m.memory_kind).collect();
        let (set_distinct, set_keys) = buckets(&set_kinds);
        let names: Vec<String> = copy_distinct
            .iter()
            .map(|&(c, s, d)| names::memcpy_name(c, s, d))
            .chain(set_distinct.iter().map(|&m| names::memset_name(m)))
            .collect();
        let (named, by_name) = buckets(&names);
        let copy_keys: Vec<u32> = copy_keys.par_iter().map(|&b| by_name[b as usize]).collect();
        let set_keys: Vec<u32> = set_keys.par_iter().map(|&b| by_name[copy_distinct.len() + b as usize]).collect();
        let copy = |i: usize, _| (t.memcpys[i].end - t.memcpys[i].start, t.memcpys[i].bytes);
        let set = |i: usize, _| (t.memsets[i].end - t.memsets[i].start, t.memsets[i].bytes);
        let (ops, bounds) =
            group(named.len(), &[Source { keys: copy_keys, make: &copy }, Source { keys: set_keys, make: &set }]);
        let mut memory_ops: Vec<MemoryOps> = bounds
            .windows(2)
            .zip(named)
            .map(|(w, n)| {
                let ops = &ops[w[0]..w[1]];
                let mut d: Vec<u64> = ops.iter().map(|o| o.0).collect();
                let bytes = ops.iter().map(|o| o.1).sum();
                let time = summarize(n, &mut d);
                let bw = if time.total_ns > 0 { bytes as f64 / time.total_ns as f64 } else { 0.0 };
                MemoryOps { time, bytes, bandwidth_gbps: bw }
            })
            .collect();
        let mt: u64 = memory_ops.iter().map(|m| m.time.total_ns).sum();
        for m in &mut memory_ops {
            m.time.percent = if mt > 0 { 100.0 * m.time.total_ns as f64 / mt as f64 } else { 0.0 };
        }
        memory_ops.sort_by(|a, b| b.time.total_ns.cmp(&a.time.total_ns).then_with(|| a.time.name.cmp(&b.time.name)));
        memory_ops
    };

    let nvtx = {
        let _s = crate::phase::span(|| "stats nvtx".into());
        let gpu_in_range = t.gpu_work_by_range();
        // Closed ranges only (an unclosed one has no duration), grouped by name.
        let closed: Vec<u32> =
            (0..t.ranges.len() as u32).into_par_iter().filter(|&i| t.ranges[i as usize].end != u64::MAX).collect();
        let names: Vec<u32> = closed.par_iter().map(|&i| t.ranges[i as usize].name).collect();
        let (distinct, keys) = buckets(&names);
        let range = |i: usize, _| {
            let (r, g) = (&t.ranges[closed[i] as usize], gpu_in_range[closed[i] as usize]);
            (r.end - r.start, g.0, g.1)
        };
        let (rows, bounds) = group(distinct.len(), &[Source { keys, make: &range }]);
        let mut nvtx: Vec<RangeStats> = bounds
            .par_windows(2)
            .zip(&distinct)
            .map(|(w, &n)| {
                let rows = &rows[w[0]..w[1]];
                let mut d: Vec<u64> = rows.iter().map(|r| r.0).collect();
                RangeStats {
                    time: summarize(t.names.get(n).to_string(), &mut d),
                    gpu_ns: rows.iter().map(|r| r.1).sum(),
                    gpu_ops: rows.iter().map(|r| r.2).sum(),
                }
            })
            .collect();
        let rt: u64 = nvtx.iter().map(|r| r.time.total_ns).sum();
        for r in &mut nvtx {
            r.time.percent = if rt > 0 { 100.0 * r.time.total_ns as f64 / rt as f64 } else { 0.0 };
        }
        nvtx.sort_by(|a, b| b.time.total_ns.cmp(&a.time.total_ns).then_with(|| a.time.name.cmp(&b.time.name)));
        if let Some(n) = top {
            nvtx.truncate(n);
        }
        nvtx
    };

    let (utilization, gpu_time) = {
        let _s = crate::phase::span(|| "stats utilization".into());
        utilization(t)
    };
    let (a, b) = t.span();
    Stats {
        files: t.processes.iter().map(|p| p.path.display().to_string()).collect(),
        kernels,
        api,
        memory_ops,
        nvtx,
        utilization,
        gpu_time_ns: gpu_time,
        span_ns: b - a,
        loss: t.loss().entries().iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        joins: t.stats.clone(),
    }
}

/// Busy time per (device, stream) and per device, and the GPU time of all kernels, copies and memsets.
fn utilization(t: &Trace) -> (Vec<Utilization>, u64) {
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
    let gpu_time: u64 = iv.par_iter().map(|&(a, b)| b - a).sum();
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

fn table(out: &mut String, title: &str, headers: &[&str], rows: Vec<Vec<String>>) {
    let _ = writeln!(out, "\n{title}");
    if rows.is_empty() {
        let _ = writeln!(out, "  (none)");
        return;
    }
    let mut w: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count().min(if i == headers.len() - 1 { 100 } else { 40 }));
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            let last = i == cells.len() - 1;
            if last {
                s.push_str(&format!(" {c}"));
            } else {
                s.push_str(&format!(" {c:>width$}", width = w[i]));
            }
        }
        s
    };
    let _ = writeln!(out, "{}", line(headers.iter().map(|h| h.to_string()).collect()));
    for r in rows {
        let _ = writeln!(out, "{}", line(r));
    }
}

fn time_row(s: &Summary) -> Vec<String> {
    vec![
        format!("{:.1}", s.percent),
        fmt::thousands(s.total_ns),
        fmt::thousands(s.count),
        format!("{:.1}", s.avg_ns),
        format!("{:.1}", s.median_ns),
        fmt::thousands(s.min_ns),
        fmt::thousands(s.max_ns),
        format!("{:.1}", s.stddev_ns),
    ]
}

const TIME_HEADERS: [&str; 8] =
    ["Time (%)", "Total (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"];

/// Aligned text tables for people.
pub fn render_text(s: &Stats) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{}: GPU time {} over a span of {}",
        s.files.join(", "),
        fmt::duration_ns(s.gpu_time_ns),
        fmt::duration_ns(s.span_ns)
    );
    let with_name = |mut r: Vec<String>, n: &str| {
        r.push(n.to_string());
        r
    };
    let mut h: Vec<&str> = TIME_HEADERS.to_vec();
    h.push("Name");
    table(&mut o, "GPU kernels", &h, s.kernels.iter().map(|k| with_name(time_row(k), &k.name)).collect());
    table(&mut o, "CUDA API calls", &h, s.api.iter().map(|k| with_name(time_row(k), &k.name)).collect());
    let mut hm: Vec<&str> = TIME_HEADERS.to_vec();
    hm.extend(["Bytes", "GB/s", "Operation"]);
    table(
        &mut o,
        "GPU memory operations",
        &hm,
        s.memory_ops
            .iter()
            .map(|m| {
                let mut r = time_row(&m.time);
                r.push(fmt::thousands(m.bytes));
                r.push(format!("{:.2}", m.bandwidth_gbps));
                r.push(m.time.name.clone());
                r
            })
            .collect(),
    );
    let mut hr: Vec<&str> = TIME_HEADERS.to_vec();
    hr.extend(["GPU work (ns)", "GPU ops", "Range"]);
    table(
        &mut o,
        "NVTX ranges (GPU work launched inside each, nested ranges included)",
        &hr,
        s.nvtx
            .iter()
            .map(|r| {
                let mut row = time_row(&r.time);
                row.push(fmt::thousands(r.gpu_ns));
                row.push(fmt::thousands(r.gpu_ops));
                row.push(r.time.name.clone());
                row
            })
            .collect(),
    );
    table(
        &mut o,
        "GPU utilization",
        &["Busy (ns)", "Span (ns)", "Busy (%)", "Ops", "Where"],
        s.utilization
            .iter()
            .map(|u| {
                vec![
                    fmt::thousands(u.busy_ns),
                    fmt::thousands(u.span_ns),
                    format!("{:.1}", u.percent),
                    fmt::thousands(u.ops),
                    match u.stream {
                        Some(st) => format!("GPU {} stream {st}", u.device),
                        None => format!("GPU {} (all streams)", u.device),
                    },
                ]
            })
            .collect(),
    );
    let mut lost: Vec<String> = s.loss.iter().filter(|(_, v)| **v > 0).map(|(k, v)| format!("{k} {v}")).collect();
    lost.sort();
    let j = &s.joins;
    for (n, what) in [
        (j.gpu_without_api, "GPU records without a launching API record"),
        (j.records_in_damaged_chunks, "records in damaged chunks"),
        (j.zero_timestamp_records, "records without timestamps"),
        (j.nvtx_unclosed_ranges, "NVTX ranges never closed"),
    ] {
        if n > 0 {
            lost.push(format!("{what} {n}"));
        }
    }
    let _ = writeln!(o, "\nLoss: {}", if lost.is_empty() { "none".to_string() } else { lost.join(", ") });
    o
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

/// One CSV table: `section` tells the summaries apart.
pub fn render_csv(s: &Stats) -> String {
    let mut o = String::from(
        "section,name,count,total_ns,percent,avg_ns,median_ns,min_ns,max_ns,stddev_ns,bytes,bandwidth_gbps,gpu_ns,gpu_ops\n",
    );
    let row = |o: &mut String, sec: &str, x: &Summary, extra: [String; 4]| {
        let _ = writeln!(
            o,
            "{sec},{},{},{},{:.3},{:.1},{:.1},{},{},{:.1},{}",
            csv_field(&x.name),
            x.count,
            x.total_ns,
            x.percent,
            x.avg_ns,
            x.median_ns,
            x.min_ns,
            x.max_ns,
            x.stddev_ns,
            extra.join(",")
        );
    };
    let none = || [String::new(), String::new(), String::new(), String::new()];
    for k in &s.kernels {
        row(&mut o, "kernel", k, none());
    }
    for k in &s.api {
        row(&mut o, "api", k, none());
    }
    for m in &s.memory_ops {
        row(
            &mut o,
            "memory",
            &m.time,
            [m.bytes.to_string(), format!("{:.3}", m.bandwidth_gbps), String::new(), String::new()],
        );
    }
    for r in &s.nvtx {
        row(&mut o, "nvtx", &r.time, [String::new(), String::new(), r.gpu_ns.to_string(), r.gpu_ops.to_string()]);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_and_busy_time() {
        let s = summarize("k".into(), &mut [30, 10, 20, 40]);
        assert_eq!((s.count, s.total_ns, s.min_ns, s.max_ns, s.median_ns, s.avg_ns), (4, 100, 10, 40, 25.0, 25.0));
        assert!((s.stddev_ns - 12.909944487358056).abs() < 1e-9);
        assert_eq!(busy(&mut [(0, 10), (5, 15), (20, 30), (30, 31)]), 26);
        assert_eq!(busy(&mut []), 0);
    }
}
