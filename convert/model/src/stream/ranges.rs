//! The state a stream keeps across windows: NVTX start/end markers paired by id as a whole load pairs them
//! ([`crate::nvtx`]), the ranges open on each thread, and each API call's open ranges by correlation key for the
//! GPU work it launched, kept for the most recent [`super::StreamOptions::horizon`] calls. CUPTI numbers a
//! process's calls in increasing order, so GPU work with no call in the horizon and an id at or below the highest
//! evicted one lost its call to the horizon (counted), and the rest had none (`gpu_without_api`, as at load).

use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use super::Batch;
use super::horizon::{CallAdded, Horizon};
use super::instances::Instances;
use crate::decode::{ChunkRows, RawMarker};
use crate::ids::{CorrKey, NameId, ProcId};
use crate::load::Filter;
use crate::nvtx::range_of;
use crate::rows::{Kernel, Memcpy, Memset, NvtxMark, NvtxRange};
use crate::trace::JoinStats;

const INSTANT: u32 = 1;
const START: u32 = 1 << 1;
const END: u32 = 1 << 2;

/// External correlation kinds the model reads (PyTorch's op id and user annotation id); others are unmodelled.
const EXTERNAL_CUSTOM0: u32 = 3;
const EXTERNAL_CUSTOM1: u32 = 4;

/// The distinct sets of NVTX ranges open around API calls, as a tree: a set is its innermost range's name under the
/// set of the ranges around that one, so a program that names each step apart (`step 1234`) adds a node or two per
/// step, not a copy of the whole set. A launch's ranges cost one integer; id 0 is no range.
///
/// Ids are good for the batch that carries them: between batches the stream drops the sets no call in its horizon
/// refers to and numbers the rest anew. A day of steps named apart makes ~27 million sets
/// (three a step), ~0.8 GB a recording if kept to the end.
#[derive(Debug)]
pub struct RangeStacks {
    /// (enclosing set, innermost name) -> id.
    ids: FxHashMap<(u32, NameId), u32>,
    /// By id: its enclosing set (always made before it: a lower id) and innermost name.
    nodes: Vec<(u32, NameId)>,
    /// Sets kept by the last compaction.
    kept: usize,
}

impl Default for RangeStacks {
    fn default() -> Self {
        RangeStacks { ids: FxHashMap::default(), nodes: vec![(0, NameId::EMPTY)], kept: 1 }
    }
}

impl RangeStacks {
    /// The names of the ranges of set `id`, innermost first (one entry per open range: a name nested in itself is
    /// there twice, as each range instance gets the work).
    pub fn names(&self, mut id: u32) -> impl Iterator<Item = NameId> + '_ {
        std::iter::from_fn(move || {
            let &(up, name) = self.nodes.get(id as usize).filter(|_| id != 0)?;
            id = up;
            Some(name)
        })
    }

    fn id_of(&mut self, stack: &[(u32, NameId)]) -> u32 {
        let mut id = 0;
        for &(_, name) in stack {
            id = match self.ids.get(&(id, name)) {
                Some(&known) => known,
                None => {
                    self.nodes.push((id, name));
                    let new = self.nodes.len() as u32 - 1;
                    self.ids.insert((id, name), new);
                    new
                }
            };
        }
        id
    }

    /// Whether `floor` sets were made beyond twice those the last compaction kept: a compaction walks the horizon,
    /// so it runs once the sets have grown by a margin, not every batch.
    fn wants_compaction(&self, floor: usize) -> bool {
        self.nodes.len() > self.kept.saturating_mul(2).saturating_add(floor)
    }

    /// Keeps the sets `referenced` marks (by id) and the sets enclosing them, numbered anew in their order; the
    /// others are dropped (a call of one made later makes it again). Returns each old id's new one (0: dropped).
    fn keep(&mut self, mut referenced: Vec<bool>) -> Vec<u32> {
        referenced.resize(self.nodes.len(), false);
        referenced[0] = true;
        // A set's enclosing set has a lower id: one walk down marks every enclosing set of a kept one.
        for i in (1..self.nodes.len()).rev() {
            if referenced[i] {
                referenced[self.nodes[i].0 as usize] = true;
            }
        }
        let count = referenced.iter().filter(|&&r| r).count();
        let mut renumbered = vec![0u32; self.nodes.len()];
        let mut nodes = Vec::with_capacity(count);
        nodes.push((0, NameId::EMPTY));
        let mut ids = FxHashMap::with_capacity_and_hasher(count, Default::default());
        for (i, &(up, name)) in self.nodes.iter().enumerate().skip(1).filter(|(i, _)| referenced[*i]) {
            let id = nodes.len() as u32;
            let up = renumbered[up as usize];
            nodes.push((up, name));
            ids.insert((up, name), id);
            renumbered[i] = id;
        }
        (self.nodes, self.ids, self.kept) = (nodes, ids, count);
        renumbered
    }
}

