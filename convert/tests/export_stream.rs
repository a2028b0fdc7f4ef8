//! `export --parquet --stream` against the whole export, table by table, read by DuckDB (the Python package,
//! `tests/clients/duck.py`): `EXCEPT ALL` both ways gives no row on every fixture that has the tables and on a
//! generated recording, and each table's row count is the exact figure below. A forced short horizon leaves the
//! joins of the GPU work whose call fell out of it null, counted and warned. PC samples' stall-rate series are the
//! whole export's too.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use common::{fixture, path_str, run, text};
use cutr_tables::TABLES;

/// `cupti-convert export FILES --parquet DIR FLAG`; its standard error.
fn export(files: &[PathBuf], dir: &Path, flag: &str) -> String {
    let mut args: Vec<&str> = vec!["export"];
    args.extend(files.iter().map(|f| path_str(f)));
    args.extend(["--parquet", path_str(dir), flag]);
    let o = run(&args);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    err
}

/// DuckDB's reader of one table of an export (a file, or Hive partitions for several recordings).
fn source(dir: &Path, table: &str) -> String {
    let part = dir.join(table);
    if part.is_dir() {
        format!("read_parquet('{}/**/*.parquet', hive_partitioning = true)", part.display())
    } else {
        format!("read_parquet('{}.parquet')", part.display())
    }
}

/// Per table: (rows of the whole export, rows only it has, rows only the streamed one has), by DuckDB.
fn compare(whole: &Path, streamed: &Path) -> Vec<(&'static str, [u64; 3])> {
    let mut sql = Vec::new();
    for t in TABLES {
        let (w, s) = (source(whole, t), source(streamed, t));
        sql.push(format!(
            "select (select count(*) from {w}), (select count(*) from (select * from {w} except all select * from \
             {s})), (select count(*) from (select * from {s} except all select * from {w}))"
        ));
    }
    let mut args: Vec<&OsStr> = vec![whole.as_os_str()];
    args.extend(sql.iter().map(OsStr::new));
    let out = cutr_tests::python_tool("duck.py", &args, &[]);
    TABLES
        .iter()
        .zip(out.as_array().unwrap())
        .map(|(t, r)| {
            let row = &r["rows"][0];
            (*t, [0, 1, 2].map(|i| row[i].as_u64().unwrap()))
        })
        .collect()
}

/// Exports `files` both ways and checks every table equal, with `rows` rows each (in [`TABLES`] order).
fn streamed_equals_whole(files: &[PathBuf], rows: [u64; 13]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (w, s) = (dir.path().join("whole"), dir.path().join("streamed"));
    export(files, &w, "--no-stream");
    let err = export(files, &s, "--stream");
    let got = compare(&w, &s);
    let want: Vec<(&str, [u64; 3])> = TABLES.iter().zip(rows).map(|(t, n)| (*t, [n, 0, 0])).collect();
    assert_eq!(got, want, "{files:?}: (rows, only whole, only streamed) per table");
    err
}

#[test]
fn pytorch_loop_streamed_equals_whole() {
    let err = streamed_equals_whole(
        &[fixture("pytorch_loop.cutr")],
        [1, 1, 5_653, 55, 391, 114_155, 58, 92, 0, 0, 0, 1_219, 0],
    );
    assert!(err.contains("streamed: 0 GPU operations past the launch horizon"), "{err}");
}

#[test]
fn cuda_workload_streamed_equals_whole() {
    streamed_equals_whole(&[fixture("cuda_workload.cutr")], [1, 1, 75, 73, 21, 467, 43, 106, 0, 0, 0, 24, 0]);
}

/// CUDA graphs: each replayed op's node, its creating call and ranges, from the stream's graphs pass.
#[test]
fn graph_compile_streamed_equals_whole() {
    streamed_equals_whole(&[fixture("graph_compile.cutr")], [1, 1, 3_046, 893, 1, 18_252, 1_771, 91, 0, 0, 0, 606, 64]);
    streamed_equals_whole(&[fixture("graph_layers.cutr")], [1, 1, 1_626, 65, 1, 2_643, 76, 29, 0, 0, 0, 573, 60]);
}

/// Two kernels' launching calls sit in a chunk that starts after the kernels' own: held until it comes.
#[test]
fn launch_loop_streamed_equals_whole() {
    let err =
        streamed_equals_whole(&[fixture("launch_loop_100k.cutr")], [1, 1, 101_000, 1, 1, 202_130, 2, 0, 0, 0, 0, 2, 0]);
    assert!(!err.contains("no launching"), "{err}");
}

/// Counter samples; three recordings of a job, as Hive partitions.
#[test]
fn counters_and_a_jobs_ranks_streamed_equal_whole() {
    streamed_equals_whole(&[fixture("counter_workload.cutr")], [1, 1, 1_902, 0, 1, 4_408, 476, 0, 0, 261_331, 0, 6, 0]);
    let ranks: Vec<PathBuf> = ["ar-3326.cutr", "ar-3373.cutr", "ar-3374.cutr"]
        .iter()
        .map(|f| fixture("allreduce_torchrun").join(f))
        .collect();
    streamed_equals_whole(&ranks, ROWS_TORCHRUN);
}

const ROWS_TORCHRUN: [u64; 13] = [3, 6, 216, 294, 198, 14_848, 424, 210, 0, 0, 0, 3_604, 0];

