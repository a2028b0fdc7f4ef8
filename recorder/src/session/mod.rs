//! A recording session: CUPTI's buffer callbacks, the writer thread, the periodic flush, and the orderly end.
//!
//! Hot path: CUPTI calls [`on_request`] on application threads (a lock-free pop from the pool) and
//! [`on_complete`] on its own thread (read the dropped-record counter, queue the buffer). Everything else (string
//! interning, encoding, compression, file I/O) happens on the writer thread, which recycles each buffer when done.
//! Every FFI entry catches panics: nothing unwinds into CUDA or the application.

use std::collections::HashMap;
use std::ffi::c_void;
use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use cutr_format::records::StringPointerPlan;
use cutr_format::{ActivityEncoder, ClockSample, LossCounters, SessionMetadata, Writer, WriterOptions};
use cutr_schema::LayoutTable;

use crate::config::{Config, expand_output};
use crate::error::RecorderError;
use crate::ffi::cupti::{CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, Cupti};
use crate::ffi::driver;
use crate::pool::BufferPool;

enum Msg {
    Buffer {
        ptr: usize,
        valid: usize,
    },
    /// A cubin or a collection of PC samples (`--pc-sampling`).
    Source(crate::pc_sampling::Collected),
    /// Counter samples (`--counters`).
    Counters(cutr_format::CounterSamples),
    /// Write the flight recorder's window to a file of its own (`--ring`); the reply is its path.
    Dump {
        reply: mpsc::Sender<Result<PathBuf, String>>,
    },
    Tick,
    Finish {
        devices: Vec<cutr_format::Device>,
        reply: mpsc::Sender<Summary>,
    },
}

/// What a finished session wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub path: PathBuf,
    pub records: u64,
    pub buffers: u64,
    pub bytes: u64,
    pub loss: LossCounters,
    pub peak_buffer_bytes: u64,
    /// With `--pc-sampling`: cubins stored, PC samples collected and dropped.
    pub cubins: u64,
    pub pc_samples: u64,
    pub pc_samples_dropped: u64,
    /// With `--counters`: counter samples written (one per source, device and time).
    pub counter_samples: u64,
}

impl Summary {
    /// One line for stderr.
    pub fn describe(&self) -> String {
        let lost: Vec<String> =
            self.loss.entries().iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k} {v}")).collect();
        let pc = if self.cubins > 0 || self.pc_samples > 0 {
            format!(
                ", {} PC samples ({} dropped) over {} cubins",
                self.pc_samples, self.pc_samples_dropped, self.cubins
            )
        } else {
            String::new()
        };
        let counters = if self.counter_samples > 0 {
            format!(", {} counter samples", self.counter_samples)
        } else {
            String::new()
        };
        format!(
            "wrote {}: {} records in {} buffers{pc}{counters}, {:.1} MiB; {}",
            self.path.display(),
            self.records,
            self.buffers,
            self.bytes as f64 / (1 << 20) as f64,
            if lost.is_empty() { "nothing lost".to_string() } else { format!("LOSS: {}", lost.join(", ")) }
        )
    }
}

pub(crate) struct Session {
    pub(crate) cupti: Box<dyn Cupti>,
    pub(crate) config: Config,
    pub(crate) pool: BufferPool,
    tx: Sender<Msg>,
    pub(crate) pid: u32,
    pub(crate) path: PathBuf,
    /// Set once the end has begun: completed buffers are then still written, new requests refused.
    finishing: AtomicBool,
    finished: AtomicBool,
    dropped: AtomicU64,
    enabled: Mutex<Vec<u32>>,
    /// (domain, cbid) of API functions whose records are switched off (cudaGetDevice & co.).
    quiet_api: Mutex<Vec<(u32, u32)>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    ticker: Mutex<Option<(JoinHandle<()>, mpsc::Sender<()>)>>,
    summary: Mutex<Option<Summary>>,
    /// The PC sampler, with `--pc-sampling`.
    pc: std::sync::OnceLock<&'static crate::pc_sampling::PcSampler>,
    /// The NVML and PM samplers, with `--counters`.
    nvml: Mutex<Option<crate::counters::nvml::NvmlSampler>>,
    pm: Mutex<Option<crate::counters::pm_sampling::PmSampler>>,
    /// CUPTI's time when the session started, and whether recording was on then: the first control request
    /// marks that state at that time before its own.
    started: (u64, bool),
    /// Whether the state at start has been marked yet.
    start_marked: AtomicBool,
    /// Serializes control requests (SIGUSR1, the socket, the API).
    control: Mutex<()>,
}

/// The session CUPTI's callbacks serve. Sessions are leaked on purpose: CUPTI may call back (late completions)
/// after a session ends, and must never find freed memory.
static CURRENT: AtomicPtr<Session> = AtomicPtr::new(std::ptr::null_mut());

fn current() -> Option<&'static Session> {
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: CURRENT only ever holds leaked (never freed) sessions.
    if p.is_null() { None } else { Some(unsafe { &*p }) }
}

pub(crate) fn current_session() -> Option<&'static Session> {
    current()
}

/// CUPTI asks for an empty buffer (on an application thread).
pub(crate) unsafe extern "C" fn on_request(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let r = catch_unwind(|| {
        let got = current()
            .filter(|s| !s.finishing.load(Ordering::Relaxed) || !s.finished.load(Ordering::Relaxed))
            .and_then(|s| s.pool.take().map(|p| (p, s.pool.buffer_bytes())));
        got.unwrap_or((std::ptr::null_mut(), 0))
    });
    let (p, n) = r.unwrap_or((std::ptr::null_mut(), 0));
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buffer = p;
        *size = n;
        *max_records = 0;
    }
}

