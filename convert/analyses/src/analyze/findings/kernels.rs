//! Per-kernel rules: low achieved occupancy on kernels with a large share, each hot kernel's bound from its PM
//! counters, and its top stall reason and line from its PC samples. Each judges the hot kernels ([`hot`]): the
//! names with the most GPU time inside the steps (or the span without steps). A rule gives a result per kernel it
//! found something on, else one saying what it checked or why it could not judge.

pub mod bound;
pub mod hot;
pub mod occupancy;
pub mod pm;
pub mod stalls;
pub mod tally;

use cutr_model::Trace;

use super::super::types::{Context, RuleResult};

/// Every per-kernel rule's result, in a fixed order: `low_occupancy`, `kernel_bound`, `kernel_stalls`.
pub fn rules(cx: &Context<'_>) -> Vec<RuleResult> {
    let t = cx.trace;
    let (hot, windows) = hot::hot_kernels(cx);
    judge(t, &hot, &windows, &pm::PmAverages::of(t))
}

/// The rules over hot kernels found and PM averages computed (of a loaded trace, or of a stream: `t` then holds
/// no rows, only what the rules read besides the kernels: devices, counter series, `source`'s notes).
pub(crate) fn judge(t: &Trace, hot: &[hot::HotKernel], windows: &hot::Windows, pm: &pm::PmAverages) -> Vec<RuleResult> {
    let mut out = occupancy::rule(t, hot, windows, pm);
    out.extend(bound::rule(t, hot, windows, pm));
    out.extend(stalls::rule(t, hot, windows));
    out
}