/// A marker or an API call of a window, in time order; ends before starts before calls at one time (a range
/// that starts with a call holds it).
#[derive(Clone, Copy)]
struct Event {
    ts: u64,
    order: u8,
    chunk: u32,
    row: u32,
}

pub(super) struct RangeState {
    /// Started ranges not yet ended, by (file, range id), with their thread's nesting when they started.
    open: FxHashMap<(ProcId, u32), (RawMarker, u16)>,
    /// Each thread's open ranges (range id, name), outermost first.
    threads: FxHashMap<(ProcId, u32), Vec<(u32, NameId)>>,
    pub stacks: RangeStacks,
    /// Each recent call, its range set and its external ids, by correlation key.
    horizon: Horizon,
    /// GPU work waiting for its launching call's chunk (see [`RangeState::batch`]), at most `max_held`.
    held: (Vec<Kernel>, Vec<Memcpy>, Vec<Memset>),
    max_held: usize,
    pub held_released_early: u64,
    pub out_of_horizon: u64,
    /// A `--start/--end` window: ranges and instants outside it are left out of the batches and the span, as a
    /// load leaves them out.
    filter: Filter,
    /// External ids (PyTorch's) of the last window whose call was not read yet: it may come in the next window.
    externals_waiting: FxHashSet<CorrKey>,
    /// Each NVTX range instance's GPU work, when asked for ([`super::stream_readers_with_range_work`]).
    pub instances: Option<Instances>,
    /// Range sets made past twice those kept before the unreferenced ones are dropped
    /// ([`super::StreamOptions::range_sets_floor`]).
    range_sets_floor: usize,
}

impl RangeState {
    pub fn new(horizon: usize, filter: Filter, max_held: usize, range_sets_floor: usize) -> RangeState {
        RangeState {
            open: FxHashMap::default(),
            threads: FxHashMap::default(),
            stacks: RangeStacks::default(),
            horizon: Horizon::new(horizon),
            held: Default::default(),
            max_held,
            held_released_early: 0,
            out_of_horizon: 0,
            filter,
            externals_waiting: FxHashSet::default(),
            instances: None,
            range_sets_floor,
        }
    }

