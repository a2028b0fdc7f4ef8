//! Where `analyze` finds its steps without `--step`: PyTorch's `ProfilerStep#N` ranges first, then CUDA graph
//! launches. No recording here has ProfilerStep ranges (the profiler opens them only while it runs), so the
//! PyTorch loop's NVTX `step N` ranges are renamed `ProfilerStep#N`: the steps found must be the very windows
//! `--step "step "` gives.

use std::path::PathBuf;

use cutr_analyses::analyze::steps::find_steps;
use cutr_analyses::analyze::types::StepSource;
use cutr_analyses::analyze::{AnalyzeOptions, analyze};
use cutr_model::{LoadOptions, Trace, load};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(rel)
}

fn trace(rel: &str) -> Trace {
    load(&[fixture(rel)], &LoadOptions::default()).unwrap()
}

#[test]
fn profiler_step_ranges_are_found_without_being_asked() {
    let mut t = trace("pytorch_loop.cutr");
    let (source, asked) = find_steps(&t, Some("step "));
    assert_eq!(source, StepSource::NvtxPrefix("step ".into()));
    assert_eq!(asked.len(), 20);
    // Without --step and without ProfilerStep ranges, the loop (no graphs) has no steps.
    assert_eq!(find_steps(&t, None), (StepSource::None, Vec::new()));

    for i in 0..t.ranges.len() {
        let name = t.names.get(t.ranges[i].name).to_string();
        if let Some(n) = name.strip_prefix("step ") {
            t.ranges[i].name = t.names.intern(&format!("ProfilerStep#{n}"));
        }
    }
    let (source, found) = find_steps(&t, None);
    assert_eq!(source, StepSource::ProfilerStep);
    let windows = |s: &[cutr_analyses::analyze::types::Step]| -> Vec<(u32, u64, u64)> {
        s.iter().map(|s| (s.index, s.start, s.end)).collect()
    };
    assert_eq!(windows(&found), windows(&asked));
    assert_eq!(found[0].name, "ProfilerStep#0");
    assert_eq!(found[19].name, "ProfilerStep#19");

    // The whole analysis then judges the same steps: the step-time budget equals the one `--step "step "` gives
    // (210.004 ms of step time, 84.7% idle, as the README shows).
    let a = analyze(&t, &AnalyzeOptions { step_prefix: None, short_gap_ns: 30_000 });
    assert_eq!(a.step_source, StepSource::ProfilerStep);
    assert_eq!(a.gpus[0].steps.len(), 20);
    let span: u64 = a.gpus[0].steps.iter().map(|s| s.budget.span_ns).sum();
    let idle: u64 = a.gpus[0].steps.iter().map(|s| s.budget.idle_ns).sum();
    assert_eq!((span, idle), (210_004_356, 177_781_456));
}

#[test]
fn graph_launches_are_steps_where_graphs_do_the_work() {
    let t = trace("graph_workload.cutr");
    let (source, steps) = find_steps(&t, None);
    assert_eq!(source, StepSource::GraphLaunches);
    assert_eq!(steps.len(), 8);
}
