//! The findings of `cupti-convert analyze` as a track of each process that has any, named [`TRACK_NAME`]: one
//! slice over each gap or window a finding names, so the viewer shows where. Findings may point at the same or
//! overlapping windows (starvation's longest gaps are also another rule's evidence); a viewer's track breaks on
//! slices that overlap without nesting, so those go to further lanes (`cutr: findings (2)`, ...), as the
//! timeline's overflow lanes do. Both writers draw the same lanes: Perfetto as tracks under the process, Chrome
//! JSON as rows of the process sorted before its threads.

use std::collections::BTreeMap;

use cutr_model::{CorrKey, ProcId, Trace};

use crate::args::{Category, Value};
use crate::chrome::{Complete, EventWriter, JsonIds, Row};
use crate::perfetto::{Name, Shard, SliceBegin, TrackDescriptor, TrackKind};
use crate::timeline::{Timeline, TrackRole};

/// The name of a process's findings track (its first lane).
pub const TRACK_NAME: &str = "cutr: findings";

/// Chrome JSON tid of a process's first findings row; further lanes count down from it. Past any thread id Linux
/// gives (`pid_max` is at most 2^22), and within the 32-bit signed ints every JSON reader takes a tid as.
pub const FINDINGS_TID: i64 = i32::MAX as i64;

/// Chrome JSON `thread_sort_index` of the findings rows: before every thread (sorted by their tid).
pub const FINDINGS_SORT_INDEX: i64 = -2;

/// The arg of a slice's correlation id: not `correlation`, which HTA joins a launching call to its GPU work by (a
/// findings slice of that name took the place of the launch in HTA's idle time breakdown, moving 1.46 ms of the
/// PyTorch loop's host wait to other).
pub const CORRELATION_ARG: &str = "event_correlation";

/// One slice of the findings track: one evidence event of one finding.
#[derive(Clone, Debug, PartialEq)]
pub struct FindingSlice {
    /// The file (process) whose track shows it.
    pub proc: ProcId,
    pub start: u64,
    pub end: u64,
    /// The rule and its severity, e.g. `gpu_starvation (high)`.
    pub name: String,
    /// The finding's one-line summary, with its figures.
    pub summary: String,
    /// What the event is (`idle 1.2 ms after ...`, a kernel's name, a call).
    pub what: String,
    /// CUPTI's correlation id of the event (0: none).
    pub correlation: u32,
}

impl FindingSlice {
    /// The slice's end, never before its start (a malformed event is drawn as an instant, not backwards).
    pub fn end_or_start(&self) -> u64 {
        self.end.max(self.start)
    }
}

/// One lane of one process's findings: the slices it draws (indexes into the slices given), in time order, none
/// overlapping another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lane {
    pub proc: ProcId,
    /// 0 for the track named [`TRACK_NAME`].
    pub lane: u32,
    pub slices: Vec<usize>,
}

impl Lane {
    /// The lane's track or row name: [`TRACK_NAME`], then `cutr: findings (2)`, ...
    pub fn name(&self) -> String {
        match self.lane {
            0 => TRACK_NAME.to_string(),
            n => format!("{TRACK_NAME} ({})", n + 1),
        }
    }

    /// The lane's Chrome JSON tid.
    pub fn json_tid(&self) -> i64 {
        FINDINGS_TID - self.lane as i64
    }
}

/// The slices laid out in lanes, per process in order: each slice goes to the first lane of its process whose last
/// slice has ended by its start (slices taken by start, longer first). An instant holds its lane for 1 ns, so that
/// no slice of its lane begins before it ends.
pub fn lanes(slices: &[FindingSlice]) -> Vec<Lane> {
    let mut by_proc: BTreeMap<ProcId, Vec<usize>> = BTreeMap::new();
    for (i, s) in slices.iter().enumerate() {
        by_proc.entry(s.proc).or_default().push(i);
    }
    let mut out = Vec::new();
    for (proc, mut order) in by_proc {
        order.sort_by_key(|&i| (slices[i].start, std::cmp::Reverse(slices[i].end_or_start()), i));
        let mut lanes: Vec<(u64, Vec<usize>)> = Vec::new();
        for i in order {
            let (start, end) = (slices[i].start, slices[i].end_or_start().max(slices[i].start.saturating_add(1)));
            match lanes.iter_mut().find(|(last_end, _)| *last_end <= start) {
                Some(lane) => {
                    lane.0 = end;
                    lane.1.push(i);
                }
                None => lanes.push((end, vec![i])),
            }
        }
        out.extend(lanes.into_iter().enumerate().map(|(n, (_, slices))| Lane { proc, lane: n as u32, slices }));
    }
    out
}

/// The distinct slice names, in order of first use: each name's index is its interning key in a Perfetto shard.
pub fn name_keys(slices: &[FindingSlice]) -> BTreeMap<&str, u32> {
    let mut keys = BTreeMap::new();
    for s in slices {
        let next = keys.len() as u32;
        keys.entry(s.name.as_str()).or_insert(next);
    }
    keys
}

/// Sequence id of the findings' Perfetto packets: past the timeline's shards (2, 3, ...) and the side events'.
const PERFETTO_SEQ_ID: u32 = 1_000_001;

/// The Perfetto track uuid of lane `n`: after the timeline's tracks (1..=their count).
fn lane_uuid(tl: &Timeline, n: usize) -> u64 {
    tl.tracks.len() as u64 + 1 + n as u64
}

