//! What one run says about each row of a diff: per kernel name and per NVTX range name, how many instances ran and
//! the sum and sum of squares of their durations (enough for a mean and a variance); and the run's total GPU time
//! and wall span. The sums are integers, exact whatever order the instances come in, so that a run loaded whole
//! ([`run_of`]) and one streamed ([`super::stream`]) give the same figures to the last bit.

use std::collections::BTreeMap;

use cutr_model::rows::{Memcpy, Memset};
use cutr_model::{NameId, Trace};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::families::RangeRows;

/// Instances of one row in one run: count, sum and sum of squares of their durations (ns), and the GPU operations
/// they hold (1 per kernel; the kernels, copies and memsets launched inside an NVTX range).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    pub n: u64,
    pub sum: f64,
    pub sum_sq: f64,
    pub ops: u64,
}

impl Moments {
    pub fn mean(&self) -> f64 {
        if self.n == 0 { 0.0 } else { self.sum / self.n as f64 }
    }

    /// Sample variance of the instances (0 with fewer than two).
    pub fn variance(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let n = self.n as f64;
        ((self.sum_sq - self.sum * self.sum / n) / (n - 1.0)).max(0.0)
    }

    /// GPU operations per instance.
    pub fn ops_per_instance(&self) -> f64 {
        if self.n == 0 { 0.0 } else { self.ops as f64 / self.n as f64 }
    }
}

/// [`Moments`] summed exactly: a duration's square fits in 128 bits, and a run would need 2^64 instances of
/// 2^32 s to overflow the sum of squares (it saturates then).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sums {
    pub n: u64,
    pub sum: u128,
    pub sum_sq: u128,
    pub ops: u64,
}

impl Sums {
    pub fn add(&mut self, ns: u64, ops: u64) {
        let x = ns as u128;
        self.n += 1;
        self.sum = self.sum.saturating_add(x);
        self.sum_sq = self.sum_sq.saturating_add(x * x);
        self.ops = self.ops.saturating_add(ops);
    }

    pub fn merge(&mut self, o: &Sums) {
        self.n += o.n;
        self.sum = self.sum.saturating_add(o.sum);
        self.sum_sq = self.sum_sq.saturating_add(o.sum_sq);
        self.ops = self.ops.saturating_add(o.ops);
    }

    pub fn moments(&self) -> Moments {
        Moments { n: self.n, sum: self.sum as f64, sum_sq: self.sum_sq as f64, ops: self.ops }
    }
}

/// Per-name moments of one run.
pub type ByName = BTreeMap<String, Moments>;

/// What one run (one recording, or several merged) gives a diff.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub kernels: ByName,
    /// NVTX range names as rows, numbered families folded across every run of the diff
    /// ([`super::families::fold_across`]); empty until then.
    pub ranges: ByName,
    /// Every kernel, copy and memset: their durations summed, and the variance of that sum (the instances' variances
    /// per kernel name, added up: instances of different kernels are independent samples).
    pub gpu: Moments,
    pub gpu_sum_variance: f64,
    /// First to last record (`Trace::span`).
    pub span_ns: u64,
    /// NVTX range instances by name, numbered families still apart.
    pub(crate) range_rows: RangeRows,
}

/// A run's sums as they are gathered, loaded or streamed.
#[derive(Default)]
pub(crate) struct RunSums {
    /// By row name (demangled, template-normalized when asked).
    pub kernels: BTreeMap<String, Sums>,
    /// Copies and memsets by [`copy_key`] / [`memset_key`].
    pub memory: BTreeMap<(u32, u32), Sums>,
    pub ranges: RangeRows,
    pub span_ns: u64,
}

/// Copies and memsets are grouped by kind and size (powers of two): one 20 ms upload among thousands of 2 us
/// copies is not noise around their mean, and pooling them would inflate the variance of the total.
fn size_class(bytes: u64) -> u32 {
    bytes.max(1).ilog2()
}

pub(crate) fn copy_key(c: &Memcpy) -> (u32, u32) {
    (c.copy_kind as u32, size_class(c.bytes))
}

