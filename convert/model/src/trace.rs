//! The trace: every table of the model, the input files it came from, and the lookups that follow the joins.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cutr_format::{LossCounters, Problem, Recovery, SessionMetadata};
use rayon::prelude::*;

use crate::corr::CorrMap;
use crate::ids::{CorrKey, NameId, ProcId};
use crate::names::Names;
use crate::rows::{ApiCall, CudaEvent, Kernel, Memcpy, MemoryOp, Memset, NvtxMark, NvtxRange, Overhead, Sync};
use crate::timebase::TimeBase;

/// An input file: one recorded process.
#[derive(Clone, Debug, Default)]
pub struct Process {
    /// The file (a split recording's first part given).
    pub path: PathBuf,
    /// A split recording's (`cupti-record --split`) later parts given, in part order: one process with `path`.
    pub parts: Vec<PathBuf>,
    pub meta: Arc<SessionMetadata>,
    pub pid: u32,
    pub time: TimeBase,
    pub loss: LossCounters,
    /// What the reader found wrong with the file, and the activity chunks that failed to decode.
    pub problems: Vec<Problem>,
    /// How the file was read when it was not closed cleanly (killed, disk full, footer damaged).
    pub recovery: Option<Recovery>,
    /// What the model had to assume to read the file (a lost metadata chunk, say).
    pub warnings: Vec<String>,
    /// This file's share of [`Trace::stats`].
    pub stats: JoinStats,
    /// (domain, cbid) -> index into `meta.callback_names` (runtime: domain 2, driver: domain 1).
    pub api_names: rustc_hash::FxHashMap<(u32, u32), u32>,
    /// OS thread names by tid, as the recorder saw them (format 1.1; empty for older files).
    pub thread_names: std::collections::BTreeMap<u32, String>,
    /// The rank the user gave for this file (`cupti-convert --rank`), which wins over the environment's: ranks
    /// started by `torch.multiprocessing.spawn` have no rank variable in their environment.
    pub rank_given: Option<Rank>,
}

/// Where a process stood in a distributed job, as its environment said at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    pub rank: u32,
    pub world_size: u32,
}

impl Process {
    /// A host thread's row name, as Kineto writes it: `thread <tid> (<OS name>)`, or `thread <tid>` unnamed.
    pub fn thread_label(&self, tid: u32) -> String {
        match self.thread_names.get(&tid) {
            Some(name) if !name.is_empty() => format!("thread {tid} ({name})"),
            _ => format!("thread {tid}"),
        }
    }

    /// The process's rank and world size: the one the user gave ([`Process::rank_given`]), else from the
    /// environment variables launchers set: torchrun's `RANK` and `WORLD_SIZE`, Open MPI's
    /// `OMPI_COMM_WORLD_RANK`/`_SIZE`, MPICH's `PMI_RANK`/`PMI_SIZE`, Slurm's `SLURM_PROCID`/`SLURM_NTASKS` (in
    /// that order of preference).
    pub fn rank(&self) -> Option<Rank> {
        if self.rank_given.is_some() {
            return self.rank_given;
        }
        let env =
            |k: &str| self.meta.environment.iter().find(|e| e.0 == k).and_then(|e| e.1.trim().parse::<u32>().ok());
        [
            ("RANK", "WORLD_SIZE"),
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
            ("PMI_RANK", "PMI_SIZE"),
            ("SLURM_PROCID", "SLURM_NTASKS"),
        ]
        .iter()
        .find_map(|(r, w)| Some(Rank { rank: env(r)?, world_size: env(w)? }))
        .filter(|r| r.rank < r.world_size)
    }
}

/// Where a file's rank in [`Trace::job_ranks`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankSource {
    /// The launcher's variables in the recorded environment (`RANK`, `OMPI_COMM_WORLD_RANK`...).
    Environment,
    /// `cupti-convert --rank`.
    Given,
    /// None recorded (a launcher, `torch.multiprocessing.spawn`, two plain processes): numbered by file order.
    FileOrder,
}

impl RankSource {
    /// How the tables and reports spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            RankSource::Environment => "environment",
            RankSource::Given => "--rank",
            RankSource::FileOrder => "file order",
        }
    }
}

