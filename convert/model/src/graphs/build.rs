//! Building the [`GraphContext`]: each file's `graphs` chunks read at load ([`GraphContext::read_file`]), then,
//! once every file's calls and ranges are sorted, the events gathered into graphs, nodes and links, each node joined
//! to its creating call and range, and each replayed op traced back to its node ([`Trace::join_graphs`]).

use std::collections::hash_map::Entry;
use std::hash::Hash;

use cutr_format::{GraphEvent, GraphEventKind, Problem, Reader};
use cutr_schema::kinds;
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use super::{Graph, GraphContext, GraphEdge, GraphExec, GraphNode, Links, NONE};
use crate::ids::{CorrKey, ProcId};
use crate::load::Filter;
use crate::rows::{ApiCall, NvtxRange};
use crate::timebase::TimeBase;
use crate::trace::{JoinStats, Trace};

/// Graph events read but not yet joined: the joins need every file's calls and ranges sorted.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pending {
    /// Timestamps on the trace's time base, stacks indexing `GraphContext::frames`.
    pub(crate) events: Vec<(ProcId, GraphEvent)>,
    /// What the load kept: a node made outside it has no loaded call, which is no failed join.
    pub(crate) filter: Filter,
}

impl GraphContext {
    /// Reads file `proc`'s `graphs` chunks: events kept whatever the window (see the module's comment), their
    /// stacks appended to `frames`. Lost and unknown events go into `stats`; returns the chunks that failed.
    pub(crate) fn read_file(
        &mut self,
        r: &Reader,
        proc: ProcId,
        time: &TimeBase,
        filter: &Filter,
        stats: &mut JoinStats,
    ) -> Vec<Problem> {
        let (chunks, problems) = r.graph_events();
        if self.recorded.len() <= proc.index() {
            self.recorded.resize(proc.index() + 1, false);
        }
        self.recorded[proc.index()] = !chunks.is_empty() || !problems.is_empty();
        self.pending.filter = filter.clone();
        for c in chunks {
            stats.graph_events_lost = stats.graph_events_lost.saturating_add(c.lost_events);
            // Stacks are indexed by u32: frames past that (never in a file that fits in memory) are left out.
            let base = self.frames.len();
            let fits = base + c.frames.len() <= u32::MAX as usize;
            if fits {
                self.frames.extend_from_slice(&c.frames);
            }
            for mut e in c.events {
                if matches!(e.kind, GraphEventKind::Unknown(_)) {
                    stats.unmodelled_records += 1;
                    continue;
                }
                e.timestamp = time.to_trace(e.timestamp);
                // The reader checked that the stack lies in the chunk's frames, so it fits when they did.
                (e.stack_start, e.stack_len) = if fits { (base as u32 + e.stack_start, e.stack_len) } else { (0, 0) };
                self.pending.events.push((proc, e));
            }
        }
        problems
    }
}

/// Per file: events that could not be used, nodes made outside any call, replayed ops not traced back.
#[derive(Clone, Copy, Debug, Default)]
struct Failures {
    unjoined: u64,
    without_api: u64,
    ops_without_capture: u64,
}

/// What the events say, gathered in one pass. Nothing relies on the callbacks' order but updates' times: CUDA
/// 13.0 reports a dependency before its node's creation callback ends, and a lost event may leave any gap.
#[derive(Default)]
struct Collected {
    /// Each node's first creation.
    created: FxHashMap<(ProcId, u64), GraphNode>,
    clone_of: FxHashMap<(ProcId, u64), u64>,
    /// (file, graph) -> (created, thread).
    graphs: FxHashMap<(ProcId, u32), (u64, u32)>,
    /// (file, clone) -> the graph it was cloned from.
    cloned: FxHashMap<(ProcId, u32), u32>,
    execs: FxHashMap<(ProcId, u32), GraphExec>,
    /// (file, graph, node, the node it depends on).
    deps: Vec<(ProcId, u32, u64, u64)>,
    /// (file, executable node) -> (time, node it stands for from then on), in callback order.
    updates: FxHashMap<(ProcId, u64), Vec<(u64, u64)>>,
}

