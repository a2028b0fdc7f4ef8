//! The unified memory tables: `um` (one row per migration, fault, thrashing, throttling or remote map, joined to
//! the kernel running on its device and, for CPU faults, to the mapped file of the faulting instruction) and
//! `memory_usage` (memory in use over time per device and class, a row per change).

use cutr_model::memory::{MemoryClass, memory_in_use_of};
use cutr_model::rows::UmKind;
use cutr_model::um::RunningKernels;
use cutr_model::um_host::{HostLocation, fault_location};
use cutr_model::{ProcId, Trace, describe};

use crate::table::Column;
use crate::tables::{Files, times};

/// One point of `memory_usage`: (file, device, class, ts, bytes in use from then on).
pub(crate) type UsageRow = (ProcId, u32, &'static str, u64, u64);

/// Every point of every (file, device, class) series, in (file, device, class, time) order.
pub(crate) fn usage_rows(t: &Trace) -> Vec<UsageRow> {
    let classes =
        [(MemoryClass::Device, "device"), (MemoryClass::Managed, "managed"), (MemoryClass::PinnedHost, "pinned host")];
    let mut rows: Vec<UsageRow> = classes
        .into_iter()
        .flat_map(|(class, name)| {
            memory_in_use_of(t, class)
                .into_iter()
                .flat_map(move |s| s.points.into_iter().map(move |p| (s.proc, s.device, name, p.ts, p.bytes)))
        })
        .collect();
    // Stable: each series keeps its time order, device memory first.
    rows.sort_by_key(|r| (r.0, r.1));
    rows
}

pub(crate) fn memory_usage<'t>(f: &'t Files, rows: &'t [UsageRow]) -> Vec<Column<'t>> {
    let mut c = f.columns(move |i| rows[i].0);
    c.extend([
        Column::U32("device", Box::new(move |i| rows[i].1)),
        Column::Str("memory", Box::new(move |i| Some(rows[i].2))),
        Column::U64("ts_ns", Box::new(move |i| rows[i].3)),
        Column::U64("bytes_in_use", Box::new(move |i| rows[i].4)),
    ]);
    c
}

/// The `um` table; `joined`: the kernel of each event where the caller found it (a stream), else looked up here.
pub(crate) fn um<'t>(t: &'t Trace, f: &'t Files, joined: Option<Vec<Option<&'t str>>>) -> Vec<Column<'t>> {
    let u = &t.um;
    // The kernel of every event, found once (each lookup is a binary search); no index without events.
    let kernels: Vec<Option<&'t str>> = match joined {
        Some(k) => k,
        None if u.is_empty() => Vec::new(),
        None => {
            let running = RunningKernels::new(t);
            u.iter().map(|e| running.of_um(e).map(|k| t.kernel_name(&t.kernels[k]))).collect()
        }
    };
    let counts = |i: usize, wanted: fn(UmKind) -> bool| wanted(u[i].kind).then_some(u[i].value);
    let host = move |i: usize| match fault_location(t, &u[i]) {
        Some(HostLocation::Mapped { mapping, offset }) => (Some(mapping.path.as_str()), Some(offset)),
        _ => (None, None),
    };
    let mut c = f.columns(move |i| u[i].proc);
    c.extend([
        Column::Str("kind", Box::new(move |i| Some(u[i].kind.name()))),
        Column::OptU64("device", Box::new(move |i| u[i].device().map(u64::from))),
    ]);
    c.extend(times(move |i| (u[i].start, u[i].end)));
    c.extend([
        Column::OptU64(
            "bytes",
            Box::new(move |i| counts(i, |k| k.is_migration() || matches!(k, UmKind::Thrashing | UmKind::RemoteMap))),
        ),
        Column::OptU64("fault_groups", Box::new(move |i| counts(i, |k| k == UmKind::GpuPageFault))),
        Column::U64("address", Box::new(move |i| u[i].address)),
        Column::U32("src", Box::new(move |i| u[i].src)),
        Column::U32("dst", Box::new(move |i| u[i].dst)),
        Column::Str("cause", Box::new(move |i| Some(describe::um_flags(&u[i])).filter(|s| !s.is_empty()))),
        Column::U32("flags", Box::new(move |i| u[i].flags)),
        Column::OptU64("pc", Box::new(move |i| (u[i].kind == UmKind::CpuPageFault).then_some(u[i].pc))),
        Column::Str("host_file", Box::new(move |i| host(i).0)),
        Column::OptU64("host_offset", Box::new(move |i| host(i).1)),
        Column::OptU64("processors", Box::new(move |i| (u[i].kind == UmKind::Thrashing).then_some(u[i].processors))),
        Column::Str("kernel", Box::new(move |i| kernels[i])),
    ]);
    c
}