/// A generated recording of 300k records (steps named apart, PyTorch op ids).
#[test]
fn a_generated_recording_streamed_equals_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.cutr");
    let o = run(&["generate", "--records", "300000", "-o", path_str(&path)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    streamed_equals_whole(&[path], ROWS_GENERATED);
}

const ROWS_GENERATED: [u64; 13] = [1, 1, 81_128, 5_649, 2_690, 97_219, 5_380, 8_070, 0, 0, 0, 3, 0];

/// A horizon of one launch over a generated recording cut into 64 KiB chunks, a window each: the GPU work read
/// after its call left the horizon is counted, warned, and its join columns are null.
#[test]
fn a_short_horizon_counts_what_fell_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.cutr");
    let o = run(&["generate", "--records", "20000", "--buffer-bytes", "65536", "-o", path_str(&path)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let files = [path];
    let readers: Vec<cutr_format::Reader> = files.iter().map(|f| cutr_format::Reader::open(f).unwrap()).collect();
    let opts = cutr_model::stream::StreamOptions { horizon: 1, window_bytes: 1, ..Default::default() };
    let e = cutr_tables::write_parquet_streamed(&files, &readers, &dir.path().join("s"), &opts).unwrap();
    assert_eq!(e.launches_out_of_horizon, OUT_OF_HORIZON);
    assert!(e.warnings[0].starts_with(&format!("{OUT_OF_HORIZON} GPU operations were read after")), "{:?}", e.warnings);
    let q = "select count(*) filter (where api_name is null), count(*) from <kernels>";
    let out = cutr_tests::python_tool("duck.py", &[dir.path().join("s").as_os_str(), OsStr::new(q)], &[]);
    let row = &out[0]["rows"][0];
    assert_eq!((row[0].as_u64(), row[1].as_u64()), (Some(KERNELS_UNJOINED), Some(KERNELS)));
    // The whole export joins every one of them.
    export(&files, &dir.path().join("w"), "--no-stream");
    let out = cutr_tests::python_tool("duck.py", &[dir.path().join("w").as_os_str(), OsStr::new(q)], &[]);
    let row = &out[0]["rows"][0];
    assert_eq!((row[0].as_u64(), row[1].as_u64()), (Some(0), Some(KERNELS)));
}

const OUT_OF_HORIZON: u64 = 399;
/// The kernels among them (the rest are copies and memsets).
const KERNELS_UNJOINED: u64 = 383;
const KERNELS: u64 = 5_428;

/// The kernel of each unified memory event, joined while streaming: on the fixture, and on a generated recording
/// in 64 KiB chunks streamed a chunk per window (kernels running across windows).
#[test]
fn unified_memory_streamed_equals_whole() {
    streamed_equals_whole(&[fixture("um_workload.cutr")], [1, 1, 4, 1, 1, 149, 4, 4, 0, 0, 4_693, 10, 0]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("um.cutr");
    let args = ["generate", "--records", "30000", "--unified-memory", "--buffer-bytes", "65536", "-o", path_str(&path)];
    let o = run(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let files = [path];
    let readers: Vec<cutr_format::Reader> = files.iter().map(|f| cutr_format::Reader::open(f).unwrap()).collect();
    let opts = cutr_model::stream::StreamOptions { window_bytes: 1, ..Default::default() };
    let (w, s) = (dir.path().join("w"), dir.path().join("s"));
    let e = cutr_tables::write_parquet_streamed(&files, &readers, &s, &opts).unwrap();
    assert_eq!(e.warnings, Vec::<String>::new());
    export(&files, &w, "--no-stream");
    let got = compare(&w, &s);
    let want: Vec<(&str, [u64; 3])> = TABLES.iter().zip(ROWS_GENERATED_UM).map(|(t, n)| (*t, [n, 0, 0])).collect();
    assert_eq!(got, want);
    let q = "select count(*) filter (where kernel is not null) from <um>";
    let out = cutr_tests::python_tool("duck.py", &[s.as_os_str(), OsStr::new(q)], &[]);
    assert_eq!(out[0]["rows"][0][0].as_u64(), Some(UM_WITH_KERNEL));
}

const ROWS_GENERATED_UM: [u64; 13] = [1, 2, 7_711, 533, 254, 9_590, 508, 762, 0, 0, 969, 207, 0];
const UM_WITH_KERNEL: u64 = 408;

/// PC samples: their stall-rate series in the counters table (168 rows), swept behind the stream's edge after a
/// pass over the kernels for each function's execution time, as the whole export draws them; nothing warned.
#[test]
fn pc_samples_stall_rates_streamed_equal_whole() {
    let files = [fixture("source_workload_pcs.cutr")];
    let err = streamed_equals_whole(&files, [1, 1, 9, 1, 0, 146, 1, 0, 0, 168, 0, 6, 0]);
    assert!(!err.contains("warning"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    export(&files, dir.path(), "--stream");
    let q = "select count(*) from <counters> where counter like 'PC samples/ms: %'";
    let out = cutr_tests::python_tool("duck.py", &[dir.path().as_os_str(), OsStr::new(q)], &[]);
    assert_eq!(out[0]["rows"][0][0].as_u64(), Some(168));
}

/// A recording cut short (its first 100 KB: the chunk the cut falls in is lost) streams as it loads.
#[test]
fn a_truncated_recording_streamed_equals_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.cutr");
    let bytes = std::fs::read(fixture("pytorch_loop.cutr")).unwrap();
    std::fs::write(&path, &bytes[..100_000]).unwrap();
    let err = streamed_equals_whole(&[path], [1, 0, 0, 54, 0, 1_078, 54, 0, 0, 0, 0, 7, 0]);
    assert!(err.contains("that chunk is lost"), "{err}");
}