/// Counts of joins that failed and records that could not be used; all shown in every output.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JoinStats {
    /// Kernels, memcpys and memsets whose correlation id matches no runtime or driver API record.
    pub gpu_without_api: u64,
    /// External correlation records whose correlation id matches no API record.
    pub external_without_api: u64,
    /// Kernels from CUDA graphs whose correlation id matches no API record (the graph launch).
    pub graph_kernels_without_launch: u64,
    /// NVTX range ends with no start, and starts never ended.
    pub nvtx_ends_without_start: u64,
    pub nvtx_unclosed_ranges: u64,
    /// GPU records with start == end == 0 (CUPTI could not time them); kept out of the timeline.
    pub zero_timestamp_records: u64,
    /// Records with end < start; kept out of the timeline.
    pub inverted_records: u64,
    /// Records of kinds the converter does not model (counted by kind name).
    pub unmodelled_records: u64,
    /// Chunks of any type that could not be used: damaged, cut off, with implausible headers, or missing from
    /// the sequence.
    pub damaged_chunks: u64,
    /// Records in damaged or truncated activity chunks (as their headers claim, where those can be trusted).
    pub records_in_damaged_chunks: u64,
    /// Records whose string pointer (kernel or NVTX name) had no entry in the file's string tables.
    pub unresolved_names: u64,
    /// Bytes kept in the file but not parsed (records of kinds without a layout).
    pub unparsed_bytes: u64,
    /// Unified memory records whose counter kind is outside CUDA 13's (newer CUPTI, or damage); left out.
    pub um_unknown_kind: u64,
    /// Kernels, copies and memsets of CUDA graphs (graph id != 0) not traced back to a node the application made
    /// ([`crate::graphs`]): a creation, clone or update event missing, or a chain of them cyclic or too long.
    /// Counted only in files that recorded graph events.
    pub graph_ops_without_capture: u64,
    /// Graph events the recorder could not keep (its buffer was full).
    pub graph_events_lost: u64,
    /// Graph nodes the application made with no runtime or driver call holding their creation on their thread
    /// (not counted where the load's window or kinds left that call out).
    pub graph_nodes_without_api: u64,
    /// Graph events that could not be used: a graph, node or executable made twice, or a clone, update or
    /// dependency naming a node no event made.
    pub graph_events_unjoined: u64,
    /// PC samples of functions with no kernel execution on their device in the recording (its kernel records
    /// lost, filtered out by kind, evicted from a ring): counted by `source`, drawn in no stall-rate track
    /// ([`crate::stall_rates`]).
    pub pc_samples_unplaced: u64,
    /// Records made on the recorder's own threads (`cutr-*`: API calls, NVTX markers, CUPTI overhead), left out
    /// of every table ([`crate::recorder_threads`]).
    pub recorder_thread_records: u64,
    /// GPU records (kernels, copies, memsets) launched by a call on a recorder thread: kept, with their calls.
    pub recorder_thread_launches: u64,
    /// Counter samples (values of one metric) on a device the file's metadata does not list: kept, but no kernel
    /// ran there to average them over ([`crate::counters`]).
    pub counter_samples_unknown_device: u64,
    /// Counter readings that are infinite: left out as failed readings (NaN) are.
    pub counter_readings_infinite: u64,
}

impl JoinStats {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &JoinStats) {
        self.gpu_without_api += o.gpu_without_api;
        self.external_without_api += o.external_without_api;
        self.graph_kernels_without_launch += o.graph_kernels_without_launch;
        self.nvtx_ends_without_start += o.nvtx_ends_without_start;
        self.nvtx_unclosed_ranges += o.nvtx_unclosed_ranges;
        self.zero_timestamp_records += o.zero_timestamp_records;
        self.inverted_records += o.inverted_records;
        self.unmodelled_records += o.unmodelled_records;
        self.damaged_chunks += o.damaged_chunks;
        self.records_in_damaged_chunks += o.records_in_damaged_chunks;
        self.unresolved_names += o.unresolved_names;
        self.unparsed_bytes += o.unparsed_bytes;
        self.um_unknown_kind += o.um_unknown_kind;
        self.graph_ops_without_capture += o.graph_ops_without_capture;
        self.graph_events_lost = self.graph_events_lost.saturating_add(o.graph_events_lost);
        self.graph_nodes_without_api += o.graph_nodes_without_api;
        self.graph_events_unjoined += o.graph_events_unjoined;
        self.pc_samples_unplaced += o.pc_samples_unplaced;
        self.recorder_thread_records += o.recorder_thread_records;
        self.recorder_thread_launches += o.recorder_thread_launches;
        self.counter_samples_unknown_device += o.counter_samples_unknown_device;
        self.counter_readings_infinite += o.counter_readings_infinite;
    }
}

