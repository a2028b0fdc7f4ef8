//! `diff` output: aligned text for people, Markdown for a pull-request comment (JSON is the [`super::Report`]).

use std::fmt::Write as _;

use super::{Report, Row, Verdict};
use crate::fmt;

fn signed_duration(ns: f64) -> String {
    let s = fmt::duration_ns(ns.abs().round() as u64);
    if ns < 0.0 { format!("-{s}") } else { format!("+{s}") }
}

fn counts(v: &[u64]) -> String {
    let mut u: Vec<u64> = v.to_vec();
    u.dedup();
    u.iter().map(|c| c.to_string()).collect::<Vec<_>>().join("/")
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}...", s.chars().take(n - 3).collect::<String>()) }
}

fn pct(row: &Row) -> String {
    if row.delta_pct.is_finite() { format!("{:+.1}%", row.delta_pct) } else { "new".into() }
}

fn interval(row: &Row) -> String {
    row.interval_pct.map_or_else(|| "-".into(), |(lo, hi)| format!("{lo:+.1}..{hi:+.1}%"))
}

/// The rows worth showing: judged rows that are not neutral, the total and the wall span, and reported rows that
/// moved beyond the threshold and the floor per run (with `show_all`, every row).
fn shown(r: &Report, show_all: bool) -> impl Iterator<Item = &Row> {
    r.rows.iter().filter(move |x| show_all || worth_showing(r, x))
}

fn worth_showing(r: &Report, x: &Row) -> bool {
    match x.verdict {
        Verdict::Neutral => x.section == "total",
        Verdict::Reported => {
            x.section == "span" || (x.delta_pct.abs() > r.threshold_pct && x.delta_ns.abs() >= r.min_delta_ns as f64)
        }
        _ => true,
    }
}

/// What the verdict was judged on.
fn basis(r: &Report) -> String {
    let evidence = if r.base_files.len() >= 2 || r.new_files.len() >= 2 {
        "runs as samples (run-to-run noise measured)"
    } else {
        "one run per side: instances as samples, a floor per instance for the run-to-run drift one run cannot show"
    };
    format!("threshold {}%, 99% intervals, {evidence}", r.threshold_pct)
}

/// Text for people: the verdict, warnings, then every row that is not neutral with the reason for its verdict.
pub fn render_text(r: &Report, show_all: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "verdict: {} ({} base run(s), {} new run(s); {})",
        r.verdict.as_str().to_uppercase(),
        r.base_files.len(),
        r.new_files.len(),
        basis(r)
    );
    // Warnings go to stderr (the command prints them), not into the table.
    let c: Vec<String> = r.counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let _ = writeln!(o, "rows: {} (reported rows are not judged)", c.join(", "));
    for line in notes(r) {
        let _ = writeln!(o, "{line}");
    }
    let _ = writeln!(
        o,
        "\n{:>12} {:>7} {:>12} {:>12} {:>13} {:>8} {:>16}  name [instances base -> new]: why",
        "verdict", "section", "base", "new", "change", "change", "99% interval"
    );
    for row in shown(r, show_all) {
        let _ = writeln!(
            o,
            "{:>12} {:>7} {:>12} {:>12} {:>13} {:>8} {:>16}  {} [{} -> {}]: {}{}",
            row.verdict.as_str(),
            row.section,
            fmt::duration_ns(row.base_mean_ns.round() as u64),
            fmt::duration_ns(row.new_mean_ns.round() as u64),
            signed_duration(row.delta_ns),
            pct(row),
            interval(row),
            shorten(&row.name, 100),
            counts(&row.base_count),
            counts(&row.new_count),
            row.reason,
            super::lines::moved_text(&row.moved_lines)
        );
    }
    let hidden = r.rows.len() - shown(r, show_all).count();
    if hidden > 0 {
        let _ = writeln!(o, "\n{hidden} rows unchanged or below --min-share not shown (--all lists them)");
    }
    if !r.count_changes.is_empty() {
        let _ = writeln!(o, "\nlaunched a different number of times (per run; --fail-on count to fail on it):");
        for c in &r.count_changes {
            let _ = writeln!(o, "  {} {}: {} -> {}", c.section, shorten(&c.name, 100), c.base, c.new);
        }
    }
    if !r.counter_changes.is_empty() {
        let _ = writeln!(
            o,
            "
counters averaged over each kernel's executions (reported, not judged):"
        );
        for c in &r.counter_changes {
            let _ = writeln!(
                o,
                "  {} GPU {} {}: {:.4} -> {:.4} ({:+.1}%)",
                shorten(&c.kernel, 80),
                c.device,
                c.series,
                c.base,
                c.new,
                c.delta_pct
            );
        }
    }
    if !r.um_changes.is_empty() {
        let _ = writeln!(o, "\nunified memory per run (reported, not judged):");
        for c in &r.um_changes {
            let _ = writeln!(
                o,
                "  {}: {} -> {} ({})",
                c.what,
                fmt::thousands_1(c.base),
                fmt::thousands_1(c.new),
                um_pct(c)
            );
        }
    }
    o
}

