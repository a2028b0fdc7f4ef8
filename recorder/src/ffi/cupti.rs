//! The CUPTI functions the recorder calls, behind a trait so that tests can drive the recorder with a fake CUPTI.
//!
//! The real implementation resolves the functions from one chosen libcupti file. cudarc's own loader is not used
//! for them: it cannot be pointed at a path, and it tries `libcupti.so` before `libcupti.so.13`, which in a PyTorch
//! process can load a second copy of CUPTI next to the one PyTorch already mapped. cudarc still supplies the
//! CUPTI types and constants.

use std::ffi::{CStr, c_char, c_void};
use std::path::{Path, PathBuf};

use cudarc::cupti::sys as cs;
use thiserror::Error;

use super::pc::PcCupti;

/// CUPTI's buffer-request callback.
pub type RequestFn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
/// CUPTI's buffer-completed callback: (context, stream id, buffer, size, valid size).
pub type CompleteFn = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);

/// CUPTI's callback-API callback: (user data, domain, callback id, callback data), the domain taken as the integer
/// it is (a Rust enum must not receive an unknown value).
pub type Callback = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);

/// A CUPTI call that failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{call} failed: {name} ({code})")]
pub struct CuptiError {
    pub call: &'static str,
    pub code: u32,
    pub name: String,
}

pub const CUPTI_SUCCESS: u32 = 0;
pub const CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: u32 =
    cs::CUptiResult::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED as u32;
pub const CUPTI_ERROR_MAX_LIMIT_REACHED: u32 = cs::CUptiResult::CUPTI_ERROR_MAX_LIMIT_REACHED as u32;
pub const CUPTI_ERROR_NOT_READY: u32 = cs::CUptiResult::CUPTI_ERROR_NOT_READY as u32;

pub const ATTR_DEVICE_BUFFER_SIZE: u32 = cs::CUpti_ActivityAttribute::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE as u32;
pub const ATTR_DEVICE_BUFFER_POOL_LIMIT: u32 =
    cs::CUpti_ActivityAttribute::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT as u32;

/// The CUPTI operations the recorder needs.
pub trait Cupti: Send + Sync {
    /// `cuptiGetVersion`.
    fn api_version(&self) -> Result<u32, CuptiError>;
    /// `cuptiSubscribe`: fails with `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED` when another CUPTI client is
    /// attached. Only [`super::subscriber::Subscriber`] calls it. Returns the subscriber handle.
    fn subscribe(&self, callback: Callback, user: usize) -> Result<usize, CuptiError>;
    /// `cuptiEnableCallback` for one (domain, callback id) of subscriber `handle`.
    fn enable_callback(&self, handle: usize, domain: u32, cbid: u32, enable: bool) -> Result<(), CuptiError>;
    /// `cuptiUnsubscribe`.
    fn unsubscribe(&self, handle: usize) -> Result<(), CuptiError>;
    fn register_callbacks(&self, request: RequestFn, complete: CompleteFn) -> Result<(), CuptiError>;
    fn enable(&self, kind: u32) -> Result<(), CuptiError>;
    fn disable(&self, kind: u32) -> Result<(), CuptiError>;
    /// `cuptiActivityFlushAll`; `forced` also delivers buffers with incomplete records.
    fn flush_all(&self, forced: bool) -> Result<(), CuptiError>;
    /// Records dropped since the last call (CUPTI resets the counter when read).
    fn dropped_records(&self) -> Result<u64, CuptiError>;
    /// `cuptiGetTimestamp`: the clock of record timestamps.
    fn timestamp(&self) -> Result<u64, CuptiError>;
    fn set_attribute(&self, attr: u32, value: usize) -> Result<(), CuptiError>;
    /// Thread ids in records: `gettid()` values (true) instead of `pthread_self()` (CUPTI's default).
    fn set_thread_id_type_system(&self) -> Result<(), CuptiError>;
    fn callback_name(&self, domain: u32, cbid: u32) -> Option<String>;
    /// Turns activity records of one runtime (domain 2) or driver (domain 1) API function on or off.
    fn enable_api_record(&self, domain: u32, cbid: u32, enable: bool) -> Result<(), CuptiError>;
    /// `cuptiActivityConfigureUnifiedMemoryCounter`: turns on the given unified memory counter kinds
    /// (`CUpti_ActivityUnifiedMemoryCounterKind`) for every device of the process, before the
    /// UNIFIED_MEMORY_COUNTER activity kind is enabled.
    fn configure_um_counters(&self, counter_kinds: &[u32]) -> Result<(), CuptiError>;
    /// CUPTI's id of a graph, graph node or executable graph handle (`cuptiGetGraphId`, `cuptiGetGraphNodeId`,
    /// `cuptiGetGraphExecId`): the ids kernel records carry. 0 for a null handle or where CUPTI cannot say.
    fn graph_ids(&self, handle: GraphHandle) -> u64 {
        let _ = handle;
        0
    }
    /// Where this CUPTI comes from, for messages and metadata.
    fn origin(&self) -> String;
    /// The library file, for the parts of the recorder that resolve more of its functions (PM sampling).
    fn library_path(&self) -> Option<PathBuf> {
        None
    }
    /// The PC Sampling API (CUPTI 12.4+) of this CUPTI; none unless the implementation has one.
    fn pc_sampling(&self) -> Result<Box<dyn PcCupti>, String> {
        Err("PC sampling needs a real libcupti".into())
    }
}

