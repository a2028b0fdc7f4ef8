//! The timeline as a Perfetto protobuf trace: track descriptors first, then each shard as its own packet sequence
//! (one track's slices, BEGIN/END in time order, arrows as flow ids), then a side sequence with NVTX marks and
//! the counters (device memory in use, unified memory migration rates, counter samples), then the findings track's
//! sequence ([`crate::findings`]). Args are Perfetto's own
//! choice: what a slice's track, name or arrow already states is left out.

mod descriptor_fields;
mod encoder;

use std::io;

use cutr_model::Trace;
use cutr_model::timing::timed_with;
use rustc_hash::FxHashMap as HashMap;

use crate::args::{Arg, ArgKey, Category, Value};
use crate::findings::FindingSlice;
use crate::gpu_args;
use crate::output::Output;
use crate::slice;
use crate::timeline::{Item, Src, Timeline, TrackRole, Unit, counter_name, health_args};

pub use encoder::{
    COMPRESS_BATCH, Instant, Name, Shard, SliceBegin, TrackDescriptor, TrackKind, write_descriptors, write_epoch,
};

/// Trace time 0: the first timestamp of the trace floored to the hour, as Chrome JSON's `baseTimeNanoseconds`.
fn epoch(tl: &Timeline) -> u64 {
    crate::chrome::base_time_ns(tl.span.0)
}

/// The Perfetto track uuid of timeline track `t` (uuids must be non-zero).
fn uuid(t: u32) -> u64 {
    t as u64 + 1
}

/// Writes the timeline's descriptors and shards to `out`; with `compress`, packets go in deflate-compressed
/// `compressed_packets` batches.
pub(crate) fn write(
    trace: &Trace,
    tl: &Timeline,
    out: &mut Output,
    compress: bool,
    findings: &[FindingSlice],
) -> io::Result<()> {
    let epoch = epoch(tl);
    let lanes = crate::findings::lanes(findings);
    let mut desc = Vec::new();
    write_epoch(epoch, 1, &mut desc);
    let mut tracks = descriptors(trace, tl);
    tracks.extend(crate::findings::perfetto_descriptors(tl, &lanes));
    write_descriptors(&tracks, 1, &mut desc);
    out.write(&desc)?;
    let n_shards = tl.shards.len();
    let health = health_args(trace);
    let health: Vec<(&str, Value)> = health.iter().map(|(k, v)| (k.as_str(), Value::Str(v))).collect();
    out.write_shards(n_shards + 1, b"", |s| {
        if s == n_shards {
            timed_with(|| "side events".into(), || side_events(trace, tl, compress, epoch))
        } else {
            let range = tl.shards[s];
            timed_with(
                || format!("shard {s} ({} slices)", range.end - range.start),
                || shard(trace, tl, s, compress, &health, epoch),
            )
        }
    })?;
    out.write(&crate::findings::perfetto_events(tl, findings, &lanes, compress, epoch))?;
    Ok(())
}

/// Every track's descriptor. Counter tracks carry their unit; a GPU's metric tracks, the model's name of their
/// series as their description (what `stats` and Parquet call it) and their place in the GPU metrics block,
/// whose children are shown in that order.
fn descriptors(trace: &Trace, tl: &Timeline) -> Vec<TrackDescriptor> {
    // Per GPU metrics track, the rank of its next child: the tracks are made in display order.
    let mut next_rank: HashMap<u32, i32> = HashMap::default();
    tl.tracks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let name = t.name.clone();
            let kind = match &t.role {
                TrackRole::HostProcess { pid, .. } => TrackKind::Process { pid: *pid, name },
                TrackRole::Gpu { .. } => TrackKind::Process { pid: t.pid, name },
                TrackRole::Thread { pid, tid, .. } => TrackKind::Thread { pid: *pid, tid: *tid, name },
                TrackRole::Memory { .. } | TrackRole::MemoryOfClass { .. } => {
                    TrackKind::Counter { name, unit: Unit::Bytes, description: String::new() }
                }
                TrackRole::UmRate { kind, .. } => {
                    let unit = Unit::Named(crate::timeline::rate_unit(*kind).into());
                    TrackKind::Counter { name, unit, description: String::new() }
                }
                TrackRole::Counter { series, .. } => {
                    let raw = trace.names.get(*series);
                    TrackKind::Counter { name, unit: counter_name(raw).unit, description: raw.to_string() }
                }
                TrackRole::GpuMetrics { .. } => TrackKind::Custom { name, ordered_children: true },
                _ => TrackKind::Custom { name, ordered_children: false },
            };
            let sibling_order = match (&t.role, t.parent) {
                (TrackRole::Counter { .. }, Some(parent)) => {
                    let rank = next_rank.entry(parent).or_default();
                    *rank += 1;
                    Some(*rank - 1)
                }
                _ => None,
            };
            TrackDescriptor { uuid: uuid(i as u32), parent: t.parent.map(uuid), kind, sibling_order }
        })
        .collect()
}

