//! The timeline as a Perfetto protobuf trace: track descriptors first, then each shard as its own packet sequence
//! (one track's slices, BEGIN/END in time order, arrows as flow ids), then a side sequence with NVTX marks,
//! memory counters and the health slice. Args are Perfetto's own choice: what a slice's track, name or arrow
//! already states is left out.

mod encoder;

use std::io;

use cutr_model::Trace;
use cutr_model::timing::timed_with;

use crate::args::{Arg, ArgKey, Category, Value};
use crate::output::Output;
use crate::slice;
use crate::timeline::{Item, Src, Timeline, TrackRole, health_args};

pub use encoder::{COMPRESS_BATCH, Instant, Name, Shard, SliceBegin, TrackDescriptor, TrackKind, write_descriptors};

/// The Perfetto track uuid of timeline track `t` (uuids must be non-zero).
fn uuid(t: u32) -> u64 {
    t as u64 + 1
}

/// Writes the timeline's descriptors and shards to `out`; with `compress`, packets go in deflate-compressed
/// `compressed_packets` batches.
pub(crate) fn write(trace: &Trace, tl: &Timeline, out: &mut Output, compress: bool) -> io::Result<()> {
    let mut desc = Vec::new();
    write_descriptors(&descriptors(tl), 1, &mut desc);
    out.write(&desc)?;
    let n_shards = tl.shards.len();
    let health = health_args(trace);
    let health: Vec<(&str, Value)> = health.iter().map(|(k, v)| (k.as_str(), Value::Str(v))).collect();
    out.write_shards(n_shards + 1, b"", |s| {
        if s == n_shards {
            timed_with(|| "side events".into(), || side_events(trace, tl, compress))
        } else {
            let range = tl.shards[s];
            timed_with(
                || format!("shard {s} ({} slices)", range.end - range.start),
                || shard(trace, tl, s, compress, &health),
            )
        }
    })?;
    Ok(())
}

fn descriptors(tl: &Timeline) -> Vec<TrackDescriptor> {
    tl.tracks
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
        .collect()
}

/// One shard's packets (the health slice with `health`'s args): one track's slices sorted by (start, longer first) and properly nested, so a walk with
/// a stack of open slices emits BEGINs and ENDs in time order, ENDs before BEGINs at equal times. The stack
/// starts with the slices earlier shards left open, and leaves open those the next shard of the track ends.
fn shard(trace: &Trace, tl: &Timeline, s: usize, compress: bool, health: &[(&str, Value)]) -> Vec<u8> {
    let range = tl.shards[s];
    let track = uuid(range.track);
    let t0 = tl.items[range.start as usize].start;
    // About 64 bytes per slice (BEGIN, END and args; docs/BENCHMARKS.md measures 60 on a kernel-heavy mix), a
    // quarter of it compressed plus the batch being written.
    let plain = (range.end - range.start) as usize * 64 + 4096;
    let room = if compress { plain / 3 + COMPRESS_BATCH + 4096 } else { plain };
    let mut shard = Shard::new(s as u32 + 2, t0).on_track(track).with_capacity(room);
    if compress {
        shard = shard.compressed();
    }
    let mut stack: Vec<u64> = tl.open_ends[range.open()].to_vec();
    let mut args = Vec::with_capacity(16);
    let mut flows_out = Vec::new();
    for it in &tl.items[range.start as usize..range.end as usize] {
        while stack.last().is_some_and(|&end| end <= it.start) {
            shard.end(track, stack.pop().unwrap_or_default());
        }
        let (name, category) = slice::name_and_category(trace, tl, it);
        slice_args(trace, it, &mut args);
        // A graph launch starts one arrow per node it ran.
        slice::flows_out(trace, tl, it, &mut flows_out);
        shard.begin(&SliceBegin {
            track,
            ts: it.start,
            name: Name { key: name.0, text: tl.name(trace, name) },
            category,
            args: &args,
            named_args: if it.src() == Src::Health { health } else { &[] },
            flows_out: &flows_out,
            flow_in: slice::flow_in(trace, tl, it),
        });
        stack.push(it.end);
    }
    let until = range.next_start(&tl.items).unwrap_or(u64::MAX);
    while stack.last().is_some_and(|&end| end <= until) {
        shard.end(track, stack.pop().unwrap_or_default());
    }
    shard.into_bytes()
}

