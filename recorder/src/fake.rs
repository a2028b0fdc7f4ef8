//! A fake CUPTI for testing the recorder without a GPU: it asks the recorder for buffers through the registered
//! request callback, fills them with records the test supplies (real CUPTI layouts, from the synthetic
//! generator), and hands them back through the completion callback, counting the records it had to drop when a
//! buffer was refused, as CUPTI does. It also fakes CUPTI's callback API (the application's side: contexts,
//! modules, NVTX ranges, profiler calls) and its PC Sampling API (`pc`: every call recorded, no samples).

use std::collections::HashMap;
use std::ffi::{CString, c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cutr_format::records::StringPointerPlan;
use cutr_schema::LayoutTable;

use crate::ffi::cupti::{
    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, Callback, CompleteFn, Cupti, CuptiError, RequestFn,
};
use crate::ffi::pc::PcCupti;
use crate::ffi::subscriber as sub;

mod pc;

pub use pc::{FAKE_DEVICE, fake_cubin_crc, fake_stall_reasons};

#[derive(Default)]
struct State {
    buffer_callbacks: Mutex<Option<(RequestFn, CompleteFn)>>,
    enabled: Mutex<Vec<u32>>,
    refuse_kinds: Mutex<Vec<u32>>,
    dropped_unread: AtomicU64,
    dropped_total: AtomicU64,
    clock: AtomicU64,
    /// Filled buffers CUPTI still holds (delivered at the next flush): (address, valid bytes).
    held: Mutex<Vec<(usize, usize)>>,
    /// Buffers holding records of work still running: (address, valid bytes, the records once complete). A
    /// default flush leaves them; a forced one delivers them as they are now (timestamps missing).
    running: Mutex<Vec<(usize, usize, Vec<u8>)>>,
    /// The callback subscriber (`cuptiSubscribe`): the callback and its user data.
    subscriber: Mutex<Option<(Callback, usize)>>,
    /// (domain, cbid) enabled for the subscriber.
    callbacks: Mutex<Vec<(u32, u32)>>,
    /// `cuptiEnableCallback` fails (a CUPTI without the callback API for these ids).
    refuse_callbacks: AtomicBool,
    flushes: AtomicU64,
    forced_flushes: AtomicU64,
    other_client: AtomicBool,
    disabled_api: Mutex<Vec<(u32, u32)>>,
    /// C strings standing in for CUPTI's, by the fake address the records carried.
    strings: Mutex<HashMap<u64, CString>>,
    /// Every PC Sampling API call, in order (`"enable 0x10"`).
    pc_calls: Mutex<Vec<String>>,
    /// Contexts with PC sampling enabled.
    pc_sampling: Mutex<Vec<usize>>,
    /// Samples CUPTI says it took at each `cuptiPCSamplingGetData` (0: none, the default).
    pc_samples_per_drain: AtomicU64,
    /// Unified memory counter kinds `cuptiActivityConfigureUnifiedMemoryCounter` refuses (the whole call fails
    /// when it holds one, as CUPTI's does), and every configuration it accepted, in order.
    refuse_um: Mutex<Vec<u32>>,
    um_configured: Mutex<Vec<Vec<u32>>>,
    /// CUDA is initializing (until a context is made): a unified memory configuration is accepted but has no
    /// effect, and enabling the kind fails with CUPTI_ERROR_NOT_READY, as CUPTI does inside `cuInit`.
    um_initializing: AtomicBool,
    /// A configuration took effect.
    um_effective: AtomicBool,
}

/// The CUPTI the recorder talks to in tests.
pub struct FakeCupti {
    api: u32,
    state: Arc<State>,
}

/// The test's side of a [`FakeCupti`]: drives it after it has been handed to the recorder.
#[derive(Clone)]
pub struct FakeHandle {
    state: Arc<State>,
    plan: Arc<StringPointerPlan>,
    layouts: Arc<LayoutTable>,
}

/// What happened to one delivered buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The recorder gave a buffer; the records reached it.
    Written,
    /// The recorder refused a buffer; the records were dropped and counted.
    Dropped,
}

