//! The export's directory as a whole, written the way a trace is: into a fresh temporary directory beside it,
//! renamed into place once every table is complete. A failed or interrupted export leaves the export that was
//! there before intact and no table half-written; the temporary directory is made by this process (`mkdir`,
//! which never follows a link), so a link planted in the output directory is never written through: the old
//! directory, links and all, is moved aside and removed by name.
//!
//! A directory that holds anything an export does not write is refused, never replaced: `--parquet ~/work`
//! must not delete `~/work`'s other files.

use std::io;
use std::path::{Path, PathBuf};

use crate::TablesError;
use crate::tables::TABLES;

/// Where an export's tables are written before they replace `target`.
pub(crate) struct Staging {
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
    _removed_on_interrupt: cutr_cleanup::Registered,
}

/// `dir` through its symbolic links (a link stays a link; its target is replaced), refused where it is not a
/// directory, or holds entries no export writes.
pub(crate) fn check(dir: &Path) -> Result<PathBuf, TablesError> {
    let target = normal(&cutr_cleanup::resolve_links(&normal(dir)));
    let refuse = |why: String| Err(TablesError::Target(dir.display().to_string(), why));
    if target.file_name().is_none() {
        // `.`, `..`, `/`: nothing to put a directory beside, nor to rename.
        return refuse("name the directory itself, not . or .. or /".into());
    }
    match std::fs::symlink_metadata(&target) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(target),
        Err(e) => return Err(TablesError::Io(dir.display().to_string(), e)),
        Ok(m) if !m.is_dir() => return refuse("it is not a directory".into()),
        Ok(_) => {}
    }
    let entries = std::fs::read_dir(&target).map_err(|e| TablesError::Io(dir.display().to_string(), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| TablesError::Io(dir.display().to_string(), e))?;
        let name = entry.file_name();
        if !is_export_entry(&name.to_string_lossy()) {
            return refuse(format!(
                "it holds {}, which no export writes: give a new or empty directory, or an earlier export's \
                 (replaced as a whole)",
                name.to_string_lossy()
            ));
        }
    }
    Ok(target)
}

/// A table's file (one recording) or directory (Hive partitions).
fn is_export_entry(name: &str) -> bool {
    TABLES.iter().any(|t| name == *t || name.strip_suffix(".parquet") == Some(t))
}

/// `path` without `.` components and trailing slashes (`out/` is `out`, whose temporary directory goes beside it,
/// not inside).
fn normal(path: &Path) -> PathBuf {
    path.components().collect()
}

/// `<target>.<what>-<pid>-<n>`, the first `n` whose name is free.
fn beside(target: &Path, what: &str, n: u32) -> PathBuf {
    let mut name = target.as_os_str().to_owned();
    name.push(format!(".{what}-{}-{n}", std::process::id()));
    PathBuf::from(name)
}

impl Staging {
    /// A new, empty directory beside `target` (its parents made), removed if the process is interrupted.
    pub(crate) fn new(target: &Path) -> Result<Staging, TablesError> {
        let io_err = |p: &Path, e| TablesError::Io(p.display().to_string(), e);
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
        }
        for n in 0.. {
            let tmp = beside(target, "tmp", n);
            let made = cutr_cleanup::hold(|| {
                let registered = cutr_cleanup::remove_on_interrupt(&tmp);
                std::fs::create_dir(&tmp).map(|()| registered)
            });
            match made {
                Ok(registered) => {
                    return Ok(Staging {
                        tmp,
                        target: target.to_path_buf(),
                        committed: false,
                        _removed_on_interrupt: registered,
                    });
                }
                // Not ours (a leftover, or planted): never entered; the next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => {}
                Err(e) => return Err(io_err(&tmp, e)),
            }
        }
        unreachable!("the loop returns")
    }

    /// Where the tables go.
    pub(crate) fn path(&self) -> &Path {
        &self.tmp
    }

    /// Puts the complete export in place of `target`: the old one (checked again: nothing foreign may have come
    /// in meanwhile) is moved aside, the new one renamed in, the old one removed; if the rename fails, the old one
    /// is moved back. A signal meanwhile waits for the swap (`cutr_cleanup::hold`), then finds the old export
    /// aside and removes it, or the new one still in its temporary directory and removes that.
    pub(crate) fn commit(mut self) -> Result<(), TablesError> {
        let target = check(&self.target)?;
        let io_err = |p: &Path, e| TablesError::Io(p.display().to_string(), e);
        let swapped = cutr_cleanup::hold(|| -> Result<Option<(PathBuf, cutr_cleanup::Registered)>, TablesError> {
            let aside = match std::fs::symlink_metadata(&target) {
                Ok(_) => {
                    let aside = (0..)
                        .map(|n| beside(&target, "old", n))
                        .find(|p| std::fs::symlink_metadata(p).is_err())
                        .expect("a free name");
                    let registered = cutr_cleanup::remove_on_interrupt(&aside);
                    std::fs::rename(&target, &aside).map_err(|e| io_err(&target, e))?;
                    Some((aside, registered))
                }
                Err(_) => None,
            };
            if let Err(e) = std::fs::rename(&self.tmp, &target) {
                if let Some((aside, _)) = &aside {
                    let _ = std::fs::rename(aside, &target);
                }
                return Err(io_err(&target, e));
            }
            Ok(aside)
        })?;
        self.committed = true;
        if let Some((aside, _registered)) = swapped {
            // The new export is in place; an old one that cannot be removed is only space.
            let _ = std::fs::remove_dir_all(&aside);
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Not committed: an error happened; no half-written export stays behind.
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_commit_replaces_an_old_export_whole_and_a_drop_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("out");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("kernels.parquet"), b"old").unwrap();
        std::fs::create_dir(target.join("api_calls")).unwrap();
        let staged = Staging::new(&check(&target).unwrap()).unwrap();
        std::fs::write(staged.path().join("kernels.parquet"), b"new").unwrap();
        drop(staged);
        assert_eq!(names(root.path()), ["out"], "an uncommitted export leaves nothing");
        // A trailing slash names the same directory: the temporary one goes beside it, not inside.
        let slashed = check(Path::new(&format!("{}/", target.display()))).unwrap();
        assert_eq!(slashed, target);
        assert_eq!(names(&target), ["api_calls", "kernels.parquet"], "and the old one as it was");
        let staged = Staging::new(&check(&target).unwrap()).unwrap();
        std::fs::write(staged.path().join("kernels.parquet"), b"new").unwrap();
        staged.commit().unwrap();
        assert_eq!(names(root.path()), ["out"]);
        assert_eq!(names(&target), ["kernels.parquet"]);
        assert_eq!(std::fs::read(target.join("kernels.parquet")).unwrap(), b"new");
    }

    #[test]
    fn a_directory_with_other_files_or_a_file_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let mine = root.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        std::fs::write(mine.join("notes.txt"), b"keep").unwrap();
        let err = check(&mine).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{}: it holds notes.txt, which no export writes: give a new or empty directory, or an earlier \
                 export's (replaced as a whole)",
                mine.display()
            )
        );
        for bare in [".", "..", "/", "out/.."] {
            let err = check(Path::new(bare)).unwrap_err().to_string();
            assert_eq!(err, format!("{bare}: name the directory itself, not . or .. or /"));
        }
        let file = root.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(check(&file).unwrap_err().to_string(), format!("{}: it is not a directory", file.display()));
    }
}
