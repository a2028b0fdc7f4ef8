//! `stats` output: aligned text tables for people, CSV for spreadsheets (JSON is the [`super::Stats`] itself).

use std::fmt::Write as _;

use super::{RowsLeftOut, Section, Stats, Summary};
use crate::fmt;

/// How text output looks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TextOptions {
    /// Full names, however long (C++ kernel names run to hundreds of characters), and no width limit.
    pub wide: bool,
    /// The longest line, in characters (a terminal's width): tables drop their least important columns and
    /// shorten names in the middle to fit, and longer prose lines are wrapped. `None`: names cut at 100
    /// characters, lines as long as they come (scripts rely on it).
    pub width: Option<usize>,
}

impl TextOptions {
    /// The width lines must fit, unless `wide`.
    fn limit(self) -> Option<usize> {
        if self.wide { None } else { self.width }
    }
}

/// Longest name shown in text output without `wide` or a width.
const NAME_CHARS: usize = 100;

/// Room for names that a table fitting a width makes by leaving out columns.
const NAME_WANTED_CHARS: usize = 56;

/// The fewest characters a name is shortened to when fitting a width (less says nothing; the line is wrapped).
const NAME_MIN_CHARS: usize = 16;

/// Columns a table leaves out to fit a width, least important first; the others always stay.
const DROPPED_FIRST: [&str; 15] = [
    "StdDev (ns)",
    "Min (ns)",
    "Max (ns)",
    "Med (ns)",
    "GPU span (ns)",
    "Replayed ops",
    "Graph replays (ns)",
    "Avg (ns)",
    "GB/s",
    "Bytes",
    "Covered (%)",
    "Frees w/o alloc",
    "Reached by",
    "Frees",
    "Allocs",
];

pub(super) fn name(n: &str, o: TextOptions) -> String {
    if o.wide || n.chars().count() <= NAME_CHARS {
        n.to_string()
    } else {
        format!("{}...", n.chars().take(NAME_CHARS - 3).collect::<String>())
    }
}

/// `n` cut to `max` characters after two thirds of them, where C++ names keep their least telling part
/// (template arguments), so that the kernel's own name and the end of its parameters stay:
/// `void at::native::vectorized_elementwise_k...Array<char*, 1>)`.
fn shorten_middle(n: &str, max: usize) -> String {
    let chars: Vec<char> = n.chars().collect();
    if chars.len() <= max {
        return n.to_string();
    }
    let keep = max.saturating_sub(3);
    let head = (2 * keep).div_ceil(3);
    let tail = keep - head;
    let mut out: String = chars[..head].iter().collect();
    out.push_str("...");
    out.extend(&chars[chars.len() - tail..]);
    out
}

/// An aligned table as wide as it comes (the sections whose lines [`wrap_lines`] fits to a width).
pub(super) fn table(out: &mut String, title: &str, headers: &[&str], rows: Vec<Vec<String>>) {
    fitted_table(out, title, headers, rows, TextOptions::default());
}

/// An aligned table, numbers right-aligned, the last column (a name) left-aligned. With a width, the least
/// important columns ([`DROPPED_FIRST`]) are left out until the name has room, and names are shortened in the
/// middle to what is left.
pub(super) fn fitted_table(out: &mut String, title: &str, headers: &[&str], rows: Vec<Vec<String>>, o: TextOptions) {
    let _ = writeln!(out, "\n{title}");
    if rows.is_empty() {
        let _ = writeln!(out, "  (none)");
        return;
    }
    let mut w: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut kept: Vec<usize> = (0..headers.len()).collect();
    let mut name_room = None;
    if let Some(limit) = o.limit() {
        let last = headers.len() - 1;
        // One space before the table, one before each column.
        let fixed = |kept: &[usize]| 1 + kept.iter().filter(|&&i| i != last).map(|&i| 1 + w[i]).sum::<usize>() + 1;
        for drop in DROPPED_FIRST {
            if fixed(&kept) + w[last].min(NAME_WANTED_CHARS) <= limit {
                break;
            }
            kept.retain(|&i| i == last || headers[i] != drop);
        }
        name_room = Some(limit.saturating_sub(fixed(&kept)).max(NAME_MIN_CHARS));
    }
    let line = |cells: Vec<String>| {
        let mut s = String::from(" ");
        for &i in &kept {
            if i == cells.len() - 1 {
                let c = name_room.map_or_else(|| cells[i].clone(), |room| shorten_middle(&cells[i], room));
                s.push_str(&format!(" {c}"));
            } else {
                s.push_str(&format!(" {:>width$}", cells[i], width = w[i]));
            }
        }
        s
    };
    let _ = writeln!(out, "{}", line(headers.iter().map(|h| h.to_string()).collect()));
    for r in rows {
        let _ = writeln!(out, "{}", line(r));
    }
}

