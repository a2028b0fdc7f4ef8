//! Our Perfetto and Chrome traces read by real outside clients: Perfetto's trace processor (on both files),
//! Perfetto's own protobuf schema, and Holistic Trace Analysis, against the synthetic generator's exact truth.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cutr_model::{LoadOptions, load};
use cutr_synth::{SynthOptions, SynthTruth, write_file};
use cutr_tests::{int, python_tool, trace_processor};
use cutr_viewer_export::timeline::TrackRole;
use cutr_viewer_export::{ExportOptions, Format, export};

use cutr_tests::IMPORT_PROBLEMS as STATS;

struct Case {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    cutr: PathBuf,
    truth: SynthTruth,
}

fn case(records: u64) -> Case {
    let dir = tempfile::tempdir().unwrap();
    let cutr = dir.path().join("s.cutr");
    let truth = write_file(&cutr, SynthOptions { records, buffer_bytes: 256 << 10, ..Default::default() }).unwrap();
    Case { dir: dir.path().to_path_buf(), _dir: dir, cutr, truth }
}

fn convert(c: &Case, format: Format, name: &str, shard_slices: usize) -> PathBuf {
    let t = load(std::slice::from_ref(&c.cutr), &LoadOptions::default()).unwrap();
    let out = c.dir.join(name);
    export(&t, &out, &ExportOptions { format, shard_slices, ..Default::default() }).unwrap();
    out
}

/// Demangled kernel name -> (count, total ns) from the generator's truth.
fn kernels_by_display_name(t: &SynthTruth) -> BTreeMap<String, (i64, i64)> {
    t.kernels.iter().map(|(k, v)| (cutr_model::demangle::demangle(k), (v.0 as i64, v.1 as i64))).collect()
}

fn rows_by_name(rows: &[Vec<serde_json::Value>]) -> BTreeMap<String, (i64, i64)> {
    rows.iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), (r[1].as_i64().unwrap(), r[2].as_i64().unwrap())))
        .collect()
}

/// Slices a generated trace converts to: GPU work, API calls, NVTX ranges, synchronizations, CUPTI overhead, the
/// recording-health slice, and the NVTX ranges' `gpu_spans` over the work they launched.
fn slices_expected(t: &SynthTruth, gpu_spans: usize) -> u64 {
    let kinds = |k: &[u32]| k.iter().map(|k| t.records_per_kind.get(k).copied().unwrap_or(0)).sum::<u64>();
    kinds(&[10, 1, 2, 5, 4, 38, 17]) + t.nvtx_ranges.values().sum::<u64>() + 1 + gpu_spans as u64
}