    /// A window's rows (each chunk with its file) as a batch: markers paired, calls' ranges kept, GPU work's
    /// ranges looked up; `span` widened to the window's rows, failed joins counted per file.
    /// `hold_before`: GPU work that starts after this time (the next window's earliest chunk) and whose launching
    /// call is not read yet is held for a later window, where the call's chunk may come
    /// ([`super::StreamOptions::hold_unlaunched`]).
    pub fn batch(
        &mut self,
        rows: Vec<(ProcId, ChunkRows)>,
        span: &mut (u64, u64),
        stats: &mut [JoinStats],
        hold_before: Option<u64>,
    ) -> Batch {
        self.compact_stacks();
        let mut batch = Batch::default();
        let windowed = self.filter.has_window();
        for (p, c) in &rows {
            widen(span, c, !windowed);
            stats[p.index()].unmodelled_records +=
                c.external.iter().filter(|e| e.0 != EXTERNAL_CUSTOM0 && e.0 != EXTERNAL_CUSTOM1).count() as u64;
            self.keep_external(*p, &c.external);
        }
        self.walk_markers_and_calls(&rows, &mut batch, stats);
        self.match_externals(&rows, stats);
        if windowed {
            // Markers widen the span as the load keeps them: instants in the window, ranges overlapping it.
            for (_, c) in &rows {
                let instants = c.markers.iter().filter(|m| m.flags & INSTANT != 0);
                instants.filter(|m| self.filter.keeps(m.ts, m.ts)).for_each(|m| see(span, m.ts, m.ts));
            }
            batch.ranges.iter().for_each(|r| see(span, r.start, r.end));
        }
        // The GPU work held from earlier windows first, then every chunk's kernels, then copies, then memsets.
        let (mut kernels, mut memcpys, mut memsets) = std::mem::take(&mut self.held);
        let mut rows = rows;
        for (_, c) in &mut rows {
            kernels.append(&mut c.kernels);
            memcpys.append(&mut c.memcpys);
            memsets.append(&mut c.memsets);
        }
        if let Some(before) = hold_before {
            // Work whose call was not read yet, and may still be: the chunk holding it starts before the work.
            let waits = |key: CorrKey, start: u64| {
                start > before && self.horizon.launch(key).is_none() && !self.horizon.is_evicted(key)
            };
            let (k, c, m) = &mut self.held;
            kernels = hold(kernels, k, |r| waits(r.corr(), r.start));
            memcpys = hold(memcpys, c, |r| waits(r.corr(), r.start));
            memsets = hold(memsets, m, |r| waits(r.corr(), r.start));
            let held = k.len() + c.len() + m.len();
            if held > self.max_held {
                // Chunk headers keep the edge back (a damaged or forged file): hand the work on, unjoined if its
                // call is still to come, rather than hold and sort it again each window.
                self.held_released_early += held as u64;
                kernels.append(k);
                memcpys.append(c);
                memsets.append(m);
            }
        }
        let ops = kernels.iter().map(|k| (k.corr(), k.graph_id != 0, k.duration()));
        let copies = memcpys.iter().map(|m| (m.corr(), false, m.duration()));
        let ops = ops.chain(copies).chain(memsets.iter().map(|m| (m.corr(), false, m.duration())));
        for (key, graph, ns) in ops {
            let id = self.launch_ranges(key, &mut stats[key.proc.index()], graph);
            batch.gpu_ranges.push(id);
            if let Some(i) = &mut self.instances {
                i.work(self.horizon.tag(key), ns);
            }
            batch.gpu_calls.push(self.horizon.launch(key).map(|(_, call)| *call));
            batch.gpu_external.push(self.horizon.external(key));
        }
        (batch.kernels, batch.memcpys, batch.memsets) = (kernels, memcpys, memsets);
        for (p, c) in rows.iter_mut() {
            batch.apis.append(&mut c.apis);
            batch.syncs.append(&mut c.syncs);
            batch.memory.append(&mut c.memory);
            batch.um.append(&mut c.um);
            let instant = c.markers.iter().filter(|m| m.flags & INSTANT != 0);
            batch.marks.extend(instant.map(|m| NvtxMark {
                proc: *p,
                ts: m.ts,
                pid: m.pid,
                tid: m.tid,
                name: m.name,
                domain: m.domain,
            }));
        }
        self.evict();
        if let Some(i) = &mut self.instances {
            i.settle(&mut batch.range_work);
        }
        batch
    }

