//! Reads `.cutr` files: the footer index in place from an mmap, or, for a file that was never closed (killed,
//! disk full) or whose footer is damaged, by scanning chunk headers from the start. Chunks are checked against
//! their CRC-32C before use; a damaged chunk is skipped and reported, never trusted.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cutr_schema::LayoutTable;
use rayon::prelude::*;

use crate::codec::{self, CodecPlan, DecodedBuffer};
use crate::container::{CHUNK_HEADER_LEN, ChunkHeader, ChunkType, Codec, FileHeader, Trailer, payload_ok};
use crate::error::{ChunkError, FormatError};
use crate::limits::check_claims;
use crate::meta::{self, ClockSample, LossCounters, SessionMetadata};

mod cubins;
mod data;
mod locate;
mod problem;
mod strings;
pub use cubins::Cubin;
use data::Data;
use locate::{check_sequence, read_footer, scan};
pub use problem::Problem;
pub use strings::StringTable;

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

/// How a file without a usable footer was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Why the footer could not be used.
    pub reason: String,
    /// Bytes that belong to no readable chunk.
    pub lost_bytes: u64,
}

/// A decoded side chunk other than the metadata.
enum SideChunk {
    Strings(strings::StringsChunk),
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
        // The index reads a header in every chunk (a window of the file behind a scan): its pages are let go as
        // it goes, so that opening a file costs its index, not its size.
        let release = |start: usize, len: usize| data.release(start, len);
        let (chunks, recovery, clean_close) = match read_footer(bytes, &release) {
            Ok((chunks, clean, mut p)) => {
                problems.append(&mut p);
                (chunks, None, clean)
            }
            Err(reason) => {
                let (chunks, lost_bytes, mut p) = scan(bytes, &release);
                if Trailer::find(bytes).is_some() {
                    problems.push(Problem::FooterUnusable { reason: reason.clone() });
                }
                problems.append(&mut p);
                (chunks, Some(Recovery { reason, lost_bytes }), false)
            }
        };
        let chunks = check_sequence(chunks, &mut problems);
        data.release(0, bytes.len());
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
                let metadata = chunk_payload(bytes, c).and_then(|raw| SessionMetadata::from_bytes(&raw));
                self.release_pages(c);
                match metadata {
                    Ok(m) => return (Some(m), problems),
                    Err(error) => problems.push(damaged(c, error)),
                }
            }
            (None, problems)
        };
        let decode_other = |c: &&ChunkInfo| -> Result<SideChunk, Problem> {
            let raw = chunk_payload(bytes, c);
            // Decompressed and copied out: the chunk's pages can go (a long run's strings are hundreds of MB).
            self.release_pages(c);
            let raw = raw.map_err(|e| damaged(c, e))?;
            match c.chunk_type() {
                ChunkType::Strings => strings::read_chunk(&raw).map(SideChunk::Strings),
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
                Ok(SideChunk::Strings(chunk)) => strings.push(chunk),
                Ok(SideChunk::Clocks(samples)) => self.clocks.extend(samples),
                Ok(SideChunk::Loss(l)) => self.loss = Some(l),
                // In file order: a later name for a tid supersedes an earlier one.
                Ok(SideChunk::Threads(names)) => self.thread_names.extend(names),
                Err(p) => damaged.push(p),
            }
        }
        self.problems.extend(damaged);
        self.strings = StringTable::from_chunks(strings);
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

    /// Lets the kernel take back the pages of `chunk`'s bytes in the mapped file, once the caller has decoded it
    /// and holds nothing borrowed from them: a reader that walks a file chunk by chunk (`stats --stream` over a
    /// recording of a billion records) otherwise keeps every page it read resident, the whole file by the end.
    /// Reading the chunk again faults its pages back in from the page cache. A no-op for a file read into memory.
    pub fn release_pages(&self, chunk: &ChunkInfo) {
        // The kernel maps the aligned 64 KiB around each page read (fault-around), so reading a chunk of a few KB
        // (a strings chunk between two activity chunks) leaves its neighbours' pages resident: the window is let go
        // whole. A neighbour being read meanwhile faults its pages back in.
        const FAULT_AROUND: usize = 64 << 10;
        let len = self.data.bytes().len();
        let start = (chunk.offset as usize).min(len) & !(FAULT_AROUND - 1);
        let end = (chunk.offset as usize)
            .saturating_add(CHUNK_HEADER_LEN)
            .saturating_add(chunk.header.stored_len as usize)
            .min(len)
            .next_multiple_of(FAULT_AROUND)
            .min(len);
        self.data.release(start, end.saturating_sub(start));
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
                    ChunkType::Activity => {
                        let counts = self
                            .decode_activity(c)
                            .map(|d| {
                                let unknown =
                                    (d.tail.len() >= 4).then(|| u32::from_le_bytes(d.tail[..4].try_into().unwrap()));
                                (
                                    d.groups.iter().map(|g| (g.kind, g.len() as u32)).collect(),
                                    d.tail.len() as u64,
                                    unknown,
                                )
                            })
                            .map_err(damaged);
                        // Only the counts are kept: the chunk's pages can go (`info` of a billion records).
                        self.release_pages(c);
                        counts
                    }
                    _ => {
                        let checked = stored_payload(self.data.bytes(), c).map(|_| (Vec::new(), 0, None));
                        self.release_pages(c);
                        checked.map_err(damaged)
                    }
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
