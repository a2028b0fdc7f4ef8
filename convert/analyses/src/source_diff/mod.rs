//! `cupti-convert source --diff BASE NEW`: what changed between two sets of recordings, source line by source line,
//! from their PC samples (docs/SOURCE_DIFF.md).
//!
//! Each side is `source`'s report over its recordings ([`crate::source::report`], every line and PC); kernels are
//! matched by demangled name. Per kernel, every source line (`file:line`) and, where both sides ran the same cubin
//! (equal CRCs), every SASS offset is a row: its share of the kernel's samples and of each stall reason on each
//! side, the change in percentage points, and a verdict ([`Change`]): **grew** / **dropped** when the change is at
//! least the threshold (`--threshold`, percentage points of the kernel's samples) *and* beyond sampling noise
//! (`noise`: a two-proportion z test per row, Holm-corrected over every row of the report at 99% family-wise);
//! **too few samples** when it is not beyond noise and the counts could not show a change of the threshold's size;
//! **unchanged** otherwise. The threshold is what keeps run-to-run variation that is more than multinomial noise
//! (clocks, placement of warps) from being called a change.

mod build;
mod noise;
mod render;

use serde::Serialize;

use crate::source::{SourceOptions, SourceReport};

pub use render::{render_markdown, render_text};

/// The confidence of "beyond sampling noise", family-wise over every row of a report.
pub const CONFIDENCE: f64 = 0.99;

/// What `source --diff` compares, and how strictly.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceDiffOptions {
    /// A change of share smaller than this (percentage points of the kernel's samples) is no change, however
    /// significant.
    pub threshold_pp: f64,
}

impl Default for SourceDiffOptions {
    fn default() -> Self {
        SourceDiffOptions { threshold_pp: DEFAULT_THRESHOLD_PP }
    }
}

/// The default `--threshold`: 1 percentage point of a kernel's samples. The fixtures' A/A pairs move by at most
/// 0.015 pp per line and 0.02 pp per SASS offset (docs/SOURCE_DIFF.md); a change worth reading moves more.
pub const DEFAULT_THRESHOLD_PP: f64 = 1.0;

/// A row's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Its share grew by the threshold or more, beyond noise (`base_samples` 0: the row is new).
    Grew,
    /// Its share dropped by the threshold or more, beyond noise (`new_samples` 0: the row is gone).
    Dropped,
    /// Within the threshold, or not beyond noise where the counts could show a change of the threshold's size.
    Unchanged,
    /// Not beyond noise, and the counts could not show a change of the threshold's size.
    TooFewSamples,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Grew => "grew",
            Change::Dropped => "dropped",
            Change::Unchanged => "unchanged",
            Change::TooFewSamples => "too few samples",
        }
    }
}

/// A row's share of its kernel's samples on each side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Share {
    pub base_samples: u64,
    pub new_samples: u64,
    /// Percent of the kernel's samples.
    pub base_pct: f64,
    pub new_pct: f64,
    /// `new_pct - base_pct`.
    pub change_pp: f64,
    /// Holm-adjusted two-sided p-value of the z test (beyond noise below 1 - [`CONFIDENCE`]).
    pub p_adjusted: f64,
    pub change: Change,
    /// The kernel's samples on each side (the test's sizes).
    #[serde(skip)]
    totals: (u64, u64),
}

/// A stall reason's share of the kernel's samples, within a row or over the kernel.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReasonShare {
    pub reason: String,
    #[serde(flatten)]
    pub share: Share,
}

/// A source line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LineDiff {
    /// `file:line`.
    pub location: String,
    pub file: String,
    pub dir: String,
    pub line: u32,
    #[serde(flatten)]
    pub share: Share,
    /// Per stall reason seen on the line, the largest change first.
    pub stalls: Vec<ReasonShare>,
}

/// A SASS offset of a kernel whose cubin is the same (by CRC) on both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PcDiff {
    pub pc_offset: u64,
    /// `file:line`, empty without line tables.
    pub location: String,
    #[serde(flatten)]
    pub share: Share,
    pub stalls: Vec<ReasonShare>,
}

