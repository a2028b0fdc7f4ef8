//! The trace model: CUPTI records decoded into typed rows, one time base for all files, and the joins between
//! them (API call <-> GPU work by correlation id, external ids, NVTX ranges around launches, graph launches).
//!
//! Rows are read by field name through each file's own layout table, so records of CUPTI 12.9 and 13.0 (or any
//! later table a file carries) decode the same way. Chunks are decoded in parallel and never all held at once.

use std::collections::HashMap;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cutr_format::records::FieldReader;
use cutr_format::{ChunkError, ChunkInfo, DecodedBuffer, LossCounters, Problem, Reader, SessionMetadata};
use cutr_schema::{LayoutTable, RecordLayout, kinds};
use rayon::prelude::*;

use crate::corr::CorrMap;
use crate::demangle;
use crate::timebase::TimeBase;

/// Interned strings (kernel names, NVTX messages, API names).
#[derive(Clone, Debug, Default)]
pub struct Names {
    map: rustc_hash::FxHashMap<Box<str>, u32>,
    list: Vec<Box<str>>,
}

impl Names {
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.map.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(s.into());
        self.map.insert(s.into(), i);
        i
    }

    pub fn get(&self, id: u32) -> &str {
        &self.list[id as usize]
    }

    /// The id of `s`, if interned.
    pub fn intern_lookup(&self, s: &str) -> Option<u32> {
        self.map.get(s).copied()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Id of the empty name.
pub const NO_NAME: u32 = 0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// Index of the input file (process) the record came from.
    pub proc: u16,
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    /// Raw (mangled) name; see [`Trace::display_name`].
    pub name: u32,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub registers: u16,
    pub static_smem: i32,
    pub dynamic_smem: i32,
    pub queued: u64,
    pub graph_id: u32,
    pub graph_node_id: u64,
    pub channel: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memcpy {
    pub proc: u16,
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub bytes: u64,
    pub copy_kind: u8,
    pub src_kind: u8,
    pub dst_kind: u8,
    pub flags: u8,
    pub graph_id: u32,
    pub graph_node_id: u64,
    /// Peer-to-peer copies (MEMCPY2): the devices owning source and destination.
    pub peer: Option<(u32, u32)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memset {
    pub proc: u16,
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub bytes: u64,
    pub value: u32,
    pub memory_kind: u16,
    pub graph_id: u32,
    pub graph_node_id: u64,
}

/// Runtime or driver API call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiCall {
    pub proc: u16,
    pub start: u64,
    pub end: u64,
    pub pid: u32,
    pub tid: u32,
    pub correlation: u32,
    pub cbid: u32,
    pub driver: bool,
    pub return_value: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sync {
    pub proc: u16,
    pub start: u64,
    pub end: u64,
    pub sync_type: u32,
    pub correlation: u32,
    pub context: u32,
    pub stream: u32,
    pub event: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaEvent {
    pub proc: u16,
    pub correlation: u32,
    pub context: u32,
    pub stream: u32,
    pub event: u32,
    pub device: u32,
    pub device_timestamp: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overhead {
    pub proc: u16,
    pub start: u64,
    pub end: u64,
    pub kind: u32,
    pub object_kind: u32,
    pub tid: u32,
}

/// An NVTX range (push/pop or start/end) on a host thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvtxRange {
    pub proc: u16,
    pub start: u64,
    /// `u64::MAX` when the range was never closed in the recording.
    pub end: u64,
    pub pid: u32,
    pub tid: u32,
    pub name: u32,
    pub domain: u32,
    pub id: u32,
    /// Nesting depth on its thread (0 = outermost).
    pub depth: u16,
    /// Index of the enclosing range on the same thread (`u32::MAX` = none).
    pub parent: u32,
}

/// An NVTX instantaneous marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvtxMark {
    pub proc: u16,
    pub ts: u64,
    pub pid: u32,
    pub tid: u32,
    pub name: u32,
    pub domain: u32,
}

/// A device memory allocation or free (MEMORY2 records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryOp {
    pub proc: u16,
    pub ts: u64,
    pub device: u32,
    pub stream: u32,
    pub correlation: u32,
    pub address: u64,
    pub bytes: u64,
    pub free: bool,
    pub memory_kind: u32,
}

/// An input file: one recorded process.
#[derive(Clone, Debug)]
pub struct Process {
    pub path: PathBuf,
    pub meta: Arc<SessionMetadata>,
    pub pid: u32,
    pub time: TimeBase,
    pub loss: LossCounters,
    pub problems: Vec<Problem>,
    /// (domain, cbid) -> index into `meta.callback_names` (runtime: domain 2, driver: domain 1).
    pub api_names: rustc_hash::FxHashMap<(u32, u32), u32>,
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
    /// Activity chunks that could not be decoded.
    pub damaged_chunks: u64,
    /// Records in damaged or truncated chunks.
    pub records_in_damaged_chunks: u64,
    /// Records whose string pointer (kernel or NVTX name) had no entry in the file's string tables.
    pub unresolved_names: u64,
    /// Bytes kept in the file but not parsed (records of kinds without a layout).
    pub unparsed_bytes: u64,
}

/// What to decode.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Keep records overlapping [start, end] (ns, trace time); `None` = unbounded.
    pub start: Option<u64>,
    pub end: Option<u64>,
    /// Only these CUPTI kinds (empty = all).
    pub kinds: Vec<u32>,
}

impl Filter {
    fn wants_kind(&self, k: u32) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&k)
    }

    fn keeps(&self, start: u64, end: u64) -> bool {
        self.start.is_none_or(|s| end >= s) && self.end.is_none_or(|e| start <= e)
    }
}

/// The decoded, joined trace of one or more files.
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
    pub ranges: Vec<NvtxRange>,
    pub marks: Vec<NvtxMark>,
    pub memory: Vec<MemoryOp>,
    /// (proc, correlation) -> PyTorch op id (external kind CUSTOM0) and user annotation id (CUSTOM1).
    pub external: CorrMap<(u64, u64)>,
    /// (proc, correlation) -> index + 1 into `apis` of the launching call (runtime preferred over driver); see
    /// [`Trace::launcher_index`].
    pub api_by_corr: CorrMap<u32>,
    /// Index into `ranges` of the innermost NVTX range enclosing each API call (`u32::MAX` = none).
    pub api_range: Vec<u32>,
    pub stats: JoinStats,
    /// Records per CUPTI kind, over all files.
    pub records_per_kind: Vec<(u32, u64)>,
    demangled: Vec<u32>,
}

/// Key of a (process, correlation id) pair.
#[inline]
pub fn corr_key(proc: u16, correlation: u32) -> u64 {
    ((proc as u64) << 32) | correlation as u64
}

/// Field readers of one record kind, looked up once per file.
struct Fields(Vec<Option<FieldReader>>);

