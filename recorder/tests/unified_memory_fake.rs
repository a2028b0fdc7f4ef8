//! `--um` against the fake CUPTI: the unified memory counters are configured before the kind is enabled, what
//! CUPTI refuses is named and the rest recorded, and the file keeps the process's executable mappings.

use std::sync::Mutex;
use std::time::Duration;

use cutr_format::Reader;
use cutr_recorder::fake::FakeCupti;
use cutr_recorder::{Config, Recorder};
use cutr_schema::kinds;

/// CUPTI's callbacks are process-wide: one recording at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn config(dir: &std::path::Path, name: &str) -> Config {
    Config {
        output: dir.join(name).display().to_string(),
        buffer_bytes: 256 << 10,
        memory_cap_bytes: 64 << 20,
        flush_period: Duration::from_millis(50),
        quiet: true,
        um: true,
        ..Config::default()
    }
}

#[test]
fn um_configures_every_counter_then_enables_the_kind_and_keeps_the_mappings() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "um.cutr")).unwrap();
    let path = rec.path().to_path_buf();
    // The fake refuses the kind unless the counters were configured first.
    assert_eq!(h.um_configured(), vec![vec![1, 2, 3, 4, 5, 6, 7, 8]]);
    assert!(h.enabled().contains(&kinds::UNIFIED_MEMORY_COUNTER) && h.enabled().contains(&kinds::CONCURRENT_KERNEL));
    rec.stop().unwrap();

    let r = Reader::open(&path).unwrap();
    assert_eq!(r.loss().unwrap().notes, Vec::<String>::new());
    let meta = r.metadata().unwrap();
    assert_eq!(meta.config_value("um"), Some("1"));
    // This test's own code is in one of the mappings, with the file's path.
    let here = um_configures_every_counter_then_enables_the_kind_and_keeps_the_mappings as *const () as usize as u64;
    let m = meta.mappings.iter().find(|m| (m.start..m.end).contains(&here)).expect("own code mapped");
    assert_eq!(std::path::Path::new(&m.path), std::fs::canonicalize("/proc/self/exe").unwrap());
    assert!(meta.mappings.iter().any(|m| m.path.contains("libc.so")), "{:?}", meta.mappings);
}

#[test]
fn um_refused_everywhere_is_named_and_the_recording_goes_on() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    for k in 1..=8 {
        h.refuse_um_counter(k);
    }
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "none.cutr")).unwrap();
    let path = rec.path().to_path_buf();
    assert!(h.um_configured().is_empty());
    assert!(!h.enabled().contains(&kinds::UNIFIED_MEMORY_COUNTER) && h.enabled().contains(&kinds::CONCURRENT_KERNEL));
    rec.stop().unwrap();
    let notes = Reader::open(&path).unwrap().loss().unwrap().notes.clone();
    assert_eq!(notes.len(), 9, "{notes:?}");
    assert_eq!(
        notes[0],
        "unified memory bytes migrated host to device not recorded: CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE"
    );
    assert_eq!(notes[8], "unified memory not recorded: CUPTI refused every counter kind on this system");
}

#[test]
fn the_um_kinds_group_configures_as_the_switch_does() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    h.refuse_um_counter(8);
    let cfg = Config {
        um: false,
        kinds: cutr_recorder::config::parse_kinds("kernel,um").unwrap(),
        ..config(dir.path(), "group.cutr")
    };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    assert_eq!(h.um_configured().last(), Some(&vec![1, 2, 3, 4, 5, 6, 7]));
    assert!(h.enabled().contains(&kinds::UNIFIED_MEMORY_COUNTER));
    rec.stop().unwrap();
}

/// An injected recorder starts inside cuInit, where CUPTI accepts the counters' configuration with no effect and
/// then refuses the kind (CUPTI_ERROR_NOT_READY; workloads/cuda/um_probe.cu on an H100, CUDA 13.0): configured
/// again and enabled when the first context is made, with no note.
#[test]
fn um_refused_while_cuda_initializes_is_enabled_at_the_first_context() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    h.um_not_ready_until_a_context();
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "late.cutr")).unwrap();
    let path = rec.path().to_path_buf();
    assert!(!h.enabled().contains(&kinds::UNIFIED_MEMORY_COUNTER) && h.enabled().contains(&kinds::CONCURRENT_KERNEL));
    h.context_created(0x1000);
    assert!(h.enabled().contains(&kinds::UNIFIED_MEMORY_COUNTER));
    // Configured at the start (no effect inside cuInit), again when enabling found CUPTI not ready (still inside
    // it), and at the context.
    assert_eq!(h.um_configured().len(), 3);
    // A second context changes nothing.
    h.context_created(0x2000);
    assert_eq!(h.enabled().iter().filter(|&&k| k == kinds::UNIFIED_MEMORY_COUNTER).count(), 1);
    rec.stop().unwrap();
    assert_eq!(Reader::open(&path).unwrap().loss().unwrap().notes, Vec::<String>::new());
}

/// Under a capture range nothing is on when the first context is made: unified memory comes on with the others
/// when the range opens.
#[test]
fn um_pending_under_a_capture_range_comes_on_with_the_range() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    h.um_not_ready_until_a_context();
    let mut cfg = config(dir.path(), "range.cutr");
    cfg.capture = Some((
        cutr_recorder::controls::capture::CaptureRange::ProfilerApi,
        cutr_recorder::controls::capture::CaptureEnd::Stop,
    ));
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    h.context_created(0x1000);
    assert!(h.enabled().is_empty());
    h.profiler_start();
    assert!(h.enabled().contains(&kinds::UNIFIED_MEMORY_COUNTER) && h.enabled().contains(&kinds::CONCURRENT_KERNEL));
    h.profiler_stop();
    rec.stop().unwrap();
}
