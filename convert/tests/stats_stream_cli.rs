//! `cupti-convert stats --stream` and `--no-stream` as a user runs them: the report says which path ran, the
//! streamed figures are the loaded ones, and what a stream cannot do is refused or named, never dropped silently.

mod common;

use common::{path_str, run, stderr_lines, text};

#[test]
fn the_report_says_it_streamed_and_its_figures_are_the_loaded_ones() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g.cutr");
    assert!(run(&["generate", "-o", path_str(&g), "--records", "200000"]).status.success());
    let streamed = run(&["stats", "--stream", "--wide", "--report", "kernels,counters", path_str(&g)]);
    assert!(streamed.status.success(), "{}", text(&streamed.stderr));
    assert!(stderr_lines(&streamed).is_empty(), "{:?}", stderr_lines(&streamed));
    let s = text(&streamed.stdout);
    let line = s.lines().nth(1).unwrap();
    assert!(line.starts_with("Streamed over 5 chunks in "), "{line}");
    // Counters stream (none recorded here): nothing asked for is left out.
    assert!(!line.contains("not computed"), "{line}");
    // A small recording loads whole by default: no stream line, every section.
    let whole = run(&["stats", "--wide", "--report", "kernels,counters", path_str(&g)]);
    let w = text(&whole.stdout);
    assert!(!w.contains("Streamed"), "{w}");
    // The kernel rows are the same (200k records: every median exact, under 65,536 instances a row).
    let kernel_rows = |t: &str| -> Vec<String> {
        t.lines()
            .skip_while(|l| !l.starts_with("GPU kernels"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .map(String::from)
            .collect()
    };
    assert_eq!(kernel_rows(&s), kernel_rows(&w));
    assert_eq!(kernel_rows(&s).len(), 12, "{s}");
    // CSV has no line for it: the note goes to stderr. A --start/--end window's graphs stream too.
    let csv = run(&["stats", "--stream", "--csv", "--start", "0s", "--report", "kernels,graphs", path_str(&g)]);
    let note = stderr_lines(&csv);
    assert_eq!(note.len(), 1, "{note:?}");
    assert!(note[0].starts_with("cupti-convert: note: Streamed over 5 chunks in "), "{note:?}");
    assert!(!note[0].contains("not computed"), "{note:?}");
}

/// `stats --stream --start/--end` prints the graphs section a load with the same window prints: on torch.compile's
/// cudagraph trees, a window through the last replays, whose nodes were made before it (their capture ranges are
/// the window's NVTX ranges still open at their creation, as the windowed load nests them).
#[test]
fn a_time_windows_graphs_stream_as_they_load() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/graph_compile.cutr");
    let report = |how: &str| {
        let o = run(&["stats", how, "--report", "graphs", "--start", "21.09s", "--end", "21.0985s", fixture]);
        assert!(o.status.success(), "{how}: {}", text(&o.stderr));
        text(&o.stdout)
    };
    let (streamed, loaded) = (report("--stream"), report("--no-stream"));
    let stream_line = streamed.lines().find(|l| l.starts_with("Streamed over ")).unwrap();
    assert!(!stream_line.contains("not computed"), "{stream_line}");
    let without_it: Vec<&str> = streamed.lines().filter(|l| *l != stream_line).collect();
    assert_eq!(without_it, loaded.lines().collect::<Vec<_>>());
    let capture = |l: &&str| l.ends_with(" layer1/layer2/forward");
    let row: Vec<&str> = loaded.lines().find(capture).unwrap().split_whitespace().collect();
    assert_eq!(row, ["84.0", "1,276,453", "84", "48", "layer1/layer2/forward"]);
    assert!(loaded.contains("Graph ops traced back to the node the program made: 100 of 100 "), "{loaded}");
}

/// The JSON report without its `stream` line: what the streamed and loaded reports have in common.
fn json_without_stream(args: &[&str]) -> serde_json::Value {
    let o = run(args);
    assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let report = v.as_object_mut().unwrap();
    report.remove("stream");
    // Medians past 65,536 instances are a sketch's when streamed (not on these inputs) and deviations may differ
    // in the last bit; the other figures are compared whole.
    for section in ["kernels", "api", "memory_ops", "nvtx"] {
        for row in report[section].as_array_mut().unwrap() {
            row.as_object_mut().unwrap().remove("stddev_ns");
        }
    }
    // The NVTX rows' GPU spans and graph replays are not streamed (their own line says so).
    for row in report["nvtx"].as_array_mut().unwrap() {
        for key in ["gpu_span_ns", "gpu_spans", "replayed_gpu_ns", "replayed_gpu_ops"] {
            row.as_object_mut().unwrap().remove(key);
        }
    }
    v
}

