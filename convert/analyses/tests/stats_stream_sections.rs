//! The sections `stats --stream` settles as the stream passes their time (utilization's interval unions, the
//! memory section's peaks) and `--start/--end` windows streamed: equal to the whole loaded report, on fixtures and
//! on a generated recording read a few chunks at a time; a forged chunk header that hides early rows is warned
//! about.

use std::path::{Path, PathBuf};

use cutr_analyses::stats::{self, MemoryPeak, Section, Stats, StatsOptions, Summary, Utilization};
use cutr_model::stream::StreamOptions;
use cutr_model::{Filter, LoadOptions, load};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

/// The window [`start_ns`, `end_ns`] after the first record, as `--start`/`--end` make it.
fn window(paths: &[PathBuf], start_ns: Option<u64>, end_ns: Option<u64>) -> Filter {
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let first = cutr_model::timebase::first_record(&readers);
    Filter { start: start_ns.map(|s| first + s), end: end_ns.map(|e| first + e), kinds: Vec::new() }
}

/// The loaded report and the streamed one of `filter`'s window, windows of at most `window_bytes` of records.
fn whole_and_streamed(paths: &[PathBuf], filter: &Filter, window_bytes: u64) -> (Stats, Stats) {
    let opts = StatsOptions::default();
    let whole = stats::compute(&load(paths, &LoadOptions { filter: filter.clone() }).unwrap(), &opts);
    let readers: Vec<_> = paths.iter().map(|p| cutr_format::Reader::open(p).unwrap()).collect();
    let stream_opts = StreamOptions { window_bytes, ..Default::default() };
    let cap = stats::EXACT_VALUES_CAP;
    let (streamed, _) = stats::compute_streaming_in(paths, &readers, &opts, filter, cap, &stream_opts).unwrap();
    (whole, streamed)
}

/// Every figure the stream computes exactly equals the loaded one: utilization and peaks whole, the other
/// sections' exact columns (medians and deviations are `stats_stream.rs`'s), the NVTX rows' durations and the GPU
/// work launched inside them.
fn same_report(w: &Stats, s: &Stats) {
    assert_eq!(w.utilization, s.utilization);
    assert_eq!(w.memory_peaks, s.memory_peaks);
    let exact = |x: &Summary| (x.name.clone(), x.count, x.total_ns, x.min_ns, x.max_ns, x.avg_ns, x.percent);
    let rows = |x: &Stats| -> Vec<_> {
        let k = x.kernels.iter().map(exact);
        let a = x.api.iter().map(exact);
        let m = x.memory_ops.iter().map(|m| exact(&m.time));
        k.chain(a).chain(m).collect()
    };
    assert_eq!(rows(w), rows(s));
    let nvtx = |x: &Stats| -> Vec<_> { x.nvtx.iter().map(|r| (exact(&r.time), r.gpu_ns, r.gpu_ops)).collect() };
    assert_eq!(nvtx(w), nvtx(s));
    assert_eq!((w.gpu_time_ns, w.span_ns, &w.joins, &w.loss), (s.gpu_time_ns, s.span_ns, &s.joins, &s.loss));
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
}

/// (device, stream, busy, span, ops) of each utilization row.
fn busy(s: &Stats) -> Vec<(u32, Option<u32>, u64, u64, u64)> {
    s.utilization.iter().map(|u: &Utilization| (u.device, u.stream, u.busy_ns, u.span_ns, u.ops)).collect()
}

/// (device, memory, peak, allocations, frees, bytes at end) of each peak row.
fn peaks(s: &Stats) -> Vec<(u32, &'static str, u64, u64, u64, u64)> {
    s.memory_peaks
        .iter()
        .map(|m: &MemoryPeak| (m.device, m.memory, m.peak_bytes, m.allocations, m.frees, m.bytes_at_end))
        .collect()
}

