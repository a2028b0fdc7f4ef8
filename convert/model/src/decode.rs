//! Decoding one chunk's records into rows: each group of records of one kind goes through that kind's field
//! readers ([`crate::fields`]), its times onto the trace's time base, its string pointers to the file's text ids.
//! Groups (and large groups in parts) decode in parallel.

use cutr_format::{ChunkInfo, DecodedBuffer, Reader};
use cutr_schema::kinds;
use rayon::prelude::*;

use crate::fields::FileFields;
use crate::ids::{NameId, ProcId};
use crate::load::Filter;
use crate::recorder_threads::RecorderThreads;
use crate::rows::{ApiCall, CudaEvent, Kernel, Memcpy, MemoryOp, Memset, Overhead, Sync, UmEvent, UmKind};
use crate::timebase::TimeBase;
use crate::timing;

/// A raw NVTX marker before start/end pairing ([`crate::nvtx::pair_markers`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawMarker {
    pub ts: u64,
    pub flags: u32,
    pub id: u32,
    pub pid: u32,
    pub tid: u32,
    pub name: NameId,
    pub domain: NameId,
}

/// An external correlation record: (external kind, correlation id, external id).
pub(crate) type RawExternal = (u32, u32, u64);

/// Rows decoded from one chunk. Names are still the file's own text ids (+1; 0 = none) until the rows are
/// appended to the trace ([`crate::load`]).
#[derive(Default)]
pub(crate) struct ChunkRows {
    pub kernels: Vec<Kernel>,
    pub memcpys: Vec<Memcpy>,
    pub memsets: Vec<Memset>,
    pub apis: Vec<ApiCall>,
    pub syncs: Vec<Sync>,
    pub events: Vec<CudaEvent>,
    pub external: Vec<RawExternal>,
    pub markers: Vec<RawMarker>,
    pub overheads: Vec<Overhead>,
    pub memory: Vec<MemoryOp>,
    pub um: Vec<UmEvent>,
    /// API calls made on the recorder's threads, set aside ([`crate::recorder_threads`]).
    pub recorder_calls: Vec<ApiCall>,
    /// Records per CUPTI kind (every record of the chunk, decoded or not).
    pub per_kind: Vec<(u32, u64)>,
    pub counts: ChunkCounts,
}

/// Records of a chunk that did not become rows, by reason.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ChunkCounts {
    /// GPU or API records with start == end == 0.
    pub zero: u64,
    /// Records with end < start.
    pub inverted: u64,
    /// Records of kinds the model does not read.
    pub unmodelled: u64,
    /// String pointers without text in the file.
    pub unresolved: u64,
    /// Bytes after the last whole record group.
    pub unparsed: u64,
    /// Unified memory records whose counter kind is outside CUDA 13's (unknown, or damaged).
    pub um_unknown_kind: u64,
    /// NVTX markers and CUPTI overhead made on the recorder's threads.
    pub recorder_thread: u64,
}

impl ChunkCounts {
    pub fn add(&mut self, o: &ChunkCounts) {
        self.zero += o.zero;
        self.inverted += o.inverted;
        self.unmodelled += o.unmodelled;
        self.unresolved += o.unresolved;
        self.unparsed += o.unparsed;
        self.um_unknown_kind += o.um_unknown_kind;
        self.recorder_thread += o.recorder_thread;
    }
}

impl ChunkRows {
    /// Moves `other`'s rows after this one's.
    fn absorb(&mut self, other: &mut ChunkRows) {
        /// Most kinds come from one group: an empty destination takes the rows over instead of copying them.
        fn take_over<T>(dest: &mut Vec<T>, src: &mut Vec<T>) {
            if dest.is_empty() {
                std::mem::swap(dest, src);
            } else {
                dest.append(src);
            }
        }
        take_over(&mut self.kernels, &mut other.kernels);
        take_over(&mut self.memcpys, &mut other.memcpys);
        take_over(&mut self.memsets, &mut other.memsets);
        take_over(&mut self.apis, &mut other.apis);
        take_over(&mut self.syncs, &mut other.syncs);
        take_over(&mut self.events, &mut other.events);
        take_over(&mut self.external, &mut other.external);
        take_over(&mut self.markers, &mut other.markers);
        take_over(&mut self.overheads, &mut other.overheads);
        take_over(&mut self.memory, &mut other.memory);
        take_over(&mut self.um, &mut other.um);
        self.per_kind.append(&mut other.per_kind);
        self.counts.add(&other.counts);
    }
}

