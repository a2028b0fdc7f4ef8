//! The rows of the model's tables: one struct per kind of CUPTI record the model keeps, with times in trace ns
//! (Unix ns, see [`crate::TimeBase`]) and names as [`NameId`]s. Every row says which input file it came from.

use crate::ids::{CorrKey, NameId, ProcId};

/// A kernel execution (CONCURRENT_KERNEL or KERNEL records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
