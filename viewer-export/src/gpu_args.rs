//! The arguments both viewers show for GPU records: what a kernel launch was (Kineto's keys, then what Hopper
//! added), what a copy or memset moved, which event a sync waited on, what a unified memory event was, and where
//! a replayed CUDA graph op was captured. Each writer decides which of its own arguments to add or leave out around these.

use cutr_model::rows::UmKind;
use cutr_model::{Kernel, Sync, Trace, describe};

use crate::args::{Arg, ArgKey, Value};
use crate::timeline::{Src, Timeline, um_endpoints};

/// A kernel's launch: registers, grid, block, the estimated achieved occupancy (Kineto's), graph node and
/// channel, static and dynamic shared memory, then what is not the plain launch (local memory, cluster, launch
/// type), with Kineto's own derived keys: the total shared memory, and blocks and warps per SM (what the grid and
/// the device's SMs give). Then, where the recording has PC samples, the kernel's hottest lines and
/// stall reasons over the whole recording.
pub(crate) fn kernel_launch<'t>(trace: &'t Trace, k: &Kernel, out: &mut Vec<Arg<'t>>) {
    use Value::*;
    out.push(Arg::new(ArgKey::RegistersPerThread, UInt(k.registers as u64)));
    out.push(Arg::new(ArgKey::SharedMemory, Int(k.static_smem as i64 + k.dynamic_smem as i64)));
    if let Some(n) = trace.device_sms(k.proc, k.device).filter(|&n| n > 0) {
        let blocks = k.grid.iter().map(|&g| g.max(0) as u64).product::<u64>() as f64 / n as f64;
        let threads = k.block.iter().map(|&b| b.max(0) as u64).product::<u64>() as f64;
        out.push(Arg::new(ArgKey::BlocksPerSm, Double(blocks)));
        out.push(Arg::new(ArgKey::WarpsPerSm, Double(blocks * threads / 32.0)));
    }
    out.push(Arg::new(ArgKey::Grid, Int3(k.grid.map(i64::from))));
    out.push(Arg::new(ArgKey::Block, Int3(k.block.map(i64::from))));
    if let Some(pct) = trace.achieved_occupancy_pct(k) {
        out.push(Arg::new(ArgKey::Occupancy, Int(pct)));
    }
    if k.graph_id != 0 {
        out.push(Arg::new(ArgKey::GraphId, UInt(k.graph_id as u64)));
        out.push(Arg::new(ArgKey::GraphNodeId, UInt(k.graph_node_id)));
    }
    if k.channel_type != 0 {
        out.push(Arg::new(ArgKey::Channel, UInt(k.channel as u64)));
        out.push(Arg::new(ArgKey::ChannelType, Str(describe::channel_type(k.channel_type))));
    }
    out.push(Arg::new(ArgKey::StaticSharedMemory, Int(k.static_smem as i64)));
    out.push(Arg::new(ArgKey::DynamicSharedMemory, Int(k.dynamic_smem as i64)));
    if k.local_memory_per_thread != 0 {
        out.push(Arg::new(ArgKey::LocalMemoryPerThread, UInt(k.local_memory_per_thread as u64)));
    }
    if k.cluster.iter().map(|&c| c.max(1) as u64).product::<u64>() > 1 {
        out.push(Arg::new(ArgKey::Cluster, Int3(k.cluster.map(i64::from))));
        out.push(Arg::new(ArgKey::ClusterSchedulingPolicy, Str(describe::cluster_policy(k.cluster_policy))));
    }
    if k.launch_type != 0 {
        out.push(Arg::new(ArgKey::LaunchType, Str(describe::launch_type(k.launch_type))));
    }
    if k.device_launched {
        out.push(Arg::new(ArgKey::DeviceLaunched, Bool(true)));
    }
    if let Some(note) = trace.kernel_source.get(&k.name) {
        out.push(Arg::new(ArgKey::PcSamples, UInt(note.samples)));
        out.push(Arg::new(ArgKey::TopLines, Str(&note.top_lines)));
        out.push(Arg::new(ArgKey::TopStalls, Str(&note.top_stalls)));
    }
}

/// A copy's or memset's graph node, when it ran in a CUDA graph.
pub(crate) fn graph_node<'t>(graph_id: u32, graph_node_id: u64, out: &mut Vec<Arg<'t>>) {
    if graph_id != 0 {
        out.push(Arg::new(ArgKey::GraphId, Value::UInt(graph_id as u64)));
        out.push(Arg::new(ArgKey::GraphNodeId, Value::UInt(graph_node_id)));
    }
}

