//! The functions of a kernel's code section and its call sites, on calls_workload's real cubin
//! (fixtures/cubins/calls_workload.sm_90.cubin, nvcc -lineinfo, sm_90), against what nvdisasm 13.5 printed of it
//! (`nvdisasm -c -g -gi`, fixtures/cubins/calls_workload.sm_90.nvdisasm.txt).

use cutr_source::{CallSite, FunctionKind, SourceMap};

const KERNEL: &str = "_Z5callsPKjPKfS2_iiPf";
const GATHER: &str = "$_Z5callsPKjPKfS2_iiPf$_Z6gatherPKjji";
const SLOW_PATH: &str = "$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath";

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/cubins").join(name)
}

/// `(offset, instruction)` of the kernel's section in nvdisasm's listing.
fn listing() -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(fixture("calls_workload.sm_90.nvdisasm.txt")).unwrap();
    let mut out = Vec::new();
    let mut in_kernel = false;
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix(".text.").and_then(|n| n.strip_suffix(':')) {
            in_kernel = name == KERNEL;
        }
        let Some((offset, rest)) = line.strip_prefix("/*").and_then(|r| r.split_once("*/")) else { continue };
        if in_kernel {
            out.push((u64::from_str_radix(offset, 16).unwrap(), rest.trim().trim_end_matches(';').trim().to_string()));
        }
    }
    out
}

#[test]
fn the_kernel_section_holds_the_kernel_gather_and_the_division_slow_path() {
    let map = SourceMap::from_cubin(&std::fs::read(fixture("calls_workload.sm_90.cubin")).unwrap()).unwrap();
    let code: Vec<(&str, &str, u64, u64, FunctionKind)> = map
        .code_functions(KERNEL)
        .iter()
        .map(|f| (f.symbol.as_str(), f.name.as_str(), f.start, f.size, f.kind))
        .collect();
    assert_eq!(
        code,
        [
            (KERNEL, KERNEL, 0, 0x1d80, FunctionKind::Kernel),
            (GATHER, "_Z6gatherPKjji", 0xa80, 2960, FunctionKind::DeviceFunction),
            (SLOW_PATH, "__cuda_sm3x_div_rn_noftz_f32_slowpath", 0x1610, 1904, FunctionKind::Subroutine),
        ]
    );
    // The other kernel of the cubin calls nothing.
    assert_eq!(map.code_functions("_Z5linesPKjPKfiPf").len(), 1);
    assert!(map.code_functions("nope").is_empty());
    let at = |pc| map.function_at(KERNEL, pc);
    assert_eq!(
        [at(0xa70), at(0xa80), at(0x1600), at(0x1610), at(0x1c80), at(0x1d80)],
        [Some(0), Some(1), Some(1), Some(2), Some(2), None]
    );
    // The slow path has no line rows: the last row before it (gather's `return sum;`, line 36) is what NVIDIA's
    // map gives, and no line of the slow path's own.
    let line = |pc| map.line_key(KERNEL, pc).map(|k| k.line);
    let own = |pc| map.line_key_in_function(KERNEL, pc).map(|k| k.line);
    assert_eq!((line(0x1c80), own(0x1c80), own(0x1610)), (Some(36), None, None));
    assert_eq!((own(0x1600), own(0xbf0), own(0xb0)), (Some(36), Some(33), Some(46)));
    assert_eq!(map.locate_in_function(KERNEL, 0x1c80), None);
    assert_eq!(map.locate_in_function(KERNEL, 0xbf0).unwrap().position.line, 33);
}

/// Every CALL nvdisasm prints, resolved to the functions of the section, with the line of its call site: gather's
/// two (lines 46 and 47, CALL-A and CALL-B) and the slow path's five (line 40, `a / b`, inlined at 51).
#[test]
fn call_sites_from_nvdisasm_s_listing() {
    let map = SourceMap::from_cubin(&std::fs::read(fixture("calls_workload.sm_90.cubin")).unwrap()).unwrap();
    let listing = listing();
    assert_eq!(listing.len(), 0x1d80 / 16, "every instruction of the section");
    let sites = map.call_sites(KERNEL, listing.iter().map(|(o, t)| (*o, t.as_str())));
    let site = |offset, callee| CallSite { offset, caller: 0, callee };
    assert_eq!(
        sites,
        [site(0xb0, 1), site(0x120, 1), site(0x380, 2), site(0x4e0, 2), site(0x650, 2), site(0x7a0, 2), site(0x9b0, 2)]
    );
    assert_eq!(sites[0].return_offset(), 0xc0);
    let lines: Vec<(u32, Vec<u32>)> = sites
        .iter()
        .map(|s| {
            let l = map.locate_in_function(KERNEL, s.offset).unwrap();
            (l.position.line, l.inlined_at.iter().map(|(_, p)| p.line).collect())
        })
        .collect();
    assert_eq!(
        lines,
        [(46, vec![]), (47, vec![]), (40, vec![51]), (40, vec![51]), (40, vec![51]), (40, vec![51]), (40, vec![51])]
    );
    // Calls to what is not a function of the section are no call sites.
    assert_eq!(map.call_sites(KERNEL, [(0x10, "CALL.REL.NOINC `(elsewhere)"), (0x20, "RET.REL.NODEC R8 `(x)")]), []);
}
