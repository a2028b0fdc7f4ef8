//! CUDA graph replays tied to their capture (issue 33) on an in-memory trace: the `replay of:` slices and their
//! lanes, the capture arrows, and the Chrome JSON events and args, exact; and a hostile graph context that must
//! not panic.

use std::sync::Arc;

use cutr_format::SessionMetadata;
use cutr_format::meta::Device;
use cutr_model::graphs::{GraphNode, NONE};
use cutr_model::rows::{ApiCall, Kernel, NvtxRange};
use cutr_model::{NameId, ProcId, Process, Trace};
use cutr_viewer_export::timeline::graphs::capture_flow_id;
use cutr_viewer_export::timeline::{Src, TrackRole};
use cutr_viewer_export::{ExportOptions, Format, Timeline, export};
use serde_json::{Value, json};

const PID: u32 = 4242;
const TID: u32 = 11;
/// `cudaLaunchKernel_v7000`'s runtime cbid.
const LAUNCH_KERNEL: u32 = 211;

fn range(name: NameId, (start, end): (u64, u64), depth: u16, parent: u32) -> NvtxRange {
    let (proc, domain) = (ProcId(0), NameId::EMPTY);
    NvtxRange { proc, start, end, pid: PID, tid: TID, name, domain, id: 0, depth, parent }
}

fn api(start: u64, correlation: u32) -> ApiCall {
    let (proc, cbid) = (ProcId(0), LAUNCH_KERNEL);
    ApiCall { proc, start, end: start + 20, pid: PID, tid: TID, correlation, cbid, driver: false, return_value: 0 }
}

fn node(index: u64, api: u32, range: u32) -> GraphNode {
    let (proc, graph, created, stack) = (ProcId(0), 1, 0, 0..0);
    GraphNode { proc, graph, node: (1 << 32) | index, node_type: 0, created, tid: TID, api, range, stack }
}

fn kernel(name: NameId, (start, end): (u64, u64), stream: u32, correlation: u32) -> Kernel {
    Kernel { start, end, stream, correlation, name, graph_id: 3, ..Default::default() }
}

/// One process, one GPU. Captured on thread 11: range `fwd` [100, 900] holding `a` [200, 400] and `b`
/// [500, 700]; node 0 made in `a` (call corr 7), node 1 in `b` (corr 8), node 2 in `fwd` (corr 9). Two launches
/// (corr 100 and 101) each run node 0 on stream 1 and node 1 on stream 2 at the same time (graph branches), then
/// node 2; then a plain kernel.
fn trace() -> Trace {
    let mut t = Trace::default();
    let meta = SessionMetadata {
        pid: PID,
        devices: vec![Device { id: 0, name: "Test GPU".into(), ..Default::default() }],
        ..Default::default()
    };
    t.processes.push(Process {
        path: "graphs.cutr".into(),
        meta: Arc::new(meta),
        pid: PID,
        api_names: Default::default(),
        ..Default::default()
    });
    let [fwd, a, b, k] = ["fwd", "a", "b", "k"].map(|s| t.names.intern(s));
    t.ranges =
        vec![range(fwd, (100, 900), 0, NvtxRange::NO_PARENT), range(a, (200, 400), 1, 0), range(b, (500, 700), 1, 0)];
    t.apis = vec![api(250, 7), api(550, 8), api(800, 9)];
    t.kernels = vec![
        kernel(k, (1000, 3000), 1, 100),
        kernel(k, (2000, 4000), 2, 100),
        kernel(k, (4000, 4500), 1, 100),
        kernel(k, (11_000, 13_000), 1, 101),
        kernel(k, (12_000, 14_000), 2, 101),
        kernel(k, (14_000, 14_500), 1, 101),
        Kernel { start: 20_000, end: 21_000, stream: 1, correlation: 5, name: k, ..Default::default() },
    ];
    t.graphs.nodes = vec![node(0, 0, 1), node(1, 1, 2), node(2, 2, 0)];
    t.graphs.kernel_capture = vec![0, 1, 2, 0, 1, 2, NONE];
    t
}