/// A graph, graph node or executable graph as a callback names it (an address; never dereferenced above `ffi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphHandle {
    Graph(usize),
    Node(usize),
    Exec(usize),
}

type FnU32 = unsafe extern "C" fn(*mut u32) -> u32;
type FnGraphId = unsafe extern "C" fn(*mut c_void, *mut u32) -> u32;
type FnNodeId = unsafe extern "C" fn(*mut c_void, *mut u64) -> u32;
type FnRegister = unsafe extern "C" fn(Option<RequestFn>, Option<CompleteFn>) -> u32;
type FnKind = unsafe extern "C" fn(u32) -> u32;
type FnDropped = unsafe extern "C" fn(*mut c_void, u32, *mut usize) -> u32;
type FnTimestamp = unsafe extern "C" fn(*mut u64) -> u32;
type FnSetAttr = unsafe extern "C" fn(u32, *mut usize, *mut c_void) -> u32;
type FnCbName = unsafe extern "C" fn(u32, u32, *mut *const c_char) -> u32;
type FnEnableApi = unsafe extern "C" fn(u32, u8) -> u32;
/// `CUpti_ActivityUnifiedMemoryCounterConfig`, with its enums as the 32-bit integers they are in C.
#[repr(C)]
#[derive(Clone, Copy)]
struct UmCounterConfig {
    /// `CUpti_ActivityUnifiedMemoryCounterScope` (deprecated since CUDA 7.0: the counters cover every device).
    scope: u32,
    kind: u32,
    device_id: u32,
    enable: u32,
}
/// `CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_ALL_DEVICES`.
const UM_SCOPE_ALL_DEVICES: u32 = 2;
type FnConfigureUm = unsafe extern "C" fn(*mut UmCounterConfig, u32) -> u32;
/// `cuptiGetResultString`.
pub(crate) type FnResultString = unsafe extern "C" fn(u32, *mut *const c_char) -> u32;

/// CUPTI's name for a result code (`CUPTI_ERROR_OUT_OF_MEMORY`), or the number when it has none.
pub(crate) fn result_name(result_string: FnResultString, code: u32) -> String {
    let mut s: *const c_char = std::ptr::null();
    // SAFETY: cuptiGetResultString writes a pointer to a static string.
    unsafe {
        if result_string(code, &mut s) == CUPTI_SUCCESS && !s.is_null() {
            CStr::from_ptr(s).to_string_lossy().into_owned()
        } else {
            format!("CUPTI error {code}")
        }
    }
}
type FnSubscribe = unsafe extern "C" fn(*mut *mut c_void, Callback, *mut c_void) -> u32;
type FnEnableCallback = unsafe extern "C" fn(u32, *mut c_void, u32, u32) -> u32;
type FnUnsubscribe = unsafe extern "C" fn(*mut c_void) -> u32;

