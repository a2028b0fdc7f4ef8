//! Closing the file when the process ends: at `exit()`, on SIGINT/SIGTERM whose disposition would kill the
//! process, and on a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT). A signal handler may only do
//! async-signal-safe things, so it writes the signal number to a pipe and waits (with `poll`, bounded) for a
//! finisher thread to flush CUPTI and write the footer; then it restores the previous disposition and re-raises
//! the signal, so the process dies exactly as it would have (same signal, same core dump), or the application's own
//! handler runs next. When the application handles SIGINT/SIGTERM itself (Python turns SIGINT into
//! KeyboardInterrupt), its handler runs instead and the file is closed by the `exit()` hook once the application
//! decides to exit. A crash is bounded: after `--crash-timeout` (2 s) the signal goes through whatever the finisher
//! is doing (a crash that left a lock held must not become a hang); the file is then recovered up to its last
//! complete chunk. A runtime that handles SIGSEGV itself in normal operation (the JVM) would see the recording end
//! at its first such fault: `--crash-timeout 0` leaves the crash signals alone.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use crate::session;

/// Longest wait for the writer when the process is ending.
pub const FINISH_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a SIGINT/SIGTERM handler waits for the file to be closed before letting the signal through.
const SIGNAL_WAIT_MS: libc::c_int = 15_000;

static INSTALL: Once = Once::new();
static REQUEST_FD: AtomicI32 = AtomicI32::new(-1);
static DONE_FD: AtomicI32 = AtomicI32::new(-1);
/// The crash handler's wait, ms (set from the session's configuration).
static CRASH_WAIT_MS: AtomicI32 = AtomicI32::new(2_000);
/// Set by the first crash: a second crashing thread (or a crash in the finisher) lets its signal through at once.
static CRASHING: AtomicBool = AtomicBool::new(false);
/// `CUTR_CRASH_BACKTRACE=1`: a crash prints the crashing thread's name and stack to stderr first (a diagnostic for
/// crashes inside the recorder or CUPTI; glibc's `backtrace` is not async-signal-safe, hence not the default).
static BACKTRACE: AtomicBool = AtomicBool::new(false);

unsafe extern "C" {
    fn backtrace(buffer: *mut *mut libc::c_void, size: libc::c_int) -> libc::c_int;
    fn backtrace_symbols_fd(buffer: *const *mut libc::c_void, size: libc::c_int, fd: libc::c_int);
}

/// The crashing thread's name, the faulting address and its stack, on stderr.
///
/// # Safety
/// Called from a crash handler with the kernel's `info`.
unsafe fn print_backtrace(sig: libc::c_int, info: *mut libc::siginfo_t) {
    let mut name = [0u8; 16];
    let mut frames = [std::ptr::null_mut::<libc::c_void>(); 64];
    // SAFETY: a 16-byte buffer for PR_GET_NAME; `info` is the kernel's; the frames buffer holds 64 entries.
    unsafe {
        libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr());
        let addr = if info.is_null() { 0 } else { (*info).si_addr() as usize };
        let len = name.iter().position(|&b| b == 0).unwrap_or(16);
        let mut line = [0u8; 128];
        let mut w = std::io::Cursor::new(&mut line[..]);
        let _ = std::io::Write::write_fmt(
            &mut w,
            format_args!(
                "cutr: signal {sig} in thread '{}' at address {addr:#x}; stack:\n",
                std::str::from_utf8(&name[..len]).unwrap_or("?")
            ),
        );
        let n = w.position() as usize;
        libc::write(2, line.as_ptr() as *const libc::c_void, n);
        let depth = backtrace(frames.as_mut_ptr(), 64);
        backtrace_symbols_fd(frames.as_ptr(), depth, 2);
    }
}
static mut PREVIOUS: [Option<libc::sigaction>; 7] = [None; 7];
/// SIGINT and SIGTERM end a process on request; the others are crashes.
const SIGNALS: [libc::c_int; 7] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGABRT];

/// How long a crash handler waits for the file to be closed.
pub fn set_crash_timeout(t: Duration) {
    CRASH_WAIT_MS.store(t.as_millis().min(i32::MAX as u128) as i32, Ordering::Release);
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(s) = session::current_session()
            && let Some(summary) = s.finish(FINISH_TIMEOUT)
            && !s.config.quiet
        {
            eprintln!("cutr: {}", summary.describe());
        }
    });
}

/// Registers the `exit()` hook and the signal handlers (once per process).
pub fn install() {
    INSTALL.call_once(|| {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(at_exit) };
        install_signals();
    });
}