#[test]
fn perfetto_trace_processor_reads_our_protobuf_exactly() {
    let c = case(20_000);
    let t = &c.truth;
    // Small shards: many sequences, each with its own interning and delta clock, must concatenate correctly.
    let pf = convert(&c, Format::Perfetto, "s.pftrace", 3_000);
    let gpu = t.records_per_kind[&10] + t.records_per_kind[&1] + t.records_per_kind[&2];
    let api = t.records_per_kind[&5] + t.records_per_kind[&4];
    let ranges: u64 = t.nvtx_ranges.values().sum();
    let r = trace_processor(
        &pf,
        &[
            STATS,
            "select count(*) from slice s join track t on s.track_id = t.id where t.name like 'stream %' \
             and t.name not like '%(sync)%' and t.name not like '%(NVTX ranges)%'",
            "select count(*) from slice s join thread_track tt on s.track_id = tt.id",
            "select count(*) from slice s join thread_track tt on s.track_id = tt.id \
             where s.category = 'user_annotation'",
            "select count(*) from slice s join track t on s.track_id = t.id where t.name like 'stream % (sync)%' \
             or t.name like 'syncs (context%'",
            "select count(*) from flow",
            "select name, count(*), sum(dur) from slice where category = 'kernel' group by name",
            "select count(*) from slice where dur < 0",
            "select s.name from slice s join track t on s.track_id = t.id where t.name = 'cutr: recording health'",
            "select count(*) from slice where depth > 0 and category = 'cuda_runtime'",
            "select a.key, a.int_value from slice s join args a using (arg_set_id) where s.name like '%cunn_SoftMaxForward%' \
             and a.key like 'debug.grid%' group by a.key order by a.key",
            "select count(distinct name) from thread",
        ],
    );
    assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "import errors: {:?}", r[0]);
    assert_eq!(int(&r[1]) as u64, gpu, "GPU slices on stream tracks");
    assert_eq!(int(&r[2]) as u64, api + ranges, "API calls and NVTX ranges on thread tracks");
    assert_eq!(int(&r[3]) as u64, ranges);
    assert_eq!(int(&r[4]) as u64, t.records_per_kind[&38], "syncs on their streams' sync tracks");
    assert_eq!(
        int(&r[5]) as u64,
        t.gpu_records_with_api + t.records_per_kind[&38],
        "one arrow per GPU record with a launching call, and per sync (every generated sync has its call)"
    );
    assert_eq!(rows_by_name(&r[6]), kernels_by_display_name(t), "kernel names (demangled) and their total ns");
    assert_eq!(int(&r[7]), 0);
    assert_eq!(r[8][0][0], "recording complete: nothing lost");
    // NVTX ranges enclose the launches: runtime calls nest under them (depth > 0).
    assert!(int(&r[9]) as u64 >= t.steps * 14);
    assert_eq!(
        serde_json::json!(r[10]),
        serde_json::json!([["debug.grid[0]", 256], ["debug.grid[1]", 1], ["debug.grid[2]", 1]])
    );

    // Shards cut through open slices (the step ranges around the calls): the trace processor must see exactly
    // the slices (ts, dur, depth) that one shard per track gives.
    let trace = load(std::slice::from_ref(&c.cutr), &LoadOptions::default()).unwrap();
    let lay = cutr_viewer_export::Timeline::build(&trace, 3_000);
    let handed_on = lay.shards.iter().filter(|s| s.open_len > 0).count();
    // Exact for this seed: 14 shards, 2 of them cut inside an open step range, 2 the NVTX ranges' GPU spans'.
    assert_eq!((lay.shards.len(), handed_on), (14, 2), "(shards, shards that start inside an open range)");
    let role = |s: &cutr_viewer_export::timeline::ShardRange| &lay.tracks[s.track as usize].role;
    let span_shards = lay.shards.iter().filter(|s| matches!(role(s), TrackRole::StreamRanges { .. })).count();
    assert_eq!(span_shards, 2);
    // The whole-track conversion also writes plain packets: the default compressed packets must read the same.
    let plain = load(std::slice::from_ref(&c.cutr), &LoadOptions::default()).unwrap();
    let whole = c.dir.join("whole.pftrace");
    let opts = ExportOptions { shard_slices: usize::MAX, compress_packets: false, ..Default::default() };
    export(&plain, &whole, &opts).unwrap();
    let all_slices = "select t.name, s.ts, s.dur, s.depth, s.name, s.category from slice s \
                      join track t on s.track_id = t.id order by t.id, s.ts, s.depth";
    let (a, b) = (trace_processor(&pf, &[all_slices]), trace_processor(&whole, &[all_slices]));
    let gpu_spans = cutr_model::nvtx_spans::gpu_spans(&trace).len();
    assert_eq!(a[0].len() as u64, slices_expected(t, gpu_spans));
    assert!(a[0] == b[0], "small shards of compressed packets and plain whole tracks give different slices");

    // Perfetto's own schema parses every byte, inside the compressed packets too.
    let slices = slices_expected(t, gpu_spans);
    for (file, wrappers) in [(&pf, 22), (&whole, 0)] {
        let p = python_tool("proto_check.py", &[file.as_os_str()], &[]);
        assert_eq!(p["unknown_fields"], 0, "{p}");
        assert_eq!(p["track_event_types"]["TYPE_SLICE_BEGIN"].as_u64().unwrap(), slices);
        assert_eq!(p["track_event_types"]["TYPE_SLICE_END"].as_u64().unwrap(), slices);
        // Exact for this seed: one wrapper per 128 KiB of packets, shard by shard; nothing beside them.
        assert_eq!(
            (p["compressed_wrappers"].as_u64(), p["wrappers_with_other_fields"].as_u64()),
            (Some(wrappers), Some(0))
        );
    }
}

