//! Source level while recording: the cubins the process loads and continuous PC sampling (`--pc-sampling`).
//!
//! The recorder's CUPTI subscriber (`ffi::subscriber`) hands this module three resource callbacks on the
//! application's threads:
//! - module loaded: the cubin is copied (its bytes are valid only inside the callback), named by CUPTI's CRC, and
//!   sent to the writer once per CRC; the context's samples are collected first, as CUPTI asks, so that a module
//!   loaded at the address of an unloaded one does not mix their PCs;
//! - context created: PC sampling is enabled on it in continuous mode (kernels are not serialized), all stall
//!   reasons, with the context's stall-reason table kept for the file;
//! - context destroy starting: its samples are collected and sampling disabled.
//!
//! Samples are collected (`cuptiPCSamplingGetData` until CUPTI holds none) on the recorder's ticker thread at every
//! flush period, so the hardware buffer does not overflow, and once more at the end. Each collection of a context
//! is one `pc_samples` chunk with CUPTI's counts of samples taken and dropped.

use std::collections::HashSet;
use std::ffi::{CStr, c_char};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cudarc::cupti::sys as cs;
use cudarc::driver::sys::CUcontext;
use cutr_format::{CubinBlob, PcRecord, PcSamples};

/// What the rest of the recorder sends to the writer thread.
pub(crate) enum Collected {
    Cubin(CubinBlob),
    Samples(PcSamples),
}

/// The PC sampling options (`--pc-sampling`, `--pc-period`, `--stall-reasons`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PcSamplingConfig {
    /// The sampling period as 2^N SM cycles (5..=31); CUPTI's default (by the GPU's SM count) when `None`.
    pub period_log2: Option<u32>,
    pub stall_reasons: StallReasons,
}

/// Which of the device's stall reasons CUPTI counts per PC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StallReasons {
    /// Every reason but the `*_not_issued` twins (the same reasons counted for samples whose warp was not
    /// selected): half the table, and what `cupti-convert source` reports.
    #[default]
    Default,
    /// Every reason the device has.
    All,
    /// These reasons only, by short name (`long_scoreboard`) or CUPTI's full name.
    Only(Vec<String>),
}

/// The prefix CUPTI puts on every stall-reason name.
pub const STALL_REASON_PREFIX: &str = "smsp__pcsamp_warps_issue_stalled_";

impl StallReasons {
    /// `all`, `default`, or a comma-separated list of names.
    pub fn parse(s: &str) -> Result<StallReasons, String> {
        match s.trim() {
            "" => Err("empty: use all, default or a comma-separated list of reason names".into()),
            "default" => Ok(StallReasons::Default),
            "all" => Ok(StallReasons::All),
            list => Ok(StallReasons::Only(
                list.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect(),
            )),
        }
    }

    /// The text `parse` reads back.
    pub fn to_arg(&self) -> String {
        match self {
            StallReasons::Default => "default".into(),
            StallReasons::All => "all".into(),
            StallReasons::Only(v) => v.join(","),
        }
    }

    /// Whether the reason CUPTI calls `full` is counted.
    fn keeps(&self, full: &str) -> bool {
        match self {
            StallReasons::All => true,
            // The table also lists two counters that are not reasons (`smsp__pcsamp_sample_count`,
            // `smsp__pcsamp_samples_data_dropped`): only `all` asks for them.
            StallReasons::Default => full.starts_with(STALL_REASON_PREFIX) && !full.ends_with("_not_issued"),
            StallReasons::Only(names) => {
                let short = full.strip_prefix(STALL_REASON_PREFIX).unwrap_or(full);
                names.iter().any(|n| n == full || n == short)
            }
        }
    }

    /// The device's reasons (`(index, full name)`) that are counted; names asked for that the device does not have
    /// come back as the error.
    pub fn select(&self, table: &[(u32, String)]) -> Result<Vec<(u32, String)>, String> {
        if let StallReasons::Only(names) = self {
            let unknown: Vec<&str> = names
                .iter()
                .filter(|n| {
                    !table.iter().any(|(_, f)| f == *n || f.strip_prefix(STALL_REASON_PREFIX) == Some(n.as_str()))
                })
                .map(String::as_str)
                .collect();
            if !unknown.is_empty() {
                let mut known: Vec<&str> = table
                    .iter()
                    .filter(|(_, f)| StallReasons::Default.keeps(f))
                    .map(|(_, f)| f.strip_prefix(STALL_REASON_PREFIX).unwrap_or(f))
                    .collect();
                known.sort_unstable();
                return Err(format!(
                    "this device has no stall reason {}; it has: {} (and their *_not_issued twins)",
                    unknown.join(", "),
                    known.join(", ")
                ));
            }
        }
        Ok(table.iter().filter(|(_, f)| self.keeps(f)).cloned().collect())
    }
}

