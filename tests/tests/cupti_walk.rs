//! NVIDIA's own walker checks our layout tables: the real libcupti of CUDA 13.0 and 12.9 (PyPI wheels, loaded
//! without a GPU) walks buffers we build, and must find each record where our table says the previous one ends.

use std::ffi::c_void;

use cutr_schema::kinds;
use cutr_schema::layouts::builtin;
use cutr_synth::{Synth, SynthOptions};
use cutr_tests::installed;

const CUPTI_SUCCESS: u32 = 0;
const CUPTI_ERROR_MAX_LIMIT_REACHED: u32 = 12;
const CUPTI_ERROR_INVALID_KIND: u32 = 21;

type GetNextRecord = unsafe extern "C" fn(*mut u8, usize, *mut *mut c_void) -> u32;
type GetVersion = unsafe extern "C" fn(*mut u32) -> u32;

struct Cupti {
    next: GetNextRecord,
    version: u32,
}

fn load(rel: &str) -> Cupti {
    let path = installed(rel, "tools/fetch-cupti.sh");
    // SAFETY: libcupti's constructors only set up its own state; we call two functions with valid arguments.
    unsafe {
        let lib = libloading::Library::new(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
        let next = *lib.get::<GetNextRecord>(b"cuptiActivityGetNextRecord\0").unwrap();
        let get_version = *lib.get::<GetVersion>(b"cuptiGetVersion\0").unwrap();
        let mut version = 0;
        assert_eq!(get_version(&mut version), CUPTI_SUCCESS);
        // libcupti registers thread-specific-data destructors: unloading it before the test thread exits would
        // leave them pointing at unmapped code. Keep it loaded for the life of the process.
        std::mem::forget(lib);
        Cupti { next, version }
    }
}

/// Offsets of every record libcupti finds in `buf`, and the status that ended the walk.
fn walk(c: &Cupti, buf: &mut [u8]) -> (Vec<(usize, u32)>, u32) {
    let base = buf.as_mut_ptr();
    let mut rec: *mut c_void = std::ptr::null_mut();
    let mut found = Vec::new();
    loop {
        // SAFETY: the buffer is 8-aligned (allocated as u64s below) and holds buf.len() valid bytes.
        let st = unsafe { (c.next)(base, buf.len(), &mut rec) };
        if st != CUPTI_SUCCESS {
            return (found, st);
        }
        let off = rec as usize - base as usize;
        found.push((off, u32::from_le_bytes(buf[off..off + 4].try_into().unwrap())));
    }
}

/// An 8-aligned byte buffer.
fn aligned(bytes: &[u8]) -> Vec<u64> {
    let mut v = vec![0u64; bytes.len().div_ceil(8)];
    // SAFETY: v has at least bytes.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr() as *mut u8, bytes.len()) };
    v
}

fn as_bytes(v: &mut [u64], len: usize) -> &mut [u8] {
    // SAFETY: u64 storage reinterpreted as bytes, within bounds.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, len) }
}

fn check_release(rel: &str, api: u32) {
    let c = load(rel);
    assert_eq!(c.version, api, "{rel} reports CUPTI API {}", c.version);
    let t = builtin(api).unwrap();
    let sentinel = t.get(kinds::EXTERNAL_CORRELATION).unwrap().size as usize;
    for r in t.records() {
        // [record of this kind][external correlation record]: libcupti must find the second one right where our
        // table says the first one ends.
        let mut bytes = vec![0u8; r.size as usize + sentinel];
        bytes[0..4].copy_from_slice(&r.kind.to_le_bytes());
        bytes[r.size as usize..r.size as usize + 4].copy_from_slice(&kinds::EXTERNAL_CORRELATION.to_le_bytes());
        let len = bytes.len();
        let mut store = aligned(&bytes);
        let (found, end) = walk(&c, as_bytes(&mut store, len));
        assert_eq!(
            found,
            vec![(0, r.kind), (r.size as usize, kinds::EXTERNAL_CORRELATION)],
            "{rel}: {} ({}) is not {} bytes to libcupti",
            r.kind_name,
            r.struct_name,
            r.size
        );
        assert_eq!(end, CUPTI_ERROR_MAX_LIMIT_REACHED);
    }
    if api == 130001 {
        // Why 13.0's table has no SOURCE_LOCATOR: its libcupti no longer knows the kind.
        let mut store = aligned(&[14, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(walk(&c, as_bytes(&mut store, 8)), (vec![], CUPTI_ERROR_INVALID_KIND));
    }
    // A whole synthetic buffer: libcupti finds exactly the records our walker finds, kind by kind.
    let mut s = Synth::new(SynthOptions { cupti_api_version: api, records: 5_000, ..Default::default() }).unwrap();
    let mut total = 0;
    while let Some(b) = s.next_buffer() {
        let len = b.bytes.len();
        let mut store = aligned(&b.bytes);
        let (found, end) = walk(&c, as_bytes(&mut store, len));
        assert_eq!(end, CUPTI_ERROR_MAX_LIMIT_REACHED);
        total += found.len() as u64;
    }
    assert_eq!(total, s.truth().records);
}

#[test]
fn libcupti_13_0_walks_records_where_our_table_puts_them() {
    check_release("cupti/cupti-13.0/lib/libcupti.so.13", 130001);
}

#[test]
fn libcupti_12_9_walks_records_where_our_table_puts_them() {
    check_release("cupti/cupti-12.9/lib/libcupti.so.12", 28);
}

/// Buffers the recorder wrote on the GPU machine (real CUPTI 13.0 records), restored from the file, walked by the
/// real libcupti: it finds exactly the records our reader finds, kind by kind, and the kernels it finds add up to
/// the count and GPU time that `cupti-convert stats` reports.
#[test]
fn libcupti_walks_the_buffers_the_recorder_wrote() {
    let c = load("cupti/cupti-13.0/lib/libcupti.so.13");
    let kernel = builtin(130001).unwrap().get(kinds::CONCURRENT_KERNEL).unwrap().clone();
    let (start, end) = (kernel.offset("start").unwrap(), kernel.offset("end").unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    // Kernel count and GPU time per file, as the floor client and PyTorch's profiler confirm (analyses.rs).
    for (f, kernels, kernel_ns) in [
        ("cuda_workload.cutr", 75, 23_050_891),
        ("pytorch_loop.cutr", 5_653, 36_884_764),
        ("allreduce/allreduce-588.cutr", 228, 10_768_887),
    ] {
        let path = cutr_tests::repo().join("fixtures").join(f);
        let r = cutr_format::Reader::open(&path).unwrap();
        assert_eq!(r.metadata().unwrap().cupti_api_version, 130001);
        let mut ours = std::collections::BTreeMap::new();
        let mut theirs = std::collections::BTreeMap::new();
        let (mut walked_kernels, mut walked_ns) = (0u64, 0u64);
        for chunk in r.activity_chunks() {
            let d = r.decode_activity(chunk).unwrap();
            for g in &d.groups {
                *ours.entry(g.kind).or_insert(0u64) += g.len() as u64;
            }
            let bytes = d.to_original();
            let len = bytes.len();
            let mut store = aligned(&bytes);
            let buf = as_bytes(&mut store, len);
            let (found, status) = walk(&c, buf);
            assert_eq!(status, CUPTI_ERROR_MAX_LIMIT_REACHED, "{f}");
            for (off, kind) in found {
                *theirs.entry(kind).or_insert(0u64) += 1;
                if kind == kinds::CONCURRENT_KERNEL {
                    walked_kernels += 1;
                    walked_ns += u64_at(buf, off + end) - u64_at(buf, off + start);
                }
            }
        }
        assert_eq!(ours, theirs, "{f}");
        assert_eq!((walked_kernels, walked_ns), (kernels, kernel_ns), "{f}: kernels libcupti walked");
        let trace = cutr_model::load_readers(
            std::slice::from_ref(&path),
            std::slice::from_ref(&r),
            &cutr_model::LoadOptions::default(),
        )
        .unwrap();
        let stats = cutr_analyses::stats::compute(&trace, &Default::default());
        let counted: u64 = stats.kernels.iter().map(|k| k.count).sum();
        let timed: u64 = stats.kernels.iter().map(|k| k.total_ns).sum();
        assert_eq!((counted, timed), (kernels, kernel_ns), "{f}: kernels in cupti-convert stats");
    }
}
