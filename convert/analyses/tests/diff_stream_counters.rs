//! `diff --stream` compares counter averages per kernel as the loaded diff does: the same (kernel, device, series)
//! pairs past the threshold in the same order, averages within a relative 1e-12 (`stats --stream`'s sums, added in
//! another order).

use std::path::PathBuf;

use cutr_analyses::diff::{CounterChange, DiffOptions, Report, StreamedSide, diff, diff_streaming};
use cutr_format::Reader;
use cutr_model::stream::StreamOptions;
use cutr_model::{LoadOptions, load};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

/// The loaded diff of `base` against `new` (one run a side) and the streamed one, windows of `window_bytes`.
fn whole_and_streamed(base: &str, new: &str, opts: &DiffOptions, window_bytes: u64) -> (Report, Report) {
    let (b, n) = ([fixture(base)], [fixture(new)]);
    let loaded = |p: &[PathBuf]| vec![load(p, &LoadOptions::default()).unwrap()];
    let whole = diff(&loaded(&b), &loaded(&n), opts);
    let (br, nr) = ([Reader::open(&b[0]).unwrap()], [Reader::open(&n[0]).unwrap()]);
    let (bs, ns) = (StreamedSide { runs: vec![(&b[..], &br[..])] }, StreamedSide { runs: vec![(&n[..], &nr[..])] });
    let so = StreamOptions { window_bytes, ..Default::default() };
    let (streamed, _) = diff_streaming(bs, ns, opts, &so).unwrap();
    (whole, streamed)
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

fn same_changes(w: &[CounterChange], s: &[CounterChange]) {
    let key = |c: &CounterChange| (c.kernel.clone(), c.device, c.series.clone());
    assert_eq!(w.iter().map(key).collect::<Vec<_>>(), s.iter().map(key).collect::<Vec<_>>());
    for (a, b) in w.iter().zip(s) {
        assert!(close(a.base, b.base) && close(a.new, b.new), "{a:?} vs {b:?}");
        assert!((a.delta_pct - b.delta_pct).abs() <= 1e-9, "{a:?} vs {b:?}");
    }
}

/// Six phases against four, the 100 kHz recording with one PM metric: every shared (kernel, series) pair compared
/// (threshold 0), the same pairs and figures in one-chunk and default windows, nothing said not compared.
#[test]
fn streamed_counter_changes_equal_the_loaded_ones() {
    let opts = DiffOptions { threshold_pct: 0.0, ..Default::default() };
    for window_bytes in [1, StreamOptions::default().window_bytes] {
        let (w, s) = whole_and_streamed("counter_workload.cutr", "counter_100khz.cutr", &opts, window_bytes);
        same_changes(&w.counter_changes, &s.counter_changes);
        assert_eq!(w.counter_changes.len(), CHANGES);
        assert_eq!(s.warnings, w.warnings);
        assert!(s.stream.unwrap().not_compared.is_empty());
    }
}

/// Both kernels x the 12 series both recordings have (the 11 NVML ones and PM sampling's DRAM reads).
const CHANGES: usize = 24;
