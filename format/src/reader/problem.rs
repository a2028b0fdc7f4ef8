//! What is wrong with a file that did not stop it from being read, as the reader reports it.

use std::fmt;

use crate::container::ChunkType;
use crate::error::ChunkError;

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