/// What decoding the chunks of one file needs: its reader, field readers, file id, time base and the filter.
pub(crate) struct FileDecoder<'r> {
    pub reader: &'r Reader,
    pub fields: FileFields,
    pub proc: ProcId,
    pub time: TimeBase,
    pub filter: &'r Filter,
    pub recorder: RecorderThreads,
}

/// Records of one kind decoded by one task (see [`FileDecoder::chunk`]).
const DECODE_TASK_RECORDS: usize = 1024;

impl FileDecoder<'_> {
    /// The rows of one decoded chunk. A task per group, and per [`DECODE_TASK_RECORDS`] of a large group: a small
    /// recording is a few large buffers, whose kernel group alone would otherwise keep one worker busy while the
    /// others wait.
    pub fn chunk(&self, chunk: &ChunkInfo, d: &DecodedBuffer) -> ChunkRows {
        let seq = chunk.header.seq;
        let tasks: Vec<(u32, usize, &[u8])> = d
            .groups
            .iter()
            .flat_map(|g| {
                let step = DECODE_TASK_RECORDS * g.stride.max(1);
                let parts: Vec<&[u8]> = if g.bytes.is_empty() { vec![&[][..]] } else { g.bytes.chunks(step).collect() };
                parts.into_iter().map(move |b| (g.kind, g.stride, b))
            })
            .collect();
        let parts: Vec<ChunkRows> = tasks
            .par_iter()
            .map(|&(kind, stride, records)| {
                let n = records.len().checked_div(stride).unwrap_or(0);
                timing::timed_with(
                    || format!("decode chunk {seq} kind {kind} ({n} records)"),
                    || self.group(seq, kind, records.chunks_exact(stride.max(1))),
                )
            })
            .collect();
        let mut parts = parts.into_iter();
        let mut out = parts.next().unwrap_or_default();
        for mut p in parts {
            out.absorb(&mut p);
        }
        out.counts.unparsed = d.tail.len() as u64;
        self.recorder.strip(&mut out);
        out
    }

    /// The rows of records of one kind (a group of a chunk, or part of one).
    fn group(&self, seq: u32, kind: u32, records: std::slice::ChunksExact<'_, u8>) -> ChunkRows {
        let mut g = GroupDecoder {
            out: ChunkRows::default(),
            texts: TextIds::new(self.reader, seq),
            proc: self.proc,
            time: self.time,
            filter: self.filter,
        };
        let n = records.len();
        g.out.per_kind.push((kind, n as u64));
        if !self.filter.wants_kind(kind) {
            return g.out;
        }
        let ff = &self.fields;
        match kind {
            kinds::CONCURRENT_KERNEL | kinds::KERNEL => g.kernels(ff.kernel.as_ref(), records),
            kinds::MEMCPY => g.memcpys(ff.memcpy.as_ref(), records, false),
            kinds::MEMCPY2 => g.memcpys(ff.memcpy2.as_ref(), records, true),
            kinds::MEMSET => g.memsets(ff.memset.as_ref(), records),
            kinds::RUNTIME => g.apis(ff.runtime.as_ref(), records, false),
            kinds::DRIVER => g.apis(ff.driver.as_ref(), records, true),
            kinds::SYNCHRONIZATION => g.syncs(ff.sync.as_ref(), records),
            kinds::CUDA_EVENT => g.events(ff.event.as_ref(), records),
            kinds::EXTERNAL_CORRELATION => g.external(ff.external.as_ref(), records),
            kinds::MARKER => g.markers(ff.marker.as_ref(), records),
            kinds::OVERHEAD => g.overheads(ff.overhead.as_ref(), records),
            kinds::MEMORY2 => g.memory(ff.memory.as_ref(), records),
            kinds::UNIFIED_MEMORY_COUNTER => g.um(ff.um.as_ref(), records),
            _ => g.out.counts.unmodelled += n as u64,
        }
        g.out
    }
}

