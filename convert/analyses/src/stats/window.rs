//! `stats --nvtx NAME`: the GPU work of the NVTX ranges named NAME (a training loop's `step`), the rest of the
//! trace's GPU work left out before the sections are computed.
//!
//! A range is named NAME when its name is NAME, or NAME, a space and more (`step` names `step 12`, as numbered
//! steps are named). A kernel, copy or memset belongs to the window when the API call that launched it started
//! inside a closed range named NAME of its process, on any thread (PyTorch launches backward's kernels from its autograd thread);
//! one without a known launching call, when it started inside such a range itself. API calls and NVTX ranges stay
//! whole: the model joins them by index, and their sections say so in the report's header.

use cutr_model::{CorrKey, ProcId, Trace};
use rayon::prelude::*;

/// Whether a range called `range` is named `name`: `name` itself, or `name` and a space and more.
fn named(range: &str, name: &str) -> bool {
    range.strip_prefix(name).is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
}

/// Per process, the time covered by the closed ranges named `name`: sorted, overlapping ranges merged.
fn intervals(t: &Trace, name: &str) -> Vec<(ProcId, u64, u64)> {
    let mut iv: Vec<(ProcId, u64, u64)> = t
        .ranges
        .iter()
        .filter(|r| r.closed() && named(t.names.get(r.name), name))
        .map(|r| (r.proc, r.start, r.end))
        .collect();
    iv.sort_unstable();
    let mut merged: Vec<(ProcId, u64, u64)> = Vec::with_capacity(iv.len());
    for (p, s, e) in iv {
        match merged.last_mut() {
            Some(last) if last.0 == p && s <= last.2 => last.2 = last.2.max(e),
            _ => merged.push((p, s, e)),
        }
    }
    merged
}

/// Whether `at` in process `proc` lies inside one of `iv` (sorted, disjoint per process).
fn inside(iv: &[(ProcId, u64, u64)], proc: ProcId, at: u64) -> bool {
    let i = iv.partition_point(|&(p, s, _)| (p, s) <= (proc, at));
    i > 0 && iv[i - 1].0 == proc && at <= iv[i - 1].2
}

/// Keeps only the GPU work of the ranges named `name` (see the module); returns how many of those ranges there are.
pub fn keep_gpu_work_in_ranges(t: &mut Trace, name: &str) -> usize {
    let iv = intervals(t, name);
    let ranges = t.ranges.iter().filter(|r| r.closed() && named(t.names.get(r.name), name)).count();
    let keep = |key: CorrKey, proc: ProcId, start: u64| {
        let at = t.launcher(key).map_or((proc, start), |a| (a.proc, a.start));
        inside(&iv, at.0, at.1)
    };
    let kernels: Vec<bool> = t.kernels.par_iter().map(|k| keep(k.corr(), k.proc, k.start)).collect();
    let memcpys: Vec<bool> = t.memcpys.par_iter().map(|m| keep(m.corr(), m.proc, m.start)).collect();
    let memsets: Vec<bool> = t.memsets.par_iter().map(|m| keep(m.corr(), m.proc, m.start)).collect();
    retain_with(&mut t.kernels, &kernels);
    retain_with(&mut t.graphs.kernel_capture, &kernels);
    retain_with(&mut t.memcpys, &memcpys);
    retain_with(&mut t.graphs.memcpy_capture, &memcpys);
    retain_with(&mut t.memsets, &memsets);
    retain_with(&mut t.graphs.memset_capture, &memsets);
    ranges
}

/// Keeps the items of `v` whose flag is set; a `v` of another length than `keep` (a table the trace leaves empty,
/// like the graph captures of a trace without graphs) is left as it is.
fn retain_with<T>(v: &mut Vec<T>, keep: &[bool]) {
    if v.len() == keep.len() {
        let mut flags = keep.iter();
        v.retain(|_| *flags.next().unwrap_or(&false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_inside_merged_intervals_per_process() {
        let (a, b) = (ProcId(0), ProcId(1));
        let iv = [(a, 10, 20), (a, 30, 40), (b, 0, 5)];
        let points = [(a, 9), (a, 10), (a, 20), (a, 25), (a, 40), (a, 41), (b, 3), (b, 6)];
        let hits: Vec<bool> = points.iter().map(|&(p, t)| inside(&iv, p, t)).collect();
        assert_eq!(hits, [false, true, true, false, true, false, true, false]);
    }

    #[test]
    fn a_name_names_itself_and_its_numbered_ranges() {
        let got: Vec<bool> =
            ["step", "step 12", "steps", "warmup 0", "step_1"].iter().map(|r| named(r, "step")).collect();
        assert_eq!(got, [true, true, false, false, false]);
    }
}
