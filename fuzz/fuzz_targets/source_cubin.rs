//! Any bytes as a cubin: parsed into a source map (every function, and only some), then every kind of lookup
//! `source` makes. An error or a map, never a panic, a hang or memory beyond what the cubin's size allows. Seeded
//! with `fixtures/cubins/*.cubin` (see `docs/BENCHMARKS.md`, "Fuzzing"):
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run source_cubin -s none corpus/source_cubin`.
#![no_main]

use cutr_source::SourceMap;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(m) = SourceMap::from_cubin(data) {
        let _ = (m.line_tables(), m.has_lines(), m.problems().len());
        for f in m.functions().iter().take(64) {
            let _ = m.function(&f.name);
            // Every instruction of the first 4 KiB, the last byte and one past the end.
            for pc in (0..f.size.min(4096)).step_by(16) {
                let _ = m.locate(&f.name, pc);
                if let Some(k) = m.line_key(&f.name, pc) {
                    let _ = m.file_of(k);
                }
            }
            let _ = m.locate(&f.name, f.size.saturating_sub(1));
            let _ = m.locate(&f.name, f.size);
        }
        let _ = m.locate("", 0);
    }
    // What `source` builds: only the functions its samples name.
    if let Ok(m) = SourceMap::from_cubin_for(data, &|name| name.len() % 2 == 0) {
        for f in m.functions().iter().take(16) {
            let _ = m.locate(&f.name, 0);
        }
    }
});
