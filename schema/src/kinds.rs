//! CUPTI activity kinds (`CUpti_ActivityKind`), as numbered in `cupti_activity.h` of CUDA 13.0.

pub const MEMCPY: u32 = 1;
pub const MEMSET: u32 = 2;
pub const KERNEL: u32 = 3;
pub const DRIVER: u32 = 4;
pub const RUNTIME: u32 = 5;
pub const DEVICE: u32 = 8;
pub const CONTEXT: u32 = 9;
pub const CONCURRENT_KERNEL: u32 = 10;
pub const NAME: u32 = 11;
pub const MARKER: u32 = 12;
pub const MARKER_DATA: u32 = 13;
pub const SOURCE_LOCATOR: u32 = 14;
pub const OVERHEAD: u32 = 17;
pub const MEMCPY2: u32 = 22;
pub const UNIFIED_MEMORY_COUNTER: u32 = 25;
pub const FUNCTION: u32 = 26;
pub const MODULE: u32 = 27;
pub const CUDA_EVENT: u32 = 36;
pub const STREAM: u32 = 37;
pub const SYNCHRONIZATION: u32 = 38;
pub const EXTERNAL_CORRELATION: u32 = 39;
pub const MEMORY: u32 = 45;
pub const INTERNAL_LAUNCH_API: u32 = 48;
pub const MEMORY2: u32 = 49;
pub const MEMORY_POOL: u32 = 50;
pub const GRAPH_TRACE: u32 = 51;
pub const JIT: u32 = 52;
pub const DEVICE_GRAPH_TRACE: u32 = 53;
pub const MEM_DECOMPRESS: u32 = 54;

/// Every kind name of `CUpti_ActivityKind` in CUDA 13.0, indexed by value, so that reports can name kinds that
/// have no layout table (and are therefore counted, never parsed).
const NAMES: [&str; 55] = [
    "INVALID",
    "MEMCPY",
    "MEMSET",
    "KERNEL",
    "DRIVER",
    "RUNTIME",
    "EVENT",
    "METRIC",
    "DEVICE",
    "CONTEXT",
    "CONCURRENT_KERNEL",
    "NAME",
    "MARKER",
    "MARKER_DATA",
    "SOURCE_LOCATOR",
    "GLOBAL_ACCESS",
    "BRANCH",
    "OVERHEAD",
    "CDP_KERNEL",
    "PREEMPTION",
    "ENVIRONMENT",
    "EVENT_INSTANCE",
    "MEMCPY2",
    "METRIC_INSTANCE",
    "INSTRUCTION_EXECUTION",
    "UNIFIED_MEMORY_COUNTER",
    "FUNCTION",
    "MODULE",
    "DEVICE_ATTRIBUTE",
    "SHARED_ACCESS",
    "PC_SAMPLING",
    "PC_SAMPLING_RECORD_INFO",
    "INSTRUCTION_CORRELATION",
    "OPENACC_DATA",
    "OPENACC_LAUNCH",
    "OPENACC_OTHER",
    "CUDA_EVENT",
    "STREAM",
    "SYNCHRONIZATION",
    "EXTERNAL_CORRELATION",
    "NVLINK",
    "INSTANTANEOUS_EVENT",
    "INSTANTANEOUS_EVENT_INSTANCE",
    "INSTANTANEOUS_METRIC",
    "INSTANTANEOUS_METRIC_INSTANCE",
    "MEMORY",
    "PCIE",
    "OPENMP",
    "INTERNAL_LAUNCH_API",
    "MEMORY2",
    "MEMORY_POOL",
    "GRAPH_TRACE",
    "JIT",
    "DEVICE_GRAPH_TRACE",
    "MEM_DECOMPRESS",
];

/// The `CUPTI_ACTIVITY_KIND_*` suffix of a kind, or `None` for a value CUDA 13.0 does not define.
pub fn name(kind: u32) -> Option<&'static str> {
    NAMES.get(kind as usize).copied()
}

/// A printable name for any kind value: the CUPTI name, or `KIND_<n>` for an unknown value.
pub fn display(kind: u32) -> String {
    name(kind).map_or_else(|| format!("KIND_{kind}"), str::to_string)
}
