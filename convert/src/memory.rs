//! How the converter asks the kernel for memory.
//!
//! On Linux with transparent huge pages set to `always`, the first touch of any 2 MiB-aligned stretch of the
//! heap faults in and zeroes a whole 2 MiB page. A small conversion touches a few MB scattered over the
//! allocator's arenas and per-thread heaps, so huge pages multiply what the kernel zeroes (a 171 KB recording
//! went from 15 MB to 57 MB resident, and page zeroing was a quarter of its run time). A large conversion
//! touches its memory densely, where huge pages mean fewer faults. So: huge pages off until the input's size is
//! known, and back on for large inputs.

/// Decompressed record bytes from which huge pages pay off.
const HUGE_PAGES_FROM_BYTES: u64 = 256 << 20;

fn set_thp_disabled(disabled: bool) {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes an integer flag and no pointers; failure (old kernels) changes nothing.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, disabled as libc::c_ulong, 0, 0, 0);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = disabled;
}

/// Call first thing in `main`: no huge pages until [`input_size_known`] says the input is large.
pub fn start_small() {
    set_thp_disabled(true);
}

/// Tells the policy how many decompressed record bytes the conversion will read.
pub fn input_size_known(raw_bytes: u64) {
    if raw_bytes >= HUGE_PAGES_FROM_BYTES {
        set_thp_disabled(false);
    }
}
