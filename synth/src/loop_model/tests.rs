use super::*;

#[test]
fn same_seed_same_bytes_and_truth_adds_up() {
    let opts = SynthOptions { records: 20_000, seed: 7, buffer_bytes: 256 << 10, ..Default::default() };
    let mut a = Synth::new(opts.clone()).unwrap();
    let mut b = Synth::new(opts).unwrap();
    let mut total = 0u64;
    while let Some(x) = a.next_buffer() {
        let y = b.next_buffer().unwrap();
        assert_eq!(x.bytes, y.bytes);
        assert!(x.bytes.len() <= 256 << 10);
        total += x.bytes.len() as u64;
    }
    assert!(b.next_buffer().is_none());
    let t = a.truth();
    assert_eq!(t.raw_bytes, total);
    assert_eq!(t.records, t.records_per_kind.values().sum::<u64>());
    assert!(t.records >= 20_000 && t.records < 20_200, "{}", t.records);
    // Per launch: one kernel record with one runtime (or driver) record, and an external correlation record.
    let kernels: u64 = t.kernels.values().map(|v| v.0).sum();
    assert_eq!(t.records_per_kind[&kinds::CONCURRENT_KERNEL], kernels);
    assert_eq!(kernels, t.steps * 30 + t.graph_kernels);
    assert_eq!(t.graph_kernels, t.steps / GRAPH_EVERY * 4);
    assert_eq!(t.records_per_kind[&kinds::DRIVER], t.steps);
    assert_eq!(t.nvtx_ranges["step"], t.steps);
    assert_eq!(t.records_per_kind[&kinds::MARKER], t.steps * 6);
}

#[test]
fn writes_12_9_layouts_too() {
    let mut s = Synth::new(SynthOptions { cupti_api_version: 28, records: 3_000, ..Default::default() }).unwrap();
    let mut n = 0;
    while let Some(b) = s.next_buffer() {
        n += b.bytes.len();
    }
    assert_eq!(s.layouts().size_of(kinds::CONCURRENT_KERNEL), Some(208));
    assert_eq!(n as u64, s.truth().raw_bytes);
    assert!(Synth::new(SynthOptions { cupti_api_version: 27, ..Default::default() }).is_err());
}

#[test]
fn launches_only_has_one_kernel_runtime_and_external_record_per_launch() {
    let mut s = Synth::new(SynthOptions { launches_only: true, records: 9_000, ..Default::default() }).unwrap();
    while s.next_buffer().is_some() {}
    let t = s.truth();
    let k = t.records_per_kind[&kinds::CONCURRENT_KERNEL];
    assert_eq!(k, t.steps * 28);
    assert_eq!(t.records_per_kind[&kinds::RUNTIME], k);
    assert_eq!(t.records_per_kind[&kinds::EXTERNAL_CORRELATION], k);
    assert_eq!(t.records_per_kind.len(), 3);
}
