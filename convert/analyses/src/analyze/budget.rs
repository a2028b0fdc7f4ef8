//! The time budget of one GPU by interval union: one sweep over its ops' starts and ends cuts its span into
//! segments, each in exactly one state (computation, communication alone, copies alone, idle), so the parts of
//! any window's budget add up to the window exactly. Definitions in docs/ANALYZE.md.

use super::types::Budget;

/// What an op on the GPU does, for the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClass {
    /// A kernel that is not communication.
    Compute,
    /// A collective kernel (NCCL, RCCL...: [`super::is_communication`]).
    Communication,
    /// A memcpy or memset.
    Copy,
}

/// What ran on the GPU over one segment of its span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Idle,
    /// Copies or memsets and nothing else.
    Copy,
    /// Communication, maybe copies, and no computation.
    CommunicationExposed,
    /// Computation, without communication.
    Compute,
    /// Computation with communication under it (the communication is overlapped).
    ComputeWithCommunication,
}

/// A piece of the GPU's span `[start, end)` in one state; a GPU's segments are contiguous and in time order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
    pub state: State,
}

/// The segments of a GPU's span, from its ops' `(start, end, class)` (any order; empty ones ignored). The span is
/// the first op's start to the last op's end; an empty list has no segments.
pub fn segments(ops: impl IntoIterator<Item = (u64, u64, OpClass)>) -> Vec<Segment> {
    // Each op's start (+1) and end (-1) of its class; ends before starts at the same instant, which does not
    // change the union (a zero-length segment is dropped) but keeps the counts from going negative.
    let mut edges: Vec<(u64, bool, OpClass)> = Vec::new();
    for (s, e, c) in ops.into_iter().filter(|o| o.1 > o.0) {
        edges.push((s, true, c));
        edges.push((e, false, c));
    }
    edges.sort_unstable_by_key(|&(t, is_start, _)| (t, is_start));
    let mut out: Vec<Segment> = Vec::new();
    let (mut compute, mut comm, mut copy) = (0u32, 0u32, 0u32);
    let mut prev = edges.first().map_or(0, |e| e.0);
    for (t, is_start, class) in edges {
        if t > prev {
            let state = state_of(compute, comm, copy);
            match out.last_mut() {
                Some(last) if last.state == state && last.end == prev => last.end = t,
                _ => out.push(Segment { start: prev, end: t, state }),
            }
            prev = t;
        }
        let count = match class {
            OpClass::Compute => &mut compute,
            OpClass::Communication => &mut comm,
            OpClass::Copy => &mut copy,
        };
        if is_start {
            *count += 1;
        } else {
            *count -= 1;
        }
    }
    out
}

/// The state while `compute`, `comm` and `copy` ops of each class run.
pub(crate) fn state_of(compute: u32, comm: u32, copy: u32) -> State {
    match (compute > 0, comm > 0, copy > 0) {
        (true, true, _) => State::ComputeWithCommunication,
        (true, false, _) => State::Compute,
        (false, true, _) => State::CommunicationExposed,
        (false, false, true) => State::Copy,
        (false, false, false) => State::Idle,
    }
}

/// The budget over `[start, end)` of a GPU whose span is cut into `segs`: time outside its span is idle.
pub fn budget_over(segs: &[Segment], start: u64, end: u64) -> Budget {
    let end = end.max(start);
    let mut b = Budget { start, end, span_ns: end - start, ..Budget::default() };
    let first = segs.partition_point(|s| s.end <= start);
    let mut busy = 0u64;
    for s in segs[first..].iter().take_while(|s| s.start < end) {
        let ns = s.end.min(end) - s.start.max(start);
        match s.state {
            State::Idle => continue,
            State::Copy => b.copies_exposed_ns += ns,
            State::CommunicationExposed => b.communication_exposed_ns += ns,
            State::Compute => b.computation_ns += ns,
            State::ComputeWithCommunication => {
                b.computation_ns += ns;
                b.communication_overlapped_ns += ns;
            }
        }
        busy += ns;
    }
    b.idle_ns = b.span_ns - busy;
    debug_assert_eq!(b.computation_ns + b.communication_exposed_ns + b.copies_exposed_ns + b.idle_ns, b.span_ns);
    b
}

/// The budget over the whole span of `segs`.
pub fn budget(segs: &[Segment]) -> Budget {
    match (segs.first(), segs.last()) {
        (Some(f), Some(l)) => budget_over(segs, f.start, l.end),
        _ => Budget::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::OpClass::*;
    use super::*;

    /// Known by construction: a kernel 0-100 with a copy 10-20 under it and an allreduce 50-150 under and past
    /// it, a copy 120-130 under the exposed allreduce, a copy alone 200-260, nothing 150-200 and 260-300, a kernel
    /// 300-310 (and an empty copy, ignored).
    #[test]
    fn every_instant_is_counted_once() {
        let ops = [
            (0, 100, Compute),
            (10, 20, Copy),
            (50, 150, Communication),
            (120, 130, Copy),
            (200, 260, Copy),
            (300, 310, Compute),
            (305, 305, Copy),
        ];
        let segs = segments(ops);
        let b = budget(&segs);
        assert_eq!((b.start, b.end, b.span_ns), (0, 310, 310));
        assert_eq!(b.computation_ns, 110);
        assert_eq!(b.communication_overlapped_ns, 50);
        assert_eq!(b.communication_exposed_ns, 50);
        assert_eq!(b.copies_exposed_ns, 60);
        assert_eq!(b.idle_ns, 90);
        // A window reaching past the span: the outside is idle.
        let w = budget_over(&segs, 90, 400);
        assert_eq!(
            (w.span_ns, w.computation_ns, w.communication_overlapped_ns, w.communication_exposed_ns),
            (310, 20, 10, 50)
        );
        assert_eq!((w.copies_exposed_ns, w.idle_ns), (60, 180));
        let idle: Vec<(u64, u64)> = segs.iter().filter(|s| s.state == State::Idle).map(|s| (s.start, s.end)).collect();
        assert_eq!(idle, [(150, 200), (260, 300)]);
    }

    #[test]
    fn no_ops_no_span() {
        assert_eq!(budget(&segments([])), Budget::default());
        assert_eq!(budget_over(&[], 10, 30).idle_ns, 20);
    }
}
