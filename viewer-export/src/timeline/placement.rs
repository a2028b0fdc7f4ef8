//! Which track each row of the model goes on. Tracks are made in the order their first row comes (GPU work's
//! streams, then API threads, NVTX threads, sync tracks, overhead, memory counters; graph replays' and NVTX
//! ranges' GPU spans last), from the distinct keys found in parallel; then every row's track is looked up by key
//! in parallel (millions of rows share a handful of streams and threads).

use cutr_model::{ProcId, Trace};
use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

use cutr_model::nvtx_spans::GpuSpan;

use super::item::{Item, Src};
use super::tracks::TrackMaker;
use cutr_model::timing::timed;

/// The track of every row that becomes a slice, by table (ranges in `range_order`), and the few other items.
pub(crate) struct Placement {
    pub kernel: Vec<u32>,
    pub memcpy: Vec<u32>,
    pub memset: Vec<u32>,
    pub api: Vec<u32>,
    /// NVTX ranges by start time: indices into `Trace::ranges` (which is sorted by thread).
    pub range_order: Vec<u32>,
    /// The track of each range, in `range_order`.
    pub range: Vec<u32>,
    pub sync: Vec<u32>,
    /// The track of each unified memory event.
    pub um: Vec<u32>,
    /// Overhead slices, the health slice, graph replays' and NVTX ranges' GPU spans, by start.
    pub other: Vec<Item>,
    /// Memory counter track of each (file, device).
    pub memory_track: HashMap<(ProcId, u32), u32>,
    /// The counter track of each series of a GPU.
    pub counter_track: HashMap<(ProcId, u32, cutr_model::NameId), u32>,
}

type StreamKey = (ProcId, u32, u32, u32);

/// (file, context) -> the device of the context.
type ContextDevices = HashMap<(ProcId, u32), u32>;

/// Places every row of `trace`, making tracks in `maker` as their first rows come.
pub(crate) fn place(
    maker: &mut TrackMaker<'_>,
    trace: &Trace,
    span: (u64, u64),
    replays: &[super::graphs::Replay],
    annotations: &[GpuSpan],
) -> Placement {
    let (kernel, memcpy, memset, ctx_device) = timed("gpu tracks", || gpu_rows(maker, trace));
    let api = timed("thread tracks", || {
        let mut threads: HashMap<(ProcId, u32), u32> = HashMap::default();
        for (key @ (proc, tid), _) in first_seen(trace.apis.len(), |i| (trace.apis[i].proc, trace.apis[i].tid)) {
            threads.insert(key, maker.thread(proc, tid));
        }
        trace.apis.par_iter().map(|a| threads[&(a.proc, a.tid)]).collect()
    });
    let (range_order, range, sync) = timed("nvtx and sync tracks", || ranges_and_syncs(maker, trace, &ctx_device));
    let (other, (memory_track, counter_track)) = timed("other tracks", || other_rows(maker, trace, span));
    let um = timed("unified memory tracks", || super::um::place_um(maker, trace));
    let mut other = other;
    // The replay slices' and the GPU spans' tracks come last, so that a recording without graphs or NVTX ranges
    // keeps its track numbers.
    for (i, r) in replays.iter().enumerate() {
        other.push(Item::new(maker.captured_ranges(r.proc, r.device), r.start, r.end, Src::Replay(i as u32)));
    }
    for (i, s) in annotations.iter().enumerate() {
        let track = maker.stream_ranges(s.proc, s.device, s.context, s.stream);
        other.push(Item::new(track, s.start, s.end, Src::Annotation(i as u32)));
    }
    if !replays.is_empty() || !annotations.is_empty() {
        other.par_sort_by_key(|it| it.start);
    }
    Placement { kernel, memcpy, memset, api, range_order, range, sync, um, other, memory_track, counter_track }
}

