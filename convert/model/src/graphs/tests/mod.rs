//! The graph joins on what a recorder writes: the probe's sequence (`measurements/2026-11-27-h100-graph-probe`)
//! played as calls, ranges, graph events and replayed records ([`Scenario`]), then joined in a trace built by hand
//! (`probe`, `hostile`) or written to a file and loaded (`file`).

mod file;
mod hostile;
mod probe;

use std::sync::Arc;

use cutr_format::{GraphEvent, GraphEventKind, GraphEvents, SessionMetadata};

use crate::ids::{NameId, ProcId};
use crate::rows::{ApiCall, Kernel, Memset, NvtxRange};
use crate::trace::{JoinStats, Process, Trace};

/// The probe's thread and a process id.
pub(super) const TID: u32 = 494;
pub(super) const PID: u32 = 4242;
/// `CUgraphNodeType`.
pub(super) const KERNEL: u8 = 0;
pub(super) const MEMSET: u8 = 2;

/// Node `index` of graph `graph`, as CUDA 13.0 numbers them.
pub(super) fn n(graph: u64, index: u64) -> u64 {
    (graph << 32) | index
}

/// The runtime (`driver` false) or driver cbid of a function, from CUDA 13.0's table.
pub(super) fn cbid(driver: bool, name: &str) -> u32 {
    let domain = if driver { 1 } else { 2 };
    (0..2000).find(|&c| cutr_schema::callbacks::name(domain, c) == Some(name)).expect("a CUDA 13.0 function")
}

/// A replayed kernel or memset.
#[derive(Clone, Debug)]
pub(super) struct Op {
    pub memset: bool,
    pub start: u64,
    pub end: u64,
    pub correlation: u32,
    pub graph: u32,
    pub node: u64,
    pub name: &'static str,
}

/// A program's calls, ranges, graph events and replayed ops on one thread, on a clock that moves 10 ns a step.
#[derive(Default)]
pub(super) struct Scenario {
    pub now: u64,
    pub apis: Vec<ApiCall>,
    pub ops: Vec<Op>,
    /// (start, end, name) on [`TID`].
    pub ranges: Vec<(u64, u64, &'static str)>,
    /// (correlation id, PyTorch op id).
    pub external: Vec<(u32, u64)>,
    pub graphs: GraphEvents,
    open: Vec<usize>,
    corr: u32,
}

impl Scenario {
    pub fn new(t0: u64) -> Scenario {
        Scenario { now: t0, ..Default::default() }
    }

    fn tick(&mut self) -> u64 {
        self.now += 10;
        self.now
    }

    /// A runtime call (`driver`: a driver call) named `name` with `inside` happening within it; its correlation id.
    pub fn call_in(&mut self, driver: bool, name: &str, inside: impl FnOnce(&mut Scenario, u32)) -> u32 {
        let start = self.tick();
        self.corr += 1;
        let correlation = self.corr;
        inside(self, correlation);
        let end = self.tick();
        let cbid = cbid(driver, name);
        let proc = ProcId(0);
        self.apis.push(ApiCall { proc, start, end, pid: PID, tid: TID, correlation, cbid, driver, return_value: 0 });
        correlation
    }

    pub fn call(&mut self, name: &str, inside: impl FnOnce(&mut Scenario, u32)) -> u32 {
        self.call_in(false, name, inside)
    }

    pub fn push_range(&mut self, name: &'static str) {
        let t = self.tick();
        self.open.push(self.ranges.len());
        self.ranges.push((t, u64::MAX, name));
    }

    pub fn pop_range(&mut self) {
        let t = self.tick();
        let i = self.open.pop().expect("an open range");
        self.ranges[i].1 = t;
    }

    /// A graph event of `kind` now, its fields set by `set`; a node's creation gets a stack of two frames.
    pub fn event(&mut self, kind: GraphEventKind, set: impl FnOnce(&mut GraphEvent)) {
        let mut e = GraphEvent::new(kind, self.tick(), TID);
        set(&mut e);
        if kind == GraphEventKind::NodeCreated {
            e.stack_start = self.graphs.frames.len() as u32;
            e.stack_len = 2;
            self.graphs.frames.extend([0x40_0000 + (e.node & 0xff) + (e.node >> 32) * 0x100, 0x50_0000]);
        }
        self.graphs.events.push(e);
    }

    pub fn graph_created(&mut self, graph: u32) {
        self.event(GraphEventKind::GraphCreated, |e| e.graph = graph);
    }

