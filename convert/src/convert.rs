//! The convert command: recordings in, one Perfetto or Chrome trace out.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use cutr_format::Reader;
use cutr_model::timebase::ClockCheck;
use cutr_model::{Filter, LoadOptions, load_prefetched, open_inputs, timing};
use cutr_viewer_export::findings::FindingSlice;
use cutr_viewer_export::size_limit::human;
use cutr_viewer_export::timeline::slice_rows;
use cutr_viewer_export::{DriverCalls, ExportOptions, Format, SizeLimit, export, shard_slices_for};

use crate::cli::{ConvertArgs, MaxOutput, kinds, parse_time, usage};
use crate::progress::ProgressBar;
use crate::warnings::{input_warnings, warn};

pub fn run(a: ConvertArgs) -> Result<()> {
    let started = Instant::now();
    if !a.perfetto && !a.chrome {
        usage!("give --perfetto or --chrome: the format to write");
    }
    if a.step.as_deref() == Some("") {
        usage!("--step needs the start of the step ranges' names (e.g. --step \"step \")");
    }
    if let Some(by) = &a.split_by {
        if !a.perfetto {
            usage!("--split-by writes Perfetto traces: give --perfetto");
        }
        if a.output.as_deref() == Some(Path::new("-")) || a.findings {
            usage!("--split-by writes files (not -o -) and draws no findings");
        }
        return crate::split::run(&a, &crate::split::parse(by, a.step.as_deref())?);
    }
    if a.step.is_some() && !a.findings {
        usage!("--step PREFIX goes with --findings or --split-by step");
    }
    let format = if a.perfetto { Format::Perfetto } else { Format::Chrome };
    let output = a.output.clone().unwrap_or_else(|| default_output(&a.files, format, a.gzip));
    check_output_is_not_an_input(&output, &a.files)?;
    let (readers, prefetched) =
        open_inputs(&a.files, a.start.is_none() && a.end.is_none()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let filter = filter(a.start.as_deref(), a.end.as_deref(), &a.kinds, &readers)?;
    let extents = (filter.start.is_some() || filter.end.is_some()).then(|| record_extents(&readers));
    let raw_bytes: u64 = readers.iter().flat_map(|r| r.activity_chunks()).map(|c| c.header.raw_len).sum();
    crate::memory::input_size_known(raw_bytes);
    let bar = ProgressBar::new(a.quiet);
    let records: u64 = readers.iter().flat_map(|r| r.activity_chunks()).map(|c| u64::from(c.header.record_count)).sum();
    bar.stage(&format!("decoding {records} records from {} file(s)", readers.len()));
    timing::mark("open");
    let opts = LoadOptions { filter };
    let mut trace = load_prefetched(&a.files, &readers, &opts, prefetched).map_err(|e| anyhow::anyhow!("{e}"))?;
    for (p, rank) in trace.processes.iter_mut().zip(given_ranks(&a)?) {
        p.rank_given = rank;
    }
    // Kernel slices carry their hottest lines and stall reasons where the recordings have PC samples.
    for (path, r) in a.files.iter().zip(&readers) {
        for w in timing::timed("PC samples to source", || cutr_analyses::source::annotate(&mut trace, &[r])) {
            warn(path, &w);
        }
    }
    drop(readers);
    let findings = if a.findings { timing::timed("findings", || findings(&trace, &a.step)) } else { Vec::new() };
    timing::mark("findings");
    for (file, w) in input_warnings(&trace, &opts.filter) {
        bar.suspend(|| warn(file, &w));
    }
    if let Some(extents) = &extents
        && slice_rows(&trace) == 0
    {
        bar.suspend(|| {
            eprintln!(
                "cupti-convert: warning: the window {} keeps no record: the records lie at {} (seconds after the \
                 first record)",
                window_text(a.start.as_deref(), a.end.as_deref()),
                extents_text(extents)
            )
        });
    }
    let findings_drawn = match (a.findings, findings.len()) {
        (false, _) => String::new(),
        (true, n) => format!(", {n} evidence slices on 'cutr: findings' tracks"),
    };
    let opts = ExportOptions {
        format,
        gzip: a.gzip,
        compress_packets: !a.no_compress,
        shard_slices: shard_slices_for(slice_rows(&trace), format),
        progress: bar.export_progress(),
        driver_calls: if a.driver_calls { DriverCalls::All } else { DriverCalls::Direct },
        limit: size_limit(a.max_output, &a.files),
        findings,
        window: None,
    };
    let summary = export(&trace, &output, &opts).with_context(|| format!("cannot write {}", output.display()));
    bar.clear();
    let summary = summary?;
    if summary.annotation_spans_dropped > 0 {
        eprintln!(
            "cupti-convert: warning: {} GPU spans of NVTX ranges exceed what one conversion can lay out and are \
             not drawn; use --start/--end",
            summary.annotation_spans_dropped
        );
    }
    if !a.quiet {
        // The calls the timeline leaves out by default are said, so that fewer slices than calls is no surprise.
        let hidden = match summary.driver_calls_hidden {
            0 => String::new(),
            n => format!(" ({n} driver calls left out, the runtime's own and queries: --driver-calls draws them)"),
        };
        eprintln!(
            "cupti-convert: wrote {} ({} bytes): {} slices, {} arrows, {} tracks{findings_drawn}{hidden} in {:.3} s",
            output.display(),
            summary.bytes,
            summary.slices,
            summary.flows,
            summary.tracks,
            started.elapsed().as_secs_f64()
        );
    }
    // The process ends now: handing the rows back to the allocator one vector at a time (and their pages to the
    // kernel) is work nobody waits for but the user.
    std::mem::forget(trace);
    Ok(())
}

/// `analyze`'s findings (steps by `step` as `analyze --step`, its default gap threshold) as the slices of the
/// `cutr: findings` track: one per evidence event, named by the rule and its severity.
fn findings(trace: &cutr_model::Trace, step: &Option<String>) -> Vec<FindingSlice> {
    use cutr_analyses::analyze::types::{Outcome, Severity};
    use cutr_analyses::analyze::{AnalyzeOptions, analyze};
    let analysis = analyze(trace, &AnalyzeOptions { step_prefix: step.clone(), ..Default::default() });
    if let Some(prefix) = step
        && analysis.steps.is_empty()
    {
        eprintln!("cupti-convert: warning: --step {prefix:?}: no closed NVTX range's name starts with it: no steps");
    }
    let mut slices = Vec::new();
    for result in &analysis.findings {
        let Outcome::Found(f) = &result.outcome else { continue };
        let severity = match f.severity {
            Severity::High => "high",
            Severity::Medium => "medium",
            Severity::Low => "low",
        };
        slices.extend(f.events.iter().map(|e| FindingSlice {
            proc: e.proc,
            start: e.start,
            end: e.end,
            name: format!("{} ({severity})", result.rule),
            summary: f.summary.clone(),
            what: e.what.clone(),
            correlation: e.correlation,
        }));
    }
    slices
}

/// The output's limit: `--max-output`, else the default for the inputs' size on disk.
pub(crate) fn size_limit(given: Option<MaxOutput>, inputs: &[PathBuf]) -> Option<SizeLimit> {
    match given {
        Some(MaxOutput::Unlimited) => None,
        Some(MaxOutput::Bytes(bytes)) => Some(SizeLimit { bytes, origin: format!("--max-output {}", human(bytes)) }),
        None => {
            let input_bytes = inputs.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum();
            Some(SizeLimit::for_input(input_bytes))
        }
    }
}

/// In the current directory: the first input's name with .pftrace or .json (and .gz with `gzip`), `.merged`
/// before the extension for several inputs.
fn default_output(files: &[PathBuf], format: Format, gzip: bool) -> PathBuf {
    let ext = match (format, gzip) {
        (Format::Perfetto, false) => "pftrace",
        (Format::Perfetto, true) => "pftrace.gz",
        (Format::Chrome, false) => "json",
        (Format::Chrome, true) => "json.gz",
    };
    let stem = files[0].file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into());
    let merged = if files.len() > 1 { ".merged" } else { "" };
    PathBuf::from(format!("{stem}{merged}.{ext}"))
}

