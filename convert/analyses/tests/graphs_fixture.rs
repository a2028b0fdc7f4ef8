//! `stats --report graphs,nvtx` on the H100 graph fixtures: `graph_workload` (hand-built graphs in known NVTX
//! ranges, `workloads/cuda/EXPECTED.md`), whose node stacks are named from the recorded binary
//! (`fixtures/bin/graph_workload`, build id checked), and `graph_layers` (a PyTorch 4-layer model run eagerly once,
//! captured with `torch.cuda.graph`, replayed 20 times), whose replays per layer must be the eager forward's
//! kernels of that layer times 20. Every figure is also recomputed from the model's rows.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cutr_analyses::stats::{self, Section, Stats, StatsOptions};
use cutr_model::{LoadOptions, Trace, load};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn trace(name: &str) -> Trace {
    load(&[fixtures().join(name)], &LoadOptions::default()).unwrap()
}

fn graph_stats(t: &Trace, symbol_dirs: Vec<PathBuf>) -> Stats {
    let opts = StatsOptions { sections: vec![Section::Nvtx, Section::Graphs], symbol_dirs, ..Default::default() };
    stats::compute(t, &opts)
}

/// The GPU time of every kernel, copy and memset with a graph id, summed from the rows.
fn graph_ns(t: &Trace) -> u64 {
    let k = t.kernels.iter().filter(|k| k.graph_id != 0).map(|k| k.duration());
    let c = t.memcpys.iter().filter(|m| m.graph_id != 0).map(|m| m.duration());
    let s = t.memsets.iter().filter(|m| m.graph_id != 0).map(|m| m.duration());
    k.chain(c).chain(s).sum()
}

/// NVTX rows by name: (GPU work launched inside, ops; graph replays captured inside, ops).
fn nvtx(s: &Stats) -> BTreeMap<&str, (u64, u64, u64, u64)> {
    s.nvtx
        .iter()
        .map(|r| (r.time.name.as_str(), (r.gpu_ns, r.gpu_ops, r.replayed_gpu_ns, r.replayed_gpu_ops)))
        .collect()
}

