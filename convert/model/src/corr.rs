//! Values keyed by (input file, correlation id): the launching API call of GPU work, the external (PyTorch op)
//! ids of a launch, how many GPU records one call launched.
//!
//! CUPTI hands out correlation ids in increasing order from a small start, so within one file they are dense. A
//! flat array over a file's id range is then several times smaller than a hash map of the same entries and is
//! read without hashing or cache-missing probes: on a 10M-record trace the joins touch tens of MB instead of
//! hundreds. A file whose ids are sparse (range much wider than the count) keeps a hash map instead.
//!
//! Tables of millions of rows are built in parallel ([`CorrMap::build_file_par`]): each worker fills its own range
//! of ids, walking all rows in order, so a slot sees its rows in the same order as in a single walk.

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::ids::{CorrKey, ProcId};

/// A file's ids are stored densely when their range is at most this many times their count (plus slack).
const DENSE_RANGE_PER_ENTRY: u64 = 4;
const DENSE_SLACK: u64 = 4096;

#[derive(Clone, Debug)]
enum Store<T> {
    Dense { base: u32, vals: Vec<T> },
    Sparse(FxHashMap<u32, T>),
}

/// A map [`CorrKey`] (file, correlation id) -> `T`, where one value of `T` (`empty`) means "no entry".
#[derive(Clone, Debug)]
pub struct CorrMap<T> {
    files: Vec<Store<T>>,
    empty: T,
}

impl<T: Copy + PartialEq> CorrMap<T> {
    pub fn new(empty: T) -> CorrMap<T> {
        CorrMap { files: Vec::new(), empty }
    }

    /// Builds file `proc`'s table from rows `0..n`: row `i` gives `entry(i) = Some((correlation id, value))` or
    /// `None`, and `merge(slot, value)` stores a value into a slot that may already hold one (`empty` when not).
    /// In parallel: the table is cut into one range of ids per worker, and each worker walks all rows in order,
    /// storing those in its range. Every slot sees its rows in row order, so `merge` can keep the first or the
    /// last as it likes, with the same result on any number of workers.
    pub fn build_file_par(
        &mut self,
        proc: ProcId,
        n: usize,
        entry: impl Fn(usize) -> Option<(u32, T)> + Sync,
        merge: impl Fn(&mut T, T) + Sync,
    ) where
        T: Send + Sync,
    {
        let (lo, hi, count) = (0..n)
            .into_par_iter()
            .filter_map(|i| entry(i).map(|(c, _)| (c, c, 1u64)))
            .reduce(|| (u32::MAX, 0, 0), |a, b| (a.0.min(b.0), a.1.max(b.1), a.2 + b.2));
        let store = if count == 0 {
            Store::Dense { base: 0, vals: Vec::new() }
        } else if ((hi - lo) as u64) < count * DENSE_RANGE_PER_ENTRY + DENSE_SLACK {
            let mut vals = vec![self.empty; (hi - lo) as usize + 1];
            let part = vals.len().div_ceil(rayon::current_num_threads().max(1));
            vals.par_chunks_mut(part).enumerate().for_each(|(p, slots)| {
                let from = lo as usize + p * part;
                for i in 0..n {
                    if let Some((c, v)) = entry(i)
                        && let Some(slot) = slots.get_mut((c as usize).wrapping_sub(from))
                    {
                        merge(slot, v);
                    }
                }
            });
            Store::Dense { base: lo, vals }
        } else {
            let mut m: FxHashMap<u32, T> = FxHashMap::default();
            for (c, v) in (0..n).filter_map(&entry) {
                merge(m.entry(c).or_insert(self.empty), v);
            }
            Store::Sparse(m)
        };
        let p = proc.index();
        if self.files.len() <= p {
            self.files.resize_with(p + 1, || Store::Dense { base: 0, vals: Vec::new() });
        }
        self.files[p] = store;
    }

    /// How many entries satisfy `f`, counted in parallel.
    pub fn count_where(&self, f: impl Fn(CorrKey, T) -> bool + Sync) -> u64
    where
        T: Send + Sync,
    {
        let f = &f;
        self.files
            .iter()
            .enumerate()
            .map(|(p, s)| match s {
                Store::Dense { base, vals } => vals
                    .par_iter()
                    .enumerate()
                    .filter(|&(i, &v)| v != self.empty && f(key(p, *base + i as u32), v))
                    .count() as u64,
                Store::Sparse(m) => m.iter().filter(|&(&c, &v)| v != self.empty && f(key(p, c), v)).count() as u64,
            })
            .sum()
    }

