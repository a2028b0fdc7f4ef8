//! Driver API calls in the viewers (issue 31, item 6): by default a driver call inside a runtime call on the same
//! thread (the runtime's own) is left out of both timelines, its GPU work's arrow starting at the runtime call
//! around it, which says how many it hides, and so are driver queries (`cu...Get...`) that launched nothing;
//! the other driver calls the program made are drawn; `--driver-calls` (`DriverCalls::All`) draws them all.
//! Checked by Perfetto's trace processor on both outputs: an in-memory trace with nested calls, and the PyTorch
//! fixture, whose 29,655 driver records all lie outside runtime calls (CUDA 13's CUPTI records none of the
//! runtime's own driver calls), 28,842 of them queries, and whose 391 direct `cuLaunchKernel` keep their arrows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use cutr_format::SessionMetadata;
use cutr_format::meta::Device;
use cutr_model::rows::{ApiCall, Kernel};
use cutr_model::{LoadOptions, ProcId, Process, Trace, load};
use cutr_tests::{int, repo, trace_processor};
use cutr_viewer_export::{DriverCalls, ExportOptions, ExportSummary, Format, export};
use serde_json::{Value, json};

use cutr_tests::IMPORT_PROBLEMS as STATS;
const PID: u32 = 4242;
/// `cudaLaunchKernel` (runtime) and `cuLaunchKernel` (driver) cbids.
const CUDA_LAUNCH_KERNEL: u32 = 211;
const CU_LAUNCH_KERNEL: u32 = 307;

fn call(tid: u32, (start, end): (u64, u64), correlation: u32, driver: bool, cbid: u32) -> ApiCall {
    ApiCall { proc: ProcId(0), start, end, pid: PID, tid, correlation, cbid, driver, return_value: 0 }
}

/// Thread 11: `cudaLaunchKernel` [1000, 2000] holding the driver's `cuLaunchKernel` (corr 2, which launched
/// kernel `k1`) and `cuCtxGetCurrent`; a direct `cuLaunchKernel` (corr 4, kernel `k2`); `cudaLaunchKernel`
/// [5000, 6000] (corr 6, kernel `k3`) holding one `cuCtxGetCurrent`. Thread 12: a `cuCtxGetCurrent` at the time
/// of thread 11's first runtime call, inside nothing of its own thread.
fn nested_trace() -> Trace {
    let driver = |name| (0..2000).find(|&c| cutr_schema::callbacks::name(1, c) == Some(name)).unwrap();
    let (get_current, synchronize) = (driver("cuCtxGetCurrent"), driver("cuStreamSynchronize"));
    let mut t = Trace::default();
    let meta = SessionMetadata {
        pid: PID,
        devices: vec![Device { id: 0, name: "Test GPU".into(), ..Default::default() }],
        ..Default::default()
    };
    t.processes.push(Process { path: "nested.cutr".into(), meta: Arc::new(meta), pid: PID, ..Default::default() });
    t.apis = vec![
        call(11, (1_000, 2_000), 1, false, CUDA_LAUNCH_KERNEL),
        call(12, (1_100, 1_300), 5, true, synchronize),
        call(12, (2_500, 2_600), 8, true, get_current),
        call(11, (1_200, 1_500), 2, true, CU_LAUNCH_KERNEL),
        call(11, (1_600, 1_700), 3, true, get_current),
        call(11, (3_000, 3_400), 4, true, CU_LAUNCH_KERNEL),
        call(11, (5_000, 6_000), 6, false, CUDA_LAUNCH_KERNEL),
        call(11, (5_100, 5_200), 7, true, get_current),
    ];
    let [k1, k2, k3] = ["k1", "k2", "k3"].map(|n| t.names.intern(n));
    let kernel = |name, start, correlation| Kernel {
        start,
        end: start + 1_000,
        stream: 7,
        correlation,
        name,
        ..Default::default()
    };
    t.kernels = vec![kernel(k1, 10_000, 2), kernel(k2, 12_000, 4), kernel(k3, 14_000, 6)];
    // The launch join, as loading makes it (the trace is built here, not loaded).
    let apis = &t.apis;
    t.api_by_corr.build_file_par(ProcId(0), apis.len(), |i| Some((apis[i].correlation, i as u32 + 1)), |s, i| *s = i);
    t
}

