//! How a recording ends when the process is stopped from outside or crashes: SIGTERM leaves a complete file (the
//! process still dies of SIGTERM), kill -9 leaves a file the reader recovers up to its last written chunk, and a
//! crash (abort, a segmentation fault, a floating-point trap) leaves a complete file holding every record delivered
//! before it, the process dying of the same signal; an application's own crash handler still runs.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use cutr_format::Reader;
use cutr_recorder::fake::{Delivery, FakeCupti};
use cutr_recorder::{Config, Recorder};
use cutr_synth::{Synth, SynthOptions};

const CHILD_ENV: &str = "CUTR_CRASH_TEST_OUTPUT";
/// How the child ends after delivering its buffers: `wait` (for the parent's signal), `abort`, `segv`, `fpe`, or
/// `segv-handled` (the application installed a SIGSEGV handler that prints a line, then dies of the default).
const MODE_ENV: &str = "CUTR_CRASH_TEST_MODE";

extern "C" fn application_handler(sig: libc::c_int) {
    let msg = b"application handler ran\n";
    // SAFETY: write and signal/raise are async-signal-safe.
    unsafe {
        libc::write(1, msg.as_ptr().cast(), msg.len());
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Not a test of its own: the body of the child process the tests below start (this test binary, re-run).
#[test]
fn child_process_body() {
    let Ok(out) = std::env::var(CHILD_ENV) else { return };
    if std::env::var(MODE_ENV).as_deref() == Ok("segv-handled") {
        // SAFETY: installing a plain handler before the recorder installs its own (which chains to it).
        unsafe { libc::signal(libc::SIGSEGV, application_handler as *const () as libc::sighandler_t) };
    }
    let (cupti, h) = FakeCupti::new(130001);
    let cfg = Config {
        output: out,
        buffer_bytes: 256 << 10,
        flush_period: Duration::from_millis(50),
        quiet: true,
        crash_timeout: if std::env::var(MODE_ENV).as_deref() == Ok("abort-unhandled") {
            Duration::ZERO
        } else {
            cutr_recorder::config::DEFAULT_CRASH_TIMEOUT
        },
        // A flight recorder small enough that the 30,000 records do not all fit.
        ring: (std::env::var(MODE_ENV).as_deref() == Ok("abort-ring"))
            .then_some(cutr_recorder::controls::ring::RingLimit { window: None, bytes: Some(64 << 10) }),
        ..Config::default()
    };
    let _rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    let mut s = Synth::new(SynthOptions { records: 30_000, buffer_bytes: 200 << 10, ..Default::default() }).unwrap();
    let plan = cutr_format::CodecPlan::new(s.layouts());
    let mut total = 0u64;
    let mut texts = std::collections::HashMap::new();
    while let Some(mut b) = s.next_buffer() {
        texts.extend(b.new_strings.drain(..));
        h.realize_strings(&mut b.bytes, &texts);
        let n = cutr_format::codec::buffer_stats(&b.bytes, &plan).records as u64;
        assert_eq!(h.deliver(&b.bytes, n), Delivery::Written);
        total += n;
    }
    println!("delivered {total}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    match std::env::var(MODE_ENV).as_deref() {
        Ok("abort" | "abort-unhandled" | "abort-ring") => std::process::abort(),
        Ok("segv" | "segv-handled") => {
            // SAFETY: not safe, on purpose: a write through a null pointer is the fault the test is about.
            unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1) }
        }
        // SAFETY: raising a signal in our own process.
        Ok("fpe") => unsafe {
            libc::raise(libc::SIGFPE);
        },
        _ => std::thread::sleep(Duration::from_secs(60)),
    }
    std::thread::sleep(Duration::from_secs(60));
}

fn run_child(signal: i32) -> (std::process::ExitStatus, std::path::PathBuf, u64, tempfile::TempDir) {
    let (status, out, delivered, _, dir) = run_child_mode("wait", Some(signal));
    (status, out, delivered, dir)
}

/// Runs the child in `mode`, signalling it with `signal` once it has delivered its buffers; returns its status,
/// its file, the records it delivered, and what it printed after.
fn run_child_mode(
    mode: &str,
    signal: Option<i32>,
) -> (std::process::ExitStatus, std::path::PathBuf, u64, Vec<String>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("child.cutr");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_process_body", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, &out)
        .env(MODE_ENV, mode)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let delivered = loop {
        let l = lines.next().expect("child printed its record count").unwrap();
        // libtest prints "test child_process_body ... " on the same line.
        if let Some(i) = l.find("delivered ") {
            break l[i + 10..].trim().parse::<u64>().unwrap();
        }
    };
    if let Some(signal) = signal {
        // The writer thread appends each delivered buffer; give it time to catch up before stopping the process.
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, signal) };
    }
    let status = child.wait().unwrap();
    let after: Vec<String> = lines.map_while(Result::ok).collect();
    (status, out, delivered, after, dir)
}

