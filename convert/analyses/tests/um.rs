//! `stats --report um` and the memory peaks against the ground truth of generated unified memory episodes; host
//! functions named from a real ELF compiled here (g++, with `nm` and `readelf` saying what the answer is); hostile
//! UM records counted, never wrapped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use cutr_analyses::stats::{self, Section, StatsOptions, VA_BLOCK};
use cutr_format::Mapping;
use cutr_model::{LoadOptions, Trace, load};
use cutr_synth::um::{self as u, UmHost, UmRecord};
use cutr_synth::{SynthOptions, SynthTruth};

fn generate(dir: &Path, opts: SynthOptions) -> (Trace, SynthTruth) {
    let path = dir.join("um.cutr");
    let truth = cutr_synth::write_file(&path, opts).unwrap();
    (load(&[path], &LoadOptions::default()).unwrap(), truth)
}

fn um_opts(um_host: UmHost) -> SynthOptions {
    SynthOptions { records: 3_000, unified_memory: true, um_host, ..Default::default() }
}

fn sections(s: &[Section]) -> StatsOptions {
    StatsOptions { sections: s.to_vec(), ..Default::default() }
}

#[test]
fn um_report_equals_the_generated_truth() {
    let dir = tempfile::tempdir().unwrap();
    let (t, truth) = generate(dir.path(), um_opts(UmHost::default()));
    let (um, n) = (&truth.um, truth.um.episodes);
    assert_eq!(n, 6);
    let s = stats::compute(&t, &StatsOptions::default());
    let r = &s.um;
    assert_eq!(r.events, um.records.values().sum::<u64>());
    assert_eq!(r.events, 19 * n);
    let migrations: BTreeMap<&str, (u64, u64, u64)> =
        r.migrations.iter().map(|m| (m.direction, (m.count, m.bytes, m.total_ns))).collect();
    assert_eq!(migrations, um.migrations);
    let htod = r.migrations.iter().find(|m| m.direction == "HtoD").unwrap();
    assert_eq!(htod.avg_ns, htod.total_ns as f64 / (4 * n) as f64);
    assert_eq!(htod.throughput_gbps, (4 * n * u::CHUNK) as f64 / htod.total_ns as f64);
    let causes: BTreeMap<(&str, &str), (u64, u64)> =
        r.causes.iter().map(|c| ((c.kind, c.cause), (c.count, c.bytes))).collect();
    let want: BTreeMap<(&str, &str), (u64, u64)> = [
        (("migration DtoD", "prefetch"), (n, n * u::CHUNK)),
        (("migration DtoH", "coherence"), (2 * n, 2 * n * u::CHUNK)),
        (("migration HtoD", "coherence"), (3 * n, 3 * n * u::CHUNK)),
        (("migration HtoD", "prefetch"), (n, n * u::CHUNK)),
        (("remote map", "thrashing"), um.remote_maps),
    ]
    .into();
    assert_eq!(causes, want);
    let faults: BTreeMap<&str, (u32, u64, u64)> =
        r.gpu_faults.iter().map(|f| (f.access, (f.device, f.records, f.groups))).collect();
    let want: BTreeMap<&str, (u32, u64, u64)> =
        [("write", (0, n, 2 * n)), ("read", (0, n, n)), ("atomic", (0, n, 3 * n))].into();
    assert_eq!(faults, want);
    assert_eq!(um.gpu_faults[&u::WRITE], (n, 2 * n));
    assert_eq!(r.cpu_faults, um.cpu_fault_pcs.values().sum::<u64>());
    assert_eq!(r.cpu_faults, 6 * n);
    let thrashing: Vec<_> = r.thrashing.iter().map(|g| (g.address, g.count, g.bytes, g.processors)).collect();
    assert_eq!(thrashing, [(u::MANAGED_BASE, um.thrashing.0, um.thrashing.1, 0b11)]);
    let throttling: Vec<_> = r.throttling.iter().map(|x| (x.device, x.count, x.total_ns)).collect();
    assert_eq!(throttling, [(0, n, n * u::THROTTLE_NS)]);
    // Address rows are 2 MiB blocks: the truth's addresses folded into theirs.
    let blocks = |m: &BTreeMap<u64, u64>| {
        let mut b: BTreeMap<u64, u64> = BTreeMap::new();
        for (a, v) in m {
            *b.entry(a & !(VA_BLOCK - 1)).or_default() += v;
        }
        b
    };
    let bytes: BTreeMap<u64, u64> = r.top_bytes.iter().map(|a| (a.address, a.bytes)).collect();
    assert_eq!(bytes, blocks(&um.bytes_by_address));
    let faults: BTreeMap<u64, u64> = r.top_faults.iter().map(|a| (a.address, a.faults)).collect();
    assert_eq!(faults, blocks(&um.faults_by_address));
    assert!(r.top_bytes.iter().chain(&r.top_faults).all(|a| a.end == a.address + VA_BLOCK));
    assert_eq!(r.saturated, 0);
    // The built-in host: two PCs in python, one in libtorch, one in no mapping; neither file is on this machine.
    let pcs = &UmHost::default().fault_pcs;
    let by_pc = |i: usize| um.cpu_fault_pcs[&pcs[i]];
    let hosts: Vec<_> = r.host_functions.iter().map(|h| (h.faults, h.file.as_str(), h.unresolved)).collect();
    let torch = "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so";
    assert_eq!(
        hosts,
        [
            (by_pc(0) + by_pc(2), "/usr/bin/python3.12", Some("file not readable here")),
            (by_pc(3), "", Some("no mapping holds the address")),
            (by_pc(1), torch, Some("file not readable here")),
        ]
    );
    assert_eq!(hosts[0].0, 18);
    // Joined to the kernel running on the event's device.
    let kernels: BTreeMap<&str, (u64, u64, u64, u64, u64)> = (r.kernels.iter())
        .map(|k| (k.kernel.as_str(), (k.gpu_fault_records, k.fault_groups, k.migrations, k.migrated_bytes, k.other)))
        .collect();
    let during = |kind| um.during_kernel[&kind];
    assert_eq!(during(u::GPU_PAGE_FAULT), 3 * n);
    let want: BTreeMap<&str, (u64, u64, u64, u64, u64)> = [
        (
            "um_touch(float*, unsigned long)",
            (3 * n, 6 * n, during(u::BYTES_HTOD), 3 * n * u::CHUNK, during(u::THROTTLING) + during(u::REMOTE_MAP)),
        ),
        // The prefetches (HtoD, DtoD to the idle peer) and the read-backs (DtoH) ran outside every kernel.
        ("(no kernel)", (0, 0, 4 * n, 4 * n * u::CHUNK, 0)),
    ]
    .into();
    assert_eq!(kernels, want);
    // Device memory: the prologue's 592 MiB plus an episode's scratch buffer, reached by the first scratch; managed
    // memory apart: one buffer at a time.
    let peaks: Vec<_> = (s.memory_peaks.iter())
        .map(|m| (m.memory, m.peak_bytes, m.peak_at_ns, m.allocation_kind, m.allocation_bytes, m.allocation_address))
        .collect();
    let ((peak, at), (managed, managed_at)) = (truth.memory_peak[&0], truth.managed_peak[&0]);
    assert_eq!((peak, managed), ((592 << 20) + u::SCRATCH_BYTES, u::MANAGED_BYTES));
    let origin = t.span().0;
    assert_eq!(
        peaks,
        [
            ("device", peak, at - origin, "Device", u::SCRATCH_BYTES, u::SCRATCH_BASE),
            ("managed", managed, managed_at - origin, "Managed", u::MANAGED_BYTES, u::MANAGED_BASE),
        ]
    );
    let counts: Vec<_> = (s.memory_peaks.iter())
        .map(|m| (m.device, m.allocations, m.frees, m.frees_without_allocation, m.bytes_at_end))
        .collect();
    assert_eq!(counts, [(0, 3 + n, n, 0, 592 << 20), (0, n, n, 0, 0)]);
    let cpu: Vec<_> = r.cpu_faults_by_access.iter().map(|c| (c.access, c.count)).collect();
    assert_eq!(cpu, [("write", 4 * n), ("read", 2 * n)]);
    assert_eq!(um.cpu_faults[&u::WRITE], 4 * n);
}

