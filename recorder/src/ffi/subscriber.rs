//! The one CUPTI callback subscriber of the recorder.
//!
//! CUPTI gives its callback API to one subscriber per process. Every part of the recorder that needs callbacks
//! (capture ranges, PC sampling's module and context callbacks, PM sampling's context callbacks, and later users)
//! registers here with the callback ids it wants and an [`EventUser`]; the subscriber enables the union of those
//! ids and hands each callback, decoded into an [`Event`], to the users that asked for it. No user reads CUPTI's
//! callback structs itself: the decoding (and its `unsafe`) is here.
//!
//! Users register before anything they start can need a callback (the session registers them all while it
//! starts, before CUDA makes a context). The list of users is append-only and read without a lock on CUPTI's
//! callback path, which runs on the application's threads.

use std::ffi::{CStr, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::cupti::sys as cs;

use super::cupti::{Cupti, CuptiError, GraphHandle};

/// `CUpti_CallbackDomain`.
pub const DOMAIN_DRIVER: u32 = 1;
pub const DOMAIN_RUNTIME: u32 = 2;
pub const DOMAIN_RESOURCE: u32 = 3;
pub const DOMAIN_NVTX: u32 = 5;

/// Resource callback ids (`CUpti_CallbackIdResource`).
pub const CBID_CONTEXT_CREATED: u32 = cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_CREATED as u32;
pub const CBID_CONTEXT_DESTROY_STARTING: u32 =
    cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING as u32;
pub const CBID_MODULE_LOADED: u32 = cs::CUpti_CallbackIdResource::CUPTI_CBID_RESOURCE_MODULE_LOADED as u32;
/// The graph resource callbacks (cupti_callbacks.h of CUDA 13.0; 22 and 23 are new in 13.0). Each passes a
/// `CUpti_GraphData`.
pub const CBID_GRAPH_CREATED: u32 = 9;
pub const CBID_GRAPH_CLONED: u32 = 11;
pub const CBID_GRAPHNODE_CREATE_STARTING: u32 = 12;
pub const CBID_GRAPHNODE_DEPENDENCY_CREATED: u32 = 15;
pub const CBID_GRAPHEXEC_CREATED: u32 = 18;
pub const CBID_GRAPHNODE_CLONED: u32 = 20;
pub const CBID_GRAPH_NODE_UPDATED: u32 = 22;
pub const CBID_GRAPH_NODE_SET_PARAMS: u32 = 23;

/// API callback ids the recorder uses (cupti_runtime_cbid.h, cupti_driver_cbid.h, cupti_nvtx_cbid.h of CUDA 13.0;
/// stable across versions, checked against the headers in the tests).
pub const CBID_CUDA_PROFILER_START: u32 = 171;
pub const CBID_CUDA_PROFILER_STOP: u32 = 172;
pub const CBID_CU_PROFILER_START: u32 = 308;
pub const CBID_CU_PROFILER_STOP: u32 = 309;
pub const CBID_NVTX_RANGE_PUSH_A: u32 = 8;
pub const CBID_NVTX_RANGE_POP: u32 = 11;
pub const CBID_NVTX_DOMAIN_RANGE_PUSH_EX: u32 = 33;
pub const CBID_NVTX_DOMAIN_RANGE_POP: u32 = 34;
pub const CBID_NVTX_DOMAIN_CREATE_A: u32 = 41;

/// nvtxEventAttributes_t (versions 2 and 3): version u16, size u16, category u32, colorType i32, color u32,
/// payloadType i32, reserved0 i32, payload 8 bytes at 24, `messageType` i32 at 32, `message` pointer at 40.
const ATTR_MESSAGE_TYPE_OFFSET: usize = 32;
const ATTR_MESSAGE_OFFSET: usize = 40;
/// NVTX_MESSAGE_TYPE_ASCII.
const MESSAGE_TYPE_ASCII: i32 = 1;

/// A graph callback's `CUpti_GraphData`, its handles turned into CUPTI's ids (0 where the handle is null).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphData {
    pub graph: u32,
    pub original_graph: u32,
    pub node: u64,
    pub original_node: u64,
    /// `CUgraphNodeType` (meaningful at node creation's start only: CUDA 13.0 reports 0 at its end).
    pub node_type: u32,
    pub dependency: u64,
    pub exec: u32,
}

/// A CUDA context, as CUPTI names it in callbacks (an address; compared, never dereferenced above `ffi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContextHandle(pub usize);

