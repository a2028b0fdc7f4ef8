//! Records CUDA activity through CUPTI into `.cutr` files.
//!
//! Three ways in:
//! - the injection library: CUDA loads this crate's `cdylib` through `CUDA_INJECTION64_PATH` and calls
//!   `InitializeInjection`, which reads `CUTR_*` variables ([`config::OPTIONS`]);
//! - the `cupti-record` launcher, which sets those variables and runs a command;
//! - the Rust API, [`Recorder`], for programs that start and stop recording themselves.
//!
//! Every failure (no libcupti, an unsupported CUPTI version, another CUPTI client, an unwritable output) is one
//! clear message, and the application runs on untraced.

pub mod config;
pub mod controls;
pub mod counters;
pub mod error;
pub mod exit;
pub mod fake;
pub mod ffi;
pub mod graph_context;
pub mod inject;
mod mappings;
pub mod pc_sampling;
pub mod pool;
mod session;
mod threads;
pub mod unified_memory;
pub mod units;

use std::path::Path;

pub use config::Config;
pub use error::RecorderError;
pub use session::Summary;

use crate::ffi::cupti::{self, Cupti, LibCupti};

/// A running recording. Dropping it does not stop it (the process exit does); call [`Recorder::stop`].
pub struct Recorder {
    session: &'static session::Session,
}

impl Recorder {
    /// Starts recording with the libcupti found by [`cupti::locate`] (or `config.cupti_library`).
    pub fn start(config: Config) -> Result<Recorder, RecorderError> {
        let path = cupti::locate(config.cupti_library.as_deref()).map_err(RecorderError::Library)?;
        let lib = LibCupti::load(&path).map_err(|e| {
            if path.as_os_str() == cupti::FALLBACK_SONAME {
                RecorderError::Library(cupti::not_found_message(&e))
            } else {
                RecorderError::Library(e)
            }
        })?;
        Recorder::start_with(Box::new(lib), config)
    }

    /// Starts recording through the given CUPTI (tests use [`fake::FakeCupti`]).
    pub fn start_with(cupti: Box<dyn Cupti>, config: Config) -> Result<Recorder, RecorderError> {
        exit::set_crash_timeout(config.crash_timeout);
        let session = session::start(cupti, config)?;
        exit::install();
        Ok(Recorder { session })
    }

    /// The file being written (with `Config::split`, the first part: `Summary::path` is the last).
    pub fn path(&self) -> &Path {
        &self.session.path
    }

    /// Flushes everything CUPTI holds, writes the footer and closes the file.
    pub fn stop(self) -> Result<Summary, RecorderError> {
        self.session.finish(exit::FINISH_TIMEOUT).ok_or(RecorderError::NotRecording)
    }

    /// Turns recording off (what CUPTI holds is flushed first); the file stays open. Marked in the file.
    pub fn pause(&self) -> Result<(), RecorderError> {
        self.session.set_recording(false).map(|_| ())
    }

    /// Turns recording on again (or for the first time, with `Config::start_paused`). Marked in the file.
    pub fn resume(&self) -> Result<(), RecorderError> {
        self.session.set_recording(true).map(|_| ())
    }

    /// Flushes everything CUPTI holds into the file now: the file as it stands is readable by every command.
    /// With `Config::ring`, writes the flight recorder's window to a file of its own and returns its path.
    pub fn dump(&self) -> Result<Option<std::path::PathBuf>, RecorderError> {
        self.session.dump()
    }

    /// Whether recording is on.
    pub fn is_recording(&self) -> bool {
        self.session.recording()
    }

    /// Buffers handed to CUPTI and not yet written (for tests and diagnostics).
    pub fn buffers_in_flight(&self) -> usize {
        self.session.pool.outstanding()
    }
}
