//! Appends chunks to a `.cutr` file and writes the footer index at close.
//!
//! Every chunk goes out in one `write_all` of header + payload, and nothing already written is ever rewritten, so
//! a process killed at any moment leaves a file whose complete chunks are all readable (see `reader`'s recovery).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use cutr_schema::fb;

use crate::codec::{BufferStats, CodecPlan, Encoder};
use crate::container::{
    CHUNK_HEADER_LEN, ChunkHeader, ChunkType, Codec, FORMAT_MAJOR, FORMAT_MINOR, FileHeader, Trailer, align_up,
    payload_crc,
};
use crate::error::FormatError;
use crate::meta::{self, ClockSample, LossCounters, SessionMetadata};

#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// zstd level for activity and metadata chunks (3 = zstd's default, a good speed/size balance).
    pub zstd_level: i32,
    /// Random when `None`.
    pub file_id: Option<[u8; 16]>,
    /// Now when `None`.
    pub created_unix_ns: Option<u64>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions { zstd_level: 3, file_id: None, created_unix_ns: None }
    }
}

/// An activity buffer encoded and ready to append (see [`ActivityEncoder`]).
#[derive(Clone, Debug)]
pub struct EncodedActivity {
    pub payload: Vec<u8>,
    pub raw_len: u64,
    pub stats: BufferStats,
}

/// Encodes activity buffers independently of a writer, so several threads can encode while one appends.
pub struct ActivityEncoder {
    plan: CodecPlan,
    encoder: Encoder,
}

impl ActivityEncoder {
    pub fn new(layouts: &cutr_schema::LayoutTable, zstd_level: i32) -> Self {
        ActivityEncoder { plan: CodecPlan::new(layouts), encoder: Encoder::new(zstd_level) }
    }

    pub fn encode(&mut self, buffer: &[u8]) -> EncodedActivity {
        let (payload, stats) = self.encoder.encode(buffer, &self.plan);
        EncodedActivity { payload, raw_len: buffer.len() as u64, stats }
    }

    pub fn plan(&self) -> &CodecPlan {
        &self.plan
    }
}

struct IndexEntry {
    offset: u64,
    header: ChunkHeader,
    kind_counts: Vec<(u32, u32)>,
}

/// Writes a `.cutr` file. Call [`Writer::write_metadata`] before the first activity buffer, and
/// [`Writer::finish`] to write the footer; a file that is never finished is still readable up to its last
/// complete chunk.
pub struct Writer<W: Write> {
    out: W,
    offset: u64,
    seq: u32,
    index: Vec<IndexEntry>,
    encoder: Option<ActivityEncoder>,
    zstd_level: i32,
    total_records: u64,
}

fn now_unix_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn random_id() -> [u8; 16] {
    // Unique enough to tell files apart: time, pid and a stack address, mixed by xorshift.
    let local = 0u8;
    let mut x = now_unix_ns() ^ ((std::process::id() as u64) << 32) ^ (&local as *const u8 as u64) | 1;
    let mut id = [0u8; 16];
    for chunk in id.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    id
}

impl Writer<File> {
    /// Creates (truncates) `path` and writes the file header.
    pub fn create(path: &Path, options: WriterOptions) -> Result<Writer<File>, FormatError> {
        let f = File::create(path).map_err(|err| FormatError::Io { path: path.to_path_buf(), err })?;
        Writer::new(f, options)
    }

    /// Flushes and asks the OS to put the file on disk.
    pub fn sync(&mut self) -> Result<(), FormatError> {
        self.out.flush().map_err(FormatError::Write)?;
        self.out.sync_data().map_err(FormatError::Write)
    }
}

