//! Interval arithmetic the rules share: merging and the union's length.

/// Disjoint, sorted intervals covering the same instants as `iv`.
pub fn merged(mut iv: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    iv.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(iv.len());
    for (s, e) in iv {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The time `iv` covers, overlaps counted once.
pub fn union_ns(iv: Vec<(u64, u64)>) -> u64 {
    merged(iv).iter().map(|(s, e)| e - s).sum()
}
