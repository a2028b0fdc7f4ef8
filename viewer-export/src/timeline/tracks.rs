//! The tracks of a timeline: host processes and their threads, GPUs with their contexts and streams, a
//! synchronization track per context, CUPTI overhead, device memory counters, the recording-health track, and
//! overflow lanes (the unified memory tracks are made in `um`, the GPU metrics in `gpu_metrics`). Each track
//! knows its place in the hierarchy (Perfetto) and its Chrome JSON row (Kineto's pid/tid conventions).

use cutr_model::{ProcId, Trace};
use rustc_hash::FxHashMap as HashMap;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TrackRole {
    HostProcess {
        proc: ProcId,
        pid: u32,
    },
    Thread {
        proc: ProcId,
        pid: u32,
        tid: u32,
    },
    Gpu {
        proc: ProcId,
        device: u32,
    },
    Context {
        proc: ProcId,
        device: u32,
        context: u32,
    },
    Stream {
        proc: ProcId,
        device: u32,
        context: u32,
        stream: u32,
    },
    /// The NVTX ranges over the GPU work they launched on one stream (`annotations`), beside the stream.
    StreamRanges {
        proc: ProcId,
        device: u32,
        context: u32,
        stream: u32,
    },
    /// Synchronizations of one stream (stream syncs, stream waits on events).
    StreamSync {
        proc: ProcId,
        device: u32,
        context: u32,
        stream: u32,
    },
    /// Synchronizations of no one stream (context syncs, event syncs) of a context.
    DeviceSync {
        proc: ProcId,
        device: u32,
        context: u32,
    },
    Overhead {
        proc: ProcId,
    },
    Memory {
        proc: ProcId,
        device: u32,
    },
    /// The parent of a GPU's metric counter tracks ([`TrackRole::Counter`]), under the GPU (`gpu_metrics`).
    GpuMetrics {
        proc: ProcId,
        device: u32,
    },
    /// One series of counter samples of a GPU (`cutr_model::counters`), under its GPU's [`TrackRole::GpuMetrics`].
    Counter {
        proc: ProcId,
        device: u32,
        series: cutr_model::NameId,
    },
    /// Unified memory events of a GPU: migrations to and from it, its page faults, throttling, remote maps.
    UnifiedMemory {
        proc: ProcId,
        device: u32,
    },
    /// Unified memory events of no one GPU (CPU page faults, thrashing) of a process.
    UnifiedMemoryHost {
        proc: ProcId,
    },
    /// Managed or pinned host memory in use of a GPU (device memory is [`TrackRole::Memory`]).
    MemoryOfClass {
        proc: ProcId,
        device: u32,
        class: cutr_model::memory::MemoryClass,
    },
    /// The rate of one kind of unified memory migration of a GPU, in bytes/s.
    UmRate {
        proc: ProcId,
        device: u32,
        kind: cutr_model::rows::UmKind,
    },
    /// The NVTX ranges CUDA graphs were captured in, over each replay's work on a GPU (`graphs`).
    CapturedRanges {
        proc: ProcId,
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
    /// No slice of this track nests in another: its slices are independent records (kernels of a stream, syncs
    /// of different threads, overheads), so one inside another's time is not its child and goes to a lane.
    pub flat: bool,
}

/// Chrome JSON rows of the overflow lanes of a GPU track: the base row's tid plus this per lane, so that no two
/// slices of a GPU row overlap in JSON either.
pub const LANE_TID_STEP: i64 = 10_000_000;

/// Chrome JSON tid offset of a stream's synchronization row (Kineto's `kSyncStreamTidOffset`).
pub const SYNC_TID_OFFSET: i64 = 1_000_000;

/// Chrome JSON tid of a device's row of syncs of no one stream (Kineto writes stream -1 as tid 1).
pub const DEVICE_SYNC_TID: i64 = 1;

/// Chrome JSON tid of a GPU's row of capture-time NVTX ranges over graph replays: past the sync rows
/// ([`SYNC_TID_OFFSET`]) and the unified memory row (`UM_TID`), below the first lane ([`LANE_TID_STEP`]).
pub const CAPTURED_RANGES_TID: i64 = 3_000_000;

impl TrackRole {
    /// Whether the track shows GPU-side rows (streams and their syncs, unified memory).
    pub fn on_gpu_row(&self) -> bool {
        matches!(
            self,
            TrackRole::Stream { .. }
                | TrackRole::StreamRanges { .. }
                | TrackRole::StreamSync { .. }
                | TrackRole::DeviceSync { .. }
                | TrackRole::UnifiedMemory { .. }
                | TrackRole::CapturedRanges { .. }
        )
    }
}

/// The track a lane belongs to (`t` itself for any other track).
pub fn base_track(tracks: &[Track], mut t: u32) -> u32 {
    while let TrackRole::Lane { of, .. } = tracks[t as usize].role {
        t = of;
    }
    t
}

/// The tracks made so far, each made once per role (its index is its id).
#[derive(Clone, Debug, Default)]
pub(crate) struct TrackSet {
    pub tracks: Vec<Track>,
    index: HashMap<TrackRole, u32>,
    /// The last role looked up: consecutive records mostly land on the same track.
    last: Option<(TrackRole, u32)>,
}

impl TrackSet {
    #[cfg(test)]
    pub fn from_tracks(tracks: Vec<Track>) -> TrackSet {
        TrackSet { tracks, ..Default::default() }
    }

    /// The track of `role`, made by `make` if there is none yet.
    pub fn get(&mut self, role: TrackRole, make: impl FnOnce(&TrackSet) -> Track) -> u32 {
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

    /// Overflow lane `k` of `track`: beside it; on the same Chrome row for host tracks, on a row of its own
    /// for GPU rows ([`LANE_TID_STEP`]).
    pub fn lane(&mut self, track: u32, k: u32) -> u32 {
        let role = TrackRole::Lane { of: track, k };
        self.get(role.clone(), |s| {
            let base = &s.tracks[track as usize];
            let name = format!("{} (overlapping {k})", base.name);
            let json_tid =
                if base.role.on_gpu_row() { base.json_tid + LANE_TID_STEP * k as i64 } else { base.json_tid };
            Track { role, parent: base.parent, name, json_pid: base.json_pid, json_tid, pid: base.pid, flat: base.flat }
        })
    }

    pub fn len(&self) -> usize {
        self.tracks.len()
    }
}

/// Pseudo pids for GPUs, out of the range of real pids.
const GPU_PID_BASE: u32 = 0x4000_0000;

/// Makes the tracks of one trace's rows, naming them from the trace's metadata.
pub(crate) struct TrackMaker<'t> {
    pub set: TrackSet,
    trace: &'t Trace,
    /// Several input files: names say which file a process or GPU is from.
    multi: bool,
    /// Host pid of each file, unique in the trace even when files come from several hosts.
    host_pid: Vec<u32>,
    /// (file, device) -> Chrome pid of its GPU rows.
    pub gpu_json_pid: HashMap<(ProcId, u32), i64>,
    next_gpu_pid: u32,
}

impl<'t> TrackMaker<'t> {
    /// Starts with the health track (track 0) and one track per host process, in file order.
    pub fn new(trace: &'t Trace) -> TrackMaker<'t> {
        let mut m = TrackMaker {
            set: TrackSet::default(),
            trace,
            multi: trace.processes.len() > 1,
            host_pid: Vec::new(),
            gpu_json_pid: HashMap::default(),
            next_gpu_pid: GPU_PID_BASE,
        };
        m.set.get(TrackRole::Health, |_| Track {
            role: TrackRole::Health,
            parent: None,
            name: "cutr: recording health".into(),
            json_pid: 0,
            json_tid: 0,
            pid: 0,
            flat: false,
        });
        let mut used_pids = std::collections::HashSet::new();
        for (i, p) in trace.processes.iter().enumerate() {
            let proc = ProcId(i as u16);
            let mut pid = p.pid;
            while !used_pids.insert(pid) {
                pid = pid.wrapping_add(1 << 22);
            }
            m.host_pid.push(pid);
            let name = if m.multi {
                let which = p.rank().map_or_else(|| trace.label(proc), |r| format!("rank {}", r.rank));
                format!("{} (pid {}, {which})", trace.process_name(proc), p.pid)
            } else {
                format!("{} (pid {})", trace.process_name(proc), p.pid)
            };
            let role = TrackRole::HostProcess { proc, pid };
            m.set.get(role.clone(), |_| Track {
                role,
                parent: None,
                name,
                json_pid: p.pid as i64,
                json_tid: 0,
                pid,
                flat: true,
            });
        }
        m
    }

    pub fn health(&self) -> u32 {
        0
    }

    /// The Chrome JSON pid of a file's process (its recorded pid).
    pub(crate) fn json_pid(&self, proc: ProcId) -> i64 {
        self.trace.processes[proc.index()].pid as i64
    }

    pub fn process(&mut self, proc: ProcId) -> u32 {
        let pid = self.host_pid[proc.index()];
        self.set.get(TrackRole::HostProcess { proc, pid }, |_| unreachable!("every process track is made first"))
    }

    pub fn thread(&mut self, proc: ProcId, tid: u32) -> u32 {
        let pid = self.host_pid[proc.index()];
        let parent = self.process(proc);
        let json_pid = self.json_pid(proc);
        let role = TrackRole::Thread { proc, pid, tid };
        let name = self.trace.processes[proc.index()].thread_label(tid);
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(parent),
            name,
            json_pid,
            json_tid: tid as i64,
            pid,
            flat: false,
        })
    }

    /// Chrome pids of the GPUs: the device id, as Kineto; offset per file when two files use the same device ids.
    pub fn number_gpus(&mut self, mut gpus: Vec<(ProcId, u32)>) {
        gpus.sort_unstable();
        gpus.dedup();
        let clash = gpus.iter().map(|g| g.1).collect::<std::collections::HashSet<_>>().len() < gpus.len();
        for &(proc, dev) in &gpus {
            self.gpu_json_pid.insert((proc, dev), if clash { dev as i64 + 1000 * proc.0 as i64 } else { dev as i64 });
        }
    }

    pub fn gpu(&mut self, proc: ProcId, device: u32) -> u32 {
        let json_pid = self.gpu_json_pid.get(&(proc, device)).copied().unwrap_or(device as i64);
        let trace = self.trace;
        let multi = self.multi;
        let next_gpu_pid = &mut self.next_gpu_pid;
        self.set.get(TrackRole::Gpu { proc, device }, |_| {
            *next_gpu_pid += 1;
            let mut name = device_name(trace, proc, device);
            if multi {
                let p = &trace.processes[proc.index()];
                let which = p.rank().map_or_else(|| trace.label(proc), |r| format!("rank {}", r.rank));
                name = format!("{name} ({which})");
            }
            Track {
                role: TrackRole::Gpu { proc, device },
                parent: None,
                name,
                json_pid,
                json_tid: 0,
                pid: *next_gpu_pid,
                flat: true,
            }
        })
    }

    /// A stream's track, under its context's, under its GPU's.
    pub fn stream(&mut self, proc: ProcId, device: u32, context: u32, stream: u32) -> u32 {
        let gpu = self.gpu(proc, device);
        let json_pid = self.set.tracks[gpu as usize].json_pid;
        let role = TrackRole::Context { proc, device, context };
        let ctx = self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(gpu),
            name: format!("context {context}"),
            json_pid,
            json_tid: 0,
            pid: 0,
            flat: true,
        });
        let role = TrackRole::Stream { proc, device, context, stream };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(ctx),
            name: format!("stream {stream}"),
            json_pid,
            json_tid: stream as i64,
            pid: 0,
            flat: true,
        })
    }

    /// The track of a synchronization: a stream's syncs beside the stream (under its context), on Kineto's row
    /// `stream N (sync)`; the rest (`u32::MAX`: context and event syncs, and the placement's syncs of streams that
    /// ran no GPU work) on a per-context track `syncs (context C)` under the GPU, on Kineto's device-wide row
    /// (tid 1).
    pub fn sync(&mut self, proc: ProcId, device: u32, context: u32, stream: u32) -> u32 {
        let gpu = self.gpu(proc, device);
        let json_pid = self.set.tracks[gpu as usize].json_pid;
        if stream == u32::MAX {
            let role = TrackRole::DeviceSync { proc, device, context };
            return self.set.get(role.clone(), |_| Track {
                role,
                parent: Some(gpu),
                name: format!("syncs (context {context})"),
                json_pid,
                json_tid: DEVICE_SYNC_TID,
                pid: 0,
                flat: true,
            });
        }
        let role = TrackRole::Context { proc, device, context };
        let ctx = self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(gpu),
            name: format!("context {context}"),
            json_pid,
            json_tid: 0,
            pid: 0,
            flat: true,
        });
        let role = TrackRole::StreamSync { proc, device, context, stream };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(ctx),
            name: format!("stream {stream} (sync)"),
            json_pid,
            json_tid: SYNC_TID_OFFSET + stream as i64,
            pid: 0,
            flat: true,
        })
    }

    pub fn overhead(&mut self, proc: ProcId) -> u32 {
        let parent = self.process(proc);
        let json_pid = self.json_pid(proc);
        let role = TrackRole::Overhead { proc };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(parent),
            name: "CUPTI overhead".into(),
            json_pid,
            json_tid: 0,
            pid: 0,
            flat: true,
        })
    }

    /// The device memory in use counter of a GPU (`cutr_model::memory::memory_in_use`).
    pub fn memory(&mut self, proc: ProcId, device: u32) -> u32 {
        let gpu = self.gpu(proc, device);
        let json_pid = self.set.tracks[gpu as usize].json_pid;
        let role = TrackRole::Memory { proc, device };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(gpu),
            name: "device memory in use (bytes)".into(),
            json_pid,
            json_tid: 0,
            pid: 0,
            flat: true,
        })
    }
}

