//! The `cupti-convert` binary as a user runs it: exit codes, one-line errors for bad input, warnings for recovered
//! files, no partial output, no terminal control characters when stderr is not a terminal.

mod common;

use std::process::Command;

use common::{fixture, path_str, run, stderr_lines, text};

/// Sizes of fixtures/cuda_workload.cutr converted to Perfetto: compressed packets (the default) and plain.
const CUDA_WORKLOAD_PFTRACE: u64 = 18_725;
const CUDA_WORKLOAD_PFTRACE_PLAIN: u64 = 49_636;

#[test]
fn converts_a_fixture_with_one_summary_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.pftrace");
    let o = run(&[path_str(&fixture("cuda_workload.cutr")), "--perfetto", "-o", path_str(&out)]);
    assert_eq!(o.status.code(), Some(0));
    let lines = stderr_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let bytes = std::fs::metadata(&out).unwrap().len();
    assert!(lines[0].starts_with(&format!("cupti-convert: wrote {} ({bytes} bytes): ", out.display())), "{lines:?}");
    // One arrow per GPU record, 75 kernels + 73 memcpys + 21 memsets, and per sync, 21 stream syncs + 10 waits on
    // events + 10 event syncs + 2 device syncs (workloads/cuda/EXPECTED.md). 25 tracks: the health track, the
    // process, 4 threads, the GPU, its context, 5 streams, 3 streams' syncs, the context's syncs, CUPTI overhead,
    // the memory counters (device memory, and the pinned host memory of the workload's cudaMallocHost), and beside
    // each of the 5 streams its NVTX ranges' GPU spans (75 of the slices). 175 of the 177 driver calls are
    // queries (cuKernelGetName before each launch, cuDeviceGetAttribute...), left out and said.
    assert!(
        lines[0].contains(
            " bytes): 705 slices, 212 arrows, 25 tracks (175 driver calls left out, the runtime's own and queries: \
             --driver-calls draws them) in "
        ),
        "{lines:?}"
    );
    // --driver-calls draws every driver call: 880 slices, and the line says none was left out.
    let all = dir.path().join("all.pftrace");
    let o = run(&[path_str(&fixture("cuda_workload.cutr")), "--perfetto", "--driver-calls", "-o", path_str(&all)]);
    let all_lines = stderr_lines(&o);
    assert!(all_lines[0].contains(" bytes): 880 slices, 212 arrows, 25 tracks in "), "{all_lines:?}");
    // The default is compressed packets; --no-compress writes them plain (exact sizes, this fixture).
    let plain = dir.path().join("plain.pftrace");
    let o =
        run(&[path_str(&fixture("cuda_workload.cutr")), "--perfetto", "--no-compress", "-q", "-o", path_str(&plain)]);
    assert_eq!((o.status.code(), o.stderr.len()), (Some(0), 0));
    assert_eq!((bytes, std::fs::metadata(&plain).unwrap().len()), (CUDA_WORKLOAD_PFTRACE, CUDA_WORKLOAD_PFTRACE_PLAIN));
    // --gzip compresses the whole file instead: inside it are exactly the plain packets.
    let gz = dir.path().join("w.pftrace.gz");
    let o = run(&[path_str(&fixture("cuda_workload.cutr")), "--perfetto", "--gzip", "-q", "-o", path_str(&gz)]);
    assert_eq!((o.status.code(), o.stderr.len()), (Some(0), 0));
    let mut inflated = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap()), &mut inflated)
        .unwrap();
    assert_eq!(inflated, std::fs::read(&plain).unwrap());
    // --quiet: nothing at all.
    let o =
        run(&[path_str(&fixture("cuda_workload.cutr")), "--chrome", "-q", "-o", path_str(&dir.path().join("w.json"))]);
    assert_eq!((o.status.code(), o.stderr.len()), (Some(0), 0));
}

