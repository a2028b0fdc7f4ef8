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

/// The samples handed over, the most at once, and the stream's trace.
fn fed(path: &Path, filter: &Filter, window_bytes: u64) -> (Vec<CounterSample>, usize, Trace) {
    let readers = [cutr_format::Reader::open(path).unwrap()];
    let opts = StreamOptions { counter_feed: true, window_bytes, ..Default::default() };
    let (mut all, mut most, mut complete) = (Vec::new(), 0, 0);
    let (t, _) = stream_readers_in(&[path.to_path_buf()], &readers, &opts, filter, |_, _, b| {
        // Every sample before the batch's bound has come, and none of this batch is before the last bound.
        assert!(b.counters.iter().all(|s| s.ts >= complete), "a sample before an earlier batch's bound");
        assert!(b.counters_complete_before >= complete);
        complete = b.counters_complete_before;
        most = most.max(b.counters.len());
        // A batch's chunks begin before the next window's rows.
        if let (Some(next), Some(first)) = (b.next_start, b.counters.iter().map(|s| s.ts).min()) {
            assert!(first < next, "a chunk handed over before its window");
        }
        all.extend_from_slice(&b.counters);
    })
    .unwrap();
    assert_eq!(complete, u64::MAX, "the last batch hands every sample over");
    (all, most, t)
}

#[test]
fn every_sample_is_handed_over_once_as_a_load_reads_it() {
    for (name, samples, series) in [
        ("counter_workload.cutr", 261_331, 21),
        ("counter_100khz.cutr", 163_956, 12),
        ("counter_two_gpus.cutr", 115_182, 50),
    ] {
        let path = fixture(name);
        let loaded = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
        for window_bytes in [1, StreamOptions::default().window_bytes] {
            let (all, most, t) = fed(&path, &Filter::default(), window_bytes);
            assert!(named(&t, &all) == named(&loaded, &loaded.counters), "{name}: not the loaded samples");
            assert!(t.counters.is_empty(), "nothing read whole");
            assert_eq!((all.len(), t.counter_series.len()), (samples, series), "{name}");
            if window_bytes == 1 {
                assert!(most < samples, "{name}: every sample in one batch");
            }
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
    let (all, _, t) = fed(&path, &filter, 1);
    assert!(named(&t, &all) == named(&loaded, &loaded.counters), "not the windowed load's samples");
    assert_eq!(all.len(), WINDOWED);
}

const WINDOWED: usize = 95_400;
