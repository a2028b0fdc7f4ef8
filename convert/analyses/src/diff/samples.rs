//! What one run says about each row of a diff: per kernel name and per NVTX range name, how many instances ran and
//! the sum and sum of squares of their durations (enough for a mean and a variance), summed over blocks of rows in
//! parallel; and the run's total GPU time and wall span.

use std::collections::BTreeMap;

use cutr_model::{NameId, Trace};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

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
    fn add(&mut self, ns: u64, ops: u64) {
        let x = ns as f64;
        self.n += 1;
        self.sum += x;
        self.sum_sq += x * x;
        self.ops += ops;
    }

    fn merge(&mut self, o: &Moments) {
        self.n += o.n;
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
        self.ops += o.ops;
    }

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

/// Per-name moments of one run.
pub type ByName = BTreeMap<String, Moments>;

/// What one run (one recording, or several merged) gives a diff.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub kernels: ByName,
    pub ranges: ByName,
    /// Every kernel, copy and memset: their durations summed, and the variance of that sum (the instances' variances
    /// per kernel name, added up: instances of different kernels are independent samples).
    pub gpu: Moments,
    pub gpu_sum_variance: f64,
    /// First to last record (`Trace::span`).
    pub span_ns: u64,
}

/// Moments per key (a name id, a kind of copy) over rows, summed over blocks of rows in parallel: a trace has
/// millions of kernels and a few hundred names.
fn by_id<T: Sync, K: Copy + Eq + std::hash::Hash + Send>(
    rows: &[T],
    id_ns_ops: impl Fn(&T) -> Option<(K, u64, u64)> + Sync,
) -> FxHashMap<K, Moments> {
    rows.par_chunks(1 << 16)
        .map(|block| {
            let mut m: FxHashMap<K, Moments> = FxHashMap::default();
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

/// The diff's view of one run. `name` maps a kernel's demangled name to its row (template normalization).
pub fn run_of(t: &Trace, name: &dyn Fn(&str) -> String) -> Run {
    let mut kernels = ByName::new();
    for (id, m) in by_id(&t.kernels, |k| Some((t.display_name_id(k.name), k.duration(), 1))) {
        kernels.entry(name(t.names.get(id))).or_default().merge(&m);
    }
    let mut gpu = Moments::default();
    let mut gpu_sum_variance = 0.0;
    for m in kernels.values() {
        gpu.merge(m);
        gpu_sum_variance += m.n as f64 * m.variance();
    }
    // Copies and memsets are grouped by kind and size (powers of two): one 20 ms upload among thousands of 2 us
    // copies is not noise around their mean, and pooling them would inflate the variance of the total.
    let size_class = |bytes: u64| bytes.max(1).ilog2();
    let copies = by_id(&t.memcpys, |c| Some(((c.copy_kind as u32, size_class(c.bytes)), c.duration(), 1)));
    let sets = by_id(&t.memsets, |s| Some(((u32::MAX - s.memory_kind as u32, size_class(s.bytes)), s.duration(), 1)));
    for rows in [copies, sets] {
        for m in rows.values() {
            gpu.merge(m);
            gpu_sum_variance += m.n as f64 * m.variance();
        }
    }
    // NVTX ranges are compared by the GPU time of the work launched inside them: the host time a range spans
    // moves with CPU scheduling from run to run, the GPU work it launched does not.
    let inside = t.gpu_work_by_range();
    let closed: Vec<Option<(NameId, u64, u64)>> =
        t.ranges.par_iter().zip(&inside).map(|(r, &(ns, ops))| r.closed().then_some((r.name, ns, ops))).collect();
    let mut ranges = ByName::new();
    for (id, m) in by_id(&closed, |&c| c) {
        ranges.entry(t.names.get(id).to_string()).or_default().merge(&m);
    }
    let (a, b) = t.span();
    Run { kernels, ranges, gpu, gpu_sum_variance, span_ns: b - a }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_give_the_sample_mean_and_variance() {
        let mut m = Moments::default();
        for x in [10, 20, 30, 40] {
            m.add(x, 2);
        }
        assert_eq!((m.n, m.mean(), m.ops_per_instance()), (4, 25.0, 2.0));
        assert!((m.variance() - 500.0 / 3.0).abs() < 1e-9);
        assert_eq!(Moments::default().variance(), 0.0);
    }
}
