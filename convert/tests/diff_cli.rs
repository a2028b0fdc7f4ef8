//! `cupti-convert diff` as a user runs it: its exit codes (3 on a regression), the per-rank verdicts and the
//! options that move rows between reported and judged.

mod common;

use common::{fixture, path_str, run, stderr_lines, text};

#[test]
fn diff_exits_3_on_a_regression_and_0_otherwise() {
    let base = fixture("regress/base_a.cutr");
    let o = run(&["diff", path_str(&base), path_str(&fixture("regress/heavy_a.cutr")), "--json"]);
    assert_eq!(o.status.code(), Some(3));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["verdict"], "regression");
    let o = run(&["diff", path_str(&base), path_str(&fixture("regress/base_b.cutr")), "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_ne!(j["verdict"], "regression");
    let o = run(&["diff", path_str(&base)]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr_lines(&o), ["cupti-convert: error: give BASE NEW, or --base RUN... --new RUN..."]);
}

/// `diff --by-rank` judges each rank on its own: the rank whose `heavy` kernel doubled is the one that regressed
/// (exit 3), the unchanged rank is neutral; files are matched by the rank in their metadata, not their order; a
/// launcher without a rank is left out with a warning; no common rank is an error.
#[test]
fn diff_by_rank_names_the_rank_and_kernel_that_regressed() {
    let r = |f: &str| fixture(&format!("regress/{f}.cutr")).display().to_string();
    let (ba, bb, ha) = (r("base_a"), r("base_b"), r("heavy_a"));
    // Files without ranks: their position on each side is their rank.
    let o = run(&["diff", "--by-rank", "--json", "--base", &ba, &bb, "--new", &ha, &bb]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((j["verdict"].as_str(), j["regressed_ranks"].clone()), (Some("regression"), serde_json::json!([0])));
    let ranks = j["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    let judged = |rank: &serde_json::Value, v: &str| -> Vec<String> {
        rank["report"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["section"] == "kernel" && x["verdict"] == v)
            .map(|x| x["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(judged(&ranks[0], "regression"), ["heavy(float*, int, int)"]);
    assert_eq!(ranks[1]["report"]["verdict"], "neutral");
    assert_eq!(judged(&ranks[1], "regression"), Vec::<String>::new());
    // The same comparison for people: one line per rank, the regressed kernel named on rank 0's.
    let o = run(&["diff", "--by-rank", "--base", &ba, &bb, "--new", &ha, &bb]);
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "verdict: REGRESSION (2 rank(s) compared; regressed: rank 0)");
    assert!(
        lines[3].starts_with(
            "     0   regression   1/1    24.426 ms    27.231 ms   +11.5%  regression heavy(float*, int, int) +99.6%"
        ),
        "{out}"
    );
    assert_eq!(lines[4], "     1      neutral   1/1    24.250 ms    24.250 ms    +0.0%  -");

    // torchrun's files carry RANK: the new side given in reverse order still pairs rank 0 with rank 0.
    let t = |f: &str| fixture(&format!("allreduce_torchrun/{f}.cutr")).display().to_string();
    let (launcher, r0, r1) = (t("ar-3326"), t("ar-3373"), t("ar-3374"));
    let o = run(&["diff", "--by-rank", "--json", "--base", &launcher, &r0, &r1, "--new", &r1, &r0]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let per: Vec<(u64, String, f64)> = j["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let total = x["report"]["rows"].as_array().unwrap().iter().find(|r| r["section"] == "total").unwrap();
            (
                x["rank"].as_u64().unwrap(),
                x["report"]["verdict"].as_str().unwrap().to_string(),
                total["delta_ns"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(per, [(0, "neutral".to_string(), 0.0), (1, "neutral".to_string(), 0.0)]);
    assert!(
        text(&o.stderr).contains(&format!(
            "cupti-convert: warning: {launcher}: no rank in its metadata (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, \
             SLURM_PROCID) beside files that have one: left out of --by-rank (no GPU work)"
        )),
        "{}",
        text(&o.stderr)
    );
    // Rank 0 against rank 1 only: nothing to compare.
    let o = run(&["diff", "--by-rank", "--base", &r0, "--new", &r1]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).ends_with("cupti-convert: error: --by-rank: no rank is on both sides, nothing to compare\n")
    );
    let o = run(&["diff", "--by-rank", &ba, &bb]);
    assert_eq!(stderr_lines(&o), ["cupti-convert: error: --by-rank compares two jobs: --base FILES... --new FILES..."]);
    assert_eq!(o.status.code(), Some(2));
}

/// The wall span is reported, not judged, until `--fail-on span` asks; small rows are judged with `--min-share 0`;
/// wrong values of the new options are usage errors.
#[test]
fn diff_options_move_rows_between_reported_and_judged() {
    let (base, new) = (fixture("regress/base_a.cutr"), fixture("regress/heavy_a.cutr"));
    let rows = |extra: &[&str]| -> (Option<i32>, serde_json::Value) {
        let mut args = vec!["diff", path_str(&base), path_str(&new), "--json"];
        args.extend_from_slice(extra);
        let o = run(&args);
        (o.status.code(), serde_json::from_slice(&o.stdout).unwrap())
    };
    let row = |j: &serde_json::Value, section: &str, name: &str| -> String {
        let r = j["rows"].as_array().unwrap().iter().find(|r| r["section"] == section && r["name"] == name).unwrap();
        r["verdict"].as_str().unwrap().to_string()
    };
    let (code, j) = rows(&[]);
    assert_eq!(code, Some(3));
    assert_eq!(row(&j, "span", "wall span (first to last record)"), "reported");
    assert_eq!(row(&j, "nvtx", "main:teardown"), "reported");
    assert_eq!(j["counts"]["reported"], 11);
    // The heavy pair's span shrank 8.6%: an improvement once judged, and teardown's -60.6% of 0.8% of GPU time
    // is judged at --min-share 0.
    let (_, j) = rows(&["--fail-on", "span", "--min-share", "0"]);
    assert_eq!(row(&j, "span", "wall span (first to last record)"), "improvement");
    assert_eq!(row(&j, "nvtx", "main:teardown"), "inconclusive");
    assert_eq!(j["counts"].get("reported"), None);
    // A per-instance floor above the heavy kernel's +2.9 ms makes it neutral.
    let (_, j) = rows(&["--instance-floor", "3ms"]);
    assert_eq!(row(&j, "kernel", "heavy(float*, int, int)"), "neutral");
    for (bad, message) in [
        (vec!["--fail-on", "speed"], None),
        (vec!["--min-share", "101"], Some("cupti-convert: error: --min-share must be a percentage from 0 to 100")),
        (
            vec!["--instance-floor", "fast"],
            Some("cupti-convert: error: not a time: 'fast' (use e.g. 1.5, 200ms, 10us)"),
        ),
    ] {
        let mut args = vec!["diff", path_str(&base), path_str(&new)];
        args.extend_from_slice(&bad);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{bad:?}");
        if let Some(m) = message {
            assert_eq!(stderr_lines(&o), [m]);
        }
    }
}

/// `diff --stream` gives the loaded diff's report (the JSON equal but for its `stream` part) and exit code, says
/// how it streamed, and names what it did not compare; `--by-rank` streams too.
#[test]
fn diff_streamed_gives_the_loaded_report() {
    let (base, new) = (fixture("regress/base_a.cutr"), fixture("regress/heavy_a.cutr"));
    let json = |extra: &[&str]| -> (Option<i32>, serde_json::Value) {
        let mut args = vec!["diff", path_str(&base), path_str(&new), "--json"];
        args.extend_from_slice(extra);
        let o = run(&args);
        (o.status.code(), serde_json::from_slice(&o.stdout).unwrap())
    };
    let (whole_code, whole) = json(&["--no-stream"]);
    let (code, mut streamed) = json(&["--stream"]);
    assert_eq!((whole_code, code), (Some(3), Some(3)));
    let stream = streamed.as_object_mut().unwrap().remove("stream").unwrap();
    assert_eq!(whole, streamed);
    assert_eq!((stream["runs"].as_u64(), stream["launches_out_of_horizon"].as_u64()), (Some(2), Some(0)));
    assert_eq!(stream["launch_horizon"], 1_048_576);
    let o = run(&["diff", "--stream", path_str(&base), path_str(&new)]);
    let out = text(&o.stdout);
    assert!(out.lines().nth(2).unwrap().starts_with("Streamed 2 runs over "), "{out}");
    // Recordings with counters: the streamed report compares their averages as the loaded one does (both
    // kernels x the 12 series both have, threshold 0), and says nothing was left out.
    let (c, k) = (fixture("counter_workload.cutr"), fixture("counter_100khz.cutr"));
    let counters = |flag: &str| {
        let o = run(&["diff", "--json", "--threshold", "0", flag, path_str(&c), path_str(&k)]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let changes = v["counter_changes"].as_array().unwrap().iter();
        let pairs: Vec<String> = changes.map(|c| format!("{} {}", c["kernel"], c["series"])).collect();
        (pairs, v["stream"]["not_compared"].clone())
    };
    let (streamed, not_compared) = counters("--stream");
    assert_eq!((streamed.len(), not_compared), (24, serde_json::json!([])));
    assert_eq!(streamed, counters("--no-stream").0);
    let o = run(&["diff", "--stream", "--no-stream", path_str(&base), path_str(&new)]);
    assert_eq!(o.status.code(), Some(2));
    // Rank by rank: the same ranks and verdicts, the stream said on stderr.
    let (ba, bb) = (base.display().to_string(), fixture("regress/base_b.cutr").display().to_string());
    let ha = new.display().to_string();
    let by_rank = |flag: &str| run(&["diff", "--by-rank", "--json", flag, "--base", &ba, &bb, "--new", &ha, &bb]);
    let (w, s) = (by_rank("--no-stream"), by_rank("--stream"));
    assert_eq!((w.status.code(), s.status.code()), (Some(3), Some(3)));
    let mut s_json: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
    for r in s_json["ranks"].as_array_mut().unwrap() {
        r["report"].as_object_mut().unwrap().remove("stream").unwrap();
    }
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&w.stdout).unwrap(), s_json);
    assert!(text(&s.stderr).contains("cupti-convert: note: Streamed 4 runs over "), "{}", text(&s.stderr));
}

/// The parts of a `--split` recording on one side are one run, loaded or streamed: their kernels add up per run
/// (here pytorch_loop given as both parts of one run against pytorch_loop twice, two runs: 2 x 5,653 kernels a
/// run against 5,653).
#[test]
fn a_split_recordings_parts_are_one_run_of_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let whole = std::fs::read(fixture("pytorch_loop.cutr")).unwrap();
    let part = |n: u32| {
        let p = dir.path().join(format!("run-{n:03}.cutr"));
        std::fs::write(&p, cutr_synth::forge::mark_as_part(&whole, "00000000000000aa", n, 4242)).unwrap();
        p
    };
    let (p1, p2) = (part(1), part(2));
    let plain = fixture("pytorch_loop.cutr");
    let mut reports = Vec::new();
    for mode in ["--stream", "--no-stream"] {
        // The parts given out of order: grouped by run and read in part order.
        let args = ["diff", mode, "--json", "--base", path_str(&p2), path_str(&p1), "--new", path_str(&plain)];
        let o = run(&[&args[..], &[path_str(&plain)]].concat());
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", text(&o.stderr));
        let mut j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if mode == "--stream" {
            assert_eq!(j["stream"]["runs"], 3, "one run of two parts, two runs of one file");
        }
        j.as_object_mut().unwrap().remove("stream");
        let kernels: u64 = j["count_changes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["section"] == "kernel")
            .map(|c| {
                assert_eq!(c["base"].as_f64().unwrap(), 2.0 * c["new"].as_f64().unwrap(), "{c}");
                c["base"].as_f64().unwrap() as u64
            })
            .sum();
        assert_eq!(kernels, 2 * 5_653, "{mode}: every kernel row counts both parts");
        let files = j["base_files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect::<Vec<_>>();
        assert_eq!(files, [path_str(&p1), path_str(&p2)], "{mode}: part order");
        reports.push(j);
    }
    // Kernels, copies and totals agree. NVTX rows are left out here: the same file given as both parts repeats its
    // range ids at the same times, which no recording does (tests/split_fake.rs pairs real parts' ranges).
    let gpu_rows = |j: &serde_json::Value, key: &str| -> Vec<serde_json::Value> {
        j[key].as_array().unwrap().iter().filter(|r| r["section"] != "nvtx").cloned().collect()
    };
    for key in ["rows", "count_changes"] {
        assert_eq!(gpu_rows(&reports[0], key), gpu_rows(&reports[1], key), "{key}: streamed and loaded agree");
    }
    assert_eq!(gpu_rows(&reports[0], "rows").len(), 43, "41 kernel rows, the span and the total");
}
