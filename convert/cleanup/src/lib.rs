//! What an interrupted command leaves behind: nothing. The writers of `cupti-convert` register the temporary
//! paths they create (an output's `.tmp-PID` file, a Parquet export's directory before it is renamed into place,
//! `sql`'s exported dataset, the cubins handed to `nvdisasm`) and start their child processes (`nvdisasm`, the
//! `sql` companion) through this registry; on SIGINT or SIGTERM, a thread of its own ends the children, removes
//! the paths and exits with the conventional status, 128 + the signal (130, 143).
//!
//! Registering costs a lock and a vector push; a program that never calls [`exit_on_signals`] keeps the signals'
//! default actions and the registry only ever shrinks back. A writer makes its path and registers it inside
//! [`hold`], and renames its output into place inside [`hold`] too, so that a signal never falls between the two
//! (the cleanup waits until the held step is over): either the temporary path is removed, or the output is complete.
//! Whatever is created inside a registered directory is created inside [`hold`] as well: the other threads go on
//! while the cleanup runs, and a file made meanwhile would keep the directory from being removed (a
//! `create_dir_all` would even make it again); once the cleanup has begun, every [`hold`] waits for the exit.
//! A second signal while the cleanup runs ends the process at once, with the same status.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};

/// What a signal acts on.
struct Registry {
    paths: Vec<(u64, PathBuf)>,
    children: Vec<(u64, std::process::Child)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { paths: Vec::new(), children: Vec::new() });
/// Held (shared) by the steps a signal must not split; the cleanup takes it exclusively.
static HOLD: RwLock<()> = RwLock::new(());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn registry() -> MutexGuard<'static, Registry> {
    // A thread that panicked while holding the lock left the lists whole (every change is one push or remove).
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where `path` leads: through symbolic links to what they name, so that an output written "at" a link replaces
/// the file it names and the link stays a link. A chain longer than the kernel follows (40) is left as it is, for
/// the filesystem calls to report.
pub fn resolve_links(path: &Path) -> PathBuf {
    let mut at = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&at) {
            Ok(target) => at = at.parent().unwrap_or(Path::new("")).join(target),
            Err(_) => return at,
        }
    }
    at
}

/// Runs `f` with the cleanup held off: a signal that arrives meanwhile is acted on once `f` returns. For the
/// short steps that make a temporary path and register it, or rename an output into place; never nested (the
/// cleanup, waiting, would block the inner hold).
pub fn hold<R>(f: impl FnOnce() -> R) -> R {
    let _held = HOLD.read().unwrap_or_else(|e| e.into_inner());
    f()
}

/// A path removed (a file, or a directory with all it holds; a symbolic link itself, never what it points to) if
/// the process is interrupted while this lives. Dropping it forgets the path and removes nothing: the owner
/// removes what it no longer needs, or has renamed it into place.
#[must_use = "the path is forgotten when this is dropped"]
#[derive(Debug)]
pub struct Registered {
    id: u64,
}

/// Registers `path` for removal on interruption (see [`Registered`]). Register a path before creating it, or
/// create and register it inside [`hold`], so that no signal falls between the two.
pub fn remove_on_interrupt(path: &Path) -> Registered {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    registry().paths.push((id, path.to_path_buf()));
    Registered { id }
}

impl Drop for Registered {
    fn drop(&mut self) {
        registry().paths.retain(|(id, _)| *id != self.id);
    }
}

/// A child process ended (SIGKILL, then reaped) if this process is interrupted. Dropped while the child still
/// runs, it is ended too: a child is never left behind.
#[derive(Debug)]
pub struct Child {
    id: u64,
}

/// Starts `command` as a [`Child`] (its standard streams as the command sets them).
pub fn spawn(command: &mut Command) -> io::Result<Child> {
    hold(|| {
        let child = command.spawn()?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        registry().children.push((id, child));
        Ok(Child { id })
    })
}

impl Child {
    /// Runs `f` on the process, under the registry's lock.
    fn with<R>(&self, f: impl FnOnce(&mut std::process::Child) -> R) -> R {
        let mut r = registry();
        let child = r.children.iter_mut().find(|(id, _)| *id == self.id).map(|(_, c)| c);
        f(child.expect("a registered child stays registered while its handle lives"))
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.with(|c| c.id())
    }

