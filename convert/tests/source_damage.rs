//! `source` and `source --pprof` on damaged and hostile PC samples (issue 28): each says what was damaged,
//! recovered and lost as every command does, and what its samples left out, with exact counts.

mod common;

use std::path::PathBuf;

use common::{fixture, path_str, run, stderr_lines, text};
use cutr_synth::forge::pc_samples;

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn scratch() {
    let file = std::fs::read(fixture("source_workload_pcs.cutr")).unwrap();
    let out = std::path::Path::new("/tmp/a1");
    std::fs::write(out.join("notables.cutr"), pc_samples::without_tables(&file)).unwrap();
    std::fs::write(out.join("other.cutr"), pc_samples::table_on_other_context(&file)).unwrap();
    std::fs::write(out.join("cut.cutr"), pc_samples::tables_cut_to(&file, 10)).unwrap();
    std::fs::write(out.join("contra.cutr"), pc_samples::contradicting_tables(&file)).unwrap();
    std::fs::write(out.join("counts.cutr"), pc_samples::counts_of(&file, 1 << 63)).unwrap();
}
