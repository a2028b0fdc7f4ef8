//! How the trace model is laid out for viewers: tracks (host process -> thread, GPU -> context -> stream), the
//! slices on each track, the CPU->GPU arrows, and the split of all slices into shards that are written in
//! parallel.
//!
//! Perfetto pairs a slice's END with the most recent open slice on its track, so slices on one track must nest.
//! Work that overlaps without nesting (clock skew, concurrent work reported on one stream) moves to an overflow
//! lane beside its track. Each track's slices are then cut into shards of a fixed number of slices: a shard holds
//! one track's run of slices, so its BEGIN/END events come out in time order from a single walk with a stack of
//! open slices (no sort) and can share that track as a default. Slices still open at a cut (an NVTX range around
//! the whole run, say) are handed to the next shard as its starting stack, which ends them (Perfetto pairs an END
//! with its track's innermost open slice, whichever sequence began it), so no slice, however long, keeps a
//! track from being split. Shards are written in order of their first slice, and a track's shards in time
//! order, so equal timestamps at shard boundaries can never pair the wrong ends.

use rustc_hash::FxHashMap as HashMap;

use rayon::prelude::*;

use crate::group::{Block, Source, group_by_key, push_blocks};
use crate::model::Trace;
use crate::names;

/// Where a slice comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Src {
    Kernel(u32),
    Memcpy(u32),
    Memset(u32),
    Api(u32),
    Range(u32),
    Sync(u32),
    Overhead(u32),
    /// The recording-health slice spanning the whole trace.
    Health,
}

impl Src {
    const INDEX_BITS: u32 = 29;

    /// The source packed in 32 bits: the kind in the top 3, the row index below (rows < 2^29 per kind). Packed
    /// values order like the enum (kind first, then index).
    #[inline]
    fn pack(self) -> u32 {
        let (kind, i) = match self {
            Src::Kernel(i) => (0, i),
            Src::Memcpy(i) => (1, i),
            Src::Memset(i) => (2, i),
            Src::Api(i) => (3, i),
            Src::Range(i) => (4, i),
            Src::Sync(i) => (5, i),
            Src::Overhead(i) => (6, i),
            Src::Health => (7, 0),
        };
        assert!(i < 1 << Self::INDEX_BITS, "more than 2^29 records of one kind");
        (kind << Self::INDEX_BITS) | i
    }

    #[inline]
    fn unpack(v: u32) -> Src {
        let i = v & ((1 << Self::INDEX_BITS) - 1);
        match v >> Self::INDEX_BITS {
            0 => Src::Kernel(i),
            1 => Src::Memcpy(i),
            2 => Src::Memset(i),
            3 => Src::Api(i),
            4 => Src::Range(i),
            5 => Src::Sync(i),
            6 => Src::Overhead(i),
            _ => Src::Health,
        }
    }
}

/// One slice on a track: 24 bytes, as there is one per record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub track: u32,
    src: u32,
    pub start: u64,
    pub end: u64,
}

impl Item {
    pub fn new(track: u32, start: u64, end: u64, src: Src) -> Item {
        Item { track, src: src.pack(), start, end }
    }

    #[inline]
    pub fn src(&self) -> Src {
        Src::unpack(self.src)
    }