impl Fields {
    fn new(layout: &RecordLayout, names: &[&str]) -> Fields {
        Fields(names.iter().map(|n| FieldReader::new(layout, n)).collect())
    }

    #[inline]
    fn u64(&self, i: usize, rec: &[u8]) -> u64 {
        self.0[i].map_or(0, |f| f.u64(rec))
    }

    #[inline]
    fn u32(&self, i: usize, rec: &[u8]) -> u32 {
        self.u64(i, rec) as u32
    }

    #[inline]
    fn i32(&self, i: usize, rec: &[u8]) -> i32 {
        self.0[i].map_or(0, |f| f.i64(rec) as i32)
    }
}

const KERNEL_FIELDS: &[&str] = &[
    "start",
    "end",
    "deviceId",
    "contextId",
    "streamId",
    "correlationId",
    "name",
    "gridX",
    "gridY",
    "gridZ",
    "blockX",
    "blockY",
    "blockZ",
    "registersPerThread",
    "staticSharedMemory",
    "dynamicSharedMemory",
    "queued",
    "graphId",
    "graphNodeId",
    "channelID",
];
const MEMCPY_FIELDS: &[&str] = &[
    "start",
    "end",
    "deviceId",
    "contextId",
    "streamId",
    "correlationId",
    "bytes",
    "copyKind",
    "srcKind",
    "dstKind",
    "flags",
    "graphId",
    "graphNodeId",
    "srcDeviceId",
    "dstDeviceId",
    "runtimeCorrelationId",
];
const MEMSET_FIELDS: &[&str] = &[
    "start",
    "end",
    "deviceId",
    "contextId",
    "streamId",
    "correlationId",
    "bytes",
    "value",
    "memoryKind",
    "graphId",
    "graphNodeId",
];
const API_FIELDS: &[&str] = &["start", "end", "processId", "threadId", "correlationId", "cbid", "returnValue"];
const SYNC_FIELDS: &[&str] = &["start", "end", "type", "correlationId", "contextId", "streamId", "cudaEventId"];
const EVENT_FIELDS: &[&str] = &["correlationId", "contextId", "streamId", "eventId", "deviceId", "deviceTimestamp"];
const EXT_FIELDS: &[&str] = &["externalKind", "externalId", "correlationId"];
const MARKER_FIELDS: &[&str] =
    &["flags", "timestamp", "id", "objectKind", "objectId.pt.processId", "objectId.pt.threadId", "name", "domain"];
const OVERHEAD_FIELDS: &[&str] = &["start", "end", "overheadKind", "objectKind", "objectId.pt.threadId"];
const MEMORY_FIELDS: &[&str] =
    &["timestamp", "deviceId", "streamId", "correlationId", "address", "bytes", "memoryOperationType", "memoryKind"];

struct FileFields {
    kernel: Option<Fields>,
    memcpy: Option<Fields>,
    memcpy2: Option<Fields>,
    memset: Option<Fields>,
    runtime: Option<Fields>,
    driver: Option<Fields>,
    sync: Option<Fields>,
    event: Option<Fields>,
    ext: Option<Fields>,
    marker: Option<Fields>,
    overhead: Option<Fields>,
    memory: Option<Fields>,
}

impl FileFields {
    fn new(t: &LayoutTable) -> FileFields {
        let f = |k: u32, names: &[&str]| t.get(k).map(|l| Fields::new(l, names));
        FileFields {
            kernel: f(kinds::CONCURRENT_KERNEL, KERNEL_FIELDS),
            memcpy: f(kinds::MEMCPY, MEMCPY_FIELDS),
            memcpy2: f(kinds::MEMCPY2, MEMCPY_FIELDS),
            memset: f(kinds::MEMSET, MEMSET_FIELDS),
            runtime: f(kinds::RUNTIME, API_FIELDS),
            driver: f(kinds::DRIVER, API_FIELDS),
            sync: f(kinds::SYNCHRONIZATION, SYNC_FIELDS),
            event: f(kinds::CUDA_EVENT, EVENT_FIELDS),
            ext: f(kinds::EXTERNAL_CORRELATION, EXT_FIELDS),
            marker: f(kinds::MARKER, MARKER_FIELDS),
            overhead: f(kinds::OVERHEAD, OVERHEAD_FIELDS),
            memory: f(kinds::MEMORY2, MEMORY_FIELDS),
        }
    }
}

/// A raw NVTX marker before start/end pairing.
#[derive(Clone, Copy, Debug)]
struct RawMarker {
    ts: u64,
    flags: u32,
    id: u32,
    pid: u32,
    tid: u32,
    name: u32,
    domain: u32,
}

/// Rows decoded from one chunk; file-local string ids are mapped to trace ids afterwards.
#[derive(Default)]
struct ChunkRows {
    kernels: Vec<Kernel>,
    memcpys: Vec<Memcpy>,
    memsets: Vec<Memset>,
    apis: Vec<ApiCall>,
    syncs: Vec<Sync>,
    events: Vec<CudaEvent>,
    ext: Vec<(u32, u32, u64)>,
    markers: Vec<RawMarker>,
    overheads: Vec<Overhead>,
    memory: Vec<MemoryOp>,
    per_kind: Vec<(u32, u64)>,
    zero: u64,
    inverted: u64,
    unmodelled: u64,
    unresolved: u64,
    unparsed: u64,
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
    fn get(&mut self, ptr: u64, unresolved: &mut u64) -> u32 {
        if ptr == 0 {
            return 0;
        }
        // Pointers to names are at least 8-byte aligned and spread over their low bits above that.
        let slot = ((ptr >> 3) ^ (ptr >> 9)) as usize % TextIds::SLOTS;
        if self.recent[slot].0 == ptr {
            return self.recent[slot].1;
        }
        match self.reader.strings().resolve_id(ptr, self.seq) {
            Some(id) => {
                self.recent[slot] = (ptr, id + 1);
                id + 1
            }
            None => {
                *unresolved += 1;
                0
            }
        }
    }
}

/// One kind's rows of each chunk, taken out of them.
fn take_kind<T>(rows: &mut [ChunkRows], kind: impl Fn(&mut ChunkRows) -> &mut Vec<T>) -> Vec<Vec<T>> {
    rows.iter_mut().map(|c| std::mem::take(kind(c))).collect()
}

/// Appends `parts` to `dest`, in order.
fn append_all<T>(dest: &mut Vec<T>, parts: Vec<Vec<T>>) {
    for mut p in parts {
        dest.append(&mut p);
    }
}

