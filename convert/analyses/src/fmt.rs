//! Number and time formatting for people.

use std::time::{Duration, UNIX_EPOCH};

/// `1234567` -> `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `12951.14` -> `12,951.1`: one decimal, thousands separated like the integer columns beside it.
pub fn thousands_1(x: f64) -> String {
    let tenths = (x.max(0.0) * 10.0).round() as u64;
    format!("{}.{}", thousands(tenths / 10), tenths % 10)
}

/// Bytes with a binary unit: `1536` -> `1.5 KiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

/// Nanoseconds since the Unix epoch as RFC 3339 UTC with nanoseconds.
pub fn rfc3339_ns(unix_ns: u64) -> String {
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(unix_ns)).to_string()
}

/// A duration in ns, with a unit that keeps 3-4 significant digits: `1_234_567` -> `1.235 ms`.
pub fn duration_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.3} us", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.3} ms", v / 1e6)
    } else {
        format!("{:.3} s", v / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(
            (thousands_1(12951.14), thousands_1(999.96), thousands_1(0.0)),
            ("12,951.1".into(), "1,000.0".into(), "0.0".into())
        );
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(rfc3339_ns(1_795_316_045_000_000_001), "2026-11-22T02:54:05.000000001Z");
        assert_eq!(duration_ns(999), "999 ns");
        assert_eq!(duration_ns(1_234_567), "1.235 ms");
        assert_eq!(duration_ns(2_500_000_000), "2.500 s");
    }
}
