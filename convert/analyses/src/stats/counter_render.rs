//! The `counters` section as text: one row per kernel, kind of copy and NVTX range (per GPU), a column per counter
//! in scaled units (TB/s, %, W, MHz), short names as the viewers show them. The columns are split into blocks that
//! fit a terminal of [`WIDTH`] characters besides the op's name, which comes last, as in the other sections.

use std::collections::BTreeMap;
use std::fmt::Write;

use cutr_viewer_export::timeline::{Unit, counter_name};

use super::counters::{CounterAverage, OWN_SHARE};
use super::render::{TextOptions, name};

/// The numeric columns of a block take at most this many characters.
const WIDTH: usize = 100;
/// A header's words are wrapped to lines of about this many characters.
const HEADER_CHARS: usize = 12;
/// Below this share of an op's time covered by readings, its cell is marked.
const COVERED_SHARE: f64 = 0.5;

/// An op, (kind, name, GPU), with its rows by series.
type OpRows<'a> = ((&'a str, &'a str, u32), BTreeMap<&'a str, &'a CounterAverage>);

/// A column: a series, its short name and unit, the factor its values are divided by, and its place.
struct Column<'a> {
    series: &'a str,
    header: Vec<String>,
    divide_by: f64,
    decimals: Option<usize>,
}

/// Rates in bytes per second scaled to the largest that keeps the column's biggest value at 1 or more.
fn byte_rate_scale(max: f64) -> (f64, &'static str) {
    [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")]
        .into_iter()
        .find(|s| max >= s.0)
        .unwrap_or((1.0, "B/s"))
}

fn column<'a>(series: &'a str, rows: &[&CounterAverage]) -> Column<'a> {
    let n = counter_name(series);
    let max = rows.iter().filter(|r| r.series == series).fold(0f64, |m, r| m.max(r.average.abs()));
    let (divide_by, unit, decimals) = match &n.unit {
        Unit::Named(u) if u == "B/s" => {
            let (d, u) = byte_rate_scale(max);
            (d, u.to_string(), Some(2))
        }
        // NVML's throttle flags (1 while throttled): their average is the share of the time throttled.
        Unit::Named(u) if u == "0/1" => (0.01, "% time".to_string(), Some(1)),
        Unit::Named(u) if u == "%" || u == "W" || u == "°C" => (1.0, u.to_string(), Some(1)),
        Unit::Named(u) if u == "MHz" => (1.0, u.to_string(), Some(0)),
        other => (1.0, other.label().to_string(), None),
    };
    Column { series, header: wrap(&format!("{} ({unit})", n.name)), divide_by, decimals }
}

