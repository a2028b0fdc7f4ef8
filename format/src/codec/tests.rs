use super::*;
use cutr_schema::kinds;
use cutr_schema::layouts::builtin;

fn plan() -> CodecPlan {
    CodecPlan::new(&builtin(130001).unwrap())
}

fn record(kind: u32, size: usize, fill: u8) -> Vec<u8> {
    let mut r = vec![fill; size];
    r[0..4].copy_from_slice(&kind.to_le_bytes());
    r
}

#[test]
fn interleaved_kinds_and_a_tail_come_back_exactly() {
    let p = plan();
    let mut buf = Vec::new();
    for i in 0..50u8 {
        buf.extend(record(kinds::EXTERNAL_CORRELATION, 24, i));
        buf.extend(record(kinds::RUNTIME, 40, i.wrapping_mul(7)));
        buf.extend(record(kinds::CONCURRENT_KERNEL, 216, 255 - i));
    }
    buf.extend(record(999, 24, 1)); // unknown kind: the rest is tail
    buf.extend([1, 2, 3]);
    let (enc, stats) = Encoder::new(3).encode(&buf, &p);
    assert_eq!(stats.records, 150);
    assert_eq!(stats.per_kind, vec![(39, 50), (5, 50), (10, 50)]);
    assert_eq!(stats.unparsed_bytes, 27);
    assert_eq!(stats.unparsed_kind, Some(999));
    let dec = decode(&enc, buf.len() as u64).unwrap();
    assert_eq!(dec.to_original(), buf);
    assert_eq!(dec.group(kinds::RUNTIME).unwrap().len(), 50);
    assert_eq!(dec, group_raw(&buf, &p));
}

#[test]
fn extreme_values_survive_the_transforms() {
    let p = plan();
    let mut buf = Vec::new();
    for (s, e, c) in [(u64::MAX, 0u64, u32::MAX), (0, u64::MAX, 0), (1 << 63, 1 << 62, 1 << 31), (5, 5, 7)] {
        let mut r = record(kinds::RUNTIME, 40, 0);
        r[8..16].copy_from_slice(&s.to_le_bytes());
        r[16..24].copy_from_slice(&e.to_le_bytes());
        r[32..36].copy_from_slice(&c.to_le_bytes());
        buf.extend(r);
    }
    let (enc, stats) = Encoder::new(1).encode(&buf, &p);
    assert_eq!(stats.inverted_timestamps, 2);
    assert_eq!(decode(&enc, buf.len() as u64).unwrap().to_original(), buf);
}

/// A unified memory record's `end` is meaningless for CPU page faults (CUPTI leaves it 0 on an H100): no
/// inverted times counted, and the chunk is timed by the starts.
#[test]
fn unified_memory_is_timed_by_its_start() {
    let p = plan();
    let mut buf = Vec::new();
    for (start, end) in [(1_000u64, 0u64), (2_000, 2_500), (1_500, 0)] {
        let mut r = record(kinds::UNIFIED_MEMORY_COUNTER, 104, 0);
        r[16..24].copy_from_slice(&start.to_le_bytes());
        r[24..32].copy_from_slice(&end.to_le_bytes());
        buf.extend(r);
    }
    let (enc, stats) = Encoder::new(1).encode(&buf, &p);
    assert_eq!((stats.records, stats.inverted_timestamps, stats.zero_timestamps), (3, 0, 0));
    assert_eq!((stats.t_min, stats.t_max), (1_000, 2_000));
    assert_eq!(decode(&enc, buf.len() as u64).unwrap().to_original(), buf);
}

