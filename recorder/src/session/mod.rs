//! A recording session: its start, recording on and off, dumps, and the orderly end.
//!
//! The rooms of the session: `writer` (CUPTI's buffer callbacks, the writer thread, the ring), `sources` (starting
//! PC sampling, counters, capture ranges), `ticker` (the periodic flush), `metadata` (what the file says about its
//! recording), `notes` (the one way a problem reaches the user), `windows` (when recording was on, for the
//! sources that sample regardless), `unified_memory` (the kind CUPTI takes only after `cuInit`).
//!
//! Recording is turned off without a forced flush: CUPTI's forced flush hands over the records of work still
//! running with no timestamps, so a control action would lose the kernels in flight. Their buffers complete later
//! and are collected by the periodic flush (or by the bounded wait of a dump).

mod metadata;
mod notes;
mod sources;
mod summary;
mod ticker;
mod unified_memory;
mod windows;
mod writer;

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use cutr_format::{Writer, WriterOptions};

use crate::config::{Config, expand_output_part};
use crate::error::RecorderError;
use crate::ffi::cupti::{CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, Cupti};
use crate::ffi::driver;
use crate::ffi::subscriber::Subscriber;
use crate::pool::BufferPool;
use metadata::{clock_sample, host_name};
pub(crate) use notes::Notes;
pub use summary::Summary;
use windows::Windows;
use writer::{Msg, on_complete, on_request, writer_loop};

