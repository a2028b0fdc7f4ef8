//! Side chunks (formats 1.1-1.5) decoded, one field set to a hostile value, and encoded again as a valid
//! flatbuffer: what a byte-level mutation rarely reaches, because most flipped bytes break the flatbuffer itself.
//! `pick` chooses the field and the value, so a deterministic generator drives it (the mutation replay,
//! `tests/tests/fuzz_corpus.rs`). Each returns the new decoded payload, or `None` when the payload does not decode.

use cutr_format::container::ChunkType;
use cutr_format::{CounterSamples, CubinBlob, GraphEvents, PcSamples};

/// Hostile 64-bit values: zero, the largest, one past a u32, the sign bit, small counts that index past tables.
const HOSTILE_U64: [u64; 7] = [0, u64::MAX, 1 << 32, 1 << 63, 1, 7, u64::MAX - 1];
/// Hostile readings: infinities, NaN, the largest float, a negative zero, a subnormal.
const HOSTILE_F64: [f64; 7] = [f64::INFINITY, f64::NEG_INFINITY, f64::NAN, f64::MAX, -f64::MAX, -0.0, 5e-324];

fn u64_of(pick: u64) -> u64 {
    HOSTILE_U64[(pick % HOSTILE_U64.len() as u64) as usize]
}

fn u32_of(pick: u64) -> u32 {
    u64_of(pick) as u32 | if pick & 8 != 0 { 0x8000_0000 } else { 0 }
}

/// Index `pick` into a list of `len` (0 when empty).
fn index(pick: u64, len: usize) -> usize {
    (pick % len.max(1) as u64) as usize
}

/// The payload of a side chunk of `chunk_type` with one field made hostile; `None` for types it does not know or
/// a payload that does not decode.
pub fn hostile_field(chunk_type: ChunkType, raw: &[u8], pick: u64) -> Option<Vec<u8>> {
    match chunk_type {
        ChunkType::Counters => CounterSamples::from_bytes(raw).ok().map(|mut s| {
            counters(&mut s, pick);
            s.to_bytes()
        }),
        ChunkType::PcSamples => PcSamples::from_bytes(raw).ok().map(|mut s| {
            pc_samples(&mut s, pick);
            s.to_bytes()
        }),
        ChunkType::Blob => CubinBlob::from_bytes(raw).ok().map(|mut c| {
            cubin(&mut c, pick);
            c.to_bytes()
        }),
        ChunkType::Graphs => GraphEvents::from_bytes(raw).ok().map(|mut g| {
            graphs(&mut g, pick);
            g.to_bytes()
        }),
        _ => None,
    }
}

/// A device, a reading, a time or the lost count of a counters chunk.
pub fn counters(s: &mut CounterSamples, pick: u64) {
    let v = pick >> 8;
    match pick % 6 {
        0 => s.device = u32_of(v),
        1 => {
            let i = index(v >> 3, s.values.len());
            if let Some(x) = s.values.get_mut(i) {
                *x = HOSTILE_F64[index(v, HOSTILE_F64.len())];
            }
        }
        2 => {
            let i = index(v >> 3, s.t_start.len());
            if let Some(t) = s.t_start.get_mut(i) {
                *t = u64_of(v);
            }
        }
        3 => s.t_start.reverse(),
        4 => s.lost_samples = u64_of(v),
        _ => s.values.iter_mut().for_each(|x| *x = HOSTILE_F64[index(v, HOSTILE_F64.len())]),
    }
}

/// A count, a period, a stall-reason table entry or a PC's cubin, offset, function or samples in a PC-sample
/// collection.
pub fn pc_samples(s: &mut PcSamples, pick: u64) {
    let v = pick >> 8;
    let pc = index(v >> 3, s.pcs.len());
    match pick % 9 {
        0 => s.total_samples = u64_of(v),
        1 => s.dropped_samples = u64_of(v),
        2 => s.period_log2 = u32_of(v),
        3 => s.device = u32_of(v),
        4 => s.stall_reasons.iter_mut().for_each(|r| r.0 = u32_of(v)),
        5 => s.stall_reasons.clear(),
        6 => {
            if let Some(p) = s.pcs.get_mut(pc) {
                p.stalls.iter_mut().for_each(|st| (st.0, st.1) = (u32_of(v), u32::MAX));
            }
        }
        7 => {
            if let Some(p) = s.pcs.get_mut(pc) {
                (p.pc_offset, p.function_index) = (u64_of(v), u32_of(v));
            }
        }
        _ => {
            if let Some(p) = s.pcs.get_mut(pc) {
                p.cubin_crc = u64_of(v);
            }
        }
    }
}

/// A cubin's CRC, or its ELF bytes cut or overwritten at one place.
pub fn cubin(c: &mut CubinBlob, pick: u64) {
    let v = pick >> 8;
    match pick % 4 {
        0 => c.crc = u64_of(v),
        1 => c.data.truncate(index(v, c.data.len())),
        _ => {
            let at = index(v >> 3, c.data.len()) & !3;
            if let Some(w) = c.data.get_mut(at..at + 4) {
                w.copy_from_slice(&u32_of(v).to_le_bytes());
            }
        }
    }
}

/// An event's ids, time, stack or kind, or the lost count of a graphs chunk.
pub fn graphs(g: &mut GraphEvents, pick: u64) {
    let v = pick >> 8;
    let n = index(v >> 3, g.events.len());
    let Some(e) = g.events.get_mut(n) else {
        g.lost_events = u64_of(v);
        return;
    };
    match pick % 6 {
        0 => (e.graph, e.other_graph, e.exec) = (u32_of(v), u32_of(v >> 1), u32_of(v >> 2)),
        1 => (e.node, e.other_node) = (u64_of(v), u64_of(v >> 1)),
        2 => e.timestamp = u64_of(v),
        3 => (e.stack_start, e.stack_len) = (u32_of(v), u16::MAX),
        4 => e.node_type = v as u8,
        _ => g.lost_events = u64_of(v),
    }
}
