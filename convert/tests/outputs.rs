//! Where `cupti-convert` writes, and what it says about damaged inputs: devices and FIFOs written in place, `-`
//! for stdout, a full disk reported, an input never overwritten, a closed stdout ending quietly; every command
//! warning about damage the same way.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(rel)
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cupti-convert"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("cupti-convert runs")
}

fn stderr(o: &Output) -> String {
    let e = String::from_utf8(o.stderr.clone()).unwrap();
    assert!(!e.contains("panicked"), "panic: {e}");
    e
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn devices_are_written_in_place_and_a_full_device_fails_the_command() {
    let f = fixture("cuda_workload.cutr");
    let o = run(&[s(&f), "--perfetto", "-q", "-o", "/dev/null"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(&std::fs::metadata("/dev/null").unwrap().file_type()));
    let o = run(&[s(&f), "--chrome", "-q", "-o", "/dev/full"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "cupti-convert: error: cannot write /dev/full: No space left on device (os error 28)\n");
}

#[test]
fn a_dash_writes_the_trace_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture("cuda_workload.cutr");
    let file = dir.path().join("w.json");
    assert!(run(&[s(&f), "--chrome", "-q", "-o", s(&file)]).status.success());
    let o = run(&[s(&f), "--chrome", "-q", "-o", "-"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The same events; only traceName (the output's name) differs.
    let name = |b: &[u8]| {
        let v: serde_json::Value = serde_json::from_slice(b).unwrap();
        (v["traceEvents"].as_array().unwrap().len(), v["traceName"].as_str().unwrap().to_string())
    };
    let (n_file, _) = name(&std::fs::read(&file).unwrap());
    assert_eq!(name(&o.stdout), (n_file, "-".to_string()));
    // 704 complete events (the 705th slice, health, is an instant; 75 of them the NVTX ranges' GPU spans, on their
    // streams' rows; 175 driver queries left out), 212 arrows of two halves, the health instant, 3 + 3 process
    // metadata events (CPU, GPU), 13 rows named (2 events each), 24 device-memory counter values (one per
    // allocation or free): 704 + 424 + 1 + 6 + 26 + 24.
    assert_eq!(n_file, 1_185);
}

#[test]
fn the_default_output_goes_to_the_current_directory() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture("cuda_workload.cutr");
    let o = bin().current_dir(dir.path()).args([s(&f), "--perfetto", "-q"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(dir.path().join("cuda_workload.pftrace").is_file());
    assert!(!fixture("cuda_workload.pftrace").exists(), "nothing written beside the input");
}

#[test]
fn an_input_is_never_overwritten_and_a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("run.cutr");
    std::fs::copy(fixture("cuda_workload.cutr"), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    // The input by another name: a symbolic link to it.
    let alias = dir.path().join("alias.cutr");
    std::os::unix::fs::symlink(&input, &alias).unwrap();
    for out in [&input, &alias] {
        let o = run(&[s(&input), "--perfetto", "-o", s(out)]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("refusing to overwrite the recording"), "{}", stderr(&o));
    }
    assert_eq!(std::fs::read(&input).unwrap(), before);
    let o = run(&[s(&input), "--perfetto", "-o", s(dir.path())]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), format!("cupti-convert: error: cannot write {0}: {0}: is a directory\n", s(dir.path())));
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["alias.cutr", "run.cutr"], "no temporary file left");
}

/// A full disk under a regular file: a small tmpfs where the test may mount one (root, a kernel that allows it);
/// where it cannot, says so and checks nothing more (`/dev/full` above covers the report).
#[test]
fn a_full_disk_fails_the_command_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs", s(dir.path())])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|st| st.success());
    if !mounted {
        eprintln!("skipped: cannot mount a small tmpfs here (not root, or no mount permission)");
        return;
    }
    let out = dir.path().join("big.json");
    let o = run(&[s(&fixture("pytorch_loop_filtered.cutr")), "--chrome", "-q", "-o", s(&out)]);
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    let _ = Command::new("umount").arg(dir.path()).status();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("No space left on device"), "{}", stderr(&o));
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    for args in [vec!["info", "--json"], vec!["stats", "--json"], vec!["stats"]] {
        let mut child = bin()
            .args(&args)
            .arg(fixture("pytorch_loop.cutr"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read one byte, then close the pipe, as `| head -c 1` does.
        let mut out = child.stdout.take().unwrap();
        let mut one = [0u8; 1];
        std::io::Read::read_exact(&mut out, &mut one).unwrap();
        drop(out);
        let o = child.wait_with_output().unwrap();
        assert_eq!(stderr(&o), "", "{args:?}");
        // Ended by SIGPIPE (as `cat` would be), or done before the pipe closed.
        let by_pipe = std::os::unix::process::ExitStatusExt::signal(&o.status) == Some(13);
        assert!(by_pipe || o.status.success(), "{args:?}: {:?}", o.status);
    }
}

#[test]
fn every_command_warns_about_a_damaged_strings_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(fixture("cuda_workload.cutr")).unwrap();
    // The first strings chunk (seq 2 at byte 25992) with a payload byte flipped: its checksum fails.
    let strings = cutr_synth::forge::chunks_of(&bytes, cutr_format::ChunkType::Strings)[0];
    assert_eq!((strings.offset, strings.header.seq), (25_992, 2));
    bytes[strings.offset + 60] ^= 1;
    let p = dir.path().join("damaged.cutr");
    std::fs::write(&p, &bytes).unwrap();
    let warning = format!(
        "cupti-convert: warning: {}: strings chunk #2 at byte 25992 is damaged (payload checksum mismatch); skipped",
        p.display()
    );
    let out = dir.path().join("o.pftrace");
    let good = fixture("cuda_workload.cutr");
    for args in [
        vec![s(&p), "--perfetto", "-q", "-o", s(&out)],
        vec!["stats", s(&p), "--json"],
        vec!["diff", s(&good), s(&p), "--json"],
    ] {
        let o = run(&args);
        let e = stderr(&o);
        assert!(e.lines().any(|l| l == warning), "{args:?}: {e}");
        // The records whose names were in that chunk resolve to no name, and say so.
        assert!(e.contains("string pointers have no text in the file"), "{args:?}: {e}");
    }
    let o = run(&["stats", s(&p), "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["joins"]["damaged_chunks"], 1);
}