/// Exports `trace` in both formats with `driver_calls`; per format: the summary and the trace processor's rows of
/// `queries` (after the import check).
fn both(trace: &Trace, driver_calls: DriverCalls, queries: &[&str]) -> Vec<(ExportSummary, Vec<Vec<Vec<Value>>>)> {
    let dir = tempfile::tempdir().unwrap();
    let mut all = vec![STATS];
    all.extend_from_slice(queries);
    [(Format::Perfetto, "t.pftrace"), (Format::Chrome, "t.json")]
        .into_iter()
        .map(|(format, name)| {
            let out = dir.path().join(name);
            let summary = export(trace, &out, &ExportOptions { format, driver_calls, ..Default::default() }).unwrap();
            let mut rows = trace_processor(&out, &all);
            assert_eq!(rows[0], Vec::<Vec<Value>>::new(), "{name}: clean import");
            rows.remove(0);
            (summary, rows)
        })
        .collect()
}

/// Each arrow: the category and name of the slice it starts at, and the name of the slice it ends at.
const ARROWS: &str = "select s.category, s.name, k.name from flow f join slice s on f.slice_out = s.id \
                      join slice k on f.slice_in = k.id order by k.ts";
const DRIVER_SLICES: &str = "select count(*) from slice where category = 'cuda_driver'";
const HIDDEN_ARGS: &str = "select s.name, a.int_value from slice s join args a using (arg_set_id) \
                           where a.key like '%driver calls hidden' order by s.ts";

#[test]
fn driver_calls_inside_runtime_calls_are_hidden_and_their_arrows_moved() {
    let t = nested_trace();
    for (summary, r) in both(&t, DriverCalls::Direct, &[DRIVER_SLICES, ARROWS, HIDDEN_ARGS]) {
        // Hidden: the three calls inside runtime calls, and thread 12's cuCtxGetCurrent (a query).
        assert_eq!((summary.driver_calls_hidden, summary.slices, summary.flows), (4, 8, 3));
        assert_eq!(int(&r[0]), 2, "the direct cuLaunchKernel and thread 12's cuStreamSynchronize");
        assert_eq!(
            json!(r[1]),
            json!([
                ["cuda_runtime", "cudaLaunchKernel", "k1"],
                ["cuda_driver", "cuLaunchKernel", "k2"],
                ["cuda_runtime", "cudaLaunchKernel", "k3"]
            ]),
            "k1's arrow from the runtime call around its hidden launch"
        );
        assert_eq!(json!(r[2]), json!([["cudaLaunchKernel", 2], ["cudaLaunchKernel", 1]]));
    }
    for (summary, r) in both(&t, DriverCalls::All, &[DRIVER_SLICES, ARROWS, HIDDEN_ARGS]) {
        assert_eq!((summary.driver_calls_hidden, summary.slices, summary.flows), (0, 12, 3));
        assert_eq!(int(&r[0]), 6);
        assert_eq!(
            json!(r[1]),
            json!([
                ["cuda_driver", "cuLaunchKernel", "k1"],
                ["cuda_driver", "cuLaunchKernel", "k2"],
                ["cuda_runtime", "cudaLaunchKernel", "k3"]
            ])
        );
        assert_eq!(r[2], Vec::<Vec<Value>>::new());
    }
}

/// The driver calls of `t` not inside a runtime call of their thread, counted here on their own: per thread, the
/// runtime calls by start with the running maximum of their ends; a driver call is inside one exactly when the
/// latest end among those begun by its start reaches its end.
fn driver_calls_outside_runtime(t: &Trace) -> u64 {
    let mut runtime: BTreeMap<(ProcId, u32), Vec<(u64, u64)>> = BTreeMap::new();
    for a in t.apis.iter().filter(|a| !a.driver) {
        runtime.entry((a.proc, a.tid)).or_default().push((a.start, a.end));
    }
    let latest_ends: BTreeMap<(ProcId, u32), (Vec<u64>, Vec<u64>)> = runtime
        .into_iter()
        .map(|(k, mut calls)| {
            calls.sort_unstable();
            let starts = calls.iter().map(|c| c.0).collect();
            let ends = calls
                .iter()
                .scan(0u64, |latest, c| {
                    *latest = (*latest).max(c.1);
                    Some(*latest)
                })
                .collect();
            (k, (starts, ends))
        })
        .collect();
    let inside = |a: &ApiCall| {
        let Some((starts, ends)) = latest_ends.get(&(a.proc, a.tid)) else { return false };
        let n = starts.partition_point(|&s| s <= a.start);
        n > 0 && ends[n - 1] >= a.end
    };
    t.apis.iter().filter(|a| a.driver && !inside(a)).count() as u64
}

