//! The graph fixtures recorded on an H100 with the graph capture context on (issue 33): every replayed kernel and
//! memset traced back to where its node was made, checked against what the programs did.
//! - `graph_workload.cutr` (`workloads/cuda/graph_workload.cu`, `workloads/cuda/EXPECTED.md`): explicit nodes,
//!   stream capture in nested ranges, a clone, an executable update, each launched inside a range of its own.
//! - `graph_layers.cutr` (`workloads/pytorch/graph_layers.py`): a PyTorch model run once eager, captured with
//!   `torch.cuda.graph` and replayed 20 times; each replayed kernel must carry the layer that launched the same
//!   kernel in the eager run.

use cutr_model::{LoadOptions, Trace, load};

fn trace(name: &str) -> Trace {
    load(&[format!("../../fixtures/{name}").into()], &LoadOptions::default()).unwrap()
}

fn no_failed_graph_joins(t: &Trace) {
    let s = &t.stats;
    assert_eq!(
        (s.graph_ops_without_capture, s.graph_events_lost, s.graph_nodes_without_api, s.graph_events_unjoined),
        (0, 0, 0, 0)
    );
    assert_eq!(s.graph_kernels_without_launch, 0);
}

/// (kernel, capture-time range path, creating call, launch-time range path) of every replayed kernel, in time order.
fn replayed_kernels(t: &Trace) -> Vec<(String, String, String, String)> {
    t.kernels
        .iter()
        .enumerate()
        .filter(|(_, k)| k.graph_id != 0)
        .map(|(i, k)| {
            let node = t.capture_of_kernel(i).expect("every replayed kernel is traced back");
            let launch = t.launcher_index(k.corr()).expect("launched by cudaGraphLaunch");
            (
                t.kernel_name(k).split('(').next().unwrap().to_string(),
                t.capture_range_path(node),
                t.capture_api_name(node).unwrap(),
                t.range_path(t.api_range[launch as usize]),
            )
        })
        .collect()
}

#[test]
fn hand_built_graphs_keep_where_each_node_was_made_through_clone_and_update() {
    let t = trace("graph_workload.cutr");
    no_failed_graph_joins(&t);
    let got = replayed_kernels(&t);
    let row = |k: &str, cap: &str, call: &str, launch: &str| (k.into(), cap.into(), call.into(), launch.into());
    let explicit = |k| row(k, "explicit/build", "cudaGraphAddKernelNode", "launch:explicit");
    let captured = |k, cap, launch| row(k, cap, "cudaLaunchKernel", launch);
    let mut want = Vec::new();
    for _ in 0..2 {
        want.extend([explicit("explicit_a"), explicit("explicit_b")]);
    }
    for _ in 0..2 {
        want.push(captured("capture_a", "capture/L0", "launch:capture"));
        want.push(captured("capture_b", "capture/L0", "launch:capture"));
        want.push(captured("capture_c", "capture/L0/L1", "launch:capture"));
    }
    // The clone's nodes are copies of the explicit graph's: made in explicit/build, launched in launch:clone.
    want.push(row("explicit_a", "explicit/build", "cudaGraphAddKernelNode", "launch:clone"));
    want.push(row("explicit_b", "explicit/build", "cudaGraphAddKernelNode", "launch:clone"));
    // The capture step's executable, updated from the second capture: its nodes now stand for update/U0's.
    for _ in 0..2 {
        for k in ["capture_a", "capture_b", "capture_c"] {
            want.push(captured(k, "update/U0", "launch:update"));
        }
    }
    want.push(captured("stacks_kernel", "stacks", "launch:stacks"));
    assert_eq!(got, want);

    // The memsets: 7 replayed, each with its node's range; the plain cudaMemset has none.
    let memsets: Vec<(String, String)> = (0..t.memsets.len())
        .filter(|&i| t.memsets[i].graph_id != 0)
        .map(|i| {
            let n = t.capture_of_memset(i).unwrap();
            (t.capture_range_path(n), t.capture_api_name(n).unwrap())
        })
        .collect();
    let m = |cap: &str, call: &str| (cap.to_string(), call.to_string());
    assert_eq!(
        memsets,
        [
            m("explicit/build", "cudaGraphAddMemsetNode"),
            m("explicit/build", "cudaGraphAddMemsetNode"),
            m("capture/L0/L1", "cudaMemsetAsync"),
            m("capture/L0/L1", "cudaMemsetAsync"),
            m("explicit/build", "cudaGraphAddMemsetNode"),
            m("update/U0", "cudaMemsetAsync"),
            m("update/U0", "cudaMemsetAsync"),
        ]
    );
    assert_eq!(t.memsets.iter().filter(|m| m.graph_id == 0).count(), 1);

    // Structure: 5 graphs the program made (11 kernel and 4 memset nodes), 4 executables; the update's source
    // graph is listed with its own nodes.
    let g = &t.graphs;
    let made: Vec<usize> = g.graphs.iter().map(|gr| g.nodes_of(gr).len()).filter(|&n| n > 0).collect();
    assert_eq!(made, [3, 4, 4, 1]);
    assert_eq!(g.nodes.len(), 12);
    assert_eq!((g.execs.len(), g.nodes.iter().filter(|n| n.node_type == 2).count()), (4, 3));
    // Every node the program made has its creating call's stack (through libcupti and libcuda into the program).
    let depths: Vec<usize> = g.nodes.iter().map(|n| g.stack(n).len()).collect();
    assert_eq!(depths, [17, 17, 18, 21, 21, 21, 20, 21, 21, 21, 20, 23], "{:?}", g.nodes);
    // This recording's stacks end with the outermost frame's 0 address (the recorder that made it kept it; it now
    // stops there); every other frame lies in a recorded mapping.
    let mappings = &t.processes[0].meta.mappings;
    for n in &g.nodes {
        let (last, rest) = g.stack(n).split_last().unwrap();
        assert_eq!(*last, 0);
        assert!(rest.iter().all(|&ip| mappings.iter().any(|m| (m.start..m.end).contains(&ip))), "{rest:x?}");
    }
}

