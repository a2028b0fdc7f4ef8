//! A deterministic generator of realistic CUPTI activity buffers, for tests and benchmarks.
//!
//! It simulates a launch-bound PyTorch training loop on one GPU the way CUPTI would record it: every launch is an
//! external-correlation record (PyTorch's op id), a runtime API record and the GPU record, sharing one
//! correlation id; GPU work queues on streams behind the host; records reach buffers in completion order (host
//! records when the call returns, GPU records when the work ends), so kinds interleave as in real buffers. Each
//! step also has NVTX push/pop ranges, memsets, memcpys of every direction (pinned and pageable), an event
//! record with a cross-stream wait, a stream synchronize, a Triton kernel launched through the driver API, an
//! NCCL all-reduce on its own stream, and every few steps a CUDA graph replay. The trace starts with device,
//! context, stream, allocation and overhead records.
//!
//! Records are written through the layout table of the chosen CUPTI version by field name, so the same loop
//! produces 13.0 (`Kernel10`) or 12.9 (`Kernel9`) buffers. [`SynthTruth`] holds exact ground truth (counts,
//! per-kernel GPU time, bytes) for tests to compare converters against.
//!
//! The random numbers come from a fixed SplitMix64 stream so that a seed gives the same bytes forever, which
//! no versioned crate promises.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io::Write;
use std::path::Path;

use cutr_schema::callbacks::{self, DOMAIN_DRIVER, DOMAIN_RUNTIME, runtime as cb};
use cutr_schema::{LayoutTable, RecordLayout, kinds};
use rayon::prelude::*;

use cutr_format::FormatError;
use cutr_format::{ActivityEncoder, Writer, WriterOptions};
use cutr_format::{ClockSample, Device, LossCounters, SessionMetadata};

pub mod um;
pub use um::{UmHost, UmTruth};

/// A kernel the synthetic workload launches.
#[derive(Clone, Copy, Debug)]
pub struct SynthKernel {
    /// As CUPTI reports it (mangled for C++ kernels).
    pub name: &'static str,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub registers: u16,
    pub static_smem: i32,
    pub dynamic_smem: i32,
    /// Mean GPU duration.
    pub mean_ns: u64,
}

const fn k(
    name: &'static str,
    grid: [i32; 3],
    block: [i32; 3],
    registers: u16,
    dynamic_smem: i32,
    mean_ns: u64,
) -> SynthKernel {
    SynthKernel { name, grid, block, registers, static_smem: 0, dynamic_smem, mean_ns }
}

/// The kernels of the synthetic loop. The mangled names were produced by g++ from templates shaped like
/// PyTorch's, so `c++filt` demangles them (lambdas and anonymous namespaces included).
pub const KERNELS: &[SynthKernel] = &[
    k(
        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        [16, 8, 1],
        [384, 1, 1],
        168,
        213_000,
        18_000,
    ),
    k(
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEENS_6detail5ArrayIPcLi3EEEEEviT0_T1_",
        [128, 1, 1],
        [128, 1, 1],
        16,
        0,
        3_000,
    ),
    k(
        "_ZN2at6native29vectorized_elementwise_kernelILi4EZNS0_19launch_clamp_scalarERNS_18TensorIteratorBaseEEUlfE_NS_6detail5ArrayIPcLi2EEEEEviT0_T1_",
        [128, 1, 1],
        [128, 1, 1],
        18,
        0,
        2_500,
    ),
    k(
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AUnaryFunctorIfffNS0_15binary_internal10MulFunctorIfEEEENS_6detail5ArrayIPcLi2EEEEEviT0_T1_",
        [128, 1, 1],
        [128, 1, 1],
        18,
        0,
        2_800,
    ),
    k(
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
        [64, 1, 1],
        [128, 1, 1],
        12,
        0,
        1_500,
    ),
    k(
        "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11instantiateEvEUlffE_EEjfLi4EEEEEvT1_",
        [1, 1, 1],
        [512, 1, 1],
        32,
        16,
        5_000,
    ),
    k(
        "_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardILi4EfffNS1_22SoftMaxForwardEpilogueEEEvPT2_PKT0_l",
        [256, 1, 1],
        [128, 1, 1],
        30,
        1024,
        6_000,
    ),
    k(
        "_ZN2at6native12_GLOBAL__N_125multi_tensor_apply_kernelINS1_18TensorListMetadataILi4EEENS1_11AdamFunctorIfLNS0_9ADAM_MODEE1EEEJfffffbbPfS8_EEEvT_T0_DpT1_",
        [320, 1, 1],
        [512, 1, 1],
        64,
        0,
        25_000,
    ),
    k("triton_poi_fused_add_mul_0", [1024, 1, 1], [256, 1, 1], 24, 0, 2_000),
    k(
        "_ZN7cutlass7Kernel2I62cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_128x1_tn_align8EEvNT_6ParamsE",
        [64, 4, 1],
        [128, 1, 1],
        96,
        32_768,
        12_000,
    ),
    k(
        "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
        [4, 1, 1],
        [544, 1, 1],
        90,
        0,
        40_000,
    ),
];

const GEMM: usize = 0;
const ADD: usize = 1;
const RELU: usize = 2;
const MUL: usize = 3;
const FILL: usize = 4;
const REDUCE: usize = 5;
const SOFTMAX: usize = 6;
const ADAM: usize = 7;
const TRITON: usize = 8;
const CUTLASS: usize = 9;
const NCCL: usize = 10;
/// The unified memory episodes' kernel ([`um::UM_KERNEL`]), after the loop's.
const UM_KERNEL_INDEX: usize = KERNELS.len();

/// A kernel by index: the loop's, or the unified memory episodes'.
fn kernel_def(ki: usize) -> SynthKernel {
    KERNELS.get(ki).copied().unwrap_or(um::UM_KERNEL)
}

/// Fake host addresses of the kernel name strings (CUPTI's pointers are opaque offline anyway).
const KERNEL_NAME_BASE: u64 = 0x7f3a_1000_0000;
const NVTX_NAME_BASE: u64 = 0x5555_7000_0000;

pub const PID: u32 = 4242;
pub const MAIN_THREAD: u32 = 0x9a3f_0740;
pub const LOADER_THREAD: u32 = 0x8e1f_f640;
pub const DEVICE_ID: u32 = 0;
pub const CONTEXT_ID: u32 = 1;
pub const COMPUTE_STREAM: u32 = 7;
pub const COPY_STREAM: u32 = 13;
pub const COMM_STREAM: u32 = 21;
/// Layers in the synthetic model's forward and backward passes.
const LAYERS: usize = 4;
/// A CUDA graph replay every this many steps.
const GRAPH_EVERY: u64 = 25;
const GRAPH_ID: u32 = 1;
/// Pending GPU operations after which launches block (CUDA's launch queue is about this deep).
const MAX_QUEUED: usize = 1024;
/// `CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel`.
const DRIVER_LAUNCH_KERNEL: u32 = 307;

