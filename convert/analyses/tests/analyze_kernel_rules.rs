//! `analyze`'s per-kernel rules (`low_occupancy`, `kernel_bound`, `kernel_stalls`) on recorded fixtures with
//! known answers: the counter workload's memory-bound copy and compute-bound FMA kernels (their DRAM averages
//! checked against Perfetto's trace processor), the PC-sample workload's pointer chase waiting on memory at its
//! hot line, launches whose occupancy is worked out by hand, and files that lack counters or PC samples.

use std::path::{Path, PathBuf};
use std::process::Command;

use cutr_analyses::analyze::findings::kernels::bound::{self, Bound, Throughput};
use cutr_analyses::analyze::findings::kernels::rules;
use cutr_analyses::analyze::types::{Context, Finding, Outcome, RuleResult, Severity, Step, StepSource};
use cutr_model::{LoadOptions, ProcId, Trace, load};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

/// The fixture loaded with its PC samples attached, as `analyze` loads it.
fn trace(name: &str) -> Trace {
    let path = fixture(name);
    let mut t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    let reader = cutr_format::Reader::open(&path).unwrap();
    assert_eq!(cutr_analyses::source::annotate(&mut t, &[&reader]), Vec::<String>::new());
    t
}

fn run(t: &Trace, steps: &[Step]) -> Vec<RuleResult> {
    let source = if steps.is_empty() { StepSource::None } else { StepSource::NvtxPrefix("test".into()) };
    rules(&Context { trace: t, steps, step_source: &source })
}

/// The results of one rule.
fn of<'a>(results: &'a [RuleResult], rule: &str) -> Vec<&'a Outcome> {
    results.iter().filter(|r| r.rule == rule).map(|r| &r.outcome).collect()
}

fn found(o: &Outcome) -> &Finding {
    match o {
        Outcome::Found(f) => f,
        other => panic!("not a finding: {other:?}"),
    }
}

fn cannot(why: &str) -> Outcome {
    Outcome::CannotJudge { why: why.to_string() }
}

const NO_COUNTERS: &str = "no PM counters in the file (record with `cupti-record --counters`)";
const NO_PC_SAMPLES: &str = "no PC samples in the file (record with `cupti-record --pc-sampling`)";

/// `counter_workload --phases 6 --phase-ms 300` on an H100 with PM sampling: `stream_copy` (1,181 launches,
/// 896,777,328 ns) moves 1.40e12 B/s each way, 83.8% of the H100's 3.352 TB/s (2 x 2,619 MHz x 5,120 bits / 8),
/// while its SMs issue 3.4% of peak: memory-bound. `fma_burn` (721 launches, 900,581,920 ns) issues 95.0% of
/// peak with 0.0019% of DRAM: compute-bound. No steps: shares are of the GPU span. Both at the roofline, so low
/// severity. Achieved occupancy (100% less the unused warp slots) is 57.3% and 88.5%: above 50%, clean.
#[test]
fn the_copy_kernel_is_memory_bound_and_the_fma_kernel_compute_bound() {
    let t = trace("counter_workload.cutr");
    let r = run(&t, &[]);
    let bounds = of(&r, "kernel_bound");
    assert_eq!(bounds.len(), 2);
    let (fma, copy) = (found(bounds[0]), found(bounds[1]));
    assert_eq!(
        fma.summary,
        "fma_burn(float*, int): compute-bound (DRAM 0.0% of peak, SM 95.0% of peak; bound at 60%), 32.0% of the \
         span time"
    );
    assert_eq!(
        copy.summary,
        "stream_copy(float4 const*, float4*, unsigned long): memory-bound (DRAM 83.8% of peak, SM 3.4% of peak; \
         bound at 60%), 31.9% of the span time"
    );
    assert_eq!((fma.count, fma.time_ns, fma.severity), (721, 900_581_920, Severity::Low));
    assert_eq!((copy.count, copy.time_ns, copy.severity), (1_181, 896_777_328, Severity::Low));
    assert_eq!(copy.events.len(), 5);
    assert!(copy.events.windows(2).all(|e| e[0].start < e[1].start), "evidence in time order");
    assert_eq!(bound::peak_dram_bytes_per_s(&t, ProcId(0), 0), Some(3_352_320_000_000.0));
    assert_eq!(
        of(&r, "low_occupancy"),
        [&Outcome::Clean {
            checked: "occupancy at or above 50%: fma_burn(float*, int) 57.3% achieved (PM sampling); \
                      stream_copy(float4 const*, float4*, unsigned long) 88.5% achieved (PM sampling)"
                .into()
        }]
    );
    assert_eq!(of(&r, "kernel_stalls"), [&cannot(NO_PC_SAMPLES)]);
}

