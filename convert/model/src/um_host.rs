//! Where a CPU page fault's faulting instruction was: the executable mapping of the recorded process that held it
//! and the offset in the mapped file (format 1.4 keeps the mappings), so that a converter with the file at hand
//! can name the function (`cutr_source::host`).

use cutr_format::Mapping;

use crate::rows::{UmEvent, UmKind};
use crate::trace::Trace;

/// Where a host instruction address was in the recorded process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostLocation<'t> {
    /// Inside `mapping`, at `offset` in its file.
    Mapped { mapping: &'t Mapping, offset: u64 },
    /// The recording keeps no mappings (written before format 1.4, or the recorder could not read them).
    NoMappings,
    /// No executable mapping held the address (JIT code, or a mapping made after the recorder read them).
    Unmapped,
}

impl HostLocation<'_> {
    /// Why the address has no file, as reports print it; `None` when it has one.
    pub fn unresolved(&self) -> Option<&'static str> {
        match self {
            HostLocation::Mapped { .. } => None,
            HostLocation::NoMappings => Some("recording has no mappings (before format 1.4)"),
            HostLocation::Unmapped => Some("no mapping holds the address"),
        }
    }
}

/// The location of host address `pc` in the process of file `proc`.
pub fn host_location(trace: &Trace, proc: crate::ProcId, pc: u64) -> HostLocation<'_> {
    let Some(p) = trace.processes.get(proc.index()) else { return HostLocation::NoMappings };
    if p.meta.mappings.is_empty() {
        return HostLocation::NoMappings;
    }
    // Mappings are few (tens to hundreds) and a hostile file may not sort them: a scan is enough and always right.
    // The offset is computed checked (`Mapping::file_offset_of` adds without a check): a hostile file offset near
    // 2^64 is no location, not a wrapped one.
    p.meta
        .mappings
        .iter()
        .filter(|m| (m.start..m.end).contains(&pc))
        .find_map(|m| {
            (pc - m.start).checked_add(m.file_offset).map(|offset| HostLocation::Mapped { mapping: m, offset })
        })
        .unwrap_or(HostLocation::Unmapped)
}

/// The location of a CPU page fault's faulting instruction; `None` for the other kinds.
pub fn fault_location<'t>(trace: &'t Trace, e: &UmEvent) -> Option<HostLocation<'t>> {
    (e.kind == UmKind::CpuPageFault).then(|| host_location(trace, e.proc, e.pc))
}