/// Every line of `text` longer than `width` wrapped at spaces (a word longer than the line is cut), its
/// continuation indented: titles and prose lines of any section.
fn wrap_lines(text: &str, width: usize) -> String {
    const INDENT: &str = "    ";
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut rest: Vec<char> = line.chars().collect();
        let mut first = true;
        loop {
            let room = if first { width } else { width.saturating_sub(INDENT.len()).max(1) };
            if !first {
                out.push_str(INDENT);
            }
            if rest.len() <= room {
                out.extend(&rest);
                out.push('\n');
                break;
            }
            let cut = rest[..=room].iter().rposition(|&c| c == ' ').filter(|&i| i > 0).unwrap_or(room);
            out.extend(&rest[..cut]);
            out.push('\n');
            let skip = usize::from(rest.get(cut) == Some(&' '));
            rest.drain(..cut + skip);
            first = false;
        }
    }
    out
}

/// The line under a table cut at `--top`: how many rows were left out and their share of the section's time.
fn left_out_line(out: &mut String, left_out: Option<&RowsLeftOut>, rows: &str, time: &str) {
    if let Some(l) = left_out {
        let _ = writeln!(
            out,
            "  ... {} more {rows}, {:.1}% of {time} ({} ns; --top 0 shows every row)",
            fmt::thousands(l.rows),
            l.percent,
            fmt::thousands(l.total_ns)
        );
    }
}

fn time_row(s: &Summary) -> Vec<String> {
    vec![
        format!("{:.1}", s.percent),
        fmt::thousands(s.total_ns),
        fmt::thousands(s.count),
        fmt::thousands_1(s.avg_ns),
        if s.median_estimated { format!("~{}", fmt::thousands_1(s.median_ns)) } else { fmt::thousands_1(s.median_ns) },
        fmt::thousands(s.min_ns),
        fmt::thousands(s.max_ns),
        fmt::thousands_1(s.stddev_ns),
    ]
}

const TIME_HEADERS: [&str; 8] =
    ["Time (%)", "Total (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"];

/// Aligned text tables for people: the sections computed, in order, then what was lost.
pub fn render_text(s: &Stats, opts: TextOptions) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{}: GPU time {} over a span of {} (first to last record)",
        s.files.join(", "),
        fmt::duration_ns(s.gpu_time_ns),
        fmt::duration_ns(s.span_ns)
    );
    if let Some(w) = &s.window {
        let _ = writeln!(o, "Window: {w}");
    }
    if let Some(st) = &s.stream {
        let _ = writeln!(o, "{}", super::stream::describe(st));
    }
    let on = |x: Section| s.sections.contains(&x);
    // Tables fitting a width shorten names themselves, from the whole name.
    let with_name = |mut r: Vec<String>, n: &str| {
        r.push(if opts.limit().is_some() { n.to_string() } else { name(n, opts) });
        r
    };
    let mut h: Vec<&str> = TIME_HEADERS.to_vec();
    h.push("Name");
    if on(Section::Kernels) {
        let rows = s.kernels.iter().map(|k| with_name(time_row(k), &k.name)).collect();
        fitted_table(&mut o, "GPU kernels", &h, rows, opts);
        left_out_line(&mut o, s.kernels_left_out.as_ref(), "kernels", "kernel time");
    }
    if on(Section::Api) {
        let rows = s.api.iter().map(|k| with_name(time_row(k), &k.name)).collect();
        fitted_table(&mut o, "CUDA API calls", &h, rows, opts);
        left_out_line(&mut o, s.api_left_out.as_ref(), "API functions", "API time");
    }
    if on(Section::Memory) {
        let mut hm: Vec<&str> = TIME_HEADERS.to_vec();
        hm.extend(["Bytes", "GB/s", "Operation"]);
        let rows = s
            .memory_ops
            .iter()
            .map(|m| {
                let mut r = time_row(&m.time);
                r.push(fmt::thousands(m.bytes));
                r.push(format!("{:.2}", m.bandwidth_gbps));
                r.push(m.time.name.clone());
                r
            })
            .collect();
        fitted_table(&mut o, "GPU memory operations", &hm, rows, opts);
        left_out_line(&mut o, s.memory_ops_left_out.as_ref(), "kinds of operation", "memory operation time");
        super::um_render::memory_peaks_text(&mut o, s, opts);
    }
    if on(Section::Nvtx) {
        nvtx_text(&mut o, s, opts);
    }
    super::graphs_render::text(&mut o, s, opts);
    if on(Section::Utilization) {
        utilization_text(&mut o, s, opts);
    }
    if on(Section::Counters) && !s.counters.is_empty() {
        super::counter_render::text(&mut o, &s.counters, opts);
        if s.counter_groups_not_shown > 0 {
            let _ = writeln!(
                o,
                "  ... and the counters of {} more (kernel, copy or NVTX range, GPU) pairs: a report holds at most {} \
                 counter rows (--top N keeps the names with the most time)",
                fmt::thousands(s.counter_groups_not_shown as u64),
                fmt::thousands(super::MAX_COUNTER_ROWS as u64)
            );
        }
    }
    super::um_render::text(&mut o, s, opts);
    if on(Section::Loss) {
        let lost = losses(s);
        let text = if lost.is_empty() {
            "none".to_string()
        } else {
            lost.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(o, "\nLoss: {text}");
    }
    for w in &s.warnings {
        let _ = writeln!(o, "Warning: {w}");
    }
    match opts.limit() {
        Some(width) => wrap_lines(&o, width),
        None => o,
    }
}

