//! The recorder against a fake CUPTI (no GPU): buffer lifecycle across threads, the memory cap and loss
//! accounting, refusals, and what lands in the file, byte for byte.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use cutr_format::Reader;
use cutr_recorder::fake::{Delivery, FakeCupti, FakeHandle};
use cutr_recorder::{Config, Recorder, RecorderError};
use cutr_schema::kinds;
use cutr_synth::{Synth, SynthOptions};

/// CUPTI's callbacks are process-wide: one recording at a time.
static SERIAL: Mutex<()> = Mutex::new(());

struct Buffers {
    bytes: Vec<Vec<u8>>,
    counts: Vec<u64>,
    texts: HashMap<u64, String>,
    records_per_kind: BTreeMap<u32, u64>,
}

fn synth_buffers(records: u64, buffer_bytes: usize) -> Buffers {
    let mut s = Synth::new(SynthOptions { records, buffer_bytes, ..Default::default() }).unwrap();
    let plan = cutr_format::CodecPlan::new(s.layouts());
    let mut out =
        Buffers { bytes: Vec::new(), counts: Vec::new(), texts: HashMap::new(), records_per_kind: BTreeMap::new() };
    while let Some(b) = s.next_buffer() {
        out.counts.push(cutr_format::codec::buffer_stats(&b.bytes, &plan).records as u64);
        out.texts.extend(b.new_strings);
        out.bytes.push(b.bytes);
    }
    out.records_per_kind = s.truth().records_per_kind.clone();
    out
}

fn config(dir: &std::path::Path, name: &str) -> Config {
    Config {
        output: dir.join(name).display().to_string(),
        buffer_bytes: 256 << 10,
        memory_cap_bytes: 64 << 20,
        flush_period: Duration::from_millis(50),
        quiet: true,
        ..Config::default()
    }
}

fn realize(h: &FakeHandle, b: &mut Buffers) {
    let texts = b.texts.clone();
    for buf in &mut b.bytes {
        h.realize_strings(buf, &texts);
    }
}

#[test]
fn buffers_from_many_threads_reach_the_file_byte_for_byte() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let mut b = synth_buffers(60_000, 200 << 10);
    realize(&h, &mut b);
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "t.cutr")).unwrap();
    let path = rec.path().to_path_buf();
    assert_eq!(path, dir.path().join("t.cutr"));
    // Default kinds are enabled, noisy API calls switched off at the source.
    let enabled = h.enabled();
    assert!(enabled.contains(&kinds::CONCURRENT_KERNEL) && enabled.contains(&kinds::MARKER));
    let mut off = h.disabled_api();
    off.sort();
    // cudaGetLastError, cudaPeekAtLastError, cudaSetDevice, cudaGetDevice; cuCtxGetCurrent,
    // cuDevicePrimaryCtxGetState, cuKernelGetAttribute (cbids of cupti_*_cbid.h).
    assert_eq!(off, vec![(1, 304), (1, 392), (1, 686), (2, 10), (2, 11), (2, 16), (2, 17)]);
    // The delivering threads are named as an application names its threads; they stay alive until a periodic
    // flush has seen them.
    let (tids_tx, tids_rx) = std::sync::mpsc::channel();
    let barrier = std::sync::Barrier::new(5);
    std::thread::scope(|s| {
        for t in 0..4 {
            let (h, bytes, counts, tids_tx, barrier) = (h.clone(), &b.bytes, &b.counts, tids_tx.clone(), &barrier);
            std::thread::Builder::new()
                .name(format!("deliver-{t}"))
                .spawn_scoped(s, move || {
                    // SAFETY: gettid has no preconditions.
                    tids_tx.send((unsafe { libc::gettid() } as u32, format!("deliver-{t}"))).unwrap();
                    for i in (t..bytes.len()).step_by(4) {
                        assert_eq!(h.deliver(&bytes[i], counts[i]), Delivery::Written);
                    }
                    barrier.wait();
                })
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(120)); // a periodic flush while they live
        barrier.wait();
    });
    std::thread::sleep(Duration::from_millis(120)); // let a periodic flush happen
    let summary = rec.stop().unwrap();
    assert!(h.enabled().is_empty(), "recording ends with every kind disabled");
    let (flushes, forced) = h.flushes();
    assert!(flushes >= 2 && forced == 1, "periodic flushes {flushes}, forced {forced}");
    let total: u64 = b.counts.iter().sum();
    assert_eq!(summary.records, total);
    assert_eq!(summary.buffers, b.bytes.len() as u64);
    assert!(summary.loss.is_clean(), "{:?}", summary.loss);

    let r = Reader::open(&path).unwrap();
    assert!(r.clean_close() && r.problems().is_empty());
    let mut got: Vec<Vec<u8>> = r.par_map_activity(|_, d| d.unwrap().to_original());
    let mut want = b.bytes.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "every buffer, exactly as CUPTI filled it");
    let per_kind: BTreeMap<u32, u64> = r.verify().records_per_kind.into_iter().collect();
    assert_eq!(per_kind, b.records_per_kind);
    // Every kernel name pointer resolves to its text.
    let m = r.metadata().unwrap();
    assert_eq!((m.writer.as_str(), m.cupti_api_version, m.pid), ("cutr-recorder", 130001, std::process::id()));
    let layouts = r.layouts().unwrap().clone();
    let name = cutr_format::records::FieldReader::new(layouts.get(kinds::CONCURRENT_KERNEL).unwrap(), "name").unwrap();
    let mut names = std::collections::BTreeSet::new();
    for c in r.activity_chunks() {
        let d = r.decode_activity(c).unwrap();
        if let Some(g) = d.group(kinds::CONCURRENT_KERNEL) {
            for rec in g.iter() {
                names.insert(
                    r.strings().resolve(name.u64(rec), c.header.seq).expect("kernel name resolves").to_string(),
                );
            }
        }
    }
    let expected: std::collections::BTreeSet<String> = cutr_synth::KERNELS.iter().map(|k| k.name.to_string()).collect();
    assert_eq!(names, expected);
    // Each delivering thread's OS name, from the `threads` chunks.
    drop(tids_tx);
    for (tid, name) in tids_rx.iter() {
        assert_eq!(r.thread_names().get(&tid), Some(&name), "{:?}", r.thread_names());
    }
    let loss = r.loss().unwrap();
    assert!(loss.is_final && loss.is_clean());
    assert!(r.clocks().len() >= 3, "start, periodic and end clock samples: {}", r.clocks().len());
    let cfg: HashMap<_, _> = m.config.iter().cloned().collect();
    assert_eq!(cfg["buffer_size"], (256 << 10).to_string());
    assert!(m.callback_names.iter().any(|(d, c, n)| (*d, *c, n.as_str()) == (2, 211, "cudaLaunchKernel_v7000")));
}

