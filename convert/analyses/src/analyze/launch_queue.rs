//! Launch queue depth per stream over time, as HTA defines it (`TraceCounters.get_queue_length_time_series` in
//! facebookresearch/HolisticTraceAnalysis, `hta/analyzers/trace_counters.py`): the depth rises by one at the
//! START of a launching call (`cudaLaunchKernel`, `cuLaunchKernel`, `cudaMemcpyAsync`, `cudaMemsetAsync`) and
//! falls by one when its op starts on the GPU. The call's start, not its end, because an op on an idle stream
//! often starts before its launch call returns: counting from the end would make the depth negative.
//! Time at a full queue is HTA's `get_time_spent_blocked_on_full_queue`: the time a stream's depth was at or
//! above `CUDA_MAX_LAUNCH_QUEUE_PER_STREAM` = 1024 (`hta/common/constants.py`).

use serde::Serialize;

use super::collect::StreamKey;

/// A stream's launch queue holds at most this many launched, not yet started ops; a launch into a full queue
/// blocks the host (HTA's `CUDA_MAX_LAUNCH_QUEUE_PER_STREAM`).
pub const FULL_QUEUE: i64 = 1024;

/// At most this many points of a stream's depth series are kept.
pub const MAX_SERIES_POINTS: usize = 1000;

/// One launch as the queue sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Queued {
    pub stream: StreamKey,
    pub call_start: u64,
    pub call_end: u64,
    pub op_start: u64,
}

/// One stream's launch queue over the time it held launches.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StreamQueue {
    /// The file (process) index, device and stream id.
    pub proc: u16,
    pub device: u32,
    pub stream: u32,
    pub launches: u64,
    /// From the first launch call's start to the last op's start on this stream.
    pub start: u64,
    pub end: u64,
    pub max_depth: i64,
    /// The depth's mean over `[start, end)`, weighted by time.
    pub mean_depth: f64,
    /// Time the depth was at least [`FULL_QUEUE`].
    pub full_ns: u64,
    /// The depth over time, `(time, depth)`: every change where there are at most [`MAX_SERIES_POINTS`], else
    /// the largest depth of each of at most [`MAX_SERIES_POINTS`] equal windows, at the window's start.
    pub series: Vec<(u64, i64)>,
}

/// Launch calls that found their stream's queue full (at least [`FULL_QUEUE`] launched ops not yet started,
/// not counting their own): the host waited in them for the queue to drain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Blocked {
    pub calls: u64,
    /// The time those calls took, summed.
    pub ns: u64,
}

/// Builds a stream's series: every change while few, else each window's maximum.
struct Series {
    start: u64,
    width: u64,
    /// Windows up to the one holding the stream's last event.
    used: usize,
    /// The depth after the latest change.
    last: i64,
    points: Vec<(u64, i64)>,
    /// Per window: the largest depth reached in it and the depth it ended at (`None`: no change in it).
    windows: Vec<Option<(i64, i64)>>,
}

impl Series {
    fn new(start: u64, end: u64) -> Series {
        let width = end.saturating_sub(start) / MAX_SERIES_POINTS as u64 + 1;
        let used = (end.saturating_sub(start) / width) as usize + 1;
        Series { start, width, used, last: 0, points: Vec::new(), windows: vec![None; used] }
    }

    fn push(&mut self, t: u64, depth: i64) {
        if self.points.len() <= MAX_SERIES_POINTS {
            self.points.push((t, depth));
        }
        let w = &mut self.windows[((t.saturating_sub(self.start) / self.width) as usize).min(self.used - 1)];
        // A window's first change starts from the depth carried into it, which counts towards its largest.
        let max = w.map_or(self.last, |(max, _)| max).max(depth);
        *w = Some((max, depth));
        self.last = depth;
    }

    fn finish(self) -> Vec<(u64, i64)> {
        if self.points.len() <= MAX_SERIES_POINTS {
            return self.points;
        }
        // A window without a change holds the depth the window before it ended at.
        let (start, width, mut carried) = (self.start, self.width, 0);
        let mut out = Vec::with_capacity(self.used);
        for (i, w) in self.windows.into_iter().enumerate() {
            let max = w.map_or(carried, |(max, last)| {
                carried = last;
                max
            });
            out.push((start + i as u64 * width, max));
        }
        out
    }
}

