//! Any bytes through everything that reads a recording: `cargo fuzz run read_everything fuzz/corpus` (see
//! `docs/BENCHMARKS.md`, "Fuzzing", for how long it has run clean). The same function runs over the corpus, and
//! mutations of it, in `tests/tests/fuzz_corpus.rs` on every test run.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cutr_tests::fuzz::read_everything(data);
});
