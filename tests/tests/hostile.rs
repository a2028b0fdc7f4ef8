//! Hostile files: checksums valid, fields lying. Every one reads without a panic, without allocating what a header
//! claims, and with every damaged or repeated chunk reported; the records of the intact chunks are all there.

use std::path::PathBuf;

use cutr_format::container::{ChunkType, Codec};
use cutr_format::{ChunkError, Problem, Reader};
use cutr_model::{LoadOptions, load};
use cutr_synth::forge::{self, chunks_of, edit_header, replace_payload, zero_bomb};
use cutr_synth::{SynthOptions, SynthTruth, write_file};

/// A generated recording of ~20,000 records in 6 activity chunks, its bytes and its ground truth.
fn base() -> (tempfile::TempDir, Vec<u8>, SynthTruth) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("base.cutr");
    let truth =
        write_file(&path, SynthOptions { records: 20_000, buffer_bytes: 256 << 10, ..Default::default() }).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (dir, bytes, truth)
}

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Records per activity chunk, by sequence number.
fn records_by_seq(bytes: &[u8]) -> Vec<(u32, u64)> {
    chunks_of(bytes, ChunkType::Activity).iter().map(|c| (c.header.seq, c.header.record_count as u64)).collect()
}

fn damaged(r: &Reader) -> Vec<(u32, ChunkError)> {
    r.problems()
        .iter()
        .filter_map(|p| match p {
            Problem::DamagedChunk { seq, error, .. } => Some((*seq, error.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn claims_beyond_what_a_chunk_can_hold_are_damage_not_allocations() {
    let (dir, bytes, truth) = base();
    let acts = chunks_of(&bytes, ChunkType::Activity);
    assert!(acts.len() >= 4, "{} activity chunks", acts.len());
    let per_chunk = records_by_seq(&bytes);
    // On a file whose footer stays valid (sequence number, type and stored length kept): 1 TiB and 2^63 bytes
    // claimed, and 4 billion records in one chunk.
    let mut forged = bytes.clone();
    edit_header(&mut forged, acts[0].offset, |h| h.raw_len = 1 << 40);
    edit_header(&mut forged, acts[1].offset, |h| h.raw_len = 1 << 63);
    edit_header(&mut forged, acts[2].offset, |h| h.record_count = u32::MAX);
    let p = write(&dir, "claims.cutr", &forged);
    let r = Reader::open(&p).unwrap();
    assert!(r.recovery().is_none(), "the footer still matches");
    let bad: Vec<u32> = damaged(&r).iter().map(|d| d.0).collect();
    assert_eq!(bad, [acts[0].header.seq, acts[1].header.seq, acts[2].header.seq]);
    assert!(damaged(&r).iter().all(|d| matches!(d.1, ChunkError::Implausible(_))));
    let t = load(&[p], &LoadOptions::default()).unwrap();
    let lost: u64 = per_chunk[..3].iter().map(|c| c.1).sum();
    assert_eq!(t.records(), truth.records - lost, "every record of the intact chunks");
    assert_eq!(t.stats.damaged_chunks, 3);
    // The implausible headers' counts are not trusted: the 4-billion claim is not counted as lost records.
    assert_eq!(t.stats.records_in_damaged_chunks, 0);
}

#[test]
fn a_compression_bomb_is_refused_before_it_is_inflated() {
    let (dir, bytes, truth) = base();
    let acts = chunks_of(&bytes, ChunkType::Activity);
    let bomb = zero_bomb(1 << 30);
    assert!(bomb.len() < 64 << 10, "a 1 GiB bomb is {} bytes", bomb.len());
    // Every activity chunk replaced by the bomb (offsets move: read by scanning).
    let mut forged = bytes.clone();
    for c in chunks_of(&bytes, ChunkType::Activity).iter().rev() {
        forged = replace_payload(&forged, c.offset, Codec::Records, &bomb, 1 << 30, 1000);
    }
    let p = write(&dir, "bomb.cutr", &forged);
    let r = Reader::open(&p).unwrap();
    assert_eq!(damaged(&r).len(), acts.len());
    assert!(damaged(&r).iter().all(|d| matches!(&d.1, ChunkError::Implausible(m) if m.contains("over 1024x"))));
    let t = load(&[p], &LoadOptions::default()).unwrap();
    assert_eq!((t.records(), t.kernels.len()), (0, 0));
    assert_eq!(t.stats.damaged_chunks, acts.len() as u64);
    assert!(truth.records > 0);
}

#[test]
fn a_record_image_with_records_shorter_than_their_layout_is_damage() {
    let (dir, bytes, _) = base();
    let acts = chunks_of(&bytes, ChunkType::Activity);
    // A record image (format in format/src/codec/mod.rs) of one group: two kernel records of 8 bytes where the
    // layout says 216.
    let mut image = vec![1u8, 0, 0, 0];
    image.extend_from_slice(&2u32.to_le_bytes()); // records
    image.extend_from_slice(&1u32.to_le_bytes()); // groups
    image.extend_from_slice(&0u32.to_le_bytes()); // tail
    image.extend_from_slice(&cutr_schema::kinds::CONCURRENT_KERNEL.to_le_bytes());
    image.extend_from_slice(&2u32.to_le_bytes()); // count
    image.extend_from_slice(&8u16.to_le_bytes()); // record size
    image.extend_from_slice(&0u16.to_le_bytes()); // no transforms
    image.extend_from_slice(&[7u8; 16]); // the planes
    let payload = zstd::bulk::compress(&image, 3).unwrap();
    let forged = replace_payload(&bytes, acts[1].offset, Codec::Records, &payload, 16, 2);
    let p = write(&dir, "stride.cutr", &forged);
    let r = Reader::open(&p).unwrap();
    let chunk = r.activity_chunks().find(|c| c.header.seq == acts[1].header.seq).unwrap();
    match r.decode_activity(chunk) {
        Err(ChunkError::Malformed(m)) => assert_eq!(m, "kind 10 records are 8 bytes in the image, 216 in the layout"),
        other => panic!("{:?}", other.map(|d| d.groups.len())),
    }
    let t = load(&[p], &LoadOptions::default()).unwrap();
    assert_eq!(t.stats.damaged_chunks, 1);
    assert_eq!(t.stats.records_in_damaged_chunks, 2);
}

#[test]
fn repeated_chunks_are_reported_and_counted_once() {
    let (dir, bytes, truth) = base();
    let acts = chunks_of(&bytes, ChunkType::Activity);
    // An activity chunk written twice, in the middle: the file is read by scanning.
    let (a, b) = (acts[1].offset, acts[1].offset + acts[1].span());
    let mut twice = bytes[..b].to_vec();
    twice.extend_from_slice(&bytes[a..b]);
    twice.extend_from_slice(&bytes[b..]);
    // A closed file with all its own chunks appended after the trailer.
    let mut appended = bytes.clone();
    appended.extend_from_slice(&bytes[cutr_format::container::FILE_HEADER_LEN..]);
    for (name, forged, dups) in [("twice.cutr", twice, 1), ("appended.cutr", appended, forge::chunks(&bytes).len() - 1)]
    {
        let p = write(&dir, name, &forged);
        let r = Reader::open(&p).unwrap();
        let seen: Vec<u32> = r
            .problems()
            .iter()
            .filter_map(|p| match p {
                Problem::DuplicateChunk { seq, .. } => Some(*seq),
                _ => None,
            })
            .collect();
        assert_eq!(seen.len(), dups, "{name}: {:?}", r.problems());
        assert!(!r.problems().iter().any(|p| matches!(p, Problem::MissingChunks { .. })), "{name}");
        let t = load(&[p], &LoadOptions::default()).unwrap();
        assert_eq!(t.records(), truth.records, "{name}: no record counted twice");
        assert_eq!(t.kernels.len() as u64, truth.kernels.values().map(|k| k.0).sum::<u64>(), "{name}");
    }
}

#[test]
fn a_header_lying_about_its_length_hides_no_chunk_after_it() {
    let (dir, bytes, truth) = base();
    let acts = chunks_of(&bytes, ChunkType::Activity);
    let per_chunk = records_by_seq(&bytes);
    // Cut the trailer (so the file is scanned), then make the second activity chunk claim a payload past the end of
    // the file (its header checksum recomputed), and the fourth a payload 100 KB longer than it is.
    let mut forged = bytes[..bytes.len() - 40].to_vec();
    edit_header(&mut forged, acts[1].offset, |h| h.stored_len = 1 << 40);
    edit_header(&mut forged, acts[3].offset, |h| h.stored_len += 100 << 10);
    let p = write(&dir, "length.cutr", &forged);
    let r = Reader::open(&p).unwrap();
    let bad: Vec<u32> = damaged(&r).iter().map(|d| d.0).collect();
    assert_eq!(bad, [acts[1].header.seq, acts[3].header.seq]);
    let t = load(&[p], &LoadOptions::default()).unwrap();
    let lost = per_chunk[1].1 + per_chunk[3].1;
    assert_eq!(t.records(), truth.records - lost, "every chunk after the lying headers is read");
}

#[test]
fn hostile_clock_samples_do_not_wrap_the_span() {
    let (dir, bytes, truth) = base();
    // Every clock sample's realtime replaced by u64::MAX - 1 (so realtime - CUPTI is near 2^64): the payload is
    // rewritten, the file read by scanning.
    let clocks = chunks_of(&bytes, ChunkType::Clocks);
    let mut forged = bytes.clone();
    for c in clocks.iter().rev() {
        let raw = zstd::bulk::decompress(c.payload(&bytes), 1 << 20).unwrap_or_else(|_| c.payload(&bytes).to_vec());
        let samples = cutr_format::meta::clocks_from_bytes(&raw).unwrap();
        let hostile: Vec<cutr_format::ClockSample> =
            samples.iter().map(|s| cutr_format::ClockSample { realtime_ns: u64::MAX - 1, ..*s }).collect();
        let payload = cutr_format::meta::clocks_to_bytes(&hostile);
        forged = replace_payload(&forged, c.offset, Codec::None, &payload, payload.len() as u64, 0);
    }
    let p = write(&dir, "clocks.cutr", &forged);
    let t = load(&[p], &LoadOptions::default()).unwrap();
    let (a, b) = t.span();
    assert!(b >= a);
    assert_eq!(b - a, truth.t_max - truth.t_min, "the span of a hostile time base is the true one");
    assert!(t.kernels.iter().all(|k| k.end >= k.start));
}

#[test]
fn records_without_their_metadata_are_read_with_the_layouts_their_sizes_match() {
    for api in [130001u32, 28] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.cutr");
        let opts =
            SynthOptions { records: 20_000, buffer_bytes: 256 << 10, cupti_api_version: api, ..Default::default() };
        let truth = write_file(&path, opts).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        // Every metadata chunk damaged (a payload byte flipped: its checksum fails, the footer still matches).
        let metadata = chunks_of(&bytes.clone(), ChunkType::Metadata);
        for c in &metadata {
            bytes[c.offset + cutr_format::container::CHUNK_HEADER_LEN + 100] ^= 0x40;
        }
        let p = write(&dir, "no-meta.cutr", &bytes);
        assert!(Reader::open(&p).unwrap().metadata().is_none());
        let t = load(&[p], &LoadOptions::default()).unwrap();
        assert_eq!(t.records(), truth.records, "API {api}");
        assert_eq!(t.kernels.len() as u64, truth.kernels.values().map(|k| k.0).sum::<u64>());
        assert_eq!(t.processes[0].meta.cupti_api_version, api);
        assert_eq!(
            t.processes[0].warnings,
            [format!(
                "no readable session metadata: records decoded with the layouts of CUPTI API {api}, chosen by their \
                 record sizes; host, command line, devices and API names are unknown"
            )]
        );
        assert_eq!(t.stats.damaged_chunks, metadata.len() as u64, "the metadata chunks");
    }
}

/// Opens a forged file and checks its chunk `seq` is reported damaged (by the reader, or by `decode`'s failures
/// of that chunk type) with a message containing `why`; returns the reader.
fn forged_chunk_is_damage(
    dir: &tempfile::TempDir,
    name: &str,
    forged: &[u8],
    seq: u32,
    why: &str,
    decode_failures: impl Fn(&Reader) -> Vec<Problem>,
) -> Reader {
    let r = Reader::open(&write(dir, name, forged)).unwrap();
    let reported: Vec<String> = damaged(&r)
        .into_iter()
        .filter(|d| d.0 == seq)
        .map(|d| d.1.to_string())
        .chain(decode_failures(&r).iter().map(|b| b.to_string()))
        .collect();
    assert!(!reported.is_empty() && reported.iter().any(|m| m.contains(why)), "{name}: {reported:?}");
    r
}

/// The model loaded the file and kept the damaged chunk `seq` among its problems.
fn loaded_with_the_chunk_reported(t: &cutr_model::Trace, seq: u32, name: &str) {
    assert!(
        t.processes[0].problems.iter().any(|p| matches!(p, Problem::DamagedChunk { seq: s, .. } if *s == seq)),
        "{name}"
    );
}

/// A generated recording with one `counters` chunk of 1,000 NVML-like samples (two metrics), its bytes and truth.
fn with_counters() -> (tempfile::TempDir, Vec<u8>, SynthTruth, cutr_format::CounterSamples) {
    use cutr_format::{CounterMetric, CounterSamples, Writer, WriterOptions};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.cutr");
    let metric = |n: &str| CounterMetric { name: n.into(), unit: "W".into(), description: String::new() };
    let c = CounterSamples {
        source: "nvml".into(),
        device: 0,
        metrics: vec![metric("power"), metric("power cap")],
        t_start: (0..1_000u64).map(|i| 1_700_000_000_000_000_000 + i * 10_000_000).collect(),
        t_end: (0..1_000u64).map(|i| 1_700_000_000_000_000_000 + i * 10_000_000).collect(),
        values: (0..2_000).map(|i| f64::from(i % 700)).collect(),
        lost_samples: 0,
    };
    let w = Writer::create(&path, WriterOptions::default()).unwrap();
    let opts = SynthOptions { records: 20_000, buffer_bytes: 256 << 10, ..Default::default() };
    let (_, truth) = cutr_synth::write_to_with(w, opts, |w, _| w.write_counters(&c).map(|_| ())).unwrap();
    (dir, std::fs::read(&path).unwrap(), truth, c)
}

/// Hostile `counters` chunks (format 1.3): columns that disagree (checksums valid), a header claiming 1 GiB
/// decoded, a cut payload. Each is reported as that damaged chunk; no counter sample of it is kept, and every
/// activity record still loads.
#[test]
fn hostile_counter_chunks_are_damage_and_the_rest_loads() {
    let (dir, bytes, truth, good) = with_counters();
    let at = chunks_of(&bytes, ChunkType::Counters);
    assert_eq!(at.len(), 1);
    let (offset, seq) = (at[0].offset, at[0].header.seq);
    let r = Reader::open(&write(&dir, "ok.cutr", &bytes)).unwrap();
    assert_eq!(r.counter_samples().0, std::slice::from_ref(&good), "the intact chunk reads back as written");

    let mut short = good.clone();
    short.values.pop();
    let raw = short.to_bytes();
    let disagree =
        replace_payload(&bytes, offset, Codec::Zstd, &zstd::encode_all(&raw[..], 3).unwrap(), raw.len() as u64, 0);
    let mut bomb = bytes.clone();
    edit_header(&mut bomb, offset, |h| h.raw_len = 1 << 30);
    let cut = {
        let payload = at[0].payload(&bytes);
        replace_payload(&bytes, offset, Codec::Zstd, &payload[..payload.len() / 2], at[0].header.raw_len, 0)
    };
    for (name, forged, why) in [
        ("disagree.cutr", disagree, "counter samples: 1000 starts, 1000 ends and 1999 values for 2 metrics"),
        ("bomb.cutr", bomb, "1073741824 bytes claimed"),
        ("cut.cutr", cut, ""),
    ] {
        let r = forged_chunk_is_damage(&dir, name, &forged, seq, why, |r| r.counter_samples().1);
        assert!(r.counter_samples().0.is_empty(), "{name}");
        let t = load(&[write(&dir, name, &forged)], &LoadOptions::default()).unwrap();
        assert_eq!((t.records(), t.counters.len()), (truth.records, 0), "{name}");
        loaded_with_the_chunk_reported(&t, seq, name);
    }
}

/// A generated recording with one `graphs` chunk (format 1.5) of two captured nodes and their stacks.
fn with_graphs() -> (tempfile::TempDir, Vec<u8>, SynthTruth, cutr_format::GraphEvents) {
    use cutr_format::{GraphEvent, GraphEventKind, GraphEvents, Writer, WriterOptions};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("graphs.cutr");
    let node = |i: u64| {
        let mut e = GraphEvent::new(GraphEventKind::NodeCreated, 1_700_000_000_000_000_000 + i, 7);
        (e.graph, e.node, e.stack_start, e.stack_len) = (1, (1 << 32) + i, 3 * i as u32, 3);
        e
    };
    let g = GraphEvents {
        events: vec![node(0), node(1)],
        frames: (1..=6).map(|f| 0x40_0000 + f).collect(),
        lost_events: 0,
    };
    let w = Writer::create(&path, WriterOptions::default()).unwrap();
    let opts = SynthOptions { records: 20_000, buffer_bytes: 256 << 10, ..Default::default() };
    let (_, truth) = cutr_synth::write_to_with(w, opts, |w, _| w.write_graph_events(&g).map(|_| ())).unwrap();
    (dir, std::fs::read(&path).unwrap(), truth, g)
}

/// Hostile `graphs` chunks: a stack past the chunk's frames (checksums valid), a header claiming 1 GiB decoded, a
/// cut payload. Each is reported as that damaged chunk, no graph node of it is kept, every activity record loads.
#[test]
fn hostile_graph_chunks_are_damage_and_the_rest_loads() {
    let (dir, bytes, truth, good) = with_graphs();
    let at = chunks_of(&bytes, ChunkType::Graphs);
    assert_eq!(at.len(), 1);
    let (offset, seq) = (at[0].offset, at[0].header.seq);
    let r = Reader::open(&write(&dir, "ok.cutr", &bytes)).unwrap();
    assert_eq!(r.graph_events().0, std::slice::from_ref(&good), "the intact chunk reads back as written");
    let t = load(&[write(&dir, "ok2.cutr", &bytes)], &LoadOptions::default()).unwrap();
    assert_eq!(t.graphs.nodes.len(), 2);

    let mut past = good.clone();
    past.events[1].stack_len = 4;
    let raw = past.to_bytes();
    let past =
        replace_payload(&bytes, offset, Codec::Zstd, &zstd::encode_all(&raw[..], 3).unwrap(), raw.len() as u64, 0);
    let mut bomb = bytes.clone();
    edit_header(&mut bomb, offset, |h| h.raw_len = 1 << 30);
    let cut = {
        let payload = at[0].payload(&bytes);
        replace_payload(&bytes, offset, Codec::Zstd, &payload[..payload.len() / 2], at[0].header.raw_len, 0)
    };
    for (name, forged, why) in [
        ("past.cutr", past, "graph events: event 1's stack ends at frame 7 of 6"),
        ("bomb.cutr", bomb, "1073741824 bytes claimed"),
        ("cut.cutr", cut, ""),
    ] {
        let r = forged_chunk_is_damage(&dir, name, &forged, seq, why, |r| r.graph_events().1);
        assert!(r.graph_events().0.is_empty(), "{name}");
        let t = load(&[write(&dir, name, &forged)], &LoadOptions::default()).unwrap();
        assert_eq!((t.records(), t.graphs.nodes.len()), (truth.records, 0), "{name}");
        loaded_with_the_chunk_reported(&t, seq, name);
    }
}