#[derive(Clone, Debug)]
pub struct SynthOptions {
    /// Stop after about this many records (the step in progress completes).
    pub records: u64,
    pub seed: u64,
    /// 130001 (CUDA 13.0) or 28 (CUDA 12.9).
    pub cupti_api_version: u32,
    /// Bytes per activity buffer, as a recorder would hand CUPTI.
    pub buffer_bytes: usize,
    /// Only kernel launches (per launch: an external correlation, a runtime API and a kernel record), the
    /// shape of a launch-bound PyTorch loop; no NVTX, copies, syncs or graphs.
    pub launches_only: bool,
    /// (rank, world size): the recording carries `RANK`/`WORLD_SIZE` as a launcher sets them, on host
    /// `synthetic-host-<rank / 8>`, so that many generated files make one job's ranks.
    pub rank: Option<(u32, u32)>,
    /// Unified memory episodes every [`um::UM_EVERY`] steps (managed and device allocations, migrations of every
    /// direction, GPU and CPU page faults, thrashing, throttling, a remote map; see [`um`]) and a second GPU; not
    /// with `launches_only`.
    pub unified_memory: bool,
    /// The host the CPU page faults happen on (its mappings go to the metadata when `unified_memory` is on).
    pub um_host: UmHost,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            records: 100_000,
            seed: 1,
            cupti_api_version: 130001,
            buffer_bytes: 4 << 20,
            launches_only: false,
            rank: None,
            unified_memory: false,
            um_host: UmHost::default(),
        }
    }
}

/// Exact facts about what was generated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SynthTruth {
    pub records: u64,
    pub records_per_kind: BTreeMap<u32, u64>,
    /// Mangled name -> (launches, total GPU ns).
    pub kernels: BTreeMap<&'static str, (u64, u64)>,
    /// Kernels launched by the CUDA graph replays.
    pub graph_kernels: u64,
    /// GPU records (kernel, memcpy, memset) whose correlation id has a runtime or driver API record.
    pub gpu_records_with_api: u64,
    /// Memcpy (copyKind, srcKind, dstKind) -> (count, bytes, total ns).
    pub memcpys: BTreeMap<(u8, u8, u8), (u64, u64, u64)>,
    /// (count, bytes, total ns)
    pub memsets: (u64, u64, u64),
    /// NVTX push/pop ranges: name -> count (the step ranges are counted under "step").
    pub nvtx_ranges: BTreeMap<String, u64>,
    pub steps: u64,
    pub buffers: u64,
    pub raw_bytes: u64,
    /// First and last timestamp of any record.
    pub t_min: u64,
    pub t_max: u64,
    /// Per device: the most bytes of device memory allocated at once (MEMORY2 allocations less frees) and the
    /// timestamp of the allocation that first reached it.
    pub memory_peak: BTreeMap<u32, (u64, u64)>,
    /// The same for managed memory (`cudaMallocManaged`), a class of its own.
    pub managed_peak: BTreeMap<u32, (u64, u64)>,
    /// What the unified memory episodes generated (empty without `unified_memory`).
    pub um: UmTruth,
}

/// One completed activity buffer and the strings first referenced in it.
pub struct SynthBuffer {
    pub bytes: Vec<u8>,
    pub new_strings: Vec<(u64, String)>,
}

/// SplitMix64.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi].
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// `mean` scaled by a factor in [0.85, 1.25] with a long-ish right tail, like kernel durations.
    fn jitter(&mut self, mean: u64) -> u64 {
        let u = self.next() % 10_000;
        let f = 850 + u * 300 / 10_000 + if self.next().is_multiple_of(50) { 500 } else { 0 };
        (mean * f / 1000).max(1)
    }
}

/// Where each field of one record kind is, looked up once by name.
struct Slots {
    layout: RecordLayout,
    off: Vec<(usize, usize)>,
}

impl Slots {
    fn new(table: &LayoutTable, kind: u32, names: &[&str]) -> Slots {
        let layout = table.get(kind).unwrap_or_else(|| panic!("no layout for kind {kind}")).clone();
        let off = names
            .iter()
            .map(|n| {
                let f = layout.field(n).unwrap_or_else(|| panic!("{} has no field {n}", layout.struct_name));
                (f.offset as usize, f.size as usize)
            })
            .collect();
        Slots { layout, off }
    }

    fn new_record(&self) -> Vec<u8> {
        let mut r = vec![0u8; self.layout.size as usize];
        r[0..4].copy_from_slice(&self.layout.kind.to_le_bytes());
        r
    }

    #[inline]
    fn set(&self, rec: &mut [u8], slot: usize, v: u64) {
        let (o, s) = self.off[slot];
        rec[o..o + s].copy_from_slice(&v.to_le_bytes()[..s]);
    }
}

// Slot indices per kind (order of the name lists in `Layouts::new`).
mod f {
    pub mod api {
        pub const CBID: usize = 0;
        pub const START: usize = 1;
        pub const END: usize = 2;
        pub const PID: usize = 3;
        pub const TID: usize = 4;
        pub const CORR: usize = 5;
    }
    pub mod kern {
        pub const START: usize = 0;
        pub const END: usize = 1;
        pub const COMPLETED: usize = 2;
        pub const DEVICE: usize = 3;
        pub const CONTEXT: usize = 4;
        pub const STREAM: usize = 5;
        pub const GRID: usize = 6;
        pub const BLOCK: usize = 9;
        pub const STATIC_SMEM: usize = 12;
        pub const DYN_SMEM: usize = 13;
        pub const CORR: usize = 14;
        pub const GRID_ID: usize = 15;
        pub const NAME: usize = 16;
        pub const REGS: usize = 17;
        pub const SMEM_EXEC: usize = 18;
        pub const GRAPH_NODE: usize = 19;
        pub const GRAPH: usize = 20;
        pub const CHANNEL: usize = 21;
        pub const CACHE: usize = 22;
    }
    pub mod ext {
        pub const KIND: usize = 0;
        pub const ID: usize = 1;
        pub const CORR: usize = 2;
    }
    pub mod copy {
        pub const COPY_KIND: usize = 0;
        pub const SRC: usize = 1;
        pub const DST: usize = 2;
        pub const FLAGS: usize = 3;
        pub const BYTES: usize = 4;
        pub const START: usize = 5;
        pub const END: usize = 6;
        pub const DEVICE: usize = 7;
        pub const CONTEXT: usize = 8;
        pub const STREAM: usize = 9;
        pub const CORR: usize = 10;
    }
    pub mod set {
        pub const VALUE: usize = 0;
        pub const BYTES: usize = 1;
        pub const START: usize = 2;
        pub const END: usize = 3;
        pub const DEVICE: usize = 4;
        pub const CONTEXT: usize = 5;
        pub const STREAM: usize = 6;
        pub const CORR: usize = 7;
        pub const FLAGS: usize = 8;
        pub const MEM_KIND: usize = 9;
    }
    pub mod marker {
        pub const FLAGS: usize = 0;
        pub const TS: usize = 1;
        pub const ID: usize = 2;
        pub const OBJ_KIND: usize = 3;
        pub const PID: usize = 4;
        pub const TID: usize = 5;
        pub const NAME: usize = 6;
    }
    pub mod sync {
        pub const TYPE: usize = 0;
        pub const START: usize = 1;
        pub const END: usize = 2;
        pub const CORR: usize = 3;
        pub const CONTEXT: usize = 4;
        pub const STREAM: usize = 5;
        pub const EVENT: usize = 6;
    }
    pub mod event {
        pub const CORR: usize = 0;
        pub const CONTEXT: usize = 1;
        pub const STREAM: usize = 2;
        pub const EVENT: usize = 3;
        pub const DEVICE: usize = 4;
    }
}