/// CUPTI functions resolved from one libcupti file.
pub struct LibCupti {
    path: PathBuf,
    get_version: FnU32,
    register: FnRegister,
    enable: FnKind,
    disable: FnKind,
    flush_all: FnKind,
    dropped: FnDropped,
    timestamp: FnTimestamp,
    set_attr: FnSetAttr,
    set_thread_id_type: FnKind,
    cb_name: FnCbName,
    enable_runtime: FnEnableApi,
    enable_driver: FnEnableApi,
    result_string: FnResultString,
    subscribe: FnSubscribe,
    enable_callback: FnEnableCallback,
    unsubscribe: FnUnsubscribe,
    configure_um: FnConfigureUm,
    /// Optional: a libcupti without them (older CUDA) records the graph structure with no ids, which joins nothing.
    graph_id: Option<FnGraphId>,
    node_id: Option<FnNodeId>,
    exec_id: Option<FnGraphId>,
}

/// The dynamic loader's own words (libloading's message is only "dlopen failed"; the cause is its source).
fn loader_detail(e: &libloading::Error) -> String {
    std::error::Error::source(e).map_or_else(|| e.to_string(), |s| s.to_string())
}

/// The one loader of libcupti: each file is opened once per process and kept loaded (CUPTI registers thread-exit
/// destructors), and every room of `ffi` (activity and callbacks here, PC sampling, PM sampling) resolves its
/// functions from it.
pub(crate) struct Library {
    lib: libloading::os::unix::Library,
    path: PathBuf,
}

/// The libraries opened so far (one, in practice).
static OPENED: std::sync::Mutex<Vec<&'static Library>> = std::sync::Mutex::new(Vec::new());

impl Library {
    /// The libcupti at `path`, opened on first use.
    pub(crate) fn open(path: &Path) -> Result<&'static Library, String> {
        let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = opened.iter().find(|l| l.path == path) {
            return Ok(l);
        }
        // SAFETY: loading libcupti runs only its own initializers.
        let lib = unsafe { libloading::os::unix::Library::open(Some(path), libc::RTLD_NOW | libc::RTLD_GLOBAL) }
            .map_err(|e| format!("cannot load {}: {}", path.display(), loader_detail(&e)))?;
        let l: &'static Library = Box::leak(Box::new(Library { lib, path: path.to_path_buf() }));
        opened.push(l);
        Ok(l)
    }

    /// The function `name` (NUL-terminated); `lacks` says what its absence means.
    ///
    /// # Safety
    /// `T` must be the function's C signature as NVIDIA's header declares it.
    pub(crate) unsafe fn function<T: Copy>(&self, name: &str, lacks: &str) -> Result<T, String> {
        // SAFETY: the caller's: `T` is the symbol's type.
        unsafe { self.lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|_| format!("{} lacks {}{lacks}", self.path.display(), name.trim_end_matches('\0')))
    }
}

/// CUPTI's NVTX injection entry point `symbol` (NUL-terminated: `InitializeInjectionNvtx2`, ...), to which the
/// recorder forwards NVTX's own call.
pub type NvtxInit = unsafe extern "C" fn(*mut c_void) -> std::ffi::c_int;

/// The NVTX injection entry point `symbol` of the libcupti at `path`.
pub fn nvtx_injection(path: &Path, symbol: &[u8]) -> Result<NvtxInit, String> {
    let name = std::str::from_utf8(symbol).map_err(|e| e.to_string())?;
    // SAFETY: CUPTI's NVTX injection entry points all take one pointer and return an int (nvtxInjection docs).
    unsafe { Library::open(path)?.function::<NvtxInit>(name, "") }
}

