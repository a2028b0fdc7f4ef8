//! The recorder's own threads, left out of the program's trace. Every thread cutr starts is named `cutr-...`
//! (NVML sampling, PM sampling with its decoding and evaluation threads, the writer, flush, control and signal
//! threads), and what those threads call (PM sampling's `cuDeviceGet`, NVML set-up's device queries) CUPTI
//! records like the program's own calls. They are the recorder's, not the program's: at load, the records of
//! every table keyed by thread (API calls, NVTX markers, CUPTI overhead) made on such a thread are left out and
//! counted ([`JoinStats::recorder_thread_records`]), so that no output (timelines, `stats`, `diff`, tables) shows
//! them. A call there that launched GPU work (the recorder launches none) is kept with its work, and the work
//! counted ([`JoinStats::recorder_thread_launches`]): GPU time is never hidden.
//!
//! The rule is the thread's OS name as the file recorded it ([`RECORDER_THREAD_PREFIX`]): a program that names a
//! thread of its own `cutr-...` has that thread's calls left out too (and the count says how many). A recorder
//! thread the file holds no name for (one that ended between two of the recorder's scans of the thread names,
//! with recorders before names were registered at thread start) is kept as an unnamed thread of the program.

use std::collections::BTreeMap;

use rustc_hash::FxHashSet;

use crate::decode::ChunkRows;
use crate::ids::{CorrKey, ProcId};
use crate::rows::ApiCall;
use crate::trace::{JoinStats, Trace};

/// The start of the OS name of every thread the recorder starts.
pub const RECORDER_THREAD_PREFIX: &str = "cutr-";

/// Whether a thread with this OS name is one of the recorder's.
pub fn is_recorder_thread(name: &str) -> bool {
    name.starts_with(RECORDER_THREAD_PREFIX)
}

/// The ids of a file's recorder threads.
#[derive(Clone, Debug, Default)]
pub(crate) struct RecorderThreads {
    /// Sorted: a handful of threads.
    tids: Vec<u32>,
}

impl RecorderThreads {
    /// The recorder threads among a file's thread names.
    pub fn of(names: &BTreeMap<u32, String>) -> RecorderThreads {
        RecorderThreads { tids: names.iter().filter(|(_, n)| is_recorder_thread(n)).map(|(&tid, _)| tid).collect() }
    }

    #[inline]
    fn contains(&self, tid: u32) -> bool {
        self.tids.binary_search(&tid).is_ok()
    }

    /// Takes a chunk's rows made on recorder threads out of it: its NVTX markers and CUPTI overhead are dropped
    /// (counted in `counts.recorder_thread`), its API calls set aside in `recorder_calls` until the whole file
    /// is read ([`settle`]), as the GPU work they may have launched can come in any chunk.
    pub fn strip(&self, rows: &mut ChunkRows) {
        if self.tids.is_empty() {
            return;
        }
        let before = rows.markers.len() + rows.overheads.len();
        rows.markers.retain(|m| !self.contains(m.tid));
        rows.overheads.retain(|o| !self.contains(o.tid));
        rows.counts.recorder_thread += (before - rows.markers.len() - rows.overheads.len()) as u64;
        if rows.apis.iter().any(|a| self.contains(a.tid)) {
            let (recorder, program): (Vec<ApiCall>, Vec<ApiCall>) =
                rows.apis.drain(..).partition(|a| self.contains(a.tid));
            rows.apis = program;
            rows.recorder_calls.extend(recorder);
        }
    }
}

/// How many GPU rows of each table the trace held before a file's rows were appended: the file's are the rest.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GpuRowsBefore {
    kernels: usize,
    memcpys: usize,
    memsets: usize,
}

impl GpuRowsBefore {
    pub fn of(trace: &Trace) -> GpuRowsBefore {
        GpuRowsBefore { kernels: trace.kernels.len(), memcpys: trace.memcpys.len(), memsets: trace.memsets.len() }
    }
}

/// Once file `proc` is read: of the calls set aside from its recorder threads, those that launched GPU work of
/// the file go back into the trace (their GPU records counted as launches from recorder threads); the others
/// are left out and counted.
pub(crate) fn settle(
    trace: &mut Trace,
    proc: ProcId,
    before: GpuRowsBefore,
    calls: Vec<ApiCall>,
    stats: &mut JoinStats,
) {
    if calls.is_empty() {
        return;
    }
    let ids: FxHashSet<u32> = calls.iter().map(|a| a.correlation).collect();
    let mut launched: FxHashSet<u32> = FxHashSet::default();
    let mut launches = 0u64;
    let mut look = |key: CorrKey| {
        if key.proc == proc && ids.contains(&key.correlation) {
            launched.insert(key.correlation);
            launches += 1;
        }
    };
    trace.kernels[before.kernels..].iter().for_each(|k| look(k.corr()));
    trace.memcpys[before.memcpys..].iter().for_each(|m| look(m.corr()));
    trace.memsets[before.memsets..].iter().for_each(|m| look(m.corr()));
    let (kept, left_out): (Vec<ApiCall>, Vec<ApiCall>) =
        calls.into_iter().partition(|a| launched.contains(&a.correlation));
    trace.apis.extend(kept);
    stats.recorder_thread_records += left_out.len() as u64;
    stats.recorder_thread_launches += launches;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_threads_are_the_ones_named_cutr() {
        let names: BTreeMap<u32, String> = [
            (7, "python3".to_string()),
            (9, "cutr-pm-dec0".to_string()),
            (3, "cutr-nvml".to_string()),
            (4, "cutr".to_string()),
            (5, "pt_cutr-x".to_string()),
        ]
        .into();
        let r = RecorderThreads::of(&names);
        assert_eq!(r.tids, [3, 9]);
        assert!(r.contains(3) && r.contains(9) && !r.contains(4) && !r.contains(5) && !r.contains(7));
        assert!(RecorderThreads::of(&BTreeMap::new()).tids.is_empty());
    }
}
