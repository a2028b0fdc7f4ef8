//! The `graphs` section: CUDA graphs' replays per executable, and their GPU time by where each replayed node was
//! made (the NVTX ranges open on the capturing thread, the function that made it), from the model's graph joins
//! (`cutr_model::graphs`). Also the NVTX section's second attribution: a range gets the GPU time of the graph ops
//! whose node was made inside it, wherever the graph was launched.

use cutr_model::graphs::{MAX_LINKS, NONE};
use cutr_model::par::Source;
use cutr_model::{ProcId, Trace};
use rayon::prelude::*;
use serde::Serialize;

use super::Summary;
use super::buckets::{buckets, group, split_at_bounds};
use super::graph_sites::{CaptureSite, sites};
use super::order_stats::Durations;

/// One kernel, copy or memset a graph replayed (graph id != 0).
#[derive(Clone, Copy, Debug)]
pub(super) struct GraphOp {
    pub proc: ProcId,
    /// The executable's id.
    pub graph: u32,
    /// The launching call's correlation id: one per replay (`cudaGraphLaunch`).
    pub correlation: u32,
    pub duration: u64,
    /// Index into `Trace::graphs.nodes` of the node it was replayed from ([`NONE`]: not traced back).
    pub node: u32,
}

/// Every op of a graph in the trace: kernels, then copies, then memsets.
pub(super) fn graph_ops(t: &Trace) -> Vec<GraphOp> {
    let g = &t.graphs;
    // An index past the nodes (none in a trace the model built) is no node.
    let node = |v: &[u32], i: usize| v.get(i).copied().filter(|&n| (n as usize) < g.nodes.len()).unwrap_or(NONE);
    let kernels = t.kernels.par_iter().enumerate().filter(|(_, k)| k.graph_id != 0).map(|(i, k)| GraphOp {
        proc: k.proc,
        graph: k.graph_id,
        correlation: k.correlation,
        duration: k.duration(),
        node: node(&g.kernel_capture, i),
    });
    let copies = t.memcpys.par_iter().enumerate().filter(|(_, m)| m.graph_id != 0).map(|(i, m)| GraphOp {
        proc: m.proc,
        graph: m.graph_id,
        correlation: m.correlation,
        duration: m.duration(),
        node: node(&g.memcpy_capture, i),
    });
    let sets = t.memsets.par_iter().enumerate().filter(|(_, m)| m.graph_id != 0).map(|(i, m)| GraphOp {
        proc: m.proc,
        graph: m.graph_id,
        correlation: m.correlation,
        duration: m.duration(),
        node: node(&g.memset_capture, i),
    });
    kernels.chain(copies).chain(sets).collect()
}

/// GPU time and count of the ops traced back to each node (indexed like `Trace::graphs.nodes`): everything the
/// section and the NVTX ranges' second attribution need of the ops once their replays are counted, whatever the
/// number of replays.
pub(super) fn node_sums(nodes: usize, ops: &[GraphOp]) -> Vec<(u64, u64)> {
    let mut per_node = vec![(0u64, 0u64); nodes];
    for op in ops {
        add_to_node(&mut per_node, op.node, op.duration);
    }
    per_node
}

/// One op's `duration` added to `node`'s sums (none for [`NONE`] or an index past them).
pub(super) fn add_to_node(per_node: &mut [(u64, u64)], node: u32, duration: u64) {
    if let Some(n) = per_node.get_mut(node as usize) {
        n.0 = n.0.saturating_add(duration);
        n.1 += 1;
    }
}

/// Per NVTX range (indexed like `Trace::ranges`): GPU time and count of the graph ops whose node was made while the
/// range was open on the making thread (nested ranges included), wherever and whenever the graph was replayed.
pub(super) fn replays_by_range(t: &Trace) -> Vec<(u64, u64)> {
    if t.graphs.nodes.is_empty() {
        return vec![(0, 0); t.ranges.len()];
    }
    range_sums(t, &node_sums(t.graphs.nodes.len(), &graph_ops(t)))
}

/// [`replays_by_range`] from the nodes' sums ([`node_sums`]).
pub(super) fn range_sums(t: &Trace, per_node: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = vec![(0u64, 0u64); t.ranges.len()];
    // Each node's sums go up its range's parent chain once (as the model's launch attribution does): a node
    // replayed 20 times walks the chain once.
    for (n, &(ns, ops)) in t.graphs.nodes.iter().zip(per_node) {
        let mut r = n.range;
        // Parents come before their children in `ranges` (the model's order); the walk also stops at a parent that
        // does not, so it ends whatever the table holds.
        while let Some(range) = t.ranges.get(r as usize) {
            out[r as usize].0 = out[r as usize].0.saturating_add(ns);
            out[r as usize].1 += ops;
            if range.parent >= r {
                break;
            }
            r = range.parent;
        }
    }
    out
}

