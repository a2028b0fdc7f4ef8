//! Overflow lanes: Perfetto pairs a slice's END with the most recent open slice on its track, so slices on one
//! track must nest. Work that overlaps without nesting (clock skew, concurrent work reported on one stream) moves
//! to an overflow lane beside its track.

use rayon::prelude::*;

use super::item::Item;
use super::tracks::TrackSet;

/// Start and end (exclusive) of each track's run of items (items sorted by track first), found in parallel.
pub(crate) fn track_runs(items: &[Item]) -> Vec<(usize, usize)> {
    let mut cuts: Vec<usize> =
        (1..items.len()).into_par_iter().filter(|&i| items[i].track != items[i - 1].track).collect();
    if items.is_empty() {
        return Vec::new();
    }
    cuts.insert(0, 0);
    cuts.push(items.len());
    cuts.windows(2).map(|w| (w[0], w[1])).collect()
}

/// Where one track's items (sorted by start) can be cut so that every item before a cut has ended by the item at
/// it: `0`, the cuts, and `items.len()`. Blocks are searched in parallel, each for its first such point, knowing
/// the latest end before it.
fn quiet_cuts(items: &[Item]) -> Vec<usize> {
    const BLOCK: usize = 1 << 15;
    let mut cuts = vec![0];
    if items.len() > BLOCK {
        let block_max: Vec<u64> =
            items.par_chunks(BLOCK).map(|c| c.iter().map(|it| it.end).max().unwrap_or(0)).collect();
        let mut before = Vec::with_capacity(block_max.len());
        let mut latest = 0;
        for &m in &block_max {
            before.push(latest);
            latest = latest.max(m);
        }
        let found: Vec<usize> = before
            .par_iter()
            .enumerate()
            .skip(1)
            .filter_map(|(b, &latest_before)| {
                let mut latest = latest_before;
                let from = b * BLOCK;
                for (n, it) in items[from..(from + BLOCK).min(items.len())].iter().enumerate() {
                    if latest <= it.start {
                        return Some(from + n);
                    }
                    latest = latest.max(it.end);
                }
                None
            })
            .collect();
        cuts.extend(found);
    }
    cuts.push(items.len());
    cuts
}

