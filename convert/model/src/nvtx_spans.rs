//! NVTX ranges laid over the GPU work launched inside them, as Kineto lays its `record_function` annotations
//! (`gpu_user_annotation`): every kernel, copy and memset belongs to the innermost range around the API call that
//! launched it, on the calling thread ([`Trace::api_range`], the join `Trace::gpu_work_by_range` starts from), and
//! each (range, stream) with work gets one span from the first start to the last end of that work.
//!
//! An op belongs to its innermost range only, as Kineto attributes a kernel to the innermost annotation (CUPTI's
//! external correlation records the top of the stack). So an outer range gets a span on a stream only where it
//! launched work itself, and that span encloses an inner range's only when its own work came before and after.
//! Spans that took every range around an op would make an outer range's span equal its only child's wherever
//! the child did all the work on a stream; HTA then picks the innermost annotation of a kernel by shorter
//! duration, and between equal ones arbitrarily.

use rayon::prelude::*;

use crate::ids::{CorrKey, ProcId};
use crate::trace::Trace;

/// The work one NVTX range launched itself (not inside a range nested in it) on one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuSpan {
    /// Index into `Trace::ranges`.
    pub range: u32,
    pub proc: ProcId,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    /// First start and last end of the work.
    pub start: u64,
    pub end: u64,
    /// The kernels, copies and memsets, and their summed duration (the span less the time the stream was idle
    /// in it, when its ops do not overlap).
    pub ops: u64,
    pub busy_ns: u64,
}

