//! One device's PM sampling session: set-up (metrics fitted, sampling enabled, configured and started), each
//! decode (the hardware's new samples into a counter-data image, their times collected), the hand-over of a
//! nearly full image to evaluation, and the finish (Stop, drain, Disable). Every function here that calls CUPTI
//! for the device runs under the gate's shared side or, finishing, its exclusive side ([`super::gate`]).

use std::ffi::CString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cutr_format::{CounterMetric, CounterSamples};

use super::debug::thread_cpu_time;
use super::evaluation::{Batch, Evaluation};
use super::gate::Gate;
use super::host::SharedHost;
use super::{BUSY_NOTE_FRACTION, DECODE_PERIOD, PmConfig, buffer_and_period, host, image_samples, reset_room};
use crate::ffi::pm::{Api, ConfigImage, CounterDataImage, DecodeError, Decoded, SamplerObject};

/// Set-up's error when a context ended under it.
const ENDED: &str = "the CUDA context ended while sampling was being set up";
/// A session's CUPTI object is asked for where it has none (never enabled, or disabled at finish).
const NO_OBJECT: &str = "PM sampling is not enabled on the device";
/// Decodes after Stop, at most, to drain what the hardware still holds.
const MAX_DRAIN_DECODES: usize = 64;

/// A device's session, shared by its decoding thread and whoever finishes sampling (Stop, a context's end).
pub(super) type SessionRef = Arc<Mutex<DeviceSession>>;

/// Starts a device's evaluating thread, given the host object, the metric names and the pristine image.
pub(super) type StartEvaluation<'a> =
    &'a dyn Fn(SharedHost, Vec<CString>, Arc<CounterDataImage>) -> Result<Arc<Evaluation>, String>;

/// One device's PM sampling session: everything CUPTI points into lives here until it is disabled.
pub(super) struct DeviceSession {
    pub(super) device: u32,
    /// When the last decode succeeded, and whether sampling stopped since on a full hardware buffer: the samples
    /// from then to the end are lost, and counted at `finish` (CUPTI refuses every decode after an overflow).
    last_decode: Instant,
    overflowed: bool,
    host: SharedHost,
    /// From Enable to Disable.
    object: Option<SamplerObject>,
    names: Vec<CString>,
    metrics: Vec<CounterMetric>,
    /// The image being decoded into.
    image: CounterDataImage,
    /// The image as initialized: copied over an image to reset it.
    pristine: Arc<CounterDataImage>,
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
    eval: Option<Arc<Evaluation>>,
    /// Stopping: a full image is evaluated on the finishing thread (the evaluating thread is stopped), into `ready`.
    finishing: bool,
    ready: Vec<CounterSamples>,
    pub(super) failed: bool,
    /// Time spent decoding and evaluating since the first decode (`busy_since`): the note of a thread that cannot
    /// keep up is given once.
    busy: Duration,
    busy_since: Option<Instant>,
    busy_noted: bool,
}

impl DeviceSession {
    /// A session of device `device` without CUPTI objects yet.
    fn new(device: u32, interval: Duration, names: Vec<CString>, metrics: Vec<CounterMetric>) -> Self {
        DeviceSession {
            device,
            last_decode: Instant::now(),
            overflowed: false,
            host: Arc::new(Mutex::new(None)),
            object: None,
            names,
            pending: empty(device, &metrics),
            metrics,
            image: CounterDataImage::default(),
            pristine: Default::default(),
            done: 0,
            indices: Vec::new(),
            first_dropped: false,
            interval,
            last_start: 0,
            primary_context: false,
            eval: None,
            finishing: false,
            ready: Vec::new(),
            failed: false,
            busy: Duration::ZERO,
            busy_since: None,
            busy_noted: false,
        }
    }

    /// A session without CUPTI objects (nothing may reach CUPTI with it) whose first sample is already dropped.
    #[cfg(test)]
    pub(super) fn for_test(device: u32, interval: Duration) -> DeviceSession {
        DeviceSession { first_dropped: true, ..DeviceSession::new(device, interval, Vec::new(), Vec::new()) }
    }

    /// Nothing more is decoded or evaluated on this device (its context is ending, or its decoding thread
    /// failed): what is queued is counted as lost at finish.
    pub(super) fn halt(&mut self) {
        self.failed = true;
        if let Some(e) = &self.eval {
            e.halt();
        }
    }
}

