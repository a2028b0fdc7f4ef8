//! `stats --stream`'s `graphs` section against the loaded report's, whole (`assert_eq!` on the `GraphReport`), on
//! every fixture with graph ops or graph events, in one-chunk windows and in the default ones; the NVTX rows' second
//! attribution (graph replays by where their nodes were made) and the graph joins' counts too; a few figures
//! checked so that two empty reports cannot pass; a short horizon, whose ops without their launching call at hand
//! are counted and said; and `--start/--end` windows (cutting through replays, covering the captures, after them),
//! streamed equal to a load with the same window.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cutr_analyses::stats::{self, Section, Stats, StatsOptions};
use cutr_model::stream::StreamOptions;
use cutr_model::{Filter, LoadOptions, load};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn graphs_and_nvtx() -> StatsOptions {
    let sections = vec![Section::Nvtx, Section::Graphs, Section::Loss];
    StatsOptions { sections, symbol_dirs: vec![fixtures().join("bin")], ..Default::default() }
}

/// `paths` loaded, then streamed with `stream_opts`.
fn loaded_and_streamed(paths: &[PathBuf], opts: &StatsOptions, stream_opts: &StreamOptions) -> (Stats, Stats) {
    let loaded = stats::compute(&load(paths, &LoadOptions::default()).unwrap(), opts);
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let (streamed, _) = stats::compute_streaming(paths, &readers, opts, 1000, stream_opts).unwrap();
    (loaded, streamed)
}

/// NVTX rows by name: the graph replays captured inside (GPU time, ops).
fn replayed(s: &Stats) -> BTreeMap<&str, (u64, u64)> {
    s.nvtx.iter().map(|r| (r.time.name.as_str(), (r.replayed_gpu_ns, r.replayed_gpu_ops))).collect()
}

/// The graph joins' counts: events lost, nodes without their call, events unjoined, ops not traced back, graph
/// kernels without their launch.
fn graph_joins(s: &Stats) -> (u64, u64, u64, u64, u64) {
    let j = &s.joins;
    (
        j.graph_events_lost,
        j.graph_nodes_without_api,
        j.graph_events_unjoined,
        j.graph_ops_without_capture,
        j.graph_kernels_without_launch,
    )
}

/// Streamed equals loaded on `paths`, in one-chunk windows and the default ones; returns the one-chunk report.
fn assert_streamed_equals_loaded(paths: &[PathBuf]) -> Stats {
    let opts = graphs_and_nvtx();
    let mut one_chunk = None;
    for window_bytes in [1, StreamOptions::default().window_bytes] {
        let stream_opts = StreamOptions { window_bytes, ..Default::default() };
        let (loaded, streamed) = loaded_and_streamed(paths, &opts, &stream_opts);
        let what = format!("{paths:?} in windows of {window_bytes} bytes");
        assert_eq!(streamed.graphs, loaded.graphs, "{what}");
        assert_eq!(replayed(&streamed), replayed(&loaded), "{what}");
        assert_eq!(graph_joins(&streamed), graph_joins(&loaded), "{what}");
        let st = streamed.stream.as_ref().unwrap();
        assert!(st.not_computed.is_empty(), "{what}: {:?}", st.not_computed);
        assert_eq!(streamed.warnings, Vec::<String>::new(), "{what}");
        one_chunk.get_or_insert(streamed);
    }
    one_chunk.unwrap()
}

fn one(name: &str) -> Vec<PathBuf> {
    vec![fixtures().join(name)]
}

/// An executable's row: (name, replays, total, min, median, max, ops).
fn exec_row(s: &Stats, i: usize) -> (&str, u64, u64, u64, f64, u64, u64) {
    let e = &s.graphs.execs[i];
    let p = &e.per_replay;
    (p.name.as_str(), p.count, p.total_ns, p.min_ns, p.median_ns, p.max_ns, e.ops)
}

