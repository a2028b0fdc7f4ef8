//! The two sides of a counter average: a series as a step function ([`Steps`]) and the executions of one kernel
//! or NVTX range as an index of their time ([`Runs`]). The integral of a series over every execution of a name is
//! found from whichever side is smaller: per execution, a search in the series' samples; or per sample interval
//! inside the executions' hull, the executions' time inside it from the index. So a name run 100,000 times costs
//! little against a series of a few samples, and a series of 25,000 samples little against a name run a few times:
//! the cost of a (name, series) pair is the smaller count, never their product.

/// A series as a step function (a value holds from its sample until the next one) with its running integral.
/// Values are kept divided by about the largest magnitude among them, so that no integral overflows to infinity
/// whatever the readings (1e300 W for a second is still a number); averages are scaled back.
pub(crate) struct Steps {
    ts: Vec<u64>,
    /// Per sample: its scaled value, and the integral of the scaled values from `ts[0]` to its time.
    values: Vec<(f64, f64)>,
    /// What the values were divided by (1 for a series of zeros).
    scale: f64,
    /// The first sample's time, once the samples before the kept ones were dropped ([`Steps::keep_from`]).
    first: Option<u64>,
}

/// A power of two about `largest` (1 for 0 or no number): dividing by it and multiplying back are exact, so
/// averages are bit for bit what unscaled sums give wherever those stay finite.
pub(crate) fn scale_of(largest: f64) -> f64 {
    if largest > 0.0 && largest.is_finite() { 2f64.powi(largest.log2().floor().min(1023.0) as i32) } else { 1.0 }
}

impl Steps {
    /// `points` sorted by time, finite values.
    pub(crate) fn new(points: &[(u64, f64)]) -> Steps {
        let scale = scale_of(points.iter().fold(0f64, |m, p| m.max(p.1.abs())));
        let ts: Vec<u64> = points.iter().map(|p| p.0).collect();
        let mut acc = 0.0;
        let values = points
            .iter()
            .zip(points.iter().skip(1).map(|next| next.0).chain(std::iter::once(0)))
            .map(|(&(t, v), next)| {
                let here = (v / scale, acc);
                acc += here.0 * next.saturating_sub(t) as f64;
                here
            })
            .collect();
        Steps { ts, values, scale, first: None }
    }

    /// A series with no sample yet, its values to be divided by `scale` (a power of two: [`scale_of`]), its
    /// samples added in time order ([`Steps::push`]): the same integrals as [`Steps::new`] of them all.
    pub(crate) fn empty(scale: f64) -> Steps {
        Steps { ts: Vec::new(), values: Vec::new(), scale, first: None }
    }

    /// The next sample (not before the last one): its running integral is summed exactly as [`Steps::new`] sums
    /// it, so the integral up to any time is the same number however the series came.
    pub(crate) fn push(&mut self, t: u64, value: f64) {
        let integral = match (self.ts.last(), self.values.last()) {
            (Some(&last), Some(&(v, acc))) => acc + v * t.saturating_sub(last) as f64,
            _ => 0.0,
        };
        self.ts.push(t);
        self.values.push((value / self.scale, integral));
    }

    /// Samples before `t` dropped but the last of them (which holds at `t`): no integral from `t` on changes.
    pub(crate) fn keep_from(&mut self, t: u64) {
        let drop = self.ts.partition_point(|&x| x <= t).saturating_sub(1);
        if drop > 0 {
            self.first.get_or_insert(self.ts[0]);
            self.ts.drain(..drop);
            self.values.drain(..drop);
        }
    }

