//! `stats --by-rank` streamed over the recordings' chunks against the report of the whole loaded trace: every
//! figure equal (GPU busy time settled window by window, NCCL time by demangled name, steps summed per rank), on
//! the two-rank all-reduce jobs and on generated ranks read one chunk a window.

use std::path::PathBuf;

use cutr_analyses::ranks::{RankReport, by_rank, by_rank_streaming};
use cutr_model::stream::StreamOptions;
use cutr_model::{LoadOptions, load};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

/// The loaded report and the streamed one (its `stream` line taken off, kept apart), windows of `window_bytes`.
fn whole_and_streamed(paths: &[PathBuf], step: &str, window_bytes: u64) -> (RankReport, RankReport, (u64, u64)) {
    let whole = by_rank(&load(paths, &LoadOptions::default()).unwrap(), Some(step));
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let opts = StreamOptions { window_bytes, ..Default::default() };
    let mut got = by_rank_streaming(paths, &readers, Some(step), &opts).unwrap();
    let st = got.report.stream.take().unwrap();
    assert_eq!(got.late_rows, 0);
    (whole, got.report, (st.chunks, st.windows))
}

/// (rank, kernels, kernel ns, NCCL ns, GPU busy ns) of each rank.
fn rows(r: &RankReport) -> Vec<(u32, u64, u64, u64, u64)> {
    r.ranks.iter().map(|x| (x.rank, x.kernels, x.kernel_ns, x.nccl_ns, x.gpu_busy_ns)).collect()
}

#[test]
fn the_all_reduce_jobs_stream_to_their_loaded_reports() {
    let two = [fixture("allreduce/allreduce-588.cutr"), fixture("allreduce/allreduce-589.cutr")];
    for window_bytes in [1, 256 << 20] {
        let (w, s, (chunks, windows)) = whole_and_streamed(&two, "iter ", window_bytes);
        assert_eq!(w, s);
        assert_eq!((chunks, windows > 1), (13, true));
        assert_eq!(
            rows(&s),
            [(0, 228, 10_768_887, 9_776_380, 10_990_292), (1, 228, 16_880_660, 15_886_432, 17_104_017)]
        );
        assert_eq!((s.steps.len(), &s.stragglers[..]), (50, &[(0, 49), (1, 1)][..]));
        assert_eq!((s.steps[0].step.as_str(), &s.steps[0].per_rank[..]), ("iter 0", &[(0, 718_425), (1, 717_846)][..]));
    }
    // A launcher's recording without GPU work beside the two ranks has no row.
    let torchrun: Vec<PathBuf> = ["ar-3326.cutr", "ar-3373.cutr", "ar-3374.cutr"]
        .iter()
        .map(|f| fixture(&format!("allreduce_torchrun/{f}")))
        .collect();
    let (w, s, _) = whole_and_streamed(&torchrun, "iter ", 1);
    assert_eq!(w, s);
    assert_eq!(rows(&s), [(0, 108, 2_471_449, 2_009_367, 2_696_317), (1, 108, 35_884_174, 35_421_610, 36_111_917)]);
    assert_eq!((s.steps.len(), &s.stragglers[..]), (20, &[(0, 12), (1, 8)][..]));
}

#[test]
fn generated_ranks_read_one_chunk_a_window_stream_to_their_loaded_report() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..2)
        .map(|rank| {
            let p = dir.path().join(format!("rank{rank}.cutr"));
            let opts = cutr_synth::SynthOptions {
                records: 300_000,
                buffer_bytes: 256 << 10,
                rank: Some((rank, 2)),
                seed: rank as u64 + 1,
                ..Default::default()
            };
            cutr_synth::write_file(&p, opts).unwrap();
            p
        })
        .collect();
    let (w, s, (chunks, windows)) = whole_and_streamed(&paths, "step ", 1);
    assert_eq!(w, s);
    assert_eq!((chunks, windows), (198, 198));
    assert_eq!(
        rows(&s),
        [(0, 81_128, 827_804_533, 108_898_680, 1_208_248_570), (1, 81_128, 828_950_431, 108_779_880, 1_209_480_995)]
    );
    assert_eq!((s.steps.len(), &s.stragglers[..]), (2_690, &[(1, 1_394), (0, 1_296)][..]));
    assert_eq!((s.steps[0].step.as_str(), &s.steps[0].per_rank[..]), ("step 1", &[(0, 492_821), (1, 499_635)][..]));
    // GPU busy as the union of each rank's kernels, copies and memsets, merged here from the loaded rows.
    let t = load(&paths, &LoadOptions::default()).unwrap();
    for (rank, row) in s.ranks.iter().enumerate() {
        let mine = |p: cutr_model::ProcId| p.index() == rank;
        let mut iv: Vec<(u64, u64)> = t.kernels.iter().filter(|k| mine(k.proc)).map(|k| (k.start, k.end)).collect();
        iv.extend(t.memcpys.iter().filter(|m| mine(m.proc)).map(|m| (m.start, m.end)));
        iv.extend(t.memsets.iter().filter(|m| mine(m.proc)).map(|m| (m.start, m.end)));
        iv.sort_unstable();
        let (mut busy, mut reach) = (0u64, 0u64);
        for (a, b) in iv {
            busy += b.saturating_sub(a.max(reach));
            reach = reach.max(b);
        }
        assert_eq!(row.gpu_busy_ns, busy, "rank {rank}");
    }
}
