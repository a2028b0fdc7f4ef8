//! `--split` against the fake CUPTI: a run cut into parts by size, each part a complete file readable alone
//! (its strings, its thread names, its metadata marked with the run and the part), every buffer in exactly one
//! part, and the parts read together by the model as the one recording made without `--split`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use cutr_format::Reader;
use cutr_recorder::config::SplitLimit;
use cutr_recorder::fake::{Delivery, FakeCupti};
use cutr_recorder::{Config, Recorder, Summary};
use cutr_schema::kinds;
use cutr_synth::{Synth, SynthOptions};

/// CUPTI's callbacks are process-wide: one recording at a time.
static SERIAL: Mutex<()> = Mutex::new(());

struct Buffers {
    bytes: Vec<Vec<u8>>,
    counts: Vec<u64>,
    records_per_kind: BTreeMap<u32, u64>,
}

/// The synthetic run's buffers, their string pointers made real C strings of the fake.
fn buffers(h: &cutr_recorder::fake::FakeHandle, records: u64) -> Buffers {
    let mut s = Synth::new(SynthOptions { records, buffer_bytes: 64 << 10, ..Default::default() }).unwrap();
    let plan = cutr_format::CodecPlan::new(s.layouts());
    let (mut bytes, mut counts, mut texts) = (Vec::new(), Vec::new(), HashMap::new());
    while let Some(b) = s.next_buffer() {
        counts.push(cutr_format::codec::buffer_stats(&b.bytes, &plan).records as u64);
        texts.extend(b.new_strings);
        bytes.push(b.bytes);
    }
    for b in &mut bytes {
        h.realize_strings(b, &texts);
    }
    Buffers { bytes, counts, records_per_kind: s.truth().records_per_kind.clone() }
}

fn config(output: &Path, split: Option<SplitLimit>) -> Config {
    Config {
        output: output.display().to_string(),
        buffer_bytes: 64 << 10,
        memory_cap_bytes: 16 << 20,
        flush_period: Duration::from_millis(20),
        // Level 1 makes parts of a few chunks each from a small run.
        zstd_level: 1,
        quiet: true,
        split,
        ..Config::default()
    }
}

/// Records `b` (one buffer at a time, with pauses for periodic flushes) and returns the summary.
fn record(
    output: &Path,
    split: Option<SplitLimit>,
    cupti: FakeCupti,
    h: &cutr_recorder::fake::FakeHandle,
    b: &Buffers,
) -> Summary {
    let rec = Recorder::start_with(Box::new(cupti), config(output, split)).unwrap();
    for (i, (bytes, &n)) in b.bytes.iter().zip(&b.counts).enumerate() {
        assert_eq!(h.deliver(bytes, n), Delivery::Written);
        if i % 16 == 15 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    rec.stop().unwrap()
}

fn parts_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

fn config_value(r: &Reader, key: &str) -> String {
    let m = r.metadata().unwrap();
    m.config.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).unwrap_or_default()
}

