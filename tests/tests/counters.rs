//! Counter samples (`counters` chunks, `cupti-record --counters`) end to end without a GPU: a synthetic recording
//! given one series built from its own kernels, through the model, `stats`, both viewers (Perfetto's trace
//! processor reading our protobuf) and `diff`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cutr_format::{CounterMetric, CounterSamples, Writer, WriterOptions};
use cutr_model::{LoadOptions, load};
use cutr_synth::{SynthOptions, write_file};
use cutr_tests::trace_processor;
use cutr_viewer_export::{ExportOptions, Format, export};

use cutr_tests::IMPORT_PROBLEMS as STATS;

/// A synthetic recording whose `SM clock (MHz)` series (an instantaneous NVML reading, held until the next: NVML's
/// averages are placed over their windows instead) is `hi` from the start of each instance of the most launched
/// kernel K to its end and `lo` from there to K's next start. Returns the file, K, a kernel J that never
/// overlaps K (and runs between K's first and last instance), K's instances, and the number of samples.
struct Marked {
    path: PathBuf,
    k: String,
    j: String,
    k_runs: Vec<(u64, u64)>,
    samples: usize,
}

fn marked(dir: &Path, name: &str, hi: f64, lo: f64) -> Marked {
    let opts = SynthOptions { records: 20_000, seed: 3, buffer_bytes: 256 << 10, ..Default::default() };
    let plain = dir.join(format!("{name}.plain.cutr"));
    write_file(&plain, opts.clone()).unwrap();
    let t = load(std::slice::from_ref(&plain), &LoadOptions::default()).unwrap();
    let mut by_name: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for k in &t.kernels {
        by_name.entry(t.kernel_name(k)).or_default().push((k.start, k.end));
    }
    let (k_name, k_runs) = by_name.iter().max_by_key(|(n, v)| (v.len(), std::cmp::Reverse(**n))).unwrap();
    let mut k_runs = k_runs.clone();
    k_runs.sort_unstable();
    assert!(k_runs.windows(2).all(|w| w[0].1 < w[1].0), "K's instances never overlap each other");
    let (first, last) = (k_runs[0].0, k_runs.last().unwrap().1);
    let overlaps_k = |&(a, b): &(u64, u64)| k_runs.iter().any(|&(s, e)| a < e && s < b);
    let j_name = by_name
        .iter()
        .filter(|(n, v)| *n != k_name && v.iter().all(|r| !overlaps_k(r) && r.0 > first && r.1 < last))
        .map(|(n, _)| *n)
        .next()
        .expect("a kernel that never overlaps K");
    // The recorder's clock is the file's: samples go in CUPTI time (the model's time base is the identity here).
    assert_eq!(t.processes[0].time.to_trace(first), first);
    let samples = CounterSamples {
        source: "nvml".into(),
        device: 0,
        metrics: vec![CounterMetric { name: "SM clock".into(), unit: "MHz".into(), description: String::new() }],
        t_start: k_runs.iter().flat_map(|r| [r.0, r.1]).collect(),
        t_end: k_runs.iter().flat_map(|r| [r.0, r.1]).collect(),
        values: k_runs.iter().flat_map(|_| [hi, lo]).collect(),
        lost_samples: 0,
    };
    let path = dir.join(format!("{name}.cutr"));
    let w = Writer::create(&path, WriterOptions::default()).unwrap();
    cutr_synth::write_to_with(w, opts, |w, _| w.write_counters(&samples).map(|_| ())).unwrap();
    Marked { path, k: k_name.to_string(), j: j_name.to_string(), k_runs, samples: samples.len() }
}

