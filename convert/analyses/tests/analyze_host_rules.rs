//! The host-side rules of `cupti-convert analyze` (synchronous and pageable copies, synchronizations and tiny
//! kernels inside steps, the straggler rank) on fixtures with known answers. DuckDB's counts of the same events
//! over `export --parquet`'s tables: tests/tests/analyze_host_duckdb.rs.

use std::path::PathBuf;

use cutr_analyses::analyze::findings::host;
use cutr_analyses::analyze::types::{Context, Finding, MAX_EVIDENCE, Outcome, RuleResult, Severity, Step, StepSource};
use cutr_model::{ApiCall, LoadOptions, Memcpy, ProcId, Sync, Trace, load};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(rel)
}

fn trace(files: &[&str]) -> Trace {
    let paths: Vec<PathBuf> = files.iter().map(|f| fixture(f)).collect();
    load(&paths, &LoadOptions::default()).unwrap()
}

/// One step per closed NVTX range whose name starts with `prefix`, as the core's `--step PREFIX` makes them.
fn steps_of(t: &Trace, prefix: &str) -> Vec<Step> {
    let ranks = t.job_ranks();
    let mut steps: Vec<Step> = t
        .ranges
        .iter()
        .filter(|r| r.closed() && t.names.get(r.name).starts_with(prefix))
        .map(|r| Step {
            proc: r.proc,
            rank: ranks[r.proc.index()].0,
            index: 0,
            name: t.names.get(r.name).into(),
            start: r.start,
            end: r.end,
        })
        .collect();
    steps.sort_by_key(|s| (s.proc, s.start));
    for i in 0..steps.len() {
        steps[i].index = steps[..i].iter().filter(|s| s.proc == steps[i].proc).count() as u32;
    }
    steps
}

fn rules(t: &Trace, prefix: Option<&str>) -> Vec<RuleResult> {
    let steps = prefix.map(|p| steps_of(t, p)).unwrap_or_default();
    let source = prefix.map_or(StepSource::None, |p| StepSource::NvtxPrefix(p.to_string()));
    host::rules(&Context { trace: t, steps: &steps, step_source: &source })
}

fn found(r: &RuleResult) -> &Finding {
    match &r.outcome {
        Outcome::Found(f) => f,
        other => panic!("{}: {other:?}", r.rule),
    }
}

fn clean(r: &RuleResult) -> &str {
    match &r.outcome {
        Outcome::Clean { checked } => checked,
        other => panic!("{}: {other:?}", r.rule),
    }
}

fn cannot_judge(r: &RuleResult) -> &str {
    match &r.outcome {
        Outcome::CannotJudge { why } => why,
        other => panic!("{}: {other:?}", r.rule),
    }
}

/// (count, union ns, severity, evidence correlation ids) of a finding.
fn figures(f: &Finding) -> (u64, u64, Severity, Vec<u32>) {
    (f.count, f.time_ns, f.severity, f.events.iter().map(|e| e.correlation).collect())
}

const RULES: [&str; 5] = ["sync_copy_in_step", "pageable_copy_in_step", "sync_in_step", "tiny_kernels", "straggler"];

/// cuda_workload's thread B (workloads/cuda/EXPECTED.md) does, in each of its 10 `B:iter` ranges, a pageable HtoD
/// `cudaMemcpy`, a DtoD `cudaMemcpy` and a pinned DtoH `cudaMemcpy` (3 synchronous copies), a pageable DtoH
/// `cudaMemcpyAsync` (2 pageable copies with the first), a `cudaEventSynchronize` and a `cudaStreamSynchronize`.
/// Thread A, running beside it, copies only pinned memory asynchronously, but its 10 `cudaStreamSynchronize`
/// calls fall inside B's steps (a step is a window of its process, every thread).
#[test]
fn cuda_workloads_copies_and_syncs_inside_b_iter_steps() {
    let t = trace(&["cuda_workload.cutr"]);
    let r = rules(&t, Some("B:iter"));
    assert_eq!(r.iter().map(|r| r.rule).collect::<Vec<_>>(), RULES);

    let sync_copies = found(&r[0]);
    assert_eq!(figures(sync_copies), (30, 2_072_709, Severity::Medium, vec![157, 159, 160, 187, 189]));
    assert_eq!(sync_copies.summary, "30 synchronous copies inside steps held the host 2.073 ms (8.5% of step time)");
    let what: Vec<&str> = sync_copies.events.iter().map(|e| e.what.as_str()).collect();
    assert_eq!(
        what[..3],
        [
            "cudaMemcpy 1.0 MiB HtoD (Pageable -> Device)",
            "cudaMemcpy 1.0 MiB DtoD (Device -> Device)",
            "cudaMemcpy 1.0 MiB DtoH (Device -> Pinned)"
        ]
    );

    let pageable = found(&r[1]);
    assert_eq!(figures(pageable), (20, 2_875_131, Severity::High, vec![157, 184, 187, 282, 285]));
    assert_eq!(pageable.events[1].what, "cudaMemcpyAsync 1.0 MiB DtoH (Device -> Pageable)");
    assert!((pageable.share_pct - 11.7667).abs() < 1e-3, "{}", pageable.share_pct);

    let syncs = found(&r[2]);
    assert_eq!(figures(syncs), (30, 20_397_126, Severity::High, vec![169, 183, 185, 200, 211]));
    let names: Vec<&str> = syncs.events.iter().map(|e| e.what.as_str()).collect();
    assert_eq!(names[..2], ["cudaEventSynchronize", "cudaStreamSynchronize"]);

    assert_eq!(
        clean(&r[3]),
        "40 of 60 kernels launched inside 10 steps are tiny (under 10 us or their launch cost); their launches \
         took 2.3% of step time (fires at 50% of kernels and 5% of time)"
    );
    assert_eq!(cannot_judge(&r[4]), "one rank: give every rank's recording to compare them");
}

