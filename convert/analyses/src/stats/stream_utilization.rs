//! `stats --stream`'s utilization: each device's and stream's busy time as the union of its GPU work's intervals,
//! summed window by window. A stream hands over chunks in order of their earliest start, so every row still to
//! come starts at or after the next window's first start ([`Batch::next_start`]): the merged intervals
//! that end before it are settled (their length added, then dropped) and only those reaching past it are kept, a
//! frontier bounded by how much work overlaps a window's edge, not by the length of the run. The figures are the
//! loaded report's ([`super::sections::utilization`]) exactly.
//!
//! A row that starts before what was already settled (a chunk whose header claims a later start than its rows: a
//! damaged or forged file) could overlap time already counted: it is counted as busy only past the settled time,
//! and the report warns how many such rows there were.

use std::collections::BTreeMap;

use cutr_model::stream::Batch;

use super::Utilization;

/// A device (stream `None`) or one of its streams: a row of the section.
type RowKey = (u32, Option<u32>);

/// One device's or stream's intervals so far (also a rank's, for `stats --by-rank`).
#[derive(Default)]
pub(crate) struct Union {
    /// Busy time of the intervals already settled.
    settled_ns: u64,
    /// Where the settled intervals end: nothing may start at or before it any more.
    settled_to: Option<u64>,
    /// Merged, disjoint intervals by start that reach past the last window's edge.
    open: Vec<(u64, u64)>,
    first_start: u64,
    last_end: u64,
    ops: u64,
    /// Intervals settled before the edge passed them: more than the cap were open.
    pub(crate) settled_early: u64,
}

impl Union {
    /// Adds the window's intervals; settles those that end before `edge`, and the oldest past `cap` open ones
    /// (an edge kept back by chunk headers that claim early times). Returns how many started inside the settled
    /// time.
    pub(crate) fn add(&mut self, mut new: Vec<(u64, u64)>, edge: u64, cap: usize) -> u64 {
        if self.ops == 0 {
            self.first_start = u64::MAX;
        }
        let mut late = 0;
        for iv in new.iter_mut() {
            self.ops += 1;
            self.first_start = self.first_start.min(iv.0);
            self.last_end = self.last_end.max(iv.1);
            // One starting where the settled time ends adds to the union what the loaded one adds.
            if let Some(to) = self.settled_to
                && iv.0 < to
            {
                late += 1;
                // Only the part past the settled time can be told apart from what was counted.
                *iv = (to.min(iv.1), iv.1);
            }
        }
        let mut all = std::mem::take(&mut self.open);
        all.append(&mut new);
        all.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(all.len().min(64));
        for (s, e) in all {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        // A later row starts at or after `edge`: an interval ending before it can no longer grow.
        let settle = merged.partition_point(|iv| iv.1 < edge);
        let early = merged.len().saturating_sub(settle).saturating_sub(cap);
        self.settled_early += early as u64;
        let settle = settle + early;
        for &(s, e) in &merged[..settle] {
            self.settled_ns += e - s;
            self.settled_to = Some(e);
        }
        merged.drain(..settle);
        self.open = merged;
        late
    }

    /// Busy time: the union's length, settled or not.
    pub(crate) fn busy_ns(&self) -> u64 {
        self.settled_ns + self.open.iter().map(|(s, e)| e - s).sum::<u64>()
    }

    fn row(&self, device: u32, stream: Option<u32>) -> Utilization {
        let busy = self.busy_ns();
        let span = if self.ops > 0 { self.last_end - self.first_start } else { 0 };
        Utilization {
            device,
            stream,
            busy_ns: busy,
            span_ns: span,
            percent: if span > 0 { 100.0 * busy as f64 / span as f64 } else { 0.0 },
            ops: self.ops,
        }
    }
}

/// The utilization section folded window by window.
pub(super) struct StreamedUtilization {
    /// The most merged intervals a row keeps open ([`cutr_model::stream::StreamOptions::max_waiting`]).
    cap: usize,
    /// By (device, stream), `None` for the device as a whole: its order in the report.
    unions: BTreeMap<RowKey, Union>,
    /// Rows that started inside time already settled (see the module).
    pub(super) late_rows: u64,
}

impl StreamedUtilization {
    pub(super) fn new(cap: usize) -> StreamedUtilization {
        StreamedUtilization { cap, unions: BTreeMap::new(), late_rows: 0 }
    }