    /// Drops the range sets no call in the horizon refers to, once enough were made: the earlier batches' ids are
    /// spent (their consumers returned), and the horizon's calls are the only ids a later batch hands on.
    fn compact_stacks(&mut self) {
        if !self.stacks.wants_compaction(self.range_sets_floor) {
            return;
        }
        let mut referenced = vec![false; self.stacks.nodes.len()];
        for id in self.horizon.stack_ids_mut() {
            referenced[*id as usize] = true;
        }
        let renumbered = self.stacks.keep(referenced);
        for id in self.horizon.stack_ids_mut() {
            *id = renumbered[*id as usize];
        }
    }

    /// The stack id of the call that launched `key`'s work, counting the work whose call is unknown.
    fn launch_ranges(&mut self, key: CorrKey, stats: &mut JoinStats, graph: bool) -> u32 {
        if let Some((id, _)) = self.horizon.launch(key) {
            return id;
        }
        if self.horizon.is_evicted(key) {
            self.out_of_horizon += 1;
        } else {
            stats.gpu_without_api += 1;
            stats.graph_kernels_without_launch += graph as u64;
        }
        0
    }

    fn walk_markers_and_calls(&mut self, rows: &[(ProcId, ChunkRows)], batch: &mut Batch, stats: &mut [JoinStats]) {
        // Each call's range set, by its place in the batch's `apis` (chunk by chunk, as they are appended).
        let firsts: Vec<usize> = rows
            .iter()
            .scan(0, |n, (_, c)| {
                let first = *n;
                *n += c.apis.len();
                Some(first)
            })
            .collect();
        batch.api_ranges = vec![0; rows.iter().map(|(_, c)| c.apis.len()).sum()];
        let mut events = Vec::new();
        for (ci, (_, c)) in rows.iter().enumerate() {
            for (ri, m) in c.markers.iter().enumerate() {
                let order = if m.flags & END != 0 { 0 } else { 1 };
                events.push(Event { ts: m.ts, order, chunk: ci as u32, row: ri as u32 });
            }
            for (ri, a) in c.apis.iter().enumerate() {
                events.push(Event { ts: a.start, order: 2, chunk: ci as u32, row: (c.markers.len() + ri) as u32 });
            }
        }
        events.par_sort_by_key(|e| (e.ts, e.order, e.chunk, e.row));
        for e in events {
            let (proc, c) = &rows[e.chunk as usize];
            let (proc, row) = (*proc, e.row as usize);
            match c.markers.get(row) {
                Some(m) => self.marker(proc, m, batch, &mut stats[proc.index()]),
                None => {
                    let a = &c.apis[row - c.markers.len()];
                    let stack = self.threads.get(&(proc, a.tid)).map_or(&[][..], |s| s);
                    let id = self.stacks.id_of(stack);
                    batch.api_ranges[firsts[e.chunk as usize] + row - c.markers.len()] = id;
                    let key = CorrKey::new(proc, a.correlation);
                    let innermost = stack.last().map(|r| r.0);
                    let replaced = self.horizon.tag(key);
                    let added = self.horizon.add_call(key, id, a);
                    if let Some(i) = &mut self.instances
                        && added != CallAdded::Kept
                    {
                        let tag = i.call(proc, innermost, (added == CallAdded::Replaced).then_some(replaced));
                        self.horizon.set_tag(key, tag);
                    }
                }
            }
        }
    }

    fn marker(&mut self, proc: ProcId, m: &RawMarker, batch: &mut Batch, stats: &mut JoinStats) {
        if m.flags & INSTANT != 0 {
            return;
        }
        if m.flags & START != 0 {
            batch.range_starts.push((proc, m.ts));
            let stack = self.threads.entry((proc, m.tid)).or_default();
            if let Some(i) = &mut self.instances {
                i.start(proc, m.id, stack.last().map(|r| r.0));
            }
            let depth = stack.len().min(u16::MAX as usize) as u16;
            stack.push((m.id, m.name));
            self.open.insert((proc, m.id), (*m, depth));
            return;
        }
        if m.flags & END == 0 {
            return;
        }
        let Some((s, depth)) = self.open.remove(&(proc, m.id)) else {
            stats.nvtx_ends_without_start += 1;
            return;
        };
        let kept = self.filter.keeps(s.ts, m.ts);
        if let Some(stack) = self.threads.get_mut(&(proc, s.tid))
            && let Some(at) = stack.iter().rposition(|x| x.0 == m.id)
        {
            stack.remove(at);
            if stack.is_empty() {
                self.threads.remove(&(proc, s.tid));
            }
        }
        let range = range_of(proc, &s, m.ts.max(s.ts), depth);
        if let Some(i) = &mut self.instances {
            i.close(proc, m.id, range);
        }
        if kept {
            batch.ranges.push(range);
        }
    }

