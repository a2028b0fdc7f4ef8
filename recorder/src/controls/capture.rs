//! Capture ranges (`--capture-range`): record only inside `cudaProfilerStart`/`cudaProfilerStop` (or the driver's
//! `cuProfilerStart`/`cuProfilerStop`), or inside NVTX ranges of one name, as Nsight Systems'
//! `--capture-range=cudaProfilerApi|nvtx` does. Outside, CUPTI's activity kinds are off. `--capture-range-end`
//! says what follows the first range: `stop` (nothing more is recorded), `repeat` (every range), `repeat:N` (the
//! first N). Each range's start and end are marked in the file (the `recording` counter track).
//!
//! The ranges are found through CUPTI callbacks (runtime, driver and NVTX domains) on the application's own
//! threads: recording is turned on when `cudaProfilerStart` returns and off when `cudaProfilerStop` is entered, so
//! the work between is exactly what is recorded. NVTX pushes and pops are matched per thread with a stack.

use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_void};
use std::path::Path;
use std::sync::Mutex;

/// What delimits a capture range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaptureRange {
    /// `cuda-profiler-api`.
    ProfilerApi,
    /// `nvtx:NAME` (the default domain) or `nvtx:NAME@DOMAIN`.
    Nvtx { name: String, domain: Option<String> },
}

/// What happens after a range ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureEnd {
    /// Record nothing more.
    Stop,
    /// Record every later range too, or the first `N` in all.
    Repeat(Option<u32>),
}

impl CaptureRange {
    pub fn parse(s: &str) -> Result<CaptureRange, String> {
        match s.trim() {
            "cuda-profiler-api" | "cudaProfilerApi" => Ok(CaptureRange::ProfilerApi),
            t => {
                let Some(spec) = t.strip_prefix("nvtx:") else {
                    return Err(format!("'{s}': use cuda-profiler-api or nvtx:NAME[@DOMAIN]"));
                };
                let (name, domain) = match spec.rsplit_once('@') {
                    Some((n, d)) => (n, Some(d.to_string())),
                    None => (spec, None),
                };
                if name.is_empty() || domain.as_deref() == Some("") {
                    return Err(format!("'{s}': the range name and domain must not be empty"));
                }
                Ok(CaptureRange::Nvtx { name: name.to_string(), domain })
            }
        }
    }

    pub fn to_arg(&self) -> String {
        match self {
            CaptureRange::ProfilerApi => "cuda-profiler-api".into(),
            CaptureRange::Nvtx { name, domain: None } => format!("nvtx:{name}"),
            CaptureRange::Nvtx { name, domain: Some(d) } => format!("nvtx:{name}@{d}"),
        }
    }
}

impl CaptureEnd {
    pub fn parse(s: &str) -> Result<CaptureEnd, String> {
        match s.trim() {
            "stop" => Ok(CaptureEnd::Stop),
            "repeat" => Ok(CaptureEnd::Repeat(None)),
            t => match t.strip_prefix("repeat:").map(str::parse::<u32>) {
                Some(Ok(n)) if n > 0 => Ok(CaptureEnd::Repeat(Some(n))),
                _ => Err(format!("'{s}': use stop, repeat or repeat:N (N > 0)")),
            },
        }
    }

    pub fn to_arg(self) -> String {
        match self {
            CaptureEnd::Stop => "stop".into(),
            CaptureEnd::Repeat(None) => "repeat".into(),
            CaptureEnd::Repeat(Some(n)) => format!("repeat:{n}"),
        }
    }
}

/// What a range boundary asks of the recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    TurnOn,
    TurnOff,
    Nothing,
}

/// The ranges seen so far and whether one is open: what each boundary means.
#[derive(Clone, Debug)]
pub struct CaptureState {
    end: CaptureEnd,
    /// Ranges begun so far.
    begun: u32,
    /// Open ranges of the name (a nested one does not end the capture).
    open: u32,
    finished: bool,
}

impl CaptureState {
    pub fn new(end: CaptureEnd) -> CaptureState {
        CaptureState { end, begun: 0, open: 0, finished: false }
    }

    /// A range begins.
    pub fn begin(&mut self) -> Action {
        if self.finished {
            return Action::Nothing;
        }
        self.open += 1;
        if self.open > 1 {
            return Action::Nothing;
        }
        self.begun += 1;
        Action::TurnOn
    }

    /// A range ends (an end without a begin is ignored).
    pub fn end(&mut self) -> Action {
        if self.finished || self.open == 0 {
            return Action::Nothing;
        }
        self.open -= 1;
        if self.open > 0 {
            return Action::Nothing;
        }
        self.finished = match self.end {
            CaptureEnd::Stop => true,
            CaptureEnd::Repeat(None) => false,
            CaptureEnd::Repeat(Some(n)) => self.begun >= n,
        };
        Action::TurnOff
    }
}

