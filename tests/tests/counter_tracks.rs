//! Counter tracks as a viewer shows them, on the H100 fixtures: every counter track has a unit, a GPU's metric
//! tracks have short names (the model's name of each series is kept as the track's description) and sit under
//! one `GPU metrics` track in a fixed order, and the Chrome JSON counters carry the short name with the unit.
//! Read back by Perfetto's own schema (`proto_check.py --tracks`: the v59.1 protos know every field we write, the
//! unit, description and ordering fields that the v20 trace processor skips) and by the v20 trace processor
//! (names, GPUs and sample counts).

use std::path::Path;

use cutr_model::{LoadOptions, Trace, load};
use cutr_tests::{python_tool, trace_processor};
use cutr_viewer_export::{ExportOptions, Format, export};
use serde_json::{Value, json};

use cutr_tests::IMPORT_PROBLEMS as STATS;

fn fixture(name: &str) -> Trace {
    load(&[cutr_tests::repo().join("fixtures").join(name)], &LoadOptions::default()).unwrap()
}

/// Every track descriptor of a Perfetto trace, as Perfetto's v59.1 schema reads it (after checking that it
/// knows every field).
fn descriptors(t: &Trace, dir: &Path) -> (std::path::PathBuf, Vec<Value>) {
    let pf = dir.join("c.pftrace");
    export(t, &pf, &ExportOptions::default()).unwrap();
    let p = python_tool("proto_check.py", &[std::ffi::OsStr::new("--tracks"), pf.as_os_str()], &[]);
    assert_eq!(p["unknown_fields"], 0, "{p}");
    (pf, p["tracks"].as_array().unwrap().clone())
}

/// A counter descriptor's unit: Perfetto's built-in one, else its name.
fn unit(d: &Value) -> &str {
    let c = &d["counter"];
    c["unit"].as_str().or(c["unit_name"].as_str()).unwrap_or_default()
}

/// The children of each `GPU metrics` track, in file order, as (GPU, name, unit, rank); also checks that the
/// block is under its GPU and orders its children explicitly.
fn metric_blocks(tracks: &[Value]) -> Vec<(String, String, String, i64)> {
    let by_uuid = |u: &Value| tracks.iter().find(|d| d["uuid"] == *u).unwrap();
    let mut out = Vec::new();
    for d in tracks.iter().filter(|d| d.get("counter").is_some() && d.get("parent_uuid").is_some()) {
        let parent = by_uuid(&d["parent_uuid"]);
        if parent["name"] != "GPU metrics" {
            continue;
        }
        assert_eq!(parent["child_ordering"], "EXPLICIT");
        let gpu = by_uuid(&parent["parent_uuid"])["name"].as_str().unwrap().to_string();
        let rank = d["sibling_order_rank"].as_i64().unwrap();
        out.push((gpu, d["name"].as_str().unwrap().to_string(), unit(d).to_string(), rank));
    }
    out
}

/// The short name and unit of every metric of the counter workload (PM sampling's default set on an H100, NVML),
/// in the order of the block: utilization, SM, memory, interconnect, power and clocks.
const H100_METRICS: [(&str, &str); 21] = [
    ("GR Active", "%"),
    ("GPU Utilization", "%"),
    ("Memory Utilization", "%"),
    ("SM Active", "%"),
    ("SM Issue", "%"),
    ("Tensor Active", "%"),
    ("Unused Warps, Active SMs", "%"),
    ("Unused Warps, Idle SMs", "%"),
    ("DRAM Read Bandwidth", "B/s"),
    ("DRAM Write Bandwidth", "B/s"),
    ("PCIe Read", "B/s"),
    ("PCIe Write", "B/s"),
    ("PCIe RX", "B/s"),
    ("PCIe TX", "B/s"),
    ("GPU Power", "W"),
    ("GPU Temperature", "°C"),
    ("SM Clock", "MHz"),
    ("Memory Clock", "MHz"),
    ("Throttled: Power Cap", "0/1"),
    ("Throttled: Thermal", "0/1"),
    ("Throttled: HW Slowdown", "0/1"),
];