    /// The value of `key`, `None` when absent.
    #[inline]
    pub fn get(&self, key: CorrKey) -> Option<T> {
        let corr = key.correlation;
        let v = match self.files.get(key.proc.index())? {
            Store::Dense { base, vals } => *vals.get(corr.wrapping_sub(*base) as usize)?,
            Store::Sparse(m) => *m.get(&corr)?,
        };
        (v != self.empty).then_some(v)
    }

    #[inline]
    pub fn contains(&self, key: CorrKey) -> bool {
        self.get(key).is_some()
    }

    /// Every key present, with its value.
    pub fn entries(&self) -> impl Iterator<Item = (CorrKey, T)> + '_ {
        self.files.iter().enumerate().flat_map(move |(p, s)| {
            let it: Box<dyn Iterator<Item = (u32, T)> + '_> = match s {
                Store::Dense { base, vals } => {
                    Box::new(vals.iter().enumerate().map(move |(i, &v)| (*base + i as u32, v)))
                }
                Store::Sparse(m) => Box::new(m.iter().map(|(&c, &v)| (c, v))),
            };
            it.filter(move |(_, v)| *v != self.empty).map(move |(c, v)| (key(p, c), v))
        })
    }
}

/// The key of correlation id `c` of file number `p`.
#[inline]
fn key(p: usize, c: u32) -> CorrKey {
    CorrKey::new(ProcId(p as u16), c)
}

impl<T: Copy + PartialEq + Default> Default for CorrMap<T> {
    fn default() -> Self {
        CorrMap::new(T::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_files_answer_alike() {
        let keep_first = |slot: &mut u32, v: u32| {
            if *slot == u32::MAX {
                *slot = v
            }
        };
        for workers in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(workers).build().unwrap();
            let m = pool.install(|| {
                let mut m = CorrMap::new(u32::MAX);
                // File 0: dense ids 10..20, with a repeated id merged by keeping the first value, and a row
                // that gives no entry.
                let dense: Vec<(u32, u32)> = (10..20).map(|c| (c, c * 2)).chain([(15, 999), (0, 0)]).collect();
                m.build_file_par(ProcId(0), dense.len(), |i| (dense[i].0 != 0).then_some(dense[i]), keep_first);
                // File 2: two ids a billion apart (a hash map), the later of a repeated id kept.
                let sparse = [(5u32, 1u32), (1_000_000_005, 2), (5, 3)];
                m.build_file_par(ProcId(2), sparse.len(), |i| Some(sparse[i]), |slot, v| *slot = v);
                m
            });
            let get = |p: u16, c: u32| m.get(key(p as usize, c));
            assert_eq!((get(0, 15), get(0, 9), get(0, 20), get(0, 10)), (Some(30), None, None, Some(20)));
            assert_eq!((get(1, 15), get(2, 5), get(2, 1_000_000_005), get(2, 6)), (None, Some(3), Some(2), None));
            assert!(matches!(m.files[0], Store::Dense { base: 10, .. }));
            assert!(matches!(m.files[2], Store::Sparse(_)));
            let mut all: Vec<(CorrKey, u32)> = m.entries().collect();
            all.sort();
            assert_eq!(all.len(), 12);
            assert_eq!(all[11], (key(2, 1_000_000_005), 2));
            assert_eq!(m.count_where(|k, _| k.proc == ProcId(0) && k.correlation % 2 == 0), 5);
        }
    }

    #[test]
    fn every_worker_count_keeps_the_same_rows() {
        // 100,000 rows over 20,000 ids: each id's slot keeps its last row, whichever worker owns the slot.
        let rows: Vec<(u32, u32)> = (0..100_000u32).map(|i| (1000 + (i * 7919) % 20_000, i)).collect();
        let build = |workers: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(workers).build().unwrap();
            pool.install(|| {
                let mut m = CorrMap::new(u32::MAX);
                m.build_file_par(ProcId(0), rows.len(), |i| Some(rows[i]), |slot, v| *slot = v);
                m
            })
        };
        let one = build(1);
        for workers in [2, 5, 16] {
            let m = build(workers);
            assert!((1000..21_000).all(|c| m.get(key(0, c)) == one.get(key(0, c))), "{workers} workers");
        }
        // The last row of id 1000 + k is the largest i with i * 7919 = k (mod 20,000).
        let last = |k: u32| (0..100_000u32).rev().find(|i| (i * 7919) % 20_000 == k);
        assert_eq!(one.get(key(0, 1000)), last(0));
        assert_eq!(one.get(key(0, 1777)), last(777));
    }
}
