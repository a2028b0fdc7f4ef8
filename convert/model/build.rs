//! Links the C++ runtime's demangler (`__cxa_demangle`, see src/demangle.rs) statically when the toolchain has
//! `libstdc++.a`: loading the shared libstdc++ costs every `cupti-convert` process ~0.5 ms of dynamic loading
//! (measured: an empty C program takes 0.54 ms, 1.0 ms when linked against libstdc++.so), a tenth of converting a
//! small recording. Only the demangler's objects are pulled out of the archive. Without the archive (another
//! toolchain), the shared library is linked as before.

use std::path::PathBuf;
use std::process::Command;

fn static_libstdcxx_dir() -> Option<PathBuf> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".to_string());
    let out = Command::new(cxx).arg("-print-file-name=libstdc++.a").output().ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    // g++ echoes the bare name back when it has no such file.
    (path.is_absolute() && path.is_file()).then(|| path.parent().map(PathBuf::from)).flatten()
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CXX");
    match static_libstdcxx_dir() {
        Some(dir) => {
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=static=stdc++");
        }
        None => println!("cargo:rustc-link-lib=dylib=stdc++"),
    }
}
