//! What both viewers' events carry: categories (Kineto's names), the keys of slice arguments, and argument
//! values. Each writer picks the arguments it shows (`chrome`: Kineto's full set; `perfetto`: what its tracks and
//! arrows do not already say).

/// An event category: Kineto's names, so tools that filter on them (HTA, TraceLens) work unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    Kernel,
    GpuMemcpy,
    GpuMemset,
    CudaRuntime,
    CudaDriver,
    /// NVTX marks (instants).
    Nvtx,
    /// NVTX ranges on their threads: Kineto's category of `record_function` ranges, the user's annotations.
    UserAnnotation,
    CudaSync,
    Overhead,
    Cutr,
    /// Unified memory events (cutr's own: Kineto records none).
    UnifiedMemory,
    /// Annotations projected onto GPU work: Kineto's name for its `record_function` spans over the kernels they
    /// launched; ours are the NVTX ranges over the work they launched, per stream.
    GpuUserAnnotation,
    /// The NVTX ranges a CUDA graph was captured in, spanning each replay's work (cutr's own: not
    /// `gpu_user_annotation`, so that HTA's annotation breakdown counts each op once per range it was launched
    /// in, as on a Kineto trace, not again per range it was captured in).
    GraphReplayAnnotation,
}

impl Category {
    pub const COUNT: usize = 13;

    pub fn name(self) -> &'static str {
        match self {
            Category::Kernel => "kernel",
            Category::GpuMemcpy => "gpu_memcpy",
            Category::GpuMemset => "gpu_memset",
            Category::CudaRuntime => "cuda_runtime",
            Category::CudaDriver => "cuda_driver",
            Category::Nvtx => "nvtx",
            Category::UserAnnotation => "user_annotation",
            Category::CudaSync => "cuda_sync",
            Category::Overhead => "overhead",
            Category::Cutr => "cutr",
            Category::UnifiedMemory => "unified_memory",
            Category::GpuUserAnnotation => "gpu_user_annotation",
            Category::GraphReplayAnnotation => "graph_replay_annotation",
        }
    }
}

/// The key of a slice argument, written as Kineto spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgKey {
    ExternalId,
    Queued,
    Device,
    Context,
    Stream,
    Correlation,
    RegistersPerThread,
    SharedMemory,
    BlocksPerSm,
    WarpsPerSm,
    Grid,
    Block,
    GraphId,
    GraphNodeId,
    Bytes,
    Bandwidth,
    Cbid,
    SyncKind,
    WaitOnStream,
    WaitOnEventRecordCorrelation,
    WaitOnEventId,
    Domain,
    ReturnValue,
    UserAnnotation,
    Thread,
    FromDevice,
    ToDevice,
    Occupancy,
    Channel,
    ChannelType,
    StaticSharedMemory,
    DynamicSharedMemory,
    LocalMemoryPerThread,
    Cluster,
    ClusterSchedulingPolicy,
    LaunchType,
    DeviceLaunched,
    PcSamples,
    TopLines,
    TopStalls,
    Direction,
    Cause,
    Address,
    Source,
    Destination,
    RunningKernel,
    AccessType,
    FaultGroups,
    Pc,
    Processors,
    CapturedIn,
    CapturedBy,
    CapturedNodeId,
    /// On a runtime call: the driver calls inside it that the timeline leaves out.
    DriverCallsHidden,
}

impl ArgKey {
    pub const COUNT: usize = 54;

