//! The record-aware lossless codec for CUPTI activity buffers.
//!
//! A general-purpose compressor does poorly on raw CUPTI buffers: records of different kinds interleave, and
//! each 216-byte kernel record repeats the same constant fields next to fast-changing timestamps. Records of one
//! kind have a fixed stride, so before zstd this codec
//!
//! 1. walks the buffer with the layout table and groups records by kind (remembering the original order as one
//!    byte per record),
//! 2. replaces timestamps and growing ids by their difference from the previous record of the same kind, and
//!    each `end` by its distance from the record's own `start` (the duration), zigzag-encoded, and
//! 3. transposes each group into byte planes (byte 0 of every record, then byte 1, ...), so constant fields become
//!    long runs and small deltas become runs of zero high bytes.
//!
//! Every step is a bijection on the bytes (wrapping arithmetic), so decoding restores the buffer exactly, bit for
//! bit, whatever the records contain. Each chunk describes its own transforms, so decoding does not depend on
//! the layout table; bytes after a record of unknown kind are kept verbatim as the tail.

use cutr_schema::{FieldRole, LayoutTable};
use rayon::prelude::*;

use crate::error::ChunkError;

mod bytes;
mod decode;
mod transpose;

pub use decode::decode;
pub(crate) use decode::decompress;
use decode::malformed;

use bytes::{rd32, rd64, unzz32, unzz64, wr32, wr64, zz32, zz64};
use transpose::{planes_to_records, records_to_planes};

const IMAGE_VERSION: u8 = 1;
const MAX_OPS: usize = 64;

/// A reversible per-field transform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    /// value - the same field of the previous record of this kind.
    DeltaPrev = 1,
    /// value - another field of this record (`end - start`).
    MinusField = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Op {
    offset: u16,
    /// 4 or 8 bytes.
    width: u8,
    kind: OpKind,
    /// For MinusField: offset of the reference field (same width).
    reference: u16,
}

/// How records of one kind are encoded, and where its timestamps are (for chunk statistics).
#[derive(Clone, Debug)]
struct KindPlan {
    size: usize,
    /// DeltaPrev ops first, then MinusField ops, so decoding restores references before they are used.
    ops: Vec<Op>,
    start: Option<usize>,
    end: Option<usize>,
    /// A single timestamp (markers, memory records) when the kind has no start/end.
    timestamp: Option<usize>,
}

/// The encoding plan for every kind of a layout table; built once per session.
#[derive(Clone, Debug)]
pub struct CodecPlan {
    by_kind: Vec<Option<KindPlan>>,
}

impl CodecPlan {
    pub fn new(layouts: &LayoutTable) -> CodecPlan {
        let mut by_kind: Vec<Option<KindPlan>> = Vec::new();
        for r in layouts.records() {
            let start = r.fields.iter().find(|f| f.name == "start" && f.size == 8).map(|f| f.offset);
            let mut delta = Vec::new();
            let mut minus = Vec::new();
            for f in r.fields.iter() {
                let width = f.size as u8;
                if width != 4 && width != 8 {
                    continue;
                }
                match f.role {
                    FieldRole::Time if width == 8 => {
                        delta.push(Op { offset: f.offset, width, kind: OpKind::DeltaPrev, reference: 0 })
                    }
                    FieldRole::Sequential => {
                        delta.push(Op { offset: f.offset, width, kind: OpKind::DeltaPrev, reference: 0 })
                    }
                    FieldRole::End if width == 8 => match start {
                        Some(s) => minus.push(Op { offset: f.offset, width, kind: OpKind::MinusField, reference: s }),
                        None => delta.push(Op { offset: f.offset, width, kind: OpKind::DeltaPrev, reference: 0 }),
                    },
                    _ => {}
                }
            }
            delta.extend(minus);
            delta.truncate(MAX_OPS);
            let end = r.fields.iter().find(|f| f.role == FieldRole::End && f.size == 8).map(|f| f.offset as usize);
            // A record with a start and no end it can trust (unified memory) is timed by its start.
            let timestamp = r
                .fields
                .iter()
                .find(|f| f.name == "timestamp" && f.size == 8 && f.role == FieldRole::Time)
                .map(|f| f.offset as usize)
                .or(if end.is_none() { start.map(|s| s as usize) } else { None });
            let k = r.kind as usize;
            if by_kind.len() <= k {
                by_kind.resize(k + 1, None);
            }
            by_kind[k] =
                Some(KindPlan { size: r.size as usize, ops: delta, start: start.map(|s| s as usize), end, timestamp });
        }
        CodecPlan { by_kind }
    }

