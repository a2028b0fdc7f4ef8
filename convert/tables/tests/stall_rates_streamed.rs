//! The PC samples' stall-rate series (`PC samples/ms: REASON`) of a streamed export against the whole export's:
//! the `counters` table read back from both, the stall rows in order and every row as a set (the stream writes
//! counter samples as their windows come, a whole export each series together), on every fixture with PC samples,
//! a chunk per window and at the default windows; three recordings as partitions; a split recording; a generated
//! loop over many windows; a collection that does not decode; and a file whose chunk headers hold the stream's edge
//! back, equal while the waiting fits and counted and warned past `max_waiting`. The `--start/--end` window is
//! checked in `convert/model/tests/stall_stream.rs`.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::{Array, Float64Array, StringArray, UInt32Array, UInt64Array};
use cutr_format::Reader;
use cutr_model::stall_stream::StallEnd;
use cutr_model::stream::StreamOptions;
use cutr_model::{LoadOptions, load_readers};
use cutr_synth::forge::cubins::{Sample, recording_with_trace};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// A counters row: file, device, counter, ts_ns, value.
type Row = (String, u32, String, u64, f64);

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(name)
}

/// The `counters` table of an export in `dir`: one file, or each recording's partition in file order.
fn counters(dir: &Path) -> Vec<Row> {
    let single = dir.join("counters.parquet");
    let mut parts: Vec<PathBuf> = if single.exists() {
        vec![single]
    } else {
        let mut found = Vec::new();
        let mut stack = vec![dir.join("counters")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() { stack.push(p) } else { found.push(p) }
            }
        }
        found
    };
    // part-<file index>.parquet: in the order of the files.
    let index = |p: &PathBuf| -> usize {
        let name = p.file_stem().unwrap().to_str().unwrap();
        name.strip_prefix("part-").map_or(0, |i| i.parse().unwrap())
    };
    parts.sort_by_key(index);
    let mut rows = Vec::new();
    for part in parts {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&part).unwrap()).unwrap().build().unwrap();
        for batch in reader {
            let b = batch.unwrap();
            let col = |name: &str| b.column(b.schema().index_of(name).unwrap()).clone();
            let (file, device, counter) = (col("file"), col("device"), col("counter"));
            let (ts, value) = (col("ts_ns"), col("value"));
            let file = file.as_any().downcast_ref::<StringArray>().unwrap();
            let device = device.as_any().downcast_ref::<UInt32Array>().unwrap();
            let counter = counter.as_any().downcast_ref::<StringArray>().unwrap();
            let ts = ts.as_any().downcast_ref::<UInt64Array>().unwrap();
            let value = value.as_any().downcast_ref::<Float64Array>().unwrap();
            for i in 0..b.num_rows() {
                let name = counter.value(i).to_string();
                rows.push((file.value(i).to_string(), device.value(i), name, ts.value(i), value.value(i)));
            }
        }
    }
    rows
}

/// What both exports gave: the whole export's counters, the streamed one's, and what the stream said.
struct Exports {
    whole: Vec<Row>,
    streamed: Vec<Row>,
    stall_rates: Option<StallEnd>,
    warnings: Vec<String>,
    /// PC samples that could not be placed: (whole, streamed).
    unplaced: (u64, u64),
}

fn export(files: &[PathBuf], opts: &StreamOptions) -> Exports {
    let readers: Vec<Reader> = files.iter().map(|f| Reader::open(f).unwrap()).collect();
    let dir = tempfile::tempdir().unwrap();
    let (w, s) = (dir.path().join("whole"), dir.path().join("streamed"));
    let trace = load_readers(files, &readers, &LoadOptions::default()).unwrap();
    cutr_tables::write_parquet(&trace, &w).unwrap();
    let e = cutr_tables::write_parquet_streamed(files, &readers, &s, opts).unwrap();
    for (p, q) in trace.processes.iter().zip(&e.trace.processes) {
        assert_eq!(p.stats.pc_samples_unplaced, q.stats.pc_samples_unplaced, "{}", p.path.display());
        let pc = |w: &&String| w.contains("PC sample") || w.contains("stall");
        let (a, b): (Vec<&String>, Vec<&String>) =
            (p.warnings.iter().filter(pc).collect(), q.warnings.iter().filter(pc).collect());
        assert_eq!(a, b);
    }
    Exports {
        whole: counters(&w),
        streamed: counters(&s),
        stall_rates: e.stall_rates,
        warnings: e.warnings,
        unplaced: (trace.stats.pc_samples_unplaced, e.trace.stats.pc_samples_unplaced),
    }
}

