//! Unified memory in both viewers, read back by Perfetto's trace processor: a generated recording (the synthetic
//! training loop plus raw `CUpti_ActivityUnifiedMemoryCounter3` records of every kind on two GPUs) and the real
//! H100 recording `fixtures/um_workload.cutr` convert to UM slices whose count and bytes are the model's, rate
//! counters whose integral is the bytes migrated (the fault groups), and memory in use counters whose points and
//! peaks are `memory_in_use_of`'s; HTA reads the same GPU work beside the UM events.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cutr_model::memory::{MemoryClass, memory_in_use_of};
use cutr_model::rows::{UM_CPU, UmKind};
use cutr_model::um::RunningKernels;
use cutr_model::{LoadOptions, Trace, load};
use cutr_schema::kinds;
use cutr_synth::{SynthOptions, write_to_with};
use cutr_tests::{int, trace_processor};
use cutr_viewer_export::timeline::TrackRole;
use cutr_viewer_export::{ExportOptions, Format, Timeline, export};

use cutr_tests::IMPORT_PROBLEMS as STATS;

/// One raw UM record as CUDA 13 lays it out (104 bytes; offsets from the schema's layout table).
#[derive(Clone, Copy)]
struct Raw {
    counter_kind: u32,
    value: u64,
    start: u64,
    end: u64,
    address: u64,
    src: u32,
    dst: u32,
    flags: u32,
    processors: u64,
}

fn encode(records: &[Raw]) -> Vec<u8> {
    let table = cutr_schema::layouts::builtin(130001).unwrap();
    let layout = table.get(kinds::UNIFIED_MEMORY_COUNTER).unwrap();
    let mut buf = Vec::new();
    for r in records {
        let mut rec = vec![0u8; layout.size as usize];
        let mut put = |name: &str, v: u64| {
            let f = layout.field(name).unwrap();
            // `processors` is 5 words: the first holds devices 0-63.
            let (o, s) = (f.offset as usize, (f.size as usize).min(8));
            rec[o..o + s].copy_from_slice(&v.to_le_bytes()[..s]);
        };
        put("kind", kinds::UNIFIED_MEMORY_COUNTER as u64);
        put("counterKind", r.counter_kind as u64);
        put("value", r.value);
        put("start", r.start);
        put("end", r.end);
        put("address", r.address);
        put("srcId", r.src as u64);
        put("dstId", r.dst as u64);
        put("flags", r.flags as u64);
        put("processors", r.processors);
        buf.extend_from_slice(&rec);
    }
    buf
}

/// UM records spread over the loop's time: migrations of 4 KiB to 2 MiB lasting 1 to 60 us on GPUs 0 and 1,
/// every fourth one overlapping the one before; GPU fault groups; CPU faults; and a few thrashing, throttling and
/// remote map records.
fn um_records(t_min: u64, t_max: u64) -> Vec<Raw> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let (n, span) = (2_000u64, t_max - t_min);
    let mut out = Vec::new();
    let mut last_start = t_min;
    for i in 0..n {
        let start = if i % 4 == 3 { last_start + 500 } else { t_min + span * i / n + next(1_000) };
        last_start = start;
        let dur = 1_000 + next(59_000);
        let gpu = (i % 3 == 0) as u32;
        let address = 0x7f00_0000_0000 + next(1 << 30) / 4096 * 4096;
        let bytes = 4096 * (1 + next(512));
        let mut r = Raw {
            counter_kind: 0,
            value: bytes,
            start,
            end: start + dur,
            address,
            src: 0,
            dst: 0,
            flags: 0,
            processors: 0,
        };
        match i % 10 {
            0..=3 => (r.counter_kind, r.src, r.dst, r.flags) = (1, UM_CPU, gpu, 1 + next(4) as u32),
            4 | 5 => (r.counter_kind, r.src, r.dst, r.flags) = (2, gpu, UM_CPU, 2 + next(3) as u32),
            6 | 7 => (r.counter_kind, r.value, r.src, r.flags) = (4, 1 + next(8), gpu, 1 + next(3) as u32),
            8 => (r.counter_kind, r.value, r.end) = (3, 0x40_1000 + next(4096), 0),
            _ => match i % 30 {
                9 => (r.counter_kind, r.end, r.processors) = (5, 0, 0b11),
                19 => (r.counter_kind, r.src) = (6, gpu),
                _ => (r.counter_kind, r.src, r.dst, r.end, r.flags) = (7, UM_CPU, gpu, 0, 3),
            },
        }
        out.push(r);
    }
    out.sort_by_key(|r| r.start);
    out
}

