//! The rows of the model's tables: one struct per kind of CUPTI record the model keeps, with times in trace ns
//! (Unix ns, see [`crate::TimeBase`]) and names as [`NameId`]s. Every row says which input file it came from.

use crate::ids::{CorrKey, NameId, ProcId};

/// A kernel execution (CONCURRENT_KERNEL or KERNEL records).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kernel {
    pub proc: ProcId,
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    /// The name as CUPTI reported it (mangled); [`crate::Trace::kernel_name`] gives it demangled.
    pub name: NameId,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub registers: u16,
    pub static_smem: i32,
    pub dynamic_smem: i32,
    pub queued: u64,
    pub graph_id: u32,
    pub graph_node_id: u64,
    pub channel: u32,
    /// `CUpti_ChannelType`: 1 compute, 2 async memcpy (0 = unknown).
    pub channel_type: u8,
    /// Thread block cluster dimensions (Hopper and later; 0 without clusters).
    pub cluster: [u16; 3],
    /// `CUclusterSchedulingPolicy`: 0 default, 1 spread, 2 load balancing.
    pub cluster_policy: u8,
    /// `CUpti_ActivityLaunchType`: 0 regular, 1 cooperative (one device), 2 cooperative (several), 3 CBL command list.
    pub launch_type: u8,
    /// Launched from the device (CUDA dynamic parallelism, device graph launch).
    pub device_launched: bool,
    pub local_memory_per_thread: u32,
    /// Shared memory the kernel ran with per SM (its carveout), in bytes.
    pub shared_memory_executed: u32,
}

/// A memory copy (MEMCPY, or MEMCPY2 for peer-to-peer copies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memcpy {
    pub proc: ProcId,
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub bytes: u64,
    pub copy_kind: u8,
    pub src_kind: u8,
    pub dst_kind: u8,
    pub flags: u8,
    pub graph_id: u32,
    pub graph_node_id: u64,
    /// Peer-to-peer copies (MEMCPY2): the devices owning source and destination.
    pub peer: Option<(u32, u32)>,
}

/// A memset on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memset {
    pub proc: ProcId,
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub bytes: u64,
    pub value: u32,
    pub memory_kind: u16,
    pub graph_id: u32,
    pub graph_node_id: u64,
}

/// A runtime or driver API call on a host thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiCall {
    pub proc: ProcId,
    pub start: u64,
    pub end: u64,
    pub pid: u32,
    pub tid: u32,
    pub correlation: u32,
    pub cbid: u32,
    pub driver: bool,
    pub return_value: u32,
}

/// A synchronization: the host (or a stream) waited for the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sync {
    pub proc: ProcId,
    pub start: u64,
    pub end: u64,
    /// `CUpti_ActivitySynchronizationType`: 1 event, 2 stream wait event, 3 stream, 4 context.
    pub sync_type: u32,
    pub correlation: u32,
    pub context: u32,
    /// `u32::MAX` for a context-wide sync.
    pub stream: u32,
    /// `u32::MAX` when no CUDA event is involved.
    pub event: u32,
}

/// A CUDA event recorded on a stream (CUDA_EVENT records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaEvent {
    pub proc: ProcId,
    pub correlation: u32,
    pub context: u32,
    pub stream: u32,
    pub event: u32,
    pub device: u32,
    /// When the device reached the event, in trace time (0 = unknown).
    pub device_timestamp: u64,
}

/// Time CUPTI itself spent (buffer flushes, instrumentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overhead {
    pub proc: ProcId,
    pub start: u64,
    pub end: u64,
    pub kind: u32,
    pub object_kind: u32,
    pub tid: u32,
}

