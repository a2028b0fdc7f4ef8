//! Writes the trace model as a Perfetto protobuf trace or a Chrome JSON trace (PyTorch profiler conventions),
//! shard by shard in parallel, through `cutr-export`'s writers.

use std::io;
use std::path::Path;
use std::sync::Arc;

use cutr_export::chrome::{self, EventWriter};
use cutr_export::output::Output;
use cutr_export::perfetto::{self as pf, Arg, Shard, TrackDescriptor, TrackKind};
use serde::Serialize;

use crate::layout::{Flows, Item, Layout, Src, TrackRole, flow_id, health_name, process_name};
use crate::model::Trace;
use crate::names;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Perfetto,
    Chrome,
}

#[derive(Clone, Debug)]
pub struct ExportOptions {
    pub format: Format,
    pub gzip: bool,
    /// Perfetto: write the packets as deflate-compressed `compressed_packets` batches (about 4x smaller; read by
    /// every trace processor since 2019). Ignored with `gzip`, which compresses the whole file better.
    pub compress_packets: bool,
    /// Slices per shard (the unit of parallel work).
    pub shard_slices: usize,
    /// Told where the export stands (for a progress bar).
    pub progress: Option<Progress>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            format: Format::Perfetto,
            gzip: false,
            compress_packets: true,
            shard_slices: 50_000,
            progress: None,
        }
    }
}

/// Where an export stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Laying out tracks, lanes and shards.
    Layout,
    /// Writing: `done` of `total` shards are in the file.
    Writing { done: u64, total: u64 },
}

