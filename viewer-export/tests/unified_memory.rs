//! Unified memory and device memory in use on an in-memory trace: the tracks and lanes the timeline lays out, the
//! step counters, and the Chrome JSON events and args, exact.

use std::sync::Arc;

use cutr_format::SessionMetadata;
use cutr_format::meta::Device;
use cutr_model::rows::{Kernel, MemoryOp, UM_CPU, UmEvent, UmKind};
use cutr_model::{ProcId, Process, Trace};
use cutr_viewer_export::timeline::{Src, TrackRole, UM_HOST_TID, UM_TID};
use cutr_viewer_export::{ExportOptions, Format, Timeline, export};
use serde_json::{Value, json};

const PID: u32 = 4242;
const BASE: u64 = 0x7f00_0000_0000;

fn um(kind: UmKind, (start, end): (u64, u64), value: u64, (src, dst): (u32, u32), flags: u32) -> UmEvent {
    let address = BASE + start;
    UmEvent { proc: ProcId(0), kind, start, end, value, address, src, dst, flags, pc: 0, processors: 0 }
}

/// A step counter as (track name, Chrome JSON name, its series, points).
type Counter<'a> = (String, &'a str, &'a str, Vec<(u64, f64)>);

fn alloc(ts: u64, address: u64, bytes: u64, free: bool) -> MemoryOp {
    MemoryOp { proc: ProcId(0), ts, device: 0, stream: 7, correlation: 0, address, bytes, free, memory_kind: 3 }
}

/// One process, one GPU, a kernel `touch` over [1000, 5000), and one unified memory event of every kind: two HtoD
/// migrations overlapping each other and a GPU page fault group (three lanes), a DtoH migration after the kernel,
/// a CPU page fault, thrashing, throttling and a remote map; a 1 MiB allocation freed at 8000, a free of
/// memory allocated before recording began, 256 MiB of managed memory and 4 KiB of pinned host memory.
fn trace() -> Trace {
    let mut t = Trace::default();
    let meta = SessionMetadata {
        pid: PID,
        devices: vec![Device { id: 0, name: "Test GPU".into(), ..Default::default() }],
        ..Default::default()
    };
    t.processes.push(Process {
        path: "um.cutr".into(),
        meta: Arc::new(meta),
        pid: PID,
        api_names: Default::default(),
        ..Default::default()
    });
    let name = t.names.intern("touch");
    t.kernels.push(Kernel { start: 1000, end: 5000, stream: 7, name, ..Default::default() });
    let (htod, dtoh) = ((UM_CPU, 0), (0, UM_CPU));
    let mut cpu_fault = um(UmKind::CpuPageFault, (7000, 7000), 0, (UM_CPU, UM_CPU), 0);
    cpu_fault.pc = 0x40_1234;
    let mut thrashing = um(UmKind::Thrashing, (7100, 7100), 2 << 20, (UM_CPU, UM_CPU), 0);
    thrashing.processors = 0b101;
    t.um = vec![
        um(UmKind::BytesHtoD, (1000, 1100), 4096, htod, 2),
        um(UmKind::GpuPageFault, (1000, 1200), 3, (0, 0), 2),
        um(UmKind::BytesHtoD, (1050, 1150), 8192, htod, 3),
        um(UmKind::BytesDtoH, (6000, 6400), 65536, dtoh, 4),
        cpu_fault,
        thrashing,
        um(UmKind::Throttling, (7200, 7300), 0, (0, 0), 0),
        um(UmKind::RemoteMap, (7400, 7400), 4096, htod, 3),
    ];
    let mut managed = alloc(300, 0x7f00_0000_0000, 256 << 20, false);
    managed.memory_kind = 5;
    let mut pinned = alloc(400, 0x5000, 4096, false);
    pinned.memory_kind = 2;
    t.memory = vec![
        managed,
        pinned,
        alloc(500, 0x1000, 1 << 20, false),
        alloc(600, 0x9000, 512, true),
        alloc(8000, 0x1000, 1 << 20, true),
    ];
    t
}

