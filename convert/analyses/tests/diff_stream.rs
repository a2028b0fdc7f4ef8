//! `diff` with each run streamed over its chunks against the same diff of the runs loaded whole: on the recorded
//! fixture pairs the diff tests use and on two generated 300k-record recordings, rows, counts, moments and
//! verdicts equal to the last bit (the sums are integers); numbered NVTX families folded the same way on both
//! paths; what a short correlation horizon loses counted.

use std::path::{Path, PathBuf};

use cutr_analyses::diff::{
    ByRankReport, DiffOptions, Report, StreamedSide, Verdict, diff, diff_by_rank, diff_by_rank_streaming,
    diff_streaming, render_text,
};
use cutr_format::Reader;
use cutr_model::stream::StreamOptions;
use cutr_model::{LoadOptions, Trace, load};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

fn load_each(paths: &[PathBuf]) -> Vec<Trace> {
    paths.iter().map(|p| load(std::slice::from_ref(p), &LoadOptions::default()).unwrap()).collect()
}

fn open_each(paths: &[PathBuf]) -> Vec<Reader> {
    paths.iter().map(|p| Reader::open(p).unwrap()).collect()
}

/// The loaded diff and the streamed one (its `stream` part taken out, returned beside it).
fn whole_and_streamed(base: &[PathBuf], new: &[PathBuf], opts: &DiffOptions, so: &StreamOptions) -> (Report, Report) {
    let whole = diff(&load_each(base), &load_each(new), opts);
    let (br, nr) = (open_each(base), open_each(new));
    let side = |paths, readers| StreamedSide { paths, readers };
    let (streamed, traces) = diff_streaming(side(base, &br), side(new, &nr), opts, so).unwrap();
    assert_eq!(traces.len(), base.len() + new.len());
    (whole, streamed)
}

/// Every figure of the report equal; the streamed one says how it was streamed.
fn same(whole: &Report, streamed: &Report) {
    let mut s = streamed.clone();
    let stream = s.stream.take().expect("a streamed report says so");
    assert_eq!(stream.runs, whole.base_files.len() + whole.new_files.len());
    assert_eq!(whole.stream, None);
    assert_eq!(whole, &s, "{}\n---\n{}", render_text(whole, true), render_text(&s, true));
}

fn paths(names: &[&str]) -> Vec<PathBuf> {
    names.iter().map(|n| fixture(n)).collect()
}

#[test]
fn streamed_diff_equals_the_loaded_one_on_the_recorded_pairs() {
    let so = StreamOptions::default();
    let opts = DiffOptions::default();
    // The regression pair, two runs a side and one: the heavy kernel and the ranges around it regress.
    let base = paths(&["regress/base_a.cutr", "regress/base_b.cutr"]);
    let new = paths(&["regress/heavy_a.cutr", "regress/heavy_b.cutr"]);
    let (w, s) = whole_and_streamed(&base, &new, &opts, &so);
    same(&w, &s);
    assert_eq!(s.verdict, Verdict::Regression);
    let compute = s.rows.iter().find(|r| r.name == "A:compute").unwrap();
    assert_eq!((compute.verdict, compute.base_count.clone()), (Verdict::Regression, vec![10, 10]));
    let (w, s) = whole_and_streamed(&base[..1], &new[..1], &opts, &so);
    same(&w, &s);
    // 3 unchanged runs against 3 with a kernel 10% slower; template normalization and a judged span on top.
    let aa = paths(&["diff/aa-1.cutr", "diff/aa-2.cutr", "diff/aa-3.cutr"]);
    let p10 = paths(&["diff/p10-1.cutr", "diff/p10-2.cutr", "diff/p10-3.cutr"]);
    let (w, s) = whole_and_streamed(&aa, &p10, &opts, &so);
    same(&w, &s);
    assert_eq!(s.verdict, Verdict::Regression);
    let opts = DiffOptions {
        normalize_templates: true,
        fail_on: vec![cutr_analyses::diff::FailOn::Span, cutr_analyses::diff::FailOn::Count],
        min_share_pct: 0.0,
        ..DiffOptions::default()
    };
    let (w, s) = whole_and_streamed(&aa[..1], &p10[..2], &opts, &so);
    same(&w, &s);
    // A PyTorch loop against itself, windows of one chunk: NVTX ranges over many windows.
    let torch = paths(&["pytorch_loop.cutr"]);
    let one_chunk = StreamOptions { window_bytes: 1, ..StreamOptions::default() };
    let (w, s) = whole_and_streamed(&torch, &torch, &DiffOptions::default(), &one_chunk);
    same(&w, &s);
    assert_eq!(s.verdict, Verdict::Neutral);
    assert!(s.rows.iter().filter(|r| r.section == "nvtx").count() > 0);
    // Unified memory: the figures per run equal.
    let um = paths(&["um_workload.cutr"]);
    let (w, s) = whole_and_streamed(&um, &um, &DiffOptions::default(), &one_chunk);
    same(&w, &s);
    assert_eq!(s.um_changes.len(), 9);
}

