//! The trace model (`cutr-model`) written for viewers: laid out as a [`timeline`] (tracks, nesting lanes, arrows,
//! shards), then rendered in parallel as a Perfetto protobuf trace ([`perfetto`]: hand-encoded, streamed) or a
//! Chrome trace JSON in PyTorch profiler (Kineto) conventions ([`chrome`]), into one ordered, optionally gzipped
//! file ([`output`]), refused past a [`size_limit`]; `analyze`'s findings drawn as a track of their own
//! ([`findings`]). [`export`] does all of it.

pub mod args;
pub mod chrome;
mod export;
pub mod findings;
mod gpu_args;
pub mod output;
pub mod perfetto;
pub mod protobuf;
pub mod size_limit;
mod slice;
pub mod timeline;

pub use export::{ExportOptions, ExportSummary, Format, Progress, Stage, export, shard_slices_for};
pub use size_limit::SizeLimit;
pub use timeline::{DriverCalls, Timeline};