/// Whether an API callback comes as the function is entered or as it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    Enter,
    Exit,
}

/// A callback, decoded. Borrowed data is valid only during the call.
#[derive(Debug)]
pub enum Event<'a> {
    /// A runtime or driver API function (`domain` 2 or 1) entered or returned.
    Api { domain: u32, cbid: u32, site: Site },
    /// `nvtxRangePushA` in the default domain; the message when it is ASCII.
    NvtxPush { message: Option<&'a CStr> },
    /// `nvtxRangePop` in the default domain.
    NvtxPop,
    /// `nvtxDomainCreateA`: the domain's name and the handle NVTX returns for it.
    NvtxDomainCreate { name: Option<&'a CStr>, handle: usize },
    /// `nvtxDomainRangePushEx`: the domain handle and the message when it is ASCII.
    NvtxDomainPush { handle: usize, message: Option<&'a CStr> },
    /// `nvtxDomainRangePop`.
    NvtxDomainPop { handle: usize },
    /// A context was made (on the thread that made it).
    ContextCreated { context: ContextHandle },
    /// A context is about to be destroyed (it still lives during the callback).
    ContextDestroyStarting { context: ContextHandle },
    /// A module was loaded into a context: CUPTI's module id and the cubin's bytes.
    ModuleLoaded { context: ContextHandle, module_id: u32, cubin: &'a [u8] },
    /// A graph resource callback (`cbid` one of the `CBID_GRAPH*` ids), on the thread whose CUDA call made it.
    Graph { cbid: u32, data: GraphData },
}

/// A part of the recorder that takes callbacks. Called on the application's threads (and CUPTI's): it must not
/// block for long or call back into the application.
pub trait EventUser: Send + Sync {
    fn on_event(&self, event: &Event<'_>);
}

/// A user and the callbacks it asked for.
struct Registration {
    wants: Vec<(u32, u32)>,
    user: &'static dyn EventUser,
}

/// Most users at once (capture ranges, PC sampling, PM sampling, and room for those to come).
const MAX_USERS: usize = 8;

/// The subscriber. Leaked on purpose: CUPTI may call back until it is unsubscribed, and late.
pub struct Subscriber {
    cupti: &'static dyn Cupti,
    handle: Mutex<Option<usize>>,
    users: [OnceLock<Registration>; MAX_USERS],
    count: AtomicUsize,
    /// The callback ids enabled so far (their union over the users).
    enabled: Mutex<Vec<(u32, u32)>>,
}

impl Subscriber {
    /// Subscribes to CUPTI. Fails with `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED` where another CUPTI client
    /// holds the callback API: the session's check that it is alone.
    pub fn subscribe(cupti: &'static dyn Cupti) -> Result<&'static Subscriber, CuptiError> {
        let sub: &'static Subscriber = Box::leak(Box::new(Subscriber {
            cupti,
            handle: Mutex::new(None),
            users: Default::default(),
            count: AtomicUsize::new(0),
            enabled: Mutex::new(Vec::new()),
        }));
        let handle = cupti.subscribe(dispatch, sub as *const Subscriber as usize)?;
        *sub.handle.lock().unwrap() = Some(handle);
        Ok(sub)
    }

    /// Registers `user` for the `(domain, cbid)` pairs in `wants` and enables them. On failure nothing of this
    /// user is dispatched.
    pub fn register(&self, wants: &[(u32, u32)], user: &'static dyn EventUser) -> Result<(), CuptiError> {
        let handle = self.handle.lock().unwrap().ok_or_else(|| CuptiError {
            call: "cuptiEnableCallback",
            code: 0,
            name: "the recorder's subscriber has ended".into(),
        })?;
        {
            let mut enabled = self.enabled.lock().unwrap();
            for &(domain, cbid) in wants {
                if !enabled.contains(&(domain, cbid)) {
                    self.cupti.enable_callback(handle, domain, cbid, true)?;
                    enabled.push((domain, cbid));
                }
            }
        }
        let slot = self.count.fetch_add(1, Ordering::AcqRel);
        let registration = Registration { wants: wants.to_vec(), user };
        if slot >= MAX_USERS || self.users[slot].set(registration).is_err() {
            return Err(CuptiError { call: "register", code: 0, name: format!("more than {MAX_USERS} users") });
        }
        Ok(())
    }

    /// Whether any user registered.
    pub fn has_users(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// Unsubscribes (once): no callback is dispatched after this returns, except one already under way.
    pub fn unsubscribe(&self) {
        if let Some(handle) = self.handle.lock().unwrap().take() {
            let _ = self.cupti.unsubscribe(handle);
        }
    }

    fn dispatch(&self, domain: u32, cbid: u32, event: &Event<'_>) {
        let n = self.count.load(Ordering::Acquire).min(MAX_USERS);
        for slot in &self.users[..n] {
            if let Some(r) = slot.get()
                && r.wants.contains(&(domain, cbid))
            {
                r.user.on_event(event);
            }
        }
    }
}

/// CUPTI's callback: decodes and dispatches. Never unwinds into CUPTI.
unsafe extern "C" fn dispatch(user: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    if user.is_null() || data.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `user` is the leaked subscriber given to cuptiSubscribe; `data` is CUPTI's callback data for
        // `domain` and `cbid`, valid during this call.
        unsafe {
            let sub = &*(user as *const Subscriber);
            if let Some(event) = decode(sub.cupti, domain, cbid, data) {
                sub.dispatch(domain, cbid, &event);
            }
        }
    }));
}