/// Where a replayed kernel, copy or memset was captured (issue 33): the NVTX path open when its graph node was
/// made (`captured in`, left out when none was), the call that made the node with its correlation id (`captured
/// by`), and the node's id (`captured node id`: the node the program made, where `graph node id` is the
/// executable's copy of it).
pub(crate) fn capture<'a>(trace: &Trace, tl: &'a Timeline, src: Src, out: &mut Vec<Arg<'a>>) {
    let Some(n) = crate::timeline::graphs::node_of(trace, src) else { return };
    let g = &tl.graphs;
    if let Some(path) = g.captured_in.get(n as usize).filter(|s| !s.is_empty()) {
        out.push(Arg::new(ArgKey::CapturedIn, Value::Str(path)));
    }
    if let Some(call) = g.captured_by.get(n as usize).filter(|s| !s.is_empty()) {
        out.push(Arg::new(ArgKey::CapturedBy, Value::Str(call)));
    }
    out.push(Arg::new(ArgKey::CapturedNodeId, Value::UInt(trace.graphs.nodes[n as usize].node)));
}

/// Kineto's `wait_on_*` args of an event sync or a stream's wait on an event: the stream and the correlation id
/// (the `cudaEventRecord` call) of the event's last recording before the sync, -1 where unknown, and the event.
pub(crate) fn waited_event<'t>(trace: &Trace, s: &Sync, out: &mut Vec<Arg<'t>>) {
    const EVENT_SYNC: u32 = 1;
    const STREAM_WAIT_EVENT: u32 = 2;
    if s.sync_type != EVENT_SYNC && s.sync_type != STREAM_WAIT_EVENT {
        return;
    }
    let recorded = trace.waited_event(s);
    let stream = recorded.map_or(-1, |e| e.stream as i64);
    let corr = recorded.map_or(-1, |e| e.correlation as i64);
    out.push(Arg::new(ArgKey::WaitOnStream, Value::Int(stream)));
    out.push(Arg::new(ArgKey::WaitOnEventRecordCorrelation, Value::Int(corr)));
    out.push(Arg::new(ArgKey::WaitOnEventId, Value::Int(if s.event == u32::MAX { -1 } else { s.event as i64 })));
}

/// A unified memory event's args (`Trace::um[i]`): what moved (bytes, direction, cause, between which
/// processors, at what rate), where (address), what faulted (access type, fault groups; a CPU fault's host
/// instruction), who fought (thrashing's processors), and the kernel running on the event's GPU when it began.
pub(crate) fn unified_memory<'a>(trace: &'a Trace, tl: &'a Timeline, i: usize, out: &mut Vec<Arg<'a>>) {
    use UmKind::*;
    use Value::*;
    let e = &trace.um[i];
    let [source, destination] =
        um_endpoints(e).map(|p| Str(tl.labels.um_processor.get(&p).map_or("", |&n| tl.name(trace, n))));
    match e.kind {
        BytesHtoD | BytesDtoH | BytesDtoD => {
            let direction = match e.kind {
                BytesHtoD => "HtoD",
                BytesDtoH => "DtoH",
                _ => "DtoD",
            };
            out.push(Arg::new(ArgKey::Direction, Str(direction)));
            out.push(Arg::new(ArgKey::Bytes, UInt(e.value)));
            out.push(Arg::new(ArgKey::Bandwidth, Value::bandwidth(e.value, e.start, e.end)));
            out.push(Arg::new(ArgKey::Cause, Str(describe::um_migration_cause(e.flags))));
        }
        RemoteMap => {
            out.push(Arg::new(ArgKey::Bytes, UInt(e.value)));
            out.push(Arg::new(ArgKey::Cause, Str(describe::um_remote_map_cause(e.flags))));
        }
        Thrashing => out.push(Arg::new(ArgKey::Bytes, UInt(e.value))),
        GpuPageFault | CpuPageFault | Throttling => {}
    }
    out.push(Arg::new(ArgKey::Address, UInt(e.address)));
    match e.kind {
        BytesHtoD | BytesDtoH | BytesDtoD | RemoteMap => {
            out.push(Arg::new(ArgKey::Source, source));
            out.push(Arg::new(ArgKey::Destination, destination));
        }
        GpuPageFault => {
            out.push(Arg::new(ArgKey::AccessType, Str(describe::um_access_type(e.flags))));
            out.push(Arg::new(ArgKey::FaultGroups, UInt(e.value)));
        }
        CpuPageFault => out.push(Arg::new(ArgKey::Pc, UInt(e.pc))),
        Thrashing => {
            let set = tl.labels.um_processor_set.get(&e.processors).map_or("", |&n| tl.name(trace, n));
            out.push(Arg::new(ArgKey::Processors, Str(set)));
        }
        Throttling => {}
    }
    if let Some(&k) = tl.um_kernel.get(i).filter(|&&k| k != u32::MAX) {
        out.push(Arg::new(ArgKey::RunningKernel, Str(trace.kernel_name(&trace.kernels[k as usize]))));
    }
}
