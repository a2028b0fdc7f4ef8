//! `source --diff`: two sides' PC samples compared line by line (`cutr_analyses::source_diff`), and the same
//! computation behind `diff`'s kernel rows when both sides have PC samples.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cutr_analyses::source_diff::{self, NoPcSamples, SourceDiffOptions, Verdict};
use cutr_analyses::{diff, source::SourceReport};
use cutr_format::{ChunkType, Reader};
use cutr_model::timing;

use crate::cli::usage;
use crate::diff_command::{EXIT_DIFFERENT_PROGRAMS, EXIT_REGRESSION};
use crate::reports::{open_all, warn_source_inputs};
use crate::stdout;

/// How `source --diff` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Markdown,
}

impl Format {
    /// The format asked for; `--csv` and `--pprof` are `source`'s own report's, a usage error here.
    pub fn of(json: bool, csv: bool, markdown: bool, pprof: bool) -> Result<Format> {
        if csv || pprof {
            usage!("--diff prints text, --json or --markdown (--csv and --pprof are for one side's report)");
        }
        Ok(match (json, markdown) {
            (true, _) => Format::Json,
            (_, true) => Format::Markdown,
            _ => Format::Text,
        })
    }
}

/// The recordings given: `BASE NEW`, or `--base RUN... --new RUN...`.
pub struct Sides {
    pub files: Vec<PathBuf>,
    pub base: Vec<PathBuf>,
    pub new: Vec<PathBuf>,
}

impl Sides {
    /// Base and new runs, as `diff` takes them.
    fn split(&self) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
        if !self.base.is_empty() {
            return Ok((self.base.clone(), self.new.clone()));
        }
        match self.files.as_slice() {
            [b, n] => Ok((vec![b.clone()], vec![n.clone()])),
            _ => usage!("source --diff: give BASE NEW, or --base RUN... --new RUN..."),
        }
    }
}

/// One side's report, its inputs' warnings said.
fn side(files: &[PathBuf], kernel: Option<&str>) -> Result<(Vec<Reader>, SourceReport)> {
    let readers = open_all(files)?;
    let refs: Vec<&Reader> = readers.iter().collect();
    let r = source_diff::side_report(&refs, kernel);
    Ok((readers, r))
}

/// `source --diff`: exit 3 when a line's share grew beyond the threshold and noise, 4 when no kernel is on both
/// sides, 2 for wrong arguments or a recording without PC samples.
pub fn run(sides: &Sides, kernel: Option<String>, threshold_pp: f64, top: usize, format: Format) -> Result<ExitCode> {
    if !(threshold_pp > 0.0 && threshold_pp <= 100.0) {
        usage!("--threshold must be more than 0 and at most 100 percentage points: {threshold_pp}");
    }
    let (base, new) = sides.split()?;
    let (base_readers, b) = side(&base, kernel.as_deref())?;
    let (new_readers, n) = side(&new, kernel.as_deref())?;
    if let Some(name) = &kernel
        && b.kernels.is_empty()
        && n.kernels.is_empty()
    {
        usage!("--kernel {name}: no sampled kernel's name contains it on either side");
    }
    let d = source_diff::compare(&b, &n, &SourceDiffOptions { threshold_pp });
    // A recording without PC samples is a wrong input, named alone; a side whose samples were all lost is named
    // after the warnings that say how.
    if let Err(e @ NoPcSamples::NotRecorded { .. }) = &d {
        usage!("{e}");
    }
    timing::mark("source diff");
    warn_source_inputs(&base, &base_readers, &b);
    warn_source_inputs(&new, &new_readers, &n);
    let d = match d {
        Ok(d) => d,
        Err(e) => usage!("{e}"),
    };
    for w in &d.warnings {
        eprintln!("cupti-convert: warning: {w}");
    }
    match format {
        Format::Json => stdout::json(&d)?,
        Format::Markdown => stdout::print(&source_diff::render_markdown(&d, top))?,
        Format::Text => stdout::print(&source_diff::render_text(&d, top))?,
    }
    Ok(match d.verdict {
        Verdict::Grew => ExitCode::from(EXIT_REGRESSION),
        Verdict::DifferentPrograms => ExitCode::from(EXIT_DIFFERENT_PROGRAMS),
        Verdict::Unchanged => ExitCode::SUCCESS,
    })
}

fn has_pc_samples(r: &Reader) -> bool {
    r.chunks().iter().any(|c| c.chunk_type() == ChunkType::PcSamples)
}

/// `diff`'s link: when a kernel row regressed or improved and every recording of both sides has PC samples, the
/// row names the lines that moved (`source --diff`'s computation at its default threshold).
pub fn link_lines(
    report: &mut diff::Report,
    base: &[PathBuf],
    new: &[PathBuf],
    normalize_templates: bool,
) -> Result<()> {
    let changed = report
        .rows
        .iter()
        .any(|r| r.section == "kernel" && matches!(r.verdict, diff::Verdict::Regression | diff::Verdict::Improvement));
    if !changed {
        return Ok(());
    }
    let (base_readers, new_readers) = (open_all(base)?, open_all(new)?);
    if !base_readers.iter().chain(&new_readers).all(has_pc_samples) {
        return Ok(());
    }
    let refs = |rs: &[Reader]| -> SourceReport {
        let refs: Vec<&Reader> = rs.iter().collect();
        source_diff::side_report(&refs, None)
    };
    let (b, n) = (refs(&base_readers), refs(&new_readers));
    if let Ok(lines) = source_diff::compare(&b, &n, &SourceDiffOptions::default()) {
        diff::link_source_lines(report, &lines, normalize_templates);
    }
    timing::mark("diff source lines");
    Ok(())
}
