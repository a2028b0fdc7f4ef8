//! CUDA graph replays tied to where they were captured (issue 33), as both viewers draw them: each replayed op's
//! capture context (the NVTX path and the call that made its node, shown as args), an arrow from that call to the
//! node's first replay, and the capture-time NVTX ranges laid over every replay on the GPU (`replay of: PATH`
//! slices on a track of their own under the GPU). All of it is read from `Trace::graphs`; a recording without
//! graph events gets none of it, and its output does not change.

use std::cmp::Reverse;

use cutr_model::{CorrKey, NameId, ProcId, Trace};
use rustc_hash::FxHashMap as HashMap;

use super::item::{MAX_OVERHEADS, Src};
use super::labels::Labels;

/// Arrow ids of the capture arrows: `CAPTURE_FLOW_BASE + node`. A launch's arrow ids ([`CorrKey::flow_id`])
/// stay below it while `k x files + file < 2^20` (a launch of fewer than 2^20 / files records), and both stay
/// exact in the doubles JSON readers parse ids into (below 2^53).
pub const CAPTURE_FLOW_BASE: u64 = 1 << 52;

/// The arrow id from the call that made node `node` (index into `Trace::graphs.nodes`) to its first replay.
#[inline]
pub fn capture_flow_id(node: u32) -> u64 {
    CAPTURE_FLOW_BASE + node as u64
}

/// One capture-time NVTX range over one graph launch's work on one GPU: from the earliest start to the latest
/// end of the launch's ops whose nodes were made inside the range (or a range inside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replay {
    pub proc: ProcId,
    pub device: u32,
    /// Index into `Trace::ranges`.
    pub range: u32,
    /// The graph launch (the correlation its ops share).
    pub launch: CorrKey,
    pub start: u64,
    pub end: u64,
    /// `replay of: PATH` (a label of the timeline).
    pub name: NameId,
}

/// What the viewers show of graph replays, resolved once before the parallel writers run.
#[derive(Clone, Debug, Default)]
pub struct GraphView {
    /// Per node of `Trace::graphs.nodes`: the NVTX path open when it was made (`forward/layer3/attention`;
    /// empty: none).
    pub captured_in: Vec<Box<str>>,
    /// Per node: the call that made it and its correlation id (`cudaLaunchKernel (corr 1234)`; empty: none).
    pub captured_by: Vec<Box<str>>,
    /// The replay slices (`Src::Replay` indexes it), by (file, device, start, longer first, outer first).
    pub replays: Vec<Replay>,
}

impl GraphView {
    /// `slice_rows`: the slices the trace's rows make, so that replay slices never take the timeline past the
    /// item indices it can address.
    pub(crate) fn build(trace: &Trace, labels: &Labels, slice_rows: usize) -> GraphView {
        let g = &trace.graphs;
        if g.nodes.is_empty() {
            return GraphView::default();
        }
        let captured_in = g.nodes.iter().map(|n| path(trace, &enclosing(trace, n.range)).into_boxed_str()).collect();
        let captured_by = g
            .nodes
            .iter()
            .map(|n| {
                let Some(a) = trace.capture_api(n) else { return "".into() };
                let name =
                    labels.api.get(&(a.proc, a.driver, a.cbid)).map_or("", |&id| labels.names.get(&trace.names, id));
                format!("{name} (corr {})", a.correlation).into_boxed_str()
            })
            .collect();
        let room = (MAX_OVERHEADS - 1).min((u32::MAX as usize - 1).saturating_sub(slice_rows));
        GraphView { captured_in, captured_by, replays: replay_slices(trace, labels, room) }
    }
}

/// The ranges a node was made in: the innermost open one, then those around it, outward. Each step must go to
/// an earlier range (parents come first in `Trace::ranges`), so a hostile file's cycle ends the walk.
fn enclosing(trace: &Trace, range: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = range;
    while let Some(r) = trace.ranges.get(at as usize) {
        out.push(at);
        if r.parent >= at {
            break;
        }
        at = r.parent;
    }
    out
}

/// The names of `chain` (from [`enclosing`]) outermost first, joined by '/': `Trace::range_path`'s text, from the
/// walk that a hostile file's cycle cannot stretch.
fn path(trace: &Trace, chain: &[u32]) -> String {
    let names: Vec<&str> = chain.iter().rev().map(|&r| trace.names.get(trace.ranges[r as usize].name)).collect();
    names.join("/")
}

/// The interned `replay of: PATH` name of every range some node was made in (or inside of).
pub(crate) fn replay_names(trace: &Trace, mut name: impl FnMut(&str) -> NameId) -> HashMap<u32, NameId> {
    let mut names = HashMap::default();
    for n in &trace.graphs.nodes {
        let chain = enclosing(trace, n.range);
        for (k, &r) in chain.iter().enumerate() {
            names.entry(r).or_insert_with(|| name(&format!("replay of: {}", path(trace, &chain[k..]))));
        }
    }
    names
}

