//! Recordings whose cubins are lost, damaged, refused or recorded twice: `source` says which, per kernel and in its
//! warnings, and never advises rebuilding with `-lineinfo` for a cubin that had line tables. The samples are
//! counted whatever happened to the cubin.

use std::path::{Path, PathBuf};

use cutr_analyses::source::{KernelLines, SourceReport, render_text, report};
use cutr_format::Reader;
use cutr_synth::forge::cubins::{self, Sample, flip_blob_header_bit};

const CHASE: &str = "_Z5chasePKjjiPj";
const CRC: u64 = 0x75b6_2bf0;

fn fixture_cubin() -> Vec<u8> {
    std::fs::read(cutr_tests::repo().join("fixtures/cubins/source_workload.sm_90.cubin")).unwrap()
}

/// 950 samples on the pointer chase's dependent load (line 43) and 50 on its first instruction (line 40).
fn samples() -> Vec<Sample> {
    let at = |pc, samples| Sample { crc: CRC, function: CHASE.into(), pc, samples };
    vec![at(0x330, 950), at(0, 50)]
}

fn write(dir: &Path, name: &str, cubins: &[(u64, &[u8])]) -> PathBuf {
    let p = dir.join(name);
    cubins::recording(&p, cubins, &samples());
    p
}

fn source(path: &Path) -> SourceReport {
    let r = Reader::open(path).unwrap();
    report(&[&r], &Default::default())
}

/// The report's warnings about cubins (other damage has its own words).
fn cubin_warnings(r: &SourceReport) -> Vec<String> {
    r.warnings.iter().filter(|w| w.contains("cubin")).cloned().collect()
}

/// The kernel's state, its samples, its top line and what the text says instead of lines.
fn kernel(r: &SourceReport) -> (KernelLines, u64, Option<(String, u32)>, Option<String>) {
    let k = &r.kernels[0];
    let text = render_text(r);
    let note = text.lines().find(|l| l.trim_start().starts_with("(its cubin")).map(|l| l.trim().to_string());
    (k.line_tables, k.samples, k.lines.first().map(|l| (l.file.clone(), l.line)), note)
}

#[test]
fn the_undamaged_recording_has_its_lines() {
    let dir = tempfile::tempdir().unwrap();
    let r = source(&write(dir.path(), "good.cutr", &[(CRC, &fixture_cubin()[..])]));
    assert_eq!(kernel(&r), (KernelLines::Present, 1_000, Some(("source_workload.cu".into(), 43)), None));
    assert_eq!(cubin_warnings(&r), [] as [String; 0]);
    assert_eq!((r.cubins, r.cubins_with_lines), (1, 1));
    let json = serde_json::to_value(&r.kernels[0]).unwrap();
    assert_eq!(json["line_tables"], "present");
}

/// One flipped bit in the blob chunk's header: the cubin is lost, and said to be, never "build with -lineinfo".
#[test]
fn a_flipped_bit_in_the_blob_header_loses_the_cubin_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.cutr", &[(CRC, &fixture_cubin()[..])]);
    let mut bytes = std::fs::read(&good).unwrap();
    flip_blob_header_bit(&mut bytes, 0);
    let bad = dir.path().join("flipped.cutr");
    std::fs::write(&bad, &bytes).unwrap();
    let r = source(&bad);
    let lost = "(its cubin was lost: the recording holds no readable copy (see the warnings); offsets below)";
    assert_eq!(kernel(&r), (KernelLines::CubinLost, 1_000, None, Some(lost.into())));
    assert!(!render_text(&r).contains("-lineinfo"));
    assert_eq!(serde_json::to_value(&r.kernels[0]).unwrap()["line_tables"], "cubin_lost");
    assert_eq!((r.cubins, r.cubins_with_lines), (0, 0));
}

#[test]
fn a_cubin_built_without_lineinfo_is_told_to_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let functions = [cubins::Function { name: CHASE.into(), size: 1920 }];
    let r = source(&write(dir.path(), "nolines.cutr", &[(CRC, &cubins::elf(&functions, None, b"")[..])]));
    let rebuild = "(its cubin has no line tables: build with -lineinfo for lines; offsets below)";
    assert_eq!(kernel(&r), (KernelLines::Absent, 1_000, None, Some(rebuild.into())));
    assert_eq!(cubin_warnings(&r), [] as [String; 0]);
}

/// `.debug_line`'s section header points past the cubin's end: damaged, with the bytes, not absent.
#[test]
fn line_tables_outside_the_cubin_are_damaged_not_absent() {
    let dir = tempfile::tempdir().unwrap();
    let cubin = cubins::section_outside(&fixture_cubin(), ".debug_line");
    let r = source(&write(dir.path(), "outside.cutr", &[(CRC, &cubin[..])]));
    let damaged = "(its cubin's line tables are damaged (see the warnings); offsets below)";
    assert_eq!(kernel(&r), (KernelLines::Damaged, 1_000, None, Some(damaged.into())));
    assert_eq!(
        cubin_warnings(&r),
        ["cubin 0x75b62bf0: its line tables are damaged: the .debug_line section header points outside the cubin \
          (bytes 16544..16824 of 12448)"]
    );
}