/// Busy time per device and stream.
fn utilization_text(o: &mut String, s: &Stats, opts: TextOptions) {
    let rows = s
        .utilization
        .iter()
        .map(|u| {
            vec![
                fmt::thousands(u.busy_ns),
                fmt::thousands(u.span_ns),
                format!("{:.1}", u.percent),
                fmt::thousands(u.ops),
                where_(u),
            ]
        })
        .collect();
    fitted_table(
        o,
        "GPU utilization (busy time within the GPU span: first to last GPU operation there)",
        &["Busy (ns)", "GPU span (ns)", "Busy (%)", "Ops", "Where"],
        rows,
        opts,
    );
}

/// The NVTX table; the columns of graph work captured inside each range only where some range has any, so that
/// reports of traces without CUDA graphs stay as they were.
fn nvtx_text(o: &mut String, s: &Stats, opts: TextOptions) {
    let replays = s.nvtx.iter().any(|r| r.replayed_gpu_ops > 0);
    let mut hr: Vec<&str> = TIME_HEADERS.to_vec();
    hr.extend(["GPU work (ns)", "GPU ops", "GPU span (ns)"]);
    if replays {
        hr.extend(["Graph replays (ns)", "Replayed ops"]);
    }
    hr.push("Range");
    let mut title = if s.nvtx_attribution == "process" {
        "NVTX ranges (GPU work launched by any thread of the process while each was open".to_string()
    } else {
        "NVTX ranges (GPU work launched inside each by the thread that opened it, nested ranges included; \
         --nvtx-across-threads counts every thread of the process"
            .to_string()
    };
    title.push_str(
        "; GPU span: per stream, first start to last end of the work each range launched itself, not inside a \
         nested range, summed (the viewers' gpu_user_annotation slices)",
    );
    if replays {
        title.push_str(
            "; graph replays: GPU time of the CUDA graph ops whose node was made inside the range, wherever the \
             graph was launched, counted apart",
        );
    }
    title.push(')');
    let rows = s
        .nvtx
        .iter()
        .map(|r| {
            let mut row = time_row(&r.time);
            row.push(fmt::thousands(r.gpu_ns));
            row.push(fmt::thousands(r.gpu_ops));
            row.push(fmt::thousands(r.gpu_span_ns));
            if replays {
                row.push(fmt::thousands(r.replayed_gpu_ns));
                row.push(fmt::thousands(r.replayed_gpu_ops));
            }
            row.push(if opts.limit().is_some() { r.time.name.clone() } else { name(&r.time.name, opts) });
            row
        })
        .collect();
    fitted_table(o, &title, &hr, rows, opts);
    left_out_line(o, s.nvtx_left_out.as_ref(), "range names", "NVTX range time");
    if let Some(note) = super::families::folded_note(s.nvtx.iter().map(|r| (r.time.name.as_str(), r.folded_names))) {
        o.push_str(&note);
        o.push('\n');
    }
}

fn where_(u: &super::Utilization) -> String {
    match u.stream {
        Some(st) => format!("GPU {} stream {st}", u.device),
        None => format!("GPU {} (all streams)", u.device),
    }
}