fn is_stall(r: &Row) -> bool {
    r.2.starts_with("PC samples/ms: ")
}

/// The two exports' counters the same: the stall rows in the same order, and every row as a set.
fn same_counters(e: &Exports) -> bool {
    let stalls = |rows: &[Row]| rows.iter().filter(|r| is_stall(r)).cloned().collect::<Vec<Row>>();
    let sorted = |rows: &[Row]| {
        let mut rows = rows.to_vec();
        rows.sort_by(|a, b| (&a.0, a.1, &a.2, a.3).cmp(&(&b.0, b.1, &b.2, b.3)).then(a.4.total_cmp(&b.4)));
        rows
    };
    stalls(&e.streamed) == stalls(&e.whole) && sorted(&e.streamed) == sorted(&e.whole)
}

/// Both exports' counters equal, in order, a chunk per window and at the default windows, with no warning:
/// returns the stall rows, and the samples left unplaced.
fn streamed_equals_whole(files: &[PathBuf]) -> (Vec<Row>, u64) {
    let mut out = None;
    for window_bytes in [1, StreamOptions::default().window_bytes] {
        let e = export(files, &StreamOptions { window_bytes, ..Default::default() });
        assert_eq!(e.streamed.len(), e.whole.len(), "{files:?} at {window_bytes} bytes a window");
        assert!(same_counters(&e), "{files:?} at {window_bytes} bytes a window");
        assert_eq!(e.stall_rates, Some(StallEnd::default()));
        assert_eq!(e.warnings, Vec::<String>::new());
        assert_eq!(e.unplaced.0, e.unplaced.1);
        out = Some((e.whole.into_iter().filter(is_stall).collect(), e.unplaced.0));
    }
    out.unwrap()
}

/// Rows of each file, counted.
fn per_file(rows: &[Row]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for r in rows {
        match out.last_mut() {
            Some((f, n)) if *f == r.0 => *n += 1,
            _ => out.push((r.0.clone(), 1)),
        }
    }
    out
}

/// Three kernels' samples (`chase`, `fma_chain`, `jit_scale`) over their runs: 168 points, the first where
/// `branch_resolving` begins at 19.65 samples per ms.
#[test]
fn source_workload_stall_rates_streamed_equal_whole() {
    let (rows, unplaced) = streamed_equals_whole(&[fixture("source_workload_pcs.cutr")]);
    assert_eq!((rows.len(), unplaced), (168, 0));
    let first = &rows[0];
    assert_eq!(
        (first.2.as_str(), first.3, first.4),
        ("PC samples/ms: branch_resolving", 1_795_468_250_283_042_506, 19.654142456546353)
    );
}

/// One kernel, `calls`, run 100 times: 2,000 points.
#[test]
fn calls_workload_stall_rates_streamed_equal_whole() {
    let (rows, unplaced) = streamed_equals_whole(&[fixture("calls_workload_pcs.cutr")]);
    assert_eq!((rows.len(), unplaced), (2_000, 0));
    let first = &rows[0];
    assert_eq!((first.2.as_str(), first.4), ("PC samples/ms: branch_resolving", 8825.59827194179));
}

/// Flight-recorder dumps: the one whose stall-reason table was evicted names no sample (no series), the other
/// 72,000 points.
#[test]
fn a_ring_dumps_stall_rates_streamed_equal_whole() {
    let got: Vec<(usize, u64)> = ["pc_ring/table_first_only.cutr", "pc_ring/table_every_collection.cutr"]
        .iter()
        .map(|f| {
            let (rows, unplaced) = streamed_equals_whole(&[fixture(f)]);
            (rows.len(), unplaced)
        })
        .collect();
    assert_eq!(got, [(0, 0), (72_000, 0)]);
}

/// Three recordings: Hive partitions, each file's stall rows before its other counters.
#[test]
fn three_recordings_stall_rates_streamed_equal_whole() {
    let files: Vec<PathBuf> =
        ["base-1", "base-2", "extra-1"].iter().map(|f| fixture(&format!("source_diff/{f}.cutr"))).collect();
    let (rows, unplaced) = streamed_equals_whole(&files);
    let want = [("base-1.cutr", 1_800), ("base-2.cutr", 1_800), ("extra-1.cutr", 1_800)];
    assert_eq!(per_file(&rows), want.map(|(f, n)| (f.to_string(), n)));
    assert_eq!(unplaced, 0);
}

