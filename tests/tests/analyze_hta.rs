//! `cupti-convert analyze`'s time budget and idle causes against HolisticTraceAnalysis 0.5.0
//! (`tests/clients/hta_breakdown.py`: `get_temporal_breakdown`, `get_idle_time_breakdown`) on the Chrome JSON of
//! every fixture, per GPU, each figure within 0.1% of the GPU's span where the definitions agree:
//!
//! - HTA idle = `idle_ns`, HTA compute = `computation_ns`, HTA non-compute = `communication_exposed_ns +
//!   copies_exposed_ns`, HTA's span (first to last GPU row) = `span_ns`; on HTA's dataframe less its `cuda_sync`
//!   rows (`temporal_ops_only`), since HTA counts the synchronization records that carry a stream (`Stream Sync`,
//!   `Stream Wait Event`: how long a host thread waited) as GPU work. HTA as it is agrees too except on the GPUs
//!   `sync_rows_counted_by_hta` lists.
//! - Idle causes, on GPUs whose ops all ran on one stream (HTA's idle breakdown is per stream; ours is per GPU, by
//!   union: with one stream the gaps are the same): HTA classifies a gap host wait first (the next op's launching
//!   call started after the gap began), then kernel wait (shorter than `consecutive_kernel_delay`), else other;
//!   analyze short gap first, then launch-bound (the same test as HTA's host wait), then host sync wait, else other.
//!   So HTA host wait + kernel wait = launch-bound + short gaps, and HTA other = host sync wait + other, with the
//!   same threshold (HTA compares `consecutive_kernel_delay` with gaps in the trace's unit, µs: its default 30 is
//!   30 µs, not the 30 ns its docs say).
//!
//! The harness itself is proven against an independent interval union computed in Python over the same JSON by
//! analyze's definitions (`reference`), so a disagreement with analyze is analyze's, not the harness's. What cannot
//! be compared is listed here with its reason, never skipped silently. The analyze test runs the `cupti-convert`
//! beside this test's binary (`cargo test --workspace` builds it; alone: `cargo build -p cutr-convert` first).

use cutr_model::{LoadOptions, load};
use cutr_viewer_export::{ExportOptions, Format, export};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// HTA's default `consecutive_kernel_delay` (30, in the trace's µs), which analyze's default gap threshold matches.
const HTA_KERNEL_DELAY_NS: u64 = 30_000;

/// Fixtures without GPU work: HTA has nothing to break down and analyze lists no GPU for them.
const NO_GPU_WORK: &[&str] = &["allreduce_torchrun/ar-3326.cutr"];

/// Every fixture, grouped into jobs: the files of `allreduce/` and `allreduce_torchrun/` are one job's ranks
/// (analyze reads them together); every other file is a run of its own.
fn fixture_jobs() -> Vec<Vec<PathBuf>> {
    let root = cutr_tests::repo().join("fixtures");
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "cutr") {
                files.push(p);
            }
        }
    }
    files.sort();
    let mut jobs: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for f in files {
        let dir = f.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned();
        let key = if dir == "allreduce" || dir == "allreduce_torchrun" { dir } else { rel(&f) };
        jobs.entry(key).or_default().push(f);
    }
    jobs.into_values().collect()
}

/// A fixture's path under `fixtures/`, the name every message and table here uses.
fn rel(f: &Path) -> String {
    f.strip_prefix(cutr_tests::repo().join("fixtures")).unwrap().to_string_lossy().into_owned()
}

/// Each fixture's Chrome JSON (what `cupti-convert F.cutr --chrome` writes), by fixture name.
fn chrome_traces(dir: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for f in fixture_jobs().into_iter().flatten() {
        let name = rel(&f);
        let json = dir.join(format!("{}.json", name.replace('/', "__").trim_end_matches(".cutr")));
        let t = load(std::slice::from_ref(&f), &LoadOptions::default()).unwrap();
        export(&t, &json, &ExportOptions { format: Format::Chrome, ..Default::default() }).unwrap();
        out.insert(name, json);
    }
    out
}