/// Perfetto's trace processor, reading our Perfetto export of the counter fixture, integrates the DRAM read and
/// write tracks over the `stream_copy` slices (each reading held until the next) to the same averages: so the
/// 83.8% rests on figures an outside client agrees with to 1e-12.
#[test]
fn trace_processor_agrees_with_the_copy_kernels_dram_throughput() {
    let t = trace("counter_workload.cutr");
    let dir = tempfile::tempdir().unwrap();
    let pf = dir.path().join("c.pftrace");
    cutr_viewer_export::export(&t, &pf, &Default::default()).unwrap();
    let average = |track: &str| {
        format!(
            "with c as (select c.ts, lead(c.ts) over (order by c.ts) as nx, c.value from counter c join \
             counter_track t on c.track_id = t.id where t.name = '{track}'), k as (select ts, ts + dur as e from \
             slice where name like 'stream_copy%') select sum(c.value * (min(c.nx, k.e) - max(c.ts, k.ts))) / \
             sum(min(c.nx, k.e) - max(c.ts, k.ts)), sum(min(c.nx, k.e) - max(c.ts, k.ts)) from k join c on c.ts \
             < k.e and c.nx > k.ts"
        )
    };
    let rows = trace_processor(&pf, &[&average("DRAM Read Bandwidth"), &average("DRAM Write Bandwidth")]);
    let (read, write) = (rows[0][0][0].as_f64().unwrap(), rows[1][0][0].as_f64().unwrap());
    assert_eq!(rows[0][0][1].as_i64(), Some(896_024_865), "the kernel time the readings cover");
    let pm = cutr_analyses::analyze::findings::kernels::pm::PmAverages::of(&t);
    let name = "stream_copy(float4 const*, float4*, unsigned long)";
    let ours = |s| pm.get(name, 0, s).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b;
    assert!(close(read, ours(cutr_analyses::analyze::findings::kernels::pm::DRAM_READ_BYTES)), "{read}");
    assert!(close(write, ours(cutr_analyses::analyze::findings::kernels::pm::DRAM_WRITE_BYTES)), "{write}");
    let pct = 100.0 * (read + write) / 3.35232e12;
    assert_eq!(format!("{pct:.1}"), "83.8");
    assert_eq!(Throughput::of(pct, 3.4).bound, Bound::Memory);
}

/// Runs SQL in Perfetto's trace processor (the wasm build the test set-up installs, `.ci/setup-clients.sh`).
fn trace_processor(trace: &Path, queries: &[&str]) -> Vec<Vec<Vec<serde_json::Value>>> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cache = std::env::var_os("CUTR_CACHE").map_or(repo.join(".cache"), PathBuf::from);
    let wasm = cache.join("clients/perfetto-ui-1.1.0/trace_processor.wasm");
    assert!(wasm.exists(), "{} missing: run .ci/setup-clients.sh", wasm.display());
    let out = Command::new("node")
        .arg(repo.join("tests/clients/tp.cjs"))
        .arg(trace)
        .args(queries)
        .env("CUTR_CACHE", &cache)
        .output()
        .expect("node runs");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("tp.cjs printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    assert!(doc["load_error"].is_null(), "{}", doc["load_error"]);
    let queries = doc["queries"].as_array().unwrap();
    queries
        .iter()
        .map(|q| {
            assert!(q["error"].is_null(), "{}: {}", q["sql"], q["error"]);
            q["rows"].as_array().unwrap().iter().map(|r| r.as_array().unwrap().clone()).collect()
        })
        .collect()
}