#[test]
fn chrome_json_loads_in_perfetto_and_hta_with_our_numbers() {
    let c = case(20_000);
    let t = &c.truth;
    let json = convert(&c, Format::Chrome, "s.json", 4_000);
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(text.starts_with("{\"traceEvents\": ["), "traceEvents first, as Perfetto v20 requires");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(doc["schemaVersion"], 1);
    // Kineto's display unit, its key escaped so that Perfetto v20 does not rescale every timestamp by it (the
    // kernel sums below would be 1000x).
    assert_eq!(doc["displayTimeUnit"], "ms");
    assert!(!text.contains("\"displayTimeUnit\""));
    let gpu = t.records_per_kind[&10] + t.records_per_kind[&1] + t.records_per_kind[&2];
    let r = trace_processor(
        &json,
        &[
            STATS,
            "select count(*) from slice where category in ('kernel', 'gpu_memcpy', 'gpu_memset')",
            "select count(*) from flow",
            "select name, count(*), sum(dur) from slice where category = 'kernel' group by name",
            "select count(*) from thread where name like 'stream % '",
        ],
    );
    assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "import errors: {:?}", r[0]);
    assert_eq!(int(&r[1]) as u64, gpu);
    assert_eq!(int(&r[2]) as u64, t.gpu_records_with_api + t.records_per_kind[&38]);
    // Perfetto v20's JSON importer turns a `dur` of `18.123` into int64(18.123 * 1000.0), which truncates
    // (18122); its per-kernel sums are our exact durations passed through that same arithmetic.
    let model = load(std::slice::from_ref(&c.cutr), &LoadOptions::default()).unwrap();
    let mut v20: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for k in &model.kernels {
        let d = k.end - k.start;
        let us: f64 = format!("{}.{:03}", d / 1000, d % 1000).parse().unwrap();
        let e = v20.entry(model.kernel_name(k).to_string()).or_default();
        e.0 += 1;
        e.1 += (us * 1000.0) as i64;
    }
    assert_eq!(rows_by_name(&r[3]), v20);
    let exact: BTreeMap<String, i64> = v20.keys().map(|k| (k.clone(), kernels_by_display_name(t)[k].1)).collect();
    let lost: i64 = v20.iter().map(|(k, v)| exact[k] - v.1).sum();
    assert!((0..=model.kernels.len() as i64).contains(&lost), "at most 1 ns lost per kernel by the truncation");
    assert_eq!(int(&r[4]), 3, "Kineto's stream row names, trailing space included");

    // HTA's kernel breakdown equals our totals (its ns rounding off, so its sums are our ns as us).
    let hdir = c.dir.join("hta");
    std::fs::create_dir_all(&hdir).unwrap();
    std::fs::copy(&json, hdir.join("rank0.json")).unwrap();
    let h = python_tool("hta_kernels.py", &[hdir.as_os_str()], &[("HTA_DISABLE_NS_ROUNDING", "1")]);
    let mut want = kernels_by_display_name(t);
    let names = |k: (u8, u8, u8)| cutr_model::describe::memcpy_name(k.0, k.1, k.2);
    for (k, v) in &t.memcpys {
        want.insert(names(*k), (v.0 as i64, v.2 as i64));
    }
    want.insert("Memset (Device)".into(), (t.memsets.0 as i64, t.memsets.2 as i64));
    // HTA counts every event with a `stream` arg as GPU work and classifies by name: `Stream Wait Event` sync
    // records (Kineto gives them a stream too) become "kernels"; names containing "Sync" are left out.
    for s in &model.syncs {
        let n = cutr_model::describe::sync_type(s.sync_type);
        if !n.contains("Sync") {
            let e = want.entry(n.to_string()).or_default();
            e.0 += 1;
            e.1 += (s.end - s.start) as i64;
        }
    }
    let got: BTreeMap<String, (i64, i64)> = h["kernels"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), (v["count"].as_i64().unwrap(), (v["sum"].as_f64().unwrap() * 1000.0).round() as i64)))
        .collect();
    assert_eq!(got, want, "HTA's per-kernel breakdown");

    // HTA's default (docs/reference/conventions.md 0.1): timestamps rounded to whole microseconds, start up and
    // end down, so each kernel loses up to 2 us. Its sums are exactly that rounding applied to our events.
    let h = python_tool("hta_kernels.py", &[hdir.as_os_str()], &[]);
    assert_eq!(h["ns_rounding"], true);
    let mut rounded: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for e in doc["traceEvents"].as_array().unwrap() {
        let stream = e["args"]["stream"].as_i64().unwrap_or(-1);
        let name = e["name"].as_str().unwrap_or_default();
        if e["ph"] != "X" || stream < 0 || name.contains("Sync") {
            continue;
        }
        let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        let r = rounded.entry(name.to_string()).or_default();
        r.0 += 1;
        r.1 += ((ts + dur).floor() - ts.ceil()) as i64;
    }
    let got: BTreeMap<String, (i64, i64)> = h["kernels"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), (v["count"].as_i64().unwrap(), v["sum"].as_f64().unwrap() as i64)))
        .collect();
    assert_eq!(got, rounded, "HTA's breakdown with its default rounding");
    let lost_us: i64 = want.values().map(|v| v.1).sum::<i64>() / 1000 - rounded.values().map(|v| v.1).sum::<i64>();
    assert!(lost_us > 0, "rounding loses time: {lost_us} us");
}

