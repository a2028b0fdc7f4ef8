//! CUDA graphs in the tables: each replayed kernel, copy and memset's capture context (the node it was replayed
//! from, the NVTX ranges and call that made it: `cutr_model::graphs`) as columns, and the `graph_nodes` table, one
//! row per node the application made.

use cutr_model::graphs::NONE;
use cutr_model::{GraphNode, Trace};

use crate::table::Column;
use crate::tables::Files;

/// What the columns of every node say, built once per node: a range path is many names joined, shared by every
/// replay of the node.
pub(crate) struct NodeText {
    /// Per node: the NVTX ranges open at its creation, outermost first, joined by '/' (empty: none).
    paths: Vec<String>,
    /// Per node: the function name of its creating call.
    apis: Vec<Option<String>>,
}

impl NodeText {
    pub(crate) fn new(t: &Trace) -> NodeText {
        let mut by_range: rustc_hash::FxHashMap<u32, String> = rustc_hash::FxHashMap::default();
        let paths =
            t.graphs.nodes.iter().map(|n| by_range.entry(n.range).or_insert_with(|| t.range_path(n.range)).clone());
        NodeText { paths: paths.collect(), apis: t.graphs.nodes.iter().map(|n| t.capture_api_name(n)).collect() }
    }

    fn path(&self, node: u32) -> Option<&str> {
        self.paths.get(node as usize).map(String::as_str).filter(|p| !p.is_empty())
    }

    fn api(&self, node: u32) -> Option<&str> {
        self.apis.get(node as usize)?.as_deref()
    }
}

/// `CUgraphNodeType` as text (CUDA 13.0's `cuda.h`).
fn node_type(t: u8) -> &'static str {
    const NAMES: [&str; 14] = [
        "kernel",
        "memcpy",
        "memset",
        "host",
        "graph",
        "empty",
        "wait event",
        "event record",
        "external semaphores signal",
        "external semaphores wait",
        "memory alloc",
        "memory free",
        "batch memory op",
        "conditional",
    ];
    NAMES.get(t as usize).copied().unwrap_or("unknown")
}

/// The correlation id of the call that made a node.
fn correlation(t: &Trace, n: &GraphNode) -> Option<u64> {
    t.capture_api(n).map(|a| u64::from(a.correlation))
}

/// The capture columns of a GPU operation, from the index into `graphs.nodes` of the node it was replayed from
/// (`capture(i)`; `NONE` for an op not from a graph, or not traced back: every column null).
pub(crate) fn capture_columns<'t>(
    t: &'t Trace,
    text: &'t NodeText,
    capture: impl Fn(usize) -> u32 + Copy + 't,
) -> Vec<Column<'t>> {
    let node = move |i: usize| t.graphs.node(capture(i));
    vec![
        Column::OptU64("capture_node_id", Box::new(move |i| node(i).map(|n| n.node))),
        Column::Str("capture_range", Box::new(move |i| text.path(capture(i)))),
        Column::Str("capture_api", Box::new(move |i| text.api(capture(i)))),
        Column::OptU64("capture_correlation", Box::new(move |i| node(i).and_then(|n| correlation(t, n)))),
    ]
}

/// Index into `graphs.nodes` of the node row `i` of `v` (a `*_capture` vector) was replayed from.
pub(crate) fn capture_of(v: &[u32], i: usize) -> u32 {
    v.get(i).copied().unwrap_or(NONE)
}

/// `graph_nodes`: one row per node the application made (by stream capture or `cudaGraphAdd*Node`).
pub(crate) fn graph_nodes<'t>(t: &'t Trace, f: &'t Files, text: &'t NodeText) -> Vec<Column<'t>> {
    let n = &t.graphs.nodes;
    let mut c = f.columns(move |i| n[i].proc);
    c.extend([
        Column::U32("graph_id", Box::new(move |i| n[i].graph)),
        Column::U64("node_id", Box::new(move |i| n[i].node)),
        Column::Str("node_type", Box::new(move |i| Some(node_type(n[i].node_type)))),
        Column::U64("created_ns", Box::new(move |i| n[i].created)),
        Column::U32("tid", Box::new(move |i| n[i].tid)),
        Column::Str("api_name", Box::new(move |i| text.api(i as u32))),
        Column::OptU64("correlation", Box::new(move |i| correlation(t, &n[i]))),
        Column::Str("nvtx_range", Box::new(move |i| text.path(i as u32))),
        Column::U32("stack_frames", Box::new(move |i| n[i].stack.len() as u32)),
    ]);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_types_are_cudas_names() {
        assert_eq!(
            (node_type(0), node_type(2), node_type(13), node_type(14)),
            ("kernel", "memset", "conditional", "unknown")
        );
    }
}