/// The oldest CUPTI whose PC record layout (64 bytes, with `correlationId`) the recorder uses: CUDA 12.4.
pub const MIN_API_VERSION: u32 = 22;
/// PCs per collection call: a drain loops until CUPTI has none left.
const PCS_PER_CALL: usize = 4096;
/// PCs the configuration buffer holds: what CUPTI still has at disable must fit (the rest it discards).
const PCS_AT_DISABLE: usize = 16384;
/// Bytes of a stall reason's name (CUPTI_STALL_REASON_STRING_SIZE).
const STALL_REASON_NAME_BYTES: usize = 128;
const CUPTI_SUCCESS: u32 = 0;
/// cupti_result.h: 8 (13 is CUPTI_ERROR_NOT_READY).
const CUPTI_ERROR_OUT_OF_MEMORY: u32 = 8;

type FnCtxParams<P> = unsafe extern "C" fn(*mut P) -> u32;
type FnCubinCrc = unsafe extern "C" fn(*mut cs::CUpti_GetCubinCrcParams) -> u32;
type FnContextId = unsafe extern "C" fn(CUcontext, *mut u32) -> u32;
type FnTimestamp = unsafe extern "C" fn(*mut u64) -> u32;
use crate::ffi::cupti::FnResultString;
use crate::ffi::subscriber::{
    CBID_CONTEXT_CREATED, CBID_CONTEXT_DESTROY_STARTING, CBID_MODULE_LOADED, DOMAIN_RESOURCE, Event, EventUser,
    Subscriber,
};

/// The CUPTI functions this module calls, from the libcupti the session uses.
struct Api {
    enable: FnCtxParams<cs::CUpti_PCSamplingEnableParams>,
    disable: FnCtxParams<cs::CUpti_PCSamplingDisableParams>,
    get_data: FnCtxParams<cs::CUpti_PCSamplingGetDataParams>,

    set_config: FnCtxParams<cs::CUpti_PCSamplingConfigurationInfoParams>,
    num_stall_reasons: FnCtxParams<cs::CUpti_PCSamplingGetNumStallReasonsParams>,
    stall_reasons: FnCtxParams<cs::CUpti_PCSamplingGetStallReasonsParams>,
    cubin_crc: FnCubinCrc,
    context_id: FnContextId,
    device_id: FnContextId,
    timestamp: FnTimestamp,
    result_string: FnResultString,
}

impl Api {
    fn load(path: &Path) -> Result<Api, String> {
        // SAFETY: the library is already loaded by the session (this only takes another reference, never
        // dropped); each symbol's C signature is the one its field's type declares (cupti_pcsampling.h,
        // cupti_callbacks.h, cupti_activity.h).
        unsafe {
            let lib = libloading::os::unix::Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_GLOBAL)
                .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
            macro_rules! sym {
                ($name:literal) => {
                    *lib.get(concat!($name, "\0").as_bytes())
                        .map_err(|_| format!("{} lacks {} (PC sampling needs CUPTI 12.4+)", path.display(), $name))?
                };
            }
            let api = Api {
                enable: sym!("cuptiPCSamplingEnable"),
                disable: sym!("cuptiPCSamplingDisable"),
                get_data: sym!("cuptiPCSamplingGetData"),

                set_config: sym!("cuptiPCSamplingSetConfigurationAttribute"),
                num_stall_reasons: sym!("cuptiPCSamplingGetNumStallReasons"),
                stall_reasons: sym!("cuptiPCSamplingGetStallReasons"),
                cubin_crc: sym!("cuptiGetCubinCrc"),
                context_id: sym!("cuptiGetContextId"),
                device_id: sym!("cuptiGetDeviceId"),
                timestamp: sym!("cuptiGetTimestamp"),
                result_string: sym!("cuptiGetResultString"),
            };
            std::mem::forget(lib);
            Ok(api)
        }
    }

    fn error(&self, call: &str, code: u32) -> String {
        format!("{call}: {}", crate::ffi::cupti::result_name(self.result_string, code))
    }

    fn now(&self) -> u64 {
        let mut t = 0;
        // SAFETY: valid out-pointer.
        unsafe { (self.timestamp)(&mut t) };
        t
    }
}

