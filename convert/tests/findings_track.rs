//! `--findings`: `analyze`'s findings as a `cutr: findings` track in the Perfetto and Chrome outputs, read back by
//! the real Perfetto trace processor, by serde_json and by HolisticTraceAnalysis, against `analyze --json` of the
//! same recording. The PyTorch loop with `--step "step "` has two findings, each with 5 evidence events:
//! `tiny_kernels` (high: kernels shorter than their launch) and `gpu_starvation` (high: its longest idle gaps),
//! none overlapping another, so one lane of 10 slices.

mod common;

use common::{fixture, path_str, run, stderr_lines, text};
use serde_json::Value;
use std::path::Path;

/// Every evidence event of `analyze --json`'s found findings, as (slice name, start, end, what, correlation),
/// by start.
fn analyze_events() -> Vec<(String, u64, u64, String, u64)> {
    let loop_ = fixture("pytorch_loop.cutr");
    let o = run(&["analyze", path_str(&loop_), "--step", "step ", "--json"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let a: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut events = Vec::new();
    for f in a["findings"].as_array().unwrap().iter().filter(|f| f["outcome"] == "found") {
        let name = format!("{} ({})", f["rule"].as_str().unwrap(), f["severity"].as_str().unwrap());
        for e in f["events"].as_array().unwrap() {
            let (s, end) = (e["start"].as_u64().unwrap(), e["end"].as_u64().unwrap());
            events.push((
                name.clone(),
                s,
                end,
                e["what"].as_str().unwrap().to_string(),
                e["correlation"].as_u64().unwrap(),
            ));
        }
    }
    events.sort_by_key(|e| e.1);
    events
}

fn convert(format: &str, out: &Path, extra: &[&str]) {
    let loop_ = fixture("pytorch_loop.cutr");
    let mut args = vec![path_str(&loop_), format, "-q", "-o", path_str(out)];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(stderr_lines(&o), Vec::<String>::new());
}

/// The Chrome JSON's events of cutr's findings (complete events of category `cutr`), by start.
fn chrome_findings(doc: &Value) -> Vec<&Value> {
    let mut v: Vec<&Value> =
        doc["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "cutr" && e["ph"] == "X").collect();
    v.sort_by(|a, b| a["ts"].as_f64().partial_cmp(&b["ts"].as_f64()).unwrap());
    v
}

#[test]
fn the_chrome_json_has_the_findings_row_with_analyzes_events() {
    let events = analyze_events();
    assert_eq!(events.len(), 10);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("pl.json");
    convert("--chrome", &json, &["--findings", "--step", "step "]);
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let base = doc["baseTimeNanoseconds"].as_u64().unwrap();
    let got = chrome_findings(&doc);
    assert_eq!(got.len(), 10);
    let first = got[0];
    assert_eq!(first["name"], "tiny_kernels (high)");
    assert_eq!(first["name"], events[0].0.as_str());
    // `ts` and `dur` are µs with ns in three decimals, `ts` after the base time.
    let ns = |v: &Value| (v.as_f64().unwrap() * 1000.0).round() as u64;
    assert_eq!(base + ns(&first["ts"]), events[0].1);
    assert_eq!(ns(&first["dur"]), events[0].2 - events[0].1);
    assert_eq!(ns(&first["dur"]), 4_960);
    assert_eq!(first["args"]["what"], events[0].3.as_str());
    assert_eq!(first["args"]["event_correlation"], events[0].4);
    assert_eq!(first["args"]["event_correlation"], 18_877);
    // Every slice is one event of analyze's, in the same order.
    for (g, e) in got.iter().zip(&events) {
        assert_eq!((g["name"].as_str().unwrap(), base + ns(&g["ts"])), (e.0.as_str(), e.1));
    }
    // On the process's row named `cutr: findings`, sorted before its threads.
    let row = (first["pid"].clone(), first["tid"].clone());
    assert_eq!(row.1, 2_147_483_647);
    let meta: Vec<&Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M" && (e["pid"].clone(), e["tid"].clone()) == row)
        .collect();
    let names: Vec<(&str, &Value)> = meta
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["args"].as_object().unwrap().values().next().unwrap()))
        .collect();
    assert_eq!(names, vec![("thread_name", &Value::from("cutr: findings")), ("thread_sort_index", &Value::from(-2))]);

    // Without --findings there is no such row.
    let plain = dir.path().join("plain.json");
    convert("--chrome", &plain, &[]);
    let doc: Value = serde_json::from_slice(&std::fs::read(&plain).unwrap()).unwrap();
    assert_eq!(chrome_findings(&doc).len(), 0);

    // HTA reads the JSON with the track as without it: the same temporal and idle breakdowns, to the ns.
    let h = cutr_tests::python_tool(
        "hta_breakdown.py",
        &[json.as_os_str(), plain.as_os_str()],
        &[("HTA_DISABLE_NS_ROUNDING", "1")],
    );
    let traces = h["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 2);
    for t in traces {
        assert_eq!(t["error"], Value::Null, "HTA could not read {}", t["file"]);
    }
    assert_eq!(traces[0]["gpus"], traces[1]["gpus"]);
    assert_eq!(traces[0]["gpus"].as_array().unwrap().len(), 1);
}

#[test]
fn the_trace_processor_finds_the_findings_track_with_analyzes_events() {
    let events = analyze_events();
    let dir = tempfile::tempdir().unwrap();
    let (pf, json) = (dir.path().join("pl.pftrace"), dir.path().join("pl.json"));
    convert("--perfetto", &pf, &["--findings", "--step", "step "]);
    // Perfetto's ts count from the same base time as the Chrome JSON's.
    convert("--chrome", &json, &[]);
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let base = doc["baseTimeNanoseconds"].as_u64().unwrap() as i64;
    let on_track = "from slice s join track t on s.track_id = t.id where t.name = 'cutr: findings'";
    let rows = cutr_tests::trace_processor(
        &pf,
        &[
            &format!("select count(*) {on_track}"),
            &format!("select s.name, s.ts, s.dur, s.arg_set_id {on_track} order by s.ts limit 1"),
            "select count(*) from track where name like 'cutr: findings%'",
            cutr_tests::IMPORT_PROBLEMS,
        ],
    );
    assert_eq!(cutr_tests::int(&rows[0]), 10);
    let first = &rows[1][0];
    assert_eq!(first[0], "tiny_kernels (high)");
    assert_eq!(first[0], events[0].0.as_str());
    assert_eq!(first[1].as_i64().unwrap() + base, events[0].1 as i64);
    assert_eq!(first[2].as_i64().unwrap(), (events[0].2 - events[0].1) as i64);
    assert_eq!(first[2].as_i64().unwrap(), 4_960);
    // One lane: no two evidence events overlap.
    assert_eq!(cutr_tests::int(&rows[2]), 1);
    assert_eq!(rows[3], Vec::<Vec<Value>>::new(), "import problems");
    let args = cutr_tests::trace_processor(
        &pf,
        &[&format!(
            "select key, coalesce(string_value, cast(int_value as text)) from args where arg_set_id = {} order by key",
            first[3]
        )],
    );
    let args: Vec<(String, String)> =
        args[0].iter().map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into())).collect();
    assert_eq!(args.len(), 3, "{args:?}");
    assert_eq!(args[0], ("debug.event_correlation".into(), "18877".into()));
    assert_eq!(args[1].0, "debug.summary");
    assert!(args[1].1.starts_with("3811 tiny kernels (79.1% of the steps' kernels, 14.476 ms on the GPU)"), "{args:?}");
    assert_eq!(args[2], ("debug.what".into(), events[0].3.clone()));
}

#[test]
fn step_needs_findings_an_empty_step_is_refused_and_the_summary_counts_the_slices() {
    let loop_ = fixture("pytorch_loop.cutr");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.json");
    let o = run(&[path_str(&loop_), "--chrome", "-o", path_str(&out), "--step", "step "]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--findings"), "{}", text(&o.stderr));
    let o = run(&[path_str(&loop_), "--chrome", "-o", path_str(&out), "--findings", "--step", ""]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--step needs the start"), "{}", text(&o.stderr));
    assert!(!out.exists());
    // The summary line says how many slices the track drew.
    let o = run(&[path_str(&loop_), "--chrome", "-o", path_str(&out), "--findings", "--step", "step "]);
    let lines = stderr_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains(" tracks, 10 evidence slices on 'cutr: findings' tracks ("), "{lines:?}");
}