#[test]
fn utilization_peaks_and_a_time_window_stream_as_they_load() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/cuda_workload.cutr");
    let sections = "kernels,api,memory,nvtx,utilization,loss";
    for window in [&[][..], &["--start", "160ms", "--end", "170ms"], &["--start", "170ms"]] {
        let mut args = vec!["stats", "--json", "--report", sections, fixture];
        args.extend_from_slice(window);
        let whole = json_without_stream(&[&args[..], &["--no-stream"]].concat());
        let streamed = json_without_stream(&[&args[..], &["--stream"]].concat());
        assert_eq!(whole, streamed, "{window:?}");
    }
    let args = ["stats", "--json", "--stream", "--start", "160ms", "--end", "170ms", fixture];
    let v = json_without_stream(&args);
    assert_eq!(v["window"], "records overlapping --start 160ms --end 170ms (from the first record)");
    assert_eq!(
        (v["utilization"][0]["busy_ns"].as_u64(), v["utilization"].as_array().unwrap().len()),
        (Some(10_315_766), 5)
    );
    // The allocations lie before the window: no memory in use is kept.
    assert_eq!(v["memory_peaks"].as_array().map(Vec::len), Some(0));
    let all = json_without_stream(&["stats", "--json", "--stream", "--report", "memory", fixture]);
    assert_eq!(all["memory_peaks"][0]["peak_bytes"].as_u64(), Some(9_437_192));
    // The text shows memory in use and utilization as a load shows them.
    let section = |args: &[&str], title: &str| -> Vec<String> {
        let o = run(args);
        let t = text(&o.stdout);
        t.lines().skip_while(|l| !l.starts_with(title)).take_while(|l| !l.is_empty()).map(String::from).collect()
    };
    for title in ["Memory in use", "GPU utilization"] {
        let whole = section(&["stats", "--wide", "--no-stream", fixture], title);
        assert_eq!(whole, section(&["stats", "--wide", "--stream", fixture], title), "{title}");
        assert!(whole.len() >= 3, "{title}: {whole:?}");
    }
    // A window past the records keeps none, said as a load says it.
    let o = run(&["stats", "--stream", "--start", "100s", fixture]);
    assert!(o.status.success());
    let e = stderr_lines(&o);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("cupti-convert: warning: the window --start 100s keeps no record: the records lie at "),
        "{e:?}"
    );
}

#[test]
fn a_stream_refuses_what_needs_the_whole_trace() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g.cutr");
    assert!(run(&["generate", "-o", path_str(&g), "--records", "20000"]).status.success());
    for extra in [["--nvtx", "step"], ["--no-stream", "--wide"], ["--nvtx-across-threads", "--wide"]] {
        let o = run(&["stats", "--stream", extra[0], extra[1], path_str(&g)]);
        assert_eq!(o.status.code(), Some(2), "{extra:?}");
        let e = text(&o.stderr);
        assert!(e.contains("cannot be used with"), "{e}");
    }
}

#[test]
fn a_recording_without_metadata_is_refused_by_a_stream_and_read_by_a_load() {
    use cutr_format::ChunkType;
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g.cutr");
    let opts = cutr_synth::SynthOptions { records: 20_000, buffer_bytes: 256 << 10, ..Default::default() };
    cutr_synth::write_file(&g, opts).unwrap();
    // Every metadata chunk damaged (a payload byte flipped: its checksum fails).
    let mut bytes = std::fs::read(&g).unwrap();
    for c in cutr_synth::forge::chunks_of(&bytes.clone(), ChunkType::Metadata) {
        bytes[c.offset + cutr_format::container::CHUNK_HEADER_LEN + 100] ^= 0x40;
    }
    std::fs::write(&g, &bytes).unwrap();
    let streamed = run(&["stats", "--stream", path_str(&g)]);
    assert_eq!(streamed.status.code(), Some(1));
    let e = text(&streamed.stderr);
    assert!(
        e.contains("no session metadata, so its records cannot be interpreted when streaming (--no-stream reads it"),
        "{e}"
    );
    let loaded = run(&["stats", "--report", "kernels", path_str(&g)]);
    assert!(loaded.status.success(), "{}", text(&loaded.stderr));
}
