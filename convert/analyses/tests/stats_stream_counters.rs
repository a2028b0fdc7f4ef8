//! `stats --stream`'s counters section against the loaded one, on every fixture with counter samples and on
//! generated recordings with forged series: the same rows, groups, order, covered and total times, windows and
//! groups left out; averages and own shares (sums added in another order) within a relative 1e-12.

use std::path::{Path, PathBuf};

use cutr_analyses::stats::{self, CounterAverage, Section, Stats, StatsOptions};
use cutr_format::{CounterMetric, CounterSamples};
use cutr_model::stream::StreamOptions;
use cutr_model::{LoadOptions, load};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

fn options(top: Option<usize>) -> StatsOptions {
    StatsOptions { top, sections: vec![Section::Kernels, Section::Counters], ..Default::default() }
}

/// The loaded report and the streamed one in windows of at most `window_bytes` of records.
fn whole_and_streamed(paths: &[PathBuf], top: Option<usize>, window_bytes: u64) -> (Stats, Stats) {
    let opts = options(top);
    let whole = stats::compute(&load(paths, &LoadOptions::default()).unwrap(), &opts);
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let stream_opts = StreamOptions { window_bytes, ..Default::default() };
    let (streamed, _) = stats::compute_streaming(paths, &readers, &opts, 64, &stream_opts).unwrap();
    (whole, streamed)
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

/// Every row equal, the two sums within a relative 1e-12; the section's cut and warnings the same.
fn same_section(w: &Stats, s: &Stats) {
    let exact = |r: &CounterAverage| (r.over, r.name.clone(), r.device, r.series.clone(), r.covered_ns, r.total_ns);
    let exact_w: Vec<_> = w.counters.iter().map(exact).collect();
    let exact_s: Vec<_> = s.counters.iter().map(exact).collect();
    assert_eq!(exact_w, exact_s);
    for (a, b) in w.counters.iter().zip(&s.counters) {
        assert_eq!(a.window, b.window);
        assert!(close(a.average, b.average), "{a:?} vs {b:?}");
        assert!(close(a.own_share, b.own_share), "{a:?} vs {b:?}");
    }
    assert_eq!(w.counter_groups_not_shown, s.counter_groups_not_shown);
    assert_eq!(w.warnings, s.warnings);
    let not_computed = &s.stream.as_ref().unwrap().not_computed;
    assert!(!not_computed.contains(&"counters".to_string()), "{not_computed:?}");
}

/// Streamed in one-chunk windows and in default ones: the loaded section both times.
fn streamed_equals_loaded(paths: &[PathBuf], top: Option<usize>) -> Stats {
    let (whole, one_chunk) = whole_and_streamed(paths, top, 1);
    same_section(&whole, &one_chunk);
    let windows = one_chunk.stream.as_ref().unwrap().windows;
    assert!(windows > 1, "{windows} windows: nothing was summed across an edge");
    let (_, default) = whole_and_streamed(paths, top, StreamOptions::default().window_bytes);
    same_section(&whole, &default);
    whole
}

fn row<'a>(s: &'a Stats, over: &str, name: &str, series: &str) -> &'a CounterAverage {
    s.counters.iter().find(|r| r.over == over && r.name.contains(name) && r.series == series).unwrap()
}

#[test]
fn counter_workload_streams_as_loaded() {
    let s = streamed_equals_loaded(&[fixture("counter_workload.cutr")], None);
    assert_eq!(s.counters.len(), ROWS_WORKLOAD);
    let power = row(&s, "kernel", "copy", "power (W)");
    assert_eq!((power.covered_ns, power.total_ns), COPY_POWER_NS);
}

#[test]
fn counter_workload_top_one_streams_as_loaded() {
    let s = streamed_equals_loaded(&[fixture("counter_workload.cutr")], Some(1));
    assert_eq!(s.counters.len(), ROWS_WORKLOAD_TOP1);
}

#[test]
fn two_gpus_stream_as_loaded() {
    let s = streamed_equals_loaded(&[fixture("counter_two_gpus.cutr")], None);
    assert_eq!(s.counters.len(), ROWS_TWO_GPUS);
}

#[test]
fn a_100khz_series_streams_as_loaded() {
    let s = streamed_equals_loaded(&[fixture("counter_100khz.cutr")], None);
    assert_eq!(s.counters.len(), ROWS_100KHZ);
}

