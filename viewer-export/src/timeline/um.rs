//! Unified memory and device memory on the timeline: a "Unified memory" track per GPU (migrations, page faults,
//! throttling, remote maps), a "Unified memory (CPU)" track per process (CPU page faults, thrashing), and the step
//! counters both writers draw the same way: the rate of each kind of migration and of GPU page faults per GPU, and
//! device, managed and pinned host memory in use.

use cutr_model::memory::{MemoryClass, memory_in_use_of};
use cutr_model::rows::{UM_CPU, UmEvent, UmKind};
use cutr_model::um::RunningKernels;
use cutr_model::{ProcId, Trace};
use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

use super::placement::first_seen;
use super::tracks::{Track, TrackMaker, TrackRole};

/// Chrome JSON row (tid, under the GPU's pid) of a GPU's unified memory track: above every stream id and sync
/// row (`SYNC_TID_OFFSET` + stream), below the first overflow lane's step.
pub const UM_TID: i64 = 2_000_000;

/// Chrome JSON row (tid, under the process's pid) of a process's unified memory events of no one GPU: above
/// Linux's largest thread id (`PID_MAX_LIMIT`, 2^22), so that it is no thread's row.
pub const UM_HOST_TID: i64 = 1 << 30;

/// A counter drawn as steps: from each point's time on, the value holds until the next point.
#[derive(Clone, Debug, PartialEq)]
pub struct StepCounter {
    /// The timeline track (a counter track).
    pub track: u32,
    /// Chrome JSON: the counter's name and its one series (Perfetto's JSON importer names the track
    /// `"{json_name} {json_series}"`).
    pub json_name: &'static str,
    pub json_series: &'static str,
    /// (time, value), in time order, at most one per time.
    pub points: Vec<(u64, f64)>,
}

impl TrackMaker<'_> {
    /// The unified memory track of a GPU, under the GPU.
    pub(crate) fn um(&mut self, proc: ProcId, device: u32) -> u32 {
        let (gpu, json_pid) = self.gpu_and_json_pid(proc, device);
        let role = TrackRole::UnifiedMemory { proc, device };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(gpu),
            name: "Unified memory".into(),
            json_pid,
            json_tid: UM_TID,
            pid: 0,
            // Migrations and faults are independent records: one inside another's time is not its child.
            flat: true,
        })
    }

    /// The track of a process's unified memory events of no one GPU, under the process.
    pub(crate) fn um_host(&mut self, proc: ProcId) -> u32 {
        let parent = self.process(proc);
        let json_pid = self.json_pid(proc);
        let role = TrackRole::UnifiedMemoryHost { proc };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(parent),
            name: "Unified memory (CPU)".into(),
            json_pid,
            json_tid: UM_HOST_TID,
            pid: 0,
            flat: true,
        })
    }

    /// The counter track of a GPU's managed or pinned host memory in use.
    pub(crate) fn memory_of_class(&mut self, proc: ProcId, device: u32, class: MemoryClass) -> u32 {
        let (gpu, json_pid) = self.gpu_and_json_pid(proc, device);
        let role = TrackRole::MemoryOfClass { proc, device, class };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(gpu),
            name: format!("{} (bytes)", memory_counter_name(class)),
            json_pid,
            json_tid: 0,
            pid: 0,
            flat: true,
        })
    }

    /// The counter track of a GPU's rate of one kind of event (`UM HtoD bytes/s`).
    fn um_rate(&mut self, proc: ProcId, device: u32, kind: UmKind) -> u32 {
        let (gpu, json_pid) = self.gpu_and_json_pid(proc, device);
        let role = TrackRole::UmRate { proc, device, kind };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(gpu),
            name: format!("{} {}", um_slice_name(kind), rate_unit(kind)),
            json_pid,
            json_tid: 0,
            pid: 0,
            flat: true,
        })
    }
}

/// The name of a unified memory event's slice (and, for migrations, of its rate counter without the unit).
pub fn um_slice_name(kind: UmKind) -> &'static str {
    match kind {
        UmKind::BytesHtoD => "UM HtoD",
        UmKind::BytesDtoH => "UM DtoH",
        UmKind::BytesDtoD => "UM DtoD",
        UmKind::CpuPageFault => "UM CPU page fault",
        UmKind::GpuPageFault => "UM GPU page fault",
        UmKind::Thrashing => "UM thrashing",
        UmKind::Throttling => "UM throttling",
        UmKind::RemoteMap => "UM remote map",
    }
}

/// The name of the memory in use counter of a class of memory (Chrome JSON; Perfetto adds the unit).
pub fn memory_counter_name(class: MemoryClass) -> &'static str {
    match class {
        MemoryClass::Device => "device memory in use",
        MemoryClass::Managed => "managed memory in use",
        MemoryClass::PinnedHost => "pinned host memory in use",
    }
}

/// The unit of a rate counter of unified memory events of a kind: migrations move bytes, GPU page faults come in
/// fault groups.
pub fn rate_unit(kind: UmKind) -> &'static str {
    if kind.is_migration() { "bytes/s" } else { "groups/s" }
}

