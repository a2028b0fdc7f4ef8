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
        assert_eq!(a.launch, want.launch, "{files:?} {window_bytes}");
        assert_eq!(a.findings, want.findings, "{files:?} {window_bytes}");
        assert_eq!(serde_json::to_value(&a).unwrap()["gpus"], serde_json::to_value(&want).unwrap()["gpus"]);
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

/// A generated recording of two ranks (300k records each, NVTX steps, NCCL kernels, graphs, copies), read in
/// hundreds of windows.
fn generated(dir: &std::path::Path) -> Vec<PathBuf> {
    (0..2)
        .map(|rank| {
            let p = dir.join(format!("rank{rank}.cutr"));
            let opts = cutr_synth::SynthOptions {
                records: 300_000,
                buffer_bytes: 256 << 10,
                rank: Some((rank, 2)),
                seed: 7 + rank as u64,
                ..Default::default()
            };
            cutr_synth::write_file(&p, opts).unwrap();
            p
        })
        .collect()
}

#[test]
fn generated_ranks_over_hundreds_of_windows() {
    let dir = tempfile::tempdir().unwrap();
    let paths = generated(dir.path());
    let opts = AnalyzeOptions { step_prefix: Some("step".into()), ..AnalyzeOptions::default() };
    let want = loaded(&paths, &opts);
    for window_bytes in [1, 40 << 10] {
        let got = streamed(&paths, &opts, window_bytes);
        assert_eq!(got.warnings, Vec::<String>::new());
        assert_eq!(got.analysis.steps, want.steps);
        assert_eq!(got.analysis.gpus, want.gpus, "{window_bytes}");
        assert_eq!((&got.analysis.launch, &got.analysis.findings), (&want.launch, &want.findings));
    }
    let steps: usize = want.gpus.iter().map(|g| g.steps.len()).sum();
    let gaps: u64 = want.gpus.iter().map(|g| g.long_gaps).sum();
    assert_eq!((want.gpus.len(), want.steps.len(), steps, gaps), (2, 5380, 5380, 158_496));
}

/// Every activity chunk's header claims the first chunk's start: the stream's edge never moves, so the sweeps
/// would hold every op and the host every call. Past a cap of 100 they settle the oldest and say so; the rows
/// themselves are in time order, so the budgets stay the load's, and the idle causes move only where a dropped
/// host call was asked for.
#[test]
fn a_kept_back_edge_settles_past_the_cap_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = generated(dir.path()).remove(0);
    let mut bytes = std::fs::read(&p).unwrap();
    cutr_synth::forge::keep_edges_back(&mut bytes);
    std::fs::write(&p, &bytes).unwrap();
    let paths = [p];
    let opts = AnalyzeOptions { step_prefix: Some("step".into()), ..AnalyzeOptions::default() };
    let want = loaded(&paths, &opts);
    let (readers, _) = open_inputs(&paths, false).unwrap();
    let sopts = StreamOptions { window_bytes: 1, max_waiting: 100, ..StreamOptions::default() };
    let got = analyze_streamed(&paths, &readers, &opts, &sopts, &Filter::default()).unwrap();
    let budgets = |a: &Analysis| a.gpus.iter().map(|g| g.budget).collect::<Vec<_>>();
    assert_eq!(budgets(&got.analysis), budgets(&want));
    let counts: Vec<&str> = got.warnings.iter().map(|w| w.split(" were").next().unwrap()).collect();
    assert_eq!(
        counts,
        [
            "launch health: 7 graph launches settled before their replay had surely all come (more than 100 waited): \
             a later op of theirs counted as a launch of its own",
            "analyze: 89349 GPU ops",
            "analyze: 5886 host API intervals",
            "launch health: 172562 queue events walked before the stream passed them (more than 100 waited), 0 came \
             after a later one: the queues' depths are approximate",
            "host rules: 53190 intervals or synchronizations"
        ]
    );
    assert!(got.warnings[1].contains("0 came after the sweep had passed their start"), "{:?}", got.warnings);
    // The idle time is the load's; with the host's calls dropped, gaps the host waited through read as short
    // gaps (as the warning says): 5,372,523 ns of host sync wait of the load's 107,710,213.
    let (g, w) = (&got.analysis.gpus[0].idle, &want.gpus[0].idle);
    assert_eq!((g.total_ns(), g.launch_bound_ns), (w.total_ns(), w.launch_bound_ns));
    assert_eq!((w.host_sync_wait_ns, w.short_gaps_ns), (107_710_213, 4_902));
    assert_eq!((g.host_sync_wait_ns, g.short_gaps_ns), (102_337_690, 5_377_425));
}

/// With `--start/--end`, the stream reads the records a windowed load keeps, and gives its analysis: here the
/// PyTorch loop from the middle of its step 5 to the middle of its step 15 (the steps overlapping it, the GPU's
/// span that of the kept ops).
#[test]
fn a_window_streams_as_a_windowed_load() {
    let paths = [fixture("pytorch_loop.cutr")];
    let opts = AnalyzeOptions { step_prefix: Some("step ".into()), ..AnalyzeOptions::default() };
    let whole = analyze(&load(&paths, &LoadOptions::default()).unwrap(), &opts);
    // From the middle of step 5 to the middle of step 15.
    let mid = |i: usize| (whole.steps[i].start + whole.steps[i].end) / 2;
    let filter = Filter { start: Some(mid(5)), end: Some(mid(15)), kinds: Vec::new() };
    let mut t = load(&paths, &LoadOptions { filter: filter.clone() }).unwrap();
    let reader = cutr_format::Reader::open(&paths[0]).unwrap();
    cutr_analyses::source::annotate(&mut t, &[&reader]);
    let want = analyze(&t, &opts);
    let (readers, _) = open_inputs(&paths, false).unwrap();
    for window_bytes in [1, StreamOptions::default().window_bytes] {
        let sopts = StreamOptions { window_bytes, ..StreamOptions::default() };
        let got = analyze_streamed(&paths, &readers, &opts, &sopts, &filter).unwrap();
        assert_eq!(got.warnings, Vec::<String>::new());
        let g = got.analysis;
        assert_eq!(
            (&g.steps, &g.gpus, &g.launch, &g.findings),
            (&want.steps, &want.gpus, &want.launch, &want.findings)
        );
    }
    assert_eq!((want.steps.len(), want.launch.kernels.latency.count), (11, 2422));
}
