//! PC sampling's state machine driven by the fake CUPTI, without a GPU: which PC Sampling API calls the sampler
//! makes on which context and when (context creation and destruction, module loads, capture ranges), and what of
//! it reaches the file (cubins once per CRC, the stall-reason table). The fake writes no samples, so the chunks
//! carry no PCs; the fake refuses the kernel activity kinds while a context samples, as CUPTI does.

use std::sync::Mutex;
use std::time::Duration;

use cutr_format::{CubinBlob, PcSamples, Reader};
use cutr_recorder::controls::capture::{CaptureEnd, CaptureRange};
use cutr_recorder::fake::{FAKE_DEVICE, FakeCupti, FakeHandle, fake_cubin_crc, fake_stall_reasons};
use cutr_recorder::pc_sampling::PcSamplingConfig;
use cutr_recorder::{Config, Recorder, Summary};
use cutr_schema::kinds;

/// One recording per process at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// PC sampling with the default stall reasons; the ticker never runs within a test (an hour's flush period), so
/// every collection is one the test's own calls cause.
fn config(dir: &std::path::Path, name: &str, period_log2: Option<u32>) -> Config {
    Config {
        output: dir.join(name).display().to_string(),
        buffer_bytes: 256 << 10,
        memory_cap_bytes: 64 << 20,
        flush_period: Duration::from_secs(3600),
        quiet: true,
        pc_sampling: Some(PcSamplingConfig { period_log2, ..PcSamplingConfig::default() }),
        ..Config::default()
    }
}

/// The calls that enable and configure sampling on `ctx`: the default set of the fake's table (without the
/// `*_not_issued` twin and the counter), and the period.
fn enabling(ctx: &str, period: &str) -> Vec<String> {
    ["context_id", "device_id", "enable", "stall_reasons"]
        .iter()
        .map(|call| format!("{call} {ctx}"))
        .chain([format!("configure {ctx} [0, 2, 3] {period}")])
        .collect()
}

/// The calls that collect and disable `ctx`.
fn disabling(ctx: &str) -> Vec<String> {
    vec![format!("get_data {ctx}"), format!("disable {ctx}")]
}

/// The calls made since `seen` of them were read, and `seen` moved past them.
fn new_calls(h: &FakeHandle, seen: &mut usize) -> Vec<String> {
    let calls = h.pc_calls();
    let new = calls[*seen..].to_vec();
    *seen = calls.len();
    new
}

/// The file's cubins and PC sample chunks, none of them malformed.
fn source_chunks(path: &std::path::Path) -> (Vec<CubinBlob>, Vec<PcSamples>) {
    let r = Reader::open(path).unwrap();
    let (cubins, bad) = r.cubins();
    assert!(bad.is_empty(), "{bad:?}");
    let (samples, bad) = r.pc_samples();
    assert!(bad.is_empty(), "{bad:?}");
    (cubins, samples)
}

/// What a collection of the fake's context `ctx` writes first: no PCs, and the stall reasons counted.
fn first_collection(s: &PcSamples, ctx: u32, period_log2: u32) {
    let table = fake_stall_reasons();
    let counted: Vec<(u32, String)> = [0, 2, 3].iter().map(|&i| table[i].clone()).collect();
    assert_eq!((s.context, s.device, s.period_log2), (ctx, FAKE_DEVICE, period_log2));
    assert_eq!(s.stall_reasons, counted);
    assert_eq!((s.pcs.len(), s.total_samples, s.dropped_samples), (0, 0, 0));
    assert!(s.t_end >= s.t_start, "{} < {}", s.t_end, s.t_start);
}

fn stop(rec: Recorder) -> Summary {
    let summary = rec.stop().unwrap();
    assert!(summary.loss.notes.is_empty(), "{:?}", summary.loss.notes);
    summary
}