fn install_signals() {
    if std::env::var("CUTR_CRASH_BACKTRACE").is_ok_and(|v| v == "1") {
        let mut frames = [std::ptr::null_mut::<libc::c_void>(); 4];
        // SAFETY: a 4-entry buffer. The first call loads the unwinder, which a signal handler must not do.
        unsafe { backtrace(frames.as_mut_ptr(), 4) };
        BACKTRACE.store(true, Ordering::Release);
    }
    let mut req = [0; 2];
    let mut done = [0; 2];
    // SAFETY: a two-int array for pipe2 to fill.
    let req_ok = unsafe { libc::pipe2(req.as_mut_ptr(), libc::O_CLOEXEC) } == 0;
    // SAFETY: as above.
    if !req_ok || unsafe { libc::pipe2(done.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    REQUEST_FD.store(req[1], Ordering::Release);
    DONE_FD.store(done[0], Ordering::Release);
    let (req_read, done_write) = (req[0], done[1]);
    let spawned = crate::threads::spawn("cutr-signal", move || {
        loop {
            let mut b = [0u8; 1];
            // SAFETY: reading one byte into a valid buffer.
            let n = unsafe { libc::read(req_read, b.as_mut_ptr() as *mut libc::c_void, 1) };
            if n == 1 {
                at_exit();
                // SAFETY: writing one byte from a valid buffer.
                unsafe { libc::write(done_write, b.as_ptr() as *const libc::c_void, 1) };
            } else if n == 0 {
                return;
            }
        }
    });
    if spawned.is_err() {
        return;
    }
    for (i, &sig) in SIGNALS.iter().enumerate() {
        if i >= 2 && CRASH_WAIT_MS.load(Ordering::Acquire) == 0 {
            continue; // crash handling off (`--crash-timeout 0`)
        }
        // SAFETY: querying and setting dispositions with valid sigaction structs; PREVIOUS is written before the
        // handler can run for this signal and only read afterwards.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction == libc::SIG_IGN {
                continue; // an ignored signal stays ignored
            }
            PREVIOUS[i] = Some(old);
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = handler as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
            libc::sigfillset(&mut new.sa_mask);
            libc::sigaction(sig, &new, std::ptr::null_mut());
        }
    }
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(i) = SIGNALS.iter().position(|&s| s == sig) else { return };
    // SAFETY: PREVIOUS was written before this handler was installed.
    let prev = unsafe { PREVIOUS[i] };
    let Some(prev) = prev else { return };
    let crash = i >= 2;
    if crash {
        if BACKTRACE.load(Ordering::Acquire) {
            // SAFETY: the kernel's `info`; asked for by the user (see BACKTRACE).
            unsafe { print_backtrace(sig, info) };
        }
        // Close the file (bounded), then hand the signal to what would have had it: the application's handler
        // or the default action, through the previous disposition and a re-raise.
        let wait = if CRASHING.swap(true, Ordering::AcqRel) { 0 } else { CRASH_WAIT_MS.load(Ordering::Acquire) };
        // SAFETY: async-signal-safe calls only (see close_then_raise).
        unsafe { close_then_raise(sig, &prev, wait) };
        return;
    }
    if prev.sa_sigaction != libc::SIG_DFL {
        // The application handles this signal: let it decide; the exit hook closes the file later.
        // SAFETY: calling the handler the application installed, with the arguments the kernel gave us.
        unsafe {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(prev.sa_sigaction);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(prev.sa_sigaction);
                f(sig);
            }
        }
        return;
    }
    // The signal would kill the process: close the file first.
    // SAFETY: async-signal-safe calls only.
    unsafe { close_then_raise(sig, &prev, SIGNAL_WAIT_MS) };
}

/// Asks the finisher thread to close the file, waits for it at most `wait_ms`, restores `prev` and re-raises
/// `sig` (blocked while this handler runs, it is delivered when the handler returns: to `prev`).
///
/// # Safety
/// Called from a signal handler: write, poll, read, sigaction and raise are async-signal-safe.
unsafe fn close_then_raise(sig: libc::c_int, prev: &libc::sigaction, wait_ms: libc::c_int) {
    let req = REQUEST_FD.load(Ordering::Acquire);
    let done = DONE_FD.load(Ordering::Acquire);
    // SAFETY: the caller's.
    unsafe {
        if req >= 0 && done >= 0 && wait_ms > 0 {
            let b = sig as u8;
            if libc::write(req, &b as *const u8 as *const libc::c_void, 1) == 1 {
                let mut p = libc::pollfd { fd: done, events: libc::POLLIN, revents: 0 };
                if libc::poll(&mut p, 1, wait_ms) == 1 {
                    let mut r = 0u8;
                    libc::read(done, &mut r as *mut u8 as *mut libc::c_void, 1);
                }
            }
        }
        libc::sigaction(sig, prev, std::ptr::null_mut());
        libc::raise(sig);
    }
}