    /// Waits for the child to exit, at most `limit`; `Ok(None)` if it still runs then. Polls (every 1 ms at
    /// first, every 50 ms after a tenth of a second): the lock is never held while waiting, so that a signal's
    /// cleanup can end the child meanwhile.
    pub fn wait_for(&self, limit: Duration) -> io::Result<Option<ExitStatus>> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(status) = self.with(|c| c.try_wait())? {
                return Ok(Some(status));
            }
            if started.elapsed() >= limit {
                return Ok(None);
            }
            std::thread::sleep(pause.min(limit.saturating_sub(started.elapsed())));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Waits for the child to exit, as long as it takes ([`Child::wait_for`]'s polling).
    pub fn wait(&self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.wait_for(Duration::from_secs(3600))? {
                return Ok(status);
            }
        }
    }

    /// Ends the child (SIGKILL) and reaps it.
    pub fn kill(&self) -> io::Result<ExitStatus> {
        self.with(|c| {
            // An error here is a child that already exited: the wait reaps it all the same.
            let _ = c.kill();
            c.wait()
        })
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let mut r = registry();
        if let Some(i) = r.children.iter().position(|(id, _)| *id == self.id) {
            let (_, mut child) = r.children.swap_remove(i);
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// From now on, SIGINT and SIGTERM end the process through the registry: children ended, paths removed, a line on
/// stderr (`PROGRAM: interrupted (SIGINT)`), exit status 128 + the signal. Call once, early in `main`.
pub fn exit_on_signals(program: &'static str) -> io::Result<()> {
    let cleaning = Arc::new(AtomicBool::new(false));
    // Registered before the iterator's handler, so that it runs first: a second signal, once the cleanup has
    // begun, exits at once.
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, cleaning.clone())?;
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new().name("cutr-signals".into()).spawn(move || {
        if let Some(sig) = signals.forever().next() {
            cleaning.store(true, Ordering::SeqCst);
            clean_up();
            let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
            eprintln!("{program}: interrupted ({name})");
            std::process::exit(128 + sig);
        }
    })?;
    Ok(())
}

/// Ends every registered child and removes every registered path, once no [`hold`] is in progress. The locks
/// stay taken: the process exits next, and a writer that reaches the registry meanwhile waits for that.
fn clean_up() {
    let held = HOLD.write().unwrap_or_else(|e| e.into_inner());
    let mut r = registry();
    // Children first: they may be reading or writing the paths.
    for (_, child) in r.children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    for (_, path) in &r.paths {
        remove(path);
    }
    std::mem::forget((held, r));
}

/// Removes `path`: a directory with its contents, anything else (a symbolic link included) by its name. What is
/// already gone is no error. A directory is tried a few times: a writer that created a file in it without
/// [`hold`] (a child, say) only delays its removal.
fn remove(path: &Path) {
    for _ in 0..10 {
        let removed = match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
            Ok(_) => std::fs::remove_file(path),
            Err(_) => return,
        };
        if removed.is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The paths registered now.
#[cfg(test)]
fn registered_paths() -> Vec<PathBuf> {
    registry().paths.iter().map(|(_, p)| p.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_end_with_their_guards() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let guard = remove_on_interrupt(&a);
        assert!(registered_paths().contains(&a));
        drop(guard);
        assert!(!registered_paths().contains(&a));
    }

    #[test]
    fn remove_takes_files_directories_and_links_never_their_targets() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::fs::write(tree.join("sub/f"), b"x").unwrap();
        std::os::unix::fs::symlink(&victim, tree.join("link")).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for p in [&tree, &link, &dir.path().join("never-made")] {
            remove(p);
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["victim"]);
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn a_child_is_waited_for_with_a_limit_and_ended_when_dropped() {
        let child = spawn(Command::new("sleep").arg("1000")).unwrap();
        let pid = child.pid();
        assert_eq!(child.wait_for(Duration::from_millis(20)).unwrap(), None, "still running");
        drop(child);
        // Reaped by the drop: no process of that id is left (a new one would need the id to be reused at once).
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        let done = spawn(&mut Command::new("true")).unwrap();
        assert!(done.wait().unwrap().success());
        let stuck = spawn(Command::new("sleep").arg("1000")).unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&stuck.kill().unwrap()), Some(9));
    }
}
