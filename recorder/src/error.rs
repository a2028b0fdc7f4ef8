//! Why a recording could not start or finish. Every one of these leaves the application running untraced.

use std::path::PathBuf;

use thiserror::Error;

use crate::config::ConfigError;
use crate::ffi::cupti::CuptiError;

#[derive(Debug, Error)]
pub enum RecorderError {
    #[error("invalid configuration: {0}")]
    Config(ConfigError),
    #[error("{0}")]
    Library(String),
    #[error(
        "libcupti at {origin} reports CUPTI API version {api}; this recorder reads records of API 130001 (CUDA 13.0) \
         and 28 (CUDA 12.9) only"
    )]
    UnsupportedCupti { api: u32, origin: String },
    #[error(
        "another CUPTI client is already attached to this process (Nsight Systems, PyTorch's profiler, DCGM or \
         another injection library); CUPTI allows only one"
    )]
    OtherClient,
    #[error("{0}")]
    Cupti(CuptiError),
    #[error("cannot create {path}: {err}")]
    Output { path: PathBuf, err: std::io::Error },
    #[error("cannot write {path}: {err}")]
    Write { path: PathBuf, err: cutr_format::FormatError },
    #[error("cannot start a thread: {0}")]
    Thread(String),
    #[error("a recording is already running in this process")]
    AlreadyRecording,
    #[error("none of the requested activity kinds could be enabled")]
    NothingEnabled,
    #[error("no recording is running")]
    NotRecording,
    #[error("dump failed: {0}")]
    Dump(String),
    #[error("another control request held the recording for too long")]
    ControlBusy,
}