#[test]
fn utilization_and_memory_peaks_stream_exactly_on_fixtures() {
    // One chunk a window (the smallest windows, the most frontier carried over), and the default.
    for window_bytes in [1, 256 << 20] {
        let paths = [fixture("pytorch_loop.cutr")];
        let (w, s) = whole_and_streamed(&paths, &Filter::default(), window_bytes);
        same_report(&w, &s);
        assert_eq!(
            busy(&s),
            [(0, None, 37_480_311, 5_334_201_452, 6_099), (0, Some(7), 37_480_311, 5_334_201_452, 6_099)]
        );
        assert_eq!(peaks(&s), [(0, "device", 348_841_256, 1_218, 0, 348_841_256), (0, "pinned host", 4, 1, 0, 4)]);
        let paths = [fixture("cuda_workload.cutr")];
        let (w, s) = whole_and_streamed(&paths, &Filter::default(), window_bytes);
        same_report(&w, &s);
        let streams = [
            (0, None, 21_499_838, 27_859_544, 169),
            (0, Some(7), 674_372, 27_859_544, 42),
            (0, Some(13), 232_544, 5_024_397, 20),
            (0, Some(14), 3_221_910, 9_189_970, 51),
            (0, Some(15), 20_252_246, 24_077_335, 40),
            (0, Some(16), 25_153, 27_324_724, 16),
        ];
        assert_eq!(busy(&s), streams);
        assert_eq!(peaks(&s), [(0, "device", 9_437_192, 10, 10, 0), (0, "pinned host", 2_097_152, 2, 2, 0)]);
        // Two GPUs.
        let paths = [fixture("counter_two_gpus.cutr")];
        let (w, s) = whole_and_streamed(&paths, &Filter::default(), window_bytes);
        same_report(&w, &s);
        let devices = [
            (0, None, 540_546_304, 1_472_958_683, 574),
            (0, Some(7), 540_546_304, 1_472_958_683, 574),
            (1, None, 547_105_307, 1_034_759_877, 574),
            (1, Some(15), 547_105_307, 1_034_759_877, 574),
        ];
        assert_eq!(busy(&s), devices);
        let st = s.stream.unwrap();
        assert!(st.not_computed.is_empty(), "{:?}", st.not_computed);
    }
}

#[test]
fn windows_stream_as_they_load() {
    let ms = 1_000_000;
    let paths = [fixture("pytorch_loop.cutr")];
    // The training steps (4.8-5.5 s after the first record), a window cutting through them, and open-ended ones.
    for (start, end, kernels) in [
        (Some(5_000 * ms), Some(5_200 * ms), 332),
        (Some(5_300 * ms), Some(5_310 * ms), 246),
        (Some(4_900 * ms), None, 5_651),
        (None, Some(5_100 * ms), 73),
    ] {
        let (w, s) = whole_and_streamed(&paths, &window(&paths, start, end), 1);
        same_report(&w, &s);
        assert_eq!(s.kernels.iter().map(|k| k.count).sum::<u64>(), kernels, "{start:?}-{end:?}");
    }
    let paths = [fixture("cuda_workload.cutr")];
    let (w, s) = whole_and_streamed(&paths, &window(&paths, Some(160 * ms), Some(170 * ms)), 1);
    same_report(&w, &s);
    assert_eq!((s.kernels.iter().map(|k| k.count).sum::<u64>(), s.nvtx.len(), s.span_ns), (24, 12, 24_523_106));
    let streams = [
        (0, None, 10_315_766, 11_956_650, 58),
        (0, Some(7), 204_446, 9_860_119, 19),
        (0, Some(13), 48_064, 810_919, 5),
        (0, Some(14), 959_526, 1_069_193, 15),
        (0, Some(15), 10_104_729, 11_871_498, 19),
    ];
    assert_eq!(busy(&s), streams);
}

/// 300k records in 256 KiB buffers with unified memory episodes (managed and device allocations on two GPUs).
fn generated(dir: &Path) -> PathBuf {
    let p = dir.join("g.cutr");
    let opts = cutr_synth::SynthOptions {
        records: 300_000,
        buffer_bytes: 256 << 10,
        unified_memory: true,
        ..Default::default()
    };
    cutr_synth::write_file(&p, opts).unwrap();
    p
}

