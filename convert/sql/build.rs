//! Links `cupti-convert-sql` to DuckDB's prebuilt library (unless the `bundled` feature compiles DuckDB in), and
//! lets it find that library at run time without LD_LIBRARY_PATH: beside itself, in `../lib` (tools/install.sh),
//! or where tools/fetch-duckdb.sh put it.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    if std::env::var_os("CARGO_FEATURE_BUNDLED").is_some() {
        return;
    }
    let Some(dir) = std::env::var_os("DUCKDB_LIB_DIR").map(PathBuf::from) else {
        panic!(
            "DUCKDB_LIB_DIR is not set: run tools/fetch-duckdb.sh (the repository's .cargo/config.toml names its directory)"
        );
    };
    if !dir.join("libduckdb.so").is_file() {
        panic!(
            "{}/libduckdb.so is missing: run tools/fetch-duckdb.sh first (with CUTR_CACHE set, build with \
             DUCKDB_LIB_DIR=$(tools/fetch-duckdb.sh)), or build with --features bundled",
            dir.display()
        );
    }
    println!("cargo:rerun-if-changed={}", dir.join("libduckdb.so").display());
    println!("cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN:$ORIGIN/../lib:{}", dir.display());
}