pub(crate) struct Session {
    pub(crate) cupti: &'static dyn Cupti,
    /// The one CUPTI callback subscriber (capture ranges, PC and PM sampling register with it).
    subscriber: &'static Subscriber,
    pub(crate) notes: Notes,
    /// When recording was on: counter sources sample all along, and what falls outside is left out.
    windows: Windows,
    pub(crate) config: Config,
    pub(crate) pool: BufferPool,
    tx: Sender<Msg>,
    pub(crate) pid: u32,
    /// The output (with `--split`, the first part).
    pub(crate) path: PathBuf,
    /// The file being written now (with `--split`, the part; set by the writer at each boundary).
    writing: Mutex<PathBuf>,
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
    pc: OnceLock<&'static crate::pc_sampling::PcSampler>,
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
    /// `--um` asked for, but CUPTI accepted no unified memory counter: the kind is left off.
    um_refused: AtomicBool,
    /// Unified memory could not be enabled yet (CUDA still initializing): retried at the next context.
    um_pending: AtomicBool,
    /// Graph structure and node creation stacks (`--graph-context`), taken by the flush thread.
    graphs: OnceLock<&'static crate::graph_context::GraphRecorder>,
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

/// Creates the output file (part `part` of a split recording: `%n` in the path). When another process of the
/// same job already created that path (a spawned worker with the parent's settings), this process writes
/// `<stem>.<pid>.cutr` beside it instead of clobbering it.
pub(super) fn create_output(config: &Config, pid: u32, part: u32) -> Result<(PathBuf, File), RecorderError> {
    let path = PathBuf::from(expand_output_part(&config.output, pid, &host_name(), part));
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

/// How long a dump made while recording is on waits for records still in flight to complete.
const DUMP_SETTLE: Duration = Duration::from_millis(20);

/// The runtime and driver API functions PyTorch's profiler also leaves out: called constantly, launch nothing.
const NOISY_RUNTIME: &[&str] = &["cudaGetDevice", "cudaSetDevice", "cudaGetLastError", "cudaPeekAtLastError"];
const NOISY_DRIVER: &[&str] = &["cuCtxGetCurrent", "cuDevicePrimaryCtxGetState", "cuKernelGetAttribute"];

/// Starts a session with `cupti`, making it the one CUPTI calls back. Fails without side effects on the
/// application: nothing is enabled unless everything before succeeded.
pub(crate) fn start(cupti: Box<dyn Cupti>, config: Config) -> Result<&'static Session, RecorderError> {
    config.validate().map_err(RecorderError::Config)?;
    config.validate_split().map_err(RecorderError::Config)?;
    if current().is_some_and(|s| !s.finished.load(Ordering::Acquire)) {
        return Err(RecorderError::AlreadyRecording);
    }
    let api = cupti.api_version().map_err(RecorderError::Cupti)?;
    let layouts = cutr_schema::layouts::builtin(api)
        .ok_or_else(|| RecorderError::UnsupportedCupti { api, origin: cupti.origin() })?;
    // Leaked with the session: CUPTI may call back after the session ends.
    let cupti: &'static dyn Cupti = Box::leak(cupti);
    // The subscriber is also the check that no other CUPTI client is attached.
    let subscriber = match Subscriber::subscribe(cupti) {
        Err(e) if e.code == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => return Err(RecorderError::OtherClient),
        Err(e) => return Err(RecorderError::Cupti(e)),
        Ok(s) => s,
    };
    let started = start_subscribed(cupti, subscriber, config, api, layouts);
    if started.is_err() {
        subscriber.unsubscribe();
    }
    started
}

fn start_subscribed(
    cupti: &'static dyn Cupti,
    subscriber: &'static Subscriber,
    config: Config,
    api: u32,
    layouts: cutr_schema::LayoutTable,
) -> Result<&'static Session, RecorderError> {
    let pid = std::process::id();
    let (path, file) = create_output(&config, pid, 1)?;
    let mut meta = metadata::metadata(cupti, &config, &layouts, api, pid);
    if config.split.is_some() {
        writer::mark_part(&mut meta, &writer::new_run_id(), 1);
    }
    let mut writer = Writer::new(file, WriterOptions { zstd_level: config.zstd_level, ..Default::default() })
        .map_err(|e| RecorderError::Write { path: path.clone(), err: e })?;
    writer.write_metadata(&meta).map_err(|e| RecorderError::Write { path: path.clone(), err: e })?;
    if let Some(c) = clock_sample(cupti) {
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
        subscriber,
        notes: Notes::new(config.quiet),
        windows: Windows::new(started.1.then_some(0)),
        config,
        tx,
        pid,
        writing: Mutex::new(path.clone()),
        path,
        finishing: AtomicBool::new(false),
        finished: AtomicBool::new(false),
        dropped: AtomicU64::new(0),
        enabled: Mutex::new(Vec::new()),
        quiet_api: Mutex::new(Vec::new()),
        writer: Mutex::new(None),
        ticker: Mutex::new(None),
        summary: Mutex::new(None),
        pc: OnceLock::new(),
        nvml: Mutex::new(None),
        pm: Mutex::new(None),
        started,
        start_marked: AtomicBool::new(false),
        control: Mutex::new(()),
        um_refused: AtomicBool::new(false),
        um_pending: AtomicBool::new(false),
        graphs: OnceLock::new(),
    }));

    let cfg = &session.config;
    session.set_up_cupti(&meta)?;
    // Every callback user registers before recording can begin (and before CUDA makes a context).
    if let Some(pc) = cfg.pc_sampling.clone() {
        sources::start_pc_sampling(session, api, pc);
    }
    if let Some((range, end)) = cfg.capture.clone() {
        sources::start_capture(session, range, end)?;
    }
    if let Some(c) = cfg.counters.clone() {
        sources::start_counters(session, c);
    }
    if cfg.activity_kinds().contains(&cutr_schema::kinds::UNIFIED_MEMORY_COUNTER) {
        sources::start_um_retry(session);
    }
    if let Some(frames) = cfg.graph_context {
        sources::start_graph_context(session, frames);
    }
    if !session.subscriber.has_users() {
        // Nobody needs callbacks: leave the callback API to others, as a recorder of activity alone.
        session.subscriber.unsubscribe();
    }
    let writer_thread = crate::threads::spawn("cutr-writer", move || writer_loop(session, writer, rx, meta, layouts))
        .map_err(|e| RecorderError::Thread(e.to_string()))?;
    *session.writer.lock().unwrap() = Some(writer_thread);

    if started.1 {
        session.enable_kinds()?;
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
    let ticker = crate::threads::spawn("cutr-flush", move || ticker::ticker_loop(session, stop_rx))
        .map_err(|e| RecorderError::Thread(e.to_string()))?;
    *session.ticker.lock().unwrap() = Some((ticker, stop_tx));
    Ok(session)
}