/// A callback told each [`Stage`] as the export reaches it, on the thread that runs [`export`].
#[derive(Clone)]
pub struct Progress(pub Arc<dyn Fn(Stage) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExportSummary {
    pub bytes: u64,
    pub slices: u64,
    pub flows: u64,
    pub tracks: usize,
    pub shards: usize,
    pub overflow_lanes: u32,
}

/// Categories (Kineto's names) and debug-annotation names, indexed by the constants below.
const CATEGORIES: &[&str] =
    &["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "nvtx", "cuda_sync", "overhead", "cutr"];
const C_KERNEL: u16 = 0;
const C_MEMCPY: u16 = 1;
const C_MEMSET: u16 = 2;
const C_RUNTIME: u16 = 3;
const C_DRIVER: u16 = 4;
const C_NVTX: u16 = 5;
const C_SYNC: u16 = 6;
const C_OVERHEAD: u16 = 7;
const C_CUTR: u16 = 8;

const ARG_NAMES: &[&str] = &[
    "External id",
    "queued",
    "device",
    "context",
    "stream",
    "correlation",
    "registers per thread",
    "shared memory",
    "blocks per SM",
    "warps per SM",
    "grid",
    "block",
    "graph id",
    "graph node id",
    "bytes",
    "memory bandwidth (GB/s)",
    "cbid",
    "cuda_sync_kind",
    "event",
    "domain",
    "return value",
    "user annotation",
    "thread",
    "fromDevice",
    "toDevice",
];
const A_EXT: u16 = 0;
const A_QUEUED: u16 = 1;
const A_DEVICE: u16 = 2;
const A_CONTEXT: u16 = 3;
const A_STREAM: u16 = 4;
const A_CORR: u16 = 5;
const A_REGS: u16 = 6;
const A_SMEM: u16 = 7;
const A_BLOCKS_SM: u16 = 8;
const A_WARPS_SM: u16 = 9;
const A_GRID: u16 = 10;
const A_BLOCK: u16 = 11;
const A_GRAPH: u16 = 12;
const A_GRAPH_NODE: u16 = 13;
const A_BYTES: u16 = 14;
const A_BW: u16 = 15;
const A_CBID: u16 = 16;
const A_SYNC_KIND: u16 = 17;
const A_EVENT: u16 = 18;
const A_DOMAIN: u16 = 19;
const A_RET: u16 = 20;
const A_USER: u16 = 21;
const A_THREAD: u16 = 22;
const A_FROM_DEV: u16 = 23;
const A_TO_DEV: u16 = 24;

/// Args of one slice, in Kineto's order. `Str` values borrow from the trace. With `kineto` false (Perfetto), the
/// args that the slice's track, name or arrow already state are left out, as they cost bytes on every slice and
/// add nothing: device, context and stream (the track), blocks and warps per SM (grid and the device's SMs), a
/// zero `queued`, an API call's cbid (its name), and on GPU work with a launching API call its correlation and
/// External id (the same as on that call, which its arrow leads to).
fn slice_args<'t>(
    trace: &'t Trace,
    lay: &Layout,
    it: &Item,
    sms: &dyn Fn(u16, u32) -> Option<u32>,
    kineto: bool,
    out: &mut Vec<Arg<'t>>,
) {
    use pf::Value::*;
    out.clear();
    let ext = |proc: u16, corr: u32| trace.external_ids(proc, corr);
    // Perfetto: GPU work shows its correlation and External id only when no API call (arrow) carries them.
    let own_ids = |proc: u16, corr: u32| kineto || trace.launcher_index(proc, corr).is_none();
    // Copies and memsets share their args: (proc, device, context, stream, correlation), bytes, (start, end).
    let memory_op = |out: &mut Vec<Arg<'t>>,
                     (proc, device, context, stream, corr): (u16, u32, u32, u32, u32),
                     bytes: u64,
                     (s, e): (u64, u64)| {
        let own = own_ids(proc, corr);
        let (op, _) = ext(proc, corr);
        if op != 0 && own {
            out.push(Arg { key: A_EXT, value: UInt(op) });
        }
        if kineto {
            out.push(Arg { key: A_DEVICE, value: UInt(device as u64) });
            out.push(Arg { key: A_CONTEXT, value: UInt(context as u64) });
            out.push(Arg { key: A_STREAM, value: UInt(stream as u64) });
        }
        if own {
            out.push(Arg { key: A_CORR, value: UInt(corr as u64) });
        }
        out.push(Arg { key: A_BYTES, value: UInt(bytes) });
        let bw = if e > s { Double(bytes as f64 / (e - s) as f64) } else { Str("N/A") };
        out.push(Arg { key: A_BW, value: bw });
    };
    match it.src() {
        Src::Kernel(i) => {
            let k = &trace.kernels[i as usize];
            let own = own_ids(k.proc, k.correlation);
            let (op, user) = ext(k.proc, k.correlation);
            if op != 0 && own {
                out.push(Arg { key: A_EXT, value: UInt(op) });
            }
            if user != 0 {
                out.push(Arg { key: A_USER, value: UInt(user) });
            }
            if kineto || k.queued != 0 {
                out.push(Arg { key: A_QUEUED, value: UInt(k.queued) });
            }
            if kineto {
                out.push(Arg { key: A_DEVICE, value: UInt(k.device as u64) });
                out.push(Arg { key: A_CONTEXT, value: UInt(k.context as u64) });
                out.push(Arg { key: A_STREAM, value: UInt(k.stream as u64) });
            }
            if own {
                out.push(Arg { key: A_CORR, value: UInt(k.correlation as u64) });
            }
            out.push(Arg { key: A_REGS, value: UInt(k.registers as u64) });
            out.push(Arg { key: A_SMEM, value: Int(k.static_smem as i64 + k.dynamic_smem as i64) });
            if let Some(n) = sms(k.proc, k.device).filter(|&n| n > 0 && kineto) {
                let blocks = k.grid.iter().map(|&g| g.max(0) as u64).product::<u64>() as f64 / n as f64;
                let threads = k.block.iter().map(|&b| b.max(0) as u64).product::<u64>() as f64;
                out.push(Arg { key: A_BLOCKS_SM, value: Double(blocks) });
                out.push(Arg { key: A_WARPS_SM, value: Double(blocks * threads / 32.0) });
            }
            out.push(Arg { key: A_GRID, value: Int3([k.grid[0] as i64, k.grid[1] as i64, k.grid[2] as i64]) });
            out.push(Arg { key: A_BLOCK, value: Int3([k.block[0] as i64, k.block[1] as i64, k.block[2] as i64]) });
            if k.graph_id != 0 {
                out.push(Arg { key: A_GRAPH, value: UInt(k.graph_id as u64) });
                out.push(Arg { key: A_GRAPH_NODE, value: UInt(k.graph_node_id) });
            }
        }
        Src::Memcpy(i) => {
            let m = &trace.memcpys[i as usize];
            memory_op(out, (m.proc, m.device, m.context, m.stream, m.correlation), m.bytes, (m.start, m.end));
            if let Some((from, to)) = m.peer {
                out.push(Arg { key: A_FROM_DEV, value: UInt(from as u64) });
                out.push(Arg { key: A_TO_DEV, value: UInt(to as u64) });
            }
        }
        Src::Memset(i) => {
            let m = &trace.memsets[i as usize];
            memory_op(out, (m.proc, m.device, m.context, m.stream, m.correlation), m.bytes, (m.start, m.end));
        }
        Src::Api(i) => {
            let a = &trace.apis[i as usize];
            let (op, _) = ext(a.proc, a.correlation);
            if op != 0 {
                out.push(Arg { key: A_EXT, value: UInt(op) });
            }
            if kineto {
                out.push(Arg { key: A_CBID, value: UInt(a.cbid as u64) });
            }
            out.push(Arg { key: A_CORR, value: UInt(a.correlation as u64) });
            if a.return_value != 0 {
                out.push(Arg { key: A_RET, value: UInt(a.return_value as u64) });
            }
        }
        Src::Range(i) => {
            let r = &trace.ranges[i as usize];
            if r.domain != 0 {
                out.push(Arg { key: A_DOMAIN, value: Str(trace.names.get(r.domain)) });
            }
        }
        Src::Sync(i) => {
            let s = &trace.syncs[i as usize];
            let (op, _) = ext(s.proc, s.correlation);
            // Kineto: an unlinked sync record carries its own correlation id as External id.
            out.push(Arg { key: A_EXT, value: UInt(if op != 0 { op } else { s.correlation as u64 }) });
            out.push(Arg { key: A_SYNC_KIND, value: Str(names::sync_type(s.sync_type)) });
            out.push(Arg { key: A_STREAM, value: Int(if s.stream == u32::MAX { -1 } else { s.stream as i64 }) });
            out.push(Arg { key: A_CORR, value: UInt(s.correlation as u64) });
            out.push(Arg { key: A_CONTEXT, value: UInt(s.context as u64) });
            if s.event != u32::MAX {
                out.push(Arg { key: A_EVENT, value: UInt(s.event as u64) });
            }
        }
        Src::Overhead(i) => {
            let o = &trace.overheads[i as usize];
            if o.object_kind == 2 {
                out.push(Arg { key: A_THREAD, value: UInt(o.tid as u64) });
            }
        }
        Src::Health => {}
    }
    let _ = lay;
}

/// Name id and category of a slice.
fn slice_name(trace: &Trace, lay: &Layout, it: &Item) -> (u32, u16) {
    match it.src() {
        Src::Kernel(i) => (trace.display_name_id(trace.kernels[i as usize].name), C_KERNEL),
        Src::Memcpy(i) => {
            let m = &trace.memcpys[i as usize];
            (lay.labels.memcpy[&(m.copy_kind, m.src_kind, m.dst_kind)], C_MEMCPY)
        }
        Src::Memset(i) => (lay.labels.memset[&trace.memsets[i as usize].memory_kind], C_MEMSET),
        Src::Api(i) => {
            let a = &trace.apis[i as usize];
            (lay.labels.api[&(a.proc, a.driver, a.cbid)], if a.driver { C_DRIVER } else { C_RUNTIME })
        }
        Src::Range(i) => (trace.ranges[i as usize].name, C_NVTX),
        Src::Sync(i) => (lay.labels.sync[&trace.syncs[i as usize].sync_type], C_SYNC),
        Src::Overhead(i) => (lay.labels.overhead[&trace.overheads[i as usize].kind], C_OVERHEAD),
        Src::Health => (lay.labels.health, C_CUTR),
    }
}

/// The arrow ending at a GPU record, if its launching API call is known.
fn flow_in(trace: &Trace, lay: &Layout, it: &Item) -> Option<u64> {
    let f = &lay.flows;
    let (k, proc, corr) = match it.src() {
        Src::Kernel(i) => (f.kernel[i as usize], trace.kernels[i as usize].proc, trace.kernels[i as usize].correlation),
        Src::Memcpy(i) => (f.memcpy[i as usize], trace.memcpys[i as usize].proc, trace.memcpys[i as usize].correlation),
        Src::Memset(i) => (f.memset[i as usize], trace.memsets[i as usize].proc, trace.memsets[i as usize].correlation),
        _ => return None,
    };
    (k != Flows::NONE).then(|| flow_id(proc, corr, k))
}

/// The arrows starting at an API call (one per GPU record it launched), into `out`.
fn flows_out(trace: &Trace, lay: &Layout, it: &Item, out: &mut Vec<u64>) {
    out.clear();
    if let Src::Api(i) = it.src() {
        let a = &trace.apis[i as usize];
        out.extend((0..lay.flows.api[i as usize]).map(|k| flow_id(a.proc, a.correlation, k)));
    }
}

/// SM count of each recorded device (from the file's metadata), for Kineto's per-SM args.
fn sm_counts(trace: &Trace) -> impl Fn(u16, u32) -> Option<u32> + Sync + use<> {
    let table: rustc_hash::FxHashMap<(u16, u32), u32> = trace
        .processes
        .iter()
        .enumerate()
        .flat_map(|(p, pr)| pr.meta.devices.iter().map(move |d| ((p as u16, d.id), d.multiprocessors.max(0) as u32)))
        .collect();
    move |proc: u16, device: u32| table.get(&(proc, device)).copied()
}

/// The args of the health slice: every loss counter, join failure and file problem.
fn health_args(trace: &Trace) -> Vec<(String, String)> {
    let loss = trace.loss();
    let mut v: Vec<(String, String)> =
        loss.entries().iter().map(|(k, n)| (format!("loss.{k}"), n.to_string())).collect();
    let stats = serde_json::to_value(&trace.stats).unwrap_or_default();
    if let Some(o) = stats.as_object() {
        for (k, n) in o {
            v.push((format!("joins.{k}"), n.to_string()));
        }
    }
    for p in &trace.processes {
        for prob in &p.problems {
            v.push((format!("problem.{}", p.path.display()), prob.to_string()));
        }
    }
    for n in &loss.notes {
        v.push(("note".into(), n.clone()));
    }
    v
}

/// Slices per shard for a trace of about `slices` slices. The cut depends on the trace alone, never on the
/// machine, so a recording converts to the same bytes on any number of cores. At least [`SPREAD_SHARDS`] shards,
/// so that small traces spread over 16 workers (one track's shard is written by one thread, and on 16 cores a
/// 20k-slice recording cut at 50,000 was written by its largest track's thread alone), but no fewer than 2,000
/// slices (each shard repeats its interned names and clock snapshot) and no more than 50,000, or 4,000 for Chrome
/// JSON: two windows of two shards per worker are held at once, and a Chrome event is ~450 bytes (10M generated
/// records: 451 per slice), so 16 workers held 2.5 GB (2.9x the records) at 50,000 and ~1.4 GB at 4,660.
pub fn shard_slices_for(slices: usize, format: Format) -> usize {
    let most = match format {
        Format::Perfetto => 50_000,
        Format::Chrome => 4_000,
    };
    (slices / SPREAD_SHARDS).clamp(2_000, most)
}

/// Four shards for each of 16 workers.
const SPREAD_SHARDS: usize = 64;

/// Writes `trace` to `path`.
pub fn export(trace: &mut Trace, path: &Path, opts: &ExportOptions) -> io::Result<ExportSummary> {
    if let Some(p) = &opts.progress {
        (p.0)(Stage::Layout);
    }
    if let Some(why) = crate::layout::too_large(trace) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{why}; use --start/--end or --kinds")));
    }
    let lay = Layout::build(trace, opts.shard_slices.max(1));
    crate::phase::mark("layout");
    crate::phase::note(|| {
        let largest = lay.shards.iter().map(|s| s.end - s.start).max().unwrap_or(0);
        format!("{} shards of {} slices, largest {largest}", lay.shards.len(), lay.items.len())
    });
    let trace: &Trace = trace;
    let _s = crate::phase::span(|| "create output".into());
    let mut out = Output::create(path, opts.gzip)?;
    drop(_s);
    if let Some(p) = opts.progress.clone() {
        // Perfetto writes one shard more than the layout has: the side events (counters, instants).
        let total = lay.shards.len() as u64 + u64::from(opts.format == Format::Perfetto);
        let mut done = 0;
        (p.0)(Stage::Writing { done, total });
        out.on_progress(move |n| {
            done += n as u64;
            (p.0)(Stage::Writing { done, total });
        });
    }
    match opts.format {
        Format::Perfetto => write_perfetto(trace, &lay, &mut out, opts.compress_packets && !opts.gzip)?,
        Format::Chrome => write_chrome(trace, &lay, &mut out, path)?,
    }
    let _s = crate::phase::span(|| "finish output".into());
    let bytes = out.finish()?;
    drop(_s);
    crate::phase::mark("write");
    Ok(ExportSummary {
        bytes,
        slices: lay.items.len() as u64,
        flows: lay.flows.total,
        tracks: lay.tracks.len(),
        shards: lay.shards.len(),
        overflow_lanes: lay.overflow_lanes,
    })
}