/// Whether a kind of unified memory event has a rate counter: the migrations and GPU page faults (the kinds with
/// a duration to spread their value over, and a value that adds up).
fn has_rate(kind: UmKind) -> bool {
    kind.is_migration() || kind == UmKind::GpuPageFault
}

/// A processor a unified memory event names: a CPU (`true`) or a GPU, and its id.
pub type Processor = (bool, u32);

/// The source and destination processors of a migration or remote map. CUPTI numbers CPUs and GPUs alike
/// (`srcId`/`dstId`: "the ID of the source CPU/device"): an HtoD migration's source is a CPU and a DtoH's
/// destination, whatever their ids (the H100 fixture's HtoD records have CPU 0, not `UM_CPU`, as their source);
/// a DtoD moves between GPUs; a remote map says only through `UM_CPU` which side is the CPU.
pub fn um_endpoints(e: &UmEvent) -> [Processor; 2] {
    let cpu_by_id = |id: u32| (id == UM_CPU, id);
    match e.kind {
        UmKind::BytesHtoD => [(true, e.src), (false, e.dst)],
        UmKind::BytesDtoH => [(false, e.src), (true, e.dst)],
        UmKind::BytesDtoD => [(false, e.src), (false, e.dst)],
        _ => [cpu_by_id(e.src), cpu_by_id(e.dst)],
    }
}

/// A processor's name: `GPU 1`, `CPU 0`, or `CPU` for CUPTI's CPU id (`UM_CPU`).
pub fn processor_name((cpu, id): Processor) -> String {
    match (cpu, id) {
        (true, UM_CPU) => "CPU".into(),
        (true, id) => format!("CPU {id}"),
        (false, id) => format!("GPU {id}"),
    }
}

/// The track of every unified memory event (in `Trace::um` order): its GPU's track, or its process's for the
/// events of no one GPU.
pub(crate) fn place_um(maker: &mut TrackMaker<'_>, trace: &Trace) -> Vec<u32> {
    let um = &trace.um;
    let mut tracks: HashMap<(ProcId, Option<u32>), u32> = HashMap::default();
    for (key @ (proc, device), _) in first_seen(um.len(), |i| (um[i].proc, um[i].device())) {
        let t = match device {
            Some(d) => maker.um(proc, d),
            None => maker.um_host(proc),
        };
        tracks.insert(key, t);
    }
    um.par_iter().map(|e| tracks[&(e.proc, e.device())]).collect()
}

/// The kernel (index into `Trace::kernels`) running on each unified memory event's GPU when it began, or
/// `u32::MAX`; empty without unified memory events.
pub(crate) fn running_kernels(trace: &Trace) -> Vec<u32> {
    if trace.um.is_empty() {
        return Vec::new();
    }
    let running = RunningKernels::new(trace);
    trace.um.par_iter().map(|e| running.of_um(e).map_or(u32::MAX, |k| k as u32)).collect()
}

/// The series of a migration rate counter: (file, device, kind of migration).
type RateKey = (ProcId, u32, UmKind);

/// The step counters: device, managed and pinned host memory in use of every GPU with allocations of the class
/// (device memory on the memory tracks made from the allocation records), then each GPU's migration and page
/// fault rates; the tracks other than the memory tracks made here.
pub(crate) fn step_counters(
    maker: &mut TrackMaker<'_>,
    trace: &Trace,
    memory_track: &HashMap<(ProcId, u32), u32>,
) -> Vec<StepCounter> {
    let mut out: Vec<StepCounter> = Vec::new();
    for class in [MemoryClass::Device, MemoryClass::Managed, MemoryClass::PinnedHost] {
        for m in memory_in_use_of(trace, class) {
            // Device memory goes on the GPU's memory track (made for every GPU with allocation records, as before
            // memory had classes); managed and pinned host memory on tracks of their own, where there is some.
            let track = match class {
                MemoryClass::Device => memory_track[&(m.proc, m.device)],
                _ => maker.memory_of_class(m.proc, m.device, class),
            };
            let points = m.points.iter().map(|p| (p.ts, p.bytes as f64)).collect();
            out.push(StepCounter { track, json_name: memory_counter_name(class), json_series: "bytes", points });
        }
    }
    let mut by_series: Vec<(RateKey, Vec<&UmEvent>)> = Vec::new();
    let mut index: HashMap<RateKey, usize> = HashMap::default();
    for e in trace.um.iter().filter(|e| has_rate(e.kind)) {
        let Some(device) = e.device() else { continue };
        let key = (e.proc, device, e.kind);
        let i = *index.entry(key).or_insert_with(|| {
            by_series.push((key, Vec::new()));
            by_series.len() - 1
        });
        by_series[i].1.push(e);
    }
    for ((proc, device, kind), events) in by_series {
        let track = maker.um_rate(proc, device, kind);
        out.push(StepCounter {
            track,
            json_name: um_slice_name(kind),
            json_series: rate_unit(kind),
            points: rate_over_time(&events),
        });
    }
    out
}

