//! Whether a row's change of share is beyond sampling noise: a two-proportion z test per row, Holm's step-down
//! correction over every row of a report, and the smallest change a row's counts could show.
//!
//! PC samples of a kernel are multinomial counts over its PCs (and over stall reasons within a PC): a row's share
//! (its samples over the kernel's) on each side is a proportion, and the two sides are independent recordings. The
//! pooled two-proportion z test is the textbook test of "same proportion"; with millions of samples its normal
//! approximation is exact to many digits, and with few its verdict is rarely "beyond noise" anyway (the smallest
//! detectable change says so first). Holm controls the chance that *any* row of the report is called beyond noise
//! when only sampling differs (family-wise error) at 1 - confidence, and is never weaker than Bonferroni.

use statrs::distribution::{ContinuousCDF, Normal};

/// The samples of one row on each side and of its kernel on each side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub base: u64,
    pub base_total: u64,
    pub new: u64,
    pub new_total: u64,
}

/// `n` of `total`, as a fraction (0 for an empty total).
fn fraction(n: u64, total: u64) -> f64 {
    if total > 0 { n as f64 / total as f64 } else { 0.0 }
}

impl Counts {
    pub fn base_share(&self) -> f64 {
        fraction(self.base, self.base_total)
    }

    pub fn new_share(&self) -> f64 {
        fraction(self.new, self.new_total)
    }

    /// The pooled share's variance factor `1/n_base + 1/n_new`; `None` when a side has no samples.
    fn sizes(&self) -> Option<f64> {
        (self.base_total > 0 && self.new_total > 0).then(|| 1.0 / self.base_total as f64 + 1.0 / self.new_total as f64)
    }

    /// Two-sided p-value of the pooled two-proportion z test of "the row's share is the same on both sides".
    pub fn p_value(&self) -> f64 {
        let Some(sizes) = self.sizes() else { return 1.0 };
        let pooled = fraction(self.base.saturating_add(self.new), self.base_total.saturating_add(self.new_total));
        let variance = pooled * (1.0 - pooled) * sizes;
        // All or none of both sides' samples: the shares are equal (0 or 1), no evidence of a change.
        if variance <= 0.0 || !variance.is_finite() {
            return 1.0;
        }
        let z = (self.new_share() - self.base_share()).abs() / variance.sqrt();
        (2.0 * standard_normal().sf(z)).min(1.0)
    }

    /// The smallest change of share (a fraction) a test at `z_critical` could find in these counts, for a change
    /// of size `of` (a fraction): the standard error is taken at the pooled share moved at least `of / 2` from 0
    /// and 1 (a change of `of` puts one side's share at least that far in), where it is largest. `INFINITY` when a
    /// side has no samples.
    pub fn detectable_change(&self, z_critical: f64, of: f64) -> f64 {
        let Some(sizes) = self.sizes() else { return f64::INFINITY };
        // A threshold that is not a number asks for no change's size: the widest standard error answers it.
        let half = if of.is_finite() { (of / 2.0).clamp(0.0, 0.5) } else { 0.5 };
        let pooled = fraction(self.base.saturating_add(self.new), self.base_total.saturating_add(self.new_total));
        let p = pooled.clamp(half, 1.0 - half);
        z_critical * (p * (1.0 - p) * sizes).sqrt()
    }
}

fn standard_normal() -> Normal {
    Normal::standard()
}

/// The z a single test must pass for a two-sided level `alpha` shared by `tests` tests (Bonferroni's, the first
/// and strictest step of Holm's): what "too few samples" is judged against.
pub fn z_critical(alpha: f64, tests: usize) -> f64 {
    let per_test = alpha / tests.max(1) as f64 / 2.0;
    standard_normal().inverse_cdf(1.0 - per_test)
}

/// Holm's step-down adjusted p-values, in the order given: the i-th smallest p times (m - i), made monotone, at
/// most 1. A row is beyond noise at level alpha when its adjusted p-value is below alpha.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]).then(a.cmp(&b)));
    let mut adjusted = vec![1.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        let scaled = ((m - rank) as f64 * p[i]).min(1.0);
        running = running.max(scaled);
        adjusted[i] = running;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_test_matches_the_textbook_example() {
        // 45 of 100 against 60 of 120: pooled 0.4773, SE 0.06763, z 0.7393, two-sided p 0.459717.
        let c = Counts { base: 45, base_total: 100, new: 60, new_total: 120 };
        assert!((c.p_value() - 0.459_717).abs() < 1e-6, "{}", c.p_value());
        // 10 of 1,000 against 30 of 1,000: z 3.1944, p 0.0014013.
        let c = Counts { base: 10, base_total: 1000, new: 30, new_total: 1000 };
        assert!((c.p_value() - 0.001_401_3).abs() < 1e-7, "{}", c.p_value());
    }

    #[test]
    fn degenerate_counts_are_no_evidence() {
        assert_eq!(Counts { base: 0, base_total: 0, new: 5, new_total: 5 }.p_value(), 1.0);
        assert_eq!(Counts { base: 7, base_total: 7, new: 5, new_total: 5 }.p_value(), 1.0);
        assert_eq!(Counts { base: 0, base_total: 7, new: 0, new_total: 5 }.p_value(), 1.0);
        assert_eq!(Counts { base: 0, base_total: 0, new: 0, new_total: 5 }.detectable_change(3.0, 0.01), f64::INFINITY);
        // No panic on a threshold that is not a number (`clamp` would): the standard error at share 0.5.
        let c = Counts { base: 0, base_total: 100, new: 0, new_total: 100 };
        assert!((c.detectable_change(1.0, f64::NAN) - (0.25f64 * 0.02).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn detectable_change_grows_as_samples_shrink() {
        let z = z_critical(0.01, 1);
        assert!((z - 2.5758).abs() < 1e-4);
        // 100 samples a side cannot show a 1 pp change (the smallest they could: 2.57 pp, at the share 0 pulled in
        // to 0.005); 10M a side can (0.0081 pp).
        let few = Counts { base: 0, base_total: 100, new: 0, new_total: 100 };
        assert!((few.detectable_change(z, 0.01) - 0.025_7).abs() < 1e-4, "{}", few.detectable_change(z, 0.01));
        let many = Counts { base: 0, base_total: 10_000_000, new: 0, new_total: 10_000_000 };
        assert!((many.detectable_change(z, 0.01) - 8.125e-5).abs() < 1e-8, "{}", many.detectable_change(z, 0.01));
    }

    #[test]
    fn holm_adjusts_step_down() {
        // R's p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02.
        let a = holm(&[0.01, 0.04, 0.03, 0.005]);
        let want = [0.03, 0.06, 0.06, 0.02];
        for (x, y) in a.iter().zip(want) {
            assert!((x - y).abs() < 1e-12, "{a:?}");
        }
        assert!(holm(&[]).is_empty());
    }
}
