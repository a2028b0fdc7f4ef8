//! The `graphs` section as text tables and CSV rows.

use std::fmt::Write as _;

use super::graph_sites::CaptureSite;
use super::render::{csv_field, name, table};
use super::{Section, Stats, TextOptions};
use crate::fmt;

/// Whether the text report shows the section: when the trace has graph ops or events, or when it was asked for
/// without every other section (so that `--report graphs` on a trace without graphs says so).
fn shown(s: &Stats) -> bool {
    s.sections.contains(&Section::Graphs) && (!s.graphs.is_empty() || s.sections.len() < Section::ALL.len())
}

fn range(path: &str) -> &str {
    if path.is_empty() { "(no range)" } else { path }
}

/// A site as people read it: `build_inner < build_middle < build_outer`, or where the frame is when unnamed.
fn site(c: &CaptureSite) -> String {
    match c.unresolved {
        None => std::iter::once(&c.function).chain(&c.callers).cloned().collect::<Vec<_>>().join(" < "),
        Some(why) => {
            let hint =
                if why == "file not readable here" { "no symbols: --symbols DIR".to_string() } else { why.into() };
            if c.file.is_empty() {
                format!("{:#x} ({hint})", c.offset)
            } else {
                format!("{}+{:#x} ({hint})", c.file, c.offset)
            }
        }
    }
}

pub(super) fn text(o: &mut String, s: &Stats, opts: TextOptions) {
    if !shown(s) {
        return;
    }
    let g = &s.graphs;
    let rows = g
        .execs
        .iter()
        .map(|e| {
            let p = &e.per_replay;
            vec![
                format!("{:.1}", p.percent),
                fmt::thousands(p.total_ns),
                fmt::thousands(p.count),
                fmt::thousands(e.nodes),
                fmt::thousands(e.ops),
                fmt::thousands_1(p.avg_ns),
                // A sketch's estimate (`stats --stream`, an executable past the cap of values) is marked.
                if p.median_estimated {
                    format!("~{}", fmt::thousands_1(p.median_ns))
                } else {
                    fmt::thousands_1(p.median_ns)
                },
                fmt::thousands(p.min_ns),
                fmt::thousands(p.max_ns),
                p.name.clone(),
            ]
        })
        .collect();
    table(
        o,
        "CUDA graphs launched (GPU time per replay: the sum of its kernels', copies' and memsets' durations)",
        &["Time (%)", "Total (ns)", "Replays", "Nodes", "Ops", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "Graph"],
        rows,
    );
    let rows = g
        .ranges
        .iter()
        .map(|r| {
            vec![
                format!("{:.1}", r.percent),
                fmt::thousands(r.gpu_ns),
                fmt::thousands(r.ops),
                fmt::thousands(r.nodes),
                name(range(&r.path), opts),
            ]
        })
        .collect();
    table(
        o,
        "CUDA graph work by where its nodes were made (NVTX ranges open on the capturing thread; GPU time of every \
         replay)",
        &["Time (%)", "GPU time (ns)", "Ops", "Nodes", "Capture range"],
        rows,
    );
    sites_text(o, s, opts);
    let _ = writeln!(
        o,
        "\nGraph ops traced back to the node the program made: {} of {} (not traced back {}, in files without graph \
         events {}). Nodes made: {} ({} with a stack); graphs: {}; executables: {}",
        fmt::thousands(g.ops_traced_back),
        fmt::thousands(g.ops),
        fmt::thousands(g.ops_not_traced_back),
        fmt::thousands(g.ops_without_graph_events),
        fmt::thousands(g.nodes),
        fmt::thousands(g.nodes_with_stack),
        fmt::thousands(g.graphs),
        fmt::thousands(g.execs_made),
    );
}

/// The sites table when some site was named; otherwise one line that says why none was.
fn sites_text(o: &mut String, s: &Stats, opts: TextOptions) {
    let g = &s.graphs;
    if g.nodes_with_stack == 0 {
        return;
    }
    if !g.sites_named {
        let _ = writeln!(o, "\nCapture sites: none named (no symbols: --symbols DIR)");
        return;
    }
    let rows = g
        .sites
        .iter()
        .map(|c| {
            vec![
                fmt::thousands(c.gpu_ns),
                fmt::thousands(c.ops),
                fmt::thousands(c.nodes),
                name(range(&c.range), opts),
                name(&site(c), opts),
            ]
        })
        .collect();
    table(
        o,
        "CUDA graph capture sites (the application function that made the nodes, then its callers)",
        &["GPU time (ns)", "Ops", "Nodes", "Capture range", "Function"],
        rows,
    );
}

/// CSV rows: `graph_exec` (name = `graph N (template M)`, count = replays, total_ns and the per-replay summary
/// of GPU ns, gpu_ops = ops, bytes = nodes), `graph_range` (name = capture range path, count = nodes, total_ns =
/// gpu_ns = GPU time, gpu_ops = ops), `graph_site` (name = `RANGE | FUNCTION < CALLERS` or the unnamed frame,
/// count = nodes, gpu_ns, gpu_ops), `graph_join` (name = what, count).
pub(super) fn csv(o: &mut String, s: &Stats) {
    if !s.sections.contains(&Section::Graphs) || s.graphs.is_empty() {
        return;
    }
    let g = &s.graphs;
    for e in &g.execs {
        let p = &e.per_replay;
        let _ = writeln!(
            o,
            "graph_exec,{},{},{},{:.3},{:.1},{:.1},{},{},{:.1},{},,,{},",
            csv_field(&p.name),
            p.count,
            p.total_ns,
            p.percent,
            p.avg_ns,
            p.median_ns,
            p.min_ns,
            p.max_ns,
            p.stddev_ns,
            e.nodes,
            e.ops
        );
    }
    for r in &g.ranges {
        let _ = writeln!(
            o,
            "graph_range,{},{},{},{:.3},,,,,,,,{},{},",
            csv_field(range(&r.path)),
            r.nodes,
            r.gpu_ns,
            r.percent,
            r.gpu_ns,
            r.ops
        );
    }
    for c in &g.sites {
        let what = format!("{} | {}", range(&c.range), site(c));
        let _ = writeln!(o, "graph_site,{},{},,,,,,,,,,{},{},", csv_field(&what), c.nodes, c.gpu_ns, c.ops);
    }
    for (what, n) in [
        ("ops", g.ops),
        ("ops traced back", g.ops_traced_back),
        ("ops not traced back", g.ops_not_traced_back),
        ("ops in files without graph events", g.ops_without_graph_events),
        ("nodes made", g.nodes),
        ("nodes with a stack", g.nodes_with_stack),
    ] {
        let _ = writeln!(o, "graph_join,{what},{n},,,,,,,,,,,,");
    }
}
