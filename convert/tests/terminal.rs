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

/// `stats` with `env`, and its text.
fn stats_with_env(args: &[&str], env: &[(&str, &str)]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_cupti-convert"))
        .arg("stats")
        .args(args)
        .env_remove("COLUMNS")
        .envs(env.iter().copied())
        .output()
        .expect("cupti-convert runs");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    text(&o.stdout)
}

/// The 134-character cuBLAS kernel name of fixtures/pytorch_loop.cutr.
const LONG_KERNEL: &str = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas";

/// Lines no longer than `width` characters.
fn longest_line(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

/// With `COLUMNS=100` (a terminal's width, or set for a pipe) no line of the report is longer: the kernel table
/// keeps Time, Total, Instances and Avg and shortens names after two thirds; JSON and CSV keep every name whole.
/// Without `COLUMNS` the text is as wide as before (names cut at 100 characters), `--wide` is whole whatever
/// `COLUMNS` says, and `--width 80` fits 80.
#[test]
fn stats_fits_the_width() {
    let f = fixture("pytorch_loop.cutr");
    let columns = [("COLUMNS", "100")];
    let fitted = stats_with_env(&[path_str(&f)], &columns);
    assert_eq!(longest_line(&fitted), 100, "{fitted}");
    let kernels: Vec<&str> = fitted.lines().skip(4).take(3).collect();
    assert_eq!(
        kernels,
        [
            "  Time (%) Total (ns) Instances Avg (ns) Name",
            "      13.7  5,063,883       391 12,951.1 sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_..._kernel__5x_cublas",
            "      11.9  4,385,275       276 15,888.7 sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_..._kernel__5x_cublas",
        ]
    );
    assert!(!fitted.contains(LONG_KERNEL));
    // Memory in use leaves out who reached the peak and the frees without allocation.
    assert!(fitted.contains(
        "\n  Peak (bytes) Peak at Allocs Frees At end (bytes)      Memory Device\n   348,841,256 5.263 s  1,218     0    \
         348,841,256      device GPU 0\n"
    ));
    let json = stats_with_env(&[path_str(&f), "--json"], &columns);
    let csv = stats_with_env(&[path_str(&f), "--csv"], &columns);
    assert!(json.contains(&format!("\"name\": \"{LONG_KERNEL}\"")) && csv.contains(&format!("kernel,{LONG_KERNEL},")));
    let plain = stats_with_env(&[path_str(&f)], &[]);
    assert_eq!(longest_line(&plain), 317);
    assert!(plain.contains(&format!(" {}...\n", &LONG_KERNEL[..97])));
    let wide = stats_with_env(&[path_str(&f), "--wide"], &columns);
    assert!(wide.contains(&format!(" {LONG_KERNEL}\n")) && longest_line(&wide) > 100);
    assert_eq!(longest_line(&stats_with_env(&[path_str(&f), "--width", "80"], &columns)), 80);
}

/// The text shows each section's 20 biggest rows and a line for the rest; the totals (the header's GPU time,
/// every percentage) stay over all rows. `--top 0` shows all 41 kernels; JSON and CSV have every row unless
/// `--top` is given, and then say what was left out.
#[test]
fn stats_shows_the_top_rows_and_sums_up_the_rest() {
    let f = fixture("pytorch_loop.cutr");
    let shown = stats_with_env(&[path_str(&f), "--report", "kernels"], &[]);
    assert!(shown.contains("pytorch_loop.cutr: GPU time 37.480 ms over a span of 5.822 s"));
    // Table rows start with their Time (%).
    let rows = |t: &str| t.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).count();
    assert_eq!(rows(&shown), 20, "{shown}");
    assert!(shown.ends_with("  ... 21 more kernels, 8.3% of kernel time (3,043,426 ns; --top 0 shows every row)\n"));
    let all = stats_with_env(&[path_str(&f), "--report", "kernels", "--top", "0"], &[]);
    assert_eq!(rows(&all), 41);
    assert!(!all.contains(" more kernels"));
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![path_str(&f), "--json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&stats_with_env(&args, &[])).unwrap()
    };
    let whole = json(&[]);
    assert_eq!((whole["kernels"].as_array().unwrap().len(), whole.get("kernels_left_out")), (41, None));
    let top = json(&["--top", "5"]);
    assert_eq!(top["kernels"].as_array().unwrap().len(), 5);
    assert_eq!(
        (&top["kernels_left_out"]["rows"], &top["kernels_left_out"]["total_ns"]),
        (&36.into(), &16_969_026.into())
    );
    assert_eq!((&top["api_left_out"]["rows"], &top["api_left_out"]["total_ns"]), (&42.into(), &59_216_141.into()));
    assert_eq!(top["gpu_time_ns"], whole["gpu_time_ns"]);
}