#[test]
fn memory_cap_refuses_buffers_and_counts_every_lost_record() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let mut b = synth_buffers(20_000, 200 << 10);
    realize(&h, &mut b);
    assert!(b.bytes.len() >= 5);
    // Two buffers at most; CUPTI (the fake) holds them until a flush, so the third and later requests fail.
    let cfg = Config {
        memory_cap_bytes: 512 << 10,
        initial_buffers: 1,
        flush_period: Duration::from_secs(60),
        ..config(dir.path(), "cap.cutr")
    };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    let path = rec.path().to_path_buf();
    assert_eq!(h.hold(&b.bytes[0], b.counts[0]), Delivery::Written);
    assert_eq!(h.hold(&b.bytes[1], b.counts[1]), Delivery::Written);
    assert_eq!(rec.buffers_in_flight(), 2);
    let mut lost = 0;
    for i in 2..5 {
        assert_eq!(h.hold(&b.bytes[i], b.counts[i]), Delivery::Dropped);
        lost += b.counts[i];
    }
    let summary = rec.stop().unwrap();
    assert_eq!(summary.records, b.counts[0] + b.counts[1]);
    assert_eq!(summary.loss.refused_buffers, 3);
    assert_eq!(summary.loss.cupti_dropped_records, lost);
    assert_eq!(h.dropped_total(), lost);
    assert_eq!(summary.peak_buffer_bytes, 512 << 10);
    let r = Reader::open(&path).unwrap();
    let loss = r.loss().unwrap();
    assert_eq!((loss.refused_buffers, loss.cupti_dropped_records, loss.is_final), (3, lost, true));
    let in_file: u64 = r.activity_chunks().map(|c| c.header.record_count as u64).sum();
    assert_eq!(in_file, b.counts[0] + b.counts[1]);
}

