//! Reads `.cutr` files: the footer index in place from an mmap, or, for a file that was never closed (killed,
//! disk full) or whose footer is damaged, by scanning chunk headers from the start. Chunks are checked against
//! their CRC-32C before use; a damaged chunk is skipped and reported, never trusted.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cutr_schema::{LayoutTable, fb};
use rayon::prelude::*;

use crate::codec::{self, CodecPlan, DecodedBuffer};
use crate::container::{
    CHUNK_HEADER_LEN, CHUNK_MAGIC, ChunkHeader, ChunkType, Codec, FILE_HEADER_LEN, FileHeader, TRAILER_LEN, Trailer,
    payload_ok,
};
use crate::error::{ChunkError, FormatError};
use crate::limits::check_claims;
use crate::meta::{self, ClockSample, LossCounters, SessionMetadata};

mod cubins;
pub use cubins::Cubin;

/// One chunk as listed by the footer or found by scanning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkInfo {
    pub offset: u64,
    pub header: ChunkHeader,
    /// (kind, count) of an activity chunk's records; empty when the file was recovered by scanning (decode the
    /// chunk to count).
    pub kind_counts: Vec<(u32, u32)>,
}

impl ChunkInfo {
    pub fn chunk_type(&self) -> ChunkType {
        self.header.chunk_type
    }
}

/// Something wrong with a file that did not stop it from being read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A chunk whose payload failed its checksum or could not be decoded: skipped.
    DamagedChunk { offset: u64, seq: u32, chunk_type: ChunkType, records: u32, error: ChunkError },
    /// Bytes that hold no valid chunk header, skipped while scanning for the next chunk.
    UnreadableBytes { offset: u64, len: u64 },
    /// The file ends inside a chunk (it was cut while that chunk was being written).
    TruncatedChunk { offset: u64, seq: u32, chunk_type: ChunkType, records: u32, missing_bytes: u64 },
    /// The file ends inside a chunk header.
    TruncatedHeader { offset: u64, len: u64 },
    /// A chunk type from a newer minor version of the format: skipped.
    UnknownChunkType { offset: u64, seq: u32, chunk_type: u8 },
    /// The footer could not be used, so the file was read by scanning.
    FooterUnusable { reason: String },
    /// A second chunk with a sequence number already read (a chunk written twice, or a file's chunks appended to
    /// it again): ignored, so its records are not counted twice.
    DuplicateChunk { offset: u64, seq: u32, first_offset: u64 },
    /// Sequence numbers with no chunk and no other problem to account for them: chunks lost without a trace.
    MissingChunks { first_seq: u32, count: u32 },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::DamagedChunk { offset, seq, chunk_type, records, error } => write!(
                f,
                "{} chunk #{seq} at byte {offset} is damaged ({error}); skipped{}",
                chunk_type.name(),
                if *records > 0 { format!(", {records} records lost") } else { String::new() }
            ),
            Problem::UnreadableBytes { offset, len } => {
                write!(f, "{len} unreadable bytes at byte {offset} (no valid chunk header); skipped")
            }
            Problem::TruncatedChunk { offset, seq, chunk_type, records, missing_bytes } => write!(
                f,
                "file ends inside {} chunk #{seq} at byte {offset} ({missing_bytes} bytes missing{}); that chunk is lost",
                chunk_type.name(),
                if *records > 0 { format!(", {records} records") } else { String::new() }
            ),
            Problem::TruncatedHeader { offset, len } => {
                write!(f, "file ends inside a chunk header at byte {offset} ({len} stray bytes)")
            }
            Problem::UnknownChunkType { offset, chunk_type, .. } => write!(
                f,
                "chunk at byte {offset} has type {chunk_type}, unknown to this reader (newer minor version?); skipped"
            ),
            Problem::FooterUnusable { reason } => {
                write!(f, "footer index unusable ({reason}); read by scanning")
            }
            Problem::DuplicateChunk { offset, seq, first_offset } => write!(
                f,
                "chunk at byte {offset} repeats sequence number {seq} of the chunk at byte {first_offset}; ignored"
            ),
            Problem::MissingChunks { first_seq, count } => {
                if *count == 1 {
                    write!(f, "chunk #{first_seq} is missing")
                } else {
                    write!(f, "chunks #{first_seq}-#{} are missing", first_seq + count - 1)
                }
            }
        }
    }
}