fn write_perfetto(trace: &Trace, lay: &Layout, out: &mut Output, compress: bool) -> io::Result<()> {
    let uuid = |t: u32| t as u64 + 1;
    let mut desc = Vec::new();
    let descriptors: Vec<TrackDescriptor> = lay
        .tracks
        .iter()
        .enumerate()
        .map(|(i, t)| TrackDescriptor {
            uuid: uuid(i as u32),
            parent: t.parent.map(uuid),
            kind: match &t.role {
                TrackRole::HostProcess { pid, .. } => TrackKind::Process { pid: *pid, name: t.name.clone() },
                TrackRole::Gpu { .. } => TrackKind::Process { pid: t.pid, name: t.name.clone() },
                TrackRole::Thread { pid, tid, .. } => TrackKind::Thread { pid: *pid, tid: *tid, name: t.name.clone() },
                TrackRole::Memory { .. } => TrackKind::Counter { name: t.name.clone(), unit_name: "bytes".into() },
                _ => TrackKind::Custom { name: t.name.clone() },
            },
        })
        .collect();
    pf::write_descriptors(&descriptors, 1, &mut desc);
    out.write(&desc)?;
    let sms = sm_counts(trace);
    let n_shards = lay.shards.len();
    out.write_shards(n_shards + 1, b"", |s| {
        if s == n_shards {
            let _s = crate::phase::span(|| "side events".into());
            return side_events(trace, lay, uuid, compress);
        }
        let range = lay.shards[s];
        let _s = crate::phase::span(|| format!("shard {s} ({} slices)", range.end - range.start));
        let track = uuid(range.track);
        let t0 = lay.items[range.start as usize].start;
        // About 64 bytes per slice (BEGIN, END and args; docs/BENCHMARKS.md measures 60 on a kernel-heavy mix),
        // a quarter of it compressed plus the batch being written.
        let plain = (range.end - range.start) as usize * 64 + 4096;
        let room = if compress { plain / 3 + pf::COMPRESS_BATCH + 4096 } else { plain };
        let mut shard = Shard::new(s as u32 + 2, t0, ARG_NAMES, CATEGORIES).on_track(track).with_capacity(room);
        if compress {
            shard = shard.compressed();
        }
        // One track's slices sorted by (start, longer first) and properly nested: a walk with a stack of open
        // slices emits BEGINs and ENDs in time order, ENDs before BEGINs at equal times. The stack starts with
        // the slices earlier shards left open, and leaves open those the next shard of the track ends.
        let open = range.open_from as usize..(range.open_from + range.open_len) as usize;
        let mut stack: Vec<u64> = lay.open_ends[open].to_vec();
        let mut args = Vec::with_capacity(16);
        let mut out_flows = Vec::new();
        for it in &lay.items[range.start as usize..range.end as usize] {
            while stack.last().is_some_and(|&end| end <= it.start) {
                shard.end(track, stack.pop().unwrap_or_default());
            }
            let (name, cat) = slice_name(trace, lay, it);
            slice_args(trace, lay, it, &sms, false, &mut args);
            // A graph launch starts one arrow per node it ran.
            flows_out(trace, lay, it, &mut out_flows);
            let arrow_in = flow_in(trace, lay, it);
            shard.begin(track, it.start, name, trace.names.get(name), cat, &args, &out_flows, arrow_in);
            stack.push(it.end);
        }
        let until = range.next_start(&lay.items).unwrap_or(u64::MAX);
        while stack.last().is_some_and(|&end| end <= until) {
            shard.end(track, stack.pop().unwrap_or_default());
        }
        shard.into_bytes()
    })?;
    Ok(())
}