    #[inline]
    fn get(&self, kind: u32) -> Option<&KindPlan> {
        self.by_kind.get(kind as usize).and_then(|p| p.as_ref())
    }

    /// Checks that every group of a decoded buffer is of a kind this plan knows, with that kind's record size:
    /// the encoder only groups records it has a layout for, so any other group is damage, and a record shorter
    /// than its layout would be read past its end.
    pub fn check_strides(&self, d: &DecodedBuffer) -> Result<(), ChunkError> {
        for g in &d.groups {
            match self.get(g.kind) {
                Some(p) if p.size == g.stride => {}
                Some(p) => {
                    return Err(malformed(format!(
                        "kind {} records are {} bytes in the image, {} in the layout",
                        g.kind, g.stride, p.size
                    )));
                }
                None => return Err(malformed(format!("a group of kind {}, which has no layout", g.kind))),
            }
        }
        Ok(())
    }
}

/// What an encoded buffer contained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BufferStats {
    pub records: u32,
    /// (kind, count), in order of first appearance.
    pub per_kind: Vec<(u32, u32)>,
    /// Earliest and latest non-zero timestamp (0, 0 if none).
    pub t_min: u64,
    pub t_max: u64,
    /// Bytes after the last record whose kind has a layout (kept verbatim, not parsed).
    pub unparsed_bytes: u32,
    /// The kind of the first unparsed record, if the tail starts with one.
    pub unparsed_kind: Option<u32>,
    /// Records with start == end == 0 (CUPTI could not time them).
    pub zero_timestamps: u32,
    /// Records with end < start.
    pub inverted_timestamps: u32,
}

/// The records of one kind, grouped; the result of walking a buffer.
struct Walk {
    /// (kind, record offsets in the buffer)
    groups: Vec<(u32, Vec<u32>)>,
    /// Group index of each record, in buffer order.
    sequence: Vec<u8>,
    parsed_len: usize,
    stats: BufferStats,
}

/// Kinds with more groups than this in one buffer are not expected (CUPTI has 55 kinds); the rest goes to the
/// tail, losslessly.
const MAX_GROUPS: usize = 255;

fn walk(buffer: &[u8], plan: &CodecPlan) -> Walk {
    let mut slot: [u8; 256] = [u8::MAX; 256];
    let mut groups: Vec<(u32, Vec<u32>)> = Vec::new();
    let mut sequence = Vec::with_capacity(buffer.len() / 40);
    let mut stats = BufferStats { t_min: u64::MAX, ..Default::default() };
    let mut off = 0usize;
    while off + 4 <= buffer.len() {
        let kind = rd32(buffer, off);
        let Some(kp) = plan.get(kind) else { break };
        if off + kp.size > buffer.len() {
            break;
        }
        let g = if (kind as usize) < slot.len() && slot[kind as usize] != u8::MAX {
            slot[kind as usize] as usize
        } else {
            if groups.len() >= MAX_GROUPS || kind as usize >= slot.len() {
                break;
            }
            slot[kind as usize] = groups.len() as u8;
            groups.push((kind, Vec::new()));
            groups.len() - 1
        };
        groups[g].1.push(off as u32);
        sequence.push(g as u8);
        let rec = &buffer[off..off + kp.size];
        match (kp.start, kp.end) {
            (Some(s), Some(e)) => {
                let (s, e) = (rd64(rec, s), rd64(rec, e));
                if s == 0 && e == 0 {
                    stats.zero_timestamps += 1;
                } else {
                    if e < s {
                        stats.inverted_timestamps += 1;
                    }
                    if s != 0 {
                        stats.t_min = stats.t_min.min(s);
                    }
                    stats.t_max = stats.t_max.max(e.max(s));
                }
            }
            _ => {
                if let Some(t) = kp.timestamp.map(|t| rd64(rec, t)).filter(|&t| t != 0) {
                    stats.t_min = stats.t_min.min(t);
                    stats.t_max = stats.t_max.max(t);
                }
            }
        }
        off += kp.size;
    }
    if stats.t_min == u64::MAX {
        stats.t_min = 0;
    }
    stats.records = sequence.len() as u32;
    stats.per_kind = groups.iter().map(|(k, v)| (*k, v.len() as u32)).collect();
    stats.unparsed_bytes = (buffer.len() - off) as u32;
    if buffer.len() - off >= 4 {
        stats.unparsed_kind = Some(rd32(buffer, off));
    }
    Walk { groups, sequence, parsed_len: off, stats }
}