impl TrackMaker<'_> {
    /// The GPU track of a file's device, and its Chrome JSON pid.
    pub fn gpu_and_json_pid(&mut self, proc: ProcId, device: u32) -> (u32, i64) {
        let gpu = self.gpu(proc, device);
        (gpu, self.set.tracks[gpu as usize].json_pid)
    }

    /// The track of the capture-time NVTX ranges over a GPU's graph replays, under the GPU. Its slices nest (a
    /// range over its children), so it is not flat; overlapping siblings (graph branches run concurrently) take
    /// lanes on Chrome rows of their own.
    pub fn captured_ranges(&mut self, proc: ProcId, device: u32) -> u32 {
        let (gpu, json_pid) = self.gpu_and_json_pid(proc, device);
        let role = TrackRole::CapturedRanges { proc, device };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(gpu),
            name: "graph replays: captured NVTX ranges".into(),
            json_pid,
            json_tid: CAPTURED_RANGES_TID,
            pid: 0,
            flat: false,
        })
    }

    /// A context's track, under its GPU's.
    pub(crate) fn context(&mut self, proc: ProcId, device: u32, context: u32) -> u32 {
        let (gpu, json_pid) = self.gpu_and_json_pid(proc, device);
        let role = TrackRole::Context { proc, device, context };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(gpu),
            name: format!("context {context}"),
            json_pid,
            json_tid: 0,
            pid: 0,
            flat: true,
        })
    }

    /// The track of the NVTX ranges' spans over a stream's work: beside the stream (under its context), on the
    /// stream's own Chrome row, as Kineto writes `gpu_user_annotation`s (HTA matches an annotation to the
    /// kernels of its row). Its slices nest (an outer range's own work around an inner one's), so it is not flat.
    pub fn stream_ranges(&mut self, proc: ProcId, device: u32, context: u32, stream: u32) -> u32 {
        let json_pid = self.gpu_and_json_pid(proc, device).1;
        let ctx = self.context(proc, device, context);
        let role = TrackRole::StreamRanges { proc, device, context, stream };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(ctx),
            name: format!("stream {stream} (NVTX ranges)"),
            json_pid,
            json_tid: stream as i64,
            pid: 0,
            flat: false,
        })
    }
}

fn device_name(trace: &Trace, proc: ProcId, device: u32) -> String {
    trace.processes[proc.index()]
        .meta
        .devices
        .iter()
        .find(|d| d.id == device)
        .map(|d| format!("GPU {device}: {}", d.name))
        .unwrap_or_else(|| format!("GPU {device}"))
}