struct Layouts {
    api: Slots,
    driver: Slots,
    kernel: Slots,
    ext: Slots,
    memcpy: Slots,
    memset: Slots,
    marker: Slots,
    sync: Slots,
    event: Slots,
    table: LayoutTable,
}

impl Layouts {
    fn new(table: LayoutTable) -> Layouts {
        let api_fields = ["cbid", "start", "end", "processId", "threadId", "correlationId"];
        Layouts {
            api: Slots::new(&table, kinds::RUNTIME, &api_fields),
            driver: Slots::new(&table, kinds::DRIVER, &api_fields),
            kernel: Slots::new(
                &table,
                kinds::CONCURRENT_KERNEL,
                &[
                    "start",
                    "end",
                    "completed",
                    "deviceId",
                    "contextId",
                    "streamId",
                    "gridX",
                    "gridY",
                    "gridZ",
                    "blockX",
                    "blockY",
                    "blockZ",
                    "staticSharedMemory",
                    "dynamicSharedMemory",
                    "correlationId",
                    "gridId",
                    "name",
                    "registersPerThread",
                    "sharedMemoryExecuted",
                    "graphNodeId",
                    "graphId",
                    "channelID",
                    "cacheConfig",
                ],
            ),
            ext: Slots::new(&table, kinds::EXTERNAL_CORRELATION, &["externalKind", "externalId", "correlationId"]),
            memcpy: Slots::new(
                &table,
                kinds::MEMCPY,
                &[
                    "copyKind",
                    "srcKind",
                    "dstKind",
                    "flags",
                    "bytes",
                    "start",
                    "end",
                    "deviceId",
                    "contextId",
                    "streamId",
                    "correlationId",
                ],
            ),
            memset: Slots::new(
                &table,
                kinds::MEMSET,
                &[
                    "value",
                    "bytes",
                    "start",
                    "end",
                    "deviceId",
                    "contextId",
                    "streamId",
                    "correlationId",
                    "flags",
                    "memoryKind",
                ],
            ),
            marker: Slots::new(
                &table,
                kinds::MARKER,
                &["flags", "timestamp", "id", "objectKind", "objectId.pt.processId", "objectId.pt.threadId", "name"],
            ),
            sync: Slots::new(
                &table,
                kinds::SYNCHRONIZATION,
                &["type", "start", "end", "correlationId", "contextId", "streamId", "cudaEventId"],
            ),
            event: Slots::new(
                &table,
                kinds::CUDA_EVENT,
                &["correlationId", "contextId", "streamId", "eventId", "deviceId"],
            ),
            table,
        }
    }
}

/// The generator. Call [`Synth::next_buffer`] until it returns `None`.
pub struct Synth {
    opts: SynthOptions,
    l: Layouts,
    rng: Rng,
    /// Host clock of the main thread.
    host: u64,
    t0: u64,
    stream_free: BTreeMap<u32, u64>,
    corr: u32,
    ext_id: u64,
    grid_id: i64,
    marker_id: u32,
    event_id: u32,
    step: u64,
    /// GPU records waiting for their end time to pass: (end, sequence, bytes).
    pending: BinaryHeap<Reverse<(u64, u64, Vec<u8>)>>,
    pending_seq: u64,
    buf: Vec<u8>,
    ready: std::collections::VecDeque<SynthBuffer>,
    interned: std::collections::HashSet<u64>,
    new_strings: Vec<(u64, String)>,
    truth: SynthTruth,
    started: bool,
    finished: bool,
    clocks: Vec<ClockSample>,
    /// Per (device, managed): bytes allocated now.
    in_use: BTreeMap<(u32, bool), u64>,
    /// The unified memory records' fields, with `unified_memory`.
    um_slots: Option<um::UmSlots>,
}

/// The CUPTI clock (ns since the Unix epoch, like CLOCK_REALTIME) at the start of every synthetic trace, plus a
/// seed-dependent offset.
pub const T0: u64 = 1_795_316_045_000_000_000;
/// CLOCK_MONOTONIC is this far behind CLOCK_REALTIME in the synthetic clock samples.
pub const MONOTONIC_OFFSET: u64 = 1_795_000_000_000_000_000;

impl Synth {
    pub fn new(opts: SynthOptions) -> Result<Synth, String> {
        let table = cutr_schema::layouts::builtin(opts.cupti_api_version)
            .ok_or_else(|| format!("no layout table for CUPTI API version {}", opts.cupti_api_version))?;
        if opts.buffer_bytes < 4096 {
            return Err("buffer_bytes must be at least 4096".into());
        }
        let mut rng = Rng(opts.seed);
        let t0 = T0 + rng.range(0, 1_000_000_000);
        let um_slots = (opts.unified_memory && !opts.launches_only).then(|| um::UmSlots::new(&table));
        Ok(Synth {
            um_slots,
            in_use: BTreeMap::new(),
            l: Layouts::new(table),
            rng,
            host: t0,
            t0,
            stream_free: BTreeMap::new(),
            corr: 0,
            ext_id: 0,
            grid_id: 0,
            marker_id: 0,
            event_id: 0,
            step: 0,
            pending: BinaryHeap::new(),
            pending_seq: 0,
            buf: Vec::with_capacity(opts.buffer_bytes),
            ready: Default::default(),
            interned: Default::default(),
            new_strings: Vec::new(),
            truth: SynthTruth { t_min: u64::MAX, ..Default::default() },
            started: false,
            finished: false,
            clocks: vec![ClockSample { cupti_ns: t0, realtime_ns: t0, monotonic_ns: t0 - MONOTONIC_OFFSET }],
            opts,
        })
    }

