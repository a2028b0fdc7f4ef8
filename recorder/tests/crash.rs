//! How a recording ends when the process is stopped from outside: SIGTERM leaves a complete file (the process
//! still dies of SIGTERM), kill -9 leaves a file the reader recovers up to its last written chunk.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use cutr_format::Reader;
use cutr_recorder::fake::{Delivery, FakeCupti};
use cutr_recorder::{Config, Recorder};
use cutr_synth::{Synth, SynthOptions};

const CHILD_ENV: &str = "CUTR_CRASH_TEST_OUTPUT";

/// Not a test of its own: the body of the child process the tests below start (this test binary, re-run).
#[test]
fn child_process_body() {
    let Ok(out) = std::env::var(CHILD_ENV) else { return };
    let (cupti, h) = FakeCupti::new(130001);
    let cfg = Config {
        output: out,
        buffer_bytes: 256 << 10,
        flush_period: Duration::from_millis(50),
        quiet: true,
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
    std::thread::sleep(Duration::from_secs(60));
}

fn run_child(signal: i32) -> (std::process::ExitStatus, std::path::PathBuf, u64, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("child.cutr");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_process_body", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, &out)
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
    // The writer thread appends each delivered buffer; give it time to catch up before stopping the process.
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
    let status = child.wait().unwrap();
    (status, out, delivered, dir)
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