/// A crash right after the last buffer was delivered: no flush period has passed, so only the crash handler can
/// have written those records.
fn crash(mode: &str, signal: i32) -> Vec<String> {
    let (status, out, delivered, after, _dir) = run_child_mode(mode, None);
    assert_eq!(status.signal(), Some(signal), "the process still dies of its signal: {status:?}");
    let r = Reader::open(&out).unwrap();
    assert!(r.clean_close() && r.recovery().is_none(), "{:?}", r.problems());
    let records: u64 = r.activity_chunks().map(|c| c.header.record_count as u64).sum();
    assert_eq!(records, delivered, "every record delivered before the crash");
    assert!(r.loss().unwrap().is_final);
    after
}

#[test]
fn abort_closes_the_file_with_every_record_then_dies_of_sigabrt() {
    crash("abort", libc::SIGABRT);
}

#[test]
fn a_segfault_closes_the_file_with_every_record_then_dies_of_sigsegv() {
    crash("segv", libc::SIGSEGV);
}

#[test]
fn sigfpe_closes_the_file_then_dies_of_sigfpe() {
    crash("fpe", libc::SIGFPE);
}

#[test]
fn the_applications_own_crash_handler_still_runs_after_the_file_is_closed() {
    let after = crash("segv-handled", libc::SIGSEGV);
    assert!(after.iter().any(|l| l.contains("application handler ran")), "{after:?}");
}

#[test]
fn sigterm_writes_the_footer_then_dies_of_sigterm() {
    let (status, out, delivered, _dir) = run_child(libc::SIGTERM);
    assert_eq!(status.signal(), Some(libc::SIGTERM), "the process still dies of the signal: {status:?}");
    let r = Reader::open(&out).unwrap();
    assert!(r.clean_close() && r.recovery().is_none(), "{:?}", r.problems());
    let records: u64 = r.activity_chunks().map(|c| c.header.record_count as u64).sum();
    assert_eq!(records, delivered);
    assert!(r.loss().unwrap().is_final);
}

#[test]
fn kill_9_leaves_a_file_recovered_up_to_the_last_written_chunk() {
    let (status, out, delivered, _dir) = run_child(libc::SIGKILL);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let r = Reader::open(&out).unwrap();
    let rec = r.recovery().expect("no footer after kill -9");
    assert_eq!(rec.lost_bytes, 0, "every chunk was complete: {:?}", r.problems());
    let records: u64 = r.par_map_activity(|_, d| d.unwrap().record_count() as u64).iter().sum();
    assert_eq!(records, delivered);
    let loss = r.loss().expect("periodic loss reports were written");
    assert!(!loss.is_final);
}

/// `--crash-timeout 0` leaves the crash signals alone: an abort then ends the process at once, and the file is
/// what the writer had appended (recovered by the reader, no footer).
#[test]
fn with_crash_handling_off_an_abort_leaves_a_file_to_recover() {
    let (status, out, _, _, _dir) = run_child_mode("abort-unhandled", None);
    assert_eq!(status.signal(), Some(libc::SIGABRT));
    let r = Reader::open(&out).unwrap();
    assert!(!r.clean_close() && r.recovery().is_some());
}

/// A flight recorder (64 KiB of encoded activity) whose process aborts: the output is the window, complete and closed, noting the
/// older records it left out; kept + left out = every record delivered; the process dies of SIGABRT.
#[test]
fn a_crash_writes_the_flight_recorders_window() {
    let (status, out, delivered, _, _dir) = run_child_mode("abort-ring", None);
    assert_eq!(status.signal(), Some(libc::SIGABRT));
    let r = Reader::open(&out).unwrap();
    assert!(r.clean_close(), "{:?}", r.problems());
    let kept: u64 = r.activity_chunks().map(|c| u64::from(c.header.record_count)).sum();
    let note = r.loss().unwrap().notes.iter().find(|n| n.starts_with("flight recorder")).cloned().unwrap();
    let left_out: u64 = note.split("; ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(kept > 0 && left_out > 0, "{note}");
    assert_eq!(kept + left_out, delivered, "{note}");
}
