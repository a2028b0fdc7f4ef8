//! Unified memory episodes for [`SynthOptions::unified_memory`](super::SynthOptions::unified_memory): every
//! [`UM_EVERY`] steps, before the step's work, the program the generator plays allocates a managed buffer and a
//! device scratch buffer, touches the managed one on the host (CPU page faults), prefetches its first chunk, runs a
//! kernel that faults the rest in (GPU page faults, each followed by its HtoD migration, then a thrashing report, a
//! throttling and a remote map), prefetches a chunk to a second GPU (DtoD), synchronizes, reads chunks back on the
//! host (CPU faults and DtoH migrations) and frees both buffers. Every figure lands in [`UmTruth`].
//!
//! The episode runs while the GPU is idle (the previous step ended with a stream synchronize), so the only kernel
//! an episode's event can overlap is the episode's own: the truth of "during a kernel" is exact.

use std::collections::BTreeMap;

use cutr_format::Mapping;
use cutr_schema::kinds;

use super::{COMPUTE_STREAM, CONTEXT_ID, DEVICE_ID, MAIN_THREAD, PID, Slots, Synth, SynthKernel};

/// A unified memory episode every this many steps (the first step has one).
pub const UM_EVERY: u64 = 5;
/// The second GPU, target of the DtoD prefetch.
pub const PEER_DEVICE: u32 = 1;
/// `CUPTI_UNIFIED_MEMORY_CPU_DEVICE_ID`.
pub const CPU: u32 = u32::MAX;
/// The managed buffer of every episode (the allocator hands the same range back after each free).
pub const MANAGED_BASE: u64 = 0x7e00_0000_0000;
pub const MANAGED_BYTES: u64 = 8 << 20;
/// The device scratch buffer of every episode.
pub const SCRATCH_BASE: u64 = 0x7d00_0000_0000;
pub const SCRATCH_BYTES: u64 = 32 << 20;
/// Pages move in chunks of this many bytes.
pub const CHUNK: u64 = 2 << 20;
/// Host touches (CPU page faults) per episode before the kernel, and read-backs (a fault and a DtoH each) after.
pub const HOST_TOUCHES: u64 = 4;
pub const READ_BACKS: u64 = 2;
/// The kernel's GPU page faults: (fault groups, access type), each followed by a 2 MiB HtoD migration.
pub const GPU_FAULTS: [(u64, u32); 3] = [(2, WRITE), (1, READ), (3, ATOMIC)];
/// Thrashing and remote map regions.
pub const REGION_BYTES: u64 = 64 << 10;
/// The kernel's length: long enough to hold its faults, migrations and the rest.
pub const KERNEL_NS: u64 = 600_000;
/// A throttling lasts this long.
pub const THROTTLE_NS: u64 = 20_000;

/// `CUpti_ActivityUnifiedMemoryCounterKind`.
pub const BYTES_HTOD: u32 = 1;
pub const BYTES_DTOH: u32 = 2;
pub const CPU_PAGE_FAULT: u32 = 3;
pub const GPU_PAGE_FAULT: u32 = 4;
pub const THRASHING: u32 = 5;
pub const THROTTLING: u32 = 6;
pub const REMOTE_MAP: u32 = 7;
pub const BYTES_DTOD: u32 = 8;
/// `CUpti_ActivityUnifiedMemoryMigrationCause`.
pub const CAUSE_COHERENCE: u32 = 2;
pub const CAUSE_PREFETCH: u32 = 3;
/// `CUpti_ActivityUnifiedMemoryAccessType`.
pub const READ: u32 = 1;
pub const WRITE: u32 = 2;
pub const ATOMIC: u32 = 3;
/// `CUpti_ActivityUnifiedMemoryRemoteMapCause` THRASHING.
pub const REMOTE_MAP_THRASHING: u32 = 2;
/// `CUpti_ActivityMemoryKind` and `CUpti_ActivityMemoryOperationType`.
const MANAGED: u64 = 5;
const DEVICE: u64 = 3;
const ALLOCATION: u64 = 1;
const RELEASE: u64 = 2;

