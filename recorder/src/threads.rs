//! The OS names of the recorded process's threads (`/proc/self/task/<tid>/comm`, what `pthread_setname_np`
//! sets: PyTorch's autograd thread, NCCL's proxy threads, a data loader's workers), read on the recorder's own
//! thread at each flush, so that viewers can call a thread "pt_autograd_0" rather than only by its number.
//! A thread that starts and ends between two flushes is missed; the converters then show its number alone.

use std::collections::HashMap;

/// The names written so far, to write only what is new or changed.
#[derive(Default)]
pub(crate) struct ThreadNames {
    written: HashMap<u32, String>,
}

impl ThreadNames {
    /// Names of live threads not yet written, or renamed since; marks them written.
    pub fn changed(&mut self) -> Vec<(u32, String)> {
        let mut out: Vec<(u32, String)> =
            live_threads().into_iter().filter(|(tid, name)| self.written.get(tid) != Some(name)).collect();
        out.sort_unstable();
        for (tid, name) in &out {
            self.written.insert(*tid, name.clone());
        }
        out
    }
}

/// `(tid, name)` of every thread of this process now; none where /proc is not mounted.
fn live_threads() -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some((tid, name.trim_end_matches('\n').to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_thread_is_found_once_and_again_when_renamed() {
        let mut names = ThreadNames::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("cutr-test-1".into())
            .spawn(move || {
                tx.send(crate::ffi::os::thread_id()).unwrap();
                let _ = wait.recv();
            })
            .unwrap();
        let tid = rx.recv().unwrap();
        let first = names.changed();
        assert!(first.contains(&(tid, "cutr-test-1".to_string())), "{first:?}");
        assert!(!names.changed().iter().any(|(t, _)| *t == tid), "written once");
        std::fs::write(format!("/proc/self/task/{tid}/comm"), "renamed").unwrap();
        assert_eq!(
            names.changed().into_iter().filter(|(t, _)| *t == tid).collect::<Vec<_>>(),
            [(tid, "renamed".to_string())]
        );
        go.send(()).unwrap();
        t.join().unwrap();
    }
}