/// An executable graph's replays.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GraphExecStats {
    /// `graph N (template M)`; the file first where there are several. The summary is of the GPU time per replay
    /// (the sum of its ops' durations): count = replays, percent = share of all graphs' GPU time.
    #[serde(flatten)]
    pub per_replay: Summary,
    pub file: String,
    /// CUPTI's executable id: the `graph_id` of its ops.
    pub exec: u32,
    /// The graph it was instantiated from; `None` when the recording has no instantiation for it.
    pub template: Option<u32>,
    /// Nodes the application made in the template (those of the graph it was cloned from for a clone).
    pub nodes: u64,
    /// Kernels, copies and memsets over all replays.
    pub ops: u64,
}

/// Graph ops by the NVTX ranges open on the thread that made their node.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CaptureRange {
    /// The ranges, outermost first, joined by '/' (`forward/layer3/attention`); empty: none was open.
    pub path: String,
    /// Nodes made there (replayed or not).
    pub nodes: u64,
    /// Ops replayed from those nodes, and their GPU time.
    pub ops: u64,
    pub gpu_ns: u64,
    /// Share of the GPU time of all graph ops traced back.
    pub percent: f64,
}

/// The `graphs` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GraphReport {
    /// Kernels, copies and memsets with a graph id.
    pub ops: u64,
    /// Of those, traced back to the node the application made.
    pub ops_traced_back: u64,
    /// Not traced back in files that recorded graph events (`JoinStats::graph_ops_without_capture` where no
    /// window left rows out).
    pub ops_not_traced_back: u64,
    /// In files without graph events (recorded before format 1.5 or with `--graph-context off`).
    pub ops_without_graph_events: u64,
    /// Nodes made by the application (stream capture or `cudaGraphAdd*Node`), graphs seen, executables made.
    pub nodes: u64,
    pub graphs: u64,
    pub execs_made: u64,
    /// Nodes whose creating call's stack was kept.
    pub nodes_with_stack: u64,
    pub execs: Vec<GraphExecStats>,
    pub ranges: Vec<CaptureRange>,
    /// Ops by the application function that made their node, per capture range.
    pub sites: Vec<CaptureSite>,
    /// Whether some site's function was named (host symbols found).
    pub sites_named: bool,
}

impl GraphReport {
    /// Whether the trace has anything for the section.
    pub fn is_empty(&self) -> bool {
        self.ops == 0 && self.nodes == 0 && self.execs_made == 0
    }
}

/// What the section counts of the graph ops, from a loaded trace or a stream ([`super::stream_graphs`]).
pub(super) struct GraphTally {
    /// Ops with a graph id; of those, traced back to their node, and in files that recorded graph events.
    pub ops: u64,
    pub traced: u64,
    pub recorded: u64,
    /// GPU time and ops per node ([`node_sums`]).
    pub per_node: Vec<(u64, u64)>,
    /// Every executable launched, with its replays.
    pub execs: Vec<ExecTally>,
}

/// An executable's replays: the GPU time of each (the sum of its ops' durations), and its ops.
pub(super) struct ExecTally {
    pub proc: ProcId,
    pub exec: u32,
    pub replays: Durations,
    pub ops: u64,
}

pub(crate) fn graphs(t: &Trace, top: Option<usize>, symbol_dirs: &[std::path::PathBuf]) -> GraphReport {
    let ops = graph_ops(t);
    let tally = GraphTally {
        ops: ops.len() as u64,
        traced: ops.iter().filter(|o| o.node != NONE).count() as u64,
        recorded: ops.iter().filter(|o| t.graphs.recorded(o.proc)).count() as u64,
        per_node: node_sums(t.graphs.nodes.len(), &ops),
        execs: replays(&ops),
    };
    report(t, tally, top, symbol_dirs)
}

/// The section from its tally; `t` holds the processes, names and graphs, and the ranges their nodes were made in.
pub(super) fn report(
    t: &Trace,
    tally: GraphTally,
    top: Option<usize>,
    symbol_dirs: &[std::path::PathBuf],
) -> GraphReport {
    let paths = node_paths(t);
    let (sites, sites_named) = sites(t, &paths, &tally.per_node, symbol_dirs);
    let traced = tally.traced;
    let mut r = GraphReport {
        ops: tally.ops,
        ops_traced_back: traced,
        ops_not_traced_back: tally.recorded - traced.min(tally.recorded),
        ops_without_graph_events: tally.ops - tally.recorded.min(tally.ops),
        nodes: t.graphs.nodes.len() as u64,
        graphs: t.graphs.graphs.len() as u64,
        execs_made: t.graphs.execs.len() as u64,
        nodes_with_stack: t.graphs.nodes.iter().filter(|n| !n.stack.is_empty()).count() as u64,
        execs: execs(t, tally.execs),
        ranges: ranges(&paths, &tally.per_node),
        sites,
        sites_named,
    };
    if let Some(n) = top {
        r.execs.truncate(n);
        r.ranges.truncate(n);
        r.sites.truncate(n);
    }
    r
}