#[test]
fn um_text_and_csv_show_the_section_only_where_it_has_something_to_say() {
    let dir = tempfile::tempdir().unwrap();
    let (t, truth) = generate(dir.path(), um_opts(UmHost::default()));
    let s = stats::compute(&t, &StatsOptions::default());
    let text = stats::render_text(&s, Default::default());
    assert!(text.contains("\nUnified memory: 114 events, 36 CPU page faults\n"), "{text}");
    assert!(text.contains("<no mapping holds the address>"));
    let csv = stats::render_csv(&s);
    let htod = truth.um.migrations["HtoD"];
    assert!(csv.contains(&format!("\num_migration,HtoD,{},{},,,,,,,{},,,,\n", htod.0, htod.2, htod.1)), "{csv}");
    assert!(csv.lines().all(|l| l.split(',').count() == 15 || l.contains('"')), "{csv}");
    let peak = truth.memory_peak[&0].0;
    assert!(csv.lines().any(|l| l.starts_with("memory_peak,") && l.contains(&format!(",{peak},"))));
    // Without UM events: nothing by default; asked for, it says there is none.
    let (plain, _) = generate(dir.path(), SynthOptions { records: 2_000, ..Default::default() });
    let all = stats::render_text(&stats::compute(&plain, &StatsOptions::default()), Default::default());
    assert!(!all.contains("Unified memory"));
    let asked = stats::render_text(&stats::compute(&plain, &sections(&[Section::Um])), Default::default());
    assert!(asked.contains("Unified memory: no events (record with `cupti-record --um`)"), "{asked}");
}

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd} is needed: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// A C++ program with two functions compiled here; its path, `nm`'s addresses of (cutr::touch, main), and
/// `readelf`'s build id.
fn compile(dir: &Path) -> (PathBuf, u64, u64, Vec<u8>) {
    let src = dir.join("touch.cc");
    std::fs::write(
        &src,
        "namespace cutr { __attribute__((noinline)) int touch(char* p, int n) { int s = 0; \
         for (int i = 0; i < n; i += 4096) s += p[i]; return s; } }\n\
         int main(int c, char** v) { return cutr::touch(v[0], c); }\n",
    )
    .unwrap();
    let exe = dir.join("touch");
    run("g++", &["-O1", "-Wl,--build-id", "-o", exe.to_str().unwrap(), src.to_str().unwrap()]);
    let nm = run("nm", &[exe.to_str().unwrap()]);
    let addr = |sym: &str| {
        let l = nm.lines().find(|l| l.ends_with(&format!(" T {sym}"))).expect("nm lists the function");
        u64::from_str_radix(&l[..16], 16).unwrap()
    };
    let notes = run("readelf", &["-n", exe.to_str().unwrap()]);
    let hex = notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("a build id");
    let id = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    (exe.clone(), addr("_ZN4cutr5touchEPci"), addr("main"), id)
}