/// CUPTI hands back a filled buffer (on its own thread).
pub(crate) unsafe extern "C" fn on_complete(
    _ctx: *mut c_void,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(s) = current() else { return };
        if buffer.is_null() {
            return;
        }
        if let Ok(n) = s.cupti.dropped_records() {
            s.dropped.fetch_add(n, Ordering::Relaxed);
        }
        if s.finished.load(Ordering::Acquire) || s.tx.send(Msg::Buffer { ptr: buffer as usize, valid }).is_err() {
            // The writer is gone (a completion after the end): nothing can be written any more.
            // SAFETY: CUPTI returns a buffer it got from this pool.
            unsafe { s.pool.give_back(buffer) };
        }
    }));
}

fn clock_sample(cupti: &dyn Cupti) -> Option<ClockSample> {
    let read = |clock| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: valid out-pointer.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let realtime_ns = read(libc::CLOCK_REALTIME);
    let cupti_ns = cupti.timestamp().ok()?;
    let monotonic_ns = read(libc::CLOCK_MONOTONIC);
    Some(ClockSample { cupti_ns, realtime_ns, monotonic_ns })
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is large enough for a host name and NUL-terminated by gethostname or zeroed.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) } != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Creates the output file. When another process of the same job already created that path (a spawned worker
/// with the parent's settings), this process writes `<stem>.<pid>.cutr` beside it instead of clobbering it.
fn create_output(config: &Config, pid: u32) -> Result<(PathBuf, File), RecorderError> {
    let path = PathBuf::from(expand_output(&config.output, pid, &host_name()));
    let open = |p: &Path, overwrite: bool| {
        let mut o = OpenOptions::new();
        o.write(true);
        if overwrite {
            o.create(true).truncate(true);
        } else {
            o.create_new(true);
        }
        o.open(p)
    };
    match open(&path, config.overwrite) {
        Ok(f) => Ok((path, f)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let ext = path.extension().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "cutr".into());
            let alt = path.with_file_name(format!("{stem}.{pid}.{ext}"));
            let f = open(&alt, true).map_err(|e| RecorderError::Output { path: alt.clone(), err: e })?;
            Ok((alt, f))
        }
        Err(e) => Err(RecorderError::Output { path, err: e }),
    }
}

/// The runtime and driver API functions PyTorch's profiler also leaves out: called constantly, launch nothing.
const NOISY_RUNTIME: &[&str] = &["cudaGetDevice", "cudaSetDevice", "cudaGetLastError", "cudaPeekAtLastError"];
const NOISY_DRIVER: &[&str] = &["cuCtxGetCurrent", "cuDevicePrimaryCtxGetState", "cuKernelGetAttribute"];

/// Starts a session with `cupti`, making it the one CUPTI calls back. Fails without side effects on the
/// application: nothing is enabled unless everything before succeeded.
pub(crate) fn start(cupti: Box<dyn Cupti>, config: Config) -> Result<&'static Session, RecorderError> {
    config.validate().map_err(RecorderError::Config)?;
    if current().is_some_and(|s| !s.finished.load(Ordering::Acquire)) {
        return Err(RecorderError::AlreadyRecording);
    }
    let api = cupti.api_version().map_err(RecorderError::Cupti)?;
    let layouts = cutr_schema::layouts::builtin(api)
        .ok_or_else(|| RecorderError::UnsupportedCupti { api, origin: cupti.origin() })?;
    match cupti.check_exclusive() {
        Err(e) if e.code == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => return Err(RecorderError::OtherClient),
        Err(e) => return Err(RecorderError::Cupti(e)),
        Ok(()) => {}
    }
    let pid = std::process::id();
    let (path, file) = create_output(&config, pid)?;
    let meta = metadata(cupti.as_ref(), &config, &layouts, api, pid);
    let mut writer = Writer::new(file, WriterOptions { zstd_level: config.zstd_level, ..Default::default() })
        .map_err(|e| RecorderError::Write { path: path.clone(), err: e })?;
    writer.write_metadata(&meta).map_err(|e| RecorderError::Write { path: path.clone(), err: e })?;
    if let Some(c) = clock_sample(cupti.as_ref()) {
        let _ = writer.write_clocks(&[c]);
    }

    // Every buffer that can exist fits in the queue, so CUPTI's thread never blocks on it.
    let (tx, rx) = crossbeam_channel::bounded(config.max_buffers() + 16);
    let started = (
        cupti.timestamp().unwrap_or(0),
        config.start_delay.is_zero() && !config.start_paused && config.capture.is_none(),
    );
    let session: &'static Session = Box::leak(Box::new(Session {
        pool: BufferPool::new(config.buffer_bytes, config.max_buffers(), config.initial_buffers),
        cupti,
        config,
        tx,
        pid,
        path,
        finishing: AtomicBool::new(false),
        finished: AtomicBool::new(false),
        dropped: AtomicU64::new(0),
        enabled: Mutex::new(Vec::new()),
        quiet_api: Mutex::new(Vec::new()),
        writer: Mutex::new(None),
        ticker: Mutex::new(None),
        summary: Mutex::new(None),
        pc: std::sync::OnceLock::new(),
        nvml: Mutex::new(None),
        pm: Mutex::new(None),
        started,
        start_marked: AtomicBool::new(false),
        control: Mutex::new(()),
    }));

    let c = session.cupti.as_ref();
    let cfg = &session.config;
    if let Some(v) = cfg.device_buffer_bytes {
        c.set_attribute(crate::ffi::cupti::ATTR_DEVICE_BUFFER_SIZE, v).map_err(RecorderError::Cupti)?;
    }
    if let Some(v) = cfg.device_buffer_pool_limit {
        c.set_attribute(crate::ffi::cupti::ATTR_DEVICE_BUFFER_POOL_LIMIT, v).map_err(RecorderError::Cupti)?;
    }
    let _ = c.set_thread_id_type_system();
    CURRENT.store(session as *const Session as *mut Session, Ordering::Release);
    c.register_callbacks(on_request, on_complete).map_err(RecorderError::Cupti)?;
    // The API calls to keep out, by cbid, as this libcupti names them.
    if cfg.filter_noisy_api {
        let mut quiet = session.quiet_api.lock().unwrap();
        for (domain, names) in [(2u32, NOISY_RUNTIME), (1u32, NOISY_DRIVER)] {
            for (d, cbid, name) in &meta.callback_names {
                if *d == domain && names.contains(&cutr_schema::callbacks::display_name(name)) {
                    quiet.push((domain, *cbid));
                }
            }
        }
    }

    if let Some(pc) = cfg.pc_sampling.clone() {
        start_pc_sampling(session, api, pc);
    }
    if let Some(c) = cfg.counters.clone() {
        start_counters(session, c);
    }
    let layouts_for_writer = layouts.clone();
    let writer_thread = std::thread::Builder::new()
        .name("cutr-writer".into())
        .spawn(move || writer_loop(session, writer, rx, meta, layouts_for_writer))
        .map_err(|e| RecorderError::Thread(e.to_string()))?;
    *session.writer.lock().unwrap() = Some(writer_thread);

    if started.1 {
        session.enable_kinds()?;
    }
    if let Some((range, end)) = cfg.capture.clone() {
        start_capture(session, range, end)?;
    }
    if cfg.control {
        match crate::controls::control::start(session, pid) {
            Ok(path) if !cfg.quiet => eprintln!(
                "cutr: control: `cupti-record ctl {pid} start|stop|dump|status` ({}), or `kill -USR1 {pid}` to \
                 turn recording {}",
                path.display(),
                if started.1 { "off and on" } else { "on and off" }
            ),
            Ok(_) => {}
            Err(e) => session.note(format!("no control of this recording: {e}")),
        }
    }
    let (stop_tx, stop_rx) = mpsc::channel();
    let ticker = std::thread::Builder::new()
        .name("cutr-flush".into())
        .spawn(move || ticker_loop(session, stop_rx))
        .map_err(|e| RecorderError::Thread(e.to_string()))?;
    *session.ticker.lock().unwrap() = Some((ticker, stop_tx));
    Ok(session)
}