/// The rows of one decoded chunk. Its groups (one per kind) are decoded in parallel: a small recording is a few
/// large buffers, and one thread per buffer would leave most cores idle.
fn decode_chunk(
    r: &Reader,
    ff: &FileFields,
    proc: u16,
    tb: &TimeBase,
    filter: &Filter,
    chunk: &ChunkInfo,
    d: &DecodedBuffer,
) -> ChunkRows {
    let seq = chunk.header.seq;
    // A task per group, and per DECODE_TASK_RECORDS of a large group: a small recording is a few large
    // buffers, whose kernel group alone would otherwise keep one worker busy while the others wait.
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
            let _s = crate::phase::span(|| {
                format!("decode chunk {seq} kind {kind} ({} records)", records.len().checked_div(stride).unwrap_or(0))
            });
            decode_group(r, ff, proc, tb, filter, seq, kind, records.chunks_exact(stride.max(1)))
        })
        .collect();
    let mut parts = parts.into_iter();
    let mut out = parts.next().unwrap_or_default();
    for mut p in parts {
        out.absorb(&mut p);
    }
    out.unparsed = d.tail.len() as u64;
    out
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
        take_over(&mut self.ext, &mut other.ext);
        take_over(&mut self.markers, &mut other.markers);
        take_over(&mut self.overheads, &mut other.overheads);
        take_over(&mut self.memory, &mut other.memory);
        self.per_kind.append(&mut other.per_kind);
        self.zero += other.zero;
        self.inverted += other.inverted;
        self.unmodelled += other.unmodelled;
        self.unresolved += other.unresolved;
        self.unparsed += other.unparsed;
    }
}

/// Records of one kind decoded by one task (see [`decode_chunk`]).
const DECODE_TASK_RECORDS: usize = 1024;

/// The rows of records of one kind (a group of a chunk, or part of one).
#[allow(clippy::too_many_arguments)]
fn decode_group(
    r: &Reader,
    ff: &FileFields,
    proc: u16,
    tb: &TimeBase,
    filter: &Filter,
    seq: u32,
    kind: u32,
    records: std::slice::ChunksExact<'_, u8>,
) -> ChunkRows {
    let mut out = ChunkRows::default();
    let mut texts = TextIds::new(r, seq);
    let t = |v: u64| tb.to_trace(v);
    // A record's (start, end) in trace time, or None when it has no usable span (counted) or lies outside
    // the --start/--end window.
    let kept = |s: u64, e: u64, out: &mut ChunkRows| -> Option<(u64, u64)> {
        if s == 0 && e == 0 {
            out.zero += 1;
            None
        } else if e < s {
            out.inverted += 1;
            None
        } else {
            let (start, end) = (t(s), t(e));
            filter.keeps(start, end).then_some((start, end))
        }
    };
    let n = records.len();
    // Room for every record of the group up front: growing row vectors record by record reallocates.
    match kind {
        kinds::CONCURRENT_KERNEL | kinds::KERNEL => out.kernels.reserve(n),
        kinds::RUNTIME | kinds::DRIVER => out.apis.reserve(n),
        kinds::EXTERNAL_CORRELATION => out.ext.reserve(n),
        kinds::MARKER => out.markers.reserve(n),
        _ => {}
    }
    out.per_kind.push((kind, n as u64));
    if !filter.wants_kind(kind) {
        return out;
    }
    match kind {
        kinds::CONCURRENT_KERNEL | kinds::KERNEL => {
            let Some(f) = &ff.kernel else { return out };
            for rec in records.clone() {
                let Some((start, end)) = kept(f.u64(0, rec), f.u64(1, rec), &mut out) else {
                    continue;
                };
                let name = texts.get(f.u64(6, rec), &mut out.unresolved);
                out.kernels.push(Kernel {
                    proc,
                    start,
                    end,
                    device: f.u32(2, rec),
                    context: f.u32(3, rec),
                    stream: f.u32(4, rec),
                    correlation: f.u32(5, rec),
                    name,
                    grid: [f.i32(7, rec), f.i32(8, rec), f.i32(9, rec)],
                    block: [f.i32(10, rec), f.i32(11, rec), f.i32(12, rec)],
                    registers: f.u32(13, rec) as u16,
                    static_smem: f.i32(14, rec),
                    dynamic_smem: f.i32(15, rec),
                    queued: f.u64(16, rec),
                    graph_id: f.u32(17, rec),
                    graph_node_id: f.u64(18, rec),
                    channel: f.u32(19, rec),
                });
            }
        }
        kinds::MEMCPY | kinds::MEMCPY2 => {
            let p2p = kind == kinds::MEMCPY2;
            let Some(f) = (if p2p { &ff.memcpy2 } else { &ff.memcpy }) else { return out };
            for rec in records.clone() {
                let Some((start, end)) = kept(f.u64(0, rec), f.u64(1, rec), &mut out) else {
                    continue;
                };
                out.memcpys.push(Memcpy {
                    proc,
                    start,
                    end,
                    device: f.u32(2, rec),
                    context: f.u32(3, rec),
                    stream: f.u32(4, rec),
                    correlation: f.u32(5, rec),
                    bytes: f.u64(6, rec),
                    copy_kind: f.u32(7, rec) as u8,
                    src_kind: f.u32(8, rec) as u8,
                    dst_kind: f.u32(9, rec) as u8,
                    flags: f.u32(10, rec) as u8,
                    graph_id: f.u32(11, rec),
                    graph_node_id: f.u64(12, rec),
                    peer: p2p.then(|| (f.u32(13, rec), f.u32(14, rec))),
                });
            }
        }
        kinds::MEMSET => {
            let Some(f) = &ff.memset else { return out };
            for rec in records.clone() {
                let Some((start, end)) = kept(f.u64(0, rec), f.u64(1, rec), &mut out) else {
                    continue;
                };
                out.memsets.push(Memset {
                    proc,
                    start,
                    end,
                    device: f.u32(2, rec),
                    context: f.u32(3, rec),
                    stream: f.u32(4, rec),
                    correlation: f.u32(5, rec),
                    bytes: f.u64(6, rec),
                    value: f.u32(7, rec),
                    memory_kind: f.u32(8, rec) as u16,
                    graph_id: f.u32(9, rec),
                    graph_node_id: f.u64(10, rec),
                });
            }
        }
        kinds::RUNTIME | kinds::DRIVER => {
            let driver = kind == kinds::DRIVER;
            let Some(f) = (if driver { &ff.driver } else { &ff.runtime }) else { return out };
            for rec in records.clone() {
                let Some((start, end)) = kept(f.u64(0, rec), f.u64(1, rec), &mut out) else {
                    continue;
                };
                out.apis.push(ApiCall {
                    proc,
                    start,
                    end,
                    pid: f.u32(2, rec),
                    tid: f.u32(3, rec),
                    correlation: f.u32(4, rec),
                    cbid: f.u32(5, rec),
                    driver,
                    return_value: f.u32(6, rec),
                });
            }
        }
        kinds::SYNCHRONIZATION => {
            let Some(f) = &ff.sync else { return out };
            for rec in records.clone() {
                let Some((start, end)) = kept(f.u64(0, rec), f.u64(1, rec), &mut out) else {
                    continue;
                };
                out.syncs.push(Sync {
                    proc,
                    start,
                    end,
                    sync_type: f.u32(2, rec),
                    correlation: f.u32(3, rec),
                    context: f.u32(4, rec),
                    stream: f.u32(5, rec),
                    event: f.u32(6, rec),
                });
            }
        }
        kinds::CUDA_EVENT => {
            let Some(f) = &ff.event else { return out };
            for rec in records.clone() {
                let dt = f.u64(5, rec);
                out.events.push(CudaEvent {
                    proc,
                    correlation: f.u32(0, rec),
                    context: f.u32(1, rec),
                    stream: f.u32(2, rec),
                    event: f.u32(3, rec),
                    device: f.u32(4, rec),
                    device_timestamp: if dt == 0 { 0 } else { t(dt) },
                });
            }
        }
        kinds::EXTERNAL_CORRELATION => {
            let Some(f) = &ff.ext else { return out };
            for rec in records.clone() {
                out.ext.push((f.u32(0, rec), f.u32(2, rec), f.u64(1, rec)));
            }
        }
        kinds::MARKER => {
            let Some(f) = &ff.marker else { return out };
            for rec in records.clone() {
                let ts = f.u64(1, rec);
                // objectKind 2 = THREAD: pt holds the process and thread; others have no host thread.
                let thread = f.u32(3, rec) == 2;
                out.markers.push(RawMarker {
                    ts: t(ts),
                    flags: f.u32(0, rec),
                    id: f.u32(2, rec),
                    pid: if thread { f.u32(4, rec) } else { 0 },
                    tid: if thread { f.u32(5, rec) } else { 0 },
                    name: texts.get(f.u64(6, rec), &mut out.unresolved),
                    domain: texts.get(f.u64(7, rec), &mut out.unresolved),
                });
            }
        }
        kinds::OVERHEAD => {
            let Some(f) = &ff.overhead else { return out };
            for rec in records.clone() {
                let Some((start, end)) = kept(f.u64(0, rec), f.u64(1, rec), &mut out) else {
                    continue;
                };
                out.overheads.push(Overhead {
                    proc,
                    start,
                    end,
                    kind: f.u32(2, rec),
                    object_kind: f.u32(3, rec),
                    tid: f.u32(4, rec),
                });
            }
        }
        kinds::MEMORY2 => {
            let Some(f) = &ff.memory else { return out };
            for rec in records.clone() {
                let ts = f.u64(0, rec);
                if ts == 0 || !filter.keeps(t(ts), t(ts)) {
                    continue;
                }
                out.memory.push(MemoryOp {
                    proc,
                    ts: t(ts),
                    device: f.u32(1, rec),
                    stream: f.u32(2, rec),
                    correlation: f.u32(3, rec),
                    address: f.u64(4, rec),
                    bytes: f.u64(5, rec),
                    free: f.u32(6, rec) == 2,
                    memory_kind: f.u32(7, rec),
                });
            }
        }
        _ => out.unmodelled += n as u64,
    }
    out
}

