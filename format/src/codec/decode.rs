//! Decoding: a chunk payload decompressed, its record image checked field by field against what it claims, and
//! each group's records restored from their byte planes.

use super::*;

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ChunkError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or_else(|| {
            ChunkError::Malformed(format!("record image ends early (needs {n} bytes at {})", self.at))
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, ChunkError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, ChunkError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, ChunkError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
}

pub(super) fn malformed(msg: impl Into<String>) -> ChunkError {
    ChunkError::Malformed(msg.into())
}

/// Decompresses and decodes an activity chunk payload written by [`Encoder::encode`]. `raw_len` is the original
/// buffer size from the chunk header.
pub fn decode(payload: &[u8], raw_len: u64) -> Result<DecodedBuffer, ChunkError> {
    // The image is the buffer plus a small header; bound the allocation by what the header promises.
    let bound = raw_len as usize + raw_len as usize / 16 + 64 * 1024;
    let image = decompress(payload, bound)?;
    decode_image(&image, raw_len)
}

thread_local! {
    /// One zstd decompression context per thread, reused across chunks: creating one costs a few hundred KB of
    /// fresh (page-faulting) tables, which showed as ~1% of converting a 20k-record file.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decompresses a zstd frame of at most `bound` bytes with this thread's context.
pub(crate) fn decompress(payload: &[u8], bound: usize) -> Result<Vec<u8>, ChunkError> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(zstd::bulk::Decompressor::new().map_err(|e| ChunkError::Decompress(e.to_string()))?),
        };
        d.decompress(payload, bound).map_err(|e| ChunkError::Decompress(e.to_string()))
    })
}

fn decode_image(image: &[u8], raw_len: u64) -> Result<DecodedBuffer, ChunkError> {
    let mut c = Cursor { b: image, at: 0 };
    let version = c.u8()?;
    if version != IMAGE_VERSION {
        return Err(malformed(format!("record image version {version} is unknown")));
    }
    c.take(3)?;
    let n_records = c.u32()? as usize;
    let n_groups = c.u32()? as usize;
    let tail_len = c.u32()? as usize;
    if n_groups > MAX_GROUPS || n_records > image.len() {
        return Err(malformed("implausible record or group count"));
    }
    struct G {
        kind: u32,
        count: usize,
        size: usize,
        ops: Vec<Op>,
    }
    let mut gs = Vec::with_capacity(n_groups);
    for _ in 0..n_groups {
        let kind = c.u32()?;
        let count = c.u32()? as usize;
        let size = c.u16()? as usize;
        let n_ops = c.u16()? as usize;
        if size < 4 || n_ops > MAX_OPS {
            return Err(malformed("bad group header"));
        }
        let mut ops = Vec::with_capacity(n_ops);
        for _ in 0..n_ops {
            let offset = c.u16()?;
            let width = c.u8()?;
            let kind = match c.u8()? {
                1 => OpKind::DeltaPrev,
                2 => OpKind::MinusField,
                k => return Err(malformed(format!("unknown transform {k}"))),
            };
            let reference = c.u16()?;
            c.take(2)?;
            let fits = |o: u16| o as usize + width as usize <= size;
            if !(width == 4 || width == 8) || !fits(offset) || (kind == OpKind::MinusField && !fits(reference)) {
                return Err(malformed("transform outside its record"));
            }
            ops.push(Op { offset, width, kind, reference });
        }
        gs.push(G { kind, count, size, ops });
    }
    if gs.iter().map(|g| g.count).sum::<usize>() != n_records {
        return Err(malformed("group counts do not add up to the record count"));
    }
    let sequence = if n_groups > 1 {
        let s = c.take(n_records)?.to_vec();
        let mut seen = vec![0usize; n_groups];
        for &g in &s {
            let slot = seen.get_mut(g as usize).ok_or_else(|| malformed("record order names a missing group"))?;
            *slot += 1;
        }
        if seen.iter().zip(&gs).any(|(a, g)| *a != g.count) {
            return Err(malformed("record order disagrees with group counts"));
        }
        s
    } else {
        vec![0u8; n_records]
    };
    let mut planes = Vec::with_capacity(n_groups);
    for g in &gs {
        planes.push(c.take(g.count.checked_mul(g.size).ok_or_else(|| malformed("group too large"))?)?);
    }
    // Groups (one per kind) are restored in parallel, and large ones split further (restore_group).
    let groups: Vec<RecordGroup> = gs
        .par_iter()
        .zip(planes)
        .map(|(g, planes)| RecordGroup {
            kind: g.kind,
            stride: g.size,
            bytes: restore_group(planes, g.count, g.size, &g.ops),
        })
        .collect();
    let tail = c.take(tail_len)?.to_vec();
    if c.at != image.len() {
        return Err(malformed("trailing bytes after the record image"));
    }
    let total = groups.iter().map(|g| g.bytes.len()).sum::<usize>() + tail.len();
    if total as u64 != raw_len {
        return Err(ChunkError::SizeMismatch { expected: raw_len, actual: total as u64 });
    }
    Ok(DecodedBuffer { groups, sequence, tail })
}
