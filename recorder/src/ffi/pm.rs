//! CUPTI's PM Sampling and Profiler Host APIs (CUPTI 12.6+) as the PM sampler ([`crate::counters::pm_sampling`])
//! calls them: the functions, resolved from the libcupti the session uses; the parameter structs declared here
//! where CUPTI writes an enum as an integer; and one safe, typed method per call (a size query and the fill that
//! follows it are one method).
//!
//! CUPTI's objects and binary images are handles made only from CUPTI's answers (`HostObject`,
//! `SamplerObject`, `CounterAvailability`, `ConfigImage`, `CounterDataImage`), so a method cannot be given
//! a pointer CUPTI did not make. A handle dropped instead of released leaves its object to CUPTI: no call is made,
//! which is what PM sampling wants once the object's CUDA context has ended. When a call may be made (never into
//! a context that ended) is the caller's rule, not this module's.

use super::subscriber::ContextHandle;
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cudarc::cupti::sys as cs;

use crate::ffi::cupti::{FnResultString, result_name};

const CUPTI_SUCCESS: u32 = 0;
/// cupti_result.h: 8 (13 is CUPTI_ERROR_NOT_READY).
const CUPTI_ERROR_OUT_OF_MEMORY: u32 = 8;
/// `CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS`.
const STOP_END_OF_RECORDS: u32 = 2;

/// `CUpti_PmSampling_DecodeData_Params` with the stop reason as the integer CUPTI writes (a Rust enum must not
/// receive a value it does not list).
#[repr(C)]
struct DecodeParams {
    struct_size: usize,
    p_priv: *mut c_void,
    object: *mut cs::CUpti_PmSampling_Object,
    image: *mut u8,
    image_size: usize,
    stop_reason: u32,
    overflow: u8,
}

/// `CUpti_Profiler_Host_GetMetricProperties_Params` with the metric type as an integer.
#[repr(C)]
struct MetricPropertiesParams {
    struct_size: usize,
    p_priv: *mut c_void,
    host: *mut cs::CUpti_Profiler_Host_Object,
    metric: *const c_char,
    description: *const c_char,
    hw_unit: *const c_char,
    dim_unit: *const c_char,
    metric_type: u32,
}

/// Zeroed params with CUPTI's `<T>_STRUCT_SIZE` set: the offset of the struct's last field plus that field's size,
/// not `size_of` (which counts the tail padding). `cuptiPmSamplingDecodeData` refuses a padded size as
/// CUPTI_ERROR_INVALID_PARAMETER (the H100, CUDA 13.0); NVIDIA's samples pass the macro's value.
macro_rules! params {
    ($t:ty, $last:ident) => {{
        // SAFETY: CUPTI params structs are plain C data (integers and pointers): all-zero is a valid value.
        let mut p: $t = unsafe { std::mem::zeroed() };
        let size = std::mem::offset_of!($t, $last) + std::mem::size_of_val(&p.$last);
        // SAFETY: the first field of every CUPTI params struct is `size_t structSize`.
        unsafe { *(&mut p as *mut $t as *mut usize) = size };
        p
    }};
}

type F<P> = unsafe extern "C" fn(*mut P) -> u32;
/// `cuptiGetDeviceId(CUcontext, uint32_t*)`.
type FnDeviceId = unsafe extern "C" fn(cudarc::driver::sys::CUcontext, *mut u32) -> u32;

