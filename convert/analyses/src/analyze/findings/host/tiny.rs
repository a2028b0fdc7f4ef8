//! `tiny_kernels`: many kernels too short to pay for their own launch. A kernel launched inside a step is tiny
//! when it ran under [`TINY_KERNEL_NS`] or for less time than its launching call took on the host; kernels
//! replayed from a CUDA graph are left out (one launch already pays for them all). The rule fires when tiny
//! kernels are at least [`TINY_COUNT_SHARE_PCT`] of the steps' kernels and their launching calls took at least
//! [`TINY_LAUNCH_FLOOR_PCT`] of the step time: the host spent the step launching work the GPU finishes at once.

use std::borrow::Cow;
use std::collections::BTreeMap;

use cutr_model::{ApiCall, Kernel, NameId, Trace};
use rustc_hash::FxHashMap;

use super::super::super::types::{Context, Outcome, RuleResult};
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
    let Some(windows) = StepWindows::of_steps(cx) else { return no_steps(TinyKernels::RULE, cx) };
    let t = cx.trace;
    let mut tiny = TinyKernels::default();
    for k in &t.kernels {
        tiny.add(t, &windows, k, t.launcher(k.corr()));
    }
    tiny.result(t, &windows)
}

/// What the rule folds kernel by kernel, from a load or a stream.
#[derive(Default)]
pub(crate) struct TinyKernels {
    pub(crate) hits: Hits,
    /// Kernels launched inside steps (graphs' left out), and the tiny ones' GPU time.
    in_steps: u64,
    gpu_ns: u64,
    /// Tiny kernels by name id (ids of one display name are summed at the end).
    by_name: FxHashMap<NameId, u64>,
}

impl TinyKernels {
    pub(crate) const RULE: &str = "tiny_kernels";

    /// Counts kernel `k`, launched by `launcher` (`None`: no call recorded or known).
    pub(crate) fn add(&mut self, t: &Trace, windows: &StepWindows, k: &Kernel, launcher: Option<&ApiCall>) {
        if k.graph_id != 0 {
            return;
        }
        let (start, end) = launcher.map_or((k.start, k.end), |a| (a.start, a.end));
        let Some(clipped) = windows.clip(k.proc, start, end) else { return };
        self.in_steps += 1;
        let launch_ns = launcher.map_or(0, |a| a.end.saturating_sub(a.start));
        let duration = k.end.saturating_sub(k.start);
        if duration >= TINY_KERNEL_NS && duration >= launch_ns {
            return;
        }
        self.gpu_ns = self.gpu_ns.saturating_add(duration);
        *self.by_name.entry(k.name).or_default() += 1;
        let what = || format!("{} ({duration} ns, launch {launch_ns} ns)", kernel_name(t, k.name));
        // The host's side is what a graph or a fused kernel saves: the launching call (the kernel itself where
        // none was recorded).
        self.hits.offer(clipped, (k.start, k.proc, k.correlation), k.end, what);
    }

    pub(crate) fn result(mut self, t: &Trace, windows: &StepWindows) -> RuleResult {
        let (count, time_ns) = (self.hits.count(), self.hits.time_ns());
        let in_steps = self.in_steps;
        let count_pct = if in_steps == 0 { 0.0 } else { 100.0 * count as f64 / in_steps as f64 };
        let launch_pct = windows.share_pct(time_ns);
        if count_pct < TINY_COUNT_SHARE_PCT || launch_pct < TINY_LAUNCH_FLOOR_PCT {
            let checked = format!(
                "{count} of {in_steps} kernels launched inside {} steps are tiny (under {} us or their launch \
                 cost); their launches took {launch_pct:.1}% of step time (fires at {TINY_COUNT_SHARE_PCT}% of \
                 kernels and {TINY_LAUNCH_FLOOR_PCT}% of time)",
                windows.count,
                TINY_KERNEL_NS / 1000
            );
            return RuleResult { rule: Self::RULE, outcome: Outcome::Clean { checked } };
        }
        let mut by_name: BTreeMap<Cow<'_, str>, u64> = BTreeMap::new();
        for (id, n) in &self.by_name {
            *by_name.entry(kernel_name(t, *id)).or_default() += n;
        }
        let top = top_names(&by_name);
        let gpu_ns = self.gpu_ns;
        let outcome = self.hits.found(
            windows,
            |n, ns, pct| {
                format!(
                    "{} ({count_pct:.1}% of the steps' kernels, {} on the GPU): launching them took {} ({pct:.1}% \
                     of step time); most: {top}",
                    counted(n, "tiny kernel", "tiny kernels"),
                    ms(gpu_ns),
                    ms(ns)
                )
            },
            "A case for CUDA graphs (torch.compile mode=\"reduce-overhead\", torch.cuda.graph) or for fusing the \
             small kernels: each launch costs more host time than the kernel runs.",
        );
        RuleResult { rule: Self::RULE, outcome }
    }
}

/// A kernel name demangled, as [`Trace::kernel_name`] gives it on a load: a lookup there, demangled here where
/// the trace has no demangled names (a stream's).
pub(crate) fn kernel_name(t: &Trace, name: NameId) -> Cow<'_, str> {
    let shown = t.display_name_id(name);
    if shown != name {
        return Cow::Borrowed(t.names.get(shown));
    }
    let raw = t.names.get(name);
    if raw.starts_with("_Z") { Cow::Owned(cutr_model::demangle::demangle(raw)) } else { Cow::Borrowed(raw) }
}

/// `name ×count` of the commonest names, most first.
fn top_names(by_name: &BTreeMap<Cow<'_, str>, u64>) -> String {
    let mut v: Vec<(&str, u64)> = by_name.iter().map(|(n, c)| (n.as_ref(), *c)).collect();
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
