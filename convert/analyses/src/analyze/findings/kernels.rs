//! Per-kernel rules: low achieved occupancy on kernels with a large share, each hot kernel's bound from its PM
//! counters, and its top stall reason and line from its PC samples.

use super::super::types::{Context, RuleResult};

/// Every per-kernel rule's result, in a fixed order.
pub fn rules(_cx: &Context<'_>) -> Vec<RuleResult> {
    Vec::new()
}
