//! Grouping a table's rows by a key (a kernel name, a stream) in parallel: dense bucket numbers for the distinct
//! keys, then a stable counting sort of the rows into their buckets.

use cutr_model::par::{Source, group_by_key, push_blocks};
use rayon::prelude::*;

/// Rows per block of the parallel grouping (large enough that counting per block stays cheap).
const GROUP_BLOCK: usize = 1 << 16;

/// Dense bucket numbers for `keys`, in order of first appearance, and each key's bucket. Keys are
/// found per block in parallel, so the first appearances are in row order too.
pub(super) fn buckets<K: std::hash::Hash + Eq + Clone + Send + Sync>(keys: &[K]) -> (Vec<K>, Vec<u32>) {
    let firsts: Vec<Vec<K>> = keys
        .par_chunks(GROUP_BLOCK)
        .map(|block| {
            let mut seen = rustc_hash::FxHashSet::default();
            block.iter().filter(|k| seen.insert(*k)).cloned().collect()
        })
        .collect();
    let mut index: rustc_hash::FxHashMap<K, u32> = rustc_hash::FxHashMap::default();
    let mut distinct = Vec::new();
    for k in firsts.into_iter().flatten() {
        index.entry(k.clone()).or_insert_with(|| {
            distinct.push(k);
            distinct.len() as u32 - 1
        });
    }
    let bucket = keys.par_iter().map(|k| index[k]).collect();
    (distinct, bucket)
}

/// The values of `sources` grouped by bucket (a parallel stable counting sort): bucket `b` is
/// `out[bounds[b]..bounds[b + 1]]`, rows in source order and row order.
pub(super) fn group<T: Send>(buckets: usize, sources: &[Source<'_, T>]) -> (Vec<T>, Vec<usize>) {
    let mut blocks = Vec::new();
    for (i, src) in sources.iter().enumerate() {
        push_blocks(&mut blocks, i, 0..src.keys.len(), 0, GROUP_BLOCK);
    }
    group_by_key(buckets, sources, &blocks, 1)
}

/// `v` cut at `bounds` into one mutable slice per bucket.
pub(super) fn split_at_bounds<'a, T>(mut v: &'a mut [T], bounds: &[usize]) -> Vec<&'a mut [T]> {
    let mut out = Vec::with_capacity(bounds.len().saturating_sub(1));
    for w in bounds.windows(2) {
        let (head, tail) = std::mem::take(&mut v).split_at_mut(w[1] - w[0]);
        out.push(head);
        v = tail;
    }
    out
}