/// Stream tracks of the kernels, copies and memsets (GPUs and contexts made on the way), and each context's
/// device.
fn gpu_rows(maker: &mut TrackMaker<'_>, trace: &Trace) -> (Vec<u32>, Vec<u32>, Vec<u32>, ContextDevices) {
    // The distinct streams of each kind, each with its first row: from them the GPUs, the contexts' devices and
    // the stream tracks all follow.
    let stream_keys: [Vec<(StreamKey, usize)>; 3] = [
        first_seen(trace.kernels.len(), |i| {
            let k = &trace.kernels[i];
            (k.proc, k.device, k.context, k.stream)
        }),
        first_seen(trace.memcpys.len(), |i| {
            let k = &trace.memcpys[i];
            (k.proc, k.device, k.context, k.stream)
        }),
        first_seen(trace.memsets.len(), |i| {
            let k = &trace.memsets[i];
            (k.proc, k.device, k.context, k.stream)
        }),
    ];
    let memory_gpus = first_seen(trace.memory.len(), |i| (trace.memory[i].proc, trace.memory[i].device));
    let um_gpus = first_seen(trace.um.len(), |i| (trace.um[i].proc, trace.um[i].device()));
    let um_gpus = um_gpus.into_iter().filter_map(|((proc, device), _)| Some((proc, device?)));
    let gpus = stream_keys.iter().flatten().map(|&((proc, device, _, _), _)| (proc, device));
    maker.number_gpus(gpus.chain(memory_gpus.into_iter().map(|(g, _)| g)).chain(um_gpus).collect());
    // Contexts map to devices through the GPU records and CUDA events that name both: the first record naming a
    // context says its device (kernels first, then copies, memsets, events). (A context's first stream in row
    // order holds its first row.)
    let mut ctx_device: ContextDevices = HashMap::default();
    for keys in &stream_keys {
        let mut firsts: Vec<_> =
            keys.iter().map(|&((proc, device, context, _), i)| (i, proc, context, device)).collect();
        firsts.sort_unstable();
        for (_, proc, context, device) in firsts {
            ctx_device.entry((proc, context)).or_insert(device);
        }
    }
    for (key, i) in first_seen(trace.cuda_events.len(), |i| (trace.cuda_events[i].proc, trace.cuda_events[i].context)) {
        ctx_device.entry(key).or_insert(trace.cuda_events[i].device);
    }
    let mut streams: HashMap<StreamKey, u32> = HashMap::default();
    for (key @ (proc, device, context, stream), _) in stream_keys.into_iter().flatten() {
        if let std::collections::hash_map::Entry::Vacant(slot) = streams.entry(key) {
            slot.insert(maker.stream(proc, device, context, stream));
        }
    }
    let stream_of = |key: StreamKey| streams[&key];
    (
        trace.kernels.par_iter().map(|k| stream_of((k.proc, k.device, k.context, k.stream))).collect(),
        trace.memcpys.par_iter().map(|k| stream_of((k.proc, k.device, k.context, k.stream))).collect(),
        trace.memsets.par_iter().map(|k| stream_of((k.proc, k.device, k.context, k.stream))).collect(),
        ctx_device,
    )
}

/// NVTX ranges on their threads' tracks (in start order), synchronizations on their stream's sync track, or the
/// context's sync track: syncs of no one stream (context and event syncs), and those of a stream that ran no GPU
/// work (a row beside a stream that has no row would stand alone; the `stream` arg still says which).
fn ranges_and_syncs(
    maker: &mut TrackMaker<'_>,
    trace: &Trace,
    ctx_device: &ContextDevices,
) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut range_threads: HashMap<(ProcId, u32), u32> = HashMap::default();
    for ((proc, tid), _) in first_seen(trace.ranges.len(), |i| (trace.ranges[i].proc, trace.ranges[i].tid)) {
        range_threads.insert((proc, tid), maker.thread(proc, tid));
    }
    let mut sync_tracks: HashMap<(ProcId, u32, u32), u32> = HashMap::default();
    let sync_key = |i: usize| (trace.syncs[i].proc, trace.syncs[i].context, trace.syncs[i].stream);
    let keys = first_seen(trace.syncs.len(), sync_key);
    let busy =
        if keys.iter().any(|((_, _, stream), _)| *stream != u32::MAX) { streams_with_work(trace) } else { Vec::new() };
    for ((proc, context, stream), _) in keys {
        let device = ctx_device.get(&(proc, context)).copied().unwrap_or(0);
        let on = if busy.binary_search(&(proc, context, stream)).is_ok() { stream } else { u32::MAX };
        sync_tracks.insert((proc, context, stream), maker.sync(proc, device, context, on));
    }
    let range_tracks: Vec<u32> = trace.ranges.par_iter().map(|r| range_threads[&(r.proc, r.tid)]).collect();
    let sync: Vec<u32> = trace.syncs.par_iter().map(|s| sync_tracks[&(s.proc, s.context, s.stream)]).collect();
    // Ranges in time order like every other source.
    let mut range_order: Vec<u32> = (0..trace.ranges.len() as u32).collect();
    range_order.par_sort_by_key(|&i| trace.ranges[i as usize].start);
    let range: Vec<u32> = range_order.par_iter().map(|&i| range_tracks[i as usize]).collect();
    (range_order, range, sync)
}

