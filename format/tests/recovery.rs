//! A file cut at any byte, or with any byte flipped, never panics the reader; what it recovers is exactly the
//! complete, undamaged chunks.

use cutr_format::{ChunkType, FormatError, Problem, Reader, Writer, WriterOptions};
use cutr_synth::{SynthOptions, write_to};

/// A small file with many chunks: (bytes, [(chunk start, chunk end, type, records)]).
/// (start, end of payload, type, records) of each chunk.
type ChunkSpans = Vec<(usize, usize, ChunkType, u32)>;

fn small_file() -> (Vec<u8>, ChunkSpans) {
    let w = Writer::new(
        Vec::new(),
        WriterOptions { file_id: Some([7; 16]), created_unix_ns: Some(1), ..Default::default() },
    )
    .unwrap();
    let opts = SynthOptions { records: 1_500, buffer_bytes: 5 << 10, seed: 3, ..Default::default() };
    let (bytes, truth) = write_to(w, opts).unwrap();
    let r = Reader::from_bytes(bytes.clone()).unwrap();
    let chunks: Vec<_> = r
        .chunks()
        .iter()
        .map(|c| {
            let start = c.offset as usize;
            (start, start + 56 + c.header.stored_len as usize, c.chunk_type(), c.header.record_count)
        })
        .collect();
    assert_eq!(chunks.iter().map(|c| c.3 as u64).sum::<u64>(), truth.records);
    assert!(chunks.iter().filter(|c| c.2 == ChunkType::Activity).count() >= 20);
    (bytes, chunks)
}

fn decoded_records(r: &Reader) -> u64 {
    r.par_map_activity(|_, d| d.map(|d| d.record_count() as u64).unwrap_or(0)).iter().sum()
}