/// Counts and time range of a raw buffer without encoding it.
pub fn buffer_stats(buffer: &[u8], plan: &CodecPlan) -> BufferStats {
    walk(buffer, plan).stats
}

/// Reusable state for encoding, so the writer thread does not allocate per buffer.
pub struct Encoder {
    image: Vec<u8>,
    scratch: Vec<u8>,
    compressor: zstd::bulk::Compressor<'static>,
}

impl Encoder {
    /// `level`: zstd level (3 is zstd's default).
    pub fn new(level: i32) -> Encoder {
        Encoder {
            image: Vec::new(),
            scratch: Vec::new(),
            compressor: zstd::bulk::Compressor::new(level).expect("zstd compressor with a valid level"),
        }
    }

    /// Transforms and compresses one activity buffer. Returns the compressed bytes and what the buffer held.
    pub fn encode(&mut self, buffer: &[u8], plan: &CodecPlan) -> (Vec<u8>, BufferStats) {
        let w = walk(buffer, plan);
        build_image(buffer, plan, &w, &mut self.image, &mut self.scratch);
        let out = self.compressor.compress(&self.image).expect("zstd compression into a growable buffer");
        (out, w.stats)
    }
}

fn build_image(buffer: &[u8], plan: &CodecPlan, w: &Walk, image: &mut Vec<u8>, scratch: &mut Vec<u8>) {
    image.clear();
    let tail = &buffer[w.parsed_len..];
    image.push(IMAGE_VERSION);
    image.extend_from_slice(&[0, 0, 0]);
    image.extend_from_slice(&(w.sequence.len() as u32).to_le_bytes());
    image.extend_from_slice(&(w.groups.len() as u32).to_le_bytes());
    image.extend_from_slice(&(tail.len() as u32).to_le_bytes());
    for (kind, offs) in &w.groups {
        let kp = plan.get(*kind).unwrap();
        image.extend_from_slice(&kind.to_le_bytes());
        image.extend_from_slice(&(offs.len() as u32).to_le_bytes());
        image.extend_from_slice(&(kp.size as u16).to_le_bytes());
        image.extend_from_slice(&(kp.ops.len() as u16).to_le_bytes());
        for op in &kp.ops {
            image.extend_from_slice(&op.offset.to_le_bytes());
            image.push(op.width);
            image.push(op.kind as u8);
            image.extend_from_slice(&op.reference.to_le_bytes());
            image.extend_from_slice(&[0, 0]);
        }
    }
    if w.groups.len() > 1 {
        image.extend_from_slice(&w.sequence);
    }
    for (kind, offs) in &w.groups {
        let kp = plan.get(*kind).unwrap();
        let n = offs.len();
        let s = kp.size;
        scratch.clear();
        scratch.resize(n * s, 0);
        let mut prev = [0u64; MAX_OPS];
        for (rec, &o) in scratch.chunks_exact_mut(s).zip(offs) {
            let orig = &buffer[o as usize..o as usize + s];
            rec.copy_from_slice(orig);
            for (k, op) in kp.ops.iter().enumerate() {
                let at = op.offset as usize;
                if op.width == 8 {
                    let v = rd64(orig, at);
                    let d = match op.kind {
                        OpKind::DeltaPrev => {
                            let d = v.wrapping_sub(prev[k]);
                            prev[k] = v;
                            d
                        }
                        OpKind::MinusField => v.wrapping_sub(rd64(orig, op.reference as usize)),
                    };
                    wr64(rec, at, zz64(d));
                } else {
                    let v = rd32(orig, at);
                    let d = match op.kind {
                        OpKind::DeltaPrev => {
                            let d = v.wrapping_sub(prev[k] as u32);
                            prev[k] = v as u64;
                            d
                        }
                        OpKind::MinusField => v.wrapping_sub(rd32(orig, op.reference as usize)),
                    };
                    wr32(rec, at, zz32(d));
                }
            }
        }
        let base = image.len();
        image.resize(base + n * s, 0);
        records_to_planes(scratch, n, s, &mut image[base..]);
    }
    image.extend_from_slice(tail);
}

/// Bytes of records transposed by one task: a group larger than this is split across threads, so that a
/// recording of a few big buffers (a small run's usual shape) does not decode on one core.
const TRANSPOSE_TASK_BYTES: usize = 128 << 10;

