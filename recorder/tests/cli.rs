//! The `cupti-record` launcher as a user runs it, without a GPU: exit codes, the command's status passed through,
//! and the application running on untraced, with one clear line, when the recorder cannot start.

use std::process::{Command, Output};

const CHILD_ENV: &str = "CUTR_CLI_TEST_CHILD";

/// Not a test of its own: the body of the "CUDA application" the tests below launch (this test binary, re-run).
/// It does what the CUDA driver does at cuInit, loads the injection library and calls InitializeInjection, then
/// carries on and exits with status 7.
#[test]
fn child_process_body() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let lib = std::env::var("CUDA_INJECTION64_PATH").expect("cupti-record sets CUDA_INJECTION64_PATH");
    // SAFETY: the recorder's library; InitializeInjection takes no arguments and returns an int.
    let status = unsafe {
        let l = libloading::Library::new(&lib).unwrap();
        let init = l.get::<unsafe extern "C" fn() -> i32>(b"InitializeInjection\0").unwrap();
        let s = init();
        std::mem::forget(l);
        s
    };
    println!("InitializeInjection returned {status}; the application goes on");
    std::process::exit(7);
}

/// The injection library cargo built with this test. Cargo leaves a copy next to `cupti-record` only when it
/// builds the library as a target of its own, so the launcher is told where the fresh one is.
fn injection_library() -> std::path::PathBuf {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_cupti-record"));
    let lib = bin.parent().unwrap().join("deps/libcutr_recorder.so");
    assert!(lib.exists(), "{} was not built", lib.display());
    lib
}

fn record(dir: &std::path::Path, env: &[(&str, &str)], command: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cupti-record"));
    c.arg("--injection-lib").arg(injection_library()).arg("-o").arg(dir.join("run.cutr")).arg("--").args(command);
    c.env_remove("CUTR_CUPTI_LIB");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn app(env_extra: &[(&'static str, &'static str)]) -> (Vec<(&'static str, &'static str)>, Vec<String>) {
    let mut env = vec![(CHILD_ENV, "1")];
    env.extend_from_slice(env_extra);
    let exe = std::env::current_exe().unwrap().to_string_lossy().into_owned();
    (env, vec![exe, "--exact".into(), "child_process_body".into(), "--nocapture".into()])
}

fn lines(b: &[u8]) -> Vec<String> {
    let s = String::from_utf8(b.to_vec()).unwrap();
    assert!(!s.contains("panicked"), "{s}");
    s.lines().map(str::to_string).collect()
}

#[test]
fn without_libcupti_the_application_runs_untraced_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_library = dir.path().join("libcupti.so.13");
    std::fs::write(&not_a_library, "not a shared object").unwrap();
    let nal = not_a_library.to_str().unwrap().to_string();
    let out = dir.path().join("run.cutr");
    for (lib, why) in [
        (
            "/nonexistent/libcupti.so.13".to_string(),
            "cutr: not recording: CUTR_CUPTI_LIB points at /nonexistent/libcupti.so.13, which does not exist; the \
             application runs untraced"
                .to_string(),
        ),
        (
            nal.clone(),
            format!("cutr: not recording: cannot load {nal}: {nal}: file too short; the application runs untraced"),
        ),
    ] {
        let lib: &'static str = Box::leak(lib.into_boxed_str());
        let (env, cmd) = app(&[("CUTR_CUPTI_LIB", lib)]);
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let o = record(dir.path(), &env, &cmd);
        assert_eq!(o.status.code(), Some(7), "the application's own exit status");
        assert!(
            lines(&o.stdout).iter().any(|l| l.contains("InitializeInjection returned 1; the application goes on")),
            "{:?}",
            lines(&o.stdout)
        );
        let err = lines(&o.stderr);
        assert_eq!(err.len(), 2, "{err:?}");
        assert_eq!(err[0], why);
        // The recorder left its failure in cupti-record's status folder: the warning names the process.
        let head = format!(
            "cupti-record: warning: no recording was written to {}: the recorder could not start in {} (pid ",
            out.display(),
            cmd[0]
        );
        let pid = err[1].strip_prefix(&head).and_then(|r| r.strip_suffix("; see the cutr: line above)"));
        assert!(pid.is_some_and(|p| p.parse::<u32>().is_ok()), "{}", err[1]);
        assert!(!out.exists());
    }
}

