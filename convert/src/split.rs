//! `--split-by step|TIME`: one Perfetto trace per window of a long recording, each window loaded alone (only the
//! chunks it overlaps are read, as `--start/--end` do) so that memory follows the window, not the recording.
//!
//! A slice belongs to the window it starts in and is drawn whole there (`cutr_viewer_export::timeline::Window`);
//! an NVTX range's GPU span goes with its range, over the work that starts up to [`SPAN_HORIZON_NS`] (or one
//! window's length) after the window's end.
//! Every file shows the same process, thread, GPU and stream tracks: the windows are written in time order, each
//! with its own tracks and those of the windows before; the few written before a track first appeared (a thread
//! started late) are written again with all of them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, anyhow};
use cutr_format::Reader;
use cutr_model::{Filter, LoadOptions, Prefetched, load_prefetched, open_inputs};
use cutr_viewer_export::timeline::{TrackRole, Window};
use cutr_viewer_export::{ExportOptions, ExportSummary, Format, export, shard_slices_for};

use crate::cli::{ConvertArgs, kinds, parse_time, usage};
use crate::convert::{check_output_is_not_an_input, size_limit};
use crate::warnings::warn;

/// The default `--step` prefix of a split: PyTorch profiler's step ranges.
const PROFILER_STEP: &str = "ProfilerStep#";

/// How far past its end a window is read, at most (and no more than its own length): an NVTX range's GPU span
/// covers the work the range launched that starts this long after the window's end.
const SPAN_HORIZON_NS: u64 = 1_000_000_000;

/// How a recording is cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitBy {
    /// At the start of each NVTX range whose name starts with the prefix.
    Steps(String),
    /// Every this many ns from the first record.
    Every(u64),
}

/// `--split-by` as given, with `--step`.
pub fn parse(given: &str, step: Option<&str>) -> Result<SplitBy> {
    if given == "step" {
        return Ok(SplitBy::Steps(step.unwrap_or(PROFILER_STEP).to_string()));
    }
    if step.is_some() {
        usage!("--step PREFIX goes with --split-by step (or --findings), not --split-by {given}");
    }
    let Ok(ns) = parse_time(given) else { usage!("--split-by takes `step` or a time (10s, 500ms), not '{given}'") };
    if ns == 0 {
        usage!("--split-by {given}: a window must last longer than 0 ns");
    }
    Ok(SplitBy::Every(ns))
}

/// One window to write: its file and the slices it keeps.
struct Planned {
    path: PathBuf,
    window: Window,
}