const CUPTI_SUCCESS: u32 = 0;
const DOMAIN_DRIVER: u32 = 1;
const DOMAIN_RUNTIME: u32 = 2;
const DOMAIN_NVTX: u32 = 5;
/// cupti_runtime_cbid.h, cupti_driver_cbid.h, cupti_nvtx_cbid.h (CUDA 13.0; stable across versions).
const CBID_CUDA_PROFILER_START: u32 = 171;
const CBID_CUDA_PROFILER_STOP: u32 = 172;
const CBID_CU_PROFILER_START: u32 = 308;
const CBID_CU_PROFILER_STOP: u32 = 309;
const CBID_NVTX_RANGE_PUSH_A: u32 = 8;
const CBID_NVTX_RANGE_POP: u32 = 11;
const CBID_NVTX_DOMAIN_CREATE_A: u32 = 41;
const CBID_NVTX_DOMAIN_RANGE_PUSH_EX: u32 = 33;
const CBID_NVTX_DOMAIN_RANGE_POP: u32 = 34;
/// `CUpti_ApiCallbackSite`: entering or leaving the API function.
const SITE_ENTER: u32 = 0;
const SITE_EXIT: u32 = 1;
/// nvtxEventAttributes_t (version 2 and 3): version u16, size u16, category u32, colorType i32, color u32,
/// payloadType i32, reserved0 i32, payload 8 bytes at 24, `messageType` i32 at 32, `message` pointer at 40;
/// NVTX_MESSAGE_TYPE_ASCII = 1.
const ATTR_MESSAGE_TYPE_OFFSET: usize = 32;
const ATTR_MESSAGE_OFFSET: usize = 40;
const MESSAGE_TYPE_ASCII: i32 = 1;

type Callback = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);
type FnSubscribe = unsafe extern "C" fn(*mut *mut c_void, Callback, *mut c_void) -> u32;
type FnEnableCallback = unsafe extern "C" fn(u32, *mut c_void, u32, u32) -> u32;

/// The running capture: the range, its state, and what turns recording on and off.
struct Capture {
    range: CaptureRange,
    state: Mutex<CaptureState>,
    /// Domain handles (as NVTX gives them) whose name is the range's domain.
    domains: Mutex<Vec<usize>>,
    turn: Box<dyn Fn(bool) + Send + Sync>,
}

thread_local! {
    /// Per thread: for each open NVTX range (default domain, or the range's domain), whether it is a capture one.
    static STACK: RefCell<Vec<bool>> = const { RefCell::new(Vec::new()) };
}

impl Capture {
    fn apply(&self, a: Action) {
        match a {
            Action::TurnOn => (self.turn)(true),
            Action::TurnOff => (self.turn)(false),
            Action::Nothing => {}
        }
    }

    fn push(&self, is_capture: bool) {
        STACK.with(|s| s.borrow_mut().push(is_capture));
        if is_capture {
            let a = self.state.lock().unwrap().begin();
            self.apply(a);
        }
    }

    fn pop(&self) {
        if STACK.with(|s| s.borrow_mut().pop()) == Some(true) {
            let a = self.state.lock().unwrap().end();
            self.apply(a);
        }
    }

    fn name_matches(&self, message: *const c_char) -> bool {
        let CaptureRange::Nvtx { name, .. } = &self.range else { return false };
        // SAFETY: NVTX messages are NUL-terminated strings valid during the callback.
        !message.is_null() && unsafe { CStr::from_ptr(message) }.to_bytes() == name.as_bytes()
    }

