//! What a chunk header may plausibly claim. Headers are checksummed, but a checksum proves only that the bytes are
//! as written, not that the writer was honest: a forged or corrupted-then-recomputed header could claim a payload
//! of 1 TiB, or millions of records in a few bytes. A reader allocates by these claims, so each is bounded by what
//! the chunk's kind can need, and a chunk claiming more is damaged.

use crate::container::{ChunkHeader, ChunkType, Codec};
use crate::error::ChunkError;

/// The largest activity buffer the recorder hands CUPTI (`--buffer-size` is at most 1 GiB).
pub const MAX_ACTIVITY_BYTES: u64 = 1 << 30;
/// The largest metadata, strings, clocks or loss payload (a strings chunk of a long run is a few MB).
pub const MAX_SIDE_BYTES: u64 = 256 << 20;
/// How much larger than its stored payload a compressed one may be. Real recordings compress activity buffers
/// 10-42x (`measurements/2026-11-23-local/chunk-ratios.txt`); a run of zeros compresses ~30,000x.
pub const MAX_RATIO: u64 = 1024;
/// Slack for tiny payloads, whose frame overhead makes any ratio look large.
const SMALL_PAYLOAD_SLACK: u64 = 64 << 10;
/// The largest cubin a reader inflates, unless `CUTR_MAX_CUBIN_MB` says otherwise: 32 MiB, four times what
/// PyTorch 2.11's 26 cubins (cuBLAS, CUTLASS and PyTorch's own) hold together stored (8.1 MB, docs/BENCHMARKS.md).
/// A source analysis holds one inflated cubin at a time, so this bounds its memory whatever a file claims; a cubin
/// over it is refused by name, with its claimed size, and its kernels get no lines.
pub const MAX_CUBIN_BYTES: u64 = 32 << 20;

/// [`MAX_CUBIN_BYTES`], or `CUTR_MAX_CUBIN_MB` (whole MiB, at most the 256 MiB of any side chunk) for a program
/// with a larger cubin.
pub fn max_cubin_bytes() -> u64 {
    std::env::var("CUTR_MAX_CUBIN_MB")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(MAX_CUBIN_BYTES, |mb| mb.saturating_mul(1 << 20).min(MAX_SIDE_BYTES))
}

/// No CUPTI record is smaller (every record starts with its 4-byte kind, and the smallest kinds are 16+ bytes).
pub const MIN_RECORD_BYTES: u64 = 8;

/// Checks the sizes and counts `h` claims against what its chunk type can need.
pub fn check_claims(h: &ChunkHeader) -> Result<(), ChunkError> {
    let implausible = |why: String| Err(ChunkError::Implausible(why));
    let most = match h.chunk_type {
        ChunkType::Activity => MAX_ACTIVITY_BYTES,
        _ => MAX_SIDE_BYTES,
    };
    if h.raw_len > most {
        return implausible(format!(
            "{} bytes claimed, more than the {most} a {} chunk holds",
            h.raw_len,
            h.chunk_type.name()
        ));
    }
    match h.codec {
        Codec::None if h.raw_len != h.stored_len => {
            return implausible(format!("{} bytes claimed for {} stored uncompressed", h.raw_len, h.stored_len));
        }
        Codec::Zstd | Codec::Records
            if h.raw_len > h.stored_len.saturating_mul(MAX_RATIO).saturating_add(SMALL_PAYLOAD_SLACK) =>
        {
            return implausible(format!(
                "{} bytes claimed from {} compressed (over {MAX_RATIO}x)",
                h.raw_len, h.stored_len
            ));
        }
        _ => {}
    }
    if h.chunk_type == ChunkType::Activity && h.record_count as u64 > h.raw_len / MIN_RECORD_BYTES {
        return implausible(format!("{} records claimed in {} bytes", h.record_count, h.raw_len));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(chunk_type: ChunkType, codec: Codec, stored_len: u64, raw_len: u64, record_count: u32) -> ChunkHeader {
        ChunkHeader {
            chunk_type,
            codec,
            flags: 0,
            seq: 1,
            record_count,
            stored_len,
            raw_len,
            t_min: 0,
            t_max: 0,
            payload_crc: 0,
        }
    }

    #[test]
    fn claims_beyond_what_a_chunk_can_need_are_refused() {
        let act = |stored, raw, n| check_claims(&header(ChunkType::Activity, Codec::Records, stored, raw, n));
        // A real 4 MiB buffer of 42,587 records stored in 100 KB (launch_loop_100k's largest): fine.
        assert_eq!(act(100_800, 4_194_296, 42_587), Ok(()));
        // 1 TiB claimed; 1 GiB of zeros from 32 KB; 4 GiB of records in a 4 MiB buffer.
        assert!(matches!(act(1 << 20, 1 << 40, 10), Err(ChunkError::Implausible(_))));
        assert!(matches!(act(32 << 10, 1 << 30, 10), Err(ChunkError::Implausible(_))));
        assert!(matches!(act(1 << 20, 4 << 20, u32::MAX), Err(ChunkError::Implausible(_))));
        // Exactly at the ratio (plus the small-payload slack) is allowed; a byte more is not.
        assert_eq!(act(1000, 1000 * MAX_RATIO + SMALL_PAYLOAD_SLACK, 1), Ok(()));
        assert!(act(1000, 1000 * MAX_RATIO + SMALL_PAYLOAD_SLACK + 1, 1).is_err());
        let side = |codec, stored, raw| check_claims(&header(ChunkType::Strings, codec, stored, raw, 0));
        assert!(side(Codec::None, 10, 11).is_err());
        assert_eq!(side(Codec::None, 10, 10), Ok(()));
        assert!(side(Codec::Zstd, 1 << 20, MAX_SIDE_BYTES + 1).is_err());
    }
}
