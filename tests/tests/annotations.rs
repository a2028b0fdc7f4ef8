//! NVTX ranges as Kineto writes user annotations (issue 31, item 3): host ranges of category `user_annotation`,
//! and per range and stream a `gpu_user_annotation` span over the work the range launched itself. Read back by
//! HTA 0.5.0's two annotation analyses (`tests/clients/hta_annotations.py`) and by Perfetto's trace processor,
//! on the real H100 recording `fixtures/cuda_workload.cutr` (two threads of nested NVTX ranges over 4 streams,
//! workloads/cuda/cutr_workload.cu), each figure equal to `stats`' NVTX section.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cutr_analyses::stats::{RangeStats, Stats, compute};
use cutr_model::nvtx_spans::gpu_spans;
use cutr_model::{LoadOptions, Trace, load};
use cutr_tests::{int, python_tool, trace_processor};
use cutr_viewer_export::timeline::TrackRole;
use cutr_viewer_export::{ExportOptions, Format, export};
use serde_json::Value;

use cutr_tests::IMPORT_PROBLEMS as STATS;

fn fixture(name: &str) -> (PathBuf, Trace) {
    let path = cutr_tests::repo().join("fixtures").join(name);
    let t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    (path, t)
}

/// `stats`' NVTX rows by range name.
fn nvtx_rows(s: &Stats) -> BTreeMap<&str, &RangeStats> {
    s.nvtx.iter().map(|r| (r.time.name.as_str(), r)).collect()
}

/// HTA's figures (microseconds with three decimals, its ns rounding off) as whole ns.
fn ns(v: &Value) -> i64 {
    (v.as_f64().unwrap() * 1000.0).round() as i64
}

/// HTA's annotation analyses of `t` written as Chrome JSON (one rank's directory under `dir`).
fn hta(t: &Trace, dir: &Path) -> Value {
    let rank = dir.join("hta");
    std::fs::create_dir_all(&rank).unwrap();
    export(t, &rank.join("rank0.json"), &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    let h = python_tool("hta_annotations.py", &[rank.as_os_str()], &[("HTA_DISABLE_NS_ROUNDING", "1")]);
    assert!(h["error"].is_null(), "{h}");
    h
}

/// (count, total ns) per name of an HTA table.
fn counts_and_sums(table: &Value) -> BTreeMap<String, (i64, i64)> {
    table.as_object().unwrap().iter().map(|(k, v)| (k.clone(), (v["count"].as_i64().unwrap(), ns(&v["sum"])))).collect()
}

#[test]
fn hta_annotation_analyses_equal_stats_nvtx_figures() {
    let dir = tempfile::tempdir().unwrap();
    let (_, t) = fixture("cuda_workload.cutr");
    let s = compute(&t, &Default::default());
    let rows = nvtx_rows(&s);
    let h = hta(&t, dir.path());

    // get_gpu_user_annotation_breakdown: per name, the spans' count and summed duration are stats' GPU spans.
    let breakdown = counts_and_sums(&h["breakdown"]);
    let spans: BTreeMap<String, (i64, i64)> = s
        .nvtx
        .iter()
        .filter(|r| r.gpu_spans > 0)
        .map(|r| (r.time.name.clone(), (r.gpu_spans as i64, r.gpu_span_ns as i64)))
        .collect();
    assert_eq!(breakdown, spans);
    // The ranges that launched work themselves; those around them (`A:iter`, `B:thread`...) launched none.
    let names: Vec<&str> = breakdown.keys().map(|k| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "A:compute",
            "A:d2h",
            "A:h2d",
            "B:compute",
            "B:d2h",
            "B:graph",
            "B:sync-copies",
            "main:setup",
            "main:teardown"
        ]
    );
    // A span per iteration and stream: `A:compute` ran on two streams, `main:setup` copied on three, the five
    // graph launches of `B:graph` are one span; idle time between the ops is in the spans.
    assert_eq!(breakdown["A:compute"], (20, 4_360_709));
    assert_eq!(breakdown["B:compute"], (10, 20_257_781));
    assert_eq!(breakdown["B:sync-copies"], (10, 899_526));
    assert_eq!(breakdown["B:graph"], (1, 37_696));
    assert_eq!(breakdown["main:setup"], (3, 53_057));
    // Its longest and shortest span of each name are the model's.
    for (name, v) in h["breakdown"].as_object().unwrap() {
        let durs: Vec<u64> = gpu_spans(&t)
            .iter()
            .filter(|g| t.names.get(t.ranges[g.range as usize].name) == name)
            .map(|g| g.end - g.start)
            .collect();
        let (min, max) = (*durs.iter().min().unwrap() as i64, *durs.iter().max().unwrap() as i64);
        assert_eq!((ns(&v["min"]), ns(&v["max"])), (min, max), "{name}");
    }

    // get_gpu_kernels_with_user_annotations: each kernel, copy and memset under the innermost span of its row is
    // the work its range launched: stats' GPU work of each of these ranges (none has a nested range that
    // launched any).
    let kernels = counts_and_sums(&h["kernels"]);
    let work: BTreeMap<String, (i64, i64)> =
        names.iter().map(|n| (n.to_string(), (rows[n].gpu_ops as i64, rows[n].gpu_ns as i64))).collect();
    assert_eq!(kernels, work);
    assert_eq!(kernels["B:compute"], (30, 20_042_995));
    assert_eq!(kernels["A:compute"], (50, 3_009_494));
    // Every op of the recording was launched inside a range; HTA's other GPU events are the 43 syncs.
    let annotated: i64 = kernels.values().map(|v| v.0).sum();
    assert_eq!(annotated as usize, t.kernels.len() + t.memcpys.len() + t.memsets.len());
    assert_eq!(annotated, 169);
    assert_eq!(h["kernels_without_annotation"].as_u64().unwrap() as usize, t.syncs.len());
    // The outer ranges' figures in stats (nested ranges included) are their inner ranges' in HTA, added up.
    let sum_of = |prefix: &str| -> (i64, i64) {
        let of = kernels.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| *v);
        of.fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1))
    };
    for (outer, prefix) in [("A:thread", "A:"), ("A:iter", "A:"), ("B:thread", "B:")] {
        assert_eq!(sum_of(prefix), (rows[outer].gpu_ops as i64, rows[outer].gpu_ns as i64), "{outer}");
    }
    assert_eq!(sum_of("B:"), (95, 20_731_448));
}