#[test]
fn hand_built_graphs_with_a_clone_and_an_update_stream_as_they_load() {
    let s = assert_streamed_equals_loaded(&one("graph_workload.cutr"));
    let g = &s.graphs;
    // workloads/cuda/EXPECTED.md: 19 kernels and 7 memsets replayed, 12 nodes made, 4 instantiations, 8 launches.
    assert_eq!((g.ops, g.ops_traced_back, g.ops_not_traced_back, g.ops_without_graph_events), (26, 26, 0, 0));
    assert_eq!((g.nodes, g.nodes_with_stack, g.graphs, g.execs_made, g.execs.len()), (12, 12, 13, 4, 4));
    assert_eq!(exec_row(&s, 0), ("graph 5 (template 4)", 4, 16_544, 3_904, 3_920.0, 4_800, 16));
    let sums: u64 = g.execs.iter().map(|e| e.per_replay.count).sum();
    assert_eq!(sums, 8);
    let ranges: Vec<_> = g.ranges.iter().map(|r| (r.path.as_str(), r.nodes, r.ops)).collect();
    assert_eq!(
        ranges,
        [
            ("explicit/build", 3, 9),
            ("update/U0", 4, 8),
            ("capture/L0/L1", 2, 4),
            ("capture/L0", 2, 4),
            ("stacks", 1, 1)
        ]
    );
    // The capture three functions deep is named from the recorded binary's symbols.
    assert!(g.sites_named);
    assert_eq!(replayed(&s)["update"], (7_808, 8));
}

#[test]
fn a_pytorch_graph_replayed_20_times_streams_as_it_loads() {
    let s = assert_streamed_equals_loaded(&one("graph_layers.cutr"));
    let g = &s.graphs;
    assert_eq!((g.ops, g.ops_traced_back, g.nodes, g.execs.len()), (1_200, 1_200, 60, 1));
    assert_eq!(exec_row(&s, 0), ("graph 2 (template 1)", 20, 22_308_346, 1_112_029, 1_115_577.5, 1_117_911, 1_200));
    assert_eq!(replayed(&s)["phase:capture"], (22_308_346, 1_200));
    assert_eq!(replayed(&s)["mlp"], (12_425_968, 400));
}

#[test]
fn cudagraph_trees_of_torch_compile_stream_as_they_load_over_15_chunks() {
    let s = assert_streamed_equals_loaded(&one("graph_compile.cutr"));
    let (g, st) = (&s.graphs, s.stream.as_ref().unwrap());
    assert_eq!((st.chunks, st.windows), (15, 15));
    assert_eq!((g.ops, g.ops_traced_back, g.nodes, g.graphs, g.execs_made), (256, 256, 64, 27, 9));
    // Eight executables replayed 4 times each, one made and never launched.
    let counts: Vec<u64> = g.execs.iter().map(|e| e.per_replay.count).collect();
    assert_eq!(counts, [4, 4, 4, 4, 4, 4, 4, 4, 0]);
    assert_eq!(exec_row(&s, 0), ("graph 8 (template 7)", 4, 492_682, 122_305, 122_771.0, 124_835, 24));
    assert_eq!(replayed(&s)["forward"], (3_886_712, 256));
}

#[test]
fn graph_ops_of_files_without_graph_events_and_of_several_files_stream_as_they_load() {
    // Recorded before the graph context: replays counted, no node traced back.
    let s = assert_streamed_equals_loaded(&one("cuda_workload.cutr"));
    let g = &s.graphs;
    assert_eq!((g.ops, g.ops_traced_back, g.ops_without_graph_events, g.nodes), (15, 0, 15, 0));
    assert_eq!(exec_row(&s, 0), ("graph 2", 5, 23_776, 4_736, 4_768.0, 4_768, 15));
    // Five runs of the diff workload, a graph launched 10 times in each: a row per file.
    let runs: Vec<PathBuf> = (1..=5).map(|i| fixtures().join(format!("diff/aa-{i}.cutr"))).collect();
    let s = assert_streamed_equals_loaded(&runs);
    let replays: Vec<u64> = s.graphs.execs.iter().map(|e| e.per_replay.count).collect();
    assert_eq!((s.graphs.ops, replays), (150, vec![10; 5]));
    // Two programs' graphs side by side.
    assert_streamed_equals_loaded(&[fixtures().join("graph_workload.cutr"), fixtures().join("graph_layers.cutr")]);
}

