//! The streamed host rules equal the loaded ones on the fixtures of `tests/analyze_host_rules.rs`, at one chunk
//! per window and at default windows; a small `max_waiting` is warned of.

use std::path::PathBuf;

use cutr_model::stream::{Batch, StreamOptions, stream_readers_in};
use cutr_model::{ApiCall, Filter, LoadOptions, Memcpy, ProcId, Sync, Trace, load, open_inputs};

use super::super::super::findings::host;
use super::super::super::steps::find_steps;
use super::super::super::types::{Context, Outcome, RuleResult, Step, StepSource};
use super::super::FirstPass;
use super::HostRulesFold;

fn paths(files: &[&str]) -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    files.iter().map(|f| root.join(f)).collect()
}

/// The first pass as a load gives it: the steps and each process's GPU span.
fn first_pass(t: &Trace, prefix: Option<&str>) -> FirstPass {
    let (step_source, steps) = find_steps(t, prefix);
    let mut gpu_spans: Vec<Option<(u64, u64)>> = vec![None; t.processes.len()];
    let ops = t.kernels.iter().map(|k| (k.proc, k.start, k.end));
    let ops = ops.chain(t.memcpys.iter().map(|m| (m.proc, m.start, m.end)));
    for (proc, start, end) in ops.chain(t.memsets.iter().map(|m| (m.proc, m.start, m.end))) {
        let span = &mut gpu_spans[proc.index()];
        *span = Some(span.map_or((start, end), |(s, e)| (s.min(start), e.max(end))));
    }
    FirstPass::new(t.processes.len(), step_source, steps, gpu_spans)
}

fn loaded(t: &Trace, first: &FirstPass) -> Vec<RuleResult> {
    host::rules(&Context { trace: t, steps: &first.steps, step_source: &first.step_source })
}

fn streamed(files: &[PathBuf], first: &FirstPass, opts: &StreamOptions) -> (Vec<RuleResult>, Vec<String>) {
    let (readers, _) = open_inputs(files, false).unwrap();
    let mut fold: Option<HostRulesFold> = None;
    let (trace, _) = stream_readers_in(files, &readers, opts, &Filter::default(), |t, _, b| {
        fold.get_or_insert_with(|| HostRulesFold::new(t, first, opts)).batch(t, &b);
    })
    .unwrap();
    fold.unwrap_or_else(|| HostRulesFold::new(&trace, first, opts)).finish(&trace)
}

fn options(window_bytes: Option<u64>) -> StreamOptions {
    let opts = StreamOptions { hold_unlaunched: true, counter_feed: true, ..StreamOptions::default() };
    match window_bytes {
        Some(window_bytes) => StreamOptions { window_bytes, ..opts },
        None => opts,
    }
}

/// The loaded results of `files` with `--step prefix`, after checking that the stream gives them at one chunk per
/// window and at default windows, without warnings.
fn streamed_equals_loaded(files: &[&str], prefix: Option<&str>) -> Vec<RuleResult> {
    let files = paths(files);
    let t = load(&files, &LoadOptions::default()).unwrap();
    let first = first_pass(&t, prefix);
    let want = loaded(&t, &first);
    for window_bytes in [Some(1), None] {
        let (got, warnings) = streamed(&files, &first, &options(window_bytes));
        assert_eq!(got, want, "window_bytes {window_bytes:?}");
        assert_eq!(warnings, Vec::<String>::new(), "window_bytes {window_bytes:?}");
    }
    want
}

/// (rule, count, union ns) of each finding; clean and cannot-judge results as count and time 0.
fn figures(r: &[RuleResult]) -> Vec<(&'static str, u64, u64)> {
    r.iter()
        .map(|r| match &r.outcome {
            Outcome::Found(f) => (r.rule, f.count, f.time_ns),
            _ => (r.rule, 0, 0),
        })
        .collect()
}

#[test]
fn stream_host_rules_cuda_workload_b_iter() {
    let r = streamed_equals_loaded(&["cuda_workload.cutr"], Some("B:iter"));
    assert_eq!(
        figures(&r),
        [
            ("sync_copy_in_step", 30, 2_072_709),
            ("pageable_copy_in_step", 20, 2_875_131),
            ("sync_in_step", 30, 20_397_126),
            ("tiny_kernels", 0, 0),
            ("straggler", 0, 0)
        ]
    );
}

#[test]
fn stream_host_rules_pytorch_loop() {
    let r = streamed_equals_loaded(&["pytorch_loop.cutr"], Some("step "));
    assert_eq!(figures(&r)[3], ("tiny_kernels", 3_811, 27_084_962));
}

#[test]
fn stream_host_rules_allreduce_straggler() {
    let r = streamed_equals_loaded(&["allreduce/allreduce-588.cutr", "allreduce/allreduce-589.cutr"], Some("iter "));
    assert_eq!(figures(&r)[4], ("straggler", 49, 4_939_666));
}

#[test]
fn stream_host_rules_torchrun_straggler() {
    let files =
        ["allreduce_torchrun/ar-3326.cutr", "allreduce_torchrun/ar-3373.cutr", "allreduce_torchrun/ar-3374.cutr"];
    let r = streamed_equals_loaded(&files, Some("iter "));
    assert_eq!(figures(&r)[4], ("straggler", 12, 127_081));
}

