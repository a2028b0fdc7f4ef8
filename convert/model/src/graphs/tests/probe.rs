//! `graph_probe.cu`'s steps as the recorder reports them (the copies an instantiation, clone or update makes are
//! announced by their clone events only), joined.

use super::*;
use crate::graphs::{GraphEdge, NONE};

/// A stream capture into graph `g` (`cudaLaunchKernel` x3 and `cudaMemsetAsync`), the first two launches in
/// range L0 and the rest in L0/L1, like the probe's `capture()`. The first launch makes its node inside the
/// `cuLaunchKernel` it calls, and carries PyTorch op id `op`.
fn capture(s: &mut Scenario, g: u32, op: u64) {
    let g64 = g as u64;
    s.call("cudaStreamBeginCapture", |s, _| s.graph_created(g));
    s.push_range("L0");
    s.call("cudaLaunchKernel", |s, corr| {
        s.external.push((corr, op));
        s.call_in(true, "cuLaunchKernel", |s, _| s.node_created(g, n(g64, 0), KERNEL));
    });
    s.call("cudaLaunchKernel", |s, _| {
        s.node_created(g, n(g64, 1), KERNEL);
        s.dependency(g, n(g64, 1), n(g64, 0));
    });
    s.push_range("L1");
    s.call("cudaLaunchKernel", |s, _| {
        s.node_created(g, n(g64, 2), KERNEL);
        s.dependency(g, n(g64, 2), n(g64, 1));
    });
    s.call("cudaMemsetAsync", |s, _| {
        s.node_created(g, n(g64, 3), MEMSET);
        s.dependency(g, n(g64, 3), n(g64, 2));
    });
    s.pop_range();
    s.pop_range();
    s.call("cudaStreamEndCapture", |_, _| {});
}

/// `cudaGraphInstantiate` of `template` into `exec` (its copy graph) copying `nodes` nodes; CUDA also makes an
/// internal graph `internal` there.
fn instantiate(s: &mut Scenario, template: u32, exec: u32, internal: u32, nodes: u64) {
    s.call("cudaGraphInstantiate", |s, _| {
        s.graph_created(exec);
        for i in 0..nodes {
            s.node_cloned(exec, n(exec as u64, i), template, n(template as u64, i));
        }
        s.graph_created(internal);
        s.exec_created(template, exec);
    });
}