/// Words over lines of about [`HEADER_CHARS`]; a longer word keeps its own line.
fn wrap(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= HEADER_CHARS => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

/// A cell: the scaled value, `*` where the op fills under half of the windows its readings average over, `~`
/// where readings cover under half of its time.
fn cell(c: &Column, r: &CounterAverage) -> String {
    let v = r.average / c.divide_by;
    let mut s = match c.decimals {
        Some(d) => format!("{v:.d$}"),
        None => format!("{v:.4}"),
    };
    if r.own_share < OWN_SHARE {
        s.push('*');
    }
    if (r.covered_ns as f64) < COVERED_SHARE * r.total_ns as f64 {
        s.push('~');
    }
    s
}

/// The section's text: blocks of columns, then what the marks and windows mean.
pub(super) fn text(o: &mut String, rows: &[CounterAverage], opts: TextOptions) {
    // Ops in the section's order (kernels, copies, ranges; by time), each with its rows by series.
    let mut ops: Vec<OpRows> = Vec::new();
    for r in rows {
        let key = (r.over, r.name.as_str(), r.device);
        match ops.last_mut() {
            Some((k, m)) if *k == key => {
                m.insert(&r.series, r);
            }
            _ => ops.push((key, BTreeMap::from([(r.series.as_str(), r)]))),
        }
    }
    let all: Vec<&CounterAverage> = rows.iter().collect();
    let mut series: Vec<&str> = rows.iter().map(|r| r.series.as_str()).collect();
    series.sort_by(|a, b| {
        let (na, nb) = (counter_name(a), counter_name(b));
        na.order_key().cmp(&nb.order_key()).then(a.cmp(b))
    });
    series.dedup();
    let columns: Vec<Column> = series.iter().map(|s| column(s, &all)).collect();
    let widths: Vec<usize> = columns
        .iter()
        .map(|c| {
            let cells = ops.iter().filter_map(|(_, m)| m.get(c.series)).map(|r| cell(c, r).chars().count());
            c.header.iter().map(|h| h.chars().count()).chain(cells).max().unwrap_or(1)
        })
        .collect();
    let _ = writeln!(o, "\nCounters while each kernel, copy and NVTX range ran (time-weighted averages)");
    // A narrower terminal gets narrower blocks; the numbers of one block never need more than WIDTH.
    let fit = if opts.wide { WIDTH } else { opts.width.map_or(WIDTH, |w| w.min(WIDTH)) };
    let mut from = 0;
    while from < columns.len() {
        let mut to = from + 1;
        let mut used = widths[from] + 2;
        while to < columns.len() && used + widths[to] + 2 <= fit {
            used += widths[to] + 2;
            to += 1;
        }
        block(o, &ops, &columns[from..to], &widths[from..to], opts);
        from = to;
    }
    legend(o, rows);
}

/// One block of columns: header lines bottom-aligned, then a line per op.
fn block(o: &mut String, ops: &[OpRows], columns: &[Column], widths: &[usize], opts: TextOptions) {
    let lines = columns.iter().map(|c| c.header.len()).max().unwrap_or(1);
    let _ = writeln!(o);
    for line in 0..lines {
        let mut s = String::from(" ");
        for (c, w) in columns.iter().zip(widths) {
            let skip = lines - c.header.len();
            let h = if line >= skip { c.header[line - skip].as_str() } else { "" };
            let _ = write!(s, " {h:>w$}");
        }
        if line == lines - 1 {
            s.push_str("  Op");
        }
        let _ = writeln!(o, "{}", s.trim_end());
    }
    for ((over, op, device), by_series) in ops {
        let mut s = String::from(" ");
        for (c, w) in columns.iter().zip(widths) {
            let v = by_series.get(c.series).map_or_else(|| "-".to_string(), |r| cell(c, r));
            let _ = write!(s, " {v:>w$}");
        }
        let _ = writeln!(o, "{s}  {over} {} (GPU {device})", name(op, opts));
    }
}

/// What `*` and `~` mean where they were used, and each averaged series' window.
fn legend(o: &mut String, rows: &[CounterAverage]) {
    let mut windows: BTreeMap<String, &str> = BTreeMap::new();
    for r in rows {
        if let Some(w) = &r.window {
            windows.entry(counter_name(&r.series).name).or_insert(w);
        }
    }
    if rows.iter().any(|r| r.own_share < OWN_SHARE) {
        let _ = writeln!(
            o,
            "  * NVML's average over a window the op fills less than half of: the level around the op, not its own"
        );
    }
    if rows.iter().any(|r| (r.covered_ns as f64) < COVERED_SHARE * r.total_ns as f64) {
        let _ = writeln!(o, "  ~ readings cover less than half of the op's time");
    }
    for (series, window) in windows {
        let _ = writeln!(o, "  {series}: {window}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_wrap_and_rates_scale() {
        assert_eq!(wrap("DRAM Read Bandwidth (TB/s)"), ["DRAM Read", "Bandwidth", "(TB/s)"]);
        assert_eq!(byte_rate_scale(1.4e12), (1e12, "TB/s"));
        assert_eq!(byte_rate_scale(2.2e7), (1e6, "MB/s"));
        assert_eq!(byte_rate_scale(0.0), (1.0, "B/s"));
    }
}
