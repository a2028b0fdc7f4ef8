//! PC samples in the viewers: a recording with PC samples shows each sampled kernel's samples, hottest lines and
//! stall reasons on its slices, and a stall-rate counter track per reason, in both outputs (read by Perfetto's
//! trace processor). Where the rates are drawn is `stall_rates.rs`'s.

use std::collections::BTreeMap;

use cutr_model::{LoadOptions, load};
use cutr_tests::trace_processor;
use cutr_viewer_export::{ExportOptions, Format, export};

use cutr_tests::IMPORT_PROBLEMS as STATS;

/// A recording with PC samples (`fixtures/source_workload_pcs.cutr`, H100): each sampled kernel's slices carry its
/// samples, hottest lines and stall reasons, and each stall reason of the GPU is a counter track of samples per ms
/// whose integral over time is that reason's sample count (drawn over the sampled kernels' executions: a point at
/// each start and end, `stall_rates.rs` checks where); Perfetto's trace processor reads both from our protobuf,
/// and the Chrome JSON has the same args.
#[test]
fn pc_samples_reach_both_viewers_as_kernel_args_and_stall_counters() {
    let dir = tempfile::tempdir().unwrap();
    let src = cutr_tests::repo().join("fixtures/source_workload_pcs.cutr");
    let mut t = load(std::slice::from_ref(&src), &LoadOptions::default()).unwrap();
    let reader = cutr_format::Reader::open(&src).unwrap();
    assert_eq!(cutr_analyses::source::annotate(&mut t, &[&reader]), Vec::<String>::new());
    // Per series: samples = sum of rate x duration until the next point (the last point of each is the 0 after it).
    let mut series: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    for w in t.counters.windows(2).filter(|w| w[0].series == w[1].series) {
        let e = series.entry(t.names.get(w[0].series).to_string()).or_default();
        e.0 += 1;
        e.1 += w[0].value * (w[1].ts - w[0].ts) as f64 / 1e6;
    }
    assert_eq!(series.len(), 11, "{series:?}");
    let (points, samples) = series["PC samples/ms: long_scoreboard"];
    assert_eq!(points, 11, "12 points: the starts and ends of chase's and jit_scale's 3 runs each");
    let report = cutr_analyses::source::report(&[&reader], &Default::default());
    let want: u64 =
        report.kernels.iter().flat_map(|k| &k.stalls).filter(|s| s.0 == "long_scoreboard").map(|s| s.1).sum();
    assert_eq!((samples.round() as u64, want), (want, 450_296));
    let total: f64 = series.values().map(|s| s.1).sum();
    assert_eq!(total.round() as u64, 861_855, "every sample in some series");

    let chase_args =
        (454_728u64, "source_workload.cu:44 99.8%, source_workload.cu:43 0.1%, source_workload.cu:46 0.1%");
    let pf = dir.path().join("pcs.pftrace");
    export(&t, &pf, &ExportOptions::default()).unwrap();
    let r = trace_processor(
        &pf,
        &[
            STATS,
            "select t.name, count(*) from counter c join counter_track t on c.track_id = t.id \
             where t.name like 'stall %' group by t.name order by t.name",
            "select a.key, coalesce(a.string_value, cast(a.int_value as text)) from slice s join args a using (arg_set_id) \
             where s.name like 'chase(%' and a.key in ('debug.pc samples (whole recording)', 'debug.top lines', \
             'debug.top stall reasons') group by a.key order by a.key",
        ],
    );
    assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "clean import");
    assert_eq!(r[1].len(), 11);
    assert_eq!(r[1][4], [serde_json::json!("stall long_scoreboard"), serde_json::json!(12)]);
    assert_eq!(
        serde_json::json!(r[2]),
        serde_json::json!([
            ["debug.pc samples (whole recording)", chase_args.0.to_string()],
            ["debug.top lines", chase_args.1],
            ["debug.top stall reasons", "long_scoreboard 99.0%, wait 0.7%, selected 0.2%"],
        ])
    );

    let json = dir.path().join("pcs.json");
    export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let chase: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["cat"] == "kernel" && e["name"].as_str().unwrap().starts_with("chase(")).collect();
    assert_eq!(chase.len(), 3, "--iters 3");
    for k in chase {
        assert_eq!(k["args"]["pc samples (whole recording)"], chase_args.0);
        assert_eq!(k["args"]["top lines"], chase_args.1);
    }
    let counters =
        events.iter().filter(|e| e["ph"] == "C" && e["name"] == "stall long_scoreboard (samples/ms)").count();
    assert_eq!(counters, 12);
}
