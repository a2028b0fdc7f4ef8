//! The convert command: recordings in, one Perfetto or Chrome trace out.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cutr_format::Reader;
use cutr_model::{Filter, LoadOptions, TimeBase, Trace, load_prefetched, open_inputs, timing};
use cutr_viewer_export::timeline::slice_rows;
use cutr_viewer_export::{ExportOptions, Format, export, shard_slices_for};

use crate::cli::{ConvertArgs, kinds, parse_time};
use crate::progress::ProgressBar;
use crate::warn;

pub fn run(a: ConvertArgs) -> Result<()> {
    let started = Instant::now();
    let format = if a.perfetto { Format::Perfetto } else { Format::Chrome };
    let output = a.output.clone().unwrap_or_else(|| default_output(&a.files, format, a.gzip));
    let (readers, prefetched) =
        open_inputs(&a.files, a.start.is_none() && a.end.is_none()).map_err(|e| anyhow::anyhow!("{e}"))?;
    warn_file_problems(&a.files, &readers);
    let filter = filter(&a, &readers)?;
    let raw_bytes: u64 = readers.iter().flat_map(|r| r.activity_chunks()).map(|c| c.header.raw_len).sum();
    crate::memory::input_size_known(raw_bytes);
    let bar = ProgressBar::new(a.quiet);
    let records: u64 = readers.iter().flat_map(|r| r.activity_chunks()).map(|c| u64::from(c.header.record_count)).sum();
    bar.stage(&format!("decoding {records} records from {} file(s)", readers.len()));
    timing::mark("open");
    let trace =
        load_prefetched(&a.files, &readers, &LoadOptions { filter }, prefetched).map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(readers);
    warn_trace(&a.files[0], &trace, &bar);
    let opts = ExportOptions {
        format,
        gzip: a.gzip,
        compress_packets: !a.no_compress,
        shard_slices: shard_slices_for(slice_rows(&trace), format),
        progress: bar.export_progress(),
    };
    let summary = export(&trace, &output, &opts).with_context(|| format!("cannot write {}", output.display()));
    bar.clear();
    let summary = summary?;
    if !a.quiet {
        eprintln!(
            "cupti-convert: wrote {} ({} bytes): {} slices, {} arrows, {} tracks in {:.3} s",
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

/// The first input with .pftrace or .json (and .gz with `gzip`); `.merged` before it for several inputs.
fn default_output(files: &[PathBuf], format: Format, gzip: bool) -> PathBuf {
    let ext = match (format, gzip) {
        (Format::Perfetto, false) => "pftrace",
        (Format::Perfetto, true) => "pftrace.gz",
        (Format::Chrome, false) => "json",
        (Format::Chrome, true) => "json.gz",
    };
    let stem = if files.len() > 1 { "merged" } else { "" };
    let base = files[0].with_extension("");
    let name = format!("{}{}{}.{ext}", base.display(), if stem.is_empty() { "" } else { "." }, stem);
    PathBuf::from(name)
}

/// Warns of inputs that were not closed cleanly and of their damaged chunks.
fn warn_file_problems(files: &[PathBuf], readers: &[Reader]) {
    for (f, r) in files.iter().zip(readers) {
        if let Some(rec) = r.recovery() {
            warn(
                f,
                &format!(
                    "not closed cleanly ({}); converting up to its last complete chunk, {} bytes lost",
                    rec.reason, rec.lost_bytes
                ),
            );
        }
        for p in r.problems() {
            warn(f, &p.to_string());
        }
    }
}

/// The records to keep: `--kinds`, and `--start/--end` counted from the earliest record of all inputs.
fn filter(a: &ConvertArgs, readers: &[Reader]) -> Result<Filter> {
    let mut filter = Filter { kinds: kinds(&a.kinds)?, ..Default::default() };
    if a.start.is_none() && a.end.is_none() {
        return Ok(filter);
    }
    let first = readers
        .iter()
        .filter_map(|r| {
            let tb = TimeBase::from_clocks(r.clocks());
            r.activity_chunks().filter(|c| c.header.t_min != 0).map(|c| tb.to_trace(c.header.t_min)).min()
        })
        .min()
        .unwrap_or(0);
    filter.start = a.start.as_deref().map(parse_time).transpose()?.map(|t| first + t);
    filter.end = a.end.as_deref().map(parse_time).transpose()?.map(|t| first + t);
    if let (Some(s), Some(e)) = (filter.start, filter.end)
        && e < s
    {
        bail!("--end is before --start");
    }
    Ok(filter)
}

/// Warns of failed joins, unusable records and what the recording lost.
fn warn_trace(file: &Path, trace: &Trace, bar: &ProgressBar) {
    let s = &trace.stats;
    let join_warnings = [
        (s.gpu_without_api, "GPU records have no launching runtime/driver API record (no arrow)"),
        (s.graph_kernels_without_launch, "CUDA graph kernels have no graph launch record"),
        (s.external_without_api, "external correlation ids match no API record"),
        (s.nvtx_ends_without_start, "NVTX range ends have no start"),
        (s.nvtx_unclosed_ranges, "NVTX ranges were never closed (shown up to the end of the trace)"),
        (s.zero_timestamp_records, "records have no timestamps (CUPTI could not time them); left out"),
        (s.inverted_records, "records end before they start; left out"),
        (s.records_in_damaged_chunks, "records are in damaged or truncated chunks; lost"),
        (s.unresolved_names, "string pointers have no text in the file"),
    ];
    for (n, what) in join_warnings {
        if n > 0 {
            bar.suspend(|| warn(file, &format!("{n} {what}")));
        }
    }
    for (k, v) in trace.loss().entries() {
        if v > 0 {
            bar.suspend(|| warn(file, &format!("recording lost data: {k} = {v}")));
        }
    }
}
