//! Versions and device properties from the CUDA driver and runtime already loaded by the application. Nothing
//! here loads CUDA: when the libraries are not in the process, the answers are simply unknown.

use std::ffi::{CStr, c_char, c_int};

use cutr_format::Device;

/// A symbol from a library already mapped into the process (RTLD_NOLOAD: never load one).
fn loaded_symbol<T: Copy>(libs: &[&str], name: &str) -> Option<T> {
    for lib in libs {
        // SAFETY: RTLD_NOLOAD only finds libraries already loaded; the handle is leaked so the symbol stays valid.
        let l = unsafe { libloading::os::unix::Library::open(Some(*lib), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if let Ok(l) = l {
            let mut n = name.as_bytes().to_vec();
            n.push(0);
            // SAFETY: the caller names the C signature of the symbol through T.
            let f = unsafe { l.get::<T>(n.as_slice()) }.ok().map(|s| *s);
            std::mem::forget(l);
            if f.is_some() {
                return f;
            }
        }
    }
    None
}

const LIBCUDA: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// `cuDriverGetVersion` (e.g. 13000), if libcuda is loaded.
pub fn driver_version() -> Option<i32> {
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = loaded_symbol(LIBCUDA, "cuDriverGetVersion")?;
    let mut v = 0;
    // SAFETY: valid out-pointer; callable before cuInit.
    (unsafe { f(&mut v) } == 0).then_some(v)
}

/// `cudaRuntimeGetVersion` of the application's CUDA runtime, when it is a shared library we can see.
pub fn runtime_version() -> Option<i32> {
    let f: unsafe extern "C" fn(*mut c_int) -> c_int =
        loaded_symbol(&["libcudart.so.13", "libcudart.so.12", "libcudart.so"], "cudaRuntimeGetVersion")?;
    let mut v = 0;
    // SAFETY: valid out-pointer; does not initialize a context.
    (unsafe { f(&mut v) } == 0).then_some(v)
}

/// Whether device `ordinal`'s primary context is active (`cuDevicePrimaryCtxGetState`); `None` when the driver
/// cannot say. PM sampling must be stopped while it is: after `cudaDeviceReset` or the runtime's teardown at exit,
/// stopping it corrupted the heap on the H100.
pub fn primary_context_active(ordinal: u32) -> Option<bool> {
    type Get = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
    type State = unsafe extern "C" fn(c_int, *mut u32, *mut c_int) -> c_int;
    let get: Get = loaded_symbol(LIBCUDA, "cuDeviceGet")?;
    let state: State = loaded_symbol(LIBCUDA, "cuDevicePrimaryCtxGetState")?;
    let (mut dev, mut flags, mut active) = (0, 0u32, 0);
    // SAFETY: valid out-pointers; neither call needs a context.
    unsafe {
        if get(&mut dev, ordinal as c_int) != 0 || state(dev, &mut flags, &mut active) != 0 {
            return None;
        }
    }
    Some(active != 0)
}

/// Properties of every device, through the driver API. Called when recording ends (activity kinds already
/// disabled, so these calls leave no records).
pub fn devices() -> Vec<Device> {
    type GetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
    type Get = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
    type Name = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
    type Attr = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
    type Mem = unsafe extern "C" fn(*mut usize, c_int) -> c_int;
    type Uuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> c_int;
    type Pci = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
    let (Some(count), Some(get), Some(name), Some(attr), Some(mem)) = (
        loaded_symbol::<GetCount>(LIBCUDA, "cuDeviceGetCount"),
        loaded_symbol::<Get>(LIBCUDA, "cuDeviceGet"),
        loaded_symbol::<Name>(LIBCUDA, "cuDeviceGetName"),
        loaded_symbol::<Attr>(LIBCUDA, "cuDeviceGetAttribute"),
        loaded_symbol::<Mem>(LIBCUDA, "cuDeviceTotalMem_v2"),
    ) else {
        return Vec::new();
    };
    let uuid = loaded_symbol::<Uuid>(LIBCUDA, "cuDeviceGetUuid_v2")
        .or_else(|| loaded_symbol::<Uuid>(LIBCUDA, "cuDeviceGetUuid"));
    let pci = loaded_symbol::<Pci>(LIBCUDA, "cuDeviceGetPCIBusId");
    // CUdevice_attribute values (cuda.h) of the properties converters show.
    const ATTRS: &[(&str, c_int)] = &[
        ("maxThreadsPerBlock", 1),
        ("sharedMemPerBlock", 8),
        ("warpSize", 10),
        ("regsPerBlock", 12),
        ("clockRateKHz", 13),
        ("multiProcessorCount", 16),
        ("computeMajor", 75),
        ("computeMinor", 76),
        ("memoryClockRateKHz", 36),
        ("globalMemoryBusWidth", 37),
        ("l2CacheSize", 38),
        ("maxThreadsPerMultiprocessor", 39),
        ("sharedMemPerMultiprocessor", 81),
        ("regsPerMultiprocessor", 82),
        ("sharedMemPerBlockOptin", 97),
        ("maxBlocksPerMultiprocessor", 106),
        ("reservedSharedMemPerBlock", 111),
        ("pciBusId", 33),
        ("pciDeviceId", 34),
    ];
    let mut n: c_int = 0;
    // SAFETY: valid out-pointers; the driver is initialized (CUDA called us) and these need no context.
    unsafe {
        if count(&mut n) != 0 {
            return Vec::new();
        }
        (0..n)
            .filter_map(|ordinal| {
                let mut dev: c_int = 0;
                if get(&mut dev, ordinal) != 0 {
                    return None;
                }
                let mut buf = [0 as c_char; 256];
                let nm = if name(buf.as_mut_ptr(), 255, dev) == 0 {
                    CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
                } else {
                    String::new()
                };
                let mut props = Vec::new();
                for (k, id) in ATTRS {
                    let mut v: c_int = 0;
                    if attr(&mut v, *id, dev) == 0 {
                        props.push((k.to_string(), v.to_string()));
                    }
                }
                let prop = |k: &str| props.iter().find(|p| p.0 == k).and_then(|p| p.1.parse::<i32>().ok()).unwrap_or(0);
                let (major, minor, sms) = (prop("computeMajor"), prop("computeMinor"), prop("multiProcessorCount"));
                let mut total = 0usize;
                let _ = mem(&mut total, dev);
                let mut u = [0u8; 16];
                let uuid_bytes = match uuid {
                    Some(f) if f(&mut u, dev) == 0 => u.to_vec(),
                    _ => Vec::new(),
                };
                let mut pb = [0 as c_char; 64];
                let pci_id = match pci {
                    Some(f) if f(pb.as_mut_ptr(), 63, dev) == 0 => {
                        CStr::from_ptr(pb.as_ptr()).to_string_lossy().into_owned()
                    }
                    _ => String::new(),
                };
                Some(Device {
                    id: ordinal as u32,
                    name: nm,
                    uuid: uuid_bytes,
                    pci_bus_id: pci_id,
                    compute_major: major,
                    compute_minor: minor,
                    multiprocessors: sms,
                    total_memory_bytes: total as u64,
                    properties: props,
                })
            })
            .collect()
    }
}