/// Starts PC sampling and cubin capture; a failure is a note, and the activity recording goes on without them.
fn start_pc_sampling(session: &'static Session, api: u32, pc: crate::pc_sampling::PcSamplingConfig) {
    let Some(library) = session.cupti.library_path() else {
        session.note("PC sampling needs a real libcupti; not sampling".into());
        return;
    };
    let tx = session.tx.clone();
    // From the application's threads (cubins) and the ticker (samples): a full queue waits a moment, then the
    // item is dropped and counted as a note rather than stalling the application.
    let send = Box::new(move |c| {
        if tx.send_timeout(Msg::Source(c), Duration::from_secs(1)).is_err() {
            NOTES.lock().unwrap().push("PC sampling: the writer queue was full; a collection was dropped".into());
        }
    });
    match crate::pc_sampling::PcSampler::start(&library, api, pc, send) {
        Ok(s) => {
            let _ = session.pc.set(s);
        }
        Err(e) => session.note(format!("not sampling PCs: {e}")),
    }
}

/// Starts the counter sources; each that cannot start is a note, and the recording goes on without it.
fn start_counters(session: &'static Session, c: crate::counters::CountersConfig) {
    if let Some(pm) = c.pm.clone() {
        if session.config.pc_sampling.is_some() {
            // On the H100 (CUDA 13.0) the two together broke PC sampling (cuptiPCSamplingGetData:
            // CUPTI_ERROR_UNKNOWN) and the application crashed: both program the same SM performance monitors.
            session.note(
                "PM sampling is left out with --pc-sampling (CUPTI cannot run both); NVML's device metrics are kept"
                    .into(),
            );
        } else if session.config.capture.is_some() {
            // PM sampling needs CUPTI's context callbacks (to stop before a context ends), and CUPTI gives them to
            // one subscriber, which the capture range holds.
            session.note(
                "PM sampling is left out with --capture-range (CUPTI has one callback subscriber, which the capture \
                 range needs); NVML's device metrics are kept"
                    .into(),
            );
        } else {
            start_pm_sampling(session, pm);
        }
    }
    let Some(interval) = c.nvml_interval else { return };
    let tx = session.tx.clone();
    let devices = Box::new(|| {
        driver::devices()
            .into_iter()
            .map(|d| crate::counters::nvml::CudaDevice {
                ordinal: d.id,
                uuid: crate::counters::nvml::uuid_text(&d.uuid),
            })
            .collect()
    });
    // A device this process has a context on: its primary one (the runtime's), or one PM sampling saw made.
    let in_use = Box::new(move |d: u32| {
        driver::primary_context_active(d) == Some(true)
            || session.pm.try_lock().ok().is_some_and(|pm| pm.as_ref().is_some_and(|pm| pm.has_device(d)))
    });
    let now = Box::new(move || session.cupti.timestamp().ok());
    let send = Box::new(move |c| {
        if tx.send_timeout(Msg::Counters(c), Duration::from_secs(1)).is_err() {
            NOTES.lock().unwrap().push("counters: the writer queue was full; NVML samples were dropped".into());
        }
    });
    let note = Box::new(|n: String| NOTES.lock().unwrap().push(format!("NVML: {n}")));
    match crate::counters::nvml::NvmlSampler::start(interval, devices, in_use, now, send, note) {
        Ok(s) => *session.nvml.lock().unwrap() = Some(s),
        Err(e) => session.note(e),
    }
}