/// The replay slices of every graph launch (at most `room`): per (launch, device, range) the span of the ops
/// made inside the range.
fn replay_slices(trace: &Trace, labels: &Labels, room: usize) -> Vec<Replay> {
    let g = &trace.graphs;
    let chains: Vec<Vec<u32>> = g.nodes.iter().map(|n| enclosing(trace, n.range)).collect();
    let mut spans: HashMap<(CorrKey, u32, u32), (u64, u64)> = HashMap::default();
    let mut add = |caps: &[u32], i: usize, key: CorrKey, device: u32, (start, end): (u64, u64)| {
        // Ops without a correlation id share no launch.
        let Some(chain) = caps.get(i).and_then(|&n| chains.get(n as usize)).filter(|_| key.correlation != 0) else {
            return;
        };
        for &r in chain {
            let s = spans.entry((key, device, r)).or_insert((start, end));
            *s = (s.0.min(start), s.1.max(end));
        }
    };
    for (i, k) in trace.kernels.iter().enumerate() {
        add(&g.kernel_capture, i, k.corr(), k.device, (k.start, k.end));
    }
    for (i, m) in trace.memcpys.iter().enumerate() {
        add(&g.memcpy_capture, i, m.corr(), m.device, (m.start, m.end));
    }
    for (i, m) in trace.memsets.iter().enumerate() {
        add(&g.memset_capture, i, m.corr(), m.device, (m.start, m.end));
    }
    let mut out: Vec<Replay> = spans
        .into_iter()
        .filter_map(|((launch, device, range), (start, end))| {
            let name = *labels.replay.get(&range)?;
            Some(Replay { proc: launch.proc, device, range, launch, start, end, name })
        })
        .collect();
    // Outer ranges before inner ones of the same span, so that the timeline's order (start, longer first, then
    // the source's index) opens the parent first.
    out.sort_unstable_by_key(|r| {
        let depth = trace.ranges[r.range as usize].depth;
        (r.proc, r.device, r.start, Reverse(r.end), depth, r.range, r.launch)
    });
    out.truncate(room);
    out
}

/// The capture arrows: from the call that made each node to the first op replayed from it (by start).
#[derive(Clone, Debug, Default)]
pub struct CaptureFlows {
    /// (index into `Trace::apis`, node) of every replayed node whose creating call was loaded, sorted.
    pub by_api: Vec<(u32, u32)>,
    /// The first op replayed from each of those nodes, and the node.
    pub first: HashMap<Src, u32>,
}

impl CaptureFlows {
    pub(crate) fn build(trace: &Trace) -> CaptureFlows {
        let g = &trace.graphs;
        if g.nodes.is_empty() {
            return CaptureFlows::default();
        }
        let mut first: HashMap<u32, (u64, Src)> = HashMap::default();
        let mut see = |n: u32, start: u64, src: Src| {
            let made = g.node(n).filter(|node| (node.api as usize) < trace.apis.len());
            if made.is_some() {
                let f = first.entry(n).or_insert((start, src));
                *f = (*f).min((start, src));
            }
        };
        // Rows and their entries zipped: rows added after the load have none, and no entry is read past its table.
        for ((k, &n), i) in trace.kernels.iter().zip(&g.kernel_capture).zip(0..) {
            see(n, k.start, Src::Kernel(i));
        }
        for ((m, &n), i) in trace.memcpys.iter().zip(&g.memcpy_capture).zip(0..) {
            see(n, m.start, Src::Memcpy(i));
        }
        for ((m, &n), i) in trace.memsets.iter().zip(&g.memset_capture).zip(0..) {
            see(n, m.start, Src::Memset(i));
        }
        let mut by_api: Vec<(u32, u32)> = first.keys().map(|&n| (g.nodes[n as usize].api, n)).collect();
        by_api.sort_unstable();
        CaptureFlows { by_api, first: first.into_iter().map(|(n, (_, src))| (src, n)).collect() }
    }

    pub fn len(&self) -> usize {
        self.by_api.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_api.is_empty()
    }

    /// The nodes whose arrows start at API call `api`.
    pub fn from_api(&self, api: u32) -> impl Iterator<Item = u32> + '_ {
        let from = self.by_api.partition_point(|&(a, _)| a < api);
        self.by_api[from..].iter().take_while(move |&&(a, _)| a == api).map(|&(_, n)| n)
    }
}

/// The node (index into `Trace::graphs.nodes`) a kernel, copy or memset was replayed from.
pub fn node_of(trace: &Trace, src: Src) -> Option<u32> {
    let g = &trace.graphs;
    let (caps, i) = match src {
        Src::Kernel(i) => (&g.kernel_capture, i),
        Src::Memcpy(i) => (&g.memcpy_capture, i),
        Src::Memset(i) => (&g.memset_capture, i),
        _ => return None,
    };
    caps.get(i as usize).copied().filter(|&n| (n as usize) < g.nodes.len())
}