#[test]
fn past_the_cap_of_values_an_executables_median_is_the_sketchs_and_marked() {
    let path = one("graph_layers.cutr");
    let opts = graphs_and_nvtx();
    let loaded = stats::compute(&load(&path, &LoadOptions::default()).unwrap(), &opts);
    let readers: Vec<_> = path.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    // 20 replays, 8 values kept.
    let (s, _) = stats::compute_streaming(&path, &readers, &opts, 8, &StreamOptions::default()).unwrap();
    let (got, want) = (&s.graphs.execs[0].per_replay, &loaded.graphs.execs[0].per_replay);
    let exact = |p: &stats::Summary| (p.count, p.total_ns, p.min_ns, p.max_ns, p.avg_ns);
    assert_eq!(exact(got), exact(want));
    assert!(got.median_estimated && !want.median_estimated);
    let error = (got.median_ns - want.median_ns).abs() / want.median_ns;
    assert!(error <= stats::SKETCH_RELATIVE_ERROR, "{} against {}", got.median_ns, want.median_ns);
    assert!((got.stddev_ns - want.stddev_ns).abs() < 1e-6 * want.stddev_ns);
    let text = stats::render_text(&s, Default::default());
    let marked = format!("~{}", cutr_analyses::fmt::thousands_1(got.median_ns));
    assert!(text.contains(&marked), "{marked} in {text}");
    // The NVTX rows have more than 8 ranges of a name too: the executable's row is among the estimated ones.
    let nvtx_estimated = s.nvtx.iter().filter(|r| r.time.median_estimated).count() as u64;
    assert_eq!(s.stream.as_ref().unwrap().estimated_rows, nvtx_estimated + 1);
}

#[test]
fn top_cuts_the_streamed_rows_as_the_loaded_ones() {
    let opts = StatsOptions { top: Some(3), ..graphs_and_nvtx() };
    let (loaded, streamed) = loaded_and_streamed(&one("graph_compile.cutr"), &opts, &StreamOptions::default());
    assert_eq!(streamed.graphs, loaded.graphs);
    assert_eq!((streamed.graphs.execs.len(), streamed.graphs.ranges.len()), (3, 3));
}

/// The graphs section does not lean on the correlation horizon: a replay is final by its executable's next replay,
/// and each op's launch comes with it or an earlier op of its replay. On these recordings a call's GPU work is in
/// its call's chunk, so even 10 launches lose nothing; an op traced back at its own start would be counted and
/// said (the line below, and `stream_graphs`' unit test where every call is out of reach).
#[test]
fn a_short_horizon_loses_no_replay_and_says_what_it_could_not_join() {
    for name in ["graph_workload.cutr", "graph_layers.cutr", "graph_compile.cutr"] {
        let stream_opts = StreamOptions { horizon: 10, window_bytes: 1, ..Default::default() };
        let (loaded, streamed) = loaded_and_streamed(&one(name), &graphs_and_nvtx(), &stream_opts);
        assert_eq!(streamed.graphs, loaded.graphs, "{name}");
        assert_eq!(replayed(&streamed), replayed(&loaded), "{name}");
        let st = streamed.stream.as_ref().unwrap();
        assert_eq!((st.launch_horizon, st.launches_out_of_horizon, st.graph_ops_traced_at_own_start), (10, 0, 0));
        assert!(!stats::describe_stream(st).contains("CUDA graph ops"), "{name}");
    }
    let st = stats::StreamReport { launch_horizon: 10, graph_ops_traced_at_own_start: 26, ..Default::default() };
    assert!(
        stats::describe_stream(&st)
            .ends_with("; CUDA graph ops traced back at their own start, their launching call not at hand: 26"),
        "{}",
        stats::describe_stream(&st)
    );
}

/// The window [`start_us`, `end_us`] after the first record of `paths`, as `--start`/`--end` make it.
fn window(paths: &[PathBuf], start_us: Option<u64>, end_us: Option<u64>) -> Filter {
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let first = cutr_model::timebase::first_record(&readers);
    Filter { start: start_us.map(|s| first + s * 1_000), end: end_us.map(|e| first + e * 1_000), kinds: Vec::new() }
}

