//! Ctrl-C and SIGTERM while a command writes: every conversion format, `export --parquet`, `sql` (with its
//! companion running) and `source` (with `nvdisasm` running) exit with 130 or 143, leave no temporary file or
//! directory behind (beside the output, or in `$TMPDIR`), keep an earlier output or export as it was, and leave
//! no child running. Each signal is sent once the command's temporary output exists (polled for), so the command
//! is mid-write whatever the machine's load; nothing here measures time.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{fixture, names, path_str, snapshot, text};

/// (signal, its name, the exit status it gives).
const SIGNALS: [(i32, &str, i32); 2] = [(libc::SIGINT, "SIGINT", 130), (libc::SIGTERM, "SIGTERM", 143)];

/// Generous: a loaded two-core machine may take minutes to reach the write.
const PATIENCE: Duration = Duration::from_secs(300);

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cupti-convert"));
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Polls (every 10 ms) until `ready()`; fails with the command's output if it ends first, or after [`PATIENCE`].
fn wait_until(child: &mut Child, what: &str, ready: impl Fn() -> bool) {
    let started = Instant::now();
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the command ended ({status}) before {what}: {err}");
        }
        assert!(started.elapsed() < PATIENCE, "no {what} after {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `signal` to the command and collects how it ended (killing it, and failing, if it has not ended after
/// [`PATIENCE`]).
fn interrupt(mut child: Child, signal: i32) -> Output {
    // SAFETY: kill(2) on the id of our own child, which has not been reaped (no wait since it started).
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            panic!("still running {PATIENCE:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// A recording of 2M records (6.3 MB; its Chrome JSON is 650 MB): long enough to write that a signal sent as
/// the output appears finds the command mid-write (on an idle 2-core machine, the shortest write, Perfetto's,
/// takes 0.6 s from the temporary file's creation for 1M records, the poll 10 ms).
fn generated(dir: &Path) -> PathBuf {
    let f = dir.join("big.cutr");
    let o = common::run(&["generate", "-o", path_str(&f), "--records", "2000000"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    f
}

/// Whether process `pid` still exists (a zombie counts: it was not reaped).
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// A conversion to each format, interrupted while it writes: status 128 + signal, one line on stderr, and the
/// directory holds the input and the earlier output, as it was (no `.tmp-PID`).
fn conversions_interrupted_by(signal: i32, name: &str, status: i32) {
    let dir = tempfile::tempdir().unwrap();
    let input = generated(dir.path());
    for (format, out_name) in
        [(&["--chrome"][..], "t.json"), (&["--perfetto"], "t.pftrace"), (&["--chrome", "--gzip"], "t.json.gz")]
    {
        let out = dir.path().join(out_name);
        std::fs::write(&out, b"an earlier trace").unwrap();
        let mut child = bin().arg(&input).args(format).args(["-q", "-o", path_str(&out)]).spawn().unwrap();
        let tmp = dir.path().join(format!("{out_name}.tmp-{}", child.id()));
        wait_until(&mut child, "temporary output", || tmp.exists());
        let o = interrupt(child, signal);
        assert_eq!(o.status.code(), Some(status), "{format:?}: {}", text(&o.stderr));
        assert_eq!(text(&o.stderr), format!("cupti-convert: interrupted ({name})\n"), "{format:?}");
        assert_eq!(names(dir.path()), ["big.cutr", out_name], "{format:?}: nothing left beside the input");
        assert_eq!(std::fs::read(&out).unwrap(), b"an earlier trace", "{format:?}");
        std::fs::remove_file(&out).unwrap();
    }
}

#[test]
fn a_conversion_interrupted_by_sigint_leaves_no_file() {
    let (signal, name, status) = SIGNALS[0];
    conversions_interrupted_by(signal, name, status);
}

#[test]
fn a_conversion_interrupted_by_sigterm_leaves_no_file() {
    let (signal, name, status) = SIGNALS[1];
    conversions_interrupted_by(signal, name, status);
}

/// `export --parquet` over an earlier export, interrupted while the tables are written: the earlier export is
/// byte-identical, and no temporary directory is left beside it.
#[test]
fn an_interrupted_export_keeps_the_earlier_one_intact() {
    let dir = tempfile::tempdir().unwrap();
    let input = generated(dir.path());
    let tables = dir.path().join("tables");
    let o = common::run(&["export", path_str(&fixture("cuda_workload.cutr")), "--parquet", path_str(&tables)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let before = snapshot(&tables);
    assert_eq!(before.len(), 13);
    for (signal, name, status) in SIGNALS {
        let mut child = bin().arg("export").arg(&input).args(["--parquet", path_str(&tables)]).spawn().unwrap();
        let tmp = dir.path().join(format!("tables.tmp-{}-0", child.id()));
        wait_until(&mut child, "temporary export", || tmp.exists());
        let o = interrupt(child, signal);
        assert_eq!(o.status.code(), Some(status), "{}", text(&o.stderr));
        assert!(text(&o.stderr).ends_with(&format!("cupti-convert: interrupted ({name})\n")), "{}", text(&o.stderr));
        assert_eq!(names(dir.path()), ["big.cutr", "tables"], "{name}");
        assert!(snapshot(&tables) == before, "{name}: the earlier export changed");
    }
}

/// A stand-in for a slow child: records its process id (and its arguments) in `<dir>/<name>.pids`, then sleeps
/// under the same id.
fn sleeper(dir: &Path, name: &str) -> PathBuf {
    let script = dir.join(name);
    let pids = dir.join(format!("{name}.pids"));
    std::fs::write(&script, format!("#!/bin/sh\necho \"$$ $*\" >> '{}'\nexec sleep 1000\n", pids.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

/// The (pid, arguments) lines a [`sleeper`] wrote.
fn started(dir: &Path, name: &str) -> Vec<(u32, String)> {
    let text = std::fs::read_to_string(dir.join(format!("{name}.pids"))).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(pid, args)| Some((pid.parse().ok()?, args.to_string())))
        .collect()
}

/// `sql` over a recording, interrupted while its companion runs the query: the companion is ended, and the
/// dataset it was exported to is gone from `$TMPDIR`, which is left empty.
#[test]
fn an_interrupted_sql_ends_its_companion_and_removes_its_dataset() {
    let dir = tempfile::tempdir().unwrap();
    for (signal, name, status) in SIGNALS {
        let scratch = dir.path().join(format!("tmp-{name}"));
        std::fs::create_dir(&scratch).unwrap();
        let companion = sleeper(dir.path(), &format!("companion-{name}"));
        let mut child = bin()
            .args(["sql", "select count(*) from kernels", path_str(&fixture("cuda_workload.cutr"))])
            .env("CUTR_SQL_PROGRAM", &companion)
            .env("TMPDIR", &scratch)
            .spawn()
            .unwrap();
        let companion_name = format!("companion-{name}");
        wait_until(&mut child, "companion", || !started(dir.path(), &companion_name).is_empty());
        let (pid, args) = started(dir.path(), &companion_name).remove(0);
        let dataset = PathBuf::from(args.split(' ').nth(1).unwrap());
        assert!(dataset.join("kernels.parquet").is_file(), "the companion was given the dataset: {args}");
        assert!(alive(pid));
        let o = interrupt(child, signal);
        assert_eq!(o.status.code(), Some(status), "{}", text(&o.stderr));
        assert_eq!(text(&o.stderr), format!("cupti-convert: interrupted ({name})\n"));
        assert!(!alive(pid), "the companion {pid} still runs");
        assert_eq!(names(&scratch), Vec::<String>::new(), "nothing left in $TMPDIR");
    }
}

/// `source`, interrupted while `nvdisasm` disassembles its cubins: every `nvdisasm` is ended, and their copies
/// of the cubins are gone from `$TMPDIR`.
#[test]
fn an_interrupted_source_ends_nvdisasm_and_removes_the_cubins() {
    let dir = tempfile::tempdir().unwrap();
    for (signal, name, status) in SIGNALS {
        let scratch = dir.path().join(format!("tmp-{name}"));
        std::fs::create_dir(&scratch).unwrap();
        let nvdisasm_name = format!("nvdisasm-{name}");
        let nvdisasm = sleeper(dir.path(), &nvdisasm_name);
        let mut child = bin()
            .args(["source", path_str(&fixture("source_workload_pcs.cutr"))])
            .env("CUTR_NVDISASM", &nvdisasm)
            .env("TMPDIR", &scratch)
            .spawn()
            .unwrap();
        wait_until(&mut child, "nvdisasm", || !started(dir.path(), &nvdisasm_name).is_empty());
        assert!(!names(&scratch).is_empty(), "the cubins are in $TMPDIR while nvdisasm runs");
        let o = interrupt(child, signal);
        assert_eq!(o.status.code(), Some(status), "{}", text(&o.stderr));
        assert!(text(&o.stderr).ends_with(&format!("cupti-convert: interrupted ({name})\n")), "{}", text(&o.stderr));
        for (pid, _) in started(dir.path(), &nvdisasm_name) {
            assert!(!alive(pid), "nvdisasm {pid} still runs");
        }
        assert_eq!(names(&scratch), Vec::<String>::new(), "nothing left in $TMPDIR");
    }
}
