//! Helpers shared by the end-to-end tests: where the outside clients and NVIDIA's libraries are.

use std::path::PathBuf;

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
