//! Names of CUDA runtime and driver API functions by CUPTI callback id (cbid), from the CUDA 13.0 headers.
//! Files carry the names the recording libcupti reported; this table is the fallback for files that lack them.

#[rustfmt::skip]
mod cbid_names;

/// `CUpti_CallbackDomain` of the driver API.
pub const DOMAIN_DRIVER: u32 = 1;
/// `CUpti_CallbackDomain` of the runtime API.
pub const DOMAIN_RUNTIME: u32 = 2;

/// The header name of a cbid, with its version suffix (`cudaLaunchKernel_v7000`).
pub fn raw_name(domain: u32, cbid: u32) -> Option<&'static str> {
    let table: &[&str] = match domain {
        DOMAIN_DRIVER => &cbid_names::DRIVER,
        DOMAIN_RUNTIME => &cbid_names::RUNTIME,
        _ => return None,
    };
    table.get(cbid as usize).copied().filter(|s| !s.is_empty())
}

/// The function name as tools show it: the header name without its `_v<digits>` version suffix
/// (`cudaLaunchKernel_v7000` -> `cudaLaunchKernel`; `cuLaunchKernel_ptsz` stays).
pub fn display_name(raw: &str) -> &str {
    if let Some(i) = raw.rfind("_v") {
        let suffix = &raw[i + 2..];
        if !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()) {
            return &raw[..i];
        }
    }
    raw
}

/// The display name of a cbid, if the CUDA 13.0 headers define it.
pub fn name(domain: u32, cbid: u32) -> Option<&'static str> {
    raw_name(domain, cbid).map(display_name)
}

/// The header name a CUDA 12 runtime's cbid had, where CUDA 13 renamed it: CUDA 13 removed the old forms of
/// functions such as `cudaGetDeviceProperties` and gave their names to the `_v2` forms, and CUPTI 13 names the
/// cbids so (`cudaGetDeviceProperties_v12000`), while a program built with CUDA 12 called
/// `cudaGetDeviceProperties_v2` (what Kineto and Nsight Systems show). `None` where the name did not change.
pub fn cuda12_runtime_raw_name(cbid: u32) -> Option<&'static str> {
    cbid_names::RUNTIME_12_NAMES.iter().find(|(c, _)| *c == cbid).map(|(_, n)| *n)
}

/// Whether a recording's `cudaRuntimeGetVersion` (`12080` for 12.8; 0 = unknown) is a CUDA 12 runtime, whose
/// calls are named by [`cuda12_runtime_raw_name`] where that differs.
pub fn is_cuda12_runtime(runtime_version: i32) -> bool {
    (12000..13000).contains(&runtime_version)
}

/// Runtime API cbids used by the synthetic generator and tests.
pub mod runtime {
    pub const CUDA_MALLOC: u32 = 20;
    pub const CUDA_MEMCPY: u32 = 31;
    pub const CUDA_MEMCPY_ASYNC: u32 = 41;
    pub const CUDA_MEMSET_ASYNC: u32 = 51;
    pub const CUDA_STREAM_SYNCHRONIZE: u32 = 131;
    pub const CUDA_EVENT_RECORD: u32 = 135;
    pub const CUDA_STREAM_WAIT_EVENT: u32 = 147;
    pub const CUDA_DEVICE_SYNCHRONIZE: u32 = 165;
    pub const CUDA_LAUNCH_KERNEL: u32 = 211;
    pub const CUDA_GRAPH_LAUNCH: u32 = 311;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cuda12_runtime_keeps_its_v2_names() {
        assert_eq!(name(DOMAIN_RUNTIME, 440), Some("cudaGetDeviceProperties"));
        assert_eq!(cuda12_runtime_raw_name(440).map(display_name), Some("cudaGetDeviceProperties_v2"));
        assert_eq!(cuda12_runtime_raw_name(461).map(display_name), Some("cudaStreamGetCaptureInfo_v3"));
        assert_eq!(cuda12_runtime_raw_name(runtime::CUDA_LAUNCH_KERNEL), None);
        assert!(is_cuda12_runtime(12080) && !is_cuda12_runtime(13000) && !is_cuda12_runtime(0));
    }

    #[test]
    fn names_match_the_headers() {
        assert_eq!(raw_name(DOMAIN_RUNTIME, 211), Some("cudaLaunchKernel_v7000"));
        assert_eq!(name(DOMAIN_RUNTIME, runtime::CUDA_LAUNCH_KERNEL), Some("cudaLaunchKernel"));
        assert_eq!(name(DOMAIN_RUNTIME, runtime::CUDA_GRAPH_LAUNCH), Some("cudaGraphLaunch"));
        assert_eq!(name(DOMAIN_DRIVER, 652), Some("cuLaunchKernelEx"));
        assert_eq!(name(DOMAIN_DRIVER, 653), Some("cuLaunchKernelEx_ptsz"));
        assert_eq!(name(DOMAIN_RUNTIME, 100_000), None);
        assert_eq!(display_name("cudaFoo_v"), "cudaFoo_v");
    }
}
