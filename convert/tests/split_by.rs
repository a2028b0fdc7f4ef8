//! `--perfetto --split-by step|TIME`: one trace per window, read back by the real Perfetto trace processor. Every
//! slice of the whole trace is in exactly one window (the one it starts in), and every window has the same tracks.

mod common;

use std::path::Path;

use common::{fixture, path_str, run, text};
use cutr_tests::{IMPORT_PROBLEMS, int, trace_processor};

/// Each track's name, sorted (a thread track's name is its thread's).
const TRACK_NAMES: &str = "select group_concat(name, '|') from (select name from track order by name)";

/// (slices, track names) of one trace, checking it imports without problems.
fn read(trace: &Path) -> (i64, String) {
    let rows = trace_processor(trace, &["select count(*) from slice", TRACK_NAMES, IMPORT_PROBLEMS]);
    assert!(rows[2].is_empty(), "{}: import problems {:?}", trace.display(), rows[2]);
    (int(&rows[0]), rows[1][0][0].as_str().unwrap().to_string())
}

/// Converts the loop fixture with `args`; the files written, by name.
fn convert(dir: &Path, args: &[&str]) -> Vec<std::path::PathBuf> {
    let loop_ = fixture("pytorch_loop.cutr");
    let out = dir.join("pl.pftrace");
    let mut all = vec![path_str(&loop_), "--perfetto", "-q", "-o", path_str(&out)];
    all.extend_from_slice(args);
    let o = run(&all);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
}

#[test]
fn windows_by_step_hold_every_slice_once_on_the_same_tracks() {
    let whole_dir = tempfile::tempdir().unwrap();
    let whole = convert(whole_dir.path(), &[]);
    let (whole_slices, whole_tracks) = read(&whole[0]);
    assert_eq!(whole_slices, 91_694);
    let dir = tempfile::tempdir().unwrap();
    let files = convert(dir.path(), &["--split-by", "step", "--step", "step "]);
    // The fixture's 20 ranges "step 1".."step 20" (stats --nvtx names them); window 000 holds the warm-up before.
    let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    let expected: Vec<String> = (0..=20).map(|n| format!("pl-{n:03}.pftrace")).collect();
    assert_eq!(names, expected);
    let read_back: Vec<(i64, String)> = files.iter().map(|f| read(f)).collect();
    let slices: Vec<i64> = read_back.iter().map(|r| r.0).collect();
    // The warm-up (two warm-up iterations, the first slow one with its module loads) and 20 steps of 3,868 slices
    // but the last, whose window also holds what follows the loop.
    let mut want = vec![14_316];
    want.extend([3_868; 19]);
    want.push(3_886);
    assert_eq!(slices, want);
    assert_eq!(slices.iter().sum::<i64>(), whole_slices);
    for (f, (_, tracks)) in files.iter().zip(&read_back) {
        assert_eq!(tracks, &whole_tracks, "{}", f.display());
    }
    assert_eq!(whole_tracks.split('|').count(), 13, "{whole_tracks}");
}

#[test]
fn windows_by_time_skip_empty_ones_and_hold_every_slice_once() {
    let dir = tempfile::tempdir().unwrap();
    let files = convert(dir.path(), &["--split-by", "1s"]);
    // The fixture's chunks cover the warm-up in the first second and the steps from the fifth to the sixth:
    // windows 2-4 (1-4 s) hold no chunk and are not written; a file's number is its window's.
    let names: Vec<String> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["pl-001.pftrace", "pl-005.pftrace", "pl-006.pftrace"]);
    let read_back: Vec<(i64, String)> = files.iter().map(|f| read(f)).collect();
    assert_eq!(read_back.iter().map(|r| r.0).collect::<Vec<_>>(), [861, 323, 90_510]);
    assert!(read_back.iter().all(|r| r.1 == read_back[0].1));
}

#[test]
fn split_by_refuses_what_it_cannot_do() {
    let loop_ = fixture("pytorch_loop.cutr");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.pftrace");
    let (input, out) = (path_str(&loop_), path_str(&out));
    let cases: [(&[&str], &str); 4] = [
        (&["--split-by", "step"], "no closed NVTX range's name starts with \"ProfilerStep#\"; give --step PREFIX"),
        (&["--split-by", "steps"], "--split-by takes `step` or a time (10s, 500ms), not 'steps'"),
        (&["--split-by", "0s"], "--split-by 0s: a window must last longer than 0 ns"),
        (&["--split-by", "1s", "--step", "step "], "--step PREFIX goes with --split-by step (or --findings)"),
    ];
    for (args, message) in cases {
        let mut all = vec![input, "--perfetto", "-o", out];
        all.extend_from_slice(args);
        let o = run(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(message), "{args:?}: {}", text(&o.stderr));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing written");
    let o = run(&[input, "--chrome", "--split-by", "1s"]);
    assert_eq!(o.status.code(), Some(2));
}

/// The first number after `before` in `s`.
fn number_after(s: &str, before: &str) -> u64 {
    let at = s.find(before).unwrap_or_else(|| panic!("no {before:?} in {s}")) + before.len();
    s[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

#[test]
fn nvtx_spans_near_a_window_end_are_drawn_once_in_the_window_of_their_range() {
    // A generated loop queues its GPU work behind the host: the kernels of a range opened near a window's end run
    // after it. Each range's GPU span is drawn in its range's window, none lost or drawn twice (reading no further
    // than each window's end, 22 of the 14 windows' spans were lost: 210,876 slices).
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("g.cutr");
    cutr_synth::write_file(&input, cutr_synth::SynthOptions { records: 300_000, ..Default::default() }).unwrap();
    let whole = dir.path().join("whole.pftrace");
    let o = run(&[path_str(&input), "--perfetto", "-o", path_str(&whole)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let whole_slices = number_after(&text(&o.stderr), "bytes): ");
    let o = run(&[path_str(&input), "--perfetto", "--split-by", "100ms", "-o", path_str(&dir.path().join("w"))]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let last = err.lines().last().unwrap();
    let windows = number_after(last, "cupti-convert: ");
    let split_slices = number_after(last, "shared tracks), ");
    // Every track is in the first window (the prologue's allocations and overhead, both threads and all streams):
    // each window after it is written once, with those tracks.
    let rewritten = number_after(last, "windows (");
    assert_eq!((whole_slices, windows, split_slices, rewritten), (210_898, 14, 210_898, 0), "{err}");
}