/// A buffer CUPTI fills with PC records: the header, the records, and each record's stall-reason array, all at
/// addresses that do not move while CUPTI holds them.
struct SampleBuffer {
    data: Box<cs::CUpti_PCSamplingData>,
    pcs: Vec<cs::CUpti_PCSamplingPCData>,
    stalls: Vec<cs::CUpti_PCSamplingStallReason>,
    reasons_per_pc: usize,
}

// SAFETY: the raw pointers inside point into the buffer's own allocations; it moves between threads only behind
// the sampler's mutex.
unsafe impl Send for SampleBuffer {}

impl SampleBuffer {
    fn new(capacity: usize, reasons_per_pc: usize) -> SampleBuffer {
        // SAFETY: these are plain C structs for which all-zero is a valid value (null pointers, zero counts).
        let zeroed_pc: cs::CUpti_PCSamplingPCData = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let data: cs::CUpti_PCSamplingData = unsafe { std::mem::zeroed() };
        let mut b = SampleBuffer {
            data: Box::new(data),
            pcs: vec![zeroed_pc; capacity],
            stalls: vec![
                cs::CUpti_PCSamplingStallReason { pcSamplingStallReasonIndex: 0, samples: 0 };
                capacity * reasons_per_pc
            ],
            reasons_per_pc,
        };
        b.reset();
        b
    }

    /// Sets the sizes and pointers CUPTI reads before it fills the buffer again.
    fn reset(&mut self) {
        let base = self.stalls.as_mut_ptr();
        for (i, pc) in self.pcs.iter_mut().enumerate() {
            pc.size = std::mem::size_of::<cs::CUpti_PCSamplingPCData>();
            pc.stallReasonCount = self.reasons_per_pc;
            // SAFETY: i * reasons_per_pc + reasons_per_pc <= stalls.len().
            pc.stallReason = unsafe { base.add(i * self.reasons_per_pc) };
            pc.functionName = std::ptr::null_mut();
        }
        self.data.size = std::mem::size_of::<cs::CUpti_PCSamplingData>();
        self.data.collectNumPcs = self.pcs.len();
        self.data.pPcData = self.pcs.as_mut_ptr();
        self.data.totalNumPcs = 0;
    }

    /// The records CUPTI wrote, copied out (function names freed, as CUPTI asks of its clients).
    fn take_records(&mut self) -> Vec<PcRecord> {
        let n = (self.data.totalNumPcs).min(self.pcs.len());
        let mut out = Vec::with_capacity(n);
        for pc in &mut self.pcs[..n] {
            // The name is copied, never freed: CUPTI shares one name between the records of a function (freeing
            // each record's pointer double-frees, as PyTorch runs showed) and may keep it for later collections.
            let name = if pc.functionName.is_null() {
                String::new()
            } else {
                // SAFETY: CUPTI wrote a NUL-terminated string, valid while sampling is enabled.
                unsafe { CStr::from_ptr(pc.functionName).to_string_lossy().into_owned() }
            };
            pc.functionName = std::ptr::null_mut();
            let count = pc.stallReasonCount.min(self.reasons_per_pc);
            // SAFETY: stallReason points at this record's `reasons_per_pc` entries; CUPTI filled `count` of them.
            let stalls = unsafe { std::slice::from_raw_parts(pc.stallReason, count) };
            out.push(PcRecord {
                cubin_crc: pc.cubinCrc,
                pc_offset: pc.pcOffset,
                function_index: pc.functionIndex,
                function_name: name,
                stalls: stalls
                    .iter()
                    .filter(|s| s.samples > 0)
                    .map(|s| (s.pcSamplingStallReasonIndex, s.samples))
                    .collect(),
            });
        }
        out
    }
}

/// One context being sampled.
struct Context {
    ctx: usize,
    id: u32,
    device: u32,
    reasons: Vec<(u32, String)>,
    reasons_written: bool,
    /// The buffer given at configuration: at disable, CUPTI copies into it what it still holds.
    config_buffer: SampleBuffer,
    drain: SampleBuffer,
    last_collection: u64,
    /// The stall-reason indices given to CUPTI (must outlive the configuration call).
    _reason_indices: Vec<u32>,
}

