//! What a timeline slice shows in either viewer: its name and category, and the arrows that start or end at it
//! (launch arrows, Kineto's `ac2g`; capture arrows, from the call that made a graph node to its first replay).

use cutr_model::{NameId, Trace};

use crate::args::Category;
use crate::timeline::graphs::capture_flow_id;
use crate::timeline::{Flows, Item, Src, Timeline};

/// Name id (see [`Timeline::name`]) and category of a slice.
pub(crate) fn name_and_category(trace: &Trace, tl: &Timeline, it: &Item) -> (NameId, Category) {
    let l = &tl.labels;
    match it.src() {
        Src::Kernel(i) => (trace.display_name_id(trace.kernels[i as usize].name), Category::Kernel),
        Src::Memcpy(i) => {
            let m = &trace.memcpys[i as usize];
            (l.memcpy[&(m.copy_kind, m.src_kind, m.dst_kind)], Category::GpuMemcpy)
        }
        Src::Memset(i) => (l.memset[&trace.memsets[i as usize].memory_kind], Category::GpuMemset),
        Src::Api(i) => {
            let a = &trace.apis[i as usize];
            let category = if a.driver { Category::CudaDriver } else { Category::CudaRuntime };
            (l.api[&(a.proc, a.driver, a.cbid)], category)
        }
        Src::Range(i) => (trace.ranges[i as usize].name, Category::UserAnnotation),
        Src::Annotation(i) => {
            let range = tl.annotations[i as usize].range;
            (trace.ranges[range as usize].name, Category::GpuUserAnnotation)
        }
        Src::Sync(i) => (l.sync[&trace.syncs[i as usize].sync_type], Category::CudaSync),
        Src::Overhead(i) => (l.overhead[&trace.overheads[i as usize].kind], Category::Overhead),
        Src::Um(i) => (l.um[&trace.um[i as usize].kind], Category::UnifiedMemory),
        Src::Replay(i) => (tl.graphs.replays[i as usize].name, Category::GraphReplayAnnotation),
        Src::Health => (l.health, Category::Cutr),
    }
}

/// The arrow ending at a GPU record or sync, if its API call is known.
pub(crate) fn flow_in(trace: &Trace, tl: &Timeline, it: &Item) -> Option<u64> {
    let f = &tl.flows;
    let (k, key) = match it.src() {
        Src::Kernel(i) => (f.kernel[i as usize], trace.kernels[i as usize].corr()),
        Src::Memcpy(i) => (f.memcpy[i as usize], trace.memcpys[i as usize].corr()),
        Src::Memset(i) => (f.memset[i as usize], trace.memsets[i as usize].corr()),
        Src::Sync(i) => (f.sync[i as usize], trace.syncs[i as usize].corr()),
        _ => return None,
    };
    (k != Flows::NONE).then(|| key.flow_id(k, trace.processes.len() as u64))
}

/// The arrows starting at an API call (one per GPU record it launched, and per record a hidden driver call
/// inside it launched), into `out`.
pub(crate) fn flows_out(trace: &Trace, tl: &Timeline, it: &Item, out: &mut Vec<u64>) {
    out.clear();
    if let Src::Api(i) = it.src() {
        let files = trace.processes.len() as u64;
        for &call in std::iter::once(&i).chain(tl.driver_calls.adopted(i)) {
            let key = trace.apis[call as usize].corr();
            out.extend((0..tl.flows.api[call as usize]).map(|k| key.flow_id(k, files)));
        }
    }
}

/// The capture arrows starting at an API call (one per graph node it made that was replayed), into `out`.
pub(crate) fn capture_flows_out(tl: &Timeline, it: &Item, out: &mut Vec<u64>) {
    out.clear();
    if let Src::Api(i) = it.src()
        && !tl.flows.capture.is_empty()
    {
        out.extend(tl.flows.capture.from_api(i).map(capture_flow_id));
    }
}

/// The capture arrow ending at a node's first replayed op, if `it` is one.
pub(crate) fn capture_flow_in(tl: &Timeline, it: &Item) -> Option<u64> {
    let first = &tl.flows.capture.first;
    if first.is_empty() {
        return None;
    }
    first.get(&it.src()).map(|&n| capture_flow_id(n))
}
