//! `export --parquet DIR` writes the directory as a whole: a failed export (a full disk, stood in for by a file
//! size limit) leaves the earlier export byte-identical and nothing beside it; a link planted in the output
//! directory is never written through; a directory of other files is refused, untouched; a new export replaces an
//! older one of another layout entirely.

mod common;

use std::path::{Path, PathBuf};

use common::{fixture, names, run, snapshot, stderr_lines, text};

fn export(files: &[PathBuf], dir: &Path) -> std::process::Output {
    let mut args = vec!["export".to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    args.extend(["--parquet".to_string(), dir.display().to_string()]);
    run(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A full disk, as RLIMIT_FSIZE makes one (root ignores a read-only directory): every table file past 64 blocks
/// fails with EFBIG (SIGXFSZ ignored, as a shell's `trap` leaves it across exec). The export exits 1 naming the
/// error, the earlier export is byte-identical, and no temporary directory is left.
#[test]
fn a_failed_export_leaves_the_earlier_one_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("tables");
    let o = export(&[fixture("cuda_workload.cutr")], &tables);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let before = snapshot(&tables);
    assert_eq!(before.len(), 13);
    // One recording (a file per table), then two (Hive partitions: a directory per table).
    let ranks = [fixture("allreduce/allreduce-588.cutr"), fixture("allreduce/allreduce-589.cutr")];
    for inputs in [&[fixture("pytorch_loop.cutr")][..], &ranks] {
        let o = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"trap '' XFSZ; ulimit -f 64; dir="$1"; shift; exec "$0" export "$@" --parquet "$dir""#)
            .arg(env!("CARGO_BIN_EXE_cupti-convert"))
            .arg(&tables)
            .args(inputs)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
        let lines = stderr_lines(&o);
        let error = lines.last().unwrap();
        let head = format!("cupti-convert: error: cannot write {}: {}.tmp-", tables.display(), tables.display());
        assert!(error.starts_with(&head), "{error}");
        assert!(error.ends_with("File too large (os error 27)"), "{error}");
        assert!(snapshot(&tables) == before, "the earlier export changed");
        assert_eq!(names(dir.path()), ["tables"], "nothing left beside it");
    }
}

/// An earlier export whose `kernels.parquet` is a link to a file outside, and whose `api_calls` is a link to a
/// directory outside: the new export replaces the links with its own tables, and what they pointed to is as it
/// was.
#[test]
fn a_link_planted_in_the_output_directory_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("tables");
    assert_eq!(export(&[fixture("cuda_workload.cutr")], &tables).status.code(), Some(0));
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    let victim_dir = dir.path().join("victim_dir");
    std::fs::create_dir(&victim_dir).unwrap();
    std::fs::write(victim_dir.join("keep.txt"), b"mine").unwrap();
    std::fs::remove_file(tables.join("kernels.parquet")).unwrap();
    std::os::unix::fs::symlink(&victim, tables.join("kernels.parquet")).unwrap();
    std::fs::remove_file(tables.join("api_calls.parquet")).unwrap();
    std::os::unix::fs::symlink(&victim_dir, tables.join("api_calls")).unwrap();
    let o = export(&[fixture("cuda_workload.cutr")], &tables);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(names(&victim_dir), ["keep.txt"]);
    assert_eq!(std::fs::read(victim_dir.join("keep.txt")).unwrap(), b"mine");
    let kernels = std::fs::symlink_metadata(tables.join("kernels.parquet")).unwrap();
    assert!(kernels.is_file(), "a table of its own, not the link");
    assert_eq!(&std::fs::read(tables.join("kernels.parquet")).unwrap()[..4], b"PAR1");
    assert_eq!(names(&tables).len(), 13);
    assert!(names(&tables).iter().all(|n| n.ends_with(".parquet")), "{:?}", names(&tables));
    assert_eq!(names(dir.path()), ["tables", "victim.txt", "victim_dir"], "nothing else left beside it");
}

/// `--parquet` naming a directory that holds anything an export does not write: refused before any work, with
/// the entry named, the directory untouched.
#[test]
fn a_directory_of_other_files_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("notes.txt"), b"mine").unwrap();
    std::fs::write(work.join("kernels.parquet"), b"not a table of ours, by its name one").unwrap();
    let before = snapshot(&work);
    let o = export(&[fixture("cuda_workload.cutr")], &work);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr_lines(&o),
        [format!(
            "cupti-convert: error: cannot write tables to {}: it holds notes.txt, which no export writes: give a new \
             or empty directory, or an earlier export's (replaced as a whole)",
            work.display()
        )]
    );
    assert!(snapshot(&work) == before);
    assert_eq!(names(dir.path()), ["work"]);
}

/// A two-rank export (Hive partitions: a directory per table) replaced by a one-recording export (a file per
/// table): nothing of the old layout stays; an empty directory takes an export.
#[test]
fn an_export_replaces_an_older_one_as_a_whole() {
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("tables");
    let ranks = [fixture("allreduce/allreduce-588.cutr"), fixture("allreduce/allreduce-589.cutr")];
    assert_eq!(export(&ranks, &tables).status.code(), Some(0));
    assert!(tables.join("kernels").is_dir(), "{:?}", names(&tables));
    let o = export(&[fixture("cuda_workload.cutr")], &tables);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let want: Vec<String> = [
        "api_calls",
        "counters",
        "devices",
        "graph_nodes",
        "kernels",
        "memcpy",
        "memory_usage",
        "memset",
        "nvtx_marks",
        "nvtx_ranges",
        "processes",
        "syncs",
        "um",
    ]
    .iter()
    .map(|t| format!("{t}.parquet"))
    .collect();
    assert_eq!(names(&tables), want);
    assert_eq!(names(dir.path()), ["tables"]);
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(export(&[fixture("cuda_workload.cutr")], &empty).status.code(), Some(0));
    assert_eq!(names(&empty), want);
    assert_eq!(names(dir.path()), ["empty", "tables"]);
}