#[test]
fn tiled_transposition_matches_the_definition() {
    for (n, s) in [
        (0, 8),
        (1, 8),
        (7, 16),
        (8, 8),
        (9, 24),
        (17, 13),
        (64, 216),
        (1001, 40),
        (16, 16),
        (33, 17),
        (130, 200),
        (200, 130),
        (75, 48),
    ] {
        let records: Vec<u8> = (0..n * s).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut planes = vec![0u8; n * s];
        records_to_planes(&records, n, s, &mut planes);
        for i in 0..n {
            for j in 0..s {
                assert_eq!(planes[j * n + i], records[i * s + j], "n={n} s={s} i={i} j={j}");
            }
        }
        let mut back = vec![0u8; n * s];
        planes_to_records(&planes, n, s, 0, &mut back);
        assert_eq!(back, records);
        // Any run of records, as the parallel restore cuts them (at multiples of 8, and not).
        for (first, m) in
            [(0, n / 2), (n / 2, n - n / 2), (n.min(8), n.saturating_sub(8).min(9)), (n.min(3), n.saturating_sub(3))]
        {
            let mut part = vec![0u8; m * s];
            planes_to_records(&planes, n, s, first, &mut part);
            assert_eq!(part, records[first * s..(first + m) * s], "n={n} s={s} first={first} m={m}");
        }
    }
}

/// Groups larger than one transposition task restore exactly, with their running deltas.
#[test]
fn random_records_in_a_split_group_restore_exactly() {
    // Every byte random (xorshift): each transformed field's deltas wrap, in 8 and 4 bytes, and the group
    // (4,000 kernels, 864 KB) is transposed by several tasks before its running deltas are undone.
    let p = plan();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = Vec::new();
    for _ in 0..4_000 {
        let mut r = record(kinds::CONCURRENT_KERNEL, 216, 0);
        for b in r[4..].iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        buf.extend(r);
    }
    const { assert!(4_000 * 216 > 6 * TRANSPOSE_TASK_BYTES) };
    let (enc, _) = Encoder::new(1).encode(&buf, &p);
    assert_eq!(decode(&enc, buf.len() as u64).unwrap().to_original(), buf);
    // The kernel plan has running deltas of both widths.
    let kp = p.get(kinds::CONCURRENT_KERNEL).unwrap();
    assert!(kp.ops.iter().any(|o| o.kind == OpKind::DeltaPrev && o.width == 4));
    assert!(kp.ops.iter().any(|o| o.kind == OpKind::DeltaPrev && o.width == 8));
}

#[test]
fn large_groups_split_across_tasks_restore_exactly() {
    let p = plan();
    let mut buf = Vec::new();
    // 3,000 kernel records (216 B each: 648 KB, several tasks) with timestamps that make running deltas.
    for i in 0..3_000u64 {
        let mut r = record(kinds::CONCURRENT_KERNEL, 216, (i % 251) as u8);
        r[8..16].copy_from_slice(&(1_000_000 + i * 1_700).to_le_bytes());
        r[16..24].copy_from_slice(&(1_000_900 + i * 1_700 + i % 7).to_le_bytes());
        buf.extend(r);
        buf.extend(record(kinds::RUNTIME, 40, (i * 3 % 256) as u8));
    }
    const { assert!(3_000 * 216 > 4 * TRANSPOSE_TASK_BYTES) };
    let (enc, _) = Encoder::new(3).encode(&buf, &p);
    let d = decode(&enc, buf.len() as u64).unwrap();
    assert_eq!(d.group(kinds::CONCURRENT_KERNEL).unwrap().len(), 3_000);
    assert_eq!(d.to_original(), buf);
}

#[test]
fn empty_buffer_and_damaged_payloads() {
    let p = plan();
    let (enc, stats) = Encoder::new(3).encode(&[], &p);
    assert_eq!(stats.records, 0);
    assert_eq!(decode(&enc, 0).unwrap().to_original(), Vec::<u8>::new());
    assert!(matches!(decode(&enc, 8), Err(ChunkError::SizeMismatch { expected: 8, actual: 0 })));
    assert!(matches!(decode(b"garbage", 8), Err(ChunkError::Decompress(_))));
    let image = zstd::bulk::compress(&[1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], 3).unwrap();
    assert!(matches!(decode(&image, 40), Err(ChunkError::Malformed(_))));
}
