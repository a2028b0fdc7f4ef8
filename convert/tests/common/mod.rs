//! What the `cupti-convert` binary tests share: the fixtures' paths, running the binary, its output as text.
#![allow(dead_code)] // each test file uses its own share of these

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(rel)
}

pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cupti-convert")).args(args).output().expect("cupti-convert runs")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("UTF-8 output")
}

/// Lines of stderr; none may be a panic, and none may carry progress-bar control characters.
pub fn stderr_lines(o: &Output) -> Vec<String> {
    let e = text(&o.stderr);
    assert!(!e.contains("panicked"), "panic: {e}");
    assert!(!e.contains('\r') && !e.contains('\x1b'), "control characters on a non-terminal stderr: {e:?}");
    e.lines().map(str::to_string).collect()
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// Every file under `dir` with its bytes, by path relative to `dir` (links as links: their targets), sorted.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        let m = std::fs::symlink_metadata(&p).unwrap();
        let rel = PathBuf::from(p.file_name().unwrap());
        if m.is_dir() {
            out.extend(snapshot(&p).into_iter().map(|(r, b)| (rel.join(r), b)));
        } else if m.file_type().is_symlink() {
            out.push((rel, std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes()));
        } else {
            out.push((rel, std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}