    /// The samples held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ts.len()
    }

    /// The last sample's time.
    pub(crate) fn last(&self) -> Option<u64> {
        self.ts.last().copied()
    }

    /// First and last sample: the span the series covers.
    pub(crate) fn span(&self) -> Option<(u64, u64)> {
        Some((self.first.unwrap_or(*self.ts.first()?), *self.ts.last()?))
    }

    /// The scaled integral from the first sample to `x` (inside the sampled span, at or after the first sample
    /// kept).
    pub(crate) fn at(&self, x: u64) -> f64 {
        let i = self.ts.partition_point(|&t| t <= x).saturating_sub(1);
        let (value, integral) = self.values[i];
        integral + value * x.saturating_sub(self.ts[i]) as f64
    }

    /// (scaled integral, covered ns) over [a, b].
    fn over(&self, a: u64, b: u64) -> (f64, u64) {
        let Some((first, last)) = self.span() else { return (0.0, 0) };
        let (a, b) = (a.max(first), b.min(last));
        if b <= a {
            return (0.0, 0);
        }
        (self.at(b) - self.at(a), b - a)
    }

    /// The series' time-weighted average over every execution in `runs`, and the executions' time the samples
    /// cover (`None` when they cover none of it).
    #[cfg(test)]
    pub(crate) fn average_over(&self, runs: &Runs) -> Option<(f64, u64)> {
        let (integral, covered) = self.integral_over(runs);
        self.average(integral, covered)
    }

    /// The average of a scaled `integral` over `covered` ns ([`Steps::integral_over`]'s, or their sums over parts
    /// of the executions): `None` when nothing is covered.
    pub(crate) fn average(&self, integral: f64, covered: u64) -> Option<(f64, u64)> {
        (covered > 0).then(|| (integral / covered as f64 * self.scale, covered))
    }

    /// The scaled integral of the series over every execution in `runs` (overlapping executions each counted), and
    /// the executions' time the samples cover: both sums over executions, so the integral over a set of
    /// executions is the sum of those over any split of it (`stats --stream` sums them window by window).
    pub(crate) fn integral_over(&self, runs: &Runs) -> (f64, u64) {
        let Some((first, last)) = self.span() else { return (0.0, 0) };
        let (a, b) = (first.max(runs.first), last.min(runs.last));
        if b <= a {
            return (0.0, 0);
        }
        let covered = runs.time_between(first, last);
        if covered == 0 {
            return (0.0, 0);
        }
        let samples_inside = self.ts.partition_point(|&t| t < b) - self.ts.partition_point(|&t| t <= a);
        let integral = if runs.intervals.len() <= samples_inside + 1 {
            runs.intervals.iter().map(|&(s, e)| self.over(s, e).0).sum::<f64>()
        } else {
            // Per sample interval [ts[k], ts[k + 1]] that meets the hull: its value times the executions' time in it.
            let from = self.ts.partition_point(|&t| t <= a).saturating_sub(1);
            let to = self.ts.partition_point(|&t| t < b);
            (from..to.min(self.ts.len() - 1))
                .map(|k| self.values[k].0 * runs.time_between(self.ts[k], self.ts[k + 1]) as f64)
                .sum::<f64>()
        };
        (integral, covered)
    }
}

/// The executions of one name: their intervals, and their starts and ends sorted with prefix sums, so that the
/// time they spend inside any interval is found in O(log n).
pub(crate) struct Runs {
    intervals: Vec<(u64, u64)>,
    starts: Vec<u64>,
    ends: Vec<u64>,
    /// `start_sums[i]`: the sum of `starts[..i]` (and the same for ends).
    start_sums: Vec<u128>,
    end_sums: Vec<u128>,
    /// The hull: earliest start, latest end.
    pub(crate) first: u64,
    pub(crate) last: u64,
    /// The executions' whole time (saturating).
    pub(crate) total: u64,
}

impl Runs {
    pub(crate) fn new(mut intervals: Vec<(u64, u64)>) -> Runs {
        for iv in &mut intervals {
            iv.1 = iv.1.max(iv.0);
        }
        let mut starts: Vec<u64> = intervals.iter().map(|iv| iv.0).collect();
        let mut ends: Vec<u64> = intervals.iter().map(|iv| iv.1).collect();
        starts.sort_unstable();
        ends.sort_unstable();
        let sums = |v: &[u64]| -> Vec<u128> {
            let mut acc = 0u128;
            std::iter::once(0)
                .chain(v.iter().map(|&x| {
                    acc += x as u128;
                    acc
                }))
                .collect()
        };
        let total = intervals.iter().fold(0u64, |t, iv| t.saturating_add(iv.1 - iv.0));
        Runs {
            first: starts.first().copied().unwrap_or(0),
            last: ends.last().copied().unwrap_or(0),
            start_sums: sums(&starts),
            end_sums: sums(&ends),
            starts,
            ends,
            intervals,
            total,
        }
    }