/// The CUPTI functions PM sampling calls, from the libcupti the session uses.
pub(crate) struct Api {
    profiler_initialize: F<cs::CUpti_Profiler_Initialize_Params>,
    chip_name: F<cs::CUpti_Device_GetChipName_Params>,
    availability: F<cs::CUpti_PmSampling_GetCounterAvailability_Params>,
    host_initialize: F<cs::CUpti_Profiler_Host_Initialize_Params>,
    host_deinitialize: F<cs::CUpti_Profiler_Host_Deinitialize_Params>,
    add_metrics: F<cs::CUpti_Profiler_Host_ConfigAddMetrics_Params>,
    config_size: F<cs::CUpti_Profiler_Host_GetConfigImageSize_Params>,
    config_image: F<cs::CUpti_Profiler_Host_GetConfigImage_Params>,
    passes: F<cs::CUpti_Profiler_Host_GetNumOfPasses_Params>,
    properties: F<MetricPropertiesParams>,
    evaluate: F<cs::CUpti_Profiler_Host_EvaluateToGpuValues_Params>,
    enable: F<cs::CUpti_PmSampling_Enable_Params>,
    disable: F<cs::CUpti_PmSampling_Disable_Params>,
    set_config: F<cs::CUpti_PmSampling_SetConfig_Params>,
    data_size: F<cs::CUpti_PmSampling_GetCounterDataSize_Params>,
    image_initialize: F<cs::CUpti_PmSampling_CounterDataImage_Initialize_Params>,
    start: F<cs::CUpti_PmSampling_Start_Params>,
    stop: F<cs::CUpti_PmSampling_Stop_Params>,
    decode: F<DecodeParams>,
    data_info: F<cs::CUpti_PmSampling_GetCounterDataInfo_Params>,
    sample_info: F<cs::CUpti_PmSampling_CounterData_GetSampleInfo_Params>,
    result_string: FnResultString,
    /// `cuptiGetTimestamp(uint64_t*)`: the clock of the samples' times.
    timestamp: unsafe extern "C" fn(*mut u64) -> u32,
    device_id: FnDeviceId,
}

/// A chip's name and counter-availability image: what a host object is made for. CUPTI may keep pointers to
/// both, so every [`HostObject`] holds them.
pub(crate) struct Chip {
    pub name: CString,
    pub availability: CounterAvailability,
}

/// A device's counter-availability image, as `cuptiPmSamplingGetCounterAvailability` wrote it.
pub(crate) struct CounterAvailability(Vec<u8>);

/// A Profiler Host object (`cuptiProfilerHostInitialize`). Not `Sync`: CUPTI is not asked to serve one object
/// from two threads at once.
pub(crate) struct HostObject {
    raw: *mut cs::CUpti_Profiler_Host_Object,
    _chip: Arc<Chip>,
}

// SAFETY: CUPTI's host objects may be used from any thread; `HostObject` is not `Sync`, so only one thread at a
// time can reach it.
unsafe impl Send for HostObject {}

/// A metric's config image (`cuptiProfilerHostGetConfigImage`).
pub(crate) struct ConfigImage(Vec<u8>);

/// A device's PM sampling object (`cuptiPmSamplingEnable`), with the config images it was given: CUPTI keeps a
/// pointer to the config image, so it lives as long as the object (and is leaked with an object never disabled).
pub(crate) struct SamplerObject {
    raw: *mut cs::CUpti_PmSampling_Object,
    configs: Vec<ConfigImage>,
}

// SAFETY: CUPTI's PM sampling objects may be used from any thread; `SamplerObject` is not `Sync`, so only one
// thread at a time can reach it.
unsafe impl Send for SamplerObject {}

impl Drop for SamplerObject {
    fn drop(&mut self) {
        // Not disabled (its context ended first): CUPTI may still point at the config images.
        std::mem::forget(std::mem::take(&mut self.configs));
    }
}

/// A counter-data image initialized by `cuptiPmSamplingCounterDataImageInitialize`, or a copy of one (CUPTI's
/// images hold offsets, not pointers: a copy is as good, which is how an image is reset).
#[derive(Clone, Default, PartialEq)]
pub(crate) struct CounterDataImage(Vec<u8>);

impl CounterDataImage {
    /// Makes this image a copy of `pristine`, an image as initialized (of the same size).
    pub fn reset_from(&mut self, pristine: &CounterDataImage) {
        self.0.copy_from_slice(&pristine.0);
    }

    /// Bytes standing in for an image, where no CUPTI call is made with it.
    #[cfg(test)]
    pub fn from_bytes_for_test(bytes: Vec<u8>) -> CounterDataImage {
        CounterDataImage(bytes)
    }
}

impl std::fmt::Debug for CounterDataImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CounterDataImage({} bytes)", self.0.len())
    }
}

/// What a metric is, as the host API describes it.
pub(crate) struct MetricProperties {
    pub description: String,
    pub unit: String,
}

/// The outcome of a decode that succeeded.
pub(crate) struct Decoded {
    /// The hardware has no more records (after Stop: drained).
    pub end_of_records: bool,
    /// CUPTI reports samples lost to a full hardware buffer.
    pub overflow: bool,
}

