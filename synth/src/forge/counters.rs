//! Hostile counter samples (`counters` chunks, format 1.3), and side-chunk payloads rewritten in place: a chunk's
//! payload decoded, edited as bytes or as its flatbuffer's fields, and stored again with its checksums recomputed,
//! so that a reader meets the hostile values themselves rather than a checksum failure.

use std::path::Path;

use cutr_format::container::{ChunkType, Codec};
use cutr_format::{CounterMetric, CounterSamples, FormatError, Writer, WriterOptions};

use super::{Chunk, chunks_of, replace_payload};
use crate::{SynthOptions, SynthTruth, write_to_with};

/// A generated recording with `counters` chunks made from its truth (after its activity, before its loss report).
pub fn write_with_counters(
    path: &Path,
    opts: SynthOptions,
    make: impl FnOnce(&SynthTruth) -> Vec<CounterSamples>,
) -> Result<SynthTruth, FormatError> {
    let w = Writer::create(path, WriterOptions::default())?;
    let (_, truth) = write_to_with(w, opts, |w, truth| {
        for c in make(truth) {
            w.write_counters(&c)?;
        }
        Ok(())
    })?;
    Ok(truth)
}

/// `metrics` metrics named `metric_00000`... (unit `%`), `samples` samples spread evenly over [t_min, t_max], on
/// `device`, each metric's value at sample i being `value(metric, i)`: 20,000 metrics of 4 samples are the issue's
/// quadratic class (a key per kernel x metric), in a few hundred KB.
pub fn metric_flood(
    (t_min, t_max): (u64, u64),
    metrics: usize,
    samples: usize,
    device: u32,
    value: impl Fn(usize, usize) -> f64,
) -> CounterSamples {
    let step = (t_max - t_min) / (samples.max(2) as u64 - 1);
    let ts: Vec<u64> = (0..samples as u64).map(|i| t_min + i * step).collect();
    CounterSamples {
        source: "pm_sampling".into(),
        device,
        metrics: (0..metrics)
            .map(|j| CounterMetric { name: format!("metric_{j:05}"), unit: "%".into(), description: String::new() })
            .collect(),
        t_start: ts.clone(),
        t_end: ts,
        values: (0..samples).flat_map(|i| (0..metrics).map(move |j| (i, j))).map(|(i, j)| value(j, i)).collect(),
        lost_samples: 0,
    }
}

/// The file with side chunk `c`'s payload decoded (zstd or stored), passed to `edit`, and stored again with zstd,
/// its checksums recomputed. The chunks after it move, so the file is read by scanning.
pub fn rewrite_payload(file: &[u8], c: &Chunk, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let stored = c.payload(file);
    let mut raw = match c.header.codec {
        Codec::Zstd => zstd::bulk::decompress(stored, c.header.raw_len as usize).unwrap_or_else(|_| stored.to_vec()),
        _ => stored.to_vec(),
    };
    edit(&mut raw);
    let payload = zstd::bulk::compress(&raw, 3).expect("compressing in memory");
    replace_payload(file, c.offset, Codec::Zstd, &payload, raw.len() as u64, 0)
}

/// The file with side chunk `c`'s stored payload replaced by as many bytes of `fill`, stored uncompressed with its
/// checksums recomputed: the footer still matches (sequence number, type and stored length kept), so the file
/// reads as closed cleanly with one chunk that does not parse.
pub fn garble_in_place(file: &[u8], c: &Chunk, fill: u8) -> Vec<u8> {
    let garbage = vec![fill; c.header.stored_len as usize];
    replace_payload(file, c.offset, Codec::None, &garbage, garbage.len() as u64, 0)
}

/// Values a hostile flatbuffer word takes: zero, all ones, the sign bit, lengths just past a small buffer.
pub const HOSTILE_WORDS: [u32; 6] = [0, u32::MAX, 0x8000_0000, 0x7fff_ffff, 0x0001_0000, 0x0000_0101];

/// Overwrites the 4-byte little-endian word at `at` (rounded down to a multiple of 4, where flatbuffers keep their
/// offsets, lengths and most scalars) with `word`.
pub fn overwrite_word(raw: &mut [u8], at: usize, word: u32) {
    let at = at & !3;
    if let Some(w) = raw.get_mut(at..at + 4) {
        w.copy_from_slice(&word.to_le_bytes());
    }
}

/// The `counters` chunks of a file.
pub fn counter_chunks(file: &[u8]) -> Vec<Chunk> {
    chunks_of(file, ChunkType::Counters)
}