#[test]
fn a_split_run_is_complete_parts_whose_records_sum_to_the_run() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let b = buffers(&h, 120_000);
    let summary = record(&dir.path().join("run-%n.cutr"), Some(SplitLimit::Bytes(96 << 10)), cupti, &h, &b);
    let total: u64 = b.counts.iter().sum();
    assert_eq!((summary.records, summary.buffers), (total, b.bytes.len() as u64));
    assert!(summary.loss.is_clean() && summary.loss.is_final, "{:?}", summary.loss);
    let files = parts_in(dir.path());
    assert!(files.len() >= 3, "{files:?}");
    assert_eq!(summary.parts as usize, files.len());
    assert_eq!(summary.first_path.as_deref(), Some(dir.path().join("run-001.cutr").as_path()));
    assert_eq!(summary.path, *files.last().unwrap());

    let mut run_ids = BTreeSet::new();
    let mut per_kind: BTreeMap<u32, u64> = BTreeMap::new();
    let mut got: Vec<Vec<u8>> = Vec::new();
    for (i, path) in files.iter().enumerate() {
        assert_eq!(path.file_name().unwrap().to_str().unwrap(), format!("run-{:03}.cutr", i + 1));
        // Each part alone: closed cleanly, no problem, its loss report final.
        let r = Reader::open(path).unwrap();
        assert!(r.clean_close() && r.problems().is_empty(), "{path:?}: {:?}", r.problems());
        assert!(r.loss().unwrap().is_final && r.loss().unwrap().is_clean());
        assert_eq!(config_value(&r, "split.part"), (i + 1).to_string());
        run_ids.insert(config_value(&r, "split.run"));
        for (k, n) in r.verify().records_per_kind {
            *per_kind.entry(k).or_default() += n;
        }
        got.extend(r.par_map_activity(|_, d| d.unwrap().to_original()));
        // Every kernel name in the part resolves from the part's own strings.
        let layouts = r.layouts().unwrap().clone();
        let name =
            cutr_format::records::FieldReader::new(layouts.get(kinds::CONCURRENT_KERNEL).unwrap(), "name").unwrap();
        let mut kernels = 0;
        for c in r.activity_chunks() {
            let d = r.decode_activity(c).unwrap();
            for rec in d.group(kinds::CONCURRENT_KERNEL).iter().flat_map(|g| g.iter()) {
                r.strings().resolve(name.u64(rec), c.header.seq).expect("a kernel name of this part resolves in it");
                kernels += 1;
            }
        }
        assert!(kernels > 0, "{path:?} has kernels");
        // The recorder's own writer thread is named in every part.
        assert!(r.thread_names().values().any(|n| n == "cutr-writer"), "{path:?}");
    }
    assert_eq!(run_ids.len(), 1, "one run id: {run_ids:?}");
    assert_eq!(run_ids.iter().next().unwrap().len(), 16);
    assert_eq!(per_kind, b.records_per_kind, "every record in exactly one part");
    let mut want = b.bytes.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want, "every buffer once, byte for byte");
}

/// What `stats` sums per kernel name: (count, total ns); and how many kernels of each (name, duration, launching
/// call) there are (the two recordings' clocks differ, so times are compared as durations).
type KernelSummary = (BTreeMap<String, (u64, u64)>, BTreeMap<(String, u64, String), u64>);

fn kernel_summary(t: &cutr_model::Trace) -> KernelSummary {
    let mut per_name: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut launched = BTreeMap::new();
    for k in &t.kernels {
        let e = per_name.entry(t.kernel_name(k).to_string()).or_default();
        e.0 += 1;
        e.1 += k.end - k.start;
        let key = cutr_model::CorrKey::new(k.proc, k.correlation);
        let api = t.launcher(key).map(|a| t.api_name(a)).unwrap_or_default();
        *launched.entry((t.kernel_name(k).to_string(), k.end - k.start, api)).or_default() += 1;
    }
    (per_name, launched)
}

/// `a == b`, saying only the first difference (the maps are large).
fn assert_same<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(a: &BTreeMap<K, V>, b: &BTreeMap<K, V>) {
    assert_eq!(a.len(), b.len());
    if let Some((k, v)) = a.iter().find(|(k, v)| b.get(k) != Some(v)) {
        panic!("{k:?}: {v:?} against {:?}", b.get(k));
    }
}

fn load(paths: &[PathBuf]) -> cutr_model::Trace {
    cutr_model::load(paths, &Default::default()).unwrap()
}

