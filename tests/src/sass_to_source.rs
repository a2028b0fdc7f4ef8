//! NVIDIA's SASS -> source map, `cuptiGetSassToSourceCorrelation` of the real libcupti (CUDA 13.0's, from the PyPI
//! wheel; it needs no GPU), as the oracle for `cutr_source`.
//!
//! libcupti remembers what it has read per function name within a process: asked about `fma_chain` of a second,
//! different cubin it answers with the first cubin's lines. Each test that asks about a different build of the
//! same kernel therefore lives in its own test binary (its own process).

use std::ffi::{CStr, c_char, c_void};

/// `CUpti_GetSassToSourceCorrelationParams` (cupti_pcsampling.h): 64 bytes.
#[repr(C)]
pub struct SassToSource {
    size: usize,
    cubin: *const c_void,
    function_name: *const c_char,
    cubin_size: usize,
    line_number: u32,
    pc_offset: u64,
    file_name: *mut c_char,
    dir_name: *mut c_char,
}

/// `cuptiGetSassToSourceCorrelation`.
pub type SassToSourceFn = unsafe extern "C" fn(*mut SassToSource) -> u32;

/// NVIDIA's answer: (dir, file, line), `None` where it has none (line 0).
pub fn nvidia(f: SassToSourceFn, cubin: &[u8], function: &str, pc: u64) -> Option<(String, String, u32)> {
    let name = std::ffi::CString::new(function).unwrap();
    let mut p = SassToSource {
        size: std::mem::size_of::<SassToSource>(),
        cubin: cubin.as_ptr().cast(),
        function_name: name.as_ptr(),
        cubin_size: cubin.len(),
        line_number: 0,
        pc_offset: pc,
        file_name: std::ptr::null_mut(),
        dir_name: std::ptr::null_mut(),
    };
    // SAFETY: the params are laid out as libcupti expects (size 64, asserted below); the cubin and the name outlive
    // the call; the strings it returns are malloc'd for us and freed here.
    unsafe {
        assert_eq!(f(&mut p), 0, "{function}+{pc:#x}");
        let take = |s: *mut c_char| {
            if s.is_null() {
                return String::new();
            }
            let t = CStr::from_ptr(s).to_string_lossy().into_owned();
            libc_free(s.cast());
            t
        };
        let (file, dir) = (take(p.file_name), take(p.dir_name));
        (p.line_number != 0).then_some((dir, file, p.line_number))
    }
}

unsafe extern "C" {
    #[link_name = "free"]
    fn libc_free(p: *mut c_void);
}
