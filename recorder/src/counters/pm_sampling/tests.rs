//! Tests of the shared state and the threads, and helpers for the rooms' own tests.

use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use cutr_format::CounterSamples;

use super::device::{self, DeviceSession, SessionRef};
use super::gate::GATE_WAIT;
use super::*;

/// A `Shared` over NVIDIA's real libcupti (from the CUPTI wheel), collecting notes.
pub(super) fn shared_for_test() -> (&'static Shared, Arc<Mutex<Vec<String>>>) {
    let (shared, notes, _) = shared_collecting();
    (shared, notes)
}

pub(super) type Collected<T> = Arc<Mutex<Vec<T>>>;

/// [`shared_for_test`], also collecting the chunks sent.
pub(super) fn shared_collecting() -> (&'static Shared, Collected<String>, Collected<CounterSamples>) {
    let api = Api::load(&crate::ffi::pm::real_libcupti_for_test()).unwrap();
    let notes = Arc::new(Mutex::new(Vec::new()));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let (n, c) = (notes.clone(), sent.clone());
    let shared = Box::leak(Box::new(Shared::new(
        api,
        Box::new(move |s| c.lock().unwrap().push(s)),
        Box::new(move |m| n.lock().unwrap().push(m)),
    )));
    (shared, notes, sent)
}

/// A context's end as CUPTI's callback reports it; how long it took.
fn end_context(shared: &'static Shared) -> Duration {
    let t0 = Instant::now();
    shared.on_context_ending();
    t0.elapsed()
}

/// The end of a context (`cudaDeviceReset`) waits for a device call under way, then closes the gate: no
/// device call after it. A call that does not return (cuptiPmSamplingEnable waiting for the lock the ending
/// thread holds, as on the H100) is waited for GATE_WAIT, not forever, and the note says sampling is off.
#[test]
fn a_context_end_waits_for_the_gate_bounded_then_closes_it() {
    let (shared, notes) = shared_for_test();
    assert!(shared.gate.device_calls().is_some());
    // A device call of 150 ms under way.
    let held = mpsc::channel();
    let holder = std::thread::spawn(move || {
        let _g = shared.gate.device_calls().unwrap();
        held.0.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(150));
    });
    held.1.recv().unwrap();
    let waited = end_context(shared);
    holder.join().unwrap();
    assert!(waited >= Duration::from_millis(100) && waited < GATE_WAIT, "{waited:?}");
    assert!(shared.gate.device_calls().is_none(), "closed once the context ended");
    assert!(notes.lock().unwrap().is_empty(), "{:?}", notes.lock().unwrap());

    // A device call that returns only after the context ended.
    let (shared, notes) = shared_for_test();
    let (held, release) = (mpsc::channel(), mpsc::channel::<()>());
    let holder = std::thread::spawn(move || {
        let _g = shared.gate.device_calls().unwrap();
        held.0.send(()).unwrap();
        let _ = release.1.recv();
    });
    held.1.recv().unwrap();
    let waited = end_context(shared);
    assert!(waited >= GATE_WAIT && waited < GATE_WAIT + Duration::from_millis(500), "{waited:?}");
    drop(release.0);
    holder.join().unwrap();
    assert!(shared.gate.device_calls().is_none());
    assert_eq!(
        *notes.lock().unwrap(),
        ["PM sampling: a CUDA context ended while sampling was being set up (a CUPTI call waited for the \
          ending context for 1000 ms); not sampling"]
    );
}

