//! Every GPU op paired with the API call that launched it, sorted into the classes launch health keeps apart:
//! kernels launched one call each, async copies and memsets, and work replayed by a graph launch (many ops, one
//! call). One parallel pass over kernels, memcpys and memsets.

use cutr_model::{ApiCall, CorrKey, NameId, ProcId, Trace};
use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

/// What kind of launch an op came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// A kernel launched by a call of its own (`cudaLaunchKernel`, `cuLaunchKernel`, ...).
    Kernel,
    /// A copy or memset launched by an `...Async` call.
    AsyncCopy,
    /// An op replayed by a graph launch (`cudaGraphLaunch`): the call is shared by every op of the replay.
    Graph,
}

/// A stream of one device of one process: where a launch queue lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct StreamKey {
    pub proc: ProcId,
    pub device: u32,
    pub stream: u32,
}

/// One GPU op with its launching call.
#[derive(Clone, Copy, Debug)]
pub(super) struct Launch {
    pub class: Class,
    /// Index into `trace.apis` of the launching call.
    pub api: u32,
    pub op_start: u64,
    pub op_end: u64,
    /// The kernel's demangled name id (kernels and graph-replayed kernels; `None` for copies and memsets).
    pub name: Option<NameId>,
    pub stream: StreamKey,
}

impl Launch {
    /// GPU op start − launch call start (0 where the op started first: clock skew).
    pub fn latency(&self, trace: &Trace) -> u64 {
        latency(&trace.apis[self.api as usize], self.op_start)
    }

    /// The launch call's own time.
    pub fn cost(&self, trace: &Trace) -> u64 {
        cost(&trace.apis[self.api as usize])
    }
}

/// GPU op start − launch call start (0 where the op started first: clock skew).
pub(crate) fn latency(call: &ApiCall, op_start: u64) -> u64 {
    op_start.saturating_sub(call.start)
}

/// The launch call's own time.
pub(crate) fn cost(call: &ApiCall) -> u64 {
    call.end.saturating_sub(call.start)
}

/// A kernel that ran for less time than its launch call took.
pub(crate) fn is_short(call: &ApiCall, op_start: u64, op_end: u64) -> bool {
    op_end.saturating_sub(op_start) < cost(call)
}

/// The launches of a trace and what could not be paired.
#[derive(Debug, Default)]
pub(super) struct Collected {
    pub launches: Vec<Launch>,
    /// GPU ops with no launching call in the file (device-side launches, lost API records).
    pub without_launcher: u64,
    /// Copies and memsets whose launching call was synchronous (`cudaMemcpy`): not launches that queue.
    pub sync_copies: u64,
}

/// How a launching function behaves, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Launcher {
    Graph,
    Async,
    Other,
}

/// Classes each distinct (file, driver?, cbid) of `trace.apis` once: naming a call builds a `String`, too dear to
/// do per op on a trace of millions.
fn launcher_kinds(trace: &Trace) -> FxHashMap<(ProcId, bool, u32), Launcher> {
    let distinct = trace
        .apis
        .par_iter()
        .fold(FxHashSet::default, |mut s, a| {
            s.insert((a.proc, a.driver, a.cbid));
            s
        })
        .reduce(FxHashSet::default, |mut a, b| {
            a.extend(b);
            a
        });
    distinct.into_iter().map(|key| (key, launcher_kind(trace, key.0, key.1, key.2))).collect()
}

/// How the function `cbid` (of file `proc`, driver or runtime) launches, by its name.
pub(crate) fn launcher_kind(trace: &Trace, proc: ProcId, driver: bool, cbid: u32) -> Launcher {
    let name = trace.api_name_of(proc, driver, cbid);
    if name.contains("GraphLaunch") {
        Launcher::Graph
    } else if name.contains("Async") {
        Launcher::Async
    } else {
        Launcher::Other
    }
}

/// The class of an op launched by a call of kind `launcher`: `None` for a copy or memset of a synchronous call.
pub(crate) fn classify(launcher: Launcher, graph_id: u32, is_kernel: bool) -> Option<Class> {
    if launcher == Launcher::Graph || graph_id != 0 {
        Some(Class::Graph)
    } else if is_kernel {
        Some(Class::Kernel)
    } else if launcher == Launcher::Async {
        Some(Class::AsyncCopy)
    } else {
        None
    }
}

/// One op as the pass sees it, before pairing.
struct Op {
    proc: ProcId,
    correlation: u32,
    start: u64,
    end: u64,
    device: u32,
    stream: u32,
    graph_id: u32,
    name: Option<NameId>,
}

/// Pairs every kernel, memcpy and memset with its launching call.
pub(super) fn collect(trace: &Trace) -> Collected {
    let kinds = launcher_kinds(trace);
    let pair = |op: Op| -> (Option<Launch>, u64, u64) {
        let Some(api) = trace.launcher_index(CorrKey::new(op.proc, op.correlation)) else {
            return (None, 1, 0);
        };
        let a = &trace.apis[api as usize];
        let launcher = kinds.get(&(a.proc, a.driver, a.cbid)).copied().unwrap_or(Launcher::Other);
        let Some(class) = classify(launcher, op.graph_id, op.name.is_some()) else {
            return (None, 0, 1);
        };
        let stream = StreamKey { proc: op.proc, device: op.device, stream: op.stream };
        let launch = Launch { class, api, op_start: op.start, op_end: op.end, name: op.name, stream };
        (Some(launch), 0, 0)
    };
    let kernels = trace.kernels.par_iter().map(|k| Op {
        proc: k.proc,
        correlation: k.correlation,
        start: k.start,
        end: k.end,
        device: k.device,
        stream: k.stream,
        graph_id: k.graph_id,
        name: Some(trace.display_name_id(k.name)),
    });
    let copies = trace.memcpys.par_iter().map(|m| Op {
        proc: m.proc,
        correlation: m.correlation,
        start: m.start,
        end: m.end,
        device: m.device,
        stream: m.stream,
        graph_id: m.graph_id,
        name: None,
    });
    let sets = trace.memsets.par_iter().map(|m| Op {
        proc: m.proc,
        correlation: m.correlation,
        start: m.start,
        end: m.end,
        device: m.device,
        stream: m.stream,
        graph_id: m.graph_id,
        name: None,
    });
    // Folded per worker and joined in order, so launches keep table order without a second copy of them all.
    kernels
        .chain(copies)
        .chain(sets)
        .map(pair)
        .fold(Collected::default, |mut c, (launch, unpaired, sync)| {
            c.launches.extend(launch);
            c.without_launcher += unpaired;
            c.sync_copies += sync;
            c
        })
        .reduce(Collected::default, |mut a, mut b| {
            a.launches.append(&mut b.launches);
            a.without_launcher += b.without_launcher;
            a.sync_copies += b.sync_copies;
            a
        })
}