/// Restores one group's records from its byte planes: transposition (in parallel for large groups), then the
/// field transforms (a running delta is sequential, and cheap beside the transposition).
fn restore_group(planes: &[u8], n: usize, s: usize, ops: &[Op]) -> Vec<u8> {
    let mut bytes = vec![0u8; n * s];
    if bytes.len() > TRANSPOSE_TASK_BYTES {
        // Multiples of 8 records, so every task but the last transposes whole 8x8 tiles.
        let per_task = (TRANSPOSE_TASK_BYTES / s).next_multiple_of(8);
        bytes.par_chunks_mut(per_task * s).enumerate().for_each(|(t, out)| {
            planes_to_records(planes, n, s, t * per_task, out);
        });
    } else {
        planes_to_records(planes, n, s, 0, &mut bytes);
    }
    let mut prev = [0u64; MAX_OPS];
    for rec in bytes.chunks_exact_mut(s) {
        for (k, op) in ops.iter().enumerate() {
            let at = op.offset as usize;
            if op.width == 8 {
                let d = unzz64(rd64(rec, at));
                let v = match op.kind {
                    OpKind::DeltaPrev => {
                        let v = prev[k].wrapping_add(d);
                        prev[k] = v;
                        v
                    }
                    OpKind::MinusField => rd64(rec, op.reference as usize).wrapping_add(d),
                };
                wr64(rec, at, v);
            } else {
                let d = unzz32(rd32(rec, at));
                let v = match op.kind {
                    OpKind::DeltaPrev => {
                        let v = (prev[k] as u32).wrapping_add(d);
                        prev[k] = v as u64;
                        v
                    }
                    OpKind::MinusField => rd32(rec, op.reference as usize).wrapping_add(d),
                };
                wr32(rec, at, v);
            }
        }
    }
    bytes
}

/// One kind's records from a decoded buffer, contiguous, in their original order within the kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordGroup {
    pub kind: u32,
    pub stride: usize,
    pub bytes: Vec<u8>,
}

impl RecordGroup {
    pub fn len(&self) -> usize {
        self.bytes.len().checked_div(self.stride).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The bytes of record `i`.
    #[inline]
    pub fn record(&self, i: usize) -> &[u8] {
        &self.bytes[i * self.stride..(i + 1) * self.stride]
    }

    pub fn iter(&self) -> std::slice::ChunksExact<'_, u8> {
        self.bytes.chunks_exact(self.stride)
    }
}

/// A decoded activity buffer: records grouped by kind, plus what is needed to restore the original bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodedBuffer {
    pub groups: Vec<RecordGroup>,
    /// Group index of each record, in original buffer order.
    pub sequence: Vec<u8>,
    /// Bytes after the last parsed record, verbatim.
    pub tail: Vec<u8>,
}

impl DecodedBuffer {
    pub fn record_count(&self) -> usize {
        self.sequence.len()
    }

    /// The group of `kind`, if the buffer had records of it.
    pub fn group(&self, kind: u32) -> Option<&RecordGroup> {
        self.groups.iter().find(|g| g.kind == kind)
    }

    /// The buffer exactly as CUPTI wrote it.
    pub fn to_original(&self) -> Vec<u8> {
        let total: usize = self.groups.iter().map(|g| g.bytes.len()).sum::<usize>() + self.tail.len();
        let mut out = Vec::with_capacity(total);
        let mut next = vec![0usize; self.groups.len()];
        for &g in &self.sequence {
            let grp = &self.groups[g as usize];
            let i = next[g as usize];
            out.extend_from_slice(grp.record(i));
            next[g as usize] = i + 1;
        }
        out.extend_from_slice(&self.tail);
        out
    }
}

/// Groups a raw (uncompressed, untransformed) buffer by kind, as [`decode`] would return it.
pub fn group_raw(buffer: &[u8], plan: &CodecPlan) -> DecodedBuffer {
    let w = walk(buffer, plan);
    let groups = w
        .groups
        .iter()
        .map(|(kind, offs)| {
            let s = plan.get(*kind).unwrap().size;
            let mut bytes = Vec::with_capacity(offs.len() * s);
            for &o in offs {
                bytes.extend_from_slice(&buffer[o as usize..o as usize + s]);
            }
            RecordGroup { kind: *kind, stride: s, bytes }
        })
        .collect();
    DecodedBuffer { groups, sequence: w.sequence, tail: buffer[w.parsed_len..].to_vec() }
}

#[cfg(test)]
mod tests;