/// How a file without a usable footer was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Why the footer could not be used.
    pub reason: String,
    /// Bytes that belong to no readable chunk.
    pub lost_bytes: u64,
}

/// Text behind the host pointers in records, by (pointer, chunk sequence number).
#[derive(Clone, Debug, Default)]
pub struct StringTable {
    texts: Vec<String>,
    /// (pointer, valid_from_seq, text index), sorted; entries added in file order keep it for equal keys.
    entries: Vec<(u64, u32, u32)>,
    /// Pointer -> its run in `entries` (start, length). One lookup per record with a name, so a fast hash.
    by_ptr: rustc_hash::FxHashMap<u64, (u32, u32)>,
}

impl StringTable {
    /// Builds the table from entries in file order.
    fn from_entries(list: impl IntoIterator<Item = (u64, u32, String)>) -> StringTable {
        let mut t = StringTable::default();
        for (ptr, seq, text) in list {
            t.entries.push((ptr, seq, t.texts.len() as u32));
            t.texts.push(text);
        }
        t.entries.sort_unstable();
        t.by_ptr.reserve(t.entries.len());
        let mut i = 0;
        while i < t.entries.len() {
            let ptr = t.entries[i].0;
            let n = t.entries[i..].iter().take_while(|e| e.0 == ptr).count();
            t.by_ptr.insert(ptr, (i as u32, n as u32));
            i += n;
        }
        t
    }

    /// Like [`resolve`](Self::resolve) but returns a stable index into [`texts`](Self::texts).
    pub fn resolve_id(&self, ptr: u64, seq: u32) -> Option<u32> {
        let &(start, len) = self.by_ptr.get(&ptr)?;
        let v = &self.entries[start as usize..(start + len) as usize];
        // The newest entry valid at `seq`; a pointer first seen later than `seq` resolves to its first text.
        let i = v.partition_point(|e| e.1 <= seq);
        Some(if i == 0 { v[0].2 } else { v[i - 1].2 })
    }

    /// The text `ptr` pointed at when the activity chunk with sequence number `seq` was written.
    pub fn resolve(&self, ptr: u64, seq: u32) -> Option<&str> {
        self.resolve_id(ptr, seq).map(|id| self.texts[id as usize].as_str())
    }

    pub fn texts(&self) -> &[String] {
        &self.texts
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }
}

/// A decoded side chunk other than the metadata.
enum SideChunk {
    Strings(Vec<(u64, u32, String)>),
    Clocks(Vec<ClockSample>),
    Loss(LossCounters),
    Threads(Vec<(u32, String)>),
}

/// The side chunks of a file, decoded but not yet installed in its reader.
struct SideChunks {
    metadata: Option<SessionMetadata>,
    /// Newer metadata chunks that could not be read.
    metadata_problems: Vec<Problem>,
    /// The other side chunks in file order.
    decoded: Vec<Result<SideChunk, Problem>>,
}

enum Data {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Mapped(m) => m,
            Data::Owned(v) => v,
        }
    }
}

/// An open `.cutr` file.
pub struct Reader {
    data: Data,
    path: Option<PathBuf>,
    header: FileHeader,
    chunks: Vec<ChunkInfo>,
    recovery: Option<Recovery>,
    problems: Vec<Problem>,
    clean_close: bool,
    metadata: Option<Arc<SessionMetadata>>,
    plan: Option<CodecPlan>,
    strings: StringTable,
    clocks: Vec<ClockSample>,
    loss: Option<LossCounters>,
    thread_names: std::collections::BTreeMap<u32, String>,
}

impl Reader {
    /// Opens and indexes a file (memory-mapped).
    pub fn open(path: &Path) -> Result<Reader, FormatError> {
        Reader::open_with(path, |_| ()).map(|(r, ())| r)
    }

    /// [`Reader::open`], running `during` while the side chunks (metadata, strings, clocks, loss) decode. `during`
    /// sees the chunk index but no side data: it may decode activity chunks written with the record codec
    /// ([`Reader::decode_activity`] needs nothing else for them), which lets a converter decompress its first
    /// records while the rest of the file's preamble is read.
    pub fn open_with<R: Send>(
        path: &Path,
        during: impl FnOnce(&Reader) -> R + Send,
    ) -> Result<(Reader, R), FormatError> {
        let mut r = Reader::index(path)?;
        let (side, out) = rayon::join(|| r.read_side_chunks(), || during(&r));
        r.install_side_chunks(side);
        Ok((r, out))
    }