/// A generated training loop with the UM records written as one more activity buffer.
fn recording(dir: &Path) -> (PathBuf, Trace) {
    let path = dir.join("um.cutr");
    let w = cutr_format::Writer::create(&path, Default::default()).unwrap();
    let opts = SynthOptions { records: 5_000, buffer_bytes: 256 << 10, ..Default::default() };
    write_to_with(w, opts, |w, truth| w.write_activity(&encode(&um_records(truth.t_min, truth.t_max))).map(drop))
        .unwrap();
    let t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    (path, t)
}

/// Per UM slice name: (count, bytes), from the model.
fn model_totals(t: &Trace) -> BTreeMap<String, (i64, i64)> {
    let mut m: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for e in &t.um {
        let bytes = match e.kind {
            UmKind::CpuPageFault | UmKind::GpuPageFault | UmKind::Throttling => 0,
            _ => e.value as i64,
        };
        let s = m.entry(cutr_viewer_export::timeline::um_slice_name(e.kind).to_string()).or_default();
        s.0 += 1;
        s.1 += bytes;
    }
    m
}

/// Bytes migrated and GPU page fault groups per (GPU, rate counter name), from the model.
fn migrated(t: &Trace) -> BTreeMap<(i64, String), f64> {
    use cutr_viewer_export::timeline::{rate_unit, um_slice_name};
    let mut m: BTreeMap<(i64, String), f64> = BTreeMap::new();
    for e in t.um.iter().filter(|e| e.kind.is_migration() || e.kind == UmKind::GpuPageFault) {
        let name = format!("{} {}", um_slice_name(e.kind), rate_unit(e.kind));
        *m.entry((e.device().unwrap() as i64, name)).or_default() += e.value as f64;
    }
    m
}

fn rows_to_totals(rows: &[Vec<serde_json::Value>]) -> BTreeMap<String, (i64, i64)> {
    rows.iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), (r[1].as_i64().unwrap(), r[2].as_i64().unwrap_or(0))))
        .collect()
}

fn integrals(rows: &[Vec<serde_json::Value>]) -> BTreeMap<(i64, String), f64> {
    rows.iter()
        .map(|r| ((r[0].as_i64().unwrap(), r[1].as_str().unwrap().to_string()), r[2].as_f64().unwrap()))
        .collect()
}

/// The queries both outputs answer alike, given how each names the args and counter tracks.
fn queries(arg: &str, device_of_process: &str) -> Vec<String> {
    vec![
        STATS.to_string(),
        format!(
            "select s.name, count(*), sum(a.int_value) from slice s left join args a \
             on a.arg_set_id = s.arg_set_id and a.key = '{arg}bytes' where s.category = 'unified_memory' \
             group by s.name order by s.name"
        ),
        // Integral of each rate counter (bytes/s x ns / 1e9 = bytes), per GPU.
        format!(
            "select {device_of_process}, name, sum(v * d) / 1e9 from (select p.pid as ppid, p.name as pname, t.name as name, \
             c.value as v, lead(c.ts) over (partition by c.track_id order by c.ts) - c.ts as d from counter c \
             join process_counter_track t on c.track_id = t.id join process p using (upid) \
             where t.name like 'UM %') where d is not null group by 1, 2 order by 1, 2"
        ),
        // Points and peak of each memory in use counter ("<class> memory in use (bytes)", or "... bytes" from JSON).
        "select replace(replace(t.name, ' (bytes)', ''), ' bytes', ''), count(*), max(c.value) from counter c \
         join counter_track t on c.track_id = t.id where t.name like '% memory in use%' group by 1 order by 1"
            .into(),
        format!(
            "select count(*) from slice s join args a using (arg_set_id) \
             where s.category = 'unified_memory' and a.key = '{arg}kernel'"
        ),
        "select count(*) from slice where category = 'unified_memory' and dur < 0".into(),
        // Overlapping events are in lanes: none overlaps or nests in another on its track.
        "select count(*) from (select ts, dur, depth, lead(ts) over (partition by track_id order by ts, dur desc) \
         as next from slice where category = 'unified_memory') where next < ts + dur or depth > 0"
            .into(),
        "select count(distinct track_id) from slice where category = 'unified_memory'".into(),
    ]
}

