//! The trace model against the synthetic generator's exact ground truth.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cutr_model::{Filter, LoadOptions, load};
use cutr_synth::{SynthOptions, write_file};

fn synth(records: u64, api: u32) -> (tempfile::TempDir, PathBuf, cutr_synth::SynthTruth) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.cutr");
    let truth = write_file(
        &path,
        SynthOptions { records, cupti_api_version: api, buffer_bytes: 512 << 10, ..Default::default() },
    )
    .unwrap();
    (dir, path, truth)
}

#[test]
fn rows_and_joins_match_the_generator_exactly() {
    for api in [130001, 28] {
        let (_d, path, truth) = synth(40_000, api);
        let t = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
        let mut kernels: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for k in &t.kernels {
            let e = kernels.entry(t.names.get(k.name)).or_default();
            e.0 += 1;
            e.1 += k.end - k.start;
        }
        let want: BTreeMap<&str, (u64, u64)> = truth.kernels.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(kernels, want, "api {api}");
        let mut copies: BTreeMap<(u8, u8, u8), (u64, u64, u64)> = BTreeMap::new();
        for m in &t.memcpys {
            let e = copies.entry((m.copy_kind, m.src_kind, m.dst_kind)).or_default();
            e.0 += 1;
            e.1 += m.bytes;
            e.2 += m.end - m.start;
        }
        assert_eq!(copies, truth.memcpys);
        let sets = t.memsets.iter().fold((0, 0, 0), |a, m| (a.0 + 1, a.1 + m.bytes, a.2 + m.end - m.start));
        assert_eq!(sets, truth.memsets);
        // Every GPU record finds the call that launched it; graph kernels find their cudaGraphLaunch.
        assert_eq!(t.stats.gpu_without_api, 0);
        assert_eq!(t.stats.graph_kernels_without_launch, 0);
        let launched = t.kernels.iter().filter(|k| t.launcher(k.corr()).is_some()).count()
            + t.memcpys.iter().filter(|k| t.launcher(k.corr()).is_some()).count()
            + t.memsets.iter().filter(|k| t.launcher(k.corr()).is_some()).count();
        assert_eq!(launched as u64, truth.gpu_records_with_api);
        let graph: Vec<_> = t.kernels.iter().filter(|k| k.graph_id != 0).collect();
        assert_eq!(graph.len() as u64, truth.graph_kernels);
        assert!(graph.iter().all(|k| t.api_name(t.launcher(k.corr()).unwrap()) == "cudaGraphLaunch"));
        // NVTX: every push has its pop; step ranges contain forward/backward ranges one level down.
        let mut ranges: BTreeMap<String, u64> = BTreeMap::new();
        for r in &t.ranges {
            let n = t.names.get(r.name);
            let key = if n.starts_with("step ") { "step".to_string() } else { n.to_string() };
            *ranges.entry(key).or_default() += 1;
            assert_eq!(r.depth, if n.starts_with("step ") { 0 } else { 1 }, "{n}");
        }
        assert_eq!(ranges, truth.nvtx_ranges.clone().into_iter().collect());
        assert_eq!((t.stats.nvtx_unclosed_ranges, t.stats.nvtx_ends_without_start), (0, 0));
        // Launches in the forward pass are attributed to the innermost range, "forward".
        let fwd = t.names.lookup("forward").unwrap();
        let in_forward = t
            .apis
            .iter()
            .zip(&t.api_range)
            .filter(|(a, r)| {
                **r != u32::MAX && t.ranges[**r as usize].name == fwd && t.api_name(a) == "cudaLaunchKernel"
            })
            .count() as u64;
        assert_eq!(in_forward, truth.steps * 14);
        // Every call's range is the deepest on its thread that contains it (a brute-force search over all ranges;
        // the model walks the parent chain of the last range to start before the call).
        let brute: Vec<u32> =
            t.apis
                .iter()
                .map(|a| {
                    let inside =
                        t.ranges.iter().enumerate().filter(|(_, r)| {
                            (r.proc, r.tid) == (a.proc, a.tid) && r.start <= a.start && r.end >= a.end
                        });
                    inside.max_by_key(|(i, r)| (r.depth, *i)).map_or(u32::MAX, |(i, _)| i as u32)
                })
                .collect();
        assert_eq!(t.api_range, brute);
        let outside = brute.iter().filter(|&&r| r == u32::MAX).count();
        assert!(outside > 0 && outside < brute.len(), "{outside} of {} calls outside every range", brute.len());
        let per_kind: BTreeMap<u32, u64> = t.records_per_kind.iter().copied().collect();
        assert_eq!(per_kind, truth.records_per_kind);
        assert_eq!(t.stats.zero_timestamp_records + t.stats.inverted_records + t.stats.unresolved_names, 0);
        // Demangled like c++filt.
        let softmax = t.kernels.iter().find(|k| t.names.get(k.name).contains("SoftMax")).unwrap();
        assert_eq!(
            t.kernel_name(softmax),
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, long)"
        );
    }
}

#[test]
fn time_window_and_kind_filters() {
    let (_d, path, truth) = synth(40_000, 130001);
    let all = load(std::slice::from_ref(&path), &LoadOptions::default()).unwrap();
    let (t0, t1) = all.span();
    assert_eq!((t0, t1), (truth.t_min, truth.t_max));
    let mid = t0 + (t1 - t0) / 2;
    let first =
        load(std::slice::from_ref(&path), &LoadOptions { filter: Filter { end: Some(mid), ..Default::default() } })
            .unwrap();
    let second = load(
        std::slice::from_ref(&path),
        &LoadOptions { filter: Filter { start: Some(mid + 1), ..Default::default() } },
    )
    .unwrap();
    let overlapping = all.kernels.iter().filter(|k| k.start <= mid && k.end > mid).count();
    assert_eq!(first.kernels.len() + second.kernels.len(), all.kernels.len() + overlapping);
    assert!(first.kernels.iter().all(|k| k.start <= mid));
    let only = load(
        std::slice::from_ref(&path),
        &LoadOptions { filter: Filter { kinds: vec![cutr_schema::kinds::CONCURRENT_KERNEL], ..Default::default() } },
    )
    .unwrap();
    assert_eq!((only.kernels.len(), only.apis.len(), only.memcpys.len()), (all.kernels.len(), 0, 0));
    assert_eq!(only.stats.gpu_without_api, all.kernels.len() as u64);
}
