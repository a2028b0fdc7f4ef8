//! The operating-system calls the recorder makes outside its signal handlers, as safe functions: clocks, the host
//! name, thread ids, call stacks, exit hooks.

use std::time::Duration;

/// `clock`'s time in nanoseconds (`clock_gettime`), `None` where the clock does not exist.
pub fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Registers `hook` to run at `exit()` (`atexit`); false where the C library refused. `exit()` runs its hooks
/// last-registered first (a hook registered while `exit()` runs hooks runs next).
pub fn at_exit(hook: extern "C" fn()) -> bool {
    // SAFETY: registering a plain extern "C" function that takes nothing and may run on any thread that exits.
    unsafe { libc::atexit(hook) == 0 }
}

/// The CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`); zero where it cannot be read.
pub fn thread_cpu_time() -> Duration {
    Duration::from_nanos(clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0))
}

/// This machine's host name, or `unknown`.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is large enough for a host name; one byte is kept back so it stays NUL-terminated.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) } != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The calling thread's kernel id (`gettid`), the id CUPTI's records carry (`CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM`).
pub fn thread_id() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// The calling thread's return addresses (innermost first, the innermost being the current instruction), at most
/// `max`, leaving out the leading frames of the object that holds the code address `own` (the recorder's own
/// frames, which come first from inside a callback). Unwound by `backtrace` from the unwind tables, so it needs no
/// frame pointers; frames past code without tables are lost.
pub fn application_stack(own: usize, max: usize, out: &mut Vec<u64>) {
    let own_base = object_base(own);
    let mut leading = true;
    backtrace::trace(|frame| {
        let ip = frame.ip() as usize;
        if leading && own_base.is_some() && object_base(ip) == own_base {
            return true;
        }
        leading = false;
        // The outermost frame of a thread reads as address 0: the end, not a frame.
        if ip == 0 {
            return false;
        }
        out.push(ip as u64);
        out.len() < max
    });
}

/// The load address of the object (executable or shared library) holding code address `addr`.
fn object_base(addr: usize) -> Option<usize> {
    // SAFETY: dladdr only reads the loader's tables and fills the out-struct; `addr` is not dereferenced.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        (libc::dladdr(addr as *const libc::c_void, &mut info) != 0).then_some(info.dli_fbase as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_host_and_thread_read_back() {
        let a = clock_ns(libc::CLOCK_MONOTONIC).unwrap();
        let b = clock_ns(libc::CLOCK_MONOTONIC).unwrap();
        assert!(b >= a && a > 0);
        assert_eq!(clock_ns(-12345), None);
        assert!(!host_name().is_empty());
        let here = thread_id();
        assert!(std::path::Path::new(&format!("/proc/self/task/{here}")).exists(), "{here} is one of our threads");
        assert_ne!(std::thread::spawn(thread_id).join().unwrap(), here);
    }

    #[inline(never)]
    fn stack_of(own: usize, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        application_stack(own, max, &mut out);
        out
    }

    #[test]
    fn stacks_leave_out_the_leading_frames_of_one_object() {
        // Unwinding from here: every leading frame is in this test binary; leaving them out leaves the frames of
        // other objects (libc's thread start), or none.
        let all = stack_of(0, 64);
        assert!(all.len() >= 3, "{all:x?}");
        assert_eq!(stack_of(0, 2).len(), 2);
        let own = stacks_leave_out_the_leading_frames_of_one_object as *const () as usize;
        let outside = stack_of(own, 64);
        assert!(outside.len() < all.len(), "{} of {}", outside.len(), all.len());
        assert!(outside.iter().all(|&ip| object_base(ip as usize) != object_base(own)));
    }
}