/// `--start 5.3s --end 5.4s` holds steps 1 to 12 of fixtures/pytorch_loop.cutr: 2,466 kernels of 39 names,
/// 16,455,358 ns (what the Chrome trace of the same window holds: 2,466 `kernel` events, 16,455,358 ns), against
/// 5,653 and 36,884,764 ns for the whole recording. `--nvtx step` keeps the kernels launched inside the 20 `step
/// N` ranges (4,820, 31,977,245 ns): warm-up's are left out; inside the window, every kernel is a step's.
#[test]
fn stats_reports_a_time_or_nvtx_window() {
    let f = fixture("pytorch_loop.cutr");
    let kernels = |extra: &[&str]| -> (usize, u64, u64, serde_json::Value) {
        let mut args = vec![path_str(&f), "--json"];
        args.extend_from_slice(extra);
        let j: serde_json::Value = serde_json::from_str(&stats_with_env(&args, &[])).unwrap();
        let k = j["kernels"].as_array().unwrap();
        let sum = |key: &str| k.iter().map(|x| x[key].as_u64().unwrap()).sum::<u64>();
        (k.len(), sum("count"), sum("total_ns"), j["window"].clone())
    };
    assert_eq!(kernels(&[]), (41, 5_653, 36_884_764, serde_json::Value::Null));
    let window = "records overlapping --start 5.3s --end 5.4s (from the first record)";
    assert_eq!(kernels(&["--start", "5.3s", "--end", "5.4s"]), (39, 2_466, 16_455_358, window.into()));
    let steps =
        "GPU work launched inside the 20 NVTX ranges named step (--nvtx; API calls and NVTX ranges not narrowed)";
    assert_eq!(kernels(&["--nvtx", "step"]), (39, 4_820, 31_977_245, steps.into()));
    let both = format!(
        "{window}; GPU work launched inside the 12 NVTX ranges named step (--nvtx; API calls and NVTX ranges not \
         narrowed)"
    );
    assert_eq!(kernels(&["--start", "5.3s", "--end", "5.4s", "--nvtx", "step"]), (39, 2_466, 16_455_358, both.into()));
    // The steps in the window, by the NVTX section.
    let j: serde_json::Value = serde_json::from_str(&stats_with_env(
        &[path_str(&f), "--json", "--report", "nvtx", "--start", "5.3s", "--end", "5.4s"],
        &[],
    ))
    .unwrap();
    let mut steps: Vec<u32> = j["nvtx"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str().unwrap().strip_prefix("step ").map(|n| n.parse().unwrap()))
        .collect();
    steps.sort_unstable();
    assert_eq!(steps, (1..=12).collect::<Vec<u32>>());
    // The text says the window under its first line.
    let shown = stats_with_env(&[path_str(&f), "--report", "kernels", "--start", "5.3s", "--end", "5.4s"], &[]);
    assert_eq!(shown.lines().nth(1), Some(format!("Window: {window}").as_str()));
    // Wrong windows are usage errors; a window past the records is said, with where the records lie.
    let o = run(&["stats", path_str(&f), "--start", "abc"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr_lines(&o), ["cupti-convert: error: not a time: 'abc' (use e.g. 1.5, 200ms, 10us)"]);
    let o = run(&["stats", path_str(&f), "--start", "5.4s", "--end", "5.3s"]);
    assert_eq!(
        (o.status.code(), stderr_lines(&o)),
        (Some(2), vec!["cupti-convert: error: --end is before --start".into()])
    );
    let o = run(&["stats", path_str(&f), "--nvtx", ""]);
    assert_eq!(
        (o.status.code(), stderr_lines(&o)),
        (Some(2), vec!["cupti-convert: error: --nvtx needs the name of NVTX ranges (e.g. --nvtx step)".into()])
    );
    let o = run(&["stats", path_str(&f), "--start", "100s", "--report", "kernels"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stderr_lines(&o),
        ["cupti-convert: warning: the window --start 100s keeps no record: the records lie at 0.000-0.164 s, \
             0.817-0.820 s, 4.819-5.494 s and 5.821-5.822 s (seconds after the first record)"]
    );
    assert!(text(&o.stdout).contains("GPU kernels\n  (none)\n"));
    // A name no range has is said, and keeps no GPU work.
    let o = run(&["stats", path_str(&f), "--nvtx", "nosuch", "--report", "kernels"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr_lines(&o).contains(
        &"cupti-convert: warning: --nvtx nosuch: no closed NVTX range is named nosuch: no GPU work is kept".to_string()
    ));
    assert!(text(&o.stdout).contains("GPU kernels\n  (none)\n"));
}

/// On a terminal (a pseudo-terminal of 90 columns made by util-linux's `script`), the text fits the terminal's
/// width without `COLUMNS`.
#[test]
fn stats_on_a_terminal_fits_its_width() {
    let command = format!(
        "stty cols 90 rows 50; {} stats {} --report kernels",
        env!("CARGO_BIN_EXE_cupti-convert"),
        path_str(&fixture("pytorch_loop.cutr"))
    );
    let o = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env_remove("COLUMNS")
        .stdin(Stdio::null())
        .output()
        .expect("util-linux's script runs");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let shown = text(&o.stdout).replace('\r', "");
    assert_eq!(longest_line(&shown), 90, "{shown}");
    assert!(shown.contains("  Time (%) Total (ns) Instances Name\n"), "{shown}");
}
