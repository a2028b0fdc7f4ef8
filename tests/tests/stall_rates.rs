//! PC-sample stall-rate tracks drawn where the samples were taken (issue 31): on the H100 fixture
//! `source_workload_pcs` (3 kernels, 3 executions each, on one stream), read back by Perfetto's trace processor.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cutr_model::{CounterSample, Filter, LoadOptions, Trace, load};
use cutr_tests::trace_processor;
use cutr_viewer_export::{ExportOptions, export};

/// Samples per stall reason over the whole recording (`cupti-convert source`'s per-kernel stalls summed).
const TOTALS: [(&str, u64); 11] = [
    ("branch_resolving", 11_814),
    ("dispatch_stall", 65),
    ("drain", 36),
    ("imc_miss", 90),
    ("long_scoreboard", 450_296),
    ("math_pipe_throttle", 42),
    ("no_instructions", 11_141),
    ("not_selected", 122_607),
    ("selected", 75_647),
    ("short_scoreboard", 75),
    ("wait", 190_042),
];

fn fixture() -> PathBuf {
    cutr_tests::repo().join("fixtures/source_workload_pcs.cutr")
}

/// `source`'s samples per (stall reason, demangled kernel name).
fn source_stalls() -> BTreeMap<(String, String), u64> {
    let reader = cutr_format::Reader::open(&fixture()).unwrap();
    let report = cutr_analyses::source::report(&[&reader], &Default::default());
    let mut out = BTreeMap::new();
    for k in &report.kernels {
        for (reason, n) in &k.stalls {
            *out.entry((reason.clone(), k.name.clone())).or_default() += n;
        }
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

/// Every stall-rate track (`stall REASON`, the model's `PC samples/ms: REASON`) of the Perfetto output is non-zero
/// only inside an execution of a sampled kernel (on this one-stream fixture, each interval of the step function lies
/// inside one), and its integral over each
/// kernel's executions is `source`'s count of that kernel's samples of the reason: the totals above. Before issue
/// 31 these tracks were 0 while the kernels ran and a plateau after them, where CUPTI handed the samples over.
#[test]
fn stall_rate_tracks_are_non_zero_only_while_sampled_kernels_run_and_sum_to_source() {
    let t = load(&[fixture()], &LoadOptions::default()).unwrap();
    assert_eq!(t.stats.pc_samples_unplaced, 0);
    let dir = tempfile::tempdir().unwrap();
    let pf = dir.path().join("pcs.pftrace");
    export(&t, &pf, &ExportOptions::default()).unwrap();
    let intervals = "with c as (select t.name as track, c.ts, c.value, \
                     lead(c.ts) over (partition by c.track_id order by c.ts) as next from counter c \
                     join counter_track t on c.track_id = t.id where t.name like 'stall %'), \
                     k as (select name, ts, ts + dur as end_ts from slice \
                     where name like 'chase(%' or name like 'fma_chain(%' or name = 'jit_scale')";
    let r = trace_processor(
        &pf,
        &[
            // Per track: points, integral (samples), the last value.
            &format!(
                "{intervals} select track, count(*), sum(value * coalesce(next - ts, 0)) / 1e6, \
                 (select value from c c2 where c2.track = c.track order by ts desc limit 1) from c \
                 group by track order by track"
            ),
            // Non-zero intervals inside no sampled kernel's execution (the last point has no interval).
            &format!(
                "{intervals} select count(*) from c where value != 0 and not exists \
                 (select 1 from k where k.ts <= c.ts and c.next <= k.end_ts)"
            ),
            // Per (track, kernel): the non-zero intervals inside its executions and their integral.
            &format!(
                "{intervals} select c.track, k.name, count(*), sum(c.value * (c.next - c.ts)) / 1e6 from c \
                 join k on k.ts <= c.ts and c.next <= k.end_ts where c.value != 0 group by 1, 2 order by 1, 2"
            ),
        ],
    );
    let tracks: Vec<(String, u64, f64, f64)> = r[0]
        .iter()
        .map(|row| {
            let name = row[0].as_str().unwrap().trim_start_matches("stall ").to_string();
            (name, row[1].as_u64().unwrap(), row[2].as_f64().unwrap(), row[3].as_f64().unwrap())
        })
        .collect();
    assert_eq!(tracks.len(), TOTALS.len(), "{tracks:?}");
    for ((name, _, integral, last), (want_name, want)) in tracks.iter().zip(TOTALS) {
        assert_eq!(name, want_name);
        assert!(close(*integral, want as f64), "{name}: {integral} samples, want {want}");
        assert_eq!(*last, 0.0, "{name} ends at 0");
    }
    // A point at each start and end of the executions of the kernels with samples of the reason: 3 kernels x 3
    // runs x 2 = 18, 12 for the reasons only two kernels stall on, 6 for math_pipe_throttle (fma_chain only).
    let points: Vec<(&str, u64)> = tracks.iter().map(|t| (t.0.as_str(), t.1)).collect();
    let two = ["dispatch_stall", "long_scoreboard", "not_selected"];
    let want_points: Vec<(&str, u64)> = TOTALS
        .iter()
        .map(|(n, _)| {
            (
                *n,
                if *n == "math_pipe_throttle" {
                    6
                } else if two.contains(n) {
                    12
                } else {
                    18
                },
            )
        })
        .collect();
    assert_eq!(points, want_points);
    assert_eq!(r[1], [[serde_json::json!(0)]], "no rate outside the sampled kernels");

    let source = source_stalls();
    let mut placed: BTreeMap<(String, String), u64> = BTreeMap::new();
    for row in &r[2] {
        let reason = row[0].as_str().unwrap().trim_start_matches("stall ").to_string();
        let kernel = row[1].as_str().unwrap().to_string();
        assert_eq!(row[2], 3, "{reason} in each of {kernel}'s 3 runs");
        let integral = row[3].as_f64().unwrap();
        let want = source[&(reason.clone(), kernel.clone())];
        assert!(close(integral, want as f64), "{reason} in {kernel}: {integral}, source says {want}");
        placed.insert((reason, kernel), want);
    }
    assert_eq!(placed, source, "every (reason, kernel) of source drawn over that kernel");
    let mut per_reason: BTreeMap<String, u64> = BTreeMap::new();
    for ((reason, _), n) in &source {
        *per_reason.entry(reason.clone()).or_default() += n;
    }
    let totals: BTreeMap<String, u64> = TOTALS.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    assert_eq!(per_reason, totals);
}

/// One series' value at `ts` (its last point at or before it; 0 before the first).
fn value_at(points: &[&CounterSample], ts: u64) -> f64 {
    points.iter().take_while(|c| c.ts <= ts).last().map_or(0.0, |c| c.value)
}

fn series<'t>(t: &'t Trace, name: &str) -> Vec<&'t CounterSample> {
    t.counters.iter().filter(|c| t.names.get(c.series) == name).collect()
}

