//! CUDA graph replays tied to where they were captured (issue 33), read back from both viewers' files by
//! Perfetto's trace processor: on the real H100 recordings `fixtures/graph_layers.cutr` (a 4-layer PyTorch model
//! captured with `torch.cuda.graph` inside NVTX `phase:capture` > `forward` > `layer{i}` > `attention`/`mlp`,
//! replayed 20 times) and `fixtures/graph_workload.cutr` (graphs built, captured, cloned and updated by hand,
//! workloads/cuda/EXPECTED.md): every replayed op's `captured in` / `captured by` args, one arrow per node from
//! the call that made it to its first replay, and the capture-time ranges laid over each replay, nested.

use std::path::{Path, PathBuf};

use cutr_model::{LoadOptions, Trace, load};
use cutr_tests::{int, trace_processor};
use cutr_viewer_export::{ExportOptions, ExportSummary, Format, export};
use serde_json::{Value, json};

use cutr_tests::IMPORT_PROBLEMS as STATS;

fn fixture(name: &str) -> (PathBuf, Trace) {
    let path = cutr_tests::repo().join("fixtures").join(name);
    let t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    (path, t)
}

fn convert(t: &Trace, dir: &Path, format: Format) -> (PathBuf, ExportSummary) {
    let out = dir.join(format!("{format:?}"));
    let s = export(t, &out, &ExportOptions { format, ..Default::default() }).unwrap();
    (out, s)
}

/// The arg key prefix the trace processor gives each file's args.
fn prefix(format: Format) -> &'static str {
    match format {
        Format::Perfetto => "debug.",
        Format::Chrome => "args.",
    }
}

/// Per `replay of:` slice name: its depth, its parent's name and how many there are.
fn replay_slices() -> &'static str {
    "select s.name, s.depth, p.name, count(*) from slice s left join slice p on s.parent_id = p.id \
     where s.category = 'graph_replay_annotation' group by 1, 2, 3 order by 1"
}

/// The capture arrows (a launch's arrows join slices of one correlation id; a capture arrow, the call that made
/// a node and a replay of it): how many; how many end at the first replay of their node; how many start at the
/// call the replay's `captured by` names.
fn capture_flows(p: &str) -> String {
    format!(
        "select count(*), \
         sum(i.ts = (select min(k.ts) from slice k join args kn on kn.arg_set_id = k.arg_set_id \
             and kn.key = '{p}captured node id' where kn.int_value = n.int_value)), \
         sum(b.string_value = o.name || ' (corr ' || co.int_value || ')') \
         from flow f join slice o on f.slice_out = o.id join slice i on f.slice_in = i.id \
         join args co on co.arg_set_id = o.arg_set_id and co.key = '{p}correlation' \
         join args ci on ci.arg_set_id = i.arg_set_id and ci.key = '{p}correlation' \
         join args n on n.arg_set_id = i.arg_set_id and n.key = '{p}captured node id' \
         join args b on b.arg_set_id = i.arg_set_id and b.key = '{p}captured by' \
         where co.int_value != ci.int_value"
    )
}

/// The distinct nodes (index into `graphs.nodes`) the trace's kernels, copies and memsets were replayed from.
fn nodes_replayed(t: &Trace) -> usize {
    let g = &t.graphs;
    let mut nodes: Vec<u32> = [&g.kernel_capture, &g.memcpy_capture, &g.memset_capture]
        .into_iter()
        .flatten()
        .copied()
        .filter(|&n| n != cutr_model::graphs::NONE)
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes.len()
}

fn rows(r: &[Vec<Value>]) -> Vec<Value> {
    r.iter().map(|row| Value::Array(row.clone())).collect()
}

#[test]
fn graph_layers_replays_carry_their_capture_ranges_in_both_viewers() {
    let (_, t) = fixture("graph_layers.cutr");
    let replayed = t.graphs.kernel_capture.iter().filter(|&&n| n != cutr_model::graphs::NONE).count();
    assert_eq!(replayed, 1200, "20 replays of 60 kernel nodes");
    assert_eq!(nodes_replayed(&t), 60);
    assert!(t.graphs.nodes.iter().all(|n| n.api != cutr_model::graphs::NONE), "every node's call is known");
    // Each replay: the capture's ranges, one slice each, each inside its parent's.
    let mut want = vec![json!(["replay of: phase:capture", 0, null, 20])];
    want.push(json!(["replay of: phase:capture/forward", 1, "replay of: phase:capture", 20]));
    for i in 0..4 {
        let layer = format!("replay of: phase:capture/forward/layer{i}");
        want.push(json!([layer, 2, "replay of: phase:capture/forward", 20]));
        want.push(json!([format!("{layer}/attention"), 3, layer, 20]));
        want.push(json!([format!("{layer}/mlp"), 3, layer, 20]));
    }
    let dir = tempfile::tempdir().unwrap();
    for format in [Format::Perfetto, Format::Chrome] {
        let (out, s) = convert(&t, dir.path(), format);
        let p = prefix(format);
        let kernels = format!(
            "select count(*), sum(a.string_value like 'phase:capture/forward/layer%'), count(distinct a.string_value) \
             from slice s join args g on g.arg_set_id = s.arg_set_id and g.key = '{p}graph id' \
             left join args a on a.arg_set_id = s.arg_set_id and a.key = '{p}captured in' where s.category = 'kernel'"
        );
        let layers = "select count(*) from slice where name glob 'replay of: phase:capture/forward/layer[0-9]'";
        let r = trace_processor(
            &out,
            &[STATS, replay_slices(), layers, &kernels, &capture_flows(p), "select count(*) from flow"],
        );
        let what = format!("{format:?}");
        assert_eq!(r[0], Vec::<Vec<Value>>::new(), "{what}: import errors {:?}", r[0]);
        assert_eq!(rows(&r[1]), want, "{what}");
        assert_eq!(int(&r[2]), 20 * 4, "{what}: 20 replays x 4 layers");
        assert_eq!(rows(&r[3]), [json!([1200, 1200, 8])], "{what}: every replayed kernel, 8 paths");
        assert_eq!(rows(&r[4]), [json!([60, 60, 60])], "{what}: one arrow per node, to its first replay");
        assert_eq!(int(&r[5]) as u64, s.flows, "{what}: launch and capture arrows");
        assert_eq!(s.flows, 1828);
    }
}

