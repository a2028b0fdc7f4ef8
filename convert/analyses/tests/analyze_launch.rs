//! Launch health (`analyze`'s launch section): on hand-built traces whose answers are known by construction, on
//! the launch-bound loop and the PyTorch loop fixtures with their exact figures, and against DuckDB joining the
//! exported `kernels` and `api_calls` tables by correlation id.

use std::path::PathBuf;
use std::process::Command;

use cutr_analyses::analyze::launch::{LaunchHealth, launch_health, render_markdown, render_text};
use cutr_model::{ApiCall, Kernel, LoadOptions, ProcId, Process, Trace, load};
use cutr_schema::callbacks::runtime::{CUDA_GRAPH_LAUNCH, CUDA_LAUNCH_KERNEL};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

/// A trace of one process with `calls` (start, end, cbid) on correlation ids 1, 2, ... and `kernels`
/// (correlation, stream, start, end, name, graph id).
fn hand_built(calls: &[(u64, u64, u32)], kernels: &[(u32, u32, u64, u64, &str, u32)]) -> Trace {
    let mut t = Trace::default();
    t.processes = vec![Process::default()];
    t.apis = calls
        .iter()
        .enumerate()
        .map(|(i, &(start, end, cbid))| ApiCall {
            proc: ProcId(0),
            start,
            end,
            pid: 1,
            tid: 1,
            correlation: i as u32 + 1,
            cbid,
            driver: false,
            return_value: 0,
        })
        .collect();
    t.kernels = kernels
        .iter()
        .map(|&(correlation, stream, start, end, name, graph_id)| Kernel {
            proc: ProcId(0),
            start,
            end,
            stream,
            correlation,
            name: t.names.intern(name),
            graph_id,
            ..Default::default()
        })
        .collect();
    let apis = t.apis.clone();
    t.api_by_corr.build_file_par(ProcId(0), apis.len(), |i| Some((apis[i].correlation, i as u32 + 1)), |s, v| *s = v);
    t
}

#[test]
fn known_latencies_give_exact_order_statistics_and_queue_depths() {
    // Three launches on stream 7: calls at 1000, 1010, 1020 (5, 5, 40 ns long), their kernels starting at 1030,
    // 1040, 1100: latencies 30, 30, 80; a graph launch whose three kernels start 15, 20 and 30 ns after it; a
    // kernel whose call was never recorded; one that started before its call did (clock skew).
    let calls = [(1000, 1005, CUDA_LAUNCH_KERNEL), (1010, 1015, CUDA_LAUNCH_KERNEL), (1020, 1060, CUDA_LAUNCH_KERNEL)];
    let mut calls = calls.to_vec();
    calls.push((2000, 2010, CUDA_GRAPH_LAUNCH));
    calls.push((3000, 3004, CUDA_LAUNCH_KERNEL));
    let t = hand_built(
        &calls,
        &[
            (1, 7, 1030, 1033, "a", 0),
            (2, 7, 1040, 1050, "a", 0),
            (3, 7, 1100, 1101, "b", 0),
            (4, 9, 2015, 2016, "g1", 5),
            (4, 9, 2020, 2021, "g2", 5),
            (4, 9, 2030, 2031, "g3", 5),
            (99, 7, 2500, 2501, "orphan", 0),
            (5, 8, 2990, 2999, "early", 0),
        ],
    );
    let h = launch_health(&t);
    let k = &h.kernels;
    // Four kernels of their own call: latencies 30, 30, 80 and 0 (the early one, clamped).
    assert_eq!(
        (k.latency.count, k.latency.median_ns, k.latency.p90_ns, k.latency.p99_ns, k.latency.max_ns),
        (4, 30, 80, 80, 80)
    );
    assert_eq!((k.cpu_cost.median_ns, k.cpu_cost.max_ns, k.cpu_cost.total_ns), (5, 40, 54));
    assert_eq!((h.started_before_call, h.without_launcher), (1, 1));
    // The graph launch counts once, with the latency to its first kernel; its kernels are not kernels' launches.
    let g = &h.graph_launches;
    assert_eq!((g.latency.count, g.latency.max_ns, g.cpu_cost.max_ns, h.graph_ops), (1, 15, 10, 3));
    // Kernels shorter than their call: a (3 < 5), b (1 < 40), early (9 > 4 no), a (10 > 5 no).
    assert_eq!((h.shorter_than_launch.count, h.shorter_than_launch.share_pct), (2, 50.0));
    let names: Vec<(&str, u64, u64)> =
        h.by_name.iter().map(|n| (n.name.as_str(), n.latency.count, n.shorter_than_launch)).collect();
    assert_eq!(names, [("a", 2, 1), ("b", 1, 1), ("early", 1, 0)]);
    // Stream 7's depth: 1 at 1000, 2 at 1010, 3 at 1020, 2 at 1030, 1 at 1040, 0 at 1100: the area is
    // 10·1 + 10·2 + 10·3 + 10·2 + 60·1 = 140 over 100 ns.
    let s7 = h.queues.iter().find(|q| q.stream == 7).unwrap();
    assert_eq!((s7.launches, s7.start, s7.end, s7.max_depth, s7.mean_depth, s7.full_ns), (3, 1000, 1100, 3, 1.4, 0));
    assert_eq!(s7.series, [(1000, 1), (1010, 2), (1020, 3), (1030, 2), (1040, 1), (1100, 0)]);
    assert!(h.queues.iter().all(|q| q.stream != 9), "graph launches are not in the queues");
    // The early kernel starts before its call: the depth dips below zero and is reported as 0.
    let s8 = h.queues.iter().find(|q| q.stream == 8).unwrap();
    assert_eq!((s8.max_depth, s8.series.clone()), (0, vec![(2990, -1), (3000, 0)]));
    assert_eq!(h.blocked_on_full_queue.calls, 0);
}

