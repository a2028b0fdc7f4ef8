//! GPU starvation: a GPU idle over a large share of its steps (or of its span where no steps are known), with
//! the idle time's main cause named: launch-bound (the host did not launch work fast enough), waiting on host
//! synchronizations, back-to-back short gaps, or other. Evidence: the longest gaps.

use super::super::GpuAnalysis;
use super::super::idle::IdleCauses;
use super::super::types::{Context, EventRef, Finding, MAX_EVIDENCE, Outcome, RuleResult, Severity};

/// The rule's name.
pub const RULE: &str = "gpu_starvation";
/// Idle over this share (%) of the step time (or span) is a medium finding.
pub const MEDIUM_IDLE_PCT: f64 = 20.0;
/// Idle over this share (%) is a high finding.
pub const HIGH_IDLE_PCT: f64 = 50.0;

/// The starvation rule over every GPU's budget.
pub fn rules(cx: &Context<'_>, gpus: &[GpuAnalysis]) -> Vec<RuleResult> {
    vec![RuleResult { rule: RULE, outcome: starvation(cx, gpus) }]
}

/// A GPU's judged window (its steps' time, or its span) and the idle causes over it.
fn window(g: &GpuAnalysis) -> (u64, IdleCauses, bool) {
    if g.steps.is_empty() {
        return (g.budget.span_ns, g.idle, false);
    }
    let mut idle = IdleCauses { short_gap_threshold_ns: g.idle.short_gap_threshold_ns, ..IdleCauses::default() };
    let mut ns = 0;
    for s in &g.steps {
        ns += s.budget.span_ns;
        idle.launch_bound_ns += s.idle.launch_bound_ns;
        idle.launch_bound_in_api_ns += s.idle.launch_bound_in_api_ns;
        idle.launch_bound_elsewhere_ns += s.idle.launch_bound_elsewhere_ns;
        idle.host_sync_wait_ns += s.idle.host_sync_wait_ns;
        idle.short_gaps_ns += s.idle.short_gaps_ns;
        idle.other_ns += s.idle.other_ns;
    }
    (ns, idle, true)
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { 100.0 * part as f64 / whole as f64 }
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// A kernel name cut to its first 80 characters (templates make them thousands long).
fn cut(name: &str) -> String {
    match name.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &name[..i]),
        None => name.to_string(),
    }
}

fn starvation(cx: &Context<'_>, gpus: &[GpuAnalysis]) -> Outcome {
    let judged: Vec<(&GpuAnalysis, u64, IdleCauses, bool)> = gpus
        .iter()
        .map(|g| {
            let (ns, idle, in_steps) = window(g);
            (g, ns, idle, in_steps)
        })
        .filter(|w| w.1 > 0)
        .collect();
    let worst = judged.iter().max_by(|a, b| pct(a.2.total_ns(), a.1).total_cmp(&pct(b.2.total_ns(), b.1)));
    let Some(&(g, window_ns, idle, in_steps)) = worst else {
        return Outcome::CannotJudge { why: "no GPU ran any kernel, copy or memset".to_string() };
    };
    let idle_pct = pct(idle.total_ns(), window_ns);
    let what = if in_steps { "of its steps' time" } else { "of its span" };
    let gpu = format!("GPU {} of rank {} ({})", g.device, g.rank, g.file);
    if idle_pct <= MEDIUM_IDLE_PCT {
        let checked = format!(
            "{} GPU(s), {}; the most idle: {gpu}, {idle_pct:.1}% {what} (threshold {MEDIUM_IDLE_PCT}%)",
            judged.len(),
            if cx.steps.is_empty() { "over their spans (no steps)" } else { "over their steps" }
        );
        return Outcome::Clean { checked };
    }
    let severity = if idle_pct > HIGH_IDLE_PCT { Severity::High } else { Severity::Medium };
    let causes = [
        (idle.launch_bound_ns, "launch-bound"),
        (idle.host_sync_wait_ns, "waiting in host synchronizations"),
        (idle.short_gaps_ns, "short gaps between back-to-back ops"),
        (idle.other_ns, "other causes"),
    ];
    let &(main_ns, main) = causes.iter().max_by_key(|c| c.0).expect("four causes");
    let summary = if main == "launch-bound" {
        format!(
            "launch-bound: {gpu} idle {idle_pct:.1}% {what} ({} of {}); for {:.1}% of the idle time the host had \
             not launched the next op yet (its launching thread {:.1}% of that inside CUDA API calls, {:.1}% \
             elsewhere)",
            ms(idle.total_ns()),
            ms(window_ns),
            pct(main_ns, idle.total_ns()),
            pct(idle.launch_bound_in_api_ns, idle.launch_bound_ns),
            pct(idle.launch_bound_elsewhere_ns, idle.launch_bound_ns)
        )
    } else {
        format!(
            "{gpu} idle {idle_pct:.1}% {what} ({} of {}); mostly {main}: {:.1}% of the idle time",
            ms(idle.total_ns()),
            ms(window_ns),
            pct(main_ns, idle.total_ns())
        )
    };
    let advice = match main {
        "launch-bound" => {
            "The host cannot launch work fast enough: capture the step in a CUDA graph (torch.compile \
             mode=\"reduce-overhead\", CUDA graphs), fuse small kernels, or take host work (Python, data loading) \
             off the launching thread."
        }
        "waiting in host synchronizations" => {
            "The host blocks on the GPU while it idles: remove synchronizations inside the step (.item(), .cpu(), \
             cudaDeviceSynchronize, synchronous copies) or move them to the step's end."
        }
        "short gaps between back-to-back ops" => {
            "Many small back-to-back ops: fuse kernels or replay them as a CUDA graph to remove the gaps."
        }
        _ => {
            "The GPU waits on something the host side does not show (an event of another stream, another rank): \
             look at what runs around the longest gaps."
        }
    }
    .to_string();
    // Judged over steps: the gaps with the most time inside them (the span's longest may be set-up before).
    let evidence = if in_steps { &g.longest_step_gaps } else { &g.longest_gaps };
    let mut events: Vec<EventRef> = evidence
        .iter()
        .take(MAX_EVIDENCE)
        .map(|x| EventRef {
            proc: g.proc,
            start: x.start,
            end: x.end,
            correlation: x.after_correlation,
            what: format!(
                "GPU {} idle {} ({}) after {} before {}",
                g.device,
                ms(x.ns),
                x.cause.as_str(),
                cut(&x.before),
                cut(&x.after)
            ),
        })
        .collect();
    events.sort_by_key(|e| e.start);
    Outcome::Found(Finding {
        severity,
        summary,
        advice,
        count: g.long_gaps,
        time_ns: idle.total_ns(),
        share_pct: idle_pct,
        events,
    })
}