    /// The executions' intervals merged where they overlap or touch, in time order.
    pub(crate) fn merged(&self) -> Vec<(u64, u64)> {
        let mut sorted = self.intervals.clone();
        sorted.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
        for (a, b) in sorted {
            match out.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        out
    }

    /// The executions' time up to `t` (summed over executions, overlapping ones each counted).
    fn time_until(&self, t: u64) -> u128 {
        let started = self.starts.partition_point(|&s| s <= t);
        let ended = self.ends.partition_point(|&e| e <= t);
        // Sum over started of (t - start), less sum over ended of (t - end): each execution's part before t.
        (started as u128 * t as u128 - self.start_sums[started]) - (ended as u128 * t as u128 - self.end_sums[ended])
    }

    /// The executions' time inside [a, b].
    pub(crate) fn time_between(&self, a: u64, b: u64) -> u64 {
        if b <= a {
            return 0;
        }
        u64::try_from(self.time_until(b) - self.time_until(a)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_function_is_averaged_over_the_part_the_samples_cover() {
        // 10 from 100 to 200, 30 from 200 to 300, last sample at 300.
        let s = Steps::new(&[(100, 10.0), (200, 30.0), (300, 5.0)]);
        let scaled = |(i, c): (f64, u64)| (i * s.scale, c);
        assert_eq!(scaled(s.over(150, 250)), (10.0 * 50.0 + 30.0 * 50.0, 100));
        assert_eq!(scaled(s.over(0, 1000)), (10.0 * 100.0 + 30.0 * 100.0, 200), "clamped to the sampled span");
        assert_eq!(s.over(400, 500), (0.0, 0));
    }

    #[test]
    fn both_ways_of_summing_give_the_same_average() {
        let s = Steps::new(&[(100, 10.0), (200, 30.0), (300, 5.0), (400, 0.0)]);
        // Few executions (summed per execution): 150-250 and 50-120 (20 ns covered): (500 + 1500 + 200) / 120.
        let few = Runs::new(vec![(150, 250), (50, 120)]);
        assert_eq!(few.time_between(0, 1000), 170);
        assert_eq!(s.average_over(&few), Some((2_200.0 / 120.0, 120)));
        // Many executions (summed per sample interval): ten 10 ns runs from 205 to 305.
        let many = Runs::new((0..10u64).map(|i| (205 + 10 * i, 215 + 10 * i)).collect());
        assert_eq!(s.average_over(&many), Some(((95.0 * 30.0 + 5.0 * 5.0) / 100.0, 100)));
        assert_eq!(s.average_over(&Runs::new(vec![(500, 600)])), None);
    }

    #[test]
    fn readings_near_the_largest_float_average_to_a_number() {
        // 2^1023 W for 1 ms, then 2^1022 W: summed as they are, the integral is infinite.
        let big = 2f64.powi(1023);
        let s = Steps::new(&[(0, big), (1_000_000, big / 2.0), (2_000_000, 0.0)]);
        assert!((big * 1e6).is_infinite());
        let (average, covered) = s.average_over(&Runs::new(vec![(0, 2_000_000)])).unwrap();
        assert_eq!((average, covered), (0.75 * big, 2_000_000));
        // The largest float itself: log2 of it rounds to 1024, whose power of two is infinite. Its average is a
        // number, one unit in the last place under it (the integral over 10 ns divided by 10 rounds).
        let max = Steps::new(&[(0, f64::MAX), (10, 0.0)]);
        assert_eq!(max.average_over(&Runs::new(vec![(0, 10)])), Some((f64::MAX.next_down(), 10)));
    }
}
