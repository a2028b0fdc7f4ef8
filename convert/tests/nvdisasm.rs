//! `source` with an `nvdisasm` that hangs: each run is ended at its time limit (`CUTR_NVDISASM_TIMEOUT`), the
//! report goes on without that cubin's SASS and says why, and nothing is left running or in `$TMPDIR`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixture, path_str, stderr_lines};

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// A script in `dir` that runs `body`, after recording its process id in `dir/pids`.
fn fake_nvdisasm(dir: &Path, body: &str) -> PathBuf {
    let script = dir.join("nvdisasm");
    std::fs::write(&script, format!("#!/bin/sh\necho $$ >> '{}'\n{body}\n", dir.join("pids").display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

fn source(nvdisasm: &Path, timeout: &str, scratch: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cupti-convert"))
        .args(["source", path_str(&fixture("source_workload_pcs.cutr"))])
        .env("CUTR_NVDISASM", nvdisasm)
        .env("CUTR_NVDISASM_TIMEOUT", timeout)
        .env("TMPDIR", scratch)
        .output()
        .unwrap()
}

/// The fixture's two cubins, each with the reason its SASS is missing.
fn warnings(why: &str) -> Vec<String> {
    ["0x7c19f23b", "0xf1886af9"]
        .iter()
        .map(|crc| format!("cupti-convert: warning: nvdisasm could not read cubin {crc}: {why}"))
        .collect()
}

#[test]
fn a_stuck_nvdisasm_is_ended_at_its_time_limit() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("tmp");
    std::fs::create_dir(&scratch).unwrap();
    let nvdisasm = fake_nvdisasm(dir.path(), "exec sleep 1000");
    let o = source(&nvdisasm, "1s", &scratch);
    assert_eq!(o.status.code(), Some(0));
    let mut lines = stderr_lines(&o);
    lines.sort();
    assert_eq!(lines, warnings("it ran past 1s and was ended (CUTR_NVDISASM_TIMEOUT sets the limit)"));
    let pids = std::fs::read_to_string(dir.path().join("pids")).unwrap();
    assert_eq!(pids.lines().count(), 2, "one run per cubin");
    for pid in pids.lines() {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "nvdisasm {pid} still runs");
    }
    assert_eq!(names(&scratch), Vec::<String>::new(), "no cubin left in $TMPDIR");
    // The report itself is whole: the kernels and their lines, without SASS.
    let report = String::from_utf8(o.stdout).unwrap();
    assert!(report.contains("chase"), "{report}");
}

#[test]
fn a_failing_nvdisasm_and_a_wrong_time_limit_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("tmp");
    std::fs::create_dir(&scratch).unwrap();
    let failing = fake_nvdisasm(dir.path(), "echo 'nvdisasm fatal : bad cubin' >&2; exit 1");
    let o = source(&failing, "30s", &scratch);
    assert_eq!(o.status.code(), Some(0));
    let mut lines = stderr_lines(&o);
    lines.sort();
    assert_eq!(lines, warnings("nvdisasm fatal : bad cubin"));
    let o = source(&failing, "soon", &scratch);
    assert_eq!(o.status.code(), Some(0));
    let mut lines = stderr_lines(&o);
    lines.sort();
    assert_eq!(lines, warnings("CUTR_NVDISASM_TIMEOUT=\"soon\" is not a duration (e.g. 30s, 2m)"));
    assert_eq!(names(&scratch), Vec::<String>::new());
}