/// The decoded, joined trace of one or more files. Rows of each table are sorted by start time.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub processes: Vec<Process>,
    pub names: Names,
    pub kernels: Vec<Kernel>,
    pub memcpys: Vec<Memcpy>,
    pub memsets: Vec<Memset>,
    pub apis: Vec<ApiCall>,
    pub syncs: Vec<Sync>,
    pub cuda_events: Vec<CudaEvent>,
    pub overheads: Vec<Overhead>,
    /// Sorted by (file, pid, tid, start, longer first): each thread's ranges together, enclosing ones first.
    pub ranges: Vec<NvtxRange>,
    pub marks: Vec<NvtxMark>,
    pub memory: Vec<MemoryOp>,
    /// Unified memory migrations, faults, thrashing (sorted by start).
    pub um: Vec<crate::rows::UmEvent>,
    /// Counter samples (`--counters` metrics, PC-sample stall rates drawn over the sampled kernels' executions),
    /// each series' samples together in time order, each file's together.
    pub counters: Vec<crate::CounterSample>,
    /// Each counter series' span and size, for a stream that hands the samples over window by window
    /// ([`crate::stream::StreamOptions::counter_feed`]; a load and other streams leave it empty, their samples are
    /// in `counters`), by (file, device, series).
    pub counter_series: Vec<crate::counters::CounterSeriesInfo>,
    /// CUDA graphs, the nodes the application made with where it made them, and the node each replayed kernel,
    /// copy and memset comes from ([`crate::graphs`]; [`Trace::capture_of_kernel`]).
    pub graphs: crate::graphs::GraphContext,
    /// By kernel name id (as recorded, mangled): what its PC samples say ([`crate::KernelSourceNote`]).
    pub kernel_source: rustc_hash::FxHashMap<NameId, crate::KernelSourceNote>,
    /// PyTorch op id (external kind CUSTOM0) and user annotation id (CUSTOM1) by correlation key.
    pub external: CorrMap<(u64, u64)>,
    /// Index + 1 into `apis` of the launching call of each correlation key (runtime preferred over driver); see
    /// [`Trace::launcher_index`].
    pub api_by_corr: CorrMap<u32>,
    /// Index into `ranges` of the innermost NVTX range enclosing each API call (`u32::MAX` = none).
    pub api_range: Vec<u32>,
    pub stats: JoinStats,
    /// Records per CUPTI kind, over all files.
    pub records_per_kind: Vec<(u32, u64)>,
    /// Kernel name id -> its demangled name's id (identity for other names).
    pub(crate) demangled: Vec<NameId>,
    /// The occupancy calculator's limits of each recorded device, by (file, device id).
    pub(crate) device_limits: Vec<((ProcId, u32), crate::occupancy::DeviceLimits)>,
    /// Indices into `cuda_events`, sorted by (file, context, event id, correlation id): the recordings of each
    /// event in the order they were made ([`Trace::waited_event`]).
    pub(crate) event_order: Vec<u32>,
}

impl Trace {
    /// Every file's rank in the job, by file: its own ([`Process::rank`]), else the lowest number that no file's
    /// own rank uses, taken in file order (files without any rank are 0, 1, ...: their order). The one numbering
    /// of `stats --by-rank` and of the tables' `rank` column, so the two never disagree; a launcher without a rank
    /// never shares one with a real rank.
    pub fn job_ranks(&self) -> Vec<(u32, RankSource)> {
        let own: Vec<Option<(u32, RankSource)>> = self
            .processes
            .iter()
            .map(|p| {
                let source = if p.rank_given.is_some() { RankSource::Given } else { RankSource::Environment };
                p.rank().map(|r| (r.rank, source))
            })
            .collect();
        let taken: std::collections::BTreeSet<u32> = own.iter().flatten().map(|r| r.0).collect();
        let mut free = (0u32..).filter(|n| !taken.contains(n));
        own.into_iter().map(|r| r.unwrap_or_else(|| (free.next().unwrap_or(u32::MAX), RankSource::FileOrder))).collect()
    }

    /// The demangled name id of a kernel name id (`c++filt`'s form; other names map to themselves).
    #[inline]
    pub fn display_name_id(&self, name: NameId) -> NameId {
        self.demangled.get(name.index()).copied().unwrap_or(name)
    }

