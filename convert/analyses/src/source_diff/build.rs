//! The rows of a source diff: each side's kernels merged by demangled name, a share per line, SASS offset and stall
//! reason, then every share of the report tested at once (Holm's family) and judged.

use std::collections::{BTreeMap, BTreeSet};

use super::noise::{Counts, holm, z_critical};
use super::{
    CONFIDENCE, Change, KernelDiff, LineDiff, PcDiff, ReasonShare, Share, SourceDiff, SourceDiffOptions, Verdict,
};
use crate::source::{SourceReport, Stalls};

type ByReason = BTreeMap<String, u64>;
/// A line: (file, directory, line).
type LineKey = (String, String, u32);

/// One kernel's samples on one side, summed over the cubins it ran from.
#[derive(Default)]
struct Side {
    samples: u64,
    stalls: ByReason,
    lines: BTreeMap<LineKey, ByReason>,
    /// Per SASS offset: its `file:line` and samples (meaningful only for a kernel of one cubin).
    pcs: BTreeMap<u64, (String, ByReason)>,
    cubins: BTreeSet<u64>,
    /// Why a cubin of it has no lines, if one has none.
    no_lines: BTreeSet<&'static str>,
}

fn add(into: &mut ByReason, from: &Stalls) {
    for (reason, n) in from {
        let sum = into.entry(reason.clone()).or_default();
        *sum = sum.saturating_add(*n);
    }
}

fn total(by_reason: &ByReason) -> u64 {
    by_reason.values().fold(0u64, |a, n| a.saturating_add(*n))
}

/// A side's kernels by demangled name.
fn sides(r: &SourceReport) -> BTreeMap<String, Side> {
    let mut out: BTreeMap<String, Side> = BTreeMap::new();
    for k in &r.kernels {
        let s = out.entry(k.name.clone()).or_default();
        s.samples = s.samples.saturating_add(k.samples);
        add(&mut s.stalls, &k.stalls);
        for l in &k.lines {
            add(s.lines.entry((l.file.clone(), l.dir.clone(), l.line)).or_default(), &l.stalls);
        }
        for p in &k.pcs {
            add(&mut s.pcs.entry(p.pc_offset).or_insert_with(|| (p.location.clone(), ByReason::new())).1, &p.stalls);
        }
        s.cubins.insert(k.cubin_crc);
        if let Some(why) = k.line_tables.why_no_lines() {
            s.no_lines.insert(why);
        }
    }
    out
}

/// A share before the test: its p-value not yet adjusted, its verdict not yet given.
fn share(base: u64, new: u64, totals: (u64, u64)) -> Share {
    let c = Counts { base, base_total: totals.0, new, new_total: totals.1 };
    let (base_pct, new_pct) = (100.0 * c.base_share(), 100.0 * c.new_share());
    Share {
        base_samples: base,
        new_samples: new,
        base_pct,
        new_pct,
        change_pp: new_pct - base_pct,
        p_adjusted: c.p_value(),
        change: Change::Unchanged,
        totals,
    }
}

/// Largest change first, then by name: the order of every list of rows.
fn by_change<T>(rows: &mut [T], change: impl Fn(&T) -> f64, name: impl Fn(&T) -> String) {
    rows.sort_by(|a, b| change(b).abs().total_cmp(&change(a).abs()).then_with(|| name(a).cmp(&name(b))));
}

/// Every stall reason of either side.
fn reasons(base: &ByReason, new: &ByReason, totals: (u64, u64)) -> Vec<ReasonShare> {
    let names: BTreeSet<&String> = base.keys().chain(new.keys()).collect();
    let mut out: Vec<ReasonShare> = names
        .into_iter()
        .map(|r| ReasonShare {
            reason: r.clone(),
            share: share(base.get(r).copied().unwrap_or(0), new.get(r).copied().unwrap_or(0), totals),
        })
        .collect();
    by_change(&mut out, |r| r.share.change_pp, |r| r.reason.clone());
    out
}

/// Half the sum of the rows' absolute changes: how far a split moved, in percentage points.
fn moved(shares: impl Iterator<Item = f64>) -> f64 {
    shares.map(f64::abs).sum::<f64>() / 2.0
}

