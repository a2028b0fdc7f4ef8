//! Whether a summary streams over the recordings' chunks or loads them whole, and `stats` streamed. Streaming
//! holds a window of chunks at a time (memory bounded by the answer, not the recording); loading holds every
//! row (about the records' decompressed size) and computes every section.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use cutr_analyses::stats;
use cutr_format::Reader;
use cutr_model::stream::StreamOptions;
use cutr_model::{Filter, LoadError};

use crate::reports::StatsOutput;
use crate::stdout;
use crate::warnings::{input_warnings, warn};

/// Decompressed record bytes past which a summary streams unless told otherwise: a whole load holds about as much.
pub const AUTO_STREAM_RECORD_BYTES: u64 = 2 << 30;

/// Inputs smaller than this on disk are loaded whole without asking their footers: their records would need to
/// compress 128 times to reach [`AUTO_STREAM_RECORD_BYTES`] (recordings compress 10-30 times), and a load reads a
/// small file's first chunks while it opens it, which a stream does not.
const SMALL_INPUTS_ON_DISK: u64 = 16 << 20;

/// `--stream`, `--no-stream`, or neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Stream,
    Whole,
}

impl Choice {
    pub fn of(stream: bool, no_stream: bool) -> Choice {
        match (stream, no_stream) {
            (true, _) => Choice::Stream,
            (_, true) => Choice::Whole,
            _ => Choice::Auto,
        }
    }

    /// Whether the inputs may stream at all, before their footers are read (`--nvtx` needs a load).
    pub fn may_stream(self, files: &[PathBuf], narrowed: bool) -> bool {
        match self {
            Choice::Stream => true,
            Choice::Whole => false,
            Choice::Auto => !narrowed && on_disk(files) >= SMALL_INPUTS_ON_DISK,
        }
    }

    /// Whether opened inputs stream: asked to, or the records of their chunks in `filter`'s `--start/--end`
    /// window (all of them without one) are past [`AUTO_STREAM_RECORD_BYTES`] (said on stderr, with how to load
    /// them whole instead).
    pub fn streams(self, readers: &[Reader], filter: &Filter) -> bool {
        self.streams_refs(&readers.iter().collect::<Vec<_>>(), filter)
    }

    /// [`Choice::streams`] over borrowed readers (the two sides of a diff).
    pub fn streams_refs(self, readers: &[&Reader], filter: &Filter) -> bool {
        match self {
            Choice::Stream => true,
            Choice::Whole => false,
            Choice::Auto => {
                let bytes = window_record_bytes(readers, filter);
                // A file without its metadata chunk is read by a load, with layouts guessed from record sizes.
                let past = bytes > AUTO_STREAM_RECORD_BYTES && readers.iter().all(|r| r.metadata_shared().is_some());
                if past {
                    eprintln!(
                        "cupti-convert: the recordings hold {} MB of records (more than {} MB): streaming over their \
                         chunks (--no-stream loads them whole, with every section)",
                        bytes >> 20,
                        AUTO_STREAM_RECORD_BYTES >> 20
                    );
                }
                past
            }
        }
    }
}

/// Decompressed record bytes of the activity chunks a load with `filter` reads (those not wholly outside its
/// window), each file on its own time base.
fn window_record_bytes(readers: &[&Reader], filter: &Filter) -> u64 {
    let chunk_bytes = |r: &Reader| {
        let time = cutr_model::timebase::ClockCheck::of_reader(r).time;
        let overlaps = |c: &&cutr_format::ChunkInfo| {
            let (a, b) = (time.to_trace(c.header.t_min), time.to_trace(c.header.t_max));
            c.header.t_max == 0 || (filter.start.is_none_or(|s| b >= s) && filter.end.is_none_or(|e| a <= e))
        };
        r.activity_chunks().filter(overlaps).map(|c| c.header.raw_len).sum::<u64>()
    };
    readers.iter().map(|r| chunk_bytes(r)).sum()
}

fn on_disk(files: &[PathBuf]) -> u64 {
    files.iter().map(|f| std::fs::metadata(Path::new(f)).map_or(0, |m| m.len())).sum()
}