/// Each device's decoding thread ends when told to (without waiting out its period) and when its session is
/// over: finished by `finish_all` (Stop, a context's end), which takes every session once and marks it.
#[test]
fn a_devices_decoding_thread_ends_with_its_session_or_when_told() {
    let (shared, _) = shared_for_test();
    let session: SessionRef = Arc::new(Mutex::new(DeviceSession::for_test(1, Duration::from_micros(100))));
    // Told to stop long before its first decode (a 60 s period): it ends at once, having decoded nothing.
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let s1 = Arc::clone(&session);
    std::thread::spawn(move || {
        decode_loop(shared, &s1, Duration::from_secs(60), &rx);
        done_tx.send(()).unwrap();
    });
    tx.send(()).unwrap();
    done_rx.recv_timeout(Duration::from_secs(5)).expect("ends when told");
    assert!(!session.lock().unwrap().failed);

    // Finished (a context already gone: no CUPTI call with the missing objects): taken out, marked, and the
    // device's thread, still waiting for nothing from its channel, ends at its next period.
    // The gate is taken first: the thread's first decode waits for it, and then finds the session finished
    // (a decode would need CUPTI objects the session lacks).
    shared.sessions.lock().unwrap().push(Arc::clone(&session));
    let gate = shared.gate.exclusive();
    let (_keep, rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    let s2 = Arc::clone(&session);
    std::thread::spawn(move || {
        decode_loop(shared, &s2, Duration::from_millis(5), &rx);
        done_tx.send(()).unwrap();
    });
    std::thread::sleep(Duration::from_millis(20));
    let (n, chunks) = shared.finish_all(&gate, false, &|| false);
    drop(gate);
    assert_eq!((n, chunks.len()), (1, 0));
    assert!(session.lock().unwrap().failed);
    done_rx.recv_timeout(Duration::from_secs(5)).expect("ends with its session");
    let decoded = device::decode_device(&shared.api, &shared.gate, &session, &|m| shared.note(m));
    assert!(!decoded, "a finished session is not decoded");
    assert_eq!(shared.finish_all(&shared.gate.exclusive(), false, &|| false).0, 0, "finished once");
}

/// Notes wait until whoever holds the gate has let go of it (the note callback may block on stderr).
#[test]
fn notes_are_passed_on_only_when_flushed() {
    let (shared, notes) = shared_for_test();
    shared.note("one".into());
    shared.note("two".into());
    assert!(notes.lock().unwrap().is_empty());
    shared.flush_notes();
    assert_eq!(*notes.lock().unwrap(), ["one", "two"]);
}

#[test]
fn the_hardware_buffer_holds_100_ms() {
    let us = Duration::from_micros;
    assert_eq!(buffer_and_period(us(100)), (64 << 20, Duration::from_millis(10)));
    assert_eq!(buffer_and_period(us(50)), (2000 << 16, Duration::from_millis(10)));
    assert_eq!(buffer_and_period(us(40)), (2500 << 16, Duration::from_millis(10)));
    assert_eq!(buffer_and_period(us(20)), (5000 << 16, Duration::from_millis(10)));
    assert_eq!(buffer_and_period(us(10)), (512 << 20, Duration::from_millis(5)), "512 MiB at most");
    assert_eq!(buffer_and_period(us(5)), (512 << 20, Duration::from_millis(5)), "as 10 us, the fastest");
}

#[test]
fn the_image_is_reset_before_a_decode_can_fill_it() {
    let us = Duration::from_micros;
    // 10 kHz: a 64 MiB buffer holds 1,024 samples; 25 kHz: 2,500 (100 ms).
    assert_eq!((image_samples(us(100)), reset_room(us(100))), (2560, 1280));
    assert_eq!((image_samples(us(40)), reset_room(us(40))), (6250, 3125));
    assert_eq!((image_samples(us(10)), reset_room(us(10))), (8000, 4000), "the largest image");
    assert_eq!((image_samples(us(1000)), reset_room(us(1000))), (2560, 1280), "the buffer is 64 MiB at least");
}

#[test]
fn the_default_metrics_are_full_names() {
    for m in DEFAULT_METRICS.iter().flat_map(|m| m.split('|')) {
        assert_eq!(m.matches("__").count(), 1, "{m}: unit__counter");
        assert!(m.split('.').count() >= 3, "{m}: counter.rollup.submetric");
    }
}

/// Exit hooks asked for by the set-up thread, counted (`run` with no hook registered).
fn counted_hooks() -> (ExitHooks, Arc<Mutex<Vec<&'static str>>>) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let (a, b) = (asked.clone(), asked.clone());
    let hooks = ExitHooks {
        exit_began: Box::new(move || a.lock().unwrap().push("exit_began")),
        stop: Box::new(move || b.lock().unwrap().push("stop")),
    };
    (hooks, asked)
}

/// The process exits while set-up is under way, before the stop hook was registered (the H100 crashed in
/// cuptiPmSamplingDisable when sampling was stopped after the CUDA and CUPTI libraries' own exit handlers): the
/// exit-began hook waits for the set-up call under way (bounded), then ends the gate; set-up begins nothing more,
/// and its note says the process exited.
#[test]
fn an_exit_during_set_up_waits_for_the_call_under_way_then_makes_no_cupti_call() {
    let (shared, notes) = shared_for_test();
    let held = mpsc::channel();
    let holder = std::thread::spawn(move || {
        let _g = shared.gate.device_calls().unwrap();
        held.0.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(150));
    });
    held.1.recv().unwrap();
    let t0 = Instant::now();
    shared.exit_began();
    let waited = t0.elapsed();
    holder.join().unwrap();
    assert!(waited >= Duration::from_millis(100) && waited < GATE_WAIT, "{waited:?}");
    assert!(shared.gate.device_calls().is_none(), "no CUPTI call after the exit began");

    // A device whose context comes now is not set up (no hook asked for, no CUPTI call made).
    let (hooks, asked) = counted_hooks();
    let (stop, stop_rx) = mpsc::channel();
    let thread = std::thread::spawn(move || run(shared, &PmConfig::default(), &|| vec![0], &hooks, &stop_rx));
    let t0 = Instant::now();
    while notes.lock().unwrap().is_empty() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.send(()).unwrap();
    thread.join().unwrap();
    assert!(asked.lock().unwrap().is_empty(), "{:?}", asked.lock().unwrap());
    assert_eq!(*notes.lock().unwrap(), ["PM sampling on device 0: the process exited before sampling could start"]);
}

/// The stop hook ran before a device seen was set up: set-up is not begun (it would run after the exit began),
/// and the note names the device.
#[test]
fn a_stop_before_set_up_begins_sets_nothing_up() {
    let (shared, notes) = shared_for_test();
    let (hooks, asked) = counted_hooks();
    let (stop, stop_rx) = mpsc::channel();
    stop.send(()).unwrap();
    run(shared, &PmConfig::default(), &|| vec![1], &hooks, &stop_rx);
    assert!(asked.lock().unwrap().is_empty(), "{:?}", asked.lock().unwrap());
    assert!(!shared.gate.ended(), "the gate stays open: the contexts live");
    assert_eq!(*notes.lock().unwrap(), ["PM sampling on device 1: the recording ended before sampling could start"]);
}