/// Inserts `v` unless `k` has a value: whether it was inserted.
fn first<K: Hash + Eq, V>(m: &mut FxHashMap<K, V>, k: K, v: V) -> bool {
    match m.entry(k) {
        Entry::Vacant(slot) => {
            slot.insert(v);
            true
        }
        Entry::Occupied(_) => false,
    }
}

impl Collected {
    fn gather(events: &[(ProcId, GraphEvent)], failures: &mut [Failures]) -> Collected {
        use GraphEventKind::*;
        let mut c = Collected::default();
        for &(proc, e) in events {
            // A graph, node or executable made twice is damage (CUDA numbers them once per process): the first
            // is kept.
            let kept = match e.kind {
                GraphCreated => first(&mut c.graphs, (proc, e.graph), (e.timestamp, e.thread_id)),
                GraphCloned => first(&mut c.cloned, (proc, e.graph), e.other_graph),
                NodeCreated => first(&mut c.created, (proc, e.node), node(proc, &e)),
                NodeCloned => first(&mut c.clone_of, (proc, e.node), e.other_node),
                ExecCreated => first(&mut c.execs, (proc, e.exec), exec(proc, &e)),
                DependencyCreated => {
                    c.deps.push((proc, e.graph, e.node, e.other_node));
                    true
                }
                ExecNodeUpdated => {
                    c.updates.entry((proc, e.other_node)).or_default().push((e.timestamp, e.node));
                    true
                }
                // The executable node keeps its origin; other kinds were left out at load.
                ExecNodeParamsSet | Unknown(_) => true,
            };
            if !kept && let Some(f) = failures.get_mut(proc.index()) {
                f.unjoined += 1;
            }
        }
        c
    }

    /// Whether any event made node `node` of `proc` (created or copied).
    fn known(&self, proc: ProcId, node: u64) -> bool {
        self.created.contains_key(&(proc, node)) || self.clone_of.contains_key(&(proc, node))
    }

    /// Counts the clones and updates naming a node no event made (dependencies are counted with the edges).
    fn count_dangling(&self, failures: &mut [Failures]) {
        let mut count = |proc: ProcId| {
            if let Some(f) = failures.get_mut(proc.index()) {
                f.unjoined += 1;
            }
        };
        for (&(proc, _), &original) in &self.clone_of {
            if !self.known(proc, original) {
                count(proc);
            }
        }
        for (&(proc, exec_node), updates) in &self.updates {
            for &(_, node) in updates {
                if !self.known(proc, exec_node) || !self.known(proc, node) {
                    count(proc);
                }
            }
        }
    }
}

fn node(proc: ProcId, e: &GraphEvent) -> GraphNode {
    GraphNode {
        proc,
        graph: e.graph,
        node: e.node,
        node_type: e.node_type,
        created: e.timestamp,
        tid: e.thread_id,
        api: NONE,
        range: NONE,
        stack: e.stack_start..e.stack_start + u32::from(e.stack_len),
    }
}

fn exec(proc: ProcId, e: &GraphEvent) -> GraphExec {
    GraphExec { proc, exec: e.exec, template: e.graph, created: e.timestamp, tid: e.thread_id, api: NONE }
}

/// One thread's calls of one layer (runtime or driver) by start, with the running maximum of their ends.
#[derive(Default)]
struct ThreadCalls {
    starts: Vec<u64>,
    max_end: Vec<u64>,
    ids: Vec<u32>,
}

impl ThreadCalls {
    /// The outermost call holding `t`: of the calls started by `t`, the first to end at or after it, which is where
    /// the running maximum of ends first reaches `t`.
    fn at(&self, t: u64) -> Option<u32> {
        let n = self.starts.partition_point(|&s| s <= t);
        let i = self.max_end[..n].partition_point(|&e| e < t);
        (i < n).then(|| self.ids[i])
    }
}

