//! Hostile clock samples (`clocks` chunks, checksums valid): samples that wrap, that run CLOCK_REALTIME backwards,
//! or whose offset would move records before 1970. None may shrink a duration silently: the span stays the
//! generated one, and `info` and every command that loads the file say what was wrong, with counts.

use cutr_analyses::info;
use cutr_format::{ClockSample, Reader};
use cutr_model::{LoadOptions, load};
use cutr_synth::forge::clocks::{realtime_behind, rewrite_clocks};
use cutr_synth::{SynthOptions, SynthTruth, write_file};

/// A generated recording of ~20,000 records, its bytes and truth.
fn base(dir: &tempfile::TempDir) -> (Vec<u8>, SynthTruth) {
    let path = dir.path().join("base.cutr");
    let truth =
        write_file(&path, SynthOptions { records: 20_000, buffer_bytes: 256 << 10, ..Default::default() }).unwrap();
    (std::fs::read(&path).unwrap(), truth)
}

/// The forged file's trace span, its warnings as the commands print them, and `info`'s warnings.
fn read(dir: &tempfile::TempDir, forged: &[u8]) -> (u64, Vec<String>, Vec<String>) {
    let p = dir.path().join("forged.cutr");
    std::fs::write(&p, forged).unwrap();
    let t = load(std::slice::from_ref(&p), &LoadOptions::default()).unwrap();
    let (a, b) = t.span();
    let info = info::report(&Reader::open(&p).unwrap());
    (b - a, t.processes[0].warnings.clone(), info.warnings)
}

#[test]
fn clock_samples_that_wrap_and_move_records_before_1970_keep_the_span_and_are_warned() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, truth) = base(&dir);
    let span = truth.t_max - truth.t_min;
    assert_eq!(span, 90_295_093, "the generated span (90 ms)");
    // Realtime behind CUPTI's clock by the first record's time plus half the span: the first sample (taken before
    // that) wraps, the last puts every record of the first half before 1970. Read as the samples say, the span
    // was 45 ms (the corpus: 182 ms read as 91).
    let behind = truth.t_min + span / 2;
    let (got, warnings, info_warnings) = read(&dir, &realtime_behind(&bytes, behind));
    assert_eq!(got, span, "the span of the records, not half of it");
    let offset = -(behind as i64);
    let want = [
        "1 of 2 clock samples put CLOCK_REALTIME 292 years or more from CUPTI's clock (the difference wraps); ignored"
            .to_string(),
        format!(
            "the clock samples' offset ({offset} ns) would move records outside the clock's range and shrink their \
             durations; CUPTI's timestamps are used as they are (durations are right, but the file may not line up \
             with other files)"
        ),
    ];
    assert_eq!(warnings, want);
    assert!(want.iter().all(|w| info_warnings.contains(w)), "{info_warnings:?}");
}

#[test]
fn clock_samples_running_realtime_backwards_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, truth) = base(&dir);
    // The last sample's CLOCK_REALTIME 10 s before the first's: realtime runs backwards while CUPTI's advances.
    let first = truth.t_min.min(Reader::from_bytes(bytes.clone()).unwrap().clocks()[0].cupti_ns);
    let forged = rewrite_clocks(&bytes, |s| {
        if s.cupti_ns > first { ClockSample { realtime_ns: first - 10_000_000_000, ..*s } } else { *s }
    });
    let (got, warnings, info_warnings) = read(&dir, &forged);
    assert_eq!(got, truth.t_max - truth.t_min);
    let want = ["1 of 2 clock samples move CLOCK_REALTIME backwards while CUPTI's clock advances".to_string()];
    assert_eq!(warnings, want);
    assert_eq!(info_warnings.iter().filter(|w| want.contains(w)).count(), 1, "{info_warnings:?}");
}

#[test]
fn sound_clock_samples_give_no_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, truth) = base(&dir);
    let (got, warnings, info_warnings) = read(&dir, &bytes);
    assert_eq!((got, warnings, info_warnings), (truth.t_max - truth.t_min, vec![], vec![]));
}