    pub fn layouts(&self) -> &LayoutTable {
        &self.l.table
    }

    /// Ground truth so far (complete once [`Synth::next_buffer`] has returned `None`).
    pub fn truth(&self) -> &SynthTruth {
        &self.truth
    }

    /// Clock samples: one at the start, one per simulated second, one at the end.
    pub fn clock_samples(&self) -> &[ClockSample] {
        &self.clocks
    }

    /// Session metadata describing a synthetic H100 run.
    pub fn metadata(&self) -> SessionMetadata {
        // The names of the API functions this generator calls (a recorder stores every name libcupti knows).
        let um = self.um_slots.is_some();
        let used = [
            (DOMAIN_RUNTIME, cb::CUDA_MALLOC),
            (DOMAIN_RUNTIME, cb::CUDA_MEMCPY),
            (DOMAIN_RUNTIME, cb::CUDA_MEMCPY_ASYNC),
            (DOMAIN_RUNTIME, cb::CUDA_MEMSET_ASYNC),
            (DOMAIN_RUNTIME, cb::CUDA_STREAM_SYNCHRONIZE),
            (DOMAIN_RUNTIME, cb::CUDA_EVENT_RECORD),
            (DOMAIN_RUNTIME, cb::CUDA_STREAM_WAIT_EVENT),
            (DOMAIN_RUNTIME, cb::CUDA_LAUNCH_KERNEL),
            (DOMAIN_RUNTIME, cb::CUDA_GRAPH_LAUNCH),
            (DOMAIN_DRIVER, DRIVER_LAUNCH_KERNEL),
        ];
        let um_used = [
            (DOMAIN_RUNTIME, um::CUDA_FREE),
            (DOMAIN_RUNTIME, um::CUDA_MALLOC_MANAGED),
            (DOMAIN_RUNTIME, um::CUDA_MEM_PREFETCH_ASYNC),
            (DOMAIN_RUNTIME, cb::CUDA_DEVICE_SYNCHRONIZE),
        ];
        let callback_names = used
            .iter()
            .chain(if um { &um_used[..] } else { &[] })
            .map(|&(d, c)| (d, c, callbacks::raw_name(d, c).expect("cbid in the CUDA 13.0 headers").to_string()))
            .collect();
        SessionMetadata {
            writer: "cutr-synth".into(),
            writer_version: env!("CARGO_PKG_VERSION").into(),
            cupti_api_version: self.opts.cupti_api_version,
            cuda_driver_version: 13000,
            cuda_runtime_version: if self.opts.cupti_api_version == 28 { 12090 } else { 13000 },
            host: match self.opts.rank {
                Some((r, _)) => format!("synthetic-host-{}", r / 8),
                None => "synthetic-host".into(),
            },
            pid: PID,
            ppid: 1,
            command_line: vec!["python".into(), "train.py".into(), format!("--seed={}", self.opts.seed)],
            start_unix_ns: self.t0,
            thread_id_type: 0,
            config: vec![
                ("records".into(), self.opts.records.to_string()),
                ("seed".into(), self.opts.seed.to_string()),
                ("buffer_bytes".into(), self.opts.buffer_bytes.to_string()),
            ],
            // The unified memory episodes prefetch to a second GPU.
            devices: (0..if um { 2 } else { 1 })
                .map(|id| Device {
                    id: DEVICE_ID + id,
                    name: "NVIDIA H100 80GB HBM3 (synthetic)".into(),
                    uuid: (0u8..16).map(|b| b + 16 * id as u8).collect(),
                    pci_bus_id: format!("0000:{:02x}:00.0", 0x19 + id),
                    compute_major: 9,
                    compute_minor: 0,
                    multiprocessors: 132,
                    total_memory_bytes: 85_029_158_912,
                    properties: vec![("warpSize".into(), "32".into()), ("maxThreadsPerBlock".into(), "1024".into())],
                })
                .collect(),
            layouts: Some(self.l.table.clone()),
            callback_names,
            environment: match self.opts.rank {
                Some((r, w)) => vec![("RANK".into(), r.to_string()), ("WORLD_SIZE".into(), w.to_string())],
                None => Vec::new(),
            },
            synthetic: true,
            mappings: if um { self.opts.um_host.mappings.clone() } else { Vec::new() },
        }
    }

    fn intern(&mut self, ptr: u64, text: &str) {
        if self.interned.insert(ptr) {
            self.new_strings.push((ptr, text.to_string()));
        }
    }

    fn count(&mut self, rec: &[u8]) {
        let kind = u32::from_le_bytes(rec[0..4].try_into().unwrap());
        *self.truth.records_per_kind.entry(kind).or_default() += 1;
        self.truth.records += 1;
    }

    /// Appends a record to the current buffer, completing the buffer when it is full.
    fn emit(&mut self, rec: Vec<u8>) {
        if self.buf.len() + rec.len() > self.opts.buffer_bytes {
            self.complete_buffer();
        }
        self.count(&rec);
        self.buf.extend_from_slice(&rec);
    }

    fn complete_buffer(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let bytes = std::mem::replace(&mut self.buf, Vec::with_capacity(self.opts.buffer_bytes));
        self.truth.buffers += 1;
        self.truth.raw_bytes += bytes.len() as u64;
        let new_strings = std::mem::take(&mut self.new_strings);
        self.ready.push_back(SynthBuffer { bytes, new_strings });
    }

    /// Device (or managed) memory in use on `device` after an allocation (or free) of `bytes` at `ts`, and its peak.
    fn track_memory(&mut self, (device, managed): (u32, bool), ts: u64, bytes: u64, free: bool) {
        let now = self.in_use.entry((device, managed)).or_default();
        *now = if free { now.saturating_sub(bytes) } else { *now + bytes };
        let peaks = if managed { &mut self.truth.managed_peak } else { &mut self.truth.memory_peak };
        let peak = peaks.entry(device).or_default();
        if *now > peak.0 {
            *peak = (*now, ts);
        }
    }

    fn see_time(&mut self, t: u64) {
        if t != 0 {
            self.truth.t_min = self.truth.t_min.min(t);
            self.truth.t_max = self.truth.t_max.max(t);
        }
    }

    /// Queues a GPU record; it reaches a buffer once the host clock passes its end.
    fn gpu(&mut self, end: u64, rec: Vec<u8>) {
        self.pending_seq += 1;
        self.pending.push(Reverse((end, self.pending_seq, rec)));
    }

    /// Moves GPU records that ended before `t` into the buffer.
    fn drain_gpu(&mut self, t: u64) {
        while let Some(Reverse((end, _, _))) = self.pending.peek() {
            if *end > t {
                break;
            }
            let Reverse((_, _, rec)) = self.pending.pop().unwrap();
            self.emit(rec);
        }
    }