/// Nodes the application made in graph `graph` of `proc`: a clone's are its original's (followed a bounded number
/// of times: a hostile file's clones may form a cycle).
fn template_nodes(t: &Trace, proc: ProcId, graph: u32) -> u64 {
    let mut at = graph;
    for _ in 0..MAX_LINKS {
        let Some(g) = t.graphs.graph(proc, at) else { return 0 };
        if !g.nodes.is_empty() || g.cloned_from == 0 {
            return g.nodes.len() as u64;
        }
        at = g.cloned_from;
    }
    0
}

/// Replays per executable: ops grouped by (file, executable, launching call), then the replays by executable.
fn replays(ops: &[GraphOp]) -> Vec<ExecTally> {
    let keys: Vec<(ProcId, u32, u32)> = ops.par_iter().map(|o| (o.proc, o.graph, o.correlation)).collect();
    let (replays, keys) = buckets(&keys);
    let op = |i: usize, _| ops[i].duration;
    let (mut durs, bounds) = group(replays.len(), &[Source { keys, make: &op }]);
    let per_replay = split_at_bounds(&mut durs, &bounds);
    let mut out: Vec<ExecTally> = Vec::new();
    let mut index = rustc_hash::FxHashMap::default();
    for (&(proc, exec, _), d) in replays.iter().zip(per_replay) {
        let i = *index.entry((proc, exec)).or_insert_with(|| {
            // Every value kept: the summary is `summarize`'s of them all.
            out.push(ExecTally { proc, exec, replays: Durations::new(usize::MAX), ops: 0 });
            out.len() - 1
        });
        out[i].replays.add(super::saturating_sum(d.iter().copied()));
        out[i].ops += d.len() as u64;
    }
    out
}

/// The executables' rows: those launched, then those made but never launched; most GPU time first.
fn execs(t: &Trace, mut launched: Vec<ExecTally>) -> Vec<GraphExecStats> {
    // One order whatever the tally's: rows that tie keep it through the stable sort below.
    launched.sort_by_key(|e| (e.proc, e.exec));
    let seen: rustc_hash::FxHashSet<(ProcId, u32)> = launched.iter().map(|e| (e.proc, e.exec)).collect();
    // Executables never launched while recording too (a warm-up's, a capture left unused): 0 replays.
    for e in &t.graphs.execs {
        if !seen.contains(&(e.proc, e.exec)) {
            launched.push(ExecTally { proc: e.proc, exec: e.exec, replays: Durations::new(0), ops: 0 });
        }
    }
    let many_files = t.processes.len() > 1;
    let mut rows: Vec<GraphExecStats> = launched
        .into_iter()
        .map(|ExecTally { proc, exec, replays, ops }| {
            // A row's file is always one of the trace's; `get` keeps a hand-built trace from panicking.
            let file = t.processes.get(proc.index()).map(|_| t.label(proc)).unwrap_or_default();
            let template = t.graphs.exec(proc, exec).map(|e| e.template);
            let mut name = match template {
                Some(g) => format!("graph {exec} (template {g})"),
                None => format!("graph {exec}"),
            };
            if many_files {
                name = format!("{file} {name}");
            }
            GraphExecStats {
                per_replay: replays.summary(name),
                file,
                exec,
                template,
                nodes: template.map_or(0, |g| template_nodes(t, proc, g)),
                ops,
            }
        })
        .collect();
    let total = super::saturating_sum(rows.iter().map(|r| r.per_replay.total_ns));
    for r in &mut rows {
        r.per_replay.percent = if total > 0 { 100.0 * r.per_replay.total_ns as f64 / total as f64 } else { 0.0 };
    }
    rows.sort_by(|a, b| {
        (b.per_replay.total_ns.cmp(&a.per_replay.total_ns)).then_with(|| (&a.file, a.exec).cmp(&(&b.file, b.exec)))
    });
    rows
}

