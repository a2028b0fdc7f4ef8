//! `cupti-convert generate`'s ground truth against what `stats` reads back from the file, at two sizes: one
//! below the size where the step names' 24-bit hash pointers first collided (step 40,220, ~4.5M records) and one
//! above it, where a colliding step took an earlier step's name before the generator kept its names apart.

mod common;

use std::collections::BTreeMap;

use common::{path_str, run, text};
use cutr_synth::{SynthOptions, SynthTruth, write_file};
use serde_json::Value;

/// Writes `records` records, runs `stats --json` on them and checks every figure the truth holds.
fn truth_equals_stats(records: u64) -> (SynthTruth, Value) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.cutr");
    let truth = write_file(&path, SynthOptions { records, ..Default::default() }).unwrap();
    // Every step name its own NVTX row (by default they fold into `step <n>`, checked below).
    let o = run(&["stats", "--json", "--nvtx-names", "each", path_str(&path)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = |section: &str| s[section].as_array().unwrap().clone();
    let u = |v: &Value| v.as_u64().unwrap();

    // Kernels: stats names them demangled, the truth mangled; (launches, GPU ns) per kernel match as multisets.
    let mut ours: Vec<(u64, u64)> = rows("kernels").iter().map(|k| (u(&k["count"]), u(&k["total_ns"]))).collect();
    let mut truths: Vec<(u64, u64)> = truth.kernels.values().copied().collect();
    ours.sort_unstable();
    truths.sort_unstable();
    assert_eq!(ours, truths);
    // Copies and memsets: (count, bytes, ns) per kind.
    let mut ops: Vec<(u64, u64, u64)> =
        rows("memory_ops").iter().map(|m| (u(&m["count"]), u(&m["bytes"]), u(&m["total_ns"]))).collect();
    let mut truths: Vec<(u64, u64, u64)> = truth.memcpys.values().copied().chain([truth.memsets]).collect();
    ops.sort_unstable();
    truths.sort_unstable();
    assert_eq!(ops, truths);
    // NVTX: every step range under a name of its own ("step N", once each), forward and backward once per step.
    let mut nvtx: BTreeMap<String, u64> = BTreeMap::new();
    for r in rows("nvtx") {
        let name = r["name"].as_str().unwrap();
        let key = if name.starts_with("step ") { "step" } else { name };
        *nvtx.entry(key.to_string()).or_default() += u(&r["count"]);
        if name.starts_with("step ") {
            assert_eq!(u(&r["count"]), 1, "{name} named two steps");
        }
    }
    assert_eq!(nvtx, truth.nvtx_ranges);
    let step_names = rows("nvtx").iter().filter(|r| r["name"].as_str().unwrap().starts_with("step ")).count();
    assert_eq!(step_names as u64, truth.steps);
    // Folded (the default): one row holds every step, as many names as steps.
    let o = run(&["stats", "--json", "--report", "nvtx", path_str(&path)]);
    let folded: Value = serde_json::from_slice(&o.stdout).unwrap();
    let step = folded["nvtx"].as_array().unwrap().iter().find(|r| r["name"] == "step <n>").unwrap().clone();
    assert_eq!((u(&step["count"]), u(&step["folded_names"])), (truth.nvtx_ranges["step"], truth.steps));
    // The device memory peak and the time span.
    let peak = &rows("memory_peaks")[0];
    assert_eq!(u(&peak["peak_bytes"]), truth.memory_peak[&0].0);
    assert_eq!(u(&s["span_ns"]), truth.t_max - truth.t_min);
    (truth, s)
}

#[test]
fn generated_truth_equals_stats_below_the_first_step_name_collision() {
    let (truth, _) = truth_equals_stats(200_000);
    assert_eq!((truth.records, truth.steps), (200_104, 1_794));
    assert_eq!(truth.kernels.values().map(|k| k.0).sum::<u64>(), 54_104);
}

#[test]
fn generated_truth_equals_stats_past_the_first_step_name_collision() {
    let (truth, _) = truth_equals_stats(5_000_000);
    assert_eq!((truth.records, truth.steps), (5_000_008, 44_827));
    assert_eq!(truth.nvtx_ranges["step"], 44_827);
}