/// Moves items that overlap without nesting (on a flat track: that overlap at all) to overflow lanes (new tracks
/// beside theirs); items stay sorted.
/// Each track's lanes are found in parallel; the lane tracks are then made in item order.
pub(crate) fn assign_lanes(tracks: &mut TrackSet, items: &mut [Item]) -> u32 {
    let items_ro: &[Item] = items;
    let flat: Vec<bool> = tracks.tracks.iter().map(|t| t.flat).collect();
    // Each track's items split where nothing is open: the pieces are laid out independently and in parallel
    // with the same result (at such a point every lane is empty, and an empty lane takes the next item whatever
    // its number), so one long track no longer keeps a single worker busy.
    let pieces: Vec<(usize, usize)> = track_runs(items_ro)
        .into_iter()
        .flat_map(|(i, j)| quiet_cuts(&items_ro[i..j]).windows(2).map(|w| (i + w[0], i + w[1])).collect::<Vec<_>>())
        .collect();
    // (item, lane) of every item that leaves lane 0, in item order.
    let moves: Vec<(usize, u32)> = pieces
        .par_iter()
        .flat_map_iter(|&(i, j)| {
            let mut out = Vec::new();
            // stacks[k] holds the end times of open slices on lane k. On a flat track a slice takes only a lane
            // with nothing open; elsewhere one where it nests in the innermost open slice.
            let flat = flat[items_ro[i].track as usize];
            let mut stacks: Vec<Vec<u64>> = vec![Vec::new()];
            for (n, it) in items_ro[i..j].iter().enumerate() {
                let mut lane = None;
                for (k, st) in stacks.iter_mut().enumerate() {
                    while st.last().is_some_and(|&e| e <= it.start) {
                        st.pop();
                    }
                    if st.last().is_none_or(|&e| it.end <= e && !flat) {
                        st.push(it.end);
                        lane = Some(k);
                        break;
                    }
                }
                let k = lane.unwrap_or_else(|| {
                    stacks.push(vec![it.end]);
                    stacks.len() - 1
                });
                if k > 0 {
                    out.push((i + n, k as u32));
                }
            }
            out
        })
        .collect();
    let mut lanes_made = 0u32;
    for &(at, k) in &moves {
        let before = tracks.len();
        items[at].track = tracks.lane(items[at].track, k);
        if tracks.len() > before {
            lanes_made += 1;
        }
    }
    if let Some(&(first, _)) = moves.first() {
        // The moved items leave their tracks' groups, keeping the others' order, and form their lanes' groups
        // at the end (lane tracks are the newest, so their groups sort last; a lane's items come from one track,
        // already in layout order): a compaction instead of a sort.
        let mut moved: Vec<Item> = moves.iter().map(|&(at, _)| items[at]).collect();
        moved.sort_by_key(|it| it.track);
        let mut leaving = moves.iter().map(|&(at, _)| at).peekable();
        let mut kept = first;
        for at in first..items.len() {
            if leaving.next_if_eq(&at).is_none() {
                items[kept] = items[at];
                kept += 1;
            }
        }
        items[kept..].copy_from_slice(&moved);
    }
    lanes_made
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::item::Src;
    use crate::timeline::tracks::{LANE_TID_STEP, Track, TrackRole};
    use cutr_model::ProcId;

    #[test]
    fn slices_that_overlap_without_nesting_move_to_lanes_beside_their_track() {
        // Two threads' tracks (where API calls nest in NVTX ranges).
        let track = |tid: u32| Track {
            role: TrackRole::Thread { proc: ProcId(0), pid: 7, tid },
            parent: Some(9),
            name: format!("thread {tid}"),
            json_pid: 7,
            json_tid: 3,
            pid: 0,
            flat: false,
        };
        let mut b = TrackSet::from_tracks(vec![track(7), track(8)]);
        let k = Src::Kernel;
        let mut items = vec![
            // Track 0: [5, 15] overlaps [0, 10] without nesting -> lane 1; [6, 8] nests in [0, 10]; [7, 16]
            // overlaps both -> lane 2; [12, 20] starts after [0, 10] ended -> lane 0.
            Item::new(0, 0, 10, k(0)),
            Item::new(0, 5, 15, k(1)),
            Item::new(0, 6, 8, k(2)),
            Item::new(0, 7, 16, k(3)),
            Item::new(0, 12, 20, k(4)),
            // Track 1: [3, 9] overlaps [1, 4] -> its own lane 1.
            Item::new(1, 1, 4, k(5)),
            Item::new(1, 3, 9, k(6)),
        ];
        assert_eq!(assign_lanes(&mut b, &mut items), 3);
        let names: Vec<&str> = b.tracks.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "thread 7",
                "thread 8",
                "thread 7 (overlapping 1)",
                "thread 7 (overlapping 2)",
                "thread 8 (overlapping 1)"
            ]
        );
        // A host lane keeps its thread's Chrome row.
        assert!(b.tracks[2..].iter().all(|t| (t.parent, t.json_pid, t.json_tid) == (Some(9), 7, 3)));
        let placed: Vec<(u32, u64)> = items.iter().map(|i| (i.track, i.start)).collect();
        // Sorted by track again: lanes come after their base tracks.
        assert_eq!(placed, [(0, 0), (0, 6), (0, 12), (1, 1), (2, 5), (3, 7), (4, 3)]);
    }

    #[test]
    fn on_a_flat_gpu_track_even_nested_slices_take_lanes_on_rows_of_their_own() {
        let stream = Track {
            role: TrackRole::Stream { proc: ProcId(0), device: 0, context: 1, stream: 7 },
            parent: Some(9),
            name: "stream 7".into(),
            json_pid: 0,
            json_tid: 7,
            pid: 0,
            flat: true,
        };
        let mut b = TrackSet::from_tracks(vec![stream]);
        let k = Src::Kernel;
        // [2, 4] inside [0, 10] is not its child (kernels of a stream do not nest): lane 1; [12, 14] after both.
        let mut items = vec![Item::new(0, 0, 10, k(0)), Item::new(0, 2, 4, k(1)), Item::new(0, 12, 14, k(2))];
        assert_eq!(assign_lanes(&mut b, &mut items), 1);
        let lane = &b.tracks[1];
        assert_eq!(
            (lane.name.as_str(), lane.json_tid, lane.flat),
            ("stream 7 (overlapping 1)", 7 + LANE_TID_STEP, true)
        );
        let placed: Vec<(u32, u64)> = items.iter().map(|i| (i.track, i.start)).collect();
        assert_eq!(placed, [(0, 0), (0, 12), (1, 2)]);
    }

    #[test]
    fn quiet_points_are_where_everything_before_has_ended() {
        // 100,000 back-to-back slices, the first lasting until the 40,000th starts: blocks of 32,768 items each
        // cut at their first item except the second, which cuts where the long slice has ended.
        let mut items: Vec<Item> =
            (0..100_000u64).map(|i| Item::new(0, i * 10, i * 10 + 5, Src::Kernel(i as u32))).collect();
        items[0].end = 400_000;
        assert_eq!(quiet_cuts(&items), [0, 40_000, 65_536, 98_304, 100_000]);
        assert_eq!(quiet_cuts(&items[..10]), [0, 10]);
    }

    #[test]
    fn lanes_found_piece_by_piece_equal_one_walk_over_the_track() {
        // Bursts of overlapping slices with quiet gaps between some of them, over many blocks.
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 33
        };
        let mut items = Vec::new();
        let mut t = 0;
        for i in 0..150_000u32 {
            t += next() % 50;
            if i % 1000 == 0 {
                t += 10_000;
            }
            items.push(Item::new(0, t, t + next() % 400, Src::Kernel(i)));
        }
        items.sort_unstable_by_key(Item::key);
        // One walk over the whole track, the way lanes were assigned before it was cut into pieces.
        let mut want: Vec<(u64, u64, u32)> = Vec::new();
        let mut stacks: Vec<Vec<u64>> = vec![Vec::new()];
        for it in &items {
            let k = stacks
                .iter_mut()
                .position(|st| {
                    while st.last().is_some_and(|&e| e <= it.start) {
                        st.pop();
                    }
                    st.last().is_none_or(|&e| it.end <= e)
                })
                .unwrap_or_else(|| {
                    stacks.push(Vec::new());
                    stacks.len() - 1
                });
            stacks[k].push(it.end);
            want.push((it.start, it.end, k as u32));
        }
        let mut b = TrackSet::from_tracks(vec![Track {
            role: TrackRole::Stream { proc: ProcId(0), device: 0, context: 1, stream: 7 },
            parent: None,
            name: "stream 7".into(),
            json_pid: 0,
            json_tid: 7,
            pid: 0,
            flat: false,
        }]);
        let lanes = assign_lanes(&mut b, &mut items);
        assert_eq!(lanes as usize, stacks.len() - 1);
        assert!(lanes >= 3, "{lanes} lanes: the test needs overlaps several deep");
        // Lane k is track k (lanes are made in order of first use).
        let mut got: Vec<(u64, u64, u32)> = items.iter().map(|it| (it.start, it.end, it.track)).collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
        assert!(items.windows(2).all(|w| w[0].key() < w[1].key()));
    }
}