/// The `cuda_driver` events of a Chrome trace, and whether every arrow start (`s`) lies at the start of a drawn
/// slice on its row, as JSON readers bind it.
fn chrome_driver_events_and_bound_arrows(path: &Path) -> (u64, bool) {
    let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let key = |e: &Value| (e["pid"].to_string(), e["tid"].to_string(), e["ts"].to_string());
    let slice_starts: BTreeSet<_> = events.iter().filter(|e| e["ph"] == "X").map(key).collect();
    let driver = events.iter().filter(|e| e["ph"] == "X" && e["cat"] == "cuda_driver").count() as u64;
    (driver, events.iter().filter(|e| e["ph"] == "s").all(|e| slice_starts.contains(&key(e))))
}

/// Whether a driver function only asks something, decided here on its own: `Get` followed by a capital or the
/// end, after `cu`.
fn query(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("cu") else { return false };
    (0..rest.len().saturating_sub(2))
        .any(|i| &rest[i..i + 3] == "Get" && rest[i + 3..].chars().next().is_none_or(|c| c.is_ascii_uppercase()))
}

#[test]
fn the_pytorch_fixtures_driver_queries_are_left_out_and_its_launches_kept() {
    let t = load(&[repo().join("fixtures/pytorch_loop.cutr")], &LoadOptions::default()).unwrap();
    let outside = driver_calls_outside_runtime(&t);
    let all = t.apis.iter().filter(|a| a.driver).count() as u64;
    assert_eq!((outside, all), (29_655, 29_655), "no driver record lies inside a runtime call (CUDA 13)");
    let launched: BTreeSet<u32> = t.kernels.iter().filter_map(|k| t.launcher_index(k.corr())).collect();
    let launches_from_driver = launched.iter().filter(|&&i| t.apis[i as usize].driver).count();
    assert_eq!(launches_from_driver, 391, "PyTorch's own cuLaunchKernel");
    let mut queries: BTreeMap<String, u64> = BTreeMap::new();
    for (i, a) in t.apis.iter().enumerate() {
        if a.driver && !launched.contains(&(i as u32)) && query(&t.api_name(a)) {
            *queries.entry(t.api_name(a)).or_default() += 1;
        }
    }
    let hidden: u64 = queries.values().sum();
    assert_eq!(
        queries.into_iter().collect::<Vec<_>>(),
        [
            ("cuCtxGetCurrent", 2_656),
            ("cuCtxGetDevice", 1),
            ("cuCtxGetLimit", 3),
            ("cuDeviceGet", 4),
            ("cuDeviceGetAttribute", 342),
            ("cuDeviceGetCount", 3),
            ("cuDeviceGetName", 4),
            ("cuDeviceGetUuid", 3),
            ("cuDevicePrimaryCtxGetState", 21_158),
            ("cuDriverGetVersion", 3),
            ("cuGetProcAddress", 880),
            ("cuKernelGetFunction", 391),
            ("cuKernelGetName", 3_353),
            ("cuLibraryGetKernel", 38),
            ("cuModuleGetLoadingMode", 3),
        ]
        .map(|(n, c)| (n.to_string(), c)),
        "the queries left out by default"
    );
    assert_eq!(hidden, 28_842, "of 29,655 driver records: 813 drawn, 391 of them PyTorch's cuLaunchKernel");
    let dir = tempfile::tempdir().unwrap();
    for (driver_calls, drawn) in [(DriverCalls::Direct, all - hidden), (DriverCalls::All, all)] {
        let pf = dir.path().join("p.pftrace");
        let opts = ExportOptions { driver_calls, ..Default::default() };
        let summary = export(&t, &pf, &opts).unwrap();
        let r = trace_processor(
            &pf,
            &[
                STATS,
                DRIVER_SLICES,
                "select count(*) from flow",
                "select count(*) from flow f join slice s on f.slice_out = s.id where s.category = 'cuda_driver'",
            ],
        );
        assert_eq!(r[0], Vec::<Vec<Value>>::new(), "clean import");
        assert_eq!(summary.driver_calls_hidden, all - drawn, "{driver_calls:?}");
        assert_eq!([int(&r[1]), int(&r[2]), int(&r[3])], [drawn as i64, summary.flows as i64, 391]);
        let json = dir.path().join("p.json");
        export(&t, &json, &ExportOptions { format: Format::Chrome, ..opts }).unwrap();
        assert_eq!(chrome_driver_events_and_bound_arrows(&json), (drawn, true));
    }
}
