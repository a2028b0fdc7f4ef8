//! One device's PM sampling session: set-up, decoding, hand-over to evaluation, finish.

use std::ffi::{CString, c_char};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cudarc::cupti::sys as cs;
use cutr_format::{CounterMetric, CounterSamples};

use super::debug::thread_cpu_time;
use super::evaluation::{Batch, Evaluation};
use super::host::{chip_and_availability, deinit_host, fit_metrics, host_with, properties};
use super::{BUSY_NOTE_FRACTION, DECODE_PERIOD, PmConfig, Shared, buffer_and_period, image_samples, reset_room};
use crate::ffi::pm::{Api, CUPTI_ERROR_OUT_OF_MEMORY, CUPTI_SUCCESS, DecodeParams, STOP_END_OF_RECORDS, params};

/// Decodes after Stop, at most, to drain what the hardware still holds.
const MAX_DRAIN_DECODES: usize = 64;
/// Set-up's error when a context ended under it.
const ENDED: &str = "the CUDA context ended while sampling was being set up";

/// One device's PM sampling session: everything CUPTI points into lives here until it is disabled.
pub(super) struct DeviceSession {
    pub(super) device: u32,
    /// When the last decode succeeded, and whether sampling stopped since on a full hardware buffer: the samples
    /// from then to the end are lost, and counted at `finish` (CUPTI refuses every decode after an overflow).
    pub(super) last_decode: Instant,
    pub(super) overflowed: bool,
    pub(super) host: *mut cs::CUpti_Profiler_Host_Object,
    pub(super) object: *mut cs::CUpti_PmSampling_Object,
    /// CUPTI keeps a pointer to the config image: it must outlive the session.
    pub(super) _config: Vec<u8>,
    /// The host object was made with pointers to these: kept as long as the host object.
    pub(super) _availability: Vec<u8>,
    pub(super) _chip: CString,
    pub(super) names: Vec<CString>,
    pub(super) metrics: Vec<CounterMetric>,
    /// The image being decoded into.
    pub(super) image: Vec<u8>,
    /// The image as initialized: copied over an image to reset it.
    pub(super) pristine: std::sync::Arc<Vec<u8>>,
    /// Samples of the current image already collected (their timestamps in `pending`, their indices in `indices`).
    pub(super) done: usize,
    pub(super) indices: Vec<usize>,
    /// The session's first sample is dropped (it starts before Start and carries garbage).
    pub(super) first_dropped: bool,
    pub(super) interval: Duration,
    /// The last sample's start: a later one more than 1.5 intervals after it means samples were lost.
    pub(super) last_start: u64,
    /// The device's primary context was active when sampling started: its end (`cudaDeviceReset`) stops sampling.
    /// (An application with contexts of its own leaves the primary one inactive throughout.)
    pub(super) primary_context: bool,
    /// The current image's samples (timestamps, losses counted), values still to come.
    pub(super) pending: CounterSamples,
    /// The evaluating thread (from the first successful configure on).
    pub(super) eval: Option<std::sync::Arc<Evaluation>>,
    /// Stopping: a full image is evaluated on the finishing thread (the evaluating thread is stopped), into `ready`.
    pub(super) finishing: bool,
    pub(super) ready: Vec<CounterSamples>,
    pub(super) failed: bool,
    /// Time spent decoding and evaluating since the first decode (`busy_since`): the note of a thread that cannot
    /// keep up is given once.
    pub(super) busy: Duration,
    pub(super) busy_since: Option<Instant>,
    pub(super) busy_noted: bool,
}

// SAFETY: the raw pointers are CUPTI's objects, which CUPTI lets any thread use; a session is only touched under
// its own lock.
unsafe impl Send for DeviceSession {}

/// A device's session, shared by its decoding thread and whoever finishes sampling (Stop, a context's end).
pub(super) type SessionRef = std::sync::Arc<Mutex<DeviceSession>>;

/// What a finished session holds to send: its evaluated batches and the rest (samples, losses).
pub(super) fn finished_chunks(s: &mut DeviceSession) -> Vec<CounterSamples> {
    let mut chunks = std::mem::take(&mut s.ready);
    if !s.pending.is_empty() || s.pending.lost_samples > 0 {
        chunks.push(std::mem::replace(&mut s.pending, empty(s.device, &s.metrics)));
    }
    chunks
}

pub(super) fn empty(device: u32, metrics: &[CounterMetric]) -> CounterSamples {
    CounterSamples { source: "pm_sampling".into(), device, metrics: metrics.to_vec(), ..Default::default() }
}

/// Host configuration, then PM sampling enabled, configured and started on device `d`.
/// Device calls are made under the gate and not at all once a context has ended ([`ENDED`]); host calls (fitting
/// the metrics, the config image: most of the time) outside it.
pub(super) fn setup(
    shared: &'static Shared,
    d: u32,
    config: &PmConfig,
    note: &dyn Fn(String),
) -> Result<DeviceSession, String> {
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

/// Sets the sampling configuration, sizes and initializes the counter-data image, and starts sampling.
///
/// # Safety
/// `s.object` and `s.host` are live.
pub(super) unsafe fn configure(api: &Api, s: &mut DeviceSession, config: &PmConfig) -> Result<(), String> {
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
pub(super) fn decode(
    api: &Api,
    s: &mut DeviceSession,
    ended: &dyn Fn() -> bool,
    note: &dyn Fn(String),
) -> Result<u32, String> {
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
pub(super) fn note_if_behind(s: &mut DeviceSession, decode_began: Instant, note: &dyn Fn(String)) {
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
pub(super) fn collect_new(
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
pub(super) fn hand_over(api: &Api, s: &mut DeviceSession, ended: &dyn Fn() -> bool, note: &dyn Fn(String)) {
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
pub(super) fn count_overflow(s: &mut DeviceSession) {
    if s.overflowed {
        s.pending.lost_samples += (s.last_decode.elapsed().as_nanos() / s.interval.as_nanos().max(1)).max(1) as u64;
        s.overflowed = false;
    }
}

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
pub(super) mod tests {
    use super::*;
    use crate::counters::pm_sampling::tests::shared_for_test;

    /// A session with no CUPTI objects (null pointers: nothing here may reach CUPTI with it).
    pub(in crate::counters::pm_sampling) fn session_for_test(device: u32, interval: Duration) -> DeviceSession {
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
}