/// Runtime cbids of the episode's calls (CUDA 13.0 headers; the test checks their names).
pub const CUDA_FREE: u32 = 22;
pub const CUDA_MALLOC_MANAGED: u32 = 206;
pub const CUDA_MEM_PREFETCH_ASYNC: u32 = 252;

/// The kernel that touches the managed buffer (`um_touch(float*, unsigned long)`).
pub const UM_KERNEL: SynthKernel = SynthKernel {
    name: "_Z8um_touchPfm",
    grid: [2048, 1, 1],
    block: [256, 1, 1],
    registers: 16,
    static_smem: 0,
    dynamic_smem: 0,
    mean_ns: KERNEL_NS,
};

/// The host side of the episodes: the process's executable mappings (written to the metadata) and the faulting
/// instructions of the CPU page faults, taken in turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UmHost {
    pub mappings: Vec<Mapping>,
    pub fault_pcs: Vec<u64>,
}

/// Where the built-in mappings start.
pub const PYTHON_BASE: u64 = 0x5555_5555_4000;
pub const TORCH_BASE: u64 = 0x7f3b_0000_0000;

impl Default for UmHost {
    /// A Python interpreter and libtorch that no machine holds (their names cannot be resolved: "file not readable
    /// here"), and one faulting address outside every mapping (JIT code).
    fn default() -> UmHost {
        let map = |start: u64, len: u64, path: &str, id: u8| Mapping {
            start,
            end: start + len,
            file_offset: 0x1000,
            path: path.into(),
            build_id: vec![id; 20],
        };
        UmHost {
            mappings: vec![
                map(PYTHON_BASE, 0x40_0000, "/usr/bin/python3.12", 0xab),
                map(TORCH_BASE, 0x100_0000, "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so", 0xcd),
            ],
            fault_pcs: vec![PYTHON_BASE + 0x1234, TORCH_BASE + 0x5678, PYTHON_BASE + 0x2000, 0x7fff_dead_0000],
        }
    }
}

/// Exact facts about the unified memory the episodes generated. Directions are `HtoD`, `DtoH`, `DtoD`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UmTruth {
    pub episodes: u64,
    /// UM records per raw counter kind.
    pub records: BTreeMap<u32, u64>,
    /// Direction -> (migrations, bytes, total ns).
    pub migrations: BTreeMap<&'static str, (u64, u64, u64)>,
    /// (direction, cause) -> (migrations, bytes).
    pub migration_causes: BTreeMap<(&'static str, u32), (u64, u64)>,
    /// Access type -> (GPU page fault records, fault groups).
    pub gpu_faults: BTreeMap<u32, (u64, u64)>,
    /// CPU page faults per faulting instruction, and per access type (CUDA 13 gives them one: writes while the host
    /// fills the buffer, reads when it reads back).
    pub cpu_fault_pcs: BTreeMap<u64, u64>,
    pub cpu_faults: BTreeMap<u32, u64>,
    /// (regions, bytes).
    pub thrashing: (u64, u64),
    /// (throttlings, ns).
    pub throttling: (u64, u64),
    /// (remote maps, bytes).
    pub remote_maps: (u64, u64),
    /// Per raw counter kind: events that began on a device while the episode's kernel ran there.
    pub during_kernel: BTreeMap<u32, u64>,
    /// Migrated bytes and faults (GPU fault records + CPU faults) per base address.
    pub bytes_by_address: BTreeMap<u64, u64>,
    pub faults_by_address: BTreeMap<u64, u64>,
}

/// Where the fields of the UM and allocation records are.
pub(super) struct UmSlots {
    um: Slots,
    memory: Slots,
    /// The next CPU fault's PC (index into `fault_pcs`).
    next_pc: usize,
}