/// What the rows mean beyond the table: folded families of numbered NVTX names, and how the runs were streamed.
fn notes(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    if !r.folded_families.is_empty() {
        out.push(format!(
            "NVTX ranges with numbered names, more than {} of a family: one row each, every member an instance: {}",
            cutr_model::numbered::FAMILY_ROWS_CAP,
            r.folded_families.join(", ")
        ));
    }
    if let Some(s) = &r.stream {
        out.push(super::stream::describe(s));
    }
    out
}

fn um_pct(c: &super::UmChange) -> String {
    c.delta_pct.map_or_else(|| "new".to_string(), |p| format!("{p:+.1}%"))
}

/// Markdown fit for a pull-request comment.
pub fn render_markdown(r: &Report, top: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### cutr diff: **{}**\n", r.verdict.as_str());
    let _ = writeln!(o, "{} base run(s) vs {} new run(s); {}.\n", r.base_files.len(), r.new_files.len(), basis(r));
    for w in &r.warnings {
        let _ = writeln!(o, "> **warning**: {w}\n");
    }
    for line in notes(r) {
        let _ = writeln!(o, "{line}\n");
    }
    let _ = writeln!(o, "| verdict | what | base | new | change | 99% interval | count | why |");
    let _ = writeln!(o, "|---|---|---:|---:|---:|---:|---|---|");
    for row in shown(r, false).take(top) {
        let _ = writeln!(
            o,
            "| {} | {} `{}` | {} | {} | {} ({}) | {} | {} → {} | {} |",
            row.verdict.as_str(),
            row.section,
            shorten(&row.name, 80).replace('|', "\\|").replace('`', "'"),
            fmt::duration_ns(row.base_mean_ns.round() as u64),
            fmt::duration_ns(row.new_mean_ns.round() as u64),
            signed_duration(row.delta_ns),
            pct(row),
            interval(row),
            counts(&row.base_count),
            counts(&row.new_count),
            format!("{}{}", row.reason, super::lines::moved_text(&row.moved_lines)).replace('|', "\\|")
        );
    }
    let hidden = r.rows.len() - shown(r, false).take(top).count();
    let _ = writeln!(o, "\n{hidden} more rows unchanged, below --min-share or beyond the first {top}.");
    if !r.count_changes.is_empty() {
        let _ = writeln!(o, "\nLaunched a different number of times: {}.", r.count_changes.len());
    }
    if !r.counter_changes.is_empty() {
        let _ = writeln!(o, "\nCounter averages that moved by the threshold or more: {}.", r.counter_changes.len());
    }
    let moved: Vec<String> = (r.um_changes.iter())
        .filter(|c| c.delta_pct != Some(0.0))
        .map(|c| format!("{} {} → {} ({})", c.what, fmt::thousands_1(c.base), fmt::thousands_1(c.new), um_pct(c)))
        .collect();
    if !moved.is_empty() {
        let _ = writeln!(o, "\nUnified memory per run: {}.", moved.join("; "));
    }
    o
}