impl FakeCupti {
    /// A fake of the CUPTI with API version `api` (130001 or 28 have layout tables).
    pub fn new(api: u32) -> (FakeCupti, FakeHandle) {
        let state = Arc::new(State::default());
        state.clock.store(1_795_316_045_000_000_000, Ordering::Relaxed);
        let layouts = cutr_schema::layouts::builtin(api).or_else(|| cutr_schema::layouts::builtin(130001)).unwrap();
        let plan = Arc::new(StringPointerPlan::new(&layouts));
        (FakeCupti { api, state: state.clone() }, FakeHandle { state, plan, layouts: Arc::new(layouts) })
    }
}

impl FakeHandle {
    /// Makes each `cuptiPCSamplingGetData` say CUPTI took `n` samples (no PCs), so that every collection is
    /// written.
    pub fn set_pc_samples_per_drain(&self, n: u64) {
        self.state.pc_samples_per_drain.store(n, Ordering::Relaxed);
    }

    /// Makes the fake behave as if another CUPTI client were attached.
    pub fn set_other_client(&self, yes: bool) {
        self.state.other_client.store(yes, Ordering::Relaxed);
    }

    /// Makes `cuptiEnableCallback` fail.
    pub fn refuse_callbacks(&self) {
        self.state.refuse_callbacks.store(true, Ordering::Relaxed);
    }

    /// Makes `cuptiActivityEnable` fail for `kind`.
    pub fn refuse_kind(&self, kind: u32) {
        self.state.refuse_kinds.lock().unwrap().push(kind);
    }

    /// Makes `cuptiActivityConfigureUnifiedMemoryCounter` fail for a call that holds `counter_kind`.
    pub fn refuse_um_counter(&self, counter_kind: u32) {
        self.state.refuse_um.lock().unwrap().push(counter_kind);
    }

    /// Until [`FakeHandle::context_created`], as inside `cuInit`: unified memory configurations are accepted with no
    /// effect, and enabling the kind fails with `CUPTI_ERROR_NOT_READY` unless one was made after.
    pub fn um_not_ready_until_a_context(&self) {
        self.state.um_initializing.store(true, Ordering::Relaxed);
    }

    /// Every unified memory counter configuration the recorder made and CUPTI accepted, in order.
    pub fn um_configured(&self) -> Vec<Vec<u32>> {
        self.state.um_configured.lock().unwrap().clone()
    }

    pub fn enabled(&self) -> Vec<u32> {
        self.state.enabled.lock().unwrap().clone()
    }

    pub fn disabled_api(&self) -> Vec<(u32, u32)> {
        self.state.disabled_api.lock().unwrap().clone()
    }

    pub fn dropped_total(&self) -> u64 {
        self.state.dropped_total.load(Ordering::Relaxed)
    }

    /// The PC Sampling API calls so far, in order: `"enable 0x10"`, `"configure 0x10 [0, 2, 3] None"` (the
    /// stall-reason indices and the period), `"cubin_crc 3 bytes"`... (the clock is not logged).
    pub fn pc_calls(&self) -> Vec<String> {
        self.state.pc_calls.lock().unwrap().clone()
    }

    pub fn flushes(&self) -> (u64, u64) {
        (self.state.flushes.load(Ordering::Relaxed), self.state.forced_flushes.load(Ordering::Relaxed))
    }

    /// Rewrites the string pointers of `records` (fake addresses from the synthetic generator) to real C strings
    /// with the given texts, as CUPTI's records point at strings CUPTI owns.
    pub fn realize_strings(&self, records: &mut [u8], texts: &HashMap<u64, String>) {
        let mut strings = self.state.strings.lock().unwrap();
        let mut patches = Vec::new();
        self.plan.visit(records, |at, ptr| {
            if ptr != 0 {
                let c = strings
                    .entry(ptr)
                    .or_insert_with(|| CString::new(texts.get(&ptr).cloned().unwrap_or_default()).unwrap());
                patches.push((at, c.as_ptr() as u64));
            }
        });
        for (at, real) in patches {
            records[at..at + 8].copy_from_slice(&real.to_le_bytes());
        }
    }

    fn request(&self) -> Option<(*mut u8, usize)> {
        let (req, _) = (*self.state.buffer_callbacks.lock().unwrap())?;
        let mut p: *mut u8 = std::ptr::null_mut();
        let mut size = 0usize;
        let mut max = 0usize;
        // SAFETY: the recorder's request callback writes the three out-pointers.
        unsafe { req(&mut p, &mut size, &mut max) };
        (!p.is_null()).then_some((p, size))
    }