/// One shard's packets (the health slice with `health`'s args): one track's slices sorted by (start, longer first) and properly nested, so a walk with
/// a stack of open slices emits BEGINs and ENDs in time order, ENDs before BEGINs at equal times. The stack
/// starts with the slices earlier shards left open, and leaves open those the next shard of the track ends.
fn shard(trace: &Trace, tl: &Timeline, s: usize, compress: bool, health: &[(&str, Value)], epoch: u64) -> Vec<u8> {
    let range = tl.shards[s];
    let track = uuid(range.track);
    let t0 = tl.items[range.start as usize].start;
    // About 64 bytes per slice (BEGIN, END and args; docs/BENCHMARKS.md measures 60 on a kernel-heavy mix), a
    // quarter of it compressed plus the batch being written.
    let plain = (range.end - range.start) as usize * 64 + 4096;
    let room = if compress { plain / 3 + COMPRESS_BATCH + 4096 } else { plain };
    let mut shard = Shard::new(s as u32 + 2, t0).relative_to(epoch).on_track(track).with_capacity(room);
    if compress {
        shard = shard.compressed();
    }
    let mut stack: Vec<u64> = tl.open_ends[range.open()].to_vec();
    let mut args = Vec::with_capacity(16);
    let (mut flows_out, mut capture_out) = (Vec::new(), Vec::new());
    for it in &tl.items[range.start as usize..range.end as usize] {
        while stack.last().is_some_and(|&end| end <= it.start) {
            shard.end(track, stack.pop().unwrap_or_default());
        }
        let (name, category) = slice::name_and_category(trace, tl, it);
        slice_args(trace, tl, it, &mut args);
        // A graph launch starts one arrow per node it ran; a call that made graph nodes, one per node replayed.
        slice::flows_out(trace, tl, it, &mut flows_out);
        slice::capture_flows_out(tl, it, &mut capture_out);
        flows_out.extend_from_slice(&capture_out);
        // At most two arrows end at a slice (its launch's, its node's capture), kept off the heap.
        let (mut flows_in, mut n_in) = ([0u64; 2], 0);
        for f in slice::flow_in(trace, tl, it).into_iter().chain(slice::capture_flow_in(tl, it)) {
            flows_in[n_in] = f;
            n_in += 1;
        }
        shard.begin(&SliceBegin {
            track,
            ts: it.start,
            name: Name { key: name.0, text: tl.name(trace, name) },
            category,
            args: &args,
            named_args: if it.src() == Src::Health { health } else { &[] },
            flows_out: &flows_out,
            flows_in: &flows_in[..n_in],
        });
        stack.push(it.end);
    }
    let until = range.next_start(&tl.items).unwrap_or(u64::MAX);
    while stack.last().is_some_and(|&end| end <= until) {
        shard.end(track, stack.pop().unwrap_or_default());
    }
    shard.into_bytes()
}

/// The args of a slice in the Perfetto trace: Kineto's, the same keys the Chrome JSON has (a user comparing the
/// two sees the same fields), and the correlation id on every record, so trace processor queries can join by it.
fn slice_args<'t>(trace: &'t Trace, tl: &'t Timeline, it: &Item, out: &mut Vec<Arg<'t>>) {
    use Value::*;
    out.clear();
    match it.src() {
        Src::Kernel(i) => {
            let k = &trace.kernels[i as usize];
            let (op, user) = trace.external_ids(k.corr());
            if op != 0 {
                out.push(Arg::new(ArgKey::ExternalId, UInt(op)));
            }
            if user != 0 {
                out.push(Arg::new(ArgKey::UserAnnotation, UInt(user)));
            }
            out.push(Arg::new(ArgKey::Queued, UInt(k.queued)));
            out.push(Arg::new(ArgKey::Device, UInt(k.device as u64)));
            out.push(Arg::new(ArgKey::Context, UInt(k.context as u64)));
            out.push(Arg::new(ArgKey::Stream, UInt(k.stream as u64)));
            out.push(Arg::new(ArgKey::Correlation, UInt(k.correlation as u64)));
            gpu_args::kernel_launch(trace, k, out);
            gpu_args::capture(trace, tl, it.src(), out);
        }
        Src::Memcpy(i) => {
            let m = &trace.memcpys[i as usize];
            memory_op_args(trace, m.corr(), m.bytes, (m.start, m.end), out);
            if let Some((from, to)) = m.peer {
                out.push(Arg::new(ArgKey::FromDevice, UInt(from as u64)));
                out.push(Arg::new(ArgKey::ToDevice, UInt(to as u64)));
            }
            gpu_args::graph_node(m.graph_id, m.graph_node_id, out);
            gpu_args::capture(trace, tl, it.src(), out);
        }
        Src::Memset(i) => {
            let m = &trace.memsets[i as usize];
            memory_op_args(trace, m.corr(), m.bytes, (m.start, m.end), out);
            gpu_args::graph_node(m.graph_id, m.graph_node_id, out);
            gpu_args::capture(trace, tl, it.src(), out);
        }
        Src::Api(i) => {
            let a = &trace.apis[i as usize];
            let (op, _) = trace.external_ids(a.corr());
            if op != 0 {
                out.push(Arg::new(ArgKey::ExternalId, UInt(op)));
            }
            out.push(Arg::new(ArgKey::Cbid, UInt(a.cbid as u64)));
            out.push(Arg::new(ArgKey::Correlation, UInt(a.correlation as u64)));
            if a.return_value != 0 {
                out.push(Arg::new(ArgKey::ReturnValue, UInt(a.return_value as u64)));
            }
            let hidden = tl.driver_calls.hidden_in(i);
            if hidden > 0 {
                out.push(Arg::new(ArgKey::DriverCallsHidden, UInt(hidden as u64)));
            }
        }
        Src::Range(i) => {
            let r = &trace.ranges[i as usize];
            if r.domain != cutr_model::NameId::EMPTY {
                out.push(Arg::new(ArgKey::Domain, Str(trace.names.get(r.domain))));
            }
        }
        Src::Sync(i) => {
            let s = &trace.syncs[i as usize];
            let (op, _) = trace.external_ids(s.corr());
            if op != 0 {
                out.push(Arg::new(ArgKey::ExternalId, UInt(op)));
            }
            out.push(Arg::new(ArgKey::SyncKind, Str(cutr_model::describe::sync_type(s.sync_type))));
            gpu_args::waited_event(trace, s, out);
            out.push(Arg::new(ArgKey::Stream, Int(if s.stream == u32::MAX { -1 } else { s.stream as i64 })));
            out.push(Arg::new(ArgKey::Correlation, UInt(s.correlation as u64)));
            out.push(Arg::new(ArgKey::Context, UInt(s.context as u64)));
        }
        Src::Overhead(i) => {
            let o = &trace.overheads[i as usize];
            if o.object_kind == 2 {
                out.push(Arg::new(ArgKey::Thread, UInt(o.tid as u64)));
            }
        }
        // The track says the device.
        Src::Um(i) => gpu_args::unified_memory(trace, tl, i as usize, out),
        // The name says the range, the track the device: the launch's correlation joins it to its work.
        Src::Replay(i) => {
            out.push(Arg::new(ArgKey::Correlation, UInt(tl.graphs.replays[i as usize].launch.correlation as u64)))
        }
        // As the Chrome JSON: the device (the name says the range, the track the stream).
        Src::Annotation(i) => out.push(Arg::new(ArgKey::Device, UInt(tl.annotations[i as usize].device as u64))),
        Src::Health => {}
    }
}