fn check_fixture_pair(path: &Path, out: &Path) {
    let t = load(&[path.to_path_buf()], &LoadOptions::default()).unwrap();
    export(&t, out, &ExportOptions { format: Format::Perfetto, ..Default::default() }).unwrap();
}

#[test]
fn real_recordings_import_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["cuda_workload.cutr", "pytorch_loop.cutr", "graph_compile.cutr"] {
        let src = cutr_tests::repo().join("fixtures").join(f);
        let out = dir.path().join(f).with_extension("pftrace");
        check_fixture_pair(&src, &out);
        let r = trace_processor(&out, &[STATS, "select count(*) from slice where dur < 0"]);
        assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "{f}: import errors {:?}", r[0]);
        assert_eq!(int(&r[1]), 0, "{f}");
    }
}

#[test]
fn hta_breakdown_of_a_real_recording_equals_our_stats() {
    let dir = tempfile::tempdir().unwrap();
    let src = cutr_tests::repo().join("fixtures/cuda_workload.cutr");
    let t = load(std::slice::from_ref(&src), &LoadOptions::default()).unwrap();
    let s = cutr_analyses::stats::compute(&t, &Default::default());
    std::fs::create_dir_all(dir.path().join("hta")).unwrap();
    let json = dir.path().join("hta/rank0.json");
    export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    let h = python_tool("hta_kernels.py", &[dir.path().join("hta").as_os_str()], &[("HTA_DISABLE_NS_ROUNDING", "1")]);
    let got: BTreeMap<String, (i64, i64)> = h["kernels"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), (v["count"].as_i64().unwrap(), (v["sum"].as_f64().unwrap() * 1000.0).round() as i64)))
        .collect();
    let mut want: BTreeMap<String, (i64, i64)> =
        s.kernels.iter().map(|k| (k.name.clone(), (k.count as i64, k.total_ns as i64))).collect();
    for m in &s.memory_ops {
        want.insert(m.time.name.clone(), (m.time.count as i64, m.time.total_ns as i64));
    }
    // HTA counts `Stream Wait Event` sync records (they carry a stream) as kernels.
    for sy in &t.syncs {
        if sy.sync_type == 2 {
            let e = want.entry("Stream Wait Event".into()).or_default();
            e.0 += 1;
            e.1 += (sy.end - sy.start) as i64;
        }
    }
    assert_eq!(got, want);
    assert_eq!(got["spin(unsigned long long, unsigned long long*)"], (10, 20_009_843));
}