#[test]
fn cpu_faults_are_named_from_the_mapped_elf_when_its_build_id_matches() {
    let dir = tempfile::tempdir().unwrap();
    let (exe, touch, main, id) = compile(dir.path());
    // Mapped as the loader maps a PIE's text: page 1 of the file at BASE + 0x1000.
    const BASE: u64 = 0x5600_0000_0000;
    let mapping = Mapping {
        start: BASE + 0x1000,
        end: BASE + 0x2000,
        file_offset: 0x1000,
        path: exe.display().to_string(),
        build_id: id,
    };
    let host =
        |m: Mapping| UmHost { mappings: vec![m], fault_pcs: vec![BASE + touch + 4, BASE + main + 2, BASE + touch] };
    let (t, truth) = generate(dir.path(), um_opts(host(mapping.clone())));
    let s = stats::compute(&t, &sections(&[Section::Um]));
    let rows: Vec<_> = s.um.host_functions.iter().map(|h| (h.faults, h.function.as_str(), h.unresolved)).collect();
    let pcs = &truth.um.cpu_fault_pcs;
    let (on_touch, on_main) = (pcs[&(BASE + touch + 4)] + pcs[&(BASE + touch)], pcs[&(BASE + main + 2)]);
    assert_eq!((on_touch, on_main), (24, 12));
    assert_eq!(rows, [(on_touch, "cutr::touch(char*, int)", None), (on_main, "main", None)]);
    assert_eq!(s.um.host_functions[0].file, exe.display().to_string());
    // Another build of the file is not named.
    let other = Mapping { build_id: vec![7; 20], ..mapping };
    let (t, _) = generate(dir.path(), um_opts(host(other)));
    let s = stats::compute(&t, &sections(&[Section::Um]));
    let rows: Vec<_> = s.um.host_functions.iter().map(|h| (h.faults, h.function.as_str(), h.unresolved)).collect();
    assert_eq!(rows, [(36, "", Some("build id differs"))]);
}

