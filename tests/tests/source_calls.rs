//! Samples in called functions, placed and charged: `fixtures/calls_workload_pcs.cutr` (H100, `calls_workload
//! --kernel calls --iters 100` with `--pc-sampling`) is a kernel whose time is in a `__noinline__` device function
//! (`gather`, called from CALL-A and CALL-B) and in the IEEE division's slow path (a compiler subroutine, called
//! from the inlined `a / b` of CALL-DIV). Every sampled PC's function and every call site are checked against
//! nvdisasm's own listing of the cubin (fixtures/cubins/calls_workload.sm_90.nvdisasm.txt, `nvdisasm -c -g -gi`,
//! and the installed nvdisasm 13.5 run live), the per-function and inclusive totals are exact, and the pprof
//! profile's stacks are read back by `go tool pprof`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cutr_analyses::source::{SourceOptions, SourceReport, pprof_after, pprof_with, render_text, report};
use cutr_source::SourceMap;

const KERNEL: &str = "_Z5callsPKjPKfS2_iiPf";
const GATHER: &str = "$_Z5callsPKjPKfS2_iiPf$_Z6gatherPKjji";
const SLOW_PATH: &str = "$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath";
const GATHER_NAME: &str = "gather(unsigned int const*, unsigned int, int)";
const SLOW_PATH_NAME: &str = "__cuda_sm3x_div_rn_noftz_f32_slowpath";
const KERNEL_NAME: &str = "calls(unsigned int const*, float const*, float const*, int, int, float*)";

/// The line of `workloads/cuda/calls_workload.cu` that carries a `// MARKER`.
fn marked_line(marker: &str) -> u32 {
    let src = std::fs::read_to_string(cutr_tests::repo().join("workloads/cuda/calls_workload.cu")).unwrap();
    src.lines().position(|l| l.contains(&format!("// {marker}"))).unwrap() as u32 + 1
}

/// What nvdisasm's `-c -g -gi` listing says of the kernel's section: each function's first offset (by its label)
/// and each CALL's offset, target and the line in the caller's own code (the last `//## File` comment before it,
/// its outermost `line N`).
#[derive(Debug, PartialEq)]
struct Oracle {
    functions: Vec<(u64, String)>,
    calls: Vec<(u64, String, u32)>,
}

impl Oracle {
    fn parse(listing: &str) -> Oracle {
        let (mut functions, mut calls) = (Vec::new(), Vec::new());
        let (mut in_kernel, mut label, mut line) = (false, None::<String>, 0u32);
        for l in listing.lines().map(str::trim) {
            if l.starts_with("//----") {
                in_kernel = l.contains(&format!(".text.{KERNEL} "));
            }
            if !in_kernel {
                continue;
            }
            if let Some(comment) = l.strip_prefix("//## File") {
                line = comment.rsplit("line ").next().unwrap().trim().parse().unwrap();
            } else if let Some(name) = l.strip_suffix(':').filter(|n| !n.starts_with('.') && !n.contains(' ')) {
                label = Some(name.to_string());
            } else if let Some((offset, text)) = l.strip_prefix("/*").and_then(|r| r.split_once("*/")) {
                let offset = u64::from_str_radix(offset, 16).unwrap();
                if let Some(name) = label.take() {
                    functions.push((offset, name));
                }
                if let Some(target) = text.trim().strip_prefix("CALL.REL.NOINC `(") {
                    calls.push((offset, target.split(')').next().unwrap().to_string(), line));
                }
            }
        }
        Oracle { functions, calls }
    }

    /// The function whose label is the last at or before `pc`.
    fn function_at(&self, pc: u64) -> &str {
        &self.functions.iter().rev().find(|(start, _)| *start <= pc).unwrap().1
    }
}

fn committed_listing() -> String {
    std::fs::read_to_string(cutr_tests::repo().join("fixtures/cubins/calls_workload.sm_90.nvdisasm.txt")).unwrap()
}

fn reader() -> cutr_format::Reader {
    cutr_format::Reader::open(&cutr_tests::repo().join("fixtures/calls_workload_pcs.cutr")).unwrap()
}