/// `stats --by-rank` streamed over opened inputs; the inputs' warnings said on stderr, as a load's are.
pub fn ranks(files: &[PathBuf], readers: &[Reader], step: Option<&str>) -> Result<cutr_analyses::ranks::RankReport> {
    let got = cutr_analyses::ranks::by_rank_streaming(files, readers, step, &StreamOptions::default())
        .map_err(no_metadata)?;
    for (file, w) in input_warnings(&got.trace, &Filter::default()) {
        warn(file, &w);
    }
    if got.settled_early > 0 {
        let n = got.settled_early;
        let cap = StreamOptions::default().max_waiting;
        let w = cutr_analyses::stats::settled_early_warning("GPU busy", n, cap);
        eprintln!("cupti-convert: warning: {w}");
    }
    if got.late_rows > 0 {
        eprintln!(
            "cupti-convert: warning: {} GPU operations started before the chunk they were read in claims (a damaged \
             or forged chunk header): their time already settled is not counted again, so GPU busy may be \
             understated (--no-stream computes it exactly)",
            got.late_rows
        );
    }
    Ok(got.report)
}

/// A stream's load error for people: a file without metadata can still be loaded.
fn no_metadata(e: LoadError) -> anyhow::Error {
    match e {
        LoadError::NoMetadata { .. } => {
            anyhow::anyhow!("{e} when streaming (--no-stream reads it, with layouts guessed from record sizes)")
        }
        e => anyhow::anyhow!("{e}"),
    }
}

/// A `--start/--end` window as given, and where the inputs' records lie (for the warning of a window that keeps
/// none).
pub struct Window<'a> {
    pub start: Option<&'a str>,
    pub end: Option<&'a str>,
    pub extents: Vec<(u64, u64)>,
}