#[test]
fn unified_memory_tracks_lanes_and_counters() {
    let t = trace();
    let tl = Timeline::build(&t, 2_000);
    let um_items: Vec<(String, i64, i64, u64, u64)> = tl
        .items
        .iter()
        .filter(|it| matches!(it.src(), Src::Um(_)))
        .map(|it| {
            let track = &tl.tracks[it.track as usize];
            (track.name.clone(), track.json_pid, track.json_tid, it.start, it.end)
        })
        .collect();
    let lane = |k: i64| UM_TID + k * 10_000_000;
    let um_row =
        |k: i64| if k == 0 { "Unified memory".to_string() } else { format!("Unified memory (overlapping {k})") };
    let host = "Unified memory (CPU)".to_string();
    let pid = PID as i64;
    // Layout order: by track (the host track was made after the GPU's, its lanes last), then start, longer first.
    assert_eq!(
        um_items,
        vec![
            (um_row(0), 0, lane(0), 1000, 1200),
            (um_row(0), 0, lane(0), 6000, 6400),
            (um_row(0), 0, lane(0), 7200, 7300),
            (um_row(0), 0, lane(0), 7400, 7400),
            (host.clone(), pid, UM_HOST_TID, 7000, 7000),
            (host, pid, UM_HOST_TID, 7100, 7100),
            (um_row(1), 0, lane(1), 1000, 1100),
            (um_row(2), 0, lane(2), 1050, 1150),
        ]
    );
    assert_eq!(tl.overflow_lanes, 2);
    let gpu = tl.tracks.iter().position(|tr| matches!(tr.role, TrackRole::Gpu { .. })).unwrap() as u32;
    let um_track = tl.tracks.iter().find(|tr| matches!(tr.role, TrackRole::UnifiedMemory { .. })).unwrap();
    assert_eq!(um_track.parent, Some(gpu), "under the GPU, with its streams");
    // The kernel running on the GPU when each event began (none after it ended, none for the CPU's events).
    assert_eq!(tl.um_kernel, [0, 0, 0, u32::MAX, u32::MAX, u32::MAX, u32::MAX, u32::MAX]);

    let counters: Vec<Counter> = tl
        .step_counters
        .iter()
        .map(|c| (tl.tracks[c.track as usize].name.clone(), c.json_name, c.json_series, c.points.clone()))
        .collect();
    assert_eq!(
        counters,
        vec![
            // The free without an allocation is not subtracted.
            (
                "device memory in use (bytes)".into(),
                "device memory in use",
                "bytes",
                vec![(500, 1048576.0), (8000, 0.0)]
            ),
            // cudaMallocManaged and pinned host memory are not device memory: counters of their own.
            ("managed memory in use (bytes)".into(), "managed memory in use", "bytes", vec![(300, 268435456.0)]),
            ("pinned host memory in use (bytes)".into(), "pinned host memory in use", "bytes", vec![(400, 4096.0)]),
            // 4096 B over 100 ns and 8192 B over 100 ns, half overlapping: 40.96 GB/s, 122.88, 81.92, 0.
            (
                "UM HtoD bytes/s".into(),
                "UM HtoD",
                "bytes/s",
                vec![(1000, 40_960_000_000.0), (1050, 122_880_000_000.0), (1100, 81_920_000_000.0), (1150, 0.0)]
            ),
            // 3 fault groups over 200 ns.
            (
                "UM GPU page fault groups/s".into(),
                "UM GPU page fault",
                "groups/s",
                vec![(1000, 15_000_000.0), (1200, 0.0)]
            ),
            // 65536 B over 400 ns.
            ("UM DtoH bytes/s".into(), "UM DtoH", "bytes/s", vec![(6000, 163_840_000_000.0), (6400, 0.0)]),
        ]
    );
}

fn chrome(t: &Trace) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("um.json");
    export(t, &out, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap()
}

