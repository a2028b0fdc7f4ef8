//! The cubins of a file (`blob` chunks), read one at a time: a source analysis needs one cubin's bytes while it
//! reads that cubin's line tables, and again only if the disassembler runs, so no reader holds them all. A cubin
//! claiming more than [`crate::limits::max_cubin_bytes`] is refused before it is inflated.

use std::borrow::Cow;
use std::ops::Range;

use super::{ChunkInfo, Problem, Reader, chunk_payload, stored_payload};
use crate::container::{ChunkType, Codec};
use crate::error::ChunkError;
use crate::source::CubinBlob;
use cutr_schema::fb;

/// One cubin, inflated: the chunk's payload (borrowed from the file where it was stored uncompressed) and where the
/// cubin's bytes lie in it, so that reading it copies nothing.
#[derive(Debug)]
pub struct Cubin<'a> {
    /// CUPTI's CRC of the cubin, as PC samples name it.
    pub crc: u64,
    pub module_id: u32,
    /// The chunk's sequence number and offset in the file (to name it, and to read it again).
    pub seq: u32,
    pub offset: u64,
    payload: Cow<'a, [u8]>,
    data: Range<usize>,
}

impl Cubin<'_> {
    /// The cubin's ELF bytes.
    pub fn data(&self) -> &[u8] {
        &self.payload[self.data.clone()]
    }

    /// The cubin as an owned blob (its bytes copied).
    pub fn to_blob(&self) -> CubinBlob {
        CubinBlob { crc: self.crc, module_id: self.module_id, data: self.data().to_vec() }
    }
}

impl Reader {
    /// The `blob` chunks, in file order: read each with [`Reader::read_cubin`].
    pub fn cubin_chunks(&self) -> impl Iterator<Item = &ChunkInfo> {
        self.chunks.iter().filter(|c| c.chunk_type() == ChunkType::Blob)
    }

    /// One cubin: its chunk's size claim checked against the cubin limit before anything is inflated, its payload
    /// checksummed, inflated and parsed.
    pub fn read_cubin(&self, chunk: &ChunkInfo) -> Result<Cubin<'_>, Problem> {
        let damaged = |error| Problem::DamagedChunk {
            offset: chunk.offset,
            seq: chunk.header.seq,
            chunk_type: ChunkType::Blob,
            records: 0,
            error,
        };
        let limit = crate::limits::max_cubin_bytes();
        if chunk.header.raw_len > limit {
            return Err(damaged(ChunkError::Implausible(format!(
                "a cubin of {} bytes claimed, over the {limit} bytes ({} MiB) a cubin may have (CUTR_MAX_CUBIN_MB \
                 raises the limit)",
                chunk.header.raw_len,
                limit >> 20
            ))));
        }
        let payload = match chunk.header.codec {
            Codec::None => Cow::Borrowed(stored_payload(self.data.bytes(), chunk).map_err(damaged)?),
            _ => Cow::Owned(chunk_payload(self.data.bytes(), chunk).map_err(damaged)?),
        };
        let opts = flatbuffers::VerifierOptions { max_apparent_size: 1 << 31, ..Default::default() };
        let c = flatbuffers::root_with_opts::<fb::Cubin>(&opts, &payload)
            .map_err(|e| damaged(ChunkError::Malformed(format!("cubin: {e}"))))?;
        // The cubin's bytes as a range of the payload (the verifier checked that they lie inside it).
        let data = c.data().map_or(0..0, |d| {
            let start = d.bytes().as_ptr() as usize - payload.as_ptr() as usize;
            start..start + d.len()
        });
        let (crc, module_id) = (c.crc(), c.module_id());
        Ok(Cubin { crc, module_id, seq: chunk.header.seq, offset: chunk.offset, payload, data })
    }

    /// Every cubin of the file, each copied out, and the chunks that failed. This holds them all at once: it is
    /// for small files and tests; a source analysis reads one at a time with [`Reader::read_cubin`].
    pub fn cubins(&self) -> (Vec<CubinBlob>, Vec<Problem>) {
        let (mut ok, mut bad) = (Vec::new(), Vec::new());
        for chunk in self.cubin_chunks() {
            match self.read_cubin(chunk) {
                Ok(c) => ok.push(c.to_blob()),
                Err(p) => bad.push(p),
            }
        }
        (ok, bad)
    }
}