/// pytorch_loop copies its model and data to the GPU (54 pageable `cudaMemcpyAsync`) and synchronizes before its
/// 20 `step i` ranges, never inside them; inside them 241 kernels a step run, most of them tiny.
#[test]
fn pytorch_loops_steps_are_clean_of_copies_and_syncs_and_full_of_tiny_kernels() {
    let t = trace(&["pytorch_loop.cutr"]);
    let r = rules(&t, Some("step "));
    assert_eq!(clean(&r[0]), "0 copies inside 20 steps: none synchronous");
    assert_eq!(clean(&r[1]), "0 copies inside 20 steps: none pageable");
    assert_eq!(
        clean(&r[2]),
        "0 synchronizations inside 20 steps blocked the host 0.000 ms (0.00% of step time, under 1%)"
    );
    let tiny = found(&r[3]);
    assert_eq!((tiny.count, tiny.time_ns, tiny.severity), (3_811, 27_084_962, Severity::High));
    assert!((tiny.share_pct - 12.8973).abs() < 1e-3, "{}", tiny.share_pct);
    assert!(
        tiny.summary.starts_with(
            "3811 tiny kernels (79.1% of the steps' kernels, 14.476 ms on the GPU): launching them took 27.085 ms \
             (12.9% of step time); most: at::native::elementwise_kernel x560, at::native::reduce_kernel x340, "
        ),
        "{}",
        tiny.summary
    );
    assert_eq!(tiny.events.len(), MAX_EVIDENCE);
    assert_eq!(tiny.events[0].correlation, 18_877);
    assert_eq!(cannot_judge(&r[4]), "one rank: give every rank's recording to compare them");
}

/// The straggler is the rank `stats --by-rank --step "iter "` names: rank 0 of fixtures/allreduce, slowest in 49 of
/// the 50 steps, whose first all-reduce kernel started after rank 1's in each of those.
#[test]
fn the_straggler_is_the_rank_stats_by_rank_names() {
    let t = trace(&["allreduce/allreduce-588.cutr", "allreduce/allreduce-589.cutr"]);
    let by_rank = cutr_analyses::ranks::by_rank(&t, Some("iter "));
    assert_eq!(by_rank.stragglers, [(0, 49), (1, 1)]);
    let r = rules(&t, Some("iter "));
    let s = found(&r[4]);
    assert_eq!(figures(s), (49, 4_939_666, Severity::High, vec![6230, 6299, 6364, 6429, 6494]));
    assert!((s.share_pct - 39.8122).abs() < 1e-3, "{}", s.share_pct);
    assert_eq!(
        s.summary,
        "rank 0 was the slowest in 49 of 50 steps (as stats --by-rank names it); the other ranks lost 4.940 ms \
         (39.8% of step time); its first collective started last in 49 of those steps"
    );
    assert_eq!(
        s.events[2].what,
        "iter 2: rank 0 0.343 ms, rank 1 0.190 ms; its first collective started 0.226 ms after the first rank's"
    );
    assert!(s.events.iter().all(|e| e.proc == ProcId(0)), "rank 0 is the first file");
    // The other rules on the same job: no copies in the loop, a few short syncs.
    assert_eq!(clean(&r[0]), "0 copies inside 100 steps: none synchronous");
    assert_eq!(
        clean(&r[2]),
        "33 synchronizations inside 100 steps blocked the host 0.069 ms (0.35% of step time, under 1%)"
    );
}

/// Without steps, every rule says it cannot judge, and why.
#[test]
fn without_steps_every_rule_cannot_judge() {
    let t = trace(&["launch_loop_100k.cutr"]);
    for r in rules(&t, None) {
        assert_eq!(cannot_judge(&r), "no steps: give --step PREFIX (the NVTX ranges that are steps)", "{}", r.rule);
    }
    // Asked for steps the recording does not have.
    let t = trace(&["cuda_workload.cutr"]);
    let r = rules(&t, Some("no such range"));
    for r in &r {
        assert_eq!(
            cannot_judge(r),
            "no steps: the step ranges asked for are not in the recording (give --step PREFIX)",
            "{}",
            r.rule
        );
    }
}

