//! Recordings for tests and benchmarks: a deterministic generator of realistic CUPTI activity with exact ground
//! truth ([`write_file`], [`Synth`]), and forgeries of real files (checksums recomputed, sizes and counts hostile)
//! to prove that readers survive them ([`forge`]).

pub mod forge;
mod loop_model;

pub use loop_model::*;
