//! The stream's NVTX range sets dropped once no call in the horizon refers to them
//! (`StreamOptions::range_sets_floor`): a generated loop names every step apart, three sets a step. Compacted at
//! every chance, each GPU operation and API call resolves to the same ranges, batch by batch, as with every set kept,
//! while the ids in use stay a few windows' worth instead of growing with the steps.

use std::path::{Path, PathBuf};

use cutr_model::Trace;
use cutr_model::stream::{Batch, RangeStacks, StreamOptions, stream_readers};
use cutr_synth::{SynthOptions, write_file};

/// Calls kept for their GPU work: ~30 steps' worth, so that most of a recording's sets leave the horizon.
const HORIZON: usize = 2_000;

/// Each GPU operation's and then each API call's ranges (innermost first, by name), batch after batch; and the
/// highest set id any batch carried.
fn resolved(path: &Path, range_sets_floor: usize) -> (Vec<Vec<String>>, u32) {
    let readers = [cutr_format::Reader::open(path).unwrap()];
    let opts = StreamOptions { window_bytes: 1, horizon: HORIZON, range_sets_floor, ..Default::default() };
    let (mut out, mut highest) = (Vec::new(), 0);
    let names_of = |t: &Trace, stacks: &RangeStacks, set: u32| -> Vec<String> {
        stacks.names(set).map(|n| t.names.get(n).to_string()).collect()
    };
    stream_readers(&[path.to_path_buf()], &readers, &opts, |t, stacks, b: Batch| {
        for &set in b.gpu_ranges.iter().chain(&b.api_ranges) {
            highest = highest.max(set);
            out.push(names_of(t, stacks, set));
        }
    })
    .unwrap();
    (out, highest)
}

#[test]
fn sets_dropped_between_batches_resolve_every_operation_as_kept_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("g.cutr");
    let opts = SynthOptions { records: 60_000, buffer_bytes: 64 << 10, ..Default::default() };
    let truth = write_file(&path, opts).unwrap();
    let (kept, highest_kept) = resolved(&path, usize::MAX);
    let (compacted, highest_compacted) = resolved(&path, 0);
    assert!(kept == compacted, "a range set resolved otherwise once compacted");
    // Every operation and call (the generator's GPU work and API calls), most inside a step.
    let inside_step = kept.iter().filter(|r| r.last().is_some_and(|s| s.starts_with("step "))).count();
    assert_eq!((kept.len(), inside_step, truth.steps), (OPERATIONS_AND_CALLS, INSIDE_STEP, STEPS));
    // Kept: three sets a step (the step, its forward and its backward), numbered to the end. Compacted: the sets
    // of the calls still in the horizon, whatever the recording's length.
    assert_eq!((highest_kept, highest_compacted), (HIGHEST_KEPT, HIGHEST_COMPACTED));
}

const STEPS: u64 = 538;
const OPERATIONS_AND_CALLS: usize = 37_336;
const INSIDE_STEP: usize = 35_719;
const HIGHEST_KEPT: u32 = 1_614;
const HIGHEST_COMPACTED: u32 = 353;