    fn advance_host(&mut self, ns: u64) {
        self.host += ns;
        // A clock sample every simulated second, as the recorder takes them.
        let last = self.clocks.last().map(|c| c.cupti_ns).unwrap_or(0);
        if self.host >= last + 1_000_000_000 {
            let t = self.host;
            self.clocks.push(ClockSample { cupti_ns: t, realtime_ns: t, monotonic_ns: t - MONOTONIC_OFFSET });
        }
    }

    /// An API record (runtime or driver) on `thread`, with its external correlation record before it.
    fn api_call(&mut self, driver: bool, cbid: u32, thread: u32, dur: u64, ext: bool) -> (u32, u64, u64) {
        let gap = self.rng.range(300, 1500);
        self.advance_host(gap);
        self.corr += 1;
        let corr = self.corr;
        let start = self.host;
        let end = start + dur;
        self.see_time(start);
        self.see_time(end);
        self.drain_gpu(end);
        if ext {
            let s = &self.l.ext;
            let mut r = s.new_record();
            s.set(&mut r, f::ext::KIND, 3); // CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, as PyTorch pushes op ids
            s.set(&mut r, f::ext::ID, self.ext_id);
            s.set(&mut r, f::ext::CORR, corr as u64);
            self.emit(r);
        }
        let s = if driver { &self.l.driver } else { &self.l.api };
        let mut r = s.new_record();
        s.set(&mut r, f::api::CBID, cbid as u64);
        s.set(&mut r, f::api::START, start);
        s.set(&mut r, f::api::END, end);
        s.set(&mut r, f::api::PID, PID as u64);
        s.set(&mut r, f::api::TID, thread as u64);
        s.set(&mut r, f::api::CORR, corr as u64);
        self.emit(r);
        self.host = end;
        (corr, start, end)
    }

    /// [`Synth::api_call`] with a duration drawn from `dur`.
    fn api_call_between(
        &mut self,
        driver: bool,
        cbid: u32,
        thread: u32,
        dur: (u64, u64),
        ext: bool,
    ) -> (u32, u64, u64) {
        let d = self.rng.range(dur.0, dur.1);
        self.api_call(driver, cbid, thread, d, ext)
    }

    /// When GPU work launched at `api_start` on `stream` starts, and marks the stream busy until it ends.
    /// Like CUDA's launch queue, a stream accepts at most [`MAX_QUEUED`] pending operations: beyond that the
    /// launching call blocks until the oldest one finishes.
    fn schedule(&mut self, stream: u32, api_start: u64, dur: u64) -> (u64, u64) {
        if self.pending.len() >= MAX_QUEUED
            && let Some(Reverse((oldest_end, _, _))) = self.pending.peek()
        {
            let wait = *oldest_end;
            self.host = self.host.max(wait);
            self.drain_gpu(wait);
        }
        let free = self.stream_free.get(&stream).copied().unwrap_or(0);
        let start = (api_start + self.rng.range(4_000, 8_000)).max(free + self.rng.range(800, 2_000));
        let end = start + dur;
        self.stream_free.insert(stream, end);
        self.see_time(start);
        self.see_time(end);
        (start, end)
    }

    fn kernel_record(
        &mut self,
        ki: usize,
        stream: u32,
        corr: u32,
        start: u64,
        end: u64,
        graph: Option<u64>,
    ) -> Vec<u8> {
        let kd = kernel_def(ki);
        let ptr = KERNEL_NAME_BASE + 0x100 * ki as u64;
        self.intern(ptr, kd.name);
        self.grid_id += 1;
        let s = &self.l.kernel;
        let mut r = s.new_record();
        s.set(&mut r, f::kern::START, start);
        s.set(&mut r, f::kern::END, end);
        s.set(&mut r, f::kern::COMPLETED, end);
        s.set(&mut r, f::kern::DEVICE, DEVICE_ID as u64);
        s.set(&mut r, f::kern::CONTEXT, CONTEXT_ID as u64);
        s.set(&mut r, f::kern::STREAM, stream as u64);
        for i in 0..3 {
            s.set(&mut r, f::kern::GRID + i, kd.grid[i] as u32 as u64);
            s.set(&mut r, f::kern::BLOCK + i, kd.block[i] as u32 as u64);
        }
        s.set(&mut r, f::kern::STATIC_SMEM, kd.static_smem as u32 as u64);
        s.set(&mut r, f::kern::DYN_SMEM, kd.dynamic_smem as u32 as u64);
        s.set(&mut r, f::kern::CORR, corr as u64);
        s.set(&mut r, f::kern::GRID_ID, self.grid_id as u64);
        s.set(&mut r, f::kern::NAME, ptr);
        s.set(&mut r, f::kern::REGS, kd.registers as u64);
        s.set(&mut r, f::kern::SMEM_EXEC, if kd.dynamic_smem > 48 * 1024 { 233_472 } else { 49_152 });
        s.set(&mut r, f::kern::CHANNEL, stream as u64 % 4);
        s.set(&mut r, f::kern::CACHE, 0x11);
        if let Some(node) = graph {
            s.set(&mut r, f::kern::GRAPH_NODE, node);
            s.set(&mut r, f::kern::GRAPH, GRAPH_ID as u64);
        }
        let t = self.truth.kernels.entry(kd.name).or_default();
        t.0 += 1;
        t.1 += end - start;
        r
    }

    /// A kernel launched through `cudaLaunchKernel` (or `cuLaunchKernel` for Triton).
    fn launch(&mut self, ki: usize, stream: u32) {
        let driver = ki == TRITON;
        let cbid = if driver { DRIVER_LAUNCH_KERNEL } else { cb::CUDA_LAUNCH_KERNEL };
        let api_dur = self.rng.range(2_500, 5_500);
        let (corr, api_start, _) = self.api_call(driver, cbid, MAIN_THREAD, api_dur, true);
        // The launch-only loop is launch-bound: its kernels are a few microseconds, shorter than a launch.
        let mean = if self.opts.launches_only { (KERNELS[ki].mean_ns / 6).max(1_200) } else { KERNELS[ki].mean_ns };
        let dur = self.rng.jitter(mean);
        let (start, end) = self.schedule(stream, api_start, dur);
        let r = self.kernel_record(ki, stream, corr, start, end, None);
        self.truth.gpu_records_with_api += 1;
        self.gpu(end, r);
    }

