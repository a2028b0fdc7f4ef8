//! Hardware counters over time through CUPTI's PM Sampling API (`--counters`, CUDA 12.6+, Turing and later), on
//! the recorder's own threads: per device, a metric set that fits one pass (checked with the Profiler Host API;
//! each metric that does not exist or does not fit is named in a note), sampled by the GPU at a fixed interval,
//! decoded every few milliseconds so the hardware buffer never fills (a decoding thread per device), evaluated to
//! values here (an evaluating thread per device; the converter needs no NVIDIA library), and sent as `counters`
//! chunks. One thread (`cutr-pm`) sets each device up when the process first makes a context on it.
//!
//! What the H100 showed (measurements/2026-11-23-h100-pm-probe/NOTES.md) and this follows: the time trigger;
//! sample timestamps on CUPTI's own clock; the first sample of a session is garbage (dropped); decodes during
//! collection stop with OTHER, after Stop with END_OF_RECORDS (drained, bounded); a full hardware buffer shows as
//! CUPTI_ERROR_OUT_OF_MEMORY from every later decode (counted as loss, and sampling stops with a note); a small
//! counter-data image, reset by copying a pristine one (re-initializing a large image took 30-50 ms); the config
//! image kept alive while sampling.

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::Path;
use std::sync::{Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::cupti::sys as cs;
use cutr_format::{CounterMetric, CounterSamples};

/// Metrics sampled by default, by what a user asks first: is the GPU busy, memory- or compute-bound, how full,
/// using its tensor cores, moving data over PCIe or NVLink. `a|b` takes the first of the names the chip has (the
/// PM sampling metric table of CUPTI's guide names some in percent of peak only). Each that a chip lacks or that
/// does not fit one pass with the ones before it is left out, with a note. Achieved occupancy is 100% minus the
/// two `tpc__warps_inactive_*` shares (warp slots unused on active SMs, and on idle SMs).
pub const DEFAULT_METRICS: &[&str] = &[
    "gr__cycles_active.sum.pct_of_peak_sustained_elapsed|gr__cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum.per_second|dramc__read_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_write.sum.per_second|dramc__write_throughput.avg.pct_of_peak_sustained_elapsed",
    "tpc__warps_inactive_sm_active_realtime.avg.pct_of_peak_sustained_elapsed",
    "tpc__warps_inactive_sm_idle_realtime.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed",
    "pcie__read_bytes.sum.per_second|pcie__read_bytes.avg.pct_of_peak_sustained_elapsed",
    "pcie__write_bytes.sum.per_second|pcie__write_bytes.avg.pct_of_peak_sustained_elapsed",
    "nvlrx__bytes.sum.per_second|nvlrx__bytes.avg.pct_of_peak_sustained_elapsed",
    "nvltx__bytes.sum.per_second|nvltx__bytes.avg.pct_of_peak_sustained_elapsed",
];

/// The PM sampling options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmConfig {
    /// Metric names (full, with rollup and submetric), or `a|b` alternatives.
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
/// The fastest accepted (100 kHz). What a sample costs depends on its metrics, not on the rate (the H100,
/// `bench/gpu/run29.sh`..`run31.sh`): decoding one DRAM metric ~5-6 us, two (one per-SM) ~16-20 us, the default
/// set ~33-50 us, evaluation (on its own thread, module `evaluation`) about half that. Decoding is one call at a time
/// per device (each device has its own decoding thread), so the fastest lossless rate is ~100 kHz for one metric,
/// 50 kHz for two, 25 kHz for the default set; faster, the lost samples are counted and a note says which thread
/// is behind (`BUSY_NOTE_FRACTION`).
pub const MIN_INTERVAL: Duration = Duration::from_micros(10);
/// The share of its time either thread (decoding, evaluating) spends on sampling, over a second or more, above
/// which a note says that samples will be lost and what to do about it.
const BUSY_NOTE_FRACTION: f64 = 0.8;
/// How often the hardware buffer is decoded, at most.
const DECODE_PERIOD: Duration = Duration::from_millis(10);
/// A sample takes about 64 KiB of the hardware buffer on the H100 (a 64 MiB buffer overflowed after 1,023 samples
/// at 10 us): the buffer holds 100 ms of samples, between 64 MiB and 512 MiB.
const HARDWARE_BYTES_PER_SAMPLE: usize = 64 << 10;

/// The hardware buffer's size and the decode period for an interval: the buffer holds 100 ms of samples, and a
/// decode comes every 10 ms or every 500 samples, whichever is sooner.
fn buffer_and_period(interval: Duration) -> (usize, Duration) {
    let interval = interval.max(MIN_INTERVAL);
    let samples_100ms = (Duration::from_millis(100).as_nanos() / interval.as_nanos()) as usize;
    let bytes = (samples_100ms * HARDWARE_BYTES_PER_SAMPLE).clamp(64 << 20, 512 << 20);
    (bytes, DECODE_PERIOD.min(interval * 500))
}
/// Samples one counter-data image holds (about 15 KB each for 7 metrics on the H100; the image and its pristine
/// copy are both kept).
const IMAGE_SAMPLES_MIN: usize = 2000;
const IMAGE_SAMPLES_MAX: usize = 8000;

/// Samples the counter-data image holds for an interval: twice [`reset_room`], at most 8,000.
fn image_samples(interval: Duration) -> usize {
    (2 * reset_room(interval)).clamp(IMAGE_SAMPLES_MIN, IMAGE_SAMPLES_MAX)
}

/// The room under which the image is reset (after its samples are evaluated): all the hardware buffer can hold,
/// plus a quarter for the estimate of its bytes per sample (up to half the largest image). A decode that fills the image loses what else it took from the hardware buffer (on the
/// H100 each full image left a gap of 1-95 ms), and a decode late by a stall of the decoding thread brings up to a
/// whole buffer (1,073 samples at 10 kHz beside the PyTorch loop, `bench/gpu/run25.sh`): with this much room no
/// decode can fill the image.
fn reset_room(interval: Duration) -> usize {
    (hardware_samples(interval) * 5 / 4).min(IMAGE_SAMPLES_MAX / 2)
}

/// Samples the hardware buffer holds at an interval.
fn hardware_samples(interval: Duration) -> usize {
    buffer_and_period(interval).0 / HARDWARE_BYTES_PER_SAMPLE
}

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
use crate::ffi::cupti::FnResultString;

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
    /// `cuptiGetTimestamp(uint64_t*)`: the clock of the samples' times.
    timestamp: unsafe extern "C" fn(*mut u64) -> u32,
    /// `cuptiGetDeviceId(CUcontext, uint32_t*)`.
    device_id: unsafe extern "C" fn(cudarc::driver::sys::CUcontext, *mut u32) -> u32,
    subscribe: unsafe extern "C" fn(*mut cs::CUpti_SubscriberHandle, Callback, *mut c_void) -> u32,
    enable_callback: unsafe extern "C" fn(u32, cs::CUpti_SubscriberHandle, u32, u32) -> u32,
    unsubscribe: unsafe extern "C" fn(cs::CUpti_SubscriberHandle) -> u32,
}

type Callback = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);

/// How long a context that ends waits for a device call of PM sampling under way (the longest seen: ~230 ms).
const GATE_WAIT: Duration = Duration::from_millis(1000);
/// Set-up's error when a context ended under it.
const ENDED: &str = "the CUDA context ended while sampling was being set up";

/// When `CUTR_PM_DEBUG=1`, the instant the first debug line was asked for: each step of PM sampling's set-up, each
/// decode and a context's end are then timed on stderr (how set-up races an application that ends its context
/// early is only visible on a GPU).
fn debug_start() -> Option<Instant> {
    static ON: std::sync::OnceLock<Option<Instant>> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CUTR_PM_DEBUG").is_ok_and(|v| v == "1").then(Instant::now))
}