/// Subscribes to the callbacks that delimit the capture ranges; where that fails, everything is recorded (with a
/// note), rather than nothing.
fn start_capture(
    session: &'static Session,
    range: crate::controls::capture::CaptureRange,
    end: crate::controls::capture::CaptureEnd,
) -> Result<(), RecorderError> {
    let what = range.to_arg();
    let turn = Box::new(move |on: bool| {
        // On the application's thread inside a CUPTI callback: no forced flush (the ticker collects the buffers).
        if let Err(e) = session.switch_recording(on, false) {
            let state = if on { "on" } else { "off" };
            NOTES.lock().unwrap().push(format!("capture range: could not turn recording {state}: {e}"));
        }
    });
    let started = match session.cupti.library_path() {
        Some(lib) => crate::controls::capture::start(&lib, range, end, turn),
        None => Err("capture ranges need a real libcupti".into()),
    };
    if let Err(e) = started {
        session.note(format!("capture range {what} not available ({e}); recording everything"));
        session.enable_kinds()?;
    }
    Ok(())
}

/// Starts PM sampling on the process's CUDA devices; a failure is a note.
fn start_pm_sampling(session: &'static Session, pm: crate::counters::pm_sampling::PmConfig) {
    let Some(library) = session.cupti.library_path() else {
        session.note("PM sampling needs a real libcupti; not sampling hardware counters".into());
        return;
    };
    let tx = session.tx.clone();
    // Devices with a context already (none when injected at cuInit); later ones come from CUPTI's callback.
    let devices = Box::new(|| {
        driver::devices()
            .into_iter()
            .map(|d| d.id)
            .filter(|&d| driver::primary_context_active(d) == Some(true))
            .collect()
    });
    let send = Box::new(move |c| {
        if tx.send_timeout(Msg::Counters(c), Duration::from_secs(1)).is_err() {
            NOTES.lock().unwrap().push("counters: the writer queue was full; PM samples were dropped".into());
        }
    });
    // A note is also shown once on stderr (a metric left out, sampling that cannot keep up: worth knowing while
    // the application runs); repeats are dropped.
    let quiet = session.config.quiet;
    let note = Box::new(move |n: String| {
        let mut notes = NOTES.lock().unwrap();
        if !notes.contains(&n) {
            if !quiet {
                eprintln!("cutr: {n}");
            }
            notes.push(n);
        }
    });
    // Sampling must stop while the CUDA contexts live: an exit hook registered now, after the CUDA runtime
    // registered its own teardown, runs before it.
    let started = Box::new(stop_counters_before_cuda_teardown);
    match crate::counters::pm_sampling::PmSampler::start(&library, pm, devices, send, note, started) {
        Ok(s) => *session.pm.lock().unwrap() = Some(s),
        Err(e) => session.note(format!("not sampling hardware counters: {e}")),
    }
}

static COUNTERS_HOOK: Once = Once::new();

extern "C" fn stop_counters_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(s) = current_session() {
            s.stop_pm_sampling();
        }
    });
}

/// Registers an `exit()` hook that stops PM sampling. Called once sampling runs, which is after CUDA initialized
/// and the CUDA runtime registered its own teardown: `exit()` runs hooks in reverse order of registration, so this
/// one runs while the contexts still live (the session's own hook, registered when CUDA loaded the recorder, runs
/// after the teardown).
fn stop_counters_before_cuda_teardown() {
    COUNTERS_HOOK.call_once(|| {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(stop_counters_at_exit) };
    });
}

fn metadata(cupti: &dyn Cupti, config: &Config, layouts: &LayoutTable, api: u32, pid: u32) -> SessionMetadata {
    let mut callback_names = Vec::new();
    for (domain, max) in [(1u32, 2048u32), (2u32, 2048u32)] {
        let mut misses = 0;
        for cbid in 1..max {
            match cupti.callback_name(domain, cbid) {
                Some(n) if !n.is_empty() => {
                    misses = 0;
                    callback_names.push((domain, cbid, n));
                }
                _ => {
                    misses += 1;
                    if misses > 64 {
                        break;
                    }
                }
            }
        }
    }
    let cmdline: Vec<String> = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
        })
        .unwrap_or_default();
    let start = clock_sample(cupti).map(|c| c.realtime_ns).unwrap_or(0);
    let mut environment = vec![("cupti_library".to_string(), cupti.origin())];
    // The launchers' rank variables (torchrun, Open MPI, MPICH/PMI, Slurm): the converter labels and orders the
    // processes of a job by them.
    const JOB_VARIABLES: &[&str] = &[
        "CUDA_VISIBLE_DEVICES",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "PMI_RANK",
        "PMI_SIZE",
        "SLURM_JOB_ID",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
    ];
    for var in JOB_VARIABLES {
        if let Ok(v) = std::env::var(var) {
            environment.push((var.to_string(), v));
        }
    }
    SessionMetadata {
        writer: "cutr-recorder".into(),
        writer_version: env!("CARGO_PKG_VERSION").into(),
        cupti_api_version: api,
        cuda_driver_version: driver::driver_version().unwrap_or(0),
        cuda_runtime_version: driver::runtime_version().unwrap_or(0),
        host: host_name(),
        pid,
        // SAFETY: getppid has no preconditions.
        ppid: unsafe { libc::getppid() } as u32,
        command_line: cmdline,
        start_unix_ns: start,
        thread_id_type: 1,
        config: config.describe(),
        devices: Vec::new(),
        layouts: Some(layouts.clone()),
        callback_names,
        environment,
        synthetic: false,
    }
}