#[test]
fn streamed_diff_by_rank_equals_the_loaded_one() {
    let t = |f: &str| fixture(&format!("allreduce_torchrun/{f}.cutr"));
    let base = vec![t("ar-3326"), t("ar-3373"), t("ar-3374")];
    let new = vec![t("ar-3374"), t("ar-3373")];
    let opts = DiffOptions::default();
    let whole = diff_by_rank(&load_each(&base), &load_each(&new), &opts);
    let (br, nr) = (open_each(&base), open_each(&new));
    let (streamed, _) = diff_by_rank_streaming(
        StreamedSide { paths: &base, readers: &br },
        StreamedSide { paths: &new, readers: &nr },
        &opts,
        &StreamOptions::default(),
    )
    .unwrap();
    let strip = |mut r: ByRankReport| {
        r.ranks.iter_mut().for_each(|x| x.report.stream = None);
        r
    };
    assert_eq!(streamed.ranks.len(), 2);
    assert_eq!(whole, strip(streamed));
}

/// 300k records in 256 KiB buffers (99 activity chunks), the run loop's durations drawn from `seed`.
fn generated(dir: &Path, seed: u64) -> (PathBuf, cutr_synth::SynthTruth) {
    let p = dir.join(format!("g{seed}.cutr"));
    let opts = cutr_synth::SynthOptions { records: 300_000, buffer_bytes: 256 << 10, seed, ..Default::default() };
    let truth = cutr_synth::write_file(&p, opts).unwrap();
    (p, truth)
}

#[test]
fn streamed_diff_equals_the_loaded_one_on_generated_recordings_and_folds_the_steps() {
    let dir = tempfile::tempdir().unwrap();
    let (a, ta) = generated(dir.path(), 1);
    let (b, tb) = generated(dir.path(), 2);
    // Windows of at most 600 KiB of records: two or three chunks, ~50 windows a run.
    let so = StreamOptions { window_bytes: 600 << 10, ..StreamOptions::default() };
    let (w, s) = whole_and_streamed(std::slice::from_ref(&a), std::slice::from_ref(&b), &DiffOptions::default(), &so);
    same(&w, &s);
    assert_eq!(s.stream.as_ref().unwrap().launches_out_of_horizon, 0);
    // Each recording's "step N" ranges, hundreds of distinct numbers: one row on both paths, each step an instance.
    assert_eq!(s.folded_families, ["step <n>"]);
    let steps = s.rows.iter().find(|r| r.name == "step <n>").unwrap();
    assert_eq!((steps.base_count.clone(), steps.new_count.clone()), (vec![ta.steps], vec![tb.steps]));
    assert_eq!((ta.steps, tb.steps), (2690, 2690));
    assert!(!s.rows.iter().any(|r| r.name.starts_with("step ") && r.name != "step <n>"));
    let text = render_text(&s, false);
    assert!(
        text.contains(
            "NVTX ranges with numbered names, more than 64 of a family: one row each, every member an instance: step <n>"
        ),
        "{text}"
    );
    // The same recording on both sides: neutral, every delta 0, still equal to the loaded diff.
    let (w, s) = whole_and_streamed(std::slice::from_ref(&a), std::slice::from_ref(&a), &DiffOptions::default(), &so);
    same(&w, &s);
    assert_eq!(s.verdict, Verdict::Neutral);
    assert!(s.rows.iter().all(|r| r.delta_ns == 0.0));
}

/// An NVTX range instance: start, end, thread, GPU ns and ops launched inside.
type Instance = (u64, u64, u32, u64, u64);