/// The calls of the threads that made graphs, by (file, thread, driver).
struct CallIndex(FxHashMap<(ProcId, u32, bool), ThreadCalls>);

impl CallIndex {
    /// `apis` sorted by start (each thread's calls come in order).
    fn new(apis: &[ApiCall], threads: &FxHashSet<(ProcId, u32)>) -> CallIndex {
        let mut m: FxHashMap<(ProcId, u32, bool), ThreadCalls> = FxHashMap::default();
        for (i, a) in apis.iter().enumerate() {
            if !threads.contains(&(a.proc, a.tid)) {
                continue;
            }
            let c = m.entry((a.proc, a.tid, a.driver)).or_default();
            let max = c.max_end.last().map_or(a.end, |&m| m.max(a.end));
            c.starts.push(a.start);
            c.max_end.push(max);
            c.ids.push(i as u32);
        }
        CallIndex(m)
    }

    /// The outermost runtime call on the thread holding `t`, else the outermost driver call ([`NONE`]: none).
    fn at(&self, proc: ProcId, tid: u32, t: u64) -> u32 {
        let find = |driver| self.0.get(&(proc, tid, driver)).and_then(|c| c.at(t));
        find(false).or_else(|| find(true)).unwrap_or(NONE)
    }
}

/// The NVTX ranges of the threads that made graphs: their starts (sorted) and indices into `Trace::ranges`.
struct RangeIndex<'r> {
    ranges: &'r [NvtxRange],
    by_thread: FxHashMap<(ProcId, u32), (Vec<u64>, Vec<u32>)>,
}

impl<'r> RangeIndex<'r> {
    /// `ranges` sorted and nested ([`crate::nvtx::nest`]).
    fn new(ranges: &'r [NvtxRange], threads: &FxHashSet<(ProcId, u32)>) -> RangeIndex<'r> {
        let mut by_thread: FxHashMap<(ProcId, u32), (Vec<u64>, Vec<u32>)> = FxHashMap::default();
        for (i, r) in ranges.iter().enumerate() {
            if threads.contains(&(r.proc, r.tid)) {
                let (starts, ids) = by_thread.entry((r.proc, r.tid)).or_default();
                starts.push(r.start);
                ids.push(i as u32);
            }
        }
        RangeIndex { ranges, by_thread }
    }

    /// The innermost range open on the thread at `t`: the last to start by `t` or the first of its enclosing ranges
    /// still open (any range open at `t` was on the nesting stack when the last one started; as in
    /// [`crate::nvtx::enclosing_ranges`]).
    fn at(&self, proc: ProcId, tid: u32, t: u64) -> u32 {
        let Some((starts, ids)) = self.by_thread.get(&(proc, tid)) else { return NONE };
        let n = starts.partition_point(|&s| s <= t);
        let Some(&last) = n.checked_sub(1).and_then(|i| ids.get(i)) else { return NONE };
        let mut at = last;
        // Nesting is at most u16::MAX deep (`NvtxRange::depth`).
        for _ in 0..=u16::MAX as usize {
            let Some(r) = self.ranges.get(at as usize) else { break };
            if r.end >= t {
                return at;
            }
            at = r.parent;
        }
        NONE
    }
}

/// The structure the events describe, joined to calls and ranges.
struct Structure {
    nodes: Vec<GraphNode>,
    graphs: Vec<Graph>,
    edges: Vec<GraphEdge>,
    execs: Vec<GraphExec>,
    links: Links,
}

impl Collected {
    /// The nodes the application made (those not copied) with their calls and ranges, the graphs with their nodes
    /// and edges, the executables, and the links back from copies.
    fn build(self, calls: &CallIndex, ranges: &RangeIndex, filter: &Filter, failures: &mut [Failures]) -> Structure {
        let apis_kept = filter.wants_kind(kinds::RUNTIME) || filter.wants_kind(kinds::DRIVER);
        let mut nodes: Vec<GraphNode> =
            self.created.values().filter(|n| !self.clone_of.contains_key(&(n.proc, n.node))).cloned().collect();
        nodes.par_sort_unstable_by_key(|n| (n.proc, n.graph, n.node));
        for n in &mut nodes {
            n.api = calls.at(n.proc, n.tid, n.created);
            n.range = ranges.at(n.proc, n.tid, n.created);
            // A call left out by the load's window or kinds is not a failed join.
            if n.api == NONE
                && apis_kept
                && filter.keeps(n.created, n.created)
                && let Some(f) = failures.get_mut(n.proc.index())
            {
                f.without_api += 1;
            }
        }
        let origin: FxHashMap<(ProcId, u64), u32> =
            nodes.iter().enumerate().map(|(i, n)| ((n.proc, n.node), i as u32)).collect();
        let edges = self.edges(&nodes, &origin, failures);
        let graphs = self.graphs(&nodes, &edges, calls);
        let mut execs: Vec<GraphExec> = self.execs.into_values().collect();
        execs.sort_unstable_by_key(|e| (e.proc, e.exec));
        for e in &mut execs {
            e.api = calls.at(e.proc, e.tid, e.created);
        }
        let mut updates = self.updates;
        for u in updates.values_mut() {
            // Stable: at equal times the later callback wins.
            u.sort_by_key(|u| u.0);
        }
        Structure { nodes, graphs, edges, execs, links: Links { origin, clone_of: self.clone_of, updates } }
    }