/// HTA's figures (and the harness's reference) per (fixture, device), run once for every test of this file.
fn hta() -> &'static BTreeMap<(String, u64), Value> {
    static HTA: OnceLock<BTreeMap<(String, u64), Value>> = OnceLock::new();
    HTA.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let traces = chrome_traces(dir.path());
        let delay = format!("{}", HTA_KERNEL_DELAY_NS as f64 / 1000.0);
        let mut args: Vec<&std::ffi::OsStr> = vec!["--kernel-delay-us".as_ref(), delay.as_ref()];
        args.extend(traces.values().map(|p| p.as_os_str()));
        let h = cutr_tests::python_tool("hta_breakdown.py", &args, &[("HTA_DISABLE_NS_ROUNDING", "1")]);
        assert_eq!(h["consecutive_kernel_delay_us"], 30.0);
        let by_json: BTreeMap<&Path, &String> = traces.iter().map(|(n, p)| (p.as_path(), n)).collect();
        let mut out = BTreeMap::new();
        for t in h["traces"].as_array().unwrap() {
            let name = by_json[Path::new(t["file"].as_str().unwrap())];
            assert_eq!(t["error"], Value::Null, "HTA could not read {name}'s Chrome JSON");
            for g in t["gpus"].as_array().unwrap() {
                out.insert((name.clone(), g["device"].as_u64().unwrap()), g.clone());
            }
        }
        out
    })
}

/// One GPU's figures on our side (ns), from analyze's JSON or the harness's reference.
#[derive(Debug)]
struct Ours {
    span: f64,
    computation: f64,
    non_compute: f64,
    idle: f64,
    /// Launch-bound + short gaps: HTA's host wait + kernel wait.
    launched_late_or_short: f64,
    /// Host sync wait + other: HTA's other.
    waited: f64,
}

fn ns(v: &Value) -> f64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count of ns: {v}")) as f64
}

fn from_reference(r: &Value) -> Ours {
    let c = &r["idle_causes"];
    Ours {
        span: ns(&r["span"]),
        computation: ns(&r["computation"]),
        non_compute: ns(&r["communication_exposed"]) + ns(&r["copies_exposed"]),
        idle: ns(&r["idle"]),
        launched_late_or_short: ns(&c["launch_bound"]) + ns(&c["short_gaps"]),
        waited: ns(&c["waited"]),
    }
}

fn from_analyze(g: &Value) -> Ours {
    let (b, i) = (&g["budget"], &g["idle"]);
    Ours {
        span: ns(&b["span_ns"]),
        computation: ns(&b["computation_ns"]),
        non_compute: ns(&b["communication_exposed_ns"]) + ns(&b["copies_exposed_ns"]),
        idle: ns(&b["idle_ns"]),
        launched_late_or_short: ns(&i["launch_bound_ns"]) + ns(&i["short_gaps_ns"]),
        waited: ns(&i["host_sync_wait_ns"]) + ns(&i["other_ns"]),
    }
}

/// What was compared on one GPU.
#[derive(Debug)]
struct Compared {
    /// HTA as it is agreed too (its stream sync rows, if any, moved no figure by more than the allowance).
    as_is: bool,
    /// The idle causes were compared (the GPU's ops ran on one stream).
    idle_causes: bool,
}

/// How close HTA and ours must be (ns).
#[derive(Clone, Copy)]
enum Allowance {
    /// What the issue asks of analyze: 0.1% of the GPU's span.
    ShareOfSpan,
    /// The harness's reference, the same sums to the ns: HTA's float µs sums within 1 ns, its idle breakdown
    /// (rounded by HTA to 0.01 µs per figure, two figures added) within 10 ns.
    Exact,
}

impl Allowance {
    fn temporal(self, span: f64) -> f64 {
        match self {
            Allowance::ShareOfSpan => span * 0.001,
            Allowance::Exact => 1.0,
        }
    }
    fn idle_causes(self, span: f64) -> f64 {
        match self {
            Allowance::ShareOfSpan => span * 0.001,
            Allowance::Exact => 10.0,
        }
    }
}

/// The mismatches (each a line: what, HTA's and ours in ns, the allowance) of HTA's temporal breakdown `t`.
fn temporal_mismatches(label: &str, t: &Value, ours: &Ours, allowed: f64) -> Vec<String> {
    let hta = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{label}: HTA's {k}: {t}")) * 1000.0;
    let pairs = [
        ("span", hta("span"), ours.span),
        ("idle", hta("idle"), ours.idle),
        ("compute", hta("compute"), ours.computation),
        ("non-compute", hta("non_compute"), ours.non_compute),
    ];
    mismatches(label, &pairs, allowed)
}