#[test]
fn cut_at_every_byte_recovers_exactly_the_complete_chunks() {
    let (bytes, chunks) = small_file();
    let total: u64 = chunks.iter().map(|c| c.3 as u64).sum();
    for cut in 0..=bytes.len() {
        let prefix = bytes[..cut].to_vec();
        match Reader::from_bytes(prefix) {
            Err(e) => {
                assert!(cut < 64, "cut at {cut}: {e}");
                assert!(matches!(e, FormatError::NotCutr | FormatError::TooShort { .. }), "cut at {cut}: {e}");
            }
            Ok(r) => {
                assert!(cut >= 64);
                let expected: u64 = chunks.iter().filter(|c| c.1 <= cut).map(|c| c.3 as u64).sum();
                let listed: u64 = r.activity_chunks().map(|c| c.header.record_count as u64).sum();
                assert_eq!(listed, expected, "cut at {cut}");
                // Decoding every recovered chunk of every prefix is slow; decode a spread of them.
                if cut % 61 == 0 {
                    assert_eq!(decoded_records(&r), expected, "cut at {cut}");
                }
                if cut == bytes.len() {
                    assert!(r.recovery().is_none() && r.problems().is_empty());
                    assert_eq!(expected, total);
                } else {
                    let rec = r.recovery().expect("a cut file is recovered");
                    // What was lost is reported: the bytes of the chunk the cut fell into.
                    let partial = chunks.iter().find(|c| c.0 < cut && cut < c.1);
                    match partial {
                        Some(&(start, _, _, records)) => {
                            assert_eq!(rec.lost_bytes, (cut - start) as u64, "cut at {cut}");
                            let reported = r.problems().iter().any(|p| match p {
                                Problem::TruncatedChunk { offset, records: n, .. } => {
                                    *offset == start as u64 && *n == records
                                }
                                Problem::TruncatedHeader { offset, .. } => *offset == start as u64,
                                _ => false,
                            });
                            assert!(reported, "cut at {cut}: {:?}", r.problems());
                        }
                        None => {
                            // Inside the footer chunk (not a data chunk): a partial footer is reported as lost
                            // bytes; once the footer is complete, a cut trailer loses nothing.
                            let footer_start = chunks.last().unwrap().1.next_multiple_of(8);
                            let footer_end = bytes.len() - 32;
                            let lost = if cut > footer_start && cut < footer_end { cut - footer_start } else { 0 };
                            assert_eq!(rec.lost_bytes, lost as u64, "cut at {cut}: {:?}", r.problems());
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn flipped_bytes_lose_only_the_chunk_they_hit() {
    let (bytes, chunks) = small_file();
    let total: u64 = chunks.iter().map(|c| c.3 as u64).sum();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut tried = 0;
    while tried < 3000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let pos = (x % bytes.len() as u64) as usize;
        let bit = 1u8 << ((x >> 60) % 8);
        tried += 1;
        let mut damaged = bytes.clone();
        damaged[pos] ^= bit;
        let r = match Reader::from_bytes(damaged) {
            Ok(r) => r,
            Err(e) => {
                assert!(pos < 64, "flip at {pos}: {e}");
                continue;
            }
        };
        assert!(pos >= 64, "a damaged file header must be refused (flip at {pos})");
        let hit = chunks.iter().find(|c| c.0 <= pos && pos < c.1);
        let expected = match hit {
            Some(&(_, _, ChunkType::Activity, n)) => total - n as u64,
            _ => total,
        };
        assert_eq!(decoded_records(&r), expected, "flip at {pos}");
        // A damaged activity chunk is reported, never silently dropped.
        if let Some(&(start, _, ChunkType::Activity, _)) = hit {
            let v = r.verify();
            let reported = r.problems().iter().chain(&v.damaged).any(|p| match p {
                Problem::DamagedChunk { offset, .. } => *offset == start as u64,
                Problem::UnreadableBytes { offset, .. } => *offset == start as u64,
                _ => false,
            });
            assert!(reported, "flip at {pos} not reported: {:?} {:?}", r.problems(), v.damaged);
        }
    }
}

#[test]
fn not_cutr_newer_major_and_empty_files_are_refused_clearly() {
    assert!(matches!(Reader::from_bytes(b"{\"traceEvents\": []}".to_vec()), Err(FormatError::NotCutr)));
    assert!(matches!(Reader::from_bytes(Vec::new()), Err(FormatError::NotCutr)));
    let (mut bytes, _) = small_file();
    bytes[8] = 9; // major version 9
    let e = Reader::from_bytes(bytes).err().unwrap();
    assert!(matches!(e, FormatError::NewerMajor { major: 9, minor: cutr_format::FORMAT_MINOR, supported: 1 }));
    assert!(e.to_string().contains("upgrade cutr"), "{e}");
    let e = Reader::open(std::path::Path::new("/nonexistent/x.cutr")).err().unwrap();
    assert!(matches!(&e, FormatError::Io { path, .. } if path.ends_with("x.cutr")), "{e}");
    assert_eq!(e.to_string(), "No such file or directory (os error 2)");
}

/// The last readable session metadata wins; superseded ones are not even decoded, and a damaged last one falls
/// back to the one before it, reported.
#[test]
fn the_last_readable_metadata_wins() {
    use cutr_format::SessionMetadata;
    let mut w = Writer::new(Vec::new(), WriterOptions::default()).unwrap();
    w.write_metadata(&SessionMetadata { writer: "at start".into(), ..Default::default() }).unwrap();
    w.write_metadata(&SessionMetadata { writer: "at close".into(), ..Default::default() }).unwrap();
    let bytes = w.finish().unwrap();
    let r = Reader::from_bytes(bytes.clone()).unwrap();
    let spans: Vec<(usize, usize)> = r
        .chunks()
        .iter()
        .filter(|c| c.chunk_type() == ChunkType::Metadata)
        .map(|c| (c.offset as usize, c.offset as usize + 56 + c.header.stored_len as usize))
        .collect();
    assert_eq!(spans.len(), 2);
    assert_eq!((r.metadata().unwrap().writer.as_str(), r.problems().len()), ("at close", 0));
    // A flipped payload byte in the one written at start: never read, nothing to report.
    let mut early = bytes.clone();
    early[spans[0].1 - 1] ^= 0x40;
    let r = Reader::from_bytes(early).unwrap();
    assert_eq!((r.metadata().unwrap().writer.as_str(), r.problems().len()), ("at close", 0));
    // In the last one: the one before it is used, and the damaged one reported.
    let mut late = bytes;
    late[spans[1].1 - 1] ^= 0x40;
    let r = Reader::from_bytes(late).unwrap();
    assert_eq!(r.metadata().unwrap().writer, "at start");
    assert!(
        matches!(r.problems(), [Problem::DamagedChunk { offset, chunk_type: ChunkType::Metadata, .. }] if *offset == spans[1].0 as u64),
        "{:?}",
        r.problems()
    );
}
