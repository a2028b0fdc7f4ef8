//! Choosing the metrics to sample on a chip, with CUPTI's Profiler Host API.

use std::ffi::{CStr, CString, c_char};

use cudarc::cupti::sys as cs;
use cutr_format::CounterMetric;

use crate::ffi::pm::{Api, CUPTI_SUCCESS, MetricPropertiesParams, params};

/// Device `d`'s chip name and counter-availability image.
pub(super) fn chip_and_availability(api: &Api, d: u32) -> Result<(CString, Vec<u8>), String> {
    // SAFETY: params zeroed with their size; the image is allocated with the size CUPTI asked for; the chip name
    // is copied while CUPTI's string is live.
    unsafe {
        let mut chip = params!(cs::CUpti_Device_GetChipName_Params, pChipName);
        chip.deviceIndex = d as usize;
        api.check("cuptiDeviceGetChipName", (api.chip_name)(&mut chip))?;
        if chip.pChipName.is_null() {
            return Err("cuptiDeviceGetChipName gave no name".into());
        }
        let name = CStr::from_ptr(chip.pChipName).to_owned();
        debug!("chip name");
        let mut avail = params!(cs::CUpti_PmSampling_GetCounterAvailability_Params, pCounterAvailabilityImage);
        avail.deviceIndex = d as usize;
        api.check("cuptiPmSamplingGetCounterAvailability", (api.availability)(&mut avail))?;
        let mut availability = vec![0u8; avail.counterAvailabilityImageSize];
        avail.pCounterAvailabilityImage = availability.as_mut_ptr();
        api.check("cuptiPmSamplingGetCounterAvailability", (api.availability)(&mut avail))?;
        Ok((name, availability))
    }
}

/// The metrics, in order, that exist on the chip and fit one pass together; notes the others. Of `a|b`
/// alternatives the first the chip has is taken. Existence is asked of a host object without metrics (adding a
/// name the chip lacks fails with INVALID_PARAMETER or UNKNOWN); each fit trial configures a fresh host object
/// (metrics added to one cannot be taken back).
///
/// # Safety
/// `chip` is CUPTI's name of a chip and `availability` its counter-availability image.
pub(super) unsafe fn fit_metrics(
    api: &Api,
    chip: *const c_char,
    availability: &[u8],
    wanted: &[String],
    note: &dyn Fn(String),
    d: u32,
) -> Vec<CString> {
    // SAFETY: the caller's.
    let lister = match unsafe { host_init(api, chip, availability) } {
        Ok(h) => h,
        Err(e) => {
            note(format!("PM sampling on device {d}: {e}"));
            return Vec::new();
        }
    };
    let mut existing: Vec<(&String, CString)> = Vec::new();
    for m in wanted {
        let found = m
            .split('|')
            .filter_map(|alt| CString::new(alt.trim()).ok())
            // SAFETY: `lister` is live until the end of this function.
            .find(|alt| unsafe { properties(api, lister, alt) }.is_some());
        match found {
            Some(name) => existing.push((m, name)),
            None => note(format!("PM sampling on device {d}: {m} left out: not a PM sampling metric of this chip")),
        }
    }
    // SAFETY: not used again.
    unsafe { deinit_host(api, lister) };
    // Usually they all fit one pass: one trial. Otherwise each is added in turn (a trial per metric, ~40 ms each).
    let all: Vec<CString> = existing.iter().map(|(_, n)| n.clone()).collect();
    // SAFETY: the caller's; the trial's host object is released at once.
    if let Ok((host, _, 1)) = unsafe { host_with(api, chip, availability, &all) } {
        // SAFETY: not used again.
        unsafe { deinit_host(api, host) };
        return all;
    }
    let mut kept: Vec<CString> = Vec::new();
    for (m, name) in existing {
        let mut trial: Vec<CString> = kept.clone();
        trial.push(name);
        // SAFETY: the caller's; the trial's host object is released at once.
        match unsafe { host_with(api, chip, availability, &trial) } {
            Ok((host, _, 1)) => {
                // SAFETY: not used again.
                unsafe { deinit_host(api, host) };
                kept = trial;
            }
            Ok((host, _, passes)) => {
                // SAFETY: not used again.
                unsafe { deinit_host(api, host) };
                note(format!(
                    "PM sampling on device {d}: {m} left out: with the metrics before it, it needs {passes} passes \
                     (PM sampling takes one)"
                ));
            }
            Err(e) => note(format!("PM sampling on device {d}: {m} left out: {e}")),
        }
    }
    kept
}