/// Two ranks of an NCCL all-reduce (two processes, one GPU each, recorded on one host) merge onto one timeline:
/// one host process and one GPU group per rank, each rank's arrows to its own GPU work, nothing mixed up.
#[test]
fn two_ranks_merge_onto_one_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = ["allreduce-588.cutr", "allreduce-589.cutr"]
        .iter()
        .map(|f| cutr_tests::repo().join("fixtures/allreduce").join(f))
        .collect();
    let t = load(&files, &LoadOptions::default()).unwrap();
    let per_rank: Vec<usize> = (0..2).map(|p| t.kernels.iter().filter(|k| k.proc.0 == p).count()).collect();
    let devices: Vec<Vec<u32>> = (0..2)
        .map(|p| {
            let mut d: Vec<u32> = t.kernels.iter().filter(|k| k.proc.0 == p).map(|k| k.device).collect();
            d.sort();
            d.dedup();
            d
        })
        .collect();
    assert_eq!(devices, vec![vec![0], vec![1]], "rank r ran on GPU r");
    let gpu_ops = t.kernels.len() + t.memcpys.len() + t.memsets.len();
    // Each (rank, device) with GPU work or allocations is a GPU group (PyTorch also touches GPU 0 from rank 1).
    let mut groups: Vec<(cutr_model::ProcId, u32)> = t
        .memcpys
        .iter()
        .map(|k| (k.proc, k.device))
        .chain(t.kernels.iter().map(|k| (k.proc, k.device)))
        .chain(t.memsets.iter().map(|k| (k.proc, k.device)))
        .chain(t.memory.iter().map(|k| (k.proc, k.device)))
        .collect();
    groups.sort();
    groups.dedup();
    let flows = t.kernels.iter().filter(|k| t.launcher(k.corr()).is_some()).count()
        + t.memcpys.iter().filter(|k| t.launcher(k.corr()).is_some()).count()
        + t.memsets.iter().filter(|k| t.launcher(k.corr()).is_some()).count()
        + t.syncs.iter().filter(|s| t.launcher(s.corr()).is_some()).count();
    let out = dir.path().join("job.pftrace");
    let s = export(&t, &out, &ExportOptions::default()).unwrap();
    assert_eq!(s.flows as usize, flows);
    let r = trace_processor(
        &out,
        &[
            STATS,
            "select count(*) from process where name like 'python3%'",
            "select count(*) from process where name like 'GPU %'",
            "select count(*) from slice s join track t on s.track_id = t.id where t.name like 'stream %' \
             and t.name not like '%(sync)%' and t.name not like '%(NVTX ranges)%'",
            "select count(*) from flow",
            "select count(*) from slice where category = 'kernel' and name like 'ncclDevKernel%'",
        ],
    );
    assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "import errors: {:?}", r[0]);
    assert_eq!(int(&r[1]), 2, "one host process per rank");
    assert_eq!(int(&r[2]) as usize, groups.len(), "one GPU group per (rank, device): {groups:?}");
    assert_eq!(int(&r[3]) as usize, gpu_ops);
    assert_eq!(int(&r[4]) as usize, flows);
    assert_eq!(int(&r[5]) as usize, t.kernels.iter().filter(|k| t.names.get(k.name).contains("ncclDevKernel")).count());
    assert!(per_rank.iter().all(|&n| n > 50), "{per_rank:?}");
}

