//! API calls are named as the program's CUDA runtime names them: a CUDA 12 runtime recorded through CUPTI 13 keeps
//! its `_v2` functions (`cudaGetDeviceProperties_v2`), a CUDA 13 runtime gets CUPTI 13's names, and a name the file
//! recorded itself wins over the built-in tables.

use std::sync::Arc;

use cutr_format::SessionMetadata;
use cutr_model::{ProcId, Process, Trace};

/// One file whose application ran CUDA runtime `runtime_version`, with the (domain, cbid, name) table `names`.
fn trace(runtime_version: i32, names: Vec<(u32, u32, String)>) -> Trace {
    let api_names = names.iter().enumerate().map(|(i, (d, c, _))| ((*d, *c), i as u32)).collect();
    let meta = SessionMetadata { cuda_runtime_version: runtime_version, callback_names: names, ..Default::default() };
    let mut t = Trace::default();
    t.processes.push(Process {
        path: "names.cutr".into(),
        meta: Arc::new(meta),
        pid: 1,
        api_names,
        ..Default::default()
    });
    t
}

/// `cudaGetDeviceProperties`' cbid since CUDA 12.0 (`_v2` in CUDA 12's header, plain in 13's).
const GET_DEVICE_PROPERTIES: u32 = 440;
/// `cudaStreamGetCaptureInfo_v3` in CUDA 12.3-12.9.
const GET_CAPTURE_INFO: u32 = 461;
const LAUNCH_KERNEL: u32 = 211;

#[test]
fn a_cuda12_runtime_through_cupti13_keeps_its_v2_names() {
    let cupti13 = |cbid| (2, cbid, cutr_schema::callbacks::raw_name(2, cbid).unwrap().to_string());
    let names = vec![cupti13(GET_DEVICE_PROPERTIES), cupti13(GET_CAPTURE_INFO), cupti13(LAUNCH_KERNEL)];
    let (proc, runtime) = (ProcId(0), false);

    let cuda12 = trace(12080, names.clone());
    assert_eq!(cuda12.api_name_of(proc, runtime, GET_DEVICE_PROPERTIES), "cudaGetDeviceProperties_v2");
    assert_eq!(cuda12.api_name_of(proc, runtime, GET_CAPTURE_INFO), "cudaStreamGetCaptureInfo_v3");
    assert_eq!(cuda12.api_name_of(proc, runtime, LAUNCH_KERNEL), "cudaLaunchKernel");
    // The driver's names do not depend on the runtime.
    assert_eq!(cuda12.api_name_of(proc, true, 1), "cuInit");

    let cuda13 = trace(13000, names.clone());
    assert_eq!(cuda13.api_name_of(proc, runtime, GET_DEVICE_PROPERTIES), "cudaGetDeviceProperties");
    // Runtime unknown (a static runtime): CUPTI's name as recorded.
    assert_eq!(trace(0, names).api_name_of(proc, runtime, GET_DEVICE_PROPERTIES), "cudaGetDeviceProperties");

    // A file recorded through CUPTI 12 carries CUDA 12's name itself: kept, not renamed twice.
    let recorded = vec![(2, GET_DEVICE_PROPERTIES, "cudaGetDeviceProperties_v2_v12000".to_string())];
    assert_eq!(trace(12090, recorded).api_name_of(proc, runtime, GET_DEVICE_PROPERTIES), "cudaGetDeviceProperties_v2");
    // No table in the file: the built-in one, renamed the same way.
    assert_eq!(
        trace(12090, Vec::new()).api_name_of(proc, runtime, GET_DEVICE_PROPERTIES),
        "cudaGetDeviceProperties_v2"
    );
}
