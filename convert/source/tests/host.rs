//! Host function names from a real ELF: a C++ program compiled here with g++, its function's address and build
//! id read by binutils (`nm`, `readelf`), the outside clients that say what the answer must be.

use std::path::{Path, PathBuf};
use std::process::Command;

use cutr_source::host::{HostSymbols, Unresolved};

/// A PIE with one named function, `cutr::touch(char*, int)`.
const PROGRAM: &str = "namespace cutr { __attribute__((noinline)) int touch(char* p, int n) { int s = 0; \
    for (int i = 0; i < n; i += 4096) s += p[i]; return s; } }\n\
    int main(int c, char** v) { return cutr::touch(v[0], c); }\n";

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd} is needed: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Compiles the program with a build id; its path.
fn compile(dir: &Path) -> PathBuf {
    let src = dir.join("touch.cc");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.join("touch");
    run("g++", &["-O1", "-Wl,--build-id", "-o", exe.to_str().unwrap(), src.to_str().unwrap()]);
    exe
}

/// `nm`'s address of the function (in a PIE, also its file offset: ld lays text out at vaddr == offset).
fn nm_address(exe: &Path) -> u64 {
    let nm = run("nm", &[exe.to_str().unwrap()]);
    let line = nm.lines().find(|l| l.ends_with(" _ZN4cutr5touchEPci")).expect("nm lists the function");
    u64::from_str_radix(line.split(' ').next().unwrap(), 16).unwrap()
}

/// `readelf -n`'s build id.
fn readelf_build_id(exe: &Path) -> Vec<u8> {
    let notes = run("readelf", &["-n", exe.to_str().unwrap()]);
    let hex = notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("a build id note");
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn names_the_function_only_when_the_build_id_matches() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    let path = exe.to_str().unwrap();
    let (offset, id) = (nm_address(&exe), readelf_build_id(&exe));
    assert_eq!(id.len(), 20);
    let mut s = HostSymbols::new();
    assert_eq!(s.build_id(path).unwrap(), id);
    // Inside the function (a few bytes past its entry), at its entry; then the file's header, before any function.
    assert_eq!(s.function(path, &id, offset + 4).as_deref(), Ok("_ZN4cutr5touchEPci"));
    assert_eq!(s.function(path, &id, offset).as_deref(), Ok("_ZN4cutr5touchEPci"));
    assert_eq!(s.function(path, &id, 0x10), Err(Unresolved::NoSymbol));
    assert_eq!(s.function(path, &id, 1 << 40), Err(Unresolved::OutsideSegments));
    let mut other = id.clone();
    other[0] ^= 1;
    assert_eq!(s.function(path, &other, offset), Err(Unresolved::BuildIdDiffers));
    assert_eq!(s.function(path, &[], offset), Err(Unresolved::NoBuildId));
    assert_eq!(s.function("/nonexistent/libfoo.so", &id, offset), Err(Unresolved::NotReadable));
    // A FIFO (a hostile recording's path) is refused before it is opened: opening it would wait for a writer.
    let fifo = dir.path().join("fifo");
    run("mkfifo", &[fifo.to_str().unwrap()]);
    assert_eq!(s.function(fifo.to_str().unwrap(), &id, 0), Err(Unresolved::NotReadable));
    assert_eq!(s.function("/dev/zero", &id, 0), Err(Unresolved::NotReadable));
    let text = dir.path().join("touch.cc");
    assert_eq!(s.function(text.to_str().unwrap(), &id, 0), Err(Unresolved::NotElf));
    assert_eq!(Unresolved::NotReadable.as_str(), "file not readable here");
    assert_eq!(Unresolved::BuildIdDiffers.as_str(), "build id differs");
}

#[test]
fn a_file_not_at_its_recorded_path_is_found_by_name_in_the_search_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    let (offset, id) = (nm_address(&exe), readelf_build_id(&exe));
    // The recording names another machine's path; the same build sits in a directory given to search.
    let recorded = "/tmp/gone-on-this-machine/touch";
    assert_eq!(HostSymbols::new().function(recorded, &id, offset), Err(Unresolved::NotReadable));
    let empty = tempfile::tempdir().unwrap();
    let mut s = HostSymbols::with_search_dirs(vec![empty.path().to_path_buf(), dir.path().to_path_buf()]);
    assert_eq!(s.function(recorded, &id, offset).as_deref(), Ok("_ZN4cutr5touchEPci"));
    // Found, but another build: not named.
    assert_eq!(s.function(recorded, &[9; 20], offset), Err(Unresolved::BuildIdDiffers));
}
