//! Grouping rows by a small integer key (a track) in parallel: a stable counting sort.
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

/// Every source's rows grouped by key (each key below `buckets`): bucket `k` is `out[bounds[k]..bounds[k + 1]]`,
/// its rows in source order and, within a source, in row order.
///
/// Rows are counted per block and bucket; each block then writes its rows into its own run of each bucket, so
/// the blocks write in parallel without sharing a slot.
pub fn group_by_key<T: Send>(buckets: usize, sources: &[Source<'_, T>]) -> (Vec<T>, Vec<usize>) {
    let total: usize = sources.iter().map(|s| s.keys.len()).sum();
    // Enough blocks for every worker, few enough that the per-block counts stay small beside the rows.
    let block_len = (total / 256).max(1 << 14);
    let blocks: Vec<(usize, Range<usize>)> = sources
        .iter()
        .enumerate()
        .flat_map(|(s, src)| {
            let n = src.keys.len();
            (0..n).step_by(block_len).map(move |a| (s, a..(a + block_len).min(n)))
        })
        .collect();
    let counts: Vec<Vec<u32>> = blocks
        .par_iter()
        .map(|(s, rows)| {
            let mut c = vec![0u32; buckets];
            for &k in &sources[*s].keys[rows.clone()] {
                c[k as usize] += 1;
            }
            c
        })
        .collect();
    let mut bounds = vec![0usize; buckets + 1];
    for c in &counts {
        for (k, &n) in c.iter().enumerate() {
            bounds[k + 1] += n as usize;
        }
    }
    for k in 0..buckets {
        bounds[k + 1] += bounds[k];
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
    runs.into_par_iter().zip(&blocks).for_each(|(mut dst, (s, rows))| {
        let src = &sources[*s];
        for i in rows.clone() {
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

    #[test]
    fn groups_stably_by_key_across_sources_and_blocks() {
        // Enough rows for several blocks, keys cycling so every block holds every bucket.
        let a: Vec<u32> = (0..100_000).map(|i| (i * 7 % 5) as u32).collect();
        let b: Vec<u32> = (0..3).map(|i| i as u32 * 2).collect();
        let make_a = |i: usize, k: u32| (k, 0u8, i);
        let make_b = |i: usize, k: u32| (k, 1u8, i);
        let sources = [Source { keys: a.clone(), make: &make_a }, Source { keys: b.clone(), make: &make_b }];
        let (out, bounds) = group_by_key(6, &sources);
        let mut want: Vec<(u32, u8, usize)> = a.iter().enumerate().map(|(i, &k)| (k, 0, i)).collect();
        want.extend(b.iter().enumerate().map(|(i, &k)| (k, 1, i)));
        want.sort_by_key(|&(k, s, i)| (k, s, i));
        assert_eq!(out, want);
        assert_eq!(bounds, vec![0, 20_001, 40_001, 60_002, 80_002, 100_003, 100_003]);
    }

    #[test]
    fn no_rows_no_buckets() {
        let make = |i: usize, k: u32| (k, i);
        let (out, bounds) = group_by_key(0, &[Source { keys: Vec::new(), make: &make }]);
        assert!(out.is_empty());
        assert_eq!(bounds, vec![0]);
    }
}