/// 2 kernels x 21 series and the memset x 11 NVML series (PM sampling had stopped by then).
const ROWS_WORKLOAD: usize = 53;
/// The copy kernel's whole time, every nanosecond of it under a power reading's window.
const COPY_POWER_NS: (u64, u64) = (896_777_328, 896_777_328);
/// The kernel with the most time and the memset.
const ROWS_WORKLOAD_TOP1: usize = 32;
const ROWS_TWO_GPUS: usize = 152;
const ROWS_100KHZ: usize = 35;

/// A generated loop (20,000 records, 90 ms on an sm_90 device 0) with `series` forged over it on device 0,
/// `samples` readings each, reading `value(series, i)`: (source, metric, unit) as the recorder names them.
fn forged(dir: &Path, series: &[(&str, &str, &str)], samples: usize, value: fn(usize, usize) -> f64) -> PathBuf {
    use cutr_synth::forge::counters::{metric_flood, write_with_counters};
    let path = dir.join("forged.cutr");
    let opts = cutr_synth::SynthOptions { records: 20_000, buffer_bytes: 16 << 10, ..Default::default() };
    write_with_counters(&path, opts, |truth| {
        series
            .iter()
            .enumerate()
            .map(|(j, &(source, name, unit))| {
                let one = move |_: usize, i: usize| value(j, i);
                let mut c: CounterSamples = metric_flood((truth.t_min, truth.t_max), 1, samples, 0, one);
                c.source = source.into();
                c.metrics = vec![CounterMetric { name: name.into(), unit: unit.into(), description: String::new() }];
                c
            })
            .collect()
    })
    .unwrap();
    path
}

/// Held (PM sampling, the SM clock), spread over the last second (power on sm_90) and over the time since the
/// previous reading (PCIe).
#[test]
fn forged_held_and_windowed_series_stream_as_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let series = [
        ("pm_sampling", "dram__bytes_read.sum.per_second", "byte/second"),
        ("nvml", "power", "W"),
        ("nvml", "PCIe TX", "B/s"),
        ("nvml", "SM clock", "MHz"),
    ];
    let p = forged(dir.path(), &series, 500, |j, i| ((i * 7 + j * 13) % 101) as f64);
    let s = streamed_equals_loaded(std::slice::from_ref(&p), None);
    assert_eq!(s.counters.len(), ROWS_FORGED);
    // The GEMM's 26.06 ms all lie under 1 s windows of readings 181 us apart: it fills 1.3% of them.
    let power = row(&s, "kernel", "sm90_xmma_gemm", "power (W)");
    assert_eq!((power.covered_ns, power.total_ns), (26_060_166, 26_060_166));
    assert!(close(power.own_share, 0.0130747522), "{power:?}");
    let s = streamed_equals_loaded(&[p], Some(1));
    assert_eq!(s.counters.len(), ROWS_FORGED_TOP1);
}

const ROWS_FORGED: usize = 788;
/// The kernel, the copy and the range with the most time, 4 series each.
const ROWS_FORGED_TOP1: usize = 12;

/// 150 series over every kernel, copy and range: more rows than a section holds, the groups past it counted.
#[test]
fn a_section_cut_at_its_rows_streams_as_loaded() {
    use cutr_synth::forge::counters::{metric_flood, write_with_counters};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.cutr");
    let opts = cutr_synth::SynthOptions { records: 20_000, buffer_bytes: 16 << 10, ..Default::default() };
    write_with_counters(&path, opts, |truth| {
        vec![metric_flood((truth.t_min, truth.t_max), 150, 50, 0, |j, i| (j * 3 + i) as f64)]
    })
    .unwrap();
    let s = streamed_equals_loaded(&[path], None);
    assert_eq!((s.counters.len(), s.counter_groups_not_shown), (stats::MAX_COUNTER_ROWS, 131));
}