impl LibCupti {
    /// Opens `path` (once per process) and resolves every function the recorder's activity recording and
    /// callback subscriber use.
    pub fn load(path: &Path) -> Result<LibCupti, String> {
        let lib = Library::open(path)?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol's C signature is the one declared by the field's type (cupti_activity.h,
                // cupti_callbacks.h).
                unsafe { lib.function(concat!($name, "\0"), ": it is not libcupti")? }
            };
        }
        let c = LibCupti {
            path: path.to_path_buf(),
            get_version: sym!("cuptiGetVersion"),
            register: sym!("cuptiActivityRegisterCallbacks"),
            enable: sym!("cuptiActivityEnable"),
            disable: sym!("cuptiActivityDisable"),
            flush_all: sym!("cuptiActivityFlushAll"),
            dropped: sym!("cuptiActivityGetNumDroppedRecords"),
            timestamp: sym!("cuptiGetTimestamp"),
            set_attr: sym!("cuptiActivitySetAttribute"),
            set_thread_id_type: sym!("cuptiSetThreadIdType"),
            cb_name: sym!("cuptiGetCallbackName"),
            enable_runtime: sym!("cuptiActivityEnableRuntimeApi"),
            enable_driver: sym!("cuptiActivityEnableDriverApi"),
            result_string: sym!("cuptiGetResultString"),
            subscribe: sym!("cuptiSubscribe"),
            enable_callback: sym!("cuptiEnableCallback"),
            unsubscribe: sym!("cuptiUnsubscribe"),
            configure_um: sym!("cuptiActivityConfigureUnifiedMemoryCounter"),
            // SAFETY: the C signatures of cupti_activity.h (a handle, an out-pointer to the id).
            graph_id: unsafe { lib.function("cuptiGetGraphId\0", "") }.ok(),
            // SAFETY: as above.
            node_id: unsafe { lib.function("cuptiGetGraphNodeId\0", "") }.ok(),
            // SAFETY: as above.
            exec_id: unsafe { lib.function("cuptiGetGraphExecId\0", "") }.ok(),
        };
        Ok(c)
    }

    fn check(&self, call: &'static str, code: u32) -> Result<(), CuptiError> {
        if code == CUPTI_SUCCESS {
            return Ok(());
        }
        Err(CuptiError { call, code, name: result_name(self.result_string, code) })
    }
}

impl Cupti for LibCupti {
    fn api_version(&self) -> Result<u32, CuptiError> {
        let mut v = 0u32;
        // SAFETY: valid out-pointer.
        self.check("cuptiGetVersion", unsafe { (self.get_version)(&mut v) })?;
        Ok(v)
    }

    fn subscribe(&self, callback: Callback, user: usize) -> Result<usize, CuptiError> {
        let mut sub: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the callback is an extern "C" fn that never unwinds; `user` outlives the
        // subscription (the subscriber is leaked).
        self.check("cuptiSubscribe", unsafe { (self.subscribe)(&mut sub, callback, user as *mut c_void) })?;
        Ok(sub as usize)
    }

    fn enable_callback(&self, handle: usize, domain: u32, cbid: u32, enable: bool) -> Result<(), CuptiError> {
        // SAFETY: `handle` came from cuptiSubscribe; plain value arguments.
        self.check("cuptiEnableCallback", unsafe {
            (self.enable_callback)(enable as u32, handle as *mut c_void, domain, cbid)
        })
    }

    fn unsubscribe(&self, handle: usize) -> Result<(), CuptiError> {
        // SAFETY: `handle` came from cuptiSubscribe and is unsubscribed once (the subscriber takes it).
        self.check("cuptiUnsubscribe", unsafe { (self.unsubscribe)(handle as *mut c_void) })
    }

    fn register_callbacks(&self, request: RequestFn, complete: CompleteFn) -> Result<(), CuptiError> {
        // SAFETY: both callbacks are `extern "C"` functions that never unwind.
        self.check("cuptiActivityRegisterCallbacks", unsafe { (self.register)(Some(request), Some(complete)) })
    }