#[test]
fn bytes_that_are_no_cubin_are_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let r = source(&write(dir.path(), "junk.cutr", &[(CRC, &b"not an elf"[..])]));
    let unreadable = "(its cubin could not be read (see the warnings); offsets below)";
    assert_eq!(kernel(&r), (KernelLines::CubinUnreadable, 1_000, None, Some(unreadable.into())));
    assert_eq!(cubin_warnings(&r), ["cubin 0x75b62bf0: not an ELF cubin: Could not read file magic"]);
}

/// A cubin of 33 MiB (the fixture padded with noise, so that it passes the 1024x ratio every chunk is held to: a
/// valid ELF) is over the 32 MiB limit: refused before it is inflated, by its claimed size; its kernel's cubin is
/// lost.
#[test]
fn a_cubin_over_the_limit_is_refused_with_its_size() {
    assert_eq!(cutr_format::limits::MAX_CUBIN_BYTES, 32 << 20);
    let dir = tempfile::tempdir().unwrap();
    let mut big = fixture_cubin();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    big.resize_with(33 << 20, || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    });
    let p = write(dir.path(), "big.cutr", &[(CRC, &big[..])]);
    let blob = cutr_synth::forge::chunks_of(&std::fs::read(&p).unwrap(), cutr_format::ChunkType::Blob)[0];
    let r = source(&p);
    assert_eq!(kernel(&r).0, KernelLines::CubinLost);
    assert_eq!(
        cubin_warnings(&r),
        [format!(
            "a cubin could not be read: blob chunk #0 at byte {} is damaged (implausible header: a cubin of {} \
             bytes claimed, over the 33554432 bytes (32 MiB) a cubin may have (CUTR_MAX_CUBIN_MB raises the \
             limit)); skipped",
            blob.offset, blob.header.raw_len
        )]
    );
    assert!(blob.header.raw_len > 33 << 20);
}

/// Two cubins under one CRC: the one that parses is used, wherever it is, and the conflict is said.
#[test]
fn two_cubins_under_one_crc_are_warned_of_and_the_one_that_parses_wins() {
    let dir = tempfile::tempdir().unwrap();
    let junk = b"not an elf".to_vec();
    let r = source(&write(dir.path(), "junk_first.cutr", &[(CRC, &junk[..]), (CRC, &fixture_cubin()[..])]));
    assert_eq!(kernel(&r), (KernelLines::Present, 1_000, Some(("source_workload.cu".into(), 43)), None));
    assert_eq!(
        cubin_warnings(&r),
        ["cubin 0x75b62bf0 is recorded 2 times with different bytes: chunk #0 (10 bytes, does not parse: not an ELF \
          cubin: Could not read file magic), chunk #1 (12448 bytes, parses); chunk #1's is used, the only one that parses"]
    );
    // Both parse: the first is used (the inline fixture has no `chase`: its kernel then has no line).
    let inline = std::fs::read(cutr_tests::repo().join("fixtures/cubins/inline.sm_90.cubin")).unwrap();
    let r = source(&write(dir.path(), "both.cutr", &[(CRC, &fixture_cubin()[..]), (CRC, &inline[..])]));
    assert_eq!(kernel(&r).2, Some(("source_workload.cu".into(), 43)));
    assert_eq!(
        cubin_warnings(&r),
        ["cubin 0x75b62bf0 is recorded 2 times with different bytes: chunk #0 (12448 bytes, parses), chunk #1 (4528 \
          bytes, parses); chunk #0's is used, the first that parses"]
    );
    // The same bytes twice (a cubin every process loads): no warning.
    let r = source(&write(dir.path(), "twice.cutr", &[(CRC, &fixture_cubin()[..]), (CRC, &fixture_cubin()[..])]));
    assert_eq!(cubin_warnings(&r), [] as [String; 0]);
    assert_eq!(r.cubins, 1);
}

/// The hostile classes of the source map, through a whole recording: the relocation class finds its function's
/// line, the deep chain its 64 levels.
#[test]
fn hostile_line_tables_in_a_recording_give_the_figures_of_their_rows() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("relocations.cutr");
    let sample = |function: &str, pc| Sample { crc: 7, function: function.into(), pc, samples: 10 };
    cubins::recording(&p, &[(7, &cubins::many_relocations(20_000)[..])], &[sample("f19999", 0)]);
    let r = source(&p);
    let l = &r.kernels[0].lines[0];
    assert_eq!((l.file.as_str(), l.line, l.samples), ("k.cu", 20_000, 10));
    let p = dir.path().join("deep.cutr");
    cubins::recording(&p, &[(7, &cubins::deep_inline(1_000)[..])], &[sample("deep", 16 * 1_000)]);
    let r = source(&p);
    let l = &r.kernels[0].lines[0];
    assert_eq!((l.line, l.inlined_at.len()), (1_001, 64));
    assert_eq!(
        cubin_warnings(&r),
        [
            "cubin 0x7: its line tables are damaged: 937 rows are inlined more than 64 levels deep: their chains are cut \
          at 64"
        ]
    );
}
