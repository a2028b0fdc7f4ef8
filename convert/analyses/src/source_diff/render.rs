//! `source --diff` output: aligned text for people, Markdown for a pull-request comment (JSON is the
//! [`super::SourceDiff`]).

use std::fmt::Write as _;

use super::{Change, KernelDiff, ReasonShare, Share, SourceDiff, moved_most};
use crate::fmt::thousands;

/// A row's verdict, with `new` / `gone` for a row with no samples on one side.
fn verdict(s: &Share) -> String {
    match s.change {
        Change::Grew if s.base_samples == 0 => "grew (new)".to_string(),
        Change::Dropped if s.new_samples == 0 => "dropped (gone)".to_string(),
        c => c.as_str().to_string(),
    }
}

/// `reason +1.23 pp`: the stall reason that moved a row most.
fn reason(stalls: &[ReasonShare], change: Change) -> String {
    moved_most(stalls, change).map_or_else(String::new, |r| format!("{} {:+.2} pp", r.reason, pp(r.share.change_pp)))
}

/// What the verdicts were judged on.
fn basis(d: &SourceDiff) -> String {
    format!(
        "{} base run(s), {} new run(s); {} ({} rows), {:.0}% family-wise; threshold {} pp of a kernel's samples",
        d.base_files.len(),
        d.new_files.len(),
        d.test,
        thousands(d.tests as u64),
        d.confidence_pct,
        d.threshold_pp
    )
}

/// The header of a kernel: samples each side and how far its mixes moved.
fn kernel_line(k: &KernelDiff) -> String {
    format!(
        "{} samples -> {}; stall mix moved {:.2} pp, line mix {:.2} pp",
        thousands(k.base_samples),
        thousands(k.new_samples),
        k.stall_mix_moved_pp,
        k.line_mix_moved_pp
    )
}

/// The kernel's stall reasons that moved most (up to 4), `reason 97.73% -> 95.26% (-2.47 pp)`.
fn kernel_stalls(k: &KernelDiff) -> String {
    k.stalls
        .iter()
        .take(4)
        .map(|r| {
            format!(
                "{} {:.2}% -> {:.2}% ({:+.2} pp)",
                r.reason,
                r.share.base_pct,
                r.share.new_pct,
                pp(r.share.change_pp)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A change in percentage points as printed: one that rounds to zero is `+0.00`, never `-0.00`.
fn pp(x: f64) -> f64 {
    if x.abs() < 0.005 { 0.0 } else { x }
}

fn limit(top: usize) -> usize {
    if top == 0 { usize::MAX } else { top }
}

/// Text for people: the verdict, then per kernel (the one whose stall mix moved most first) its lines and, for one
/// cubin on both sides, its SASS offsets, `top` of each (0: all), largest change first.
pub fn render_text(d: &SourceDiff, top: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "verdict: {} ({})", d.verdict.as_str().to_uppercase(), basis(d));
    let _ = writeln!(
        o,
        "kernels: {} on both sides, {} in the base only, {} in the new only",
        d.kernels.len(),
        d.base_only.len(),
        d.new_only.len()
    );
    for k in &d.kernels {
        let _ = writeln!(o, "\n{}\n  {}", k.name, kernel_line(k));
        let _ = writeln!(o, "  stalls: {}", kernel_stalls(k));
        for n in &k.notes {
            let _ = writeln!(o, "  ({n})");
        }
        if !k.lines.is_empty() {
            let _ = writeln!(
                o,
                "  {:>8} {:>8} {:>10}  {:<16} {:<32} stall that moved most",
                "base", "new", "change", "verdict", "line"
            );
            for l in k.lines.iter().take(limit(top)) {
                let _ = writeln!(
                    o,
                    "  {:>7.2}% {:>7.2}% {:>+7.2} pp  {:<16} {:<32} {}",
                    l.share.base_pct,
                    l.share.new_pct,
                    pp(l.share.change_pp),
                    verdict(&l.share),
                    l.location,
                    reason(&l.stalls, l.share.change)
                );
            }
            if k.lines.len() > limit(top) {
                let _ = writeln!(o, "  {} more lines (--top 0 lists them)", k.lines.len() - top);
            }
        }
        if !k.pcs.is_empty() {
            let _ = writeln!(
                o,
                "  {:>8} {:>8} {:>10}  {:<16} {:<8} {:<23} stall that moved most",
                "base", "new", "change", "verdict", "SASS", "line"
            );
            for p in k.pcs.iter().take(limit(top)) {
                let _ = writeln!(
                    o,
                    "  {:>7.2}% {:>7.2}% {:>+7.2} pp  {:<16} {:<8} {:<23} {}",
                    p.share.base_pct,
                    p.share.new_pct,
                    pp(p.share.change_pp),
                    verdict(&p.share),
                    format!("+{:#06x}", p.pc_offset),
                    p.location,
                    reason(&p.stalls, p.share.change)
                );
            }
            if k.pcs.len() > limit(top) {
                let _ = writeln!(o, "  {} more SASS offsets (--top 0 lists them)", k.pcs.len() - top);
            }
        }
    }
    for (side, names) in [("base", &d.base_only), ("new", &d.new_only)] {
        if !names.is_empty() {
            let _ = writeln!(o, "\nkernels with PC samples in the {side} only: {}", names.join("; "));
        }
    }
    o
}

/// A row of the Markdown table: where, its share, its stall reasons.
type Row<'a> = (String, &'a Share, &'a [ReasonShare]);

/// Markdown fit for a pull-request comment: the verdict, and per kernel a table of its `top` lines (0: all) that
/// moved most.
pub fn render_markdown(d: &SourceDiff, top: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### cutr source diff: **{}**\n", d.verdict.as_str());
    let _ = writeln!(o, "{}.\n", basis(d));
    for w in &d.warnings {
        let _ = writeln!(o, "> **warning**: {w}\n");
    }
    let cell = |s: &str| s.replace('|', "\\|").replace('`', "'");
    for k in &d.kernels {
        let _ = writeln!(o, "#### `{}`\n", cell(&k.name));
        let _ = writeln!(o, "{}. Stalls: {}.\n", kernel_line(k), kernel_stalls(k));
        for n in &k.notes {
            let _ = writeln!(o, "> {}\n", cell(n));
        }
        let (rows, what): (Vec<Row<'_>>, &str) = if k.lines.is_empty() {
            (k.pcs.iter().map(|p| (format!("+{:#06x}", p.pc_offset), &p.share, p.stalls.as_slice())).collect(), "SASS")
        } else {
            (k.lines.iter().map(|l| (l.location.clone(), &l.share, l.stalls.as_slice())).collect(), "line")
        };
        let _ = writeln!(o, "| verdict | {what} | base | new | change | stall that moved most |");
        let _ = writeln!(o, "|---|---|---:|---:|---:|---|");
        for (at, s, stalls) in rows.iter().take(limit(top)) {
            let _ = writeln!(
                o,
                "| {} | `{}` | {:.2}% | {:.2}% | {:+.2} pp | {} |",
                verdict(s),
                cell(at),
                s.base_pct,
                s.new_pct,
                pp(s.change_pp),
                reason(stalls, s.change)
            );
        }
        if rows.len() > limit(top) {
            let _ = writeln!(o, "\n{} more rows beyond the first {top}.", rows.len() - top);
        }
        o.push('\n');
    }
    o
}