/// A `--start/--end` window: the stream reads the counter samples that overlap the window, as a load with it does,
/// and integrates the window's executions against them: the section equals the windowed load's.
#[test]
fn a_window_streams_its_counters_as_it_loads() {
    let paths = [fixture("counter_workload.cutr")];
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let t = load(&paths, &LoadOptions::default()).unwrap();
    let opts = options(None);
    let begin = t.span().0;
    // (start, end, rows, the first row's covered and total ns): the samples overlapping the window, as a load keeps.
    let windows = [
        (Some(begin + 1_000_000_000), None, 42, (784_674_423, 900_268_026)),
        (Some(begin + 500_000_000), Some(begin + 1_500_000_000), 19, (174_812_862, 181_525_687)),
    ];
    for (start, end, rows, first) in windows {
        let filter = cutr_model::Filter { start, end, kinds: Vec::new() };
        let whole = stats::compute(&load(&paths, &LoadOptions { filter: filter.clone() }).unwrap(), &opts);
        for window_bytes in [1, StreamOptions::default().window_bytes] {
            let stream_opts = StreamOptions { window_bytes, ..Default::default() };
            let (s, _) = stats::compute_streaming_in(&paths, &readers, &opts, &filter, 64, &stream_opts).unwrap();
            same_section(&whole, &s);
            assert_eq!(s.sections, [Section::Kernels, Section::Counters]);
        }
        assert_eq!((whole.counters.len(), (whole.counters[0].covered_ns, whole.counters[0].total_ns)), (rows, first));
    }
}

/// 3,000 metrics over every kernel, copy and range of a generated loop (~200 names): 591,000 averages, more than
/// a stream keeps (524,288), where a load ranks the names first and computes only the 10,000 rows it shows. The
/// streamed section is named not computed, with a warning, and `diff --stream` says it did not compare them.
#[test]
fn a_flood_of_metrics_is_not_streamed_and_says_so() {
    use cutr_synth::forge::counters::{metric_flood, write_with_counters};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flood.cutr");
    let opts = cutr_synth::SynthOptions { records: 20_000, buffer_bytes: 256 << 10, ..Default::default() };
    write_with_counters(&path, opts, |truth| {
        vec![metric_flood((truth.t_min, truth.t_max), 3_000, 4, 0, |_, i| i as f64)]
    })
    .unwrap();
    let paths = [path];
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let (s, _) = stats::compute_streaming(&paths, &readers, &options(None), 64, &StreamOptions::default()).unwrap();
    assert_eq!((s.counters.len(), s.sections.clone()), (0, vec![Section::Kernels]));
    assert_eq!(s.stream.unwrap().not_computed, ["counters"]);
    let warning = s.warnings.iter().find(|w| w.starts_with("counters: ")).unwrap();
    assert!(
        warning.starts_with("counters: 3000 series over ") && warning.contains("(524288): not computed"),
        "{warning}"
    );
    let side = || cutr_analyses::diff::StreamedSide { runs: vec![(&paths[..], &readers[..])] };
    let opts = cutr_analyses::diff::DiffOptions::default();
    let (d, _) = cutr_analyses::diff::diff_streaming(side(), side(), &opts, &StreamOptions::default()).unwrap();
    let not_compared = d.stream.unwrap().not_compared;
    assert_eq!(not_compared, ["counter averages per kernel (more than 524288 name x series sums)"]);
}

/// Two chunks of one series, the second's samples inside the first's span (a damaged file: a recorder writes a
/// series' chunks one after the other). A load sorts them together; the stream has placed the first chunk's
/// samples by the time the second comes, so it leaves the second's out and says how many: never silently (299 of
/// its 300: its last sample is after the first chunk's last).
#[test]
fn a_chunk_overlapping_an_earlier_one_of_its_series_is_left_out_and_counted() {
    use cutr_synth::forge::counters::{metric_flood, write_with_counters};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overlap.cutr");
    let opts = cutr_synth::SynthOptions { records: 20_000, buffer_bytes: 16 << 10, ..Default::default() };
    write_with_counters(&path, opts, |truth| {
        let (a, b) = (truth.t_min, truth.t_max);
        let mid = a + (b - a) / 2;
        vec![
            metric_flood((a, b), 1, 400, 0, |_, i| (i % 7) as f64),
            metric_flood((mid + 1, b - 1), 1, 300, 0, |_, i| (i % 5) as f64),
        ]
    })
    .unwrap();
    let paths = [path];
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let stream_opts = StreamOptions { window_bytes: 1, ..Default::default() };
    let (s, _) = stats::compute_streaming(&paths, &readers, &options(None), 64, &stream_opts).unwrap();
    let warning = s.warnings.iter().find(|w| w.starts_with("counters: ")).unwrap();
    assert_eq!(
        warning,
        "counters: 299 counter samples came after later ones of their series (left out) (a damaged file's order; \
         --no-stream places them all)"
    );
    assert_eq!(s.counters.len(), OVERLAP_ROWS, "the first chunk's averages are still there");
}

const OVERLAP_ROWS: usize = 197;
