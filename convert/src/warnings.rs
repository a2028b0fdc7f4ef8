//! What every command says on stderr about its inputs: per file, once per cause, what was damaged or lost, what
//! had to be assumed, which joins failed and what the recording itself reported losing. `convert`, `stats` and
//! `diff` say the same things the same way.

use std::path::Path;

use cutr_model::{Filter, JoinStats, Process, Trace};
use cutr_schema::kinds;

/// A warning about one input, on stderr.
pub fn warn(file: &Path, msg: &str) {
    eprintln!("cupti-convert: warning: {}: {msg}", file.display());
}

/// The warnings about every input of `trace`, in file order. `filter` is what the command asked to keep: the
/// joins a filter breaks on purpose (GPU work without its API call when API records are filtered out, ranges cut
/// by a time window) are not warned about.
pub fn input_warnings<'t>(trace: &'t Trace, filter: &Filter) -> Vec<(&'t Path, String)> {
    let mut out = Vec::new();
    for p in &trace.processes {
        for w in file_warnings(p, filter) {
            out.push((p.path.as_path(), w));
        }
    }
    out
}

fn file_warnings(p: &Process, filter: &Filter) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(rec) = &p.recovery {
        out.push(format!(
            "not closed cleanly ({}): read up to its last complete chunk, {} bytes lost",
            rec.reason, rec.lost_bytes
        ));
    }
    out.extend(p.problems.iter().map(|problem| problem.to_string()));
    out.extend(p.warnings.iter().cloned());
    out.extend(join_warnings(&p.stats, filter));
    for (k, v) in p.loss.entries() {
        if v > 0 {
            out.push(format!("recording lost data: {k} = {v}"));
        }
    }
    out
}

fn join_warnings(s: &JoinStats, filter: &Filter) -> Vec<String> {
    let apis_kept = filter.wants_kind(kinds::RUNTIME) || filter.wants_kind(kinds::DRIVER);
    let windowed = filter.start.is_some() || filter.end.is_some();
    // Only joins the filter itself cannot break: a window cuts launches from their calls and ranges in two.
    let launch_joins = apis_kept && !windowed;
    // Without kernel records no PC sample can be placed; a window is no cause (rates use the whole file's runs).
    let kernels_kept = filter.wants_kind(kinds::CONCURRENT_KERNEL) || filter.wants_kind(kinds::KERNEL);
    let warnings = [
        (launch_joins, s.gpu_without_api, "GPU records have no launching runtime/driver API record (no arrow)"),
        (launch_joins, s.graph_kernels_without_launch, "CUDA graph kernels have no graph launch record"),
        (launch_joins, s.external_without_api, "external correlation ids match no API record"),
        (!windowed, s.nvtx_ends_without_start, "NVTX range ends have no start"),
        (!windowed, s.nvtx_unclosed_ranges, "NVTX ranges were never closed (shown up to the end of the trace)"),
        (true, s.zero_timestamp_records, "records have no timestamps (CUPTI could not time them); left out"),
        (true, s.inverted_records, "records end before they start; left out"),
        (true, s.unresolved_names, "string pointers have no text in the file"),
        (true, s.um_unknown_kind, "unified memory records have an unknown counter kind; left out"),
        // The graph joins discount what the filter left out themselves: graph events are kept whatever it is.
        (true, s.graph_ops_without_capture, "CUDA graph kernels, copies and memsets are not traced back to their node"),
        (true, s.graph_events_lost, "CUDA graph events were lost by the recorder"),
        (true, s.graph_nodes_without_api, "CUDA graph nodes were made outside any recorded API call"),
        (true, s.graph_events_unjoined, "CUDA graph events repeat a creation or name a node no event made"),
        (
            kernels_kept,
            s.pc_samples_unplaced,
            "PC samples are of kernels with no recorded run on their GPU: in no stall-rate track",
        ),
        (true, s.recorder_thread_records, "records made on the recorder's own threads (cutr-*) left out"),
        (true, s.recorder_thread_launches, "GPU records were launched from the recorder's own threads (kept)"),
    ];
    warnings.iter().filter(|(on, n, _)| *on && *n > 0).map(|(_, n, what)| format!("{n} {what}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_join_failures_are_warned_whatever_the_filter() {
        let s = JoinStats {
            graph_ops_without_capture: 3,
            graph_events_lost: 2,
            graph_nodes_without_api: 1,
            graph_events_unjoined: 4,
            ..Default::default()
        };
        let want = [
            "3 CUDA graph kernels, copies and memsets are not traced back to their node",
            "2 CUDA graph events were lost by the recorder",
            "1 CUDA graph nodes were made outside any recorded API call",
            "4 CUDA graph events repeat a creation or name a node no event made",
        ];
        assert_eq!(join_warnings(&s, &Filter::default()), want);
        let windowed = Filter { start: Some(5), kinds: vec![kinds::CONCURRENT_KERNEL], ..Default::default() };
        assert_eq!(join_warnings(&s, &windowed), want);
        assert_eq!(join_warnings(&JoinStats::default(), &Filter::default()), [] as [String; 0]);
    }

    #[test]
    fn unplaced_pc_samples_are_warned_unless_kernels_are_filtered_out() {
        let s = JoinStats { pc_samples_unplaced: 150, ..Default::default() };
        let want = ["150 PC samples are of kernels with no recorded run on their GPU: in no stall-rate track"];
        assert_eq!(join_warnings(&s, &Filter::default()), want);
        assert_eq!(join_warnings(&s, &Filter { start: Some(5), ..Default::default() }), want);
        let no_kernels = Filter { kinds: vec![kinds::RUNTIME], ..Default::default() };
        assert_eq!(join_warnings(&s, &no_kernels), [] as [String; 0]);
    }
}
