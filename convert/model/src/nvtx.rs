//! NVTX ranges: start/end markers paired into ranges per file, their nesting on each thread, the innermost range
//! around each API call, and the GPU work launched inside each range.

use std::collections::HashMap;

use rayon::prelude::*;

use crate::decode::RawMarker;
use crate::ids::{CorrKey, ProcId};
use crate::load::Filter;
use crate::rows::{ApiCall, NvtxMark, NvtxRange};
use crate::timing::timed;
use crate::trace::Trace;

/// NVTX markers of one file paired into ranges.
#[derive(Default)]
pub(crate) struct PairedMarkers {
    pub marks: Vec<NvtxMark>,
    pub ranges: Vec<NvtxRange>,
    pub ends_without_start: u64,
    pub unclosed: u64,
}

/// Pairs NVTX start/end markers by id into ranges; instantaneous markers become marks.
pub(crate) fn pair_markers(proc: ProcId, mut markers: Vec<RawMarker>, filter: &Filter) -> PairedMarkers {
    const INSTANT: u32 = 1;
    const START: u32 = 1 << 1;
    const END: u32 = 1 << 2;
    timed("pair nvtx markers", || {
        // Stable: markers at the same time keep their record order (ends before starts).
        markers.par_sort_by_key(|m| (m.ts, m.flags & END == 0));
        let mut out = PairedMarkers::default();
        let range = |s: &RawMarker, end: u64| range_of(proc, s, end, 0);
        let mut open: HashMap<u32, RawMarker> = HashMap::new();
        for mk in markers {
            if mk.flags & INSTANT != 0 {
                if filter.keeps(mk.ts, mk.ts) {
                    out.marks.push(NvtxMark {
                        proc,
                        ts: mk.ts,
                        pid: mk.pid,
                        tid: mk.tid,
                        name: mk.name,
                        domain: mk.domain,
                    });
                }
            } else if mk.flags & START != 0 {
                open.insert(mk.id, mk);
            } else if mk.flags & END != 0 {
                match open.remove(&mk.id) {
                    Some(s) => {
                        if filter.keeps(s.ts, mk.ts) {
                            out.ranges.push(range(&s, mk.ts.max(s.ts)));
                        }
                    }
                    None => out.ends_without_start += 1,
                }
            }
        }
        for (_, s) in open {
            out.unclosed += 1;
            if filter.keeps(s.ts, u64::MAX) {
                out.ranges.push(range(&s, u64::MAX));
            }
        }
        out
    })
}

/// Sets each range's depth and parent on its thread. Ranges must be sorted by (proc, pid, tid, start, longer
/// first), so that a range's enclosing ones come before it.
pub(crate) fn nest(ranges: &mut [NvtxRange]) {
    let mut stack: Vec<usize> = Vec::new();
    let mut thread = None;
    for i in 0..ranges.len() {
        let r = ranges[i];
        if thread != Some((r.proc, r.pid, r.tid)) {
            thread = Some((r.proc, r.pid, r.tid));
            stack.clear();
        }
        while let Some(&top) = stack.last() {
            if ranges[top].end <= r.start {
                stack.pop();
            } else {
                break;
            }
        }
        ranges[i].depth = stack.len() as u16;
        ranges[i].parent = stack.last().map_or(NvtxRange::NO_PARENT, |&p| p as u32);
        stack.push(i);
    }
}

/// One thread's NVTX ranges: their starts (sorted) and their indices in `Trace::ranges`.
type ThreadRanges = (Vec<u64>, Vec<u32>);

/// For each API call, the innermost NVTX range on its thread that contains it (`u32::MAX` = none).
///
/// Needs `depth` and `parent` set ([`nest`]). The ranges that contain a call are the last range on its thread to
/// start at or before the call and that range's ancestors: any earlier range still open at the call was still on
/// the nesting stack when the last one started, and that stack is the parent chain. So the innermost is the first
/// of that chain that ends at or after the call (a walk bounded by the nesting depth, not by the number of
/// sibling ranges before the call).
pub(crate) fn enclosing_ranges(ranges: &[NvtxRange], apis: &[ApiCall]) -> Vec<u32> {
    // Each thread's range starts (sorted) beside the range indices, so the searches read contiguous memory.
    let mut by_thread: HashMap<(ProcId, u32), ThreadRanges> = HashMap::new();
    for (i, r) in ranges.iter().enumerate() {
        let (starts, ids) = by_thread.entry((r.proc, r.tid)).or_default();
        starts.push(r.start);
        ids.push(i as u32);
    }
    let innermost = |ids: &[u32], n: usize, a: &ApiCall| {
        let mut at = if n == 0 { NvtxRange::NO_PARENT } else { ids[n - 1] };
        while let Some(r) = ranges.get(at as usize) {
            if r.end >= a.end {
                return at;
            }
            at = r.parent;
        }
        u32::MAX
    };
    let mut out = vec![u32::MAX; apis.len()];
    if by_thread.is_empty() {
        return out;
    }
    // API calls come sorted by start, so within a block of calls each thread's position in its ranges only moves
    // forward: a gallop from where the thread's previous call left it instead of a full search.
    const BLOCK: usize = 4096;
    out.par_chunks_mut(BLOCK).zip(apis.par_chunks(BLOCK)).for_each(|(out, apis)| {
        // The threads seen in this block with their ranges and cursor; calls mostly repeat the last thread.
        let mut threads: Vec<((ProcId, u32), Option<&ThreadRanges>, usize)> = Vec::new();
        let mut last = usize::MAX;
        for (slot, a) in out.iter_mut().zip(apis) {
            let key = (a.proc, a.tid);
            if threads.get(last).is_none_or(|t| t.0 != key) {
                last = threads.iter().position(|t| t.0 == key).unwrap_or_else(|| {
                    threads.push((key, by_thread.get(&key), 0));
                    threads.len() - 1
                });
            }
            let (_, ranges, cursor) = &mut threads[last];
            let Some((starts, ids)) = ranges else { continue };
            let from = *cursor;
            let n = if from > 0 && starts[from - 1] > a.start {
                starts.partition_point(|&s| s <= a.start)
            } else {
                from + gallop(&starts[from..], a.start)
            };
            *cursor = n;
            *slot = innermost(ids, n, a);
        }
    });
    out
}

