//! One time base for every file: CUPTI timestamps mapped onto CLOCK_REALTIME (Unix ns) with the clock samples the
//! recorder took, so that files of different processes and hosts line up.

use cutr_format::ClockSample;

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
        let mut d: Vec<i64> = samples
            .iter()
            .filter(|s| s.cupti_ns != 0)
            .filter_map(|s| i64::try_from(s.realtime_ns as i128 - s.cupti_ns as i128).ok())
            .collect();
        if d.is_empty() {
            return TimeBase::default();
        }
        d.sort_unstable();
        let m = d[d.len() / 2];
        TimeBase { offset_ns: if m.abs() < SAME_CLOCK_NS { 0 } else { m } }
    }

    /// `cupti_ns` in trace time; 0 stays 0 (no timestamp). Saturating, so the map keeps order (an end is never
    /// before its start) whatever a hostile file's clock samples say.
    #[inline]
    pub fn to_trace(&self, cupti_ns: u64) -> u64 {
        if cupti_ns == 0 { 0 } else { cupti_ns.saturating_add_signed(self.offset_ns).max(1) }
    }
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