pub(crate) fn memset_key(s: &Memset) -> (u32, u32) {
    (u32::MAX - s.memory_kind as u32, size_class(s.bytes))
}

impl RunSums {
    /// The run's rows; the GPU total sums every row in one order (kernels then copies and memsets, each by key), so
    /// that its variance is the same float however the instances were gathered.
    pub fn into_run(self) -> Run {
        let mut gpu = Sums::default();
        let mut gpu_sum_variance = 0.0;
        for s in self.kernels.values().chain(self.memory.values()) {
            gpu.merge(s);
            gpu_sum_variance += s.n as f64 * s.moments().variance();
        }
        Run {
            kernels: self.kernels.into_iter().map(|(k, s)| (k, s.moments())).collect(),
            ranges: ByName::new(),
            gpu: gpu.moments(),
            gpu_sum_variance,
            span_ns: self.span_ns,
            range_rows: self.ranges,
        }
    }
}

/// Sums per key (a name id, a kind of copy) over rows, in parallel over blocks of rows: a trace has millions of
/// kernels and a few hundred names.
fn by_id<T: Sync, K: Copy + Eq + std::hash::Hash + Send>(
    rows: &[T],
    id_ns_ops: impl Fn(&T) -> Option<(K, u64, u64)> + Sync,
) -> FxHashMap<K, Sums> {
    rows.par_chunks(1 << 16)
        .map(|block| {
            let mut m: FxHashMap<K, Sums> = FxHashMap::default();
            for (id, ns, ops) in block.iter().filter_map(&id_ns_ops) {
                m.entry(id).or_default().add(ns, ops);
            }
            m
        })
        .reduce(FxHashMap::default, |mut a, b| {
            for (id, m) in b {
                a.entry(id).or_default().merge(&m);
            }
            a
        })
}

/// The diff's view of one loaded run. `name` maps a kernel's demangled name to its row (template normalization).
pub fn run_of(t: &Trace, name: &dyn Fn(&str) -> String) -> Run {
    let mut sums = RunSums::default();
    for (id, m) in by_id(&t.kernels, |k| Some((t.display_name_id(k.name), k.duration(), 1))) {
        sums.kernels.entry(name(t.names.get(id))).or_default().merge(&m);
    }
    for (key, m) in by_id(&t.memcpys, |c| Some((copy_key(c), c.duration(), 1))) {
        sums.memory.entry(key).or_default().merge(&m);
    }
    for (key, m) in by_id(&t.memsets, |s| Some((memset_key(s), s.duration(), 1))) {
        sums.memory.entry(key).or_default().merge(&m);
    }
    // NVTX ranges are compared by the GPU time of the work launched inside them: the host time a range spans
    // moves with CPU scheduling from run to run, the GPU work it launched does not.
    let inside = t.gpu_work_by_range();
    let closed: Vec<Option<(NameId, u64, u64)>> =
        t.ranges.par_iter().zip(&inside).map(|(r, &(ns, ops))| r.closed().then_some((r.name, ns, ops))).collect();
    for (id, m) in by_id(&closed, |&c| c) {
        sums.ranges.add_sums(t.names.get(id), &m);
    }
    let (a, b) = t.span();
    sums.span_ns = b - a;
    sums.into_run()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_give_the_sample_mean_and_variance() {
        let mut s = Sums::default();
        for x in [10, 20, 30, 40] {
            s.add(x, 2);
        }
        let m = s.moments();
        assert_eq!((m.n, m.mean(), m.ops_per_instance()), (4, 25.0, 2.0));
        assert!((m.variance() - 500.0 / 3.0).abs() < 1e-9);
        assert_eq!(Moments::default().variance(), 0.0);
        // A duration of 2^64-1 ns squared is exact in 128 bits.
        let mut big = Sums::default();
        big.add(u64::MAX, 1);
        assert_eq!(big.sum_sq, (u64::MAX as u128) * (u64::MAX as u128));
    }
}