/// One step over the PC-sample workload's three iterations (first `chase` start to last `jit_scale` end,
/// 6,820,961 ns). `chase` (3 launches, 3,612,470 ns, 53.0%) and `fma_chain` (3,194,316 ns, 46.8%) are hot;
/// `jit_scale` (3,936 ns) is not. Stalls, as `source` reports them: `chase` waits on memory (long_scoreboard,
/// 99.0% of its 454,728 samples) at its pointer load, source_workload.cu:44 (99.8%); `fma_chain` on its
/// dependent FMAs (wait, 45.9% of 406,977) at line 52 (92.8%).
///
/// Occupancy by hand (H100: 132 SMs, 2,048 threads, 64 K registers and 228 KiB shared memory per SM, 32 blocks
/// at most): `chase` runs 132 blocks x 128 threads with 22 registers. Warp slots allow 64 / 4 = 16 blocks;
/// registers 22 x 32 = 704, allocated 768 per warp, 16,384 / 768 = 21 warps per quarter, 84 warps = 21 blocks;
/// shared memory (1 KiB reserved per block) 228: 16 blocks of 128 = 2,048 threads, theoretical 100%. The grid
/// gives each SM one block: 128 / 2,048 = 6.25%, below 50%, limited by the grid. `fma_chain`: 528 blocks x 256
/// threads, 8 fit, the grid gives 4: 4 x 256 / 2,048 = 50.0%, not below.
#[test]
fn the_pointer_chase_waits_on_memory_at_its_hot_line_with_one_block_per_sm() {
    let t = trace("source_workload_pcs.cutr");
    let (start, end) = (1_795_468_250_283_042_506, 1_795_468_250_289_863_467);
    let step = Step { proc: ProcId(0), rank: 0, index: 0, name: "iterations".into(), start, end };
    let r = run(&t, &[step]);
    let stalls = of(&r, "kernel_stalls");
    assert_eq!(stalls.len(), 2);
    let (chase, fma) = (found(stalls[0]), found(stalls[1]));
    assert_eq!(
        chase.summary,
        "chase(unsigned int const*, unsigned int, int, unsigned int*): top stall long_scoreboard (99.0% of its \
         454728 PC samples); hottest line source_workload.cu:44 (99.8% of its samples), on 53.0% of the steps time"
    );
    assert_eq!((chase.count, chase.time_ns, chase.severity), (3, 3_612_470, Severity::High));
    assert_eq!(
        fma.summary,
        "fma_chain(float*, int): top stall wait (45.9% of its 406977 PC samples); hottest line \
         source_workload.cu:52 (92.8% of its samples), on 46.8% of the steps time"
    );
    // The figures are `source`'s own: its report gives chase the same samples and top stall.
    let reader = cutr_format::Reader::open(&fixture("source_workload_pcs.cutr")).unwrap();
    let report = cutr_analyses::source::report(&[&reader], &Default::default());
    let k = report.kernels.iter().find(|k| k.name.starts_with("chase")).unwrap();
    let share = 100.0 * k.stalls[0].1 as f64 / k.samples as f64;
    assert_eq!((k.samples, k.stalls[0].0.as_str(), format!("{share:.1}")), (454_728, "long_scoreboard", "99.0".into()));
    assert_eq!((k.lines[0].file.as_str(), k.lines[0].line), ("source_workload.cu", 44));

    let occupancy = of(&r, "low_occupancy");
    assert_eq!(occupancy.len(), 1, "fma_chain's 50% is not below 50%");
    assert_eq!(
        found(occupancy[0]).summary,
        "chase(unsigned int const*, unsigned int, int, unsigned int*): occupancy 6.2% estimated from the launch, \
         below 50%, on 53.0% of the steps time; launch of 132 block(s) x 128 threads, 22 registers, 0 B shared \
         memory: theoretical 100.0%, 6.2% with its grid; limiter: grid size: 132 block(s) for 132 SMs (1.00 per \
         SM, 16 would fit)"
    );
    assert_eq!(of(&r, "kernel_bound"), [&cannot(NO_COUNTERS)]);
}

