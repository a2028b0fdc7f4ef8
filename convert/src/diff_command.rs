//! `diff`: the two sides' recordings grouped into runs (a split recording's parts together), loaded whole or
//! streamed (`crate::streaming::diff`), compared, printed; the exit code says the verdict.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use cutr_analyses::diff;
use cutr_format::Reader;
use cutr_model::{Filter, LoadOptions, Trace, load_readers, timing};

use crate::cli::{parse_time, usage};
use crate::reports::{open_all, warn_all};
use crate::stdout;

/// Exit code of `diff` when it finds a regression (`source --diff`: when a line's share grew).
pub(crate) const EXIT_REGRESSION: u8 = 3;
/// Exit code of `diff` when the two sides are probably recordings of different programs (nothing was judged).
pub(crate) const EXIT_DIFFERENT_PROGRAMS: u8 = 4;

/// The exit code of `diff` for its overall verdict.
pub(crate) fn diff_exit_code(verdict: diff::Verdict) -> ExitCode {
    match verdict {
        diff::Verdict::Regression => ExitCode::from(EXIT_REGRESSION),
        diff::Verdict::DifferentPrograms => ExitCode::from(EXIT_DIFFERENT_PROGRAMS),
        _ => ExitCode::SUCCESS,
    }
}

/// One side of a diff: its recordings ordered so that each run's files are together (a split recording's parts, in
/// part order; every other file a run of its own), and each run's range of them.
pub(crate) struct DiffSide {
    pub paths: Vec<PathBuf>,
    pub readers: Vec<Reader>,
    pub runs: Vec<std::ops::Range<usize>>,
}

impl DiffSide {
    fn new(paths: &[PathBuf], readers: Vec<Reader>) -> DiffSide {
        let groups = cutr_model::runs::run_groups(&readers);
        let mut slots: Vec<Option<Reader>> = readers.into_iter().map(Some).collect();
        let mut side = DiffSide { paths: Vec::new(), readers: Vec::new(), runs: Vec::new() };
        for g in groups {
            let first = side.paths.len();
            for i in g {
                side.paths.push(paths[i].clone());
                side.readers.push(slots[i].take().expect("each input is in one run"));
            }
            side.runs.push(first..side.paths.len());
        }
        side
    }

    /// Each run loaded whole (its parts together), warning about each.
    fn load_runs(&self) -> Result<Vec<Trace>> {
        self.runs
            .iter()
            .map(|r| {
                let t = load_readers(&self.paths[r.clone()], &self.readers[r.clone()], &LoadOptions::default())
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                warn_all(&t);
                Ok(t)
            })
            .collect()
    }
}

/// What `diff` was asked.
pub struct DiffArgs {
    pub files: Vec<PathBuf>,
    pub base: Vec<PathBuf>,
    pub new: Vec<PathBuf>,
    pub opts: diff::DiffOptions,
    pub json: bool,
    pub markdown: bool,
    pub all: bool,
    /// Compare rank by rank (each side one job's files).
    pub by_rank: bool,
    /// `--stream`, `--no-stream` or neither.
    pub choice: crate::streaming::Choice,
}

/// The options of `diff` given as text, parsed here so that a wrong one is a usage error.
pub struct DiffLimits {
    pub min_delta: String,
    pub instance_floor: String,
    pub fail_on: Vec<String>,
}

pub fn diff(a: DiffArgs, limits: DiffLimits) -> Result<ExitCode> {
    if a.by_rank && a.base.is_empty() {
        usage!("--by-rank compares two jobs: --base FILES... --new FILES...");
    }
    let (base, new) = if !a.base.is_empty() {
        if a.new.is_empty() {
            usage!("--base needs --new");
        }
        (a.base, a.new)
    } else if a.files.len() == 2 {
        (vec![a.files[0].clone()], vec![a.files[1].clone()])
    } else {
        usage!("give BASE NEW, or --base RUN... --new RUN...");
    };
    if !(a.opts.threshold_pct >= 0.0 && a.opts.threshold_pct.is_finite()) {
        usage!("--threshold must be a non-negative percentage");
    }
    if !(0.0..=100.0).contains(&a.opts.min_share_pct) {
        usage!("--min-share must be a percentage from 0 to 100");
    }
    let fail_on = limits
        .fail_on
        .iter()
        .map(|k| match k.as_str() {
            "span" => Ok(diff::FailOn::Span),
            "count" => Ok(diff::FailOn::Count),
            other => usage!("--fail-on: unknown '{other}' (span, count)"),
        })
        .collect::<Result<Vec<_>>>()?;
    let opts = diff::DiffOptions {
        min_delta_ns: parse_time(&limits.min_delta)?,
        instance_floor_ns: parse_time(&limits.instance_floor)? as f64,
        fail_on,
        ..a.opts
    };
    let sides = (DiffSide::new(&base, open_all(&base)?), DiffSide::new(&new, open_all(&new)?));
    let all: Vec<PathBuf> = base.iter().chain(&new).cloned().collect();
    let all_readers: Vec<&Reader> = sides.0.readers.iter().chain(&sides.1.readers).collect();
    if a.choice.may_stream(&all, false) && a.choice.streams_refs(&all_readers, &Filter::default()) {
        let output = crate::streaming::DiffOutput { json: a.json, markdown: a.markdown, all: a.all };
        let report = crate::streaming::diff(&sides.0, &sides.1, &opts, a.by_rank, output)?;
        return Ok(diff_exit_code(report));
    }
    let b = sides.0.load_runs()?;
    let n = sides.1.load_runs()?;
    let (base, new) = (sides.0.paths, sides.1.paths);
    if a.by_rank {
        let report = diff::diff_by_rank(&b, &n, &opts);
        timing::mark("diff");
        for w in &report.warnings {
            eprintln!("cupti-convert: warning: {w}");
        }
        std::mem::forget((b, n));
        if report.ranks.is_empty() {
            anyhow::bail!("--by-rank: no rank is on both sides, nothing to compare");
        }
        if a.json {
            stdout::json(&report)?;
        } else if a.markdown {
            stdout::print(&diff::render_by_rank_markdown(&report, 50))?;
        } else {
            stdout::print(&diff::render_by_rank_text(&report, a.all))?;
        }
        return Ok(diff_exit_code(report.verdict));
    }
    let mut report = diff::diff(&b, &n, &opts);
    crate::source_diff::link_lines(&mut report, &base, &new, opts.normalize_templates)?;
    timing::mark("diff");
    for w in &report.warnings {
        eprintln!("cupti-convert: warning: {w}");
    }
    // The process ends after printing: freeing two traces' rows first is work nobody waits for.
    std::mem::forget((b, n));
    if a.json {
        stdout::json(&report)?;
    } else if a.markdown {
        stdout::print(&diff::render_markdown(&report, 20))?;
    } else {
        stdout::print(&diff::render_text(&report, a.all))?;
    }
    Ok(diff_exit_code(report.verdict))
}
