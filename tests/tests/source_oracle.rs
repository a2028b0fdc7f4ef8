//! Our SASS -> file:line map against NVIDIA's: for every instruction of every function of a real `-lineinfo`
//! cubin (fixtures/cubins, built by nvcc 13.0 for sm_90), `cuptiGetSassToSourceCorrelation` of the real libcupti
//! (CUDA 13.0's, from the PyPI wheel; it needs no GPU) and `cutr_source::SourceMap::locate` give the same file,
//! directory and line.

use cutr_source::SourceMap;
use cutr_tests::installed;
use cutr_tests::sass_to_source::{SassToSource, SassToSourceFn, nvidia};

#[test]
fn every_instruction_maps_to_the_line_nvidia_maps_it_to() {
    assert_eq!(std::mem::size_of::<SassToSource>(), 64);
    let path = installed("cupti/cupti-13.0/lib/libcupti.so.13", "tools/fetch-cupti.sh");
    // SAFETY: loading libcupti runs only its own constructors; it stays loaded for the process (as in cupti_walk).
    let f: SassToSourceFn = unsafe {
        let lib = libloading::Library::new(&path).unwrap();
        let f = *lib.get::<SassToSourceFn>(b"cuptiGetSassToSourceCorrelation\0").unwrap();
        std::mem::forget(lib);
        f
    };
    let mut same = 0;
    let mut differ = Vec::new();
    for name in ["source_workload.sm_90.cubin", "inline.sm_90.cubin"] {
        let cubin = std::fs::read(cutr_tests::repo().join("fixtures/cubins").join(name)).unwrap();
        let map = SourceMap::from_cubin(&cubin).unwrap();
        for func in map.functions() {
            // sm_90 instructions are 16 bytes.
            for pc in (0..func.size).step_by(16) {
                let ours = map.locate(&func.name, pc).map(|l| (l.position.dir, l.position.file, l.position.line));
                let theirs = nvidia(f, &cubin, &func.name, pc);
                if ours == theirs {
                    same += 1;
                } else {
                    differ.push((name, func.name.clone(), pc, ours, theirs));
                }
            }
        }
    }
    assert_eq!(differ, Vec::new());
    // 88 instructions of fma_chain, 120 of chase and 24 of the inlining kernel, each with a line (the innermost,
    // for inlined ones, as NVIDIA gives).
    assert_eq!(same, 232);
    let cubin = std::fs::read(cutr_tests::repo().join("fixtures/cubins/source_workload.sm_90.cubin")).unwrap();
    let map = SourceMap::from_cubin(&cubin).unwrap();
    let hot = |f: &str, pc: u64| map.locate(f, pc).map(|l| (l.position.file, l.position.line));
    // The hottest PCs NVIDIA's pc_sampling_continuous sample found on an H100
    // (bench/gpu/thread_names_source_workload_nvidia_pcs.sh, pc_sampling_utility): the dependent load of chase and
    // the FMA of fma_chain.
    assert_eq!(hot("_Z5chasePKjjiPj", 816), Some(("source_workload.cu".into(), 43)));
    assert_eq!(hot("_Z9fma_chainPfi", 352), Some(("source_workload.cu".into(), 51)));
}
