//! The viewers' output limit: an output whose estimate passes `--max-output` is refused before anything is
//! written, with the estimate, what it holds and the limit; `none` lifts it; a wrong size is a usage error; the
//! densest real recording converts under the default.

mod common;

use std::path::Path;

use common::{fixture, path_str, run, stderr_lines, text};

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn an_output_past_the_limit_is_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.json");
    let f = fixture("cuda_workload.cutr");
    let o = run(&[path_str(&f), "--chrome", "-q", "-o", path_str(&out), "--max-output", "100KB"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr_lines(&o),
        [format!(
            "cupti-convert: error: cannot write {}: the Chrome trace would be about 234 KB (705 slices, 212 arrows, \
             24 counter points), over the limit of 100 KB (--max-output 100 KB): write less with --start/--end or \
             --kinds, or raise the limit with --max-output SIZE",
            out.display()
        )]
    );
    assert_eq!(names(dir.path()), Vec::<String>::new(), "nothing written");
    // The same output under a limit it fits, and with none.
    for limit in ["1MB", "none"] {
        let o = run(&[path_str(&f), "--chrome", "-q", "-o", path_str(&out), "--max-output", limit]);
        assert_eq!(o.status.code(), Some(0), "{limit}: {}", text(&o.stderr));
        assert_eq!(names(dir.path()), ["t.json"]);
    }
    let pftrace = dir.path().join("t.pftrace");
    let o = run(&[path_str(&f), "--perfetto", "-q", "-o", path_str(&pftrace), "--max-output", "10KB"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr_lines(&o),
        [format!(
            "cupti-convert: error: cannot write {}: the Perfetto trace would be about 15 KB (705 slices, 212 arrows, \
             24 counter points), over the limit of 10 KB (--max-output 10 KB): write less with --start/--end or \
             --kinds, or raise the limit with --max-output SIZE",
            pftrace.display()
        )]
    );
    assert_eq!(names(dir.path()), ["t.json"]);
}

#[test]
fn a_wrong_size_is_a_usage_error() {
    let f = fixture("cuda_workload.cutr");
    let o = run(&[path_str(&f), "--chrome", "-o", "/dev/null", "--max-output", "lots"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr_lines(&o)[0],
        "error: invalid value 'lots' for '--max-output <SIZE>': not a size: 'lots' (e.g. 500MB, 2GB, 1.5G)"
    );
}

/// `launch_loop_100k.cutr`, the densest recording (its Chrome JSON is 112 times its 789 KB), converts under the
/// default limit (500 times the input, here 394 MB).
#[test]
fn the_densest_recording_converts_under_the_default_limit() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.json");
    let o = run(&[path_str(&fixture("launch_loop_100k.cutr")), "--chrome", "-q", "-o", path_str(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let ratio =
        std::fs::metadata(&out).unwrap().len() / std::fs::metadata(fixture("launch_loop_100k.cutr")).unwrap().len();
    assert_eq!(ratio, 112);
}
