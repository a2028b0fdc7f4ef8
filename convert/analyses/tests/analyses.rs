//! `stats` and `diff` on the real fixtures and on generated traces with known perturbations.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cutr_analyses::diff::{DiffOptions, Verdict, diff};
use cutr_analyses::stats;
use cutr_model::{LoadOptions, Trace, load};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

fn load_one(p: PathBuf) -> Trace {
    load(&[p], &LoadOptions::default()).unwrap()
}

#[test]
fn stats_of_the_cuda_workload_match_the_program_and_the_floor_client() {
    let t = load_one(fixture("cuda_workload.cutr"));
    let s = stats::compute(&t, &Default::default());
    let counts: BTreeMap<&str, u64> = s.kernels.iter().map(|k| (k.name.as_str(), k.count)).collect();
    // workloads/cuda/EXPECTED.md with --iters 10; the floor client counted the same in its own run.
    let want: BTreeMap<&str, u64> = [
        ("fill(float*, float, int)", 15),
        ("heavy(float*, int, int)", 10),
        ("saxpy(float, float const*, float*, int)", 15),
        ("spin(unsigned long long, unsigned long long*)", 10),
        ("void scale<float>(float*, float, int)", 15),
        ("void scale<int>(int*, int, int)", 10),
    ]
    .into();
    assert_eq!(counts, want);
    let floor: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("cuda_workload.floor.json")).unwrap()).unwrap();
    let floor_counts: u64 = floor["kernels"].as_object().unwrap().values().map(|v| v["count"].as_u64().unwrap()).sum();
    assert_eq!(floor_counts, 75);
    // Exact figures of this recording (the spin kernel busy-waits 2 ms per launch).
    let spin = s.kernels.iter().find(|k| k.name.starts_with("spin")).unwrap();
    assert_eq!(s.kernels[0].name, spin.name, "the slow kernel dominates GPU time");
    assert_eq!((spin.count, spin.total_ns, spin.min_ns, spin.max_ns), (10, 20_009_843, 2_000_914, 2_001_107));
    let mut durs: Vec<u64> =
        t.kernels.iter().filter(|k| t.kernel_name(k).starts_with("spin")).map(|k| k.end - k.start).collect();
    durs.sort();
    assert_eq!(spin.median_ns, (durs[4] + durs[5]) as f64 / 2.0);
    let copies: BTreeMap<&str, (u64, u64)> =
        s.memory_ops.iter().map(|m| (m.time.name.as_str(), (m.time.count, m.bytes))).collect();
    assert_eq!(copies["Memcpy DtoD (Device -> Device)"], (20, 20 << 20));
    assert_eq!(copies["Memset (Device)"].0, 21);
    let nvtx: BTreeMap<&str, (u64, u64)> =
        s.nvtx.iter().map(|r| (r.time.name.as_str(), (r.time.count, r.gpu_ops))).collect();
    assert_eq!(nvtx.values().map(|v| v.0).sum::<u64>(), 106);
    assert_eq!(nvtx["A:compute"].0, 10);
    assert_eq!(s.joins.gpu_without_api, 0);
    assert!(s.loss.values().all(|&v| v == 0));
    // Utilization: every GPU op is on some stream; the device's busy time is at most the sum of its streams'.
    let dev = s.utilization.iter().find(|u| u.stream.is_none()).unwrap();
    let streams: u64 = s.utilization.iter().filter(|u| u.stream.is_some()).map(|u| u.busy_ns).sum();
    assert_eq!(dev.ops, 75 + 73 + 21);
    assert!(dev.busy_ns <= streams && dev.busy_ns >= spin.total_ns);
    let csv = stats::render_csv(&s);
    assert_eq!(csv.lines().filter(|l| l.starts_with("kernel,")).count(), 6);
}

