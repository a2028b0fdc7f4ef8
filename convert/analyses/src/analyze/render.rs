//! `analyze` for people: text (a reader's report) and Markdown (a CI comment). Both give, per GPU, the budget, the
//! idle time by cause, the steps' spread and the longest gaps, then launch health and the findings, most severe
//! first. JSON is the [`Analysis`] serialized.

use std::fmt::Write as _;

use super::idle::IdleCauses;
use super::types::{Budget, Outcome, RuleResult, StepSource};
use super::{Analysis, GpuAnalysis, launch};

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 { "-".to_string() } else { format!("{:.1}%", 100.0 * part as f64 / whole as f64) }
}

/// Where the steps came from, in words.
pub fn step_source_text(s: &StepSource) -> String {
    match s {
        StepSource::NvtxPrefix(p) => format!("NVTX ranges named '{p}...' (--step)"),
        StepSource::ProfilerStep => "PyTorch's ProfilerStep#N ranges".to_string(),
        StepSource::GraphLaunches => "CUDA graph launches (the GPU work is mostly graph replays)".to_string(),
        StepSource::None => "none found (no --step, ProfilerStep#N ranges or graph replays)".to_string(),
    }
}

/// A GPU's row label: `rank 0 GPU 1`.
fn gpu_label(g: &GpuAnalysis) -> String {
    format!("rank {} GPU {}", g.rank, g.device)
}

/// One budget's cells: span, then each part with its share of the span.
fn budget_cells(b: &Budget) -> [String; 6] {
    let part = |ns| format!("{} {}", ms(ns), pct(ns, b.span_ns));
    [
        ms(b.span_ns),
        part(b.computation_ns),
        part(b.communication_exposed_ns),
        part(b.communication_overlapped_ns),
        part(b.copies_exposed_ns),
        part(b.idle_ns),
    ]
}

fn idle_cells(c: &IdleCauses) -> [String; 5] {
    let total = c.total_ns();
    let part = |ns| format!("{} {}", ms(ns), pct(ns, total));
    [
        part(c.launch_bound_ns),
        format!("{} / {}", ms(c.launch_bound_in_api_ns), ms(c.launch_bound_elsewhere_ns)),
        part(c.host_sync_wait_ns),
        part(c.short_gaps_ns),
        part(c.other_ns),
    ]
}

/// A GPU's budgets over all its steps added up (start and end: the first step's start, the last one's end).
fn steps_total(g: &GpuAnalysis) -> Option<Budget> {
    let (first, last) = (g.steps.first()?, g.steps.last()?);
    let mut t = Budget { start: first.budget.start, end: last.budget.end, ..Budget::default() };
    for s in &g.steps {
        let b = &s.budget;
        t.span_ns += b.span_ns;
        t.computation_ns += b.computation_ns;
        t.communication_overlapped_ns += b.communication_overlapped_ns;
        t.communication_exposed_ns += b.communication_exposed_ns;
        t.copies_exposed_ns += b.copies_exposed_ns;
        t.idle_ns += b.idle_ns;
    }
    Some(t)
}

/// Median, min and max of the steps' lengths (ns), and the slowest steps' names with their lengths.
fn step_spread(g: &GpuAnalysis) -> Option<(u64, u64, u64, String)> {
    let mut lens: Vec<u64> = g.steps.iter().map(|s| s.budget.span_ns).collect();
    lens.sort_unstable();
    let (min, max, median) = (*lens.first()?, *lens.last()?, lens[lens.len() / 2]);
    let mut slow: Vec<&super::StepBudget> = g.steps.iter().collect();
    slow.sort_by_key(|s| (std::cmp::Reverse(s.budget.span_ns), s.index));
    let slowest: Vec<String> = slow.iter().take(3).map(|s| format!("{} {} ms", s.name, ms(s.budget.span_ns))).collect();
    Some((median, min, max, slowest.join(", ")))
}

