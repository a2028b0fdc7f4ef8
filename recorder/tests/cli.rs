//! The `cupti-record` launcher as a user runs it, without a GPU: exit codes, the command's status passed through,
//! the application running on untraced, with one clear line, when the recorder cannot start, and every flag of
//! the options table reaching the injected library through the environment.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Output};
use std::time::Duration;

use cutr_recorder::config::SplitLimit;
use cutr_recorder::config::{self, Config, OPTIONS};
use cutr_recorder::controls::capture::{CaptureEnd, CaptureRange};
use cutr_recorder::controls::ring::RingLimit;
use cutr_recorder::controls::triggers::RingTrigger;
use cutr_recorder::counters::CountersConfig;
use cutr_recorder::counters::pm_sampling::PmConfig;
use cutr_recorder::pc_sampling::{PcSamplingConfig, StallReasons};

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
/// Runs a program this test has just copied. Another test thread that forks meanwhile holds the copy's write
/// descriptor until its child execs, and exec then fails with ETXTBSY ("text file busy"): a race of the test
/// harness, not of the program, so the start is tried again for a while.
fn output_of_fresh_copy(cmd: &mut Command) -> Output {
    let t0 = std::time::Instant::now();
    loop {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && t0.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            r => return r.unwrap(),
        }
    }
}

