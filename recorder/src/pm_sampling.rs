//! Hardware counters over time through CUPTI's PM Sampling API (`--counters`, CUDA 12.6+, Turing and later), on
//! the recorder's own thread: per device, a metric set that fits one pass (checked with the Profiler Host API;
//! each metric that does not exist or does not fit is named in a note), sampled by the GPU at a fixed interval,
//! decoded every few milliseconds so the hardware buffer never fills, evaluated to values here (the converter needs
//! no NVIDIA library), and sent as `counters` chunks.
//!
//! What the H100 showed (measurements/2026-11-23-h100-pm-probe/NOTES.md) and this follows: the time trigger;
//! sample timestamps on CUPTI's own clock; the first sample of a session is garbage (dropped); decodes during
//! collection stop with OTHER, after Stop with END_OF_RECORDS (drained, bounded); a full hardware buffer shows as
//! CUPTI_ERROR_OUT_OF_MEMORY from every later decode (counted as loss, and sampling stops with a note); a small
//! counter-data image, reset by copying a pristine one (re-initializing a large image took 30-50 ms); the config
//! image kept alive while sampling.

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::cupti::sys as cs;
use cutr_format::{CounterMetric, CounterSamples};

/// Metrics sampled by default, by what a user asks first: is the GPU busy, memory- or compute-bound, how full,
/// using its tensor cores, moving data over PCIe or NVLink. Each that a chip lacks or that does not fit one pass
/// with the ones before it is left out, with a note.
pub const DEFAULT_METRICS: &[&str] = &[
    "gr__cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum.per_second",
    "dram__bytes_write.sum.per_second",
    "tpc__warps_active_realtime.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
    "pcie__read_bytes.sum.per_second",
    "pcie__write_bytes.sum.per_second",
    "nvlrx__bytes.sum.per_second",
    "nvltx__bytes.sum.per_second",
];

/// The PM sampling options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmConfig {
    /// Metric names (full, with rollup and submetric).
    pub metrics: Vec<String>,
    pub interval: Duration,
}

impl Default for PmConfig {
    fn default() -> Self {
        PmConfig { metrics: DEFAULT_METRICS.iter().map(|m| m.to_string()).collect(), interval: DEFAULT_INTERVAL }
    }
}

/// 10 kHz, Nsight Systems' default rate.
pub const DEFAULT_INTERVAL: Duration = Duration::from_micros(100);
/// The fastest accepted: at 10 us a 64 MiB hardware buffer overflowed on the H100 even when decoded every 10 ms.
pub const MIN_INTERVAL: Duration = Duration::from_micros(20);
/// How often the hardware buffer is decoded.
const DECODE_PERIOD: Duration = Duration::from_millis(10);
const HARDWARE_BUFFER_BYTES: usize = 64 << 20;
/// Samples one counter-data image holds (about 15 KB each for 7 metrics on the H100).
const IMAGE_SAMPLES: u32 = 2000;
/// Decodes after Stop, at most, to drain what the hardware still holds.
const MAX_DRAIN_DECODES: usize = 64;
const CUPTI_SUCCESS: u32 = 0;
/// cupti_result.h: 8 (13 is CUPTI_ERROR_NOT_READY).
const CUPTI_ERROR_OUT_OF_MEMORY: u32 = 8;
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

type F<P> = unsafe extern "C" fn(*mut P) -> u32;
use crate::cupti::FnResultString;

/// The CUPTI functions this module calls, from the libcupti the session uses.
struct Api {
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
}

/// Zeroed params with their size set: every CUPTI params struct starts with `structSize`.
macro_rules! params {
    ($t:ty) => {{
        // SAFETY: CUPTI params structs are plain C data (integers and pointers): all-zero is a valid value.
        #[allow(unused_unsafe)]
        let mut p: $t = unsafe { std::mem::zeroed() };
        // SAFETY: the first field of every CUPTI params struct is `size_t structSize`.
        #[allow(unused_unsafe)]
        let () = unsafe { *(&mut p as *mut $t as *mut usize) = std::mem::size_of::<$t>() };
        p
    }};
}

impl Api {
    fn load(path: &Path) -> Result<Api, String> {
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
            };
            std::mem::forget(lib);
            Ok(api)
        }
    }

    /// `Ok` for CUPTI_SUCCESS, else the call and CUPTI's name for the code.
    fn check(&self, call: &str, code: u32) -> Result<(), String> {
        if code == CUPTI_SUCCESS {
            return Ok(());
        }
        Err(format!("{call}: {}", crate::cupti::result_name(self.result_string, code)))
    }
}

