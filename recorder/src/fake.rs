//! A fake CUPTI for testing the recorder without a GPU: it asks the recorder for buffers through the registered
//! request callback, fills them with records the test supplies (real CUPTI layouts, from the synthetic
//! generator), and hands them back through the completion callback, counting the records it had to drop when a
//! buffer was refused, as CUPTI does.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cutr_format::records::StringPointerPlan;
use cutr_schema::LayoutTable;

use crate::ffi::cupti::{CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, CompleteFn, Cupti, CuptiError, RequestFn};

#[derive(Default)]
struct State {
    callbacks: Mutex<Option<(RequestFn, CompleteFn)>>,
    enabled: Mutex<Vec<u32>>,
    refuse_kinds: Mutex<Vec<u32>>,
    dropped_unread: AtomicU64,
    dropped_total: AtomicU64,
    clock: AtomicU64,
    /// Filled buffers CUPTI still holds (delivered at the next flush): (address, valid bytes).
    held: Mutex<Vec<(usize, usize)>>,
    flushes: AtomicU64,
    forced_flushes: AtomicU64,
    other_client: AtomicBool,
    disabled_api: Mutex<Vec<(u32, u32)>>,
    /// C strings standing in for CUPTI's, by the fake address the records carried.
    strings: Mutex<HashMap<u64, CString>>,
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
        (FakeCupti { api, state: state.clone() }, FakeHandle { state, plan })
    }
}

impl FakeHandle {
    /// Makes the fake behave as if another CUPTI client were attached.
    pub fn set_other_client(&self, yes: bool) {
        self.state.other_client.store(yes, Ordering::Relaxed);
    }

    /// Makes `cuptiActivityEnable` fail for `kind`.
    pub fn refuse_kind(&self, kind: u32) {
        self.state.refuse_kinds.lock().unwrap().push(kind);
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
        let (req, _) = (*self.state.callbacks.lock().unwrap())?;
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
        let Some((_, done)) = *self.state.callbacks.lock().unwrap() else { return };
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

    fn check_exclusive(&self) -> Result<(), CuptiError> {
        if self.state.other_client.load(Ordering::Relaxed) {
            return Err(CuptiError {
                call: "cuptiSubscribe",
                code: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
                name: "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED".into(),
            });
        }
        Ok(())
    }

    fn register_callbacks(&self, request: RequestFn, complete: CompleteFn) -> Result<(), CuptiError> {
        *self.state.callbacks.lock().unwrap() = Some((request, complete));
        Ok(())
    }

    fn enable(&self, kind: u32) -> Result<(), CuptiError> {
        if self.state.refuse_kinds.lock().unwrap().contains(&kind) {
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
        let held: Vec<(usize, usize)> = std::mem::take(&mut *self.state.held.lock().unwrap());
        let h = FakeHandle { state: self.state.clone(), plan: Arc::new(StringPointerPlan::default()) };
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

    fn origin(&self) -> String {
        format!("fake CUPTI (API {})", self.api)
    }
}

/// The layout table a fake of `api` writes records with.
pub fn layouts(api: u32) -> Option<LayoutTable> {
    cutr_schema::layouts::builtin(api)
}