impl Session {
    fn enable_kinds(&self) -> Result<(), RecorderError> {
        let mut enabled = self.enabled.lock().unwrap();
        for &k in &self.config.kinds {
            if enabled.contains(&k) {
                continue;
            }
            match self.cupti.enable(k) {
                Ok(()) => enabled.push(k),
                Err(e) => {
                    // One kind this GPU or CUPTI cannot record must not stop the others.
                    self.note(format!("activity kind {} not recorded: {e}", cutr_schema::kinds::display(k)));
                }
            }
        }
        if enabled.is_empty() {
            return Err(RecorderError::NothingEnabled);
        }
        // Per-function filters apply to an enabled API kind: set them after enabling it.
        for &(domain, cbid) in self.quiet_api.lock().unwrap().iter() {
            let kind = if domain == 1 { cutr_schema::kinds::DRIVER } else { cutr_schema::kinds::RUNTIME };
            if enabled.contains(&kind)
                && let Err(e) = self.cupti.enable_api_record(domain, cbid, false)
            {
                self.note(format!("could not leave out API cbid {cbid} (domain {domain}): {e}"));
            }
        }
        Ok(())
    }

    fn disable_kinds(&self) {
        let mut enabled = self.enabled.lock().unwrap();
        for k in enabled.drain(..) {
            let _ = self.cupti.disable(k);
        }
    }

    fn note(&self, msg: String) {
        if !self.config.quiet {
            eprintln!("cutr: {msg}");
        }
        NOTES.lock().unwrap().push(msg);
    }

    /// Turns recording on (`on`) or off: kinds enabled or (after a flush) disabled, and the change marked in the file
    /// as a `recording` counter sample (1 on, 0 off). Returns whether recording is on.
    pub(crate) fn set_recording(&'static self, on: bool) -> Result<bool, RecorderError> {
        self.switch_recording(on, true)
    }

    /// [`Session::set_recording`]; `flush`: collect what CUPTI holds before turning off (not from inside a CUPTI
    /// callback).
    pub(crate) fn switch_recording(&'static self, on: bool, flush: bool) -> Result<bool, RecorderError> {
        // From inside a CUPTI callback (no flush), never wait long for the control lock: a control request holding
        // it may itself wait on CUPTI, which waits for this callback.
        let _g = if flush {
            self.control.lock().unwrap_or_else(|e| e.into_inner())
        } else {
            let mut tries = 0;
            loop {
                match self.control.try_lock() {
                    Ok(g) => break g,
                    Err(_) if tries < 200 => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(_) => return Err(RecorderError::ControlBusy),
                }
            }
        };
        if self.finishing.load(Ordering::Acquire) {
            return Err(RecorderError::NotRecording);
        }
        let was = !self.enabled.lock().unwrap().is_empty();
        if was == on {
            return Ok(on);
        }
        if !self.start_marked.swap(true, Ordering::AcqRel) {
            self.mark(self.started.0, self.started.1);
        }
        if on {
            self.enable_kinds()?;
        } else {
            if flush {
                let _ = self.cupti.flush_all(true);
            }
            self.disable_kinds();
        }
        self.mark(self.cupti.timestamp().unwrap_or(0), on);
        Ok(on)
    }