/// One device's PM sampling session: everything CUPTI points into lives here until it is disabled.
struct DeviceSession {
    device: u32,
    host: *mut cs::CUpti_Profiler_Host_Object,
    object: *mut cs::CUpti_PmSampling_Object,
    /// CUPTI keeps a pointer to the config image: it must outlive the session.
    _config: Vec<u8>,
    names: Vec<CString>,
    metrics: Vec<CounterMetric>,
    image: Vec<u8>,
    /// The image as initialized: copied over `image` to reset it.
    pristine: Vec<u8>,
    /// Samples of the current image already evaluated.
    done: usize,
    /// The session's first sample is dropped (it starts before Start and carries garbage).
    first_dropped: bool,
    pending: CounterSamples,
    failed: bool,
}

/// The running sampler.
pub(crate) struct PmSampler {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl PmSampler {
    /// Starts a thread that sets PM sampling up on `devices()` (the CUDA ordinals, asked for once CUDA is
    /// initialized) and samples until stopped. `send` takes each chunk, `note` each problem.
    pub fn start(
        library: &Path,
        config: PmConfig,
        devices: Box<dyn Fn() -> Vec<u32> + Send>,
        send: Box<dyn Fn(CounterSamples) + Send>,
        note: Box<dyn Fn(String) + Send>,
    ) -> Result<PmSampler, String> {
        let api = Api::load(library)?;
        let (stop, stop_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("cutr-pm".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(&api, &config, &*devices, &*send, &*note, &stop_rx)
                }));
                if r.is_err() {
                    note("PM sampling stopped on an internal error".into());
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(PmSampler { stop, thread })
    }