#[test]
fn graph_workload_replays_go_to_the_ranges_their_nodes_were_made_in() {
    let t = trace("graph_workload.cutr");
    let s = graph_stats(&t, Vec::new());
    let g = &s.graphs;
    // EXPECTED.md: 19 kernels and 7 memsets replayed, 11 kernel and 4 memset nodes made by the program (plus the
    // one of `stacks`, counted among the kernels), 4 instantiations.
    assert_eq!((g.ops, g.ops_traced_back, g.ops_not_traced_back, g.ops_without_graph_events), (26, 26, 0, 0));
    assert_eq!((g.nodes, g.nodes_with_stack, g.graphs, g.execs_made), (12, 12, 13, 4));
    let execs: Vec<_> = g
        .execs
        .iter()
        .map(|e| {
            let p = &e.per_replay;
            (p.name.as_str(), e.template, p.count, e.nodes, e.ops, p.total_ns, p.min_ns, p.median_ns, p.max_ns)
        })
        .collect();
    assert_eq!(
        execs,
        [
            // The capture step's exec: 2 launches, then updated to the update step's capture, 2 more.
            ("graph 5 (template 4)", Some(4), 4, 4, 16, 16_544, 3_904, 3_920.0, 4_800),
            ("graph 2 (template 1)", Some(1), 2, 3, 6, 5_856, 2_880, 2_928.0, 2_976),
            // The clone's exec: its template is a clone of graph 1, whose 3 nodes it counts.
            ("graph 8 (template 7)", Some(7), 1, 3, 3, 2_880, 2_880, 2_880.0, 2_880),
            ("graph 12 (template 11)", Some(11), 1, 1, 1, 1_152, 1_152, 1_152.0, 1_152),
        ]
    );
    let ranges: Vec<_> = g.ranges.iter().map(|r| (r.path.as_str(), r.nodes, r.ops, r.gpu_ns)).collect();
    assert_eq!(
        ranges,
        [
            ("explicit/build", 3, 9, 8_736),
            ("update/U0", 4, 8, 7_808),
            ("capture/L0/L1", 2, 4, 4_800),
            ("capture/L0", 2, 4, 3_936),
            ("stacks", 1, 1, 1_152),
        ]
    );
    let total: u64 = g.ranges.iter().map(|r| r.gpu_ns).sum();
    assert_eq!(total, graph_ns(&t));
    assert_eq!(g.execs.iter().map(|e| e.per_replay.total_ns).sum::<u64>(), total);
    // Each step's launches (launch-time attribution) are the same ops as the step's capture ranges.
    let n = nvtx(&s);
    assert_eq!(n["launch:explicit"].0 + n["launch:clone"].0, 8_736);
    assert_eq!(n["launch:capture"].0, 3_936 + 4_800);
    assert_eq!((n["launch:update"].0, n["launch:stacks"].0), (7_808, 1_152));
    // Capture-time attribution, nested ranges included; the launch ranges get none, the build ranges no launch.
    let replayed: BTreeMap<&str, (u64, u64)> = n.iter().map(|(k, v)| (*k, (v.2, v.3))).collect();
    let want: BTreeMap<&str, (u64, u64)> = [
        ("explicit", (8_736, 9)),
        ("build", (8_736, 9)),
        ("capture", (8_736, 8)),
        ("L0", (8_736, 8)),
        ("L1", (4_800, 4)),
        ("update", (7_808, 8)),
        ("U0", (7_808, 8)),
        ("stacks", (1_152, 1)),
        ("clone", (0, 0)),
        ("launch:explicit", (0, 0)),
        ("launch:capture", (0, 0)),
        ("launch:clone", (0, 0)),
        ("launch:update", (0, 0)),
        ("launch:stacks", (0, 0)),
    ]
    .into();
    assert_eq!(replayed, want);
    assert_eq!((n["build"].0, n["L0"].0, n["stacks"].0), (0, 0, 0), "capture launches run nothing");
}

#[test]
fn graph_workload_capture_sites_are_named_from_the_recorded_binary() {
    let t = trace("graph_workload.cutr");
    let named = graph_stats(&t, vec![fixtures().join("bin")]);
    let sites: Vec<_> = named
        .graphs
        .sites
        .iter()
        .map(|c| (c.range.as_str(), c.function.as_str(), c.callers.join(" < "), c.nodes, c.ops, c.gpu_ns))
        .collect();
    let chain = "capture_chain(CUstream_st*, float*, float, int, bool)";
    assert_eq!(
        sites,
        [
            // step_explicit was inlined into main: the nodes were made in main itself (EXPECTED.md's caveat).
            ("explicit/build", "main", String::new(), 3, 9, 8_736),
            ("update/U0", chain, "main".into(), 4, 8, 7_808),
            ("capture/L0/L1", chain, "main".into(), 2, 4, 4_800),
            ("capture/L0", chain, "main".into(), 2, 4, 3_936),
            // Three named host functions deep; the CUDA runtime linked into the program and nvcc's stub passed over.
            ("stacks", "build_inner", "build_middle < build_outer < main".into(), 1, 1, 1_152),
        ]
    );
    assert!(named.graphs.sites_named);
    let text = stats::render_text(&named, Default::default());
    assert!(text.contains(" stacks build_inner < build_middle < build_outer < main\n"), "{text}");
    // Without the binary (recorded under a /tmp path that is gone): where the frame is, and how to name it.
    let unnamed = graph_stats(&t, Vec::new());
    assert!(!unnamed.graphs.sites_named);
    let stacks = unnamed.graphs.sites.iter().find(|c| c.range == "stacks").unwrap();
    assert_eq!(
        (stacks.file.as_str(), stacks.unresolved, stacks.function.as_str()),
        ("graph_workload", Some("file not readable here"), "")
    );
    let text = stats::render_text(&unnamed, Default::default());
    assert!(text.contains("\nCapture sites: none named (no symbols: --symbols DIR)\n"), "{text}");
}