impl<W: Write> Writer<W> {
    pub fn new(mut out: W, options: WriterOptions) -> Result<Writer<W>, FormatError> {
        let header = FileHeader {
            major: FORMAT_MAJOR,
            minor: FORMAT_MINOR,
            flags: 0,
            file_id: options.file_id.unwrap_or_else(random_id),
            created_unix_ns: options.created_unix_ns.unwrap_or_else(now_unix_ns),
        };
        out.write_all(&header.encode()).map_err(FormatError::Write)?;
        Ok(Writer {
            out,
            offset: crate::container::FILE_HEADER_LEN as u64,
            seq: 0,
            index: Vec::new(),
            encoder: None,
            zstd_level: options.zstd_level,
            total_records: 0,
        })
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// The sequence number the next chunk will get.
    pub fn next_seq(&self) -> u32 {
        self.seq
    }

    pub fn records_written(&self) -> u64 {
        self.total_records
    }

    #[allow(clippy::too_many_arguments)]
    fn append(
        &mut self,
        chunk_type: ChunkType,
        codec: Codec,
        payload: &[u8],
        raw_len: u64,
        record_count: u32,
        t: (u64, u64),
        kind_counts: Vec<(u32, u32)>,
    ) -> Result<u32, FormatError> {
        let header = ChunkHeader {
            chunk_type,
            codec,
            flags: 0,
            seq: self.seq,
            record_count,
            stored_len: payload.len() as u64,
            raw_len,
            t_min: t.0,
            t_max: t.1,
            payload_crc: payload_crc(payload),
        };
        let span = header.span() as usize;
        let mut buf = Vec::with_capacity(span);
        buf.extend_from_slice(&header.encode());
        buf.extend_from_slice(payload);
        buf.resize(span, 0);
        self.out.write_all(&buf).map_err(FormatError::Write)?;
        self.index.push(IndexEntry { offset: self.offset, header, kind_counts });
        self.offset += span as u64;
        self.seq += 1;
        self.total_records += record_count as u64;
        Ok(header.seq)
    }

    fn append_zstd(&mut self, chunk_type: ChunkType, raw: &[u8]) -> Result<u32, FormatError> {
        let z = zstd::bulk::compress(raw, self.zstd_level).map_err(FormatError::Write)?;
        self.append(chunk_type, Codec::Zstd, &z, raw.len() as u64, 0, (0, 0), Vec::new())
    }

    /// Writes session metadata; its layout table is used to encode the activity buffers that follow.
    pub fn write_metadata(&mut self, meta: &SessionMetadata) -> Result<u32, FormatError> {
        if let Some(layouts) = &meta.layouts {
            self.encoder = Some(ActivityEncoder::new(layouts, self.zstd_level));
        }
        self.append_zstd(ChunkType::Metadata, &meta.to_bytes())
    }

    /// Encodes and appends one CUPTI activity buffer (the `validSize` bytes CUPTI completed).
    pub fn write_activity(&mut self, buffer: &[u8]) -> Result<BufferStats, FormatError> {
        let enc = self.encoder.as_mut().ok_or(FormatError::NoLayouts)?.encode(buffer);
        let stats = enc.stats.clone();
        self.append_encoded(enc)?;
        Ok(stats)
    }

    /// Appends a buffer encoded by an [`ActivityEncoder`] built from the same layout table.
    pub fn append_encoded(&mut self, enc: EncodedActivity) -> Result<u32, FormatError> {
        let s = &enc.stats;
        self.append(
            ChunkType::Activity,
            Codec::Records,
            &enc.payload,
            enc.raw_len,
            s.records,
            (s.t_min, s.t_max),
            s.per_kind.clone(),
        )
    }

    /// The plan activity buffers are encoded with (after [`Writer::write_metadata`]).
    pub fn codec_plan(&self) -> Option<&CodecPlan> {
        self.encoder.as_ref().map(|e| e.plan())
    }

    /// Appends string-table entries (host pointer, text). They apply to activity chunks written after them.
    pub fn write_strings(&mut self, entries: &[(u64, &str)]) -> Result<u32, FormatError> {
        let bytes = meta::strings_to_bytes(self.seq, entries);
        self.append_zstd(ChunkType::Strings, &bytes)
    }

    pub fn write_clocks(&mut self, samples: &[ClockSample]) -> Result<u32, FormatError> {
        let bytes = meta::clocks_to_bytes(samples);
        self.append(ChunkType::Clocks, Codec::None, &bytes, bytes.len() as u64, 0, (0, 0), Vec::new())
    }

    /// OS thread names `(tid, name)` first seen or changed since the last call.
    pub fn write_thread_names(&mut self, names: &[(u32, String)]) -> Result<u32, FormatError> {
        let bytes = meta::thread_names_to_bytes(names);
        self.append(ChunkType::Threads, Codec::None, &bytes, bytes.len() as u64, 0, (0, 0), Vec::new())
    }

    /// A cubin, zstd-compressed (the caller writes each CRC once).
    pub fn write_cubin(&mut self, cubin: &crate::source::CubinBlob) -> Result<u32, FormatError> {
        self.append_zstd(ChunkType::Blob, &cubin.to_bytes())
    }

    /// One collection of a context's PC samples, zstd-compressed (function names repeat from PC to PC).
    pub fn write_pc_samples(&mut self, samples: &crate::source::PcSamples) -> Result<u32, FormatError> {
        self.append_zstd(ChunkType::PcSamples, &samples.to_bytes())
    }

    /// Counter samples of one source and device, zstd-compressed.
    pub fn write_counters(&mut self, samples: &crate::counters::CounterSamples) -> Result<u32, FormatError> {
        self.append_zstd(ChunkType::Counters, &samples.to_bytes())
    }

    /// Appends a `graphs` chunk (graph structure and node creation stacks).
    pub fn write_graph_events(&mut self, events: &crate::graphs::GraphEvents) -> Result<u32, FormatError> {
        self.append_zstd(ChunkType::Graphs, &events.to_bytes())
    }

    pub fn write_loss(&mut self, loss: &LossCounters) -> Result<u32, FormatError> {
        let bytes = loss.to_bytes();
        self.append(ChunkType::Loss, Codec::None, &bytes, bytes.len() as u64, 0, (0, 0), Vec::new())
    }

    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.out.flush().map_err(FormatError::Write)
    }