    /// Stops sampling, drains what the hardware holds and sends it.
    pub fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

fn run(
    api: &Api,
    config: &PmConfig,
    devices: &dyn Fn() -> Vec<u32>,
    send: &dyn Fn(CounterSamples),
    note: &dyn Fn(String),
    stop: &mpsc::Receiver<()>,
) {
    let mut ordinals = Vec::new();
    for _ in 0..40 {
        ordinals = devices();
        if !ordinals.is_empty() || stop.recv_timeout(Duration::from_millis(50)).is_ok() {
            break;
        }
    }
    if ordinals.is_empty() {
        note("PM sampling: no CUDA device known; not sampling".into());
        return;
    }
    let mut init = params!(cs::CUpti_Profiler_Initialize_Params);
    // SAFETY: valid params.
    if let Err(e) = api.check("cuptiProfilerInitialize", unsafe { (api.profiler_initialize)(&mut init) }) {
        note(format!("PM sampling: {e}; not sampling"));
        return;
    }
    let mut sessions: Vec<DeviceSession> = Vec::new();
    for d in ordinals {
        match setup(api, d, config, note) {
            Ok(s) => sessions.push(s),
            Err(e) => note(format!("PM sampling on device {d}: {e}")),
        }
    }
    let mut next = Instant::now();
    loop {
        next += DECODE_PERIOD;
        match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        for s in sessions.iter_mut().filter(|s| !s.failed) {
            if let Err(e) = decode(api, s, note) {
                s.failed = true;
                note(format!("PM sampling on device {} stopped: {e}", s.device));
            }
            if s.pending.len() >= 1000 {
                send(std::mem::replace(&mut s.pending, empty(s.device, &s.metrics)));
            }
        }
        if Instant::now() > next + Duration::from_secs(1) {
            next = Instant::now();
        }
    }
    for mut s in sessions {
        finish(api, &mut s, note);
        if !s.pending.is_empty() || s.pending.lost_samples > 0 {
            send(std::mem::replace(&mut s.pending, empty(s.device, &s.metrics)));
        }
    }
}

fn empty(device: u32, metrics: &[CounterMetric]) -> CounterSamples {
    CounterSamples { source: "pm_sampling".into(), device, metrics: metrics.to_vec(), ..Default::default() }
}

/// Host configuration, then PM sampling enabled, configured and started on device `d`.
fn setup(api: &Api, d: u32, config: &PmConfig, note: &dyn Fn(String)) -> Result<DeviceSession, String> {
    // SAFETY: every call below gets params zeroed with their size, out-pointers to live locals, and buffers
    // allocated with the sizes CUPTI asked for that outlive the calls; CUPTI's objects are used only while live
    // (disabled and deinitialized in `finish`).
    unsafe {
        let mut chip = params!(cs::CUpti_Device_GetChipName_Params);
        chip.deviceIndex = d as usize;
        api.check("cuptiDeviceGetChipName", (api.chip_name)(&mut chip))?;
        let mut avail = params!(cs::CUpti_PmSampling_GetCounterAvailability_Params);
        avail.deviceIndex = d as usize;
        api.check("cuptiPmSamplingGetCounterAvailability", (api.availability)(&mut avail))?;
        let mut availability = vec![0u8; avail.counterAvailabilityImageSize];
        avail.pCounterAvailabilityImage = availability.as_mut_ptr();
        api.check("cuptiPmSamplingGetCounterAvailability", (api.availability)(&mut avail))?;
        let chip_name = chip.pChipName;
        let names = fit_metrics(api, chip_name, &availability, &config.metrics, note, d);
        if names.is_empty() {
            return Err("none of the metrics can be sampled".into());
        }
        let (host, config_image, _) = host_with(api, chip_name, &availability, &names)?;
        let metrics: Vec<CounterMetric> = names.iter().map(|n| describe(api, host, n)).collect();
        let mut en = params!(cs::CUpti_PmSampling_Enable_Params);
        en.deviceIndex = d as usize;
        if let Err(e) = api.check("cuptiPmSamplingEnable", (api.enable)(&mut en)) {
            deinit_host(api, host);
            return Err(e);
        }
        let object = en.pPmSamplingObject;
        let mut s = DeviceSession {
            device: d,
            host,
            object,
            _config: config_image,
            names,
            metrics: metrics.clone(),
            image: Vec::new(),
            pristine: Vec::new(),
            done: 0,
            first_dropped: false,
            pending: empty(d, &metrics),
            failed: false,
        };
        if let Err(e) = configure(api, &mut s, config) {
            finish(api, &mut s, note);
            return Err(e);
        }
        Ok(s)
    }
}

/// The metrics, in order, that exist and fit one pass together; notes the others. Each trial configures a fresh
/// host object (metrics added to one cannot be taken back).
///
/// # Safety
/// `chip` is CUPTI's name of a chip and `availability` its counter-availability image.
unsafe fn fit_metrics(
    api: &Api,
    chip: *const c_char,
    availability: &[u8],
    wanted: &[String],
    note: &dyn Fn(String),
    d: u32,
) -> Vec<CString> {
    let mut kept: Vec<CString> = Vec::new();
    for m in wanted {
        let Ok(name) = CString::new(m.as_str()) else { continue };
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

/// A host object for `chip` configured with `names`, its config image and number of passes; the host object is
/// released again on failure.
///
/// # Safety
/// `chip` is CUPTI's name of a chip and `availability` its counter-availability image.
unsafe fn host_with(
    api: &Api,
    chip: *const c_char,
    availability: &[u8],
    names: &[CString],
) -> Result<(*mut cs::CUpti_Profiler_Host_Object, Vec<u8>, usize), String> {
    let mut hi = params!(cs::CUpti_Profiler_Host_Initialize_Params);
    hi.profilerType = cs::CUpti_ProfilerType::CUPTI_PROFILER_TYPE_PM_SAMPLING;
    hi.pChipName = chip;
    hi.pCounterAvailabilityImage = availability.as_ptr();
    // SAFETY: the caller's; the image outlives the call.
    api.check("cuptiProfilerHostInitialize", unsafe { (api.host_initialize)(&mut hi) })?;
    let host = hi.pHostObject;
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
unsafe fn config_for(
    api: &Api,
    host: *mut cs::CUpti_Profiler_Host_Object,
    names: &[CString],
) -> Result<(Vec<u8>, usize), String> {
    let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    // SAFETY: the caller's; `ptrs` and the names outlive the calls.
    unsafe {
        let mut add = params!(cs::CUpti_Profiler_Host_ConfigAddMetrics_Params);
        add.pHostObject = host;
        add.ppMetricNames = ptrs.as_mut_ptr();
        add.numMetrics = ptrs.len();
        api.check("cuptiProfilerHostConfigAddMetrics", (api.add_metrics)(&mut add))?;
        let mut size = params!(cs::CUpti_Profiler_Host_GetConfigImageSize_Params);
        size.pHostObject = host;
        api.check("cuptiProfilerHostGetConfigImageSize", (api.config_size)(&mut size))?;
        let mut image = vec![0u8; size.configImageSize];
        let mut get = params!(cs::CUpti_Profiler_Host_GetConfigImage_Params);
        get.pHostObject = host;
        get.configImageSize = image.len();
        get.pConfigImage = image.as_mut_ptr();
        api.check("cuptiProfilerHostGetConfigImage", (api.config_image)(&mut get))?;
        let mut passes = params!(cs::CUpti_Profiler_Host_GetNumOfPasses_Params);
        passes.configImageSize = image.len();
        passes.pConfigImage = image.as_mut_ptr();
        api.check("cuptiProfilerHostGetNumOfPasses", (api.passes)(&mut passes))?;
        Ok((image, passes.numOfPasses))
    }
}

/// The metric's description and unit, as the host API gives them.
///
/// # Safety
/// `host` is a live host object.
unsafe fn describe(api: &Api, host: *mut cs::CUpti_Profiler_Host_Object, name: &CStr) -> CounterMetric {
    let mut p = params!(MetricPropertiesParams);
    p.host = host;
    p.metric = name.as_ptr();
    let text = |s: *const c_char| {
        // SAFETY: CUPTI's strings are NUL-terminated and live as long as the host object.
        if s.is_null() { String::new() } else { unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned() }
    };
    let name = name.to_string_lossy().into_owned();
    // SAFETY: the caller's.
    if unsafe { (api.properties)(&mut p) } != CUPTI_SUCCESS {
        return CounterMetric { name, ..Default::default() };
    }
    CounterMetric { name, unit: text(p.dim_unit), description: text(p.description) }
}

/// # Safety
/// `host` is a live host object, not used afterwards.
unsafe fn deinit_host(api: &Api, host: *mut cs::CUpti_Profiler_Host_Object) {
    let mut p = params!(cs::CUpti_Profiler_Host_Deinitialize_Params);
    p.pHostObject = host;
    // SAFETY: the caller's.
    let _ = unsafe { (api.host_deinitialize)(&mut p) };
}

/// Sets the sampling configuration, sizes and initializes the counter-data image, and starts sampling.
///
/// # Safety
/// `s.object` and `s.host` are live.
unsafe fn configure(api: &Api, s: &mut DeviceSession, config: &PmConfig) -> Result<(), String> {
    // SAFETY: the caller's; the config image and the counter-data images live in `s` while sampling runs.
    unsafe {
        let mut set = params!(cs::CUpti_PmSampling_SetConfig_Params);
        set.pPmSamplingObject = s.object;
        set.configSize = s._config.len();
        set.pConfig = s._config.as_ptr();
        set.hardwareBufferSize = HARDWARE_BUFFER_BYTES;
        set.samplingInterval = config.interval.as_nanos() as u64;
        set.triggerMode = cs::CUpti_PmSampling_TriggerMode::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
        api.check("cuptiPmSamplingSetConfig", (api.set_config)(&mut set))?;
        let mut ptrs: Vec<*const c_char> = s.names.iter().map(|n| n.as_ptr()).collect();
        let mut size = params!(cs::CUpti_PmSampling_GetCounterDataSize_Params);
        size.pPmSamplingObject = s.object;
        size.pMetricNames = ptrs.as_mut_ptr();
        size.numMetrics = ptrs.len();
        size.maxSamples = IMAGE_SAMPLES;
        api.check("cuptiPmSamplingGetCounterDataSize", (api.data_size)(&mut size))?;
        s.image = vec![0u8; size.counterDataSize];
        let mut init = params!(cs::CUpti_PmSampling_CounterDataImage_Initialize_Params);
        init.pPmSamplingObject = s.object;
        init.counterDataSize = s.image.len();
        init.pCounterData = s.image.as_mut_ptr();
        api.check("cuptiPmSamplingCounterDataImageInitialize", (api.image_initialize)(&mut init))?;
        s.pristine = s.image.clone();
        let mut start = params!(cs::CUpti_PmSampling_Start_Params);
        start.pPmSamplingObject = s.object;
        api.check("cuptiPmSamplingStart", (api.start)(&mut start))
    }
}

/// One decode: the hardware's new samples into the image, evaluated into `s.pending`. Returns the stop reason.
fn decode(api: &Api, s: &mut DeviceSession, note: &dyn Fn(String)) -> Result<u32, String> {
    let mut p = params!(DecodeParams);
    p.object = s.object;
    p.image = s.image.as_mut_ptr();
    p.image_size = s.image.len();
    // SAFETY: the object is live; the image is the one initialized for it.
    let code = unsafe { (api.decode)(&mut p) };
    if code == CUPTI_ERROR_OUT_OF_MEMORY {
        // The hardware buffer filled (KEEP_OLDEST): CUPTI refuses every later decode.
        s.pending.lost_samples += 1;
        return Err("the hardware buffer overflowed (samples after it are lost); a longer interval samples less".into());
    }
    api.check("cuptiPmSamplingDecodeData", code)?;
    if p.overflow != 0 {
        s.pending.lost_samples += 1;
        note(format!("PM sampling on device {}: the hardware buffer overflowed; samples were lost", s.device));
    }
    evaluate_new(api, s)?;
    Ok(p.stop_reason)
}

/// Evaluates the image's samples not yet evaluated; resets a full image.
fn evaluate_new(api: &Api, s: &mut DeviceSession) -> Result<(), String> {
    let mut info = params!(cs::CUpti_PmSampling_GetCounterDataInfo_Params);
    info.pCounterDataImage = s.image.as_ptr();
    info.counterDataImageSize = s.image.len();
    // SAFETY: the image is an initialized counter-data image.
    api.check("cuptiPmSamplingGetCounterDataInfo", unsafe { (api.data_info)(&mut info) })?;
    let mut ptrs: Vec<*const c_char> = s.names.iter().map(|n| n.as_ptr()).collect();
    let mut values = vec![0f64; ptrs.len()];
    for i in s.done..info.numCompletedSamples {
        let mut si = params!(cs::CUpti_PmSampling_CounterData_GetSampleInfo_Params);
        si.pPmSamplingObject = s.object;
        si.pCounterDataImage = s.image.as_ptr();
        si.counterDataImageSize = s.image.len();
        si.sampleIndex = i;
        // SAFETY: i is below the completed samples of this image.
        api.check("cuptiPmSamplingCounterDataGetSampleInfo", unsafe { (api.sample_info)(&mut si) })?;
        let mut ev = params!(cs::CUpti_Profiler_Host_EvaluateToGpuValues_Params);
        ev.pHostObject = s.host;
        ev.pCounterDataImage = s.image.as_ptr();
        ev.counterDataImageSize = s.image.len();
        ev.rangeIndex = i;
        ev.ppMetricNames = ptrs.as_mut_ptr();
        ev.numMetrics = ptrs.len();
        ev.pMetricValues = values.as_mut_ptr();
        // SAFETY: the names and the value array have numMetrics entries and outlive the call.
        api.check("cuptiProfilerHostEvaluateToGpuValues", unsafe { (api.evaluate)(&mut ev) })?;
        if !s.first_dropped {
            s.first_dropped = true;
            continue;
        }
        s.pending.t_start.push(si.startTimestamp);
        s.pending.t_end.push(si.endTimestamp);
        s.pending.values.extend_from_slice(&values);
    }
    s.done = info.numCompletedSamples;
    if info.numCompletedSamples >= info.numTotalSamples {
        s.image.copy_from_slice(&s.pristine);
        s.done = 0;
    }
    Ok(())
}

/// Stops sampling, drains the hardware (bounded), disables, and releases the host object.
fn finish(api: &Api, s: &mut DeviceSession, note: &dyn Fn(String)) {
    let mut stop = params!(cs::CUpti_PmSampling_Stop_Params);
    stop.pPmSamplingObject = s.object;
    // SAFETY: the object is live (stopping one never started returns an error, ignored).
    let _ = unsafe { (api.stop)(&mut stop) };
    if !s.failed {
        for _ in 0..MAX_DRAIN_DECODES {
            match decode(api, s, note) {
                Ok(STOP_END_OF_RECORDS) => break,
                Ok(_) => {}
                Err(e) => {
                    note(format!("PM sampling on device {}: draining: {e}", s.device));
                    break;
                }
            }
        }
    }
    let mut dis = params!(cs::CUpti_PmSampling_Disable_Params);
    dis.pPmSamplingObject = s.object;
    // SAFETY: the object is live and not used after this.
    let _ = unsafe { (api.disable)(&mut dis) };
    // SAFETY: the host object is live and not used after this.
    unsafe { deinit_host(api, s.host) };
    s.failed = true;
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

    #[test]
    fn the_default_metrics_are_full_names() {
        for m in DEFAULT_METRICS {
            assert_eq!(m.matches("__").count(), 1, "{m}: unit__counter");
            assert!(m.split('.').count() >= 3, "{m}: counter.rollup.submetric");
        }
    }
}