#[test]
fn refusals_leave_no_file_and_say_why() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, _h) = FakeCupti::new(27);
    let e = Recorder::start_with(Box::new(cupti), config(dir.path(), "old.cutr")).err().unwrap();
    assert!(matches!(e, RecorderError::UnsupportedCupti { api: 27, .. }));
    assert!(e.to_string().contains("reports CUPTI API version 27"), "{e}");
    let (cupti, h) = FakeCupti::new(130001);
    h.set_other_client(true);
    let e = Recorder::start_with(Box::new(cupti), config(dir.path(), "other.cutr")).err().unwrap();
    assert!(matches!(e, RecorderError::OtherClient), "{e}");
    let bad = Config { output: "/nonexistent-dir/x.cutr".into(), ..config(dir.path(), "") };
    let (cupti, _h) = FakeCupti::new(130001);
    let e = Recorder::start_with(Box::new(cupti), bad).err().unwrap();
    assert!(e.to_string().starts_with("cannot create /nonexistent-dir/x.cutr: "), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_kind_cupti_cannot_record_is_noted_and_the_rest_recorded() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    h.refuse_kind(kinds::MEMORY2);
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "k.cutr")).unwrap();
    let path = rec.path().to_path_buf();
    assert!(!h.enabled().contains(&kinds::MEMORY2) && h.enabled().contains(&kinds::CONCURRENT_KERNEL));
    rec.stop().unwrap();
    let r = Reader::open(&path).unwrap();
    let notes = &r.loss().unwrap().notes;
    assert!(
        notes.iter().any(|n| n.starts_with("activity kind MEMORY2 not recorded: cuptiActivityEnable failed")),
        "{notes:?}"
    );
}

#[test]
fn a_second_process_of_the_job_writes_beside_the_first_file() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("taken.cutr"), b"another process's file").unwrap();
    let (cupti, _h) = FakeCupti::new(28);
    let rec = Recorder::start_with(Box::new(cupti), config(dir.path(), "taken.cutr")).unwrap();
    assert_eq!(rec.path(), dir.path().join(format!("taken.{}.cutr", std::process::id())));
    rec.stop().unwrap();
    assert_eq!(std::fs::read(dir.path().join("taken.cutr")).unwrap(), b"another process's file");
}

/// `--counters` where the driver's NVML is missing (this machine): one note in the loss report says so, no
/// counter chunk is written, and the activity recording is whole.
#[test]
fn counters_without_nvml_are_a_note_and_the_recording_goes_on() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if std::path::Path::new("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists() {
        eprintln!("SKIPPED: this machine has NVML");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let mut b = synth_buffers(2_000, 256 << 10);
    realize(&h, &mut b);
    let cfg = Config { counters: Some(Default::default()), ..config(dir.path(), "c.cutr") };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    let path = rec.path().to_path_buf();
    for (buf, &n) in b.bytes.iter().zip(&b.counts) {
        assert_eq!(h.deliver(buf, n), Delivery::Written);
    }
    rec.stop().unwrap();
    let r = Reader::open(&path).unwrap();
    let notes = &r.loss().unwrap().notes;
    assert_eq!(
        notes
            .iter()
            .filter(|n| n.starts_with("NVML could not be loaded (") && n.ends_with("): no device metrics"))
            .count(),
        1,
        "{notes:?}"
    );
    let (chunks, bad) = r.counter_samples();
    assert_eq!((chunks.len(), bad.len()), (0, 0));
    assert_eq!(
        r.activity_chunks().map(|c| u64::from(c.header.record_count)).sum::<u64>(),
        b.counts.iter().sum::<u64>()
    );
}

