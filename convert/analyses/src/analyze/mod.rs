//! `cupti-convert analyze`: where each GPU's time went and why, per rank and step, with findings. Definitions
//! (what counts as communication, how overlap is computed, each rule's threshold) in docs/ANALYZE.md.

pub mod findings;
pub mod launch;
pub mod types;
