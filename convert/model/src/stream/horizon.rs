//! The correlation horizon of a stream: each recent API call (with the id of the NVTX range set around it) and
//! each recent pair of external ids, by correlation key, for the GPU work read later. CUPTI numbers a process's
//! calls in increasing order and a call's GPU work and external records come soon after it, so each file's keys
//! live in a ring indexed by correlation id: a window's inserts and lookups walk memory in order. Hash tables of a
//! million keys made every lookup a cache miss, and the join the stream's bottleneck (56% of `stats --stream`'s
//! CPU time on 10M records).
//!
//! What the horizon keeps is what it kept as hash tables: the most recent `horizon` calls in the order they were
//! read, and apart from them the most recent `horizon` external id pairs. A ring spans at most
//! [`Horizon::span_cap`] correlation ids: ids far apart (a file whose ids jump, forged or not) evict the calls at
//! the ring's old end early, as out of the horizon, rather than grow memory with the gap.

use std::collections::VecDeque;

use crate::ids::{CorrKey, ProcId};
use crate::rows::ApiCall;

#[derive(Clone, Copy, Default)]
struct Slot {
    /// The launching call and the id of its NVTX range set.
    call: Option<(u32, ApiCall)>,
    /// External ids (CUSTOM0, CUSTOM1) of the key, once an external record came for it.
    external: Option<(u64, u64)>,
    /// What the stream's range instances keep about the call (its instance and sequence number; 0 = none).
    tag: Tag,
}

/// A call's NVTX range instance and its sequence number (see [`super::instances`]); (0, 0) = none.
pub(super) type Tag = (u64, u64);

impl Slot {
    fn is_empty(&self) -> bool {
        self.call.is_none() && self.external.is_none()
    }
}

/// One file's keys: `slots[i]` is correlation id `base + i`.
#[derive(Default)]
struct Ring {
    base: u32,
    slots: VecDeque<Slot>,
    /// The highest correlation id whose call left the horizon.
    evicted: Option<u32>,
}

impl Ring {
    fn get(&self, correlation: u32) -> Option<&Slot> {
        let at = correlation.checked_sub(self.base)?;
        self.slots.get(at as usize)
    }

    fn evicted(&mut self, correlation: u32) {
        self.evicted = Some(self.evicted.map_or(correlation, |m| m.max(correlation)));
    }
}

/// What [`Horizon::add_call`] did with a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CallAdded {
    /// The key's first call.
    New,
    /// A runtime call took the place of the driver call sharing its key.
    Replaced,
    /// The key has its call already (or the call is too old for the ring): nothing changed.
    Kept,
}

pub(super) struct Horizon {
    rings: Vec<Ring>,
    horizon: usize,
    span_cap: usize,
    calls: usize,
    externals: usize,
    call_order: VecDeque<CorrKey>,
    external_order: VecDeque<CorrKey>,
    /// Calls evicted early by a ring's span, for the next [`Horizon::evict`] to report.
    forced: Vec<(CorrKey, Tag)>,
}

impl Horizon {
    pub fn new(horizon: usize) -> Horizon {
        let horizon = horizon.max(1);
        Horizon {
            rings: Vec::new(),
            horizon,
            span_cap: Self::span_cap(horizon),
            calls: 0,
            externals: 0,
            call_order: VecDeque::new(),
            external_order: VecDeque::new(),
            forced: Vec::new(),
        }
    }

    /// The most correlation ids a file's ring spans: twice the horizon (a file's ids also number calls it did not
    /// record, such as the driver calls under runtime calls), and a floor for short horizons.
    pub fn span_cap(horizon: usize) -> usize {
        horizon.saturating_mul(2).saturating_add(1 << 16).min(u32::MAX as usize)
    }

    fn slot(&self, key: CorrKey) -> Option<&Slot> {
        self.rings.get(key.proc.index())?.get(key.correlation)
    }

    /// The call of `key` in the horizon and its NVTX range set.
    pub fn launch(&self, key: CorrKey) -> Option<(u32, &ApiCall)> {
        self.slot(key)?.call.as_ref().map(|(id, call)| (*id, call))
    }

    /// The external ids (CUSTOM0, CUSTOM1) of `key`, 0 where none came.
    pub fn external(&self, key: CorrKey) -> (u64, u64) {
        self.slot(key).and_then(|s| s.external).unwrap_or((0, 0))
    }

    /// The tag of `key`'s call in the horizon ((0, 0) when none).
    pub fn tag(&self, key: CorrKey) -> Tag {
        self.slot(key).filter(|s| s.call.is_some()).map_or((0, 0), |s| s.tag)
    }

    /// Tags `key`'s call, if it is in the horizon.
    pub fn set_tag(&mut self, key: CorrKey, tag: Tag) {
        let Some(ring) = self.rings.get_mut(key.proc.index()) else { return };
        let slot = key.correlation.checked_sub(ring.base).and_then(|at| ring.slots.get_mut(at as usize));
        if let Some(slot) = slot.filter(|s| s.call.is_some()) {
            slot.tag = tag;
        }
    }

