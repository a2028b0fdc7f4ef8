//! Hostile counter samples (`counters` chunks, format 1.3, checksums valid) through the model and `stats`: samples
//! on a device the metadata does not list, readings whose sums overflow or that are infinite, and 20,000 metrics
//! (the quadratic class). Each gives the undamaged file's figures, or says exactly what it left out.

use std::path::PathBuf;

use cutr_analyses::stats::{self, MAX_COUNTER_ROWS, Section, StatsOptions};
use cutr_format::CounterSamples;
use cutr_model::{LoadOptions, Trace, load};
use cutr_synth::forge::counters::{metric_flood, write_with_counters};
use cutr_synth::{SynthOptions, SynthTruth};

/// A generated recording of ~20,000 records with the counters chunks `make` builds from its truth.
fn recording(
    dir: &tempfile::TempDir,
    name: &str,
    make: impl FnOnce(&SynthTruth) -> Vec<CounterSamples>,
) -> (PathBuf, Trace) {
    let path = dir.path().join(name);
    let opts = SynthOptions { records: 20_000, buffer_bytes: 256 << 10, ..Default::default() };
    write_with_counters(&path, opts, make).unwrap();
    let t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    (path, t)
}

fn counters(t: &Trace) -> stats::Stats {
    stats::compute(t, &StatsOptions { sections: vec![Section::Counters, Section::Loss], ..Default::default() })
}

/// One metric of 200 samples over the whole recording, on device 0.
fn flood(t: &SynthTruth, value: impl Fn(usize, usize) -> f64) -> CounterSamples {
    metric_flood((t.t_min, t.t_max), 1, 200, 0, value)
}

/// 1 + (sample index mod 7): a series that changes at every sample.
fn steps(_metric: usize, i: usize) -> f64 {
    1.0 + (i % 7) as f64
}

#[test]
fn counters_on_a_device_the_metadata_does_not_list_are_counted_and_warned() {
    let dir = tempfile::tempdir().unwrap();
    let (path, t) = recording(&dir, "device7.cutr", |t| vec![metric_flood((t.t_min, t.t_max), 2, 100, 7, steps)]);
    assert_eq!(t.counters.len(), 200, "kept");
    assert_eq!(t.stats.counter_samples_unknown_device, 200);
    assert_eq!(
        t.processes[0].warnings,
        ["200 counter samples are on device 7, which the file's metadata does not list (devices 0): kept, but no \
          kernel ran there to average them over"]
    );
    let text = stats::render_text(&counters(&t), Default::default());
    assert!(text.contains("counter samples on devices the metadata does not list 200"), "{text}");
    let info = cutr_analyses::info::report(&cutr_format::Reader::open(&path).unwrap());
    assert_eq!(
        info.warnings,
        ["1 counters chunks are on device 7, which the file's metadata does not list (devices 0)"],
        "info says it too"
    );
}

#[test]
fn readings_whose_sums_overflow_average_exactly_and_infinite_ones_are_left_out_and_warned() {
    let dir = tempfile::tempdir().unwrap();
    let (_, plain) = recording(&dir, "plain.cutr", |t| vec![flood(t, steps)]);
    // The same readings times 2^1000: each time-weighted integral is past f64::MAX, and used to print as `null`.
    let (_, huge) = recording(&dir, "huge.cutr", |t| vec![flood(t, |m, i| steps(m, i) * 2f64.powi(1000))]);
    let (plain, huge) = (counters(&plain), counters(&huge));
    assert!(plain.counters.len() > 10, "{} rows", plain.counters.len());
    assert_eq!(huge.counters.len(), plain.counters.len());
    for (p, h) in plain.counters.iter().zip(&huge.counters) {
        assert_eq!((&h.name, h.covered_ns, h.average), (&p.name, p.covered_ns, p.average * 2f64.powi(1000)));
    }
    assert!(!serde_json::to_string(&huge).unwrap().contains("null"));
    assert_eq!(huge.warnings, [] as [String; 0]);

    // Every 10th reading infinite: the same figures as a file with those readings failed (NaN), and a warning.
    let every_10th = |value: f64| move |m: usize, i: usize| if i % 10 == 3 { value } else { steps(m, i) };
    let (_, failed) = recording(&dir, "failed.cutr", |t| vec![flood(t, every_10th(f64::NAN))]);
    let (_, infinite) = recording(&dir, "infinite.cutr", |t| vec![flood(t, every_10th(f64::INFINITY))]);
    assert_eq!(
        infinite.processes[0].warnings,
        ["20 counter readings are infinite (PM: metric_00000 (%)): left out, as failed readings are"]
    );
    assert_eq!(infinite.stats.counter_readings_infinite, 20);
    let (failed, infinite) = (counters(&failed), counters(&infinite));
    assert_eq!(infinite.counters, failed.counters);
    let text = stats::render_text(&infinite, Default::default());
    assert!(text.contains("infinite counter readings, left out 20"), "{text}");
}

