//! cutr's occupancy calculator (`cutr_model::occupancy`) against NVIDIA's own: `cuda_occupancy.h` from the CUDA
//! runtime wheel the test set-up installs, compiled with g++ into a small program that reads launches and prints
//! `cudaOccMaxActiveBlocksPerMultiprocessor`'s answer, with Kineto's function attributes and device state. Every
//! launch of a few thousand random ones, on each architecture, must agree.

use std::io::Write;
use std::process::{Command, Stdio};

use cutr_model::occupancy::{DeviceLimits, Launch, active_blocks_per_sm};

/// The oracle: one launch per input line, the resident blocks (or -1 for an error) per output line.
const ORACLE: &str = r#"
#include <cstdio>
#include <climits>
#include "cuda_occupancy.h"
int main() {
    int major, minor, maxTpb, maxTpsm, regsPb, regsPsm, warp, sms;
    unsigned long smemPb, smemPsm, reserved, grid, staticSmem, dynSmem;
    int block, regs;
    while (scanf("%d %d %d %d %d %d %d %lu %lu %lu %d %lu %d %d %lu %lu", &major, &minor, &maxTpb, &maxTpsm,
                 &regsPb, &regsPsm, &warp, &smemPb, &smemPsm, &reserved, &sms, &grid, &block, &regs, &staticSmem,
                 &dynSmem) == 16) {
        cudaOccDeviceProp p;
        p.computeMajor = major; p.computeMinor = minor; p.maxThreadsPerBlock = maxTpb;
        p.maxThreadsPerMultiprocessor = maxTpsm; p.regsPerBlock = regsPb; p.regsPerMultiprocessor = regsPsm;
        p.warpSize = warp; p.sharedMemPerBlock = smemPb; p.sharedMemPerMultiprocessor = smemPsm; p.numSms = sms;
        p.sharedMemPerBlockOptin = smemPb; p.reservedSharedMemPerBlock = reserved;
        cudaOccFuncAttributes a;  // Kineto's: the defaults, then these
        a.maxThreadsPerBlock = INT_MAX; a.numRegs = regs; a.sharedSizeBytes = staticSmem;
        a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_DEFAULT;
        a.maxDynamicSharedSizeBytes = 0;
        cudaOccDeviceState s;
        cudaOccResult r;
        cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, block, dynSmem);
        printf("%d\n", e == CUDA_OCC_SUCCESS ? r.activeBlocksPerMultiprocessor : -1);
    }
    return 0;
}
"#;

/// Devices of each architecture the calculator knows (limits as their `cudaDeviceProp` reports them).
fn devices() -> Vec<DeviceLimits> {
    let dev = |major, minor, max_tpsm, smem_psm: u64, reserved, sms| DeviceLimits {
        compute_major: major,
        compute_minor: minor,
        max_threads_per_block: 1024,
        max_threads_per_multiprocessor: max_tpsm,
        regs_per_block: 65536,
        regs_per_multiprocessor: 65536,
        warp_size: 32,
        shared_mem_per_block: 49152,
        shared_mem_per_multiprocessor: smem_psm,
        reserved_shared_mem_per_block: reserved,
        multiprocessors: sms,
    };
    vec![
        dev(7, 0, 2048, 98304, 0, 80),      // V100
        dev(7, 5, 1024, 65536, 0, 40),      // T4
        dev(8, 0, 2048, 167936, 1024, 108), // A100
        dev(8, 6, 1536, 102400, 1024, 84),  // A10
        dev(8, 9, 1536, 102400, 1024, 142), // L40
        dev(9, 0, 2048, 233472, 1024, 132), // H100 / H200
    ]
}

#[test]
fn active_blocks_per_sm_agree_with_nvidias_calculator() {
    let header = cutr_tests::installed("cupti/runtime-13.0/cuda_occupancy.h", "tools/fetch-cupti.sh");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("oracle.cpp");
    std::fs::write(&src, ORACLE).unwrap();
    let bin = dir.path().join("oracle");
    let built = Command::new("g++")
        .args(["-O1", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg("-I")
        .arg(header.parent().unwrap())
        .output()
        .expect("g++ runs");
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));

    // Random launches: block sizes around warp multiples and past the device limit, registers up to past 255,
    // shared memory up to past the per-block limit.
    let mut seed = 0x0cc0u64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut cases = Vec::new();
    for d in devices() {
        for _ in 0..1500 {
            let launch = Launch {
                grid_blocks: 1 + next(100_000),
                block_threads: (1 + next(1100)) as i32,
                registers_per_thread: next(270) as i32,
                static_shared_memory: if next(3) == 0 { 0 } else { next(52 << 10) },
                dynamic_shared_memory: if next(2) == 0 { 0 } else { next(52 << 10) },
            };
            cases.push((d, launch));
        }
    }
    let mut input = String::new();
    for (d, l) in &cases {
        input.push_str(&format!(
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}\n",
            d.compute_major,
            d.compute_minor,
            d.max_threads_per_block,
            d.max_threads_per_multiprocessor,
            d.regs_per_block,
            d.regs_per_multiprocessor,
            d.warp_size,
            d.shared_mem_per_block,
            d.shared_mem_per_multiprocessor,
            d.reserved_shared_mem_per_block,
            d.multiprocessors,
            l.grid_blocks,
            l.block_threads,
            l.registers_per_thread,
            l.static_shared_memory,
            l.dynamic_shared_memory
        ));
    }
    let mut child = Command::new(&bin).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let theirs: Vec<i64> = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(theirs.len(), cases.len());
    let mut disagree = Vec::new();
    let mut nonzero = 0;
    for ((d, l), want) in cases.iter().zip(&theirs) {
        let ours = active_blocks_per_sm(d, l).unwrap_or(-1);
        if ours != *want {
            disagree.push((d.compute_major, d.compute_minor, *l, ours, *want));
        }
        nonzero += (*want > 0) as usize;
    }
    assert!(
        disagree.is_empty(),
        "{} of {} disagree, e.g. {:?}",
        disagree.len(),
        cases.len(),
        &disagree[..3.min(disagree.len())]
    );
    // The random launches exercise every limit, not just the refusals.
    assert!(nonzero > cases.len() / 3, "{nonzero} of {} launches fit at all", cases.len());
}
