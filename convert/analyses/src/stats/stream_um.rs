//! `stats --stream`'s unified memory section: the loaded report's ([`super::um`]) exactly, from the stream's
//! batches. Every event is summed as it comes ([`Tally`]); CPU faults are counted per faulting instruction and
//! their functions resolved once at the end; each event with a device is joined to the kernel running there when
//! it began ([`UmJoin`]) and, once no later kernel can hold it, counted in its kernel's row. The state is the
//! report's rows, the faulting instructions, and the events and kernels straddling a window's edge: not the
//! events themselves.
//!
//! One figure can differ from a load's, on damaged values only: [`UmReport::saturated`] counts the additions that
//! passed 2^64-1, and how many do depends on the order the events come in (a stream's is by chunk, a load's by
//! time); the totals themselves are the same in any order, 2^64-1 where saturated.

use std::collections::HashMap;

use cutr_model::rows::{UmEvent, UmKind};
use cutr_model::stream::Batch;
use cutr_model::um::UmJoin;
use cutr_model::{NameId, ProcId, Trace};
use rustc_hash::FxHashMap;

use super::um::{NO_KERNEL, ReportParts, Tally, UmKernel, UmReport, add, count_for_kernel};

/// The section folded window by window.
#[derive(Default)]
pub(super) struct StreamedUm {
    tally: Tally,
    events: u64,
    fault_pcs: FxHashMap<(ProcId, u64), u64>,
    join: UmJoin,
    /// Events by their kernel's mangled name (`None`: no kernel); named at the end.
    kernels: FxHashMap<Option<NameId>, UmKernel>,
    kernel_saturated: u64,
}

impl StreamedUm {
    /// Keeping at most `cap` events waiting for their kernel ([`UmJoin::with_cap`]).
    pub(super) fn new(cap: usize) -> StreamedUm {
        StreamedUm { join: UmJoin::with_cap(cap), ..Default::default() }
    }

    pub(super) fn add(&mut self, b: &Batch) {
        for e in &b.um {
            self.tally.event(e);
            if e.kind == UmKind::CpuPageFault {
                *self.fault_pcs.entry((e.proc, e.pc)).or_default() += 1;
            }
        }
        self.events += b.um.len() as u64;
        let (kernels, sat) = (&mut self.kernels, &mut self.kernel_saturated);
        let by_kernel = |e: UmEvent, kernel: Option<NameId>| {
            // The loaded report counts the events of one device only: the others have no kernel row.
            if e.device().is_some() {
                count_for_kernel(kernels.entry(kernel).or_default(), &e, sat);
            }
        };
        self.join.window(b.um.iter().copied(), &b.kernels, b.next_start, by_kernel);
    }

    /// The report, as [`super::um`] makes it of the loaded trace (`t`: the stream's trace, for names and
    /// mappings).
    pub(super) fn report(self, t: &Trace, top: Option<usize>, symbol_dirs: &[std::path::PathBuf]) -> UmReport {
        if self.events == 0 {
            return UmReport::default();
        }
        let mut sat = self.kernel_saturated;
        let mut kernels: HashMap<String, UmKernel> = HashMap::new();
        for (id, row) in self.kernels {
            let name = match id {
                Some(id) => cutr_model::demangle::demangle(t.names.get(id)),
                None => NO_KERNEL.to_string(),
            };
            // Two mangled names may read the same demangled: one row, as a load has.
            let k = kernels.entry(name).or_insert_with_key(|n| UmKernel { kernel: n.clone(), ..Default::default() });
            merge(k, &row, &mut sat);
        }
        let parts = ReportParts { events: self.events, fault_pcs: self.fault_pcs, kernels, kernel_saturated: sat };
        parts.report(self.tally, t, top, symbol_dirs)
    }

    /// What the report should say about how it was streamed: rows the join settled early or got late (a
    /// damaged file).
    pub(super) fn warnings(&self, cap: usize) -> Vec<String> {
        let mut out = Vec::new();
        if self.join.settled_early() > 0 {
            out.push(super::stream_utilization::settled_early_warning(
                "unified memory",
                self.join.settled_early(),
                cap,
            ));
        }
        let late = self.join.late_rows();
        if late > 0 {
            out.push(format!(
                "unified memory: {late} kernels or events started before the time their chunks claim (a damaged \
                 file): events by kernel may miss their matches (--no-stream joins them all)"
            ));
        }
        out
    }
}

/// `row`'s counts added to `into`'s.
fn merge(into: &mut UmKernel, row: &UmKernel, sat: &mut u64) {
    into.gpu_fault_records += row.gpu_fault_records;
    add(&mut into.fault_groups, row.fault_groups, sat);
    into.migrations += row.migrations;
    add(&mut into.migrated_bytes, row.migrated_bytes, sat);
    into.other += row.other;
}