    /// The NVTX range set ids of the calls in the horizon, to mark and renumber (`RangeState::compact_stacks`).
    pub fn stack_ids_mut(&mut self) -> impl Iterator<Item = &mut u32> {
        self.rings.iter_mut().flat_map(|r| r.slots.iter_mut()).filter_map(|s| s.call.as_mut().map(|(id, _)| id))
    }

    /// Whether `key`'s call may have been read and left the horizon: its id is at or below the highest evicted.
    pub fn is_evicted(&self, key: CorrKey) -> bool {
        self.rings.get(key.proc.index()).and_then(|r| r.evicted).is_some_and(|max| key.correlation <= max)
    }

    /// Keeps `call` (range set `stack`) for its key; a runtime call wins over a driver call sharing the key.
    pub fn add_call(&mut self, key: CorrKey, stack: u32, call: &ApiCall) -> CallAdded {
        let Some(slot) = self.slot_mut(key) else { return CallAdded::Kept };
        let added = match &mut slot.call {
            Some((id, kept)) if kept.driver && !call.driver => {
                (*id, *kept) = (stack, *call);
                CallAdded::Replaced
            }
            Some(_) => CallAdded::Kept,
            empty @ None => {
                *empty = Some((stack, *call));
                CallAdded::New
            }
        };
        if added == CallAdded::New {
            self.calls += 1;
            self.call_order.push_back(key);
        }
        added
    }

    /// Sets `key`'s external id of `kind` (`CUSTOM0` = true: the first of the pair) to `id`, unless `id` is 0.
    pub fn add_external(&mut self, key: CorrKey, first: bool, id: u64) {
        let Some(slot) = self.slot_mut(key) else { return };
        let new = slot.external.is_none();
        let pair = slot.external.get_or_insert((0, 0));
        match (first, id) {
            (_, 0) => {}
            (true, id) => pair.0 = id,
            (false, id) => pair.1 = id,
        }
        if new {
            self.externals += 1;
            self.external_order.push_back(key);
        }
    }

    /// Drops the oldest calls past the horizon (and those a ring's span evicted early), handing each with its tag
    /// to `evicted`, then the oldest external id pairs past it.
    pub fn evict(&mut self, mut evicted: impl FnMut(CorrKey, Tag)) {
        for (key, tag) in std::mem::take(&mut self.forced) {
            evicted(key, tag);
        }
        while self.calls > self.horizon {
            let Some(key) = self.call_order.pop_front() else { break };
            let Some(ring) = self.rings.get_mut(key.proc.index()) else { continue };
            let Some(slot) = key.correlation.checked_sub(ring.base).and_then(|at| ring.slots.get_mut(at as usize))
            else {
                continue;
            };
            if slot.call.take().is_some() {
                let tag = std::mem::take(&mut slot.tag);
                self.calls -= 1;
                ring.evicted(key.correlation);
                evicted(key, tag);
            }
        }
        while self.externals > self.horizon {
            let Some(key) = self.external_order.pop_front() else { break };
            let Some(ring) = self.rings.get_mut(key.proc.index()) else { continue };
            let slot = key.correlation.checked_sub(ring.base).and_then(|at| ring.slots.get_mut(at as usize));
            if slot.and_then(|s| s.external.take()).is_some() {
                self.externals -= 1;
            }
        }
        for ring in &mut self.rings {
            while ring.slots.front().is_some_and(Slot::is_empty) {
                ring.slots.pop_front();
                ring.base = ring.base.wrapping_add(1);
            }
            while ring.slots.back().is_some_and(Slot::is_empty) {
                ring.slots.pop_back();
            }
        }
    }