    /// Maps and indexes a file, without decoding its side chunks.
    fn index(path: &Path) -> Result<Reader, FormatError> {
        let io = |err| FormatError::Io { path: path.to_path_buf(), err };
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        // A directory opens on Linux, and mapping it fails with "No such device": say what it is instead.
        if meta.is_dir() {
            return Err(io(std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory, not a recording")));
        }
        let len = meta.len();
        let data = if len == 0 {
            Data::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only. If another process truncates the file while we read it, access past
            // the new end faults; recorders only ever append, so a file being recorded is safe to read.
            Data::Mapped(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
        };
        let mut r = Reader::from_data(data)?;
        r.path = Some(path.to_path_buf());
        Ok(r)
    }

    /// Reads a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Reader, FormatError> {
        let mut r = Reader::from_data(Data::Owned(bytes))?;
        let side = r.read_side_chunks();
        r.install_side_chunks(side);
        Ok(r)
    }

    /// The index of the chunks in `data`; side chunks not yet decoded.
    fn from_data(data: Data) -> Result<Reader, FormatError> {
        let bytes = data.bytes();
        let header = FileHeader::decode(bytes)?;
        let mut problems = Vec::new();
        let (chunks, recovery, clean_close) = match read_footer(bytes) {
            Ok((chunks, clean, mut p)) => {
                problems.append(&mut p);
                (chunks, None, clean)
            }
            Err(reason) => {
                let (chunks, lost_bytes, mut p) = scan(bytes);
                if Trailer::find(bytes).is_some() {
                    problems.push(Problem::FooterUnusable { reason: reason.clone() });
                }
                problems.append(&mut p);
                (chunks, Some(Recovery { reason, lost_bytes }), false)
            }
        };
        let chunks = check_sequence(chunks, &mut problems);
        let r = Reader {
            data,
            path: None,
            header,
            chunks,
            recovery,
            problems,
            clean_close,
            metadata: None,
            plan: None,
            strings: StringTable::default(),
            clocks: Vec::new(),
            loss: None,
            thread_names: Default::default(),
        };
        Ok(r)
    }

    /// Decodes the small non-record chunks (metadata, strings, clocks, loss), each chunk its own task: the
    /// session metadata and the string tables are each a large share of opening a small recording.
    fn read_side_chunks(&self) -> SideChunks {
        let bytes = self.data.bytes();
        // The recorder writes the session metadata when it starts and again, complete, when it closes; the last
        // readable one wins. Only the newest is decoded alongside the others; older ones only if it is damaged
        // (~90 KB of flatbuffers each, a few percent of converting a small recording).
        let metadata_chunks: Vec<&ChunkInfo> =
            self.chunks.iter().filter(|c| c.chunk_type() == ChunkType::Metadata).collect();
        let others: Vec<&ChunkInfo> = self
            .chunks
            .iter()
            .filter(|c| {
                matches!(c.chunk_type(), ChunkType::Strings | ChunkType::Clocks | ChunkType::Loss | ChunkType::Threads)
            })
            .collect();
        let damaged = |c: &ChunkInfo, error| Problem::DamagedChunk {
            offset: c.offset,
            seq: c.header.seq,
            chunk_type: c.chunk_type(),
            records: 0,
            error,
        };
        let newest_metadata = || -> (Option<SessionMetadata>, Vec<Problem>) {
            let mut problems = Vec::new();
            for c in metadata_chunks.iter().rev() {
                match chunk_payload(bytes, c).and_then(|raw| SessionMetadata::from_bytes(&raw)) {
                    Ok(m) => return (Some(m), problems),
                    Err(error) => problems.push(damaged(c, error)),
                }
            }
            (None, problems)
        };
        let decode_other = |c: &&ChunkInfo| -> Result<SideChunk, Problem> {
            let raw = chunk_payload(bytes, c).map_err(|e| damaged(c, e))?;
            match c.chunk_type() {
                ChunkType::Strings => meta::strings_from_bytes(&raw).map(SideChunk::Strings),
                ChunkType::Clocks => meta::clocks_from_bytes(&raw).map(SideChunk::Clocks),
                ChunkType::Threads => meta::thread_names_from_bytes(&raw).map(SideChunk::Threads),
                _ => LossCounters::from_bytes(&raw).map(SideChunk::Loss),
            }
            .map_err(|e| damaged(c, e))
        };
        let ((metadata, metadata_problems), decoded) =
            rayon::join(newest_metadata, || others.par_iter().map(decode_other).collect::<Vec<_>>());
        SideChunks { metadata, metadata_problems, decoded }
    }

    /// Installs what [`Reader::read_side_chunks`] decoded, in file order.
    fn install_side_chunks(&mut self, side: SideChunks) {
        let mut damaged = side.metadata_problems;
        let mut strings = Vec::new();
        for d in side.decoded {
            match d {
                Ok(SideChunk::Strings(entries)) => strings.extend(entries),
                Ok(SideChunk::Clocks(samples)) => self.clocks.extend(samples),
                Ok(SideChunk::Loss(l)) => self.loss = Some(l),
                // In file order: a later name for a tid supersedes an earlier one.
                Ok(SideChunk::Threads(names)) => self.thread_names.extend(names),
                Err(p) => damaged.push(p),
            }
        }
        self.problems.extend(damaged);
        self.strings = StringTable::from_entries(strings);
        self.metadata = side.metadata.map(Arc::new);
        self.plan = self.layouts().map(CodecPlan::new);
        self.clocks.sort_by_key(|c| c.cupti_ns);
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    pub fn file_len(&self) -> u64 {
        self.data.bytes().len() as u64
    }

    /// Every readable chunk, in file order (the footer chunk itself excluded).
    pub fn chunks(&self) -> &[ChunkInfo] {
        &self.chunks
    }

    pub fn activity_chunks(&self) -> impl Iterator<Item = &ChunkInfo> {
        self.chunks.iter().filter(|c| c.chunk_type() == ChunkType::Activity)
    }

    /// `Some` when the file had no usable footer and was read by scanning.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.recovery.as_ref()
    }

    /// True when the writer closed the file (footer written).
    pub fn clean_close(&self) -> bool {
        self.clean_close
    }

    /// Problems found while opening. Damaged activity chunks are found when decoding (see [`Reader::verify`]).
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    pub fn metadata(&self) -> Option<&SessionMetadata> {
        self.metadata.as_deref()
    }

    /// The session metadata, shared (it outlives the reader in a converted trace without being copied).
    pub fn metadata_shared(&self) -> Option<Arc<SessionMetadata>> {
        self.metadata.clone()
    }

    /// The record layouts the file's records were written with.
    pub fn layouts(&self) -> Option<&LayoutTable> {
        self.metadata.as_ref()?.layouts.as_ref()
    }

    pub fn strings(&self) -> &StringTable {
        &self.strings
    }

    /// Clock samples, ordered by CUPTI time.
    pub fn clocks(&self) -> &[ClockSample] {
        &self.clocks
    }

    /// OS thread names by tid (the last seen for each), from the `threads` chunks (format 1.1; empty before).
    pub fn thread_names(&self) -> &std::collections::BTreeMap<u32, String> {
        &self.thread_names
    }

    /// The PC sample collections of the file, in file order, and the chunks that failed.
    pub fn pc_samples(&self) -> (Vec<crate::source::PcSamples>, Vec<Problem>) {
        self.decode_each(ChunkType::PcSamples, crate::source::PcSamples::from_bytes)
    }

    /// The counter samples of the file (`counters` chunks), in file order, and the chunks that failed.
    pub fn counter_samples(&self) -> (Vec<crate::counters::CounterSamples>, Vec<Problem>) {
        self.decode_each(ChunkType::Counters, crate::counters::CounterSamples::from_bytes)
    }

    /// The graph events of the file (`graphs` chunks), in file order, and the chunks that failed.
    pub fn graph_events(&self) -> (Vec<crate::graphs::GraphEvents>, Vec<Problem>) {
        self.decode_each(ChunkType::Graphs, crate::graphs::GraphEvents::from_bytes)
    }

    /// Every chunk of one type through `decode`, in parallel, in file order.
    fn decode_each<T: Send>(
        &self,
        chunk_type: ChunkType,
        decode: impl Fn(&[u8]) -> Result<T, ChunkError> + Sync,
    ) -> (Vec<T>, Vec<Problem>) {
        let chunks: Vec<&ChunkInfo> = self.chunks.iter().filter(|c| c.chunk_type() == chunk_type).collect();
        let results: Vec<Result<T, Problem>> = chunks
            .par_iter()
            .map(|c| {
                chunk_payload(self.data.bytes(), c).and_then(|raw| decode(&raw)).map_err(|error| {
                    Problem::DamagedChunk { offset: c.offset, seq: c.header.seq, chunk_type, records: 0, error }
                })
            })
            .collect();
        let (mut ok, mut bad) = (Vec::new(), Vec::new());
        for r in results {
            match r {
                Ok(v) => ok.push(v),
                Err(p) => bad.push(p),
            }
        }
        (ok, bad)
    }

    /// The last loss report in the file.
    pub fn loss(&self) -> Option<&LossCounters> {
        self.loss.as_ref()
    }

    /// The stored payload of a chunk, checked against its checksum and decompressed (not record-decoded).
    pub fn payload(&self, chunk: &ChunkInfo) -> Result<Vec<u8>, ChunkError> {
        chunk_payload(self.data.bytes(), chunk)
    }

    /// Decodes one activity chunk into records grouped by kind.
    pub fn decode_activity(&self, chunk: &ChunkInfo) -> Result<DecodedBuffer, ChunkError> {
        let bytes = self.data.bytes();
        let stored = stored_payload(bytes, chunk)?;
        match chunk.header.codec {
            Codec::Records => {
                let d = codec::decode(stored, chunk.header.raw_len)?;
                if let Some(plan) = &self.plan {
                    plan.check_strides(&d)?;
                }
                Ok(d)
            }
            Codec::None | Codec::Zstd => {
                let raw = chunk_payload(bytes, chunk)?;
                let plan = self.plan.as_ref().ok_or(ChunkError::NoLayouts)?;
                Ok(codec::group_raw(&raw, plan))
            }
            Codec::Unknown(c) => Err(ChunkError::UnknownCodec(c)),
        }
    }

    /// Checks a decoded buffer's record groups against the file's layouts (kinds known, record sizes equal).
    /// [`Reader::decode_activity`] does this itself once the metadata is read; a buffer decoded while the reader
    /// was opening ([`Reader::open_with`]) is checked with this.
    pub fn check_strides(&self, d: &DecodedBuffer) -> Result<(), ChunkError> {
        self.plan.as_ref().map_or(Ok(()), |plan| plan.check_strides(d))
    }

    /// Decodes every activity chunk in parallel and maps each result with `f`, in file order.
    pub fn par_map_activity<R, F>(&self, f: F) -> Vec<R>
    where
        R: Send,
        F: Fn(&ChunkInfo, Result<DecodedBuffer, ChunkError>) -> R + Sync + Send,
    {
        let chunks: Vec<&ChunkInfo> = self.activity_chunks().collect();
        chunks.par_iter().map(|c| f(c, self.decode_activity(c))).collect()
    }

    /// Checks every chunk's payload (checksum, and decoding for activity chunks) in parallel, returning a problem
    /// for each damaged one, and the record counts per kind of the good ones.
    pub fn verify(&self) -> Verification {
        type Counts = (Vec<(u32, u32)>, u64, Option<u32>);
        let results: Vec<Result<Counts, Problem>> = self
            .chunks
            .par_iter()
            .map(|c| {
                let damaged = |error| Problem::DamagedChunk {
                    offset: c.offset,
                    seq: c.header.seq,
                    chunk_type: c.chunk_type(),
                    records: c.header.record_count,
                    error,
                };
                match c.chunk_type() {
                    ChunkType::Activity => self
                        .decode_activity(c)
                        .map(|d| {
                            let unknown =
                                (d.tail.len() >= 4).then(|| u32::from_le_bytes(d.tail[..4].try_into().unwrap()));
                            (d.groups.iter().map(|g| (g.kind, g.len() as u32)).collect(), d.tail.len() as u64, unknown)
                        })
                        .map_err(damaged),
                    _ => stored_payload(self.data.bytes(), c).map(|_| (Vec::new(), 0, None)).map_err(damaged),
                }
            })
            .collect();
        let mut v = Verification::default();
        let mut counts: HashMap<u32, u64> = HashMap::new();
        for (c, r) in self.chunks.iter().zip(results) {
            match r {
                Ok((kc, unparsed, unknown)) => {
                    if c.chunk_type() == ChunkType::Activity {
                        v.good_activity_chunks += 1;
                    }
                    v.unparsed_bytes += unparsed;
                    if let Some(k) = unknown
                        && !v.unknown_kinds.contains(&k)
                    {
                        v.unknown_kinds.push(k);
                    }
                    for (k, n) in kc {
                        *counts.entry(k).or_default() += n as u64;
                    }
                }
                Err(p) => {
                    if !self.problems.contains(&p) {
                        v.damaged.push(p);
                    }
                }
            }
        }
        v.records_per_kind = counts.into_iter().collect();
        v.records_per_kind.sort();
        v.unknown_kinds.sort();
        v
    }
}

/// The outcome of [`Reader::verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verification {
    pub damaged: Vec<Problem>,
    pub good_activity_chunks: usize,
    /// (kind, records) over the chunks that decoded.
    pub records_per_kind: Vec<(u32, u64)>,
    /// Bytes of activity buffers after a record whose kind has no layout: kept in the file, not parsed.
    pub unparsed_bytes: u64,
    /// The kinds of the records that stopped parsing (no layout for them in the file's table).
    pub unknown_kinds: Vec<u32>,
}

fn stored_payload<'a>(bytes: &'a [u8], chunk: &ChunkInfo) -> Result<&'a [u8], ChunkError> {
    check_claims(&chunk.header)?;
    let start = chunk.offset as usize + CHUNK_HEADER_LEN;
    let end = start.checked_add(chunk.header.stored_len as usize).ok_or(ChunkError::Truncated)?;
    let stored = bytes.get(start..end).ok_or(ChunkError::Truncated)?;
    if !payload_ok(&chunk.header, stored) {
        return Err(ChunkError::Checksum);
    }
    Ok(stored)
}

