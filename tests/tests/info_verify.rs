//! `info`, the integrity check a user reaches for, reports every side chunk that does not parse, as the commands
//! that read it do: a cubin, PC-sample, counters, graphs or threads chunk whose checksum holds over a payload that
//! is not its flatbuffer (each forged in place, so the file still reads as closed cleanly).

use std::path::{Path, PathBuf};

use cutr_analyses::info;
use cutr_format::Reader;
use cutr_format::container::ChunkType;
use cutr_model::{LoadOptions, load};
use cutr_synth::SynthOptions;
use cutr_synth::forge::chunks_of;
use cutr_synth::forge::counters::{garble_in_place, metric_flood, write_with_counters};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(cutr_tests::repo().join("fixtures").join(name)).unwrap()
}

/// A small generated recording with one counters chunk.
fn with_counters(dir: &Path) -> Vec<u8> {
    let p = dir.join("counters.cutr");
    let opts = SynthOptions { records: 2_000, buffer_bytes: 64 << 10, ..Default::default() };
    write_with_counters(&p, opts, |t| vec![metric_flood((t.t_min, t.t_max), 2, 50, 0, |_, i| i as f64)]).unwrap();
    std::fs::read(&p).unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn info_reports_each_side_chunk_that_does_not_parse_as_the_commands_do() {
    let dir = tempfile::tempdir().unwrap();
    let pcs = fixture("source_workload_pcs.cutr");
    let graphs = fixture("graph_workload.cutr");
    let counters = with_counters(dir.path());
    // (file, chunk type, whether `stats` reads that type: cubins only `source` does).
    let cases = [
        (&pcs, ChunkType::Blob, false),
        (&pcs, ChunkType::PcSamples, true),
        (&pcs, ChunkType::Threads, true),
        (&graphs, ChunkType::Graphs, true),
        (&counters, ChunkType::Counters, true),
    ];
    for (bytes, chunk_type, stats_reads) in cases {
        let name = chunk_type.name();
        let c = chunks_of(bytes, chunk_type)[0];
        let p = write(dir.path(), &format!("{name}.cutr"), &garble_in_place(bytes, &c, 0xff));
        let r = Reader::open(&p).unwrap();
        assert!(r.recovery().is_none(), "{name}: the footer still matches");
        let report = info::report(&r);
        let prefix = format!("{name} chunk #{} at byte {} is damaged (", c.header.seq, c.offset);
        let found: Vec<&String> = report.problems.iter().filter(|p| p.starts_with(&prefix)).collect();
        assert_eq!(found.len(), 1, "{name}: {:?}", report.problems);
        assert!(found[0].ends_with("); skipped"), "{}", found[0]);
        assert_eq!(report.problems.len(), 1, "{name}: only that chunk: {:?}", report.problems);
        if stats_reads {
            let t = load(&[p], &LoadOptions::default()).unwrap();
            let loaded: Vec<String> = t.processes[0].problems.iter().map(|p| p.to_string()).collect();
            assert_eq!(loaded, report.problems, "{name}: info and the commands say the same");
        }
    }
}

#[test]
fn info_says_which_side_chunks_it_parsed() {
    let report = info::report(&Reader::from_bytes(fixture("source_workload_pcs.cutr")).unwrap());
    let parsed: Vec<(&str, u64)> = report.side_chunks_parsed.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(parsed, [("blob", 2), ("metadata", 2), ("pc_samples", 2)]);
    assert_eq!((report.problems.len(), report.warnings.len()), (0, 0));
    let text = info::render_text(&report);
    assert!(
        text.contains(
            "checked       every chunk's checksum, every activity chunk's records; side chunks parsed: blob 2, \
             metadata 2, pc_samples 2\n"
        ),
        "{text}"
    );
}

#[test]
fn info_counts_the_samples_its_side_chunks_hold() {
    let count = |name: &str| {
        let report = info::report(&Reader::from_bytes(fixture(name)).unwrap());
        (report.pc_samples, report.counter_samples, info::render_text(&report))
    };
    // `source` reports the same 24,231,584 and 861,855 samples. The second fixture was recorded before every
    // collection carried its stall-reason table: its later collections are named by their context's first, and
    // the `*_not_issued` twins that table names are left out (summed with them the stall counts are 1,356,110).
    let (pcs, counters, text) = count("calls_workload_pcs.cutr");
    assert_eq!((pcs, counters), (24_231_584, 0));
    assert!(text.contains("samples       24,231,584 PC samples, 0 counter samples\n"), "{text}");
    assert_eq!(count("source_workload_pcs.cutr").0, 861_855);
    let reader = Reader::from_bytes(fixture("source_workload_pcs.cutr")).unwrap();
    let with_twins: u64 = reader
        .chunks()
        .iter()
        .filter(|c| c.chunk_type() == ChunkType::PcSamples)
        .map(|c| cutr_format::PcSamples::from_bytes(&reader.payload(c).unwrap()).unwrap())
        .map(|p| p.samples_by_reason().values().sum::<u64>())
        .sum();
    assert_eq!(with_twins, 1_356_110);
    // Counter samples: one per source, device and time, as the recorder's summary line counts them.
    let (pcs, counters, _) = count("counter_workload.cutr");
    assert_eq!((pcs, counters), (0, 26_103));
    assert_eq!(count("counter_two_gpus.cutr").1, 9_575);
    assert!(!count("pytorch_loop.cutr").2.contains("samples  "), "no samples line without samples");
}