    #[allow(clippy::too_many_arguments)]
    fn memcpy(&mut self, copy_kind: u8, src: u8, dst: u8, bytes: u64, stream: u32, sync: bool, thread: u32) {
        let cbid = if sync { cb::CUDA_MEMCPY } else { cb::CUDA_MEMCPY_ASYNC };
        let gbps = match (copy_kind, src.max(dst)) {
            (8, _) => 1500,
            (_, 1) => 10, // pageable staging
            _ => 25,
        };
        let dur = (bytes / gbps).max(1_200) + self.rng.range(0, 400);
        let api_dur = if sync { dur + self.rng.range(8_000, 12_000) } else { self.rng.range(3_000, 6_000) };
        let (corr, api_start, api_end) = self.api_call(false, cbid, thread, api_dur, thread == MAIN_THREAD);
        let (start, end) = if sync {
            let start = api_start + self.rng.range(2_000, 4_000);
            let end = start + dur;
            self.stream_free.insert(stream, end.max(self.stream_free.get(&stream).copied().unwrap_or(0)));
            self.see_time(start);
            self.see_time(end.min(api_end));
            (start, end.min(api_end - 1_000))
        } else {
            self.schedule(stream, api_start, dur)
        };
        let s = &self.l.memcpy;
        let mut r = s.new_record();
        s.set(&mut r, f::copy::COPY_KIND, copy_kind as u64);
        s.set(&mut r, f::copy::SRC, src as u64);
        s.set(&mut r, f::copy::DST, dst as u64);
        s.set(&mut r, f::copy::FLAGS, if sync { 0 } else { 1 });
        s.set(&mut r, f::copy::BYTES, bytes);
        s.set(&mut r, f::copy::START, start);
        s.set(&mut r, f::copy::END, end);
        s.set(&mut r, f::copy::DEVICE, DEVICE_ID as u64);
        s.set(&mut r, f::copy::CONTEXT, CONTEXT_ID as u64);
        s.set(&mut r, f::copy::STREAM, stream as u64);
        s.set(&mut r, f::copy::CORR, corr as u64);
        let t = self.truth.memcpys.entry((copy_kind, src, dst)).or_default();
        t.0 += 1;
        t.1 += bytes;
        t.2 += end - start;
        self.truth.gpu_records_with_api += 1;
        self.gpu(end, r);
    }

    fn memset(&mut self, bytes: u64, stream: u32) {
        let api_dur = self.rng.range(2_500, 4_000);
        let (corr, api_start, _) = self.api_call(false, cb::CUDA_MEMSET_ASYNC, MAIN_THREAD, api_dur, true);
        let dur = bytes / 2_000 + self.rng.range(500, 900);
        let (start, end) = self.schedule(stream, api_start, dur);
        let s = &self.l.memset;
        let mut r = s.new_record();
        s.set(&mut r, f::set::VALUE, 0);
        s.set(&mut r, f::set::BYTES, bytes);
        s.set(&mut r, f::set::START, start);
        s.set(&mut r, f::set::END, end);
        s.set(&mut r, f::set::DEVICE, DEVICE_ID as u64);
        s.set(&mut r, f::set::CONTEXT, CONTEXT_ID as u64);
        s.set(&mut r, f::set::STREAM, stream as u64);
        s.set(&mut r, f::set::CORR, corr as u64);
        s.set(&mut r, f::set::FLAGS, 1);
        s.set(&mut r, f::set::MEM_KIND, 3);
        self.truth.memsets.0 += 1;
        self.truth.memsets.1 += bytes;
        self.truth.memsets.2 += end - start;
        self.truth.gpu_records_with_api += 1;
        self.gpu(end, r);
    }

    /// NVTX push (start = true) or pop on the main thread.
    fn nvtx(&mut self, start: bool, name: &str, id: u32) {
        let gap = self.rng.range(200, 600);
        self.advance_host(gap);
        let ts = self.host;
        self.see_time(ts);
        self.drain_gpu(ts);
        // One pointer per distinct message (end markers carry none).
        let ptr = if start {
            let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
            let ptr = NVTX_NAME_BASE + (h & 0xff_ffff) * 16;
            self.intern(ptr, name);
            ptr
        } else {
            0
        };
        let s = &self.l.marker;
        let mut r = s.new_record();
        s.set(&mut r, f::marker::FLAGS, if start { 1 << 1 } else { 1 << 2 });
        s.set(&mut r, f::marker::TS, ts);
        s.set(&mut r, f::marker::ID, id as u64);
        s.set(&mut r, f::marker::OBJ_KIND, 2); // THREAD
        s.set(&mut r, f::marker::PID, PID as u64);
        s.set(&mut r, f::marker::TID, MAIN_THREAD as u64);
        s.set(&mut r, f::marker::NAME, ptr);
        self.emit(r);
    }

    fn range(&mut self, name: &str) -> u32 {
        self.marker_id += 1;
        let id = self.marker_id;
        self.nvtx(true, name, id);
        let key = if name.starts_with("step ") { "step".to_string() } else { name.to_string() };
        *self.truth.nvtx_ranges.entry(key).or_default() += 1;
        id
    }

    /// A sync record of the API call spanning [start, end]. As CUPTI writes them, the wait lies inside the call:
    /// it begins a little after the call does (133 ns to 6 us on the H100 fixture) and ends before it returns.
    fn sync_record(&mut self, ty: u64, corr: u32, start: u64, end: u64, stream: u32, event: u32) {
        let (start, end) = if end > start + 400 { (start + 150, end - 100) } else { (start, end) };
        let s = &self.l.sync;
        let mut r = s.new_record();
        s.set(&mut r, f::sync::TYPE, ty);
        s.set(&mut r, f::sync::START, start);
        s.set(&mut r, f::sync::END, end);
        s.set(&mut r, f::sync::CORR, corr as u64);
        s.set(&mut r, f::sync::CONTEXT, CONTEXT_ID as u64);
        s.set(&mut r, f::sync::STREAM, stream as u64);
        s.set(&mut r, f::sync::EVENT, event as u64);
        self.emit(r);
    }