/// The side sequence: NVTX marks, memory counters and the health slice's args.
fn side_events(trace: &Trace, lay: &Layout, uuid: impl Fn(u32) -> u64, compress: bool) -> Vec<u8> {
    let mut t0 = lay.span.0;
    if let Some(m) = trace.marks.first() {
        t0 = t0.min(m.ts);
    }
    if let Some(m) = trace.memory.first() {
        t0 = t0.min(m.ts);
    }
    let mut shard = Shard::new(1_000_000, t0, ARG_NAMES, CATEGORIES);
    if compress {
        shard = shard.compressed();
    }
    // Everything here in one time order: marks and memory samples merged.
    let mut evs: Vec<(u64, u8, usize)> = Vec::new();
    for (i, m) in trace.marks.iter().enumerate() {
        evs.push((m.ts, 0, i));
    }
    for (i, m) in trace.memory.iter().enumerate() {
        evs.push((m.ts, 1, i));
    }
    evs.sort_unstable();
    let mut allocated: std::collections::HashMap<(u16, u32), i128> = Default::default();
    let thread_uuid: std::collections::HashMap<(u16, u32), u64> = lay
        .tracks
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match t.role {
            TrackRole::Thread { proc, tid, .. } => Some(((proc, tid), uuid(i as u32))),
            _ => None,
        })
        .collect();
    for (ts, kind, i) in evs {
        if kind == 0 {
            let m = &trace.marks[i];
            if let Some(&u) = thread_uuid.get(&(m.proc, m.tid)) {
                shard.instant(u, ts, m.name, trace.names.get(m.name), C_NVTX, &[]);
            }
        } else {
            let m = &trace.memory[i];
            let a = allocated.entry((m.proc, m.device)).or_default();
            *a += if m.free { -(m.bytes as i128) } else { m.bytes as i128 };
            if let Some(&t) = lay.memory_track.get(&(m.proc, m.device)) {
                shard.counter(uuid(t), ts, (*a).max(0) as f64);
            }
        }
    }
    shard.into_bytes()
}

