//! Grouping rows by a small integer key (a track, a kernel name) in parallel: a stable counting sort.
//!
//! The layout needs every slice grouped by track and, within a track, in time order. The rows arrive sorted by
//! time kind by kind, so grouping them stably by track leaves each track a few sorted runs (one per kind), which
//! an adaptive sort merges in linear time: far cheaper than sorting millions of slices from scratch.

use std::mem::MaybeUninit;
use std::ops::Range;

use rayon::prelude::*;

/// The rows of one source: row `i` goes to bucket `keys[i]` as `make(i, keys[i])`.
pub struct Source<'a, T> {
    pub keys: Vec<u32>,
    pub make: &'a (dyn Fn(usize, u32) -> T + Sync),
}

/// Rows `rows` of source `source`, bound for output segment `segment` of their buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub source: usize,
    pub rows: Range<usize>,
    pub segment: usize,
}

/// Appends `rows` of `source` to `blocks` as blocks of at most `block_len` rows, in `segment`.
pub fn push_blocks(blocks: &mut Vec<Block>, source: usize, rows: Range<usize>, segment: usize, block_len: usize) {
    let mut at = rows.start;
    while at < rows.end {
        let end = (at + block_len.max(1)).min(rows.end);
        blocks.push(Block { source, rows: at..end, segment });
        at = end;
    }
}

/// The rows of `blocks` grouped by key (each key below `buckets`), each bucket cut into `segments` segments: rows
/// of bucket `k` from blocks of segment `j` are `out[bounds[k * segments + j]..bounds[k * segments + j + 1]]`, in
/// block order (blocks must come in segment order), and in row order within a block.
///
/// Rows are counted per block and bucket; each block then writes its rows into its own run of each bucket, so
/// the blocks write in parallel without sharing a slot.
pub fn group_by_key<T: Send>(
    buckets: usize,
    sources: &[Source<'_, T>],
    blocks: &[Block],
    segments: usize,
) -> (Vec<T>, Vec<usize>) {
    debug_assert!(blocks.windows(2).all(|w| w[0].segment <= w[1].segment));
    let total: usize = blocks.iter().map(|b| b.rows.len()).sum();
    let counts: Vec<Vec<u32>> = blocks
        .par_iter()
        .map(|b| {
            let mut c = vec![0u32; buckets];
            for &k in &sources[b.source].keys[b.rows.clone()] {
                c[k as usize] += 1;
            }
            c
        })
        .collect();
    let mut bounds = vec![0usize; buckets * segments + 1];
    for (b, c) in blocks.iter().zip(&counts) {
        for (k, &n) in c.iter().enumerate() {
            bounds[k * segments + b.segment + 1] += n as usize;
        }
    }
    for i in 1..bounds.len() {
        bounds[i] += bounds[i - 1];
    }

    let mut out: Vec<T> = Vec::with_capacity(total);
    // Cut the output into one run per (bucket, block), bucket-major, and hand each block its runs.
    let mut runs: Vec<Vec<&mut [MaybeUninit<T>]>> = (0..blocks.len()).map(|_| Vec::with_capacity(buckets)).collect();
    let mut rest = &mut out.spare_capacity_mut()[..total];
    for k in 0..buckets {
        for (b, c) in counts.iter().enumerate() {
            let (run, tail) = std::mem::take(&mut rest).split_at_mut(c[k] as usize);
            runs[b].push(run);
            rest = tail;
        }
    }
    runs.into_par_iter().zip(blocks).for_each(|(mut dst, b)| {
        let src = &sources[b.source];
        for i in b.rows.clone() {
            let k = src.keys[i];
            let (slot, tail) = std::mem::take(&mut dst[k as usize]).split_first_mut().expect("a slot per counted row");
            slot.write((src.make)(i, k));
            dst[k as usize] = tail;
        }
    });
    // SAFETY: the runs partition `out[..total]` (their lengths are the counts, which sum to `total`), and each
    // block wrote one row into every slot of its runs (it has exactly as many rows of each key as it counted).
    unsafe { out.set_len(total) };
    (out, bounds)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of every source in one segment, source by source, in blocks of at most `block_len` rows.
    fn all_rows<T>(sources: &[Source<'_, T>], block_len: usize) -> Vec<Block> {
        let mut blocks = Vec::new();
        for (source, src) in sources.iter().enumerate() {
            push_blocks(&mut blocks, source, 0..src.keys.len(), 0, block_len);
        }
        blocks
    }

    #[test]
    fn groups_stably_by_key_across_sources_and_blocks() {
        // Enough rows for several blocks, keys cycling so every block holds every bucket.
        let a: Vec<u32> = (0..100_000).map(|i| (i * 7 % 5) as u32).collect();
        let b: Vec<u32> = (0..3).map(|i| i as u32 * 2).collect();
        let make_a = |i: usize, k: u32| (k, 0u8, i);
        let make_b = |i: usize, k: u32| (k, 1u8, i);
        let sources = [Source { keys: a.clone(), make: &make_a }, Source { keys: b.clone(), make: &make_b }];
        let (out, bounds) = group_by_key(6, &sources, &all_rows(&sources, 30_000), 1);
        let mut want: Vec<(u32, u8, usize)> = a.iter().enumerate().map(|(i, &k)| (k, 0, i)).collect();
        want.extend(b.iter().enumerate().map(|(i, &k)| (k, 1, i)));
        want.sort_by_key(|&(k, s, i)| (k, s, i));
        assert_eq!(out, want);
        assert_eq!(bounds, vec![0, 20_001, 40_001, 60_002, 80_002, 100_003, 100_003]);
    }

    #[test]
    fn segments_split_each_bucket_by_block_segment() {
        // Source 0: keys 0,1,0,1,... ; source 1: keys 1,1,1. Segment 0 takes the first half of source 0 and
        // source 1's first row; segment 1 the rest.
        let a: Vec<u32> = (0..10).map(|i| i % 2).collect();
        let make_a = |i: usize, k: u32| (k, 0u8, i);
        let make_b = |i: usize, k: u32| (k, 1u8, i);
        let sources = [Source { keys: a, make: &make_a }, Source { keys: vec![1, 1, 1], make: &make_b }];
        let mut blocks = Vec::new();
        push_blocks(&mut blocks, 0, 0..5, 0, 2);
        push_blocks(&mut blocks, 1, 0..1, 0, 2);
        push_blocks(&mut blocks, 0, 5..10, 1, 2);
        push_blocks(&mut blocks, 1, 1..3, 1, 2);
        assert_eq!(blocks.len(), 8);
        let (out, bounds) = group_by_key(2, &sources, &blocks, 2);
        let got: Vec<(u32, u8, usize)> = out;
        assert_eq!(
            got,
            [
                (0, 0, 0),
                (0, 0, 2),
                (0, 0, 4), // bucket 0, segment 0
                (0, 0, 6),
                (0, 0, 8), // bucket 0, segment 1
                (1, 0, 1),
                (1, 0, 3),
                (1, 1, 0), // bucket 1, segment 0
                (1, 0, 5),
                (1, 0, 7),
                (1, 0, 9),
                (1, 1, 1),
                (1, 1, 2), // bucket 1, segment 1
            ]
        );
        assert_eq!(bounds, [0, 3, 5, 8, 13]);
    }

    #[test]
    fn no_rows_no_buckets() {
        let make = |i: usize, k: u32| (k, i);
        let sources = [Source { keys: Vec::new(), make: &make }];
        let (out, bounds) = group_by_key(0, &sources, &all_rows(&sources, 10), 1);
        assert!(out.is_empty());
        assert_eq!(bounds, vec![0]);
    }
}
