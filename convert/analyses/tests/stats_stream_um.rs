//! `stats --stream`'s unified memory section against the loaded report's, whole (`assert_eq!` on the
//! `UmReport`): on the unified memory fixture recorded on an H100 and on generated recordings, in one-chunk
//! windows and in the default ones, with a few of its figures checked against what the program did, so that two
//! empty reports cannot pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cutr_analyses::stats::{self, Section, Stats, StatsOptions, UmReport};
use cutr_format::ChunkType;
use cutr_model::stream::{StreamOptions, stream};
use cutr_model::um::UmJoin;
use cutr_model::{Filter, LoadOptions, load};
use cutr_synth::SynthOptions;
use cutr_synth::um::{self as u, UmRecord};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// The `um` section of `path` loaded, then streamed in windows of at most `window_bytes` of records.
fn loaded_and_streamed(path: &Path, opts: &StatsOptions, window_bytes: u64) -> (UmReport, Stats) {
    loaded_and_streamed_files(&[path.to_path_buf()], opts, window_bytes)
}

fn loaded_and_streamed_files(paths: &[PathBuf], opts: &StatsOptions, window_bytes: u64) -> (UmReport, Stats) {
    let loaded = stats::compute(&load(paths, &LoadOptions::default()).unwrap(), opts);
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let stream_opts = StreamOptions { window_bytes, ..Default::default() };
    let (streamed, _) = stats::compute_streaming(paths, &readers, opts, 1000, &stream_opts).unwrap();
    (loaded.um, streamed)
}

/// Events the kernel join held over a window's edge (pending there, summed over the edges), and the windows: what
/// makes the streamed join differ from a one-pass one.
fn held_over_edges(path: &Path, window_bytes: u64) -> (u64, u64) {
    let (mut join, mut arrived, mut handed_on, mut held) = (UmJoin::default(), 0, 0, 0);
    let opts = StreamOptions { window_bytes, ..Default::default() };
    let end = stream(&[path.to_path_buf()], &opts, |_, _, b| {
        arrived += b.um.len() as u64;
        join.window(b.um.iter().copied(), &b.kernels, b.next_start, |_, _| handed_on += 1);
        held += arrived - handed_on;
    })
    .unwrap();
    assert_eq!((arrived, handed_on, join.late_rows()), (handed_on, arrived, 0));
    (held, end.windows)
}

fn um_only(top: Option<usize>, symbol_dirs: Vec<PathBuf>) -> StatsOptions {
    StatsOptions { sections: vec![Section::Um], top, symbol_dirs, ..Default::default() }
}

#[test]
fn streamed_um_equals_the_loaded_one_on_the_h100_fixture() {
    let path = fixtures().join("um_workload.cutr");
    let opts = um_only(None, vec![fixtures().join("bin")]);
    for window_bytes in [1, StreamOptions::default().window_bytes] {
        let (loaded, streamed) = loaded_and_streamed(&path, &opts, window_bytes);
        assert_eq!(streamed.um, loaded, "windows of {window_bytes} bytes");
        let st = streamed.stream.as_ref().unwrap();
        assert!(st.not_computed.is_empty(), "{:?}", st.not_computed);
        assert!(streamed.warnings.is_empty(), "{:?}", streamed.warnings);
    }
    let (_, streamed) = loaded_and_streamed(&path, &opts, 1);
    // Three chunks, one a window: every event is final at the edge after it (the generated recording below is
    // where events wait for a later window's kernels).
    assert_eq!(held_over_edges(&path, 1), (0, 3));
    let r = &streamed.um;
    assert_eq!((r.events, r.cpu_faults, r.saturated), (4_693, 768, 0));
    let m: BTreeMap<&str, (u64, u64)> = r.migrations.iter().map(|m| (m.direction, (m.count, m.bytes))).collect();
    assert_eq!(m, [("DtoH", (208, 67_108_864)), ("HtoD", (3_567, 134_217_728))].into());
    let kernels: Vec<_> = r.kernels.iter().map(|k| (k.kernel.as_str(), k.gpu_fault_records, k.migrations)).collect();
    assert_eq!(
        kernels,
        [
            ("increment(int*, unsigned long)", 100, 2_257),
            ("sum_read(int const*, unsigned long, unsigned long long*)", 50, 1_294),
            ("(no kernel)", 0, 224),
        ]
    );
    let hosts: Vec<_> = r.host_functions.iter().map(|h| (h.function.as_str(), h.faults)).collect();
    assert_eq!(hosts, [("host_write(int*, unsigned long, int)", 672), ("host_sum(int const*, unsigned long)", 96)]);
}