/// The rows of one rank's report that changed (regressions first), as `name +x%`, at most `top`.
fn rank_findings(r: &Report, top: usize) -> String {
    // Kernels first: "which kernel regressed on which rank"; NVTX ranges after.
    let mut rows: Vec<&Row> = r
        .rows
        .iter()
        .filter(|x| x.section != "total" && matches!(x.verdict, Verdict::Regression | Verdict::Improvement))
        .collect();
    rows.sort_by_key(|x| x.section != "kernel");
    let changed: Vec<String> = rows
        .into_iter()
        .take(top)
        .map(|x| format!("{} {} {}", x.verdict.as_str(), shorten(&x.name, 60), pct(x)))
        .collect();
    if changed.is_empty() { "-".into() } else { changed.join("; ") }
}

/// `diff --by-rank` for people: the job's verdict, then one line per rank with its GPU time and what changed.
pub fn render_by_rank_text(r: &super::ByRankReport, show_all: bool) -> String {
    let mut o = String::new();
    let regressed: Vec<String> = r.regressed_ranks.iter().map(u32::to_string).collect();
    let _ = writeln!(
        o,
        "verdict: {} ({} rank(s) compared{})",
        r.verdict.as_str().to_uppercase(),
        r.ranks.len(),
        if regressed.is_empty() { String::new() } else { format!("; regressed: rank {}", regressed.join(", ")) }
    );
    let _ = writeln!(
        o,
        "\n{:>6} {:>12} {:>5} {:>12} {:>12} {:>8}  changed rows (up to 3)",
        "rank", "verdict", "runs", "GPU base", "GPU new", "change"
    );
    for x in &r.ranks {
        let total = super::by_rank::total_row(&x.report);
        let _ = writeln!(
            o,
            "{:>6} {:>12} {:>5} {:>12} {:>12} {:>8}  {}",
            x.rank,
            x.report.verdict.as_str(),
            format!("{}/{}", x.report.base_files.len(), x.report.new_files.len()),
            total.map_or("-".into(), |t| fmt::duration_ns(t.base_mean_ns.round() as u64)),
            total.map_or("-".into(), |t| fmt::duration_ns(t.new_mean_ns.round() as u64)),
            total.map_or("-".into(), pct),
            rank_findings(&x.report, 3)
        );
    }
    for x in r.ranks.iter().filter(|x| show_all || x.report.verdict == Verdict::Regression) {
        let _ = writeln!(o, "\n== rank {}", x.rank);
        o.push_str(&render_text(&x.report, show_all));
    }
    o
}

/// `diff --by-rank` as Markdown: the job's verdict and a table of ranks, changed ranks first.
pub fn render_by_rank_markdown(r: &super::ByRankReport, top: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### cutr diff by rank: **{}**\n", r.verdict.as_str());
    let regressed: Vec<String> = r.regressed_ranks.iter().map(u32::to_string).collect();
    let _ = writeln!(
        o,
        "{} rank(s) compared; regressed: {}.\n",
        r.ranks.len(),
        if regressed.is_empty() { "none".into() } else { regressed.join(", ") }
    );
    for w in &r.warnings {
        let _ = writeln!(o, "> **warning**: {w}\n");
    }
    let _ = writeln!(o, "| rank | verdict | GPU base | GPU new | change | changed rows |");
    let _ = writeln!(o, "|---:|---|---:|---:|---:|---|");
    let mut ranks: Vec<&super::RankDiff> = r.ranks.iter().collect();
    ranks.sort_by_key(|x| (x.report.verdict == Verdict::Neutral, x.rank));
    for x in ranks.iter().take(top) {
        let total = super::by_rank::total_row(&x.report);
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} |",
            x.rank,
            x.report.verdict.as_str(),
            total.map_or("-".into(), |t| fmt::duration_ns(t.base_mean_ns.round() as u64)),
            total.map_or("-".into(), |t| fmt::duration_ns(t.new_mean_ns.round() as u64)),
            total.map_or("-".into(), pct),
            rank_findings(&x.report, 3).replace('|', "\\|")
        );
    }
    if r.ranks.len() > top {
        let _ = writeln!(o, "\n{} more ranks beyond the first {top}.", r.ranks.len() - top);
    }
    o
}
