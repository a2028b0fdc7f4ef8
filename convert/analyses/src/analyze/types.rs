//! The shapes every part of `analyze` shares: steps, the time budget, findings and their evidence. Kept apart
//! so that each part (budget, idle causes, launch health, each family of rules) is written against them alone.

use compact_str::CompactString;
use cutr_model::{ProcId, Trace};
use serde::Serialize;

/// One step of one process: the window rules judge against and budgets are split by.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// The file (process) whose step it is.
    pub proc: ProcId,
    /// The process's rank in the job ([`Trace::job_ranks`]).
    pub rank: u32,
    /// 0-based, in time order within the process.
    pub index: u32,
    /// What named it: the NVTX range's name (`ProfilerStep#12`, `step 3`), or `graph launch N` (held inline up to 24
    /// bytes: a long recording has millions of steps).
    pub name: CompactString,
    pub start: u64,
    pub end: u64,
}

/// Where the steps came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "detail")]
pub enum StepSource {
    /// NVTX ranges whose name starts with the prefix given by `--step PREFIX`.
    NvtxPrefix(String),
    /// PyTorch's `ProfilerStep#N` ranges, found without being asked.
    ProfilerStep,
    /// Each CUDA graph launch is a step (a program that replays one graph per iteration).
    GraphLaunches,
    /// No steps known: rules that need them say so.
    None,
}

/// The time budget of one GPU over one window, by interval union: every instant of `[start, end)` is counted in
/// exactly one part, so `computation_ns + communication_exposed_ns + copies_exposed_ns + idle_ns == span_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Budget {
    pub start: u64,
    pub end: u64,
    pub span_ns: u64,
    /// Some kernel that is not communication ran.
    pub computation_ns: u64,
    /// Communication kernels ran while computation ran too (hidden; not a part of the sum).
    pub communication_overlapped_ns: u64,
    /// Communication ran and no computation.
    pub communication_exposed_ns: u64,
    /// Copies or memsets ran and neither computation nor communication.
    pub copies_exposed_ns: u64,
    /// Nothing ran.
    pub idle_ns: u64,
}

/// How bad a finding is, judged by its share of the step time (thresholds in docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    High,
    Medium,
    Low,
}

impl Severity {
    /// The band of a share (%): `high` or more is high, `medium` or more medium, below that low. Each family of
    /// rules has its own bands (docs/ANALYZE.md).
    pub fn by_share(share_pct: f64, high: f64, medium: f64) -> Severity {
        if share_pct >= high {
            Severity::High
        } else if share_pct >= medium {
            Severity::Medium
        } else {
            Severity::Low
        }
    }
}

/// One event a finding points at, so a reader (and the viewers' findings track) can find it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventRef {
    pub proc: ProcId,
    pub start: u64,
    pub end: u64,
    /// CUPTI's correlation id (0 where the event has none).
    pub correlation: u32,
    /// What it is, e.g. `cudaMemcpy 4.0 MB HtoD pageable` or a kernel's name.
    pub what: String,
}

/// A rule that found something.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// One line, with the figures: "412 synchronous copies inside steps, 18.3% of step time".
    pub summary: String,
    /// What to do about it, one or two sentences.
    pub advice: String,
    /// How many events the rule counted.
    pub count: u64,
    /// Their time (ns), by union where they overlap.
    pub time_ns: u64,
    /// That time as a share of the steps' time (or of the span where no steps are known).
    pub share_pct: f64,
    /// The first few events (at most [`MAX_EVIDENCE`]), in time order.
    pub events: Vec<EventRef>,
}

/// At most this many events are given as evidence per finding.
pub const MAX_EVIDENCE: usize = 5;

/// What a rule concluded.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    Found(Finding),
    /// Looked and found nothing beyond the threshold; `checked` says what was looked at.
    Clean {
        checked: String,
    },
    /// Could not judge (no steps, no counters, no PC samples...): says why instead of staying silent.
    CannotJudge {
        why: String,
    },
}

/// One rule's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleResult {
    /// The rule's stable name, e.g. `sync_copy_in_step` (docs list every rule and its threshold).
    pub rule: &'static str,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What every rule reads.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    pub trace: &'a Trace,
    /// Every process's steps, by (proc, start).
    pub steps: &'a [Step],
    pub step_source: &'a StepSource,
}