/// Host configuration, then PM sampling enabled, configured and started on device `d`, and its evaluating thread
/// started. Device calls are made under the gate and not at all once a context has ended ([`ENDED`]); host calls
/// (fitting the metrics, the config image: most of the time) outside it.
pub(super) fn setup(
    api: &Api,
    gate: &Gate,
    d: u32,
    config: &PmConfig,
    note: &dyn Fn(String),
    start_evaluation: StartEvaluation<'_>,
) -> Result<DeviceSession, String> {
    let chip = {
        let Some(_gate) = gate.device_calls() else { return Err(ENDED.into()) };
        host::chip(api, d)?
    };
    debug!("chip and availability");
    let names = {
        let Some(_gate) = gate.device_calls() else { return Err(ENDED.into()) };
        host::fit_metrics(api, &chip, &config.metrics, note, d)
    };
    debug!("metrics fitted");
    if names.is_empty() {
        return Err("none of the metrics can be sampled".into());
    }
    let (host, config_image, metrics) = {
        let Some(_gate) = gate.device_calls() else { return Err(ENDED.into()) };
        let (host, config_image, _) = host::host_with(api, &chip, &names)?;
        let metrics: Vec<CounterMetric> = names
            .iter()
            .map(|n| {
                host::properties(api, &host, n)
                    .unwrap_or_else(|| CounterMetric { name: n.to_string_lossy().into_owned(), ..Default::default() })
            })
            .collect();
        (host, config_image, metrics)
    };
    debug!("enable");
    // Once a context has ended nothing of CUPTI's is called, host objects included (a host call after
    // `cudaDeviceReset` also crashed inside libnvperf_host): what was made is left, at most once per device.
    let object = {
        let Some(_gate) = gate.device_calls() else { return Err(ENDED.into()) };
        match api.enable(d) {
            Ok(object) => object,
            Err(e) => {
                api.host_deinitialize(host);
                return Err(e);
            }
        }
    };
    let mut s = DeviceSession {
        host: Arc::new(Mutex::new(Some(host))),
        object: Some(object),
        primary_context: crate::ffi::driver::primary_context_active(d) == Some(true),
        ..DeviceSession::new(d, config.interval, names, metrics)
    };
    // A context that ended while Enable waited for it: the object belongs to a dead context, left alone.
    let Some(_gate) = gate.device_calls() else { return Err(ENDED.into()) };
    let started = configure(api, &mut s, config_image, config)
        .and_then(|()| start_evaluation(Arc::clone(&s.host), s.names.clone(), Arc::clone(&s.pristine)));
    match started {
        Ok(eval) => s.eval = Some(eval),
        Err(e) => {
            finish(api, &mut s, true, &|| false, note);
            return Err(e);
        }
    }
    Ok(s)
}

/// Sets the sampling configuration (the object keeps the config image), sizes and initializes the counter-data
/// image, and starts sampling.
fn configure(api: &Api, s: &mut DeviceSession, config_image: ConfigImage, config: &PmConfig) -> Result<(), String> {
    let object = s.object.as_mut().ok_or(NO_OBJECT)?;
    debug!("set config");
    api.set_config(object, config_image, buffer_and_period(config.interval).0, config.interval)?;
    debug!("config set");
    let size = api.counter_data_size(object, &s.names, image_samples(config.interval) as u32)?;
    s.image = api.initialize_counter_data(object, size)?;
    s.pristine = Arc::new(s.image.clone());
    debug!("start");
    api.start(object)
}

/// Decodes one device's new samples (its evaluating thread sends the chunks); false once the device's sampling
/// is over (failed, finished, or a context ended), when its decoding thread ends.
pub(super) fn decode_device(api: &Api, gate: &Gate, session: &Mutex<DeviceSession>, note: &dyn Fn(String)) -> bool {
    // The gate first, then the session: a finisher holding the gate's exclusive side may lock every session.
    let Some(_gate) = gate.device_calls() else { return false };
    let mut s = session.lock().unwrap_or_else(|e| e.into_inner());
    if s.failed {
        return false;
    }
    if s.primary_context && crate::ffi::driver::primary_context_active(s.device) == Some(false) {
        // The context is ending (cudaDeviceReset): nothing of CUPTI's is touched again for it, evaluation
        // included (what is queued is counted as lost at finish).
        s.halt();
        return false;
    }
    if let Err(e) = decode(api, &mut s, &|| gate.ended(), note) {
        s.failed = true;
        note(format!("PM sampling on device {} stopped: {e}", s.device));
        return false;
    }
    true
}

