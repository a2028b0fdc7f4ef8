//! `analyze` over a stream, for recordings too large to load: two passes over the activity in time order
//! ([`cutr_model::stream`]), each holding only what its answer needs. The first finds the steps and each process's
//! GPU span, which every figure of the second is judged against; the second folds each window's [`Batch`] into
//! the GPUs' budgets and idle causes, launch health and the rules, and gives the [`super::Analysis`] a load gives.
//!
//! Every fold of the second pass has the same shape: built from the [`FirstPass`] (and the rowless trace the stream
//! hands on: processes, names, ranks), given each window's [`Batch`] with `batch`, and ended with `finish`, which
//! returns its part of the report and the warnings of what it had to settle early
//! ([`cutr_model::stream::StreamOptions::max_waiting`]).

pub mod host_rules;
pub mod kernel_rules;
pub mod launch;

use cutr_model::stream::Batch;

use super::types::{Step, StepSource};

/// What the first pass finds: what the second pass's folds judge against.
#[derive(Clone, Debug, PartialEq)]
pub struct FirstPass {
    pub step_source: StepSource,
    /// Every process's steps, sorted by (process, start), as [`super::steps::find_steps`] gives them on a load.
    pub steps: Vec<Step>,
    /// Per process (by [`cutr_model::ProcId::index`]): the earliest start and latest end of its kernels, copies and
    /// memsets (every one, empty or not); `None` for a process with none.
    pub gpu_spans: Vec<Option<(u64, u64)>>,
}

/// The GPU ops of a batch in the order [`Batch::gpu_calls`] and [`Batch::gpu_ranges`] index them: kernels, then
/// copies, then memsets.
pub fn gpu_op_count(b: &Batch) -> usize {
    b.kernels.len() + b.memcpys.len() + b.memsets.len()
}