/// An NVTX range (push/pop or start/end) on a host thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvtxRange {
    pub proc: ProcId,
    pub start: u64,
    /// `u64::MAX` when the range was never closed in the recording.
    pub end: u64,
    pub pid: u32,
    pub tid: u32,
    pub name: NameId,
    pub domain: NameId,
    pub id: u32,
    /// Nesting depth on its thread (0 = outermost).
    pub depth: u16,
    /// Index of the enclosing range on the same thread ([`NvtxRange::NO_PARENT`] = none).
    pub parent: u32,
}

impl NvtxRange {
    pub const NO_PARENT: u32 = u32::MAX;

    /// Whether the recording saw the range end.
    #[inline]
    pub fn closed(&self) -> bool {
        self.end != u64::MAX
    }
}

/// An NVTX instantaneous marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvtxMark {
    pub proc: ProcId,
    pub ts: u64,
    pub pid: u32,
    pub tid: u32,
    pub name: NameId,
    pub domain: NameId,
}

/// What the PC samples of a whole recording say about one kernel (function), for the viewers' kernel slices:
/// filled by whoever maps samples to source (`cutr_analyses::source::annotate`), empty otherwise.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelSourceNote {
    pub samples: u64,
    /// The hottest lines with their share of the kernel's samples (`file.cu:44 99.8%, ...`).
    pub top_lines: String,
    /// The commonest stall reasons with their share (`long_scoreboard 92.1%, ...`).
    pub top_stalls: String,
}

/// A device memory allocation or free (MEMORY2 records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryOp {
    pub proc: ProcId,
    pub ts: u64,
    pub device: u32,
    pub stream: u32,
    pub correlation: u32,
    pub address: u64,
    pub bytes: u64,
    pub free: bool,
    pub memory_kind: u32,
}

/// What a unified memory record counts (`CUpti_ActivityUnifiedMemoryCounterKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum UmKind {
    /// Bytes migrated from host to device; `value` is the bytes, `flags` the cause.
    BytesHtoD = 1,
    /// Bytes migrated from device to host; `value` is the bytes, `flags` the cause.
    BytesDtoH = 2,
    /// A CPU page fault; `pc` is the faulting instruction (CUPTI's `value`).
    CpuPageFault = 3,
    /// GPU page fault groups on one page; `value` is the number of groups, `flags` the access type.
    GpuPageFault = 4,
    /// The driver found a region thrashing; `value` is its bytes, `processors` who fight over it.
    Thrashing = 5,
    /// The driver held back one of the processors fighting over a region.
    Throttling = 6,
    /// The driver mapped a region remotely instead of migrating it; `value` is its bytes.
    RemoteMap = 7,
    /// Bytes migrated from one device to another.
    BytesDtoD = 8,
}

impl UmKind {
    /// The kind of a raw `counterKind`, `None` outside CUDA 13's range (unknown or damaged).
    pub fn from_raw(raw: u32) -> Option<UmKind> {
        use UmKind::*;
        Some(match raw {
            1 => BytesHtoD,
            2 => BytesDtoH,
            3 => CpuPageFault,
            4 => GpuPageFault,
            5 => Thrashing,
            6 => Throttling,
            7 => RemoteMap,
            8 => BytesDtoD,
            _ => return None,
        })
    }

    /// Whether `value` counts bytes moved (the migrations).
    pub fn is_migration(self) -> bool {
        matches!(self, UmKind::BytesHtoD | UmKind::BytesDtoH | UmKind::BytesDtoD)
    }

    /// Whether CUPTI gives the record an end time (the others are instants: `end == start` in the row).
    pub fn has_duration(self) -> bool {
        matches!(
            self,
            UmKind::BytesHtoD | UmKind::BytesDtoH | UmKind::BytesDtoD | UmKind::GpuPageFault | UmKind::Throttling
        )
    }

    /// The name reports and tables use.
    pub fn name(self) -> &'static str {
        match self {
            UmKind::BytesHtoD => "migration HtoD",
            UmKind::BytesDtoH => "migration DtoH",
            UmKind::CpuPageFault => "CPU page fault",
            UmKind::GpuPageFault => "GPU page fault",
            UmKind::Thrashing => "thrashing",
            UmKind::Throttling => "throttling",
            UmKind::RemoteMap => "remote map",
            UmKind::BytesDtoD => "migration DtoD",
        }
    }
}