/// What the model says the viewers must show.
struct Expected {
    /// Per UM slice name: (count, bytes).
    totals: BTreeMap<String, (i64, i64)>,
    /// Per (GPU, rate counter): the bytes (fault groups) its integral must give.
    integrals: BTreeMap<(i64, String), f64>,
    /// UM events that began while a kernel ran on their GPU (a `kernel` arg each).
    with_kernel: i64,
    /// Per memory in use counter (`device memory in use`): its points and peak.
    memory: BTreeMap<String, (i64, f64)>,
    /// Unified memory tracks, lanes included.
    um_tracks: i64,
}

/// What the model says both outputs must show.
fn expected(t: &Trace, tl: &Timeline) -> Expected {
    let running = RunningKernels::new(t);
    let mut memory = BTreeMap::new();
    for class in [MemoryClass::Device, MemoryClass::Managed, MemoryClass::PinnedHost] {
        for m in memory_in_use_of(t, class) {
            let name = cutr_viewer_export::timeline::memory_counter_name(class).to_string();
            let e = memory.entry(name).or_insert((0, 0.0));
            e.0 += m.points.len() as i64;
            e.1 = f64::max(e.1, m.peak_bytes as f64);
        }
    }
    let um_tracks = (0..tl.tracks.len() as u32)
        .filter(|&i| {
            let base = &tl.tracks[cutr_viewer_export::timeline::base_track(&tl.tracks, i) as usize];
            matches!(base.role, TrackRole::UnifiedMemory { .. } | TrackRole::UnifiedMemoryHost { .. })
        })
        .count() as i64;
    Expected {
        totals: model_totals(t),
        integrals: migrated(t),
        with_kernel: t.um.iter().filter(|e| running.of_um(e).is_some()).count() as i64,
        memory,
        um_tracks,
    }
}

fn memory_rows(rows: &[Vec<serde_json::Value>]) -> BTreeMap<String, (i64, f64)> {
    rows.iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), (r[1].as_i64().unwrap(), r[2].as_f64().unwrap())))
        .collect()
}

#[test]
fn perfetto_trace_processor_reads_unified_memory_with_the_models_totals() {
    let dir = tempfile::tempdir().unwrap();
    let (_, t) = recording(dir.path());
    assert_eq!(t.um.len(), 2_000, "every generated record decoded");
    let tl = Timeline::build(&t, 2_000);
    let want = expected(&t, &tl);
    // Exact for this generator: (count, bytes) of each kind.
    let per_kind: BTreeMap<String, (i64, i64)> = [
        ("UM CPU page fault", (200, 0)),
        ("UM DtoH", (400, 415_404_032)),
        ("UM GPU page fault", (400, 0)),
        ("UM HtoD", (800, 861_429_760)),
        ("UM remote map", (66, 62_529_536)),
        ("UM thrashing", (67, 75_354_112)),
        ("UM throttling", (67, 0)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(want.totals, per_kind);
    // GPU 0 then 1: DtoH bytes, GPU page fault groups, HtoD bytes.
    let per_gpu: Vec<f64> = want.integrals.values().copied().collect();
    assert_eq!(per_gpu, [275_202_048.0, 1172.0, 559_693_824.0, 140_201_984.0, 598.0, 301_735_936.0]);
    assert_eq!(want.with_kernel, 714, "events that began during a kernel on their GPU");
    let device_memory: Vec<(i64, f64)> = want.memory.values().copied().collect();
    assert_eq!(device_memory, [(3, (592u64 << 20) as f64)], "device memory only: the loop's 512 + 64 + 16 MiB");
    // Each GPU's track with its lanes, and the process's.
    assert_eq!(want.um_tracks, 8);
    protobuf_shows(&t, &tl, &want, dir.path());
    chrome_json_shows(&t, &tl, &want, dir.path());
}

/// The real recording (`fixtures/um_workload.cutr`, H100, `um_workload 32`) in both outputs: every UM event,
/// bytes, rate integral and memory counter as the model has them.
#[test]
fn the_real_unified_memory_recording_reaches_both_viewers() {
    let dir = tempfile::tempdir().unwrap();
    let src = cutr_tests::repo().join("fixtures/um_workload.cutr");
    let t = load(std::slice::from_ref(&src), &LoadOptions::default()).unwrap();
    let tl = Timeline::build(&t, 2_000);
    let want = expected(&t, &tl);
    // The program's own account: each buffer's bytes and the bytes its kernel touched.
    let account: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cutr_tests::repo().join("fixtures/um_workload.json")).unwrap()).unwrap();
    let buffers = account["buffers"].as_array().unwrap();
    let sum = |k: &str| buffers.iter().map(|b| b[k].as_i64().unwrap()).sum::<i64>();
    let (touched, managed) = (sum("gpu_bytes"), sum("bytes"));
    assert_eq!((touched, managed), (128 << 20, 224 << 20));
    let per_kind: Vec<(&str, (i64, i64))> = want.totals.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        per_kind,
        [
            ("UM CPU page fault", (768, 0)),
            // The host read back two buffers' 32 MiB.
            ("UM DtoH", (208, 64 << 20)),
            ("UM GPU page fault", (150, 0)),
            ("UM HtoD", (3567, touched)),
        ]
    );
    let integrals: Vec<(&str, f64)> = want.integrals.iter().map(|((_, k), v)| (k.as_str(), *v)).collect();
    assert_eq!(
        integrals,
        [
            ("UM DtoH bytes/s", (64 << 20) as f64),
            ("UM GPU page fault groups/s", 754.0),
            ("UM HtoD bytes/s", touched as f64)
        ]
    );
    assert_eq!(want.with_kernel, 3701, "events during a kernel");
    let memory: Vec<(&str, (i64, f64))> = want.memory.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    // The four managed buffers are all allocated at once, then freed; 8 bytes of device memory (a cudaMalloc).
    assert_eq!(memory, [("device memory in use", (2, 8.0)), ("managed memory in use", (8, managed as f64))]);
    assert_eq!(want.um_tracks, 4, "the GPU's track and its lanes, and the CPU's");
    protobuf_shows(&t, &tl, &want, dir.path());
    chrome_json_shows(&t, &tl, &want, dir.path());
}

