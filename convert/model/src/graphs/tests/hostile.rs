//! Graph events a damaged or hostile file may hold: cycles, long chains, updates and dependencies naming nodes no
//! event made, repeated creations, nodes made outside any call. Each is counted, none panics or loops.

use super::*;
use crate::graphs::{MAX_LINKS, NONE};

/// A node made by `cudaGraphAddKernelNode` in graph 1, and executable 2's copy of it.
fn one_node() -> Scenario {
    let mut s = Scenario::new(1_000);
    s.call("cudaGraphCreate", |s, _| s.graph_created(1));
    s.call("cudaGraphAddKernelNode", |s, _| s.node_created(1, n(1, 0), KERNEL));
    s.call("cudaGraphInstantiate", |s, _| {
        s.graph_created(2);
        s.node_cloned(2, n(2, 0), 1, n(1, 0));
        s.exec_created(1, 2);
    });
    s
}

#[test]
fn cycles_and_chains_past_the_bound_are_counted_not_followed() {
    let mut s = one_node();
    // Nodes 5:0 and 6:0 are copies of each other; a chain of copies 100:0 <- 101:0 <- ... leads back to 1:0.
    s.node_cloned(5, n(5, 0), 6, n(6, 0));
    s.node_cloned(6, n(6, 0), 5, n(5, 0));
    s.node_cloned(100, n(100, 0), 1, n(1, 0));
    for g in 101..100 + MAX_LINKS as u64 + 1 {
        s.node_cloned(g as u32, n(g, 0), g as u32 - 1, n(g - 1, 0));
    }
    let (near, far) = (n(100 + MAX_LINKS as u64 - 1, 0), n(100 + MAX_LINKS as u64, 0));
    s.launch(5, &[(n(5, 0), false, "k")]);
    s.launch(100, &[(near, false, "k"), (far, false, "k")]);
    s.launch(2, &[(n(2, 0), false, "k")]);
    let t = joined(&s, true);
    assert_eq!(captures(&t), [None, Some((1, n(1, 0))), None, Some((1, n(1, 0)))]);
    // Cycle and too-long chain: 2 ops; every copy names a node some event made.
    assert_eq!(graph_counts(&t.stats), [2, 0, 0, 0]);
    assert_eq!(t.processes[0].stats.graph_ops_without_capture, 2);
}

#[test]
fn updates_and_dependencies_naming_unknown_nodes_are_counted() {
    let mut s = one_node();
    let before = s.launch(2, &[(n(2, 0), false, "k")]);
    s.call("cudaGraphExecUpdate", |s, _| {
        // The executable's node now runs as a node no event made; node 9:9, unknown, runs as 1:0.
        s.exec_node_updated(2, n(2, 0), n(77, 0));
        s.exec_node_updated(2, n(9, 9), n(1, 0));
        s.dependency(1, n(1, 0), n(55, 5));
    });
    s.launch(2, &[(n(2, 0), false, "k"), (n(9, 9), false, "k"), (n(8, 8), false, "k")]);
    let t = joined(&s, true);
    assert_eq!(t.kernels[0].correlation, before);
    // Before the update: its copy's original. After: nothing, rather than the context the node no longer has.
    assert_eq!(captures(&t), [Some((1, n(1, 0))), None, Some((1, n(1, 0))), None]);
    assert_eq!(graph_counts(&t.stats), [2, 0, 0, 3]);
    assert_eq!(t.graphs.edges, []);
}

#[test]
fn repeated_creations_keep_the_first() {
    let mut s = one_node();
    let first = s.graphs.events[1].timestamp;
    s.call("cudaGraphAddKernelNode", |s, _| s.node_created(1, n(1, 0), MEMSET));
    s.graph_created(1);
    s.exec_created(3, 2);
    s.node_cloned(2, n(2, 0), 4, n(4, 0));
    let t = joined(&s, true);
    let node = &t.graphs.nodes[0];
    assert_eq!((t.graphs.nodes.len(), node.created, node.node_type), (1, first, KERNEL));
    assert_eq!(t.graphs.exec(ProcId(0), 2).unwrap().template, 1);
    assert_eq!(graph_counts(&t.stats), [0, 0, 0, 4]);
}

#[test]
fn nodes_made_outside_any_call_have_none_and_are_counted() {
    let mut s = one_node();
    s.graph_created(3);
    s.node_created(3, n(3, 0), KERNEL);
    // A driver call alone holds a node: it is the creating call.
    s.call_in(true, "cuGraphAddKernelNode", |s, _| s.node_created(3, n(3, 1), KERNEL));
    // Runtime calls inside a runtime call: the outermost is the creating call.
    s.call("cudaStreamBeginCapture", |s, _| {
        s.call("cudaGraphAddKernelNode", |s, _| {
            s.call("cudaLaunchKernel", |s, _| s.node_created(3, n(3, 2), KERNEL));
        });
    });
    let t = joined(&s, true);
    let g = &t.graphs;
    let at = |i| &g.nodes[g.find_node(ProcId(0), n(3, i)).unwrap() as usize];
    assert_eq!((at(0).api, at(0).range, t.capture_api_name(at(0))), (NONE, NONE, None));
    assert_eq!(t.capture_api_name(at(1)).as_deref(), Some("cuGraphAddKernelNode"));
    assert_eq!(t.capture_api_name(at(2)).as_deref(), Some("cudaStreamBeginCapture"));
    assert_eq!((t.capture_range_path(at(0)), t.capture_external_ids(at(0))), (String::new(), (0, 0)));
    assert_eq!((g.graph(ProcId(0), 3).unwrap().api, graph_counts(&t.stats)), (NONE, [0, 0, 1, 0]));
}

#[test]
fn without_graph_events_nothing_is_traced_back_or_counted() {
    let mut s = one_node();
    s.launch(2, &[(n(2, 0), false, "k")]);
    s.graphs = Default::default();
    let t = joined(&s, false);
    assert_eq!((captures(&t), graph_counts(&t.stats)), (vec![None], [0, 0, 0, 0]));
    assert_eq!((t.graphs.graphs.len(), t.graphs.kernel_capture.len()), (0, 0));
    // With graphs chunks that held nothing usable (damaged), the same op is counted.
    let t = joined(&s, true);
    assert_eq!((captures(&t), graph_counts(&t.stats)), (vec![None], [1, 0, 0, 0]));
}

#[test]
fn range_paths_stop_at_the_table_and_out_of_range_indices_are_none() {
    let mut s = one_node();
    s.push_range("a");
    s.push_range("b");
    s.push_range("c");
    s.call("cudaGraphAddKernelNode", |s, _| s.node_created(1, n(1, 1), KERNEL));
    let t = joined(&s, true);
    let node = &t.graphs.nodes[1];
    assert_eq!(
        (t.capture_range_path(node), t.range_path(NONE), t.range_path(99)),
        ("a/b/c".into(), "".into(), "".into())
    );
    assert_eq!((t.capture_of_kernel(0), t.capture_of_memcpy(0), t.capture_of_memset(5)), (None, None, None));
    let mut lost = node.clone();
    lost.stack = 5..u32::MAX;
    assert_eq!(t.graphs.stack(&lost), &[] as &[u64]);
    // Unclosed ranges are open at any later time.
    assert_eq!(t.ranges.iter().filter(|r| !r.closed()).count(), 3);
}