    /// Everything CUPTI holds, into the file now: the file as it stands is readable by every command. With
    /// `--ring`, the window goes to a file of its own, whose path comes back.
    pub(crate) fn dump(&'static self) -> Result<Option<PathBuf>, RecorderError> {
        let _g = self.control.lock().unwrap();
        if self.finishing.load(Ordering::Acquire) {
            return Err(RecorderError::NotRecording);
        }
        let _ = self.cupti.flush_all(true);
        if self.config.ring.is_none() {
            let _ = self.tx.send(Msg::Tick);
            return Ok(None);
        }
        let (reply, answer) = mpsc::channel();
        let _ = self.tx.send(Msg::Dump { reply });
        match answer.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(path)) => Ok(Some(path)),
            Ok(Err(e)) => Err(RecorderError::Dump(e)),
            Err(_) => Err(RecorderError::Dump("the writer did not answer within 60 s".into())),
        }
    }

    /// Whether recording is on.
    pub(crate) fn recording(&self) -> bool {
        !self.enabled.lock().unwrap().is_empty()
    }

    fn mark(&self, ts: u64, on: bool) {
        let metric = cutr_format::CounterMetric {
            name: "recording".into(),
            unit: String::new(),
            description: "1 while cutr records, 0 while it is turned off (--control, SIGUSR1, the Recorder API)".into(),
        };
        let c = cutr_format::CounterSamples {
            source: "cutr".into(),
            device: 0,
            metrics: vec![metric],
            t_start: vec![ts],
            t_end: vec![ts],
            values: vec![if on { 1.0 } else { 0.0 }],
            lost_samples: 0,
        };
        let _ = self.tx.send(Msg::Counters(c));
    }

    /// Stops PM sampling (its last samples go to the writer); the session goes on.
    pub(crate) fn stop_pm_sampling(&self) {
        if let Some(p) = self.pm.lock().unwrap().take() {
            p.finish();
        }
    }

    /// Ends the session: forced flush, footer, sync. Idempotent; only the process that started it acts.
    pub(crate) fn finish(&'static self, timeout: Duration) -> Option<Summary> {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } as u32 != self.pid {
            return None; // a forked child: the file belongs to the parent
        }
        if self.finishing.swap(true, Ordering::AcqRel) {
            return self.wait_summary(timeout);
        }
        if let Some((t, stop)) = self.ticker.lock().unwrap().take() {
            let _ = stop.send(());
            let _ = t.join();
        }
        if let Some(pc) = self.pc.get() {
            pc.finish();
            for n in pc.take_notes() {
                self.note(n);
            }
        }
        if let Some(n) = self.nvml.lock().unwrap().take() {
            n.finish();
        }
        if let Some(p) = self.pm.lock().unwrap().take() {
            p.finish();
        }
        let _ = self.cupti.flush_all(true);
        self.disable_kinds();
        let devices = driver::devices();
        let (reply_tx, reply_rx) = mpsc::channel();
        let _ = self.tx.send(Msg::Finish { devices, reply: reply_tx });
        let summary = reply_rx.recv_timeout(timeout).ok();
        self.finished.store(true, Ordering::Release);
        if let Some(s) = &summary {
            *self.summary.lock().unwrap() = Some(s.clone());
            if let Some(h) = self.writer.lock().unwrap().take() {
                let _ = h.join();
            }
        } else {
            self.note(format!(
                "the writer did not finish within {timeout:?}; {} may lack its footer",
                self.path.display()
            ));
        }
        summary
    }

    fn wait_summary(&self, timeout: Duration) -> Option<Summary> {
        let t = Instant::now();
        while t.elapsed() < timeout {
            if let Some(s) = self.summary.lock().unwrap().clone() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl crate::controls::control::Controlled for Session {
    fn control(&'static self, r: crate::controls::control::Request) -> String {
        use crate::controls::control::Request;
        let s = self;
        let result = match r {
            Request::Start => s.set_recording(true).map(|_| None),
            Request::Stop => s.set_recording(false).map(|_| None),
            Request::Dump => s.dump(),
            Request::Status => Ok(None),
        };
        match result {
            Ok(Some(dump)) => format!("ok: dumped the flight recorder's window to {}", dump.display()),
            Ok(None) => format!("ok: recording {} to {}", if s.recording() { "on" } else { "off" }, s.path.display()),
            Err(e) => format!("error: {e}"),
        }
    }

    fn ended(&self) -> bool {
        self.finishing.load(Ordering::Acquire)
    }

    fn recording(&self) -> bool {
        Session::recording(self)
    }
}

/// Notes for the loss report (a kind that could not be enabled, a late failure).
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn ticker_loop(s: &'static Session, stop: mpsc::Receiver<()>) {
    let started = Instant::now();
    let mut recording = s.config.start_delay.is_zero();
    let mut stopped = false;
    loop {
        match stop.recv_timeout(s.config.flush_period) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let since = started.elapsed();
            if !recording && since >= s.config.start_delay {
                recording = true;
                if let Err(e) = s.enable_kinds() {
                    s.note(format!("could not start recording after the delay: {e}"));
                }
            }
            if recording
                && !stopped
                && let Some(d) = s.config.duration
                && since >= s.config.start_delay + d
            {
                stopped = true;
                let _ = s.cupti.flush_all(true);
                s.disable_kinds();
            }
            // Collect buffers whose records are all complete, so they reach the file even if the process dies.
            let _ = s.cupti.flush_all(false);
            if let Some(pc) = s.pc.get() {
                pc.collect_all();
                for n in pc.take_notes() {
                    s.note(n);
                }
            }
            let _ = s.tx.send(Msg::Tick);
        }));
    }
}

/// Text already written for each string pointer (by content hash), to write each string once and notice when a
/// pointer is reused for other text (a module unloaded and another loaded at the same address).
struct Interner {
    plan: StringPointerPlan,
    seen: HashMap<u64, u64>,
    scratch: Vec<u64>,
}

impl Interner {
    /// New (pointer, text) pairs referenced by `buffer`.
    fn new_strings(&mut self, buffer: &[u8], unresolved: &mut u64) -> Vec<(u64, String)> {
        self.scratch.clear();
        self.plan.collect(buffer, &mut self.scratch);
        self.scratch.sort_unstable();
        self.scratch.dedup();
        let mut out = Vec::new();
        for &ptr in &self.scratch {
            // CUPTI's strings live at least until the module or marker they name is gone; records arrive long
            // before that. A pointer that is not a valid address (never seen from CUPTI) is counted, not read.
            if ptr < 4096 {
                *unresolved += 1;
                continue;
            }
            // SAFETY: `ptr` comes from a record CUPTI just delivered and points at a NUL-terminated string CUPTI
            // owns; strnlen bounds the read.
            let bytes = unsafe {
                let p = ptr as *const libc::c_char;
                let n = libc::strnlen(p, 1 << 20);
                std::slice::from_raw_parts(p as *const u8, n)
            };
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            let hash = h.finish();
            if self.seen.get(&ptr) != Some(&hash) {
                self.seen.insert(ptr, hash);
                out.push((ptr, String::from_utf8_lossy(bytes).into_owned()));
            }
        }
        out
    }
}

struct WriterState {
    w: Writer<File>,
    encoder: ActivityEncoder,
    interner: Interner,
    loss: LossCounters,
    buffers: u64,
    records: u64,
    /// Cubins written, PC samples collected and dropped (`--pc-sampling`).
    cubins: u64,
    pc_samples: u64,
    pc_samples_dropped: u64,
    counter_samples: u64,
    last_sync: Instant,
    threads: crate::threads::ThreadNames,
    /// The flight recorder's window (`--ring`): activity and samples go here instead of the file.
    ring: Option<crate::controls::ring::Ring>,
    /// `--ring-trigger`: what in the records writes the window.
    triggers: Option<crate::controls::triggers::TriggerScan>,
    dumps: u32,
    meta: SessionMetadata,
}

