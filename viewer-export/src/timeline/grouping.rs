//! Grouping every slice by track in time order: time is cut into slices of about equal numbers of rows, each
//! source (a table, in time order) into blocks of rows within one slice; a parallel stable counting sort groups
//! the rows by track slice by slice ([`cutr_model::par::group_by_key`]), and each (track, time slice) segment,
//! a few runs already in time order, is then sorted on its own.

use cutr_model::par::{Block, Source, push_blocks};
use rayon::prelude::*;

use super::item::Item;

/// Cuts time into slices of about equal numbers of rows and every source (each in time order) into blocks of
/// rows within one slice, in slice order: grouped by track with these, each track's items come slice by slice,
/// so a track is in layout order once each (track, slice) segment is sorted on its own. Returns the blocks and
/// the number of slices.
pub(crate) fn time_slices<T>(
    sources: &[Source<'_, T>],
    starts: &[&(dyn Fn(usize) -> u64 + Sync)],
) -> (Vec<Block>, usize) {
    let total: usize = sources.iter().map(|s| s.keys.len()).sum();
    let block_len = (total / 256).max(1 << 14);
    let slices = (total >> 16).clamp(1, 1024);
    // Slice boundaries at even steps through the largest source.
    let Some(largest) = (0..sources.len()).max_by_key(|&s| sources[s].keys.len()) else { return (Vec::new(), 1) };
    let n = sources[largest].keys.len();
    let cuts: Vec<u64> = (1..slices).map(|j| starts[largest](j * n / slices)).collect();
    let mut blocks = Vec::new();
    let mut from = vec![0usize; sources.len()];
    for j in 0..slices {
        for (s, src) in sources.iter().enumerate() {
            let len = src.keys.len();
            // Rows of source s starting before the slice's end (its starts are sorted).
            let end = match cuts.get(j) {
                Some(&cut) => from[s] + partition_point(from[s]..len, |i| starts[s](i) < cut),
                None => len,
            };
            push_blocks(&mut blocks, s, from[s]..end, j, block_len);
            from[s] = end;
        }
    }
    (blocks, slices)
}

/// How many indices of `range`, from its start, satisfy `pred` (which holds for a prefix of it).
fn partition_point(range: std::ops::Range<usize>, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (range.start, range.end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) { lo = mid + 1 } else { hi = mid }
    }
    lo - range.start
}

/// Sorts each segment of items (`items[bounds[i]..bounds[i + 1]]`, one per track and time slice) into layout
/// order, in parallel. A segment is a few runs already in time order (one per kind of row), often already
/// sorted: checked first, else merged by an adaptive (run-detecting) sort.
pub(crate) fn sort_segments(items: &mut [Item], bounds: &[usize]) {
    let mut segments = Vec::with_capacity(bounds.len());
    let mut rest = items;
    for w in bounds.windows(2) {
        let (segment, tail) = std::mem::take(&mut rest).split_at_mut(w[1] - w[0]);
        segments.push(segment);
        rest = tail;
    }
    segments.into_par_iter().for_each(|g| {
        if !g.is_sorted_by_key(Item::key) {
            g.sort_by_key(Item::key);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_slices_cover_every_row_once_in_time_order() {
        // Two sources in time order: 300,000 rows every 10 ns and 1,000 rows every 3,000 ns.
        let a_keys = vec![0u32; 300_000];
        let b_keys = vec![1u32; 1_000];
        let make = |i: usize, _| i;
        let sources = [Source { keys: a_keys, make: &make }, Source { keys: b_keys, make: &make }];
        let starts: [&(dyn Fn(usize) -> u64 + Sync); 2] = [&|i| i as u64 * 10, &|i| i as u64 * 3_000];
        let (blocks, slices) = time_slices(&sources, &starts);
        assert_eq!(slices, 4);
        for (s, src) in sources.iter().enumerate() {
            let rows: Vec<usize> = blocks.iter().filter(|b| b.source == s).flat_map(|b| b.rows.clone()).collect();
            assert_eq!(rows, (0..src.keys.len()).collect::<Vec<_>>());
        }
        // Every row of slice j starts before every row of slice j + 1.
        let span = |j: usize| {
            let starts =
                blocks.iter().filter(|b| b.segment == j).flat_map(|b| b.rows.clone().map(|i| starts[b.source](i)));
            starts.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)))
        };
        assert!((1..slices).all(|j| span(j - 1).1 < span(j).0));
        assert!(blocks.windows(2).all(|w| w[0].segment <= w[1].segment));
        assert_eq!(span(0), (0, 749_990));
    }
}