/// CPU time of the calling thread (whether a slow CUPTI call computes or waits), zero when debugging is off.
fn thread_cpu_time() -> Duration {
    if debug_start().is_none() {
        return Duration::ZERO;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; CLOCK_THREAD_CPUTIME_ID exists on every Linux.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// One `CUTR_PM_DEBUG` line; the message is formatted only when debugging is on (decodes run 100 times a second).
macro_rules! debug {
    ($($arg:tt)*) => {
        if let Some(t0) = $crate::counters::pm_sampling::debug_start() {
            eprintln!(
                "cutr-pm-debug {:>9.3} ms [{}] {}",
                t0.elapsed().as_secs_f64() * 1e3,
                std::thread::current().name().unwrap_or("?"),
                format_args!($($arg)*)
            );
        }
    };
}

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

mod evaluation;
use evaluation::{Batch, Evaluation};

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
    fn check(&self, call: &str, code: u32) -> Result<(), String> {
        if code == CUPTI_SUCCESS {
            return Ok(());
        }
        Err(format!("{call}: {}", crate::ffi::cupti::result_name(self.result_string, code)))
    }
}

/// One device's PM sampling session: everything CUPTI points into lives here until it is disabled.
struct DeviceSession {
    device: u32,
    /// When the last decode succeeded, and whether sampling stopped since on a full hardware buffer: the samples
    /// from then to the end are lost, and counted at `finish` (CUPTI refuses every decode after an overflow).
    last_decode: Instant,
    overflowed: bool,
    host: *mut cs::CUpti_Profiler_Host_Object,
    object: *mut cs::CUpti_PmSampling_Object,
    /// CUPTI keeps a pointer to the config image: it must outlive the session.
    _config: Vec<u8>,
    /// The host object was made with pointers to these: kept as long as the host object.
    _availability: Vec<u8>,
    _chip: CString,
    names: Vec<CString>,
    metrics: Vec<CounterMetric>,
    /// The image being decoded into.
    image: Vec<u8>,
    /// The image as initialized: copied over an image to reset it.
    pristine: std::sync::Arc<Vec<u8>>,
    /// Samples of the current image already collected (their timestamps in `pending`, their indices in `indices`).
    done: usize,
    indices: Vec<usize>,
    /// The session's first sample is dropped (it starts before Start and carries garbage).
    first_dropped: bool,
    interval: Duration,
    /// The last sample's start: a later one more than 1.5 intervals after it means samples were lost.
    last_start: u64,
    /// The device's primary context was active when sampling started: its end (`cudaDeviceReset`) stops sampling.
    /// (An application with contexts of its own leaves the primary one inactive throughout.)
    primary_context: bool,
    /// The current image's samples (timestamps, losses counted), values still to come.
    pending: CounterSamples,
    /// The evaluating thread (from the first successful configure on).
    eval: Option<std::sync::Arc<Evaluation>>,
    /// Stopping: a full image is evaluated on the finishing thread (the evaluating thread is stopped), into `ready`.
    finishing: bool,
    ready: Vec<CounterSamples>,
    failed: bool,
    /// Time spent decoding and evaluating since the first decode (`busy_since`): the note of a thread that cannot
    /// keep up is given once.
    busy: Duration,
    busy_since: Option<Instant>,
    busy_noted: bool,
}

// SAFETY: the raw pointers are CUPTI's objects, which CUPTI lets any thread use; a session is only touched under
// its own lock.
unsafe impl Send for DeviceSession {}

/// A device's session, shared by its decoding thread and whoever finishes sampling (Stop, a context's end).
type SessionRef = std::sync::Arc<Mutex<DeviceSession>>;

/// What the set-up thread (`cutr-pm`), each device's decoding and evaluating threads and CUPTI's context
/// callback share.
struct Shared {
    api: Api,
    /// Every device's session, in set-up order; emptied by `finish_all`.
    sessions: Mutex<Vec<SessionRef>>,
    send: Mutex<Box<dyn Fn(CounterSamples) + Send>>,
    note: Mutex<Box<dyn Fn(String) + Send>>,
    /// Notes wait here until no gate is held ([`Shared::flush_notes`]): the note callback may block (it also
    /// writes to stderr), and a thread blocked under the gate would hold up a context's end.
    notes_pending: Mutex<Vec<String>>,
    subscriber: Mutex<usize>,
    /// Held around every CUPTI call that touches a device (set-up's, decoding), checked against `ended` once taken:
    /// see [`Shared::device_gate`] and [`on_callback`].
    gate: std::sync::RwLock<()>,
    /// A context ended: no CUPTI call touches a device's PM sampling any more.
    ended: std::sync::atomic::AtomicBool,
    /// The devices this process made a CUDA context on, in order: the ones sampled (a rank of a job sees every
    /// GPU of its node but uses one; sampling the others would contend with their own ranks).
    devices: Mutex<Vec<u32>>,
}

impl Shared {
    /// The right to make device calls now: `None` once a context has ended (the calls would use a dead context:
    /// `cuptiPmSamplingSetConfig` after `cudaDeviceReset` dereferenced null inside libnvperf_host on the H100).
    /// Shared by set-up, decoding and evaluation (each device's own threads): they may run at once.
    fn device_gate(&self) -> Option<std::sync::RwLockReadGuard<'_, ()>> {
        let g = self.gate.read().unwrap_or_else(|e| e.into_inner());
        (!self.ended.load(std::sync::atomic::Ordering::Acquire)).then_some(g)
    }

    /// The evaluating threads' side of the gate: refused, not waited for, while a finisher holds or awaits the
    /// exclusive side (the finisher then evaluates what is left itself) and once a context ended.
    fn evaluation_gate(&self) -> Option<std::sync::RwLockReadGuard<'_, ()>> {
        let g = match self.gate.try_read() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        (!self.ended.load(std::sync::atomic::Ordering::Acquire)).then_some(g)
    }

    fn ended(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    fn note(&self, msg: String) {
        self.notes_pending.lock().unwrap_or_else(|e| e.into_inner()).push(msg);
    }

    /// Passes the waiting notes on; called where the caller holds neither side of the gate.
    fn flush_notes(&self) {
        let notes = std::mem::take(&mut *self.notes_pending.lock().unwrap_or_else(|e| e.into_inner()));
        let note = self.note.lock().unwrap_or_else(|e| e.into_inner());
        for n in notes {
            note(n);
        }
    }

    fn send(&self, c: CounterSamples) {
        (self.send.lock().unwrap())(c)
    }

    /// Stops, drains and disables every device's sampling and returns the chunks left to send (the caller sends
    /// them once it has let go of the gate); with `context_alive` false (a context ended without the callback
    /// stopping sampling) only the host side is released and CUPTI's PM sampling objects are left alone.
    /// `interrupted`: a context began to end meanwhile (its callback waits for the gate, a bounded time), so what
    /// is left to evaluate or drain is counted as lost and sampling stopped at once. Idempotent (the sessions are
    /// taken out). The caller holds the gate's exclusive side.
    fn finish_all(&self, context_alive: bool, interrupted: &dyn Fn() -> bool) -> (usize, Vec<CounterSamples>) {
        let sessions: Vec<SessionRef> = std::mem::take(&mut *self.sessions.lock().unwrap_or_else(|e| e.into_inner()));
        let n = sessions.len();
        let mut chunks = Vec::new();
        for session in sessions {
            // No decoding thread holds this lock: they take it only under the gate's shared side.
            let mut guard = session.lock().unwrap_or_else(|e| e.into_inner());
            let s = &mut *guard;
            // Afterwards `failed` is set: the device's decoding thread, seeing it, ends.
            finish(&self.api, s, context_alive, interrupted, &|m| self.note(m));
            chunks.append(&mut finished_chunks(s));
        }
        (n, chunks)
    }

    /// Decodes one device's new samples (its evaluating thread sends the chunks); false once the device's
    /// sampling is over (failed, finished, or a context ended), when its decoding thread ends.
    fn decode_device(&self, session: &Mutex<DeviceSession>) -> bool {
        // The gate first, then the session: a finisher holding the gate's exclusive side may lock every session.
        let Some(_gate) = self.device_gate() else { return false };
        let mut s = session.lock().unwrap_or_else(|e| e.into_inner());
        if s.failed {
            return false;
        }
        if s.primary_context && crate::ffi::driver::primary_context_active(s.device) == Some(false) {
            // The context is ending (cudaDeviceReset): nothing of CUPTI's is touched again for it, evaluation
            // included (what is queued is counted as lost at finish).
            s.failed = true;
            if let Some(e) = &s.eval {
                e.halt();
            }
            return false;
        }
        if let Err(e) = decode(&self.api, &mut s, &|| self.ended(), &|m| self.note(m)) {
            s.failed = true;
            self.note(format!("PM sampling on device {} stopped: {e}", s.device));
            return false;
        }
        true
    }
}