#[test]
fn hostile_um_records_are_counted_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.cutr");
    let table = cutr_schema::layouts::builtin(130001).unwrap();
    let t0 = cutr_synth::T0 + 5_000_000_000;
    let rec = |kind, value, start, end| UmRecord { kind, value, start, end, src: u::CPU, dst: 0, ..Default::default() };
    let hostile = [
        rec(0, 1, t0, t0 + 1),                                        // counter kind 0: unknown
        rec(9, 1, t0, t0 + 1),                                        // past CUDA 13's last kind
        rec(u32::MAX, 1, t0, t0 + 1),                                 // damage
        rec(u::BYTES_HTOD, u64::MAX, t0, t0 + 10),                    // 2^64-1 bytes
        rec(u::BYTES_HTOD, u64::MAX, t0 + 20, t0 + 30),               // and again: the total saturates
        rec(u::BYTES_HTOD, 4096, t0 + 50, t0 + 40),                   // ends before it starts
        rec(u::BYTES_DTOH, 4096, 0, t0),                              // no start
        rec(u::GPU_PAGE_FAULT, u64::MAX, t0 + 60, t0 + u64::MAX / 2), // fault groups 2^64-1, 2^63 ns long
        rec(u::CPU_PAGE_FAULT, u64::MAX, t0 + 70, 0),                 // a PC no mapping holds
        UmRecord { processors: u64::MAX, ..rec(u::THRASHING, u64::MAX, t0 + 80, 0) },
    ];
    let mut buffer = Vec::new();
    for r in &hostile {
        buffer.extend(u::um_record_bytes(&table, r));
    }
    let writer = cutr_format::Writer::create(&path, Default::default()).unwrap();
    let opts = SynthOptions { records: 2_000, ..Default::default() };
    cutr_synth::write_to_with(writer, opts, |w, _| {
        let enc = cutr_format::ActivityEncoder::new(&table, 3).encode(&buffer);
        w.append_encoded(enc).map(|_| ())
    })
    .unwrap();
    let t = load(&[path], &LoadOptions::default()).unwrap();
    assert_eq!((t.stats.um_unknown_kind, t.stats.inverted_records, t.stats.zero_timestamp_records), (3, 1, 1));
    assert_eq!(t.um.len(), 5);
    let s = stats::compute(&t, &sections(&[Section::Um, Section::Loss]));
    let r = &s.um;
    let htod: Vec<_> = r.migrations.iter().map(|m| (m.direction, m.count, m.bytes, m.total_ns)).collect();
    assert_eq!(htod, [("HtoD", 2, u64::MAX, 20)]);
    // HtoD bytes twice (per direction, per cause, per address), and once more in the kernel join: 4 saturations.
    assert_eq!(r.saturated, 4);
    assert_eq!((r.gpu_faults[0].records, r.gpu_faults[0].groups), (1, u64::MAX));
    assert_eq!(
        (r.cpu_faults, r.host_functions[0].unresolved),
        (1, Some("recording has no mappings (before format 1.4)"))
    );
    assert_eq!((r.thrashing[0].bytes, r.thrashing[0].processors), (u64::MAX, u64::MAX));
    let text = stats::render_text(&s, Default::default());
    assert!(text.contains("unified memory records of unknown counter kind 3"), "{text}");
    assert!(text.contains("4 UM totals reached 2^64-1 and stopped there"), "{text}");
    assert!(text.contains("GPU 0, GPU 1, GPU 2"));
}