/// The protobuf read back: every query of [`queries`] as the model says, integrals within 1e-9 (double
/// rounding: each rate is bytes / duration, summed and multiplied back), and every arg of one migration.
fn protobuf_shows(t: &Trace, tl: &Timeline, want: &Expected, dir: &Path) {
    let pf = dir.join("um.pftrace");
    export(t, &pf, &ExportOptions::default()).unwrap();
    // GPU processes are named "GPU n: ..." (or "GPU n" without metadata).
    let device = "cast(substr(pname, 5, 1) as int)";
    let q = queries("debug.", device);
    let r = trace_processor(&pf, &q.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "import errors: {:?}", r[0]);
    assert_eq!(rows_to_totals(&r[1]), want.totals);
    let got = integrals(&r[2]);
    assert_eq!(got.keys().collect::<Vec<_>>(), want.integrals.keys().collect::<Vec<_>>());
    for (k, bytes) in &want.integrals {
        assert!((got[k] - bytes).abs() <= 1e-9 * bytes, "{k:?}: integral {} of {bytes} bytes", got[k]);
    }
    assert_eq!(memory_rows(&r[3]), want.memory);
    assert_eq!(int(&r[4]), want.with_kernel);
    assert_eq!(
        (int(&r[5]), int(&r[6]), int(&r[7])),
        (0, 0, want.um_tracks),
        "(negative durations, overlaps, UM tracks)"
    );

    // Every arg of the first migration to a GPU during a kernel, as the model has it (the track says the device).
    let running = RunningKernels::new(t);
    let (i, e) =
        t.um.iter().enumerate().find(|(_, e)| e.kind == UmKind::BytesHtoD && running.of_um(e).is_some()).unwrap();
    let args = trace_processor(
        &pf,
        &[&format!(
            "select a.key, coalesce(a.string_value, a.int_value, a.real_value) \
             from slice s join args a using (arg_set_id) where s.name = 'UM HtoD' and s.ts + {} = {} order by a.key",
            cutr_viewer_export::chrome::base_time_ns(tl.span.0),
            e.start
        )],
    );
    let kernel = t.kernel_name(&t.kernels[running.of_um(e).unwrap()]);
    let want_args = serde_json::json!([
        ["debug.address", e.address],
        ["debug.bytes", e.value],
        ["debug.cause", cutr_model::describe::um_migration_cause(e.flags)],
        // An HtoD migration's source is a CPU (CUPTI's CPU id, or the CPU's own number in real records).
        ["debug.destination", format!("GPU {}", e.dst)],
        ["debug.direction", "HtoD"],
        ["debug.kernel", kernel],
        ["debug.memory bandwidth (GB/s)", e.value as f64 / (e.end - e.start) as f64],
        ["debug.source", if e.src == UM_CPU { "CPU".to_string() } else { format!("CPU {}", e.src) }],
    ]);
    assert_eq!(serde_json::json!(args[0]), want_args, "UM event {i}");
}