/// `fixtures/counter_workload.cutr`: all 22 counter tracks have a unit (21 metrics and device memory in use,
/// which the issue found with one unit among them); the 21 metrics are under `GPU metrics` below GPU 0, in the
/// stated order, each with its series' model name as description; the trace processor finds every sample of each
/// under the GPU, and the one built-in unit among them.
#[test]
fn every_counter_track_has_a_unit_and_the_metrics_form_one_ordered_block() {
    let dir = tempfile::tempdir().unwrap();
    let t = fixture("counter_workload.cutr");
    let (pf, tracks) = descriptors(&t, dir.path());
    let counters: Vec<(&str, &str)> =
        tracks.iter().filter(|d| d.get("counter").is_some()).map(|d| (d["name"].as_str().unwrap(), unit(d))).collect();
    let mut want = vec![("device memory in use (bytes)", "UNIT_SIZE_BYTES")];
    want.extend(H100_METRICS);
    assert_eq!(counters, want);

    let gpu = "GPU 0: NVIDIA H100 80GB HBM3";
    let block = metric_blocks(&tracks);
    let expected: Vec<(String, String, String, i64)> =
        H100_METRICS.iter().zip(0..).map(|(&(n, u), rank)| (gpu.into(), n.into(), u.into(), rank)).collect();
    assert_eq!(block, expected);
    // The description of each metric track is its series as `stats` and Parquet name it.
    let descriptions: Vec<(&str, &str)> = tracks
        .iter()
        .filter(|d| d.get("description").is_some())
        .map(|d| (d["name"].as_str().unwrap(), d["description"].as_str().unwrap()))
        .collect();
    assert_eq!(descriptions.len(), 21);
    assert_eq!(
        descriptions[4],
        ("SM Issue", "PM: sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed (percent)")
    );
    assert_eq!(descriptions[8], ("DRAM Read Bandwidth", "PM: dram__bytes_read.sum.per_second (byte/second)"));
    assert_eq!(descriptions[14], ("GPU Power", "power (W)"));
    let mut series: Vec<&str> = t.counters.iter().map(|c| t.names.get(c.series)).collect();
    series.sort_unstable();
    series.dedup();
    let mut described: Vec<&str> = descriptions.iter().map(|d| d.1).collect();
    described.sort_unstable();
    assert_eq!(described, series);

    // The v20 trace processor: each track under the GPU with every sample (PM 25,799 each, NVML 304 readings, the
    // PCIe rates one and two fewer: the first readings give no rate), in the block's order.
    let r = trace_processor(
        &pf,
        &[
            STATS,
            "select t.name, p.name, count(*) from counter c join process_counter_track t on c.track_id = t.id \
             join process p using (upid) group by t.id order by t.id",
            "select p.name from process_track t join process p using (upid) where t.name = 'GPU metrics'",
            // v20 keeps a counter's built-in unit, not a unit's name (HEAD keeps both): bytes are seen here.
            "select name, unit from counter_track where unit is not null",
        ],
    );
    assert_eq!(r[0], Vec::<Vec<Value>>::new(), "clean import");
    let mut rows = vec![json!(["device memory in use (bytes)", gpu, 6])];
    for (name, _) in H100_METRICS {
        let n = match name {
            "PCIe RX" => 303,
            "PCIe TX" => 302,
            "GPU Utilization" | "Memory Utilization" | "GPU Power" | "GPU Temperature" | "SM Clock"
            | "Memory Clock" => 304,
            _ if name.starts_with("Throttled") => 304,
            _ => 25_799,
        };
        rows.push(json!([name, gpu, n]));
    }
    assert_eq!(json!(r[1]), json!(rows));
    assert_eq!(json!(r[2]), json!([[gpu]]));
    assert_eq!(json!(r[3]), json!([["device memory in use (bytes)", "bytes"]]));
}

/// Two recordings of the same metrics show them in the same order, whatever order their samples came in: on two
/// H200s (`fixtures/counter_two_gpus.cutr`), each GPU's block is the H100 fixture's with NVLink's four tracks
/// (PM sampling's raw link bytes, NVML's payload) after PCIe.
#[test]
fn the_order_of_the_block_is_the_same_in_every_recording() {
    let dir = tempfile::tempdir().unwrap();
    let (_, tracks) = descriptors(&fixture("counter_two_gpus.cutr"), dir.path());
    let mut want: Vec<(&str, &str)> = H100_METRICS.to_vec();
    let nvlink = [
        ("NVLink RX Bandwidth", "B/s"),
        ("NVLink TX Bandwidth", "B/s"),
        ("NVLink RX Data", "B/s"),
        ("NVLink TX Data", "B/s"),
    ];
    want.splice(14..14, nvlink);
    let block = metric_blocks(&tracks);
    for gpu in ["GPU 0: NVIDIA H200", "GPU 1: NVIDIA H200"] {
        let got: Vec<(&str, &str, i64)> =
            block.iter().filter(|b| b.0 == gpu).map(|b| (b.1.as_str(), b.2.as_str(), b.3)).collect();
        let expected: Vec<(&str, &str, i64)> = want.iter().zip(0..).map(|(&(n, u), rank)| (n, u, rank)).collect();
        assert_eq!(got, expected, "{gpu}");
    }
}