    /// Counts the external ids with no API call (`external_without_api`, as a load counts them: one per
    /// correlation id of PyTorch's two kinds): those of the last window whose call did not come in this one either,
    /// and keeps this window's unmatched ones for the next. One whose call may have fallen out of the horizon is
    /// not counted.
    fn match_externals(&mut self, rows: &[(ProcId, ChunkRows)], stats: &mut [JoinStats]) {
        for key in std::mem::take(&mut self.externals_waiting) {
            if self.horizon.launch(key).is_none() {
                stats[key.proc.index()].external_without_api += 1;
            }
        }
        for (p, c) in rows {
            let modelled = c.external.iter().filter(|e| e.0 == EXTERNAL_CUSTOM0 || e.0 == EXTERNAL_CUSTOM1);
            for key in modelled.map(|e| CorrKey::new(*p, e.1)) {
                if self.horizon.launch(key).is_none() && !self.horizon.is_evicted(key) {
                    self.externals_waiting.insert(key);
                }
            }
        }
    }

    /// Keeps a window's external ids (a later record's nonzero id wins, as at load), the oldest dropped past the
    /// horizon.
    fn keep_external(&mut self, proc: ProcId, external: &[crate::decode::RawExternal]) {
        for &(kind, correlation, id) in external {
            let key = CorrKey::new(proc, correlation);
            match kind {
                EXTERNAL_CUSTOM0 => self.horizon.add_external(key, true, id),
                EXTERNAL_CUSTOM1 => self.horizon.add_external(key, false, id),
                _ => self.horizon.add_external(key, true, 0),
            }
        }
    }

    /// Drops the oldest calls past the horizon, remembering the highest id dropped per file.
    fn evict(&mut self) {
        let instances = &mut self.instances;
        self.horizon.evict(|_, _| {
            if let Some(i) = instances {
                i.evicted();
            }
        });
    }

    /// The ranges never ended, counted per file and returned (ending at `u64::MAX`, as a load keeps them); in a
    /// `--start/--end` window, those it keeps widen the span by their start (outside one, their start marker
    /// already did).
    pub fn finish(&mut self, stats: &mut [JoinStats], span: &mut (u64, u64)) -> Vec<NvtxRange> {
        let mut unclosed = Vec::with_capacity(self.open.len());
        for ((proc, _), (s, depth)) in self.open.drain() {
            stats[proc.index()].nvtx_unclosed_ranges += 1;
            if self.filter.has_window() && self.filter.keeps(s.ts, u64::MAX) {
                see(span, s.ts, s.ts);
            }
            unclosed.push(range_of(proc, &s, u64::MAX, depth));
        }
        self.threads.clear();
        for key in self.externals_waiting.drain() {
            stats[key.proc.index()].external_without_api += 1;
        }
        unclosed.sort_by_key(|r| (r.proc, r.tid, r.start, r.id));
        unclosed
    }
}

/// `rows` without those `wait` picks, which are appended to `held`.
fn hold<T>(rows: Vec<T>, held: &mut Vec<T>, wait: impl Fn(&T) -> bool) -> Vec<T> {
    let (waiting, now): (Vec<T>, Vec<T>) = rows.into_iter().partition(|r| wait(r));
    held.extend(waiting);
    now
}

