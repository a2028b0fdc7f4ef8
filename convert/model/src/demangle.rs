//! Kernel names as people read them: demangled by the C++ runtime's own `__cxa_demangle`, as PyTorch's profiler
//! (Kineto) and `c++filt` do, so names match theirs byte for byte. CUPTI hands out mangled names; names that are
//! not mangled (`extern "C"`, Triton, cuBLAS kernels) come back unchanged.

use std::ffi::{CStr, CString, c_char, c_int};

// Linked by build.rs: statically where the toolchain allows.
unsafe extern "C" {
    fn __cxa_demangle(mangled: *const c_char, out: *mut c_char, len: *mut usize, status: *mut c_int) -> *mut c_char;
}

/// Kineto leaves longer names mangled (its `kMaxSymbolSize`).
const MAX_SYMBOL: usize = 8192;

/// The demangled form of `name`, or `name` itself when it is not a mangled C++ symbol.
pub fn demangle(name: &str) -> String {
    if !name.starts_with("_Z") || name.len() > MAX_SYMBOL {
        return name.to_string();
    }
    let Ok(c) = CString::new(name) else { return name.to_string() };
    let mut status: c_int = 0;
    // SAFETY: a NUL-terminated input; with a null output buffer __cxa_demangle allocates with malloc, which we free.
    unsafe {
        let out = __cxa_demangle(c.as_ptr(), std::ptr::null_mut(), std::ptr::null_mut(), &mut status);
        if out.is_null() || status != 0 {
            if !out.is_null() {
                libc_free(out);
            }
            return name.to_string();
        }
        let s = CStr::from_ptr(out).to_string_lossy().into_owned();
        libc_free(out);
        s
    }
}

unsafe extern "C" {
    #[link_name = "free"]
    fn libc_free(p: *mut c_char);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_cxxfilt() {
        // Expected strings are GNU c++filt 2.40's output for the same symbols.
        assert_eq!(demangle("_Z10slowKernelPfi"), "slowKernel(float*, int)");
        assert_eq!(
            demangle(
                "_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardILi4EfffNS1_22SoftMaxForwardEpilogueEEEvPT2_PKT0_l"
            ),
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, long)"
        );
        assert_eq!(
            demangle(
                "_ZN2at6native29vectorized_elementwise_kernelILi4EZNS0_19launch_clamp_scalarERNS_18TensorIteratorBaseEEUlfE_NS_6detail5ArrayIPcLi2EEEEEviT0_T1_"
            ),
            "void at::native::vectorized_elementwise_kernel<4, at::native::launch_clamp_scalar(at::TensorIteratorBase&)::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::launch_clamp_scalar(at::TensorIteratorBase&)::{lambda(float)#1}, at::detail::Array<char*, 2>)"
        );
        assert_eq!(demangle("triton_poi_fused_add_mul_0"), "triton_poi_fused_add_mul_0");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
        assert_eq!(demangle(""), "");
    }
}