/// A replayed kernel: start, name, capture-time layer.
type Replayed = (u64, String, String);

#[test]
fn every_replayed_kernel_carries_the_layer_that_launched_it_eagerly() {
    let t = trace("graph_layers.cutr");
    no_failed_graph_joins(&t);
    // The eager forward: kernels launched inside phase:eager, with the range their launch was in.
    let eager: Vec<(String, String)> = t
        .kernels
        .iter()
        .filter(|k| k.graph_id == 0)
        .filter_map(|k| {
            let launch = t.launcher_index(k.corr())?;
            let path = t.range_path(t.api_range[launch as usize]);
            let layer = path.strip_prefix("phase:eager/")?;
            Some((t.kernel_name(k).to_string(), layer.to_string()))
        })
        .collect();
    assert_eq!(eager.len(), 60, "4 layers of 15 kernels");
    assert_eq!(eager.iter().filter(|(_, p)| p.ends_with("/attention")).count(), 40);
    assert_eq!(eager.iter().filter(|(_, p)| p == "forward/layer2/mlp").count(), 5);

    // Each of the 20 replays: the same kernels in the same order, each with the eager run's layer, from capture.
    let mut replays: Vec<(u32, Vec<Replayed>)> = Vec::new();
    for (i, k) in t.kernels.iter().enumerate().filter(|(_, k)| k.graph_id != 0) {
        let node = t.capture_of_kernel(i).expect("traced back");
        let path = t.capture_range_path(node);
        let layer = path.strip_prefix("phase:capture/").expect("captured in phase:capture").to_string();
        let entry = (k.start, t.kernel_name(k).to_string(), layer);
        match replays.iter_mut().find(|(c, _)| *c == k.correlation) {
            Some((_, v)) => v.push(entry),
            None => replays.push((k.correlation, vec![entry])),
        }
    }
    assert_eq!(replays.len(), 20);
    for (corr, mut kernels) in replays {
        kernels.sort();
        let seq: Vec<(String, String)> = kernels.into_iter().map(|(_, n, l)| (n, l)).collect();
        assert_eq!(seq, eager, "replay {corr}");
    }
}

#[test]
fn torch_compile_graphs_are_traced_back_to_their_capture_calls() {
    let t = trace("graph_compile.cutr");
    no_failed_graph_joins(&t);
    let replayed: Vec<usize> = (0..t.kernels.len()).filter(|&i| t.kernels[i].graph_id != 0).collect();
    let launches: std::collections::BTreeSet<u32> = replayed.iter().map(|&i| t.kernels[i].correlation).collect();
    // PyTorch's cudagraph trees: 9 executables of 64 nodes in all (one per piece between NVTX calls), 32 launches.
    assert_eq!((replayed.len(), launches.len(), t.graphs.execs.len(), t.graphs.nodes.len()), (256, 32, 9, 64));
    // Inductor's kernels are launched with cuLaunchKernel (Triton) and cudaLaunchKernelExC (cuBLAS) during capture;
    // the NVTX calls split the compiled code, so each piece's ranges are the layer's.
    let mut calls: Vec<String> =
        replayed.iter().map(|&i| t.capture_api_name(t.capture_of_kernel(i).unwrap()).unwrap()).collect();
    calls.sort();
    calls.dedup();
    assert_eq!(calls, ["cuLaunchKernel", "cudaLaunchKernelExC"]);
    for &i in &replayed {
        let path = t.capture_range_path(t.capture_of_kernel(i).unwrap());
        assert!(
            path.starts_with("phase:compile/") && (path.ends_with("/attention") || path.ends_with("/mlp")),
            "{path}"
        );
    }
}