/// The args of a slice in the Perfetto trace. Left out, as they cost bytes on every slice and add nothing: device,
/// context and stream (the track says them), blocks and warps per SM (grid and the device's SMs), a zero
/// `queued`, an API call's cbid (its name), and on GPU work with a launching API call its correlation and External
/// id (the same as on that call, which its arrow leads to).
fn slice_args<'t>(trace: &'t Trace, it: &Item, out: &mut Vec<Arg<'t>>) {
    use Value::*;
    out.clear();
    let mut push = |key, value| out.push(Arg::new(key, value));
    match it.src() {
        Src::Kernel(i) => {
            let k = &trace.kernels[i as usize];
            let own = trace.launcher_index(k.corr()).is_none();
            let (op, user) = trace.external_ids(k.corr());
            if op != 0 && own {
                push(ArgKey::ExternalId, UInt(op));
            }
            if user != 0 {
                push(ArgKey::UserAnnotation, UInt(user));
            }
            if k.queued != 0 {
                push(ArgKey::Queued, UInt(k.queued));
            }
            if own {
                push(ArgKey::Correlation, UInt(k.correlation as u64));
            }
            push(ArgKey::RegistersPerThread, UInt(k.registers as u64));
            push(ArgKey::SharedMemory, Int(k.static_smem as i64 + k.dynamic_smem as i64));
            push(ArgKey::Grid, Int3(k.grid.map(i64::from)));
            push(ArgKey::Block, Int3(k.block.map(i64::from)));
            if k.graph_id != 0 {
                push(ArgKey::GraphId, UInt(k.graph_id as u64));
                push(ArgKey::GraphNodeId, UInt(k.graph_node_id));
            }
        }
        Src::Memcpy(i) => {
            let m = &trace.memcpys[i as usize];
            memory_op_args(trace, m.corr(), m.bytes, (m.start, m.end), out);
            if let Some((from, to)) = m.peer {
                out.push(Arg::new(ArgKey::FromDevice, UInt(from as u64)));
                out.push(Arg::new(ArgKey::ToDevice, UInt(to as u64)));
            }
        }
        Src::Memset(i) => {
            let m = &trace.memsets[i as usize];
            memory_op_args(trace, m.corr(), m.bytes, (m.start, m.end), out);
        }
        Src::Api(i) => {
            let a = &trace.apis[i as usize];
            let (op, _) = trace.external_ids(a.corr());
            if op != 0 {
                push(ArgKey::ExternalId, UInt(op));
            }
            push(ArgKey::Correlation, UInt(a.correlation as u64));
            if a.return_value != 0 {
                push(ArgKey::ReturnValue, UInt(a.return_value as u64));
            }
        }
        Src::Range(i) => {
            let r = &trace.ranges[i as usize];
            if r.domain != cutr_model::NameId::EMPTY {
                push(ArgKey::Domain, Str(trace.names.get(r.domain)));
            }
        }
        Src::Sync(i) => {
            let s = &trace.syncs[i as usize];
            let (op, _) = trace.external_ids(s.corr());
            // As Kineto: an unlinked sync record carries its own correlation id as External id.
            push(ArgKey::ExternalId, UInt(if op != 0 { op } else { s.correlation as u64 }));
            push(ArgKey::SyncKind, Str(cutr_model::describe::sync_type(s.sync_type)));
            push(ArgKey::Stream, Int(if s.stream == u32::MAX { -1 } else { s.stream as i64 }));
            push(ArgKey::Correlation, UInt(s.correlation as u64));
            push(ArgKey::Context, UInt(s.context as u64));
            if s.event != u32::MAX {
                push(ArgKey::Event, UInt(s.event as u64));
            }
        }
        Src::Overhead(i) => {
            let o = &trace.overheads[i as usize];
            if o.object_kind == 2 {
                push(ArgKey::Thread, UInt(o.tid as u64));
            }
        }
        Src::Health => {}
    }
}

/// Copies and memsets: their External id and correlation only without a launching call, then bytes and bandwidth.
fn memory_op_args<'t>(trace: &Trace, key: cutr_model::CorrKey, bytes: u64, (s, e): (u64, u64), out: &mut Vec<Arg<'t>>) {
    let own = trace.launcher_index(key).is_none();
    let (op, _) = trace.external_ids(key);
    if op != 0 && own {
        out.push(Arg::new(ArgKey::ExternalId, Value::UInt(op)));
    }
    if own {
        out.push(Arg::new(ArgKey::Correlation, Value::UInt(key.correlation as u64)));
    }
    out.push(Arg::new(ArgKey::Bytes, Value::UInt(bytes)));
    out.push(Arg::new(ArgKey::Bandwidth, Value::bandwidth(bytes, s, e)));
}

/// The side sequence: NVTX marks and memory counters, merged in time order.
fn side_events(trace: &Trace, tl: &Timeline, compress: bool) -> Vec<u8> {
    let mut t0 = tl.span.0;
    if let Some(m) = trace.marks.first() {
        t0 = t0.min(m.ts);
    }
    if let Some(m) = trace.memory.first() {
        t0 = t0.min(m.ts);
    }
    let mut shard = Shard::new(1_000_000, t0);
    if compress {
        shard = shard.compressed();
    }
    let mut evs: Vec<(u64, u8, usize)> = Vec::new();
    for (i, m) in trace.marks.iter().enumerate() {
        evs.push((m.ts, 0, i));
    }
    for (i, m) in trace.memory.iter().enumerate() {
        evs.push((m.ts, 1, i));
    }
    evs.sort_unstable();
    let mut allocated: std::collections::HashMap<(cutr_model::ProcId, u32), i128> = Default::default();
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
        } else {
            let m = &trace.memory[i];
            let a = allocated.entry((m.proc, m.device)).or_default();
            *a += if m.free { -(m.bytes as i128) } else { m.bytes as i128 };
            if let Some(&t) = tl.memory_track.get(&(m.proc, m.device)) {
                shard.counter(uuid(t), ts, (*a).max(0) as f64);
            }
        }
    }
    shard.into_bytes()
}
