//! `stats` streamed over a recording's chunks against the same report of the whole loaded trace, on generated
//! recordings: every exact figure equal, sketch medians within their stated error, and what a short correlation
//! horizon loses counted.

use std::path::PathBuf;

use cutr_analyses::stats::{self, MemoryOps, RangeStats, Stats, StatsOptions, Summary};
use cutr_model::stream::StreamOptions;
use cutr_model::{LoadOptions, load};

/// 300k records in 256 KiB buffers: 99 activity chunks of ~256 KiB of records each.
fn generated(dir: &std::path::Path) -> PathBuf {
    generated_rank(dir, None)
}

fn generated_rank(dir: &std::path::Path, rank: Option<(u32, u32)>) -> PathBuf {
    let p = dir.join(format!("g{}.cutr", rank.map_or(0, |r| r.0)));
    let opts = cutr_synth::SynthOptions { records: 300_000, buffer_bytes: 256 << 10, rank, ..Default::default() };
    cutr_synth::write_file(&p, opts).unwrap();
    p
}

/// The whole report and the streamed one, with `cap` values kept per row, a horizon of `horizon` launches and
/// windows of at most `window_bytes` of records.
fn whole_and_streamed(p: &PathBuf, cap: usize, horizon: usize, window_bytes: u64) -> (Stats, Stats) {
    whole_and_streamed_files(std::slice::from_ref(p), cap, horizon, window_bytes)
}

fn whole_and_streamed_files(paths: &[PathBuf], cap: usize, horizon: usize, window_bytes: u64) -> (Stats, Stats) {
    let opts = StatsOptions::default();
    let whole = stats::compute(&load(paths, &LoadOptions::default()).unwrap(), &opts);
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let stream_opts = StreamOptions { horizon, window_bytes, ..Default::default() };
    let (streamed, _) = stats::compute_streaming(paths, &readers, &opts, cap, &stream_opts).unwrap();
    (whole, streamed)
}

/// Every row of every streamed section equals the whole one's (medians within the sketch's error past `cap`).
fn same_report(w: &Stats, s: &Stats, cap: usize) {
    let rows = |x: &Stats| (x.kernels.len(), x.api.len(), x.memory_ops.len(), x.nvtx.len());
    assert_eq!(rows(w), rows(s));
    for (a, b) in w.kernels.iter().zip(&s.kernels) {
        same_summary(a, b, cap);
    }
    for (a, b) in w.api.iter().zip(&s.api) {
        same_summary(a, b, cap);
    }
    let mem = |m: &MemoryOps| (m.bytes, m.bandwidth_gbps);
    for (a, b) in w.memory_ops.iter().zip(&s.memory_ops) {
        same_summary(&a.time, &b.time, cap);
        assert_eq!(mem(a), mem(b));
    }
    let gpu = |r: &RangeStats| (r.gpu_ns, r.gpu_ops);
    for (a, b) in w.nvtx.iter().zip(&s.nvtx) {
        same_summary(&a.time, &b.time, cap);
        assert_eq!(gpu(a), gpu(b), "{}", a.time.name);
    }
    assert_eq!((w.gpu_time_ns, w.span_ns, &w.joins, &w.loss), (s.gpu_time_ns, s.span_ns, &s.joins, &s.loss));
}

/// The exact figures of a row equal; its median too under the cap, else within the sketch's relative error.
fn same_summary(w: &Summary, s: &Summary, cap: usize) {
    let exact = |x: &Summary| (x.name.clone(), x.count, x.total_ns, x.min_ns, x.max_ns, x.avg_ns, x.percent);
    assert_eq!(exact(w), exact(s));
    assert!((w.stddev_ns - s.stddev_ns).abs() <= 1e-6 * w.stddev_ns.max(1.0), "{}: {w:?} {s:?}", w.name);
    if w.count as usize <= cap {
        assert_eq!((w.median_ns, false), (s.median_ns, s.median_estimated), "{}", w.name);
    } else {
        assert!(s.median_estimated, "{}", w.name);
        let err = (s.median_ns - w.median_ns).abs() / w.median_ns;
        assert!(err <= stats::SKETCH_RELATIVE_ERROR, "{}: {} vs {}", w.name, s.median_ns, w.median_ns);
    }
}

#[test]
fn streamed_stats_equal_the_loaded_ones_on_a_generated_recording() {
    let dir = tempfile::tempdir().unwrap();
    let p = generated(dir.path());
    let cap = 1000;
    // At most 600 KiB of records a window: two chunks, three where they are short (on two workers or more).
    let (w, s) = whole_and_streamed(&p, cap, 1 << 20, 600 << 10);
    let st = s.stream.clone().unwrap();
    // NVTX: `forward`, `backward` and the 2,690 steps folded into `step <n>` (more than 64 numbered names), whose
    // 2,690 ranges are past the cap of 1,000: its median is the 25th estimated.
    assert_eq!((st.chunks, st.windows, st.estimated_rows, st.launches_out_of_horizon), (99, 49, 25, 0));
    let rows = |x: &Stats| (x.kernels.len(), x.api.len(), x.memory_ops.len(), x.nvtx.len());
    assert_eq!((rows(&s), s.gpu_time_ns, s.span_ns), ((11, 10, 4, 3), 1_313_934_596, 1_343_585_031));
    same_report(&w, &s, cap);
    // The text says it streamed, and marks the medians that are estimates.
    let text = stats::render_text(&s, stats::TextOptions { wide: true, width: None });
    assert!(text.contains("\nStreamed over 99 chunks in 49 windows (--stream;"), "{text}");
    assert!(!text.contains("not computed when streaming"), "{text}");
    let gemm = text.lines().find(|l| l.ends_with(GEMM)).unwrap();
    assert!(gemm.contains(" ~"), "{gemm}");
}

const GEMM: &str = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas";

#[test]
fn two_ranks_stream_as_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let paths = [generated_rank(dir.path(), Some((0, 2))), generated_rank(dir.path(), Some((1, 2)))];
    let (w, s) = whole_and_streamed_files(&paths, 1000, 1 << 20, 600 << 10);
    same_report(&w, &s, 1000);
    let st = s.stream.clone().unwrap();
    assert_eq!((st.chunks, st.launches_out_of_horizon, s.kernels[0].count), (198, 0, 43_040));
}

#[test]
fn a_short_horizon_counts_the_gpu_work_whose_launch_it_lost() {
    let dir = tempfile::tempdir().unwrap();
    let p = generated(dir.path());
    let ops = |x: &Stats| x.nvtx.iter().map(|r| r.gpu_ops).sum::<u64>();
    // One chunk a window: GPU records read a chunk after their launches still find them in a long horizon...
    let (w, s) = whole_and_streamed(&p, 1 << 16, 1 << 20, 1);
    let st = s.stream.clone().unwrap();
    assert_eq!((st.windows, st.launches_out_of_horizon, ops(&w), ops(&s)), (99, 0, 156_717, 156_717));
    // ...and lose them in a horizon of 10 launches: counted, and missing from the NVTX ranges' GPU work.
    let (_, s) = whole_and_streamed(&p, 1 << 16, 10, 1);
    let st = s.stream.clone().unwrap();
    assert_eq!((st.launches_out_of_horizon, ops(&s)), (826, 155_127));
    // Work whose call fell out is not counted as work without a call.
    assert_eq!(s.joins, w.joins);
}