/// Every fixture (and the two ranks merged), both outputs, in the trace processor: no import error, no slice of
/// a GPU row (kernels, copies, memsets, syncs) overlapping or nested in another on its row but the GPU span of the
/// NVTX range that launched it: syncs sit on their stream's sync row (or the device-wide one), and records that
/// overlap go to lanes of their own; and no slice reaching out of its parent.
#[test]
fn gpu_rows_never_overlap_in_any_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let root = cutr_tests::repo().join("fixtures");
    let mut inputs: Vec<Vec<PathBuf>> = [
        "cuda_workload.cutr",
        "pytorch_loop.cutr",
        "pytorch_loop_filtered.cutr",
        "pytorch_loop_kill9.cutr",
        "launch_loop_100k.cutr",
        "regress/base_a.cutr",
        "allreduce/allreduce-588.cutr",
    ]
    .iter()
    .map(|f| vec![root.join(f)])
    .collect();
    inputs.push(vec![root.join("allreduce/allreduce-588.cutr"), root.join("allreduce/allreduce-589.cutr")]);
    let gpu = "category in ('kernel', 'gpu_memcpy', 'gpu_memset', 'cuda_sync')";
    let overlapping = format!(
        "select count(*) from (select ts, dur, lead(ts) over (partition by track_id order by ts, dur desc) as next \
         from slice where {gpu}) where next < ts + dur"
    );
    // Nested only in the span of the NVTX range that launched it (Chrome JSON: on the stream's own row, as Kineto).
    let nested = format!(
        "select count(*) from slice s left join slice p on s.parent_id = p.id where s.{gpu} and s.depth > 0 \
         and p.category != 'gpu_user_annotation'"
    );
    // Perfetto v20 reads a JSON `dur` by truncation (`1025.513` -> 1025512): a span may end 1 ns before its last op.
    let outside = |slack: i64| {
        format!(
            "select count(*) from slice s join slice p on s.parent_id = p.id \
             where s.ts < p.ts or s.ts + s.dur > p.ts + p.dur + {slack}"
        )
    };
    let syncs = "select count(*) from slice where category = 'cuda_sync'";
    for (i, files) in inputs.iter().enumerate() {
        let t = load(files, &LoadOptions::default()).unwrap();
        for format in [Format::Perfetto, Format::Chrome] {
            let out = dir.path().join(format!("{i}.{format:?}"));
            export(&t, &out, &ExportOptions { format, ..Default::default() }).unwrap();
            let outside = outside(i64::from(format == Format::Chrome));
            let r = trace_processor(&out, &[STATS, &overlapping, &nested, syncs, &outside]);
            let what = format!("{files:?} as {format:?}");
            assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "{what}: import errors {:?}", r[0]);
            assert_eq!((int(&r[1]), int(&r[2])), (0, 0), "{what}: overlapping and nested GPU-row slices");
            assert_eq!(int(&r[3]) as usize, t.syncs.len(), "{what}: every sync shown");
            assert_eq!(int(&r[4]), 0, "{what}: slices reaching out of their parents");
        }
    }
}

/// A killed recording says so in both outputs: the health slice is named RECOVERED and carries what is known of
/// the loss as args (Perfetto's too). The Perfetto trace's clock is trace-relative, with its absolute start kept in
/// a REALTIME clock snapshot.
#[test]
fn a_recovered_recording_is_labelled_and_perfetto_time_is_relative_but_absolute_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let f = cutr_tests::repo().join("fixtures/pytorch_loop_kill9.cutr");
    let t = load(std::slice::from_ref(&f), &LoadOptions::default()).unwrap();
    let recovery = t.processes[0].recovery.clone().expect("the fixture was killed");
    let pf = dir.path().join("k.pftrace");
    let json = dir.path().join("k.json");
    export(&t, &pf, &ExportOptions::default()).unwrap();
    export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    let r = trace_processor(
        &pf,
        &[
            "select s.name, s.arg_set_id from slice s join track t on s.track_id = t.id \
             where t.name = 'cutr: recording health'",
            "select a.key, a.string_value from slice s join args a using (arg_set_id) \
             where s.category = 'cutr' and a.key like 'debug.recovered%'",
            "select clock_value from clock_snapshot where clock_name = 'REALTIME'",
            "select min(ts) from slice",
        ],
    );
    let name = r[0][0][0].as_str().unwrap();
    assert!(name.starts_with("RECOVERED: 1 of 1 file(s) not closed cleanly; "), "{name}");
    assert!(name.contains(&format!("{} bytes after their last complete chunk lost", recovery.lost_bytes)), "{name}");
    let recovered_arg = format!("not closed cleanly ({}); {} bytes lost", recovery.reason, recovery.lost_bytes);
    assert_eq!(r[1].len(), 1);
    assert_eq!(r[1][0][1].as_str(), Some(recovered_arg.as_str()));
    // Trace time 0 is the first timestamp floored to the hour; every slice is that far from its absolute time.
    let epoch = cutr_viewer_export::chrome::base_time_ns(t.span().0);
    assert_eq!(r[2][0][0].as_str().map(|v| v.parse::<u64>().unwrap()), Some(epoch));
    assert_eq!(int(&r[3]) as u64 + epoch, t.span().0);
    assert!((int(&r[3]) as u64) < 3_600_000_000_000, "under an hour: exact in a JavaScript double");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let health = doc["traceEvents"].as_array().unwrap().iter().find(|e| e["cat"] == "cutr").unwrap();
    assert_eq!(health["name"].as_str(), Some(name));
    assert_eq!(health["args"][format!("recovered.{}", f.display())].as_str(), Some(recovered_arg.as_str()));
}

