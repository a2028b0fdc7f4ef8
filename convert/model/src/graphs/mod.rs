//! CUDA graphs tied to where they were made (issue 33): every kernel, copy and memset a graph replays is traced
//! back to the node the application made (by stream capture or `cudaGraphAdd*Node`), and that node to the moment
//! of its creation: the API call that made it, the NVTX range open on its thread, the call stack the recorder kept.
//!
//! The recorder writes what CUPTI's graph callbacks report (`graphs` chunks, [`cutr_format::GraphEvent`]). A
//! replayed op carries the id of a node of an executable graph (`graph_node_id`); that node is a copy of a node of
//! the instantiated graph (a `NodeCloned` event), which may itself be a copy (`cudaGraphClone`), and an executable
//! update (`cudaGraphExecUpdate`) makes an executable node stand for a node of another graph from that moment on.
//! [`GraphContext::origin_of`] follows those links to the node that is no copy: its [`GraphNode`].
//!
//! Everything is on the trace's time base. Graph events are kept whatever the time window: graphs are made long
//! before the replays one looks at. The calls and ranges around a node's creation are the loaded ones, so with a
//! window that leaves the creation out a node has no call or range (and is not counted as a failed join).
//!
//! A known gap: in `graph_probe` CUDA 13.0 reported an executable update for the three kernels but not for the
//! memset, whose parameters were the same in both captures; a node no update names keeps the context of the graph
//! it was instantiated from.

// The viewers, `stats` and the tables read this module: every public item says what it holds.
#![deny(missing_docs)]

mod build;
#[cfg(test)]
mod tests;

use std::ops::Range;

use rustc_hash::FxHashMap;

use crate::ids::ProcId;
use crate::rows::{ApiCall, NvtxRange};
use crate::trace::Trace;

pub(crate) use build::Pending;

/// The value of an index field of this module that points nowhere (`GraphNode::api`, `kernel_capture`...).
pub const NONE: u32 = u32::MAX;

/// A node the application made: created by stream capture (a launch or copy on a capturing stream) or by a
/// `cudaGraphAdd*Node` call, not copied from another node by instantiation, cloning or an update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphNode {
    /// The file (process) that made it.
    pub proc: ProcId,
    /// CUPTI's id of the graph it belongs to.
    pub graph: u32,
    /// CUPTI's node id (`(graph << 32) | index` on CUDA 13.0): what `graph_node_id` of a record names.
    pub node: u64,
    /// `CUgraphNodeType`: 0 kernel, 1 memcpy, 2 memset, 3 host, 4 child graph, 5 empty...
    pub node_type: u8,
    /// When it was made (trace ns): inside its creating call.
    pub created: u64,
    /// The OS thread id of the thread that made it.
    pub tid: u32,
    /// Index into `Trace::apis` of the creating call: the outermost runtime call on the thread whose span holds
    /// the creation, else the outermost driver call; [`NONE`] when no loaded call holds it.
    pub api: u32,
    /// Index into `Trace::ranges` of the innermost NVTX range open on the thread at the creation ([`NONE`]: none).
    pub range: u32,
    /// Where its creating call's stack lies in [`GraphContext::frames`] (empty: none kept).
    pub stack: Range<u32>,
}

/// A graph the recording saw made (or whose nodes it saw): a template, a clone, or the copy an instantiation makes
/// (whose id is the executable's on CUDA 13.0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph {
    /// The file (process) it belongs to.
    pub proc: ProcId,
    /// CUPTI's graph id.
    pub graph: u32,
    /// When it was made (trace ns; 0 when its creation was not recorded).
    pub created: u64,
    /// The thread that made it (0 when not recorded).
    pub tid: u32,
    /// Index into `Trace::apis` of the call that made it (`cudaGraphCreate`, `cudaStreamBeginCapture`,
    /// `cudaGraphInstantiate`, `cudaGraphClone`...); [`NONE`] when none.
    pub api: u32,
    /// The graph `cudaGraphClone` copied this one from (0: not a clone).
    pub cloned_from: u32,
    /// Its nodes the application made, in [`GraphContext::nodes`] (empty for copies: their nodes are
    /// copies of another graph's).
    pub nodes: Range<u32>,
    /// The dependencies between those nodes, in [`GraphContext::edges`].
    pub edges: Range<u32>,
}

