//! Forging `.cutr` files the way a corrupted disk or an attacker would: chunk headers with valid checksums over
//! hostile fields, payloads replaced (compression bombs, malformed record images), chunks repeated or appended.
//! Each edit recomputes the checksums it breaks, so a reader cannot reject the file on a checksum alone.

pub mod clocks;
pub mod counters;
pub mod cubins;
pub mod fields;

use cutr_format::container::{CHUNK_HEADER_LEN, ChunkHeader, ChunkType, Codec, FILE_HEADER_LEN, payload_crc};

pub mod pc_samples;

/// One chunk of a file: where it starts and its header.
#[derive(Clone, Copy, Debug)]
pub struct Chunk {
    pub offset: usize,
    pub header: ChunkHeader,
}

impl Chunk {
    /// Bytes from this chunk's start to the next one's.
    pub fn span(&self) -> usize {
        self.header.span() as usize
    }

    /// The chunk's stored payload in `file`.
    pub fn payload<'a>(&self, file: &'a [u8]) -> &'a [u8] {
        let start = self.offset + CHUNK_HEADER_LEN;
        &file[start..start + self.header.stored_len as usize]
    }
}

/// The chunks of a well-formed file, in file order (the footer included), up to the first byte that holds none.
pub fn chunks(file: &[u8]) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut at = FILE_HEADER_LEN;
    while let Some(h) = file.get(at..at + CHUNK_HEADER_LEN).and_then(|b| ChunkHeader::decode(b).ok()) {
        out.push(Chunk { offset: at, header: h });
        at += h.span() as usize;
    }
    out
}

/// The chunks of type `t`.
pub fn chunks_of(file: &[u8], t: ChunkType) -> Vec<Chunk> {
    chunks(file).into_iter().filter(|c| c.header.chunk_type == t).collect()
}

/// Rewrites the header of the chunk at `offset` with `edit`, recomputing its checksum. The footer index still
/// matches as long as the sequence number, type and stored length are kept.
pub fn edit_header(file: &mut [u8], offset: usize, edit: impl FnOnce(&mut ChunkHeader)) {
    let mut h = ChunkHeader::decode(&file[offset..offset + CHUNK_HEADER_LEN]).expect("a chunk header");
    edit(&mut h);
    file[offset..offset + CHUNK_HEADER_LEN].copy_from_slice(&h.encode());
}

/// Makes every activity chunk's header claim the first one's start (the records themselves unchanged): a stream's
/// edge, the next window's earliest claimed start, then never moves past the first chunk.
pub fn keep_edges_back(file: &mut [u8]) {
    let activity = chunks_of(file, ChunkType::Activity);
    let Some(first) = activity.first().map(|c| c.header.t_min) else { return };
    for c in &activity {
        edit_header(file, c.offset, |h| h.t_min = first);
    }
}

/// The file with the chunk at `offset` replaced by one of the same type and sequence number holding `payload`
/// (claiming `raw_len` decoded bytes and `records` records, encoded with `codec`). The chunks after it move, so a
/// footer no longer matches and the file is read by scanning.
pub fn replace_payload(
    file: &[u8],
    offset: usize,
    codec: Codec,
    payload: &[u8],
    raw_len: u64,
    records: u32,
) -> Vec<u8> {
    let old = ChunkHeader::decode(&file[offset..offset + CHUNK_HEADER_LEN]).expect("a chunk header");
    let h = ChunkHeader {
        codec,
        record_count: records,
        stored_len: payload.len() as u64,
        raw_len,
        payload_crc: payload_crc(payload),
        ..old
    };
    let mut out = file[..offset].to_vec();
    out.extend_from_slice(&h.encode());
    out.extend_from_slice(payload);
    out.resize(offset + h.span() as usize, 0);
    out.extend_from_slice(&file[offset + old.span() as usize..]);
    out
}

/// A zstd frame of `zeros` zero bytes, made in pieces (a 1 GiB bomb is a few KB, and never held whole).
pub fn zero_bomb(zeros: u64) -> Vec<u8> {
    use std::io::Write;
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).expect("a zstd encoder");
    enc.set_pledged_src_size(Some(zeros)).expect("a pledged size");
    let block = vec![0u8; 1 << 20];
    let mut left = zeros;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        enc.write_all(&block[..n]).expect("writing to memory");
        left -= n as u64;
    }
    enc.finish().expect("finishing a frame")
}

/// `files` written into `dir` as the parts of one split recording (`part1.cutr`, `part2.cutr`, ...: run `run`,
/// process 77, [`mark_as_part`]), their paths in part order.
pub fn write_parts(dir: &std::path::Path, files: &[Vec<u8>]) -> Vec<std::path::PathBuf> {
    files
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let part = i as u32 + 1;
            let path = dir.join(format!("part{part}.cutr"));
            std::fs::write(&path, mark_as_part(bytes, "run", part, 77)).expect("writing a part");
            path
        })
        .collect()
}

/// The file marked as part `part` of split run `run` recorded by process `pid` (every metadata chunk's config
/// given `split.run` and `split.part`, as `cupti-record --split` writes them): a recording made whole, read as one
/// part of a run (the chunks after each metadata chunk move, so the file is read by scanning).
pub fn mark_as_part(file: &[u8], run: &str, part: u32, pid: u32) -> Vec<u8> {
    let mut out = file.to_vec();
    // Last first: a rewritten chunk moves only the chunks after it.
    for c in chunks_of(file, ChunkType::Metadata).iter().rev() {
        out = counters::rewrite_payload(&out, c, |raw| {
            let mut meta = cutr_format::SessionMetadata::from_bytes(raw).expect("a metadata chunk");
            meta.config.retain(|(k, _)| k != "split.run" && k != "split.part");
            meta.config.push(("split.run".into(), run.into()));
            meta.config.push(("split.part".into(), part.to_string()));
            meta.pid = pid;
            *raw = meta.to_bytes();
        });
    }
    out
}