/// An `nvdisasm` that prints the committed listing (what nvdisasm 13.5 printed of this cubin), so that the figures
/// below hold where no nvdisasm is installed; the live one is checked against it in its own test.
fn recorded_nvdisasm(dir: &Path) -> PathBuf {
    let script = dir.join("nvdisasm");
    let listing = cutr_tests::repo().join("fixtures/cubins/calls_workload.sm_90.nvdisasm.txt");
    std::fs::write(&script, format!("#!/bin/sh\ncat '{}'\n", listing.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

fn full_report(nvdisasm: &Path) -> SourceReport {
    let opts = SourceOptions { top: 0, nvdisasm: Some(nvdisasm.to_path_buf()), ..Default::default() };
    report(&[&reader()], &opts)
}

/// The oracle's view of every sampled PC: our function for it is the one nvdisasm labels, and every call site the
/// report charges is a CALL nvdisasm prints, at the line it prints.
#[test]
fn every_sampled_pc_is_in_the_function_nvdisasm_places_it_in() {
    let oracle = Oracle::parse(&committed_listing());
    assert_eq!(oracle.functions, [(0, KERNEL.to_string()), (0xa80, GATHER.to_string()), (0x1610, SLOW_PATH.into())]);
    let (call_a, call_b, call_div) = (marked_line("CALL-A"), marked_line("CALL-B"), marked_line("CALL-DIV"));
    let div = |o: u64| (o, SLOW_PATH.to_string(), call_div);
    assert_eq!(
        oracle.calls,
        [
            (0xb0, GATHER.to_string(), call_a),
            (0x120, GATHER.to_string(), call_b),
            div(0x380),
            div(0x4e0),
            div(0x650),
            div(0x7a0),
            div(0x9b0)
        ]
    );
    let reader = reader();
    let (cubins, _) = reader.cubins();
    let map = SourceMap::from_cubin(&cubins[0].data).unwrap();
    let code = map.code_functions(KERNEL);
    let (collections, bad) = reader.pc_samples();
    assert!(bad.is_empty());
    let mut per_function: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for pc in collections.iter().flat_map(|c| &c.pcs) {
        assert_eq!(pc.function_name, KERNEL);
        let ours = &code[map.function_at(KERNEL, pc.pc_offset).unwrap()].symbol;
        assert_eq!(ours, oracle.function_at(pc.pc_offset), "pc {:#x}", pc.pc_offset);
        per_function.entry(ours.clone()).or_default().insert(pc.pc_offset);
    }
    let counts: Vec<(&str, usize)> = per_function.iter().map(|(f, pcs)| (f.as_str(), pcs.len())).collect();
    assert_eq!(counts, [(GATHER, 178), (SLOW_PATH, 66), (KERNEL, 140)], "384 distinct PCs");

    let dir = tempfile::tempdir().unwrap();
    let r = full_report(&recorded_nvdisasm(dir.path()));
    let k = &r.kernels[0];
    for f in &k.functions {
        let symbol = &f.symbol;
        let ours: Vec<(u64, u32)> = {
            let mut v: Vec<(u64, u32)> =
                f.called_from.iter().map(|c| (c.offset, c.line.rsplit(':').next().unwrap().parse().unwrap())).collect();
            v.sort();
            v
        };
        let theirs: Vec<(u64, u32)> =
            oracle.calls.iter().filter(|c| &c.1 == symbol).map(|(offset, _, line)| (*offset, *line)).collect();
        assert_eq!(ours, theirs, "{symbol}");
    }
    // Each PC of the report names its function as nvdisasm does.
    let names: BTreeMap<&str, &str> =
        [(KERNEL, KERNEL_NAME), (GATHER, GATHER_NAME), (SLOW_PATH, SLOW_PATH_NAME)].into_iter().collect();
    assert_eq!(k.pcs.len(), 384);
    for p in &k.pcs {
        assert_eq!(p.function, names[oracle.function_at(p.pc_offset)], "pc {:#x}", p.pc_offset);
    }
}

/// The installed nvdisasm (13.5, PyPI) prints the same functions, calls and call-site lines as the listing
/// committed, and the report it gives is the one the committed listing gives.
#[test]
fn the_live_nvdisasm_agrees_with_the_committed_listing() {
    let nvdisasm = cutr_tests::installed("clients/nvdisasm-13.5.37/nvidia/cu13/bin/nvdisasm", ".ci/setup-clients.sh");
    cutr_tests::client_log::ran("nvdisasm 13.5");
    let cubin = cutr_tests::repo().join("fixtures/cubins/calls_workload.sm_90.cubin");
    let out = std::process::Command::new(&nvdisasm).args(["-c", "-g", "-gi"]).arg(&cubin).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let live = Oracle::parse(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(live, Oracle::parse(&committed_listing()));
    let dir = tempfile::tempdir().unwrap();
    let (ours, recorded) = (full_report(&nvdisasm), full_report(&recorded_nvdisasm(dir.path())));
    assert_eq!(ours.kernels[0].functions, recorded.kernels[0].functions);
    assert_eq!(ours.warnings, Vec::<String>::new());
}

/// Exclusive totals per function, the inclusive view and its conservation, and the lines as the report shows them:
/// the slow path's 38.1% is its own, no longer `return sum;` (line 36) of gather.
#[test]
fn functions_are_grouped_and_call_sites_charged_with_their_callees() {
    let dir = tempfile::tempdir().unwrap();
    let r = full_report(&recorded_nvdisasm(dir.path()));
    assert_eq!(r.samples, 24_231_584);
    let k = &r.kernels[0];
    assert_eq!((k.call_sites_unknown.as_deref(), k.uncharged_samples), (None, 0));
    let rows: Vec<(&str, u64, u64)> = k.functions.iter().map(|f| (f.name.as_str(), f.exclusive, f.inclusive)).collect();
    assert_eq!(
        rows,
        [
            (GATHER_NAME, 11_355_344, 11_355_344),
            (SLOW_PATH_NAME, 9_238_419, 9_238_419),
            (KERNEL_NAME, 3_637_821, 24_231_584)
        ]
    );
    assert_eq!(rows.iter().map(|r| r.1).sum::<u64>(), k.samples, "every sample in one function");
    // Each callee's inclusive total is what its call sites were charged; the kernel's is its own plus them all.
    for f in k.functions.iter().filter(|f| !f.called_from.is_empty()) {
        assert_eq!(f.called_from.iter().map(|c| c.samples).sum::<u64>(), f.inclusive, "{}", f.name);
    }
    let sites = |name: &str| {
        let f = k.functions.iter().find(|f| f.name == name).unwrap();
        f.called_from.iter().map(|c| (c.offset, c.line.as_str(), c.weight, c.samples)).collect::<Vec<_>>()
    };
    // Weights: samples at the CALL and its return point (0xb0: 42 + 0xc0: 62; 0x120: 44 + 0x130: 72).
    assert_eq!(
        sites(GATHER_NAME),
        [(0x120, "calls_workload.cu:47", 116, 5_987_362), (0xb0, "calls_workload.cu:46", 104, 5_367_982)]
    );
    assert_eq!(
        sites(SLOW_PATH_NAME),
        [
            (0x380, "calls_workload.cu:51", 110_769, 2_311_154),
            (0x4e0, "calls_workload.cu:51", 110_768, 2_311_097),
            (0x7a0, "calls_workload.cu:51", 110_684, 2_309_376),
            (0x650, "calls_workload.cu:51", 110_562, 2_306_792),
            (0x9b0, "calls_workload.cu:51", 0, 0)
        ]
    );
    let line = |file: &str, line: u32, function: &str| {
        let l = k.lines.iter().find(|l| l.file == file && l.line == line && l.function == function).unwrap();
        (l.samples, l.called_from.clone())
    };
    let gather_calls = vec!["calls_workload.cu:47".to_string(), "calls_workload.cu:46".to_string()];
    assert_eq!(line("calls_workload.cu", marked_line("HOT-GATHER"), GATHER_NAME), (10_613_966, gather_calls));
    assert_eq!(line("", 0, SLOW_PATH_NAME), (9_238_419, vec!["calls_workload.cu:51".to_string()]));
    assert!(!k.lines.iter().any(|l| l.line == 36 && l.samples > 1_000), "gather's `return sum;` is charged no more");
    let text = render_text(&r);
    assert!(
        text.contains(
            "   9,238,419  38.1%  (no line) in __cuda_sm3x_div_rn_noftz_f32_slowpath (called from \
             calls_workload.cu:51) wait 62%, selected 18%, branch_resolving 15%"
        ),
        "{text}"
    );
    assert!(text.contains(
        "  3,637,821  15.0% 24,231,584 100.0%  calls(unsigned int const*, float const*, float const*, int, int, \
         float*) [0x0, +7552]"
    ));
}

/// Without nvdisasm (here: not run) functions are still given, call sites are unknown and the report says why.
#[test]
fn without_nvdisasm_functions_are_given_and_call_sites_said_unknown() {
    let opts = SourceOptions { top: 0, sass: false, ..Default::default() };
    let r = report(&[&reader()], &opts);
    let k = &r.kernels[0];
    assert_eq!(k.call_sites_unknown.as_deref(), Some("nvdisasm was not run (--no-sass)"));
    let rows: Vec<(u64, u64)> = k.functions.iter().map(|f| (f.exclusive, f.inclusive)).collect();
    assert_eq!(rows, [(11_355_344, 11_355_344), (9_238_419, 9_238_419), (3_637_821, 3_637_821)]);
    assert!(k.functions.iter().all(|f| f.called_from.is_empty()));
    assert!(render_text(&r).contains(
        "  (call sites unknown: nvdisasm was not run (--no-sass); inclusive figures are the exclusive ones)"
    ));
}

/// A listing without the CALLs (an nvdisasm that printed none): the called functions' samples reach no call site,
/// and the report counts them as charged nowhere rather than dropping them from the kernel's figures silently.
#[test]
fn samples_no_known_call_reaches_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("nvdisasm");
    let listing = cutr_tests::repo().join("fixtures/cubins/calls_workload.sm_90.nvdisasm.txt");
    std::fs::write(&script, format!("#!/bin/sh\ngrep -v 'CALL\\.' '{}'\n", listing.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let r = full_report(&script);
    let k = &r.kernels[0];
    assert_eq!((k.call_sites_unknown.as_deref(), k.uncharged_samples), (None, 20_593_763));
    let kernel = k.functions.iter().find(|f| f.name == KERNEL_NAME).unwrap();
    assert_eq!((kernel.exclusive, kernel.inclusive), (3_637_821, 3_637_821));
    assert_eq!(kernel.inclusive + k.uncharged_samples, k.samples);
    assert!(
        render_text(&r)
            .contains("  (20,593,763 samples are in functions no known call reaches: charged to no call site)")
    );
}

/// The viewers' kernel slices carry the top lines as `source` names them: a called function's line says so, and
/// the slow path without lines is named, not a `:0`.
#[test]
fn the_viewers_top_lines_name_the_called_functions() {
    let path = cutr_tests::repo().join("fixtures/calls_workload_pcs.cutr");
    let mut t = cutr_model::load(std::slice::from_ref(&path), &Default::default()).unwrap();
    assert_eq!(cutr_analyses::source::annotate(&mut t, &[&reader()]), Vec::<String>::new());
    let id = t.names.lookup(KERNEL).unwrap();
    assert_eq!(
        t.kernel_source[&id].top_lines,
        "calls_workload.cu:33 in gather 43.8%, __cuda_sm3x_div_rn_noftz_f32_slowpath 38.1%, calls_workload.cu:40 9.4%"
    );
}

/// `go tool pprof` reads the stacks: flat per function as the report's exclusive totals, cum of the kernel all
/// samples, and each stack's total (callee -> call site in the kernel) as the report charges the call site.
#[test]
fn pprof_stacks_lead_from_called_functions_to_their_call_sites() {
    let dir = tempfile::tempdir().unwrap();
    let opts = SourceOptions { nvdisasm: Some(recorded_nvdisasm(dir.path())), ..Default::default() };
    let (bytes, summary, warnings) = pprof_with(&[&reader()], &opts);
    assert_eq!(warnings, Vec::<String>::new());
    // After a report, its listings are used again: an nvdisasm that is not there is never run, and the profile is
    // the same.
    let report = report(&[&reader()], &opts);
    let missing = SourceOptions { nvdisasm: Some(dir.path().join("not-there")), ..Default::default() };
    let again = pprof_after(&[&reader()], &report, &missing);
    assert_eq!((&again.0, again.2.len()), (&bytes, 0));
    // One location per sampled PC (every call site charged was sampled; 0x9b0's, charged nothing, is in no stack);
    // the kernel, gather, the slow path and the inlined `ratio`.
    assert_eq!((summary.samples, summary.locations, summary.functions), (24_231_584, 384, 4));
    let path = dir.path().join("calls.pb.gz");
    std::fs::write(&path, &bytes).unwrap();
    let top = cutr_tests::go_pprof(&["-top".as_ref(), path.as_os_str()]);
    let rows: Vec<(u64, u64, String)> = top
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[0].parse().unwrap(), cols[3].parse().unwrap(), cols[5..].join(" "))
        })
        .collect();
    assert!(top.contains("of 24231584 total"), "{top}");
    // `ratio` is inlined into the kernel: its frame holds the division's fast path (flat) and the call of the slow
    // path (cum); the kernel's flat is its samples less ratio's.
    assert_eq!(
        rows,
        [
            (11_355_344, 11_355_344, GATHER_NAME.to_string()),
            (9_238_419, 9_238_419, SLOW_PATH_NAME.to_string()),
            (2_269_196, 11_507_615, "ratio(float, float) (inline)".to_string()),
            (1_368_625, 24_231_584, KERNEL_NAME.to_string())
        ]
    );
    // Per stack: `go tool pprof -traces` prints each sample's stack, leaf first; summed per (leaf function, the
    // call-site frames), they are the report's call-site charges.
    let traces = cutr_tests::go_pprof(&["-traces".as_ref(), "-lines".as_ref(), path.as_os_str()]);
    let mut stacks: BTreeMap<(String, Vec<String>), u64> = BTreeMap::new();
    for block in traces.split("-----------+-------------------------------------------------------").skip(1) {
        let lines: Vec<&str> = block
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("kernel:") && !l.starts_with("stall_reason:"))
            .collect();
        let Some((count, leaf)) = lines.first().and_then(|l| l.split_once(char::is_whitespace)) else { continue };
        let leaf = frame(leaf).split(':').next().unwrap().to_string();
        let callers: Vec<String> = lines[1..].iter().map(|l| frame(l)).collect();
        *stacks.entry((leaf, callers)).or_default() += count.parse::<u64>().unwrap();
    }
    let called: Vec<(&str, Vec<&str>, u64)> = stacks
        .iter()
        .filter(|(k, _)| !k.1.is_empty())
        .map(|((leaf, callers), n)| (leaf.as_str(), callers.iter().map(String::as_str).collect(), *n))
        .collect();
    assert_eq!(
        called,
        [
            (SLOW_PATH_NAME, vec!["ratio:40", "calls:51"], 9_238_419),
            ("gather", vec!["calls:46"], 5_367_982),
            ("gather", vec!["calls:47"], 5_987_362),
            ("ratio", vec!["calls:51"], 2_269_196)
        ]
    );
    let own: u64 = stacks.iter().filter(|(k, _)| k.1.is_empty()).map(|(_, n)| *n).sum();
    assert_eq!(own, 1_368_625, "the kernel's own frame alone");
}

/// `gather(...) calls_workload.cu:33` -> `gather:33` (an inlined frame's ` (inline)` left out); a frame without a
/// line keeps its name.
fn frame(text: &str) -> String {
    let text = text.trim().trim_end_matches("(inline)").trim_end();
    let name = text.split('(').next().unwrap().trim();
    match text.rsplit_once(':') {
        Some((_, line)) if line.trim().parse::<u32>().is_ok() => format!("{name}:{}", line.trim()),
        _ => name.to_string(),
    }
}
