//! One time base for every file: CUPTI timestamps mapped onto CLOCK_REALTIME (Unix ns) with the clock samples the
//! recorder took, so that files of different processes and hosts line up.

use cutr_format::{ClockSample, Reader};

/// Offsets below this are the same clock read at slightly different instants: CUPTI stamps records with
/// CLOCK_REALTIME by default, and the sample pairs differ only by the time between the two reads.
const SAME_CLOCK_NS: i64 = 20_000;

/// Maps one file's CUPTI timestamps to trace time (Unix ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeBase {
    /// trace time = CUPTI time + offset.
    pub offset_ns: i64,
}

impl TimeBase {
    /// The median of (realtime - CUPTI) over the samples; zero when the two are the same clock (within 20 us).
    /// Samples whose difference does not fit an `i64` (no real pair of clocks is 292 years apart) are ignored.
    pub fn from_clocks(samples: &[ClockSample]) -> TimeBase {
        ClockCheck::of(samples, None).time
    }

    /// `cupti_ns` in trace time; 0 stays 0 (no timestamp). Saturating, so the map keeps order (an end is never
    /// before its start) whatever a hostile file's clock samples say.
    #[inline]
    pub fn to_trace(&self, cupti_ns: u64) -> u64 {
        if cupti_ns == 0 { 0 } else { cupti_ns.saturating_add_signed(self.offset_ns).max(1) }
    }

    /// Whether every time in `[first, last]` maps without saturating: durations inside are kept exactly.
    fn keeps_durations(&self, (first, last): (u64, u64)) -> bool {
        let shifted = |t: u64| t.checked_add_signed(self.offset_ns).is_some_and(|v| v >= 1);
        shifted(first) && shifted(last)
    }
}

/// A file's time base and what was wrong with the clock samples it came from. Clock samples are as hostile as any
/// other field: a sample pair that wraps, or samples whose CLOCK_REALTIME runs backwards, would otherwise move the
/// time base so far that some records' times saturate (at 1 ns or at `u64::MAX`) and durations shrink silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockCheck {
    pub time: TimeBase,
    /// Clock samples with a CUPTI time (those with none say nothing of the offset).
    pub samples: usize,
    /// Samples whose realtime - CUPTI does not fit an `i64` (292 years or more): ignored.
    pub wrapping: usize,
    /// Samples whose CLOCK_REALTIME is earlier than the previous sample's although CUPTI's clock advanced.
    pub backwards: usize,
    /// The samples' offset, when it would have moved some of the file's records out of the range of a `u64` (so
    /// that their times saturate): CUPTI's times are then used as they are.
    pub rejected_offset: Option<i64>,
}

impl ClockCheck {
    /// The time base of clock `samples` (in any order) for records spanning `records` (the CUPTI times of the
    /// earliest and latest, when known).
    pub fn of(samples: &[ClockSample], records: Option<(u64, u64)>) -> ClockCheck {
        let timed = samples.iter().filter(|s| s.cupti_ns != 0).count();
        let offset = |s: &ClockSample| i64::try_from(s.realtime_ns as i128 - s.cupti_ns as i128).ok();
        let mut kept: Vec<&ClockSample> = samples.iter().filter(|s| s.cupti_ns != 0 && offset(s).is_some()).collect();
        kept.sort_by_key(|s| (s.cupti_ns, s.realtime_ns));
        let backwards =
            kept.windows(2).filter(|w| w[1].cupti_ns > w[0].cupti_ns && w[1].realtime_ns < w[0].realtime_ns).count();
        let mut check = ClockCheck { samples: timed, wrapping: timed - kept.len(), backwards, ..Default::default() };
        let mut d: Vec<i64> = kept.iter().filter_map(|s| offset(s)).collect();
        if d.is_empty() {
            return check;
        }
        d.sort_unstable();
        let m = d[d.len() / 2];
        let time = TimeBase { offset_ns: if m.abs() < SAME_CLOCK_NS { 0 } else { m } };
        if records.is_some_and(|r| !time.keeps_durations(r)) {
            check.rejected_offset = Some(time.offset_ns);
        } else {
            check.time = time;
        }
        check
    }

    /// The time base of a file's clock samples for its activity chunks' time range (as their headers say).
    pub fn of_reader(r: &Reader) -> ClockCheck {
        let timed = r.activity_chunks().filter(|c| c.header.t_min != 0 && c.header.t_max >= c.header.t_min);
        let range = timed.fold(None, |acc: Option<(u64, u64)>, c| {
            let (a, b) = (c.header.t_min, c.header.t_max);
            Some(acc.map_or((a, b), |(x, y)| (x.min(a), y.max(b))))
        });
        ClockCheck::of(r.clocks(), range)
    }