/// The parts read together are the run recorded whole: one process, the same kernels with the same launching
/// calls, the same joins; a call and its kernel in different parts join (each part alone cannot join them).
#[test]
fn the_parts_read_together_are_the_run_recorded_whole() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (split_dir, whole_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (cupti, h) = FakeCupti::new(130001);
    let b = buffers(&h, 120_000);
    let split = record(&split_dir.path().join("run-%n.cutr"), Some(SplitLimit::Bytes(96 << 10)), cupti, &h, &b);
    let (cupti2, h2) = FakeCupti::new(130001);
    let whole = record(&whole_dir.path().join("whole.cutr"), None, cupti2, &h2, &b);
    assert_eq!(split.records, whole.records);
    assert_eq!(whole.parts, 1);
    let parts = parts_in(split_dir.path());
    // Given in any order: grouped by run id and read in part order.
    let mut shuffled = parts.clone();
    shuffled.reverse();
    let together = load(&shuffled);
    let recorded_whole = load(std::slice::from_ref(&whole.path));
    assert_eq!(together.processes.len(), 1);
    let p = &together.processes[0];
    assert_eq!(cutr_model::runs::files_of(p), parts);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert_eq!(together.job_ranks(), recorded_whole.job_ranks());
    assert_eq!(together.records_per_kind, recorded_whole.records_per_kind);
    let (names, launched) = kernel_summary(&together);
    let (names_whole, launched_whole) = kernel_summary(&recorded_whole);
    assert_same(&names, &names_whole);
    assert_same(&launched, &launched_whole);
    assert_eq!(names.values().map(|v| v.0).sum::<u64>(), together.kernels.len() as u64);
    assert_eq!(together.apis.len(), recorded_whole.apis.len());
    assert_eq!(together.ranges.len(), recorded_whole.ranges.len());
    // NVTX ranges open across a boundary pair up, and every part's PyTorch op ids are found.
    let nvtx = |t: &cutr_model::Trace| (t.stats.nvtx_ends_without_start, t.stats.nvtx_unclosed_ranges);
    assert_eq!(nvtx(&together), nvtx(&recorded_whole));
    let durations = |t: &cutr_model::Trace| {
        let mut d: BTreeMap<(String, u64), u64> = BTreeMap::new();
        for r in &t.ranges {
            *d.entry((t.names.get(r.name).to_string(), r.end - r.start)).or_default() += 1;
        }
        d
    };
    assert_same(&durations(&together), &durations(&recorded_whole));
    let op_ids = |t: &cutr_model::Trace| t.external.count_where(|_, v| v.0 != 0);
    assert_eq!(op_ids(&together), op_ids(&recorded_whole));
    assert!(op_ids(&together) > 0);
    assert_eq!(together.stats.gpu_without_api, recorded_whole.stats.gpu_without_api);
    assert_eq!(together.stats.external_without_api, recorded_whole.stats.external_without_api);
    assert_eq!(p.loss, cutr_format::LossCounters { is_final: true, ..Default::default() });
    streamed_parts_equal_the_loaded_run(&shuffled, &together);
    // Each part alone converts; the kernels whose call is in another part are the ones it cannot join.
    let mut alone_unjoined = 0;
    let mut kernels = 0;
    for part in &parts {
        let t = load(std::slice::from_ref(part));
        assert_eq!(t.processes.len(), 1);
        alone_unjoined += t.stats.gpu_without_api;
        kernels += t.kernels.len();
    }
    assert_eq!(kernels, together.kernels.len());
    // The synthetic run's figures: 120,022 records, 32,452 kernels, every one joined to its call.
    assert_eq!((split.records, kernels, together.stats.gpu_without_api), (120_022, 32_452, 0));
    // Where the boundaries fall depends on the periodic flushes' chunks: 117 kernels in the runs tried.
    assert!(alone_unjoined > 0, "some call and its kernel lie in different parts");
    // A missing part is said.
    let gap = load(&[parts[0].clone(), parts[2].clone()]);
    assert_eq!(gap.processes[0].warnings, ["parts of this split recording are missing: 2"]);
}

/// By time: a part every 300 ms over a run of about a second; an empty tail part is a complete file too.
#[test]
fn a_run_split_by_time_starts_a_part_when_its_time_is_up() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let b = buffers(&h, 20_000);
    let split = Some(SplitLimit::Every(Duration::from_millis(300)));
    let rec = Recorder::start_with(Box::new(cupti), config(&dir.path().join("t-%p-%n.cutr"), split)).unwrap();
    let t0 = std::time::Instant::now();
    for (bytes, &n) in b.bytes.iter().zip(&b.counts) {
        assert_eq!(h.deliver(bytes, n), Delivery::Written);
        std::thread::sleep(Duration::from_millis(1100) / b.bytes.len() as u32);
    }
    let summary = rec.stop().unwrap();
    let elapsed = t0.elapsed();
    let files = parts_in(dir.path());
    // A boundary every 300 ms, checked at each message (the flush every 20 ms brings one).
    let expected = (elapsed.as_millis() / 300) as usize + 1;
    assert!((expected - 1..=expected).contains(&files.len()), "{} parts in {elapsed:?}", files.len());
    assert_eq!(summary.parts as usize, files.len());
    let mut records = 0;
    for (i, f) in files.iter().enumerate() {
        let name = format!("t-{}-{:03}.cutr", std::process::id(), i + 1);
        assert_eq!(f.file_name().unwrap().to_str().unwrap(), name);
        let r = Reader::open(f).unwrap();
        assert!(r.clean_close() && r.loss().unwrap().is_final);
        records += r.activity_chunks().map(|c| c.header.record_count as u64).sum::<u64>();
    }
    assert_eq!(records, b.counts.iter().sum::<u64>());
}

