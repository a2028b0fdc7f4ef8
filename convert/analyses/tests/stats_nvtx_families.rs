//! `stats`' NVTX section folds numbered range names (`step 17`) into one row per family past 64 names: the folded
//! row is its members' rows added up, whole or streamed, and `--nvtx-names each` keeps every name apart.

use std::path::{Path, PathBuf};

use cutr_analyses::stats::{self, NvtxNames, RangeStats, Stats, StatsOptions};
use cutr_model::numbered::split_number;
use cutr_model::stream::StreamOptions;
use cutr_model::{LoadOptions, load};

/// 300k generated records in 256 KiB buffers (99 activity chunks), 2,690 steps named `step N` apart.
fn generated(dir: &Path) -> PathBuf {
    let p = dir.join("g.cutr");
    let opts = cutr_synth::SynthOptions { records: 300_000, buffer_bytes: 256 << 10, ..Default::default() };
    cutr_synth::write_file(&p, opts).unwrap();
    p
}

fn options(nvtx_names: NvtxNames) -> StatsOptions {
    StatsOptions { sections: vec![stats::Section::Nvtx], nvtx_names, ..Default::default() }
}

/// The streamed NVTX rows with `cap` values kept per row, one chunk a window (the family folds mid-stream).
fn streamed(p: &Path, nvtx_names: NvtxNames, cap: usize) -> Stats {
    let reader = cutr_format::Reader::open(p).unwrap();
    let stream_opts = StreamOptions { horizon: 1 << 20, window_bytes: 1, ..StreamOptions::default() };
    let paths = [p.to_path_buf()];
    stats::compute_streaming(&paths, &[reader], &options(nvtx_names), cap, &stream_opts).unwrap().0
}

fn row<'a>(s: &'a Stats, name: &str) -> &'a RangeStats {
    s.nvtx.iter().find(|r| r.time.name == name).unwrap_or_else(|| panic!("no row {name}"))
}

/// (names, count, total, min, max, GPU ns, GPU ops) of a row.
fn figures(r: &RangeStats) -> (u64, u64, u64, u64, u64, u64, u64) {
    (r.folded_names, r.time.count, r.time.total_ns, r.time.min_ns, r.time.max_ns, r.gpu_ns, r.gpu_ops)
}

#[test]
fn the_folded_row_is_its_members_added_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = generated(dir.path());
    let trace = load(std::slice::from_ref(&p), &LoadOptions::default()).unwrap();
    let folded = stats::compute(&trace, &options(NvtxNames::Fold));
    let each = stats::compute(&trace, &options(NvtxNames::Each));
    // Every step its own row with `each` (the report as it was before folding), one row for them all by default.
    let steps: Vec<&RangeStats> =
        each.nvtx.iter().filter(|r| split_number(&r.time.name).is_some_and(|(p, _)| p == "step ")).collect();
    assert_eq!((each.nvtx.len(), steps.len(), folded.nvtx.len()), (2692, 2690, 3));
    assert!(each.nvtx.iter().all(|r| r.folded_names == 0));
    // The members added up independently of the folding.
    let sum = |f: fn(&RangeStats) -> u64| steps.iter().map(|r| f(r)).sum::<u64>();
    let members = (
        steps.len() as u64,
        sum(|r| r.time.count),
        sum(|r| r.time.total_ns),
        steps.iter().map(|r| r.time.min_ns).min().unwrap(),
        steps.iter().map(|r| r.time.max_ns).max().unwrap(),
        sum(|r| r.gpu_ns),
        sum(|r| r.gpu_ops),
    );
    let step = row(&folded, "step <n>");
    assert_eq!(figures(step), members);
    assert_eq!(figures(step), (2690, 2690, 1_341_935_166, 471_570, 553_194, 862_093_657, 86_777));
    // Its median is the median of all the steps' durations (each step is one range).
    let mut durations: Vec<u64> = steps.iter().map(|r| r.time.total_ns).collect();
    durations.sort_unstable();
    assert_eq!(step.time.median_ns, (durations[1344] + durations[1345]) as f64 / 2.0);
    // The rows of names without a number are the same either way.
    for r in folded.nvtx.iter().filter(|r| r.folded_names == 0) {
        assert_eq!(figures(r), figures(row(&each, &r.time.name)), "{}", r.time.name);
    }
    // The text says what the row holds; JSON carries the count, and none for a row of one name.
    let text = stats::render_text(&folded, stats::TextOptions { wide: true, width: None });
    assert!(
        text.contains(
            "\n  Numbered names folded (more than 64 in a family; --nvtx-names each lists them): step <n> holds 2,690 \
             names\n"
        ),
        "{text}"
    );
    let json = serde_json::to_value(&folded).unwrap();
    let rows = json["nvtx"].as_array().unwrap();
    let step_json = rows.iter().find(|r| r["name"] == "step <n>").unwrap();
    assert_eq!((step_json["folded_names"].as_u64(), rows[rows.len() - 1].get("folded_names")), (Some(2690), None));
}

#[test]
fn a_stream_folds_as_the_family_passes_the_cap_and_agrees_with_the_whole_trace() {
    let dir = tempfile::tempdir().unwrap();
    let p = generated(dir.path());
    let trace = load(std::slice::from_ref(&p), &LoadOptions::default()).unwrap();
    for (mode, rows) in [(NvtxNames::Fold, 3), (NvtxNames::Each, 2692)] {
        let whole = stats::compute(&trace, &options(mode));
        // 1,000 values a row: the step row's medians from merged sketches; 65,536: its values merged, exact.
        for cap in [1000, 1 << 16] {
            let s = streamed(&p, mode, cap);
            assert_eq!((s.nvtx.len(), whole.nvtx.len()), (rows, rows), "{mode:?}");
            for (w, s) in whole.nvtx.iter().zip(&s.nvtx) {
                assert_eq!(figures(w), figures(s), "{mode:?} cap {cap}");
                assert_eq!(
                    (w.time.name.as_str(), w.time.avg_ns, w.time.percent),
                    (s.time.name.as_str(), s.time.avg_ns, s.time.percent)
                );
                assert!((w.time.stddev_ns - s.time.stddev_ns).abs() <= 1e-6 * w.time.stddev_ns.max(1.0));
                if w.time.count as usize <= cap {
                    assert_eq!((w.time.median_ns, s.time.median_estimated), (s.time.median_ns, false));
                } else {
                    let err = (s.time.median_ns - w.time.median_ns).abs() / w.time.median_ns;
                    assert!(s.time.median_estimated && err <= stats::SKETCH_RELATIVE_ERROR, "{}", w.time.name);
                }
            }
        }
    }
}