/// With `--start/--end`, the tracks are drawn only inside the window, at the rates of the whole recording: the
/// window from 0.1 ms into the second `chase` to the end of the second `fma_chain` reads, at each of its points,
/// what the whole trace reads there.
#[test]
fn a_window_draws_the_same_rates_inside_it_only() {
    let whole = load(&[fixture()], &LoadOptions::default()).unwrap();
    let runs: Vec<&cutr_model::Kernel> = whole.kernels.iter().filter(|k| whole.kernel_name(k) != "jit_scale").collect();
    let (start, end) = (runs[2].start + 100_000, runs[3].end);
    assert!(whole.kernel_name(runs[2]).starts_with("chase(") && whole.kernel_name(runs[3]).starts_with("fma_chain("));
    let filter = Filter { start: Some(start), end: Some(end), kinds: Vec::new() };
    let part = load(&[fixture()], &LoadOptions { filter }).unwrap();
    assert_eq!(part.stats.pc_samples_unplaced, 0, "the functions' other runs are outside the window, not lost");
    let ls = series(&part, "PC samples/ms: long_scoreboard");
    let got: Vec<(u64, f64)> = ls.iter().map(|c| (c.ts, c.value)).collect();
    let chase_rate = 450_228.0 / (3_612_470.0 / 1e6);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0, start);
    assert!(close(got[0].1, chase_rate), "{} vs {chase_rate}", got[0].1);
    assert_eq!(got[1], (runs[2].end, 0.0));
    let mut checked = 0;
    for c in part.counters.iter().filter(|c| part.names.get(c.series).starts_with("PC samples/ms: ")) {
        assert!((start..=end).contains(&c.ts));
        let name = part.names.get(c.series);
        assert_eq!(c.value, value_at(&series(&whole, name), c.ts), "{name} at {}", c.ts);
        checked += 1;
    }
    // Every series chase or fma_chain stalls on: 9 at the start, 0 at chase's end; fma_chain's 10 then 0.
    assert_eq!(checked, 9 + 9 + 10 + 10);
}

