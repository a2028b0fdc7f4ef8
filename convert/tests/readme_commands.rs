//! The README's `cupti-convert` commands run as a newcomer runs them, from the built binary in an empty folder:
//! every one that works offline on the repository's own recordings exits 0 with its one summary line, and the
//! window example (`--start 5.3s --end 5.4s`) holds the training steps its comment promises, as Perfetto's trace
//! processor reads them. The rest of the doc check (paths, listings) is `tests/tests/doc_check.rs`.
//!
//! Which commands run: those whose every recording argument (`*.cutr`) is a file of the repository. The others
//! name the reader's own recordings (`run.cutr`, `rank*.cutr`, `base.cutr`), which only a GPU machine makes;
//! `cupti-record`, `tools/*.sh` and `cargo build` lines are not `cupti-convert` commands.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{stderr_lines, text};
use cutr_tests::doc_check::convert_commands;
use cutr_tests::{repo, trace_processor};

/// The command's arguments with the repository's files made absolute (it runs in an empty folder), or None when
/// it names a recording the repository does not have.
fn runnable(args: &[String]) -> Option<Vec<String>> {
    let recordings: Vec<&String> = args.iter().filter(|a| a.ends_with(".cutr")).collect();
    if recordings.is_empty() || recordings.iter().any(|a| !repo().join(a).is_file()) {
        return None;
    }
    let absolute = |a: &String| {
        let p = repo().join(a);
        if a.contains('/') && p.exists() { p.to_string_lossy().into_owned() } else { a.clone() }
    };
    Some(args.iter().map(absolute).collect())
}

/// Runs one README command in a fresh folder; returns the folder and the command's stderr lines.
fn run_in_empty_folder(args: &[String]) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_cupti-convert")).args(args).current_dir(dir.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "cupti-convert {}: {}", args.join(" "), text(&o.stderr));
    let lines = stderr_lines(&o);
    (dir, lines)
}

/// The summary line without its time (`in 0.12 s`), the only part that differs run to run.
fn without_time(summary: &str) -> &str {
    summary.rsplit_once(" in ").map_or(summary, |(head, _)| head)
}

fn output(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    assert!(p.is_file(), "{} was not written", p.display());
    p
}

#[test]
fn the_readme_commands_run_and_the_window_holds_its_steps() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let commands = convert_commands(&readme);
    let runnable: Vec<(String, Vec<String>)> =
        commands.iter().filter_map(|(_, args)| Some((args.join(" "), runnable(args)?))).collect();
    assert_eq!(
        runnable.iter().map(|(shown, _)| shown.as_str()).collect::<Vec<_>>(),
        [
            "fixtures/pytorch_loop.cutr --perfetto -o pytorch_loop.pftrace",
            "fixtures/pytorch_loop.cutr --perfetto --start 5.3s --end 5.4s --kinds kernel,runtime,nvtx",
        ],
        "the README's runnable commands (the others of its {} name recordings only a GPU machine makes)",
        commands.len()
    );

    let (_whole_dir, lines) = run_in_empty_folder(&runnable[0].1);
    assert_eq!(
        lines.iter().map(|l| without_time(l)).collect::<Vec<_>>(),
        ["cupti-convert: wrote pytorch_loop.pftrace (962034 bytes): 91694 slices, 6157 arrows, 13 tracks (28842 \
          driver calls left out, the runtime's own and queries: --driver-calls draws them)"]
    );

    // "100 ms: steps 1-12": the NVTX ranges `step 1` to `step 12`, and 2,466 kernels on stream 7.
    let (window_dir, lines) = run_in_empty_folder(&runnable[1].1);
    assert_eq!(
        lines.iter().map(|l| without_time(l)).collect::<Vec<_>>(),
        ["cupti-convert: wrote pytorch_loop.pftrace (397205 bytes): 39141 slices, 2295 arrows, 8 tracks"]
    );
    let trace = output(window_dir.path(), "pytorch_loop.pftrace");
    let rows = trace_processor(
        &trace,
        &[
            "select name from slice where name like 'step %' order by ts",
            "select count(*) from slice join track on slice.track_id = track.id where track.name = 'stream 7'",
        ],
    );
    let steps: Vec<String> = rows[0].iter().map(|r| r[0].as_str().unwrap().to_string()).collect();
    assert_eq!(steps, (1..=12).map(|i| format!("step {i}")).collect::<Vec<_>>());
    assert_eq!(cutr_tests::int(&rows[1]), 2466);
}
