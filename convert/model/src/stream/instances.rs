//! Each NVTX range instance's GPU work, as [`crate::Trace::gpu_work_by_range`] gives it on a loaded trace: the
//! time and count of the kernels, copies and memsets launched by API calls inside the instance on its thread,
//! nested instances included. A stream cannot know an instance's sums when it closes (its GPU work is read later),
//! so an instance is final once it is closed, every call launched directly inside it has left the correlation
//! horizon (GPU work of a call past the horizon is counted as out of it, never added) and every instance nested in
//! it is final. Final instances are handed to the consumer ([`super::Batch::range_work`]) and forgotten: the state
//! holds the open instances and the closed ones whose calls are still in the horizon.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use super::horizon::Tag;
use crate::ids::ProcId;
use crate::rows::NvtxRange;

/// A closed NVTX range instance and the GPU work launched inside it (nested ranges included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeWork {
    pub range: NvtxRange,
    /// Summed durations (ns, saturating) and count of the kernels, copies and memsets.
    pub gpu_ns: u64,
    pub gpu_ops: u64,
}

/// An instance not final yet.
struct Instance {
    /// The instance it is nested in (0: none).
    parent: u64,
    /// GPU work launched directly inside it, plus its final nested instances' sums.
    ns: u64,
    ops: u64,
    /// Nested instances not final yet.
    open_children: u32,
    /// Sequence number of the last call launched directly inside it (0: none).
    last_call: u64,
    /// Set when it closes; an instance never closed is final at the end of the stream but not handed on.
    range: Option<NvtxRange>,
}

#[derive(Default)]
pub(super) struct Instances {
    next_id: u64,
    live: FxHashMap<u64, Instance>,
    /// Open instances by (file, NVTX range id).
    open: FxHashMap<(ProcId, u32), u64>,
    /// Calls that entered the horizon, and that left it (first in, first out: sequence numbers 1..=evicted left).
    entered: u64,
    evicted: u64,
    /// Closed instances whose nested instances are final, by their last call.
    ready: BinaryHeap<Reverse<(u64, u64)>>,
}

impl Instances {
    /// A range starts on a thread whose innermost open range is `enclosing` (its NVTX range id), if any.
    pub fn start(&mut self, proc: ProcId, id: u32, enclosing: Option<u32>) {
        let parent = enclosing.and_then(|e| self.open.get(&(proc, e)).copied()).unwrap_or(0);
        if let Some(p) = self.live.get_mut(&parent) {
            p.open_children += 1;
        }
        self.next_id += 1;
        let instance = Instance { parent, ns: 0, ops: 0, open_children: 0, last_call: 0, range: None };
        self.live.insert(self.next_id, instance);
        // A second start of an open id (a damaged file) leaves the first never closed, as pairing does.
        self.open.insert((proc, id), self.next_id);
    }

    /// The range `(proc, id)` ended as `range`.
    pub fn close(&mut self, proc: ProcId, id: u32, range: NvtxRange) {
        let Some(instance) = self.open.remove(&(proc, id)) else { return };
        let Some(i) = self.live.get_mut(&instance) else { return };
        i.range = Some(range);
        if i.open_children == 0 {
            self.ready.push(Reverse((i.last_call, instance)));
        }
    }

    /// A call of file `proc` entered the horizon (`replaced`: none) or replaced the one of its key (a runtime call
    /// over a driver call, whose tag is `replaced`), its thread's innermost open range being `innermost`. Returns
    /// the call's tag, for the horizon to keep with it: (its instance, its sequence number), or (0, 0) when it was
    /// launched outside any range.
    pub fn call(&mut self, proc: ProcId, innermost: Option<u32>, replaced: Option<Tag>) -> Tag {
        let seq = match replaced {
            None => {
                self.entered += 1;
                self.entered
            }
            Some((instance, seq)) if instance != 0 => seq,
            // The replaced call was launched outside any range; its sequence number is not kept, so the
            // replacing one counts as the latest (later than it is: its instance waits a little longer).
            Some(_) => self.entered,
        };
        let instance = innermost.and_then(|r| self.open.get(&(proc, r)).copied());
        match instance.and_then(|instance| Some((instance, self.live.get_mut(&instance)?))) {
            Some((instance, i)) => {
                i.last_call = i.last_call.max(seq);
                (instance, seq)
            }
            None => (0, 0),
        }
    }

    /// GPU work of the call tagged `tag`, `ns` long.
    pub fn work(&mut self, tag: Tag, ns: u64) {
        if tag.0 != 0
            && let Some(i) = self.live.get_mut(&tag.0)
        {
            i.ns = i.ns.saturating_add(ns);
            i.ops += 1;
        }
    }

    /// The oldest call in the horizon left it.
    pub fn evicted(&mut self) {
        self.evicted += 1;
    }