fn write_chrome(trace: &Trace, lay: &Layout, out: &mut Output, path: &Path) -> io::Result<()> {
    let (first, _) = lay.span;
    let base = chrome::base_time_ns(first);
    let sms = sm_counts(trace);
    out.write(b"{\"traceEvents\": [\n")?;
    out.begin_list();
    let n_shards = lay.shards.len();
    out.write_shards(n_shards, b",\n", |s| {
        let mut buf = Vec::with_capacity(64 << 10);
        let mut w = EventWriter { out: &mut buf, base_ns: base, events: 0 };
        let mut args = Vec::with_capacity(16);
        let mut cargs: Vec<(&str, chrome::Value)> = Vec::with_capacity(16);
        let mut out_flows = Vec::new();
        let range = lay.shards[s];
        for it in &lay.items[range.start as usize..range.end as usize] {
            let t = &lay.tracks[it.track as usize];
            let (name, cat) = slice_name(trace, lay, it);
            slice_args(trace, lay, it, &sms, true, &mut args);
            cargs.clear();
            for a in &args {
                cargs.push((ARG_NAMES[a.key as usize], to_chrome(a.value)));
            }
            if it.src() == Src::Health {
                continue; // written with the metadata
            }
            let (pid, tid) = json_row(trace, lay, it, t);
            w.complete(CATEGORIES[cat as usize], trace.names.get(name), pid, tid, it.start, it.end, &cargs);
            flows_out(trace, lay, it, &mut out_flows);
            for &f in &out_flows {
                w.flow(true, f, pid, tid, it.start);
            }
            if let Some(f) = flow_in(trace, lay, it) {
                w.flow(false, f, pid, tid, it.start);
            }
        }
        buf
    })?;
    // Instants, metadata and the health event.
    let mut buf = Vec::new();
    let mut w = EventWriter { out: &mut buf, base_ns: base, events: 0 };
    for m in &trace.marks {
        let pid = trace.processes[m.proc as usize].pid as i64;
        w.instant("nvtx", trace.names.get(m.name), pid, m.tid as i64, m.ts, false, &[]);
    }
    let hargs = health_args(trace);
    let hargs_ref: Vec<(&str, chrome::Value)> =
        hargs.iter().map(|(k, v)| (k.as_str(), chrome::Value::Str(v.as_str()))).collect();
    w.instant("cutr", &health_name(trace), 0, 0, lay.span.0, true, &hargs_ref);
    metadata_events(trace, lay, &mut w, lay.span.0);
    out.write_item(b",\n", &buf)?;
    out.write(b"\n],\n")?;
    out.write(top_level(trace, base, path).as_bytes())?;
    out.write(b"}\n")?;
    Ok(())
}