/// With the kernels filtered out by kind, no sample can be placed: none is drawn, and every one is counted.
#[test]
fn samples_without_their_kernels_are_counted_not_drawn() {
    let filter = Filter { kinds: vec![cutr_schema::kinds::RUNTIME], ..Default::default() };
    let t = load(&[fixture()], &LoadOptions { filter }).unwrap();
    assert!(t.kernels.is_empty());
    assert_eq!(t.counters.len(), 0);
    assert_eq!((t.stats.pc_samples_unplaced, t.processes[0].stats.pc_samples_unplaced), (861_855, 861_855));
}

/// Each stall reason's samples drawn: the integral of its series over time (samples per ms times ms).
fn integrals(t: &Trace) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for w in t.counters.windows(2).filter(|w| w[0].series == w[1].series && w[0].proc == w[1].proc) {
        let name = t.names.get(w[0].series).trim_start_matches("PC samples/ms: ").to_string();
        *out.entry(name).or_default() += w[0].value * (w[1].ts - w[0].ts) as f64 / 1e6;
    }
    out
}

/// The fixture as the two parts of one split recording: the second part's PC samples kept or emptied.
fn split_parts(dir: &std::path::Path, second_sampled: bool) -> Vec<PathBuf> {
    let bytes = std::fs::read(fixture()).unwrap();
    let second = if second_sampled {
        bytes.clone()
    } else {
        cutr_synth::forge::pc_samples::edit_collections(&bytes, |c| c.clear())
    };
    cutr_synth::forge::write_parts(dir, &[bytes, second])
}

/// The parts of a split recording are one process: a function both parts sampled is one function, its samples
/// summed over them and spread over its runs in both. Every sample is drawn, twice the fixture's per reason, none
/// unplaced (before, the second part's entry replaced the first's, whose 861,855 samples went unplaced).
#[test]
fn a_split_recordings_parts_draw_every_sample_of_both() {
    let dir = tempfile::tempdir().unwrap();
    let t = load(&split_parts(dir.path(), true), &LoadOptions::default()).unwrap();
    assert_eq!((t.processes.len(), t.stats.pc_samples_unplaced), (1, 0));
    for (reason, drawn) in integrals(&t) {
        let want = 2 * TOTALS.iter().find(|(n, _)| *n == reason).unwrap().1;
        assert!(close(drawn, want as f64), "{reason}: {drawn} drawn, {want} sampled");
    }
}

/// A function's rate is over its runs in every part, sampled there or not: with the second part's samples emptied,
/// each reason's integral is the fixture's, and a `--start/--end` window reads at each point what the whole split
/// recording reads there (the second part's runs timed outside the window too).
#[test]
fn a_split_recordings_rates_count_the_runs_of_unsampled_parts() {
    let dir = tempfile::tempdir().unwrap();
    let parts = split_parts(dir.path(), false);
    let whole = load(&parts, &LoadOptions::default()).unwrap();
    assert_eq!(whole.stats.pc_samples_unplaced, 0);
    let drawn = integrals(&whole);
    assert_eq!(drawn.len(), TOTALS.len());
    for (reason, want) in TOTALS {
        assert!(close(drawn[reason], want as f64), "{reason}: {} drawn, {want} sampled", drawn[reason]);
    }
    let runs: Vec<&cutr_model::Kernel> = whole.kernels.iter().filter(|k| whole.kernel_name(k) != "jit_scale").collect();
    let (start, end) = (runs[2].start + 100_000, runs[3].end);
    let filter = Filter { start: Some(start), end: Some(end), kinds: Vec::new() };
    let part = load(&parts, &LoadOptions { filter }).unwrap();
    let mut checked = 0;
    for c in part.counters.iter().filter(|c| part.names.get(c.series).starts_with("PC samples/ms: ")) {
        let name = part.names.get(c.series);
        assert_eq!(c.value, value_at(&series(&whole, name), c.ts), "{name} at {}", c.ts);
        checked += 1;
    }
    assert_eq!(checked, 20);
}