mod slot {
    pub const KIND: usize = 0;
    pub const VALUE: usize = 1;
    pub const START: usize = 2;
    pub const END: usize = 3;
    pub const ADDRESS: usize = 4;
    pub const SRC: usize = 5;
    pub const DST: usize = 6;
    pub const FLAGS: usize = 7;
    pub const PROCESSORS: usize = 8;
    pub const STREAM: usize = 9;
    pub const PID: usize = 10;
    pub mod mem {
        pub const OP: usize = 0;
        pub const KIND: usize = 1;
        pub const CORR: usize = 2;
        pub const ADDRESS: usize = 3;
        pub const BYTES: usize = 4;
        pub const TS: usize = 5;
        pub const PID: usize = 6;
        pub const DEVICE: usize = 7;
        pub const CONTEXT: usize = 8;
        pub const STREAM: usize = 9;
    }
}

impl UmSlots {
    pub(super) fn new(table: &cutr_schema::LayoutTable) -> UmSlots {
        let um = [
            "counterKind",
            "value",
            "start",
            "end",
            "address",
            "srcId",
            "dstId",
            "flags",
            "processors",
            "streamId",
            "processId",
        ];
        let memory = [
            "memoryOperationType",
            "memoryKind",
            "correlationId",
            "address",
            "bytes",
            "timestamp",
            "processId",
            "deviceId",
            "contextId",
            "streamId",
        ];
        UmSlots {
            um: Slots::new(table, kinds::UNIFIED_MEMORY_COUNTER, &um),
            memory: Slots::new(table, kinds::MEMORY2, &memory),
            next_pc: 0,
        }
    }

    fn bytes(&self, e: &UmRecord) -> Vec<u8> {
        let s = &self.um;
        let mut r = s.new_record();
        let fields = [
            (slot::KIND, e.kind as u64),
            (slot::VALUE, e.value),
            (slot::START, e.start),
            (slot::END, e.end),
            (slot::ADDRESS, e.address),
            (slot::SRC, e.src as u64),
            (slot::DST, e.dst as u64),
            (slot::FLAGS, e.flags as u64),
            (slot::STREAM, COMPUTE_STREAM as u64),
            (slot::PID, PID as u64),
        ];
        for (i, v) in fields {
            s.set(&mut r, i, v);
        }
        // `processors` is an array of five u64; the first holds devices 0-63.
        let (o, _) = s.off[slot::PROCESSORS];
        r[o..o + 8].copy_from_slice(&e.processors.to_le_bytes());
        r
    }
}

/// One UM record's fields (the ones its kind uses; the rest stay 0), raw as CUPTI writes them: any value goes,
/// so tests can write hostile records with [`um_record_bytes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UmRecord {
    pub kind: u32,
    pub value: u64,
    pub start: u64,
    pub end: u64,
    pub address: u64,
    pub src: u32,
    pub dst: u32,
    pub flags: u32,
    /// The first of CUPTI's five `processors` words (devices 0-63).
    pub processors: u64,
}

/// The bytes of a `CUpti_ActivityUnifiedMemoryCounter3` record in the layout of `table`.
pub fn um_record_bytes(table: &cutr_schema::LayoutTable, e: &UmRecord) -> Vec<u8> {
    UmSlots::new(table).bytes(e)
}

fn direction(kind: u32) -> &'static str {
    match kind {
        BYTES_HTOD => "HtoD",
        BYTES_DTOH => "DtoH",
        _ => "DtoD",
    }
}

impl Synth {
    /// A MEMORY2 allocation or release record at `ts`, and the memory in use it makes.
    pub(super) fn memory_record(&mut self, free: bool, memory_kind: u64, address: u64, bytes: u64, ts: u64, corr: u32) {
        let r = {
            let s = &self.um_slots.as_ref().expect("unified memory slots").memory;
            let mut r = s.new_record();
            let fields = [
                (slot::mem::OP, if free { RELEASE } else { ALLOCATION }),
                (slot::mem::KIND, memory_kind),
                (slot::mem::CORR, corr as u64),
                (slot::mem::ADDRESS, address),
                (slot::mem::BYTES, bytes),
                (slot::mem::TS, ts),
                (slot::mem::PID, PID as u64),
                (slot::mem::DEVICE, DEVICE_ID as u64),
                (slot::mem::CONTEXT, CONTEXT_ID as u64),
                (slot::mem::STREAM, COMPUTE_STREAM as u64),
            ];
            for (i, v) in fields {
                s.set(&mut r, i, v);
            }
            r
        };
        self.see_time(ts);
        self.track_memory((DEVICE_ID, memory_kind == MANAGED), ts, bytes, free);
        self.emit(r);
    }