/// Writes one trace per window of `a.files` cut `by`.
pub fn run(a: &ConvertArgs, by: &SplitBy) -> Result<()> {
    let started = Instant::now();
    let stem = output_stem(a);
    let (readers, _) = open_inputs(&a.files, false).map_err(|e| anyhow!("{e}"))?;
    let windows = match by {
        SplitBy::Every(ns) => time_windows(&record_span(&readers), *ns),
        SplitBy::Steps(prefix) => step_windows(a, &readers, prefix)?,
    };
    if windows.is_empty() {
        usage!("{}: no activity record to split", a.files[0].display());
    }
    let plan = name_windows(&stem, windows);
    for p in &plan {
        check_output_is_not_an_input(&p.path, &a.files)?;
    }
    let kinds = kinds(&a.kinds)?;
    let mut warned = BTreeSet::new();
    let mut shared: Vec<TrackRole> = Vec::new();
    let mut written: Vec<(ExportSummary, BTreeSet<usize>)> = Vec::with_capacity(plan.len());
    for p in &plan {
        // With the tracks of the windows before: a recording's threads and streams mostly appear at its start, so
        // that few windows need writing again.
        let p = Planned { path: p.path.clone(), window: Window { tracks: shared.clone(), ..p.window.clone() } };
        let summary = write_window(a, &readers, &kinds, &p, &mut warned)?;
        let mut has = BTreeSet::new();
        for role in &summary.shared_tracks {
            let i = shared.iter().position(|r| r == role).unwrap_or_else(|| {
                shared.push(role.clone());
                shared.len() - 1
            });
            has.insert(i);
        }
        written.push((summary, has));
    }
    // The windows that lack a track another window has are written again, with every window's tracks.
    let mut rewritten = 0;
    for (p, (summary, has)) in plan.iter().zip(written.iter_mut()) {
        if has.len() < shared.len() {
            let p = Planned { path: p.path.clone(), window: Window { tracks: shared.clone(), ..p.window.clone() } };
            *summary = write_window(a, &readers, &kinds, &p, &mut warned)?;
            rewritten += 1;
        }
    }
    if !a.quiet {
        for (p, (s, _)) in plan.iter().zip(&written) {
            eprintln!(
                "cupti-convert: wrote {} ({} bytes): {} slices, {} tracks",
                p.path.display(),
                s.bytes,
                s.slices,
                s.tracks
            );
        }
        let slices: u64 = written.iter().map(|(s, _)| s.slices).sum();
        eprintln!(
            "cupti-convert: {} windows ({rewritten} written again for the shared tracks), {slices} slices in {:.3} s",
            plan.len(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Loads the records overlapping one window and a horizon past it (only the chunks there are read) and writes the
/// slices that start in the window.
fn write_window(
    a: &ConvertArgs,
    readers: &[Reader],
    kinds: &[u32],
    p: &Planned,
    warned: &mut BTreeSet<String>,
) -> Result<ExportSummary> {
    let w = &p.window;
    // Read a little past the window: the GPU work an NVTX range launched near the window's end starts after it,
    // and the range's GPU span, drawn in the window the range starts in, covers it.
    let horizon = (w.before - w.from).min(SPAN_HORIZON_NS);
    let filter = Filter {
        start: (w.from > 0).then_some(w.from),
        end: (w.before < u64::MAX).then(|| w.before.saturating_add(horizon)),
        kinds: kinds.to_vec(),
    };
    let opts = LoadOptions { filter };
    let trace = load_prefetched(&a.files, readers, &opts, Prefetched::default()).map_err(|e| anyhow!("{e}"))?;
    // A recording's warnings (losses, clock trouble) are the same in every window: said once.
    for (file, msg) in crate::warnings::input_warnings(&trace, &opts.filter) {
        if warned.insert(format!("{}: {msg}", file.display())) {
            warn(file, &msg);
        }
    }
    let opts = ExportOptions {
        format: Format::Perfetto,
        gzip: a.gzip,
        compress_packets: !a.no_compress,
        shard_slices: shard_slices_for(cutr_viewer_export::timeline::slice_rows(&trace), Format::Perfetto),
        driver_calls: if a.driver_calls {
            cutr_viewer_export::DriverCalls::All
        } else {
            cutr_viewer_export::DriverCalls::Direct
        },
        limit: size_limit(a.max_output, &a.files),
        window: Some(w.clone()),
        ..Default::default()
    };
    export(&trace, &p.path, &opts).map_err(|e| anyhow!("cannot write {}: {e}", p.path.display()))
}

/// `-o` without its `.pftrace` (and `.gz`), or the default output's stem.
fn output_stem(a: &ConvertArgs) -> PathBuf {
    let base = a.output.clone().unwrap_or_else(|| {
        let stem = a.files[0].file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into());
        PathBuf::from(stem)
    });
    let text = base.to_string_lossy();
    let text = text.strip_suffix(".gz").unwrap_or(&text);
    PathBuf::from(text.strip_suffix(".pftrace").unwrap_or(text))
}

/// Files named STEM-001.pftrace (STEM-000 for what comes before the first step), as many digits as the last
/// number needs, at least three.
fn name_windows(stem: &Path, windows: Vec<(u64, Window)>) -> Vec<Planned> {
    let last = windows.iter().map(|w| w.0).max().unwrap_or(0);
    let digits = last.to_string().len().max(3);
    windows
        .into_iter()
        .map(|(n, window)| Planned { path: PathBuf::from(format!("{}-{n:0digits$}.pftrace", stem.display())), window })
        .collect()
}

/// The time stretches of the activity chunks of the inputs (trace time), sorted by start.
struct RecordSpan {
    stretches: Vec<(u64, u64)>,
}

fn record_span(readers: &[Reader]) -> RecordSpan {
    RecordSpan { stretches: crate::convert::chunk_stretches(readers) }
}

/// Windows of `every` ns from the first record, numbered from 1; those no chunk overlaps are left out. The first
/// starts at 0 and the last ends at `u64::MAX`, so that no record falls outside every window.
fn time_windows(span: &RecordSpan, every: u64) -> Vec<(u64, Window)> {
    let Some(first) = span.stretches.first().map(|s| s.0) else { return Vec::new() };
    let last = span.stretches.iter().map(|s| s.1).max().unwrap_or(first);
    let count = (last - first) / every + 1;
    let mut out = Vec::new();
    for k in 0..count {
        let from = first.saturating_add(k.saturating_mul(every));
        let before = from.saturating_add(every);
        if !span.stretches.iter().any(|&(s, e)| s < before && e >= from) {
            continue;
        }
        let from = if k == 0 { 0 } else { from };
        let before = if k + 1 == count { u64::MAX } else { before };
        out.push((k + 1, Window { from, before, first: out.is_empty(), tracks: Vec::new() }));
    }
    out
}

/// A window per NVTX step range named `prefix...` of the first process that has them, from its start to the next
/// one's (the last to the end of the recording), numbered from 1; window 0 holds what comes before the first.
fn step_windows(a: &ConvertArgs, readers: &[Reader], prefix: &str) -> Result<Vec<(u64, Window)>> {
    // The NVTX records alone, over the whole recording.
    let opts = LoadOptions { filter: Filter { kinds: kinds(&["nvtx".to_string()])?, ..Default::default() } };
    let trace = load_prefetched(&a.files, readers, &opts, Prefetched::default()).map_err(|e| anyhow!("{e}"))?;
    let (_, steps) = cutr_analyses::analyze::steps::find_steps(&trace, Some(prefix));
    let Some(proc) = steps.first().map(|s| s.proc) else {
        usage!("--split-by step: no closed NVTX range's name starts with {prefix:?}; give --step PREFIX");
    };
    let starts: Vec<u64> = steps.iter().filter(|s| s.proc == proc).map(|s| s.start).collect();
    let first_record = record_span(readers).stretches.first().map_or(u64::MAX, |s| s.0);
    let mut out = Vec::with_capacity(starts.len() + 1);
    if first_record < starts[0] {
        out.push((0, Window { from: 0, before: starts[0], first: true, tracks: Vec::new() }));
    }
    for (i, &from) in starts.iter().enumerate() {
        let before = starts.get(i + 1).copied().unwrap_or(u64::MAX);
        let from = if out.is_empty() { 0 } else { from };
        out.push((i as u64 + 1, Window { from, before, first: out.is_empty(), tracks: Vec::new() }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_windows_cover_every_record_and_skip_empty_stretches() {
        // Records at 1.0-3.5 s and 7.2-7.3 s, cut every 2 s from the first: windows 1 (1-3 s, from 0), 2 (3-5 s)
        // and 4 (7-9 s, to the end); 3 (5-7 s) holds nothing.
        let s = 1_000_000_000;
        let span = RecordSpan { stretches: vec![(s, s * 35 / 10), (s * 72 / 10, s * 73 / 10)] };
        let got: Vec<(u64, u64, u64, bool)> =
            time_windows(&span, 2 * s).into_iter().map(|(n, w)| (n, w.from, w.before, w.first)).collect();
        assert_eq!(got, [(1, 0, 3 * s, true), (2, 3 * s, 5 * s, false), (4, 7 * s, u64::MAX, false)]);
        assert!(time_windows(&RecordSpan { stretches: vec![] }, s).is_empty());
    }

    #[test]
    fn split_by_takes_step_or_a_time() {
        assert_eq!(parse("step", None).unwrap(), SplitBy::Steps("ProfilerStep#".into()));
        assert_eq!(parse("step", Some("step ")).unwrap(), SplitBy::Steps("step ".into()));
        assert_eq!(parse("10s", None).unwrap(), SplitBy::Every(10_000_000_000));
        assert_eq!(parse("250ms", None).unwrap(), SplitBy::Every(250_000_000));
        assert!(parse("0s", None).is_err());
        assert!(parse("steps", None).is_err());
        assert!(parse("1s", Some("step ")).is_err());
    }

    #[test]
    fn files_are_numbered_with_three_digits_or_more() {
        let w = |n| (n, Window::default());
        let names: Vec<String> = name_windows(Path::new("out/run"), vec![w(0), w(1), w(12)])
            .into_iter()
            .map(|p| p.path.display().to_string())
            .collect();
        assert_eq!(names, ["out/run-000.pftrace", "out/run-001.pftrace", "out/run-012.pftrace"]);
        assert_eq!(name_windows(Path::new("r"), vec![w(1234)])[0].path, Path::new("r-1234.pftrace"));
    }
}
