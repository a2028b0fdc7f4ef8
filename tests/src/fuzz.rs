//! What the fuzz target runs on any bytes: open them as a recording, verify every chunk (`info`), map PC samples to
//! source (and pprof), load the trace model, compute `stats` and `diff`, write the Parquet tables (`export`) into a
//! temporary directory, lay out the timeline and render both viewers' outputs (to `/dev/null`, which the output
//! writes in place). It must return (never panic, never abort on an allocation) whatever the bytes are.

use std::path::PathBuf;

use cutr_format::Reader;
use cutr_model::{LoadOptions, load_readers};

/// Everything that reads a recording, on `data`.
pub fn read_everything(data: &[u8]) {
    let Ok(r) = Reader::from_bytes(data.to_vec()) else { return };
    let _ = r.verify();
    for c in r.activity_chunks() {
        let _ = r.decode_activity(c);
    }
    let _ = cutr_analyses::info::report(&r);
    // Source level: cubins and PC samples (no nvdisasm: the fuzz target runs no programs).
    let opts = cutr_analyses::source::SourceOptions { sass: false, ..Default::default() };
    let _ = cutr_analyses::source::report(&[&r], &opts);
    let _ = cutr_analyses::source::pprof(&[&r]);
    let Ok(trace) = load_readers(&[PathBuf::from("fuzz.cutr")], std::slice::from_ref(&r), &LoadOptions::default())
    else {
        return;
    };
    let _ = cutr_analyses::stats::compute(
        &trace,
        &cutr_analyses::stats::StatsOptions { top: Some(5), nvtx_across_threads: true, ..Default::default() },
    );
    let _ = cutr_analyses::diff::diff(
        std::slice::from_ref(&trace),
        std::slice::from_ref(&trace),
        &cutr_analyses::diff::DiffOptions::default(),
    );
    // The Parquet tables (`export --parquet`), into a directory of their own.
    if let Ok(dir) = tempfile::tempdir() {
        let _ = cutr_tables::write_parquet(&trace, dir.path());
    }
    if cutr_viewer_export::timeline::too_large(&trace).is_none() {
        for format in [cutr_viewer_export::Format::Perfetto, cutr_viewer_export::Format::Chrome] {
            let opts = cutr_viewer_export::ExportOptions { format, shard_slices: 500, ..Default::default() };
            let _ = cutr_viewer_export::export(&trace, std::path::Path::new("/dev/null"), &opts);
        }
    }
}
