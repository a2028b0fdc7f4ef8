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
//!
//! The rooms: this module holds the options, the state the threads share and the threads themselves; `device`
//! one device's session (set-up, decoding, finishing), `host` the choice of metrics, `evaluation` the
//! evaluating threads, `gate` when CUPTI may be called (and the lock order), and `debug` the
//! `CUTR_PM_DEBUG` timing. The CUPTI calls themselves are in [`crate::ffi::pm`].

//!
//! How sampling is stopped before the process's exit handlers run: `exit`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cutr_format::CounterSamples;

use crate::ffi::pm::Api;
use crate::ffi::subscriber::{
    CBID_CONTEXT_CREATED, CBID_CONTEXT_DESTROY_STARTING, DOMAIN_RESOURCE, Event, EventUser, Subscriber,
};

#[macro_use]
mod debug;
mod device;
mod evaluation;
mod exit;
mod gate;
mod host;
#[cfg(test)]
mod tests;

use device::SessionRef;
use evaluation::Evaluation;
use gate::{ExclusiveSide, GATE_WAIT, Gate};

pub(crate) use exit::ExitHooks;

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
/// `bench/gpu/pm_decode_vs_evaluate_totals.sh`, `pm_cpu_time_vs_decode_period.sh`,
/// `pm_evaluation_thread_rates_resets.sh`): decoding one DRAM metric ~5-6 us, two (one per-SM) ~16-20 us, the default
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
/// plus a quarter for the estimate of its bytes per sample (up to half the largest image). A decode that fills
/// the image loses what else it took from the hardware buffer (on the H100 each full image left a gap of 1-95
/// ms), and a decode late by a stall of the decoding thread brings up to a whole buffer (1,073 samples at 10 kHz
/// beside the PyTorch loop, `bench/gpu/pm_decode_thread_timing.sh`): with this much room no decode can fill the image.
fn reset_room(interval: Duration) -> usize {
    (hardware_samples(interval) * 5 / 4).min(IMAGE_SAMPLES_MAX / 2)
}

/// Samples the hardware buffer holds at an interval.
fn hardware_samples(interval: Duration) -> usize {
    buffer_and_period(interval).0 / HARDWARE_BYTES_PER_SAMPLE
}

/// How often the set-up thread looks for a device that got its first context.
const DEVICE_POLL: Duration = Duration::from_millis(10);

/// What the set-up thread (`cutr-pm`), each device's decoding and evaluating threads and CUPTI's context
/// callbacks share.
struct Shared {
    api: Api,
    /// Every device's session, in set-up order; emptied by `finish_all`.
    sessions: Mutex<Vec<SessionRef>>,
    send: Mutex<Box<dyn Fn(CounterSamples) + Send>>,
    note: Mutex<Box<dyn Fn(String) + Send>>,
    /// Notes wait here until no gate is held ([`Shared::flush_notes`]): the note callback may block (it also
    /// writes to stderr), and a thread blocked under the gate would hold up a context's end.
    notes_pending: Mutex<Vec<String>>,
    /// Held around every CUPTI call that touches a device: see [`gate`].
    gate: Gate,
    /// The devices this process made a CUDA context on, in order: the ones sampled (a rank of a job sees every
    /// GPU of its node but uses one; sampling the others would contend with their own ranks).
    devices: Mutex<Vec<u32>>,
    /// Set when the sampler has finished: the subscriber's later context callbacks are ignored.
    retired: AtomicBool,
    /// The process began to exit before sampling was stopped (the gate is ended too): notes say so.
    exiting: AtomicBool,
}