#[test]
fn stream_host_rules_without_steps_cannot_judge() {
    for (file, prefix, why) in [
        ("launch_loop_100k.cutr", None, "no steps: give --step PREFIX (the NVTX ranges that are steps)"),
        (
            "cuda_workload.cutr",
            Some("no such range"),
            "no steps: the step ranges asked for are not in the recording (give --step PREFIX)",
        ),
    ] {
        let r = streamed_equals_loaded(&[file], prefix);
        assert!(r.iter().all(|r| r.outcome == Outcome::CannotJudge { why: why.to_string() }), "{file}: {r:?}");
    }
}

/// At most one open interval or waiting synchronization: the oldest are settled early, counted and warned of.
/// The counts stay the load's; the synchronizations' union comes out short of the load's 20,397,126 ns, as the
/// warnings say it may.
#[test]
fn stream_host_rules_capped_waiting_is_warned_of() {
    let files = paths(&["cuda_workload.cutr"]);
    let t = load(&files, &LoadOptions::default()).unwrap();
    let first = first_pass(&t, Some("B:iter"));
    let opts = StreamOptions { max_waiting: 1, ..options(Some(1)) };
    let (got, warnings) = streamed(&files, &first, &opts);
    assert_eq!(
        figures(&got)[..3],
        [
            ("sync_copy_in_step", 30, 2_072_709),
            ("pageable_copy_in_step", 20, 2_875_131),
            ("sync_in_step", 30, 19_139_557)
        ]
    );
    assert_eq!(
        warnings,
        [
            "host rules: 125 intervals or synchronizations were settled before the stream passed their time, as more \
             than 1 waited for it; what came later for them may be counted short (--no-stream computes it exactly)",
            "host rules: 11 events started inside time already settled (a launching call read long before its GPU \
             work, or a damaged file): their union time is counted only past it"
        ]
    );
}

/// Hand-made windows: a copy whose launching call was read a window before it, and started before that window's
/// edge, still merges with what it overlaps (the launch lag keeps it open); a synchronization whose call and
/// record come in different windows is counted once, from the record, named by the call.
#[test]
fn stream_host_rules_calls_read_windows_before_their_work() {
    let mut t = Trace::default();
    t.processes.push(Default::default());
    let step = Step { proc: ProcId(0), rank: 0, index: 0, name: "step 0".into(), start: 1_000, end: 2_000 };
    let first = FirstPass::new(1, StepSource::NvtxPrefix("step ".into()), vec![step], vec![Some((1_500, 1_800))]);
    let call = |start: u64, end: u64, correlation: u32, cbid: u32| ApiCall {
        proc: ProcId(0),
        start,
        end,
        pid: 1,
        tid: 2,
        correlation,
        cbid,
        driver: false,
        return_value: 0,
    };
    let copy = |start: u64, end: u64, correlation: u32| Memcpy {
        proc: ProcId(0),
        start,
        end,
        device: 0,
        context: 1,
        stream: 7,
        correlation,
        bytes: 1 << 20,
        copy_kind: 1,
        src_kind: 2,
        dst_kind: 3,
        flags: 0,
        graph_id: 0,
        graph_node_id: 0,
        peer: None,
    };
    // cbid 131: cudaStreamSynchronize; 31: cudaMemcpy.
    let (sync_call, early_call) = (call(1_100, 1_900, 10, 131), call(1_020, 1_060, 2, 31));
    let first_window = Batch {
        memcpys: vec![copy(1_500, 1_600, 1)],
        gpu_calls: vec![Some(call(1_100, 1_450, 1, 31))],
        apis: vec![sync_call, early_call],
        next_start: Some(1_700),
        ..Batch::default()
    };
    let sync = Sync {
        proc: ProcId(0),
        start: 1_750,
        end: 1_890,
        sync_type: 3,
        correlation: 10,
        context: 1,
        stream: 7,
        event: u32::MAX,
    };
    let second_window = Batch {
        memcpys: vec![copy(1_750, 1_800, 2)],
        gpu_calls: vec![Some(early_call)],
        syncs: vec![sync],
        next_start: None,
        ..Batch::default()
    };
    let mut fold = HostRulesFold::new(&t, &first, &options(None));
    fold.batch(&t, &first_window);
    fold.batch(&t, &second_window);
    let (r, warnings) = fold.finish(&t);
    assert_eq!(warnings, Vec::<String>::new());
    // 350 ns of the first call and 40 of the second, apart: 390 (had the first been settled at the edge, the second
    // would have come late and added nothing).
    assert_eq!(
        figures(&r)[..3],
        [("sync_copy_in_step", 2, 390), ("pageable_copy_in_step", 0, 0), ("sync_in_step", 1, 140)]
    );
    let Outcome::Found(syncs) = &r[2].outcome else { panic!("{:?}", r[2]) };
    assert_eq!((syncs.events[0].correlation, syncs.events[0].what.as_str()), (10, "cudaStreamSynchronize"));
}