    /// The one-time records CUPTI writes when tracing starts: allocations and an instrumentation overhead.
    fn prologue(&mut self) {
        if let Some(mem) = self.l.table.get(kinds::MEMORY2).cloned() {
            for (i, bytes) in [512u64 << 20, 64 << 20, 16 << 20].into_iter().enumerate() {
                let api_dur = self.rng.range(40_000, 90_000);
                let (corr, start, _) = self.api_call(false, cb::CUDA_MALLOC, MAIN_THREAD, api_dur, false);
                let mut r = vec![0u8; mem.size as usize];
                r[0..4].copy_from_slice(&kinds::MEMORY2.to_le_bytes());
                let put = |r: &mut Vec<u8>, name: &str, v: u64| {
                    let f = mem.field(name).unwrap();
                    let (o, s) = (f.offset as usize, f.size as usize);
                    r[o..o + s].copy_from_slice(&v.to_le_bytes()[..s]);
                };
                put(&mut r, "memoryOperationType", 1);
                put(&mut r, "memoryKind", 3);
                put(&mut r, "correlationId", corr as u64);
                put(&mut r, "address", 0x7f00_0000_0000 + (i as u64) * (1 << 30));
                put(&mut r, "bytes", bytes);
                put(&mut r, "timestamp", start + 20_000);
                self.track_memory((DEVICE_ID, false), start + 20_000, bytes, false);
                put(&mut r, "processId", PID as u64);
                put(&mut r, "deviceId", DEVICE_ID as u64);
                put(&mut r, "contextId", CONTEXT_ID as u64);
                put(&mut r, "streamId", COMPUTE_STREAM as u64);
                self.emit(r);
            }
        }
        if let Some(ovh) = self.l.table.get(kinds::OVERHEAD).cloned() {
            let mut r = vec![0u8; ovh.size as usize];
            r[0..4].copy_from_slice(&kinds::OVERHEAD.to_le_bytes());
            let put = |r: &mut Vec<u8>, name: &str, v: u64| {
                let f = ovh.field(name).unwrap();
                let (o, s) = (f.offset as usize, f.size as usize);
                r[o..o + s].copy_from_slice(&v.to_le_bytes()[..s]);
            };
            let start = self.host + 1_000;
            put(&mut r, "overheadKind", 2 << 16); // CUPTI_INSTRUMENTATION
            put(&mut r, "objectKind", 2);
            put(&mut r, "objectId.pt.processId", PID as u64);
            put(&mut r, "objectId.pt.threadId", MAIN_THREAD as u64);
            put(&mut r, "start", start);
            put(&mut r, "end", start + 350_000);
            self.see_time(start + 350_000);
            self.host = start + 350_000;
            self.emit(r);
        }
    }

    /// One training step.
    fn step(&mut self) {
        if self.opts.launches_only {
            return self.launch_step();
        }
        self.step += 1;
        let n = self.step;
        if self.um_slots.is_some() && (n - 1).is_multiple_of(um::UM_EVERY) {
            self.um_episode();
        }
        let step_range = self.range(&format!("step {n}"));
        // Input batch: the loader thread copies pinned memory on the copy stream; compute waits on an event.
        self.memcpy(1, 2, 3, 4 << 20, COPY_STREAM, false, LOADER_THREAD);
        self.event_id += 1;
        let ev = self.event_id;
        let (corr, _, _) = self.api_call_between(false, cb::CUDA_EVENT_RECORD, LOADER_THREAD, (1_500, 2_500), false);
        let s = &self.l.event;
        let mut r = s.new_record();
        s.set(&mut r, f::event::CORR, corr as u64);
        s.set(&mut r, f::event::CONTEXT, CONTEXT_ID as u64);
        s.set(&mut r, f::event::STREAM, COPY_STREAM as u64);
        s.set(&mut r, f::event::EVENT, ev as u64);
        s.set(&mut r, f::event::DEVICE, DEVICE_ID as u64);
        self.emit(r);
        let (corr, ws, we) =
            self.api_call_between(false, cb::CUDA_STREAM_WAIT_EVENT, MAIN_THREAD, (1_500, 2_500), false);
        self.sync_record(2, corr, ws, we, COMPUTE_STREAM, ev);
        let copy_done = self.stream_free.get(&COPY_STREAM).copied().unwrap_or(0);
        let cf = self.stream_free.entry(COMPUTE_STREAM).or_default();
        *cf = (*cf).max(copy_done);

        self.ext_id += 1;
        self.memset(16 << 20, COMPUTE_STREAM);
        let fwd = self.range("forward");
        for _ in 0..LAYERS {
            for ki in [GEMM, ADD, RELU] {
                self.ext_id += 1;
                self.launch(ki, COMPUTE_STREAM);
            }
        }
        for ki in [SOFTMAX, REDUCE] {
            self.ext_id += 1;
            self.launch(ki, COMPUTE_STREAM);
        }
        self.nvtx(false, "", fwd);
        let bwd = self.range("backward");
        for _ in 0..LAYERS {
            for ki in [GEMM, CUTLASS, MUL] {
                self.ext_id += 1;
                self.launch(ki, COMPUTE_STREAM);
            }
        }
        self.nvtx(false, "", bwd);
        self.ext_id += 1;
        self.launch(NCCL, COMM_STREAM);
        self.ext_id += 1;
        self.launch(ADAM, COMPUTE_STREAM);
        self.ext_id += 1;
        self.launch(TRITON, COMPUTE_STREAM);
        self.ext_id += 1;
        self.launch(FILL, COMPUTE_STREAM);
        if n.is_multiple_of(10) {
            self.ext_id += 1;
            self.memcpy(8, 3, 3, 32 << 20, COMPUTE_STREAM, false, MAIN_THREAD);
        }
        if n.is_multiple_of(GRAPH_EVERY) {
            self.graph_replay();
        }
        // loss.item(): a pageable device-to-host copy, then the step's stream synchronize.
        self.ext_id += 1;
        self.memcpy(2, 3, 1, 4, COMPUTE_STREAM, true, MAIN_THREAD);
        let busy = self.stream_free.values().copied().max().unwrap_or(0);
        let dur = busy.saturating_sub(self.host).max(2_000) + self.rng.range(1_000, 2_000);
        let (corr, s0, s1) = self.api_call(false, cb::CUDA_STREAM_SYNCHRONIZE, MAIN_THREAD, dur, true);
        self.sync_record(3, corr, s0, s1, COMPUTE_STREAM, u32::MAX);
        self.nvtx(false, "", step_range);
        self.truth.steps += 1;
    }

    /// A step of kernel launches only (forward and backward passes, optimizer), one stream.
    fn launch_step(&mut self) {
        self.step += 1;
        for ki in [GEMM, ADD, RELU].repeat(LAYERS).into_iter().chain([SOFTMAX, REDUCE]) {
            self.ext_id += 1;
            self.launch(ki, COMPUTE_STREAM);
        }
        for ki in [GEMM, CUTLASS, MUL].repeat(LAYERS).into_iter().chain([ADAM, FILL]) {
            self.ext_id += 1;
            self.launch(ki, COMPUTE_STREAM);
        }
        self.truth.steps += 1;
    }

    /// A CUDA graph of four kernels replayed with one cudaGraphLaunch: its kernels carry the launch's
    /// correlation id and the graph and node ids.
    fn graph_replay(&mut self) {
        self.ext_id += 1;
        let (corr, api_start, _) =
            self.api_call_between(false, cb::CUDA_GRAPH_LAUNCH, MAIN_THREAD, (6_000, 9_000), true);
        let mut t = api_start;
        for (node, ki) in [ADD, RELU, MUL, FILL].into_iter().enumerate() {
            let dur = self.rng.jitter(KERNELS[ki].mean_ns);
            let (start, end) = self.schedule(COMPUTE_STREAM, t, dur);
            t = start;
            let r = self.kernel_record(ki, COMPUTE_STREAM, corr, start, end, Some(node as u64 + 1));
            self.truth.graph_kernels += 1;
            self.truth.gpu_records_with_api += 1;
            self.gpu(end, r);
        }
    }