fn to_chrome(v: pf::Value<'_>) -> chrome::Value<'_> {
    match v {
        pf::Value::Int(x) => chrome::Value::Int(x),
        pf::Value::UInt(x) => chrome::Value::UInt(x),
        pf::Value::Double(x) => chrome::Value::Double(x),
        pf::Value::Bool(x) => chrome::Value::Int(x as i64),
        pf::Value::Str(s) => chrome::Value::Str(s),
        pf::Value::Int3(a) => chrome::Value::Int3(a),
    }
}

/// Kineto's pid/tid of a slice: GPU rows pid = device, tid = stream; host rows pid = process, tid = thread.
fn json_row(trace: &Trace, lay: &Layout, it: &Item, t: &crate::layout::Track) -> (i64, i64) {
    match it.src() {
        Src::Overhead(i) => (
            trace.processes[trace.overheads[i as usize].proc as usize].pid as i64,
            trace.overheads[i as usize].tid as i64,
        ),
        _ => {
            let _ = lay;
            (t.json_pid, t.json_tid)
        }
    }
}

fn metadata_events(trace: &Trace, lay: &Layout, w: &mut EventWriter<'_>, ts: u64) {
    use chrome::Value::{Int, Str};
    for (i, p) in trace.processes.iter().enumerate() {
        let name = process_name(trace, i as u16);
        let pid = p.pid as i64;
        w.metadata("process_name", pid, 0, ts, "name", Str(&name));
        w.metadata("process_labels", pid, 0, ts, "labels", Str("CPU"));
        w.metadata("process_sort_index", pid, 0, ts, "sort_index", Int(pid));
    }
    let mut gpus: Vec<(&(u16, u32), &i64)> = lay.gpu_json_pid.iter().collect();
    gpus.sort();
    for ((proc, dev), &pid) in gpus {
        let name = process_name(trace, *proc);
        w.metadata("process_name", pid, 0, ts, "name", Str(&name));
        w.metadata("process_labels", pid, 0, ts, "labels", Str(&format!("GPU {dev}")));
        w.metadata("process_sort_index", pid, 0, ts, "sort_index", Int(5_000_000 + pid));
    }
    for t in &lay.tracks {
        match t.role {
            TrackRole::Thread { tid, .. } => {
                w.metadata("thread_name", t.json_pid, t.json_tid, ts, "name", Str(&format!("thread {tid}")));
                w.metadata("thread_sort_index", t.json_pid, t.json_tid, ts, "sort_index", Int(tid as i64));
            }
            TrackRole::Stream { stream, .. } => {
                // Kineto's row name, trailing space included.
                w.metadata("thread_name", t.json_pid, t.json_tid, ts, "name", Str(&format!("stream {stream} ")));
                w.metadata("thread_sort_index", t.json_pid, t.json_tid, ts, "sort_index", Int(stream as i64));
            }
            _ => {}
        }
    }
}

/// The keys after `traceEvents`: Kineto's metadata, then cutr's own (loss, joins, inputs).
fn top_level(trace: &Trace, base: u64, path: &Path) -> String {
    use serde_json::{Value, json};
    let p0 = &trace.processes[0].meta;
    let devices: Vec<Value> = p0
        .devices
        .iter()
        .map(|d| {
            let prop = |k: &str| d.properties.iter().find(|p| p.0 == k).and_then(|p| p.1.parse::<i64>().ok()).unwrap_or(0);
            json!({"id": d.id, "name": d.name, "totalGlobalMem": d.total_memory_bytes, "computeMajor": d.compute_major,
                   "computeMinor": d.compute_minor, "maxThreadsPerBlock": prop("maxThreadsPerBlock"),
                   "maxThreadsPerMultiprocessor": prop("maxThreadsPerMultiprocessor"), "regsPerBlock": prop("regsPerBlock"),
                   "warpSize": prop("warpSize"), "sharedMemPerBlock": prop("sharedMemPerBlock"), "numSms": d.multiprocessors,
                   "regsPerMultiprocessor": prop("regsPerMultiprocessor"), "sharedMemPerBlockOptin": prop("sharedMemPerBlockOptin"),
                   "sharedMemPerMultiprocessor": prop("sharedMemPerMultiprocessor")})
        })
        .collect();
    let env = |k: &str| p0.environment.iter().find(|e| e.0 == k).and_then(|e| e.1.parse::<i64>().ok());
    let mut o = String::new();
    let mut kv = |k: &str, v: Value| {
        o.push_str(&format!("\"{k}\": {},\n", serde_json::to_string(&v).unwrap()));
    };
    kv("schemaVersion", json!(1));
    kv("deviceProperties", Value::Array(devices));
    kv("cupti_version", json!(p0.cupti_api_version));
    kv("cuda_runtime_version", json!(p0.cuda_runtime_version));
    kv("cuda_driver_version", json!(p0.cuda_driver_version));
    kv("baseTimeNanoseconds", json!(base));
    let files: Vec<Value> = trace
        .processes
        .iter()
        .map(|p| json!({"file": p.path.display().to_string(), "pid": p.pid, "host": p.meta.host,
                        "clock_offset_ns": p.time.offset_ns, "problems": p.problems.iter().map(|x| x.to_string()).collect::<Vec<_>>()}))
        .collect();
    kv(
        "cutr",
        json!({"loss": serde_json::to_value(trace.loss().entries().iter().map(|(k, v)| (k.to_string(), *v)).collect::<std::collections::BTreeMap<_, _>>()).unwrap(),
                      "joins": trace.stats, "inputs": files}),
    );
    // HTA finds the rank with the regex `"rank":\s+(\d+)`: keep the space after the colon.
    if let (Some(rank), Some(world)) = (env("RANK"), env("WORLD_SIZE")) {
        o.push_str(&format!(
            "\"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {rank}, \"world_size\": {world}}},\n"
        ));
    }
    o.push_str(&format!("\"traceName\": {}\n", serde_json::to_string(&path.display().to_string()).unwrap()));
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_size_spreads_small_traces_over_the_workers() {
        // The loop fixture's 18,633 slices: 2,000; 10M records' 6.67M: 50,000 (Chrome JSON 4,000).
        for f in [Format::Perfetto, Format::Chrome] {
            assert_eq!(shard_slices_for(18_633, f), 2_000);
            assert_eq!(shard_slices_for(100, f), 2_000);
            assert_eq!(shard_slices_for(0, f), 2_000);
        }
        assert_eq!(shard_slices_for(200_000, Format::Perfetto), 3_125);
        assert_eq!(shard_slices_for(200_000, Format::Chrome), 3_125);
        assert_eq!(shard_slices_for(6_670_261, Format::Perfetto), 50_000);
        assert_eq!(shard_slices_for(6_670_261, Format::Chrome), 4_000);
    }
}