/// One kernel on both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelDiff {
    /// Demangled name.
    pub name: String,
    pub base_samples: u64,
    pub new_samples: u64,
    /// CRCs of the cubins the kernel's samples came from, each side.
    pub base_cubins: Vec<u64>,
    pub new_cubins: Vec<u64>,
    /// Both sides ran one and the same cubin: SASS offsets are compared too.
    pub same_cubin: bool,
    /// How far the kernel's split by stall reason moved: half the sum of the reasons' absolute changes (total
    /// variation), in percentage points. Kernels are ordered by it, largest first.
    pub stall_mix_moved_pp: f64,
    /// The same over its lines.
    pub line_mix_moved_pp: f64,
    /// The kernel's samples per stall reason, the largest change first.
    pub stalls: Vec<ReasonShare>,
    /// Every line of either side, the largest change first.
    pub lines: Vec<LineDiff>,
    /// Every SASS offset of either side, the largest change first; empty unless `same_cubin`.
    pub pcs: Vec<PcDiff>,
    /// Why lines or offsets are missing, if they are.
    pub notes: Vec<String>,
}

/// The overall verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A line's share grew beyond the threshold and noise (exit code 3); for a kernel with no line tables on
    /// either side, a SASS offset's.
    Grew,
    /// No line grew beyond the threshold and noise.
    Unchanged,
    /// No kernel is on both sides (exit code 4): nothing compared.
    DifferentPrograms,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Grew => "grew",
            Verdict::Unchanged => "unchanged",
            Verdict::DifferentPrograms => "different programs",
        }
    }
}

/// What `source --diff` found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SourceDiff {
    pub verdict: Verdict,
    pub base_files: Vec<String>,
    pub new_files: Vec<String>,
    pub threshold_pp: f64,
    /// Family-wise confidence of "beyond noise", percent.
    pub confidence_pct: f64,
    /// The test, in words.
    pub test: String,
    /// Rows tested (Holm's family): every share of every kernel, line, offset and stall reason.
    pub tests: usize,
    /// The z a row must pass at the strictest step (what "too few samples" is judged against).
    pub z_critical: f64,
    pub kernels: Vec<KernelDiff>,
    /// Kernels with samples on one side only.
    pub base_only: Vec<String>,
    pub new_only: Vec<String>,
    pub warnings: Vec<String>,
}

/// A side with no PC samples to compare, named: a recording made without `--pc-sampling`, or a side whose every
/// sample was lost (damaged or cut chunks) or left out (no stall-reason table names them). Not "different
/// programs": nothing says what the side ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoPcSamples {
    /// This recording holds no PC sample collection.
    NotRecorded { file: String },
    /// These recordings (one side) hold collections, but no sample of them is left to count.
    AllLost { files: Vec<String> },
}

impl std::fmt::Display for NoPcSamples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoPcSamples::NotRecorded { file } => {
                write!(f, "{file}: no PC samples to compare: record it with `cupti-record --pc-sampling`")
            }
            NoPcSamples::AllLost { files } => write!(
                f,
                "{}: no PC sample left to compare: every one was lost or left out (the warnings say why)",
                files.join(", ")
            ),
        }
    }
}

impl std::error::Error for NoPcSamples {}

/// `source`'s report over one side's recordings, with every line and PC (no SASS text).
pub fn side_report(readers: &[&cutr_format::Reader], kernel: Option<&str>) -> SourceReport {
    let opts = SourceOptions { kernel: kernel.map(str::to_string), top: 0, sass: false, nvdisasm: None };
    crate::source::report(readers, &opts)
}

/// Compares two sides' reports ([`side_report`]); an error names a recording without PC samples.
pub fn compare(base: &SourceReport, new: &SourceReport, opts: &SourceDiffOptions) -> Result<SourceDiff, NoPcSamples> {
    for r in [base, new] {
        for (i, input) in r.inputs.iter().enumerate() {
            if input.collections == 0 && input.lost_collections == 0 {
                let file = r.files.get(i).cloned().unwrap_or_else(|| format!("recording {}", i + 1));
                return Err(NoPcSamples::NotRecorded { file });
            }
        }
    }
    for r in [base, new] {
        if r.kernels.iter().all(|k| k.samples == 0) {
            return Err(NoPcSamples::AllLost { files: r.files.clone() });
        }
    }
    Ok(build::compare(base, new, opts))
}

/// The stall reason that moved a row most in its own direction: the one that grew most in a row that grew, dropped
/// most in one that dropped, else the largest change either way.
pub fn moved_most(stalls: &[ReasonShare], change: Change) -> Option<&ReasonShare> {
    match change {
        Change::Grew => stalls
            .iter()
            .filter(|r| r.share.change_pp > 0.0)
            .max_by(|a, b| a.share.change_pp.total_cmp(&b.share.change_pp)),
        Change::Dropped => stalls
            .iter()
            .filter(|r| r.share.change_pp < 0.0)
            .min_by(|a, b| a.share.change_pp.total_cmp(&b.share.change_pp)),
        Change::Unchanged | Change::TooFewSamples => stalls.first(),
    }
}