/// How to open the inputs.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    pub filter: Filter,
}

/// Errors that stop a conversion: an input that cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {err}")]
    Open { path: PathBuf, err: cutr_format::FormatError },
    #[error("{path}: no session metadata, so its records cannot be interpreted")]
    NoMetadata { path: PathBuf },
    #[error("too many input files ({0}; at most 65535)")]
    TooMany(usize),
}

/// Loads and joins one or more recordings (one per process or rank) onto one timeline.
pub fn load(paths: &[PathBuf], opts: &LoadOptions) -> Result<Trace, LoadError> {
    let (readers, prefetched) = open_inputs(paths, opts.filter.start.is_none() && opts.filter.end.is_none())?;
    load_prefetched(paths, &readers, opts, prefetched)
}

/// Activity chunks of the first input, decoded while its side chunks were read ([`open_inputs`]).
#[derive(Default)]
pub struct Prefetched(Vec<(u32, Result<DecodedBuffer, ChunkError>)>);

/// Files with at most this many bytes of activity records decode all their chunks at once.
const ONE_WINDOW_RAW_BYTES: u64 = 32 << 20;

/// Chunks decoded at a time (and held in memory at once) per file: two per worker, or all of a small file's (a
/// small recording is a few chunks of very different sizes, and a window boundary would make the largest wait).
fn decode_window_len(r: &Reader) -> usize {
    let raw: u64 = r.activity_chunks().map(|c| c.header.raw_len).sum();
    if raw <= ONE_WINDOW_RAW_BYTES {
        r.activity_chunks().count().max(1)
    } else {
        (rayon::current_num_threads() * 2).max(1)
    }
}

/// Opens the inputs (in parallel). With `decode_ahead`, the first file's first window of activity chunks is
/// decompressed while its metadata and strings are read: for a small recording those each take about as long as
/// the whole decode. (Leave it off with a `--start/--end` window, which may skip those chunks.)
pub fn open_inputs(paths: &[PathBuf], decode_ahead: bool) -> Result<(Vec<Reader>, Prefetched), LoadError> {
    if paths.len() > u16::MAX as usize {
        return Err(LoadError::TooMany(paths.len()));
    }
    let opened: Vec<Result<(Reader, Prefetched), LoadError>> = paths
        .par_iter()
        .enumerate()
        .map(|(i, p)| {
            let _s = crate::phase::span(|| format!("open {}", p.display()));
            Reader::open_with(p, |r| {
                if i > 0 || !decode_ahead {
                    return Prefetched::default();
                }
                let mut first: Vec<&ChunkInfo> = r
                    .activity_chunks()
                    .take(decode_window_len(r))
                    .filter(|c| c.header.codec == cutr_format::Codec::Records)
                    .collect();
                // Largest first: the first workers to come up take the chunks that decode longest (a zstd frame
                // is decompressed by one thread), while later ones share the small.
                first.sort_by_key(|c| std::cmp::Reverse(c.header.raw_len));
                Prefetched(first.par_iter().map(|c| (c.header.seq, decode_activity_timed(r, c))).collect())
            })
            .map_err(|err| LoadError::Open { path: p.clone(), err })
        })
        .collect();
    let mut readers = Vec::with_capacity(paths.len());
    let mut prefetched = Prefetched::default();
    for (i, o) in opened.into_iter().enumerate() {
        let (r, p) = o?;
        readers.push(r);
        if i == 0 {
            prefetched = p;
        }
    }
    Ok((readers, prefetched))
}

fn decode_activity_timed(r: &Reader, c: &ChunkInfo) -> Result<DecodedBuffer, ChunkError> {
    let _s = crate::phase::span(|| format!("decompress+restore chunk {}", c.header.seq));
    r.decode_activity(c)
}

