//! `stats` on CUDA graphs as a user meets it: the graphs section in the default report only where a recording has
//! graphs, `--report graphs --symbols DIR` naming the function that made each node, the NVTX table's replay
//! columns, CSV rows of one shape, and `export`'s capture columns.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(rel).display().to_string()
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cupti-convert")).args(args).output().expect("cupti-convert runs")
}

fn ok(o: &Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn the_graphs_section_is_shown_where_there_are_graphs() {
    let w = fixture("graph_workload.cutr");
    let text = ok(&run(&["stats", &w, "--symbols", &fixture("bin")]));
    for want in [
        "\nCUDA graphs launched (GPU time per replay",
        "      62.6     16,544       4     4  16  4,136.0  3,920.0    3,904    4,800 graph 5 (template 4)\n",
        "      29.5         7,808   8     4 update/U0\n",
        "          1,152   1     1         stacks build_inner < build_middle < build_outer < main\n",
        "\nGraph ops traced back to the node the program made: 26 of 26 (not traced back 0, in files without graph \
         events 0). Nodes made: 12 (12 with a stack); graphs: 13; executables: 4\n",
        " GPU work (ns) GPU ops GPU span (ns) Graph replays (ns) Replayed ops Range\n",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
    // The section sits between the NVTX ranges and the utilization.
    let at = |s: &str| text.find(s).unwrap();
    assert!(
        at("\nNVTX ranges") < at("\nCUDA graphs launched") && at("\nCUDA graphs launched") < at("\nGPU utilization")
    );
    let without = ok(&run(&["stats", &w, "--report", "graphs"]));
    assert!(without.contains("\nCapture sites: none named (no symbols: --symbols DIR)\n"), "{without}");
    // A recording without graphs: no section by default (the NVTX table as it was); asked for, it says so.
    let p = fixture("pytorch_loop.cutr");
    let plain = ok(&run(&["stats", &p]));
    assert!(!plain.contains("CUDA graph") && !plain.contains("Replayed ops"), "{plain}");
    let asked = ok(&run(&["stats", &p, "--report", "graphs"]));
    assert!(asked.contains("\nCUDA graphs launched (GPU time per replay"), "{asked}");
    assert!(asked.contains("  (none)\n") && asked.contains(": 0 of 0 ("), "{asked}");
    let json: serde_json::Value = serde_json::from_str(&ok(&run(&["stats", &w, "--json"]))).unwrap();
    assert_eq!(json["sections"][4], "graphs");
    assert_eq!(
        json["graphs"]["ranges"][0],
        serde_json::json!({"path": "explicit/build", "nodes": 3, "ops": 9, "gpu_ns": 8736, "percent": json["graphs"]["ranges"][0]["percent"]})
    );
}

#[test]
fn graph_csv_rows_have_the_one_shape() {
    let csv = ok(&run(&["stats", &fixture("graph_workload.cutr"), "--csv", "--symbols", &fixture("bin")]));
    let columns = csv.lines().next().unwrap().split(',').count();
    assert_eq!(columns, 15);
    for l in csv.lines().filter(|l| l.starts_with("graph_") || l.starts_with("nvtx_replayed")) {
        // Quoted names hold commas of their own.
        let unquoted: String = l.split('"').step_by(2).collect();
        assert_eq!(unquoted.split(',').count(), columns, "{l}");
    }
    for want in [
        "\nnvtx_replayed,L1,,,,,,,,,,,4800,4,\n",
        "\ngraph_exec,graph 5 (template 4),4,16544,62.591,4136.0,3920.0,3904,4800,442.9,4,,,16,\n",
        "\ngraph_range,capture/L0/L1,2,4800,18.160,,,,,,,,4800,4,\n",
        "\ngraph_site,stacks | build_inner < build_middle < build_outer < main,1,,,,,,,,,,1152,1,\n",
        "\ngraph_join,ops traced back,26,,,,,,,,,,,,\n",
    ] {
        assert!(csv.contains(want), "{want:?} in\n{csv}");
    }
}

#[test]
fn export_writes_capture_columns_and_graph_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let out: PathBuf = dir.path().join("t");
    let o = run(&["export", &fixture("graph_layers.cutr"), "--parquet", &out.display().to_string()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(e.contains(", graph_nodes 60\n"), "{e}");
    assert!(out.join("graph_nodes.parquet").is_file());
}