/// Each closed NVTX range instance with its GPU work as the stream hands it on, sorted, against the loaded
/// trace's `gpu_work_by_range` of its closed ranges; and the GPU work the stream lost to its horizon.
fn instances(p: &Path, so: &StreamOptions) -> (Vec<Instance>, Vec<Instance>, u64) {
    let t = load(&[p.to_path_buf()], &LoadOptions::default()).unwrap();
    let key = |tid: u32, start: u64, end: u64, ns: u64, ops: u64| (start, end, tid, ns, ops);
    let mut whole: Vec<_> = t
        .ranges
        .iter()
        .zip(t.gpu_work_by_range())
        .filter(|(r, _)| r.closed())
        .map(|(r, (ns, ops))| key(r.tid, r.start, r.end, ns, ops))
        .collect();
    let mut streamed = Vec::new();
    let readers = open_each(&[p.to_path_buf()]);
    let (_, end) = cutr_model::stream::stream_readers_with_range_work(&[p.to_path_buf()], &readers, so, |_, _, b| {
        streamed.extend(b.range_work.iter().map(|w| key(w.range.tid, w.range.start, w.range.end, w.gpu_ns, w.gpu_ops)))
    })
    .unwrap();
    whole.sort_unstable();
    streamed.sort_unstable();
    (whole, streamed, end.launches_out_of_horizon)
}

#[test]
fn each_range_instance_gets_the_gpu_work_a_loaded_trace_gives_it() {
    let one_chunk = StreamOptions { window_bytes: 1, ..StreamOptions::default() };
    // Recorded: a PyTorch loop, the regression pair's nested ranges, a training loop's NVTX annotations.
    for (f, n) in [
        ("pytorch_loop.cutr", PYTORCH_INSTANCES),
        ("regress/heavy_a.cutr", 106),
        ("annotations/train_nvtx.cutr", TRAIN_INSTANCES),
    ] {
        let (w, s, lost) = instances(&fixture(f), &one_chunk);
        assert_eq!((w.len(), s.len(), lost), (n, n, 0), "{f}");
        assert_eq!(w, s, "{f}");
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, truth) = generated(dir.path(), 1);
    let (w, s, lost) = instances(&a, &one_chunk);
    assert_eq!(w, s);
    let ops = |v: &[Instance]| v.iter().map(|x| x.4).sum::<u64>();
    // Each op counts once in every instance around its launch: the same sum as `stats`' NVTX GPU ops.
    assert_eq!((w.len() as u64, lost, ops(&w)), (INSTANCES, 0, 156_717));
    assert_eq!(truth.steps, 2690);
    // A horizon of 10 launches loses 826 ops' launches (as `stats --stream` counts them): they are in no instance,
    // and every instance is still handed on.
    let (_, s, lost) = instances(&a, &StreamOptions { horizon: 10, window_bytes: 1 });
    assert_eq!((s.len() as u64, lost, ops(&s)), (INSTANCES, 826, 155_127));
}

const INSTANCES: u64 = 8070;
const PYTORCH_INSTANCES: usize = 92;
const TRAIN_INSTANCES: usize = 20;

#[test]
fn a_short_horizon_is_counted_in_the_report_and_keeps_the_kernel_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = generated(dir.path(), 1);
    let one = std::slice::from_ref(&a);
    let short = StreamOptions { horizon: 10, window_bytes: 1 };
    let (w, s) = whole_and_streamed(one, one, &DiffOptions::default(), &short);
    let st = s.stream.clone().unwrap();
    assert_eq!((st.launch_horizon, st.launches_out_of_horizon), (10, 2 * 826));
    // Kernels, copies and the GPU total do not depend on the horizon; the steps lose the work they lost.
    type Figures = Vec<(String, Vec<u64>, Vec<u64>)>;
    let rows = |r: &Report, section: &str| -> Figures {
        let rows = r.rows.iter().filter(|x| x.section == section);
        rows.map(|x| (x.name.clone(), x.base_ns.clone(), x.base_count.clone())).collect()
    };
    for section in ["kernel", "total"] {
        assert_eq!(rows(&w, section), rows(&s, section));
    }
    let step = |r: &Report| r.rows.iter().find(|x| x.name == "step <n>").map(|x| (x.base_count[0], x.base_ns[0]));
    let ((wn, wns), (sn, sns)) = (step(&w).unwrap(), step(&s).unwrap());
    assert_eq!((wn, sn), (2690, 2690));
    assert!(sns < wns, "{sns} {wns}");
    let text = render_text(&s, false);
    assert!(text.contains("whose launch fell out of the last 10 launches of their run: 1,652"), "{text}");
}