    /// The instances that became final, into `out`.
    pub fn settle(&mut self, out: &mut Vec<RangeWork>) {
        while let Some(&Reverse((last_call, instance))) = self.ready.peek() {
            if last_call > self.evicted {
                break;
            }
            self.ready.pop();
            self.finalize(instance, out, false);
        }
    }

    /// The end of the stream: no GPU work is to come, so every instance is final, nested ones first. Those never
    /// closed are not handed on (a loaded trace's diff and stats leave them out too); their work counts in their
    /// enclosing instances, as on a loaded trace.
    pub fn finish(&mut self, out: &mut Vec<RangeWork>) {
        self.open.clear();
        self.ready.clear();
        let mut leaves: Vec<u64> = self.live.iter().filter(|(_, i)| i.open_children == 0).map(|(&id, _)| id).collect();
        leaves.sort_unstable();
        while let Some(instance) = leaves.pop() {
            if let Some(parent) = self.finalize(instance, out, true) {
                leaves.push(parent);
            }
        }
    }

    /// Hands `instance` on (when closed) and adds its sums to its parent; returns the parent when that one has no
    /// nested instance left to wait for and (at the end, `all`) may be finalized.
    fn finalize(&mut self, instance: u64, out: &mut Vec<RangeWork>, all: bool) -> Option<u64> {
        let i = self.live.remove(&instance)?;
        if let Some(range) = i.range {
            out.push(RangeWork { range, gpu_ns: i.ns, gpu_ops: i.ops });
        }
        let p = self.live.get_mut(&i.parent)?;
        p.ns = p.ns.saturating_add(i.ns);
        p.ops += i.ops;
        // Every nested instance was counted in when it started: never below zero (saturating all the same).
        p.open_children = p.open_children.saturating_sub(1);
        if p.open_children > 0 {
            return None;
        }
        if all {
            return Some(i.parent);
        }
        if p.range.is_some() {
            self.ready.push(Reverse((p.last_call, i.parent)));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::NameId;

    fn range(id: u32) -> NvtxRange {
        NvtxRange {
            proc: ProcId(0),
            start: id as u64,
            end: 100 + id as u64,
            pid: 1,
            tid: 1,
            name: NameId(id),
            domain: NameId::EMPTY,
            id,
            depth: 0,
            parent: NvtxRange::NO_PARENT,
        }
    }

    #[test]
    fn an_instance_is_handed_on_once_its_calls_left_the_horizon_and_its_nested_ones_are_final() {
        let p = ProcId(0);
        let mut s = Instances::default();
        let mut out = Vec::new();
        // step(1) { fwd(2) { launch 10 } launch 11 } ; empty(3) {}
        s.start(p, 1, None);
        s.start(p, 2, Some(1));
        let launch10 = s.call(p, Some(2), None);
        s.close(p, 2, range(2));
        let launch11 = s.call(p, Some(1), None);
        s.close(p, 1, range(1));
        s.start(p, 3, None);
        s.close(p, 3, range(3));
        s.settle(&mut out);
        // Only the empty range is final: no call of its own, nothing nested.
        assert_eq!(out.iter().map(|w| (w.range.id, w.gpu_ns, w.gpu_ops)).collect::<Vec<_>>(), [(3, 0, 0)]);
        s.work(launch10, 500);
        s.work(launch11, 70);
        s.evicted();
        s.settle(&mut out);
        assert_eq!(out.iter().map(|w| (w.range.id, w.gpu_ns)).collect::<Vec<_>>(), [(3, 0), (2, 500)]);
        // Work of an evicted call reaches no instance: the horizon has no tag for it (the stream counts it out of
        // the horizon).
        s.work((0, 0), 1_000_000);
        s.evicted();
        s.settle(&mut out);
        assert_eq!((out[2].range.id, out[2].gpu_ns, out[2].gpu_ops), (1, 570, 2));
        assert!(s.live.is_empty() && s.ready.is_empty());
    }

    #[test]
    fn a_range_never_closed_gives_its_work_to_the_closed_one_around_it_at_the_end() {
        let p = ProcId(0);
        let mut s = Instances::default();
        let mut out = Vec::new();
        s.start(p, 1, None);
        s.start(p, 2, Some(1));
        let launch = s.call(p, Some(2), None);
        assert_eq!(launch, (2, 1));
        s.work(launch, 40);
        s.close(p, 1, range(1));
        s.settle(&mut out);
        assert!(out.is_empty());
        s.finish(&mut out);
        assert_eq!(out.iter().map(|w| (w.range.id, w.gpu_ns, w.gpu_ops)).collect::<Vec<_>>(), [(1, 40, 1)]);
        assert!(s.live.is_empty());
    }
}