/// The torchrun job (a launcher's recording without GPU work beside the two ranks) names the same straggler too.
#[test]
fn the_torchrun_jobs_straggler_is_stats_by_ranks_too() {
    let t = trace(&[
        "allreduce_torchrun/ar-3326.cutr",
        "allreduce_torchrun/ar-3373.cutr",
        "allreduce_torchrun/ar-3374.cutr",
    ]);
    let by_rank = cutr_analyses::ranks::by_rank(&t, Some("iter "));
    let r = rules(&t, Some("iter "));
    assert_eq!(by_rank.stragglers, [(0, 12), (1, 8)]);
    let s = found(&r[4]);
    assert_eq!(figures(s), (12, 127_081, Severity::Medium, vec![0, 6299, 6494, 6624, 6689]));
    assert!(
        s.summary.starts_with("rank 0 was the slowest in 12 of 20 steps (as stats --by-rank names it)"),
        "{}",
        s.summary
    );
    // Rank 0 is the second file (the launcher's recording is the first); in iter 0 its collective was not last.
    assert!(s.events.iter().all(|e| e.proc == ProcId(1)));
    assert_eq!(s.events[0].what, "iter 0: rank 0 0.400 ms, rank 1 0.375 ms");
}

/// A hand-made trace without API records (the rules fall back on the GPU rows' own times): what counts as inside a
/// step, what is cut at its end, what overlaps once, and what is left out.
#[test]
fn edge_cases_of_a_hand_made_trace() {
    let mut t = Trace::default();
    t.processes.push(Default::default());
    let copy = |start: u64, end: u64, correlation: u32, flags: u8, src_kind: u8, graph_id: u32| Memcpy {
        proc: ProcId(0),
        start,
        end,
        device: 0,
        context: 1,
        stream: 7,
        correlation,
        bytes: 1 << 20,
        copy_kind: 1,
        src_kind,
        dst_kind: 3,
        flags,
        graph_id,
        graph_node_id: 0,
        peer: None,
    };
    t.memcpys = vec![
        copy(50, 150, 1, 0, 2, 0),      // starts before the step: outside
        copy(1_100, 1_300, 2, 0, 1, 0), // synchronous and pageable, 200 ns
        copy(1_200, 1_250, 3, 0, 2, 0), // synchronous, inside the one before: the union stays 200 ns
        copy(1_900, 2_500, 4, 1, 1, 0), // async but pageable, cut at the step's end: 100 ns
        copy(1_400, 1_500, 5, 0, 2, 9), // a graph's copy: never synchronous
    ];
    let sync = |start: u64, end: u64, correlation: u32, sync_type: u32| Sync {
        proc: ProcId(0),
        start,
        end,
        sync_type,
        correlation,
        context: 1,
        stream: 7,
        event: u32::MAX,
    };
    t.syncs = vec![
        sync(1_000, 1_600, 10, 3), // stream syncs on two threads overlapping: 1,000..1,800 once
        sync(1_500, 1_800, 11, 4),
        sync(1_700, 1_900, 12, 2), // a stream's wait on an event blocks no host thread
        sync(2_000, 2_100, 13, 3), // after the step
    ];
    let call = |start: u64, end: u64, correlation: u32, cbid: u32, driver: bool| ApiCall {
        proc: ProcId(0),
        start,
        end,
        pid: 1,
        tid: 2,
        correlation,
        cbid,
        driver,
        return_value: 0,
    };
    t.apis = vec![
        call(1_000, 1_600, 10, 131, false), // the call of the first sync record: counted once, from the record
        call(1_950, 1_990, 20, 131, false), // cudaStreamSynchronize without a record...
        call(1_955, 1_985, 20, 126, true),  // ...and the cuStreamSynchronize beneath it: one synchronization
        call(1_960, 1_970, 21, 211, false), // cudaLaunchKernel: not a synchronization
    ];
    let step = Step { proc: ProcId(0), rank: 0, index: 0, name: "step 0".into(), start: 1_000, end: 2_000 };
    let source = StepSource::NvtxPrefix("step ".into());
    let r = host::rules(&Context { trace: &t, steps: std::slice::from_ref(&step), step_source: &source });
    assert_eq!(figures(found(&r[0])), (2, 200, Severity::High, vec![2, 3]));
    assert_eq!(found(&r[0]).events[0].what, "copy 1.0 MiB HtoD (Pageable -> Device)");
    let pageable = found(&r[1]);
    assert_eq!(figures(pageable), (2, 300, Severity::High, vec![2, 4]));
    assert!((pageable.share_pct - 30.0).abs() < 1e-9);
    let syncs = found(&r[2]);
    assert_eq!(figures(syncs), (3, 840, Severity::High, vec![10, 11, 20]));
    let what: Vec<&str> = syncs.events.iter().map(|e| e.what.as_str()).collect();
    assert_eq!(what, ["Stream Sync", "Context Sync", "cudaStreamSynchronize"]);
    assert_eq!(
        clean(&r[3]),
        "0 of 0 kernels launched inside 1 steps are tiny (under 10 us or their launch cost); \
         their launches took 0.0% of step time (fires at 50% of kernels and 5% of time)"
    );
    assert_eq!(cannot_judge(&r[4]), "one rank: give every rank's recording to compare them");
}
