//! The probe's sequence written to a `.cutr` file as a recorder writes it (activity records, `graphs` chunks,
//! clock samples) and loaded: graph events on the trace's time base, kept whatever the window; lost, unknown and
//! damaged events counted.

use std::path::{Path, PathBuf};

use cutr_format::{ClockSample, LossCounters, Problem, Writer};
use cutr_schema::{LayoutTable, kinds};

use super::probe::{expected_captures, probe_scenario};
use super::*;
use crate::graphs::NONE;
use crate::load::{Filter, LoadOptions, load};

/// The CUPTI clock of the scenario's start, and how far behind CLOCK_REALTIME it runs.
const T0: u64 = 1_000_000_000;
const OFFSET: u64 = 5_000_000_000;
/// String pointers: kernel names and range names.
const NAMES: [(u64, &str); 5] =
    [(0x100, "_Z3addPff"), (0x200, "_Z5scalePff"), (0x300, "_Z5shiftPff"), (0x400, "L0"), (0x500, "L1")];

fn ptr(name: &str) -> u64 {
    NAMES.iter().find(|n| n.1 == name).map_or(0, |n| n.0)
}

/// A record of `kind` with `fields` set by name, the others 0.
fn record(table: &LayoutTable, kind: u32, fields: &[(&str, u64)]) -> Vec<u8> {
    let layout = table.get(kind).expect("a layout");
    let mut r = vec![0u8; layout.size as usize];
    r[0..4].copy_from_slice(&kind.to_le_bytes());
    for &(name, v) in fields {
        let f = layout.field(name).unwrap_or_else(|| panic!("no field {name}"));
        let (o, size) = (f.offset as usize, f.size as usize);
        r[o..o + size].copy_from_slice(&v.to_le_bytes()[..size]);
    }
    r
}

/// The scenario's records as CUPTI lays them out (CUDA 13.0).
fn activity(s: &Scenario, table: &LayoutTable) -> Vec<u8> {
    let mut out = Vec::new();
    for a in &s.apis {
        let kind = if a.driver { kinds::DRIVER } else { kinds::RUNTIME };
        let f = [("cbid", a.cbid as u64), ("start", a.start), ("end", a.end), ("processId", PID as u64)];
        let g = [("threadId", TID as u64), ("correlationId", a.correlation as u64)];
        out.extend(record(table, kind, &[&f[..], &g[..]].concat()));
    }
    for &(corr, id) in &s.external {
        let f = [("externalKind", 3), ("externalId", id), ("correlationId", corr as u64)];
        out.extend(record(table, kinds::EXTERNAL_CORRELATION, &f));
    }
    for op in &s.ops {
        let f = [("start", op.start), ("end", op.end), ("correlationId", op.correlation as u64)];
        let g = [("graphId", op.graph as u64), ("graphNodeId", op.node), ("streamId", 7)];
        let (kind, h) = if op.memset {
            (kinds::MEMSET, [("bytes", 64), ("memoryKind", 3)])
        } else {
            (kinds::CONCURRENT_KERNEL, [("name", ptr(op.name)), ("contextId", 1)])
        };
        out.extend(record(table, kind, &[&f[..], &g[..], &h[..]].concat()));
    }
    for (i, &(start, end, name)) in s.ranges.iter().enumerate() {
        let id = i as u64 + 1;
        let who = [
            ("id", id),
            ("objectKind", 2),
            ("objectId.pt.processId", PID as u64),
            ("objectId.pt.threadId", TID as u64),
        ];
        let open = [("flags", 2), ("timestamp", start), ("name", ptr(name))];
        out.extend(record(table, kinds::MARKER, &[&who[..], &open[..]].concat()));
        out.extend(record(table, kinds::MARKER, &[&who[..], &[("flags", 4), ("timestamp", end)][..]].concat()));
    }
    out
}

/// Writes the scenario to `dir/name`: its records, then `graphs` (each a chunk), clocks and the final loss report.
fn write(dir: &Path, name: &str, s: &Scenario, graphs: &[GraphEvents]) -> PathBuf {
    let path = dir.join(name);
    let table = cutr_schema::layouts::builtin(130001).expect("CUDA 13.0's layouts");
    let mut w = Writer::create(&path, Default::default()).unwrap();
    let meta =
        SessionMetadata { pid: PID, cupti_api_version: 130001, layouts: Some(table.clone()), ..Default::default() };
    w.write_metadata(&meta).unwrap();
    w.write_strings(&NAMES).unwrap();
    w.write_activity(&activity(s, &table)).unwrap();
    for g in graphs {
        w.write_graph_events(g).unwrap();
    }
    let clock = |c: u64| ClockSample { cupti_ns: c, realtime_ns: c + OFFSET, monotonic_ns: c };
    w.write_clocks(&[clock(T0), clock(s.now)]).unwrap();
    w.write_loss(&LossCounters { is_final: true, ..Default::default() }).unwrap();
    w.finish().unwrap();
    path
}

