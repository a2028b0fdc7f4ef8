//! The OS names of the recorded process's threads (`/proc/self/task/<tid>/comm`, what `pthread_setname_np`
//! sets: PyTorch's autograd thread, NCCL's proxy threads, a data loader's workers), read on the recorder's own
//! thread at each flush, so that viewers can call a thread "pt_autograd_0" rather than only by its number.
//! A thread that starts and ends between two flushes is missed; the converters then show its number alone.
//!
//! The recorder's own threads are all started by [`spawn`], named `cutr-...`: the converters leave out what
//! such threads record (a PM sampling decoder's `cuDeviceGet`, NVML's device queries), so their names must reach
//! the file even when they live between two flushes (a decoder of a device set up late). Each registers its name
//! as it starts, and the name stays registered after the thread ended, until its thread id is another thread's.

use std::collections::HashMap;
use std::sync::Mutex;
use std::thread::JoinHandle;

/// The start of every recorder thread's name (what the converters look for).
pub(crate) const RECORDER_THREAD_PREFIX: &str = "cutr-";

/// A recorder thread's registered name.
struct Own {
    tid: u32,
    name: String,
    ended: bool,
}

/// The recorder's threads, registered as they start ([`spawn`]).
static OWN: Mutex<Vec<Own>> = Mutex::new(Vec::new());

fn own() -> std::sync::MutexGuard<'static, Vec<Own>> {
    OWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts a recorder thread named `name` (`cutr-...`), whose name reaches the file even if it ends before the
/// next flush.
pub(crate) fn spawn<T: Send + 'static>(
    name: impl Into<String>,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    let name = name.into();
    debug_assert!(name.starts_with(RECORDER_THREAD_PREFIX), "{name}");
    std::thread::Builder::new().name(name.clone()).spawn(move || {
        let _registered = Registered::new(name);
        f()
    })
}

/// A recorder thread's registration, marked ended when the thread's closure returns or unwinds.
struct Registered(u32);

impl Registered {
    fn new(name: String) -> Registered {
        let tid = crate::ffi::os::thread_id();
        let mut own = own();
        own.retain(|o| o.tid != tid);
        own.push(Own { tid, name, ended: false });
        Registered(tid)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        for o in own().iter_mut().filter(|o| o.tid == self.0) {
            o.ended = true;
        }
    }
}

/// The most thread names remembered as written: a program that starts threads for hours (a pool that renews its
/// workers) would otherwise grow the table without end. Past it, the names of threads that have ended are
/// forgotten (a record of theirs still to come shows its number alone, in the parts of a split recording after).
pub(crate) const MAX_THREAD_NAMES: usize = 1 << 16;

/// The names written so far, to write only what is new or changed.
#[derive(Default)]
pub(crate) struct ThreadNames {
    written: HashMap<u32, String>,
    /// Set by [`ThreadNames::write_all_again`]: the next scan returns every name known, not only what changed.
    again: bool,
}

impl ThreadNames {
    /// The next [`ThreadNames::changed`] returns every name known (live threads' and those written before, of
    /// threads that may have ended): a new part of a split recording names the threads of its records.
    pub fn write_all_again(&mut self) {
        self.again = true;
    }

    /// How many names are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.written.len()
    }

    /// Names of live threads and of the recorder's (by their registered names, whole where /proc cuts them at 15
    /// bytes; those that ended included) not yet written, or renamed since; marks them written. A recorder thread
    /// that ended is forgotten once its thread id is a live thread's again.
    pub fn changed(&mut self) -> Vec<(u32, String)> {
        let mut now: HashMap<u32, String> = live_threads().into_iter().collect();
        {
            let mut own = own();
            own.retain(|o| !(o.ended && now.contains_key(&o.tid)));
            for o in own.iter() {
                now.insert(o.tid, o.name.clone());
            }
        }
        if self.written.len() + now.len() > MAX_THREAD_NAMES {
            self.written.retain(|tid, _| now.contains_key(tid));
        }
        let again = std::mem::take(&mut self.again);
        let mut out: Vec<(u32, String)> =
            now.into_iter().filter(|(tid, name)| again || self.written.get(tid) != Some(name)).collect();
        for (tid, name) in &out {
            self.written.insert(*tid, name.clone());
        }
        if again {
            let listed: std::collections::HashSet<u32> = out.iter().map(|(t, _)| *t).collect();
            out.extend(self.written.iter().filter(|(t, _)| !listed.contains(t)).map(|(t, n)| (*t, n.clone())));
        }
        out.sort_unstable();
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
    fn a_recorder_thread_that_ended_before_the_scan_is_named() {
        let tid = spawn("cutr-test-ended", crate::ffi::os::thread_id).unwrap().join().unwrap();
        let mut names = ThreadNames::default();
        let first: Vec<(u32, String)> = names.changed().into_iter().filter(|(t, _)| *t == tid).collect();
        assert_eq!(first, [(tid, "cutr-test-ended".to_string())], "ended, not in /proc, still named");
        assert!(!names.changed().iter().any(|(t, _)| *t == tid), "written once");
        // Its name is whole where /proc cuts it at 15 bytes.
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let live = spawn("cutr-control-sig", move || {
            tx.send(crate::ffi::os::thread_id()).unwrap();
            let _ = wait.recv();
        })
        .unwrap();
        let tid = rx.recv().unwrap();
        let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap();
        assert_eq!(comm.trim_end(), "cutr-control-si");
        assert!(names.changed().contains(&(tid, "cutr-control-sig".to_string())));
        go.send(()).unwrap();
        live.join().unwrap();
    }

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

    /// Scans over a long run write a live thread's name once; a new part gets every name written before.
    #[test]
    fn a_name_is_written_once_and_a_new_part_gets_them_all() {
        let mut names = ThreadNames::default();
        let first = names.changed();
        let me = crate::ffi::os::thread_id();
        assert!(first.iter().any(|(t, _)| *t == me));
        for _ in 0..2_000 {
            assert!(!names.changed().iter().any(|(t, _)| *t == me));
        }
        names.write_all_again();
        let again = names.changed();
        assert!(first.iter().all(|(t, _)| again.iter().any(|(a, _)| a == t)), "{first:?} {again:?}");
        assert_eq!(names.len(), again.len());
    }
}
