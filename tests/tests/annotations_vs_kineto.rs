//! HTA's annotation analyses on cutr's JSON give Kineto's answer on the same program: `train_loop.py`'s 5
//! measured steps recorded by cutr with NVTX ranges (`fixtures/annotations/train_nvtx.cutr`, `cupti-record
//! --capture-range cuda-profiler-api`) and by the PyTorch profiler with the same regions as `record_function`
//! ranges (`train_kineto.json.gz`), one after the other on one H100 (`bench/gpu/annotations_kineto_and_recorder_threads.sh`).
//! The two runs did the same GPU work (1,205 kernels and 85 memsets, name for name); their times differ.

use std::collections::BTreeMap;
use std::path::Path;

use cutr_model::{LoadOptions, load};
use cutr_tests::python_tool;
use cutr_viewer_export::{ExportOptions, Format, export};
use serde_json::Value;

/// HTA's annotation analyses of the one trace in `dir`.
fn hta(dir: &Path) -> Value {
    let h = python_tool("hta_annotations.py", &[dir.as_os_str()], &[("HTA_DISABLE_NS_ROUNDING", "1")]);
    assert!(h["error"].is_null(), "{h}");
    h
}

/// The optimizer's kernels: in Kineto's trace under PyTorch's own innermost `record_function`, which NVTX does not
/// see; in cutr's under the program's `optimizer` range around it.
fn same(name: &str) -> &str {
    if name == "Optimizer.step#AdamW.step" { "optimizer" } else { name }
}

/// Per annotation name: (count, total us) of an HTA table, the names mapped by `rename`.
fn table(h: &Value, key: &str, rename: fn(&str) -> &str) -> BTreeMap<String, (i64, f64)> {
    h[key]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (rename(k).to_string(), (v["count"].as_i64().unwrap(), v["sum"].as_f64().unwrap())))
        .collect()
}

#[test]
fn hta_finds_the_same_annotated_kernels_as_on_kinetos_trace() {
    let fixtures = cutr_tests::repo().join("fixtures/annotations");
    let dir = tempfile::tempdir().unwrap();
    let (ours, kineto) = (dir.path().join("cutr"), dir.path().join("kineto"));
    std::fs::create_dir_all(&ours).unwrap();
    std::fs::create_dir_all(&kineto).unwrap();
    std::fs::copy(fixtures.join("train_kineto.json.gz"), kineto.join("rank0.json.gz")).unwrap();
    let t = load(&[fixtures.join("train_nvtx.cutr")], &LoadOptions::default()).unwrap();
    export(&t, &ours.join("rank0.json"), &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    let (ours, kineto) = (hta(&ours), hta(&kineto));

    let (k_ours, k_kineto) = (table(&ours, "kernels", same), table(&kineto, "kernels", same));
    let counts = |t: &BTreeMap<String, (i64, f64)>| t.iter().map(|(k, v)| (k.clone(), v.0)).collect::<Vec<_>>();
    let want = [("backward".to_string(), 5), ("forward".to_string(), 370), ("optimizer".to_string(), 50)];
    assert_eq!(counts(&k_ours), want, "GPU ops per innermost annotation, cutr");
    assert_eq!(counts(&k_kineto), want, "GPU ops per innermost annotation, Kineto");
    // Their GPU time, two runs of one program: within 2%, or 200 ns for backward's five 1 us kernels (2,404.4 vs
    // 2,413.1 us forward, 908.4 vs 924.8 optimizer, 5.089 vs 5.216 backward).
    for (name, (_, us)) in &k_ours {
        let theirs = k_kineto[name].1;
        assert!((us - theirs).abs() <= (0.02 * theirs).max(0.2), "{name}: {us} us here, {theirs} us in Kineto's");
    }
    // The ops outside any annotation (the autograd thread's backward kernels, launched outside the main
    // thread's ranges): the same, but for cutr's two device synchronizations (`cuda_sync`, which carry a stream
    // and which Kineto writes only with its sync events switched on).
    assert_eq!(
        (ours["kernels_without_annotation"].as_i64(), kineto["kernels_without_annotation"].as_i64()),
        (Some(867), Some(865))
    );

    // One GPU span per step for each annotation that launched work, in both.
    let spans = |h: &Value| counts(&table(h, "breakdown", same));
    assert_eq!(spans(&ours), [("backward".into(), 5), ("forward".into(), 5), ("optimizer".into(), 5)]);
    assert_eq!(spans(&ours), spans(&kineto));
}
