//! Counter samples handed over as the stream goes by ([`super::StreamOptions::counter_feed`]), instead of read whole
//! at open: a day of 10 kHz PM sampling is billions of readings, more than every other row of the recording. At
//! open each file's `counters` chunks are read once, one group at a time, for their time and their series' spans
//! (`Trace::counter_series`), then dropped; during the stream each chunk is read again in the window its first
//! sample falls in ([`Batch::counters`]), at most a window's bytes of chunks at once (those past it go ahead of the
//! window's rows in batches of their own), so a consumer holds a window's worth of samples beyond what it keeps
//! itself however dense the counters are against the activity. Samples are kept, left out and counted exactly as a
//! load reads them ([`ChunkSamples::read`]): the warnings and counts are made at open.
//!
//! [`Batch::counters`]: super::Batch::counters

use cutr_format::{ChunkError, ChunkInfo, ChunkType, Problem, Reader};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::counters::{ChunkSamples, CounterSample, CounterSeriesInfo, Leftovers};
use crate::ids::{NameId, ProcId};
use crate::names::Names;

/// The counter chunks of every file in the time order of their first kept sample, handed over a window at a time.
#[derive(Default)]
pub(super) struct CounterFeed {
    chunks: Vec<FeedChunk>,
    /// The first chunk not handed over yet.
    next: usize,
}

struct FeedChunk {
    file: usize,
    /// Its place among the file's chunks ([`Reader::chunks`]).
    chunk: usize,
    /// Its earliest kept sample's time (trace time).
    first: u64,
    /// Its decompressed bytes, for a batch's cap.
    bytes: u64,
}

/// Chunks decoded at once at open: a group's decoded samples are all that is held.
const GROUP: usize = 64;

impl CounterFeed {
    /// File `file`'s counter chunks indexed: each kept (with its first sample's time) when it has a sample to hand
    /// over, each series' span and size into `series`; what the samples left out counted into `left`. Returns the
    /// chunks that could not be decoded.
    pub(super) fn index_file(
        &mut self,
        (file, reader): (usize, &Reader),
        read: &ChunkSamples<'_>,
        names: &mut Names,
        (left, series): (&mut Leftovers, &mut FxHashMap<(ProcId, u32, NameId), CounterSeriesInfo>),
    ) -> Vec<Problem> {
        let chunks: Vec<(usize, &ChunkInfo)> =
            reader.chunks().iter().enumerate().filter(|(_, c)| c.chunk_type() == ChunkType::Counters).collect();
        let mut problems = Vec::new();
        let mut samples = Vec::new();
        for group in chunks.chunks(GROUP) {
            let decoded: Vec<Result<cutr_format::CounterSamples, ChunkError>> =
                group.par_iter().map(|(_, c)| decode(reader, c)).collect();
            for (&(chunk, c), d) in group.iter().zip(decoded) {
                let d = match d {
                    Ok(d) => d,
                    Err(error) => {
                        problems.push(damaged(c, error));
                        continue;
                    }
                };
                samples.clear();
                read.read(&d, names, left, &mut samples);
                let Some(first) = samples.iter().map(|s| s.ts).min() else { continue };
                self.chunks.push(FeedChunk { file, chunk, first, bytes: c.header.raw_len });
                for s in &samples {
                    let info = series.entry((s.proc, s.device, s.series)).or_insert(CounterSeriesInfo {
                        proc: s.proc,
                        device: s.device,
                        series: s.series,
                        first: s.ts,
                        last: s.ts,
                        samples: 0,
                        largest: 0.0,
                    });
                    info.first = info.first.min(s.ts);
                    info.last = info.last.max(s.ts);
                    info.samples += 1;
                    info.largest = info.largest.max(s.value.abs());
                }
            }
        }
        problems
    }

    /// Every file indexed: the chunks put in the order they are handed over.
    pub(super) fn sort(&mut self) {
        self.chunks.sort_by_key(|c| (c.first, c.file, c.chunk));
    }

    /// The samples of the chunks whose first sample is before `before` (every chunk left: `None`), as many of
    /// them as fit in `max_bytes` decompressed (at least one; [`CounterFeed::has_due`] tells whether some are left),
    /// each series' together in time order (by file, device, series, time; a time's samples in chunk order), read
    /// as at open (`reads`: each file's). Decoded in parallel.
    pub(super) fn take(
        &mut self,
        (before, max_bytes): (Option<u64>, u64),
        readers: &[Reader],
        reads: &[ChunkSamples<'_>],
        names: &mut Names,
    ) -> Vec<CounterSample> {
        let from = self.next;
        let mut bytes = 0u64;
        while self.has_due(before) && (self.next == from || bytes + self.chunks[self.next].bytes <= max_bytes) {
            bytes += self.chunks[self.next].bytes;
            self.next += 1;
        }
        let now = &self.chunks[from..self.next];
        let decoded: Vec<Option<cutr_format::CounterSamples>> =
            now.par_iter().map(|c| decode(&readers[c.file], &readers[c.file].chunks()[c.chunk]).ok()).collect();
        let mut out = Vec::new();
        // Counted at open already.
        let mut left = Leftovers::default();
        for (c, d) in now.iter().zip(decoded) {
            if let Some(d) = d {
                reads[c.file].read(&d, names, &mut left, &mut out);
            }
        }
        out.sort_by_key(|s| (s.proc, s.device, s.series, s.ts));
        out
    }

    /// Whether a chunk whose first sample is before `before` (any chunk: `None`) is still to be handed over.
    pub(super) fn has_due(&self, before: Option<u64>) -> bool {
        self.chunks.get(self.next).is_some_and(|c| before.is_none_or(|b| c.first < b))
    }

    /// The time before which every sample has been handed over: the first sample of the next chunk to come
    /// (`u64::MAX` once all have been).
    pub(super) fn complete_before(&self) -> u64 {
        self.chunks.get(self.next).map_or(u64::MAX, |c| c.first)
    }
}

/// A chunk's samples; its mapped pages let go once read (a day of samples would otherwise stay resident).
fn decode(reader: &Reader, c: &ChunkInfo) -> Result<cutr_format::CounterSamples, ChunkError> {
    let raw = reader.payload(c);
    reader.release_pages(c);
    cutr_format::CounterSamples::from_bytes(&raw?)
}

fn damaged(c: &ChunkInfo, error: ChunkError) -> Problem {
    Problem::DamagedChunk { offset: c.offset, seq: c.header.seq, chunk_type: ChunkType::Counters, records: 0, error }
}
