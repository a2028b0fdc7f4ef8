//! PC samples' stall rates folded over a stream ([`cutr_model::stall_stream`]) against a load's
//! ([`cutr_model::stall_rates`]), under a `--start/--end` window: the rates stay those of the whole file (each
//! function's execution time outside the window counted), drawn inside the window only. The trace's counters after
//! the fold are the load's, point for point and in order, a chunk per window and at the default windows.

use std::path::PathBuf;

use cutr_format::Reader;
use cutr_model::stall_stream::{StallEnd, StallStream};
use cutr_model::stream::{StreamOptions, stream_readers_in};
use cutr_model::{CounterSample, Filter, LoadOptions, Trace, load_readers};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from("../../fixtures").join(name)
}

/// The stream of `files` under `filter` with the fold: its trace (counters and counts filled) and what it said.
fn streamed(files: &[PathBuf], readers: &[Reader], filter: &Filter, window_bytes: u64) -> (Trace, StallEnd) {
    let opts = StreamOptions { window_bytes, counters: true, hold_unlaunched: true, ..Default::default() };
    let mut fold = StallStream::read(readers, filter, opts.max_waiting).expect("PC samples");
    let (mut trace, _) = stream_readers_in(files, readers, &opts, filter, |t, _, batch| {
        fold.window(&t.names, &batch.kernels, batch.next_start);
    })
    .unwrap();
    let end = fold.finish(&mut trace);
    (trace, end)
}

/// The load's and the stream's counters equal under `filter`; returns the load's stall points and unplaced
/// samples.
fn equal_under(files: &[PathBuf], filter: &Filter) -> (Vec<CounterSample>, u64) {
    let readers: Vec<Reader> = files.iter().map(|f| Reader::open(f).unwrap()).collect();
    let loaded = load_readers(files, &readers, &LoadOptions { filter: filter.clone() }).unwrap();
    for window_bytes in [1, StreamOptions::default().window_bytes] {
        let (t, end) = streamed(files, &readers, filter, window_bytes);
        assert_eq!(end, StallEnd::default());
        assert_eq!(t.counters.len(), loaded.counters.len());
        let name = |t: &Trace, c: &CounterSample| (c.proc, c.device, t.names.get(c.series).to_string(), c.ts, c.value);
        let got: Vec<_> = t.counters.iter().map(|c| name(&t, c)).collect();
        let want: Vec<_> = loaded.counters.iter().map(|c| name(&loaded, c)).collect();
        assert!(got == want, "{files:?} at {window_bytes} bytes a window");
        assert_eq!(t.stats.pc_samples_unplaced, loaded.stats.pc_samples_unplaced);
        let warnings = |t: &Trace| t.processes.iter().map(|p| p.warnings.clone()).collect::<Vec<_>>();
        assert_eq!(warnings(&t), warnings(&loaded));
    }
    let stall = loaded.counters.iter().filter(|c| loaded.names.get(c.series).starts_with("PC samples/ms: ")).copied();
    (stall.collect(), loaded.stats.pc_samples_unplaced)
}

/// The middle third of the recordings' kernels.
fn middle_third(files: &[PathBuf]) -> Filter {
    let readers: Vec<Reader> = files.iter().map(|f| Reader::open(f).unwrap()).collect();
    let t = load_readers(files, &readers, &LoadOptions::default()).unwrap();
    let (first, last) =
        (t.kernels.iter().map(|k| k.start).min().unwrap(), t.kernels.iter().map(|k| k.end).max().unwrap());
    let third = (last - first) / 3;
    Filter { start: Some(first + third), end: Some(first + 2 * third), kinds: Vec::new() }
}

/// Every point inside the window (not at its edges, where the window cuts the runs) is the unwindowed one: the
/// rates are the whole file's. Returns how many there are.
fn inside_points_are_the_whole_files(all: &[CounterSample], inside: &[CounterSample], w: &Filter) -> usize {
    let (start, end) = (w.start.unwrap(), w.end.unwrap());
    let strictly: Vec<&CounterSample> = inside.iter().filter(|c| c.ts > start && c.ts < end).collect();
    for c in &strictly {
        assert!(all.contains(c), "{c:?}");
    }
    strictly.len()
}

/// One kernel run 100 times: 2,000 points over the recording, 700 in its middle third.
#[test]
fn a_windows_stall_rates_stream_as_they_load() {
    let files = [fixture("calls_workload_pcs.cutr")];
    let (all, unplaced) = equal_under(&files, &Filter::default());
    assert_eq!((all.len(), unplaced), (2_000, 0));
    let window = middle_third(&files);
    let (inside, unplaced) = equal_under(&files, &window);
    assert_eq!((inside.len(), unplaced), (700, 0));
    assert_eq!(inside_points_are_the_whole_files(&all, &inside, &window), 680);
}

/// Three kernels sampled (74 points in the middle third), and a flight-recorder dump (24,018).
#[test]
fn windows_over_several_kernels_stream_as_they_load() {
    let mut got = Vec::new();
    for f in ["source_workload_pcs.cutr", "pc_ring/table_every_collection.cutr"] {
        let files = [fixture(f)];
        let (all, _) = equal_under(&files, &Filter::default());
        let w = middle_third(&files);
        let (inside, unplaced) = equal_under(&files, &w);
        got.push((inside.len(), unplaced, inside_points_are_the_whole_files(&all, &inside, &w)));
    }
    assert_eq!(got, [(74, 0, 74), (24_018, 0, 24_000)]);
}

/// Two parts of one split recording under a window: each part's rates from its own file's kernel time, as a
/// windowed load gives them.
#[test]
fn a_split_recording_under_a_window_streams_as_it_loads() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("source_workload_pcs.cutr")).unwrap();
    let files = cutr_synth::forge::write_parts(dir.path(), &[bytes.clone(), bytes]);
    let (inside, unplaced) = equal_under(&files, &middle_third(&files));
    assert_eq!((inside.len(), unplaced), (74, 0));
}
