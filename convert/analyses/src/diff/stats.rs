//! The quantiles a diff's 99% intervals need, from statrs.

use statrs::distribution::{ContinuousCDF, StudentsT};

/// Two-sided 99% confidence: the 0.995 quantile of the standard normal.
pub const Z_99: f64 = 2.575_829_303_548_901;

/// Beyond this many degrees of freedom t's quantile is the normal's to 1e-4 (and statrs's inverse of an infinite
/// df does not return).
const NORMAL_DF: f64 = 1e5;

/// Student's t 0.995 quantile for `df` degrees of freedom (Welch's need not be whole); below one degree, one's.
pub fn t_995(df: f64) -> f64 {
    if df > NORMAL_DF {
        return Z_99;
    }
    let df = if df >= 1.0 { df } else { 1.0 };
    StudentsT::new(0.0, 1.0, df).map_or(Z_99, |t| t.inverse_cdf(0.995))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_match_the_standard_table() {
        // The textbook t(0.995) table at 1, 2, 13 and 30 degrees, and the normal's beyond.
        for (df, table) in [(1.0, 63.657), (2.0, 9.925), (13.0, 3.012), (30.0, 2.750), (f64::INFINITY, 2.576)] {
            assert!((t_995(df) - table).abs() < 5e-4, "df {df}: {} vs {table}", t_995(df));
        }
        assert!((t_995(NORMAL_DF) - Z_99).abs() < 1e-4);
        assert_eq!(t_995(1e9), Z_99);
        assert_eq!(t_995(0.2), t_995(1.0));
        assert_eq!(t_995(f64::NAN), t_995(1.0));
    }
}
