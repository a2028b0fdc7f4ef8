//! PC samples recorded on a GPU, read back on a machine without one: the cubins the recorder kept are the ones
//! CUPTI named, every sampled PC maps to the line NVIDIA maps it to, and the hot lines are where the kernels spend
//! their time. Its own test binary: libcupti's map is cached per function name within a process (see
//! `cutr_tests::sass_to_source`), and `source_oracle` asks about an older build of the same kernels.

use cutr_source::SourceMap;
use cutr_tests::installed;
use cutr_tests::sass_to_source::{SassToSourceFn, nvidia};

/// The line of `workloads/cuda/source_workload.cu` that carries a `// HOT-...` marker.
fn marked_line(marker: &str) -> u32 {
    let src = std::fs::read_to_string(cutr_tests::repo().join("workloads/cuda/source_workload.cu")).unwrap();
    src.lines().position(|l| l.contains(&format!("// {marker}"))).unwrap() as u32 + 1
}

/// `fixtures/source_workload_pcs.cutr`: `source_workload --iters 3` recorded with `--pc-sampling` on an H100. The
/// cubins the recorder kept are intact (libcupti's CRC of each equals the CRC stored with it, and the PC samples
/// name those CRCs); every sampled PC maps to the line NVIDIA maps it to; the pointer chase is hot on its
/// dependent load, stalled on memory (long scoreboard), the FMA chain on its FMA, stalled on the execution
/// dependency (wait), and the kernel JIT-compiled from PTX at run time is mapped to its PTX's lines.
#[test]
fn pc_samples_land_on_the_lines_their_kernels_spend_time_on() {
    let path = installed("cupti/cupti-13.0/lib/libcupti.so.13", "tools/fetch-cupti.sh");
    type CrcFn = unsafe extern "C" fn(*mut [usize; 4]) -> u32;
    // SAFETY: loading libcupti runs only its own constructors; it stays loaded for the process. cuptiGetCubinCrc
    // takes {size, cubinSize, cubin, crc out} (32 bytes).
    let (s2s, crc): (SassToSourceFn, CrcFn) = unsafe {
        let lib = libloading::Library::new(&path).unwrap();
        let f = (
            *lib.get::<SassToSourceFn>(b"cuptiGetSassToSourceCorrelation\0").unwrap(),
            *lib.get::<CrcFn>(b"cuptiGetCubinCrc\0").unwrap(),
        );
        std::mem::forget(lib);
        f
    };
    let reader = cutr_format::Reader::open(&cutr_tests::repo().join("fixtures/source_workload_pcs.cutr")).unwrap();
    let (cubins, bad) = reader.cubins();
    assert!(bad.is_empty());
    assert_eq!(cubins.len(), 2, "the program's cubin and the JIT one");
    for c in &cubins {
        let mut p = [32usize, c.data.len(), c.data.as_ptr() as usize, 0];
        // SAFETY: the params array has the struct's layout; the cubin outlives the call.
        assert_eq!(unsafe { crc(&mut p) }, 0);
        assert_eq!(p[3] as u64, c.crc, "the stored cubin is the one CUPTI named");
    }
    let maps: std::collections::HashMap<u64, (&[u8], SourceMap)> =
        cubins.iter().map(|c| (c.crc, (c.data.as_slice(), SourceMap::from_cubin(&c.data).unwrap()))).collect();
    let (collections, bad) = reader.pc_samples();
    assert!(bad.is_empty());
    let (mut differ, mut pcs) = (Vec::new(), std::collections::BTreeSet::new());
    for c in &collections {
        for pc in &c.pcs {
            let (cubin, map) = &maps[&pc.cubin_crc];
            if !pcs.insert((pc.cubin_crc, pc.function_name.clone(), pc.pc_offset)) {
                continue;
            }
            let ours =
                map.locate(&pc.function_name, pc.pc_offset).map(|l| (l.position.dir, l.position.file, l.position.line));
            let theirs = nvidia(s2s, cubin, &pc.function_name, pc.pc_offset);
            if ours != theirs {
                differ.push((pc.function_name.clone(), pc.pc_offset, ours, theirs));
            }
        }
    }
    assert_eq!(differ, Vec::new(), "every distinct sampled PC maps as NVIDIA maps it");
    assert_eq!(pcs.len(), 124);

    let r = cutr_analyses::source::report(&[&reader], &Default::default());
    assert_eq!((r.samples, r.cupti_total_samples, r.dropped_samples, r.non_user_samples), (861_855, 862_029, 0, 174));
    let k = |name: &str| r.kernels.iter().find(|k| k.name.starts_with(name)).unwrap();
    let (chase, fma, jit) = (k("chase("), k("fma_chain("), k("jit_scale"));
    assert_eq!((chase.lines[0].file.as_str(), chase.lines[0].line), ("source_workload.cu", marked_line("HOT-CHASE")));
    assert_eq!(chase.stalls[0].0, "long_scoreboard");
    assert!(chase.lines[0].percent > 99.0, "{}", chase.lines[0].percent);
    assert_eq!((fma.lines[0].file.as_str(), fma.lines[0].line), ("source_workload.cu", marked_line("HOT-FMA")));
    assert_eq!(fma.stalls[0].0, "wait");
    assert!(jit.has_lines);
    assert_eq!((jit.lines[0].file.as_str(), jit.lines[0].line), ("jit_scale.cu", 4), "the use of the loaded value");
    assert_eq!(r.cubins_with_lines, 2);
}