#[test]
fn graph_workload_kernels_are_captured_where_expected_md_says() {
    let (_, t) = fixture("graph_workload.cutr");
    assert_eq!(nodes_replayed(&t), 12);
    // workloads/cuda/EXPECTED.md, graph_workload: per op name, its capture path and the call that made its node;
    // the update step's replays go to `update/U0` although they run the `capture` step's executable nodes.
    let want = [
        json!(["Memset (Device)", "capture/L0/L1", "cudaMemsetAsync (corr 142)", 2]),
        json!(["Memset (Device)", "explicit/build", "cudaGraphAddMemsetNode (corr 127)", 3]),
        json!(["Memset (Device)", "update/U0", "cudaMemsetAsync (corr 162)", 2]),
        json!(["capture_a(float*, float)", "capture/L0", "cudaLaunchKernel (corr 135)", 2]),
        json!(["capture_a(float*, float)", "update/U0", "cudaLaunchKernel (corr 157)", 2]),
        json!(["capture_b(float*, float)", "capture/L0", "cudaLaunchKernel (corr 138)", 2]),
        json!(["capture_b(float*, float)", "update/U0", "cudaLaunchKernel (corr 159)", 2]),
        json!(["capture_c(float*, float)", "capture/L0/L1", "cudaLaunchKernel (corr 141)", 2]),
        json!(["capture_c(float*, float)", "update/U0", "cudaLaunchKernel (corr 161)", 2]),
        json!(["explicit_a(float*, float)", "explicit/build", "cudaGraphAddKernelNode (corr 125)", 3]),
        json!(["explicit_b(float*, float)", "explicit/build", "cudaGraphAddKernelNode (corr 126)", 3]),
        json!(["stacks_kernel(float*, float)", "stacks", "cudaLaunchKernel (corr 172)", 1]),
    ];
    let want_replays = [
        json!(["replay of: capture", 0, null, 2]),
        json!(["replay of: capture/L0", 1, "replay of: capture", 2]),
        json!(["replay of: capture/L0/L1", 2, "replay of: capture/L0", 2]),
        json!(["replay of: explicit", 0, null, 3]),
        json!(["replay of: explicit/build", 1, "replay of: explicit", 3]),
        json!(["replay of: stacks", 0, null, 1]),
        json!(["replay of: update", 0, null, 2]),
        json!(["replay of: update/U0", 1, "replay of: update", 2]),
    ];
    let dir = tempfile::tempdir().unwrap();
    for format in [Format::Perfetto, Format::Chrome] {
        let (out, _) = convert(&t, dir.path(), format);
        let p = prefix(format);
        let captured = format!(
            "select s.name, a.string_value, b.string_value, count(*) from slice s \
             join args a on a.arg_set_id = s.arg_set_id and a.key = '{p}captured in' \
             join args b on b.arg_set_id = s.arg_set_id and b.key = '{p}captured by' group by 1, 2, 3 order by 1, 2"
        );
        let r = trace_processor(&out, &[STATS, &captured, replay_slices(), &capture_flows(p)]);
        let what = format!("{format:?}");
        assert_eq!(r[0], Vec::<Vec<Value>>::new(), "{what}: import errors {:?}", r[0]);
        assert_eq!(rows(&r[1]), want, "{what}");
        assert_eq!(rows(&r[2]), want_replays, "{what}");
        assert_eq!(rows(&r[3]), [json!([12, 12, 12])], "{what}");
    }
}

/// The Chrome JSON file itself (as HTA and chrome://tracing read it): the same args on the replayed kernels, the
/// capture arrows as `graph_capture` flow pairs, the replay slices on their GPU's row.
#[test]
fn graph_layers_chrome_json_parses_with_the_capture_args() {
    let (_, t) = fixture("graph_layers.cutr");
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = convert(&t, dir.path(), Format::Chrome);
    let doc: Value = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let graph_kernels: Vec<&Value> =
        events.iter().filter(|e| e["cat"] == "kernel" && e["args"]["graph id"].is_u64()).collect();
    assert_eq!(graph_kernels.len(), 1200);
    let in_layers =
        |e: &&&Value| e["args"]["captured in"].as_str().is_some_and(|s| s.starts_with("phase:capture/forward/layer"));
    assert_eq!(graph_kernels.iter().filter(in_layers).count(), 1200);
    let by = |e: &&&Value| e["args"]["captured by"].as_str().is_some_and(|s| s.contains(" (corr "));
    assert_eq!(graph_kernels.iter().filter(by).count(), 1200);
    assert!(graph_kernels.iter().all(|e| e["args"]["captured node id"].is_u64()));
    let flows = |ph: &str| events.iter().filter(|e| e["cat"] == "graph_capture" && e["ph"] == ph).count();
    assert_eq!((flows("s"), flows("f")), (60, 60));
    let replays = events.iter().filter(|e| e["cat"] == "graph_replay_annotation" && e["ph"] == "X").count();
    assert_eq!(replays, 20 * 14);
}