/// The session's PC sampler and cubin collector.
pub(crate) struct PcSampler {
    api: Api,
    config: PcSamplingConfig,
    /// Sampling only while recording is on (capture ranges): enabled on every context when a range begins, and
    /// disabled (its samples collected) when it ends. CUPTI refuses to enable the kernel activity kind on a
    /// context with PC sampling enabled (CUPTI_ERROR_NOT_COMPATIBLE), so the two are switched in that order.
    range_control: bool,
    /// With `range_control`: whether sampling is wanted now (a range is open).
    wanted: AtomicBool,
    /// Every context the process has made, to enable sampling on when a range begins.
    live: Mutex<Vec<usize>>,
    contexts: Mutex<Vec<Context>>,
    /// Contexts enabled by the application's threads, not yet taken by a collection: a callback never waits long
    /// for a collection in progress (which calls into CUPTI while holding `contexts`).
    pending: Mutex<Vec<Context>>,
    cubins_seen: Mutex<HashSet<u64>>,
    send: Box<dyn Fn(Collected) + Send + Sync>,
    /// The session's notes (a context that could not be sampled, a full hardware buffer).
    note: Box<dyn Fn(String) + Send + Sync>,
}

/// Longest a range's end waits for a collection in progress before its contexts are disabled.
const RANGE_END_WAIT: Duration = Duration::from_millis(500);

