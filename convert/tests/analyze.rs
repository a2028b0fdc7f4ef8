//! `cupti-convert analyze`: the budget's parts add up to each GPU's span on every fixture, the idle causes to its
//! idle time; pytorch_loop's budget and idle causes to the ns; the launch-bound loop is called launch-bound; the
//! JSON's shape; bad arguments refused. The hand-made cases known by construction (overlapping compute and
//! communication, a copy under a kernel, a gap of each cause) are unit tests of `analyze::budget` and
//! `analyze::idle`.

mod common;

use std::path::{Path, PathBuf};

use common::{fixture, run, stderr_lines, text};
use serde_json::{Value, json};

fn analyze_json(files: &[&Path], extra: &[&str]) -> Value {
    let mut args = vec!["analyze", "--json"];
    args.extend(files.iter().map(|p| p.to_str().unwrap()));
    args.extend(extra);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    stderr_lines(&o);
    serde_json::from_slice(&o.stdout).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// computation + communication exposed + copies exposed + idle == span; the idle causes add up to idle; the
/// launch-bound split adds up to launch-bound.
fn check_sums(b: &Value, i: &Value, what: &str) {
    let parts = u(&b["computation_ns"]) + u(&b["communication_exposed_ns"]) + u(&b["copies_exposed_ns"]);
    assert_eq!(parts + u(&b["idle_ns"]), u(&b["span_ns"]), "{what}: budget {b}");
    assert_eq!(u(&b["end"]) - u(&b["start"]), u(&b["span_ns"]), "{what}");
    assert!(u(&b["communication_overlapped_ns"]) <= u(&b["computation_ns"]), "{what}");
    let causes = u(&i["launch_bound_ns"]) + u(&i["host_sync_wait_ns"]) + u(&i["short_gaps_ns"]) + u(&i["other_ns"]);
    assert_eq!(causes, u(&b["idle_ns"]), "{what}: idle {i}");
    assert_eq!(
        u(&i["launch_bound_in_api_ns"]) + u(&i["launch_bound_elsewhere_ns"]),
        u(&i["launch_bound_ns"]),
        "{what}"
    );
}

fn cutr_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            cutr_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "cutr") {
            out.push(p);
        }
    }
}

#[test]
fn the_budget_adds_up_to_the_span_on_every_fixture() {
    let mut files = Vec::new();
    cutr_files(&fixture(""), &mut files);
    files.sort();
    assert!(files.len() >= 39, "{} fixtures", files.len());
    let mut gpus = 0;
    for f in &files {
        let a = analyze_json(&[f], &[]);
        for g in a["gpus"].as_array().unwrap() {
            let what = format!("{} GPU {}", f.display(), g["device"]);
            check_sums(&g["budget"], &g["idle"], &what);
            for s in g["steps"].as_array().unwrap() {
                check_sums(&s["budget"], &s["idle"], &format!("{what} {}", s["name"]));
            }
            gpus += 1;
        }
    }
    // Every fixture has one GPU but the torchrun launcher (none) and counter_two_gpus (two).
    assert_eq!(gpus, files.len());
}