    /// The demangled name of a kernel.
    #[inline]
    pub fn kernel_name(&self, k: &Kernel) -> &str {
        self.names.get(self.display_name_id(k.name))
    }

    /// The recording of a CUDA event that a sync waited on (an event sync, or a stream's wait on an event): the
    /// last recording of the sync's event in its context made before the sync's call (the largest correlation id
    /// below the sync's), as Kineto joins them. `None` without CUDA_EVENT records or for other syncs.
    pub fn waited_event(&self, s: &Sync) -> Option<&CudaEvent> {
        if s.event == u32::MAX {
            return None;
        }
        let key = |e: &CudaEvent| (e.proc, e.context, e.event, e.correlation);
        let want = (s.proc, s.context, s.event, s.correlation);
        let n = self.event_order.partition_point(|&i| key(&self.cuda_events[i as usize]) < want);
        let e = &self.cuda_events[*self.event_order.get(n.checked_sub(1)?)? as usize];
        ((e.proc, e.context, e.event) == (s.proc, s.context, s.event)).then_some(e)
    }

    /// The API call that launched GPU work with this correlation key.
    pub fn launcher(&self, key: CorrKey) -> Option<&ApiCall> {
        self.launcher_index(key).map(|i| &self.apis[i as usize])
    }

    /// Index into `apis` of the call that launched GPU work with this correlation key.
    #[inline]
    pub fn launcher_index(&self, key: CorrKey) -> Option<u32> {
        self.api_by_corr.get(key).map(|i| i - 1)
    }

    /// PyTorch's op id (external kind CUSTOM0) and user annotation id (CUSTOM1) of a correlation key; 0 = none.
    #[inline]
    pub fn external_ids(&self, key: CorrKey) -> (u64, u64) {
        self.external.get(key).unwrap_or((0, 0))
    }

    /// The function name of an API call (`cudaLaunchKernel`), from the file's own table, else CUDA 13.0's.
    pub fn api_name(&self, a: &ApiCall) -> String {
        self.api_name_of(a.proc, a.driver, a.cbid)
    }

    /// The function name of a runtime (`driver` false) or driver API cbid as recorded in file `proc`. A program on
    /// a CUDA 12 runtime recorded through CUPTI 13 gets its calls' CUDA 12 names (`cudaGetDeviceProperties_v2`,
    /// which CUPTI 13 calls `cudaGetDeviceProperties`: `cutr_schema::callbacks::cuda12_runtime_raw_name`).
    pub fn api_name_of(&self, proc: ProcId, driver: bool, cbid: u32) -> String {
        use cutr_schema::callbacks;
        let domain = if driver { callbacks::DOMAIN_DRIVER } else { callbacks::DOMAIN_RUNTIME };
        let p = &self.processes[proc.index()];
        let recorded = p.api_names.get(&(domain, cbid)).and_then(|&i| p.meta.callback_names.get(i as usize));
        let mut raw = recorded.map(|(_, _, n)| n.as_str()).or_else(|| callbacks::raw_name(domain, cbid));
        if !driver
            && callbacks::is_cuda12_runtime(p.meta.cuda_runtime_version)
            && raw == callbacks::raw_name(domain, cbid)
            && let Some(older) = callbacks::cuda12_runtime_raw_name(cbid)
        {
            raw = Some(older);
        }
        raw.map(|n| callbacks::display_name(n).to_string())
            .unwrap_or_else(|| format!("{}_cbid_{cbid}", if driver { "cuDriver" } else { "cudaRuntime" }))
    }

    /// Earliest and latest timestamp of any row of any table (0, 0 when empty): what "span" means everywhere.
    pub fn span(&self) -> (u64, u64) {
        // Ends are not sorted, so every row is read: in parallel, as that is hundreds of MB on a large trace.
        fn bounds<T: std::marker::Sync>(
            rows: &[T],
            f: impl Fn(&T) -> (u64, u64) + std::marker::Sync + Send,
        ) -> (u64, u64) {
            rows.par_iter().map(f).reduce(|| (u64::MAX, 0), |a, b| (a.0.min(b.0), a.1.max(b.1)))
        }
        let all = [
            bounds(&self.kernels, |k| (k.start, k.end)),
            bounds(&self.memcpys, |k| (k.start, k.end)),
            bounds(&self.memsets, |k| (k.start, k.end)),
            bounds(&self.apis, |k| (k.start, k.end)),
            bounds(&self.syncs, |k| (k.start, k.end)),
            bounds(&self.overheads, |k| (k.start, k.end)),
            bounds(&self.memory, |k| (k.ts, k.ts)),
            bounds(&self.um, |k| (k.start, k.end)),
            bounds(&self.ranges, |k| (k.start, if k.closed() { k.end } else { k.start })),
            bounds(&self.marks, |k| (k.ts, k.ts)),
        ];
        let (lo, hi) = all.iter().fold((u64::MAX, 0), |a, b| (a.0.min(b.0), a.1.max(b.1)));
        if lo == u64::MAX { (0, 0) } else { (lo, hi) }
    }