/// A dependency inside a graph: `to` runs after `from` (indices into [`GraphContext::nodes`], one graph's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GraphEdge {
    /// The node depended on.
    pub from: u32,
    /// The node that depends on it.
    pub to: u32,
}

/// An executable graph: what `cudaGraphInstantiate` made of a template graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphExec {
    /// The file (process) it belongs to.
    pub proc: ProcId,
    /// CUPTI's executable id: the `graph_id` of the records its replays make.
    pub exec: u32,
    /// The graph it was instantiated from.
    pub template: u32,
    /// When it was made (trace ns).
    pub created: u64,
    /// The thread that made it.
    pub tid: u32,
    /// Index into `Trace::apis` of the instantiating call ([`NONE`]: none).
    pub api: u32,
}

/// The links from a copied node to the node it stands for, kept for [`GraphContext::origin_of`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Links {
    /// (file, node id) -> index into `nodes` of the nodes the application made.
    origin: FxHashMap<(ProcId, u64), u32>,
    /// (file, node id) of a copy -> the node it was copied from.
    clone_of: FxHashMap<(ProcId, u64), u64>,
    /// (file, executable node id) -> (time, node it stands for from then on), by time.
    updates: FxHashMap<(ProcId, u64), Vec<(u64, u64)>>,
}

/// The most links [`GraphContext::origin_of`] follows: a real chain is a few (an update, a clone of a clone); a
/// hostile file's may be a cycle.
pub const MAX_LINKS: usize = 64;

/// Every file's graphs, the nodes the application made with their creation context, and the node each replayed
/// op traces back to.
#[derive(Clone, Debug, Default)]
pub struct GraphContext {
    /// The nodes the application made, sorted by (file, graph, node id): each graph's together.
    pub nodes: Vec<GraphNode>,
    /// Every graph seen, sorted by (file, graph id).
    pub graphs: Vec<Graph>,
    /// Dependencies between nodes of one graph, each graph's together (in the order of `graphs`).
    pub edges: Vec<GraphEdge>,
    /// The executables, sorted by (file, executable id).
    pub execs: Vec<GraphExec>,
    /// Return addresses of the kept creation stacks, innermost first per stack; located through the file's
    /// `SessionMetadata::mappings`.
    pub frames: Vec<u64>,
    /// Per row of `Trace::kernels`: index into `nodes` of the node it was replayed from ([`NONE`]: not from a
    /// graph, or not traced back). Empty when no file recorded graph events; rows added after the load have none.
    pub kernel_capture: Vec<u32>,
    /// The same per row of `Trace::memcpys`.
    pub memcpy_capture: Vec<u32>,
    /// The same per row of `Trace::memsets`.
    pub memset_capture: Vec<u32>,
    pub(crate) links: Links,
    /// Per file: whether it has `graphs` chunks (read or damaged).
    pub(crate) recorded: Vec<bool>,
    /// Events read but not yet joined (until every file is loaded).
    pub(crate) pending: Pending,
}

impl GraphContext {
    /// A node the application made, by index into `nodes`.
    pub fn node(&self, i: u32) -> Option<&GraphNode> {
        self.nodes.get(i as usize)
    }

    /// The index into `nodes` of node id `node` of file `proc`, if the application made it (not a copy).
    pub fn find_node(&self, proc: ProcId, node: u64) -> Option<u32> {
        self.links.origin.get(&(proc, node)).copied()
    }

    /// The node the application made that node `node` of file `proc` (any node: of an executable, a clone, a
    /// template) stands for at time `t` (trace ns): the executable updates made at or before `t` followed, then
    /// the copies back to their original. `None` when a link is missing, or past [`MAX_LINKS`] links.
    pub fn origin_of(&self, proc: ProcId, node: u64, t: u64) -> Option<u32> {
        let mut at = node;
        // Each turn looks at one node and follows at most one link from it.
        for _ in 0..=MAX_LINKS {
            if let Some(updates) = self.links.updates.get(&(proc, at)) {
                let n = updates.partition_point(|u| u.0 <= t);
                if n > 0 {
                    at = updates[n - 1].1;
                    continue;
                }
            }
            if let Some(&i) = self.links.origin.get(&(proc, at)) {
                return Some(i);
            }
            at = *self.links.clone_of.get(&(proc, at))?;
        }
        None
    }

    /// The return addresses of a node's creating call, innermost first (empty when none were kept).
    pub fn stack(&self, n: &GraphNode) -> &[u64] {
        self.frames.get(n.stack.start as usize..n.stack.end as usize).unwrap_or(&[])
    }

