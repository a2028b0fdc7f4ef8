//! `source` and `source --pprof` on damaged and hostile PC samples (issue 28): each says what was damaged,
//! recovered and lost as every other command does (the same lines), and what its samples left out, with counts;
//! the samples that remain are counted exactly.

mod common;

use std::path::PathBuf;

use common::{fixture, path_str, run, stderr_lines, text};
use cutr_format::container::ChunkType;
use cutr_synth::forge::{chunks_of, pc_samples};

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn pcs_fixture() -> Vec<u8> {
    std::fs::read(fixture("source_workload_pcs.cutr")).unwrap()
}

/// `source`'s first stdout line, the file's path left out.
fn summary(o: &std::process::Output) -> String {
    let out = text(&o.stdout);
    let first = out.lines().next().unwrap_or_default();
    first.split_once(": ").map(|s| s.1.to_string()).unwrap_or_default()
}

/// `source` and `source --pprof` give the same warnings, each line prefixed with the file.
fn source_and_pprof(f: &std::path::Path) -> (std::process::Output, Vec<String>) {
    let o = run(&["source", path_str(f), "--top", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    // The profile goes to a folder of its own: beside a fixture it would land in the source tree.
    let pb_dir = tempfile::tempdir().unwrap();
    let pb = pb_dir.path().join("profile.pb.gz");
    let p = run(&["source", path_str(f), "--pprof", path_str(&pb), "--top", "1"]);
    assert_eq!(p.status.code(), Some(0));
    let mut pprof_lines = stderr_lines(&p);
    let wrote = pprof_lines.pop().unwrap();
    assert!(wrote.starts_with(&format!("cupti-convert: wrote {}", pb.display())), "{wrote}");
    assert_eq!(pprof_lines, stderr_lines(&o), "--pprof warns as source does");
    let lines = stderr_lines(&o);
    let prefix = format!("cupti-convert: warning: {}: ", f.display());
    let lines = lines.iter().map(|l| l.strip_prefix(&prefix).unwrap_or(l).to_string()).collect();
    (o, lines)
}

/// A file cut inside its PC samples says it was recovered, which chunk the cut lost, and that its collection's
/// samples are lost; the samples of the collections before the cut are all counted (the whole file: 861,855).
/// Before issue 28: "0 PC samples in 0 kernels", exit 0, nothing on stderr.
#[test]
fn a_file_cut_inside_its_pc_samples_says_what_it_lost() {
    let dir = tempfile::tempdir().unwrap();
    // The fixture's 124 PCs in two collections of 62; the cut takes the second's chunk, the last before the footer.
    let split = pc_samples::split_collections(&pcs_fixture());
    let last = *chunks_of(&split, ChunkType::PcSamples).last().unwrap();
    let f = write(&dir, "cut.cutr", &split[..last.offset + 100]);
    let (o, lines) = source_and_pprof(&f);
    assert_eq!(
        lines,
        [
            format!(
                "not closed cleanly (no trailer: the writer never closed it): read up to its last complete chunk, {} \
                 bytes lost",
                100
            ),
            format!(
                "file ends inside pc_samples chunk #17 at byte {} ({} bytes missing); that chunk is lost",
                last.offset,
                56 + last.header.stored_len - 100
            ),
            "1 of 3 PC sample collections are in damaged or cut pc_samples chunks: their samples are lost, counted \
             nowhere"
                .to_string(),
        ]
    );
    assert_eq!(
        summary(&o),
        "283,298 PC samples in 3 kernels (283,472 taken by CUPTI, 0 dropped, 174 in kernels it does not report); 2 \
         cubins, 2 with line tables"
    );
    // The JSON carries the same, per input.
    let j = run(&["source", path_str(&f), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    let input = &v["inputs"][0];
    assert_eq!(input["path"], path_str(&f));
    assert_eq!(input["problems"].as_array().unwrap().len(), 1, "{input}");
    assert_eq!(input["warnings"], serde_json::json!([lines[2]]));
    let whole = run(&["source", path_str(&write(&dir, "split.cutr", &split))]);
    assert_eq!(stderr_lines(&whole), Vec::<String>::new());
    assert!(
        summary(&whole).starts_with("861,855 PC samples in 3 kernels (862,029 taken by CUPTI"),
        "{}",
        summary(&whole)
    );
}

/// One flipped byte in a pc_samples chunk's payload: the chunk is skipped as damaged (its checksum), said as
/// `stats` says it, and the other collection's samples are counted.
#[test]
fn a_damaged_pc_samples_chunk_is_said_and_the_rest_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut split = pc_samples::split_collections(&pcs_fixture());
    let last = *chunks_of(&split, ChunkType::PcSamples).last().unwrap();
    split[last.offset + 56 + 10] ^= 0x40;
    let f = write(&dir, "flipped.cutr", &split);
    let (o, lines) = source_and_pprof(&f);
    let stats = run(&["stats", path_str(&f)]);
    let prefix = format!("cupti-convert: warning: {}: ", f.display());
    assert_eq!(stderr_lines(&stats)[0], format!("{prefix}{}", lines[0]), "said as stats says it");
    assert_eq!(
        lines,
        [
            format!("pc_samples chunk #17 at byte {} is damaged (payload checksum mismatch); skipped", last.offset),
            "1 of 3 PC sample collections are in damaged or cut pc_samples chunks: their samples are lost, counted \
             nowhere"
                .to_string(),
        ]
    );
    assert_eq!(
        summary(&o),
        "283,298 PC samples in 3 kernels (283,472 taken by CUPTI, 0 dropped, 174 in kernels it does not report); 2 \
         cubins, 2 with line tables"
    );
}

/// Samples without their stall-reason table (a `--ring` dump of the recorder before issue 28 that evicted the
/// context's first collection) are left out and said, not named `reason_N` and counted twice (1,356,110 where
/// CUPTI took 862,029).
#[test]
fn samples_without_their_table_are_left_out_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(&dir, "no_tables.cutr", &pc_samples::without_tables(&pcs_fixture()));
    let (o, lines) = source_and_pprof(&f);
    assert_eq!(
        lines,
        ["1356110 PC samples (124 PCs in 1 collections) have no stall-reason table (an older recorder wrote it in \
             a context's first collection only, which a --ring dump can leave out; without it reasons have no names \
             and their *_not_issued duplicates cannot be told apart): left out"]
    );
    assert_eq!(
        summary(&o),
        "0 PC samples in 0 kernels (862,029 taken by CUPTI, 0 dropped, 174 in kernels it does not report); 2 \
         cubins, 2 with line tables"
    );
    let other = write(&dir, "other.cutr", &pc_samples::table_on_other_context(&pcs_fixture()));
    let (_, lines) = source_and_pprof(&other);
    assert_eq!(
        lines,
        ["1356110 PC samples (124 PCs in 1 collections) have no stall-reason table for their context, only \
             other contexts do (reason indices are per context): left out"]
    );
}

/// A table shorter than its samples' indices, and two tables of one context that disagree: the samples they
/// cannot name are left out and counted; those they can are counted once.
#[test]
fn indices_out_of_range_and_contradicting_tables_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(&dir, "short.cutr", &pc_samples::tables_cut_to(&pcs_fixture(), 10));
    let (o, lines) = source_and_pprof(&f);
    assert_eq!(
        lines,
        ["1126498 PC samples (100 PCs in 1 collections) name stall-reason indices their table does not list: left out"]
    );
    assert!(summary(&o).starts_with("190,243 PC samples in 3 kernels (862,029 taken by CUPTI"), "{}", summary(&o));
    let f = write(&dir, "contradicting.cutr", &pc_samples::contradicting_tables(&pcs_fixture()));
    let (o, lines) = source_and_pprof(&f);
    assert_eq!(
        lines,
        [
            "1 stall-reason tables contradict another table of their context or list an index twice; each \
             collection's samples are named by its own table",
            "1356110 PC samples (124 PCs in 1 collections) name stall-reason indices their context's tables \
             disagree on: left out",
        ]
    );
    assert!(summary(&o).starts_with("0 PC samples in 0 kernels"), "{}", summary(&o));
}

/// CUPTI's counts forged: below the samples named, a problem said; at 2^63 in each of two collections, the sums
/// saturate at 2^64-1 instead of wrapping to 0, so the dropped samples are still said.
#[test]
fn counts_below_the_samples_or_overflowing_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(&dir, "low.cutr", &pc_samples::counts_of(&pcs_fixture(), 1000));
    let (_, lines) = source_and_pprof(&f);
    assert_eq!(
        lines,
        [
            "1 PC sample collections hold more samples (861855) than CUPTI took in them (1000): their PC records \
             are damaged",
            "PC samples lost: 2,000 dropped by the hardware, 0 collections with the hardware buffer full (a longer \
             --pc-period samples less)",
        ]
    );
    let f = write(&dir, "wrap.cutr", &pc_samples::counts_of(&pcs_fixture(), 1 << 63));
    let (o, lines) = source_and_pprof(&f);
    assert_eq!(
        lines,
        [
            "PC samples lost: 18,446,744,073,709,551,615 dropped by the hardware, 0 collections with the hardware buffer \
             full (a longer --pc-period samples less)"
        ]
    );
    assert_eq!(
        summary(&o),
        "861,855 PC samples in 3 kernels (18,446,744,073,709,551,615 taken by CUPTI, 18,446,744,073,709,551,615 \
         dropped, 18,446,744,073,709,551,615 in kernels it does not report); 2 cubins, 2 with line tables"
    );
}

