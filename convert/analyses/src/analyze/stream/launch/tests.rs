use std::path::PathBuf;

use cutr_model::stream::{StreamOptions, stream_readers_in};
use cutr_model::{Filter, LoadOptions, Trace};

use super::*;
use crate::analyze::launch::launch_health;
use crate::analyze::steps::find_steps;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

/// The first pass as a load gives it.
fn first_pass(t: &Trace) -> FirstPass {
    let (step_source, steps) = find_steps(t, None);
    let mut gpu_spans: Vec<Option<(u64, u64)>> = vec![None; t.processes.len()];
    let ops = t.kernels.iter().map(|k| (k.proc, k.start, k.end));
    let ops = ops.chain(t.memcpys.iter().map(|m| (m.proc, m.start, m.end)));
    for (p, s, e) in ops.chain(t.memsets.iter().map(|m| (m.proc, m.start, m.end))) {
        let span = gpu_spans[p.index()].get_or_insert((s, e));
        *span = (span.0.min(s), span.1.max(e));
    }
    FirstPass { step_source, steps, gpu_spans }
}

/// Launch health over a stream of `paths` in two passes, its distributions exact up to `cap` values.
fn streamed(paths: &[PathBuf], opts: &StreamOptions, first: &FirstPass, cap: usize) -> (LaunchHealth, Vec<String>) {
    let (readers, _) = cutr_model::open_inputs(paths, false).unwrap();
    let filter = Filter::default();
    let mut one = LaunchFirstFold::with_cap(opts, cap);
    let (trace, _) = stream_readers_in(paths, &readers, opts, &filter, |t, _, b| one.batch(t, &b)).unwrap();
    let (launch, mut warnings) = one.finish(&trace);
    // The lead's driver builds the fold from the rowless trace the stream hands on.
    let mut two: Option<LaunchFold> = None;
    let (trace, end) = stream_readers_in(paths, &readers, opts, &filter, |t, _, b| {
        let fold = two.get_or_insert_with(|| match cap {
            EXACT_DIST_VALUES => LaunchFold::new(t, first, &launch, opts),
            _ => LaunchFold::with_cap(&launch, opts, cap),
        });
        fold.batch(t, &b);
    })
    .unwrap();
    let (health, more) = two.expect("a window").finish(&trace, end.span.0);
    warnings.extend(more);
    (health, warnings)
}

/// Streamed launch health equals the loaded one at one chunk per window and at the default windows.
fn streamed_equals_loaded(names: &[&str]) -> LaunchHealth {
    let paths: Vec<PathBuf> = names.iter().map(|n| fixture(n)).collect();
    let loaded_trace = cutr_model::load(&paths, &LoadOptions::default()).unwrap();
    let loaded = launch_health(&loaded_trace);
    let first = first_pass(&loaded_trace);
    for window_bytes in [1, StreamOptions::default().window_bytes] {
        let opts = StreamOptions { hold_unlaunched: true, counters: true, window_bytes, ..StreamOptions::default() };
        let (health, warnings) = streamed(&paths, &opts, &first, EXACT_DIST_VALUES);
        let (a, b) = (serde_json::to_value(&health).unwrap(), serde_json::to_value(&loaded).unwrap());
        let differing: Vec<String> = b
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, v)| a.get(k.as_str()) != Some(v))
            .map(|(k, v)| {
                let cut = |x: String| x.chars().take(600).collect::<String>();
                format!("{k}:\n streamed {}\n loaded   {}", cut(a[k.as_str()].to_string()), cut(v.to_string()))
            })
            .collect();
        assert!(differing.is_empty(), "{names:?} at window_bytes {window_bytes}: {}", differing.join("\n"));
        assert_eq!(health, loaded, "{names:?} at window_bytes {window_bytes}");
        assert_eq!(warnings, Vec::<String>::new());
    }
    loaded
}

#[test]
fn stream_launch_pytorch_loop() {
    let h = streamed_equals_loaded(&["pytorch_loop.cutr"]);
    eprintln!("{} {} {:?}", h.kernels.latency.count, h.names, h.queues.len());
}

#[test]
fn stream_launch_100k_launches() {
    let h = streamed_equals_loaded(&["launch_loop_100k.cutr"]);
    eprintln!("{} {} {:?}", h.kernels.latency.count, h.names, h.queues.len());
}

#[test]
fn stream_launch_graph_launches() {
    let h = streamed_equals_loaded(&["graph_layers.cutr"]);
    eprintln!("{} {} {}", h.graph_launches.latency.count, h.graph_ops, h.graph_launches.latency_outliers.count);
}

#[test]
fn stream_launch_sync_copies() {
    let h = streamed_equals_loaded(&["cuda_workload.cutr"]);
    eprintln!("{} {}", h.sync_copies, h.async_copies.latency.count);
}

#[test]
fn stream_launch_allreduce_pair() {
    let h = streamed_equals_loaded(&["allreduce/allreduce-588.cutr", "allreduce/allreduce-589.cutr"]);
    eprintln!("{} {}", h.kernels.latency.count, h.queues.len());
}
