//! `cupti-convert source --diff` as a user runs it on the H100 fixtures of fixtures/source_diff: its exit codes
//! (3 when a line grew, 0 for A/A, 4 for no kernel in common, 2 for wrong input), its text, Markdown and JSON, and
//! `diff`'s kernel row naming the lines that moved.

mod common;

use common::{fixture, path_str, run, stderr_lines, text};

fn f(name: &str) -> String {
    path_str(&fixture(&format!("source_diff/{name}.cutr"))).to_string()
}

#[test]
fn exit_codes_follow_diff() {
    let o = run(&["source", "--diff", &f("base-1"), &f("extra-1")]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let o = run(&["source", "--diff", &f("base-1"), &f("base-2")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // Several runs a side: --base/--new imply --diff.
    let o = run(&["source", "--base", &f("base-1"), &f("base-2"), "--new", &f("base-3"), &f("base-4")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // No kernel on both sides: different programs.
    let other = path_str(&fixture("source_workload_pcs.cutr")).to_string();
    let o = run(&["source", "--diff", &f("base-1"), &other]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    assert_eq!(
        stderr_lines(&o),
        ["cupti-convert: warning: no kernel has PC samples on both sides: these are probably recordings of different \
          programs, nothing was compared"]
    );
}

#[test]
fn bad_input_is_named() {
    let plain = path_str(&fixture("cuda_workload.cutr")).to_string();
    let o = run(&["source", "--diff", &f("base-1"), &plain]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr_lines(&o),
        [format!(
            "cupti-convert: error: {plain}: no PC samples to compare: record it with `cupti-record --pc-sampling`"
        )]
    );
    // A recording cut inside its PC samples: the cut is warned of, then the side is named.
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.cutr");
    std::fs::write(&cut, &std::fs::read(fixture("source_diff/base-1.cutr")).unwrap()[..40_000]).unwrap();
    let o = run(&["source", "--diff", path_str(&cut), &f("base-2")]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr_lines(&o);
    assert!(err.iter().any(|l| l.contains("file ends inside pc_samples chunk #10")), "{err:?}");
    assert_eq!(
        err.last().unwrap(),
        &format!(
            "cupti-convert: error: {}: no PC sample left to compare: every one was lost or left out (the warnings \
             say why)",
            path_str(&cut)
        )
    );
    let o = run(&["source", "--diff", &f("base-1")]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr_lines(&o), ["cupti-convert: error: source --diff: give BASE NEW, or --base RUN... --new RUN..."]);
    let o = run(&["source", "--diff", &f("base-1"), &f("extra-1"), "--threshold", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["source", "--diff", &f("base-1"), &f("extra-1"), "--csv"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["source", &f("base-1"), "--markdown"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["source", "--diff", &f("base-1"), &f("extra-1"), "--kernel", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr_lines(&o),
        ["cupti-convert: error: --kernel nope: no sampled kernel's name contains it on either side"]
    );
}

/// The text names the new line with the stall that grew, and the chase's drop; A/A compares SASS offsets.
#[test]
fn text_and_markdown_name_the_line() {
    let o = run(&["source", "--diff", &f("base-1"), &f("extra-1")]);
    let out = text(&o.stdout);
    let row = |at: &str| out.lines().find(|l| l.contains(at)).unwrap_or_else(|| panic!("{at}:\n{out}")).to_string();
    assert!(out.starts_with("verdict: GREW (1 base run(s), 1 new run(s); two-proportion z test"), "{out}");
    assert_eq!(
        row("calls_workload.cu:64").split_whitespace().collect::<Vec<_>>(),
        ["0.00%", "85.72%", "+85.72", "pp", "grew", "(new)", "calls_workload.cu:64", "long_scoreboard", "+83.91", "pp"]
    );
    assert_eq!(
        row("calls_workload.cu:61").split_whitespace().collect::<Vec<_>>(),
        ["92.95%", "1.28%", "-91.66", "pp", "dropped", "calls_workload.cu:61", "long_scoreboard", "-92.15", "pp"]
    );
    assert!(row("calls_workload.cu:60").contains("unchanged"));
    let o = run(&["source", "--diff", &f("base-1"), &f("base-2"), "--top", "3"]);
    let out = text(&o.stdout);
    assert!(out.contains("  314 more SASS offsets (--top 0 lists them)"), "{out}");
    assert_eq!(out.lines().filter(|l| l.contains(" unchanged ")).count(), 6, "{out}");
    let o = run(&["source", "--diff", &f("base-1"), &f("extra-1"), "--markdown", "--top", "2"]);
    let out = text(&o.stdout);
    assert!(out.starts_with("### cutr source diff: **grew**\n"), "{out}");
    assert!(
        out.contains(
            "| grew (new) | `calls_workload.cu:64` | 0.00% | 85.72% | +85.72 pp | long_scoreboard +83.91 pp |"
        ),
        "{out}"
    );
    assert!(out.contains("\n6 more rows beyond the first 2.\n"), "{out}");
}

#[test]
fn json_holds_every_line() {
    let o = run(&["source", "--diff", &f("base-1"), &f("extra-1"), "--json", "--threshold", "6"]);
    // At a 6 pp threshold the FMA line's +5.79 pp is no change; line 64 still grew.
    assert_eq!(o.status.code(), Some(3));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["threshold_pp"], 6.0);
    let lines = j["kernels"][0]["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 8);
    let change = |n: u64| lines.iter().find(|l| l["line"] == n).unwrap()["change"].as_str().unwrap().to_string();
    assert_eq!([change(64), change(61), change(62)], ["grew", "dropped", "unchanged"]);
    assert_eq!(j["base_files"], serde_json::json!([f("base-1")]));
}

/// `diff`'s link: the kernel that regressed (extra -> base is +2.5% at --threshold 2) names the lines that moved.
#[test]
fn diff_names_the_lines_that_moved() {
    let o = run(&["diff", "--threshold", "2", &f("extra-1"), &f("base-1"), "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let row = j["rows"].as_array().unwrap().iter().find(|r| r["section"] == "kernel").unwrap();
    assert_eq!(row["verdict"], "regression");
    let moved = row["moved_lines"].as_array().unwrap();
    let at: Vec<(&str, Option<&str>)> =
        moved.iter().map(|m| (m["location"].as_str().unwrap(), m["stall"].as_str())).collect();
    assert_eq!(
        at,
        [("calls_workload.cu:61", Some("long_scoreboard")), ("calls_workload.cu:64", Some("long_scoreboard"))]
    );
    assert!((moved[0]["change_pp"].as_f64().unwrap() - 91.6635).abs() < 1e-4);
    assert!((moved[1]["change_pp"].as_f64().unwrap() + 85.7227).abs() < 1e-4);
    let o = run(&["diff", "--threshold", "2", &f("extra-1"), &f("base-1")]);
    assert!(
        text(&o.stdout).contains(
            "(instances); lines moved (PC samples): calls_workload.cu:61 +91.66 pp (long_scoreboard), \
             calls_workload.cu:64 -85.72 pp (long_scoreboard)"
        ),
        "{}",
        text(&o.stdout)
    );
    // A neutral kernel row names nothing.
    let o = run(&["diff", &f("base-1"), &f("extra-1"), "--json", "--all"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["rows"].as_array().unwrap().iter().all(|r| r.get("moved_lines").is_none()));
}