    /// Queues a UM record (it reaches a buffer when the host clock passes its end) and counts it in the truth.
    fn um_record(&mut self, e: UmRecord, kernel: (u64, u64)) {
        let r = self.um_slots.as_ref().expect("unified memory slots").bytes(&e);
        self.see_time(e.start);
        self.see_time(e.end);
        let t = &mut self.truth.um;
        *t.records.entry(e.kind).or_default() += 1;
        match e.kind {
            BYTES_HTOD | BYTES_DTOH | BYTES_DTOD => {
                let m = t.migrations.entry(direction(e.kind)).or_default();
                m.0 += 1;
                m.1 += e.value;
                m.2 += e.end - e.start;
                let c = t.migration_causes.entry((direction(e.kind), e.flags)).or_default();
                c.0 += 1;
                c.1 += e.value;
                *t.bytes_by_address.entry(e.address).or_default() += e.value;
            }
            GPU_PAGE_FAULT => {
                let g = t.gpu_faults.entry(e.flags).or_default();
                g.0 += 1;
                g.1 += e.value;
                *t.faults_by_address.entry(e.address).or_default() += 1;
            }
            CPU_PAGE_FAULT => {
                *t.cpu_fault_pcs.entry(e.value).or_default() += 1;
                *t.cpu_faults.entry(e.flags).or_default() += 1;
                *t.faults_by_address.entry(e.address).or_default() += 1;
            }
            THRASHING => t.thrashing = (t.thrashing.0 + 1, t.thrashing.1 + e.value),
            THROTTLING => t.throttling = (t.throttling.0 + 1, t.throttling.1 + (e.end - e.start)),
            _ => t.remote_maps = (t.remote_maps.0 + 1, t.remote_maps.1 + e.value),
        }
        // Events of one device (not CPU faults or thrashing) that begin on device 0 while the kernel runs there.
        let on_device_0 = match e.kind {
            CPU_PAGE_FAULT | THRASHING => false,
            BYTES_HTOD | BYTES_DTOD | REMOTE_MAP => e.dst == DEVICE_ID || (e.dst == CPU && e.src == DEVICE_ID),
            _ => e.src == DEVICE_ID,
        };
        if on_device_0 && (kernel.0..=kernel.1).contains(&e.start) {
            *t.during_kernel.entry(e.kind).or_default() += 1;
        }
        self.gpu(e.end, r);
    }

    /// A CPU page fault (of access type `access`) at the host clock, at the next of the host's faulting
    /// instructions.
    fn cpu_fault(&mut self, address: u64, access: u32) {
        let gap = self.rng.range(1_000, 3_000);
        self.advance_host(gap);
        let pcs = &self.opts.um_host.fault_pcs;
        let slots = self.um_slots.as_mut().expect("unified memory slots");
        let pc = if pcs.is_empty() { 0 } else { pcs[slots.next_pc % pcs.len()] };
        slots.next_pc += 1;
        let ts = self.host;
        self.um_record(
            UmRecord {
                kind: CPU_PAGE_FAULT,
                value: pc,
                start: ts,
                address,
                src: CPU,
                flags: access,
                ..Default::default()
            },
            (0, 0),
        );
    }

    /// A migration of `bytes` at `address` over [start, end].
    fn migration(&mut self, kind: u32, cause: u32, address: u64, start: u64, end: u64, kernel: (u64, u64)) {
        let (src, dst) = match kind {
            BYTES_HTOD => (CPU, DEVICE_ID),
            BYTES_DTOH => (DEVICE_ID, CPU),
            _ => (DEVICE_ID, PEER_DEVICE),
        };
        let e = UmRecord { kind, value: CHUNK, start, end, address, src, dst, flags: cause, ..Default::default() };
        self.um_record(e, kernel);
    }

