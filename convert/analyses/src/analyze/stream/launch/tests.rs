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
    FirstPass::new(t.processes.len(), step_source, steps, gpu_spans)
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
        let opts =
            StreamOptions { hold_unlaunched: true, counter_feed: true, window_bytes, ..StreamOptions::default() };
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
    assert_eq!((h.kernels.latency.count, h.names, h.by_name.len(), h.queues.len()), (5653, 41, TOP_NAMES, 1));
    assert_eq!(h.kernels.cpu_cost_outliers.count, 21);
}

#[test]
fn stream_launch_100k_launches() {
    let h = streamed_equals_loaded(&["launch_loop_100k.cutr"]);
    assert_eq!(
        (h.kernels.latency.count, h.kernels.latency.median_ns, h.kernels.latency.p99_ns),
        (101_000, 6851, 11_726)
    );
    assert_eq!((h.names, h.shorter_than_launch.count, h.kernels.cpu_cost_outliers.count), (1, 101_000, 11));
    assert!(!h.kernels.latency.estimated);
}

#[test]
fn stream_launch_graph_launches() {
    let h = streamed_equals_loaded(&["graph_layers.cutr"]);
    assert_eq!((h.graph_launches.latency.count, h.graph_ops, h.kernels.latency.count), (20, 1200, 426));
}

#[test]
fn stream_launch_sync_copies() {
    let h = streamed_equals_loaded(&["cuda_workload.cutr"]);
    assert_eq!((h.sync_copies, h.async_copies.latency.count, h.without_launcher), (42, 52, 0));
}

#[test]
fn stream_launch_allreduce_pair() {
    let h = streamed_equals_loaded(&["allreduce/allreduce-588.cutr", "allreduce/allreduce-589.cutr"]);
    assert_eq!((h.kernels.latency.count, h.async_copies.latency.count, h.queues.len()), (456, 492, 6));
    assert_eq!(h.shorter_than_launch.count, 271);
}

#[test]
fn stream_launch_past_the_cap_percentiles_are_estimates() {
    // 101,000 launches past a cap of 1,000 values: the percentiles from the sketch within its error, marked
    // estimated; counts, totals, maxima and everything else as the load's.
    let paths = vec![fixture("launch_loop_100k.cutr")];
    let loaded_trace = cutr_model::load(&paths, &LoadOptions::default()).unwrap();
    let loaded = launch_health(&loaded_trace);
    let opts = StreamOptions { hold_unlaunched: true, counter_feed: true, ..StreamOptions::default() };
    let (h, warnings) = streamed(&paths, &opts, &first_pass(&loaded_trace), 1000);
    assert!(warnings.is_empty());
    let pairs = [
        (h.kernels.latency, loaded.kernels.latency),
        (h.kernels.cpu_cost, loaded.kernels.cpu_cost),
        (h.by_name[0].latency, loaded.by_name[0].latency),
    ];
    for (got, exact) in pairs {
        assert!(got.estimated && !exact.estimated);
        assert_eq!((got.count, got.total_ns, got.max_ns), (exact.count, exact.total_ns, exact.max_ns));
        for (g, e) in [(got.median_ns, exact.median_ns), (got.p90_ns, exact.p90_ns), (got.p99_ns, exact.p99_ns)] {
            assert!(g.abs_diff(e) as f64 <= e as f64 * crate::stats::SKETCH_RELATIVE_ERROR + 1.0, "{g} vs {e}");
        }
    }
    assert_eq!((h.queues, h.names, h.shorter_than_launch), (loaded.queues, loaded.names, loaded.shorter_than_launch));
}

#[test]
fn stream_launch_waits_for_at_most_max_waiting_events() {
    // Two events may wait: the queue's events are walked before the edge passes them, and said so.
    let paths = vec![fixture("pytorch_loop.cutr")];
    let loaded_trace = cutr_model::load(&paths, &LoadOptions::default()).unwrap();
    let opts = StreamOptions { hold_unlaunched: true, window_bytes: 1, max_waiting: 2, ..StreamOptions::default() };
    let (h, warnings) = streamed(&paths, &opts, &first_pass(&loaded_trace), EXACT_DIST_VALUES);
    let said = "launch health: 3978 queue events walked before the stream passed them (more than 2 waited), 7958 \
                came after a later one: the queues' depths are approximate";
    assert_eq!(warnings, [said]);
    assert_eq!(h.kernels, launch_health(&loaded_trace).kernels);
}