fn see(span: &mut (u64, u64), a: u64, b: u64) {
    span.0 = span.0.min(a);
    span.1 = span.1.max(b);
}

/// Widens `span` to the earliest and latest timestamps of a chunk's rows (unclosed ranges by their start), its
/// NVTX markers with `markers`.
fn widen(span: &mut (u64, u64), c: &ChunkRows, markers: bool) {
    let mut see = |a: u64, b: u64| see(span, a, b);
    c.kernels.iter().for_each(|r| see(r.start, r.end));
    c.memcpys.iter().for_each(|r| see(r.start, r.end));
    c.memsets.iter().for_each(|r| see(r.start, r.end));
    c.apis.iter().for_each(|r| see(r.start, r.end));
    c.syncs.iter().for_each(|r| see(r.start, r.end));
    c.overheads.iter().for_each(|r| see(r.start, r.end));
    c.memory.iter().for_each(|r| see(r.ts, r.ts));
    c.um.iter().for_each(|r| see(r.start, r.end));
    if markers {
        c.markers.iter().for_each(|r| see(r.ts, r.ts));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_sets_share_their_enclosing_sets() {
        let mut s = RangeStacks::default();
        let (step, fwd) = (NameId(7), NameId(9));
        let a = s.id_of(&[(1, step), (2, fwd)]);
        let b = s.id_of(&[(1, step)]);
        let c = s.id_of(&[(1, step), (2, fwd), (3, fwd)]);
        assert_eq!((s.id_of(&[]), s.id_of(&[(5, step), (6, fwd)]), s.nodes.len()), (0, a, 4));
        assert_eq!(s.names(a).collect::<Vec<_>>(), [fwd, step]);
        assert_eq!(s.names(b).collect::<Vec<_>>(), [step]);
        assert_eq!(s.names(c).collect::<Vec<_>>(), [fwd, fwd, step]);
        assert_eq!(s.names(0).count(), 0);
    }

    #[test]
    fn a_compaction_keeps_the_referenced_sets_and_those_around_them_numbered_anew() {
        let mut s = RangeStacks::default();
        let names = |s: &RangeStacks, id| s.names(id).collect::<Vec<_>>();
        let (fwd, bwd) = (NameId(9), NameId(10));
        // Three steps named apart, each with a forward and a backward set: 9 sets besides "none".
        let mut sets = Vec::new();
        for step in 1..=3 {
            let step = NameId(step);
            sets.push([s.id_of(&[(1, step)]), s.id_of(&[(1, step), (2, fwd)]), s.id_of(&[(1, step), (3, bwd)])]);
        }
        assert_eq!((s.nodes.len(), s.wants_compaction(8), s.wants_compaction(7)), (10, false, true));
        // Only the last step's backward set is still referred to (by a call in the horizon).
        let mut referenced = vec![false; s.nodes.len()];
        referenced[sets[2][2] as usize] = true;
        let renumbered = s.keep(referenced);
        // It and its step's set stay, in their order; every other set is gone.
        assert_eq!(renumbered, [0, 0, 0, 0, 0, 0, 0, 1, 0, 2]);
        assert_eq!((s.nodes.len(), s.kept, names(&s, 2), names(&s, 1)), (3, 3, vec![bwd, NameId(3)], vec![NameId(3)]));
        // A dropped set asked for again is made again, after those kept; a kept one keeps its new id.
        assert_eq!((s.id_of(&[(1, NameId(3)), (3, bwd)]), s.id_of(&[(1, NameId(1)), (2, fwd)])), (2, 4));
        assert_eq!(names(&s, 4), [fwd, NameId(1)]);
        // The next compaction waits for more than twice the kept sets (3) plus the floor: 7 with none.
        let more = (s.wants_compaction(0), s.id_of(&[(1, NameId(5))]), s.id_of(&[(1, NameId(6))]));
        assert_eq!((more, s.wants_compaction(0)), ((false, 5, 6), true));
    }
}
