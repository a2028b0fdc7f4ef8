//! The joins of a loaded trace, made once all files are decoded: rows sorted by time, each GPU record's launching
//! API call by correlation id (with the failures counted), NVTX nesting and the range around each call, and the
//! kernel names demangled.

use rayon::prelude::*;

use crate::demangle;
use crate::ids::{CorrKey, NameId, ProcId};
use crate::nvtx;
use crate::timing::{mark, timed};
use crate::trace::Trace;

impl Trace {
    /// Sorts rows by time and builds the joins.
    pub(crate) fn finish(&mut self) {
        timed("sort rows", || self.sort_rows());
        mark("sort rows");
        timed("api by correlation", || self.index_launchers());
        timed("count unlaunched", || self.count_unlaunched());
        timed("nvtx depth", || nvtx::nest(&mut self.ranges));
        self.api_range = timed("enclosing ranges", || nvtx::enclosing_ranges(&self.ranges, &self.apis));
        timed("graph captures", || self.join_graphs());
        timed("demangle", || self.demangle_kernel_names());
        timed("cuda events", || self.order_events());
        self.device_limits = self.index_device_limits();
    }

    /// The occupancy calculator's limits of every device of every file, from the recorded properties. The
    /// shared memory the driver reserves per block was recorded only from cutr 0.2 on; before, it is the
    /// driver's value for the architecture (1 KiB from Ampere on).
    pub(crate) fn index_device_limits(&self) -> Vec<((ProcId, u32), crate::occupancy::DeviceLimits)> {
        let mut out = Vec::new();
        for (i, p) in self.processes.iter().enumerate() {
            for d in &p.meta.devices {
                let prop = |k: &str| d.properties.iter().find(|p| p.0 == k).and_then(|p| p.1.parse::<i64>().ok());
                let limits = (|| {
                    Some(crate::occupancy::DeviceLimits {
                        compute_major: d.compute_major,
                        compute_minor: d.compute_minor,
                        max_threads_per_block: prop("maxThreadsPerBlock")? as i32,
                        max_threads_per_multiprocessor: prop("maxThreadsPerMultiprocessor")? as i32,
                        regs_per_block: prop("regsPerBlock")? as i32,
                        regs_per_multiprocessor: prop("regsPerMultiprocessor")? as i32,
                        warp_size: prop("warpSize")? as i32,
                        shared_mem_per_block: prop("sharedMemPerBlock")? as u64,
                        shared_mem_per_multiprocessor: prop("sharedMemPerMultiprocessor")? as u64,
                        reserved_shared_mem_per_block: prop("reservedSharedMemPerBlock")
                            .map_or(if d.compute_major >= 8 { 1024 } else { 0 }, |v| v as u64),
                        multiprocessors: d.multiprocessors,
                    })
                })();
                if let Some(l) = limits {
                    out.push(((ProcId(i as u16), d.id), l));
                }
            }
        }
        out
    }

    fn order_events(&mut self) {
        let events = &self.cuda_events;
        let mut order: Vec<u32> = (0..events.len() as u32).collect();
        order.par_sort_unstable_by_key(|&i| {
            let e = &events[i as usize];
            (e.proc, e.context, e.event, e.correlation, i)
        });
        self.event_order = order;
    }

    /// The kinds sort at the same time (each in parallel too): a small recording's sorts are each too short to
    /// keep the workers busy one after another.
    fn sort_rows(&mut self) {
        let (kernels, memcpys, memsets, apis, syncs) =
            (&mut self.kernels, &mut self.memcpys, &mut self.memsets, &mut self.apis, &mut self.syncs);
        let (overheads, memory, marks, ranges, um) =
            (&mut self.overheads, &mut self.memory, &mut self.marks, &mut self.ranges, &mut self.um);
        rayon::scope(|s| {
            s.spawn(|_| kernels.par_sort_unstable_by_key(|k| (k.start, k.proc, k.correlation)));
            s.spawn(|_| memcpys.par_sort_unstable_by_key(|k| (k.start, k.proc, k.correlation)));
            s.spawn(|_| memsets.par_sort_unstable_by_key(|k| (k.start, k.proc, k.correlation)));
            s.spawn(|_| syncs.par_sort_unstable_by_key(|k| (k.start, k.proc, k.correlation)));
            s.spawn(|_| {
                overheads.sort_unstable_by_key(|k| (k.start, k.proc));
                memory.sort_unstable_by_key(|k| (k.ts, k.proc));
                um.sort_unstable_by_key(|k| (k.start, k.proc, k.kind, k.address));
                marks.sort_unstable_by_key(|k| (k.ts, k.proc));
                // Outer ranges first at equal starts, so depth follows nesting.
                ranges.sort_unstable_by_key(|r| (r.proc, r.pid, r.tid, r.start, std::cmp::Reverse(r.end)));
            });
            apis.par_sort_unstable_by_key(|k| (k.start, k.proc, k.correlation));
        });
    }