    /// Graph `graph` of file `proc`.
    pub fn graph(&self, proc: ProcId, graph: u32) -> Option<&Graph> {
        let i = self.graphs.binary_search_by_key(&(proc, graph), |g| (g.proc, g.graph)).ok()?;
        Some(&self.graphs[i])
    }

    /// The nodes the application made in a graph.
    pub fn nodes_of(&self, g: &Graph) -> &[GraphNode] {
        self.nodes.get(g.nodes.start as usize..g.nodes.end as usize).unwrap_or(&[])
    }

    /// The dependencies between a graph's nodes.
    pub fn edges_of(&self, g: &Graph) -> &[GraphEdge] {
        self.edges.get(g.edges.start as usize..g.edges.end as usize).unwrap_or(&[])
    }

    /// Executable `exec` of file `proc`.
    pub fn exec(&self, proc: ProcId, exec: u32) -> Option<&GraphExec> {
        let i = self.execs.binary_search_by_key(&(proc, exec), |e| (e.proc, e.exec)).ok()?;
        Some(&self.execs[i])
    }

    /// The executables instantiated from a graph.
    pub fn execs_of<'a>(&'a self, g: &'a Graph) -> impl Iterator<Item = &'a GraphExec> + 'a {
        self.execs.iter().filter(move |e| e.proc == g.proc && e.template == g.graph)
    }

    /// Whether file `proc` recorded graph events (has `graphs` chunks, format 1.5 with the recorder's graph
    /// context on): without them no op of a graph can be traced back, and none is counted as failing to.
    pub fn recorded(&self, proc: ProcId) -> bool {
        self.recorded.get(proc.index()).copied().unwrap_or(false)
    }
}

impl Trace {
    /// The node a kernel (index into `kernels`) was replayed from; `None` for kernels not from a graph or not
    /// traced back.
    pub fn capture_of_kernel(&self, i: usize) -> Option<&GraphNode> {
        self.graphs.node(*self.graphs.kernel_capture.get(i)?)
    }

    /// The node a memcpy (index into `memcpys`) was replayed from.
    pub fn capture_of_memcpy(&self, i: usize) -> Option<&GraphNode> {
        self.graphs.node(*self.graphs.memcpy_capture.get(i)?)
    }

    /// The node a memset (index into `memsets`) was replayed from.
    pub fn capture_of_memset(&self, i: usize) -> Option<&GraphNode> {
        self.graphs.node(*self.graphs.memset_capture.get(i)?)
    }

    /// The API call that made a node (`cudaLaunchKernel` under stream capture, `cudaGraphAddKernelNode`...).
    pub fn capture_api(&self, n: &GraphNode) -> Option<&ApiCall> {
        self.apis.get(n.api as usize)
    }

    /// The function name of the call that made a node.
    pub fn capture_api_name(&self, n: &GraphNode) -> Option<String> {
        self.capture_api(n).map(|a| self.api_name(a))
    }

    /// The innermost NVTX range open on the node's thread when it was made.
    pub fn capture_range(&self, n: &GraphNode) -> Option<&NvtxRange> {
        self.ranges.get(n.range as usize)
    }

    /// The NVTX ranges open when a node was made, outermost first, joined by '/' (`forward/layer3/attention`);
    /// empty when none was.
    pub fn capture_range_path(&self, n: &GraphNode) -> String {
        self.range_path(n.range)
    }

    /// The names of a range (index into `ranges`) and the ranges enclosing it on its thread, outermost first,
    /// joined by '/'; empty for [`NONE`] or an index past the table.
    pub fn range_path(&self, range: u32) -> String {
        let mut names = Vec::new();
        let mut at = range;
        // Parents come before their children in `ranges`: a parent link that does not point earlier is damage (a
        // hand-built or hostile table), and the walk stops there.
        while let Some(r) = self.ranges.get(at as usize) {
            names.push(self.names.get(r.name));
            if r.parent >= at {
                break;
            }
            at = r.parent;
        }
        names.reverse();
        names.join("/")
    }

    /// PyTorch's op id and user annotation id of the call that made a node (see [`Trace::external_ids`]); (0, 0)
    /// when none.
    pub fn capture_external_ids(&self, n: &GraphNode) -> (u64, u64) {
        self.capture_api(n).map_or((0, 0), |a| self.external_ids(a.corr()))
    }
}