/// In `filter`'s window, streamed equals a load with that window, in one-chunk windows and the default ones;
/// returns the one-chunk report.
fn assert_windowed_streamed_equals_loaded(paths: &[PathBuf], filter: &Filter) -> Stats {
    let opts = graphs_and_nvtx();
    let loaded = stats::compute(&load(paths, &LoadOptions { filter: filter.clone() }).unwrap(), &opts);
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let mut one_chunk = None;
    for window_bytes in [1, StreamOptions::default().window_bytes] {
        let stream_opts = StreamOptions { window_bytes, ..Default::default() };
        let (streamed, _) = stats::compute_streaming_in(paths, &readers, &opts, filter, 1000, &stream_opts).unwrap();
        let what = format!("{paths:?} in {filter:?}, windows of {window_bytes} bytes");
        assert_eq!(streamed.graphs, loaded.graphs, "{what}");
        assert_eq!(replayed(&streamed), replayed(&loaded), "{what}");
        assert_eq!(graph_joins(&streamed), graph_joins(&loaded), "{what}");
        let st = streamed.stream.as_ref().unwrap();
        assert_eq!((st.not_computed.len(), &streamed.sections), (0, &opts.sections), "{what}");
        assert_eq!(streamed.warnings, Vec::<String>::new(), "{what}");
        one_chunk.get_or_insert(streamed);
    }
    one_chunk.unwrap()
}

/// Capture paths of a report: (path, nodes, ops, GPU ns).
fn capture_paths(s: &Stats) -> Vec<(&str, u64, u64, u64)> {
    s.graphs.ranges.iter().map(|r| (r.path.as_str(), r.nodes, r.ops, r.gpu_ns)).collect()
}

/// Replays per executable, in the report's order.
fn replay_counts(s: &Stats) -> Vec<u64> {
    s.graphs.execs.iter().map(|e| e.per_replay.count).collect()
}

/// torch.compile's cudagraph trees (nodes made 21,020-21,087 ms after the first record, replays to 21,101 ms),
/// windowed as a load windows them: the window's NVTX ranges alone are nested, among them `layer1` and `layer2`
/// of an earlier call, never closed, so every path starts there (the whole recording's, nesting every earlier
/// range still open or crossed, start at `phase:compile` and go 12 deep). A
/// window cutting through the last replays, whose nodes were made before it in ranges still open in it; one
/// covering the captures; one after them; one through the middle of the captures, cutting a replay; one before.
#[test]
fn a_time_window_streams_torch_compiles_graphs_as_a_windowed_load_gives_them() {
    let paths = one("graph_compile.cutr");
    let whole = stats::compute(&load(&paths, &LoadOptions::default()).unwrap(), &graphs_and_nvtx());
    let whole_path = "phase:compile/forward/forward/forward/layer0/layer0/layer0/layer1/layer2/forward/layer0/mlp";
    assert_eq!(capture_paths(&whole)[0], (whole_path, 6, 24, 492_682));
    let mid = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(21_095_500), Some(21_098_500)));
    let g = &mid.graphs;
    assert_eq!((g.ops, g.ops_traced_back, g.nodes, g.execs_made), (90, 90, 64, 9));
    assert_eq!(replay_counts(&mid), [2, 2, 2, 2, 1, 1, 1, 1, 0]);
    assert_eq!(exec_row(&mid, 0), ("graph 8 (template 7)", 2, 245_542, 122_404, 122_771.0, 123_138, 12));
    assert_eq!(capture_paths(&mid), [("layer1/layer2", 64, 90, 1_399_044)]);
    let capture = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(21_000_000), Some(21_090_000)));
    assert_eq!(replay_counts(&capture), [1, 1, 1, 1, 1, 1, 1, 1, 0]);
    let paths_of_capture = capture_paths(&capture);
    assert_eq!(paths_of_capture.len(), 8);
    assert_eq!(paths_of_capture[0], ("layer1/layer2/forward/layer0/mlp", 6, 6, 124_835));
    assert_eq!(paths_of_capture[7], ("layer1/layer2/forward/layer2/attention", 10, 10, 120_003));
    assert_eq!(replayed(&capture)["forward"], (976_981, 64));
    let after = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(21_090_000), None));
    assert_eq!(replay_counts(&after), [3, 3, 3, 3, 3, 3, 3, 3, 0]);
    assert_eq!(
        capture_paths(&after),
        [
            ("layer1/layer2/forward", 48, 144, 2_183_575),
            ("layer1/layer2/forward/layer3/mlp", 6, 18, 366_245),
            ("layer1/layer2/forward/layer3", 10, 30, 359_911)
        ]
    );
    let through = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(21_050_000), Some(21_060_000)));
    assert_eq!((through.graphs.ops, replay_counts(&through)), (8, vec![1, 1, 0, 0, 0, 0, 0, 0, 0]));
    assert_eq!(
        capture_paths(&through),
        [
            ("layer1/layer2/forward/layer1/mlp", 6, 6, 122_851),
            ("layer1/layer2/forward/layer2/attention", 10, 2, 26_082),
            ("layer1/layer2/forward", 32, 0, 0),
            ("layer1/layer2/forward/layer1", 10, 0, 0),
            ("layer1/layer2/forward/layer2", 6, 0, 0)
        ]
    );
    // Ending before the never-closed `layer1` starts (20,836.8 ms), in a chunk read for the window: a load leaves
    // that range out, so the nodes have no range at all.
    let before = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(20_830_000), Some(20_836_000)));
    assert_eq!((before.graphs.ops, capture_paths(&before)), (0, vec![("", 64, 0, 0)]));
}

