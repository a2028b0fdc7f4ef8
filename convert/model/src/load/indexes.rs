//! What is indexed once per process, when all its files are read (one file, or every part of a split
//! recording, so that an NVTX range opened in one part and closed in the next is one range, and the external
//! ids of every part are found): external ids by correlation id, NVTX markers paired into ranges, the API name
//! table by (domain, cbid).

use cutr_format::SessionMetadata;

use super::Filter;
use crate::decode::{RawExternal, RawMarker};
use crate::ids::ProcId;
use crate::nvtx::pair_markers;
use crate::timing::timed;
use crate::trace::{JoinStats, Trace};

/// Indexes process `proc`'s markers and external ids (all its files', in order) and its API names; what they
/// count goes to the process's and the trace's statistics.
pub(super) fn finish_process(
    trace: &mut Trace,
    proc: ProcId,
    markers: Vec<RawMarker>,
    external: Vec<RawExternal>,
    filter: &Filter,
) {
    let meta = trace.processes[proc.index()].meta.clone();
    let mut stats = JoinStats::default();
    let api_names = index_external_and_ranges(trace, proc, markers, external, filter, &meta, &mut stats);
    trace.stats.add(&stats);
    let p = &mut trace.processes[proc.index()];
    p.stats.add(&stats);
    p.api_names = api_names;
}

/// External correlation kinds shown as PyTorch's op id (CUSTOM0) and user annotation id (CUSTOM1).
const EXTERNAL_CUSTOM0: u32 = 3;
const EXTERNAL_CUSTOM1: u32 = 4;

/// The end of a process, its three indexes built at once: external ids by correlation id, its NVTX markers paired
/// into ranges, and its API name table by (domain, cbid), which is returned.
fn index_external_and_ranges(
    trace: &mut Trace,
    proc: ProcId,
    markers: Vec<RawMarker>,
    external: Vec<RawExternal>,
    filter: &Filter,
    meta: &SessionMetadata,
    stats: &mut JoinStats,
) -> rustc_hash::FxHashMap<(u32, u32), u32> {
    // Other external kinds (OpenACC, OpenMP, CUSTOM2) are not shown anywhere: counted as unmodelled.
    stats.unmodelled_records +=
        external.iter().filter(|e| e.0 != EXTERNAL_CUSTOM0 && e.0 != EXTERNAL_CUSTOM1).count() as u64;
    let ext_table = &mut trace.external;
    let build_external = || {
        timed("external ids", || {
            let external = &external;
            ext_table.build_file_par(
                proc,
                external.len(),
                |i| match external[i] {
                    (EXTERNAL_CUSTOM0, corr, id) => Some((corr, (id, 0))),
                    (EXTERNAL_CUSTOM1, corr, id) => Some((corr, (0, id))),
                    _ => None,
                },
                |slot, v| {
                    if v.0 != 0 {
                        slot.0 = v.0;
                    }
                    if v.1 != 0 {
                        slot.1 = v.1;
                    }
                },
            )
        })
    };
    // (domain, cbid) -> entry of the file's API name table (the last entry wins, as the table is written).
    let index_api_names = || {
        timed("api names", || {
            let mut names = rustc_hash::FxHashMap::default();
            names.reserve(meta.callback_names.len());
            for (i, (d, c, _)) in meta.callback_names.iter().enumerate() {
                names.insert((*d, *c), i as u32);
            }
            names
        })
    };
    let pair = || pair_markers(proc, markers, filter);
    let (api_names, ((), paired)) = rayon::join(index_api_names, || rayon::join(build_external, pair));
    drop(external);
    trace.marks.extend(paired.marks);
    trace.ranges.extend(paired.ranges);
    stats.nvtx_ends_without_start += paired.ends_without_start;
    stats.nvtx_unclosed_ranges += paired.unclosed;
    api_names
}
