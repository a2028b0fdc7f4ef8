//! `--graph-context` against the fake CUPTI: graph callbacks become a `graphs` chunk, node creations outside
//! copying calls carry their stack, copies are announced by their clone events only, executable updates are kept,
//! and `off` leaves the callbacks alone.

use std::sync::Mutex;
use std::time::Duration;

use cutr_format::{GraphEventKind, Reader};
use cutr_recorder::fake::{FakeCupti, FakeHandle};
use cutr_recorder::ffi::subscriber::{self as sub, GraphData};
use cutr_recorder::{Config, Recorder};

/// CUPTI's callbacks are process-wide: one recording at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn config(dir: &std::path::Path, name: &str, graph_context: Option<usize>) -> Config {
    Config {
        output: dir.join(name).display().to_string(),
        buffer_bytes: 256 << 10,
        memory_cap_bytes: 64 << 20,
        flush_period: Duration::from_millis(50),
        quiet: true,
        graph_context,
        ..Config::default()
    }
}

/// cuGraphInstantiateWithFlags and cuGraphExecUpdate_v2 (cupti_driver_cbid.h).
const INSTANTIATE: u32 = 643;
const EXEC_UPDATE: u32 = 696;

/// The probe's capture (workloads/cuda/graph_probe.cu on an H100): graph 6 captures two kernels, graph 7 is its
/// instantiation (exec 7), graph 12 a second capture the exec is updated from.
fn capture_instantiate_update(h: &FakeHandle) {
    let node = |graph: u32, i: u64| GraphData { graph, node: (u64::from(graph) << 32) + i, ..Default::default() };
    h.graph_callback(sub::CBID_GRAPH_CREATED, GraphData { graph: 6, ..Default::default() });
    for i in 0..2 {
        h.graph_callback(sub::CBID_GRAPHNODE_CREATE_STARTING, GraphData { node_type: 0, ..node(6, i) });
    }
    h.graph_callback(sub::CBID_GRAPHNODE_DEPENDENCY_CREATED, GraphData { dependency: 6 << 32, ..node(6, 1) });
    h.api_site(sub::DOMAIN_DRIVER, INSTANTIATE, false);
    h.graph_callback(sub::CBID_GRAPH_CREATED, GraphData { graph: 7, ..Default::default() });
    for i in 0..2 {
        h.graph_callback(sub::CBID_GRAPHNODE_CREATE_STARTING, node(7, i));
        let clone = GraphData { original_graph: 6, original_node: (6 << 32) + i, ..node(7, i) };
        h.graph_callback(sub::CBID_GRAPHNODE_CLONED, clone);
    }
    h.graph_callback(sub::CBID_GRAPHNODE_DEPENDENCY_CREATED, GraphData { dependency: 7 << 32, ..node(7, 1) });
    h.graph_callback(sub::CBID_GRAPHEXEC_CREATED, GraphData { graph: 6, exec: 7, ..Default::default() });
    h.api_site(sub::DOMAIN_DRIVER, INSTANTIATE, true);
    h.graph_callback(sub::CBID_GRAPH_CREATED, GraphData { graph: 12, ..Default::default() });
    h.graph_callback(sub::CBID_GRAPHNODE_CREATE_STARTING, GraphData { node_type: 2, ..node(12, 0) });
    h.api_site(sub::DOMAIN_DRIVER, EXEC_UPDATE, false);
    let update = GraphData { node: 12 << 32, original_node: 7 << 32, exec: 7, ..Default::default() };
    h.graph_callback(sub::CBID_GRAPH_NODE_UPDATED, update);
    h.api_site(sub::DOMAIN_DRIVER, EXEC_UPDATE, true);
}

#[test]
fn graph_callbacks_become_a_graphs_chunk_with_stacks_for_the_nodes_made() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "graphs.cutr", Some(48))).unwrap();
    let path = rec.path().to_path_buf();
    let (subscribed, callbacks) = h.subscribed();
    assert!(subscribed);
    for cbid in [9, 11, 12, 15, 18, 20, 22, 23] {
        assert!(callbacks.contains(&(sub::DOMAIN_RESOURCE, cbid)), "{cbid}: {callbacks:?}");
    }
    capture_instantiate_update(&h);
    rec.stop().unwrap();

    let r = Reader::open(&path).unwrap();
    assert_eq!(r.metadata().unwrap().config_value("graph_context"), Some("48"));
    let (chunks, problems) = r.graph_events();
    assert!(problems.is_empty(), "{problems:?}");
    let events: Vec<_> = chunks.iter().flat_map(|c| c.events.iter().map(move |e| (c, e))).collect();
    use GraphEventKind::*;
    let kinds: Vec<_> = events.iter().map(|(_, e)| e.kind).collect();
    assert_eq!(
        kinds,
        [
            GraphCreated,
            NodeCreated,
            NodeCreated,
            DependencyCreated,
            GraphCreated,
            NodeCloned,
            NodeCloned,
            ExecCreated,
            GraphCreated,
            NodeCreated,
            ExecNodeUpdated
        ]
    );
    let tid = unsafe_free_tid();
    for (c, e) in &events {
        let stack = c.stack(e);
        assert_eq!(e.thread_id, tid);
        if e.kind == NodeCreated {
            // From a test thread: the recorder's own leading frames (this binary) left out, libc's thread start kept.
            assert!((1..=48).contains(&stack.len()), "{stack:x?}");
        } else {
            assert!(stack.is_empty());
        }
    }
    let (_, cloned) = events[6];
    assert_eq!(
        (cloned.graph, cloned.node, cloned.other_graph, cloned.other_node),
        (7, (7 << 32) + 1, 6, (6 << 32) + 1)
    );
    let (_, update) = events[10];
    assert_eq!((update.node, update.other_node, update.exec), (12 << 32, 7 << 32, 7));
    assert_eq!((events[9].1.node_type, events[7].1.exec, events[7].1.graph), (2, 7, 6));
    assert!(events.windows(2).all(|w| w[0].1.timestamp <= w[1].1.timestamp));
    assert_eq!(chunks.iter().map(|c| c.lost_events).sum::<u64>(), 0);
}

/// The calling thread's kernel id.
fn unsafe_free_tid() -> u32 {
    std::fs::read_link("/proc/thread-self").unwrap().file_name().unwrap().to_str().unwrap().parse().unwrap()
}

#[test]
fn no_stacks_with_zero_frames_and_no_callbacks_when_off() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "ids.cutr", Some(0))).unwrap();
    let path = rec.path().to_path_buf();
    capture_instantiate_update(&h);
    rec.stop().unwrap();
    let (chunks, _) = Reader::open(&path).unwrap().graph_events();
    assert_eq!(chunks.iter().map(|c| c.events.len()).sum::<usize>(), 11);
    assert!(chunks.iter().all(|c| c.frames.is_empty()));

    let (cupti, h) = FakeCupti::new(130001);
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "off.cutr", None)).unwrap();
    let path = rec.path().to_path_buf();
    assert_eq!(h.subscribed(), (false, vec![]));
    capture_instantiate_update(&h);
    rec.stop().unwrap();
    assert!(Reader::open(&path).unwrap().graph_events().0.is_empty());
}