    /// Writes the footer index and the trailer, and returns the output.
    pub fn finish(mut self) -> Result<W, FormatError> {
        let mut b = flatbuffers::FlatBufferBuilder::with_capacity(64 + self.index.len() * 96);
        let mut counts = Vec::new();
        let mut entries = Vec::with_capacity(self.index.len());
        for e in &self.index {
            let h = &e.header;
            entries.push(fb::ChunkEntry::new(
                e.offset,
                h.stored_len,
                h.raw_len,
                h.t_min,
                h.t_max,
                h.seq,
                h.record_count,
                h.chunk_type.to_u8(),
                h.codec.to_u8(),
                h.flags,
                counts.len() as u32,
                e.kind_counts.len() as u32,
            ));
            counts.extend(e.kind_counts.iter().map(|&(k, c)| fb::KindCount::new(k, c)));
        }
        let chunks = b.create_vector(&entries);
        let kind_counts = b.create_vector(&counts);
        let root = fb::FooterIndex::create(
            &mut b,
            &fb::FooterIndexArgs {
                chunks: Some(chunks),
                kind_counts: Some(kind_counts),
                total_records: self.total_records,
                clean_close: true,
            },
        );
        b.finish(root, None);
        let footer = b.finished_data().to_vec();
        let footer_offset = self.offset;
        let len = footer.len() as u64;
        self.append(ChunkType::Footer, Codec::None, &footer, len, 0, (0, 0), Vec::new())?;
        let trailer = Trailer { footer_offset, footer_span: align_up(CHUNK_HEADER_LEN as u64 + len) };
        self.out.write_all(&trailer.encode()).map_err(FormatError::Write)?;
        self.out.flush().map_err(FormatError::Write)?;
        Ok(self.out)
    }
}