fn chunk_payload(bytes: &[u8], chunk: &ChunkInfo) -> Result<Vec<u8>, ChunkError> {
    let stored = stored_payload(bytes, chunk)?;
    let raw = match chunk.header.codec {
        Codec::None => stored.to_vec(),
        Codec::Zstd => crate::codec::decompress(stored, chunk.header.raw_len as usize)?,
        Codec::Records => {
            return Err(ChunkError::Malformed("record codec on a non-activity chunk".into()));
        }
        Codec::Unknown(c) => return Err(ChunkError::UnknownCodec(c)),
    };
    if raw.len() as u64 != chunk.header.raw_len {
        return Err(ChunkError::SizeMismatch { expected: chunk.header.raw_len, actual: raw.len() as u64 });
    }
    Ok(raw)
}

/// Reads the chunk list from the footer. Any inconsistency makes the caller fall back to scanning.
fn read_footer(bytes: &[u8]) -> Result<(Vec<ChunkInfo>, bool, Vec<Problem>), String> {
    let trailer = Trailer::find(bytes).ok_or_else(|| "no trailer: the writer never closed it".to_string())?;
    let fo = trailer.footer_offset as usize;
    let fh = ChunkHeader::decode(&bytes[fo..]).map_err(|e| format!("footer chunk header: {e:?}"))?;
    if fh.chunk_type != ChunkType::Footer || fh.codec != Codec::None {
        return Err("the trailer does not point at a footer chunk".into());
    }
    let info = ChunkInfo { offset: fo as u64, header: fh, kind_counts: Vec::new() };
    let payload = stored_payload(bytes, &info).map_err(|e| format!("footer: {e}"))?;
    let opts =
        flatbuffers::VerifierOptions { max_tables: 100_000_000, max_apparent_size: 1 << 40, ..Default::default() };
    let footer = flatbuffers::root_with_opts::<fb::FooterIndex>(&opts, payload).map_err(|e| format!("footer: {e}"))?;
    let entries = footer.chunks().ok_or("footer lists no chunks")?;
    let counts = footer.kind_counts();
    let mut chunks = Vec::with_capacity(entries.len());
    let mut problems = Vec::new();
    let mut expected_next = FILE_HEADER_LEN as u64;
    for e in entries.iter() {
        if e.offset() != expected_next {
            return Err(format!(
                "footer lists a chunk at byte {} where one should start at {expected_next}",
                e.offset()
            ));
        }
        let at = e.offset() as usize;
        let header = match bytes.get(at..at + CHUNK_HEADER_LEN).map(ChunkHeader::decode) {
            Some(Ok(h)) => h,
            _ => {
                return Err(format!("chunk header at byte {at} does not match the footer"));
            }
        };
        if header.seq != e.seq() || header.stored_len != e.stored_len() || header.chunk_type.to_u8() != e.chunk_type() {
            return Err(format!("chunk header at byte {at} does not match the footer"));
        }
        expected_next = e.offset() + header.span();
        if expected_next > trailer.footer_offset {
            return Err("footer lists chunks past its own position".into());
        }
        let kind_counts = match counts {
            Some(c) => {
                let (s, n) = (e.kind_counts_start() as usize, e.kind_counts_len() as usize);
                if s + n > c.len() {
                    return Err("footer kind counts out of range".into());
                }
                (s..s + n).map(|i| (c.get(i).kind(), c.get(i).count())).collect()
            }
            None => Vec::new(),
        };
        if let ChunkType::Unknown(t) = header.chunk_type {
            problems.push(Problem::UnknownChunkType { offset: e.offset(), seq: header.seq, chunk_type: t });
            continue;
        }
        if let Err(error) = check_claims(&header) {
            problems.push(Problem::DamagedChunk {
                offset: e.offset(),
                seq: header.seq,
                chunk_type: header.chunk_type,
                records: 0,
                error,
            });
            continue;
        }
        chunks.push(ChunkInfo { offset: e.offset(), header, kind_counts });
    }
    if expected_next != trailer.footer_offset {
        return Err("footer does not account for every byte before it".into());
    }
    Ok((chunks, footer.clean_close(), problems))
}

