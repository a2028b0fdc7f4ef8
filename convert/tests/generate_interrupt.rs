//! `generate` interrupted mid-write (SIGINT, SIGTERM) exits 130 or 143 and leaves nothing: it writes beside its
//! output and renames the file into place only once complete. The signal is sent once the temporary file exists
//! (polled for), so the command is mid-write whatever the machine's load.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Generous: a loaded two-core machine may take minutes to start writing.
const PATIENCE: Duration = Duration::from_secs(300);

#[test]
fn an_interrupted_generate_leaves_no_file() {
    for (signal, status) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("g.cutr");
        // A billion records: minutes of writing, interrupted within the first seconds.
        let mut child = Command::new(env!("CARGO_BIN_EXE_cupti-convert"))
            .args(["generate", "--records", "1000000000", "-o"])
            .arg(&out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::fs::read_dir(dir.path()).unwrap().count() == 0 {
            assert!(child.try_wait().unwrap().is_none(), "generate ended before writing");
            assert!(started.elapsed() < PATIENCE, "no temporary file after {PATIENCE:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        let written: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert_eq!(written, [format!("g.cutr.tmp-{}", child.id())]);
        // The kill command: calling kill(2) from Rust would take `unsafe`, allowed in the recorder's ffi only.
        let sent = Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status().unwrap();
        assert!(sent.success());
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(status), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing left");
    }
}
