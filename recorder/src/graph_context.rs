//! Graph capture context (`--graph-context`, on by default): what CUPTI's graph resource callbacks report, kept as
//! `graphs` chunks, so a converter can tie every replayed kernel to the moment its node was made. A node made by
//! stream capture or by `cudaGraphAdd*Node` is recorded with its creating call's native stack; the NVTX ranges,
//! API call and external ids open at that moment are found offline from the same thread's records at the same
//! time. Instantiation, cloning and executable updates record which node each copy came from.
//!
//! Graphs are built once and replayed many times: everything here runs while graphs are built (on the building
//! thread, inside its CUDA call), nothing while they replay.

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use cutr_format::{GraphEvent, GraphEventKind, GraphEvents};

use crate::ffi::subscriber::{
    CBID_GRAPH_CLONED, CBID_GRAPH_CREATED, CBID_GRAPH_NODE_SET_PARAMS, CBID_GRAPH_NODE_UPDATED, CBID_GRAPHEXEC_CREATED,
    CBID_GRAPHNODE_CLONED, CBID_GRAPHNODE_CREATE_STARTING, CBID_GRAPHNODE_DEPENDENCY_CREATED, DOMAIN_DRIVER,
    DOMAIN_RESOURCE, Event, EventUser, GraphData, Site,
};

/// Frames of each creating call's stack kept by default: enough to reach a Python interpreter's frames or a deep
/// C++ framework's call site from CUDA's own.
pub const DEFAULT_STACK_FRAMES: usize = 48;
/// The most `--graph-context` takes.
pub const MAX_STACK_FRAMES: usize = 256;
/// Events kept between two collections of the flush thread (48 bytes each, plus their frames); beyond, they are
/// counted as lost. A PyTorch capture of a large model makes tens of thousands of nodes in a second.
const MAX_PENDING_EVENTS: usize = 1 << 20;

/// The graph callbacks every CUDA 12 and 13 CUPTI has.
pub const GRAPH_CALLBACKS: [(u32, u32); 6] = [
    (DOMAIN_RESOURCE, CBID_GRAPH_CREATED),
    (DOMAIN_RESOURCE, CBID_GRAPH_CLONED),
    (DOMAIN_RESOURCE, CBID_GRAPHNODE_CREATE_STARTING),
    (DOMAIN_RESOURCE, CBID_GRAPHNODE_DEPENDENCY_CREATED),
    (DOMAIN_RESOURCE, CBID_GRAPHEXEC_CREATED),
    (DOMAIN_RESOURCE, CBID_GRAPHNODE_CLONED),
];

/// Executable updates (CUDA 13.0 and later; an older CUPTI refuses them, and updated executables then keep the
/// context of the nodes they were instantiated from).
pub const UPDATE_CALLBACKS: [(u32, u32); 2] =
    [(DOMAIN_RESOURCE, CBID_GRAPH_NODE_UPDATED), (DOMAIN_RESOURCE, CBID_GRAPH_NODE_SET_PARAMS)];

/// The driver functions that copy graphs (cuGraphInstantiate and its variants, cuGraphClone, cuGraphExecUpdate;
/// cupti_driver_cbid.h). The nodes they make are copies, announced by a clone callback: their creation and
/// dependencies are left out, and no stack is taken.
pub const COPY_CALLS: [(u32, u32); 8] = [
    (DOMAIN_DRIVER, 513),
    (DOMAIN_DRIVER, 523),
    (DOMAIN_DRIVER, 561),
    (DOMAIN_DRIVER, 578),
    (DOMAIN_DRIVER, 643),
    (DOMAIN_DRIVER, 656),
    (DOMAIN_DRIVER, 657),
    (DOMAIN_DRIVER, 696),
];

thread_local! {
    /// How many graph-copying driver calls this thread is inside.
    static IN_COPY: Cell<u32> = const { Cell::new(0) };
}

/// Fills the vector with the calling thread's stack, innermost first, at most this many frames.
pub type StackFn = Box<dyn Fn(usize, &mut Vec<u64>) + Send + Sync>;