impl Session {
    /// CUPTI's attributes, the buffer callbacks (this session becomes the one they serve), and the API functions
    /// to keep out, by cbid as this libcupti names them.
    fn set_up_cupti(&'static self, meta: &cutr_format::SessionMetadata) -> Result<(), RecorderError> {
        let (cupti, cfg) = (self.cupti, &self.config);
        if let Some(v) = cfg.device_buffer_bytes {
            cupti.set_attribute(crate::ffi::cupti::ATTR_DEVICE_BUFFER_SIZE, v).map_err(RecorderError::Cupti)?;
        }
        if let Some(v) = cfg.device_buffer_pool_limit {
            cupti.set_attribute(crate::ffi::cupti::ATTR_DEVICE_BUFFER_POOL_LIMIT, v).map_err(RecorderError::Cupti)?;
        }
        let _ = cupti.set_thread_id_type_system();
        CURRENT.store(self as *const Session as *mut Session, Ordering::Release);
        cupti.register_callbacks(on_request, on_complete).map_err(RecorderError::Cupti)?;
        // CUPTI records unified memory only for the counters configured before the kind is first enabled.
        if cfg.activity_kinds().contains(&cutr_schema::kinds::UNIFIED_MEMORY_COUNTER)
            && crate::unified_memory::configure(cupti, &mut |n| self.note(n)).is_empty()
        {
            self.um_refused.store(true, Ordering::Relaxed);
        }
        if cfg.filter_noisy_api {
            let mut quiet = self.quiet_api.lock().unwrap();
            for (domain, names) in [(2u32, NOISY_RUNTIME), (1u32, NOISY_DRIVER)] {
                for (d, cbid, name) in &meta.callback_names {
                    if *d == domain && names.contains(&cutr_schema::callbacks::display_name(name)) {
                        quiet.push((domain, *cbid));
                    }
                }
            }
        }
        Ok(())
    }