/// Perfetto: each lane's track, a child of its process's track (where the viewer lists it above the threads).
pub(crate) fn perfetto_descriptors(tl: &Timeline, lanes: &[Lane]) -> Vec<TrackDescriptor> {
    lanes
        .iter()
        .enumerate()
        .map(|(n, lane)| {
            let process = tl
                .tracks
                .iter()
                .position(|t| matches!(t.role, TrackRole::HostProcess { proc, .. } if proc == lane.proc));
            TrackDescriptor {
                uuid: lane_uuid(tl, n),
                parent: process.map(|p| p as u64 + 1),
                kind: TrackKind::Custom { name: lane.name(), ordered_children: false },
                sibling_order: None,
            }
        })
        .collect()
}

/// Perfetto: the slices of every lane as one packet sequence, BEGINs and ENDs in time order (a lane's end before
/// the next begin at the same time; an instant's end after its begin).
pub(crate) fn perfetto_events(
    tl: &Timeline,
    slices: &[FindingSlice],
    lanes: &[Lane],
    compress: bool,
    epoch: u64,
) -> Vec<u8> {
    // (time, order at that time, lane, slice): 0 ends a slice, 1 begins one, 2 ends an instant.
    let mut events: Vec<(u64, u8, usize, usize)> = Vec::new();
    for (n, lane) in lanes.iter().enumerate() {
        for &i in &lane.slices {
            let (start, end) = (slices[i].start, slices[i].end_or_start());
            events.push((start, 1, n, i));
            events.push((end, if end == start { 2 } else { 0 }, n, i));
        }
    }
    events.sort_unstable();
    let Some(&(t0, ..)) = events.first() else { return Vec::new() };
    let mut shard = Shard::new(PERFETTO_SEQ_ID, t0).relative_to(epoch);
    if compress {
        shard = shard.compressed();
    }
    let keys = name_keys(slices);
    for (ts, order, n, i) in events {
        let track = lane_uuid(tl, n);
        if order == 1 {
            let s = &slices[i];
            let mut args = vec![("summary", Value::Str(&s.summary)), ("what", Value::Str(&s.what))];
            if s.correlation != 0 {
                args.push((CORRELATION_ARG, Value::UInt(s.correlation as u64)));
            }
            shard.begin(&SliceBegin {
                track,
                ts,
                name: Name { key: keys[s.name.as_str()], text: &s.name },
                category: Category::Cutr,
                args: &[],
                named_args: &args,
                flows_out: &[],
                flows_in: &[],
            });
        } else {
            shard.end(track, ts);
        }
    }
    shard.into_bytes()
}

/// Chrome JSON: each lane a row of its process, named and sorted before the threads, with a complete event per
/// slice (the correlation id made unique per file, as on every other event).
pub(crate) fn chrome_events(
    trace: &Trace,
    slices: &[FindingSlice],
    lanes: &[Lane],
    w: &mut EventWriter<'_>,
    meta_ts: u64,
) {
    let ids = JsonIds::new(trace);
    for lane in lanes {
        let row = Row { pid: trace.processes[lane.proc.index()].pid as i64, tid: lane.json_tid() };
        w.metadata("thread_name", row, meta_ts, "name", Value::Str(&lane.name()));
        w.metadata("thread_sort_index", row, meta_ts, "sort_index", Value::Int(FINDINGS_SORT_INDEX - lane.lane as i64));
        for &i in &lane.slices {
            let s = &slices[i];
            let mut args = vec![("summary", Value::Str(&s.summary)), ("what", Value::Str(&s.what))];
            if s.correlation != 0 {
                args.push((CORRELATION_ARG, Value::UInt(ids.correlation(CorrKey::new(s.proc, s.correlation)))));
            }
            w.complete(&Complete {
                cat: Category::Cutr.name(),
                name: &s.name,
                row,
                start: s.start,
                end: s.end_or_start(),
                args: &args,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(proc: u16, start: u64, end: u64) -> FindingSlice {
        FindingSlice {
            proc: ProcId(proc),
            start,
            end,
            name: "gpu_starvation (high)".into(),
            summary: String::new(),
            what: String::new(),
            correlation: 0,
        }
    }

    #[test]
    fn overlapping_slices_go_to_further_lanes_per_process() {
        // 0 and 1 are the same window (two rules' evidence), 2 overlaps 1 without nesting, 3 starts where 0
        // ends, 4 is another process's.
        let s = [slice(0, 10, 20), slice(0, 10, 20), slice(0, 15, 30), slice(0, 20, 25), slice(1, 12, 18)];
        let l = lanes(&s);
        let got: Vec<(u16, u32, Vec<usize>)> = l.iter().map(|l| (l.proc.0, l.lane, l.slices.clone())).collect();
        assert_eq!(got, vec![(0, 0, vec![0, 3]), (0, 1, vec![1]), (0, 2, vec![2]), (1, 0, vec![4])]);
        assert_eq!(l[0].name(), "cutr: findings");
        assert_eq!(l[2].name(), "cutr: findings (3)");
        assert_eq!((l[0].json_tid(), l[2].json_tid()), (2_147_483_647, 2_147_483_645));
    }

    #[test]
    fn a_backwards_event_is_drawn_as_an_instant_that_holds_its_lane() {
        let s = [slice(0, 50, 40), slice(0, 50, 60), slice(0, 51, 70), slice(0, 60, 61)];
        assert_eq!(s[0].end_or_start(), 50);
        let l: Vec<Vec<usize>> = lanes(&s).into_iter().map(|l| l.slices).collect();
        // The instant at 50 holds its lane until 51: the slice from 50 goes to the next lane, the one from 51
        // follows it.
        assert_eq!(l, vec![vec![1, 3], vec![0, 2]]);
    }
}