/// The all-reduce under torchrun (`fixtures/allreduce_torchrun`: the launcher's recording and one per rank):
/// each rank's recording knows its rank from the launcher's `RANK`/`WORLD_SIZE`; exported alone, each carries it
/// in `distributedInfo`, and HTA reads the two files as ranks 0 and 1 with each rank's own kernels; merged with the
/// launcher's, the processes are labelled by rank, and each GPU's memory in use is the same counter in both outputs.
#[test]
fn torchrun_ranks_reach_hta_and_both_viewers() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = |f: &str| cutr_tests::repo().join("fixtures/allreduce_torchrun").join(f);
    let ranks = [fixture("ar-3373.cutr"), fixture("ar-3374.cutr")];
    let hdir = dir.path().join("hta");
    std::fs::create_dir_all(&hdir).unwrap();
    let mut want: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for (r, f) in ranks.iter().enumerate() {
        let t = load(std::slice::from_ref(f), &LoadOptions::default()).unwrap();
        let rank = t.processes[0].rank().unwrap();
        assert_eq!((rank.rank, rank.world_size), (r as u32, 2));
        let json = hdir.join(format!("rank{r}.json"));
        export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(doc["distributedInfo"]["rank"], r as u64);
        assert_eq!(doc["distributedInfo"]["world_size"], 2);
        for k in &t.kernels {
            let e = want.entry(format!("{}@{r}", t.kernel_name(k))).or_default();
            e.0 += 1;
            e.1 += (k.end - k.start) as i64;
        }
    }
    let h = python_tool("hta_kernels.py", &[hdir.as_os_str()], &[("HTA_DISABLE_NS_ROUNDING", "1")]);
    assert_eq!(h["ranks"], serde_json::json!([0, 1]));
    let got: BTreeMap<String, (i64, i64)> = h["kernels"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v["kernel_type"] != "MEMORY")
        .map(|(k, v)| (k.clone(), (v["count"].as_i64().unwrap(), (v["sum"].as_f64().unwrap() * 1000.0).round() as i64)))
        .collect();
    // HTA counts `Stream Wait Event` records as kernels too; the rest are exactly our kernels per rank.
    let got: BTreeMap<String, (i64, i64)> =
        got.into_iter().filter(|(k, _)| !k.starts_with("Stream Wait Event")).collect();
    assert_eq!(got, want, "HTA's per-rank kernel breakdown");

    let all = [fixture("ar-3326.cutr"), ranks[0].clone(), ranks[1].clone()];
    let t = load(&all, &LoadOptions::default()).unwrap();
    // A point per time an allocation or free changed a GPU's memory in use (frees of memory allocated before
    // recording began change nothing: `memory_in_use`).
    let in_use = cutr_model::memory::memory_in_use(&t);
    let memory_points: i64 = in_use.iter().map(|m| m.points.len() as i64).sum();
    let (json, pftrace) = (dir.path().join("job.json"), dir.path().join("job.pftrace"));
    export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    export(&t, &pftrace, &ExportOptions::default()).unwrap();
    let names = "select distinct name from process where name like 'python3%' order by name";
    let counters = "select count(*), sum(c.value) from counter c join counter_track t on c.track_id = t.id \
                    where t.name like 'device memory in use%'";
    let (j, p) =
        (trace_processor(&json, &[STATS, names, counters]), trace_processor(&pftrace, &[STATS, names, counters]));
    for r in [&j, &p] {
        assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "import errors: {:?}", r[0]);
        assert_eq!(int(&r[2]), memory_points, "one counter value per change of memory in use");
    }
    let labels: Vec<&str> = j[1].iter().map(|r| r[0].as_str().unwrap()).collect();
    // The launcher has no rank: its file name tells it apart.
    assert_eq!(labels, ["python3 (ar-3326.cutr)", "python3 (rank 0)", "python3 (rank 1)"]);
    assert_eq!(j[2][0][1], p[2][0][1], "the same allocated bytes over time in both outputs");
}