/// A graph replay counts once in HTA's breakdown: under the range it was launched in (as on a Kineto trace),
/// not again under the ranges its nodes were captured in (`replay of:` slices are `graph_replay_annotation`).
#[test]
fn graph_replays_count_once_in_the_breakdown() {
    let dir = tempfile::tempdir().unwrap();
    let (_, t) = fixture("graph_workload.cutr");
    let s = compute(&t, &Default::default());
    let h = hta(&t, dir.path());
    let spans: BTreeMap<String, (i64, i64)> = s
        .nvtx
        .iter()
        .filter(|r| r.gpu_spans > 0)
        .map(|r| (r.time.name.clone(), (r.gpu_spans as i64, r.gpu_span_ns as i64)))
        .collect();
    let breakdown = counts_and_sums(&h["breakdown"]);
    assert_eq!(breakdown, spans);
    let want = [
        ("launch:capture", (1, 14_112)),
        ("launch:clone", (1, 4_000)),
        ("launch:explicit", (1, 16_192)),
        ("launch:stacks", (1, 1_152)),
        ("launch:update", (1, 13_856)),
    ];
    assert_eq!(breakdown, want.iter().map(|(k, v)| (k.to_string(), *v)).collect());
    // The replayed kernels and memsets go to their launch range, with stats' GPU work of it.
    let rows = nvtx_rows(&s);
    let work: BTreeMap<String, (i64, i64)> =
        want.iter().map(|(n, _)| (n.to_string(), (rows[n].gpu_ops as i64, rows[n].gpu_ns as i64))).collect();
    assert_eq!(counts_and_sums(&h["kernels"]), work);
}