impl PcSampler {
    /// Registers for the resource callbacks; sampling is enabled on each context as it is created, or with
    /// `range_control` only while [`PcSampler::set_sampling`] says so (`sampling` at first).
    pub fn start(
        library: &Path,
        api_version: u32,
        config: PcSamplingConfig,
        range_control: Option<bool>,
        subscriber: &Subscriber,
        send: Box<dyn Fn(Collected) + Send + Sync>,
        note: Box<dyn Fn(String) + Send + Sync>,
    ) -> Result<&'static PcSampler, String> {
        if api_version < MIN_API_VERSION {
            return Err(format!(
                "PC sampling needs CUPTI 12.4 or later (API {MIN_API_VERSION}); this one is API {api_version}"
            ));
        }
        let api = Api::load(library)?;
        let sampler: &'static PcSampler = Box::leak(Box::new(PcSampler {
            api,
            config,
            range_control: range_control.is_some(),
            wanted: AtomicBool::new(range_control.unwrap_or(true)),
            live: Mutex::new(Vec::new()),
            contexts: Mutex::new(Vec::new()),
            pending: Mutex::new(Vec::new()),
            cubins_seen: Mutex::new(HashSet::new()),
            send,
            note,
        }));
        let wants =
            [CBID_CONTEXT_CREATED, CBID_CONTEXT_DESTROY_STARTING, CBID_MODULE_LOADED].map(|c| (DOMAIN_RESOURCE, c));
        subscriber.register(&wants, sampler).map_err(|e| e.to_string())?;
        Ok(sampler)
    }

    fn note(&self, msg: String) {
        (self.note)(msg);
    }

    /// Collects every context's samples (the ticker's flush, and the end).
    pub fn collect_all(&self) {
        let mut contexts = self.contexts.lock().unwrap();
        contexts.append(&mut self.pending.lock().unwrap());
        for c in contexts.iter_mut() {
            self.collect(c);
        }
    }

    /// With range control, enables (`on`) or disables sampling on every context, after the activity kinds were
    /// enabled or before they are disabled. Without range control, sampling runs all along and this does nothing.
    pub fn set_sampling(&self, on: bool) {
        if !self.range_control || self.wanted.swap(on, Ordering::AcqRel) == on {
            return;
        }
        if on {
            let live = self.live.lock().unwrap().clone();
            for ctx in live {
                self.enable_context(ctx as CUcontext);
            }
            return;
        }
        // On the application's thread: a collection in progress is waited for, bounded; after that the sampling
        // goes on until the next collection, which disables it.
        let t0 = Instant::now();
        let mut contexts = loop {
            match self.contexts.try_lock() {
                Ok(c) => break Some(c),
                Err(_) if t0.elapsed() < RANGE_END_WAIT => std::thread::sleep(Duration::from_millis(1)),
                Err(_) => break None,
            }
        };
        match contexts.as_deref_mut() {
            Some(contexts) => self.disable_all(contexts),
            None => self.note("PC sampling: a range ended during a long collection; disabled at the next".into()),
        }
    }

    /// Collects and disables every enabled context (`contexts` locked by the caller).
    fn disable_all(&self, contexts: &mut Vec<Context>) {
        contexts.append(&mut self.pending.lock().unwrap());
        for mut c in contexts.drain(..) {
            self.collect(&mut c);
            self.disable(&mut c);
        }
    }

    /// Collects and disables every context (the end of the session).
    pub fn finish(&self) {
        self.disable_all(&mut self.contexts.lock().unwrap());
    }

    fn enable_context(&self, ctx: CUcontext) {
        match self.enable(ctx) {
            Ok(c) => self.pending.lock().unwrap().push(c),
            Err(e) => self.note(format!("PC sampling not enabled on a context: {e}")),
        }
    }

    fn on_context_created(&self, ctx: CUcontext) {
        self.live.lock().unwrap().push(ctx as usize);
        if self.wanted.load(Ordering::Acquire) {
            self.enable_context(ctx);
        }
    }

    fn on_context_destroy(&self, ctx: CUcontext) {
        self.live.lock().unwrap().retain(|&c| c != ctx as usize);
        let mut contexts = self.contexts.lock().unwrap();
        contexts.append(&mut self.pending.lock().unwrap());
        if let Some(i) = contexts.iter().position(|c| c.ctx == ctx as usize) {
            let mut c = contexts.remove(i);
            self.collect(&mut c);
            self.disable(&mut c);
        }
    }

    fn on_module_loaded(&self, ctx: CUcontext, module_id: u32, cubin: &[u8]) {
        // Collected now when no collection is running (else the running one, or the next, takes these PCs).
        if let Ok(mut contexts) = self.contexts.try_lock()
            && let Some(c) = contexts.iter_mut().find(|c| c.ctx == ctx as usize)
        {
            self.collect(c);
        }
        if cubin.is_empty() {
            return;
        }
        let mut p = cs::CUpti_GetCubinCrcParams {
            size: std::mem::size_of::<cs::CUpti_GetCubinCrcParams>(),
            cubinSize: cubin.len(),
            cubin: cubin.as_ptr().cast(),
            cubinCrc: 0,
        };
        // SAFETY: the cubin's bytes are valid for this callback.
        let code = unsafe { (self.api.cubin_crc)(&mut p) };
        if code != CUPTI_SUCCESS {
            self.note(self.api.error("cuptiGetCubinCrc", code));
            return;
        }
        if !self.cubins_seen.lock().unwrap().insert(p.cubinCrc) {
            return;
        }
        // The bytes are valid only inside the callback: copied.
        let data = cubin.to_vec();
        (self.send)(Collected::Cubin(CubinBlob { crc: p.cubinCrc, module_id, data }));
    }

    fn enable(&self, ctx: CUcontext) -> Result<Context, String> {
        let api = &self.api;
        let check = |call: &str, code: u32| if code == CUPTI_SUCCESS { Ok(()) } else { Err(api.error(call, code)) };
        let (mut id, mut device) = (0u32, 0u32);
        // SAFETY: every params struct is zero-initialized with its own size and the live context; out-pointers
        // point at locals; name buffers are allocated with the size CUPTI writes.
        unsafe {
            check("cuptiGetContextId", (api.context_id)(ctx, &mut id))?;
            check("cuptiGetDeviceId", (api.device_id)(ctx, &mut device))?;
            let mut p: cs::CUpti_PCSamplingEnableParams = std::mem::zeroed();
            p.size = std::mem::size_of_val(&p);
            p.ctx = ctx;
            check("cuptiPCSamplingEnable", (api.enable)(&mut p))?;
            let mut n = 0usize;
            let mut q: cs::CUpti_PCSamplingGetNumStallReasonsParams = std::mem::zeroed();
            q.size = std::mem::size_of_val(&q);
            q.ctx = ctx;
            q.numStallReasons = &mut n;
            check("cuptiPCSamplingGetNumStallReasons", (api.num_stall_reasons)(&mut q))?;
            let mut indices = vec![0u32; n];
            let mut names: Vec<Vec<c_char>> = vec![vec![0; STALL_REASON_NAME_BYTES]; n];
            let mut name_ptrs: Vec<*mut c_char> = names.iter_mut().map(|v| v.as_mut_ptr()).collect();
            let mut r: cs::CUpti_PCSamplingGetStallReasonsParams = std::mem::zeroed();
            r.size = std::mem::size_of_val(&r);
            r.ctx = ctx;
            r.numStallReasons = n;
            r.stallReasonIndex = indices.as_mut_ptr();
            r.stallReasons = name_ptrs.as_mut_ptr();
            check("cuptiPCSamplingGetStallReasons", (api.stall_reasons)(&mut r))?;
            let table: Vec<(u32, String)> = indices
                .iter()
                .zip(&names)
                .map(|(&i, name)| (i, CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned()))
                .collect();
            // A name the device does not have never stops the recording: it is reported, and the default set used.
            let reasons = self.config.stall_reasons.select(&table).unwrap_or_else(|e| {
                self.note(format!("PC sampling: --stall-reasons: {e}; counting the default set"));
                StallReasons::Default.select(&table).unwrap_or_default()
            });
            let mut indices: Vec<u32> = reasons.iter().map(|(i, _)| *i).collect();
            let n = indices.len();
            let mut config_buffer = SampleBuffer::new(PCS_AT_DISABLE, n.max(1));
            let mut attrs: Vec<cs::CUpti_PCSamplingConfigurationInfo> = Vec::new();
            let attr = |t: cs::CUpti_PCSamplingConfigurationAttributeType| {
                let mut a: cs::CUpti_PCSamplingConfigurationInfo = std::mem::zeroed();
                a.attributeType = t;
                a
            };
            use cs::CUpti_PCSamplingConfigurationAttributeType as T;
            let mut a = attr(T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE);
            a.attributeData.collectionModeData.collectionMode =
                cs::CUpti_PCSamplingCollectionMode::CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
            attrs.push(a);
            let mut a = attr(T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON);
            a.attributeData.stallReasonData.stallReasonCount = n;
            a.attributeData.stallReasonData.pStallReasonIndex = indices.as_mut_ptr();
            attrs.push(a);
            let mut a = attr(T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER);
            a.attributeData.samplingDataBufferData.samplingDataBuffer =
                (&mut *config_buffer.data as *mut cs::CUpti_PCSamplingData).cast();
            attrs.push(a);
            if let Some(period) = self.config.period_log2 {
                let mut a = attr(T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD);
                a.attributeData.samplingPeriodData.samplingPeriod = period;
                attrs.push(a);
            }
            let mut c: cs::CUpti_PCSamplingConfigurationInfoParams = std::mem::zeroed();
            c.size = std::mem::size_of_val(&c);
            c.ctx = ctx;
            c.numAttributes = attrs.len();
            c.pPCSamplingConfigurationInfo = attrs.as_mut_ptr();
            check("cuptiPCSamplingSetConfigurationAttribute", (api.set_config)(&mut c))?;
            Ok(Context {
                ctx: ctx as usize,
                id,
                device,
                reasons,
                reasons_written: false,
                config_buffer,
                drain: SampleBuffer::new(PCS_PER_CALL, n.max(1)),
                last_collection: api.now(),
                _reason_indices: indices,
            })
        }
    }

    /// Collects what CUPTI holds for the context, into one `PcSamples` sent to the writer.
    fn collect(&self, c: &mut Context) {
        let mut out = PcSamples {
            context: c.id,
            device: c.device,
            t_start: c.last_collection,
            period_log2: self.config.period_log2.unwrap_or(0),
            ..Default::default()
        };
        // A drain ends when CUPTI has no PC left; the bound keeps a misbehaving CUPTI from holding the thread.
        for _ in 0..10_000 {
            c.drain.reset();
            // SAFETY: a zeroed params struct with its size, the live context and the drain buffer prepared above.
            let code = unsafe {
                let mut p: cs::CUpti_PCSamplingGetDataParams = std::mem::zeroed();
                p.size = std::mem::size_of_val(&p);
                p.ctx = c.ctx as CUcontext;
                p.pcSamplingData = (&mut *c.drain.data as *mut cs::CUpti_PCSamplingData).cast();
                (self.api.get_data)(&mut p)
            };
            let d = &c.drain.data;
            out.total_samples += d.totalSamples;
            out.dropped_samples += d.droppedSamples;
            out.non_user_samples += d.nonUsrKernelsTotalSamples;
            out.hardware_buffer_full |= d.hardwareBufferFull != 0;
            if code == CUPTI_ERROR_OUT_OF_MEMORY {
                self.note(
                    "PC sampling: the hardware buffer filled; its samples were lost (a longer --pc-period \
                           samples less)"
                        .into(),
                );
                out.hardware_buffer_full = true;
                break;
            }
            if code != CUPTI_SUCCESS {
                self.note(self.api.error("cuptiPCSamplingGetData", code));
                break;
            }
            let got = d.totalNumPcs;
            let remaining = d.remainingNumPcs;
            out.pcs.extend(c.drain.take_records());
            if remaining == 0 && got < PCS_PER_CALL {
                break;
            }
        }
        out.t_end = self.api.now();
        c.last_collection = out.t_end;
        if out.pcs.is_empty() && out.total_samples == 0 && c.reasons_written {
            return;
        }
        if !c.reasons_written {
            out.stall_reasons = c.reasons.clone();
            c.reasons_written = true;
        }
        (self.send)(Collected::Samples(out));
    }

    /// Disables sampling on the context and sends what CUPTI still held: at disable it copies the samples not yet
    /// collected (those its worker had not processed, often all of a short run's) into the configuration buffer.
    fn disable(&self, c: &mut Context) {
        c.config_buffer.reset();
        // SAFETY: a zeroed params struct with its size and the context being sampled.
        let code = unsafe {
            let mut p: cs::CUpti_PCSamplingDisableParams = std::mem::zeroed();
            p.size = std::mem::size_of_val(&p);
            p.ctx = c.ctx as CUcontext;
            (self.api.disable)(&mut p)
        };
        if code != CUPTI_SUCCESS {
            self.note(self.api.error("cuptiPCSamplingDisable", code));
            return;
        }
        let d = &c.config_buffer.data;
        let mut out = PcSamples {
            context: c.id,
            device: c.device,
            t_start: c.last_collection,
            t_end: self.api.now(),
            total_samples: d.totalSamples,
            dropped_samples: d.droppedSamples,
            non_user_samples: d.nonUsrKernelsTotalSamples,
            hardware_buffer_full: d.hardwareBufferFull != 0,
            period_log2: self.config.period_log2.unwrap_or(0),
            ..Default::default()
        };
        out.pcs = c.config_buffer.take_records();
        if !c.reasons_written {
            out.stall_reasons = c.reasons.clone();
            c.reasons_written = true;
        }
        if !out.pcs.is_empty() || out.total_samples > 0 || !out.stall_reasons.is_empty() {
            (self.send)(Collected::Samples(out));
        }
    }
}

