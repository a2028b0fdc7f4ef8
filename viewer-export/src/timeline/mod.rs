//! The trace model laid out for viewers: tracks (host process -> thread, GPU -> context -> stream), the slices on
//! each track, the CPU->GPU arrows, and the split of all slices into shards that are written in parallel.
//!
//! Rows are placed on their tracks (`placement`), grouped by track in time order (`grouping`); slices that
//! overlap without nesting move to overflow lanes (`lanes`); each track's slices are cut into shards
//! (`shards`); the arrows are counted per launch (`flows`), CUDA graph replays tied to their capture
//! (`graphs`), NVTX ranges laid over the GPU work they launched (`annotations`); the names that are not in the
//! model are resolved once (`labels`); counter series get short names, units and an order in their GPU's
//! metrics block (`counter_names`, `gpu_metrics`); the driver calls a runtime call made are left out unless
//! asked for (`driver_calls`).

mod annotations;
pub mod counter_names;
mod driver_calls;
mod flows;
mod gpu_metrics;
pub mod graphs;
mod grouping;
mod item;
mod labels;
mod lanes;
mod placement;
mod shards;
mod tracks;
mod um;
mod window;

use cutr_model::par::{Source, group_by_key};
use cutr_model::timing::{mark, timed};
use cutr_model::{NameId, ProcId, Trace};
use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

pub use counter_names::{CounterName, MetricGroup, Unit, counter_name};
pub use driver_calls::{DriverCalls, NestedDriverCalls};
pub use flows::Flows;
pub use gpu_metrics::GPU_METRICS;
pub use item::{Item, MAX_OVERHEADS, MAX_RANGES, MAX_ROWS_PER_KIND, Src};
pub use labels::{LabelNames, Labels, health_args, health_name};
pub use shards::ShardRange;
pub use tracks::{DEVICE_SYNC_TID, LANE_TID_STEP, SYNC_TID_OFFSET, Track, TrackRole, base_track};
pub use um::{
    Processor, StepCounter, UM_HOST_TID, UM_TID, memory_counter_name, processor_name, rate_unit, um_endpoints,
    um_slice_name,
};
pub use window::{Window, shared_roles};

/// A trace laid out: tracks, their slices in layout order, the shards to write, the arrows and the labels.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub tracks: Vec<Track>,
    /// Sorted by (track, start, longer first).
    pub items: Vec<Item>,
    /// In order of their first slice's start.
    pub shards: Vec<ShardRange>,
    /// End times of the slices open at each shard's start ([`ShardRange::open`]).
    pub open_ends: Vec<u64>,
    pub flows: Flows,
    /// The driver calls left out (those inside a runtime call, unless all are drawn).
    pub driver_calls: NestedDriverCalls,
    pub labels: Labels,
    /// CUDA graph replays: each op's capture context, and the capture-time ranges over each replay.
    pub graphs: graphs::GraphView,
    /// NVTX ranges over the GPU work each launched, per stream (`Src::Annotation` indexes them).
    pub annotations: Vec<cutr_model::nvtx_spans::GpuSpan>,
    /// The GPU spans past what the timeline can address ([`MAX_RANGES`]), not drawn.
    pub annotations_dropped: u64,
    /// (file, device) -> Chrome pid of its GPU rows.
    pub gpu_json_pid: HashMap<(ProcId, u32), i64>,
    /// Memory counter track of each (file, device).
    pub memory_track: HashMap<(ProcId, u32), u32>,
    /// Counters drawn as steps, written alike by both writers: device memory in use, unified memory migration
    /// rates.
    pub step_counters: Vec<StepCounter>,
    /// The kernel (index into `Trace::kernels`) running on each unified memory event's GPU when it began
    /// (`u32::MAX`: none), by index into `Trace::um`.
    pub um_kernel: Vec<u32>,
    /// Counter track of each (file, device, series) of `Trace::counters`.
    pub counter_track: HashMap<(ProcId, u32, NameId), u32>,
    pub health_track: u32,
    /// First and last timestamp of the trace.
    pub span: (u64, u64),
    pub overflow_lanes: u32,
}

/// Why a trace is too large to lay out, if it is: more rows of one kind than [`MAX_ROWS_PER_KIND`], or more
/// slices in all than 32-bit item indices reach.
pub fn too_large(trace: &Trace) -> Option<String> {
    if trace.overheads.len() >= MAX_OVERHEADS {
        let n = trace.overheads.len();
        return Some(format!("{n} overhead records exceed the {MAX_OVERHEADS} one conversion can lay out"));
    }
    if trace.ranges.len() >= MAX_RANGES {
        let n = trace.ranges.len();
        return Some(format!("{n} NVTX ranges exceed the {MAX_RANGES} one conversion can lay out"));
    }
    rows_over_limit(&slice_kinds(trace))
}

