//! `cupti-convert stats`: where GPU time went, like `nsys stats`: kernels, API calls, copies and memsets, NVTX
//! ranges with the GPU time of the work launched inside them, per-stream and per-device utilization, and what
//! was lost.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;

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
    durs.sort_unstable();
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

pub fn compute(trace: &mut Trace, top: Option<usize>) -> Stats {
    trace.demangle_names();
    let t: &Trace = trace;
    let mut by_kernel: HashMap<u32, Vec<u64>> = HashMap::new();
    for k in &t.kernels {
        by_kernel.entry(t.display_name_id(k.name)).or_default().push(k.end - k.start);
    }
    let kernels =
        finish(by_kernel.into_iter().map(|(n, mut d)| summarize(t.names.get(n).to_string(), &mut d)).collect(), top);

    let mut by_api: HashMap<(u16, bool, u32), Vec<u64>> = HashMap::new();
    for a in &t.apis {
        by_api.entry((a.proc, a.driver, a.cbid)).or_default().push(a.end - a.start);
    }
    let mut api_named: HashMap<String, Vec<u64>> = HashMap::new();
    for ((p, d, c), v) in by_api {
        api_named.entry(t.api_name_of(p, d, c)).or_default().extend(v);
    }
    let api = finish(api_named.into_iter().map(|(n, mut d)| summarize(n, &mut d)).collect(), top);

    let mut mem: HashMap<String, (Vec<u64>, u64)> = HashMap::new();
    for m in &t.memcpys {
        let e = mem.entry(names::memcpy_name(m.copy_kind, m.src_kind, m.dst_kind)).or_default();
        e.0.push(m.end - m.start);
        e.1 += m.bytes;
    }
    for m in &t.memsets {
        let e = mem.entry(names::memset_name(m.memory_kind)).or_default();
        e.0.push(m.end - m.start);
        e.1 += m.bytes;
    }
    let mut memory_ops: Vec<MemoryOps> = mem
        .into_iter()
        .map(|(n, (mut d, bytes))| {
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

    let gpu_in_range = t.gpu_work_by_range();
    let mut by_range: HashMap<u32, (Vec<u64>, u64, u64)> = HashMap::new();
    for (i, r) in t.ranges.iter().enumerate() {
        if r.end == u64::MAX {
            continue;
        }
        let e = by_range.entry(r.name).or_default();
        e.0.push(r.end - r.start);
        e.1 += gpu_in_range[i].0;
        e.2 += gpu_in_range[i].1;
    }
    let mut nvtx: Vec<RangeStats> = by_range
        .into_iter()
        .map(|(n, (mut d, g, ops))| RangeStats {
            time: summarize(t.names.get(n).to_string(), &mut d),
            gpu_ns: g,
            gpu_ops: ops,
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

    // Utilization per (device, stream) and per device.
    let mut per_stream: HashMap<(u32, u32), Vec<(u64, u64)>> = HashMap::new();
    let gpu_ops = t
        .kernels
        .iter()
        .map(|k| (k.device, k.stream, k.start, k.end))
        .chain(t.memcpys.iter().map(|k| (k.device, k.stream, k.start, k.end)))
        .chain(t.memsets.iter().map(|k| (k.device, k.stream, k.start, k.end)));
    let mut gpu_time = 0u64;
    for (d, s, a, b) in gpu_ops {
        per_stream.entry((d, s)).or_default().push((a, b));
        gpu_time += b - a;
    }
    let mut per_device: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    let mut utilization = Vec::new();
    for ((d, s), mut iv) in per_stream {
        per_device.entry(d).or_default().extend_from_slice(&iv);
        let span = iv.iter().map(|x| x.1).max().unwrap_or(0) - iv.iter().map(|x| x.0).min().unwrap_or(0);
        let b = busy(&mut iv);
        utilization.push(Utilization {
            device: d,
            stream: Some(s),
            busy_ns: b,
            span_ns: span,
            percent: if span > 0 { 100.0 * b as f64 / span as f64 } else { 0.0 },
            ops: iv.len() as u64,
        });
    }
    for (d, mut iv) in per_device {
        let span = iv.iter().map(|x| x.1).max().unwrap_or(0) - iv.iter().map(|x| x.0).min().unwrap_or(0);
        let b = busy(&mut iv);
        utilization.push(Utilization {
            device: d,
            stream: None,
            busy_ns: b,
            span_ns: span,
            percent: if span > 0 { 100.0 * b as f64 / span as f64 } else { 0.0 },
            ops: iv.len() as u64,
        });
    }
    utilization.sort_by_key(|u| (u.device, u.stream.map_or(0, |s| s as u64 + 1)));
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
