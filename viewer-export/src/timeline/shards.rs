//! Shards: each track's slices cut into runs of a fixed number, the unit of parallel writing. A shard holds one
//! track's run of slices, so its BEGIN/END events come out in time order from a single walk with a stack of open
//! slices (no sort) and can share that track as a default. Slices still open at a cut (an NVTX range around the
//! whole run, say) are handed to the next shard as its starting stack, which ends them (Perfetto pairs an END
//! with its track's innermost open slice, whichever sequence began it), so no slice, however long, keeps a track
//! from being split. Shards are written in order of their first slice, and a track's shards in time order, so
//! equal timestamps at shard boundaries can never pair the wrong ends.

use rayon::prelude::*;

use super::item::Item;
use super::lanes::track_runs;

/// A run of one track's items (`items[start..end]`): the unit of parallel writing. Slices of earlier shards still
/// open at `items[start]` are `Timeline::open_ends[open_from..open_from + open_len]`: their end times, outermost
/// first, which this shard ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardRange {
    pub track: u32,
    pub start: u32,
    pub end: u32,
    pub open_from: u32,
    pub open_len: u32,
}

impl ShardRange {
    /// The start of the next shard on the same track (its slices open at or after it), if there is one: a
    /// shard ends only its slices that end by then and leaves the rest open for that shard.
    pub fn next_start(&self, items: &[Item]) -> Option<u64> {
        items.get(self.end as usize).filter(|it| it.track == self.track).map(|it| it.start)
    }

    /// The end times of the slices earlier shards left open, which this one ends (indices into `open_ends`).
    pub fn open(&self) -> std::ops::Range<usize> {
        self.open_from as usize..(self.open_from + self.open_len) as usize
    }
}

/// Cuts each track's items into shards of `shard_slices` items (fewer at a track's end), remembering the slices
/// open at each cut, and orders the shards by their first item's start. Returns the shards and the end times
/// of the open slices they start with.
pub(crate) fn shard(items: &[Item], shard_slices: usize) -> (Vec<ShardRange>, Vec<u64>) {
    // Each track is cut on its own (in parallel); its open ends are numbered from 0 until joined.
    let per_track: Vec<(Vec<ShardRange>, Vec<u64>)> = track_runs(items)
        .into_par_iter()
        .map(|(i, end)| {
            let (mut shards, mut open_ends) = (Vec::new(), Vec::new());
            let mut stack: Vec<u64> = Vec::new();
            let track = items[i].track;
            let (mut from, mut open_from, mut open_len) = (i, 0u32, 0u32);
            for (j, it) in items.iter().enumerate().take(end).skip(i) {
                while stack.last().is_some_and(|&e| e <= it.start) {
                    stack.pop();
                }
                if j - from >= shard_slices {
                    shards.push(ShardRange { track, start: from as u32, end: j as u32, open_from, open_len });
                    (from, open_from, open_len) = (j, open_ends.len() as u32, stack.len() as u32);
                    open_ends.extend_from_slice(&stack);
                }
                stack.push(it.end);
            }
            shards.push(ShardRange { track, start: from as u32, end: end as u32, open_from, open_len });
            (shards, open_ends)
        })
        .collect();
    let mut shards = Vec::new();
    let mut open_ends = Vec::new();
    for (track_shards, ends) in per_track {
        let base = open_ends.len() as u32;
        shards.extend(track_shards.into_iter().map(|s| ShardRange { open_from: s.open_from + base, ..s }));
        open_ends.extend(ends);
    }
    shards.sort_by_key(|s| (items[s.start as usize].start, s.track, s.start));
    (shards, open_ends)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::item::Src;

    #[test]
    fn shards_cut_through_open_slices_and_hand_them_on() {
        // Track 0: a range [0, 100] around three calls, the second with a nested call; track 1: two kernels.
        let api = |i| Src::Api(i);
        let items = vec![
            Item::new(0, 0, 100, Src::Range(0)),
            Item::new(0, 10, 20, api(0)),
            Item::new(0, 30, 60, api(1)),
            Item::new(0, 40, 50, api(2)),
            Item::new(0, 70, 80, api(3)),
            Item::new(1, 5, 15, Src::Kernel(0)),
            Item::new(1, 25, 35, Src::Kernel(1)),
        ];
        let (shards, open) = shard(&items, 2);
        let view: Vec<(u32, u32, u32, Vec<u64>)> = shards
            .iter()
            .map(|s| {
                (s.track, s.start, s.end, open[s.open_from as usize..(s.open_from + s.open_len) as usize].to_vec())
            })
            .collect();
        assert_eq!(
            view,
            vec![
                (0, 0, 2, vec![]),
                (1, 5, 7, vec![]),
                // Cut at the call starting at 30: the range is open (ends at 100), the call [10, 20] is not.
                (0, 2, 4, vec![100]),
                // Cut at 70: the range is still open; [30, 60] and [40, 50] ended.
                (0, 4, 5, vec![100]),
            ]
        );
        assert_eq!(shards[0].next_start(&items), Some(30));
        assert_eq!(shards[1].next_start(&items), None);
        assert_eq!(shards[3].next_start(&items), None);
    }
}
