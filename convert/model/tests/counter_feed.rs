//! The stream's counter feed (`StreamOptions::counter_feed`): every counter sample a load reads, handed over once,
//! a chunk at a time in the window its first sample falls in, with each series' span known from the open; the
//! same warnings and counts as a load; nothing read whole.

use std::path::{Path, PathBuf};

use cutr_model::stream::{StreamOptions, stream_readers_in};
use cutr_model::{CounterSample, Filter, LoadOptions, Trace, load};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

/// A sample with its series named (the stream's trace and a load's intern names in another order).
type Named = (u32, String, u64, u64);

fn named(t: &Trace, samples: &[CounterSample]) -> Vec<Named> {
    let mut out: Vec<Named> =
        samples.iter().map(|s| (s.device, t.names.get(s.series).to_string(), s.ts, s.value.to_bits())).collect();
    // As a load sorts them: each series' samples together in time order (a time's in the order read).
    out.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    out
}

/// The samples handed over, the most at once, the stream's trace and its batches of counters alone.
fn fed(path: &Path, filter: &Filter, window_bytes: u64) -> (Vec<CounterSample>, usize, Trace, u64) {
    let readers = [cutr_format::Reader::open(path).unwrap()];
    let opts = StreamOptions { counter_feed: true, window_bytes, ..Default::default() };
    let (mut all, mut most, mut complete) = (Vec::new(), 0, 0);
    let (t, end) = stream_readers_in(&[path.to_path_buf()], &readers, &opts, filter, |_, _, b| {
        // Every sample before the batch's bound has come, and none of this batch is before the last bound.
        assert!(b.counters.iter().all(|s| s.ts >= complete), "a sample before an earlier batch's bound");
        assert!(b.counters_complete_before >= complete);
        complete = b.counters_complete_before;
        most = most.max(b.counters.len());
        // A window's chunks begin before the next window's rows (a batch of counters alone comes ahead of its
        // window's rows, the edge it gives being their start).
        let alone = b.kernels.is_empty() && b.apis.is_empty() && b.ranges.is_empty() && b.range_starts.is_empty();
        if let (Some(next), Some(first), false) = (b.next_start, b.counters.iter().map(|s| s.ts).min(), alone) {
            assert!(first < next, "a chunk handed over before its window");
        }
        all.extend_from_slice(&b.counters);
    })
    .unwrap();
    assert_eq!(complete, u64::MAX, "the last batch hands every sample over");
    (all, most, t, end.counter_batches)
}

/// The most readings (samples x metrics) one counter chunk of `path` holds.
fn largest_chunk(path: &Path) -> usize {
    let r = cutr_format::Reader::open(path).unwrap();
    let counters = r.chunks().iter().filter(|c| c.chunk_type() == cutr_format::ChunkType::Counters);
    let decoded = counters.map(|c| cutr_format::CounterSamples::from_bytes(&r.payload(c).unwrap()).unwrap());
    decoded.map(|d| d.values.len()).max().unwrap()
}

#[test]
fn every_sample_is_handed_over_once_as_a_load_reads_it() {
    for (name, samples, series, alone_at_one_byte) in [
        ("counter_workload.cutr", 261_331, 21, 23),
        ("counter_100khz.cutr", 163_956, 12, 36),
        ("counter_two_gpus.cutr", 115_182, 50, 6),
    ] {
        let path = fixture(name);
        let loaded = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
        for window_bytes in [1, StreamOptions::default().window_bytes] {
            let (all, most, t, alone) = fed(&path, &Filter::default(), window_bytes);
            assert!(named(&t, &all) == named(&loaded, &loaded.counters), "{name}: not the loaded samples");
            assert!(t.counters.is_empty(), "nothing read whole");
            assert_eq!((all.len(), t.counter_series.len()), (samples, series), "{name}");
            // A window's bytes cap its counter chunks too: at one byte, a chunk's readings at a time, the chunks
            // past a window's first in batches of their own.
            let capped = if window_bytes == 1 { largest_chunk(&path) } else { samples };
            assert!(most <= capped, "{name}: {most} samples at once, past {capped}");
            assert_eq!(alone, if window_bytes == 1 { alone_at_one_byte } else { 0 }, "{name}");
            // Each series' span and size, as the samples give them.
            for info in &t.counter_series {
                let of: Vec<&CounterSample> =
                    all.iter().filter(|s| s.series == info.series && s.device == info.device).collect();
                let largest = of.iter().fold(0f64, |m, s| m.max(s.value.abs()));
                assert_eq!(
                    (info.first, info.last, info.samples, info.largest),
                    (of[0].ts, of[of.len() - 1].ts, of.len() as u64, largest)
                );
            }
            assert_eq!(t.processes[0].warnings, loaded.processes[0].warnings);
            assert_eq!(t.stats.counter_readings_infinite, loaded.stats.counter_readings_infinite);
        }
    }
}

/// A `--start/--end` window hands over the samples overlapping it, as a windowed load keeps them.
#[test]
fn a_window_hands_over_the_samples_a_windowed_load_keeps() {
    let path = fixture("counter_workload.cutr");
    let begin = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap().span().0;
    let filter = Filter { start: Some(begin + 500_000_000), end: Some(begin + 1_500_000_000), kinds: Vec::new() };
    let loaded = load(std::slice::from_ref(&path), &LoadOptions { filter: filter.clone() }).unwrap();
    let (all, _, t, _) = fed(&path, &filter, 1);
    assert!(named(&t, &all) == named(&loaded, &loaded.counters), "not the windowed load's samples");
    assert_eq!(all.len(), WINDOWED);
}

const WINDOWED: usize = 95_400;

/// A `--start/--end` window past the last activity (the two-GPU fixture samples 209 ms beyond its last record)
/// has no window of rows for its samples to ride on: they come in batches of their own, as the windowed load keeps
/// them.
#[test]
fn a_window_without_activity_hands_over_its_samples_alone() {
    let path = fixture("counter_two_gpus.cutr");
    let loaded = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    let after = loaded.span().1 + 20_000_000;
    let filter = Filter { start: Some(after), end: None, kinds: Vec::new() };
    let windowed = load(std::slice::from_ref(&path), &LoadOptions { filter: filter.clone() }).unwrap();
    for window_bytes in [1, StreamOptions::default().window_bytes] {
        let (all, _, t, alone) = fed(&path, &filter, window_bytes);
        assert!(named(&t, &all) == named(&windowed, &windowed.counters), "not the windowed load's samples");
        assert_eq!((all.len(), alone), (PAST_ACTIVITY, if window_bytes == 1 { 1 } else { 0 }));
    }
}

const PAST_ACTIVITY: usize = 416;
