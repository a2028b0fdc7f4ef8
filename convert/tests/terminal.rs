//! What `cupti-convert` prints on a terminal and to scripts: `diff`'s exit code for unrelated programs, a closed or
//! broken standard output, `stats` fitted to the terminal's width, its top rows with the rest summed up, and its
//! time and NVTX windows.

mod common;

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
            [
                "cupti-convert: warning: only 0% of the base's kernel time is in kernels the new runs also have: \
                 these are probably recordings of different programs"
            ]
        );
    }
}