/// Maps the string pointers of one chunk's records to the file's text ids (+1; 0 = none), remembering recent
/// pointers: a training loop launches the same few kernels and NVTX ranges over and over, and a hit here costs a
/// compare where a lookup costs a hash probe and a search of the pointer's history. Valid for one chunk (one
/// `seq`), where a pointer has one text.
struct TextIds<'r> {
    reader: &'r Reader,
    seq: u32,
    recent: [(u64, u32); TextIds::SLOTS],
}

impl<'r> TextIds<'r> {
    const SLOTS: usize = 64;

    fn new(reader: &'r Reader, seq: u32) -> TextIds<'r> {
        TextIds { reader, seq, recent: [(0, 0); TextIds::SLOTS] }
    }

    #[inline]
    fn get(&mut self, ptr: u64, unresolved: &mut u64) -> NameId {
        if ptr == 0 {
            return NameId::EMPTY;
        }
        // Pointers to names are at least 8-byte aligned and spread over their low bits above that.
        let slot = ((ptr >> 3) ^ (ptr >> 9)) as usize % TextIds::SLOTS;
        if self.recent[slot].0 == ptr {
            return NameId(self.recent[slot].1);
        }
        match self.reader.strings().resolve_id(ptr, self.seq) {
            Some(id) => {
                self.recent[slot] = (ptr, id + 1);
                NameId(id + 1)
            }
            None => {
                *unresolved += 1;
                NameId::EMPTY
            }
        }
    }
}

/// Decodes the records of one group into its kind's rows.
struct GroupDecoder<'r> {
    out: ChunkRows,
    texts: TextIds<'r>,
    proc: ProcId,
    time: TimeBase,
    filter: &'r Filter,
}

type Records<'a> = std::slice::ChunksExact<'a, u8>;

