//! Unified memory as a user meets it: `generate --unified-memory`, then `info`, `stats --report um,memory` (text and
//! CSV) with the figures the generator knows; a file of hostile UM records warns with counts and never panics.

use std::path::Path;
use std::process::{Command, Output};

use cutr_synth::SynthOptions;
use cutr_synth::um::{self as u, UmRecord};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cupti-convert")).args(args).output().expect("cupti-convert runs")
}

fn ok(o: &Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn generate(dir: &Path) -> String {
    let f = dir.join("um.cutr").display().to_string();
    ok(&run(&["generate", "-o", &f, "--records", "3000", "--unified-memory"]));
    f
}

#[test]
fn stats_um_and_info_show_the_generated_figures() {
    let dir = tempfile::tempdir().unwrap();
    let f = generate(dir.path());
    let info = ok(&run(&["info", &f]));
    assert!(info.contains("\nmappings      2 executable (host code of CPU page faults)\n"), "{info}");
    assert!(info.contains("\n  UNIFIED_MEMORY_COUNTER               114\n"), "{info}");
    let text = ok(&run(&["stats", &f, "--report", "um,memory"]));
    // 6 episodes: 4 HtoD, 2 DtoH and 1 DtoD chunk of 2 MiB each.
    for want in [
        "Unified memory: 114 events, 36 CPU page faults",
        "     24 50,331,648 ",
        "     12 25,165,824 ",
        "      6 12,582,912    120,000  20,000.0 104.86 DtoD",
        "        6           18 atomic GPU 0",
        "        6 393,216 0x7e0000000000 GPU 0, GPU 1",
        "      6    120,000 GPU 0",
        "      18       <file not readable here> /usr/bin/python3.12",
        "          18           36         18 37,748,736    12 um_touch(float*, unsigned long)",
        "   654,311,424 ",
        "33,554,432 Device at 0x7d0000000000",
        "8,388,608 Managed at 0x7e0000000000",
        "     24 write",
        "     12 read",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
    let csv = ok(&run(&["stats", &f, "--report", "um", "--csv"]));
    assert!(csv.contains("\num_migration,DtoD,6,120000,,,,,,,12582912,,,,\n"), "{csv}");
    assert!(csv.contains("\num_fault_groups,GPU 0 | atomic,18,,,,,,,,,,,,\n"), "{csv}");
    assert!(csv.contains("\num_kernel_faults,\"um_touch(float*, unsigned long)\",18,,,,,,,,,,,,\n"), "{csv}");
    let json: serde_json::Value = serde_json::from_str(&ok(&run(&["stats", &f, "--json"]))).unwrap();
    assert_eq!(json["um"]["events"], 114);
    assert_eq!(json["memory_peaks"][0]["peak_bytes"], 654_311_424u64);
    assert_eq!(json["memory_peaks"][1]["memory"], "managed");
}

#[test]
fn hostile_um_records_warn_with_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.cutr");
    let table = cutr_schema::layouts::builtin(130001).unwrap();
    let t0 = cutr_synth::T0 + 5_000_000_000;
    let rec = |kind, value, start, end| UmRecord { kind, value, start, end, src: u::CPU, ..Default::default() };
    let mut buffer = Vec::new();
    for r in [
        rec(0, 1, t0, t0),
        rec(99, 1, t0, t0),
        rec(u::BYTES_DTOH, u64::MAX, t0, t0 + 5),
        rec(u::BYTES_DTOH, u64::MAX, t0, t0 + 5),
        rec(u::BYTES_HTOD, 1, t0 + 9, t0),
        rec(u::GPU_PAGE_FAULT, 1, 0, 0),
    ] {
        buffer.extend(u::um_record_bytes(&table, &r));
    }
    let writer = cutr_format::Writer::create(&path, Default::default()).unwrap();
    cutr_synth::write_to_with(writer, SynthOptions { records: 1_000, ..Default::default() }, |w, _| {
        w.append_encoded(cutr_format::ActivityEncoder::new(&table, 3).encode(&buffer)).map(|_| ())
    })
    .unwrap();
    let f = path.display().to_string();
    let o = run(&["stats", &f, "--report", "um,loss"]);
    let text = ok(&o);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("2 unified memory records have an unknown counter kind; left out"), "{e}");
    assert!(e.contains("1 records end before they start; left out"), "{e}");
    assert!(e.contains("1 records have no timestamps"), "{e}");
    assert!(text.contains("      2 18,446,744,073,709,551,615         10      5.0 1844674407370955264.00 DtoH"));
    assert!(text.contains("3 UM totals reached 2^64-1 and stopped there"), "{text}");
    assert!(text.contains("Loss: records without timestamps 1, unified memory records of unknown counter kind 2"));
}
