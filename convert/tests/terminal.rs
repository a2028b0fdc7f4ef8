//! What `cupti-convert` prints on a terminal and to scripts: `diff`'s exit code for unrelated programs, a closed or
//! broken standard output, `stats` fitted to the terminal's width, its top rows with the rest summed up, and its
//! time and NVTX windows.

mod common;

use std::process::{Command, Stdio};

use common::{fixture, path_str, run, stderr_lines, text};

/// Two unrelated programs: whichever is the base, the verdict is "different programs" and the exit code 4, not a
/// regression (3) or an improvement (0) of rows that have nothing in common.
#[test]
fn diff_of_unrelated_programs_exits_4() {
    let (torch, cuda) = (fixture("pytorch_loop.cutr"), fixture("cuda_workload.cutr"));
    for (base, new) in [(&torch, &cuda), (&cuda, &torch)] {
        let o = run(&["diff", path_str(base), path_str(new), "--json"]);
        assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["verdict"], "different_programs");
        assert_eq!(j["common_kernel_time_pct"], 0.0);
        let o = run(&["diff", path_str(base), path_str(new)]);
        assert_eq!(o.status.code(), Some(4));
        assert!(text(&o.stdout).starts_with("verdict: DIFFERENT PROGRAMS (1 base run(s), 1 new run(s); "));
        assert_eq!(
            stderr_lines(&o),
            ["cupti-convert: warning: only 0% of the base's kernel time is in kernels the new runs also have: \
                 these are probably recordings of different programs"]
        );
    }
}

/// The binary with `args`, run by `sh` with its standard output closed (`>&-`).
fn run_with_stdout_closed(args: &[&str]) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(r#"exec "$0" "$@" >&-"#)
        .arg(env!("CARGO_BIN_EXE_cupti-convert"))
        .args(args)
        .output()
        .expect("sh runs")
}

/// A closed standard output is an error (exit 1, one line) before any work, not "wrote -" and 0: for a trace to
/// `-o -` and for a report. A trace written to a file does not need it.
#[test]
fn a_closed_stdout_is_an_error() {
    let f = fixture("cuda_workload.cutr");
    let closed = "cupti-convert: error: standard output is closed: nothing could be written there (redirect it to a \
                  file, or to /dev/null to discard it)";
    for args in [vec![path_str(&f), "--perfetto", "-o", "-"], vec!["stats", path_str(&f)], vec!["info", path_str(&f)]] {
        let o = run_with_stdout_closed(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr_lines(&o), [closed], "{args:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.pftrace");
    let o = run_with_stdout_closed(&[path_str(&f), "--perfetto", "-o", path_str(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 18_725);
}

/// A pipe whose reader is gone before anything is written (`| head -0`) ends the command by SIGPIPE, quietly,
/// as `cat` and `grep` end: no "wrote -", no error line, and not exit 0.
#[test]
fn a_pipe_closed_early_ends_the_command_by_sigpipe() {
    use std::os::unix::process::ExitStatusExt;
    let f = fixture("cuda_workload.cutr");
    for args in [vec![path_str(&f), "--perfetto", "-o", "-"], vec!["stats", path_str(&f)]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cupti-convert"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The only reader: the child holds just the writing end.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_eq!((o.status.code(), o.status.signal()), (None, Some(libc::SIGPIPE)), "{args:?}");
        assert_eq!(stderr_lines(&o), Vec::<String>::new(), "{args:?}");
    }
}