/// The resource callbacks, from the recorder's subscriber (on the application's threads).
impl EventUser for PcSampler {
    fn on_event(&self, event: &Event<'_>) {
        match *event {
            Event::ContextCreated { context } => self.on_context_created(context.0 as CUcontext),
            Event::ContextDestroyStarting { context } => self.on_context_destroy(context.0 as CUcontext),
            Event::ModuleLoaded { context, module_id, cubin } => {
                self.on_module_loaded(context.0 as CUcontext, module_id, cubin)
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four of the H100's 40 table entries, as `cuptiPCSamplingGetStallReasons` names them, and one of its two
    /// counters that are not reasons.
    fn table() -> Vec<(u32, String)> {
        let mut t: Vec<(u32, String)> = ["long_scoreboard", "long_scoreboard_not_issued", "wait", "selected"]
            .iter()
            .enumerate()
            .map(|(i, n)| (i as u32 * 3, format!("{STALL_REASON_PREFIX}{n}")))
            .collect();
        t.push((12, "smsp__pcsamp_sample_count".into()));
        t
    }

    #[test]
    fn the_default_set_leaves_out_the_not_issued_twins() {
        let picked = StallReasons::parse("default").unwrap().select(&table()).unwrap();
        assert_eq!(picked.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 6, 9]);
        assert_eq!(StallReasons::parse("all").unwrap().select(&table()).unwrap().len(), 5);
    }

    #[test]
    fn a_list_takes_short_or_full_names_and_names_what_the_device_lacks() {
        let full = format!("{STALL_REASON_PREFIX}wait");
        let picked = StallReasons::parse(&format!("long_scoreboard, {full}")).unwrap().select(&table()).unwrap();
        assert_eq!(picked.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 6]);
        let err = StallReasons::parse("wait,tex_throttle").unwrap().select(&table()).unwrap_err();
        assert_eq!(
            err,
            "this device has no stall reason tex_throttle; it has: long_scoreboard, selected, wait (and their \
             *_not_issued twins)"
        );
        assert!(StallReasons::parse(" ").is_err());
        assert_eq!(StallReasons::parse("wait,selected").unwrap().to_arg(), "wait,selected");
    }
}