    /// One episode (see the module's documentation).
    pub(super) fn um_episode(&mut self) {
        self.truth.um.episodes += 1;
        let (corr, start, _) = self.api_call_between(false, CUDA_MALLOC_MANAGED, MAIN_THREAD, (30_000, 60_000), false);
        self.memory_record(false, MANAGED, MANAGED_BASE, MANAGED_BYTES, start + 10_000, corr);
        let (corr, start, _) =
            self.api_call_between(false, super::cb::CUDA_MALLOC, MAIN_THREAD, (30_000, 60_000), false);
        self.memory_record(false, DEVICE, SCRATCH_BASE, SCRATCH_BYTES, start + 10_000, corr);
        for i in 0..HOST_TOUCHES {
            self.cpu_fault(MANAGED_BASE + i * CHUNK, WRITE);
        }
        // Prefetch the first chunk to the GPU: a migration on the compute stream.
        let none = (0, 0);
        let (_, api_start, _) =
            self.api_call_between(false, CUDA_MEM_PREFETCH_ASYNC, MAIN_THREAD, (4_000, 6_000), false);
        let (s, e) = self.schedule(COMPUTE_STREAM, api_start, 100_000);
        self.migration(BYTES_HTOD, CAUSE_PREFETCH, MANAGED_BASE, s, e, none);
        let kernel = self.um_kernel();
        self.um_kernel_events(kernel);
        // Prefetch the last chunk to the peer GPU after the kernel.
        let (_, api_start, _) =
            self.api_call_between(false, CUDA_MEM_PREFETCH_ASYNC, MAIN_THREAD, (4_000, 6_000), false);
        let (s, e) = self.schedule(COMPUTE_STREAM, api_start, 20_000);
        self.migration(BYTES_DTOD, CAUSE_PREFETCH, MANAGED_BASE + 3 * CHUNK, s, e, none);
        let busy = self.stream_free.values().copied().max().unwrap_or(0);
        let wait = busy.saturating_sub(self.host).max(2_000) + 1_000;
        self.api_call(false, super::cb::CUDA_DEVICE_SYNCHRONIZE, MAIN_THREAD, wait, false);
        for i in 0..READ_BACKS {
            let address = MANAGED_BASE + (1 + i) * CHUNK;
            self.cpu_fault(address, READ);
            let start = self.host + 1_000;
            let dur = self.rng.range(140_000, 160_000);
            self.migration(BYTES_DTOH, CAUSE_COHERENCE, address, start, start + dur, none);
            self.host = start + dur;
        }
        let (corr, start, _) = self.api_call_between(false, CUDA_FREE, MAIN_THREAD, (20_000, 40_000), false);
        self.memory_record(true, MANAGED, MANAGED_BASE, MANAGED_BYTES, start + 10_000, corr);
        let (corr, start, _) = self.api_call_between(false, CUDA_FREE, MAIN_THREAD, (20_000, 40_000), false);
        self.memory_record(true, DEVICE, SCRATCH_BASE, SCRATCH_BYTES, start + 10_000, corr);
    }

    /// Launches the touching kernel; its (start, end).
    fn um_kernel(&mut self) -> (u64, u64) {
        self.ext_id += 1;
        let api_dur = self.rng.range(2_500, 5_500);
        let (corr, api_start, _) = self.api_call(false, super::cb::CUDA_LAUNCH_KERNEL, MAIN_THREAD, api_dur, true);
        let (start, end) = self.schedule(COMPUTE_STREAM, api_start, KERNEL_NS);
        let r = self.kernel_record(super::UM_KERNEL_INDEX, COMPUTE_STREAM, corr, start, end, None);
        self.truth.gpu_records_with_api += 1;
        self.gpu(end, r);
        (start, end)
    }