    fn fill(&self, records: &[u8], count: u64) -> Option<(usize, usize)> {
        match self.request() {
            Some((p, size)) => {
                assert!(records.len() <= size, "test records ({} B) exceed the buffer ({size} B)", records.len());
                // SAFETY: the recorder handed us `size` writable bytes.
                unsafe { std::ptr::copy_nonoverlapping(records.as_ptr(), p, records.len()) };
                Some((p as usize, records.len()))
            }
            None => {
                self.state.dropped_unread.fetch_add(count, Ordering::Relaxed);
                self.state.dropped_total.fetch_add(count, Ordering::Relaxed);
                None
            }
        }
    }

    fn complete(&self, p: usize, valid: usize) {
        let Some((_, done)) = *self.state.buffer_callbacks.lock().unwrap() else { return };
        // SAFETY: returning a buffer the recorder handed out, with the bytes written into it.
        unsafe { done(std::ptr::null_mut(), 0, p as *mut u8, valid, valid) };
    }

    /// Asks for a buffer, fills it with `records` (holding `count` records) and completes it at once.
    pub fn deliver(&self, records: &[u8], count: u64) -> Delivery {
        match self.fill(records, count) {
            Some((p, n)) => {
                self.complete(p, n);
                Delivery::Written
            }
            None => Delivery::Dropped,
        }
    }

    /// Asks for a buffer and fills it with `records` of work still running: until
    /// [`FakeHandle::finish_running`] they lack their timestamps, a default flush leaves the buffer with the fake,
    /// and a forced flush hands it over as it is (as CUPTI does: those records are then lost).
    pub fn hold_running(&self, records: &[u8], count: u64) -> Delivery {
        let as_now = self.without_timestamps(records);
        let complete = records;
        match self.fill(&as_now, count) {
            Some((p, n)) => {
                self.state.running.lock().unwrap().push((p, n, complete.to_vec()));
                Delivery::Written
            }
            None => Delivery::Dropped,
        }
    }

    /// `records` with every start and end timestamp zero.
    fn without_timestamps(&self, records: &[u8]) -> Vec<u8> {
        let mut out = records.to_vec();
        let mut off = 0;
        while off + 4 <= out.len() {
            let kind = u32::from_le_bytes(out[off..off + 4].try_into().unwrap());
            let Some(layout) = self.layouts.get(kind) else { break };
            for field in ["start", "end"] {
                if let Some(at) = layout.offset(field) {
                    out[off + at..off + at + 8].fill(0);
                }
            }
            off += layout.size as usize;
        }
        out
    }

    /// The running work ends: its records are complete, and the next flush delivers them.
    pub fn finish_running(&self) {
        let running: Vec<_> = std::mem::take(&mut *self.state.running.lock().unwrap());
        for (p, n, complete) in running {
            // SAFETY: the recorder handed us this buffer with at least `n` bytes; we still own it.
            unsafe { std::ptr::copy_nonoverlapping(complete.as_ptr(), p as *mut u8, n) };
            self.state.held.lock().unwrap().push((p, n));
        }
    }

    /// Buffers of running work the fake still holds.
    pub fn running(&self) -> usize {
        self.state.running.lock().unwrap().len()
    }

    /// Asks for a buffer and fills it, but keeps it until the next flush (records not yet complete).
    pub fn hold(&self, records: &[u8], count: u64) -> Delivery {
        match self.fill(records, count) {
            Some(b) => {
                self.state.held.lock().unwrap().push(b);
                Delivery::Written
            }
            None => Delivery::Dropped,
        }
    }
}

impl Cupti for FakeCupti {
    fn api_version(&self) -> Result<u32, CuptiError> {
        Ok(self.api)
    }

    fn subscribe(&self, callback: Callback, user: usize) -> Result<usize, CuptiError> {
        let mut subscriber = self.state.subscriber.lock().unwrap();
        // As CUPTI: one subscriber per process.
        if self.state.other_client.load(Ordering::Relaxed) || subscriber.is_some() {
            return Err(CuptiError {
                call: "cuptiSubscribe",
                code: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
                name: "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED".into(),
            });
        }
        *subscriber = Some((callback, user));
        Ok(1)
    }

