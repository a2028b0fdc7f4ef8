//! Durations summarized one value at a time, for `stats` over a stream: count, sum, min, max and mean exact;
//! the median exact while a row has at most a cap of values (they are kept, then summarized as the whole-trace
//! path does, so the figures are the same), and from a DDSketch beyond, within a stated relative error.

use sketches_ddsketch::{Config, DDSketch};

use super::{Summary, summarize};

/// The relative error of a median from the sketch: within 0.5% of a middle value of the row's durations.
pub const SKETCH_RELATIVE_ERROR: f64 = 0.005;

/// Values a row keeps for an exact median before it switches to the sketch (64k: 512 KiB a row at most).
pub const EXACT_VALUES_CAP: usize = 1 << 16;

/// Bins of a sketch: at alpha 0.5%, 4096 bins cover a ratio of 1e17 between the shortest and longest duration
/// (1 ns to years) without collapsing any, 32 KiB a row.
const SKETCH_BINS: u32 = 4096;

fn sketch_config() -> Config {
    Config::new(SKETCH_RELATIVE_ERROR, SKETCH_BINS, 1.0)
}

/// One row's durations (ns), summarized as they come.
#[derive(Clone)]
pub struct Durations {
    cap: usize,
    count: u64,
    total: u64,
    min: u64,
    max: u64,
    /// Welford's running mean and sum of squared deviations: the standard deviation without the values.
    mean: f64,
    m2: f64,
    values: Vec<u64>,
    sketch: Option<Box<DDSketch>>,
}

impl Durations {
    /// Keeps up to `cap` values for an exact median.
    pub fn new(cap: usize) -> Durations {
        Durations {
            cap,
            count: 0,
            total: 0,
            min: u64::MAX,
            max: 0,
            mean: 0.0,
            m2: 0.0,
            values: Vec::new(),
            sketch: None,
        }
    }

    pub fn add(&mut self, d: u64) {
        self.count += 1;
        self.total = self.total.saturating_add(d);
        self.min = self.min.min(d);
        self.max = self.max.max(d);
        let delta = d as f64 - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (d as f64 - self.mean);
        match &mut self.sketch {
            Some(s) => s.add(d as f64),
            None if self.values.len() < self.cap => self.values.push(d),
            None => {
                let mut s = Box::new(DDSketch::new(sketch_config()));
                for &v in &self.values {
                    s.add(v as f64);
                }
                s.add(d as f64);
                self.values = Vec::new();
                self.sketch = Some(s);
            }
        }
    }

    /// Adds `other`'s durations, as if each had been added here: count, total, min, max exact; the mean and the
    /// spread by Chan's pairwise update; the values kept while both rows' together stay under the cap, else one
    /// sketch (a DDSketch merges bin by bin, the same bins as adding the values one by one).
    pub fn merge(&mut self, other: Durations) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = Durations { cap: self.cap, ..other };
            return;
        }
        let (n, m) = (self.count as f64, other.count as f64);
        let delta = other.mean - self.mean;
        self.mean += delta * m / (n + m);
        self.m2 += other.m2 + delta * delta * n * m / (n + m);
        self.count += other.count;
        self.total = self.total.saturating_add(other.total);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        if self.sketch.is_none() && other.sketch.is_none() && self.values.len() + other.values.len() <= self.cap {
            self.values.extend(other.values);
            return;
        }
        let sketch = self.sketch.get_or_insert_with(|| Box::new(DDSketch::new(sketch_config())));
        for v in std::mem::take(&mut self.values) {
            sketch.add(v as f64);
        }
        match other.sketch {
            // Two sketches of one configuration always merge.
            Some(o) => sketch.merge(&o).expect("sketches of one configuration merge"),
            None => other.values.iter().for_each(|&v| sketch.add(v as f64)),
        }
    }

    /// Whether the median is the sketch's estimate.
    pub fn estimated(&self) -> bool {
        self.sketch.is_some()
    }

    /// The row's summary (its share of the section left at 0, as [`summarize`] leaves it).
    pub fn summary(mut self, name: String) -> Summary {
        let Some(sketch) = self.sketch else {
            return summarize(name, &mut self.values);
        };
        let n = self.count;
        Summary {
            name,
            count: n,
            total_ns: self.total,
            percent: 0.0,
            avg_ns: self.total as f64 / n as f64,
            median_ns: sketch.quantile(0.5).ok().flatten().unwrap_or(0.0),
            median_estimated: true,
            min_ns: self.min,
            max_ns: self.max,
            stddev_ns: if n > 1 { (self.m2 / (n - 1) as f64).sqrt() } else { 0.0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_the_cap_the_summary_is_the_exact_one() {
        let mut d = Durations::new(4);
        for v in [30, 10, 20, 40] {
            d.add(v);
        }
        assert!(!d.estimated());
        assert_eq!(d.summary("k".into()), summarize("k".into(), &mut [30, 10, 20, 40]));
    }

    #[test]
    fn merged_rows_are_the_row_of_all_their_values() {
        // Under the cap: the values joined, the exact summary; past it: the sketch of adding them one by one.
        for cap in [100, 10] {
            let (mut a, mut b, mut all) = (Durations::new(cap), Durations::new(cap), Durations::new(cap));
            for v in 1..=30u64 {
                let d = v * v % 97;
                if v % 3 == 0 {
                    b.add(d)
                } else {
                    a.add(d)
                }
                all.add(d);
            }
            let (b2, all2) = (b.clone(), all.clone());
            a.merge(b);
            assert_eq!(a.estimated(), cap == 10);
            let (merged, whole) = (a.summary("k".into()), all.summary("k".into()));
            let exact = |s: &Summary| (s.count, s.total_ns, s.min_ns, s.max_ns, s.median_ns, s.median_estimated);
            assert_eq!(exact(&merged), exact(&whole), "cap {cap}");
            assert!((merged.avg_ns - whole.avg_ns).abs() < 1e-9 && (merged.stddev_ns - whole.stddev_ns).abs() < 1e-9);
            // Merged into an empty row: that row.
            let mut empty = Durations::new(cap);
            empty.merge(b2.clone());
            assert_eq!(exact(&empty.summary("k".into())), exact(&b2.summary("k".into())));
            let mut sketched = all2;
            sketched.merge(Durations::new(cap));
            assert_eq!(exact(&sketched.summary("k".into())), exact(&whole));
        }
    }

    #[test]
    fn past_the_cap_the_median_is_within_the_sketch_error() {
        // 1..=10_001 ns: the median is 5001; count, total, min, max and mean stay exact.
        let mut d = Durations::new(100);
        for v in 1..=10_001u64 {
            d.add(v);
        }
        assert!(d.estimated());
        let s = d.summary("k".into());
        assert_eq!((s.count, s.total_ns, s.min_ns, s.max_ns, s.avg_ns), (10_001, 50_015_001, 1, 10_001, 5001.0));
        assert!((s.median_ns - 5001.0).abs() <= 5001.0 * SKETCH_RELATIVE_ERROR, "{}", s.median_ns);
        assert!(s.median_estimated);
        // The sample standard deviation of 1..=n is sqrt(n (n + 1) / 12).
        assert!((s.stddev_ns - (10_001.0f64 * 10_002.0 / 12.0).sqrt()).abs() < 1e-6, "{}", s.stddev_ns);
    }
}