fn mismatches(label: &str, pairs: &[(&str, f64, f64)], tolerance: f64) -> Vec<String> {
    pairs
        .iter()
        .filter(|(_, hta, ours)| (hta - ours).abs() > tolerance)
        .map(|(what, hta, ours)| {
            format!("{label}: {what}: HTA {hta:.0} ns, ours {ours:.0} ns (allowed {tolerance:.0})")
        })
        .collect()
}

/// Compares one GPU: the mismatches, and what was compared.
fn compare(label: &str, hta: &Value, ours: &Ours, allowance: Allowance) -> (Vec<String>, Compared) {
    let mut bad = temporal_mismatches(label, &hta["temporal_ops_only"], ours, allowance.temporal(ours.span));
    let share = Allowance::ShareOfSpan.temporal(ours.span);
    let as_is = temporal_mismatches(label, &hta["temporal"], ours, share).is_empty();
    let streams = hta["idle_breakdown"].as_object().unwrap();
    let idle_causes = streams.len() == 1;
    if let Some(s) = streams.values().next().filter(|_| idle_causes) {
        let us = |k: &str| s[k].as_f64().unwrap() * 1000.0;
        let pairs = [
            (
                "host wait + kernel wait vs launch-bound + short gaps",
                us("host_wait") + us("kernel_wait"),
                ours.launched_late_or_short,
            ),
            ("other vs host sync wait + other", us("other"), ours.waited),
        ];
        bad.extend(mismatches(label, &pairs, allowance.idle_causes(ours.span)));
    }
    (bad, Compared { as_is, idle_causes })
}

/// The 13 `diff` runs (`fixtures/diff/`).
fn diff_runs() -> impl Iterator<Item = String> {
    let runs = [("aa", 5), ("p10", 3), ("p3", 5)];
    runs.into_iter().flat_map(|(k, n)| (1..=n).map(move |i| format!("diff/{k}-{i}.cutr:0")))
}

/// GPUs where HTA's own figures, as it is, differ from analyze's by more than 0.1% of the span: HTA counts the
/// synchronization records that carry a stream as GPU work (`Stream Sync`: by its name OTHER, so non-compute;
/// `Stream Wait Event`: COMPUTATION), though they time a host thread's wait, not the GPU. On these fixtures'
/// many stream syncs and waits that moves up to 2.56 ms of um_workload's idle into non-compute.
fn sync_rows_counted_by_hta() -> Vec<String> {
    let mut v: Vec<String> = [
        "cuda_workload.cutr:0",
        "cuda_workload_events.cutr:0",
        "graph_workload.cutr:0",
        "regress/base_a.cutr:0",
        "regress/base_b.cutr:0",
        "regress/heavy_a.cutr:0",
        "regress/heavy_b.cutr:0",
        "um_workload.cutr:0",
    ]
    .map(String::from)
    .into();
    v.extend(diff_runs());
    v.sort();
    v
}

/// GPUs whose ops ran on several streams: HTA's idle breakdown is per stream (a gap on one stream while another
/// ran is idle to it but not to the GPU), so only the budget is compared there.
fn several_streams() -> Vec<String> {
    let mut v: Vec<String> = [
        "allreduce/allreduce-588.cutr:0",
        "allreduce/allreduce-589.cutr:1",
        "allreduce_torchrun/ar-3373.cutr:0",
        "allreduce_torchrun/ar-3374.cutr:1",
        "cuda_workload.cutr:0",
        "cuda_workload_events.cutr:0",
        "graph_compile.cutr:0",
        "graph_layers.cutr:0",
        "graph_workload.cutr:0",
        "launch_loop_100k.cutr:0",
        "regress/base_a.cutr:0",
        "regress/base_b.cutr:0",
        "regress/heavy_a.cutr:0",
        "regress/heavy_b.cutr:0",
        "um_workload.cutr:0",
    ]
    .map(String::from)
    .into();
    v.extend(diff_runs());
    v.sort();
    v
}