/// Counter samples (`counters` chunks, `cupti-record --counters`) through the model, `stats` and both viewers, on
/// a synthetic recording given one series built from its own kernels: 80 from the start of each instance of the
/// most launched kernel K to its end, 10 from there to K's next start. `stats` must average exactly 80 over K and
/// exactly 10 over a kernel that never overlaps K; Perfetto's trace processor and the Chrome JSON must hold every
/// sample of the series, on one counter track.
#[test]
fn counter_samples_reach_stats_and_both_viewers_exactly() {
    use cutr_analyses::stats::{Section, StatsOptions, compute};
    let dir = tempfile::tempdir().unwrap();
    let m = marked(dir.path(), "c", 80.0, 10.0);
    let (k_name, j_name, k_runs, n) = (m.k.as_str(), m.j.as_str(), &m.k_runs, m.samples);
    let with = m.path.clone();
    let t = load(std::slice::from_ref(&with), &LoadOptions::default()).unwrap();
    assert_eq!(t.counters.len(), n);

    let s = compute(&t, &StatsOptions { sections: vec![Section::Counters], ..Default::default() });
    let row = |name: &str| s.counters.iter().find(|c| c.over == "kernel" && c.name == name).unwrap();
    let (k, j) = (row(k_name), row(j_name));
    assert_eq!((k.series.as_str(), k.average, k.covered_ns), ("SM clock (MHz)", 80.0, k.total_ns));
    assert_eq!(k.total_ns, k_runs.iter().map(|r| r.1 - r.0).sum::<u64>());
    assert_eq!((j.average, j.covered_ns), (10.0, j.total_ns));
    let text = cutr_analyses::stats::render_text(&s, Default::default());
    assert!(text.contains("Counters while each kernel, copy and NVTX range ran"), "{text}");

    let pf = dir.path().join("c.pftrace");
    export(&t, &pf, &ExportOptions::default()).unwrap();
    let r = trace_processor(
        &pf,
        &[
            STATS,
            "select t.name, count(*), min(c.value), max(c.value) from counter c join counter_track t \
             on c.track_id = t.id where t.name = 'SM Clock' group by t.name",
        ],
    );
    assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "clean import");
    assert_eq!(serde_json::json!(r[1]), serde_json::json!([["SM Clock", n, 10, 80]]));
    let json = dir.path().join("c.json");
    export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let c: Vec<&serde_json::Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "SM Clock (MHz)")
        .collect();
    assert_eq!(c.len(), n);
    // The one series is the model's name of it.
    assert_eq!(c.iter().filter(|e| e["args"]["SM clock (MHz)"] == 80.0).count(), n / 2);
}

/// `diff` reports a counter average that moved: the same program, its series 80 -> 88 over K (+10%) and 10 -> 10
/// elsewhere: K's row is listed with both averages, J's is not, and the verdict is not changed by it.
#[test]
fn diff_reports_counter_averages_that_moved() {
    use cutr_analyses::diff::{DiffOptions, diff};
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (marked(dir.path(), "a", 80.0, 10.0), marked(dir.path(), "b", 88.0, 10.0));
    let load1 = |p: &Path| load(&[p.to_path_buf()], &LoadOptions::default()).unwrap();
    let r = diff(&[load1(&a.path)], &[load1(&b.path)], &DiffOptions::default());
    let got: Vec<(String, String, f64, f64)> =
        r.counter_changes.iter().map(|c| (c.kernel.clone(), c.series.clone(), c.base, c.new)).collect();
    // K first (the largest change); then kernels that overlap some of K's instances on other streams, whose
    // averages mix K's value and the rest; J, which never overlaps K, stays at 10 and is not listed.
    assert_eq!(got[0], (a.k.clone(), "SM clock (MHz)".to_string(), 80.0, 88.0));
    assert!((r.counter_changes[0].delta_pct - 10.0).abs() < 1e-9);
    assert!(got[1..].iter().all(|g| g.2 > 10.0 && g.2 < 80.0 && g.3 > g.2), "{got:?}");
    assert!(!got.iter().any(|g| g.0 == a.j), "{got:?}");
    let same = diff(&[load1(&a.path)], &[load1(&a.path)], &DiffOptions::default());
    assert_eq!((same.counter_changes.len(), same.verdict), (0, r.verdict));
    let text = cutr_analyses::diff::render_text(&r, false);
    assert!(text.contains("counters averaged over each kernel's executions (reported, not judged):"), "{text}");
}