/// How a streamed analysis read the recordings, in words.
fn stream_text(s: &super::AnalyzeStream) -> String {
    format!(
        "Read: streamed over {} chunks in {} windows, {} passes (bounded memory; launch percentiles past 1,048,576 \
         launches a row from a sketch within 0.5%, marked ~)",
        s.chunks, s.windows, s.passes
    )
}

/// The text report.
pub fn render_text(a: &Analysis) -> String {
    let mut o = String::new();
    if let Some(w) = &a.window {
        let _ = writeln!(o, "Window: {w}\n");
    }
    if let Some(s) = &a.stream {
        let _ = writeln!(o, "{}\n", stream_text(s));
    }
    let _ = writeln!(o, "Time budget per GPU (ms and share of the span; parts add up to the span)");
    let _ = writeln!(
        o,
        "  {:<14} {:>12} {:>20} {:>20} {:>20} {:>20} {:>20}  file",
        "GPU", "span", "computation", "comm. exposed", "comm. overlapped", "copies exposed", "idle"
    );
    for g in &a.gpus {
        let c = budget_cells(&g.budget);
        let _ = writeln!(
            o,
            "  {:<14} {:>12} {:>20} {:>20} {:>20} {:>20} {:>20}  {}",
            gpu_label(g),
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            g.file
        );
        if let Some(t) = steps_total(g) {
            let c = budget_cells(&t);
            let _ = writeln!(
                o,
                "  {:<14} {:>12} {:>20} {:>20} {:>20} {:>20} {:>20}  (its {} steps)",
                "  in steps",
                c[0],
                c[1],
                c[2],
                c[3],
                c[4],
                c[5],
                g.steps.len()
            );
        }
    }
    let threshold = a.gpus.first().map_or(super::idle::DEFAULT_SHORT_GAP_NS, |g| g.idle.short_gap_threshold_ns);
    let _ = writeln!(o, "\nIdle time by cause (ms and share of the idle time)");
    let _ = writeln!(
        o,
        "  {:<14} {:>20} {:>21} {:>20} {:>20} {:>20}",
        "GPU",
        "launch-bound",
        "(in API / elsewhere)",
        "host sync wait",
        format!("gaps < {} us", threshold as f64 / 1e3),
        "other"
    );
    for g in &a.gpus {
        let c = idle_cells(&g.idle);
        let _ = writeln!(o, "  {:<14} {:>20} {:>21} {:>20} {:>20} {:>20}", gpu_label(g), c[0], c[1], c[2], c[3], c[4]);
    }
    let _ = writeln!(o, "\nSteps: {}", step_source_text(&a.step_source));
    for g in &a.gpus {
        if let Some((median, min, max, slowest)) = step_spread(g) {
            let idle: u64 = g.steps.iter().map(|s| s.budget.idle_ns).sum();
            let span: u64 = g.steps.iter().map(|s| s.budget.span_ns).sum();
            let _ = writeln!(
                o,
                "  {:<14} {} steps, ms median {} min {} max {}, idle {} of step time; slowest: {slowest}",
                gpu_label(g),
                g.steps.len(),
                ms(median),
                ms(min),
                ms(max),
                pct(idle, span)
            );
        }
    }
    let _ = writeln!(o, "\nLongest idle gaps (s after the first record, as --start takes it; length in ms)");
    for g in &a.gpus {
        for x in &g.longest_gaps {
            let _ = writeln!(
                o,
                "  {:<14} at {:>12.6} {:>10}  {:<14} {} -> {}",
                gpu_label(g),
                x.start.saturating_sub(a.first_record_ns) as f64 / 1e9,
                ms(x.ns),
                x.cause.as_str(),
                short(&x.before),
                short(&x.after)
            );
        }
    }
    o.push('\n');
    launch::render_text(&mut o, &a.launch);
    let _ = writeln!(o, "\nFindings");
    for r in &a.findings {
        finding_text(&mut o, r, a.first_record_ns);
    }
    o
}

/// A name cut to 60 characters (the middle left out), for the gap lines.
fn short(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= 60 {
        return name.to_string();
    }
    let head: String = chars[..40].iter().collect();
    let tail: String = chars[chars.len() - 19..].iter().collect();
    format!("{head}…{tail}")
}