/// Checks every GPU of every fixture against `ours` (by fixture and device), and that what was not compared is
/// exactly what the lists above say.
fn check_all(ours: &BTreeMap<(String, u64), Ours>, allowance: Allowance) {
    let hta = hta();
    let mut bad = Vec::new();
    let (mut as_is_differs, mut several) = (Vec::new(), Vec::new());
    for ((name, device), h) in hta {
        let label = format!("{name}:{device}");
        let o = ours.get(&(name.clone(), *device)).unwrap_or_else(|| panic!("{label}: HTA sees it, we do not"));
        let (b, c) = compare(&label, h, o, allowance);
        bad.extend(b);
        if !c.as_is {
            as_is_differs.push(label.clone());
        }
        if !c.idle_causes {
            several.push(label);
        }
    }
    let extra: Vec<_> = ours.keys().filter(|k| !hta.contains_key(*k)).collect();
    assert!(extra.is_empty(), "GPUs we see and HTA does not: {extra:?}");
    assert!(bad.is_empty(), "{} disagreements with HTA:\n{}", bad.len(), bad.join("\n"));
    assert_eq!(as_is_differs, sync_rows_counted_by_hta(), "where HTA's stream sync rows change its figures");
    assert_eq!(several, several_streams(), "GPUs whose idle causes are not comparable");
    // 11 GPUs of the older fixtures, and the 10 single-stream GPUs of calls_workload_pcs.cutr and source_diff/.
    assert_eq!(hta.len() - several.len(), 21, "GPUs whose idle causes are compared");
    let files: std::collections::BTreeSet<&String> = hta.keys().map(|(n, _)| n).collect();
    let all: Vec<String> = fixture_jobs().into_iter().flatten().map(|f| rel(&f)).collect();
    let missing: Vec<&String> = all.iter().filter(|f| !files.contains(f)).collect();
    assert_eq!(missing, NO_GPU_WORK, "fixtures with no GPU compared");
}

/// The harness's proof: HTA against an interval union computed in Python over the same JSON by analyze's
/// definitions, independently of HTA and of analyze.
#[test]
fn hta_equals_an_independent_union_of_the_same_json() {
    let ours: BTreeMap<(String, u64), Ours> =
        hta().iter().map(|(k, g)| (k.clone(), from_reference(&g["reference"]))).collect();
    check_all(&ours, Allowance::Exact);
    // The PyTorch loop, to the ns: 5.334 s span, the GPU busy 0.70% of it, every gap launch-bound or short.
    let p = &ours[&("pytorch_loop.cutr".to_string(), 0)];
    let figures = [p.span, p.computation, p.non_compute, p.idle, p.launched_late_or_short, p.waited];
    assert_eq!(figures, [5_334_201_452.0, 36_884_764.0, 595_547.0, 5_296_721_141.0, 5_296_721_141.0, 0.0]);
    let h = &hta()[&("pytorch_loop.cutr".to_string(), 0)];
    assert_eq!(
        h["idle_breakdown"]["7"],
        serde_json::json!({"host_wait": 5291386.97, "kernel_wait": 5334.17, "other": 0.0})
    );
}

/// `cupti-convert analyze --json` (per job: a job's ranks together) against HTA.
#[test]
fn analyze_budget_and_idle_causes_equal_htas() {
    let exe = std::env::current_exe().unwrap();
    let convert = exe.parent().and_then(Path::parent).unwrap().join("cupti-convert");
    assert!(convert.exists(), "{} missing: cargo build -p cutr-convert", convert.display());
    let mut ours = BTreeMap::new();
    for job in fixture_jobs() {
        let out = std::process::Command::new(&convert).arg("analyze").arg("--json").args(&job).output().unwrap();
        assert!(out.status.success(), "analyze {job:?}: {}", String::from_utf8_lossy(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        for g in doc["gpus"].as_array().unwrap() {
            // The file as given on the command line (absolute here), or a path it ends with.
            let file = Path::new(g["file"].as_str().unwrap());
            let f = job.iter().find(|f| f.as_path() == file || f.ends_with(file));
            let name = rel(f.unwrap_or_else(|| panic!("analyze names {file:?}, not one of {job:?}")));
            assert_eq!(
                g["idle"]["short_gap_threshold_ns"].as_u64(),
                Some(HTA_KERNEL_DELAY_NS),
                "{name}: analyze's default gap threshold is HTA's consecutive_kernel_delay (30 µs)"
            );
            let ours_g = from_analyze(g);
            let b = &g["budget"];
            assert_eq!(
                ns(&b["computation_ns"])
                    + ns(&b["communication_exposed_ns"])
                    + ns(&b["copies_exposed_ns"])
                    + ns(&b["idle_ns"]),
                ns(&b["span_ns"]),
                "{name}: the budget's parts sum to the span"
            );
            ours.insert((name, g["device"].as_u64().unwrap()), ours_g);
        }
    }
    check_all(&ours, Allowance::ShareOfSpan);
}
