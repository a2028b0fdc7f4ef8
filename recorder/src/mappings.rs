//! The process's executable mappings, kept in the file's metadata at the end of a recording so that converters
//! can name host code addresses offline (the instruction of a CPU page fault; call stacks), and tell whether the
//! binary they find is the one that ran (its GNU build id).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cutr_format::Mapping;
use object::Object;
use procfs::process::{MMPermissions, MMapPath, Process};

/// Every mapping of this process with execute permission, in address order.
pub fn executable_mappings() -> Result<Vec<Mapping>, String> {
    let maps = Process::myself().and_then(|p| p.maps()).map_err(|e| format!("/proc/self/maps: {e}"))?;
    let mut build_ids: HashMap<PathBuf, Vec<u8>> = HashMap::new();
    let mut out = Vec::new();
    for m in maps {
        if !m.perms.contains(MMPermissions::EXECUTE) {
            continue;
        }
        let (path, build_id) = match &m.pathname {
            MMapPath::Path(p) => {
                let id = build_ids.entry(p.clone()).or_insert_with(|| build_id(p).unwrap_or_default()).clone();
                (p.display().to_string(), id)
            }
            MMapPath::Vdso => ("[vdso]".to_string(), Vec::new()),
            MMapPath::Vsyscall => ("[vsyscall]".to_string(), Vec::new()),
            MMapPath::Anonymous => (String::new(), Vec::new()),
            other => (format!("{other:?}"), Vec::new()),
        };
        out.push(Mapping { start: m.address.0, end: m.address.1, file_offset: m.offset, path, build_id });
    }
    Ok(out)
}

/// The file's GNU build id. Reads only the headers and the note it needs (a 1 GB library costs a few pages). The
/// path may have been replaced since it was mapped: opened without blocking (a FIFO would hang the recording's
/// end), and read only if it is a regular file (`/dev/zero` would never end).
fn build_id(path: &Path) -> Option<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let cache = object::ReadCache::new(file);
    let file = object::File::parse(&cache).ok()?;
    file.build_id().ok().flatten().map(<[u8]>::to_vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_is_mapped_with_its_build_id() {
        let maps = executable_mappings().unwrap();
        let here = this_test_binary_is_mapped_with_its_build_id as *const () as usize as u64;
        let m = maps.iter().find(|m| (m.start..m.end).contains(&here)).expect("the test's own code is mapped");
        let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
        assert_eq!(Path::new(&m.path), exe);
        // The build id binutils reads from the same file.
        let readelf = std::process::Command::new("readelf").arg("-n").arg(&exe).output().unwrap();
        let notes = String::from_utf8_lossy(&readelf.stdout);
        let expected = notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("a build id");
        let hex: String = m.build_id.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected);
        assert!(maps.windows(2).all(|w| w[0].start < w[1].start));
    }

    /// A mapped path replaced by a FIFO or a device gives no build id (and does not hang: opened non-blocking).
    #[test]
    fn paths_that_are_not_regular_files_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert_eq!(build_id(&fifo), None);
        assert_eq!(build_id(Path::new("/dev/zero")), None);
        assert_eq!(build_id(&dir.path().join("missing")), None);
    }
}