    fn enable_kinds(&self) -> Result<(), RecorderError> {
        let mut enabled = self.enabled.lock().unwrap();
        for k in self.config.activity_kinds() {
            if enabled.contains(&k) {
                continue;
            }
            if k == cutr_schema::kinds::UNIFIED_MEMORY_COUNTER {
                if !self.um_refused.load(Ordering::Relaxed) {
                    self.enable_um(&mut enabled);
                }
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
        self.notes.add(msg);
    }

    /// Turns recording on (`on`) or off: kinds enabled or disabled (then what completes within the control wait is
    /// collected), PC sampling started or stopped under capture ranges, and the change marked in the file as a
    /// `recording` counter sample (1 on, 0 off). Returns whether recording is on.
    pub(crate) fn set_recording(&'static self, on: bool) -> Result<bool, RecorderError> {
        self.switch_recording(on, true)
    }

    /// [`Session::set_recording`]; `collect`: wait for the records of work in flight and collect them after turning
    /// off (never from inside a CUPTI callback, on the application's thread: the periodic flush collects them).
    pub(crate) fn switch_recording(&'static self, on: bool, collect: bool) -> Result<bool, RecorderError> {
        // From inside a CUPTI callback (no flush), never wait long for the control lock: a control request holding
        // it may itself wait on CUPTI, which waits for this callback.
        let _g = if collect {
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
        let pc = self.pc.get();
        if on {
            self.enable_kinds()?;
            if let Some(pc) = pc {
                pc.set_sampling(true);
            }
        } else {
            if let Some(pc) = pc {
                pc.set_sampling(false);
            }
            self.disable_kinds();
        }
        let now = self.cupti.timestamp().unwrap_or(0);
        if on {
            self.windows.open(now);
        } else {
            self.windows.close(now);
        }
        self.mark(now, on);
        if !on && collect {
            self.collect_completed(self.config.control_wait);
        }
        Ok(on)
    }

    /// Collects the buffers whose records are all complete, again and again until CUPTI holds none or `wait` has
    /// passed. Never a forced flush: that would hand over the records of work still running without their
    /// timestamps (lost); what is still running when the wait ends lands at a later flush.
    fn collect_completed(&self, wait: Duration) {
        let t0 = Instant::now();
        loop {
            let _ = self.cupti.flush_all(false);
            if self.pool.outstanding() == 0 || t0.elapsed() >= wait {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Everything CUPTI holds, into the file now: the file as it stands is readable by every command. With
    /// `--ring`, the window goes to a file of its own, whose path comes back.
    pub(crate) fn dump(&'static self) -> Result<Option<PathBuf>, RecorderError> {
        let _g = self.control.lock().unwrap();
        if self.finishing.load(Ordering::Acquire) {
            return Err(RecorderError::NotRecording);
        }
        // What completed until now; while recording is on, CUPTI keeps filling its current buffer, so the wait
        // is short then (the records still running land in the file, or in the ring's later window, when done).
        let wait = if self.recording() { DUMP_SETTLE.min(self.config.control_wait) } else { self.config.control_wait };
        self.collect_completed(wait);
        self.send_graph_events();
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

    /// The graph events kept since the last call, to the writer.
    fn send_graph_events(&self) {
        if let Some(events) = self.graphs.get().and_then(|g| g.take())
            && self.tx.send_timeout(Msg::Graphs(events), Duration::from_secs(1)).is_err()
        {
            self.note("graph capture context: the writer queue was full; graph events were dropped".into());
        }
    }

    /// Whether counter samples are kept all along, not only while recording is on.
    fn counters_whole_run(&self) -> bool {
        self.config.counters_whole_run
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
        let pm = self.pm.lock().unwrap().take();
        if let Some(p) = pm {
            p.finish();
        }
    }

    /// The process is exiting and PM sampling was not stopped first: it makes no CUPTI call from now on.
    pub(crate) fn pm_exit_began(&self) {
        if let Some(p) = self.pm.lock().unwrap().as_ref() {
            p.exit_began();
        }
    }

    /// Ends the session: forced flush, footer, sync. Idempotent; only the process that started it acts.
    pub(crate) fn finish(&'static self, timeout: Duration) -> Option<Summary> {
        if std::process::id() != self.pid {
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
        }
        if let Some(n) = self.nvml.lock().unwrap().take() {
            n.finish();
        }
        if let Some(p) = self.pm.lock().unwrap().take() {
            p.finish();
        }
        // The end: what is still incomplete now is handed over as it is (counted as records without timestamps).
        let _ = self.cupti.flush_all(true);
        self.disable_kinds();
        self.subscriber.unsubscribe();
        let devices = driver::devices();
        // Host code addresses in the records (CPU page faults) are named offline from these.
        let mappings = crate::mappings::executable_mappings().unwrap_or_else(|e| {
            self.note(format!("host code addresses cannot be named offline: {e}"));
            Vec::new()
        });
        self.send_graph_events();
        let (reply_tx, reply_rx) = mpsc::channel();
        let _ = self.tx.send(Msg::Finish { devices, mappings, reply: reply_tx });
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
                self.writing.lock().unwrap_or_else(|e| e.into_inner()).display()
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
            Ok(None) => {
                let writing = s.writing.lock().unwrap_or_else(|e| e.into_inner()).clone();
                format!("ok: recording {} to {}", if s.recording() { "on" } else { "off" }, writing.display())
            }
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