/// The phases of `fixtures/counter_workload.cutr` (an H100 running `workloads/cuda/counter_workload.cu --idle-ms
/// 1000 --phases 6 --phase-ms 300` under `cupti-record --counters`, PM sampling every 100 us): each run of the same
/// kernel launched in a row, from its first start to its last end, with its kernel; the warm-up's single
/// launches are not phases.
fn fixture_phases(t: &cutr_model::Trace) -> Vec<(String, u64, u64)> {
    let mut kernels: Vec<&cutr_model::Kernel> = t.kernels.iter().collect();
    kernels.sort_by_key(|k| k.start);
    let mut runs: Vec<(String, u64, u64, usize)> = Vec::new();
    for k in kernels {
        let name = t.kernel_name(k);
        match runs.last_mut() {
            Some(r) if r.0 == name => (r.2, r.3) = (k.end, r.3 + 1),
            _ => runs.push((name.to_string(), k.start, k.end, 1)),
        }
    }
    runs.into_iter().filter(|r| r.3 > 1).map(|r| (r.0, r.1, r.2)).collect()
}

const DRAM_READ: &str = "PM: dram__bytes_read.sum.per_second (byte/second)";
const SM_ISSUE: &str = "PM: sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed (percent)";
/// The Perfetto tracks of these series and of NVML's power (`counter_tracks.rs` checks every name).
const DRAM_READ_TRACK: &str = "DRAM Read Bandwidth";
const SM_ISSUE_TRACK: &str = "SM Issue";
const POWER_TRACK: &str = "GPU Power";

/// Memory-bound and compute-bound phases, told apart by the hardware counters recorded beside the kernels:
/// DRAM reads run at 1.40e12 B/s in every copy phase and under 2.4e8 B/s in every FMA phase (threshold 1e11,
/// 6x below the one and 400x above the other); the SMs issue 94.7-94.8% of peak in FMA phases and 3.4% in copy
/// phases (threshold 50%). Each phase holds its length / 100 us samples, within one.
#[test]
fn the_counter_fixture_separates_memory_and_compute_phases() {
    let path = cutr_tests::repo().join("fixtures/counter_workload.cutr");
    let t = load(&[path], &LoadOptions::default()).unwrap();
    let phases = fixture_phases(&t);
    let kinds: Vec<&str> = phases.iter().map(|p| &p.0[..p.0.find('(').unwrap()]).collect();
    assert_eq!(kinds, ["stream_copy", "fma_burn", "stream_copy", "fma_burn", "stream_copy", "fma_burn"]);
    let series = |name: &str| -> Vec<(u64, f64)> {
        t.counters.iter().filter(|c| t.names.get(c.series) == name).map(|c| (c.ts, c.value)).collect()
    };
    let (dram, sm) = (series(DRAM_READ), series(SM_ISSUE));
    assert_eq!((dram.len(), sm.len()), (25_799, 25_799), "PM samples in the file");
    for (kernel, start, end) in &phases {
        let inside = |s: &[(u64, f64)]| -> (usize, f64) {
            let v: Vec<f64> = s.iter().filter(|p| p.0 >= *start && p.0 <= *end).map(|p| p.1).collect();
            (v.len(), v.iter().sum::<f64>() / v.len() as f64)
        };
        let ((n, dram_avg), (_, sm_avg)) = (inside(&dram), inside(&sm));
        let expected = (end - start) as f64 / 100_000.0;
        assert!((n as f64 - expected).abs() <= 1.0, "{kernel}: {n} samples over {expected:.2} intervals");
        if kernel.starts_with("stream_copy") {
            assert!(dram_avg > 1e11 && sm_avg < 50.0, "copy phase: DRAM {dram_avg:e} B/s, SM issue {sm_avg}%");
        } else {
            assert!(dram_avg < 1e11 && sm_avg > 50.0, "FMA phase: DRAM {dram_avg:e} B/s, SM issue {sm_avg}%");
        }
    }
    // `stats`' per-kernel averages split the two kernels the same way.
    use cutr_analyses::stats::{Section, StatsOptions, compute};
    let s = compute(&t, &StatsOptions { sections: vec![Section::Counters], ..Default::default() });
    let avg = |kernel: &str, series: &str| {
        let r = s.counters.iter().find(|c| c.over == "kernel" && c.name.starts_with(kernel) && c.series == series);
        r.unwrap_or_else(|| panic!("{kernel} / {series}")).average
    };
    assert!(avg("stream_copy", DRAM_READ) > 1e12 && avg("fma_burn", DRAM_READ) < 1e10);
    assert!(avg("stream_copy", SM_ISSUE) < 10.0 && avg("fma_burn", SM_ISSUE) > 90.0);
    assert_eq!(t.loss().counter_samples_lost, 0, "nothing lost at 10 kHz");
}