    fn enable_callback(&self, _handle: usize, domain: u32, cbid: u32, enable: bool) -> Result<(), CuptiError> {
        if self.state.refuse_callbacks.load(Ordering::Relaxed) {
            return Err(CuptiError { call: "cuptiEnableCallback", code: 15, name: "CUPTI_ERROR_NOT_SUPPORTED".into() });
        }
        let mut callbacks = self.state.callbacks.lock().unwrap();
        callbacks.retain(|&c| c != (domain, cbid));
        if enable {
            callbacks.push((domain, cbid));
        }
        Ok(())
    }

    fn unsubscribe(&self, _handle: usize) -> Result<(), CuptiError> {
        *self.state.subscriber.lock().unwrap() = None;
        self.state.callbacks.lock().unwrap().clear();
        Ok(())
    }

    fn register_callbacks(&self, request: RequestFn, complete: CompleteFn) -> Result<(), CuptiError> {
        *self.state.buffer_callbacks.lock().unwrap() = Some((request, complete));
        Ok(())
    }

    fn enable(&self, kind: u32) -> Result<(), CuptiError> {
        // As CUPTI: no kernel records on a context with PC sampling enabled (the session enables the kinds first).
        let kernel = kind == cutr_schema::kinds::KERNEL || kind == cutr_schema::kinds::CONCURRENT_KERNEL;
        // As CUPTI: unified memory without a configuration that took effect is not ready.
        let um = kind == cutr_schema::kinds::UNIFIED_MEMORY_COUNTER;
        if um && !self.state.um_effective.load(Ordering::Relaxed) {
            return Err(CuptiError { call: "cuptiActivityEnable", code: 13, name: "CUPTI_ERROR_NOT_READY".into() });
        }
        if self.state.refuse_kinds.lock().unwrap().contains(&kind)
            || (kernel && !self.state.pc_sampling.lock().unwrap().is_empty())
        {
            return Err(CuptiError {
                call: "cuptiActivityEnable",
                code: 14,
                name: "CUPTI_ERROR_NOT_COMPATIBLE".into(),
            });
        }
        self.state.enabled.lock().unwrap().push(kind);
        Ok(())
    }

    fn disable(&self, kind: u32) -> Result<(), CuptiError> {
        self.state.enabled.lock().unwrap().retain(|&k| k != kind);
        Ok(())
    }

    fn flush_all(&self, forced: bool) -> Result<(), CuptiError> {
        self.state.flushes.fetch_add(1, Ordering::Relaxed);
        if forced {
            self.state.forced_flushes.fetch_add(1, Ordering::Relaxed);
        }
        let mut held: Vec<(usize, usize)> = std::mem::take(&mut *self.state.held.lock().unwrap());
        if forced {
            // CUPTI's forced flush hands over buffers with incomplete records too (their timestamps zero).
            held.extend(self.state.running.lock().unwrap().drain(..).map(|(p, n, _)| (p, n)));
        }
        let h = FakeHandle {
            state: self.state.clone(),
            plan: Arc::new(StringPointerPlan::default()),
            layouts: Arc::new(LayoutTable::new(self.api, Vec::new()).expect("an empty table")),
        };
        for (p, n) in held {
            h.complete(p, n);
        }
        Ok(())
    }

    fn dropped_records(&self) -> Result<u64, CuptiError> {
        Ok(self.state.dropped_unread.swap(0, Ordering::Relaxed))
    }

    fn timestamp(&self) -> Result<u64, CuptiError> {
        Ok(self.state.clock.fetch_add(1_000, Ordering::Relaxed))
    }

    fn set_attribute(&self, _attr: u32, _value: usize) -> Result<(), CuptiError> {
        Ok(())
    }

    fn set_thread_id_type_system(&self) -> Result<(), CuptiError> {
        Ok(())
    }

    fn callback_name(&self, domain: u32, cbid: u32) -> Option<String> {
        cutr_schema::callbacks::raw_name(domain, cbid).map(str::to_string)
    }

