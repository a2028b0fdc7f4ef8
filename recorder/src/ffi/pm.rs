//! CUPTI's PM Sampling and Profiler Host APIs (CUPTI 12.6+) as the PM sampler ([`crate::counters::pm_sampling`])
//! calls them: the functions, resolved from the libcupti the session uses, and the parameter structs declared here
//! where CUPTI writes an enum as an integer.

use std::ffi::{c_char, c_void};
use std::path::Path;

use cudarc::cupti::sys as cs;

pub(crate) const CUPTI_SUCCESS: u32 = 0;
/// cupti_result.h: 8 (13 is CUPTI_ERROR_NOT_READY).
pub(crate) const CUPTI_ERROR_OUT_OF_MEMORY: u32 = 8;
pub(crate) const STOP_END_OF_RECORDS: u32 = 2;

/// `CUpti_PmSampling_DecodeData_Params` with the stop reason as the integer CUPTI writes (a Rust enum must not
/// receive a value it does not list).
#[repr(C)]
pub(crate) struct DecodeParams {
    pub(crate) struct_size: usize,
    pub(crate) p_priv: *mut c_void,
    pub(crate) object: *mut cs::CUpti_PmSampling_Object,
    pub(crate) image: *mut u8,
    pub(crate) image_size: usize,
    pub(crate) stop_reason: u32,
    pub(crate) overflow: u8,
}

/// `CUpti_Profiler_Host_GetMetricProperties_Params` with the metric type as an integer.
#[repr(C)]
pub(crate) struct MetricPropertiesParams {
    pub(crate) struct_size: usize,
    pub(crate) p_priv: *mut c_void,
    pub(crate) host: *mut cs::CUpti_Profiler_Host_Object,
    pub(crate) metric: *const c_char,
    pub(crate) description: *const c_char,
    pub(crate) hw_unit: *const c_char,
    pub(crate) dim_unit: *const c_char,
    pub(crate) metric_type: u32,
}

pub(crate) type F<P> = unsafe extern "C" fn(*mut P) -> u32;
use crate::ffi::cupti::FnResultString;

/// The CUPTI functions this module calls, from the libcupti the session uses.
pub(crate) struct Api {
    pub(crate) profiler_initialize: F<cs::CUpti_Profiler_Initialize_Params>,
    pub(crate) chip_name: F<cs::CUpti_Device_GetChipName_Params>,
    pub(crate) availability: F<cs::CUpti_PmSampling_GetCounterAvailability_Params>,
    pub(crate) host_initialize: F<cs::CUpti_Profiler_Host_Initialize_Params>,
    pub(crate) host_deinitialize: F<cs::CUpti_Profiler_Host_Deinitialize_Params>,
    pub(crate) add_metrics: F<cs::CUpti_Profiler_Host_ConfigAddMetrics_Params>,
    pub(crate) config_size: F<cs::CUpti_Profiler_Host_GetConfigImageSize_Params>,
    pub(crate) config_image: F<cs::CUpti_Profiler_Host_GetConfigImage_Params>,
    pub(crate) passes: F<cs::CUpti_Profiler_Host_GetNumOfPasses_Params>,
    pub(crate) properties: F<MetricPropertiesParams>,
    pub(crate) evaluate: F<cs::CUpti_Profiler_Host_EvaluateToGpuValues_Params>,
    pub(crate) enable: F<cs::CUpti_PmSampling_Enable_Params>,
    pub(crate) disable: F<cs::CUpti_PmSampling_Disable_Params>,
    pub(crate) set_config: F<cs::CUpti_PmSampling_SetConfig_Params>,
    pub(crate) data_size: F<cs::CUpti_PmSampling_GetCounterDataSize_Params>,
    pub(crate) image_initialize: F<cs::CUpti_PmSampling_CounterDataImage_Initialize_Params>,
    pub(crate) start: F<cs::CUpti_PmSampling_Start_Params>,
    pub(crate) stop: F<cs::CUpti_PmSampling_Stop_Params>,
    pub(crate) decode: F<DecodeParams>,
    pub(crate) data_info: F<cs::CUpti_PmSampling_GetCounterDataInfo_Params>,
    pub(crate) sample_info: F<cs::CUpti_PmSampling_CounterData_GetSampleInfo_Params>,
    pub(crate) result_string: FnResultString,
    /// `cuptiGetTimestamp(uint64_t*)`: the clock of the samples' times.
    pub(crate) timestamp: unsafe extern "C" fn(*mut u64) -> u32,
    /// `cuptiGetDeviceId(CUcontext, uint32_t*)`.
    pub(crate) device_id: unsafe extern "C" fn(cudarc::driver::sys::CUcontext, *mut u32) -> u32,
    pub(crate) subscribe: unsafe extern "C" fn(*mut cs::CUpti_SubscriberHandle, Callback, *mut c_void) -> u32,
    pub(crate) enable_callback: unsafe extern "C" fn(u32, cs::CUpti_SubscriberHandle, u32, u32) -> u32,
    pub(crate) unsubscribe: unsafe extern "C" fn(cs::CUpti_SubscriberHandle) -> u32,
}