#[test]
fn streamed_um_keeps_the_loaded_top_rows() {
    let path = fixtures().join("um_workload.cutr");
    let (loaded, streamed) = loaded_and_streamed(&path, &um_only(Some(1), Vec::new()), 1);
    assert_eq!(streamed.um, loaded);
    let r = &streamed.um;
    assert_eq!((r.kernels.len(), r.top_bytes.len(), r.host_functions.len()), (1, 1, 1));
    assert_eq!((r.kernels[0].gpu_fault_records, r.host_functions[0].unresolved), (100, Some("file not readable here")));
}

#[test]
fn streamed_um_equals_the_loaded_one_on_generated_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("um.cutr");
    // 16 KiB buffers: the episodes' records and kernels fall in many chunks.
    let opts = SynthOptions { records: 60_000, buffer_bytes: 16 << 10, unified_memory: true, ..Default::default() };
    let truth = cutr_synth::write_file(&path, opts).unwrap().um;
    for window_bytes in [1, 40 << 10, StreamOptions::default().window_bytes] {
        let (loaded, streamed) = loaded_and_streamed(&path, &um_only(None, Vec::new()), window_bytes);
        assert_eq!(streamed.um, loaded, "windows of {window_bytes} bytes");
        assert!(streamed.warnings.is_empty(), "{:?}", streamed.warnings);
    }
    let (_, streamed) = loaded_and_streamed(&path, &um_only(None, Vec::new()), 1);
    let (r, n) = (&streamed.um, truth.episodes);
    assert_eq!(n, 102);
    // One chunk a window: 318 windows, 23 events (summed over the edges) waiting at an edge for a later window.
    assert_eq!(held_over_edges(&path, 1), (23, 318));
    assert_eq!((r.events, r.cpu_faults), (19 * n, 6 * n));
    let htod = r.migrations.iter().find(|m| m.direction == "HtoD").unwrap();
    assert_eq!((htod.count, htod.bytes), (4 * n, 4 * n * u::CHUNK));
    // Every event of the episode's kernel's time joined to it, the rest to no kernel.
    let during = |kind| truth.during_kernel[&kind];
    let kernels: Vec<_> = r.kernels.iter().map(|k| (k.gpu_fault_records, k.migrations, k.other)).collect();
    let throttling_and_maps = during(u::THROTTLING) + during(u::REMOTE_MAP);
    assert_eq!(kernels[0], (during(u::GPU_PAGE_FAULT), during(u::BYTES_HTOD), throttling_and_maps));
    assert_eq!(kernels[0], (3 * n, 3 * n, 2 * n));
}

#[test]
fn two_ranks_stream_their_um_as_they_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut episodes = 0;
    let paths: Vec<PathBuf> = (0..2)
        .map(|rank| {
            let path = dir.path().join(format!("rank{rank}.cutr"));
            let opts = SynthOptions {
                records: 30_000,
                buffer_bytes: 16 << 10,
                unified_memory: true,
                rank: Some((rank, 2)),
                ..Default::default()
            };
            episodes += cutr_synth::write_file(&path, opts).unwrap().um.episodes;
            path
        })
        .collect();
    let (loaded, streamed) = loaded_and_streamed_files(&paths, &um_only(None, Vec::new()), 1);
    assert_eq!(streamed.um, loaded);
    // Both ranks' episodes, 3 GPU faults each in the episode's kernel (the ranks' kernels share their names: that
    // a file's events join only its own kernels is cutr_model's `um::stream_join` unit test).
    let r = &streamed.um;
    assert_eq!(episodes, 102);
    assert_eq!((r.events, r.kernels[0].gpu_fault_records), (19 * episodes, 3 * episodes));
}

/// The trace time of the earliest record of `path`, as `--start/--end` count from it.
fn first_record(path: &Path) -> u64 {
    let r = cutr_format::Reader::open(path).unwrap();
    let time = cutr_model::timebase::ClockCheck::of_reader(&r).time;
    r.activity_chunks().filter(|c| c.header.t_min != 0).map(|c| time.to_trace(c.header.t_min)).min().unwrap()
}

