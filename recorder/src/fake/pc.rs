//! The fake CUPTI's PC Sampling API: it records every call the PC sampler makes, in order, for the test to read
//! ([`super::FakeHandle::pc_calls`]), and keeps which contexts are being sampled, so that the fake can refuse the
//! kernel activity kinds while one is (as CUPTI does: CUPTI_ERROR_NOT_COMPATIBLE). It writes no PCs: the buffers
//! stay empty (zero PCs; CUPTI's count of samples taken 0, or what `FakeHandle::set_pc_samples_per_drain` says), so
//! what reaches the file is the state machine's doing alone.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::ffi::pc::{ConfigRequest, Configured, PcCupti, PcError, SampleBuffer};
use crate::ffi::subscriber::ContextHandle;
use crate::pc_sampling::STALL_REASON_PREFIX;

use super::State;

/// The device every fake context is on (not 0, so that a sampler that never asked reads differently).
pub const FAKE_DEVICE: u32 = 1;

/// The stall-reason table of every fake context: `(CUPTI's index, name)`, with a `*_not_issued` twin and a
/// counter that is not a reason, as a real device's table has (the default set leaves both out).
pub fn fake_stall_reasons() -> Vec<(u32, String)> {
    let reasons = ["long_scoreboard", "long_scoreboard_not_issued", "wait", "selected"];
    let mut table: Vec<(u32, String)> =
        reasons.iter().zip(0..).map(|(name, i)| (i, format!("{STALL_REASON_PREFIX}{name}"))).collect();
    table.push((4, "smsp__pcsamp_sample_count".into()));
    table
}

/// The fake's cubin CRC: FNV-1a over the bytes, so equal cubins share a name and others (almost surely) do not.
pub fn fake_cubin_crc(cubin: &[u8]) -> u64 {
    cubin.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

pub(super) struct FakePc {
    pub(super) state: Arc<State>,
}

impl FakePc {
    fn log(&self, call: String) {
        self.state.pc_calls.lock().unwrap().push(call);
    }
}

impl PcCupti for FakePc {
    /// The fake's clock, not logged: it is read around every collection and says nothing of the state machine.
    fn now(&self) -> u64 {
        self.state.clock.fetch_add(1_000, Ordering::Relaxed)
    }

    fn context_id(&self, ctx: ContextHandle) -> Result<u32, String> {
        self.log(format!("context_id {:#x}", ctx.0));
        Ok(ctx.0 as u32)
    }

    fn device_id(&self, ctx: ContextHandle) -> Result<u32, String> {
        self.log(format!("device_id {:#x}", ctx.0));
        Ok(FAKE_DEVICE)
    }

    fn enable(&self, ctx: ContextHandle) -> Result<(), String> {
        self.log(format!("enable {:#x}", ctx.0));
        self.state.pc_sampling.lock().unwrap().push(ctx.0);
        Ok(())
    }

    fn stall_reasons(&self, ctx: ContextHandle) -> Result<Vec<(u32, String)>, String> {
        self.log(format!("stall_reasons {:#x}", ctx.0));
        Ok(fake_stall_reasons())
    }

    fn configure(&self, ctx: ContextHandle, request: ConfigRequest) -> Result<Configured, String> {
        self.log(format!("configure {:#x} {:?} {:?}", ctx.0, request.indices, request.period_log2));
        Ok(Configured::new(request))
    }

    fn get_data(&self, ctx: ContextHandle, buffer: &mut SampleBuffer) -> Result<(), PcError> {
        self.log(format!("get_data {:#x}", ctx.0));
        buffer.set_total_samples(self.state.pc_samples_per_drain.load(Ordering::Relaxed));
        Ok(())
    }

    fn disable(&self, ctx: ContextHandle, _configured: &mut Configured) -> Result<(), String> {
        self.log(format!("disable {:#x}", ctx.0));
        self.state.pc_sampling.lock().unwrap().retain(|&c| c != ctx.0);
        Ok(())
    }

    fn cubin_crc(&self, cubin: &[u8]) -> Result<u64, String> {
        self.log(format!("cubin_crc {} bytes", cubin.len()));
        Ok(fake_cubin_crc(cubin))
    }
}