/// CUPTI's resource callback. A context created names a device to sample (set up by the set-up thread). A
/// context about to be destroyed (`cudaDeviceReset`, `cuCtxDestroy`, the runtime's teardown) stops PM sampling
/// first, on the destroying thread, while the context still lives; after it, stopping or decoding corrupted the
/// heap on the H100. Never unwinds into CUPTI.
unsafe extern "C" fn on_callback(user: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    use cs::CUpti_CallbackIdResource as R;
    if user.is_null() || domain != cs::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE as u32 {
        return;
    }
    if cbid == R::CUPTI_CBID_RESOURCE_CONTEXT_CREATED as u32 {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `user` is the leaked 'static `Shared` given at subscribe.
            let shared = unsafe { &*(user as *const Shared) };
            if data.is_null() {
                return;
            }
            let mut device = 0u32;
            // SAFETY: for resource callbacks `data` is a CUpti_ResourceData whose context lives during the callback.
            let code = unsafe { (shared.api.device_id)((*data.cast::<cs::CUpti_ResourceData>()).context, &mut device) };
            if code != CUPTI_SUCCESS {
                return;
            }
            let mut devices = shared.devices.lock().unwrap_or_else(|e| e.into_inner());
            if !devices.contains(&device) {
                devices.push(device);
            }
        }));
        return;
    }
    if cbid != R::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING as u32 {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `user` is the leaked 'static `Shared` given at subscribe.
        let shared = unsafe { &*(user as *const Shared) };
        debug!("context destroy starting");
        shared.ended.store(true, std::sync::atomic::Ordering::Release);
        // Stopping sampling needs the gate: no device call of set-up or decoding may be under way. One that
        // began before the context started ending finishes (chip queries, SetConfig: up to ~250 ms), but one
        // that waits for the driver lock this thread holds (cuptiPmSamplingEnable does, on the H100) never
        // would: after GATE_WAIT the context ends with sampling unstopped, and set-up, finding `ended`, leaves
        // the object it got alone. Never a hang; never a call into a dead context.
        let t0 = Instant::now();
        let gate = loop {
            match shared.gate.try_write() {
                Ok(g) => break Some(g),
                Err(std::sync::TryLockError::Poisoned(e)) => break Some(e.into_inner()),
                Err(_) if t0.elapsed() > GATE_WAIT => break None,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        debug!(
            "context destroy: gate {} after {:.1} ms",
            if gate.is_some() { "taken" } else { "NOT taken" },
            t0.elapsed().as_secs_f64() * 1e3
        );
        if gate.is_some() {
            let (finished, chunks) = shared.finish_all(true, &|| false);
            drop(gate);
            for c in chunks {
                shared.send(c);
            }
            if finished > 0 {
                shared.note("PM sampling stopped when a CUDA context ended (cudaDeviceReset or cuCtxDestroy)".into());
            }
        } else {
            shared.note(format!(
                "PM sampling: a CUDA context ended while sampling was being set up (a CUPTI call waited for the \
                 ending context for {} ms); not sampling",
                GATE_WAIT.as_millis()
            ));
        }
        shared.flush_notes();
    }));
}

/// The running sampler.
pub(crate) struct PmSampler {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
    shared: &'static Shared,
}

impl PmSampler {
    /// Starts a thread that sets PM sampling up on each device this process makes a CUDA context on (CUPTI's
    /// context-created callback; `devices()`: those that already have one) and samples until stopped. `send`
    /// takes each chunk, `note` each problem; `started` is called once sampling runs. Subscribes to CUPTI's context callbacks (it fails where another subscriber holds them).
    pub fn start(
        library: &Path,
        config: PmConfig,
        devices: Box<dyn Fn() -> Vec<u32> + Send>,
        send: Box<dyn Fn(CounterSamples) + Send>,
        note: Box<dyn Fn(String) + Send>,
        started: Box<dyn Fn() + Send>,
    ) -> Result<PmSampler, String> {
        let api = Api::load(library)?;
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            api,
            sessions: Mutex::new(Vec::new()),
            send: Mutex::new(send),
            note: Mutex::new(note),
            notes_pending: Mutex::new(Vec::new()),
            subscriber: Mutex::new(0),
            gate: std::sync::RwLock::new(()),
            ended: std::sync::atomic::AtomicBool::new(false),
            devices: Mutex::new(Vec::new()),
        }));
        let mut sub: cs::CUpti_SubscriberHandle = std::ptr::null_mut();
        let user = shared as *const Shared as *mut c_void;
        // SAFETY: a valid out-pointer; the callback never unwinds; `user` is 'static.
        let code = unsafe { (shared.api.subscribe)(&mut sub, on_callback, user) };
        shared.api.check("cuptiSubscribe (another CUPTI subscriber?)", code)?;
        *shared.subscriber.lock().unwrap() = sub as usize;
        let domain = cs::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE as u32;
        let enable = |cbid: cs::CUpti_CallbackIdResource| {
            // SAFETY: `sub` is the live subscriber just made.
            let code = unsafe { (shared.api.enable_callback)(1, sub, domain, cbid as u32) };
            shared.api.check("cuptiEnableCallback", code)
        };
        let enabled = enable(cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
            .and_then(|()| enable(cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_CREATED));
        if let Err(e) = enabled {
            // SAFETY: as above; not used again.
            unsafe { (shared.api.unsubscribe)(sub) };
            return Err(e);
        }
        let (stop, stop_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("cutr-pm".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run(shared, &config, &*devices, &*started, &stop_rx)
                }));
                if r.is_err() {
                    // Nothing of CUPTI's is called any more (the evaluating threads stop at their next sample);
                    // a context's end still stops sampling in its callback.
                    shared.ended.store(true, std::sync::atomic::Ordering::Release);
                    shared.note("PM sampling stopped on an internal error".into());
                    shared.flush_notes();
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(PmSampler { stop, thread, shared })
    }

    /// Whether the process made a CUDA context on device `d` (one of its own included) since sampling started.
    pub fn has_device(&self, d: u32) -> bool {
        self.shared.devices.lock().unwrap_or_else(|e| e.into_inner()).contains(&d)
    }

    /// Stops sampling, drains what the hardware holds and sends it, and unsubscribes.
    pub fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
        let sub = std::mem::take(&mut *self.shared.subscriber.lock().unwrap());
        if sub != 0 {
            // SAFETY: the subscriber made in `start`, unsubscribed once.
            unsafe { (self.shared.api.unsubscribe)(sub as cs::CUpti_SubscriberHandle) };
        }
    }
}