/// The rows of a window of chunks, one entry per chunk (`Err` for a chunk that failed to decode).
type WindowRows = Vec<Result<ChunkRows, ()>>;

/// [`load`] for already open readers (`paths` label them).
pub fn load_readers(paths: &[PathBuf], readers: &[Reader], opts: &LoadOptions) -> Result<Trace, LoadError> {
    load_prefetched(paths, readers, opts, Prefetched::default())
}

/// [`load_readers`] with the chunks [`open_inputs`] decoded ahead.
pub fn load_prefetched(
    paths: &[PathBuf],
    readers: &[Reader],
    opts: &LoadOptions,
    prefetched: Prefetched,
) -> Result<Trace, LoadError> {
    if paths.len() > u16::MAX as usize {
        return Err(LoadError::TooMany(paths.len()));
    }
    let mut trace = Trace::default();
    trace.names.intern(""); // NO_NAME
    let mut per_kind: HashMap<u32, u64> = HashMap::new();
    let mut prefetched = Some(prefetched);
    for (proc, (path, r)) in paths.iter().zip(readers).enumerate() {
        let proc = proc as u16;
        let meta = r.metadata_shared().ok_or_else(|| LoadError::NoMetadata { path: path.clone() })?;
        let layouts = r.layouts().ok_or_else(|| LoadError::NoMetadata { path: path.clone() })?;
        let tb = TimeBase::from_clocks(r.clocks());
        let ff = FileFields::new(layouts);
        let filter = &opts.filter;
        // Chunks whose time range is entirely outside the window are skipped without decoding.
        let skip = |c: &ChunkInfo| {
            let (a, b) = (tb.to_trace(c.header.t_min), tb.to_trace(c.header.t_max));
            c.header.t_max != 0 && (filter.start.is_some_and(|s| b < s) || filter.end.is_some_and(|e| a > e))
        };
        let mut damaged = 0u64;
        let mut damaged_records = 0u64;
        let mut problems = r.problems().to_vec();
        for p in &problems {
            if let Problem::TruncatedChunk { records, chunk_type: cutr_format::ChunkType::Activity, .. } = p {
                damaged_records += *records as u64;
            }
        }
        let mut markers = Vec::new();
        let mut ext: Vec<(u32, u32, u64)> = Vec::new();
        let chunks: Vec<ChunkInfo> = r.activity_chunks().filter(|c| !skip(c)).cloned().collect();
        let file_records: u64 = chunks.iter().map(|c| c.header.record_count as u64).sum();
        // Chunks are decoded in parallel a window at a time, and each window's rows are appended to the trace
        // while the next window decodes: the rows exist once (not once per chunk and again in the trace), decode
        // buffers are reused, and the appends (a task per kind) overlap the decoding.
        let window = decode_window_len(r);
        // Buffers decoded ahead (first file only), taken by chunk sequence number.
        let mut ahead: HashMap<u32, Result<DecodedBuffer, ChunkError>> =
            if proc == 0 { prefetched.take().unwrap_or_default().0.into_iter().collect() } else { HashMap::new() };
        let mut decode_window = |win: &[ChunkInfo]| -> WindowRows {
            let pre: Vec<Option<Result<DecodedBuffer, ChunkError>>> =
                win.iter().map(|c| ahead.remove(&c.header.seq)).collect();
            win.par_iter()
                .zip(pre)
                .map(|(c, pre)| match pre.unwrap_or_else(|| decode_activity_timed(r, c)) {
                    Ok(d) => Ok(decode_chunk(r, &ff, proc, &tb, filter, c, &d)),
                    Err(_) => Err(()),
                })
                .collect()
        };
        // File-local text ids -> trace name ids, built while the first window decodes (rows carry file-local ids
        // until they are appended).
        let mut windows = chunks.chunks(window);
        let first = windows.next().unwrap_or_default();
        let (map, first_rows) = rayon::join(
            || {
                let _s = crate::phase::span(|| "intern texts".into());
                let texts = r.strings().texts();
                std::iter::once(NO_NAME).chain(texts.iter().map(|t| trace.names.intern(t))).collect::<Vec<u32>>()
            },
            || decode_window(first),
        );
        let m = |id: u32| map.get(id as usize).copied().unwrap_or(NO_NAME);
        let mut reserved = false;
        let mut append = |win: &[ChunkInfo], rows: WindowRows| {
            let _s = crate::phase::span(|| format!("append {} chunks", win.len()));
            if !reserved {
                // Room for the whole file, estimated from the first window's mix of kinds (25% spare): growing
                // vectors of hundreds of MB by doubling copies them and touches twice the memory.
                reserved = true;
                let got: u64 = win.iter().map(|c| c.header.record_count as u64).sum::<u64>().max(1);
                let scale = |n: usize| (n as u64 * file_records / got * 5 / 4) as usize;
                let ok = || rows.iter().flatten();
                trace.kernels.reserve(scale(ok().map(|c| c.kernels.len()).sum()));
                trace.apis.reserve(scale(ok().map(|c| c.apis.len()).sum()));
                trace.memcpys.reserve(scale(ok().map(|c| c.memcpys.len()).sum()));
                trace.memsets.reserve(scale(ok().map(|c| c.memsets.len()).sum()));
                trace.syncs.reserve(scale(ok().map(|c| c.syncs.len()).sum()));
                trace.cuda_events.reserve(scale(ok().map(|c| c.events.len()).sum()));
                markers.reserve(scale(ok().map(|c| c.markers.len()).sum()));
                ext.reserve(scale(ok().map(|c| c.ext.len()).sum()));
            }
            let mut ok = Vec::with_capacity(rows.len());
            for (c, rows) in win.iter().zip(rows) {
                let Ok(mut c) = rows else {
                    damaged += 1;
                    damaged_records += c.header.record_count as u64;
                    continue;
                };
                for (k, n) in c.per_kind.drain(..) {
                    *per_kind.entry(k).or_default() += n;
                }
                trace.stats.zero_timestamp_records += c.zero;
                trace.stats.inverted_records += c.inverted;
                trace.stats.unmodelled_records += c.unmodelled;
                trace.stats.unresolved_names += c.unresolved;
                trace.stats.unparsed_bytes += c.unparsed;
                ok.push(c);
            }
            // Each kind's rows are appended by its own task: the copies (and first touches of the reserved
            // memory) of the kinds at once instead of one after another. Names become trace name ids on the way.
            let (k, mc, ms, a) = (
                take_kind(&mut ok, |c| &mut c.kernels),
                take_kind(&mut ok, |c| &mut c.memcpys),
                take_kind(&mut ok, |c| &mut c.memsets),
                take_kind(&mut ok, |c| &mut c.apis),
            );
            let (sy, ev, ov, me) = (
                take_kind(&mut ok, |c| &mut c.syncs),
                take_kind(&mut ok, |c| &mut c.events),
                take_kind(&mut ok, |c| &mut c.overheads),
                take_kind(&mut ok, |c| &mut c.memory),
            );
            let (mk, ex) = (take_kind(&mut ok, |c| &mut c.markers), take_kind(&mut ok, |c| &mut c.ext));
            let (markers, ext) = (&mut markers, &mut ext);
            let kernels = &mut trace.kernels;
            rayon::scope(|s| {
                s.spawn(|_| {
                    for part in k {
                        kernels.extend(part.into_iter().map(|mut k| {
                            k.name = m(k.name);
                            k
                        }));
                    }
                });
                s.spawn(|_| append_all(&mut trace.apis, a));
                s.spawn(|_| {
                    for part in mk {
                        markers.extend(part.into_iter().map(|mut mk| {
                            mk.name = m(mk.name);
                            mk.domain = m(mk.domain);
                            mk
                        }));
                    }
                });
                s.spawn(|_| append_all(ext, ex));
                append_all(&mut trace.memcpys, mc);
                append_all(&mut trace.memsets, ms);
                append_all(&mut trace.syncs, sy);
                append_all(&mut trace.cuda_events, ev);
                append_all(&mut trace.overheads, ov);
                append_all(&mut trace.memory, me);
            });
        };
        let mut decoded: Option<(&[ChunkInfo], WindowRows)> = (!first.is_empty()).then_some((first, first_rows));
        for win in windows {
            let next = match decoded.take() {
                None => decode_window(win),
                Some((prev, rows)) => rayon::join(|| append(prev, rows), || decode_window(win)).1,
            };
            decoded = Some((win, next));
        }
        if let Some((prev, rows)) = decoded {
            append(prev, rows);
        }
        // External ids by correlation id: PyTorch's op id (kind CUSTOM0 = 3) and user annotation id (CUSTOM1 = 4).
        // Other external kinds (OpenACC, OpenMP, CUSTOM2) are not shown anywhere: counted as unmodelled.
        const CUSTOM0: u32 = 3;
        const CUSTOM1: u32 = 4;
        trace.stats.unmodelled_records += ext.iter().filter(|e| e.0 != CUSTOM0 && e.0 != CUSTOM1).count() as u64;
        let external = &mut trace.external;
        let build_external = || {
            let _s = crate::phase::span(|| "external ids".into());
            let ext = &ext;
            external.build_file_par(
                proc,
                ext.len(),
                |i| match ext[i] {
                    (CUSTOM0, corr, id) => Some((corr, (id, 0))),
                    (CUSTOM1, corr, id) => Some((corr, (0, id))),
                    _ => None,
                },
                |slot, v| {
                    if v.0 != 0 {
                        slot.0 = v.0;
                    }
                    if v.1 != 0 {
                        slot.1 = v.1;
                    }
                },
            );
        };
        // (domain, cbid) -> entry of the file's API name table (the last entry wins, as the table is written).
        let index_api_names = || {
            let _s = crate::phase::span(|| "api names".into());
            let mut names = rustc_hash::FxHashMap::default();
            names.reserve(meta.callback_names.len());
            for (i, (d, c, _)) in meta.callback_names.iter().enumerate() {
                names.insert((*d, *c), i as u32);
            }
            names
        };
        let pair = || pair_markers(proc, markers, filter);
        let (api_names, ((), paired)) = rayon::join(index_api_names, || rayon::join(build_external, pair));
        drop(ext);
        trace.marks.extend(paired.marks);
        trace.ranges.extend(paired.ranges);
        trace.stats.nvtx_ends_without_start += paired.ends_without_start;
        trace.stats.nvtx_unclosed_ranges += paired.unclosed;
        trace.stats.damaged_chunks += damaged;
        trace.stats.records_in_damaged_chunks += damaged_records;
        problems.sort_by_key(|p| format!("{p}"));
        trace.processes.push(Process {
            path: path.clone(),
            pid: meta.pid,
            time: tb,
            loss: r.loss().cloned().unwrap_or_default(),
            problems,
            api_names,
            meta,
        });
    }
    trace.records_per_kind = per_kind.into_iter().collect();
    trace.records_per_kind.sort();
    crate::phase::mark("decode");
    trace.finish();
    crate::phase::mark("joins");
    Ok(trace)
}