/// A NUL-terminated string, or `None` for a null pointer.
///
/// # Safety
/// `p` is null or a NUL-terminated string valid for `'a`.
unsafe fn c_str<'a>(p: *const c_char) -> Option<&'a CStr> {
    // SAFETY: the caller's.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// Reads CUPTI's callback data as the event it is; `None` for callbacks the recorder does not use.
///
/// # Safety
/// `data` is CUPTI's callback data for `domain` and `cbid` (cupti_callbacks.h, cupti_nvtx_cbid.h), valid for `'a`.
/// `cupti` names the handles of graph callbacks.
pub unsafe fn decode<'a>(cupti: &dyn Cupti, domain: u32, cbid: u32, data: *const c_void) -> Option<Event<'a>> {
    // SAFETY: the caller's; each struct is read as cupti_callbacks.h lays it out for the domain.
    unsafe {
        match domain {
            DOMAIN_RUNTIME | DOMAIN_DRIVER => {
                // CUpti_CallbackData starts with the callback site, read as the integer it is.
                let site = if *(data as *const u32) == 0 { Site::Enter } else { Site::Exit };
                Some(Event::Api { domain, cbid, site })
            }
            DOMAIN_RESOURCE => {
                let r = &*(data as *const cs::CUpti_ResourceData);
                let context = ContextHandle(r.context as usize);
                match cbid {
                    CBID_CONTEXT_CREATED => Some(Event::ContextCreated { context }),
                    CBID_CONTEXT_DESTROY_STARTING => Some(Event::ContextDestroyStarting { context }),
                    CBID_MODULE_LOADED if !r.resourceDescriptor.is_null() => {
                        let m = &*(r.resourceDescriptor as *const cs::CUpti_ModuleResourceData);
                        let cubin = if m.pCubin.is_null() || m.cubinSize == 0 {
                            &[][..]
                        } else {
                            std::slice::from_raw_parts(m.pCubin.cast::<u8>(), m.cubinSize)
                        };
                        Some(Event::ModuleLoaded { context, module_id: m.moduleId, cubin })
                    }
                    CBID_GRAPH_CREATED..=CBID_GRAPH_NODE_SET_PARAMS if !r.resourceDescriptor.is_null() => {
                        let g = &*(r.resourceDescriptor as *const GraphDataRaw);
                        let id = |h| cupti.graph_ids(h);
                        let data = GraphData {
                            graph: id(GraphHandle::Graph(g.graph)) as u32,
                            original_graph: id(GraphHandle::Graph(g.original_graph)) as u32,
                            node: id(GraphHandle::Node(g.node)),
                            original_node: id(GraphHandle::Node(g.original_node)),
                            node_type: g.node_type,
                            dependency: id(GraphHandle::Node(g.dependency)),
                            exec: id(GraphHandle::Exec(g.exec)) as u32,
                        };
                        Some(Event::Graph { cbid, data })
                    }
                    _ => None,
                }
            }
            DOMAIN_NVTX => decode_nvtx(cbid, &*(data as *const cs::CUpti_NvtxData)),
            _ => None,
        }
    }
}

/// `CUpti_GraphData` as cupti_callbacks.h lays it out: six handles and the node type (an enum, 32 bits, padded).
#[repr(C)]
struct GraphDataRaw {
    graph: usize,
    original_graph: usize,
    node: usize,
    original_node: usize,
    node_type: u32,
    dependency: usize,
    exec: usize,
}

/// The NVTX callbacks: `functionParams` points at the function's parameters in order.
///
/// # Safety
/// As [`decode`], for the NVTX domain.
unsafe fn decode_nvtx<'a>(cbid: u32, d: &cs::CUpti_NvtxData) -> Option<Event<'a>> {
    let params = d.functionParams;
    if params.is_null() && cbid != CBID_NVTX_RANGE_POP {
        return None;
    }
    // SAFETY: the caller's; each parameter struct is read as cupti_nvtx_cbid.h lays it out.
    unsafe {
        match cbid {
            // nvtxRangePushA_params { const char* message }.
            CBID_NVTX_RANGE_PUSH_A => Some(Event::NvtxPush { message: c_str(*(params as *const *const c_char)) }),
            CBID_NVTX_RANGE_POP => Some(Event::NvtxPop),
            // nvtxDomainCreateA_params { const char* name }; the handle is the return value.
            CBID_NVTX_DOMAIN_CREATE_A => {
                let ret = d.functionReturnValue as *const usize;
                let handle = if ret.is_null() { 0 } else { *ret };
                Some(Event::NvtxDomainCreate { name: c_str(*(params as *const *const c_char)), handle })
            }
            // nvtxDomainRangePushEx_params { domain handle, const nvtxEventAttributes_t* }.
            CBID_NVTX_DOMAIN_RANGE_PUSH_EX => {
                let handle = *(params as *const usize);
                let attr = *((params as *const *const u8).add(1));
                let ascii =
                    !attr.is_null() && *(attr.add(ATTR_MESSAGE_TYPE_OFFSET) as *const i32) == MESSAGE_TYPE_ASCII;
                let message =
                    if ascii { c_str(*(attr.add(ATTR_MESSAGE_OFFSET) as *const *const c_char)) } else { None };
                Some(Event::NvtxDomainPush { handle, message })
            }
            // nvtxDomainRangePop_params { domain handle }.
            CBID_NVTX_DOMAIN_RANGE_POP => Some(Event::NvtxDomainPop { handle: *(params as *const usize) }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The callback ids are those of CUDA 13.0's headers (from the PyPI wheel the test set-up installs).
    #[test]
    fn callback_ids_match_nvidias_headers() {
        let cache = std::env::var_os("CUTR_CACHE")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache"));
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
        let res = header("cupti_callbacks.h");
        for (name, cbid) in [
            ("CUPTI_CBID_RESOURCE_GRAPH_CREATED", CBID_GRAPH_CREATED),
            ("CUPTI_CBID_RESOURCE_GRAPH_CLONED", CBID_GRAPH_CLONED),
            ("CUPTI_CBID_RESOURCE_GRAPHNODE_CREATE_STARTING", CBID_GRAPHNODE_CREATE_STARTING),
            ("CUPTI_CBID_RESOURCE_GRAPHNODE_DEPENDENCY_CREATED", CBID_GRAPHNODE_DEPENDENCY_CREATED),
            ("CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED", CBID_GRAPHEXEC_CREATED),
            ("CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED", CBID_GRAPHNODE_CLONED),
            ("CUPTI_CBID_RESOURCE_GRAPH_NODE_UPDATED", CBID_GRAPH_NODE_UPDATED),
            ("CUPTI_CBID_RESOURCE_GRAPH_NODE_SET_PARAMS", CBID_GRAPH_NODE_SET_PARAMS),
        ] {
            assert_eq!(value(&res, name), cbid, "{name}");
        }
        // CUpti_GraphData: six pointers and a 32-bit enum, padded, in this order.
        let layout = res.split("} CUpti_GraphData;").next().unwrap().rsplit("typedef struct {").next().unwrap();
        let members: Vec<&str> = layout
            .lines()
            .map(str::trim)
            .filter(|l| l.ends_with(';'))
            .map(|l| l.trim_end_matches(';').split_whitespace().last().unwrap())
            .collect();
        assert_eq!(members, ["graph", "originalGraph", "node", "originalNode", "nodeType", "dependency", "graphExec"]);
        assert_eq!(std::mem::size_of::<GraphDataRaw>(), 56);
    }
}