/// Each node's capture range path (indexed like `graphs.nodes`), each range's built once: many nodes share one.
fn node_paths(t: &Trace) -> Vec<String> {
    let mut paths: rustc_hash::FxHashMap<u32, String> = rustc_hash::FxHashMap::default();
    t.graphs.nodes.iter().map(|n| paths.entry(n.range).or_insert_with(|| t.range_path(n.range)).clone()).collect()
}

/// Graph ops traced back, by their node's capture range path; nodes by the same path.
fn ranges(node_paths: &[String], per_node: &[(u64, u64)]) -> Vec<CaptureRange> {
    let mut rows: std::collections::BTreeMap<&str, CaptureRange> = std::collections::BTreeMap::new();
    for p in node_paths {
        rows.entry(p).or_insert_with(|| CaptureRange { path: p.clone(), ..Default::default() }).nodes += 1;
    }
    for (p, &(ns, ops)) in node_paths.iter().zip(per_node) {
        if let Some(r) = rows.get_mut(p.as_str()) {
            r.ops += ops;
            r.gpu_ns = r.gpu_ns.saturating_add(ns);
        }
    }
    let mut rows: Vec<CaptureRange> = rows.into_values().collect();
    let total = super::saturating_sum(rows.iter().map(|r| r.gpu_ns));
    for r in &mut rows {
        r.percent = if total > 0 { 100.0 * r.gpu_ns as f64 / total as f64 } else { 0.0 };
    }
    rows.sort_by(|a, b| b.gpu_ns.cmp(&a.gpu_ns).then_with(|| a.path.cmp(&b.path)));
    rows
}

#[cfg(test)]
mod tests {
    use cutr_model::rows::{Kernel, NvtxRange};
    use cutr_model::{Graph, GraphExec, GraphNode};

    use super::*;

    fn node(range: u32, stack: std::ops::Range<u32>) -> GraphNode {
        let (proc, graph, node, node_type, created, tid, api) = (ProcId(0), 1, 7, 0, 5, 1, NONE);
        GraphNode { proc, graph, node, node_type, created, tid, api, range, stack }
    }

    /// What a hostile file could leave in the model: indices past their tables, a range that is its own parent, a
    /// clone cycle, capture vectors shorter than the rows, stacks past the frames and no mappings.
    #[test]
    fn hostile_graph_context_never_panics_and_counts_what_it_can() {
        let mut t = Trace::default();
        let kernel = |graph_id, correlation| Kernel { graph_id, correlation, start: 10, end: 30, ..Default::default() };
        t.kernels = vec![kernel(9, 1), kernel(9, 1), kernel(9, 2), kernel(4, 3), kernel(0, 4)];
        let name = cutr_model::NameId::default();
        let range = NvtxRange {
            proc: ProcId(0),
            start: 0,
            end: 100,
            pid: 1,
            tid: 1,
            name,
            domain: name,
            id: 0,
            depth: 0,
            parent: 0,
        };
        t.ranges = vec![range];
        t.graphs.nodes = vec![node(0, 0..3), node(77, 5..u32::MAX)];
        t.graphs.frames = vec![0x1000, 0, u64::MAX];
        t.graphs.kernel_capture = vec![0, 1, 999];
        let graph = |graph, cloned_from| Graph {
            proc: ProcId(0),
            graph,
            created: 0,
            tid: 0,
            api: NONE,
            cloned_from,
            nodes: 0..0,
            edges: 0..0,
        };
        t.graphs.graphs = vec![graph(2, 3), graph(3, 2)];
        let exec = GraphExec { proc: ProcId(0), exec: 9, template: 2, created: 0, tid: 0, api: NONE };
        t.graphs.execs = vec![exec];
        let r = graphs(&t, None, &[]);
        assert_eq!((r.ops, r.ops_traced_back, r.ops_not_traced_back, r.ops_without_graph_events), (4, 2, 0, 4));
        let execs: Vec<_> = r.execs.iter().map(|e| (e.exec, e.template, e.per_replay.count, e.nodes, e.ops)).collect();
        assert_eq!(execs, [(9, Some(2), 2, 0, 3), (4, None, 1, 0, 1)]);
        // The model's path of a range that is its own parent is its own name once (here the empty name), so both
        // nodes fall in the row without a path.
        let ranges: Vec<_> = r.ranges.iter().map(|r| (r.path.is_empty(), r.nodes, r.ops)).collect();
        assert_eq!(ranges, [(true, 2, 2)]);
        assert_eq!((r.nodes_with_stack, r.sites.len(), r.sites_named), (2, 1, false));
        assert_eq!(r.sites[0].unresolved, Some("recording has no mappings (before format 1.4)"));
        // The range that is its own parent gets its node's op once.
        assert_eq!(replays_by_range(&t), [(20, 1)]);
    }
}
