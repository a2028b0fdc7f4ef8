//! One window of a timeline split in time (`cupti-convert --split-by`): the slices that start in the window, each
//! kept whole there (a slice that crosses the window's end is drawn to its own end, and not again in the next
//! window), and the tracks every window of the split shares, made even where the window has no slice on them, so
//! that each file shows the same processes, threads, GPUs, contexts and streams.

use cutr_model::Trace;
use cutr_model::nvtx_spans::GpuSpan;
use rayon::prelude::*;

use super::item::Src;
use super::placement::Placement;
use super::tracks::{Track, TrackMaker, TrackRole};

/// A window of a split timeline: slices whose start lies in `[from, before)` (trace time, ns), and the tracks
/// every window shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub from: u64,
    pub before: u64,
    /// The recording-health slice spans the whole recording: it is drawn in the first window only.
    pub first: bool,
    /// Tracks made even where the window has no slice on them ([`shared_roles`] of the other windows).
    pub tracks: Vec<TrackRole>,
}

impl Window {
    fn keeps(&self, start: u64) -> bool {
        (self.from..self.before).contains(&start)
    }
}

/// The roles of `tracks` that every window of a split shows: processes, threads, GPUs, contexts, streams, their
/// syncs and NVTX spans, CUPTI overhead and memory in use. Overflow lanes (they depend on what overlaps in a
/// window), GPU metric series and unified memory
/// tracks (drawn where their samples are) are left out.
pub fn shared_roles(tracks: &[Track]) -> Vec<TrackRole> {
    tracks
        .iter()
        .filter(|t| {
            matches!(
                t.role,
                TrackRole::Thread { .. }
                    | TrackRole::Gpu { .. }
                    | TrackRole::Context { .. }
                    | TrackRole::Stream { .. }
                    | TrackRole::StreamRanges { .. }
                    | TrackRole::StreamSync { .. }
                    | TrackRole::DeviceSync { .. }
                    | TrackRole::Overhead { .. }
                    | TrackRole::Memory { .. }
                    | TrackRole::MemoryOfClass { .. }
                    | TrackRole::CapturedRanges { .. }
            )
        })
        .map(|t| t.role.clone())
        .collect()
}

/// Makes the tracks of `roles` that the window's rows did not make. Roles of a file the trace does not have
/// (another split's) are skipped.
pub(crate) fn make_shared_tracks(maker: &mut TrackMaker<'_>, trace: &Trace, roles: &[TrackRole]) {
    for role in roles {
        let proc = match role {
            TrackRole::Thread { proc, .. }
            | TrackRole::Gpu { proc, .. }
            | TrackRole::Context { proc, .. }
            | TrackRole::Stream { proc, .. }
            | TrackRole::StreamRanges { proc, .. }
            | TrackRole::StreamSync { proc, .. }
            | TrackRole::DeviceSync { proc, .. }
            | TrackRole::Overhead { proc }
            | TrackRole::Memory { proc, .. }
            | TrackRole::MemoryOfClass { proc, .. }
            | TrackRole::CapturedRanges { proc, .. } => *proc,
            _ => continue,
        };
        if proc.index() >= trace.processes.len() {
            continue;
        }
        match *role {
            TrackRole::Thread { proc, tid, .. } => {
                maker.thread(proc, tid);
            }
            TrackRole::Gpu { proc, device } => {
                maker.gpu(proc, device);
            }
            TrackRole::Context { proc, device, context } => {
                maker.context(proc, device, context);
            }
            TrackRole::Stream { proc, device, context, stream } => {
                maker.stream(proc, device, context, stream);
            }
            TrackRole::StreamRanges { proc, device, context, stream } => {
                maker.stream_ranges(proc, device, context, stream);
            }
            TrackRole::StreamSync { proc, device, context, stream } => {
                maker.sync(proc, device, context, stream);
            }
            TrackRole::DeviceSync { proc, device, context } => {
                maker.sync(proc, device, context, u32::MAX);
            }
            TrackRole::Overhead { proc } => {
                maker.overhead(proc);
            }
            TrackRole::Memory { proc, device } => {
                maker.memory(proc, device);
            }
            TrackRole::MemoryOfClass { proc, device, class } => {
                maker.memory_of_class(proc, device, class);
            }
            TrackRole::CapturedRanges { proc, device } => {
                maker.captured_ranges(proc, device);
            }
            _ => {}
        }
    }
}

/// Sends the rows that start outside the window to `discard` (a bucket past the tracks, cut off after grouping).
/// An NVTX range's GPU spans go with the range: kept where it starts, over the work that window holds (the window
/// after it would otherwise draw the rest of a span again, from its first op there).
pub(crate) fn discard_outside(
    placed: &mut Placement,
    trace: &Trace,
    annotations: &[GpuSpan],
    window: &Window,
    discard: u32,
) {
    fn send(keys: &mut [u32], start: impl Fn(usize) -> u64 + Sync, window: &Window, discard: u32) {
        keys.par_iter_mut().enumerate().filter(|(i, _)| !window.keeps(start(*i))).for_each(|(_, k)| *k = discard);
    }
    send(&mut placed.kernel, |i| trace.kernels[i].start, window, discard);
    send(&mut placed.memcpy, |i| trace.memcpys[i].start, window, discard);
    send(&mut placed.memset, |i| trace.memsets[i].start, window, discard);
    send(&mut placed.api, |i| trace.apis[i].start, window, discard);
    let order = &placed.range_order;
    send(&mut placed.range, |i| trace.ranges[order[i] as usize].start, window, discard);
    send(&mut placed.sync, |i| trace.syncs[i].start, window, discard);
    send(&mut placed.um, |i| trace.um[i].start, window, discard);
    placed.other.retain(|it| match it.src() {
        Src::Health => window.first,
        Src::Annotation(i) => window.keeps(trace.ranges[annotations[i as usize].range as usize].start),
        _ => window.keeps(it.start),
    });
}
