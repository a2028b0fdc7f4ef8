//! CUDA graphs for a stream: a node's creating call and the NVTX ranges open at its creation are looked up among
//! every call and range of its thread, which a stream does not keep. [`graph_context`] streams the recordings
//! once more, keeping only the calls and ranges that hold the moment of some graph event on its thread (bounded
//! by the number of events, not by the recording), and joins the graph events over those as a load does: the
//! same nodes, calls and range paths, for each replayed operation to be traced back to ([`GraphContext::origin_of`]).
//! [`graph_context_in`] does the same over a `--start/--end` window as a load with that filter reads it: every
//! graph event (a load keeps them whatever the window), but only the calls and NVTX ranges that overlap the window,
//! the ranges nested among themselves, so that a node made outside the window has the call and ranges the windowed
//! load gives it (none, or only the window's).
//!
//! [`GraphContext::origin_of`]: crate::GraphContext::origin_of

use std::path::PathBuf;

use cutr_format::{ChunkType, Reader};
use rustc_hash::FxHashMap;

use super::{StreamOptions, stream_readers_in};
use crate::ids::ProcId;
use crate::load::{Filter, LoadError};
use crate::rows::{ApiCall, NvtxRange};
use crate::trace::Trace;

/// The moments of graph events, per (file, thread), sorted.
struct Moments(FxHashMap<(ProcId, u32), Vec<u64>>);

impl Moments {
    fn of(t: &Trace) -> Moments {
        let mut m: FxHashMap<(ProcId, u32), Vec<u64>> = FxHashMap::default();
        for (proc, e) in &t.graphs.pending.events {
            m.entry((*proc, e.thread_id)).or_default().push(e.timestamp);
        }
        for v in m.values_mut() {
            v.sort_unstable();
            v.dedup();
        }
        Moments(m)
    }

    /// Whether some event of thread `tid` of `proc` happened within `start..=end`.
    fn any(&self, proc: ProcId, tid: u32, start: u64, end: u64) -> bool {
        self.0.get(&(proc, tid)).is_some_and(|v| v.get(v.partition_point(|&t| t < start)).is_some_and(|&t| t <= end))
    }
}

/// The graphs of `paths` (opened as `readers`), joined over the calls and ranges that hold a graph event: a trace
/// with the processes, names, graphs, those calls and ranges, and the graph joins' counts; `None` when no file
/// recorded graph events. Streams the recordings once (with `opts`' windows).
pub fn graph_context(paths: &[PathBuf], readers: &[Reader], opts: &StreamOptions) -> Result<Option<Trace>, LoadError> {
    graph_context_in(paths, readers, opts, &Filter::default())
}

/// [`graph_context`] as a load with `filter` joins the graphs: every graph event, joined over the calls and NVTX
/// ranges `filter`'s `--start/--end` window keeps (ranges nested among those it keeps, unclosed ones kept when
/// they start by its end), so that the nodes' calls and range paths, and the join counts, are the windowed load's.
/// Streams only the chunks that overlap the window.
pub fn graph_context_in(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &StreamOptions,
    filter: &Filter,
) -> Result<Option<Trace>, LoadError> {
    if !readers.iter().any(|r| r.chunks().iter().any(|c| c.chunk_type() == ChunkType::Graphs)) {
        return Ok(None);
    }
    let opts = StreamOptions { graph_events: true, counters: false, ..opts.clone() };
    let mut moments: Option<Moments> = None;
    let (mut apis, mut ranges): (Vec<ApiCall>, Vec<NvtxRange>) = (Vec::new(), Vec::new());
    // The batches hold only the calls and closed ranges the window keeps, as a load decodes and pairs them.
    let (mut trace, end) = stream_readers_in(paths, readers, &opts, filter, |t, _, batch| {
        let m = moments.get_or_insert_with(|| Moments::of(t));
        apis.extend(batch.apis.iter().filter(|a| m.any(a.proc, a.tid, a.start, a.end)));
        ranges.extend(batch.ranges.iter().filter(|r| m.any(r.proc, r.tid, r.start, r.end)));
    })?;
    let m = moments.unwrap_or_else(|| Moments::of(&trace));
    // The stream hands on every range never closed; a load keeps those that start by the window's end.
    let unclosed = end.unclosed_ranges.iter().filter(|r| filter.keeps(r.start, r.end));
    ranges.extend(unclosed.filter(|r| m.any(r.proc, r.tid, r.start, r.end)));
    // Sorted and nested as a load sorts and nests the whole tables.
    apis.sort_unstable_by_key(|k| (k.start, k.proc, k.correlation));
    ranges.sort_unstable_by_key(|r| (r.proc, r.pid, r.tid, r.start, std::cmp::Reverse(r.end)));
    crate::nvtx::nest(&mut ranges);
    (trace.apis, trace.ranges) = (apis, ranges);
    trace.join_graphs();
    Ok(Some(trace))
}
