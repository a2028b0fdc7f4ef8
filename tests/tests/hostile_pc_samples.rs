//! Hostile PC samples (issue 28) through the model and the analyses: every command names samples by the same
//! stall-reason tables (`cutr_model::pc_reasons`), so `source`, `--pprof` and the stall-rate tracks count the same
//! samples and the load warns about the ones left out; stall-rate tracks cost what they draw. The command lines'
//! own output is `convert/tests/source_damage.rs`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cutr_format::Reader;
use cutr_model::{LoadOptions, Trace, load};
use cutr_synth::forge::pc_samples::{self, ManyFunctions, Tables};

fn fixture() -> Vec<u8> {
    std::fs::read(cutr_tests::repo().join("fixtures/source_workload_pcs.cutr")).unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Samples per stall-rate series (its integral over time), by reason.
fn drawn(t: &Trace) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for w in t.counters.windows(2).filter(|w| w[0].series == w[1].series) {
        let name = t.names.get(w[0].series).trim_start_matches("PC samples/ms: ").to_string();
        *out.entry(name).or_default() += w[0].value * (w[1].ts - w[0].ts) as f64 / 1e6;
    }
    out
}

fn source(p: &Path) -> cutr_analyses::source::SourceReport {
    let r = Reader::open(p).unwrap();
    cutr_analyses::source::report(&[&r], &Default::default())
}

/// Indices a cut table does not list: `source`, `--pprof` and the stall-rate tracks all count the 190,243
/// samples the table names and leave out the same 1,126,498, which the load warns about; no series is named
/// `reason N`.
#[test]
fn every_output_counts_the_samples_the_table_names_and_warns_of_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "short.cutr", &pc_samples::tables_cut_to(&fixture(), 10));
    let want = "1126498 PC samples (100 PCs in 1 collections) name stall-reason indices their table does not list: \
                left out";
    let t = load(std::slice::from_ref(&p), &LoadOptions::default()).unwrap();
    assert_eq!(t.processes[0].warnings, [want]);
    let series = drawn(&t);
    assert!(series.keys().all(|k| !k.starts_with("reason")), "{series:?}");
    assert_eq!(series.values().sum::<f64>().round() as u64, 190_243);
    assert_eq!(t.stats.pc_samples_unplaced, 0);
    let r = source(&p);
    assert_eq!((r.samples, r.cupti_total_samples), (190_243, 862_029));
    assert_eq!(r.inputs[0].warnings(), [want]);
    let reader = Reader::open(&p).unwrap();
    let (_, summary, warnings) = cutr_analyses::source::pprof(&[&reader]);
    assert_eq!((summary.samples, warnings), (190_243, vec![want.to_string()]));
}

/// Without any table, nothing is drawn or counted, never twice: the samples are left out and said once.
#[test]
fn samples_without_tables_are_drawn_nowhere_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "bare.cutr", &pc_samples::without_tables(&fixture()));
    let t = load(std::slice::from_ref(&p), &LoadOptions::default()).unwrap();
    assert_eq!(t.counters.len(), 0);
    assert_eq!(t.processes[0].warnings.len(), 1);
    assert!(t.processes[0].warnings[0].starts_with("1356110 PC samples (124 PCs in 1 collections) have no"));
    let r = source(&p);
    assert_eq!((r.samples, r.kernels.len()), (0, 0));
    assert_eq!(r.inputs[0].reasons.no_table.samples, 1_356_110);
}

/// A flight recorder evicts the oldest collections. With the table in every collection (the recorder since issue
/// 28), a dump without the context's first collection still names every sample: 861,855, as the whole file; with
/// the table only in the first (before), the same dump names none.
#[test]
fn a_dump_that_evicted_the_first_collection_names_every_sample_when_each_has_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let split = pc_samples::split_collections(&fixture());
    let with_tables = pc_samples::edit_collections(&split, |cs| {
        let table = cs[0].stall_reasons.clone();
        assert!(cs[0].pcs.is_empty() && !table.is_empty(), "the fixture's first collection is its table alone");
        cs.iter_mut().for_each(|c| c.stall_reasons = table.clone());
    });
    // Evicted: the first collection emptied of everything (its chunk stays, so no sequence number is missing).
    let evict = |cs: &mut Vec<cutr_format::PcSamples>| cs[0] = Default::default();
    let kept = write(dir.path(), "kept.cutr", &pc_samples::edit_collections(&with_tables, evict));
    let lost = write(dir.path(), "lost.cutr", &pc_samples::edit_collections(&split, evict));
    let r = source(&kept);
    assert_eq!(r.samples, 861_855);
    assert_eq!(r.inputs[0].warnings(), Vec::<String>::new());
    let t = load(std::slice::from_ref(&kept), &LoadOptions::default()).unwrap();
    assert_eq!(drawn(&t).values().sum::<f64>().round() as u64, 861_855);
    let r = source(&lost);
    assert_eq!((r.samples, r.inputs[0].reasons.no_table.samples), (0, 1_356_110));
}

/// Many functions' samples in many collections of few PCs each: the stall-rate tracks have a point only at the
/// starts and ends of the sampled functions' own runs, never one per series per run of another function. Each
/// series' points: at most two per run of the functions with samples of it.
#[test]
fn stall_rate_points_are_bounded_by_the_sampled_functions_runs() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("many.cutr");
    let shape = ManyFunctions {
        records: 20_000,
        functions: 500,
        collections: 400,
        pcs_per_collection: 3,
        reasons: 40,
        reasons_per_pc: 4,
        tables: Tables::Every,
    };
    pc_samples::write_many_functions(&p, shape).unwrap();
    let t = load(std::slice::from_ref(&p), &LoadOptions::default()).unwrap();
    assert_eq!(t.processes[0].warnings, Vec::<String>::new());
    // Per series: the functions with samples of it, and their runs.
    let r = source(&p);
    let runs: BTreeMap<&str, u64> = t.kernels.iter().fold(BTreeMap::new(), |mut m, k| {
        *m.entry(t.names.get(k.name)).or_default() += 1;
        m
    });
    let mut bound: BTreeMap<String, u64> = BTreeMap::new();
    for k in &r.kernels {
        for (reason, _) in &k.stalls {
            *bound.entry(format!("PC samples/ms: {reason}")).or_default() +=
                2 * runs.get(k.mangled.as_str()).unwrap_or(&0);
        }
    }
    let mut points: BTreeMap<String, u64> = BTreeMap::new();
    for c in &t.counters {
        *points.entry(t.names.get(c.series).to_string()).or_default() += 1;
    }
    assert_eq!(points.len(), 40, "one series per reason of the table");
    for (series, n) in &points {
        assert!(*n <= bound[series], "{series}: {n} points, {} starts and ends", bound[series]);
    }
    assert_eq!(t.counters.len(), 43_424);
    // The samples of functions no kernel record runs (each PC 1 + 2 + 3 + 4 samples) are counted, not drawn.
    let reader = Reader::open(&p).unwrap();
    let no_run: u64 = reader
        .pc_samples()
        .0
        .iter()
        .flat_map(|c| &c.pcs)
        .filter(|pc| !runs.contains_key(pc.function_name.as_str()))
        .map(|_| 10)
        .sum();
    assert_eq!((t.stats.pc_samples_unplaced, no_run), (11_670, 11_670));
}