#[test]
fn replays_show_their_capture_ranges_nested_with_branches_on_a_lane() {
    let t = trace();
    let tl = Timeline::build(&t, 1000);
    let replays: Vec<(&str, &str, u64, u64)> = tl
        .items
        .iter()
        .filter(|it| matches!(it.src(), Src::Replay(_)))
        .map(|it| {
            let Src::Replay(i) = it.src() else { unreachable!() };
            let track = tl.tracks[it.track as usize].name.as_str();
            (track, tl.name(&t, tl.graphs.replays[i as usize].name), it.start, it.end)
        })
        .collect();
    let (main, lane) = ("graph replays: captured NVTX ranges", "graph replays: captured NVTX ranges (overlapping 1)");
    assert_eq!(
        replays,
        [
            (main, "replay of: fwd", 1000, 4500),
            (main, "replay of: fwd/a", 1000, 3000),
            (main, "replay of: fwd", 11_000, 14_500),
            (main, "replay of: fwd/a", 11_000, 13_000),
            // `b` overlaps its sibling `a` (the branches ran at once): a lane, so that every track nests.
            (lane, "replay of: fwd/b", 2000, 4000),
            (lane, "replay of: fwd/b", 12_000, 14_000),
        ]
    );
    let track = tl.tracks.iter().find(|tr| tr.name == main).unwrap();
    assert_eq!(track.role, TrackRole::CapturedRanges { proc: ProcId(0), device: 0 });
    assert_eq!(tl.tracks[track.parent.unwrap() as usize].name, "GPU 0: Test GPU");
    // One capture arrow per node, from its call to its first replay; no launch arrow (no launch call recorded).
    assert_eq!(tl.flows.capture.by_api, [(0, 0), (1, 1), (2, 2)]);
    let mut first: Vec<(Src, u32)> = tl.flows.capture.first.iter().map(|(s, n)| (*s, *n)).collect();
    first.sort();
    assert_eq!(first, [(Src::Kernel(0), 0), (Src::Kernel(1), 1), (Src::Kernel(2), 2)]);
    assert_eq!(tl.flows.total, 3);
    assert_eq!(&*tl.graphs.captured_by[0], "cudaLaunchKernel (corr 7)");
    assert_eq!(tl.graphs.captured_in.iter().map(|s| &**s).collect::<Vec<_>>(), ["fwd/a", "fwd/b", "fwd"]);
}