    /// What happens inside the kernel: faults, each followed by its migration; thrashing, throttling, remote map.
    fn um_kernel_events(&mut self, kernel: (u64, u64)) {
        let mut t = kernel.0 + 10_000;
        for (i, (groups, access)) in GPU_FAULTS.into_iter().enumerate() {
            let address = MANAGED_BASE + (i as u64 + 1) * CHUNK;
            let fault_end = t + self.rng.range(3_000, 6_000);
            let fault = UmRecord {
                kind: GPU_PAGE_FAULT,
                value: groups,
                start: t,
                end: fault_end,
                address,
                src: DEVICE_ID,
                flags: access,
                ..Default::default()
            };
            self.um_record(fault, kernel);
            let m_start = fault_end + 1_000;
            let m_end = m_start + self.rng.range(90_000, 110_000);
            self.migration(BYTES_HTOD, CAUSE_COHERENCE, address, m_start, m_end, kernel);
            t = m_end + 20_000;
        }
        let at = kernel.0 + 500_000;
        let region = |kind, start, end, src, dst, flags, processors| UmRecord {
            kind,
            value: if kind == THROTTLING { 0 } else { REGION_BYTES },
            start,
            end,
            address: MANAGED_BASE,
            src,
            dst,
            flags,
            processors,
        };
        // CUPTI leaves the end of the instants (thrashing, remote maps, CPU faults) 0.
        self.um_record(region(THRASHING, at, 0, CPU, CPU, 0, 0b11), kernel);
        let throttle = region(THROTTLING, at + 10_000, at + 10_000 + THROTTLE_NS, DEVICE_ID, CPU, 0, 0);
        self.um_record(throttle, kernel);
        let remote = region(REMOTE_MAP, at + 40_000, 0, CPU, DEVICE_ID, REMOTE_MAP_THRASHING, 0);
        self.um_record(remote, kernel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SynthOptions;
    use cutr_schema::callbacks::{DOMAIN_RUNTIME, raw_name};

    #[test]
    fn cbids_name_the_calls() {
        assert_eq!(raw_name(DOMAIN_RUNTIME, CUDA_FREE), Some("cudaFree_v3020"));
        assert_eq!(raw_name(DOMAIN_RUNTIME, CUDA_MALLOC_MANAGED), Some("cudaMallocManaged_v6000"));
        assert_eq!(raw_name(DOMAIN_RUNTIME, CUDA_MEM_PREFETCH_ASYNC), Some("cudaMemPrefetchAsync_v8000"));
    }

    #[test]
    fn episodes_add_up() {
        let opts = SynthOptions { records: 3_000, unified_memory: true, ..Default::default() };
        let mut s = Synth::new(opts).unwrap();
        while s.next_buffer().is_some() {}
        let t = s.truth();
        let u = &t.um;
        let n = u.episodes;
        assert_eq!(n, (t.steps - 1) / UM_EVERY + 1);
        assert_eq!(t.records_per_kind[&kinds::UNIFIED_MEMORY_COUNTER], n * 19);
        assert_eq!((u.migrations["HtoD"].0, u.migrations["HtoD"].1), (4 * n, 4 * n * CHUNK));
        assert_eq!((u.migrations["DtoH"].0, u.migrations["DtoD"].1), (2 * n, n * CHUNK));
        assert_eq!(u.gpu_faults[&ATOMIC], (n, 3 * n));
        assert_eq!(u.cpu_fault_pcs.values().sum::<u64>(), 6 * n);
        assert_eq!(u.during_kernel.values().sum::<u64>(), 8 * n);
        assert_eq!(t.kernels[UM_KERNEL.name], (n, n * KERNEL_NS));
        // The prologue's 592 MiB, then each episode's scratch buffer, reached at the first; managed memory apart.
        assert_eq!(t.memory_peak[&DEVICE_ID].0, (592 << 20) + SCRATCH_BYTES);
        assert_eq!(t.managed_peak[&DEVICE_ID].0, MANAGED_BYTES);
    }
}
