//! Production controls: what turns recording on and off, and what writes it out, while the job runs: the control
//! socket and signals, capture ranges, the flight recorder's ring and its triggers.

pub mod capture;
pub mod control;
pub mod ring;
pub mod triggers;