impl GpuSpan {
    pub fn duration(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

/// Where one op ran: (device, context, stream).
type Place = (u32, u32, u32);

const NONE: u32 = u32::MAX;

/// The spans of every range with work, sorted by (file, device, context, stream, start, longer first, outer
/// first, range). Empty for a trace without NVTX ranges.
pub fn gpu_spans(trace: &Trace) -> Vec<GpuSpan> {
    if trace.ranges.is_empty() {
        return Vec::new();
    }
    // The range of each op is that of its launching call; an op without one (no launcher, or a call outside
    // every range) belongs to none. Looked up in parallel, table by table.
    let range_of = |key: CorrKey| -> u32 {
        let r = trace.launcher_index(key).and_then(|call| trace.api_range.get(call as usize).copied());
        r.filter(|&r| (r as usize) < trace.ranges.len()).unwrap_or(NONE)
    };
    let kernels: Vec<u32> = trace.kernels.par_iter().map(|k| range_of(k.corr())).collect();
    let memcpys: Vec<u32> = trace.memcpys.par_iter().map(|m| range_of(m.corr())).collect();
    let memsets: Vec<u32> = trace.memsets.par_iter().map(|m| range_of(m.corr())).collect();
    let mut spans = Spans { spans: Vec::new(), first: vec![NONE; trace.ranges.len()], next: Vec::new() };
    for (k, &r) in trace.kernels.iter().zip(&kernels) {
        spans.add(r, k.proc, (k.device, k.context, k.stream), (k.start, k.end));
    }
    for (m, &r) in trace.memcpys.iter().zip(&memcpys) {
        spans.add(r, m.proc, (m.device, m.context, m.stream), (m.start, m.end));
    }
    for (m, &r) in trace.memsets.iter().zip(&memsets) {
        spans.add(r, m.proc, (m.device, m.context, m.stream), (m.start, m.end));
    }
    let mut out = spans.spans;
    let depth = |s: &GpuSpan| trace.ranges[s.range as usize].depth;
    // Outer ranges first among spans of the same extent (from several threads), so that a viewer's order (start,
    // longer first, then index) opens the parent first.
    out.par_sort_unstable_by_key(|s| {
        (s.proc, s.device, s.context, s.stream, s.start, std::cmp::Reverse(s.end), depth(s), s.range)
    });
    out
}

/// The spans found so far, with each range's as a list (a range launches work on a stream or two, so a walk of
/// its list finds the stream's span sooner than a hash would).
struct Spans {
    spans: Vec<GpuSpan>,
    /// Per range: its first span (`NONE`: none yet).
    first: Vec<u32>,
    /// Per span: the next of its range's.
    next: Vec<u32>,
}

impl Spans {
    /// Adds an op of range `range` (`NONE`: none) that ran at `place` over `(start, end)`.
    fn add(&mut self, range: u32, proc: ProcId, (device, context, stream): Place, (start, end): (u64, u64)) {
        let Some(&head) = self.first.get(range as usize) else { return };
        let mut at = head;
        while let Some(s) = self.spans.get_mut(at as usize) {
            if (s.proc, s.device, s.context, s.stream) == (proc, device, context, stream) {
                s.start = s.start.min(start);
                s.end = s.end.max(end);
                s.ops += 1;
                s.busy_ns += end.saturating_sub(start);
                return;
            }
            at = self.next[at as usize];
        }
        let busy_ns = end.saturating_sub(start);
        self.spans.push(GpuSpan { range, proc, device, context, stream, start, end, ops: 1, busy_ns });
        self.next.push(head);
        self.first[range as usize] = self.spans.len() as u32 - 1;
    }
}

/// Per range (indexed like `Trace::ranges`): the summed length of its spans and how many it has.
pub fn span_totals(trace: &Trace, spans: &[GpuSpan]) -> Vec<(u64, u64)> {
    let mut out = vec![(0u64, 0u64); trace.ranges.len()];
    for s in spans {
        if let Some(t) = out.get_mut(s.range as usize) {
            t.0 += s.duration();
            t.1 += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NameId;
    use crate::rows::{ApiCall, Kernel, Memcpy, NvtxRange};

    const P: ProcId = ProcId(0);

    fn call(tid: u32, correlation: u32, start: u64) -> ApiCall {
        let (pid, cbid, driver, return_value) = (1, 211, false, 0);
        ApiCall { proc: P, tid, pid, correlation, start, end: start + 5, cbid, driver, return_value }
    }

    fn range(tid: u32, start: u64, end: u64, name: NameId) -> NvtxRange {
        let (pid, domain, id, depth, parent) = (1, NameId::EMPTY, 0, 0, NvtxRange::NO_PARENT);
        NvtxRange { proc: P, start, end, pid, tid, name, domain, id, depth, parent }
    }

    fn kernel(stream: u32, correlation: u32, start: u64, end: u64) -> Kernel {
        Kernel { device: 0, context: 1, stream, correlation, start, end, ..Default::default() }
    }

    /// Thread 1: `outer` [0, 1000) launches a kernel at 10 and one at 900 on stream 7, and holds `inner`
    /// [100, 500), which launches two kernels on stream 7 and a copy on stream 8; `empty` [600, 700) launches
    /// nothing. Thread 2 launches one kernel outside every range.
    fn scenario() -> Trace {
        let mut t = Trace::default();
        let (outer, inner, empty) = (t.names.intern("outer"), t.names.intern("inner"), t.names.intern("empty"));
        t.ranges = vec![range(1, 0, 1000, outer), range(1, 100, 500, inner), range(1, 600, 700, empty)];
        t.apis = vec![call(1, 1, 10), call(1, 2, 110), call(1, 3, 120), call(1, 4, 130), call(1, 5, 900)];
        t.apis.push(call(2, 6, 140));
        t.kernels = vec![
            kernel(7, 1, 2000, 2100),
            kernel(7, 2, 2200, 2250),
            kernel(7, 3, 2300, 2400),
            kernel(7, 5, 2500, 2600),
            kernel(7, 6, 2420, 2440),
        ];
        t.memcpys = vec![Memcpy {
            proc: P,
            start: 2210,
            end: 2290,
            device: 0,
            context: 1,
            stream: 8,
            correlation: 4,
            bytes: 64,
            copy_kind: 1,
            src_kind: 1,
            dst_kind: 3,
            flags: 0,
            graph_id: 0,
            graph_node_id: 0,
            peer: None,
        }];
        t.finish();
        t
    }

    #[test]
    fn each_op_goes_to_its_innermost_range_on_its_stream() {
        let t = scenario();
        let spans = gpu_spans(&t);
        let got: Vec<(&str, u32, u64, u64, u64, u64)> = spans
            .iter()
            .map(|s| (t.names.get(t.ranges[s.range as usize].name), s.stream, s.start, s.end, s.ops, s.busy_ns))
            .collect();
        // `outer`'s own kernels bracket `inner`'s, so its span encloses `inner`'s; the copy is `inner`'s alone, on
        // stream 8; thread 2's kernel (inside `outer`'s span) is nobody's.
        assert_eq!(
            got,
            [("outer", 7, 2000, 2600, 2, 200), ("inner", 7, 2200, 2400, 2, 150), ("inner", 8, 2210, 2290, 1, 80)]
        );
        assert_eq!(span_totals(&t, &spans), [(600, 1), (280, 2), (0, 0)]);
        // The same join as the range totals: each range's own work, nested ranges' added up the chain.
        assert_eq!(t.gpu_work_by_range(), [(430, 5), (230, 3), (0, 0)]);
    }

    #[test]
    fn a_trace_without_ranges_has_no_spans() {
        let mut t = scenario();
        t.ranges.clear();
        t.finish();
        assert!(gpu_spans(&t).is_empty());
    }
}
