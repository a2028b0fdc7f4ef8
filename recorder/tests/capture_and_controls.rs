//! Capture ranges through the recorder's one CUPTI subscriber, driven by the fake CUPTI's callback API as CUPTI
//! lays its callback data out; and control actions that wait for the records of work in flight instead of forcing
//! them out without timestamps.

use std::sync::Mutex;
use std::time::Duration;

use cutr_format::Reader;
use cutr_recorder::controls::capture::{CaptureEnd, CaptureRange};
use cutr_recorder::fake::{Delivery, FakeCupti, FakeHandle};
use cutr_recorder::ffi::subscriber::{
    CBID_CU_PROFILER_START, CBID_CU_PROFILER_STOP, CBID_CUDA_PROFILER_START, CBID_CUDA_PROFILER_STOP, DOMAIN_DRIVER,
    DOMAIN_RUNTIME,
};
use cutr_recorder::{Config, Recorder};
use cutr_schema::kinds;
use cutr_synth::{Synth, SynthOptions};

/// One recording per process at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn config(dir: &std::path::Path, name: &str) -> Config {
    Config {
        output: dir.join(name).display().to_string(),
        buffer_bytes: 256 << 10,
        memory_cap_bytes: 64 << 20,
        flush_period: Duration::from_millis(50),
        quiet: true,
        // The graph capture context takes callbacks of its own (recorder/tests/graph_context_fake.rs).
        graph_context: None,
        ..Config::default()
    }
}

/// Synthetic CUPTI buffers with their strings made real, and the records in each.
fn buffers(h: &FakeHandle, records: u64) -> Vec<(Vec<u8>, u64)> {
    let mut s = Synth::new(SynthOptions { records, buffer_bytes: 64 << 10, ..Default::default() }).unwrap();
    let plan = cutr_format::CodecPlan::new(s.layouts());
    let mut out = Vec::new();
    let mut texts = std::collections::HashMap::new();
    while let Some(b) = s.next_buffer() {
        texts.extend(b.new_strings);
        let n = cutr_format::codec::buffer_stats(&b.bytes, &plan).records as u64;
        out.push((b.bytes, n));
    }
    for (bytes, _) in &mut out {
        h.realize_strings(bytes, &texts);
    }
    out
}

/// Records in `bytes` that carry start and end timestamps (those CUPTI's forced flush hands over without them).
fn timed_records(bytes: &[u8]) -> u64 {
    let layouts = cutr_recorder::fake::layouts(130001).unwrap();
    let (mut off, mut n) = (0, 0);
    while off + 4 <= bytes.len() {
        let kind = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap());
        let Some(l) = layouts.get(kind) else { break };
        n += u64::from(l.offset("start").is_some() && l.offset("end").is_some());
        off += l.size as usize;
    }
    n
}

fn marks(path: &std::path::Path) -> Vec<f64> {
    let r = Reader::open(path).unwrap();
    let (chunks, bad) = r.counter_samples();
    assert!(bad.is_empty());
    chunks.iter().filter(|c| c.source == "cutr").flat_map(|c| c.values.clone()).collect()
}

fn records_in(path: &std::path::Path) -> u64 {
    Reader::open(path).unwrap().activity_chunks().map(|c| c.header.record_count as u64).sum()
}

/// `cuda-profiler-api`: the capture registers the four profiler callbacks with the one subscriber; recording is
/// on between `cudaProfilerStart` returning and `cudaProfilerStop` being entered, every range (`repeat`), marked.
#[test]
fn profiler_api_ranges_turn_recording_on_and_off_through_the_subscriber() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let cfg = Config {
        capture: Some((CaptureRange::ProfilerApi, CaptureEnd::Repeat(None))),
        ..config(dir.path(), "profiler.cutr")
    };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    let (subscribed, mut callbacks) = h.subscribed();
    callbacks.sort();
    assert!(subscribed);
    assert_eq!(
        callbacks,
        [
            (DOMAIN_DRIVER, CBID_CU_PROFILER_START),
            (DOMAIN_DRIVER, CBID_CU_PROFILER_STOP),
            (DOMAIN_RUNTIME, CBID_CUDA_PROFILER_START),
            (DOMAIN_RUNTIME, CBID_CUDA_PROFILER_STOP),
        ]
    );
    assert!(!rec.is_recording() && h.enabled().is_empty());
    let b = buffers(&h, 3_000);
    for (range, (bytes, n)) in b.iter().take(2).enumerate() {
        h.profiler_start();
        assert!(rec.is_recording(), "range {range}");
        assert!(h.enabled().contains(&kinds::CONCURRENT_KERNEL));
        assert_eq!(h.deliver(bytes, *n), Delivery::Written);
        h.profiler_stop();
        assert!(!rec.is_recording() && h.enabled().is_empty(), "range {range}");
    }
    let path = rec.path().to_path_buf();
    rec.stop().unwrap();
    assert!(!h.subscribed().0, "the session's end unsubscribes");
    assert_eq!(marks(&path), [0.0, 1.0, 0.0, 1.0, 0.0]);
    assert_eq!(records_in(&path), b[0].1 + b[1].1);
}