    pub fn node_created(&mut self, graph: u32, node: u64, node_type: u8) {
        self.event(GraphEventKind::NodeCreated, |e| (e.graph, e.node, e.node_type) = (graph, node, node_type));
    }

    /// `node` of `graph` depends on `on`.
    pub fn dependency(&mut self, graph: u32, node: u64, on: u64) {
        self.event(GraphEventKind::DependencyCreated, |e| (e.graph, e.node, e.other_node) = (graph, node, on));
    }

    pub fn node_cloned(&mut self, graph: u32, node: u64, from_graph: u32, from: u64) {
        self.event(GraphEventKind::NodeCloned, |e| {
            (e.graph, e.node, e.other_graph, e.other_node) = (graph, node, from_graph, from)
        });
    }

    /// Executable node `exec_node` of `exec` runs as `node` from now on.
    pub fn exec_node_updated(&mut self, exec: u32, exec_node: u64, node: u64) {
        self.event(GraphEventKind::ExecNodeUpdated, |e| (e.exec, e.other_node, e.node) = (exec, exec_node, node));
    }

    pub fn exec_created(&mut self, template: u32, exec: u32) {
        self.event(GraphEventKind::ExecCreated, |e| (e.graph, e.exec) = (template, exec));
    }

    /// `cudaGraphLaunch` of `exec`, its ops (node, memset?, name) running one after another after the call.
    pub fn launch(&mut self, exec: u32, ops: &[(u64, bool, &'static str)]) -> u32 {
        let correlation = self.call("cudaGraphLaunch", |_, _| {});
        for &(node, memset, name) in ops {
            let start = self.tick();
            let end = self.tick();
            self.ops.push(Op { memset, start, end, correlation, graph: exec, node, name });
        }
        correlation
    }
}

/// A process entry for a trace built by hand.
pub(super) fn process() -> Process {
    Process { path: "probe.cutr".into(), meta: Arc::new(SessionMetadata::default()), pid: PID, ..Default::default() }
}

/// The scenario as the rows a load of its file makes, its events pending (`recorded`: the file had `graphs`
/// chunks), joined.
pub(super) fn joined(s: &Scenario, recorded: bool) -> Trace {
    let proc = ProcId(0);
    let mut t = Trace { processes: vec![process()], apis: s.apis.clone(), ..Default::default() };
    for op in &s.ops {
        let (start, end, correlation, graph_id, graph_node_id) = (op.start, op.end, op.correlation, op.graph, op.node);
        if op.memset {
            t.memsets.push(Memset {
                proc,
                start,
                end,
                device: 0,
                context: 1,
                stream: 7,
                correlation,
                bytes: 64,
                value: 0,
                memory_kind: 3,
                graph_id,
                graph_node_id,
            });
        } else {
            let name = t.names.intern(op.name);
            t.kernels.push(Kernel {
                proc,
                start,
                end,
                correlation,
                name,
                graph_id,
                graph_node_id,
                ..Default::default()
            });
        }
    }
    for (i, &(start, end, name)) in s.ranges.iter().enumerate() {
        let name = t.names.intern(name);
        let (pid, tid, id, domain) = (PID, TID, i as u32 + 1, NameId::EMPTY);
        let (depth, parent) = (0, NvtxRange::NO_PARENT);
        t.ranges.push(NvtxRange { proc, start, end, pid, tid, name, domain, id, depth, parent });
    }
    let ext = &s.external;
    t.external.build_file_par(proc, ext.len(), |i| Some((ext[i].0, (ext[i].1, 0))), |slot, v| *slot = v);
    t.graphs.recorded = vec![recorded];
    t.graphs.frames = s.graphs.frames.clone();
    t.graphs.pending.events = s.graphs.events.iter().map(|&e| (proc, e)).collect();
    t.finish();
    t
}

/// Each kernel's and memset's (in that order) node: its (graph, node id), or `None`.
pub(super) fn captures(t: &Trace) -> Vec<Option<(u32, u64)>> {
    let kernels = (0..t.kernels.len()).map(|i| t.capture_of_kernel(i));
    let memsets = (0..t.memsets.len()).map(|i| t.capture_of_memset(i));
    kernels.chain(memsets).map(|c| c.map(|n| (n.graph, n.node))).collect()
}

/// The four graph counts of the join statistics: ops without capture, events lost, nodes without a call, events
/// not joined.
pub(super) fn graph_counts(s: &JoinStats) -> [u64; 4] {
    [s.graph_ops_without_capture, s.graph_events_lost, s.graph_nodes_without_api, s.graph_events_unjoined]
}
