//! Writing a trace for viewers: laid out as a [`Timeline`], then rendered shard by shard in parallel as Perfetto
//! protobuf or Chrome JSON into one file.

use std::io;
use std::path::Path;
use std::sync::Arc;

use cutr_model::Trace;
use cutr_model::timing::{mark, note, timed};
use serde::Serialize;

use crate::findings::FindingSlice;
use crate::output::Output;
use crate::size_limit::{self, SizeLimit};
use crate::timeline::{self, DriverCalls, Timeline, TrackRole, Window};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Perfetto,
    Chrome,
}

#[derive(Clone, Debug)]
pub struct ExportOptions {
    pub format: Format,
    pub gzip: bool,
    /// Perfetto: write the packets as deflate-compressed `compressed_packets` batches (about 4x smaller; read by
    /// every trace processor since 2019). Ignored with `gzip`, which compresses the whole file better.
    pub compress_packets: bool,
    /// Slices per shard (the unit of parallel work).
    pub shard_slices: usize,
    /// Told where the export stands (for a progress bar).
    pub progress: Option<Progress>,
    /// Which driver API calls to draw: by default those not inside a runtime call (`--driver-calls`: all).
    pub driver_calls: DriverCalls,
    /// The bytes the output may not pass: refused before writing when its estimate passes them, stopped (and
    /// removed) if the file itself does. `None`: no limit.
    pub limit: Option<SizeLimit>,
    /// `analyze`'s evidence events, drawn as each process's `cutr: findings` track ([`crate::findings`]).
    pub findings: Vec<FindingSlice>,
    /// One window of a split timeline (`--split-by`): only the slices that start in it, on the tracks every
    /// window shows. `None`: the whole trace.
    pub window: Option<Window>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            format: Format::Perfetto,
            gzip: false,
            compress_packets: true,
            shard_slices: 50_000,
            progress: None,
            driver_calls: DriverCalls::default(),
            limit: None,
            findings: Vec::new(),
            window: None,
        }
    }
}

/// Where an export stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Laying out tracks, lanes and shards.
    Layout,
    /// Writing: `done` of `total` shards are in the file.
    Writing { done: u64, total: u64 },
}

/// A callback told each [`Stage`] as the export reaches it, on the thread that runs [`export`].
#[derive(Clone)]
pub struct Progress(pub Arc<dyn Fn(Stage) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExportSummary {
    pub bytes: u64,
    pub slices: u64,
    pub flows: u64,
    pub tracks: usize,
    pub shards: usize,
    pub overflow_lanes: u32,
    /// Driver calls inside runtime calls and driver queries, left out of the timeline
    /// ([`ExportOptions::driver_calls`]).
    pub driver_calls_hidden: u64,
    /// NVTX ranges' GPU spans past what one conversion can lay out, not drawn.
    pub annotation_spans_dropped: u64,
    /// The tracks the windows of a split share ([`crate::timeline::shared_roles`]) that this trace has.
    #[serde(skip)]
    pub shared_tracks: Vec<TrackRole>,
}

/// Slices per shard for a trace of about `slices` slices. The cut depends on the trace alone, never on the
/// machine, so a recording converts to the same bytes on any number of cores. At least `SPREAD_SHARDS` shards,
/// so that small traces spread over 16 workers (one track's shard is written by one thread, and on 16 cores a
/// 20k-slice recording cut at 50,000 was written by its largest track's thread alone), but no fewer than 2,000
/// slices (each shard repeats its interned names and clock snapshot) and no more than 50,000, or 4,000 for Chrome
/// JSON: two windows of two shards per worker are held at once, and a Chrome event is ~450 bytes (10M generated
/// records: 451 per slice), so 16 workers held 2.5 GB (2.9x the records) at 50,000 and ~1.4 GB at 4,660.
pub fn shard_slices_for(slices: usize, format: Format) -> usize {
    let most = match format {
        Format::Perfetto => 50_000,
        Format::Chrome => 4_000,
    };
    (slices / SPREAD_SHARDS).clamp(2_000, most)
}

/// Four shards for each of 16 workers.
const SPREAD_SHARDS: usize = 64;

/// Writes `trace` to `path`.
pub fn export(trace: &Trace, path: &Path, opts: &ExportOptions) -> io::Result<ExportSummary> {
    if let Some(p) = &opts.progress {
        (p.0)(Stage::Layout);
    }
    if let Some(why) = timeline::too_large(trace) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{why}; use --start/--end or --kinds")));
    }
    let tl = Timeline::build_window(trace, opts.shard_slices.max(1), opts.driver_calls, opts.window.as_ref());
    mark("layout");
    note(|| {
        let largest = tl.shards.iter().map(|s| s.end - s.start).max().unwrap_or(0);
        format!("{} shards of {} slices, largest {largest}", tl.shards.len(), tl.items.len())
    });
    if let Some(limit) = &opts.limit {
        size_limit::check(trace, &tl, opts, limit).map_err(|why| io::Error::new(io::ErrorKind::FileTooLarge, why))?;
    }
    let mut out = timed("create output", || Output::create(path, opts.gzip))?;
    if let Some(limit) = &opts.limit {
        out.set_limit(limit.clone());
    }
    if let Some(p) = opts.progress.clone() {
        // Perfetto writes one shard more than the timeline has: the side events (counters, instants).
        let total = tl.shards.len() as u64 + u64::from(opts.format == Format::Perfetto);
        let mut done = 0;
        (p.0)(Stage::Writing { done, total });
        out.on_progress(move |n| {
            done += n as u64;
            (p.0)(Stage::Writing { done, total });
        });
    }
    match opts.format {
        Format::Perfetto => {
            crate::perfetto::write(trace, &tl, &mut out, opts.compress_packets && !opts.gzip, &opts.findings)?
        }
        Format::Chrome => crate::chrome::write(trace, &tl, &mut out, path, &opts.findings)?,
    }
    let bytes = timed("finish output", || out.finish())?;
    mark("write");
    Ok(ExportSummary {
        bytes,
        slices: tl.items.len() as u64,
        flows: tl.flows.total,
        tracks: tl.tracks.len(),
        shards: tl.shards.len(),
        overflow_lanes: tl.overflow_lanes,
        driver_calls_hidden: tl.driver_calls.hidden,
        annotation_spans_dropped: tl.annotations_dropped,
        shared_tracks: timeline::shared_roles(&tl.tracks),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_size_spreads_small_traces_over_the_workers() {
        // The loop fixture's 18,633 slices: 2,000; 10M records' 6.67M: 50,000 (Chrome JSON 4,000).
        for f in [Format::Perfetto, Format::Chrome] {
            assert_eq!(shard_slices_for(18_633, f), 2_000);
            assert_eq!(shard_slices_for(100, f), 2_000);
            assert_eq!(shard_slices_for(0, f), 2_000);
        }
        assert_eq!(shard_slices_for(200_000, Format::Perfetto), 3_125);
        assert_eq!(shard_slices_for(200_000, Format::Chrome), 3_125);
        assert_eq!(shard_slices_for(6_670_261, Format::Perfetto), 50_000);
        assert_eq!(shard_slices_for(6_670_261, Format::Chrome), 4_000);
    }
}