    /// What the user should know, one line per cause (none for sound samples).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.wrapping > 0 {
            out.push(format!(
                "{} of {} clock samples put CLOCK_REALTIME 292 years or more from CUPTI's clock (the difference \
                 wraps); ignored",
                self.wrapping, self.samples
            ));
        }
        if self.backwards > 0 {
            out.push(format!(
                "{} of {} clock samples move CLOCK_REALTIME backwards while CUPTI's clock advances",
                self.backwards, self.samples
            ));
        }
        if let Some(offset) = self.rejected_offset {
            out.push(format!(
                "the clock samples' offset ({offset} ns) would move records outside the clock's range and shrink \
                 their durations; CUPTI's timestamps are used as they are (durations are right, but the file may \
                 not line up with other files)"
            ));
        }
        out
    }
}

/// The earliest record of all `readers` in trace time (from their activity chunks' headers, each file on its own
/// clock samples' time base): where `--start`/`--end` count from.
pub fn first_record(readers: &[Reader]) -> u64 {
    readers
        .iter()
        .filter_map(|r| {
            let time = ClockCheck::of_reader(r).time;
            r.activity_chunks().filter(|c| c.header.t_min != 0).map(|c| time.to_trace(c.header.t_min)).min()
        })
        .min()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(c: u64, r: u64) -> ClockSample {
        ClockSample { cupti_ns: c, realtime_ns: r, monotonic_ns: 0 }
    }

    #[test]
    fn same_clock_is_not_shifted_and_a_foreign_clock_is() {
        assert_eq!(TimeBase::from_clocks(&[s(1000, 1300), s(5000, 5100)]).offset_ns, 0);
        let tb = TimeBase::from_clocks(&[s(1_000, 5_000_001_000), s(2_000, 5_000_002_100), s(3_000, 5_000_003_050)]);
        assert_eq!(tb.offset_ns, 5_000_000_050);
        assert_eq!(tb.to_trace(10), 5_000_000_060);
        assert_eq!(tb.to_trace(0), 0);
        assert_eq!(TimeBase::from_clocks(&[]).offset_ns, 0);
    }

    #[test]
    fn samples_that_wrap_run_backwards_or_would_saturate_records_are_counted() {
        // One sample wraps (ignored), one runs CLOCK_REALTIME backwards; the median of the other two is 5 s.
        let samples = [s(1_000, 5_000_001_000), s(2_000, u64::MAX), s(3_000, 5_000_003_000), s(4_000, 4_000_000_000)];
        let c = ClockCheck::of(&samples, Some((1_000, 4_000)));
        assert_eq!((c.samples, c.wrapping, c.backwards, c.rejected_offset), (4, 1, 1, None));
        assert_eq!(c.time.offset_ns, 5_000_000_000);
        // Realtime 1 s behind a CUPTI clock at 1.5 s: records at 0.5 s would go before 0; CUPTI's times are kept.
        let c = ClockCheck::of(&[s(1_500_000_000, 500_000_000)], Some((500_000_000, 1_500_000_000)));
        assert_eq!((c.time, c.rejected_offset), (TimeBase::default(), Some(-1_000_000_000)));
        assert_eq!(
            c.warnings(),
            ["the clock samples' offset (-1000000000 ns) would move records outside the clock's range and shrink \
              their durations; CUPTI's timestamps are used as they are (durations are right, but the file may not \
              line up with other files)"]
        );
        assert_eq!(ClockCheck::of(&[s(1_000, 1_000)], Some((1, u64::MAX))).warnings(), [] as [String; 0]);
    }

    #[test]
    fn hostile_clock_samples_never_wrap_or_reorder_times() {
        // A sample pair 2^64 - 1 apart is ignored; an offset far beyond any real one saturates instead of wrapping.
        assert_eq!(TimeBase::from_clocks(&[s(1, u64::MAX)]).offset_ns, 0);
        let tb = TimeBase { offset_ns: i64::MIN };
        assert_eq!((tb.to_trace(5), tb.to_trace(u64::MAX), tb.to_trace(0)), (1, u64::MAX >> 1, 0));
        let tb = TimeBase { offset_ns: i64::MAX };
        assert_eq!((tb.to_trace(10), tb.to_trace(u64::MAX - 5)), (i64::MAX as u64 + 10, u64::MAX));
        for tb in [TimeBase { offset_ns: i64::MIN }, TimeBase { offset_ns: i64::MAX }] {
            assert!(tb.to_trace(1_000) <= tb.to_trace(2_000));
        }
    }
}