pub(crate) type Callback = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);

/// Zeroed params with CUPTI's `<T>_STRUCT_SIZE` set: the offset of the struct's last field plus that field's size,
/// not `size_of` (which counts the tail padding). `cuptiPmSamplingDecodeData` refuses a padded size as
/// CUPTI_ERROR_INVALID_PARAMETER (the H100, CUDA 13.0); NVIDIA's samples pass the macro's value.
macro_rules! params {
    ($t:ty, $last:ident) => {{
        // SAFETY: CUPTI params structs are plain C data (integers and pointers): all-zero is a valid value.
        #[allow(unused_unsafe)]
        let mut p: $t = unsafe { std::mem::zeroed() };
        let size = std::mem::offset_of!($t, $last) + std::mem::size_of_val(&p.$last);
        // SAFETY: the first field of every CUPTI params struct is `size_t structSize`.
        #[allow(unused_unsafe)]
        let () = unsafe { *(&mut p as *mut $t as *mut usize) = size };
        p
    }};
}
pub(crate) use params;

impl Api {
    pub(crate) fn load(path: &Path) -> Result<Api, String> {
        // SAFETY: the library is already loaded by the session (another reference, never dropped); each symbol's C
        // signature is the one its field's type declares (cupti_pmsampling.h, cupti_profiler_host.h,
        // cupti_profiler_target.h).
        unsafe {
            let lib = libloading::os::unix::Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_GLOBAL)
                .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
            macro_rules! sym {
                ($name:literal) => {
                    *lib.get(concat!($name, "\0").as_bytes())
                        .map_err(|_| format!("{} lacks {} (PM sampling needs CUPTI 12.6+)", path.display(), $name))?
                };
            }
            let api = Api {
                profiler_initialize: sym!("cuptiProfilerInitialize"),
                chip_name: sym!("cuptiDeviceGetChipName"),
                availability: sym!("cuptiPmSamplingGetCounterAvailability"),
                host_initialize: sym!("cuptiProfilerHostInitialize"),
                host_deinitialize: sym!("cuptiProfilerHostDeinitialize"),
                add_metrics: sym!("cuptiProfilerHostConfigAddMetrics"),
                config_size: sym!("cuptiProfilerHostGetConfigImageSize"),
                config_image: sym!("cuptiProfilerHostGetConfigImage"),
                passes: sym!("cuptiProfilerHostGetNumOfPasses"),
                properties: sym!("cuptiProfilerHostGetMetricProperties"),
                evaluate: sym!("cuptiProfilerHostEvaluateToGpuValues"),
                enable: sym!("cuptiPmSamplingEnable"),
                disable: sym!("cuptiPmSamplingDisable"),
                set_config: sym!("cuptiPmSamplingSetConfig"),
                data_size: sym!("cuptiPmSamplingGetCounterDataSize"),
                image_initialize: sym!("cuptiPmSamplingCounterDataImageInitialize"),
                start: sym!("cuptiPmSamplingStart"),
                stop: sym!("cuptiPmSamplingStop"),
                decode: sym!("cuptiPmSamplingDecodeData"),
                data_info: sym!("cuptiPmSamplingGetCounterDataInfo"),
                sample_info: sym!("cuptiPmSamplingCounterDataGetSampleInfo"),
                result_string: sym!("cuptiGetResultString"),
                timestamp: sym!("cuptiGetTimestamp"),
                device_id: sym!("cuptiGetDeviceId"),
                subscribe: sym!("cuptiSubscribe"),
                enable_callback: sym!("cuptiEnableCallback"),
                unsubscribe: sym!("cuptiUnsubscribe"),
            };
            std::mem::forget(lib);
            Ok(api)
        }
    }

    /// `Ok` for CUPTI_SUCCESS, else the call and CUPTI's name for the code.
    pub(crate) fn check(&self, call: &str, code: u32) -> Result<(), String> {
        if code == CUPTI_SUCCESS {
            return Ok(());
        }
        Err(format!("{call}: {}", crate::ffi::cupti::result_name(self.result_string, code)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The params structs this module declares itself (integers where CUPTI writes enums) have the layout of
    /// cudarc's, generated from CUPTI 13.0's headers.
    #[test]
    fn own_param_structs_have_cuptis_layout() {
        assert_eq!(std::mem::size_of::<DecodeParams>(), std::mem::size_of::<cs::CUpti_PmSampling_DecodeData_Params>());
        assert_eq!(
            std::mem::size_of::<MetricPropertiesParams>(),
            std::mem::size_of::<cs::CUpti_Profiler_Host_GetMetricProperties_Params>()
        );
        assert_eq!(std::mem::size_of::<DecodeParams>(), 48);
        assert_eq!(std::mem::offset_of!(DecodeParams, stop_reason), 40);
        assert_eq!(std::mem::offset_of!(DecodeParams, overflow), 44);
    }

    /// Every function this module calls is in CUDA 13.0's real libcupti (from the PyPI wheel the test set-up
    /// installs; loading it needs no GPU).
    #[test]
    fn every_function_is_in_the_real_libcupti() {
        let cache = std::env::var_os("CUTR_CACHE")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache"));
        let lib = cache.join("cupti/cupti-13.0/lib/libcupti.so.13");
        assert!(lib.exists(), "{} is missing: run tools/fetch-cupti.sh", lib.display());
        let api = Api::load(&lib).unwrap();
        assert_eq!(api.check("x", CUPTI_ERROR_OUT_OF_MEMORY).unwrap_err(), "x: CUPTI_ERROR_OUT_OF_MEMORY");
    }

    /// The sizes CUPTI's `<T>_STRUCT_SIZE` macros give (cupti_pmsampling.h, cupti_profiler_host.h): where the
    /// last field is narrower than 8 bytes they are not `size_of`.
    #[test]
    fn params_carry_cuptis_struct_sizes() {
        let size = |p: *const u8| {
            // SAFETY: every params struct starts with `size_t structSize`.
            unsafe { *(p as *const usize) }
        };
        let d = params!(DecodeParams, overflow);
        assert_eq!(size(&d as *const _ as *const u8), 45);
        let c = params!(cs::CUpti_PmSampling_SetConfig_Params, hwBufferAppendMode);
        assert_eq!(size(&c as *const _ as *const u8), 64);
        let m = params!(MetricPropertiesParams, metric_type);
        assert_eq!(size(&m as *const _ as *const u8), 60);
        let e = params!(cs::CUpti_PmSampling_Enable_Params, pPmSamplingObject);
        assert_eq!(size(&e as *const _ as *const u8), std::mem::size_of::<cs::CUpti_PmSampling_Enable_Params>());
    }
}