/// A unified memory event (UNIFIED_MEMORY_COUNTER records, `CUpti_ActivityUnifiedMemoryCounter3`), as CUPTI
/// gives it: which fields mean something depends on `kind` (see [`UmKind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmEvent {
    pub proc: ProcId,
    pub kind: UmKind,
    /// On the trace's time base. For the kinds without an end (`!kind.has_duration()`), `end == start`.
    pub start: u64,
    pub end: u64,
    /// Bytes for migrations, thrashing and remote maps; fault groups for GPU page faults; 0 for CPU page faults.
    pub value: u64,
    /// The virtual base address of the pages moved, or of the page that faulted.
    pub address: u64,
    /// The source processor, as CUPTI numbers it; for GPU page faults the device. The direction says which side is
    /// the CPU: CUDA 13 on an H100 names it 0 (its NUMA node), not [`UM_CPU`], so an HtoD migration to GPU 0 reads
    /// `src == dst == 0`.
    pub src: u32,
    /// The destination processor of a migration or remote map.
    pub dst: u32,
    /// The cause of a migration (`CUpti_ActivityUnifiedMemoryMigrationCause`), the access type of a GPU page fault
    /// and of a CPU page fault (`CUpti_ActivityUnifiedMemoryAccessType`), the cause of a remote map; raw.
    pub flags: u32,
    /// CPU page faults: the address of the faulting host instruction; 0 otherwise.
    pub pc: u64,
    /// Thrashing: the bit mask of devices 0-63 fighting over the region (`processors[0]`); 0 otherwise.
    pub processors: u64,
}

/// `CUPTI_UNIFIED_MEMORY_CPU_DEVICE_ID`: the CPU as a unified memory record's `src`/`dst` where CUPTI uses the
/// sentinel (migrations name the CPU by its own id instead; see [`UmEvent::src`]).
pub const UM_CPU: u32 = u32::MAX;

impl UmEvent {
    /// The GPU this event happened on, for its track and its kernel: the destination of a migration to a
    /// device, the source of one from a device, the faulting (or throttled) device; `None` for CPU page faults
    /// and thrashing (several processors; see `processors`).
    pub fn device(&self) -> Option<u32> {
        let gpu = |id: u32| (id != UM_CPU).then_some(id);
        match self.kind {
            UmKind::BytesHtoD | UmKind::BytesDtoD | UmKind::RemoteMap => gpu(self.dst).or(gpu(self.src)),
            UmKind::BytesDtoH | UmKind::GpuPageFault | UmKind::Throttling => gpu(self.src),
            UmKind::CpuPageFault | UmKind::Thrashing => None,
        }
    }

    /// `end - start` in ns (0 for the instants).
    pub fn duration(&self) -> u64 {
        self.end - self.start
    }
}

/// Rows that carry a correlation id: their key joins them to the API call that launched them.
macro_rules! correlated {
    ($($row:ty),*) => {$(
        impl $row {
            /// The correlation key of this row (its file and correlation id).
            #[inline]
            pub fn corr(&self) -> CorrKey {
                CorrKey::new(self.proc, self.correlation)
            }
        }
    )*};
}
correlated!(Kernel, Memcpy, Memset, ApiCall, Sync, CudaEvent, MemoryOp);

/// Rows of GPU work (kernels, copies, memsets) with a duration.
macro_rules! timed {
    ($($row:ty),*) => {$(
        impl $row {
            /// `end - start` in ns.
            #[inline]
            pub fn duration(&self) -> u64 {
                self.end - self.start
            }
        }
    )*};
}
timed!(Kernel, Memcpy, Memset, ApiCall, Sync, Overhead);