#[test]
fn twenty_thousand_metrics_fill_a_bounded_report_and_say_what_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let (_, one) = recording(&dir, "one.cutr", |t| vec![metric_flood((t.t_min, t.t_max), 1, 4, 0, steps)]);
    let (_, flood) = recording(&dir, "flood.cutr", |t| vec![metric_flood((t.t_min, t.t_max), 20_000, 4, 0, steps)]);
    assert_eq!(flood.counters.len(), 80_000);
    let (one, flood) = (counters(&one), counters(&flood));
    // The undamaged file: one row per (kernel, copy kind or range, GPU) group. The flood: the first group's first 10,000
    // metrics, each averaging what the one metric does over it, and every group named as left out.
    let groups = one.counters.len();
    assert_eq!(groups, 197, "kernels, copy and memset kinds, ranges");
    assert_eq!((flood.counters.len(), flood.counter_groups_not_shown), (MAX_COUNTER_ROWS, groups));
    for (j, row) in flood.counters.iter().enumerate() {
        let want = &one.counters[0];
        assert_eq!(
            (&row.name, row.series.as_str(), row.average, row.covered_ns),
            (&want.name, format!("PM: metric_{j:05} (%)").as_str(), want.average, want.covered_ns)
        );
    }
    let text = stats::render_text(&flood, Default::default());
    assert!(
        text.contains(
            "  ... and the counters of 197 more (kernel, copy or NVTX range, GPU) pairs: a report holds at most 10,000 \
             counter rows (--top N keeps the names with the most time)"
        ),
        "{}",
        &text[text.len().saturating_sub(2000)..]
    );
    // With --top 2, two kernels, two copy kinds and two ranges: still past the cap, still said.
    let top = stats::compute(
        &load_again(&dir, "flood.cutr"),
        &StatsOptions { top: Some(2), sections: vec![Section::Counters], ..Default::default() },
    );
    assert_eq!((top.counters.len(), top.counter_groups_not_shown), (MAX_COUNTER_ROWS, 6));
    // `diff` compares at most 100,000 rows a side (5 groups of 20,000 metrics) and says what it left out.
    let both = [load_again(&dir, "flood.cutr")];
    let d = cutr_analyses::diff::diff(&both, &both, &Default::default());
    assert_eq!(
        d.warnings,
        [
            "the counters of 384 (kernel, copy or NVTX range, GPU) pairs beyond the 100000 rows a side compares were not compared"
        ]
    );
}

fn load_again(dir: &tempfile::TempDir, name: &str) -> Trace {
    load(&[dir.path().join(name)], &LoadOptions::default()).unwrap()
}

#[test]
fn counter_samples_taken_while_nothing_ran_are_warned_not_left_silent() {
    // As a part of a --split recording can hold them: samples after the last record (the kernels that ran then
    // were delivered to the next part). Three metrics, 50 samples, one to two seconds past the recording.
    let dir = tempfile::tempdir().unwrap();
    let (_, t) = recording(&dir, "after.cutr", |t| {
        vec![metric_flood((t.t_max + 1_000_000_000, t.t_max + 2_000_000_000), 3, 50, 0, steps)]
    });
    let s = counters(&t);
    assert_eq!(s.counters.len(), 0);
    assert_eq!(
        s.warnings,
        ["3 counter series were recorded, but no kernel, copy or NVTX range ran while their samples were taken: no \
          averages (read a --split recording's parts together)"]
    );
    // The same samples over the recording's own time give rows and no such warning.
    let (_, t) = recording(&dir, "during.cutr", |t| vec![metric_flood((t.t_min, t.t_max), 3, 50, 0, steps)]);
    let s = counters(&t);
    let over: std::collections::BTreeSet<&str> = s.counters.iter().map(|r| r.series.as_str()).collect();
    assert_eq!((over.len(), s.warnings.len()), (3, 0), "{:?}", s.warnings);
    // 197 kernel names and copy kinds of the generated run, each averaged over the three series.
    assert_eq!(s.counters.len(), 197 * 3);
}