impl Shared {
    fn new(api: Api, send: Box<dyn Fn(CounterSamples) + Send>, note: Box<dyn Fn(String) + Send>) -> Shared {
        Shared {
            api,
            sessions: Mutex::new(Vec::new()),
            send: Mutex::new(send),
            note: Mutex::new(note),
            notes_pending: Mutex::new(Vec::new()),
            gate: Gate::new(),
            devices: Mutex::new(Vec::new()),
            retired: AtomicBool::new(false),
            exiting: AtomicBool::new(false),
        }
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
    /// them once it has let go of the gate's exclusive side, which it holds); with `context_alive` false (a
    /// context ended without the callback stopping sampling) only the host side is released and CUPTI's PM
    /// sampling objects are left alone. `interrupted`: a context began to end meanwhile (its callback waits for
    /// the gate, a bounded time), so what is left to evaluate or drain is counted as lost and sampling stopped at
    /// once. Idempotent (the sessions are taken out).
    fn finish_all(
        &self,
        _held: &ExclusiveSide<'_>,
        context_alive: bool,
        interrupted: &dyn Fn() -> bool,
    ) -> (usize, Vec<CounterSamples>) {
        let sessions: Vec<SessionRef> = std::mem::take(&mut *self.sessions.lock().unwrap_or_else(|e| e.into_inner()));
        let n = sessions.len();
        let mut chunks = Vec::new();
        for session in sessions {
            // No decoding thread holds this lock: they take it only under the gate's shared side.
            let mut guard = session.lock().unwrap_or_else(|e| e.into_inner());
            let s = &mut *guard;
            // Afterwards `failed` is set: the device's decoding thread, seeing it, ends.
            device::finish(&self.api, s, context_alive, interrupted, &|m| self.note(m));
            chunks.append(&mut device::finished_chunks(s));
        }
        (n, chunks)
    }
}

/// CUDA contexts, from the recorder's subscriber: a context made names a device to sample; one about to be
/// destroyed stops sampling first. Nothing after the sampler finished.
impl EventUser for Shared {
    fn on_event(&self, event: &Event<'_>) {
        if self.retired.load(Ordering::Acquire) {
            return;
        }
        match *event {
            Event::ContextCreated { context } => {
                if let Ok(device) = self.api.context_device(context) {
                    self.on_context_created(device);
                }
            }
            Event::ContextDestroyStarting { .. } => self.on_context_ending(),
            _ => {}
        }
    }
}

impl Shared {
    /// The process began to exit and sampling was not stopped first (see `exit`): the gate is
    /// ended, so no CUPTI call of sampling's begins, and one under way (set-up's) is waited for, [`GATE_WAIT`] at
    /// most, so that it does not run beside the CUDA runtime's teardown. What was set up is left alone.
    fn exit_began(&self) {
        debug!("exit began before sampling was stopped");
        self.exiting.store(true, Ordering::Release);
        self.gate.end();
        drop(self.gate.exclusive_within(GATE_WAIT));
    }
}

/// The callbacks PM sampling registers for.
const CONTEXT_CALLBACKS: [(u32, u32); 2] =
    [(DOMAIN_RESOURCE, CBID_CONTEXT_DESTROY_STARTING), (DOMAIN_RESOURCE, CBID_CONTEXT_CREATED)];

impl Shared {
    /// A context was made on `device`: a device to sample (set up by the set-up thread).
    fn on_context_created(&self, device: u32) {
        let mut devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if !devices.contains(&device) {
            devices.push(device);
        }
    }

    /// A context is about to be destroyed (`cudaDeviceReset`, `cuCtxDestroy`, the runtime's teardown): PM sampling
    /// stops first, on the destroying thread, while the context still lives; after it, stopping or decoding
    /// corrupted the heap on the H100.
    fn on_context_ending(&self) {
        debug!("context destroy starting");
        self.gate.end();
        // Stopping sampling needs the gate: no device call of set-up or decoding may be under way. One that
        // began before the context started ending finishes (chip queries, SetConfig: up to ~250 ms), but one
        // that waits for the driver lock this thread holds (cuptiPmSamplingEnable does, on the H100) never
        // would: after GATE_WAIT the context ends with sampling unstopped, and set-up, finding the gate ended,
        // leaves the object it got alone. Never a hang; never a call into a dead context.
        let t0 = Instant::now();
        let gate = self.gate.exclusive_within(GATE_WAIT);
        debug!(
            "context destroy: gate {} after {:.1} ms",
            if gate.is_some() { "taken" } else { "NOT taken" },
            t0.elapsed().as_secs_f64() * 1e3
        );
        if let Some(gate) = gate {
            let (finished, chunks) = self.finish_all(&gate, true, &|| false);
            drop(gate);
            for c in chunks {
                self.send(c);
            }
            if finished > 0 {
                self.note("PM sampling stopped when a CUDA context ended (cudaDeviceReset or cuCtxDestroy)".into());
            }
        } else {
            self.note(format!(
                "PM sampling: a CUDA context ended while sampling was being set up (a CUPTI call waited for the \
                 ending context for {} ms); not sampling",
                GATE_WAIT.as_millis()
            ));
        }
        self.flush_notes();
    }
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
    /// takes each chunk, `note` each problem; `hooks` are asked for as set-up goes (see `exit`). Registers for
    /// CUPTI's context callbacks with the recorder's subscriber.
    pub fn start(
        library: &Path,
        subscriber: &Subscriber,
        config: PmConfig,
        devices: Box<dyn Fn() -> Vec<u32> + Send>,
        send: Box<dyn Fn(CounterSamples) + Send>,
        note: Box<dyn Fn(String) + Send>,
        hooks: ExitHooks,
    ) -> Result<PmSampler, String> {
        let api = Api::load(library)?;
        let shared: &'static Shared = Box::leak(Box::new(Shared::new(api, send, note)));
        subscriber.register(&CONTEXT_CALLBACKS, shared).map_err(|e| e.to_string())?;
        let (stop, stop_rx) = mpsc::channel();
        let thread = crate::threads::spawn("cutr-pm", move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run(shared, &config, &*devices, &hooks, &stop_rx)
            }));
            if r.is_err() {
                // Nothing of CUPTI's is called any more (the evaluating threads stop at their next sample);
                // a context's end still stops sampling in its callback.
                shared.gate.end();
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

    /// The process is exiting and sampling was not stopped first: see [`Shared::exit_began`].
    pub fn exit_began(&self) {
        self.shared.exit_began();
    }

    /// Stops sampling, drains what the hardware holds and sends it; later context callbacks are ignored. A device
    /// being set up is finished first (set-up takes up to ~0.8 s); devices not yet set up are not.
    pub fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
        self.shared.retired.store(true, Ordering::Release);
    }
}