/// `cuda_workload.cutr` has neither PM counters nor PC samples: both rules say so. Its `spin` kernel, one block
/// of one thread, holds 71.8% of the GPU span: warp slots allow 64 blocks of one warp, the architecture 32, so
/// 32 threads of 2,048 fit (1.6% theoretical); the grid gives one block to 1 of 132 SMs: 1 / 132 / 2,048 =
/// 0.0004%, below 50%, high severity.
#[test]
fn a_file_without_counters_or_pc_samples_cannot_be_judged_by_them() {
    let t = trace("cuda_workload.cutr");
    let r = run(&t, &[]);
    assert_eq!(of(&r, "kernel_bound"), [&cannot(NO_COUNTERS)]);
    assert_eq!(of(&r, "kernel_stalls"), [&cannot(NO_PC_SAMPLES)]);
    let occupancy = of(&r, "low_occupancy");
    assert_eq!(occupancy.len(), 1);
    let f = found(occupancy[0]);
    assert_eq!(
        f.summary,
        "spin(unsigned long long, unsigned long long*): occupancy 0.0% estimated from the launch, below 50%, on \
         71.8% of the span time; launch of 1 block(s) x 1 threads, 16 registers, 0 B shared memory: theoretical \
         1.6%, 0.0% with its grid; limiter: grid size: 1 block(s) for 132 SMs (0.01 per SM, 32 would fit)"
    );
    assert_eq!((f.count, f.time_ns, f.severity), (10, 20_009_843, Severity::High));
    assert_eq!(f.events[0].correlation, 167);
}

/// A file with PC samples loaded without `source`'s annotation says what is missing rather than that there are no
/// samples; garbled annotations and steps with no kernel in them give answers, not panics.
#[test]
fn missing_or_garbled_pc_sample_notes_and_empty_steps_are_said() {
    let path = fixture("source_workload_pcs.cutr");
    let mut t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    assert_eq!(
        of(&run(&t, &[]), "kernel_stalls"),
        [&cannot("the file has PC samples, but they were not read into the trace (`source::annotate`)")]
    );
    // A note `source` could not have written, on the hottest kernel: no stall reason to read, said so.
    let chase = t.kernels.iter().find(|k| t.kernel_name(k).starts_with("chase")).unwrap().name;
    let garbled = cutr_model::KernelSourceNote { samples: 5, top_lines: "%".into(), top_stalls: "garbled".into() };
    t.kernel_source.insert(chase, garbled);
    let r = run(&t, &[]);
    assert_eq!(of(&r, "kernel_stalls"), [&cannot("none of the 2 hot kernels has readable PC samples")]);
    // A step before any GPU work: no kernel in it, nothing hot.
    let step = Step { proc: ProcId(0), rank: 0, index: 0, name: "empty".into(), start: 0, end: 10 };
    let r = run(&t, &[step]);
    assert_eq!(
        of(&r, "low_occupancy"),
        [&Outcome::Clean { checked: "no kernel takes 5% or more of the steps time".into() }]
    );
    assert_eq!(of(&r, "kernel_bound"), [&cannot(NO_COUNTERS)]);
}

