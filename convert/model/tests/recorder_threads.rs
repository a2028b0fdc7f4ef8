//! The recorder's own threads (`cutr-*`) at load, on the synthetic generator: the same recording with its data
//! loader thread named `cutr-loader` instead of `pt_data_loader` (a later thread-name chunk renames it, as a
//! recorder's would). Each step the loader calls `cudaMemcpyAsync` (one copy launched) and `cudaEventRecord`
//! (nothing launched): the event records are left out and counted; the copy calls are kept with their copies,
//! which are counted as GPU work launched from a recorder thread. Nothing else changes.

use std::path::{Path, PathBuf};

use cutr_format::{Writer, WriterOptions};
use cutr_model::{ApiCall, LoadOptions, Trace, load};
use cutr_synth::{LOADER_THREAD, SynthOptions, SynthTruth, write_to_with};

fn write(path: &Path, loader_name: Option<&str>) -> SynthTruth {
    let w = Writer::create(path, WriterOptions { file_id: Some([7; 16]), ..Default::default() }).unwrap();
    let opts = SynthOptions { records: 20_000, ..Default::default() };
    let (_, truth) = write_to_with(w, opts, |w, _| match loader_name {
        Some(name) => w.write_thread_names(&[(LOADER_THREAD, name.to_string())]).map(|_| ()),
        None => Ok(()),
    })
    .unwrap();
    truth
}

fn load_one(path: PathBuf) -> Trace {
    load(&[path], &LoadOptions::default()).unwrap()
}

#[test]
fn a_recorder_threads_calls_are_left_out_but_its_gpu_work_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, renamed) = (dir.path().join("plain.cutr"), dir.path().join("renamed.cutr"));
    let truth = write(&plain, None);
    assert_eq!(write(&renamed, Some("cutr-loader")), truth, "the same recording");
    let (a, b) = (load_one(plain), load_one(renamed));
    assert_eq!(b.processes[0].thread_names[&LOADER_THREAD], "cutr-loader");

    // The loader's calls in the plain trace: those that launched a copy, and the others.
    let loader = a.apis.iter().filter(|c| c.tid == LOADER_THREAD);
    let (launching, idle): (Vec<&ApiCall>, Vec<&ApiCall>) =
        loader.partition(|c| a.memcpys.iter().any(|m| m.corr() == c.corr()));
    assert_eq!((launching.len() as u64, idle.len() as u64), (truth.steps, truth.steps), "one of each per step");
    assert_eq!((a.stats.recorder_thread_records, a.stats.recorder_thread_launches), (0, 0));

    assert_eq!(b.stats.recorder_thread_records, truth.steps, "the event records' calls, left out");
    assert_eq!(b.stats.recorder_thread_launches, truth.steps, "the copies, kept");
    assert_eq!(b.apis.len(), a.apis.len() - idle.len());
    let mut kept: Vec<u32> = b.apis.iter().filter(|c| c.tid == LOADER_THREAD).map(|c| c.correlation).collect();
    let mut want: Vec<u32> = launching.iter().map(|c| c.correlation).collect();
    kept.sort_unstable();
    want.sort_unstable();
    assert_eq!(kept, want, "exactly the launching calls stay");
    // Every copy keeps its launching call; the GPU tables are untouched.
    assert_eq!((a.stats.gpu_without_api, b.stats.gpu_without_api), (0, 0));
    assert_eq!(
        (b.kernels.len(), b.memcpys.len(), b.memsets.len()),
        (a.kernels.len(), a.memcpys.len(), a.memsets.len())
    );
    assert_eq!((b.ranges.len(), b.marks.len(), b.overheads.len()), (a.ranges.len(), a.marks.len(), a.overheads.len()));
}
