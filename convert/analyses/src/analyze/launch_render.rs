//! Launch health as text and as Markdown: compact tables (under 100 columns), durations in µs with thousands
//! separators.

use std::fmt::Write;

use super::{ClassHealth, Dist, FULL_QUEUE, LaunchHealth, Outliers};
use crate::fmt::{thousands, thousands_1};

/// Streams listed, the busiest first; the rest are counted.
const MAX_STREAMS_SHOWN: usize = 16;
/// The note on kernels shorter than their launch, which the text follows with their names.
const SHORT_NOTE: &str = "kernels shorter than their launch call";
/// Kernel names are cut to this many characters in the text table.
const NAME_WIDTH: usize = 30;

fn us(ns: u64) -> String {
    thousands_1(ns as f64 / 1e3)
}

/// `name` cut to `width` characters, with `…` where cut.
fn cut(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        name.to_string()
    } else {
        name.chars().take(width - 1).chain(std::iter::once('…')).collect()
    }
}

/// A trace timestamp in seconds after the first record (`5.349024 s`), the origin `--start`/`--end` and the
/// findings use: enough to find an event in a viewer.
fn after_first_record(ns: u64, first_record_ns: u64) -> String {
    format!("{:.6} s", ns.saturating_sub(first_record_ns) as f64 / 1e9)
}

/// The classes with launches, as (label, class, note).
fn classes(h: &LaunchHealth) -> Vec<(&'static str, &ClassHealth, String)> {
    let mut out = Vec::new();
    if h.kernels.latency.count > 0 {
        out.push(("kernels", &h.kernels, String::new()));
    }
    if h.async_copies.latency.count > 0 {
        out.push(("async copies", &h.async_copies, String::new()));
    }
    if h.graph_launches.latency.count > 0 {
        let note = format!("one row per call, latency to its first op; {} ops replayed", thousands(h.graph_ops));
        out.push(("graph launches", &h.graph_launches, note));
    }
    out
}

/// A sketch's percentiles are marked `~` (within 0.5%).
fn dist_cells(d: &Dist) -> [String; 5] {
    let about = |ns: u64| if d.estimated { format!("~{}", us(ns)) } else { us(ns) };
    [thousands(d.count), about(d.median_ns), about(d.p90_ns), about(d.p99_ns), us(d.max_ns)]
}

fn outlier_line(o: &mut String, label: &str, what: &str, x: &Outliers, first_record_ns: u64) {
    if x.count == 0 {
        return;
    }
    let _ = writeln!(
        o,
        "  {label} {what} outliers: {} over {} us (the larger of p99, 10x median); first:",
        thousands(x.count),
        us(x.threshold_ns)
    );
    for e in &x.first {
        let _ = writeln!(
            o,
            "    {} corr {}  {}",
            after_first_record(e.start, first_record_ns),
            e.correlation,
            cut(&e.what, 60)
        );
    }
}

fn notes(h: &LaunchHealth) -> Vec<String> {
    let mut out = Vec::new();
    let b = &h.blocked_on_full_queue;
    out.push(format!(
        "blocked on a full launch queue (depth >= {}): {} calls, {} us",
        thousands(FULL_QUEUE as u64),
        thousands(b.calls),
        us(b.ns)
    ));
    let s = &h.shorter_than_launch;
    if h.kernels.latency.count > 0 {
        out.push(format!(
            "{SHORT_NOTE}: {} of {} ({:.1}%)",
            thousands(s.count),
            thousands(h.kernels.latency.count),
            s.share_pct,
        ));
    }
    for (n, what) in [
        (h.without_launcher, "GPU ops without a launching call in the file, not counted"),
        (h.sync_copies, "copies and memsets launched by a synchronous call, not counted"),
        (h.started_before_call, "ops started before their launch call (clock skew?), counted as latency 0"),
    ] {
        if n > 0 {
            out.push(format!("{} {what}", thousands(n)));
        }
    }
    out
}

/// The section as text.
pub(super) fn text(o: &mut String, h: &LaunchHealth) {
    let _ = writeln!(o, "Launch health (latency: GPU start - launch call start; CPU cost: the call's own time)");
    let rows = classes(h);
    if rows.is_empty() {
        let _ = writeln!(o, "  no GPU op with a launching call in the file");
    } else {
        let head = ["count", "median", "p90", "p99", "max"];
        let _ = writeln!(
            o,
            "  {:<26}{:>11}{:>11}{:>11}{:>11}{:>11}  (us)",
            "", head[0], head[1], head[2], head[3], head[4]
        );
        for (label, c, note) in &rows {
            for (what, d) in [("latency", &c.latency), ("CPU cost", &c.cpu_cost)] {
                let [n, m, p90, p99, max] = dist_cells(d);
                let _ = writeln!(o, "  {:<26}{n:>11}{m:>11}{p90:>11}{p99:>11}{max:>11}", format!("{label} {what}"));
            }
            if !note.is_empty() {
                let _ = writeln!(o, "    ({note})");
            }
        }
        for (label, c, _) in &rows {
            outlier_line(o, label, "latency", &c.latency_outliers, h.first_record_ns);
            outlier_line(o, label, "CPU cost", &c.cpu_cost_outliers, h.first_record_ns);
        }
    }
    if !h.by_name.is_empty() {
        let _ = writeln!(o, "  per kernel name ({} of {} names, the commonest first; us)", h.by_name.len(), h.names);
        let _ = writeln!(
            o,
            "  {:<NAME_WIDTH$}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>9}",
            "name", "count", "lat med", "lat p99", "lat max", "cpu med", "cpu p99", "short"
        );
        for r in &h.by_name {
            let _ = writeln!(
                o,
                "  {:<NAME_WIDTH$}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>9}",
                cut(&r.name, NAME_WIDTH),
                thousands(r.latency.count),
                us(r.latency.median_ns),
                us(r.latency.p99_ns),
                us(r.latency.max_ns),
                us(r.cpu_cost.median_ns),
                us(r.cpu_cost.p99_ns),
                thousands(r.shorter_than_launch)
            );
        }
    }
    if !h.queues.is_empty() {
        let _ = writeln!(o, "  launch queue per stream (launched, not yet started; from the call's start)");
        let _ = writeln!(
            o,
            "  {:>5}{:>8}{:>8}{:>12}{:>11}{:>12}{:>18}",
            "file", "device", "stream", "launches", "max depth", "mean depth", "at full (us)"
        );
        for q in busiest(h) {
            let _ = writeln!(
                o,
                "  {:>5}{:>8}{:>8}{:>12}{:>11}{:>12.2}{:>18}",
                q.proc,
                q.device,
                q.stream,
                thousands(q.launches),
                thousands(q.max_depth.max(0) as u64),
                q.mean_depth,
                us(q.full_ns)
            );
        }
        if h.queues.len() > MAX_STREAMS_SHOWN {
            let _ = writeln!(o, "  ... and {} more streams", h.queues.len() - MAX_STREAMS_SHOWN);
        }
    }
    for n in notes(h) {
        let _ = writeln!(o, "  {n}");
        if n.starts_with(SHORT_NOTE) {
            for (name, short, of) in &h.shorter_than_launch.top {
                let _ = writeln!(o, "    {:>9} of {:>9}  {}", thousands(*short), thousands(*of), cut(name, 70));
            }
        }
    }
}