/// The Perfetto trace: the host ranges as `user_annotation` slices on their threads, the GPU spans on a track
/// beside each stream (`stream N (NVTX ranges)`, under the stream's context), with stats' totals; the Chrome JSON
/// read by the same trace processor nests every op in its span on the stream's row.
#[test]
fn both_viewers_draw_the_spans_with_stats_totals() {
    let dir = tempfile::tempdir().unwrap();
    let (_, t) = fixture("cuda_workload.cutr");
    let s = compute(&t, &Default::default());
    let mut spans: Vec<Vec<Value>> = s
        .nvtx
        .iter()
        .filter(|r| r.gpu_spans > 0)
        .map(|r| vec![Value::from(r.time.name.as_str()), Value::from(r.gpu_spans), Value::from(r.gpu_span_ns)])
        .collect();
    spans.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
    let by_name = "select name, count(*), sum(dur) from slice where category = 'gpu_user_annotation' \
                   group by name order by name";
    let ops = "category in ('kernel', 'gpu_memcpy', 'gpu_memset')";
    let pf = dir.path().join("t.pftrace");
    export(&t, &pf, &ExportOptions::default()).unwrap();
    let r = trace_processor(
        &pf,
        &[
            STATS,
            by_name,
            "select t.name, count(*) from slice s join track t on s.track_id = t.id \
             where s.category = 'gpu_user_annotation' group by 1 order by 1",
            "select count(*) from slice s join thread_track tt on s.track_id = tt.id \
             where s.category = 'user_annotation'",
        ],
    );
    assert_eq!(r[0], Vec::<Vec<Value>>::new(), "import errors: {:?}", r[0]);
    assert_eq!(r[1], spans);
    let tracks: Vec<(&str, i64)> = r[2].iter().map(|x| (x[0].as_str().unwrap(), x[1].as_i64().unwrap())).collect();
    assert_eq!(
        tracks,
        [
            ("stream 13 (NVTX ranges)", 20),
            ("stream 14 (NVTX ranges)", 21),
            ("stream 15 (NVTX ranges)", 20),
            ("stream 16 (NVTX ranges)", 2),
            ("stream 7 (NVTX ranges)", 12)
        ]
    );
    // Each beside its stream, under the stream's context, on the stream's Chrome row.
    let tl = cutr_viewer_export::Timeline::build(&t, 2_000);
    for tr in tl.tracks.iter().filter(|tr| matches!(tr.role, TrackRole::StreamRanges { .. })) {
        let stream = tl.tracks.iter().find(|s| s.name == tr.name.replace(" (NVTX ranges)", "")).unwrap();
        assert_eq!(tl.tracks[tr.parent.unwrap() as usize].name, "context 1");
        assert_eq!((tr.parent, tr.json_pid, tr.json_tid), (stream.parent, stream.json_pid, stream.json_tid));
    }
    assert_eq!(int(&r[3]) as usize, t.ranges.len());
    assert_eq!(t.ranges.len(), 106);

    let json = dir.path().join("t.json");
    export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    let r = trace_processor(
        &json,
        &[
            STATS,
            by_name,
            &format!(
                "select count(*) from slice s join slice p on s.parent_id = p.id \
                 where s.{ops} and p.category = 'gpu_user_annotation'"
            ),
            "select count(*) from slice s join slice p on s.parent_id = p.id \
             where s.ts < p.ts or s.ts + s.dur > p.ts + p.dur",
        ],
    );
    assert_eq!(r[0], Vec::<Vec<Value>>::new(), "import errors: {:?}", r[0]);
    // Perfetto v20 reads a `dur` of `18.123` as int64(18.123 * 1000.0), which truncates (viewers.rs): the same
    // arithmetic on the model's spans gives its sums.
    let mut v20: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for g in gpu_spans(&t) {
        let d = g.end - g.start;
        let us: f64 = format!("{}.{:03}", d / 1000, d % 1000).parse().unwrap();
        let e = v20.entry(t.names.get(t.ranges[g.range as usize].name)).or_default();
        *e = (e.0 + 1, e.1 + (us * 1000.0) as i64);
    }
    let read: BTreeMap<&str, (i64, i64)> =
        r[1].iter().map(|x| (x[0].as_str().unwrap(), (x[1].as_i64().unwrap(), x[2].as_i64().unwrap()))).collect();
    assert_eq!(read, v20);
    assert_eq!(int(&r[2]), 169, "every op nested in its range's span");
    assert_eq!(int(&r[3]), 0, "every slice inside its parent");
}

/// A recording without NVTX ranges gets no span and no track for them.
#[test]
fn a_recording_without_ranges_gets_no_span_tracks() {
    let (_, t) = fixture("counter_workload.cutr");
    assert!(t.ranges.is_empty());
    let tl = cutr_viewer_export::Timeline::build(&t, 2_000);
    assert!(tl.annotations.is_empty());
    assert!(!tl.tracks.iter().any(|tr| matches!(tr.role, TrackRole::StreamRanges { .. })));
}

/// Kineto's header keys: `trace_id` from the recording (the same for every conversion of it, a window
/// included), `displayTimeUnit` that JSON readers decode but Perfetto v20 does not rescale by.
#[test]
fn chrome_header_has_a_trace_id_and_display_unit() {
    let dir = tempfile::tempdir().unwrap();
    let header = |files: &[&str], filter: cutr_model::Filter| -> (String, Value) {
        let paths: Vec<PathBuf> = files.iter().map(|f| cutr_tests::repo().join("fixtures").join(f)).collect();
        let t = load(&paths, &LoadOptions { filter }).unwrap();
        let out = dir.path().join("h.json");
        export(&t, &out, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        (text, doc)
    };
    let (text, doc) = header(&["cuda_workload.cutr"], Default::default());
    assert_eq!(doc["trace_id"], "5ddb378ece902346");
    assert_eq!(doc["displayTimeUnit"], "ms");
    assert!(!text.contains("\"displayTimeUnit\""), "Perfetto v20 would read every ts as ms");
    // The id of the recording: the same when only its kernels are kept.
    let kernels = cutr_model::Filter { kinds: vec![10], ..Default::default() };
    let (_, cut) = header(&["cuda_workload.cutr"], kernels);
    assert_eq!(cut["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "gpu_memcpy").count(), 0);
    assert_eq!(cut["trace_id"], "5ddb378ece902346");
    // Other recordings, or several at once, have their own.
    let (_, other) = header(&["cuda_workload_events.cutr"], Default::default());
    let (_, both) = header(&["cuda_workload.cutr", "cuda_workload_events.cutr"], Default::default());
    let ids = [&doc["trace_id"], &other["trace_id"], &both["trace_id"]];
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2], "{ids:?}");
}
