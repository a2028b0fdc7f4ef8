//! Distributions of launch latencies and launch-call costs: exact order statistics over every value (no
//! histogram buckets), and the outliers beyond both the p99 and ten times the median.

use serde::Serialize;

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
            total_ns: sorted.iter().sum(),
            median_ns: nearest_rank(sorted, 50),
            p90_ns: nearest_rank(sorted, 90),
            p99_ns: nearest_rank(sorted, 99),
            max_ns: sorted[sorted.len() - 1],
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
}