    /// Layout order: by track, then start, longer first (so enclosing slices open first), then source.
    #[inline]
    fn key(&self) -> (u32, u64, std::cmp::Reverse<u64>, u32) {
        (self.track, self.start, std::cmp::Reverse(self.end), self.src)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TrackRole {
    HostProcess {
        proc: u16,
        pid: u32,
    },
    Thread {
        proc: u16,
        pid: u32,
        tid: u32,
    },
    Gpu {
        proc: u16,
        device: u32,
    },
    Context {
        proc: u16,
        device: u32,
        context: u32,
    },
    Stream {
        proc: u16,
        device: u32,
        context: u32,
        stream: u32,
    },
    Sync {
        proc: u16,
        device: u32,
        context: u32,
    },
    Overhead {
        proc: u16,
    },
    Memory {
        proc: u16,
        device: u32,
    },
    Health,
    /// Overflow lane `k` of track `of`.
    Lane {
        of: u32,
        k: u32,
    },
}

#[derive(Clone, Debug)]
pub struct Track {
    pub role: TrackRole,
    pub parent: Option<u32>,
    pub name: String,
    /// Chrome JSON row of this track's events (Kineto's pid/tid conventions).
    pub json_pid: i64,
    pub json_tid: i64,
    /// For process-like tracks: the pid Perfetto sees (unique in the trace).
    pub pid: u32,
}

/// A run of one track's items (`items[start..end]`): the unit of parallel writing. Slices of earlier shards still
/// open at `items[start]` are `Layout::open_ends[open_from..open_from + open_len]`: their end times, outermost
/// first, which this shard ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardRange {
    pub track: u32,
    pub start: u32,
    pub end: u32,
    pub open_from: u32,
    pub open_len: u32,
}

impl ShardRange {
    /// The start of the next shard on the same track (its slices open at or after it), if there is one: a
    /// shard ends only its slices that end by then and leaves the rest open for that shard.
    pub fn next_start(&self, items: &[Item]) -> Option<u64> {
        items.get(self.end as usize).filter(|it| it.track == self.track).map(|it| it.start)
    }
}

/// Names resolved once, before the parallel writers run.
#[derive(Clone, Debug, Default)]
pub struct Labels {
    pub api: HashMap<(u16, bool, u32), u32>,
    pub memcpy: HashMap<(u8, u8, u8), u32>,
    pub memset: HashMap<u16, u32>,
    pub sync: HashMap<u32, u32>,
    pub overhead: HashMap<u32, u32>,
    pub health: u32,
}

/// Rows of one kind the layout can address (29 bits of an item's packed source).
pub const MAX_ROWS_PER_KIND: usize = 1 << Src::INDEX_BITS;

/// Why a trace is too large to lay out, if it is: more rows of one kind than [`MAX_ROWS_PER_KIND`], or more
/// slices in all than 32-bit item indices reach.
pub fn too_large(trace: &Trace) -> Option<String> {
    rows_over_limit(&slice_kinds(trace))
}

/// Rows of each kind that become slices.
fn slice_kinds(trace: &Trace) -> [(&'static str, usize); 7] {
    [
        ("kernel", trace.kernels.len()),
        ("memcpy", trace.memcpys.len()),
        ("memset", trace.memsets.len()),
        ("API call", trace.apis.len()),
        ("NVTX range", trace.ranges.len()),
        ("synchronization", trace.syncs.len()),
        ("overhead", trace.overheads.len()),
    ]
}

/// About how many slices `trace` lays out (the rows that become slices).
pub fn slice_rows(trace: &Trace) -> usize {
    slice_kinds(trace).iter().map(|(_, n)| n).sum()
}

fn rows_over_limit(kinds: &[(&str, usize)]) -> Option<String> {
    if let Some((what, n)) = kinds.iter().find(|(_, n)| *n >= MAX_ROWS_PER_KIND) {
        return Some(format!("{n} {what} records exceed the {MAX_ROWS_PER_KIND} one conversion can lay out"));
    }
    let total: usize = kinds.iter().map(|(_, n)| n).sum();
    (total >= u32::MAX as usize).then(|| format!("{total} slices exceed the {} one conversion can lay out", u32::MAX))
}

pub struct Layout {
    pub tracks: Vec<Track>,
    /// Sorted by (track, start, longer first).
    pub items: Vec<Item>,
    /// In order of their first slice's start.
    pub shards: Vec<ShardRange>,
    /// End times of the slices open at each shard's start ([`ShardRange::open_from`]).
    pub open_ends: Vec<u64>,
    pub flows: Flows,
    pub labels: Labels,
    /// (proc, device) -> Chrome pid of its GPU rows.
    pub gpu_json_pid: HashMap<(u16, u32), i64>,
    /// Memory counter track of each (proc, device).
    pub memory_track: HashMap<(u16, u32), u32>,
    pub health_track: u32,
    pub span: (u64, u64),
    pub overflow_lanes: u32,
}

/// Arrow id of the `k`-th GPU record launched by one API call: the correlation id itself for the first (as
/// Kineto's `ac2g` ids), distinct ids for the others (graph launches start many), distinct per file.
pub fn flow_id(proc: u16, correlation: u32, k: u32) -> u64 {
    ((proc as u64) << 52) | ((k as u64) << 32) | correlation as u64
}

/// Pseudo pids for GPUs, out of the range of real pids.
const GPU_PID_BASE: u32 = 0x4000_0000;

struct Builder {
    tracks: Vec<Track>,
    index: HashMap<TrackRole, u32>,
    /// The last role looked up: consecutive records mostly land on the same track.
    last: Option<(TrackRole, u32)>,
}

impl Builder {
    fn get(&mut self, role: TrackRole, make: impl FnOnce(&mut Builder) -> Track) -> u32 {
        if let Some((r, i)) = &self.last
            && *r == role
        {
            return *i;
        }
        if let Some(&i) = self.index.get(&role) {
            self.last = Some((role, i));
            return i;
        }
        let t = make(self);
        let i = self.tracks.len() as u32;
        self.tracks.push(t);
        self.index.insert(role.clone(), i);
        self.last = Some((role, i));
        i
    }
}

/// The process name shown for a recording: the program's file name.
pub fn process_name(trace: &Trace, proc: u16) -> String {
    let m = &trace.processes[proc as usize].meta;
    let prog = m.command_line.first().map(|c| c.rsplit('/').next().unwrap_or(c).to_string()).unwrap_or_default();
    if prog.is_empty() { format!("pid {}", m.pid) } else { prog }
}

fn device_name(trace: &Trace, proc: u16, device: u32) -> String {
    trace.processes[proc as usize]
        .meta
        .devices
        .iter()
        .find(|d| d.id == device)
        .map(|d| format!("GPU {device}: {}", d.name))
        .unwrap_or_else(|| format!("GPU {device}"))
}

impl Layout {
    pub fn build(trace: &mut Trace, shard_slices: usize) -> Layout {
        let demangling = crate::phase::span(|| "demangle".into());
        trace.demangle_names();
        drop(demangling);
        let labelling = crate::phase::span(|| "labels".into());
        let labels = labels(trace);
        drop(labelling);
        let tracks_and_items = crate::phase::span(|| "tracks and items".into());
        let multi = trace.processes.len() > 1;
        let mut b = Builder { tracks: Vec::new(), index: HashMap::default(), last: None };
        let health_track = b.get(TrackRole::Health, |_| Track {
            role: TrackRole::Health,
            parent: None,
            name: "cutr: recording health".into(),
            json_pid: 0,
            json_tid: 0,
            pid: 0,
        });

        // Host processes: pids must be unique in the trace even when files come from several hosts.
        let mut used_pids = std::collections::HashSet::new();
        let mut host_pid = Vec::new();
        for (i, p) in trace.processes.iter().enumerate() {
            let mut pid = p.pid;
            while !used_pids.insert(pid) {
                pid = pid.wrapping_add(1 << 22);
            }
            host_pid.push(pid);
            let name = if multi {
                format!("{} (pid {}, {})", process_name(trace, i as u16), p.pid, trace.label(i as u16))
            } else {
                format!("{} (pid {})", process_name(trace, i as u16), p.pid)
            };
            b.get(TrackRole::HostProcess { proc: i as u16, pid }, |_| Track {
                role: TrackRole::HostProcess { proc: i as u16, pid },
                parent: None,
                name,
                json_pid: p.pid as i64,
                json_tid: 0,
                pid,
            });
        }
        let process_track =
            |b: &mut Builder, proc: u16| b.index[&TrackRole::HostProcess { proc, pid: host_pid[proc as usize] }];
        let thread_track = |b: &mut Builder, proc: u16, tid: u32| {
            let pid = host_pid[proc as usize];
            let parent = process_track(b, proc);
            b.get(TrackRole::Thread { proc, pid, tid }, |_| Track {
                role: TrackRole::Thread { proc, pid, tid },
                parent: Some(parent),
                name: format!("thread {tid}"),
                json_pid: trace.processes[proc as usize].pid as i64,
                json_tid: tid as i64,
                pid,
            })
        };

        // GPU rows: Chrome pid = device id, as Kineto; offset per file when two files use the same device ids.
        let mut gpu_json_pid: HashMap<(u16, u32), i64> = HashMap::default();
        // The distinct streams of the GPU rows (kernels, copies, memsets), each with its first row: one parallel
        // pass over each kind, from which the GPUs, the contexts' devices and the stream tracks all follow.
        let stream_key = |proc: u16, device: u32, context: u32, stream: u32| (proc, device, context, stream);
        let stream_keys = [
            first_seen(trace.kernels.len(), |i| {
                let k = &trace.kernels[i];
                stream_key(k.proc, k.device, k.context, k.stream)
            }),
            first_seen(trace.memcpys.len(), |i| {
                let k = &trace.memcpys[i];
                stream_key(k.proc, k.device, k.context, k.stream)
            }),
            first_seen(trace.memsets.len(), |i| {
                let k = &trace.memsets[i];
                stream_key(k.proc, k.device, k.context, k.stream)
            }),
        ];
        let mut gpus: Vec<(u16, u32)> = stream_keys
            .iter()
            .flatten()
            .map(|&((proc, device, _, _), _)| (proc, device))
            .chain(
                first_seen(trace.memory.len(), |i| (trace.memory[i].proc, trace.memory[i].device))
                    .into_iter()
                    .map(|(g, _)| g),
            )
            .collect();
        gpus.sort_unstable();
        gpus.dedup();
        let clash = gpus.iter().map(|g| g.1).collect::<std::collections::HashSet<_>>().len() < gpus.len();
        for &(proc, dev) in &gpus {
            gpu_json_pid.insert((proc, dev), if clash { dev as i64 + 1000 * proc as i64 } else { dev as i64 });
        }
        let mut next_gpu_pid = GPU_PID_BASE;
        let mut gpu_track = |b: &mut Builder, proc: u16, device: u32| {
            let json_pid = gpu_json_pid.get(&(proc, device)).copied().unwrap_or(device as i64);
            b.get(TrackRole::Gpu { proc, device }, |_| {
                next_gpu_pid += 1;
                let mut name = device_name(trace, proc, device);
                if multi {
                    name = format!("{name} ({})", trace.label(proc));
                }
                Track {
                    role: TrackRole::Gpu { proc, device },
                    parent: None,
                    name,
                    json_pid,
                    json_tid: 0,
                    pid: next_gpu_pid,
                }
            })
        };
        // Contexts map to devices through the GPU records and CUDA events that name both.
        // The first record naming a context says its device (kernels first, then copies, memsets, events).
        // (A context's first stream in row order holds its first row.)
        let mut ctx_device: HashMap<(u16, u32), u32> = HashMap::default();
        for keys in &stream_keys {
            let mut firsts: Vec<_> =
                keys.iter().map(|&((proc, device, context, _), i)| (i, proc, context, device)).collect();
            firsts.sort_unstable();
            for (_, proc, context, device) in firsts {
                ctx_device.entry((proc, context)).or_insert(device);
            }
        }
        for (key, i) in
            first_seen(trace.cuda_events.len(), |i| (trace.cuda_events[i].proc, trace.cuda_events[i].context))
        {
            ctx_device.entry(key).or_insert(trace.cuda_events[i].device);
        }
        let mut stream_track = |b: &mut Builder, proc: u16, device: u32, context: u32, stream: u32| {
            let gpu = gpu_track(b, proc, device);
            let json_pid = b.tracks[gpu as usize].json_pid;
            let ctx = b.get(TrackRole::Context { proc, device, context }, |_| Track {
                role: TrackRole::Context { proc, device, context },
                parent: Some(gpu),
                name: format!("context {context}"),
                json_pid,
                json_tid: 0,
                pid: 0,
            });
            b.get(TrackRole::Stream { proc, device, context, stream }, |_| Track {
                role: TrackRole::Stream { proc, device, context, stream },
                parent: Some(ctx),
                name: format!("stream {stream}"),
                json_pid,
                json_tid: stream as i64,
                pid: 0,
            })
        };

        // Tracks are made in the order their first row comes (kernels, copies, memsets, then API calls), from the
        // distinct keys found in parallel; then every row's track is looked up by key in parallel (millions of rows
        // share a handful of streams and threads), and the items are made straight into their track's group.
        let mut streams: HashMap<(u16, u32, u32, u32), u32> = HashMap::default();
        for (key @ (proc, device, context, stream), _) in stream_keys.into_iter().flatten() {
            if let std::collections::hash_map::Entry::Vacant(slot) = streams.entry(key) {
                slot.insert(stream_track(&mut b, proc, device, context, stream));
            }
        }
        let mut threads: HashMap<(u16, u32), u32> = HashMap::default();
        for (key @ (proc, tid), _) in first_seen(trace.apis.len(), |i| (trace.apis[i].proc, trace.apis[i].tid)) {
            let t = thread_track(&mut b, proc, tid);
            threads.insert(key, t);
        }
        let _looking = crate::phase::span(|| "track lookups".into());
        let streams = &streams;
        let stream_of = |proc, device, context, stream| streams[&stream_key(proc, device, context, stream)];
        let kernel_tracks: Vec<u32> =
            trace.kernels.par_iter().map(|k| stream_of(k.proc, k.device, k.context, k.stream)).collect();
        let memcpy_tracks: Vec<u32> =
            trace.memcpys.par_iter().map(|k| stream_of(k.proc, k.device, k.context, k.stream)).collect();
        let memset_tracks: Vec<u32> =
            trace.memsets.par_iter().map(|k| stream_of(k.proc, k.device, k.context, k.stream)).collect();
        let threads = &threads;
        let api_tracks: Vec<u32> = trace.apis.par_iter().map(|a| threads[&(a.proc, a.tid)]).collect();
        drop(_looking);
        let _other = crate::phase::span(|| "other tracks".into());
        // NVTX ranges on their threads' tracks, synchronization on a track per context (under the context's GPU):
        // the tracks made in the order of their first row, the rows' tracks looked up in parallel.
        let mut range_threads: HashMap<(u16, u32), u32> = HashMap::default();
        for ((proc, tid), _) in first_seen(trace.ranges.len(), |i| (trace.ranges[i].proc, trace.ranges[i].tid)) {
            range_threads.insert((proc, tid), thread_track(&mut b, proc, tid));
        }
        let mut sync_tracks: HashMap<(u16, u32), u32> = HashMap::default();
        for ((proc, context), i) in first_seen(trace.syncs.len(), |i| (trace.syncs[i].proc, trace.syncs[i].context)) {
            let device = ctx_device.get(&(proc, context)).copied().unwrap_or(0);
            let gpu = gpu_track(&mut b, proc, device);
            let json_pid = b.tracks[gpu as usize].json_pid;
            let stream = trace.syncs[i].stream;
            let t = b.get(TrackRole::Sync { proc, device, context }, |_| Track {
                role: TrackRole::Sync { proc, device, context },
                parent: Some(gpu),
                name: format!("synchronization (context {context})"),
                json_pid,
                json_tid: if stream == u32::MAX { 1 } else { stream as i64 },
                pid: 0,
            });
            sync_tracks.insert((proc, context), t);
        }
        let range_tracks: Vec<u32> = trace.ranges.par_iter().map(|r| range_threads[&(r.proc, r.tid)]).collect();
        let sync_track_of: Vec<u32> = trace.syncs.par_iter().map(|s| sync_tracks[&(s.proc, s.context)]).collect();
        // The few rows of the other kinds, made one by one as their tracks are made.
        let mut items: Vec<Item> = Vec::new();
        let span = trace.span();
        for (i, o) in trace.overheads.iter().enumerate() {
            let parent = process_track(&mut b, o.proc);
            let json_pid = trace.processes[o.proc as usize].pid as i64;
            let t = b.get(TrackRole::Overhead { proc: o.proc }, |_| Track {
                role: TrackRole::Overhead { proc: o.proc },
                parent: Some(parent),
                name: "CUPTI overhead".into(),
                json_pid,
                json_tid: 0,
                pid: 0,
            });
            items.push(Item::new(t, o.start, o.end, Src::Overhead(i as u32)));
        }
        let mut memory_track = HashMap::default();
        for m in &trace.memory {
            let gpu = gpu_track(&mut b, m.proc, m.device);
            let json_pid = b.tracks[gpu as usize].json_pid;
            let t = b.get(TrackRole::Memory { proc: m.proc, device: m.device }, |_| Track {
                role: TrackRole::Memory { proc: m.proc, device: m.device },
                parent: Some(gpu),
                name: "device memory allocated (bytes)".into(),
                json_pid,
                json_tid: 0,
                pid: 0,
            });
            memory_track.insert((m.proc, m.device), t);
        }
        items.push(Item::new(health_track, span.0, span.1.max(span.0), Src::Health));
        // Marks (NVTX instants) need their thread's track too.
        for ((proc, tid), _) in first_seen(trace.marks.len(), |i| (trace.marks[i].proc, trace.marks[i].tid)) {
            thread_track(&mut b, proc, tid);
        }

        drop(_other);
        let (kernels, memcpys, memsets, apis) = (&trace.kernels, &trace.memcpys, &trace.memsets, &trace.apis);
        let kernel = |i: usize, t| Item::new(t, kernels[i].start, kernels[i].end, Src::Kernel(i as u32));
        let memcpy = |i: usize, t| Item::new(t, memcpys[i].start, memcpys[i].end, Src::Memcpy(i as u32));
        let memset = |i: usize, t| Item::new(t, memsets[i].start, memsets[i].end, Src::Memset(i as u32));
        let api = |i: usize, t| Item::new(t, apis[i].start, apis[i].end, Src::Api(i as u32));
        let (ranges, syncs) = (&trace.ranges, &trace.syncs);
        let range = |i: usize, t| {
            let r = &ranges[i];
            // A range never closed lasts to the end of the trace.
            let end = if r.end == u64::MAX { span.1.max(r.start) } else { r.end };
            Item::new(t, r.start, end, Src::Range(i as u32))
        };
        let sync = |i: usize, t| Item::new(t, syncs[i].start, syncs[i].end, Src::Sync(i as u32));
        // The few other rows (overheads, the health slice) and the ranges (sorted by thread), in time order like
        // every other source.
        items.sort_by_key(|it| it.start);
        let other = |i: usize, _| items[i];
        let mut range_order: Vec<u32> = (0..trace.ranges.len() as u32).collect();
        range_order.par_sort_by_key(|&i| trace.ranges[i as usize].start);
        let range_tracks: Vec<u32> = range_order.par_iter().map(|&i| range_tracks[i as usize]).collect();
        let range_in_order = |i: usize, t| range(range_order[i] as usize, t);
        let sources = [
            Source { keys: kernel_tracks, make: &kernel },
            Source { keys: memcpy_tracks, make: &memcpy },
            Source { keys: memset_tracks, make: &memset },
            Source { keys: api_tracks, make: &api },
            Source { keys: range_tracks, make: &range_in_order },
            Source { keys: sync_track_of, make: &sync },
            Source { keys: items.iter().map(|it| it.track).collect(), make: &other },
        ];
        let starts: [&(dyn Fn(usize) -> u64 + Sync); 7] = [
            &|i| kernels[i].start,
            &|i| memcpys[i].start,
            &|i| memsets[i].start,
            &|i| apis[i].start,
            &|i| ranges[range_order[i] as usize].start,
            &|i| syncs[i].start,
            &|i| items[i].start,
        ];
        let grouping = crate::phase::span(|| "group by track".into());
        let (blocks, slices) = time_slices(&sources, &starts);
        let (mut items, bounds) = group_by_key(b.tracks.len(), &sources, &blocks, slices);
        drop(grouping);
        drop(sources);
        drop(tracks_and_items);
        crate::phase::mark("layout items");
        let sorting = crate::phase::span(|| "sort items".into());
        sort_segments(&mut items, &bounds);
        drop(sorting);
        crate::phase::mark("sort items");
        let _s = crate::phase::span(|| "assign lanes".into());
        let overflow_lanes = assign_lanes(&mut b, &mut items);
        drop(_s);
        let _s = crate::phase::span(|| "shard".into());
        let (shards, open_ends) = shard(&items, shard_slices);
        drop(_s);
        let _s = crate::phase::span(|| "flows".into());
        let flows = Flows::build(trace);
        drop(_s);
        Layout {
            tracks: b.tracks,
            items,
            shards,
            open_ends,
            flows,
            labels,
            gpu_json_pid,
            memory_track,
            health_track,
            span,
            overflow_lanes,
        }
    }
}

/// Cuts time into slices of about equal numbers of rows and every source (each in time order) into blocks of
/// rows within one slice, in slice order: grouped by track with these, each track's items come slice by slice,
/// so a track is in layout order once each (track, slice) segment is sorted on its own. Returns the blocks and
/// the number of slices.
fn time_slices<T>(sources: &[Source<'_, T>], starts: &[&(dyn Fn(usize) -> u64 + Sync)]) -> (Vec<Block>, usize) {
    let total: usize = sources.iter().map(|s| s.keys.len()).sum();
    let block_len = (total / 256).max(1 << 14);
    let slices = (total >> 16).clamp(1, 1024);
    // Slice boundaries at even steps through the largest source.
    let Some(largest) = (0..sources.len()).max_by_key(|&s| sources[s].keys.len()) else { return (Vec::new(), 1) };
    let n = sources[largest].keys.len();
    let cuts: Vec<u64> = (1..slices).map(|j| starts[largest](j * n / slices)).collect();
    let mut blocks = Vec::new();
    let mut from = vec![0usize; sources.len()];
    for j in 0..slices {
        for (s, src) in sources.iter().enumerate() {
            let len = src.keys.len();
            // Rows of source s starting before the slice's end (its starts are sorted).
            let end = match cuts.get(j) {
                Some(&cut) => from[s] + partition_point(from[s]..len, |i| starts[s](i) < cut),
                None => len,
            };
            push_blocks(&mut blocks, s, from[s]..end, j, block_len);
            from[s] = end;
        }
    }
    (blocks, slices)
}

/// How many indices of `range`, from its start, satisfy `pred` (which holds for a prefix of it).
fn partition_point(range: std::ops::Range<usize>, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (range.start, range.end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) { lo = mid + 1 } else { hi = mid }
    }
    lo - range.start
}

/// Sorts each segment of items (`items[bounds[i]..bounds[i + 1]]`, one per track and time slice) into layout
/// order, in parallel. A segment is a few runs already in time order (one per kind of row), often already
/// sorted: checked first, else merged by an adaptive (run-detecting) sort.
fn sort_segments(items: &mut [Item], bounds: &[usize]) {
    let mut segments = Vec::with_capacity(bounds.len());
    let mut rest = items;
    for w in bounds.windows(2) {
        let (segment, tail) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
        segments.push(segment);
        rest = tail;
    }
    segments.into_par_iter().for_each(|g| {
        if !g.is_sorted_by_key(Item::key) {
            g.sort_by_key(Item::key);
        }
    });
}

/// The distinct values of `key(i)` for `i` in `0..n`, each with the first `i` that has it, in the order of those
/// `i`. Found in parallel blocks, each remembering its own first sightings; the first block to see a key has
/// its first row.
fn first_seen<K>(n: usize, key: impl Fn(usize) -> K + Sync) -> Vec<(K, usize)>
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

/// Start and end (exclusive) of each track's run of items (items sorted by track first), found in parallel.
fn track_runs(items: &[Item]) -> Vec<(usize, usize)> {
    let mut cuts: Vec<usize> =
        (1..items.len()).into_par_iter().filter(|&i| items[i].track != items[i - 1].track).collect();
    if items.is_empty() {
        return Vec::new();
    }
    cuts.insert(0, 0);
    cuts.push(items.len());
    cuts.windows(2).map(|w| (w[0], w[1])).collect()
}

/// Where one track's items (sorted by start) can be cut so that every item before a cut has ended by the item at
/// it: `0`, the cuts, and `items.len()`. Blocks are searched in parallel, each for its first such point, knowing
/// the latest end before it.
fn quiet_cuts(items: &[Item]) -> Vec<usize> {
    const BLOCK: usize = 1 << 15;
    let mut cuts = vec![0];
    if items.len() > BLOCK {
        let block_max: Vec<u64> =
            items.par_chunks(BLOCK).map(|c| c.iter().map(|it| it.end).max().unwrap_or(0)).collect();
        let mut before = Vec::with_capacity(block_max.len());
        let mut latest = 0;
        for &m in &block_max {
            before.push(latest);
            latest = latest.max(m);
        }
        let found: Vec<usize> = before
            .par_iter()
            .enumerate()
            .skip(1)
            .filter_map(|(b, &latest_before)| {
                let mut latest = latest_before;
                let from = b * BLOCK;
                for (n, it) in items[from..(from + BLOCK).min(items.len())].iter().enumerate() {
                    if latest <= it.start {
                        return Some(from + n);
                    }
                    latest = latest.max(it.end);
                }
                None
            })
            .collect();
        cuts.extend(found);
    }
    cuts.push(items.len());
    cuts
}

/// Moves items that overlap without nesting to overflow lanes (new tracks beside theirs); items stay sorted.
/// Each track's lanes are found in parallel; the lane tracks are then made in item order.
fn assign_lanes(b: &mut Builder, items: &mut [Item]) -> u32 {
    let items_ro: &[Item] = items;
    // Each track's items split where nothing is open: the pieces are laid out independently and in parallel
    // with the same result (at such a point every lane is empty, and an empty lane takes the next item whatever
    // its number), so one long track no longer keeps a single worker busy.
    let pieces: Vec<(usize, usize)> = track_runs(items_ro)
        .into_iter()
        .flat_map(|(i, j)| quiet_cuts(&items_ro[i..j]).windows(2).map(|w| (i + w[0], i + w[1])).collect::<Vec<_>>())
        .collect();
    // (item, lane) of every item that leaves lane 0, in item order.
    let moves: Vec<(usize, u32)> = pieces
        .par_iter()
        .flat_map_iter(|&(i, j)| {
            let mut out = Vec::new();
            // stacks[k] holds the end times of open slices on lane k.
            let mut stacks: Vec<Vec<u64>> = vec![Vec::new()];
            for (n, it) in items_ro[i..j].iter().enumerate() {
                let mut lane = None;
                for (k, st) in stacks.iter_mut().enumerate() {
                    while st.last().is_some_and(|&e| e <= it.start) {
                        st.pop();
                    }
                    if st.last().is_none_or(|&e| it.end <= e) {
                        st.push(it.end);
                        lane = Some(k);
                        break;
                    }
                }
                let k = lane.unwrap_or_else(|| {
                    stacks.push(vec![it.end]);
                    stacks.len() - 1
                });
                if k > 0 {
                    out.push((i + n, k as u32));
                }
            }
            out
        })
        .collect();
    let mut lanes_made = 0u32;
    for &(at, k) in &moves {
        let track = items[at].track;
        let role = TrackRole::Lane { of: track, k };
        let before = b.tracks.len();
        let lt = b.get(role.clone(), |b| {
            let base = &b.tracks[track as usize];
            let name = format!("{} (overlapping {k})", base.name);
            Track { role, parent: base.parent, name, json_pid: base.json_pid, json_tid: base.json_tid, pid: base.pid }
        });
        if b.tracks.len() > before {
            lanes_made += 1;
        }
        items[at].track = lt;
    }
    if let Some(&(first, _)) = moves.first() {
        // The moved items leave their tracks' groups, keeping the others' order, and form their lanes' groups
        // at the end (lane tracks are the newest, so their groups sort last; a lane's items come from one track,
        // already in layout order): a compaction instead of a sort.
        let mut moved: Vec<Item> = moves.iter().map(|&(at, _)| items[at]).collect();
        moved.sort_by_key(|it| it.track);
        let mut leaving = moves.iter().map(|&(at, _)| at).peekable();
        let mut kept = first;
        for at in first..items.len() {
            if leaving.next_if_eq(&at).is_none() {
                items[kept] = items[at];
                kept += 1;
            }
        }
        items[kept..].copy_from_slice(&moved);
    }
    lanes_made
}

/// Cuts each track's items into shards of `shard_slices` items (fewer at a track's end), remembering the slices
/// open at each cut, and orders the shards by their first item's start. Returns the shards and the end times
/// of the open slices they start with.
fn shard(items: &[Item], shard_slices: usize) -> (Vec<ShardRange>, Vec<u64>) {
    // Each track is cut on its own (in parallel); its open ends are numbered from 0 until joined.
    let per_track: Vec<(Vec<ShardRange>, Vec<u64>)> = track_runs(items)
        .into_par_iter()
        .map(|(i, end)| {
            let (mut shards, mut open_ends) = (Vec::new(), Vec::new());
            let mut stack: Vec<u64> = Vec::new();
            let track = items[i].track;
            let (mut from, mut open_from, mut open_len) = (i, 0u32, 0u32);
            for (j, it) in items.iter().enumerate().take(end).skip(i) {
                while stack.last().is_some_and(|&e| e <= it.start) {
                    stack.pop();
                }
                if j - from >= shard_slices {
                    shards.push(ShardRange { track, start: from as u32, end: j as u32, open_from, open_len });
                    (from, open_from, open_len) = (j, open_ends.len() as u32, stack.len() as u32);
                    open_ends.extend_from_slice(&stack);
                }
                stack.push(it.end);
            }
            shards.push(ShardRange { track, start: from as u32, end: end as u32, open_from, open_len });
            (shards, open_ends)
        })
        .collect();
    let mut shards = Vec::new();
    let mut open_ends = Vec::new();
    for (track_shards, ends) in per_track {
        let base = open_ends.len() as u32;
        shards.extend(track_shards.into_iter().map(|s| ShardRange { open_from: s.open_from + base, ..s }));
        open_ends.extend(ends);
    }
    shards.sort_by_key(|s| (items[s.start as usize].start, s.track, s.start));
    (shards, open_ends)
}

/// The CPU->GPU arrows: for each GPU record its number among the records its API call launched, and for each
/// API call how many it launched. Arrow ids follow from these and the correlation id ([`flow_id`]), so no id
/// lists are stored.
#[derive(Clone, Debug, Default)]
pub struct Flows {
    /// Per kernel / memcpy / memset: its number among its launcher's GPU records (`NONE` = no launcher).
    pub kernel: Vec<u32>,
    pub memcpy: Vec<u32>,
    pub memset: Vec<u32>,
    /// Per API call: how many GPU records it launched.
    pub api: Vec<u32>,
    pub total: u64,
}

impl Flows {
    pub const NONE: u32 = u32::MAX;

    /// In parallel: each row's launching call is looked up, each worker counts the records of its own range of
    /// calls (walking all rows), and a record whose call launched only it is number 0. Only the records of calls
    /// that launched several (graph launches) are numbered in a walk, in row (start) order.
    fn build(trace: &Trace) -> Flows {
        fn launchers<T: Sync>(trace: &Trace, rows: &[T], id: impl Fn(&T) -> (u16, u32) + Sync) -> Vec<u32> {
            rows.par_iter()
                .map(|r| {
                    let (proc, corr) = id(r);
                    trace.launcher_index(proc, corr).unwrap_or(Flows::NONE)
                })
                .collect()
        }
        let mut kernel = launchers(trace, &trace.kernels, |k| (k.proc, k.correlation));
        let mut memcpy = launchers(trace, &trace.memcpys, |m| (m.proc, m.correlation));
        let mut memset = launchers(trace, &trace.memsets, |m| (m.proc, m.correlation));
        let mut api = vec![0u32; trace.apis.len()];
        let part = api.len().div_ceil(rayon::current_num_threads().max(1)).max(1);
        api.par_chunks_mut(part).enumerate().for_each(|(p, counts)| {
            let from = p * part;
            for &a in kernel.iter().chain(&memcpy).chain(&memset) {
                if let Some(c) = counts.get_mut((a as usize).wrapping_sub(from)) {
                    *c += 1;
                }
            }
        });
        let total = api.iter().map(|&c| c as u64).sum();
        let mut several = Vec::new();
        for rows in [&mut kernel, &mut memcpy, &mut memset] {
            let api = &api;
            // Rows whose call launched several records, in order; every other row with a call is number 0.
            several.push(
                rows.par_iter_mut()
                    .enumerate()
                    .filter_map(|(i, a)| match *a {
                        Flows::NONE => None,
                        _ if api[*a as usize] == 1 => {
                            *a = 0;
                            None
                        }
                        _ => Some(i),
                    })
                    .collect::<Vec<usize>>(),
            );
        }
        let mut seen: HashMap<u32, u32> = HashMap::default();
        for (rows, several) in [&mut kernel, &mut memcpy, &mut memset].into_iter().zip(several) {
            for i in several {
                let n = seen.entry(rows[i]).or_default();
                rows[i] = *n;
                *n += 1;
            }
        }
        Flows { kernel, memcpy, memset, api, total }
    }
}

fn labels(trace: &mut Trace) -> Labels {
    let mut l = Labels::default();
    // The distinct functions called (a few dozen among millions of calls, found in parallel), named in sorted
    // order; the other labels named in the order their first row comes.
    let (apis, copies, sets, syncs) = (&trace.apis, &trace.memcpys, &trace.memsets, &trace.syncs);
    let mut called = first_seen(apis.len(), |i| (apis[i].proc, apis[i].driver, apis[i].cbid));
    called.sort_unstable();
    let copies = first_seen(copies.len(), |i| (copies[i].copy_kind, copies[i].src_kind, copies[i].dst_kind));
    let sets = first_seen(sets.len(), |i| sets[i].memory_kind);
    let syncs = first_seen(syncs.len(), |i| syncs[i].sync_type);
    for ((proc, driver, cbid), _) in called {
        let name = trace.api_name_of(proc, driver, cbid);
        l.api.insert((proc, driver, cbid), trace.names.intern(&name));
    }
    for (c, _) in copies {
        l.memcpy.insert(c, trace.names.intern(&names::memcpy_name(c.0, c.1, c.2)));
    }
    for (s, _) in sets {
        l.memset.insert(s, trace.names.intern(&names::memset_name(s)));
    }
    for (s, _) in syncs {
        l.sync.insert(s, trace.names.intern(names::sync_type(s)));
    }
    let ovh: Vec<u32> = trace.overheads.iter().map(|o| o.kind).collect();
    for o in ovh {
        l.overhead.entry(o).or_insert_with(|| trace.names.intern(names::overhead_kind(o)));
    }
    l.health = trace.names.intern(&health_name(trace));
    l
}

/// "nothing lost" or "LOSS: ..." for the health slice.
pub fn health_name(trace: &Trace) -> String {
    let loss = trace.loss();
    let mut parts: Vec<String> =
        loss.entries().iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k} {v}")).collect();
    let s = &trace.stats;
    if s.records_in_damaged_chunks > 0 {
        parts.push(format!("records in damaged chunks {}", s.records_in_damaged_chunks));
    }
    if trace.processes.iter().any(|p| !p.problems.is_empty()) {
        parts.push("file problems (see args)".into());
    }
    if parts.is_empty() { "recording complete: nothing lost".into() } else { format!("LOSS: {}", parts.join(", ")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cut_through_open_slices_and_hand_them_on() {
        // Track 0: a range [0, 100] around three calls, the second with a nested call; track 1: two kernels.
        let api = |i| Src::Api(i);
        let items = vec![
            Item::new(0, 0, 100, Src::Range(0)),
            Item::new(0, 10, 20, api(0)),
            Item::new(0, 30, 60, api(1)),
            Item::new(0, 40, 50, api(2)),
            Item::new(0, 70, 80, api(3)),
            Item::new(1, 5, 15, Src::Kernel(0)),
            Item::new(1, 25, 35, Src::Kernel(1)),
        ];
        let (shards, open) = shard(&items, 2);
        let view: Vec<(u32, u32, u32, Vec<u64>)> = shards
            .iter()
            .map(|s| {
                (s.track, s.start, s.end, open[s.open_from as usize..(s.open_from + s.open_len) as usize].to_vec())
            })
            .collect();
        assert_eq!(
            view,
            vec![
                (0, 0, 2, vec![]),
                (1, 5, 7, vec![]),
                // Cut at the call starting at 30: the range is open (ends at 100), the call [10, 20] is not.
                (0, 2, 4, vec![100]),
                // Cut at 70: the range is still open; [30, 60] and [40, 50] ended.
                (0, 4, 5, vec![100]),
            ]
        );
        assert_eq!(shards[0].next_start(&items), Some(30));
        assert_eq!(shards[1].next_start(&items), None);
        assert_eq!(shards[3].next_start(&items), None);
    }

    #[test]
    fn slices_that_overlap_without_nesting_move_to_lanes_beside_their_track() {
        let track = |stream: u32| Track {
            role: TrackRole::Stream { proc: 0, device: 0, context: 1, stream },
            parent: Some(9),
            name: format!("stream {stream}"),
            json_pid: 7,
            json_tid: 3,
            pid: 0,
        };
        let mut b = Builder { tracks: vec![track(7), track(8)], index: HashMap::default(), last: None };
        let k = Src::Kernel;
        let mut items = vec![
            // Track 0: [5, 15] overlaps [0, 10] without nesting -> lane 1; [6, 8] nests in [0, 10]; [7, 16]
            // overlaps both -> lane 2; [12, 20] starts after [0, 10] ended -> lane 0.
            Item::new(0, 0, 10, k(0)),
            Item::new(0, 5, 15, k(1)),
            Item::new(0, 6, 8, k(2)),
            Item::new(0, 7, 16, k(3)),
            Item::new(0, 12, 20, k(4)),
            // Track 1: [3, 9] overlaps [1, 4] -> its own lane 1.
            Item::new(1, 1, 4, k(5)),
            Item::new(1, 3, 9, k(6)),
        ];
        assert_eq!(assign_lanes(&mut b, &mut items), 3);
        let names: Vec<&str> = b.tracks.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "stream 7",
                "stream 8",
                "stream 7 (overlapping 1)",
                "stream 7 (overlapping 2)",
                "stream 8 (overlapping 1)"
            ]
        );
        assert!(b.tracks[2..].iter().all(|t| (t.parent, t.json_pid, t.json_tid) == (Some(9), 7, 3)));
        let placed: Vec<(u32, u64)> = items.iter().map(|i| (i.track, i.start)).collect();
        // Sorted by track again: lanes come after their base tracks.
        assert_eq!(placed, [(0, 0), (0, 6), (0, 12), (1, 1), (2, 5), (3, 7), (4, 3)]);
    }

    #[test]
    fn quiet_points_are_where_everything_before_has_ended() {
        // 100,000 back-to-back slices, the first lasting until the 40,000th starts: blocks of 32,768 items each
        // cut at their first item except the second, which cuts where the long slice has ended.
        let mut items: Vec<Item> =
            (0..100_000u64).map(|i| Item::new(0, i * 10, i * 10 + 5, Src::Kernel(i as u32))).collect();
        items[0].end = 400_000;
        assert_eq!(quiet_cuts(&items), [0, 40_000, 65_536, 98_304, 100_000]);
        assert_eq!(quiet_cuts(&items[..10]), [0, 10]);
    }

    #[test]
    fn lanes_found_piece_by_piece_equal_one_walk_over_the_track() {
        // Bursts of overlapping slices with quiet gaps between some of them, over many blocks.
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 33
        };
        let mut items = Vec::new();
        let mut t = 0;
        for i in 0..150_000u32 {
            t += next() % 50;
            if i % 1000 == 0 {
                t += 10_000;
            }
            items.push(Item::new(0, t, t + next() % 400, Src::Kernel(i)));
        }
        items.sort_unstable_by_key(Item::key);
        // One walk over the whole track, the way lanes were assigned before it was cut into pieces.
        let mut want: Vec<(u64, u64, u32)> = Vec::new();
        let mut stacks: Vec<Vec<u64>> = vec![Vec::new()];
        for it in &items {
            let k = stacks
                .iter_mut()
                .position(|st| {
                    while st.last().is_some_and(|&e| e <= it.start) {
                        st.pop();
                    }
                    st.last().is_none_or(|&e| it.end <= e)
                })
                .unwrap_or_else(|| {
                    stacks.push(Vec::new());
                    stacks.len() - 1
                });
            stacks[k].push(it.end);
            want.push((it.start, it.end, k as u32));
        }
        let mut b = Builder {
            tracks: vec![Track {
                role: TrackRole::Stream { proc: 0, device: 0, context: 1, stream: 7 },
                parent: None,
                name: "stream 7".into(),
                json_pid: 0,
                json_tid: 7,
                pid: 0,
            }],
            index: HashMap::default(),
            last: None,
        };
        let lanes = assign_lanes(&mut b, &mut items);
        assert_eq!(lanes as usize, stacks.len() - 1);
        assert!(lanes >= 3, "{lanes} lanes: the test needs overlaps several deep");
        // Lane k is track k (lanes are made in order of first use).
        let mut got: Vec<(u64, u64, u32)> = items.iter().map(|it| (it.start, it.end, it.track)).collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
        assert!(items.windows(2).all(|w| w[0].key() < w[1].key()));
    }