    /// Total records decoded per CUPTI kind.
    pub fn records(&self) -> u64 {
        self.records_per_kind.iter().map(|k| k.1).sum()
    }

    /// The combined loss counters of every file.
    pub fn loss(&self) -> LossCounters {
        let mut t = LossCounters::default();
        for p in &self.processes {
            let l = &p.loss;
            t.cupti_dropped_records += l.cupti_dropped_records;
            t.refused_buffers += l.refused_buffers;
            t.zero_timestamp_records += l.zero_timestamp_records;
            t.inverted_timestamp_records += l.inverted_timestamp_records;
            t.write_failures += l.write_failures;
            t.records_lost_in_write_failures += l.records_lost_in_write_failures;
            t.unparsed_bytes += l.unparsed_bytes;
            t.unresolved_strings += l.unresolved_strings;
            t.pc_samples_dropped += l.pc_samples_dropped;
            t.pc_collections_buffer_full += l.pc_collections_buffer_full;
            t.counter_samples_lost += l.counter_samples_lost;
            t.notes.extend(l.notes.iter().cloned());
        }
        t
    }

    /// Short label of an input file for messages (its file name).
    pub fn label(&self, proc: ProcId) -> String {
        let p = &self.processes[proc.index()];
        Path::new(&p.path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// The process name shown for a recording: the program's file name (`pid N` when the command is unknown).
    pub fn process_name(&self, proc: ProcId) -> String {
        let m = &self.processes[proc.index()].meta;
        let prog = m.command_line.first().map(|c| c.rsplit('/').next().unwrap_or(c).to_string()).unwrap_or_default();
        if prog.is_empty() { format!("pid {}", m.pid) } else { prog }
    }

    /// The process name in a trace of several files: the program with its rank (`python3 (rank 1)`), or with its
    /// file where the rank is unknown; in a trace of one file, just the program.
    pub fn process_label(&self, proc: ProcId) -> String {
        let name = self.process_name(proc);
        if self.processes.len() <= 1 {
            return name;
        }
        match self.processes[proc.index()].rank() {
            Some(r) => format!("{name} (rank {})", r.rank),
            None => format!("{name} ({})", self.label(proc)),
        }
    }

    /// Kineto's "est. achieved occupancy %" of a kernel ([`crate::occupancy`]), from its device's recorded
    /// properties; `None` where the device is unknown or the calculator cannot say.
    pub fn achieved_occupancy_pct(&self, k: &Kernel) -> Option<i64> {
        let (d, launch) = self.occupancy_inputs(k)?;
        crate::occupancy::estimated_achieved_occupancy_pct(&d, &launch)
    }

    /// What the occupancy calculator needs of a kernel ([`crate::occupancy`]): its device's recorded limits and
    /// its launch; `None` where the device's properties are not in its file.
    pub fn occupancy_inputs(&self, k: &Kernel) -> Option<(crate::occupancy::DeviceLimits, crate::occupancy::Launch)> {
        let d = self.device_limits.iter().find(|(key, _)| *key == (k.proc, k.device))?.1;
        let launch = crate::occupancy::Launch {
            grid_blocks: k.grid.iter().map(|&g| g.max(0) as u64).product(),
            block_threads: k.block.iter().map(|&b| b.max(0) as i64).product::<i64>().min(i32::MAX as i64) as i32,
            registers_per_thread: k.registers as i32,
            static_shared_memory: k.static_smem.max(0) as u64,
            dynamic_shared_memory: k.dynamic_smem.max(0) as u64,
        };
        Some((d, launch))
    }

    /// The number of SMs of a recorded device, from its file's metadata.
    pub fn device_sms(&self, proc: ProcId, device: u32) -> Option<u32> {
        let p = self.processes.get(proc.index())?;
        p.meta.devices.iter().find(|d| d.id == device).map(|d| d.multiprocessors.max(0) as u32)
    }
}