/// Rows of each kind that become slices.
fn slice_kinds(trace: &Trace) -> [(&'static str, usize); 8] {
    [
        ("kernel", trace.kernels.len()),
        ("memcpy", trace.memcpys.len()),
        ("memset", trace.memsets.len()),
        ("API call", trace.apis.len()),
        ("NVTX range", trace.ranges.len()),
        ("synchronization", trace.syncs.len()),
        ("overhead", trace.overheads.len()),
        ("unified memory", trace.um.len()),
    ]
}

/// About how many slices `trace` lays out (the rows that become slices).
pub fn slice_rows(trace: &Trace) -> usize {
    slice_kinds(trace).iter().map(|(_, n)| n).sum()
}

fn rows_over_limit(kinds: &[(&str, usize)]) -> Option<String> {
    if let Some((what, n)) = kinds.iter().find(|(_, n)| *n >= MAX_ROWS_PER_KIND) {
        return Some(format!("{n} {what} records exceed the {MAX_ROWS_PER_KIND} one conversion can lay out"));
    }
    let total: usize = kinds.iter().map(|(_, n)| n).sum();
    (total >= u32::MAX as usize).then(|| format!("{total} slices exceed the {} one conversion can lay out", u32::MAX))
}

impl Timeline {
    /// Lays out `trace` with shards of `shard_slices` slices (see [`too_large`] for the limits), the driver calls
    /// made inside runtime calls left out.
    pub fn build(trace: &Trace, shard_slices: usize) -> Timeline {
        Timeline::build_with(trace, shard_slices, DriverCalls::default())
    }

    /// [`Timeline::build`], drawing the driver calls `driver_calls` says.
    pub fn build_with(trace: &Trace, shard_slices: usize, driver_calls: DriverCalls) -> Timeline {
        Timeline::build_window(trace, shard_slices, driver_calls, None)
    }

    /// [`Timeline::build_with`], of one `window` of a split: the slices that start in it, on the tracks every
    /// window shares.
    pub fn build_window(
        trace: &Trace,
        shard_slices: usize,
        driver_calls: DriverCalls,
        window: Option<&Window>,
    ) -> Timeline {
        let labels = timed("labels", || Labels::new(trace));
        let graphs = timed("graph replays", || graphs::GraphView::build(trace, &labels, slice_rows(trace)));
        let room = annotations::room(slice_rows(trace) + graphs.replays.len());
        let (annotations, annotations_dropped) = timed("nvtx gpu spans", || annotations::spans(trace, room));
        let span = trace.span();
        let mut maker = tracks::TrackMaker::new(trace);
        let mut placed = placement::place(&mut maker, trace, span, &graphs.replays, &annotations);
        if let Some(w) = window {
            window::make_shared_tracks(&mut maker, trace, &w.tracks);
        }
        let mut nested =
            timed("nested driver calls", || NestedDriverCalls::find(trace, driver_calls, &placed.api, maker.set.len()));
        let memory_track = std::mem::take(&mut placed.memory_track);
        let counter_track = std::mem::take(&mut placed.counter_track);
        let step_counters = timed("step counters", || um::step_counters(&mut maker, trace, &memory_track));
        let um_kernel = timed("kernels under unified memory", || um::running_kernels(trace));
        let layout = Layout { tracks: maker.set.len(), end: span.1, annotations: &annotations, window };
        let mut items = timed("group by track", || group_items(trace, placed, &nested, &layout));
        mark("layout items");
        let health_track = maker.health();
        let mut tracks = maker.set;
        let overflow_lanes = timed("assign lanes", || lanes::assign_lanes(&mut tracks, &mut items));
        let (shards, open_ends) = timed("shard", || shards::shard(&items, shard_slices.max(1)));
        let flows = timed("flows", || Flows::build(trace));
        nested.adopt_launches(&flows);
        Timeline {
            tracks: tracks.tracks,
            items,
            shards,
            open_ends,
            flows,
            driver_calls: nested,
            labels,
            graphs,
            annotations,
            annotations_dropped,
            gpu_json_pid: maker.gpu_json_pid,
            memory_track,
            step_counters,
            um_kernel,
            counter_track,
            health_track,
            span,
            overflow_lanes,
        }
    }

    /// The text of a slice name id (a trace name or a label).
    #[inline]
    pub fn name<'a>(&'a self, trace: &'a Trace, id: NameId) -> &'a str {
        self.labels.names.get(&trace.names, id)
    }
}

/// What grouping needs besides the rows: the tracks made (before lanes), the trace's end (where ranges never
/// closed end), the NVTX ranges' GPU spans and the window of a split.
struct Layout<'a> {
    tracks: usize,
    end: u64,
    annotations: &'a [cutr_model::nvtx_spans::GpuSpan],
    window: Option<&'a Window>,
}