#[test]
fn unreadable_inputs_fail_with_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.cutr");
    std::fs::write(&junk, vec![0x5a; 5000]).unwrap();
    let mut newer = std::fs::read(fixture("cuda_workload.cutr")).unwrap();
    newer[8] = 9; // major version 9
    let newer_path = dir.path().join("newer.cutr");
    std::fs::write(&newer_path, newer).unwrap();
    let missing = dir.path().join("missing.cutr");
    for (input, why) in [
        (&missing, "No such file or directory"),
        (&junk, "not a .cutr file (it does not start with the .cutr signature)"),
        (&newer_path, "written in .cutr format 9.0, newer than this reader understands (major version 1)"),
    ] {
        let out = dir.path().join("x.pftrace");
        let o = run(&[path_str(input), "--perfetto", "-o", path_str(&out)]);
        assert_eq!(o.status.code(), Some(1), "{}", input.display());
        let lines = stderr_lines(&o);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].starts_with(&format!("cupti-convert: error: {}: ", input.display())), "{lines:?}");
        assert!(lines[0].contains(why), "{lines:?}");
        assert!(!out.exists(), "no output for an unreadable input");
        // info reports the same.
        let o = run(&["info", path_str(input)]);
        assert_eq!(o.status.code(), Some(1));
        assert!(stderr_lines(&o)[0].contains(why));
    }
}

#[test]
fn a_truncated_file_converts_up_to_its_last_chunk_with_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.cutr");
    std::fs::write(&cut, &std::fs::read(fixture("cuda_workload.cutr")).unwrap()[..30_000]).unwrap();
    let out = dir.path().join("cut.pftrace");
    let o = run(&[path_str(&cut), "--perfetto", "-o", path_str(&out)]);
    assert_eq!(o.status.code(), Some(0));
    let lines = stderr_lines(&o);
    let p = cut.display();
    // Once per cause: how the file was read, then the chunk it lost (with its records).
    assert_eq!(
        lines[..2],
        [
            format!(
                "cupti-convert: warning: {p}: not closed cleanly (no trailer: the writer never closed it): read up \
                 to its last complete chunk, 944 bytes lost"
            ),
            format!(
                "cupti-convert: warning: {p}: file ends inside activity chunk #5 at byte 29056 (1818 bytes missing, \
                 372 records); that chunk is lost"
            ),
        ]
    );
    assert_eq!(lines.len(), 3, "{lines:?}");
    // 40 of the slices, and 2 of the tracks, the NVTX ranges' GPU spans; 31 driver queries left out.
    assert!(lines[2].contains(": 295 slices, 90 arrows, 11 tracks (31 driver calls left out"), "{lines:?}");
    assert!(out.exists());
}

