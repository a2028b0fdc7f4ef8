//! CUDA graphs in the Parquet tables, read by DuckDB (the Python package, installed by the test set-up): each
//! replayed kernel's and memset's capture range, creating call and node equal `stats --report graphs` and the
//! ranges `workloads/cuda/EXPECTED.md` documents for `graph_workload`; on the PyTorch `graph_layers` fixture, each
//! layer's replays are its eager kernels times the 20 replays.

use std::collections::BTreeMap;

use cutr_analyses::stats::{Section, StatsOptions, compute};
use cutr_model::{LoadOptions, load};
use cutr_tests::{python_tool, repo};
use serde_json::{Value, json};

fn duck(dir: &std::path::Path, sql: &[&str]) -> Vec<Value> {
    let mut args: Vec<&std::ffi::OsStr> = vec![dir.as_os_str()];
    args.extend(sql.iter().map(|s| std::ffi::OsStr::new(*s)));
    python_tool("duck.py", &args, &[]).as_array().unwrap().clone()
}

/// The tables of one fixture, written to a temporary directory (kept while the guard lives).
fn tables(name: &str) -> (cutr_model::Trace, tempfile::TempDir) {
    let t = load(&[repo().join("fixtures").join(name)], &LoadOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    cutr_tables::write_parquet(&t, dir.path()).unwrap();
    (t, dir)
}

#[test]
fn graph_layers_capture_ranges_in_duckdb_equal_stats() {
    let (t, dir) = tables("graph_layers.cutr");
    let s = compute(&t, &StatsOptions { sections: vec![Section::Graphs], ..Default::default() });
    let r = duck(
        dir.path(),
        &[
            "select capture_range, count(*), sum(duration_ns) from <kernels> where graph_id <> 0 group by 1",
            "select count(*), count(capture_range), count(distinct correlation), count(distinct capture_node_id) \
             from <kernels> where graph_id <> 0",
            // The eager forward's kernels of each block, against the replays of the same block.
            "select nvtx_range, count(*) filter (where graph_id = 0 and api_name <> 'cudaGraphLaunch'), \
             (select count(*) from <kernels> r where r.graph_id <> 0 and r.capture_range like '%/' || k.nvtx_range) \
             from <kernels> k where nvtx_range in ('attention', 'mlp') group by 1 order by 1",
            "select count(*) from <kernels> k join <graph_nodes> n on k.capture_node_id = n.node_id \
             and k.file = n.file and k.capture_range = n.nvtx_range and k.capture_api = n.api_name",
            "select count(*) from <kernels> k join <api_calls> a on k.capture_correlation = a.correlation \
             and k.capture_api = a.name where k.graph_id <> 0 and a.nvtx_range = split_part(k.capture_range, '/', -1)",
            "select nvtx_range, count(*), min(stack_frames), count(correlation) from <graph_nodes> group by 1 order by 1",
        ],
    );
    let rows: BTreeMap<String, (u64, u64)> = r[0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x[0].as_str().unwrap().to_string(), (x[1].as_u64().unwrap(), x[2].as_u64().unwrap())))
        .collect();
    let want: BTreeMap<String, (u64, u64)> =
        s.graphs.ranges.iter().map(|r| (r.path.clone(), (r.ops, r.gpu_ns))).collect();
    assert_eq!(rows, want);
    let ops: Vec<u64> = rows.values().map(|v| v.0).collect();
    assert_eq!(ops, [200, 100, 200, 100, 200, 100, 200, 100], "layer0..3 attention, mlp: 10 and 5 kernels x 20");
    assert_eq!(r[1]["rows"][0], json!([1200, 1200, 20, 60]), "every graph kernel traced back; 20 replays, 60 nodes");
    assert_eq!(r[2]["rows"], json!([["attention", 40, 800], ["mlp", 20, 400]]), "eager x 20");
    assert_eq!(r[3]["rows"][0][0], 1200, "each kernel's node, range and call in graph_nodes");
    assert_eq!(r[4]["rows"][0][0], 1200, "each kernel's creating call in api_calls, inside its block's range");
    let nodes = r[5]["rows"].as_array().unwrap();
    assert_eq!(nodes.len(), 8);
    for n in nodes {
        let per = if n[0].as_str().unwrap().ends_with("attention") { 10 } else { 5 };
        assert_eq!(n.as_array().unwrap()[1..], json!([per, 48, per]).as_array().unwrap()[..], "{n}");
    }
}

#[test]
fn graph_workload_ops_carry_their_documented_capture_ranges() {
    let (_t, dir) = tables("graph_workload.cutr");
    let r = duck(
        dir.path(),
        &[
            "select name, capture_range, count(*) from <kernels> where graph_id <> 0 group by all order by all",
            "select capture_range, capture_api, count(*) from <memset> group by all order by all",
            "select node_type, api_name, nvtx_range, count(*) from <graph_nodes> group by all order by all",
        ],
    );
    // workloads/cuda/EXPECTED.md: the update step's replays run the capture step's exec yet belong to update/U0.
    assert_eq!(
        r[0]["rows"],
        json!([
            ["capture_a(float*, float)", "capture/L0", 2],
            ["capture_a(float*, float)", "update/U0", 2],
            ["capture_b(float*, float)", "capture/L0", 2],
            ["capture_b(float*, float)", "update/U0", 2],
            ["capture_c(float*, float)", "capture/L0/L1", 2],
            ["capture_c(float*, float)", "update/U0", 2],
            ["explicit_a(float*, float)", "explicit/build", 3],
            ["explicit_b(float*, float)", "explicit/build", 3],
            ["stacks_kernel(float*, float)", "stacks", 1],
        ])
    );
    assert_eq!(
        r[1]["rows"],
        json!([
            ["capture/L0/L1", "cudaMemsetAsync", 2],
            ["explicit/build", "cudaGraphAddMemsetNode", 3],
            ["update/U0", "cudaMemsetAsync", 2],
            [null, null, 1],
        ])
    );
    assert_eq!(
        r[2]["rows"],
        json!([
            ["kernel", "cudaGraphAddKernelNode", "explicit/build", 2],
            ["kernel", "cudaLaunchKernel", "capture/L0", 2],
            ["kernel", "cudaLaunchKernel", "capture/L0/L1", 1],
            ["kernel", "cudaLaunchKernel", "stacks", 1],
            ["kernel", "cudaLaunchKernel", "update/U0", 3],
            ["memset", "cudaGraphAddMemsetNode", "explicit/build", 1],
            ["memset", "cudaMemsetAsync", "capture/L0/L1", 1],
            ["memset", "cudaMemsetAsync", "update/U0", 1],
        ])
    );
}