/// PyTorch's loop (`pytorch_loop.cutr`, 20 NVTX `step N` ranges) is launch-bound: no kernel name takes 5% of the
/// steps' time, so occupancy is not worth judging there, and the file has neither counters nor PC samples.
#[test]
fn the_pytorch_loop_has_no_kernel_with_a_large_share() {
    let t = trace("pytorch_loop.cutr");
    let mut steps: Vec<Step> = t
        .ranges
        .iter()
        .filter(|r| r.closed() && t.names.get(r.name).starts_with("step "))
        .map(|r| Step { proc: r.proc, rank: 0, index: 0, name: t.names.get(r.name).into(), start: r.start, end: r.end })
        .collect();
    steps.sort_by_key(|s| s.start);
    assert_eq!(steps.len(), 20);
    let r = run(&t, &steps);
    assert_eq!(
        r,
        [
            RuleResult {
                rule: "low_occupancy",
                outcome: Outcome::Clean { checked: "no kernel takes 5% or more of the steps time".into() }
            },
            RuleResult { rule: "kernel_bound", outcome: cannot(NO_COUNTERS) },
            RuleResult { rule: "kernel_stalls", outcome: cannot(NO_PC_SAMPLES) },
        ]
    );
}

/// `counter_100khz.cutr` recorded one PM metric (DRAM reads): no bound can be called, and the rule names the
/// series it lacks per kernel; occupancy falls back to the launch (1,056 blocks x 256 threads, 16 registers: 8
/// blocks fill an SM's 64 warp slots, and the grid gives each of the 132 SMs 8: 100%). On `counter_two_gpus.cutr`
/// (two H200s, both phases on both) each kernel is judged on GPU 0, whose PM session covered the phases, named
/// because the kernel ran on two: the copy at 81.4% of DRAM peak, the FMA chain at 94.9% SM issue.
#[test]
fn a_bound_needs_both_throughputs_and_is_read_where_the_counters_cover() {
    let t = trace("counter_100khz.cutr");
    let r = run(&t, &[]);
    assert_eq!(
        of(&r, "kernel_bound"),
        [
            &cannot("fma_burn(float*, int): GPU 0 has no PM average of dram__bytes_write.sum.per_second over it"),
            &cannot(
                "stream_copy(float4 const*, float4*, unsigned long): GPU 0 has no PM average of \
                 dram__bytes_write.sum.per_second over it"
            ),
        ]
    );
    assert_eq!(
        of(&r, "low_occupancy"),
        [&Outcome::Clean {
            checked: "occupancy at or above 50%: fma_burn(float*, int) 100.0% estimated from the launch; \
                      stream_copy(float4 const*, float4*, unsigned long) 100.0% estimated from the launch"
                .into()
        }]
    );
    let t = trace("counter_two_gpus.cutr");
    let r = run(&t, &[]);
    let summaries: Vec<&str> = of(&r, "kernel_bound").iter().map(|o| found(o).summary.as_str()).collect();
    assert_eq!(
        summaries,
        [
            "fma_burn(float*, int) on GPU 0: compute-bound (DRAM 0.0% of peak, SM 94.9% of peak; bound at 60%), \
             26.8% of the span time",
            "stream_copy(float4 const*, float4*, unsigned long) on GPU 0: memory-bound (DRAM 81.4% of peak, SM 4.8% \
             of peak; bound at 60%), 26.7% of the span time"
        ]
    );
}