    /// The launching API call of each correlation key (index + 1 into `apis`).
    fn index_launchers(&mut self) {
        let apis = &self.apis;
        // A runtime call and the driver call it makes can share an id: the runtime call is the launch.
        let launch = |slot: &mut u32, i: u32| {
            if *slot == 0 || apis[*slot as usize - 1].driver || !apis[i as usize - 1].driver {
                *slot = i;
            }
        };
        if self.processes.len() <= 1 {
            // One file: (correlation id, index + 1) straight from the rows.
            self.api_by_corr.build_file_par(
                ProcId(0),
                apis.len(),
                |i| Some((apis[i].correlation, i as u32 + 1)),
                launch,
            );
        } else {
            // (correlation id, index + 1) of each file's calls, gathered in one pass over all calls.
            let mut per_file: Vec<Vec<(u32, u32)>> = vec![Vec::new(); self.processes.len()];
            for (i, a) in apis.iter().enumerate() {
                per_file[a.proc.index()].push((a.correlation, i as u32 + 1));
            }
            for (proc, entries) in per_file.iter().enumerate() {
                self.api_by_corr.build_file_par(ProcId(proc as u16), entries.len(), |j| Some(entries[j]), launch);
            }
        }
    }

    /// Counts, per file, the GPU records and external ids whose correlation id matches no API call.
    fn count_unlaunched(&mut self) {
        let files = self.processes.len();
        let missing = |key: CorrKey| !self.api_by_corr.contains(key);
        let (kernels, memcpys, memsets) = (&self.kernels, &self.memcpys, &self.memsets);
        let ((kernel, copy), set) = rayon::join(
            || {
                rayon::join(
                    || unlaunched(kernels, files, &missing, |k| (k.corr(), k.graph_id != 0)),
                    || unlaunched(memcpys, files, &missing, |m| (m.corr(), false)),
                )
            },
            || unlaunched(memsets, files, &missing, |m| (m.corr(), false)),
        );
        let mut external = vec![0u64; files];
        for (key, _) in self.external.entries() {
            if missing(key) {
                external[key.proc.index()] += 1;
            }
        }
        let total = &mut self.stats;
        for (p, process) in self.processes.iter_mut().enumerate() {
            let s = &mut process.stats;
            s.gpu_without_api = kernel[p].0 + copy[p].0 + set[p].0;
            s.graph_kernels_without_launch = kernel[p].1;
            s.external_without_api = external[p];
            total.gpu_without_api += s.gpu_without_api;
            total.graph_kernels_without_launch += s.graph_kernels_without_launch;
            total.external_without_api += s.external_without_api;
        }
    }

    /// Demangles every kernel name once (like `c++filt`), so [`Trace::kernel_name`] is a lookup.
    fn demangle_kernel_names(&mut self) {
        let n = self.names.len();
        // The names kernels use (a few hundred among millions of kernels), marked in parallel blocks.
        let used = self
            .kernels
            .par_chunks(1 << 15)
            .fold(
                || vec![false; n],
                |mut used, ks| {
                    for k in ks {
                        used[k.name.index()] = true;
                    }
                    used
                },
            )
            .reduce(|| vec![false; n], |a, b| a.iter().zip(&b).map(|(x, y)| *x || *y).collect());
        let todo: Vec<(u32, String)> =
            (0..n as u32).filter(|&i| used[i as usize]).map(|i| (i, self.names.get(NameId(i)).to_string())).collect();
        let done: Vec<(u32, String)> = todo.into_par_iter().map(|(i, s)| (i, demangle::demangle(&s))).collect();
        let mut map: Vec<NameId> = (0..n as u32).map(NameId).collect();
        for (i, d) in done {
            map[i as usize] = self.names.intern(&d);
        }
        self.demangled = map;
    }
}

/// Per file: how many `rows` have no launching call, and how many of those are CUDA graph work (`key` gives a row's
/// correlation key and whether it came from a graph). Counted in parallel blocks.
fn unlaunched<T: Sync>(
    rows: &[T],
    files: usize,
    missing: &(impl Fn(CorrKey) -> bool + Sync),
    key: impl Fn(&T) -> (CorrKey, bool) + Sync,
) -> Vec<(u64, u64)> {
    rows.par_chunks(1 << 15)
        .map(|block| {
            let mut acc = vec![(0u64, 0u64); files];
            for r in block {
                let (k, graph) = key(r);
                if missing(k) {
                    let slot = &mut acc[k.proc.index()];
                    slot.0 += 1;
                    slot.1 += graph as u64;
                }
            }
            acc
        })
        .reduce(|| vec![(0, 0); files], |a, b| a.iter().zip(&b).map(|(x, y)| (x.0 + y.0, x.1 + y.1)).collect())
}