#[test]
fn pytorch_loop_budget_and_idle_causes() {
    let a = analyze_json(&[&fixture("pytorch_loop.cutr")], &["--step", "step "]);
    assert_eq!(a["step_source"], json!({"kind": "nvtx_prefix", "detail": "step "}));
    let gpus = a["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1);
    let g = &gpus[0];
    assert_eq!(
        (&g["file"], &g["proc"], &g["rank"], &g["device"]),
        (&json!("pytorch_loop.cutr"), &json!(0), &json!(0), &json!(0))
    );
    assert_eq!(
        g["budget"],
        json!({"start": 1795320704693249555u64, "end": 1795320710027451007u64, "span_ns": 5334201452u64,
               "computation_ns": 36884764, "communication_overlapped_ns": 0, "communication_exposed_ns": 0,
               "copies_exposed_ns": 595547, "idle_ns": 5296721141u64})
    );
    assert_eq!(
        g["idle"],
        json!({"launch_bound_ns": 5295906822u64, "launch_bound_in_api_ns": 423687354,
               "launch_bound_elsewhere_ns": 4872219468u64, "host_sync_wait_ns": 0, "short_gaps_ns": 814319,
               "other_ns": 0, "short_gap_threshold_ns": 30000})
    );
    // The longest gap: the setup before the loop, after the input's pageable copy.
    let gap = &g["longest_gaps"][0];
    assert_eq!((u(&gap["ns"]), &gap["cause"]), (4667287485, &json!("launch_bound")));
    assert_eq!(gap["before"], "Memcpy HtoD (Pageable -> Device)");
    assert_eq!(g["longest_gaps"].as_array().unwrap().len(), 10);
    // 20 steps `step 0` .. `step 19`, each clipped to its NVTX range.
    let steps = g["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 20);
    assert_eq!((&steps[0]["index"], &steps[0]["name"]), (&json!(0), &json!("step 0")));
    assert_eq!(
        steps[0]["budget"],
        json!({"start": 1795320709813983865u64, "end": 1795320709824055331u64, "span_ns": 10071466,
               "computation_ns": 1596620, "communication_overlapped_ns": 0, "communication_exposed_ns": 0,
               "copies_exposed_ns": 12482, "idle_ns": 8462364})
    );
    assert_eq!((u(&steps[0]["idle"]["launch_bound_ns"]), u(&steps[0]["idle"]["short_gaps_ns"])), (8428092, 34272));
    let starvation = a["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "gpu_starvation").unwrap();
    assert_eq!((&starvation["outcome"], &starvation["severity"]), (&json!("found"), &json!("high")));
    assert_eq!((u(&starvation["time_ns"]), u(&starvation["count"])), (177781456, 5320));
    assert!(starvation["summary"].as_str().unwrap().starts_with("launch-bound: GPU 0 of rank 0"), "{starvation}");
}

#[test]
fn the_launch_bound_loop_is_called_launch_bound() {
    let a = analyze_json(&[&fixture("launch_loop_100k.cutr")], &[]);
    assert_eq!(a["step_source"], json!({"kind": "none"}));
    let g = &a["gpus"][0];
    assert_eq!((u(&g["budget"]["span_ns"]), u(&g["budget"]["computation_ns"])), (604508352, 107018595));
    assert_eq!(u(&g["budget"]["idle_ns"]), 497487036);
    // 99.85% of the idle time the next launch call had not returned; the thread was inside it (or another
    // CUDA call) for 86.5% of that.
    assert_eq!(
        g["idle"],
        json!({"launch_bound_ns": 496743980, "launch_bound_in_api_ns": 429509574,
               "launch_bound_elsewhere_ns": 67234406, "host_sync_wait_ns": 0, "short_gaps_ns": 743056,
               "other_ns": 0, "short_gap_threshold_ns": 30000})
    );
    let f = &a["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "gpu_starvation").unwrap();
    assert_eq!((&f["severity"], u(&f["count"]), u(&f["time_ns"])), (&json!("high"), 100664, 497487036));
    assert!((f["share_pct"].as_f64().unwrap() - 82.296).abs() < 1e-3, "{f}");
    let summary = f["summary"].as_str().unwrap();
    assert!(summary.starts_with("launch-bound:") && summary.contains("idle 82.3% of its span"), "{summary}");
    assert_eq!(f["events"].as_array().unwrap().len(), 5);

    // A threshold above every gap: what is not launch-bound is all short gaps; the launch-bound part stays.
    let a = analyze_json(&[&fixture("launch_loop_100k.cutr")], &["--gap-threshold", "10ms"]);
    assert_eq!(u(&a["gpus"][0]["idle"]["launch_bound_ns"]), 496743980);
    assert_eq!(u(&a["gpus"][0]["idle"]["short_gap_threshold_ns"]), 10_000_000);
}

#[test]
fn two_ranks_one_job_communication_by_name() {
    let files = [fixture("allreduce/allreduce-588.cutr"), fixture("allreduce/allreduce-589.cutr")];
    let a = analyze_json(&[&files[0], &files[1]], &[]);
    let gpus = a["gpus"].as_array().unwrap();
    let ranks: Vec<(u64, u64, u64)> =
        gpus.iter().map(|g| (u(&g["rank"]), u(&g["device"]), u(&g["budget"]["communication_exposed_ns"]))).collect();
    assert_eq!(ranks, [(0, 0, 9776380), (1, 1, 15886432)]);
}

#[test]
fn json_shape_markdown_and_text() {
    let a = analyze_json(&[&fixture("graph_workload.cutr")], &[]);
    // (serde_json's objects list their keys sorted.)
    let keys: Vec<&String> = a.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["findings", "first_record_ns", "gpus", "launch", "step_source"]);
    assert_eq!(a["step_source"], json!({"kind": "graph_launches"}));
    // The origin of the text's times: the file's earliest record (an API call, 124.834 ms before the GPU's first
    // op), as `--start` takes it.
    assert_eq!(a["first_record_ns"], json!(1795756285799398465u64));
    assert_eq!(a["gpus"][0]["budget"]["start"], json!(1795756285924232497u64));
    let g = &a["gpus"][0];
    let keys: Vec<&String> = g.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["budget", "device", "file", "idle", "longest_gaps", "proc", "rank", "steps"]);
    let gap_keys: Vec<&String> = g["longest_gaps"][0].as_object().unwrap().keys().collect();
    assert_eq!(gap_keys, ["after", "before", "cause", "end", "ns", "start"]);
    let step_keys: Vec<&String> = g["steps"][0].as_object().unwrap().keys().collect();
    assert_eq!(step_keys, ["budget", "idle", "index", "name"]);
    let steps = g["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 8);
    assert_eq!(steps[7]["name"], "graph launch 8");
    for f in a["findings"].as_array().unwrap() {
        assert!(["found", "clean", "cannot_judge"].contains(&f["outcome"].as_str().unwrap()), "{f}");
    }

    let f = fixture("pytorch_loop.cutr");
    let o = run(&["analyze", "--markdown", f.to_str().unwrap(), "--step", "step "]);
    assert_eq!(o.status.code(), Some(0));
    let md = text(&o.stdout);
    assert!(md.starts_with("## cutr analyze\n"), "{md}");
    assert!(md.contains("| rank 0 GPU 0 | `pytorch_loop.cutr` | 5334.201 | 36.885 0.7% |"), "{md}");
    assert!(md.contains("- **high** `gpu_starvation`: launch-bound:"), "{md}");
    let o = run(&["analyze", f.to_str().unwrap(), "--step", "step "]);
    let t = text(&o.stdout);
    assert!(
        t.contains("rank 0 GPU 0   20 steps, ms median 10.071 min 9.021 max 13.183, idle 84.7% of step time"),
        "{t}"
    );
}

#[test]
fn bad_input_is_refused_with_one_line() {
    let f = fixture("launch_loop_100k.cutr");
    let f = f.to_str().unwrap();
    for (args, code, says) in [
        (vec!["analyze", f, "--gap-threshold", "fast"], 2, "not a time"),
        (vec!["analyze", f, "--gap-threshold", "30"], 2, "needs a unit"),
        (vec!["analyze", f, "--step", ""], 2, "--step needs"),
        (vec!["analyze", "/nonexistent.cutr"], 1, "/nonexistent.cutr"),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", text(&o.stderr));
        let err = stderr_lines(&o);
        assert!(err.iter().any(|l| l.contains(says)), "{args:?}: {err:?}");
    }
    // Steps asked for and not found: a warning, and the report still comes.
    let o = run(&["analyze", f, "--step", "no such range"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr_lines(&o).iter().any(|l| l.contains("no closed NVTX range")), "{}", text(&o.stderr));
}

#[test]
fn a_window_analyses_the_records_it_keeps_and_times_count_from_the_first_record() {
    let f = fixture("pytorch_loop.cutr");
    let whole = analyze_json(&[&f], &[]);
    let a = analyze_json(&[&f], &["--start", "5", "--end", "5.5"]);
    assert_eq!(
        a["window"],
        "records overlapping --start 5 --end 5.5 (from the first record): the span of each GPU is that of its kept \
         records"
    );
    assert!(whole.get("window").is_none(), "no window, no field");
    // Launch outliers' times still count from the recording's first record, where --start counts from.
    assert_eq!(a["first_record_ns"], whole["first_record_ns"]);
    // The GPU's span is that of the GPU work the model keeps in the window, found here without analyze.
    let first = u(&whole["first_record_ns"]);
    let filter = cutr_model::Filter {
        start: Some(first + 5_000_000_000),
        end: Some(first + 5_500_000_000),
        ..Default::default()
    };
    let t = cutr_model::load(std::slice::from_ref(&f), &cutr_model::LoadOptions { filter }).unwrap();
    let ops = t.kernels.iter().map(|k| (k.start, k.end));
    let ops = ops.chain(t.memcpys.iter().map(|m| (m.start, m.end))).chain(t.memsets.iter().map(|m| (m.start, m.end)));
    let (lo, hi) = ops.fold((u64::MAX, 0), |(lo, hi), (s, e)| (lo.min(s), hi.max(e)));
    let b = &a["gpus"][0]["budget"];
    assert_eq!((u(&b["start"]), u(&b["end"]), u(&b["span_ns"])), (lo, hi, 469_370_645));
    check_sums(b, &a["gpus"][0]["idle"], "window");
    assert_eq!(u(&b["computation_ns"]), 36_842_459);
    // A window past the records says where they are.
    let o = run(&["analyze", f.to_str().unwrap(), "--start", "50"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains(
            "the window --start 50 keeps no record: the records lie at 0.000-0.164 s, 0.817-0.820 s, 4.819-5.494 s \
             and 5.821-5.822 s (seconds after the first record)"
        ),
        "{}",
        text(&o.stderr)
    );
    let o = run(&["analyze", f.to_str().unwrap(), "--start", "2", "--end", "1"]);
    assert_eq!((o.status.code(), text(&o.stderr).contains("--end is before --start")), (Some(2), true));
}

/// `--stream` gives the report `--no-stream` gives, but for the line saying how it read the recordings: in text,
/// Markdown and JSON (its `stream` field), with and without a window, and on two ranks.
#[test]
fn streamed_reports_equal_loaded_ones() {
    let f = fixture("pytorch_loop.cutr");
    let (a, b) = (fixture("allreduce/allreduce-588.cutr"), fixture("allreduce/allreduce-589.cutr"));
    let cases: [(Vec<&Path>, Vec<&str>); 3] = [
        (vec![&f], vec!["--step", "step "]),
        (vec![&f], vec!["--start", "5", "--end", "5.5"]),
        (vec![&a, &b], vec!["--step", "iter "]),
    ];
    for (files, extra) in &cases {
        let mut streamed = analyze_json(files, &[extra.as_slice(), &["--stream"]].concat());
        let loaded = analyze_json(files, &[extra.as_slice(), &["--no-stream"]].concat());
        let how = streamed.as_object_mut().unwrap().remove("stream").unwrap();
        assert_eq!(u(&how["passes"]), 2);
        assert!(u(&how["chunks"]) > 0 && u(&how["windows"]) > 0, "{how}");
        assert_eq!(streamed, loaded, "{extra:?}");
        for format in ["--markdown", "--text"] {
            let args = |how: &'static str| -> Vec<String> {
                let mut v = vec!["analyze".to_string(), how.to_string()];
                v.extend(files.iter().map(|p| p.to_str().unwrap().to_string()));
                v.extend(extra.iter().map(|e| e.to_string()));
                v.extend((format == "--markdown").then(|| format.to_string()));
                v
            };
            let run_with = |how| run(&args(how).iter().map(String::as_str).collect::<Vec<_>>());
            let (s, l) = (run_with("--stream"), run_with("--no-stream"));
            assert_eq!((s.status.code(), l.status.code()), (Some(0), Some(0)));
            let s = text(&s.stdout);
            let read: Vec<&str> = s.lines().filter(|l| l.starts_with("Read: streamed over")).collect();
            assert_eq!(read.len(), 1, "{s}");
            assert_eq!(s.replace(&format!("{}\n\n", read[0]), ""), text(&l.stdout), "{extra:?} {format}");
        }
    }
}
