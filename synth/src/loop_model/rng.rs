//! The generator's random numbers: a fixed SplitMix64 stream, so that a seed gives the same bytes forever.

/// SplitMix64.
#[derive(Clone)]
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi].
    pub(super) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// `mean` scaled by a factor in [0.85, 1.25] with a long-ish right tail, like kernel durations.
    pub(super) fn jitter(&mut self, mean: u64) -> u64 {
        let u = self.next() % 10_000;
        let f = 850 + u * 300 / 10_000 + if self.next().is_multiple_of(50) { 500 } else { 0 };
        (mean * f / 1000).max(1)
    }
}
