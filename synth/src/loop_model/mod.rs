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

use cutr_schema::{LayoutTable, kinds};

use cutr_format::ClockSample;

mod kernels;
mod layouts;
mod metadata;
mod names;
mod records;
mod rng;
mod steps;
#[cfg(test)]
mod tests;
pub mod um;
mod write;

use cutr_schema::callbacks::runtime as cb;
use kernels::*;
pub use kernels::{KERNELS, SynthKernel};
use layouts::{Layouts, Slots, f};
use names::NvtxNames;
use rng::Rng;
pub use um::{UmHost, UmTruth};
pub use write::{write_file, write_to, write_to_with};

/// Fake host addresses of the kernel name strings (CUPTI's pointers are opaque offline anyway).
const KERNEL_NAME_BASE: u64 = 0x7f3a_1000_0000;

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
    /// The kernel names' pointers whose text was written (a dozen).
    kernel_names: std::collections::HashSet<u64>,
    nvtx_names: NvtxNames,
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
            kernel_names: Default::default(),
            nvtx_names: NvtxNames::new(),
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