/// One rule's result; times of its evidence in seconds after `first_record_ns`, as `--start` takes them.
fn finding_text(o: &mut String, r: &RuleResult, first_record_ns: u64) {
    match &r.outcome {
        Outcome::Found(f) => {
            let sev = format!("{:?}", f.severity).to_uppercase();
            let _ = writeln!(o, "  [{sev}] {}: {}", r.rule, f.summary);
            let _ = writeln!(o, "      advice: {}", f.advice);
            for e in &f.events {
                let _ = writeln!(
                    o,
                    "      at {:.6} s for {} ms, correlation {}: {}",
                    e.start.saturating_sub(first_record_ns) as f64 / 1e9,
                    ms(e.end.saturating_sub(e.start)),
                    e.correlation,
                    e.what
                );
            }
        }
        Outcome::Clean { checked } => {
            let _ = writeln!(o, "  [clean] {}: {checked}", r.rule);
        }
        Outcome::CannotJudge { why } => {
            let _ = writeln!(o, "  [cannot judge] {}: {why}", r.rule);
        }
    }
}

/// The Markdown report (a pull-request or CI comment).
pub fn render_markdown(a: &Analysis) -> String {
    let mut o = String::from("## cutr analyze\n\n");
    if let Some(w) = &a.window {
        let _ = writeln!(o, "Window: {w}\n");
    }
    if let Some(s) = &a.stream {
        let _ = writeln!(o, "{}\n", stream_text(s));
    }
    o.push_str("### Time budget per GPU (ms, share of the span)\n\n");
    o.push_str("| GPU | file | span | computation | comm. exposed | comm. overlapped | copies exposed | idle |\n");
    o.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for g in &a.gpus {
        let c = budget_cells(&g.budget);
        let _ = writeln!(
            o,
            "| {} | `{}` | {} | {} | {} | {} | {} | {} |",
            gpu_label(g),
            g.file,
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5]
        );
        if let Some(t) = steps_total(g) {
            let c = budget_cells(&t);
            let _ = writeln!(
                o,
                "| {} in its {} steps | | {} | {} | {} | {} | {} | {} |",
                gpu_label(g),
                g.steps.len(),
                c[0],
                c[1],
                c[2],
                c[3],
                c[4],
                c[5]
            );
        }
    }
    o.push_str("\n### Idle time by cause (ms, share of the idle time)\n\n");
    o.push_str("| GPU | launch-bound | in API / elsewhere | host sync wait | short gaps | other |\n");
    o.push_str("|---|---:|---:|---:|---:|---:|\n");
    for g in &a.gpus {
        let c = idle_cells(&g.idle);
        let _ = writeln!(o, "| {} | {} | {} | {} | {} | {} |", gpu_label(g), c[0], c[1], c[2], c[3], c[4]);
    }
    let _ = writeln!(o, "\n### Steps\n\nSource: {}\n", step_source_text(&a.step_source));
    for g in &a.gpus {
        if let Some((median, min, max, slowest)) = step_spread(g) {
            let _ = writeln!(
                o,
                "- {}: {} steps, median {} ms (min {}, max {}); slowest: {slowest}",
                gpu_label(g),
                g.steps.len(),
                ms(median),
                ms(min),
                ms(max)
            );
        }
    }
    o.push_str("\n### Launch health\n\n");
    launch::render_markdown(&mut o, &a.launch);
    o.push_str("\n### Findings\n\n");
    for r in &a.findings {
        match &r.outcome {
            Outcome::Found(f) => {
                let sev = format!("{:?}", f.severity).to_lowercase();
                let _ = writeln!(o, "- **{sev}** `{}`: {}  \n  {}", r.rule, f.summary, f.advice);
            }
            Outcome::Clean { checked } => {
                let _ = writeln!(o, "- clean `{}`: {checked}", r.rule);
            }
            Outcome::CannotJudge { why } => {
                let _ = writeln!(o, "- cannot judge `{}`: {why}", r.rule);
            }
        }
    }
    o
}
