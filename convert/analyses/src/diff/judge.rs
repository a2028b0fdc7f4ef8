//! The verdict of one row: is the change real, and does it matter?
//!
//! A change matters when it exceeds the threshold (percent), the absolute floor per run (`min_delta_ns`) and the
//! floor per instance (`instance_floor_ns` times the GPU operations an instance holds). It is real when a 99%
//! confidence interval of the change excludes zero:
//! - with one run per side, the instances of the row in each run are the samples (a kernel launched 20 times is 20
//!   measurements): an interval of the difference of mean instance durations from their variances. One run cannot
//!   show the run-to-run drift (clocks, caches) of short kernels; the floor per instance stands in for it.
//! - with two runs or more on a side, the runs are the samples: Welch's interval on the runs' mean instance
//!   durations, which carries the run-to-run noise itself.
//!
//! Without enough evidence (one instance per side in a single run each) a row beyond the threshold is
//! inconclusive, never a regression.

use super::samples::Moments;
use super::stats::{Z_99, t_995};
use super::{DiffOptions, Verdict};

/// One side of a row: its moments in each run (absent = the name did not occur in that run).
pub(crate) struct Side<'a> {
    pub runs: Vec<Option<&'a Moments>>,
}

impl Side<'_> {
    fn present(&self) -> bool {
        self.runs.iter().any(|m| m.is_some_and(|m| m.n > 0))
    }

    /// Mean over runs of each run's total (ns), runs without the name counting 0.
    pub fn mean_total(&self) -> f64 {
        let n = self.runs.len().max(1) as f64;
        self.runs.iter().map(|m| m.map_or(0.0, |m| m.sum)).sum::<f64>() / n
    }

    /// Mean over runs of each run's instance count.
    pub fn mean_count(&self) -> f64 {
        let n = self.runs.len().max(1) as f64;
        self.runs.iter().map(|m| m.map_or(0, |m| m.n) as f64).sum::<f64>() / n
    }

    /// All instances of all runs pooled.
    fn pooled(&self) -> Moments {
        let mut p = Moments::default();
        for m in self.runs.iter().flatten() {
            p.n += m.n;
            p.sum += m.sum;
            p.sum_sq += m.sum_sq;
            p.ops += m.ops;
        }
        p
    }

    /// The mean instance duration of each run that has the name.
    fn run_means(&self) -> Vec<f64> {
        self.runs.iter().flatten().filter(|m| m.n > 0).map(|m| m.mean()).collect()
    }
}

/// What the evidence says about a change of the mean instance duration (ns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Evidence {
    /// New minus base mean instance duration.
    pub delta: f64,
    /// 99% confidence interval of `delta`; `None` without enough samples.
    pub interval: Option<(f64, f64)>,
    /// How the interval was made.
    pub method: Method,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    /// Instances of one run per side.
    Instances,
    /// Runs as samples (two or more on some side).
    Runs,
    /// Not enough of either.
    None,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn variance(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = mean(v);
    v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64
}

/// The change of the mean instance duration and its interval.
pub(crate) fn evidence(base: &Side, new: &Side) -> Evidence {
    let (bm, nm) = (base.run_means(), new.run_means());
    let (bp, np) = (base.pooled(), new.pooled());
    let delta = np.mean() - bp.mean();
    if bm.len() >= 2 || nm.len() >= 2 {
        // Runs as samples. A side with one run borrows the other side's run-to-run variance.
        let (vb, vn) = (variance(&bm), variance(&nm));
        let (vb, vn) = match (bm.len() >= 2, nm.len() >= 2) {
            (true, true) => (vb, vn),
            (true, false) => (vb, vb),
            _ => (vn, vn),
        };
        let (rb, rn) = (bm.len().max(1) as f64, nm.len().max(1) as f64);
        let (sb, sn) = (vb / rb, vn / rn);
        let se = (sb + sn).sqrt();
        // Welch-Satterthwaite degrees of freedom (the sides' own run counts where one borrowed).
        let df = if se > 0.0 {
            (sb + sn).powi(2) / (sb * sb / (rb - 1.0).max(1.0) + sn * sn / (rn - 1.0).max(1.0))
        } else {
            (rb + rn - 2.0).max(1.0)
        };
        let half = t_995(df) * se;
        let delta = mean(&nm) - mean(&bm);
        return Evidence { delta, interval: Some((delta - half, delta + half)), method: Method::Runs };
    }
    if bp.n >= 2 && np.n >= 2 {
        let se = (bp.variance() / bp.n as f64 + np.variance() / np.n as f64).sqrt();
        let half = Z_99 * se;
        return Evidence { delta, interval: Some((delta - half, delta + half)), method: Method::Instances };
    }
    Evidence { delta, interval: None, method: Method::None }
}