/// One stream's queue walked event by event in time order, at equal times the ops' starts before the calls'
/// starts (so a launch that started an op at once never counts twice): the one definition of its figures, for a
/// load's sorted launches and a stream's settled ones.
pub(crate) struct QueueWalk {
    stream: StreamKey,
    start: u64,
    end: u64,
    launches: u64,
    depth: i64,
    max_depth: i64,
    area: u128,
    full_ns: u64,
    /// The time walked to, and whether its step is still open (more events at it may come).
    prev: u64,
    open: bool,
    series: Series,
}

impl QueueWalk {
    /// A walk over `[start, end]`: the stream's first and last event.
    pub fn new(stream: StreamKey, start: u64, end: u64) -> QueueWalk {
        let end = end.max(start);
        QueueWalk {
            stream,
            start,
            end,
            launches: 0,
            depth: 0,
            max_depth: 0,
            area: 0,
            full_ns: 0,
            prev: start,
            open: false,
            series: Series::new(start, end),
        }
    }

    /// Moves to time `t` (an event earlier than the time walked, which only a stream settled early gives, counts
    /// at that time).
    fn at(&mut self, t: u64) {
        let t = t.max(self.prev);
        if self.open && t == self.prev {
            return;
        }
        self.close();
        let elapsed = t - self.prev;
        self.area += self.depth.max(0) as u128 * elapsed as u128;
        if self.depth >= FULL_QUEUE {
            self.full_ns += elapsed;
        }
        (self.prev, self.open) = (t, true);
    }

    fn close(&mut self) {
        if std::mem::take(&mut self.open) {
            self.max_depth = self.max_depth.max(self.depth);
            self.series.push(self.prev, self.depth);
        }
    }

    /// An op started on the GPU at `t`.
    pub fn op(&mut self, t: u64) {
        self.at(t);
        self.depth -= 1;
    }

    /// A launch call started at `t` and took `cost`; counted in `blocked` when it found the queue full.
    pub fn call(&mut self, t: u64, cost: u64, blocked: &mut Blocked) {
        self.at(t);
        if self.depth >= FULL_QUEUE {
            blocked.calls += 1;
            blocked.ns = blocked.ns.saturating_add(cost);
        }
        self.depth += 1;
        self.launches += 1;
    }

    /// The stream's queue, once every event was walked.
    pub fn finish(mut self) -> StreamQueue {
        self.close();
        let (start, end) = (self.start, self.end);
        let mean_depth = if end > start { self.area as f64 / (end - start) as f64 } else { 0.0 };
        StreamQueue {
            proc: self.stream.proc.0,
            device: self.stream.device,
            stream: self.stream.stream,
            launches: self.launches,
            start,
            end,
            max_depth: self.max_depth,
            mean_depth,
            full_ns: self.full_ns,
            series: self.series.finish(),
        }
    }
}

/// One stream's queue from its launches, sorted by call start; adds its blocked calls to `blocked`.
fn stream_queue(calls: &[Queued], blocked: &mut Blocked) -> StreamQueue {
    let mut ops: Vec<u64> = calls.iter().map(|q| q.op_start).collect();
    ops.sort_unstable();
    let start = calls[0].call_start.min(ops[0]);
    let end = calls[calls.len() - 1].call_start.max(ops[ops.len() - 1]);
    let mut walk = QueueWalk::new(calls[0].stream, start, end);
    let mut next_op = 0;
    for c in calls {
        while let Some(&t) = ops.get(next_op).filter(|&&t| t <= c.call_start) {
            walk.op(t);
            next_op += 1;
        }
        walk.call(c.call_start, c.call_end.saturating_sub(c.call_start), blocked);
    }
    for &t in &ops[next_op..] {
        walk.op(t);
    }
    walk.finish()
}

/// Every stream's queue, by (file, device, stream), and the launch calls blocked on a full queue.
pub(super) fn queues(mut items: Vec<Queued>) -> (Vec<StreamQueue>, Blocked) {
    use rayon::prelude::*;
    items.par_sort_unstable_by_key(|q| (q.stream, q.call_start));
    let mut blocked = Blocked::default();
    let streams = items.chunk_by(|a, b| a.stream == b.stream).map(|calls| stream_queue(calls, &mut blocked)).collect();
    (streams, blocked)
}