#[test]
fn the_injection_library_is_found_where_install_puts_it() {
    let dir = tempfile::tempdir().unwrap();
    let (bin, lib) = (dir.path().join("prefix/bin"), dir.path().join("prefix/lib"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    let exe = bin.join("cupti-record");
    std::fs::copy(env!("CARGO_BIN_EXE_cupti-record"), &exe).unwrap();
    let run = || {
        output_of_fresh_copy(
            Command::new(&exe).env_remove("CUTR_INJECTION_LIB").args(["-q", "--", "sh", "-c", "exit 4"]),
        )
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
    let man = output_of_fresh_copy(Command::new(&exe).arg("--manpage"));
    assert!(String::from_utf8_lossy(&man.stdout).contains("cupti\\-record \\- Record the CUDA activity of a command"));
    let bash = output_of_fresh_copy(Command::new(&exe).args(["--completions", "bash"]));
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

/// The configuration an injected library reads from the environment `cupti-record FLAGS -- env` gives `env`.
fn config_from_launch(dir: &std::path::Path, flags: &[String]) -> Config {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cupti-record"));
    c.current_dir(dir).arg("--injection-lib").arg(injection_library()).args(flags).args(["--", "env"]);
    // Only what cupti-record sets reaches the command.
    for o in OPTIONS {
        c.env_remove(o.var);
    }
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{flags:?}: {:?}", lines(&o.stderr));
    let env: HashMap<String, String> = lines(&o.stdout)
        .iter()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("CUTR_"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(|k| env.get(k).cloned()).unwrap()
}

/// Each flag, set away from its default, reaches the injected library: cupti-record's environment for its
/// command reads back as the configuration the flag means. Every flag of `config::OPTIONS` is tried.
#[test]
fn every_flag_reaches_the_recorder_through_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libcupti.so.13");
    std::fs::write(&lib, "").unwrap();
    let d = Config::default;
    let ms = Duration::from_millis;
    let cases: Vec<(Vec<&str>, Config)> = vec![
        (vec!["-o", "run-%h.cutr"], Config { output: "run-%h.cutr".into(), ..d() }),
        (vec!["--kinds", "kernel,runtime"], Config { kinds: vec![10, 5], ..d() }),
        (vec!["--buffer-size", "8M"], Config { buffer_bytes: 8 << 20, ..d() }),
        (vec!["--memory-cap", "64M"], Config { memory_cap_bytes: 64 << 20, ..d() }),
        (vec!["--flush-period", "250ms"], Config { flush_period: ms(250), ..d() }),
        (vec!["--start-delay", "1.5"], Config { start_delay: ms(1500), ..d() }),
        (vec!["--duration", "30s"], Config { duration: Some(ms(30_000)), ..d() }),
        (vec!["--control"], Config { control: true, ..d() }),
        (vec!["--start-paused"], Config { control: true, start_paused: true, ..d() }),
        (
            vec!["--capture-range", "nvtx:step@train"],
            Config {
                capture: Some((
                    CaptureRange::Nvtx { name: "step".into(), domain: Some("train".into()) },
                    CaptureEnd::Stop,
                )),
                ..d()
            },
        ),
        (
            vec!["--capture-range", "cuda-profiler-api", "--capture-range-end", "repeat:3"],
            Config { capture: Some((CaptureRange::ProfilerApi, CaptureEnd::Repeat(Some(3)))), ..d() },
        ),
        (
            vec!["--split", "1m", "-o", "run-%n.cutr"],
            Config { split: Some(SplitLimit::Every(ms(60_000))), output: "run-%n.cutr".into(), ..d() },
        ),
        (vec!["--ring", "512M"], Config { ring: Some(RingLimit { window: None, bytes: Some(512 << 20) }), ..d() }),
        (
            vec!["--ring", "5s", "--ring-trigger", "nvtx:oops,cuda-profiler-stop"],
            Config {
                ring: Some(RingLimit { window: Some(ms(5000)), bytes: None }),
                ring_triggers: vec![RingTrigger::Nvtx("oops".into()), RingTrigger::CudaProfilerStop],
                ..d()
            },
        ),
        (vec!["--crash-timeout", "0"], Config { crash_timeout: Duration::ZERO, ..d() }),
        (vec!["--control-wait", "500ms"], Config { control_wait: ms(500), ..d() }),
        (
            vec!["--counters", "nvml", "--counters-whole-run"],
            Config {
                counters: Some(CountersConfig { pm: None, ..CountersConfig::default() }),
                counters_whole_run: true,
                ..d()
            },
        ),
        (vec!["--device-buffer-size", "16M"], Config { device_buffer_bytes: Some(16 << 20), ..d() }),
        (vec!["--device-buffer-pool-limit", "8"], Config { device_buffer_pool_limit: Some(8), ..d() }),
        (vec!["--cupti-lib", lib.to_str().unwrap()], Config { cupti_library: Some(lib.clone()), ..d() }),
        (vec!["--keep-noisy-api"], Config { filter_noisy_api: false, ..d() }),
        (vec!["-q"], Config { quiet: true, ..d() }),
        (vec!["--um"], Config { um: true, ..d() }),
        (vec!["--graph-context", "off"], Config { graph_context: None, ..d() }),
        (vec!["--graph-context", "0"], Config { graph_context: Some(0), ..d() }),
        (vec!["--graph-context", "1000"], Config { graph_context: Some(256), ..d() }),
        (vec!["--pc-sampling"], Config { pc_sampling: Some(PcSamplingConfig::default()), ..d() }),
        (
            vec!["--pc-sampling", "--pc-period", "12", "--stall-reasons", "long_scoreboard,wait"],
            Config {
                pc_sampling: Some(PcSamplingConfig {
                    period_log2: Some(12),
                    stall_reasons: StallReasons::Only(vec!["long_scoreboard".into(), "wait".into()]),
                }),
                ..d()
            },
        ),
        (vec!["--counters"], Config { counters: Some(CountersConfig::default()), ..d() }),
        (
            vec!["--counters", "nvml", "--nvml-interval", "20ms"],
            Config { counters: Some(CountersConfig { nvml_interval: Some(ms(20)), pm: None }), ..d() },
        ),
        (
            vec!["--counters", "a__b.sum", "--counter-interval", "50us", "--nvml-interval", "off"],
            Config {
                counters: Some(CountersConfig {
                    nvml_interval: None,
                    pm: Some(PmConfig { metrics: vec!["a__b.sum".into()], interval: Duration::from_micros(50) }),
                }),
                ..d()
            },
        ),
    ];
    let mut tried = HashSet::new();
    for (flags, expected) in cases {
        for f in &flags {
            let long = match *f {
                "-o" => Some("output"),
                "-q" => Some("quiet"),
                f => f.strip_prefix("--"),
            };
            tried.extend(long);
        }
        let flags: Vec<String> = flags.into_iter().map(String::from).collect();
        assert_eq!(config_from_launch(dir.path(), &flags), expected, "{flags:?}");
    }
    let all: HashSet<&str> = OPTIONS.iter().filter_map(|o| Some(o.flag?.long)).collect();
    assert_eq!(tried, all);
}

/// `--help` shows every flag of `config::OPTIONS`, and lists every variable, each with its flag or, where it has
/// none, what it takes.
#[test]
fn help_lists_every_flag_and_variable() {
    let o = Command::new(env!("CARGO_BIN_EXE_cupti-record")).arg("--help").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let help = lines(&o.stdout);
    // The lines that name options (their help is indented further, under them): `-o, --output <PATH>`.
    let shown: Vec<&str> = help
        .iter()
        .filter(|l| l.starts_with("  -") || l.starts_with("      --"))
        .filter_map(|l| l.split_whitespace().find_map(|t| t.strip_prefix("--")))
        .collect();
    let mut expected: Vec<&str> = OPTIONS.iter().filter_map(|o| Some(o.flag?.long)).collect();
    expected.extend(["injection-lib", "help", "version"]);
    assert_eq!(shown, expected);
    let head = "The injected library reads these variables, which the flags set (each takes what its flag takes):";
    let start = help.iter().position(|l| l == head).unwrap() + 1;
    let listed: Vec<&str> =
        help[start..].iter().map(|l| l.split_whitespace().next().unwrap().split('=').next().unwrap()).collect();
    assert_eq!(listed, OPTIONS.iter().map(|o| o.var).collect::<Vec<_>>());
    let vars = &help[start..];
    assert_eq!(vars[0], format!("  {:<30} --output", "CUTR_OUTPUT"));
    assert!(vars.contains(&format!("  {:<30} --keep-noisy-api", "CUTR_FILTER_NOISY_API=0")));
    assert!(
        vars.contains(&format!("  {:<30} Activity buffers allocated at start [default: 4]", "CUTR_INITIAL_BUFFERS"))
    );
}

/// A bad value: exit status 2, and one line naming the flag (or the setting `validate` refuses).
#[test]
fn bad_values_exit_2_naming_the_flag() {
    let cases: Vec<(Vec<&str>, String)> = vec![
        (vec!["-o", ""], "--output: empty output path".into()),
        (vec!["--kinds", "kernal"], format!("--kinds: {}", config::parse_kinds("kernal").unwrap_err())),
        (vec!["--buffer-size", "4X"], "--buffer-size: unknown size unit in '4X' (use K, M or G)".into()),
        (vec!["--buffer-size", "12"], "buffer size: 12 bytes: use a multiple of 8 between 64K and 1G".into()),
        (vec!["--duration", "soon"], "--duration: not a duration: 'soon'".into()),
        (
            vec!["--capture-range", "nvtx:"],
            "--capture-range: 'nvtx:': the range name and domain must not be empty".into(),
        ),
        (vec!["--ring", "1K"], "--ring: ring size '1K' is under 1M".into()),
        (vec!["--split", "100"], "--split: '100': give a unit: a time (30s, 1m, 1h) or a size (500M, 2G)".into()),
        (
            vec!["--split", "1h"],
            "--split: the output path 'cutr-%p.cutr' has no %n for the part number (e.g. -o run-%n.cutr)".into(),
        ),
        (
            vec!["--split", "2G", "--ring", "5s", "-o", "r-%n.cutr"],
            "--split: --split and --ring cannot be combined: a flight recording is one window".into(),
        ),
        (vec!["--device-buffer-pool-limit=-1"], "--device-buffer-pool-limit: not a number: '-1'".into()),
        (vec!["--pc-sampling", "--pc-period", "x"], "--pc-period: not a number: 'x'".into()),
        (
            vec!["--pc-sampling", "--pc-period", "40"],
            "PC sampling period: 2^40 cycles: use an exponent from 5 to 31".into(),
        ),
        (
            vec!["--counters", "--counter-interval", "5us"],
            "--counter-interval: counter interval 5µs is shorter than 10µs, the fastest PM sampling rate (100 kHz)"
                .into(),
        ),
        (vec!["--counters", "--nvml-interval", "0"], "NVML interval: 0ns is shorter than 1ms".into()),
    ];
    for (flags, why) in cases {
        let o = Command::new(env!("CARGO_BIN_EXE_cupti-record")).args(&flags).args(["--", "true"]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{flags:?}");
        assert_eq!(lines(&o.stderr), [format!("cupti-record: error: {why}")], "{flags:?}");
    }
    // A flag without the one it refines is clap's usage error, status 2 too.
    let o = Command::new(env!("CARGO_BIN_EXE_cupti-record"))
        .args(["--capture-range-end", "repeat", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(lines(&o.stderr)[0], "error: the following required arguments were not provided:");
}