/// Two parts of one split recording (the same recording twice): one process, whose functions both parts sample.
#[test]
fn a_split_recordings_stall_rates_streamed_equal_whole() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("source_workload_pcs.cutr")).unwrap();
    let files = cutr_synth::forge::write_parts(dir.path(), &[bytes.clone(), bytes]);
    let (rows, unplaced) = streamed_equals_whole(&files);
    // As a load places them: both parts' samples of a function summed, over its runs in both parts; none unplaced.
    assert_eq!((rows.len(), unplaced), (168, 0));
}

/// Every activity chunk's header claims the first one's start: the stream's edge never passes it, so every
/// start and end waits to the end, and is drawn as a load draws it. Past `max_waiting`, the oldest are swept
/// early, a run starting before what was swept is drawn from there on: counted and warned.
#[test]
fn an_edge_held_back_waits_then_sweeps_early_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(fixture("calls_workload_pcs.cutr")).unwrap();
    cutr_synth::forge::keep_edges_back(&mut bytes);
    let files = [dir.path().join("held.cutr")];
    std::fs::write(&files[0], &bytes).unwrap();
    let (rows, _) = streamed_equals_whole(&files);
    assert_eq!(rows.len(), 2_000);
    let e = export(&files, &StreamOptions { window_bytes: 1, max_waiting: 8, ..Default::default() });
    assert_eq!(e.stall_rates, Some(StallEnd { swept_early: 192, runs_late: 0 }));
    let warning = "192 starts and ends of sampled kernels' runs were swept into the PC samples' stall rates before the \
                   stream passed their time, as more than 8 waited (chunk headers claiming earlier times than their \
                   rows: a damaged or forged file)";
    assert_eq!(e.warnings[0], warning);
    // The runs themselves are in time order (only the headers lie): none came late, the points are the load's.
    assert!(same_counters(&e));
}

/// A generated training loop of 200k records with PC samples of two of its kernels (1,000 samples each), over
/// many windows: 18,082 points, each 0 or one of the two functions' rates.
#[test]
fn a_generated_loops_stall_rates_streamed_equal_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.cutr");
    let functions = [
        "_ZN7cutlass7Kernel2I62cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_128x1_tn_align8EEvNT_6ParamsE",
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
    ];
    let samples: Vec<Sample> = functions
        .iter()
        .enumerate()
        .map(|(i, f)| Sample { crc: 1, function: f.to_string(), pc: 16 * i as u64, samples: 1_000 })
        .collect();
    recording_with_trace(&path, &[], &samples, 200_000);
    let (rows, unplaced) = streamed_equals_whole(&[path]);
    let mut values: Vec<f64> = rows.iter().map(|r| r.4).collect();
    values.sort_by(f64::total_cmp);
    values.dedup();
    assert_eq!((rows.len(), unplaced), (18_082, 0));
    assert_eq!(values, [0.0, 11.502591856017734, 354.3390230731398]);
}

/// A `pc_samples` chunk whose checksum holds but whose collection does not decode: its samples are lost and the
/// chunk counted as damaged, in both exports alike.
#[test]
fn an_undecodable_collection_is_counted_as_a_load_counts_it() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("source_workload_pcs.cutr")).unwrap();
    let pcs = cutr_synth::forge::chunks_of(&bytes, cutr_format::ChunkType::PcSamples);
    let garbage = b"not a collection of PC samples";
    let forged = cutr_synth::forge::replace_payload(
        &bytes,
        pcs[0].offset,
        cutr_format::Codec::None,
        garbage,
        garbage.len() as u64,
        0,
    );
    let files = [dir.path().join("garbled.cutr")];
    std::fs::write(&files[0], forged).unwrap();
    let readers: Vec<Reader> = files.iter().map(|f| Reader::open(f).unwrap()).collect();
    let trace = load_readers(&files, &readers, &LoadOptions::default()).unwrap();
    let e = cutr_tables::write_parquet_streamed(&files, &readers, &dir.path().join("s"), &StreamOptions::default())
        .unwrap();
    let damage = |t: &cutr_model::Trace| (t.stats.damaged_chunks, t.processes[0].problems.len());
    // Found only when the samples are read (the checksum holds at open), by the load and by the stream.
    assert_eq!(readers[0].problems().len(), 0);
    assert_eq!((damage(&trace), damage(&e.trace)), ((1, 1), (1, 1)));
    // The lost chunk held the collection naming the stall reasons: the other's samples are named by none.
    let (rows, unplaced) = streamed_equals_whole(&files);
    assert_eq!((pcs.len(), rows.len(), unplaced), (2, 0, 0));
}