/// Perfetto's trace processor reads the fixture's counter tracks with exactly the file's samples: 25,799 per PM
/// series, and NVML's power readings.
#[test]
fn trace_processor_shows_the_fixtures_counter_tracks() {
    let dir = tempfile::tempdir().unwrap();
    let path = cutr_tests::repo().join("fixtures/counter_workload.cutr");
    let t = load(&[path], &LoadOptions::default()).unwrap();
    let power = t.counters.iter().filter(|c| t.names.get(c.series) == "power (W)").count();
    let pf = dir.path().join("c.pftrace");
    export(&t, &pf, &ExportOptions::default()).unwrap();
    let q = |name: &str| {
        format!("select count(*) from counter c join counter_track t on c.track_id = t.id where t.name = '{name}'")
    };
    let r = trace_processor(&pf, &[STATS, &q(DRAM_READ_TRACK), &q(SM_ISSUE_TRACK), &q(POWER_TRACK)]);
    assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "clean import");
    let counts: Vec<i64> = r[1..].iter().map(|rows| cutr_tests::int(rows)).collect();
    assert_eq!(counts, [25_799, 25_799, power as i64]);
    assert!(power > 250, "NVML at 100 Hz over 3.2 s: {power}");
}

/// PM sampling at 100 kHz (`fixtures/counter_100khz.cutr`: one DRAM metric, `--counter-interval 10us`, the
/// counter workload's 4 phases, on an H100 by the recorder that evaluates on its own thread): 161,714 samples,
/// none lost, every step between two samples 10 us (9,983-10,017 ns; 1,617,167,800 ns over 161,713 steps), so
/// the file holds every interval from the first sample to the last; the copy and FMA phases still split at 1e11 B/s; Perfetto's trace processor holds
/// every sample.
#[test]
fn the_100_khz_fixture_holds_every_interval() {
    let dir = tempfile::tempdir().unwrap();
    let path = cutr_tests::repo().join("fixtures/counter_100khz.cutr");
    let t = load(&[path], &LoadOptions::default()).unwrap();
    let ts: Vec<(u64, f64)> =
        t.counters.iter().filter(|c| t.names.get(c.series) == DRAM_READ).map(|c| (c.ts, c.value)).collect();
    assert_eq!(ts.len(), 161_714);
    assert_eq!(t.loss().counter_samples_lost, 0);
    let steps: Vec<u64> = ts.windows(2).map(|w| w[1].0 - w[0].0).collect();
    let (min, max) = (*steps.iter().min().unwrap(), *steps.iter().max().unwrap());
    assert_eq!((min, max), (9_983, 10_017), "every step one 10 us interval");
    let span = ts.last().unwrap().0 - ts[0].0;
    assert_eq!(
        span / (ts.len() as u64 - 1),
        10_000,
        "one sample per interval over {span} ns (the hardware's 10.0003 us)"
    );
    let phases = fixture_phases(&t);
    assert_eq!(phases.len(), 4);
    for (kernel, start, end) in &phases {
        let v: Vec<f64> = ts.iter().filter(|p| p.0 >= *start && p.0 <= *end).map(|p| p.1).collect();
        let avg = v.iter().sum::<f64>() / v.len() as f64;
        assert!(((v.len() as f64) - (end - start) as f64 / 10_000.0).abs() <= 1.0, "{kernel}: {} samples", v.len());
        assert_eq!(kernel.starts_with("stream_copy"), avg > 1e11, "{kernel}: DRAM {avg:e} B/s");
    }
    let pf = dir.path().join("c.pftrace");
    export(&t, &pf, &ExportOptions::default()).unwrap();
    let q = format!(
        "select count(*) from counter c join counter_track t on c.track_id = t.id where t.name = '{DRAM_READ_TRACK}'"
    );
    let r = trace_processor(&pf, &[STATS, &q]);
    assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "clean import");
    assert_eq!(cutr_tests::int(&r[1]), 161_714);
}