/// A generated training loop (`cutr_synth`, 20,000 records, no device properties) with PM series forged flat
/// over it: DRAM read 10% and write 5% of peak (the `dramc__*` percentages), SM issue 20%, unused warp slots 60%
/// on active SMs and 10% on idle ones. Every hot kernel is latency-bound (15% and 20%, both under 60%), and its
/// achieved occupancy is 100 - 60 - 10 = 30%: low on the two kernels with 5% or more of the span, not judged on
/// the NCCL all-reduce (8.0%: NCCL keeps few blocks on purpose). Severity follows the share: 29.0% high, 9.7% low.
/// A generated training loop (`cutr_synth`, 20,000 records, no device properties) with PM series forged flat
/// over it, each metric at its value.
fn forged(dir: &tempfile::TempDir, name: &str, metrics: &[(&str, f64)]) -> Trace {
    use cutr_synth::forge::counters::{metric_flood, write_with_counters};
    let path = dir.path().join(name);
    let opts = cutr_synth::SynthOptions { records: 20_000, buffer_bytes: 256 << 10, ..Default::default() };
    write_with_counters(&path, opts, |truth| {
        let flat = |j: usize, _| metrics[j].1;
        let mut c = metric_flood((truth.t_min, truth.t_max), metrics.len(), 200, 0, flat);
        for (m, (name, _)) in c.metrics.iter_mut().zip(metrics) {
            (m.name, m.unit) = (name.to_string(), "%".into());
        }
        vec![c]
    })
    .unwrap();
    load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap()
}

/// Forged flat counters: DRAM read 10% and write 5% of peak (the `dramc__*` percentages), SM issue 20%, unused
/// warp slots 60% on active SMs and 10% on idle ones. Every hot kernel is latency-bound (15% and 20%, both under
/// 60%), and its achieved occupancy is 100 - 60 - 10 = 30%: low on the two kernels with 5% or more of the span,
/// not judged on the NCCL all-reduce (8.0%: NCCL keeps few blocks on purpose). Severity follows the share: 29.0%
/// high, 9.7% low. DRAM traffic in bytes on a device whose file has no memory clock: no peak, said so.
#[test]
fn forged_counters_make_latency_bound_kernels_with_low_achieved_occupancy() {
    let dir = tempfile::tempdir().unwrap();
    let t = forged(
        &dir,
        "latency.cutr",
        &[
            ("dramc__read_throughput.avg.pct_of_peak_sustained_elapsed", 10.0),
            ("dramc__write_throughput.avg.pct_of_peak_sustained_elapsed", 5.0),
            ("sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed", 20.0),
            ("tpc__warps_inactive_sm_active_realtime.avg.pct_of_peak_sustained_elapsed", 60.0),
            ("tpc__warps_inactive_sm_idle_realtime.avg.pct_of_peak_sustained_elapsed", 10.0),
        ],
    );
    let r = run(&t, &[]);
    let low: Vec<(Severity, &str)> =
        of(&r, "low_occupancy").iter().map(|o| (found(o).severity, found(o).summary.as_str())).collect();
    assert_eq!(
        low,
        [
            (
                Severity::High,
                "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_...: occupancy 30.0% \
                 achieved (PM sampling), below 50%, on 29.0% of the span time"
            ),
            (
                Severity::Low,
                "void cutlass::Kernel2<cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_128x1_tn...: occupancy 30.0% \
                 achieved (PM sampling), below 50%, on 9.7% of the span time"
            ),
        ]
    );
    let bounds: Vec<&str> = of(&r, "kernel_bound").iter().map(|o| found(o).summary.as_str()).collect();
    assert_eq!(bounds.len(), 4);
    assert!(bounds[2].starts_with("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), "{}", bounds[2]);
    for b in &bounds {
        assert!(b.contains(": latency-bound (DRAM 15.0% of peak, SM 20.0% of peak; bound at 60%), "), "{b}");
    }
    assert_eq!(of(&r, "kernel_stalls"), [&cannot(NO_PC_SAMPLES)]);
    let bytes = [
        ("dram__bytes_read.sum.per_second", 1e12),
        ("dram__bytes_write.sum.per_second", 1e12),
        ("sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed", 20.0),
    ];
    let t = forged(&dir, "no_peak.cutr", &bytes);
    let r = run(&t, &[]);
    let bound = of(&r, "kernel_bound");
    assert_eq!(bound.len(), 4);
    assert_eq!(
        bound[0],
        &cannot(
            "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_...: GPU 0 has no memory \
             clock or bus width in the file (for its DRAM peak)"
        )
    );
}