#[test]
fn a_burst_past_the_queue_limit_blocks_the_host() {
    // 1030 launches 10 ns apart (each call 5 ns) on one stream, none starting until all are launched, then one
    // every 100 ns: the calls that found 1024 or more launches waiting are the last 6 (30 ns of calls); the depth
    // is 1024 from the 1024th call's start (1000 + 1023·10) until the 7th kernel starts (1000 + 10300 + 600).
    let n = 1030u64;
    let calls: Vec<(u64, u64, u32)> = (0..n).map(|i| (1000 + i * 10, 1005 + i * 10, CUDA_LAUNCH_KERNEL)).collect();
    let names: Vec<String> = (0..n).map(|_| "tiny".to_string()).collect();
    let kernels: Vec<(u32, u32, u64, u64, &str, u32)> = (0..n)
        .map(|i| (i as u32 + 1, 3, 1000 + n * 10 + i * 100, 1001 + n * 10 + i * 100, names[i as usize].as_str(), 0))
        .collect();
    let h = launch_health(&hand_built(&calls, &kernels));
    assert_eq!((h.blocked_on_full_queue.calls, h.blocked_on_full_queue.ns), (6, 30));
    let q = &h.queues[0];
    assert_eq!((q.max_depth, q.full_ns), (1030, (1000 + 10_300 + 600) - (1000 + 10_230)));
    // 2060 changes of depth: the series keeps each window's largest depth instead. Windows are ⌊(114,200 −
    // 1,000) / 1,000⌋ + 1 = 114 ns wide, the last event (at 114,200) falls in window 992, so 993 points; the last
    // window starts at 114,088 with 2 kernels waiting (it holds the last two kernels' starts).
    assert_eq!((q.start, q.end, q.series.len()), (1000, 114_200, 993));
    assert_eq!(q.series.iter().map(|p| p.1).max(), Some(1030));
    assert_eq!((q.series[0], q.series[992]), ((1000, 12), (114_088, 2)));
    // Every kernel (1 ns) is shorter than its call (5 ns).
    assert_eq!((h.shorter_than_launch.count, h.shorter_than_launch.share_pct), (1030, 100.0));
}

#[test]
fn an_empty_trace_has_no_launches_and_says_so() {
    let mut t = Trace::default();
    t.processes = vec![Process::default()];
    let h = launch_health(&t);
    assert_eq!(h, LaunchHealth::default());
    let mut o = String::new();
    render_text(&mut o, &h);
    assert!(o.contains("no GPU op with a launching call in the file"), "{o}");
}

fn dist(d: &cutr_analyses::analyze::launch::Dist) -> [u64; 6] {
    [d.count, d.total_ns, d.median_ns, d.p90_ns, d.p99_ns, d.max_ns]
}

/// Text and Markdown of `h`, with every text line checked to fit 100 columns.
fn rendered(h: &LaunchHealth) -> (String, String) {
    let (mut text, mut markdown) = (String::new(), String::new());
    render_text(&mut text, h);
    render_markdown(&mut markdown, h);
    let wide: Vec<&str> = text.lines().filter(|l| l.chars().count() > 100).collect();
    assert!(wide.is_empty(), "lines over 100 columns: {wide:#?}");
    (text, markdown)
}