const NVLRX: &str = "PM: nvlrx__bytes.sum.per_second (byte/second)";
const NVLRX_TRACK: &str = "NVLink RX Bandwidth";
const NVML_NVLINK_RX: &str = "NVLink RX (B/s)";

/// Two GPUs in one process (`fixtures/counter_two_gpus.cutr`: the counter workload on devices 0 and 1 of an
/// NVLink-connected H200 pair, then 300 ms of 1 GiB peer-to-peer copies both ways): each device has its own PM
/// sampling session, decoded by its own thread, with every 100 us interval from its first sample to its last
/// (device 1 starts later: it is set up after device 0); NVLink shows the peer copies in both PM sampling's raw
/// link bytes and NVML's data bytes, and nothing outside them; Perfetto holds each device's tracks.
#[test]
fn two_gpus_have_their_own_counter_tracks_and_nvlink_shows_the_peer_copies() {
    let dir = tempfile::tempdir().unwrap();
    let path = cutr_tests::repo().join("fixtures/counter_two_gpus.cutr");
    let t = load(&[path], &LoadOptions::default()).unwrap();
    assert_eq!(t.loss().counter_samples_lost, 0);
    let series = |name: &str, device: u32| -> Vec<(u64, f64)> {
        t.counters
            .iter()
            .filter(|c| c.device == device && t.names.get(c.series) == name)
            .map(|c| (c.ts, c.value))
            .collect()
    };
    let mut per_device = Vec::new();
    for device in [0, 1] {
        let pm = series(NVLRX, device);
        let steps: Vec<u64> = pm.windows(2).map(|w| w[1].0 - w[0].0).collect();
        per_device.push((pm.len(), *steps.iter().min().unwrap(), *steps.iter().max().unwrap()));
    }
    assert_eq!(per_device, [(7_590, 99_967, 100_032), (1_695, 99_967, 100_032)]);
    // The peer phase: the span of the peer-to-peer copies (110 of 1 GiB, 55 each way).
    let copies: Vec<_> = t.memcpys.iter().filter(|m| m.bytes == 1 << 30).collect();
    assert_eq!(copies.len(), 110);
    let (start, end) = (copies.iter().map(|m| m.start).min().unwrap(), copies.iter().map(|m| m.end).max().unwrap());
    let payload_rate = 55.0 * (1u64 << 30) as f64 / ((end - start) as f64 / 1e9);
    let mean = |v: &[(u64, f64)], inside: bool| {
        let v: Vec<f64> = v.iter().filter(|p| (p.0 >= start && p.0 <= end) == inside).map(|p| p.1).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    // In GB/s, rounded to 0.1: inside the copies and outside them, per device; PM sampling counts the links' raw
    // bytes (~1.8x the payload), NVML the data bytes (the payload, within NVML's 10 ms windows at the edges).
    let gbps = |v: f64| (v / 1e8).round() / 10.0;
    let mut seen = Vec::new();
    for device in [0, 1] {
        let (pm, nvml) = (series(NVLRX, device), series(NVML_NVLINK_RX, device));
        assert_eq!(nvml.len(), 144, "NVML at 100 Hz on device {device}");
        seen.push([gbps(mean(&pm, true)), gbps(mean(&pm, false)), gbps(mean(&nvml, true)), gbps(mean(&nvml, false))]);
    }
    assert_eq!(gbps(payload_rate), 196.2);
    assert_eq!(seen, [[354.4, 0.0, 217.7, 0.9], [352.9, 0.0, 195.3, 0.3]]);
    let pf = dir.path().join("c.pftrace");
    export(&t, &pf, &ExportOptions::default()).unwrap();
    let q = format!(
        "select p.name, count(*) from counter c join process_counter_track t on c.track_id = t.id join process p \
         using(upid) where t.name = '{NVLRX_TRACK}' group by p.upid order by p.name"
    );
    let r = trace_processor(&pf, &[STATS, &q]);
    assert_eq!(r[0], Vec::<Vec<serde_json::Value>>::new(), "clean import");
    let gpu = |name: &str, n: i64| vec![serde_json::json!(name), n.into()];
    assert_eq!(r[1], [gpu("GPU 0: NVIDIA H200", 7_590), gpu("GPU 1: NVIDIA H200", 1_695)]);
}

const MEMORY_UTILIZATION: &str = "memory utilization (%)";
const GPU_UTILIZATION: &str = "GPU utilization (%)";
const POWER: &str = "power (W)";

/// When NVML's utilization readings on the H100 fixture see a phase edge: per copy phase, how long after it starts
/// memory utilization first reads over 50%, and how long after it ends it first reads under 50%, in whole ms.
fn utilization_edges(t: &cutr_model::Trace) -> (Vec<u64>, Vec<u64>) {
    let util: Vec<(u64, f64)> =
        t.counters.iter().filter(|c| t.names.get(c.series) == MEMORY_UTILIZATION).map(|c| (c.ts, c.value)).collect();
    let after = |edge: u64, high: bool| {
        let r = util.iter().find(|p| p.0 >= edge && (p.1 > 50.0) == high).expect("a reading after the edge");
        (r.0 - edge) / 1_000_000
    };
    let copies: Vec<(u64, u64)> =
        fixture_phases(t).into_iter().filter(|p| p.0.starts_with("stream_copy")).map(|p| (p.1, p.2)).collect();
    (copies.iter().map(|c| after(c.0, true)).collect(), copies.iter().map(|c| after(c.1, false)).collect())
}

/// NVML's trailing averages placed over the windows they average (`fixtures/counter_workload.cutr`, an H100:
/// alternating 300 ms phases of memory-bound copies and compute-bound FMA kernels after 1 s idle). The window of
/// utilization on sm_90 is measured here: each copy phase's start shows up in memory utilization 189-197 ms late,
/// its end 288-296 ms late, so a reading at t covers [t - 290 ms, t - 190 ms]. Placed there, the copy kernel gets
/// 99.9% memory utilization and the FMA kernel 34.5% (held from each reading, as before: 35.8% and 96.6%, the
/// reverse); power (a 1 s average on the H100) is 366.2 W over the copies, 390.6 W over the FMA kernels, both
/// marked as the level around them (they fill 26% and 24% of the seconds that cover them), and 188.6 W over the
/// idle second before the first phase, the lowest (its 1 s windows reach into the first copy phase). The
/// utilization windows are filled 67-69% by each kernel's executions.
#[test]
fn nvml_averages_are_placed_over_the_windows_they_average() {
    use cutr_analyses::stats::{Section, StatsOptions, compute, counter_average_over};
    let path = cutr_tests::repo().join("fixtures/counter_workload.cutr");
    let t = load(&[path], &LoadOptions::default()).unwrap();
    assert_eq!(utilization_edges(&t), (vec![197, 193, 189], vec![296, 290, 288]));

    let s = compute(&t, &StatsOptions { sections: vec![Section::Counters], ..Default::default() });
    let row = |kernel: &str, series: &str| {
        let r = s.counters.iter().find(|c| c.over == "kernel" && c.name.starts_with(kernel) && c.series == series);
        r.unwrap_or_else(|| panic!("{kernel} / {series}"))
    };
    let round = |v: f64| (v * 10.0).round() / 10.0;
    let figures = |series: &str| {
        let (copy, fma) = (row("stream_copy", series), row("fma_burn", series));
        [round(copy.average), round(fma.average), round(100.0 * copy.own_share), round(100.0 * fma.own_share)]
    };
    assert_eq!(figures(MEMORY_UTILIZATION), [99.9, 34.5, 69.0, 66.7]);
    assert_eq!(figures(GPU_UTILIZATION), [99.1, 99.6, 69.0, 66.7]);
    assert_eq!(figures(POWER), [366.2, 390.6, 26.4, 23.8]);
    assert_eq!(row("fma_burn", POWER).window.as_deref(), Some("average over the last 1000 ms"));
    assert_eq!(
        row("fma_burn", MEMORY_UTILIZATION).window.as_deref(),
        Some("average over 100 ms ending 190 ms before the reading")
    );
    assert_eq!(row("fma_burn", "SM clock (MHz)").window, None, "an instant reading");

    // The idle second between the warm-up kernels and the first phase.
    let phases = fixture_phases(&t);
    let warm_up_end = t.kernels.iter().map(|k| k.end).filter(|&e| e < phases[0].1).max().unwrap();
    let idle = vec![(warm_up_end, phases[0].1)];
    let at_idle = |series: &str| counter_average_over(&t, (t.kernels[0].proc, 0), series, idle.clone()).unwrap();
    assert_eq!((idle[0].1 - idle[0].0) / 1_000_000, 1000, "1 s idle");
    let power = at_idle(POWER);
    assert_eq!((round(power.average), round(100.0 * power.own_share)), (188.6, 50.6));
    assert!(power.average < row("stream_copy", POWER).average && power.average < row("fma_burn", POWER).average);
    // The warm-up's 1% and the readings whose windows end just inside the first phase (the window is a model:
    // edges show up within 7 ms of it).
    assert_eq!(round(at_idle(GPU_UTILIZATION).average), 4.7);
}

/// The text layout: one row per op (kernels, then copies and memsets) and a column per counter, short names in
/// scaled units, blocks of columns that fit 100 characters before the op's name; `*` marks NVML averages the op
/// fills under half of, and the legend names each averaged series' window.
#[test]
fn the_counter_report_is_one_row_per_op_in_scaled_units() {
    use cutr_analyses::stats::{Section, StatsOptions, compute, render_text};
    let path = cutr_tests::repo().join("fixtures/counter_workload.cutr");
    let t = load(&[path], &LoadOptions::default()).unwrap();
    let s = compute(&t, &StatsOptions { sections: vec![Section::Counters], ..Default::default() });
    let text = render_text(&s, Default::default());
    let lines: Vec<&str> = text.lines().collect();
    let at = |needle: &str| lines.iter().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle}"));
    let dram = at("DRAM Read");
    assert_eq!(
        lines[dram..dram + 6],
        [
            "  DRAM Read DRAM Write                                                        GPU",
            "  Bandwidth  Bandwidth PCIe Read PCIe Write PCIe RX PCIe TX GPU Power Temperature SM Clock",
            "     (TB/s)     (TB/s)    (MB/s)     (MB/s)  (MB/s)  (MB/s)       (W)        (°C)    (MHz)  Op",
            "       0.00       0.00      4.39     109.50    5.66  114.17    390.6*        47.2     1980  kernel fma_burn(float*, int) (GPU 0)",
            "       1.40       1.41     22.89     117.06   28.01  125.40    366.2*        45.6     1980  kernel stream_copy(float4 const*, float4*, unsigned long) (GPU 0)",
            "          -          -         -          - 351.29*  33.74*    134.4*        41.0     1980  copy Memset (Device) (GPU 0)",
        ]
    );
    // Three blocks of columns, each with a row per op, the numbers within 100 characters.
    let heads: Vec<usize> = lines.iter().filter(|l| l.ends_with("  Op")).map(|l| l.chars().count() - 4).collect();
    assert_eq!(heads.len(), 3);
    assert!(heads.iter().all(|&w| w <= 102), "{heads:?}");
    let memory =
        lines.iter().filter(|l| l.ends_with("kernel stream_copy(float4 const*, float4*, unsigned long) (GPU 0)"));
    assert_eq!(memory.count(), 3);
    let first = at("Counters while each kernel, copy and NVTX range ran");
    assert_eq!(
        lines[first + 2..first + 9],
        [
            "                                                                          Unused",
            "                    GPU      Memory                                       Warps,      Unused",
            "  GR Active Utilization Utilization SM Active                  Tensor Active SMs Warps, Idle",
            "        (%)         (%)         (%)       (%) SM Issue (%) Active (%)        (%)     SMs (%)  Op",
            "       99.7        99.6        34.5      99.5         95.0        5.3       42.2         0.5  kernel fma_burn(float*, int) (GPU 0)",
            "       99.5        99.1        99.9      90.3          3.4        0.0        1.8         9.7  kernel stream_copy(float4 const*, float4*, unsigned long) (GPU 0)",
            "          -        0.0*        0.0*         -            -          -          -           -  copy Memset (Device) (GPU 0)",
        ]
    );
    assert!(text.contains("  GPU Power: average over the last 1000 ms\n"), "{text}");
    assert!(text.contains("  Memory Utilization: average over 100 ms ending 190 ms before the reading\n"));
}