impl GroupDecoder<'_> {
    /// A record's (start, end) in trace time, or `None` when it has no usable span (counted) or lies outside the
    /// `--start/--end` window.
    #[inline]
    fn span(&mut self, start: u64, end: u64) -> Option<(u64, u64)> {
        if start == 0 && end == 0 {
            self.out.counts.zero += 1;
            None
        } else if end < start {
            self.out.counts.inverted += 1;
            None
        } else {
            let (s, e) = (self.time.to_trace(start), self.time.to_trace(end));
            self.filter.keeps(s, e).then_some((s, e))
        }
    }

    #[inline]
    fn text(&mut self, ptr: u64) -> NameId {
        self.texts.get(ptr, &mut self.out.counts.unresolved)
    }

    fn kernels(&mut self, f: Option<&crate::fields::KernelFields>, records: Records<'_>) {
        let Some(f) = f else { return };
        let mut rows = Vec::with_capacity(records.len());
        for rec in records {
            let Some((start, end)) = self.span(f.start(rec), f.end(rec)) else { continue };
            rows.push(Kernel {
                proc: self.proc,
                start,
                end,
                device: f.device(rec),
                context: f.context(rec),
                stream: f.stream(rec),
                correlation: f.correlation(rec),
                name: self.text(f.name(rec)),
                grid: [f.grid_x(rec), f.grid_y(rec), f.grid_z(rec)],
                block: [f.block_x(rec), f.block_y(rec), f.block_z(rec)],
                registers: f.registers(rec),
                static_smem: f.static_smem(rec),
                dynamic_smem: f.dynamic_smem(rec),
                queued: f.queued(rec),
                graph_id: f.graph_id(rec),
                graph_node_id: f.graph_node_id(rec),
                channel: f.channel(rec),
                channel_type: f.channel_type(rec),
                cluster: [f.cluster_x(rec), f.cluster_y(rec), f.cluster_z(rec)],
                cluster_policy: f.cluster_policy(rec),
                launch_type: f.launch_type(rec),
                device_launched: f.device_launched(rec) != 0,
                local_memory_per_thread: f.local_memory_per_thread(rec),
                shared_memory_executed: f.shared_memory_executed(rec),
            });
        }
        self.out.kernels = rows;
    }

    fn memcpys(&mut self, f: Option<&crate::fields::MemcpyFields>, records: Records<'_>, peer_to_peer: bool) {
        let Some(f) = f else { return };
        for rec in records {
            let Some((start, end)) = self.span(f.start(rec), f.end(rec)) else { continue };
            self.out.memcpys.push(Memcpy {
                proc: self.proc,
                start,
                end,
                device: f.device(rec),
                context: f.context(rec),
                stream: f.stream(rec),
                correlation: f.correlation(rec),
                bytes: f.bytes(rec),
                copy_kind: f.copy_kind(rec),
                src_kind: f.src_kind(rec),
                dst_kind: f.dst_kind(rec),
                flags: f.flags(rec),
                graph_id: f.graph_id(rec),
                graph_node_id: f.graph_node_id(rec),
                peer: peer_to_peer.then(|| (f.src_device(rec), f.dst_device(rec))),
            });
        }
    }

    fn memsets(&mut self, f: Option<&crate::fields::MemsetFields>, records: Records<'_>) {
        let Some(f) = f else { return };
        for rec in records {
            let Some((start, end)) = self.span(f.start(rec), f.end(rec)) else { continue };
            self.out.memsets.push(Memset {
                proc: self.proc,
                start,
                end,
                device: f.device(rec),
                context: f.context(rec),
                stream: f.stream(rec),
                correlation: f.correlation(rec),
                bytes: f.bytes(rec),
                value: f.value(rec),
                memory_kind: f.memory_kind(rec),
                graph_id: f.graph_id(rec),
                graph_node_id: f.graph_node_id(rec),
            });
        }
    }

    fn apis(&mut self, f: Option<&crate::fields::ApiFields>, records: Records<'_>, driver: bool) {
        let Some(f) = f else { return };
        let mut rows = Vec::with_capacity(records.len());
        for rec in records {
            let Some((start, end)) = self.span(f.start(rec), f.end(rec)) else { continue };
            rows.push(ApiCall {
                proc: self.proc,
                start,
                end,
                pid: f.pid(rec),
                tid: f.tid(rec),
                correlation: f.correlation(rec),
                cbid: f.cbid(rec),
                driver,
                return_value: f.return_value(rec),
            });
        }
        self.out.apis = rows;
    }

    fn syncs(&mut self, f: Option<&crate::fields::SyncFields>, records: Records<'_>) {
        let Some(f) = f else { return };
        for rec in records {
            let Some((start, end)) = self.span(f.start(rec), f.end(rec)) else { continue };
            self.out.syncs.push(Sync {
                proc: self.proc,
                start,
                end,
                sync_type: f.sync_type(rec),
                correlation: f.correlation(rec),
                context: f.context(rec),
                stream: f.stream(rec),
                event: f.event(rec),
            });
        }
    }

    /// CUDA events have no span: they are kept whatever the window (syncs refer to them).
    fn events(&mut self, f: Option<&crate::fields::EventFields>, records: Records<'_>) {
        let Some(f) = f else { return };
        for rec in records {
            self.out.events.push(CudaEvent {
                proc: self.proc,
                correlation: f.correlation(rec),
                context: f.context(rec),
                stream: f.stream(rec),
                event: f.event(rec),
                device: f.device(rec),
                device_timestamp: self.time.to_trace(f.device_timestamp(rec)),
            });
        }
    }

    fn external(&mut self, f: Option<&crate::fields::ExternalFields>, records: Records<'_>) {
        let Some(f) = f else { return };
        let mut rows = Vec::with_capacity(records.len());
        rows.extend(records.map(|rec| (f.external_kind(rec), f.correlation(rec), f.external_id(rec))));
        self.out.external = rows;
    }

    /// Markers are paired into ranges per file, after all chunks ([`crate::nvtx::pair_markers`]), where the window
    /// applies.
    fn markers(&mut self, f: Option<&crate::fields::MarkerFields>, records: Records<'_>) {
        let Some(f) = f else { return };
        /// `objectKind` THREAD: `objectId.pt` holds the process and thread; other kinds have no host thread.
        const OBJECT_THREAD: u32 = 2;
        let mut rows = Vec::with_capacity(records.len());
        for rec in records {
            let thread = f.object_kind(rec) == OBJECT_THREAD;
            rows.push(RawMarker {
                ts: self.time.to_trace(f.timestamp(rec)),
                flags: f.flags(rec),
                id: f.id(rec),
                pid: if thread { f.pid(rec) } else { 0 },
                tid: if thread { f.tid(rec) } else { 0 },
                name: self.text(f.name(rec)),
                domain: self.text(f.domain(rec)),
            });
        }
        self.out.markers = rows;
    }

    fn overheads(&mut self, f: Option<&crate::fields::OverheadFields>, records: Records<'_>) {
        let Some(f) = f else { return };
        for rec in records {
            let Some((start, end)) = self.span(f.start(rec), f.end(rec)) else { continue };
            self.out.overheads.push(Overhead {
                proc: self.proc,
                start,
                end,
                kind: f.overhead_kind(rec),
                object_kind: f.object_kind(rec),
                tid: f.tid(rec),
            });
        }
    }

    /// Allocations and frees are instants: those without a timestamp are left out, like the window's outside.
    fn memory(&mut self, f: Option<&crate::fields::MemoryFields>, records: Records<'_>) {
        let Some(f) = f else { return };
        /// `CUpti_ActivityMemoryOperationType` RELEASE.
        const RELEASE: u32 = 2;
        for rec in records {
            let raw = f.timestamp(rec);
            let ts = self.time.to_trace(raw);
            if raw == 0 || !self.filter.keeps(ts, ts) {
                continue;
            }
            self.out.memory.push(MemoryOp {
                proc: self.proc,
                ts,
                device: f.device(rec),
                stream: f.stream(rec),
                correlation: f.correlation(rec),
                address: f.address(rec),
                bytes: f.bytes(rec),
                free: f.operation(rec) == RELEASE,
                memory_kind: f.memory_kind(rec),
            });
        }
    }

    /// Unified memory events. A kind CUPTI gives no end gets `end == start`; one whose end is before its start is
    /// counted as inverted and left out, as are records with no start and unknown counter kinds (counted).
    fn um(&mut self, f: Option<&crate::fields::UmFields>, records: Records<'_>) {
        let Some(f) = f else { return };
        for rec in records {
            let Some(kind) = UmKind::from_raw(f.counter_kind(rec)) else {
                self.out.counts.um_unknown_kind += 1;
                continue;
            };
            let raw_start = f.start(rec);
            if raw_start == 0 {
                self.out.counts.zero += 1;
                continue;
            }
            let raw_end = if kind.has_duration() { f.end(rec) } else { raw_start };
            if raw_end < raw_start {
                self.out.counts.inverted += 1;
                continue;
            }
            let (start, end) = (self.time.to_trace(raw_start), self.time.to_trace(raw_end));
            if !self.filter.keeps(start, end) {
                continue;
            }
            let value = f.value(rec);
            let cpu_fault = kind == UmKind::CpuPageFault;
            self.out.um.push(UmEvent {
                proc: self.proc,
                kind,
                start,
                end,
                value: if cpu_fault { 0 } else { value },
                address: f.address(rec),
                src: f.src(rec),
                dst: f.dst(rec),
                flags: f.flags(rec),
                pc: if cpu_fault { value } else { 0 },
                processors: if kind == UmKind::Thrashing { f.processors(rec) } else { 0 },
            });
        }
    }
}
