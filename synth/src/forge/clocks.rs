//! Hostile clock samples (`clocks` chunks): each sample rewritten by a function, checksums recomputed.

use cutr_format::ClockSample;
use cutr_format::container::{ChunkType, Codec};

use super::{chunks_of, replace_payload};

/// The file with every clock sample `s` replaced by `edit(s)` (each clocks chunk stored again uncompressed; the
/// chunks after it move, so the file is read by scanning).
pub fn rewrite_clocks(file: &[u8], edit: impl Fn(&ClockSample) -> ClockSample) -> Vec<u8> {
    let mut out = file.to_vec();
    // Last first: a rewritten chunk moves only the chunks after it.
    for c in chunks_of(file, ChunkType::Clocks).iter().rev() {
        let stored = c.payload(file);
        let raw = match c.header.codec {
            Codec::Zstd => zstd::bulk::decompress(stored, c.header.raw_len as usize).expect("a clocks chunk"),
            _ => stored.to_vec(),
        };
        let samples = cutr_format::meta::clocks_from_bytes(&raw).expect("a clocks chunk");
        let hostile: Vec<ClockSample> = samples.iter().map(&edit).collect();
        let payload = cutr_format::meta::clocks_to_bytes(&hostile);
        out = replace_payload(&out, c.offset, Codec::None, &payload, payload.len() as u64, 0);
    }
    out
}

/// CLOCK_REALTIME `behind_ns` behind CUPTI's clock in every sample, wrapping below zero as a `u64` does: samples
/// taken before `behind_ns` wrap to near 2^64, the rest put the records before them before 1970. Before its clock
/// samples were checked, a file whose records start at `t_min` forged with `behind_ns = t_min + span / 2` read
/// with half its span (182 ms as 91).
pub fn realtime_behind(file: &[u8], behind_ns: u64) -> Vec<u8> {
    rewrite_clocks(file, |s| ClockSample { realtime_ns: s.cupti_ns.wrapping_sub(behind_ns), ..*s })
}