#[test]
fn diff_reports_um_bytes_and_faults_per_run() {
    use cutr_analyses::diff::{DiffOptions, diff, render_text};
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (base, bt) = generate(a.path(), um_opts(UmHost::default()));
    let (new, nt) = generate(b.path(), SynthOptions { records: 6_000, ..um_opts(UmHost::default()) });
    assert_eq!((bt.um.episodes, nt.um.episodes), (6, 11));
    let r = diff(&[base], &[new], &DiffOptions::default());
    let got: BTreeMap<&str, (f64, f64)> = r.um_changes.iter().map(|c| (c.what, (c.base, c.new))).collect();
    let mib = |episodes: u64, chunks: u64| (episodes * chunks * u::CHUNK) as f64;
    assert_eq!(got["HtoD bytes"], (mib(6, 4), mib(11, 4)));
    assert_eq!(got["DtoH bytes"], (mib(6, 2), mib(11, 2)));
    assert_eq!(got["DtoD bytes"], (mib(6, 1), mib(11, 1)));
    assert_eq!(got["GPU page faults"], (18.0, 33.0));
    assert_eq!(got["GPU fault groups"], (36.0, 66.0));
    assert_eq!(got["CPU page faults"], (36.0, 66.0));
    assert_eq!((got["thrashing"], got["throttling"], got["remote maps"]), ((6.0, 11.0), (6.0, 11.0), (6.0, 11.0)));
    let htod = &r.um_changes[0];
    assert_eq!(htod.delta_pct, Some(100.0 * 5.0 / 6.0));
    let text = render_text(&r, false);
    assert!(text.contains("  HtoD bytes: 50,331,648.0 -> 92,274,688.0 (+83.3%)"), "{text}");
    // Recordings without UM events: no UM rows.
    let (plain, _) = generate(a.path(), SynthOptions { records: 2_000, ..Default::default() });
    let r = diff(std::slice::from_ref(&plain), std::slice::from_ref(&plain), &DiffOptions::default());
    assert!(r.um_changes.is_empty());
}

#[test]
fn hostile_mappings_are_no_location_not_a_wrapped_one() {
    let dir = tempfile::tempdir().unwrap();
    let m = |start: u64, end: u64, file_offset: u64, path: &str| Mapping {
        start,
        end,
        file_offset,
        path: path.into(),
        build_id: vec![1; 20],
    };
    let host = UmHost {
        mappings: vec![
            m(0x9000, 0x1000, 0, "/bin/inverted"),                      // ends before it starts
            m(0x10_0000, 0x20_0000, u64::MAX, "/bin/offset-past-2^64"), // offset + (pc - start) wraps
            m(0x30_0000, 0x40_0000, 0, "/dev/zero"),                    // not a regular file
            m(0x50_0000, 0x60_0000, 0, "/proc/self/exe"),               // a real ELF, another build id
        ],
        fault_pcs: vec![0x5000, 0x10_0010, 0x30_0000, 0x50_0000],
    };
    let (t, truth) = generate(dir.path(), um_opts(host));
    let per_pc = |pc: u64| truth.um.cpu_fault_pcs[&pc];
    let s = stats::compute(&t, &sections(&[Section::Um]));
    let mut rows: Vec<_> = s.um.host_functions.iter().map(|h| (h.file.as_str(), h.unresolved, h.faults)).collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            ("", Some("no mapping holds the address"), per_pc(0x5000) + per_pc(0x10_0010)),
            ("/dev/zero", Some("file not readable here"), per_pc(0x30_0000)),
            ("/proc/self/exe", Some("build id differs"), per_pc(0x50_0000)),
        ]
    );
    assert_eq!(rows.iter().map(|r| r.2).sum::<u64>(), 36);
}