/// Copies and memsets: External id, correlation, bytes and bandwidth (device, context and stream are the track).
fn memory_op_args<'t>(trace: &Trace, key: cutr_model::CorrKey, bytes: u64, (s, e): (u64, u64), out: &mut Vec<Arg<'t>>) {
    let (op, _) = trace.external_ids(key);
    if op != 0 {
        out.push(Arg::new(ArgKey::ExternalId, Value::UInt(op)));
    }
    out.push(Arg::new(ArgKey::Correlation, Value::UInt(key.correlation as u64)));
    out.push(Arg::new(ArgKey::Bytes, Value::UInt(bytes)));
    out.push(Arg::new(ArgKey::Bandwidth, Value::bandwidth(bytes, s, e)));
}

/// The side sequence: NVTX marks, the step counters (device memory in use, migration rates) and the other counter
/// series, merged in time order.
fn side_events(trace: &Trace, tl: &Timeline, compress: bool, epoch: u64) -> Vec<u8> {
    let mut t0 = tl.span.0;
    if let Some(m) = trace.marks.first() {
        t0 = t0.min(m.ts);
    }
    let steps: Vec<(u64, u32, f64)> =
        tl.step_counters.iter().flat_map(|c| c.points.iter().map(|&(ts, v)| (ts, c.track, v))).collect();
    if let Some(ts) = steps.iter().map(|s| s.0).min() {
        t0 = t0.min(ts);
    }
    if let Some(ts) = trace.counters.iter().map(|c| c.ts).min() {
        t0 = t0.min(ts);
    }
    let mut shard = Shard::new(1_000_000, t0).relative_to(epoch);
    if compress {
        shard = shard.compressed();
    }
    let mut evs: Vec<(u64, u8, usize)> = Vec::new();
    for (i, m) in trace.marks.iter().enumerate() {
        evs.push((m.ts, 0, i));
    }
    for (i, s) in steps.iter().enumerate() {
        evs.push((s.0, 1, i));
    }
    for (i, c) in trace.counters.iter().enumerate() {
        evs.push((c.ts, 2, i));
    }
    evs.sort_unstable();
    let thread_uuid: std::collections::HashMap<(cutr_model::ProcId, u32), u64> = tl
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
            if let Some(&track) = thread_uuid.get(&(m.proc, m.tid)) {
                let name = Name { key: m.name.0, text: trace.names.get(m.name) };
                shard.instant(&Instant { track, ts, name, category: Category::Nvtx, args: &[] });
            }
        } else if kind == 2 {
            let c = &trace.counters[i];
            if let Some(&t) = tl.counter_track.get(&(c.proc, c.device, c.series)) {
                shard.counter(uuid(t), ts, c.value);
            }
        } else {
            let (_, track, value) = steps[i];
            shard.counter(uuid(track), ts, value);
        }
    }
    shard.into_bytes()
}