    fn enable_api_record(&self, domain: u32, cbid: u32, enable: bool) -> Result<(), CuptiError> {
        // As with the real CUPTI, a per-function filter only takes effect on an enabled API kind.
        let kind = if domain == 1 { cutr_schema::kinds::DRIVER } else { cutr_schema::kinds::RUNTIME };
        if !self.state.enabled.lock().unwrap().contains(&kind) {
            return Err(CuptiError {
                call: "cuptiActivityEnableRuntimeApi",
                code: 7,
                name: "CUPTI_ERROR_INVALID_OPERATION".into(),
            });
        }
        if !enable {
            self.state.disabled_api.lock().unwrap().push((domain, cbid));
        }
        Ok(())
    }

    fn configure_um_counters(&self, counter_kinds: &[u32]) -> Result<(), CuptiError> {
        let refused = self.state.refuse_um.lock().unwrap();
        if counter_kinds.iter().any(|k| refused.contains(k)) {
            return Err(CuptiError {
                call: "cuptiActivityConfigureUnifiedMemoryCounter",
                code: 29,
                name: "CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE".into(),
            });
        }
        self.state.um_configured.lock().unwrap().push(counter_kinds.to_vec());
        if !self.state.um_initializing.load(Ordering::Relaxed) {
            self.state.um_effective.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The fake's handles are their ids.
    fn graph_ids(&self, handle: crate::ffi::cupti::GraphHandle) -> u64 {
        use crate::ffi::cupti::GraphHandle::*;
        match handle {
            Graph(h) | Node(h) | Exec(h) => h as u64,
        }
    }

    fn origin(&self) -> String {
        format!("fake CUPTI (API {})", self.api)
    }

    fn pc_sampling(&self) -> Result<Box<dyn PcCupti>, String> {
        Ok(Box::new(pc::FakePc { state: self.state.clone() }))
    }
}

/// The layout table a fake of `api` writes records with.
pub fn layouts(api: u32) -> Option<LayoutTable> {
    cutr_schema::layouts::builtin(api)
}

/// The application's side of the callback API: what a CUDA program does that CUPTI reports to its subscriber, as
/// CUPTI lays it out (so the recorder's decoding is what runs).
impl FakeHandle {
    /// Whether the recorder holds the callback subscriber, and the callbacks it enabled.
    pub fn subscribed(&self) -> (bool, Vec<(u32, u32)>) {
        (self.state.subscriber.lock().unwrap().is_some(), self.state.callbacks.lock().unwrap().clone())
    }

    /// Calls the subscriber as CUPTI would, if it enabled `(domain, cbid)`.
    fn fire(&self, domain: u32, cbid: u32, data: *const c_void) {
        let Some((callback, user)) = *self.state.subscriber.lock().unwrap() else { return };
        if !self.state.callbacks.lock().unwrap().contains(&(domain, cbid)) {
            return;
        }
        // SAFETY: the recorder's callback with the user data it subscribed with; `data` is laid out as CUPTI's for
        // this domain and lives until the call returns.
        unsafe { callback(user as *mut c_void, domain, cbid, data) };
    }

    /// A runtime (2) or driver (1) API call: entered, then returned.
    pub fn api_call(&self, domain: u32, cbid: u32) {
        self.api_site(domain, cbid, false);
        self.api_site(domain, cbid, true);
    }

    /// A runtime (2) or driver (1) API call entered (`returned` false) or returning, for what happens inside it.
    pub fn api_site(&self, domain: u32, cbid: u32, returned: bool) {
        // CUpti_CallbackData: the site first; the rest is not read by the recorder.
        let data: [u64; 10] = [u64::from(returned), 0, 0, 0, 0, 0, 0, 0, 0, 0];
        self.fire(domain, cbid, data.as_ptr().cast());
    }

    /// `cudaProfilerStart()`.
    pub fn profiler_start(&self) {
        self.api_call(sub::DOMAIN_RUNTIME, sub::CBID_CUDA_PROFILER_START);
    }

    /// `cudaProfilerStop()`.
    pub fn profiler_stop(&self) {
        self.api_call(sub::DOMAIN_RUNTIME, sub::CBID_CUDA_PROFILER_STOP);
    }

    fn nvtx(&self, cbid: u32, params: *const c_void, ret: *const c_void) {
        let data = [c"nvtx".as_ptr().cast::<c_void>(), params, ret];
        self.fire(sub::DOMAIN_NVTX, cbid, data.as_ptr().cast());
    }

    /// `nvtxRangePushA(message)`.
    pub fn nvtx_push(&self, message: &str) {
        let m = CString::new(message).unwrap();
        let params: [*const c_char; 1] = [m.as_ptr()];
        let ret = 0i32;
        self.nvtx(sub::CBID_NVTX_RANGE_PUSH_A, params.as_ptr().cast(), (&ret as *const i32).cast());
    }

    /// `nvtxRangePop()`.
    pub fn nvtx_pop(&self) {
        let ret = 0i32;
        self.nvtx(sub::CBID_NVTX_RANGE_POP, std::ptr::null(), (&ret as *const i32).cast());
    }

    /// `nvtxDomainCreateA(name)`; the handle.
    pub fn nvtx_domain_create(&self, name: &str) -> usize {
        let n = CString::new(name).unwrap();
        let params: [*const c_char; 1] = [n.as_ptr()];
        let handle: usize = 0x5000 + name.len() * 16 + name.bytes().map(usize::from).sum::<usize>();
        self.nvtx(sub::CBID_NVTX_DOMAIN_CREATE_A, params.as_ptr().cast(), (&handle as *const usize).cast());
        handle
    }

    /// `nvtxDomainRangePushEx(domain, attributes with an ASCII message)`.
    pub fn nvtx_domain_push(&self, handle: usize, message: &str) {
        let m = CString::new(message).unwrap();
        // nvtxEventAttributes_t v3: messageType (i32) at 32, message at 40; 48 bytes.
        let mut attr = [0u64; 6];
        attr[4] = 1; // NVTX_MESSAGE_TYPE_ASCII in the low 4 bytes (little-endian)
        attr[5] = m.as_ptr() as u64;
        let params: [usize; 2] = [handle, attr.as_ptr() as usize];
        let ret = 0i32;
        self.nvtx(sub::CBID_NVTX_DOMAIN_RANGE_PUSH_EX, params.as_ptr().cast(), (&ret as *const i32).cast());
    }

    /// `nvtxDomainRangePop(domain)`.
    pub fn nvtx_domain_pop(&self, handle: usize) {
        let params: [usize; 1] = [handle];
        let ret = 0i32;
        self.nvtx(sub::CBID_NVTX_DOMAIN_RANGE_POP, params.as_ptr().cast(), (&ret as *const i32).cast());
    }

    fn resource(&self, cbid: u32, context: usize, descriptor: *const c_void) {
        // CUpti_ResourceData: context, stream (union), descriptor.
        let data: [usize; 3] = [context, 0, descriptor as usize];
        self.fire(sub::DOMAIN_RESOURCE, cbid, data.as_ptr().cast());
    }

    /// A CUDA context is made.
    pub fn context_created(&self, context: usize) {
        self.state.um_initializing.store(false, Ordering::Relaxed);
        self.resource(sub::CBID_CONTEXT_CREATED, context, std::ptr::null());
    }

    /// A CUDA context is about to be destroyed.
    pub fn context_destroy_starting(&self, context: usize) {
        self.resource(sub::CBID_CONTEXT_DESTROY_STARTING, context, std::ptr::null());
    }

    /// A graph resource callback (`cbid`: a `CBID_GRAPH*` id), each handle the id it stands for.
    pub fn graph_callback(&self, cbid: u32, d: sub::GraphData) {
        // CUpti_GraphData: graph, originalGraph, node, originalNode, nodeType (padded), dependency, graphExec.
        let data: [usize; 7] = [
            d.graph as usize,
            d.original_graph as usize,
            d.node as usize,
            d.original_node as usize,
            d.node_type as usize,
            d.dependency as usize,
            d.exec as usize,
        ];
        self.resource(cbid, 0x1000, data.as_ptr().cast());
    }

    /// A module is loaded into `context`.
    pub fn module_loaded(&self, context: usize, module_id: u32, cubin: &[u8]) {
        // CUpti_ModuleResourceData: moduleId (u32, padded), cubinSize, pCubin.
        let module: [usize; 3] = [module_id as usize, cubin.len(), cubin.as_ptr() as usize];
        self.resource(sub::CBID_MODULE_LOADED, context, module.as_ptr().cast());
    }
}
