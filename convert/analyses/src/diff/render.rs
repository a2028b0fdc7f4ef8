//! `diff` output: aligned text for people, Markdown for a pull-request comment (JSON is the [`super::Report`]).

use std::fmt::Write as _;

use super::{Report, Verdict};
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

/// Text for people: the verdict, then every row that is not neutral.
pub fn render_text(r: &Report, show_all: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "verdict: {} (threshold {}%; {} base run(s), {} new run(s))",
        r.verdict.as_str().to_uppercase(),
        r.threshold_pct,
        r.base_files.len(),
        r.new_files.len()
    );
    let c: Vec<String> = r.counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let _ = writeln!(o, "rows: {}", c.join(", "));
    let _ = writeln!(
        o,
        "\n{:>13} {:>7} {:>12} {:>12} {:>13} {:>9} {:>8}  name",
        "verdict", "section", "base", "new", "delta", "delta %", "noise %"
    );
    for row in r.rows.iter().filter(|x| show_all || x.verdict != Verdict::Neutral || x.section == "total") {
        let _ = writeln!(
            o,
            "{:>13} {:>7} {:>12} {:>12} {:>13} {:>9} {:>8}  {} [{} -> {}]",
            row.verdict.as_str(),
            row.section,
            fmt::duration_ns(row.base_mean_ns.round() as u64),
            fmt::duration_ns(row.new_mean_ns.round() as u64),
            signed_duration(row.delta_ns),
            if row.delta_pct.is_finite() { format!("{:+.1}", row.delta_pct) } else { "new".into() },
            format!("{:.1}", row.noise_pct),
            shorten(&row.name, 120),
            counts(&row.base_count),
            counts(&row.new_count)
        );
    }
    o
}

/// Markdown fit for a pull-request comment.
pub fn render_markdown(r: &Report, top: usize) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "### cutr diff: **{}**\n", r.verdict.as_str());
    let _ = writeln!(
        o,
        "{} base run(s) vs {} new run(s); threshold {}%; a change must also exceed twice the run-to-run noise \
         (2% with a single run).\n",
        r.base_files.len(),
        r.new_files.len(),
        r.threshold_pct
    );
    let _ = writeln!(o, "| verdict | what | base | new | change | count |");
    let _ = writeln!(o, "|---|---|---:|---:|---:|---|");
    let mut shown = 0;
    for row in &r.rows {
        if row.verdict == Verdict::Neutral && row.section != "total" {
            continue;
        }
        if shown == top {
            break;
        }
        shown += 1;
        let pct = if row.delta_pct.is_finite() { format!(" ({:+.1}%)", row.delta_pct) } else { String::new() };
        let _ = writeln!(
            o,
            "| {} | {} `{}` | {} | {} | {}{} | {} → {} |",
            row.verdict.as_str(),
            row.section,
            shorten(&row.name, 80).replace('|', "\\|").replace('`', "'"),
            fmt::duration_ns(row.base_mean_ns.round() as u64),
            fmt::duration_ns(row.new_mean_ns.round() as u64),
            signed_duration(row.delta_ns),
            pct,
            counts(&row.base_count),
            counts(&row.new_count)
        );
    }
    let neutral = r.counts.get("neutral").copied().unwrap_or(0);
    let _ = writeln!(o, "\n{neutral} more rows unchanged.");
    o
}