#[test]
fn the_pytorch_loop_has_the_kernels_pytorch_profiler_saw() {
    let t = load_one(fixture("pytorch_loop.cutr"));
    let kineto: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("pytorch_loop.kineto.summary.json")).unwrap()).unwrap();
    // Kernels launched while an NVTX "step i" range was open: the 20 measured steps, what the profiler recorded
    // over the same steps (in a separate run of the same program). By time, not by thread: autograd launches the
    // backward pass from its own threads.
    let mut steps: Vec<(u64, u64)> =
        t.ranges.iter().filter(|r| t.names.get(r.name).starts_with("step ")).map(|r| (r.start, r.end)).collect();
    steps.sort();
    assert_eq!(steps.len(), 20);
    let in_step = |ts: u64| {
        let i = steps.partition_point(|s| s.0 <= ts);
        i > 0 && ts <= steps[i - 1].1
    };
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    for k in &t.kernels {
        let Some(a) = t.launcher(k.corr()) else { continue };
        if in_step(a.start) {
            *by_name.entry(t.kernel_name(k).to_string()).or_default() += 1;
        }
    }
    assert_eq!(by_name.values().sum::<u64>(), kineto["kernel_events"].as_u64().unwrap());
    assert_eq!(by_name.values().sum::<u64>(), 4820);
    let kineto_names: BTreeMap<String, u64> = kineto["kernels_by_name"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["count"].as_u64().unwrap()))
        .collect();
    assert_eq!(by_name, kineto_names, "same kernels, same demangled names as PyTorch profiler");
}

#[test]
fn the_recorded_regression_pair_flags_the_heavy_kernel_only() {
    let base: Vec<Trace> = ["regress/base_a.cutr", "regress/base_b.cutr"].map(|f| load_one(fixture(f))).into();
    let new: Vec<Trace> = ["regress/heavy_a.cutr", "regress/heavy_b.cutr"].map(|f| load_one(fixture(f))).into();
    let r = diff(&base, &new, &DiffOptions::default());
    assert_eq!(r.verdict, Verdict::Regression);
    let flagged: Vec<&str> = r
        .rows
        .iter()
        .filter(|x| x.section == "kernel" && !matches!(x.verdict, Verdict::Neutral | Verdict::Reported))
        .map(|x| x.name.as_str())
        .collect();
    assert_eq!(flagged, ["heavy(float*, int, int)"]);
    let heavy = r.rows.iter().find(|x| x.name.starts_with("heavy")).unwrap();
    assert_eq!((heavy.base_count.clone(), heavy.new_count.clone()), (vec![10, 10], vec![10, 10]));
    assert!((95.0..105.0).contains(&heavy.delta_pct), "{}", heavy.delta_pct);
    // The ranges around the heavy kernel regress with it, by exactly its extra time.
    let compute = r.rows.iter().find(|x| x.name == "A:compute").unwrap();
    assert_eq!(compute.verdict, Verdict::Regression);
    assert!((compute.delta_ns - heavy.delta_ns).abs() < heavy.delta_ns / 100.0);
    // Two runs of the same program against each other: no kernel changes.
    let a = vec![load_one(fixture("regress/base_a.cutr"))];
    let b = vec![load_one(fixture("regress/base_b.cutr"))];
    // Two runs of the same program against each other, either way round: neutral (the kernels below 1% of the GPU
    // time and the wall span reported, not judged).
    for (x, y) in [(&a, &b), (&b, &a)] {
        let same = diff(x, y, &DiffOptions::default());
        assert_eq!(same.verdict, Verdict::Neutral, "{}", cutr_analyses::diff::render_text(&same, false));
        assert!(same.rows.iter().all(|r| matches!(r.verdict, Verdict::Neutral | Verdict::Reported)));
        // The wall span, 4 kernels and 6 NVTX ranges each hold under 1% of the GPU time.
        assert_eq!(same.counts.get("reported"), Some(&11));
    }
}

fn synthetic() -> (tempfile::TempDir, Trace) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.cutr");
    cutr_synth::write_file(&p, cutr_synth::SynthOptions { records: 30_000, ..Default::default() }).unwrap();
    let t = load_one(p);
    (dir, t)
}

const GEMM: &str = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas";

