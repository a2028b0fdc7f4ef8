//! Per-kernel rules: low achieved occupancy on kernels with a large share, each hot kernel's bound from its PM
//! counters, and its top stall reason and line from its PC samples. Each judges the hot kernels ([`hot`]): the
//! names with the most GPU time inside the steps (or the span without steps). A rule gives a result per kernel it
//! found something on, else one saying what it checked or why it could not judge.

pub mod bound;
pub mod hot;
pub mod occupancy;
pub mod pm;
pub mod stalls;

use super::super::types::{Context, RuleResult};

/// Every per-kernel rule's result, in a fixed order: `low_occupancy`, `kernel_bound`, `kernel_stalls`.
pub fn rules(cx: &Context<'_>) -> Vec<RuleResult> {
    let t = cx.trace;
    let (hot, windows) = hot::hot_kernels(cx);
    let pm = pm::PmAverages::of(t);
    let mut out = occupancy::rule(t, &hot, &windows, &pm);
    out.extend(bound::rule(t, &hot, &windows, &pm));
    out.extend(stalls::rule(t, &hot, &windows));
    out
}