/// Every slice, made straight into its track's group (a parallel stable counting sort over time slices) and
/// each group sorted into layout order. The hidden driver calls and the rows that start outside the `window` go
/// to one bucket past the tracks, cut off after.
fn group_items(
    trace: &Trace,
    mut placed: placement::Placement,
    nested: &NestedDriverCalls,
    layout: &Layout<'_>,
) -> Vec<Item> {
    let Layout { tracks, end, annotations, window } = *layout;
    let hidden_bucket = tracks as u32;
    if let Some(w) = window {
        window::discard_outside(&mut placed, trace, annotations, w, hidden_bucket);
    }
    if nested.hidden > 0 {
        placed
            .api
            .par_iter_mut()
            .enumerate()
            .filter(|(i, _)| nested.is_hidden(*i))
            .for_each(|(_, t)| *t = hidden_bucket);
    }
    let buckets = tracks + usize::from(nested.hidden > 0 || window.is_some());
    let (kernels, memcpys, memsets, apis) = (&trace.kernels, &trace.memcpys, &trace.memsets, &trace.apis);
    let (ranges, syncs, other, order) = (&trace.ranges, &trace.syncs, &placed.other, &placed.range_order);
    let kernel = |i: usize, t| Item::new(t, kernels[i].start, kernels[i].end, Src::Kernel(i as u32));
    let memcpy = |i: usize, t| Item::new(t, memcpys[i].start, memcpys[i].end, Src::Memcpy(i as u32));
    let memset = |i: usize, t| Item::new(t, memsets[i].start, memsets[i].end, Src::Memset(i as u32));
    let api = |i: usize, t| Item::new(t, apis[i].start, apis[i].end, Src::Api(i as u32));
    let range = |i: usize, t| {
        let r = &ranges[order[i] as usize];
        // A range never closed lasts to the end of the trace.
        let stop = if r.closed() { r.end } else { end.max(r.start) };
        Item::new(t, r.start, stop, Src::Range(order[i]))
    };
    let sync = |i: usize, t| Item::new(t, syncs[i].start, syncs[i].end, Src::Sync(i as u32));
    let um_rows = &trace.um;
    let um = |i: usize, t| Item::new(t, um_rows[i].start, um_rows[i].end, Src::Um(i as u32));
    let others = |i: usize, _| other[i];
    let sources = [
        Source { keys: placed.kernel, make: &kernel },
        Source { keys: placed.memcpy, make: &memcpy },
        Source { keys: placed.memset, make: &memset },
        Source { keys: placed.api, make: &api },
        Source { keys: placed.range, make: &range },
        Source { keys: placed.sync, make: &sync },
        Source { keys: placed.um, make: &um },
        Source { keys: other.iter().map(|it| it.track).collect(), make: &others },
    ];
    let starts: [&(dyn Fn(usize) -> u64 + Sync); 8] = [
        &|i| kernels[i].start,
        &|i| memcpys[i].start,
        &|i| memsets[i].start,
        &|i| apis[i].start,
        &|i| ranges[order[i] as usize].start,
        &|i| syncs[i].start,
        &|i| um_rows[i].start,
        &|i| other[i].start,
    ];
    let (blocks, slices) = grouping::time_slices(&sources, &starts);
    let (mut items, mut bounds) = group_by_key(buckets, &sources, &blocks, slices);
    drop(sources);
    // The hidden bucket comes last: its rows are the end of `items`.
    bounds.truncate(tracks * slices + 1);
    items.truncate(bounds[tracks * slices]);
    timed("sort items", || grouping::sort_segments(&mut items, &bounds));
    mark("sort items");
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_past_the_index_limits_are_refused() {
        assert_eq!(rows_over_limit(&[("kernel", MAX_ROWS_PER_KIND - 1), ("API call", 5)]), None);
        assert_eq!(
            rows_over_limit(&[("kernel", 1), ("API call", 1 << 29)]).as_deref(),
            Some("536870912 API call records exceed the 536870912 one conversion can lay out")
        );
        assert_eq!(rows_over_limit(&[("kernel", 500_000_000); 8]), None);
        assert_eq!(
            rows_over_limit(&[("kernel", 500_000_000); 9]).as_deref(),
            Some("4500000000 slices exceed the 4294967295 one conversion can lay out")
        );
    }
}