#[test]
fn chrome_json_carries_capture_args_arrows_and_replay_rows() {
    let t = trace();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g.json");
    let s = export(&t, &out, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    assert_eq!(s.flows, 3);
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let of = |pred: &dyn Fn(&Value) -> bool| events.iter().filter(|e| pred(e)).cloned().collect::<Vec<Value>>();
    let replays: Vec<Value> = of(&|e| e["cat"] == "graph_replay_annotation")
        .iter()
        .map(|e| json!([e["name"], e["pid"], e["tid"], e["ts"], e["dur"], e["args"]]))
        .collect();
    let args = |corr| json!({"device": 0, "correlation": corr});
    assert_eq!(
        replays,
        [
            json!(["replay of: fwd", 0, 3_000_000, 1.0, 3.5, args(100)]),
            json!(["replay of: fwd/a", 0, 3_000_000, 1.0, 2.0, args(100)]),
            json!(["replay of: fwd", 0, 3_000_000, 11.0, 3.5, args(101)]),
            json!(["replay of: fwd/a", 0, 3_000_000, 11.0, 2.0, args(101)]),
            json!(["replay of: fwd/b", 0, 13_000_000, 2.0, 2.0, args(100)]),
            json!(["replay of: fwd/b", 0, 13_000_000, 12.0, 2.0, args(101)]),
        ]
    );
    // Every replayed kernel says where it was captured; the plain kernel says nothing of it.
    let mut kernels = of(&|e| e["cat"] == "kernel");
    kernels.sort_by(|x, y| x["ts"].as_f64().partial_cmp(&y["ts"].as_f64()).unwrap());
    let captured: Vec<Value> = kernels
        .iter()
        .map(|e| json!([e["ts"], e["args"]["captured in"], e["args"]["captured by"], e["args"]["captured node id"]]))
        .collect();
    let node = |i: u64| (1u64 << 32) | i;
    assert_eq!(
        captured,
        [
            json!([1.0, "fwd/a", "cudaLaunchKernel (corr 7)", node(0)]),
            json!([2.0, "fwd/b", "cudaLaunchKernel (corr 8)", node(1)]),
            json!([4.0, "fwd", "cudaLaunchKernel (corr 9)", node(2)]),
            json!([11.0, "fwd/a", "cudaLaunchKernel (corr 7)", node(0)]),
            json!([12.0, "fwd/b", "cudaLaunchKernel (corr 8)", node(1)]),
            json!([14.0, "fwd", "cudaLaunchKernel (corr 9)", node(2)]),
            json!([20.0, null, null, null]),
        ]
    );
    // The capture arrows: from each call on its thread to the node's first replay on its stream.
    let flows: Vec<Value> = of(&|e| e["cat"] == "graph_capture")
        .iter()
        .map(|e| json!([e["ph"], e["id"], e["pid"], e["tid"], e["ts"], e["name"], e["bp"]]))
        .collect();
    let id = |n| capture_flow_id(n);
    assert_eq!(
        flows,
        [
            json!(["s", id(0), PID, TID, 0.25, "graph_capture", null]),
            json!(["s", id(1), PID, TID, 0.55, "graph_capture", null]),
            json!(["s", id(2), PID, TID, 0.8, "graph_capture", null]),
            json!(["f", id(0), 0, 1, 1.0, "graph_capture", "e"]),
            json!(["f", id(2), 0, 1, 4.0, "graph_capture", "e"]),
            json!(["f", id(1), 0, 2, 2.0, "graph_capture", "e"]),
        ]
    );
    let rows: Vec<Value> = of(&|e| e["name"] == "thread_name" && e["pid"] == 0 && e["tid"].as_i64() > Some(1 << 20))
        .iter()
        .map(|e| json!([e["tid"], e["args"]["name"]]))
        .collect();
    assert_eq!(
        rows,
        [
            json!([3_000_000, "graph replays: captured NVTX ranges"]),
            json!([13_000_000, "graph replays: captured NVTX ranges (overlapping 1)"])
        ]
    );
}

/// A hostile graph context: ranges whose parents form a cycle or point past the table, nodes naming calls and
/// ranges that do not exist, captures naming nodes that do not exist, more capture entries than rows. Both outputs are written; only what can
/// be traced is drawn.
#[test]
fn a_hostile_graph_context_never_panics() {
    let mut t = trace();
    t.ranges[0].parent = 2; // fwd <- b <- fwd: a cycle
    t.ranges[1].parent = 99;
    t.graphs.nodes.push(node(3, 12_345, 77));
    // More entries than rows, and entries for a table with no rows.
    t.graphs.kernel_capture = vec![0, 1, 3, 99, NONE - 1, 2, NONE, 0, 1];
    t.graphs.memset_capture = vec![0, 1];
    let tl = Timeline::build(&t, 2);
    let names: Vec<&str> = tl.graphs.replays.iter().map(|r| tl.name(&t, r.name)).collect();
    // Kernel 0: `a` (its parent is past the table); kernel 1: `b`, then `fwd` (whose parent comes after it, so the
    // walk stops); kernel 5: `fwd`.
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(tl.flows.capture.by_api, [(0, 0), (1, 1), (2, 2)]);
    let dir = tempfile::tempdir().unwrap();
    for format in [Format::Perfetto, Format::Chrome] {
        export(&t, &dir.path().join("h"), &ExportOptions { format, shard_slices: 2, ..Default::default() }).unwrap();
    }
}