/// The streams shown: the most launches first, at most [`MAX_STREAMS_SHOWN`].
fn busiest(h: &LaunchHealth) -> Vec<&super::StreamQueue> {
    let mut q: Vec<&super::StreamQueue> = h.queues.iter().collect();
    q.sort_by(|a, b| b.launches.cmp(&a.launches).then((a.proc, a.device, a.stream).cmp(&(b.proc, b.device, b.stream))));
    q.truncate(MAX_STREAMS_SHOWN);
    q
}

/// Markdown cells must not hold a `|`.
fn md(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The section as Markdown.
pub(super) fn markdown(o: &mut String, h: &LaunchHealth) {
    let _ = writeln!(o, "### Launch health\n");
    let _ = writeln!(o, "Latency: GPU start − launch call start. CPU cost: the launch call's own time. All in µs.\n");
    let rows = classes(h);
    if rows.is_empty() {
        let _ = writeln!(o, "No GPU op with a launching call in the file.\n");
    } else {
        let _ = writeln!(o, "| launches | figure | count | median | p90 | p99 | max |");
        let _ = writeln!(o, "|---|---|--:|--:|--:|--:|--:|");
        for (label, c, _) in &rows {
            for (what, d) in [("latency", &c.latency), ("CPU cost", &c.cpu_cost)] {
                let [n, m, p90, p99, max] = dist_cells(d);
                let _ = writeln!(o, "| {label} | {what} | {n} | {m} | {p90} | {p99} | {max} |");
            }
        }
        let _ = writeln!(o);
        for (label, c, note) in &rows {
            if !note.is_empty() {
                let _ = writeln!(o, "- {label}: {note}");
            }
            for (what, x) in [("latency", &c.latency_outliers), ("CPU cost", &c.cpu_cost_outliers)] {
                if x.count > 0 {
                    let first: Vec<String> = x
                        .first
                        .iter()
                        .map(|e| format!("`{}` (corr {})", md(&cut(&e.what, 80)), e.correlation))
                        .collect();
                    let _ = writeln!(
                        o,
                        "- {label} {what} outliers: {} over {} µs; first: {}",
                        thousands(x.count),
                        us(x.threshold_ns),
                        first.join(", ")
                    );
                }
            }
        }
    }
    if !h.by_name.is_empty() {
        let _ = writeln!(o, "\n| kernel | count | latency median | latency p99 | CPU median | CPU p99 | shorter |");
        let _ = writeln!(o, "|---|--:|--:|--:|--:|--:|--:|");
        for r in &h.by_name {
            let _ = writeln!(
                o,
                "| `{}` | {} | {} | {} | {} | {} | {} |",
                md(&cut(&r.name, 60)),
                thousands(r.latency.count),
                us(r.latency.median_ns),
                us(r.latency.p99_ns),
                us(r.cpu_cost.median_ns),
                us(r.cpu_cost.p99_ns),
                thousands(r.shorter_than_launch)
            );
        }
    }
    if !h.queues.is_empty() {
        let _ = writeln!(o, "\n| file | device | stream | launches | max depth | mean depth | at full queue (µs) |");
        let _ = writeln!(o, "|--:|--:|--:|--:|--:|--:|--:|");
        for q in busiest(h) {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {:.2} | {} |",
                q.proc,
                q.device,
                q.stream,
                thousands(q.launches),
                thousands(q.max_depth.max(0) as u64),
                q.mean_depth,
                us(q.full_ns)
            );
        }
    }
    let _ = writeln!(o);
    for n in notes(h) {
        let _ = writeln!(o, "- {n}");
    }
    if !h.shorter_than_launch.top.is_empty() {
        let top: Vec<String> = h
            .shorter_than_launch
            .top
            .iter()
            .map(|(n, k, of)| format!("`{}` ({} of {})", md(&cut(n, 60)), thousands(*k), thousands(*of)))
            .collect();
        let _ = writeln!(o, "- shorter than their launch, by name: {}", top.join(", "));
    }
    let _ = writeln!(o);
}
