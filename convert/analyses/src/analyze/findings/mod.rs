//! Findings: rules, each with a threshold relative to the step, its evidence and a severity
//! ([`super::types::RuleResult`]). Host-side rules (copies, synchronizations, tiny kernels, stragglers) in
//! [`host`]; per-kernel rules (occupancy, counters' bound, PC samples' stall) in [`kernels`].

pub mod host;
pub mod kernels;
pub mod starvation;