#[test]
fn a_time_window_streams_its_um_as_it_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("um.cutr");
    let opts = SynthOptions { records: 60_000, buffer_bytes: 16 << 10, unified_memory: true, ..Default::default() };
    cutr_synth::write_file(&path, opts).unwrap();
    let (first, ms) = (first_record(&path), 1_000_000);
    let filter = Filter { start: Some(first + 100 * ms), end: Some(first + 200 * ms), kinds: Vec::new() };
    let paths = [path.clone()];
    let opts = um_only(None, Vec::new());
    let loaded = stats::compute(&load(&paths, &LoadOptions { filter: filter.clone() }).unwrap(), &opts);
    let readers = [cutr_format::Reader::open(&path).unwrap()];
    let stream_opts = StreamOptions { window_bytes: 1, ..Default::default() };
    let (streamed, _) = stats::compute_streaming_in(&paths, &readers, &opts, &filter, 1000, &stream_opts).unwrap();
    assert_eq!(streamed.um, loaded.um);
    // The events of 27 episodes, 19 each.
    assert_eq!(streamed.um.events, 27 * 19);
}

#[test]
fn a_chunk_header_claiming_a_later_start_than_its_rows_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("um.cutr");
    let opts = SynthOptions { records: 60_000, buffer_bytes: 16 << 10, unified_memory: true, ..Default::default() };
    cutr_synth::write_file(&path, opts).unwrap();
    // The 40th activity chunk claims the time of the last: it is read after the chunks its rows came before.
    let mut bytes = std::fs::read(&path).unwrap();
    let chunks = cutr_synth::forge::chunks_of(&bytes, ChunkType::Activity);
    let last = chunks.last().unwrap().header.t_max;
    cutr_synth::forge::edit_header(&mut bytes, chunks[40].offset, |h| (h.t_min, h.t_max) = (last, last));
    std::fs::write(&path, &bytes).unwrap();
    let (loaded, streamed) = loaded_and_streamed(&path, &um_only(None, Vec::new()), 1);
    let want =
        ["unified memory: 49 kernels or events started before the time their chunks claim (a damaged file): events \
         by kernel may miss their matches (--no-stream joins them all)"];
    assert_eq!(streamed.warnings, want);
    // Every sum but the join's is the loaded one.
    // The sums do not depend on the order; and here the late chunk held the kernels with their events, so the
    // join still found every match: the warning says what may be missed, it is not a miscount.
    assert_eq!(streamed.um, loaded);
    assert_eq!(streamed.um.kernels[0].gpu_fault_records, 306);
}

#[test]
fn hostile_um_records_stream_as_they_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.cutr");
    let table = cutr_schema::layouts::builtin(130001).unwrap();
    let t0 = cutr_synth::T0 + 5_000_000_000;
    let rec = |kind, value, start, end| UmRecord { kind, value, start, end, src: u::CPU, dst: 0, ..Default::default() };
    let hostile = [
        rec(0, 1, t0, t0 + 1),                                        // counter kind 0: unknown
        rec(u::BYTES_HTOD, u64::MAX, t0, t0 + 10),                    // 2^64-1 bytes
        rec(u::BYTES_HTOD, u64::MAX, t0 + 20, t0 + 30),               // and again: the total saturates
        rec(u::BYTES_HTOD, 4096, t0 + 50, t0 + 40),                   // ends before it starts
        rec(u::GPU_PAGE_FAULT, u64::MAX, t0 + 60, t0 + u64::MAX / 2), // fault groups 2^64-1, 2^63 ns long
        rec(u::CPU_PAGE_FAULT, u64::MAX, t0 + 70, 0),                 // a PC no mapping holds
    ];
    let buffer: Vec<u8> = hostile.iter().flat_map(|r| u::um_record_bytes(&table, r)).collect();
    let writer = cutr_format::Writer::create(&path, Default::default()).unwrap();
    cutr_synth::write_to_with(writer, SynthOptions { records: 2_000, ..Default::default() }, |w, _| {
        w.append_encoded(cutr_format::ActivityEncoder::new(&table, 3).encode(&buffer)).map(|_| ())
    })
    .unwrap();
    let (loaded, streamed) = loaded_and_streamed(&path, &um_only(None, Vec::new()), 1);
    assert_eq!(streamed.um, loaded);
    let r = &streamed.um;
    assert_eq!((r.events, r.migrations[0].bytes, r.saturated), (4, u64::MAX, 4));
}