#[test]
fn the_launch_loop_is_launch_bound_kernels_shorter_than_their_launch() {
    let t = load(&[fixture("launch_loop_100k.cutr")], &LoadOptions::default()).unwrap();
    let h = launch_health(&t);
    // 101,000 tiny(int*) launches (1,000 warm-up + 100,000 timed), each one a cudaLaunchKernel of its own.
    assert_eq!(dist(&h.kernels.latency), [101_000, 715_795_645, 6_851, 8_025, 11_726, 320_896]);
    assert_eq!(dist(&h.kernels.cpu_cost), [101_000, 521_316_340, 4_873, 6_160, 10_983, 2_523_656]);
    assert_eq!((h.kernels.latency_outliers.count, h.kernels.latency_outliers.threshold_ns), (3, 68_510));
    assert_eq!((h.kernels.cpu_cost_outliers.count, h.kernels.cpu_cost_outliers.threshold_ns), (11, 48_730));
    let first = &h.kernels.latency_outliers.first;
    assert_eq!(first.iter().map(|e| e.correlation).collect::<Vec<_>>(), [125, 107_453, 175_161]);
    assert_eq!(first[2].what, "latency 320.9 us: tiny(int*)");
    assert_eq!(first[2].end - first[2].start, 320_896);
    // Every kernel ran for less time than its launch call took: the GPU waits on the host.
    assert_eq!((h.shorter_than_launch.count, h.shorter_than_launch.share_pct), (101_000, 100.0));
    assert_eq!(h.shorter_than_launch.top, [("tiny(int*)".to_string(), 101_000, 101_000)]);
    // One stream, the queue never deeper than 3 (the kernels plus the one cudaMemcpyAsync), never full.
    let q: Vec<(u32, u64, i64, i64, u64, usize)> = h
        .queues
        .iter()
        .map(|q| (q.stream, q.launches, q.max_depth, (q.mean_depth * 1e6).round() as i64, q.full_ns, q.series.len()))
        .collect();
    assert_eq!(q, [(13, 101_001, 3, 1_184_294, 0, 1000)]);
    assert_eq!((h.blocked_on_full_queue.calls, h.async_copies.latency.count), (0, 1));
    assert_eq!((h.without_launcher, h.sync_copies, h.started_before_call, h.graph_ops), (0, 1, 0, 0));
    let (text, markdown) = rendered(&h);
    assert!(
        text.contains("  kernels latency               101,000        6.9        8.0       11.7      320.9\n"),
        "{text}"
    );
    let short =
        "kernels shorter than their launch call: 101,000 of 101,000 (100.0%)\n      101,000 of   101,000  tiny(int*)\n";
    assert!(text.contains(short), "{text}");
    assert!(markdown.contains("| kernels | CPU cost | 101,000 | 4.9 | 6.2 | 11.0 | 2,523.7 |"), "{markdown}");
}

