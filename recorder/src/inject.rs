//! The entry points CUDA and NVTX look up in an injection library (`CUDA_INJECTION64_PATH`,
//! `NVTX_INJECTION64_PATH`). Both only ever return: a failure prints one line and leaves the application
//! untraced.

use std::ffi::{c_int, c_void};
use std::panic::catch_unwind;

use crate::config::Config;
use crate::error::RecorderError;
use crate::ffi::cupti::{self, LibCupti};

/// Called by the CUDA driver during `cuInit` when this library is named by `CUDA_INJECTION64_PATH`.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> c_int {
    let _ = catch_unwind(|| {
        let quiet = std::env::var("CUTR_QUIET").is_ok_and(|v| v == "1");
        match start_from_env() {
            Ok(path) => {
                if !quiet {
                    eprintln!("cutr: recording CUDA activity of pid {} to {}", std::process::id(), path);
                }
                report_status(&format!("recording {path}"));
            }
            Err(e) => {
                eprintln!("cutr: not recording: {e}; the application runs untraced");
                report_status(&format!("failed {e}"));
            }
        }
    });
    // CUDA treats 0 as a failed injection; the application must run either way.
    1
}

/// Tells `cupti-record` how this process's start went: one file per process in the folder it names in
/// `CUTR_STATUS_DIR`, so that it can say why no recording was written. Best effort: nothing else depends on it.
fn report_status(line: &str) {
    if let Some(dir) = std::env::var_os("CUTR_STATUS_DIR") {
        let _ = std::fs::write(std::path::Path::new(&dir).join(std::process::id().to_string()), line);
    }
}

fn start_from_env() -> Result<String, RecorderError> {
    let config = Config::from_env().map_err(RecorderError::Config)?;
    // The exit hook ends the recording; the handle is not needed after this.
    let rec = crate::Recorder::start(config)?;
    Ok(rec.path().display().to_string())
}

/// Hands NVTX to CUPTI: NVTX calls this when `NVTX_INJECTION64_PATH` names this library (as `cupti-record`
/// sets it), and CUPTI's own `InitializeInjectionNvtx2` turns NVTX ranges into MARKER records. Forwarding from
/// here lets the same libcupti the recorder uses (the application's own, when it has one) serve NVTX.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjectionNvtx2(get_export_table: *mut c_void) -> c_int {
    forward_nvtx(b"InitializeInjectionNvtx2\0", get_export_table)
}

/// NVTX extension payloads (CUPTI's `InitializeInjectionNvtxExtension`).
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjectionNvtxExtension(arg: *mut c_void) -> c_int {
    forward_nvtx(b"InitializeInjectionNvtxExtension\0", arg)
}

fn forward_nvtx(symbol: &[u8], arg: *mut c_void) -> c_int {
    let arg = arg as usize;
    catch_unwind(|| {
        let over = std::env::var_os("CUTR_CUPTI_LIB").map(std::path::PathBuf::from);
        let path = cupti::locate(over.as_deref()).ok()?;
        // Loads the library for good (it is never unloaded) and checks it is a real libcupti.
        LibCupti::load(&path).ok()?;
        let f = cupti::nvtx_injection(&path, symbol).ok()?;
        // SAFETY: CUPTI's NVTX injection entry point, given the argument NVTX passed us.
        Some(unsafe { f(arg as *mut c_void) })
    })
    .ok()
    .flatten()
    .unwrap_or(0)
}