/// NVTX markers of one file paired into ranges.
#[derive(Default)]
struct PairedMarkers {
    marks: Vec<NvtxMark>,
    ranges: Vec<NvtxRange>,
    ends_without_start: u64,
    unclosed: u64,
}

/// Pairs NVTX start/end markers by id into ranges; instantaneous markers become marks.
fn pair_markers(proc: u16, mut markers: Vec<RawMarker>, filter: &Filter) -> PairedMarkers {
    const INSTANT: u32 = 1;
    const START: u32 = 1 << 1;
    const END: u32 = 1 << 2;
    let _s = crate::phase::span(|| "pair nvtx markers".into());
    // Stable: markers at the same time keep their record order (ends before starts).
    markers.par_sort_by_key(|m| (m.ts, m.flags & END == 0));
    let mut out = PairedMarkers::default();
    let range = |s: &RawMarker, end: u64| NvtxRange {
        proc,
        start: s.ts,
        end,
        pid: s.pid,
        tid: s.tid,
        name: s.name,
        domain: s.domain,
        id: s.id,
        depth: 0,
        parent: u32::MAX,
    };
    let mut open: HashMap<u32, RawMarker> = HashMap::new();
    for mk in markers {
        if mk.flags & INSTANT != 0 {
            if filter.keeps(mk.ts, mk.ts) {
                out.marks.push(NvtxMark {
                    proc,
                    ts: mk.ts,
                    pid: mk.pid,
                    tid: mk.tid,
                    name: mk.name,
                    domain: mk.domain,
                });
            }
        } else if mk.flags & START != 0 {
            open.insert(mk.id, mk);
        } else if mk.flags & END != 0 {
            match open.remove(&mk.id) {
                Some(s) => {
                    if filter.keeps(s.ts, mk.ts) {
                        out.ranges.push(range(&s, mk.ts.max(s.ts)));
                    }
                }
                None => out.ends_without_start += 1,
            }
        }
    }
    for (_, s) in open {
        out.unclosed += 1;
        if filter.keeps(s.ts, u64::MAX) {
            out.ranges.push(range(&s, u64::MAX));
        }
    }
    out
}