#[test]
fn the_pytorch_loops_launches_by_name_and_its_copies() {
    let t = load(&[fixture("pytorch_loop.cutr")], &LoadOptions::default()).unwrap();
    let h = launch_health(&t);
    assert_eq!(dist(&h.kernels.latency), [5_653, 96_465_004, 8_547, 16_474, 29_431, 5_331_063]);
    assert_eq!(dist(&h.kernels.cpu_cost), [5_653, 80_031_914, 6_289, 8_997, 30_420, 5_339_063]);
    assert_eq!(dist(&h.async_copies.latency), [446, 4_264_360, 6_051, 9_984, 104_938, 127_699]);
    assert_eq!(dist(&h.async_copies.cpu_cost), [446, 3_394_253, 3_903, 8_365, 103_424, 126_462]);
    assert_eq!((h.kernels.latency_outliers.count, h.kernels.cpu_cost_outliers.count), (21, 21));
    assert_eq!(h.async_copies.latency_outliers.first[0].correlation, 324);
    assert_eq!(h.names, 41);
    let top: Vec<(String, u64, u64, u64)> = h
        .by_name
        .iter()
        .map(|n| (n.name.chars().take(30).collect(), n.latency.count, n.latency.median_ns, n.shorter_than_launch))
        .collect();
    let want: Vec<(&str, u64, u64, u64)> = vec![
        ("void at::native::elementwise_k", 644, 8_291, 644),
        ("sm80_xmma_gemm_f32f32_f32f32_f", 391, 8_194, 154),
        ("void at::native::reduce_kernel", 391, 8_256, 101),
        ("void cublasLt::splitKreduce_ke", 391, 16_436, 391),
        ("void at::native::vectorized_el", 368, 8_345, 368),
        ("sm80_xmma_gemm_f32f32_f32f32_f", 276, 8_371, 181),
        ("sm80_xmma_gemm_f32f32_f32f32_f", 276, 8_484, 4),
        ("void cutlass::Kernel2<cutlass_", 276, 7_857, 6),
        ("sm80_xmma_gemm_f32f32_f32f32_f", 207, 8_396, 172),
        ("void at::native::(anonymous na", 207, 8_023, 179),
    ];
    let want: Vec<(String, u64, u64, u64)> = want.into_iter().map(|w| (w.0.to_string(), w.1, w.2, w.3)).collect();
    assert_eq!(top, want);
    assert_eq!(h.shorter_than_launch.count, 3_962);
    assert_eq!((h.shorter_than_launch.share_pct * 100.0).round(), 7009.0);
    let q: Vec<(u32, u64, i64, i64, u64)> = h
        .queues
        .iter()
        .map(|q| (q.stream, q.launches, q.max_depth, (q.mean_depth * 1e6).round() as i64, q.full_ns))
        .collect();
    assert_eq!(q, [(7, 6_099, 3, 18_884, 0)]);
    assert_eq!((h.without_launcher, h.sync_copies, h.started_before_call), (0, 0, 0));
    let (text, markdown) = rendered(&h);
    assert!(text.contains("  per kernel name (10 of 41 names, the commonest first; us)"), "{text}");
    assert!(markdown.contains("| 0 | 0 | 7 | 6,099 | 3 | 0.02 | 0.0 |"), "{markdown}");
}

/// DuckDB's rows for `sql` over the Parquet tables in `dir` (tests/clients/duck.py, in the clients' venv).
fn duck(dir: &std::path::Path, sql: &str) -> Vec<serde_json::Value> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cache = std::env::var_os("CUTR_CACHE").map(PathBuf::from).unwrap_or_else(|| repo.join(".cache"));
    let py = cache.join("clients/venv/bin/python");
    assert!(py.exists(), "{} is missing: run .ci/setup-clients.sh first", py.display());
    let out = Command::new(py).arg(repo.join("tests/clients/duck.py")).arg(dir).arg(sql).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("duck.py: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    v[0]["rows"].as_array().unwrap().clone()
}

#[test]
fn duckdb_joining_kernels_to_their_calls_agrees_on_the_launch_loop() {
    let t = load(&[fixture("launch_loop_100k.cutr")], &LoadOptions::default()).unwrap();
    let h = launch_health(&t);
    let dir = tempfile::tempdir().unwrap();
    cutr_tables::write_parquet(&t, dir.path()).unwrap();
    // quantile_disc at q is the value at 0-based index ⌊q·(n−1)⌋ of the sorted values, which for these counts is
    // the nearest rank ⌈q·n⌉ (1-based) that launch health uses.
    let rows = duck(
        dir.path(),
        "SELECT count(*), sum(k.start_ns - a.start_ns), quantile_disc(k.start_ns - a.start_ns, 0.5), \
         quantile_disc(k.start_ns - a.start_ns, 0.9), quantile_disc(k.start_ns - a.start_ns, 0.99), \
         max(k.start_ns - a.start_ns), sum(CASE WHEN k.duration_ns < a.duration_ns THEN 1 ELSE 0 END), \
         sum(a.duration_ns) \
         FROM <kernels> k JOIN <api_calls> a ON k.correlation = a.correlation AND a.api = 'runtime' \
         WHERE k.graph_id = 0",
    );
    let cell = |i: usize| rows[0][i].as_u64().or_else(|| rows[0][i].as_str().and_then(|s| s.parse().ok())).unwrap();
    let ours = dist(&h.kernels.latency);
    assert_eq!([cell(0), cell(1), cell(2), cell(3), cell(4), cell(5)], ours);
    assert_eq!((cell(6), cell(7)), (h.shorter_than_launch.count, h.kernels.cpu_cost.total_ns));
}

