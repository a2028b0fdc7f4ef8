//! `stats --report um,memory` on the unified memory fixture recorded on an H100 (`fixtures/um_workload.cutr`,
//! `workloads/cuda/um_workload.cu` with 32 MiB buffers) against what the program printed
//! (`fixtures/um_workload.json`), and its CPU faults' host functions against binutils' `addr2line` on the program
//! itself (`fixtures/bin/um_workload`, the build the recording's mapping names by build id).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use cutr_analyses::stats::{self, Section, StatsOptions};
use cutr_model::um_host::{HostLocation, fault_location};
use cutr_model::{LoadOptions, Trace, load};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn trace() -> Trace {
    load(&[fixtures().join("um_workload.cutr")], &LoadOptions::default()).unwrap()
}

fn program() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("um_workload.json")).unwrap()).unwrap()
}

fn um_stats(t: &Trace, symbol_dirs: Vec<PathBuf>) -> stats::Stats {
    let opts = StatsOptions { sections: vec![Section::Um, Section::Memory], symbol_dirs, ..Default::default() };
    stats::compute(t, &opts)
}

#[test]
fn um_totals_are_what_the_program_moved() {
    let (t, p) = (trace(), program());
    let buffers = p["buffers"].as_array().unwrap();
    let field = |name: &str, f: &str| buffers.iter().find(|b| b["name"] == name).unwrap()[f].as_u64().unwrap();
    let s = um_stats(&t, Vec::new());
    let r = &s.um;
    let m: BTreeMap<&str, (u64, u64)> = r.migrations.iter().map(|m| (m.direction, (m.count, m.bytes))).collect();
    // Every byte a kernel touched went to the GPU once; only the two buffers the host read back came back.
    let touched: u64 = buffers.iter().map(|b| b["gpu_bytes"].as_u64().unwrap()).sum();
    assert_eq!(m["HtoD"], (3_567, touched));
    assert_eq!(m["DtoH"], (208, field("touch", "bytes") + field("prefetch", "bytes")));
    assert_eq!(touched, 134_217_728);
    assert!(!m.contains_key("DtoD"), "one GPU");
    // cudaMemPrefetchAsync both ways for the prefetched buffer: 16 'user' migrations of 2 MiB each way.
    let causes: BTreeMap<(&str, &str), (u64, u64)> =
        r.causes.iter().map(|c| ((c.kind, c.cause), (c.count, c.bytes))).collect();
    assert_eq!(causes[&("migration HtoD", "user")], (16, field("prefetch", "bytes")));
    assert_eq!(causes[&("migration DtoH", "user")], (16, field("prefetch", "bytes")));
    let faults: Vec<_> = r.gpu_faults.iter().map(|f| (f.device, f.access, f.records, f.groups)).collect();
    assert_eq!(faults, [(0, "read", 150, 754)]);
    let cpu: Vec<_> = r.cpu_faults_by_access.iter().map(|c| (c.access, c.count)).collect();
    assert_eq!((r.cpu_faults, cpu), (768, vec![("write", 672), ("read", 96)]));
    assert!(r.thrashing.is_empty() && r.throttling.is_empty());
    // Every GPU fault happened while a kernel ran on the GPU: the kernels of the touched buffers.
    let kernels: Vec<_> = r.kernels.iter().map(|k| (k.kernel.as_str(), k.gpu_fault_records, k.migrations)).collect();
    assert_eq!(
        kernels,
        [
            ("increment(int*, unsigned long)", 100, 2_257),
            ("sum_read(int const*, unsigned long, unsigned long long*)", 50, 1_294),
            ("(no kernel)", 0, 224),
        ]
    );
    assert_eq!(r.saturated, 0);
    // Managed memory: the four buffers at once (32 + 32 + 32 + 128 MiB), the 128 MiB one last; device memory: the
    // 8-byte sum of sum_read.
    let peaks: Vec<_> = (s.memory_peaks.iter())
        .map(|m| (m.memory, m.peak_bytes, m.allocation_bytes, m.allocation_address, m.bytes_at_end))
        .collect();
    let managed: u64 = buffers.iter().map(|b| b["bytes"].as_u64().unwrap()).sum();
    assert_eq!(
        peaks,
        [
            ("device", 8, 8, peaks[0].3, 0),
            ("managed", managed, field("partial", "bytes"), field("partial", "address"), 0),
        ]
    );
    assert_eq!(managed, 234_881_024);
}

#[test]
fn cpu_faults_are_named_as_addr2line_names_them() {
    let t = trace();
    let binary = fixtures().join("bin/um_workload");
    // Not at its recorded path (a temporary directory of the GPU machine) ...
    let s = um_stats(&t, Vec::new());
    let rows: Vec<_> = s.um.host_functions.iter().map(|h| (h.faults, h.unresolved)).collect();
    assert_eq!(rows, [(768, Some("file not readable here"))]);
    // ... but beside the fixtures, found by its file name and build id.
    let s = um_stats(&t, vec![fixtures().join("bin")]);
    let ours: BTreeMap<String, u64> = s.um.host_functions.iter().map(|h| (h.function.clone(), h.faults)).collect();
    // binutils on the same offsets (text of this PIE is laid out at vaddr == file offset: `readelf -l`).
    let offsets: Vec<u64> = (t.um.iter())
        .filter_map(|e| match fault_location(&t, e)? {
            HostLocation::Mapped { offset, .. } => Some(offset),
            _ => None,
        })
        .collect();
    assert_eq!(offsets.len(), 768);
    let mut distinct = offsets.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let mut args = vec!["-f".to_string(), "-C".into(), "-e".into(), binary.display().to_string()];
    args.extend(distinct.iter().map(|o| format!("{o:#x}")));
    let out = Command::new("addr2line").args(&args).output().expect("binutils' addr2line");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // Two lines per address: the function, then file:line.
    let names: BTreeMap<u64, &str> = distinct.iter().copied().zip(text.lines().step_by(2)).collect();
    let mut theirs: BTreeMap<String, u64> = BTreeMap::new();
    for o in &offsets {
        *theirs.entry(names[o].to_string()).or_default() += 1;
    }
    assert_eq!(ours, theirs);
    let want: BTreeMap<String, u64> =
        [("host_write(int*, unsigned long, int)".to_string(), 672), ("host_sum(int const*, unsigned long)".into(), 96)]
            .into();
    assert_eq!(ours, want);
}
