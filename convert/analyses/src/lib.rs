//! Analyses of `.cutr` recordings, each in its own module reading the trace model (`cutr-model`) and none reaching
//! into another: [`info`] (what a file holds, from its container alone), [`stats`] (where GPU time went, like
//! `nsys stats`), [`diff`] (what got slower between runs, with a verdict for CI), [`source`] (PC samples by source
//! line), [`ranks`] (the ranks of a job side by side, stragglers per step) and [`analyze`] (a time budget, idle
//! causes, launch health and findings, which uses the others' public results so that each figure has one
//! definition). Each returns a report that serializes to JSON and renders as text.

pub mod analyze;
pub mod diff;
pub mod fmt;
pub mod info;
mod info_verify;
pub mod ranks;
pub mod source;
pub mod source_diff;
pub mod stats;