    #[test]
    fn time_slices_cover_every_row_once_in_time_order() {
        // Two sources in time order: 300,000 rows every 10 ns and 1,000 rows every 3,000 ns.
        let a_keys = vec![0u32; 300_000];
        let b_keys = vec![1u32; 1_000];
        let make = |i: usize, _| i;
        let sources = [Source { keys: a_keys, make: &make }, Source { keys: b_keys, make: &make }];
        let starts: [&(dyn Fn(usize) -> u64 + Sync); 2] = [&|i| i as u64 * 10, &|i| i as u64 * 3_000];
        let (blocks, slices) = time_slices(&sources, &starts);
        assert_eq!(slices, 4);
        for (s, src) in sources.iter().enumerate() {
            let rows: Vec<usize> = blocks.iter().filter(|b| b.source == s).flat_map(|b| b.rows.clone()).collect();
            assert_eq!(rows, (0..src.keys.len()).collect::<Vec<_>>());
        }
        // Every row of slice j starts before every row of slice j + 1.
        let span = |j: usize| {
            let starts =
                blocks.iter().filter(|b| b.segment == j).flat_map(|b| b.rows.clone().map(|i| starts[b.source](i)));
            starts.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)))
        };
        assert!((1..slices).all(|j| span(j - 1).1 < span(j).0));
        assert!(blocks.windows(2).all(|w| w[0].segment <= w[1].segment));
        assert_eq!(span(0), (0, 749_990));
    }

    #[test]
    fn first_sightings_come_in_row_order_across_blocks() {
        // Keys repeat in runs and across the 32,768-row blocks; a key first seen late in a block comes after one
        // seen early in a later block only by row.
        let keys: Vec<u32> = (0..100_000u32).map(|i| if i < 40_000 { i / 20_000 } else { 7 - (i / 30_000) }).collect();
        let got = first_seen(keys.len(), |i| keys[i]);
        assert_eq!(got, [(0, 0), (1, 20_000), (6, 40_000), (5, 60_000), (4, 90_000)]);
        assert!(first_seen(0, |i| keys[i]).is_empty());
    }

    #[test]
    fn traces_past_the_index_limits_are_refused() {
        assert_eq!(rows_over_limit(&[("kernel", MAX_ROWS_PER_KIND - 1), ("API call", 5)]), None);
        assert_eq!(
            rows_over_limit(&[("kernel", 1), ("API call", 1 << 29)]).as_deref(),
            Some("536870912 API call records exceed the 536870912 one conversion can lay out")
        );
        assert_eq!(rows_over_limit(&[("kernel", 500_000_000); 8]), None);
        assert_eq!(
            rows_over_limit(&[("kernel", 500_000_000); 9]).as_deref(),
            Some("4500000000 slices exceed the 4294967295 one conversion can lay out")
        );
    }
}
