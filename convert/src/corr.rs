//! Values keyed by (input file, correlation id): the launching API call of GPU work, the external (PyTorch op)
//! ids of a launch, how many GPU records one call launched.
//!
//! CUPTI hands out correlation ids in increasing order from a small start, so within one file they are dense. A
//! flat array over a file's id range is then several times smaller than a hash map of the same entries and is
//! read without hashing or cache-missing probes: on a 10M-record trace the joins touch tens of MB instead of
//! hundreds. A file whose ids are sparse (range much wider than the count) keeps a hash map instead.

use rustc_hash::FxHashMap;

/// A file's ids are stored densely when their range is at most this many times their count (plus slack).
const DENSE_RANGE_PER_ENTRY: u64 = 4;
const DENSE_SLACK: u64 = 4096;

#[derive(Clone, Debug)]
enum Store<T> {
    Dense { base: u32, vals: Vec<T> },
    Sparse(FxHashMap<u32, T>),
}

/// A map (file, correlation id) -> `T`, where one value of `T` (`empty`) means "no entry".
#[derive(Clone, Debug)]
pub struct CorrMap<T> {
    files: Vec<Store<T>>,
    empty: T,
}

impl<T: Copy + PartialEq> CorrMap<T> {
    pub fn new(empty: T) -> CorrMap<T> {
        CorrMap { files: Vec::new(), empty }
    }

    /// Builds file `proc`'s table from `(correlation id, value)` entries; `merge(slot, value)` stores a value into
    /// a slot that may already hold one (`empty` when not).
    pub fn build_file<I>(&mut self, proc: u16, entries: I, merge: impl Fn(&mut T, T))
    where
        I: Iterator<Item = (u32, T)> + Clone,
    {
        let (mut lo, mut hi, mut n) = (u32::MAX, 0u32, 0u64);
        for (c, _) in entries.clone() {
            lo = lo.min(c);
            hi = hi.max(c);
            n += 1;
        }
        let store = if n == 0 {
            Store::Dense { base: 0, vals: Vec::new() }
        } else if ((hi - lo) as u64) < n * DENSE_RANGE_PER_ENTRY + DENSE_SLACK {
            let mut vals = vec![self.empty; (hi - lo) as usize + 1];
            for (c, v) in entries {
                merge(&mut vals[(c - lo) as usize], v);
            }
            Store::Dense { base: lo, vals }
        } else {
            let mut m: FxHashMap<u32, T> = FxHashMap::default();
            for (c, v) in entries {
                merge(m.entry(c).or_insert(self.empty), v);
            }
            Store::Sparse(m)
        };
        let p = proc as usize;
        if self.files.len() <= p {
            self.files.resize_with(p + 1, || Store::Dense { base: 0, vals: Vec::new() });
        }
        self.files[p] = store;
    }

    /// The value of (proc, correlation id), `None` when absent.
    #[inline]
    pub fn get(&self, proc: u16, corr: u32) -> Option<T> {
        let v = match self.files.get(proc as usize)? {
            Store::Dense { base, vals } => *vals.get(corr.wrapping_sub(*base) as usize)?,
            Store::Sparse(m) => *m.get(&corr)?,
        };
        (v != self.empty).then_some(v)
    }

    #[inline]
    pub fn contains(&self, proc: u16, corr: u32) -> bool {
        self.get(proc, corr).is_some()
    }

    /// Every (proc, correlation id, value) present.
    pub fn entries(&self) -> impl Iterator<Item = (u16, u32, T)> + '_ {
        self.files.iter().enumerate().flat_map(move |(p, s)| {
            let it: Box<dyn Iterator<Item = (u32, T)> + '_> = match s {
                Store::Dense { base, vals } => {
                    Box::new(vals.iter().enumerate().map(move |(i, &v)| (*base + i as u32, v)))
                }
                Store::Sparse(m) => Box::new(m.iter().map(|(&c, &v)| (c, v))),
            };
            it.filter(move |(_, v)| *v != self.empty).map(move |(c, v)| (p as u16, c, v))
        })
    }
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
        let mut m = CorrMap::new(u32::MAX);
        // File 0: dense ids 10..20, with a repeated id merged by keeping the first value.
        let dense: Vec<(u32, u32)> = (10..20).map(|c| (c, c * 2)).chain([(15, 999)]).collect();
        m.build_file(0, dense.iter().copied(), |slot, v| {
            if *slot == u32::MAX {
                *slot = v
            }
        });
        // File 2: two ids a billion apart (a hash map).
        m.build_file(2, [(5u32, 1u32), (1_000_000_005, 2)].into_iter(), |slot, v| *slot = v);
        assert_eq!((m.get(0, 15), m.get(0, 9), m.get(0, 20), m.get(0, 10)), (Some(30), None, None, Some(20)));
        assert_eq!((m.get(1, 15), m.get(2, 5), m.get(2, 1_000_000_005), m.get(2, 6)), (None, Some(1), Some(2), None));
        assert!(matches!(m.files[0], Store::Dense { base: 10, .. }));
        assert!(matches!(m.files[2], Store::Sparse(_)));
        let mut all: Vec<(u16, u32, u32)> = m.entries().collect();
        all.sort();
        assert_eq!(all.len(), 12);
        assert_eq!(all[11], (2, 1_000_000_005, 2));
    }
}