/// One decode: the hardware's new samples into the image, collected ([`collect_new`]).
fn decode(
    api: &Api,
    s: &mut DeviceSession,
    ended: &dyn Fn() -> bool,
    note: &dyn Fn(String),
) -> Result<Decoded, String> {
    let object = s.object.as_ref().ok_or(NO_OBJECT)?;
    let t0 = Instant::now();
    let cpu0 = thread_cpu_time();
    let result = api.decode(object, &mut s.image);
    let decoded = t0.elapsed();
    let decoded_cpu = thread_cpu_time().saturating_sub(cpu0);
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(DecodeError::HardwareBufferFull) => {
            // CUPTI refuses every later decode.
            s.overflowed = true;
            return Err(
                "the hardware buffer overflowed (samples after it are lost); a longer interval samples less".into()
            );
        }
        Err(DecodeError::Failed(e)) => return Err(e),
    };
    if outcome.overflow {
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
    Ok(outcome)
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
    let info = api.counter_data_info(&s.image)?;
    let object = s.object.as_ref().ok_or(NO_OBJECT)?;
    for i in s.done..info.completed {
        let times = api.sample_info(object, &s.image, i)?;
        if !s.first_dropped {
            s.first_dropped = true;
            continue;
        }
        let interval_ns = s.interval.as_nanos() as u64;
        if s.last_start != 0 && times.start > s.last_start + interval_ns * 3 / 2 {
            // The hardware sampled at a fixed interval: a longer step is samples lost (counted, not hidden).
            let missing = (times.start - s.last_start + interval_ns / 2) / interval_ns - 1;
            s.pending.lost_samples += missing;
        }
        s.last_start = times.start;
        s.pending.t_start.push(times.start);
        s.pending.t_end.push(times.end);
        s.indices.push(i);
    }
    let collected = info.completed.saturating_sub(s.done);
    s.done = info.completed;
    let capacity = info.total.min(image_samples(s.interval));
    if info.completed + reset_room(s.interval) >= capacity {
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
        batch.image.reset_from(&s.pristine);
        s.image = batch.image;
        return;
    };
    if s.finishing {
        eval.evaluate_all(api, &mut batch, note, ended);
        let (image, samples) = batch.into_parts();
        s.ready.push(samples);
        s.image = image;
        s.image.reset_from(&s.pristine);
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

/// After a hardware-buffer overflow, every interval since the last good decode is lost (on the host's clock:
/// CUPTI's is not asked after a failure); counted once.
fn count_overflow(s: &mut DeviceSession) {
    if s.overflowed {
        s.pending.lost_samples += (s.last_decode.elapsed().as_nanos() / s.interval.as_nanos().max(1)).max(1) as u64;
        s.overflowed = false;
    }
}

/// Stops sampling, drains the hardware (bounded), evaluates what is left, disables, and releases the host
/// object. Where the device's CUDA context is already gone (`cudaDeviceReset`, or the runtime's teardown ran
/// first), CUPTI's PM sampling object is left alone: stopping or disabling it then corrupted the heap (the H100,
/// CUDA 13.0). `interrupted`: a context began to end meanwhile (see `Shared::finish_all`).
pub(super) fn finish(
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
        finish_without_cupti(s, &queued, context_ended, note);
        return;
    }
    let stopped_at = api.timestamp();
    if let Some(object) = &s.object {
        // Stopping one never started returns an error, ignored.
        let _ = api.stop(object);
    }
    // Then what was queued (in order, before what the hardware still holds), what the hardware holds, and the
    // current image: each stops at `interrupted`, the rest counted as lost.
    if let Some(eval) = s.eval.clone() {
        for mut b in queued {
            eval.evaluate_all(api, &mut b, note, interrupted);
            s.ready.push(b.into_parts().1);
        }
    }
    s.finishing = true;
    let drained = drain(api, s, interrupted, note);
    // An overflow the drain met (a decode late by more than the hardware buffer holds) is counted too.
    count_overflow(s);
    if !s.indices.is_empty() || s.pending.lost_samples > 0 {
        hand_over(api, s, interrupted, note);
    }
    count_lost_tail(s, drained, stopped_at, interrupted, note);
    if let Some(object) = s.object.take() {
        api.disable(object);
    }
    // An evaluating thread left stuck in a call keeps the host object: leaked rather than released under it.
    if !s.eval.as_ref().is_some_and(|e| e.left_running()) {
        let host = s.host.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(host) = host {
            api.host_deinitialize(host);
        }
    }
    s.failed = true;
}

/// The finish of a session whose context is gone: nothing of CUPTI's is called after a context ended (see
/// `setup`), evaluation included. What was decoded and not evaluated is counted as lost, and the objects are
/// left as they are.
fn finish_without_cupti(s: &mut DeviceSession, queued: &[Batch], context_ended: bool, note: &dyn Fn(String)) {
    let unevaluated = queued.iter().map(|b| b.indices.len() as u64).sum::<u64>() + s.indices.len() as u64;
    s.pending.lost_samples += unevaluated + queued.iter().map(|b| b.samples.lost_samples).sum::<u64>();
    s.pending.t_start.clear();
    s.pending.t_end.clear();
    s.indices.clear();
    if context_ended {
        note(format!(
            "PM sampling on device {}: the CUDA context ended before sampling was stopped: samples since the last \
             decode (at most {} ms) are not in the file",
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
}

/// Decodes after Stop until the hardware has no more records ([`MAX_DRAIN_DECODES`] at most, and not once
/// `interrupted`); whether it got there.
fn drain(api: &Api, s: &mut DeviceSession, interrupted: &dyn Fn() -> bool, note: &dyn Fn(String)) -> bool {
    if s.failed {
        return false;
    }
    for _ in 0..MAX_DRAIN_DECODES {
        if interrupted() {
            break;
        }
        match decode(api, s, interrupted, note) {
            Ok(outcome) if outcome.end_of_records => return true,
            Ok(_) => {}
            Err(e) => {
                note(format!("PM sampling on device {}: draining: {e}", s.device));
                break;
            }
        }
    }
    false
}

/// The hardware's last samples before Stop do not always come, the more often the further the decoding thread is
/// behind (18-112 ms missing in 4 of 7 recordings at 10-25 kHz, `bench/gpu/pm_completeness_fast_rates.sh`; one more decode before
/// Stop did not shorten it): intervals from the last sample to Stop (`stopped_at`, CUPTI's clock) are counted as
/// lost. Draining cut short by a context's end leaves the same kind of tail, counted the same way.
fn count_lost_tail(
    s: &mut DeviceSession,
    drained: bool,
    stopped_at: Option<u64>,
    interrupted: &dyn Fn() -> bool,
    note: &dyn Fn(String),
) {
    let cut_short = !drained && !s.failed && interrupted();
    let interval_ns = s.interval.as_nanos().max(1) as u64;
    let Some(stopped_at) = stopped_at else { return };
    if (drained || cut_short) && s.last_start != 0 && stopped_at > s.last_start + 2 * interval_ns {
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
}

/// What a finished session holds to send: its evaluated batches and the rest (samples, losses).
pub(super) fn finished_chunks(s: &mut DeviceSession) -> Vec<CounterSamples> {
    let mut chunks = std::mem::take(&mut s.ready);
    if !s.pending.is_empty() || s.pending.lost_samples > 0 {
        chunks.push(std::mem::replace(&mut s.pending, empty(s.device, &s.metrics)));
    }
    chunks
}

/// A chunk of device `device`'s samples with no samples yet.
pub(super) fn empty(device: u32, metrics: &[CounterMetric]) -> CounterSamples {
    CounterSamples { source: "pm_sampling".into(), device, metrics: metrics.to_vec(), ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sampling that stopped on a full hardware buffer counts every interval from its last good decode to the
    /// end as lost (it counted 1 before: a 2 s run at 50 kHz reported "1 sample lost").
    #[test]
    fn an_overflow_counts_every_interval_until_the_end_as_lost() {
        let api = Api::load(&crate::ffi::pm::real_libcupti_for_test()).unwrap();
        let notes = Mutex::new(Vec::new());
        let mut s = DeviceSession {
            last_decode: Instant::now() - Duration::from_millis(50),
            overflowed: true,
            failed: true,
            ..DeviceSession::for_test(0, Duration::from_micros(100))
        };
        // A context already gone: no CUPTI call is made (the session has no CUPTI objects).
        finish(&api, &mut s, false, &|| false, &|m| notes.lock().unwrap().push(m));
        assert!((500..550).contains(&s.pending.lost_samples), "{}", s.pending.lost_samples);
        finish(&api, &mut s, false, &|| false, &|_| {});
        assert!((500..550).contains(&s.pending.lost_samples), "counted once: {}", s.pending.lost_samples);
    }

    /// A decoding thread busy 90% of 2 s is noted once, with the metric count and the interval; 50% of 2 s, or
    /// 100% of less than a second, is not.
    #[test]
    fn a_thread_that_cannot_keep_up_is_noted_once() {
        let notes = Mutex::new(Vec::<String>::new());
        let push = |m: String| notes.lock().unwrap().push(m);
        let mut s = DeviceSession {
            names: vec![CString::new("a").unwrap(), CString::new("b").unwrap()],
            busy: Duration::from_millis(1000),
            busy_since: Some(Instant::now() - Duration::from_secs(2)),
            ..DeviceSession::for_test(1, Duration::from_micros(10))
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
}