/// What was lost or could not be used, by cause: CUPTI's and the recorder's counts, then the joins'.
fn losses(s: &Stats) -> Vec<(String, u64)> {
    let mut lost: Vec<(String, u64)> = s.loss.iter().filter(|(_, v)| **v > 0).map(|(k, v)| (k.clone(), *v)).collect();
    lost.sort();
    let j = &s.joins;
    for (n, what) in [
        (j.gpu_without_api, "GPU records without a launching API record"),
        (j.records_in_damaged_chunks, "records in damaged chunks"),
        (j.zero_timestamp_records, "records without timestamps"),
        (j.nvtx_unclosed_ranges, "NVTX ranges never closed"),
        (j.um_unknown_kind, "unified memory records of unknown counter kind"),
        (j.graph_events_lost, "CUDA graph events the recorder lost"),
        (j.graph_ops_without_capture, "CUDA graph ops not traced back to their node"),
        (j.recorder_thread_records, "records of the recorder's own threads, left out"),
        (j.counter_samples_unknown_device, "counter samples on devices the metadata does not list"),
        (j.counter_readings_infinite, "infinite counter readings, left out"),
    ] {
        if n > 0 {
            lost.push((what.to_string(), n));
        }
    }
    lost
}

pub(super) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

/// One CSV table of every section computed: `section` tells them apart (`kernel`, `api`, `memory`, `nvtx` (span_ns
/// = the ranges' summed GPU spans), `nvtx_replayed` (a range name whose graph nodes were made inside it: gpu_ns, gpu_ops = their replays'),
/// `graph_exec`, `graph_range`, `graph_site`, `graph_join` (the graphs section: see `graphs_render::csv`),
/// `utilization`: count = operations, total_ns = busy time, percent = busy share of span_ns; `counter`: name =
/// `kernel NAME | GPU N | COUNTER` (or `copy ...`, `nvtx ...`), total_ns = the executions' time, percent = the
/// share of it the samples cover, avg_ns = the counter's time-weighted average in its own unit (NVML's averages
/// placed over their windows, as the text); `memory_peak`: name = `FILE GPU N CLASS` (device, managed, pinned
/// host), count = allocations, total_ns = when the peak was reached (from the trace's start), bytes = the peak;
/// `um_migration` (name = direction), `um_cause` (`KIND | CAUSE`),
/// `um_throttling` (`GPU N`): count, total_ns, bytes where they apply; `um_gpu_fault` and `um_fault_groups` (`GPU N
/// | ACCESS`): count = records, fault groups; `um_cpu_fault` (name = access type), `um_thrashing`,
/// `um_address_bytes`, `um_address_faults` (name = hex address),
/// `um_host_function` (`FUNCTION | FILE`, `<reason>` when unresolved), `um_kernel_faults`, `um_kernel_migrations`
/// (name = the kernel running): count, bytes; `loss`: count = records).
pub fn render_csv(s: &Stats) -> String {
    let mut o = String::from(
        "section,name,count,total_ns,percent,avg_ns,median_ns,min_ns,max_ns,stddev_ns,bytes,bandwidth_gbps,gpu_ns,gpu_ops,span_ns\n",
    );
    let row = |o: &mut String, sec: &str, x: &Summary, extra: [String; 5]| {
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
    let none = || [String::new(), String::new(), String::new(), String::new(), String::new()];
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
            [m.bytes.to_string(), format!("{:.3}", m.bandwidth_gbps), String::new(), String::new(), String::new()],
        );
    }
    super::um_render::memory_peaks_csv(&mut o, s);
    for r in &s.nvtx {
        let (ns, ops, span) = (r.gpu_ns.to_string(), r.gpu_ops.to_string(), r.gpu_span_ns.to_string());
        row(&mut o, "nvtx", &r.time, [String::new(), String::new(), ns, ops, span]);
    }
    for r in s.nvtx.iter().filter(|r| r.replayed_gpu_ops > 0) {
        let (ns, ops) = (r.replayed_gpu_ns, r.replayed_gpu_ops);
        let _ = writeln!(o, "nvtx_replayed,{},,,,,,,,,,,{ns},{ops},", csv_field(&r.time.name));
    }
    super::graphs_render::csv(&mut o, s);
    for u in &s.utilization {
        let _ =
            writeln!(o, "utilization,{},{},{},{:.3},,,,,,,,,,{}", where_(u), u.ops, u.busy_ns, u.percent, u.span_ns);
    }
    for c in &s.counters {
        let name = format!("{} {} | GPU {} | {}", c.over, c.name, c.device, c.series);
        let covered = 100.0 * c.covered_ns as f64 / c.total_ns.max(1) as f64;
        let _ = writeln!(o, "counter,{},,{},{covered:.3},{},,,,,,,,,", csv_field(&name), c.total_ns, c.average);
    }
    super::um_render::csv(&mut o, s);
    if s.sections.contains(&Section::Loss) {
        for (what, n) in losses(s) {
            let _ = writeln!(o, "loss,{},{n},,,,,,,,,,,,", csv_field(&what));
        }
    }
    o
}