fn writer_loop(
    s: &'static Session,
    w: Writer<File>,
    rx: Receiver<Msg>,
    mut meta: SessionMetadata,
    layouts: LayoutTable,
) {
    let mut st = WriterState {
        encoder: ActivityEncoder::new(&layouts, s.config.zstd_level),
        interner: Interner { plan: StringPointerPlan::new(&layouts), seen: HashMap::new(), scratch: Vec::new() },
        w,
        loss: LossCounters::default(),
        buffers: 0,
        records: 0,
        cubins: 0,
        pc_samples: 0,
        pc_samples_dropped: 0,
        counter_samples: 0,
        last_sync: Instant::now(),
        threads: Default::default(),
        ring: s.config.ring.map(crate::controls::ring::Ring::new),
        triggers: (s.config.ring.is_some() && !s.config.ring_triggers.is_empty())
            .then(|| crate::controls::triggers::TriggerScan::new(&layouts, &s.config.ring_triggers)),
        dumps: 0,
        meta: meta.clone(),
    };
    while let Ok(msg) = rx.recv() {
        let r = catch_unwind(AssertUnwindSafe(|| match msg {
            Msg::Buffer { ptr, valid } => {
                write_buffer(s, &mut st, ptr, valid);
                None
            }
            Msg::Source(c) => {
                write_source(&mut st, c);
                None
            }
            Msg::Counters(c) => {
                write_counters(&mut st, &c);
                None
            }
            Msg::Dump { reply } => {
                let _ = reply.send(dump_ring(s, &mut st));
                None
            }
            Msg::Tick => {
                tick(s, &mut st);
                None
            }
            Msg::Finish { devices, reply } => Some((devices, reply)),
        }));
        match r {
            Ok(Some((devices, reply))) => {
                // Buffers CUPTI completed before the finish request.
                while let Ok(Msg::Buffer { ptr, valid }) = rx.try_recv() {
                    write_buffer(s, &mut st, ptr, valid);
                }
                meta.devices = devices;
                let summary = close(s, st, &meta);
                let _ = reply.send(summary);
                return;
            }
            Ok(None) => {}
            Err(_) => st.loss.notes.push("internal error in the writer thread; a buffer may be missing".into()),
        }
    }
}

fn write_buffer(s: &Session, st: &mut WriterState, ptr: usize, valid: usize) {
    let cap = s.pool.buffer_bytes();
    // SAFETY: CUPTI filled `valid` bytes of this pool buffer and gave up ownership; the pool gets it back below.
    let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, valid.min(cap)) };
    let strings = st.interner.new_strings(bytes, &mut st.loss.unresolved_strings);
    if st.ring.is_some() {
        let fired = st.triggers.as_mut().is_some_and(|t| t.fires(bytes, &strings));
        let ring = st.ring.as_mut().expect("checked");
        let enc = st.encoder.encode(bytes);
        // SAFETY: the buffer came from the pool and `bytes` is not used after this.
        unsafe { s.pool.give_back(ptr as *mut u8) };
        st.loss.zero_timestamp_records += enc.stats.zero_timestamps as u64;
        st.loss.inverted_timestamp_records += enc.stats.inverted_timestamps as u64;
        st.loss.unparsed_bytes += enc.stats.unparsed_bytes as u64;
        st.buffers += 1;
        st.records += enc.stats.records as u64;
        ring.push_activity(strings, enc);
        if fired {
            match dump_ring(s, st) {
                Ok(path) if !s.config.quiet => eprintln!("cutr: ring trigger: wrote {}", path.display()),
                Ok(_) => {}
                Err(e) => st.loss.notes.push(format!("ring trigger: {e}")),
            }
        }
        return;
    }
    if !strings.is_empty() {
        let entries: Vec<(u64, &str)> = strings.iter().map(|(p, t)| (*p, t.as_str())).collect();
        if st.w.write_strings(&entries).is_err() {
            st.loss.write_failures += 1;
        }
    }
    let enc = st.encoder.encode(bytes);
    let stats = enc.stats.clone();
    // SAFETY: the buffer came from the pool and `bytes` is not used after this.
    unsafe { s.pool.give_back(ptr as *mut u8) };
    st.loss.zero_timestamp_records += stats.zero_timestamps as u64;
    st.loss.inverted_timestamp_records += stats.inverted_timestamps as u64;
    st.loss.unparsed_bytes += stats.unparsed_bytes as u64;
    if st.w.append_encoded(enc).is_err() {
        st.loss.write_failures += 1;
        st.loss.records_lost_in_write_failures += stats.records as u64;
    } else {
        st.buffers += 1;
        st.records += stats.records as u64;
    }
}

