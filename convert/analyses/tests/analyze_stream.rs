//! `analyze` over a stream (`analyze::stream::analyze_streamed`, two passes) equals `analyze` over a loaded trace:
//! the steps, every GPU's budget, idle causes, longest gaps and step budgets, launch health and every rule, on
//! fixtures with steps of each source, collectives, graphs, copies and counters, at one chunk per window and with
//! default windows.

use std::path::PathBuf;

use cutr_analyses::analyze::stream::{Streamed, analyze_streamed};
use cutr_analyses::analyze::{Analysis, AnalyzeOptions, analyze};
use cutr_model::stream::StreamOptions;
use cutr_model::{Filter, LoadOptions, load, open_inputs};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(rel)
}

fn loaded(paths: &[PathBuf], opts: &AnalyzeOptions) -> Analysis {
    let mut t = load(paths, &LoadOptions::default()).unwrap();
    let readers: Vec<cutr_format::Reader> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let refs: Vec<&cutr_format::Reader> = readers.iter().collect();
    cutr_analyses::source::annotate(&mut t, &refs);
    analyze(&t, opts)
}

fn streamed(paths: &[PathBuf], opts: &AnalyzeOptions, window_bytes: u64) -> Streamed {
    let (readers, _) = open_inputs(paths, false).unwrap();
    let sopts = StreamOptions { window_bytes, ..StreamOptions::default() };
    analyze_streamed(paths, &readers, opts, &sopts, &Filter::default()).unwrap()
}

/// The streamed analysis equals the loaded one, field by field (the first difference is the one reported).
fn assert_same(files: &[&str], step: Option<&str>) -> Analysis {
    let paths: Vec<PathBuf> = files.iter().map(|f| fixture(f)).collect();
    let opts = AnalyzeOptions { step_prefix: step.map(str::to_string), ..AnalyzeOptions::default() };
    let want = loaded(&paths, &opts);
    for window_bytes in [1, StreamOptions::default().window_bytes] {
        let got = streamed(&paths, &opts, window_bytes);
        assert_eq!(got.warnings, Vec::<String>::new(), "{files:?}");
        let a = got.analysis;
        assert_eq!((&a.step_source, &a.steps), (&want.step_source, &want.steps), "{files:?} {window_bytes}");
        assert_eq!(a.first_record_ns, want.first_record_ns);
        assert_eq!(a.gpus.len(), want.gpus.len());
        for (g, w) in a.gpus.iter().zip(&want.gpus) {
            assert_eq!((g.proc, g.device, &g.budget), (w.proc, w.device, &w.budget), "{files:?} {window_bytes}");
            assert_eq!(g.idle, w.idle, "{files:?} {window_bytes} device {}", g.device);
            assert_eq!(g.longest_gaps, w.longest_gaps, "{files:?} {window_bytes}");
            assert_eq!(g.longest_step_gaps, w.longest_step_gaps, "{files:?} {window_bytes}");
            assert_eq!(g.steps, w.steps, "{files:?} {window_bytes}");
            assert_eq!(g, w);
        }
    }
    want
}

#[test]
fn pytorch_loop_with_its_steps() {
    let a = assert_same(&["pytorch_loop.cutr"], Some("step "));
    assert_eq!(a.steps.len(), 20);
    assert_eq!(a.gpus.len(), 1);
}

#[test]
fn pytorch_loop_without_steps() {
    assert_same(&["pytorch_loop.cutr"], None);
}

#[test]
fn cuda_workload_copies_and_syncs() {
    assert_same(&["cuda_workload.cutr"], None);
}

#[test]
fn graph_launches_are_the_steps() {
    let a = assert_same(&["graph_layers.cutr"], None);
    assert_eq!(a.steps.len(), 20);
    assert_same(&["graph_compile.cutr"], None);
}

#[test]
fn two_ranks_with_collectives() {
    let a = assert_same(&["allreduce/allreduce-588.cutr", "allreduce/allreduce-589.cutr"], Some("iter "));
    assert_eq!(a.gpus.len(), 2);
    assert!(a.gpus.iter().all(|g| g.budget.communication_exposed_ns > 0));
}

#[test]
fn launch_bound_loop() {
    assert_same(&["launch_loop_100k.cutr"], None);
}

#[test]
fn counters_and_unified_memory() {
    assert_same(&["counter_workload.cutr"], None);
    assert_same(&["um_workload.cutr"], None);
}
