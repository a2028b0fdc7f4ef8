//! Starting each source of data besides the activity records: PC sampling and cubins, NVML and PM sampling,
//! capture ranges. Each that cannot start is a note, and the recording goes on without it. The ones that need
//! CUPTI's callbacks register with the session's one subscriber.

use std::time::Duration;

use super::{Msg, Session, current_session};
use crate::error::RecorderError;
use crate::ffi::driver;

/// Starts PC sampling and cubin capture; a failure is a note, and the activity recording goes on without them.
pub(super) fn start_pc_sampling(session: &'static Session, api: u32, pc: crate::pc_sampling::PcSamplingConfig) {
    let tx = session.tx.clone();
    // From the application's threads (cubins) and the ticker (samples): a full queue waits a moment, then the
    // item is dropped and counted as a note rather than stalling the application.
    let send = Box::new(move |c| {
        if tx.send_timeout(Msg::Source(c), Duration::from_secs(1)).is_err() {
            session.note("PC sampling: the writer queue was full; a collection was dropped".into());
        }
    });
    let note = Box::new(move |n: String| session.note(n));
    // Under capture ranges the hardware samples only inside them (off at first: no range is open yet).
    let range_control = session.config.capture.is_some().then_some(false);
    match crate::pc_sampling::PcSampler::start(session.cupti, api, pc, range_control, session.subscriber, send, note) {
        Ok(s) => {
            let _ = session.pc.set(s);
        }
        Err(e) => session.note(format!("not sampling PCs: {e}")),
    }
}

/// Starts the counter sources; each that cannot start is a note, and the recording goes on without it.
pub(super) fn start_counters(session: &'static Session, c: crate::counters::CountersConfig) {
    if let Some(pm) = c.pm.clone() {
        if session.config.pc_sampling.is_some() {
            // On the H100 (CUDA 13.0) the two together broke PC sampling (cuptiPCSamplingGetData:
            // CUPTI_ERROR_UNKNOWN) and the application crashed: both program the same SM performance monitors.
            session.note(
                "PM sampling is left out with --pc-sampling (CUPTI cannot run both); NVML's device metrics are kept"
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
            session.note("counters: the writer queue was full; NVML samples were dropped".into());
        }
    });
    let note = Box::new(move |n: String| session.note(format!("NVML: {n}")));
    match crate::counters::nvml::NvmlSampler::start(interval, devices, in_use, now, send, note) {
        Ok(s) => *session.nvml.lock().unwrap() = Some(s),
        Err(e) => session.note(e),
    }
}

/// Subscribes to the callbacks that delimit the capture ranges; where that fails, everything is recorded (with a
/// note), rather than nothing.
pub(super) fn start_capture(
    session: &'static Session,
    range: crate::controls::capture::CaptureRange,
    end: crate::controls::capture::CaptureEnd,
) -> Result<(), RecorderError> {
    let what = range.to_arg();
    let turn = Box::new(move |on: bool| {
        // On the application's thread inside a CUPTI callback: no waiting for records in flight (the ticker
        // collects their buffers when they complete).
        if let Err(e) = session.switch_recording(on, false) {
            let state = if on { "on" } else { "off" };
            session.note(format!("capture range: could not turn recording {state}: {e}"));
        }
    });
    if let Err(e) = crate::controls::capture::start(session.subscriber, range, end, turn) {
        session.note(format!("capture range {what} not available ({e}); recording everything"));
        session.windows.open(0);
        session.enable_kinds()?;
        if let Some(pc) = session.pc.get() {
            pc.set_sampling(true);
        }
    }
    Ok(())
}

/// Registers the retry of unified memory at the first context (CUPTI refuses it while CUDA initializes).
pub(super) fn start_um_retry(session: &'static Session) {
    let user: &'static crate::unified_memory::AtFirstContext =
        Box::leak(Box::new(crate::unified_memory::AtFirstContext {
            retry: Box::new(|| session.enable_um_after_init()),
        }));
    if let Err(e) = session.subscriber.register(&crate::unified_memory::AT_CONTEXT, user) {
        session.note(format!("unified memory may be missed: the context callback is not available ({e})"));
    }
}

/// Starts recording graph structure and where each node was made (`--graph-context`). Without the graph
/// callbacks the replayed kernels keep their graph ids, without capture context (a note says so).
pub(super) fn start_graph_context(session: &'static Session, stack_frames: usize) {
    let cupti = session.cupti;
    let own = start_graph_context as *const () as usize;
    let user: &'static crate::graph_context::GraphRecorder =
        Box::leak(Box::new(crate::graph_context::GraphRecorder::new(
            stack_frames,
            Box::new(move || cupti.timestamp().unwrap_or(0)),
            Box::new(move |max, out| crate::ffi::os::application_stack(own, max, out)),
        )));
    if let Err(e) = session.subscriber.register(&crate::graph_context::GRAPH_CALLBACKS, user) {
        session.note(format!("graph capture context not recorded: the graph callbacks are not available ({e})"));
        return;
    }
    let _ = session.graphs.set(user);
    if let Err(e) = session.subscriber.register(&crate::graph_context::UPDATE_CALLBACKS, user) {
        session.note(format!(
            "graph executable updates not followed (CUDA 13.0's callbacks: {e}); updated nodes keep the capture \
             context they were instantiated with"
        ));
    }
    if let Err(e) = session.subscriber.register(&crate::graph_context::COPY_CALLS, user) {
        session.note(format!("graph copies are recorded as new nodes (the driver API callbacks: {e})"));
    }
}

/// Starts PM sampling on the process's CUDA devices; a failure is a note.
pub(super) fn start_pm_sampling(session: &'static Session, pm: crate::counters::pm_sampling::PmConfig) {
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
            session.note("counters: the writer queue was full; PM samples were dropped".into());
        }
    });
    let note = Box::new(move |n: String| session.note(n));
    let hooks = crate::counters::pm_sampling::ExitHooks {
        exit_began: Box::new(|| register_exit_hook(pm_exit_began)),
        stop: Box::new(|| register_exit_hook(stop_counters_at_exit)),
    };
    match crate::counters::pm_sampling::PmSampler::start(&library, session.subscriber, pm, devices, send, note, hooks) {
        Ok(s) => *session.pm.lock().unwrap() = Some(s),
        Err(e) => session.note(format!("not sampling hardware counters: {e}")),
    }
}

/// Stops PM sampling at `exit()`, ahead of the CUDA runtime's teardown and of the exit handlers CUPTI's libraries
/// registered before it (see `pm_sampling`'s "Exit"). The session's own hook, registered when CUDA loaded the
/// recorder, runs after all of them.
extern "C" fn stop_counters_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(s) = current_session() {
            s.stop_pm_sampling();
        }
    });
}

/// Tells PM sampling that the process exits, where `exit()` began before the stop hook was registered (it is
/// registered when set-up begins, the stop hook later): no CUPTI call of sampling's from here on.
extern "C" fn pm_exit_began() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(s) = current_session() {
            s.pm_exit_began();
        }
    });
}

fn register_exit_hook(hook: extern "C" fn()) {
    if !crate::ffi::os::at_exit(hook)
        && let Some(s) = current_session()
    {
        s.note("PM sampling: no exit hook could be registered; sampling may outlive CUDA at exit".into());
    }
}