/// `stats` streamed over opened inputs, the records of `filter`'s `window` (as a load keeps them).
pub fn stats(
    files: &[PathBuf],
    readers: &[Reader],
    out: StatsOutput,
    opts: &stats::StatsOptions,
    filter: &Filter,
    window: Option<Window<'_>>,
) -> Result<ExitCode> {
    use crate::convert::{extents_text, window_text};
    let cap = stats::EXACT_VALUES_CAP;
    let (mut s, trace) = stats::compute_streaming_in(files, readers, opts, filter, cap, &StreamOptions::default())
        .map_err(no_metadata)?;
    // As the loaded report warns (a window's broken joins too).
    for (file, w) in input_warnings(&trace, &Filter::default()) {
        warn(file, &w);
    }
    if let Some(w) = window {
        let (start, end) = (w.start, w.end);
        // The stream keeps no row when the span is empty and no section has a row (an instant alone aside).
        let empty = s.span_ns == 0 && s.gpu_time_ns == 0 && s.api.is_empty() && s.kernels.is_empty();
        if empty {
            eprintln!(
                "cupti-convert: warning: the window {} keeps no record: the records lie at {} (seconds after the \
                 first record)",
                window_text(start, end),
                extents_text(&w.extents)
            );
        }
        s.window = Some(format!("records overlapping {} (from the first record)", window_text(start, end)));
    }
    if out.json {
        stdout::json(&s)?;
    } else if out.csv {
        // CSV has no line for it: which figures are estimates and what is missing go to stderr.
        if let Some(st) = &s.stream {
            eprintln!("cupti-convert: note: {}", stats::describe_stream(st));
        }
        for w in &s.warnings {
            eprintln!("cupti-convert: warning: {w}");
        }
        stdout::print(&stats::render_csv(&s))?;
    } else {
        stdout::print(&stats::render_text(&s, out.text))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A diff side's runs as the streamed diff reads them.
fn streamed_side(s: &crate::diff_command::DiffSide) -> cutr_analyses::diff::StreamedSide<'_> {
    let runs = s.runs.iter().map(|r| (&s.paths[r.clone()], &s.readers[r.clone()])).collect();
    cutr_analyses::diff::StreamedSide { runs }
}

/// How `diff` prints.
pub struct DiffOutput {
    pub json: bool,
    pub markdown: bool,
    pub all: bool,
}

/// `diff` (or `diff --by-rank`) with each run streamed over its opened inputs (`readers`: the base's, then the
/// new's); prints the report and returns its verdict.
pub fn diff(
    base: &crate::diff_command::DiffSide,
    new: &crate::diff_command::DiffSide,
    opts: &cutr_analyses::diff::DiffOptions,
    by_rank: bool,
    out: DiffOutput,
) -> Result<cutr_analyses::diff::Verdict> {
    use cutr_analyses::diff;
    let sides = (streamed_side(base), streamed_side(new));
    let (base, new) = (&base.paths, &new.paths);
    let stream_opts = StreamOptions::default();
    let warn_inputs = |traces: &[cutr_model::Trace]| {
        for t in traces {
            for (file, w) in input_warnings(t, &Filter::default()) {
                warn(file, &w);
            }
        }
    };
    if by_rank {
        let (report, traces) =
            diff::diff_by_rank_streaming(sides.0, sides.1, opts, &stream_opts).map_err(no_metadata)?;
        warn_inputs(&traces);
        cutr_model::timing::mark("diff");
        for w in &report.warnings {
            eprintln!("cupti-convert: warning: {w}");
        }
        if report.ranks.is_empty() {
            anyhow::bail!("--by-rank: no rank is on both sides, nothing to compare");
        }
        if let Some(s) = report.ranks.first().and_then(|r| r.report.stream.as_ref()) {
            eprintln!("cupti-convert: note: {}", diff::describe_stream(s));
        }
        if out.json {
            stdout::json(&report)?;
        } else if out.markdown {
            stdout::print(&diff::render_by_rank_markdown(&report, 50))?;
        } else {
            stdout::print(&diff::render_by_rank_text(&report, out.all))?;
        }
        return Ok(report.verdict);
    }
    let (mut report, traces) = diff::diff_streaming(sides.0, sides.1, opts, &stream_opts).map_err(no_metadata)?;
    warn_inputs(&traces);
    crate::source_diff::link_lines(&mut report, base, new, opts.normalize_templates)?;
    cutr_model::timing::mark("diff");
    for w in &report.warnings {
        eprintln!("cupti-convert: warning: {w}");
    }
    if out.json {
        stdout::json(&report)?;
    } else if out.markdown {
        stdout::print(&diff::render_markdown(&report, 20))?;
    } else {
        stdout::print(&diff::render_text(&report, out.all))?;
    }
    Ok(report.verdict)
}

/// `export --parquet DIR` streamed over opened inputs: the same tables, what the stream cannot join warned.
pub fn export(files: &[PathBuf], readers: &[Reader], dir: &Path) -> Result<ExitCode> {
    let e =
        cutr_tables::write_parquet_streamed(files, readers, dir, &StreamOptions::default()).map_err(|e| match e {
            cutr_tables::TablesError::Load(e @ LoadError::NoMetadata { .. }) => {
                anyhow::anyhow!("{e} when streaming (--no-stream reads it, with layouts guessed from record sizes)")
            }
            cutr_tables::TablesError::Load(e) => anyhow::anyhow!("{e}"),
            e => anyhow::anyhow!("cannot write {}: {e}", dir.display()),
        })?;
    for (file, w) in input_warnings(&e.trace, &Filter::default()) {
        warn(file, &w);
    }
    for w in &e.warnings {
        eprintln!("cupti-convert: warning: {w}");
    }
    crate::reports::print_export_summary(&e.summary, dir, Some(e.launches_out_of_horizon));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_choose_and_small_inputs_load_whole() {
        assert_eq!(
            (Choice::of(true, false), Choice::of(false, true), Choice::of(false, false)),
            (Choice::Stream, Choice::Whole, Choice::Auto)
        );
        let small = [PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/pytorch_loop.cutr"))];
        assert!(Choice::Stream.may_stream(&small, false) && !Choice::Whole.may_stream(&small, false));
        // A 434 KB recording is never asked for its footer; --nvtx always loads.
        assert!(!Choice::Auto.may_stream(&small, false));
        let big = [PathBuf::from("/nonexistent/a.cutr")];
        assert!(!Choice::Auto.may_stream(&big, true));
        let all = Filter::default();
        assert!(
            Choice::Stream.streams(&[], &all) && !Choice::Whole.streams(&[], &all) && !Choice::Auto.streams(&[], &all)
        );
    }
}
