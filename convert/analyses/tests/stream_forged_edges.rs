//! Chunk headers that claim earlier times than their rows (a damaged or forged file) keep a stream's edge
//! ([`cutr_model::stream::Batch::next_start`]) back, so that nothing it waits on would ever settle: a load's memory,
//! sorted again each window. Past `StreamOptions::max_waiting` rows the consumers settle their oldest anyway and
//! say so; busy time may then be understated, never overstated (a row that comes after its time was settled is
//! counted late), and the counts that do not wait are unchanged. Here the rows themselves are in time order (only
//! the headers lie), so settling early loses nothing: the figures stay the load's.

use std::path::{Path, PathBuf};

use cutr_analyses::ranks::{by_rank, by_rank_streaming};
use cutr_analyses::stats::{self, Section, Stats, StatsOptions};
use cutr_model::stream::StreamOptions;
use cutr_model::{LoadOptions, load};

/// 300k generated records with unified memory, every activity chunk's header claiming the first chunk's start.
fn forged(dir: &Path) -> PathBuf {
    let p = dir.join("forged.cutr");
    let opts = cutr_synth::SynthOptions {
        records: 300_000,
        buffer_bytes: 256 << 10,
        unified_memory: true,
        ..Default::default()
    };
    cutr_synth::write_file(&p, opts).unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    cutr_synth::forge::keep_edges_back(&mut bytes);
    std::fs::write(&p, &bytes).unwrap();
    p
}

fn streamed(p: &Path, opts: &StatsOptions, max_waiting: usize) -> Stats {
    let readers = [cutr_format::Reader::open(p).unwrap()];
    let stream_opts = StreamOptions { window_bytes: 1, max_waiting, ..Default::default() };
    stats::compute_streaming(&[p.to_path_buf()], &readers, opts, 1000, &stream_opts).unwrap().0
}

#[test]
fn a_kept_back_edge_settles_past_the_cap_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = forged(dir.path());
    let sections = vec![Section::Kernels, Section::Utilization, Section::Memory, Section::Um];
    let opts = StatsOptions { sections, ..Default::default() };
    let whole = stats::compute(&load(std::slice::from_ref(&p), &LoadOptions::default()).unwrap(), &opts);
    // Without a cap worth the name the answer is the load's: everything waits to the end.
    let all = streamed(&p, &opts, usize::MAX);
    let busy = |s: &Stats| s.utilization.iter().map(|u| u.busy_ns).collect::<Vec<_>>();
    assert_eq!(
        (busy(&all), &all.memory_peaks, &all.um, &all.warnings[..]),
        (busy(&whole), &whole.memory_peaks, &whole.um, &[][..])
    );
    // A cap of 100 rows: each consumer settles its oldest and says how many.
    let capped = streamed(&p, &opts, 100);
    let early: Vec<&str> = capped
        .warnings
        .iter()
        .filter(|w| w.contains("as more than 100 waited"))
        .map(|w| w.split(':').next().unwrap())
        .collect();
    assert_eq!(early, ["utilization", "memory in use", "unified memory"], "{:?}", capped.warnings);
    let settled: Vec<&str> = capped.warnings.iter().map(|w| w.split(" rows were").next().unwrap()).collect();
    assert_eq!(settled, ["utilization: 158774", "memory in use: 1927", "unified memory: 82622"]);
    assert_eq!(busy(&capped), [1_446_552_341, 1_016_448_380, 426_655_356, 102_677_480]);
    assert_eq!((busy(&capped), &capped.memory_peaks, &capped.um), (busy(&whole), &whole.memory_peaks, &whole.um));
    // Busy time understated, never overstated; the kernels' rows do not wait and are the load's.
    for (c, w) in capped.utilization.iter().zip(&whole.utilization) {
        assert!(c.busy_ns <= w.busy_ns, "{c:?} {w:?}");
    }
    assert_eq!(capped.utilization.len(), whole.utilization.len());
    assert_eq!(capped.kernels.iter().map(|k| k.count).sum::<u64>(), whole.kernels.iter().map(|k| k.count).sum::<u64>());
    assert_eq!(capped.um.events, whole.um.events);
}

#[test]
fn ranks_settle_past_the_cap_too() {
    let dir = tempfile::tempdir().unwrap();
    let p = forged(dir.path());
    let whole = by_rank(&load(std::slice::from_ref(&p), &LoadOptions::default()).unwrap(), None);
    let readers = [cutr_format::Reader::open(&p).unwrap()];
    let opts = StreamOptions { window_bytes: 1, max_waiting: 100, ..Default::default() };
    let got = by_rank_streaming(std::slice::from_ref(&p), &readers, None, &opts).unwrap();
    assert_eq!((got.settled_early, got.late_rows), (74_875, 0));
    let (c, w) = (&got.report.ranks[0], &whole.ranks[0]);
    assert_eq!((c.kernels, c.kernel_ns), (w.kernels, w.kernel_ns));
    assert_eq!((c.gpu_busy_ns, w.gpu_busy_ns), (1_446_552_341, 1_446_552_341));
}