/// `cupti-convert source --pprof`'s profile read by `go tool pprof` itself: the same total and the same hottest
/// lines, by samples, as `cupti-convert source`, and the stall reasons and kernels as tags.
#[test]
fn the_pprof_profile_opens_in_go_tool_pprof_with_the_same_top_lines() {
    let reader = cutr_format::Reader::open(&cutr_tests::repo().join("fixtures/source_workload_pcs.cutr")).unwrap();
    let (bytes, summary, warnings) = cutr_analyses::source::pprof(&[&reader]);
    assert_eq!(warnings, Vec::<String>::new());
    assert_eq!((summary.samples, summary.locations, summary.functions), (861_855, 124, 3));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sw.pb.gz");
    std::fs::write(&path, &bytes).unwrap();
    let top = cutr_tests::go_pprof(&["-top".as_ref(), "-lines".as_ref(), "-nodecount=3".as_ref(), path.as_os_str()]);
    let rows: Vec<(u64, String)> = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[0].parse().unwrap(), cols[5..].join(" "))
        })
        .collect();
    assert!(top.contains("of 861855 total"), "{top}");
    let report = cutr_analyses::source::report(
        &[&reader],
        &cutr_analyses::source::SourceOptions { top: 0, sass: false, ..Default::default() },
    );
    let mut ours: Vec<(u64, String)> = report
        .kernels
        .iter()
        .flat_map(|k| k.lines.iter().map(move |l| (l.samples, format!("{} {}:{}", k.name, l.file, l.line))))
        .collect();
    ours.sort_by_key(|b| std::cmp::Reverse(b.0));
    ours.truncate(3);
    assert_eq!(rows, ours);
    assert_eq!(
        rows[0],
        (453_876, "chase(unsigned int const*, unsigned int, int, unsigned int*) source_workload.cu:44".into())
    );
    // Stall reasons are tags: long_scoreboard dominates the chase.
    let tags = cutr_tests::go_pprof(&["-tags".as_ref(), "-focus=chase".as_ref(), path.as_os_str()]);
    let line = |tag: &str| tags.lines().find(|l| l.ends_with(tag)).map(|l| l.trim().to_string());
    assert_eq!(line(": long_scoreboard").as_deref(), Some("450228 (52.24%): long_scoreboard"), "{tags}");
    assert_eq!(
        line("int*)").as_deref(),
        Some("454728 (52.76%): chase(unsigned int const*, unsigned int, int, unsigned int*)")
    );
    let chase = report.kernels.iter().find(|k| k.name.starts_with("chase(")).unwrap();
    assert_eq!(chase.stalls[0], ("long_scoreboard".to_string(), 450_228));
}

/// With NVIDIA's `nvdisasm` (13.5, from PyPI; installed by `.ci/setup-clients.sh`), each hot PC shows its SASS:
/// the chase's hottest instruction is the address computation that consumes the loaded value (so it waits on
/// the load: long scoreboard), the FMA chain's is an FFMA (waiting on the previous FFMA: wait).
#[test]
fn hot_pcs_show_the_instructions_nvdisasm_gives() {
    let nvdisasm = cutr_tests::installed("clients/nvdisasm-13.5.37/nvidia/cu13/bin/nvdisasm", ".ci/setup-clients.sh");
    cutr_tests::client_log::ran("nvdisasm 13.5");
    let reader = cutr_format::Reader::open(&cutr_tests::repo().join("fixtures/source_workload_pcs.cutr")).unwrap();
    let opts = cutr_analyses::source::SourceOptions { top: 2, nvdisasm: Some(nvdisasm), ..Default::default() };
    let r = cutr_analyses::source::report(&[&reader], &opts);
    assert_eq!(r.warnings, Vec::<String>::new());
    let pcs = |name: &str| {
        let k = r.kernels.iter().find(|k| k.name.starts_with(name)).unwrap();
        k.pcs.iter().map(|p| (p.pc_offset, p.sass.clone(), p.stalls[0].0.clone())).collect::<Vec<_>>()
    };
    assert_eq!(
        pcs("chase("),
        [
            (0x300, "IMAD.WIDE.U32 R8, R7, 0x4, R2".to_string(), "long_scoreboard".to_string()),
            (0x220, "IMAD.WIDE.U32 R6, R17, 0x4, R2".to_string(), "long_scoreboard".to_string()),
        ]
    );
    let fma = pcs("fma_chain(");
    assert_eq!(fma.iter().map(|p| p.1.as_str()).collect::<Vec<_>>(), ["FFMA R5, R5, R4, 1.0000000116860974231e-07"; 2]);
    assert_eq!(r.kernels.iter().map(|k| k.pcs.iter().filter(|p| p.sass.is_empty()).count()).sum::<usize>(), 0);
}