#[test]
fn generated_perturbations_get_the_right_verdicts() {
    let (_d, base) = synthetic();
    let name_of = |t: &Trace, i: usize| t.names.get(t.kernels[i].name).to_string();
    // One kernel 20% slower: flagged, with the exact delta.
    let mut slow = base.clone();
    let mut extra = 0u64;
    for i in 0..slow.kernels.len() {
        if name_of(&slow, i) == GEMM {
            let d = slow.kernels[i].end - slow.kernels[i].start;
            slow.kernels[i].end += d / 5;
            extra += d / 5;
        }
    }
    let r = diff(std::slice::from_ref(&base), &[slow], &DiffOptions::default());
    assert_eq!(r.verdict, Verdict::Regression);
    let flagged: Vec<(&str, Verdict, f64)> = r
        .rows
        .iter()
        .filter(|x| x.section == "kernel" && !matches!(x.verdict, Verdict::Neutral | Verdict::Reported))
        .map(|x| (x.name.as_str(), x.verdict, x.delta_ns))
        .collect();
    assert_eq!(flagged, [(GEMM, Verdict::Regression, extra as f64)]);
    let row = r.rows.iter().find(|x| x.name == GEMM).unwrap();
    assert!((row.delta_pct - 20.0).abs() < 0.01, "{}", row.delta_pct);

    // Every kernel jittered within 1%: neutral.
    let mut jitter = base.clone();
    for (i, k) in jitter.kernels.iter_mut().enumerate() {
        let d = k.end - k.start;
        let pm = (i as u64 * 7919) % 21; // 0..=20 -> -1.0% ..= +1.0%
        k.end = k.start + d * (990 + pm) / 1000;
    }
    let r = diff(std::slice::from_ref(&base), &[jitter], &DiffOptions::default());
    assert_eq!(r.verdict, Verdict::Neutral);

    // A kernel removed: reported as removed.
    let mut fewer = base.clone();
    let cutlass =
        fewer.kernels.iter().map(|k| fewer.names.get(k.name)).find(|n| n.contains("cutlass")).unwrap().to_string();
    let keep: Vec<_> = fewer.kernels.iter().filter(|k| fewer.names.get(k.name) != cutlass).copied().collect();
    fewer.kernels = keep;
    let r = diff(std::slice::from_ref(&base), &[fewer], &DiffOptions::default());
    let removed: Vec<&str> = r.rows.iter().filter(|x| x.verdict == Verdict::Removed).map(|x| x.name.as_str()).collect();
    assert_eq!(removed.len(), 1);
    assert!(removed[0].starts_with("void cutlass::Kernel2<"));

    // Self-diff: neutral, every delta zero.
    let r = diff(std::slice::from_ref(&base), std::slice::from_ref(&base), &DiffOptions::default());
    assert_eq!(r.verdict, Verdict::Neutral);
    assert!(r.rows.iter().all(|x| x.delta_ns == 0.0 && matches!(x.verdict, Verdict::Neutral | Verdict::Reported)));
    let md = cutr_analyses::diff::render_markdown(&r, 20);
    assert!(md.starts_with("### cutr diff: **neutral**"));
}