/// Real `--ring` dumps made on an H100 (`bench/gpu/pc_sampling_ring_stall_tables.sh`, source_workload for ~3.5 s,
/// `--ring 2s`): by the recorder that wrote a context's stall-reason table in its first collection only, which the
/// ring evicted (the old `source` named every reason `reason_N`: `reason_14 99%` on chase's hot line), and by the
/// recorder that writes it in every collection. The first's samples are left out and said; the second's are named.
#[test]
fn real_ring_dumps_with_and_without_their_stall_reason_tables() {
    let old = fixture("pc_ring/table_first_only.cutr");
    let (o, lines) = source_and_pprof(&old);
    assert_eq!(
        lines,
        [
            "recording lost data: pc_collections_buffer_full = 1".to_string(),
            "12290950 PC samples (147 PCs in 1 collections) have no stall-reason table (an older recorder wrote it in \
             a context's first collection only, which a --ring dump can leave out; without it reasons have no names \
             and their *_not_issued duplicates cannot be told apart): left out"
                .to_string(),
            "PC samples lost: 0 dropped by the hardware, 1 collection with the hardware buffer full (a longer \
             --pc-period samples less)"
                .to_string(),
        ]
    );
    assert_eq!(
        summary(&o),
        "0 PC samples in 0 kernels (12,293,510 taken by CUPTI, 0 dropped, 2,560 in kernels it does not report); 2 \
         cubins, 2 with line tables"
    );
    assert!(!text(&o.stdout).contains("reason_"), "no reason is named by its index");

    let new = fixture("pc_ring/table_every_collection.cutr");
    let (o, lines) = source_and_pprof(&new);
    assert_eq!(lines.len(), 2, "{lines:?}: the recording's losses only");
    assert_eq!(
        summary(&o),
        "12,639,401 PC samples in 3 kernels (12,641,885 taken by CUPTI, 0 dropped, 2,484 in kernels it does not \
         report); 2 cubins, 2 with line tables"
    );
    let out = text(&o.stdout);
    assert!(
        out.contains(
            "chase(unsigned int const*, unsigned int, int, unsigned int*) (52.9% of samples, 6,687,081 samples)"
        ),
        "{out}"
    );
    assert!(out.contains("  stalls: long_scoreboard 99%, wait 1%"), "{out}");
}