/// Graph structure recorded in the first part is in every part after it (a replay there needs it), and the parts
/// read together count it once.
#[test]
fn graph_structure_is_carried_into_every_part_and_counted_once() {
    use cutr_recorder::ffi::subscriber::{self as sub, GraphData};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (cupti, h) = FakeCupti::new(130001);
    let b = buffers(&h, 60_000);
    let cfg =
        Config { graph_context: Some(8), ..config(&dir.path().join("g-%n.cutr"), Some(SplitLimit::Bytes(96 << 10))) };
    let rec = Recorder::start_with(Box::new(cupti), cfg).unwrap();
    // Graph 6: two nodes, the second depending on the first.
    let node = |i: u64| GraphData { graph: 6, node: (6 << 32) + i, ..Default::default() };
    h.graph_callback(sub::CBID_GRAPH_CREATED, GraphData { graph: 6, ..Default::default() });
    h.graph_callback(sub::CBID_GRAPHNODE_CREATE_STARTING, node(0));
    h.graph_callback(sub::CBID_GRAPHNODE_CREATE_STARTING, node(1));
    h.graph_callback(sub::CBID_GRAPHNODE_DEPENDENCY_CREATED, GraphData { dependency: 6 << 32, ..node(1) });
    std::thread::sleep(Duration::from_millis(100)); // a flush writes them into the first part
    for (bytes, &n) in b.bytes.iter().zip(&b.counts) {
        assert_eq!(h.deliver(bytes, n), Delivery::Written);
    }
    let summary = rec.stop().unwrap();
    assert_eq!(summary.graph_events, 4, "each event counted once in the summary");
    let parts = parts_in(dir.path());
    assert!(parts.len() >= 3, "{parts:?}");
    for p in &parts {
        let (chunks, problems) = Reader::open(p).unwrap().graph_events();
        assert!(problems.is_empty());
        let events: usize = chunks.iter().map(|c| c.events.len()).sum();
        assert_eq!(events, 4, "{p:?}");
        // Each part alone has the graph whole.
        let t = load(std::slice::from_ref(p));
        assert_eq!((t.graphs.graphs.len(), t.graphs.nodes.len(), t.graphs.edges.len()), (1, 2, 1), "{p:?}");
        // No API call made the nodes (the fake makes them outside any): both counted, in each part alone.
        assert_eq!(t.stats.graph_nodes_without_api, 2, "{p:?}");
    }
    let t = load(&parts);
    assert_eq!((t.graphs.graphs.len(), t.graphs.nodes.len(), t.graphs.edges.len()), (1, 2, 1));
    assert_eq!(t.stats.graph_events_lost, 0);
    // Counted once, not once per part that carries them.
    assert_eq!(t.stats.graph_nodes_without_api, 2);
}

/// The streaming reader (`stats --stream`) groups a run's parts as the load does: one process, every kernel and
/// range once, NVTX ranges paired across the boundaries, every kernel joined to its call.
fn streamed_parts_equal_the_loaded_run(parts: &[PathBuf], loaded: &cutr_model::Trace) {
    let opts = cutr_model::stream::StreamOptions::default();
    let (mut kernels, mut ranges, mut apis) = (0usize, 0usize, 0usize);
    let mut names: BTreeMap<String, u64> = BTreeMap::new();
    let mut processes = 0;
    cutr_model::stream::stream(parts, &opts, |t, _, batch| {
        processes = t.processes.len();
        kernels += batch.kernels.len();
        ranges += batch.ranges.len();
        apis += batch.apis.len();
        for k in &batch.kernels {
            *names.entry(t.names.get(k.name).to_string()).or_default() += 1;
        }
    })
    .unwrap();
    let mut loaded_names: BTreeMap<String, u64> = BTreeMap::new();
    for k in &loaded.kernels {
        *loaded_names.entry(loaded.names.get(k.name).to_string()).or_default() += 1;
    }
    assert_eq!(processes, 1);
    assert_eq!((kernels, ranges, apis), (loaded.kernels.len(), loaded.ranges.len(), loaded.apis.len()));
    assert_same(&names, &loaded_names);
}