/// `cutr_workload --iters 10` recorded with CUDA event records (a default since they were added to the recorder's
/// defaults): each of the 10 `cudaStreamWaitEvent(sA2, evA)` and 10 `cudaEventSynchronize(evB)` joins to the
/// `cudaEventRecord` that recorded its event, and the Chrome trace carries Kineto's `wait_on_*` args with those
/// values: the waited stream is the recording one (sA1 for the stream wait, sB for the event sync).
#[test]
fn event_waits_name_the_record_they_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let src = cutr_tests::repo().join("fixtures/cuda_workload_events.cutr");
    let t = load(std::slice::from_ref(&src), &LoadOptions::default()).unwrap();
    assert_eq!(t.cuda_events.len(), 20, "one record per cudaEventRecord: 2 x iters");
    // Per (sync type, waiting call): how many, and the (waiting stream, recording stream) pairs.
    type Waits = (usize, std::collections::BTreeSet<(u32, u32)>);
    let mut joined: BTreeMap<(u32, String), Waits> = BTreeMap::new();
    let mut want_args = Vec::new();
    for s in t.syncs.iter().filter(|s| s.event != u32::MAX) {
        let e = t.waited_event(s).expect("every event wait finds its recording");
        assert!(e.correlation < s.correlation, "recorded before the wait");
        let rec = t.launcher(e.corr()).expect("the recording's API call");
        let waiter = t.launcher(s.corr()).expect("the wait's API call");
        assert_eq!(t.api_name(rec), "cudaEventRecord");
        assert_eq!(rec.tid, waiter.tid, "each thread waits on its own event");
        let j = joined.entry((s.sync_type, t.api_name(waiter))).or_default();
        j.0 += 1;
        j.1.insert((s.stream, e.stream));
        want_args.push((s.stream as i64, e.stream as i64, e.correlation as i64, s.event as i64));
    }
    let kinds: Vec<(u32, String, usize)> = joined.iter().map(|((k, n), v)| (*k, n.clone(), v.0)).collect();
    assert_eq!(kinds, [(1, "cudaEventSynchronize".to_string(), 10), (2, "cudaStreamWaitEvent".to_string(), 10)]);
    // The event sync has no stream of its own; the stream wait waits on another stream than its own.
    let (sync_streams, wait_streams) = (&joined.values().next().unwrap().1, &joined.values().nth(1).unwrap().1);
    assert_eq!(sync_streams.len(), 1);
    assert_eq!(wait_streams.len(), 1);
    let &(waiting, waited) = wait_streams.iter().next().unwrap();
    assert_ne!(waiting, waited);

    let json = dir.path().join("w.json");
    export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let mut got: Vec<(i64, i64, i64, i64)> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "cuda_sync" && e["args"]["wait_on_cuda_event_id"].is_i64())
        .filter(|e| e["args"]["wait_on_cuda_event_id"] != -1)
        .map(|e| {
            let a = &e["args"];
            let own = a["stream"].as_i64().unwrap_or(-1);
            (
                own,
                a["wait_on_stream"].as_i64().unwrap(),
                a["wait_on_cuda_event_record_corr_id"].as_i64().unwrap(),
                a["wait_on_cuda_event_id"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut want: Vec<(i64, i64, i64, i64)> =
        want_args.iter().map(|&(s, ws, c, ev)| (if s == u32::MAX as i64 { -1 } else { s }, ws, c, ev)).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

/// Host threads carry their OS names (the recorder's `threads` chunks) in both outputs, as Kineto names them:
/// `thread <tid> (<name>)`.
#[test]
fn threads_are_named_by_their_os_names_in_both_outputs() {
    let c = case(5_000);
    let main = cutr_synth::MAIN_THREAD;
    let loader = cutr_synth::LOADER_THREAD;
    let want = vec![format!("thread {loader} (pt_data_loader)"), format!("thread {main} (python3)")];
    for (format, name) in [(Format::Perfetto, "t.pftrace"), (Format::Chrome, "t.json")] {
        let out = convert(&c, format, name, 4_000);
        let r = trace_processor(&out, &["select name from thread where name like 'thread %' order by name"]);
        let got: Vec<String> = r[0].iter().map(|row| row[0].as_str().unwrap().to_string()).collect();
        assert_eq!(got, want, "{format:?}");
    }
}