    pub fn name(self) -> &'static str {
        match self {
            ArgKey::ExternalId => "External id",
            ArgKey::Queued => "queued",
            ArgKey::Device => "device",
            ArgKey::Context => "context",
            ArgKey::Stream => "stream",
            ArgKey::Correlation => "correlation",
            ArgKey::RegistersPerThread => "registers per thread",
            ArgKey::SharedMemory => "shared memory",
            ArgKey::BlocksPerSm => "blocks per SM",
            ArgKey::WarpsPerSm => "warps per SM",
            ArgKey::Grid => "grid",
            ArgKey::Block => "block",
            ArgKey::GraphId => "graph id",
            ArgKey::GraphNodeId => "graph node id",
            ArgKey::Bytes => "bytes",
            ArgKey::Bandwidth => "memory bandwidth (GB/s)",
            ArgKey::Cbid => "cbid",
            ArgKey::SyncKind => "cuda_sync_kind",
            ArgKey::WaitOnStream => "wait_on_stream",
            ArgKey::WaitOnEventRecordCorrelation => "wait_on_cuda_event_record_corr_id",
            ArgKey::WaitOnEventId => "wait_on_cuda_event_id",
            ArgKey::Domain => "domain",
            ArgKey::ReturnValue => "return value",
            ArgKey::UserAnnotation => "user annotation",
            ArgKey::Thread => "thread",
            ArgKey::FromDevice => "fromDevice",
            ArgKey::ToDevice => "toDevice",
            ArgKey::Occupancy => "est. achieved occupancy %",
            ArgKey::Channel => "channel",
            ArgKey::ChannelType => "channel_type",
            ArgKey::StaticSharedMemory => "static shared memory",
            ArgKey::DynamicSharedMemory => "dynamic shared memory",
            ArgKey::LocalMemoryPerThread => "local memory per thread",
            ArgKey::Cluster => "cluster",
            ArgKey::ClusterSchedulingPolicy => "cluster scheduling policy",
            ArgKey::LaunchType => "launch type",
            ArgKey::DeviceLaunched => "device launched",
            ArgKey::PcSamples => "pc samples (whole recording)",
            ArgKey::TopLines => "top lines",
            ArgKey::TopStalls => "top stall reasons",
            ArgKey::Direction => "direction",
            ArgKey::Cause => "cause",
            ArgKey::Address => "address",
            ArgKey::Source => "source",
            ArgKey::Destination => "destination",
            ArgKey::RunningKernel => "kernel",
            ArgKey::AccessType => "access type",
            ArgKey::FaultGroups => "fault groups",
            ArgKey::Pc => "pc",
            ArgKey::Processors => "processors",
            ArgKey::CapturedIn => "captured in",
            ArgKey::CapturedBy => "captured by",
            ArgKey::CapturedNodeId => "captured node id",
            ArgKey::DriverCallsHidden => "driver calls hidden",
        }
    }

    /// The name in a Perfetto trace: as [`ArgKey::name`], but without a dot, which Perfetto reads as nesting
    /// (Kineto's `est. achieved occupancy %` showed as `est_ achieved occupancy %`). The Chrome JSON keeps
    /// Kineto's spelling, which its readers look up.
    pub fn perfetto_name(self) -> &'static str {
        match self {
            ArgKey::Occupancy => "estimated achieved occupancy %",
            key => key.name(),
        }
    }
}

/// An argument's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Int(i64),
    UInt(u64),
    /// Chrome JSON prints it in shortest round-trip form (Kineto's `memory bandwidth (GB/s)`).
    Double(f64),
    Bool(bool),
    Str(&'a str),
    /// A 3-element array (grid and block dimensions).
    Int3([i64; 3]),
}

impl Value<'_> {
    /// Kineto's `memory bandwidth (GB/s)`: bytes per ns, `N/A` for a copy without duration.
    pub fn bandwidth(bytes: u64, start: u64, end: u64) -> Value<'static> {
        if end > start { Value::Double(bytes as f64 / (end - start) as f64) } else { Value::Str("N/A") }
    }
}

/// A slice argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arg<'a> {
    pub key: ArgKey,
    pub value: Value<'a>,
}

impl<'a> Arg<'a> {
    #[inline]
    pub fn new(key: ArgKey, value: Value<'a>) -> Arg<'a> {
        Arg { key, value }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_categories_are_numbered_densely() {
        // The Perfetto writer interns by number: every key's number is below COUNT.
        assert_eq!(ArgKey::DriverCallsHidden as usize + 1, ArgKey::COUNT);
        assert_eq!(Category::GraphReplayAnnotation as usize + 1, Category::COUNT);
        assert_eq!(ArgKey::Bandwidth.name(), "memory bandwidth (GB/s)");
        // Kineto's one dotted key gets a Perfetto spelling without the dot (Perfetto nests at dots).
        assert_eq!(ArgKey::Occupancy.name(), "est. achieved occupancy %");
        assert_eq!(ArgKey::Occupancy.perfetto_name(), "estimated achieved occupancy %");
    }
}