    fn enable(&self, kind: u32) -> Result<(), CuptiError> {
        // SAFETY: plain value argument.
        self.check("cuptiActivityEnable", unsafe { (self.enable)(kind) })
    }

    fn disable(&self, kind: u32) -> Result<(), CuptiError> {
        // SAFETY: plain value argument.
        self.check("cuptiActivityDisable", unsafe { (self.disable)(kind) })
    }

    fn flush_all(&self, forced: bool) -> Result<(), CuptiError> {
        // SAFETY: plain value argument (CUPTI_ACTIVITY_FLAG_FLUSH_FORCED = 1).
        self.check("cuptiActivityFlushAll", unsafe { (self.flush_all)(forced as u32) })
    }

    fn dropped_records(&self) -> Result<u64, CuptiError> {
        let mut n = 0usize;
        // SAFETY: a NULL context asks for the global queue; valid out-pointer.
        self.check("cuptiActivityGetNumDroppedRecords", unsafe { (self.dropped)(std::ptr::null_mut(), 0, &mut n) })?;
        Ok(n as u64)
    }

    fn timestamp(&self) -> Result<u64, CuptiError> {
        let mut t = 0u64;
        // SAFETY: valid out-pointer.
        self.check("cuptiGetTimestamp", unsafe { (self.timestamp)(&mut t) })?;
        Ok(t)
    }

    fn set_attribute(&self, attr: u32, value: usize) -> Result<(), CuptiError> {
        let mut v = value;
        let mut size = std::mem::size_of::<usize>();
        // SAFETY: every activity attribute takes a size_t value.
        self.check("cuptiActivitySetAttribute", unsafe {
            (self.set_attr)(attr, &mut size, &mut v as *mut usize as *mut c_void)
        })
    }

    fn set_thread_id_type_system(&self) -> Result<(), CuptiError> {
        // SAFETY: CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM = 1.
        self.check("cuptiSetThreadIdType", unsafe { (self.set_thread_id_type)(1) })
    }

    fn callback_name(&self, domain: u32, cbid: u32) -> Option<String> {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: valid out-pointer; CUPTI returns a static string.
        unsafe {
            if (self.cb_name)(domain, cbid, &mut s) == CUPTI_SUCCESS && !s.is_null() {
                Some(CStr::from_ptr(s).to_string_lossy().into_owned())
            } else {
                None
            }
        }
    }

    fn enable_api_record(&self, domain: u32, cbid: u32, enable: bool) -> Result<(), CuptiError> {
        let f = if domain == 1 { self.enable_driver } else { self.enable_runtime };
        // SAFETY: plain value arguments.
        self.check("cuptiActivityEnable{Runtime,Driver}Api", unsafe { f(cbid, enable as u8) })
    }

    fn graph_ids(&self, handle: GraphHandle) -> u64 {
        let (mut id32, mut id64) = (0u32, 0u64);
        // SAFETY: a handle CUPTI passed in the current callback (live during it), a valid out-pointer; CUPTI
        // returns an error for a handle it does not know, and the id stays 0.
        unsafe {
            match handle {
                GraphHandle::Graph(0) | GraphHandle::Node(0) | GraphHandle::Exec(0) => {}
                GraphHandle::Graph(g) => {
                    if let Some(f) = self.graph_id {
                        f(g as *mut c_void, &mut id32);
                    }
                }
                GraphHandle::Exec(e) => {
                    if let Some(f) = self.exec_id {
                        f(e as *mut c_void, &mut id32);
                    }
                }
                GraphHandle::Node(n) => {
                    if let Some(f) = self.node_id {
                        f(n as *mut c_void, &mut id64);
                    }
                }
            }
        }
        id64.max(u64::from(id32))
    }

    fn configure_um_counters(&self, counter_kinds: &[u32]) -> Result<(), CuptiError> {
        let mut configs: Vec<UmCounterConfig> = counter_kinds
            .iter()
            .map(|&kind| UmCounterConfig { scope: UM_SCOPE_ALL_DEVICES, kind, device_id: 0, enable: 1 })
            .collect();
        // SAFETY: `configs` holds `len` structs laid out as CUpti_ActivityUnifiedMemoryCounterConfig; CUPTI only
        // reads them during the call.
        self.check("cuptiActivityConfigureUnifiedMemoryCounter", unsafe {
            (self.configure_um)(configs.as_mut_ptr(), configs.len() as u32)
        })
    }