/// The probe's events in two chunks, the first reporting 3 events lost, the second 4 and holding one event of a
/// kind from a newer writer.
fn two_chunks(s: &Scenario) -> [GraphEvents; 2] {
    let cut = s.graphs.events.iter().position(|e| e.kind == GraphEventKind::ExecNodeUpdated).unwrap();
    let first =
        GraphEvents { events: s.graphs.events[..cut].to_vec(), frames: s.graphs.frames.clone(), lost_events: 3 };
    let mut second = GraphEvents { events: s.graphs.events[cut..].to_vec(), frames: vec![0xdead], lost_events: 4 };
    second.events.push(GraphEvent { stack_len: 1, ..GraphEvent::new(GraphEventKind::Unknown(42), s.now, TID) });
    [first, second]
}

#[test]
fn a_recorded_file_traces_replays_back_on_the_trace_time_base() {
    let dir = tempfile::tempdir().unwrap();
    let s = probe_scenario(T0);
    let path = write(dir.path(), "probe.cutr", &s, &two_chunks(&s));
    let t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    assert_eq!((t.kernels.len(), t.memsets.len(), t.ranges.len(), t.apis.len()), (17, 3, 4, 31));
    assert_eq!(captures(&t), expected_captures());
    assert_eq!(graph_counts(&t.stats), [0, 7, 0, 0]);
    assert_eq!((t.stats.unmodelled_records, t.stats.damaged_chunks), (1, 0));
    let g = &t.graphs;
    let first = s.graphs.events.iter().find(|e| e.kind == GraphEventKind::NodeCreated).unwrap();
    assert_eq!((g.nodes[0].node, g.nodes[0].created), (n(1, 0), first.timestamp + OFFSET));
    let node = &g.nodes[g.find_node(ProcId(0), n(6, 2)).unwrap() as usize];
    assert_eq!(
        (t.capture_api_name(node).unwrap(), t.capture_range_path(node)),
        ("cudaLaunchKernel".into(), "L0/L1".into())
    );
    assert_eq!((g.stack(node), t.capture_external_ids(&g.nodes[2])), (&[0x40_0602, 0x50_0000][..], (1006, 0)));
    // The second chunk's frames follow the first's.
    assert_eq!(g.frames.len(), s.graphs.frames.len() + 1);
}

#[test]
fn a_window_after_the_captures_keeps_the_graphs_and_counts_no_missing_call() {
    let dir = tempfile::tempdir().unwrap();
    let s = probe_scenario(T0);
    let path = write(dir.path(), "probe.cutr", &s, std::slice::from_ref(&s.graphs));
    // From the clone on: the capture's second replay and everything after.
    let clone = s.apis.iter().find(|a| a.cbid == cbid(false, "cudaGraphClone")).unwrap();
    let filter = Filter { start: Some(clone.start + OFFSET), ..Default::default() };
    let t = load(std::slice::from_ref(&path), &LoadOptions { filter }).unwrap();
    // The kernels of executables 10, 7 (updated) and 2, and the updated executable's memset.
    let mut kept = expected_captures()[10..17].to_vec();
    kept.push(Some((6, n(6, 3))));
    assert_eq!(captures(&t), kept);
    let g = &t.graphs;
    let calls: Vec<(u64, bool)> = g.nodes.iter().map(|x| (x.node, x.api != NONE)).collect();
    let made_in_window = |x: u64| x >> 32 == 12;
    assert_eq!(calls, g.nodes.iter().map(|x| (x.node, made_in_window(x.node))).collect::<Vec<_>>());
    assert_eq!(graph_counts(&t.stats), [0, 0, 0, 0]);
}

#[test]
fn damaged_graph_chunks_are_problems_and_their_ops_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let s = probe_scenario(T0);
    let mut bad = s.graphs.clone();
    bad.events[3].stack_len = u16::MAX;
    let path = write(dir.path(), "bad.cutr", &s, &[bad]);
    let t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    let damaged: Vec<&Problem> =
        t.processes[0].problems.iter().filter(|p| matches!(p, Problem::DamagedChunk { .. })).collect();
    assert_eq!(damaged.len(), 1, "{:?}", t.processes[0].problems);
    assert!(damaged[0].to_string().contains("event 3's stack ends at frame"), "{}", damaged[0]);
    assert_eq!((t.stats.damaged_chunks, t.graphs.nodes.len()), (1, 0));
    assert_eq!(graph_counts(&t.stats), [20, 0, 0, 0]);
}