fn kernel(name: &str, b: &Side, n: &Side) -> KernelDiff {
    let totals = (b.samples, n.samples);
    let empty = ByReason::new();
    let line_keys: BTreeSet<&LineKey> = b.lines.keys().chain(n.lines.keys()).collect();
    let mut lines: Vec<LineDiff> = line_keys
        .into_iter()
        .map(|key| {
            let (bl, nl) = (b.lines.get(key).unwrap_or(&empty), n.lines.get(key).unwrap_or(&empty));
            LineDiff {
                location: format!("{}:{}", key.0, key.2),
                file: key.0.clone(),
                dir: key.1.clone(),
                line: key.2,
                share: share(total(bl), total(nl), totals),
                stalls: reasons(bl, nl, totals),
            }
        })
        .collect();
    by_change(&mut lines, |l| l.share.change_pp, |l| l.location.clone());
    let same_cubin = b.cubins.len() == 1 && b.cubins == n.cubins;
    let mut pcs: Vec<PcDiff> = Vec::new();
    if same_cubin {
        let offsets: BTreeSet<u64> = b.pcs.keys().chain(n.pcs.keys()).copied().collect();
        let none = (String::new(), ByReason::new());
        pcs = offsets
            .into_iter()
            .map(|pc| {
                let (bp, np) = (b.pcs.get(&pc).unwrap_or(&none), n.pcs.get(&pc).unwrap_or(&none));
                let location = if bp.0.is_empty() { np.0.clone() } else { bp.0.clone() };
                PcDiff {
                    pc_offset: pc,
                    location,
                    share: share(total(&bp.1), total(&np.1), totals),
                    stalls: reasons(&bp.1, &np.1, totals),
                }
            })
            .collect();
        by_change(&mut pcs, |p| p.share.change_pp, |p| format!("{:016x}", p.pc_offset));
    }
    let mut notes: Vec<String> = Vec::new();
    if !same_cubin {
        // Offsets of two builds name different instructions: only lines can be matched.
        let compared = if lines.is_empty() {
            " and neither has lines: nothing compared"
        } else {
            ": lines compared, SASS offsets not"
        };
        notes.push(format!(
            "the sides ran different cubins (base {}, new {}){compared}",
            crcs(&b.cubins),
            crcs(&n.cubins)
        ));
    }
    for (side, s) in [("base", b), ("new", n)] {
        notes.extend(s.no_lines.iter().map(|why| format!("{side}: {why}")));
    }
    let stalls = reasons(&b.stalls, &n.stalls, totals);
    KernelDiff {
        name: name.to_string(),
        base_samples: b.samples,
        new_samples: n.samples,
        base_cubins: b.cubins.iter().copied().collect(),
        new_cubins: n.cubins.iter().copied().collect(),
        same_cubin,
        stall_mix_moved_pp: moved(stalls.iter().map(|r| r.share.change_pp)),
        line_mix_moved_pp: moved(lines.iter().map(|l| l.share.change_pp)),
        stalls,
        lines,
        pcs,
        notes,
    }
}

fn crcs(c: &BTreeSet<u64>) -> String {
    c.iter().map(|x| format!("{x:#x}")).collect::<Vec<_>>().join("+")
}

/// Every share of a kernel, in one fixed order (the test's family is every share of every kernel).
fn shares_mut(k: &mut KernelDiff) -> impl Iterator<Item = &mut Share> {
    let stalls = k.stalls.iter_mut().map(|r| &mut r.share);
    let lines =
        k.lines.iter_mut().flat_map(|l| std::iter::once(&mut l.share).chain(l.stalls.iter_mut().map(|r| &mut r.share)));
    let pcs =
        k.pcs.iter_mut().flat_map(|p| std::iter::once(&mut p.share).chain(p.stalls.iter_mut().map(|r| &mut r.share)));
    stalls.chain(lines).chain(pcs)
}

/// A share's verdict from its adjusted p-value: see [`Change`].
fn judge(s: &mut Share, p_adjusted: f64, z: f64, threshold_pp: f64) {
    s.p_adjusted = p_adjusted;
    let beyond_noise = p_adjusted < 1.0 - CONFIDENCE;
    let big = s.change_pp.abs() >= threshold_pp;
    let c = Counts { base: s.base_samples, base_total: s.totals.0, new: s.new_samples, new_total: s.totals.1 };
    s.change = if beyond_noise && big {
        if s.change_pp > 0.0 { Change::Grew } else { Change::Dropped }
    } else if !beyond_noise && (big || 100.0 * c.detectable_change(z, threshold_pp / 100.0) > threshold_pp) {
        Change::TooFewSamples
    } else {
        Change::Unchanged
    };
}

/// The judged rows of a kernel: its lines, or where neither side has line tables, its SASS offsets.
fn grew(k: &KernelDiff) -> bool {
    if k.lines.is_empty() {
        k.pcs.iter().any(|p| p.share.change == Change::Grew)
    } else {
        k.lines.iter().any(|l| l.share.change == Change::Grew)
    }
}

pub(super) fn compare(base: &SourceReport, new: &SourceReport, opts: &SourceDiffOptions) -> SourceDiff {
    let (b, n) = (sides(base), sides(new));
    let mut kernels: Vec<KernelDiff> =
        b.iter().filter_map(|(name, bs)| n.get(name).map(|ns| kernel(name, bs, ns))).collect();
    let only = |x: &BTreeMap<String, Side>, y: &BTreeMap<String, Side>| -> Vec<String> {
        x.keys().filter(|k| !y.contains_key(*k)).cloned().collect()
    };
    let raw: Vec<f64> = kernels.iter_mut().flat_map(|k| shares_mut(k).map(|s| s.p_adjusted)).collect();
    let adjusted = holm(&raw);
    let z = z_critical(1.0 - CONFIDENCE, raw.len());
    let mut next = adjusted.into_iter();
    for k in &mut kernels {
        for s in shares_mut(k) {
            judge(s, next.next().unwrap_or(1.0), z, opts.threshold_pp);
        }
    }
    kernels.sort_by(|x, y| y.stall_mix_moved_pp.total_cmp(&x.stall_mix_moved_pp).then_with(|| x.name.cmp(&y.name)));
    let mut warnings = Vec::new();
    let verdict = if kernels.is_empty() {
        warnings.push(
            "no kernel has PC samples on both sides: these are probably recordings of different programs, nothing \
             was compared"
                .to_string(),
        );
        Verdict::DifferentPrograms
    } else if kernels.iter().any(grew) {
        Verdict::Grew
    } else {
        Verdict::Unchanged
    };
    SourceDiff {
        verdict,
        base_files: base.files.clone(),
        new_files: new.files.clone(),
        threshold_pp: opts.threshold_pp,
        confidence_pct: 100.0 * CONFIDENCE,
        test: "two-proportion z test per row (pooled), Holm-corrected over every row".to_string(),
        tests: raw.len(),
        z_critical: z,
        kernels,
        base_only: only(&b, &n),
        new_only: only(&n, &b),
        warnings,
    }
}