/// The eager forward's kernels per `layer{i}/{block}` (launch-time ranges), and the replays per capture range.
#[test]
fn graph_layers_replays_per_layer_are_the_eager_forward_times_twenty() {
    let t = trace("graph_layers.cutr");
    let s = graph_stats(&t, Vec::new());
    let g = &s.graphs;
    let mut eager: BTreeMap<String, u64> = BTreeMap::new();
    for k in t.kernels.iter().filter(|k| k.graph_id == 0) {
        let range = t.launcher_index(k.corr()).map_or(u32::MAX, |a| t.api_range[a as usize]);
        if let Some(block) = t.range_path(range).strip_prefix("phase:eager/forward/") {
            *eager.entry(block.to_string()).or_default() += 1;
        }
    }
    let replays: BTreeMap<String, u64> =
        g.ranges.iter().map(|r| (r.path.strip_prefix("phase:capture/forward/").unwrap().to_string(), r.ops)).collect();
    let times_20: BTreeMap<String, u64> = eager.iter().map(|(k, v)| (k.clone(), v * 20)).collect();
    assert_eq!(replays, times_20);
    assert_eq!((eager["layer2/attention"], eager["layer2/mlp"], eager.len()), (10, 5, 8));
    // Nodes per capture range: one per eager kernel.
    assert!(g.ranges.iter().all(|r| r.nodes * 20 == r.ops), "{:?}", g.ranges);
    let e = &g.execs[0];
    assert_eq!(g.execs.len(), 1);
    assert_eq!((e.exec, e.template, e.per_replay.count, e.nodes, e.ops), (2, Some(1), 20, 60, 1_200));
    assert_eq!((e.per_replay.total_ns, e.per_replay.min_ns, e.per_replay.max_ns), (22_308_346, 1_112_029, 1_117_911));
    assert_eq!(e.per_replay.total_ns, graph_ns(&t));
    let layer2: Vec<_> = g.ranges.iter().filter(|r| r.path.contains("layer2")).map(|r| (r.ops, r.gpu_ns)).collect();
    assert_eq!(layer2, [(100, 3_110_111), (200, 2_452_449)]);
    // NVTX: every replay counts for the ranges it was captured in, and was launched in `phase:replay`.
    let n = nvtx(&s);
    assert_eq!(n["phase:replay"], (22_308_346, 1_200, 0, 0));
    assert_eq!((n["forward"].2, n["forward"].3), (22_308_346, 1_200));
    assert_eq!((n["phase:capture"].2, n["phase:capture"].3), (22_308_346, 1_200));
    assert_eq!((n["layer2"].2, n["layer2"].3), (3_110_111 + 2_452_449, 300));
    assert_eq!((n["attention"].3, n["mlp"].3, n["phase:eager"].3), (800, 400, 0));
    // The eager forward's own launches are unchanged by the capture: 60 kernels.
    assert_eq!((n["phase:eager"].1, n["forward"].1), (60, 60));
}

/// A recording without graph events (format 1.4, before the recorder kept them): its graph ops are counted as
/// such, nothing is attributed at capture time, and the NVTX table keeps its columns.
#[test]
fn graph_ops_of_a_recording_without_graph_events_are_counted_not_traced() {
    let t = trace("cuda_workload.cutr");
    let s = stats::compute(&t, &StatsOptions::default());
    let g = &s.graphs;
    assert_eq!((g.ops, g.ops_traced_back, g.ops_not_traced_back, g.ops_without_graph_events), (15, 0, 0, 15));
    assert_eq!((g.nodes, g.execs.len(), g.ranges.len(), g.sites.len()), (0, 1, 0, 0));
    assert_eq!((g.execs[0].template, g.execs[0].nodes, g.execs[0].ops), (None, 0, 15));
    assert!(s.nvtx.iter().all(|r| r.replayed_gpu_ops == 0));
    let text = stats::render_text(&s, Default::default());
    assert!(!text.contains("Graph replays"), "{text}");
    assert!(text.contains("in files without graph events 15"), "{text}");
}
