//! SIGUSR1 (toggle) and SIGUSR2 (dump) for the control thread, taken without taking them from the application:
//! SLURM's `--signal`, pre-emption notices and job scripts use these two signals too. The handler only writes one
//! byte to a pipe and then calls the handler that was there before (never SIG_DFL, whose action for these
//! signals is to kill the process: with `--control` the signal is ours); when the recording's control ends the
//! previous dispositions come back and the pipe is closed.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What a signal asks, as the byte written to the pipe.
pub(super) const TOGGLE: u8 = 1;
pub(super) const DUMP: u8 = 2;

const SIGNALS: [libc::c_int; 2] = [libc::SIGUSR1, libc::SIGUSR2];

/// The pipe's write end while a recording's control runs, else -1.
static PIPE_FD: AtomicI32 = AtomicI32::new(-1);
/// Handlers between their read of PIPE_FD and the end of their write: the write end is closed only when none is,
/// so a late handler can never write into a file the application opened under the same number.
static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);
/// The previous handler (`sa_sigaction`) and flags of each of SIGNALS, for the handler to chain to. Atomics, as
/// the handler may run on any thread at any time.
static PREV_HANDLER: [AtomicUsize; 2] = [AtomicUsize::new(libc::SIG_DFL), AtomicUsize::new(libc::SIG_DFL)];
static PREV_FLAGS: [AtomicI32; 2] = [AtomicI32::new(0), AtomicI32::new(0)];

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(i) = SIGNALS.iter().position(|&s| s == sig) else { return };
    // SAFETY: __errno_location is async-signal-safe and returns this thread's errno; the write below may change
    // errno, which the interrupted code must find as it left it.
    let errno = unsafe { *libc::__errno_location() };
    IN_HANDLER.fetch_add(1, Ordering::SeqCst);
    let fd = PIPE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let b = if sig == libc::SIGUSR2 { DUMP } else { TOGGLE };
        // SAFETY: write is async-signal-safe; one byte from a valid buffer to our non-blocking pipe (a full pipe
        // drops the byte rather than blocking).
        unsafe { libc::write(fd, &b as *const u8 as *const libc::c_void, 1) };
    }
    IN_HANDLER.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    let prev = PREV_HANDLER[i].load(Ordering::Acquire);
    if prev == libc::SIG_DFL || prev == libc::SIG_IGN || prev == ours() {
        return; // SIG_DFL would kill the process: the signal was meant for us
    }
    // SAFETY: `prev` is the handler the application installed for `sig` (not SIG_DFL or SIG_IGN), called as its
    // flags say, with the arguments the kernel gave us.
    unsafe {
        if PREV_FLAGS[i].load(Ordering::Acquire) & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = std::mem::transmute(prev);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(prev);
            f(sig);
        }
    }
}

/// SIGUSR1 and SIGUSR2 taken for one recording: the pipe's read end to watch, and what to restore when dropped.
pub(super) struct SignalTap {
    read: OwnedFd,
    write: Option<OwnedFd>,
    /// The dispositions found at install, put back at drop (where ours is still in place).
    previous: [Option<libc::sigaction>; 2],
}

impl SignalTap {
    /// Takes the two signals; None (the socket works without them) if the pipe cannot be made.
    pub(super) fn install() -> Option<SignalTap> {
        let mut fds = [-1; 2];
        // SAFETY: a two-int array for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return None;
        }
        // SAFETY: pipe2 just returned these two descriptors, owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        PIPE_FD.store(write.as_raw_fd(), Ordering::SeqCst);
        let mut tap = SignalTap { read, write: Some(write), previous: [None; 2] };
        for (i, &sig) in SIGNALS.iter().enumerate() {
            // SAFETY: querying and setting a disposition with valid sigaction structs. PREV_* are written before
            // our handler is installed, and again (should the application have changed the disposition in
            // between) from what sigaction replaced.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    continue;
                }
                if old.sa_sigaction == ours() {
                    // Put back by the application after an earlier recording's control ended: what it stood for
                    // is still in PREV_*, and chaining to ourselves would recurse without end.
                    old.sa_sigaction = PREV_HANDLER[i].load(Ordering::Acquire);
                    old.sa_flags = PREV_FLAGS[i].load(Ordering::Acquire);
                }
                remember(i, &old);
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = ours();
                // An application's handler runs from ours: give it the stack, mask and restart behaviour it
                // asked for (Go's runtime needs SA_ONSTACK; a handler without SA_RESTART may count on EINTR to
                // break a blocking call). Without one, interrupted calls restart, as if nothing had come.
                let handled = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
                new.sa_flags = libc::SA_SIGINFO
                    | if handled { old.sa_flags & (libc::SA_ONSTACK | libc::SA_RESTART) } else { libc::SA_RESTART };
                new.sa_mask = old.sa_mask;
                let mut replaced: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &new, &mut replaced) == 0 {
                    if replaced.sa_sigaction != old.sa_sigaction && replaced.sa_sigaction != ours() {
                        remember(i, &replaced); // changed by the application in between
                        old = replaced;
                    }
                    tap.previous[i] = Some(old);
                }
            }
        }
        Some(tap)
    }
}

/// The pipe's read end (non-blocking): one byte per signal, TOGGLE or DUMP.
impl AsFd for SignalTap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }
}

/// Our handler, as sigaction holds it.
fn ours() -> usize {
    on_signal as *const () as usize
}

fn remember(i: usize, a: &libc::sigaction) {
    PREV_FLAGS[i].store(a.sa_flags, Ordering::Release);
    PREV_HANDLER[i].store(a.sa_sigaction, Ordering::Release);
}

impl Drop for SignalTap {
    fn drop(&mut self) {
        for (i, &sig) in SIGNALS.iter().enumerate() {
            let Some(prev) = &self.previous[i] else { continue };
            // SAFETY: querying and setting a disposition with valid sigaction structs.
            unsafe {
                let mut cur: libc::sigaction = std::mem::zeroed();
                // A handler the application installed after ours stays: it is the newer wish.
                if libc::sigaction(sig, std::ptr::null(), &mut cur) == 0 && cur.sa_sigaction == ours() {
                    libc::sigaction(sig, prev, std::ptr::null_mut());
                }
            }
        }
        PIPE_FD.store(-1, Ordering::SeqCst);
        // A handler that read the descriptor before the store above is counted in IN_HANDLER (SeqCst: one that
        // counts itself after the store reads -1). Handlers take microseconds; should one not finish (a thread
        // stopped mid-handler), the write end is leaked rather than closed under it.
        let t0 = Instant::now();
        while IN_HANDLER.load(Ordering::SeqCst) != 0 {
            if t0.elapsed() > Duration::from_millis(100) {
                std::mem::forget(self.write.take());
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.write = None;
    }
}