/// A decode that failed.
pub(crate) enum DecodeError {
    /// CUPTI_ERROR_OUT_OF_MEMORY: the hardware buffer filled (KEEP_OLDEST); CUPTI refuses every later decode.
    HardwareBufferFull,
    Failed(String),
}

/// `cuptiPmSamplingCounterDataGetSampleInfo`'s times of one sample, on CUPTI's clock.
pub(crate) struct SampleTimes {
    pub start: u64,
    pub end: u64,
}

/// `cuptiPmSamplingGetCounterDataInfo`'s sample counts of an image.
pub(crate) struct CounterDataInfo {
    pub total: usize,
    pub completed: usize,
}

impl Api {
    pub fn load(path: &Path) -> Result<Api, String> {
        let lib = super::cupti::Library::open(path)?;
        // SAFETY: each symbol's C signature is the one its field's type declares (cupti_pmsampling.h,
        // cupti_profiler_host.h, cupti_profiler_target.h).
        unsafe {
            macro_rules! sym {
                ($name:literal) => {
                    lib.function(concat!($name, "\0"), " (PM sampling needs CUPTI 12.6+)")?
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
            };
            Ok(api)
        }
    }

    /// `Ok` for CUPTI_SUCCESS, else the call and CUPTI's name for the code.
    fn check(&self, call: &str, code: u32) -> Result<(), String> {
        if code == CUPTI_SUCCESS {
            return Ok(());
        }
        Err(format!("{call}: {}", result_name(self.result_string, code)))
    }

    /// `cuptiGetDeviceId`: the device of a context CUPTI named in a callback (alive during it).
    pub fn context_device(&self, context: ContextHandle) -> Result<u32, String> {
        let mut device = 0u32;
        // SAFETY: the context comes from a callback that is still running, so it lives; valid out-pointer.
        let code = unsafe { (self.device_id)(context.0 as cudarc::driver::sys::CUcontext, &mut device) };
        self.check("cuptiGetDeviceId", code)?;
        Ok(device)
    }

    /// `cuptiProfilerInitialize`.
    pub fn profiler_initialize(&self) -> Result<(), String> {
        let mut p = params!(cs::CUpti_Profiler_Initialize_Params, pPriv);
        // SAFETY: params zeroed with their size.
        self.check("cuptiProfilerInitialize", unsafe { (self.profiler_initialize)(&mut p) })
    }

    /// `cuptiDeviceGetChipName`: device `device`'s chip name.
    pub fn chip_name(&self, device: u32) -> Result<CString, String> {
        let mut p = params!(cs::CUpti_Device_GetChipName_Params, pChipName);
        p.deviceIndex = device as usize;
        // SAFETY: params zeroed with their size.
        self.check("cuptiDeviceGetChipName", unsafe { (self.chip_name)(&mut p) })?;
        if p.pChipName.is_null() {
            return Err("cuptiDeviceGetChipName gave no name".into());
        }
        // SAFETY: CUPTI's NUL-terminated string, copied at once.
        Ok(unsafe { CStr::from_ptr(p.pChipName) }.to_owned())
    }

    /// `cuptiPmSamplingGetCounterAvailability`, asked for the size and then for the image.
    pub fn counter_availability(&self, device: u32) -> Result<CounterAvailability, String> {
        let mut p = params!(cs::CUpti_PmSampling_GetCounterAvailability_Params, pCounterAvailabilityImage);
        p.deviceIndex = device as usize;
        // SAFETY: params zeroed with their size; a null image asks for the size.
        self.check("cuptiPmSamplingGetCounterAvailability", unsafe { (self.availability)(&mut p) })?;
        let mut image = vec![0u8; p.counterAvailabilityImageSize];
        p.pCounterAvailabilityImage = image.as_mut_ptr();
        // SAFETY: the image has the size CUPTI asked for and outlives the call.
        self.check("cuptiPmSamplingGetCounterAvailability", unsafe { (self.availability)(&mut p) })?;
        Ok(CounterAvailability(image))
    }

    /// `cuptiProfilerHostInitialize`: a PM sampling host object for `chip`, with no metrics.
    pub fn host_initialize(&self, chip: &Arc<Chip>) -> Result<HostObject, String> {
        let mut p = params!(cs::CUpti_Profiler_Host_Initialize_Params, pHostObject);
        p.profilerType = cs::CUpti_ProfilerType::CUPTI_PROFILER_TYPE_PM_SAMPLING;
        p.pChipName = chip.name.as_ptr();
        p.pCounterAvailabilityImage = chip.availability.0.as_ptr();
        // SAFETY: params zeroed with their size; the name and image CUPTI may keep live in `chip`, which the host
        // object holds.
        self.check("cuptiProfilerHostInitialize", unsafe { (self.host_initialize)(&mut p) })?;
        Ok(HostObject { raw: p.pHostObject, _chip: Arc::clone(chip) })
    }

    /// `cuptiProfilerHostDeinitialize` (its result ignored: the object is gone either way).
    pub fn host_deinitialize(&self, host: HostObject) {
        let mut p = params!(cs::CUpti_Profiler_Host_Deinitialize_Params, pHostObject);
        p.pHostObject = host.raw;
        // SAFETY: a live host object, consumed: never used again.
        let _ = unsafe { (self.host_deinitialize)(&mut p) };
    }

    /// `cuptiProfilerHostConfigAddMetrics`.
    pub fn host_add_metrics(&self, host: &mut HostObject, names: &[CString]) -> Result<(), String> {
        let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let mut p = params!(cs::CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics);
        p.pHostObject = host.raw;
        p.ppMetricNames = ptrs.as_mut_ptr();
        p.numMetrics = ptrs.len();
        // SAFETY: a live host object; `ptrs` and the names outlive the call.
        self.check("cuptiProfilerHostConfigAddMetrics", unsafe { (self.add_metrics)(&mut p) })
    }

    /// `cuptiProfilerHostGetConfigImageSize`, then `cuptiProfilerHostGetConfigImage`: the config image of the
    /// metrics added to `host`.
    pub fn host_config_image(&self, host: &HostObject) -> Result<ConfigImage, String> {
        let mut size = params!(cs::CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize);
        size.pHostObject = host.raw;
        // SAFETY: a live host object.
        self.check("cuptiProfilerHostGetConfigImageSize", unsafe { (self.config_size)(&mut size) })?;
        let mut image = vec![0u8; size.configImageSize];
        let mut get = params!(cs::CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage);
        get.pHostObject = host.raw;
        get.configImageSize = image.len();
        get.pConfigImage = image.as_mut_ptr();
        // SAFETY: a live host object; the image has the size CUPTI asked for and outlives the call.
        self.check("cuptiProfilerHostGetConfigImage", unsafe { (self.config_image)(&mut get) })?;
        Ok(ConfigImage(image))
    }

    /// `cuptiProfilerHostGetNumOfPasses`: the passes a config image needs.
    pub fn config_passes(&self, image: &mut ConfigImage) -> Result<usize, String> {
        let mut p = params!(cs::CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses);
        p.configImageSize = image.0.len();
        p.pConfigImage = image.0.as_mut_ptr();
        // SAFETY: a config image CUPTI made, outliving the call.
        self.check("cuptiProfilerHostGetNumOfPasses", unsafe { (self.passes)(&mut p) })?;
        Ok(p.numOfPasses)
    }

    /// `cuptiProfilerHostGetMetricProperties`; `None` when CUPTI refuses (the chip has no such metric).
    pub fn metric_properties(&self, host: &HostObject, name: &CStr) -> Option<MetricProperties> {
        let mut p = params!(MetricPropertiesParams, metric_type);
        p.host = host.raw;
        p.metric = name.as_ptr();
        // SAFETY: a live host object; the name outlives the call.
        if unsafe { (self.properties)(&mut p) } != CUPTI_SUCCESS {
            return None;
        }
        let text = |s: *const c_char| {
            // SAFETY: CUPTI's strings are NUL-terminated and live as long as the host object (borrowed here).
            if s.is_null() { String::new() } else { unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned() }
        };
        Some(MetricProperties { description: text(p.description), unit: text(p.dim_unit) })
    }

    /// `cuptiProfilerHostEvaluateToGpuValues`: sample `sample` of `image` evaluated into `values`, one per name.
    pub fn evaluate(
        &self,
        host: &HostObject,
        image: &CounterDataImage,
        sample: usize,
        names: &[CString],
        values: &mut [f64],
    ) -> Result<(), String> {
        assert_eq!(names.len(), values.len(), "a value for each metric");
        let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let mut p = params!(cs::CUpti_Profiler_Host_EvaluateToGpuValues_Params, pMetricValues);
        p.pHostObject = host.raw;
        p.pCounterDataImage = image.0.as_ptr();
        p.counterDataImageSize = image.0.len();
        p.rangeIndex = sample;
        p.ppMetricNames = ptrs.as_mut_ptr();
        p.numMetrics = ptrs.len();
        p.pMetricValues = values.as_mut_ptr();
        // SAFETY: a live host object; an image CUPTI initialized; names and values have numMetrics entries and
        // outlive the call.
        self.check("cuptiProfilerHostEvaluateToGpuValues", unsafe { (self.evaluate)(&mut p) })
    }

    /// `cuptiPmSamplingEnable` on device `device`.
    pub fn enable(&self, device: u32) -> Result<SamplerObject, String> {
        let mut p = params!(cs::CUpti_PmSampling_Enable_Params, pPmSamplingObject);
        p.deviceIndex = device as usize;
        // SAFETY: params zeroed with their size.
        self.check("cuptiPmSamplingEnable", unsafe { (self.enable)(&mut p) })?;
        Ok(SamplerObject { raw: p.pPmSamplingObject, configs: Vec::new() })
    }

    /// `cuptiPmSamplingDisable` (its result ignored: the object is gone either way).
    pub fn disable(&self, mut object: SamplerObject) {
        let mut p = params!(cs::CUpti_PmSampling_Disable_Params, pPmSamplingObject);
        p.pPmSamplingObject = object.raw;
        // SAFETY: a live object, consumed: never used again.
        let _ = unsafe { (self.disable)(&mut p) };
        // Disabled: CUPTI points at the config images no more.
        object.configs.clear();
    }

    /// `cuptiPmSamplingSetConfig` with the time trigger; the object keeps `config`.
    pub fn set_config(
        &self,
        object: &mut SamplerObject,
        config: ConfigImage,
        hardware_buffer_size: usize,
        interval: Duration,
    ) -> Result<(), String> {
        let mut p = params!(cs::CUpti_PmSampling_SetConfig_Params, hwBufferAppendMode);
        p.pPmSamplingObject = object.raw;
        p.configSize = config.0.len();
        p.pConfig = config.0.as_ptr();
        p.hardwareBufferSize = hardware_buffer_size;
        p.samplingInterval = interval.as_nanos() as u64;
        p.triggerMode = cs::CUpti_PmSampling_TriggerMode::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
        // The image's bytes stay where they are when the Vec moves: CUPTI's pointer stays good.
        object.configs.push(config);
        // SAFETY: a live object; the config image is CUPTI's, kept with the object as long as CUPTI may use it.
        self.check("cuptiPmSamplingSetConfig", unsafe { (self.set_config)(&mut p) })
    }

    /// `cuptiPmSamplingGetCounterDataSize`: the size of an image for `names` holding `max_samples`.
    pub fn counter_data_size(
        &self,
        object: &SamplerObject,
        names: &[CString],
        max_samples: u32,
    ) -> Result<usize, String> {
        let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let mut p = params!(cs::CUpti_PmSampling_GetCounterDataSize_Params, counterDataSize);
        p.pPmSamplingObject = object.raw;
        p.pMetricNames = ptrs.as_mut_ptr();
        p.numMetrics = ptrs.len();
        p.maxSamples = max_samples;
        // SAFETY: a live object; `ptrs` and the names outlive the call.
        self.check("cuptiPmSamplingGetCounterDataSize", unsafe { (self.data_size)(&mut p) })?;
        Ok(p.counterDataSize)
    }

    /// `cuptiPmSamplingCounterDataImageInitialize` on a fresh image of `size` bytes.
    pub fn initialize_counter_data(&self, object: &SamplerObject, size: usize) -> Result<CounterDataImage, String> {
        let mut image = vec![0u8; size];
        let mut p = params!(cs::CUpti_PmSampling_CounterDataImage_Initialize_Params, pCounterData);
        p.pPmSamplingObject = object.raw;
        p.counterDataSize = image.len();
        p.pCounterData = image.as_mut_ptr();
        // SAFETY: a live object; the image has the size given and outlives the call.
        self.check("cuptiPmSamplingCounterDataImageInitialize", unsafe { (self.image_initialize)(&mut p) })?;
        Ok(CounterDataImage(image))
    }

    /// `cuptiPmSamplingStart`.
    pub fn start(&self, object: &SamplerObject) -> Result<(), String> {
        let mut p = params!(cs::CUpti_PmSampling_Start_Params, pPmSamplingObject);
        p.pPmSamplingObject = object.raw;
        // SAFETY: a live object.
        self.check("cuptiPmSamplingStart", unsafe { (self.start)(&mut p) })
    }

    /// `cuptiPmSamplingStop` (one never started answers with an error).
    pub fn stop(&self, object: &SamplerObject) -> Result<(), String> {
        let mut p = params!(cs::CUpti_PmSampling_Stop_Params, pPmSamplingObject);
        p.pPmSamplingObject = object.raw;
        // SAFETY: a live object.
        self.check("cuptiPmSamplingStop", unsafe { (self.stop)(&mut p) })
    }

    /// `cuptiPmSamplingDecodeData`: the hardware's new samples into `image`.
    pub fn decode(&self, object: &SamplerObject, image: &mut CounterDataImage) -> Result<Decoded, DecodeError> {
        let mut p = params!(DecodeParams, overflow);
        p.object = object.raw;
        p.image = image.0.as_mut_ptr();
        p.image_size = image.0.len();
        // SAFETY: a live object; an image CUPTI initialized, outliving the call.
        let code = unsafe { (self.decode)(&mut p) };
        if code == CUPTI_ERROR_OUT_OF_MEMORY {
            return Err(DecodeError::HardwareBufferFull);
        }
        self.check("cuptiPmSamplingDecodeData", code).map_err(DecodeError::Failed)?;
        Ok(Decoded { end_of_records: p.stop_reason == STOP_END_OF_RECORDS, overflow: p.overflow != 0 })
    }

    /// `cuptiPmSamplingGetCounterDataInfo`.
    pub fn counter_data_info(&self, image: &CounterDataImage) -> Result<CounterDataInfo, String> {
        let mut p = params!(cs::CUpti_PmSampling_GetCounterDataInfo_Params, numCompletedSamples);
        p.pCounterDataImage = image.0.as_ptr();
        p.counterDataImageSize = image.0.len();
        // SAFETY: an image CUPTI initialized, outliving the call.
        self.check("cuptiPmSamplingGetCounterDataInfo", unsafe { (self.data_info)(&mut p) })?;
        Ok(CounterDataInfo { total: p.numTotalSamples, completed: p.numCompletedSamples })
    }

    /// `cuptiPmSamplingCounterDataGetSampleInfo`: the times of sample `index` of `image`.
    pub fn sample_info(
        &self,
        object: &SamplerObject,
        image: &CounterDataImage,
        index: usize,
    ) -> Result<SampleTimes, String> {
        let mut p = params!(cs::CUpti_PmSampling_CounterData_GetSampleInfo_Params, endTimestamp);
        p.pPmSamplingObject = object.raw;
        p.pCounterDataImage = image.0.as_ptr();
        p.counterDataImageSize = image.0.len();
        p.sampleIndex = index;
        // SAFETY: a live object; an image CUPTI initialized, outliving the call (CUPTI checks the index).
        self.check("cuptiPmSamplingCounterDataGetSampleInfo", unsafe { (self.sample_info)(&mut p) })?;
        Ok(SampleTimes { start: p.startTimestamp, end: p.endTimestamp })
    }

    /// `cuptiGetTimestamp`: now on the samples' clock; `None` when CUPTI cannot say.
    pub fn timestamp(&self) -> Option<u64> {
        let mut t = 0u64;
        // SAFETY: a valid out-pointer.
        (unsafe { (self.timestamp)(&mut t) } == CUPTI_SUCCESS).then_some(t)
    }
}

/// NVIDIA's real libcupti, CUDA 13.0 (from the PyPI wheel the test set-up installs; loading it needs no GPU).
#[cfg(test)]
pub(crate) fn real_libcupti_for_test() -> std::path::PathBuf {
    let cache = std::env::var_os("CUTR_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache"));
    let lib = cache.join("cupti/cupti-13.0/lib/libcupti.so.13");
    assert!(lib.exists(), "{} is missing: run tools/fetch-cupti.sh", lib.display());
    lib
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

    /// Every function this module calls is in CUDA 13.0's real libcupti.
    #[test]
    fn every_function_is_in_the_real_libcupti() {
        let api = Api::load(&real_libcupti_for_test()).unwrap();
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