/// A judged row's verdict and the reason, in words.
pub(crate) fn judge(base: &Side, new: &Side, e: &Evidence, opts: &DiffOptions) -> (Verdict, String) {
    match (base.present(), new.present()) {
        (false, true) => return (Verdict::Added, "only in the new runs".into()),
        (true, false) => return (Verdict::Removed, "only in the base runs".into()),
        (false, false) => return (Verdict::Neutral, "in neither".into()),
        _ => {}
    }
    let bp = base.pooled();
    let base_mean = bp.mean();
    let pct = if base_mean > 0.0 { 100.0 * e.delta / base_mean } else { 0.0 };
    let total_delta = new.mean_total() - base.mean_total();
    let floor = opts.instance_floor_ns * bp.ops_per_instance().max(1.0);
    if pct.abs() <= opts.threshold_pct {
        return (Verdict::Neutral, format!("{pct:+.1}% is within the {}% threshold", opts.threshold_pct));
    }
    if total_delta.abs() < opts.min_delta_ns as f64 && e.delta.abs() * new.mean_count() < opts.min_delta_ns as f64 {
        return (Verdict::Neutral, format!("below the {} ns floor per run", opts.min_delta_ns));
    }
    if e.delta.abs() < floor {
        return (
            Verdict::Neutral,
            format!(
                "{:+.0} ns per instance is below the {floor:.0} ns floor ({:.0} per GPU op)",
                e.delta, opts.instance_floor_ns
            ),
        );
    }
    let Some((lo, hi)) = e.interval else {
        return (
            Verdict::Inconclusive,
            "one instance per side: record 3+ runs per side (--base/--new) to judge it".into(),
        );
    };
    let interval = format!("99% interval {:+.1}%..{:+.1}%", 100.0 * lo / base_mean, 100.0 * hi / base_mean);
    let how = match e.method {
        Method::Runs => "runs",
        _ => "instances",
    };
    if lo > 0.0 {
        (Verdict::Regression, format!("{pct:+.1}%, {interval} ({how})"))
    } else if hi < 0.0 {
        (Verdict::Improvement, format!("{pct:+.1}%, {interval} ({how})"))
    } else {
        (
            Verdict::Inconclusive,
            format!("{pct:+.1}% but {interval} ({how}) includes no change: more runs would settle it"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(xs: &[u64]) -> Moments {
        let mut m = Moments::default();
        for &x in xs {
            m.n += 1;
            m.sum += x as f64;
            m.sum_sq += (x * x) as f64;
            m.ops += 1;
        }
        m
    }

    fn verdict(base: &[&[u64]], new: &[&[u64]]) -> Verdict {
        let (b, n): (Vec<Moments>, Vec<Moments>) =
            (base.iter().map(|x| moments(x)).collect(), new.iter().map(|x| moments(x)).collect());
        fn side(v: &[Moments]) -> Side<'_> {
            Side { runs: v.iter().map(Some).collect() }
        }
        let (b, n) = (side(&b), side(&n));
        judge(&b, &n, &evidence(&b, &n), &DiffOptions::default()).0
    }

    #[test]
    fn verdicts_follow_the_evidence() {
        // 20 instances of a 200 us kernel, +10% with 1% jitter: a regression from one run per side.
        let base: Vec<u64> = (0..20).map(|i| 200_000 + (i % 5) * 500).collect();
        let slow: Vec<u64> = base.iter().map(|x| x * 11 / 10).collect();
        assert_eq!(verdict(&[&base], &[&slow]), Verdict::Regression);
        assert_eq!(verdict(&[&slow], &[&base]), Verdict::Improvement);
        // +4%: within the 5% threshold.
        let slightly: Vec<u64> = base.iter().map(|x| x * 104 / 100).collect();
        assert_eq!(verdict(&[&base], &[&slightly]), Verdict::Neutral);
        // One instance per side: beyond the threshold, but no evidence.
        assert_eq!(verdict(&[&[200_000]], &[&[240_000]]), Verdict::Inconclusive);
        // 1 us kernels 10% slower: 100 ns per instance is below the per-instance floor.
        let tiny: Vec<u64> = (0..1000).map(|i| 1_000 + i % 3).collect();
        let tiny_slow: Vec<u64> = tiny.iter().map(|x| x * 11 / 10).collect();
        assert_eq!(verdict(&[&tiny], &[&tiny_slow]), Verdict::Neutral);
        // Runs as samples: 3 runs a side, runs scattered 10% apart, means 12% apart: the interval includes 0.
        let run = |m: u64| -> Vec<u64> { vec![m; 20] };
        let (b1, b2, b3) = (run(200_000), run(220_000), run(180_000));
        let (n1, n2, n3) = (run(224_000), run(246_000), run(202_000));
        assert_eq!(verdict(&[&b1, &b2, &b3], &[&n1, &n2, &n3]), Verdict::Inconclusive);
        // ... and runs 0.5% apart with means 10% apart: a regression.
        let (b1, b2, b3) = (run(200_000), run(201_000), run(199_000));
        let (n1, n2, n3) = (run(220_000), run(221_000), run(219_000));
        assert_eq!(verdict(&[&b1, &b2, &b3], &[&n1, &n2, &n3]), Verdict::Regression);
        // Found on one side only.
        assert_eq!(verdict(&[&[]], &[&base]), Verdict::Added);
    }
}
