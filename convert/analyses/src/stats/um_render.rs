//! The `um` section and the memory peaks as text tables and CSV rows.

use std::fmt::Write as _;

use super::render::{csv_field, fitted_table, name, table};
use super::{Section, Stats, TextOptions, UmReport};
use crate::fmt;

fn hex(a: u64) -> String {
    format!("{a:#x}")
}

fn range(a: &super::UmAddress) -> String {
    format!("{:#x}-{:#x}", a.address, a.end)
}

fn gpu(d: u32) -> String {
    if d == cutr_model::rows::UM_CPU { "CPU".into() } else { format!("GPU {d}") }
}

/// Devices of a thrashing bit mask: `GPU 0, GPU 1`.
fn processors(mask: u64) -> String {
    (0..64).filter(|b| mask >> b & 1 == 1).map(|b| format!("GPU {b}")).collect::<Vec<_>>().join(", ")
}

/// Whether the text report shows the section: when there is something to show, or when it was asked for alone
/// (not as part of every section), so that `--report um` on a trace without UM events says so.
fn shown(s: &Stats) -> bool {
    s.sections.contains(&Section::Um) && (s.um.events > 0 || s.sections.len() < Section::ALL.len())
}

/// The memory peaks, after the memory operations.
pub(super) fn memory_peaks_text(o: &mut String, s: &Stats, opts: TextOptions) {
    let many_files = s.files.len() > 1;
    let rows = s
        .memory_peaks
        .iter()
        .map(|m| {
            vec![
                fmt::thousands(m.peak_bytes),
                fmt::duration_ns(m.peak_at_ns),
                format!(
                    "{} {} at {}",
                    fmt::thousands(m.allocation_bytes),
                    m.allocation_kind,
                    hex(m.allocation_address)
                ),
                fmt::thousands(m.allocations),
                fmt::thousands(m.frees),
                fmt::thousands(m.frees_without_allocation),
                fmt::thousands(m.bytes_at_end),
                m.memory.to_string(),
                if many_files { format!("{} GPU {}", m.file, m.device) } else { format!("GPU {}", m.device) },
            ]
        })
        .collect();
    fitted_table(
        o,
        "Memory in use (allocations less frees; frees of memory allocated before recording not subtracted)",
        &[
            "Peak (bytes)",
            "Peak at",
            "Reached by",
            "Allocs",
            "Frees",
            "Frees w/o alloc",
            "At end (bytes)",
            "Memory",
            "Device",
        ],
        rows,
        opts,
    );
}

/// The section as text tables.
pub(super) fn text(o: &mut String, s: &Stats, opts: TextOptions) {
    if !shown(s) {
        return;
    }
    let u: &UmReport = &s.um;
    if u.events == 0 {
        let _ = writeln!(o, "\nUnified memory: no events (record with `cupti-record --um`)");
        return;
    }
    let _ = writeln!(
        o,
        "\nUnified memory: {} events, {} CPU page faults",
        fmt::thousands(u.events),
        fmt::thousands(u.cpu_faults)
    );
    let rows = (u.migrations.iter())
        .map(|m| {
            vec![
                fmt::thousands(m.count),
                fmt::thousands(m.bytes),
                fmt::thousands(m.total_ns),
                fmt::thousands_1(m.avg_ns),
                format!("{:.2}", m.throughput_gbps),
                m.direction.to_string(),
            ]
        })
        .collect();
    table(o, "UM migrations", &["Count", "Bytes", "Total (ns)", "Avg (ns)", "GB/s", "Direction"], rows);
    let rows = (u.causes.iter())
        .map(|c| vec![fmt::thousands(c.count), fmt::thousands(c.bytes), c.cause.to_string(), c.kind.to_string()])
        .collect();
    table(o, "UM migrations and remote maps by cause", &["Count", "Bytes", "Cause", "Kind"], rows);
    let rows = (u.gpu_faults.iter())
        .map(|f| vec![fmt::thousands(f.records), fmt::thousands(f.groups), f.access.to_string(), gpu(f.device)])
        .collect();
    table(o, "UM GPU page faults", &["Records", "Fault groups", "Access", "Device"], rows);
    let rows = u.cpu_faults_by_access.iter().map(|c| vec![fmt::thousands(c.count), c.access.to_string()]).collect();
    table(o, "UM CPU page faults", &["Faults", "Access"], rows);
    let rows = (u.thrashing.iter())
        .map(|g| vec![fmt::thousands(g.count), fmt::thousands(g.bytes), hex(g.address), processors(g.processors)])
        .collect();
    table(o, "UM thrashing regions", &["Reports", "Bytes", "Address", "Processors"], rows);
    let rows = (u.throttling.iter())
        .map(|t| vec![fmt::thousands(t.count), fmt::thousands(t.total_ns), gpu(t.device)])
        .collect();
    table(o, "UM throttling", &["Count", "Total (ns)", "Device"], rows);
    let rows =
        (u.top_bytes.iter()).map(|a| vec![fmt::thousands(a.bytes), fmt::thousands(a.migrations), range(a)]).collect();
    table(o, "UM address ranges (2 MiB blocks) by bytes migrated", &["Bytes", "Migrations", "Addresses"], rows);
    let rows = u.top_faults.iter().map(|a| vec![fmt::thousands(a.faults), range(a)]).collect();
    table(
        o,
        "UM address ranges (2 MiB blocks) by page faults (GPU fault records and CPU faults)",
        &["Faults", "Addresses"],
        rows,
    );
    let rows = (u.host_functions.iter())
        .map(|h| {
            let function = match h.unresolved {
                Some(why) => format!("<{why}>"),
                None => name(&h.function, opts),
            };
            vec![fmt::thousands(h.faults), function, h.file.clone()]
        })
        .collect();
    table(o, "UM CPU page faults by host function", &["Faults", "Function", "File"], rows);
    let rows = (u.kernels.iter())
        .map(|k| {
            vec![
                fmt::thousands(k.gpu_fault_records),
                fmt::thousands(k.fault_groups),
                fmt::thousands(k.migrations),
                fmt::thousands(k.migrated_bytes),
                fmt::thousands(k.other),
                name(&k.kernel, opts),
            ]
        })
        .collect();
    let headers = ["GPU faults", "Fault groups", "Migrations", "Bytes", "Other", "Kernel running"];
    table(o, "UM events by the kernel running on their device", &headers, rows);
    if u.saturated > 0 {
        let _ = writeln!(o, "\n{} UM totals reached 2^64-1 and stopped there (damaged values)", u.saturated);
    }
}