#[test]
fn wrong_arguments_and_unwritable_outputs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture("cuda_workload.cutr");
    let f = path_str(&f);
    // clap's usage errors: exit 2.
    for args in [vec![f, "--perfetto", "--chrome"], vec!["--perfetto"], vec![f, "--chrome", "--no-compress"]] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr_lines(&o)[0].starts_with("error: "), "{args:?}");
    }
    // No arguments at all: the help, on stderr (exit 2 as for any missing argument).
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).starts_with("Convert .cutr CUDA activity recordings"), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("Commands:\n  info "));
    // A directory as input says so.
    let o = run(&[path_str(dir.path()), "--perfetto"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr_lines(&o),
        [format!("cupti-convert: error: {}: is a directory, not a recording", dir.path().display())]
    );
    let o = run(&["stats", path_str(dir.path())]);
    assert_eq!(
        stderr_lines(&o),
        [format!("cupti-convert: error: {}: is a directory, not a recording", dir.path().display())]
    );
    let out = dir.path().join("x.pftrace");
    let out = path_str(&out);
    // Our own usage errors: exit 2 too, one line.
    for (args, msg) in [
        (
            vec![f, "--perfetto", "--start", "2s", "--end", "1s", "-o", out],
            "cupti-convert: error: --end is before --start",
        ),
        (
            vec![f, "--perfetto", "--kinds", "bogus", "-o", out],
            "cupti-convert: error: unknown kind 'bogus' (kernel, memcpy, memset, runtime, driver, sync, nvtx, \
             overhead, memory, event, external)",
        ),
        (
            vec![f, "--perfetto", "--start", "abc", "-o", out],
            "cupti-convert: error: not a time: 'abc' (use e.g. 1.5, 200ms, 10us)",
        ),
        (vec![f, "-o", out], "cupti-convert: error: give --perfetto or --chrome: the format to write"),
        (
            vec!["diff", f, f, "--fail-on", "span,count", "--min-share=-1"],
            "cupti-convert: error: --min-share must be a percentage from 0 to 100",
        ),
        (
            vec![f, "--perfetto", "-o", f],
            &format!("cupti-convert: error: -o {f} is the input {f}: refusing to overwrite the recording"),
        ),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert_eq!(stderr_lines(&o), [msg]);
    }
    // An unwritable output: exit 1.
    let o = run(&[f, "--perfetto", "-o", "/nonexistent-dir/x.pftrace"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr_lines(&o),
        ["cupti-convert: error: cannot write /nonexistent-dir/x.pftrace: No such file or directory (os error 2)"]
    );
    // Nothing was left behind: no output, no temporary file.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// What drives the progress bar: the layout stage, then every shard counted once, ending at the total.
#[test]
fn export_reports_progress_shard_by_shard() {
    use cutr_viewer_export::{ExportOptions, Format, Progress, Stage, export};
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("s.cutr");
    cutr_synth::write_file(
        &input,
        cutr_synth::SynthOptions { records: 40_000, buffer_bytes: 512 << 10, ..Default::default() },
    )
    .unwrap();
    for (format, compress_packets) in [(Format::Perfetto, false), (Format::Perfetto, true), (Format::Chrome, false)] {
        let t = cutr_model::load(std::slice::from_ref(&input), &Default::default()).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let opts = ExportOptions {
            format,
            compress_packets,
            shard_slices: 2_000,
            progress: Some(Progress(Arc::new(move |s| sink.lock().unwrap().push(s)))),
            ..Default::default()
        };
        let summary = export(&t, &dir.path().join("out"), &opts).unwrap();
        let seen = seen.lock().unwrap();
        // 28,147 slices (15 tracks, 2 of them the NVTX ranges' GPU spans) in shards of one track each, at least
        // 2,000 slices but a track's last: 22 shards. Perfetto writes one shard more than the layout has (the
        // counters and instants).
        assert_eq!((summary.slices, summary.tracks, summary.shards), (28_147, 15, 22), "{format:?}");
        if format == Format::Perfetto {
            // The exact sizes guard the encoding against silent growth: 91.9 bytes per slice on this mix (every
            // kernel with the Chrome JSON's args: device, context, stream, correlation, queued, occupancy, shared
            // memory total and split, blocks and warps per SM; every API call its cbid; the NVTX ranges' GPU spans
            // their device), 17.9 as compressed packets (libdeflate level 1, pinned by Cargo.lock).
            assert_eq!(summary.bytes, if compress_packets { 502_690 } else { 2_586_565 });
        }
        let total = 22 + u64::from(format == Format::Perfetto);
        assert_eq!(seen[0], Stage::Layout);
        assert_eq!(seen[1], Stage::Writing { done: 0, total });
        assert_eq!(*seen.last().unwrap(), Stage::Writing { done: total, total });
        let done: Vec<u64> = seen[1..]
            .iter()
            .map(|s| match s {
                Stage::Writing { done, total: t } if *t == total => *done,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(done.windows(2).all(|w| w[0] < w[1]), "{format:?}: {done:?}");
    }
}

/// `stats --json` is the same bytes every run (CI diffs it), its loss counters in name order.
#[test]
fn stats_json_is_stable_from_run_to_run() {
    let f = fixture("pytorch_loop.cutr");
    let runs: Vec<Vec<u8>> = (0..3).map(|_| run(&["stats", path_str(&f), "--json"]).stdout).collect();
    assert!(runs[0] == runs[1] && runs[1] == runs[2], "stats --json differs between runs");
    // As written (serde_json's own map would sort them whatever the output's order).
    let text = String::from_utf8(runs[0].clone()).unwrap();
    let loss = &text[text.find("\"loss\": {").unwrap()..];
    let loss = &loss[..loss.find('}').unwrap()];
    let keys: Vec<&str> = loss.lines().skip(1).filter_map(|l| l.trim().split('"').nth(1)).collect();
    assert_eq!(
        keys,
        [
            "counter_samples_lost",
            "cupti_dropped_records",
            "inverted_timestamp_records",
            "pc_collections_buffer_full",
            "pc_samples_dropped",
            "records_lost_in_write_failures",
            "refused_buffers",
            "unparsed_bytes",
            "unresolved_strings",
            "write_failures",
            "zero_timestamp_records"
        ]
    );
}

#[test]
fn output_bytes_do_not_depend_on_the_number_of_workers() {
    // The loop recording (18,633 slices in 14 shards) and a generated trace large enough for 3,125-slice shards:
    // shard cuts come from the trace alone, so 1, 3 and 16 workers write the same bytes.
    let dir = tempfile::tempdir().unwrap();
    let generated = dir.path().join("g.cutr");
    let o = run(&["generate", "-o", path_str(&generated), "--records", "200000"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for input in [fixture("pytorch_loop_filtered.cutr"), generated] {
        for format in ["--perfetto", "--chrome"] {
            let outputs: Vec<Vec<u8>> = ["1", "3", "16"]
                .iter()
                .map(|workers| {
                    // The same path each time: the Chrome JSON names its output in `traceName`.
                    let out = dir.path().join("trace");
                    let o = Command::new(env!("CARGO_BIN_EXE_cupti-convert"))
                        .args([path_str(&input), format, "-q", "-o", path_str(&out)])
                        .env("RAYON_NUM_THREADS", workers)
                        .output()
                        .unwrap();
                    assert!(o.status.success(), "{}", text(&o.stderr));
                    std::fs::read(&out).unwrap()
                })
                .collect();
            assert!(outputs[0].len() > 100_000, "{format}: {} bytes", outputs[0].len());
            assert!(outputs.iter().all(|o| *o == outputs[0]), "{} {format}: outputs differ", input.display());
        }
    }
}

/// A window that keeps nothing warns and says where the records are; a window over activity does not.
#[test]
fn an_empty_window_names_where_the_records_lie() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture("pytorch_loop.cutr");
    let out = dir.path().join("w.pftrace");
    let o = run(&[path_str(&f), "--perfetto", "--start", "2s", "--end", "3s", "-o", path_str(&out), "-q"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stderr_lines(&o),
        ["cupti-convert: warning: the window --start 2s --end 3s keeps no record: the records lie at 0.000-0.164 s, \
          0.817-0.820 s, 4.819-5.494 s and 5.821-5.822 s (seconds after the first record)"]
    );
    // A window over the training steps (the README's, 5.3-5.4 s, runs in readme_commands.rs).
    let o = run(&[path_str(&f), "--perfetto", "--start", "4.9s", "--end", "5s", "-o", path_str(&out), "-q"]);
    assert_eq!((o.status.code(), stderr_lines(&o)), (Some(0), Vec::<String>::new()));
}

/// `info` describes several files, one report each (a JSON array); the hidden `docs` command prints what
/// tools/install.sh installs.
#[test]
fn info_takes_several_files_and_docs_print() {
    let files = [fixture("allreduce_torchrun/ar-3373.cutr"), fixture("allreduce_torchrun/ar-3374.cutr")];
    let o = run(&["info", "--json", path_str(&files[0]), path_str(&files[1])]);
    assert_eq!(o.status.code(), Some(0));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pids: Vec<u64> = j.as_array().unwrap().iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids, [3373, 3374]);
    let o = run(&["info", path_str(&files[0]), path_str(&files[1])]);
    let firsts: Vec<String> = text(&o.stdout).lines().filter(|l| l.starts_with("file ")).map(String::from).collect();
    assert_eq!(firsts.len(), 2);
    assert!(firsts[1].contains("ar-3374.cutr"));
    let o = run(&["docs", "completions", "bash"]);
    let script = text(&o.stdout);
    for sub in ["info", "stats", "diff", "generate", "--nvtx-across-threads", "--fail-on"] {
        assert!(script.contains(sub), "{sub}");
    }
    let o = run(&["docs", "manpage"]);
    assert!(text(&o.stdout).contains(".TH cupti-convert 1"));
}

/// `stats` options: --top limits every section, --report picks sections, the CSV carries each section computed,
/// names are shortened in text unless --wide, and --nvtx-across-threads gives `backward` the kernels PyTorch's
/// autograd thread launched while it was open.
#[test]
fn stats_sections_top_width_and_nvtx_attribution() {
    let f = fixture("pytorch_loop.cutr");
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["stats", path_str(&f), "--json"];
        args.extend_from_slice(extra);
        serde_json::from_slice(&run(&args).stdout).unwrap()
    };
    let all = json(&[]);
    let len = |j: &serde_json::Value, k: &str| j[k].as_array().unwrap().len();
    assert_eq!((len(&all, "kernels"), len(&all, "memory_ops"), len(&all, "nvtx")), (41, 3, 26));
    let top = json(&["--top", "2"]);
    assert_eq!((len(&top, "kernels"), len(&top, "api"), len(&top, "memory_ops"), len(&top, "nvtx")), (2, 2, 2, 2));
    assert_eq!(json(&["--top", "0"]), all);
    let some = json(&["--report", "kernels,loss"]);
    assert_eq!(some["sections"], serde_json::json!(["kernels", "loss"]));
    assert_eq!((len(&some, "kernels"), len(&some, "api"), len(&some, "utilization")), (41, 0, 0));
    let backward = |j: &serde_json::Value| -> (u64, u64) {
        let r = j["nvtx"].as_array().unwrap().iter().find(|r| r["name"] == "backward").unwrap();
        (r["gpu_ns"].as_u64().unwrap(), r["gpu_ops"].as_u64().unwrap())
    };
    assert_eq!(all["nvtx_attribution"], "thread");
    assert_eq!(backward(&all), (23_136, 23));
    let across = json(&["--nvtx-across-threads"]);
    assert_eq!(across["nvtx_attribution"], "process");
    let (ns, ops) = backward(&across);
    assert!(ops > 23 * 100 && ns > 10 * 23_136, "{ns} ns in {ops} ops");
    // CSV: every section computed, 15 columns on every line.
    let csv = text(&run(&["stats", path_str(&f), "--csv"]).stdout);
    let mut sections: Vec<&str> = csv.lines().skip(1).map(|l| l.split(',').next().unwrap()).collect();
    sections.dedup();
    assert_eq!(sections, ["kernel", "api", "memory", "memory_peak", "nvtx", "utilization"]);
    assert!(csv.lines().all(|l| l.matches(',').count() - l.matches("\",\"").count() >= 14));
    // Text: a 134-character cuBLAS kernel name is cut to 100 unless --wide.
    let long = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas";
    let narrow = text(&run(&["stats", path_str(&f), "--report", "kernels"]).stdout);
    assert!(!narrow.contains(long) && narrow.contains(&format!("{}...", &long[..97])));
    let wide = text(&run(&["stats", path_str(&f), "--report", "kernels", "--wide"]).stdout);
    assert!(wide.contains(long));
    // Thousands separators in every number column: the 12,951.1 ns average of that kernel.
    assert!(narrow.contains(" 12,951.1 "), "{narrow}");
}

/// `source` on the PC-sampled fixture: text, JSON, CSV and a kernel filter agree; a recording without PC samples
/// says how to get them.
#[test]
fn source_reports_lines_and_stalls_from_pc_samples() {
    let f = fixture("source_workload_pcs.cutr");
    let o = run(&["source", path_str(&f), "--json", "--top", "3"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["samples"], 861_855);
    let names: Vec<&str> = j["kernels"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["chase(unsigned int const*, unsigned int, int, unsigned int*)", "fma_chain(float*, int)", "jit_scale"]
    );
    assert_eq!(j["kernels"][0]["lines"].as_array().unwrap().len(), 3, "--top 3");
    let chase = run(&["source", path_str(&f), "--kernel", "chase", "--csv"]);
    let csv = text(&chase.stdout);
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "kernel,file,line,samples,percent,top_stall,top_stall_samples,function,called_from");
    assert!(
        rows[1].starts_with(
            "\"chase(unsigned int const*, unsigned int, int, unsigned int*)\",source_workload.cu,44,453876,"
        ),
        "{}",
        rows[1]
    );
    assert!(rows[1..].iter().all(|r| r.starts_with("\"chase(")));
    let t = text(&run(&["source", path_str(&f)]).stdout);
    assert!(t.contains("     453,876  99.8%  source_workload.cu:44"), "{t}");
    let dir = tempfile::tempdir().unwrap();
    let pb = dir.path().join("sw.pb.gz");
    let o = run(&["source", path_str(&f), "--pprof", path_str(&pb), "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let size = std::fs::metadata(&pb).unwrap().len();
    assert_eq!(
        text(&o.stderr),
        format!("cupti-convert: wrote {} ({size} bytes): 861855 samples at 124 PCs in 3 functions\n", pb.display())
    );
    assert_eq!(&std::fs::read(&pb).unwrap()[..2], [0x1f, 0x8b], "gzip");
    let to_stdout = run(&["source", path_str(&f), "--pprof", "-"]);
    assert_eq!((to_stdout.stdout.len() as u64, to_stdout.stderr.len()), (size, 0), "only the profile on stdout");
    let plain = run(&["source", path_str(&fixture("cuda_workload.cutr"))]);
    assert_eq!(
        stderr_lines(&plain),
        [format!(
            "cupti-convert: warning: {}: no PC samples: record with `cupti-record --pc-sampling`",
            fixture("cuda_workload.cutr").display()
        )]
    );
}

/// `export --parquet DIR`: one line saying what was written, thirteen tables in DIR; a DIR that is a file is refused.
#[test]
fn export_writes_the_tables_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tables");
    let f = fixture("cuda_workload.cutr");
    let o = run(&["export", path_str(&f), "--parquet", path_str(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let mut names: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names.len(), 13, "{names:?}");
    let bytes: u64 = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    let line = text(&o.stderr);
    assert!(line.starts_with(&format!("cupti-convert: wrote 13 tables to {} (", out.display())), "{line}");
    assert!(line.contains(&format!(" rows, {bytes} bytes): processes 1, devices 1, kernels ")), "{line}");
    let file = dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let o = run(&["export", path_str(&f), "--parquet", path_str(&file)]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr_lines(&o),
        [format!("cupti-convert: error: cannot write tables to {}: it is not a directory", file.display())]
    );
}

/// `stats --by-rank --step PREFIX`: the ranks side by side and the straggler count; `--step` needs `--by-rank`.
#[test]
fn stats_by_rank_names_the_slowest_rank_per_step() {
    let files: Vec<std::path::PathBuf> = ["ar-3326.cutr", "ar-3373.cutr", "ar-3374.cutr"]
        .iter()
        .map(|f| fixture(&format!("allreduce_torchrun/{f}")))
        .collect();
    let mut args = vec!["stats"];
    args.extend(files.iter().map(|f| path_str(f)));
    args.extend(["--by-rank", "--step", "iter "]);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(out.starts_with("Per rank (ms)\n"), "{out}");
    assert!(out.contains("\n  iter 7           spread   31.6%  0:0.115*  1:0.088\n"), "{out}");
    assert!(out.ends_with("Slowest rank per step: rank 0 in 12, rank 1 in 8\n"), "{out}");
    // Streamed: the same report, under a line that says how it was read.
    args.push("--stream");
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0));
    let streamed = text(&o.stdout);
    let line = "  (streamed over 13 chunks in 4 windows, --stream: every figure exact)\n";
    assert_eq!(streamed.replacen(line, "", 1), out);
    assert!(streamed.starts_with(&format!("Per rank (ms)\n{line}")), "{streamed}");
    let o = run(&["stats", path_str(&files[1]), "--step", "iter "]);
    assert_eq!(o.status.code(), Some(2));
}