/// Finds the next offset (8-aligned, from `from`) where a valid chunk header starts.
fn next_header(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from.next_multiple_of(8);
    while at + CHUNK_HEADER_LEN <= bytes.len() {
        if bytes[at..at + 4] == CHUNK_MAGIC && ChunkHeader::decode(&bytes[at..at + CHUNK_HEADER_LEN]).is_ok() {
            return Some(at);
        }
        at += 8;
    }
    None
}

/// Finds the next offset (8-aligned, from `from`) where a whole chunk starts: a valid header with plausible claims
/// and a payload inside the file that passes its checksum. Where a chunk's own header lies about its length, the
/// scan picks up again here.
fn next_whole_chunk(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(h_at) = next_header(bytes, at) {
        if let Ok(h) = ChunkHeader::decode(&bytes[h_at..h_at + CHUNK_HEADER_LEN]) {
            let start = h_at + CHUNK_HEADER_LEN;
            let whole = start
                .checked_add(h.stored_len as usize)
                .and_then(|end| bytes.get(start..end))
                .is_some_and(|payload| check_claims(&h).is_ok() && payload_ok(&h, payload));
            if whole {
                return Some(h_at);
            }
        }
        at = h_at + 8;
    }
    None
}

/// Keeps the first chunk of each sequence number (reporting the others), and reports sequence numbers that no
/// chunk and no other problem accounts for. The writer numbers chunks 0, 1, 2... in file order, the footer last.
fn check_sequence(chunks: Vec<ChunkInfo>, problems: &mut Vec<Problem>) -> Vec<ChunkInfo> {
    let mut first: HashMap<u32, u64> = HashMap::new();
    let mut kept = Vec::with_capacity(chunks.len());
    for c in chunks {
        match first.get(&c.header.seq) {
            Some(&first_offset) => {
                problems.push(Problem::DuplicateChunk { offset: c.offset, seq: c.header.seq, first_offset })
            }
            None => {
                first.insert(c.header.seq, c.offset);
                kept.push(c);
            }
        }
    }
    let mut known: Vec<u32> = first.keys().copied().collect();
    for p in problems.iter() {
        match p {
            Problem::DamagedChunk { seq, .. }
            | Problem::TruncatedChunk { seq, .. }
            | Problem::UnknownChunkType { seq, .. } => known.push(*seq),
            _ => {}
        }
    }
    known.sort_unstable();
    known.dedup();
    let mut expected = 0u32;
    for &seq in &known {
        if seq > expected {
            problems.push(Problem::MissingChunks { first_seq: expected, count: seq - expected });
        }
        expected = seq.saturating_add(1);
    }
    kept
}