    pub(super) fn add(&mut self, b: &Batch) {
        let kernels = b.kernels.iter().map(|k| (k.device, k.stream, k.start, k.end));
        let copies = b.memcpys.iter().map(|m| (m.device, m.stream, m.start, m.end));
        let sets = b.memsets.iter().map(|m| (m.device, m.stream, m.start, m.end));
        let mut by_key: BTreeMap<RowKey, Vec<(u64, u64)>> = BTreeMap::new();
        for (device, stream, start, end) in kernels.chain(copies).chain(sets) {
            by_key.entry((device, Some(stream))).or_default().push((start, end));
            by_key.entry((device, None)).or_default().push((start, end));
        }
        for (key, intervals) in by_key {
            let edge = b.next_start.unwrap_or(u64::MAX);
            self.late_rows += self.unions.entry(key).or_default().add(intervals, edge, self.cap);
        }
    }

    /// The rows, as the loaded report orders them: by device, the device's own row before its streams'.
    pub(super) fn rows(&self) -> Vec<Utilization> {
        let mut rows: Vec<Utilization> = self.unions.iter().map(|(&(d, s), u)| u.row(d, s)).collect();
        rows.sort_by_key(|u| (u.device, u.stream.map_or(0, |s| s as u64 + 1)));
        rows
    }

    /// The warnings for rows that started in time already settled and intervals settled early, if any.
    pub(super) fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let early: u64 = self.unions.values().map(|u| u.settled_early).sum();
        if early > 0 {
            out.push(settled_early_warning("utilization", early, self.cap));
        }
        if self.late_rows > 0 {
            out.push(format!(
                "utilization: {} GPU operations started before the chunk they were read in claims (a damaged or \
                 forged chunk header): their time already settled is not counted again, so busy time may be \
                 understated (--no-stream computes it exactly)",
                self.late_rows
            ));
        }
        out
    }
}

/// The warning of a section that settled `n` rows before the stream passed their time, with more than `cap`
/// waiting.
pub fn settled_early_warning(section: &str, n: u64, cap: usize) -> String {
    format!(
        "{section}: {n} rows were settled before the stream passed their time, as more than {cap} waited for it \
         (chunk headers claiming earlier times than their rows: a damaged or forged file); what came later for \
         them is counted apart (--no-stream computes it exactly)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_settle_what_ends_before_the_next_start_and_sum_the_union() {
        let mut u = Union::default();
        // Window 1: two overlapping intervals and one reaching past the next window's first start (25).
        assert_eq!(u.add(vec![(0, 10), (5, 15), (20, 30)], 25, usize::MAX), 0);
        assert_eq!((u.settled_ns, u.settled_to, u.open.clone()), (15, Some(15), vec![(20, 30)]));
        // Window 2 starts at 25: (30, 31) touches the open interval, (40, 50) is apart.
        assert_eq!(u.add(vec![(30, 31), (40, 50)], u64::MAX, usize::MAX), 0);
        let r = u.row(0, None);
        // As the loaded union: 10 + 5 + 11 + 10.
        assert_eq!((r.busy_ns, r.span_ns, r.ops), (36, 50, 5));
        assert_eq!(r.busy_ns, super::super::sections::busy(&mut [(0, 10), (5, 15), (20, 30), (30, 31), (40, 50)]));
    }

    #[test]
    fn a_row_inside_settled_time_is_counted_only_past_it_and_reported() {
        let mut u = Union::default();
        u.add(vec![(0, 10)], 20, usize::MAX);
        assert_eq!(u.add(vec![(5, 12), (30, 40)], u64::MAX, usize::MAX), 1);
        assert_eq!(u.row(0, None).busy_ns, 10 + 2 + 10);
    }

    #[test]
    fn past_the_cap_the_oldest_open_intervals_settle_and_what_comes_late_for_them_is_counted() {
        let mut u = Union::default();
        // An edge kept at 0: nothing would settle; a cap of 2 settles the oldest of the three disjoint intervals.
        assert_eq!(u.add(vec![(0, 10), (20, 30), (40, 50)], 0, 2), 0);
        assert_eq!((u.settled_ns, u.open.len(), u.settled_early), (10, 2, 1));
        // A row inside the settled time is late: only its part past it counts (10..12), and as a third open
        // interval it settles the oldest again. The union stays what the load's is here (32).
        assert_eq!(u.add(vec![(5, 12)], 0, 2), 1);
        assert_eq!((u.busy_ns(), u.open.len(), u.settled_early), (10 + 2 + 10 + 10, 2, 2));
    }
}