/// PyTorch's graph captured in `phase:capture` (675-713 ms) and replayed 20 times (715-738 ms): a window cutting
/// through the replays (launched before it: no launching call, no capture range), one covering the capture (no
/// replay), one after it.
#[test]
fn a_time_window_streams_a_pytorch_graph_as_a_windowed_load_gives_it() {
    let paths = one("graph_layers.cutr");
    let mid = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(720_000), Some(730_000)));
    assert_eq!(exec_row(&mid, 0), ("graph 2 (template 1)", 10, 9_754_681, 402_921, 1_114_871.5, 1_116_982, 524));
    assert_eq!(capture_paths(&mid), [("", 60, 524, 9_754_681)]);
    assert_eq!(graph_joins(&mid), (0, 0, 0, 0, 524));
    let capture = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(670_000), Some(714_000)));
    assert_eq!((capture.graphs.ops, replay_counts(&capture)), (0, vec![0]));
    let paths_of_capture = capture_paths(&capture);
    assert_eq!(paths_of_capture.len(), 8);
    assert_eq!(paths_of_capture[0], ("phase:capture/forward/layer0/attention", 10, 0, 0));
    assert_eq!(paths_of_capture[7], ("phase:capture/forward/layer3/mlp", 5, 0, 0));
    let after = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(714_000), None));
    assert_eq!(exec_row(&after, 0), ("graph 2 (template 1)", 20, 22_308_346, 1_112_029, 1_115_577.5, 1_117_911, 1_200));
    assert_eq!(capture_paths(&after), [("phase:capture", 60, 1_200, 22_308_346)]);
    assert_eq!(replayed(&after)["phase:capture"], (22_308_346, 1_200));
}

/// Hand-built graphs (made 125.4-126.1 ms after the first record, launched in between): windows over the builds,
/// through them, and after them; and windows cut at every sixth of the recordings of both fixtures.
#[test]
fn time_windows_over_hand_built_graphs_and_a_grid_of_windows_stream_as_they_load() {
    let paths = one("graph_workload.cutr");
    let all = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(125_400), Some(126_200)));
    assert_eq!((all.graphs.ops, replay_counts(&all)), (26, vec![4, 2, 1, 1]));
    assert_eq!(
        capture_paths(&all),
        [
            ("explicit/build", 3, 9, 8_736),
            ("update/U0", 4, 8, 7_808),
            ("capture/L0/L1", 2, 4, 4_800),
            ("capture/L0", 2, 4, 3_936),
            ("stacks", 1, 1, 1_152)
        ]
    );
    let through = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(125_900), Some(126_100)));
    assert_eq!((through.graphs.ops, replay_counts(&through)), (19, vec![4, 1, 0, 0]));
    assert_eq!(capture_paths(&through), [("", 7, 11, 11_616), ("update/U0", 4, 8, 7_808), ("stacks", 1, 0, 0)]);
    let after = assert_windowed_streamed_equals_loaded(&paths, &window(&paths, Some(126_100), None));
    assert_eq!((after.graphs.ops, replay_counts(&after)), (1, vec![1, 0, 0, 0]));
    assert_eq!(capture_paths(&after), [("stacks", 1, 1, 1_152), ("", 11, 0, 0)]);
    for name in ["graph_workload.cutr", "graph_compile.cutr"] {
        let paths = one(name);
        let t = load(&paths, &LoadOptions::default()).unwrap();
        let (a, b) = t.span();
        for i in 0..6 {
            for j in i + 1..=6 {
                let start = (i > 0).then(|| a + (b - a) * i / 6);
                let end = (j < 6).then(|| a + (b - a) * j / 6);
                assert_windowed_streamed_equals_loaded(&paths, &Filter { start, end, kinds: Vec::new() });
            }
        }
    }
}
