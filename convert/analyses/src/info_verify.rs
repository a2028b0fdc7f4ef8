//! What `info` checks beyond checksums: every side chunk the format can parse is decoded as the commands that use
//! it would (cubins, PC samples, counter samples, graph events, older session metadata; strings, clocks, loss
//! reports and thread names are decoded when the file opens), so that a chunk whose checksum holds over a payload
//! that does not parse is reported here as it is by `stats` or `source`. And what the readable chunks say that
//! would change a figure silently: clock samples that run backwards or wrap, counter samples on devices the
//! metadata does not list.

use std::collections::BTreeMap;

use cutr_format::{
    ChunkError, ChunkInfo, ChunkType, CounterSamples, CubinBlob, GraphEvents, PcSamples, Problem, Reader,
    SessionMetadata,
};
use cutr_model::timebase::ClockCheck;
use rayon::prelude::*;

/// What verifying a file's side chunks found.
#[derive(Debug, Default)]
pub(crate) struct SideCheck {
    /// Chunks whose payload does not parse (not already among `known`).
    pub problems: Vec<Problem>,
    /// What the readable chunks say that commands would otherwise change silently.
    pub warnings: Vec<String>,
    /// Side chunks decoded, by type name.
    pub verified: BTreeMap<String, u64>,
}

/// Decodes every blob, PC-sample, counters and graphs chunk, and every metadata chunk the reader did not, except
/// those `known` reports already. Cubins are decoded one at a time (each may inflate to megabytes), the rest in
/// parallel; none is kept.
pub(crate) fn side_chunks(r: &Reader, known: &[Problem]) -> SideCheck {
    let reported = |c: &ChunkInfo| {
        known.iter().any(|p| match p {
            Problem::DamagedChunk { offset, .. } | Problem::TruncatedChunk { offset, .. } => *offset == c.offset,
            _ => false,
        })
    };
    let chunks: Vec<&ChunkInfo> = r
        .chunks()
        .iter()
        .filter(|c| {
            matches!(
                c.chunk_type(),
                ChunkType::Blob | ChunkType::PcSamples | ChunkType::Counters | ChunkType::Graphs | ChunkType::Metadata
            ) && !reported(c)
        })
        .collect();
    let (cubins, others): (Vec<&ChunkInfo>, Vec<&ChunkInfo>) =
        chunks.into_iter().partition(|c| c.chunk_type() == ChunkType::Blob);
    let mut results: Vec<(&ChunkInfo, Result<Option<u32>, ChunkError>)> =
        cubins.into_iter().map(|c| (c, decode(r, c))).collect();
    results.extend(others.par_iter().map(|c| (*c, decode(r, c))).collect::<Vec<_>>());
    results.sort_by_key(|(c, _)| c.offset);

    let devices: Vec<u32> = r.metadata().map(|m| m.devices.iter().map(|d| d.id).collect()).unwrap_or_default();
    let mut check = SideCheck::default();
    let mut unknown_devices: BTreeMap<u32, u64> = BTreeMap::new();
    for (c, result) in results {
        match result {
            Ok(device) => {
                *check.verified.entry(c.chunk_type().name()).or_default() += 1;
                if let Some(d) = device.filter(|d| !devices.is_empty() && !devices.contains(d)) {
                    *unknown_devices.entry(d).or_default() += 1;
                }
            }
            Err(error) => check.problems.push(Problem::DamagedChunk {
                offset: c.offset,
                seq: c.header.seq,
                chunk_type: c.chunk_type(),
                records: 0,
                error,
            }),
        }
    }
    check.warnings = ClockCheck::of_reader(r).warnings();
    let listed = devices.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    for (device, chunks) in unknown_devices {
        check.warnings.push(format!(
            "{chunks} counters chunks are on device {device}, which the file's metadata does not list (devices \
             {listed})"
        ));
    }
    check
}

/// Decodes one side chunk and drops it; for a counters chunk, returns its device.
fn decode(r: &Reader, c: &ChunkInfo) -> Result<Option<u32>, ChunkError> {
    let raw = r.payload(c)?;
    match c.chunk_type() {
        ChunkType::Blob => CubinBlob::from_bytes(&raw).map(|_| None),
        ChunkType::PcSamples => PcSamples::from_bytes(&raw).map(|_| None),
        ChunkType::Counters => CounterSamples::check(&raw).map(Some),
        ChunkType::Graphs => GraphEvents::from_bytes(&raw).map(|_| None),
        _ => SessionMetadata::from_bytes(&raw).map(|_| None),
    }
}
