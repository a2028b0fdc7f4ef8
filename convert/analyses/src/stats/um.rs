//! The `um` section: unified memory as nsys's `um_sum`, `um_total_sum` and `um_cpu_page_faults_sum` report it,
//! plus what they do not: migrations by cause, thrashing regions, throttling, remote maps, the addresses that moved
//! the most bytes and took the most faults, the host functions behind the CPU faults (named from the recorded
//! mappings where the files are readable here), and each event joined to the kernel running on its device.
//!
//! Totals saturate at 2^64-1 instead of wrapping: a damaged or hostile `value` near 2^64 cannot make a total
//! small again. Each addition that saturated is counted in [`UmReport::saturated`].
//!
//! The sums are made one event at a time ([`Tally`]), CPU faults counted per faulting instruction before their
//! functions are resolved, and the events by kernel summed per kernel name: `stats --stream` builds the same
//! report from the same parts (`stream_um`).

use std::collections::HashMap;

use cutr_model::rows::{UmEvent, UmKind};
use cutr_model::um::RunningKernels;
use cutr_model::um_host::{HostLocation, host_location};
use cutr_model::{ProcId, Trace, demangle::demangle, describe};
use cutr_source::host::HostSymbols;
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Address rows shown when `--top` is not given (every page of a large buffer would be a row).
pub const ADDRESS_ROWS: usize = 10;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UmReport {
    /// UM events in the trace (after `--start`/`--end`).
    pub events: u64,
    /// By direction: HtoD, DtoH, DtoD.
    pub migrations: Vec<UmMigrations>,
    /// Migrations by direction and cause, then remote maps by cause.
    pub causes: Vec<UmCause>,
    /// GPU page faults by device and access type.
    pub gpu_faults: Vec<UmGpuFaults>,
    pub cpu_faults: u64,
    /// CPU page faults by access type (CUDA 13 gives them one), most first.
    pub cpu_faults_by_access: Vec<UmCpuFaults>,
    /// Thrashing by region (base address), most reports first.
    pub thrashing: Vec<UmRegion>,
    /// Throttling by device.
    pub throttling: Vec<UmThrottling>,
    /// Addresses by bytes migrated, and by faults (GPU fault records and CPU faults).
    pub top_bytes: Vec<UmAddress>,
    pub top_faults: Vec<UmAddress>,
    /// CPU faults by host function.
    pub host_functions: Vec<UmHostFunction>,
    /// Events of one device by the kernel running there when they began (`(no kernel)` outside every kernel).
    pub kernels: Vec<UmKernel>,
    /// Additions that would have passed 2^64-1 and stopped there.
    pub saturated: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UmMigrations {
    pub direction: &'static str,
    pub count: u64,
    pub bytes: u64,
    pub total_ns: u64,
    pub avg_ns: f64,
    /// bytes / total time, in GB/s (1e9 bytes).
    pub throughput_gbps: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UmCause {
    /// `migration HtoD`, ..., `remote map`.
    pub kind: &'static str,
    pub cause: &'static str,
    pub count: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UmGpuFaults {
    pub device: u32,
    pub access: &'static str,
    /// Fault records, and the fault groups they count (CUPTI's `value`).
    pub records: u64,
    pub groups: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UmCpuFaults {
    pub access: &'static str,
    pub count: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UmRegion {
    pub address: u64,
    pub count: u64,
    pub bytes: u64,
    /// The devices fighting over it (bit per device, all reports or-ed).
    pub processors: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UmThrottling {
    pub device: u32,
    pub count: u64,
    pub total_ns: u64,
}

/// CUDA's unified memory driver migrates and services faults within 2 MiB blocks of virtual addresses: the address
/// rows are these blocks, each summing the records whose base address falls in it.
pub const VA_BLOCK: u64 = 2 << 20;

/// One 2 MiB block of virtual addresses, `address..end`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UmAddress {
    pub address: u64,
    pub end: u64,
    pub bytes: u64,
    pub migrations: u64,
    pub faults: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UmHostFunction {
    /// Demangled; empty when unresolved.
    pub function: String,
    /// The mapped file; empty when no mapping held the address.
    pub file: String,
    pub faults: u64,
    /// Why there is no function name (`file not readable here`, `build id differs`, ...).
    pub unresolved: Option<&'static str>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct UmKernel {
    pub kernel: String,
    pub gpu_fault_records: u64,
    pub fault_groups: u64,
    pub migrations: u64,
    pub migrated_bytes: u64,
    /// Throttling and remote maps.
    pub other: u64,
}

/// `total += v`, saturating; counts a saturation.
pub(super) fn add(total: &mut u64, v: u64, saturated: &mut u64) {
    match total.checked_add(v) {
        Some(s) => *total = s,
        None => {
            *total = u64::MAX;
            *saturated += 1;
        }
    }
}

fn direction(kind: UmKind) -> &'static str {
    match kind {
        UmKind::BytesHtoD => "HtoD",
        UmKind::BytesDtoH => "DtoH",
        _ => "DtoD",
    }
}

/// The section; `top` limits every list (`None`: all, but [`ADDRESS_ROWS`] addresses).
pub(crate) fn um(t: &Trace, top: Option<usize>, symbol_dirs: &[std::path::PathBuf]) -> UmReport {
    // The section is on by default: a trace without UM events must not pay for the kernel index.
    if t.um.is_empty() {
        return UmReport::default();
    }
    let mut tally = Tally::default();
    let mut fault_pcs: FxHashMap<(ProcId, u64), u64> = FxHashMap::default();
    for e in &t.um {
        tally.event(e);
        if e.kind == UmKind::CpuPageFault {
            *fault_pcs.entry((e.proc, e.pc)).or_default() += 1;
        }
    }
    let mut kernel_saturated = 0;
    let kernels = by_kernel(t, &mut kernel_saturated);
    let parts = ReportParts { events: t.um.len() as u64, fault_pcs, kernels, kernel_saturated };
    parts.report(tally, t, top, symbol_dirs)
}

/// What the report needs besides the [`Tally`]: the same from a loaded trace or a stream.
pub(super) struct ReportParts {
    pub(super) events: u64,
    /// CPU faults per faulting instruction: (file, PC) -> faults.
    pub(super) fault_pcs: FxHashMap<(ProcId, u64), u64>,
    /// Events by kernel name ([`kernel_rows`]), and the additions of theirs that saturated.
    pub(super) kernels: HashMap<String, UmKernel>,
    pub(super) kernel_saturated: u64,
}

impl ReportParts {
    pub(super) fn report(
        self,
        tally: Tally,
        t: &Trace,
        top: Option<usize>,
        symbol_dirs: &[std::path::PathBuf],
    ) -> UmReport {
        let mut r = tally.report(top);
        r.events = self.events;
        r.host_functions = host_functions(t, self.fault_pcs, symbol_dirs);
        limit(&mut r.host_functions, top);
        r.kernels = kernel_rows(self.kernels);
        limit(&mut r.kernels, top);
        r.saturated += self.kernel_saturated;
        r
    }
}

fn limit<T>(v: &mut Vec<T>, n: Option<usize>) {
    if let Some(n) = n {
        v.truncate(n);
    }
}

fn at_address(a: &mut FxHashMap<u64, UmAddress>, address: u64) -> &mut UmAddress {
    let block = address & !(VA_BLOCK - 1);
    a.entry(block).or_insert_with(|| UmAddress {
        address: block,
        end: block.saturating_add(VA_BLOCK),
        ..Default::default()
    })
}

/// The sums of one pass over the events, keyed as the report's lists are.
#[derive(Default)]
pub(super) struct Tally {
    migrations: FxHashMap<&'static str, UmMigrations>,
    causes: FxHashMap<(&'static str, &'static str), UmCause>,
    faults: FxHashMap<(u32, &'static str), UmGpuFaults>,
    regions: FxHashMap<u64, UmRegion>,
    throttling: FxHashMap<u32, UmThrottling>,
    addresses: FxHashMap<u64, UmAddress>,
    cpu_faults: FxHashMap<&'static str, u64>,
    sat: u64,
}

impl Tally {
    pub(super) fn event(&mut self, e: &UmEvent) {
        let (flags, sat) = (describe::um_flags(e), &mut self.sat);
        let kind = e.kind.name();
        match e.kind {
            UmKind::BytesHtoD | UmKind::BytesDtoH | UmKind::BytesDtoD => {
                let d = direction(e.kind);
                let m = self.migrations.entry(d).or_insert_with(|| UmMigrations { direction: d, ..Default::default() });
                m.count += 1;
                add(&mut m.bytes, e.value, sat);
                add(&mut m.total_ns, e.duration(), sat);
                let a = at_address(&mut self.addresses, e.address);
                a.migrations += 1;
                add(&mut a.bytes, e.value, sat);
            }
            UmKind::GpuPageFault => {
                let f = (self.faults.entry((e.src, flags))).or_insert_with(|| UmGpuFaults {
                    device: e.src,
                    access: flags,
                    ..Default::default()
                });
                f.records += 1;
                add(&mut f.groups, e.value, sat);
                at_address(&mut self.addresses, e.address).faults += 1;
            }
            UmKind::CpuPageFault => {
                *self.cpu_faults.entry(flags).or_default() += 1;
                at_address(&mut self.addresses, e.address).faults += 1;
            }
            UmKind::Thrashing => {
                let g = (self.regions.entry(e.address))
                    .or_insert_with(|| UmRegion { address: e.address, ..Default::default() });
                g.count += 1;
                g.processors |= e.processors;
                add(&mut g.bytes, e.value, sat);
            }
            UmKind::Throttling => {
                let th = (self.throttling.entry(e.src))
                    .or_insert_with(|| UmThrottling { device: e.src, ..Default::default() });
                th.count += 1;
                add(&mut th.total_ns, e.duration(), sat);
            }
            UmKind::RemoteMap => {}
        }
        if e.kind.is_migration() || e.kind == UmKind::RemoteMap {
            let c = (self.causes.entry((kind, flags))).or_insert_with(|| UmCause {
                kind,
                cause: flags,
                ..Default::default()
            });
            c.count += 1;
            add(&mut c.bytes, e.value, sat);
        }
    }

    fn report(self, top: Option<usize>) -> UmReport {
        use std::cmp::Reverse;
        let mut r = UmReport { cpu_faults: self.cpu_faults.values().sum(), saturated: self.sat, ..Default::default() };
        r.cpu_faults_by_access =
            self.cpu_faults.into_iter().map(|(access, count)| UmCpuFaults { access, count }).collect();
        r.cpu_faults_by_access.sort_by_key(|c| (Reverse(c.count), c.access));
        r.migrations = self.migrations.into_values().collect();
        for m in &mut r.migrations {
            m.avg_ns = if m.count > 0 { m.total_ns as f64 / m.count as f64 } else { 0.0 };
            m.throughput_gbps = if m.total_ns > 0 { m.bytes as f64 / m.total_ns as f64 } else { 0.0 };
        }
        r.migrations.sort_by_key(|m| (Reverse(m.bytes), m.direction));
        r.causes = self.causes.into_values().collect();
        r.causes.sort_by_key(|c| (c.kind, Reverse(c.bytes), c.cause));
        r.gpu_faults = self.faults.into_values().collect();
        r.gpu_faults.sort_by_key(|f| (f.device, Reverse(f.records), f.access));
        r.thrashing = self.regions.into_values().collect();
        r.thrashing.sort_by_key(|g| (Reverse(g.count), g.address));
        limit(&mut r.thrashing, top);
        r.throttling = self.throttling.into_values().collect();
        r.throttling.sort_by_key(|x| x.device);
        let addresses: Vec<UmAddress> = self.addresses.into_values().collect();
        let rows = Some(top.unwrap_or(ADDRESS_ROWS));
        r.top_bytes = addresses.iter().filter(|a| a.migrations > 0).cloned().collect();
        r.top_bytes.sort_by_key(|a| (Reverse(a.bytes), a.address));
        limit(&mut r.top_bytes, rows);
        r.top_faults = addresses.into_iter().filter(|a| a.faults > 0).collect();
        r.top_faults.sort_by_key(|a| (Reverse(a.faults), a.address));
        limit(&mut r.top_faults, rows);
        r
    }
}

/// CPU faults by host function (most first), from the faults per faulting instruction (`fault_pcs`: (file, PC)
/// -> faults). An instruction resolves once, a file is read once, whatever the number of faults in them.
fn host_functions(
    t: &Trace,
    fault_pcs: FxHashMap<(ProcId, u64), u64>,
    symbol_dirs: &[std::path::PathBuf],
) -> Vec<UmHostFunction> {
    let mut symbols = HostSymbols::with_search_dirs(symbol_dirs.to_vec());
    let mut rows: HashMap<(String, String, Option<&'static str>), u64> = HashMap::new();
    for ((proc, pc), faults) in fault_pcs {
        let key = match host_location(t, proc, pc) {
            HostLocation::Mapped { mapping, offset } => {
                match symbols.function(&mapping.path, &mapping.build_id, offset) {
                    Ok(name) => (demangle(&name), mapping.path.clone(), None),
                    Err(why) => (String::new(), mapping.path.clone(), Some(why.as_str())),
                }
            }
            other => (String::new(), String::new(), other.unresolved()),
        };
        *rows.entry(key).or_default() += faults;
    }
    let mut out: Vec<UmHostFunction> = rows
        .into_iter()
        .map(|((function, file, unresolved), faults)| UmHostFunction { function, file, faults, unresolved })
        .collect();
    out.sort_by(|a, b| {
        (b.faults.cmp(&a.faults))
            .then_with(|| (&a.function, &a.file).cmp(&(&b.function, &b.file)))
            .then_with(|| a.unresolved.cmp(&b.unresolved))
    });
    out
}

/// Events of one device by the name of the kernel running there when they began.
fn by_kernel(t: &Trace, sat: &mut u64) -> HashMap<String, UmKernel> {
    let running = RunningKernels::new(t);
    let mut rows: HashMap<String, UmKernel> = HashMap::new();
    for e in t.um.iter().filter(|e| e.device().is_some()) {
        let name = match running.of_um(e) {
            Some(i) => t.kernel_name(&t.kernels[i]).to_string(),
            None => NO_KERNEL.to_string(),
        };
        let k = rows.entry(name).or_insert_with_key(|n| UmKernel { kernel: n.clone(), ..Default::default() });
        count_for_kernel(k, e, sat);
    }
    rows
}

/// The name of the events of no kernel.
pub(super) const NO_KERNEL: &str = "(no kernel)";

/// The rows by kernel, most GPU fault records first, then most bytes migrated.
fn kernel_rows(rows: HashMap<String, UmKernel>) -> Vec<UmKernel> {
    let mut out: Vec<UmKernel> = rows.into_values().collect();
    out.sort_by(|a, b| {
        (b.gpu_fault_records, b.migrated_bytes)
            .cmp(&(a.gpu_fault_records, a.migrated_bytes))
            .then_with(|| a.kernel.cmp(&b.kernel))
    });
    out
}

/// One event into its kernel's row.
pub(super) fn count_for_kernel(k: &mut UmKernel, e: &UmEvent, sat: &mut u64) {
    match e.kind {
        UmKind::GpuPageFault => {
            k.gpu_fault_records += 1;
            add(&mut k.fault_groups, e.value, sat);
        }
        kind if kind.is_migration() => {
            k.migrations += 1;
            add(&mut k.migrated_bytes, e.value, sat);
        }
        _ => k.other += 1,
    }
}