impl Trace {
    /// Sorts rows by time and builds the joins.
    fn finish(&mut self) {
        // The kinds sort at the same time (each in parallel too): a small recording's sorts are each too short to
        // keep the workers busy one after another.
        let (kernels, memcpys, memsets, apis, syncs) =
            (&mut self.kernels, &mut self.memcpys, &mut self.memsets, &mut self.apis, &mut self.syncs);
        let (overheads, memory, marks, ranges) =
            (&mut self.overheads, &mut self.memory, &mut self.marks, &mut self.ranges);
        let sorting = crate::phase::span(|| "sort rows".into());
        rayon::scope(|s| {
            s.spawn(|_| kernels.par_sort_unstable_by_key(|k| (k.start, k.proc, k.correlation)));
            s.spawn(|_| memcpys.par_sort_unstable_by_key(|k| (k.start, k.proc, k.correlation)));
            s.spawn(|_| memsets.par_sort_unstable_by_key(|k| (k.start, k.proc, k.correlation)));
            s.spawn(|_| syncs.par_sort_unstable_by_key(|k| (k.start, k.proc, k.correlation)));
            s.spawn(|_| {
                overheads.sort_unstable_by_key(|k| (k.start, k.proc));
                memory.sort_unstable_by_key(|k| (k.ts, k.proc));
                marks.sort_unstable_by_key(|k| (k.ts, k.proc));
                // Outer ranges first at equal starts, so depth follows nesting.
                ranges.sort_unstable_by_key(|r| (r.proc, r.pid, r.tid, r.start, std::cmp::Reverse(r.end)));
            });
            apis.par_sort_unstable_by_key(|k| (k.start, k.proc, k.correlation));
        });
        drop(sorting);
        crate::phase::mark("sort rows");

        let _s = crate::phase::span(|| "api by correlation".into());
        let apis = &self.apis;
        // A runtime call and the driver call it makes can share an id: the runtime call is the launch.
        let launch = |slot: &mut u32, i: u32| {
            if *slot == 0 || apis[*slot as usize - 1].driver || !apis[i as usize - 1].driver {
                *slot = i;
            }
        };
        if self.processes.len() <= 1 {
            // One file: (correlation id, index + 1) straight from the rows.
            self.api_by_corr.build_file_par(0, apis.len(), |i| Some((apis[i].correlation, i as u32 + 1)), launch);
        } else {
            // (correlation id, index + 1) of each file's calls, gathered in one pass over all calls.
            let mut per_file: Vec<Vec<(u32, u32)>> = vec![Vec::new(); self.processes.len()];
            for (i, a) in apis.iter().enumerate() {
                per_file[a.proc as usize].push((a.correlation, i as u32 + 1));
            }
            for (proc, entries) in per_file.iter().enumerate() {
                self.api_by_corr.build_file_par(proc as u16, entries.len(), |j| Some(entries[j]), launch);
            }
        }
        drop(_s);
        let _s = crate::phase::span(|| "count unlaunched".into());
        let missing = |proc: u16, corr: u32| !self.api_by_corr.contains(proc, corr);
        // One pass over the kernels for both counts, beside the copies and memsets (each pass is a fork and join).
        let ((kernels, graph_kernels), (memcpys, memsets)) = rayon::join(
            || {
                self.kernels
                    .par_iter()
                    .map(|k| {
                        let m = missing(k.proc, k.correlation);
                        (m as u64, (m && k.graph_id != 0) as u64)
                    })
                    .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
            },
            || {
                rayon::join(
                    || self.memcpys.par_iter().filter(|k| missing(k.proc, k.correlation)).count() as u64,
                    || self.memsets.par_iter().filter(|k| missing(k.proc, k.correlation)).count() as u64,
                )
            },
        );
        self.stats.gpu_without_api = kernels + memcpys + memsets;
        self.stats.graph_kernels_without_launch = graph_kernels;
        self.stats.external_without_api = self.external.count_where(|p, c, _| !self.api_by_corr.contains(p, c));

        drop(_s);
        let _s = crate::phase::span(|| "nvtx depth".into());
        // NVTX depth per thread, and the innermost range around each API call.
        let mut stack: Vec<usize> = Vec::new();
        let mut thread = None;
        for i in 0..self.ranges.len() {
            let r = self.ranges[i];
            if thread != Some((r.proc, r.pid, r.tid)) {
                thread = Some((r.proc, r.pid, r.tid));
                stack.clear();
            }
            while let Some(&top) = stack.last() {
                if self.ranges[top].end <= r.start {
                    stack.pop();
                } else {
                    break;
                }
            }
            self.ranges[i].depth = stack.len() as u16;
            self.ranges[i].parent = stack.last().map_or(u32::MAX, |&p| p as u32);
            stack.push(i);
        }
        drop(_s);
        let _s = crate::phase::span(|| "enclosing ranges".into());
        self.api_range = self.enclosing_ranges();
        self.demangled = Vec::new();
    }

    /// For each API call, the innermost NVTX range on its thread that contains it.
    ///
    /// Needs `depth` and `parent` set. The ranges that contain a call are the last range on its thread to start at
    /// or before the call and that range's ancestors: any earlier range still open at the call was still on the
    /// nesting stack when the last one started, and that stack is the parent chain. So the innermost is the first
    /// of that chain that ends at or after the call (a walk bounded by the nesting depth, not by the number of
    /// sibling ranges before the call).
    fn enclosing_ranges(&self) -> Vec<u32> {
        // Each thread's range starts (sorted) beside the range indices, so the searches read contiguous memory.
        let mut by_thread: HashMap<(u16, u32), ThreadRanges> = HashMap::new();
        for (i, r) in self.ranges.iter().enumerate() {
            let (starts, ids) = by_thread.entry((r.proc, r.tid)).or_default();
            starts.push(r.start);
            ids.push(i as u32);
        }
        let innermost = |ids: &[u32], n: usize, a: &ApiCall| {
            let mut at = if n == 0 { u32::MAX } else { ids[n - 1] };
            while let Some(r) = self.ranges.get(at as usize) {
                if r.end >= a.end {
                    return at;
                }
                at = r.parent;
            }
            u32::MAX
        };
        let mut out = vec![u32::MAX; self.apis.len()];
        if by_thread.is_empty() {
            return out;
        }
        // API calls come sorted by start, so within a block of calls each thread's position in its ranges only
        // moves forward: a gallop from where the thread's previous call left it instead of a full search.
        const BLOCK: usize = 4096;
        out.par_chunks_mut(BLOCK).zip(self.apis.par_chunks(BLOCK)).for_each(|(out, apis)| {
            // The threads seen in this block with their ranges and cursor; calls mostly repeat the last thread.
            let mut threads: Vec<((u16, u32), Option<&ThreadRanges>, usize)> = Vec::new();
            let mut last = usize::MAX;
            for (slot, a) in out.iter_mut().zip(apis) {
                let key = (a.proc, a.tid);
                if threads.get(last).is_none_or(|t| t.0 != key) {
                    last = threads.iter().position(|t| t.0 == key).unwrap_or_else(|| {
                        threads.push((key, by_thread.get(&key), 0));
                        threads.len() - 1
                    });
                }
                let (_, ranges, cursor) = &mut threads[last];
                let Some((starts, ids)) = ranges else { continue };
                let from = *cursor;
                let n = if from > 0 && starts[from - 1] > a.start {
                    starts.partition_point(|&s| s <= a.start)
                } else {
                    from + gallop(&starts[from..], a.start)
                };
                *cursor = n;
                *slot = innermost(ids, n, a);
            }
        });
        out
    }

