//! Source level while recording: the cubins the process loads and continuous PC sampling (`--pc-sampling`).
//!
//! The recorder's one CUPTI subscriber (`ffi::subscriber`) delivers this module three resource callbacks, on the
//! application's threads:
//! - module loaded: the cubin is copied (its bytes are valid only inside the callback), named by CUPTI's CRC, and
//!   sent to the writer once per CRC; the context's samples are collected first, as CUPTI asks, so that a module
//!   loaded at the address of an unloaded one does not mix their PCs;
//! - context created: the context is remembered, and PC sampling enabled on it in continuous mode (kernels are not
//!   serialized) with the stall reasons asked for, the context's stall-reason table kept for the file;
//! - context destroy starting: its samples are collected and sampling disabled.
//!
//! With capture ranges (`range_control`), PC sampling is enabled on every context when a range begins and disabled
//! (its samples collected) when it ends, not when a context is created. CUPTI refuses to enable the kernel activity
//! kind on a context with PC sampling enabled (CUPTI_ERROR_NOT_COMPATIBLE), so the session enables the activity
//! kinds first and PC sampling second (and at a range's end disables PC sampling first).
//!
//! Samples are collected (`cuptiPCSamplingGetData` until CUPTI holds none) on the recorder's ticker thread at every
//! flush period, so the hardware buffer does not overflow, and once more at the end. Each collection of a context
//! is one `pc_samples` chunk with CUPTI's counts of samples taken and dropped, and the context's stall-reason
//! table (in every collection, not only the first: `--ring` evicts old collections, and samples without their
//! table cannot be named).
//!
//! The CUPTI calls and the memory CUPTI writes records into are `ffi::pc`'s; this module holds no `unsafe`.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cutr_format::{CubinBlob, PcSamples};

use crate::ffi::cupti::Cupti;
use crate::ffi::pc::{ConfigRequest, Configured, PcCupti, PcError, SampleBuffer};
use crate::ffi::subscriber::{
    CBID_CONTEXT_CREATED, CBID_CONTEXT_DESTROY_STARTING, CBID_MODULE_LOADED, ContextHandle, DOMAIN_RESOURCE, Event,
    EventUser, Subscriber,
};

pub use crate::ffi::pc::MIN_API_VERSION;

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

/// PCs per collection call: a drain loops until CUPTI has none left.
const PCS_PER_CALL: usize = 4096;
/// PCs the configuration buffer holds: what CUPTI still has at disable must fit (the rest it discards).
const PCS_AT_DISABLE: usize = 16384;

/// One context being sampled.
struct Context {
    ctx: ContextHandle,
    id: u32,
    device: u32,
    /// The context's stall-reason table, written with every collection: a flight recorder (`--ring`) evicts
    /// collections by time, and samples kept without their table could not be named.
    reasons: Vec<(u32, String)>,
    /// A collection of the context was written: later ones without samples are not (the first always is, so
    /// that the file names every context that sampled, and its table).
    written: bool,
    /// What CUPTI was configured with: at disable, it copies into this buffer what it still holds.
    configured: Configured,
    drain: SampleBuffer,
    last_collection: u64,
}