/// The callback user: keeps the events until the flush thread takes them.
pub struct GraphRecorder {
    /// CUPTI's clock (`cuptiGetTimestamp`), the clock of the records.
    now: Box<dyn Fn() -> u64 + Send + Sync>,
    /// The calling thread's stack, innermost first, at most `stack_frames` frames of the application (none: 0).
    stack: StackFn,
    stack_frames: usize,
    pending: Mutex<GraphEvents>,
    lost: AtomicU64,
    kept: AtomicU64,
}

impl GraphRecorder {
    pub fn new(stack_frames: usize, now: Box<dyn Fn() -> u64 + Send + Sync>, stack: StackFn) -> GraphRecorder {
        GraphRecorder {
            now,
            stack,
            stack_frames: stack_frames.min(MAX_STACK_FRAMES),
            pending: Mutex::new(GraphEvents::default()),
            lost: AtomicU64::new(0),
            kept: AtomicU64::new(0),
        }
    }

    /// The events since the last call (with the count of those lost), or `None` when there are none.
    pub fn take(&self) -> Option<GraphEvents> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let lost = self.lost.swap(0, Ordering::Relaxed);
        if p.events.is_empty() && lost == 0 {
            return None;
        }
        let mut out = std::mem::take(&mut *p);
        out.lost_events = lost;
        Some(out)
    }

    /// Events kept so far.
    pub fn kept(&self) -> u64 {
        self.kept.load(Ordering::Relaxed)
    }

    fn keep(&self, cbid: u32, data: &GraphData) {
        let in_copy = IN_COPY.with(Cell::get) > 0;
        let Some(mut event) = event_of(cbid, data, in_copy, 0, 0) else { return };
        event.timestamp = (self.now)();
        event.thread_id = crate::ffi::os::thread_id();
        let mut frames = Vec::new();
        if event.kind == GraphEventKind::NodeCreated && self.stack_frames > 0 {
            (self.stack)(self.stack_frames, &mut frames);
        }
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.events.len() >= MAX_PENDING_EVENTS {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        event.stack_start = p.frames.len() as u32;
        event.stack_len = frames.len() as u16;
        p.frames.extend_from_slice(&frames);
        p.events.push(event);
        self.kept.fetch_add(1, Ordering::Relaxed);
    }
}

impl EventUser for GraphRecorder {
    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::Graph { cbid, data } => self.keep(*cbid, data),
            Event::Api { domain: DOMAIN_DRIVER, cbid, site } if COPY_CALLS.contains(&(DOMAIN_DRIVER, *cbid)) => {
                IN_COPY.with(|d| d.set(if *site == Site::Enter { d.get() + 1 } else { d.get().saturating_sub(1) }));
            }
            _ => {}
        }
    }
}

