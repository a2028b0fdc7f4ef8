//! `tiny_kernels`: many kernels too short to pay for their own launch. A kernel launched inside a step is tiny
//! when it ran under [`TINY_KERNEL_NS`] or for less time than its launching call took on the host; kernels
//! replayed from a CUDA graph are left out (one launch already pays for them all). The rule fires when tiny
//! kernels are at least [`TINY_COUNT_SHARE_PCT`] of the steps' kernels and their launching calls took at least
//! [`TINY_LAUNCH_FLOOR_PCT`] of the step time: the host spent the step launching work the GPU finishes at once.

use std::collections::BTreeMap;

use super::super::super::types::{Context, EventRef, Outcome, RuleResult};
use super::{Hits, StepWindows, counted, ms, no_steps};

/// A kernel shorter than this is tiny whatever its launch cost.
pub const TINY_KERNEL_NS: u64 = 10_000;
/// Tiny kernels must be at least this share (%) of the steps' kernels.
pub const TINY_COUNT_SHARE_PCT: f64 = 50.0;
/// Their launching calls must take at least this share (%) of the steps' time.
pub const TINY_LAUNCH_FLOOR_PCT: f64 = 5.0;
/// How many kernel names the summary names.
const TOP_NAMES: usize = 3;

pub fn tiny_kernels(cx: &Context<'_>) -> RuleResult {
    const RULE: &str = "tiny_kernels";
    let Some(windows) = StepWindows::of_steps(cx) else { return no_steps(RULE, cx) };
    let t = cx.trace;
    let mut hits = Hits::default();
    let (mut in_steps, mut gpu_ns) = (0u64, 0u64);
    let mut by_name: BTreeMap<&str, u64> = BTreeMap::new();
    for k in t.kernels.iter().filter(|k| k.graph_id == 0) {
        let launcher = t.launcher(k.corr());
        let (start, end) = launcher.map_or((k.start, k.end), |a| (a.start, a.end));
        let Some(clipped) = windows.clip(k.proc, start, end) else { continue };
        in_steps += 1;
        let launch_ns = launcher.map_or(0, |a| a.duration());
        if k.duration() >= TINY_KERNEL_NS && k.duration() >= launch_ns {
            continue;
        }
        gpu_ns += k.duration();
        let name = t.kernel_name(k);
        *by_name.entry(name).or_default() += 1;
        let what = format!("{name} ({} ns, launch {launch_ns} ns)", k.duration());
        // The host's side is what a graph or a fused kernel saves: the launching call (the kernel itself where
        // none was recorded).
        hits.push(clipped, EventRef { proc: k.proc, start: k.start, end: k.end, correlation: k.correlation, what });
    }
    let (count, time_ns) = (hits.count(), hits.time_ns());
    let count_pct = if in_steps == 0 { 0.0 } else { 100.0 * count as f64 / in_steps as f64 };
    let launch_pct = windows.share_pct(time_ns);
    if count_pct < TINY_COUNT_SHARE_PCT || launch_pct < TINY_LAUNCH_FLOOR_PCT {
        let checked = format!(
            "{count} of {in_steps} kernels launched inside {} steps are tiny (under {} us or their launch cost); \
             their launches took {launch_pct:.1}% of step time (fires at {TINY_COUNT_SHARE_PCT}% of kernels and \
             {TINY_LAUNCH_FLOOR_PCT}% of time)",
            windows.count,
            TINY_KERNEL_NS / 1000
        );
        return RuleResult { rule: RULE, outcome: Outcome::Clean { checked } };
    }
    let top = top_names(&by_name);
    let outcome = hits.found(
        &windows,
        |n, ns, pct| {
            format!(
                "{} ({count_pct:.1}% of the steps' kernels, {} on the GPU): launching them took {} ({pct:.1}% of \
                 step time); most: {top}",
                counted(n, "tiny kernel", "tiny kernels"),
                ms(gpu_ns),
                ms(ns)
            )
        },
        "A case for CUDA graphs (torch.compile mode=\"reduce-overhead\", torch.cuda.graph) or for fusing the \
         small kernels: each launch costs more host time than the kernel runs.",
    );
    RuleResult { rule: RULE, outcome }
}

/// `name ×count` of the commonest names, most first.
fn top_names(by_name: &BTreeMap<&str, u64>) -> String {
    let mut v: Vec<(&str, u64)> = by_name.iter().map(|(n, c)| (*n, *c)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    v.iter().take(TOP_NAMES).map(|(n, c)| format!("{} x{c}", short_name(n))).collect::<Vec<_>>().join(", ")
}

/// A demangled kernel name without its return type, template and parameters, for one-line summaries:
/// `void at::native::reduce_kernel<128, 4, ...>(...)` is `at::native::reduce_kernel`.
pub fn short_name(name: &str) -> &str {
    let name = name.strip_prefix("void ").unwrap_or(name);
    let end = name.find(['<', '(']).unwrap_or(name.len());
    if end == 0 { name } else { &name[..end] }
}