    /// The dependencies between nodes the application made in one graph, sorted (so each graph's are together:
    /// its nodes' indices are). Dependencies between copies repeat their originals' and are left out.
    fn edges(
        &self,
        nodes: &[GraphNode],
        origin: &FxHashMap<(ProcId, u64), u32>,
        failures: &mut [Failures],
    ) -> Vec<GraphEdge> {
        let mut edges = Vec::new();
        for &(proc, graph, node, on) in &self.deps {
            match (origin.get(&(proc, on)), origin.get(&(proc, node))) {
                (Some(&from), Some(&to))
                    if nodes[from as usize].graph == graph && nodes[to as usize].graph == graph =>
                {
                    edges.push(GraphEdge { from, to });
                }
                _ if !self.known(proc, node) || !self.known(proc, on) => {
                    if let Some(f) = failures.get_mut(proc.index()) {
                        f.unjoined += 1;
                    }
                }
                _ => {}
            }
        }
        edges.sort_unstable();
        edges.dedup();
        edges
    }

    /// Every graph made or holding nodes, by (file, id), with its nodes' and edges' ranges.
    fn graphs(&self, nodes: &[GraphNode], edges: &[GraphEdge], calls: &CallIndex) -> Vec<Graph> {
        let mut ids: FxHashSet<(ProcId, u32)> = self.graphs.keys().copied().collect();
        ids.extend(self.cloned.keys().copied());
        ids.extend(nodes.iter().map(|n| (n.proc, n.graph)));
        let mut ids: Vec<(ProcId, u32)> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.into_iter()
            .map(|(proc, graph)| {
                let (created, tid) = self.graphs.get(&(proc, graph)).copied().unwrap_or((0, 0));
                let lo = nodes.partition_point(|n| (n.proc, n.graph) < (proc, graph)) as u32;
                let hi = nodes.partition_point(|n| (n.proc, n.graph) <= (proc, graph)) as u32;
                let e_lo = edges.partition_point(|e| e.from < lo) as u32;
                let e_hi = edges.partition_point(|e| e.from < hi) as u32;
                Graph {
                    proc,
                    graph,
                    created,
                    tid,
                    api: if created == 0 { NONE } else { calls.at(proc, tid, created) },
                    cloned_from: self.cloned.get(&(proc, graph)).copied().unwrap_or(0),
                    nodes: lo..hi,
                    edges: e_lo..e_hi,
                }
            })
            .collect()
    }
}

impl Trace {
    /// Joins the graph events of every file (read at load) once the calls and ranges are sorted and nested: the
    /// graphs and nodes, each node's call and range, and each replayed kernel, copy and memset's node. Failures
    /// are counted per file in [`JoinStats`].
    pub(crate) fn join_graphs(&mut self) {
        let pending = std::mem::take(&mut self.graphs.pending);
        if pending.events.is_empty() && !self.graphs.recorded.iter().any(|&r| r) {
            return;
        }
        let mut failures = vec![Failures::default(); self.processes.len()];
        let c = Collected::gather(&pending.events, &mut failures);
        drop(pending.events);
        c.count_dangling(&mut failures);
        let mut threads: FxHashSet<(ProcId, u32)> = c.created.values().map(|n| (n.proc, n.tid)).collect();
        threads.extend(c.graphs.iter().map(|(k, v)| (k.0, v.1)));
        threads.extend(c.execs.values().map(|e| (e.proc, e.tid)));
        let calls = CallIndex::new(&self.apis, &threads);
        let ranges = RangeIndex::new(&self.ranges, &threads);
        let s = c.build(&calls, &ranges, &pending.filter, &mut failures);
        let g = &mut self.graphs;
        (g.nodes, g.graphs, g.edges, g.execs, g.links) = (s.nodes, s.graphs, s.edges, s.execs, s.links);
        let kernels = self.trace_back(&self.kernels, |k| (k.proc, k.graph_id, k.graph_node_id, k.corr(), k.start));
        let memcpys = self.trace_back(&self.memcpys, |m| (m.proc, m.graph_id, m.graph_node_id, m.corr(), m.start));
        let memsets = self.trace_back(&self.memsets, |m| (m.proc, m.graph_id, m.graph_node_id, m.corr(), m.start));
        for (rows, _) in [&kernels, &memcpys, &memsets] {
            for (f, n) in failures.iter_mut().zip(rows) {
                f.ops_without_capture += n;
            }
        }
        (self.graphs.kernel_capture, self.graphs.memcpy_capture, self.graphs.memset_capture) =
            (kernels.1, memcpys.1, memsets.1);
        for (p, f) in self.processes.iter_mut().zip(&failures) {
            let s = &mut p.stats;
            s.graph_events_unjoined += f.unjoined;
            s.graph_nodes_without_api += f.without_api;
            s.graph_ops_without_capture += f.ops_without_capture;
            self.stats.graph_events_unjoined += f.unjoined;
            self.stats.graph_nodes_without_api += f.without_api;
            self.stats.graph_ops_without_capture += f.ops_without_capture;
        }
    }

    /// Each row's node ([`NONE`]: not from a graph, or not traced back) at its launch: the launching call's start
    /// (the graph launch), else its own. Also, per file, how many rows of a graph found none where the file
    /// recorded graph events.
    fn trace_back<T: Sync>(
        &self,
        rows: &[T],
        op: impl Fn(&T) -> (ProcId, u32, u64, CorrKey, u64) + Sync,
    ) -> (Vec<u64>, Vec<u32>) {
        let nodes: Vec<u32> = rows
            .par_iter()
            .map(|r| {
                let (proc, graph, node, corr, start) = op(r);
                if graph == 0 {
                    return NONE;
                }
                let t = self.launcher(corr).map_or(start, |a| a.start);
                self.graphs.origin_of(proc, node, t).unwrap_or(NONE)
            })
            .collect();
        let mut missing = vec![0u64; self.processes.len()];
        for (r, &n) in rows.iter().zip(&nodes) {
            let (proc, graph, ..) = op(r);
            if graph != 0
                && n == NONE
                && self.graphs.recorded(proc)
                && let Some(m) = missing.get_mut(proc.index())
            {
                *m += 1;
            }
        }
        (missing, nodes)
    }
}