/// On-demand control (`--control`): `cupti-record ctl`'s requests over the owner-only socket and SIGUSR1 turn
/// recording off and on (CUPTI's kinds disabled and enabled again), `dump` answers, and the file marks each change
/// as a `recording` counter sample (1 at the start, then 0, 1, 0, 1).
#[test]
fn control_requests_and_sigusr1_turn_recording_off_and_on_and_are_marked() {
    use cutr_recorder::controls::control::{Request, send, socket_path};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let cfg = Config { control: true, ..config(dir.path(), "ctl.cutr") };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    let path = rec.path().to_path_buf();
    let pid = std::process::id();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(socket_path(pid).parent().unwrap()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "only the user may reach the socket");
    let on = format!("ok: recording on to {}", path.display());
    let off = format!("ok: recording off to {}", path.display());
    assert_eq!(send(pid, Request::Status).unwrap(), on);
    assert_eq!(send(pid, Request::Stop).unwrap(), off);
    assert!(h.enabled().is_empty() && !rec.is_recording());
    assert_eq!(send(pid, Request::Dump).unwrap(), off);
    assert_eq!(send(pid, Request::Start).unwrap(), on);
    assert!(h.enabled().contains(&kinds::CONCURRENT_KERNEL));
    // SIGUSR1 toggles: off, then on again.
    let wait_for = |want: bool| {
        let t = std::time::Instant::now();
        while rec.is_recording() != want && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(rec.is_recording(), want);
    };
    // SAFETY: signalling our own process; the recorder's handler only writes to a pipe.
    unsafe { libc::raise(libc::SIGUSR1) };
    wait_for(false);
    // SAFETY: as above.
    unsafe { libc::raise(libc::SIGUSR1) };
    wait_for(true);
    rec.stop().unwrap();
    assert!(send(pid, Request::Status).is_err(), "the socket is gone with the recording");
    let r = Reader::open(&path).unwrap();
    let (chunks, bad) = r.counter_samples();
    assert!(bad.is_empty());
    let marks: Vec<f64> = chunks.iter().filter(|c| c.source == "cutr").flat_map(|c| c.values.clone()).collect();
    assert_eq!(marks, [1.0, 0.0, 1.0, 0.0, 1.0]);
    let times: Vec<u64> = chunks.iter().filter(|c| c.source == "cutr").flat_map(|c| c.t_start.clone()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

/// The flight recorder (`--ring`): nothing but the header reaches the output while recording; a dump (SIGUSR2 with
/// `--control`, or the API) writes the most recent window (every chunk within the window of the newest, the older ones left out and counted in a
/// note, every kernel name still resolved); the output at the end holds the window too.
#[test]
fn the_flight_recorder_keeps_only_the_window_and_dumps_complete_files() {
    use cutr_recorder::controls::ring::RingLimit;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let mut s = Synth::new(SynthOptions { records: 60_000, buffer_bytes: 128 << 10, ..Default::default() }).unwrap();
    let plan = cutr_format::CodecPlan::new(s.layouts());
    let mut buffers = Vec::new();
    let mut texts = HashMap::new();
    while let Some(mut b) = s.next_buffer() {
        texts.extend(b.new_strings.drain(..));
        buffers.push(b.bytes);
    }
    let t = s.truth().clone();
    let window = Duration::from_nanos((t.t_max - t.t_min) / 4);
    let cfg = Config {
        ring: Some(RingLimit { window: Some(window), bytes: None }),
        control: true,
        ..config(dir.path(), "ring.cutr")
    };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    let path = rec.path().to_path_buf();
    let mut delivered = 0u64;
    for mut b in buffers {
        h.realize_strings(&mut b, &texts);
        let n = cutr_format::codec::buffer_stats(&b, &plan).records as u64;
        assert_eq!(h.deliver(&b, n), Delivery::Written);
        delivered += n;
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(std::fs::metadata(&path).unwrap().len() < 64 << 10, "only the header and metadata on disk");
    // SIGUSR2 dumps (through the control thread), then the API.
    // SAFETY: signalling our own process; the recorder's handler only writes to a pipe.
    unsafe { libc::raise(libc::SIGUSR2) };
    let first = dir.path().join("ring.dump1.cutr");
    let t0 = std::time::Instant::now();
    while !(first.exists() && Reader::open(&first).is_ok_and(|r| r.clean_close()))
        && t0.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let dump = rec.dump().unwrap().expect("a dump file");
    assert_eq!(dump, dir.path().join("ring.dump2.cutr"));
    let check = |p: &std::path::Path| {
        let r = Reader::open(p).unwrap();
        assert!(r.clean_close(), "{:?}", r.problems());
        let kept: u64 = r.activity_chunks().map(|c| u64::from(c.header.record_count)).sum();
        let newest = r.activity_chunks().map(|c| c.header.t_max).max().unwrap();
        assert!(r.activity_chunks().all(|c| newest - c.header.t_max <= window.as_nanos() as u64));
        let note = r.loss().unwrap().notes.iter().find(|n| n.starts_with("flight recorder")).cloned().unwrap();
        let left_out: u64 = note.split("; ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert_eq!(kept + left_out, delivered, "{note}");
        assert!(left_out > 0 && kept > 0, "{note}");
        let m = cutr_model::load(&[p.to_path_buf()], &Default::default()).unwrap();
        assert!(m.kernels.iter().all(|k| !m.kernel_name(k).is_empty()), "every kernel name resolves");
        kept
    };
    let in_dump = check(&dump);
    assert_eq!(check(&first), in_dump, "nothing was delivered between the two dumps");
    rec.stop().unwrap();
    assert_eq!(check(&path), in_dump, "nothing was delivered after the dump");
}

/// `--capture-range` where the callbacks that delimit ranges cannot be had (CUPTI refuses to enable them): one
/// note says so, and everything is recorded rather than nothing.
#[test]
fn a_capture_range_that_cannot_be_watched_records_everything_and_says_so() {
    use cutr_recorder::controls::capture::{CaptureEnd, CaptureRange};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    h.refuse_callbacks();
    let cfg =
        Config { capture: Some((CaptureRange::ProfilerApi, CaptureEnd::Stop)), ..config(dir.path(), "capture.cutr") };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    assert!(rec.is_recording() && h.enabled().contains(&kinds::CONCURRENT_KERNEL));
    let path = rec.path().to_path_buf();
    rec.stop().unwrap();
    let r = Reader::open(&path).unwrap();
    let notes = &r.loss().unwrap().notes;
    assert!(
        notes.iter().any(|n| n
            == "capture range cuda-profiler-api not available (cuptiEnableCallback failed: \
                CUPTI_ERROR_NOT_SUPPORTED (15)); recording everything"),
        "{notes:?}"
    );
}

/// `--ring-trigger`: an NVTX range named `step 5` writes the window at the flush that brings its record, and so
/// does a `cudaProfilerStop` record (CUDA 13.0's runtime cbid 172, patched into the next buffer); nothing else in
/// the stream fires. Each dump holds exactly the buffers delivered up to the trigger.
#[test]
fn ring_triggers_dump_at_an_nvtx_name_and_at_cuda_profiler_stop() {
    use cutr_recorder::controls::ring::RingLimit;
    use cutr_recorder::controls::triggers::RingTrigger;
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let mut s = Synth::new(SynthOptions { records: 60_000, buffer_bytes: 128 << 10, ..Default::default() }).unwrap();
    let plan = cutr_format::CodecPlan::new(s.layouts());
    let (mut buffers, mut texts, mut step5) = (Vec::new(), HashMap::new(), None);
    while let Some(mut b) = s.next_buffer() {
        if b.new_strings.iter().any(|(_, t)| t == "step 5") {
            step5 = Some(buffers.len());
        }
        texts.extend(b.new_strings.drain(..));
        buffers.push(b.bytes);
    }
    let j = step5.expect("the synthetic loop has a step 5");
    assert!(j + 2 < buffers.len());
    // The first RUNTIME record of buffer j+1 becomes a cudaProfilerStop.
    let layouts = cutr_recorder::fake::layouts(130001).unwrap();
    let sizes: HashMap<u32, usize> = layouts.records().iter().map(|r| (r.kind, r.size as usize)).collect();
    let cbid = layouts.get(kinds::RUNTIME).unwrap().offset("cbid").unwrap();
    let mut off = 0;
    let b = &mut buffers[j + 1];
    loop {
        let kind = u32::from_le_bytes(b[off..off + 4].try_into().unwrap());
        if kind == kinds::RUNTIME {
            b[off + cbid..off + cbid + 4].copy_from_slice(&172u32.to_le_bytes());
            break;
        }
        off += sizes[&kind];
    }
    let cfg = Config {
        ring: Some(RingLimit { window: Some(Duration::from_secs(3600)), bytes: None }),
        ring_triggers: vec![RingTrigger::Nvtx("step 5".into()), RingTrigger::CudaProfilerStop],
        ..config(dir.path(), "ring.cutr")
    };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    let wait_for = |p: &std::path::Path| {
        let t0 = std::time::Instant::now();
        while !(p.exists() && Reader::open(p).is_ok_and(|r| r.clean_close())) && t0.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let r = Reader::open(p).unwrap();
        r.activity_chunks().map(|c| u64::from(c.header.record_count)).sum::<u64>()
    };
    let mut delivered = Vec::new();
    for (i, mut b) in buffers.into_iter().enumerate() {
        h.realize_strings(&mut b, &texts);
        let n = cutr_format::codec::buffer_stats(&b, &plan).records as u64;
        assert_eq!(h.deliver(&b, n), Delivery::Written);
        delivered.push(n);
        if i == j {
            assert_eq!(wait_for(&dir.path().join("ring.dump1.cutr")), delivered.iter().sum::<u64>(), "step 5");
        }
        if i == j + 1 {
            let n2 = wait_for(&dir.path().join("ring.dump2.cutr"));
            assert_eq!(n2, delivered.iter().sum::<u64>(), "cudaProfilerStop");
        }
    }
    rec.stop().unwrap();
    assert!(!dir.path().join("ring.dump3.cutr").exists(), "no other record fires");
    let out = Reader::open(&dir.path().join("ring.cutr")).unwrap();
    let kept: u64 = out.activity_chunks().map(|c| u64::from(c.header.record_count)).sum();
    assert_eq!(kept, delivered.iter().sum::<u64>(), "the window at exit holds everything");
}