    /// # Safety
    /// `data` is CUPTI's callback data for `domain` and `cbid`, valid during the call.
    unsafe fn on_callback(&self, domain: u32, cbid: u32, data: *const c_void) {
        if data.is_null() {
            return;
        }
        // SAFETY: the caller's; every callback-data struct starts as read below (cupti_callbacks.h).
        unsafe {
            match domain {
                DOMAIN_RUNTIME | DOMAIN_DRIVER => {
                    // CUpti_CallbackData starts with the callback site (enter or exit).
                    let site = *(data as *const u32);
                    let start = cbid == CBID_CUDA_PROFILER_START || cbid == CBID_CU_PROFILER_START;
                    if start && site == SITE_EXIT {
                        let a = self.state.lock().unwrap().begin();
                        self.apply(a);
                    } else if !start && site == SITE_ENTER {
                        let a = self.state.lock().unwrap().end();
                        self.apply(a);
                    }
                }
                DOMAIN_NVTX => {
                    // CUpti_NvtxData: function name, then the pointer to the function's parameters.
                    let params = *((data as *const *const c_void).add(1));
                    if params.is_null() {
                        return;
                    }
                    let wants_domain = matches!(&self.range, CaptureRange::Nvtx { domain: Some(_), .. });
                    match cbid {
                        CBID_NVTX_RANGE_PUSH_A if !wants_domain => {
                            let message = *(params as *const *const c_char);
                            self.push(self.name_matches(message));
                        }
                        CBID_NVTX_RANGE_POP if !wants_domain => self.pop(),
                        CBID_NVTX_DOMAIN_CREATE_A => {
                            // nvtxDomainCreateA_params { const char* name }; the handle is the return value.
                            let CaptureRange::Nvtx { domain: Some(want), .. } = &self.range else { return };
                            let name = *(params as *const *const c_char);
                            let ret = *((data as *const *const c_void).add(2)) as *const usize;
                            if !name.is_null() && !ret.is_null() && CStr::from_ptr(name).to_bytes() == want.as_bytes() {
                                self.domains.lock().unwrap().push(*ret);
                            }
                        }
                        CBID_NVTX_DOMAIN_RANGE_PUSH_EX if wants_domain => {
                            // nvtxDomainRangePushEx_params { domain handle, { const nvtxEventAttributes_t* } }.
                            let handle = *(params as *const usize);
                            if !self.domains.lock().unwrap().contains(&handle) {
                                return;
                            }
                            let attr = *((params as *const *const u8).add(1));
                            let ascii = !attr.is_null()
                                && *(attr.add(ATTR_MESSAGE_TYPE_OFFSET) as *const i32) == MESSAGE_TYPE_ASCII;
                            let message = if ascii {
                                *(attr.add(ATTR_MESSAGE_OFFSET) as *const *const c_char)
                            } else {
                                std::ptr::null()
                            };
                            self.push(self.name_matches(message));
                        }
                        CBID_NVTX_DOMAIN_RANGE_POP if wants_domain => {
                            let handle = *(params as *const usize);
                            if self.domains.lock().unwrap().contains(&handle) {
                                self.pop();
                            }
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
    }
}

unsafe extern "C" fn callback(user: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    if user.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `user` is the leaked Capture given at subscription; CUPTI's data is valid during the call.
        unsafe { (*(user as *const Capture)).on_callback(domain, cbid, data) }
    }));
}

/// Subscribes to the callbacks that delimit `range` in the libcupti at `library`; `turn(on)` switches recording.
/// Fails (and nothing is subscribed) where CUPTI refuses, e.g. another subscriber (PC sampling) is attached.
pub(crate) fn start(
    library: &Path,
    range: CaptureRange,
    end: CaptureEnd,
    turn: Box<dyn Fn(bool) + Send + Sync>,
) -> Result<(), String> {
    // SAFETY: the library is already loaded by the session (another reference, never dropped); the symbols'
    // signatures are cupti_callbacks.h's.
    let (subscribe, enable) = unsafe {
        let lib = libloading::os::unix::Library::open(Some(library), libc::RTLD_NOW | libc::RTLD_GLOBAL)
            .map_err(|e| format!("cannot load {}: {e}", library.display()))?;
        let s: FnSubscribe = *lib.get(b"cuptiSubscribe\0").map_err(|e| e.to_string())?;
        let e: FnEnableCallback = *lib.get(b"cuptiEnableCallback\0").map_err(|e| e.to_string())?;
        std::mem::forget(lib);
        (s, e)
    };
    let nvtx = matches!(range, CaptureRange::Nvtx { .. });
    let capture: &'static Capture = Box::leak(Box::new(Capture {
        range,
        state: Mutex::new(CaptureState::new(end)),
        domains: Mutex::new(Vec::new()),
        turn,
    }));
    let mut sub: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the user data lives for the process (leaked).
    let code = unsafe { subscribe(&mut sub, callback, capture as *const Capture as *mut c_void) };
    if code != CUPTI_SUCCESS {
        return Err(format!("cuptiSubscribe failed with CUPTI error {code} (another CUPTI subscriber?)"));
    }
    let cbids: &[(u32, u32)] = if nvtx {
        &[
            (DOMAIN_NVTX, CBID_NVTX_RANGE_PUSH_A),
            (DOMAIN_NVTX, CBID_NVTX_RANGE_POP),
            (DOMAIN_NVTX, CBID_NVTX_DOMAIN_CREATE_A),
            (DOMAIN_NVTX, CBID_NVTX_DOMAIN_RANGE_PUSH_EX),
            (DOMAIN_NVTX, CBID_NVTX_DOMAIN_RANGE_POP),
        ]
    } else {
        &[
            (DOMAIN_RUNTIME, CBID_CUDA_PROFILER_START),
            (DOMAIN_RUNTIME, CBID_CUDA_PROFILER_STOP),
            (DOMAIN_DRIVER, CBID_CU_PROFILER_START),
            (DOMAIN_DRIVER, CBID_CU_PROFILER_STOP),
        ]
    };
    for &(domain, cbid) in cbids {
        // SAFETY: the subscriber was just created.
        let code = unsafe { enable(1, sub, domain, cbid) };
        if code != CUPTI_SUCCESS {
            return Err(format!("cuptiEnableCallback(domain {domain}, cbid {cbid}) failed with CUPTI error {code}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_ends_parse_and_read_back() {
        for s in ["cuda-profiler-api", "nvtx:step", "nvtx:train step@my.domain"] {
            assert_eq!(CaptureRange::parse(s).unwrap().to_arg(), s);
        }
        assert_eq!(
            CaptureRange::parse("nvtx:a@b@c").unwrap(),
            CaptureRange::Nvtx { name: "a@b".into(), domain: Some("c".into()) }
        );
        assert!(CaptureRange::parse("nvtx:").is_err() && CaptureRange::parse("nvtx:x@").is_err());
        assert!(CaptureRange::parse("profiler").is_err());
        for s in ["stop", "repeat", "repeat:3"] {
            assert_eq!(CaptureEnd::parse(s).unwrap().to_arg(), s);
        }
        assert!(CaptureEnd::parse("repeat:0").is_err() && CaptureEnd::parse("again").is_err());
    }

    /// The callback ids are those of CUDA 13.0's headers (from the PyPI wheel the test set-up installs).
    #[test]
    fn callback_ids_match_nvidias_headers() {
        let cache = std::env::var_os("CUTR_CACHE")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache"));
        let inc = cache.join("cupti/cupti-13.0/include");
        let header = |f: &str| {
            std::fs::read_to_string(inc.join(f)).unwrap_or_else(|e| panic!("{f}: {e}: run tools/fetch-cupti.sh"))
        };
        let value = |text: &str, name: &str| -> u32 {
            let line = text.lines().find(|l| l.trim_start().starts_with(&format!("{name} "))).unwrap();
            line.split('=').nth(1).unwrap().trim().trim_end_matches(',').parse().unwrap()
        };
        let (rt, drv, nvtx) =
            (header("cupti_runtime_cbid.h"), header("cupti_driver_cbid.h"), header("cupti_nvtx_cbid.h"));
        assert_eq!(value(&rt, "CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000"), CBID_CUDA_PROFILER_START);
        assert_eq!(value(&rt, "CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000"), CBID_CUDA_PROFILER_STOP);
        assert_eq!(value(&drv, "CUPTI_DRIVER_TRACE_CBID_cuProfilerStart"), CBID_CU_PROFILER_START);
        assert_eq!(value(&drv, "CUPTI_DRIVER_TRACE_CBID_cuProfilerStop"), CBID_CU_PROFILER_STOP);
        assert_eq!(value(&nvtx, "CUPTI_CBID_NVTX_nvtxRangePushA"), CBID_NVTX_RANGE_PUSH_A);
        assert_eq!(value(&nvtx, "CUPTI_CBID_NVTX_nvtxRangePop"), CBID_NVTX_RANGE_POP);
        assert_eq!(value(&nvtx, "CUPTI_CBID_NVTX_nvtxDomainCreateA"), CBID_NVTX_DOMAIN_CREATE_A);
        assert_eq!(value(&nvtx, "CUPTI_CBID_NVTX_nvtxDomainRangePushEx"), CBID_NVTX_DOMAIN_RANGE_PUSH_EX);
        assert_eq!(value(&nvtx, "CUPTI_CBID_NVTX_nvtxDomainRangePop"), CBID_NVTX_DOMAIN_RANGE_POP);
    }

    #[test]
    fn stop_records_the_first_range_only() {
        let mut s = CaptureState::new(CaptureEnd::Stop);
        assert_eq!([s.end(), s.begin(), s.begin(), s.end(), s.end()], {
            use Action::*;
            [Nothing, TurnOn, Nothing, Nothing, TurnOff]
        });
        assert_eq!((s.begin(), s.end()), (Action::Nothing, Action::Nothing));
    }

    #[test]
    fn repeat_n_records_the_first_n_ranges() {
        let mut s = CaptureState::new(CaptureEnd::Repeat(Some(2)));
        let mut on = 0;
        for _ in 0..5 {
            if s.begin() == Action::TurnOn {
                on += 1;
            }
            s.end();
        }
        assert_eq!(on, 2);
        let mut all = CaptureState::new(CaptureEnd::Repeat(None));
        assert!((0..10).all(|_| all.begin() == Action::TurnOn && all.end() == Action::TurnOff));
    }
}