/// The set-up thread: sets each device up when the process first makes a context on it, until told to stop;
/// then stops the decoding threads and finishes every device's sampling.
fn run(
    shared: &'static Shared,
    config: &PmConfig,
    devices: &dyn Fn() -> Vec<u32>,
    hooks: &ExitHooks,
    stop: &mpsc::Receiver<()>,
) {
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
    let period = decode_period(config);
    // Each device is decoded by a thread of its own: decoding the default set costs 33-67 us a sample, so one
    // thread for two GPUs at 10 kHz would be 66-134% busy. This thread sets devices up, one after the other, and
    // waits. (Set-up on each device's own thread, tried on two H200s, `bench/gpu/pm_setup_per_gpu_and_nvml_devices.sh`: CUPTI's set-up calls
    // then took turns: the first device's sampling began ~0.3 s later, medians of 3 runs, the second's no earlier.)
    let mut decoders: Vec<(mpsc::Sender<()>, JoinHandle<()>)> = Vec::new();
    let mut sampling = false;
    let mut stopped = false;
    while !stopped {
        // Each device is set up once, when this process first makes a context on it.
        let new: Vec<u32> = shared.devices.lock().unwrap().iter().filter(|d| !tried.contains(d)).copied().collect();
        for d in new {
            // Told to stop meanwhile (the exit hook, while the device before was set up): no more set-up.
            if !matches!(stop.try_recv(), Err(mpsc::TryRecvError::Empty)) {
                stopped = true;
                break;
            }
            tried.push(d);
            let ended_first = || {
                if shared.exiting.load(Ordering::Acquire) {
                    format!("PM sampling on device {d}: the process exited before sampling could start")
                } else {
                    format!("PM sampling on device {d}: the CUDA context ended before sampling could start")
                }
            };
            if shared.gate.ended() {
                note(ended_first());
                shared.flush_notes();
                continue;
            }
            if !initialized {
                if tried.len() == 1 {
                    (hooks.exit_began)();
                }
                match initialize_profiler(shared) {
                    Some(Ok(())) => {
                        initialized = true;
                        // libnvperf_host is loaded now (its exit handlers registered): a hook registered from here
                        // on runs before them and before the CUDA runtime's teardown.
                        (hooks.stop)();
                    }
                    Some(Err(e)) => {
                        note(format!("PM sampling: {e}; not sampling"));
                        shared.flush_notes();
                        return;
                    }
                    None => {
                        note(ended_first());
                        shared.flush_notes();
                        continue;
                    }
                }
            }
            let started = start_device(shared, d, config, period);
            if started.is_some() && !sampling {
                sampling = true;
                // Again, ahead of whatever CUPTI registered while setting the device up.
                (hooks.stop)();
            }
            decoders.extend(started);
            shared.flush_notes();
        }
        if stopped {
            break;
        }
        // A device's first context is noticed within DEVICE_POLL (set-up itself takes ~0.5 s).
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
    let untried: Vec<u32> = shared.devices.lock().unwrap().iter().filter(|d| !tried.contains(d)).copied().collect();
    for d in &untried {
        note(format!("PM sampling on device {d}: the recording ended before sampling could start"));
    }
    if tried.is_empty() && untried.is_empty() {
        note("PM sampling: the process made no CUDA context; nothing was sampled".into());
    }
    let gate = shared.gate.exclusive();
    let (_, chunks) = shared.finish_all(&gate, !shared.gate.ended(), &|| shared.gate.ended());
    drop(gate);
    for c in chunks {
        shared.send(c);
    }
    shared.flush_notes();
}

/// How often each device is decoded: [`buffer_and_period`]'s, or `CUTR_PM_DECODE_MS` (a measuring knob, like
/// `CUTR_PM_DEBUG`), up to 50 ms (half of what the hardware buffer holds).
fn decode_period(config: &PmConfig) -> Duration {
    std::env::var("CUTR_PM_DECODE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(|ms| Duration::from_millis(ms.clamp(1, 50)))
        .unwrap_or(buffer_and_period(config.interval).1)
}

/// `cuptiProfilerInitialize`, under the gate like every set-up call: it loads NVIDIA's perf driver, which crashed
/// (SIGSEGV in NVPW_CUDA_LoadDriver, `bench/gpu/pm_evaluation_thread_rates_resets.sh` on the H100) when a cudaDeviceReset ran meanwhile.
/// Called only once a context exists: called as soon as the sampler started (inside cuInit, before any context)
/// it crashed the application in libcuda in 7 of 17 runs (`bench/gpu/pm_early_profiler_init.sh`). `None` once a context ended.
fn initialize_profiler(shared: &Shared) -> Option<Result<(), String>> {
    let gate = shared.gate.device_calls()?;
    debug!("profiler initialize");
    let initialized = shared.api.profiler_initialize();
    drop(gate);
    debug!("profiler initialized");
    Some(initialized)
}

/// Sets device `d` up and starts its decoding thread: that thread's stop channel and handle, or `None` (noted)
/// where set-up failed or no thread could be started (sampling on the device is then stopped at once).
fn start_device(
    shared: &'static Shared,
    d: u32,
    config: &PmConfig,
    period: Duration,
) -> Option<(mpsc::Sender<()>, JoinHandle<()>)> {
    let note = |m: String| shared.note(m);
    debug!("set-up of device {d} begins");
    let r = device::setup(&shared.api, &shared.gate, d, config, &note, &|host, names, pristine| {
        Evaluation::start(shared, d, host, names, pristine)
    });
    debug!("set-up ends: {}", if r.is_ok() { "sampling" } else { "failed" });
    let session: SessionRef = match r {
        Ok(s) => Arc::new(Mutex::new(s)),
        Err(e) => {
            note(format!("PM sampling on device {d}: {e}"));
            return None;
        }
    };
    let (tx, rx) = mpsc::channel();
    let spawned = crate::threads::spawn(format!("cutr-pm-dec{d}"), {
        let session = Arc::clone(&session);
        move || decode_loop(shared, &session, period, &rx)
    });
    match spawned {
        Ok(handle) => {
            shared.sessions.lock().unwrap_or_else(|e| e.into_inner()).push(session);
            Some((tx, handle))
        }
        Err(e) => {
            // Undecoded, its hardware buffer would overflow: sampling on it stops now.
            note(format!("PM sampling on device {d}: no decoding thread ({e}); not sampling it"));
            let gate = shared.gate.exclusive();
            let mut s = session.lock().unwrap_or_else(|e| e.into_inner());
            device::finish(&shared.api, &mut s, !shared.gate.ended(), &|| shared.gate.ended(), &note);
            let chunks = device::finished_chunks(&mut s);
            drop(s);
            drop(gate);
            for c in chunks {
                shared.send(c);
            }
            None
        }
    }
}

/// A device's decoding thread: decodes every `period` until told to stop or the device's sampling is over. A
/// panic ends that device's sampling alone.
fn decode_loop(
    shared: &'static Shared,
    session: &Mutex<device::DeviceSession>,
    period: Duration,
    stop: &mpsc::Receiver<()>,
) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut next = Instant::now();
        loop {
            next += period;
            match stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
            let going = device::decode_device(&shared.api, &shared.gate, session, &|m| shared.note(m));
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
        s.halt();
        let device = s.device;
        drop(s);
        shared.note(format!("PM sampling on device {device} stopped on an internal error (decoding)"));
        shared.flush_notes();
    }
}
