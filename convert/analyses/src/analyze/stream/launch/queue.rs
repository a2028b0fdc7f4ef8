//! Launch queues over a stream. A call's +1 is known only when its op arrives, up to the largest launch latency
//! after the call's start, so the events of a window are kept in one time order and walked
//! ([`QueueWalk`], the loaded path's definition) only once no later op can bring an earlier event: behind the
//! stream's edge less that latency (the first pass's maximum). At most `max_waiting` events wait.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use super::ops::Seen;
use crate::analyze::launch::collect::{StreamKey, cost};
use crate::analyze::launch::queue::QueueWalk;
use crate::analyze::launch::{Blocked, StreamQueue};

/// An op's start sorts before a call's start at the same time, as the walk takes them.
const OP: u8 = 0;
const CALL: u8 = 1;

/// One queue event: (time, stream index, [`OP`] or [`CALL`], the call's cost).
type Event = (u64, u32, u8, u64);

pub(super) struct Queues {
    /// Each stream's first and last event, from the first pass.
    spans: FxHashMap<StreamKey, (u64, u64)>,
    index: FxHashMap<StreamKey, u32>,
    walks: Vec<QueueWalk>,
    waiting: BinaryHeap<Reverse<Event>>,
    /// The largest launch latency of a queued launch: how far behind its op a call's start can be.
    lag: u64,
    max_waiting: usize,
    blocked: Blocked,
    /// The latest event walked, and the events that came after a later one was walked (settled early).
    walked_to: u64,
    settled_early: u64,
    late: u64,
}

impl Queues {
    /// Queues over the first pass's `spans`; `lag` is the largest queued launch latency.
    pub fn new(spans: FxHashMap<StreamKey, (u64, u64)>, lag: u64, max_waiting: usize) -> Queues {
        Queues {
            spans,
            index: FxHashMap::default(),
            walks: Vec::new(),
            waiting: BinaryHeap::new(),
            lag,
            max_waiting,
            blocked: Blocked::default(),
            walked_to: 0,
            settled_early: 0,
            late: 0,
        }
    }

    /// A kernel or async copy: its call's start and its op's start.
    pub fn add(&mut self, s: &Seen) {
        let next = self.walks.len() as u32;
        let i = *self.index.entry(s.stream).or_insert(next);
        if i == next {
            // A stream the first pass did not see (only a different input gives one): its span from this launch.
            let span = self.spans.get(&s.stream).copied().unwrap_or((s.call.start, s.op_start));
            self.walks.push(QueueWalk::new(s.stream, span.0, span.1));
        }
        for (t, kind) in [(s.op_start, OP), (s.call.start, CALL)] {
            if self.settled_early > 0 && t < self.walked_to {
                self.late += 1;
            }
            self.waiting.push(Reverse((t, i, kind, cost(&s.call))));
        }
    }

    /// Walks the events no later op can come before: all of them at the end (`edge` `None`).
    pub fn settle(&mut self, edge: Option<u64>) {
        let before = edge.map_or(u64::MAX, |e| e.saturating_sub(self.lag));
        while let Some(&Reverse(e)) = self.waiting.peek() {
            let early = self.waiting.len() > self.max_waiting;
            if e.0 >= before && !early {
                break;
            }
            if e.0 >= before {
                self.settled_early += 1;
            }
            self.waiting.pop();
            self.walk(e);
        }
    }

    fn walk(&mut self, (t, i, kind, cost): Event) {
        self.walked_to = self.walked_to.max(t);
        let Some(w) = self.walks.get_mut(i as usize) else { return };
        if kind == OP {
            w.op(t);
        } else {
            w.call(t, cost, &mut self.blocked);
        }
    }

    /// Every stream's queue by (file, device, stream), the calls blocked on a full queue, and a warning when events
    /// were walked before the edge passed them.
    pub fn finish(mut self) -> (Vec<StreamQueue>, Blocked, Option<String>) {
        self.settle(None);
        let mut keyed: Vec<(StreamKey, u32)> = self.index.into_iter().collect();
        keyed.sort_unstable();
        let mut walks: Vec<Option<QueueWalk>> = self.walks.into_iter().map(Some).collect();
        let queues =
            keyed.iter().filter_map(|(_, i)| walks.get_mut(*i as usize)?.take()).map(QueueWalk::finish).collect();
        let warning = (self.settled_early > 0).then(|| {
            format!(
                "launch health: {} queue events walked before the stream passed them (more than {} waited), {} came \
                 after a later one: the queues' depths are approximate",
                self.settled_early, self.max_waiting, self.late
            )
        });
        (queues, self.blocked, warning)
    }
}
