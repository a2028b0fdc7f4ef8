//! `source`'s text and CSV: per kernel its stall split, functions (where it calls any), lines and PCs.

use std::fmt::Write as _;

use super::{KernelSource, LineRow, SourceReport, Stalls};

/// `reason N%, …` of the first `n` reasons.
fn stalls(s: &Stalls, total: u64, n: usize) -> String {
    s.iter()
        .take(n)
        .map(|(k, v)| format!("{k} {:.0}%", 100.0 * *v as f64 / total.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Text for people: per kernel, its stall split, functions, lines and PCs.
pub fn render_text(r: &SourceReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{}: {} PC samples in {} kernels ({} taken by CUPTI, {} dropped, {} in kernels it does not report); {} \
         cubins, {} with line tables",
        r.files.join(", "),
        crate::fmt::thousands(r.samples),
        r.kernels.len(),
        crate::fmt::thousands(r.cupti_total_samples),
        crate::fmt::thousands(r.dropped_samples),
        crate::fmt::thousands(r.non_user_samples),
        r.cubins,
        r.cubins_with_lines
    );
    for k in &r.kernels {
        let _ =
            writeln!(o, "\n{} ({:.1}% of samples, {} samples)", k.name, k.percent, crate::fmt::thousands(k.samples));
        let _ = writeln!(o, "  stalls: {}", stalls(&k.stalls, k.samples, 6));
        functions_text(&mut o, k);
        if k.has_lines {
            let _ = writeln!(o, "  {:>10} {:>6}  {:<40} stalls", "samples", "%", "line");
            for l in &k.lines {
                let _ = writeln!(
                    o,
                    "  {:>10} {:>5.1}%  {:<40} {}",
                    crate::fmt::thousands(l.samples),
                    l.percent,
                    line_text(k, l),
                    stalls(&l.stalls, l.samples, 3)
                );
            }
        } else if let Some(why) = k.line_tables.why_no_lines() {
            let _ = writeln!(o, "  ({why})");
        }
        let _ = writeln!(o, "  {:>10} {:>6}  {:<10} {:<24} stalls", "samples", "%", "SASS", "line");
        for p in &k.pcs {
            let mut at = p.location.clone();
            if !p.function.is_empty() && p.function != k.name {
                at = format!("{} in {}", if at.is_empty() { "(no line)" } else { &at }, short(&p.function));
            }
            let _ = writeln!(
                o,
                "  {:>10} {:>5.1}%  {:<10} {:<24} {}",
                crate::fmt::thousands(p.samples),
                p.percent,
                format!("+{:#06x}", p.pc_offset),
                at,
                stalls(&p.stalls, p.samples, 3)
            );
            if !p.sass.is_empty() {
                let _ = writeln!(o, "  {:>10} {:>6}  {:<10} {}", "", "", "", p.sass);
            }
        }
    }
    o
}

/// A function's name without its parameters, for the PC column (`gather(unsigned int const*, …)` -> `gather`).
fn short(name: &str) -> &str {
    name.split_once('(').map_or(name, |(n, _)| n)
}

/// `file:line (inlined at …) in FUNCTION (called from file:line, …)`: the function named where it is not the
/// kernel, its call sites where known.
fn line_text(k: &KernelSource, l: &LineRow) -> String {
    let mut at = if l.file.is_empty() { "(no line)".to_string() } else { format!("{}:{}", l.file, l.line) };
    if !l.inlined_at.is_empty() {
        at.push_str(&format!(" (inlined at {})", l.inlined_at.join(" <- ")));
    }
    if !l.function.is_empty() && l.function != k.name {
        at.push_str(&format!(" in {}", l.function));
        if !l.called_from.is_empty() {
            at.push_str(&format!(" (called from {})", l.called_from.join(", ")));
        }
    }
    at
}

/// The functions of a kernel that calls any: exclusive and inclusive samples, and each call site's share; why call
/// sites are unknown, and what no call reaches.
fn functions_text(o: &mut String, k: &KernelSource) {
    if k.functions.len() < 2 {
        return;
    }
    let _ = writeln!(o, "  {:>10} {:>6} {:>10} {:>6}  function", "exclusive", "%", "inclusive", "%");
    for f in &k.functions {
        let _ = writeln!(
            o,
            "  {:>10} {:>5.1}% {:>10} {:>5.1}%  {} [{:#x}, +{}]",
            crate::fmt::thousands(f.exclusive),
            f.exclusive_percent,
            crate::fmt::thousands(f.inclusive),
            f.inclusive_percent,
            f.name,
            f.start,
            f.size
        );
        for c in &f.called_from {
            let _ = writeln!(
                o,
                "  {:>10} {:>6} {:>10} {:>6}    called from {} (+{:#06x} in {}, weight {})",
                "",
                "",
                crate::fmt::thousands(c.samples),
                "",
                c.line,
                c.offset,
                short(&c.caller),
                crate::fmt::thousands(c.weight)
            );
        }
    }
    if let Some(why) = &k.call_sites_unknown {
        let _ = writeln!(o, "  (call sites unknown: {why}; inclusive figures are the exclusive ones)");
    }
    if k.uncharged_samples > 0 {
        let _ = writeln!(
            o,
            "  ({} samples are in functions no known call reaches: charged to no call site)",
            crate::fmt::thousands(k.uncharged_samples)
        );
    }
}

/// CSV of every kernel's lines: one row per (kernel, line), with the function holding the line and its call sites.
pub fn render_csv(r: &SourceReport) -> String {
    let field =
        |s: &str| if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() };
    let mut o = String::from("kernel,file,line,samples,percent,top_stall,top_stall_samples,function,called_from\n");
    for k in &r.kernels {
        for l in &k.lines {
            let (stall, n) = l.stalls.first().cloned().unwrap_or_default();
            o.push_str(&format!(
                "{},{},{},{},{:.3},{},{},{},{}\n",
                field(&k.name),
                field(&l.file),
                l.line,
                l.samples,
                l.percent,
                stall,
                n,
                field(&l.function),
                field(&l.called_from.join(" "))
            ));
        }
    }
    o
}