    /// `key`'s slot, the ring grown to hold it. A key so far above the ring's keys that the ring would span more
    /// than the cap evicts the ring's oldest keys first; one so far below them is left out (`None`), its call
    /// counted as evicted.
    fn slot_mut(&mut self, key: CorrKey) -> Option<&mut Slot> {
        let at = key.proc.index();
        if self.rings.len() <= at {
            self.rings.resize_with(at + 1, Ring::default);
        }
        let ring = &mut self.rings[at];
        let cap = self.span_cap;
        if ring.slots.is_empty() {
            ring.base = key.correlation;
        }
        if key.correlation < ring.base {
            let before = (ring.base - key.correlation) as usize;
            if before + ring.slots.len() > cap {
                ring.evicted(key.correlation);
                return None;
            }
            for _ in 0..before {
                ring.slots.push_front(Slot::default());
            }
            ring.base = key.correlation;
        }
        if (key.correlation - ring.base) as usize >= cap {
            // The ring would span more than the cap: its oldest keys leave first, their calls as evicted.
            let new_base = key.correlation - (cap as u32 - 1);
            while ring.base < new_base {
                let Some(slot) = ring.slots.pop_front() else { break };
                if slot.call.is_some() {
                    self.calls -= 1;
                    ring.evicted(ring.base);
                    self.forced.push((CorrKey::new(ProcId(at as u16), ring.base), slot.tag));
                }
                if slot.external.is_some() {
                    self.externals -= 1;
                }
                ring.base += 1;
            }
            if ring.slots.is_empty() {
                ring.base = key.correlation;
            }
        }
        let offset = (key.correlation - ring.base) as usize;
        if offset >= ring.slots.len() {
            ring.slots.resize(offset + 1, Slot::default());
        }
        ring.slots.get_mut(offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(correlation: u32, driver: bool) -> ApiCall {
        ApiCall {
            proc: ProcId(0),
            start: correlation as u64,
            end: correlation as u64 + 1,
            pid: 1,
            tid: 1,
            correlation,
            cbid: 1,
            driver,
            return_value: 0,
        }
    }

    fn key(proc: u16, correlation: u32) -> CorrKey {
        CorrKey::new(ProcId(proc), correlation)
    }

    #[test]
    fn the_oldest_calls_read_leave_first_and_a_runtime_call_wins_its_key() {
        let mut h = Horizon::new(2);
        assert_eq!(h.add_call(key(0, 10), 1, &call(10, true)), CallAdded::New);
        assert_eq!(h.add_call(key(0, 10), 2, &call(10, false)), CallAdded::Replaced);
        assert_eq!(h.add_call(key(0, 10), 3, &call(10, true)), CallAdded::Kept);
        // Read out of order, and in a second file.
        h.add_call(key(0, 7), 4, &call(7, false));
        h.add_call(key(1, 3), 5, &call(3, false));
        let mut gone = Vec::new();
        h.set_tag(key(0, 10), (1, 2));
        h.set_tag(key(0, 11), (3, 4));
        assert_eq!((h.tag(key(0, 10)), h.tag(key(0, 11))), ((1, 2), (0, 0)));
        h.evict(|k, tag| gone.push((k, tag)));
        assert_eq!(gone, [(key(0, 10), (1, 2))]);
        assert_eq!(h.tag(key(0, 10)), (0, 0));
        assert_eq!((h.launch(key(0, 7)).map(|l| l.0), h.launch(key(1, 3)).map(|l| l.0)), (Some(4), Some(5)));
        assert!(h.launch(key(0, 10)).is_none() && h.is_evicted(key(0, 10)) && h.is_evicted(key(0, 9)));
        assert!(!h.is_evicted(key(0, 11)) && !h.is_evicted(key(1, 2)));
        // The ring keeps only the span of what it holds: 7..=7 once 10 left.
        assert_eq!((h.rings[0].base, h.rings[0].slots.len()), (7, 1));
    }

    #[test]
    fn external_pairs_have_a_horizon_of_their_own() {
        let mut h = Horizon::new(1);
        h.add_external(key(0, 5), true, 11);
        h.add_external(key(0, 5), false, 12);
        h.add_external(key(0, 5), true, 0);
        assert_eq!(h.external(key(0, 5)), (11, 12));
        h.add_external(key(0, 6), false, 13);
        h.evict(|_, _| panic!("no call was kept"));
        assert_eq!((h.external(key(0, 5)), h.external(key(0, 6))), ((0, 0), (0, 13)));
        assert!(!h.is_evicted(key(0, 5)));
    }

    #[test]
    fn ids_far_apart_evict_the_old_end_instead_of_growing_the_ring() {
        let mut h = Horizon::new(4);
        let cap = Horizon::span_cap(4) as u32;
        h.add_call(key(0, 1), 1, &call(1, false));
        h.add_call(key(0, 2), 1, &call(2, false));
        // A jump to the cap's length: id 1 leaves, as evicted, and the ring spans 2..=cap+1.
        h.add_call(key(0, cap + 1), 1, &call(cap + 1, false));
        assert_eq!((h.rings[0].base, h.rings[0].slots.len()), (2, cap as usize));
        let mut gone = Vec::new();
        h.evict(|k, _| gone.push(k));
        assert_eq!(gone, [key(0, 1)]);
        assert!(h.launch(key(0, 2)).is_some() && h.is_evicted(key(0, 1)));
        // An id more than the cap below the ring is too old to keep: counted as evicted.
        h.add_call(key(0, u32::MAX - 1), 1, &call(u32::MAX - 1, false));
        assert_eq!(h.add_call(key(0, 5), 1, &call(5, false)), CallAdded::Kept);
        assert!(h.is_evicted(key(0, 5)) && h.launch(key(0, 5)).is_none());
        assert!(h.rings[0].slots.len() <= cap as usize);
    }
}