/// Refuses an output path that is one of the inputs (the same file, by any name): the conversion would replace the
/// recording it reads.
pub(crate) fn check_output_is_not_an_input(output: &Path, inputs: &[PathBuf]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Ok(out) = std::fs::metadata(output) else { return Ok(()) };
    for input in inputs {
        if let Ok(m) = std::fs::metadata(input)
            && (m.dev(), m.ino()) == (out.dev(), out.ino())
        {
            usage!("-o {} is the input {}: refusing to overwrite the recording", output.display(), input.display());
        }
    }
    Ok(())
}

/// Every activity chunk's time range on the trace's time base (chunks without one left out), sorted.
pub(crate) fn chunk_stretches(readers: &[Reader]) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = readers
        .iter()
        .flat_map(|r| {
            let tb = ClockCheck::of_reader(r).time;
            r.activity_chunks()
                .filter(|c| c.header.t_min != 0 && c.header.t_max >= c.header.t_min)
                .map(move |c| (tb.to_trace(c.header.t_min), tb.to_trace(c.header.t_max)))
                .collect::<Vec<_>>()
        })
        .collect();
    spans.sort_unstable();
    spans
}

/// Where the records lie, in ns after the first: the activity chunks' time ranges, overlapping ones merged (a
/// program busy at start-up and at the end, idle between, has two).
pub(crate) fn record_extents(readers: &[Reader]) -> Vec<(u64, u64)> {
    let spans = chunk_stretches(readers);
    let first = spans.first().map_or(0, |s| s.0);
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in spans {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged.into_iter().map(|(s, e)| (s - first, e - first)).collect()
}

/// `0.000-0.250 s and 4.750-5.800 s`; the first three and the last when there are more.
pub(crate) fn extents_text(extents: &[(u64, u64)]) -> String {
    let one = |&(s, e): &(u64, u64)| format!("{:.3}-{:.3} s", s as f64 / 1e9, e as f64 / 1e9);
    match extents {
        [] => "no time at all (no activity chunk)".into(),
        [x] => one(x),
        _ if extents.len() <= 4 => {
            let (last, rest) = extents.split_last().unwrap_or((&extents[0], &[]));
            format!("{} and {}", rest.iter().map(one).collect::<Vec<_>>().join(", "), one(last))
        }
        _ => format!(
            "{}, ... ({} stretches) and {}",
            extents[..3].iter().map(one).collect::<Vec<_>>().join(", "),
            extents.len(),
            one(&extents[extents.len() - 1])
        ),
    }
}

/// `--start S --end E` as given.
pub(crate) fn window_text(start: Option<&str>, end: Option<&str>) -> String {
    match (start, end) {
        (Some(s), Some(e)) => format!("--start {s} --end {e}"),
        (Some(s), None) => format!("--start {s}"),
        (None, Some(e)) => format!("--end {e}"),
        (None, None) => String::new(),
    }
}

/// The records to keep: `kinds`, and `start`/`end` (the viewers' and `stats`' `--start/--end`) counted from the
/// earliest record of all inputs; records overlapping the window are kept.
pub(crate) fn filter(
    start: Option<&str>,
    end: Option<&str>,
    kinds_given: &[String],
    readers: &[Reader],
) -> Result<Filter> {
    let mut filter = Filter { kinds: kinds(kinds_given)?, ..Default::default() };
    if start.is_none() && end.is_none() {
        return Ok(filter);
    }
    let first = cutr_model::timebase::first_record(readers);
    filter.start = start.map(parse_time).transpose()?.map(|t| first + t);
    filter.end = end.map(parse_time).transpose()?.map(|t| first + t);
    if let (Some(s), Some(e)) = (filter.start, filter.end)
        && e < s
    {
        usage!("--end is before --start");
    }
    Ok(filter)
}

/// The ranks of `--rank`, one per input in order (none where `--rank` is not given), checked: one per input,
/// distinct, each below the world size.
fn given_ranks(a: &ConvertArgs) -> Result<Vec<Option<cutr_model::Rank>>> {
    if a.rank.is_empty() {
        return Ok(vec![None; a.files.len()]);
    }
    if a.rank.len() != a.files.len() {
        usage!("--rank gives {} rank(s) for {} input(s): give one per input, in order", a.rank.len(), a.files.len());
    }
    let highest = a.rank.iter().copied().max().unwrap_or(0);
    let world_size = a.world_size.unwrap_or(highest.saturating_add(1));
    if highest >= world_size {
        usage!("--rank {highest} is not below --world-size {world_size}");
    }
    let mut seen = a.rank.clone();
    seen.sort_unstable();
    if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
        usage!("--rank {} is given to two inputs", w[0]);
    }
    Ok(a.rank.iter().map(|&rank| Some(cutr_model::Rank { rank, world_size })).collect())
}