#[test]
fn every_op_of_every_fixture_is_counted_once_and_every_queue_launch_is_a_launch() {
    let mut jobs: Vec<Vec<PathBuf>> = Vec::new();
    for dir in ["", "allreduce", "allreduce_torchrun"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(fixture(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "cutr"))
            .collect();
        files.sort();
        if dir.is_empty() {
            jobs.extend(files.into_iter().map(|f| vec![f]));
        } else {
            jobs.push(files);
        }
    }
    assert!(jobs.len() >= 16, "{jobs:?}");
    for files in jobs {
        let t = load(&files, &LoadOptions::default()).unwrap();
        let h = launch_health(&t);
        let ops = (t.kernels.len() + t.memcpys.len() + t.memsets.len()) as u64;
        let counted =
            h.kernels.latency.count + h.async_copies.latency.count + h.graph_ops + h.without_launcher + h.sync_copies;
        assert_eq!(counted, ops, "{files:?}");
        let queued: u64 = h.queues.iter().map(|q| q.launches).sum();
        assert_eq!(queued, h.kernels.latency.count + h.async_copies.latency.count, "{files:?}");
        assert!(h.queues.iter().all(|q| q.series.len() <= 1000 && q.max_depth < 1024), "{files:?}");
        assert!(h.graph_launches.latency.count <= h.graph_ops, "{files:?}");
        rendered(&h);
    }
}

/// HTA's launch queue of every stream of the Chrome JSON in `dir` (`TraceCounters.get_queue_length_time_series`
/// and `get_queue_length_summary`): stream -> [changes, max depth, time-weighted mean depth over the stream's
/// first to last change], and HTA's rows of `get_time_spent_blocked_on_full_queue` at 1024.
const HTA_QUEUES: &str = r#"
import json, logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
from hta.analyzers.trace_counters import TraceCounters
a = TraceAnalysis(trace_dir=sys.argv[1])
series = TraceCounters.get_queue_length_time_series(a.t, [0])
summary = TraceCounters.get_queue_length_summary_from_time_series(series)
full = TraceCounters.get_time_spent_blocked_on_full_queue(a.t, series, 1024)
out = {}
for stream, g in series[0].groupby("stream"):
    dur = g.ts.shift(-1) - g.ts
    mean = float((g.queue_length * dur).sum() / (g.ts.max() - g.ts.min()))
    row = summary.loc[(0, stream)]
    out[str(int(stream))] = [int(row[("queue_length", "count")]), int(row[("queue_length", "max")]), mean]
sys.__stdout__.write("\nRESULT " + json.dumps({"streams": out, "full_rows": len(full)}) + "\n")
"#;

#[test]
fn htas_launch_queue_agrees_on_the_pytorch_loop() {
    let t = load(&[fixture("pytorch_loop.cutr")], &LoadOptions::default()).unwrap();
    let h = launch_health(&t);
    let dir = tempfile::tempdir().unwrap();
    let opts = cutr_viewer_export::ExportOptions { format: cutr_viewer_export::Format::Chrome, ..Default::default() };
    cutr_viewer_export::export(&t, &dir.path().join("rank0.json"), &opts).unwrap();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cache = std::env::var_os("CUTR_CACHE").map(PathBuf::from).unwrap_or_else(|| repo.join(".cache"));
    let py = cache.join("clients/venv/bin/python");
    assert!(py.exists(), "{} is missing: run .ci/setup-clients.sh first", py.display());
    let out = Command::new(py)
        .arg("-c")
        .arg(HTA_QUEUES)
        .arg(dir.path())
        .env("HTA_DISABLE_NS_ROUNDING", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")).unwrap_or_else(|| {
        panic!("HTA printed no result: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    });
    let hta: serde_json::Value = serde_json::from_str(result).unwrap();
    assert_eq!(hta["full_rows"], 0);
    let streams = hta["streams"].as_object().unwrap();
    assert_eq!(streams.len(), h.queues.len());
    for q in &h.queues {
        let s = &streams[&q.stream.to_string()];
        // One change per launch call's start and per op's start; the same deepest queue.
        assert_eq!((s[0].as_u64().unwrap(), s[1].as_i64().unwrap()), (2 * q.launches, q.max_depth));
        // HTA orders equal timestamps as its sort leaves them, this analysis ops first: within 0.01%.
        let hta_mean = s[2].as_f64().unwrap();
        assert!((hta_mean - q.mean_depth).abs() <= 1e-4 * q.mean_depth, "HTA {hta_mean}, ours {}", q.mean_depth);
    }
}