/// The (file, context, stream) of every stream that ran a kernel, copy or memset.
fn streams_with_work(trace: &Trace) -> Vec<(ProcId, u32, u32)> {
    let kernels = first_seen(trace.kernels.len(), |i| {
        let k = &trace.kernels[i];
        (k.proc, k.context, k.stream)
    });
    let memcpys = first_seen(trace.memcpys.len(), |i| {
        let m = &trace.memcpys[i];
        (m.proc, m.context, m.stream)
    });
    let memsets = first_seen(trace.memsets.len(), |i| {
        let m = &trace.memsets[i];
        (m.proc, m.context, m.stream)
    });
    let mut all: Vec<_> = kernels.into_iter().chain(memcpys).chain(memsets).map(|(key, _)| key).collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The tracks of counters: (file, device) -> memory track; (file, device, series) -> counter track.
type CounterTracks = (HashMap<(ProcId, u32), u32>, HashMap<(ProcId, u32, cutr_model::NameId), u32>);

/// The few rows of the other kinds, made one by one as their tracks are made: overheads, memory counters, the
/// other counter series, the health slice, and the threads of NVTX marks.
fn other_rows(maker: &mut TrackMaker<'_>, trace: &Trace, span: (u64, u64)) -> (Vec<Item>, CounterTracks) {
    let mut items: Vec<Item> = Vec::new();
    for (i, o) in trace.overheads.iter().enumerate() {
        items.push(Item::new(maker.overhead(o.proc), o.start, o.end, Src::Overhead(i as u32)));
    }
    let mut memory_track = HashMap::default();
    for m in &trace.memory {
        memory_track.insert((m.proc, m.device), maker.memory(m.proc, m.device));
    }
    let counter_track = super::gpu_metrics::counter_tracks(maker, trace);
    items.push(Item::new(maker.health(), span.0, span.1.max(span.0), Src::Health));
    for ((proc, tid), _) in first_seen(trace.marks.len(), |i| (trace.marks[i].proc, trace.marks[i].tid)) {
        maker.thread(proc, tid);
    }
    items.sort_by_key(|it| it.start);
    (items, (memory_track, counter_track))
}

/// The distinct values of `key(i)` for `i` in `0..n`, each with the first `i` that has it, in the order of those
/// `i`. Found in parallel blocks, each remembering its own first sightings; the first block to see a key has
/// its first row.
pub(crate) fn first_seen<K>(n: usize, key: impl Fn(usize) -> K + Sync) -> Vec<(K, usize)>
where
    K: Copy + Eq + std::hash::Hash + Send + Sync,
{
    const BLOCK: usize = 1 << 15;
    let blocks: Vec<Vec<(K, usize)>> = (0..n.div_ceil(BLOCK))
        .into_par_iter()
        .map(|b| {
            let mut seen: HashMap<K, ()> = HashMap::default();
            let mut firsts = Vec::new();
            let mut last = None;
            for i in b * BLOCK..((b + 1) * BLOCK).min(n) {
                let k = key(i);
                // Consecutive rows mostly share their key: skip the hash.
                if last != Some(k) {
                    last = Some(k);
                    if seen.insert(k, ()).is_none() {
                        firsts.push((k, i));
                    }
                }
            }
            firsts
        })
        .collect();
    let mut seen: HashMap<K, ()> = HashMap::default();
    blocks.into_iter().flatten().filter(|&(k, _)| seen.insert(k, ()).is_none()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sightings_come_in_row_order_across_blocks() {
        // Keys repeat in runs and across the 32,768-row blocks; a key first seen late in a block comes after one
        // seen early in a later block only by row.
        let keys: Vec<u32> = (0..100_000u32).map(|i| if i < 40_000 { i / 20_000 } else { 7 - (i / 30_000) }).collect();
        let got = first_seen(keys.len(), |i| keys[i]);
        assert_eq!(got, [(0, 0), (1, 20_000), (6, 40_000), (5, 60_000), (4, 90_000)]);
        assert!(first_seen(0, |i| keys[i]).is_empty());
    }
}