#[test]
fn launcher_errors_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    // The command's exit status comes back unchanged; a program without CUDA leaves no file, and we say so.
    let o = record(dir.path(), &[], &["sh", "-c", "exit 5"]);
    assert_eq!(o.status.code(), Some(5));
    assert_eq!(
        lines(&o.stderr),
        [format!(
            "cupti-record: warning: no recording was written to {}: sh never initialized CUDA (no process of it \
             loaded the recorder)",
            dir.path().join("run.cutr").display()
        )]
    );
    // A command that cannot start: 125, like env(1) and docker.
    let o = record(dir.path(), &[], &["/nonexistent/cmd"]);
    assert_eq!(o.status.code(), Some(125));
    assert_eq!(
        lines(&o.stderr),
        ["cupti-record: error: cannot run /nonexistent/cmd: No such file or directory (os error 2)"]
    );
    // Wrong arguments: 2.
    for args in [vec!["-o", "x.cutr"], vec!["--bogus", "--", "true"]] {
        let o = Command::new(env!("CARGO_BIN_EXE_cupti-record")).args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(lines(&o.stderr)[0].starts_with("error: "), "{args:?}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_cupti-record"))
        .args(["--cupti-lib", "/nonexistent/libcupti.so", "-o", "x.cutr", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(lines(&o.stderr), ["cupti-record: error: --cupti-lib /nonexistent/libcupti.so does not exist"]);
}

/// Installed as tools/install.sh lays it out (bin/ and lib/), cupti-record finds its library; copied alone (what
/// `cargo install` does) it says how to fix it, with status 125; its man page and completions print.
#[test]
fn the_injection_library_is_found_where_install_puts_it() {
    let dir = tempfile::tempdir().unwrap();
    let (bin, lib) = (dir.path().join("prefix/bin"), dir.path().join("prefix/lib"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    let exe = bin.join("cupti-record");
    std::fs::copy(env!("CARGO_BIN_EXE_cupti-record"), &exe).unwrap();
    let run = || {
        Command::new(&exe).env_remove("CUTR_INJECTION_LIB").args(["-q", "--", "sh", "-c", "exit 4"]).output().unwrap()
    };
    let o = run();
    assert_eq!(o.status.code(), Some(125));
    assert_eq!(
        lines(&o.stderr),
        [format!(
            "cupti-record: error: libcutr_recorder.so is neither next to {} nor in ../lib: `cargo install` installs \
             programs only. Install both with tools/install.sh PREFIX, or pass --injection-lib (or set \
             CUTR_INJECTION_LIB) to a libcutr_recorder.so built with `cargo build --release -p cutr-recorder`",
            exe.display()
        )]
    );
    std::fs::copy(injection_library(), lib.join("libcutr_recorder.so")).unwrap();
    let o = run();
    assert_eq!(o.status.code(), Some(4), "{:?}", lines(&o.stderr));
    assert!(o.stderr.is_empty());
    let man = Command::new(&exe).arg("--manpage").output().unwrap();
    assert!(String::from_utf8_lossy(&man.stdout).contains("cupti\\-record \\- Record the CUDA activity of a command"));
    let bash = Command::new(&exe).args(["--completions", "bash"]).output().unwrap();
    assert!(String::from_utf8_lossy(&bash.stdout).contains("--memory-cap"));
}

/// `cupti-record ctl`: wrong arguments exit 2 with the usage; a process recording without `--control` (or no
/// process) is named, with how to fix it, and exit 1.
#[test]
fn ctl_says_what_is_wrong() {
    let ctl = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_cupti-record")).arg("ctl").args(args).output().unwrap();
    for args in [vec![], vec!["12"], vec!["x", "start"], vec!["12", "pause"], vec!["12", "start", "extra"]] {
        let o = ctl(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert_eq!(lines(&o.stderr), ["cupti-record: error: usage: cupti-record ctl PID start|stop|dump|status"]);
    }
    let o = ctl(&["4000000000", "status"]);
    assert_eq!(o.status.code(), Some(1));
    let path = cutr_recorder::controls::control::socket_path(4_000_000_000);
    assert_eq!(
        lines(&o.stderr),
        [format!(
            "cupti-record: error: no recording with control in process 4000000000 ({}: No such file or directory \
             (os error 2)); record with `cupti-record --control`",
            path.display()
        )]
    );
}
