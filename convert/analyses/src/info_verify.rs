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
    /// What the decoded chunks hold: PC samples (every stall reason's count at every PC, as the recorder's
    /// summary counts them) and counter samples (one per source, device and time).
    pub pc_samples: u64,
    pub counter_samples: u64,
}

/// A PC-sample collection's context, samples per stall reason index, and its own stall-reason table.
type PcCollection = (u32, BTreeMap<u32, u64>, Vec<(u32, String)>);

/// What one side chunk holds that `info` counts.
#[derive(Default)]
struct Decoded {
    /// A counters chunk's device.
    device: Option<u32>,
    pc: Option<PcCollection>,
    counter_samples: u64,
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
    let mut results: Vec<(&ChunkInfo, Result<Decoded, ChunkError>)> =
        cubins.into_iter().map(|c| (c, decode(r, c))).collect();
    results.extend(others.par_iter().map(|c| (*c, decode(r, c))).collect::<Vec<_>>());
    results.sort_by_key(|(c, _)| c.offset);

    let devices: Vec<u32> = r.metadata().map(|m| m.devices.iter().map(|d| d.id).collect()).unwrap_or_default();
    let mut check = SideCheck::default();
    let mut unknown_devices: BTreeMap<u32, u64> = BTreeMap::new();
    // A collection without its own stall-reason table (files before issue 28) takes its context's first.
    let mut tables: BTreeMap<u32, Vec<(u32, String)>> = BTreeMap::new();
    for (c, result) in results {
        match result {
            Ok(decoded) => {
                *check.verified.entry(c.chunk_type().name()).or_default() += 1;
                if let Some((context, by_reason, own)) = decoded.pc {
                    let table = if own.is_empty() { tables.get(&context).cloned().unwrap_or_default() } else { own };
                    if !table.is_empty() {
                        tables.entry(context).or_insert_with(|| table.clone());
                    }
                    let twin = |reason: u32| table.iter().any(|(i, n)| *i == reason && n.ends_with("_not_issued"));
                    check.pc_samples += by_reason.into_iter().filter(|(r, _)| !twin(*r)).map(|(_, n)| n).sum::<u64>();
                }
                check.counter_samples += decoded.counter_samples;
                if let Some(d) = decoded.device.filter(|d| !devices.is_empty() && !devices.contains(d)) {
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

/// Decodes one side chunk and drops it, keeping what it holds that `info` counts.
fn decode(r: &Reader, c: &ChunkInfo) -> Result<Decoded, ChunkError> {
    let raw = r.payload(c)?;
    match c.chunk_type() {
        ChunkType::Blob => CubinBlob::from_bytes(&raw).map(|_| Decoded::default()),
        ChunkType::PcSamples => PcSamples::from_bytes(&raw)
            .map(|p| Decoded { pc: Some((p.context, p.samples_by_reason(), p.stall_reasons)), ..Decoded::default() }),
        ChunkType::Counters => CounterSamples::check(&raw).map(|(device, samples)| Decoded {
            device: Some(device),
            counter_samples: samples as u64,
            ..Decoded::default()
        }),
        ChunkType::Graphs => GraphEvents::from_bytes(&raw).map(|_| Decoded::default()),
        _ => SessionMetadata::from_bytes(&raw).map(|_| Decoded::default()),
    }
}