/// A host object for `chip` with no metrics.
///
/// # Safety
/// `chip` is CUPTI's name of a chip and `availability` its counter-availability image, which outlives the object.
pub(super) unsafe fn host_init(
    api: &Api,
    chip: *const c_char,
    availability: &[u8],
) -> Result<*mut cs::CUpti_Profiler_Host_Object, String> {
    let mut hi = params!(cs::CUpti_Profiler_Host_Initialize_Params, pHostObject);
    hi.profilerType = cs::CUpti_ProfilerType::CUPTI_PROFILER_TYPE_PM_SAMPLING;
    hi.pChipName = chip;
    hi.pCounterAvailabilityImage = availability.as_ptr();
    // SAFETY: the caller's.
    api.check("cuptiProfilerHostInitialize", unsafe { (api.host_initialize)(&mut hi) })?;
    Ok(hi.pHostObject)
}

/// A host object for `chip` configured with `names`, its config image and number of passes; the host object is
/// released again on failure.
///
/// # Safety
/// `chip` is CUPTI's name of a chip and `availability` its counter-availability image.
pub(super) unsafe fn host_with(
    api: &Api,
    chip: *const c_char,
    availability: &[u8],
    names: &[CString],
) -> Result<(*mut cs::CUpti_Profiler_Host_Object, Vec<u8>, usize), String> {
    // SAFETY: the caller's.
    let host = unsafe { host_init(api, chip, availability) }?;
    // SAFETY: `host` was just made.
    match unsafe { config_for(api, host, names) } {
        Ok((image, passes)) => Ok((host, image, passes)),
        Err(e) => {
            // SAFETY: not used again.
            unsafe { deinit_host(api, host) };
            Err(e)
        }
    }
}

/// The config image of `names` added to `host`, and its number of passes.
///
/// # Safety
/// `host` is a live host object.
pub(super) unsafe fn config_for(
    api: &Api,
    host: *mut cs::CUpti_Profiler_Host_Object,
    names: &[CString],
) -> Result<(Vec<u8>, usize), String> {
    let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    // SAFETY: the caller's; `ptrs` and the names outlive the calls.
    unsafe {
        let mut add = params!(cs::CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics);
        add.pHostObject = host;
        add.ppMetricNames = ptrs.as_mut_ptr();
        add.numMetrics = ptrs.len();
        api.check("cuptiProfilerHostConfigAddMetrics", (api.add_metrics)(&mut add))?;
        let mut size = params!(cs::CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize);
        size.pHostObject = host;
        api.check("cuptiProfilerHostGetConfigImageSize", (api.config_size)(&mut size))?;
        let mut image = vec![0u8; size.configImageSize];
        let mut get = params!(cs::CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage);
        get.pHostObject = host;
        get.configImageSize = image.len();
        get.pConfigImage = image.as_mut_ptr();
        api.check("cuptiProfilerHostGetConfigImage", (api.config_image)(&mut get))?;
        let mut passes = params!(cs::CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses);
        passes.configImageSize = image.len();
        passes.pConfigImage = image.as_mut_ptr();
        api.check("cuptiProfilerHostGetNumOfPasses", (api.passes)(&mut passes))?;
        Ok((image, passes.numOfPasses))
    }
}

/// The metric's description and unit as the host API gives them; `None` when the chip has no such metric.
///
/// # Safety
/// `host` is a live host object.
pub(super) unsafe fn properties(
    api: &Api,
    host: *mut cs::CUpti_Profiler_Host_Object,
    name: &CStr,
) -> Option<CounterMetric> {
    let mut p = params!(MetricPropertiesParams, metric_type);
    p.host = host;
    p.metric = name.as_ptr();
    let text = |s: *const c_char| {
        // SAFETY: CUPTI's strings are NUL-terminated and live as long as the host object.
        if s.is_null() { String::new() } else { unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned() }
    };
    // SAFETY: the caller's.
    if unsafe { (api.properties)(&mut p) } != CUPTI_SUCCESS {
        return None;
    }
    Some(CounterMetric {
        name: name.to_string_lossy().into_owned(),
        unit: text(p.dim_unit),
        description: text(p.description),
    })
}

/// # Safety
/// `host` is a live host object, not used afterwards.
pub(super) unsafe fn deinit_host(api: &Api, host: *mut cs::CUpti_Profiler_Host_Object) {
    let mut p = params!(cs::CUpti_Profiler_Host_Deinitialize_Params, pHostObject);
    p.pHostObject = host;
    // SAFETY: the caller's.
    let _ = unsafe { (api.host_deinitialize)(&mut p) };
}