fn run(
    shared: &'static Shared,
    config: &PmConfig,
    devices: &dyn Fn() -> Vec<u32>,
    started: &dyn Fn(),
    stop: &mpsc::Receiver<()>,
) {
    let api = &shared.api;
    let note = |m: String| shared.note(m);
    // Contexts made before we subscribed (none when the recorder is injected at cuInit) count too.
    for d in devices() {
        let mut known = shared.devices.lock().unwrap();
        if !known.contains(&d) {
            known.push(d);
        }
    }
    let mut initialized = false;
    let mut tried: Vec<u32> = Vec::new();
    // CUTR_PM_DECODE_MS (a measuring knob, like CUTR_PM_DEBUG): decode this often instead, up to 50 ms (half of
    // what the hardware buffer holds).
    let period = std::env::var("CUTR_PM_DECODE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(|ms| Duration::from_millis(ms.clamp(1, 50)))
        .unwrap_or(buffer_and_period(config.interval).1);
    // Each device is decoded by a thread of its own: decoding the default set costs 33-67 us a sample, so one
    // thread for two GPUs at 10 kHz would be 66-134% busy. This thread sets devices up, one after the other, and
    // waits. (Set-up on each device's own thread, tried on two H200s, `bench/gpu/run36.sh`: CUPTI's set-up calls
    // then took turns: the first device's sampling began ~0.3 s later, medians of 3 runs, the second's no earlier.)
    let mut decoders: Vec<(mpsc::Sender<()>, JoinHandle<()>)> = Vec::new();
    loop {
        // Each device is set up once, when this process first makes a context on it.
        let new: Vec<u32> = shared.devices.lock().unwrap().iter().filter(|d| !tried.contains(d)).copied().collect();
        for d in new {
            tried.push(d);
            if shared.ended.load(std::sync::atomic::Ordering::Acquire) {
                note(format!("PM sampling on device {d}: the CUDA context ended before sampling could start"));
                continue;
            }
            if !initialized {
                let mut init = params!(cs::CUpti_Profiler_Initialize_Params, pPriv);
                // Under the gate like every set-up call: it loads NVIDIA's perf driver, which crashed (SIGSEGV in
                // NVPW_CUDA_LoadDriver, `bench/gpu/run31.sh` on the H100) when a cudaDeviceReset ran meanwhile.
                // Only once a context exists: called as soon as the sampler started (inside cuInit, before any
                // context) it crashed the application in libcuda in 7 of 17 runs (`bench/gpu/run39.sh`).
                let Some(gate) = shared.device_gate() else {
                    note(format!("PM sampling on device {d}: the CUDA context ended before sampling could start"));
                    continue;
                };
                debug!("profiler initialize");
                // SAFETY: valid params.
                let initialize = api.check("cuptiProfilerInitialize", unsafe { (api.profiler_initialize)(&mut init) });
                drop(gate);
                debug!("profiler initialized");
                if let Err(e) = initialize {
                    note(format!("PM sampling: {e}; not sampling"));
                    shared.flush_notes();
                    return;
                }
                initialized = true;
            }
            debug!("set-up of device {d} begins");
            let r = setup(shared, d, config, &note);
            debug!("set-up ends: {}", if r.is_ok() { "sampling" } else { "failed" });
            match r {
                Ok(s) => {
                    let session: SessionRef = std::sync::Arc::new(Mutex::new(s));
                    let (tx, rx) = mpsc::channel();
                    let spawned = std::thread::Builder::new().name(format!("cutr-pm-dec{d}")).spawn({
                        let session = std::sync::Arc::clone(&session);
                        move || decode_loop(shared, &session, period, &rx)
                    });
                    match spawned {
                        Ok(handle) => {
                            decoders.push((tx, handle));
                            let mut sessions = shared.sessions.lock().unwrap_or_else(|e| e.into_inner());
                            sessions.push(session);
                            if sessions.len() == 1 {
                                drop(sessions);
                                started();
                            }
                        }
                        Err(e) => {
                            // Undecoded, its hardware buffer would overflow: sampling on it stops now.
                            note(format!("PM sampling on device {d}: no decoding thread ({e}); not sampling it"));
                            let gate = shared.gate.write().unwrap_or_else(|e| e.into_inner());
                            let mut s = session.lock().unwrap_or_else(|e| e.into_inner());
                            finish(api, &mut s, !shared.ended(), &|| shared.ended(), &note);
                            let chunks = finished_chunks(&mut s);
                            drop(s);
                            drop(gate);
                            for c in chunks {
                                shared.send(c);
                            }
                        }
                    }
                }
                Err(e) => note(format!("PM sampling on device {d}: {e}")),
            }
            shared.flush_notes();
        }
        // A device's first context is noticed within this long (set-up itself takes ~0.5 s).
        match stop.recv_timeout(DEVICE_POLL) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for (tx, _) in &decoders {
        let _ = tx.send(());
    }
    for (_, handle) in decoders {
        let _ = handle.join();
    }
    if tried.is_empty() {
        note("PM sampling: the process made no CUDA context; nothing was sampled".into());
    }
    let gate = shared.gate.write().unwrap_or_else(|e| e.into_inner());
    let (_, chunks) = shared.finish_all(!shared.ended(), &|| shared.ended());
    drop(gate);
    for c in chunks {
        shared.send(c);
    }
    shared.flush_notes();
}

/// How often the set-up thread looks for a device that got its first context.
const DEVICE_POLL: Duration = Duration::from_millis(10);

/// A device's decoding thread: decodes every `period` until told to stop or the device's sampling is over. A
/// panic ends that device's sampling alone.
fn decode_loop(shared: &'static Shared, session: &Mutex<DeviceSession>, period: Duration, stop: &mpsc::Receiver<()>) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut next = Instant::now();
        loop {
            next += period;
            match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            let going = shared.decode_device(session);
            shared.flush_notes();
            if !going {
                break;
            }
            // After a long stall (a context's end waiting, a stopped process) the schedule starts afresh rather
            // than decoding back to back to catch up.
            if Instant::now() > next + Duration::from_secs(1) {
                next = Instant::now();
            }
        }
    }));
    if r.is_err() {
        // That device only: it is not decoded again (its evaluation halted); `finish_all` still stops and disables
        // it while its context lives, and the other devices go on.
        let mut s = session.lock().unwrap_or_else(|e| e.into_inner());
        s.failed = true;
        if let Some(e) = &s.eval {
            e.halt();
        }
        let device = s.device;
        drop(s);
        shared.note(format!("PM sampling on device {device} stopped on an internal error (decoding)"));
        shared.flush_notes();
    }
}

/// What a finished session holds to send: its evaluated batches and the rest (samples, losses).
fn finished_chunks(s: &mut DeviceSession) -> Vec<CounterSamples> {
    let mut chunks = std::mem::take(&mut s.ready);
    if !s.pending.is_empty() || s.pending.lost_samples > 0 {
        chunks.push(std::mem::replace(&mut s.pending, empty(s.device, &s.metrics)));
    }
    chunks
}

fn empty(device: u32, metrics: &[CounterMetric]) -> CounterSamples {
    CounterSamples { source: "pm_sampling".into(), device, metrics: metrics.to_vec(), ..Default::default() }
}