/// The event a graph callback becomes (time and thread left for the caller), or `None` for what is not kept:
/// creations and dependencies of the copies made inside a copying call (their clone events say where they come
/// from), and callbacks this recorder does not use.
pub fn event_of(cbid: u32, d: &GraphData, in_copy: bool, timestamp: u64, thread_id: u32) -> Option<GraphEvent> {
    use GraphEventKind::*;
    let kind = match cbid {
        CBID_GRAPH_CREATED => GraphCreated,
        CBID_GRAPH_CLONED => GraphCloned,
        CBID_GRAPHNODE_CREATE_STARTING if !in_copy => NodeCreated,
        CBID_GRAPHNODE_DEPENDENCY_CREATED if !in_copy => DependencyCreated,
        CBID_GRAPHEXEC_CREATED => ExecCreated,
        CBID_GRAPHNODE_CLONED => NodeCloned,
        CBID_GRAPH_NODE_UPDATED => ExecNodeUpdated,
        CBID_GRAPH_NODE_SET_PARAMS => ExecNodeParamsSet,
        _ => return None,
    };
    let mut e = GraphEvent::new(kind, timestamp, thread_id);
    e.graph = d.graph;
    e.node = d.node;
    match kind {
        GraphCloned => e.other_graph = d.original_graph,
        NodeCreated => e.node_type = d.node_type.min(255) as u8,
        DependencyCreated => e.other_node = d.dependency,
        ExecCreated => e.exec = d.exec,
        NodeCloned => (e.other_graph, e.other_node) = (d.original_graph, d.original_node),
        // CUDA 13.0: `node` is the node of the graph the executable was updated from, `originalNode` the
        // executable's node it now stands for (workloads/cuda/graph_probe.cu).
        ExecNodeUpdated | ExecNodeParamsSet => {
            (e.other_graph, e.other_node, e.exec) = (d.original_graph, d.original_node, d.exec)
        }
        _ => {}
    }
    Some(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> GraphRecorder {
        let clock = AtomicU64::new(100);
        GraphRecorder::new(
            3,
            Box::new(move || clock.fetch_add(10, Ordering::Relaxed)),
            Box::new(|n, out| out.extend((1..=n as u64).map(|i| 0x1000 * i))),
        )
    }

    fn created(node: u64) -> GraphData {
        GraphData { graph: 6, node, node_type: 2, ..Default::default() }
    }

    #[test]
    fn nodes_get_stacks_and_copies_only_their_origin() {
        let r = recorder();
        r.on_event(&Event::Graph { cbid: CBID_GRAPHNODE_CREATE_STARTING, data: created(6 << 32) });
        // Instantiation: the copy's creation is left out, its clone event kept.
        r.on_event(&Event::Api { domain: DOMAIN_DRIVER, cbid: 643, site: Site::Enter });
        r.on_event(&Event::Graph { cbid: CBID_GRAPHNODE_CREATE_STARTING, data: created(7 << 32) });
        r.on_event(&Event::Graph { cbid: CBID_GRAPHNODE_DEPENDENCY_CREATED, data: created(7 << 32) });
        let clone =
            GraphData { graph: 7, node: 7 << 32, original_graph: 6, original_node: 6 << 32, ..Default::default() };
        r.on_event(&Event::Graph { cbid: CBID_GRAPHNODE_CLONED, data: clone });
        r.on_event(&Event::Api { domain: DOMAIN_DRIVER, cbid: 643, site: Site::Exit });
        r.on_event(&Event::Graph { cbid: CBID_GRAPHNODE_CREATE_STARTING, data: created((6 << 32) + 1) });
        let got = r.take().unwrap();
        let kinds: Vec<_> = got.events.iter().map(|e| e.kind).collect();
        use GraphEventKind::*;
        assert_eq!(kinds, [NodeCreated, NodeCloned, NodeCreated]);
        assert_eq!(got.events.iter().map(|e| e.timestamp).collect::<Vec<_>>(), [100, 110, 120]);
        assert_eq!(got.stack(&got.events[0]), &[0x1000, 0x2000, 0x3000]);
        assert_eq!(got.stack(&got.events[1]), &[] as &[u64]);
        assert_eq!((got.events[2].stack_start, got.events[2].stack_len), (3, 3));
        assert_eq!((got.events[1].other_graph, got.events[1].other_node), (6, 6 << 32));
        assert_eq!((got.events[0].node_type, got.events[0].thread_id), (2, crate::ffi::os::thread_id()));
        assert_eq!(r.take(), None);
        assert_eq!(r.kept(), 3);
    }

    #[test]
    fn an_exec_update_names_the_new_node_and_the_exec_node() {
        let d = GraphData { node: 12 << 32, original_node: 7 << 32, exec: 7, ..Default::default() };
        let e = event_of(CBID_GRAPH_NODE_UPDATED, &d, true, 5, 9).unwrap();
        assert_eq!(
            (e.kind, e.node, e.other_node, e.exec, e.timestamp),
            (GraphEventKind::ExecNodeUpdated, 12 << 32, 7 << 32, 7, 5)
        );
        assert_eq!(event_of(CBID_GRAPHNODE_CREATE_STARTING, &d, true, 0, 0), None);
        assert_eq!(event_of(10, &d, false, 0, 0), None);
    }
}