#[test]
fn chrome_json_has_every_unified_memory_event_with_its_args() {
    let doc = chrome(&trace());
    let events = doc["traceEvents"].as_array().unwrap();
    let um: Vec<&Value> = events.iter().filter(|e| e["cat"] == "unified_memory").collect();
    assert_eq!(um.len(), 8);
    assert!(um.iter().all(|e| e["ph"] == "X"));
    // The first event of a name.
    let by_name = |n: &str| {
        let first = um
            .iter()
            .filter(|e| e["name"] == n)
            .min_by(|a, b| a["ts"].as_f64().unwrap().total_cmp(&b["ts"].as_f64().unwrap()));
        first.map(|e| (e["pid"].clone(), e["tid"].clone(), e["args"].clone()))
    };
    let gpu_row = |k: i64| (json!(0), json!(UM_TID + k * 10_000_000));
    let (pid, tid, args) = by_name("UM HtoD").unwrap();
    assert_eq!((pid, tid), gpu_row(1), "the first HtoD overlaps the fault group: its lane's row");
    assert_eq!(
        args,
        json!({"device": 0, "direction": "HtoD", "bytes": 4096, "memory bandwidth (GB/s)": 40.96, "cause": "coherence",
               "address": BASE + 1000, "source": "CPU", "destination": "GPU 0", "kernel": "touch"})
    );
    let (_, _, args) = by_name("UM DtoH").unwrap();
    assert_eq!(
        args,
        json!({"device": 0, "direction": "DtoH", "bytes": 65536, "memory bandwidth (GB/s)": 163.84, "cause": "eviction",
               "address": BASE + 6000, "source": "GPU 0", "destination": "CPU"})
    );
    let (pid, tid, args) = by_name("UM GPU page fault").unwrap();
    assert_eq!((pid, tid), gpu_row(0));
    assert_eq!(
        args,
        json!({"device": 0, "address": BASE + 1000, "access type": "write", "fault groups": 3, "kernel": "touch"})
    );
    let (pid, tid, args) = by_name("UM CPU page fault").unwrap();
    assert_eq!((pid, tid), (json!(PID), json!(UM_HOST_TID)));
    assert_eq!(args, json!({"address": BASE + 7000, "pc": 0x40_1234}));
    let (_, _, args) = by_name("UM thrashing").unwrap();
    assert_eq!(args, json!({"bytes": 2 << 20, "address": BASE + 7100, "processors": "GPU 0, GPU 2"}));
    let (_, _, args) = by_name("UM throttling").unwrap();
    assert_eq!(args, json!({"device": 0, "address": BASE + 7200}));
    let (_, _, args) = by_name("UM remote map").unwrap();
    assert_eq!(
        args,
        json!({"device": 0, "bytes": 4096, "cause": "policy", "address": BASE + 7400, "source": "CPU",
               "destination": "GPU 0"})
    );
    let durations: u64 = um.iter().map(|e| (e["dur"].as_f64().unwrap() * 1000.0).round() as u64).sum();
    assert_eq!(durations, 200 + 100 + 100 + 400 + 100, "the instants last 0");

    // Counters on the GPU's row, in Kineto's counter form: one series each.
    let counters = |name: &str| -> Vec<(f64, f64)> {
        events
            .iter()
            .filter(|e| e["ph"] == "C" && e["name"] == name)
            .map(|e| {
                assert_eq!(e["pid"], 0);
                let (_, v) = e["args"].as_object().unwrap().iter().next().unwrap();
                (e["ts"].as_f64().unwrap(), v.as_f64().unwrap())
            })
            .collect()
    };
    assert_eq!(counters("UM HtoD"), [(1.0, 4.096e10), (1.05, 1.2288e11), (1.1, 8.192e10), (1.15, 0.0)]);
    assert_eq!(counters("UM DtoH"), [(6.0, 1.6384e11), (6.4, 0.0)]);
    assert_eq!(counters("UM GPU page fault"), [(1.0, 1.5e7), (1.2, 0.0)]);
    assert_eq!(counters("device memory in use"), [(0.5, 1048576.0), (8.0, 0.0)]);
    assert_eq!(counters("managed memory in use"), [(0.3, 268435456.0)]);
    assert_eq!(counters("pinned host memory in use"), [(0.4, 4096.0)]);
    let series: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| e["args"].as_object().unwrap().keys().next().unwrap().as_str())
        .collect();
    let rates = ["bytes/s"; 4].into_iter().chain(["groups/s"; 2]).chain(["bytes/s"; 2]);
    assert_eq!(series, ["bytes"; 4].into_iter().chain(rates).collect::<Vec<_>>());

    // The rows are named.
    let mut rows: Vec<(i64, i64, String)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter(|e| e["args"]["name"].as_str().unwrap().starts_with("Unified memory"))
        .map(|e| (e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap(), e["args"]["name"].as_str().unwrap().into()))
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            (0, UM_TID, "Unified memory".into()),
            (0, UM_TID + 10_000_000, "Unified memory (overlapping 1)".into()),
            (0, UM_TID + 20_000_000, "Unified memory (overlapping 2)".into()),
            (PID as i64, UM_HOST_TID, "Unified memory (CPU)".into()),
        ]
    );
}

#[test]
fn a_trace_without_unified_memory_has_no_unified_memory_track() {
    let mut t = trace();
    t.um.clear();
    t.memory.clear();
    let tl = Timeline::build(&t, 2_000);
    assert!(tl.step_counters.is_empty() && tl.um_kernel.is_empty());
    let names: Vec<&str> = tl.tracks.iter().map(|tr| tr.name.as_str()).collect();
    assert_eq!(names, ["cutr: recording health", "pid 4242 (pid 4242)", "GPU 0: Test GPU", "context 0", "stream 7"]);
    let doc = chrome(&t);
    assert!(!doc["traceEvents"].as_array().unwrap().iter().any(|e| e["cat"] == "unified_memory" || e["ph"] == "C"));
}
