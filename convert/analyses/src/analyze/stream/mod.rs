//! `analyze` over a stream, for recordings too large to load: two passes over the activity in time order
//! ([`cutr_model::stream`]), each holding only what its answer needs. The first finds the steps and each process's
//! GPU span, which every figure of the second is judged against; the second folds each window's [`Batch`] into
//! the GPUs' budgets and idle causes, launch health and the rules, and gives the [`super::Analysis`] a load gives.
//!
//! Every fold of the second pass has the same shape: built from the [`FirstPass`] (and the rowless trace the stream
//! hands on: processes, names, ranks), given each window's [`Batch`] with `batch`, and ended with `finish`, which
//! returns its part of the report and the warnings of what it had to settle early
//! ([`cutr_model::stream::StreamOptions::max_waiting`]).

mod first;
mod gpus;
pub mod host_rules;
pub mod kernel_rules;
pub mod launch;
mod steps;
mod sweep;

use std::path::PathBuf;

use cutr_format::Reader;
use cutr_model::stream::{Batch, StreamEnd, StreamOptions, stream_readers_in};
use cutr_model::{Filter, LoadError, Trace};

use super::intervals::ProcWindows;
use super::types::{Context, Outcome, RuleResult, Severity, Step, StepSource};
use super::{Analysis, AnalyzeOptions, AnalyzeStream, findings};

/// What the first pass finds: what the second pass's folds judge against.
#[derive(Clone, Debug, PartialEq)]
pub struct FirstPass {
    pub step_source: StepSource,
    /// Every process's steps, sorted by (process, start), as [`super::steps::find_steps`] gives them on a load.
    pub steps: Vec<Step>,
    /// Per process (by [`cutr_model::ProcId::index`]): the earliest start and latest end of its kernels, copies and
    /// memsets (every one, empty or not); `None` for a process with none.
    pub gpu_spans: Vec<Option<(u64, u64)>>,
    /// The steps' windows, merged per process (empty steps left out; `None` when no step has time): made once and
    /// borrowed by every fold that judges inside the steps (a day of steps is millions of windows).
    pub step_windows: Option<ProcWindows>,
}

impl FirstPass {
    /// The first pass's findings over `processes` files, the steps' windows made from `steps`.
    pub fn new(
        processes: usize,
        step_source: StepSource,
        steps: Vec<Step>,
        gpu_spans: Vec<Option<(u64, u64)>>,
    ) -> FirstPass {
        let step_windows = ProcWindows::of_step_list(processes, &steps);
        FirstPass { step_source, steps, gpu_spans, step_windows }
    }
}

/// The GPU ops of a batch in the order [`Batch::gpu_calls`] and [`Batch::gpu_ranges`] index them: kernels, then
/// copies, then memsets.
pub fn gpu_op_count(b: &Batch) -> usize {
    b.kernels.len() + b.memcpys.len() + b.memsets.len()
}

/// What [`analyze_streamed`] gives: the report, what the stream saw, and the warnings of what was settled early.
pub struct Streamed {
    pub analysis: Analysis,
    /// The processes and names (no rows), with each file's join statistics and problems.
    pub trace: Trace,
    /// The second pass's counts.
    pub end: StreamEnd,
    pub warnings: Vec<String>,
}

/// The options both passes stream with: GPU work held for its launching call (a gap's next op needs it), and the
/// counter series (the kernel rules' PM averages).
pub fn stream_options(base: &StreamOptions) -> StreamOptions {
    StreamOptions { hold_unlaunched: true, counter_feed: true, ..base.clone() }
}

/// `analyze` over `readers` (one job's files, `paths` label them) in two passes, the records `filter` keeps.
pub fn analyze_streamed(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &AnalyzeOptions,
    stream_opts: &StreamOptions,
    filter: &Filter,
) -> Result<Streamed, LoadError> {
    let sopts = stream_options(stream_opts);
    let mut first: Option<first::FirstFold> = None;
    let mut launch_first = launch::LaunchFirstFold::new(&sopts);
    // Each pass's folds are independent of one another: each window's folded by all of them at once.
    let (trace, _) = stream_readers_in(paths, readers, &sopts, filter, |t, _, b| {
        let first = first.get_or_insert_with(|| first::FirstFold::new(t, opts.step_prefix.as_deref()));
        rayon::join(|| first.batch(t, &b), || launch_first.batch(t, &b));
    })?;
    let first = first.unwrap_or_else(|| first::FirstFold::new(&trace, opts.step_prefix.as_deref())).finish(&trace);
    let (launch_first, mut warnings) = launch_first.finish(&trace);
    let mut gpus_fold = gpus::GpuFold::new(&trace, &first, opts.short_gap_ns, sopts.max_waiting);
    let mut launch_fold = launch::LaunchFold::new(&trace, &first, &launch_first, &sopts);
    let mut host_fold = host_rules::HostRulesFold::new(&trace, &first, &sopts);
    let mut kernels_fold = kernel_rules::KernelRulesFold::new(&trace, &first, &sopts);
    // The second pass makes its trace again (the same names, interned in the same order): a day of steps named
    // apart is millions of names, not to be held twice.
    drop(trace);
    let (mut trace, end) = stream_readers_in(paths, readers, &sopts, filter, |t, _, b| {
        rayon::join(
            || rayon::join(|| gpus_fold.batch(t, &b), || launch_fold.batch(t, &b)),
            || rayon::join(|| host_fold.batch(t, &b), || kernels_fold.batch(t, &b)),
        );
    })?;
    // The stall rule reads each kernel's hottest line and stall reason, which the PC samples give (read of the
    // files' PC sample chunks and cubins, not of the rows).
    for (path, r) in paths.iter().zip(readers) {
        for w in crate::source::annotate(&mut trace, &[r]) {
            warnings.push(format!("{}: {w}", path.display()));
        }
    }
    // The rules' folds first: what they hold per step is gone before the GPUs' step budgets are made.
    let (host_rules, host_warnings) = host_fold.finish(&trace);
    let (kernel_rules, kernel_warnings) = kernels_fold.finish(&trace);
    let (launch, launch_warnings) = launch_fold.finish(&trace, end.span.0);
    let (gpus, gpu_warnings) = gpus_fold.finish(&trace, &first.steps);
    warnings.extend(gpu_warnings.into_iter().chain(launch_warnings).chain(host_warnings).chain(kernel_warnings));
    let FirstPass { step_source, steps, .. } = first;
    let cx = Context { trace: &trace, steps: &steps, step_source: &step_source };
    let mut found: Vec<RuleResult> = host_rules;
    found.extend(kernel_rules);
    found.extend(findings::starvation::rules(&cx, &gpus));
    sort_findings(&mut found);
    // The two passes may each say the same of the same rows.
    let mut seen = std::collections::HashSet::new();
    warnings.retain(|w| seen.insert(w.clone()));
    let stream = Some(AnalyzeStream { passes: 2, chunks: end.chunks, windows: end.windows });
    let analysis = Analysis {
        first_record_ns: end.span.0,
        window: None,
        stream,
        step_source,
        gpus,
        launch,
        findings: found,
        steps,
    };
    Ok(Streamed { analysis, trace, end, warnings })
}

/// Found ones first by severity, then clean ones, then those that could not judge (a stable sort: each group in
/// the rules' order), as [`super::analyze`] orders them.
pub fn sort_findings(findings: &mut [RuleResult]) {
    findings.sort_by_key(|r| match &r.outcome {
        Outcome::Found(f) => (0, f.severity),
        Outcome::Clean { .. } => (1, Severity::Low),
        Outcome::CannotJudge { .. } => (2, Severity::Low),
    });
}