/// PC sampling's stall rates (`fixtures/source_workload_pcs.cutr`): a `stall REASON` track per reason in
/// samples/ms, by name, under the GPU's metrics block; the trace processor reads each one's 4 points.
#[test]
fn stall_rates_are_named_by_their_reason_with_their_unit() {
    let dir = tempfile::tempdir().unwrap();
    let (pf, tracks) = descriptors(&fixture("source_workload_pcs.cutr"), dir.path());
    let reasons = [
        "branch_resolving",
        "dispatch_stall",
        "drain",
        "imc_miss",
        "long_scoreboard",
        "math_pipe_throttle",
        "no_instructions",
        "not_selected",
        "selected",
        "short_scoreboard",
        "wait",
    ];
    let gpu = "GPU 0: NVIDIA H100 80GB HBM3";
    let expected: Vec<(String, String, String, i64)> = reasons
        .iter()
        .zip(0..)
        .map(|(r, rank)| (gpu.to_string(), format!("stall {r}"), "samples/ms".to_string(), rank))
        .collect();
    assert_eq!(metric_blocks(&tracks), expected);
    let units: Vec<&str> = tracks.iter().filter(|d| d.get("counter").is_some()).map(unit).collect();
    assert_eq!(units.len(), 12, "the stall rates and device memory in use");
    assert!(units.iter().all(|u| !u.is_empty()), "every counter track has a unit: {units:?}");
    let r = trace_processor(
        &pf,
        &[
            STATS,
            "select t.name, count(*) from counter c join counter_track t on c.track_id = t.id \
             where t.name like 'stall %' group by t.id order by t.id",
        ],
    );
    assert_eq!(r[0], Vec::<Vec<Value>>::new(), "clean import");
    // The points of each rate (the starts and ends of the runs of the kernels that stall on it, issue 31 item 1):
    // 18 where all three sampled kernels do (3 runs each), 12 for two, 6 for math_pipe_throttle (fma_chain only).
    let points = [18, 12, 18, 18, 12, 6, 18, 12, 18, 18, 18];
    let rows: Vec<Value> = reasons.iter().zip(points).map(|(r, n)| json!([format!("stall {r}"), n])).collect();
    assert_eq!(json!(r[1]), json!(rows));
}

/// The Chrome JSON: each metric counter is named by its short name with the unit, its one series by the model's
/// name of it; Perfetto's JSON importer names the track `<name> <series>` and reads every sample.
#[test]
fn chrome_json_counters_carry_the_short_name_with_the_unit() {
    let dir = tempfile::tempdir().unwrap();
    let t = fixture("counter_workload.cutr");
    let json = dir.path().join("c.json");
    export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let mut names: Vec<(String, String)> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| {
            (e["name"].as_str().unwrap().to_string(), e["args"].as_object().unwrap().keys().next().unwrap().clone())
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 22);
    let find = |n: &str| names.iter().find(|p| p.0 == n).map(|p| p.1.as_str());
    assert_eq!(
        find("SM Issue (%)"),
        Some("PM: sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed (percent)")
    );
    assert_eq!(find("GPU Temperature (°C)"), Some("temperature (C)"));
    assert_eq!(find("Throttled: Thermal (0/1)"), Some("throttled: thermal"));
    assert_eq!(find("device memory in use"), Some("bytes"));
    let r = trace_processor(
        &json,
        &[
            STATS,
            "select t.name, count(*) from counter c join counter_track t on c.track_id = t.id \
             where t.name like 'SM Issue%' or t.name like 'GPU Power%' group by t.id order by t.name",
        ],
    );
    assert_eq!(r[0], Vec::<Vec<Value>>::new(), "clean import");
    assert_eq!(
        json!(r[1]),
        json!([
            ["GPU Power (W) power (W)", 304],
            ["SM Issue (%) PM: sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed (percent)", 25_799]
        ])
    );
}
