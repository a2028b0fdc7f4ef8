//! Where synchronizations go: a stream's syncs on its own `stream N (sync)` row beside the stream, context and event
//! syncs and the syncs of streams that ran no GPU work on the context's `syncs (context C)` row, so no sync row
//! stands beside a stream that has no row.

use std::sync::Arc;

use cutr_format::SessionMetadata;
use cutr_format::meta::Device;
use cutr_model::rows::{Kernel, Sync};
use cutr_model::{ProcId, Process, Trace};
use cutr_viewer_export::Timeline;
use cutr_viewer_export::timeline::Src;

fn sync(start: u64, sync_type: u32, stream: u32) -> Sync {
    let (proc, correlation, context, event) = (ProcId(0), 0, 1, u32::MAX);
    Sync { proc, start, end: start + 10, sync_type, correlation, context, stream, event }
}

/// Kernels on stream 13 only; a stream sync of 13, one of stream 7 (which ran nothing) and a context sync.
fn trace() -> Trace {
    let mut t = Trace::default();
    let meta = SessionMetadata {
        pid: 77,
        devices: vec![Device { id: 0, name: "Test GPU".into(), ..Default::default() }],
        ..Default::default()
    };
    t.processes.push(Process { path: "syncs.cutr".into(), meta: Arc::new(meta), pid: 77, ..Default::default() });
    let name = t.names.intern("k");
    t.kernels =
        vec![Kernel { start: 100, end: 200, context: 1, stream: 13, correlation: 5, name, ..Default::default() }];
    const STREAM: u32 = 3;
    const CONTEXT: u32 = 4;
    t.syncs = vec![sync(210, STREAM, 13), sync(300, STREAM, 7), sync(400, CONTEXT, u32::MAX)];
    t
}

#[test]
fn syncs_of_idle_streams_join_the_context_row() {
    let t = trace();
    let tl = Timeline::build(&t, 1000);
    let placed: Vec<(u64, &str)> = tl
        .items
        .iter()
        .filter(|it| matches!(it.src(), Src::Sync(_)))
        .map(|it| (it.start, tl.tracks[it.track as usize].name.as_str()))
        .collect();
    assert_eq!(placed, [(210, "stream 13 (sync)"), (300, "syncs (context 1)"), (400, "syncs (context 1)")]);
    let names: Vec<&str> = tl.tracks.iter().map(|tr| tr.name.as_str()).filter(|n| n.contains("stream")).collect();
    assert_eq!(names, ["stream 13", "stream 13 (sync)"], "no row for stream 7");
}