    /// The next completed buffer, or `None` when the requested number of records has been generated.
    pub fn next_buffer(&mut self) -> Option<SynthBuffer> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Some(b);
            }
            if self.finished {
                return None;
            }
            if !self.started {
                self.started = true;
                if !self.opts.launches_only {
                    self.prologue();
                }
            } else if self.truth.records < self.opts.records {
                self.step();
            } else {
                self.drain_gpu(u64::MAX);
                self.complete_buffer();
                let t = self.truth.t_max;
                self.clocks.push(ClockSample { cupti_ns: t, realtime_ns: t, monotonic_ns: t - MONOTONIC_OFFSET });
                if self.truth.t_min == u64::MAX {
                    self.truth.t_min = 0;
                }
                self.finished = true;
            }
        }
    }
}

/// Writes a complete synthetic `.cutr` file and returns its ground truth. Buffers are encoded in parallel. The
/// file id derives from the seed, so one seed writes the same bytes every time.
pub fn write_file(path: &Path, opts: SynthOptions) -> Result<SynthTruth, FormatError> {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&opts.seed.to_le_bytes());
    id[8..].copy_from_slice(b"cutrsynt");
    let w = Writer::create(path, WriterOptions { created_unix_ns: Some(T0), file_id: Some(id), ..Default::default() })?;
    let (w, truth) = write_to(w, opts)?;
    drop(w);
    Ok(truth)
}

/// Writes a synthetic trace through `writer` (which must be fresh) and finishes it.
pub fn write_to<W: Write>(writer: Writer<W>, opts: SynthOptions) -> Result<(W, SynthTruth), FormatError> {
    write_to_with(writer, opts, |_, _| Ok(()))
}

/// [`write_to`], with `extra` writing more chunks (counter samples, say) after the activity and before the loss
/// report and footer; it sees the truth of what was generated.
pub fn write_to_with<W: Write>(
    mut writer: Writer<W>,
    opts: SynthOptions,
    extra: impl FnOnce(&mut Writer<W>, &SynthTruth) -> Result<(), FormatError>,
) -> Result<(W, SynthTruth), FormatError> {
    let mut synth = Synth::new(opts).map_err(FormatError::Invalid)?;
    writer.write_metadata(&synth.metadata())?;
    let layouts = synth.layouts().clone();
    let threads = rayon::current_num_threads().max(1);
    loop {
        let batch: Vec<SynthBuffer> = (0..threads * 2).map_while(|_| synth.next_buffer()).collect();
        if batch.is_empty() {
            break;
        }
        let encoded: Vec<_> =
            batch.par_iter().map_init(|| ActivityEncoder::new(&layouts, 3), |enc, b| enc.encode(&b.bytes)).collect();
        for (b, e) in batch.iter().zip(encoded) {
            if !b.new_strings.is_empty() {
                let entries: Vec<(u64, &str)> = b.new_strings.iter().map(|(p, s)| (*p, s.as_str())).collect();
                writer.write_strings(&entries)?;
            }
            writer.append_encoded(e)?;
        }
    }
    writer.write_clocks(synth.clock_samples())?;
    // The OS names a recorder reads from /proc: the main thread keeps the program's name.
    writer.write_thread_names(&[(MAIN_THREAD, "python3".into()), (LOADER_THREAD, "pt_data_loader".into())])?;
    extra(&mut writer, synth.truth())?;
    writer.write_loss(&LossCounters { is_final: true, ..Default::default() })?;
    let truth = synth.truth().clone();
    Ok((writer.finish()?, truth))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bytes_and_truth_adds_up() {
        let opts = SynthOptions { records: 20_000, seed: 7, buffer_bytes: 256 << 10, ..Default::default() };
        let mut a = Synth::new(opts.clone()).unwrap();
        let mut b = Synth::new(opts).unwrap();
        let mut total = 0u64;
        while let Some(x) = a.next_buffer() {
            let y = b.next_buffer().unwrap();
            assert_eq!(x.bytes, y.bytes);
            assert!(x.bytes.len() <= 256 << 10);
            total += x.bytes.len() as u64;
        }
        assert!(b.next_buffer().is_none());
        let t = a.truth();
        assert_eq!(t.raw_bytes, total);
        assert_eq!(t.records, t.records_per_kind.values().sum::<u64>());
        assert!(t.records >= 20_000 && t.records < 20_200, "{}", t.records);
        // Per launch: one kernel record with one runtime (or driver) record, and an external correlation record.
        let kernels: u64 = t.kernels.values().map(|v| v.0).sum();
        assert_eq!(t.records_per_kind[&kinds::CONCURRENT_KERNEL], kernels);
        assert_eq!(kernels, t.steps * 30 + t.graph_kernels);
        assert_eq!(t.graph_kernels, t.steps / GRAPH_EVERY * 4);
        assert_eq!(t.records_per_kind[&kinds::DRIVER], t.steps);
        assert_eq!(t.nvtx_ranges["step"], t.steps);
        assert_eq!(t.records_per_kind[&kinds::MARKER], t.steps * 6);
    }

    #[test]
    fn writes_12_9_layouts_too() {
        let mut s = Synth::new(SynthOptions { cupti_api_version: 28, records: 3_000, ..Default::default() }).unwrap();
        let mut n = 0;
        while let Some(b) = s.next_buffer() {
            n += b.bytes.len();
        }
        assert_eq!(s.layouts().size_of(kinds::CONCURRENT_KERNEL), Some(208));
        assert_eq!(n as u64, s.truth().raw_bytes);
        assert!(Synth::new(SynthOptions { cupti_api_version: 27, ..Default::default() }).is_err());
    }

    #[test]
    fn launches_only_has_one_kernel_runtime_and_external_record_per_launch() {
        let mut s = Synth::new(SynthOptions { launches_only: true, records: 9_000, ..Default::default() }).unwrap();
        while s.next_buffer().is_some() {}
        let t = s.truth();
        let k = t.records_per_kind[&kinds::CONCURRENT_KERNEL];
        assert_eq!(k, t.steps * 28);
        assert_eq!(t.records_per_kind[&kinds::RUNTIME], k);
        assert_eq!(t.records_per_kind[&kinds::EXTERNAL_CORRELATION], k);
        assert_eq!(t.records_per_kind.len(), 3);
    }
}
