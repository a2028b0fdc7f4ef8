//! Finding a file's chunks: from the footer's index, or, for a file never closed or whose footer is damaged, by
//! scanning chunk headers from the start; then the sequence numbers checked for gaps and repeats.

use std::collections::HashMap;

use cutr_schema::fb;

use super::{ChunkInfo, Problem, stored_payload};
use crate::container::{
    CHUNK_HEADER_LEN, CHUNK_MAGIC, ChunkHeader, ChunkType, Codec, FILE_HEADER_LEN, TRAILER_LEN, Trailer, payload_ok,
};
use crate::error::ChunkError;
use crate::limits::check_claims;

/// Bytes of the file read through the map between two releases of the pages behind (`release(start, len)`): at
/// most this much of the file (and the fault-around of its last header) is resident while indexing.
const RELEASE_EVERY: usize = 16 << 20;

/// Calls `release` on what lies behind `at` once `RELEASE_EVERY` bytes have been passed since the last call.
struct Behind<'a> {
    release: &'a dyn Fn(usize, usize),
    from: usize,
}

impl Behind<'_> {
    fn passed(&mut self, at: usize) {
        if at >= self.from.saturating_add(RELEASE_EVERY) {
            (self.release)(self.from, at - self.from);
            self.from = at;
        }
    }
}

/// Reads the chunk list from the footer. Any inconsistency makes the caller fall back to scanning. The pages of
/// the headers read are let go through `release` as the index goes (the footer's own when it has been read).
pub(super) fn read_footer(
    bytes: &[u8],
    release: &dyn Fn(usize, usize),
) -> Result<(Vec<ChunkInfo>, bool, Vec<Problem>), String> {
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
    let mut behind = Behind { release, from: 0 };
    for e in entries.iter() {
        behind.passed(e.offset() as usize);
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
pub(super) fn check_sequence(chunks: Vec<ChunkInfo>, problems: &mut Vec<Problem>) -> Vec<ChunkInfo> {
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
/// so one bad header never hides the chunks after it. Returns the chunks, the lost bytes and the problems. A scan
/// reads every byte (checksums): the pages behind it are let go through `release` as it goes.
pub(super) fn scan(bytes: &[u8], release: &dyn Fn(usize, usize)) -> (Vec<ChunkInfo>, u64, Vec<Problem>) {
    let mut chunks = Vec::new();
    let mut problems = Vec::new();
    let mut lost = 0u64;
    let mut off = FILE_HEADER_LEN;
    let len = bytes.len();
    let mut after_footer = false;
    let mut behind = Behind { release, from: 0 };
    while off < len {
        behind.passed(off);
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