/// The rate of migrations (bytes/s) or GPU page faults (fault groups/s) over time: each event's value spread over
/// its own duration and the concurrent ones added, so that the integral of the steps is the bytes moved (fault
/// groups). An event CUPTI timed at 0 ns is drawn over 1 ns (its value must show somewhere). Back to exactly 0 wherever none is running. Every edge
/// adds or removes one migration's rate, each end after its start: nothing is lost, whatever the values.
pub(crate) fn rate_over_time(events: &[&UmEvent]) -> Vec<(u64, f64)> {
    // (time, starts (true) or ends, rate); ends sort before starts at one time.
    let mut edges: Vec<(u64, bool, f64)> = Vec::with_capacity(events.len() * 2);
    for e in events {
        let duration = e.duration().max(1);
        let rate = e.value as f64 * 1e9 / duration as f64;
        // At the very end of time (a hostile timestamp), drawn ending there rather than not at all.
        let end = e.start.saturating_add(duration);
        edges.push((end - duration, true, rate));
        edges.push((end, false, rate));
    }
    edges.sort_by_key(|&(ts, starts, _)| (ts, starts));
    let mut points: Vec<(u64, f64)> = Vec::new();
    let (mut running, mut rate) = (0usize, 0.0f64);
    for (i, &(ts, starts, r)) in edges.iter().enumerate() {
        if starts {
            running += 1;
            rate += r;
        } else {
            running -= 1;
            rate -= r;
        }
        if running == 0 {
            // No drift left behind by the additions and subtractions.
            rate = 0.0;
        }
        let last_at_ts = edges.get(i + 1).is_none_or(|next| next.0 != ts);
        if last_at_ts && points.last().is_none_or(|p| p.1 != rate) {
            points.push((ts, rate));
        }
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn migration(start: u64, end: u64, bytes: u64) -> UmEvent {
        UmEvent {
            proc: ProcId(0),
            kind: UmKind::BytesHtoD,
            start,
            end,
            value: bytes,
            address: 0,
            src: UM_CPU,
            dst: 0,
            flags: 0,
            pc: 0,
            processors: 0,
        }
    }

    /// The integral of a step series (bytes for a rate in bytes/s).
    fn integral(points: &[(u64, f64)]) -> f64 {
        points.windows(2).map(|w| w[0].1 * (w[1].0 - w[0].0) as f64 / 1e9).sum()
    }

    #[test]
    fn overlapping_migrations_add_their_rates_and_integrate_to_their_bytes() {
        // 4096 B over [100, 200), 8192 B over [150, 250), 65536 B over [250, 250] (drawn over 1 ns), 1 MiB over
        // [1000, 3000).
        let ms = [migration(100, 200, 4096), migration(150, 250, 8192), migration(250, 250, 65536)];
        let far = migration(1000, 3000, 1 << 20);
        let refs: Vec<&UmEvent> = ms.iter().chain([&far]).collect();
        let points = rate_over_time(&refs);
        // Every rate here is a whole number of bytes/s, exact in a double.
        assert_eq!(
            points,
            vec![
                (100, 40_960_000_000.0),
                (150, 122_880_000_000.0),
                (200, 81_920_000_000.0),
                (250, 65_536_000_000_000.0),
                (251, 0.0),
                (1000, 524_288_000_000.0),
                (3000, 0.0),
            ]
        );
        let bytes = 4096.0 + 8192.0 + 65536.0 + (1 << 20) as f64;
        assert!((integral(&points) - bytes).abs() < 1e-9 * bytes, "{} vs {bytes}", integral(&points));
        assert!(rate_over_time(&[]).is_empty());
    }

    #[test]
    fn hostile_values_and_times_draw_without_a_panic() {
        // 2^64 - 1 bytes at the last nanosecond of time, in no time: drawn over the last nanosecond.
        let last = migration(u64::MAX, u64::MAX, u64::MAX);
        let points = rate_over_time(&[&last]);
        assert_eq!(points, vec![(u64::MAX - 1, u64::MAX as f64 * 1e9), (u64::MAX, 0.0)]);
    }

    #[test]
    fn processors_are_named_by_the_direction_of_the_migration() {
        let mut e = migration(0, 1, 4096);
        let names = |e: &UmEvent| um_endpoints(e).map(processor_name);
        // CUPTI's CPU id, and CPU 0 as the H100 fixture's records have it.
        assert_eq!(names(&e), ["CPU", "GPU 0"]);
        (e.src, e.dst) = (0, 1);
        assert_eq!(names(&e), ["CPU 0", "GPU 1"]);
        e.kind = UmKind::BytesDtoH;
        assert_eq!(names(&e), ["GPU 0", "CPU 1"]);
        e.kind = UmKind::BytesDtoD;
        assert_eq!(names(&e), ["GPU 0", "GPU 1"]);
        (e.kind, e.src) = (UmKind::RemoteMap, UM_CPU);
        assert_eq!(names(&e), ["CPU", "GPU 1"]);
    }
}