/// One CSV row: section, name, count, total_ns, then (after the percent, average, median, min, max and stddev
/// columns) bytes, then empty bandwidth, gpu_ns, gpu_ops and span_ns.
fn csv_row(o: &mut String, sec: &str, name: &str, count: u64, total_ns: Option<u64>, bytes: Option<u64>) {
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    let _ = writeln!(o, "{sec},{},{count},{},,,,,,,{},,,,", csv_field(name), opt(total_ns), opt(bytes));
}

/// The memory peaks' CSV rows, after the memory operations'.
pub(super) fn memory_peaks_csv(o: &mut String, s: &Stats) {
    for m in &s.memory_peaks {
        let name = format!("{} GPU {} {}", m.file, m.device, m.memory);
        csv_row(o, "memory_peak", &name, m.allocations, Some(m.peak_at_ns), Some(m.peak_bytes));
    }
}

/// CSV rows of the section (see `render_csv` for the columns each uses).
pub(super) fn csv(o: &mut String, s: &Stats) {
    let mut row = |sec: &str, name: &str, count: u64, total_ns: Option<u64>, bytes: Option<u64>| {
        csv_row(o, sec, name, count, total_ns, bytes)
    };
    let u = &s.um;
    for m in &u.migrations {
        row("um_migration", m.direction, m.count, Some(m.total_ns), Some(m.bytes));
    }
    for c in &u.causes {
        row("um_cause", &format!("{} | {}", c.kind, c.cause), c.count, None, Some(c.bytes));
    }
    for f in &u.gpu_faults {
        row("um_gpu_fault", &format!("{} | {}", gpu(f.device), f.access), f.records, None, None);
        row("um_fault_groups", &format!("{} | {}", gpu(f.device), f.access), f.groups, None, None);
    }
    for c in &u.cpu_faults_by_access {
        row("um_cpu_fault", c.access, c.count, None, None);
    }
    for g in &u.thrashing {
        row("um_thrashing", &hex(g.address), g.count, None, Some(g.bytes));
    }
    for t in &u.throttling {
        row("um_throttling", &gpu(t.device), t.count, Some(t.total_ns), None);
    }
    for a in &u.top_bytes {
        row("um_address_bytes", &range(a), a.migrations, None, Some(a.bytes));
    }
    for a in &u.top_faults {
        row("um_address_faults", &range(a), a.faults, None, None);
    }
    for h in &u.host_functions {
        let f = h.unresolved.map_or_else(|| h.function.clone(), |why| format!("<{why}>"));
        row("um_host_function", &format!("{f} | {}", h.file), h.faults, None, None);
    }
    for k in &u.kernels {
        row("um_kernel_faults", &k.kernel, k.gpu_fault_records, None, None);
        row("um_kernel_migrations", &k.kernel, k.migrations, None, Some(k.migrated_bytes));
    }
}