/// How many of the sorted `starts` are at or before `t`, searched from the front in doubling steps (cheap when the
/// answer is near the front, as for a cursor that moves forward through time).
fn gallop(starts: &[u64], t: u64) -> usize {
    let mut hi = 1;
    while hi <= starts.len() && starts[hi - 1] <= t {
        hi *= 2;
    }
    let lo = hi / 2;
    let hi = hi.min(starts.len());
    lo + starts[lo..hi].partition_point(|&s| s <= t)
}

impl Trace {
    /// For each NVTX range: the GPU time (ns) and number of kernels, copies and memsets launched by API calls
    /// inside it on the same thread, nested ranges included.
    pub fn gpu_work_by_range(&self) -> Vec<(u64, u64)> {
        // Each op's innermost range (that of its launching call) is found in parallel; the ops' time and count
        // are summed per innermost range, and each such range's sums then go up its parent chain once, rather
        // than every op walking the chain (the same integer sums).
        let innermost = |key: CorrKey| self.launcher_index(key).map_or(u32::MAX, |ai| self.api_range[ai as usize]);
        let ops: Vec<(u32, u64)> = self
            .kernels
            .par_iter()
            .map(|k| (innermost(k.corr()), k.duration()))
            .chain(self.memcpys.par_iter().map(|k| (innermost(k.corr()), k.duration())))
            .chain(self.memsets.par_iter().map(|k| (innermost(k.corr()), k.duration())))
            .collect();
        let mut own = vec![(0u64, 0u64); self.ranges.len()];
        for &(r, dur) in &ops {
            if r != u32::MAX {
                own[r as usize].0 += dur;
                own[r as usize].1 += 1;
            }
        }
        let mut out = vec![(0u64, 0u64); self.ranges.len()];
        for (i, &(dur, n)) in own.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let mut r = i as u32;
            while r != NvtxRange::NO_PARENT {
                out[r as usize].0 += dur;
                out[r as usize].1 += n;
                r = self.ranges[r as usize].parent;
            }
        }
        out
    }
}

impl Trace {
    /// Per range (indexed like `ranges`): GPU time and count of the kernels, copies and memsets launched by any
    /// thread of the range's process while the range was open (launching call started within it). PyTorch's
    /// backward kernels are launched from its autograd thread, outside the main thread's `backward` range: this
    /// attribution by time overlap counts them; it also counts other threads' unrelated work. Open ranges get 0.
    pub fn gpu_work_by_range_across_threads(&self) -> Vec<(u64, u64)> {
        // Every GPU op with a launching call: (process, call start, duration), sorted, with prefix sums per
        // process, so that each range is two binary searches.
        let launch = |key: CorrKey, dur: u64| self.launcher(key).map(|a| (a.proc.0, a.start, dur));
        let mut ops: Vec<(u16, u64, u64)> = self
            .kernels
            .par_iter()
            .filter_map(|k| launch(k.corr(), k.duration()))
            .chain(self.memcpys.par_iter().filter_map(|k| launch(k.corr(), k.duration())))
            .chain(self.memsets.par_iter().filter_map(|k| launch(k.corr(), k.duration())))
            .collect();
        ops.par_sort_unstable();
        let mut prefix = Vec::with_capacity(ops.len() + 1);
        prefix.push(0u64);
        for o in &ops {
            prefix.push(prefix.last().copied().unwrap_or(0) + o.2);
        }
        self.ranges
            .par_iter()
            .map(|r| {
                if !r.closed() {
                    return (0, 0);
                }
                let lo = ops.partition_point(|o| (o.0, o.1) < (r.proc.0, r.start));
                let hi = ops.partition_point(|o| (o.0, o.1) <= (r.proc.0, r.end));
                (prefix[hi] - prefix[lo], (hi - lo) as u64)
            })
            .collect()
    }
}

/// The range a start marker opened, ending at `end`, at nesting `depth` (its parent still unknown).
pub(crate) fn range_of(proc: ProcId, s: &RawMarker, end: u64, depth: u16) -> NvtxRange {
    NvtxRange {
        proc,
        start: s.ts,
        end,
        pid: s.pid,
        tid: s.tid,
        name: s.name,
        domain: s.domain,
        id: s.id,
        depth,
        parent: NvtxRange::NO_PARENT,
    }
}

#[cfg(test)]
mod tests {
    use super::gallop;

    #[test]
    fn gallop_counts_the_starts_at_or_before_a_time() {
        let starts = [10, 20, 20, 30, 40, 50, 60, 70, 80];
        for t in [0, 9, 10, 19, 20, 25, 30, 69, 70, 80, 1000] {
            let expected = starts.iter().filter(|&&s| s <= t).count();
            assert_eq!(gallop(&starts, t), expected, "t = {t}");
        }
        assert_eq!(gallop(&[], 5), 0);
    }
}