#[test]
fn a_generated_recording_streams_its_utilization_peaks_and_windows_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let paths = [generated(dir.path())];
    let (w, s) = whole_and_streamed(&paths, &Filter::default(), 600 << 10);
    same_report(&w, &s);
    let streams = [
        (0, None, 1_446_552_341, 1_878_441_216, 84_986),
        (0, Some(7), 1_016_448_380, 1_878_441_216, 79_906),
        (0, Some(13), 426_655_356, 1_877_092_563, 2_540),
        (0, Some(21), 102_677_480, 1_876_972_500, 2_540),
    ];
    assert_eq!(busy(&s), streams);
    // Device allocations of 511 episodes, 508 freed; managed ones all freed.
    assert_eq!(peaks(&s), [(0, "device", 654_311_424, 511, 508, 620_756_992), (0, "managed", 8_388_608, 508, 508, 0)]);
    let st = s.stream.clone().unwrap();
    assert_eq!((st.chunks, st.windows), (99, 50));
    let ms = 1_000_000;
    let (w, s) = whole_and_streamed(&paths, &window(&paths, Some(300 * ms), Some(700 * ms)), 600 << 10);
    same_report(&w, &s);
    let streams = [
        (0, None, 308_404_784, 400_365_330, 18_088),
        (0, Some(7), 216_943_763, 400_365_330, 17_008),
        (0, Some(13), 90_700_079, 397_798_805, 540),
        (0, Some(21), 21_874_240, 397_655_968, 540),
    ];
    assert_eq!(busy(&s), streams);
    // Only the chunks overlapping the window are read.
    let st = s.stream.clone().unwrap();
    assert_eq!((st.chunks, st.windows, s.span_ns), (22, 11, 400_657_375));
}

#[test]
fn a_chunk_header_claiming_a_later_start_than_its_rows_is_warned_about() {
    use cutr_format::ChunkType;
    let dir = tempfile::tempdir().unwrap();
    let p = generated(dir.path());
    // The 10th activity chunk claims the time of the last: it is read after the chunks its rows came before.
    let mut bytes = std::fs::read(&p).unwrap();
    let chunks = cutr_synth::forge::chunks_of(&bytes, ChunkType::Activity);
    let last = chunks.last().unwrap().header.t_max;
    cutr_synth::forge::edit_header(&mut bytes, chunks[10].offset, |h| (h.t_min, h.t_max) = (last, last));
    std::fs::write(&p, &bytes).unwrap();
    let readers = [cutr_format::Reader::open(&p).unwrap()];
    let opts = StatsOptions { sections: vec![Section::Utilization, Section::Memory], ..Default::default() };
    let stream_opts = StreamOptions { window_bytes: 1, ..Default::default() };
    let (s, _) = stats::compute_streaming(std::slice::from_ref(&p), &readers, &opts, 1000, &stream_opts).unwrap();
    let want = [
        "utilization: 1726 GPU operations started before the chunk they were read in claims (a damaged or forged \
         chunk header): their time already settled is not counted again, so busy time may be understated \
         (--no-stream computes it exactly)",
        "memory in use: 20 allocation or free records came after later ones were summed (a damaged or forged chunk \
         header): summed out of time order, so a peak may be off (--no-stream computes it exactly)",
    ];
    assert_eq!(s.warnings, want);
    // Understated, never overstated: the loaded union of the same rows is larger.
    let whole = stats::compute(&load(&[p], &LoadOptions::default()).unwrap(), &opts);
    let device = |x: &Stats| x.utilization[0].busy_ns;
    assert_eq!((device(&s), device(&whole)), (1_431_870_252, 1_446_552_341));
}

/// NVTX rows get the GPU work of each closed range instance (nested ones included) once final, as a load counts
/// it: on graph_compile, whose ranges cross and 8 never close, a range still open when the recording ended adds
/// nothing to its name's row (before, the stream gave `forward` 11,241 ops: every launch under its unclosed
/// instance).
#[test]
fn nvtx_rows_get_only_closed_instances_work_where_ranges_cross_or_never_close() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/graph_compile.cutr");
    let opts = StatsOptions { sections: vec![Section::Nvtx], ..Default::default() };
    let whole = stats::compute(&load(std::slice::from_ref(&p), &LoadOptions::default()).unwrap(), &opts);
    let rows = |s: &Stats| {
        let mut v: Vec<(String, u64, u64, u64)> =
            s.nvtx.iter().map(|r| (r.time.name.clone(), r.time.count, r.gpu_ns, r.gpu_ops)).collect();
        v.sort();
        v
    };
    let readers = [cutr_format::Reader::open(&p).unwrap()];
    for window_bytes in [1, 256 << 20] {
        let stream_opts = StreamOptions { window_bytes, ..Default::default() };
        let (s, _) = stats::compute_streaming(std::slice::from_ref(&p), &readers, &opts, 1000, &stream_opts).unwrap();
        assert_eq!(rows(&s), rows(&whole));
    }
    let forward = rows(&whole).into_iter().find(|r| r.0 == "forward").unwrap();
    assert_eq!(forward, ("forward".to_string(), 5, 5_091_352, 336));
}
