//! Distributions of launch latencies and launch-call costs: exact order statistics over every value (no
//! histogram buckets), and the outliers beyond both the p99 and ten times the median. Over a stream
//! ([`DistFold`]) they stay exact up to [`EXACT_DIST_VALUES`] values and come from a DDSketch beyond.

use serde::Serialize;
use sketches_ddsketch::{Config, DDSketch};

use crate::stats::SKETCH_RELATIVE_ERROR;

/// Values a streamed distribution keeps for exact order statistics (8 MiB): a million launches of one class, or
/// of one of the commonest kernel names, before its median and percentiles become the sketch's estimates.
pub const EXACT_DIST_VALUES: usize = 1 << 20;

/// Bins of a sketch at 0.5% relative error: 4096 cover 1 ns to years without collapsing any (32 KiB).
const SKETCH_BINS: u32 = 4096;

/// Exact order statistics of a set of durations (ns), by the nearest-rank rule: the p-th percentile of n sorted
/// values is the value at rank ⌈p·n/100⌉ (1-based), so every figure is one of the values; the median is p50 (the
/// lower middle value when n is even).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Dist {
    pub count: u64,
    pub total_ns: u64,
    pub median_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// The median, p90 and p99 are a sketch's estimates, within 0.5% of a value at their rank (a streamed
    /// distribution of more than [`EXACT_DIST_VALUES`] values); count, total and max stay exact.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

/// The value at nearest rank ⌈p·n/100⌉ of `sorted` (ascending, non-empty).
fn nearest_rank(sorted: &[u64], p: u64) -> u64 {
    let n = sorted.len() as u64;
    let rank = (p * n).div_ceil(100).max(1);
    sorted[(rank - 1) as usize]
}

impl Dist {
    /// The statistics of `sorted` (ascending); all zero when empty.
    pub fn of_sorted(sorted: &[u64]) -> Dist {
        if sorted.is_empty() {
            return Dist::default();
        }
        Dist {
            count: sorted.len() as u64,
            total_ns: sorted.iter().fold(0u64, |a, &v| a.saturating_add(v)),
            median_ns: nearest_rank(sorted, 50),
            p90_ns: nearest_rank(sorted, 90),
            p99_ns: nearest_rank(sorted, 99),
            max_ns: sorted[sorted.len() - 1],
            estimated: false,
        }
    }

    /// The statistics of `values`, sorting them in place.
    pub fn of(values: &mut [u64]) -> Dist {
        values.sort_unstable();
        Dist::of_sorted(values)
    }

    /// The outlier threshold: a value is an outlier when it exceeds both the p99 and ten times the median, so a
    /// tight distribution (p99 close to the median) has none, and at most 1% of values ever are.
    pub fn outlier_threshold_ns(&self) -> u64 {
        self.p99_ns.max(self.median_ns.saturating_mul(10))
    }
}

/// A distribution built one value at a time: the values kept while at most a cap of them (then [`Dist::of`], the
/// same figures as a load), else a DDSketch of them all with count, total and max kept exact.
#[derive(Clone)]
pub(crate) struct DistFold {
    cap: usize,
    count: u64,
    total: u64,
    max: u64,
    values: Vec<u64>,
    sketch: Option<Box<DDSketch>>,
}

impl Default for DistFold {
    fn default() -> Self {
        DistFold::with_cap(EXACT_DIST_VALUES)
    }
}

impl DistFold {
    /// Keeps up to `cap` values exact.
    pub fn with_cap(cap: usize) -> DistFold {
        DistFold { cap, count: 0, total: 0, max: 0, values: Vec::new(), sketch: None }
    }

    /// Adds one value.
    pub fn add(&mut self, v: u64) {
        self.count += 1;
        self.total = self.total.saturating_add(v);
        self.max = self.max.max(v);
        match &mut self.sketch {
            Some(s) => s.add(v as f64),
            None if self.values.len() < self.cap => self.values.push(v),
            None => {
                let mut s = Box::new(DDSketch::new(Config::new(SKETCH_RELATIVE_ERROR, SKETCH_BINS, 1.0)));
                for &kept in &self.values {
                    s.add(kept as f64);
                }
                s.add(v as f64);
                self.values = Vec::new();
                self.sketch = Some(s);
            }
        }
    }

    /// The statistics of every value added.
    pub fn finish(mut self) -> Dist {
        let Some(sketch) = self.sketch else {
            return Dist::of(&mut self.values);
        };
        let at = |q: f64| sketch.quantile(q).ok().flatten().map_or(0, |v| v.round() as u64).min(self.max);
        Dist {
            count: self.count,
            total_ns: self.total,
            median_ns: at(0.5),
            p90_ns: at(0.9),
            p99_ns: at(0.99),
            max_ns: self.max,
            estimated: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_statistics() {
        let d = Dist::of(&mut [30, 10, 20]);
        assert_eq!((d.count, d.total_ns, d.median_ns, d.p90_ns, d.p99_ns, d.max_ns), (3, 60, 20, 30, 30, 30));
        let mut hundred: Vec<u64> = (1..=100).rev().collect();
        let d = Dist::of(&mut hundred);
        assert_eq!((d.median_ns, d.p90_ns, d.p99_ns, d.max_ns), (50, 90, 99, 100));
        assert_eq!(d.outlier_threshold_ns(), 500);
        assert_eq!(Dist::of(&mut [7, 8]).median_ns, 7, "the lower middle value");
        assert_eq!(Dist::of(&mut []), Dist::default());
    }

    #[test]
    fn past_the_cap_the_percentiles_are_the_sketch_estimates() {
        // 1..=10_000 ns: nearest ranks 5000, 9000, 9900; under the cap the fold is the exact Dist.
        let (mut small, mut big) = (DistFold::with_cap(10_000), DistFold::with_cap(100));
        for v in (1..=10_000u64).rev() {
            small.add(v);
            big.add(v);
        }
        let mut all: Vec<u64> = (1..=10_000).collect();
        assert_eq!(small.finish(), Dist::of(&mut all));
        let d = big.finish();
        assert!(d.estimated);
        assert_eq!((d.count, d.total_ns, d.max_ns), (10_000, 50_005_000, 10_000));
        for (got, exact) in [(d.median_ns, 5000.0), (d.p90_ns, 9000.0), (d.p99_ns, 9900.0)] {
            assert!((got as f64 - exact).abs() <= exact * SKETCH_RELATIVE_ERROR + 1.0, "{got} vs {exact}");
        }
        assert_eq!(serde_json::to_value(d).unwrap()["estimated"], true);
        assert!(serde_json::to_value(Dist::default()).unwrap().get("estimated").is_none());
    }
}