/// The kernels of the explicit graph's executable `exec` and of the capture's executable 7.
fn explicit_ops(exec: u64) -> [(u64, bool, &'static str); 2] {
    [(n(exec, 0), false, "_Z3addPff"), (n(exec, 1), false, "_Z5scalePff")]
}
const CAPTURE_OPS: [(u64, bool, &str); 4] = [
    ((7 << 32), false, "_Z3addPff"),
    ((7 << 32) | 1, false, "_Z5scalePff"),
    ((7 << 32) | 2, false, "_Z5shiftPff"),
    ((7 << 32) | 3, true, ""),
];

/// The probe's steps: explicit, instantiate twice, capture, instantiate, clone, instantiate the clone, a second
/// capture and `cudaGraphExecUpdate` of the capture's executable, `cudaGraphExecKernelNodeSetParams`; each
/// executable launched where the probe launches it.
pub(in crate::graphs) fn probe_scenario(t0: u64) -> Scenario {
    let mut s = Scenario::new(t0);
    s.call("cudaGraphCreate", |s, _| s.graph_created(1));
    s.call("cudaGraphAddKernelNode", |s, _| s.node_created(1, n(1, 0), KERNEL));
    s.call("cudaGraphAddKernelNode", |s, _| {
        s.node_created(1, n(1, 1), KERNEL);
        s.dependency(1, n(1, 1), n(1, 0));
    });
    instantiate(&mut s, 1, 2, 3, 2);
    instantiate(&mut s, 1, 4, 5, 2);
    s.launch(2, &explicit_ops(2));
    s.launch(4, &explicit_ops(4));
    capture(&mut s, 6, 1006);
    instantiate(&mut s, 6, 7, 8, 4);
    s.launch(7, &CAPTURE_OPS);
    s.launch(7, &CAPTURE_OPS);
    s.call("cudaGraphClone", |s, _| {
        s.graph_created(9);
        s.node_cloned(9, n(9, 0), 1, n(1, 0));
        s.node_cloned(9, n(9, 1), 1, n(1, 1));
        s.event(GraphEventKind::GraphCloned, |e| (e.graph, e.other_graph) = (9, 1));
    });
    instantiate(&mut s, 9, 10, 11, 2);
    s.launch(10, &explicit_ops(10));
    capture(&mut s, 12, 1012);
    // As CUDA 13.0 reported it: the kernels updated last to first, each with a parameter set; the memset, whose
    // parameters were the same, not at all.
    s.call("cudaGraphExecUpdate", |s, _| {
        for i in [2, 1, 0] {
            s.exec_node_updated(7, n(7, i), n(12, i));
            s.event(GraphEventKind::ExecNodeParamsSet, |e| (e.node, e.exec) = (n(7, i), 7));
        }
    });
    s.launch(7, &CAPTURE_OPS);
    s.call("cudaGraphExecKernelNodeSetParams", |s, _| {
        s.event(GraphEventKind::ExecNodeParamsSet, |e| {
            (e.node, e.other_graph, e.other_node, e.exec) = (n(2, 1), 1, n(1, 1), 2)
        })
    });
    s.launch(2, &explicit_ops(2));
    s
}

/// Each replayed op's node, kernels then memsets: launches of executables 2, 4, 7, 7, 10, 7 (updated), 2.
pub(in crate::graphs) fn expected_captures() -> Vec<Option<(u32, u64)>> {
    let explicit = [Some((1, n(1, 0))), Some((1, n(1, 1)))];
    let capture = |g: u64| [Some((g as u32, n(g, 0))), Some((g as u32, n(g, 1))), Some((g as u32, n(g, 2)))];
    let mut kernels = Vec::new();
    kernels.extend(explicit);
    kernels.extend(explicit);
    kernels.extend(capture(6));
    kernels.extend(capture(6));
    kernels.extend(explicit);
    kernels.extend(capture(12));
    kernels.extend(explicit);
    // The memset keeps the first capture's node: no update named it.
    kernels.extend([Some((6, n(6, 3))); 3]);
    kernels
}

#[test]
fn replays_trace_back_to_the_nodes_the_program_made() {
    let t = joined(&probe_scenario(1_000_000), true);
    assert_eq!((t.kernels.len(), t.memsets.len()), (17, 3));
    assert_eq!(captures(&t), expected_captures());
    assert_eq!(graph_counts(&t.stats), [0, 0, 0, 0]);
    assert_eq!(t.processes[0].stats, t.stats);
    // Before the update the capture's executable runs the first capture's kernels; after, the second's.
    let created = |i: usize| t.capture_of_kernel(i).unwrap().created;
    let update = t.apis.iter().find(|a| t.api_name(a) == "cudaGraphExecUpdate").unwrap();
    assert!(created(7) < update.start && created(14) < update.start && created(14) > created(7));
    assert!(t.launcher(t.kernels[14].corr()).unwrap().start > update.end);
}

#[test]
fn each_node_knows_its_call_range_stack_and_op_id() {
    let t = joined(&probe_scenario(1_000_000), true);
    let g = &t.graphs;
    let describe = |graph: u64, i: u64| {
        let node = &g.nodes[g.find_node(ProcId(0), n(graph, i)).unwrap() as usize];
        (t.capture_api_name(node).unwrap(), t.capture_range_path(node), node.node_type)
    };
    assert_eq!(describe(1, 0), ("cudaGraphAddKernelNode".to_string(), String::new(), KERNEL));
    // Made inside cuLaunchKernel inside cudaLaunchKernel: the outermost runtime call is the creating call.
    assert_eq!(describe(6, 0), ("cudaLaunchKernel".to_string(), "L0".to_string(), KERNEL));
    assert_eq!(describe(6, 2), ("cudaLaunchKernel".to_string(), "L0/L1".to_string(), KERNEL));
    assert_eq!(describe(12, 3), ("cudaMemsetAsync".to_string(), "L0/L1".to_string(), MEMSET));
    let node = |graph, i| &g.nodes[g.find_node(ProcId(0), n(graph, i)).unwrap() as usize];
    assert_eq!(g.stack(node(6, 2)), &[0x40_0602, 0x50_0000]);
    assert_eq!(g.stack(node(12, 0)), &[0x40_0c00, 0x50_0000]);
    assert_eq!((t.capture_external_ids(node(6, 0)), t.capture_external_ids(node(12, 0))), ((1006, 0), (1012, 0)));
    assert_eq!(t.capture_external_ids(node(6, 1)), (0, 0));
    // The two captures' L1 ranges are two ranges of one name.
    assert_ne!(node(6, 2).range, node(12, 2).range);
    assert_eq!(t.capture_range(node(1, 1)), None);
    // Copies are no nodes of their own; the internal graphs CUDA makes at instantiation hold none.
    assert_eq!((g.find_node(ProcId(0), n(7, 0)), g.nodes.len()), (None, 10));
}

#[test]
fn graphs_list_their_nodes_edges_clones_and_executables() {
    let t = joined(&probe_scenario(1_000_000), true);
    let g = &t.graphs;
    let ids: Vec<u32> = g.graphs.iter().map(|g| g.graph).collect();
    assert_eq!(ids, (1..=12).collect::<Vec<_>>());
    let sizes: Vec<(u32, usize, usize)> =
        g.graphs.iter().map(|x| (x.graph, g.nodes_of(x).len(), g.edges_of(x).len())).filter(|x| x.1 > 0).collect();
    assert_eq!(sizes, [(1, 2, 1), (6, 4, 3), (12, 4, 3)]);
    let six = g.graph(ProcId(0), 6).unwrap();
    let at = |i: u64| g.find_node(ProcId(0), n(6, i)).unwrap();
    let chain = [GraphEdge { from: at(0), to: at(1) }, GraphEdge { from: at(1), to: at(2) }];
    assert_eq!(g.edges_of(six), [chain[0], chain[1], GraphEdge { from: at(2), to: at(3) }]);
    assert_eq!(t.api_name(&t.apis[six.api as usize]), "cudaStreamBeginCapture");
    assert_eq!(t.api_name(&t.apis[g.graph(ProcId(0), 1).unwrap().api as usize]), "cudaGraphCreate");
    let clone = g.graph(ProcId(0), 9).unwrap();
    assert_eq!((clone.cloned_from, t.api_name(&t.apis[clone.api as usize])), (1, "cudaGraphClone".to_string()));
    let execs: Vec<(u32, u32)> = g.execs.iter().map(|e| (e.exec, e.template)).collect();
    assert_eq!(execs, [(2, 1), (4, 1), (7, 6), (10, 9)]);
    let one = g.graph(ProcId(0), 1).unwrap();
    assert_eq!(g.execs_of(one).map(|e| e.exec).collect::<Vec<_>>(), [2, 4]);
    let seven = g.exec(ProcId(0), 7).unwrap();
    assert_eq!(t.api_name(&t.apis[seven.api as usize]), "cudaGraphInstantiate");
    assert_eq!((g.exec(ProcId(0), 6), g.graph(ProcId(0), 13), g.graph(ProcId(1), 1)), (None, None, None));
    assert!(g.graphs.iter().all(|x| x.api != NONE && x.created != 0));
}

#[test]
fn the_update_applies_from_its_time_on() {
    let t = joined(&probe_scenario(1_000_000), true);
    let g = &t.graphs;
    let update = g.links.updates[&(ProcId(0), n(7, 2))][0].0;
    let origin = |t| g.origin_of(ProcId(0), n(7, 2), t).map(|i| g.nodes[i as usize].node);
    assert_eq!((origin(update - 1), origin(update), origin(u64::MAX)), (Some(n(6, 2)), Some(n(12, 2)), Some(n(12, 2))));
    // A clone's executable goes back through the clone to the explicit graph.
    assert_eq!(g.origin_of(ProcId(0), n(10, 1), 0).map(|i| g.nodes[i as usize].node), Some(n(1, 1)));
    assert_eq!(g.origin_of(ProcId(0), n(10, 2), 0), None);
}
