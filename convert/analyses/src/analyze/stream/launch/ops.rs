//! A batch's GPU ops paired with their launching calls and classed as the loaded path classes them
//! ([`crate::analyze::launch::collect`]), and graph launches gathered into one launch per call across windows.

use cutr_model::stream::Batch;
use cutr_model::{ApiCall, NameId, ProcId, Trace};
use rustc_hash::FxHashMap;

use crate::analyze::launch::collect::{Class, Launcher, StreamKey, classify, launcher_kind};

/// One GPU op with its launching call.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seen {
    pub class: Class,
    pub call: ApiCall,
    pub op_start: u64,
    pub op_end: u64,
    /// The kernel's name id as recorded, mangled: the stream's trace has no demangled names (`None` for copies and
    /// memsets).
    pub name: Option<NameId>,
    pub stream: StreamKey,
}

/// What became of one GPU op.
pub(super) enum Paired {
    Launch(Seen),
    /// No launching call known ([`crate::analyze::launch::LaunchHealth::without_launcher`]).
    WithoutLauncher,
    /// A copy or memset of a synchronous call.
    Sync,
}

/// Pairs each batch's ops, naming each distinct launching function once.
#[derive(Default)]
pub(super) struct Pairing {
    kinds: FxHashMap<(ProcId, bool, u32), Launcher>,
}

/// The fields of one op that pairing reads.
struct Op {
    index: usize,
    start: u64,
    end: u64,
    device: u32,
    stream: u32,
    graph_id: u32,
    name: Option<NameId>,
}

impl Pairing {
    /// Calls `f` with every op of `b`.
    pub fn each(&mut self, trace: &Trace, b: &Batch, mut f: impl FnMut(Paired)) {
        let (nk, nc) = (b.kernels.len(), b.memcpys.len());
        let kernels = b.kernels.iter().enumerate().map(|(i, k)| Op {
            index: i,
            start: k.start,
            end: k.end,
            device: k.device,
            stream: k.stream,
            graph_id: k.graph_id,
            name: Some(k.name),
        });
        let copies = b.memcpys.iter().enumerate().map(|(i, m)| Op {
            index: nk + i,
            start: m.start,
            end: m.end,
            device: m.device,
            stream: m.stream,
            graph_id: m.graph_id,
            name: None,
        });
        let sets = b.memsets.iter().enumerate().map(|(i, m)| Op {
            index: nk + nc + i,
            start: m.start,
            end: m.end,
            device: m.device,
            stream: m.stream,
            graph_id: m.graph_id,
            name: None,
        });
        for op in kernels.chain(copies).chain(sets) {
            f(self.pair(trace, b, op));
        }
    }

    fn pair(&mut self, trace: &Trace, b: &Batch, op: Op) -> Paired {
        let Some(call) = b.gpu_calls.get(op.index).copied().flatten() else {
            return Paired::WithoutLauncher;
        };
        let launcher = *self
            .kinds
            .entry((call.proc, call.driver, call.cbid))
            .or_insert_with(|| launcher_kind(trace, call.proc, call.driver, call.cbid));
        let Some(class) = classify(launcher, op.graph_id, op.name.is_some()) else {
            return Paired::Sync;
        };
        // The op's file is its call's: a correlation key pairs within one process.
        let stream = StreamKey { proc: call.proc, device: op.device, stream: op.stream };
        Paired::Launch(Seen { class, call, op_start: op.start, op_end: op.end, name: op.name, stream })
    }
}

/// Graph launches whose replays are still coming in: a call's first op is final once the stream's edge
/// ([`Batch::next_start`]) has passed it, as no later op starts before the edge.
pub(super) struct GraphCalls {
    open: FxHashMap<(ProcId, u32), (ApiCall, u64)>,
    max_waiting: usize,
    /// Ops replayed by graph launches.
    pub ops: u64,
    /// Calls settled before the edge passed them, as more than `max_waiting` waited.
    pub settled_early: u64,
}

impl GraphCalls {
    /// At most `max_waiting` calls wait for the edge.
    pub fn new(max_waiting: usize) -> GraphCalls {
        GraphCalls { open: FxHashMap::default(), max_waiting, ops: 0, settled_early: 0 }
    }

    /// One op of a graph launch's replay.
    pub fn add(&mut self, s: &Seen) {
        self.ops += 1;
        let e = self.open.entry((s.call.proc, s.call.correlation)).or_insert((s.call, s.op_start));
        e.1 = e.1.min(s.op_start);
    }

    /// Hands `settled` each call whose first op is final at `edge` (every one at the end, `None`) as (call, its
    /// first op's start), then the oldest past `max_waiting`.
    pub fn settle(&mut self, edge: Option<u64>, mut settled: impl FnMut(&ApiCall, u64)) {
        self.open.retain(|_, (call, first)| {
            let done = edge.is_none_or(|e| *first < e);
            if done {
                settled(call, *first);
            }
            !done
        });
        if self.open.len() > self.max_waiting {
            let mut waiting: Vec<(u64, (ProcId, u32))> = self.open.iter().map(|(k, v)| (v.1, *k)).collect();
            waiting.sort_unstable();
            for (_, key) in &waiting[..waiting.len() - self.max_waiting] {
                if let Some((call, first)) = self.open.remove(key) {
                    self.settled_early += 1;
                    settled(&call, first);
                }
            }
        }
    }

    /// The warning for the calls settled early, if any.
    pub fn warning(&self) -> Option<String> {
        (self.settled_early > 0).then(|| {
            format!(
                "launch health: {} graph launches settled before their replay had surely all come (more than {} \
                 waited): a later op of theirs counted as a launch of its own",
                self.settled_early, self.max_waiting
            )
        })
    }
}