/// `stats` groups and sums in parallel (blocks of 65,536 rows); on a generated trace with several blocks of each
/// kind, every section equals a plain serial computation from the rows.
#[test]
fn stats_equal_a_serial_computation_from_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.cutr");
    cutr_synth::write_file(&p, cutr_synth::SynthOptions { records: 600_000, ..Default::default() }).unwrap();
    let t = load_one(p);
    // Every NVTX name its own row, as the serial sums below group them (the folding of numbered names is checked
    // against its members in stats_nvtx_families.rs).
    let opts = stats::StatsOptions { nvtx_names: stats::NvtxNames::Each, ..Default::default() };
    let s = stats::compute(&t, &opts);
    assert!(t.kernels.len() > 2 * 65_536 && t.apis.len() > 2 * 65_536, "{} kernels", t.kernels.len());

    // (count, total, min, max) by name.
    type Sums = BTreeMap<String, (u64, u64, u64, u64)>;
    fn add(m: &mut Sums, name: String, d: u64) {
        let e = m.entry(name).or_insert((0, 0, u64::MAX, 0));
        *e = (e.0 + 1, e.1 + d, e.2.min(d), e.3.max(d));
    }
    let got = |rows: &[stats::Summary]| -> Sums {
        rows.iter().map(|r| (r.name.clone(), (r.count, r.total_ns, r.min_ns, r.max_ns))).collect()
    };
    let mut kernels = Sums::new();
    for k in &t.kernels {
        add(&mut kernels, t.kernel_name(k).to_string(), k.end - k.start);
    }
    assert_eq!(got(&s.kernels), kernels);
    let mut api = Sums::new();
    for a in &t.apis {
        add(&mut api, t.api_name_of(a.proc, a.driver, a.cbid), a.end - a.start);
    }
    assert_eq!(got(&s.api), api);
    let mut mem = Sums::new();
    for m in &t.memcpys {
        add(&mut mem, cutr_model::describe::memcpy_name(m.copy_kind, m.src_kind, m.dst_kind), m.end - m.start);
    }
    for m in &t.memsets {
        add(&mut mem, cutr_model::describe::memset_name(m.memory_kind), m.end - m.start);
    }
    let got_mem: Vec<stats::Summary> = s.memory_ops.iter().map(|m| m.time.clone()).collect();
    assert_eq!(got(&got_mem), mem);

    // NVTX: every op walks up the chain of ranges around its launching call.
    let mut gpu = vec![(0u64, 0u64); t.ranges.len()];
    let ops = t.kernels.iter().map(|k| (k.corr(), k.end - k.start));
    let ops = ops.chain(t.memcpys.iter().map(|k| (k.corr(), k.end - k.start)));
    for (key, d) in ops.chain(t.memsets.iter().map(|k| (k.corr(), k.end - k.start))) {
        let Some(ai) = t.launcher_index(key) else { continue };
        let mut r = t.api_range[ai as usize];
        while r != u32::MAX {
            gpu[r as usize].0 += d;
            gpu[r as usize].1 += 1;
            r = t.ranges[r as usize].parent;
        }
    }
    let mut nvtx: BTreeMap<String, (u64, u64, u64, u64)> = BTreeMap::new();
    for (r, g) in t.ranges.iter().zip(&gpu).filter(|(r, _)| r.end != u64::MAX) {
        let e = nvtx.entry(t.names.get(r.name).to_string()).or_default();
        *e = (e.0 + 1, e.1 + (r.end - r.start), e.2 + g.0, e.3 + g.1);
    }
    let got_nvtx: BTreeMap<String, (u64, u64, u64, u64)> =
        s.nvtx.iter().map(|r| (r.time.name.clone(), (r.time.count, r.time.total_ns, r.gpu_ns, r.gpu_ops))).collect();
    assert_eq!(got_nvtx, nvtx);
    assert!(nvtx.values().any(|v| v.3 > 0), "some range launched GPU work");

    // Utilization: the union of each stream's and each device's intervals.
    let union = |mut iv: Vec<(u64, u64)>| {
        iv.sort();
        let (mut total, mut cur) = (0, None::<(u64, u64)>);
        for (a, b) in iv {
            cur = match cur {
                Some((s, e)) if a <= e => Some((s, e.max(b))),
                Some((s, e)) => {
                    total += e - s;
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        total + cur.map_or(0, |(s, e)| e - s)
    };
    type Intervals = Vec<(u64, u64)>;
    let mut by: BTreeMap<(u32, Option<u32>), Intervals> = BTreeMap::new();
    let ops = t.kernels.iter().map(|k| (k.device, k.stream, k.start, k.end));
    let ops = ops.chain(t.memcpys.iter().map(|k| (k.device, k.stream, k.start, k.end)));
    for (d, st, a, b) in ops.chain(t.memsets.iter().map(|k| (k.device, k.stream, k.start, k.end))) {
        by.entry((d, Some(st))).or_default().push((a, b));
        by.entry((d, None)).or_default().push((a, b));
    }
    let want: BTreeMap<(u32, Option<u32>), (u64, u64)> =
        by.into_iter().map(|(k, iv)| (k, (iv.len() as u64, union(iv)))).collect();
    let got_util: BTreeMap<(u32, Option<u32>), (u64, u64)> =
        s.utilization.iter().map(|u| ((u.device, u.stream), (u.ops, u.busy_ns))).collect();
    assert_eq!(got_util, want);
    assert!(want.len() > 2, "several streams");
}

/// `fixtures/diff`: `diff_workload` recorded 5 times unchanged (`aa-*`), 5 times with its 275 us `fixed` kernel
/// doing 3% more work (`p3-*`) and 3 times with 10% more (`p10-*`), interleaved round by round on one H200.
fn diff_runs(prefix: &str, n: usize) -> Vec<Trace> {
    (1..=n).map(|i| load_one(fixture(&format!("diff/{prefix}-{i}.cutr")))).collect()
}

/// The rows a report judged a regression, as `section name`.
fn regressions(r: &cutr_analyses::diff::Report) -> Vec<String> {
    r.rows.iter().filter(|x| x.verdict == Verdict::Regression).map(|x| format!("{} {}", x.section, x.name)).collect()
}

#[test]
fn unchanged_runs_never_regress_and_the_changed_kernel_is_always_found() {
    let (aa, p3, p10) = (diff_runs("aa", 5), diff_runs("p3", 5), diff_runs("p10", 3));
    let at = |threshold_pct: f64| DiffOptions { threshold_pct, ..Default::default() };
    // Every ordered A/A pair, one run per side, at the default threshold and at 2%: no regression (20 + 20).
    for opts in [DiffOptions::default(), at(2.0)] {
        for (i, a) in aa.iter().enumerate() {
            for (j, b) in aa.iter().enumerate() {
                if i != j {
                    let r = diff(std::slice::from_ref(a), std::slice::from_ref(b), &opts);
                    assert_ne!(r.verdict, Verdict::Regression, "aa-{} vs aa-{}: {:?}", i + 1, j + 1, regressions(&r));
                }
            }
        }
    }
    // Every split of the 5 unchanged runs into 3 base and 2 new runs: no regression (10 splits).
    for mask in 0u32..32 {
        if mask.count_ones() != 3 {
            continue;
        }
        let side = |inside: bool| -> Vec<Trace> {
            (0..5)
                .filter(|k| (mask >> k & 1 == 1) == inside)
                .map(|k| load_one(fixture(&format!("diff/aa-{}.cutr", k + 1))))
                .collect()
        };
        let (b, n) = (side(true), side(false));
        for opts in [DiffOptions::default(), at(2.0)] {
            let r = diff(&b, &n, &opts);
            assert_ne!(r.verdict, Verdict::Regression, "3v2 split {mask:05b}: {:?}", regressions(&r));
        }
    }
    // +3%: flagged in every single-run pair at --threshold 2 (25 pairs), on the fixed kernel; neutral at 5%.
    let fixed = "kernel fixed(float*, int)".to_string();
    for (i, a) in aa.iter().enumerate() {
        for (j, n) in p3.iter().enumerate() {
            let r = diff(std::slice::from_ref(a), std::slice::from_ref(n), &at(2.0));
            assert_eq!(r.verdict, Verdict::Regression, "aa-{} vs p3-{}", i + 1, j + 1);
            assert!(regressions(&r).contains(&fixed), "{:?}", regressions(&r));
            let row = r.rows.iter().find(|x| x.name == "fixed(float*, int)").unwrap();
            assert!((2.5..3.5).contains(&row.delta_pct), "{}", row.delta_pct);
            assert_ne!(
                diff(std::slice::from_ref(a), std::slice::from_ref(n), &DiffOptions::default()).verdict,
                Verdict::Regression
            );
        }
    }
    // ... and in 3 runs against 3, where the runs are the samples.
    for (b, n) in [(&aa[..3], &p3[..3]), (&aa[2..], &p3[2..])] {
        let r = diff(b, n, &at(2.0));
        assert_eq!(r.verdict, Verdict::Regression);
        assert_eq!(regressions(&r), [fixed.clone(), "nvtx main:fixed".to_string()]);
    }
    // +10%: flagged at the defaults in every single-run pair (15) and in 3 runs against 3.
    for a in &aa {
        for n in &p10 {
            let r = diff(std::slice::from_ref(a), std::slice::from_ref(n), &DiffOptions::default());
            assert!(regressions(&r).contains(&fixed), "{:?}", regressions(&r));
        }
    }
    let r = diff(&aa[..3], &p10, &DiffOptions::default());
    assert!(regressions(&r).contains(&fixed), "{:?}", regressions(&r));
    let row = r.rows.iter().find(|x| x.name == "fixed(float*, int)").unwrap();
    assert!((9.5..10.5).contains(&row.delta_pct), "{}", row.delta_pct);
}
