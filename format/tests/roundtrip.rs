//! Property tests: any records of any kind, in any mix and buffer size, come back byte-identical through the
//! writer, the file and the reader.

use cutr_format::{ChunkType, Reader, SessionMetadata, Writer, WriterOptions};
use cutr_schema::layouts::{SUPPORTED, builtin};
use proptest::prelude::*;

/// A buffer as a list of (index into the layout table, seed for the record's bytes).
fn buffers() -> impl Strategy<Value = Vec<Vec<(usize, u64)>>> {
    prop::collection::vec(prop::collection::vec((0usize..64, any::<u64>()), 0..300), 1..6)
}

fn build(table: &cutr_schema::LayoutTable, spec: &[(usize, u64)]) -> Vec<u8> {
    let recs = table.records();
    let mut out = Vec::new();
    for &(i, seed) in spec {
        let r = &recs[i % recs.len()];
        let mut x = seed | 1;
        let start = out.len();
        for _ in 0..r.size {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.push(x as u8);
        }
        out[start..start + 4].copy_from_slice(&r.kind.to_le_bytes());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_records_of_every_kind_round_trip(spec in buffers(), api_pick in 0usize..2, tail in prop::collection::vec(any::<u8>(), 0..40)) {
        let api = SUPPORTED[api_pick].0;
        let table = builtin(api).unwrap();
        let meta = SessionMetadata { cupti_api_version: api, layouts: Some(table.clone()), ..Default::default() };
        let mut w = Writer::new(Vec::new(), WriterOptions::default()).unwrap();
        w.write_metadata(&meta).unwrap();
        let mut originals = Vec::new();
        for (i, b) in spec.iter().enumerate() {
            let mut bytes = build(&table, b);
            if i == spec.len() - 1 {
                // Bytes that are no record of a known kind must survive too.
                bytes.extend_from_slice(&[0xEE; 4]);
                bytes.extend_from_slice(&tail);
            }
            let stats = w.write_activity(&bytes).unwrap();
            prop_assert_eq!(stats.records as usize, b.len());
            originals.push(bytes);
        }
        let file = w.finish().unwrap();
        let r = Reader::from_bytes(file).unwrap();
        prop_assert!(r.problems().is_empty());
        prop_assert!(r.clean_close());
        let activity: Vec<_> = r.activity_chunks().cloned().collect();
        prop_assert_eq!(activity.len(), originals.len());
        for (c, orig) in activity.iter().zip(&originals) {
            prop_assert_eq!(c.chunk_type(), ChunkType::Activity);
            let d = r.decode_activity(c).unwrap();
            prop_assert_eq!(&d.to_original(), orig);
            let listed: u32 = c.kind_counts.iter().map(|k| k.1).sum();
            prop_assert_eq!(listed as usize, d.record_count());
        }
    }
}

#[test]
fn synthetic_trace_round_trips_through_a_file_and_the_footer_counts_match() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.cutr");
    let opts = cutr_synth::SynthOptions { records: 50_000, buffer_bytes: 512 << 10, ..Default::default() };
    let truth = cutr_synth::write_file(&path, opts.clone()).unwrap();
    let r = Reader::open(&path).unwrap();
    assert!(r.recovery().is_none());
    assert!(r.problems().is_empty());
    let v = r.verify();
    assert!(v.damaged.is_empty());
    let got: std::collections::BTreeMap<u32, u64> = v.records_per_kind.iter().copied().collect();
    assert_eq!(got, truth.records_per_kind);
    assert_eq!(v.good_activity_chunks as u64, truth.buffers);
    // Every buffer comes back exactly as the generator produced it, though `verify` let the kernel take back the
    // pages of every chunk it read (`release_pages`): they fault in again with the same bytes.
    let mut s = cutr_synth::Synth::new(opts).unwrap();
    let mut originals = Vec::new();
    while let Some(b) = s.next_buffer() {
        originals.push(b.bytes);
    }
    let decoded = r.par_map_activity(|_, d| d.unwrap().to_original());
    assert_eq!(decoded, originals);
    // Strings resolve, clocks and loss are there.
    let kernel_name_ptr = 0x7f3a_1000_0000u64;
    assert_eq!(r.strings().resolve(kernel_name_ptr, u32::MAX), Some(cutr_synth::KERNELS[0].name));
    assert!(r.clocks().len() >= 2);
    assert!(r.loss().unwrap().is_final);
    assert_eq!(r.metadata().unwrap().writer, "cutr-synth");
}