    /// Demangles every kernel name once (like `c++filt`); afterwards [`Trace::display_name`] is cheap.
    pub fn demangle_names(&mut self) {
        let n = self.names.len();
        if self.demangled.len() == n && n > 0 {
            return;
        }
        // The names kernels use (a few hundred among millions of kernels), marked in parallel blocks.
        let used = self
            .kernels
            .par_chunks(1 << 15)
            .fold(
                || vec![false; n],
                |mut used, ks| {
                    for k in ks {
                        used[k.name as usize] = true;
                    }
                    used
                },
            )
            .reduce(|| vec![false; n], |a, b| a.iter().zip(&b).map(|(x, y)| *x || *y).collect());
        let todo: Vec<(u32, String)> =
            (0..n as u32).filter(|&i| used[i as usize]).map(|i| (i, self.names.get(i).to_string())).collect();
        let done: Vec<(u32, String)> = todo.into_par_iter().map(|(i, s)| (i, demangle::demangle(&s))).collect();
        let mut map: Vec<u32> = (0..n as u32).collect();
        for (i, d) in done {
            map[i as usize] = self.names.intern(&d);
        }
        self.demangled = map;
    }

    /// The demangled name id of a kernel name id (after [`Trace::demangle_names`]).
    pub fn display_name_id(&self, name: u32) -> u32 {
        self.demangled.get(name as usize).copied().unwrap_or(name)
    }

    pub fn display_name(&self, name: u32) -> &str {
        self.names.get(self.display_name_id(name))
    }

    /// For each NVTX range: the GPU time (ns) and number of kernels, copies and memsets launched by API calls
    /// inside it, nested ranges included.
    pub fn gpu_work_by_range(&self) -> Vec<(u64, u64)> {
        // Each op's innermost range (that of its launching call) is found in parallel; the ops' time and count
        // are summed per innermost range, and each such range's sums then go up its parent chain once, rather
        // than every op walking the chain (the same integer sums).
        let innermost =
            |proc: u16, corr: u32| self.launcher_index(proc, corr).map_or(u32::MAX, |ai| self.api_range[ai as usize]);
        let ops: Vec<(u32, u64)> = self
            .kernels
            .par_iter()
            .map(|k| (innermost(k.proc, k.correlation), k.end - k.start))
            .chain(self.memcpys.par_iter().map(|k| (innermost(k.proc, k.correlation), k.end - k.start)))
            .chain(self.memsets.par_iter().map(|k| (innermost(k.proc, k.correlation), k.end - k.start)))
            .collect();
        let mut own = vec![(0u64, 0u64); self.ranges.len()];
        for &(r, dur) in &ops {
            if r != u32::MAX {
                own[r as usize].0 += dur;
                own[r as usize].1 += 1;
            }
        }
        let mut out = vec![(0u64, 0u64); self.ranges.len()];
        for (i, &(dur, n)) in own.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let mut r = i as u32;
            while r != u32::MAX {
                out[r as usize].0 += dur;
                out[r as usize].1 += n;
                r = self.ranges[r as usize].parent;
            }
        }
        out
    }

    /// The API call that launched GPU work with this correlation id.
    pub fn launcher(&self, proc: u16, correlation: u32) -> Option<&ApiCall> {
        self.launcher_index(proc, correlation).map(|i| &self.apis[i as usize])
    }

    /// Index into `apis` of the call that launched GPU work with this correlation id.
    #[inline]
    pub fn launcher_index(&self, proc: u16, correlation: u32) -> Option<u32> {
        self.api_by_corr.get(proc, correlation).map(|i| i - 1)
    }

    /// PyTorch's op id (external kind CUSTOM0) and user annotation id (CUSTOM1) of a correlation id; 0 = none.
    #[inline]
    pub fn external_ids(&self, proc: u16, correlation: u32) -> (u64, u64) {
        self.external.get(proc, correlation).unwrap_or((0, 0))
    }

    /// The function name of an API call (`cudaLaunchKernel`), from the file's own table, else CUDA 13.0's.
    pub fn api_name(&self, a: &ApiCall) -> String {
        self.api_name_of(a.proc, a.driver, a.cbid)
    }

    /// The function name of a runtime (`driver` false) or driver API cbid as recorded in file `proc`.
    pub fn api_name_of(&self, proc: u16, driver: bool, cbid: u32) -> String {
        let domain = if driver { 1 } else { 2 };
        let p = &self.processes[proc as usize];
        p.api_names
            .get(&(domain, cbid))
            .and_then(|&i| p.meta.callback_names.get(i as usize))
            .map(|(_, _, n)| cutr_schema::callbacks::display_name(n).to_string())
            .or_else(|| cutr_schema::callbacks::name(domain, cbid).map(str::to_string))
            .unwrap_or_else(|| format!("{}_cbid_{cbid}", if driver { "cuDriver" } else { "cudaRuntime" }))
    }

    /// Earliest and latest timestamp of any row (0, 0 when empty).
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
            bounds(&self.ranges, |k| (k.start, if k.end == u64::MAX { k.start } else { k.end })),
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
            t.notes.extend(l.notes.iter().cloned());
        }
        t
    }

    /// Short label of an input file for messages.
    pub fn label(&self, proc: u16) -> String {
        let p = &self.processes[proc as usize];
        Path::new(&p.path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

/// One thread's NVTX ranges: their starts (sorted) and their indices in `Trace::ranges`.
type ThreadRanges = (Vec<u64>, Vec<u32>);

/// How many of the sorted `starts` are at or before `t`, searched from the front in doubling steps (cheap when the
/// answer is near the front, as for a cursor that moves forward through time).
fn gallop(starts: &[u64], t: u64) -> usize {
    let mut hi = 1;
    while hi <= starts.len() && starts[hi - 1] <= t {
        hi *= 2;
    }
    let lo = hi / 2;
    let hi = hi.min(starts.len());
    lo + starts[lo..hi].partition_point(|&s| s <= t)
}

#[cfg(test)]
mod tests {
    use super::gallop;

    #[test]
    fn gallop_counts_the_starts_at_or_before_a_time() {
        let starts = [10, 20, 20, 30, 40, 50, 60, 70, 80];
        for t in [0, 9, 10, 19, 20, 25, 30, 69, 70, 80, 1000] {
            let expected = starts.iter().filter(|&&s| s <= t).count();
            assert_eq!(gallop(&starts, t), expected, "t = {t}");
        }
        assert_eq!(gallop(&[], 5), 0);
    }
}