/// A cubin or a collection of PC samples, to the file.
fn write_source(st: &mut WriterState, c: crate::pc_sampling::Collected) {
    use crate::pc_sampling::Collected;
    if let Some(ring) = &mut st.ring {
        match c {
            Collected::Cubin(cubin) => {
                st.cubins += 1;
                ring.push_cubin(cubin);
            }
            Collected::Samples(p) => {
                st.pc_samples += p.pcs.iter().flat_map(|r| &r.stalls).map(|&(_, n)| u64::from(n)).sum::<u64>();
                st.pc_samples_dropped += p.dropped_samples;
                st.loss.pc_samples_dropped += p.dropped_samples;
                st.loss.pc_collections_buffer_full += u64::from(p.hardware_buffer_full);
                ring.push_pc(p);
            }
        }
        return;
    }
    let written = match &c {
        Collected::Cubin(cubin) => st.w.write_cubin(cubin),
        Collected::Samples(samples) => st.w.write_pc_samples(samples),
    };
    if written.is_err() {
        st.loss.write_failures += 1;
        return;
    }
    match c {
        Collected::Cubin(_) => st.cubins += 1,
        Collected::Samples(p) => {
            st.pc_samples += p.pcs.iter().flat_map(|r| &r.stalls).map(|&(_, n)| u64::from(n)).sum::<u64>();
            st.pc_samples_dropped += p.dropped_samples;
            st.loss.pc_samples_dropped += p.dropped_samples;
            st.loss.pc_collections_buffer_full += u64::from(p.hardware_buffer_full);
        }
    }
}

/// Counter samples, to the file; samples lost on the way are counted in the loss report.
fn write_counters(st: &mut WriterState, c: &cutr_format::CounterSamples) {
    st.loss.counter_samples_lost += c.lost_samples;
    if let Some(ring) = &mut st.ring {
        st.counter_samples += c.len() as u64;
        ring.push_counters(c.clone());
        return;
    }
    if st.w.write_counters(c).is_err() {
        st.loss.write_failures += 1;
        st.loss.counter_samples_lost += c.len() as u64;
        return;
    }
    st.counter_samples += c.len() as u64;
}

/// The flight recorder's window as a complete file beside the output (`<stem>.dump<N>.cutr`).
fn dump_ring(s: &Session, st: &mut WriterState) -> Result<PathBuf, String> {
    let Some(ring) = &st.ring else { return Err("not a flight recording (--ring)".into()) };
    st.dumps += 1;
    let stem = s.path.with_extension("");
    let path = PathBuf::from(format!("{}.dump{}.cutr", stem.display(), st.dumps));
    let write = || -> Result<(), cutr_format::FormatError> {
        let mut w = Writer::create(&path, WriterOptions { zstd_level: s.config.zstd_level, ..Default::default() })?;
        let mut meta = st.meta.clone();
        meta.devices = driver::devices();
        w.write_metadata(&meta)?;
        ring.replay(&mut w)?;
        if let Some(c) = clock_sample(s.cupti.as_ref()) {
            w.write_clocks(&[c])?;
        }
        let names = crate::threads::ThreadNames::default().changed();
        if !names.is_empty() {
            w.write_thread_names(&names)?;
        }
        let mut loss = st.loss.clone();
        loss.notes.push(ring.note());
        loss.is_final = true;
        w.write_loss(&loss)?;
        let f = w.finish()?;
        f.sync_all().map_err(|e| cutr_format::FormatError::Io { path: path.clone(), err: e })?;
        Ok(())
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

fn update_loss(s: &Session, st: &mut WriterState) {
    st.loss.cupti_dropped_records = s.dropped.load(Ordering::Relaxed);
    st.loss.refused_buffers = s.pool.refused();
    let notes = NOTES.lock().unwrap();
    for n in notes.iter() {
        if !st.loss.notes.contains(n) {
            st.loss.notes.push(n.clone());
        }
    }
}

/// Writes the thread names new since the last flush.
fn write_thread_names(st: &mut WriterState) {
    let names = st.threads.changed();
    if !names.is_empty() && st.w.write_thread_names(&names).is_err() {
        st.loss.write_failures += 1;
    }
}

fn tick(s: &Session, st: &mut WriterState) {
    if let Some(ring) = &mut st.ring {
        // Nothing reaches the file until a dump: the clock is kept for it.
        if let Some(c) = clock_sample(s.cupti.as_ref()) {
            ring.push_clock(c);
        }
        return;
    }
    if let Some(c) = clock_sample(s.cupti.as_ref())
        && st.w.write_clocks(&[c]).is_err()
    {
        st.loss.write_failures += 1;
    }
    write_thread_names(st);
    update_loss(s, st);
    if st.w.write_loss(&st.loss).is_err() {
        st.loss.write_failures += 1;
    }
    // Chunks are in the page cache after each write (safe from kill -9); sync now and then for power loss.
    if st.last_sync.elapsed() >= Duration::from_secs(10) {
        let _ = st.w.sync();
        st.last_sync = Instant::now();
    }
}

fn close(s: &Session, mut st: WriterState, meta: &SessionMetadata) -> Summary {
    if let Some(ring) = st.ring.take() {
        // The output gets the window, as a dump does.
        if ring.replay(&mut st.w).is_err() {
            st.loss.write_failures += 1;
        }
        st.loss.notes.push(ring.note());
    }
    if let Some(c) = clock_sample(s.cupti.as_ref()) {
        let _ = st.w.write_clocks(&[c]);
    }
    write_thread_names(&mut st);
    let _ = st.w.write_metadata(meta);
    update_loss(s, &mut st);
    st.loss.is_final = true;
    let _ = st.w.write_loss(&st.loss);
    let bytes = match st.w.finish() {
        Ok(mut f) => {
            use std::io::Write;
            let _ = f.flush();
            let _ = f.sync_all();
            f.metadata().map(|m| m.len()).unwrap_or(0)
        }
        Err(_) => {
            st.loss.write_failures += 1;
            0
        }
    };
    Summary {
        path: s.path.clone(),
        records: st.records,
        buffers: st.buffers,
        bytes,
        loss: st.loss,
        peak_buffer_bytes: s.pool.peak_bytes() as u64,
        cubins: st.cubins,
        pc_samples: st.pc_samples,
        pc_samples_dropped: st.pc_samples_dropped,
        counter_samples: st.counter_samples,
    }
}