/// Without capture ranges: a context samples from its creation to its destruction; each cubin is named (by the
/// fake's CRC) and stored once, whichever module loads it again.
#[test]
fn a_context_samples_from_creation_to_destruction_and_each_cubin_is_stored_once() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "whole.cutr", Some(12))).unwrap();
    let mut seen = 0;
    assert!(h.pc_calls().is_empty(), "{:?}", h.pc_calls());

    h.context_created(0x10);
    assert_eq!(new_calls(&h, &mut seen), enabling("0x10", "Some(12)"));
    let (a, b) = (b"\x7fELF cubin a".to_vec(), b"\x7fELF another cubin".to_vec());
    h.module_loaded(0x10, 7, &a);
    h.module_loaded(0x10, 8, &a);
    h.module_loaded(0x10, 9, &b);
    // The context waits for the ticker to take it from the newly enabled ones: module loads collect nothing yet.
    assert_eq!(new_calls(&h, &mut seen), ["cubin_crc 12 bytes", "cubin_crc 12 bytes", "cubin_crc 18 bytes"]);
    assert!(h.enabled().contains(&kinds::CONCURRENT_KERNEL));

    h.context_destroy_starting(0x10);
    assert_eq!(new_calls(&h, &mut seen), disabling("0x10"));
    let path = rec.path().to_path_buf();
    let summary = stop(rec);
    assert_eq!(new_calls(&h, &mut seen), Vec::<String>::new(), "a destroyed context is not disabled again");
    assert_eq!(summary.cubins, 2);

    let (cubins, samples) = source_chunks(&path);
    assert_eq!(
        cubins,
        [
            CubinBlob { crc: fake_cubin_crc(&a), module_id: 7, data: a },
            CubinBlob { crc: fake_cubin_crc(&b), module_id: 9, data: b },
        ]
    );
    assert_eq!(samples.len(), 1, "{samples:?}");
    first_collection(&samples[0], 0x10, 12);
}

/// With capture ranges: contexts sample only inside a range, enabled after the activity kinds (the fake, as
/// CUPTI, refuses the kernel kind on a context that samples) and collected and disabled at the range's end; a
/// context made inside a range samples at once.
#[test]
fn contexts_sample_only_inside_capture_ranges_after_the_activity_kinds() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let range = CaptureRange::parse("nvtx:step").unwrap();
    let cfg = Config { capture: Some((range, CaptureEnd::Repeat(None))), ..config(dir.path(), "ranges.cutr", None) };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    let mut seen = 0;

    h.context_created(0x10);
    assert_eq!(new_calls(&h, &mut seen), Vec::<String>::new(), "no range is open");
    h.nvtx_push("step");
    assert!(rec.is_recording());
    assert!(h.enabled().contains(&kinds::CONCURRENT_KERNEL), "the kinds are enabled before PC sampling");
    assert_eq!(new_calls(&h, &mut seen), enabling("0x10", "None"));
    h.nvtx_pop();
    assert!(!rec.is_recording() && h.enabled().is_empty());
    assert_eq!(new_calls(&h, &mut seen), disabling("0x10"));

    h.nvtx_push("step");
    assert!(h.enabled().contains(&kinds::CONCURRENT_KERNEL), "range 2");
    assert_eq!(new_calls(&h, &mut seen), enabling("0x10", "None"));
    h.context_created(0x20);
    assert_eq!(new_calls(&h, &mut seen), enabling("0x20", "None"), "made inside a range: enabled at once");
    h.nvtx_pop();
    assert_eq!(new_calls(&h, &mut seen), [disabling("0x10"), disabling("0x20")].concat());

    h.nvtx_push("warmup");
    h.nvtx_pop();
    let path = rec.path().to_path_buf();
    stop(rec);
    assert_eq!(new_calls(&h, &mut seen), Vec::<String>::new(), "outside a range nothing samples");
    let (cubins, samples) = source_chunks(&path);
    assert!(cubins.is_empty());
    // Each enabling writes the stall-reason table with its context's first collection.
    assert_eq!(samples.len(), 3, "{samples:?}");
    for (s, ctx) in samples.iter().zip([0x10, 0x10, 0x20]) {
        first_collection(s, ctx, 0);
    }
}

/// Every collection of a context carries its stall-reason table, not only the first: a flight recorder evicts
/// collections by time, and a dump that kept samples without their table could not name their reasons. The fake
/// says CUPTI took 50 samples at each drain, so each of the ticker's collections (every 10 ms) is written.
#[test]
fn every_collection_carries_its_contexts_stall_reason_table() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    h.set_pc_samples_per_drain(50);
    let cfg = Config { flush_period: Duration::from_millis(10), ..config(dir.path(), "every.cutr", Some(12)) };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    h.context_created(0x10);
    let drains = || h.pc_calls().iter().filter(|c| *c == "get_data 0x10").count();
    let t0 = std::time::Instant::now();
    while drains() < 3 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    h.context_destroy_starting(0x10);
    let path = rec.path().to_path_buf();
    stop(rec);
    let (_, samples) = source_chunks(&path);
    // One collection per drain (the one at destruction included); disabling adds none (CUPTI held nothing more).
    assert!(samples.len() >= 3, "{samples:?}");
    assert_eq!(samples.len(), drains());
    let table = fake_stall_reasons();
    let counted: Vec<(u32, String)> = [0, 2, 3].iter().map(|&i| table[i].clone()).collect();
    for s in &samples {
        assert_eq!((s.context, s.device, s.total_samples), (0x10, FAKE_DEVICE, 50));
        assert_eq!(s.stall_reasons, counted, "the table in every collection");
    }
}