/// Device `d`'s chip name and counter-availability image.
fn chip_and_availability(api: &Api, d: u32) -> Result<(CString, Vec<u8>), String> {
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

/// Host configuration, then PM sampling enabled, configured and started on device `d`.
/// Device calls are made under the gate and not at all once a context has ended ([`ENDED`]); host calls (fitting
/// the metrics, the config image: most of the time) outside it.
fn setup(shared: &'static Shared, d: u32, config: &PmConfig, note: &dyn Fn(String)) -> Result<DeviceSession, String> {
    let api = &shared.api;
    // SAFETY: every call below gets params zeroed with their size, out-pointers to live locals, and buffers
    // allocated with the sizes CUPTI asked for that outlive the calls; CUPTI's objects are used only while live
    // (disabled and deinitialized in `finish`).
    unsafe {
        let (chip, availability) = {
            let Some(_gate) = shared.device_gate() else { return Err(ENDED.into()) };
            chip_and_availability(api, d)?
        };
        debug!("chip and availability");
        let chip_name = chip.as_ptr();
        let names = {
            let Some(_gate) = shared.device_gate() else { return Err(ENDED.into()) };
            fit_metrics(api, chip_name, &availability, &config.metrics, note, d)
        };
        debug!("metrics fitted");
        if names.is_empty() {
            return Err("none of the metrics can be sampled".into());
        }
        let (host, config_image, metrics) = {
            let Some(_gate) = shared.device_gate() else { return Err(ENDED.into()) };
            let (host, config_image, _) = host_with(api, chip_name, &availability, &names)?;
            let metrics: Vec<CounterMetric> = names
                .iter()
                .map(|n| {
                    properties(api, host, n).unwrap_or_else(|| CounterMetric {
                        name: n.to_string_lossy().into_owned(),
                        ..Default::default()
                    })
                })
                .collect();
            (host, config_image, metrics)
        };
        let mut en = params!(cs::CUpti_PmSampling_Enable_Params, pPmSamplingObject);
        en.deviceIndex = d as usize;
        debug!("enable");
        // Once a context has ended nothing of CUPTI's is called, host objects included (a host call after
        // `cudaDeviceReset` also crashed inside libnvperf_host): what was made is left, at most once per device.
        {
            let Some(_gate) = shared.device_gate() else { return Err(ENDED.into()) };
            if let Err(e) = api.check("cuptiPmSamplingEnable", (api.enable)(&mut en)) {
                deinit_host(api, host);
                return Err(e);
            }
        }
        let object = en.pPmSamplingObject;
        let mut s = DeviceSession {
            device: d,
            last_decode: Instant::now(),
            overflowed: false,
            host,
            object,
            _config: config_image,
            _availability: availability,
            _chip: chip,
            names,
            metrics: metrics.clone(),
            image: Vec::new(),
            pristine: Default::default(),
            done: 0,
            indices: Vec::new(),
            first_dropped: false,
            interval: config.interval,
            last_start: 0,
            primary_context: crate::ffi::driver::primary_context_active(d) == Some(true),
            pending: empty(d, &metrics),
            eval: None,
            finishing: false,
            ready: Vec::new(),
            failed: false,
            busy: Duration::ZERO,
            busy_since: None,
            busy_noted: false,
        };
        // A context that ended while Enable waited for it: the object belongs to a dead context, left alone.
        let Some(_gate) = shared.device_gate() else { return Err(ENDED.into()) };
        let started = configure(api, &mut s, config)
            .and_then(|()| Evaluation::start(shared, d, s.host, s.names.clone(), std::sync::Arc::clone(&s.pristine)));
        match started {
            Ok(eval) => s.eval = Some(eval),
            Err(e) => {
                finish(api, &mut s, true, &|| false, note);
                return Err(e);
            }
        }
        Ok(s)
    }
}

/// The metrics, in order, that exist on the chip and fit one pass together; notes the others. Of `a|b`
/// alternatives the first the chip has is taken. Existence is asked of a host object without metrics (adding a
/// name the chip lacks fails with INVALID_PARAMETER or UNKNOWN); each fit trial configures a fresh host object
/// (metrics added to one cannot be taken back).
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
unsafe fn host_init(
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
unsafe fn host_with(
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
unsafe fn config_for(
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
unsafe fn properties(api: &Api, host: *mut cs::CUpti_Profiler_Host_Object, name: &CStr) -> Option<CounterMetric> {
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
unsafe fn deinit_host(api: &Api, host: *mut cs::CUpti_Profiler_Host_Object) {
    let mut p = params!(cs::CUpti_Profiler_Host_Deinitialize_Params, pHostObject);
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
        let mut set = params!(cs::CUpti_PmSampling_SetConfig_Params, hwBufferAppendMode);
        set.pPmSamplingObject = s.object;
        set.configSize = s._config.len();
        set.pConfig = s._config.as_ptr();
        set.hardwareBufferSize = buffer_and_period(config.interval).0;
        set.samplingInterval = config.interval.as_nanos() as u64;
        set.triggerMode = cs::CUpti_PmSampling_TriggerMode::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
        debug!("set config");
        api.check("cuptiPmSamplingSetConfig", (api.set_config)(&mut set))?;
        debug!("config set");
        let mut ptrs: Vec<*const c_char> = s.names.iter().map(|n| n.as_ptr()).collect();
        let mut size = params!(cs::CUpti_PmSampling_GetCounterDataSize_Params, counterDataSize);
        size.pPmSamplingObject = s.object;
        size.pMetricNames = ptrs.as_mut_ptr();
        size.numMetrics = ptrs.len();
        size.maxSamples = image_samples(config.interval) as u32;
        api.check("cuptiPmSamplingGetCounterDataSize", (api.data_size)(&mut size))?;
        s.image = vec![0u8; size.counterDataSize];
        let mut init = params!(cs::CUpti_PmSampling_CounterDataImage_Initialize_Params, pCounterData);
        init.pPmSamplingObject = s.object;
        init.counterDataSize = s.image.len();
        init.pCounterData = s.image.as_mut_ptr();
        api.check("cuptiPmSamplingCounterDataImageInitialize", (api.image_initialize)(&mut init))?;
        s.pristine = std::sync::Arc::new(s.image.clone());
        let mut start = params!(cs::CUpti_PmSampling_Start_Params, pPmSamplingObject);
        start.pPmSamplingObject = s.object;
        debug!("start");
        api.check("cuptiPmSamplingStart", (api.start)(&mut start))
    }
}

/// One decode: the hardware's new samples into the image, collected ([`collect_new`]). Returns the stop reason.
fn decode(api: &Api, s: &mut DeviceSession, ended: &dyn Fn() -> bool, note: &dyn Fn(String)) -> Result<u32, String> {
    let mut p = params!(DecodeParams, overflow);
    p.object = s.object;
    p.image = s.image.as_mut_ptr();
    p.image_size = s.image.len();
    let t0 = Instant::now();
    let cpu0 = thread_cpu_time();
    // SAFETY: the object is live; the image is the one initialized for it.
    let code = unsafe { (api.decode)(&mut p) };
    let decoded = t0.elapsed();
    let decoded_cpu = thread_cpu_time().saturating_sub(cpu0);
    if code == CUPTI_ERROR_OUT_OF_MEMORY {
        // The hardware buffer filled (KEEP_OLDEST): CUPTI refuses every later decode.
        s.overflowed = true;
        return Err("the hardware buffer overflowed (samples after it are lost); a longer interval samples less".into());
    }
    api.check("cuptiPmSamplingDecodeData", code)?;
    if p.overflow != 0 {
        s.pending.lost_samples += 1;
        note(format!("PM sampling on device {}: the hardware buffer overflowed; samples were lost", s.device));
    }
    s.last_decode = Instant::now();
    let collected = collect_new(api, s, ended, note)?;
    note_if_behind(s, t0, note);
    debug!(
        "decode {:.2} ms (cpu {:.2}), collect {:.2} ms (cpu {:.2}) of {} samples",
        decoded.as_secs_f64() * 1e3,
        decoded_cpu.as_secs_f64() * 1e3,
        t0.elapsed().saturating_sub(decoded).as_secs_f64() * 1e3,
        thread_cpu_time().saturating_sub(cpu0).saturating_sub(decoded_cpu).as_secs_f64() * 1e3,
        collected
    );
    Ok(p.stop_reason)
}

/// Adds this decode's time to the decoding thread's busy time; once at least a second has passed and more than
/// [`BUSY_NOTE_FRACTION`] of it went on decoding, or on evaluating on the evaluating thread, says (once) that
/// samples will be lost and why.
fn note_if_behind(s: &mut DeviceSession, decode_began: Instant, note: &dyn Fn(String)) {
    let since = *s.busy_since.get_or_insert(decode_began);
    s.busy += decode_began.elapsed();
    let elapsed = since.elapsed();
    if s.busy_noted || elapsed < Duration::from_secs(1) {
        return;
    }
    let evaluating = s.eval.as_ref().map_or(0, |e| e.busy_ns.load(std::sync::atomic::Ordering::Relaxed));
    let (decode_share, evaluate_share) =
        (s.busy.as_secs_f64() / elapsed.as_secs_f64(), evaluating as f64 / 1e9 / elapsed.as_secs_f64());
    if decode_share.max(evaluate_share) > BUSY_NOTE_FRACTION {
        s.busy_noted = true;
        note(format!(
            "PM sampling on device {}: {} metric{} every {:?} keep the decoding thread {:.0}% and the evaluating \
             thread {:.0}% busy, near or past what they keep up with; samples they miss are lost (counted). Fewer \
             metrics (per-SM ones cost most) or a longer --counter-interval sample without loss",
            s.device,
            s.names.len(),
            if s.names.len() == 1 { "" } else { "s" },
            s.interval,
            decode_share * 100.0,
            evaluate_share * 100.0
        ));
    }
}

/// Collects the image's new samples: their timestamps (a gap between two counted as lost samples) into
/// `s.pending` and their indices into `s.indices`. A nearly full image goes, with them, to the evaluating thread
/// (or, while finishing, is evaluated here) and decoding goes on in a spare image.
fn collect_new(
    api: &Api,
    s: &mut DeviceSession,
    ended: &dyn Fn() -> bool,
    note: &dyn Fn(String),
) -> Result<usize, String> {
    let mut info = params!(cs::CUpti_PmSampling_GetCounterDataInfo_Params, numCompletedSamples);
    info.pCounterDataImage = s.image.as_ptr();
    info.counterDataImageSize = s.image.len();
    // SAFETY: the image is an initialized counter-data image.
    api.check("cuptiPmSamplingGetCounterDataInfo", unsafe { (api.data_info)(&mut info) })?;
    for i in s.done..info.numCompletedSamples {
        let mut si = params!(cs::CUpti_PmSampling_CounterData_GetSampleInfo_Params, endTimestamp);
        si.pPmSamplingObject = s.object;
        si.pCounterDataImage = s.image.as_ptr();
        si.counterDataImageSize = s.image.len();
        si.sampleIndex = i;
        // SAFETY: i is below the completed samples of this image.
        api.check("cuptiPmSamplingCounterDataGetSampleInfo", unsafe { (api.sample_info)(&mut si) })?;
        if !s.first_dropped {
            s.first_dropped = true;
            continue;
        }
        let interval_ns = s.interval.as_nanos() as u64;
        if s.last_start != 0 && si.startTimestamp > s.last_start + interval_ns * 3 / 2 {
            // The hardware sampled at a fixed interval: a longer step is samples lost (counted, not hidden).
            let missing = (si.startTimestamp - s.last_start + interval_ns / 2) / interval_ns - 1;
            s.pending.lost_samples += missing;
        }
        s.last_start = si.startTimestamp;
        s.pending.t_start.push(si.startTimestamp);
        s.pending.t_end.push(si.endTimestamp);
        s.indices.push(i);
    }
    let collected = info.numCompletedSamples.saturating_sub(s.done);
    s.done = info.numCompletedSamples;
    let capacity = info.numTotalSamples.min(image_samples(s.interval));
    if info.numCompletedSamples + reset_room(s.interval) >= capacity {
        hand_over(api, s, ended, note);
    }
    Ok(collected)
}

/// The current image and its collected samples go to be evaluated; decoding goes on in a fresh image. `ended`:
/// a context began to end (nothing more is evaluated; while finishing, what is left is counted as lost).
fn hand_over(api: &Api, s: &mut DeviceSession, ended: &dyn Fn() -> bool, note: &dyn Fn(String)) {
    let samples = std::mem::replace(&mut s.pending, empty(s.device, &s.metrics));
    let mut batch = Batch::new(std::mem::take(&mut s.image), std::mem::take(&mut s.indices), samples);
    s.done = 0;
    let Some(eval) = s.eval.clone() else {
        // Never started (configure failed): nothing to evaluate with.
        s.pending.lost_samples += batch.indices.len() as u64 + batch.samples.lost_samples;
        batch.image.copy_from_slice(&s.pristine);
        s.image = batch.image;
        return;
    };
    if s.finishing {
        eval.evaluate_all(api, &mut batch, note, ended);
        let (image, samples) = batch.into_parts();
        s.ready.push(samples);
        s.image = image;
        s.image.copy_from_slice(&s.pristine);
        return;
    }
    let (image, lost) = eval.hand_over(batch, ended);
    if lost > 0 {
        s.pending.lost_samples += lost;
        note(format!(
            "PM sampling on device {}: decoded samples could not be evaluated (evaluation behind decoding, or the \
             context ending); counted as lost",
            s.device
        ));
    }
    s.image = image;
}

/// Stops sampling, drains the hardware (bounded), evaluates what is left, disables, and releases the host
/// object. Where the device's CUDA context is already gone (`cudaDeviceReset`, or the runtime's teardown ran
/// first), CUPTI's PM sampling object is left alone: stopping or disabling it then corrupted the heap (the H100,
/// CUDA 13.0). `interrupted`: a context began to end meanwhile (see [`Shared::finish_all`]).
/// After a hardware-buffer overflow, every interval since the last good decode is lost (on the host's clock:
/// CUPTI's is not asked after a failure); counted once.
fn count_overflow(s: &mut DeviceSession) {
    if s.overflowed {
        s.pending.lost_samples += (s.last_decode.elapsed().as_nanos() / s.interval.as_nanos().max(1)).max(1) as u64;
        s.overflowed = false;
    }
}

fn finish(
    api: &Api,
    s: &mut DeviceSession,
    context_alive: bool,
    interrupted: &dyn Fn() -> bool,
    note: &dyn Fn(String),
) {
    count_overflow(s);
    // The evaluating thread stops first: from here on this thread evaluates (the caller holds the gate).
    let (queued, lost_there) = s.eval.as_ref().map(|e| e.stop()).unwrap_or_default();
    s.pending.lost_samples += lost_there;
    let context_ended = s.primary_context && crate::ffi::driver::primary_context_active(s.device) == Some(false);
    if !context_alive || context_ended {
        // Nothing of CUPTI's is called after a context ended (see `setup`), evaluation included: what was decoded
        // and not evaluated is counted as lost, and the objects are left as they are.
        let unevaluated = queued.iter().map(|b| b.indices.len() as u64).sum::<u64>() + s.indices.len() as u64;
        s.pending.lost_samples += unevaluated + queued.iter().map(|b| b.samples.lost_samples).sum::<u64>();
        s.pending.t_start.clear();
        s.pending.t_end.clear();
        s.indices.clear();
        if context_ended {
            note(format!(
                "PM sampling on device {}: the CUDA context ended before sampling was stopped: samples since the \
                 last decode (at most {} ms) are not in the file",
                s.device,
                DECODE_PERIOD.as_millis()
            ));
        }
        if unevaluated > 0 {
            note(format!(
                "PM sampling on device {}: {unevaluated} samples decoded before the CUDA context ended could not be \
                 evaluated (counted as lost)",
                s.device
            ));
        }
        s.failed = true;
        return;
    }
    let mut stop = params!(cs::CUpti_PmSampling_Stop_Params, pPmSamplingObject);
    stop.pPmSamplingObject = s.object;
    let mut stopped_at = 0u64;
    // SAFETY: a valid out-pointer.
    let clock = unsafe { (api.timestamp)(&mut stopped_at) } == CUPTI_SUCCESS;
    // SAFETY: the object is live (stopping one never started returns an error, ignored).
    let _ = unsafe { (api.stop)(&mut stop) };
    // Then what was queued (in order, before what the hardware still holds), what the hardware holds, and the
    // current image: each stops at `interrupted`, the rest counted as lost.
    if let Some(eval) = s.eval.clone() {
        for mut b in queued {
            eval.evaluate_all(api, &mut b, note, interrupted);
            s.ready.push(b.into_parts().1);
        }
    }
    s.finishing = true;
    let mut drained = false;
    if !s.failed {
        for _ in 0..MAX_DRAIN_DECODES {
            if interrupted() {
                break;
            }
            match decode(api, s, interrupted, note) {
                Ok(STOP_END_OF_RECORDS) => {
                    drained = true;
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    note(format!("PM sampling on device {}: draining: {e}", s.device));
                    break;
                }
            }
        }
    }
    // An overflow the drain met (a decode late by more than the hardware buffer holds) is counted too.
    count_overflow(s);
    if !s.indices.is_empty() || s.pending.lost_samples > 0 {
        hand_over(api, s, interrupted, note);
    }
    // The hardware's last samples before Stop do not always come, the more often the further the decoding
    // thread is behind (18-112 ms missing in 4 of 7 recordings at 10-25 kHz, `bench/gpu/run27.sh`; one more
    // decode before Stop did not shorten it): intervals from the last sample to Stop are counted as lost.
    // Draining cut short by a context's end leaves the same kind of tail, counted the same way.
    let cut_short = !drained && !s.failed && interrupted();
    let interval_ns = s.interval.as_nanos().max(1) as u64;
    if (drained || cut_short) && clock && s.last_start != 0 && stopped_at > s.last_start + 2 * interval_ns {
        let missing = (stopped_at - s.last_start) / interval_ns - 1;
        s.pending.lost_samples += missing;
        note(format!(
            "PM sampling on device {}: the last {:.1} ms before sampling stopped held no samples ({missing} counted \
             as lost{})",
            s.device,
            (stopped_at - s.last_start) as f64 / 1e6,
            if cut_short { "; not drained: a CUDA context began to end" } else { "" }
        ));
    }
    let mut dis = params!(cs::CUpti_PmSampling_Disable_Params, pPmSamplingObject);
    dis.pPmSamplingObject = s.object;
    // SAFETY: the object is live and not used after this.
    let _ = unsafe { (api.disable)(&mut dis) };
    // An evaluating thread left stuck in a call keeps the host object: leaked rather than released under it.
    if !s.eval.as_ref().is_some_and(|e| e.left_running()) {
        // SAFETY: the host object is live and not used after this (the evaluating thread is stopped).
        unsafe { deinit_host(api, s.host) };
    }
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

    /// A `Shared` over NVIDIA's real libcupti (from the CUPTI wheel), collecting notes.
    fn shared_for_test() -> (&'static Shared, std::sync::Arc<Mutex<Vec<String>>>) {
        let (shared, notes, _) = shared_collecting();
        (shared, notes)
    }

    type Collected<T> = std::sync::Arc<Mutex<Vec<T>>>;

    /// [`shared_for_test`], also collecting the chunks sent.
    fn shared_collecting() -> (&'static Shared, Collected<String>, Collected<CounterSamples>) {
        let cache = std::env::var_os("CUTR_CACHE")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache"));
        let api = Api::load(&cache.join("cupti/cupti-13.0/lib/libcupti.so.13")).unwrap();
        let notes = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sent = std::sync::Arc::new(Mutex::new(Vec::new()));
        let (n, c) = (notes.clone(), sent.clone());
        let shared = Box::leak(Box::new(Shared {
            api,
            sessions: Mutex::new(Vec::new()),
            send: Mutex::new(Box::new(move |s| c.lock().unwrap().push(s))),
            note: Mutex::new(Box::new(move |m| n.lock().unwrap().push(m))),
            notes_pending: Mutex::new(Vec::new()),
            subscriber: Mutex::new(0),
            gate: std::sync::RwLock::new(()),
            ended: std::sync::atomic::AtomicBool::new(false),
            devices: Mutex::new(Vec::new()),
        }));
        (shared, notes, sent)
    }

    /// A session with no CUPTI objects (null pointers: nothing here may reach CUPTI with it).
    fn session_for_test(device: u32, interval: Duration) -> DeviceSession {
        DeviceSession {
            device,
            last_decode: Instant::now(),
            overflowed: false,
            host: std::ptr::null_mut(),
            object: std::ptr::null_mut(),
            _config: Vec::new(),
            _availability: Vec::new(),
            _chip: CString::default(),
            names: Vec::new(),
            metrics: Vec::new(),
            image: Vec::new(),
            pristine: Default::default(),
            done: 0,
            indices: Vec::new(),
            first_dropped: true,
            interval,
            last_start: 0,
            primary_context: false,
            pending: empty(device, &[]),
            eval: None,
            finishing: false,
            ready: Vec::new(),
            failed: false,
            busy: Duration::ZERO,
            busy_since: None,
            busy_noted: false,
        }
    }

    fn end_context(shared: &'static Shared) -> Duration {
        let t0 = Instant::now();
        let cbid = cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING as u32;
        let domain = cs::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RESOURCE as u32;
        // SAFETY: `user` is a leaked 'static Shared, as `start` gives CUPTI.
        unsafe { on_callback(shared as *const Shared as *mut c_void, domain, cbid, std::ptr::null()) };
        t0.elapsed()
    }

    /// The end of a context (`cudaDeviceReset`) waits for a device call under way, then closes the gate: no
    /// device call after it. A call that does not return (cuptiPmSamplingEnable waiting for the lock the ending
    /// thread holds, as on the H100) is waited for GATE_WAIT, not forever, and the note says sampling is off.
    #[test]
    fn a_context_end_waits_for_the_gate_bounded_then_closes_it() {
        let (shared, notes) = shared_for_test();
        assert!(shared.device_gate().is_some());
        // A device call of 150 ms under way.
        let held = mpsc::channel();
        let holder = std::thread::spawn(move || {
            let _g = shared.gate.read().unwrap();
            held.0.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(150));
        });
        held.1.recv().unwrap();
        let waited = end_context(shared);
        holder.join().unwrap();
        assert!(waited >= Duration::from_millis(100) && waited < GATE_WAIT, "{waited:?}");
        assert!(shared.device_gate().is_none(), "closed once the context ended");
        assert!(notes.lock().unwrap().is_empty(), "{:?}", notes.lock().unwrap());

        // A device call that returns only after the context ended.
        let (shared, notes) = shared_for_test();
        let (held, release) = (mpsc::channel(), mpsc::channel::<()>());
        let holder = std::thread::spawn(move || {
            let _g = shared.gate.read().unwrap();
            held.0.send(()).unwrap();
            let _ = release.1.recv();
        });
        held.1.recv().unwrap();
        let waited = end_context(shared);
        assert!(waited >= GATE_WAIT && waited < GATE_WAIT + Duration::from_millis(500), "{waited:?}");
        drop(release.0);
        holder.join().unwrap();
        assert!(shared.device_gate().is_none());
        assert_eq!(
            *notes.lock().unwrap(),
            ["PM sampling: a CUDA context ended while sampling was being set up (a CUPTI call waited for the \
              ending context for 1000 ms); not sampling"]
        );
    }

    /// Each device's decoding thread ends when told to (without waiting out its period) and when its session is
    /// over: finished by `finish_all` (Stop, a context's end), which takes every session once and marks it.
    #[test]
    fn a_devices_decoding_thread_ends_with_its_session_or_when_told() {
        let (shared, _) = shared_for_test();
        let session: SessionRef = std::sync::Arc::new(Mutex::new(session_for_test(1, Duration::from_micros(100))));
        // Told to stop long before its first decode (a 60 s period): it ends at once, having decoded nothing.
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let s1 = std::sync::Arc::clone(&session);
        std::thread::spawn(move || {
            decode_loop(shared, &s1, Duration::from_secs(60), &rx);
            done_tx.send(()).unwrap();
        });
        tx.send(()).unwrap();
        done_rx.recv_timeout(Duration::from_secs(5)).expect("ends when told");
        assert!(!session.lock().unwrap().failed);

        // Finished (a context already gone: no CUPTI call with the null objects): taken out, marked, and the
        // device's thread, still waiting for nothing from its channel, ends at its next period.
        // The gate is taken first: the thread's first decode waits for it, and then finds the session finished
        // (a decode would call CUPTI with the null objects).
        shared.sessions.lock().unwrap().push(std::sync::Arc::clone(&session));
        let gate = shared.gate.write().unwrap();
        let (_keep, rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let s2 = std::sync::Arc::clone(&session);
        std::thread::spawn(move || {
            decode_loop(shared, &s2, Duration::from_millis(5), &rx);
            done_tx.send(()).unwrap();
        });
        std::thread::sleep(Duration::from_millis(20));
        let (n, chunks) = shared.finish_all(false, &|| false);
        drop(gate);
        assert_eq!((n, chunks.len()), (1, 0));
        assert!(session.lock().unwrap().failed);
        done_rx.recv_timeout(Duration::from_secs(5)).expect("ends with its session");
        assert!(!shared.decode_device(&session), "a finished session is not decoded");
        assert_eq!(shared.finish_all(false, &|| false).0, 0, "finished once");
    }

    /// Sampling that stopped on a full hardware buffer counts every interval from its last good decode to the
    /// end as lost (it counted 1 before: a 2 s run at 50 kHz reported "1 sample lost").
    #[test]
    fn an_overflow_counts_every_interval_until_the_end_as_lost() {
        let (shared, notes) = shared_for_test();
        let mut s = DeviceSession {
            last_decode: Instant::now() - Duration::from_millis(50),
            overflowed: true,
            failed: true,
            ..session_for_test(0, Duration::from_micros(100))
        };
        // A context already gone: no CUPTI call is made (the objects here are null).
        finish(&shared.api, &mut s, false, &|| false, &|m| notes.lock().unwrap().push(m));
        assert!((500..550).contains(&s.pending.lost_samples), "{}", s.pending.lost_samples);
        finish(&shared.api, &mut s, false, &|| false, &|_| {});
        assert!((500..550).contains(&s.pending.lost_samples), "counted once: {}", s.pending.lost_samples);
    }

    /// A decoding thread busy 90% of 2 s is noted once, with the metric count and the interval; 50% of 2 s, or
    /// 100% of less than a second, is not.
    #[test]
    fn a_thread_that_cannot_keep_up_is_noted_once() {
        let notes = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let push = |m: String| notes.lock().unwrap().push(m);
        let mut s = DeviceSession {
            names: vec![CString::new("a").unwrap(), CString::new("b").unwrap()],
            busy: Duration::from_millis(1000),
            busy_since: Some(Instant::now() - Duration::from_secs(2)),
            ..session_for_test(1, Duration::from_micros(10))
        };
        note_if_behind(&mut s, Instant::now(), &push);
        assert!(notes.lock().unwrap().is_empty(), "50% busy");
        s.busy = Duration::from_millis(1800);
        note_if_behind(&mut s, Instant::now(), &push);
        note_if_behind(&mut s, Instant::now(), &push);
        assert_eq!(
            *notes.lock().unwrap(),
            ["PM sampling on device 1: 2 metrics every 10µs keep the decoding thread 90% and the evaluating thread \
              0% busy, near or past what they keep up with; samples they miss are lost (counted). Fewer metrics \
              (per-SM ones cost most) or a longer --counter-interval sample without loss"]
        );
        let (mut young, pushed) = (s, std::cell::Cell::new(0));
        young.busy_noted = false;
        young.busy_since = Some(Instant::now() - Duration::from_millis(500));
        young.busy = Duration::from_millis(500);
        note_if_behind(&mut young, Instant::now(), &|_| pushed.set(pushed.get() + 1));
        assert_eq!(pushed.get(), 0, "less than a second of sampling");
    }

    fn batch(device: u32, indices: Vec<usize>, lost: u64) -> Batch {
        Batch::new(vec![1u8; 16], indices, CounterSamples { lost_samples: lost, ..empty(device, &[]) })
    }

    /// Images go round: each handed-over image comes back reset as a spare, and the batches are sent in order
    /// (batches without samples to evaluate: no CUPTI call is made).
    #[test]
    fn evaluation_sends_batches_in_order_and_recycles_images() {
        let (shared, notes, sent) = shared_collecting();
        let pristine = std::sync::Arc::new(vec![7u8; 16]);
        let eval = Evaluation::start(shared, 3, std::ptr::null_mut(), Vec::new(), pristine).unwrap();
        for k in 1..=6 {
            let (image, lost) = eval.hand_over(batch(3, Vec::new(), k), &|| false);
            assert_eq!((image, lost), (vec![7u8; 16], 0), "a reset spare or a fresh image");
        }
        let t0 = Instant::now();
        while sent.lock().unwrap().len() < 6 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let lost: Vec<u64> = sent.lock().unwrap().iter().map(|c| c.lost_samples).collect();
        assert_eq!(lost, [1, 2, 3, 4, 5, 6]);
        let (left, lost) = eval.stop();
        assert!(left.is_empty() && lost == 0);
        assert!(notes.lock().unwrap().is_empty());
    }

    /// An evaluating thread that cannot go on (a finisher holds the gate) keeps its batches for the finisher;
    /// once MAX_IMAGES are in use a further batch waits SPARE_WAIT for a spare, then is counted as lost (its
    /// samples and the losses it carried) and its image reused; once a context ended, at once.
    #[test]
    fn evaluation_behind_counts_a_batch_without_a_spare_as_lost() {
        let (shared, _notes, sent) = shared_collecting();
        let pristine = std::sync::Arc::new(vec![7u8; 16]);
        let eval = Evaluation::start(shared, 0, std::ptr::null_mut(), Vec::new(), pristine).unwrap();
        let finisher = shared.gate.write().unwrap();
        for k in 0..3 {
            assert_eq!(eval.hand_over(batch(0, vec![0], k), &|| false).1, 0, "images 2, 3, 4");
        }
        let t0 = Instant::now();
        let (image, lost) = eval.hand_over(batch(0, vec![0, 1], 5), &|| false);
        assert!(t0.elapsed() >= evaluation::SPARE_WAIT, "{:?}", t0.elapsed());
        assert_eq!((image, lost), (vec![7u8; 16], 2 + 5));
        let t0 = Instant::now();
        assert_eq!(eval.hand_over(batch(0, vec![0; 4], 1), &|| true).1, 5);
        assert!(t0.elapsed() < evaluation::SPARE_WAIT);
        let (left, lost) = eval.stop();
        let left: Vec<u64> = left.iter().map(|b| b.samples.lost_samples).collect();
        assert_eq!((left, lost), (vec![0, 1, 2], 0), "queued, in order, for the finisher");
        assert!(sent.lock().unwrap().is_empty());
        drop(finisher);
    }

    /// A halted evaluation (the device's context is ending) takes no more batches: a hand-over is refused at
    /// once and counted; the finisher, interrupted, evaluates nothing and counts the batch's samples as lost,
    /// sending only timestamps that have values.
    #[test]
    fn a_halted_or_interrupted_evaluation_counts_its_samples_as_lost() {
        let (shared, notes, sent) = shared_collecting();
        let pristine = std::sync::Arc::new(vec![7u8; 16]);
        let eval = Evaluation::start(shared, 0, std::ptr::null_mut(), Vec::new(), pristine).unwrap();
        eval.halt();
        let t0 = Instant::now();
        assert_eq!(eval.hand_over(batch(0, vec![0, 1, 2], 4), &|| false), (vec![7u8; 16], 7));
        assert!(t0.elapsed() < evaluation::SPARE_WAIT);
        let (left, lost) = eval.stop();
        assert!(left.is_empty() && lost == 0);

        let mut b = batch(0, vec![5, 6, 7], 2);
        b.samples.t_start = vec![10, 20, 30];
        b.samples.t_end = vec![20, 30, 40];
        assert!(!eval.evaluate_all(&shared.api, &mut b, &|_| {}, &|| true), "interrupted before the first");
        let (_, samples) = b.into_parts();
        assert_eq!((samples.len(), samples.values.len(), samples.lost_samples), (0, 0, 5));
        assert!(sent.lock().unwrap().is_empty() && notes.lock().unwrap().is_empty());
    }

    /// Notes wait until whoever holds the gate has let go of it (the note callback may block on stderr).
    #[test]
    fn notes_are_passed_on_only_when_flushed() {
        let (shared, notes) = shared_for_test();
        shared.note("one".into());
        shared.note("two".into());
        assert!(notes.lock().unwrap().is_empty());
        shared.flush_notes();
        assert_eq!(*notes.lock().unwrap(), ["one", "two"]);
    }

    #[test]
    fn the_hardware_buffer_holds_100_ms() {
        let us = Duration::from_micros;
        assert_eq!(buffer_and_period(us(100)), (64 << 20, Duration::from_millis(10)));
        assert_eq!(buffer_and_period(us(50)), (2000 << 16, Duration::from_millis(10)));
        assert_eq!(buffer_and_period(us(40)), (2500 << 16, Duration::from_millis(10)));
        assert_eq!(buffer_and_period(us(20)), (5000 << 16, Duration::from_millis(10)));
        assert_eq!(buffer_and_period(us(10)), (512 << 20, Duration::from_millis(5)), "512 MiB at most");
        assert_eq!(buffer_and_period(us(5)), (512 << 20, Duration::from_millis(5)), "as 10 us, the fastest");
    }

    #[test]
    fn the_image_is_reset_before_a_decode_can_fill_it() {
        let us = Duration::from_micros;
        // 10 kHz: a 64 MiB buffer holds 1,024 samples; 25 kHz: 2,500 (100 ms).
        assert_eq!((image_samples(us(100)), reset_room(us(100))), (2560, 1280));
        assert_eq!((image_samples(us(40)), reset_room(us(40))), (6250, 3125));
        assert_eq!((image_samples(us(10)), reset_room(us(10))), (8000, 4000), "the largest image");
        assert_eq!((image_samples(us(1000)), reset_room(us(1000))), (2560, 1280), "the buffer is 64 MiB at least");
    }

    #[test]
    fn the_default_metrics_are_full_names() {
        for m in DEFAULT_METRICS.iter().flat_map(|m| m.split('|')) {
            assert_eq!(m.matches("__").count(), 1, "{m}: unit__counter");
            assert!(m.split('.').count() >= 3, "{m}: counter.rollup.submetric");
        }
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