/// The Chrome JSON read back: the same slices and bytes; counter tracks named "<name> <series>"; timestamps in us
/// with 3 decimals, which Perfetto v20's importer turns to ns as int64(us * 1000.0), truncating: the integral
/// checked is that of our points at those truncated times, itself within 1e-4 of the bytes moved.
fn chrome_json_shows(t: &Trace, tl: &Timeline, want: &Expected, dir: &Path) {
    let json = dir.join("um.json");
    export(t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    // GPU rows' pid is the device (Kineto's convention).
    let q = queries("args.", "ppid");
    let r = trace_processor(&json, &q.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "import errors: {:?}", r[0]);
    assert_eq!(rows_to_totals(&r[1]), want.totals);
    let base = cutr_viewer_export::chrome::base_time_ns(tl.span.0);
    let v20 = |ts: u64| {
        let rel = ts - base;
        let us: f64 = format!("{}.{:03}", rel / 1000, rel % 1000).parse().unwrap();
        (us * 1000.0) as i64
    };
    let got = integrals(&r[2]);
    let mut checked = 0;
    for c in tl.step_counters.iter().filter(|c| c.json_name.starts_with("UM ")) {
        let key = (tl.tracks[c.track as usize].json_pid, format!("{} {}", c.json_name, c.json_series));
        let at_v20: f64 = c.points.windows(2).map(|w| w[0].1 * (v20(w[1].0) - v20(w[0].0)) as f64).sum::<f64>() / 1e9;
        assert!((got[&key] - at_v20).abs() <= 1e-9 * at_v20, "{key:?}: {} vs {at_v20}", got[&key]);
        let bytes = want.integrals[&key];
        assert!((at_v20 - bytes).abs() <= 1e-4 * bytes, "{key:?}: {at_v20} vs {bytes}");
        checked += 1;
    }
    assert_eq!((checked, got.len()), (want.integrals.len(), want.integrals.len()), "every rate counter");
    assert_eq!(memory_rows(&r[3]), want.memory);
    assert_eq!(int(&r[4]), want.with_kernel);
    assert_eq!((int(&r[5]), int(&r[6]), int(&r[7])), (0, 0, want.um_tracks), "a Chrome row per track and lane");
}

/// HolisticTraceAnalysis reads a Chrome JSON with unified memory events as it reads the one without: the same GPU
/// events, streams and kernel breakdown (UM events carry no `stream`, which is how HTA finds GPU work), and the
/// UM events parsed besides.
#[test]
fn hta_sees_the_same_gpu_work_with_unified_memory_events_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_, t) = recording(dir.path());
    let mut without = t.clone();
    without.um.clear();
    let mut hta = Vec::new();
    for (name, trace) in [("with", &t), ("without", &without)] {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        export(trace, &d.join("rank0.json"), &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
        hta.push(cutr_tests::python_tool("hta_kernels.py", &[d.as_os_str()], &[("HTA_DISABLE_NS_ROUNDING", "1")]));
    }
    // Every UM event parsed (2,000 slices), none of them GPU work: 1,583 GPU events in both. 180 events of both
    // are the NVTX ranges' GPU spans (`gpu_user_annotation`, no `stream` either).
    assert_eq!(cutr_model::nvtx_spans::gpu_spans(&t).len(), 180);
    assert_eq!((hta[0]["events_parsed"].as_u64(), hta[1]["events_parsed"].as_u64()), (Some(5_527), Some(3_527)));
    assert_eq!(hta[0]["gpu_events"], 1_583);
    for key in ["gpu_events", "gpu_events_linked", "streams", "kernels", "kernel_types", "other_kernels"] {
        assert_eq!(hta[0][key], hta[1][key], "{key}");
    }
}