    fn origin(&self) -> String {
        self.path.display().to_string()
    }

    fn library_path(&self) -> Option<PathBuf> {
        Some(self.path.clone())
    }

    fn pc_sampling(&self) -> Result<Box<dyn PcCupti>, String> {
        Ok(Box::new(super::pc::Api::load(&self.path)?))
    }
}

/// A libcupti file already mapped into this process (PyTorch maps its own): using it avoids a second copy.
pub fn already_loaded() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| Path::new(p).file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libcupti.so")))
        .map(PathBuf::from)
}

/// Where libcupti usually is: CUDA toolkits (`CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda*`), the NVIDIA PyPI
/// wheels (`nvidia/cu13/lib`, `nvidia/cuda_cupti/lib` in virtualenvs, conda, user and system site-packages) and the
/// distribution's library folders. Newer sonames first.
pub fn candidates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = std::env::var_os(var) {
            let root = PathBuf::from(root);
            dirs.push(root.join("extras/CUPTI/lib64"));
            dirs.push(root.join("lib64"));
            dirs.push(root.join("lib"));
        }
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(r) = std::env::var_os(var) {
            roots.push(PathBuf::from(r));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".local"));
    }
    roots.extend(["/usr/local", "/usr", "/opt/conda"].iter().map(PathBuf::from));
    for root in &roots {
        for lib in ["lib", "lib64"] {
            let Ok(entries) = std::fs::read_dir(root.join(lib)) else { continue };
            let mut pys: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python3")))
                .collect();
            pys.sort();
            pys.reverse();
            for py in pys {
                for site in ["site-packages", "dist-packages"] {
                    for sub in ["nvidia/cu13/lib", "nvidia/cuda_cupti/lib"] {
                        dirs.push(py.join(site).join(sub));
                    }
                }
            }
        }
    }
    let mut toolkits: Vec<PathBuf> = std::fs::read_dir("/usr/local")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("cuda")))
                .collect()
        })
        .unwrap_or_default();
    toolkits.sort();
    toolkits.reverse();
    for t in toolkits {
        dirs.push(t.join("extras/CUPTI/lib64"));
        dirs.push(t.join("lib64"));
    }
    dirs.push("/usr/lib/x86_64-linux-gnu".into());
    dirs.push("/usr/lib64".into());
    let mut out = Vec::new();
    for d in dirs {
        for name in ["libcupti.so.13", "libcupti.so.12", "libcupti.so"] {
            let p = d.join(name);
            if p.exists() && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Chooses the libcupti to use: the override, else one already in the process, else the first candidate, else
/// the dynamic linker's own search for the soname.
pub fn locate(override_path: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = override_path {
        return if p.exists() {
            Ok(p.to_path_buf())
        } else {
            Err(format!("CUTR_CUPTI_LIB points at {}, which does not exist", p.display()))
        };
    }
    if let Some(p) = already_loaded() {
        return Ok(p);
    }
    if let Some(p) = candidates().into_iter().next() {
        return Ok(p);
    }
    // Last resort: the dynamic linker's own search (LD_LIBRARY_PATH, ld.so.cache) for the soname.
    Ok(PathBuf::from(FALLBACK_SONAME))
}

/// What [`locate`] returns when it found no file: left to the dynamic linker.
pub const FALLBACK_SONAME: &str = "libcupti.so.13";

/// The message for a libcupti that could not be loaded.
pub fn not_found_message(load_error: &str) -> String {
    format!(
        "libcupti was not found ({load_error}; looked in CUDA_HOME, /usr/local/cuda*, the nvidia PyPI wheels and the \
         system library folders); set CUTR_CUPTI_LIB to its path"
    )
}