/// `nvtx:NAME`: only a push of that name opens the range; nested pushes and pops inside keep it open; with
/// `stop` the first range is the only one.
#[test]
fn an_nvtx_range_of_the_name_is_captured_once_with_its_nested_ranges() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let range = CaptureRange::parse("nvtx:step").unwrap();
    let cfg = Config { capture: Some((range, CaptureEnd::Stop)), ..config(dir.path(), "nvtx.cutr") };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    h.nvtx_push("warmup");
    assert!(!rec.is_recording());
    h.nvtx_pop();
    h.nvtx_push("step");
    assert!(rec.is_recording());
    h.nvtx_push("forward");
    h.nvtx_pop();
    assert!(rec.is_recording(), "a nested range's end is not the capture's");
    h.nvtx_pop();
    assert!(!rec.is_recording());
    h.nvtx_push("step");
    assert!(!rec.is_recording(), "`stop`: the first range only");
    h.nvtx_pop();
    let path = rec.path().to_path_buf();
    rec.stop().unwrap();
    assert_eq!(marks(&path), [0.0, 1.0, 0.0]);
}

/// `nvtx:NAME@DOMAIN`: ranges of the name in that domain only (the handle NVTX returned for the domain's name).
#[test]
fn an_nvtx_range_in_a_named_domain_is_told_apart_from_the_default_domain() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let range = CaptureRange::parse("nvtx:step@train").unwrap();
    let cfg = Config { capture: Some((range, CaptureEnd::Repeat(Some(2)))), ..config(dir.path(), "domain.cutr") };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    let other = h.nvtx_domain_create("eval");
    let train = h.nvtx_domain_create("train");
    h.nvtx_push("step");
    h.nvtx_domain_push(other, "step");
    assert!(!rec.is_recording(), "the default domain and another domain do not count");
    h.nvtx_domain_pop(other);
    h.nvtx_pop();
    for _ in 0..3 {
        h.nvtx_domain_push(train, "step");
        h.nvtx_domain_pop(train);
    }
    let path = rec.path().to_path_buf();
    rec.stop().unwrap();
    assert_eq!(marks(&path), [0.0, 1.0, 0.0, 1.0, 0.0], "repeat:2 records two ranges of the three");
}

/// A recording with nothing that needs callbacks (here: `--graph-context off`) leaves CUPTI's callback API to
/// others once it has checked that no other client holds it.
#[test]
fn the_subscriber_is_released_when_no_part_needs_callbacks() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "plain.cutr")).unwrap();
    assert_eq!(h.subscribed(), (false, vec![]));
    rec.stop().unwrap();
}

/// `ctl stop` (here the API's pause) with kernels still running: recording turns off, and the control action
/// waits (bounded) until their records complete instead of forcing them out without timestamps; nothing is lost.
/// A dump with work still running, and recording on, does not force either: the records land when complete. Only
/// the session's end forces out what is still running then, and those records are counted as without timestamps.
#[test]
fn control_actions_wait_for_records_in_flight_and_lose_none() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "inflight.cutr")).unwrap();
    let b = buffers(&h, 4_000);
    assert!(b.len() >= 3, "{} buffers", b.len());
    let finish_later = |h: &FakeHandle, after: Duration| {
        let h = h.clone();
        std::thread::spawn(move || {
            std::thread::sleep(after);
            h.finish_running();
        })
    };

    // A dump while recording, with work running: answered at once, nothing forced.
    assert_eq!(h.hold_running(&b[0].0, b[0].1), Delivery::Written);
    rec.dump().unwrap();
    assert_eq!((h.flushes().1, h.running()), (0, 1), "the dump forced nothing out");
    h.finish_running();

    // A stop with work running for 200 ms: the stop waits for it.
    assert_eq!(h.hold_running(&b[1].0, b[1].1), Delivery::Written);
    let t = finish_later(&h, Duration::from_millis(200));
    let t0 = std::time::Instant::now();
    rec.pause().unwrap();
    let waited = t0.elapsed();
    t.join().unwrap();
    assert!(waited >= Duration::from_millis(190) && waited < Duration::from_secs(2), "{waited:?}");
    assert_eq!(rec.buffers_in_flight(), 0, "the records completed in the wait reached the writer");
    rec.resume().unwrap();

    // Still running at the end: forced out, counted.
    assert_eq!(h.hold_running(&b[2].0, b[2].1), Delivery::Written);
    let path = rec.path().to_path_buf();
    let summary = rec.stop().unwrap();
    assert_eq!(h.flushes().1, 1, "one forced flush: the session's end");
    assert_eq!(summary.loss.zero_timestamp_records, timed_records(&b[2].0));
    assert!(timed_records(&b[1].0) > 0);
    assert_eq!(records_in(&path), b[0].1 + b[1].1 + b[2].1);
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.loss().unwrap().zero_timestamp_records, timed_records(&b[2].0));
}
