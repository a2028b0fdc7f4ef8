//! `cupti-convert source` on a kernel that calls functions (fixtures/calls_workload_pcs.cutr): the functions are
//! always given; the call sites need nvdisasm, and where it is not installed or fails the report says call sites are
//! unknown and why, in text and JSON, and the rest of the report stands.

mod common;

use std::path::Path;
use std::process::Command;

use common::{fixture, path_str, text};

fn source(nvdisasm: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cupti-convert"))
        .args(["source", path_str(&fixture("calls_workload_pcs.cutr"))])
        .args(args)
        .env("CUTR_NVDISASM", nvdisasm)
        .output()
        .unwrap()
}

/// Exclusive and inclusive totals of the JSON report's functions, by name.
fn functions(json: &[u8]) -> (Vec<(String, u64, u64)>, serde_json::Value) {
    let j: serde_json::Value = serde_json::from_slice(json).unwrap();
    let k = &j["kernels"][0];
    let rows = k["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let name = f["name"].as_str().unwrap();
            (
                name.split('(').next().unwrap().to_string(),
                f["exclusive"].as_u64().unwrap(),
                f["inclusive"].as_u64().unwrap(),
            )
        })
        .collect();
    (rows, k["call_sites_unknown"].clone())
}

#[test]
fn without_nvdisasm_functions_are_given_and_call_sites_said_unknown() {
    // CUTR_NVDISASM empty: no nvdisasm, whatever is on the PATH.
    let o = source(Path::new(""), &["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let (rows, why) = functions(&o.stdout);
    assert_eq!(
        rows,
        [
            ("gather".to_string(), 11_355_344, 11_355_344),
            ("__cuda_sm3x_div_rn_noftz_f32_slowpath".to_string(), 9_238_419, 9_238_419),
            ("calls".to_string(), 3_637_821, 3_637_821)
        ]
    );
    assert_eq!(why, "nvdisasm is not installed (CUTR_NVDISASM, or nvdisasm on the PATH)");
    let t = text(&source(Path::new(""), &["--top", "2"]).stdout);
    assert!(
        t.contains(
            "  (call sites unknown: nvdisasm is not installed (CUTR_NVDISASM, or nvdisasm on the PATH); inclusive \
             figures are the exclusive ones)"
        ),
        "{t}"
    );
    assert!(t.contains("   9,238,419  38.1%  (no line) in __cuda_sm3x_div_rn_noftz_f32_slowpath "), "{t}");
}

#[test]
fn a_failing_nvdisasm_is_said_and_the_functions_stand() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("nvdisasm");
    std::fs::write(&script, "#!/bin/sh\necho 'nvdisasm fatal : bad cubin' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = source(&script, &["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let (rows, why) = functions(&o.stdout);
    assert_eq!(rows.iter().map(|r| r.1).sum::<u64>(), 24_231_584);
    assert_eq!(why, "nvdisasm could not read its cubin: nvdisasm fatal : bad cubin");
    assert_eq!(
        text(&o.stderr),
        "cupti-convert: warning: nvdisasm could not read cubin 0x36175233: nvdisasm fatal : bad cubin\n"
    );
}