/// The session's PC sampler and cubin collector.
pub(crate) struct PcSampler {
    /// The session's CUPTI's PC Sampling API (libcupti's, or the fake's in tests).
    api: Box<dyn PcCupti>,
    config: PcSamplingConfig,
    /// Sampling only while recording is on (capture ranges): enabled on every context when a range begins, and
    /// disabled (its samples collected) when it ends. CUPTI refuses to enable the kernel activity kind on a
    /// context with PC sampling enabled (CUPTI_ERROR_NOT_COMPATIBLE), so the two are switched in that order.
    range_control: bool,
    /// With `range_control`: whether sampling is wanted now (a range is open).
    wanted: AtomicBool,
    /// Every context the process has made, to enable sampling on when a range begins.
    live: Mutex<Vec<ContextHandle>>,
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
    /// `range_control` only while [`PcSampler::set_sampling`] says so (`sampling` at first). The PC Sampling API
    /// is `cupti`'s, asked for once the version is known to have it.
    pub fn start(
        cupti: &dyn Cupti,
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
        let api = cupti.pc_sampling()?;
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
                self.enable_context(ctx);
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

    fn enable_context(&self, ctx: ContextHandle) {
        match self.enable(ctx) {
            Ok(c) => self.pending.lock().unwrap().push(c),
            Err(e) => self.note(format!("PC sampling not enabled on a context: {e}")),
        }
    }

    fn on_context_created(&self, ctx: ContextHandle) {
        self.live.lock().unwrap().push(ctx);
        if self.wanted.load(Ordering::Acquire) {
            self.enable_context(ctx);
        }
    }

    fn on_context_destroy(&self, ctx: ContextHandle) {
        self.live.lock().unwrap().retain(|&c| c != ctx);
        let mut contexts = self.contexts.lock().unwrap();
        contexts.append(&mut self.pending.lock().unwrap());
        if let Some(i) = contexts.iter().position(|c| c.ctx == ctx) {
            let mut c = contexts.remove(i);
            self.collect(&mut c);
            self.disable(&mut c);
        }
    }

    fn on_module_loaded(&self, ctx: ContextHandle, module_id: u32, cubin: &[u8]) {
        // Collected now when no collection is running (else the running one, or the next, takes these PCs).
        if let Ok(mut contexts) = self.contexts.try_lock()
            && let Some(c) = contexts.iter_mut().find(|c| c.ctx == ctx)
        {
            self.collect(c);
        }
        if cubin.is_empty() {
            return;
        }
        let crc = match self.api.cubin_crc(cubin) {
            Ok(crc) => crc,
            Err(e) => return self.note(e),
        };
        if !self.cubins_seen.lock().unwrap().insert(crc) {
            return;
        }
        // The bytes are valid only inside the callback: copied.
        let data = cubin.to_vec();
        (self.send)(Collected::Cubin(CubinBlob { crc, module_id, data }));
    }

    /// Enables sampling on a live context and configures it: continuous mode, the stall reasons asked for (the
    /// default set when the device lacks one), the period.
    fn enable(&self, ctx: ContextHandle) -> Result<Context, String> {
        let api = &self.api;
        let id = api.context_id(ctx)?;
        let device = api.device_id(ctx)?;
        api.enable(ctx)?;
        let table = api.stall_reasons(ctx)?;
        // A name the device does not have never stops the recording: it is reported, and the default set used.
        let reasons = self.config.stall_reasons.select(&table).unwrap_or_else(|e| {
            self.note(format!("PC sampling: --stall-reasons: {e}; counting the default set"));
            StallReasons::Default.select(&table).unwrap_or_default()
        });
        let indices: Vec<u32> = reasons.iter().map(|(i, _)| *i).collect();
        let n = indices.len();
        let request = ConfigRequest {
            indices,
            period_log2: self.config.period_log2,
            buffer: SampleBuffer::new(PCS_AT_DISABLE, n),
        };
        let configured = api.configure(ctx, request)?;
        Ok(Context {
            ctx,
            id,
            device,
            reasons,
            written: false,
            configured,
            drain: SampleBuffer::new(PCS_PER_CALL, n),
            last_collection: api.now(),
        })
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
            let got = self.api.get_data(c.ctx, &mut c.drain);
            // CUPTI's counts are taken even from a call that failed.
            let d = c.drain.counts();
            out.total_samples += d.total_samples;
            out.dropped_samples += d.dropped_samples;
            out.non_user_samples += d.non_user_samples;
            out.hardware_buffer_full |= d.hardware_buffer_full;
            match got {
                Ok(()) => {}
                Err(PcError::HardwareBufferFull) => {
                    self.note(
                        "PC sampling: the hardware buffer filled; its samples were lost (a longer --pc-period \
                               samples less)"
                            .into(),
                    );
                    out.hardware_buffer_full = true;
                    break;
                }
                Err(PcError::Failed(e)) => {
                    self.note(e);
                    break;
                }
            }
            out.pcs.extend(c.drain.take_records());
            if d.remaining_pcs == 0 && d.pcs < PCS_PER_CALL {
                break;
            }
        }
        out.t_end = self.api.now();
        c.last_collection = out.t_end;
        if out.pcs.is_empty() && out.total_samples == 0 && c.written {
            return;
        }
        out.stall_reasons = c.reasons.clone();
        c.written = true;
        (self.send)(Collected::Samples(out));
    }

    /// Disables sampling on the context and sends what CUPTI still held: at disable it copies the samples not yet
    /// collected (those its worker had not processed, often all of a short run's) into the configuration buffer.
    fn disable(&self, c: &mut Context) {
        if let Err(e) = self.api.disable(c.ctx, &mut c.configured) {
            return self.note(e);
        }
        let d = c.configured.counts();
        let mut out = PcSamples {
            context: c.id,
            device: c.device,
            t_start: c.last_collection,
            t_end: self.api.now(),
            total_samples: d.total_samples,
            dropped_samples: d.dropped_samples,
            non_user_samples: d.non_user_samples,
            hardware_buffer_full: d.hardware_buffer_full,
            period_log2: self.config.period_log2.unwrap_or(0),
            ..Default::default()
        };
        out.pcs = c.configured.take_records();
        if !out.pcs.is_empty() || out.total_samples > 0 || !c.written {
            out.stall_reasons = c.reasons.clone();
            c.written = true;
            (self.send)(Collected::Samples(out));
        }
    }
}

/// The resource callbacks, from the recorder's subscriber (on the application's threads).
impl EventUser for PcSampler {
    fn on_event(&self, event: &Event<'_>) {
        match *event {
            Event::ContextCreated { context } => self.on_context_created(context),
            Event::ContextDestroyStarting { context } => self.on_context_destroy(context),
            Event::ModuleLoaded { context, module_id, cubin } => self.on_module_loaded(context, module_id, cubin),
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