/// Reads a file chunk by chunk from the start: every complete chunk with a valid checksum is kept, everything
/// else is reported. A chunk whose header cannot be trusted (its payload fails the checksum, its claims are
/// implausible, or its length runs past the end while whole chunks follow) is skipped up to the next whole chunk,
/// so one bad header never hides the chunks after it. Returns the chunks, the lost bytes and the problems.
fn scan(bytes: &[u8]) -> (Vec<ChunkInfo>, u64, Vec<Problem>) {
    let mut chunks = Vec::new();
    let mut problems = Vec::new();
    let mut lost = 0u64;
    let mut off = FILE_HEADER_LEN;
    let len = bytes.len();
    let mut after_footer = false;
    while off < len {
        let rest = len - off;
        // What follows a footer chunk is the trailer (perhaps damaged or cut): no records live there.
        if after_footer && rest <= TRAILER_LEN {
            break;
        }
        if rest < CHUNK_HEADER_LEN {
            problems.push(Problem::TruncatedHeader { offset: off as u64, len: rest as u64 });
            lost += rest as u64;
            break;
        }
        let Ok(h) = ChunkHeader::decode(&bytes[off..off + CHUNK_HEADER_LEN]) else {
            let next = next_header(bytes, off + 8).unwrap_or(len);
            problems.push(Problem::UnreadableBytes { offset: off as u64, len: (next - off) as u64 });
            lost += (next - off) as u64;
            after_footer = false;
            off = next;
            continue;
        };
        let damaged = |error| Problem::DamagedChunk {
            offset: off as u64,
            seq: h.seq,
            chunk_type: h.chunk_type,
            records: h.record_count,
            error,
        };
        let end = (off + CHUNK_HEADER_LEN).saturating_add(h.stored_len as usize);
        let fault = if let Err(e) = check_claims(&h) {
            Some(e)
        } else if end > len {
            None
        } else if !payload_ok(&h, &bytes[off + CHUNK_HEADER_LEN..end]) {
            Some(ChunkError::Checksum)
        } else {
            after_footer = h.chunk_type == ChunkType::Footer;
            match h.chunk_type {
                ChunkType::Footer => {}
                ChunkType::Unknown(t) => {
                    problems.push(Problem::UnknownChunkType { offset: off as u64, seq: h.seq, chunk_type: t })
                }
                _ => chunks.push(ChunkInfo { offset: off as u64, header: h, kind_counts: Vec::new() }),
            }
            off += (h.span() as usize).min(rest);
            continue;
        };
        let next = next_whole_chunk(bytes, off + 8);
        match (fault, next) {
            // The file ends inside this chunk: it was being written when the recording stopped.
            (None, None) => {
                problems.push(Problem::TruncatedChunk {
                    offset: off as u64,
                    seq: h.seq,
                    chunk_type: h.chunk_type,
                    records: h.record_count,
                    missing_bytes: (end - len) as u64,
                });
                lost += rest as u64;
                break;
            }
            (fault, next) => {
                let error = fault.unwrap_or_else(|| {
                    ChunkError::Implausible(format!("{} bytes claimed past the end of the file", h.stored_len))
                });
                problems.push(damaged(error));
                let next = next.unwrap_or(len);
                lost += (next - off) as u64;
                after_footer = false;
                off = next;
            }
        }
    }
    (chunks, lost, problems)
}

#[cfg(test)]
mod tests {
    use super::StringTable;

    #[test]
    fn a_reused_pointer_resolves_to_the_text_of_its_time() {
        let t = StringTable::from_entries([
            (0x10, 3, "first".to_string()),
            (0x20, 3, "other".to_string()),
            (0x10, 9, "reloaded".to_string()),
            (0x10, 9, "rewritten".to_string()),
        ]);
        assert_eq!(t.texts(), ["first", "other", "reloaded", "rewritten"]);
        // Before any entry, at and after the first, at the second (the later entry of equal seq wins), after.
        let at = |seq| t.resolve(0x10, seq);
        assert_eq!(
            [at(0), at(3), at(8), at(9), at(50)],
            [Some("first"), Some("first"), Some("first"), Some("rewritten"), Some("rewritten")]
        );
        assert_eq!(t.resolve_id(0x20, 100), Some(1));
        assert_eq!(t.resolve(0x30, 5), None);
    }
}
